/* kernels/cpu/pairs_avx512.h — what the 512-bit kernels over packed pairs
 * of activation rows share (q8_0_avx512.c, q4_1_avx512.c): a pair block's
 * 32 bytes of row a and of row b interleaved by 4-byte groups,
 *   [a0 b0 a1 b1 a4 b4 a5 b5 | a2 b2 a3 b3 a6 b6 a7 b7],
 * so that one vpdpbusd sums both rows' groups against a weight block
 * permuted the same way, and back at the end to group order 0..7 per row
 * for ggml's hsum_float_8. For *_avx512.c files only. */
#ifndef PAGODA_PAIRS_AVX512_H
#define PAGODA_PAIRS_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define PAIRS_AI static inline __attribute__((always_inline))

PAIRS_AI __m512i pairs_join(__m256i ya, __m256i yb)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi32(ya, yb)),
				  _mm256_unpackhi_epi32(ya, yb), 1);
}

/* A weight block's 32 bytes in the pairs' group order, each group twice. */
PAIRS_AI __m512i pairs_weight(__m256i w)
{
	const __m512i perm = _mm512_setr_epi32(0, 0, 1, 1, 4, 4, 5, 5, 2, 2, 3, 3, 6, 6, 7, 7);
	return _mm512_permutexvar_epi32(perm, _mm512_castsi256_si512(w));
}

/* (v of a, v of b) four times: block i's two floats of a pair at off */
PAIRS_AI __m256 pairs_floats(const char *pair, size_t off, int64_t i)
{
	return _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(pair + off) + i));
}

/* The floats of pairs q and q + 1 (when there is one, of np) in one vector. */
PAIRS_AI __m512 pairs_of(const char *x, size_t ps, size_t off, int64_t i, int q, const int np)
{
	__m512 v = _mm512_castps256_ps512(pairs_floats(x + (size_t)q * ps, off, i));
	if (q + 1 < np)
		v = _mm512_insertf32x8(v, pairs_floats(x + (size_t)(q + 1) * ps, off, i), 1);
	return v;
}

/* ggml's hsum_float_8 */
PAIRS_AI float pairs_hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* A pair's accumulator back to group order: row a's sum and row b's. */
PAIRS_AI void pairs_sums(__m512 acc, float *a, float *b)
{
	const __m512i unperm = _mm512_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14, 1, 3, 9, 11, 5, 7, 13, 15);
	const __m512 v = _mm512_permutexvar_ps(unperm, acc);
	*a = pairs_hsum8(_mm512_castps512_ps256(v));
	*b = pairs_hsum8(_mm512_extractf32x8_ps(v, 1));
}

#endif
