#!/bin/sh
# bench/smoke.sh — pagoda-bench works end to end (no timing is asserted):
# a daemon on a tiny random model, then every mode of pagoda-bench: load
# (closed loop, Poisson, shared prefix with an SLO, --json), rtt and stream;
# each must exit 0 and report every request completed; load --http through
# pagoda-gateway on the same daemon; and bench/mm_decode
# (built by make) times a few decode steps. Exit 77 (skip)
# when the binaries are not built.
B=${PAGODA_BUILD:-build}
for b in pagodad pagoda pagoda-bench pagoda-mkmodel; do
	[ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }
done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-bench-smoke-XXXXXX")
M=$D/tiny.gguf
S=$D/s.sock
DP=
cleanup() { [ -n "$DP" ] && { kill -KILL $DP 2>/dev/null; wait $DP 2>/dev/null; }; rm -rf "$D"; }
trap cleanup EXIT
"$B/pagoda-mkmodel" --preset tiny --type Q8_0 -o "$M" >/dev/null 2>&1 || { echo "pagoda-mkmodel failed" >&2; exit 1; }
"$B/pagodad" --model "$M" --socket "$S" --threads 2 --max-seqs 8 2>"$D/log" &
DP=$!
i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 400 ] && { echo "pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
	sleep 0.05
done
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1" >&2; }
# has JSON KEY VALUE: the top-level number KEY equals VALUE
has() { printf '%s' "$1" | grep -q "\"$2\":$3[,}]"; }

out=$("$B/pagoda-bench" load --socket "$S" -q -c 3 -n 7 -p 4:24 -o 2:8) && printf '%s' "$out" | grep -q "7 completed, 0 failed" &&
	ok "load, closed loop, table" || bad "load, closed loop: $out"
out=$("$B/pagoda-bench" load --socket "$S" -q --json -c 2 -n 6 --rate 50 -p 8 -o 4 --slo-ttft 60000 --slo-tpot 60000) &&
	has "$out" completed 6 && has "$out" failed 0 && printf '%s' "$out" | grep -q '"ttft_ms":{"n":6' &&
	ok "load, Poisson, --json, SLO" || bad "load, Poisson: $out"
out=$("$B/pagoda-bench" load --socket "$S" -q --json -c 2 -n 6 --warmup 2 --prefix-len 64 -p 4 -o 2) &&
	has "$out" completed 6 && has "$out" prompt_tokens 408 && ! has "$out" cached_tokens 0 &&
	ok "load, shared prefix hits the prefix cache" || bad "load, shared prefix: $out"
out=$("$B/pagoda-bench" load --socket "$S" -q --json -c 2 -d 1 -p 4 -o 2) && ! has "$out" completed 0 && has "$out" failed 0 &&
	ok "load, --duration" || bad "load, --duration: $out"
out=$("$B/pagoda-bench" rtt --socket "$S" -q --json -n 200 --blocks 4) && printf '%s' "$out" | grep -q '"ring_us":{"n":200' &&
	printf '%s' "$out" | grep -q '"unix_us":{"n":200' && ok "rtt" || bad "rtt: $out"
out=$("$B/pagoda-bench" stream --socket "$S" -q --json -k 8 -o 16 --stall 200) && has "$out" mismatched_tokens 0 &&
	has "$out" errors 0 && ok "stream with a stalled reader" || bad "stream: $out"
"$B/pagoda-bench" load --socket "$S" -p 0:x >/dev/null 2>&1; [ $? -eq 2 ] && ok "bad flag exits 2" || bad "bad flag"
# --http: the same load through pagoda-gateway (its own HTTP/1.1 client)
if [ -x "$B/pagoda-gateway" ]; then
	PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	"$B/pagoda-gateway" --listen "127.0.0.1:$PORT" --socket "$S" --bus none --quiet 2>"$D/gw.log" &
	GP=$!
	i=0
	until curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; do
		i=$((i + 1)); [ $i -gt 200 ] && break
		sleep 0.05
	done
	U=http://127.0.0.1:$PORT
	out=$("$B/pagoda-bench" load --http "$U" --vocab 256 -q --json -c 3 -n 6 -p 8 -o 4 --temp 0) &&
		has "$out" completed 6 && has "$out" failed 0 && has "$out" prompt_tokens 48 &&
		printf '%s' "$out" | grep -q '"ttft_ms":{"n":6' && ok "load --http through the gateway" ||
		bad "load --http: $out"
	out=$("$B/pagoda-bench" load --http "$U" --vocab 256 -q --json -c 1 -n 1 -p 8 -o 100000)
	has "$out" failed 1 && printf '%s' "$out" | grep -q '"first_error":"http: HTTP 400' &&
		ok "load --http reports the server's refusal" || bad "load --http, refused: $out"
	"$B/pagoda-bench" load --http "$U" -q -n 1 >/dev/null 2>&1 && bad "--http without --vocab ran" ||
		ok "--http needs --vocab"
	kill $GP
	wait $GP 2>/dev/null
else
	bad "$B/pagoda-gateway is not built"
fi
# make bench's bandwidth tool (built by make with the project's warnings) decodes
if [ -x "$B/bench/bin/mm_decode" ]; then
	out=$("$B/bench/bin/mm_decode" "$M" 2 3 2>&1) && printf '%s' "$out" | grep -q "GB in [0-9]* matrices" &&
		printf '%s' "$out" | grep -q "paired forward/probe [0-9]" && ok "mm_decode" || bad "mm_decode: $out"
else
	bad "$B/bench/bin/mm_decode is not built"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
