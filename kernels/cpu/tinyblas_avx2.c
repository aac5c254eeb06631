/* kernels/cpu/tinyblas_avx2.c — tinyBLAS<16, __m512>'s per-output order for
 * F32 and F16 weights (see tinyblas.h) on 256-bit vectors: each 16-lane
 * accumulator is kept as two halves (lanes 0-7, 8-15), FMA lane by lane as
 * the 512-bit one, and reduced by the same tree (halves added, then
 * hsum_ps), so the bits equal tinyblas_avx512.c's. */
#include <immintrin.h>

#include "kernels/cpu/tinyblas.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m256 ld_f32(const float *p)
{
	return _mm256_loadu_ps(p);
}
ALWAYS_INLINE __m256 ld_f16(const pg_f16 *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* _mm512_reduce_add_ps (GCC) of the accumulator whose lanes 0-7 are lo and
 * 8-15 hi: hi + lo, then upper 4 onto lower 4, then (l0 + l2) + (l1 + l3). */
ALWAYS_INLINE float reduce16(__m256 lo, __m256 hi)
{
	const __m256 v = _mm256_add_ps(hi, lo);
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

#define TB_TILE(NAME, T, LD)                                                                            \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const T *w, const void *x, size_t bx, const int nr,    \
				       float *s, size_t bs)                                              \
	{                                                                                                \
		__m256 lo[PG_MAX_NR], hi[PG_MAX_NR];                                                     \
		for (int r = 0; r < nr; r++)                                                             \
			lo[r] = hi[r] = _mm256_setzero_ps();                                             \
		for (int64_t l = 0; l < k; l += PG_TB_KN) {                                              \
			const __m256 w0 = LD(w + l), w1 = LD(w + l + 8);                                 \
			for (int r = 0; r < nr; r++) {                                                   \
				const T *xr = (const T *)((const char *)x + r * bx) + l;                 \
				lo[r] = _mm256_fmadd_ps(w0, LD(xr), lo[r]);                              \
				hi[r] = _mm256_fmadd_ps(w1, LD(xr + 8), hi[r]);                          \
			}                                                                                \
		}                                                                                        \
		for (int r = 0; r < nr; r++)                                                             \
			s[(size_t)r * bs] = reduce16(lo[r], hi[r]);                                      \
	}
TB_TILE(f32, float, ld_f32)
TB_TILE(f16, pg_f16, ld_f16)

/* One weight row at a time: 4 rows of two halves already fill the 16
 * registers. */
#define TB_FN(NAME)                                                                                     \
	void pg_tb_##NAME##_avx2(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx,  \
				 int nr, float *s, size_t bs)                                            \
	{                                                                                                \
		for (int j = 0; j < nw; j++) {                                                           \
			const void *wj = (const char *)w + (size_t)j * bw;                               \
			switch (nr) {                                                                    \
			case 4: NAME##_tile(k, wj, x, bx, 4, s + j, bs); break;                          \
			case 3: NAME##_tile(k, wj, x, bx, 3, s + j, bs); break;                          \
			case 2: NAME##_tile(k, wj, x, bx, 2, s + j, bs); break;                          \
			default: NAME##_tile(k, wj, x, bx, 1, s + j, bs); break;                         \
			}                                                                                \
		}                                                                                        \
	}
TB_FN(f32)
TB_FN(f16)

_Static_assert(PG_MAX_NR == 4, "the switch above expands nr up to 4");
