#!/bin/sh
# Structured output's cost (docs/grammar.md): decode tok/s of `pagoda run`
# with a JSON Schema against the same request without, rounds alternated
# A B A B; the ratio is the median of the per-round ratios (issue target:
# >= 95%). Models: the TinyLlama-shaped Q8_0 pagoda-mkmodel writes (random
# weights, a 32,000-token vocabulary: what the schema admits is all it
# says) and SmolLM2-135M-Instruct (a real model, 49,152 tokens).
#   ROUNDS (default 5)  N tokens (default 96)  THREADS (default 2)
set -eu
B=${PAGODA_BUILD:-build}
ROUNDS=${ROUNDS:-5}
N=${N:-96}
THREADS=${THREADS:-2}
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gmbench-XXXXXX")
trap 'rm -rf "$D"' EXIT
# a tool call's arguments: bounded strings, an enum, numbers, an array
cat >"$D/schema.json" <<'J'
{"type":"object","properties":{"city":{"type":"string","maxLength":24},
 "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},
 "hourly":{"type":"boolean"},"fields":{"type":"array","items":{"enum":["temp","rain","wind","uv"]},"maxItems":4},
 "note":{"type":"string","maxLength":64}},
 "required":["city","unit","days","hourly","fields","note"],"additionalProperties":false}
J
one() { # model prompt args...: decode tok/s
	m=$1 p=$2
	shift 2
	"$B/pagoda" run -m "$m" -p "$p" -n "$N" --temp 0 -t "$THREADS" "$@" 2>"$D/err" >"$D/out"
	awk '/generated/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1) } END { print r }' "$D/err"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
measure() { # name model prompt
	: >"$D/a" && : >"$D/b" && : >"$D/r"
	for _ in $(seq "$ROUNDS"); do
		a=$(one "$2" "$3")
		b=$(one "$2" "$3" --json-schema "$D/schema.json")
		echo "$a" >>"$D/a" && echo "$b" >>"$D/b" && echo "$b $a" | awk '{ print $1 / $2 }' >>"$D/r"
	done
	printf '| %s | %.2f | %.2f | **%.1f%%** |\n' "$1" "$(median <"$D/a")" "$(median <"$D/b")" \
		"$(echo "$(median <"$D/r")" | awk '{ print 100 * $1 }')"
}
M=$B/models/tinyllama-1.1b-q8_0.gguf
[ -s "$M" ] || "$B/pagoda-mkmodel" --preset tinyllama-1.1b --type Q8_0 -o "$M" -q
echo "pagoda constrained decode: $N tokens, $THREADS threads, $ROUNDS rounds (median of ratios)"
echo "| model | tok/s, free | with the schema | constrained / free |"
echo "|---|---|---|---|"
measure "TinyLlama-shaped Q8_0 (random weights)" "$M" "Weather for Oslo as JSON:"
if S=$(sh tools/fetch-smollm2.sh 2>/dev/null); then
	measure "SmolLM2-135M-Instruct" "$S" "Weather for Oslo as JSON:"
fi
