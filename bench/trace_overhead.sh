#!/bin/sh
# bench/trace_overhead.sh — what pagoda-trace costs a busy daemon: a
# saturating workload (pagoda-bench load, 16 streams) with nothing attached
# and with `pagoda-trace --json --interval 1` attached, alternating in each
# round (the order flips every round), on one pagodad. Prints each round's
# aggregate output tok/s and the daemon's CPU time per token, and the
# medians of the per-round ratios. Root (BPF). Environment:
#   TRACE_MODEL=FILE    the GGUF (default ../shared/testdata/models/stories260K.gguf)
#   TRACE_ROUNDS=N      rounds (default 6)
#   TRACE_THREADS=N     the daemon's threads (default 2)
#   TRACE_BENCH="..."   pagoda-bench load options (default -c 16 -n 96 -p 32 -o 64)
set -u
cd "$(dirname "$0")/.." || exit 1
B=${PAGODA_BUILD:-build}
M=${TRACE_MODEL:-${PAGODA_TESTDATA:-../shared/testdata}/models/stories260K.gguf}
ROUNDS=${TRACE_ROUNDS:-6}
THREADS=${TRACE_THREADS:-2}
LOAD=${TRACE_BENCH:--c 16 -n 96 -p 32 -o 64}
for b in pagodad pagoda pagoda-bench pagoda-trace; do
	[ -x "$B/$b" ] || { echo "trace_overhead: $B/$b is missing: run make first" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "trace_overhead: pagoda-trace needs root" >&2; exit 1; }
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-trace-bench-XXXXXX")
S=$D/s.sock
"$B/pagodad" --model "$M" --socket "$S" --threads "$THREADS" 2>"$D/log" &
DP=$!
TP=
cleanup() {
	[ -n "$TP" ] && kill -KILL "$TP" 2>/dev/null
	kill -TERM $DP 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
i=0
until "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 600 ] && { echo "trace_overhead: pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
	sleep 0.05
done

# run: one workload; prints its aggregate output tok/s and the daemon's
# CPU time per 1000 output tokens in ms (user + system, the probes' traps
# included): the second holds up better than the first on a shared machine
run() {
	c0=$(cpu)
	# shellcheck disable=SC2086
	j=$("$B/pagoda-bench" load --socket "$S" -q --json $LOAD)
	c1=$(cpu)
	tps=$(printf '%s' "$j" | sed -n 's/.*"output_tok_per_s":\([0-9.]*\).*/\1/p')
	n=$(printf '%s' "$j" | sed -n 's/.*"output_tokens":\([0-9]*\).*/\1/p')
	awk -v t="$tps" -v c=$((c1 - c0)) -v n="$n" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "%s %.1f\n", t, c * 1000 / hz * 1000 / n }'
}
cpu() { awk '{ print $14 + $15 }' "/proc/$DP/stat"; }
# traced: the same with pagoda-trace attached for the whole of it
traced() {
	: >"$D/err"
	"$B/pagoda-trace" -p $DP --json --interval 1 >"$D/out" 2>"$D/err" &
	TP=$!
	i=0
	until grep -q "^Tracing" "$D/err"; do
		i=$((i + 1)); [ $i -gt 600 ] && { echo "trace_overhead: pagoda-trace: $(cat "$D/err")" >&2; exit 1; }
		sleep 0.05
	done
	run
	kill -INT $TP
	wait $TP
	TP=
}

run >/dev/null # warm-up
echo "pagoda-trace overhead: $(basename "$M"), pagoda-bench load $LOAD, $THREADS threads, $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round  plain_tok/s  traced_tok/s  ratio   plain_cpu_ms/ktok  traced_cpu_ms/ktok  ratio"
r=1
: >"$D/ratios"
while [ $r -le "$ROUNDS" ]; do
	if [ $((r % 2)) = 1 ]; then a=$(run); b=$(traced); else b=$(traced); a=$(run); fi
	set -- $a $b
	line=$(awk -v a="$1" -v b="$3" -v ca="$2" -v cb="$4" 'BEGIN { printf "%.4f %.4f", b / a, cb / ca }')
	echo "$line" >>"$D/ratios"
	set -- $a $b $line
	printf '%5d  %11s  %12s  %6s  %17s  %18s  %6s\n' $r "$1" "$3" "$5" "$2" "$4" "$6"
	r=$((r + 1))
done
med() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
t=$(cut -d' ' -f1 "$D/ratios" | med)
c=$(cut -d' ' -f2 "$D/ratios" | med)
awk -v t="$t" -v c="$c" 'BEGIN {
	printf "median traced/plain: output tok/s %.4f (%+.1f%%), daemon CPU per token %.4f (%+.1f%%)\n",
		t, (t - 1) * 100, c, (c - 1) * 100 }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
