/* daemon/model/forward.c — the Llama-family forward pass over one ragged
 * batch: every weight matrix is applied once per step to all the batch's
 * tokens, whichever sequences they belong to.
 *
 * Precision follows llama.cpp's CPU path where it rounds: K and V are kept
 * in f16, the query is rounded to f16 before q·k, and attention runs as
 * ggml's flash attention does (see attend_one). Matching those points is
 * what lets greedy decoding agree with llama.cpp token for token.
 */
#include "daemon/model/model.h"
#include "daemon/kv/kv.h"
#include "kernels/backend.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fwd_ctx {
	struct pg_pool *pool;
	int max_tokens, n_ctx, n_threads;
	float *x, *xn, *q, *k, *v, *att, *gate, *up, *out_rows;
	pg_f16 *acc16;   /* n_threads x head_dim */
	pg_f16 *q16;     /* max_tokens x q_dim */
};

static void *xalloc(size_t n)
{
	return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

struct fwd_ctx *fwd_ctx_create(const struct model *m, int max_tokens, int n_ctx, struct pg_pool *pool)
{
	const struct model_hparams *hp = &m->hp;
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
	c->x = xalloc(T * hp->n_embd * sizeof(float));
	c->xn = xalloc(T * wide * sizeof(float));
	c->out_rows = xalloc(T * hp->n_embd * sizeof(float));
	c->q = xalloc(T * q_dim * sizeof(float));
	c->k = xalloc(T * kv_dim * sizeof(float));
	c->v = xalloc(T * kv_dim * sizeof(float));
	c->att = xalloc(T * q_dim * sizeof(float));
	c->gate = xalloc(T * hp->n_ff * sizeof(float));
	c->up = xalloc(T * hp->n_ff * sizeof(float));
	c->acc16 = xalloc((size_t)c->n_threads * hp->head_dim * sizeof(pg_f16));
	c->q16 = xalloc(T * q_dim * sizeof(pg_f16));
	if (!c->x || !c->xn || !c->out_rows || !c->q || !c->k || !c->v || !c->att || !c->gate ||
	    !c->up || !c->acc16 || !c->q16) {
		fwd_ctx_free(c);
		return NULL;
	}
	return c;
}

void fwd_ctx_free(struct fwd_ctx *c)
{
	if (!c)
		return;
	free(c->x);
	free(c->xn);
	free(c->out_rows);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->gate);
	free(c->up);
	free(c->acc16);
	free(c->q16);
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

static void matmul(struct fwd_ctx *c, const struct model_weight *w, const float *x, int n, float *y)
{
	pg_matmul(pool_for(c, (double)w->rows * w->cols * n), w->data, w->type, w->rows, w->cols, x, n, y,
		  w->rows);
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
 * repeated float multiplication, exactly as ggml builds its cache. */
static void rope(const struct model *m, float *x, int n_heads, int pos)
{
	const struct model_hparams *hp = &m->hp;
	const int nd = hp->rope_dim, hd = hp->head_dim;
	const float theta_scale = powf(hp->rope_base, -2.0f / nd);
	float cs[2 * 512];
	float theta = (float)pos;
	for (int i0 = 0; i0 < nd; i0 += 2) {
		float ff = m->rope_freqs ? m->rope_freqs[i0 / 2] : 1.0f;
		float th = hp->rope_freq_scale * (theta / ff);
		cs[i0] = cosf(th);
		cs[i0 + 1] = sinf(th);
		theta *= theta_scale;
	}
	for (int h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * hd;
		for (int i0 = 0; i0 < nd; i0 += 2) {
			int a = hp->rope_kind == ROPE_NORM ? i0 : i0 / 2;
			int b = hp->rope_kind == ROPE_NORM ? i0 + 1 : i0 / 2 + nd / 2;
			float x0 = v[a], x1 = v[b];
			/* ggml's rotate_pairs, as GCC contracts it (-ffp-contract=fast
			 * with FMA): the first product fused, the second rounded. */
			v[a] = fmaf(x0, cs[i0], -(x1 * cs[i0 + 1]));
			v[b] = fmaf(x0, cs[i0 + 1], x1 * cs[i0]);
		}
	}
}

struct attn_job {
	const struct model *m;
	struct fwd_ctx *c;
	const struct kv_pool *kv;
	const struct fwd_batch *b;
	int layer;
};

/* Online softmax over every earlier position of the token's sequence, with
 * the weighted V sum kept in f16 and rescaled whenever the running maximum
 * grows: the arithmetic of ggml's CPU flash attention for an f16 cache,
 * which is what llama.cpp runs by default. */
static void attend_one(const struct attn_job *j, const pg_f16 *q16, const struct kv_seq *s, int n_pos,
		       int kvh, pg_f16 *acc, float *out)
{
	const int hd = j->m->hp.head_dim;
	const float scale = 1.0f / sqrtf((float)hd);
	float M = -INFINITY, S = 0.0f;
	memset(acc, 0, hd * sizeof *acc);
	for (int p = 0; p < n_pos; p++) {
		const pg_f16 *kr = kv_k_row(j->kv, s, j->layer, p) + (size_t)kvh * hd;
		const pg_f16 *vr = kv_v_row(j->kv, s, j->layer, p) + (size_t)kvh * hd;
		float sc = pg_dot_f16(q16, kr, hd) * scale, ms = 1.0f, vs = 1.0f;
		if (sc > M) {
			float m_old = M;
			M = sc;
			ms = expf(m_old - M);
			pg_f16_scale_row(acc, ms, hd);
		} else {
			vs = expf(sc - M);
		}
		pg_f16_fma_row(acc, vr, vs, hd);
		S = S * ms + vs;
	}
	const float inv = S == 0.0f ? 0.0f : 1.0f / S;
	for (int d = 0; d < hd; d++)
		out[d] = pg_f16_to_f32(acc[d]) * inv;
}

/* One (token, head) pair per task. */
static void attn_worker(void *arg, int ith, int nth)
{
	const struct attn_job *j = arg;
	const struct model_hparams *hp = &j->m->hp;
	const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
	const int q_dim = hp->n_head * hd;
	pg_f16 *acc = j->c->acc16 + (size_t)ith * hd;
	const int n_tasks = j->b->n * hp->n_head;
	for (int task = ith; task < n_tasks; task += nth) {
		const int t = task / hp->n_head, h = task % hp->n_head;
		const size_t off = (size_t)t * q_dim + (size_t)h * hd;
		attend_one(j, j->c->q16 + off, j->b->seqs[j->b->seq[t]], j->b->pos[t] + 1, h / group, acc,
			   j->c->att + off);
	}
}

static void attention_layer(const struct model *m, struct fwd_ctx *c, struct kv_pool *kv,
			    const struct fwd_batch *b, int l)
{
	const struct model_hparams *hp = &m->hp;
	const struct model_layer *ly = &m->layers[l];
	const int n = b->n, q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
	for (int t = 0; t < n; t++)
		pg_rmsnorm(c->xn + (size_t)t * hp->n_embd, c->x + (size_t)t * hp->n_embd, ly->attn_norm,
			   hp->n_embd, hp->norm_eps);
	matmul(c, &ly->wq, c->xn, n, c->q);
	matmul(c, &ly->wk, c->xn, n, c->k);
	matmul(c, &ly->wv, c->xn, n, c->v);
	add_bias(c->q, ly->bq, n, q_dim);
	add_bias(c->k, ly->bk, n, kv_dim);
	add_bias(c->v, ly->bv, n, kv_dim);
	/* Write every token's K/V first, so later tokens of the same sequence
	 * in this batch see the earlier ones. */
	for (int t = 0; t < n; t++) {
		float *q = c->q + (size_t)t * q_dim, *k = c->k + (size_t)t * kv_dim;
		const struct kv_seq *s = b->seqs[b->seq[t]];
		rope(m, q, hp->n_head, b->pos[t]);
		rope(m, k, hp->n_head_kv, b->pos[t]);
		pg_f32_to_f16_row(q, c->q16 + (size_t)t * q_dim, q_dim);
		pg_f32_to_f16_row(k, kv_k_row(kv, s, l, b->pos[t]), kv_dim);
		pg_f32_to_f16_row(c->v + (size_t)t * kv_dim, kv_v_row(kv, s, l, b->pos[t]), kv_dim);
	}
	struct attn_job job = { m, c, kv, b, l };
	double work = 0;
	for (int t = 0; t < n; t++)
		work += (double)(b->pos[t] + 1) * q_dim * 2;
	pg_pool_run(pool_for(c, work), attn_worker, &job);
	matmul(c, &ly->wo, c->att, n, c->xn);
	for (size_t i = 0; i < (size_t)n * hp->n_embd; i++)
		c->x[i] += c->xn[i];
}

static void ffn_layer(const struct model *m, struct fwd_ctx *c, int n, int l)
{
	const struct model_hparams *hp = &m->hp;
	const struct model_layer *ly = &m->layers[l];
	for (int t = 0; t < n; t++)
		pg_rmsnorm(c->xn + (size_t)t * hp->n_embd, c->x + (size_t)t * hp->n_embd, ly->ffn_norm,
			   hp->n_embd, hp->norm_eps);
	matmul(c, &ly->w_gate, c->xn, n, c->gate);
	matmul(c, &ly->w_up, c->xn, n, c->up);
	pg_swiglu(c->gate, c->gate, c->up, (int64_t)n * hp->n_ff);
	matmul(c, &ly->w_down, c->gate, n, c->xn);
	for (size_t i = 0; i < (size_t)n * hp->n_embd; i++)
		c->x[i] += c->xn[i];
}

int model_forward(const struct model *m, struct fwd_ctx *c, struct kv_pool *kv, const struct fwd_batch *b)
{
	const struct model_hparams *hp = &m->hp;
	if (b->n <= 0 || b->n > c->max_tokens)
		return -EINVAL;
	for (int t = 0; t < b->n; t++) {
		if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab || b->pos[t] < 0 || b->pos[t] >= c->n_ctx)
			return -EINVAL;
		pg_dequant_row(m->tok_embd.type,
			       (const uint8_t *)m->tok_embd.data +
				       pg_row_size(m->tok_embd.type, hp->n_embd) * (size_t)b->tokens[t],
			       c->x + (size_t)t * hp->n_embd, hp->n_embd);
	}
	for (int l = 0; l < hp->n_layer; l++) {
		attention_layer(m, c, kv, b, l);
		ffn_layer(m, c, b->n, l);
	}
	int n_out = 0;
	for (int t = 0; t < b->n; t++)
		if (b->want[t])
			pg_rmsnorm(c->out_rows + (size_t)n_out++ * hp->n_embd, c->x + (size_t)t * hp->n_embd,
				   m->output_norm, hp->n_embd, hp->norm_eps);
	if (n_out)
		matmul(c, &m->output, c->out_rows, n_out, b->logits);
	return 0;
}
