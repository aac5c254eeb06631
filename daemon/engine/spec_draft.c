/* daemon/engine/spec_draft.c — a draft model: a second, smaller GGUF with
 * the target's vocabulary, its own backend instance and KV pool, run
 * autoregressively for a few tokens per sequence. The sequences that ask
 * are batched: one ragged step per draft token for all of them, the first
 * also catching each sequence's cache up with the tokens the target kept
 * since (its prompt, at first). */
#include "daemon/engine/sampler.h"
#include "daemon/engine/spec.h"
#include "daemon/kv/kv.h"
#include "daemon/model/model.h"
#include "daemon/model/tokenizer.h"
#include "kernels/pg_backend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Greedy drafting stops at a token the draft itself gives less than this
 * probability: such a guess is more often wrong than right. */
#define DRAFT_P_MIN 0.6f

/* A sequence that comes back from a pause (spec_pace) has moved on by more
 * tokens than a probe is worth computing: the draft starts over from the
 * sequence's first token and its last PROBE_WINDOW. Drafts are guesses
 * and the rule checks them, so a shorter context costs nothing but some
 * guesses; the probe only asks whether guessing pays again. */
#define PROBE_WINDOW 8

struct dseq {
	struct kv_seq kv;
	int32_t *tok;  /* what the draft has seen: n_seen tokens, the first n_done in its cache */
	int n_done, n_seen;
	int n_true;    /* of them the sequence's (the rest are drafts) */
	int off;       /* the draft's position i > 0 holds the sequence's i + off */
	bool synced;   /* it has computed the whole sequence once */
	struct sampler smp;
	bool live;     /* drafting in this propose */
};

struct draft {
	struct spec_drafter base;
	struct model *m;
	struct pg_backend *be;
	struct kv_pool kv;
	int n_ctx, max_batch, max_seqs, n_vocab;
	int32_t *b_tok, *b_pos, *b_seq;
	bool *b_want;
	struct pg_block_table *b_tab;
	int *row_ask; /* the ask each logits row answers */
	float *logits;
};

static int draft_open(struct spec_drafter *base, void **state, const struct sampling *sampling)
{
	struct draft *d = (struct draft *)base;
	struct dseq *s = calloc(1, sizeof *s);
	if (!s || !(s->tok = malloc((size_t)(d->n_ctx + ENGINE_DRAFT_MAX) * sizeof *s->tok))) {
		free(s);
		return -ENOMEM;
	}
	/* its own stream: the draws that accept drafts are the target's */
	struct sampling p = *sampling;
	p.seed ^= 0x9e3779b97f4a7c15ull;
	if (sampler_init(&s->smp, &p, d->n_vocab)) {
		free(s->tok);
		free(s);
		return -ENOMEM;
	}
	*state = s;
	return 0;
}

static void draft_close(struct spec_drafter *base, void *state)
{
	struct draft *d = (struct draft *)base;
	struct dseq *s = state;
	if (!s)
		return;
	kv_seq_release(&d->kv, &s->kv);
	sampler_free(&s->smp);
	free(s->tok);
	free(s);
}

/* The sequence's token at the draft's position i. */
static int32_t seq_tok(const struct dseq *s, const struct spec_ask *a, int i)
{
	return a->tokens[i ? i + s->off : 0];
}

/* Forgets what the target did not keep: the cache holds the longest common
 * prefix of what the draft saw and the sequence now, less its last token
 * (which the first round computes to get a row of logits); back from a
 * pause, the first token and a window of the last. */
static void sync_seq(struct draft *d, struct dseq *s, const struct spec_ask *a)
{
	int n = a->n_tokens - s->off, lcp = 0;
	while (lcp < s->n_done && lcp < n && s->tok[lcp] == seq_tok(s, a, lcp))
		lcp++;
	if (s->synced && n - lcp > PROBE_WINDOW + 1) {
		/* all of it anew: position 0's block may be shared */
		s->off = a->n_tokens - PROBE_WINDOW - 1;
		n = PROBE_WINDOW + 1;
		lcp = 0;
	}
	s->n_done = lcp < n - 1 ? lcp : n - 1;
	/* what follows n_done is written again: never into a published block */
	if (s->n_done < s->kv.n_hashed * d->kv.block_size)
		s->n_done -= s->n_done % d->kv.block_size;
	for (int i = s->n_done; i < n; i++)
		s->tok[i] = seq_tok(s, a, i);
	s->n_seen = s->n_true = n;
	kv_seq_truncate(&d->kv, &s->kv, s->n_done);
	/* a prompt another sequence had: its blocks from the cache */
	if (!s->n_done && !s->off)
		s->n_done = kv_seq_match_prefix(&d->kv, &s->kv, s->tok, n);
}

/* The draft's token from its row: argmax (given enough confidence) or a
 * draw from the request's sampling chain, whose distribution goes to q.
 * -1: stop drafting. */
static int32_t pick(struct draft *d, struct dseq *s, struct spec_ask *a, float *row)
{
	if (a->sampling->temp > 0) {
		float *q = a->q + (size_t)a->n_out * d->n_vocab;
		sampler_dist(&s->smp, row, s->tok, s->n_seen, q);
		return sampler_draw(&s->smp, q, d->n_vocab);
	}
	int32_t t = sampler_sample(&s->smp, row, s->tok, s->n_seen);
	double sum = 0;
	for (int i = 0; i < d->n_vocab; i++)
		sum += exp((double)row[i] - row[t]);
	return 1.0 / sum >= DRAFT_P_MIN ? t : -1;
}

static void draft_propose(struct spec_drafter *base, struct spec_ask *asks, int n)
{
	struct draft *d = (struct draft *)base;
	if (n > d->max_seqs)
		n = d->max_seqs;
	for (int i = 0; i < n; i++) {
		struct dseq *s = asks[i].state;
		asks[i].n_out = 0;
		sync_seq(d, s, &asks[i]);
		s->live = true;
	}
	for (;;) {
		int nt = 0, ns = 0, rows = 0;
		for (int i = 0; i < n && nt < d->max_batch; i++) {
			struct dseq *s = asks[i].state;
			if (!s->live)
				continue;
			int take = s->n_seen - s->n_done;
			bool whole = take <= d->max_batch - nt;
			if (!whole)
				take = d->max_batch - nt; /* a long catch-up: the rest next time */
			if (kv_seq_reserve(&d->kv, &s->kv, s->n_done + take)) {
				s->live = false;
				continue;
			}
			d->b_tab[ns] = kv_seq_table(&s->kv);
			for (int t = 0; t < take; t++, nt++) {
				d->b_tok[nt] = s->tok[s->n_done + t];
				d->b_pos[nt] = s->n_done + t;
				d->b_seq[nt] = ns;
				d->b_want[nt] = whole && t == take - 1;
			}
			if (whole) {
				d->row_ask[rows++] = i;
				s->synced = true;
			} else
				s->live = false;
			s->n_done += take;
			ns++;
		}
		if (!nt)
			break;
		struct pg_batch b = {
			.n_tokens = nt, .tokens = d->b_tok, .pos = d->b_pos, .seq = d->b_seq, .want = d->b_want,
			.n_seqs = ns, .seqs = d->b_tab, .logits = d->logits,
		};
		if (pg_backend_step(d->be, &b)) {
			/* no drafts this time; the caches are rebuilt from what they hold */
			for (int i = 0; i < n; i++) {
				struct dseq *s = asks[i].state;
				asks[i].n_out = 0;
				s->n_done = 0;
				s->live = false;
				kv_seq_truncate(&d->kv, &s->kv, 0);
			}
			break;
		}
		d->base.n_computed += nt;
		/* the sequences' own tokens (never a draft, never a window) for
		 * the sequences after them */
		for (int i = 0; i < n; i++) {
			struct dseq *s = asks[i].state;
			if (!s->off)
				kv_seq_commit(&d->kv, &s->kv, s->tok, s->n_done < s->n_true ? s->n_done : s->n_true);
		}
		for (int r = 0; r < rows; r++) {
			struct spec_ask *a = &asks[d->row_ask[r]];
			struct dseq *s = a->state;
			int32_t t = pick(d, s, a, d->logits + (size_t)r * d->n_vocab);
			if (t < 0) {
				s->live = false;
				continue;
			}
			a->out[a->n_out++] = t;
			s->tok[s->n_seen++] = t;
			if (a->n_out == a->max)
				s->live = false; /* its last draft stays uncomputed */
		}
	}
}

static void draft_destroy(struct spec_drafter *base)
{
	struct draft *d = (struct draft *)base;
	if (!d)
		return;
	if (d->kv.meta)
		kv_pool_free(&d->kv);
	pg_backend_close(d->be);
	model_free(d->m);
	free(d->b_tok);
	free(d->b_pos);
	free(d->b_seq);
	free(d->b_want);
	free(d->b_tab);
	free(d->row_ask);
	free(d->logits);
	free(d);
}

/* The same ids must stand for the same bytes, or the drafts mean nothing. */
static int same_vocab(const struct tokenizer *a, const struct tokenizer *b, char *err, size_t errlen)
{
	int n = tok_n_vocab(a);
	if (tok_n_vocab(b) != n) {
		snprintf(err, errlen, "its vocabulary has %d tokens, the model's %d", tok_n_vocab(b), n);
		return -EINVAL;
	}
	char pa[256], pb[256];
	for (int32_t id = 0; id < n; id++) {
		int la = tok_piece(a, id, true, pa, sizeof pa), lb = tok_piece(b, id, true, pb, sizeof pb);
		if (la != lb || (la > 0 && memcmp(pa, pb, la < (int)sizeof pa ? la : (int)sizeof pa))) {
			snprintf(err, errlen, "token %d differs from the model's", id);
			return -EINVAL;
		}
	}
	return 0;
}

int spec_draft_create(const struct spec_draft_opts *o, struct spec_drafter **out, char *err, size_t errlen)
{
	char why[512];
	struct draft *d = calloc(1, sizeof *d);
	if (!d) {
		snprintf(err, errlen, "draft model: out of memory");
		return -ENOMEM;
	}
	d->base = (struct spec_drafter){
		.name = "draft", .has_q = true, .costly = true, .open = draft_open, .close = draft_close,
		.propose = draft_propose, .destroy = draft_destroy,
	};
	d->n_ctx = o->n_ctx;
	d->max_batch = o->max_batch;
	d->max_seqs = o->max_seqs;
	int r = model_load(o->path, &d->m, why, sizeof why);
	if (!r && (r = same_vocab(o->vocab, d->m->tok, why, sizeof why)) == 0) {
		d->n_vocab = d->m->hp.n_vocab;
		const struct pg_backend_opts bo = { .threads = o->threads };
		const struct pg_step_limits lim = { d->max_batch, d->max_seqs, d->n_ctx };
		if ((r = pg_backend_open(o->backend ? o->backend : "cpu", &bo, &d->be, why, sizeof why)) == 0 &&
		    (r = pg_backend_load_weights(d->be, &d->m->desc, why, sizeof why)) == 0)
			r = pg_backend_reserve(d->be, &lim, why, sizeof why);
	}
	if (!r) {
		/* every sequence at full context, within 1 GiB, one context at least */
		const struct model_hparams *hp = &d->m->hp;
		const int bs = 16;
		int64_t per_ctx = (d->n_ctx + bs - 1) / bs, n = per_ctx * d->max_seqs;
		const struct pg_kv_layout l = { .block_size = bs, .n_layer = hp->n_layer,
						.kv_dim = hp->n_head_kv * hp->head_dim,
						.type_k = PG_TYPE_F16, .type_v = PG_TYPE_F16 };
		size_t bb = pg_kv_block_bytes(&l);
		if (n * (int64_t)bb > (1ll << 30))
			n = (1ll << 30) / (int64_t)bb;
		r = kv_pool_init(&d->kv, d->be, n > per_ctx ? n : per_ctx, bs, hp->n_layer,
				 hp->n_head_kv * hp->head_dim, true, why, sizeof why);
	}
	if (!r) {
		d->b_tok = malloc(d->max_batch * sizeof *d->b_tok);
		d->b_pos = malloc(d->max_batch * sizeof *d->b_pos);
		d->b_seq = malloc(d->max_batch * sizeof *d->b_seq);
		d->b_want = malloc(d->max_batch * sizeof *d->b_want);
		d->b_tab = malloc(d->max_seqs * sizeof *d->b_tab);
		d->row_ask = malloc(d->max_seqs * sizeof *d->row_ask);
		d->logits = malloc((size_t)d->max_seqs * d->n_vocab * sizeof *d->logits);
		if (!d->b_tok || !d->b_pos || !d->b_seq || !d->b_want || !d->b_tab || !d->row_ask || !d->logits) {
			snprintf(why, sizeof why, "out of memory");
			r = -ENOMEM;
		}
	}
	if (r) {
		snprintf(err, errlen, "draft model %s: %s", o->path, why);
		draft_destroy(&d->base);
		return r;
	}
	*out = &d->base;
	return 0;
}
