#!/bin/sh
# Prompt lookup's counts on the prompts of bench/spec_prompts.sh: drafts
# verified, accepted and rejected, target passes (tokens over tokens per
# pass, rounded) and tokens per pass of a greedy `pagoda run --speculative
# ngram`, its output checked equal to decoding without drafts. They do not
# depend on timing (the same on a loaded machine): they are what to
# compare when changing how prompt lookup drafts (docs/speculative.md).
#   MODEL  target GGUF (default: SmolLM2-135M-Instruct, tools/fetch-smollm2.sh)
#   N  tokens to generate (default 256)   DRAFT_MAX  (default 8)
#   PROMPTS  which (default: edit story fix code summ poem bike list)
set -eu
B=${PAGODA_BUILD:-build}
N=${N:-256}
DRAFT_MAX=${DRAFT_MAX:-8}
PROMPTS=${PROMPTS:-edit story fix code summ poem bike list}
MODEL=${MODEL:-$(sh tools/fetch-smollm2.sh)}
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-speccount-XXXXXX")
trap 'rm -rf "$D"' EXIT
. bench/spec_prompts.sh

echo "pagoda prompt lookup: $(basename "$MODEL"), $N tokens, draft-max $DRAFT_MAX"
echo "| prompt | tokens | drafted | accepted | rejected | passes | tokens per pass |"
echo "|---|---|---|---|---|---|---|"
for p in $PROMPTS; do
	"$B/pagoda" run -m "$MODEL" -f "$D/$p" -n "$N" --temp 0 -t 2 --ids --speculative off >"$D/off" 2>/dev/null
	"$B/pagoda" run -m "$MODEL" -f "$D/$p" -n "$N" --temp 0 -t 2 --ids --speculative ngram \
		--draft-max "$DRAFT_MAX" >"$D/on" 2>"$D/err"
	if ! cmp -s "$D/off" "$D/on"; then
		echo "spec_counts: $p: output with prompt lookup differs from without" >&2
		exit 1
	fi
	awk -v p="$p" '/generated/ { for (i = 1; i <= NF; i++) if ($i == "generated") n = $(i + 1) }
	     /speculative:/ { d = $3; a = $5; t = $(NF - 3) }
	     END { printf "| %s | %d | %d | %d | %d | %.0f | %s |\n", p, n, d, a, d - a, n / t, t }' "$D/err"
done
