#!/bin/sh
# bench/gateway.sh — what pagoda-gateway costs, and pagoda's HTTP serving
# against llama.cpp's llama-server. One load generator for all three:
# `pagoda-bench load` (STREAMS closed-loop streams, REQUESTS requests of
# random token-id prompts of PROMPT tokens, OUTPUT tokens each, greedy)
#   rings    straight to pagodad through libpagoda
#   gateway  the same requests as streamed /v1/completions to pagoda-gateway
#            in front of the same pagodad (pagoda-bench --http)
#   server   the same HTTP requests to llama-server on the same model with
#            the same threads and STREAMS slots
# Each round draws new prompts (seed = round) and the three run in an order
# that alternates round by round (A B C, C B A, ...); the ratios are medians
# of the rounds' ratios. pagodad runs without its prefix cache, so that a
# later run of a round finds nothing an earlier one left.
#
#   sh bench/gateway.sh [MODEL.gguf]   (default: SmolLM2-135M-Instruct, fetched
#                                       by tools/fetch-smollm2.sh)
# Environment: PAGODA_BUILD; GW_STREAMS (16), GW_REQUESTS (2 x streams),
# GW_PROMPT (32), GW_OUTPUT (64), GW_ROUNDS (4), BENCH_THREADS (2);
# BENCH_NO_LLAMA=1 (no llama-server), LLAMA_CPP_BIN (a bin/ with llama-server),
# BENCH_BUILD_LLAMA=0 (use llama-server only if mk/peer.sh built it);
# GW_OUT (a file for the JSON lines).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${PAGODA_BUILD:-$(pwd)/build}
T=${BENCH_THREADS:-2}
S=${GW_STREAMS:-16}
N=${GW_REQUESTS:-$((2 * S))}
P=${GW_PROMPT:-32} O=${GW_OUTPUT:-64}
R=${GW_ROUNDS:-4}
M=${1:-}
for bin in pagodad pagoda pagoda-gateway pagoda-bench; do
	[ -x "$B/$bin" ] || { echo "gateway.sh: $B/$bin is missing: run make first" >&2; exit 1; }
done
if [ -z "$M" ]; then
	M=$(sh tools/fetch-smollm2.sh) || { echo "gateway.sh: no model (SmolLM2 could not be fetched)" >&2; exit 1; }
fi

LS=
if [ "${BENCH_NO_LLAMA:-0}" != 1 ]; then
	if [ -n "${LLAMA_CPP_BIN:-}" ]; then
		[ -x "$LLAMA_CPP_BIN/llama-server" ] && LS=$LLAMA_CPP_BIN/llama-server
	elif [ "${BENCH_BUILD_LLAMA:-1}" = 0 ]; then
		bin=$(sh mk/peer.sh built) && [ -x "$bin/llama-server" ] && LS=$bin/llama-server
	else
		echo "gateway.sh: llama-server from the peer (sh mk/peer.sh server; built once)" >&2
		bin=$(PAGODA_BUILD=$B sh mk/peer.sh server) && LS=$bin/llama-server
	fi
	[ -n "$LS" ] || echo "gateway.sh: no llama-server: measuring pagoda alone" >&2
fi

D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gwbench-XXXXXX")
PIDS=
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() { # URL PID
	i=0
	until curl -sf -o /dev/null "$1"; do
		i=$((i + 1))
		kill -0 "$2" 2>/dev/null && [ $i -lt 1200 ] || return 1
		sleep 0.1
	done
}

SOCK=$D/p.sock
"$B/pagodad" --model "$M" --socket "$SOCK" --threads "$T" --max-seqs "$S" --no-prefix-cache --bus none \
	2>"$D/pagodad.log" &
PIDS="$PIDS $!"
i=0
until "$B/pagoda" ping --socket "$SOCK" >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 1200 ] || { echo "gateway.sh: pagodad did not start:" >&2; cat "$D/pagodad.log" >&2; exit 1; }
	sleep 0.1
done
GPORT=$(free_port)
"$B/pagoda-gateway" --listen "127.0.0.1:$GPORT" --socket "$SOCK" --connections 4 --quiet 2>"$D/gw.log" &
GW=$!
PIDS="$PIDS $GW"
wait_http "http://127.0.0.1:$GPORT/health" $GW || { echo "gateway.sh: the gateway did not start" >&2; exit 1; }
if [ -n "$LS" ]; then
	LPORT=$(free_port)
	"$LS" -m "$M" -t "$T" -tb "$T" -np "$S" -c $((S * (P + O + 16))) --host 127.0.0.1 --port "$LPORT" \
		--no-webui >"$D/llama-server.log" 2>&1 &
	LP=$!
	PIDS="$PIDS $LP"
	wait_http "http://127.0.0.1:$LPORT/health" $LP ||
		{ echo "gateway.sh: llama-server did not start:" >&2; tail -5 "$D/llama-server.log" >&2; LS=; }
fi

LOAD="-q --json -c $S -n $N -p $P -o $O --temp 0 --vocab 512"
target() { # WHAT: pagoda-bench's flags to reach it
	case $1 in
	rings) echo "--socket $SOCK" ;;
	gateway) echo "--http http://127.0.0.1:$GPORT" ;;
	server) echo "--http http://127.0.0.1:$LPORT" ;;
	esac
}
# one small request each first: the first pass faults the weights in
for w in rings gateway ${LS:+server}; do
	"$B/pagoda-bench" load $(target $w) -q -c 1 -n 1 -p 8 -o 2 --vocab 512 --seed 999 >/dev/null 2>&1
done

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # utime + stime
jget() { printf '%s' "$2" | sed -n "s/.*\"$1\": *\([-0-9.e+]*\).*/\1/p" | head -n1; }
jsub() { printf '%s' "$3" | sed -n "s/.*\"$1\":{[^}]*\"$2\":\([-0-9.e+]*\).*/\1/p" | head -n1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "NA"; else printf "%.3f\n", a / b }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "NA"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
line() { # NAME JSON
	printf '%s %.1f tok/s, TTFT p50/p99 %.0f/%.0f ms, ITL p50/p99 %.1f/%.1f ms, %s done %s failed' "$1" \
		"$(jget output_tok_per_s "$2")" "$(jsub ttft_ms p50 "$2")" "$(jsub ttft_ms p99 "$2")" \
		"$(jsub itl_ms p50 "$2")" "$(jsub itl_ms p99 "$2")" "$(jget completed "$2")" "$(jget failed "$2")"
}

echo "# bench/gateway.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model $(basename "$M"), threads $T, $S streams, $N requests of $P + $O tokens a run, $R rounds"
echo "llama-server: ${LS:-none}${LS:+ ($(sh mk/peer.sh version))}"
: >"$D/ratios"
for r in $(seq "$R"); do
	order="rings gateway ${LS:+server}"
	[ $((r % 2)) -eq 0 ] && order="${LS:+server }gateway rings"
	J_rings= J_gateway= J_server=
	for w in $order; do
		c0=$(cpu_ticks $GW)
		j=$("$B/pagoda-bench" load $(target $w) $LOAD --seed "$r" --label $w)
		[ $w = gateway ] && GW_CPU=$(awk -v a="$c0" -v b="$(cpu_ticks $GW)" -v hz="$(getconf CLK_TCK)" \
			-v n="$(jget output_tokens "$j")" 'BEGIN { if (n > 0) printf "%.3f", (b - a) / hz * 1000 / n; else print "NA" }')
		eval "J_$w=\$j"
		[ -n "${GW_OUT:-}" ] && printf '{"round":%d,"run":"%s","load":"%s","r":%s}\n' "$r" "$w" \
			"$(cut -d' ' -f1 /proc/loadavg)" "${j:-null}" >>"$GW_OUT"
	done
	echo "round $r ($order; load $(cut -d' ' -f1 /proc/loadavg)):"
	echo "  $(line rings "$J_rings")"
	echo "  $(line gateway "$J_gateway")"
	[ -n "$LS" ] && echo "  $(line llama-server "$J_server")"
	a=$(jget output_tok_per_s "$J_rings") g=$(jget output_tok_per_s "$J_gateway") l=$(jget output_tok_per_s "$J_server")
	echo "$(ratio "$g" "$a") $(ratio "$g" "$l")" >>"$D/ratios"
	echo "  gateway / rings $(ratio "$g" "$a")${LS:+, gateway / llama-server $(ratio "$g" "$l")}; the gateway's CPU ${GW_CPU} ms a token; pagoda-bench's CPU (client) $(jget client_cpu_s "$J_gateway") s for $(jget output_tokens "$J_gateway") tokens"
done
gr=$(awk '$1 != "NA" { print $1 }' "$D/ratios" | median)
gl=$(awk '$2 != "NA" { print $2 }' "$D/ratios" | median)
echo "median of $R rounds: gateway / rings tok/s ${gr}x (target >= 0.95)${LS:+, gateway / llama-server ${gl}x (target >= 1.5)}"
