/* kernels/cpu/quant_ref.c — ggml's reference quantizers and dequantizers.
 *
 * These write model files (pagoda-mkmodel) and are the ground truth of the
 * tests, so every rounding step mirrors ggml-quants.c: a file quantized
 * here is the file llama-quantize would write from the same floats.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define GROUP_MAX_EPS 1e-15f
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static void quant_q4_0(const float *x, block_q4_0 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK4_0) {
		float amax = 0, max = 0;
		for (int j = 0; j < QK4_0; j++)
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		const float d = max / -8;
		const float id = d ? 1.0f / d : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			const uint8_t a = MIN(15, (int8_t)(x[j] * id + 8.5f));
			const uint8_t b = MIN(15, (int8_t)(x[j + QK4_0 / 2] * id + 8.5f));
			y[i].qs[j] = a | (uint8_t)(b << 4);
		}
	}
}

static void quant_q4_1(const float *x, block_q4_1 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK4_1) {
		float min = FLT_MAX, max = -FLT_MAX;
		for (int j = 0; j < QK4_1; j++) {
			if (x[j] < min)
				min = x[j];
			if (x[j] > max)
				max = x[j];
		}
		const float d = (max - min) / 15;
		const float id = d ? 1.0f / d : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		y[i].m = pg_f32_to_f16(min);
		for (int j = 0; j < QK4_1 / 2; j++) {
			const uint8_t a = MIN(15, (int8_t)((x[j] - min) * id + 0.5f));
			const uint8_t b = MIN(15, (int8_t)((x[j + QK4_1 / 2] - min) * id + 0.5f));
			y[i].qs[j] = a | (uint8_t)(b << 4);
		}
	}
}

static void quant_q5_0(const float *x, block_q5_0 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK5_0) {
		float amax = 0, max = 0;
		for (int j = 0; j < QK5_0; j++)
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		const float d = max / -16;
		const float id = d ? 1.0f / d : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		uint32_t qh = 0;
		for (int j = 0; j < QK5_0 / 2; j++) {
			const uint8_t a = MIN(31, (int8_t)(x[j] * id + 16.5f));
			const uint8_t b = MIN(31, (int8_t)(x[j + QK5_0 / 2] * id + 16.5f));
			y[i].qs[j] = (a & 0x0F) | (uint8_t)((b & 0x0F) << 4);
			qh |= ((a & 0x10u) >> 4) << j;
			qh |= ((b & 0x10u) >> 4) << (j + QK5_0 / 2);
		}
		memcpy(y[i].qh, &qh, 4);
	}
}

static void quant_q5_1(const float *x, block_q5_1 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK5_1) {
		float min = FLT_MAX, max = -FLT_MAX;
		for (int j = 0; j < QK5_1; j++) {
			if (x[j] < min)
				min = x[j];
			if (x[j] > max)
				max = x[j];
		}
		const float d = (max - min) / 31;
		const float id = d ? 1.0f / d : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		y[i].m = pg_f32_to_f16(min);
		uint32_t qh = 0;
		for (int j = 0; j < QK5_1 / 2; j++) {
			const uint8_t a = (uint8_t)((x[j] - min) * id + 0.5f);
			const uint8_t b = (uint8_t)((x[j + QK5_1 / 2] - min) * id + 0.5f);
			y[i].qs[j] = (a & 0x0F) | (uint8_t)((b & 0x0F) << 4);
			qh |= ((a & 0x10u) >> 4) << j;
			qh |= ((b & 0x10u) >> 4) << (j + QK5_1 / 2);
		}
		memcpy(y[i].qh, &qh, 4);
	}
}

static void quant_q8_0(const float *x, block_q8_0 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK8_0) {
		float amax = 0;
		for (int j = 0; j < QK8_0; j++)
			amax = MAX(amax, fabsf(x[j]));
		const float d = amax / 127;
		const float id = d ? 1.0f / d : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		for (int j = 0; j < QK8_0; j++)
			y[i].qs[j] = (int8_t)roundf(x[j] * id);
	}
}

static void quant_q8_1(const float *x, block_q8_1 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK8_1) {
		float amax = 0;
		for (int j = 0; j < QK8_1; j++)
			amax = MAX(amax, fabsf(x[j]));
		const float d = amax / 127;
		const float id = d ? 1.0f / d : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		int sum = 0;
		for (int j = 0; j < QK8_1; j++) {
			y[i].qs[j] = (int8_t)roundf(x[j] * id);
			sum += y[i].qs[j];
		}
		y[i].s = pg_f32_to_f16((float)sum * d);
	}
}

/* make_qkx2_quants: scale and min of a group of n by a small search that
 * minimises the weighted squared error, or with use_mad the weighted
 * absolute one (Q2_K: four levels leave errors too large to square). */
static float make_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
		       uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
	float min = x[0], max = x[0];
	float sum_w = w[0], sum_x = sum_w * x[0];
	for (int i = 1; i < n; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t)n);
		*the_min = -min;
		return 0.f;
	}
	float iscale = nmax / (max - min);
	float scale = 1 / iscale;
	float best_error = 0;
	for (int i = 0; i < n; i++) {
		int l = pg_nearest_int(iscale * (x[i] - min));
		L[i] = (uint8_t)MAX(0, MIN(nmax, l));
		float diff = scale * L[i] + min - x[i];
		diff = use_mad ? fabsf(diff) : diff * diff;
		best_error += w[i] * diff;
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * is + nmax) / (max - min);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = pg_nearest_int(iscale * (x[i] - min));
			l = MAX(0, MIN(nmax, l));
			Laux[i] = (uint8_t)l;
			sum_l += w[i] * l;
			sum_l2 += w[i] * l * l;
			sum_xl += w[i] * l * x[i];
		}
		float D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			if (this_min > 0) {
				this_min = 0;
				this_scale = sum_xl / sum_l2;
			}
			float cur_error = 0;
			for (int i = 0; i < n; i++) {
				float diff = this_scale * Laux[i] + this_min - x[i];
				diff = use_mad ? fabsf(diff) : diff * diff;
				cur_error += w[i] * diff;
			}
			if (cur_error < best_error) {
				memcpy(L, Laux, (size_t)n);
				best_error = cur_error;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*the_min = -min;
	return scale;
}

/* make_qx_quants with rmse_type 1 and no importance weights (Q6_K). */
static float make_qx(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	float iscale = -nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = pg_nearest_int(iscale * x[i]);
		l = MAX(-nmax, MIN(nmax - 1, l));
		L[i] = (int8_t)(l + nmax);
		float w = x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	float scale = suml2 ? sumlx / suml2 : 0.0f;
	float best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = pg_nearest_int(iscale * x[i]);
			l = MAX(-nmax, MIN(nmax - 1, l));
			float w = x[i] * x[i];
			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++) {
				int l = pg_nearest_int(iscale * x[i]);
				L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
			}
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* make_q3_quants with do_rmse: levels -nmax..nmax-1 (stored biased by
 * nmax) against a signed scale, refined a level at a time while that
 * raises sumlx^2 / suml2, the weighted fit (weights x^2). */
static float make_q3(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	const float iscale = -nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = pg_nearest_int(iscale * x[i]);
		l = MAX(-nmax, MIN(nmax - 1, l));
		L[i] = (int8_t)l;
		float w = x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	for (int itry = 0; itry < 5; itry++) {
		int n_changed = 0;
		for (int i = 0; i < n; i++) {
			float w = x[i] * x[i];
			float slx = sumlx - w * x[i] * L[i];
			if (slx <= 0)
				continue;
			float sl2 = suml2 - w * L[i] * L[i];
			int new_l = pg_nearest_int(x[i] * sl2 / slx);
			new_l = MAX(-nmax, MIN(nmax - 1, new_l));
			if (new_l == L[i])
				continue;
			slx += w * x[i] * new_l;
			sl2 += w * new_l * new_l;
			if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
				L[i] = (int8_t)new_l;
				sumlx = slx;
				suml2 = sl2;
				n_changed++;
			}
		}
		if (!n_changed)
			break;
	}
	for (int i = 0; i < n; i++)
		L[i] = (int8_t)(L[i] + nmax);
	return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q4_K and Q5_K share everything but the number of levels and the search. */
static void quant_k_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *L, uint8_t *scales_out,
			   pg_f16 *d_out, pg_f16 *dmin_out)
{
	uint8_t Laux[32];
	float weights[32], mins[QK_K / 32], scales[QK_K / 32];
	float max_scale = 0, max_min = 0;
	for (int j = 0; j < QK_K / 32; j++) {
		float sum_x2 = 0;
		for (int l = 0; l < 32; l++)
			sum_x2 += x[32 * j + l] * x[32 * j + l];
		float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++)
			weights[l] = av_x + fabsf(x[32 * j + l]);
		scales[j] = make_qkx2(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep,
				      false);
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	memset(scales_out, 0, K_SCALE_SIZE);
	for (int j = 0; j < QK_K / 32; j++) {
		uint8_t ls = (uint8_t)pg_nearest_int(inv_scale * scales[j]);
		uint8_t lm = (uint8_t)pg_nearest_int(inv_min * mins[j]);
		ls = MIN(63, ls);
		lm = MIN(63, lm);
		if (j < 4) {
			scales_out[j] = ls;
			scales_out[j + 4] = lm;
		} else {
			scales_out[j + 4] = (ls & 0xF) | (uint8_t)((lm & 0xF) << 4);
			scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
			scales_out[j - 0] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	*d_out = pg_f32_to_f16(max_scale / 63.f);
	*dmin_out = pg_f32_to_f16(max_min / 63.f);
	for (int j = 0; j < QK_K / 32; j++) {
		uint8_t sc, m;
		pg_scale_min_k4(j, scales_out, &sc, &m);
		const float d = pg_f16_to_f32(*d_out) * sc;
		if (!d)
			continue;
		const float dm = pg_f16_to_f32(*dmin_out) * m;
		for (int ii = 0; ii < 32; ii++) {
			int l = pg_nearest_int((x[32 * j + ii] + dm) / d);
			L[32 * j + ii] = (uint8_t)MAX(0, MIN(nmax, l));
		}
	}
}

/* Q2_K and Q3_K pack four 2-bit quants a byte: within each 128 elements,
 * qs[l] holds l, l+32, l+64 and l+96 from the low bits up. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
	for (int j = 0; j < QK_K; j += 128, qs += 32)
		for (int l = 0; l < 32; l++)
			qs[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
					  (L[j + l + 96] << 6));
}

static void quant_q2_K(const float *x, block_q2_K *y, int64_t nb)
{
	const float q4scale = 15.f;
	uint8_t L[QK_K], Laux[16];
	float weights[16], mins[QK_K / 16], scales[QK_K / 16];
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		/* the min is taken off, so scales are never negative */
		float max_scale = 0, max_min = 0;
		for (int j = 0; j < QK_K / 16; j++) {
			for (int l = 0; l < 16; l++)
				weights[l] = fabsf(x[16 * j + l]);
			scales[j] = make_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15,
					      true);
			if (scales[j] > max_scale)
				max_scale = scales[j];
			if (mins[j] > max_min)
				max_min = mins[j];
		}
		if (max_scale > 0) {
			const float iscale = q4scale / max_scale;
			for (int j = 0; j < QK_K / 16; j++)
				y[i].scales[j] = (uint8_t)pg_nearest_int(iscale * scales[j]);
			y[i].d = pg_f32_to_f16(max_scale / q4scale);
		} else {
			memset(y[i].scales, 0, sizeof(y[i].scales));
			y[i].d = pg_f32_to_f16(0.f);
		}
		if (max_min > 0) {
			const float iscale = q4scale / max_min;
			for (int j = 0; j < QK_K / 16; j++)
				y[i].scales[j] |= (uint8_t)(pg_nearest_int(iscale * mins[j]) << 4);
			y[i].dmin = pg_f32_to_f16(max_min / q4scale);
		} else {
			y[i].dmin = pg_f32_to_f16(0.f);
		}
		/* requantize against the scales as stored, 4 bits and f16 */
		for (int j = 0; j < QK_K / 16; j++) {
			const float d = pg_f16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
			if (!d)
				continue;
			const float dm = pg_f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
			for (int ii = 0; ii < 16; ii++) {
				int l = pg_nearest_int((x[16 * j + ii] + dm) / d);
				L[16 * j + ii] = (uint8_t)MAX(0, MIN(3, l));
			}
		}
		pack_2bit(L, y[i].qs);
	}
}

static void quant_q3_K(const float *x, block_q3_K *y, int64_t nb)
{
	int8_t L[QK_K];
	float scales[QK_K / 16];
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		float max_scale = 0, amax = 0;
		for (int j = 0; j < QK_K / 16; j++) {
			scales[j] = make_q3(16, 4, x + 16 * j, L + 16 * j);
			if (fabsf(scales[j]) > amax) {
				amax = fabsf(scales[j]);
				max_scale = scales[j];
			}
		}
		/* 6-bit scales, biased by 32: low nibbles in bytes 0-7 (j and
		 * j+8 share a byte), top bit pairs in bytes 8-11 */
		memset(y[i].scales, 0, sizeof(y[i].scales));
		if (max_scale) {
			const float iscale = -32.f / max_scale;
			for (int j = 0; j < QK_K / 16; j++) {
				int l = pg_nearest_int(iscale * scales[j]);
				l = MAX(-32, MIN(31, l)) + 32;
				if (j < 8)
					y[i].scales[j] = (uint8_t)(l & 0xF);
				else
					y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
				y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
			}
			y[i].d = pg_f32_to_f16(1 / iscale);
		} else {
			y[i].d = pg_f32_to_f16(0.f);
		}
		/* requantize against the scales as stored, 6 bits and f16 */
		int8_t sc[QK_K / 16];
		pg_q3_K_scales(y[i].scales, sc);
		for (int j = 0; j < QK_K / 16; j++) {
			const float d = pg_f16_to_f32(y[i].d) * sc[j];
			if (!d)
				continue;
			for (int ii = 0; ii < 16; ii++) {
				int l = pg_nearest_int(x[16 * j + ii] / d);
				L[16 * j + ii] = (int8_t)(MAX(-4, MIN(3, l)) + 4);
			}
		}
		/* the third bit: element 32b + l is bit b of hmask[l] */
		memset(y[i].hmask, 0, sizeof(y[i].hmask));
		for (int j = 0; j < QK_K; j++)
			if (L[j] > 3) {
				y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
				L[j] -= 4;
			}
		pack_2bit((const uint8_t *)L, y[i].qs);
	}
}

static void quant_q4_K(const float *x, block_q4_K *y, int64_t nb)
{
	uint8_t L[QK_K];
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		quant_k_scales(x, 15, -1.f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
		uint8_t *q = y[i].qs;
		for (int j = 0; j < QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; l++)
				q[l] = L[j + l] | (uint8_t)(L[j + l + 32] << 4);
	}
}

static void quant_q5_K(const float *x, block_q5_K *y, int64_t nb)
{
	uint8_t L[QK_K];
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		quant_k_scales(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
		uint8_t *qh = y[i].qh, *ql = y[i].qs;
		memset(qh, 0, QK_K / 8);
		uint8_t m1 = 1, m2 = 2;
		for (int n = 0; n < QK_K; n += 64, ql += 32) {
			for (int j = 0; j < 32; j++) {
				int l1 = L[n + j], l2 = L[n + j + 32];
				if (l1 > 15) {
					l1 -= 16;
					qh[j] |= m1;
				}
				if (l2 > 15) {
					l2 -= 16;
					qh[j] |= m2;
				}
				ql[j] = (uint8_t)(l1 | (l2 << 4));
			}
			m1 <<= 2;
			m2 <<= 2;
		}
	}
}

static void quant_q6_K(const float *x, block_q6_K *y, int64_t nb)
{
	int8_t L[QK_K];
	float scales[QK_K / 16];
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		float max_scale = 0, max_abs_scale = 0;
		for (int ib = 0; ib < QK_K / 16; ib++) {
			scales[ib] = make_qx(16, 32, x + 16 * ib, L + 16 * ib);
			if (fabsf(scales[ib]) > max_abs_scale) {
				max_abs_scale = fabsf(scales[ib]);
				max_scale = scales[ib];
			}
		}
		if (max_abs_scale < GROUP_MAX_EPS) {
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}
		float iscale = -128.f / max_scale;
		y[i].d = pg_f32_to_f16(1 / iscale);
		for (int ib = 0; ib < QK_K / 16; ib++)
			y[i].scales[ib] = (int8_t)MIN(127, pg_nearest_int(iscale * scales[ib]));
		for (int j = 0; j < QK_K / 16; j++) {
			float d = pg_f16_to_f32(y[i].d) * y[i].scales[j];
			if (!d)
				continue;
			for (int ii = 0; ii < 16; ii++) {
				int l = pg_nearest_int(x[16 * j + ii] / d);
				L[16 * j + ii] = (int8_t)(MAX(-32, MIN(31, l)) + 32);
			}
		}
		uint8_t *ql = y[i].ql, *qh = y[i].qh;
		for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
			for (int l = 0; l < 32; l++) {
				const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
				const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
				ql[l + 0] = q1 | (uint8_t)(q3 << 4);
				ql[l + 32] = q2 | (uint8_t)(q4 << 4);
				qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
						  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
			}
		}
	}
}

/* The index of the level in the sorted table val[0..n) nearest x, ties to
 * the lower one (ggml's best_index_int8). */
static int best_index_int8(int n, const int8_t *val, float x)
{
	if (x <= val[0])
		return 0;
	if (x >= val[n - 1])
		return n - 1;
	int ml = 0, mu = n - 1;
	while (mu - ml > 1) {
		int mav = (ml + mu) / 2;
		if (x < val[mav])
			mu = mav;
		else
			ml = mav;
	}
	return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* quantize_row_iq4_nl_impl's fit of one group of 32 with no importance
 * weights (weights x^2) and ntry 7, as quantize_iq4_nl and quantize_iq4_xs
 * call it: a weighted least-squares scale tried from 15 starting points
 * around the one that puts the group's extreme on the outermost level.
 * Returns the scale (0 for a group of zeros); L gets the levels of the
 * first fit, which the callers redo against the scale they store. */
static float iq4_group_fit(const float *xb, uint8_t *L)
{
	const int8_t *values = pg_iq4nl_values;
	const int ntry = 7;
	float weight[32], amax = 0, max = 0;
	for (int j = 0; j < 32; j++) {
		weight[j] = xb[j] * xb[j];
		if (fabsf(xb[j]) > amax) {
			amax = fabsf(xb[j]);
			max = xb[j];
		}
	}
	if (amax < GROUP_MAX_EPS)
		return 0;
	float d = -max / values[0];
	float id = 1 / d;
	float sumqx = 0, sumq2 = 0;
	for (int j = 0; j < 32; j++) {
		int l = best_index_int8(16, values, id * xb[j]);
		L[j] = (uint8_t)l;
		float q = values[l], w = weight[j];
		sumqx += w * q * xb[j];
		sumq2 += w * q * q;
	}
	d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
	float best = d * sumqx;
	for (int itry = -ntry; itry <= ntry; itry++) {
		id = (itry + values[0]) / max;
		sumqx = sumq2 = 0;
		for (int j = 0; j < 32; j++) {
			int l = best_index_int8(16, values, id * xb[j]);
			float q = values[l], w = weight[j];
			sumqx += w * q * xb[j];
			sumq2 += w * q * q;
		}
		if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
			d = sumqx / sumq2;
			best = d * sumqx;
		}
	}
	return d;
}

/* Two levels a byte: element j low, element j + 16 high. */
static void iq4_pack(const uint8_t *L, uint8_t *qs)
{
	for (int j = 0; j < 16; j++)
		qs[j] = L[j] | (uint8_t)(L[16 + j] << 4);
}

/* quantize_iq4_nl: the group's fitted scale stored as is, the levels redone
 * against it (unrounded). */
static void quant_iq4_nl(const float *x, block_iq4_nl *y, int64_t nb)
{
	uint8_t L[32];
	for (int64_t i = 0; i < nb; i++, x += 32) {
		const float d = iq4_group_fit(x, L);
		const float id = d ? 1 / d : 0.f;
		y[i].d = pg_f32_to_f16(d);
		for (int j = 0; j < 32; j++)
			L[j] = (uint8_t)best_index_int8(16, pg_iq4nl_values, id * x[j]);
		iq4_pack(L, y[i].qs);
	}
}

void pg_iq4_nl_row_ref(const float *x, void *vy, int64_t k)
{
	block_iq4_nl *y = vy;
	uint8_t L[32];
	for (int64_t i = 0; i < k / 32; i++, x += 32) {
		float amax = 0, max = 0;
		for (int j = 0; j < 32; j++)
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		if (amax < GROUP_MAX_EPS) {
			y[i].d = pg_f32_to_f16(0.f);
			memset(y[i].qs, 0, sizeof y[i].qs);
			continue;
		}
		/* ntry -1: the start scale's sign is the other way round, and
		 * the levels of the first fit are kept */
		const float id = 1 / (max / pg_iq4nl_values[0]);
		float sumqx = 0, sumq2 = 0;
		for (int j = 0; j < 32; j++) {
			const int l = best_index_int8(16, pg_iq4nl_values, id * x[j]);
			L[j] = (uint8_t)l;
			const float q = pg_iq4nl_values[l], w = x[j] * x[j];
			sumqx += w * q * x[j];
			sumq2 += w * q * q;
		}
		y[i].d = pg_f32_to_f16(sumq2 > 0 ? sumqx / sumq2 : 0.f);
		iq4_pack(L, y[i].qs);
	}
}

/* quantize_iq4_xs: the eight group scales rounded to 6 bits of the
 * super-block's d, and the levels redone against the rounded scales. */
static void quant_iq4_xs(const float *x, block_iq4_xs *y, int64_t nb)
{
	uint8_t L[QK_K];
	float scales[QK_K / 32];
	for (int64_t i = 0; i < nb; i++, x += QK_K) {
		float max_scale = 0, amax_scale = 0;
		for (int ib = 0; ib < QK_K / 32; ib++) {
			scales[ib] = iq4_group_fit(x + 32 * ib, L + 32 * ib);
			if (fabsf(scales[ib]) > amax_scale) {
				amax_scale = fabsf(scales[ib]);
				max_scale = scales[ib];
			}
		}
		/* -0.0 for an all-zero block, as ggml writes it */
		const float d = -max_scale / 32;
		const float id = d ? 1 / d : 0.f;
		y[i].d = pg_f32_to_f16(d);
		y[i].scales_h = 0;
		memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
		for (int ib = 0; ib < QK_K / 32; ib++) {
			int l = pg_nearest_int(id * scales[ib]);
			l = MAX(-32, MIN(31, l));
			const float dl = d * l;
			const float idl = dl ? 1 / dl : 0.f;
			for (int j = 0; j < 32; j++)
				L[32 * ib + j] = (uint8_t)best_index_int8(16, pg_iq4nl_values, idl * x[32 * ib + j]);
			l += 32;
			y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4 * (ib % 2));
			y[i].scales_h |= (uint16_t)((l >> 4) << 2 * ib);
		}
		for (int ib = 0; ib < QK_K / 32; ib++)
			iq4_pack(L + 32 * ib, y[i].qs + 16 * ib);
	}
}

/* quantize_row_q8_K_ref; also the activation conversion for the K-quants
 * on every ISA, as ggml on x86 uses the reference one. */
void pg_q8_K_from_float(const float *x, void *vy, int64_t k)
{
	block_q8_K *y = vy;
	for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
		float max = 0, amax = 0;
		for (int j = 0; j < QK_K; j++)
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		if (!amax) {
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}
		const float iscale = -127.f / max;
		for (int j = 0; j < QK_K; j++)
			y[i].qs[j] = (int8_t)MIN(127, pg_nearest_int(iscale * x[j]));
		for (int j = 0; j < QK_K / 16; j++) {
			int sum = 0;
			for (int ii = 0; ii < 16; ii++)
				sum += y[i].qs[j * 16 + ii];
			y[i].bsums[j] = (int16_t)sum;
		}
		y[i].d = 1 / iscale;
	}
}

size_t pg_quantize_row(uint32_t type, const float *src, void *dst, int64_t k)
{
	size_t rs = k >= 0 ? pg_row_size(type, (uint64_t)k) : 0;
	if (!rs)
		return 0;
	const int64_t nb = k / pg_type_info(type)->blck;
	switch (type) {
	case PG_TYPE_F32: memcpy(dst, src, rs); break;
	case PG_TYPE_F16: pg_f16_from_float_scalar(src, dst, k); break;
	case PG_TYPE_BF16: pg_bf16_from_float(src, dst, k); break;
	case PG_TYPE_Q4_0: quant_q4_0(src, dst, nb); break;
	case PG_TYPE_Q4_1: quant_q4_1(src, dst, nb); break;
	case PG_TYPE_Q5_0: quant_q5_0(src, dst, nb); break;
	case PG_TYPE_Q5_1: quant_q5_1(src, dst, nb); break;
	case PG_TYPE_Q8_0: quant_q8_0(src, dst, nb); break;
	case PG_TYPE_Q8_1: quant_q8_1(src, dst, nb); break;
	case PG_TYPE_Q8_K: pg_q8_K_from_float(src, dst, k); break;
	case PG_TYPE_Q2_K: quant_q2_K(src, dst, nb); break;
	case PG_TYPE_Q3_K: quant_q3_K(src, dst, nb); break;
	case PG_TYPE_Q4_K: quant_q4_K(src, dst, nb); break;
	case PG_TYPE_Q5_K: quant_q5_K(src, dst, nb); break;
	case PG_TYPE_Q6_K: quant_q6_K(src, dst, nb); break;
	case PG_TYPE_IQ4_NL: quant_iq4_nl(src, dst, nb); break;
	case PG_TYPE_IQ4_XS: quant_iq4_xs(src, dst, nb); break;
	default: return 0;
	}
	return rs;
}
