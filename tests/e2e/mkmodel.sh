#!/bin/sh
# tests/e2e/mkmodel.sh — build/pagoda-mkmodel as a user runs it: a small model
# of every weight type, byte-identical for a seed (whatever the thread
# count), different for another seed, refused shapes with a message and a
# non-zero exit. When build/pagoda is there, every model also loads and
# generates, and text survives tokenize | detokenize. The metadata and
# tensor-by-tensor checks are in tests/unit/test_mkmodel.c.
# Exit 0 pass, 77 skip, anything else fail.
B=${PAGODA_BUILD:-$(pwd)/build}
M=$B/pagoda-mkmodel
P=$B/pagoda
if [ ! -x "$M" ]; then
	echo "SKIP: $M is not built" >&2
	exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/mkmodel-e2e.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

shape="--dim 256 --ffn 512 --layers 2 --heads 4 --kv-heads 2 --vocab 400 --ctx 256"
text='Hello world, 123 ünïcode — ok?'

for ty in F32 F16 BF16 Q8_0 Q4_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS; do
	m=$T/$ty.gguf
	# shellcheck disable=SC2086
	"$M" $shape --type "$ty" --seed 5 -t 1 -o "$m" 2>"$T/err" || fail "$ty: exit $?: $(cat "$T/err")"
	grep -q "random" "$T/err" || fail "$ty: no warning that the weights are random"
	grep -q "$ty" "$T/err" || fail "$ty: the summary does not name the type"
	[ ! -e "$m.tmp" ] || fail "$ty: $m.tmp left behind"
	[ "$(head -c 4 "$m")" = GGUF ] || fail "$ty: no GGUF magic"
	# shellcheck disable=SC2086
	"$M" $shape --type "$ty" --seed 5 -t 4 -q -o "$T/again.gguf" || fail "$ty: second run"
	cmp -s "$m" "$T/again.gguf" || fail "$ty: the same seed gave different bytes"
	# shellcheck disable=SC2086
	"$M" $shape --type "$ty" --seed 6 -q -o "$T/other.gguf" || fail "$ty: third run"
	cmp -s "$m" "$T/other.gguf" && fail "$ty: seeds 5 and 6 gave the same bytes"

	if [ -x "$P" ]; then
		"$P" run -m "$m" -p "Once upon a time" -n 8 --temp 0 --ids >"$T/ids" 2>"$T/err" ||
			fail "$ty: pagoda run: $(cat "$T/err")"
		printf '%s\n' "$text" | "$P" tokenize -m "$m" >"$T/tok" 2>"$T/err" ||
			fail "$ty: pagoda tokenize: $(cat "$T/err")"
		back=$("$P" detokenize -m "$m" <"$T/tok" 2>"$T/err") || fail "$ty: pagoda detokenize: $(cat "$T/err")"
		[ "$back" = "$text" ] || [ "$back" = " $text" ] ||
			fail "$ty: tokenize | detokenize gave '$back', not '$text'"
	fi
done

# A tokenizer taken from a real model tokenizes as that model does.
src=${PAGODA_TESTDATA:+$PAGODA_TESTDATA/models/stories260K.gguf}
if [ -n "$src" ] && [ -r "$src" ] && [ -x "$P" ]; then
	"$M" --dim 64 --heads 4 --kv-heads 2 --ffn 128 --layers 1 --tokenizer "$src" -q -o "$T/tok.gguf" ||
		fail "--tokenizer $src"
	a=$(printf '%s\n' "$text" | "$P" tokenize -m "$src") || fail "tokenize with $src"
	b=$(printf '%s\n' "$text" | "$P" tokenize -m "$T/tok.gguf") || fail "tokenize with the copied tokenizer"
	[ "$a" = "$b" ] || fail "copied tokenizer: '$b', the source: '$a'"
fi

# Refusals: non-zero exit, a message that says why, no file.
expect_err() { # WHAT-TO-FIND ARGS...
	want=$1
	shift
	if "$M" -o "$T/bad.gguf" "$@" 2>"$T/err"; then
		fail "accepted: $*"
	fi
	grep -q -- "$want" "$T/err" || fail "for '$*' the message lacks '$want': $(cat "$T/err")"
	[ ! -e "$T/bad.gguf" ] || fail "'$*' wrote a file"
}
expect_err "does not divide" --dim 100 --heads 3
expect_err "does not divide" --heads 8 --kv-heads 3
expect_err "multiple of Q4_K" --dim 128 --heads 4 --type Q4_K
expect_err "ffn 100" --ffn 100 --type Q8_0
expect_err "unknown option" --frobnicate
expect_err "unknown --type" --type IQ2_XS
expect_err "too small" --vocab 100
expect_err "positive integer" --layers 0
"$M" --dim 256 2>"$T/err" && fail "ran without -o"
grep -q -- "-o" "$T/err" || fail "no -o: the message does not say so"
"$M" --help >"$T/help" || fail "--help"
grep -q -- "--preset" "$T/help" || fail "--help does not list --preset"
exit 0
