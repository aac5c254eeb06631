/* kernels/cpu/q8_0_avx2.c — Q8_0 weights against two or more activation
 * rows on AVX2 without VNNI (prefill and batched decode).
 *
 * The float order is ggml_vec_dot_q8_0_q8_0's (and tinyBLAS_Q0_AVX's) for
 * every output: eight lanes, lane g holding the integer sum of the block's
 * elements 4g..4g+3 (maddubs(|w|, sign(y, w)), then madd with ones), acc =
 * fma(dw*dy, (float)lanes, acc) block after block, then hsum_float_8. That
 * is six vector ops per block per output; the rest is overhead, and what
 * is per activation block is done once per matmul: the rows are packed
 * with their scales already as floats, so the per-output scale is two
 * broadcasts and one multiply, no f16 conversion per weight row.
 *
 * Packed row (stride nb * 36 bytes; rows in pairs as struct pg_act_pack
 * wants, an odd last row paired with itself):
 *   Y: nb blocks of 32 quants, D: nb floats (dy).
 * Tiles are 2 weight rows x up to 4 activation rows: 8 accumulators, the
 * two |w|, their scales and the temporaries in AVX2's 16 registers.
 */
#include <immintrin.h>

#include "kernels/cpu/cpu.h"

#define AI static inline __attribute__((always_inline))

/* 2 x 4: 8 accumulators; measured against 1 x 4, 1 x 8, 2 x 3 and 4 x 2
 * on Zen 3 (a gemv8 loop on cached rows), the fastest with the 1 x 8 close. */
#define Q8_JR 2
#define Q8_NR 4

#define WB(w, bw, j) ((const block_q8_0 *)((const char *)(w) + (size_t)(j) * (bw)))

AI size_t row_bytes(int64_t nb)
{
	return (size_t)nb * 36;
}

size_t pg_q8_0_pair_bytes_avx2(int64_t k)
{
	return 2 * row_bytes(k / QK8_0);
}

void pg_q8_0_pack_pairs_avx2(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride)
{
	const int64_t nb = k / QK8_0;
	const size_t rb = row_bytes(nb);
	for (int64_t p = 0; p < (m + 1) / 2; p++)
		for (int h = 0; h < 2; h++) {
			const int64_t r = 2 * p + h < m ? 2 * p + h : 2 * p;
			const block_q8_0 *a = (const block_q8_0 *)((const char *)xq + (size_t)r * xrow);
			char *y = (char *)dst + (size_t)p * pstride + (size_t)h * rb;
			float *d = (float *)(y + (size_t)nb * 32);
			for (int64_t i = 0; i < nb; i++) {
				_mm256_storeu_si256((__m256i *)(y + 32 * i),
						    _mm256_loadu_si256((const __m256i *)a[i].qs));
				d[i] = _cvtsh_ss(a[i].d);
			}
		}
}

AI float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

AI __m256 dw_bcast(const block_q8_0 *b)
{
	return _mm256_cvtph_ps(_mm_set1_epi16((short)b->d));
}

/* JR weight rows against NR packed rows from x (stride rb). */
AI void tile(int64_t nb, const void *w, size_t bw, const char *x, size_t rb, const int JR, const int NR, float *s,
	     size_t bs)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const size_t doff = (size_t)nb * 32;
	__m256 acc[Q8_JR][Q8_NR];
	#pragma GCC unroll 4
	for (int j = 0; j < JR; j++)
		#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[j][r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m256i q[Q8_JR], a[Q8_JR];
		__m256 d[Q8_JR];
		#pragma GCC unroll 4
		for (int j = 0; j < JR; j++) {
			const block_q8_0 *b = WB(w, bw, j) + i;
			_mm_prefetch((const char *)b + 8 * bw, _MM_HINT_T0);
			q[j] = _mm256_loadu_si256((const __m256i *)b->qs);
			a[j] = _mm256_sign_epi8(q[j], q[j]);
			d[j] = dw_bcast(b);
		}
		#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			const char *xr = x + (size_t)r * rb;
			const __m256i y = _mm256_loadu_si256((const __m256i *)(xr + 32 * i));
			const __m256 dy = _mm256_broadcast_ss((const float *)(xr + doff) + i);
			#pragma GCC unroll 4
			for (int j = 0; j < JR; j++) {
				const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a[j], _mm256_sign_epi8(y, q[j])), ones);
				acc[j][r] = _mm256_fmadd_ps(_mm256_mul_ps(d[j], dy), _mm256_cvtepi32_ps(p), acc[j][r]);
			}
		}
	}
	#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		#pragma GCC unroll 4
		for (int j = 0; j < JR; j++)
			s[(size_t)r * bs + j] = hsum8(acc[j][r]);
}

/* pg_gemv8_fn over packed rows (nr <= 2 * PG_PACK_PAIRS, row stride bx). */
void pg_gemv8_q8_0_packed_avx2(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			       size_t bs)
{
	const int64_t nb = k / QK8_0;
	for (int r0 = 0; r0 < nr; r0 += Q8_NR) {
		const char *xr = (const char *)x + (size_t)r0 * bx;
		float *sr = s + (size_t)r0 * bs;
		for (int j0 = 0; j0 < 8; j0 += Q8_JR) {
			const void *wj = WB(w, bw, j0);
			switch (nr - r0 < Q8_NR ? nr - r0 : Q8_NR) {
			case 1: tile(nb, wj, bw, xr, bx, Q8_JR, 1, sr + j0, bs); break;
			case 2: tile(nb, wj, bw, xr, bx, Q8_JR, 2, sr + j0, bs); break;
			case 3: tile(nb, wj, bw, xr, bx, Q8_JR, 3, sr + j0, bs); break;
			default: tile(nb, wj, bw, xr, bx, Q8_JR, Q8_NR, sr + j0, bs); break;
			}
		}
	}
}
