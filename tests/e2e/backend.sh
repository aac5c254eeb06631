#!/bin/sh
# Picking a backend: --backend auto falls back to the CPU and logs why
# (no library, a library whose probe finds no device, one built for
# another ABI, one whose device fails to start); --backend cuda in those
# cases exits 1 with the reason; an unknown name is a usage error. The
# CUDA library is stood in for by small ones built here, so this runs
# without CUDA or a GPU.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# fake MODE: a libpagoda-cuda.so stand-in at $dir/MODE.so
fake() {
	cat > "$dir/fake.c" <<'SRC'
#include "kernels/pg_backend.h"
#include <stdio.h>
static int probe(char *why, size_t len)
{
#ifdef NODEV
	snprintf(why, len, "no CUDA device: fake probe");
	return 0;
#else
	return 1;
#endif
}
static int create(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t len)
{
	snprintf(err, len, "cuda: fake device failed to start");
	return -EIO;
}
static const struct pg_backend_ops ops = { .abi = PG_BACKEND_ABI, .name = "cuda", .probe = probe, .create = create };
const struct pg_backend_ops *pg_backend_cuda_entry(uint32_t abi)
{
#ifdef OLDABI
	return NULL;
#else
	return abi == PG_BACKEND_ABI ? &ops : NULL;
#endif
}
SRC
	cc -shared -fPIC -I. "$2" -o "$dir/$1.so" "$dir/fake.c"
}
fake nodev -DNODEV
fake oldabi -DOLDABI
fake broken -DSTARTS # a device that fails in create
cc -shared -fPIC -o "$dir/noentry.so" -x c /dev/null

# daemon LIB WANT_RC REGEX [ARGS...]: pagodad with PAGODA_CUDA_LIB=LIB
# exits WANT_RC ("up": serves, then stops on SIGINT) with REGEX in its log
daemon() {
	lib=$1 want=$2 re=$3
	shift 3
	rm -f "$dir/log" "$dir/sock"
	if [ "$want" = up ]; then
		PAGODA_CUDA_LIB=$lib "$B/pagodad" --model "$M" --socket "$dir/sock" --bus none "$@" 2> "$dir/log" &
		pid=$!
		if wait_match "$dir/log" "listening on" 20; then :; else bad "pagodad $*: never listened: $(cat "$dir/log")"; fi
		stop_bg $pid INT 10
		rc=$?
		[ $rc -eq 0 ] || { bad "pagodad $*: exit $rc after SIGINT"; return; }
	else
		PAGODA_CUDA_LIB=$lib timeout 20 "$B/pagodad" --model "$M" --socket "$dir/sock" --bus none "$@" 2> "$dir/log"
		rc=$?
		[ $rc -eq "$want" ] || { bad "pagodad $* (PAGODA_CUDA_LIB=$lib): exit $rc, want $want: $(cat "$dir/log")"; return; }
	fi
	if grep -q "$re" "$dir/log"; then ok; else bad "pagodad $* (PAGODA_CUDA_LIB=$lib): no '$re' in: $(cat "$dir/log")"; fi
}

daemon "$dir/nodev.so" up "backend cpu (.*): picked the CPU: no CUDA device: fake probe" --backend auto
daemon "$dir/nodev.so" up "picked the CPU: no CUDA device: fake probe"
daemon "$dir/nodev.so" 1 "backend cuda: no CUDA device: fake probe" --backend cuda
daemon "$dir/missing.so" up "picked the CPU: cannot load .*missing.so" --backend auto
daemon "$dir/missing.so" 1 "backend cuda: cannot load .*missing.so" --backend cuda
daemon "$dir/oldabi.so" 1 "built for another backend ABI" --backend cuda
daemon "$dir/noentry.so" 1 "has no pg_backend_cuda_entry" --backend cuda
daemon "$dir/broken.so" 1 "backend cuda: cuda: fake device failed to start" --backend cuda
daemon "$dir/broken.so" up "picked the CPU: cuda: fake device failed to start" --backend auto
daemon "$dir/broken.so" up "backend cpu (" --backend cpu
daemon "$dir/nodev.so" 2 "'gpu' is not one of cpu, cuda, auto" --backend gpu
printf 'backend = cuda\n' > "$dir/conf"
daemon "$dir/nodev.so" 1 "backend cuda: no CUDA device: fake probe" --config "$dir/conf"
daemon "$dir/nodev.so" up "picked the CPU: no CUDA device" --config "$dir/conf" --backend auto

# pagoda run: the same door, the same words
PAGODA_CUDA_LIB="$dir/nodev.so" "$B/pagoda" run -m "$M" -p hi -n 1 --backend cuda > "$dir/out" 2> "$dir/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "no CUDA device: fake probe" "$dir/err" && [ ! -s "$dir/out" ]; then ok
else bad "pagoda run --backend cuda: exit $rc: $(cat "$dir/err")"; fi
got=$(PAGODA_CUDA_LIB="$dir/nodev.so" "$B/pagoda" run -m "$M" -p "Once upon a time" -n 16 --temp 0 --ids 2>/dev/null)
want=$("$B/pagoda" run -m "$M" -p "Once upon a time" -n 16 --temp 0 --ids --backend cpu 2>/dev/null)
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else bad "pagoda run auto (CPU) gave '$got', --backend cpu '$want'"; fi
finish
