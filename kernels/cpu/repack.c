/* kernels/cpu/repack.c — building the Q4_0 8-row layout (repack.h), which
 * IQ4_NL's blocks take too, the activation blocks its kernels read, and the
 * scalar kernels: the references the SIMD ones must equal bit for bit (and
 * the order of llama.cpp's q4_0_8x8 and iq4_nl_8x8 kernels: one float
 * chain per output, one FMA per block). */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdbool.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kernels/cpu/repack.h"

size_t pg_q4_0_x8_size(int64_t n, int64_t k)
{
	if (n <= 0 || k <= 0 || n % 8 || k % QK4_0)
		return 0;
	return (size_t)(n / 8) * PG_X8_GROUP_BYTES(k / QK4_0);
}

void pg_q4_0_x8_repack(const void *src, void *dst, int64_t n, int64_t k)
{
	const int64_t nb = k / QK4_0;
	const size_t wrow = (size_t)nb * sizeof(block_q4_0), gbytes = PG_X8_GROUP_BYTES(nb);
	for (int64_t g = 0; g < n / 8; g++) {
		uint8_t *out = (uint8_t *)dst + (size_t)g * gbytes;
		const block_q4_0 *rows[8];
		for (int j = 0; j < 8; j++)
			rows[j] = (const block_q4_0 *)((const char *)src + (size_t)(8 * g + j) * wrow);
		for (int64_t i = 0; i < nb; i++) {
			uint8_t *q = (uint8_t *)pg_x8_qs(out, i);
			pg_f16 *sc = (pg_f16 *)pg_x8_sc(out, nb, i);
			for (int j = 0; j < 8; j++) {
				memcpy(q + 8 * j, rows[j][i].qs, 8);
				memcpy(q + 64 + 8 * j, rows[j][i].qs + 8, 8);
				sc[j] = rows[j][i].d;
			}
		}
		memset(out + (size_t)nb * 144, 0, gbytes - (size_t)nb * 144);
	}
}

bool pg_q8_0_has_m128(const void *src, int64_t nb)
{
	const block_q8_0 *b = src;
#ifdef __SSE2__ /* one pass at load over every Q8_0 weight: a compare per 16 quants */
	const __m128i m128 = _mm_set1_epi8((char)0x80);
	__m128i any = _mm_setzero_si128();
	for (int64_t i = 0; i < nb; i++) {
		any = _mm_or_si128(any, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)b[i].qs), m128));
		any = _mm_or_si128(any, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)), m128));
	}
	return _mm_movemask_epi8(any) != 0;
#else
	for (int64_t i = 0; i < nb; i++)
		for (int e = 0; e < QK8_0; e++)
			if (b[i].qs[e] == -128)
				return true;
	return false;
#endif
}

void pg_q8x_from_q8_0(const void *src, pg_q8x *dst, int64_t nb)
{
	const block_q8_0 *x = src;
	for (int64_t i = 0; i < nb; i++) {
		int sum = 0;
		for (int e = 0; e < 32; e++)
			sum += x[i].qs[e];
		dst[i].d = pg_f16_to_f32(x[i].d);
		dst[i].dn = dst[i].d;
		dst[i].off = -8 * sum;
		memcpy(dst[i].qs, x[i].qs, 32);
	}
}

/* lv: the 16 levels; with_off: the block's sum starts from x->off (Q4_0's
 * -8·Σy, its levels being the raw nibbles) */
static void x8_scalar(int64_t nb, const uint8_t *qs, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
		      const int8_t *lv, bool with_off)
{
	for (int r = 0; r < nr; r++) {
		const pg_q8x *xr = (const pg_q8x *)((const char *)x + (size_t)r * bx);
		for (int j = 0; j < 8; j++) {
			float acc = 0;
			for (int64_t i = 0; i < nb; i++) {
				/* the row's 16 bytes of the block's qs, back together */
				uint8_t q[16];
				memcpy(q, pg_x8_qs(qs, i) + 8 * j, 8);
				memcpy(q + 8, pg_x8_qs(qs, i) + 64 + 8 * j, 8);
				const int8_t *y = xr[i].qs;
				int isum = with_off ? xr[i].off : 0;
				for (int t = 0; t < 16; t++)
					isum += lv[q[t] & 0xF] * y[t] + lv[q[t] >> 4] * y[t + 16];
				acc = fmaf((float)isum, pg_f16_to_f32(pg_x8_sc(qs, nb, i)[j]) * xr[i].d, acc);
			}
			s[(size_t)r * bs + j] = acc;
		}
	}
}

void pg_q4_0_x8_scalar(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
		       enum pg_x8_pf pf)
{
	(void)pf;
	static const int8_t nibbles[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
	x8_scalar(nb, g, x, bx, nr, s, bs, nibbles, true);
}

/* IQ4_NL in the same layout: levels looked up, no offset. */
void pg_iq4_nl_x8_scalar(int64_t nb, const void *g, const pg_q8x *x, size_t bx, int nr, float *s, size_t bs,
			 enum pg_x8_pf pf)
{
	(void)pf;
	x8_scalar(nb, g, x, bx, nr, s, bs, pg_iq4nl_values, false);
}
