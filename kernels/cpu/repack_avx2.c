/* kernels/cpu/repack_avx2.c — the Q4_0 and IQ4_NL 8-row kernels (repack.h)
 * on AVX2.
 *
 * Without VNNI the products go through maddubs: u8 levels 0..15 times s8
 * activations give i16 pair sums of at most 2·15·128 = 3840 in size, and
 * the four of a block (elements 0-7, 8-15, 16-23, 24-31) add to at most
 * 15360, so the i16 sums are exact; madd by ones widens them to dwords and
 * one hadd folds the two dwords of each row. That leaves the rows in the
 * lane order 0 1 4 5 2 3 6 7; the scales are put in the same order and the
 * result put back at the end. Per output the float ops are the scalar
 * kernel's: acc = fma((float)isum, dw*dy, acc).
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/repack.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m256i bcast8(const int8_t *p)
{
	int64_t v;
	memcpy(&v, p, 8);
	return _mm256_set1_epi64x(v);
}

/* At most 4 activation rows: 16 ymm registers. */
ALWAYS_INLINE void tile(int64_t nb, const uint8_t *qs, const pg_q8x *x, size_t bx, const int nr, float *s,
			size_t bs, const enum pg_x8_pf pf)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
	const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7); /* its own inverse */
	__m256 acc[4];
	#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *q = pg_x8_qs(qs, i);
		pg_x8_prefetch(qs, i, pf);
		/* a: rows 0-3, b: rows 4-7; 0: qs[0..7], 1: qs[8..15] */
		const __m256i q0a = _mm256_loadu_si256((const __m256i *)q);
		const __m256i q0b = _mm256_loadu_si256((const __m256i *)(q + 32));
		const __m256i q1a = _mm256_loadu_si256((const __m256i *)(q + 64));
		const __m256i q1b = _mm256_loadu_si256((const __m256i *)(q + 96));
		const __m256 dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pg_x8_sc(qs, nb, i))),
							   order);
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			const pg_q8x *xb = (const pg_q8x *)((const char *)x + (size_t)r * bx) + i;
			const __m256i y0 = bcast8(xb->qs), y1 = bcast8(xb->qs + 8);
			const __m256i y2 = bcast8(xb->qs + 16), y3 = bcast8(xb->qs + 24);
			__m256i pa = _mm256_maddubs_epi16(_mm256_and_si256(q0a, lo4), y0);
			__m256i pb = _mm256_maddubs_epi16(_mm256_and_si256(q0b, lo4), y0);
			pa = _mm256_add_epi16(pa, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q0a, 4), lo4), y2));
			pb = _mm256_add_epi16(pb, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q0b, 4), lo4), y2));
			pa = _mm256_add_epi16(pa, _mm256_maddubs_epi16(_mm256_and_si256(q1a, lo4), y1));
			pb = _mm256_add_epi16(pb, _mm256_maddubs_epi16(_mm256_and_si256(q1b, lo4), y1));
			pa = _mm256_add_epi16(pa, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q1a, 4), lo4), y3));
			pb = _mm256_add_epi16(pb, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q1b, 4), lo4), y3));
			__m256i h = _mm256_hadd_epi32(_mm256_madd_epi16(pa, ones), _mm256_madd_epi16(pb, ones));
			h = _mm256_add_epi32(h, _mm256_set1_epi32(xb->off));
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), acc[r]);
		}
	}
	#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
		_mm256_storeu_ps(s + (size_t)r * bs, _mm256_permutevar8x32_ps(acc[r], order));
}

/* A table entry from a tile body: activation rows 4 at a time, the row
 * count a constant in each instance so the accumulators stay in registers;
 * decode (one row) with a copy per way of fetching ahead. */
#define X8_ENTRY(NAME, TILE)                                                                             \
	void NAME(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,       \
		  enum pg_x8_pf pf)                                                                      \
	{                                                                                                \
		for (; nr > 0; nr -= 4, x = (const pg_q8x *)((const char *)x + 4 * bx), s += 4 * bs) {     \
			switch (nr) {                                                                    \
			case 1:                                                                          \
				if (pf == PG_X8_PF_PAGES)                                                \
					TILE(nb, g, x, bx, 1, s, bs, PG_X8_PF_PAGES);                    \
				else                                                                     \
					TILE(nb, g, x, bx, 1, s, bs, PG_X8_PF_LINES);                    \
				break;                                                                   \
			case 2: TILE(nb, g, x, bx, 2, s, bs, pf); break;                                 \
			case 3: TILE(nb, g, x, bx, 3, s, bs, pf); break;                                 \
			default: TILE(nb, g, x, bx, 4, s, bs, pf); break;                                \
			}                                                                                \
		}                                                                                        \
	}

X8_ENTRY(pg_q4_0_x8_avx2, tile)

/* IQ4_NL: the levels are signed and up to 127 in size, so each product
 * goes as |y| against sign(q, y) (|y| once per activation block, for all
 * 8 rows) and each maddubs is widened at once. */
ALWAYS_INLINE __m256i nl_dot(__m256i q, __m256i y, __m256i ay)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(ay, _mm256_sign_epi8(q, y)), _mm256_set1_epi16(1));
}

ALWAYS_INLINE void nl_tile(int64_t nb, const uint8_t *qs, const pg_q8x *x, size_t bx, const int nr, float *s,
			   size_t bs, const enum pg_x8_pf pf)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F);
	const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pg_iq4nl_values));
	const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
	__m256 acc[4];
	#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *q = pg_x8_qs(qs, i);
		pg_x8_prefetch(qs, i, pf);
		__m256i pa[4], pb[4]; /* rows 0-3, 4-7 */
		/* half h: qs[8h..8h+7] of each row, elements 8h.. (low nibbles)
		 * and 16+8h.. (high) */
		#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			const __m256i va = _mm256_loadu_si256((const __m256i *)(q + 64 * h));
			const __m256i vb = _mm256_loadu_si256((const __m256i *)(q + 64 * h + 32));
			const __m256i wal = _mm256_shuffle_epi8(lut, _mm256_and_si256(va, lo4));
			const __m256i wbl = _mm256_shuffle_epi8(lut, _mm256_and_si256(vb, lo4));
			const __m256i wah = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(va, 4), lo4));
			const __m256i wbh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(vb, 4), lo4));
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				const pg_q8x *xb = (const pg_q8x *)((const char *)x + (size_t)r * bx) + i;
				const __m256i yl = bcast8(xb->qs + 8 * h), yh = bcast8(xb->qs + 16 + 8 * h);
				const __m256i al = _mm256_abs_epi8(yl), ah = _mm256_abs_epi8(yh);
				const __m256i ta = _mm256_add_epi32(nl_dot(wal, yl, al), nl_dot(wah, yh, ah));
				const __m256i tb = _mm256_add_epi32(nl_dot(wbl, yl, al), nl_dot(wbh, yh, ah));
				pa[r] = h ? _mm256_add_epi32(pa[r], ta) : ta;
				pb[r] = h ? _mm256_add_epi32(pb[r], tb) : tb;
			}
		}
		const __m256 dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pg_x8_sc(qs, nb, i))),
							   order);
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			const pg_q8x *xb = (const pg_q8x *)((const char *)x + (size_t)r * bx) + i;
			const __m256i h = _mm256_hadd_epi32(pa[r], pb[r]);
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), acc[r]);
		}
	}
	#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
		_mm256_storeu_ps(s + (size_t)r * bs, _mm256_permutevar8x32_ps(acc[r], order));
}

X8_ENTRY(pg_iq4_nl_x8_avx2, nl_tile)
