#!/bin/sh
# mk/install.sh install|uninstall DESTDIR PREFIX BUILD
# Lays out binaries, library, header, pkg-config file, systemd units,
# sysusers/tmpfiles snippets, the D-Bus policy, the default config, the
# bpftrace scripts and the man pages. Directories can be overridden from
# the environment.
set -eu
action=$1 DESTDIR=$2 PREFIX=$3 BUILD=$4
VERSION=${VERSION:-0.1.0}
BINDIR=${BINDIR:-$PREFIX/bin}
LIBDIR=${LIBDIR:-$PREFIX/lib}
INCLUDEDIR=${INCLUDEDIR:-$PREFIX/include}
MANDIR=${MANDIR:-$PREFIX/share/man}
DATADIR=${DATADIR:-$PREFIX/share/pagoda}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-$PREFIX/lib/sysusers.d}
TMPFILESDIR=${TMPFILESDIR:-$PREFIX/lib/tmpfiles.d}
DBUSDIR=${DBUSDIR:-/usr/share/dbus-1/system.d}
D=$DESTDIR

files() {
	# source  destination  mode
	for b in pagoda pagodad pagoda-mkmodel pagoda-bench pagoda-trace pagoda-gateway; do
		[ -e "$BUILD/$b" ] && echo "$BUILD/$b $BINDIR/$b 0755"
	done
	echo "$BUILD/libpagoda.so $LIBDIR/libpagoda.so.1 0755"
	# the CUDA backend, where nvcc built it: pagodad dlopens it by name
	[ -e "$BUILD/libpagoda-cuda.so" ] && echo "$BUILD/libpagoda-cuda.so $LIBDIR/libpagoda-cuda.so 0755"
	echo "$BUILD/libpagoda.a $LIBDIR/libpagoda.a 0644"
	echo "libclient/pagoda.h $INCLUDEDIR/pagoda.h 0644"
	echo "@pc $LIBDIR/pkgconfig/pagoda.pc 0644"
	echo "@unit $UNITDIR/pagodad.service 0644"
	echo "systemd/pagodad.socket $UNITDIR/pagodad.socket 0644"
	echo "@gwunit $UNITDIR/pagoda-gateway.service 0644"
	echo "systemd/pagoda-gateway.socket $UNITDIR/pagoda-gateway.socket 0644"
	echo "systemd/pagoda.sysusers.conf $SYSUSERSDIR/pagoda.conf 0644"
	echo "systemd/pagoda.tmpfiles.conf $TMPFILESDIR/pagoda.conf 0644"
	echo "systemd/org.pagoda.Daemon1.conf $DBUSDIR/org.pagoda.Daemon1.conf 0644"
	for s in bpf/*.bt; do
		[ -e "$s" ] && echo "$s $DATADIR/bpf/$(basename "$s") 0755"
	done
	for m in man/*.[0-9]; do
		[ -e "$m" ] && echo "$m $MANDIR/man${m##*.}/$(basename "$m") 0644"
	done
	return 0
}

install_one() {
	src=$1 dst=$2 mode=$3
	mkdir -p "$D$(dirname "$dst")"
	case $src in
	@pc) sed "s|@PREFIX@|$PREFIX|; s|@VERSION@|$VERSION|; s|^libdir=.*|libdir=$LIBDIR|; s|^includedir=.*|includedir=$INCLUDEDIR|" \
		libclient/pagoda.pc.in > "$D$dst" ;;
	@unit) sed "s|@BINDIR@|$BINDIR|g; s|@SYSCONFDIR@|$SYSCONFDIR|g" systemd/pagodad.service.in > "$D$dst" ;;
	@gwunit) sed "s|@BINDIR@|$BINDIR|g; s|@SYSCONFDIR@|$SYSCONFDIR|g" systemd/pagoda-gateway.service.in > "$D$dst" ;;
	*) cp "$src" "$D$dst" ;;
	esac
	chmod "$mode" "$D$dst"
	echo "  $dst"
}

case $action in
install)
	echo "installing into ${D:-/} (prefix $PREFIX):"
	files | while read -r src dst mode; do install_one "$src" "$dst" "$mode"; done
	ln -sf libpagoda.so.1 "$D$LIBDIR/libpagoda.so"
	# the config is the operator's: never overwrite an edited one
	mkdir -p "$D$SYSCONFDIR/pagoda"
	if [ ! -e "$D$SYSCONFDIR/pagoda/pagodad.conf" ]; then
		cp systemd/pagodad.conf "$D$SYSCONFDIR/pagoda/pagodad.conf"
		echo "  $SYSCONFDIR/pagoda/pagodad.conf"
	fi
	if [ ! -e "$D$SYSCONFDIR/pagoda/gateway.conf" ]; then
		cp systemd/gateway.conf "$D$SYSCONFDIR/pagoda/gateway.conf"
		echo "  $SYSCONFDIR/pagoda/gateway.conf"
	fi
	if [ -z "$D" ] && [ "$(id -u)" = 0 ]; then
		command -v systemd-sysusers >/dev/null && systemd-sysusers "$SYSUSERSDIR/pagoda.conf" || true
		command -v systemd-tmpfiles >/dev/null && systemd-tmpfiles --create "$TMPFILESDIR/pagoda.conf" || true
		command -v ldconfig >/dev/null && ldconfig || true
		[ -d /run/systemd/system ] && systemctl daemon-reload || true
	fi
	;;
uninstall)
	files | while read -r src dst mode; do rm -f "$D$dst" && echo "  removed $dst"; done
	rm -f "$D$LIBDIR/libpagoda.so"
	# in a staging tree, the directories left empty go too
	[ -n "$D" ] && for d in "$DATADIR/bpf" "$DATADIR" "$LIBDIR/pkgconfig" "$UNITDIR" "$SYSUSERSDIR" "$TMPFILESDIR" "$MANDIR/man1" "$MANDIR/man3" "$MANDIR/man8"; do
		rmdir "$D$d" 2>/dev/null || true
	done
	echo "  kept $SYSCONFDIR/pagoda/pagodad.conf and gateway.conf (remove them by hand if unwanted)"
	;;
esac
