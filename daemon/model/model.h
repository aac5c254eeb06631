/* daemon/model/model.h — a Llama-family model read from GGUF (llama,
 * mistral-style llama files, qwen2): its hyperparameters, tokenizer, and
 * the transformer described once for a backend (struct pg_model_desc,
 * kernels/pg_backend.h), every tensor's shape and type checked.
 *
 * The matrices stay in the file's mapping, in the file's types; the
 * backend lays them out as it wants when it takes them. Only the small 1-D
 * tensors (norms, biases) are converted to f32 here.
 */
#ifndef PAGODA_MODEL_H
#define PAGODA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/pg_backend.h"

struct gguf_file;
struct tokenizer;

enum model_arch { ARCH_LLAMA, ARCH_QWEN2 };

struct model_hparams {
	enum model_arch arch;
	int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
	int rope_dim;
	enum pg_rope_kind rope_kind;
	float rope_base, rope_freq_scale, norm_eps;
};

struct model {
	struct gguf_file *gguf;
	struct tokenizer *tok;
	struct model_hparams hp;
	/* What a backend runs: desc.layers points at layers; the 1-D tensors'
	 * f32 copies and the names belong to the model. */
	struct pg_model_desc desc;
	struct pg_layer_desc *layers;
	char *names;
	char name[128];
	char arch_name[32];
	uint64_t n_params;
	uint32_t main_type; /* weight type of most of the bytes (as in the file) */
};

int model_load(const char *path, struct model **out, char *err, size_t errlen);
void model_free(struct model *m);

/* llama.cpp's default n_ubatch */
#define MODEL_UBATCH PG_UBATCH

/* The ubatch size (see struct pg_batch) of position pos of a request
 * whose prompt is n_prompt tokens. */
static inline int model_ubatch_of(int pos, int n_prompt)
{
	if (pos >= n_prompt)
		return 1;
	const int start = pos / MODEL_UBATCH * MODEL_UBATCH;
	return n_prompt - start < MODEL_UBATCH ? n_prompt - start : MODEL_UBATCH;
}

#endif
