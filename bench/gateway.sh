#!/bin/sh
# The gateway's cost: the same closed-loop workload (STREAMS streams, random
# token-id prompts of PROMPT tokens, OUTPUT tokens each) through the rings
# (`pagoda-bench load`) and through pagoda-gateway's HTTP API
# (bench/gateway_load.py), alternating, ROUNDS rounds, on one pagodad.
# Prints each round's tok/s and TTFT/ITL p50/p99 both ways and the median
# ratio of tok/s (gateway / rings). Run it on a quiet machine.
#   sh bench/gateway.sh MODEL.gguf [STREAMS=16] [ROUNDS=3]
# Environment: PAGODA_BUILD (build), PROMPT (128), OUTPUT (128), THREADS.
set -eu
B=${PAGODA_BUILD:-build}
M=${1:?usage: gateway.sh MODEL.gguf [STREAMS] [ROUNDS]}
STREAMS=${2:-16} ROUNDS=${3:-3}
PROMPT=${PROMPT:-128} OUTPUT=${OUTPUT:-128}
REQ=$((STREAMS * 4))
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gwbench-XXXXXX")
S=$D/s.sock
"$B/pagodad" --model "$M" --socket "$S" ${THREADS:+--threads $THREADS} --bus none 2>"$D/log" &
DP=$!
GP=
trap 'kill $DP $GP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
until "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do sleep 0.1; done
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$B/pagoda-gateway" --listen "127.0.0.1:$PORT" --socket "$S" --quiet 2>"$D/gw.log" &
GP=$!
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1])' "http://127.0.0.1:$PORT/health" 2>/dev/null; do
	sleep 0.1
done
echo "model $(basename "$M"), $STREAMS streams, $REQ requests of $PROMPT + $OUTPUT tokens a round"
: >"$D/ratios"
for r in $(seq "$ROUNDS"); do
	"$B/pagoda-bench" load --socket "$S" -c "$STREAMS" -n "$REQ" -p "$PROMPT" -o "$OUTPUT" --temp 0 --json -q >"$D/rings.json"
	python3 bench/gateway_load.py "http://127.0.0.1:$PORT" "$STREAMS" "$REQ" "$PROMPT" "$OUTPUT" >"$D/gw.json"
	python3 - "$D/rings.json" "$D/gw.json" "$r" >>"$D/ratios" <<'PY'
import json, sys
rings, gw = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rt = rings["output_tok_per_s"]
print("round %s: rings %.1f tok/s, TTFT p50 %.1f p99 %.1f ms, ITL p50 %.2f p99 %.2f ms | "
      "gateway %.1f tok/s, TTFT p50 %.1f p99 %.1f ms, ITL p50 %.2f p99 %.2f ms"
      % (sys.argv[3], rt, rings["ttft_ms"]["p50"], rings["ttft_ms"]["p99"], rings["itl_ms"]["p50"],
         rings["itl_ms"]["p99"], gw["tok_s"], gw["ttft_p50_ms"], gw["ttft_p99_ms"], gw["itl_p50_ms"],
         gw["itl_p99_ms"]), file=sys.stderr)
print(gw["tok_s"] / rt if rt else "nan")
PY
done
sort -g "$D/ratios" | awk '{ a[NR] = $1 } END { printf "gateway / rings tok/s, median of %d rounds: %.3f\n", NR, a[int((NR + 1) / 2)] }'
