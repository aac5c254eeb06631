/* bpf/trace_print.c — one interval of pagoda-trace as text (bcc's log2
 * histograms) or as one JSON object on one line. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "bpf/trace.h"

static const struct {
	const char *key;   /* JSON */
	const char *title; /* text */
} hist_names[TRACE_N_HIST] = {
	[TRACE_H_QUEUE] = { "queue", "queue time: submit to admit" },
	[TRACE_H_TTFT] = { "ttft", "time to first token: submit to first token" },
	[TRACE_H_ITL] = { "itl", "inter-token latency" },
	[TRACE_H_REQUEST] = { "request", "request time: submit to done" },
	[TRACE_H_STEP] = { "step", "engine step time" },
	[TRACE_H_FORWARD] = { "forward", "forward pass within a step" },
	[TRACE_H_IO] = { "io_uring", "io_uring request: submit to completion" },
};

static void slot_range(int i, unsigned long long *lo, unsigned long long *hi)
{
	*lo = i ? 1ULL << i : 0;
	*hi = (1ULL << (i + 1)) - 1;
}

static void print_hist(FILE *f, const struct trace_hist *h, const char *title)
{
	int last = -1;
	__u64 max = 0;
	for (int i = 0; i < TRACE_SLOTS; i++)
		if (h->slots[i]) {
			last = i;
			if (h->slots[i] > max)
				max = h->slots[i];
		}
	if (last < 0)
		return;
	fprintf(f, "\n%s: %llu, mean %.1f us\n", title, (unsigned long long)h->count,
		h->sum_ns / 1000.0 / (double)h->count);
	fprintf(f, "%20s : %-9s distribution\n", "usecs", "count");
	for (int i = 0; i <= last; i++) {
		unsigned long long lo, hi;
		slot_range(i, &lo, &hi);
		char range[48], bar[41];
		snprintf(range, sizeof range, "%llu -> %llu", lo, hi);
		int w = (int)(h->slots[i] * 40 / max);
		memset(bar, '*', (size_t)w);
		memset(bar + w, ' ', (size_t)(40 - w));
		bar[40] = 0;
		fprintf(f, "%20s : %-9llu|%s|\n", range, (unsigned long long)h->slots[i], bar);
	}
}

void trace_print_text(FILE *f, const struct trace_interval *iv)
{
	const __u64 *c = iv->d->c;
	time_t now = (time_t)iv->wall;
	struct tm tm;
	char when[16];
	strftime(when, sizeof when, "%H:%M:%S", localtime_r(&now, &tm));
	fprintf(f, "\n%s  %.1f s%s\n", when, iv->seconds, iv->final ? " (final)" : "");
	if (iv->t->usdt) {
		fprintf(f, "requests: %llu submitted, %llu admitted, %llu done "
			   "(%llu eos, %llu length, %llu stop, %llu cancel, %llu error), %llu preempted\n",
			(unsigned long long)c[TRACE_C_SUBMIT], (unsigned long long)c[TRACE_C_ADMIT],
			(unsigned long long)c[TRACE_C_DONE], (unsigned long long)c[TRACE_C_DONE_EOS],
			(unsigned long long)c[TRACE_C_DONE_LENGTH], (unsigned long long)c[TRACE_C_DONE_STOP],
			(unsigned long long)c[TRACE_C_DONE_CANCEL], (unsigned long long)c[TRACE_C_DONE_ERROR],
			(unsigned long long)c[TRACE_C_PREEMPT]);
		fprintf(f, "tokens: %llu generated; steps: %llu (%llu tokens, %llu sequences)\n",
			(unsigned long long)c[TRACE_C_TOKENS], (unsigned long long)c[TRACE_C_STEPS],
			(unsigned long long)c[TRACE_C_STEP_TOKENS], (unsigned long long)c[TRACE_C_STEP_SEQS]);
		fprintf(f, "kv: prefix hits %llu in memory (%llu tokens), %llu from NVMe (%llu tokens); "
			   "swap-outs %llu (%llu blocks, %llu bytes), swap-ins %llu (%llu blocks, %llu bytes)\n",
			(unsigned long long)c[TRACE_C_HIT_MEMORY], (unsigned long long)c[TRACE_C_HIT_MEMORY_TOKENS],
			(unsigned long long)c[TRACE_C_HIT_NVME], (unsigned long long)c[TRACE_C_HIT_NVME_TOKENS],
			(unsigned long long)c[TRACE_C_SWAP_OUT], (unsigned long long)c[TRACE_C_SWAP_OUT_BLOCKS],
			(unsigned long long)c[TRACE_C_SWAP_OUT_BYTES], (unsigned long long)c[TRACE_C_SWAP_IN],
			(unsigned long long)c[TRACE_C_SWAP_IN_BLOCKS], (unsigned long long)c[TRACE_C_SWAP_IN_BYTES]);
	}
	if (iv->t->io)
		fprintf(f, "io_uring: %llu submitted, %llu completed\n", (unsigned long long)c[TRACE_C_IO_SUBMIT],
			(unsigned long long)c[TRACE_C_IO_COMPLETE]);
	for (int k = 0; k < TRACE_N_HIST; k++)
		print_hist(f, &iv->d->h[k], hist_names[k].title);
	fflush(f);
}

static void json_hist(FILE *f, const struct trace_hist *h)
{
	fprintf(f, "{\"count\":%llu,\"sum_ns\":%llu,\"buckets\":[", (unsigned long long)h->count,
		(unsigned long long)h->sum_ns);
	const char *sep = "";
	for (int i = 0; i < TRACE_SLOTS; i++) {
		if (!h->slots[i])
			continue;
		unsigned long long lo, hi;
		slot_range(i, &lo, &hi);
		fprintf(f, "%s[%llu,%llu,%llu]", sep, lo, hi, (unsigned long long)h->slots[i]);
		sep = ",";
	}
	fputs("]}", f);
}

void trace_print_json(FILE *f, const struct trace_interval *iv)
{
	static const struct {
		const char *group, *key;
		int counter;
	} fields[] = {
		{ "requests", "submitted", TRACE_C_SUBMIT },
		{ NULL, "admitted", TRACE_C_ADMIT },
		{ NULL, "first_tokens", TRACE_C_FIRST },
		{ NULL, "done", TRACE_C_DONE },
		{ NULL, "eos", TRACE_C_DONE_EOS },
		{ NULL, "length", TRACE_C_DONE_LENGTH },
		{ NULL, "stop", TRACE_C_DONE_STOP },
		{ NULL, "cancel", TRACE_C_DONE_CANCEL },
		{ NULL, "error", TRACE_C_DONE_ERROR },
		{ NULL, "preempted", TRACE_C_PREEMPT },
		{ NULL, "cached_tokens", TRACE_C_CACHED_TOKENS },
		{ NULL, "generated", TRACE_C_GENERATED },
		{ "tokens", NULL, TRACE_C_TOKENS },
		{ "steps", "count", TRACE_C_STEPS },
		{ NULL, "tokens", TRACE_C_STEP_TOKENS },
		{ NULL, "seqs", TRACE_C_STEP_SEQS },
		{ "kv", "prefix_hits", TRACE_C_HIT_MEMORY },
		{ NULL, "prefix_hit_tokens", TRACE_C_HIT_MEMORY_TOKENS },
		{ NULL, "prefix_hits_nvme", TRACE_C_HIT_NVME },
		{ NULL, "prefix_hit_tokens_nvme", TRACE_C_HIT_NVME_TOKENS },
		{ NULL, "swap_out", TRACE_C_SWAP_OUT },
		{ NULL, "swap_out_blocks", TRACE_C_SWAP_OUT_BLOCKS },
		{ NULL, "swap_out_bytes", TRACE_C_SWAP_OUT_BYTES },
		{ NULL, "swap_in", TRACE_C_SWAP_IN },
		{ NULL, "swap_in_blocks", TRACE_C_SWAP_IN_BLOCKS },
		{ NULL, "swap_in_bytes", TRACE_C_SWAP_IN_BYTES },
		{ "io_uring", "submitted", TRACE_C_IO_SUBMIT },
		{ NULL, "completed", TRACE_C_IO_COMPLETE },
	};
	fprintf(f, "{\"time\":%.3f,\"interval_s\":%.3f,\"final\":%s,\"pids\":[", iv->wall, iv->seconds,
		iv->final ? "true" : "false");
	for (int i = 0; i < iv->t->n_pids; i++)
		fprintf(f, "%s%d", i ? "," : "", (int)iv->t->pids[i]);
	fprintf(f, "],\"usdt\":%s,\"io\":%s", iv->t->usdt ? "true" : "false", iv->t->io ? "true" : "false");
	bool open = false;
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		unsigned long long v = iv->d->c[fields[i].counter];
		if (fields[i].group) {
			if (open)
				fputc('}', f);
			open = fields[i].key != NULL;
			if (open)
				fprintf(f, ",\"%s\":{\"%s\":%llu", fields[i].group, fields[i].key, v);
			else
				fprintf(f, ",\"%s\":%llu", fields[i].group, v);
		} else {
			fprintf(f, ",\"%s\":%llu", fields[i].key, v);
		}
	}
	if (open)
		fputc('}', f);
	fputs(",\"hist_us\":{", f);
	for (int k = 0; k < TRACE_N_HIST; k++) {
		fprintf(f, "%s\"%s\":", k ? "," : "", hist_names[k].key);
		json_hist(f, &iv->d->h[k]);
	}
	fputs("}}\n", f);
	fflush(f);
}
