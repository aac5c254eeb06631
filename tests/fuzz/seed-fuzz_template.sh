#!/bin/sh
# Seeds the template fuzzer with real chat templates and a JSON message.
out=$1
[ -n "$PAGODA_TESTDATA" ] || exit 0
for f in "$PAGODA_TESTDATA"/chat/templates/*.jinja; do
	[ -e "$f" ] && cp "$f" "$out/seed-$(basename "$f")"
done
printf 'J{"messages": [{"role": "user", "content": "hi \\u00e9 \\ud83d\\ude00", "n": [1, -2.5e3, true, null]}]}' > "$out/seed-json"
exit 0
