#!/bin/sh
# tests/skips.sh LOG — make check's last line: how many checks were skipped
# (over unit, integration, e2e and fuzz) and why, from the "SUITE NAME: why"
# lines the runners collected.
log=$1
n=$(grep -c . "$log" 2>/dev/null)
if [ "${n:-0}" -eq 0 ]; then
	echo "skipped: 0 (unit, integration, e2e, fuzz: nothing skipped)"
	exit 0
fi
per_suite=$(for s in unit integration e2e fuzz; do
	c=$(grep -c "^$s " "$log")
	[ "$c" -gt 0 ] && printf '%s %s, ' "$s" "$c"
done | sed 's/, $//')
# the reason without its file names, so that like skips count together
why=$(sed -e 's/^[^:]*: //' \
	-e 's/^test data .* not found.*/test data not found/' \
	-e 's|^.*/\([^/ ]*\)\( is\)\{0,1\} not built$|\1 not built|' \
	-e 's/^fuzz_[a-z_]*: //' "$log" |
	sort | uniq -c | sort -k1,1nr -k2 | awk '{ c = $1; $1 = ""; sub(/^ /, ""); printf "%s%d %s", (NR > 1 ? "; " : ""), c, $0 }')
echo "skipped: $n ($per_suite) why: $why"
