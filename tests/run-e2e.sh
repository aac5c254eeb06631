#!/bin/sh
# Runs every end-to-end test script in tests/e2e; each exits 0 (pass),
# 77 (skipped, with a reason on stderr) or anything else (fail). Each gets
# at most E2E_TIMEOUT seconds: a hung script fails alone instead of holding
# the whole run until CI gives up on it. The "SKIP: why" lines go to
# PAGODA_SKIPLOG too, for make check's count.
limit=${E2E_TIMEOUT:-900}
pass=0 fail=0 skip=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-run-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for t in tests/e2e/*.sh; do
	[ "$t" = tests/e2e/lib.sh ] && continue
	[ -e "$t" ] || continue
	echo "== $t" >&2
	rm -f "$tmp/fifo" && mkfifo "$tmp/fifo"
	tee "$tmp/err" <"$tmp/fifo" >&2 &
	tp=$!
	timeout -k 10 "$limit" sh "$t" 2>"$tmp/fifo"; rc=$?
	wait $tp
	[ -n "${PAGODA_SKIPLOG:-}" ] &&
		sed -n "s|^SKIP: |e2e $(basename "$t" .sh): |p" "$tmp/err" >>"$PAGODA_SKIPLOG"
	case $rc in
	0) pass=$((pass + 1)) ;;
	77) skip=$((skip + 1)) ;;
	124|137) fail=$((fail + 1)); echo "FAIL: $t (still running after $limit s, killed)" >&2 ;;
	*) fail=$((fail + 1)); echo "FAIL: $t (exit $rc)" >&2 ;;
	esac
done
echo "e2e: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
