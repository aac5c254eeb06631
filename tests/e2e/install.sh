#!/bin/sh
# `make install DESTDIR=...` (mk/install.sh, which it runs after building)
# lays every file where the units and the other files expect it: the
# ExecStart binary and the --config file of the installed unit exist, the
# man pages it names are there, the unit verifies with those paths, the
# library links through pkg-config; `make uninstall` takes it all away but
# the operator's config. Exit 77 if the build is incomplete.
. "$(dirname "$0")/lib.sh"
for f in pagodad pagoda libpagoda.so libpagoda.a; do
	[ -e "$B/$f" ] || { echo "SKIP: $B/$f not built" >&2; exit 77; }
done
B=$(cd "$B" && pwd)
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-inst-XXXXXX")
trap 'rm -rf "$D"' EXIT
P=/usr/local

sh mk/install.sh install "$D" "$P" "$B" >"$D/log" 2>&1 && ok || { bad "install: $(cat "$D/log")"; finish; }
exists() { for f in "$@"; do [ -e "$D$f" ] && ok || bad "not installed: $f"; done; }
exists $P/bin/pagodad $P/bin/pagoda $P/lib/libpagoda.so.1 $P/lib/libpagoda.so $P/lib/libpagoda.a \
	$P/include/pagoda.h $P/lib/pkgconfig/pagoda.pc \
	$P/lib/systemd/system/pagodad.service $P/lib/systemd/system/pagodad.socket \
	$P/lib/sysusers.d/pagoda.conf $P/lib/tmpfiles.d/pagoda.conf \
	/usr/share/dbus-1/system.d/org.pagoda.Daemon1.conf /etc/pagoda/pagodad.conf \
	$P/share/man/man8/pagodad.8 $P/share/man/man1/pagoda.1 $P/share/man/man3/libpagoda.3
[ -x "$D$P/bin/pagodad" ] && ok || bad "pagodad not executable"
[ -e "$B/libpagoda-cuda.so" ] && exists $P/lib/libpagoda-cuda.so
[ ! -e "$B/pagoda-trace" ] || exists $P/bin/pagoda-trace
for s in bpf/*.bt; do exists "$P/share/pagoda/bpf/$(basename "$s")"; done

U=$D$P/lib/systemd/system/pagodad.service
grep -q '@[A-Z]*@' "$U" && bad "placeholders left in the installed unit"
# what the unit points at is where it says
exec_start=$(sed -n 's/^ExecStart=//p' "$U")
bin=${exec_start%% *}
[ "$bin" = "$P/bin/pagodad" ] && ok || bad "ExecStart runs $bin"
[ -x "$D$bin" ] && ok || bad "ExecStart binary $bin missing"
conf=$(echo "$exec_start" | sed -n 's/.*--config \([^ ]*\).*/\1/p')
[ -n "$conf" ] && [ -f "$D$conf" ] && ok || bad "the unit's --config '$conf' missing"
for doc in $(sed -n 's/^Documentation=//p' "$U" "$D$P/lib/systemd/system/pagodad.socket"); do
	page=${doc#man:}; name=${page%%(*}; sec=${page#*(}; sec=${sec%)}
	[ -f "$D$P/share/man/man$sec/$name.$sec" ] && ok || bad "$doc: no man page installed"
done
# the socket the socket unit makes is the one the daemon and the client look for
grep -qx 'ListenSequentialPacket=/run/pagoda/pagoda.sock' "$D$P/lib/systemd/system/pagodad.socket" && ok ||
	bad "socket path"
grep -qx 'RuntimeDirectory=pagoda' "$U" && ok || bad "RuntimeDirectory"
# the default config parses (a missing model is what stops it, not the file)
"$D$P/bin/pagodad" --config "$D/etc/pagoda/pagodad.conf" --model "$D/none.gguf" --socket "$D/x.sock" \
	--bus none >/dev/null 2>"$D/cfg"
rc=$?
[ $rc -eq 1 ] && grep -q "cannot load the model" "$D/cfg" && ok || bad "default config (exit $rc): $(cat "$D/cfg")"
# the unit as installed, with its paths under DESTDIR, verifies (man pages found there)
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$D/v"
	sed "s|^ExecStart=$P|ExecStart=$D$P|" "$U" >"$D/v/pagodad.service"
	cp "$D$P/lib/systemd/system/pagodad.socket" "$D/v/"
	mf=--man=yes; command -v man >/dev/null || mf=--man=no
	(cd "$D/v" && MANPATH="$D$P/share/man" systemd-analyze verify $mf ./pagodad.service ./pagodad.socket) \
		>"$D/verify" 2>&1 && ! grep -q . "$D/verify" && ok || bad "verify installed units: $(cat "$D/verify")"
fi
# man pages render without warnings
if command -v man >/dev/null; then
	for m in "$D$P"/share/man/man*/*; do
		w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$m" 2>&1 >/dev/null)
		[ -z "$w" ] && ok || bad "$(basename "$m"): $w"
	done
fi
# a client builds against the installed header and library through pkg-config
cat >"$D/c.c" <<'C'
#include <pagoda.h>
#include <stdio.h>
int main(void) { puts(pagoda_strerror(PAGODA_E_PERM)); return 0; }
C
flags=$(PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_LIBDIR=$D$P/lib/pkgconfig pkg-config --cflags --libs pagoda 2>&1)
if cc -o "$D/c" "$D/c.c" $flags >"$D/cc" 2>&1 && LD_LIBRARY_PATH=$D$P/lib "$D/c" >"$D/cout"; then ok
else bad "client build ($flags): $(cat "$D/cc")"; fi
# a second install keeps an edited config
echo "# edited" >>"$D/etc/pagoda/pagodad.conf"
sh mk/install.sh install "$D" "$P" "$B" >/dev/null 2>&1
grep -q "# edited" "$D/etc/pagoda/pagodad.conf" && ok || bad "reinstall overwrote the config"

sh mk/install.sh uninstall "$D" "$P" "$B" >"$D/ulog" 2>&1 && ok || bad "uninstall: $(cat "$D/ulog")"
left=$(cd "$D" && find ./usr ./etc -type f -o -type l 2>/dev/null | sort | tr '\n' ' ')
[ "$left" = "./etc/pagoda/gateway.conf ./etc/pagoda/pagodad.conf " ] && ok || bad "left after uninstall: $left"
finish
