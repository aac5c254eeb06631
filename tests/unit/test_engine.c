/* tests/unit/test_engine.c — the engine on a real model (stories260K):
 * continuous batching gives each request exactly its solo greedy output,
 * with the prefix cache on or off and with a pool so small that sequences
 * are preempted; a long shared prefix is served from the cache; KV waste
 * stays low; cancel, stop strings and bad requests behave. */
#include "daemon/engine/engine.h"
#include "daemon/kv/kv.h"
#include "daemon/model/gguf.h"
#include "daemon/model/model.h"
#include "daemon/model/tokenizer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/pg_backend.h"
#include "kernels/types.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_OUT 256
#define MAX_TEXT 4096

struct out {
	int32_t ids[MAX_OUT];
	int n;
	char text[MAX_TEXT];
	int tlen;
	bool done;
	enum finish_reason why;
	int err;
	int32_t *prompt;
};

static void on_tok(struct engine_req *r, int32_t tok, const char *text, size_t len)
{
	struct out *o = r->user;
	ck_assert(!o->done);
	if (tok >= 0) {
		ck_assert_int_lt(o->n, MAX_OUT);
		o->ids[o->n++] = tok;
	}
	ck_assert_int_lt(o->tlen + (int)len, MAX_TEXT);
	memcpy(o->text + o->tlen, text, len);
	o->tlen += (int)len;
}

static void on_done(struct engine_req *r, enum finish_reason why, int err, const char *msg)
{
	struct out *o = r->user;
	ck_assert_msg(!o->done, "on_done twice");
	o->done = true;
	o->why = why;
	o->err = err;
}

static bool model_path(char *buf, size_t n)
{
	return testdata_path(buf, n, "models/stories260K.gguf") == 0;
}

static struct engine *make(struct engine_opts o)
{
	char path[4096], err[512];
	if (!model_path(path, sizeof path))
		return NULL;
	o.model_path = strdup(path);
	if (!o.threads)
		o.threads = 2;
	struct engine *e;
	ck_assert_msg(engine_create(&o, &e, err, sizeof err) == 0, "%s", err);
	free((char *)o.model_path);
	return e;
}

static void init_req(struct engine_req *r, struct out *o, uint64_t id, int32_t *prompt, int n, int max)
{
	memset(r, 0, sizeof *r);
	memset(o, 0, sizeof *o);
	r->id = id;
	r->prompt = prompt;
	r->n_prompt = n;
	r->max_tokens = max;
	sampling_defaults(&r->sampling);
	r->sampling.temp = 0;
	r->on_token = on_tok;
	r->on_done = on_done;
	r->user = o;
}

static void drain(struct engine *e)
{
	for (int guard = 0; engine_step(e) > 0; guard++)
		ck_assert_int_lt(guard, 100000);
}

/* A deterministic workload: N random prompts of varied lengths. */
#define N_REQ 32
static int32_t prompts[N_REQ][200];
static int plen[N_REQ], pmax[N_REQ];

static void make_workload(int n_vocab)
{
	srand(1234);
	for (int i = 0; i < N_REQ; i++) {
		plen[i] = 1 + rand() % 150;
		pmax[i] = 8 + rand() % 48;
		prompts[i][0] = 1; /* BOS */
		for (int j = 1; j < plen[i]; j++)
			prompts[i][j] = 3 + rand() % (n_vocab - 3);
		/* a few shared prefixes, so the cache has something to share */
		if (i % 4 == 1 && plen[i] > 40 && plen[i - 1] > 40)
			memcpy(prompts[i], prompts[i - 1], 40 * sizeof(int32_t));
	}
}

static struct out solo[N_REQ];

static void run_solo(void)
{
	static bool done;
	if (done)
		return;
	struct engine *e = make((struct engine_opts){ .no_prefix_cache = true });
	if (!e)
		return;
	make_workload(tok_n_vocab(engine_tokenizer(e)));
	for (int i = 0; i < N_REQ; i++) {
		struct engine_req r;
		init_req(&r, &solo[i], i, prompts[i], plen[i], pmax[i]);
		ck_assert_int_eq(engine_submit(e, &r), 0);
		drain(e);
		ck_assert(solo[i].done);
		ck_assert(solo[i].why == FINISH_LENGTH || solo[i].why == FINISH_EOS);
	}
	engine_destroy(e);
	done = true;
}

static void run_concurrent(struct engine_opts o, struct engine_stats *st)
{
	run_solo();
	struct engine *e = make(o);
	if (!e)
		return;
	static struct engine_req r[N_REQ];
	static struct out out[N_REQ];
	/* two waves, so the second finds the first's prefixes in the cache */
	for (int wave = 0; wave < 2; wave++) {
		for (int i = wave; i < N_REQ; i += 2) {
			init_req(&r[i], &out[i], i, prompts[i], plen[i], pmax[i]);
			ck_assert_int_eq(engine_submit(e, &r[i]), 0);
		}
		for (int k = 0; k < 3; k++)
			engine_step(e);
	}
	drain(e);
	for (int i = 0; i < N_REQ; i++) {
		ck_assert(out[i].done);
		ck_assert_int_eq(out[i].why, solo[i].why);
		ck_assert_int_eq(out[i].n, solo[i].n);
		ck_assert_msg(memcmp(out[i].ids, solo[i].ids, out[i].n * sizeof(int32_t)) == 0,
			      "request %d differs from its solo run", i);
		ck_assert_int_eq(out[i].tlen, solo[i].tlen);
		ck_assert(memcmp(out[i].text, solo[i].text, out[i].tlen) == 0);
	}
	engine_get_stats(e, st);
	ck_assert_int_eq(st->running, 0);
	ck_assert_int_eq(st->waiting, 0);
	ck_assert_int_eq(st->kv_blocks_used, 0);
	ck_assert_int_eq(st->requests_finished, N_REQ);
	engine_destroy(e);
}

START_TEST(test_batched_equals_solo_cache_on)
{
	struct engine_stats st;
	run_concurrent((struct engine_opts){ .max_seqs = 32 }, &st);
	if (!solo[0].done)
		return;
	ck_assert_uint_gt(st.cached_prompt_tokens, 0);
}
END_TEST

START_TEST(test_batched_equals_solo_cache_off)
{
	struct engine_stats st;
	run_concurrent((struct engine_opts){ .max_seqs = 32, .no_prefix_cache = true }, &st);
	if (!solo[0].done)
		return;
	ck_assert_uint_eq(st.cached_prompt_tokens, 0);
}
END_TEST

START_TEST(test_preemption)
{
	struct engine_stats st;
	/* 24 blocks of 16 tokens: far less than 32 sequences need */
	run_concurrent((struct engine_opts){ .max_seqs = 32, .kv_blocks = 24, .n_ctx = 256 }, &st);
	if (!solo[0].done)
		return;
	ck_assert_uint_gt(st.preemptions, 0);
}
END_TEST

START_TEST(test_small_chunks)
{
	struct engine_stats st;
	run_concurrent((struct engine_opts){ .max_seqs = 5, .prefill_chunk = 7, .max_batch_tokens = 20 }, &st);
}
END_TEST

/* Attention takes llama.cpp's path per token (tiled for prompts of 64
 * tokens or more, where the head size allows it): a prompt prefilled 7
 * tokens at a time, beside another request, must give the same tokens as
 * the same prompt prefilled in one step. synth-kq has head_dim 64, so the
 * tiled path is taken on every SIMD ISA. */
static void run_model_file(const char *path, struct engine_opts o, const int32_t *prompt, int n, bool with_other,
			   struct out *res)
{
	char err[512];
	o.model_path = path;
	o.threads = 2;
	struct engine *e;
	ck_assert_msg(engine_create(&o, &e, err, sizeof err) == 0, "%s", err);
	struct engine_req r, r2;
	struct out other;
	init_req(&r, res, 1, (int32_t *)prompt, n, 16);
	ck_assert_int_eq(engine_submit(e, &r), 0);
	if (with_other) {
		init_req(&r2, &other, 2, (int32_t *)prompt + 10, n - 10, 16);
		ck_assert_int_eq(engine_submit(e, &r2), 0);
	}
	drain(e);
	ck_assert(res->done && res->n > 0);
	engine_destroy(e);
}

static void run_model_prompt(const char *model, struct engine_opts o, const int32_t *prompt, int n, bool with_other,
			     struct out *res)
{
	char path[4096];
	ck_assert(testdata_path(path, sizeof path, model) == 0);
	run_model_file(path, o, prompt, n, with_other, res);
}

static void run_long_prompt(struct engine_opts o, const int32_t *prompt, int n, bool with_other, struct out *res)
{
	run_model_prompt("models/synth-kq-Q8_0.gguf", o, prompt, n, with_other, res);
}

START_TEST(test_attention_path_independent_of_chunking)
{
	char path[4096];
	if (testdata_path(path, sizeof path, "models/synth-kq-Q8_0.gguf") != 0)
		return;
	int32_t prompt[150];
	srand(99);
	prompt[0] = 1;
	for (int i = 1; i < 150; i++)
		prompt[i] = 3 + rand() % 500;
	static struct out whole, pieces;
	run_long_prompt((struct engine_opts){ 0 }, prompt, 150, false, &whole);
	run_long_prompt((struct engine_opts){ .prefill_chunk = 7, .max_batch_tokens = 20 }, prompt, 150, true, &pieces);
	ck_assert_int_eq(whole.n, pieces.n);
	ck_assert_msg(memcmp(whole.ids, pieces.ids, whole.n * sizeof(int32_t)) == 0,
		      "a prompt prefilled in pieces differs from the same prompt in one step");
}
END_TEST

/* The streamed matrices are copied into the huge-page mapping by default
 * and left in the file's mapping with PAGODA_MMAP_WEIGHTS=1; where they
 * live changes no token. */
static bool in_copy(const struct cpu_model *m, const void *p)
{
	return m->weights && (const char *)p >= (const char *)m->weights &&
	       (const char *)p < (const char *)m->weights + m->weights_size;
}

/* A model as the CPU backend lays its weights out. */
struct placed {
	struct model *m;
	struct pg_backend *be;
	const struct cpu_model *cm;
};

static void place(const char *path, struct placed *p)
{
	char err[512];
	ck_assert_msg(model_load(path, &p->m, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_open("cpu", NULL, &p->be, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_load_weights(p->be, &p->m->desc, err, sizeof err) == 0, "%s", err);
	p->cm = pg_cpu_backend_model(p->be);
	ck_assert(p->cm);
}

static void unplace(struct placed *p)
{
	pg_backend_close(p->be);
	model_free(p->m);
}

START_TEST(test_weight_placement_changes_nothing)
{
	char path[4096];
	if (testdata_path(path, sizeof path, "models/synth-kq-Q8_0.gguf") != 0)
		return;
	struct placed pl;
	unsetenv("PAGODA_MMAP_WEIGHTS");
	place(path, &pl);
	const struct cpu_model *m = pl.cm;
	ck_assert(in_copy(m, m->layers[0].wq.data) && in_copy(m, m->layers[m->hp.n_layer - 1].w_down.data));
	/* scanned while copied: no -128 in this file's quants */
	ck_assert_uint_eq(m->layers[0].wq.type, PG_TYPE_Q8_0_S127);
	ck_assert_uint_eq(m->layers[m->hp.n_layer - 1].w_down.type, PG_TYPE_Q8_0_S127);
	unplace(&pl);
	setenv("PAGODA_MMAP_WEIGHTS", "1", 1);
	place(path, &pl);
	m = pl.cm;
	ck_assert(!in_copy(m, m->layers[0].wq.data) && !in_copy(m, m->layers[m->hp.n_layer - 1].w_down.data));
	ck_assert_uint_eq(m->layers[0].wq.type, PG_TYPE_Q8_0); /* not scanned */
	unplace(&pl);

	int32_t prompt[80];
	srand(7);
	prompt[0] = 1;
	for (int i = 1; i < 80; i++)
		prompt[i] = 3 + rand() % 500;
	static struct out mapped, copied;
	run_long_prompt((struct engine_opts){ 0 }, prompt, 80, false, &mapped);
	unsetenv("PAGODA_MMAP_WEIGHTS");
	run_long_prompt((struct engine_opts){ 0 }, prompt, 80, false, &copied);
	ck_assert_int_eq(mapped.n, copied.n);
	ck_assert_msg(memcmp(mapped.ids, copied.ids, mapped.n * sizeof(int32_t)) == 0,
		      "weights in the file's mapping and in the copy give different tokens");
}
END_TEST

/* Q4_K: repacked at load (PG_TYPE_Q4_K_X8, also with PAGODA_MMAP_WEIGHTS=1,
 * which leaves only the unrepacked matrices in the file's mapping),
 * prefilled in one step or in pieces next to another request, the prompt
 * rows take llama.cpp's gemm or gemv order by their place in its ubatch,
 * never by pagoda's batching: every variant gives the same tokens. */
START_TEST(test_q4_K_orders_independent_of_placement_and_chunking)
{
	char path[4096];
	const char *name = "models/synth-kq-Q4_K_M.gguf";
	if (testdata_path(path, sizeof path, name) != 0)
		return;
	struct placed pl;
	unsetenv("PAGODA_MMAP_WEIGHTS");
	place(path, &pl);
	int n_x8 = 0;
	for (int l = 0; l < pl.cm->hp.n_layer; l++)
		n_x8 += (pl.cm->layers[l].wq.type == PG_TYPE_Q4_K_X8) + (pl.cm->layers[l].w_gate.type == PG_TYPE_Q4_K_X8);
	ck_assert_int_gt(n_x8, 0);
	unplace(&pl);
	int32_t prompt[150];
	srand(11);
	prompt[0] = 1;
	for (int i = 1; i < 150; i++)
		prompt[i] = 3 + rand() % 500;
	static struct out whole, pieces, mapped;
	run_model_prompt(name, (struct engine_opts){ 0 }, prompt, 150, false, &whole);
	run_model_prompt(name, (struct engine_opts){ .prefill_chunk = 7, .max_batch_tokens = 20 }, prompt, 150, true,
			 &pieces);
	setenv("PAGODA_MMAP_WEIGHTS", "1", 1);
	run_model_prompt(name, (struct engine_opts){ .prefill_chunk = 13 }, prompt, 150, false, &mapped);
	unsetenv("PAGODA_MMAP_WEIGHTS");
	ck_assert_int_eq(whole.n, pieces.n);
	ck_assert_int_eq(whole.n, mapped.n);
	ck_assert_msg(memcmp(whole.ids, pieces.ids, whole.n * sizeof(int32_t)) == 0,
		      "a Q4_K prompt prefilled in pieces differs from the same prompt in one step");
	ck_assert_msg(memcmp(whole.ids, mapped.ids, whole.n * sizeof(int32_t)) == 0,
		      "a Q4_K prompt served from the file's mapping differs from the same prompt in one step");
}
END_TEST

/* The last token's logits of a prompt prefilled `chunk` tokens a step,
 * straight through the CPU backend's step (the engine's tokens carry no
 * last bits). */
static void last_logits(const char *path, const int32_t *prompt, int n, int chunk, float *out)
{
	char err[512];
	struct model *m;
	struct pg_backend *be;
	ck_assert_msg(model_load(path, &m, err, sizeof err) == 0, "%s", err);
	const struct pg_backend_opts bo = { .threads = 2 };
	const struct pg_step_limits lim = { chunk, 1, 512 };
	ck_assert_msg(pg_backend_open("cpu", &bo, &be, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_load_weights(be, &m->desc, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_reserve(be, &lim, err, sizeof err) == 0, "%s", err);
	struct kv_pool kv;
	ck_assert_msg(kv_pool_init(&kv, be, (n + 15) / 16 + 1, 16, m->hp.n_layer, m->hp.n_head_kv * m->hp.head_dim,
				   false, err, sizeof err) == 0,
		      "%s", err);
	struct kv_seq s = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&kv, &s, n), 0);
	const struct pg_block_table table = kv_seq_table(&s);
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk);
	int32_t *seq = calloc((size_t)chunk, sizeof(int32_t)), *ub = malloc(sizeof(int32_t) * (size_t)chunk);
	bool *want = malloc((size_t)chunk);
	for (int p0 = 0; p0 < n; p0 += chunk) {
		const int k = n - p0 < chunk ? n - p0 : chunk;
		for (int i = 0; i < k; i++) {
			pos[i] = p0 + i;
			ub[i] = model_ubatch_of(p0 + i, n);
			want[i] = p0 + i == n - 1;
		}
		struct pg_batch b = { .n_tokens = k, .tokens = prompt + p0, .pos = pos, .seq = seq, .want = want,
				      .ubatch = ub, .n_seqs = 1, .seqs = &table, .logits = out };
		ck_assert_int_eq(pg_backend_step(be, &b), 0);
	}
	free(pos);
	free(seq);
	free(ub);
	free(want);
	kv_seq_release(&kv, &s);
	kv_pool_free(&kv);
	pg_backend_close(be);
	model_free(m);
}

/* IQ4_NL (repacked at load, as llama.cpp does) and IQ4_XS (whose prompt
 * rows take the IQ panel gemm's order): a prompt prefilled in pieces of 7
 * or 13 tokens gives the logits of the same prompt in one step, bit for
 * bit. The models come from pagoda-mkmodel. */
START_TEST(test_iq4_orders_independent_of_placement_and_chunking)
{
	static const char *const types[] = { "IQ4_NL", "IQ4_XS" };
	const char *build = getenv("PAGODA_BUILD");
	char mk[4096], path[256], cmd[8192];
	snprintf(mk, sizeof mk, "%s/pagoda-mkmodel", build ? build : "build");
	if (access(mk, X_OK) != 0) {
		fprintf(stderr, "SKIP: %s not built\n", mk);
		return;
	}
	enum { N = 100, VOCAB = 512 };
	int32_t prompt[N];
	srand(12);
	prompt[0] = 1;
	for (int i = 1; i < N; i++)
		prompt[i] = 3 + rand() % 500;
	static float whole[VOCAB], pieces[VOCAB], other[VOCAB];
	for (int ti = 0; ti < 2; ti++) {
		snprintf(path, sizeof path, "/tmp/pagoda-iq4-%d-%s.gguf", (int)getpid(), types[ti]);
		snprintf(cmd, sizeof cmd,
			 "'%s' --dim 256 --ffn 768 --layers 2 --heads 4 --kv-heads 2 --vocab %d --ctx 512 "
			 "--type %s --seed 7 -q -o '%s'",
			 mk, VOCAB, types[ti], path);
		ck_assert_int_eq(system(cmd), 0);
		unsetenv("PAGODA_MMAP_WEIGHTS");
		struct placed pl;
		place(path, &pl);
		ck_assert_uint_eq(pl.cm->layers[0].w_gate.type, ti ? PG_TYPE_IQ4_XS : PG_TYPE_IQ4_NL_X8);
		ck_assert_int_eq(pl.cm->hp.n_vocab, VOCAB);
		unplace(&pl);
		last_logits(path, prompt, N, N, whole);
		last_logits(path, prompt, N, 7, pieces);
		last_logits(path, prompt, N, 13, other);
		unlink(path);
		ck_assert_msg(memcmp(whole, pieces, sizeof whole) == 0 && memcmp(whole, other, sizeof whole) == 0,
			      "%s: a prompt prefilled in pieces differs from the same prompt in one step", types[ti]);
	}
}
END_TEST

/* A Q8_0 matrix holding a -128 quant keeps PG_TYPE_Q8_0 (the kernels that
 * assume [-127, 127] would get it wrong); the others are still marked. */
START_TEST(test_q8_0_m128_found_at_load)
{
	char path[4096], err[512], tmp[] = "/tmp/pagoda-m128-XXXXXX";
	if (testdata_path(path, sizeof path, "models/synth-kq-Q8_0.gguf") != 0)
		return;
	struct gguf_file *g;
	ck_assert_msg(gguf_open(path, &g, err, sizeof err) == 0, "%s", err);
	const struct gguf_tensor *t = gguf_find_tensor(g, "blk.1.ffn_up.weight");
	ck_assert(t && t->type == PG_TYPE_Q8_0 && t->ne[1] > 3);
	/* the last quant of row 3's second block */
	const size_t at = (size_t)((const uint8_t *)t->data - g->base) + 3 * pg_row_size(PG_TYPE_Q8_0, t->ne[0]) +
			  sizeof(block_q8_0) + offsetof(block_q8_0, qs) + QK8_0 - 1;
	FILE *in = fopen(path, "rb");
	const int fd = mkstemp(tmp);
	ck_assert(in && fd >= 0);
	uint8_t *buf = malloc(g->size);
	ck_assert_uint_eq(fread(buf, 1, g->size, in), g->size);
	buf[at] = 0x80;
	ck_assert_int_eq(write(fd, buf, g->size), (ssize_t)g->size);
	close(fd);
	fclose(in);
	free(buf);
	gguf_close(g);
	unsetenv("PAGODA_MMAP_WEIGHTS");
	struct placed pl;
	place(tmp, &pl);
	unlink(tmp);
	ck_assert_uint_eq(pl.cm->layers[1].w_up.type, PG_TYPE_Q8_0);
	ck_assert_uint_eq(pl.cm->layers[1].w_gate.type, PG_TYPE_Q8_0_S127);
	ck_assert_uint_eq(pl.cm->layers[0].w_up.type, PG_TYPE_Q8_0_S127);
	unplace(&pl);
}
END_TEST

/* A 1,100-token system prompt shared by later requests. */
START_TEST(test_shared_prefix)
{
	struct engine *e = make((struct engine_opts){ .max_seqs = 8 });
	if (!e)
		return;
	enum { SYS = 1100, Q = 20, N = 5 };
	static int32_t p[N][SYS + Q];
	int nv = tok_n_vocab(engine_tokenizer(e));
	srand(99);
	for (int j = 0; j < SYS; j++)
		p[0][j] = j == 0 ? 1 : 3 + rand() % (nv - 3);
	for (int i = 0; i < N; i++) {
		memcpy(p[i], p[0], SYS * sizeof(int32_t));
		for (int j = 0; j < Q; j++)
			p[i][SYS + j] = 3 + rand() % (nv - 3);
	}
	struct engine_req r[N];
	struct out o[N];
	init_req(&r[0], &o[0], 0, p[0], SYS + Q, 4);
	engine_submit(e, &r[0]);
	drain(e);
	struct engine_stats before;
	engine_get_stats(e, &before);
	ck_assert_uint_ge(before.prefill_tokens, SYS + Q);
	for (int i = 1; i < N; i++) {
		init_req(&r[i], &o[i], i, p[i], SYS + Q, 4);
		engine_submit(e, &r[i]);
	}
	drain(e);
	struct engine_stats after;
	engine_get_stats(e, &after);
	for (int i = 1; i < N; i++) {
		ck_assert(o[i].done);
		double hit = (double)r[i].timings.n_cached / r[i].timings.n_prompt;
		ck_assert_msg(hit > 0.9, "request %d hit rate %.3f", i, hit);
	}
	/* the shared part was not prefilled again: only each question's tail */
	uint64_t recomputed = after.prefill_tokens - before.prefill_tokens;
	ck_assert_msg(recomputed < (uint64_t)(N - 1) * (Q + 16), "prefilled %llu tokens",
		      (unsigned long long)recomputed);
	ck_assert_uint_ge(after.cached_prompt_tokens, (uint64_t)(N - 1) * (SYS - 16));
	engine_destroy(e);
}
END_TEST

/* 64 sequences of random lengths at once: allocated-but-empty slots stay
 * under 5% of the allocated ones while they all run. */
START_TEST(test_kv_waste)
{
	enum { N = 64 };
	struct engine *e = make((struct engine_opts){ .max_seqs = N, .max_batch_tokens = 4096, .n_ctx = 1024 });
	if (!e)
		return;
	static int32_t p[N][600];
	static struct engine_req r[N];
	static struct out o[N];
	int nv = tok_n_vocab(engine_tokenizer(e));
	srand(5);
	for (int i = 0; i < N; i++) {
		int n = 200 + rand() % 400;
		for (int j = 0; j < n; j++)
			p[i][j] = 3 + rand() % (nv - 3);
		init_req(&r[i], &o[i], i, p[i], n, 40);
		engine_submit(e, &r[i]);
	}
	double sum = 0;
	int samples = 0;
	while (engine_step(e) > 0) {
		struct engine_stats st;
		engine_get_stats(e, &st);
		if (st.running == N) {
			sum += st.kv_waste;
			samples++;
		}
	}
	ck_assert_int_gt(samples, 0);
	ck_assert_msg(sum / samples < 0.05, "KV waste %.4f", sum / samples);
	engine_destroy(e);
}
END_TEST

static void prompt_of(struct engine *e, const char *text, int32_t *ids, int *n)
{
	const struct tokenizer *t = engine_tokenizer(e);
	*n = tok_encode(t, text, strlen(text), tok_add_bos(t), true, ids, 256);
	ck_assert_int_gt(*n, 0);
}

START_TEST(test_stop_string)
{
	struct engine *e = make((struct engine_opts){ 0 });
	if (!e)
		return;
	int32_t ids[256];
	int n;
	prompt_of(e, "Once upon a time", ids, &n);
	struct engine_req r;
	struct out o;
	init_req(&r, &o, 1, ids, n, 128);
	engine_submit(e, &r);
	drain(e);
	const char *lily = strstr(o.text, "Lily");
	ck_assert_ptr_nonnull(lily);
	int before = (int)(lily - o.text);

	struct out o2;
	init_req(&r, &o2, 2, ids, n, 128);
	r.n_stop = 2;
	strcpy(r.stop[0], "Lily");
	strcpy(r.stop[1], "zzzz-never");
	engine_submit(e, &r);
	drain(e);
	ck_assert_int_eq(o2.why, FINISH_STOP);
	ck_assert_int_eq(o2.tlen, before);
	ck_assert(memcmp(o2.text, o.text, before) == 0);
	engine_destroy(e);
}
END_TEST

START_TEST(test_errors_and_cancel)
{
	struct engine *e = make((struct engine_opts){ .n_ctx = 64 });
	if (!e)
		return;
	int32_t ids[80];
	for (int i = 0; i < 80; i++)
		ids[i] = 10 + i;
	struct engine_req r;
	struct out o;
	init_req(&r, &o, 1, ids, 70, 1);
	ck_assert_int_eq(engine_submit(e, &r), ENGINE_ERR_CONTEXT);
	ck_assert(o.done && o.why == FINISH_ERROR && o.err == ENGINE_ERR_CONTEXT);
	init_req(&r, &o, 2, ids, 40, 30);
	ck_assert_int_eq(engine_submit(e, &r), ENGINE_ERR_CONTEXT);
	init_req(&r, &o, 3, ids, 0, 4);
	ck_assert_int_eq(engine_submit(e, &r), ENGINE_ERR_INVALID);
	ids[5] = 1 << 20;
	init_req(&r, &o, 4, ids, 10, 4);
	ck_assert_int_eq(engine_submit(e, &r), ENGINE_ERR_INVALID);
	ids[5] = 15;

	/* cancel while running: on_done(CANCEL) once, nothing after */
	init_req(&r, &o, 5, ids, 10, 50);
	ck_assert_int_eq(engine_submit(e, &r), 0);
	engine_step(e);
	engine_step(e);
	engine_cancel(e, 5);
	drain(e);
	ck_assert(o.done);
	ck_assert_int_eq(o.why, FINISH_CANCEL);
	ck_assert_int_lt(o.n, 50);
	struct engine_stats st;
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.requests_cancelled, 1);
	ck_assert_int_eq(st.kv_blocks_used, 0);

	/* draining refuses new work */
	engine_drain(e);
	init_req(&r, &o, 6, ids, 10, 4);
	ck_assert_int_eq(engine_submit(e, &r), ENGINE_ERR_DRAINING);
	ck_assert(o.done && o.why == FINISH_ERROR);
	engine_destroy(e);
}
END_TEST

/* ---- a quantized KV cache (synth-kq: head size 64) ---------------------------- */

static struct engine *make_file(const char *model, struct engine_opts o)
{
	char path[4096], err[512];
	if (testdata_path(path, sizeof path, model) != 0)
		return NULL;
	o.model_path = path;
	o.threads = 2;
	struct engine *e;
	ck_assert_msg(engine_create(&o, &e, err, sizeof err) == 0, "%s", err);
	return e;
}

/* The same --kv-mem holds 1.88x the tokens of f16 in q8_0 (34 bytes a 32
 * elements against 64) and 3.56x in q4_0 (18); the issue asks 1.8 and 3.2. */
START_TEST(test_kvq_capacity)
{
	const char *names[] = { NULL, "q8_0", "q4_0", "q8_0" };
	const char *vnames[] = { NULL, "q8_0", "q4_0", "f16" };
	int64_t tokens[4];
	for (int i = 0; i < 4; i++) {
		struct engine *e = make_file("models/synth-kq-Q8_0.gguf",
					     (struct engine_opts){ .kv_mem = 64ll << 20, .n_ctx = 256, .cache_type_k = names[i],
								   .cache_type_v = vnames[i] });
		if (!e)
			return;
		struct engine_stats st;
		engine_get_stats(e, &st);
		ck_assert_str_eq(st.kv_type_k, names[i] ? names[i] : "f16");
		ck_assert_str_eq(st.kv_type_v, vnames[i] ? vnames[i] : "f16");
		ck_assert_int_eq(st.kv_tokens_total, st.kv_blocks_total * 16);
		ck_assert_int_le(st.kv_blocks_total * st.kv_block_bytes, 64ll << 20);
		tokens[i] = st.kv_tokens_total;
		engine_destroy(e);
	}
	ck_assert_msg(tokens[1] * 10 >= tokens[0] * 18, "q8_0: %lld tokens, f16 %lld", (long long)tokens[1],
		      (long long)tokens[0]);
	ck_assert_msg(tokens[2] * 10 >= tokens[0] * 32, "q4_0: %lld tokens, f16 %lld", (long long)tokens[2],
		      (long long)tokens[0]);
	ck_assert(tokens[3] > tokens[0] && tokens[3] < tokens[1]);
}
END_TEST

/* 32 requests at once on a pool far too small for them (preemption,
 * recompute) give what each gives alone, on q8_0 and on q4_0 caches. */
START_TEST(test_kvq_preemption_equals_solo)
{
	const char *type = _i ? "q4_0" : "q8_0";
	static struct out alone[N_REQ], out[N_REQ];
	static struct engine_req r[N_REQ];
	const struct engine_opts base = { .cache_type_k = type, .cache_type_v = type, .n_ctx = 256 };
	struct engine_opts o = base;
	o.no_prefix_cache = true;
	struct engine *e = make_file("models/synth-kq-Q8_0.gguf", o);
	if (!e)
		return;
	make_workload(tok_n_vocab(engine_tokenizer(e)));
	for (int i = 0; i < N_REQ; i++) {
		init_req(&r[i], &alone[i], i, prompts[i], plen[i], pmax[i]);
		ck_assert_int_eq(engine_submit(e, &r[i]), 0);
		drain(e);
		ck_assert(alone[i].done);
	}
	engine_destroy(e);
	o = base;
	o.max_seqs = 32;
	o.kv_blocks = 24;
	e = make_file("models/synth-kq-Q8_0.gguf", o);
	for (int i = 0; i < N_REQ; i++) {
		init_req(&r[i], &out[i], i, prompts[i], plen[i], pmax[i]);
		ck_assert_int_eq(engine_submit(e, &r[i]), 0);
	}
	drain(e);
	for (int i = 0; i < N_REQ; i++) {
		ck_assert(out[i].done);
		ck_assert_int_eq(out[i].why, alone[i].why);
		ck_assert_int_eq(out[i].n, alone[i].n);
		ck_assert_msg(!memcmp(out[i].ids, alone[i].ids, out[i].n * sizeof(int32_t)),
			      "%s: request %d differs from its solo run", type, i);
	}
	struct engine_stats st;
	engine_get_stats(e, &st);
	ck_assert_uint_gt(st.preemptions, 0);
	ck_assert_str_eq(st.kv_type_k, type);
	engine_destroy(e);
}
END_TEST

/* llama.cpp refuses a cache type whose block does not divide the head
 * size; so does the engine, saying which (stories260K: head size 8). */
START_TEST(test_kvq_head_size_refused)
{
	char path[4096], err[512];
	if (!model_path(path, sizeof path))
		return;
	struct engine *e = NULL;
	struct engine_opts o = { .model_path = path, .threads = 1, .cache_type_v = "q5_1" };
	ck_assert_int_eq(engine_create(&o, &e, err, sizeof err), -EINVAL);
	ck_assert_ptr_null(e);
	ck_assert_msg(strstr(err, "V cache type q5_1 with block size 32 does not divide the head size 8"), "%s", err);
	o.cache_type_v = "q8";
	ck_assert_int_eq(engine_create(&o, &e, err, sizeof err), -EINVAL);
	ck_assert_msg(strstr(err, "unknown V cache type 'q8'"), "%s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("stories260K");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_batched_equals_solo_cache_on);
	tcase_add_test(tc, test_batched_equals_solo_cache_off);
	tcase_add_test(tc, test_preemption);
	tcase_add_test(tc, test_small_chunks);
	tcase_add_test(tc, test_attention_path_independent_of_chunking);
	tcase_add_test(tc, test_weight_placement_changes_nothing);
	tcase_add_test(tc, test_q4_K_orders_independent_of_placement_and_chunking);
	tcase_add_test(tc, test_iq4_orders_independent_of_placement_and_chunking);
	tcase_add_test(tc, test_q8_0_m128_found_at_load);
	tcase_add_test(tc, test_shared_prefix);
	tcase_add_test(tc, test_kv_waste);
	tcase_add_test(tc, test_stop_string);
	tcase_add_test(tc, test_errors_and_cancel);
	tcase_add_test(tc, test_kvq_capacity);
	tcase_add_loop_test(tc, test_kvq_preemption_equals_solo, 0, 2);
	tcase_add_test(tc, test_kvq_head_size_refused);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	/* one process: the solo reference runs are computed once and shared */
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
