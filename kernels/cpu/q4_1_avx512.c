/* kernels/cpu/q4_1_avx512.c — Q4_1 and Q5_1 weights against two or more
 * activation rows (Q8_1), on 512-bit vectors (prefill and batched decode).
 *
 * The float order is ggml_vec_dot_q4_1_q8_1's (AVX2) for every output:
 * eight lanes, lane g holding the integer sum of the block's elements
 * 4g..4g+3 (unsigned levels times signed activations), acc = fma(dw*dy,
 * (float)lanes, acc) block after block, and beside it m·s added block by
 * block, not fused; at the end hsum_float_8(acc) + that sum. As in
 * q8_0_avx512.c the activations are packed once per matmul in pairs of
 * rows (a, b) sharing each 512-bit instruction, and everything done per
 * activation block (its scales, the m·s products) is done once per tile
 * of four weight rows instead of once per weight row.
 *
 * Packed pair, per block (80 bytes; pair stride = nb * 80):
 *   Y: 64 bytes, the 4-byte groups of a and b interleaved
 *      [a0 b0 a1 b1 a4 b4 a5 b5 | a2 b2 a3 b3 a6 b6 a7 b7]
 *   D: dy of a, dy of b (floats, from the f16)
 *   S: s of a, s of b (likewise)
 * The levels are unsigned already (0..15, 0..31), as vpdpbusd wants them;
 * its products never reach the int16 saturation of ggml's maddubs. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/pairs_avx512.h"

#define AI static inline __attribute__((always_inline))

/* blocks whose scale products are formed ahead of their dot products */
#define SPAN 32

struct pair_block_layout {
	size_t y, d, s, stride;
};

AI struct pair_block_layout layout(int64_t nb)
{
	struct pair_block_layout l = { 0, (size_t)nb * 64, (size_t)nb * 72, (size_t)nb * 80 };
	return l;
}

size_t pg_q8_1_pair_bytes_avx512(int64_t k)
{
	return layout(k / QK8_1).stride;
}

#define XB(x, bx, r) ((const block_q8_1 *)((const char *)(x) + (size_t)(r) * (bx)))

/* Rows 2p and 2p+1 (an odd last row with itself) of xq into pair p. */
void pg_q8_1_pack_pairs_avx512(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride)
{
	const int64_t nb = k / QK8_1;
	const struct pair_block_layout l = layout(nb);
	for (int64_t p = 0; p < (m + 1) / 2; p++) {
		const block_q8_1 *a = XB(xq, xrow, 2 * p), *b = XB(xq, xrow, 2 * p + 1 < m ? 2 * p + 1 : 2 * p);
		char *base = (char *)dst + (size_t)p * pstride;
		for (int64_t i = 0; i < nb; i++) {
			const __m256i ya = _mm256_loadu_si256((const __m256i *)a[i].qs);
			const __m256i yb = _mm256_loadu_si256((const __m256i *)b[i].qs);
			_mm512_storeu_si512(base + l.y + 64 * i, pairs_join(ya, yb));
			float *d = (float *)(base + l.d) + 2 * i, *s = (float *)(base + l.s) + 2 * i;
			d[0] = _cvtsh_ss(a[i].d);
			d[1] = _cvtsh_ss(b[i].d);
			s[0] = _cvtsh_ss(a[i].s);
			s[1] = _cvtsh_ss(b[i].s);
		}
	}
}

/* The block's levels, as unsigned bytes in element order. */
AI __m256i levels(const void *w, size_t bw, int j, int64_t i, const int FIVE)
{
	const __m128i lo4 = _mm_set1_epi8(0x0F);
	const uint8_t *qs;
	uint32_t qh = 0;
	if (FIVE) {
		const block_q5_1 *b = (const block_q5_1 *)((const char *)w + (size_t)j * bw) + i;
		qs = b->qs;
		__builtin_memcpy(&qh, b->qh, 4);
	} else {
		qs = ((const block_q4_1 *)((const char *)w + (size_t)j * bw) + i)->qs;
	}
	_mm_prefetch((const char *)qs + 8 * bw, _MM_HINT_T0);
	const __m128i q = _mm_loadu_si128((const __m128i *)qs);
	__m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, lo4)),
					    _mm_and_si128(_mm_srli_epi16(q, 4), lo4), 1);
	if (FIVE) /* bit e of qh is element e's fifth bit */
		v = _mm256_or_si256(v, _mm256_maskz_set1_epi8(qh, 0x10));
	return v;
}

/* The scale d and the min m of weight row j's block i, as f16. */
AI void dm(const void *w, size_t bw, int j, int64_t i, const int FIVE, uint16_t *d, uint16_t *m)
{
	const char *row = (const char *)w + (size_t)j * bw;
	if (FIVE) {
		const block_q5_1 *b = (const block_q5_1 *)row + i;
		*d = b->d;
		*m = b->m;
	} else {
		const block_q4_1 *b = (const block_q4_1 *)row + i;
		*d = b->d;
		*m = b->m;
	}
}

/* Four weight rows against NP packed pairs starting at x (stride ps):
 * out[q][h][j] for row h of pair q and weight row j. */
AI void tile4(int64_t nb, const void *w, size_t bw, const char *x, size_t ps, const int NP, const int FIVE,
	      float (*out)[2][4])
{
	const struct pair_block_layout l = layout(nb);
	const __m512i dwperm = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3);
	__m512 acc[4][PG_PACK_PAIRS];
	/* m·s sums, lane 8q + 2j + h of vector q / 2 */
	__m512 ms[PG_PACK_PAIRS / 2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
	#pragma GCC unroll 4
	for (int j = 0; j < 4; j++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++)
			acc[j][q] = _mm512_setzero_ps();
	float sc[SPAN][8 * PG_PACK_PAIRS] __attribute__((aligned(64)));
	for (int64_t i0 = 0; i0 < nb; i0 += SPAN) {
		const int64_t i1 = i0 + SPAN < nb ? i0 + SPAN : nb;
		for (int64_t i = i0; i < i1; i++) {
			/* the four rows' halves in a register: built in memory, a
			 * vector load would wait on the scalar stores */
			uint64_t d4 = 0, m4 = 0;
			#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				uint16_t d, m;
				dm(w, bw, j, i, FIVE, &d, &m);
				d4 |= (uint64_t)d << 16 * j;
				m4 |= (uint64_t)m << 16 * j;
			}
			const __m512 dw = _mm512_permutexvar_ps(
				dwperm, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)d4))));
			const __m512 mw = _mm512_permutexvar_ps(
				dwperm, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)m4))));
			/* sc[i - i0][8q + 2j + h] = dw_j * dy_h of pair q */
			#pragma GCC unroll 2
			for (int q = 0; q < NP; q += 2) {
				_mm512_store_ps(sc[i - i0] + 8 * q, _mm512_mul_ps(dw, pairs_of(x, ps, l.d, i, q, NP)));
				__m512 p = _mm512_mul_ps(mw, pairs_of(x, ps, l.s, i, q, NP));
				__asm__("" : "+v"(p)); /* not fused, as ggml's (exact anyway: f16 times f16) */
				ms[q / 2] = _mm512_add_ps(ms[q / 2], p);
			}
		}
		__asm__ volatile("" : : "r"(sc) : "memory");
		for (int64_t i = i0; i < i1; i++) {
			__m512i wz[4];
			#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				wz[j] = pairs_weight(levels(w, bw, j, i, FIVE));
			#pragma GCC unroll 4
			for (int q = 0; q < NP; q++) {
				const __m512i y = _mm512_loadu_si512(x + (size_t)q * ps + l.y + 64 * i);
				#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
					const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wz[j], y);
					double s2;
					__builtin_memcpy(&s2, sc[i - i0] + 8 * q + 2 * j, 8);
					acc[j][q] = _mm512_fmadd_ps(_mm512_castpd_ps(_mm512_set1_pd(s2)),
								    _mm512_cvtepi32_ps(p), acc[j][q]);
				}
			}
		}
	}
	float msum[8 * PG_PACK_PAIRS] __attribute__((aligned(64)));
	_mm512_store_ps(msum, ms[0]);
	_mm512_store_ps(msum + 16, ms[1]);
	#pragma GCC unroll 4
	for (int j = 0; j < 4; j++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++) {
			float a, b;
			pairs_sums(acc[j][q], &a, &b);
			out[q][0][j] = a + msum[8 * q + 2 * j];
			out[q][1][j] = b + msum[8 * q + 2 * j + 1];
		}
}

AI void gemv8_pairs(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s, size_t bs,
		    const int FIVE)
{
	const int64_t nb = k / QK8_1;
	const int np = (nr + 1) / 2;
	for (int j0 = 0; j0 < 8; j0 += 4) {
		float out[PG_PACK_PAIRS][2][4];
		const void *w0 = (const char *)w + (size_t)j0 * bw;
		switch (np) {
		case 1: tile4(nb, w0, bw, x, 2 * bx, 1, FIVE, out); break;
		case 2: tile4(nb, w0, bw, x, 2 * bx, 2, FIVE, out); break;
		case 3: tile4(nb, w0, bw, x, 2 * bx, 3, FIVE, out); break;
		default: tile4(nb, w0, bw, x, 2 * bx, 4, FIVE, out); break;
		}
		for (int r = 0; r < nr; r++)
			for (int j = 0; j < 4; j++)
				s[(size_t)r * bs + j0 + j] = out[r / 2][r % 2][j];
	}
}

/* pg_gemv8_fn over packed pairs (nr <= 2 * PG_PACK_PAIRS): x is the tile's
 * first pair, and the pair stride is 2 * bx (matmul.c steps x by rows
 * times bx). */
void pg_gemv8_q4_1_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs)
{
	gemv8_pairs(k, w, bw, x, bx, nr, s, bs, 0);
}

void pg_gemv8_q5_1_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs)
{
	gemv8_pairs(k, w, bw, x, bx, nr, s, bs, 1);
}
