#!/bin/sh
# `pagoda status` against a pagodad on a private session bus: the human form
# names the state, the model and the work done; --json carries every
# property, with the counts of the requests this test made; without a
# daemon it says so and exits 1. Exit 77 without dbus-daemon or the model.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed" >&2; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 (to read the JSON) not installed" >&2; exit 77; }
for b in pagodad pagoda; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-st-XXXXXX")
S=$D/s.sock
DP= BP=
cleanup() {
	[ -n "$DP" ] && kill -KILL "$DP" 2>/dev/null
	[ -n "$BP" ] && kill "$BP" 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
private_session_bus "$D"
# no system bus here, or not this daemon on it: --system fails, auto finds the session one
DBUS_SYSTEM_BUS_ADDRESS=unix:path=$D/no-system-bus
export DBUS_SYSTEM_BUS_ADDRESS

if "$B/pagoda" status --session >"$D/none" 2>&1; then bad "status without a daemon succeeded"; else ok; fi
grep -q "pagodad not found" "$D/none" && ok || bad "unclear message without a daemon: $(cat "$D/none")"

"$B/pagodad" --model "$M" --socket "$S" --threads 2 --bus session --speculative ngram 2>"$D/log" &
DP=$!
i=0
until "$B/pagoda" status --session --json 2>/dev/null | grep -q '"State":"serving"'; do
	i=$((i + 1)); [ $i -gt 300 ] && { bad "pagodad not serving on the bus"; cat "$D/log" >&2; finish; }
	sleep 0.05
done
for n in 16 8; do
	"$B/pagoda" generate --socket "$S" -p "Once upon a time" -n $n --temp 0 >/dev/null || bad "generate"
done

"$B/pagoda" status >"$D/human" 2>&1 && ok || bad "pagoda status: $(cat "$D/human")"
[ -n "${PAGODA_SHOW:-}" ] && cat "$D/human" >&2
for want in "pagodad: serving" "on the session bus" "model     llama (llama" "F32" "context 2048" \
	"backend   cpu (" "2 accepted, 2 finished, 0 failed, 0 cancelled" "24 generated" "prefix hits" \
	"KV blocks" "kv        K f16, V f16; the pool holds" "first token p50" "between tokens p50" \
	"speculate ngram by default"; do
	grep -qF "$want" "$D/human" && ok || bad "status lacks '$want'"
done
"$B/pagoda" status --session --json >"$D/json" && ok || bad "status --json"
python3 - "$D/json" <<'PY' 2>"$D/pyerr" && ok || bad "JSON: $(cat "$D/pyerr")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["Bus"] == "session", j["Bus"]
assert j["State"] == "serving"
assert j["RequestsAccepted"] == 2 and j["RequestsFinished"] == 2, j
assert j["GeneratedTokens"] == 24, j["GeneratedTokens"]
assert j["Architecture"] == "llama" and j["WeightType"] == "F32"
assert j["ContextLength"] == 2048 and j["ParameterCount"] > 0
assert j["Backend"].startswith("cpu (")
assert 0 <= j["PrefixCacheHitRate"] <= 1
assert j["KVBlocksTotal"] > 0 and j["TTFTP50USec"] > 0 and j["UptimeUSec"] > 0
assert j["KVCacheTypeK"] == "f16" and j["KVCacheTypeV"] == "f16", j
assert j["KVTokensTotal"] == 16 * j["KVBlocksTotal"], j
for k in ("RequestsFailed", "RequestsCancelled", "PromptTokens", "KVBlocksUsed", "KVBlocksCached",
          "Preemptions", "OffloadBytesIn", "OffloadBytesOut", "TTFTP99USec", "ITLP50USec", "ITLP99USec",
          "ModelName", "TokensPerSecond", "RequestsRunning", "RequestsWaiting", "Clients", "LoadProgress"):
    assert k in j, k
assert j["Speculative"] == "ngram", j["Speculative"]
assert 0 <= j["SpecAcceptedTokens"] <= j["SpecDraftedTokens"], j
assert 0 <= j["SpecAcceptanceRate"] <= 1 and j["SpecTokensPerPass"] >= 1, j
PY
if "$B/pagoda" status --system >/dev/null 2>&1; then bad "--system found a daemon on a missing bus"; else ok; fi
# busctl sees the same object
if command -v busctl >/dev/null; then
	busctl --user get-property org.pagoda.Daemon1 /org/pagoda/Daemon1 org.pagoda.Daemon1 GeneratedTokens \
		>"$D/busctl" 2>&1 && grep -qx "t 24" "$D/busctl" && ok || bad "busctl: $(cat "$D/busctl")"
fi
stop_bg "$DP" TERM 60; rc=$?
DP=
[ $rc -eq 0 ] && ok || bad "pagodad exit status $rc"
[ $fails -eq 0 ] || cat "$D/log" >&2
finish
