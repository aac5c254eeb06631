#!/bin/sh
# bench/offload.sh — the NVMe tier (issue 26, "Measured"):
#  1. time to first token with a shared prefix of 512, 2,000 and 8,000
#     tokens read back from the tier against recomputing it, on the
#     TinyLlama-shaped Q8_0 model pagoda-mkmodel writes: `pagoda run -n 1`,
#     a new process each time (the tier's index rebuilt from the file at
#     start, outside the TTFT; the reads, O_DIRECT, inside it);
#  2. the tier's restore throughput against a plain O_DIRECT read loop over
#     the same file, and against the same restore done with a pread loop
#     (bench/tier_read.c).
# Rounds alternate (recompute, tier, recompute, ...) so both see the same load.
#
# Environment: OFFLOAD_DIR (a folder on the disk to measure; default
# build/bench/offload), BENCH_THREADS (2), OFFLOAD_SIZES ("512 2000 8000"),
# OFFLOAD_ROUNDS (3), OFFLOAD_BLOCKS (blocks for tier_read, 500).
# The read throughput alone: OFFLOAD_SIZES= sh bench/offload.sh
# (or build/bench/bin/tier_read DIR [N_BLOCKS [ROUNDS]]).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${PAGODA_BUILD:-$(pwd)/build}
T=${BENCH_THREADS:-2}
SIZES=${OFFLOAD_SIZES-512 2000 8000}
ROUNDS=${OFFLOAD_ROUNDS:-3}
W=$B/bench
DIR=${OFFLOAD_DIR:-$W/offload}
mkdir -p "$W" "$B/models" "$DIR"
M=$B/models/tinyllama-q8-8k.gguf
say() { echo "$*"; }
[ -z "$SIZES" ] || [ -s "$M" ] || "$B/pagoda-mkmodel" --preset tinyllama-1.1b --ctx 8448 -o "$M" -q || exit 1
say "## NVMe tier (bench/offload.sh): $T threads, $ROUNDS rounds, tier in $DIR ($(df -hT "$DIR" | awk 'NR==2 {print $2, $1}')), load $(cut -d' ' -f1-3 /proc/loadavg)"

ttft_of() { sed -n 's/.*TTFT \([0-9.]*\) ms.*/\1/p' "$1" | tail -1; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : "NA"}'; }

for P in $SIZES; do
	# a prompt of about P tokens (random words), checked with the tokenizer
	python3 - "$W/offload-prompt" "$P" <<'PY'
import random, sys
random.seed(7)
w = "the cat sat on a mat and then dog ran far away in park sun".split()
open(sys.argv[1], "w").write(" ".join(random.choice(w) for _ in range(int(sys.argv[2]) * 9 // 10)))
PY
	n=$("$B/pagoda" tokenize -m "$M" < "$W/offload-prompt" | wc -w)
	ctx=$(( (n / 256 + 2) * 256 ))
	rm -rf "$DIR/tier"
	mkdir -p "$DIR/tier"
	run() { "$B/pagoda" run -m "$M" -f "$W/offload-prompt" -n 1 --temp 0 -c $ctx -t "$T" --stats "$@"; }
	# fills the tier (the shutdown writes the cached blocks)
	run --offload-dir "$DIR/tier" --offload-size 4G > "$W/offload-ids0" 2> "$W/offload-fill.log" ||
		{ say "tier fill failed: $(tail -3 "$W/offload-fill.log")"; continue; }
	# the fill is a recompute too (the tier is empty; its writes come after the first token)
	say "  prefix $n tokens, round 0: TTFT recompute $(ttft_of "$W/offload-fill.log") ms (filling the tier)"
	rc= rt= ratios=
	for r in $(seq 1 "$ROUNDS"); do
		run > "$W/offload-ids1" 2> "$W/offload-rc.log"
		run --offload-dir "$DIR/tier" --offload-size 4G > "$W/offload-ids2" 2> "$W/offload-rt.log"
		a=$(ttft_of "$W/offload-rc.log") b=$(ttft_of "$W/offload-rt.log")
		cmp -s "$W/offload-ids1" "$W/offload-ids2" || say "  round $r: the tier's first token differs from the recompute's!"
		from=$(sed -n 's/.*prompt tokens from the tier \([0-9]*\).*/\1/p' "$W/offload-rt.log")
		rc="$rc $a" rt="$rt $b"
		ratios="$ratios $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.1f", (b > 0 ? a / b : 0)}')"
		say "  prefix $n tokens, round $r: TTFT recompute $a ms, tier $b ms ($from prompt tokens from the tier)"
	done
	say "prefix $n tokens: TTFT recompute $(echo "$rc" | median) ms, from the tier $(echo "$rt" | median) ms, ratio (median of rounds) $(echo "$ratios" | median)x"
	grep 'offload read latency' "$W/offload-rt.log" | sed 's/^pagoda: /  /'
done

say "## tier restore throughput (bench/tier_read.c, ${OFFLOAD_BLOCKS:-500} blocks of 352 KiB)"
TR=$B/bench/bin/tier_read
if [ ! -x "$TR" ]; then
	TR=$W/tier_read
	cc -O2 -I. -D_GNU_SOURCE -o "$TR" bench/tier_read.c "$B/libpagoda-engine.a" \
		$(pkg-config --libs liburing libxxhash libpcre2-8) -lm -pthread -ldl || TR=
fi
if [ -n "$TR" ]; then
	rm -rf "$DIR/read"
	mkdir -p "$DIR/read"
	# one line per round, then one per figure (medians, the warm-up round left out)
	"$TR" "$DIR/read" "${OFFLOAD_BLOCKS:-500}" $((ROUNDS + 1)) | tee "$W/tier_read.out"
	# fio's sequential O_DIRECT read of the same file at queue depth 32, where
	# fio is installed: the disk's ceiling rather than a one-at-a-time loop
	if command -v fio >/dev/null; then
		bw=$(fio --name=tier --filename="$DIR/read/pagoda-kv.tier" --readonly --rw=read --bs=364544 \
			--direct=1 --ioengine=io_uring --iodepth=32 --numjobs=1 --loops="$ROUNDS" \
			--output-format=terse --terse-version=3 2>/dev/null | cut -d';' -f7)
		if [ -n "$bw" ]; then
			gbs=$(awk -v k="$bw" 'BEGIN {printf "%.3f", k * 1024 / 1e9}')
			tier=$(sed -n 's/^tier restore .*: \([0-9.]*\) GB\/s$/\1/p' "$W/tier_read.out")
			say "fio O_DIRECT sequential read, depth 32, same file: $gbs GB/s"
			say "tier / fio: $(awk -v a="$tier" -v b="$gbs" 'BEGIN {printf "%.0f", (b > 0 ? 100 * a / b : 0)}')% (target >= 80%)"
		fi
	fi
	rm -rf "$DIR/read"
fi
rm -rf "$DIR/tier"
