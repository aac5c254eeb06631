/* kernels/cuda/step.cu — a step: scratch sized by the limits, the inputs
 * staged in pinned memory, the layers as kernels (kern.h), the output rows,
 * and CUDA graphs per batch-size bucket. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda.h"

void cu_drop_graphs(struct cu_be *b)
{
	for (int i = 0; i < N_BUCKETS; i++)
		for (int j = 0; j < N_SPLIT_J; j++)
			if (b->graphs[i][j]) {
				cudaGraphExecDestroy(b->graphs[i][j]);
				b->graphs[i][j] = NULL;
			}
	memset(b->warm, 0, sizeof b->warm);
}

/* ---- scratch and the KV pool ------------------------------------------------------ */

/* The step's input buffers: they need both the step limits and the block
 * size, so they come with whichever of reserve and kv_alloc is last. */
int cu_alloc_inputs(struct cu_be *b, char *err, size_t errlen)
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
		cu_errf(err, errlen, "cuda: step inputs (%.1f MiB): %s", bytes / MIB, cudaGetErrorString(e));
		return -ENOMEM;
	}
	return 0;
}

int cu_reserve(struct pg_backend *pb, const struct pg_step_limits *want, char *err, size_t errlen)
{
	struct cu_be *b = cu(pb);
	const struct pg_hparams *hp = &b->hp;
	if (!b->loaded || want->max_tokens <= 0 || want->max_seqs <= 0 || want->n_ctx <= 0) {
		cu_errf(err, errlen, "cuda: reserve needs loaded weights and positive limits");
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
	cu_drop_graphs(b);
	cu_dev_free(b, &b->sarena, &b->sbytes);
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
	int r = cu_dev_alloc(b, &b->sarena, total, "the step's scratch", err, errlen);
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
		cu_errf(err, errlen, "cuda: pinned host memory: %s", cudaGetErrorString(e));
		return -ENOMEM;
	}
	b->lim = *lim;
	b->t_alloc = T;
	b->logit_rows = LR;
	b->reserved = true;
	return cu_alloc_inputs(b, err, errlen);
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

int cu_step(struct pg_backend *pb, const struct pg_batch *bt)
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
		return cu_cuda_fail(b, "step inputs to the device", e);
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
				return cu_cuda_fail(b, "graph capture", e);
			enqueue_layers(b, &f);
			enqueue_output(b, 0, T, true);
			cudaError_t le = cudaGetLastError();
			if ((e = cudaStreamEndCapture(b->st, &cg)) != cudaSuccess || le != cudaSuccess)
				return cu_cuda_fail(b, "graph capture", le != cudaSuccess ? le : e);
			e = cudaGraphInstantiate(g, cg, 0);
			cudaGraphDestroy(cg);
			if (e != cudaSuccess) {
				*g = NULL;
				return cu_cuda_fail(b, "graph instantiation", e);
			}
		}
		if (*g && (e = cudaGraphLaunch(*g, b->st)) != cudaSuccess)
			return cu_cuda_fail(b, "graph launch", e);
		if (e != cudaSuccess)
			return cu_cuda_fail(b, "step", e);
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
		return cu_cuda_fail(b, "step", e);
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
