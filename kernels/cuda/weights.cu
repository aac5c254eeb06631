/* kernels/cuda/weights.cu — the model's weights to the device: checked
 * (types, shapes), summed, refused with the sizes when they do not fit,
 * then copied into one allocation in the file's layout. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda.h"

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
		cu_errf(w->err, w->errlen, "cuda: tensor %s is missing", t->name ? t->name : "?");
		return -EINVAL;
	}
	if (!pgcu_type_ok(t->type)) {
		cu_errf(w->err, w->errlen, "cuda: tensor %s has type %s, which the CUDA backend does not read", t->name,
		     pg_type_name(t->type));
		return -ENOTSUP;
	}
	if (t->rows != rows || t->cols != cols) {
		cu_errf(w->err, w->errlen, "cuda: tensor %s is %lld x %lld, the model needs %lld x %lld", t->name,
		     (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
		return -EINVAL;
	}
	const size_t rb = pg_row_size(t->type, (uint64_t)cols), bytes = rb * (size_t)rows;
	if (rb == 0 || (t->type != PG_TYPE_F32 && t->type != PG_TYPE_F16 && t->type != PG_TYPE_BF16 && cols % 32)) {
		cu_errf(w->err, w->errlen, "cuda: tensor %s: %lld columns of %s", t->name, (long long)cols,
		     pg_type_name(t->type));
		return -EINVAL;
	}
	if (w->base) {
		uint8_t *dst = w->base + w->done;
		cudaError_t e = cudaMemcpy(dst, t->data, bytes, cudaMemcpyHostToDevice);
		if (e != cudaSuccess) {
			cu_errf(w->err, w->errlen, "cuda: copying %s to the device: %s", t->name, cudaGetErrorString(e));
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
		cu_errf(w->err, w->errlen, "cuda: tensor %s is missing", t->name ? t->name : "?");
		return -EINVAL;
	}
	if (t->type != PG_TYPE_F32 || t->rows * t->cols != n) {
		cu_errf(w->err, w->errlen, "cuda: tensor %s: want %lld F32 values", t->name, (long long)n);
		return -EINVAL;
	}
	const size_t bytes = (size_t)n * sizeof(float);
	if (w->base) {
		float *dst = (float *)(w->base + w->done);
		cudaError_t e = cudaMemcpy(dst, t->data, bytes, cudaMemcpyHostToDevice);
		if (e != cudaSuccess) {
			cu_errf(w->err, w->errlen, "cuda: copying %s to the device: %s", t->name, cudaGetErrorString(e));
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

int cu_load_weights(struct pg_backend *pb, const struct pg_model_desc *m, char *err, size_t errlen)
{
	struct cu_be *b = cu(pb);
	const struct pg_hparams *hp = &m->hp;
	if (b->loaded) {
		cu_errf(err, errlen, "cuda: weights already loaded");
		return -EINVAL;
	}
	if (cudaSetDevice(b->dev) != cudaSuccess) {
		cu_errf(err, errlen, "cuda: cannot use device %d", b->dev);
		return -EIO;
	}
	if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_vocab <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
	    hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || hp->head_dim <= 0 ||
	    hp->head_dim > PGCU_ATTN_MAX_HD || hp->rope_dim < 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2) {
		cu_errf(err, errlen,
		     "cuda: unsupported model shape (%d heads, %d KV heads, head size %d, rope %d; the CUDA "
		     "backend takes head sizes up to %d)",
		     hp->n_head, hp->n_head_kv, hp->head_dim, hp->rope_dim, PGCU_ATTN_MAX_HD);
		return -ENOTSUP;
	}
	b->hp = *hp;
	b->layers = (struct dlayer *)calloc((size_t)hp->n_layer, sizeof *b->layers);
	if (!b->layers) {
		cu_errf(err, errlen, "cuda: out of memory");
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
	if ((r = cu_dev_alloc(b, &b->warena, w.total, what, err, errlen)))
		return r;
	b->wbytes = w.total;
	w.base = (uint8_t *)b->warena;
	if ((r = place_all(&w, b->progress, b->progress_user))) {
		cu_dev_free(b, &b->warena, &b->wbytes);
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
