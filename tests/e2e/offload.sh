#!/bin/sh
# The NVMe tier through a real pagodad, a real file and real io_uring:
# 16 conversations sharing a 2,000-token prefix on a pool too small for
# them all equal their solo greedy runs byte for byte, the prefix evicted
# by another long prompt comes back from the tier instead of being
# recomputed (prefill counter), a restarted daemon serves it from the file
# at once, injected corruption, short reads and EIO are recomputed (and
# counted), DropPrefixCache empties the tier too (and a restart does not
# bring it back), ENOSPC on a write turns the tier off with a log line, a
# tier larger than its (tmpfs) file system is refused at start-up, and a
# tier on a loop device whose backing store fills later (real write
# errors) turns itself off while outputs stay exact.
# Counters are read with D-Bus Stats() on a private session bus.
. "$(dirname "$0")/lib.sh"
for b in pagodad pagoda pagoda-mkmodel; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
for c in dbus-daemon busctl python3; do
	command -v $c >/dev/null || { echo "SKIP: $c not installed" >&2; exit 77; }
done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-off-XXXXXX")
DP= BP= BT= MNT= LMNT= LOOP= BMNT=
cleanup() {
	[ -n "$DP" ] && kill -KILL "$DP" 2>/dev/null
	[ -n "$BP" ] && kill "$BP" 2>/dev/null
	[ -n "$BT" ] && kill "$BT" 2>/dev/null
	[ -n "$MNT" ] && umount "$MNT" 2>/dev/null
	[ -n "$LMNT" ] && umount -l "$LMNT" 2>/dev/null
	[ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
	[ -n "$BMNT" ] && umount -l "$BMNT" 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
private_session_bus "$D"

M=$D/tiny.gguf
"$B/pagoda-mkmodel" -o "$M" --ctx 4096 --type Q8_0 -q 2>/dev/null
[ -s "$M" ] || { bad "pagoda-mkmodel"; finish; }
# ~2,000 tokens with the built-in tokenizer; a second text of the same size evicts it
python3 - "$D" <<'PY'
import random, sys
d = sys.argv[1]
w = "the cat sat on a mat and then dog ran far away in park sun".split()
for name, seed in (("prefix", 1), ("flush", 2)):
    random.seed(seed)
    open(f"{d}/{name}", "w").write(" ".join(random.choice(w) for _ in range(850)))
PY
N=16
for i in $(seq 0 $((N - 1))); do
	printf '%s question %d: what did the %d cats do?' "$(cat "$D/prefix")" $i $((i * 7)) > "$D/p$i"
done
CTX=2304
for i in $(seq 0 $((N - 1))); do
	"$B/pagoda" run -m "$M" -f "$D/p$i" -n 24 --temp 0 -c $CTX -t 2 > "$D/solo$i" 2>/dev/null
done
"$B/pagoda" run -m "$M" -f "$D/flush" -n 4 --temp 0 -c $CTX -t 2 > "$D/soloflush" 2>"$D/solo.err"

stat_of() { # NAME: a Stats() counter
	busctl --user call org.pagoda.Daemon1 /org/pagoda/Daemon1 org.pagoda.Daemon1 Stats --json=short |
		python3 -c "import json,sys; print(json.load(sys.stdin)['data'][0]['$1']['data'])"
}

stat_is() { # NAME VALUE: the counter reaches VALUE within 20 s (tier writes complete after the reply)
	_k=0
	until [ "$(stat_of "$1")" = "$2" ]; do
		_k=$((_k + 1))
		[ $_k -gt 200 ] && return 1
		sleep 0.1
	done
}

start_daemon() { # LOG ARGS...
	_log=$1
	shift
	"$B/pagodad" --model "$M" --socket "$D/sock" --ctx $CTX --max-seqs $N --threads 2 --bus session "$@" \
		2>"$_log" &
	DP=$!
	_k=0
	until stat_of Steps >/dev/null 2>&1; do
		_k=$((_k + 1))
		if [ $_k -gt 300 ] || ! alive $DP; then DP=; return 1; fi
		sleep 0.1
	done
}

stop_daemon() {
	stop_bg $DP TERM 60 2>/dev/null
	DP=
	rm -f "$D/sock"
}

gen() { # I: conversation I, output in outI
	"$B/pagoda" generate --socket "$D/sock" -f "$D/p$1" -n 24 --temp 0 > "$D/out$1" 2>"$D/err$1"
}

same() { # I LABEL
	if cmp -s "$D/out$1" "$D/solo$1"; then ok; else bad "$2: conversation $1 differs from its solo run"; head -c 300 "$D/err$1" >&2; fi
}

# 1. The pool holds one prefix and little more: 16 conversations at once
# need ~3 blocks each past the 125 they share.
T1=$D/tier1
mkdir "$T1"
start_daemon "$D/log1" --kv-blocks 170 --offload-dir "$T1" --offload-size 64M || { bad "pagodad did not start"; cat "$D/log1" >&2; finish; }
BT=
if [ "$(id -u)" = 0 ] && command -v bpftrace >/dev/null; then
	P=usdt:$(cd "$B" && pwd)/pagodad:pagoda
	bpftrace -e "$P:kv__prefix_hit { @hit[arg3] = sum(arg2); } $P:kv__swap_in { @in = sum(arg2); @inb = sum(arg3); }
		$P:kv__swap_out { @out = sum(arg2); @outb = sum(arg3); }" -p $DP > "$D/bt" 2>&1 &
	BT=$!
	wait_match "$D/bt" Attaching 120 || bad "bpftrace did not attach in 120 s"
fi
gen 0
same 0 "first"
"$B/pagoda" generate --socket "$D/sock" -f "$D/flush" -n 4 --temp 0 > "$D/outflush" 2>/dev/null
cmp -s "$D/outflush" "$D/soloflush" && ok || bad "the evicting prompt differs from its solo run"
out1=$(stat_of OffloadBlocksOut)
[ "$out1" -gt 50 ] && ok || bad "the evicted prefix was not written to the tier ($out1 blocks out)"
pre1=$(stat_of PrefillTokens)
for i in $(seq 1 $((N - 1))); do gen $i & eval "g$i=\$!"; done
for i in $(seq 1 $((N - 1))); do eval "wait \$g$i"; done
for i in $(seq 1 $((N - 1))); do same $i "16 conversations"; done
pre2=$(stat_of PrefillTokens)
in2=$(stat_of OffloadBlocksIn)
tier_tok=$(stat_of OffloadPromptTokens)
[ "$in2" -gt 50 ] && ok || bad "the prefix was not read back from the tier ($in2 blocks in)"
[ "$tier_tok" -ge 800 ] && ok || bad "prompt tokens served by the tier: $tier_tok"
# 15 suffixes of ~15 tokens (and the recompute of preempted ones' last
# blocks): far below the 2,000 a recomputed prefix costs
[ $((pre2 - pre1)) -lt 1500 ] && ok || bad "the prefix was recomputed: $((pre2 - pre1)) tokens prefilled"
if [ -n "$BT" ]; then
	stop_bg $BT INT 30 2>>"$D/bt"
	v() { sed -n "s/^@$1: //p" "$D/bt"; }
	# bpftrace 0.17 now and then hangs at exit with -p and prints nothing
	# (seen in full `make check` runs, not with pagoda-trace): a tracer
	# fault, said as such; trace_tier.sh checks these probes with pagoda-trace.
	if grep -q "still running 30 s after SIGINT" "$D/bt" && [ -z "$(v out)" ]; then
		echo "note: bpftrace hung at exit and printed no maps: its probe counts are not checked in this run" >&2
		BT=
	fi
fi
if [ -n "$BT" ]; then
	# a block of the tiny model: 16 tokens x 4 layers x 128 (K and V, f16)
	[ "$(v 'hit\[1\]')" -ge 800 ] && ok || bad "kv__prefix_hit from the tier: $(cat "$D/bt")"
	[ "$(v 'hit\[0\]')" -gt 0 ] && ok || bad "kv__prefix_hit from the pool: $(cat "$D/bt")"
	[ "$(v in)" -gt 50 ] && [ "$(v inb)" = $(($(v in) * 32768)) ] && ok || bad "kv__swap_in: $(cat "$D/bt")"
	[ "$(v out)" -gt 50 ] && [ "$(v outb)" = $(($(v out) * 32768)) ] && ok || bad "kv__swap_out: $(cat "$D/bt")"
fi
# the blocks went to and from the pool without a copy: read straight in,
# and written ahead of eviction straight out (the pool registered, as root)
[ "$(stat_of OffloadZeroCopyIn)" = "$in2" ] && ok || bad "reads not straight into the pool: $(stat_of OffloadZeroCopyIn) of $in2"
[ "$(stat_of OffloadZeroCopyOut)" -gt 0 ] && ok || bad "no write straight from the pool"
if [ "$(id -u)" = 0 ]; then
	[ "$(stat_of OffloadPoolRegistered)" = 1 ] && ok || bad "the pool is not registered with io_uring: $(cat "$D/log1")"
fi
echo "offload: 16 conversations: prefilled $((pre2 - pre1)), tier blocks in $in2 out $(stat_of OffloadBlocksOut)" \
	"(from the pool $(stat_of OffloadZeroCopyOut)), preemptions $(stat_of Preemptions), swap-out blocks" \
	"$(stat_of OffloadSwapOutBlocks), dropped writes $(stat_of OffloadDroppedWrites)" >&2
stop_daemon

# 2. Warm restart: the first request with the known prefix is served from
# the tier (next to nothing prefilled) and equals a cold run.
start_daemon "$D/log2" --kv-blocks 170 --offload-dir "$T1" --offload-size 64M || { bad "restart"; cat "$D/log2" >&2; finish; }
grep -q "warm start" "$D/log2" && ok || bad "no warm start line: $(cat "$D/log2")"
[ "$(stat_of OffloadWarmBlocks)" -gt 100 ] && ok || bad "warm blocks: $(stat_of OffloadWarmBlocks)"
gen 3
same 3 "after restart"
pre=$(stat_of PrefillTokens)
[ "$pre" -lt 100 ] && ok || bad "after a restart the prefix was recomputed ($pre tokens prefilled)"
stop_daemon

# 3. Faults on reads: a corrupt block, a short read, EIO. Each is dropped
# and recomputed: exact output, each counted.
PAGODA_OFFLOAD_FAULT=read:2:corrupt,read:5:short,read:9:eio start_daemon "$D/log3" --kv-blocks 170 \
	--offload-dir "$T1" --offload-size 64M || { bad "start with faults"; cat "$D/log3" >&2; finish; }
gen 4
same 4 "injected read faults"
for c in OffloadErrorsChecksum OffloadErrorsShort OffloadErrorsIO; do
	[ "$(stat_of $c)" = 1 ] && ok || bad "$c = $(stat_of $c), want 1"
done
[ "$(stat_of OffloadDisabled)" = 0 ] && ok || bad "read faults turned the tier off"
[ "$(stat_of PrefillTokens)" -gt 1000 ] && ok || bad "the blocks after a bad one were not recomputed"
stop_daemon

# 3b. DropPrefixCache forgets the tier's blocks as well as the pool's; a
# restart right after finds none (the file's epoch moved on).
start_daemon "$D/log3b" --kv-blocks 170 --offload-dir "$T1" --offload-size 64M || { bad "start (drop)"; cat "$D/log3b" >&2; finish; }
[ "$(stat_of OffloadSlotsUsed)" -gt 100 ] && ok || bad "before the drop: $(stat_of OffloadSlotsUsed) slots used"
busctl --user call org.pagoda.Daemon1 /org/pagoda/Daemon1 org.pagoda.Daemon1 DropPrefixCache >/dev/null ||
	bad "DropPrefixCache failed"
k=0
while [ "$(stat_of OffloadDrops)" != 1 ] && [ $k -lt 100 ]; do sleep 0.1; k=$((k + 1)); done
[ "$(stat_of OffloadDrops)" = 1 ] && ok || bad "DropPrefixCache did not reach the tier"
[ "$(stat_of OffloadSlotsUsed)" = 0 ] && ok || bad "after the drop: $(stat_of OffloadSlotsUsed) slots used"
grep -q "dropped (epoch" "$D/log3b" && ok || bad "no log line for the tier's drop"
stop_daemon
start_daemon "$D/log3c" --kv-blocks 170 --offload-dir "$T1" --offload-size 64M || { bad "restart (drop)"; cat "$D/log3c" >&2; finish; }
[ "$(stat_of OffloadWarmBlocks)" = 0 ] && ok || bad "dropped blocks came back: $(stat_of OffloadWarmBlocks) warm"
gen 9
same 9 "after a drop"
[ "$(stat_of PrefillTokens)" -gt 1500 ] && ok || bad "after a drop the prefix was not recomputed"
stop_daemon

# 4. ENOSPC on a later write: the tier turns itself off, saying so;
# serving goes on.
T2=$D/tier2
mkdir "$T2"
PAGODA_OFFLOAD_FAULT=write:3:enospc start_daemon "$D/log4" --kv-blocks 170 --offload-dir "$T2" \
	--offload-size 64M || { bad "start (enospc)"; cat "$D/log4" >&2; finish; }
gen 5
"$B/pagoda" generate --socket "$D/sock" -f "$D/flush" -n 4 --temp 0 > /dev/null 2>&1
gen 6
same 5 "before ENOSPC"
same 6 "after ENOSPC"
stat_is OffloadDisabled 1 && ok || bad "ENOSPC did not turn the tier off"
stat_is OffloadErrorsNoSpace 1 && ok || bad "ENOSPC not counted: $(stat_of OffloadErrorsNoSpace)"
wait_match "$D/log4" "the tier is off" 20 && ok || bad "no log line for the tier turning off"
stop_daemon

# 5. A tmpfs of 2 MiB: 64 MiB cannot be had (a clear start-up error); 1 MiB
# can, and its few slots churn in LRU order while outputs stay exact.
if [ "$(id -u)" = 0 ] && mkdir "$D/mnt" && mount -t tmpfs -o size=2m tmpfs "$D/mnt" 2>/dev/null; then
	MNT=$D/mnt
	if "$B/pagodad" --model "$M" --socket "$D/sock" --ctx $CTX --threads 2 --bus none \
		--offload-dir "$MNT" --offload-size 64M 2>"$D/log5"; then
		bad "a 64 MiB tier on a 2 MiB file system started"
	else
		grep -q "no space left" "$D/log5" && ok || bad "unclear ENOSPC at start-up: $(cat "$D/log5")"
	fi
	start_daemon "$D/log6" --kv-blocks 170 --offload-dir "$MNT" --offload-size 1M ||
		{ bad "a 1 MiB tier on tmpfs"; cat "$D/log6" >&2; finish; }
	gen 7
	"$B/pagoda" generate --socket "$D/sock" -f "$D/flush" -n 4 --temp 0 > /dev/null 2>&1
	gen 8
	same 7 "tmpfs tier"
	same 8 "tmpfs tier, full"
	[ "$(stat_of OffloadSlotsUsed)" -le "$(stat_of OffloadSlotsTotal)" ] && ok || bad "slots over capacity"
	[ "$(stat_of OffloadDisabled)" = 0 ] && ok || bad "a full tier turned itself off"
	stop_daemon
	umount "$MNT" && MNT=
else
	echo "offload: no tmpfs mount here (not root?): the small file system cases are skipped" >&2
fi

# 6. A tier that fills later for real: ext4 on a loop device whose 64 MiB
# image lies sparse on a 6 MiB tmpfs. Start-up preallocates 32 MiB (ext4
# extents, no data); once the blocks written outgrow the tmpfs, the loop
# device fails the writes: the tier turns itself off, saying so, and
# serving goes on, exact.
if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null &&
	mkdir "$D/back" "$D/lmnt" && mount -t tmpfs -o size=6m tmpfs "$D/back" 2>/dev/null; then
	BMNT=$D/back
	truncate -s 64M "$BMNT/img"
	if LOOP=$(losetup -f --show "$BMNT/img" 2>/dev/null) && mkfs.ext4 -q -O ^has_journal "$LOOP" 2>/dev/null &&
		mount "$LOOP" "$D/lmnt" 2>/dev/null; then
		LMNT=$D/lmnt
		start_daemon "$D/log7" --kv-blocks 170 --offload-dir "$LMNT" --offload-size 32M ||
			{ bad "a 32 MiB tier on the loop device"; cat "$D/log7" >&2; finish; }
		gen 10
		"$B/pagoda" generate --socket "$D/sock" -f "$D/flush" -n 4 --temp 0 > "$D/outflush2" 2>/dev/null
		gen 11
		"$B/pagoda" generate --socket "$D/sock" -f "$D/prefix" -n 4 --temp 0 > /dev/null 2>&1
		gen 12
		same 10 "loop device tier"
		same 11 "loop device tier, filling"
		same 12 "loop device tier, full"
		cmp -s "$D/outflush2" "$D/soloflush" && ok || bad "the evicting prompt differs on the loop device tier"
		stat_is OffloadDisabled 1 && ok || bad "a tier whose disk filled stayed on: $(cat "$D/log7")"
		[ $(($(stat_of OffloadErrorsIO) + $(stat_of OffloadErrorsNoSpace))) -ge 1 ] && ok || bad "the write errors were not counted"
		wait_match "$D/log7" "the tier is off" 20 && ok || bad "no log line for the tier turning off"
		echo "offload: loop device: blocks out $(stat_of OffloadBlocksOut), errors io $(stat_of OffloadErrorsIO)," \
			"nospc $(stat_of OffloadErrorsNoSpace)" >&2
		stop_daemon
		umount "$LMNT" 2>/dev/null || umount -l "$LMNT"
		LMNT=
	else
		echo "offload: no loop device here: the filling file system case is skipped" >&2
	fi
	[ -n "$LOOP" ] && losetup -d "$LOOP" && LOOP=
	# the loop device lets go of its image a moment after it is detached
	for _k in 1 2 3 4 5 6 7 8 9 10; do umount "$BMNT" 2>/dev/null && BMNT= && break; sleep 0.2; done
fi
finish
