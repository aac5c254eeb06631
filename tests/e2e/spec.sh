#!/bin/sh
# Speculative decoding end to end: `pagoda run` with prompt lookup and with
# a draft model prints, byte for byte, llama.cpp's greedy goldens (the
# golden prompts' text; every model file's ids, with the kernels capped at
# each ISA too); pagodad with a draft model streams the same through
# `pagoda generate` per request (draft, ngram, off); counters show up;
# bad settings fail with a clear error. Exit 77 (skip) without the models.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf models/stories260K-Q4_0.gguf golden/once_upon_a_time.prompt
M=$T/models/stories260K.gguf
DM=$T/models/stories260K-Q4_0.gguf
for b in pagodad pagoda pagoda-mkmodel; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-spec-XXXXXX")
DP=
cleanup() { [ -n "$DP" ] && kill -KILL $DP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT

for p in "$T"/golden/*.prompt; do
	b=${p%.prompt}
	for spec in "--speculative ngram" "--draft-model $DM"; do
		"$B/pagoda" run --backend cpu -m "$M" -p "$(cat "$p")" -n 128 --temp 0 -t 2 $spec 2>"$D/err" >"$D/out"
		if cmp -s "$D/out" "$b.expected"; then ok; else bad "$(basename "$b") with $spec differs from llama.cpp"; fi
	done
done
grep -q "speculative: [0-9]* drafted, [0-9]* accepted" "$D/err" && ok || bad "no speculative line: $(cat "$D/err")"

# every model file's golden ids, prompt lookup and a draft model (the
# family's Q4_0), at each ISA
for isa in "" scalar avx2; do
	for f in "$T"/golden/stories260K-*.ids "$T"/golden/synth-kq-*.ids; do
		[ -e "$f" ] || continue
		n=$(basename "$f" .ids)
		case $n in stories*) dm=stories260K-Q4_0 ;; *) dm=synth-kq-Q4_0 ;; esac
		need_testdata "models/$n.gguf" "models/$dm.gguf"
		want=$(sed -n 's/^output_ids //p' "$f")
		for spec in "--speculative ngram" "--speculative draft --draft-model $T/models/$dm.gguf --draft-max 5"; do
			got=$(PAGODA_ISA=$isa "$B/pagoda" run --backend cpu -m "$T/models/$n.gguf" -p "Once upon a time" \
				-n 64 --temp 0 -t 2 --ids $spec 2>/dev/null)
			if [ "$got" = "$want" ]; then ok; else bad "$n ${isa:+(PAGODA_ISA=$isa) }with $spec:
  want $want
  got  $got"; fi
		done
	done
done

# --stats: the engine's counters
"$B/pagoda" run -m "$M" -p "Once upon a time" -n 64 --temp 0 -t 2 --speculative ngram --stats \
	>/dev/null 2>"$D/err"
grep -q "speculative (ngram by default): [0-9]* drafted" "$D/err" && ok || bad "--stats: $(cat "$D/err")"

# bad settings: clear errors
"$B/pagoda" run -m "$M" -p "Hi" -n 4 --speculative draft >/dev/null 2>"$D/err" && bad "draft without a model ran"
grep -q "draft model" "$D/err" && ok || bad "unclear error: $(cat "$D/err")"
"$B/pagoda" run -m "$M" -p "Hi" -n 4 --speculative sometimes >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "--speculative sometimes accepted"
"$B/pagoda-mkmodel" --preset tiny --vocab 600 -o "$D/other.gguf" >/dev/null 2>&1 || bad "mkmodel failed"
"$B/pagoda" run -m "$M" -p "Hi" -n 4 --draft-model "$D/other.gguf" >/dev/null 2>"$D/err" && bad "a foreign vocabulary drafted"
grep -q "vocabulary" "$D/err" && ok || bad "unclear error: $(cat "$D/err")"

# the daemon: a draft model by default, each request's choice
S=$D/s.sock
"$B/pagodad" --model "$M" --draft-model "$DM" --draft-max 6 --socket "$S" --threads 2 --bus none 2>"$D/log" &
DP=$!
i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 200 ] && { cat "$D/log" >&2; bad "pagodad did not start"; finish; }
	sleep 0.05
done
grep -q "speculative decoding by default: draft" "$D/log" && ok || bad "log: $(cat "$D/log")"
for p in "$T"/golden/*.prompt; do
	for spec in "" "--speculative ngram" "--speculative off" "--speculative draft --draft-max 2"; do
		"$B/pagoda" generate --socket "$S" -p "$(cat "$p")" -n 128 --temp 0 $spec >"$D/gen" 2>"$D/err"
		if cmp -s "$D/gen" "${p%.prompt}.expected"; then ok; else bad "generate $spec: $(basename "$p") differs"; fi
	done
done
"$B/pagoda" generate --socket "$S" -p "Once upon a time" -n 64 --temp 0 --timings >/dev/null 2>"$D/err"
grep -q "speculative: [0-9]* drafted, [0-9]* accepted" "$D/err" && ok || bad "--timings: $(cat "$D/err")"
"$B/pagoda" generate --socket "$S" -p "Once upon a time" -n 64 --temp 0 --speculative off --timings \
	>/dev/null 2>"$D/err"
grep -q "speculative:" "$D/err" && bad "--speculative off drafted: $(cat "$D/err")" || ok
stop_bg $DP TERM 60; rc=$?
DP=
[ $rc -eq 0 ] && ok || bad "pagodad exit status $rc after SIGTERM"

# a daemon without a draft model refuses draft requests, serves the others
"$B/pagodad" --model "$M" --socket "$S" --threads 2 --bus none 2>"$D/log" &
DP=$!
i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 200 ] && { cat "$D/log" >&2; bad "pagodad did not start"; finish; }
	sleep 0.05
done
"$B/pagoda" generate --socket "$S" -p "Hi" -n 4 --temp 0 --speculative draft >/dev/null 2>"$D/err" &&
	bad "a draft request ran without a draft model"
grep -q "draft model" "$D/err" && ok || bad "unclear error: $(cat "$D/err")"
"$B/pagoda" generate --socket "$S" -p "$(cat "$T/golden/once_upon_a_time.prompt")" -n 128 --temp 0 \
	--speculative ngram >"$D/gen" 2>&1
cmp -s "$D/gen" "$T/golden/once_upon_a_time.expected" && ok || bad "ngram on a plain daemon differs"
stop_bg $DP TERM 60
DP=
# a daemon given draft without a model does not start
"$B/pagodad" --model "$M" --speculative draft --socket "$S" --threads 2 --bus none 2>"$D/log" &&
	bad "pagodad started with --speculative draft and no draft model"
grep -q "draft model" "$D/log" && ok || bad "unclear pagodad error: $(cat "$D/log")"
finish
