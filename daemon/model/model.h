/* daemon/model/model.h — a Llama-family model read from GGUF (llama,
 * mistral-style llama files, qwen2) and its batched forward pass.
 *
 * Weights keep the file's types; only the small 1-D tensors (norms,
 * biases) are converted to f32 at load. The matrices the forward pass
 * streams move into one anonymous huge-page mapping (model.weights), Q4_0,
 * IQ4_NL and Q4_K ones with a multiple of 8 rows repacked there
 * (PG_TYPE_Q4_0_X8, PG_TYPE_IQ4_NL_X8, PG_TYPE_Q4_K_X8, kernels/cpu/repack.h)
 * as llama.cpp repacks them, Q8_0 ones found free of -128 quants marked
 * PG_TYPE_Q8_0_S127; the token embedding stays in the
 * file's mapping.
 */
#ifndef PAGODA_MODEL_H
#define PAGODA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct tokenizer;
struct kv_pool;
struct kv_seq;
struct pg_pool;

enum model_arch { ARCH_LLAMA, ARCH_QWEN2 };
enum rope_kind { ROPE_NORM, ROPE_NEOX }; /* adjacent pairs / halves */

struct model_hparams {
	enum model_arch arch;
	int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
	int rope_dim;
	enum rope_kind rope_kind;
	float rope_base, rope_freq_scale, norm_eps;
};

struct model_weight {
	const void *data; /* in the file's mapping, or in model.weights */
	uint32_t type;
	int64_t rows, cols; /* rows outputs of cols inputs each */
};

struct model_layer {
	float *attn_norm, *ffn_norm;
	float *bq, *bk, *bv; /* qwen2 only */
	struct model_weight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct model {
	struct gguf_file *gguf;
	struct tokenizer *tok;
	struct model_hparams hp;
	struct model_weight tok_embd, output;
	float *output_norm;
	float *rope_freqs; /* llama3-style frequency factors, or NULL */
	struct model_layer *layers;
	char name[128];
	char arch_name[32];
	uint64_t n_params;
	uint32_t main_type; /* weight type of most of the bytes (as in the file) */
	void *weights;	    /* anonymous mapping of the streamed matrices, or NULL */
	size_t weights_size;
};

int model_load(const char *path, struct model **out, char *err, size_t errlen);
void model_free(struct model *m);
/* Whether w lives in model.weights (copied at load) rather than the file. */
bool model_weight_copied(const struct model *m, const struct model_weight *w);

/* One ragged batch: token i belongs to seqs[seq[i]] at position pos[i].
 * Every earlier position of that sequence must already be in the KV cache
 * or earlier in this batch. Logits are produced for the tokens with
 * want[i], in batch order, n_vocab floats each. */
struct fwd_batch {
	int n;
	const int32_t *tokens;
	const int32_t *pos;
	const int *seq;
	const bool *want;
	/* Per token: how many tokens llama.cpp's ubatch holds when it computes
	 * this one for the request alone (the prompt cut in ubatches of
	 * MODEL_UBATCH from position 0; a generated token alone). Attention
	 * picks ggml's kernel from it, so a token's numerics never depend on
	 * what the engine batched it with. NULL: every token's is b->n. */
	const int *ubatch;
	struct kv_seq *const *seqs;
	float *logits;
};

/* llama.cpp's default n_ubatch */
#define MODEL_UBATCH 512

/* The ubatch size (see struct fwd_batch) of position pos of a request
 * whose prompt is n_prompt tokens. */
static inline int model_ubatch_of(int pos, int n_prompt)
{
	if (pos >= n_prompt)
		return 1;
	const int start = pos / MODEL_UBATCH * MODEL_UBATCH;
	return n_prompt - start < MODEL_UBATCH ? n_prompt - start : MODEL_UBATCH;
}

struct fwd_ctx;
/* Scratch for batches of up to max_tokens tokens over contexts up to n_ctx. */
struct fwd_ctx *fwd_ctx_create(const struct model *m, int max_tokens, int n_ctx, struct pg_pool *pool);
void fwd_ctx_free(struct fwd_ctx *c);
int model_forward(const struct model *m, struct fwd_ctx *c, struct kv_pool *kv, const struct fwd_batch *b);

#endif
