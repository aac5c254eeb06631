#!/bin/sh
# pagoda perplexity is within 0.1% of llama-perplexity's figures
# (../shared/testdata/README.md) on story.txt, windows of 128.
. "$(dirname "$0")/lib.sh"
need_testdata golden/story.txt models/stories260K.gguf
for pair in stories260K:3.7852 stories260K-F16:3.7853 stories260K-Q8_0:3.7874 stories260K-Q4_0:3.9832; do
	n=${pair%%:*} want=${pair#*:}
	need_testdata "models/$n.gguf"
	got=$("$B/pagoda" perplexity --backend cpu -m "$T/models/$n.gguf" -f "$T/golden/story.txt" -c 128 2>/dev/null |
		sed -n 's/^PPL = //p')
	if [ -n "$got" ] && awk -v g="$got" -v w="$want" 'BEGIN { d = (g - w) / w; if (d < 0) d = -d; exit !(d <= 0.001) }'; then
		ok
	else
		bad "$n: PPL '$got', llama.cpp $want (more than 0.1% apart)"
	fi
done
finish
