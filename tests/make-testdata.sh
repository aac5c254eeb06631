#!/bin/sh
# tests/make-testdata.sh — `make testdata`: regenerate what can be made of
# the conformance data (../shared/testdata/README.md) into build/testdata
# from the peer, llama.cpp built by mk/peer.sh. Long and optional: neither
# make check nor CI runs it. make check uses build/testdata when
# ../shared/testdata is absent.
#
#   vocab/   llama.cpp's own tokenizer test files (ggml-vocab-*.gguf with
#            .inp/.out), as its source carries them
#   models/  synth-kq-F32.gguf (pagoda-mkmodel: dim 256, 2 layers, 4 heads,
#            2 KV heads, ffn 768; stories260K's vocabulary where a
#            stories260K.gguf is at hand, else mkmodel's own 512 tokens)
#            and its F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0 by llama-quantize
#   golden/  synth-kq-TYPE.ids: "Once upon a time", 64 greedy tokens;
#            kvq.golden: the same with quantized KV caches, and perplexities
#            (tests/peer/make-kvq-golden.sh; compared with the committed
#            tests/e2e/data/kvq.golden)
#   and, only where a stories260K.gguf is at hand (PAGODA_TESTDATA or
#   ../shared: trained weights cannot be made), its F16/Q8_0/Q4_0, their
#   goldens, the golden prompts' .ids/.expected and llama-perplexity's PPL.
#
# SYNTH_F32=FILE quantizes FILE instead of a new synth-kq-F32.gguf (given
# ../shared's, every file made is compared with ../shared's).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
B=${PAGODA_BUILD:-$ROOT/build}
OUT=$B/testdata
SHARED=$ROOT/../shared/testdata
[ -d "$SHARED" ] || SHARED=
say() { printf 'testdata: %s\n' "$*"; }

BIN=$(sh mk/peer.sh) || { say "the peer did not build"; exit 1; }
SRC=$(sh mk/peer.sh src)
say "peer: $(sh mk/peer.sh version)"
mkdir -p "$OUT/vocab" "$OUT/models" "$OUT/golden"

# the greedy golden writer, against the peer's static libraries
PB=$(dirname "$BIN")/..
G=$B/peer/greedy
if [ ! -x "$G" ] || [ tests/peer/greedy.c -nt "$G" ]; then
	cc -O2 -std=gnu17 -Wall -Wextra -Wshadow -I"$SRC/include" -I"$SRC/ggml/include" \
		-c tests/peer/greedy.c -o "$B/peer/greedy.o" &&
		c++ -o "$G" "$B/peer/greedy.o" "$PB/src/libllama.a" "$PB/ggml/src/libggml.a" \
			"$PB/ggml/src/libggml-cpu.a" "$PB/ggml/src/libggml-base.a" -fopenmp -pthread -lm ||
		{ say "tests/peer/greedy.c did not build"; exit 1; }
fi

made=0 same=0 differ=
compare() { # REL: against ../shared's copy, where there is one
	made=$((made + 1))
	[ -n "$SHARED" ] && [ -e "$SHARED/$1" ] || return 0
	if cmp -s "$OUT/$1" "$SHARED/$1"; then same=$((same + 1)); else differ="$differ $1"; fi
}

# ---- vocab ----------------------------------------------------------------------
for v in llama-spm llama-bpe gpt-2 qwen2; do
	for ext in gguf gguf.inp gguf.out; do
		f=ggml-vocab-$v.$ext
		if [ -e "$SRC/models/$f" ]; then
			cp "$SRC/models/$f" "$OUT/vocab/$f" && compare "vocab/$f"
		else
			say "cannot make vocab/$f: the peer's source lacks models/$f"
		fi
	done
done

# ---- synthetic models and their goldens ---------------------------------------------
F32=$OUT/models/synth-kq-F32.gguf
if [ -n "${SYNTH_F32:-}" ]; then
	cp "$SYNTH_F32" "$F32"
else
	voc=
	for d in "${PAGODA_TESTDATA:-}" "$SHARED"; do
		[ -n "$d" ] && [ -e "$d/models/stories260K.gguf" ] && voc=$d/models/stories260K.gguf && break
	done
	"$B/pagoda-mkmodel" -q -o "$F32" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 768 --vocab 512 \
		${voc:+--tokenizer "$voc"} || { say "pagoda-mkmodel failed"; exit 1; }
	say "made models/synth-kq-F32.gguf with pagoda-mkmodel (vocabulary: ${voc:-mkmodel's own, 512 tokens})"
fi
compare models/synth-kq-F32.gguf
for t in F32 F16 Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0; do
	m=$OUT/models/synth-kq-$t.gguf
	if [ "$t" != F32 ]; then
		"$BIN/llama-quantize" "$F32" "$m" "$t" 2 >"$B/peer/quantize-$t.log" 2>&1 ||
			{ say "llama-quantize $t failed (see $B/peer/quantize-$t.log)"; continue; }
		compare "models/synth-kq-$t.gguf"
	fi
	"$G" "$m" "Once upon a time" 64 >"$OUT/golden/synth-kq-$t.ids" ||
		{ say "no golden for synth-kq-$t"; continue; }
	compare "golden/synth-kq-$t.ids"
done

# ---- stories260K, where one is at hand (it cannot be made) --------------------------
S260=
for d in "${PAGODA_TESTDATA:-}" "$SHARED"; do
	[ -n "$d" ] && [ "$d" != "$OUT" ] && [ -e "$d/models/stories260K.gguf" ] && S260=$d && break
done
if [ -n "$S260" ]; then
	say "stories260K.gguf from $S260: its quantizations, goldens and perplexities"
	cp "$S260/models/stories260K.gguf" "$OUT/models/" && cp "$S260/golden/story.txt" "$OUT/golden/"
	for t in F16 Q8_0 Q4_0; do
		"$BIN/llama-quantize" "$OUT/models/stories260K.gguf" "$OUT/models/stories260K-$t.gguf" "$t" 2 \
			>"$B/peer/quantize-s-$t.log" 2>&1 && compare "models/stories260K-$t.gguf"
		"$G" "$OUT/models/stories260K-$t.gguf" "Once upon a time" 64 >"$OUT/golden/stories260K-$t.ids" &&
			compare "golden/stories260K-$t.ids"
	done
	for pf in "$S260"/golden/*.prompt; do
		n=$(basename "$pf" .prompt)
		cp "$pf" "$OUT/golden/"
		"$G" "$OUT/models/stories260K.gguf" "$(cat "$pf")" 128 "$OUT/golden/$n.expected" >"$OUT/golden/$n.ids" &&
			compare "golden/$n.ids" && compare "golden/$n.expected"
	done
	for m in stories260K stories260K-F16 stories260K-Q8_0 stories260K-Q4_0; do
		# llama.cpp's log thread sometimes loses the last line at exit: retry
		ppl=
		for _ in 1 2 3 4 5; do
			[ -n "$ppl" ] && break
			ppl=$("$BIN/llama-perplexity" -m "$OUT/models/$m.gguf" -f "$OUT/golden/story.txt" -c 128 -b 128 -t 2 2>&1 |
				grep -ao 'Final estimate: PPL = [0-9.]*' | sed 's/.* //')
		done
		say "llama-perplexity $m on golden/story.txt, -c 128 -b 128: PPL ${ppl:-?} (../shared/testdata/README.md has llama.cpp of 2026-09's)"
	done
fi

# ---- the quantized KV cache's golden (tests/e2e/kv_quant.sh reads the committed one) ----
if [ -e "$OUT/golden/story.txt" ]; then
	if sh tests/peer/make-kvq-golden.sh "$G" "$BIN" "$OUT" >"$OUT/golden/kvq.golden"; then
		made=$((made + 1))
		if cmp -s "$OUT/golden/kvq.golden" tests/e2e/data/kvq.golden; then
			say "golden/kvq.golden is tests/e2e/data/kvq.golden"
		else
			say "golden/kvq.golden differs from tests/e2e/data/kvq.golden (expected unless these are ../shared's synth-kq models; else the peer changed: commit it)"
		fi
	else
		say "tests/peer/make-kvq-golden.sh failed"
	fi
else
	say "cannot make golden/kvq.golden: no golden/story.txt (it comes with stories260K)"
fi

say "made $made files in $OUT${SHARED:+; $same the same as ../shared/testdata's}"
[ -n "$differ" ] && say "differ from ../shared/testdata:$differ${SYNTH_F32:+}"
[ -n "$differ" ] && [ -z "${SYNTH_F32:-}" ] &&
	say "(expected for the synth-kq files: ../shared's synth-kq-F32.gguf was not made by pagoda-mkmodel; SYNTH_F32=../shared/testdata/models/synth-kq-F32.gguf compares like with like)"
[ -z "$S260" ] &&
	say "cannot make: models/stories260K.gguf and its F16/Q8_0/Q4_0 (trained weights: karpathy/tinyllamas), so neither golden/stories260K-*.ids, the golden prompts' .ids/.expected, nor golden/story.txt"
say "cannot make: chat/ and jsonschema/ (other people's data, not the peer's)"
exit 0
