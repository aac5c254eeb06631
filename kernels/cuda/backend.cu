/* kernels/cuda/backend.cu — the CUDA backend behind kernels/pg_backend.h:
 * weights and the KV pool in device memory, one stream, a step as a
 * sequence of kernels (kern.h), captured as a CUDA graph per batch-size
 * bucket for small batches. Built into libpagoda-cuda.so; the registry
 * dlopens it and calls pg_backend_cuda_entry. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kern.h"
#include "kernels/pg_backend.h"

#define MIB (1024.0 * 1024.0)
/* Device memory left alone for the CUDA context, kernels' stacks and the
 * driver's own allocations. */
#define MEM_MARGIN (256ll << 20)
/* Batches up to this many tokens run as a captured graph, padded to a
 * power of two. */
#define GRAPH_MAX_T 64
#define N_BUCKETS 7 /* 1, 2, 4, ..., 64 */
#define N_SPLIT_J 20
/* Decode attention cuts each context in this many slices (flash-decoding). */
#define ATT_SPLITS 16
#define ALIGN 256

struct dmat {
	const uint8_t *d;
	uint32_t type;
	int64_t rows, cols;
	size_t row_bytes;
};

struct dlayer {
	const float *attn_norm, *ffn_norm, *bq, *bk, *bv;
	struct dmat wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cu_be {
	struct pg_backend base; /* first: the door's handle */
	int dev;
	cudaDeviceProp prop;
	cudaStream_t st;
	int64_t mem_limit, used;
	char last_err[512];
	bool graphs_on;
	void (*progress)(void *user, const char *stage, double frac);
	void *progress_user;

	bool loaded;
	struct pg_hparams hp;
	struct dmat tok_embd, output;
	const float *output_norm;
	struct dlayer *layers;
	void *warena;
	size_t wbytes;
	struct pgcu_rope_args rope;

	/* step scratch (reserve) */
	bool reserved;
	struct pg_step_limits lim;
	int t_alloc, logit_rows;
	void *sarena;
	size_t sbytes;
	float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up, *xo, *logits, *part;
	int32_t *d_ids, *h_ids;

	/* step inputs: tokens, pos, seq, out rows (t_alloc each), prompt
	 * attention tiles (2 t_alloc), then the block tables (seq_alloc rows
	 * of max_bps); the same in pinned host memory */
	int seq_alloc, max_bps;
	int32_t *d_in, *h_in;
	size_t in_count;

	/* the KV pool: n_blocks blocks for daemon/kv, one more that padding
	 * tokens write */
	struct pg_kv_layout kvl;
	int64_t n_blocks;
	__half *pool;
	size_t block_elems;

	cudaGraphExec_t graphs[N_BUCKETS][N_SPLIT_J];
	bool warm[N_BUCKETS][N_SPLIT_J];
};

static struct cu_be *cu(struct pg_backend *b)
{
	return (struct cu_be *)b;
}

/* The input arrays, in d_in and h_in alike. */
enum { IN_TOK, IN_POS, IN_SEQ, IN_OUT, IN_TILE, IN_BT = IN_TILE + 2 };
static int32_t *in_arr(const struct cu_be *b, int32_t *base, int which)
{
	return base + (size_t)which * b->t_alloc;
}

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static size_t align_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static int pow2_ceil(int n)
{
	int p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

/* ---- probe, create, describe ---------------------------------------------- */

static int cu_probe(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		fail(why, whylen, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return 0;
	}
	int ok = 0;
	for (int i = 0; i < n; i++) {
		cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) == cudaSuccess && p.major >= 8)
			ok++;
	}
	if (n == 0)
		fail(why, whylen, "no CUDA device found");
	else if (ok == 0)
		fail(why, whylen, "no CUDA device of compute capability 8.0 or newer (%d older ones)", n);
	return ok;
}

static void cu_destroy(struct pg_backend *b);

static int cu_create(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t errlen);

static void cu_describe(const struct pg_backend *pb, char *buf, size_t len)
{
	const struct cu_be *b = (const struct cu_be *)pb;
	snprintf(buf, len, "cuda %d: %s, sm_%d%d, %.1f GiB%s", b->dev, b->prop.name, b->prop.major, b->prop.minor,
		 b->prop.totalGlobalMem / (MIB * 1024), b->graphs_on ? "" : ", no graphs");
}

/* Free device memory for this backend, within its limit, less the margin. */
static int64_t mem_free(const struct cu_be *b)
{
	size_t fr = 0, tot = 0;
	if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
		return 0;
	int64_t f = (int64_t)fr - MEM_MARGIN;
	if (b->mem_limit > 0 && b->mem_limit - b->used < f)
		f = b->mem_limit - b->used;
	return f > 0 ? f : 0;
}

static int cu_mem_info(const struct pg_backend *pb, struct pg_mem_info *out)
{
	const struct cu_be *b = (const struct cu_be *)pb;
	if (cudaSetDevice(b->dev) != cudaSuccess)
		return -EIO;
	out->total = b->mem_limit > 0 ? b->mem_limit : (int64_t)b->prop.totalGlobalMem;
	out->free = mem_free(b);
	return 0;
}

static const char *cu_last_error(const struct pg_backend *pb)
{
	return ((const struct cu_be *)pb)->last_err;
}

/* Records a CUDA failure as the backend's last error; -EIO. */
static int cuda_fail(struct cu_be *b, const char *what, cudaError_t e)
{
	snprintf(b->last_err, sizeof b->last_err, "cuda %d: %s: %s", b->dev, what, cudaGetErrorString(e));
	return -EIO;
}

/* A device allocation charged to this backend, refused with the sizes
 * when it does not fit. */
static int dev_alloc(struct cu_be *b, void **p, size_t bytes, const char *what, char *err, size_t errlen)
{
	const int64_t fr = mem_free(b);
	if ((int64_t)bytes > fr) {
		fail(err, errlen, "cuda %d: %s need %.1f MiB of device memory, %.1f MiB free%s (%s, %.1f MiB)", b->dev,
		     what, bytes / MIB, fr / MIB, b->mem_limit > 0 ? " within the memory limit" : "", b->prop.name,
		     b->prop.totalGlobalMem / MIB);
		return -ENOMEM;
	}
	cudaError_t e = cudaMalloc(p, bytes);
	if (e != cudaSuccess) {
		*p = NULL;
		fail(err, errlen, "cuda %d: %s: cudaMalloc of %.1f MiB: %s", b->dev, what, bytes / MIB,
		     cudaGetErrorString(e));
		return -ENOMEM;
	}
	b->used += (int64_t)bytes;
	return 0;
}

static void dev_free(struct cu_be *b, void **p, size_t *bytes)
{
	if (*p) {
		cudaFree(*p);
		b->used -= (int64_t)*bytes;
	}
	*p = NULL;
	*bytes = 0;
}

static void drop_graphs(struct cu_be *b)
{
	for (int i = 0; i < N_BUCKETS; i++)
		for (int j = 0; j < N_SPLIT_J; j++)
			if (b->graphs[i][j]) {
				cudaGraphExecDestroy(b->graphs[i][j]);
				b->graphs[i][j] = NULL;
			}
	memset(b->warm, 0, sizeof b->warm);
}

/* ---- weights ------------------------------------------------------------------ */

struct wplan {
	struct cu_be *b;
	const struct pg_model_desc *m;
	size_t total, done;
	uint8_t *base;
	char *err;
	size_t errlen;
};

/* Checks a matrix (type, shape); counts its bytes, or, with base set,
 * copies it to the device and fills d. */
static int place(struct wplan *w, const struct pg_tensor *t, int64_t rows, int64_t cols, struct dmat *d)
{
	if (!t->data) {
		fail(w->err, w->errlen, "cuda: tensor %s is missing", t->name ? t->name : "?");
		return -EINVAL;
	}
	if (!pgcu_type_ok(t->type)) {
		fail(w->err, w->errlen, "cuda: tensor %s has type %s, which the CUDA backend does not read", t->name,
		     pg_type_name(t->type));
		return -ENOTSUP;
	}
	if (t->rows != rows || t->cols != cols) {
		fail(w->err, w->errlen, "cuda: tensor %s is %lld x %lld, the model needs %lld x %lld", t->name,
		     (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
		return -EINVAL;
	}
	const size_t rb = pg_row_size(t->type, (uint64_t)cols), bytes = rb * (size_t)rows;
	if (rb == 0 || (t->type != PG_TYPE_F32 && t->type != PG_TYPE_F16 && t->type != PG_TYPE_BF16 && cols % 32)) {
		fail(w->err, w->errlen, "cuda: tensor %s: %lld columns of %s", t->name, (long long)cols,
		     pg_type_name(t->type));
		return -EINVAL;
	}
	if (w->base) {
		uint8_t *dst = w->base + w->done;
		cudaError_t e = cudaMemcpy(dst, t->data, bytes, cudaMemcpyHostToDevice);
		if (e != cudaSuccess) {
			fail(w->err, w->errlen, "cuda: copying %s to the device: %s", t->name, cudaGetErrorString(e));
			return -EIO;
		}
		*d = (struct dmat){ dst, t->type, rows, cols, rb };
	}
	w->done += align_up(bytes);
	return 0;
}

/* A 1-D F32 tensor of n (NULL when absent and optional). */
static int place_vec(struct wplan *w, const struct pg_tensor *t, int64_t n, bool optional, const float **d)
{
	if (!t->data) {
		if (optional) {
			*d = NULL;
			return 0;
		}
		fail(w->err, w->errlen, "cuda: tensor %s is missing", t->name ? t->name : "?");
		return -EINVAL;
	}
	if (t->type != PG_TYPE_F32 || t->rows * t->cols != n) {
		fail(w->err, w->errlen, "cuda: tensor %s: want %lld F32 values", t->name, (long long)n);
		return -EINVAL;
	}
	const size_t bytes = (size_t)n * sizeof(float);
	if (w->base) {
		float *dst = (float *)(w->base + w->done);
		cudaError_t e = cudaMemcpy(dst, t->data, bytes, cudaMemcpyHostToDevice);
		if (e != cudaSuccess) {
			fail(w->err, w->errlen, "cuda: copying %s to the device: %s", t->name, cudaGetErrorString(e));
			return -EIO;
		}
		*d = dst;
	}
	w->done += align_up(bytes);
	return 0;
}

static int place_all(struct wplan *w, void (*progress)(void *, const char *, double), void *user)
{
	const struct pg_model_desc *m = w->m;
	const struct pg_hparams *hp = &m->hp;
	struct cu_be *b = w->b;
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim,
		      kvd = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
	int r;
	if ((r = place(w, &m->tok_embd, hp->n_vocab, E, &b->tok_embd)))
		return r;
	if (m->output.data != m->tok_embd.data) {
		if ((r = place(w, &m->output, hp->n_vocab, E, &b->output)))
			return r;
	} else {
		b->output = b->tok_embd;
	}
	if ((r = place_vec(w, &m->output_norm, E, false, &b->output_norm)) ||
	    (r = place_vec(w, &m->rope_freqs, hp->rope_dim / 2, true, &b->rope.freqs)))
		return r;
	for (int l = 0; l < hp->n_layer; l++) {
		const struct pg_layer_desc *s = &m->layers[l];
		struct dlayer *d = &b->layers[l];
		if ((r = place_vec(w, &s->attn_norm, E, false, &d->attn_norm)) ||
		    (r = place_vec(w, &s->ffn_norm, E, false, &d->ffn_norm)) ||
		    (r = place_vec(w, &s->bq, qd, true, &d->bq)) || (r = place_vec(w, &s->bk, kvd, true, &d->bk)) ||
		    (r = place_vec(w, &s->bv, kvd, true, &d->bv)) || (r = place(w, &s->wq, qd, E, &d->wq)) ||
		    (r = place(w, &s->wk, kvd, E, &d->wk)) || (r = place(w, &s->wv, kvd, E, &d->wv)) ||
		    (r = place(w, &s->wo, E, qd, &d->wo)) || (r = place(w, &s->w_gate, F, E, &d->w_gate)) ||
		    (r = place(w, &s->w_up, F, E, &d->w_up)) || (r = place(w, &s->w_down, E, F, &d->w_down)))
			return r;
		if (w->base && progress)
			progress(user, "cuda: weights to the device", (double)w->done / (double)w->total);
	}
	return 0;
}

static int cu_load_weights(struct pg_backend *pb, const struct pg_model_desc *m, char *err, size_t errlen)
{
	struct cu_be *b = cu(pb);
	const struct pg_hparams *hp = &m->hp;
	if (b->loaded) {
		fail(err, errlen, "cuda: weights already loaded");
		return -EINVAL;
	}
	if (cudaSetDevice(b->dev) != cudaSuccess) {
		fail(err, errlen, "cuda: cannot use device %d", b->dev);
		return -EIO;
	}
	if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_vocab <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
	    hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || hp->head_dim <= 0 ||
	    hp->head_dim > PGCU_ATTN_MAX_HD || hp->rope_dim < 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2) {
		fail(err, errlen,
		     "cuda: unsupported model shape (%d heads, %d KV heads, head size %d, rope %d; the CUDA "
		     "backend takes head sizes up to %d)",
		     hp->n_head, hp->n_head_kv, hp->head_dim, hp->rope_dim, PGCU_ATTN_MAX_HD);
		return -ENOTSUP;
	}
	b->hp = *hp;
	b->layers = (struct dlayer *)calloc((size_t)hp->n_layer, sizeof *b->layers);
	if (!b->layers) {
		fail(err, errlen, "cuda: out of memory");
		return -ENOMEM;
	}
	struct wplan w = { b, m, 0, 0, NULL, err, errlen };
	int r = place_all(&w, NULL, NULL); /* sizes and checks only */
	if (r)
		return r;
	w.total = w.done;
	w.done = 0;
	char what[64];
	snprintf(what, sizeof what, "the model's weights");
	if ((r = dev_alloc(b, &b->warena, w.total, what, err, errlen)))
		return r;
	b->wbytes = w.total;
	w.base = (uint8_t *)b->warena;
	if ((r = place_all(&w, b->progress, b->progress_user))) {
		dev_free(b, &b->warena, &b->wbytes);
		return r;
	}
	b->rope.rope_dim = hp->rope_dim;
	b->rope.hd = hp->head_dim;
	b->rope.neox = hp->rope_kind == PG_ROPE_NEOX;
	b->rope.theta_scale = powf(hp->rope_base, -2.0f / (float)(hp->rope_dim ? hp->rope_dim : 1));
	b->rope.freq_scale = hp->rope_freq_scale;
	b->loaded = true;
	return 0;
}

/* ---- scratch and the KV pool ------------------------------------------------------ */

/* The step's input buffers: they need both the step limits and the block
 * size, so they come with whichever of reserve and kv_alloc is last. */
static int alloc_inputs(struct cu_be *b, char *err, size_t errlen)
{
	if (!b->reserved || !b->pool)
		return 0;
	if (b->d_in) {
		cudaFree(b->d_in);
		cudaFreeHost(b->h_in);
		b->d_in = b->h_in = NULL;
	}
	b->seq_alloc = b->lim.max_seqs + 1;
	b->max_bps = (b->lim.n_ctx + b->kvl.block_size - 1) / b->kvl.block_size;
	b->in_count = IN_BT * (size_t)b->t_alloc + (size_t)b->seq_alloc * b->max_bps;
	const size_t bytes = b->in_count * sizeof(int32_t);
	cudaError_t e = cudaMalloc((void **)&b->d_in, bytes);
	if (e == cudaSuccess)
		e = cudaMallocHost((void **)&b->h_in, bytes);
	if (e != cudaSuccess) {
		fail(err, errlen, "cuda: step inputs (%.1f MiB): %s", bytes / MIB, cudaGetErrorString(e));
		return -ENOMEM;
	}
	return 0;
}

static int cu_reserve(struct pg_backend *pb, const struct pg_step_limits *want, char *err, size_t errlen)
{
	struct cu_be *b = cu(pb);
	const struct pg_hparams *hp = &b->hp;
	if (!b->loaded || want->max_tokens <= 0 || want->max_seqs <= 0 || want->n_ctx <= 0) {
		fail(err, errlen, "cuda: reserve needs loaded weights and positive limits");
		return -EINVAL;
	}
	if (b->reserved && want->max_tokens <= b->lim.max_tokens && want->max_seqs <= b->lim.max_seqs &&
	    want->n_ctx <= b->lim.n_ctx)
		return 0;
	/* a later reserve only grows the limits */
	struct pg_step_limits grown = *want;
	if (b->reserved) {
		grown.max_tokens = grown.max_tokens > b->lim.max_tokens ? grown.max_tokens : b->lim.max_tokens;
		grown.max_seqs = grown.max_seqs > b->lim.max_seqs ? grown.max_seqs : b->lim.max_seqs;
		grown.n_ctx = grown.n_ctx > b->lim.n_ctx ? grown.n_ctx : b->lim.n_ctx;
	}
	const struct pg_step_limits *lim = &grown;
	cudaSetDevice(b->dev);
	cudaStreamSynchronize(b->st);
	drop_graphs(b);
	dev_free(b, &b->sarena, &b->sbytes);
	cudaFreeHost(b->h_ids);
	b->h_ids = NULL;
	b->reserved = false;

	const int T = lim->max_tokens <= GRAPH_MAX_T ? pow2_ceil(lim->max_tokens) : lim->max_tokens;
	const int LR = T < GRAPH_MAX_T ? T : GRAPH_MAX_T;
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim,
		      kvd = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
	const int64_t t_split = T < GRAPH_MAX_T ? T : GRAPH_MAX_T;
	int64_t part = t_split * hp->n_head * ATT_SPLITS;
	if ((int64_t)T * hp->n_head > part)
		part = (int64_t)T * hp->n_head;
	part *= hp->head_dim + 2;
	const int64_t sizes[] = { T * E, T * E, T * qd, T * kvd, T * kvd, T * qd, T * E,
				  T * F, T * F, LR * E, LR * V, part, T };
	size_t total = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
		total += align_up((size_t)sizes[i] * 4);
	int r = dev_alloc(b, &b->sarena, total, "the step's scratch", err, errlen);
	if (r)
		return r;
	b->sbytes = total;
	float **bufs[] = { &b->x, &b->xn, &b->q, &b->k, &b->v, &b->att, &b->tmp, &b->gate, &b->up, &b->xo, &b->logits,
			   &b->part };
	uint8_t *p = (uint8_t *)b->sarena;
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
		*bufs[i] = (float *)p;
		p += align_up((size_t)sizes[i] * 4);
	}
	b->d_ids = (int32_t *)p;
	cudaError_t e = cudaMallocHost((void **)&b->h_ids, (size_t)T * sizeof(int32_t));
	if (e != cudaSuccess) {
		fail(err, errlen, "cuda: pinned host memory: %s", cudaGetErrorString(e));
		return -ENOMEM;
	}
	b->lim = *lim;
	b->t_alloc = T;
	b->logit_rows = LR;
	b->reserved = true;
	return alloc_inputs(b, err, errlen);
}

static int cu_kv_alloc(struct pg_backend *pb, const struct pg_kv_layout *l, int64_t n_blocks, char *err,
		       size_t errlen)
{
	struct cu_be *b = cu(pb);
	if (!b->loaded || b->pool) {
		fail(err, errlen, "cuda: kv_alloc comes once, after the weights");
		return -EINVAL;
	}
	if (l->type != PG_TYPE_F16 || l->n_layer != b->hp.n_layer ||
	    l->kv_dim != b->hp.n_head_kv * b->hp.head_dim || l->block_size <= 0 || n_blocks <= 0) {
		fail(err, errlen, "cuda: KV layout does not match the model (%d layers, kv_dim %d, f16)", b->hp.n_layer,
		     b->hp.n_head_kv * b->hp.head_dim);
		return -EINVAL;
	}
	cudaSetDevice(b->dev);
	const size_t bb = pg_kv_block_bytes(l);
	char what[96];
	snprintf(what, sizeof what, "%lld KV blocks of %.2f MiB", (long long)n_blocks, bb / MIB);
	size_t bytes = bb * (size_t)(n_blocks + 1);
	int r = dev_alloc(b, (void **)&b->pool, bytes, what, err, errlen);
	if (r)
		return r;
	b->kvl = *l;
	b->n_blocks = n_blocks;
	b->block_elems = bb / sizeof(__half);
	return alloc_inputs(b, err, errlen);
}

static int cu_kv_copy(struct pg_backend *pb, int32_t block, void *host, bool out)
{
	struct cu_be *b = cu(pb);
	if (!b->pool || block < 0 || block >= b->n_blocks) {
		snprintf(b->last_err, sizeof b->last_err, "cuda: KV block %d out of range", block);
		return -EINVAL;
	}
	cudaSetDevice(b->dev);
	__half *d = b->pool + (size_t)block * b->block_elems;
	const size_t bytes = b->block_elems * sizeof(__half);
	cudaError_t e = out ? cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, b->st)
			    : cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, b->st);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(b->st);
	return e == cudaSuccess ? 0 : cuda_fail(b, out ? "KV block to host" : "KV block from host", e);
}

static int cu_kv_copy_out(struct pg_backend *pb, int32_t block, void *dst)
{
	return cu_kv_copy(pb, block, dst, true);
}

static int cu_kv_copy_in(struct pg_backend *pb, int32_t block, const void *src)
{
	return cu_kv_copy(pb, block, (void *)src, false);
}

/* ---- the step ------------------------------------------------------------------------- */

static void mm(struct cu_be *b, const struct dmat *w, const float *X, int m, float *Y)
{
	pgcu_matmul(b->st, w->type, w->d, w->row_bytes, w->rows, w->cols, X, m, Y, w->rows);
}

struct fwd {
	int T;      /* token rows, padding included */
	int n_out;  /* output rows (out_idx) */
	int split_len, n_splits;
	int n_tiles; /* > 0: prompt attention over these tiles */
};


/* Enqueues the layers for f->T tokens: x holds the last hidden state. */
static void enqueue_layers(struct cu_be *b, const struct fwd *f)
{
	const struct pg_hparams *hp = &b->hp;
	const int T = f->T, E = hp->n_embd, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
	const int32_t *tok = in_arr(b, b->d_in, IN_TOK), *pos = in_arr(b, b->d_in, IN_POS),
		      *seq = in_arr(b, b->d_in, IN_SEQ);
	const struct pgcu_kv kv = { b->pool,
				    b->block_elems,
				    (size_t)b->kvl.n_layer * b->kvl.block_size * b->kvl.kv_dim,
				    b->kvl.block_size,
				    b->kvl.kv_dim,
				    b->kvl.n_layer,
				    in_arr(b, b->d_in, IN_BT),
				    b->max_bps };
	pgcu_embed(b->st, b->tok_embd.type, b->tok_embd.d, b->tok_embd.row_bytes, E, tok, T, b->x);
	for (int l = 0; l < hp->n_layer; l++) {
		const struct dlayer *L = &b->layers[l];
		pgcu_rmsnorm(b->st, b->xn, b->x, L->attn_norm, T, E, hp->norm_eps);
		mm(b, &L->wq, b->xn, T, b->q);
		mm(b, &L->wk, b->xn, T, b->k);
		mm(b, &L->wv, b->xn, T, b->v);
		if (L->bq)
			pgcu_bias(b->st, b->q, L->bq, T, qd);
		if (L->bk)
			pgcu_bias(b->st, b->k, L->bk, T, kvd);
		if (L->bv)
			pgcu_bias(b->st, b->v, L->bv, T, kvd);
		if (hp->rope_dim > 0) {
			pgcu_rope(b->st, &b->rope, b->q, qd, hp->n_head, pos, T);
			pgcu_rope(b->st, &b->rope, b->k, kvd, hp->n_head_kv, pos, T);
		}
		pgcu_kv_write(b->st, &kv, l, b->k, b->v, pos, seq, T);
		const struct pgcu_attn_args aa = { hp->n_head,  hp->n_head_kv, hp->head_dim, l,
						   1.0f / sqrtf((float)hp->head_dim), f->split_len, f->n_splits };
		if (f->n_tiles > 0)
			pgcu_attn_prefill(b->st, &kv, &aa, b->q, qd, pos, seq, in_arr(b, b->d_in, IN_TILE), f->n_tiles,
					  b->att, qd);
		else
			pgcu_attn(b->st, &kv, &aa, b->q, qd, pos, seq, T, b->part, b->att, qd);
		mm(b, &L->wo, b->att, T, b->tmp);
		pgcu_add(b->st, b->x, b->tmp, (int64_t)T * E);
		pgcu_rmsnorm(b->st, b->xn, b->x, L->ffn_norm, T, E, hp->norm_eps);
		mm(b, &L->w_gate, b->xn, T, b->gate);
		mm(b, &L->w_up, b->xn, T, b->up);
		pgcu_swiglu(b->st, b->gate, b->up, (int64_t)T * hp->n_ff);
		mm(b, &L->w_down, b->gate, T, b->tmp);
		pgcu_add(b->st, b->x, b->tmp, (int64_t)T * E);
	}
}

/* Output rows [r0, r0+n) of out_idx: final norm, logits, and with ids
 * their argmax into d_ids[r0...]. */
static void enqueue_output(struct cu_be *b, int r0, int n, bool ids)
{
	const struct pg_hparams *hp = &b->hp;
	pgcu_gather(b->st, b->xo, b->x, in_arr(b, b->d_in, IN_OUT) + r0, n, hp->n_embd);
	pgcu_rmsnorm(b->st, b->xo, b->xo, b->output_norm, n, hp->n_embd, hp->norm_eps);
	mm(b, &b->output, b->xo, n, b->logits);
	if (ids)
		pgcu_argmax(b->st, b->logits, n, hp->n_vocab, b->d_ids + r0);
}

/* Checks a batch against the limits, the vocabulary and the pool, and
 * fills the pinned inputs: T rows (tokens past n_tokens are padding that
 * writes only the spare block), the block tables, the output rows. */
static int stage(struct cu_be *b, const struct pg_batch *bt, int T, bool identity_out, int *n_out, int *max_pos)
{
	const int n = bt->n_tokens, bs = b->kvl.block_size;
	int32_t *tok = in_arr(b, b->h_in, IN_TOK), *pos = in_arr(b, b->h_in, IN_POS),
		*seq = in_arr(b, b->h_in, IN_SEQ), *out = in_arr(b, b->h_in, IN_OUT), *tab = in_arr(b, b->h_in, IN_BT);
	if (n <= 0 || n > b->lim.max_tokens || bt->n_seqs <= 0 || bt->n_seqs > b->lim.max_seqs) {
		snprintf(b->last_err, sizeof b->last_err, "cuda: batch of %d tokens, %d sequences beyond the limits",
			 n, bt->n_seqs);
		return -EINVAL;
	}
	for (int s = 0; s < bt->n_seqs; s++) {
		const struct pg_block_table *st = &bt->seqs[s];
		const int nb = st->n_blocks < b->max_bps ? st->n_blocks : b->max_bps;
		for (int i = 0; i < nb; i++) {
			const int32_t blk = st->blocks[i];
			if (blk < 0 || blk >= b->n_blocks) {
				snprintf(b->last_err, sizeof b->last_err, "cuda: sequence %d: block %d out of range", s,
					 blk);
				return -EINVAL;
			}
			tab[(size_t)s * b->max_bps + i] = blk;
		}
	}
	*max_pos = 1;
	*n_out = 0;
	for (int i = 0; i < n; i++) {
		const int s = bt->seq[i], p = bt->pos[i];
		if (bt->tokens[i] < 0 || bt->tokens[i] >= b->hp.n_vocab || s < 0 || s >= bt->n_seqs || p < 0 ||
		    p >= b->lim.n_ctx || p / bs >= bt->seqs[s].n_blocks || p / bs >= b->max_bps) {
			snprintf(b->last_err, sizeof b->last_err,
				 "cuda: token %d (id %d, sequence %d, position %d) outside the vocabulary, the batch "
				 "or its block table",
				 i, bt->tokens[i], s, p);
			return -EINVAL;
		}
		tok[i] = bt->tokens[i];
		pos[i] = p;
		seq[i] = s;
		if (p + 1 > *max_pos)
			*max_pos = p + 1;
		if (!identity_out && bt->want[i])
			out[(*n_out)++] = i;
	}
	/* padding: token 0 at position 0 of a sequence whose one block is the spare */
	for (int i = n; i < T; i++) {
		tok[i] = 0;
		pos[i] = 0;
		seq[i] = bt->n_seqs;
	}
	tab[(size_t)bt->n_seqs * b->max_bps] = (int32_t)b->n_blocks;
	if (identity_out) {
		for (int i = 0; i < T; i++)
			out[i] = i;
		*n_out = T;
	}
	return 0;
}

/* Runs of one sequence's consecutive tokens, PGCU_PF_Q at most, for the
 * prompt attention kernel; returns how many. */
static int make_tiles(struct cu_be *b, const struct pg_batch *bt)
{
	int32_t *tiles = in_arr(b, b->h_in, IN_TILE);
	int n = 0;
	for (int i = 0; i < bt->n_tokens;) {
		int c = 1;
		while (i + c < bt->n_tokens && c < PGCU_PF_Q && bt->seq[i + c] == bt->seq[i])
			c++;
		tiles[2 * n] = i;
		tiles[2 * n + 1] = c;
		n++;
		i += c;
	}
	return n;
}

static int cu_step(struct pg_backend *pb, const struct pg_batch *bt)
{
	struct cu_be *b = cu(pb);
	b->last_err[0] = '\0';
	if (!b->loaded || !b->reserved || !b->pool || !b->d_in) {
		snprintf(b->last_err, sizeof b->last_err, "cuda: step before weights, reserve and kv_alloc");
		return -EINVAL;
	}
	if (!bt->logits && !bt->ids) {
		snprintf(b->last_err, sizeof b->last_err, "cuda: a step needs logits or ids");
		return -EINVAL;
	}
	cudaSetDevice(b->dev);
	const bool graph = b->graphs_on && bt->n_tokens <= GRAPH_MAX_T;
	const int T = graph ? pow2_ceil(bt->n_tokens) : bt->n_tokens;
	int n_out = 0, max_pos = 1;
	int r = stage(b, bt, T, graph, &n_out, &max_pos);
	if (r)
		return r;
	struct fwd f = { T, n_out, max_pos, 1, 0 };
	int j = 0;
	if (T <= GRAPH_MAX_T) {
		f.split_len = 128;
		while ((int64_t)f.split_len * ATT_SPLITS < max_pos) {
			f.split_len <<= 1;
			j++;
		}
		f.n_splits = graph ? ATT_SPLITS : (max_pos + f.split_len - 1) / f.split_len;
	} else {
		f.n_tiles = make_tiles(b, bt);
	}
	const size_t in_bytes = (IN_BT * (size_t)b->t_alloc + (size_t)(bt->n_seqs + 1) * b->max_bps) * sizeof(int32_t);
	cudaError_t e = cudaMemcpyAsync(b->d_in, b->h_in, in_bytes, cudaMemcpyHostToDevice, b->st);
	if (e != cudaSuccess)
		return cuda_fail(b, "step inputs to the device", e);
	const int V = b->hp.n_vocab;
	if (graph) {
		int bk = 0;
		while ((1 << bk) < T)
			bk++;
		if (j >= N_SPLIT_J) {
			snprintf(b->last_err, sizeof b->last_err, "cuda: context of %d positions too long", max_pos);
			return -EINVAL;
		}
		cudaGraphExec_t *g = &b->graphs[bk][j];
		if (!*g && !b->warm[bk][j]) {
			/* the first step of a shape runs as plain launches: its
			 * kernels are loaded (lazily) outside any capture */
			enqueue_layers(b, &f);
			enqueue_output(b, 0, T, true);
			e = cudaGetLastError();
			b->warm[bk][j] = true;
		} else if (!*g) {
			cudaGraph_t cg;
			if ((e = cudaStreamBeginCapture(b->st, cudaStreamCaptureModeThreadLocal)) != cudaSuccess)
				return cuda_fail(b, "graph capture", e);
			enqueue_layers(b, &f);
			enqueue_output(b, 0, T, true);
			cudaError_t le = cudaGetLastError();
			if ((e = cudaStreamEndCapture(b->st, &cg)) != cudaSuccess || le != cudaSuccess)
				return cuda_fail(b, "graph capture", le != cudaSuccess ? le : e);
			e = cudaGraphInstantiate(g, cg, 0);
			cudaGraphDestroy(cg);
			if (e != cudaSuccess) {
				*g = NULL;
				return cuda_fail(b, "graph instantiation", e);
			}
		}
		if (*g && (e = cudaGraphLaunch(*g, b->st)) != cudaSuccess)
			return cuda_fail(b, "graph launch", e);
		if (e != cudaSuccess)
			return cuda_fail(b, "step", e);
		/* every padded row was computed; copy out the wanted ones */
		if (bt->ids) {
			e = cudaMemcpyAsync(b->h_ids, b->d_ids, (size_t)T * sizeof(int32_t), cudaMemcpyDeviceToHost, b->st);
		} else {
			int o = 0;
			for (int i = 0; i < bt->n_tokens && e == cudaSuccess; i++)
				if (bt->want[i])
					e = cudaMemcpyAsync(bt->logits + (size_t)o++ * V, b->logits + (size_t)i * V,
							    (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, b->st);
		}
	} else {
		enqueue_layers(b, &f);
		for (int r0 = 0; r0 < n_out && e == cudaSuccess; r0 += b->logit_rows) {
			const int n = n_out - r0 < b->logit_rows ? n_out - r0 : b->logit_rows;
			enqueue_output(b, r0, n, bt->ids != NULL);
			if (!bt->ids)
				e = cudaMemcpyAsync(bt->logits + (size_t)r0 * V, b->logits, (size_t)n * V * sizeof(float),
						    cudaMemcpyDeviceToHost, b->st);
		}
		if (e == cudaSuccess && bt->ids)
			e = cudaMemcpyAsync(b->h_ids, b->d_ids, (size_t)n_out * sizeof(int32_t), cudaMemcpyDeviceToHost,
					    b->st);
		if (e == cudaSuccess)
			e = cudaGetLastError();
	}
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(b->st);
	if (e != cudaSuccess)
		return cuda_fail(b, "step", e);
	if (bt->ids) {
		int o = 0;
		for (int i = 0; i < bt->n_tokens; i++)
			if (bt->want[i]) {
				bt->ids[o] = graph ? b->h_ids[i] : b->h_ids[o];
				o++;
			}
	}
	return 0;
}

static int cu_sync(struct pg_backend *pb)
{
	struct cu_be *b = cu(pb);
	cudaSetDevice(b->dev);
	cudaError_t e = cudaStreamSynchronize(b->st);
	return e == cudaSuccess ? 0 : cuda_fail(b, "sync", e);
}

static void cu_destroy(struct pg_backend *pb)
{
	struct cu_be *b = cu(pb);
	cudaSetDevice(b->dev);
	if (b->st)
		cudaStreamSynchronize(b->st);
	drop_graphs(b);
	size_t kvb = b->pool ? b->block_elems * sizeof(__half) * (size_t)(b->n_blocks + 1) : 0;
	dev_free(b, (void **)&b->pool, &kvb);
	dev_free(b, &b->sarena, &b->sbytes);
	dev_free(b, &b->warena, &b->wbytes);
	cudaFree(b->d_in);
	cudaFreeHost(b->h_in);
	cudaFreeHost(b->h_ids);
	if (b->st)
		cudaStreamDestroy(b->st);
	free(b->layers);
	free(b);
}

static const struct pg_backend_ops cu_ops = {
	PG_BACKEND_ABI, "cuda",	     cu_probe,	   cu_create,	   cu_destroy,	  cu_describe,	 cu_mem_info,
	cu_load_weights, cu_reserve, cu_kv_alloc, NULL,		   cu_kv_copy_out, cu_kv_copy_in, cu_step,
	cu_sync,	 cu_last_error,
};

static int cu_create(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t errlen)
{
	*out = NULL;
	int dev = 0;
	if (o->device && o->device[0]) {
		char *end;
		long v = strtol(o->device, &end, 10);
		if (*end || v < 0 || v > 1024) {
			fail(err, errlen, "cuda: device '%s' is not an ordinal", o->device);
			return -EINVAL;
		}
		dev = (int)v;
	}
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || dev >= n) {
		fail(err, errlen, "cuda: no device %d (%s)", dev,
		     e != cudaSuccess ? cudaGetErrorString(e) : "fewer devices");
		return -ENODEV;
	}
	struct cu_be *b = (struct cu_be *)calloc(1, sizeof *b);
	if (!b) {
		fail(err, errlen, "cuda: out of memory");
		return -ENOMEM;
	}
	b->dev = dev;
	b->mem_limit = o->mem_limit;
	if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&b->prop, dev)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&b->st, cudaStreamNonBlocking)) != cudaSuccess) {
		fail(err, errlen, "cuda: device %d: %s", dev, cudaGetErrorString(e));
		free(b);
		return -ENODEV;
	}
	if (b->prop.major < 8) {
		fail(err, errlen, "cuda: device %d (%s) is sm_%d%d; this build needs sm_80 or newer", dev, b->prop.name,
		     b->prop.major, b->prop.minor);
		cudaStreamDestroy(b->st);
		free(b);
		return -ENODEV;
	}
	const char *g = getenv("PAGODA_CUDA_GRAPHS");
	b->graphs_on = !(g && !strcmp(g, "0"));
	b->progress = o->progress;
	b->progress_user = o->progress_user;
	b->base.ops = &cu_ops;
	b->base.name = "cuda";
	b->base.caps = PG_BACKEND_CAP_DEVICE_MEM | PG_BACKEND_CAP_GREEDY;
	*out = &b->base;
	return 0;
}

extern "C" __attribute__((visibility("default"))) const struct pg_backend_ops *pg_backend_cuda_entry(uint32_t abi)
{
	return abi == PG_BACKEND_ABI ? &cu_ops : NULL;
}
