#!/bin/sh
# A quantized KV cache (-ctk/-ctv) decodes as llama.cpp does with the same
# flags: the greedy ids of tests/e2e/data/kvq.golden (made by llama.cpp,
# tests/peer/make-kvq-golden.sh) byte for byte, again with the kernels
# capped at each lower ISA; pagoda perplexity within 0.1% of
# llama-perplexity's; a head size that is not a whole number of the type's
# blocks (stories260K's 8) refused, saying so; an unknown type refused.
. "$(dirname "$0")/lib.sh"
G=$(dirname "$0")/data/kvq.golden
need_testdata models/synth-kq-Q8_0.gguf golden/story.txt
while read -r kind m ck cv rest; do
	need_testdata "models/$m.gguf"
	case $kind in
	ids)
		# every ISA for the Q8_0 model's lines, the default one for the rest
		isas=""
		[ "$m" = synth-kq-Q8_0 ] && isas="scalar avx2"
		for isa in "" $isas; do
			got=$(PAGODA_ISA=$isa "$B/pagoda" run --backend cpu -m "$T/models/$m.gguf" -ctk "$ck" -ctv "$cv" \
				-p "Once upon a time" -n 64 --temp 0 --ids 2>/dev/null)
			if [ "$got" = "$rest" ]; then ok; else bad "$m -ctk $ck -ctv $cv ${isa:+(PAGODA_ISA=$isa) }differs from llama.cpp:
  want $rest
  got  $got"; fi
		done
		;;
	ppl)
		got=$("$B/pagoda" perplexity --backend cpu -m "$T/models/$m.gguf" -f "$T/golden/story.txt" -c 128 \
			-ctk "$ck" -ctv "$cv" 2>/dev/null | sed -n 's/^PPL = //p')
		if [ -n "$got" ] && awk -v g="$got" -v w="$rest" 'BEGIN { d = (g - w) / w; if (d < 0) d = -d; exit !(d <= 0.001) }'; then
			ok
		else
			bad "$m -ctk $ck -ctv $cv: PPL '$got', llama-perplexity $rest (more than 0.1% apart)"
		fi
		;;
	esac
done <"$G"

# pagodad with a mixed quantized cache (config keys and -ctk/-ctv) and a
# pool so small that sequences are preempted: 32 concurrent requests each
# equal its solo run with the same flags
M=$T/models/synth-kq-Q8_0.gguf
dir=$(mktemp -d)
dpid=
trap '[ -n "$dpid" ] && kill -KILL $dpid 2>/dev/null; rm -rf "$dir"' EXIT
for i in $(seq 0 31); do
	echo "Once upon a time $i, there was" >"$dir/p$i"
	echo $((8 + (i * 37) % 40)) >"$dir/n$i"
	"$B/pagoda" run --backend cpu -m "$M" -ctk q8_0 -ctv q4_0 -p "$(cat "$dir/p$i")" -n "$(cat "$dir/n$i")" \
		--temp 0 -t 1 --ids >"$dir/solo$i" 2>/dev/null
done
printf 'cache-type-k = q8_0\n' >"$dir/conf"
"$B/pagodad" --model "$M" --backend cpu --socket "$dir/sock" --config "$dir/conf" -ctv q4_0 --max-seqs 32 \
	--kv-blocks 24 --ctx 256 --threads 2 2>"$dir/log" &
dpid=$!
k=0
until [ -S "$dir/sock" ] || [ $k -ge 300 ]; do sleep 0.1; k=$((k + 1)); done
for i in $(seq 0 31); do
	"$B/pagoda" generate --socket "$dir/sock" -p "$(cat "$dir/p$i")" -n "$(cat "$dir/n$i")" --temp 0 --ids \
		>"$dir/out$i" 2>"$dir/err$i" &
	eval "g$i=\$!"
done
for i in $(seq 0 31); do eval "wait \$g$i"; done
same=0
for i in $(seq 0 31); do
	if [ -s "$dir/solo$i" ] && cmp -s "$dir/out$i" "$dir/solo$i"; then same=$((same + 1)); fi
done
if [ $same -eq 32 ]; then ok; else bad "pagodad -ctk q8_0 -ctv q4_0: $((32 - same)) of 32 outputs differ from their solo runs"; fi
grep -q "q8_0" "$dir/log" && grep -q "q4_0" "$dir/log" && ok || bad "pagodad's log does not name the cache types: $(cat "$dir/log")"
stop_bg $dpid TERM 60 >/dev/null 2>&1
dpid=

# refusals: the message names the type, its block and the head size
if [ -e "$T/models/stories260K.gguf" ]; then
	out=$("$B/pagoda" run --backend cpu -m "$T/models/stories260K.gguf" -ctk q8_0 -p "Once" -n 4 2>&1)
	rc=$?
	case "$rc:$out" in
	0:*) bad "stories260K (head size 8) with -ctk q8_0 was not refused" ;;
	*"K cache type q8_0 with block size 32 does not divide the head size 8"*) ok ;;
	*) bad "stories260K -ctk q8_0: unclear error: $out" ;;
	esac
	out=$("$B/pagoda" perplexity --backend cpu -m "$T/models/stories260K.gguf" -f "$T/golden/story.txt" -c 128 \
		-ctv q4_0 2>&1)
	case "$?:$out" in
	0:*) bad "pagoda perplexity: stories260K with -ctv q4_0 was not refused" ;;
	*"V cache type q4_0 with block size 32 does not divide the head size 8"*) ok ;;
	*) bad "pagoda perplexity -ctv q4_0: unclear error: $out" ;;
	esac
fi
out=$("$B/pagoda" run --backend cpu -m "$T/models/synth-kq-Q8_0.gguf" -ctk q3_K -p "Once" -n 4 2>&1)
case "$?:$out" in
0:*) bad "-ctk q3_K was not refused" ;;
*"unknown K cache type 'q3_K'"*) ok ;;
*) bad "-ctk q3_K: unclear error: $out" ;;
esac
finish
