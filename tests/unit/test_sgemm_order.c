/* tests/unit/test_sgemm_order.c — pg_matmul_tb: the rows flagged as
 * prompt rows follow llamafile's tinyBLAS bit for bit, the others ggml's
 * vec_dot (pg_matmul), and the shapes llama.cpp leaves to vec_dot stay
 * there.
 *
 * The reference below transcribes, per output, what llama.cpp's AVX-512
 * build runs (ggml/src/ggml-cpu/llamafile/sgemm.cpp): tinyBLAS<16, __m512,
 * __m512, TA, TB, float>::gemm_bloc keeps one __m512 accumulator per
 * output, zero at the start; for l = 0, 16, .., k - 16 it does
 * Cv = madd(load(A + l), load(B + l), Cv) = _mm512_fmadd_ps (F16 operands
 * widened by _mm512_cvtph_ps); then C = hsum(Cv) = _mm512_reduce_add_ps,
 * which GCC defines (avx512fintrin.h, __MM512_REDUCE_OP) as upper 256 bits
 * + lower, upper 128 + lower, then [0]+[2] and [1]+[3], then their sum. Both
 * SIMD tables must give these bits (the avx2 one as the AVX-512 build, as it
 * does for vec_dot); scalar stands for the generic build, which has no
 * tinyBLAS for x86 without AVX.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

static const char *const simd_isas[] = { "avx2", "avx512" };

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "tests/unit/test_rng.h"

static float tinyblas_ref(const float *a, const float *b, int64_t k)
{
	float c[16] = { 0 };
	for (int64_t l = 0; l < k; l += 16)
		for (int i = 0; i < 16; i++)
			c[i] = fmaf(a[l + i], b[l + i], c[i]);
	float t8[8], t4[4];
	for (int i = 0; i < 8; i++)
		t8[i] = c[i + 8] + c[i];
	for (int i = 0; i < 4; i++)
		t4[i] = t8[i + 4] + t8[i];
	return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

struct mats {
	int64_t n, k, m;
	float *W, *X, *Wr, *Xr; /* Wr, Xr: what the kernel sees (f16-rounded for F16) */
	pg_f16 *W16;
};

static void mats_init(struct mats *t, int64_t n, int64_t k, int64_t m, bool f16)
{
	t->n = n;
	t->k = k;
	t->m = m;
	t->W = malloc(sizeof(float) * n * k);
	t->Wr = malloc(sizeof(float) * n * k);
	t->W16 = malloc(sizeof(pg_f16) * n * k);
	t->X = malloc(sizeof(float) * m * k);
	t->Xr = malloc(sizeof(float) * m * k);
	for (int64_t i = 0; i < n * k; i++) {
		t->W[i] = grand();
		t->W16[i] = pg_f32_to_f16(t->W[i]);
		t->Wr[i] = f16 ? pg_f16_to_f32(t->W16[i]) : t->W[i];
	}
	for (int64_t i = 0; i < m * k; i++) {
		t->X[i] = grand() * 3;
		t->Xr[i] = f16 ? pg_f16_to_f32(pg_f32_to_f16(t->X[i])) : t->X[i];
	}
}

static void mats_free(struct mats *t)
{
	free(t->W);
	free(t->Wr);
	free(t->W16);
	free(t->X);
	free(t->Xr);
}

/* Flagged rows in tinyBLAS's order, the others as pg_matmul alone gives
 * them; on one thread and on a pool, for m across tile boundaries, and
 * (n = 100 on two threads: chunks of 6 rows) for calls of fewer than
 * PG_TB_NW weight rows. */
START_TEST(test_prompt_rows_follow_tinyblas)
{
	const char *saved = pg_cpu_isa();
	struct pg_pool *pool = pg_pool_create(2);
	ck_assert_ptr_nonnull(pool);
	const bool f16 = _i % 2;
	const int64_t n = _i < 2 ? 12 : 100;
	const uint32_t type = f16 ? PG_TYPE_F16 : PG_TYPE_F32;
	struct mats t;
	mats_init(&t, n, 16 * 9, 7, f16); /* k % 64 == 16: the two orders differ */
	const bool tb[7] = { true, true, false, true, false, false, true };
	const void *W = f16 ? (const void *)t.W16 : (const void *)t.W;
	float *Y = malloc(sizeof(float) * t.m * t.n), *Yv = malloc(sizeof(float) * t.m * t.n);
	for (int a = 0; a < 2; a++) {
		if (!pg_cpu_set_isa(simd_isas[a]))
			continue;
		ck_assert(pg_matmul_tb_applies(type, t.n, t.k));
		pg_matmul(NULL, W, type, t.n, t.k, t.X, t.m, Yv, t.n);
		int differ = 0;
		for (int p = 0; p < 2; p++) {
			memset(Y, 0, sizeof(float) * t.m * t.n);
			pg_matmul_tb(p ? pool : NULL, W, type, t.n, t.k, t.X, t.m, Y, t.n, tb);
			for (int64_t r = 0; r < t.m; r++)
				for (int64_t j = 0; j < t.n; j++) {
					const float got = Y[r * t.n + j], vd = Yv[r * t.n + j];
					const float want = tb[r] ? tinyblas_ref(t.Wr + j * t.k, t.Xr + r * t.k, t.k) : vd;
					ck_assert_msg(got == want, "%s %s row %d col %d: %a != %a", simd_isas[a],
						      f16 ? "f16" : "f32", (int)r, (int)j, got, want);
					differ += tb[r] && want != vd;
				}
		}
		/* the data tells the orders apart, so the check above means something */
		ck_assert_int_gt(differ, 0);
	}
	pg_cpu_set_isa(saved);
	pg_pool_destroy(pool);
	free(Y);
	free(Yv);
	mats_free(&t);
}
END_TEST

/* Where llamafile_sgemm declines (k % 16 != 0, rows % 4 != 0, the generic
 * build, other weight types), every row keeps vec_dot's order. */
START_TEST(test_declined_shapes_keep_vec_dot)
{
	const char *saved = pg_cpu_isa();
	static const struct {
		const char *isa;
		uint32_t type;
		int64_t n, k;
	} cases[] = {
		{ "avx512", PG_TYPE_F32, 12, 16 * 9 + 8 }, { "avx2", PG_TYPE_F32, 12, 16 * 9 + 8 },
		{ "avx512", PG_TYPE_F16, 10, 16 * 9 },     { "avx2", PG_TYPE_F32, 10, 16 * 9 },
		{ "scalar", PG_TYPE_F32, 12, 16 * 9 },     { "scalar", PG_TYPE_F16, 12, 16 * 9 },
		{ "avx512", PG_TYPE_Q8_0, 12, 32 * 9 },    { "avx512", PG_TYPE_BF16, 12, 16 * 9 },
	};
	const bool tb[5] = { true, true, true, false, true };
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		if (!pg_cpu_set_isa(cases[c].isa))
			continue;
		const int64_t n = cases[c].n, k = cases[c].k, m = 5;
		const uint32_t type = cases[c].type;
		ck_assert(!pg_matmul_tb_applies(type, n, k));
		float *Wf = malloc(sizeof(float) * n * k), *X = malloc(sizeof(float) * m * k);
		void *W = malloc(pg_row_size(type, (uint64_t)k) * n);
		float *Y = malloc(sizeof(float) * m * n), *Yv = malloc(sizeof(float) * m * n);
		for (int64_t i = 0; i < n * k; i++)
			Wf[i] = grand();
		for (int64_t i = 0; i < m * k; i++)
			X[i] = grand();
		for (int64_t j = 0; j < n; j++)
			pg_quantize_row(type, Wf + j * k, (char *)W + pg_row_size(type, (uint64_t)k) * j, k);
		pg_matmul(NULL, W, type, n, k, X, m, Yv, n);
		pg_matmul_tb(NULL, W, type, n, k, X, m, Y, n, tb);
		ck_assert_msg(memcmp(Y, Yv, sizeof(float) * m * n) == 0, "case %d (%s)", (int)c, cases[c].isa);
		free(Wf);
		free(X);
		free(W);
		free(Y);
		free(Yv);
	}
	pg_cpu_set_isa(saved);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sgemm_order");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_prompt_rows_follow_tinyblas, 0, 4);
	tcase_add_test(tc, test_declined_shapes_keep_vec_dot);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
