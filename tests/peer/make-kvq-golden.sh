#!/bin/sh
# tests/peer/make-kvq-golden.sh GREEDY LLAMA_BIN TESTDATA > tests/e2e/data/kvq.golden
# The quantized KV cache's golden for tests/e2e/kv_quant.sh, made by
# llama.cpp (not run by the tests; tests/make-testdata.sh runs it into
# build/testdata and compares it with the committed one). GREEDY is
# tests/peer/greedy.c as make-testdata.sh builds it, LLAMA_BIN the peer's
# bin folder, TESTDATA holds models/synth-kq-*.gguf and golden/story.txt.
# One line each:
#   ids MODEL CTK CTV ID...  greedy -ctk CTK -ctv CTV (flash attention on,
#                            as llama-completion -fa on): "Once upon a
#                            time", 64 tokens, no repetition penalty
#   ppl MODEL CTK CTV PPL    llama-perplexity -fa on -ctk CTK -ctv CTV
#                            -c 128 -b 128 on golden/story.txt
set -eu
G=$1 BIN=$2 T=$3
ids() { # MODEL CTK CTV
	out=$("$G" -ctk "$2" -ctv "$3" "$T/models/$1.gguf" "Once upon a time" 64 | sed -n 's/^output_ids //p')
	[ -n "$out" ] || { echo "make-kvq-golden: no ids for $*" >&2; exit 1; }
	echo "ids $1 $2 $3 $out"
}
ppl() { # MODEL CTK CTV; llama.cpp's log thread sometimes loses the last line at exit: retry
	v=
	for _ in 1 2 3 4 5; do
		[ -n "$v" ] && break
		v=$("$BIN/llama-perplexity" -m "$T/models/$1.gguf" -f "$T/golden/story.txt" -c 128 -b 128 -t 2 \
			-fa on -ctk "$2" -ctv "$3" 2>&1 | grep -ao 'Final estimate: PPL = [0-9.]*' | sed 's/.* //')
	done
	[ -n "$v" ] || { echo "make-kvq-golden: no perplexity for $*" >&2; exit 1; }
	echo "ppl $1 $2 $3 $v"
}
for m in F32 F16 Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0; do
	ids "synth-kq-$m" q8_0 q8_0
	ids "synth-kq-$m" q4_0 q4_0
done
for t in q4_1 iq4_nl q5_0 q5_1; do
	ids synth-kq-Q8_0 $t $t
done
ids synth-kq-Q8_0 q8_0 f16
ids synth-kq-Q8_0 f16 q4_0
ids synth-kq-Q8_0 q4_0 q8_0
for kv in "f16 f16" "q8_0 q8_0" "q4_0 q4_0"; do
	ppl synth-kq-Q8_0 $kv
done
