/* tools/pagoda/perplexity.c — `pagoda perplexity`, llama.cpp's method:
 * windows of N tokens with BOS first, each scored on its second half. */
#include "daemon/kv/kv.h"
#include "daemon/model/model.h"
#include "daemon/model/tokenizer.h"
#include "kernels/pg_backend.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/opts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -log p(tok) from raw logits, in double as llama.cpp. */
static double nll(const float *logits, int n_vocab, int tok)
{
	float max = logits[0];
	for (int i = 1; i < n_vocab; i++)
		if (logits[i] > max)
			max = logits[i];
	double sum = 0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - max);
	return -((double)logits[tok] - max - log(sum));
}

struct ppl_run {
	struct model *m;
	struct pg_backend *be;
	struct kv_pool kv;
	float *logits;
	int32_t *pos, *seq, *ubatch;
	bool *want;
};

static int score_window(struct ppl_run *p, int32_t *win, int n_ctx, double *sum, int *count)
{
	struct kv_seq s = { 0 };
	if (kv_seq_reserve(&p->kv, &s, n_ctx))
		return -1;
	const struct pg_block_table table = kv_seq_table(&s);
	struct pg_batch b = { .n_tokens = n_ctx, .tokens = win, .pos = p->pos, .seq = p->seq, .want = p->want,
			      .ubatch = p->ubatch, .n_seqs = 1, .seqs = &table, .logits = p->logits };
	int r = pg_backend_step(p->be, &b);
	kv_seq_release(&p->kv, &s);
	if (r)
		return r;
	int n_vocab = p->m->hp.n_vocab;
	for (int j = n_ctx / 2; j < n_ctx - 1; j++) {
		*sum += nll(p->logits + (size_t)j * n_vocab, n_vocab, win[j + 1]);
		(*count)++;
	}
	return 0;
}

static int perplexity(struct ppl_run *p, const int32_t *toks, int n_tok, int n_ctx)
{
	int n_chunks = n_tok / n_ctx;
	if (n_chunks == 0) {
		fprintf(stderr, "pagoda perplexity: %d tokens are fewer than one window of %d\n", n_tok, n_ctx);
		return 1;
	}
	int32_t *win = malloc(n_ctx * sizeof *win);
	int32_t bos = tok_bos(p->m->tok);
	double sum = 0;
	int count = 0;
	fprintf(stderr, "pagoda: %d tokens, %d chunks of %d\n", n_tok, n_chunks, n_ctx);
	for (int c = 0; c < n_chunks; c++) {
		memcpy(win, toks + (size_t)c * n_ctx, n_ctx * sizeof *win);
		if (tok_add_bos(p->m->tok) && bos >= 0)
			win[0] = bos;
		if (score_window(p, win, n_ctx, &sum, &count)) {
			fprintf(stderr, "pagoda perplexity: forward pass failed\n");
			free(win);
			return 1;
		}
		fprintf(stderr, "[%d]%.4f ", c + 1, exp(sum / count));
	}
	fprintf(stderr, "\n");
	printf("PPL = %.4f\n", exp(sum / count));
	free(win);
	return 0;
}

static int setup(struct ppl_run *p, const char *backend, int n_ctx, int threads, const uint32_t types[2], char *err,
		 size_t errlen)
{
	const struct model_hparams *hp = &p->m->hp;
	const struct pg_backend_opts bo = { .threads = threads };
	const struct pg_step_limits lim = { n_ctx, 1, n_ctx };
	char note[256];
	if (pg_backend_open(backend, &bo, &p->be, note, sizeof note)) {
		snprintf(err, errlen, "%s", note);
		return -1;
	}
	if (note[0])
		fprintf(stderr, "pagoda: %s\n", note);
	if (pg_backend_load_weights(p->be, &p->m->desc, err, errlen) || pg_backend_reserve(p->be, &lim, err, errlen) ||
	    kv_pool_init_layout(&p->kv, p->be, (n_ctx + 15) / 16,
				&(struct pg_kv_layout){ 16, hp->n_layer, hp->n_head_kv * hp->head_dim, types[0], types[1] },
				false, err, errlen))
		return -1;
	p->logits = malloc((size_t)n_ctx * hp->n_vocab * sizeof(float));
	p->pos = malloc(n_ctx * sizeof *p->pos);
	p->seq = calloc(n_ctx, sizeof *p->seq);
	p->want = malloc(n_ctx * sizeof *p->want);
	p->ubatch = malloc(n_ctx * sizeof *p->ubatch);
	if (!p->logits || !p->pos || !p->seq || !p->want || !p->ubatch) {
		snprintf(err, errlen, "out of memory for a window of %d tokens", n_ctx);
		return -1;
	}
	for (int i = 0; i < n_ctx; i++) {
		p->pos[i] = i;
		p->want[i] = true;
		p->ubatch[i] = model_ubatch_of(i, n_ctx); /* a window is one prompt */
	}
	return 0;
}

static void teardown(struct ppl_run *p)
{
	if (p->kv.meta)
		kv_pool_free(&p->kv);
	pg_backend_close(p->be);
	free(p->logits);
	free(p->pos);
	free(p->seq);
	free(p->want);
	free(p->ubatch);
	model_free(p->m);
}

int cmd_perplexity(int argc, char **argv)
{
	const char *model = NULL, *file = NULL, *backend = "auto";
	long n_ctx = 512, threads = 0;
	uint32_t types[2] = { PG_TYPE_F16, PG_TYPE_F16 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = (i + 1 < argc) ? argv[i + 1] : NULL;
		if (v && (!strcmp(a, "-m") || !strcmp(a, "--model")))
			model = v;
		else if (v && (!strcmp(a, "-f") || !strcmp(a, "--file")))
			file = v;
		else if (v && (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && opt_int(v, 4, 1 << 20, &n_ctx))
			;
		else if (v && (!strcmp(a, "-t") || !strcmp(a, "--threads")) && opt_int(v, 0, 1024, &threads))
			;
		else if (v && !strcmp(a, "--backend"))
			backend = v;
		else if (v && (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
			       !strcmp(a, "--cache-type-v"))) {
			const int t = pg_kv_type_parse(v);
			if (t < 0) {
				fprintf(stderr, "pagoda perplexity: unknown cache type '%s' (one of " PG_KV_TYPE_NAMES ")\n",
					v);
				return 2;
			}
			types[a[strlen(a) - 1] == 'k' ? 0 : 1] = (uint32_t)t;
		} else {
			fprintf(stderr, "usage: pagoda perplexity -m MODEL.gguf -f TEXT [-c N] [-t THREADS] "
					"[--backend cpu|cuda|auto] [-ctk TYPE] [-ctv TYPE]\n");
			return strcmp(a, "--help") ? 2 : 0;
		}
		i++;
	}
	if (!model || !file) {
		fprintf(stderr, "pagoda perplexity: -m MODEL and -f TEXT are required\n");
		return 2;
	}
	FILE *f = fopen(file, "rb");
	size_t len = 0;
	char *text = f ? read_all(f, &len) : NULL;
	if (f)
		fclose(f);
	if (!text) {
		perror(file);
		return 1;
	}
	char err[512];
	struct ppl_run p = { 0 };
	if (model_load(model, &p.m, err, sizeof err)) {
		fprintf(stderr, "pagoda perplexity: %s\n", err);
		free(text);
		return 1;
	}
	int cap = (int)len + 16;
	int32_t *toks = malloc(cap * sizeof *toks);
	int n = toks ? tok_encode(p.m->tok, text, len, tok_add_bos(p.m->tok), false, toks, cap) : -1;
	free(text);
	int rc = 1;
	if (n < 0)
		fprintf(stderr, "pagoda perplexity: cannot tokenize %s\n", file);
	else if (setup(&p, backend, (int)n_ctx, (int)threads, types, err, sizeof err))
		fprintf(stderr, "pagoda perplexity: %s\n", err);
	else
		rc = perplexity(&p, toks, n, (int)n_ctx);
	free(toks);
	teardown(&p);
	return rc;
}
