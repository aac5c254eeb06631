#!/bin/sh
# 32 concurrent requests of different prompts and lengths through pagodad:
# each output equals its solo greedy run byte for byte, with the prefix
# cache on, off, and with a KV pool so small that sequences are preempted
# (counted through the request__preempt USDT probe when bpftrace can run).
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
dir=$(mktemp -d)
trap 'kill $dpid $bt 2>/dev/null; rm -rf "$dir"' EXIT
dpid= bt=
names="Lily Ben Tim Sue Max Anna Tom Mia"
starts="Once_upon_a_time One_day The_sun_was_bright In_the_park"
i=0
for n in $names; do
	for s in $starts; do
		[ $i -ge 32 ] && break
		echo "$(echo "$s" | tr _ ' '), $n" > "$dir/p$i"
		echo $((16 + (i * 37) % 90)) > "$dir/n$i"
		i=$((i + 1))
	done
done
for i in $(seq 0 31); do
	"$B/pagoda" run -m "$M" -p "$(cat "$dir/p$i")" -n "$(cat "$dir/n$i")" --temp 0 -t 1 \
		> "$dir/solo$i" 2>/dev/null
done

start_daemon() {
	"$B/pagodad" --model "$M" --socket "$dir/sock" --max-seqs 32 "$@" 2> "$dir/log" &
	dpid=$!
	k=0
	until [ -S "$dir/sock" ] || [ $k -ge 300 ]; do sleep 0.1; k=$((k + 1)); done
}

stop_daemon() {
	stop_bg $dpid TERM 60 2>/dev/null
	rm -f "$dir/sock"
}

run_all() {
	label=$1
	for i in $(seq 0 31); do
		"$B/pagoda" generate --socket "$dir/sock" -p "$(cat "$dir/p$i")" -n "$(cat "$dir/n$i")" \
			--temp 0 > "$dir/out$i" 2>"$dir/err$i" &
		eval "g$i=\$!"
	done
	for i in $(seq 0 31); do eval "wait \$g$i"; done
	same=0
	for i in $(seq 0 31); do
		if cmp -s "$dir/out$i" "$dir/solo$i"; then
			same=$((same + 1))
		else
			echo "  request $i ($label) differs from its solo run:" >&2
			head -c 200 "$dir/err$i" >&2
		fi
	done
	if [ $same -eq 32 ]; then ok; else bad "$label: $((32 - same)) of 32 outputs differ"; fi
}

start_daemon
run_all "prefix cache on"
stop_daemon

start_daemon --no-prefix-cache
run_all "prefix cache off"
stop_daemon

# 10 blocks of 16 tokens for 32 sequences: preemption is certain.
start_daemon --ctx 160 --kv-blocks 10
if [ "$(id -u)" = 0 ] && command -v bpftrace >/dev/null; then
	bpftrace -e "usdt:$(cd "$B" && pwd)/pagodad:pagoda:request__preempt { @p = count(); }" \
		-p $dpid > "$dir/bt" 2>&1 &
	bt=$!
	wait_match "$dir/bt" Attaching 120 || bad "bpftrace did not attach in 120 s"
fi
run_all "small pool"
if [ -n "$bt" ]; then
	stop_bg $bt INT 30 2>>"$dir/bt"
	p=$(sed -n 's/^@p: //p' "$dir/bt")
	if [ "${p:-0}" -gt 0 ]; then ok; else bad "no preemption counted with a 10-block pool"; cat "$dir/bt" >&2; fi
	bt=
fi
stop_daemon
finish
