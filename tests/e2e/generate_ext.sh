#!/bin/sh
# The request fields of protocol v3 through a real pagodad and libpagoda:
# a constraint (JSON Schema, regex, GBNF) gives the same greedy output as
# in-process `pagoda run` with it, and every output validates with Python's
# jsonschema / re; a constraint that does not compile is refused naming
# why; top logprobs come sorted, with the greedy token first and its own
# logprob; presence and frequency penalties change the output as in-process
# `pagoda run` with them does, and cut repetition.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
python3 -c 'import jsonschema' 2>/dev/null || { echo "SKIP: python3-jsonschema missing (mk/deps.sh)" >&2; exit 77; }
M=$T/models/stories260K.gguf
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-genext-XXXXXX")
S=$D/s.sock
DP=
trap '[ -n "$DP" ] && kill -KILL $DP 2>/dev/null; rm -rf "$D"' EXIT
start_pagodad "$S" "$D/log" --model "$M" --threads 2 || exit 1
gen() { "$B/pagoda" generate --socket "$S" "$@"; }
run() { "$B/pagoda" run -m "$M" -t 2 "$@"; }

cat > "$D/person.json" <<'J'
{"type":"object","properties":{"name":{"type":"string","maxLength":12},
 "age":{"type":"integer","minimum":0,"maximum":120},
 "pets":{"type":"array","items":{"enum":["cat","dog"]},"maxItems":3}},
 "required":["name","age"],"additionalProperties":false}
J
valid() { # valid SCHEMA OUT
	python3 - "$1" "$2" <<'PY'
import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))
PY
}
# greedy: the daemon's output equals pagoda run's, and validates
for p in "Write JSON:" "Once upon a time" "Tom"; do
	run -p "$p" -n 80 --temp 0 --json-schema "$D/person.json" >"$D/run" 2>"$D/err" || bad "run: $(cat "$D/err")"
	gen -p "$p" -n 80 --temp 0 --json-schema "$D/person.json" >"$D/gen" 2>"$D/err" || bad "generate: $(cat "$D/err")"
	cmp -s "$D/run" "$D/gen" && ok || bad "constrained generate != run for '$p': $(cat "$D/gen") vs $(cat "$D/run")"
	valid "$D/person.json" "$D/gen" && ok || bad "greedy output does not validate: $(cat "$D/gen")"
done
# speculative decoding under a constraint: drafts cut to what the grammar
# allows, each verified row masked; greedy output unchanged (prompt lookup
# through the daemon, a draft model in-process)
cp="Copy: {\"name\":\"Tom\",\"age\":7,\"pets\":[\"cat\",\"dog\"]} and again: {\"name\":\"Tom\",\"age\":7,"
for p in "Write JSON:" "$cp"; do
	gen -p "$p" -n 80 --temp 0 --json-schema "$D/person.json" >"$D/a" 2>/dev/null
	gen -p "$p" -n 80 --temp 0 --json-schema "$D/person.json" --speculative ngram >"$D/b" 2>"$D/err"
	cmp -s "$D/a" "$D/b" && ok || bad "constrained + ngram differs for '$p': $(cat "$D/b") vs $(cat "$D/a") $(cat "$D/err")"
	run -p "$p" -n 80 --temp 0 --json-schema "$D/person.json" --speculative draft \
		--draft-model "$T/models/stories260K-Q4_0.gguf" >"$D/b" 2>"$D/err"
	cmp -s "$D/a" "$D/b" && ok || bad "constrained + draft model differs for '$p': $(cat "$D/b") $(cat "$D/err")"
done
gen -p "$cp" -n 60 --temp 0.9 --seed 4 --json-schema "$D/person.json" --speculative ngram >"$D/b" 2>"$D/err" ||
	bad "sampled constrained + ngram: $(cat "$D/err")"
valid "$D/person.json" "$D/b" && ok || bad "sampled constrained + ngram output does not validate: $(cat "$D/b")"

# six at once: the daemon batches them and computes their masks in
# parallel; each reply equals the one it gave alone
for i in 1 2 3 4 5 6; do
	gen -p "Write JSON number $i:" -n 60 --temp 0 --json-schema "$D/person.json" >"$D/one$i" 2>/dev/null
done
pids=
for i in 1 2 3 4 5 6; do
	gen -p "Write JSON number $i:" -n 60 --temp 0 --json-schema "$D/person.json" >"$D/par$i" 2>/dev/null &
	pids="$pids $!"
done
wait $pids
for i in 1 2 3 4 5 6; do
	cmp -s "$D/one$i" "$D/par$i" && ok || bad "concurrent constrained request $i differs: $(cat "$D/par$i")"
done
for seed in 1 2 3 4; do
	gen -p "Write JSON:" -n 80 --temp 1.2 --top-k 0 --top-p 1 --min-p 0 --seed $seed \
		--json-schema "$D/person.json" >"$D/gen" 2>"$D/err" || bad "sampled generate: $(cat "$D/err")"
	valid "$D/person.json" "$D/gen" && ok || bad "sampled output (seed $seed) does not validate: $(cat "$D/gen")"
done
re='[A-Z][a-z]+( [a-z]+){2,4}\.'
gen -p "Once upon a time" -n 40 --temp 0.8 --seed 5 --regex "$re" >"$D/gen" 2>"$D/err" || bad "regex: $(cat "$D/err")"
python3 -c 'import re,sys; sys.exit(not re.fullmatch(sys.argv[2], open(sys.argv[1]).read()))' "$D/gen" "$re" &&
	ok || bad "regex output does not match: $(cat "$D/gen")"
printf 'root ::= "yes" | "no" | "maybe"\n' >"$D/g.gbnf"
gen -p "Is it?" -n 8 --temp 0.8 --seed 2 --grammar "$D/g.gbnf" >"$D/gen" 2>"$D/err" || bad "gbnf: $(cat "$D/err")"
grep -qxE 'yes|no|maybe' "$D/gen" && ok || bad "grammar output: $(cat "$D/gen")"
# refused with the reason, and the daemon goes on
printf '{"$ref":"https://example.com/schema.json"}' >"$D/bad.json"
if gen -p "x" -n 4 --json-schema "$D/bad.json" >/dev/null 2>"$D/err"; then bad "an uncompilable schema was accepted"; fi
grep -q "ref" "$D/err" && grep -q "constraint" "$D/err" && ok || bad "unclear refusal: $(cat "$D/err")"
gen -p "x" -n 4 --regex '(a' >/dev/null 2>"$D/err" && bad "a broken regex was accepted" || ok
gen -p "Once" -n 4 --temp 0 >/dev/null 2>&1 && ok || bad "the daemon stopped answering after refusals"

# top logprobs: sorted, the greedy token first with the token's own logprob
gen -p "Once upon a time" -n 24 --temp 0 --ids --top-logprobs 5 >"$D/ids" 2>"$D/top" || bad "top-logprobs failed"
python3 - "$D/ids" "$D/top" <<'PY' && ok || bad "top logprobs: $(head -3 "$D/top")"
import math, re, sys
ids = open(sys.argv[1]).read().split()
lines = [l for l in open(sys.argv[2]) if l.startswith("top ")]
assert len(lines) == len(ids) > 0, (len(lines), len(ids))
for tok, line in zip(ids, lines):
    f = line.split(" ", 3)
    assert f[1] == tok, (f[1], tok)
    alts = re.findall(r'(-?\d+):(-?[\d.]+):"', f[3])
    assert len(alts) == 5, line
    lps = [float(lp) for _, lp in alts]
    assert alts[0][0] == tok, line           # greedy: the most likely
    assert abs(lps[0] - float(f[2])) < 1e-3, line
    assert lps == sorted(lps, reverse=True) and lps[0] <= 0, line
    assert sum(math.exp(x) for x in lps) <= 1.0001, line
PY

# penalties: the daemon applies them as the engine in-process does, and
# frequency penalty cuts repetition (stories260K loops on long outputs)
for pen in "--frequency-penalty 1.5" "--presence-penalty 1.5" "--frequency-penalty -0.5 --presence-penalty 0.5"; do
	run -p "Once upon a time" -n 120 --temp 0 --ids $pen >"$D/run" 2>/dev/null
	gen -p "Once upon a time" -n 120 --temp 0 --ids $pen >"$D/gen" 2>"$D/err" || bad "penalty: $(cat "$D/err")"
	cmp -s "$D/run" "$D/gen" && ok || bad "generate $pen != run"
done
gen -p "Once upon a time" -n 120 --temp 0 --ids >"$D/plain"
gen -p "Once upon a time" -n 120 --temp 0 --ids --frequency-penalty 1.5 >"$D/pen"
python3 - "$D/plain" "$D/pen" <<'PY' && ok || bad "frequency penalty did not cut repetition"
import collections, sys
top = lambda f: collections.Counter(open(f).read().split()).most_common(1)[0][1]
a, b = top(sys.argv[1]), top(sys.argv[2])
print("most repeated token: %d times plain, %d with the penalty" % (a, b), file=sys.stderr)
assert b < a
PY
gen -p "x" -n 4 --frequency-penalty 3 >/dev/null 2>&1 && bad "a penalty out of range was accepted" || ok
stop_bg $DP TERM 60 || bad "pagodad exit status after SIGTERM"
DP=
finish
