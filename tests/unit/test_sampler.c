/* tests/unit/test_sampler.c — greedy decoding's argmax against the plain
 * scan it replaces (llama.cpp's: the first maximum, NaNs never taken):
 * random logits, ties, NaNs, signed zeros, infinities, every short length. */
#include "daemon/engine/sampler.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

#define TEST_RNG_SEED 0x5a3c9e1f27d4b681ull
#include "tests/unit/test_rng.h"

static int32_t scan(const float *x, int n)
{
	int32_t best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* Values from a small set, so ties and specials are common. */
static float pick(void)
{
	static const float v[] = { 0.0f, -0.0f, 1.0f, -1.0f, 2.5f, INFINITY, -INFINITY, NAN, 1e-40f };
	return rnd() % 3 ? v[rnd() % (sizeof v / sizeof v[0])] : frand();
}

START_TEST(test_argmax_matches_scan)
{
	float x[300];
	for (int n = 1; n <= 300; n++)
		for (int rep = 0; rep < 40; rep++) {
			for (int i = 0; i < n; i++)
				x[i] = pick();
			ck_assert_int_eq(sampler_argmax(x, n), scan(x, n));
		}
}
END_TEST

START_TEST(test_argmax_vocab)
{
	enum { N = 32000 };
	float *x = malloc(N * sizeof *x);
	for (int rep = 0; rep < 50; rep++) {
		for (int i = 0; i < N; i++)
			x[i] = grand();
		const int at = (int)(rnd() % N), dup = (int)(rnd() % N);
		x[at] = 9.0f;
		x[dup] = 9.0f; /* the first of the two wins */
		ck_assert_int_eq(sampler_argmax(x, N), at < dup ? at : dup);
		ck_assert_int_eq(sampler_argmax(x, N), scan(x, N));
	}
	x[0] = NAN; /* a scan never leaves a NaN first element */
	ck_assert_int_eq(sampler_argmax(x, N), 0);
	free(x);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sampler");
	TCase *tc = tcase_create("argmax");
	tcase_add_test(tc, test_argmax_matches_scan);
	tcase_add_test(tc, test_argmax_vocab);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
