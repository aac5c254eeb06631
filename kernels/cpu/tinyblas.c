/* kernels/cpu/tinyblas.c — matmuls whose activation rows each pick one of
 * llama.cpp's two float summation orders.
 *
 * For F32 and F16 weights llama.cpp's mul_mat first tries
 * llamafile_sgemm, which takes the matmul (tinyBLAS, see tinyblas.h) only
 * when the ubatch has two or more rows (ne11 >= 2), k % 16 == 0 and the
 * weight has a multiple of 4 rows (ne01); otherwise it falls back to
 * ggml_vec_dot (what pg_matmul computes). Which of the two a token gets
 * thus depends on the ubatch llama.cpp would put it in, which the caller
 * knows and passes as one flag per activation row; the shape conditions
 * are checked here. Each output depends on its own row and flag only, so
 * the rows may be tiled and split across threads freely.
 *
 * The scalar table stands for ggml's generic build, where llamafile has
 * no F32/F16 kernel for x86 without AVX: it keeps vec_dot for every F32
 * and F16 row (the quantized types keep the x86 orders on every ISA).
 *
 * IQ4_NL weights llama.cpp repacks where they have a multiple of 8 rows
 * (see repack.h); the others go to llamafile_sgemm, which takes every
 * ubatch of two or more rows (tinyBLAS_Q0_AVX: one 8-lane accumulator per
 * output), while ggml_vec_dot_iq4_nl_q8_0 splits the blocks between two.
 *
 * Q4_K with a multiple of 8 rows is the same story with other kernels:
 * llama.cpp repacks it, and its matmul takes the first m - m % 4 rows of
 * the ubatch 4 at a time (ggml_gemm_q4_K_8x8_q8_K) and the rest one by one
 * (ggml_gemv_q4_K_8x8_q8_K), which add their partial sums in different
 * orders. There the flag means the first kind, on every ISA.
 *
 * IQ4_XS with a multiple of 8 rows: llama.cpp's IQ panel gemm (iqp.cpp)
 * takes every row of a matmul of 8 rows or more, in its own order; a
 * flagged row takes it here (gemm8), the others vec_dot's.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/tinyblas.h"

static pg_tb_fn tb_kernel(uint32_t wtype, int64_t n, int64_t k)
{
	const pg_tb_fn f = pg_kern_get()->tb[wtype];
	if (!f)
		return NULL;
	if (wtype == PG_TYPE_IQ4_NL) /* with n % 8 == 0 it is repacked instead */
		return n % 8 ? f : NULL;
	return k % PG_TB_KN == 0 && n % 4 == 0 ? f : NULL;
}

/* Whether flagged rows take pg_kern.gemm8 (Q4_K, IQ4_XS). */
static bool gemm8_applies(uint32_t wtype, int64_t n)
{
	return n % 8 == 0 && pg_kern_get()->gemm8[wtype];
}

bool pg_matmul_tb_applies(uint32_t wtype, int64_t n, int64_t k)
{
	return tb_kernel(wtype, n, k) != NULL || gemm8_applies(wtype, n);
}

struct tb_job {
	pg_gemv_fn gemv; /* vec_dot order */
	pg_tb_fn tb_fn;  /* tinyBLAS order */
	pg_gemv8_fn g8, g8_tb; /* or by 8 rows: unflagged (NULL: gemv), flagged */
	pg_gemv8_fn g16_tb;    /* flagged, 16 rows at once (NULL: g8_tb twice) */
	uint32_t wtype;
	const bool *tb;
	const char *W;
	size_t wrow, xrow;
	int64_t n, k, m;
	const float *X; /* conversion phase (F16) */
	char *Xq;
	float *Y;
	int64_t ldy, chunk;
	_Atomic int64_t next;
};

static void tb_quant_job(void *a, int ith, int nth)
{
	struct tb_job *j = a;
	for (int64_t i = ith; i < j->m; i += nth)
		pg_quantize_act(j->wtype, j->X + i * j->k, j->Xq + (size_t)i * j->xrow, j->k);
}

/* As matmul.c's loop: chunks of weight rows from a shared counter; inside
 * a chunk, tiles of up to PG_MAX_NR activation rows of one order. */
static void tb_job_run(void *a, int ith, int nth)
{
	struct tb_job *j = a;
	(void)ith;
	(void)nth;
	const int64_t nchunks = (j->n + j->chunk - 1) / j->chunk;
	for (;;) {
		const int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (c >= nchunks)
			break;
		const int64_t r0 = c * j->chunk;
		const int64_t r1 = r0 + j->chunk < j->n ? r0 + j->chunk : j->n;
		for (int64_t i0 = 0, i1; i0 < j->m; i0 = i1) {
			const bool tb = j->tb[i0];
			const int64_t wide = j->g8_tb && tb ? PG_GEMM8_MAX_NR : PG_MAX_NR;
			for (i1 = i0 + 1; i1 < j->m && i1 - i0 < wide && j->tb[i1] == tb; i1++)
				;
			const char *x = j->Xq + (size_t)i0 * j->xrow;
			float *y = j->Y + i0 * j->ldy;
			const int nr = (int)(i1 - i0);
			const pg_gemv8_fn f8 = tb ? j->g8_tb : j->g8;
			if (f8) {
				for (int64_t r = r0; r < r1;) {
					const bool w16 = tb && j->g16_tb && r + 16 <= r1;
					(w16 ? j->g16_tb : f8)(j->k, j->W + (size_t)r * j->wrow, j->wrow, x, j->xrow, nr, y + r,
							       (size_t)j->ldy);
					r += w16 ? 16 : 8;
				}
				continue;
			}
			if (tb) {
				for (int64_t r = r0; r < r1; r += PG_TB_NW)
					j->tb_fn(j->k, j->W + (size_t)r * j->wrow, j->wrow,
						 (int)(r1 - r < PG_TB_NW ? r1 - r : PG_TB_NW), x, j->xrow, nr, y + r,
						 (size_t)j->ldy);
				continue;
			}
			for (int64_t r = r0; r < r1; r++)
				j->gemv(j->k, j->W + (size_t)r * j->wrow, x, j->xrow, nr, y + r, (size_t)j->ldy);
		}
	}
}

/* matmul.c's chunk size for the same shape, so both paths split alike;
 * whole multiples of unit rows (the 8- and 16-row kernels'). */
static int64_t tb_chunk(int64_t n, size_t wrow, int64_t m, int nth, int64_t unit)
{
	int64_t c = n / ((int64_t)nth * 8);
	if (m > PG_MAX_NR) {
		int64_t l2 = (int64_t)((256u << 10) / (wrow ? wrow : 1));
		if (c > l2)
			c = l2;
	}
	c = c < 4 ? 4 : c;
	return (c + unit - 1) / unit * unit;
}

static _Thread_local struct {
	void *p;
	size_t cap;
} tl_x16;

static void *x16_scratch(size_t need)
{
	if (need > tl_x16.cap) {
		free(tl_x16.p);
		tl_x16.p = NULL;
		tl_x16.cap = 0;
		need = (need + 4095) & ~(size_t)4095;
		if (posix_memalign(&tl_x16.p, 64, need) != 0) {
			tl_x16.p = NULL;
			return NULL;
		}
		tl_x16.cap = need;
	}
	return tl_x16.p;
}

void pg_matmul_tb(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k, const float *X,
		  int64_t m, float *Y, int64_t ldy, const bool *tb)
{
	const pg_tb_fn g = tb && m > 0 ? tb_kernel(wtype, n, k) : NULL;
	const bool by8 = tb && m > 0 && gemm8_applies(wtype, n);
	int64_t any = 0;
	for (int64_t i = 0; (g || by8) && i < m && !any; i++)
		any = tb[i];
	if (!any || n <= 0 || k <= 0) {
		pg_matmul(p, W, wtype, n, k, X, m, Y, ldy);
		return;
	}
	struct tb_job j = {
		.gemv = pg_kern_get()->gemv[wtype],
		.tb_fn = g,
		.g8 = by8 ? pg_kern_get()->gemv8[wtype] : NULL,
		.g8_tb = by8 ? pg_kern_get()->gemm8[wtype] : NULL,
		.g16_tb = by8 ? pg_kern_get()->gemm16[wtype] : NULL,
		.wtype = wtype,
		.tb = tb,
		.W = W,
		.wrow = pg_wrow_bytes(wtype, k),
		.xrow = pg_act_row_size(wtype, k),
		.n = n,
		.k = k,
		.m = m,
		.Y = Y,
		.ldy = ldy,
	};
	if (wtype == PG_TYPE_F32) {
		j.Xq = (char *)X;
	} else {
		j.Xq = x16_scratch(j.xrow * (size_t)m);
		if (!j.Xq)
			return;
		j.X = X;
		if (m >= 4 && pg_pool_size(p) > 1)
			pg_pool_run(p, tb_quant_job, &j);
		else
			tb_quant_job(&j, 0, 1);
	}
	j.chunk = tb_chunk(n, j.wrow, m, pg_pool_size(p), j.g16_tb ? 16 : by8 ? 8 : 1);
	atomic_store_explicit(&j.next, 0, memory_order_relaxed);
	if ((n <= j.chunk && m <= PG_MAX_NR) || pg_pool_size(p) == 1)
		tb_job_run(&j, 0, 1);
	else
		pg_pool_run(p, tb_job_run, &j);
}
