/* tools/pagoda/run.c — `pagoda run`: the engine in-process, the same code
 * pagodad runs, driven on this thread. stdout gets only the completion. */
#include "daemon/engine/engine.h"
#include "daemon/grammar/grammar.h"
#include "daemon/model/tokenizer.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct run_state {
	bool ids, done, first_id;
	enum finish_reason why;
	char msg[256];
};

static void on_token(struct engine_req *r, int32_t tok, const char *text, size_t len)
{
	struct run_state *st = r->user;
	if (st->ids) {
		if (tok >= 0) {
			printf(st->first_id ? "%d" : " %d", tok);
			st->first_id = false;
		}
	} else if (len) {
		fwrite(text, 1, len, stdout);
	}
	fflush(stdout);
}

static void on_done(struct engine_req *r, enum finish_reason why, int err, const char *msg)
{
	struct run_state *st = r->user;
	st->done = true;
	st->why = why;
	snprintf(st->msg, sizeof st->msg, "%s", msg ? msg : "");
}

static int usage(FILE *f)
{
	fprintf(f, "usage: pagoda run -m MODEL.gguf -p PROMPT [options]\n"
		   "  -m, --model PATH     GGUF model\n"
		   "  -p, --prompt TEXT    the prompt (-f FILE reads it from a file)\n"
		   "  -n, --n-predict N    tokens to generate (default: until end of text or context)\n"
		   "  -c, --ctx-size N     context length (default: the model's, at most 4096)\n"
		   "  -t, --threads N      compute threads (default: all cores)\n"
		   "  --backend NAME       cpu, cuda or auto (default: cuda when a GPU is found)\n"
		   "  --ids                print generated token ids instead of text\n"
		   "  --stats              print the engine's counters (KV blocks, cache, batching) at the end\n"
		   "  --kv-blocks N        KV pool size in blocks (default: enough for the context)\n"
		   "  --kv-mem SIZE        KV pool bytes, K/M/G suffixes (instead of --kv-blocks)\n"
		   "  -ctk, --cache-type-k T  KV cache type of K: f16 (default), q8_0, q4_0, q4_1, iq4_nl,\n"
		   "                       q5_0, q5_1 (as llama.cpp's -ctk)\n"
		   "  -ctv, --cache-type-v T  KV cache type of V, the same types\n"
		   "  --offload-dir DIR    keep KV blocks the pool lets go of in DIR/pagoda-kv.tier (NVMe tier)\n"
		   "  --offload-size SIZE  bytes of that file, K/M/G suffixes (default 1G)\n"
		   "  --offload-sqpoll     a kernel thread polls the tier's io_uring\n"
		   "  --json-schema FILE   the output is JSON valid against this schema (docs/grammar.md)\n"
		   "  --regex RE           the output matches this regular expression\n"
		   "  --grammar FILE       the output is a sentence of this GBNF grammar\n"
		   SPEC_FLAGS_HELP
		   "  --draft-model FILE   the draft model (a GGUF with the model's vocabulary; implies draft)\n"
		   SAMPLING_FLAGS_HELP);
	return f == stdout ? 0 : 2;
}

static void report(const struct engine_req *r)
{
	const struct req_timings *t = &r->timings;
	double ttft = t->t_first_ns ? ns_to_s(t->t_first_ns - t->t_submit_ns) : 0;
	double prefill = t->t_first_ns ? ns_to_s(t->t_first_ns - t->t_admit_ns) : 0;
	double gen = t->t_first_ns && t->n_gen > 1 ? ns_to_s(t->t_done_ns - t->t_first_ns) : 0;
	fprintf(stderr, "\npagoda: prompt %d tokens, %.2f tok/s | generated %d tokens, %.2f tok/s | TTFT %.1f ms\n",
		t->n_prompt, prefill > 0 ? t->n_prompt / prefill : 0.0, t->n_gen,
		gen > 0 ? (t->n_gen - 1) / gen : 0.0, ttft * 1e3);
	if (t->n_drafted)
		fprintf(stderr, "pagoda: speculative: %d drafted, %d accepted (%.1f%%), %.2f tokens per pass\n",
			t->n_drafted, t->n_accepted, 100.0 * t->n_accepted / t->n_drafted,
			t->n_passes ? (double)t->n_gen / t->n_passes : 0.0);
}

static void on_log(void *user, int level, const char *msg)
{
	fprintf(stderr, "pagoda: %s\n", msg);
}

static void print_offload(const struct engine_stats *st)
{
	const struct engine_offload *o = &st->offload;
	if (!o->enabled)
		return;
	fprintf(stderr,
		"pagoda: offload %s%s | slots %lld of %lld used, %llu found at start | out %llu blocks "
		"(%llu bytes, %llu for preempted sequences), in %llu blocks (%llu bytes, %llu without a copy), prompt tokens from "
		"the tier %llu | dropped writes %llu | errors: crc %llu, short %llu, io %llu, nospc %llu, "
		"header %llu\n",
		o->disabled ? "OFF after an error" : "on", o->direct ? " (O_DIRECT)" : " (buffered)",
		(long long)o->slots_used, (long long)o->slots_total, (unsigned long long)o->warm_blocks,
		(unsigned long long)o->blocks_out, (unsigned long long)o->bytes_out,
		(unsigned long long)o->swap_out_blocks, (unsigned long long)o->blocks_in,
		(unsigned long long)o->bytes_in, (unsigned long long)o->zero_copy_in,
		(unsigned long long)st->tier_prompt_tokens,
		(unsigned long long)o->dropped_writes, (unsigned long long)o->err_crc,
		(unsigned long long)o->err_short, (unsigned long long)o->err_io, (unsigned long long)o->err_nospc,
		(unsigned long long)o->err_header);
	fprintf(stderr, "pagoda: offload without a copy: in %llu, out %llu blocks; the pool %s with io_uring\n",
		(unsigned long long)o->zero_copy_in, (unsigned long long)o->zero_copy_out,
		o->pool_bufs ? "registered" : o->pool_unregistered ? "NOT registered (RLIMIT_MEMLOCK?)" : "not registered");
	fprintf(stderr, "pagoda: offload read latency (us, count):");
	for (int i = 0; i < 16; i++)
		if (o->read_lat_us[i])
			fprintf(stderr, " %u-%u:%llu", i ? 1u << i : 0, (2u << i) - 1, (unsigned long long)o->read_lat_us[i]);
	fputc('\n', stderr);
}

static void print_stats(struct engine *e)
{
	struct engine_stats st;
	char be[128];
	engine_get_stats(e, &st);
	engine_backend_describe(e, be, sizeof be);
	const char *note = engine_backend_note(e);
	fprintf(stderr, "pagoda: backend %s%s%s\n", be, note[0] ? ": " : "", note);
	fprintf(stderr, "pagoda: KV cache K %s, V %s: %lld tokens in %lld blocks of %lld bytes\n", st.kv_type_k,
		st.kv_type_v, (long long)st.kv_tokens_total, (long long)st.kv_blocks_total, (long long)st.kv_block_bytes);
	fprintf(stderr,
		"pagoda: KV blocks %lld total, %lld used, %lld cached, %lld free | waste %.1f%%\n"
		"pagoda: prompt tokens %llu, from the prefix cache %llu (%.1f%%), prefilled %llu, decoded %llu\n"
		"pagoda: requests %llu finished, %llu failed, %llu cancelled | steps %llu, preemptions %llu, "
		"running %d, waiting %d\n",
		(long long)st.kv_blocks_total, (long long)st.kv_blocks_used, (long long)st.kv_blocks_cached,
		(long long)(st.kv_blocks_total - st.kv_blocks_used - st.kv_blocks_cached), st.kv_waste * 100,
		(unsigned long long)st.prompt_tokens, (unsigned long long)st.cached_prompt_tokens,
		st.prompt_tokens ? 100.0 * st.cached_prompt_tokens / st.prompt_tokens : 0.0,
		(unsigned long long)st.prefill_tokens, (unsigned long long)st.decode_tokens,
		(unsigned long long)st.requests_finished, (unsigned long long)st.requests_failed,
		(unsigned long long)st.requests_cancelled, (unsigned long long)st.steps,
		(unsigned long long)st.preemptions, st.running, st.waiting);
	print_offload(&st);
	fprintf(stderr, "pagoda: speculative (%s by default): %llu drafted, %llu accepted (%.1f%%), %.2f tokens per pass\n",
		st.spec_default, (unsigned long long)st.spec_drafted, (unsigned long long)st.spec_accepted,
		st.spec_drafted ? 100.0 * st.spec_accepted / st.spec_drafted : 0.0,
		st.spec_passes ? (double)st.spec_tokens / st.spec_passes : 0.0);
}

int cmd_run(int argc, char **argv)
{
	struct engine_opts eo = { .backend = "auto", .log = on_log, .offload_fault = getenv("PAGODA_OFFLOAD_FAULT") };
	struct sampling smp;
	sampling_defaults(&smp);
	const char *prompt = NULL, *prompt_file = NULL;
	long n_predict = -1, v;
	bool ids = false, stats = false;
	int ckind = 0;
	const char *cfile = NULL, *cre = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val;
		int r = opt_sampling(argc, argv, &i, &smp);
		if (r < 0)
			return 2;
		if (r > 0)
			continue;
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return usage(stdout);
		if (!strcmp(a, "--ids")) {
			ids = true;
			continue;
		}
		if (!strcmp(a, "--stats")) {
			stats = true;
			continue;
		}
		if (!strcmp(a, "--offload-sqpoll")) {
			eo.offload_sqpoll = true;
			continue;
		}
		if (!(val = opt_value(argc, argv, &i)))
			return 2;
		if (!strcmp(a, "-m") || !strcmp(a, "--model"))
			eo.model_path = val;
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
			prompt = val;
		else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
			prompt_file = val;
		else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && opt_int(val, -1, 1 << 24, &v))
			n_predict = v;
		else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && opt_int(val, 0, 1 << 24, &v))
			eo.n_ctx = (int)v;
		else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && opt_int(val, 0, 1024, &v))
			eo.threads = (int)v;
		else if (!strcmp(a, "--backend"))
			eo.backend = val;
		else if (!strcmp(a, "--kv-blocks") && opt_int(val, 1, INT32_MAX >> 2, &v))
			eo.kv_blocks = v;
		else if (!strcmp(a, "--kv-mem") && opt_size(val, &eo.kv_mem))
			;
		else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k"))
			eo.cache_type_k = val;
		else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v"))
			eo.cache_type_v = val;
		else if (!strcmp(a, "--offload-dir"))
			eo.offload_dir = val;
		else if (!strcmp(a, "--json-schema") || !strcmp(a, "--grammar"))
			ckind = a[2] == 'j' ? GM_JSON_SCHEMA : GM_GBNF, cfile = val, cre = NULL;
		else if (!strcmp(a, "--regex"))
			ckind = GM_REGEX, cre = val, cfile = NULL;
		else if (!strcmp(a, "--offload-size") && opt_size(val, &eo.offload_size))
			;
		else if (!strcmp(a, "--speculative") && (v = engine_spec_parse(val)) >= 0)
			eo.speculative = (enum engine_spec)v;
		else if (!strcmp(a, "--draft-model"))
			eo.draft_model = val;
		else if (!strcmp(a, "--draft-max") && opt_int(val, 1, ENGINE_DRAFT_MAX, &v))
			eo.draft_max = (int)v;
		else {
			fprintf(stderr, "pagoda run: bad option %s %s\n", a, val);
			return usage(stderr);
		}
	}
	char *file_text = NULL;
	size_t n_file;
	if (prompt_file) {
		if (!(file_text = read_path(prompt_file, &n_file)))
			return 1;
		prompt = file_text;
	}
	char *ctext = NULL;
	size_t clen = 0;
	if (cfile) {
		if (!(ctext = read_path(cfile, &clen))) {
			free(file_text);
			return 1;
		}
	} else if (cre) {
		clen = strlen(cre);
	}
	if (!eo.model_path || !prompt) {
		fprintf(stderr, "pagoda run: -m MODEL and -p PROMPT are required\n");
		free(file_text);
		return usage(stderr);
	}
	char err[512];
	struct engine *e;
	if (engine_create(&eo, &e, err, sizeof err)) {
		fprintf(stderr, "pagoda run: %s\n", err);
		free(file_text);
		return 1;
	}
	const struct tokenizer *tok = engine_tokenizer(e);
	int cap = engine_n_ctx(e);
	int32_t *toks = malloc(cap * sizeof *toks);
	int n = toks ? tok_encode(tok, prompt, strlen(prompt), tok_add_bos(tok), true, toks, cap) : -1;
	free(file_text);
	int rc = 0;
	if (n < 0 && n != TOK_ERR) {
		fprintf(stderr, "pagoda run: prompt of %d tokens does not fit the context of %d\n", -n, cap);
		rc = 1;
	} else if (n <= 0) {
		fprintf(stderr, "pagoda run: the prompt could not be tokenized\n");
		rc = 1;
	}
	struct run_state st = { .ids = ids, .first_id = true };
	struct engine_req req = { .id = 1, .prompt = toks, .n_prompt = n, .sampling = smp,
				  .on_token = on_token, .on_done = on_done, .user = &st,
				  .constraint_kind = ckind, .constraint = cre ? cre : ctext, .constraint_len = clen };
	if (!rc) {
		int room = cap - n;
		req.max_tokens = n_predict < 0 || n_predict > room ? room : (int)n_predict;
		if (req.max_tokens == 0)
			st.done = true;
		else if (engine_submit(e, &req) == 0)
			while (engine_step(e) > 0)
				;
		if (ids)
			putchar('\n');
		fflush(stdout);
		if (st.why == FINISH_ERROR) {
			fprintf(stderr, "pagoda run: %s\n", st.msg);
			rc = 1;
		} else if (req.max_tokens) {
			report(&req);
		}
		if (stats)
			print_stats(e);
	}
	free(toks);
	free(ctext);
	engine_destroy(e);
	return rc;
}
