/* kernels/cpu/forward.c — the CPU backend's step: the Llama-family
 * forward pass over one ragged
 * batch: every weight matrix is applied once per step to all the batch's
 * tokens, whichever sequences they belong to.
 *
 * Precision follows llama.cpp's CPU path where it rounds: K and V are kept
 * in the cache's types (f16 unless -ctk/-ctv say otherwise) and attention
 * runs as ggml's flash attention does, on the path llama.cpp would pick
 * (see attn_tiled). Matching those points is
 * what lets greedy decoding agree with llama.cpp token for token.
 */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One KV head of one sequence against some of its tokens: either one
 * token (all the query heads of the group, one-chunk path) or up to TILE_Q
 * consecutive tokens of a sequence on the tiled path. */
struct attn_task {
	int kvh;
	int first, n_tok; /* into tok_order */
	bool tiled;
};

/* A row's flags for pg_matmul_tb: tinyBLAS's order for F32/F16 and
 * unrepacked IQ4_NL weights (tb), the repacked gemm's for Q4_K (g4), the
 * IQ panel gemm's for IQ4_XS (p8). */
struct row_order {
	bool *tb, *g4, *p8;
};

struct fwd_ctx {
	struct pg_pool *pool;
	int max_tokens, n_ctx, n_threads;
	float *x, *xn, *q, *k, *v, *att, *gate, *up, *out_rows;
	float *rope_cs; /* per token of the step: cos, sin of each rotated pair */
	/* attention */
	struct attn_task *tasks; /* max_tokens x n_head_kv */
	int *tok_order;          /* the batch's tokens grouped by sequence */
	int *seq_start;          /* max_tokens + 1 */
	struct attn_scratch *scr; /* one per thread */
	int blk_cap;             /* block pointers each scratch holds */
	/* Per token, which of llama.cpp's two orders its matmuls take (see
	 * plan_order): in every layer before the last one's FFN (all), in the
	 * last layer's FFN (last), and per logits row (out). */
	struct row_order all, last, out;
};

/* Tokens of one sequence that run ggml's tiled path together: as many as
 * its Q tile (GGML_FA_TILE_Q), so the K/V tile is converted once for them. */
#define TILE_Q 64

struct attn_scratch {
	float *q, *out, *work; /* TILE_Q x group rows of head_dim; kernel work */
	int *n_pos;            /* TILE_Q x group */
	const pg_f16 **blk;    /* blk_cap K block pointers, then blk_cap V */
	const uint8_t **blkq;  /* the same, for a quantized cache */
};

static void *xalloc(size_t n)
{
	return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

/* The step's activation buffers (tens of MB at 512 tokens), on huge pages
 * where the kernel has them and faulted in now: left to the first request,
 * their page faults slow its prefill (and `pagoda run`'s only request
 * would pay them every time). A 64-byte header holds the mapping's length. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *big_alloc(size_t n)
{
	const size_t unit = n >= HUGE_PAGE / 2 ? HUGE_PAGE : 4096; /* small models: no 2 MB rounding */
	const size_t len = (n + 64 + unit - 1) & ~(unit - 1), slack = unit == HUGE_PAGE ? HUGE_PAGE : 0;
	char *p = mmap(NULL, len + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	char *a = p;
	if (slack) { /* a 2 MB-aligned run, so that every page of it can be huge */
		a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
		if (a > p)
			munmap(p, (size_t)(a - p));
		munmap(a + len, (size_t)(p + slack - a));
		madvise(a, len, MADV_HUGEPAGE);
	}
	memset(a, 0, len);
	memcpy(a, &len, sizeof len);
	return a + 64;
}

static void big_free(void *q)
{
	if (!q)
		return;
	char *a = (char *)q - 64;
	size_t len;
	memcpy(&len, a, sizeof len);
	munmap(a, len);
}

struct fwd_ctx *fwd_ctx_create(const struct cpu_model *m, int max_tokens, int n_ctx, struct pg_pool *pool)
{
	const struct pg_hparams *hp = &m->hp;
	struct fwd_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->pool = pool;
	c->max_tokens = max_tokens;
	c->n_ctx = n_ctx;
	c->n_threads = pool ? pg_pool_size(pool) : 1;
	size_t T = max_tokens;
	size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
	size_t wide = q_dim > (size_t)hp->n_embd ? q_dim : (size_t)hp->n_embd;
	c->x = big_alloc(T * hp->n_embd * sizeof(float));
	c->xn = big_alloc(T * wide * sizeof(float));
	c->out_rows = big_alloc(T * hp->n_embd * sizeof(float));
	c->q = big_alloc(T * q_dim * sizeof(float));
	c->k = big_alloc(T * kv_dim * sizeof(float));
	c->v = big_alloc(T * kv_dim * sizeof(float));
	c->att = big_alloc(T * q_dim * sizeof(float));
	c->gate = big_alloc(T * hp->n_ff * sizeof(float));
	c->up = big_alloc(T * hp->n_ff * sizeof(float));
	c->rope_cs = xalloc(T * (size_t)hp->rope_dim * sizeof(float));
	c->tasks = calloc(T * hp->n_head_kv, sizeof *c->tasks);
	c->tok_order = calloc(T, sizeof *c->tok_order);
	c->seq_start = calloc(T + 1, sizeof *c->seq_start);
	c->scr = calloc(c->n_threads, sizeof *c->scr);
	struct row_order *const ords[] = { &c->all, &c->last, &c->out };
	bool ord_ok = true;
	for (int i = 0; i < 3; i++) {
		ords[i]->tb = calloc(T, sizeof(bool));
		ords[i]->g4 = calloc(T, sizeof(bool));
		ords[i]->p8 = calloc(T, sizeof(bool));
		ord_ok = ord_ok && ords[i]->tb && ords[i]->g4 && ords[i]->p8;
	}
	if (!ord_ok || !c->x || !c->xn || !c->out_rows || !c->q || !c->k || !c->v || !c->att || !c->gate ||
	    !c->up || !c->rope_cs || !c->tasks || !c->tok_order || !c->seq_start || !c->scr) {
		fwd_ctx_free(c);
		return NULL;
	}
	const size_t rows = (size_t)TILE_Q * (hp->n_head / hp->n_head_kv);
	for (int i = 0; i < c->n_threads; i++) {
		struct attn_scratch *sc = &c->scr[i];
		sc->q = xalloc(rows * hp->head_dim * sizeof(float));
		sc->out = xalloc(rows * hp->head_dim * sizeof(float));
		sc->work = xalloc(pg_attn_tiled_work(hp->head_dim, (int)rows) * sizeof(float));
		sc->n_pos = xalloc(rows * sizeof(int));
		if (!sc->q || !sc->out || !sc->work || !sc->n_pos) {
			fwd_ctx_free(c);
			return NULL;
		}
	}
	return c;
}

void fwd_ctx_free(struct fwd_ctx *c)
{
	if (!c)
		return;
	big_free(c->x);
	big_free(c->xn);
	big_free(c->out_rows);
	big_free(c->q);
	big_free(c->k);
	big_free(c->v);
	big_free(c->att);
	big_free(c->gate);
	big_free(c->up);
	free(c->rope_cs);
	for (int i = 0; c->scr && i < c->n_threads; i++) {
		free(c->scr[i].q);
		free(c->scr[i].out);
		free(c->scr[i].work);
		free(c->scr[i].n_pos);
		free(c->scr[i].blk);
		free(c->scr[i].blkq);
	}
	free(c->scr);
	free(c->tasks);
	free(c->tok_order);
	free(c->seq_start);
	struct row_order *const ords[] = { &c->all, &c->last, &c->out };
	for (int i = 0; i < 3; i++) {
		free(ords[i]->tb);
		free(ords[i]->g4);
		free(ords[i]->p8);
	}
	free(c);
}

/* Below this many multiply-adds a step is cheaper on one thread than the
 * wake-up and join of the pool (a few microseconds, far more when the
 * machine is oversubscribed). */
#define PARALLEL_MIN_WORK (1 << 18)

static struct pg_pool *pool_for(const struct fwd_ctx *c, double work)
{
	return work >= PARALLEL_MIN_WORK ? c->pool : NULL;
}

/* The flags that pick a row's order for this weight type (plan_order). */
static const bool *order_flags(uint32_t type, const struct row_order *o)
{
	if (type == PG_TYPE_Q4_K || type == PG_TYPE_Q4_K_X8)
		return o->g4;
	return type == PG_TYPE_IQ4_XS ? o->p8 : o->tb;
}

static void matmul(struct fwd_ctx *c, const struct cpu_weight *w, const float *x, int n, float *y,
		   const struct row_order *o)
{
	const bool *tb = order_flags(w->type, o);
	pg_matmul_tb(pool_for(c, (double)w->rows * w->cols * n), w->data, w->type, w->rows, w->cols, x, n, y,
		     w->rows, tb);
}

/* Weights that read the same input (Q, K, V; gate, up): one conversion of
 * the input and one pool run, unless a row wants an order that
 * pg_matmul_tb alone gives (tinyBLAS's, a batched kernel's). */
static void matmul_many(struct fwd_ctx *c, const struct cpu_weight *const *w, float *const *y, int count,
			const float *x, int n, const struct row_order *ord)
{
	struct pg_mm_out o[4];
	double work = 0;
	bool fuse = count <= 4;
	for (int i = 0; fuse && i < count; i++) {
		const bool *tb = order_flags(w[i]->type, ord);
		if (pg_matmul_tb_applies(w[i]->type, w[i]->rows, w[i]->cols))
			for (int t = 0; t < n; t++)
				fuse = fuse && !tb[t];
		o[i] = (struct pg_mm_out){ w[i]->data, w[i]->type, w[i]->rows, y[i], w[i]->rows };
		work += (double)w[i]->rows * w[i]->cols * n;
	}
	if (!fuse) {
		for (int i = 0; i < count; i++)
			matmul(c, w[i], x, n, y[i], ord);
		return;
	}
	pg_matmul_many(pool_for(c, work), o, count, w[0]->cols, x, n);
}

static void add_bias(float *y, const float *b, int n_tokens, int dim)
{
	if (!b)
		return;
	for (int t = 0; t < n_tokens; t++)
		for (int i = 0; i < dim; i++)
			y[(size_t)t * dim + i] += b[i];
}

/* ggml_rope_ext with ext_factor 0 and attn_factor 1: theta advances by
 * repeated float multiplication, exactly as ggml builds its cache. The
 * table depends on the position alone, so a step builds it once per token
 * for every layer's Q and K. */
static void rope_table(const struct cpu_model *m, int pos, float *cs)
{
	const struct pg_hparams *hp = &m->hp;
	const int nd = hp->rope_dim;
	const float theta_scale = powf(hp->rope_base, -2.0f / nd);
	float theta = (float)pos;
	for (int i0 = 0; i0 < nd; i0 += 2) {
		float ff = m->rope_freqs ? m->rope_freqs[i0 / 2] : 1.0f;
		float th = hp->rope_freq_scale * (theta / ff);
		cs[i0] = cosf(th);
		cs[i0 + 1] = sinf(th);
		theta *= theta_scale;
	}
}

static void rope(const struct cpu_model *m, float *x, int n_heads, const float *cs)
{
	const struct pg_hparams *hp = &m->hp;
	const int nd = hp->rope_dim, hd = hp->head_dim;
	for (int h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * hd;
		for (int i0 = 0; i0 < nd; i0 += 2) {
			int a = hp->rope_kind == PG_ROPE_NORM ? i0 : i0 / 2;
			int b = hp->rope_kind == PG_ROPE_NORM ? i0 + 1 : i0 / 2 + nd / 2;
			float x0 = v[a], x1 = v[b];
			/* ggml's rotate_pairs, as GCC contracts it (-ffp-contract=fast
			 * with FMA): the first product fused, the second rounded. */
			v[a] = fmaf(x0, cs[i0], -(x1 * cs[i0 + 1]));
			v[b] = fmaf(x0, cs[i0 + 1], x1 * cs[i0]);
		}
	}
}

/* The K (or V) rows of a sequence's i-th block at one layer: position
 * i * block_size + j starts h->row * j bytes further. */
static inline uint8_t *kv_block(const struct cpu_kv_half *h, const struct pg_block_table *s, int layer, int i)
{
	return h->base + (size_t)s->blocks[i] * h->block_stride + (size_t)layer * h->layer_stride;
}

static inline uint8_t *kv_row(const struct cpu_kv *kv, const struct cpu_kv_half *h, const struct pg_block_table *s,
			      int layer, int pos)
{
	const int bs = kv->layout.block_size;
	return kv_block(h, s, layer, pos / bs) + (size_t)(pos % bs) * h->row;
}

static bool kv_quantized(const struct cpu_kv *kv)
{
	return kv->k.type != PG_TYPE_F16 || kv->v.type != PG_TYPE_F16;
}

/* llama.cpp rotates what a quantized cache holds by a Hadamard transform
 * (llama_kv_cache: attn_rot_k, attn_rot_v; heads a multiple of 64): Q and
 * K in chunks of the largest power of two dividing the head, V and the
 * attention output in chunks of 64, which undoes V's. 0: no rotation. */
static int kv_rot_k(const struct cpu_kv *kv, int hd)
{
	if (kv->k.type == PG_TYPE_F16 || hd % 64)
		return 0;
	int n = 64;
	while (hd % (2 * n) == 0)
		n *= 2;
	return n;
}

static int kv_rot_v(const struct cpu_kv *kv, int hd)
{
	return kv->v.type == PG_TYPE_F16 || hd % 64 ? 0 : 64;
}

struct attn_job {
	const struct cpu_model *m;
	struct fwd_ctx *c;
	const struct cpu_kv *kv;
	const struct pg_batch *b;
	int layer, n_tasks;
	atomic_int next;
};

/* The block pointers of this sequence's KV head, for positions [0, n_pos). */
static void attn_kv_of(const struct attn_job *j, struct attn_scratch *sc, const struct pg_block_table *s, int kvh,
		       int n_pos, struct pg_attn_kv *out)
{
	const int bs = j->kv->layout.block_size;
	const int hd = j->m->hp.head_dim, nb = (n_pos + bs - 1) / bs;
	const pg_f16 **kb = sc->blk, **vb = sc->blk + j->c->blk_cap;
	for (int i = 0; i < nb; i++) {
		kb[i] = (const pg_f16 *)kv_block(&j->kv->k, s, j->layer, i) + (size_t)kvh * hd;
		vb[i] = (const pg_f16 *)kv_block(&j->kv->v, s, j->layer, i) + (size_t)kvh * hd;
	}
	*out = (struct pg_attn_kv){ kb, vb, bs, (size_t)j->kv->layout.kv_dim };
}

/* The same for a quantized cache: a head's row is a whole number of the
 * type's blocks (kv_alloc checks), so it starts kvh row bytes of a head in. */
static void attn_kvq_of(const struct attn_job *j, struct attn_scratch *sc, const struct pg_block_table *s, int kvh,
			int n_pos, struct pg_attn_kvq *out)
{
	const struct cpu_kv *kv = j->kv;
	const int bs = kv->layout.block_size;
	const int hd = j->m->hp.head_dim, nb = (n_pos + bs - 1) / bs;
	const size_t kh = pg_row_size(kv->k.type, (uint64_t)hd), vh = pg_row_size(kv->v.type, (uint64_t)hd);
	const uint8_t **kb = sc->blkq, **vb = sc->blkq + j->c->blk_cap;
	for (int i = 0; i < nb; i++) {
		kb[i] = kv_block(&kv->k, s, j->layer, i) + (size_t)kvh * kh;
		vb[i] = kv_block(&kv->v, s, j->layer, i) + (size_t)kvh * vh;
	}
	*out = (struct pg_attn_kvq){ kb, vb, kv->k.type, kv->v.type, bs, kv->k.row, kv->v.row };
}

static void attn_run(const struct attn_job *j, const struct attn_task *tk, struct attn_scratch *sc)
{
	const struct pg_hparams *hp = &j->m->hp;
	const struct pg_batch *b = j->b;
	const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv, q_dim = hp->n_head * hd;
	const float scale = 1.0f / sqrtf((float)hd);
	const int *toks = j->c->tok_order + tk->first;
	const struct pg_block_table *s = &b->seqs[b->seq[toks[0]]];
	int max_pos = 0;
	for (int i = 0; i < tk->n_tok; i++)
		if (b->pos[toks[i]] + 1 > max_pos)
			max_pos = b->pos[toks[i]] + 1;
	const size_t head0 = (size_t)tk->kvh * group * hd;
	if (kv_quantized(j->kv)) { /* the one-chunk path alone (attn_plan) */
		struct pg_attn_kvq kvq;
		attn_kvq_of(j, sc, s, tk->kvh, max_pos, &kvq);
		const size_t off = (size_t)toks[0] * q_dim + head0;
		pg_attn_chunk_q(&kvq, max_pos, hd, scale, j->c->q + off, hd, group, j->c->att + off, hd);
		return;
	}
	struct pg_attn_kv kv;
	attn_kv_of(j, sc, s, tk->kvh, max_pos, &kv);
	if (!tk->tiled) {
		const size_t off = (size_t)toks[0] * q_dim + head0;
		pg_attn_chunk(&kv, max_pos, hd, scale, j->c->q + off, hd, group, j->c->att + off, hd);
		return;
	}
	/* rows token-major, so runs of rows share a length */
	for (int i = 0; i < tk->n_tok; i++) {
		memcpy(sc->q + (size_t)i * group * hd, j->c->q + (size_t)toks[i] * q_dim + head0,
		       (size_t)group * hd * sizeof(float));
		for (int h = 0; h < group; h++)
			sc->n_pos[i * group + h] = b->pos[toks[i]] + 1;
	}
	pg_attn_tiled(&kv, sc->n_pos, hd, scale, sc->q, hd, tk->n_tok * group, sc->out, hd, sc->work);
	for (int i = 0; i < tk->n_tok; i++)
		memcpy(j->c->att + (size_t)toks[i] * q_dim + head0, sc->out + (size_t)i * group * hd,
		       (size_t)group * hd * sizeof(float));
}

static void attn_worker(void *arg, int ith, int nth)
{
	struct attn_job *j = arg;
	for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_tasks;)
		attn_run(j, &j->c->tasks[i], &j->c->scr[ith]);
}

/* Which path llama.cpp takes is decided per ubatch: TILE_Q query tokens or
 * more run tiled, fewer one chunk; on a cache that is not f16 for both K
 * and V, every ubatch runs one chunk. b->ubatch says, per token, how large
 * llama.cpp's ubatch is when it computes that token for the request alone
 * (the engine knows the prompt length); the rule is applied per token, so
 * a result never depends on how the engine split the prompt or what else
 * shares the step. */
static bool attn_tiled(const struct pg_batch *b, int t, bool tiled_ok)
{
	return tiled_ok && (b->ubatch ? b->ubatch[t] : b->n_tokens) >= TILE_Q;
}

/* Tasks: per sequence, runs of consecutive tokens with the same path; a
 * tiled run in tiles of TILE_Q tokens, a one-chunk token alone, each for
 * every KV head. Returns the number of tasks, the tiled ones (the larger)
 * first, the latest tokens (the longest rows) first among them. */
static int attn_plan(const struct cpu_model *m, struct fwd_ctx *c, const struct cpu_kv *kv,
		     const struct pg_batch *b)
{
	const int n_kv = m->hp.n_head_kv;
	int n_seq = 0;
	for (int t = 0; t < b->n_tokens; t++)
		if (b->seq[t] + 1 > n_seq)
			n_seq = b->seq[t] + 1;
	memset(c->seq_start, 0, (size_t)(n_seq + 1) * sizeof *c->seq_start);
	for (int t = 0; t < b->n_tokens; t++)
		c->seq_start[b->seq[t] + 1]++;
	for (int i = 0; i < n_seq; i++)
		c->seq_start[i + 1] += c->seq_start[i];
	for (int t = 0; t < b->n_tokens; t++)
		c->tok_order[c->seq_start[b->seq[t]]++] = t;
	for (int i = n_seq; i > 0; i--)
		c->seq_start[i] = c->seq_start[i - 1];
	c->seq_start[0] = 0;
	const bool tiled_ok = pg_attn_tiled_ok(m->hp.head_dim) && !kv_quantized(kv);
	int n = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int sq = 0; sq < n_seq; sq++) {
			const int end = c->seq_start[sq + 1];
			for (int r1 = end; r1 > c->seq_start[sq];) {
				/* the run [r0, r1) of tokens sharing a path */
				const bool tiled = attn_tiled(b, c->tok_order[r1 - 1], tiled_ok);
				int r0 = r1 - 1;
				while (r0 > c->seq_start[sq] && attn_tiled(b, c->tok_order[r0 - 1], tiled_ok) == tiled)
					r0--;
				if (tiled == (pass == 0)) {
					const int step = tiled ? TILE_Q : 1, cnt = r1 - r0;
					for (int i = (cnt - 1) / step * step; i >= 0; i -= step)
						for (int h = 0; h < n_kv; h++)
							c->tasks[n++] = (struct attn_task){
								h, r0 + i, cnt - i < step ? cnt - i : step, tiled
							};
				}
				r1 = r0;
			}
		}
	return n;
}

/* llama.cpp runs a F32/F16 matmul by tinyBLAS (llamafile_sgemm) when its
 * ubatch has two or more rows, and by ggml_vec_dot for one; the two round
 * differently. A token's ubatch is the one llama.cpp would compute it in
 * for its request alone (b->ubatch), so the order depends on the token,
 * not on what this step batched it with. In the last layer llama.cpp keeps
 * only the rows whose logits are wanted (ggml_get_rows on inp_out_ids)
 * after the attention output, so that layer's FFN and the output matmul
 * run on as many rows as the ubatch wants logits for: a prompt wanting
 * only its last token's logits computes those in vec_dot's order. The
 * wanted tokens of a ubatch are counted among its tokens in this step: the
 * engine puts a ubatch's tokens in one step in position order, and wants
 * at most its last prompt token (pagoda perplexity wants every token of
 * a window that is one ubatch).
 * Q4_K (repacked by llama.cpp): of the rows a matmul sees, the first
 * rows - rows % 4 take the 4-row gemm and the rest the one-row gemv, which
 * round differently too: by the token's place in its ubatch, or among the
 * wanted rows of it in the last layer. IQ4_XS: a matmul of 8 rows or more
 * takes the IQ panel gemm for every row. */
static void plan_order(struct fwd_ctx *c, const struct pg_batch *b)
{
	int n_want = 0, n_seq = 0;
	for (int t = 0; t < b->n_tokens; t++) {
		const int u = b->ubatch ? b->ubatch[t] : b->n_tokens, i = b->ubatch ? b->pos[t] % PG_UBATCH : t;
		c->all.tb[t] = u >= 2;
		c->all.g4[t] = i < u - u % 4;
		c->all.p8[t] = u >= 8;
		n_want += b->want[t];
		if (b->seq[t] + 1 > n_seq)
			n_seq = b->seq[t] + 1;
	}
	if (!b->ubatch) { /* the whole batch is one ubatch */
		for (int t = 0, rank = 0; t < b->n_tokens; t++) {
			c->last.tb[t] = c->all.tb[t] && n_want >= 2;
			c->last.g4[t] = b->want[t] && rank < n_want - n_want % 4;
			c->last.p8[t] = n_want >= 8;
			rank += b->want[t];
		}
		return;
	}
	for (int sq = 0; sq < n_seq; sq++) {
		const int end = c->seq_start[sq + 1];
		for (int i = c->seq_start[sq], i1; i < end; i = i1) {
			const int t = c->tok_order[i], win = b->pos[t] / PG_UBATCH;
			int w = 0;
			for (i1 = i; i1 < end; i1++) {
				const int u = c->tok_order[i1];
				/* a generated token is a ubatch of its own, also when
				 * several of a sequence's are verified in one step */
				if (c->all.tb[u] != c->all.tb[t] || b->pos[u] / PG_UBATCH != win ||
				    (i1 > i && b->ubatch[u] < 2))
					break;
				w += b->want[u];
			}
			for (int q = i, rank = 0; q < i1; q++) {
				const int u = c->tok_order[q];
				c->last.tb[u] = c->all.tb[t] && w >= 2;
				c->last.g4[u] = b->want[u] && rank < w - w % 4;
				c->last.p8[u] = w >= 8;
				rank += b->want[u];
			}
		}
	}
}

/* Room for the block pointers of the longest sequence. */
static int attn_reserve(struct fwd_ctx *c, const struct cpu_kv *kv)
{
	const int bs = kv->layout.block_size, need = (c->n_ctx + bs - 1) / bs + 1;
	if (c->blk_cap >= need)
		return 0;
	for (int i = 0; i < c->n_threads; i++) {
		const pg_f16 **p = realloc(c->scr[i].blk, 2 * (size_t)need * sizeof *p);
		if (p)
			c->scr[i].blk = p;
		const uint8_t **pq = realloc(c->scr[i].blkq, 2 * (size_t)need * sizeof *pq);
		if (pq)
			c->scr[i].blkq = pq;
		if (!p || !pq)
			return -ENOMEM;
	}
	c->blk_cap = need;
	return 0;
}

/* ---- the per-token passes of a layer ----------------------------------------
 * RMSNorm, RoPE and the KV write, SwiGLU and the residual adds touch each
 * token's rows alone: a prompt's tokens are cut into one span per thread,
 * the same functions on the same rows, so the same bits. On one thread they
 * were a tenth of a prompt's wall time, with the other core idle. */
struct tok_job {
	const struct cpu_model *m;
	struct fwd_ctx *c;
	const struct cpu_kv *kv;
	const struct pg_batch *b;
	const float *norm;
	bool add;
	int l, n;
};

static void tok_span(const struct tok_job *j, int ith, int nth, int *t0, int *t1)
{
	*t0 = (int)((int64_t)j->n * ith / nth);
	*t1 = (int)((int64_t)j->n * (ith + 1) / nth);
}

/* An element of these passes costs about what 16 multiply-adds of a
 * matmul do: one token stays on the calling thread. */
static void for_tokens(struct fwd_ctx *c, int n, int dim, void (*fn)(void *, int, int), struct tok_job *j)
{
	pg_pool_run(pool_for(c, 16.0 * n * dim), fn, j);
}

/* x += xn (the sublayer's output) if add, then xn = rmsnorm(x) with norm
 * (the next sublayer's input) unless norm is NULL */
static void residual_norm_worker(void *a, int ith, int nth)
{
	const struct tok_job *j = a;
	const struct pg_hparams *hp = &j->m->hp;
	int t0, t1;
	tok_span(j, ith, nth, &t0, &t1);
	for (int t = t0; t < t1; t++) {
		float *x = j->c->x + (size_t)t * hp->n_embd, *xn = j->c->xn + (size_t)t * hp->n_embd;
		if (j->add)
			for (int i = 0; i < hp->n_embd; i++)
				x[i] += xn[i];
		if (j->norm)
			pg_rmsnorm(xn, x, j->norm, hp->n_embd, hp->norm_eps);
	}
}

static void residual_norm(const struct cpu_model *m, struct fwd_ctx *c, int n, bool add, const float *norm)
{
	struct tok_job j = { .m = m, .c = c, .norm = norm, .add = add, .n = n };
	for_tokens(c, n, m->hp.n_embd, residual_norm_worker, &j);
}

static void rope_kv_worker(void *a, int ith, int nth)
{
	const struct tok_job *j = a;
	const struct pg_hparams *hp = &j->m->hp;
	const int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
	int t0, t1;
	tok_span(j, ith, nth, &t0, &t1);
	for (int t = t0; t < t1; t++) {
		float *q = j->c->q + (size_t)t * q_dim, *k = j->c->k + (size_t)t * kv_dim;
		const struct pg_block_table *s = &j->b->seqs[j->b->seq[t]];
		const float *cs = j->c->rope_cs + (size_t)t * hp->rope_dim;
		rope(j->m, q, hp->n_head, cs);
		rope(j->m, k, hp->n_head_kv, cs);
		const int rk = kv_rot_k(j->kv, hp->head_dim), rv = kv_rot_v(j->kv, hp->head_dim);
		if (rk) {
			pg_kv_rotate(q, q_dim, rk);
			pg_kv_rotate(k, kv_dim, rk);
		}
		if (rv)
			pg_kv_rotate(j->c->v + (size_t)t * kv_dim, kv_dim, rv);
		pg_kv_store_row(j->kv->k.type, k, kv_row(j->kv, &j->kv->k, s, j->l, j->b->pos[t]), kv_dim);
		pg_kv_store_row(j->kv->v.type, j->c->v + (size_t)t * kv_dim, kv_row(j->kv, &j->kv->v, s, j->l, j->b->pos[t]),
				kv_dim);
	}
}

/* The attention output back from V's rotation (kv_rot_v), per token. */
static void unrotate_worker(void *a, int ith, int nth)
{
	const struct tok_job *j = a;
	const struct pg_hparams *hp = &j->m->hp;
	const int q_dim = hp->n_head * hp->head_dim, rv = kv_rot_v(j->kv, hp->head_dim);
	int t0, t1;
	tok_span(j, ith, nth, &t0, &t1);
	for (int t = t0; t < t1; t++)
		pg_kv_rotate(j->c->att + (size_t)t * q_dim, q_dim, rv);
}

/* per row, as ggml_vec_swiglu_f32: where n_ff is not a multiple of the
 * vector width, each row's tail takes libm's expf, not the vector one */
static void swiglu_worker(void *a, int ith, int nth)
{
	const struct tok_job *j = a;
	const int n_ff = j->m->hp.n_ff;
	int t0, t1;
	tok_span(j, ith, nth, &t0, &t1);
	for (int t = t0; t < t1; t++)
		pg_swiglu(j->c->gate + (size_t)t * n_ff, j->c->gate + (size_t)t * n_ff, j->c->up + (size_t)t * n_ff,
			  n_ff);
}

static void attention_layer(const struct cpu_model *m, struct fwd_ctx *c, const struct cpu_kv *kv,
			    const struct pg_batch *b, int l, int n_tasks)
{
	const struct pg_hparams *hp = &m->hp;
	const struct cpu_layer *ly = &m->layers[l];
	const int n = b->n_tokens, q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
	const struct cpu_weight *qkv[] = { &ly->wq, &ly->wk, &ly->wv };
	float *const qkv_out[] = { c->q, c->k, c->v };
	matmul_many(c, qkv, qkv_out, 3, c->xn, n, &c->all);
	add_bias(c->q, ly->bq, n, q_dim);
	add_bias(c->k, ly->bk, n, kv_dim);
	add_bias(c->v, ly->bv, n, kv_dim);
	/* Write every token's K/V first, so later tokens of the same sequence
	 * in this batch see the earlier ones. */
	struct tok_job tj = { .m = m, .c = c, .kv = kv, .b = b, .l = l, .n = n };
	for_tokens(c, n, q_dim + 2 * kv_dim, rope_kv_worker, &tj);
	struct attn_job job = { m, c, kv, b, l, n_tasks, 0 };
	double work = 0;
	for (int t = 0; t < n; t++)
		work += (double)(b->pos[t] + 1) * q_dim * 2;
	pg_pool_run(pool_for(c, work), attn_worker, &job);
	if (kv_rot_v(kv, hp->head_dim))
		for_tokens(c, n, q_dim, unrotate_worker, &tj);
	matmul(c, &ly->wo, c->att, n, c->xn, &c->all);
	residual_norm(m, c, n, true, ly->ffn_norm);
}

static void ffn_layer(const struct cpu_model *m, struct fwd_ctx *c, int n, int l)
{
	const struct pg_hparams *hp = &m->hp;
	const struct cpu_layer *ly = &m->layers[l];
	const struct row_order *ord = l == hp->n_layer - 1 ? &c->last : &c->all;
	const struct cpu_weight *gu[] = { &ly->w_gate, &ly->w_up };
	float *const gu_out[] = { c->gate, c->up };
	matmul_many(c, gu, gu_out, 2, c->xn, n, ord);
	struct tok_job tj = { .m = m, .c = c, .n = n };
	for_tokens(c, n, hp->n_ff, swiglu_worker, &tj);
	matmul(c, &ly->w_down, c->gate, n, c->xn, ord);
	residual_norm(m, c, n, true, l + 1 < hp->n_layer ? m->layers[l + 1].attn_norm : NULL);
}

/* A token whose position lies past its block table, or in a block the
 * pool does not have, would write outside the pool. */
static bool kv_ok(const struct cpu_kv *kv, const struct pg_batch *b, int t)
{
	const struct pg_block_table *s = &b->seqs[b->seq[t]];
	const int i = b->pos[t] / kv->layout.block_size;
	return i < s->n_blocks && s->blocks[i] >= 0 && s->blocks[i] < kv->n_blocks;
}

int cpu_forward(const struct cpu_model *m, struct fwd_ctx *c, const struct cpu_kv *kv, const struct pg_batch *b)
{
	const struct pg_hparams *hp = &m->hp;
	if (b->n_tokens <= 0 || b->n_tokens > c->max_tokens || b->n_seqs <= 0 || b->n_seqs > c->max_tokens)
		return -EINVAL;
	for (int t = 0; t < b->n_tokens; t++) {
		if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab || b->pos[t] < 0 || b->pos[t] >= c->n_ctx ||
		    b->seq[t] < 0 || b->seq[t] >= b->n_seqs || !kv_ok(kv, b, t) || (b->want[t] && !b->logits))
			return -EINVAL;
		pg_dequant_row(m->tok_embd.type,
			       (const uint8_t *)m->tok_embd.data +
				       pg_row_size(m->tok_embd.type, hp->n_embd) * (size_t)b->tokens[t],
			       c->x + (size_t)t * hp->n_embd, hp->n_embd);
	}
	if (attn_reserve(c, kv))
		return -ENOMEM;
	for (int t = 0; t < b->n_tokens; t++)
		rope_table(m, b->pos[t], c->rope_cs + (size_t)t * hp->rope_dim);
	const int n_tasks = attn_plan(m, c, kv, b);
	plan_order(c, b);
	residual_norm(m, c, b->n_tokens, false, m->layers[0].attn_norm);
	for (int l = 0; l < hp->n_layer; l++) {
		attention_layer(m, c, kv, b, l, n_tasks);
		ffn_layer(m, c, b->n_tokens, l);
	}
	int n_out = 0;
	for (int t = 0; t < b->n_tokens; t++)
		if (b->want[t]) {
			c->out.tb[n_out] = c->last.tb[t];
			c->out.g4[n_out] = c->last.g4[t];
			c->out.p8[n_out] = c->last.p8[t];
			pg_rmsnorm(c->out_rows + (size_t)n_out++ * hp->n_embd, c->x + (size_t)t * hp->n_embd,
				   m->output_norm, hp->n_embd, hp->norm_eps);
		}
	if (n_out)
		matmul(c, &m->output, c->out_rows, n_out, b->logits, &c->out);
	return 0;
}
