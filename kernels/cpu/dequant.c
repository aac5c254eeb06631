/* kernels/cpu/dequant.c — block formats back to f32 (ggml's dequantize_row_*). */
#include <string.h>

#include "kernels/cpu/cpu.h"

static void dq_q4_0(const block_q4_0 *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK4_0) {
		const float d = pg_f16_to_f32(x[i].d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
			y[j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
		}
	}
}

static void dq_q4_1(const block_q4_1 *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK4_1) {
		const float d = pg_f16_to_f32(x[i].d), m = pg_f16_to_f32(x[i].m);
		for (int j = 0; j < QK4_1 / 2; j++) {
			y[j] = (x[i].qs[j] & 0x0F) * d + m;
			y[j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
		}
	}
}

static void dq_q5_0(const block_q5_0 *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK5_0) {
		const float d = pg_f16_to_f32(x[i].d);
		uint32_t qh;
		memcpy(&qh, x[i].qh, 4);
		for (int j = 0; j < QK5_0 / 2; j++) {
			const int h0 = ((qh >> j) << 4) & 0x10;
			const int h1 = (qh >> (j + 12)) & 0x10;
			y[j] = (((x[i].qs[j] & 0x0F) | h0) - 16) * d;
			y[j + QK5_0 / 2] = (((x[i].qs[j] >> 4) | h1) - 16) * d;
		}
	}
}

static void dq_q5_1(const block_q5_1 *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK5_1) {
		const float d = pg_f16_to_f32(x[i].d), m = pg_f16_to_f32(x[i].m);
		uint32_t qh;
		memcpy(&qh, x[i].qh, 4);
		for (int j = 0; j < QK5_1 / 2; j++) {
			const int h0 = ((qh >> j) << 4) & 0x10;
			const int h1 = (qh >> (j + 12)) & 0x10;
			y[j] = ((x[i].qs[j] & 0x0F) | h0) * d + m;
			y[j + QK5_1 / 2] = ((x[i].qs[j] >> 4) | h1) * d + m;
		}
	}
}

static void dq_q8_0(const block_q8_0 *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK8_0) {
		const float d = pg_f16_to_f32(x[i].d);
		for (int j = 0; j < QK8_0; j++)
			y[j] = x[i].qs[j] * d;
	}
}

static void dq_q8_1(const block_q8_1 *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK8_1) {
		const float d = pg_f16_to_f32(x[i].d);
		for (int j = 0; j < QK8_1; j++)
			y[j] = x[i].qs[j] * d;
	}
}

static void dq_q8_K(const block_q8_K *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += QK_K)
		for (int j = 0; j < QK_K; j++)
			y[j] = x[i].d * x[i].qs[j];
}

/* Q2_K: sixteen groups of 16, each with a 4-bit scale (low nibble) and a
 * 4-bit min (high nibble) in units of the block's d and dmin. Within each
 * 128 elements, qs[l] carries elements l, l+32, l+64 and l+96 from its low
 * bit pair up, so scales run in element order as the shift steps through
 * bytes 0-15, then 16-31. */
static void dq_q2_K(const block_q2_K *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(x[i].d), dmin = pg_f16_to_f32(x[i].dmin);
		const uint8_t *q = x[i].qs, *sc = x[i].scales;
		for (int n = 0; n < QK_K; n += 128, q += 32) {
			for (int shift = 0; shift < 8; shift += 2) {
				for (int h = 0; h < 32; h += 16, sc++) {
					const float dl = d * (*sc & 0xF), ml = dmin * (*sc >> 4);
					for (int l = 0; l < 16; l++)
						*y++ = dl * ((q[h + l] >> shift) & 3) - ml;
				}
			}
		}
	}
}

/* Q3_K: the Q2_K bit-pair layout for the low two bits, plus a third bit in
 * hmask: bit b of hmask[l] for element 32b + l. A clear bit subtracts 4,
 * so the quants are -4..3 against a signed scale and no min. */
static void dq_q3_K(const block_q3_K *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(x[i].d);
		const uint8_t *q = x[i].qs, *hm = x[i].hmask;
		int8_t sc[QK_K / 16];
		pg_q3_K_scales(x[i].scales, sc);
		int is = 0;
		uint8_t m = 1;
		for (int n = 0; n < QK_K; n += 128, q += 32) {
			for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
				for (int h = 0; h < 32; h += 16, is++) {
					const float dl = d * sc[is];
					for (int l = 0; l < 16; l++)
						*y++ = dl * (((q[h + l] >> shift) & 3) - (hm[h + l] & m ? 0 : 4));
				}
			}
		}
	}
}

static void dq_q4_K(const block_q4_K *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(x[i].d), dmin = pg_f16_to_f32(x[i].dmin);
		const uint8_t *q = x[i].qs;
		for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
			uint8_t sc, m;
			pg_scale_min_k4(is, x[i].scales, &sc, &m);
			const float d1 = d * sc, m1 = dmin * m;
			pg_scale_min_k4(is + 1, x[i].scales, &sc, &m);
			const float d2 = d * sc, m2 = dmin * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (q[l] & 0xF) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (q[l] >> 4) - m2;
		}
	}
}

static void dq_q5_K(const block_q5_K *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(x[i].d), dmin = pg_f16_to_f32(x[i].dmin);
		const uint8_t *ql = x[i].qs, *qh = x[i].qh;
		uint8_t u1 = 1, u2 = 2;
		for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
			uint8_t sc, m;
			pg_scale_min_k4(is, x[i].scales, &sc, &m);
			const float d1 = d * sc, m1 = dmin * m;
			pg_scale_min_k4(is + 1, x[i].scales, &sc, &m);
			const float d2 = d * sc, m2 = dmin * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
		}
	}
}

static void dq_q6_K(const block_q6_K *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(x[i].d);
		const uint8_t *ql = x[i].ql, *qh = x[i].qh;
		const int8_t *sc = x[i].scales;
		for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l++) {
				const int is = l / 16;
				const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
				const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
				const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[l + 0] = d * sc[is + 0] * q1;
				y[l + 32] = d * sc[is + 2] * q2;
				y[l + 64] = d * sc[is + 4] * q3;
				y[l + 96] = d * sc[is + 6] * q4;
			}
		}
	}
}

/* IQ4_NL: one group of 32 non-linear levels times d, nibbles as Q4_0's. */
static void dq_iq4_nl(const block_iq4_nl *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		const float d = pg_f16_to_f32(x[i].d);
		for (int j = 0; j < 16; j++) {
			y[j] = d * pg_iq4nl_values[x[i].qs[j] & 0xF];
			y[j + 16] = d * pg_iq4nl_values[x[i].qs[j] >> 4];
		}
	}
}

/* IQ4_XS: eight groups of 32, each a 6-bit scale biased by 32 (low nibble
 * in scales_l, two groups a byte; top bit pair in scales_h) times
 * non-linear levels. Within a group, qs byte j holds element j in its low
 * nibble and element j + 16 in its high one. */
static void dq_iq4_xs(const block_iq4_xs *x, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(x[i].d);
		const uint8_t *q = x[i].qs;
		for (int ib = 0; ib < QK_K / 32; ib++, q += 16, y += 32) {
			const float dl = d * pg_iq4_xs_scale(&x[i], ib);
			for (int j = 0; j < 16; j++) {
				y[j] = dl * pg_iq4nl_values[q[j] & 0xF];
				y[j + 16] = dl * pg_iq4nl_values[q[j] >> 4];
			}
		}
	}
}

void pg_dequant_row(uint32_t type, const void *src, float *dst, int64_t k)
{
	const struct pg_type_info *ti = pg_type_info(type);
	if (!ti || k < 0 || k % ti->blck)
		return;
	const int64_t nb = k / ti->blck;
	switch (type) {
	case PG_TYPE_F32: memcpy(dst, src, (size_t)k * 4); break;
	case PG_TYPE_F16: pg_f16_to_f32_row(src, dst, k); break;
	case PG_TYPE_BF16:
		for (int64_t i = 0; i < k; i++)
			dst[i] = pg_bf16_to_f32(((const pg_bf16 *)src)[i]);
		break;
	case PG_TYPE_Q4_0: dq_q4_0(src, dst, nb); break;
	case PG_TYPE_Q4_1: dq_q4_1(src, dst, nb); break;
	case PG_TYPE_Q5_0: dq_q5_0(src, dst, nb); break;
	case PG_TYPE_Q5_1: dq_q5_1(src, dst, nb); break;
	case PG_TYPE_Q8_0: dq_q8_0(src, dst, nb); break;
	case PG_TYPE_Q8_1: dq_q8_1(src, dst, nb); break;
	case PG_TYPE_Q8_K: dq_q8_K(src, dst, nb); break;
	case PG_TYPE_Q2_K: dq_q2_K(src, dst, nb); break;
	case PG_TYPE_Q3_K: dq_q3_K(src, dst, nb); break;
	case PG_TYPE_Q4_K: dq_q4_K(src, dst, nb); break;
	case PG_TYPE_Q5_K: dq_q5_K(src, dst, nb); break;
	case PG_TYPE_Q6_K: dq_q6_K(src, dst, nb); break;
	case PG_TYPE_IQ4_NL: dq_iq4_nl(src, dst, nb); break;
	case PG_TYPE_IQ4_XS: dq_iq4_xs(src, dst, nb); break;
	default: break;
	}
}
