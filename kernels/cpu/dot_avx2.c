/* kernels/cpu/dot_avx2.c — the AVX2+FMA+F16C table. */
#pragma GCC optimize("fp-contract=off") /* no FMAs beyond the ones written */

#include "kernels/cpu/dot_x86.h"
#include "kernels/cpu/tinyblas.h"

#include <math.h>

/* f32 / f16 / bf16 weights against activations of the same type: f32
 * products, f32 accumulation as ggml's SIMD vec_dot_f16/bf16/f32. */
ALWAYS_INLINE __m256 ld_f32(const float *p)
{
	return _mm256_loadu_ps(p);
}
ALWAYS_INLINE __m256 ld_f16(const pg_f16 *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
ALWAYS_INLINE __m256 ld_bf16(const pg_bf16 *p)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline float cv_f32(float v)
{
	return v;
}

/* F32/F16: the summation order of ggml_vec_dot_f32/f16 as llama.cpp's
 * AVX-512 build runs it (the build the references come from), on 256-bit
 * halves: four 16-lane accumulators over steps of 64, FMA, reduced as
 * (a0 + a2) + (a1 + a3), then _mm512_reduce_add_ps's tree (upper 8 lanes
 * onto lower 8, then hsum_ps's tree); leftovers in order, in double for
 * f16 and in float for f32 (see LEFT_F32). Identical results to
 * dot_avx512.c. */
#define VECDOT_TILE(NAME, T, LD, CV, ACC_T, LEFT)                                                      \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const T *w, const void *x, size_t bx, const int nr,    \
				       float *s, size_t bs)                                              \
	{                                                                                                \
		__m256 a[PG_MAX_NR][8];                                                                  \
		for (int r = 0; r < nr; r++)                                                             \
			for (int j = 0; j < 8; j++)                                                      \
				a[r][j] = _mm256_setzero_ps();                                           \
		int64_t i = 0;                                                                           \
		for (; i + 64 <= k; i += 64) {                                                           \
			for (int j = 0; j < 8; j++) {                                                    \
				const __m256 wj = LD(w + i + 8 * j);                                     \
				for (int r = 0; r < nr; r++)                                             \
					a[r][j] = _mm256_fmadd_ps(wj, LD(XROW(T, x, bx, r) + i + 8 * j), a[r][j]); \
			}                                                                                \
		}                                                                                        \
		for (int r = 0; r < nr; r++) {                                                           \
			const T *xr = XROW(T, x, bx, r);                                                 \
			/* accumulator q is a[r][2q] (lanes 0-7) and a[r][2q+1] (8-15) */                \
			const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[r][0], a[r][4]),                 \
							_mm256_add_ps(a[r][2], a[r][6]));                \
			const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[r][1], a[r][5]),                 \
							_mm256_add_ps(a[r][3], a[r][7]));                \
			ACC_T t = (ACC_T)hsum_ps(_mm256_add_ps(hi, lo));                                 \
			for (int64_t j = i; j < k; j++)                                                  \
				LEFT(t, CV(w[j]), CV(xr[j]), j >= i + (k - i) / 8 * 8);                  \
			s[(size_t)r * bs] = (float)t;                                                    \
		}                                                                                        \
	}
/* GCC vectorizes ggml's f32 leftover loop 16 and 8 elements at a time:
 * those products are rounded, then added one by one; only the last k % 8
 * are fused (vfmadd231ss). f16 products are exact, so fusing is moot. */
#define LEFT_F32(t, a, b, fused) t = (fused) ? fmaf(a, b, t) : t + (a) * (b)
#define LEFT_F64(t, a, b, fused) t += (double)((a) * (b))
VECDOT_TILE(f32, float, ld_f32, cv_f32, float, LEFT_F32)
VECDOT_TILE(f16, pg_f16, ld_f16, f16s, double, LEFT_F64)

#define FLOAT_TILE(NAME, T, LD, CV)                                                                    \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const T *w, const void *x, size_t bx, const int nr,    \
				       float *s, size_t bs)                                              \
	{                                                                                                \
		__m256 a0[PG_MAX_NR], a1[PG_MAX_NR];                                                     \
		for (int r = 0; r < nr; r++)                                                             \
			a0[r] = a1[r] = _mm256_setzero_ps();                                             \
		int64_t i = 0;                                                                           \
		for (; i + 16 <= k; i += 16) {                                                           \
			const __m256 w0 = LD(w + i), w1 = LD(w + i + 8);                                 \
			for (int r = 0; r < nr; r++) {                                                   \
				const T *xr = XROW(T, x, bx, r);                                         \
				a0[r] = _mm256_fmadd_ps(w0, LD(xr + i), a0[r]);                          \
				a1[r] = _mm256_fmadd_ps(w1, LD(xr + i + 8), a1[r]);                      \
			}                                                                                \
		}                                                                                        \
		for (int r = 0; r < nr; r++) {                                                           \
			const T *xr = XROW(T, x, bx, r);                                                 \
			float t = hsum_ps(_mm256_add_ps(a0[r], a1[r]));                                  \
			for (int64_t j = i; j < k; j++)                                                  \
				t += CV(w[j]) * CV(xr[j]);                                               \
			s[(size_t)r * bs] = t;                                                           \
		}                                                                                        \
	}
FLOAT_TILE(bf16, pg_bf16, ld_bf16, pg_bf16_to_f32)

#define C_F32(N) f32_tile(k, w, x, bx, N, s, bs)
#define C_F16(N) f16_tile(k, w, x, bx, N, s, bs)
#define C_BF16(N) bf16_tile(k, w, x, bx, N, s, bs)
X86_GEMV(f32, C_F32)
X86_GEMV(f16, C_F16)
X86_GEMV(bf16, C_BF16)

static float dot_f16_rows(const pg_f16 *a, const pg_f16 *b, int64_t n)
{
	float s;
	f16_tile(n, a, b, 0, 1, &s, 0);
	return s;
}

static void f32_from_float(const float *x, void *y, int64_t k)
{
	memcpy(y, x, (size_t)k * sizeof(float));
}

static const struct pg_act_pack q8_0_quads = {
	.rows = 4,
	.unit_bytes = pg_q8_0_quad_bytes_avx2,
	.pack = pg_q8_0_pack_quads_avx2,
	.gemv8 = pg_gemv8_q8_0_quads_avx2,
};

const struct pg_kern pg_kern_avx2 = {
	.name = "avx2",
	.gemv = {
		[PG_TYPE_F32] = gemv_f32,
		[PG_TYPE_F16] = gemv_f16,
		[PG_TYPE_BF16] = gemv_bf16,
		[PG_TYPE_Q4_0] = gemv_q4_0,
		[PG_TYPE_Q4_1] = gemv_q4_1,
		[PG_TYPE_Q5_0] = gemv_q5_0,
		[PG_TYPE_Q5_1] = gemv_q5_1,
		[PG_TYPE_Q8_0] = gemv_q8_0,
		[PG_TYPE_Q2_K] = gemv_q2_K,
		[PG_TYPE_Q3_K] = gemv_q3_K,
		[PG_TYPE_Q4_K] = gemv_q4_K,
		[PG_TYPE_Q5_K] = gemv_q5_K,
		[PG_TYPE_Q6_K] = gemv_q6_K,
		[PG_TYPE_IQ4_NL] = gemv_iq4_nl,
		[PG_TYPE_IQ4_XS] = gemv_iq4_xs,
	},
	.gemv8 = {
		[PG_TYPE_Q4_0] = gemv8_q4_0,
		[PG_TYPE_IQ4_NL] = gemv8_iq4_nl,
		[PG_TYPE_Q8_0] = gemv8_q8_0,
		[PG_TYPE_Q4_K] = gemv8_q4_K,
		[PG_TYPE_Q4_K_X8] = gemv8_q4_K_x8r,
	},
	.gemm8 = {
		[PG_TYPE_Q4_K] = gemm8_q4_K,
		[PG_TYPE_Q4_K_X8] = gemm8_q4_K_x8r,
		[PG_TYPE_IQ4_XS] = gemm8_iq4_xs,
	},
	.tb = {
		[PG_TYPE_F32] = pg_tb_f32_avx2,
		[PG_TYPE_F16] = pg_tb_f16_avx2,
		[PG_TYPE_IQ4_NL] = tb_iq4_nl,
	},
	.q4_0_x8 = pg_q4_0_x8_avx2,
	.iq4_nl_x8 = pg_iq4_nl_x8_avx2,
	.q8_0_s127_row = gemv8_q8_0_s127_row,
	.act_pack = {
		[PG_TYPE_Q8_0] = &q8_0_quads,
	},
	.from_float = {
		[PG_TYPE_F32] = f32_from_float,
		[PG_TYPE_F16] = x86_f16_from_float,
		[PG_TYPE_BF16] = pg_bf16_from_float,
		[PG_TYPE_Q8_0] = x86_q8_0_from_float,
		[PG_TYPE_Q8_1] = x86_q8_1_from_float,
		[PG_TYPE_Q8_K] = pg_q8_K_from_float,
	},
	.softmax = pg_softmax_avx2,
	.swiglu = pg_swiglu_avx2,
	.f32_to_f16 = pg_f32_to_f16_avx2,
	.f16_to_f32 = pg_f16_to_f32_avx2,
	.dot_f16 = dot_f16_rows,
	.f16_scale = pg_f16_scale_avx2,
	.f16_fma = pg_f16_fma_avx2,
};
