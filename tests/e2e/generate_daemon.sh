#!/bin/sh
# pagodad + `pagoda generate`: for every golden prompt (and a few more), the
# daemon's stream equals in-process `pagoda run` byte for byte (text and
# --ids), greedy; `pagoda ping` round-trips. Exit 77 (skip) without the model.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gen-XXXXXX")
S=$D/s.sock
DP=
cleanup() { [ -n "$DP" ] && kill -KILL $DP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
start_pagodad "$S" "$D/log" --model "$M" --threads 2 || exit 1
fail=0
check() { # prompt n
	"$B/pagoda" run -m "$M" -p "$1" -n "$2" --temp 0 -t 2 >"$D/run" 2>/dev/null || { echo "run failed: $1" >&2; fail=1; return; }
	"$B/pagoda" generate --socket "$S" -p "$1" -n "$2" --temp 0 >"$D/gen" || { echo "generate failed: $1" >&2; fail=1; return; }
	cmp -s "$D/run" "$D/gen" || { echo "generate != run for: $1" >&2; fail=1; }
	"$B/pagoda" run -m "$M" -p "$1" -n "$2" --temp 0 -t 2 --ids >"$D/run" 2>/dev/null
	"$B/pagoda" generate --socket "$S" -p "$1" -n "$2" --temp 0 --ids >"$D/gen"
	[ "$(cat "$D/run")" = "$(cat "$D/gen")" ] || { echo "generate --ids != run --ids for: $1" >&2; fail=1; }
}
for p in "$T"/golden/*.prompt; do
	[ -e "$p" ] || continue
	check "$(cat "$p")" 128
	"$B/pagoda" generate --socket "$S" -p "$(cat "$p")" -n 128 --temp 0 >"$D/gen"
	cmp -s "$D/gen" "${p%.prompt}.expected" || { echo "generate != ${p%.prompt}.expected" >&2; fail=1; }
done
check "Once upon a time" 64
check "The little dog was sad because" 200
check "A" 500
# until the end of text, like run without -n
check "Tom and Sue" -1
"$B/pagoda" ping --socket "$S" -c 100 >"$D/ping" || { echo "ping failed" >&2; fail=1; }
grep -q "100 round trips" "$D/ping" || { echo "ping output: $(cat "$D/ping")" >&2; fail=1; }
# a request beyond the context: a clear error, exit 1
if "$B/pagoda" generate --socket "$S" -p "Hi" -n 100000 --temp 0 >/dev/null 2>"$D/err"; then
	echo "no error for a request beyond the context" >&2; fail=1
fi
grep -q "context" "$D/err" || { echo "unclear error: $(cat "$D/err")" >&2; fail=1; }
stop_bg $DP TERM 60; rc=$?
[ $rc -eq 0 ] || { echo "pagodad exit status $rc after SIGTERM" >&2; fail=1; }
[ $fail -eq 0 ] || cat "$D/log" >&2
exit $fail
