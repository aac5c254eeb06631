#!/bin/sh
# llama.cpp's own grammar tests against pagoda's constraint engine: the
# peer's source (mk/peer.sh fetch: the PyPI sdist of llama-cpp-python,
# pinned by sha256) gives grammars/*.gbnf, which must all compile, and
# tests/test-grammar-integration.cpp, whose test_grammar cases (a GBNF, the
# strings it accepts, the strings it refuses) `pagoda constrain` must decide
# as llama.cpp does, token by token on GPT-2's vocabulary. Grammars with
# llama.cpp's token references (<[id]>: one vocabulary's ids) are refused
# with that reason. The test_schema cases (JSON Schema) go through a sweep:
# no valid instance refused; invalid ones accepted are counted, not failed
# (llama.cpp caps integers at 16 digits and keeps key order, which
# canonical instances do not test). Exit 77 when PyPI cannot be reached.
. "$(dirname "$0")/lib.sh"
need_testdata vocab/ggml-vocab-gpt-2.gguf
V=$T/vocab/ggml-vocab-gpt-2.gguf
P=$B/pagoda
[ -x "$P" ] || { echo "SKIP: $P not built" >&2; exit 77; }
if ! SRC=$(sh mk/peer.sh fetch 2>"${TMPDIR:-/tmp}/pagoda-peer-fetch.log"); then
	echo "SKIP: llama.cpp's source could not be fetched (PyPI unreachable?)" >&2
	exit 77
fi
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-llgram-XXXXXX")
trap 'rm -rf "$D"' EXIT

for f in "$SRC"/grammars/*.gbnf; do
	printf 'x' | "$P" constrain -m "$V" --grammar "$f" >/dev/null 2>"$D/err"
	[ $? -ne 1 ] && ok || bad "grammars/$(basename "$f") does not compile: $(cat "$D/err")"
done

expect() { # expect CODE GRAMMAR TEXT
	printf '%s' "$3" | "$P" constrain -m "$V" --grammar "$SRC/grammars/$2" >/dev/null 2>&1
	rc=$?
	[ $rc -eq "$1" ] && ok || bad "grammars/$2 on '$3': exit $rc, want $1"
}
expect 0 json.gbnf '{"a": [1, 2.5, "x", true, null], "b": {}}'
expect 2 json.gbnf '{"a": [1, 2.5,]}'
expect 0 arithmetic.gbnf '(1+2)*x = 9
'
expect 0 chess.gbnf '1. e4 e5
2. Nf3 Nc6
'
expect 2 chess.gbnf '1. e4 e9
2. Nf3 Nc6
'

python3 tests/e2e/llama_grammar_cases.py "$SRC/tests/test-grammar-integration.cpp" "$D/c" >&2 || {
	bad "could not read llama.cpp's test-grammar-integration.cpp"
	finish
}
n=0 tokref=0
for g in "$D"/c/g*.gbnf; do
	b=${g%.gbnf}
	if grep -q '<\[' "$g"; then
		"$P" constrain -m "$V" --grammar "$g" </dev/null >/dev/null 2>"$D/err"
		[ $? -eq 1 ] && grep -q "token references" "$D/err" && ok ||
			bad "$(basename "$g"): token references not refused clearly: $(cat "$D/err")"
		tokref=$((tokref + 1))
		continue
	fi
	for s in "$b".pass.* "$b".fail.*; do
		[ -e "$s" ] || continue
		case $s in *.pass.*) want=0 ;; *) want=2 ;; esac
		"$P" constrain -m "$V" --grammar "$g" <"$s" >/dev/null 2>"$D/err"
		rc=$?
		n=$((n + 1))
		[ $rc -eq $want ] && ok || bad "$(basename "$s") of $(tr '\n' ' ' <"$g" | head -c 200): exit $rc, want $want: $(head -c 120 "$s")"
	done
done
echo "test_grammar: $n strings decided, $tokref grammars with token references refused" >&2
"$P" constrain -m "$V" --sweep "$D/c/schemas.sweep" -v >"$D/sweep" 2>&1
grep -q "refused: 0$" "$D/sweep" && ok || bad "test_schema: a valid instance refused: $(grep -i refused "$D/sweep" | head -5)"
sed -n 's/^/test_schema: /p' "$D/sweep" | grep -v "^test_schema: invalid instance accepted" >&2
finish
