/* daemon/model/model_load.c — hyperparameters and weights from a GGUF,
 * every tensor's shape and type checked before the forward pass trusts it. */
#include "daemon/model/model.h"
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/cpu/repack.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct loader {
	struct model *m;
	char *err;
	size_t errlen;
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
		hp->rope_kind = ROPE_NORM;
	} else if (gguf_str_eq(s, "qwen2")) {
		hp->arch = ARCH_QWEN2;
		hp->rope_kind = ROPE_NEOX;
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

/* A matrix of rows outputs by cols inputs: ggml's ne = {cols, rows}. */
static int load_matrix(struct loader *l, const char *name, int64_t cols, int64_t rows,
		       struct model_weight *w)
{
	const struct gguf_tensor *t = find(l, name);
	if (!t)
		return lfail(l, "model: tensor %s missing", name);
	if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
		return lfail(l, "model: tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
			     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)cols,
			     (long long)rows);
	if (!pg_type_supported(t->type))
		return lfail(l, "model: tensor %s: weight type %s is not supported", name,
			     pg_type_name(t->type));
	w->data = t->data;
	w->type = t->type;
	w->rows = rows;
	w->cols = cols;
	l->m->n_params += (uint64_t)rows * cols;
	return 0;
}

/* 1-D tensors are tiny: keep f32 copies so the hot loop never converts. */
static int load_vector(struct loader *l, const char *name, int64_t n, bool optional, float **out)
{
	const struct gguf_tensor *t = find(l, name);
	*out = NULL;
	if (!t)
		return optional ? 0 : lfail(l, "model: tensor %s missing", name);
	if ((int64_t)t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return lfail(l, "model: tensor %s has %llu elements, expected %lld", name,
			     (unsigned long long)t->ne[0], (long long)n);
	if (!pg_type_supported(t->type))
		return lfail(l, "model: tensor %s: type %s is not supported", name, pg_type_name(t->type));
	*out = malloc(n * sizeof(float));
	if (!*out)
		return lfail(l, "model: out of memory");
	pg_dequant_row(t->type, t->data, *out, n);
	l->m->n_params += n;
	return 0;
}

static int load_layer(struct loader *l, int i, struct model_layer *ly)
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
		const struct model_layer *ly = &m->layers[i];
		const struct model_weight *ws[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo,
						    &ly->w_gate, &ly->w_up, &ly->w_down };
		for (int j = 0; j < 7; j++)
			bytes[ws[j]->type] += pg_row_size(ws[j]->type, ws[j]->cols) * ws[j]->rows;
	}
	uint32_t best = 0;
	for (uint32_t t = 1; t < PG_TYPE_COUNT; t++)
		if (bytes[t] > bytes[best])
			best = t;
	return best;
}

/* The matrices the forward pass streams (every layer's seven and the
 * output) move into one anonymous mapping backed by huge pages: a decode
 * step reads all of them, and from 4 KiB file pages it pays a TLB miss
 * every 4 KiB (bench/mm_decode, run with and without PAGODA_MMAP_WEIGHTS=1,
 * measures the difference). Q4_0, IQ4_NL and Q4_K matrices with a multiple of 8
 * rows, the ones llama.cpp repacks (q4_0_8x8, iq4_nl_8x8, q4_K_8x8), go
 * in the 8-row layouts of kernels/cpu/repack.h; their kernels keep
 * llama.cpp's orders. The rest are copied as they are. The token
 * embedding is read by rows, not multiplied, and stays where it is (an output tied to it stays too, unless it is
 * repacked). The file pages a matrix came from are dropped from the file's
 * mapping: nothing reads them again, and they would otherwise count twice.
 * PAGODA_MMAP_WEIGHTS=1 keeps the unrepacked matrices in the file's
 * mapping (shared with other processes through the page cache), and so
 * does a machine where the copies would take more than half of the memory
 * available: file pages can be reclaimed under pressure, anonymous ones
 * without swap cannot. */
static bool repackable(const struct model_weight *w)
{
	return ((w->type == PG_TYPE_Q4_0 || w->type == PG_TYPE_IQ4_NL) && w->rows % 8 == 0 && w->cols % QK4_0 == 0) ||
	       (w->type == PG_TYPE_Q4_K && w->rows % 8 == 0 && w->cols % QK_K == 0);
}

/* The type a repackable matrix takes in the copy, and the copy's bytes. */
static uint32_t repacked_type(const struct model_weight *w)
{
	switch (w->type) {
	case PG_TYPE_Q4_K: return PG_TYPE_Q4_K_X8;
	case PG_TYPE_IQ4_NL: return PG_TYPE_IQ4_NL_X8;
	default: return PG_TYPE_Q4_0_X8;
	}
}

static size_t repacked_bytes(const struct model_weight *w)
{
	return w->type == PG_TYPE_Q4_K ? pg_q4_K_x8_size(w->rows, w->cols) /* Q4_0, IQ4_NL */
				       : pg_q4_0_x8_size(w->rows, w->cols);
}

static size_t matrix_bytes(const struct model_weight *w)
{
	return pg_row_size(w->type, w->cols) * (size_t)w->rows;
}

static bool tied_to_embedding(const struct model *m, const struct model_weight *w)
{
	const uint8_t *emb = m->tok_embd.data, *d = w->data;
	return d < emb + matrix_bytes(&m->tok_embd) && emb < d + matrix_bytes(w);
}

static void drop_file_pages(const struct model *m, const struct model_weight *w)
{
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	if (tied_to_embedding(m, w))
		return; /* the embedding still reads them */
	uintptr_t a = ((uintptr_t)w->data + pg - 1) & ~(uintptr_t)(pg - 1);
	uintptr_t b = ((uintptr_t)w->data + matrix_bytes(w)) & ~(uintptr_t)(pg - 1);
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

static size_t placed_bytes(const struct model_weight *w)
{
	const size_t n = repackable(w) ? repacked_bytes(w) : matrix_bytes(w);
	return (n + 63) & ~(size_t)63;
}

/* The copies are built by several threads, each taking a share of every
 * matrix (groups of 8 rows, or rows): most of the cost is the kernel
 * zeroing fresh pages on first touch, which then runs on every core too.
 * Q8_0 rows are checked for a -128 quant as they are copied (m128[i]). */
struct place_work {
	struct model_weight *const *ws;
	const size_t *dst_off;
	_Atomic bool *m128;
	int n, ith, nth;
	uint8_t *base;
};

/* Copies rows [r0, r1) of a plain matrix a slice at a time, a Q8_0 slice
 * scanned while it is still in cache. */
static void copy_rows(const struct model_weight *w, uint8_t *dst, int64_t r0, int64_t r1, _Atomic bool *m128)
{
	const size_t wrow = pg_row_size(w->type, w->cols), slice = 256u << 10;
	const uint8_t *src = (const uint8_t *)w->data + (size_t)r0 * wrow;
	dst += (size_t)r0 * wrow;
	const size_t rows_per = slice / wrow ? slice / wrow : 1;
	for (int64_t r = r0; r < r1; r += (int64_t)rows_per) {
		const size_t nr = (size_t)(r1 - r) < rows_per ? (size_t)(r1 - r) : rows_per;
		memcpy(dst, src, nr * wrow);
		if (w->type == PG_TYPE_Q8_0 && !atomic_load_explicit(m128, memory_order_relaxed) &&
		    pg_q8_0_has_m128(dst, (int64_t)(nr * wrow / sizeof(block_q8_0))))
			atomic_store_explicit(m128, true, memory_order_relaxed);
		src += nr * wrow;
		dst += nr * wrow;
	}
}

static void *place_part(void *a)
{
	const struct place_work *pw = a;
	for (int i = 0; i < pw->n; i++) {
		const struct model_weight *w = pw->ws[i];
		uint8_t *dst = pw->base + pw->dst_off[i];
		const size_t wrow = pg_row_size(w->type, w->cols);
		if (!repackable(w)) {
			const int64_t r0 = w->rows * pw->ith / pw->nth, r1 = w->rows * (pw->ith + 1) / pw->nth;
			copy_rows(w, dst, r0, r1, &pw->m128[i]);
			continue;
		}
		const int64_t ng = w->rows / 8, g0 = ng * pw->ith / pw->nth, g1 = ng * (pw->ith + 1) / pw->nth;
		if (g1 <= g0)
			continue;
		const uint8_t *src = (const uint8_t *)w->data + (size_t)g0 * 8 * wrow;
		if (w->type == PG_TYPE_Q4_K)
			pg_q4_K_x8_repack(src, dst + (size_t)g0 * PG_Q4KX8_GROUP_BYTES(w->cols / QK_K), (g1 - g0) * 8,
					  w->cols);
		else
			pg_q4_0_x8_repack(src, dst + (size_t)g0 * PG_X8_GROUP_BYTES(w->cols / QK4_0), (g1 - g0) * 8,
					  w->cols);
	}
	return NULL;
}

/* MemAvailable in bytes, or 0 when it cannot be read. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return 0;
	char line[128];
	unsigned long long kb = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

/* Whether the unrepacked matrices are copied too, bytes being the size of
 * the copy with them. */
static bool copy_wanted(uint64_t bytes)
{
	const char *env = getenv("PAGODA_MMAP_WEIGHTS");
	if (env && env[0] == '1')
		return false;
	const uint64_t avail = mem_available();
	return avail == 0 || bytes <= avail / 2;
}

static int place_weights(struct loader *l)
{
	struct model *m = l->m;
	const int nw = 7 * m->hp.n_layer + 1;
	struct model_weight **ws = malloc(nw * sizeof *ws);
	size_t *off = malloc(nw * sizeof *off);
	_Atomic bool *m128 = calloc(nw, sizeof *m128);
	if (!ws || !off || !m128) {
		free(ws);
		free(off);
		free(m128);
		return lfail(l, "model: out of memory");
	}
	int n = 0;
	for (int i = 0; i < m->hp.n_layer; i++) {
		struct model_layer *ly = &m->layers[i];
		struct model_weight *lw[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down };
		for (int j = 0; j < 7; j++)
			ws[n++] = lw[j];
	}
	if (repackable(&m->output) || !tied_to_embedding(m, &m->output))
		ws[n++] = &m->output;
	uint64_t all = 0;
	for (int i = 0; i < n; i++)
		all += placed_bytes(ws[i]);
	if (!copy_wanted(all)) { /* the repacked ones only */
		int kept = 0;
		for (int i = 0; i < n; i++)
			if (repackable(ws[i]))
				ws[kept++] = ws[i];
		n = kept;
	}
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		off[i] = total;
		total += placed_bytes(ws[i]);
	}
	int r = 0;
	if (!total)
		goto out;
	void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		r = lfail(l, "model: cannot map %zu bytes for the weights: %s", total, strerror(errno));
		goto out;
	}
	madvise(p, total, MADV_HUGEPAGE); /* fewer TLB misses while streaming */
	m->weights = p;
	m->weights_size = total;
	enum { MAX_THREADS = 8 };
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int nth = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;
	struct place_work pw[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	for (int t = 0; t < nth; t++) {
		pw[t] = (struct place_work){ ws, off, m128, n, t, nth, p };
		if (t > 0)
			started[t] = pthread_create(&tid[t], NULL, place_part, &pw[t]) == 0;
	}
	place_part(&pw[0]);
	for (int t = 1; t < nth; t++) {
		if (started[t])
			pthread_join(tid[t], NULL);
		else
			place_part(&pw[t]); /* no thread: do its share here */
	}
	for (int i = 0; i < n; i++) {
		struct model_weight *w = ws[i];
		drop_file_pages(m, w);
		w->data = (uint8_t *)p + off[i];
		if (repackable(w))
			w->type = repacked_type(w);
		else if (w->type == PG_TYPE_Q8_0 && !atomic_load(&m128[i]))
			w->type = PG_TYPE_Q8_0_S127;
	}
	mprotect(p, total, PROT_READ); /* weights are constants from here on */
out:
	free(ws);
	free(off);
	free(m128);
	return r;
}

bool model_weight_copied(const struct model *m, const struct model_weight *w)
{
	const uint8_t *b = m->weights, *d = w->data;
	return b && d >= b && d < b + m->weights_size;
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
	if ((r = load_matrix(l, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd)))
		return r;
	if (find(l, "output.weight")) {
		if ((r = load_matrix(l, "output.weight", hp->n_embd, hp->n_vocab, &m->output)))
			return r;
	} else {
		m->output = m->tok_embd; /* tied embeddings */
	}
	if ((r = load_vector(l, "output_norm.weight", hp->n_embd, false, &m->output_norm)) ||
	    (r = load_vector(l, "rope_freqs.weight", hp->rope_dim / 2, true, &m->rope_freqs)))
		return r;
	m->layers = calloc(hp->n_layer, sizeof *m->layers);
	if (!m->layers)
		return lfail(l, "model: out of memory");
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
	return place_weights(l);
}

int model_load(const char *path, struct model **out, char *err, size_t errlen)
{
	struct model *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "model: out of memory");
		return -ENOMEM;
	}
	struct loader l = { m, err, errlen };
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
			struct model_layer *ly = &m->layers[i];
			free(ly->attn_norm);
			free(ly->ffn_norm);
			free(ly->bq);
			free(ly->bk);
			free(ly->bv);
		}
		free(m->layers);
	}
	free(m->output_norm);
	free(m->rope_freqs);
	if (m->weights)
		munmap(m->weights, m->weights_size);
	if (m->tok)
		tok_free(m->tok);
	gguf_close(m->gguf);
	free(m);
}
