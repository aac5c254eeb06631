/* tests/unit/test_attn_q.c — attention over a quantized KV cache
 * (pg_attn_chunk_q) for every pair of cache types: the same bits on every
 * ISA the machine has (the scalar table included, as golden.sh's ISA runs
 * need), close to exact attention over the values the cache holds, read
 * through shuffled blocks; and the cache's rows as llama.cpp writes them
 * (pg_kv_store_row); the Hadamard rotation around it (pg_kv_rotate).
 * Bit-exactness against llama.cpp itself is tests/e2e/kv_quant.sh's and
 * bench/peer_attn_q.c's. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "tests/unit/test_rng.h"

static const uint32_t types[] = { PG_TYPE_F16,	  PG_TYPE_Q8_0, PG_TYPE_Q4_0, PG_TYPE_Q4_1,
				  PG_TYPE_IQ4_NL, PG_TYPE_Q5_0, PG_TYPE_Q5_1 };
#define NT ((int)(sizeof types / sizeof types[0]))
#define BS 16
#define HKV 2
#define GROUP 4
static const char *const isas[] = { "scalar", "avx2", "avx512" };

/* A paged cache of n positions, HKV heads of hd: K rows of tk, V rows of
 * tv, blocks in shuffled order; kf/vf hold the values it decodes to. */
struct qcache {
	int n, hd, nb;
	uint32_t tk, tv;
	size_t krow, vrow;
	uint8_t *k, *v;
	const uint8_t **kb, **vb; /* per head: nb block pointers */
	float *kf, *vf;		  /* [n][HKV * hd] */
};

static void fill(struct qcache *c, int n, int hd, uint32_t tk, uint32_t tv)
{
	const int kvd = HKV * hd;
	c->n = n;
	c->hd = hd;
	c->tk = tk;
	c->tv = tv;
	c->nb = (n + BS - 1) / BS;
	c->krow = pg_row_size(tk, (uint64_t)kvd);
	c->vrow = pg_row_size(tv, (uint64_t)kvd);
	c->k = calloc((size_t)c->nb * BS, c->krow);
	c->v = calloc((size_t)c->nb * BS, c->vrow);
	c->kf = malloc((size_t)n * kvd * sizeof(float));
	c->vf = malloc((size_t)n * kvd * sizeof(float));
	c->kb = malloc((size_t)HKV * c->nb * sizeof *c->kb);
	c->vb = malloc((size_t)HKV * c->nb * sizeof *c->vb);
	int *perm = malloc((size_t)c->nb * sizeof *perm);
	for (int i = 0; i < c->nb; i++)
		perm[i] = i;
	for (int i = c->nb - 1; i > 0; i--) {
		const int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	float x[2 * 512];
	for (int p = 0; p < n; p++) {
		uint8_t *kr = c->k + ((size_t)perm[p / BS] * BS + p % BS) * c->krow;
		uint8_t *vr = c->v + ((size_t)perm[p / BS] * BS + p % BS) * c->vrow;
		for (int i = 0; i < kvd; i++)
			x[i] = grand() * 2.0f;
		pg_kv_store_row(tk, x, kr, kvd);
		for (int i = 0; i < kvd; i++)
			x[i] = grand();
		pg_kv_store_row(tv, x, vr, kvd);
		pg_dequant_row(tk, kr, c->kf + (size_t)p * kvd, kvd);
		pg_dequant_row(tv, vr, c->vf + (size_t)p * kvd, kvd);
	}
	const size_t kh = pg_row_size(tk, (uint64_t)hd), vh = pg_row_size(tv, (uint64_t)hd);
	for (int h = 0; h < HKV; h++)
		for (int b = 0; b < c->nb; b++) {
			c->kb[h * c->nb + b] = c->k + (size_t)perm[b] * BS * c->krow + (size_t)h * kh;
			c->vb[h * c->nb + b] = c->v + (size_t)perm[b] * BS * c->vrow + (size_t)h * vh;
		}
	free(perm);
}

static void unfill(struct qcache *c)
{
	free(c->k);
	free(c->v);
	free(c->kf);
	free(c->vf);
	free(c->kb);
	free(c->vb);
}

/* softmax(q·k * scale) · v in double over the cache's values */
static void exact(const struct qcache *c, int h, const float *q, int len, float scale, float *out)
{
	const int hd = c->hd, kvd = HKV * hd;
	double *w = malloc((size_t)len * sizeof *w), mx = -INFINITY, sum = 0;
	for (int p = 0; p < len; p++) {
		double s = 0;
		for (int i = 0; i < hd; i++)
			s += (double)q[i] * c->kf[(size_t)p * kvd + h * hd + i];
		w[p] = s * scale;
		mx = w[p] > mx ? w[p] : mx;
	}
	for (int p = 0; p < len; p++)
		sum += (w[p] = exp(w[p] - mx));
	for (int i = 0; i < hd; i++) {
		double a = 0;
		for (int p = 0; p < len; p++)
			a += w[p] * c->vf[(size_t)p * kvd + h * hd + i];
		out[i] = (float)(a / sum);
	}
	free(w);
}

/* _i: K type i / NT, V type i % NT; two lengths and two head sizes each */
START_TEST(test_isas_agree_and_attend)
{
	const uint32_t tk = types[_i / NT], tv = types[_i % NT];
	const char *saved = pg_cpu_isa();
	for (int shape = 0; shape < 2; shape++) {
		const int hd = shape ? 128 : 64, len = shape ? 37 : 150, nq = GROUP;
		const float scale = 1.0f / sqrtf((float)hd);
		struct qcache c;
		fill(&c, len, hd, tk, tv);
		float *q = malloc((size_t)nq * hd * sizeof(float)), *ref = malloc((size_t)nq * hd * sizeof(float));
		float *got = malloc((size_t)nq * hd * sizeof(float)), *ex = malloc((size_t)hd * sizeof(float));
		for (int i = 0; i < nq * hd; i++)
			q[i] = grand();
		for (int h = 0; h < HKV; h++) {
			const struct pg_attn_kvq kv = { c.kb + h * c.nb, c.vb + h * c.nb, tk, tv, BS, c.krow, c.vrow };
			ck_assert(pg_cpu_set_isa("scalar"));
			pg_attn_chunk_q(&kv, len, hd, scale, q, hd, nq, ref, hd);
			for (int i = 1; i < 3; i++) {
				if (!pg_cpu_set_isa(isas[i]))
					continue;
				memset(got, 0, (size_t)nq * hd * sizeof(float));
				pg_attn_chunk_q(&kv, len, hd, scale, q, hd, nq, got, hd);
				ck_assert_msg(!memcmp(got, ref, (size_t)nq * hd * sizeof(float)),
					      "K %s V %s hd %d: %s differs from scalar", pg_type_name(tk), pg_type_name(tv), hd,
					      isas[i]);
			}
			/* the query is rounded to K's vec-dot type and an f16 V
			 * summed in f16: close to exact, not equal */
			for (int r = 0; r < nq; r++) {
				exact(&c, h, q + r * hd, len, scale, ex);
				for (int i = 0; i < hd; i++)
					ck_assert_msg(fabsf(ref[r * hd + i] - ex[i]) < 0.03f,
						      "K %s V %s hd %d row %d [%d]: %g, exact %g", pg_type_name(tk),
						      pg_type_name(tv), hd, r, i, ref[r * hd + i], ex[i]);
			}
		}
		free(q);
		free(ref);
		free(got);
		free(ex);
		unfill(&c);
	}
	ck_assert(pg_cpu_set_isa(saved));
}
END_TEST

/* One position: the output is that position's V, whatever the score. */
START_TEST(test_one_position_is_its_v)
{
	for (int t = 0; t < NT; t++) {
		struct qcache c;
		fill(&c, 1, 64, PG_TYPE_Q8_0, types[t]);
		float q[64], out[64];
		for (int i = 0; i < 64; i++)
			q[i] = grand();
		const struct pg_attn_kvq kv = { c.kb, c.vb, c.tk, c.tv, BS, c.krow, c.vrow };
		pg_attn_chunk_q(&kv, 1, 64, 0.125f, q, 64, 1, out, 64);
		for (int i = 0; i < 64; i++)
			ck_assert_float_eq(out[i], c.vf[i]);
		unfill(&c);
	}
}
END_TEST

/* The cache's rows as llama.cpp's ggml_set_rows writes them: f16
 * rounding, Q8_0 by the x86 activation quantizer (round half to even,
 * 127/amax), the reference quantizers for Q4_0, Q4_1, Q5_0, Q5_1; IQ4_NL
 * one least-squares fit a block, within what 4 bits give. */
START_TEST(test_store_row)
{
	const int n = 256;
	float x[256], y[256];
	uint8_t a[1024], b[1024];
	for (int i = 0; i < n; i++)
		x[i] = grand();
	x[0] = 127.0f; /* the block's scale 1: 2.5 is a tie, where roundf and round-half-even part */
	x[5] = 2.5f;
	pg_kv_store_row(PG_TYPE_Q8_0, x, a, n);
	pg_quantize_act(PG_TYPE_Q8_0, x, b, n);
	ck_assert(!memcmp(a, b, pg_row_size(PG_TYPE_Q8_0, n)));
	ck_assert_int_eq(((const block_q8_0 *)a)->qs[5], 2);
	pg_quantize_row(PG_TYPE_Q8_0, x, b, n);
	ck_assert_int_eq(((const block_q8_0 *)b)->qs[5], 3); /* the file quantizer's roundf */
	const uint32_t ref[] = { PG_TYPE_Q4_0, PG_TYPE_Q4_1, PG_TYPE_Q5_0, PG_TYPE_Q5_1 };
	for (int t = 0; t < 4; t++) {
		pg_kv_store_row(ref[t], x, a, n);
		ck_assert_uint_eq(pg_quantize_row(ref[t], x, b, n), pg_row_size(ref[t], n));
		ck_assert(!memcmp(a, b, pg_row_size(ref[t], n)));
	}
	pg_kv_store_row(PG_TYPE_F16, x, a, n);
	for (int i = 0; i < n; i++)
		ck_assert_uint_eq(((const pg_f16 *)a)[i], pg_f32_to_f16(x[i]));
	pg_kv_store_row(PG_TYPE_IQ4_NL, x, a, n);
	pg_dequant_row(PG_TYPE_IQ4_NL, a, y, n);
	double e = 0, s = 0;
	for (int i = 0; i < n; i++) {
		e += (double)(x[i] - y[i]) * (x[i] - y[i]);
		s += (double)x[i] * x[i];
	}
	ck_assert_msg(sqrt(e / s) < 0.12, "IQ4_NL row: relative error %g", sqrt(e / s));
	/* a block of zeros stores a zero scale and decodes to zeros */
	memset(x, 0, 32 * sizeof(float));
	pg_kv_store_row(PG_TYPE_IQ4_NL, x, a, 32);
	pg_dequant_row(PG_TYPE_IQ4_NL, a, y, 32);
	for (int i = 0; i < 32; i++)
		ck_assert_float_eq(y[i], 0.0f);
}
END_TEST

/* The rotation llama.cpp applies around a quantized cache: the Sylvester
 * Hadamard matrix H (H[i][j] = (-1)^popcount(i & j) / sqrt(n)) times each
 * chunk of n, its own inverse; bit for bit ggml's FWHT is
 * bench/peer_attn_q.c's. */
START_TEST(test_rotate)
{
	for (int n = 64; n <= 256; n *= 2) {
		float x[2 * 256], y[2 * 256];
		for (int i = 0; i < 2 * n; i++)
			x[i] = y[i] = grand();
		pg_kv_rotate(y, 2 * n, n);
		for (int c = 0; c < 2; c++)
			for (int i = 0; i < n; i++) {
				double want = 0;
				for (int j = 0; j < n; j++)
					want += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[c * n + j];
				want /= sqrt((double)n);
				ck_assert_msg(fabs(y[c * n + i] - want) < 1e-5, "n %d [%d]: %g, want %g", n, c * n + i,
					      y[c * n + i], want);
			}
		pg_kv_rotate(y, 2 * n, n);
		for (int i = 0; i < 2 * n; i++)
			ck_assert_msg(fabsf(y[i] - x[i]) < 1e-5f, "n %d: twice is not the identity at %d", n, i);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("attn_q");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_isas_agree_and_attend, 0, NT * NT);
	tcase_add_test(tc, test_one_position_is_its_v);
	tcase_add_test(tc, test_store_row);
	tcase_add_test(tc, test_rotate);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
