/* kernels/cuda/common.cuh — what every CUDA translation unit shares: the
 * block formats read on the device (ggml's layouts, kernels/types.h) and
 * small warp helpers. Internal to kernels/cuda/. */
#ifndef PAGODA_KERNELS_CUDA_COMMON_CUH
#define PAGODA_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "kernels/types.h"

/* Every weight type is read as sub-blocks of 32 consecutive elements of a
 * row: a Q8_0/Q4_0 block, an eighth of a K-quant super-block, or 32 plain
 * values. One function per type turns sub-block sb of a row into floats,
 * with the CPU's dequantization formulas (kernels/cpu/dequant.c). */
#define PGCU_SUB 32

/* The readers compile for the host too, so that a host program checks
 * them against the CPU's dequantization where no GPU is
 * (tests/gpu/host_check.cu). */
#define PGCU_HD __host__ __device__ __forceinline__

PGCU_HD float pgcu_h2f(pg_f16 h)
{
	return __half2float(__ushort_as_half(h));
}

PGCU_HD float pgcu_bf2f(pg_bf16 h)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float((uint32_t)h << 16);
#else
	const uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
#endif
}

PGCU_HD void pgcu_scale_min_k4(int j, const uint8_t *q, int *d, int *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

PGCU_HD int pgcu_iq4nl(int i)
{
	const int8_t v[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };
	return v[i];
}

template <int T> PGCU_HD void pgcu_dq_sub(const uint8_t *row, int sb, float v[32]);

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_F32>(const uint8_t *row, int sb, float v[32])
{
	const float4 *p = (const float4 *)(row + (size_t)sb * 128);
#pragma unroll
	for (int i = 0; i < 8; i++) {
		float4 f = p[i];
		v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
	}
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_F16>(const uint8_t *row, int sb, float v[32])
{
	const pg_f16 *p = (const pg_f16 *)(row + (size_t)sb * 64);
#pragma unroll
	for (int i = 0; i < 32; i++)
		v[i] = pgcu_h2f(p[i]);
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_BF16>(const uint8_t *row, int sb, float v[32])
{
	const pg_bf16 *p = (const pg_bf16 *)(row + (size_t)sb * 64);
#pragma unroll
	for (int i = 0; i < 32; i++)
		v[i] = pgcu_bf2f(p[i]);
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q8_0>(const uint8_t *row, int sb, float v[32])
{
	const block_q8_0 *b = (const block_q8_0 *)row + sb;
	const float d = pgcu_h2f(b->d);
#pragma unroll
	for (int i = 0; i < 32; i++)
		v[i] = b->qs[i] * d;
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q4_0>(const uint8_t *row, int sb, float v[32])
{
	const block_q4_0 *b = (const block_q4_0 *)row + sb;
	const float d = pgcu_h2f(b->d);
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const int q = b->qs[i];
		v[i] = ((q & 0xF) - 8) * d;
		v[i + 16] = ((q >> 4) - 8) * d;
	}
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q4_1>(const uint8_t *row, int sb, float v[32])
{
	const block_q4_1 *b = (const block_q4_1 *)row + sb;
	const float d = pgcu_h2f(b->d), m = pgcu_h2f(b->m);
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const int q = b->qs[i];
		v[i] = (q & 0xF) * d + m;
		v[i + 16] = (q >> 4) * d + m;
	}
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q5_0>(const uint8_t *row, int sb, float v[32])
{
	const block_q5_0 *b = (const block_q5_0 *)row + sb;
	const float d = pgcu_h2f(b->d);
	const uint32_t qh = b->qh[0] | b->qh[1] << 8 | b->qh[2] << 16 | (uint32_t)b->qh[3] << 24;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const int q = b->qs[i];
		const int h0 = ((qh >> i) << 4) & 0x10, h1 = (qh >> (i + 12)) & 0x10;
		v[i] = (((q & 0xF) | h0) - 16) * d;
		v[i + 16] = (((q >> 4) | h1) - 16) * d;
	}
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q5_1>(const uint8_t *row, int sb, float v[32])
{
	const block_q5_1 *b = (const block_q5_1 *)row + sb;
	const float d = pgcu_h2f(b->d), m = pgcu_h2f(b->m);
	const uint32_t qh = b->qh[0] | b->qh[1] << 8 | b->qh[2] << 16 | (uint32_t)b->qh[3] << 24;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const int q = b->qs[i];
		const int h0 = ((qh >> i) << 4) & 0x10, h1 = (qh >> (i + 12)) & 0x10;
		v[i] = ((q & 0xF) | h0) * d + m;
		v[i + 16] = ((q >> 4) | h1) * d + m;
	}
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_IQ4_NL>(const uint8_t *row, int sb, float v[32])
{
	const block_iq4_nl *b = (const block_iq4_nl *)row + sb;
	const float d = pgcu_h2f(b->d);
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const int q = b->qs[i];
		v[i] = d * pgcu_iq4nl(q & 0xF);
		v[i + 16] = d * pgcu_iq4nl(q >> 4);
	}
}

/* K-quants: sub-block s of super-block sb/8 is its s-th group of 32. */
template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q4_K>(const uint8_t *row, int sb, float v[32])
{
	const block_q4_K *b = (const block_q4_K *)row + sb / 8;
	const int s = sb % 8;
	int sc, m;
	pgcu_scale_min_k4(s, b->scales, &sc, &m);
	const float d = pgcu_h2f(b->d) * sc, mn = pgcu_h2f(b->dmin) * m;
	const uint8_t *q = b->qs + 32 * (s / 2);
	const int shift = (s & 1) * 4;
#pragma unroll
	for (int l = 0; l < 32; l++)
		v[l] = d * ((q[l] >> shift) & 0xF) - mn;
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q5_K>(const uint8_t *row, int sb, float v[32])
{
	const block_q5_K *b = (const block_q5_K *)row + sb / 8;
	const int s = sb % 8;
	int sc, m;
	pgcu_scale_min_k4(s, b->scales, &sc, &m);
	const float d = pgcu_h2f(b->d) * sc, mn = pgcu_h2f(b->dmin) * m;
	const uint8_t *q = b->qs + 32 * (s / 2);
	const int shift = (s & 1) * 4, hb = 1 << s;
#pragma unroll
	for (int l = 0; l < 32; l++)
		v[l] = d * (((q[l] >> shift) & 0xF) + (b->qh[l] & hb ? 16 : 0)) - mn;
}

template <> PGCU_HD void pgcu_dq_sub<PG_TYPE_Q6_K>(const uint8_t *row, int sb, float v[32])
{
	const block_q6_K *b = (const block_q6_K *)row + sb / 8;
	const int s = sb % 8, n = s / 4, r = s % 4;
	const uint8_t *ql = b->ql + 64 * n + (r & 1) * 32, *qh = b->qh + 32 * n;
	const int8_t *sc = b->scales + 8 * n + 2 * r;
	const int lshift = (r >> 1) * 4, hshift = 2 * r;
	const float d = pgcu_h2f(b->d);
#pragma unroll
	for (int l = 0; l < 32; l++) {
		const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
		v[l] = d * sc[l / 16] * q;
	}
}

/* The decode GEMV's share of one Q8_0 block for lane q of the 8 that read
 * it: quants 4q..4q+3 (two 16-bit words: blocks are 2-byte aligned) times
 * x, the activations 4q..4q+3 of the block, times d. */
PGCU_HD float pgcu_dot4(const float4 x, float a, float b, float c, float d)
{
	return fmaf(a, x.x, fmaf(b, x.y, fmaf(c, x.z, d * x.w)));
}

PGCU_HD float pgcu_q8_0_part(const block_q8_0 *b, int q, const float4 x)
{
	const uint16_t *qw = (const uint16_t *)b->qs + 2 * q;
	const uint16_t w0 = qw[0], w1 = qw[1];
	return pgcu_h2f(b->d) * pgcu_dot4(x, (int8_t)(w0 & 0xFF), (int8_t)(w0 >> 8), (int8_t)(w1 & 0xFF),
					  (int8_t)(w1 >> 8));
}

/* Q4_0, lane q of the 4 that read a block: bytes 4q..4q+3, whose low
 * nibbles are elements 4q.. (xl) and high nibbles 16+4q.. (xh). */
PGCU_HD float pgcu_q4_0_part(const block_q4_0 *b, int q, const float4 xl, const float4 xh)
{
	const uint16_t *qw = (const uint16_t *)b->qs + 2 * q;
	const uint32_t w = qw[0] | (uint32_t)qw[1] << 16;
	float lo[4], hi[4];
	for (int i = 0; i < 4; i++) {
		lo[i] = (float)((int)((w >> (8 * i)) & 0xF) - 8);
		hi[i] = (float)((int)((w >> (8 * i + 4)) & 0xF) - 8);
	}
	return pgcu_h2f(b->d) * (pgcu_dot4(xl, lo[0], lo[1], lo[2], lo[3]) + pgcu_dot4(xh, hi[0], hi[1], hi[2], hi[3]));
}

/* The types with a reader, for X-macro dispatch. */
#define PGCU_TYPES(X)                                                                                  \
	X(PG_TYPE_F32) X(PG_TYPE_F16) X(PG_TYPE_BF16) X(PG_TYPE_Q8_0) X(PG_TYPE_Q4_0) X(PG_TYPE_Q4_1) \
		X(PG_TYPE_Q5_0) X(PG_TYPE_Q5_1) X(PG_TYPE_IQ4_NL) X(PG_TYPE_Q4_K) X(PG_TYPE_Q5_K)     \
			X(PG_TYPE_Q6_K)

__device__ __forceinline__ float pgcu_warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float pgcu_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

#endif
