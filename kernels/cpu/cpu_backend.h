/* kernels/cpu/cpu_backend.h — the CPU backend's insides, shared by its
 * files (cpu_backend.c: the ops; weights.c: the weights' layout; forward.c:
 * the step) and read by the tests that check where the weights went. The
 * engine reaches the CPU backend only through kernels/pg_backend.h.
 *
 * The matrices a step streams move into one anonymous huge-page mapping
 * (cpu_model.weights): Q4_0, IQ4_NL and Q4_K ones with a multiple of 8
 * rows repacked there (PG_TYPE_Q4_0_X8, PG_TYPE_IQ4_NL_X8, PG_TYPE_Q4_K_X8,
 * kernels/cpu/repack.h) as llama.cpp repacks them, Q8_0 ones found free of
 * -128 quants marked PG_TYPE_Q8_0_S127; the token embedding stays in the
 * file's mapping.
 */
#ifndef PAGODA_KERNELS_CPU_BACKEND_H
#define PAGODA_KERNELS_CPU_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/pg_backend.h"

struct pg_pool;
struct fwd_ctx;

/* A matrix as the kernels take it: type may be an internal one. */
struct cpu_weight {
	const void *data; /* in the file's mapping, or in cpu_model.weights */
	uint32_t type;
	int64_t rows, cols; /* rows outputs of cols inputs each */
};

struct cpu_layer {
	const float *attn_norm, *ffn_norm;
	const float *bq, *bk, *bv; /* NULL when absent */
	struct cpu_weight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cpu_model {
	struct pg_hparams hp;
	struct cpu_weight tok_embd, output;
	const float *output_norm;
	const float *rope_freqs; /* or NULL */
	struct cpu_layer *layers;
	void *weights; /* anonymous mapping of the streamed matrices, or NULL */
	size_t weights_size;
};

/* One half of the KV pool (K or V): rows of type, row bytes each, in
 * blocks of n_layer * block_size rows (see struct pg_kv_host). */
struct cpu_kv_half {
	uint8_t *base;
	uint32_t type;
	size_t row, layer_stride, block_stride; /* bytes */
};

struct cpu_kv {
	struct pg_kv_layout layout;
	int64_t n_blocks;
	struct cpu_kv_half k, v;
};

struct cpu_backend {
	struct pg_backend base;
	int threads;
	struct pg_pool *pool;
	void (*progress)(void *user, const char *stage, double frac);
	void *progress_user;
	struct cpu_model m;
	bool loaded;
	struct fwd_ctx *fwd;
	struct pg_step_limits lim;
	struct cpu_kv kv;
	char err[256];
};

/* weights.c: the model as the kernels take it (types checked, matrices
 * placed), and its undoing. */
int cpu_model_load(struct cpu_backend *cb, const struct pg_model_desc *d, char *err, size_t errlen);
void cpu_model_free(struct cpu_model *m);
/* Whether w lives in m.weights (copied at load) rather than the file. */
bool cpu_weight_copied(const struct cpu_model *m, const struct cpu_weight *w);

/* forward.c: scratch for steps of up to max_tokens tokens over contexts
 * up to n_ctx, and the step. */
struct fwd_ctx *fwd_ctx_create(const struct cpu_model *m, int max_tokens, int n_ctx, struct pg_pool *pool);
void fwd_ctx_free(struct fwd_ctx *c);
int cpu_forward(const struct cpu_model *m, struct fwd_ctx *c, const struct cpu_kv *kv, const struct pg_batch *b);

/* The CPU backend's model, for tests and benchmarks; NULL before
 * load_weights or for another backend. */
const struct cpu_model *pg_cpu_backend_model(const struct pg_backend *b);
/* Its thread pool, for a benchmark that times kernels beside its steps. */
struct pg_pool *pg_cpu_backend_pool(const struct pg_backend *b);

#endif
