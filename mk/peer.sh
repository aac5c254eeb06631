#!/bin/sh
# mk/peer.sh — the peer: llama.cpp built from the source the PyPI sdist of
# llama-cpp-python carries (vendor/llama.cpp), pinned by version and sha256,
# built natively with cmake (CPU backend, GGML_NATIVE as a user builds it).
# `make bench` and `make testdata` both use it.
#
#   sh mk/peer.sh          fetch, verify, build (once); print the bin folder
#   sh mk/peer.sh built    print the bin folder if it is built, else fail
#   sh mk/peer.sh version  print the peer's version line
#   sh mk/peer.sh src      print llama.cpp's source folder (once fetched)
#   sh mk/peer.sh fetch    fetch and verify the source only; print its folder
#   sh mk/peer.sh server   build llama-server too (bench/gateway.sh); print the bin folder
#
# Environment: PAGODA_BUILD (default build/), PEER_JOBS (default nproc),
# PEER_SDIST (a local copy of the tarball, for machines without PyPI).
# Progress goes to stderr; stdout is the bin folder only.
set -eu
cd "$(dirname "$0")/.."
B=${PAGODA_BUILD:-$(pwd)/build}
P=$B/peer

LCP_VERSION=0.3.36
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# vendor/llama.cpp's commit, from the sdist's .git/modules/vendor/llama.cpp/HEAD,
# and its release number (b11312, 2026-10-01): the sdist holds no history to
# count it from, so it is given to cmake
LLAMA_COMMIT=0c1e57098bba43ac29e6e3b677cdceebdd22334f
LLAMA_BUILD=11312
TARGETS="llama-completion llama-simple llama-bench llama-batched-bench
	llama-perplexity llama-quantize llama-tokenize"

TGZ=llama_cpp_python-$LCP_VERSION.tar.gz
SRC=$P/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp
BIN=$P/build/bin
VERSION="llama.cpp b$LLAMA_BUILD-$(echo "$LLAMA_COMMIT" | cut -c1-9) (vendor/llama.cpp of PyPI llama-cpp-python $LCP_VERSION), CPU backend, GGML_NATIVE=ON"

case ${1:-} in
version) echo "$VERSION"; exit 0 ;;
src) [ -d "$SRC" ] && echo "$SRC"; [ -d "$SRC" ]; exit ;;
server) TARGETS=llama-server ;;
esac
# (an if, not $(test && echo): under set -e a failing substitution ends the script)
STAMP=$P/stamp
if [ "${1:-}" = server ]; then STAMP=$P/stamp-server; fi

log() { echo "peer: $*" >&2; }

have_all() {
	for t in $TARGETS; do [ -x "$BIN/$t" ] || return 1; done
	[ "$(cat "$STAMP" 2>/dev/null)" = "$LCP_VERSION $LLAMA_COMMIT $LLAMA_BUILD" ]
}

fetch_src() {
	mkdir -p "$P"
	if [ ! -d "$SRC" ]; then
		if [ ! -f "$P/$TGZ" ]; then
			if [ -n "${PEER_SDIST:-}" ]; then
				cp "$PEER_SDIST" "$P/$TGZ"
			else
				log "pip download llama-cpp-python==$LCP_VERSION (sdist)"
				python3 -m pip download --quiet --no-deps --no-binary :all: \
					-d "$P" "llama-cpp-python==$LCP_VERSION" >&2
			fi
		fi
		echo "$LCP_SHA256  $P/$TGZ" | sha256sum -c --quiet - >&2 || {
			log "$TGZ: sha256 mismatch (want $LCP_SHA256)"
			exit 1
		}
		head=$(tar xzf "$P/$TGZ" -O "llama_cpp_python-$LCP_VERSION/.git/modules/vendor/llama.cpp/HEAD")
		[ "$head" = "$LLAMA_COMMIT" ] || {
			log "vendor/llama.cpp is at $head, not $LLAMA_COMMIT"
			exit 1
		}
		tar xzf "$P/$TGZ" -C "$P" "llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"
	fi
}

if [ "${1:-}" = fetch ]; then
	command -v python3 >/dev/null 2>&1 || { log "python3 is missing"; exit 1; }
	fetch_src
	echo "$SRC"
	exit 0
fi
if have_all; then
	echo "$BIN"
	exit 0
fi
[ "${1:-}" = built ] && exit 1

for c in cmake c++ python3; do
	command -v $c >/dev/null 2>&1 || { log "$c is missing (apt-get install cmake g++ python3-pip)"; exit 1; }
done
fetch_src

log "building $(echo $TARGETS) into $BIN (once; 10-20 minutes on 2 cores)"
t0=$(date +%s)
cmake -S "$SRC" -B "$P/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
	-DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
	-DLLAMA_BUILD_NUMBER=$LLAMA_BUILD -DLLAMA_BUILD_COMMIT="$(echo "$LLAMA_COMMIT" | cut -c1-9)" \
	>"$P/cmake.log" 2>&1 || { log "cmake failed, see $P/cmake.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$P/build" -j "${PEER_JOBS:-$(nproc)}" --target $TARGETS \
	>"$P/build.log" 2>&1 || { log "build failed, see $P/build.log"; exit 1; }
echo "$LCP_VERSION $LLAMA_COMMIT $LLAMA_BUILD" >"$STAMP"
log "built in $(($(date +%s) - t0)) s"
echo "$BIN"
