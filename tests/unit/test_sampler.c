/* tests/unit/test_sampler.c — greedy decoding's argmax against the plain
 * scan it replaces (llama.cpp's: the first maximum, NaNs never taken):
 * random logits, ties, NaNs, signed zeros, infinities, every short length.
 * OpenAI's presence and frequency penalties against their definition, and
 * top logprobs against a sort. */
#include "daemon/engine/logprob.h"
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

/* Over the output only (history[gen_from..]); a logit drops by presence
 * once and by frequency per occurrence; counts start from zero each call. */
START_TEST(test_oai_penalties)
{
	enum { V = 8 };
	struct sampling p;
	sampling_defaults(&p);
	p.temp = 0;
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.25f;
	struct sampler smp;
	ck_assert_int_eq(sampler_init(&smp, &p, V), 0);
	smp.gen_from = 4;
	const int32_t hist[] = { 1, 1, 1, 5, /* output: */ 2, 2, 3, 2, 7 };
	for (int round = 0; round < 2; round++) {
		float l[V] = { 0 };
		l[1] = 0.1f;
		ck_assert_int_eq(sampler_sample(&smp, l, hist, 9), 1); /* the prompt's token is not penalized */
		ck_assert(l[1] == 0.1f && l[5] == 0 && l[0] == 0);
		ck_assert_float_eq_tol(l[2], -(0.5f + 3 * 0.25f), 1e-6);
		ck_assert_float_eq_tol(l[3], -(0.5f + 0.25f), 1e-6);
		ck_assert_float_eq_tol(l[7], -(0.5f + 0.25f), 1e-6);
	}
	/* negative values favour repeats */
	smp.p.presence_penalty = -1;
	smp.p.frequency_penalty = 0;
	float l[V] = { 0 };
	l[1] = 0.1f;
	ck_assert_int_eq(sampler_sample(&smp, l, hist, 9), 2);
	sampler_free(&smp);
}
END_TEST

START_TEST(test_top_logprobs)
{
	enum { V = 1000 };
	float *x = malloc(V * sizeof *x);
	struct engine_req r = { 0 };
	for (int rep = 0; rep < 200; rep++) {
		for (int i = 0; i < V; i++)
			x[i] = rnd() % 4 ? grand() : (float)(rnd() % 5); /* many ties */
		r.top_logprobs = 1 + (int)(rnd() % ENGINE_TOP_LOGPROBS);
		int32_t tok = (int32_t)(rnd() % V);
		logprob_fill(&r, x, V, tok);
		ck_assert_int_eq(r.n_top, r.top_logprobs);
		double sum = 0;
		for (int i = 0; i < V; i++)
			sum += exp((double)x[i]);
		ck_assert_float_eq_tol(r.logprob, x[tok] - log(sum), 1e-4);
		for (int k = 0; k < r.n_top; k++) {
			int32_t id = r.top_ids[k];
			ck_assert_float_eq_tol(r.top_lp[k], x[id] - log(sum), 1e-4);
			/* exactly the tokens that beat it, or tie it with a lower id */
			int above = 0;
			for (int i = 0; i < V; i++)
				above += x[i] > x[id] || (x[i] == x[id] && i < id);
			ck_assert_int_eq(above, k);
		}
	}
	r.top_logprobs = 0;
	logprob_fill(&r, x, V, 3);
	ck_assert_int_eq(r.n_top, 0);
	free(x);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sampler");
	TCase *tc = tcase_create("argmax");
	tcase_add_test(tc, test_argmax_matches_scan);
	tcase_add_test(tc, test_argmax_vocab);
	tcase_add_test(tc, test_oai_penalties);
	tcase_add_test(tc, test_top_logprobs);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
