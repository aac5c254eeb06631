/* kernels/cpu/attn_avx512.c — the tiled attention's softmax as llama.cpp
 * built for AVX-512 runs it: ggml's 512-bit expf (vscalefps) and one
 * _mm512_reduce_add_ps per 16 scores. The rest of the attention is
 * attn_avx2.c's (see attn.h).
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/attn.h"

/* ggml_v_expf (AVX-512F): the same as ops_avx512.c's. */
static inline __m512 v_expf(__m512 x)
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

double pg_attn_softmax_avx512(float *x, int n, float max)
{
	double sum = 0;
	for (int i = 0; i < n; i += 16) {
		const __m512 v = v_expf(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
		_mm512_storeu_ps(x + i, v);
		sum += (double)_mm512_reduce_add_ps(v);
	}
	return sum;
}
