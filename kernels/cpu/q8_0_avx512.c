/* kernels/cpu/q8_0_avx512.c — Q8_0 weights against two or more activation
 * rows, on 512-bit vectors (prefill and batched decode).
 *
 * The float order is ggml_vec_dot_q8_0_q8_0's (and tinyBLAS's) for every
 * output: eight lanes, lane g holding the integer sum of the block's
 * elements 4g..4g+3, acc = fma(dw*dy, (float)lanes, acc) block after
 * block, then hsum_float_8. That order costs one int→float conversion and
 * one FMA per block per output; everything else is overhead, and most of
 * it is per activation block, so it is done once per matmul instead of
 * once per weight row: the activations are packed in pairs of rows (a, b)
 * whose lanes share each 512-bit instruction.
 *
 * Packed pair, per block (72 bytes; pair stride = nb * 72):
 *   Y: 64 bytes, the 4-byte groups of a and b interleaved as
 *      unpacklo/unpackhi_epi32 give them:
 *      [a0 b0 a1 b1 a4 b4 a5 b5 | a2 b2 a3 b3 a6 b6 a7 b7]
 *   D: dy of a, dy of b (floats)
 * vpdpbusd wants unsigned bytes, so the weights enter as w + 128 and the
 * accumulator starts at -128·(sum of each group of Y), exact in integers
 * (recomputed per tile: cheaper than reading it back). The weight block is permuted to the same group order; the scale of
 * output pair (a, b) of weight row j is one 64-bit broadcast of
 * (dw_j·dy_a, dw_j·dy_b) — the very products ggml forms.
 */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/pairs_avx512.h"

#define AI static inline __attribute__((always_inline))

/* blocks whose scale products are formed ahead of their dot products */
#define SPAN 32

struct pair_block_layout {
	size_t y, d, stride;
};

AI struct pair_block_layout layout(int64_t nb)
{
	struct pair_block_layout l = { 0, (size_t)nb * 64, (size_t)nb * 72 };
	return l;
}

size_t pg_q8_0_pair_bytes_avx512(int64_t k)
{
	return layout(k / QK8_0).stride;
}

#define XB(x, bx, r) ((const block_q8_0 *)((const char *)(x) + (size_t)(r) * (bx)))
#define WB(w, bw, j) ((const block_q8_0 *)((const char *)(w) + (size_t)(j) * (bw)))

/* Rows 2p and 2p+1 (an odd last row with itself) of xq into pair p. */
void pg_q8_0_pack_pairs_avx512(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride)
{
	const int64_t nb = k / QK8_0;
	const struct pair_block_layout l = layout(nb);
	for (int64_t p = 0; p < (m + 1) / 2; p++) {
		const block_q8_0 *a = XB(xq, xrow, 2 * p), *b = XB(xq, xrow, 2 * p + 1 < m ? 2 * p + 1 : 2 * p);
		char *base = (char *)dst + (size_t)p * pstride;
		for (int64_t i = 0; i < nb; i++) {
			const __m256i ya = _mm256_loadu_si256((const __m256i *)a[i].qs);
			const __m256i yb = _mm256_loadu_si256((const __m256i *)b[i].qs);
			_mm512_storeu_si512(base + l.y + 64 * i, pairs_join(ya, yb));
			float *d = (float *)(base + l.d) + 2 * i;
			d[0] = _cvtsh_ss(a[i].d);
			d[1] = _cvtsh_ss(b[i].d);
		}
	}
}

/* Four weight rows against NP packed pairs starting at x (stride ps). */
AI void tile4(int64_t nb, const void *w, size_t bw, const char *x, size_t ps, const int NP, float (*out)[2][4])
{
	const struct pair_block_layout l = layout(nb);
	const __m512i dwperm = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3);
	const __m512i u128 = _mm512_set1_epi8((char)0x80);
	__m512 acc[4][PG_PACK_PAIRS];
	#pragma GCC unroll 4
	for (int j = 0; j < 4; j++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++)
			acc[j][q] = _mm512_setzero_ps();
	/* The scale products of a span of blocks first, then the blocks: a
	 * product stored and broadcast back in the same block waits on the
	 * store (bench/mm_kernel). */
	float sc[SPAN][8 * PG_PACK_PAIRS] __attribute__((aligned(64)));
	for (int64_t i0 = 0; i0 < nb; i0 += SPAN) {
		const int64_t i1 = i0 + SPAN < nb ? i0 + SPAN : nb;
		for (int64_t i = i0; i < i1; i++) {
			__m128i dwh = _mm_cvtsi32_si128(WB(w, bw, 0)[i].d);
			dwh = _mm_insert_epi16(dwh, WB(w, bw, 1)[i].d, 1);
			dwh = _mm_insert_epi16(dwh, WB(w, bw, 2)[i].d, 2);
			dwh = _mm_insert_epi16(dwh, WB(w, bw, 3)[i].d, 3);
			const __m512 dw = _mm512_permutexvar_ps(dwperm, _mm512_castps128_ps512(_mm_cvtph_ps(dwh)));
			/* sc[i - i0][8q + 2j + (0|1)] = dw_j * dy_(a|b) of pair q */
			#pragma GCC unroll 2
			for (int q = 0; q < NP; q += 2)
				_mm512_store_ps(sc[i - i0] + 8 * q, _mm512_mul_ps(dw, pairs_of(x, ps, l.d, i, q, NP)));
		}
		__asm__ volatile("" : : "r"(sc) : "memory");
		for (int64_t i = i0; i < i1; i++) {
			__m512i wz[4];
			#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				const block_q8_0 *b = WB(w, bw, j) + i;
				_mm_prefetch((const char *)b + 8 * bw, _MM_HINT_T0);
				const __m256i wv = _mm256_loadu_si256((const __m256i *)b->qs);
				wz[j] = _mm512_xor_si512(pairs_weight(wv), u128);
			}
			#pragma GCC unroll 4
			for (int q = 0; q < NP; q++) {
				const char *pq = x + (size_t)q * ps;
				const __m512i y = _mm512_loadu_si512(pq + l.y + 64 * i);
				const __m512i c = _mm512_sub_epi32(_mm512_setzero_si512(),
								   _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, y));
				#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
					const __m512i p = _mm512_dpbusd_epi32(c, wz[j], y);
					double s2;
					__builtin_memcpy(&s2, sc[i - i0] + 8 * q + 2 * j, 8);
					acc[j][q] = _mm512_fmadd_ps(_mm512_castpd_ps(_mm512_set1_pd(s2)),
								    _mm512_cvtepi32_ps(p), acc[j][q]);
				}
			}
		}
	}
	#pragma GCC unroll 4
	for (int j = 0; j < 4; j++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++)
			pairs_sums(acc[j][q], &out[q][0][j], &out[q][1][j]);
}

/* pg_gemv8_fn over packed pairs (nr <= 2 * PG_PACK_PAIRS): x is pair nr-tile's first pair, and the
 * pair stride is 2 * bx (matmul.c steps x by rows times bx). */
void pg_gemv8_q8_0_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs)
{
	const int64_t nb = k / QK8_0;
	const int np = (nr + 1) / 2;
	for (int j0 = 0; j0 < 8; j0 += 4) {
		float out[PG_PACK_PAIRS][2][4];
		const void *w0 = WB(w, bw, j0);
		switch (np) {
		case 1: tile4(nb, w0, bw, x, 2 * bx, 1, out); break;
		case 2: tile4(nb, w0, bw, x, 2 * bx, 2, out); break;
		case 3: tile4(nb, w0, bw, x, 2 * bx, 3, out); break;
		default: tile4(nb, w0, bw, x, 2 * bx, 4, out); break;
		}
		for (int r = 0; r < nr; r++)
			for (int j = 0; j < 4; j++)
				s[(size_t)r * bs + j0 + j] = out[r / 2][r % 2][j];
	}
}
