#!/bin/sh
# Installs the Debian packages pagoda builds against, when they are missing.
# As root it runs apt-get; otherwise it names what to install and fails.
set -e
PKGS="build-essential pkg-config clang llvm liburing-dev libbpf-dev libelf-dev zlib1g-dev bpftool libsystemd-dev
check systemtap-sdt-dev libpcre2-dev libxxhash-dev dbus systemd bpftrace python3 man-db
libedit-dev tmux python3-pip python3-jinja2 e2fsprogs libmicrohttpd-dev libjansson-dev python3-jsonschema curl"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "pagoda: installing missing packages:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends $missing >&2
else
	echo "pagoda: missing packages:$missing" >&2
	echo "pagoda: install them with: sudo apt-get install$missing" >&2
	exit 1
fi
