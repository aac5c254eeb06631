#!/bin/sh
# Runs every end-to-end test script in tests/e2e; each exits 0 (pass),
# 77 (skipped, with a reason on stderr) or anything else (fail). Each gets
# at most E2E_TIMEOUT seconds: a hung script fails alone instead of holding
# the whole run until CI gives up on it.
limit=${E2E_TIMEOUT:-900}
pass=0 fail=0 skip=0
for t in tests/e2e/*.sh; do
	[ "$t" = tests/e2e/lib.sh ] && continue
	[ -e "$t" ] || continue
	echo "== $t" >&2
	timeout -k 10 "$limit" sh "$t"; rc=$?
	case $rc in
	0) pass=$((pass + 1)) ;;
	77) skip=$((skip + 1)) ;;
	124|137) fail=$((fail + 1)); echo "FAIL: $t (still running after $limit s, killed)" >&2 ;;
	*) fail=$((fail + 1)); echo "FAIL: $t (exit $rc)" >&2 ;;
	esac
done
echo "e2e: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
