#!/bin/sh
# Runs every Check unit-test binary given; prints one summary line. Each
# binary gets at most UNIT_TIMEOUT seconds, so that a hang fails one suite
# rather than the whole run.
limit=${UNIT_TIMEOUT:-900}
pass=0 fail=0
for t in "$@"; do
	timeout -k 10 "$limit" "$t"; rc=$?
	if [ $rc -eq 0 ]; then pass=$((pass + 1))
	elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then fail=$((fail + 1)); echo "FAIL: $t (still running after $limit s, killed)" >&2
	else fail=$((fail + 1)); echo "FAIL: $t" >&2; fi
done
echo "unit: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
