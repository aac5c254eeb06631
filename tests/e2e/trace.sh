#!/bin/sh
# pagoda-trace on a real pagodad: a known workload (R requests, T tokens,
# their finish reasons and cached prompt tokens from `pagoda generate
# --timings`) and the --json intervals, summed, count exactly that; TTFT,
# queue and request histograms hold R samples, the inter-token one T - R.
# Then io_uring: a helper doing 2N+1 io_uring requests, traced by its pid
# with --io-only, shows 2N+1 completions. Then the errors: a process with
# no probes, no such process, not root, a kernel without BTF.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then
	echo "SKIP: pagoda-trace needs root" >&2
	exit 77
fi
if [ ! -r /sys/kernel/btf/vmlinux ]; then
	echo "SKIP: this kernel has no BTF (/sys/kernel/btf/vmlinux)" >&2
	exit 77
fi
need_testdata models/stories260K.gguf
M=$T/models/stories260K.gguf
for b in pagoda-trace pagodad pagoda tests/helpers/uring_io; do
	[ -x "$B/$b" ] || { echo "FAIL: $B/$b not built" >&2; exit 1; }
done
D=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-trace-XXXXXX")
S=$D/s.sock
"$B/pagodad" --model "$M" --socket "$S" --threads 2 2>"$D/log" &
DP=$!
TP=
cleanup() {
	[ -n "$TP" ] && kill -KILL "$TP" 2>/dev/null
	kill -KILL $DP 2>/dev/null
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
i=0
while ! "$B/pagoda" ping --socket "$S" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 400 ] && { echo "pagodad did not start" >&2; cat "$D/log" >&2; exit 1; }
	sleep 0.05
done

# trace_start ARGS...: pagoda-trace ARGS in the background ($TP), its
# stdout in $D/out, stderr in $D/err, once it says it is tracing.
trace_start() {
	: >"$D/err" # before the job starts: the last one's line must not match
	"$B/pagoda-trace" "$@" >"$D/out" 2>"$D/err" &
	TP=$!
	if ! wait_match "$D/err" "^Tracing" 60; then
		bad "pagoda-trace $* did not attach in 60 s: $(cat "$D/err")"
		finish
	fi
}

# gen ARGS...: one request, its --timings line appended to $D/timings
gen() {
	"$B/pagoda" generate --socket "$S" --temp 0 --ids --timings "$@" >/dev/null 2>>"$D/timings" ||
		bad "pagoda generate $* failed"
}

# ---- a daemon's requests, counted -------------------------------------------
trace_start -p $DP --json --interval 0.5
long="Once upon a time there was a little girl named Lily. She loved to play outside"
gen -p "$long" -n 40
gen -p "$long" -n 40 # its first blocks are cached now: a prefix hit
gen -p "Tom" --stop "."
gen -p "Tom and Sue" -n 60
gen -p "The little dog was sad because" -n 30 &
gen -p "A" -n 25
wait $!
sleep 0.3
stop_bg $TP INT 30; rc=$?
TP=
[ $rc -eq 0 ] || bad "pagoda-trace exit status $rc after SIGINT: $(cat "$D/err")"
# what the daemon says it did, from the --timings lines
R=$(grep -c "^pagoda: prompt" "$D/timings")
set -- $(sed -n 's/^pagoda: prompt \([0-9]*\) tokens (\([0-9]*\) cached) | generated \([0-9]*\) tokens.*| \([a-z]*\)$/\1 \2 \3 \4/p' "$D/timings" |
	awk '{ p += $1; c += $2; g += $3; hits += $2 > 0; r[$4]++; comp += $1 - $2 + $3 - 1 }
	     END { print p + 0, c + 0, g + 0, hits + 0, r["eos"] + 0, r["length"] + 0, r["stop"] + 0, comp + 0 }')
want="R=$R cached=$2 T=$3 hits=$4 eos=$5 length=$6 stop=$7 computed=$8"
[ "$R" = 6 ] && [ "$4" -ge 1 ] && [ "$7" -ge 1 ] ||
	bad "the workload is not the one meant: $want"
got=$(python3 - "$D/out" "$DP" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
pid = int(sys.argv[2])
assert lines and lines[-1]["final"] and not any(l["final"] for l in lines[:-1]), "one final line, last"
assert all(l["pids"] == [pid] and l["usdt"] and l["io"] for l in lines), "pids, usdt, io"
def total(get):
    return sum(get(l) for l in lines)
req = lambda k: total(lambda l: l["requests"][k])
hist = lambda k: total(lambda l: l["hist_us"][k]["count"])
hsum = lambda k: total(lambda l: l["hist_us"][k]["sum_ns"])
buckets = lambda k: total(lambda l: sum(b[2] for b in l["hist_us"][k]["buckets"]))
for k in ("queue", "ttft", "itl", "request", "step", "forward"):
    assert hist(k) == buckets(k), k + ": buckets do not add up to the count"
R = req("done")
computed = total(lambda l: l["steps"]["tokens"])
if req("preempted"):
    computed = -1  # recomputed positions: no exact figure
print("R=%d cached=%d T=%d hits=%d eos=%d length=%d stop=%d computed=%d" % (
    R, req("cached_tokens"), total(lambda l: l["tokens"]), total(lambda l: l["kv"]["prefix_hits"]),
    req("eos"), req("length"), req("stop"), computed))
same = [req(k) for k in ("submitted", "admitted", "first_tokens")] + [hist(k) for k in ("queue", "ttft", "request")]
assert same == [R] * 6, "submitted, admitted, first tokens, queue, ttft, request: %s" % same
T = total(lambda l: l["tokens"])
assert req("generated") == T, "generated %d != tokens %d" % (req("generated"), T)
assert hist("itl") == T - R, "itl %d != T - R = %d" % (hist("itl"), T - R)
assert req("cached_tokens") == total(lambda l: l["kv"]["prefix_hit_tokens"]), "prefix-hit tokens"
steps = total(lambda l: l["steps"]["count"])
assert steps > 0 and hist("step") == steps and hist("forward") == steps, "steps"
for k in ("queue", "ttft", "itl", "request", "step", "forward"):
    assert hsum(k) > 0, k + ": no time"
assert total(lambda l: l["io_uring"]["completed"]) <= total(lambda l: l["io_uring"]["submitted"])
EOF
) || bad "pagoda-trace's JSON: $(cat "$D/out")"
[ "$got" = "$want" ] && ok || bad "pagoda-trace counted $got, the daemon did $want"

# --duration ends it, every --interval a line, without a signal
trace_start -p $DP --json --no-io --duration 1.2 --interval 0.5
i=0
while alive $TP && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
stop_bg $TP KILL 5; rc=$?
TP=
if [ $rc -eq 0 ] && [ "$(wc -l <"$D/out")" = 3 ] && tail -n1 "$D/out" | grep -q '"final":true,' &&
	grep -q '"io":false' "$D/out"; then ok; else
	bad "--duration 1.2 --interval 0.5: exit $rc, $(wc -l <"$D/out") lines: $(cat "$D/out" "$D/err")"
fi

# the text output: bcc's histogram rows
trace_start -p $DP --interval 30
gen -p "Once upon a time" -n 8
stop_bg $TP INT 30; rc=$?
TP=
if [ $rc -eq 0 ] && grep -q "^requests: 1 submitted, 1 admitted, 1 done" "$D/out" &&
	grep -q "^time to first token.*: 1, mean" "$D/out" && grep -Eq "^ +[0-9]+ -> [0-9]+ : 1 +\|\*{40}\|$" "$D/out"
then ok; else bad "text output: exit $rc: $(cat "$D/out" "$D/err")"; fi

# without -p: every running pagodad, ours among them
"$B/pagoda-trace" --json --duration 0.3 >"$D/all" 2>"$D/err"; rc=$?
if [ $rc -eq 0 ] && grep -Eq "\"pids\":\[([0-9]+,)*$DP[],]" "$D/all"; then ok; else
	bad "pagoda-trace without -p: exit $rc: $(cat "$D/all" "$D/err")"
fi

# ---- io_uring, by pid ---------------------------------------------------------
N=16
mkfifo "$D/go"
"$B/tests/helpers/uring_io" "$D/data" $N <"$D/go" >"$D/io_done" &
HP=$!
exec 7>"$D/go"
trace_start -p $HP --io-only --json --interval 0.5
echo go >&7
exec 7>&-
wait $HP || bad "uring_io failed"
# the traced process exited: pagoda-trace prints its last interval and ends
i=0
while alive $TP && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
stop_bg $TP KILL 5; rc=$?
TP=
n=$(python3 - "$D/out" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines[-1]["final"] and all(not l["usdt"] and l["io"] for l in lines)
sub = sum(l["io_uring"]["submitted"] for l in lines)
done = sum(l["io_uring"]["completed"] for l in lines)
h = [l["hist_us"]["io_uring"] for l in lines]
assert sub == done == sum(x["count"] for x in h) == sum(b[2] for x in h for b in x["buckets"])
assert sum(x["sum_ns"] for x in h) > 0
print(done)
EOF
)
if [ $rc -eq 0 ] && [ "$n" = $((2 * N + 1)) ] && [ "$(cat "$D/io_done")" = "$n" ]; then ok; else
	bad "io_uring: exit $rc, want $((2 * N + 1)) completions, helper says $(cat "$D/io_done"), got '$n': $(cat "$D/out" "$D/err")"
fi

# ---- errors ---------------------------------------------------------------------
# expect_error WHAT REGEX CMD...: CMD exits 1 with REGEX on stderr, nothing on stdout
expect_error() {
	_what=$1 _re=$2
	shift 2
	"$@" >"$D/out" 2>"$D/err"; _rc=$?
	if [ $_rc -eq 1 ] && grep -q "$_re" "$D/err" && [ ! -s "$D/out" ]; then ok; else
		bad "$_what: exit $_rc, stderr: $(cat "$D/err") stdout: $(head -c 300 "$D/out")"
	fi
}
expect_error "a process with no probes" "pid $$ (.*) has no pagoda probes" "$B/pagoda-trace" -p $$ --duration 1
sleep 0 &
gone=$!
wait $gone
expect_error "no such process" "pid $gone: no such process" "$B/pagoda-trace" -p $gone --duration 1
expect_error "a bad interval" "wants a positive number" "$B/pagoda-trace" -p $DP --interval 0
if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
	chmod 755 "$D"
	cp "$B/pagoda-trace" "$D/pagoda-trace"
	expect_error "not root" "needs root" setpriv --reuid=nobody --regid=nogroup --clear-groups \
		--inh-caps=-all "$D/pagoda-trace" -p $DP --duration 1
else
	echo "note: no setpriv or no user nobody: the not-root case is not checked" >&2
fi
# a kernel without BTF, as pagoda-trace sees it: /sys/kernel/btf hidden
# under an empty tmpfs in a mount namespace of its own
if unshare -m sh -c 'mount -t tmpfs none /sys/kernel/btf' 2>/dev/null; then
	expect_error "no BTF" "this kernel has no BTF" unshare -m sh -c \
		'mount -t tmpfs none /sys/kernel/btf && exec "$0" "$@"' "$B/pagoda-trace" -p $DP --duration 1
else
	echo "note: no mount namespace here: the no-BTF case is not checked" >&2
fi
[ "$fails" -eq 0 ] || cat "$D/log" >&2
finish
