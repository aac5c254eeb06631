#!/bin/sh
# Damaged or wrong model files get a clear error that names the problem,
# from the CLI and from the daemon, never a crash.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 100000 "$T/models/stories260K.gguf" > "$dir/truncated.gguf"
head -c 4096 /dev/urandom > "$dir/random.gguf"
printf 'GGUF\003\000\000\000' > "$dir/header-only.gguf"
: > "$dir/empty.gguf"
expect_refused() { # file, words the message must contain
	f=$1 want=$2
	"$B/pagoda" run -m "$f" -p hi -n 1 > "$dir/out" 2> "$dir/err"
	rc=$?
	if [ $rc -eq 1 ] && grep -q "$want" "$dir/err" && [ ! -s "$dir/out" ]; then ok
	else bad "pagoda run on $(basename "$f"): exit $rc, stderr: $(head -c 300 "$dir/err")"; fi
	"$B/pagodad" --model "$f" --socket "$dir/sock" > /dev/null 2> "$dir/derr"
	rc=$?
	if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "$want" "$dir/derr"; then ok
	else bad "pagodad on $(basename "$f"): exit $rc, stderr: $(head -c 300 "$dir/derr")"; fi
}
expect_refused "$dir/truncated.gguf" "outside the file"
expect_refused "$dir/random.gguf" "not a GGUF file"
expect_refused "$dir/header-only.gguf" "truncated"
expect_refused "$dir/empty.gguf" "empty file"
expect_refused "$dir/missing.gguf" "No such file"
expect_refused "$T/vocab/ggml-vocab-gpt-2.gguf" "architecture .gpt2. is not supported"
finish
