/* kernels/cpu/ops_avx2.c — softmax, SwiGLU and f16 rows on AVX2.
 *
 * expf is ggml's 256-bit approximation (ggml_v_expf, from ARM's optimized
 * routines: max error ~1.5 ulp) so the rounding matches llama.cpp built
 * for AVX2; leftovers use libm expf, as ggml does.
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vexpf_x86.h"

void pg_softmax_avx2(float *x, int64_t n)
{
	float max = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		max = fmaxf(max, x[i]);
	double sum = 0;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 v = pg_v_expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
		_mm256_storeu_ps(x + i, v);
		__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
		s = _mm_add_ps(s, _mm_movehl_ps(s, s));
		s = _mm_add_ss(s, _mm_movehdup_ps(s));
		sum += (double)_mm_cvtss_f32(s);
	}
	for (; i < n; i++) {
		x[i] = expf(x[i] - max);
		sum += (double)x[i];
	}
	pg_softmax_finish(x, n, sum);
}

void pg_swiglu_avx2(float *out, const float *g, const float *u, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 xg = _mm256_loadu_ps(g + i);
		const __m256 e = pg_v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), xg));
		const __m256 silu = _mm256_div_ps(xg, _mm256_add_ps(_mm256_set1_ps(1), e));
		_mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
	}
	for (; i < n; i++)
		out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void pg_f32_to_f16_avx2(const float *x, pg_f16 *y, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* F16C rounds to nearest even, as pg_f32_to_f16; fmaf is one rounding. */
void pg_f16_scale_avx2(pg_f16 *acc, float s, int64_t n)
{
	const __m256 vs = _mm256_set1_ps(s);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + i)));
		_mm_storeu_si128((__m128i *)(acc + i), _mm256_cvtps_ph(_mm256_mul_ps(a, vs), _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < n; i++)
		acc[i] = _cvtss_sh(_cvtsh_ss(acc[i]) * s, _MM_FROUND_TO_NEAREST_INT);
}

void pg_f16_fma_avx2(pg_f16 *acc, const pg_f16 *v, float s, int64_t n)
{
	const __m256 vs = _mm256_set1_ps(s);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + i)));
		const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
		_mm_storeu_si128((__m128i *)(acc + i),
				 _mm256_cvtps_ph(_mm256_fmadd_ps(x, vs, a), _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < n; i++)
		acc[i] = _cvtss_sh(fmaf(_cvtsh_ss(v[i]), s, _cvtsh_ss(acc[i])), _MM_FROUND_TO_NEAREST_INT);
}

void pg_f16_to_f32_avx2(const pg_f16 *x, float *y, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
	for (; i < n; i++)
		y[i] = _cvtsh_ss(x[i]);
}
