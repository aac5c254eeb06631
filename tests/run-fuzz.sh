#!/bin/sh
# Runs each libFuzzer target for a bounded time from its seed corpus.
secs=$1; shift
pass=0 fail=0
for f in "$@"; do
	name=$(basename "$f")
	corpus="${PAGODA_BUILD:-build}/fuzz/corpus-$name"
	mkdir -p "$corpus"
	# Seeds are made at run time (test data stays outside the repo).
	if [ -x "tests/fuzz/seed-$name.sh" ] && [ -z "${PAGODA_TESTDATA:-}" ]; then
		echo "SKIP: $name: seeds from test data (PAGODA_TESTDATA unset)" >&2
		[ -n "${PAGODA_SKIPLOG:-}" ] &&
			echo "fuzz $name: seeds from test data (PAGODA_TESTDATA unset)" >>"$PAGODA_SKIPLOG"
	fi
	[ -x "tests/fuzz/seed-$name.sh" ] && sh "tests/fuzz/seed-$name.sh" "$corpus"
	# Seeds kept in the tree (small request bodies and the like).
	[ -d "tests/fuzz/seeds-$name" ] && cp tests/fuzz/seeds-"$name"/* "$corpus"/
	if "$f" -artifact_prefix="${PAGODA_BUILD:-build}/fuzz/$name-" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 "$corpus" \
		> "${PAGODA_BUILD:-build}/fuzz/$name.log" 2>&1; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1)); echo "FAIL: $name, see ${PAGODA_BUILD:-build}/fuzz/$name.log" >&2
		tail -40 "${PAGODA_BUILD:-build}/fuzz/$name.log" >&2
	fi
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
