#!/bin/sh
# pagoda-gateway as a service: its units as `make install` lays them out pass
# `systemd-analyze verify` and rate 2.0 or lower in `systemd-analyze security
# --offline=yes`; socket activation (systemd-socket-activate on a TCP port)
# starts the gateway on the first connection, which it serves (/health
# against a real pagodad on stories260K, a completion equal to `pagoda
# generate`'s); SIGTERM stops it with status 0. Bad flags and config keys
# are refused, naming them. The HTTP limits hold: max-connections, the idle
# timeout against a slow client, max-header. Exit 77 without systemd-analyze or the model.
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not installed" >&2; exit 77; }
for b in pagodad pagoda pagoda-gateway; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
B=$(cd "$B" && pwd)
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gwu-XXXXXX")
DP= SP=
cleanup() {
	[ -n "$SP" ] && kill -KILL "$SP" 2>/dev/null
	[ -n "$DP" ] && kill -KILL "$DP" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT

sed "s|@BINDIR@|$B|g; s|@SYSCONFDIR@|/etc|g" systemd/pagoda-gateway.service.in >"$D/pagoda-gateway.service"
cp systemd/pagoda-gateway.socket systemd/pagodad.socket "$D/"
grep -q '@[A-Z]*@' "$D/pagoda-gateway.service" && bad "placeholders left in the unit"
for m in man/*.[0-9]; do
	mkdir -p "$D/man/man${m##*.}" && cp "$m" "$D/man/man${m##*.}/"
done
manflag=--man=yes
command -v man >/dev/null || manflag=--man=no
if (cd "$D" && MANPATH="$D/man" systemd-analyze verify $manflag ./pagoda-gateway.service ./pagoda-gateway.socket) \
	>"$D/verify" 2>&1 && ! grep -q . "$D/verify"; then ok
else bad "systemd-analyze verify: $(cat "$D/verify")"; fi
(cd "$D" && systemd-analyze security --offline=yes ./pagoda-gateway.service) >"$D/sec" 2>&1
level=$(sed -n 's/.*Overall exposure level for pagoda-gateway.service: *\([0-9.]*\).*/\1/p' "$D/sec")
if [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }'; then
	ok; echo "exposure level: $level" >&2
else
	bad "exposure level '${level:-?}' (want <= 2.0): $(tail -5 "$D/sec")"
fi
grep -qx 'ListenStream=127.0.0.1:8080' systemd/pagoda-gateway.socket && ok || bad "socket not on 127.0.0.1:8080"

# refusals name what is wrong
"$B/pagoda-gateway" --no-such-flag 2>"$D/e1"; rc=$?
[ $rc -eq 2 ] && grep -q "no-such-flag" "$D/e1" && ok || bad "bad flag: exit $rc, $(cat "$D/e1")"
printf 'colour = blue\n' >"$D/bad.conf"
"$B/pagoda-gateway" --config "$D/bad.conf" 2>"$D/e2"; rc=$?
[ $rc -eq 2 ] && grep -q "bad.conf:1: unknown key 'colour'" "$D/e2" && ok || bad "bad key: exit $rc, $(cat "$D/e2")"
"$B/pagoda-gateway" --listen nowhere 2>"$D/e3"; rc=$?
[ $rc -ne 0 ] && grep -q "nowhere" "$D/e3" && ok || bad "bad listen: exit $rc, $(cat "$D/e3")"
"$B/pagoda-gateway" --help | grep -q -- "--api-key-file" && ok || bad "--help lacks the keys"

command -v systemd-socket-activate >/dev/null || { echo "note: no systemd-socket-activate: activation not tested" >&2; finish; }
S=$D/s.sock
"$B/pagodad" --model "$M" --socket "$S" --threads 2 --bus none 2>"$D/log" &
DP=$!
i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 200 ] && { echo "pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
	sleep 0.05
done
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
systemd-socket-activate -l "127.0.0.1:$PORT" "$B/pagoda-gateway" --socket "$S" --model-name stories \
	2>"$D/gw.log" &
SP=$!
i=0
until python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$PORT" 2>/dev/null; do
	i=$((i + 1)); [ $i -gt 100 ] && { bad "nothing listens on $PORT"; finish; }
	sleep 0.05
done
"$B/pagoda" generate --socket "$S" -p "Once upon a time" -n 24 --temp 0 >"$D/want"
python3 - "$PORT" "$D/got" <<'PY' && ok || bad "requests through the activated gateway: $(cat "$D/gw.log")"
import json, sys, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
assert urllib.request.urlopen(base + "/health", timeout=20).status == 200
rq = urllib.request.Request(base + "/v1/completions", json.dumps({"model": "stories", "prompt": "Once upon a time",
                            "max_tokens": 24, "temperature": 0}).encode(), {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(rq, timeout=60))
assert r["model"] == "stories", r
open(sys.argv[2], "w").write(r["choices"][0]["text"])
PY
cmp -s "$D/want" "$D/got" && ok || bad "activated gateway: '$(cat "$D/got")' != generate's '$(cat "$D/want")'"
grep -q "the socket systemd passed" "$D/gw.log" && ok || bad "the gateway did not take the passed socket: $(cat "$D/gw.log")"
stop_bg "$SP" TERM 20 && ok || bad "gateway exit status after SIGTERM"
SP=

# limits: connections at once, idle (slow) clients, header bytes
"$B/pagoda-gateway" --listen "127.0.0.1:$PORT" --socket "$S" --max-connections 2 --timeout 2 --max-header 2048 \
	2>"$D/gw2.log" &
SP=$!
python3 - "$PORT" <<'PY' && ok || bad "limits (above): $(cat "$D/gw2.log")"
import socket, sys, time, urllib.request, urllib.error
port = int(sys.argv[1])
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        break
    except OSError:
        time.sleep(0.05)
time.sleep(0.3)
# two idle connections fill max-connections: a third waits, unaccepted,
# until the idle timeout (2 s) closes one of them
a = socket.create_connection(("127.0.0.1", port))
b = socket.create_connection(("127.0.0.1", port))
time.sleep(0.3)
t0 = time.monotonic()
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
c.settimeout(1)
try:
    early = c.recv(100)
except socket.timeout:
    early = None
assert early is None, "a third connection was served past max-connections 2: %r" % early
c.settimeout(10)
late = c.recv(100)
assert late.startswith(b"HTTP/1.1 "), "the waiting connection got %r" % late
assert time.monotonic() - t0 < 5, "idle connections were kept past the timeout"
a.settimeout(5)
try:
    assert a.recv(1) == b"", "an idle connection got data"
except ConnectionResetError:
    pass
c.close()
b.close()
# headers larger than max-header are refused, and the server goes on
rq = urllib.request.Request("http://127.0.0.1:%d/health" % port, headers={"X-Big": "x" * 4096})
try:
    code = urllib.request.urlopen(rq, timeout=5).status
except urllib.error.HTTPError as e:
    code = e.code
except (ConnectionError, urllib.error.URLError):
    code = 0
assert code in (0, 413, 431), "4 KiB of headers against max-header 2048: %s" % code
assert urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5).status == 200
PY
stop_bg "$SP" TERM 20 && ok || bad "gateway exit status after SIGTERM"
SP=
stop_bg "$DP" TERM 60 && ok || bad "pagodad exit status after SIGTERM"
DP=
finish
