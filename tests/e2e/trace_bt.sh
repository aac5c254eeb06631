#!/bin/sh
# The bpftrace scripts against a real pagodad under load: each of
# bpf/{queue,ttft,itl,steps,kv}.bt, started before the load and stopped
# after it, prints a histogram with samples in it. `bpftrace -l` lists
# every probe the engine fires, and docs/trace.md names every probe that
# daemon/engine/probes.h defines.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v bpftrace >/dev/null; then
	echo "SKIP: needs root and bpftrace" >&2
	exit 77
fi
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "FAIL: $B/$b not built" >&2; exit 1; }; done
BIN=$(cd "$B" && pwd)/pagodad
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-bt-XXXXXX")
S=$D/s.sock
"$B/pagodad" --model "$M" --socket "$S" --threads 2 2>"$D/log" &
DP=$!
pids=
cleanup() {
	for p in $pids $DP; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT

# the probes: defined in probes.h, named in the docs, fired by the engine
defined=$(sed -n 's/^#define PROBE_[A-Z_]*(.*) DTRACE_PROBE[0-9](pagoda, \([a-z_]*\),.*/\1/p' daemon/engine/probes.h | sort)
[ "$(echo "$defined" | wc -l)" -ge 10 ] && ok || bad "probes.h defines only: $defined"
for p in $defined; do
	grep -q "\`$p(" docs/trace.md && ok || bad "docs/trace.md does not name probe $p"
done
bpftrace -l "usdt:$BIN:pagoda:*" >"$D/listed" 2>/dev/null
for m in $(sed -n 's/^#define \(PROBE_[A-Z_]*\)(.*) DTRACE_PROBE.*/\1/p' daemon/engine/probes.h); do
	grep -rq --include=*.c "$m(" daemon || continue
	p=$(sed -n "s/^#define $m(.*) DTRACE_PROBE[0-9](pagoda, \([a-z_]*\),.*/\1/p" daemon/engine/probes.h)
	grep -q ":pagoda:$p\$" "$D/listed" && ok || bad "bpftrace -l does not list $p, which the engine fires"
done

i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 400 ] && { echo "pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
	sleep 0.05
done
scripts="queue ttft itl steps kv"
for s in $scripts; do
	bpftrace "bpf/$s.bt" "$BIN" >"$D/$s.out" 2>&1 &
	pids="$pids $!"
done
for s in $scripts; do
	wait_match "$D/$s.out" "^attached" 120 || { bad "$s.bt did not attach in 120 s: $(cat "$D/$s.out")"; finish; }
done
# the load: two clients at once for a few seconds, a prompt sent twice
# (its first blocks cached the second time)
long="Once upon a time there was a little girl named Lily. She loved to play outside"
load() {
	end=$(($(date +%s) + 3))
	while [ "$(date +%s)" -lt $end ]; do
		"$B/pagoda" generate --socket "$S" -p "$long" -n 40 --temp 0 >/dev/null || return 1
	done
}
load & lp=$!
load || bad "a request failed"
wait $lp || bad "a request failed"
for p in $pids; do stop_bg "$p" INT 30; done
pids=
# a bucket row with a count: [lo, hi)  N |@@@|
row='^\[[0-9]+[KMG]?, [0-9]+[KMG]?\) +[1-9][0-9]* +\|@*'
for h in queue:queue_us ttft:ttft_us itl:itl_us steps:step_us steps:forward_us steps:batch_tokens \
	kv:'hit_tokens\[memory\]'; do
	s=${h%%:*} m=${h#*:}
	# the rows that follow the map's name, up to the next blank line
	if awk -v m="^@$m: *\$" '$0 ~ m { on = 1; next } on && /^$/ { on = 0 } on' "$D/$s.out" | grep -Eq "$row"; then
		ok
	else
		bad "$s.bt: no samples in @$m: $(cat "$D/$s.out")"
	fi
done
[ "$fails" -eq 0 ] || cat "$D/log" >&2
finish
