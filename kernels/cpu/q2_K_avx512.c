/* kernels/cpu/q2_K_avx512.c — Q2_K weights against pairs of Q8_K
 * activation rows on 512-bit vectors (prompts, batched decode).
 *
 * The float order is ggml_vec_dot_q2_K_q8_K's (AVX2) for every output:
 * per super-block, acc = fma(-dy·dmin, (float)mins lanes, acc), then
 * acc = fma(dy·dw, (float)lanes, acc), lane l holding the integer sum of
 * the products of elements 4l..4l+3 of each 32-element run, each times
 * its group's scale; hsum_float_8 at the end. Only the integers are found
 * another way, and they are exact either way:
 *   - a level (0..3) times its group's scale (0..15) fits a byte, so one
 *     vpshufb of a table {0, s, 2s, 3s} per 128-bit lane (a lane is one
 *     group of 16) turns a run's levels into level·scale, and one vpdpbusd
 *     against the activations gives each lane its scaled sum: ggml's
 *     maddubs, madd by the scale and add, in one op;
 *   - two activation rows share each instruction (row a in the low half,
 *     row b in the high half), so the weight work of a run is done once
 *     per pair.
 */
#include <immintrin.h>

#include "kernels/cpu/cpu.h"

#define AI static inline __attribute__((always_inline))

#define YB(x, bx, r) ((const block_q8_K *)((const char *)(x) + (size_t)(r) * (bx)))

AI float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* 32 bytes of row a's block, 32 of row b's, at the same offset */
AI __m512i pair_load(const void *a, const void *b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
				  _mm256_loadu_si256((const __m256i *)b), 1);
}

/* dy of row a in lanes 0-7, of row b in lanes 8-15 */
AI __m512 pair_d(float da, float db)
{
	return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(da)), _mm256_set1_ps(db), 1);
}

/* One weight row against NP pairs of activation rows (pair q: rows 2q and
 * 2q + 1 of x). */
AI void q2_K_pairs(int64_t k, const block_q2_K *w, const void *x, size_t bx, const int NP, float *s, size_t bs)
{
	const __m512i m3 = _mm512_set1_epi8(3);
	const __m512i lo4 = _mm512_set1_epi8(0xF);
	__m512 acc[2];
	for (int q = 0; q < NP; q++)
		acc[q] = _mm512_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		const block_q2_K *b = w + i;
		_mm_prefetch((const char *)(b + 2), _MM_HINT_T0);
		const __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
		/* group g's word: bytes (0, s, 2s, 3s), s <= 15 so no carries */
		const __m512i tables = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(packed, _mm512_castsi512_si128(lo4))),
							  _mm512_set1_epi32(0x03020100));
		const __m512i mins = _mm512_broadcast_i64x4(
			_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm512_castsi512_si128(lo4))));
		const float dw = _cvtsh_ss(b->d), dminw = _cvtsh_ss(b->dmin);
		__m512i isum[2];
		for (int q = 0; q < NP; q++) {
			const block_q8_K *ya = YB(x, bx, 2 * q) + i, *yb = YB(x, bx, 2 * q + 1) + i;
			const __m512i prod = _mm512_madd_epi16(mins, pair_load(ya->bsums, yb->bsums));
			const __m512 dmin = _mm512_mul_ps(pair_d(-ya->d, -yb->d), _mm512_set1_ps(dminw));
			acc[q] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(prod), acc[q]);
			isum[q] = _mm512_setzero_si512();
		}
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
			#pragma GCC unroll 4
			for (int p = 0; p < 4; p++) {
				/* bytes 0-15 of the run are group 8j + 2p, 16-31 the next */
				const int g = 8 * j + 2 * p;
				const __m512i tbl = _mm512_permutexvar_epi32(
					_mm512_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1, g, g, g, g, g + 1, g + 1, g + 1, g + 1),
					tables);
				const __m512i lv = _mm512_and_si512(_mm512_srli_epi16(bits, 2 * p), m3);
				const __m512i ls = _mm512_shuffle_epi8(tbl, lv);
				for (int q = 0; q < NP; q++) {
					const block_q8_K *ya = YB(x, bx, 2 * q) + i, *yb = YB(x, bx, 2 * q + 1) + i;
					const int off = 128 * j + 32 * p;
					isum[q] = _mm512_dpbusd_epi32(isum[q], ls, pair_load(ya->qs + off, yb->qs + off));
				}
			}
		}
		for (int q = 0; q < NP; q++) {
			const float da = YB(x, bx, 2 * q)[i].d, db = YB(x, bx, 2 * q + 1)[i].d;
			const __m512 d = _mm512_mul_ps(pair_d(da, db), _mm512_set1_ps(dw));
			acc[q] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[q]), acc[q]);
		}
	}
	for (int q = 0; q < NP; q++) {
		s[(size_t)(2 * q) * bs] = hsum8(_mm512_castps512_ps256(acc[q]));
		s[(size_t)(2 * q + 1) * bs] = hsum8(_mm512_extractf32x8_ps(acc[q], 1));
	}
}

/* nr even, 2 or 4 */
void pg_gemv_q2_K_pairs_avx512(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s, size_t bs)
{
	if (nr >= 4)
		q2_K_pairs(k, w, x, bx, 2, s, bs);
	else
		q2_K_pairs(k, w, x, bx, 1, s, bs);
}
