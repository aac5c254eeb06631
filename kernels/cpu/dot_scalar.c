/* kernels/cpu/dot_scalar.c — the scalar reference: activation conversion,
 * one dot product per weight type, elementwise ops; and the table that
 * serves them on CPUs without AVX2.
 *
 * The Q8_0/Q8_1 activation quantizers follow ggml's x86 SIMD ones (scale
 * 127/amax, round half to even), not quantize_row_q8_0_ref (1/d,
 * roundf): llama.cpp on x86 runs the SIMD ones, and rounding of
 * activations is a precision-loss point we must share.
 */
#pragma GCC optimize("fp-contract=off") /* the FMAs are the fmaf calls written */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

void pg_q8_0_from_float(const float *x, void *vy, int64_t k)
{
	block_q8_0 *y = vy;
	for (int64_t i = 0; i < k / QK8_0; i++, x += QK8_0) {
		float amax = 0;
		for (int j = 0; j < QK8_0; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		const float d = amax / 127.f;
		const float id = amax != 0.0f ? 127.f / amax : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		for (int j = 0; j < QK8_0; j++)
			y[i].qs[j] = (int8_t)pg_nearest_int(x[j] * id);
	}
}

void pg_q8_1_from_float(const float *x, void *vy, int64_t k)
{
	block_q8_1 *y = vy;
	for (int64_t i = 0; i < k / QK8_1; i++, x += QK8_1) {
		float amax = 0;
		for (int j = 0; j < QK8_1; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		const float d = amax / 127.f;
		const float id = amax != 0.0f ? 127.f / amax : 0.0f;
		y[i].d = pg_f32_to_f16(d);
		int sum = 0;
		for (int j = 0; j < QK8_1; j++) {
			y[i].qs[j] = (int8_t)pg_nearest_int(x[j] * id);
			sum += y[i].qs[j];
		}
		y[i].s = pg_f32_to_f16(d * (float)sum);
	}
}

void pg_bf16_from_float(const float *x, void *vy, int64_t k)
{
	pg_bf16 *y = vy;
	for (int64_t i = 0; i < k; i++)
		y[i] = pg_f32_to_bf16(x[i]);
}

void pg_f16_from_float_scalar(const float *x, void *vy, int64_t k)
{
	pg_f16 *y = vy;
	for (int64_t i = 0; i < k; i++)
		y[i] = pg_f32_to_f16(x[i]);
}

static void f32_from_float(const float *x, void *y, int64_t k)
{
	memcpy(y, x, (size_t)k * sizeof(float));
}

/* ---- one row · one row ----------------------------------------------------- */

static float dot_f32(int64_t k, const void *vw, const void *vx)
{
	const float *w = vw, *x = vx;
	double s = 0;
	for (int64_t i = 0; i < k; i++)
		s += (double)(w[i] * x[i]);
	return (float)s;
}

static float dot_f16(int64_t k, const void *vw, const void *vx)
{
	const pg_f16 *w = vw, *x = vx;
	double s = 0;
	for (int64_t i = 0; i < k; i++)
		s += (double)(pg_f16_to_f32(w[i]) * pg_f16_to_f32(x[i]));
	return (float)s;
}

static float dot_bf16(int64_t k, const void *vw, const void *vx)
{
	const pg_bf16 *w = vw, *x = vx;
	double s = 0;
	for (int64_t i = 0; i < k; i++)
		s += (double)(pg_bf16_to_f32(w[i]) * pg_bf16_to_f32(x[i]));
	return (float)s;
}

/* The sum of ggml's x86 SIMD kernels: 8 lanes of float, lane l taking
 * the integer sum of elements 4l..4l+3 of each block, reduced as
 * hsum_float_8. */
static float hsum8(const float *a)
{
	float t[4];
	for (int l = 0; l < 4; l++)
		t[l] = a[l + 4] + a[l];
	return (t[0] + t[2]) + (t[1] + t[3]);
}

/* ggml_vec_dot_q4_0_q8_0 (AVX2): acc[l] = fma(dw*dy, lane sum, acc[l]). */
static float dot_q4_0(int64_t k, const void *vw, const void *vx)
{
	const block_q4_0 *w = vw;
	const block_q8_0 *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK4_0; i++) {
		const float d = pg_f16_to_f32(w[i].d) * pg_f16_to_f32(x[i].d);
		for (int l = 0; l < 8; l++) {
			int sumi = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++) {
				const int q = e < 16 ? (w[i].qs[e] & 0xF) : (w[i].qs[e - 16] >> 4);
				sumi += (q - 8) * x[i].qs[e];
			}
			acc[l] = fmaf(d, (float)sumi, acc[l]);
		}
	}
	return hsum8(acc);
}

/* Q4_1/Q5_1: ggml_vec_dot_q4_1_q8_1 / q5_1 (AVX2): the scaled lane sums
 * of unsigned levels in 8 lanes, and m·s added block by block to a float
 * of its own (not fused), both joined at the end. */
static int q5_high(const uint8_t *qh4, int e)
{
	uint32_t qh;
	memcpy(&qh, qh4, 4);
	return ((qh >> e) & 1) << 4;
}

static int q4_level(const uint8_t *qs, int e)
{
	return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4;
}

static float dot_qx_1(int64_t k, const void *vw, const void *vx, bool five)
{
	const block_q8_1 *x = vx;
	float acc[8] = { 0 }, macc = 0;
	for (int64_t i = 0; i < k / 32; i++) {
		const block_q4_1 *w4 = (const block_q4_1 *)vw + i;
		const block_q5_1 *w5 = (const block_q5_1 *)vw + i;
		const float d = pg_f16_to_f32(five ? w5->d : w4->d) * pg_f16_to_f32(x[i].d);
		for (int l = 0; l < 8; l++) {
			int sumi = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++) {
				const int q = five ? q4_level(w5->qs, e) | q5_high(w5->qh, e) : q4_level(w4->qs, e);
				sumi += q * x[i].qs[e];
			}
			acc[l] = fmaf(d, (float)sumi, acc[l]);
		}
		macc += pg_f16_to_f32(five ? w5->m : w4->m) * pg_f16_to_f32(x[i].s);
	}
	return hsum8(acc) + macc;
}

static float dot_q4_1(int64_t k, const void *vw, const void *vx)
{
	return dot_qx_1(k, vw, vx, false);
}

/* Q5_0 and Q8_0: as Q4_0, ggml_vec_dot_q5_0_q8_0 / q8_0_q8_0 (AVX2). */
static float dot_q5_0(int64_t k, const void *vw, const void *vx)
{
	const block_q5_0 *w = vw;
	const block_q8_0 *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK5_0; i++) {
		const float d = pg_f16_to_f32(w[i].d) * pg_f16_to_f32(x[i].d);
		for (int l = 0; l < 8; l++) {
			int sumi = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++)
				sumi += ((q4_level(w[i].qs, e) | q5_high(w[i].qh, e)) - 16) * x[i].qs[e];
			acc[l] = fmaf(d, (float)sumi, acc[l]);
		}
	}
	return hsum8(acc);
}

static float dot_q5_1(int64_t k, const void *vw, const void *vx)
{
	return dot_qx_1(k, vw, vx, true);
}

static float dot_q8_0(int64_t k, const void *vw, const void *vx)
{
	const block_q8_0 *w = vw;
	const block_q8_0 *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK8_0; i++) {
		const float d = pg_f16_to_f32(w[i].d) * pg_f16_to_f32(x[i].d);
		for (int l = 0; l < 8; l++) {
			int sumi = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++)
				sumi += w[i].qs[e] * x[i].qs[e];
			acc[l] = fmaf(d, (float)sumi, acc[l]);
		}
	}
	return hsum8(acc);
}

/* Q4_K/Q5_K: 8 groups of 32 with a 6-bit scale and min each; the mins
 * meet the activations through Q8_K's per-16 sums (bsums).
 * Q4_K: ggml_vec_dot_q4_K_q8_K (AVX2): 8 lanes for the scaled sums (lane l:
 * bytes 4l..4l+3 of each 32-byte group, both nibbles), 4 for the mins (lane
 * l: sub-blocks 2l and 2l+1), each with FMA, then hsum_float_8 + hsum4. */
static float dot_q4_K(int64_t k, const void *vw, const void *vx)
{
	const block_q4_K *w = vw;
	const block_q8_K *x = vx;
	float acc[8] = { 0 }, accm[4] = { 0 };
	for (int64_t i = 0; i < k / QK_K; i++) {
		uint8_t sc[8], mn[8];
		for (int j = 0; j < 8; j++)
			pg_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
		const float d = x[i].d * pg_f16_to_f32(w[i].d);
		const float dmin = -x[i].d * pg_f16_to_f32(w[i].dmin);
		const int16_t *bs = x[i].bsums;
		for (int l = 0; l < 4; l++)
			accm[l] = fmaf(dmin, (float)(mn[2 * l] * (bs[4 * l] + bs[4 * l + 1]) +
						     mn[2 * l + 1] * (bs[4 * l + 2] + bs[4 * l + 3])),
				       accm[l]);
		for (int l = 0; l < 8; l++) {
			int isum = 0;
			for (int g = 0; g < 4; g++) {
				const uint8_t *q = w[i].qs + 32 * g + 4 * l;
				const int8_t *y = x[i].qs + 64 * g + 4 * l;
				int s0 = 0, s1 = 0;
				for (int e = 0; e < 4; e++) {
					s0 += (q[e] & 0xF) * y[e];
					s1 += (q[e] >> 4) * y[e + 32];
				}
				isum += sc[2 * g] * s0 + sc[2 * g + 1] * s1;
			}
			acc[l] = fmaf(d, (float)isum, acc[l]);
		}
	}
	return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

/* Q2_K/Q3_K: 16 groups of 16, each with a 4-bit scale and a 4-bit min
 * (Q2_K) or a signed 6-bit scale (Q3_K). ggml_vec_dot_q2_K_q8_K and
 * ggml_vec_dot_q3_K_q8_K (AVX2, which AVX-512 builds run too): 8 lanes,
 * lane l = bytes 4l..4l+3 of each 32-byte run of quants (both halves of
 * the block, all four 2-bit planes), scaled by the run's group 2s (lanes
 * 0-3) or 2s+1 (lanes 4-7); one FMA per block and lane, then hsum_float_8.
 * Q2_K first adds the mins in the same lanes, lane l = mins 2l and 2l+1
 * against bsums 2l and 2l+1, with dmin = -y.d * x.dmin. */
static int q2_K_lane(const block_q2_K *w, const block_q8_K *x, int l)
{
	int isum = 0;
	for (int j = 0; j < 2; j++)
		for (int p = 0; p < 4; p++) {
			const uint8_t *q = w->qs + 32 * j + 4 * l;
			const int8_t *y = x->qs + 128 * j + 32 * p + 4 * l;
			int s4 = 0;
			for (int e = 0; e < 4; e++)
				s4 += ((q[e] >> (2 * p)) & 3) * y[e];
			isum += (w->scales[8 * j + 2 * p + (l >= 4)] & 0xF) * s4;
		}
	return isum;
}

static float dot_q2_K(int64_t k, const void *vw, const void *vx)
{
	const block_q2_K *w = vw;
	const block_q8_K *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK_K; i++) {
		const float d = x[i].d * pg_f16_to_f32(w[i].d);
		const float dmin = -x[i].d * pg_f16_to_f32(w[i].dmin);
		const uint8_t *sc = w[i].scales;
		const int16_t *bs = x[i].bsums;
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf(dmin, (float)((sc[2 * l] >> 4) * bs[2 * l] + (sc[2 * l + 1] >> 4) * bs[2 * l + 1]),
				      acc[l]);
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf(d, (float)q2_K_lane(&w[i], &x[i], l), acc[l]);
	}
	return hsum8(acc);
}

/* A level is its 2 low bits, less 4 where the hmask bit is clear. */
static int q3_K_lane(const block_q3_K *w, const block_q8_K *x, const int8_t sc[16], int l)
{
	int isum = 0;
	for (int j = 0; j < 2; j++)
		for (int p = 0; p < 4; p++) {
			const uint8_t *q = w->qs + 32 * j + 4 * l, *h = w->hmask + 4 * l;
			const int8_t *y = x->qs + 128 * j + 32 * p + 4 * l;
			const int bit = 4 * j + p;
			int s4 = 0;
			for (int e = 0; e < 4; e++)
				s4 += (((q[e] >> (2 * p)) & 3) - ((h[e] >> bit) & 1 ? 0 : 4)) * y[e];
			isum += sc[8 * j + 2 * p + (l >= 4)] * s4;
		}
	return isum;
}

static float dot_q3_K(int64_t k, const void *vw, const void *vx)
{
	const block_q3_K *w = vw;
	const block_q8_K *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK_K; i++) {
		const float d = x[i].d * pg_f16_to_f32(w[i].d);
		int8_t sc[16];
		pg_q3_K_scales(w[i].scales, sc);
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf(d, (float)q3_K_lane(&w[i], &x[i], sc, l), acc[l]);
	}
	return hsum8(acc);
}

/* Q5_K: ggml_vec_dot_q5_K_q8_K (AVX2): Q4_K's 8 lanes with the fifth bit;
 * the mins as one scalar, summs = fma(-y.d·x.dmin, Σ m·B, summs), added
 * last. */
static float dot_q5_K(int64_t k, const void *vw, const void *vx)
{
	const block_q5_K *w = vw;
	const block_q8_K *x = vx;
	float acc[8] = { 0 }, summs = 0;
	for (int64_t i = 0; i < k / QK_K; i++) {
		uint8_t sc[8], mn[8];
		int msum = 0;
		for (int j = 0; j < 8; j++) {
			pg_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
			msum += mn[j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
		}
		const float d = pg_f16_to_f32(w[i].d) * x[i].d;
		for (int l = 0; l < 8; l++) {
			int isum = 0;
			for (int g = 0; g < 4; g++) {
				const uint8_t *q = w[i].qs + 32 * g + 4 * l, *qh = w[i].qh + 4 * l;
				const int8_t *y = x[i].qs + 64 * g + 4 * l;
				int s0 = 0, s1 = 0;
				for (int e = 0; e < 4; e++) {
					s0 += ((q[e] & 0xF) | (((qh[e] >> (2 * g)) & 1) << 4)) * y[e];
					s1 += ((q[e] >> 4) | (((qh[e] >> (2 * g + 1)) & 1) << 4)) * y[e + 32];
				}
				isum += sc[2 * g] * s0 + sc[2 * g + 1] * s1;
			}
			acc[l] = fmaf(d, (float)isum, acc[l]);
		}
		summs = fmaf(-x[i].d * pg_f16_to_f32(w[i].dmin), (float)msum, summs);
	}
	return hsum8(acc) + summs;
}

/* Q6_K: ggml_vec_dot_q6_K_q8_K (AVX2): unsigned levels 0..63 in 8 lanes,
 * lane l = bytes 4l..4l+3 of each 32-byte run, scaled by the run's group
 * 2j (lanes 0-3) or 2j+1 (4-7); the -32 offset enters lane l once per
 * block as -32·(sc[2l]·B[2l] + sc[2l+1]·B[2l+1]) (B: bsums). */
static float dot_q6_K(int64_t k, const void *vw, const void *vx)
{
	const block_q6_K *w = vw;
	const block_q8_K *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK_K; i++) {
		const int8_t *sc = w[i].scales;
		const int16_t *bs = x[i].bsums;
		const float d = pg_f16_to_f32(w[i].d) * x[i].d;
		for (int l = 0; l < 8; l++) {
			int isum = -32 * (sc[2 * l] * bs[2 * l] + sc[2 * l + 1] * bs[2 * l + 1]);
			for (int h = 0; h < 2; h++)
				for (int j = 0; j < 4; j++) {
					const uint8_t *ql = w[i].ql + 64 * h + 32 * (j & 1) + 4 * l;
					const uint8_t *qh = w[i].qh + 32 * h + 4 * l;
					const int8_t *y = x[i].qs + 128 * h + 32 * j + 4 * l;
					int s4 = 0;
					for (int e = 0; e < 4; e++) {
						const int lo = j < 2 ? ql[e] & 0xF : ql[e] >> 4;
						s4 += (lo | (((qh[e] >> (2 * j)) & 3) << 4)) * y[e];
					}
					isum += sc[8 * h + 2 * j + (l >= 4)] * s4;
				}
			acc[l] = fmaf(d, (float)isum, acc[l]);
		}
	}
	return hsum8(acc);
}

/* IQ4_XS: ggml_vec_dot_iq4_xs_q8_K (AVX2): 8 lanes, lane l = elements
 * 4l..4l+3 of each group of 32 (the low nibbles are elements 0-15, the high
 * ones 16-31) times the group's scale; one FMA per super-block and lane of
 * d·dy, then hsum_float_8. */
static float dot_iq4_xs(int64_t k, const void *vw, const void *vx)
{
	const block_iq4_xs *w = vw;
	const block_q8_K *x = vx;
	float acc[8] = { 0 };
	for (int64_t i = 0; i < k / QK_K; i++) {
		const float d = pg_f16_to_f32(w[i].d) * x[i].d;
		for (int l = 0; l < 8; l++) {
			int isum = 0;
			for (int ib = 0; ib < 8; ib++) {
				const uint8_t *q = w[i].qs + 16 * ib;
				int s4 = 0;
				for (int e = 4 * l; e < 4 * l + 4; e++)
					s4 += pg_iq4nl_values[e < 16 ? q[e] & 0xF : q[e - 16] >> 4] * x[i].qs[32 * ib + e];
				isum += pg_iq4_xs_scale(&w[i], ib) * s4;
			}
			acc[l] = fmaf(d, (float)isum, acc[l]);
		}
	}
	return hsum8(acc);
}

/* IQ4_NL: the 8 lane sums of a block (lane l = elements 4l..4l+3, the low
 * nibbles being elements 0-15), as ggml's and tinyBLAS's AVX2 kernels lay
 * a block out. */
static void iq4_nl_lanes(const block_iq4_nl *w, const block_q8_0 *x, int lane[8])
{
	for (int l = 0; l < 8; l++) {
		lane[l] = 0;
		for (int e = 4 * l; e < 4 * l + 4; e++)
			lane[l] += pg_iq4nl_values[e < 16 ? w->qs[e] & 0xF : w->qs[e - 16] >> 4] * x->qs[e];
	}
}

/* ggml_vec_dot_iq4_nl_q8_0 (AVX2): blocks in pairs, the even ones into
 * one 8-lane accumulator and the odd into another, acc = fma(dw*dy, lane
 * sums, acc); the two added lane by lane, then hsum_float_8; an odd last
 * block is added after, in scalar, multiply and add rounded apart. */
static float dot_iq4_nl(int64_t k, const void *vw, const void *vx)
{
	const block_iq4_nl *w = vw;
	const block_q8_0 *x = vx;
	const int64_t nb = k / 32;
	float acc[2][8] = { { 0 } }, sum[8];
	int lane[8];
	int64_t i = 0;
	for (; i < (nb & ~(int64_t)1); i++) {
		const float d = pg_f16_to_f32(x[i].d) * pg_f16_to_f32(w[i].d);
		iq4_nl_lanes(&w[i], &x[i], lane);
		for (int l = 0; l < 8; l++)
			acc[i % 2][l] = fmaf(d, (float)lane[l], acc[i % 2][l]);
	}
	for (int l = 0; l < 8; l++)
		sum[l] = acc[0][l] + acc[1][l];
	float s = hsum8(sum);
	if (i < nb) {
		iq4_nl_lanes(&w[i], &x[i], lane);
		int isum = 0;
		for (int l = 0; l < 8; l++)
			isum += lane[l];
		s += pg_f16_to_f32(x[i].d) * pg_f16_to_f32(w[i].d) * (float)isum; /* not fused: ggml's C is ISO C11 */
	}
	return s;
}

/* tinyBLAS_Q0_AVX with IQ4_NL weights (llama.cpp's prompt rows where the
 * weight is not repacked): one 8-lane accumulator, acc = fma(dw*dy, lane
 * sums, acc), then hsum. */
static float dot_iq4_nl_tb(int64_t k, const block_iq4_nl *w, const block_q8_0 *x)
{
	float acc[8] = { 0 };
	int lane[8];
	for (int64_t i = 0; i < k / 32; i++) {
		const float d = pg_f16_to_f32(w[i].d) * pg_f16_to_f32(x[i].d);
		iq4_nl_lanes(&w[i], &x[i], lane);
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf(d, (float)lane[l], acc[l]);
	}
	return hsum8(acc);
}

static void tb_iq4_nl(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
		      size_t bs)
{
	for (int r = 0; r < nr; r++)
		for (int j = 0; j < nw; j++)
			s[(size_t)r * bs + j] = dot_iq4_nl_tb(k, (const block_iq4_nl *)((const char *)w + (size_t)j * bw),
							      (const block_q8_0 *)((const char *)x + (size_t)r * bx));
}

#define SCALAR_GEMV(T)                                                                              \
	static void gemv_##T(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s, \
			     size_t bs)                                                             \
	{                                                                                           \
		for (int r = 0; r < nr; r++)                                                        \
			s[(size_t)r * bs] = dot_##T(k, w, (const char *)x + (size_t)r * bx);       \
	}
SCALAR_GEMV(f32)
SCALAR_GEMV(f16)
SCALAR_GEMV(bf16)
SCALAR_GEMV(q4_0)
SCALAR_GEMV(q4_1)
SCALAR_GEMV(q5_0)
SCALAR_GEMV(q5_1)
SCALAR_GEMV(q8_0)
SCALAR_GEMV(q2_K)
SCALAR_GEMV(q3_K)
SCALAR_GEMV(q4_K)
SCALAR_GEMV(q5_K)
SCALAR_GEMV(q6_K)
SCALAR_GEMV(iq4_nl)
SCALAR_GEMV(iq4_xs)

/* ---- eight weight rows: llama.cpp's repacked order (see cpu.h) ---------------
 * One float chain per output, one FMA per block of its whole integer sum. */

static float dot_q4_0_x8(int64_t k, const block_q4_0 *w, const block_q8_0 *x)
{
	float acc = 0;
	for (int64_t i = 0; i < k / QK4_0; i++) {
		int sumi = 0;
		for (int j = 0; j < QK4_0 / 2; j++)
			sumi += ((w[i].qs[j] & 0xF) - 8) * x[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
		acc = fmaf((float)sumi, pg_f16_to_f32(w[i].d) * pg_f16_to_f32(x[i].d), acc);
	}
	return acc;
}

static float dot_iq4_nl_x8(int64_t k, const block_iq4_nl *w, const block_q8_0 *x)
{
	float acc = 0;
	int lane[8];
	for (int64_t i = 0; i < k / 32; i++) {
		iq4_nl_lanes(&w[i], &x[i], lane);
		int sumi = 0;
		for (int l = 0; l < 8; l++)
			sumi += lane[l];
		acc = fmaf((float)sumi, pg_f16_to_f32(w[i].d) * pg_f16_to_f32(x[i].d), acc);
	}
	return acc;
}

#define SCALAR_GEMV8(T, WT, XT)                                                                     \
	static void gemv8_##T(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr,  \
			      float *s, size_t bs)                                                  \
	{                                                                                           \
		for (int r = 0; r < nr; r++)                                                        \
			for (int j = 0; j < 8; j++)                                                 \
				s[(size_t)r * bs + j] = dot_##T##_x8(                               \
					k, (const WT *)((const char *)w + (size_t)j * bw),          \
					(const XT *)((const char *)x + (size_t)r * bx));            \
	}
SCALAR_GEMV8(q4_0, block_q4_0, block_q8_0)
SCALAR_GEMV8(iq4_nl, block_iq4_nl, block_q8_0)

/* IQ4_XS from 8 activation rows on: llama.cpp's IQ panel gemm (iqp.cpp),
 * one float chain per output and one FMA per super-block of its whole
 * integer sum, the group scales taken into it. */
static float dot_iq4_xs_x8(int64_t k, const block_iq4_xs *w, const block_q8_K *x)
{
	float acc = 0;
	for (int64_t i = 0; i < k / QK_K; i++) {
		int sumi = 0;
		for (int ib = 0; ib < 8; ib++) {
			const uint8_t *q = w[i].qs + 16 * ib;
			const int8_t *y = x[i].qs + 32 * ib;
			int s4 = 0;
			for (int e = 0; e < 16; e++)
				s4 += pg_iq4nl_values[q[e] & 0xF] * y[e] + pg_iq4nl_values[q[e] >> 4] * y[e + 16];
			sumi += pg_iq4_xs_scale(&w[i], ib) * s4;
		}
		acc = fmaf((float)sumi, pg_f16_to_f32(w[i].d) * x[i].d, acc);
	}
	return acc;
}
SCALAR_GEMV8(iq4_xs, block_iq4_xs, block_q8_K)

/* Q4_K, eight rows, in llama.cpp's repacked orders (dot_x86.h says which):
 * row j of super-block i laid out as PG_TYPE_Q4_K_X8 at sb, into its two
 * chains; pairs: one FMA per pair of sub-blocks, else per super-block. */
static void q4kx8_block(const uint8_t *sb, int j, const block_q8_K *xb, bool pairs, float *acc, float *accm)
{
	pg_f16 d16, dm16;
	memcpy(&d16, sb + 1152 + 2 * j, 2);
	memcpy(&dm16, sb + 1168 + 2 * j, 2);
	const float d = pg_f16_to_f32(d16) * xb->d, dm = pg_f16_to_f32(dm16) * xb->d;
	int isum = 0, msum = 0;
	for (int g = 0; g < 4; g++) {
		int gi = 0, gm = 0;
		for (int h = 0; h < 2; h++) {
			const int t = 2 * g + h;
			int sum = 0;
			for (int e = 0; e < 8; e++)
				for (int b = 0; b < 4; b++) {
					const uint8_t q = sb[32 * (8 * g + e) + 4 * j + b];
					sum += (h ? q >> 4 : q & 0xF) * xb->qs[64 * g + 32 * h + 4 * e + b];
				}
			gi += sb[1024 + 8 * t + j] * sum;
			gm += sb[1088 + 8 * t + j] * (xb->bsums[2 * t] + xb->bsums[2 * t + 1]);
		}
		if (pairs) {
			*acc = fmaf((float)gi, d, *acc);
			*accm = fmaf((float)gm, dm, *accm);
		}
		isum += gi;
		msum += gm;
	}
	if (!pairs) {
		*acc = fmaf((float)isum, d, *acc);
		*accm = fmaf((float)msum, dm, *accm);
	}
}

/* file: w is 8 rows of Q4_K where they lie (bw bytes apart), each block
 * laid out as it is met; else a group of PG_TYPE_Q4_K_X8. */
static void q4kx8_rows(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s, size_t bs,
		       bool pairs, bool file)
{
	float acc[PG_Q4K_PAIRS_NR][8] = { { 0 } }, accm[PG_Q4K_PAIRS_NR][8] = { { 0 } };
	uint8_t tmp[PG_Q4KX8_SB];
	const block_q4_K *rows[8];
	for (int j = 0; file && j < 8; j++)
		rows[j] = (const block_q4_K *)((const char *)w + (size_t)j * bw);
	for (int64_t i = 0; i < k / QK_K; i++) {
		const uint8_t *sb = tmp;
		if (file)
			pg_q4_K_x8_block(rows, i, tmp);
		else
			sb = (const uint8_t *)w + (size_t)i * PG_Q4KX8_SB;
		for (int r = 0; r < nr; r++)
			for (int j = 0; j < 8; j++)
				q4kx8_block(sb, j, (const block_q8_K *)((const char *)x + (size_t)r * bx) + i, pairs,
					    &acc[r][j], &accm[r][j]);
	}
	for (int r = 0; r < nr; r++)
		for (int j = 0; j < 8; j++)
			s[(size_t)r * bs + j] = acc[r][j] - accm[r][j];
}

#define SCALAR_Q4KX8(NAME, PAIRS, FILE)                                                             \
	static void NAME(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s, \
			 size_t bs)                                                                      \
	{                                                                                           \
		for (int r = 0; r < nr; r += PG_Q4K_PAIRS_NR)                                       \
			q4kx8_rows(k, w, bw, (const char *)x + (size_t)r * bx, bx,                  \
				   nr - r < PG_Q4K_PAIRS_NR ? nr - r : PG_Q4K_PAIRS_NR, s + (size_t)r * bs, \
				   bs, PAIRS, FILE);                                                \
	}
SCALAR_Q4KX8(gemv8_q4_K_x8r, false, false)
SCALAR_Q4KX8(gemm8_q4_K_x8r, true, false)
SCALAR_Q4KX8(gemv8_q4_K, false, true)
SCALAR_Q4KX8(gemm8_q4_K, true, true)

/* ---- elementwise ----------------------------------------------------------- */

/* ggml_soft_max's tail: the sum was taken in double; scale by its inverse
 * rounded to float, as ggml_vec_scale_f32 receives it. Returns the scale. */
float pg_softmax_finish(float *x, int64_t n, double sum)
{
	const float sc = (float)(1.0 / sum);
	for (int64_t i = 0; i < n; i++)
		x[i] *= sc;
	return sc;
}

void pg_softmax_scalar(float *x, int64_t n)
{
	float max = -INFINITY;
	for (int64_t i = 0; i < n; i++)
		max = fmaxf(max, x[i]);
	double sum = 0;
	for (int64_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - max);
		sum += (double)x[i];
	}
	pg_softmax_finish(x, n, sum);
}

static void swiglu_scalar(float *out, const float *g, const float *u, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void f32_to_f16_scalar(const float *x, pg_f16 *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = pg_f32_to_f16(x[i]);
}

static void f16_to_f32_scalar(const pg_f16 *x, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = pg_f16_to_f32(x[i]);
}

static float dot_f16_rows(const pg_f16 *a, const pg_f16 *b, int64_t n)
{
	return dot_f16(n, a, b);
}

static void f16_scale_scalar(pg_f16 *acc, float s, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		acc[i] = pg_f32_to_f16(pg_f16_to_f32(acc[i]) * s);
}

static void f16_fma_scalar(pg_f16 *acc, const pg_f16 *v, float s, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		acc[i] = pg_f32_to_f16(fmaf(pg_f16_to_f32(v[i]), s, pg_f16_to_f32(acc[i])));
}

const struct pg_kern pg_kern_scalar = {
	.name = "scalar",
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
		[PG_TYPE_Q4_K] = gemv8_q4_K,
		[PG_TYPE_Q4_K_X8] = gemv8_q4_K_x8r,
	},
	.gemm8 = {
		[PG_TYPE_Q4_K] = gemm8_q4_K,
		[PG_TYPE_Q4_K_X8] = gemm8_q4_K_x8r,
		[PG_TYPE_IQ4_XS] = gemv8_iq4_xs,
	},
	.tb = {
		[PG_TYPE_IQ4_NL] = tb_iq4_nl,
	},
	.q4_0_x8 = pg_q4_0_x8_scalar,
	.iq4_nl_x8 = pg_iq4_nl_x8_scalar,
	.from_float = {
		[PG_TYPE_F32] = f32_from_float,
		[PG_TYPE_F16] = pg_f16_from_float_scalar,
		[PG_TYPE_BF16] = pg_bf16_from_float,
		[PG_TYPE_Q8_0] = pg_q8_0_from_float,
		[PG_TYPE_Q8_1] = pg_q8_1_from_float,
		[PG_TYPE_Q8_K] = pg_q8_K_from_float,
	},
	.softmax = pg_softmax_scalar,
	.swiglu = swiglu_scalar,
	.f32_to_f16 = f32_to_f16_scalar,
	.f16_to_f32 = f16_to_f32_scalar,
	.dot_f16 = dot_f16_rows,
	.f16_scale = f16_scale_scalar,
	.f16_fma = f16_fma_scalar,
};
