#!/bin/sh
# pagoda-trace against the NVMe tier's own counters: a pagodad with a small
# KV pool and a tier, traced by pid, serves a ~2,000-token prefix, a prompt
# of the same size that evicts it, and the prefix again (read back from the
# tier). The summed --json intervals then equal D-Bus Stats(): swap-out
# blocks and bytes = OffloadBlocksOut/OffloadBytesOut, swap-in blocks and
# bytes = OffloadBlocksIn/OffloadBytesIn, prefix-hit tokens from the NVMe
# tier = OffloadPromptTokens, and io_uring completions (histogram count) =
# OffloadRingCompletions, at least one per block read or written (a block
# that goes straight to or from the pool is one per span and one for the
# slot's header page), and nothing else in pagodad uses io_uring.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then
	echo "SKIP: pagoda-trace needs root" >&2
	exit 77
fi
if [ ! -r /sys/kernel/btf/vmlinux ]; then
	echo "SKIP: this kernel has no BTF (/sys/kernel/btf/vmlinux)" >&2
	exit 77
fi
for b in pagoda-trace pagodad pagoda pagoda-mkmodel; do
	[ -x "$B/$b" ] || { echo "FAIL: $B/$b not built" >&2; exit 1; }
done
for c in dbus-daemon busctl python3; do
	command -v $c >/dev/null || { echo "SKIP: $c not installed" >&2; exit 77; }
done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-trace-tier-XXXXXX")
DP= BP= TP=
cleanup() {
	[ -n "$TP" ] && kill -KILL "$TP" 2>/dev/null
	[ -n "$DP" ] && kill -KILL "$DP" 2>/dev/null
	[ -n "$BP" ] && kill "$BP" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
private_session_bus "$D"

M=$D/tiny.gguf
"$B/pagoda-mkmodel" -o "$M" --ctx 4096 --type Q8_0 -q 2>/dev/null
[ -s "$M" ] || { bad "pagoda-mkmodel"; finish; }
# ~2,000 tokens each with the built-in tokenizer (as in offload.sh)
python3 - "$D" <<'PY'
import random, sys
d = sys.argv[1]
w = "the cat sat on a mat and then dog ran far away in park sun".split()
for name, seed in (("prefix", 1), ("flush", 2)):
    random.seed(seed)
    open(f"{d}/{name}", "w").write(" ".join(random.choice(w) for _ in range(850)))
PY
for i in 0 1; do
	printf '%s question %d: what did the cats do?' "$(cat "$D/prefix")" $i > "$D/p$i"
done

stat_of() { # NAME: a Stats() counter
	busctl --user call org.pagoda.Daemon1 /org/pagoda/Daemon1 org.pagoda.Daemon1 Stats --json=short |
		python3 -c "import json,sys; print(json.load(sys.stdin)['data'][0]['$1']['data'])"
}

mkdir "$D/tier"
"$B/pagodad" --model "$M" --socket "$D/sock" --ctx 2304 --max-seqs 4 --threads 2 --bus session \
	--kv-blocks 170 --offload-dir "$D/tier" --offload-size 64M 2>"$D/log" &
DP=$!
k=0
until stat_of Steps >/dev/null 2>&1; do
	k=$((k + 1))
	if [ $k -gt 300 ] || ! alive $DP; then bad "pagodad did not start: $(cat "$D/log")"; finish; fi
	sleep 0.1
done

"$B/pagoda-trace" -p $DP --json --interval 0.5 >"$D/out" 2>"$D/err" &
TP=$!
wait_match "$D/err" "^Tracing" 60 || { bad "pagoda-trace did not attach in 60 s: $(cat "$D/err")"; finish; }

gen() { # FILE N
	"$B/pagoda" generate --socket "$D/sock" -f "$1" -n "$2" --temp 0 >/dev/null 2>>"$D/gen.err" ||
		bad "pagoda generate -f $1 failed: $(cat "$D/gen.err")"
}
gen "$D/p0" 8
gen "$D/flush" 4 # evicts the prefix: written to the tier
gen "$D/p1" 8    # the prefix again: read back from the tier
# The tier counts a write when the engine reaps its completion, at its
# next step: two one-token requests (the second reuses the first's free
# block, evicting nothing) let every write in flight be counted.
printf 'the' > "$D/tiny"
for i in 1 2; do sleep 0.3; gen "$D/tiny" 1; done
stop_bg $TP INT 30; rc=$?
TP=
[ $rc -eq 0 ] && ok || bad "pagoda-trace exit status $rc after SIGINT: $(cat "$D/err")"

want=$(for c in OffloadBlocksOut OffloadBytesOut OffloadBlocksIn OffloadBytesIn OffloadPromptTokens; do
	printf '%s ' "$(stat_of $c)"; done)
io=$(stat_of OffloadRingCompletions)
blocks_io=$(($(stat_of OffloadBlocksIn) + $(stat_of OffloadBlocksOut)))
errs=0
for c in OffloadErrorsChecksum OffloadErrorsShort OffloadErrorsIO OffloadErrorsNoSpace OffloadErrorsHeader \
	OffloadDisabled; do
	errs=$((errs + $(stat_of $c)))
done
[ "$errs" = 0 ] && ok || bad "the tier had errors: the I/O count below would not hold"
set -- $want
[ "$1" -gt 50 ] && [ "$3" -gt 50 ] && [ "$5" -ge 800 ] && ok ||
	bad "the workload did not swap: blocks out $1, in $3, tier prompt tokens $5"

got=$(python3 - "$D/out" "$DP" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
pid = int(sys.argv[2])
assert lines and lines[-1]["final"], "a final line"
assert all(l["pids"] == [pid] and l["usdt"] and l["io"] for l in lines), "pids, usdt, io"
total = lambda get: sum(get(l) for l in lines)
kv = lambda k: total(lambda l: l["kv"][k])
h = [l["hist_us"]["io_uring"] for l in lines]
n = sum(x["count"] for x in h)
assert n == sum(b[2] for x in h for b in x["buckets"]), "io_uring buckets do not add up to the count"
assert n == total(lambda l: l["io_uring"]["completed"]), "io_uring histogram count != completed"
assert total(lambda l: l["io_uring"]["submitted"]) == n, "io_uring submitted != completed"
assert n == 0 or sum(x["sum_ns"] for x in h) > 0, "io_uring: no time"
print("%d %d %d %d %d" % (kv("swap_out_blocks"), kv("swap_out_bytes"), kv("swap_in_blocks"),
      kv("swap_in_bytes"), kv("prefix_hit_tokens_nvme")))
print(n)
PY
) || { bad "pagoda-trace's JSON: $(cat "$D/out")"; finish; }
g=$(echo "$got" | head -1)
n=$(echo "$got" | tail -1)
[ "$g " = "$want" ] && ok ||
	bad "swap out blocks/bytes, in blocks/bytes, NVMe prompt tokens: traced $g, the tier counted $want"
[ "$n" -gt 0 ] && [ "$n" = "$io" ] && [ "$io" -ge "$blocks_io" ] && ok ||
	bad "io_uring completions traced: $n, the tier's: $io (blocks in + out: $blocks_io)"
echo "trace_tier: tier blocks out/bytes out/blocks in/bytes in/prompt tokens $want; io_uring completions $n" >&2
stop_bg $DP TERM 60 >/dev/null 2>&1
DP=
[ "$fails" -eq 0 ] || cat "$D/log" >&2
finish
