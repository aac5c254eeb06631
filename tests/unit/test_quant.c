/* tests/unit/test_quant.c — the 2- and 3-bit K-quants', IQ4_NL's and
 * IQ4_XS's reference quantizer and dequantizer: round trips within what the formats give, and blocks
 * built by hand that decode to what the GGUF layout defines. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "tests/unit/test_rng.h"

static double rel_rmse(const float *x, const float *y, int64_t k)
{
	double e = 0, s = 0;
	for (int64_t j = 0; j < k; j++) {
		e += (double)(x[j] - y[j]) * (x[j] - y[j]);
		s += (double)x[j] * x[j];
	}
	return sqrt(e / s);
}

/* Over 200 seeds these rows give Q2_K 0.28-0.30 (gaussian) and 0.37-0.43
 * (cubed, heavy-tailed: an outlier stretches its group of 16 over four
 * levels), Q3_K 0.14-0.15 and 0.15-0.17. The bounds leave about a quarter
 * more for a change of search; a scale, nibble or bit pair read from the
 * wrong place gives 0.85 or more. IQ4_XS gives 0.073-0.076 and
 * 0.087-0.094 over 1000 seeds; its bounds leave a quarter and a sixth,
 * under the 0.22 and 0.33 that swapping a byte's two scale nibbles gives
 * (neighbouring groups have similar scales, so that error is the
 * smallest); a misplaced quant nibble or scale bit pair gives 0.9 or more.
 * IQ4_NL, with an f16 scale per group, gives 0.072-0.076 and 0.087-0.094
 * over 300 seeds and keeps IQ4_XS's bounds. */
static const struct {
	uint32_t t;
	int group; /* elements under one scale */
	double gauss, heavy;
} lim[] = {
	{ PG_TYPE_Q2_K, 16, 0.36, 0.55 },
	{ PG_TYPE_Q3_K, 16, 0.19, 0.21 },
	{ PG_TYPE_IQ4_NL, 32, 0.095, 0.11 },
	{ PG_TYPE_IQ4_XS, 32, 0.095, 0.11 },
};

START_TEST(test_roundtrip)
{
	const uint32_t t = lim[_i].t;
	const int64_t k = 8192;
	float *x = malloc(sizeof(float) * k), *y = malloc(sizeof(float) * k);
	void *q = malloc(pg_row_size(t, k));
	for (int pass = 0; pass < 4; pass++) {
		/* gaussian rows of two scales, then heavy tails: a few large
		 * weights among small ones, as trained matrices have */
		const bool heavy = pass >= 2;
		const float sd = pass % 2 ? 0.02f : 3.0f;
		for (int64_t j = 0; j < k; j++) {
			float g = grand();
			x[j] = sd * (heavy ? g * g * g : g);
		}
		ck_assert_uint_eq(pg_quantize_row(t, x, q, k), pg_row_size(t, k));
		pg_dequant_row(t, q, y, k);
		const double rel = rel_rmse(x, y, k), max = heavy ? lim[_i].heavy : lim[_i].gauss;
		ck_assert_msg(rel <= max, "%s pass %d: relative rmse %g > %g", pg_type_name(t), pass, rel, max);
	}
	/* all-zero input stays zero, a zero group among others too (IQ4_XS
	 * has no zero level, so only a zero scale gives zeros) */
	memset(x, 0, sizeof(float) * k);
	pg_quantize_row(t, x, q, k);
	pg_dequant_row(t, q, y, k);
	for (int64_t j = 0; j < k; j++)
		ck_assert_float_eq(y[j], 0.0f);
	const int g = lim[_i].group;
	for (int64_t j = g; j < QK_K; j++)
		x[j] = grand();
	pg_quantize_row(t, x, q, QK_K);
	pg_dequant_row(t, q, y, QK_K);
	for (int j = 0; j < g; j++)
		ck_assert_float_eq(y[j], 0.0f);
	ck_assert_uint_eq(pg_quantize_row(t, x, q, pg_type_info(t)->blck + 16), 0); /* not whole blocks */
	free(x);
	free(y);
	free(q);
}
END_TEST

/* Element e of a block, by the GGUF layout: 128-element halves of 32 bytes
 * of qs; in a half, element r sits in byte r % 32 at bit pair r / 32. */
static int low2(const uint8_t *qs, int e)
{
	return (qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

START_TEST(test_q2_K_layout)
{
	block_q2_K b;
	for (int j = 0; j < 16; j++) /* scale j + 1 in the low nibble, min 15 - j in the high */
		b.scales[j] = (uint8_t)((j + 1) | (15 - j) << 4);
	for (int j = 0; j < 64; j++)
		b.qs[j] = (uint8_t)(rnd() >> 8);
	b.d = pg_f32_to_f16(0.5f);
	b.dmin = pg_f32_to_f16(0.25f);
	/* elements 0, 32, 64, 96 in byte 0's pairs from the low bits up;
	 * 128 + 17 in byte 49's third pair */
	b.qs[0] = 0xE4; /* 3 2 1 0 */
	b.qs[49] = 0x20; /* pair 2 = 2 */
	float y[QK_K];
	pg_dequant_row(PG_TYPE_Q2_K, &b, y, QK_K);
	ck_assert_float_eq(y[0], 0.5f * 1 * 0 - 0.25f * 15);	      /* group 0 */
	ck_assert_float_eq(y[32], 0.5f * 3 * 1 - 0.25f * 13);	      /* group 2 */
	ck_assert_float_eq(y[64], 0.5f * 5 * 2 - 0.25f * 11);	      /* group 4 */
	ck_assert_float_eq(y[96], 0.5f * 7 * 3 - 0.25f * 9);	      /* group 6 */
	ck_assert_float_eq(y[128 + 64 + 17], 0.5f * 14 * 2 - 0.25f * 2); /* group 13 */
	for (int e = 0; e < QK_K; e++) {
		const int sc = b.scales[e / 16] & 0xF, m = b.scales[e / 16] >> 4;
		const float want = 0.5f * sc * low2(b.qs, e) - 0.25f * m;
		ck_assert_msg(y[e] == want, "q2_K element %d: %g, want %g", e, y[e], want);
	}
}
END_TEST

START_TEST(test_q3_K_layout)
{
	block_q3_K b;
	/* 6-bit scales (stored + 32): low nibbles of 0-7 in bytes 0-7's low
	 * halves, of 8-15 in their high halves; the top bit pairs of scale j
	 * in byte 8 + j % 4 at pair j / 4 */
	int raw[16];
	memset(b.scales, 0, sizeof(b.scales));
	for (int j = 0; j < 16; j++) {
		raw[j] = (j * 37 + 5) & 63;
		b.scales[j % 8] |= (uint8_t)((raw[j] & 0xF) << (j < 8 ? 0 : 4));
		b.scales[8 + j % 4] |= (uint8_t)((raw[j] >> 4) << (2 * (j / 4)));
	}
	for (int j = 0; j < 64; j++)
		b.qs[j] = (uint8_t)(rnd() >> 8);
	for (int j = 0; j < 32; j++)
		b.hmask[j] = (uint8_t)(rnd() >> 8);
	b.d = pg_f32_to_f16(0.125f);
	/* the same bytes written out: scale 0 = 5 - 32, scale 15 = 48 - 32,
	 * scale 6 = 35 - 32 */
	ck_assert_uint_eq(b.scales[0] & 0xF, 5);
	ck_assert_uint_eq(b.scales[0] >> 4, raw[8] & 0xF);
	ck_assert_uint_eq(b.scales[7] >> 4, 48 & 0xF);
	ck_assert_uint_eq((b.scales[11] >> 6) & 3, 48 >> 4);
	ck_assert_uint_eq((b.scales[10] >> 2) & 3, 35 >> 4);

	/* element 0: low pair 1, high bit set -> 1; element 32: pair 2,
	 * high bit clear -> 2 - 4; element 255: byte 63's top pair, bit 7 of
	 * hmask[31] */
	b.qs[0] = 0x09;	   /* pairs 1, 2, 0, 0 */
	b.hmask[0] = 0x01; /* element 0 set, 32, 64, ... clear */
	b.qs[63] = 0xC0;   /* element 255: pair 3 */
	b.hmask[31] = 0x80;
	float y[QK_K];
	pg_dequant_row(PG_TYPE_Q3_K, &b, y, QK_K);
	ck_assert_float_eq(y[0], 0.125f * (5 - 32) * 1);
	ck_assert_float_eq(y[32], 0.125f * (raw[2] - 32) * (2 - 4));
	ck_assert_float_eq(y[64], 0.125f * (raw[4] - 32) * (0 - 4));
	ck_assert_float_eq(y[255], 0.125f * (48 - 32) * 3);
	for (int e = 0; e < QK_K; e++) {
		const int hi = (b.hmask[e % 32] >> (e / 32)) & 1;
		const float want = 0.125f * (raw[e / 16] - 32) * (low2(b.qs, e) - (hi ? 0 : 4));
		ck_assert_msg(y[e] == want, "q3_K element %d: %g, want %g", e, y[e], want);
	}
}
END_TEST

START_TEST(test_iq4_xs_layout)
{
	/* 6-bit scales (stored + 32): the low nibble of group ib in
	 * scales_l[ib / 2], low half for even ib; its top bit pair at bits
	 * 2 ib of scales_h */
	static const int raw[8] = { 0x05, 0x3A, 0x20, 0x1F, 0x3F, 0x00, 0x2C, 0x11 };
	block_iq4_xs b;
	b.scales_h = 0;
	memset(b.scales_l, 0, sizeof(b.scales_l));
	for (int ib = 0; ib < 8; ib++) {
		b.scales_l[ib / 2] |= (uint8_t)((raw[ib] & 0xF) << (4 * (ib % 2)));
		b.scales_h |= (uint16_t)((raw[ib] >> 4) << (2 * ib));
	}
	/* the same bytes written out */
	ck_assert_uint_eq(b.scales_l[0], 0xA5);
	ck_assert_uint_eq(b.scales_l[1], 0xF0);
	ck_assert_uint_eq(b.scales_l[2], 0x0F);
	ck_assert_uint_eq(b.scales_l[3], 0x1C);
	ck_assert_uint_eq(b.scales_h, 0x636C); /* pairs 0 3 2 1 3 0 2 1 from bit 0 */
	for (int j = 0; j < QK_K / 2; j++)
		b.qs[j] = (uint8_t)(rnd() >> 8);
	b.d = pg_f32_to_f16(0.25f);
	/* group 0's byte 0: element 0 in the low nibble, 16 in the high;
	 * group 7's byte 15: elements 239 and 255 */
	b.qs[0] = 0xF0;
	b.qs[16 * 7 + 15] = 0x08;
	float y[QK_K];
	pg_dequant_row(PG_TYPE_IQ4_XS, &b, y, QK_K);
	ck_assert_float_eq(y[0], 0.25f * (5 - 32) * -127);
	ck_assert_float_eq(y[16], 0.25f * (5 - 32) * 113);
	ck_assert_float_eq(y[239], 0.25f * (0x11 - 32) * 1);
	ck_assert_float_eq(y[255], 0.25f * (0x11 - 32) * -127);
	for (int e = 0; e < QK_K; e++) {
		const int ib = e / 32, r = e % 32;
		const uint8_t byte = b.qs[16 * ib + r % 16];
		const int l = r < 16 ? byte & 0xF : byte >> 4;
		const float want = 0.25f * (raw[ib] - 32) * pg_iq4nl_values[l];
		ck_assert_msg(y[e] == want, "iq4_xs element %d: %g, want %g", e, y[e], want);
	}
}
END_TEST

/* What the quantizer writes, read back by the layout rather than by the
 * dequantizer: rows whose groups of 16 each lie on a grid of the format's
 * levels come back level for level. */
START_TEST(test_quant_grid)
{
	float x[QK_K], y[QK_K];
	int want[QK_K];
	/* Q2_K: levels 0..3, each group with its own step and min; the
	 * largest step 1 and largest min 0.6 make the 4-bit steps 1/15 and
	 * 0.04, which the steps 0.2..1 and mins 0..0.6 in 0.2 are multiples of */
	for (int e = 0; e < QK_K; e++) {
		const int j = e / 16;
		want[e] = (e * 5 + j) % 4;
		x[e] = (float)want[e] * (float)(1 + j % 5) * 0.2f - (float)(j % 4) * 0.2f;
	}
	block_q2_K b2;
	ck_assert_uint_eq(pg_quantize_row(PG_TYPE_Q2_K, x, &b2, QK_K), sizeof(b2));
	for (int e = 0; e < QK_K; e++)
		ck_assert_msg(low2(b2.qs, e) == want[e], "q2_K element %d: level %d, want %d", e, low2(b2.qs, e),
			      want[e]);
	pg_dequant_row(PG_TYPE_Q2_K, &b2, y, QK_K);
	ck_assert_msg(rel_rmse(x, y, QK_K) < 1e-3, "q2_K grid: relative rmse %g", rel_rmse(x, y, QK_K));

	/* Q3_K: levels -4..3 times a step of (group + 1) quarters; each group
	 * holds a -4, so its scale is the step and the 6-bit scales are
	 * -2 (group + 1) against d = -1/8: exact */
	for (int e = 0; e < QK_K; e++) {
		const int j = e / 16;
		want[e] = (e * 5 + j) % 8 - 4;
		x[e] = (float)want[e] * (float)(j + 1) * 0.25f;
	}
	block_q3_K b3;
	ck_assert_uint_eq(pg_quantize_row(PG_TYPE_Q3_K, x, &b3, QK_K), sizeof(b3));
	for (int e = 0; e < QK_K; e++) {
		const int hi = (b3.hmask[e % 32] >> (e / 32)) & 1;
		const int q = low2(b3.qs, e) - (hi ? 0 : 4);
		ck_assert_msg(q == want[e], "q3_K element %d: level %d, want %d", e, q, want[e]);
	}
	pg_dequant_row(PG_TYPE_Q3_K, &b3, y, QK_K);
	for (int e = 0; e < QK_K; e++)
		ck_assert_msg(y[e] == x[e], "q3_K grid element %d: %g, want %g", e, y[e], x[e]);

	/* IQ4_NL: levels of the table times a step per block, each block
	 * holding the -127 level (its largest in size): the fit tried from
	 * that extreme finds the step, stored exactly in f16 */
	for (int e = 0; e < QK_K; e++) {
		const int j = e / 32;
		want[e] = (e * 5 + j) % 16;
		x[e] = (float)pg_iq4nl_values[want[e]] * (float)(j + 1) * 0.125f;
	}
	block_iq4_nl bn[QK_K / 32];
	ck_assert_uint_eq(pg_quantize_row(PG_TYPE_IQ4_NL, x, bn, QK_K), sizeof(bn));
	for (int e = 0; e < QK_K; e++) {
		const uint8_t byte = bn[e / 32].qs[e % 16];
		const int l = e % 32 < 16 ? byte & 0xF : byte >> 4;
		ck_assert_msg(l == want[e], "iq4_nl element %d: level %d, want %d", e, l, want[e]);
	}
	for (int j = 0; j < QK_K / 32; j++)
		ck_assert_float_eq(pg_f16_to_f32(bn[j].d), (float)(j + 1) * 0.125f);
	pg_dequant_row(PG_TYPE_IQ4_NL, bn, y, QK_K);
	for (int e = 0; e < QK_K; e++)
		ck_assert_msg(y[e] == x[e], "iq4_nl grid element %d: %g, want %g", e, y[e], x[e]);
}
END_TEST

static Suite *quant_suite(void)
{
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_roundtrip, 0, sizeof(lim) / sizeof(lim[0]));
	tcase_add_test(tc, test_q2_K_layout);
	tcase_add_test(tc, test_q3_K_layout);
	tcase_add_test(tc, test_iq4_xs_layout);
	tcase_add_test(tc, test_quant_grid);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(quant_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
