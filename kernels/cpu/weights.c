/* kernels/cpu/weights.c — the CPU backend's take on a model's weights:
 * types checked against the kernels, the streamed matrices laid out for
 * them, and the pages left in the file's mapping read in before the first
 * step needs them. */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/repack.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
static bool repackable(const struct cpu_weight *w)
{
	return ((w->type == PG_TYPE_Q4_0 || w->type == PG_TYPE_IQ4_NL) && w->rows % 8 == 0 && w->cols % QK4_0 == 0) ||
	       (w->type == PG_TYPE_Q4_K && w->rows % 8 == 0 && w->cols % QK_K == 0);
}

/* The type a repackable matrix takes in the copy, and the copy's bytes. */
static uint32_t repacked_type(const struct cpu_weight *w)
{
	switch (w->type) {
	case PG_TYPE_Q4_K: return PG_TYPE_Q4_K_X8;
	case PG_TYPE_IQ4_NL: return PG_TYPE_IQ4_NL_X8;
	default: return PG_TYPE_Q4_0_X8;
	}
}

static size_t repacked_bytes(const struct cpu_weight *w)
{
	return w->type == PG_TYPE_Q4_K ? pg_q4_K_x8_size(w->rows, w->cols) /* Q4_0, IQ4_NL */
				       : pg_q4_0_x8_size(w->rows, w->cols);
}

static size_t matrix_bytes(const struct cpu_weight *w)
{
	return pg_row_size(w->type, w->cols) * (size_t)w->rows;
}

static bool tied_to_embedding(const struct cpu_model *m, const struct cpu_weight *w)
{
	const uint8_t *emb = m->tok_embd.data, *d = w->data;
	return d < emb + matrix_bytes(&m->tok_embd) && emb < d + matrix_bytes(w);
}

static void drop_file_pages(const struct cpu_model *m, const struct cpu_weight *w)
{
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	if (tied_to_embedding(m, w))
		return; /* the embedding still reads them */
	uintptr_t a = ((uintptr_t)w->data + pg - 1) & ~(uintptr_t)(pg - 1);
	uintptr_t b = ((uintptr_t)w->data + matrix_bytes(w)) & ~(uintptr_t)(pg - 1);
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

static size_t placed_bytes(const struct cpu_weight *w)
{
	const size_t n = repackable(w) ? repacked_bytes(w) : matrix_bytes(w);
	return (n + 63) & ~(size_t)63;
}

/* The copies are built by several threads, each taking a share of every
 * matrix (groups of 8 rows, or rows): most of the cost is the kernel
 * zeroing fresh pages on first touch, which then runs on every core too.
 * Q8_0 rows are checked for a -128 quant as they are copied (m128[i]). */
struct place_work {
	struct cpu_weight *const *ws;
	const size_t *dst_off;
	_Atomic bool *m128;
	int n, ith, nth;
	uint8_t *base;
};

/* Copies rows [r0, r1) of a plain matrix a slice at a time, a Q8_0 slice
 * scanned while it is still in cache. */
static void copy_rows(const struct cpu_weight *w, uint8_t *dst, int64_t r0, int64_t r1, _Atomic bool *m128)
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
		const struct cpu_weight *w = pw->ws[i];
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

static int place_weights(struct cpu_model *m, char *err, size_t errlen)
{
	const int nw = 7 * m->hp.n_layer + 1;
	struct cpu_weight **ws = malloc(nw * sizeof *ws);
	size_t *off = malloc(nw * sizeof *off);
	_Atomic bool *m128 = calloc(nw, sizeof *m128);
	if (!ws || !off || !m128) {
		free(ws);
		free(off);
		free(m128);
		snprintf(err, errlen, "cpu: out of memory");
		return -ENOMEM;
	}
	int n = 0;
	for (int i = 0; i < m->hp.n_layer; i++) {
		struct cpu_layer *ly = &m->layers[i];
		struct cpu_weight *lw[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down };
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
		snprintf(err, errlen, "cpu: cannot map %zu bytes for the weights: %s", total, strerror(errno));
		r = -ENOMEM;
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
		struct cpu_weight *w = ws[i];
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

bool cpu_weight_copied(const struct cpu_model *m, const struct cpu_weight *w)
{
	const uint8_t *b = m->weights, *d = w->data;
	return b && d >= b && d < b + m->weights_size;
}

/* The weights still read from the file's mapping. The ones copied at load
 * are resident already, and their file pages are not read again: touching
 * those would only map them back. */
static size_t file_weights(const struct cpu_model *m, const struct cpu_weight **out)
{
	size_t n = 0;
	for (int i = 0; i < m->hp.n_layer; i++) {
		const struct cpu_layer *ly = &m->layers[i];
		const struct cpu_weight *lw[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo,
						  &ly->w_gate, &ly->w_up, &ly->w_down };
		for (int j = 0; j < 7; j++)
			out[n++] = lw[j];
	}
	out[n++] = &m->tok_embd;
	if (m->output.data != m->tok_embd.data)
		out[n++] = &m->output;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!cpu_weight_copied(m, out[i]))
			out[k++] = out[i];
	return k;
}

/* Reads every page of those once, reporting progress, so the first request
 * does not pay for page faults and an operator sees loading advance. */
static void prefault_weights(const struct cpu_backend *cb)
{
	const struct cpu_model *m = &cb->m;
	const struct cpu_weight **ws = malloc((7 * (size_t)m->hp.n_layer + 2) * sizeof *ws);
	if (!ws)
		return; /* only an optimisation */
	const size_t nw = file_weights(m, ws);
	const size_t chunk = 64u << 20;
	size_t done = 0, total = 0;
	for (size_t i = 0; i < nw; i++)
		total += pg_row_size(ws[i]->type, ws[i]->cols) * (size_t)ws[i]->rows;
	volatile uint8_t sink = 0;
	for (size_t i = 0; i < nw; i++) {
		const uint8_t *base = ws[i]->data;
		const size_t size = pg_row_size(ws[i]->type, ws[i]->cols) * (size_t)ws[i]->rows;
		for (size_t off = 0; off < size; off += chunk) {
			size_t n = size - off < chunk ? size - off : chunk;
			uintptr_t a = (uintptr_t)(base + off) & ~(uintptr_t)4095;
			madvise((void *)a, (uintptr_t)(base + off + n) - a, MADV_WILLNEED);
			for (size_t p = 0; p < n; p += 4096)
				sink += base[off + p];
			done += n;
			if (cb->progress)
				cb->progress(cb->progress_user, "loading weights", total ? (double)done / total : 1.0);
		}
	}
	(void)sink;
	free(ws);
	if (cb->progress && !total)
		cb->progress(cb->progress_user, "loading weights", 1.0);
}

static int matrix(const struct pg_tensor *t, struct cpu_weight *w, char *err, size_t errlen)
{
	if (!t->data || t->rows <= 0 || t->cols <= 0) {
		snprintf(err, errlen, "model: tensor %s missing", t->name ? t->name : "?");
		return -EINVAL;
	}
	if (!pg_type_supported(t->type)) {
		snprintf(err, errlen, "model: tensor %s: weight type %s is not supported", t->name ? t->name : "?",
			 pg_type_name(t->type));
		return -EINVAL;
	}
	*w = (struct cpu_weight){ t->data, t->type, t->rows, t->cols };
	return 0;
}

/* 1-D tensors arrive as f32 (pg_tensor): used in place. */
static int vector(const struct pg_tensor *t, int64_t n, bool optional, const float **out, char *err,
		  size_t errlen)
{
	*out = NULL;
	if (!t->data && optional)
		return 0;
	if (!t->data || t->type != PG_TYPE_F32 || t->rows * t->cols != n) {
		snprintf(err, errlen, "model: tensor %s: expected %lld f32 values", t->name ? t->name : "?",
			 (long long)n);
		return -EINVAL;
	}
	*out = t->data;
	return 0;
}

int cpu_model_load(struct cpu_backend *cb, const struct pg_model_desc *d, char *err, size_t errlen)
{
	struct cpu_model *m = &cb->m;
	const struct pg_hparams *hp = &d->hp;
	m->hp = *hp;
	m->layers = calloc(hp->n_layer, sizeof *m->layers);
	if (!m->layers) {
		snprintf(err, errlen, "cpu: out of memory");
		return -ENOMEM;
	}
	const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
	int r;
	if ((r = matrix(&d->tok_embd, &m->tok_embd, err, errlen)) || (r = matrix(&d->output, &m->output, err, errlen)) ||
	    (r = vector(&d->output_norm, hp->n_embd, false, &m->output_norm, err, errlen)) ||
	    (r = vector(&d->rope_freqs, hp->rope_dim / 2, true, &m->rope_freqs, err, errlen)))
		return r;
	for (int i = 0; i < hp->n_layer; i++) {
		const struct pg_layer_desc *s = &d->layers[i];
		struct cpu_layer *ly = &m->layers[i];
		if ((r = vector(&s->attn_norm, hp->n_embd, false, &ly->attn_norm, err, errlen)) ||
		    (r = vector(&s->ffn_norm, hp->n_embd, false, &ly->ffn_norm, err, errlen)) ||
		    (r = vector(&s->bq, q_dim, true, &ly->bq, err, errlen)) ||
		    (r = vector(&s->bk, kv_dim, true, &ly->bk, err, errlen)) ||
		    (r = vector(&s->bv, kv_dim, true, &ly->bv, err, errlen)) ||
		    (r = matrix(&s->wq, &ly->wq, err, errlen)) || (r = matrix(&s->wk, &ly->wk, err, errlen)) ||
		    (r = matrix(&s->wv, &ly->wv, err, errlen)) || (r = matrix(&s->wo, &ly->wo, err, errlen)) ||
		    (r = matrix(&s->w_gate, &ly->w_gate, err, errlen)) ||
		    (r = matrix(&s->w_up, &ly->w_up, err, errlen)) ||
		    (r = matrix(&s->w_down, &ly->w_down, err, errlen)))
			return r;
	}
	if ((r = place_weights(m, err, errlen)))
		return r;
	prefault_weights(cb);
	return 0;
}

void cpu_model_free(struct cpu_model *m)
{
	free(m->layers);
	if (m->weights)
		munmap(m->weights, m->weights_size);
	memset(m, 0, sizeof *m);
}
