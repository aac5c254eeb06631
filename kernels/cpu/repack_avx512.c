/* kernels/cpu/repack_avx512.c — the Q4_0 and IQ4_NL 8-row kernels (repack.h) on
 * 512-bit vectors with VNNI.
 *
 * A block's 128 nibble bytes are two 64-byte loads; masking and shifting
 * give four vectors of levels, dword lane l = 4 levels of row l/2. Each is
 * multiplied (vpdpbusd) against one 8-byte slice of the activation block
 * broadcast to every qword, so lanes 2j and 2j+1 hold parts of row j's
 * sum; adding the odd lane into the even one gives the block's exact
 * integer sum in lane 2j, started from -8·Σy (even lanes only). The float
 * chain then runs with the scales placed there: acc = fma((float)isum,
 * dw*dy, acc), the scalar kernel's ops one for one. Zen 5 runs 512-bit
 * VNNI at full width, so a block against one activation row is 4
 * vpdpbusd.
 *
 * One row (decode) keeps its sums in the even lanes. Two or more go in
 * pairs: the odd lanes of one vector take the other row's sums (a blend,
 * a two-source permute and an add do both rows' pair sums at once), so
 * each conversion, scale product and FMA serves 16 outputs instead of 8
 * (bench/mm_kernel). The pair's two scales come as one 64-bit broadcast
 * of (d, dn).
 *
 * IQ4_NL in the same layout: the nibbles index its levels (-127..113),
 * looked up as level + 128 so that they are unsigned, and the 128·Σy this
 * adds is taken back out through the start, 16·off = -128·Σy; the
 * integer sum is exact as before.
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/repack.h"
#include "kernels/types.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m512i bcast8(const int8_t *p)
{
	int64_t v;
	memcpy(&v, p, 8);
	return _mm512_set1_epi64(v);
}

/* level + 128 of each IQ4_NL nibble, in every 128-bit lane */
ALWAYS_INLINE __m512i nl_lut(void)
{
	int8_t u[16];
	for (int i = 0; i < 16; i++)
		u[i] = (int8_t)(pg_iq4nl_values[i] ^ 0x80);
	return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)u));
}

/* -8·Σy (16·off = -128·Σy for IQ4_NL) in the even lanes, 0 in the odd */
ALWAYS_INLINE __m512i start(const pg_q8x *xb, const bool nl)
{
	return _mm512_maskz_set1_epi32(0x5555, nl ? 16 * xb->off : xb->off);
}

/* lane 2j: a0[2j] + a0[2j+1]; lane 2j+1: a1[2j] + a1[2j+1] (one
 * two-source permute where a blend and a swap take two ops) */
ALWAYS_INLINE __m512i pair_sums(__m512i a0, __m512i a1)
{
	const __m512i other = _mm512_setr_epi32(1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30);
	return _mm512_add_epi32(_mm512_mask_blend_epi32(0xAAAA, a0, a1), _mm512_permutex2var_epi32(a0, other, a1));
}

ALWAYS_INLINE __m512i dots(__m512i a, const int8_t *y, __m512i w0l, __m512i w1l, __m512i w0h, __m512i w1h)
{
	a = _mm512_dpbusd_epi32(a, w0l, bcast8(y));
	a = _mm512_dpbusd_epi32(a, w1l, bcast8(y + 8));
	a = _mm512_dpbusd_epi32(a, w0h, bcast8(y + 16));
	return _mm512_dpbusd_epi32(a, w1h, bcast8(y + 24));
}

ALWAYS_INLINE void tile(int64_t nb, const uint8_t *qs, const pg_q8x *x, size_t bx, const int nr, float *s,
			size_t bs, const bool nl, const enum pg_x8_pf pf)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0F);
	const __m512i lut = nl ? nl_lut() : lo4;
	const int np = (nr + 1) / 2;
	__m512 acc[(PG_X8_MAX_NR + 1) / 2];
	#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *q = pg_x8_qs(qs, i);
		pg_x8_prefetch(qs, i, pf);
		const __m512i q0 = _mm512_loadu_si512(q), q1 = _mm512_loadu_si512(q + 64);
		__m512i w0l = _mm512_and_si512(q0, lo4), w0h = _mm512_and_si512(_mm512_srli_epi16(q0, 4), lo4);
		__m512i w1l = _mm512_and_si512(q1, lo4), w1h = _mm512_and_si512(_mm512_srli_epi16(q1, 4), lo4);
		if (nl) {
			w0l = _mm512_shuffle_epi8(lut, w0l);
			w0h = _mm512_shuffle_epi8(lut, w0h);
			w1l = _mm512_shuffle_epi8(lut, w1l);
			w1h = _mm512_shuffle_epi8(lut, w1h);
		}
		const __m128i sch = _mm_loadu_si128((const __m128i *)pg_x8_sc(qs, nb, i));
		if (nr == 1) {
			const pg_q8x *xb = x + i;
			/* scale j in lane 2j, +0 in the odd lanes */
			const __m512 dw = _mm512_cvtph_ps(_mm256_cvtepu16_epi32(sch));
			/* four short chains, so that blocks overlap */
			const __m512i z = _mm512_setzero_si512();
			const __m512i a0 = _mm512_dpbusd_epi32(start(xb, nl), w0l, bcast8(xb->qs));
			const __m512i a1 = _mm512_dpbusd_epi32(z, w1l, bcast8(xb->qs + 8));
			const __m512i a2 = _mm512_dpbusd_epi32(z, w0h, bcast8(xb->qs + 16));
			const __m512i a3 = _mm512_dpbusd_epi32(z, w1h, bcast8(xb->qs + 24));
			__m512i a = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
			a = _mm512_add_epi32(a, _mm512_srli_epi64(a, 32));
			acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[0]);
			continue;
		}
		/* scale j in lanes 2j and 2j+1 */
		const __m512 dw2 = _mm512_cvtph_ps(
			_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(sch, sch)),
						_mm_unpackhi_epi16(sch, sch), 1));
		#pragma GCC unroll 4
		for (int p = 0; p < np; p++) {
			const pg_q8x *xa = (const pg_q8x *)((const char *)x + (size_t)(2 * p) * bx) + i;
			const pg_q8x *xb = 2 * p + 1 < nr ? (const pg_q8x *)((const char *)xa + bx) : xa;
			/* an odd last row pairs with itself; its copy is not stored */
			const __m512i t = pair_sums(dots(start(xa, nl), xa->qs, w0l, w1l, w0h, w1h),
						    dots(start(xb, nl), xb->qs, w0l, w1l, w0h, w1h));
			/* (d, dn): this row's scale and its partner's (xb's, or
			 * its own for an odd last row) */
			double dd;
			memcpy(&dd, &xa->d, 8);
			const __m512 dy = _mm512_castpd_ps(_mm512_set1_pd(dd));
			acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw2, dy), acc[p]);
		}
	}
	if (nr == 1) {
		_mm256_storeu_si256((__m256i *)s, _mm512_cvtepi64_epi32(_mm512_castps_si512(acc[0])));
		return;
	}
	#pragma GCC unroll 4
	for (int p = 0; p < np; p++) {
		const __m512i v = _mm512_castps_si512(acc[p]);
		_mm256_storeu_si256((__m256i *)(s + (size_t)(2 * p) * bs), _mm512_cvtepi64_epi32(v));
		if (2 * p + 1 < nr)
			_mm256_storeu_si256((__m256i *)(s + (size_t)(2 * p + 1) * bs),
					    _mm512_cvtepi64_epi32(_mm512_srli_epi64(v, 32)));
	}
}

/* Decode (one row) gets a copy per way of fetching ahead, so that the
 * choice is not a branch per block. */
ALWAYS_INLINE void tiles(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
			 const bool nl, enum pg_x8_pf pf)
{
	switch (nr) {
	case 1:
		if (pf == PG_X8_PF_PAGES)
			tile(nb, g, x, bx, 1, s, bs, nl, PG_X8_PF_PAGES);
		else
			tile(nb, g, x, bx, 1, s, bs, nl, PG_X8_PF_LINES);
		break;
	case 2: tile(nb, g, x, bx, 2, s, bs, nl, pf); break;
	case 3: tile(nb, g, x, bx, 3, s, bs, nl, pf); break;
	case 4: tile(nb, g, x, bx, 4, s, bs, nl, pf); break;
	case 5: tile(nb, g, x, bx, 5, s, bs, nl, pf); break;
	case 6: tile(nb, g, x, bx, 6, s, bs, nl, pf); break;
	case 7: tile(nb, g, x, bx, 7, s, bs, nl, pf); break;
	default: tile(nb, g, x, bx, 8, s, bs, nl, pf); break;
	}
}

void pg_q4_0_x8_avx512(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
		       enum pg_x8_pf pf)
{
	tiles(nb, g, x, bx, nr, s, bs, false, pf);
}

void pg_iq4_nl_x8_avx512(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
			 enum pg_x8_pf pf)
{
	tiles(nb, g, x, bx, nr, s, bs, true, pf);
}
