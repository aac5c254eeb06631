/* kernels/cpu/tinyblas_avx512.c — tinyBLAS<16, __m512>'s per-output order
 * for F32 and F16 weights (see tinyblas.h), on 512-bit vectors. One weight
 * row is loaded once per step and used against up to PG_MAX_NR rows. */
#include <immintrin.h>

#include "kernels/cpu/tinyblas.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m512 ld_f32(const float *p)
{
	return _mm512_loadu_ps(p);
}
ALWAYS_INLINE __m512 ld_f16(const pg_f16 *p)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* nr is a constant in every expansion, so the accumulators stay in
 * registers. */
#define TB_TILE(NAME, T, LD)                                                                            \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const T *w, const void *x, size_t bx, const int nr,    \
				       float *s, size_t bs)                                              \
	{                                                                                                \
		__m512 acc[PG_MAX_NR];                                                                   \
		for (int r = 0; r < nr; r++)                                                             \
			acc[r] = _mm512_setzero_ps();                                                    \
		for (int64_t l = 0; l < k; l += PG_TB_KN) {                                              \
			const __m512 wv = LD(w + l);                                                     \
			for (int r = 0; r < nr; r++)                                                     \
				acc[r] = _mm512_fmadd_ps(wv, LD((const T *)((const char *)x + r * bx) + l), \
							 acc[r]);                                        \
		}                                                                                        \
		for (int r = 0; r < nr; r++)                                                             \
			s[(size_t)r * bs] = _mm512_reduce_add_ps(acc[r]);                               \
	}
TB_TILE(f32, float, ld_f32)
TB_TILE(f16, pg_f16, ld_f16)

#define TB_GEMV(NAME)                                                                                   \
	void pg_tb_gemv_##NAME##_avx512(int64_t k, const void *w, const void *x, size_t bx, int nr,      \
					float *s, size_t bs)                                             \
	{                                                                                                \
		switch (nr) {                                                                            \
		case 4: NAME##_tile(k, w, x, bx, 4, s, bs); break;                                       \
		case 3: NAME##_tile(k, w, x, bx, 3, s, bs); break;                                       \
		case 2: NAME##_tile(k, w, x, bx, 2, s, bs); break;                                       \
		default: NAME##_tile(k, w, x, bx, 1, s, bs); break;                                      \
		}                                                                                        \
	}
TB_GEMV(f32)
TB_GEMV(f16)

_Static_assert(PG_MAX_NR == 4, "the switches above expand nr up to 4");
