/* kernels/cpu/ops_avx512.c — softmax, SwiGLU and f16 rows on AVX-512.
 *
 * expf is ggml's 512-bit approximation (with vscalefps), which rounds a
 * little differently from the 256-bit one: llama.cpp built for AVX-512
 * uses this one.
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vexpf_x86.h"

void pg_softmax_avx512(float *x, int64_t n)
{
	float max = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		max = fmaxf(max, x[i]);
	double sum = 0;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512 v = pg_v_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
		_mm512_storeu_ps(x + i, v);
		sum += (double)_mm512_reduce_add_ps(v);
	}
	for (; i < n; i++) {
		x[i] = expf(x[i] - max);
		sum += (double)x[i];
	}
	pg_softmax_finish(x, n, sum);
}

void pg_swiglu_avx512(float *out, const float *g, const float *u, int64_t n)
{
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512 xg = _mm512_loadu_ps(g + i);
		const __m512 e = pg_v_expf16(_mm512_sub_ps(_mm512_setzero_ps(), xg));
		const __m512 silu = _mm512_div_ps(xg, _mm512_add_ps(_mm512_set1_ps(1), e));
		_mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
	}
	for (; i < n; i++)
		out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void pg_f32_to_f16_avx512(const float *x, pg_f16 *y, int64_t n)
{
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

void pg_f16_scale_avx512(pg_f16 *acc, float s, int64_t n)
{
	const __m512 vs = _mm512_set1_ps(s);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(acc + i)));
		_mm256_storeu_si256((__m256i *)(acc + i), _mm512_cvtps_ph(_mm512_mul_ps(a, vs), _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < n; i++)
		acc[i] = _cvtss_sh(_cvtsh_ss(acc[i]) * s, _MM_FROUND_TO_NEAREST_INT);
}

void pg_f16_fma_avx512(pg_f16 *acc, const pg_f16 *v, float s, int64_t n)
{
	const __m512 vs = _mm512_set1_ps(s);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(acc + i)));
		const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + i)));
		_mm256_storeu_si256((__m256i *)(acc + i),
				    _mm512_cvtps_ph(_mm512_fmadd_ps(x, vs, a), _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < n; i++)
		acc[i] = _cvtss_sh(fmaf(_cvtsh_ss(v[i]), s, _cvtsh_ss(acc[i])), _MM_FROUND_TO_NEAREST_INT);
}

void pg_f16_to_f32_avx512(const pg_f16 *x, float *y, int64_t n)
{
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
	for (; i < n; i++)
		y[i] = _cvtsh_ss(x[i]);
}
