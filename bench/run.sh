#!/bin/sh
# bench/run.sh — `make bench`: pagoda against llama.cpp on the same GGUF
# files and the same threads, the engines alternating (A B A B ...) so that
# both see the same machine load; ratios are medians of per-round ratios.
#
# Environment:
#   BENCH_QUICK=1       a short smoke run: tiny models, one round, small sizes,
#                       never builds llama.cpp (uses the peer if it is built)
#   BENCH_ROUNDS=N      rounds of the alternating prefill/decode pairs (default 3)
#   BENCH_THREADS=N     threads for both engines (default 2)
#   LLAMA_CPP_BIN=DIR   use llama-bench / llama-batched-bench from DIR instead
#                       of the peer mk/peer.sh builds (llama.cpp from the PyPI
#                       sdist of llama-cpp-python, pinned there)
#   BENCH_NO_LLAMA=1    measure pagoda alone
#   BENCH_BACKEND=NAME  pagoda's backend (default cpu: the figures set it
#                       against llama.cpp's CPU backend)
#   BENCH_BUILD_LLAMA=0 do not build the peer (use it if it is built)
#   BENCH_ONLY="pp gen mm sweep prefix ipc gateway"
#                       the sections to run (default all): prefill/decode,
#                       daemon against in-process, mm_decode, the concurrency
#                       sweep, shared prefix, IPC, the HTTP gateway against the
#                       rings and llama-server (bench/gateway.sh, its GW_*
#                       variables) (to re-measure one section);
#                       "kvq" (not among the default ones): decode after a long
#                       prompt (BENCH_KVQ_PP, default 2000) with f16, q8_0 and
#                       q4_0 KV caches (docs/kv-quant.md)
#   BENCH_PP, BENCH_TG, BENCH_SWEEP ("1 4 16 64"), BENCH_SW_PP, BENCH_SW_TG,
#   BENCH_SW_ROUNDS, BENCH_GEN_PAIRS, BENCH_TT_PAIRS, BENCH_PFX, BENCH_PFX_SUF, BENCH_PFX_N,
#   BENCH_PFX_ROUNDS:
#                       override the sizes (for a machine too loaded for the defaults;
#                       the log prints the sizes used)
#
# Output: this log (also in build/bench/results-*.txt) and every raw
# measurement as JSON lines in build/bench/results-*.jsonl.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
B=${PAGODA_BUILD:-$ROOT/build}
QUICK=${BENCH_QUICK:-0}
BACKEND=${BENCH_BACKEND:-cpu}
T=${BENCH_THREADS:-2}
W=$B/bench
mkdir -p "$W" "$B/models"
STAMP=$(date +%Y%m%d-%H%M%S)
RES=$W/results-$STAMP.txt
JS=$W/results-$STAMP.jsonl
: >"$RES"
: >"$JS"
ln -sf "results-$STAMP.txt" "$W/latest.txt"
ln -sf "results-$STAMP.jsonl" "$W/latest.jsonl"
T_START=$(date +%s)

say() { printf '%s\n' "$*" | tee -a "$RES"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
elapsed() { echo $(($(date +%s) - T_START)); }
record() { printf '%s\n' "$*" >>"$JS"; }
# jget KEY JSON: a top-level number; jsub OBJ KEY JSON: a number inside "OBJ":{...}
jget() { printf '%s' "$2" | sed -n "s/.*\"$1\": *\([-0-9.e+]*\).*/\1/p" | head -n1; }
jsub() { printf '%s' "$3" | sed -n "s/.*\"$1\":{[^}]*\"$2\":\([-0-9.e+]*\).*/\1/p" | head -n1; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "NA"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a=="" || b=="" || a=="NA" || b=="NA" || b+0==0) print "NA"; else printf "%.3f\n", a/b }'; }
maxof() { awk -v a="$1" -v b="$2" 'BEGIN { if (a=="" || a=="NA") print b; else if (b=="" || b=="NA") print a; else print (a+0>b+0?a:b) }'; }
want() { case " ${BENCH_ONLY:-pp gen mm sweep prefix ipc gateway} " in *" $1 "*) return 0 ;; esac; return 1; }
fmt() { awk -v a="$1" 'BEGIN { if (a=="" || a=="NA") print "NA"; else printf "%.2f\n", a }'; }

for bin in pagoda pagodad pagoda-bench pagoda-mkmodel; do
	[ -x "$B/$bin" ] || { echo "bench: $B/$bin is missing: run make first" >&2; exit 1; }
done

# ---- settings ---------------------------------------------------------------
if [ "$QUICK" = 1 ]; then
	ROUNDS=1 PP=64 TG=32 SWEEP="1 4" SW_PP=16 SW_TG=16 SW_ROUNDS=1 GEN_PAIRS=2 TT_PAIRS=1
	PFX=256 PFX_SUF=16 PFX_N=4 PFX_C=2 RTT_N=2000 ST_K=16 ST_TG=64 PFX_ROUNDS=1
else
	ROUNDS=3 PP=512 TG=128 SWEEP="1 4 16 64" SW_PP=64 SW_TG=64 SW_ROUNDS=3 GEN_PAIRS=8 TT_PAIRS=2
	PFX=384 PFX_SUF=16 PFX_N=6 PFX_C=2 RTT_N=20000 ST_K=32 ST_TG=256 PFX_ROUNDS=2
fi

ROUNDS=${BENCH_ROUNDS:-$ROUNDS} PP=${BENCH_PP:-$PP} TG=${BENCH_TG:-$TG} SWEEP=${BENCH_SWEEP:-$SWEEP}
SW_PP=${BENCH_SW_PP:-$SW_PP} SW_TG=${BENCH_SW_TG:-$SW_TG} SW_ROUNDS=${BENCH_SW_ROUNDS:-$SW_ROUNDS}
GEN_PAIRS=${BENCH_GEN_PAIRS:-$GEN_PAIRS} TT_PAIRS=${BENCH_TT_PAIRS:-$TT_PAIRS}
PFX=${BENCH_PFX:-$PFX} PFX_SUF=${BENCH_PFX_SUF:-$PFX_SUF} PFX_N=${BENCH_PFX_N:-$PFX_N} PFX_ROUNDS=${BENCH_PFX_ROUNDS:-$PFX_ROUNDS}
say "# pagoda make bench, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
say "cpu: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n1), $(nproc) cores; threads $T; quick=$QUICK, rounds $ROUNDS; prefill $PP, decode $TG, sweep \"$SWEEP\" x ($SW_PP + $SW_TG)"
say "git: $(git rev-parse --short HEAD 2>/dev/null || echo ?) $(git status --porcelain 2>/dev/null | grep -q . && echo '(uncommitted changes)')"
say "sections: ${BENCH_ONLY:-all}; load at start: $(loadavg)"

# ---- models -----------------------------------------------------------------
mkmodel() { # OUT ARGS...
	out=$1
	shift
	[ -s "$out" ] && return 0
	say "making $out"
	"$B/pagoda-mkmodel" "$@" -o "$out.tmp" >/dev/null 2>>"$W/mkmodel.log" && mv "$out.tmp" "$out"
}
if [ "$QUICK" = 1 ]; then
	M8=$B/models/tiny-q8_0.gguf M4=$B/models/tiny-q4_0.gguf
	mkmodel "$M8" --preset tiny --type Q8_0 || exit 1
	mkmodel "$M4" --preset tiny --type Q4_0 || exit 1
else
	M8=$B/models/tinyllama-1.1b-q8_0.gguf M4=$B/models/tinyllama-1.1b-q4_0.gguf
	mkmodel "$M8" --preset tinyllama-1.1b --type Q8_0 || exit 1
	mkmodel "$M4" --preset tinyllama-1.1b --type Q4_0 || exit 1
fi
MT=$B/models/tiny-f32.gguf
mkmodel "$MT" --preset tiny || exit 1

# ---- llama.cpp: the peer (mk/peer.sh) -------------------------------------------
LLAMA_BIN= PEER_VERSION=
if [ "${BENCH_NO_LLAMA:-0}" != 1 ]; then
	if [ -n "${LLAMA_CPP_BIN:-}" ]; then
		if [ -x "$LLAMA_CPP_BIN/llama-bench" ] && [ -x "$LLAMA_CPP_BIN/llama-batched-bench" ]; then
			LLAMA_BIN=$LLAMA_CPP_BIN
			PEER_VERSION="llama.cpp from LLAMA_CPP_BIN"
		else
			say "llama.cpp: LLAMA_CPP_BIN=$LLAMA_CPP_BIN lacks llama-bench or llama-batched-bench: ignored"
		fi
	elif [ "$QUICK" = 1 ] || [ "${BENCH_BUILD_LLAMA:-1}" = 0 ]; then
		LLAMA_BIN=$(sh mk/peer.sh built) ||
			say "llama.cpp: the peer is not built and this run builds nothing (sh mk/peer.sh builds it)"
	else
		say "llama.cpp: the peer, built by mk/peer.sh if it is not yet (once; 10-20 minutes on 2 cores)"
		LLAMA_BIN=$(sh mk/peer.sh 2>"$W/peer.log") || {
			LLAMA_BIN=
			say "llama.cpp: the peer did not build (see $W/peer.log)"
		}
	fi
	[ -n "$LLAMA_BIN" ] && [ -z "$PEER_VERSION" ] && PEER_VERSION=$(sh mk/peer.sh version)
	[ -n "$LLAMA_BIN" ] &&
		PEER_VERSION="$PEER_VERSION; llama-bench --version: $("$LLAMA_BIN/llama-bench" --version 2>&1 | head -n1)"
fi
say "llama.cpp: ${LLAMA_BIN:-none}${PEER_VERSION:+ ($PEER_VERSION)}"

# ---- daemons ----------------------------------------------------------------
DAEMON_PIDS=
SOCKDIR=$(mktemp -d "${TMPDIR:-/tmp}/pagoda-bench.XXXXXX")
cleanup() {
	for p in $DAEMON_PIDS; do kill -KILL "$p" 2>/dev/null; done
	for p in $DAEMON_PIDS; do wait "$p" 2>/dev/null; done
	rm -rf "$SOCKDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start_daemon() { # NAME MODEL FLAGS...: sets SOCK
	name=$1 model=$2
	shift 2
	SOCK=$SOCKDIR/$name.sock
	"$B/pagodad" --model "$model" --socket "$SOCK" --backend "$BACKEND" "$@" 2>"$W/pagodad-$name.log" &
	DAEMON_PIDS="$DAEMON_PIDS $!"
	i=0
	until "$B/pagoda" ping --socket "$SOCK" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -gt 600 ] || ! kill -0 $! 2>/dev/null; then
			say "pagodad $name did not start (see $W/pagodad-$name.log)"
			exit 1
		fi
		sleep 0.2
	done
	# One small request first: the first forward pass faults the mapped
	# weights in, which is start-up cost, not serving cost.
	"$B/pagoda-bench" load --socket "$SOCK" -q -c 1 -n 1 -p 8 -o 2 >/dev/null 2>&1
}

# ---- memory bandwidth ---------------------------------------------------------
cc -O2 -march=native -pthread -o "$W/membw" bench/membw.c 2>>"$W/membw-build.log" ||
	cc -O2 -pthread -o "$W/membw" bench/membw.c
BW=NA
PROBE_MIB=$([ "$QUICK" = 1 ] && echo 256 || echo 1024)
if [ -x "$W/membw" ]; then
	MB=$("$W/membw" "$T" "$PROBE_MIB" 10)
	record "{\"what\":\"membw\",\"load\":\"$(loadavg)\",\"r\":$MB}"
	BW=$(jget best_gbs "$MB")
	say "memory bandwidth, $T threads reading: best $(fmt "$BW") GB/s (plain $(fmt "$(jget best_plain_gbs "$MB")"), fetching ahead $(fmt "$(jget best_ahead_gbs "$MB")")), median $(fmt "$(jget median_gbs "$MB")") GB/s (load $(loadavg))"
fi

# ---- prompt of exactly PP tokens (with BOS) for pagoda run / generate ----------
make_prompt() { # MODEL N OUT
	k=$2
	for _ in 1 2 3 4 5 6; do
		awk -v k="$k" 'BEGIN { for (i = 0; i < k; i++) printf " the"; printf "\n" }' >"$3"
		c=$("$B/pagoda" tokenize -m "$1" --bos <"$3" | wc -w)
		[ "$c" -eq "$2" ] && return 0
		k=$((k - (c - $2)))
		[ $k -lt 1 ] && k=1
	done
	return 0
}

# ---- prefill and decode: pagoda run, pagoda generate, llama-bench ------------------
pagoda_run() { # MODEL PROMPTFILE -> "n_prompt pp_tok_s n_gen tg_tok_s ttft_ms"
	"$B/pagoda" run --backend "$BACKEND" -m "$1" -f "$2" -n "$TG" -t "$T" --temp 0 --ids 2>&1 >/dev/null |
		sed -n 's/.*prompt \([0-9]*\) tokens, \([0-9.]*\) tok\/s | generated \([0-9]*\) tokens, \([0-9.]*\) tok\/s | TTFT \([0-9.]*\) ms.*/\1 \2 \3 \4 \5/p'
}
pagoda_gen() { # SOCK PROMPTFILE -> "n_prompt n_gen tg_tok_s ttft_ms"
	"$B/pagoda" generate --socket "$1" -f "$2" -n "$TG" --temp 0 --ids --timings 2>&1 >/dev/null |
		sed -n 's/.*prompt \([0-9]*\) tokens ([0-9]* cached) | generated \([0-9]*\) tokens, \([0-9.]*\) tok\/s | TTFT \([0-9.]*\) ms.*/\1 \2 \3 \4/p'
}
pagoda_run_short() { # MODEL -> "tg_tok_s": decode from an (almost) empty context
	"$B/pagoda" run --backend "$BACKEND" -m "$1" -p "Once upon a time" -n "$TG" -t "$T" --temp 0 --ids 2>&1 >/dev/null |
		sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p'
}
llama_bench() { # MODEL -> "pp_tok_s tg_tok_s tg_at_depth_PP_tok_s"
	out=$("$LLAMA_BIN/llama-bench" -m "$1" -t "$T" -p "$PP" -n "$TG" -r 1 -o jsonl 2>>"$W/llama-bench.err")
	outd=$("$LLAMA_BIN/llama-bench" -m "$1" -t "$T" -p 0 -n "$TG" -d "$PP" -r 1 -o jsonl 2>>"$W/llama-bench.err")
	record "{\"what\":\"llama-bench\",\"model\":\"$1\",\"load\":\"$(loadavg)\"}"
	printf '%s\n%s\n' "$out" "$outd" >>"$JS"
	pp=$(printf '%s\n' "$out" | grep "\"n_prompt\": *$PP, *\"n_gen\": *0" | head -n1)
	tg=$(printf '%s\n' "$out" | grep "\"n_prompt\": *0, *\"n_gen\": *$TG" | head -n1)
	tgd=$(printf '%s\n' "$outd" | grep "\"n_gen\": *$TG" | head -n1)
	echo "$(jget avg_ts "$pp") $(jget avg_ts "$tg") $(jget avg_ts "$tgd")"
}
start_daemon nocache "$M8" --threads "$T" --max-seqs 64 --no-prefix-cache
SOCK_NOCACHE=$SOCK
start_daemon cache "$M8" --threads "$T" --max-seqs 64
SOCK_CACHE=$SOCK

SUMMARY=$W/summary-$STAMP.txt
echo "peer ${PEER_VERSION:-none}" >"$SUMMARY"
for M in "$M8" "$M4"; do
	want pp || break
	mname=$(basename "$M" .gguf)
	PF=$W/prompt-$mname.txt
	make_prompt "$M" "$PP" "$PF"
	GIB=$(awk -v s="$(stat -c %s "$M")" 'BEGIN { printf "%.2f", s / 1073741824 }')
	say ""
	say "## prefill ($PP-token prompt) and decode ($TG tokens, from an empty context and after the prompt), $mname ($GIB GiB), $T threads, $ROUNDS rounds"
	say "round | load | pagoda run pp / tg@0 / tg@$PP | llama-bench pp / tg@0 / tg@$PP"
	: >"$W/rounds-$mname.txt"
	r=1
	while [ $r -le "$ROUNDS" ]; do
		ld=$(loadavg | cut -d' ' -f1)
		set -- $(pagoda_run "$M" "$PF")
		p_np=${1:-NA} p_pp=${2:-NA} p_ng=${3:-NA} p_tg=${4:-NA} p_ttft=${5:-NA}
		# The VM's bandwidth drifts by a third within an hour, and by as
		# much within a minute, so each decode is also set against probes
		# taken right before and right after it, the higher of the two.
		p_bw_before=NA p_bw_after=NA
		[ "$BW" != NA ] && p_bw_before=$(jget best_gbs "$("$W/membw" "$T" "$PROBE_MIB" 4)")
		p_tg0=$(pagoda_run_short "$M")
		p_tg0=${p_tg0:-NA}
		[ "$BW" != NA ] && p_bw_after=$(jget best_gbs "$("$W/membw" "$T" "$PROBE_MIB" 4)")
		p_bw=$(maxof "$p_bw_before" "$p_bw_after")
		l_pp=NA l_tg=NA l_tgd=NA
		if [ -n "$LLAMA_BIN" ]; then
			set -- $(llama_bench "$M")
			l_pp=${1:-NA} l_tg=${2:-NA} l_tgd=${3:-NA}
		fi
		record "{\"what\":\"pp_tg\",\"model\":\"$mname\",\"round\":$r,\"load\":\"$ld\",\"pagoda_run\":{\"n_prompt\":\"$p_np\",\"pp\":\"$p_pp\",\"n_gen\":\"$p_ng\",\"tg\":\"$p_tg\",\"tg0\":\"$p_tg0\",\"ttft_ms\":\"$p_ttft\",\"membw_before_tg0\":\"$p_bw_before\",\"membw_after_tg0\":\"$p_bw_after\"},\"llama_bench\":{\"pp\":\"$l_pp\",\"tg0\":\"$l_tg\",\"tg\":\"$l_tgd\"}}"
		say "$r | $ld | $(fmt "$p_pp") / $(fmt "$p_tg0") / $(fmt "$p_tg") (prompt $p_np, gen $p_ng) | $(fmt "$l_pp") / $(fmt "$l_tg") / $(fmt "$l_tgd")"
		# columns: pagoda pp tg0, llama pp tg0, their ratios, pagoda tg, llama tg at depth, its ratio, probe GB/s
		echo "$p_pp $p_tg0 $l_pp $l_tg $(ratio "$p_pp" "$l_pp") $(ratio "$p_tg0" "$l_tg") $p_tg $l_tgd $(ratio "$p_tg" "$l_tgd") ${p_bw:-NA}" >>"$W/rounds-$mname.txt"
		r=$((r + 1))
	done
	col() { awk -v c="$1" '$c != "NA" { print $c }' "$W/rounds-$mname.txt" | median; }
	mp=$(col 1) mt=$(col 2) lp=$(col 3) lt=$(col 4) rp=$(col 5) rt=$(col 6)
	mtd=$(col 7) ltd=$(col 8) rtd=$(col 9)
	say "median pagoda: prefill $(fmt "$mp") tok/s, decode $(fmt "$mt") tok/s (after the prompt: $(fmt "$mtd")); llama.cpp (llama-bench): prefill $(fmt "$lp"), decode $(fmt "$lt") (after the prompt, llama-bench -d $PP: $(fmt "$ltd"))"
	say "median per-round ratios pagoda / llama.cpp: prefill ${rp}x (target >= 1.5), decode ${rt}x, decode after $PP tokens ${rtd}x (target >= 1.1)"
	pfrac=NA
	if [ "$BW" != NA ]; then
		# Bytes one decode step reads: every weight but the token embedding table (one row of it).
		WB=$("$B/pagoda" info -m "$M" --tensors 2>/dev/null | awk '/token_embd/ { next } { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $(i+1) == "bytes") s += $i } END { print s + 0 }')
		[ "${WB:-0}" -gt 0 ] 2>/dev/null || WB=$(stat -c %s "$M")
		lim=$(awk -v bw="$BW" -v wb="$WB" 'BEGIN { printf "%.2f", bw * 1e9 / wb }')
		frac=$(awk -v t="$mt" -v l="$lim" 'BEGIN { if (t == "NA") print "NA"; else printf "%.1f", 100 * t / l }')
		lfrac=$(awk -v t="$lt" -v l="$lim" 'BEGIN { if (t == "NA") print "NA"; else printf "%.1f", 100 * t / l }')
		say "bandwidth limit: $(fmt "$BW") GB/s / $(awk -v w="$WB" 'BEGIN { printf "%.3f", w / 1e9 }') GB per token = $lim tok/s; pagoda decode reaches ${frac}% (target >= 90% for Q8_0), llama.cpp ${lfrac}%"
		pfrac=$(awk -v wb="$WB" '$2 != "NA" && $10 != "NA" && $10 > 0 { printf "%.1f\n", 100 * $2 * wb / ($10 * 1e9) }' "$W/rounds-$mname.txt" | median)
		say "  paired: each round's decode against the best of 4 probe passes just before it and 4 just after (half of them fetching ahead), median ${pfrac}% (probes $(awk '$10 != "NA" { printf "%s ", $10 }' "$W/rounds-$mname.txt")GB/s)"
	fi
	echo "$mname pp_ratio=$rp tg_ratio=$rt tg_depth_ratio=$rtd pagoda_pp=$mp pagoda_tg=$mt llama_pp=$lp llama_tg=$lt bw_frac_paired=${pfrac:-NA}" >>"$SUMMARY"
done

# ---- the quantized KV cache (BENCH_ONLY=kvq): decode after a long prompt -------------
# Decode reads the whole cache every token: with f16, q8_0 and q4_0 caches,
# pagoda run and llama-bench -fa 1 -ctk/-ctv alternate, decode tok/s after
# a KVQ_PP-token prompt (default 2000) on the Q8_0 model.
if want kvq; then
	KVQ_PP=${BENCH_KVQ_PP:-2000}
	PFQ=$W/prompt-kvq.txt
	make_prompt "$M8" "$KVQ_PP" "$PFQ"
	say ""
	say "## decode ($TG tokens) after a $KVQ_PP-token prompt by KV cache type, $(basename "$M8" .gguf), $T threads, $ROUNDS rounds"
	say "round | load | cache | pagoda run tg | llama-bench -fa 1 tg"
	for r in $(seq 1 "$ROUNDS"); do
		for ct in f16 q8_0 q4_0; do
			ld=$(loadavg | cut -d' ' -f1)
			p=$("$B/pagoda" run --backend "$BACKEND" -m "$M8" -f "$PFQ" -n "$TG" -t "$T" --temp 0 --ids -c $((KVQ_PP + TG + 16)) \
				-ctk $ct -ctv $ct 2>&1 >/dev/null | sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
			l=NA
			if [ -n "$LLAMA_BIN" ]; then
				out=$("$LLAMA_BIN/llama-bench" -m "$M8" -t "$T" -p 0 -n "$TG" -d "$KVQ_PP" -fa 1 -ctk $ct -ctv $ct -r 1 \
					-o jsonl 2>>"$W/llama-bench.err")
				l=$(jget avg_ts "$(printf '%s\n' "$out" | grep "\"n_gen\": *$TG" | head -n1)")
			fi
			record "{\"what\":\"kvq_tg\",\"cache\":\"$ct\",\"round\":$r,\"load\":\"$ld\",\"pagoda\":\"${p:-NA}\",\"llama\":\"${l:-NA}\"}"
			say "$r | $ld | $ct | $(fmt "${p:-NA}") | $(fmt "${l:-NA}")"
			echo "$ct ${p:-NA} ${l:-NA} $(ratio "${p:-NA}" "${l:-NA}")" >>"$W/kvq-$STAMP.txt"
		done
	done
	for ct in f16 q8_0 q4_0; do
		kc() { awk -v t="$ct" -v c="$1" '$1 == t && $c != "NA" { print $c }' "$W/kvq-$STAMP.txt" | median; }
		say "median $ct: pagoda $(fmt "$(kc 2)") tok/s, llama.cpp $(fmt "$(kc 3)"), per-round ratio $(kc 4)x"
	done
fi

# ---- the daemon against the engine in-process -------------------------------------
if want gen; then
# Adjacent pairs whose order alternates (run gen, gen run, ...): the host's
# bandwidth drifts by a third within an hour, and rounds minutes apart
# compared the two at different speeds.
PF8=$W/prompt-$(basename "$M8" .gguf).txt
say ""
say "## pagoda generate (daemon, socket $SOCK_NOCACHE) against pagoda run (in-process), $(basename "$M8" .gguf), $PP-token prompt + $TG tokens, $GEN_PAIRS adjacent pairs"
say "pair | load | run decode tok/s, TTFT ms | generate decode tok/s, TTFT ms | gen/run decode, TTFT"
: >"$W/gen-run.txt"
# run_pair I: pair I, run then generate when I is odd, the other way when
# even; sets a (pagoda_run's fields) and b (pagoda_gen's).
run_pair() {
	if [ $(($1 % 2)) -eq 1 ]; then
		a=$(pagoda_run "$M8" "$PF8")
		b=$(pagoda_gen "$SOCK_NOCACHE" "$PF8")
	else
		b=$(pagoda_gen "$SOCK_NOCACHE" "$PF8")
		a=$(pagoda_run "$M8" "$PF8")
	fi
}
i=1
while [ $i -le "$GEN_PAIRS" ]; do
	ld=$(loadavg | cut -d' ' -f1)
	run_pair $i
	set -- $a
	r_tg=${4:-NA} r_ttft=${5:-NA}
	set -- $b
	g_tg=${3:-NA} g_ttft=${4:-NA}
	record "{\"what\":\"gen_vs_run\",\"pair\":$i,\"load\":\"$ld\",\"run\":{\"tg\":\"$r_tg\",\"ttft_ms\":\"$r_ttft\"},\"generate\":{\"tg\":\"$g_tg\",\"ttft_ms\":\"$g_ttft\"}}"
	echo "$(ratio "$g_tg" "$r_tg") $(ratio "$g_ttft" "$r_ttft")" >>"$W/gen-run.txt"
	say "$i | $ld | $(fmt "$r_tg"), $(fmt "$r_ttft") | $(fmt "$g_tg"), $(fmt "$g_ttft") | $(ratio "$g_tg" "$r_tg"), $(ratio "$g_ttft" "$r_ttft")"
	i=$((i + 1))
done
rg=$(awk '$1 != "NA" { print $1 }' "$W/gen-run.txt" | median)
rttft=$(awk '$2 != "NA" { print $2 }' "$W/gen-run.txt" | median)
say "median of pair ratios, generate / run: decode ${rg}x, TTFT ${rttft}x (target: within 3%)"

# What the daemon path adds to a token, from the engine's own probes
# (bpf/token_time.bt on each binary, over TT_PAIRS more pairs): a decode
# token's forward pass, the same code in both, and the rest of its
# inter-token time (sampling, handing the token out, the loop). What the
# IPC costs is the daemon's rest less the in-process one.
ipc_us=NA ipc_frac=NA
if [ "$(id -u)" = 0 ] && command -v bpftrace >/dev/null 2>&1; then
	tt_start() { # BINARY OUT: bpftrace on BINARY, attached when this returns; sets TT_PID
		bpftrace "$ROOT/bpf/token_time.bt" "$1" >"$2" 2>&1 &
		TT_PID=$!
		n=0
		until grep -q '^attached' "$2" 2>/dev/null || [ $n -gt 300 ]; do
			n=$((n + 1))
			sleep 0.2
		done
	}
	tt_stop() { # PID: a signal can be lost (see tests/e2e/lib.sh stop_bg), so again, then KILL
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -INT "$1" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$1" 2>/dev/null
		wait "$1" 2>/dev/null
	}
	tt_field() { grep '^tokens ' "$2" | tail -n1 | sed -n "s/.* $1 \([0-9-]*\).*/\1/p"; }
	BA=$(cd "$B" && pwd)
	tt_start "$BA/pagodad" "$W/token-time-daemon.txt"
	tt_d=$TT_PID
	tt_start "$BA/pagoda" "$W/token-time-run.txt"
	tt_r=$TT_PID
	i=1
	while [ $i -le "$TT_PAIRS" ]; do
		run_pair $i
		i=$((i + 1))
	done
	sleep 2 # one more of the scripts' once-a-second lines
	tt_stop "$tt_d"
	tt_stop "$tt_r"
	rf=$(tt_field forward_ns "$W/token-time-run.txt") ro=$(tt_field other_ns "$W/token-time-run.txt")
	df=$(tt_field forward_ns "$W/token-time-daemon.txt") dot=$(tt_field other_ns "$W/token-time-daemon.txt")
	di=$(tt_field itl_ns "$W/token-time-daemon.txt")
	if [ -n "$rf" ] && [ -n "$ro" ] && [ -n "$df" ] && [ -n "$dot" ] && [ -n "$di" ]; then
		record "{\"what\":\"token_time\",\"pairs\":$TT_PAIRS,\"run\":{\"forward_ns\":$rf,\"other_ns\":$ro},\"daemon\":{\"forward_ns\":$df,\"other_ns\":$dot,\"itl_ns\":$di}}"
		ipc_us=$(awk -v d="$dot" -v r="$ro" 'BEGIN { printf "%.1f", (d - r) / 1000 }')
		ipc_frac=$(awk -v u="$ipc_us" -v i="$di" 'BEGIN { printf "%.2f", 100 * u * 1000 / i }')
		say "per decode token over $TT_PAIRS more pairs (bpf/token_time.bt): forward pass $(awk -v v="$rf" 'BEGIN { printf "%.2f", v / 1e6 }') ms in-process, $(awk -v v="$df" 'BEGIN { printf "%.2f", v / 1e6 }') ms in the daemon; the rest $((ro / 1000)) us in-process, $((dot / 1000)) us in the daemon"
		say "the daemon path adds ${ipc_us} us per token outside the forward pass: ${ipc_frac}% of its inter-token time (the forward passes, the same code, ran at $(ratio "$rf" "$df")x)"
	else
		say "token time: bpftrace gave no figures (see $W/token-time-*.txt)"
	fi
else
	say "token time: needs root and bpftrace: skipped"
fi
echo "gen_over_run decode=$rg ttft=$rttft pairs=$GEN_PAIRS ipc_us=$ipc_us ipc_pct=$ipc_frac" >>"$SUMMARY"
fi

# ---- what bounds Q8_0 decode ------------------------------------------------------
# The token's matmuls against a plain read of the same weights with the same
# joins, and against the probe, and a decode token's whole forward pass
# against both, alternating round by round (bench/mm_decode.c): the
# bandwidth share with the reads tens of milliseconds away, not seconds,
# and, against the weights' own read, wherever the host put them.
MMD_LIBS="$B/libpagoda-engine.a $(pkg-config --libs libpcre2-8 libxxhash) -lm -pthread"
MMD_ROUNDS=31
if want mm && { cc -O2 -march=native -I. -o "$W/mm_decode" bench/mm_decode.c $MMD_LIBS 2>>"$W/membw-build.log" ||
	cc -O2 -I. -o "$W/mm_decode" bench/mm_decode.c $MMD_LIBS 2>>"$W/membw-build.log"; }; then
	say ""
	say "## where Q8_0 decode's memory time goes (bench/mm_decode.c, $T threads, $MMD_ROUNDS rounds, load $(loadavg))"
	"$W/mm_decode" "$M8" "$T" "$MMD_ROUNDS" >"$W/mm_decode.txt" 2>&1
	while IFS= read -r l; do say "$l"; done <"$W/mm_decode.txt"
	fwp=$(sed -n 's/.*paired forward\/probe \([0-9.]*\).*/\1/p' "$W/mm_decode.txt")
	fwr=$(sed -n 's/.*paired forward\/read \([0-9.]*\).*/\1/p' "$W/mm_decode.txt")
	mmp=$(sed -n 's/.*matmuls\/probe \([0-9.]*\).*/\1/p' "$W/mm_decode.txt")
	pct() { awk -v f="$1" 'BEGIN { if (f == "") print "NA"; else printf "%.1f", 100 * f }'; }
	[ -n "$fwr" ] && say "decode's forward pass, round by round, against a plain read of the same weights: $(pct "$fwr")% (target >= 90% for Q8_0); against the probe's buffer: $(pct "$fwp")%"
	echo "mm_decode $(basename "$M8" .gguf) forward_over_read=${fwr:-NA} forward_over_probe=${fwp:-NA} matmuls_over_probe=${mmp:-NA} rounds=$MMD_ROUNDS" >>"$SUMMARY"
fi

# ---- concurrency sweep ------------------------------------------------------------
if want sweep; then
say ""
say "## concurrency sweep, $(basename "$M8" .gguf): N streams x 1 request, prompt $SW_PP, output $SW_TG (pagoda-bench vs llama-batched-bench -npp $SW_PP -ntg $SW_TG), $SW_ROUNDS rounds, the engines alternating"
say "N | round | load | pagoda out tok/s (wall) | pagoda decode tok/s (sum of streams) | TTFT p50/p99 ms | ITL p50/p99 ms | llama S_TG | llama S (all) | decode ratio"
run_pagoda_sweep() {
	PJ=$("$B/pagoda-bench" load --socket "$SOCK_CACHE" -q --json -c "$N" -n "$N" -p "$SW_PP" -o "$SW_TG" --seed "$N" --label "sweep-$N")
	record "$PJ"
}
run_llama_sweep() {
	LJ=
	[ -n "$LLAMA_BIN" ] || return 0
	# its results go through llama.cpp's log thread, which now and then
	# loses them at exit: a run that printed nothing is run again
	LJ= _try=0
	while [ -z "$LJ" ] && [ $_try -lt 3 ]; do
		LJ=$("$LLAMA_BIN/llama-batched-bench" -m "$M8" -c $((N * (SW_PP + SW_TG) + 256)) -b 2048 -ub 512 \
			-npp "$SW_PP" -ntg "$SW_TG" -npl "$N" -t "$T" -tb "$T" --output-format jsonl 2>>"$W/llama-batched.err" |
			grep '"speed_tg"' | tail -n1)
		_try=$((_try + 1))
	done
	record "{\"what\":\"llama-batched-bench\",\"npl\":$N,\"r\":${LJ:-null}}"
}
i=0
for N in $SWEEP; do
	: >"$W/sweep-$N.txt"
	r=1
	while [ $r -le "$SW_ROUNDS" ]; do
		ld=$(loadavg | cut -d' ' -f1)
		# alternate which engine goes first
		if [ $((i % 2)) -eq 0 ]; then run_pagoda_sweep; run_llama_sweep; else run_llama_sweep; run_pagoda_sweep; fi
		i=$((i + 1))
		pout=$(jget output_tok_per_s "$PJ") pdec=$(jget sum_stream_decode_tok_per_s "$PJ")
		lstg=$(jget speed_tg "$LJ") ls=$(jget speed "$LJ")
		echo "$pout $pdec ${lstg:-NA} $(ratio "$pdec" "$lstg")" >>"$W/sweep-$N.txt"
		say "$N | $r | $ld | $(fmt "$pout") | $(fmt "$pdec") | $(fmt "$(jsub ttft_ms p50 "$PJ")") / $(fmt "$(jsub ttft_ms p99 "$PJ")") | $(fmt "$(jsub itl_ms p50 "$PJ")") / $(fmt "$(jsub itl_ms p99 "$PJ")") | $(fmt "$lstg") | $(fmt "$ls") | $(ratio "$pdec" "$lstg") (wall: $(ratio "$pout" "$lstg"))"
		r=$((r + 1))
	done
	scol() { awk -v c="$1" '$c != "NA" && $c != "" { print $c }' "$W/sweep-$N.txt" | median; }
	[ "$SW_ROUNDS" -gt 1 ] && say "$N | median | | $(fmt "$(scol 1)") | $(fmt "$(scol 2)") | | | $(fmt "$(scol 3)") | | $(scol 4) (median of the rounds' ratios)"
	echo "sweep$N pagoda_out=$(scol 1) pagoda_decode=$(scol 2) llama_tg=$(scol 3) ratio=$(scol 4) rounds=$SW_ROUNDS" >>"$SUMMARY"
done
say "(target at 16 streams: pagoda >= 2x llama.cpp's batched decode)"
fi

# ---- shared-prefix TTFT, prefix cache on vs off --------------------------------------
if want prefix; then
say ""
say "## shared prefix: $PFX_N requests on $PFX_C streams, prefix $PFX + distinct $PFX_SUF tokens, output 4; prefix cache on vs off (alternating)"
say "round | load | cache on TTFT p50 / p99 ms, hit rate | cache off TTFT p50 / p99 ms, hit rate | off/on p50"
: >"$W/prefix.txt"
r=1
while [ $r -le "$PFX_ROUNDS" ]; do
	ld=$(loadavg | cut -d' ' -f1)
	# A fresh prefix each round (the seed), so that the cached daemon starts cold.
	ON=$("$B/pagoda-bench" load --socket "$SOCK_CACHE" -q --json -c "$PFX_C" -n "$PFX_N" --prefix-len "$PFX" -p "$PFX_SUF" -o 4 --seed $((100 + r)) --label prefix-on)
	OFF=$("$B/pagoda-bench" load --socket "$SOCK_NOCACHE" -q --json -c "$PFX_C" -n "$PFX_N" --prefix-len "$PFX" -p "$PFX_SUF" -o 4 --seed $((100 + r)) --label prefix-off)
	record "$ON"
	record "$OFF"
	a=$(jsub ttft_ms p50 "$ON") b=$(jsub ttft_ms p50 "$OFF")
	say "$r | $ld | $(fmt "$a") / $(fmt "$(jsub ttft_ms p99 "$ON")"), $(jget prefix_hit_rate "$ON") | $(fmt "$b") / $(fmt "$(jsub ttft_ms p99 "$OFF")"), $(jget prefix_hit_rate "$OFF") | $(ratio "$b" "$a")x"
	echo "$(ratio "$b" "$a")" >>"$W/prefix.txt"
	r=$((r + 1))
done
say "median TTFT off/on: $(median <"$W/prefix.txt")x"
fi

# ---- IPC: ring vs unix socket, and one client's receive rate ----------------------------
if want ipc; then
say ""
say "## IPC round trip (daemon idle, $(basename "$M8" .gguf) loaded): $RTT_N empty requests each, alternating blocks (load $(loadavg))"
RJ=$("$B/pagoda-bench" rtt --socket "$SOCK_CACHE" -q --json -n "$RTT_N")
record "$RJ"
say "rings (pagoda_nop): p50 $(fmt "$(jsub ring_us p50 "$RJ")") us, p99 $(fmt "$(jsub ring_us p99 "$RJ")") us | AF_UNIX echo (SQE/CQE-sized messages): p50 $(fmt "$(jsub unix_us p50 "$RJ")") us, p99 $(fmt "$(jsub unix_us p99 "$RJ")") us | ring/socket p50 $(jget ratio_p50 "$RJ")x, p99 $(jget ratio_p99 "$RJ")x"
kill $DAEMON_PIDS 2>/dev/null
for p in $DAEMON_PIDS; do wait "$p" 2>/dev/null; done
DAEMON_PIDS=
start_daemon stream "$MT" --threads 1 --max-seqs 64
say ""
say "## one client's receive rate: $ST_K requests x $ST_TG tokens on one connection, tiny model (1 daemon thread) (load $(loadavg))"
S1=$("$B/pagoda-bench" stream --socket "$SOCK" -q --json -k "$ST_K" -o "$ST_TG")
# Few enough tokens that the daemon produces them all during the stall: the
# read phase then measures how fast one client drains a backlog.
S2=$("$B/pagoda-bench" stream --socket "$SOCK" -q --json -k 16 -o 64 --stall 5000)
record "$S1"
record "$S2"
say "reading as tokens come: client $(fmt "$(jget recv_tok_per_s "$S1")") tok/s, daemon produced $(fmt "$(jget daemon_tok_per_s "$S1")") tok/s, mismatched tokens $(jget mismatched_tokens "$S1")"
say "16 x 64 tokens, client stalled 5 s first (CQ full, daemon holds the rest): read phase $(fmt "$(jget read_phase_tok_per_s "$S2")") tok/s, daemon produced $(fmt "$(jget daemon_tok_per_s "$S2")") tok/s, mismatched tokens $(jget mismatched_tokens "$S2")"
fi

# ---- the gateway: HTTP against the rings and against llama-server ------------------
# bench/gateway.sh: 16 streams through pagoda-bench, to pagodad straight,
# through pagoda-gateway, and to llama-server, on SmolLM2-135M-Instruct
# (the tiny model in a quick run, or when SmolLM2 cannot be fetched).
if want gateway; then
	GM=$M8
	[ "$QUICK" = 1 ] || GM=$(sh tools/fetch-smollm2.sh 2>/dev/null) || GM=$M8
	say ""
	say "## pagoda-gateway: the rings, the gateway, llama-server (bench/gateway.sh, $(basename "$GM"))"
	if [ "$QUICK" = 1 ]; then
		set -- GW_STREAMS=${GW_STREAMS:-4} GW_ROUNDS=${GW_ROUNDS:-1} GW_OUTPUT=${GW_OUTPUT:-16} BENCH_BUILD_LLAMA=0
	else
		set --
	fi
	env "$@" GW_OUT="$JS" BENCH_THREADS="$T" PAGODA_BUILD="$B" sh bench/gateway.sh "$GM" 2>"$W/gateway.err" >"$W/gateway.txt"
	while IFS= read -r l; do say "$l"; done <"$W/gateway.txt"
	gwl=$(grep '^median of' "$W/gateway.txt")
	[ -n "$gwl" ] || say "bench/gateway.sh failed: $(tail -3 "$W/gateway.err")"
	echo "gateway ${gwl:-failed}" >>"$SUMMARY"
fi

say ""
say "load at end: $(loadavg); total $(elapsed) s"
say "summary:"
tee -a "$RES" <"$SUMMARY"
say "log: $RES, raw: $JS"
