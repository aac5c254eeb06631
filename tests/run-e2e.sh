#!/bin/sh
# Runs every end-to-end test script in tests/e2e; each exits 0 (pass),
# 77 (skipped, with a reason on stderr) or anything else (fail).
pass=0 fail=0 skip=0
for t in tests/e2e/*.sh; do
	[ "$t" = tests/e2e/lib.sh ] && continue
	[ -e "$t" ] || continue
	echo "== $t" >&2
	sh "$t"; rc=$?
	case $rc in
	0) pass=$((pass + 1)) ;;
	77) skip=$((skip + 1)) ;;
	*) fail=$((fail + 1)); echo "FAIL: $t (exit $rc)" >&2 ;;
	esac
done
echo "e2e: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
