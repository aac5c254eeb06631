#!/bin/sh
# Runs every Check test binary given (SUITE names them: unit, integration);
# prints one summary line. Each binary gets at most UNIT_TIMEOUT seconds, so
# that a hang fails one suite rather than the whole run. The "SKIP: why"
# lines the tests print go to PAGODA_SKIPLOG too, for make check's count.
limit=${UNIT_TIMEOUT:-900}
suite=${SUITE:-unit}
pass=0 fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-run-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for t in "$@"; do
	# stderr reaches the terminal as it comes and a file for the skip log
	rm -f "$tmp/fifo" && mkfifo "$tmp/fifo"
	tee "$tmp/err" <"$tmp/fifo" >&2 &
	tp=$!
	timeout -k 10 "$limit" "$t" 2>"$tmp/fifo"; rc=$?
	wait $tp
	[ -n "${PAGODA_SKIPLOG:-}" ] &&
		sed -n "s|^SKIP: |$suite $(basename "$t"): |p" "$tmp/err" >>"$PAGODA_SKIPLOG"
	if [ $rc -eq 0 ]; then pass=$((pass + 1))
	elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then fail=$((fail + 1)); echo "FAIL: $t (still running after $limit s, killed)" >&2
	else fail=$((fail + 1)); echo "FAIL: $t" >&2; fi
done
echo "$suite: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
