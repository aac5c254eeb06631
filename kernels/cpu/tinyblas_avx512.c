/* kernels/cpu/tinyblas_avx512.c — tinyBLAS<16, __m512>'s per-output order
 * for F32 and F16 weights (see tinyblas.h), on 512-bit vectors: up to 4
 * weight rows by up to 4 activation rows per call, 16 accumulators in
 * registers, each output's FMA chain in tinyBLAS's order. */
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

#define ROW(T, p, stride, i) ((const T *)((const char *)(p) + (size_t)(i) * (stride)))

/* nw and nr are constants in every expansion, so the accumulators stay in
 * registers. */
#define TB_TILE(NAME, T, LD)                                                                            \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const void *w, size_t bw, const int nw, const void *x, \
				       size_t bx, const int nr, float *s, size_t bs)                     \
	{                                                                                                \
		__m512 acc[PG_TB_NW][PG_MAX_NR];                                                         \
		for (int j = 0; j < nw; j++)                                                             \
			for (int r = 0; r < nr; r++)                                                     \
				acc[j][r] = _mm512_setzero_ps();                                         \
		for (int64_t l = 0; l < k; l += PG_TB_KN) {                                              \
			__m512 xv[PG_MAX_NR];                                                            \
			for (int r = 0; r < nr; r++)                                                     \
				xv[r] = LD(ROW(T, x, bx, r) + l);                                        \
			for (int j = 0; j < nw; j++) {                                                   \
				const __m512 wv = LD(ROW(T, w, bw, j) + l);                              \
				for (int r = 0; r < nr; r++)                                             \
					acc[j][r] = _mm512_fmadd_ps(wv, xv[r], acc[j][r]);               \
			}                                                                                \
		}                                                                                        \
		for (int j = 0; j < nw; j++)                                                             \
			for (int r = 0; r < nr; r++)                                                     \
				s[(size_t)r * bs + j] = _mm512_reduce_add_ps(acc[j][r]);                \
	}
TB_TILE(f32, float, ld_f32)
TB_TILE(f16, pg_f16, ld_f16)

#define TB_CASE(NAME, NW, NR)                                                                           \
	case (NW) * 8 + (NR): NAME##_tile(k, w, bw, NW, x, bx, NR, s, bs); break;
#define TB_CASES(NAME, NW) TB_CASE(NAME, NW, 1) TB_CASE(NAME, NW, 2) TB_CASE(NAME, NW, 3) TB_CASE(NAME, NW, 4)
#define TB_FN(NAME)                                                                                     \
	void pg_tb_##NAME##_avx512(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, \
				   int nr, float *s, size_t bs)                                          \
	{                                                                                                \
		switch (nw * 8 + nr) {                                                                   \
			TB_CASES(NAME, 1)                                                                \
			TB_CASES(NAME, 2)                                                                \
			TB_CASES(NAME, 3)                                                                \
			TB_CASES(NAME, 4)                                                                \
		default: break;                                                                          \
		}                                                                                        \
	}
TB_FN(f32)
TB_FN(f16)

_Static_assert(PG_MAX_NR == 4 && PG_TB_NW == 4, "the switches above expand nw and nr up to 4");
