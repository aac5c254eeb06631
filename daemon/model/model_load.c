/* daemon/model/model_load.c — hyperparameters and weights from a GGUF,
 * every tensor's shape and type checked before the forward pass trusts it. */
#include "daemon/model/model.h"
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for a tensor's name: "blk.16777215.attn_output.weight" and more. */
#define NAME_LEN 48

struct loader {
	struct model *m;
	char *err;
	size_t errlen;
	int n_names;
};

static int lfail(struct loader *l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(l->err, l->errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static bool key_u32(const struct model *m, const char *suffix, uint32_t *out)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
	return gguf_get_u32(m->gguf, key, out);
}

static bool key_f32(const struct model *m, const char *suffix, float *out)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
	return gguf_get_f32(m->gguf, key, out);
}

static int need_u32(struct loader *l, const char *suffix, int *out)
{
	uint32_t v;
	if (!key_u32(l->m, suffix, &v))
		return lfail(l, "model: missing metadata %s.%s", l->m->arch_name, suffix);
	if (v == 0 || v > (1u << 24))
		return lfail(l, "model: %s.%s = %u is out of range", l->m->arch_name, suffix, v);
	*out = (int)v;
	return 0;
}

static int read_hparams(struct loader *l)
{
	struct model *m = l->m;
	struct model_hparams *hp = &m->hp;
	struct gguf_str s;
	if (!gguf_get_str(m->gguf, "general.architecture", &s))
		return lfail(l, "model: general.architecture missing");
	if (gguf_str_eq(s, "llama") || gguf_str_eq(s, "mistral")) {
		hp->arch = ARCH_LLAMA;
		hp->rope_kind = PG_ROPE_NORM;
	} else if (gguf_str_eq(s, "qwen2")) {
		hp->arch = ARCH_QWEN2;
		hp->rope_kind = PG_ROPE_NEOX;
	} else {
		return lfail(l, "model: architecture '%.*s' is not supported (llama, mistral, qwen2 are)",
			     (int)(s.len > 40 ? 40 : s.len), s.ptr);
	}
	snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)s.len, s.ptr);
	if (gguf_get_str(m->gguf, "general.name", &s))
		snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len > 120 ? 120 : s.len), s.ptr);
	int r;
	if ((r = need_u32(l, "context_length", &hp->n_ctx_train)) ||
	    (r = need_u32(l, "embedding_length", &hp->n_embd)) ||
	    (r = need_u32(l, "block_count", &hp->n_layer)) ||
	    (r = need_u32(l, "feed_forward_length", &hp->n_ff)) ||
	    (r = need_u32(l, "attention.head_count", &hp->n_head)))
		return r;
	uint32_t v;
	hp->n_head_kv = key_u32(m, "attention.head_count_kv", &v) ? (int)v : hp->n_head;
	if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
		return lfail(l, "model: %d heads cannot share %d KV heads", hp->n_head, hp->n_head_kv);
	hp->head_dim = key_u32(m, "attention.key_length", &v) ? (int)v : hp->n_embd / hp->n_head;
	if (hp->head_dim <= 0 || hp->head_dim % 2 || hp->head_dim > 1024)
		return lfail(l, "model: head dimension %d is not supported", hp->head_dim);
	hp->rope_dim = key_u32(m, "rope.dimension_count", &v) ? (int)v : hp->head_dim;
	if (hp->rope_dim <= 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
		return lfail(l, "model: rope dimension %d does not fit head dimension %d", hp->rope_dim,
			     hp->head_dim);
	if (!key_f32(m, "rope.freq_base", &hp->rope_base))
		hp->rope_base = 10000.0f;
	hp->rope_freq_scale = 1.0f;
	float factor;
	struct gguf_str stype;
	char key[128];
	snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
	bool has_type = gguf_get_str(m->gguf, key, &stype);
	if (key_f32(m, "rope.scaling.factor", &factor) && factor > 0 &&
	    (!has_type || gguf_str_eq(stype, "linear")))
		hp->rope_freq_scale = 1.0f / factor;
	else if (has_type && !gguf_str_eq(stype, "none") && !gguf_str_eq(stype, "linear"))
		return lfail(l, "model: rope scaling '%.*s' is not supported (linear is)",
			     (int)(stype.len > 20 ? 20 : stype.len), stype.ptr);
	if (!key_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps))
		hp->norm_eps = 1e-5f;
	return 0;
}

static const struct gguf_tensor *find(struct loader *l, const char *name)
{
	return gguf_find_tensor(l->m->gguf, name);
}

/* A copy of name that lives as long as the model (pg_tensor.name). */
static const char *keep_name(struct loader *l, const char *name)
{
	char *dst = l->m->names + (size_t)l->n_names++ * NAME_LEN;
	snprintf(dst, NAME_LEN, "%s", name);
	return dst;
}

/* A matrix of rows outputs by cols inputs: ggml's ne = {cols, rows}. */
static int load_matrix(struct loader *l, const char *name, int64_t cols, int64_t rows, struct pg_tensor *w)
{
	const struct gguf_tensor *t = find(l, name);
	if (!t)
		return lfail(l, "model: tensor %s missing", name);
	if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
		return lfail(l, "model: tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
			     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)cols,
			     (long long)rows);
	*w = (struct pg_tensor){ keep_name(l, name), t->data, t->type, rows, cols };
	l->m->n_params += (uint64_t)rows * cols;
	return 0;
}

/* 1-D tensors are tiny: f32 copies, as the door wants them. Files keep
 * them in F32 (llama.cpp never quantizes them); F16 and BF16 convert
 * exactly. */
static int load_vector(struct loader *l, const char *name, int64_t n, bool optional, struct pg_tensor *out)
{
	const struct gguf_tensor *t = find(l, name);
	*out = (struct pg_tensor){ 0 };
	if (!t)
		return optional ? 0 : lfail(l, "model: tensor %s missing", name);
	if ((int64_t)t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return lfail(l, "model: tensor %s has %llu elements, expected %lld", name,
			     (unsigned long long)t->ne[0], (long long)n);
	if (t->type != PG_TYPE_F32 && t->type != PG_TYPE_F16 && t->type != PG_TYPE_BF16)
		return lfail(l, "model: tensor %s: type %s is not supported", name, pg_type_name(t->type));
	float *v = malloc(n * sizeof(float));
	if (!v)
		return lfail(l, "model: out of memory");
	for (int64_t i = 0; i < n; i++)
		if (t->type == PG_TYPE_F32)
			memcpy(&v[i], (const float *)t->data + i, sizeof(float));
		else if (t->type == PG_TYPE_F16)
			v[i] = pg_f16_to_f32(((const pg_f16 *)t->data)[i]);
		else
			v[i] = pg_bf16_to_f32(((const pg_bf16 *)t->data)[i]);
	*out = (struct pg_tensor){ keep_name(l, name), v, PG_TYPE_F32, 1, n };
	l->m->n_params += n;
	return 0;
}

static int load_layer(struct loader *l, int i, struct pg_layer_desc *ly)
{
	const struct model_hparams *hp = &l->m->hp;
	int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
	int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
	char n[14][64];
	static const char *names[] = { "attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v",
				       "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
	for (int j = 0; j < 9; j++)
		snprintf(n[j], sizeof n[j], "blk.%d.%s.weight", i, names[j]);
	snprintf(n[9], sizeof n[9], "blk.%d.attn_q.bias", i);
	snprintf(n[10], sizeof n[10], "blk.%d.attn_k.bias", i);
	snprintf(n[11], sizeof n[11], "blk.%d.attn_v.bias", i);
	bool bias_required = hp->arch == ARCH_QWEN2;
	int r;
	if ((r = load_vector(l, n[0], hp->n_embd, false, &ly->attn_norm)) ||
	    (r = load_vector(l, n[1], hp->n_embd, false, &ly->ffn_norm)) ||
	    (r = load_matrix(l, n[2], hp->n_embd, q_dim, &ly->wq)) ||
	    (r = load_matrix(l, n[3], hp->n_embd, kv_dim, &ly->wk)) ||
	    (r = load_matrix(l, n[4], hp->n_embd, kv_dim, &ly->wv)) ||
	    (r = load_matrix(l, n[5], q_dim, hp->n_embd, &ly->wo)) ||
	    (r = load_matrix(l, n[6], hp->n_embd, hp->n_ff, &ly->w_gate)) ||
	    (r = load_matrix(l, n[7], hp->n_embd, hp->n_ff, &ly->w_up)) ||
	    (r = load_matrix(l, n[8], hp->n_ff, hp->n_embd, &ly->w_down)) ||
	    (r = load_vector(l, n[9], q_dim, !bias_required, &ly->bq)) ||
	    (r = load_vector(l, n[10], kv_dim, !bias_required, &ly->bk)) ||
	    (r = load_vector(l, n[11], kv_dim, !bias_required, &ly->bv)))
		return r;
	return 0;
}

static uint32_t dominant_type(const struct model *m)
{
	uint64_t bytes[PG_TYPE_COUNT] = { 0 };
	for (int i = 0; i < m->hp.n_layer; i++) {
		const struct pg_layer_desc *ly = &m->layers[i];
		const struct pg_tensor *ws[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down };
		for (int j = 0; j < 7; j++)
			bytes[ws[j]->type] += pg_row_size(ws[j]->type, ws[j]->cols) * ws[j]->rows;
	}
	uint32_t best = 0;
	for (uint32_t t = 1; t < PG_TYPE_COUNT; t++)
		if (bytes[t] > bytes[best])
			best = t;
	return best;
}

static void describe(struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	struct pg_model_desc *d = &m->desc;
	d->hp = (struct pg_hparams){
		.n_vocab = hp->n_vocab, .n_embd = hp->n_embd, .n_layer = hp->n_layer, .n_ff = hp->n_ff,
		.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
		.rope_dim = hp->rope_dim, .rope_kind = hp->rope_kind, .rope_base = hp->rope_base,
		.rope_freq_scale = hp->rope_freq_scale, .norm_eps = hp->norm_eps,
	};
	d->layers = m->layers;
}

static int load_all(struct loader *l, const char *path)
{
	struct model *m = l->m;
	int r = gguf_open(path, &m->gguf, l->err, l->errlen);
	if (r)
		return r;
	if ((r = read_hparams(l)))
		return r;
	struct model_hparams *hp = &m->hp;
	const struct gguf_tensor *emb = find(l, "token_embd.weight");
	if (!emb || emb->n_dims != 2)
		return lfail(l, "model: tensor token_embd.weight missing or not 2-D");
	if (emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
		return lfail(l, "model: vocabulary of %llu tokens", (unsigned long long)emb->ne[1]);
	hp->n_vocab = (int)emb->ne[1];
	m->layers = calloc(hp->n_layer, sizeof *m->layers);
	m->names = malloc(((size_t)hp->n_layer * 12 + 4) * NAME_LEN);
	if (!m->layers || !m->names)
		return lfail(l, "model: out of memory");
	struct pg_model_desc *d = &m->desc;
	if ((r = load_matrix(l, "token_embd.weight", hp->n_embd, hp->n_vocab, &d->tok_embd)))
		return r;
	if (find(l, "output.weight")) {
		if ((r = load_matrix(l, "output.weight", hp->n_embd, hp->n_vocab, &d->output)))
			return r;
	} else {
		d->output = d->tok_embd; /* tied embeddings */
	}
	if ((r = load_vector(l, "output_norm.weight", hp->n_embd, false, &d->output_norm)) ||
	    (r = load_vector(l, "rope_freqs.weight", hp->rope_dim / 2, true, &d->rope_freqs)))
		return r;
	for (int i = 0; i < hp->n_layer; i++)
		if ((r = load_layer(l, i, &m->layers[i])))
			return r;
	m->main_type = dominant_type(m);
	char terr[256];
	if ((r = tok_load(m->gguf, &m->tok, terr, sizeof terr)))
		return lfail(l, "model: tokenizer: %s", terr);
	if (tok_n_vocab(m->tok) > hp->n_vocab)
		return lfail(l, "model: tokenizer has %d tokens but the embedding only %d",
			     tok_n_vocab(m->tok), hp->n_vocab);
	describe(m);
	return 0;
}

int model_load(const char *path, struct model **out, char *err, size_t errlen)
{
	struct model *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "model: out of memory");
		return -ENOMEM;
	}
	struct loader l = { m, err, errlen, 0 };
	int r = load_all(&l, path);
	if (r) {
		model_free(m);
		return r;
	}
	*out = m;
	return 0;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	if (m->layers) {
		for (int i = 0; i < m->hp.n_layer; i++) {
			struct pg_layer_desc *ly = &m->layers[i];
			free((void *)ly->attn_norm.data);
			free((void *)ly->ffn_norm.data);
			free((void *)ly->bq.data);
			free((void *)ly->bk.data);
			free((void *)ly->bv.data);
		}
		free(m->layers);
	}
	free((void *)m->desc.output_norm.data);
	free((void *)m->desc.rope_freqs.data);
	free(m->names);
	if (m->tok)
		tok_free(m->tok);
	gguf_close(m->gguf);
	free(m);
}
