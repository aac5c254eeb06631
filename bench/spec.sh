#!/bin/sh
# Speculative decoding's gain and cost (docs/speculative.md): decode tok/s
# of `pagoda run` with and without prompt lookup, rounds alternated, on
#   edit:  the reply copies a given paragraph with small changes (most
#          output tokens are in the prompt: prompt lookup should pay),
#   story: an open-ended story (little to copy: what speculating costs);
# and with SPEC_PAIR=1 a TinyLlama-shaped Q8_0 target with its Q4_0 as
# draft (random weights, pagoda-mkmodel: nothing is accepted, so it shows
# what an idle draft model costs); SPEC_PAIR=only runs that alone.
# Each figure is the median over ROUNDS; the ratio is the median of the
# per-round ratios. Run on a quiet machine; figures go to BENCHMARKS.md.
#   MODEL    target GGUF (default: SmolLM2-135M-Instruct, tools/fetch-smollm2.sh)
#   ROUNDS   rounds per workload (default 5)   N   tokens to generate (default 256)
#   THREADS  compute threads (default 2)       DRAFT_MAX  (default 8)
set -eu
B=${PAGODA_BUILD:-build}
ROUNDS=${ROUNDS:-5}
N=${N:-256}
THREADS=${THREADS:-2}
DRAFT_MAX=${DRAFT_MAX:-8}
MODEL=${MODEL:-$(sh tools/fetch-smollm2.sh)}
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-specbench-XXXXXX")
trap 'rm -rf "$D"' EXIT

. bench/spec_prompts.sh

# one run: "decode_tok_per_s acceptance tokens_per_pass"
one() { # prompt-file model spec-args...
	f=$1 m=$2
	shift 2
	"$B/pagoda" run -m "$m" -f "$f" -n "$N" --temp 0 -t "$THREADS" "$@" 2>"$D/err" >/dev/null
	awk '/generated/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1) }
	     /speculative:/ { for (i = 1; i <= NF; i++) { if ($i == "accepted") a = $(i + 1); if ($i == "tokens") t = $(i - 1) } }
	     END { gsub(/[(%),]/, "", a); printf "%s %s %s\n", r, a == "" ? "-" : a, t == "" ? "1.00" : t }' "$D/err"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# workload: rounds alternate without and with drafts
measure() { # name prompt-file model spec-args...
	name=$1 f=$2 m=$3
	shift 3
	: >"$D/base" && : >"$D/spec" && : >"$D/ratio" && : >"$D/acc" && : >"$D/tpp"
	for r in $(seq "$ROUNDS"); do
		b=$(one "$f" "$m" --speculative off | cut -d' ' -f1)
		set -- $(one "$f" "$m" "$@") "$@"
		echo "$b" >>"$D/base"
		echo "$1" >>"$D/spec"
		echo "$1 $b" | awk '{ print $1 / $2 }' >>"$D/ratio"
		echo "$2" >>"$D/acc"
		echo "$3" >>"$D/tpp"
		shift 3
	done
	printf '| %s | %.1f | %.1f | **%.2f×** | %s%% | %s |\n' "$name" "$(median <"$D/base")" "$(median <"$D/spec")" \
		"$(median <"$D/ratio")" "$(median <"$D/acc")" "$(median <"$D/tpp")"
}

echo "pagoda speculative decoding: $(basename "$MODEL"), $N tokens, $THREADS threads, $ROUNDS rounds, draft-max $DRAFT_MAX"
echo "| workload | decode tok/s, off | with drafts | ratio | accepted | tokens per pass |"
echo "|---|---|---|---|---|---|"
if [ "${SPEC_PAIR:-0}" != only ]; then
	measure "edit, ngram" "$D/edit" "$MODEL" --speculative ngram --draft-max "$DRAFT_MAX"
	measure "story, ngram" "$D/story" "$MODEL" --speculative ngram --draft-max "$DRAFT_MAX"
fi
if [ "${SPEC_PAIR:-0}" != 0 ]; then
	"$B/pagoda-mkmodel" --preset tinyllama-1.1b --type Q8_0 -o "$D/t-q8.gguf" >/dev/null
	"$B/pagoda-mkmodel" --preset tinyllama-1.1b --type Q4_0 -o "$D/t-q4.gguf" >/dev/null
	printf 'Once upon a time' >"$D/plain"
	measure "TinyLlama-shaped Q8_0, Q4_0 draft" "$D/plain" "$D/t-q8.gguf" --draft-model "$D/t-q4.gguf" \
		--draft-max "$DRAFT_MAX"
fi
