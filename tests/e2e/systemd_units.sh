#!/bin/sh
# The systemd units as `make install` lays them out: `systemd-analyze verify`
# passes on pagodad.service (@BINDIR@/@SYSCONFDIR@ filled in, as
# mk/install.sh does) and pagodad.socket, with the man pages they name found;
# `systemd-analyze security --offline=yes` rates the service 2.0 or lower;
# the settings issue 5 asks for are there; the sysusers snippet, the tmpfiles
# snippet and the D-Bus policy parse. Exit 77 without systemd-analyze.
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not installed" >&2; exit 77; }
[ -x "$B/pagodad" ] || { echo "SKIP: $B/pagodad not built" >&2; exit 77; }
B=$(cd "$B" && pwd)
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-units-XXXXXX")
trap 'rm -rf "$D"' EXIT

sed "s|@BINDIR@|$B|g; s|@SYSCONFDIR@|/etc|g" systemd/pagodad.service.in >"$D/pagodad.service"
cp systemd/pagodad.socket "$D/pagodad.socket"
grep -q '@[A-Z]*@' "$D/pagodad.service" && bad "placeholders left in the unit: $(grep '@[A-Z]*@' "$D/pagodad.service")"
for m in man/*.[0-9]; do
	mkdir -p "$D/man/man${m##*.}" && cp "$m" "$D/man/man${m##*.}/"
done
manflag=--man=yes
command -v man >/dev/null || manflag=--man=no
if (cd "$D" && MANPATH="$D/man" systemd-analyze verify $manflag ./pagodad.service ./pagodad.socket) >"$D/verify" 2>&1 &&
	! grep -q . "$D/verify"; then ok; else bad "systemd-analyze verify: $(cat "$D/verify")"; fi

(cd "$D" && systemd-analyze security --offline=yes ./pagodad.service) >"$D/sec" 2>&1
level=$(sed -n 's/.*Overall exposure level for pagodad.service: *\([0-9.]*\).*/\1/p' "$D/sec")
if [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }'; then
	ok; echo "exposure level: $level" >&2
else
	bad "exposure level '${level:-?}' (want <= 2.0): $(tail -5 "$D/sec")"
fi

has() { # file setting...
	f=$1; shift
	for s in "$@"; do grep -qx "$s" "$f" && ok || bad "$(basename "$f") lacks '$s'"; done
}
has "$D/pagodad.service" Type=notify NotifyAccess=main 'WatchdogSec=60s' 'ExecReload=/bin/kill -HUP $MAINPID' \
	User=pagoda Group=pagoda RuntimeDirectory=pagoda StateDirectory=pagoda CacheDirectory=pagoda \
	NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
	RestrictAddressFamilies=AF_UNIX MemoryDenyWriteExecute=yes LockPersonality=yes \
	'SystemCallFilter=@system-service io_uring_setup io_uring_enter io_uring_register' \
	"ExecStart=$B/pagodad --config /etc/pagoda/pagodad.conf"
has "$D/pagodad.socket" ListenSequentialPacket=/run/pagoda/pagoda.sock SocketMode=0660 SocketGroup=pagoda
# io_uring is not in @system-service, so the explicit names are what allow it
systemd-analyze syscall-filter @system-service 2>/dev/null | grep -q io_uring_setup &&
	echo "note: @system-service already has io_uring here" >&2

# sysusers: a pagoda user and group; tmpfiles: parses
if command -v systemd-sysusers >/dev/null; then
	mkdir -p "$D/root/etc" "$D/root/usr/lib/sysusers.d"
	cp systemd/pagoda.sysusers.conf "$D/root/usr/lib/sysusers.d/pagoda.conf"
	if systemd-sysusers --root="$D/root" >"$D/su" 2>&1 &&
		grep -q '^pagoda:' "$D/root/etc/passwd" && grep -q '^pagoda:' "$D/root/etc/group"; then ok
	else bad "sysusers: $(cat "$D/su")"; fi
fi
if command -v systemd-tmpfiles >/dev/null; then
	mkdir -p "$D/root/var/lib" "$D/root/usr/lib/tmpfiles.d"
	cp systemd/pagoda.tmpfiles.conf "$D/root/usr/lib/tmpfiles.d/pagoda.conf"
	if systemd-tmpfiles --root="$D/root" --create pagoda.conf >"$D/tf" 2>&1 &&
		[ -d "$D/root/var/lib/pagoda/models" ]; then ok; else bad "tmpfiles: $(cat "$D/tf")"; fi
fi
# the D-Bus policy: a bus that includes it starts
if command -v dbus-daemon >/dev/null; then
	cat >"$D/bus.conf" <<XML
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$D/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow user="*"/></policy>
  <include>$(pwd)/systemd/org.pagoda.Daemon1.conf</include>
</busconfig>
XML
	if dbus-daemon --config-file="$D/bus.conf" --fork --print-pid=1 --nopidfile >"$D/bpid" 2>"$D/berr"; then
		kill "$(cat "$D/bpid")" 2>/dev/null; ok
	else bad "dbus-daemon rejects the policy: $(cat "$D/berr")"; fi
fi
finish
