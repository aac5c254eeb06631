#!/bin/sh
# Prefix-cache isolation (prefix-cache-scope): a shared prefix cache lets
# one user learn from cached tokens (or time) whether another sent the same
# prompt. With the default scope (user) a second user's identical prompt
# finds nothing cached while the first user's repeat does; with `group`,
# users of different groups are apart; with `global` the second user gets
# the first one's blocks; a client's own scope (pagoda_params.cache_scope)
# splits its user's cache further. Counted from the DONE event's cached
# tokens (`pagoda generate --timings`), and by timing: on SmolLM2-135M a
# long prompt another user sent comes no faster than a cold one under the
# default scope, and as fast as a cache hit under `global`. Root and nobody
# (setpriv) are the two users: CI is root. Exit 77 without root, setpriv or
# the model.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second user through setpriv)" >&2; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: setpriv not installed" >&2; exit 77; }
B=$(cd "$B" && pwd)
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-scope-XXXXXX")
chmod 755 "$D"
S=$D/s.sock
DP=
cleanup() { [ -n "$DP" ] && kill -KILL $DP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
P="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends and her dog."
start() { start_pagodad "$S" "$D/log" --model "$M" --threads 2 --bus none --allow-any "$@" || exit 1; }
stop() { stop_bg $DP TERM 30 || bad "pagodad exit status"; DP=; }
# cached USER: the prompt tokens found in the cache for P sent as USER (root|nobody)
cached() {
	if [ "$1" = nobody ]; then
		setpriv --reuid=65534 --regid=65534 --clear-groups "$B/pagoda" generate --socket "$S" -p "$P" -n 1 \
			--temp 0 --timings 2>"$D/t" >/dev/null
	else
		"$B/pagoda" generate --socket "$S" -p "$P" -n 1 --temp 0 --timings 2>"$D/t" >/dev/null
	fi
	sed -n 's/.*tokens (\([0-9]*\) cached).*/\1/p' "$D/t"
}

start
a=$(cached root); b=$(cached root); c=$(cached nobody); d=$(cached nobody)
[ "$a" = 0 ] && ok || bad "default scope: first request found $a cached tokens"
[ "${b:-0}" -ge 16 ] && ok || bad "default scope: root's repeat found ${b:-?} cached tokens (want >= 16)"
[ "$c" = 0 ] && ok || bad "default scope (user): nobody found $c of root's tokens cached"
[ "${d:-0}" -ge 16 ] && ok || bad "default scope: nobody's own repeat found ${d:-?} cached"
stop

start --prefix-cache-scope group
a=$(cached root); c=$(cached nobody)
[ "$c" = 0 ] && ok || bad "group scope: nobody (group nogroup) found $c of root's tokens cached"
stop

start --prefix-cache-scope global
a=$(cached root); c=$(cached nobody)
[ "${c:-0}" -ge 16 ] && ok || bad "global scope: nobody found ${c:-?} of root's tokens cached (want >= 16)"
stop

# timing: TTFT in ms of a ~600-token prompt; a cache hit computes one
# block, a miss all of them (a ratio, so that a slow machine passes too)
if SM=$(sh tools/fetch-smollm2.sh 2>/dev/null); then
	M=$SM
	P=$(for i in $(seq 24); do printf 'The quick brown fox %d jumps over the lazy dog near the river bank. ' "$i"; done)
	ttft() {
		cached "$1" >/dev/null
		sed -n 's/.*TTFT \([0-9.]*\) ms.*/\1/p' "$D/t"
	}
	start
	cold=$(ttft root); warm=$(ttft root); other=$(ttft nobody)
	echo "default scope TTFT: cold $cold ms, root's repeat $warm ms, nobody's $other ms" >&2
	awk -v o="$other" -v w="$warm" 'BEGIN { exit !(o > 4 * w) }' && ok ||
		bad "default scope: nobody's TTFT $other ms is not well above a hit's $warm ms: the cache leaks by timing"
	stop
	start --prefix-cache-scope global
	cold=$(ttft root); other=$(ttft nobody)
	echo "global scope TTFT: root cold $cold ms, nobody $other ms" >&2
	awk -v o="$other" -v c="$cold" 'BEGIN { exit !(4 * o < c) }' && ok ||
		bad "global scope: nobody's TTFT $other ms is not well below the cold $cold ms"
	stop
else
	echo "SKIP (timing part): SmolLM2-135M-Instruct not available" >&2
fi

"$B/pagodad" --model "$M" --socket "$S" --bus none --prefix-cache-scope everyone 2>"$D/log"
rc=$?
[ $rc -ne 0 ] && grep -q "everyone" "$D/log" && ok || bad "a bad scope: exit $rc, $(cat "$D/log")"
finish
