/* kernels/cpu/matmul.c — Y = X · Wᵀ over the pool.
 *
 * Activations are converted once to the weight's vec-dot type. Work is
 * handed out in chunks of weight rows (dispenser.h): each thread
 * takes its own contiguous range of chunks front to back and then the
 * others' from their back, so a core that finishes early takes more and
 * the join waits on at most one chunk. Decode-sized batches go in chunks
 * of 8 rows. Inside a chunk the loop runs
 * activation rows in tiles of PG_MAX_NR: each weight row is streamed from
 * memory once per chunk (then hit in L1/L2 for the next tile), and the
 * kernel decodes each weight block once per tile. For m = 1 this is a
 * plain stream of the weights split across threads.
 *
 * Where the table has a gemv8 for the weight type and n % 8 == 0 (the
 * shapes llama.cpp repacks), chunks are whole groups of 8 rows and each
 * group goes to gemv8 in one call (see cpu.h). Where the ISA also packs
 * the activations for that type (struct pg_act_pack: pairs or quads of
 * rows), they are packed once per matmul and the tiles are
 * 2 * PG_PACK_PAIRS rows wide.
 *
 * Q4_0 and IQ4_NL weights repacked at load (PG_TYPE_Q4_0_X8,
 * PG_TYPE_IQ4_NL_X8, repack.h) take their own path: activations become
 * pg_q8x blocks (Q8_0 plus the -8·Σy the kernel starts each block from;
 * the IQ4_NL kernels ignore it), chunks are whole groups, and activation rows go
 * in tiles of PG_X8_MAX_NR. The order of each output's float ops is fixed
 * by the kernel, so tiles and chunks change no bits.
 *
 * pg_matmul_many runs several weights against one input (Q/K/V, gate/up)
 * as one job: one conversion, one dispenser over all their chunks.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/dispenser.h"
#include "kernels/cpu/pf_tune.h"

uint32_t pg_vec_dot_type(uint32_t wtype)
{
	switch (wtype) {
	case PG_TYPE_F32: return PG_TYPE_F32;
	case PG_TYPE_F16: return PG_TYPE_F16;
	case PG_TYPE_BF16: return PG_TYPE_BF16;
	case PG_TYPE_Q4_0:
	case PG_TYPE_Q4_0_X8:
	case PG_TYPE_IQ4_NL:
	case PG_TYPE_IQ4_NL_X8:
	case PG_TYPE_Q5_0:
	case PG_TYPE_Q8_0:
	case PG_TYPE_Q8_0_S127: return PG_TYPE_Q8_0;
	case PG_TYPE_Q4_1:
	case PG_TYPE_Q5_1: return PG_TYPE_Q8_1;
	case PG_TYPE_Q2_K:
	case PG_TYPE_Q3_K:
	case PG_TYPE_Q4_K:
	case PG_TYPE_Q4_K_X8:
	case PG_TYPE_Q5_K:
	case PG_TYPE_Q6_K:
	case PG_TYPE_IQ4_XS: return PG_TYPE_Q8_K;
	default: return PG_TYPE_COUNT;
	}
}

size_t pg_wrow_bytes(uint32_t wtype, int64_t k)
{
	if (wtype == PG_TYPE_Q4_K_X8)
		return k > 0 && k % QK_K == 0 ? PG_Q4KX8_GROUP_BYTES(k / QK_K) / 8 : 0;
	return k < 0 ? 0 : pg_row_size(wtype, (uint64_t)k);
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

/* chunk c of ch units each over n units */
static void chunk_span(int64_t n, int64_t ch, int64_t c, int64_t *lo, int64_t *hi)
{
	*lo = c * ch;
	*hi = *lo + ch < n ? *lo + ch : n;
}

static int64_t chunk_count(int64_t n, int64_t ch)
{
	return (n + ch - 1) / ch;
}

/* fn over the pool, or on the caller alone, with d set up for as many
 * threads as will take from it (pg_pool_run with no pool runs fn(arg, 0, 1)) */
static void run_chunks(struct pg_pool *p, bool alone, struct pg_dispenser *d, int64_t nchunks,
		       void (*fn)(void *, int, int), void *arg)
{
	pg_disp_init(d, nchunks, alone ? 1 : pg_pool_size(p));
	pg_pool_run(alone ? NULL : p, fn, arg);
}

struct mm_job {
	uint32_t wtype; /* PG_TYPE_Q8_0_S127 as PG_TYPE_Q8_0 */
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
	struct pg_dispenser disp;
};

static void quant_job(void *a, int ith, int nth)
{
	struct mm_job *j = a;
	for (int64_t i = ith; i < j->m; i += nth)
		j->from_float(j->X + i * j->k, j->Xq + (size_t)i * j->xrow, j->k);
}

static int64_t mm_nchunks(const struct mm_job *j)
{
	return chunk_count(j->n, j->chunk);
}

static void mm_chunk(const struct mm_job *j, int64_t c)
{
	int64_t r0, r1;
	chunk_span(j->n, j->chunk, c, &r0, &r1);
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

static void mm_job_run(void *a, int ith, int nth)
{
	struct mm_job *j = a;
	(void)nth;
	for (int64_t c; (c = pg_disp_take(&j->disp, ith)) >= 0;)
		mm_chunk(j, c);
}

/* Rows per chunk. Decode-sized batches: 8 (a group), so that a thread
 * that takes from another's back leaves the join at most 8 rows to wait
 * on; its own chunks run as one stream whatever their size. Bigger
 * batches: small enough that every thread gets several chunks and that a
 * chunk of weights stays in L2 across the tiles. */
static int64_t pick_chunk(int64_t n, size_t wrow, int64_t m, int nth, bool by8)
{
	if (m <= PG_MAX_NR)
		return 8;
	int64_t c = n / ((int64_t)nth * 8);
	const int64_t l2 = (int64_t)((256u << 10) / (wrow ? wrow : 1));
	if (c > l2)
		c = l2;
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
static _Thread_local struct pg_pf_tune tl_pf;

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

/* The ISA's activation packing for this job, if it takes one: its gemv8
 * reads 8 weight rows at a time, so n % 8 == 0, and one row is not packed. */
static const struct pg_act_pack *pack_for(const struct mm_job *j)
{
	const struct pg_act_pack *pk = pg_kern_get()->act_pack[j->wtype];
	return pk && j->m >= 2 && j->n % 8 == 0 ? pk : NULL;
}

/* Where the ISA packs activations for this weight type, the tiles read
 * the packed units instead of the rows. */
static void use_packed(struct mm_job *j)
{
	const struct pg_act_pack *pk = pack_for(j);
	if (!pk)
		return;
	const size_t us = pk->unit_bytes(j->k);
	void *buf = scratch(&tl_pack, us * (size_t)((j->m + pk->rows - 1) / pk->rows));
	if (!buf)
		return; /* the row kernels need no extra memory */
	pk->pack(j->Xq, j->xrow, j->m, j->k, buf, us);
	j->Xq = buf;
	j->xrow = us / (size_t)pk->rows;
	j->gemv8 = pk->gemv8;
	j->tile = 2 * PG_PACK_PAIRS;
}

/* Tile width (packing the activations where the ISA does) and chunk size. */
static void plan(struct pg_pool *p, struct mm_job *j)
{
	j->tile = PG_MAX_NR;
	use_packed(j);
	j->chunk = pick_chunk(j->n, j->wrow, j->m, pg_pool_size(p), j->gemv8 != NULL);
}

static void run_matmul(struct pg_pool *p, struct mm_job *j)
{
	plan(p, j);
	run_chunks(p, j->n <= j->chunk && j->m <= PG_MAX_NR, &j->disp, mm_nchunks(j), mm_job_run, j);
}

static bool setup(struct mm_job *j, const void *W, uint32_t wtype, int64_t n, int64_t k, int64_t m,
		  float *Y, int64_t ldy)
{
	const struct pg_kern *kern = pg_kern_get();
	const bool s127 = wtype == PG_TYPE_Q8_0_S127;
	if (s127)
		wtype = PG_TYPE_Q8_0;
	uint32_t vt = pg_vec_dot_type(wtype);
	if (vt == PG_TYPE_COUNT || n <= 0 || m <= 0 || k <= 0)
		return false;
	j->wtype = wtype;
	j->wrow = pg_wrow_bytes(wtype, k);
	j->xrow = pg_row_size(vt, (uint64_t)k);
	if (!j->wrow || !j->xrow)
		return false;
	j->gemv = kern->gemv[wtype];
	j->gemv8 = n % 8 == 0 ? kern->gemv8[wtype] : NULL;
	if (s127 && m == 1 && j->gemv8 && kern->q8_0_s127_row)
		j->gemv8 = kern->q8_0_s127_row;
	j->from_float = kern->from_float[vt];
	j->W = W;
	j->n = n;
	j->k = k;
	j->m = m;
	j->Y = Y;
	j->ldy = ldy;
	return true;
}

static bool is_x8(uint32_t wtype);
static void x8_matmul(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const float *X,
		      const void *Xq, int64_t m, float *Y, int64_t ldy);

void pg_matmul_q(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const void *Xq,
		 int64_t m, float *Y, int64_t ldy)
{
	if (is_x8(wtype)) {
		x8_matmul(p, W, wtype, n, k, NULL, Xq, m, Y, ldy);
		return;
	}
	struct mm_job j;
	if (!setup(&j, W, wtype, n, k, m, Y, ldy))
		return;
	j.Xq = (char *)Xq;
	run_matmul(p, &j);
}

/* ---- PG_TYPE_Q4_0_X8, PG_TYPE_IQ4_NL_X8 --------------------------------- */

static bool is_x8(uint32_t wtype)
{
	return wtype == PG_TYPE_Q4_0_X8 || wtype == PG_TYPE_IQ4_NL_X8;
}

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
	enum pg_x8_pf pf;
	struct pg_dispenser disp;
};

static void x8_quant_row(const struct x8_job *j, int64_t i)
{
	pg_q8x *dst = j->Xx + i * j->nb;
	if (!j->X) {
		pg_q8x_from_q8_0(j->Xq + (size_t)i * j->xrow, dst, j->nb);
		return;
	}
	/* a block at a time: no Q8_0 row buffer needed */
	for (int64_t b = 0; b < j->nb; b++) {
		block_q8_0 t;
		j->from_float(j->X + i * j->k + b * QK8_0, &t, QK8_0);
		pg_q8x_from_q8_0(&t, dst + b, 1);
	}
}

/* Rows in the pairs the 512-bit kernel takes (even row first), so the
 * thread that converts a pair also gives its first row the second's scales
 * (pg_q8x.dn). */
static void x8_quant_job(void *a, int ith, int nth)
{
	struct x8_job *j = a;
	for (int64_t i = 2 * (int64_t)ith; i < j->m; i += 2 * (int64_t)nth) {
		x8_quant_row(j, i);
		if (i + 1 == j->m)
			break;
		x8_quant_row(j, i + 1);
		for (int64_t b = 0; b < j->nb; b++)
			j->Xx[i * j->nb + b].dn = j->Xx[(i + 1) * j->nb + b].d;
	}
}

static int64_t x8_nchunks(const struct x8_job *j)
{
	return chunk_count(j->n / 8, j->chunk);
}

static void x8_chunk(const struct x8_job *j, int64_t c)
{
	const size_t xxrow = (size_t)j->nb * sizeof(pg_q8x);
	int64_t g0, g1;
	chunk_span(j->n / 8, j->chunk, c, &g0, &g1);
	for (int64_t i0 = 0; i0 < j->m; i0 += PG_X8_MAX_NR) {
		const int nr = (int)(j->m - i0 < PG_X8_MAX_NR ? j->m - i0 : PG_X8_MAX_NR);
		for (int64_t g = g0; g < g1; g++)
			j->fn(j->nb, j->W + (size_t)g * j->gbytes, j->Xx + i0 * j->nb, xxrow, nr,
			      j->Y + i0 * j->ldy + 8 * g, (size_t)j->ldy, j->pf);
	}
}

static void x8_job_run(void *a, int ith, int nth)
{
	struct x8_job *j = a;
	(void)nth;
	for (int64_t c; (c = pg_disp_take(&j->disp, ith)) >= 0;)
		x8_chunk(j, c);
}

static void x8_set_chunk(struct x8_job *j, int nth)
{
	j->chunk = pick_chunk(j->n, pg_row_size(PG_TYPE_Q4_0, (uint64_t)j->k), j->m, nth, true) / 8;
}

/* Fills j and converts the activations into the thread's pack buffer. */
static bool x8_prepare(struct pg_pool *p, struct x8_job *j, const void *W, uint32_t wtype, int64_t n, int64_t k,
		       const float *X, const void *Xq, int64_t m, float *Y, int64_t ldy)
{
	const struct pg_kern *kern = pg_kern_get();
	if (n <= 0 || n % 8 || m <= 0 || k <= 0 || k % QK4_0)
		return false;
	*j = (struct x8_job){
		.fn = wtype == PG_TYPE_IQ4_NL_X8 ? kern->iq4_nl_x8 : kern->q4_0_x8,
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
	j->Xx = scratch(&tl_pack, (size_t)m * (size_t)j->nb * sizeof(pg_q8x));
	if (!j->Xx)
		return false;
	if (m >= 4 && pg_pool_size(p) > 1)
		pg_pool_run(p, x8_quant_job, j);
	else
		x8_quant_job(j, 0, 1);
	x8_set_chunk(j, pg_pool_size(p));
	return true;
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Runs the count jobs at xj (one dispenser, d). One activation row
 * (decode) streams the weights from memory and fetches ahead the way the
 * calling thread's tuner picks (pf_tune.h), or the pinned way, the run
 * timed for the tuner; a prompt's tiles find each chunk's weights in L2
 * after the first, and fetch by lines. */
static void x8_run(struct pg_pool *p, struct x8_job *xj, int count, bool alone, struct pg_dispenser *d,
		   int64_t nchunks, void (*fn)(void *, int, int), void *arg)
{
	const int pin = pg_pf_pinned();
	const bool tune = xj[0].m == 1 && pin < 0;
	const enum pg_x8_pf pf = xj[0].m > 1 ? PG_X8_PF_LINES : tune ? pg_pf_pick(&tl_pf) : (enum pg_x8_pf)pin;
	double bytes = 0;
	for (int i = 0; i < count; i++) {
		xj[i].pf = pf;
		bytes += (double)(xj[i].n / 8) * (double)xj[i].gbytes;
	}
	const double t0 = tune ? now_ns() : 0;
	run_chunks(p, alone, d, nchunks, fn, arg);
	if (tune)
		pg_pf_note(&tl_pf, pf, bytes, now_ns() - t0);
}

static void x8_matmul(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const float *X,
		      const void *Xq, int64_t m, float *Y, int64_t ldy)
{
	struct x8_job j;
	if (!x8_prepare(p, &j, W, wtype, n, k, X, Xq, m, Y, ldy))
		return;
	x8_run(p, &j, 1, n <= 8 * j.chunk && m <= PG_X8_MAX_NR, &j.disp, x8_nchunks(&j), x8_job_run, &j);
}

/* j->Xq = X in the weight's vec-dot type (X itself for f32), in the
 * calling thread's buffer. */
static bool convert_input(struct pg_pool *p, struct mm_job *j, const float *X)
{
	if (pg_vec_dot_type(j->wtype) == PG_TYPE_F32) {
		j->Xq = (char *)X;
		return true;
	}
	j->Xq = scratch(&tl_act, j->xrow * (size_t)j->m);
	if (!j->Xq)
		return false;
	j->X = X;
	if (j->m >= 4 && pg_pool_size(p) > 1)
		pg_pool_run(p, quant_job, j);
	else
		quant_job(j, 0, 1);
	return true;
}

void pg_matmul(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const float *X,
	       int64_t m, float *Y, int64_t ldy)
{
	if (is_x8(wtype)) {
		x8_matmul(p, W, wtype, n, k, X, NULL, m, Y, ldy);
		return;
	}
	struct mm_job j;
	if (!setup(&j, W, wtype, n, k, m, Y, ldy) || !convert_input(p, &j, X))
		return;
	run_matmul(p, &j);
}

/* ---- several weights, one input ------------------------------------------
 *
 * Q, K and V (or gate and up) read the same activations: converted (and
 * packed) once, and the three matrices' chunks handed out from one
 * dispenser in one pool run, so a decode step pays one wake-up and one
 * join for them instead of three. Each output is computed exactly as
 * pg_matmul would. */
#define MANY_MAX 4

struct many_job {
	int count;
	bool x8;
	struct mm_job mm[MANY_MAX];
	struct x8_job xj[MANY_MAX];
	int64_t first[MANY_MAX + 1]; /* op i's chunks: first[i] .. first[i+1]-1 */
	struct pg_dispenser disp;
};

static void many_job_run(void *a, int ith, int nth)
{
	struct many_job *j = a;
	(void)nth;
	for (int64_t c; (c = pg_disp_take(&j->disp, ith)) >= 0;) {
		int op = 0;
		while (c >= j->first[op + 1])
			op++;
		if (j->x8)
			x8_chunk(&j->xj[op], c - j->first[op]);
		else
			mm_chunk(&j->mm[op], c - j->first[op]);
	}
}

static bool many_prepare_x8(struct pg_pool *p, struct many_job *j, const struct pg_mm_out *o, int count,
			    int64_t k, const float *X, int64_t m)
{
	if (!x8_prepare(p, &j->xj[0], o[0].W, o[0].wtype, o[0].n, k, X, NULL, m, o[0].Y, o[0].ldy))
		return false;
	for (int i = 1; i < count; i++) {
		if (o[i].n <= 0 || o[i].n % 8)
			return false;
		j->xj[i] = j->xj[0];
		j->xj[i].W = o[i].W;
		j->xj[i].n = o[i].n;
		j->xj[i].Y = o[i].Y;
		j->xj[i].ldy = o[i].ldy;
		x8_set_chunk(&j->xj[i], pg_pool_size(p));
	}
	for (int i = 0; i < count; i++)
		j->first[i + 1] = j->first[i] + x8_nchunks(&j->xj[i]);
	return true;
}

static bool many_prepare_mm(struct pg_pool *p, struct many_job *j, const struct pg_mm_out *o, int count,
			    int64_t k, const float *X, int64_t m)
{
	const uint32_t wtype = o[0].wtype;
	for (int i = 0; i < count; i++)
		if (!setup(&j->mm[i], o[i].W, wtype, o[i].n, k, m, o[i].Y, o[i].ldy) ||
		    (j->mm[i].gemv8 == NULL) != (j->mm[0].gemv8 == NULL) ||
		    (pack_for(&j->mm[i]) == NULL) != (pack_for(&j->mm[0]) == NULL))
			return false; /* one packing must serve every matrix */
	struct mm_job *j0 = &j->mm[0];
	if (!convert_input(p, j0, X))
		return false;
	plan(p, j0);
	for (int i = 0; i < count; i++) {
		struct mm_job *ji = &j->mm[i];
		if (i > 0) { /* the converted (and packed) input is op 0's */
			ji->Xq = j0->Xq;
			ji->xrow = j0->xrow;
			ji->gemv8 = j0->gemv8;
			ji->tile = j0->tile;
			ji->chunk = pick_chunk(ji->n, ji->wrow, m, pg_pool_size(p), ji->gemv8 != NULL);
		}
		j->first[i + 1] = j->first[i] + mm_nchunks(ji);
	}
	return true;
}

void pg_matmul_many(struct pg_pool *p, const struct pg_mm_out *o, int count, int64_t k, const float *X,
		    int64_t m)
{
	bool same = count <= MANY_MAX;
	for (int i = 1; same && i < count; i++)
		same = o[i].wtype == o[0].wtype;
	struct many_job j;
	j.count = count;
	j.x8 = count > 0 && is_x8(o[0].wtype);
	j.first[0] = 0;
	if (count <= 0 || m <= 0)
		return;
	if (!same || !(j.x8 ? many_prepare_x8(p, &j, o, count, k, X, m) : many_prepare_mm(p, &j, o, count, k, X, m))) {
		for (int i = 0; i < count; i++)
			pg_matmul(p, o[i].W, o[i].wtype, o[i].n, k, X, m, o[i].Y, o[i].ldy);
		return;
	}
	if (j.x8)
		x8_run(p, j.xj, j.count, false, &j.disp, j.first[j.count], many_job_run, &j);
	else
		run_chunks(p, false, &j.disp, j.first[j.count], many_job_run, &j);
}
