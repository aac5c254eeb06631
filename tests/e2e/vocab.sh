#!/bin/sh
# pagoda tokenize reproduces llama.cpp's ids for every test string of every
# vocabulary in testdata/vocab, and detokenize gives the string back.
. "$(dirname "$0")/lib.sh"
need_testdata vocab/ggml-vocab-llama-spm.gguf
dir=$(mktemp -d)
for v in "$T"/vocab/*.gguf; do
	name=$(basename "$v" .gguf)
	# split .inp on the separator lines into one file per string
	awk -v d="$dir" -v n="$name" '
		BEGIN { i = 0; f = sprintf("%s/%s.%04d", d, n, i) }
		$0 == "__ggml_vocab_test__" { close(f); i++; f = sprintf("%s/%s.%04d", d, n, i); printf "" > f; next }
		{ if (started[f]++) printf "\n" >> f; printf "%s", $0 >> f }
	' "$v.inp"
	i=0
	while IFS= read -r want; do
		want=$(echo $want) # the .out lines carry a leading space
		s=$(printf '%s/%s.%04d' "$dir" "$name" "$i")
		[ -e "$s" ] || : > "$s"
		got=$("$B/pagoda" tokenize -m "$v" < "$s")
		if [ "$got" = "$want" ]; then ok; else bad "$name string $i: got '$got' want '$want'"; fi
		printf '%s' "$want" | "$B/pagoda" detokenize -m "$v" > "$s.back"
		if cmp -s "$s" "$s.back"; then ok; else bad "$name string $i does not detokenize back"; fi
		i=$((i + 1))
	done < "$v.out"
done
rm -rf "$dir"
finish
