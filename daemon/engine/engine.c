/* daemon/engine/engine.c — request queue and step loop: continuous batching
 * with chunked prefill over the paged KV-cache.
 *
 * Threads: engine_submit/cancel/drain/get_stats take the lock and may run
 * anywhere; everything else belongs to the one thread that calls
 * engine_step, which owns the running set, the KV pool and the model.
 */
#include "daemon/engine/engine.h"
#include "daemon/engine/probes.h"
#include "daemon/engine/logprob.h"
#include "daemon/engine/masker.h"
#include "daemon/engine/sampler.h"
#include "daemon/engine/spec.h"
#include "daemon/engine/stopper.h"
#include "daemon/grammar/grammar.h"
#include "daemon/kv/kv.h"
#include "daemon/kv/tier.h"
#include "daemon/model/gguf.h"
#include "daemon/model/model.h"
#include "daemon/model/tokenizer.h"
#include "kernels/pg_backend.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

struct seq {
	struct engine_req *req;
	uint64_t uid;      /* unique per engine request, for the probes */
	uint64_t t_last_ns; /* last token emitted */
	int32_t *tokens; /* prompt, then generated */
	int n_tokens, n_computed, n_gen, max_tokens;
	uint64_t admit_order;
	bool stopped; /* a stop string matched */
	bool tier_tried;  /* the tier was asked since it last waited or ran */
	int tier_blocks;  /* blocks the tier read back for it */
	struct kv_hash *want; /* its prompt's blocks up to the last being read */
	int n_want, n_fetched;
	struct kv_seq kv;
	struct sampler smp;
	struct tok_stream ts;
	struct stopper stop;
	struct seq *next;
	struct gm_grammar *gmg; /* the request's constraint, NULL if none */
	struct gm_matcher *gm;
	uint32_t *gm_mask;
	int gm_allowed;  /* gm_mask's count, when gm_ready */
	bool gm_ready;   /* the masker filled gm_mask for this step */
	/* speculative decoding */
	struct spec_drafter *drafter; /* NULL: off */
	void *dstate;
	struct spec_pace pace;
	int32_t drafts[ENGINE_DRAFT_MAX];
	float *q;    /* the drafts' distributions, when the drafter has them and it samples */
	int n_draft; /* proposed for this step */
	int n_drafted, n_accepted, n_passes;
};

struct engine {
	struct model *m;
	struct pg_backend *be;
	char backend_note[256]; /* why "auto" picked what it picked */
	struct kv_pool kv;
	struct kv_tier *tier; /* NULL without --offload-dir */
	int n_ctx, max_seqs, max_batch, chunk, n_vocab;

	pthread_mutex_t lock; /* guards the fields down to `stats` */
	struct seq *in_head, *in_tail;
	uint64_t *cancel_ids;
	int n_cancel, cap_cancel;
	bool draining;
	bool drop_cache;
	struct engine_stats stats;
	/* recent latencies, rings of ENGINE_LAT_WINDOW */
	uint64_t lat_ttft[ENGINE_LAT_WINDOW], lat_itl[ENGINE_LAT_WINDOW];
	uint64_t n_ttft, n_itl;
	int evfd;

	/* engine thread only */
	struct seq **running;
	int n_running;
	struct seq *wait_head, *wait_tail;
	struct seq *rest_head; /* waiting for the tier's reads, off the queue */
	struct kv_hash *hbuf;  /* a prompt's block hashes */
	int hbuf_cap;
	uint64_t swap_out_blocks;
	uint64_t admit_counter;
	uint64_t uid_counter; /* under lock */
	int32_t *b_tokens, *b_pos;
	int32_t *b_seq;
	bool *b_want;
	int32_t *b_ubatch;
	struct kv_seq **b_seqs;
	struct pg_block_table *b_tables; /* b_seqs' tables as the step takes them */
	struct seq **b_owner; /* per batch seq slot */
	int *b_take;          /* tokens taken per batch seq slot */
	float *logits;
	float *lp_row;        /* a row's raw logits, for logprobs (allocated when first asked) */
	struct gm_vocab *gm_vocab; /* built at the first constrained request (under lock) */
	struct masker *masker;     /* likewise */
	int mask_threads;          /* its workers */
	bool mask_overlap;         /* masks computed while a device runs the forward */
	uint64_t mask_wait_ns;     /* the engine thread's time on masks after forward passes */
	/* speculative decoding */
	struct spec_drafter *ngram, *draft;
	bool own_draft;
	enum engine_spec spec_default;
	int draft_max;
	struct spec_ask *asks;
	struct seq **ask_seq;
	int *b_draft;   /* draft tokens verified per batch seq slot */
	float *vwork;   /* spec_verify's, 2 * n_vocab */
	int logit_rows; /* rows logits holds */
	float *lp_rows; /* verified rows' raw logits, for logprobs (allocated when first asked) */
};

/* Draft tokens verified in one step, all sequences together: past a few
 * dozen rows a CPU step is bound by arithmetic, not by reading weights. */
#define SPEC_STEP_DRAFTS 64

static bool lp_row(struct engine *e)
{
	if (!e->lp_row)
		e->lp_row = malloc((size_t)e->n_vocab * sizeof *e->lp_row);
	return e->lp_row != NULL;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

const char *finish_reason_name(enum finish_reason r)
{
	static const char *names[] = { "none", "eos", "length", "stop", "cancel", "error" };
	return r <= FINISH_ERROR ? names[r] : "?";
}

static int set_defaults(struct engine *e, const struct engine_opts *o)
{
	const struct model_hparams *hp = &e->m->hp;
	e->n_ctx = o->n_ctx > 0 ? o->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
	e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 16;
	e->max_batch = o->max_batch_tokens > 0 ? o->max_batch_tokens : 512;
	e->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : e->max_batch;
	if (e->max_batch < e->max_seqs)
		e->max_batch = e->max_seqs;
	e->n_vocab = hp->n_vocab;
	return 0;
}

static int64_t pool_blocks(const struct engine *e, const struct engine_opts *o, const struct pg_kv_layout *l)
{
	const int block_size = l->block_size;
	int64_t per_ctx = (e->n_ctx + block_size - 1) / block_size;
	size_t bb = pg_kv_block_bytes(l);
	int64_t n;
	struct pg_mem_info mi;
	if (o->kv_blocks > 0)
		n = o->kv_blocks;
	else if (o->kv_mem > 0)
		n = o->kv_mem / (int64_t)bb;
	else if ((e->be->caps & PG_BACKEND_CAP_DEVICE_MEM) && pg_backend_mem_info(e->be, &mi) == 0)
		n = mi.free / 10 * 9 / (int64_t)bb; /* device memory exists to be used: 90% of what is left */
	else {
		/* every running sequence at full context, within 2 GiB */
		n = per_ctx * e->max_seqs;
		if (n * (int64_t)bb > (2ll << 30))
			n = (2ll << 30) / (int64_t)bb;
	}
	/* one full context always fits: no request that fits the context can
	 * fail for lack of KV memory */
	return n < per_ctx ? per_ctx : n;
}

/* What a block's K/V depends on besides its tokens: the GGUF's metadata
 * (hyperparameters, tokenizer, tensor layout), its size, and each
 * tensor's first and last page, which tell apart files of the same shape. */
static uint64_t model_fingerprint(const struct model *m)
{
	const struct gguf_file *g = m->gguf;
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, g->base, g->data_offset);
	XXH3_64bits_update(&st, &g->size, sizeof g->size);
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct gguf_tensor *t = &g->tensors[i];
		size_t n = t->size < 4096 ? t->size : 4096;
		XXH3_64bits_update(&st, t->data, n);
		XXH3_64bits_update(&st, (const uint8_t *)t->data + t->size - n, n);
	}
	return XXH3_64bits_digest(&st);
}

/* The pool lets go of a cached block: the tier keeps a copy. */
static void on_evict(void *user, struct kv_pool *p, int32_t b)
{
	struct engine *e = user;
	if (kv_tier_save(e->tier, p, b) == 0)
		PROBE_SWAP_OUT((uint64_t)0, (uint64_t)0, 1, (uint64_t)kv_pool_block_bytes(p));
}

static int open_tier(struct engine *e, const struct engine_opts *o, char *err, size_t errlen)
{
	if (o->no_prefix_cache) {
		snprintf(err, errlen, "offload: the tier keeps prefix-cache blocks and needs the prefix cache "
				      "(drop --no-prefix-cache)");
		return -EINVAL;
	}
	struct kv_tier_opts to = {
		.dir = o->offload_dir,
		.size = o->offload_size > 0 ? o->offload_size : 1ll << 30,
		.sqpoll = o->offload_sqpoll,
		.fingerprint = model_fingerprint(e->m),
		.fault = o->offload_fault,
		.log = o->log,
		.log_user = o->log_user,
	};
	int r = kv_tier_open(&e->tier, &to, &e->kv, err, errlen);
	if (r)
		return r;
	e->hbuf_cap = e->n_ctx / e->kv.block_size + 1;
	e->hbuf = malloc(e->hbuf_cap * sizeof *e->hbuf);
	if (!e->hbuf) {
		snprintf(err, errlen, "engine: out of memory");
		return -ENOMEM;
	}
	e->kv.evict = on_evict;
	e->kv.evict_user = e;
	return 0;
}

/* --cache-type-k / --cache-type-v into the pool's layout. */
static int kv_types(const struct engine_opts *o, struct pg_kv_layout *l, char *err, size_t errlen)
{
	const char *names[2] = { o->cache_type_k, o->cache_type_v }, *what[2] = { "K", "V" };
	uint32_t *types[2] = { &l->type_k, &l->type_v };
	for (int i = 0; i < 2; i++) {
		if (!names[i])
			continue;
		const int t = pg_kv_type_parse(names[i]);
		if (t < 0) {
			snprintf(err, errlen, "unknown %s cache type '%s' (one of " PG_KV_TYPE_NAMES ")", what[i],
				 names[i]);
			return -EINVAL;
		}
		*types[i] = (uint32_t)t;
	}
	return 0;
}

/* The drafters: prompt lookup always (a request may ask for it), a draft
 * model when given one. */
static int open_spec(struct engine *e, const struct engine_opts *o, char *err, size_t errlen)
{
	int r = spec_ngram_create(&e->ngram);
	if (r) {
		snprintf(err, errlen, "engine: out of memory");
		return r;
	}
	if (o->drafter) {
		e->draft = o->drafter;
	} else if (o->draft_model && *o->draft_model) {
		const struct spec_draft_opts so = {
			.path = o->draft_model, .vocab = e->m->tok, .backend = e->be->name, .threads = o->threads,
			.n_ctx = e->n_ctx, .max_seqs = e->max_seqs, .max_batch = e->max_batch,
		};
		if ((r = spec_draft_create(&so, &e->draft, err, errlen)))
			return r;
		e->own_draft = true;
	}
	if (o->speculative < ENGINE_SPEC_DEFAULT || o->speculative > ENGINE_SPEC_DRAFT) {
		snprintf(err, errlen, "speculative: unknown drafter %d", (int)o->speculative);
		return -EINVAL;
	}
	e->spec_default = o->speculative ? o->speculative : e->draft ? ENGINE_SPEC_DRAFT : ENGINE_SPEC_OFF;
	if (e->spec_default == ENGINE_SPEC_DRAFT && !e->draft) {
		snprintf(err, errlen, "speculative: draft needs a draft model (--draft-model FILE)");
		return -EINVAL;
	}
	if (o->draft_max < 0 || o->draft_max > ENGINE_DRAFT_MAX) {
		snprintf(err, errlen, "draft-max: %d is not within 1..%d", o->draft_max, ENGINE_DRAFT_MAX);
		return -EINVAL;
	}
	e->draft_max = o->draft_max ? o->draft_max : 8;
	snprintf(e->stats.spec_default, sizeof e->stats.spec_default, "%s", engine_spec_name(e->spec_default));
	return 0;
}

/* Mask workers: on a device backend the host's cores are free during the
 * forward; on the CPU the engine thread works beside threads - 1 of them. */
static void set_mask_threads(struct engine *e, const struct engine_opts *o)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int n = ncpu > 0 ? (int)ncpu : 1;
	e->mask_overlap = (e->be->caps & PG_BACKEND_CAP_DEVICE_MEM) != 0;
	if (!e->mask_overlap && o->threads > 0 && o->threads < n)
		n = o->threads;
	n = e->mask_overlap ? (n > 1 ? n - 1 : 1) : n - 1;
	e->mask_threads = n > 8 ? 8 : n;
}

/* The backend named, the model's weights on it and the KV pool. */
static int open_compute(struct engine *e, const struct engine_opts *o, const char *name, struct pg_kv_layout *kvl,
			char *err, size_t errlen)
{
	const struct pg_backend_opts bo = {
		.threads = o->threads, .progress = o->progress, .progress_user = o->progress_user,
	};
	int r = pg_backend_open(name, &bo, &e->be, e->backend_note, sizeof e->backend_note);
	if (r) {
		snprintf(err, errlen, "%s", e->backend_note);
		return r;
	}
	set_mask_threads(e, o);
	const struct pg_step_limits lim = { e->max_batch, e->max_seqs, e->n_ctx };
	if ((r = pg_backend_load_weights(e->be, &e->m->desc, err, errlen)) ||
	    (r = pg_backend_reserve(e->be, &lim, err, errlen)))
		return r;
	const struct model_hparams *hp = &e->m->hp;
	*kvl = (struct pg_kv_layout){ o->block_size > 0 ? o->block_size : 16, hp->n_layer,
				      hp->n_head_kv * hp->head_dim, PG_TYPE_F16, PG_TYPE_F16 };
	if ((r = kv_types(o, kvl, err, errlen)))
		return r;
	return kv_pool_init_layout(&e->kv, e->be, pool_blocks(e, o, kvl), kvl, !o->no_prefix_cache, err, errlen);
}

static void close_compute(struct engine *e)
{
	if (e->kv.meta)
		kv_pool_free(&e->kv);
	memset(&e->kv, 0, sizeof e->kv);
	pg_backend_close(e->be);
	e->be = NULL;
}

int engine_create(const struct engine_opts *o, struct engine **out, char *err, size_t errlen)
{
	struct engine *e = calloc(1, sizeof *e);
	if (!e) {
		snprintf(err, errlen, "engine: out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&e->lock, NULL);
	e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (o->progress)
		o->progress(o->progress_user, "reading model", 0);
	int r = model_load(o->model_path, &e->m, err, errlen);
	if (r)
		goto fail;
	set_defaults(e, o);
	const char *want = o->backend ? o->backend : "cpu";
	struct pg_kv_layout kvl;
	r = open_compute(e, o, want, &kvl, err, errlen);
	if (r && !strcmp(want, "auto") && e->be && strcmp(e->be->name, "cpu")) {
		/* auto: the device when it can run this configuration */
		char why[200];
		snprintf(why, sizeof why, "%s: %s", e->be->name, err);
		close_compute(e);
		if ((r = open_compute(e, o, "cpu", &kvl, err, errlen)) == 0)
			snprintf(e->backend_note, sizeof e->backend_note, "picked the CPU: %s", why);
	}
	if (r)
		goto fail;
	if (o->offload_dir && *o->offload_dir && (r = open_tier(e, o, err, errlen)))
		goto fail;
	e->running = calloc(e->max_seqs, sizeof *e->running);
	e->b_tokens = malloc(e->max_batch * sizeof *e->b_tokens);
	e->b_pos = malloc(e->max_batch * sizeof *e->b_pos);
	e->b_seq = malloc(e->max_batch * sizeof *e->b_seq);
	e->b_want = malloc(e->max_batch * sizeof *e->b_want);
	e->b_ubatch = malloc(e->max_batch * sizeof *e->b_ubatch);
	e->b_seqs = malloc(e->max_seqs * sizeof *e->b_seqs);
	e->b_tables = malloc(e->max_seqs * sizeof *e->b_tables);
	e->b_owner = malloc(e->max_seqs * sizeof *e->b_owner);
	e->b_take = malloc(e->max_seqs * sizeof *e->b_take);
	e->logits = malloc((size_t)e->max_seqs * e->n_vocab * sizeof(float));
	e->logit_rows = e->max_seqs;
	e->asks = malloc(e->max_seqs * sizeof *e->asks);
	e->ask_seq = malloc(e->max_seqs * sizeof *e->ask_seq);
	e->b_draft = malloc(e->max_seqs * sizeof *e->b_draft);
	e->vwork = malloc(2 * (size_t)e->n_vocab * sizeof *e->vwork);
	if (e->evfd < 0 || !e->running || !e->b_tokens || !e->b_pos || !e->b_seq || !e->b_want || !e->b_ubatch ||
	    !e->b_seqs || !e->b_tables || !e->b_owner || !e->b_take || !e->logits || !e->asks || !e->ask_seq ||
	    !e->b_draft || !e->vwork) {
		snprintf(err, errlen, "engine: out of memory for %d-token batches", e->max_batch);
		r = -ENOMEM;
		goto fail;
	}
	if ((r = open_spec(e, o, err, errlen)))
		goto fail;
	e->stats.kv_blocks_total = e->kv.n_blocks;
	e->stats.kv_type_k = pg_kv_type_name(kvl.type_k);
	e->stats.kv_type_v = pg_kv_type_name(kvl.type_v);
	e->stats.kv_tokens_total = e->kv.n_blocks * kvl.block_size;
	e->stats.kv_block_bytes = (int64_t)kv_pool_block_bytes(&e->kv);
	*out = e;
	return 0;
fail:
	engine_destroy(e);
	return r;
}

const struct model *engine_model(const struct engine *e) { return e->m; }
const char *engine_backend_note(const struct engine *e) { return e->backend_note; }

void engine_backend_describe(const struct engine *e, char *buf, size_t len)
{
	pg_backend_describe(e->be, buf, len);
}
const struct tokenizer *engine_tokenizer(const struct engine *e) { return e->m->tok; }
int engine_n_ctx(const struct engine *e) { return e->n_ctx; }

void engine_wake(struct engine *e)
{
	uint64_t one = 1;
	if (write(e->evfd, &one, sizeof one) < 0) {
		/* counter saturated: a wake-up is pending anyway */
	}
}

static void seq_free(struct seq *s)
{
	gm_matcher_free(s->gm);
	gm_grammar_unref(s->gmg);
	free(s->gm_mask);
	if (s->drafter)
		s->drafter->close(s->drafter, s->dstate);
	free(s->q);
	free(s->want);
	sampler_free(&s->smp);
	free(s->tokens);
	free(s);
}

/* Refuse at submit: on_done runs on the caller's thread. */
static int refuse(struct engine_req *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int refuse(struct engine_req *r, int code, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->timings.t_done_ns = now_ns();
	if (r->on_done)
		r->on_done(r, FINISH_ERROR, code, msg);
	return code;
}

/* Compile the request's constraint (cached by content) and start its
 * matcher; the vocabulary's trie is built once, by the first such request. */
static int constrain(struct engine *e, struct seq *s, struct engine_req *r)
{
	char err[256];
	pthread_mutex_lock(&e->lock);
	if (!e->gm_vocab)
		e->gm_vocab = gm_vocab_from_tokenizer(e->m->tok);
	if (!e->masker && masker_create(e->mask_threads, &e->masker))
		e->masker = NULL;
	struct gm_vocab *v = e->gm_vocab;
	bool mk = e->masker != NULL;
	pthread_mutex_unlock(&e->lock);
	if (!v || !mk)
		return refuse(r, ENGINE_ERR_NOMEM, "out of memory");
	uint64_t t0 = now_ns();
	if (!r->constraint || gm_compile_cached(r->constraint_kind, r->constraint, r->constraint_len, &s->gmg,
						err, sizeof err))
		return refuse(r, ENGINE_ERR_INVALID, "constraint: %s", r->constraint ? err : "no text");
	uint64_t dt = now_ns() - t0;
	pthread_mutex_lock(&e->lock);
	e->stats.constraint_requests++;
	e->stats.constraint_compile_ns += dt;
	pthread_mutex_unlock(&e->lock);
	s->gm = gm_matcher_new(s->gmg, v);
	s->gm_mask = malloc(((size_t)e->n_vocab + 31) / 32 * sizeof *s->gm_mask);
	if (!s->gm || !s->gm_mask)
		return refuse(r, ENGINE_ERR_NOMEM, "out of memory");
	return 0;
}

int engine_submit(struct engine *e, struct engine_req *r)
{
	memset(&r->timings, 0, sizeof r->timings);
	r->timings.t_submit_ns = now_ns();
	r->timings.n_prompt = r->n_prompt;
	if (r->n_prompt <= 0)
		return refuse(r, ENGINE_ERR_INVALID, "empty prompt");
	for (int i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= e->n_vocab)
			return refuse(r, ENGINE_ERR_INVALID, "token %d at position %d is outside the vocabulary (%d)",
				      r->prompt[i], i, e->n_vocab);
	if (r->n_prompt >= e->n_ctx)
		return refuse(r, ENGINE_ERR_CONTEXT, "prompt of %d tokens does not fit the context of %d",
			      r->n_prompt, e->n_ctx);
	if (r->max_tokens < 0 || (r->max_tokens > 0 && r->n_prompt + r->max_tokens > e->n_ctx))
		return refuse(r, ENGINE_ERR_CONTEXT,
			      "prompt of %d tokens + %d new tokens exceeds the context of %d", r->n_prompt,
			      r->max_tokens, e->n_ctx);
	if (r->n_stop < 0 || r->n_stop > ENGINE_MAX_STOP)
		return refuse(r, ENGINE_ERR_INVALID, "at most %d stop strings", ENGINE_MAX_STOP);
	if (r->spec < ENGINE_SPEC_DEFAULT || r->spec > ENGINE_SPEC_DRAFT)
		return refuse(r, ENGINE_ERR_INVALID, "unknown speculative drafter %d", (int)r->spec);
	if (r->top_logprobs < 0 || r->top_logprobs > ENGINE_TOP_LOGPROBS)
		return refuse(r, ENGINE_ERR_INVALID, "top_logprobs %d is not within 0..%d", r->top_logprobs,
			      ENGINE_TOP_LOGPROBS);
	if (r->draft_max < 0 || r->draft_max > ENGINE_DRAFT_MAX)
		return refuse(r, ENGINE_ERR_INVALID, "draft_max %d is not within 0..%d", r->draft_max,
			      ENGINE_DRAFT_MAX);
	enum engine_spec spec = r->spec ? r->spec : e->spec_default;
	if (spec == ENGINE_SPEC_DRAFT && !e->draft)
		return refuse(r, ENGINE_ERR_INVALID, "speculative decoding with a draft model: none is loaded "
						     "(pagodad --draft-model FILE)");
	struct seq *s = calloc(1, sizeof *s);
	if (!s || !(s->tokens = malloc(e->n_ctx * sizeof *s->tokens))) {
		free(s);
		return refuse(r, ENGINE_ERR_NOMEM, "out of memory");
	}
	if (sampler_init(&s->smp, &r->sampling, e->n_vocab)) {
		seq_free(s);
		return refuse(r, ENGINE_ERR_NOMEM, "out of memory");
	}
	s->smp.gen_from = r->n_prompt;
	if (r->constraint_kind) {
		int rc = constrain(e, s, r);
		if (rc) {
			seq_free(s);
			return rc;
		}
	}
	struct spec_drafter *dr = spec == ENGINE_SPEC_NGRAM ? e->ngram : spec == ENGINE_SPEC_DRAFT ? e->draft : NULL;
	if (dr && dr->open(dr, &s->dstate, &r->sampling)) {
		seq_free(s);
		return refuse(r, ENGINE_ERR_NOMEM, "out of memory");
	}
	s->drafter = dr;
	spec_pace_init(&s->pace, r->draft_max ? r->draft_max : e->draft_max);
	memcpy(s->tokens, r->prompt, r->n_prompt * sizeof *s->tokens);
	s->n_tokens = r->n_prompt;
	s->kv.salt = r->cache_salt;
	s->max_tokens = r->max_tokens > 0 ? r->max_tokens : e->n_ctx - r->n_prompt;
	s->req = r;
	tok_stream_init(&s->ts);
	stopper_init(&s->stop, r->stop, r->n_stop);
	r->priv = s;
	pthread_mutex_lock(&e->lock);
	if (e->draining) {
		pthread_mutex_unlock(&e->lock);
		seq_free(s);
		return refuse(r, ENGINE_ERR_DRAINING, "the daemon is draining and accepts no new requests");
	}
	s->uid = ++e->uid_counter;
	if (e->in_tail)
		e->in_tail->next = s;
	else
		e->in_head = s;
	e->in_tail = s;
	e->stats.requests_submitted++;
	e->stats.waiting++;
	pthread_mutex_unlock(&e->lock);
	PROBE_SUBMIT(s->uid, r->id, r->n_prompt);
	engine_wake(e);
	return 0;
}

void engine_cancel(struct engine *e, uint64_t id)
{
	pthread_mutex_lock(&e->lock);
	if (e->n_cancel == e->cap_cancel) {
		int cap = e->cap_cancel ? e->cap_cancel * 2 : 16;
		uint64_t *n = realloc(e->cancel_ids, cap * sizeof *n);
		if (!n) {
			pthread_mutex_unlock(&e->lock);
			return;
		}
		e->cancel_ids = n;
		e->cap_cancel = cap;
	}
	e->cancel_ids[e->n_cancel++] = id;
	pthread_mutex_unlock(&e->lock);
	engine_wake(e);
}

void engine_drop_prefix_cache(struct engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->drop_cache = true;
	pthread_mutex_unlock(&e->lock);
	engine_wake(e);
}

void engine_drain(struct engine *e)
{
	pthread_mutex_lock(&e->lock);
	e->draining = true;
	pthread_mutex_unlock(&e->lock);
}

/* ---- engine thread -------------------------------------------------------- */

static void finish(struct engine *e, struct seq *s, enum finish_reason why, int code, const char *msg)
{
	struct engine_req *r = s->req;
	char tail[ENGINE_STOP_LEN * 2 + 16];
	int n = why == FINISH_EOS || why == FINISH_LENGTH ? stopper_flush(&s->stop, tail, sizeof tail) : 0;
	if (n < (int)sizeof tail - 8 && (why == FINISH_EOS || why == FINISH_LENGTH))
		n += tok_stream_flush(&s->ts, tail + n, (int)sizeof tail - n);
	if (n > 0 && r->on_token)
		r->on_token(r, -1, tail, n);
	kv_seq_release(&e->kv, &s->kv);
	r->timings.t_done_ns = now_ns();
	r->timings.n_gen = s->n_gen;
	r->timings.n_drafted = s->n_drafted;
	r->timings.n_accepted = s->n_accepted;
	r->timings.n_passes = s->n_passes;
	PROBE_DONE(s->uid, r->id, (int)why, s->n_gen, r->timings.t_done_ns - r->timings.t_submit_ns);
	pthread_mutex_lock(&e->lock);
	if (why == FINISH_CANCEL)
		e->stats.requests_cancelled++;
	else if (why == FINISH_ERROR)
		e->stats.requests_failed++;
	else
		e->stats.requests_finished++;
	pthread_mutex_unlock(&e->lock);
	seq_free(s);
	if (r->on_done)
		r->on_done(r, why, code, msg);
}

static void remove_running(struct engine *e, int i)
{
	memmove(&e->running[i], &e->running[i + 1], (e->n_running - i - 1) * sizeof *e->running);
	e->n_running--;
}

static void push_wait_front(struct engine *e, struct seq *s)
{
	s->next = e->wait_head;
	e->wait_head = s;
	if (!e->wait_tail)
		e->wait_tail = s;
}

static struct seq *pop_wait(struct engine *e)
{
	struct seq *s = e->wait_head;
	if (s) {
		e->wait_head = s->next;
		if (!e->wait_head)
			e->wait_tail = NULL;
		s->next = NULL;
	}
	return s;
}

static void take_incoming(struct engine *e, uint64_t **cancel, int *n_cancel)
{
	pthread_mutex_lock(&e->lock);
	if (e->in_head) {
		if (e->wait_tail)
			e->wait_tail->next = e->in_head;
		else
			e->wait_head = e->in_head;
		e->wait_tail = e->in_tail;
		e->in_head = e->in_tail = NULL;
	}
	*n_cancel = e->n_cancel;
	*cancel = NULL;
	if (e->n_cancel) {
		*cancel = malloc(e->n_cancel * sizeof **cancel);
		if (*cancel)
			memcpy(*cancel, e->cancel_ids, e->n_cancel * sizeof **cancel);
		else
			*n_cancel = 0;
		e->n_cancel = 0;
	}
	pthread_mutex_unlock(&e->lock);
}

static bool id_in(uint64_t id, const uint64_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static void apply_cancels(struct engine *e)
{
	uint64_t *ids;
	int n;
	take_incoming(e, &ids, &n);
	if (!n)
		return;
	for (int i = e->n_running - 1; i >= 0; i--) {
		struct seq *s = e->running[i];
		if (id_in(s->req->id, ids, n)) {
			remove_running(e, i);
			finish(e, s, FINISH_CANCEL, 0, "cancelled");
		}
	}
	for (struct seq **pp = &e->wait_head; *pp;) {
		struct seq *s = *pp;
		if (id_in(s->req->id, ids, n)) {
			*pp = s->next;
			finish(e, s, FINISH_CANCEL, 0, "cancelled");
		} else {
			pp = &s->next;
		}
	}
	e->wait_tail = NULL;
	for (struct seq *s = e->wait_head; s; s = s->next)
		e->wait_tail = s;
	for (struct seq **pp = &e->rest_head; *pp;) {
		struct seq *s = *pp;
		if (id_in(s->req->id, ids, n)) {
			*pp = s->next;
			finish(e, s, FINISH_CANCEL, 0, "cancelled");
		} else {
			pp = &s->next;
		}
	}
	free(ids);
}

/* The most recently admitted running sequence gives its KV blocks back and
 * waits at the head of the queue. With a tier its full blocks are written
 * there (swapped out), and read back when it is readmitted if the pool
 * has let go of them meanwhile; what neither has is recomputed. */
static void preempt_latest(struct engine *e)
{
	int victim = 0;
	for (int i = 1; i < e->n_running; i++)
		if (e->running[i]->admit_order > e->running[victim]->admit_order)
			victim = i;
	struct seq *s = e->running[victim];
	remove_running(e, victim);
	if (e->tier) {
		int n = 0;
		for (int i = 0; i < s->kv.n_hashed; i++)
			n += kv_tier_save(e->tier, &e->kv, s->kv.blocks[i]) == 0;
		if (n)
			PROBE_SWAP_OUT(s->uid, s->req->id, n, (uint64_t)n * kv_pool_block_bytes(&e->kv));
		e->swap_out_blocks += n;
	}
	s->tier_tried = false;
	s->n_draft = 0;
	kv_seq_release(&e->kv, &s->kv);
	PROBE_PREEMPT(s->uid, s->req->id, s->n_computed);
	s->n_computed = 0;
	push_wait_front(e, s);
	pthread_mutex_lock(&e->lock);
	e->stats.preemptions++;
	pthread_mutex_unlock(&e->lock);
}

struct plan {
	int n_tok, n_slots;
};

/* Asks the tier for the blocks of s's prompt past what the pool holds
 * (keeping the pool's matched blocks, so they stay while it waits): all
 * reads go out in this step's one submission. True when some are in
 * flight: s then waits off the queue and the batch goes on without it. */
static bool start_restore(struct engine *e, struct seq *s)
{
	s->tier_tried = true;
	kv_seq_match_prefix(&e->kv, &s->kv, s->tokens, s->n_tokens);
	int n = kv_seq_next_hashes(&e->kv, &s->kv, s->tokens, s->n_tokens, e->hbuf, e->hbuf_cap);
	/* leave the pool room for a chunk of what is computed after */
	int64_t keep = kv_blocks_needed(&e->kv, e->chunk) + 1;
	int k = 0, pending = 0;
	for (; k < n; k++) {
		struct kv_hash h = e->hbuf[k];
		if (kv_pool_has(&e->kv, h))
			continue;
		if (kv_available(&e->kv) <= keep || !kv_tier_has(e->tier, h) || kv_tier_fetch(e->tier, &e->kv, h) < 0)
			break;
		pending++;
	}
	if (!pending || !(s->want = malloc(k * sizeof *s->want)))
		return false;
	memcpy(s->want, e->hbuf, k * sizeof *s->want);
	s->n_want = k;
	s->n_fetched = pending;
	return true;
}

/* Sequences whose reads have all completed go back to the head of the
 * queue; admission maps what verified (kv_seq_match_prefix) and computes
 * the rest. */
static void restore_done(struct engine *e)
{
	for (struct seq **pp = &e->rest_head; *pp;) {
		struct seq *s = *pp;
		bool busy = false;
		for (int i = 0; i < s->n_want && !busy; i++)
			busy = kv_tier_pending(e->tier, s->want[i]);
		if (busy) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		int n = 0;
		while (n < s->n_want && kv_pool_has(&e->kv, s->want[n]))
			n++;
		n = n < s->n_fetched ? n : s->n_fetched;
		s->tier_blocks += n;
		PROBE_SWAP_IN(s->uid, s->req->id, n, (uint64_t)n * kv_pool_block_bytes(&e->kv));
		free(s->want);
		s->want = NULL;
		s->n_want = 0;
		push_wait_front(e, s);
	}
}

static void plan_add(struct engine *e, struct plan *p, struct seq *s, int take)
{
	int slot = p->n_slots++;
	e->b_owner[slot] = s;
	e->b_take[slot] = take;
	e->b_seqs[slot] = &s->kv;
	/* past the sequence's tokens: its drafts, every row's logits wanted */
	e->b_draft[slot] = s->n_computed + take > s->n_tokens ? s->n_computed + take - s->n_tokens : 0;
	for (int i = 0; i < take; i++) {
		int pos = s->n_computed + i;
		e->b_tokens[p->n_tok] = pos < s->n_tokens ? s->tokens[pos] : s->drafts[pos - s->n_tokens];
		e->b_pos[p->n_tok] = pos;
		e->b_seq[p->n_tok] = slot;
		e->b_want[p->n_tok] = pos >= s->n_tokens - 1;
		e->b_ubatch[p->n_tok] = model_ubatch_of(pos, s->req->n_prompt);
		p->n_tok++;
	}
}

static int chunk_for(const struct engine *e, const struct seq *s, const struct plan *p)
{
	int take = s->n_tokens - s->n_computed;
	if (take > e->chunk)
		take = e->chunk;
	if (take > e->max_batch - p->n_tok)
		take = e->max_batch - p->n_tok;
	return take;
}

/* A decode sequence's drafts that fit the batch and the free blocks:
 * speculation never evicts a cached block nor preempts anyone. */
static int fit_drafts(struct engine *e, struct seq *s, const struct plan *p)
{
	int64_t room = (s->kv.n_blocks + (e->kv.n_free < e->n_ctx ? e->kv.n_free : e->n_ctx)) *
		       (int64_t)e->kv.block_size - (s->n_computed + 1);
	int k = s->n_draft;
	if (k > room)
		k = (int)room;
	if (k > e->max_batch - p->n_tok - 1)
		k = e->max_batch - p->n_tok - 1;
	return s->n_draft = k > 0 ? k : 0;
}

/* Decode tokens first (one per running sequence), then prefill chunks of
 * running sequences, then newly admitted ones, FCFS, within the budget.
 * When the pool runs dry, the latest admitted sequence is preempted and
 * planning starts over with one sequence fewer. */
static void schedule(struct engine *e, struct plan *p)
{
again:
	p->n_tok = p->n_slots = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < e->n_running; i++) {
			struct seq *s = e->running[i];
			bool decode = s->n_tokens - s->n_computed == 1;
			if (decode != (pass == 0))
				continue;
			int take = chunk_for(e, s, p);
			if (take <= 0)
				continue;
			if (decode && s->n_draft)
				take += fit_drafts(e, s, p);
			if (kv_seq_reserve(&e->kv, &s->kv, s->n_computed + take) == -ENOSPC) {
				preempt_latest(e);
				goto again;
			}
			plan_add(e, p, s, take);
		}
	}
	while (e->wait_head && e->n_running < e->max_seqs && p->n_tok < e->max_batch) {
		struct seq *s = e->wait_head;
		if (e->tier && !s->tier_tried && start_restore(e, s)) {
			pop_wait(e);
			s->next = e->rest_head;
			e->rest_head = s;
			continue;
		}
		int cached = kv_seq_match_prefix(&e->kv, &s->kv, s->tokens, s->n_tokens);
		s->n_computed = cached;
		int take = chunk_for(e, s, p);
		if (kv_seq_reserve(&e->kv, &s->kv, s->n_computed + take) != 0) {
			/* admitted later, when blocks free up; hold nothing meanwhile */
			kv_seq_release(&e->kv, &s->kv);
			s->n_computed = 0;
			s->tier_tried = false;
			break;
		}
		pop_wait(e);
		if (!s->req->timings.t_admit_ns) {
			s->req->timings.t_admit_ns = now_ns();
			s->req->timings.n_cached = cached < s->req->n_prompt ? cached : s->req->n_prompt;
			PROBE_ADMIT(s->uid, s->req->id, s->req->timings.t_admit_ns - s->req->timings.t_submit_ns,
				    s->req->timings.n_cached);
			int from_tier = s->tier_blocks * e->kv.block_size;
			if (from_tier > s->req->timings.n_cached)
				from_tier = s->req->timings.n_cached;
			if (s->req->timings.n_cached - from_tier > 0)
				PROBE_PREFIX_HIT(s->uid, s->req->id, s->req->timings.n_cached - from_tier,
						 PROBE_KV_MEMORY);
			if (from_tier > 0)
				PROBE_PREFIX_HIT(s->uid, s->req->id, from_tier, PROBE_KV_NVME);
			pthread_mutex_lock(&e->lock);
			e->stats.prompt_tokens += s->req->n_prompt;
			e->stats.cached_prompt_tokens += s->req->timings.n_cached;
			e->stats.tier_prompt_tokens += from_tier;
			pthread_mutex_unlock(&e->lock);
		}
		s->admit_order = ++e->admit_counter;
		e->running[e->n_running++] = s;
		plan_add(e, p, s, take);
	}
}

static void emit(struct engine *e, struct seq *s, int32_t tok)
{
	struct engine_req *r = s->req;
	uint64_t now = now_ns();
	pthread_mutex_lock(&e->lock);
	if (!r->timings.t_first_ns)
		e->lat_ttft[e->n_ttft++ % ENGINE_LAT_WINDOW] = now - r->timings.t_submit_ns;
	else
		e->lat_itl[e->n_itl++ % ENGINE_LAT_WINDOW] = now - s->t_last_ns;
	pthread_mutex_unlock(&e->lock);
	if (!r->timings.t_first_ns) {
		r->timings.t_first_ns = now;
		PROBE_FIRST(s->uid, r->id, now - r->timings.t_submit_ns);
	}
	PROBE_TOKEN(s->uid, r->id, tok, s->t_last_ns ? now - s->t_last_ns : 0);
	s->t_last_ns = now;
	s->tokens[s->n_tokens++] = tok;
	s->n_gen++;
	char piece[256], out[512];
	int n = tok_stream_push(e->m->tok, &s->ts, tok, piece, sizeof piece);
	if (n < 0)
		n = 0;
	bool matched = false;
	int m = stopper_feed(&s->stop, piece, n, out, sizeof out, &matched);
	if (r->on_token)
		r->on_token(r, tok, out, m);
	s->stopped = matched;
}

/* Tokens the constraint does not allow get -inf: every sampling mode then
 * draws from the allowed ones. Non-zero when none is allowed. */
static int mask_logits(struct engine *e, struct seq *s, float *logits)
{
	int allowed = s->gm_allowed;
	if (!s->gm_ready) {
		uint64_t t = now_ns();
		allowed = masker_run(e->masker, s->gm, s->gm_mask);
		e->mask_wait_ns += now_ns() - t;
	}
	s->gm_ready = false;
	if (allowed <= 0)
		return -1;
	for (int i = 0; i < e->n_vocab; i++)
		if (!(s->gm_mask[i >> 5] >> (i & 31) & 1))
			logits[i] = -INFINITY;
	return 0;
}

/* The masks of the constrained sequences that sample after this step,
 * queued to the masker: started now when a device runs the forward, else
 * computed in parallel after it (masker_finish). */
static void queue_masks(struct engine *e, const struct plan *p)
{
	if (!e->masker)
		return;
	for (int slot = 0; slot < p->n_slots; slot++) {
		struct seq *s = e->b_owner[slot];
		if (!s->gm || e->b_draft[slot] || s->n_computed + e->b_take[slot] != s->n_tokens)
			continue;
		s->gm_ready = masker_add(e->masker, s->gm, s->gm_mask, &s->gm_allowed) == 0;
	}
	if (e->mask_overlap)
		masker_start(e->masker);
}

/* Takes s off the running list, then finishes it. */
static void remove_and_end(struct engine *e, struct seq *s, enum finish_reason why, int code, const char *msg)
{
	for (int i = 0; i < e->n_running; i++)
		if (e->running[i] == s) {
			remove_running(e, i);
			break;
		}
	finish(e, s, why, code, msg);
}

static void remove_and_finish(struct engine *e, struct seq *s, enum finish_reason why)
{
	remove_and_end(e, s, why, 0, NULL);
}

/* A constrained sequence's verified rows: row i masked by the matcher's
 * state after drafts[0, i), so each position is decided as decoding one
 * token at a time decides it. Returns the drafts left to verify (fewer
 * when the grammar dead-ends after some), or -1 when the first row allows
 * nothing. The matcher is left where it was. */
static int mask_rows(struct engine *e, struct seq *s, float *rows, int k)
{
	size_t pos = gm_matcher_pos(s->gm);
	int i = 0;
	for (; i <= k; i++) {
		if (mask_logits(e, s, rows + (size_t)i * e->n_vocab))
			break;
		if (i < k && gm_matcher_accept_token(s->gm, s->drafts[i]))
			break; /* drafts are checked at proposal: not reached */
	}
	gm_matcher_rollback(s->gm, pos);
	return i == 0 ? -1 : i > k ? k : i - 1;
}

static void remove_and_fail(struct engine *e, struct seq *s, const char *msg)
{
	remove_and_end(e, s, FINISH_ERROR, ENGINE_ERR_INVALID, msg);
}

/* The drafts worth verifying: none past an end-of-generation token, which
 * ends the request where it stands. */
static int drafts_to_eog(const struct engine *e, const struct seq *s, int n)
{
	for (int i = 0; i < n; i++)
		if (tok_is_eog(e->m->tok, s->drafts[i]))
			return i + 1;
	return n;
}

/* The drafts a constrained sequence may verify: the prefix its grammar
 * allows, ending before an end-of-generation token. */
static int allowed_drafts(struct engine *e, struct seq *s, int n)
{
	size_t pos = gm_matcher_pos(s->gm);
	int i = 0;
	while (i < n && !tok_is_eog(e->m->tok, s->drafts[i]) && gm_matcher_accept_token(s->gm, s->drafts[i]) == 0)
		i++;
	gm_matcher_rollback(s->gm, pos);
	return i;
}

/* A sequence's last token and k drafts were computed: keep the tokens the
 * acceptance rule gives, the K/V of the drafts that stood, and give back
 * the blocks past them (their positions are written again next step;
 * only kept positions are ever published). */
static void after_verify(struct engine *e, struct seq *s, const float *rows, int k)
{
	const int old = s->n_tokens;
	float *lg = (float *)rows;
	const float *q = s->drafter->has_q && s->req->sampling.temp > 0 ? s->q : NULL;
	const size_t row_bytes = (size_t)e->n_vocab * sizeof *lg;
	/* the model's distributions, before the sampler changes the rows */
	if (s->req->want_logprob && !e->lp_rows)
		e->lp_rows = malloc((ENGINE_DRAFT_MAX + 1) * row_bytes);
	bool lp = s->req->want_logprob && e->lp_rows;
	if (lp)
		memcpy(e->lp_rows, rows, (size_t)(k + 1) * row_bytes);
	if (s->gm && (k = mask_rows(e, s, lg, k)) < 0) {
		remove_and_fail(e, s, "constraint: no token is allowed here");
		return;
	}
	int n = spec_verify(&s->smp, lg, e->n_vocab, s->drafts, q, k, s->tokens, old, e->vwork);
	s->n_computed = old;
	enum finish_reason why = FINISH_NONE;
	int sampled = 0;
	for (int i = 0; i < n && why == FINISH_NONE; i++) {
		int32_t tok = s->tokens[old + i];
		sampled++;
		if (tok_is_eog(e->m->tok, tok)) {
			why = FINISH_EOS;
			break;
		}
		if (lp)
			logprob_fill(s->req, e->lp_rows + (size_t)i * e->n_vocab, e->n_vocab, tok);
		if (s->gm)
			gm_matcher_accept_token(s->gm, tok);
		emit(e, s, tok);
		if (i < n - 1)
			s->n_computed++; /* a draft that stood: its K/V are right */
		if (s->stopped)
			why = FINISH_STOP;
		else if (s->n_gen >= s->max_tokens || s->n_tokens >= e->n_ctx)
			why = FINISH_LENGTH;
	}
	s->n_drafted += k;
	s->n_accepted += n - 1;
	s->n_passes++;
	spec_pace_update(&s->pace, k, n - 1);
	pthread_mutex_lock(&e->lock);
	e->stats.gen_tokens += sampled;
	e->stats.spec_drafted += k;
	e->stats.spec_accepted += n - 1;
	e->stats.spec_passes++;
	e->stats.spec_tokens += sampled;
	pthread_mutex_unlock(&e->lock);
	kv_seq_commit(&e->kv, &s->kv, s->tokens, s->n_computed);
	if (why != FINISH_NONE) {
		remove_and_finish(e, s, why);
		return;
	}
	kv_seq_truncate(&e->kv, &s->kv, s->n_computed + 1);
}

static void after_forward(struct engine *e, const struct plan *p)
{
	int out_row = 0;
	for (int slot = 0; slot < p->n_slots; slot++) {
		struct seq *s = e->b_owner[slot];
		if (e->b_draft[slot]) {
			after_verify(e, s, e->logits + (size_t)out_row * e->n_vocab, e->b_draft[slot]);
			out_row += e->b_draft[slot] + 1;
			continue;
		}
		s->n_computed += e->b_take[slot];
		kv_seq_commit(&e->kv, &s->kv, s->tokens, s->n_computed);
		if (s->n_computed != s->n_tokens)
			continue;
		float *logits = e->logits + (size_t)out_row++ * e->n_vocab;
		/* the model's distribution, before the sampler changes the logits */
		bool lp = s->req->want_logprob && lp_row(e);
		if (lp)
			memcpy(e->lp_row, logits, (size_t)e->n_vocab * sizeof *logits);
		if (s->gm && mask_logits(e, s, logits)) {
			remove_and_fail(e, s, "constraint: no token is allowed here");
			continue;
		}
		int32_t tok = sampler_sample(&s->smp, logits, s->tokens, s->n_tokens);
		if (lp)
			logprob_fill(s->req, e->lp_row, e->n_vocab, tok);
		if (s->gm)
			gm_matcher_accept_token(s->gm, tok);
		enum finish_reason why = FINISH_NONE;
		s->n_passes++;
		pthread_mutex_lock(&e->lock);
		e->stats.gen_tokens++;
		if (s->drafter) {
			e->stats.spec_passes++;
			e->stats.spec_tokens++;
		}
		pthread_mutex_unlock(&e->lock);
		if (tok_is_eog(e->m->tok, tok)) {
			why = FINISH_EOS;
		} else {
			emit(e, s, tok);
			if (s->stopped) {
				why = FINISH_STOP;
			} else if (s->n_gen >= s->max_tokens || s->n_tokens >= e->n_ctx) {
				why = FINISH_LENGTH;
			}
		}
		if (why != FINISH_NONE)
			remove_and_finish(e, s, why);
	}
}

static void update_stats(struct engine *e, const struct plan *p)
{
	int waiting = 0;
	for (struct seq *s = e->wait_head; s; s = s->next)
		waiting++;
	for (struct seq *s = e->rest_head; s; s = s->next)
		waiting++;
	int64_t used_slots = 0, tokens = 0;
	for (int i = 0; i < e->n_running; i++) {
		used_slots += (int64_t)e->running[i]->kv.n_blocks * e->kv.block_size;
		tokens += e->running[i]->n_computed;
	}
	pthread_mutex_lock(&e->lock);
	e->stats.steps += p->n_tok > 0;
	e->stats.constraint_wait_ns = e->mask_wait_ns;
	e->stats.running = e->n_running;
	e->stats.waiting = waiting;
	for (struct seq *s = e->in_head; s; s = s->next)
		e->stats.waiting++;
	e->stats.kv_blocks_used = kv_used(&e->kv);
	e->stats.kv_blocks_cached = e->kv.n_cached;
	e->stats.kv_waste = used_slots ? (double)(used_slots - tokens) / used_slots : 0;
	if (e->tier) {
		struct kv_tier_stats ts;
		kv_tier_get_stats(e->tier, &ts);
		struct engine_offload *o = &e->stats.offload;
		*o = (struct engine_offload){
			.enabled = ts.enabled, .disabled = ts.disabled, .direct = ts.direct,
			.slots_total = ts.slots_total, .slots_used = ts.slots_used,
			.blocks_out = ts.blocks_out, .bytes_out = ts.bytes_out,
			.blocks_in = ts.blocks_in, .bytes_in = ts.bytes_in,
			.warm_blocks = ts.warm_blocks, .dropped_writes = ts.dropped_writes,
			.zero_copy_in = ts.zero_copy_in,
			.swap_out_blocks = e->swap_out_blocks,
			.err_crc = ts.err_crc, .err_short = ts.err_short, .err_io = ts.err_io,
			.err_nospc = ts.err_nospc, .err_header = ts.err_header,
			.zero_copy_out = ts.zero_copy_out, .pool_unregistered = ts.pool_unregistered,
			.drops = ts.drops, .pool_bufs = ts.pool_bufs, .ring_cqes = ts.ring_cqes,
		};
		for (int i = 0; i < KV_TIER_LAT_BUCKETS && i < 16; i++)
			o->read_lat_us[i] = ts.read_lat[i];
	}
	pthread_mutex_unlock(&e->lock);
}

/* Positions computed this step: prompt positions (first computation or a
 * recompute after preemption) and generated ones. */
static void count_tokens(struct engine *e, const struct plan *p)
{
	uint64_t prefill = 0, decode = 0;
	for (int slot = 0; slot < p->n_slots; slot++) {
		if ((e->b_take[slot] == 1 || e->b_draft[slot]) &&
		    e->b_owner[slot]->n_computed >= e->b_owner[slot]->req->n_prompt)
			decode += e->b_take[slot];
		else
			prefill += e->b_take[slot];
	}
	pthread_mutex_lock(&e->lock);
	e->stats.prefill_tokens += prefill;
	e->stats.decode_tokens += decode;
	pthread_mutex_unlock(&e->lock);
}

static void fail_batch(struct engine *e, const struct plan *p, int r)
{
	for (int slot = 0; slot < p->n_slots; slot++) {
		struct seq *s = e->b_owner[slot];
		for (int i = 0; i < e->n_running; i++)
			if (e->running[i] == s) {
				remove_running(e, i);
				break;
			}
		const char *why = pg_backend_last_error(e->be);
		finish(e, s, FINISH_ERROR, ENGINE_ERR_INVALID,
		       why[0] ? why : r == -EINVAL ? "invalid batch" : "forward failed");
	}
}

/* Logits rows for every running sequence and n drafts. */
static bool logit_room(struct engine *e, int n)
{
	int rows = e->max_seqs + n;
	if (rows <= e->logit_rows)
		return true;
	float *l = realloc(e->logits, (size_t)rows * e->n_vocab * sizeof *l);
	if (!l)
		return false;
	e->logits = l;
	e->logit_rows = rows;
	return true;
}

/* Each decoding sequence that speculates asks its drafter for as many
 * tokens as its pace allows, within what is left of its max_tokens and the
 * context, and within the step's share of drafts; a drafter answers all
 * its sequences at once. */
static void propose_drafts(struct engine *e)
{
	int budget = e->max_batch - e->n_running, total = 0;
	if (budget > SPEC_STEP_DRAFTS)
		budget = SPEC_STEP_DRAFTS;
	for (int i = 0; i < e->n_running; i++)
		e->running[i]->n_draft = 0;
	for (int which = 0; which < 2; which++) {
		struct spec_drafter *dr = which ? e->draft : e->ngram;
		int n = 0;
		for (int i = 0; dr && i < e->n_running; i++) {
			struct seq *s = e->running[i];
			if (s->drafter != dr || s->n_tokens - s->n_computed != 1 || budget <= 0)
				continue;
			int k = spec_pace_want(&s->pace);
			if (k > s->max_tokens - s->n_gen - 1)
				k = s->max_tokens - s->n_gen - 1;
			if (k > e->n_ctx - s->n_tokens - 1) /* room for the token after the last draft */
				k = e->n_ctx - s->n_tokens - 1;
			if (k > budget)
				k = budget;
			if (k <= 0)
				continue;
			if (dr->has_q && s->req->sampling.temp > 0 && !s->q &&
			    !(s->q = malloc((size_t)ENGINE_DRAFT_MAX * e->n_vocab * sizeof *s->q)))
				continue;
			e->asks[n] = (struct spec_ask){
				.state = s->dstate, .tokens = s->tokens, .n_tokens = s->n_tokens, .max = k,
				.sampling = &s->req->sampling, .out = s->drafts, .q = s->q, .stood = s->pace.stood,
			};
			e->ask_seq[n++] = s;
			budget -= k;
		}
		if (!n)
			continue;
		dr->propose(dr, e->asks, n);
		for (int i = 0; i < n; i++) {
			struct seq *s = e->ask_seq[i];
			int got = e->asks[i].n_out;
			got = drafts_to_eog(e, s, got < 0 ? 0 : got > e->asks[i].max ? e->asks[i].max : got);
			if (s->gm && got)
				got = allowed_drafts(e, s, got);
			s->n_draft = got;
			total += got;
			if (dr->costly && !got)
				spec_pace_update(&s->pace, 0, 0);
		}
	}
	if (total && !logit_room(e, total))
		for (int i = 0; i < e->n_running; i++)
			e->running[i]->n_draft = 0;
}

int engine_step(struct engine *e)
{
	pthread_mutex_lock(&e->lock);
	bool drop = e->drop_cache;
	e->drop_cache = false;
	pthread_mutex_unlock(&e->lock);
	if (drop) {
		if (e->tier)
			kv_tier_drop(e->tier, &e->kv);
		kv_drop_cache(&e->kv);
	}
	if (e->tier) {
		kv_tier_reap(e->tier, &e->kv, 0);
		restore_done(e);
	}
	apply_cancels(e);
	propose_drafts(e);
	struct plan p;
	schedule(e, &p);
	if (e->tier) {
		/* blocks a step may take: a chunk's worth and one per sequence */
		int n = kv_tier_clean(e->tier, &e->kv, kv_blocks_needed(&e->kv, e->max_batch) + e->max_seqs);
		if (n > 0)
			PROBE_SWAP_OUT((uint64_t)0, (uint64_t)0, n, (uint64_t)n * kv_pool_block_bytes(&e->kv));
		kv_tier_submit(e->tier); /* the disk works while the batch computes */
	}
	if (p.n_tok > 0) {
		/* the step's clock readings are for its probe alone */
		bool probe = PROBE_STEP_ENABLED();
		uint64_t t0 = probe ? now_ns() : 0;
		for (int i = 0; i < p.n_slots; i++)
			e->b_tables[i] = kv_seq_table(e->b_seqs[i]);
		struct pg_batch b = {
			.n_tokens = p.n_tok, .tokens = e->b_tokens, .pos = e->b_pos, .seq = e->b_seq,
			.want = e->b_want, .ubatch = e->b_ubatch, .n_seqs = p.n_slots, .seqs = e->b_tables,
			.logits = e->logits,
		};
		count_tokens(e, &p);
		queue_masks(e, &p);
		int r = pg_backend_step(e->be, &b);
		if (e->masker) {
			uint64_t t = now_ns();
			masker_finish(e->masker); /* before anything may free a sequence */
			e->mask_wait_ns += now_ns() - t;
		}
		uint64_t t_fwd = probe ? now_ns() : 0;
		if (r)
			fail_batch(e, &p, r);
		else
			after_forward(e, &p);
		if (probe)
			PROBE_STEP(p.n_tok, p.n_slots, now_ns() - t0, t_fwd - t0);
	} else if (e->rest_head) {
		/* nothing else can run: wait for the disk here */
		kv_tier_reap(e->tier, &e->kv, 20);
	}
	update_stats(e, &p);
	pthread_mutex_lock(&e->lock);
	int left = e->n_running + (e->wait_head != NULL) + (e->in_head != NULL) + e->n_cancel +
		   (e->rest_head != NULL);
	pthread_mutex_unlock(&e->lock);
	return left;
}

bool engine_wait(struct engine *e, int timeout_ms)
{
	pthread_mutex_lock(&e->lock);
	bool work = e->n_running || e->wait_head || e->in_head || e->n_cancel || e->rest_head;
	pthread_mutex_unlock(&e->lock);
	if (!work && timeout_ms != 0) {
		struct pollfd pfd = { .fd = e->evfd, .events = POLLIN };
		poll(&pfd, 1, timeout_ms);
	}
	uint64_t v;
	while (read(e->evfd, &v, sizeof v) > 0)
		;
	pthread_mutex_lock(&e->lock);
	work = e->n_running || e->wait_head || e->in_head || e->n_cancel || e->rest_head;
	pthread_mutex_unlock(&e->lock);
	return work;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* p50 and p99 of the last n values of a window (n capped to its size). */
static void percentiles(const uint64_t *ring, uint64_t n, uint64_t *p50, uint64_t *p99)
{
	static __thread uint64_t tmp[ENGINE_LAT_WINDOW];
	size_t m = n < ENGINE_LAT_WINDOW ? n : ENGINE_LAT_WINDOW;
	*p50 = *p99 = 0;
	if (!m)
		return;
	memcpy(tmp, ring, m * sizeof *tmp);
	qsort(tmp, m, sizeof *tmp, cmp_u64);
	*p50 = tmp[(m - 1) / 2];
	*p99 = tmp[(m - 1) * 99 / 100];
}

void engine_get_stats(struct engine *e, struct engine_stats *s)
{
	pthread_mutex_lock(&e->lock);
	*s = e->stats;
	if (e->masker)
		masker_totals(e->masker, &s->constraint_masks, &s->constraint_mask_ns);
	percentiles(e->lat_ttft, e->n_ttft, &s->ttft_p50, &s->ttft_p99);
	percentiles(e->lat_itl, e->n_itl, &s->itl_p50, &s->itl_p99);
	pthread_mutex_unlock(&e->lock);
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	if (e->running) {
		uint64_t *ids;
		int n;
		take_incoming(e, &ids, &n);
		free(ids);
		while (e->n_running) {
			struct seq *s = e->running[--e->n_running];
			finish(e, s, FINISH_CANCEL, 0, "engine shut down");
		}
		struct seq *s;
		while ((s = pop_wait(e)))
			finish(e, s, FINISH_CANCEL, 0, "engine shut down");
		while ((s = e->rest_head)) {
			e->rest_head = s->next;
			finish(e, s, FINISH_CANCEL, 0, "engine shut down");
		}
	}
	if (e->ngram)
		e->ngram->destroy(e->ngram);
	if (e->own_draft)
		e->draft->destroy(e->draft);
	free(e->asks);
	free(e->ask_seq);
	free(e->b_draft);
	free(e->vwork);
	if (e->tier) {
		/* what the pool caches goes down too, for the next start */
		e->kv.evict = NULL;
		kv_tier_flush(e->tier, &e->kv);
		kv_tier_close(e->tier);
	}
	free(e->hbuf);
	free(e->cancel_ids);
	free(e->running);
	free(e->b_tokens);
	free(e->b_pos);
	free(e->b_seq);
	free(e->b_want);
	free(e->b_ubatch);
	free(e->b_seqs);
	free(e->b_tables);
	free(e->b_owner);
	free(e->b_take);
	free(e->logits);
	free(e->lp_row);
	masker_destroy(e->masker);
	gm_vocab_free(e->gm_vocab);
	free(e->lp_rows);
	close_compute(e);
	model_free(e->m);
	if (e->evfd >= 0)
		close(e->evfd);
	pthread_mutex_destroy(&e->lock);
	free(e);
}
