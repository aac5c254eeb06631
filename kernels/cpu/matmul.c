/* kernels/cpu/matmul.c — Y = X · Wᵀ over the pool.
 *
 * Activations are converted once to the weight's vec-dot type. Work is
 * handed out in chunks of weight rows through an atomic counter, so a
 * core that finishes early takes more. Inside a chunk the loop runs
 * activation rows in tiles of PG_MAX_NR: each weight row is streamed from
 * memory once per chunk (then hit in L1/L2 for the next tile), and the
 * kernel decodes each weight block once per tile. For m = 1 this is a
 * plain stream of the weights split across threads.
 *
 * Where the table has a gemv8 for the weight type and n % 8 == 0 (the
 * shapes llama.cpp repacks), chunks are whole groups of 8 rows and each
 * group goes to gemv8 in one call (see cpu.h). Where the ISA also packs
 * the activations for that type (struct pg_act_pack), they are packed
 * once per matmul and the tiles are 2 * PG_PACK_PAIRS rows wide.
 *
 * Q4_0 weights repacked at load (PG_TYPE_Q4_0_X8, repack.h) take their own
 * path: activations become pg_q8x blocks (Q8_0 plus the -8·Σy the kernel
 * starts each block from), chunks are whole groups, and activation rows go
 * in tiles of PG_X8_MAX_NR. The order of each output's float ops is fixed
 * by the kernel, so tiles and chunks change no bits.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

uint32_t pg_vec_dot_type(uint32_t wtype)
{
	switch (wtype) {
	case PG_TYPE_F32: return PG_TYPE_F32;
	case PG_TYPE_F16: return PG_TYPE_F16;
	case PG_TYPE_BF16: return PG_TYPE_BF16;
	case PG_TYPE_Q4_0:
	case PG_TYPE_Q4_0_X8:
	case PG_TYPE_Q5_0:
	case PG_TYPE_Q8_0: return PG_TYPE_Q8_0;
	case PG_TYPE_Q4_1:
	case PG_TYPE_Q5_1: return PG_TYPE_Q8_1;
	case PG_TYPE_Q4_K:
	case PG_TYPE_Q5_K:
	case PG_TYPE_Q6_K: return PG_TYPE_Q8_K;
	default: return PG_TYPE_COUNT;
	}
}

bool pg_type_supported(uint32_t type)
{
	return pg_vec_dot_type(type) != PG_TYPE_COUNT;
}

size_t pg_act_row_size(uint32_t wtype, int64_t k)
{
	uint32_t vt = pg_vec_dot_type(wtype);
	return vt == PG_TYPE_COUNT || k < 0 ? 0 : pg_row_size(vt, (uint64_t)k);
}

void pg_quantize_act(uint32_t wtype, const float *x, void *dst, int64_t k)
{
	uint32_t vt = pg_vec_dot_type(wtype);
	if (vt != PG_TYPE_COUNT)
		pg_kern_get()->from_float[vt](x, dst, k);
}

struct mm_job {
	pg_gemv_fn gemv;
	pg_gemv8_fn gemv8; /* non-NULL: rows in groups of 8 */
	pg_from_float_fn from_float;
	const char *W;
	size_t wrow;
	int64_t n, k;
	const float *X; /* conversion phase */
	char *Xq;
	size_t xrow;
	int64_t m;
	float *Y;
	int64_t ldy;
	int64_t chunk;
	int tile; /* activation rows per kernel call */
	_Atomic int64_t next;
};

static void quant_job(void *a, int ith, int nth)
{
	struct mm_job *j = a;
	for (int64_t i = ith; i < j->m; i += nth)
		j->from_float(j->X + i * j->k, j->Xq + (size_t)i * j->xrow, j->k);
}

static void mm_job_run(void *a, int ith, int nth)
{
	struct mm_job *j = a;
	(void)ith;
	(void)nth;
	const int64_t nchunks = (j->n + j->chunk - 1) / j->chunk;
	for (;;) {
		const int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (c >= nchunks)
			break;
		const int64_t r0 = c * j->chunk;
		const int64_t r1 = r0 + j->chunk < j->n ? r0 + j->chunk : j->n;
		for (int64_t i0 = 0; i0 < j->m; i0 += j->tile) {
			const int nr = (int)(j->m - i0 < j->tile ? j->m - i0 : j->tile);
			const char *x = j->Xq + (size_t)i0 * j->xrow;
			float *y = j->Y + i0 * j->ldy;
			if (j->gemv8) {
				for (int64_t r = r0; r < r1; r += 8)
					j->gemv8(j->k, j->W + (size_t)r * j->wrow, j->wrow, x, j->xrow, nr, y + r,
						 (size_t)j->ldy);
				continue;
			}
			for (int64_t r = r0; r < r1; r++)
				j->gemv(j->k, j->W + (size_t)r * j->wrow, x, j->xrow, nr, y + r, (size_t)j->ldy);
		}
	}
}

/* Rows per chunk: small enough that every thread gets several chunks
 * (balance), large enough to amortise the counter; for big batches also
 * small enough that a chunk of weights stays in L2 across the tiles. */
static int64_t pick_chunk(int64_t n, size_t wrow, int64_t m, int nth, bool by8)
{
	int64_t c = n / ((int64_t)nth * 8);
	if (m > PG_MAX_NR) {
		int64_t l2 = (int64_t)((256u << 10) / (wrow ? wrow : 1));
		if (c > l2)
			c = l2;
	}
	if (c < 4)
		c = 4;
	if (by8)
		c = (c + 7) & ~(int64_t)7;
	return c;
}

/* Per calling thread: the engine thread reuses its buffers for every
 * matmul of a step instead of allocating each time. */
struct tl_buf {
	void *p;
	size_t cap;
};
static _Thread_local struct tl_buf tl_act, tl_pack;

static void *scratch(struct tl_buf *b, size_t need)
{
	if (need > b->cap) {
		free(b->p);
		b->p = NULL;
		b->cap = 0;
		need = (need + 4095) & ~(size_t)4095;
		if (posix_memalign(&b->p, 64, need) != 0) {
			b->p = NULL;
			return NULL;
		}
		b->cap = need;
	}
	return b->p;
}

/* Where the ISA packs activations for this weight type, the tiles read
 * the packed pairs instead of the rows. */
static void use_packed(struct mm_job *j, uint32_t wtype)
{
	const struct pg_act_pack *pk = pg_kern_get()->act_pack[wtype];
	if (!pk || !j->gemv8 || j->m < 2)
		return;
	const size_t ps = pk->pair_bytes(j->k);
	void *buf = scratch(&tl_pack, ps * (size_t)((j->m + 1) / 2));
	if (!buf)
		return; /* the row kernels need no extra memory */
	pk->pack(j->Xq, j->xrow, j->m, j->k, buf, ps);
	j->Xq = buf;
	j->xrow = ps / 2;
	j->gemv8 = pk->gemv8;
	j->tile = 2 * PG_PACK_PAIRS;
}

static void run_matmul(struct pg_pool *p, struct mm_job *j, uint32_t wtype)
{
	j->tile = PG_MAX_NR;
	use_packed(j, wtype);
	j->chunk = pick_chunk(j->n, j->wrow, j->m, pg_pool_size(p), j->gemv8 != NULL);
	atomic_store_explicit(&j->next, 0, memory_order_relaxed);
	if ((j->n <= j->chunk && j->m <= PG_MAX_NR) || pg_pool_size(p) == 1)
		mm_job_run(j, 0, 1);
	else
		pg_pool_run(p, mm_job_run, j);
}

static bool setup(struct mm_job *j, const void *W, uint32_t wtype, int64_t n, int64_t k, int64_t m,
		  float *Y, int64_t ldy)
{
	const struct pg_kern *kern = pg_kern_get();
	uint32_t vt = pg_vec_dot_type(wtype);
	if (vt == PG_TYPE_COUNT || n <= 0 || m <= 0 || k <= 0)
		return false;
	j->wrow = pg_row_size(wtype, (uint64_t)k);
	j->xrow = pg_row_size(vt, (uint64_t)k);
	if (!j->wrow || !j->xrow)
		return false;
	j->gemv = kern->gemv[wtype];
	j->gemv8 = n % 8 == 0 ? kern->gemv8[wtype] : NULL;
	j->from_float = kern->from_float[vt];
	j->W = W;
	j->n = n;
	j->k = k;
	j->m = m;
	j->Y = Y;
	j->ldy = ldy;
	return true;
}

static void x8_matmul(struct pg_pool *p, const void *W, int64_t n, int64_t k, const float *X, const void *Xq,
		      int64_t m, float *Y, int64_t ldy);

void pg_matmul_q(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const void *Xq,
		 int64_t m, float *Y, int64_t ldy)
{
	if (wtype == PG_TYPE_Q4_0_X8) {
		x8_matmul(p, W, n, k, NULL, Xq, m, Y, ldy);
		return;
	}
	struct mm_job j;
	if (!setup(&j, W, wtype, n, k, m, Y, ldy))
		return;
	j.Xq = (char *)Xq;
	run_matmul(p, &j, wtype);
}

/* ---- PG_TYPE_Q4_0_X8 ---------------------------------------------------- */

struct x8_job {
	pg_q4_0_x8_fn fn;
	pg_from_float_fn from_float;
	const char *W;
	size_t gbytes; /* bytes of a group of 8 rows */
	int64_t n, k, nb, m;
	const float *X; /* f32 activations, or */
	const char *Xq; /* Q8_0 ones (row stride xrow) */
	size_t xrow;
	pg_q8x *Xx; /* what the kernel reads, nb blocks a row */
	float *Y;
	int64_t ldy;
	int64_t chunk; /* groups */
	_Atomic int64_t next;
};

static void x8_quant_job(void *a, int ith, int nth)
{
	struct x8_job *j = a;
	for (int64_t i = ith; i < j->m; i += nth) {
		pg_q8x *dst = j->Xx + i * j->nb;
		if (!j->X) {
			pg_q8x_from_q8_0(j->Xq + (size_t)i * j->xrow, dst, j->nb);
			continue;
		}
		/* a block at a time: no Q8_0 row buffer needed */
		for (int64_t b = 0; b < j->nb; b++) {
			block_q8_0 t;
			j->from_float(j->X + i * j->k + b * QK8_0, &t, QK8_0);
			pg_q8x_from_q8_0(&t, dst + b, 1);
		}
	}
}

static void x8_job_run(void *a, int ith, int nth)
{
	struct x8_job *j = a;
	(void)ith;
	(void)nth;
	const int64_t ng = j->n / 8, nchunks = (ng + j->chunk - 1) / j->chunk;
	const size_t xxrow = (size_t)j->nb * sizeof(pg_q8x);
	for (;;) {
		const int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (c >= nchunks)
			break;
		const int64_t g0 = c * j->chunk, g1 = g0 + j->chunk < ng ? g0 + j->chunk : ng;
		for (int64_t i0 = 0; i0 < j->m; i0 += PG_X8_MAX_NR) {
			const int nr = (int)(j->m - i0 < PG_X8_MAX_NR ? j->m - i0 : PG_X8_MAX_NR);
			for (int64_t g = g0; g < g1; g++)
				j->fn(j->nb, j->W + (size_t)g * j->gbytes, j->Xx + i0 * j->nb, xxrow, nr,
				      j->Y + i0 * j->ldy + 8 * g, (size_t)j->ldy);
		}
	}
}

static void x8_matmul(struct pg_pool *p, const void *W, int64_t n, int64_t k, const float *X, const void *Xq,
		      int64_t m, float *Y, int64_t ldy)
{
	const struct pg_kern *kern = pg_kern_get();
	if (n <= 0 || n % 8 || m <= 0 || k <= 0 || k % QK4_0)
		return;
	struct x8_job j = {
		.fn = kern->q4_0_x8,
		.from_float = kern->from_float[PG_TYPE_Q8_0],
		.W = W,
		.gbytes = PG_X8_GROUP_BYTES(k / QK4_0),
		.n = n,
		.k = k,
		.nb = k / QK4_0,
		.m = m,
		.X = X,
		.Xq = Xq,
		.xrow = pg_row_size(PG_TYPE_Q8_0, (uint64_t)k),
		.Y = Y,
		.ldy = ldy,
	};
	j.Xx = scratch(&tl_pack, (size_t)m * (size_t)j.nb * sizeof(pg_q8x));
	if (!j.Xx)
		return;
	const int nth = pg_pool_size(p);
	if (m >= 4 && nth > 1)
		pg_pool_run(p, x8_quant_job, &j);
	else
		x8_quant_job(&j, 0, 1);
	j.chunk = pick_chunk(n, pg_row_size(PG_TYPE_Q4_0, (uint64_t)k), m, nth, true) / 8;
	atomic_store_explicit(&j.next, 0, memory_order_relaxed);
	if ((n <= 8 * j.chunk && m <= PG_X8_MAX_NR) || nth == 1)
		x8_job_run(&j, 0, 1);
	else
		pg_pool_run(p, x8_job_run, &j);
}

void pg_matmul(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const float *X,
	       int64_t m, float *Y, int64_t ldy)
{
	if (wtype == PG_TYPE_Q4_0_X8) {
		x8_matmul(p, W, n, k, X, NULL, m, Y, ldy);
		return;
	}
	struct mm_job j;
	if (!setup(&j, W, wtype, n, k, m, Y, ldy))
		return;
	if (pg_vec_dot_type(wtype) == PG_TYPE_F32) {
		j.Xq = (char *)X;
	} else {
		j.Xq = scratch(&tl_act, j.xrow * (size_t)m);
		if (!j.Xq)
			return;
		j.X = X;
		if (m >= 4 && pg_pool_size(p) > 1)
			pg_pool_run(p, quant_job, &j);
		else
			quant_job(&j, 0, 1);
	}
	run_matmul(p, &j, wtype);
}
