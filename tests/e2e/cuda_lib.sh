#!/bin/sh
# The real libpagoda-cuda.so, wherever nvcc built it: a fat binary with
# sm_80 and sm_90 code and PTX, exporting only its entry and test points;
# its block readers, run on the host, equal the CPU's dequantization.
# Without a device its probe says so: test_cuda skips, pagodad --backend
# cuda exits 1 with the reason, auto logs that it picked the CPU. With a
# device (tests/gpu/run.sh covers that case) the kernel tests pass and
# pagodad serves on it.
. "$(dirname "$0")/lib.sh"
L=$B/libpagoda-cuda.so
if [ ! -e "$L" ]; then
	echo "SKIP: $L not built (no nvcc)" >&2
	exit 77
fi
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for a in "-arch sm_80" "-arch sm_90" ".target sm_90"; do
	if strings -n 6 "$L" | grep -q -- "$a"; then ok; else bad "$L: no '$a' in its fat binary"; fi
done
syms=$(nm -D --defined-only "$L" | awk '{print $3}' | grep -v -e '^pg_backend_cuda_entry$' -e '^pgcu_test_' | tr '\n' ' ')
if [ -z "$syms" ]; then ok; else bad "$L exports more than its entry points: $syms"; fi
if ldd "$L" | grep -q -e libcudart -e libcublas; then bad "$L needs a CUDA library beyond the driver: $(ldd "$L")"; else ok; fi

# the device's block readers, compiled for the host, against the CPU's
if "$B/tests/gpu/host_check" > "$dir/h" 2>&1; then ok; else bad "host_check: $(cat "$dir/h")"; fi

PAGODA_BUILD=$B "$B/tests/gpu/test_cuda" > "$dir/t" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
	if grep -q "^SKIP: no CUDA device" "$dir/t"; then ok; else bad "test_cuda skipped without saying there is no device: $(cat "$dir/t")"; fi
	why=$(sed -n 's/^SKIP: //p' "$dir/t")
	PAGODA_CUDA_LIB=$L timeout 20 "$B/pagodad" --model "$M" --socket "$dir/sock" --bus none --backend cuda 2> "$dir/log"
	rc=$?
	if [ $rc -eq 1 ] && grep -qF "backend cuda: $why" "$dir/log"; then ok
	else bad "pagodad --backend cuda without a device: exit $rc: $(cat "$dir/log")"; fi
	PAGODA_CUDA_LIB=$L "$B/pagodad" --model "$M" --socket "$dir/sock" --bus none --backend auto 2> "$dir/log" &
	pid=$!
	if wait_match "$dir/log" "listening on" 20 && grep -qF "picked the CPU: $why" "$dir/log"; then ok
	else bad "pagodad --backend auto without a device: $(cat "$dir/log")"; fi
	stop_bg $pid INT 10 || bad "pagodad --backend auto: exit $? after SIGINT"
elif [ $rc -eq 0 ]; then
	ok
else
	bad "test_cuda: exit $rc: $(tail -20 "$dir/t")"
fi
finish
