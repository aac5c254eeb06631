#!/bin/sh
# pagoda-gateway on stories260K with a tool-calling chat template (Qwen3's,
# Hermes <tool_call> format) and a 1024-token context:
#  - a tool-call round trip in OpenAI's shape (tools, an assistant message
#    with tool_calls whose arguments are a JSON string, the tool's result)
#    renders exactly as the same conversation sent to pagodad directly
#    (`pagoda generate --chat-json`, arguments as an object): equal prompt
#    token counts and equal greedy replies;
#  - schemathesis (PyPI) runs the gateway's /openapi.json against it for a
#    bounded number of examples: no 5xx, no crash, no hang. Skipped, saying
#    so, when PyPI cannot be reached.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf chat/templates/Qwen-Qwen3-0.6B.jinja
M=$T/models/stories260K.gguf
CT=$T/chat/templates/Qwen-Qwen3-0.6B.jinja
for b in pagodad pagoda pagoda-gateway; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gws-XXXXXX")
S=$D/s.sock
DP= GP=
cleanup() {
	[ -n "$GP" ] && kill -KILL $GP 2>/dev/null
	[ -n "$DP" ] && kill -KILL $DP 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
"$B/pagodad" --model "$M" --socket "$S" --threads 2 --bus none --ctx 1024 --chat-template "$CT" 2>"$D/log" &
DP=$!
i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 200 ] && { echo "pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
	sleep 0.05
done
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$B/pagoda-gateway" --listen "127.0.0.1:$PORT" --socket "$S" --model-name stories 2>"$D/gw.log" &
GP=$!
URL=http://127.0.0.1:$PORT
i=0
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$URL/health" 2>/dev/null; do
	i=$((i + 1)); [ $i -gt 200 ] && { bad "gateway not healthy: $(cat "$D/gw.log")"; finish; }
	sleep 0.05
done

# the round trip: OpenAI's shape to the gateway, the daemon's shape to pagoda generate
python3 - "$URL" "$D" <<'PY' && ok || bad "tool round trip through the gateway (above)"
import json, sys, urllib.request
url, d = sys.argv[1], sys.argv[2]
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
msgs = [{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
body = {"model": "stories", "messages": msgs, "tools": tools, "temperature": 0, "max_tokens": 16}
rq = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(rq, timeout=60))
# streamed with tools, a reply that calls none streams its text as it comes
body["stream"] = True
rq = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
chunks = [json.loads(l[6:]) for l in urllib.request.urlopen(rq, timeout=60).read().decode().splitlines()
          if l.startswith("data: {")]
text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
assert text == (r["choices"][0]["message"]["content"] or ""), (text, r)
assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) > 1 or len(text) < 8, \
    "the text came in one piece"
direct = json.loads(json.dumps(msgs))
direct[1]["content"] = ""  # as the gateway sends an absent content
direct[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
json.dump({"messages": direct, "tools": tools, "add_generation_prompt": True}, open(d + "/req.json", "w"))
json.dump(r, open(d + "/resp.json", "w"))
PY
"$B/pagoda" generate --socket "$S" --chat-json "$D/req.json" -n 16 --temp 0 --timings >"$D/want" 2>"$D/timings" ||
	bad "pagoda generate --chat-json: $(cat "$D/timings")"
want_n=$(sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p' "$D/timings")
got_n=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens"])' "$D/resp.json")
[ -n "$want_n" ] && [ "$want_n" = "$got_n" ] && ok || bad "tool round trip: prompt $got_n tokens, direct $want_n"
python3 -c 'import json, sys; sys.stdout.write(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"] or "")' \
	"$D/resp.json" >"$D/got"
cmp -s "$D/want" "$D/got" && ok || bad "tool round trip: reply '$(cat "$D/got")' != direct '$(cat "$D/want")'"

# schemathesis against /openapi.json, bounded
PY=$(cd "$B" && pwd)/py-schemathesis
export PYTHONPATH="$PY${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
if ! python3 -c 'import schemathesis' 2>/dev/null; then
	python3 -m pip install -q --disable-pip-version-check --target "$PY" 'schemathesis==4.32.5' \
		>"$B/py-schemathesis.log" 2>&1
fi
if python3 -c 'import schemathesis' 2>/dev/null && [ -x "$PY/bin/schemathesis" ]; then
	# positive and negative examples; at most 60 s of fuzzing (CI time)
	# from $D: schemathesis keeps a cache in its working directory
	if (cd "$D" && timeout -k 5 150 python3 "$PY/bin/schemathesis" run "$URL/openapi.json" \
		--checks not_a_server_error --max-examples 30 --max-time 60 --request-timeout 20 --seed 1 \
		--no-color) >"$D/st" 2>&1 &&
		! grep -q "No checks were performed" "$D/st"; then
		ok
		grep -E "test cases|passed" "$D/st" | tail -3 >&2
	else
		bad "schemathesis: $(tail -30 "$D/st")"
	fi
	alive $GP && ok || bad "the gateway died under schemathesis"
else
	echo "SKIP: schemathesis not installable (PyPI unreachable?): $(tail -1 "$B/py-schemathesis.log" 2>/dev/null)" >&2
fi
stop_bg $GP TERM 20 && ok || bad "pagoda-gateway exit status after SIGTERM"
GP=
stop_bg $DP TERM 60 && ok || bad "pagodad exit status after SIGTERM"
DP=
finish
