/* tests/gpu/host_check.cu — the CUDA backend's block readers, compiled
 * for the host, against the CPU's dequantization: every sub-block of every
 * type the device reads, and the decode GEMV's per-lane shares of Q8_0 and
 * Q4_0 blocks. Needs nvcc but no GPU, so it runs wherever the library is
 * built (tests/e2e/cuda_lib.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/common.cuh"
extern "C" {
#include "kernels/cpu/kernels.h"
}

static int checks, fails;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

static void check(bool ok, const char *what, uint32_t type, double err)
{
	checks++;
	if (!ok) {
		fails++;
		fprintf(stderr, "FAIL: %s %s: error %g\n", what, pg_type_name(type), err);
	}
}

template <int T> static void check_type(void)
{
	const int rows = 7, k = 512, nsb = k / 32;
	const size_t rb = pg_row_size(T, k);
	uint8_t *w = (uint8_t *)malloc(rb * rows);
	float *src = (float *)malloc(sizeof(float) * k), *ref = (float *)malloc(sizeof(float) * k);
	double worst = 0;
	for (int r = 0; r < rows; r++) {
		/* a scale per row, one row with zeros, so that extreme and empty blocks occur */
		const float s = r == 3 ? 0.0f : powf(10.0f, (float)(r - 3));
		for (int i = 0; i < k; i++)
			src[i] = s * frand(-1, 1);
		if (!pg_quantize_row(T, src, w + r * rb, k)) {
			check(false, "quantize", T, 0);
			break;
		}
		pg_dequant_row(T, w + r * rb, ref, k);
		for (int sb = 0; sb < nsb; sb++) {
			float v[32];
			pgcu_dq_sub<T>(w + r * rb, sb, v);
			for (int i = 0; i < 32; i++) {
				const double e = fabs((double)v[i] - ref[sb * 32 + i]);
				worst = e > worst ? e : worst;
			}
		}
	}
	check(worst == 0, "sub-block reader differs from pg_dequant_row for", T, worst);
	free(w), free(src), free(ref);
}

/* The lanes' shares of a block add up to its dot product with x. */
static void check_parts(void)
{
	const int nb = 64;
	block_q8_0 q8[nb];
	block_q4_0 q4[nb];
	float src[32 * nb], x[32 * nb], d8[32 * nb], d4[32 * nb];
	for (int i = 0; i < 32 * nb; i++) {
		src[i] = frand(-2, 2);
		x[i] = frand(-1, 1);
	}
	pg_quantize_row(PG_TYPE_Q8_0, src, q8, 32 * nb);
	pg_quantize_row(PG_TYPE_Q4_0, src, q4, 32 * nb);
	pg_dequant_row(PG_TYPE_Q8_0, q8, d8, 32 * nb);
	pg_dequant_row(PG_TYPE_Q4_0, q4, d4, 32 * nb);
	double w8 = 0, w4 = 0;
	for (int b = 0; b < nb; b++) {
		const float *xb = x + 32 * b;
		double r8 = 0, r4 = 0, a8 = 1e-30, a4 = 1e-30, g8 = 0, g4 = 0;
		for (int i = 0; i < 32; i++) {
			r8 += (double)d8[32 * b + i] * xb[i], a8 += fabs((double)d8[32 * b + i] * xb[i]);
			r4 += (double)d4[32 * b + i] * xb[i], a4 += fabs((double)d4[32 * b + i] * xb[i]);
		}
		for (int q = 0; q < 8; q++)
			g8 += pgcu_q8_0_part(&q8[b], q, make_float4(xb[4 * q], xb[4 * q + 1], xb[4 * q + 2], xb[4 * q + 3]));
		for (int q = 0; q < 4; q++)
			g4 += pgcu_q4_0_part(&q4[b], q,
					     make_float4(xb[4 * q], xb[4 * q + 1], xb[4 * q + 2], xb[4 * q + 3]),
					     make_float4(xb[16 + 4 * q], xb[17 + 4 * q], xb[18 + 4 * q], xb[19 + 4 * q]));
		w8 = fmax(w8, fabs(g8 - r8) / a8);
		w4 = fmax(w4, fabs(g4 - r4) / a4);
	}
	check(w8 <= 1e-6, "GEMV lane shares, relative to sum|wx|,", PG_TYPE_Q8_0, w8);
	check(w4 <= 1e-6, "GEMV lane shares, relative to sum|wx|,", PG_TYPE_Q4_0, w4);
}

int main(void)
{
	check_type<PG_TYPE_F32>();
	check_type<PG_TYPE_F16>();
	check_type<PG_TYPE_BF16>();
	check_type<PG_TYPE_Q8_0>();
	check_type<PG_TYPE_Q4_0>();
	check_type<PG_TYPE_Q4_1>();
	check_type<PG_TYPE_Q5_0>();
	check_type<PG_TYPE_Q5_1>();
	check_type<PG_TYPE_Q4_K>();
	check_type<PG_TYPE_Q5_K>();
	check_type<PG_TYPE_Q6_K>();
	check_parts();
	printf("host_check: %d passed, %d failed\n", checks - fails, fails);
	return fails ? 1 : 0;
}
