#!/bin/sh
# Greedy output equals llama.cpp's, byte for byte: the golden prompts' text
# on stories260K, and prompt + output ids on every quantized model file;
# the ids again with the kernels capped at each lower ISA (PAGODA_ISA),
# which must give the same bits as the one the CPU picks. The CPU backend:
# the goldens are its contract, whatever else the machine has.
. "$(dirname "$0")/lib.sh"
# Without stories260K (make testdata cannot make it: trained weights) the
# ids of whatever model files there are still run.
M=$T/models/stories260K.gguf
out=$(mktemp)
if [ -n "$T" ] && [ -e "$M" ] || [ "${PAGODA_REQUIRE_TESTDATA:-0}" = 1 ]; then
	need_testdata models/stories260K.gguf golden/once_upon_a_time.prompt
	for p in "$T"/golden/*.prompt; do
		b=${p%.prompt}
		"$B/pagoda" run --backend cpu -m "$M" -p "$(cat "$p")" -n 128 --temp 0 2>/dev/null > "$out"
		if cmp -s "$out" "$b.expected"; then ok; else bad "text of $(basename "$b") differs from llama.cpp"; fi
		want=$(sed -n 's/^prompt_ids //p' "$b.ids")
		got=$(printf '%s' "$(cat "$p")" | "$B/pagoda" tokenize -m "$M" --bos)
		if [ "$got" = "$want" ]; then ok; else bad "prompt ids of $(basename "$b"): got '$got' want '$want'"; fi
	done
else
	ls "$T"/golden/synth-kq-*.ids >/dev/null 2>&1 || need_testdata models/stories260K.gguf
	echo "SKIP: test data models/stories260K.gguf not found (the golden prompts' text)" >&2
fi
for isa in "" scalar avx2; do
	for f in "$T"/golden/stories260K-*.ids "$T"/golden/synth-kq-*.ids; do
		[ -e "$f" ] || continue
		n=$(basename "$f" .ids)
		need_testdata "models/$n.gguf"
		want_p=$(sed -n 's/^prompt_ids //p' "$f")
		want_o=$(sed -n 's/^output_ids //p' "$f")
		got_o=$(PAGODA_ISA=$isa "$B/pagoda" run --backend cpu -m "$T/models/$n.gguf" -p "Once upon a time" -n 64 --temp 0 \
			--ids 2>/dev/null)
		if [ "$got_o" = "$want_o" ]; then ok; else bad "$n output ids ${isa:+(PAGODA_ISA=$isa) }differ from llama.cpp:
  want $want_o
  got  $got_o"; fi
		[ -n "$isa" ] && continue
		got_p=$(printf 'Once upon a time' | "$B/pagoda" tokenize -m "$T/models/$n.gguf" --bos)
		if [ "$got_p" = "$want_p" ]; then ok; else bad "$n prompt ids: got '$got_p'"; fi
	done
done
rm -f "$out"
finish
