/* kernels/pg_backend.h — the backend door: everything the engine asks of
 * the device that runs a model. The engine holds a struct pg_backend * and
 * calls it through the inline wrappers below; nothing outside kernels/
 * sees a kernel.
 *
 * A backend instance runs one model over one KV pool, driven by one
 * thread (the engine thread) at a time. Its life:
 *
 *   pg_backend_open(name, opts)          registry: "cpu", "cuda", "auto"
 *   pg_backend_load_weights(model desc)  lays the weights out as it likes
 *   pg_backend_reserve(limits)           step scratch for the largest step
 *   pg_backend_mem_info()                what is left, to size the KV pool
 *   pg_backend_kv_alloc(layout, n)       owns the KV pool's bytes
 *   pg_backend_step(batch) ...           ragged batch -> logits (or ids)
 *   pg_backend_kv_copy_out/in(block)     a block to/from a host buffer
 *   pg_backend_close()
 *
 * daemon/kv keeps block tables, hashes and the LRU; it names blocks by
 * index (0 .. n_blocks-1) and the backend owns their bytes. Every call is
 * synchronous as the caller sees it: outputs are in host memory when it
 * returns. Functions return 0 or a negative errno; those with an err
 * buffer fill it with one line of context, never print.
 *
 * C and C++ (nvcc) both compile this header. A backend built as a shared
 * object exports PG_BACKEND_CUDA_ENTRY (see the registry at the end).
 */
#ifndef PAGODA_KERNELS_PG_BACKEND_H
#define PAGODA_KERNELS_PG_BACKEND_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever struct pg_backend_ops or a struct it takes changes. */
#define PG_BACKEND_ABI 2

/* ---- the model, described once, backend-neutral ------------------------ */

/* One tensor in host memory, in its GGUF/ggml layout: rows of cols
 * elements of type (enum pg_type, as in the file, never an internal
 * repacked type), each pg_row_size(type, cols) bytes, rows contiguous. A
 * matrix of rows outputs by cols inputs (y = W x). 1-D tensors (norms,
 * biases, rope factors) are already F32 with rows = 1. data == NULL: the
 * tensor is absent. The bytes stay mapped, unchanged, until the backend
 * is destroyed: a backend may use them in place instead of copying (the
 * CPU does for the token embedding) and may drop their page-cache pages
 * (madvise) once it has its own copy, but never writes them. The
 * description itself (names, layers) also lives that long. */
struct pg_tensor {
	const char *name; /* the GGUF name ("blk.3.attn_q.weight"), for messages */
	const void *data;
	uint32_t type;
	int64_t rows, cols;
};

enum pg_rope_kind {
	PG_ROPE_NORM = 0, /* rotates adjacent pairs (x[2i], x[2i+1]): llama */
	PG_ROPE_NEOX = 1, /* rotates halves (x[i], x[i + rope_dim/2]): qwen2 */
};

struct pg_hparams {
	int n_vocab, n_embd, n_layer, n_ff;
	int n_head, n_head_kv, head_dim; /* q_dim = n_head*head_dim, kv_dim = n_head_kv*head_dim */
	int rope_dim;                    /* leading dims of a head that rotate (<= head_dim, even) */
	enum pg_rope_kind rope_kind;
	float rope_base;       /* theta_i = pos * rope_base^(-2i/rope_dim) */
	float rope_freq_scale; /* linear scaling: theta *= rope_freq_scale */
	float norm_eps;        /* RMSNorm epsilon */
};

/* One pre-norm Llama block:
 *   h   = x + wo · attn(rope(wq·n + bq), rope(wk·n + bk), wv·n + bv),
 *         n = rmsnorm(x) * attn_norm
 *   out = h + w_down · (silu(w_gate·m) * (w_up·m)),  m = rmsnorm(h) * ffn_norm
 * attention: causal, scale 1/sqrt(head_dim), n_head/n_head_kv query heads
 * per KV head (GQA), K and V as written to the KV cache. */
struct pg_layer_desc {
	struct pg_tensor attn_norm, ffn_norm;   /* F32 [n_embd] */
	struct pg_tensor bq, bk, bv;            /* F32 [q_dim], [kv_dim] x2; absent but for qwen2 */
	struct pg_tensor wq, wk, wv, wo;        /* [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim] */
	struct pg_tensor w_gate, w_up, w_down;  /* [n_ff x n_embd] x2, [n_embd x n_ff] */
};

/* x0 = row `token` of tok_embd; logits = output · (rmsnorm(x_L) * output_norm).
 * output.data == tok_embd.data when the file ties them. rope_freqs: F32
 * [rope_dim/2] llama3-style factors (theta_i /= rope_freqs[i]), or absent. */
struct pg_model_desc {
	struct pg_hparams hp;
	struct pg_tensor tok_embd, output, output_norm, rope_freqs;
	const struct pg_layer_desc *layers; /* hp.n_layer */
};

/* ---- the KV pool --------------------------------------------------------- */

/* A block holds block_size consecutive positions of one sequence, every
 * layer, K and V, each row kv_dim elements: K's of type_k, V's of type_v
 * (F16, or a quantized cache type: pg_kv_type_ok; head_dim a whole number
 * of the type's blocks), pg_row_size(type, kv_dim) bytes a row. How a
 * backend lays a block out in its memory is its own business; the host
 * image (kv_copy_out / kv_copy_in, the offload tier and disaggregated
 * serving) is fixed:
 *   K[layer][slot][K row], then V[layer][slot][V row]
 * with slot = position % block_size, pg_kv_block_bytes() bytes in all. */
struct pg_kv_layout {
	int block_size;
	int n_layer;
	int kv_dim;
	uint32_t type_k, type_v;
};

static inline size_t pg_kv_block_bytes(const struct pg_kv_layout *l)
{
	return (pg_row_size(l->type_k, (uint64_t)l->kv_dim) + pg_row_size(l->type_v, (uint64_t)l->kv_dim)) *
	       (size_t)l->block_size * (size_t)l->n_layer;
}

/* Where the pool's bytes are, for a backend that keeps them in host memory
 * (PG_BACKEND_CAP_KV_HOST): the K row of block b, layer l, slot j starts
 *   k + b*k_block_stride + l*k_layer_stride + j*pg_row_size(type_k, kv_dim)
 * bytes in (likewise V). daemon/kv's kv_k_row / kv_v_row read through this. */
struct pg_kv_host {
	uint8_t *k, *v;
	size_t k_layer_stride, k_block_stride, v_layer_stride, v_block_stride; /* bytes */
};

/* ---- one step -------------------------------------------------------------- */

/* One sequence's block table: position p lives in block blocks[p / block_size]. */
struct pg_block_table {
	const int32_t *blocks;
	int n_blocks;
};

/* llama.cpp's default n_ubatch: the CPU backend reproduces its rounding,
 * which depends on where a token falls in its ubatch (see pg_batch.ubatch). */
#define PG_UBATCH 512

/* A ragged batch: token i is tokens[i] at position pos[i] of sequence
 * seq[i] (an index into seqs). Every earlier position of that sequence is
 * already in the KV cache or earlier in this batch; a sequence's tokens
 * come in position order. The step writes each token's K and V at its
 * position, so the blocks must be reserved (daemon/kv) and held by that
 * sequence alone from that position on. */
struct pg_batch {
	int n_tokens;
	const int32_t *tokens, *pos, *seq; /* [n_tokens] */
	const bool *want;                  /* [n_tokens]: this row's logits (or id) are wanted */
	/* [n_tokens] or NULL: how many tokens llama.cpp's ubatch holds when it
	 * computes this one for its request alone (a prompt of n tokens cut in
	 * PG_UBATCH from position 0; a generated token: 1); the token sits at
	 * index pos % PG_UBATCH of it. A backend that matches llama.cpp bit for
	 * bit picks kernels by it; others ignore it. NULL: one ubatch of
	 * n_tokens. */
	const int32_t *ubatch;
	int n_seqs;
	const struct pg_block_table *seqs; /* [n_seqs] */
	/* Outputs, host memory, one row per wanted token in batch order:
	 * logits: n_vocab floats each (row stride n_vocab), or NULL when ids
	 * is given; ids: the first maximum of each row (greedy, as llama.cpp),
	 * only with PG_BACKEND_CAP_GREEDY, else NULL. */
	float *logits;
	int32_t *ids;
};

/* The largest step the engine will run: the backend sizes its scratch by
 * it. A step beyond it fails with -EINVAL. */
struct pg_step_limits {
	int max_tokens; /* tokens in one step */
	int max_seqs;   /* sequences in one step */
	int n_ctx;      /* positions per sequence */
};

/* ---- the backend --------------------------------------------------------- */

enum {
	/* Rounds as llama.cpp's CPU backend does, bit for bit: the goldens apply. */
	PG_BACKEND_CAP_EXACT = 1u << 0,
	/* KV bytes in host memory: kv_host works. */
	PG_BACKEND_CAP_KV_HOST = 1u << 1,
	/* Weights and KV live in device memory; mem_info describes it. */
	PG_BACKEND_CAP_DEVICE_MEM = 1u << 2,
	/* step can write greedy ids (pg_batch.ids) instead of logits. */
	PG_BACKEND_CAP_GREEDY = 1u << 3,
};

struct pg_backend_opts {
	const char *device; /* NULL or "": the first; cuda: a device ordinal ("1") */
	int threads;        /* host threads for compute; <= 0: all online cores */
	/* Bytes of its memory (device memory for a device backend) the
	 * backend may take for weights, scratch and KV together; 0: all. The
	 * CPU takes what the engine asks (--kv-mem) and ignores it. */
	int64_t mem_limit;
	/* Called while loading weights (stage, fraction of it done) on the
	 * calling thread; may be NULL. */
	void (*progress)(void *user, const char *stage, double frac);
	void *progress_user;
};

struct pg_mem_info {
	int64_t total; /* bytes of the memory weights and KV live in */
	int64_t free;  /* left now, within mem_limit */
};

struct pg_backend_ops;

/* A backend instance. Implementations embed it as their first member and
 * fill every field in create; lib belongs to the registry. */
struct pg_backend {
	const struct pg_backend_ops *ops;
	const char *name; /* "cpu", "cuda" */
	uint32_t caps;    /* PG_BACKEND_CAP_* */
	void *lib;        /* dlopen handle of the backend's library, or NULL */
};

struct pg_backend_ops {
	uint32_t abi; /* PG_BACKEND_ABI */
	const char *name;
	/* Devices usable now: > 0; 0 when none, why saying so in one line
	 * ("no CUDA device: cudaGetDeviceCount: no CUDA-capable device is
	 * detected"); < 0 on error. No instance needed. */
	int (*probe)(char *why, size_t whylen);
	int (*create)(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t errlen);
	/* Frees weights, scratch and the KV pool. NULL-safe in the wrapper. */
	void (*destroy)(struct pg_backend *b);
	/* One line for logs and the bus: "cpu (avx512, 2 threads)",
	 * "cuda 0: NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB". */
	void (*describe)(const struct pg_backend *b, char *buf, size_t len);
	int (*mem_info)(const struct pg_backend *b, struct pg_mem_info *out);
	/* Once per instance. Refuses a model it cannot run (a type it lacks,
	 * weights that do not fit) naming the tensor and the sizes. */
	int (*load_weights)(struct pg_backend *b, const struct pg_model_desc *m, char *err, size_t errlen);
	/* After load_weights; may be called again with larger limits. */
	int (*reserve)(struct pg_backend *b, const struct pg_step_limits *lim, char *err, size_t errlen);
	/* Once per instance, after load_weights: n_blocks blocks of layout
	 * (layout.n_layer and kv_dim match the model's). Fresh blocks need not
	 * be zeroed: a step only reads positions it or an earlier step wrote.
	 * Refuses (-EINVAL, saying why) cache types it lacks and a head size
	 * that is not a whole number of a type's blocks. */
	int (*kv_alloc)(struct pg_backend *b, const struct pg_kv_layout *layout, int64_t n_blocks, char *err,
			size_t errlen);
	/* PG_BACKEND_CAP_KV_HOST only (NULL otherwise): where the bytes are. */
	int (*kv_host)(struct pg_backend *b, struct pg_kv_host *out);
	/* A block's host image (struct pg_kv_layout) to / from host memory at
	 * dst / src, pg_kv_block_bytes() long, any alignment. */
	int (*kv_copy_out)(struct pg_backend *b, int32_t block, void *dst);
	int (*kv_copy_in)(struct pg_backend *b, int32_t block, const void *src);
	/* One forward pass over a batch (struct pg_batch). -EINVAL, before
	 * touching the KV pool, for a batch beyond the limits, a bad token or
	 * sequence index, or a position past its block table or the context. */
	int (*step)(struct pg_backend *b, const struct pg_batch *batch);
	/* Waits for everything the backend has queued. */
	int (*sync)(struct pg_backend *b);
	/* The last failure's text, for a step or copy whose error code alone
	 * says too little; "" when none. */
	const char *(*last_error)(const struct pg_backend *b);
};

/* ---- the registry ---------------------------------------------------------
 * "cpu": built in. "cuda": dlopens libpagoda-cuda.so from $PAGODA_CUDA_LIB,
 * else from the running binary's directory, else from the loader's search
 * path, and calls PG_BACKEND_CUDA_ENTRY(PG_BACKEND_ABI); fails when the
 * library, its entry or a device is missing, saying which. "auto": cuda
 * when its library loads and its probe finds a device, else cpu.
 * msg: on success, one line saying what was picked and why ("cpu: no CUDA
 * device: ..."; empty for an explicit name); on failure, the error. */
int pg_backend_open(const char *name, const struct pg_backend_opts *o, struct pg_backend **out, char *msg,
		    size_t msglen);
/* destroy, then dlclose the library. NULL-safe. */
void pg_backend_close(struct pg_backend *b);
/* The built-in backend's table. */
const struct pg_backend_ops *pg_backend_cpu_ops(void);

/* What a backend library exports: returns its table, or NULL when built
 * for another abi. */
#define PG_BACKEND_CUDA_ENTRY "pg_backend_cuda_entry"
typedef const struct pg_backend_ops *(*pg_backend_entry_fn)(uint32_t abi);

/* ---- wrappers --------------------------------------------------------------- */
static inline void pg_backend_describe(const struct pg_backend *b, char *buf, size_t len)
{
	b->ops->describe(b, buf, len);
}
static inline int pg_backend_mem_info(const struct pg_backend *b, struct pg_mem_info *out)
{
	return b->ops->mem_info(b, out);
}
static inline int pg_backend_load_weights(struct pg_backend *b, const struct pg_model_desc *m, char *err,
					  size_t errlen)
{
	return b->ops->load_weights(b, m, err, errlen);
}
static inline int pg_backend_reserve(struct pg_backend *b, const struct pg_step_limits *lim, char *err,
				     size_t errlen)
{
	return b->ops->reserve(b, lim, err, errlen);
}
static inline int pg_backend_kv_alloc(struct pg_backend *b, const struct pg_kv_layout *layout, int64_t n_blocks,
				      char *err, size_t errlen)
{
	return b->ops->kv_alloc(b, layout, n_blocks, err, errlen);
}
static inline int pg_backend_kv_host(struct pg_backend *b, struct pg_kv_host *out)
{
	return b->ops->kv_host ? b->ops->kv_host(b, out) : -ENOTSUP;
}
static inline int pg_backend_kv_copy_out(struct pg_backend *b, int32_t block, void *dst)
{
	return b->ops->kv_copy_out(b, block, dst);
}
static inline int pg_backend_kv_copy_in(struct pg_backend *b, int32_t block, const void *src)
{
	return b->ops->kv_copy_in(b, block, src);
}
static inline int pg_backend_step(struct pg_backend *b, const struct pg_batch *batch)
{
	return b->ops->step(b, batch);
}
static inline int pg_backend_sync(struct pg_backend *b)
{
	return b->ops->sync(b);
}
static inline const char *pg_backend_last_error(const struct pg_backend *b)
{
	return b->ops->last_error(b);
}

#ifdef __cplusplus
}
#endif

#endif
