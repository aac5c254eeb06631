/* kernels/cuda/cuda.h — the CUDA backend's state, shared by its files:
 * backend.cu (the ops table, device memory, the KV pool), weights.cu (the
 * upload) and step.cu (scratch, the forward pass, CUDA graphs). Internal
 * to kernels/cuda/. */
#ifndef PAGODA_KERNELS_CUDA_CUDA_H
#define PAGODA_KERNELS_CUDA_CUDA_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

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

static inline struct cu_be *cu(struct pg_backend *b)
{
	return (struct cu_be *)b;
}

/* The input arrays, in d_in and h_in alike. */
enum { IN_TOK, IN_POS, IN_SEQ, IN_OUT, IN_TILE, IN_BT = IN_TILE + 2 };
static inline int32_t *in_arr(const struct cu_be *b, int32_t *base, int which)
{
	return base + (size_t)which * b->t_alloc;
}


static inline size_t align_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static inline int pow2_ceil(int n)
{
	int p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

/* backend.cu: errors and device memory charged to the backend */
void cu_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int cu_cuda_fail(struct cu_be *b, const char *what, cudaError_t e);
int64_t cu_mem_free(const struct cu_be *b);
int cu_dev_alloc(struct cu_be *b, void **p, size_t bytes, const char *what, char *err, size_t errlen);
void cu_dev_free(struct cu_be *b, void **p, size_t *bytes);
/* weights.cu */
int cu_load_weights(struct pg_backend *pb, const struct pg_model_desc *m, char *err, size_t errlen);
/* step.cu */
int cu_alloc_inputs(struct cu_be *b, char *err, size_t errlen);
int cu_reserve(struct pg_backend *pb, const struct pg_step_limits *want, char *err, size_t errlen);
int cu_step(struct pg_backend *pb, const struct pg_batch *bt);
void cu_drop_graphs(struct cu_be *b);

#endif
