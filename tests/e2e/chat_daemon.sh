#!/bin/sh
# Chat requests through the ring (PG_SUBMIT_CHAT): pagodad renders the chat
# template (--chat-template FILE here: the demo model has none) and the reply
# equals in-process `pagoda run` on the text `pagoda chat-template` renders,
# ids and text, greedy. A template that raises, bad JSON, a daemon without
# a template and a missing template file each give a clear error.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf chat/templates/google-gemma-2-2b-it.jinja
M=$T/models/stories260K.gguf
CT=$T/chat/templates/google-gemma-2-2b-it.jinja
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-chat-XXXXXX")
S=$D/s.sock
DP=
cleanup() { [ -n "$DP" ] && kill -KILL $DP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
start() { # extra daemon flags...
	start_pagodad "$S" "$D/log" --model "$M" --threads 2 --bus none "$@" || exit 1
}
start --chat-template "$CT"

printf '%s' '{"messages": [{"role": "user", "content": "Once upon a time"}, {"role": "assistant", "content": "there was a cat."}, {"role": "user", "content": "Tell me more"}], "add_generation_prompt": true}' >"$D/req.json"
"$B/pagoda" chat-template -m "$M" -t "$CT" <"$D/req.json" >"$D/prompt" && ok || bad "chat-template -m -t failed"
grep -q '<start_of_turn>model' "$D/prompt" && ok || bad "rendered prompt: $(cat "$D/prompt")"
# The template writes bos_token itself; the daemon then adds no second BOS
# (as llama.cpp), while run adds the model's: drop the text one for run.
head -c 3 "$D/prompt" | grep -q '^<s>$' && ok || bad "the template did not start with the model's bos_token"
strip_bos() { tail -c +4 "$1" >"$1.nobos" && mv "$1.nobos" "$1"; }
strip_bos "$D/prompt"
"$B/pagoda" run -m "$M" -f "$D/prompt" -n 40 --temp 0 -t 2 --ids >"$D/run" 2>/dev/null
"$B/pagoda" generate --socket "$S" --chat-json "$D/req.json" -n 40 --temp 0 --ids >"$D/gen" || bad "generate --chat-json failed"
[ -s "$D/run" ] && [ "$(cat "$D/run")" = "$(cat "$D/gen")" ] && ok || bad "chat reply ids '$(cat "$D/gen")' != run on the rendered prompt '$(cat "$D/run")'"
"$B/pagoda" run -m "$M" -f "$D/prompt" -n 40 --temp 0 -t 2 >"$D/run" 2>/dev/null
"$B/pagoda" generate --socket "$S" --chat-json - -n 40 --temp 0 <"$D/req.json" >"$D/gen"
cmp -s "$D/run" "$D/gen" && ok || bad "chat reply text differs from run's"
# --chat -p: one user turn
printf '%s' '{"messages": [{"role": "user", "content": "Hi \"there\"\n"}], "add_generation_prompt": true}' |
	"$B/pagoda" chat-template -m "$M" -t "$CT" >"$D/prompt1"
strip_bos "$D/prompt1"
"$B/pagoda" run -m "$M" -f "$D/prompt1" -n 20 --temp 0 -t 2 --ids >"$D/run" 2>/dev/null
"$B/pagoda" generate --socket "$S" --chat -p 'Hi "there"
' -n 20 --temp 0 --ids >"$D/gen"
[ "$(cat "$D/run")" = "$(cat "$D/gen")" ] && ok || bad "generate --chat -p differs from run"
# the template's own refusal, verbatim
printf '%s' '{"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]}' >"$D/sys.json"
if "$B/pagoda" generate --socket "$S" --chat-json "$D/sys.json" -n 5 >/dev/null 2>"$D/err"; then bad "a raising template answered"; else ok; fi
grep -q "System role not supported" "$D/err" && ok || bad "raise message lost: $(cat "$D/err")"
# not JSON / no messages
printf '{"messages": [' >"$D/bad.json"
"$B/pagoda" generate --socket "$S" --chat-json "$D/bad.json" -n 5 >/dev/null 2>"$D/err" && bad "bad JSON answered"
grep -q "JSON" "$D/err" && ok || bad "bad JSON error: $(cat "$D/err")"
printf '{"msgs": []}' >"$D/bad.json"
"$B/pagoda" generate --socket "$S" --chat-json "$D/bad.json" -n 5 >/dev/null 2>"$D/err" && bad "no messages answered"
grep -q "messages" "$D/err" && ok || bad "no-messages error: $(cat "$D/err")"
# the daemon still serves plain prompts afterwards
"$B/pagoda" generate --socket "$S" -p "Once" -n 5 --temp 0 >/dev/null && ok || bad "plain prompt after chat errors"
stop_bg $DP TERM 60 && ok || bad "pagodad exit status after SIGTERM"
DP=
# a model without a template: chat refused, text served
start
"$B/pagoda" generate --socket "$S" --chat -p "Hi" -n 5 >/dev/null 2>"$D/err" && bad "chat without a template answered"
grep -q "chat_template" "$D/err" && ok || bad "no-template error: $(cat "$D/err")"
"$B/pagoda" generate --socket "$S" -p "Once" -n 5 --temp 0 >/dev/null && ok || bad "plain prompt without a template"
stop_bg $DP TERM 60 && ok || bad "pagodad exit status (no template)"
DP=
# a template file that is not there: the daemon does not start, and says why
if "$B/pagodad" --model "$M" --socket "$S" --threads 2 --bus none --chat-template "$D/nope.jinja" 2>"$D/log"; then
	bad "pagodad started with a missing chat template"
else
	grep -q "nope.jinja" "$D/log" && ok || bad "missing template error: $(cat "$D/log")"
fi
finish
