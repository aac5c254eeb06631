#!/bin/sh
# Seeds the GGUF fuzzer with the heads of real files (metadata, tensor infos).
out=$1
[ -n "$PAGODA_TESTDATA" ] || exit 0
for f in "$PAGODA_TESTDATA"/models/*.gguf "$PAGODA_TESTDATA"/vocab/*.gguf; do
	[ -e "$f" ] && head -c 65536 "$f" > "$out/seed-$(basename "$f")"
done
exit 0
