#!/bin/sh
# The USDT probes fire and bpf/requests.bt reads them: a real bpftrace on a
# real run of the engine, one line per finished request. Then
# bpf/token_time.bt splits a decode token's time from the step probe's
# forward time and the token probe's inter-token time.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v bpftrace >/dev/null; then
	echo "SKIP: needs root and bpftrace" >&2
	exit 77
fi
need_testdata models/stories260K.gguf
out=$(mktemp)
# trace SCRIPT REGEX: bpftrace SCRIPT on build/pagoda into $out, its pid in
# $bt, once a line matches REGEX (each script's BEGIN prints one when every
# probe is attached); the test ends there when none comes.
trace() {
	: >"$out"
	bpftrace "$1" "$(cd "$B" && pwd)/pagoda" > "$out" 2>&1 &
	bt=$!
	wait_match "$out" "$2" 120 && return 0
	bad "$1 did not attach in 120 s"
	stop_bg $bt KILL 10
	cat "$out" >&2
	rm -f "$out"
	finish
}
trace bpf/requests.bt "^uid"
timeout 120 "$B/pagoda" run -m "$T/models/stories260K.gguf" -p "Once upon a time" -n 7 --temp 0 >/dev/null 2>&1
timeout 120 "$B/pagoda" run -m "$T/models/stories260K.gguf" -p "Lily and Ben" -n 9 --temp 0 >/dev/null 2>&1
sleep 1
stop_bg $bt INT 30 2>>"$out"
if grep -Eq "^1 +1 +[0-9]+ +[0-9]+ +7 +[0-9]+ length" "$out"; then ok; else bad "no line for the 7-token request"; fi
if grep -Eq "^1 +1 +[0-9]+ +[0-9]+ +9 +[0-9]+ length" "$out"; then ok; else bad "no line for the 9-token request"; fi
[ "$fails" -eq 0 ] || cat "$out" >&2

trace bpf/token_time.bt "^attached"
# 12 tokens: the first comes from the prompt's step, 11 from one-token steps.
timeout 120 "$B/pagoda" run -m "$T/models/stories260K.gguf" -p "Once upon a time" -n 12 --temp 0 >/dev/null 2>&1
wait_match "$out" "^tokens 11 " 10
stop_bg $bt INT 30 2>>"$out"
line=$(grep "^tokens " "$out" | tail -n1)
set -- $line
if [ "${2:-}" = 11 ]; then ok; else bad "token_time.bt: want 11 decode tokens: $line"; fi
# a token's inter-token time holds its forward pass and more
if [ "${4:-0}" -gt 0 ] && [ "${6:-0}" -gt 0 ]; then ok; else
	bad "token_time.bt: implausible split: $line"
fi
[ "$fails" -eq 0 ] || cat "$out" >&2
rm -f "$out"
finish
