#!/bin/sh
# tests/gpu/run.sh — everything the CUDA backend must show on a machine
# with an NVIDIA GPU, in one pass, with a summary at the end:
#   1. every kernel against the CPU reference (build/tests/gpu/test_cuda);
#   2. greedy ids equal the CPU's: 64 tokens on every synth-kq model, 32 on
#      each stories260K file; and graph replay equal to eager launches;
#   3. a quantized KV cache (-ctk q8_0) refused, saying so; perplexity on
#      story.txt within 0.5% of the CPU's;
#   4. 32 concurrent requests through pagodad --backend cuda equal their
#      solo runs; a client killed mid-stream harms nobody;
#   5. with GPU_BENCH=1: the BENCHMARKS figures (decode tok/s and its share
#      of HBM bandwidth, prefill of 512, aggregate decode at 16 and 64
#      streams, with and without CUDA graphs) on TinyLlama-shaped Q8_0 and
#      Q4_0 models that pagoda-mkmodel writes on the spot (into build/models).
# Needs only the working tree and build/ (make, here or elsewhere). Test
# data: $PAGODA_TESTDATA, else build/testdata (copy ../shared/testdata
# there to carry it with build/), else ../shared/testdata.
# Without a device it says SKIP and exits 77.
cd "$(dirname "$0")/../.." || exit 1
B=$(cd "${PAGODA_BUILD:-build}" && pwd) || exit 1
export PAGODA_BUILD=$B PAGODA_CUDA_LIB=$B/libpagoda-cuda.so
T=${PAGODA_TESTDATA:-}
[ -z "$T" ] && [ -d "$B/testdata/models" ] && T=$B/testdata
[ -z "$T" ] && [ -d ../shared/testdata/models ] && T=$(cd ../shared/testdata && pwd)
W=$(mktemp -d)
trap 'for p in $pids; do kill -KILL $p 2>/dev/null; done; rm -rf "$W"' EXIT
pids=
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "  ok   $*"; }
bad() { fail=$((fail + 1)); echo "  FAIL $*"; }
section() { echo "== $*"; }

if [ ! -e "$PAGODA_CUDA_LIB" ]; then
	echo "SKIP: $PAGODA_CUDA_LIB not built (make with nvcc on the PATH or in /usr/local/cuda)"
	exit 77
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

section "kernels against the CPU reference"
"$B/tests/gpu/test_cuda" > "$W/k" 2>&1
rc=$?
cat "$W/k"
[ $rc -eq 77 ] && exit 77
if [ $rc -eq 0 ]; then ok "test_cuda"; else bad "test_cuda (exit $rc)"; fi

if [ -z "$T" ] || [ ! -d "$T/models" ]; then
	bad "no test data (PAGODA_TESTDATA, build/testdata or ../shared/testdata)"
	echo "gpu: $pass passed, $fail failed"
	exit 1
fi

P="Once upon a time"
section "greedy ids: cuda against cpu"
ids() { # MODEL N BACKEND [ENV...]
	m=$1 n=$2 be=$3
	shift 3
	env "$@" "$B/pagoda" run -m "$m" -p "$P" -n "$n" --temp 0 --ids --backend "$be" 2>>"$W/err"
}
for f in "$T"/models/synth-kq-*.gguf "$T"/models/stories260K*.gguf; do
	[ -e "$f" ] || continue
	n=64
	case $f in *stories260K*) n=32 ;; esac
	name=$(basename "$f" .gguf)
	want=$(ids "$f" $n cpu)
	got=$(ids "$f" $n cuda)
	eager=$(ids "$f" $n cuda PAGODA_CUDA_GRAPHS=0)
	if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "$name: $n ids equal the CPU's"
	else
		bad "$name: cuda ids differ from the CPU's"
		echo "    cpu:  $want"
		echo "    cuda: $got"
		tail -3 "$W/err"
	fi
	if [ -n "$got" ] && [ "$eager" = "$got" ]; then ok "$name: graphs and eager launches agree"
	else bad "$name: PAGODA_CUDA_GRAPHS=0 gives '$eager'"; fi
done

section "a quantized KV cache: refused on cuda, saying so (the cpu backend has it)"
if [ -e "$T/models/synth-kq-Q8_0.gguf" ]; then
	out=$("$B/pagoda" run -m "$T/models/synth-kq-Q8_0.gguf" -p "$P" -n 4 --backend cuda -ctk q8_0 -ctv q8_0 2>&1)
	case "$?:$out" in
	0:*) bad "-ctk q8_0 -ctv q8_0 on cuda was not refused" ;;
	*"the KV cache is f16 only here"*) ok "-ctk q8_0 -ctv q8_0 refused on cuda" ;;
	*) bad "-ctk q8_0 on cuda: unclear error: $out" ;;
	esac
	# auto: the device when it can run the configuration, else the CPU
	out=$("$B/pagoda" run -m "$T/models/synth-kq-Q8_0.gguf" -p "$P" -n 4 --backend auto -ctk q8_0 -ctv q8_0 --stats 2>&1)
	case "$?:$out" in
	0:*"picked the CPU: cuda:"*) ok "auto with -ctk q8_0 ran on the CPU, saying why" ;;
	*) bad "auto with -ctk q8_0: $out" ;;
	esac
fi

section "perplexity on story.txt (within 0.5% of the CPU)"
for f in "$T"/models/stories260K*.gguf; do
	name=$(basename "$f" .gguf)
	c=$("$B/pagoda" perplexity -m "$f" -f "$T/golden/story.txt" -c 128 --backend cpu 2>/dev/null | sed -n 's/^PPL = //p')
	g=$("$B/pagoda" perplexity -m "$f" -f "$T/golden/story.txt" -c 128 --backend cuda 2>>"$W/err" | sed -n 's/^PPL = //p')
	if [ -n "$c" ] && [ -n "$g" ] && awk -v g="$g" -v c="$c" 'BEGIN { d = (g - c) / c; if (d < 0) d = -d; exit !(d <= 0.005) }'
	then ok "$name: PPL cuda $g, cpu $c"
	else bad "$name: PPL cuda '$g', cpu '$c'"; tail -3 "$W/err"; fi
done

section "pagodad --backend cuda: 32 concurrent requests, a killed client"
M=$T/models/stories260K.gguf
"$B/pagodad" --model "$M" --socket "$W/sock" --bus none --backend cuda --max-seqs 32 2> "$W/log" &
dpid=$!
pids="$pids $dpid"
k=0
until [ -S "$W/sock" ] || [ $k -ge 300 ]; do sleep 0.1; k=$((k + 1)); done
grep -m1 "backend" "$W/log"
gen() { # I: prompt and length vary with I
	"$B/pagoda" generate --socket "$W/sock" -p "$P, $1" -n $((16 + ($1 * 37) % 90)) --temp 0 --ids
}
for i in $(seq 0 31); do gen $i > "$W/solo$i" 2>/dev/null; done
for i in $(seq 0 31); do gen $i > "$W/conc$i" 2>/dev/null & eval "g$i=\$!"; done
for i in $(seq 0 31); do eval "wait \$g$i"; done
same=0
for i in $(seq 0 31); do [ -s "$W/solo$i" ] && cmp -s "$W/solo$i" "$W/conc$i" && same=$((same + 1)); done
if [ $same -eq 32 ]; then ok "32 concurrent requests equal their solo runs"; else bad "$((32 - same)) of 32 differ from their solo runs"; fi
# a client killed mid-stream: the others finish as they would alone
for i in 0 1 2 3; do
	"$B/pagoda" generate --socket "$W/sock" -p "$P, $i" -n 1500 --temp 0 --ids > "$W/long$i" 2>/dev/null &
	eval "l$i=\$!"
done
sleep 0.2
kill -KILL $l0 2>/dev/null
for i in 1 2 3; do eval "wait \$l$i"; done
good=0
for i in 1 2 3; do
	"$B/pagoda" generate --socket "$W/sock" -p "$P, $i" -n 1500 --temp 0 --ids > "$W/longsolo$i" 2>/dev/null
	[ -s "$W/long$i" ] && cmp -s "$W/long$i" "$W/longsolo$i" && good=$((good + 1))
done
if [ $good -eq 3 ] && kill -0 $dpid 2>/dev/null; then ok "a killed client harmed nobody"
else bad "after a client was killed: $good of 3 equal their solo runs; daemon $(kill -0 $dpid 2>/dev/null && echo alive || echo dead)"; fi
kill -INT $dpid; wait $dpid

if [ "${GPU_BENCH:-0}" = 1 ]; then
	section "benchmarks (TinyLlama-1.1B shape, random weights; pagoda-bench through pagodad)"
	mkdir -p "$B/models"
	jnum() { sed -n "s/.*\"$1\":{\"n\":[0-9]*,\"mean\":\([0-9.]*\).*/\1/p"; }
	for ty in Q8_0 Q4_0; do
		m=$B/models/tinyllama-1.1b-$(echo $ty | tr A-Z a-z).gguf
		[ -e "$m" ] || "$B/pagoda-mkmodel" -q --preset tinyllama-1.1b --type $ty -o "$m" || { bad "mkmodel $ty"; continue; }
		bytes=$(stat -c %s "$m")
		for graphs in 1 0; do
			PAGODA_CUDA_GRAPHS=$graphs "$B/pagodad" --model "$m" --socket "$W/bsock" --bus none --backend cuda \
				--max-seqs 64 --ctx 1024 --no-prefix-cache 2> "$W/blog" &
			bpid=$!
			pids="$pids $bpid"
			k=0
			until [ -S "$W/bsock" ] || [ $k -ge 600 ]; do sleep 0.1; k=$((k + 1)); done
			bench() { "$B/pagoda-bench" load --socket "$W/bsock" -q --json "$@"; }
			j=$(bench -c 1 -n 3 -p 512 -o 1)
			pf=$(echo "$j" | jnum prefill_ms)
			j=$(bench -c 1 -n 2 -p 16 -o 256)
			tp=$(echo "$j" | jnum tpot_ms)
			a16=$(bench -c 16 -n 32 -p 128 -o 128 | sed -n 's/.*"output_tok_per_s":\([0-9.]*\).*/\1/p')
			a64=$(bench -c 64 -n 64 -p 128 -o 128 | sed -n 's/.*"output_tok_per_s":\([0-9.]*\).*/\1/p')
			awk -v ty=$ty -v g=$graphs -v pf="$pf" -v tp="$tp" -v b="$bytes" -v a16="$a16" -v a64="$a64" 'BEGIN {
				printf "  %s graphs=%s: prefill 512: %.0f tok/s | decode 1 stream: %.1f tok/s, %.0f GB/s of weights | 16 streams: %s tok/s | 64 streams: %s tok/s\n",
					ty, g, (pf > 0 ? 512000 / pf : 0), (tp > 0 ? 1000 / tp : 0), (tp > 0 ? b / tp / 1e6 : 0), a16, a64 }'
			kill -INT $bpid; wait $bpid
			rm -f "$W/bsock"
		done
	done
	echo "  (the fraction of HBM bandwidth: GB/s of weights over the card's peak, e.g. 3350 GB/s for an H100 SXM)"
fi

echo "gpu: $pass passed, $fail failed"
[ $fail -eq 0 ]
