#!/bin/sh
# pagoda-gateway's /metrics beyond the STATS answer: the NVMe tier's and
# speculative decoding's counters, read from pagodad's D-Bus object. A
# pagodad on a private session bus with a tier file and n-gram
# speculation, the gateway on the same bus; requests through the gateway;
# then every pagoda_offload_*, pagoda_spec_*, pagoda_constraint_* and step
# sample, parsed by prometheus_client, equals the daemon's own Stats()
# (busctl), drafts were made, the tier has slots, and the one constrained
# request counts one compile and a mask per token at least. With bus = none the samples are absent.
. "$(dirname "$0")/lib.sh"
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
for b in pagodad pagoda pagoda-gateway; do [ -x "$B/$b" ] || { echo "SKIP: $B/$b not built" >&2; exit 77; }; done
command -v dbus-daemon >/dev/null && command -v busctl >/dev/null ||
	{ echo "SKIP: dbus-daemon or busctl not installed" >&2; exit 77; }
gateway_python
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-gwbus-XXXXXX")
DP= GP= BP=
cleanup() {
	[ -n "$GP" ] && kill -KILL $GP 2>/dev/null
	[ -n "$DP" ] && kill -KILL $DP 2>/dev/null
	[ -n "$BP" ] && kill "$BP" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
private_session_bus "$D"
DBUS_SYSTEM_BUS_ADDRESS=unix:path=$D/no-system-bus
export DBUS_SYSTEM_BUS_ADDRESS

mkdir "$D/tier"
"$B/pagodad" --model "$M" --socket "$D/s.sock" --threads 2 --bus session --speculative ngram \
	--offload-dir "$D/tier" --offload-size 16M 2>"$D/log" &
DP=$!
i=0
until busctl --user call org.pagoda.Daemon1 /org/pagoda/Daemon1 org.pagoda.Daemon1 Stats >/dev/null 2>&1 &&
	"$B/pagoda" ping --socket "$D/s.sock" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 300 ] || alive $DP || i=1000
	[ $i -gt 300 ] && { bad "pagodad did not start on the bus"; cat "$D/log" >&2; finish; }
	sleep 0.1
done
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start_gw() { # BUS
	PORT=$(port)
	"$B/pagoda-gateway" --listen "127.0.0.1:$PORT" --socket "$D/s.sock" --bus "$1" --quiet 2>"$D/gw.log" &
	GP=$!
	i=0
	until curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; do
		i=$((i + 1)); [ $i -gt 200 ] && { bad "gateway did not start: $(cat "$D/gw.log")"; finish; }
		sleep 0.1
	done
}
start_gw session
# a repetitive prompt: n-gram speculation finds drafts in it
for n in 1 2 3; do
	curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"prompt\": \"Once upon a time. Once upon a time. Once upon a time $n\", \"max_tokens\": 48, \"temperature\": 0}" \
		>"$D/c$n" && ok || bad "completion $n"
done
# one constrained request: the pagoda_constraint_* counters
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
	     "response_format": {"type": "json_schema", "json_schema": {"name": "n",
	       "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}}' \
	>"$D/cj" && ok || bad "constrained completion"
curl -sf "http://127.0.0.1:$PORT/metrics" >"$D/metrics" && ok || bad "GET /metrics"
busctl --user call org.pagoda.Daemon1 /org/pagoda/Daemon1 org.pagoda.Daemon1 Stats --json=short >"$D/stats" &&
	ok || bad "busctl Stats"
python3 - "$D/metrics" "$D/stats" "$D/cj" <<'PY' 2>"$D/py" && ok || bad "metrics against Stats(): $(cat "$D/py")"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
samples = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in fam.samples:
        samples[(s.name, s.labels.get("kind", ""))] = s.value
st = {k: v["data"] for k, v in json.load(open(sys.argv[2]))["data"][0].items()}
want = {
    ("pagoda_offload_read_bytes_total", ""): "OffloadBytesIn",
    ("pagoda_offload_written_bytes_total", ""): "OffloadBytesOut",
    ("pagoda_offload_read_blocks_total", ""): "OffloadBlocksIn",
    ("pagoda_offload_written_blocks_total", ""): "OffloadBlocksOut",
    ("pagoda_offload_swap_out_blocks_total", ""): "OffloadSwapOutBlocks",
    ("pagoda_offload_prompt_tokens_total", ""): "OffloadPromptTokens",
    ("pagoda_offload_dropped_writes_total", ""): "OffloadDroppedWrites",
    ("pagoda_offload_errors_total", "checksum"): "OffloadErrorsChecksum",
    ("pagoda_offload_errors_total", "io"): "OffloadErrorsIO",
    ("pagoda_offload_slots", ""): "OffloadSlotsTotal",
    ("pagoda_offload_slots_used", ""): "OffloadSlotsUsed",
    ("pagoda_offload_disabled", ""): "OffloadDisabled",
    ("pagoda_spec_draft_tokens_total", ""): "SpecDraftedTokens",
    ("pagoda_spec_accepted_tokens_total", ""): "SpecAcceptedTokens",
    ("pagoda_prefill_tokens_total", ""): "PrefillTokens",
    ("pagoda_decode_tokens_total", ""): "DecodeTokens",
    ("pagoda_steps_total", ""): "Steps",
    ("pagoda_constraint_requests_total", ""): "ConstraintRequests",
    ("pagoda_constraint_masks_total", ""): "ConstraintMasks",
    ("pagoda_constraint_compile_seconds_total", ""): "ConstraintCompileUSec",
    ("pagoda_constraint_mask_seconds_total", ""): "ConstraintMaskUSec",
    ("pagoda_constraint_wait_seconds_total", ""): "ConstraintWaitUSec",
}
bad = []
for (name, kind), key in want.items():
    scale = 1e-6 if key.endswith("USec") else 1
    if (name, kind) not in samples:
        bad.append(f"{name}{{{kind}}} missing")
    elif abs(samples[(name, kind)] - st[key] * scale) > 1e-9 * max(1, st[key]):
        bad.append(f"{name}{{{kind}}} {samples[(name, kind)]} != Stats() {key} {st[key]}")
cj = json.load(open(sys.argv[3]))
ntok = cj["usage"]["completion_tokens"]
if cj["choices"][0]["finish_reason"] == "stop":
    json.loads(cj["choices"][0]["text"])  # raises: the test fails
if st["ConstraintRequests"] != 1:
    bad.append(f"ConstraintRequests {st['ConstraintRequests']} != 1")
if not st["ConstraintMasks"] >= ntok >= 1:
    bad.append(f"ConstraintMasks {st['ConstraintMasks']} < {ntok} tokens sampled under the constraint")
if not (st["ConstraintMaskUSec"] > 0 and st["ConstraintCompileUSec"] > 0):
    bad.append("constraint times are zero")
if samples.get(("pagoda_bus_up", "")) != 1:
    bad.append("pagoda_bus_up is not 1")
if not st["SpecDraftedTokens"] > 0:
    bad.append("no drafts: the speculation counters were not exercised")
if not st["OffloadSlotsTotal"] > 0:
    bad.append("the tier has no slots")
if not samples.get(("pagoda_requests_finished_total", "")) == 4:
    bad.append("pagoda_requests_finished_total is not 4")
if bad:
    sys.exit("; ".join(bad))
PY
stop_bg $GP TERM 20 && ok || bad "gateway exit status"
GP=
# without a bus: none of the bus's samples
start_gw none
curl -sf "http://127.0.0.1:$PORT/metrics" >"$D/metrics2" && ok || bad "GET /metrics (bus none)"
grep -q '^pagoda_up' "$D/metrics2" && ! grep -q '^pagoda_bus_up\|^pagoda_offload\|^pagoda_spec' "$D/metrics2" &&
	ok || bad "bus = none still shows the bus's samples"
stop_bg $GP TERM 20 && ok || bad "gateway exit status"
GP=
stop_bg $DP TERM 60 && ok || bad "pagodad exit status"
DP=
finish
