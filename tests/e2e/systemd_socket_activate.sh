#!/bin/sh
# Socket activation: `systemd-socket-activate --seqpacket` listens, starts
# pagodad on the first connection and passes it the socket; that connection
# and the next are served through it, byte for byte as `pagoda run` does.
# A passed socket of the wrong type (SOCK_STREAM) is refused. Exit 77 without
# systemd-socket-activate or the model.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
command -v systemd-socket-activate >/dev/null || { echo "SKIP: systemd-socket-activate not installed" >&2; exit 77; }
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-sa-XXXXXX")
S=$D/s.sock
SP=
cleanup() { [ -n "$SP" ] && kill -KILL "$SP" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT

systemd-socket-activate --seqpacket -l "$S" "$B/pagodad" --model "$M" --threads 2 --bus none 2>"$D/log" &
SP=$!
i=0
while [ ! -S "$S" ]; do
	i=$((i + 1)); [ $i -gt 200 ] && { bad "no listening socket"; cat "$D/log" >&2; finish; }
	sleep 0.05
done
# nothing started yet: systemd-socket-activate waits for the first client
grep -q "loading" "$D/log" && bad "pagodad started before any connection"
"$B/pagoda" run -m "$M" -p "Once upon a time" -n 32 --temp 0 -t 2 >"$D/want" 2>/dev/null
if "$B/pagoda" generate --socket "$S" -p "Once upon a time" -n 32 --temp 0 >"$D/got" 2>"$D/err"; then ok
else bad "generate through the activated socket: $(cat "$D/err")"; fi
cmp -s "$D/want" "$D/got" && ok || bad "activated output differs from pagoda run"
"$B/pagoda" generate --socket "$S" -p "Once upon a time" -n 32 --temp 0 >"$D/got2" 2>>"$D/err" && cmp -s "$D/want" "$D/got2" &&
	ok || bad "second request: $(cat "$D/err")"
grep -q "using the socket passed by systemd" "$D/log" && ok || bad "the daemon did not take the passed socket"
grep -q "listening on $S (socket from systemd)" "$D/log" && ok || bad "log does not name the passed socket"
# systemd-socket-activate execs pagodad: SIGTERM drains it, exit 0, the socket file stays
stop_bg "$SP" TERM 60; rc=$?
SP=
[ $rc -eq 0 ] && ok || bad "exit status $rc after SIGTERM"
[ -S "$S" ] && ok || bad "pagodad removed the socket systemd owns"

# a stream socket passed as LISTEN_FDS: refused, exit 1
if command -v python3 >/dev/null; then
	python3 - "$B/pagodad" "$M" "$D/stream.sock" >"$D/out2" 2>"$D/log2" <<'PY'
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[3]); s.listen(4)
if s.fileno() != 3: os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execve(sys.argv[1], [sys.argv[1], "--model", sys.argv[2], "--bus", "none"], env)
PY
	rc=$?
	[ $rc -eq 1 ] && ok || bad "pagodad took a SOCK_STREAM socket (exit $rc)"
	grep -q "SOCK_SEQPACKET" "$D/log2" && ok || bad "no clear message: $(cat "$D/log2")"
fi
[ $fails -eq 0 ] || cat "$D/log" >&2
finish
