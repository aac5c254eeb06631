/* kernels/cpu/vexpf_x86.h — ggml_v_expf, the vector expf llama.cpp's
 * softmax and SwiGLU use, in its 256-bit (AVX2) and 512-bit (AVX-512F,
 * with vscalefps) forms. The two round differently, which is why each ISA
 * table uses its own: the same bits as llama.cpp built for that ISA.
 *
 * Only for the per-ISA translation units; the 512-bit form where
 * __AVX512F__ is on.
 */
#ifndef PAGODA_KERNELS_CPU_VEXPF_X86_H
#define PAGODA_KERNELS_CPU_VEXPF_X86_H

#include <immintrin.h>
#include <math.h>

static inline __m256 pg_v_expf8(__m256 x)
{
	const __m256 r = _mm256_set1_ps(0x1.8p23f);
	const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
	const __m256 n = _mm256_sub_ps(z, r);
	const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
					  _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
	const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
	const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
	const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.f), n);
	const __m256 c = _mm256_cmp_ps(absn, _mm256_set1_ps(126), _CMP_GT_OQ);
	const __m256 u = _mm256_mul_ps(b, b);
	const __m256 j = _mm256_fmadd_ps(
		_mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
				_mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
		u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
	if (!_mm256_movemask_ps(c))
		return _mm256_fmadd_ps(j, k, k);
	/* |n| > 126: scale in two steps, saturating to 0 or inf past 192 */
	const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
					   _mm256_set1_epi32((int)0x82000000u));
	const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
	const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
	const __m256 d = _mm256_cmp_ps(absn, _mm256_set1_ps(192), _CMP_GT_OQ);
	return _mm256_or_ps(_mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
			    _mm256_andnot_ps(d, _mm256_or_ps(_mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
							     _mm256_andnot_ps(c, _mm256_fmadd_ps(k, j, k)))));
}

#ifdef __AVX512F__
static inline __m512 pg_v_expf16(__m512 x)
{
	const __m512 r = _mm512_set1_ps(0x1.8p23f);
	const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
	const __m512 n = _mm512_sub_ps(z, r);
	const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
					  _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
	const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
	const __m512 u = _mm512_mul_ps(b, b);
	const __m512 j = _mm512_fmadd_ps(
		_mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
				_mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
		u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
	const __m512 res = _mm512_scalef_ps(j, n);
	if (_mm512_kortestz(d, d))
		return res;
	const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
						_mm512_set1_ps(INFINITY), _mm512_setzero_ps());
	return _mm512_mask_blend_ps(d, res, alt);
}
#endif

#endif
