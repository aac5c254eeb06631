/* tests/unit/test_kernels.c — CPU kernels: every type on every ISA the
 * machine has, against the scalar reference and against plain double math
 * on the dequantized operands. */
#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pf_tune.h"
#include "kernels/cpu/repack.h"

static const char *const all_isas[] = { "scalar", "avx2", "avx512" };
static const char *saved_isa;

static void save_isa(void)
{
	saved_isa = pg_cpu_isa();
}
static void restore_isa(void)
{
	pg_cpu_set_isa(saved_isa);
}

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "tests/unit/test_rng.h"
static void fill(float *x, int64_t n, float scale)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = grand() * scale;
}

static const uint32_t mm_types[] = {
	PG_TYPE_F32, PG_TYPE_F16, PG_TYPE_BF16, PG_TYPE_Q4_0, PG_TYPE_Q4_1, PG_TYPE_Q5_0,
	PG_TYPE_Q5_1, PG_TYPE_Q8_0, PG_TYPE_Q2_K, PG_TYPE_Q3_K, PG_TYPE_Q4_K, PG_TYPE_Q5_K, PG_TYPE_Q6_K,
	PG_TYPE_IQ4_NL, PG_TYPE_IQ4_XS,
};
#define NTYPES (sizeof(mm_types) / sizeof(mm_types[0]))

static bool is_k_quant(uint32_t t)
{
	return t == PG_TYPE_Q2_K || t == PG_TYPE_Q3_K || t == PG_TYPE_Q4_K || t == PG_TYPE_Q5_K ||
	       t == PG_TYPE_Q6_K || t == PG_TYPE_IQ4_XS;
}

static bool is_float(uint32_t t)
{
	return t == PG_TYPE_F32 || t == PG_TYPE_F16 || t == PG_TYPE_BF16;
}

/* Quantizes n random rows of k into a fresh buffer of type t. */
static void *make_weights(uint32_t t, int64_t n, int64_t k, float **f32_out)
{
	size_t rs = pg_row_size(t, (uint64_t)k);
	ck_assert_uint_gt(rs, 0);
	char *w = malloc(rs * (size_t)n);
	float *f = malloc(sizeof(float) * (size_t)(n * k));
	fill(f, n * k, 0.5f);
	for (int64_t j = 0; j < n; j++)
		ck_assert_uint_eq(pg_quantize_row(t, f + j * k, w + (size_t)j * rs, k), rs);
	if (f32_out)
		*f32_out = f;
	else
		free(f);
	return w;
}

/* Y from double math on dequantized weights and dequantized converted
 * activations, plus sum |w||x| per element to scale the tolerance. */
static void naive_matmul(uint32_t t, const void *W, int64_t n, int64_t k, const float *X, int64_t m, double *Y,
			 double *mag)
{
	size_t rs = pg_row_size(t, (uint64_t)k);
	size_t xs = pg_act_row_size(t, k);
	float *wf = malloc(sizeof(float) * (size_t)k), *xf = malloc(sizeof(float) * (size_t)(k * m));
	void *xq = malloc(xs);
	for (int64_t i = 0; i < m; i++) {
		pg_quantize_act(t, X + i * k, xq, k);
		pg_dequant_row(pg_vec_dot_type(t), xq, xf + i * k, k);
	}
	for (int64_t j = 0; j < n; j++) {
		pg_dequant_row(t, (const char *)W + (size_t)j * rs, wf, k);
		for (int64_t i = 0; i < m; i++) {
			double s = 0, a = 0;
			for (int64_t l = 0; l < k; l++) {
				s += (double)wf[l] * xf[i * k + l];
				a += fabs((double)wf[l] * xf[i * k + l]);
			}
			Y[i * n + j] = s;
			mag[i * n + j] = a;
		}
	}
	free(wf);
	free(xf);
	free(xq);
}

struct shape {
	int64_t m, n, k;
};
static const struct shape shapes[] = {
	{ 1, 1, 256 }, { 1, 37, 512 }, { 2, 16, 256 }, { 3, 17, 768 }, { 4, 8, 256 },
	{ 5, 33, 512 }, { 7, 64, 1024 }, { 13, 40, 256 }, { 33, 19, 512 },
	/* enough rows for many chunks on each thread, taken from the front
	 * and from the back, with and without whole groups of 8 */
	{ 1, 1000, 256 }, { 3, 1032, 256 },
};

static void check_matmul_type(uint32_t t, struct pg_pool *pool)
{
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const int64_t m = shapes[si].m, n = shapes[si].n;
		int64_t k = shapes[si].k;
		if (!is_k_quant(t) && si % 3 == 1)
			k += 32 * 3; /* not a multiple of 256: 32-blocks and tails */
		if (t == PG_TYPE_F32 || t == PG_TYPE_F16 || t == PG_TYPE_BF16)
			k += si % 2 ? 5 : 0; /* odd k for the float kernels' tails */
		void *W = make_weights(t, n, k, NULL);
		float *X = malloc(sizeof(float) * (size_t)(m * k));
		fill(X, m * k, 1.0f);
		const int64_t ldy = n + 3;
		float *Yref = malloc(sizeof(float) * (size_t)(m * ldy));
		float *Y = malloc(sizeof(float) * (size_t)(m * ldy));
		double *Yd = malloc(sizeof(double) * (size_t)(m * n)), *mag = malloc(sizeof(double) * (size_t)(m * n));
		naive_matmul(t, W, n, k, X, m, Yd, mag);

		ck_assert(pg_cpu_set_isa("scalar"));
		pg_matmul(NULL, W, t, n, k, X, m, Yref, ldy);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double tol = 2e-4 * mag[i * n + j] + 1e-5;
				/* Q8_1's s is the block sum rounded to f16 */
				if (t == PG_TYPE_Q4_1 || t == PG_TYPE_Q5_1)
					tol = 2e-3 * mag[i * n + j] + 1e-4;
				ck_assert_msg(fabs(Yref[i * ldy + j] - Yd[i * n + j]) <= tol,
					      "%s scalar vs naive m=%ld n=%ld k=%ld [%ld,%ld]: %g vs %g", pg_type_name(t),
					      (long)m, (long)n, (long)k, (long)i, (long)j, Yref[i * ldy + j],
					      Yd[i * n + j]);
			}
		for (size_t ii = 0; ii < 3; ii++) {
			if (!pg_cpu_set_isa(all_isas[ii]))
				continue;
			for (int threaded = 0; threaded < 2; threaded++) {
				for (int64_t i = 0; i < m * ldy; i++)
					Y[i] = -12345.f;
				pg_matmul(threaded ? pool : NULL, W, t, n, k, X, m, Y, ldy);
				for (int64_t i = 0; i < m; i++) {
					for (int64_t j = 0; j < n; j++) {
						/* quantized types: ggml's x86 order on every ISA,
						 * bit for bit; float ones: the SIMD order only */
						const double tol = is_float(t) ? 1e-5 * mag[i * n + j] + 1e-6 : 0;
						ck_assert_msg(fabs(Y[i * ldy + j] - Yref[i * ldy + j]) <= tol,
							      "%s %s vs scalar m=%ld n=%ld k=%ld [%ld,%ld]: %g vs %g",
							      pg_type_name(t), all_isas[ii], (long)m, (long)n, (long)k,
							      (long)i, (long)j, Y[i * ldy + j], Yref[i * ldy + j]);
					}
					for (int64_t j = n; j < ldy; j++)
						ck_assert_float_eq(Y[i * ldy + j], -12345.f); /* padding untouched */
				}
			}
		}
		free(W);
		free(X);
		free(Y);
		free(Yref);
		free(Yd);
		free(mag);
	}
}

START_TEST(test_matmul_types)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	check_matmul_type(mm_types[_i], pool);
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* A batch must give the same numbers as its rows one at a time. */
START_TEST(test_matmul_batch_equals_rows)
{
	save_isa();
	const uint32_t t = mm_types[_i];
	const int64_t n = 24, k = 512, m = 11;
	void *W = make_weights(t, n, k, NULL);
	float *X = malloc(sizeof(float) * m * k), *Yb = malloc(sizeof(float) * m * n), *Yr = malloc(sizeof(float) * n);
	fill(X, m * k, 2.0f);
	pg_matmul(NULL, W, t, n, k, X, m, Yb, n);
	for (int64_t i = 0; i < m; i++) {
		pg_matmul(NULL, W, t, n, k, X + i * k, 1, Yr, n);
		for (int64_t j = 0; j < n; j++)
			ck_assert_msg(fabsf(Yr[j] - Yb[i * n + j]) <= 1e-4f * (fabsf(Yr[j]) + 1.0f), "%s row %ld col %ld",
				      pg_type_name(t), (long)i, (long)j);
	}
	free(W);
	free(X);
	free(Yb);
	free(Yr);
	restore_isa();
}
END_TEST

START_TEST(test_act_quant_exact_across_isas)
{
	save_isa();
	const uint32_t wt[] = { PG_TYPE_Q8_0, PG_TYPE_Q4_1, PG_TYPE_Q4_K, PG_TYPE_F16, PG_TYPE_BF16 };
	const int64_t k = 2048;
	float *x = malloc(sizeof(float) * k);
	for (size_t w = 0; w < sizeof(wt) / sizeof(wt[0]); w++) {
		size_t rs = pg_act_row_size(wt[w], k);
		char *ref = malloc(rs), *got = malloc(rs);
		for (int rep = 0; rep < 20; rep++) {
			fill(x, k, rep % 2 ? 1e-3f : 30.0f);
			if (rep == 3)
				memset(x, 0, sizeof(float) * 64); /* all-zero blocks */
			if (rep == 5)
				for (int64_t i = 0; i < k; i++) /* exact .5 ties after scaling */
					x[i] = (float)((int)(rnd() % 255) - 127) * 0.5f;
			ck_assert(pg_cpu_set_isa("scalar"));
			pg_quantize_act(wt[w], x, ref, k);
			for (size_t ii = 1; ii < 3; ii++) {
				if (!pg_cpu_set_isa(all_isas[ii]))
					continue;
				memset(got, 0xAA, rs);
				pg_quantize_act(wt[w], x, got, k);
				ck_assert_msg(memcmp(ref, got, rs) == 0, "%s activations differ on %s",
					      pg_type_name(pg_vec_dot_type(wt[w])), all_isas[ii]);
			}
		}
		free(ref);
		free(got);
	}
	free(x);
	restore_isa();
}
END_TEST

/* dequant(quantize(x)): relative RMS error within what each format gives. */
START_TEST(test_quant_roundtrip)
{
	static const struct {
		uint32_t t;
		double max_rel_rmse;
	} lim[] = {
		{ PG_TYPE_F32, 0 },	{ PG_TYPE_F16, 6e-4 },	 { PG_TYPE_BF16, 4e-3 }, { PG_TYPE_Q4_0, 0.13 },
		{ PG_TYPE_Q4_1, 0.11 }, { PG_TYPE_Q5_0, 0.065 }, { PG_TYPE_Q5_1, 0.055 }, { PG_TYPE_Q8_0, 0.006 },
		{ PG_TYPE_Q8_K, 0.008 }, { PG_TYPE_Q4_K, 0.10 }, { PG_TYPE_Q5_K, 0.05 },  { PG_TYPE_Q6_K, 0.025 },
	};
	const int64_t k = 4096;
	float *x = malloc(sizeof(float) * k), *y = malloc(sizeof(float) * k);
	void *q = malloc(pg_row_size(PG_TYPE_F32, k));
	for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
		fill(x, k, 3.0f);
		size_t rs = pg_quantize_row(lim[i].t, x, q, k);
		ck_assert_uint_eq(rs, pg_row_size(lim[i].t, k));
		pg_dequant_row(lim[i].t, q, y, k);
		double e = 0, s = 0;
		for (int64_t j = 0; j < k; j++) {
			e += (double)(x[j] - y[j]) * (x[j] - y[j]);
			s += (double)x[j] * x[j];
		}
		double rel = sqrt(e / s);
		ck_assert_msg(rel <= lim[i].max_rel_rmse, "%s: relative rmse %g > %g", pg_type_name(lim[i].t), rel,
			      lim[i].max_rel_rmse);
		/* all-zero input stays zero */
		memset(x, 0, sizeof(float) * k);
		pg_quantize_row(lim[i].t, x, q, k);
		pg_dequant_row(lim[i].t, q, y, k);
		for (int64_t j = 0; j < k; j++)
			ck_assert_float_eq(y[j], 0.0f);
	}
	ck_assert_uint_eq(pg_quantize_row(PG_TYPE_Q4_K, x, q, 100), 0); /* not whole blocks */
	ck_assert_uint_eq(pg_quantize_row(PG_TYPE_I32, x, q, 256), 0);
	free(x);
	free(y);
	free(q);
}
END_TEST

/* Values worked out by hand from ggml's formulas. */
START_TEST(test_quant_known_values)
{
	float x[32], y[32];
	block_q4_0 b4;
	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16);
	pg_quantize_row(PG_TYPE_Q4_0, x, &b4, 32);
	ck_assert_float_eq(pg_f16_to_f32(b4.d), 2.0f); /* max = -16 -> d = -16/-8 */
	ck_assert_uint_eq(b4.qs[0] & 0xF, 0);	       /* -16*0.5+8.5 = 0.5 -> 0 */
	ck_assert_uint_eq(b4.qs[1] & 0xF, 1);	       /* 1.0 */
	ck_assert_uint_eq(b4.qs[2] & 0xF, 1);	       /* 1.5 truncates */
	ck_assert_uint_eq(b4.qs[15] >> 4, 15);	       /* 16 clamps */
	pg_dequant_row(PG_TYPE_Q4_0, &b4, y, 32);
	ck_assert_float_eq(y[0], -16.0f);
	ck_assert_float_eq(y[31], 14.0f);

	/* q8_0 activations: 127/amax and ties to even (x86 ggml), where the
	 * reference quantizer's roundf goes away from zero */
	block_q8_0 a, r;
	for (int j = 0; j < 32; j++)
		x[j] = 0;
	x[0] = 127.0f;
	x[1] = 2.5f;
	x[2] = -3.5f;
	pg_quantize_act(PG_TYPE_Q8_0, x, &a, 32);
	pg_quantize_row(PG_TYPE_Q8_0, x, &r, 32);
	ck_assert_int_eq(a.qs[0], 127);
	ck_assert_int_eq(a.qs[1], 2);
	ck_assert_int_eq(a.qs[2], -4);
	ck_assert_int_eq(r.qs[1], 3);
	ck_assert_float_eq(pg_f16_to_f32(a.d), 1.0f);
}
END_TEST

START_TEST(test_f16_bf16_roundtrip)
{
	save_isa();
	/* every finite half survives half -> float -> half, on every ISA */
	enum { N = 65536 };
	pg_f16 *h = malloc(sizeof(pg_f16) * N), *h2 = malloc(sizeof(pg_f16) * N);
	float *f = malloc(sizeof(float) * N), *g = malloc(sizeof(float) * N);
	for (int i = 0; i < N; i++)
		h[i] = (pg_f16)i;
	for (size_t ii = 0; ii < 3; ii++) {
		if (!pg_cpu_set_isa(all_isas[ii]))
			continue;
		pg_f16_to_f32_row(h, f, N);
		pg_f32_to_f16_row(f, h2, N);
		for (int i = 0; i < N; i++) {
			if ((i & 0x7C00) == 0x7C00 && (i & 0x3FF))
				continue; /* NaN payloads */
			ck_assert_float_eq(f[i], pg_f16_to_f32(h[i]));
			ck_assert_msg(h2[i] == h[i], "%s: half %04x -> %04x", all_isas[ii], i, h2[i]);
		}
		/* random floats, including ties, round like the scalar code */
		for (int i = 0; i < N; i++) {
			uint32_t bits = rnd() << 1 ^ rnd();
			if (i % 4 == 0)
				bits = (bits & 0xFFFFE000u) | 0x1000u; /* exact half-way */
			memcpy(&g[i], &bits, 4);
			if (isnan(g[i]))
				g[i] = 1.0f;
		}
		pg_f32_to_f16_row(g, h2, N);
		for (int i = 0; i < N; i++)
			ck_assert_msg(h2[i] == pg_f32_to_f16(g[i]), "%s: %a -> %04x, scalar %04x", all_isas[ii],
				      (double)g[i], h2[i], pg_f32_to_f16(g[i]));
	}
	for (int i = 0; i < N; i++) {
		if ((i & 0x7F80) == 0x7F80 && (i & 0x7F))
			continue;
		ck_assert_uint_eq(pg_f32_to_bf16(pg_bf16_to_f32((pg_bf16)i)), (pg_bf16)i);
	}
	ck_assert_uint_eq(pg_f32_to_bf16(1.00390625f), 0x3F80); /* tie to even, down */
	ck_assert_uint_eq(pg_f32_to_bf16(1.01171875f), 0x3F82); /* tie to even, up */
	free(h);
	free(h2);
	free(f);
	free(g);
	restore_isa();
}
END_TEST

struct pool_probe {
	_Atomic int calls[64];
	_Atomic int nth_seen;
};

static void probe_fn(void *arg, int ith, int nth)
{
	struct pool_probe *p = arg;
	atomic_fetch_add(&p->calls[ith], 1);
	atomic_store(&p->nth_seen, nth);
}

START_TEST(test_pool)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int maxn = (int)(ncpu + 2 < 8 ? 8 : ncpu + 2);
	for (int n = 1; n <= maxn; n++) {
		struct pg_pool *p = pg_pool_create(n);
		ck_assert_ptr_nonnull(p);
		ck_assert_int_eq(pg_pool_size(p), n);
		struct pool_probe pr;
		memset(&pr, 0, sizeof(pr));
		const int reps = 300;
		for (int r = 0; r < reps; r++) {
			pg_pool_run(p, probe_fn, &pr);
			if (r == reps / 2) {
				/* let the workers fall asleep on the futex, then wake them */
				struct timespec ts = { 0, 30 * 1000 * 1000 };
				nanosleep(&ts, NULL);
			}
		}
		for (int i = 0; i < n; i++)
			ck_assert_int_eq(atomic_load(&pr.calls[i]), reps);
		ck_assert_int_eq(atomic_load(&pr.calls[n]), 0);
		ck_assert_int_eq(atomic_load(&pr.nth_seen), n);
		pg_pool_destroy(p);
	}
	struct pg_pool *d = pg_pool_create(0);
	ck_assert_int_eq(pg_pool_size(d), (int)ncpu);
	pg_pool_destroy(d);
	struct pool_probe pr;
	memset(&pr, 0, sizeof(pr));
	pg_pool_run(NULL, probe_fn, &pr);
	ck_assert_int_eq(atomic_load(&pr.calls[0]), 1);
}
END_TEST

START_TEST(test_elementwise)
{
	save_isa();
	const int64_t sizes[] = { 1, 7, 16, 37, 100, 4096 };
	float *x = malloc(sizeof(float) * 4096 * 4), *y = x + 4096, *w = y + 4096, *u = w + 4096;
	for (size_t ii = 0; ii < 3; ii++) {
		if (!pg_cpu_set_isa(all_isas[ii]))
			continue;
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			const int64_t n = sizes[si];
			fill(x, n, 4.0f);
			fill(w, n, 1.0f);
			fill(u, n, 2.0f);
			/* rmsnorm */
			double ss = 0;
			for (int64_t i = 0; i < n; i++)
				ss += (double)x[i] * x[i];
			const double sc = 1.0 / sqrt(ss / n + 1e-5);
			pg_rmsnorm(y, x, w, n, 1e-5f);
			for (int64_t i = 0; i < n; i++)
				ck_assert_msg(fabs(y[i] - x[i] * sc * w[i]) <= 1e-5 * fabs(x[i] * sc * w[i]) + 1e-7, "rmsnorm");
			pg_rmsnorm(y, x, NULL, n, 1e-5f);
			for (int64_t i = 0; i < n; i++)
				ck_assert(fabs(y[i] - x[i] * sc) <= 1e-5 * fabs(x[i] * sc) + 1e-7);
			/* swiglu */
			pg_swiglu(y, x, u, n);
			for (int64_t i = 0; i < n; i++) {
				const double e = x[i] / (1.0 + exp(-(double)x[i])) * u[i];
				ck_assert_msg(fabs(y[i] - e) <= 2e-6 * fabs(e) + 1e-7, "%s swiglu %g vs %g", all_isas[ii], y[i], e);
			}
			/* softmax, with a wide range so exp underflows for some */
			for (int64_t i = 0; i < n; i++)
				x[i] *= 10.0f;
			double mx = -INFINITY, se = 0;
			for (int64_t i = 0; i < n; i++)
				mx = fmax(mx, x[i]);
			for (int64_t i = 0; i < n; i++)
				se += exp((double)x[i] - mx);
			memcpy(y, x, sizeof(float) * n);
			pg_softmax(y, n);
			double tot = 0;
			for (int64_t i = 0; i < n; i++) {
				const double e = exp((double)x[i] - mx) / se;
				ck_assert_msg(fabs(y[i] - e) <= 1e-5 * e + 1e-9, "%s softmax %g vs %g", all_isas[ii], y[i], e);
				tot += y[i];
			}
			ck_assert(fabs(tot - 1.0) < 1e-5);
			/* f16 dot */
			pg_f16 *a = malloc(sizeof(pg_f16) * n), *b = malloc(sizeof(pg_f16) * n);
			pg_f32_to_f16_row(u, a, n);
			pg_f32_to_f16_row(w, b, n);
			double d = 0, mag = 0;
			for (int64_t i = 0; i < n; i++) {
				d += (double)pg_f16_to_f32(a[i]) * pg_f16_to_f32(b[i]);
				mag += fabs((double)pg_f16_to_f32(a[i]) * pg_f16_to_f32(b[i]));
			}
			ck_assert_msg(fabs(pg_dot_f16(a, b, n) - d) <= 1e-5 * mag + 1e-7, "%s dot_f16", all_isas[ii]);
			free(a);
			free(b);
		}
	}
	free(x);
	restore_isa();
}
END_TEST

/* ggml_vec_dot_f32/f16 as llama.cpp's AVX-512 build sums: 4 accumulators of
 * 16 lanes over steps of 64 (FMA), (a0+a2)+(a1+a3), then the halving tree of
 * _mm512_reduce_add_ps; leftovers in order, in float (f32: the products
 * rounded but for the last k % 8, FMA there) or in double (f16).
 * The SIMD ISAs must reproduce it bit for bit, for any m. */
static float ggml_avx512_dot(const float *w, const float *x, int64_t k, int f16)
{
	float a[4][16] = { { 0 } };
	int64_t i = 0;
	for (; i + 64 <= k; i += 64)
		for (int q = 0; q < 4; q++)
			for (int l = 0; l < 16; l++)
				a[q][l] = fmaf(w[i + 16 * q + l], x[i + 16 * q + l], a[q][l]);
	float h[16], t8[8], t4[4];
	for (int l = 0; l < 16; l++)
		h[l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
	for (int l = 0; l < 8; l++)
		t8[l] = h[l + 8] + h[l];
	for (int l = 0; l < 4; l++)
		t4[l] = t8[l + 4] + t8[l];
	const float r = (t4[0] + t4[2]) + (t4[1] + t4[3]);
	if (f16) {
		double d = r;
		for (; i < k; i++)
			d += (double)(w[i] * x[i]);
		return (float)d;
	}
	/* the binary's leftover loop: products rounded in its 16- and 8-wide
	 * vectorized parts, FMA for the last k % 8 */
	float f = r;
	const int64_t nf = i + (k - i) / 8 * 8;
	for (; i < k; i++)
		if (i >= nf) {
			f = fmaf(w[i], x[i], f);
		} else {
			volatile float p = w[i] * x[i]; /* not contracted into an FMA */
			f += p;
		}
	return f;
}

START_TEST(test_float_dot_order_is_ggml)
{
	save_isa();
	const int64_t n = 7, k = 64 * 5 + 29, m = 3;
	float *W = malloc(sizeof(float) * n * k), *X = malloc(sizeof(float) * m * k);
	pg_f16 *W16 = malloc(sizeof(pg_f16) * n * k), *X16 = malloc(sizeof(pg_f16) * m * k);
	float *Wr = malloc(sizeof(float) * n * k), *Xr = malloc(sizeof(float) * m * k);
	float Y[7 * 3];
	for (int64_t i = 0; i < n * k; i++)
		W[i] = grand();
	for (int64_t i = 0; i < m * k; i++)
		X[i] = grand() * 3;
	for (int f16 = 0; f16 < 2; f16++) {
		const uint32_t t = f16 ? PG_TYPE_F16 : PG_TYPE_F32;
		/* what the kernel sees: f16 weights, activations rounded to f16 */
		for (int64_t i = 0; i < n * k; i++) {
			W16[i] = pg_f32_to_f16(W[i]);
			Wr[i] = f16 ? pg_f16_to_f32(W16[i]) : W[i];
		}
		for (int64_t i = 0; i < m * k; i++) {
			X16[i] = pg_f32_to_f16(X[i]);
			Xr[i] = f16 ? pg_f16_to_f32(X16[i]) : X[i];
		}
		for (int a = 1; a < 3; a++) {
			if (!pg_cpu_set_isa(all_isas[a]))
				continue;
			pg_matmul(NULL, f16 ? (const void *)W16 : (const void *)W, t, n, k, X, m, Y, n);
			for (int64_t r = 0; r < m; r++)
				for (int64_t j = 0; j < n; j++) {
					const float want = ggml_avx512_dot(Wr + j * k, Xr + r * k, k, f16);
					ck_assert_msg(Y[r * n + j] == want, "%s %s row %d col %d: %a != %a", all_isas[a],
						      f16 ? "f16" : "f32", (int)r, (int)j, Y[r * n + j], want);
				}
			if (f16) {
				const float d = pg_dot_f16(W16, X16, 64);
				ck_assert(d == ggml_avx512_dot(Wr, Xr, 64, 1));
			}
		}
	}
	restore_isa();
	free(W);
	free(X);
	free(W16);
	free(X16);
	free(Wr);
	free(Xr);
}
END_TEST

/* Q4_0 and Q4_K follow llama.cpp's CPU backend on x86, which repacks
 * weights with a multiple of 8 rows (q4_0_8x8, q4_K_8x8) and keeps the
 * others on vec_dot (or tinyBLAS, same order for Q4_0):
 *  - repacked: one float accumulator per output, one FMA per block of the
 *    block's whole integer sum: acc = fma((float)isum, dw*dy, acc); Q4_K
 *    with a second chain for the mins (one FMA per super-block), acc - accm;
 *  - vec_dot: 8 lanes (lane l: elements 4l..4l+3 of each 32), FMA, then
 *    hsum_float_8; Q4_K's mins in 4 lanes (sub-blocks 2l, 2l+1) added last.
 * Every ISA must give these bits for any m, on any thread count. */
static int q4_0_level(const uint8_t *qs, int e)
{
	return (e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4) - 8;
}

static void q4_K_scale_min(const uint8_t *q, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

static float hsum_lanes8(const float *a)
{
	float t[4];
	for (int l = 0; l < 4; l++)
		t[l] = a[l + 4] + a[l];
	return (t[0] + t[2]) + (t[1] + t[3]);
}

static float ggml_q4_0_dot(const block_q4_0 *w, const block_q8_0 *y, int64_t nb, bool repacked)
{
	float acc = 0, lanes[8] = { 0 };
	for (int64_t b = 0; b < nb; b++) {
		const float d = pg_f16_to_f32(w[b].d) * pg_f16_to_f32(y[b].d);
		int tot = 0;
		for (int l = 0; l < 8; l++) {
			int s = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++)
				s += q4_0_level(w[b].qs, e) * y[b].qs[e];
			lanes[l] = fmaf(d, (float)s, lanes[l]);
			tot += s;
		}
		acc = fmaf((float)tot, d, acc);
	}
	return repacked ? acc : hsum_lanes8(lanes);
}

/* ggml's kvalues_iq4nl, restated here so that the oracles below do not
 * read the table the kernels use */
static const int8_t kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* IQ4_NL against Q8_0 in llama.cpp's three orders, lanes as Q4_0's:
 * ggml_vec_dot_iq4_nl_q8_0 (AVX2) puts even and odd blocks in two 8-lane
 * accumulators, added lane by lane before the hsum, an odd last block
 * added after (multiply, then add); tinyBLAS_Q0_AVX keeps one; the
 * repacked iq4_nl_8x8 one float chain. */
enum nl_order { NL_VEC_DOT, NL_TINYBLAS, NL_REPACKED };

static float ggml_iq4_nl_dot(const block_iq4_nl *w, const block_q8_0 *y, int64_t nb, enum nl_order o)
{
	float acc = 0, lanes[2][8] = { { 0 } };
	const int64_t paired = o == NL_VEC_DOT ? nb & ~(int64_t)1 : nb;
	for (int64_t b = 0; b < paired; b++) {
		const float d = pg_f16_to_f32(w[b].d) * pg_f16_to_f32(y[b].d);
		int tot = 0;
		for (int l = 0; l < 8; l++) {
			int s = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++)
				s += kvalues_iq4nl[e < 16 ? w[b].qs[e] & 0xF : w[b].qs[e - 16] >> 4] * y[b].qs[e];
			float *lane = &lanes[o == NL_VEC_DOT ? b % 2 : 0][l];
			*lane = fmaf(d, (float)s, *lane);
			tot += s;
		}
		acc = fmaf((float)tot, d, acc);
	}
	if (o == NL_REPACKED)
		return acc;
	float sum[8];
	for (int l = 0; l < 8; l++)
		sum[l] = lanes[0][l] + lanes[1][l];
	float r = hsum_lanes8(sum);
	if (paired < nb) {
		const int64_t b = paired;
		int tot = 0;
		for (int e = 0; e < 32; e++)
			tot += kvalues_iq4nl[e < 16 ? w[b].qs[e] & 0xF : w[b].qs[e - 16] >> 4] * y[b].qs[e];
		r += pg_f16_to_f32(w[b].d) * pg_f16_to_f32(y[b].d) * (float)tot; /* unfused */
	}
	return r;
}

/* IQ4_NL with a row count llama.cpp does not repack: vec_dot's order for a
 * plain matmul and an unflagged row, tinyBLAS's for a flagged one; with a
 * multiple of 8 rows the repacked order, flag or not. Odd and even block
 * counts, raw nibbles (every level), on every ISA. */
START_TEST(test_iq4_nl_orders_are_ggml)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const uint32_t t = PG_TYPE_IQ4_NL;
	const int64_t m = 6, ks[] = { 32, 96, 256, 352 }, ns[] = { 5, 13, 16 };
	for (size_t ki = 0; ki < 4; ki++)
		for (size_t ni = 0; ni < 3; ni++) {
			const int64_t k = ks[ki], n = ns[ni], nb = k / 32;
			block_iq4_nl *W = make_weights(t, n, k, NULL);
			for (int64_t b = 0; b < n * nb; b++)
				for (int e = 0; e < 16; e++)
					W[b].qs[e] = (uint8_t)rnd();
			ck_assert(pg_matmul_tb_applies(t, n, k) == (n % 8 != 0));
			const size_t xr = pg_act_row_size(t, k);
			float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
			char *Xq = malloc(xr * (size_t)m);
			fill(X, m * k, 2.0f);
			const bool tb[6] = { true, false, true, true, false, false };
			for (size_t a = 0; a < 3; a++) {
				if (!pg_cpu_set_isa(all_isas[a]))
					continue;
				for (int64_t r = 0; r < m; r++)
					pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
				for (int v = 0; v < 3; v++) {
					if (v == 0)
						pg_matmul(pool, W, t, n, k, X, m, Y, n);
					else
						pg_matmul_tb(v == 1 ? pool : NULL, W, t, n, k, X, m, Y, n, tb);
					for (int64_t r = 0; r < m; r++)
						for (int64_t j = 0; j < n; j++) {
							enum nl_order o = n % 8 == 0 ? NL_REPACKED
								: v > 0 && tb[r] ? NL_TINYBLAS : NL_VEC_DOT;
							const float want = ggml_iq4_nl_dot(W + j * nb,
								(const block_q8_0 *)(Xq + (size_t)r * xr), nb, o);
							ck_assert_msg(memcmp(&Y[r * n + j], &want, 4) == 0,
								      "%s n=%ld k=%ld v=%d row %ld col %ld order %d: %a != %a",
								      all_isas[a], (long)n, (long)k, v, (long)r, (long)j, o,
								      Y[r * n + j], want);
						}
				}
			}
			free(W);
			free(X);
			free(Y);
			free(Xq);
		}
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* ggml_gemm_q4_K_8x8_q8_K: the repacked order with one FMA per pair of
 * sub-blocks (64 elements) in each chain. */
static float ggml_q4_K_gemm_dot(const block_q4_K *w, const block_q8_K *y, int64_t nb)
{
	float acc = 0, accm = 0;
	for (int64_t b = 0; b < nb; b++) {
		const float d = pg_f16_to_f32(w[b].d) * y[b].d, dm = pg_f16_to_f32(w[b].dmin) * y[b].d;
		for (int p = 0; p < 4; p++) {
			int I = 0, M = 0;
			for (int h = 0; h < 2; h++) {
				int sc, mn;
				q4_K_scale_min(w[b].scales, 2 * p + h, &sc, &mn);
				M += mn * (y[b].bsums[4 * p + 2 * h] + y[b].bsums[4 * p + 2 * h + 1]);
				for (int e = 0; e < 32; e++) {
					const uint8_t q = w[b].qs[32 * p + e];
					I += sc * (h ? q >> 4 : q & 0xF) * y[b].qs[64 * p + 32 * h + e];
				}
			}
			acc = fmaf((float)I, d, acc);
			accm = fmaf((float)M, dm, accm);
		}
	}
	return acc - accm;
}

static float ggml_q4_K_dot(const block_q4_K *w, const block_q8_K *y, int64_t nb, bool repacked)
{
	float acc = 0, accm = 0, lanes[8] = { 0 }, mlanes[4] = { 0 };
	for (int64_t b = 0; b < nb; b++) {
		int sc[8], mn[8], S[8], B[8];
		for (int j = 0; j < 8; j++) {
			q4_K_scale_min(w[b].scales, j, &sc[j], &mn[j]);
			B[j] = y[b].bsums[2 * j] + y[b].bsums[2 * j + 1];
			S[j] = 0;
		}
		int lane_sum[8] = { 0 };
		for (int e = 0; e < QK_K; e++) {
			const int g = e / 64, hi = (e % 64) >= 32, l = (e % 32) / 4;
			const int q = hi ? w[b].qs[32 * g + e % 32] >> 4 : w[b].qs[32 * g + e % 32] & 0xF;
			const int j = 2 * g + hi;
			S[j] += q * y[b].qs[e];
			lane_sum[l] += sc[j] * q * y[b].qs[e];
		}
		int I = 0, M = 0;
		for (int j = 0; j < 8; j++) {
			I += sc[j] * S[j];
			M += mn[j] * B[j];
		}
		const float d = pg_f16_to_f32(w[b].d) * y[b].d, dm = pg_f16_to_f32(w[b].dmin) * y[b].d;
		acc = fmaf((float)I, d, acc);
		accm = fmaf((float)M, dm, accm);
		const float dmin = -y[b].d * pg_f16_to_f32(w[b].dmin);
		for (int l = 0; l < 8; l++)
			lanes[l] = fmaf(d, (float)lane_sum[l], lanes[l]);
		for (int l = 0; l < 4; l++)
			mlanes[l] = fmaf(dmin, (float)(mn[2 * l] * B[2 * l] + mn[2 * l + 1] * B[2 * l + 1]), mlanes[l]);
	}
	return repacked ? acc - accm : hsum_lanes8(lanes) + ((mlanes[0] + mlanes[2]) + (mlanes[1] + mlanes[3]));
}

START_TEST(test_q4_order_is_ggml)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const uint32_t types[] = { PG_TYPE_Q4_0, PG_TYPE_Q4_K };
	const int64_t ns[] = { 24, 12, 64 }; /* repacked, vec_dot, repacked */
	const int64_t m = 6;
	for (int ti = 0; ti < 2; ti++) {
		const uint32_t t = types[ti];
		const int64_t k = t == PG_TYPE_Q4_K ? 3 * QK_K : 7 * QK4_0;
		for (int ni = 0; ni < 3; ni++) {
			const int64_t n = ns[ni];
			const size_t wr = pg_row_size(t, (uint64_t)k), xr = pg_act_row_size(t, k);
			void *W = make_weights(t, n, k, NULL);
			float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
			char *Xq = malloc(xr * (size_t)m);
			fill(X, m * k, 2.0f);
			for (size_t a = 0; a < 3; a++) {
				if (!pg_cpu_set_isa(all_isas[a]))
					continue;
				for (int64_t r = 0; r < m; r++)
					pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
				for (int v = 0; v < 3; v++) {
					/* whole batch, threaded batch, one row at a time */
					if (v < 2)
						pg_matmul(v ? pool : NULL, W, t, n, k, X, m, Y, n);
					else
						for (int64_t r = 0; r < m; r++)
							pg_matmul(NULL, W, t, n, k, X + r * k, 1, Y + r * n, n);
					for (int64_t r = 0; r < m; r++)
						for (int64_t j = 0; j < n; j++) {
							const void *wj = (const char *)W + (size_t)j * wr;
							const void *xq = Xq + (size_t)r * xr;
							const float want =
								t == PG_TYPE_Q4_0
									? ggml_q4_0_dot(wj, xq, k / QK4_0, n % 8 == 0)
									: ggml_q4_K_dot(wj, xq, k / QK_K, n % 8 == 0);
							ck_assert_msg(Y[r * n + j] == want,
								      "%s %s n=%ld v=%d row %ld col %ld: %a != %a",
								      pg_type_name(t), all_isas[a], (long)n, v, (long)r,
								      (long)j, Y[r * n + j], want);
						}
				}
			}
			free(W);
			free(X);
			free(Y);
			free(Xq);
		}
	}
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* pg_matmul_tb on Q4_K: a flagged row in the gemm's order, the others in
 * the gemv's, whatever the mix, the tiling and the threads. */
START_TEST(test_q4_K_gemm_rows)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const uint32_t t = PG_TYPE_Q4_K;
	const int64_t n = 24, k = 3 * QK_K, m = 70;
	const size_t wr = pg_row_size(t, (uint64_t)k), xr = pg_act_row_size(t, k);
	void *W = make_weights(t, n, k, NULL);
	float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
	char *Xq = malloc(xr * (size_t)m);
	fill(X, m * k, 2.0f);
	ck_assert(pg_matmul_tb_applies(t, n, k));
	ck_assert(!pg_matmul_tb_applies(t, n + 4, k)); /* not repacked: vec_dot for every row */
	for (size_t a = 0; a < 3; a++) {
		if (!pg_cpu_set_isa(all_isas[a]))
			continue;
		for (int64_t r = 0; r < m; r++)
			pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
		for (int pat = 0; pat < 3; pat++) {
			bool tb[70]; /* 70: more than one gemm8 call (PG_GEMM8_MAX_NR) */
			for (int64_t r = 0; r < m; r++)
				tb[r] = pat == 0 ? r < 8 : pat == 1 ? r % 3 != 1 : true;
			pg_matmul_tb(pat == 2 ? NULL : pool, W, t, n, k, X, m, Y, n, tb);
			for (int64_t r = 0; r < m; r++)
				for (int64_t j = 0; j < n; j++) {
					const block_q4_K *wj = (const void *)((const char *)W + (size_t)j * wr);
					const block_q8_K *xq = (const void *)(Xq + (size_t)r * xr);
					const float want = tb[r] ? ggml_q4_K_gemm_dot(wj, xq, k / QK_K)
								 : ggml_q4_K_dot(wj, xq, k / QK_K, true);
					ck_assert_msg(Y[r * n + j] == want, "%s pattern %d row %ld col %ld: %a != %a",
						      all_isas[a], pat, (long)r, (long)j, Y[r * n + j], want);
				}
		}
	}
	free(W);
	free(X);
	free(Y);
	free(Xq);
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* Q4_K repacked at load (PG_TYPE_Q4_K_X8) gives the bits of the file's
 * blocks in both of llama.cpp's orders: flagged rows the gemm's, the rest
 * the gemv's, on every ISA, threaded or not, batched or row by row, and in
 * pg_matmul_many next to an unrepacked weight. */
START_TEST(test_q4_K_repacked_equals_unpacked)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const uint32_t t = PG_TYPE_Q4_K;
	const int64_t ks[] = { 256, 768, 2048 }, ns[] = { 8, 24, 136 }, mmax = 21;
	for (size_t ki = 0; ki < 3; ki++)
		for (size_t ni = 0; ni < 3; ni++) {
			const int64_t k = ks[ki], n = ns[ni];
			const size_t wr = pg_row_size(t, (uint64_t)k), xr = pg_act_row_size(t, k);
			block_q4_K *W = make_weights(t, n, k, NULL);
			if ((ki + ni) % 2) /* raw bytes: every level, scale and min */
				for (int64_t b = 0; b < n * k / QK_K; b++) {
					for (int e = 0; e < QK_K / 2; e++)
						W[b].qs[e] = (uint8_t)rnd();
					for (int e = 0; e < K_SCALE_SIZE; e++)
						W[b].scales[e] = (uint8_t)rnd();
				}
			const size_t xsz = pg_q4_K_x8_size(n, k);
			ck_assert_uint_eq(xsz, (size_t)(n / 8) * PG_Q4KX8_GROUP_BYTES(k / QK_K));
			void *Wx = NULL;
			ck_assert_int_eq(posix_memalign(&Wx, 64, xsz), 0);
			pg_q4_K_x8_repack(W, Wx, n, k);
			float *X = malloc(sizeof(float) * (size_t)(mmax * k));
			fill(X, mmax * k, 2.0f);
			float *Y = malloc(sizeof(float) * (size_t)(mmax * n)), *Y2 = malloc(sizeof(float) * (size_t)(mmax * n));
			char *Xq = malloc(xr * (size_t)mmax);
			bool tb[21];
			for (size_t a = 0; a < 3; a++) {
				if (!pg_cpu_set_isa(all_isas[a]))
					continue;
				for (int64_t r = 0; r < mmax; r++)
					pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
				for (int64_t m = 1; m <= mmax; m += m < 5 ? 1 : 8) {
					for (int64_t r = 0; r < m; r++)
						tb[r] = r < m - m % 4;
					for (int v = 0; v < 4; v++) {
						memset(Y, 0xff, sizeof(float) * (size_t)(m * n));
						if (v == 0)
							pg_matmul_tb(pool, Wx, PG_TYPE_Q4_K_X8, n, k, X, m, Y, n, tb);
						else if (v == 1)
							pg_matmul_tb(NULL, Wx, PG_TYPE_Q4_K_X8, n, k, X, m, Y, n, tb);
						else if (v == 2)
							pg_matmul(pool, Wx, PG_TYPE_Q4_K_X8, n, k, X, m, Y, n);
						else
							for (int64_t r = 0; r < m; r++)
								pg_matmul(NULL, Wx, PG_TYPE_Q4_K_X8, n, k, X + r * k, 1, Y + r * n, n);
						for (int64_t r = 0; r < m; r++)
							for (int64_t j = 0; j < n; j++) {
								const block_q4_K *wj = (const void *)((const char *)W + (size_t)j * wr);
								const block_q8_K *xq = (const void *)(Xq + (size_t)r * xr);
								const float want = v < 2 && tb[r] ? ggml_q4_K_gemm_dot(wj, xq, k / QK_K)
												  : ggml_q4_K_dot(wj, xq, k / QK_K, true);
								ck_assert_msg(memcmp(&Y[r * n + j], &want, 4) == 0,
									      "%s n=%ld k=%ld m=%ld v=%d row %ld col %ld: %a != %a",
									      all_isas[a], (long)n, (long)k, (long)m, v, (long)r,
									      (long)j, Y[r * n + j], want);
							}
					}
					/* next to an unrepacked Q4_K weight in one pool run */
					const struct pg_mm_out o[2] = { { Wx, PG_TYPE_Q4_K_X8, n, Y, n }, { W, t, n, Y2, n } };
					pg_matmul_many(pool, o, 2, k, X, m);
					ck_assert_int_eq(memcmp(Y, Y2, sizeof(float) * (size_t)(m * n)), 0);
				}
			}
			free(W);
			free(Wx);
			free(X);
			free(Y);
			free(Y2);
			free(Xq);
		}
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* Q2_K and Q3_K stay on vec_dot in llama.cpp's x86 backend (its Q2_K
 * repack is AVX-512 only: see docs/kernels.md), ggml_vec_dot_q2_K_q8_K and
 * ggml_vec_dot_q3_K_q8_K (AVX2): 8 lanes, element e of a super-block in
 * lane (e % 32) / 4 with the scale of its group of 16, e / 16; per block
 * one FMA per lane of d·(lane sum), Q2_K's mins first, dmin = -y.d·x.dmin,
 * lane l = m[2l]·B[2l] + m[2l+1]·B[2l+1] (B: bsums); then hsum_float_8.
 * Element by element here, not as the kernels walk the block. */
static int q23_level(const void *vw, bool three, int e)
{
	const int j = e / 128, p = (e % 128) / 32, b = e % 32;
	if (!three)
		return (((const block_q2_K *)vw)->qs[32 * j + b] >> (2 * p)) & 3;
	const block_q3_K *w = vw;
	const int lo = (w->qs[32 * j + b] >> (2 * p)) & 3;
	return (w->hmask[b] >> (4 * j + p)) & 1 ? lo : lo - 4;
}

static int q3_K_scale(const uint8_t *sc, int g)
{
	const int low = g < 8 ? sc[g] & 0xF : sc[g - 8] >> 4;
	const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
	return (low | high << 4) - 32;
}

static float ggml_q23_K_dot(const void *vw, const block_q8_K *y, int64_t nb, bool three)
{
	const size_t bsz = three ? sizeof(block_q3_K) : sizeof(block_q2_K);
	float lanes[8] = { 0 };
	for (int64_t i = 0; i < nb; i++) {
		const void *w = (const char *)vw + (size_t)i * bsz;
		const block_q2_K *w2 = w;
		const block_q3_K *w3 = w;
		int lane_sum[8] = { 0 };
		for (int e = 0; e < QK_K; e++) {
			const int g = e / 16;
			const int sc = three ? q3_K_scale(w3->scales, g) : w2->scales[g] & 0xF;
			lane_sum[(e % 32) / 4] += sc * q23_level(w, three, e) * y[i].qs[e];
		}
		if (!three) {
			const float dmin = -y[i].d * pg_f16_to_f32(w2->dmin);
			for (int l = 0; l < 8; l++)
				lanes[l] = fmaf(dmin,
						(float)((w2->scales[2 * l] >> 4) * y[i].bsums[2 * l] +
							(w2->scales[2 * l + 1] >> 4) * y[i].bsums[2 * l + 1]),
						lanes[l]);
		}
		const float d = y[i].d * pg_f16_to_f32(three ? w3->d : w2->d);
		for (int l = 0; l < 8; l++)
			lanes[l] = fmaf(d, (float)lane_sum[l], lanes[l]);
	}
	return hsum_lanes8(lanes);
}

START_TEST(test_q23_K_order_is_ggml)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	/* n = 20: row by row; n = 24: 8 rows at a time, where AVX-512 packs
	 * Q2_K's activations in pairs (m = 11: a tile of 8, then 3, odd) */
	const int64_t k = 3 * QK_K;
	for (int shape = 0; shape < 2; shape++)
	for (int three = 0; three < 2; three++) {
		const int64_t n = shape ? 24 : 20, m = shape ? 11 : 6;
		const uint32_t t = three ? PG_TYPE_Q3_K : PG_TYPE_Q2_K;
		const size_t wr = pg_row_size(t, (uint64_t)k), xr = pg_act_row_size(t, k);
		void *W = make_weights(t, n, k, NULL);
		float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
		char *Xq = malloc(xr * (size_t)m);
		fill(X, m * k, 2.0f);
		for (size_t a = 0; a < 3; a++) {
			if (!pg_cpu_set_isa(all_isas[a]))
				continue;
			for (int64_t r = 0; r < m; r++)
				pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
			for (int v = 0; v < 3; v++) {
				if (v < 2)
					pg_matmul(v ? pool : NULL, W, t, n, k, X, m, Y, n);
				else
					for (int64_t r = 0; r < m; r++)
						pg_matmul(NULL, W, t, n, k, X + r * k, 1, Y + r * n, n);
				for (int64_t r = 0; r < m; r++)
					for (int64_t j = 0; j < n; j++) {
						const float want = ggml_q23_K_dot((const char *)W + (size_t)j * wr,
										  (const void *)(Xq + (size_t)r * xr),
										  k / QK_K, three);
						ck_assert_msg(Y[r * n + j] == want, "%s %s n=%ld v=%d row %ld col %ld: %a != %a",
							      pg_type_name(t), all_isas[a], (long)n, v, (long)r, (long)j,
							      Y[r * n + j], want);
					}
			}
		}
		free(W);
		free(X);
		free(Y);
		free(Xq);
	}
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* IQ4_XS: ggml_vec_dot_iq4_xs_q8_K (AVX2), element by element: element e
 * of group ib in lane (e % 32) / 4 with the group's 6-bit scale less 32;
 * raw random blocks, so every level and scale, on every ISA. */
START_TEST(test_iq4_xs_order_is_ggml)
{
	save_isa();
	const int64_t n = 5, m = 3, nb = 3, k = nb * QK_K;
	block_iq4_xs *W = malloc(sizeof(block_iq4_xs) * (size_t)(n * nb));
	for (int64_t b = 0; b < n * nb; b++) {
		unsigned char *p = (unsigned char *)&W[b];
		for (size_t i = 0; i < sizeof(block_iq4_xs); i++)
			p[i] = (unsigned char)rnd();
		W[b].d = pg_f32_to_f16(0.001f * (float)(1 + b % 7));
	}
	const size_t xr = pg_act_row_size(PG_TYPE_IQ4_XS, k);
	float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
	char *Xq = malloc(xr * (size_t)m);
	fill(X, m * k, 3.0f);
	for (size_t a = 0; a < 3; a++) {
		if (!pg_cpu_set_isa(all_isas[a]))
			continue;
		for (int64_t r = 0; r < m; r++)
			pg_quantize_act(PG_TYPE_IQ4_XS, X + r * k, Xq + (size_t)r * xr, k);
		pg_matmul(NULL, W, PG_TYPE_IQ4_XS, n, k, X, m, Y, n);
		for (int64_t r = 0; r < m; r++)
			for (int64_t j = 0; j < n; j++) {
				const block_q8_K *y = (const void *)(Xq + (size_t)r * xr);
				float lanes[8] = { 0 };
				for (int64_t i = 0; i < nb; i++) {
					const block_iq4_xs *w = &W[j * nb + i];
					int ls[8] = { 0 };
					for (int e = 0; e < QK_K; e++) {
						const int ib = e / 32, c = e % 32;
						const int sc = (((w->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
								(((w->scales_h >> (2 * ib)) & 3) << 4)) - 32;
						const uint8_t q = w->qs[16 * ib + c % 16];
						ls[c / 4 % 8] += sc * kvalues_iq4nl[c < 16 ? q & 0xF : q >> 4] * y[i].qs[e];
					}
					const float d = pg_f16_to_f32(w->d) * y[i].d;
					for (int l = 0; l < 8; l++)
						lanes[l] = fmaf(d, (float)ls[l], lanes[l]);
				}
				const float want = hsum_lanes8(lanes);
				ck_assert_msg(Y[r * n + j] == want, "%s row %ld col %ld: %a != %a", all_isas[a], (long)r,
					      (long)j, Y[r * n + j], want);
			}
	}
	free(W);
	free(X);
	free(Y);
	free(Xq);
	restore_isa();
}
END_TEST

/* IQ4_XS with a multiple of 8 rows through pg_matmul_tb: a flagged row in
 * the IQ panel gemm's order (llama.cpp's iqp.cpp, for matmuls of 8 rows or
 * more: one chain, acc = fma((float)isum, d*dy, acc) per super-block, the
 * group scales inside isum), the others in vec_dot's; any mix of flags,
 * threaded or not, raw random blocks, on every ISA. */
static float ggml_iq4_xs_panel_dot(const block_iq4_xs *w, const block_q8_K *y, int64_t nb)
{
	float acc = 0;
	for (int64_t i = 0; i < nb; i++) {
		int isum = 0;
		for (int e = 0; e < QK_K; e++) {
			const int ib = e / 32, c = e % 32;
			const int sc = (((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
					(((w[i].scales_h >> (2 * ib)) & 3) << 4)) - 32;
			const uint8_t q = w[i].qs[16 * ib + c % 16];
			isum += sc * kvalues_iq4nl[c < 16 ? q & 0xF : q >> 4] * y[i].qs[e];
		}
		acc = fmaf((float)isum, pg_f16_to_f32(w[i].d) * y[i].d, acc);
	}
	return acc;
}

START_TEST(test_iq4_xs_panel_rows)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const uint32_t t = PG_TYPE_IQ4_XS;
	const int64_t n = 40, m = 70, nb = 2, k = nb * QK_K;
	block_iq4_xs *W = malloc(sizeof(block_iq4_xs) * (size_t)(n * nb));
	for (int64_t b = 0; b < n * nb; b++) {
		unsigned char *p = (unsigned char *)&W[b];
		for (size_t i = 0; i < sizeof(block_iq4_xs); i++)
			p[i] = (unsigned char)rnd();
		W[b].d = pg_f32_to_f16(0.001f * (float)(1 + b % 7));
	}
	ck_assert(pg_matmul_tb_applies(t, n, k));
	ck_assert(!pg_matmul_tb_applies(t, n - 4, k));
	const size_t xr = pg_act_row_size(t, k);
	float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
	char *Xq = malloc(xr * (size_t)m);
	fill(X, m * k, 3.0f);
	bool tb[70]; /* 70: more than one gemm8 call (PG_GEMM8_MAX_NR) */
	for (size_t a = 0; a < 3; a++) {
		if (!pg_cpu_set_isa(all_isas[a]))
			continue;
		for (int64_t r = 0; r < m; r++)
			pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
		for (int pat = 0; pat < 3; pat++) {
			for (int64_t r = 0; r < m; r++)
				tb[r] = pat == 0 || (pat == 1 && r % 5 != 2);
			pg_matmul_tb(pat == 2 ? NULL : pool, W, t, n, k, X, m, Y, n, tb);
			for (int64_t r = 0; r < m; r++)
				for (int64_t j = 0; j < n; j++) {
					const block_q8_K *y = (const void *)(Xq + (size_t)r * xr);
					float want;
					if (tb[r]) {
						want = ggml_iq4_xs_panel_dot(W + j * nb, y, nb);
					} else { /* vec_dot's order: the same oracle as above, one row */
						pg_matmul(NULL, W + j * nb, t, 1, k, X + r * k, 1, &want, 1);
					}
					ck_assert_msg(memcmp(&Y[r * n + j], &want, 4) == 0,
						      "%s pattern %d row %ld col %ld: %a != %a", all_isas[a], pat, (long)r,
						      (long)j, Y[r * n + j], want);
				}
		}
	}
	free(W);
	free(X);
	free(Y);
	free(Xq);
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* Every bit pattern of a Q3_K level and scale: hand-built blocks (hmask
 * bits set and clear, scales at -32 and 31) against the same order. */
START_TEST(test_q3_K_extremes)
{
	save_isa();
	const int64_t k = QK_K;
	block_q3_K w;
	block_q8_K y;
	for (int pat = 0; pat < 4; pat++) {
		for (int i = 0; i < 12; i++)
			w.scales[i] = (uint8_t)(pat & 1 ? 0xFF : 0x00) ^ (uint8_t)(i * 37);
		for (int i = 0; i < 32; i++)
			w.hmask[i] = (uint8_t)(pat & 2 ? 0xFF : 0x00) ^ (uint8_t)(i * 29);
		for (int i = 0; i < 64; i++)
			w.qs[i] = (uint8_t)(i * 71 + pat);
		w.d = pg_f32_to_f16(0.25f);
		y.d = 0.5f;
		for (int i = 0; i < QK_K; i++)
			y.qs[i] = (int8_t)(i % 2 ? -127 : 127 - i % 7);
		for (int g = 0; g < 16; g++) {
			int sum = 0;
			for (int e = 0; e < 16; e++)
				sum += y.qs[16 * g + e];
			y.bsums[g] = (int16_t)sum;
		}
		const float want = ggml_q23_K_dot(&w, &y, 1, true);
		for (size_t a = 0; a < 3; a++) {
			if (!pg_cpu_set_isa(all_isas[a]))
				continue;
			float got = 0;
			pg_matmul_q(NULL, &w, PG_TYPE_Q3_K, 1, k, &y, 1, &got, 1);
			ck_assert_msg(got == want, "pattern %d %s: %a != %a", pat, all_isas[a], got, want);
		}
	}
	restore_isa();
}
END_TEST

/* Q4_0 weights repacked at load (PG_TYPE_Q4_0_X8) must give the bits of
 * the same weights unpacked (the gemv8 path, llama.cpp's q4_0_8x8 order),
 * on every ISA, for any m (tiles of the repacked path are 8 rows, of the
 * unpacked one 4), threaded or not, from f32 or from Q8_0 activations,
 * one row fetching ahead either way (repack.h);
 * and the repacked kernels of all ISAs read one layout. Weights with raw
 * random nibbles (every level) and activations of ±1 (every value ±127)
 * reach the extremes of the i16 sums of the AVX2 kernel. */
START_TEST(test_x8_repacked_equals_unpacked)
{
	save_isa();
	const uint32_t t = _i ? PG_TYPE_IQ4_NL : PG_TYPE_Q4_0, tx = _i ? PG_TYPE_IQ4_NL_X8 : PG_TYPE_Q4_0_X8;
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const int64_t ks[] = { 32, 64, 96, 224, 1056, 2048 };
	const int64_t ns[] = { 8, 16, 24, 64, 136, 1032 }; /* 1032: the split's small tail chunks */
	for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
		for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
			const int64_t k = ks[ki], n = ns[ni], mmax = 17;
			if (k * n > 2048 * 64)
				continue;
			const size_t wr = pg_row_size(t, (uint64_t)k), xr = pg_act_row_size(t, k);
			block_q4_0 *W = make_weights(t, n, k, NULL); /* IQ4_NL: the same shape */
			if ((ki + ni) % 2) /* raw nibbles: every level, both extremes */
				for (int64_t b = 0; b < n * k / QK4_0; b++)
					for (int e = 0; e < QK4_0 / 2; e++)
						W[b].qs[e] = (uint8_t)rnd();
			const size_t xsz = pg_q4_0_x8_size(n, k);
			ck_assert_uint_eq(xsz, (size_t)(n / 8) * PG_X8_GROUP_BYTES(k / QK4_0));
			void *Wx = NULL;
			ck_assert_int_eq(posix_memalign(&Wx, 64, xsz), 0);
			pg_q4_0_x8_repack(W, Wx, n, k);
			float *X = malloc(sizeof(float) * (size_t)(mmax * k));
			fill(X, mmax * k, 2.0f);
			for (int64_t e = 0; e < k; e++) /* row 1: all ±127 */
				X[k + e] = rnd() & 1 ? 1.0f : -1.0f;
			float *Yw = malloc(sizeof(float) * (size_t)(mmax * n)), *Yx = malloc(sizeof(float) * (size_t)(mmax * n));
			char *Xq = malloc(xr * (size_t)mmax);
			for (size_t a = 0; a < 3; a++) {
				if (!pg_cpu_set_isa(all_isas[a]))
					continue;
				for (int64_t r = 0; r < mmax; r++)
					pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
				for (int64_t m = 1; m <= mmax; m += m < 9 ? 1 : 8) {
					pg_matmul(NULL, W, t, n, k, X, m, Yw, n);
					/* v 4 and 5: one row with each way of fetching
					 * ahead pinned (0-3 leave it to the tuner) */
					for (int v = 0; v < (m == 1 ? 6 : 4); v++) {
						memset(Yx, 0xff, sizeof(float) * (size_t)(m * n));
						if (v >= 4) {
							ck_assert(pg_cpu_set_prefetch(v == 4 ? "pages" : "lines"));
							pg_matmul(pool, Wx, tx, n, k, X, m, Yx, n);
							ck_assert(pg_cpu_set_prefetch("auto"));
						} else if (v < 2)
							pg_matmul(v ? pool : NULL, Wx, tx, n, k, X, m, Yx, n);
						else if (v == 2)
							pg_matmul_q(pool, Wx, tx, n, k, Xq, m, Yx, n);
						else
							for (int64_t r = 0; r < m; r++)
								pg_matmul(NULL, Wx, tx, n, k, X + r * k, 1, Yx + r * n, n);
						for (int64_t r = 0; r < m; r++)
							for (int64_t j = 0; j < n; j++) {
								const void *wj = (const char *)W + (size_t)j * wr;
								const block_q8_0 *xj = (const block_q8_0 *)(Xq + (size_t)r * xr);
								const float want = _i ? ggml_iq4_nl_dot(wj, xj, k / 32, NL_REPACKED)
										      : ggml_q4_0_dot(wj, xj, k / QK4_0, true);
								ck_assert_msg(memcmp(&Yw[r * n + j], &want, 4) == 0,
									      "unpacked %s %s n=%ld k=%ld m=%ld row %ld col %ld: %a != %a",
									      pg_type_name(t), all_isas[a], (long)n, (long)k, (long)m, (long)r,
									      (long)j, Yw[r * n + j], want);
								ck_assert_msg(memcmp(&Yx[r * n + j], &want, 4) == 0,
									      "repacked %s %s n=%ld k=%ld m=%ld v=%d row %ld col %ld: %a != %a",
									      pg_type_name(t), all_isas[a], (long)n, (long)k, (long)m, v, (long)r,
									      (long)j, Yx[r * n + j], want);
							}
					}
				}
			}
			free(W);
			free(Wx);
			free(X);
			free(Xq);
			free(Yw);
			free(Yx);
		}
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* Q8_0 keeps ggml_vec_dot_q8_0_q8_0's order for every m (the 8-row tiles
 * included): 8 lanes (lane l: elements 4l..4l+3 of each 32), acc_l =
 * fma(dw*dy, (float)isum_l, acc_l), then hsum_float_8. */
static float ggml_q8_0_dot(const block_q8_0 *w, const block_q8_0 *y, int64_t nb)
{
	float lanes[8] = { 0 };
	for (int64_t i = 0; i < nb; i++) {
		const float d = pg_f16_to_f32(w[i].d) * pg_f16_to_f32(y[i].d);
		for (int l = 0; l < 8; l++) {
			int s = 0;
			for (int e = 4 * l; e < 4 * l + 4; e++)
				s += w[i].qs[e] * y[i].qs[e];
			lanes[l] = fmaf(d, (float)s, lanes[l]);
		}
	}
	return hsum_lanes8(lanes);
}

START_TEST(test_q8_0_order_is_ggml)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const uint32_t t = PG_TYPE_Q8_0;
	/* 8-row tiles and single rows; every tail of a packed unit (m % 4 and
	 * m % 8), full tiles, two tiles, one block and many */
	const int64_t ns[] = { 24, 13, 64, 16, 40, 8, 32, 16, 24 };
	const int64_t ms[] = { 1, 3, 9, 2, 6, 4, 5, 16, 17 };
	const int64_t ks[] = { 9, 9, 9, 9, 9, 1, 2, 9, 70 };
	for (int ni = 0; ni < 9; ni++) {
		const int64_t n = ns[ni], m = ms[ni], k = ks[ni] * QK8_0;
		const size_t wr = pg_row_size(t, (uint64_t)k), xr = pg_act_row_size(t, k);
		void *W = make_weights(t, n, k, NULL);
		/* -128 is no quantizer's output but a file may hold it: the
		 * sign trick must give ggml's integer sums for it too */
		for (int64_t j = 0; j < n; j += 3)
			((block_q8_0 *)((char *)W + (size_t)j * wr))[(j / 3) % ks[ni]].qs[j % 32] = -128;
		float *X = malloc(sizeof(float) * (size_t)(m * k)), *Y = malloc(sizeof(float) * (size_t)(m * n));
		char *Xq = malloc(xr * (size_t)m);
		fill(X, m * k, 2.0f);
		for (int64_t r = 0; r < m; r++)
			pg_quantize_act(t, X + r * k, Xq + (size_t)r * xr, k);
		for (size_t a = 1; a < 3; a++) {
			if (!pg_cpu_set_isa(all_isas[a]))
				continue;
			for (int v = 0; v < 3; v++) {
				if (v < 2)
					pg_matmul(v ? pool : NULL, W, t, n, k, X, m, Y, n);
				else
					for (int64_t r = 0; r < m; r++)
						pg_matmul(NULL, W, t, n, k, X + r * k, 1, Y + r * n, n);
				for (int64_t r = 0; r < m; r++)
					for (int64_t j = 0; j < n; j++) {
						const float want = ggml_q8_0_dot((const void *)((const char *)W + (size_t)j * wr),
										 (const void *)(Xq + (size_t)r * xr), k / QK8_0);
						ck_assert_msg(Y[r * n + j] == want, "%s n=%ld m=%ld k=%ld v=%d row %ld col %ld: %a != %a",
							      all_isas[a], (long)n, (long)m, (long)k, v, (long)r, (long)j, Y[r * n + j], want);
					}
			}
		}
		free(W);
		free(X);
		free(Y);
		free(Xq);
	}
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* Q5_K and Q6_K prompts (AVX-512: packed pairs, vpdpbusd and vpdpwssd)
 * with every level, high-bit pattern, scale and min (Q6_K's -128 scale
 * included): the scalar reference's bits (ggml's AVX2 vec_dot order) on
 * every ISA, odd and even batches. */
static void randomize_k56(uint32_t t, void *W, int64_t nblocks)
{
	for (int64_t b = 0; b < nblocks; b++) {
		if (t == PG_TYPE_Q5_K) {
			block_q5_K *w = (block_q5_K *)W + b;
			for (int e = 0; e < QK_K / 2; e++)
				w->qs[e] = (uint8_t)rnd();
			for (int e = 0; e < QK_K / 8; e++)
				w->qh[e] = (uint8_t)(b % 5 ? rnd() : 0xFF);
			for (int e = 0; e < K_SCALE_SIZE; e++)
				w->scales[e] = (uint8_t)(b % 5 ? rnd() : 0xFF); /* all 63 */
			continue;
		}
		block_q6_K *w = (block_q6_K *)W + b;
		for (int e = 0; e < QK_K / 2; e++)
			w->ql[e] = (uint8_t)rnd();
		for (int e = 0; e < QK_K / 4; e++)
			w->qh[e] = (uint8_t)rnd();
		for (int e = 0; e < QK_K / 16; e++)
			w->scales[e] = (int8_t)rnd();
		if (b % 5 == 0) { /* every level 63 or 0 against scale -128 */
			memset(w->scales, 0x80, QK_K / 16);
			memset(w->ql, b % 10 ? 0xFF : 0, QK_K / 2);
			memset(w->qh, b % 10 ? 0xFF : 0, QK_K / 4);
		}
	}
}

START_TEST(test_k56_raw_bytes_same_bits)
{
	save_isa();
	const uint32_t t = _i ? PG_TYPE_Q6_K : PG_TYPE_Q5_K;
	const int64_t n = 24, k = 768, mmax = 11;
	void *W = make_weights(t, n, k, NULL);
	randomize_k56(t, W, n * k / QK_K);
	float *X = malloc(sizeof(float) * (size_t)(mmax * k));
	float *Yref = malloc(sizeof(float) * (size_t)(mmax * n)), *Y = malloc(sizeof(float) * (size_t)(mmax * n));
	fill(X, mmax * k, 3.0f);
	for (int64_t m = 2; m <= mmax; m += m < 5 ? 1 : 3) {
		ck_assert(pg_cpu_set_isa("scalar"));
		pg_matmul(NULL, W, t, n, k, X, m, Yref, n);
		for (size_t a = 1; a < 3; a++) {
			if (!pg_cpu_set_isa(all_isas[a]))
				continue;
			memset(Y, 0xff, sizeof(float) * (size_t)(m * n));
			pg_matmul(NULL, W, t, n, k, X, m, Y, n);
			for (int64_t i = 0; i < m * n; i++)
				ck_assert_msg(memcmp(&Y[i], &Yref[i], 4) == 0, "%s %s m=%ld [%ld]: %a != %a",
					      pg_type_name(t), all_isas[a], (long)m, (long)i, Y[i], Yref[i]);
		}
	}
	free(W);
	free(X);
	free(Y);
	free(Yref);
	restore_isa();
}
END_TEST

/* Q8_0 the loader found free of -128 (PG_TYPE_Q8_0_S127) may take faster
 * kernels: the same bits as PG_TYPE_Q8_0 on every ISA, one row (decode),
 * batches and the several-matrix job alike. */
START_TEST(test_q8_0_s127_same_bits)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(2);
	ck_assert_ptr_nonnull(pool);
	const int64_t n = 40, k = 11 * QK8_0, mmax = 17;
	const size_t wr = pg_row_size(PG_TYPE_Q8_0, (uint64_t)k);
	void *W = make_weights(PG_TYPE_Q8_0, n, k, NULL);
	ck_assert(!pg_q8_0_has_m128(W, n * (k / QK8_0))); /* the quantizer never writes it */
	float *X = malloc(sizeof(float) * (size_t)(mmax * k));
	float *Ya = malloc(sizeof(float) * (size_t)(mmax * n)), *Yb = malloc(sizeof(float) * (size_t)(mmax * n));
	float *Yc = malloc(sizeof(float) * (size_t)(mmax * 8));
	fill(X, mmax * k, 2.0f);
	for (size_t a = 0; a < 3; a++) {
		if (!pg_cpu_set_isa(all_isas[a]))
			continue;
		for (int64_t m = 1; m <= mmax; m += m < 5 ? 1 : 6) {
			pg_matmul(pool, W, PG_TYPE_Q8_0, n, k, X, m, Ya, n);
			memset(Yb, 0xff, sizeof(float) * (size_t)(m * n));
			pg_matmul(pool, W, PG_TYPE_Q8_0_S127, n, k, X, m, Yb, n);
			ck_assert_msg(memcmp(Ya, Yb, sizeof(float) * (size_t)(m * n)) == 0, "%s m=%ld", all_isas[a],
				      (long)m);
			/* rows 0-31 and 32-39 as two matrices of one job */
			struct pg_mm_out o[2] = { { W, PG_TYPE_Q8_0_S127, 32, Yb, n },
						  { (const char *)W + 32 * wr, PG_TYPE_Q8_0_S127, 8, Yc, 8 } };
			memset(Yb, 0xff, sizeof(float) * (size_t)(m * n));
			pg_matmul_many(pool, o, 2, k, X, m);
			for (int64_t r = 0; r < m; r++) {
				ck_assert(memcmp(Ya + r * n, Yb + r * n, 32 * sizeof(float)) == 0);
				ck_assert(memcmp(Ya + r * n + 32, Yc + r * 8, 8 * sizeof(float)) == 0);
			}
		}
	}
	/* the scan finds a single -128 wherever it is, and only a quant */
	block_q8_0 *b = W;
	const int64_t nb = n * (k / QK8_0);
	b[0].d = 0x8080;
	ck_assert(!pg_q8_0_has_m128(W, nb));
	const int64_t at[] = { 0, 7, nb - 1 };
	const int ea[] = { 0, 17, 31 };
	for (int i = 0; i < 3; i++) {
		const int8_t keep = b[at[i]].qs[ea[i]];
		b[at[i]].qs[ea[i]] = -128;
		ck_assert(pg_q8_0_has_m128(W, nb));
		ck_assert(!pg_q8_0_has_m128(W, at[i])); /* the blocks before it */
		b[at[i]].qs[ea[i]] = keep;
	}
	free(W);
	free(X);
	free(Ya);
	free(Yb);
	free(Yc);
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* The f16 accumulator updates of attention: same bits on every ISA as the
 * element-by-element definition, tails included. */
START_TEST(test_f16_acc_rows)
{
	save_isa();
	const int64_t n = 16 * 4 + 8 + 5;
	pg_f16 v[16 * 4 + 8 + 5], a0[16 * 4 + 8 + 5], a[16 * 4 + 8 + 5];
	for (int64_t i = 0; i < n; i++) {
		v[i] = pg_f32_to_f16(grand() * 4);
		a0[i] = pg_f32_to_f16(grand() * 100);
	}
	a0[3] = pg_f32_to_f16(65000.f); /* overflows to inf when scaled up */
	const float ss[] = { 0.3f, 1.7f, 0.999f, 1e-3f };
	for (size_t isa = 0; isa < 3; isa++) {
		if (!pg_cpu_set_isa(all_isas[isa]))
			continue;
		for (int si = 0; si < 4; si++) {
			memcpy(a, a0, sizeof a);
			pg_f16_scale_row(a, ss[si], n);
			for (int64_t i = 0; i < n; i++)
				ck_assert_uint_eq(a[i], pg_f32_to_f16(pg_f16_to_f32(a0[i]) * ss[si]));
			memcpy(a, a0, sizeof a);
			pg_f16_fma_row(a, v, ss[si], n);
			for (int64_t i = 0; i < n; i++)
				ck_assert_uint_eq(a[i], pg_f32_to_f16(fmaf(pg_f16_to_f32(v[i]), ss[si], pg_f16_to_f32(a0[i]))));
		}
	}
	restore_isa();
}
END_TEST

START_TEST(test_isa_select)
{
	save_isa();
	ck_assert(pg_cpu_set_isa("scalar"));
	ck_assert_str_eq(pg_cpu_isa(), "scalar");
	ck_assert(!pg_cpu_set_isa("sse9"));
	ck_assert(!pg_cpu_set_isa(NULL));
	ck_assert(pg_cpu_set_isa(saved_isa));
	ck_assert_str_eq(pg_cpu_isa(), saved_isa);
	ck_assert(pg_type_supported(PG_TYPE_Q4_K));
	ck_assert(!pg_type_supported(PG_TYPE_Q8_K));
	ck_assert(!pg_type_supported(PG_TYPE_I32));
	ck_assert_uint_eq(pg_vec_dot_type(PG_TYPE_Q5_1), PG_TYPE_Q8_1);
	ck_assert_uint_eq(pg_vec_dot_type(PG_TYPE_Q6_K), PG_TYPE_Q8_K);
	ck_assert_uint_eq(pg_vec_dot_type(PG_TYPE_Q5_0), PG_TYPE_Q8_0);
	fprintf(stderr, "kernels: ISA %s\n", saved_isa);
}
END_TEST

/* pg_matmul_many gives each weight exactly what pg_matmul gives it: one
 * conversion and one pool run for all of them change no bit, for unpacked,
 * packed (8-row) and repacked (Q4_0_X8) weights, any batch width, and the
 * shapes and type mixes it hands back to pg_matmul one by one. */
/* Decode-sized matmuls hand out their rows in 8-row chunks, each thread
 * its own range first and then the others' from the back: over 2 and 3
 * threads every row must be written once, with the bits of the one-thread
 * matmul, whatever the row count (whole 8-row groups, the X8 layout's
 * groups, or single rows). */
START_TEST(test_decode_chunks_cover_rows)
{
	save_isa();
	const int64_t k = 64, ns[] = { 4096, 1000, 200, 8 };
	const uint32_t types[] = { PG_TYPE_Q8_0, PG_TYPE_Q4_0_X8, PG_TYPE_F16 };
	float *X = malloc(sizeof(float) * 4 * k), *Ya = malloc(sizeof(float) * 4 * 4096),
	      *Yb = malloc(sizeof(float) * 4 * 4096);
	fill(X, 4 * k, 2.0f);
	for (int th = 2; th <= 3; th++) {
		struct pg_pool *pool = pg_pool_create(th);
		ck_assert_ptr_nonnull(pool);
		for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
				const uint32_t t = types[ti];
				const int64_t n = ns[ni];
				if (t != PG_TYPE_F16 && n % 8)
					continue;
				void *W;
				if (t == PG_TYPE_Q4_0_X8) {
					void *w4 = make_weights(PG_TYPE_Q4_0, n, k, NULL);
					ck_assert_int_eq(posix_memalign(&W, 64, pg_q4_0_x8_size(n, k)), 0);
					pg_q4_0_x8_repack(w4, W, n, k);
					free(w4);
				} else {
					W = make_weights(t, n, k, NULL);
				}
				for (int64_t m = 1; m <= 4; m++) {
					pg_matmul(NULL, W, t, n, k, X, m, Ya, n);
					memset(Yb, 0xff, sizeof(float) * (size_t)(m * n)); /* NaN: a row not written */
					pg_matmul(pool, W, t, n, k, X, m, Yb, n);
					ck_assert_msg(memcmp(Ya, Yb, sizeof(float) * (size_t)(m * n)) == 0,
						      "%s n=%ld m=%ld threads=%d", pg_type_name(t), (long)n, (long)m, th);
				}
				free(W);
			}
		pg_pool_destroy(pool);
	}
	free(X);
	free(Ya);
	free(Yb);
	restore_isa();
}
END_TEST

START_TEST(test_matmul_many_equals_each)
{
	save_isa();
	struct pg_pool *pool = pg_pool_create(3);
	ck_assert_ptr_nonnull(pool);
	const int64_t k = 4 * 32;
	/* three outputs: n of each; a type for each */
	const struct {
		uint32_t t[3];
		int64_t n[3];
	} cases[] = {
		{ { PG_TYPE_Q8_0, PG_TYPE_Q8_0, PG_TYPE_Q8_0 }, { 64, 16, 16 } },
		{ { PG_TYPE_Q8_0, PG_TYPE_Q8_0, PG_TYPE_Q8_0 }, { 24, 13, 8 } }, /* 8-row and not */
		{ { PG_TYPE_Q4_0_X8, PG_TYPE_Q4_0_X8, PG_TYPE_Q4_0_X8 }, { 40, 8, 16 } },
		{ { PG_TYPE_Q4_K, PG_TYPE_Q4_K, PG_TYPE_Q6_K }, { 16, 8, 8 } }, /* mixed types */
		{ { PG_TYPE_F16, PG_TYPE_F16, PG_TYPE_F16 }, { 32, 9, 9 } },
		{ { PG_TYPE_F32, PG_TYPE_F32, PG_TYPE_F32 }, { 12, 4, 4 } },
	};
	const int64_t mmax = 11, kmax = 256;
	float *X = malloc(sizeof(float) * (size_t)(mmax * kmax));
	fill(X, mmax * kmax, 2.0f);
	for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		void *W[3];
		float *Ya[3], *Yb[3];
		struct pg_mm_out o[3];
		const int64_t kk = cases[ci].t[0] == PG_TYPE_Q4_K ? kmax : k; /* a whole super-block */
		for (int i = 0; i < 3; i++) {
			const uint32_t t = cases[ci].t[i];
			const int64_t n = cases[ci].n[i];
			if (t == PG_TYPE_Q4_0_X8) {
				void *w4 = make_weights(PG_TYPE_Q4_0, n, kk, NULL);
				ck_assert_int_eq(posix_memalign(&W[i], 64, pg_q4_0_x8_size(n, kk)), 0);
				pg_q4_0_x8_repack(w4, W[i], n, kk);
				free(w4);
			} else {
				W[i] = make_weights(t, n, kk, NULL);
			}
			Ya[i] = malloc(sizeof(float) * (size_t)(mmax * n));
			Yb[i] = malloc(sizeof(float) * (size_t)(mmax * n));
			o[i] = (struct pg_mm_out){ W[i], t, n, Yb[i], n };
		}
		for (size_t a = 0; a < 3; a++) {
			if (!pg_cpu_set_isa(all_isas[a]))
				continue;
			for (int64_t m = 1; m <= mmax; m += m < 3 ? 1 : 8)
				for (int v = 0; v < 2; v++) {
					struct pg_pool *p = v ? pool : NULL;
					for (int i = 0; i < 3; i++) {
						pg_matmul(p, W[i], cases[ci].t[i], cases[ci].n[i], kk, X, m, Ya[i],
							  cases[ci].n[i]);
						memset(Yb[i], 0xff, sizeof(float) * (size_t)(m * cases[ci].n[i]));
					}
					pg_matmul_many(p, o, 3, kk, X, m);
					for (int i = 0; i < 3; i++)
						ck_assert_msg(memcmp(Ya[i], Yb[i], sizeof(float) * (size_t)(m * cases[ci].n[i])) == 0,
							      "case %zu %s m=%ld pool=%d: output %d differs", ci, all_isas[a],
							      (long)m, v, i);
				}
		}
		for (int i = 0; i < 3; i++) {
			free(W[i]);
			free(Ya[i]);
			free(Yb[i]);
		}
	}
	free(X);
	pg_pool_destroy(pool);
	restore_isa();
}
END_TEST

/* The decode prefetch tuner (pf_tune.h) against a model host whose two ways
 * cost cost[way] ns per byte, ±1% of noise per call: the share of calls it
 * gives the way that is not cur, and how many times it changed ways. */
struct tune_run {
	double other_share;
	int changes;
};

static struct tune_run run_tuner(struct pg_pf_tune *t, const double cost[2], int calls)
{
	struct tune_run r = { 0, 0 };
	int other = 0;
	for (int c = 0; c < calls; c++) {
		const enum pg_x8_pf before = t->cur, pf = pg_pf_pick(t);
		other += pf != before;
		/* matrices of a decode step: 0.3 to 6.5 MB */
		const double bytes = (c % 7 == 1 || c % 7 == 2) ? 0.3e6 : c % 7 >= 4 ? 6.5e6 : 2.4e6;
		pg_pf_note(t, pf, bytes, bytes * cost[pf] * (1.0 + 0.01 * (2.0 * (rnd() % 1001) / 1000.0 - 1.0)));
		r.changes += t->cur != before;
	}
	r.other_share = (double)other / calls;
	return r;
}

/* It moves to the faster way within a window or two, stays there while
 * trying the other one call in PG_PF_EXPLORE_FAR (the other is far
 * slower) or PG_PF_EXPLORE (it is close), and moves back when the host
 * changes; two ways within its margin of each other never make it flip
 * back and forth. */
START_TEST(test_pf_tune_follows_faster_way)
{
	struct pg_pf_tune t = { 0 };
	ck_assert_int_eq(t.cur, PG_X8_PF_LINES);
	const double pages_faster[2] = { 1.0, 0.8 }, lines_faster[2] = { 0.85, 1.0 }, even[2] = { 1.0, 1.01 },
		     close[2] = { 1.0, 1.06 };
	struct tune_run r = run_tuner(&t, pages_faster, 2 * PG_PF_WINDOW);
	ck_assert_int_eq(t.cur, PG_X8_PF_PAGES);
	ck_assert_int_eq(r.changes, 1);
	r = run_tuner(&t, pages_faster, 4 * PG_PF_WINDOW);
	ck_assert_int_eq(r.changes, 0);
	ck_assert(fabs(r.other_share - 1.0 / PG_PF_EXPLORE_FAR) < 0.005);
	r = run_tuner(&t, lines_faster, 3 * PG_PF_WINDOW);
	ck_assert_int_eq(t.cur, PG_X8_PF_LINES);
	ck_assert_int_eq(r.changes, 1);
	r = run_tuner(&t, close, 4 * PG_PF_WINDOW);
	ck_assert_int_eq(r.changes, 0);
	ck_assert(fabs(r.other_share - 1.0 / PG_PF_EXPLORE) < 0.01);
	r = run_tuner(&t, even, 10 * PG_PF_WINDOW);
	ck_assert_int_le(r.changes, 1);
	ck_assert(fabs(r.other_share - 1.0 / PG_PF_EXPLORE) < 0.01);
}
END_TEST

/* PAGODA_PREFETCH's names pin a way; anything else is refused. */
START_TEST(test_pf_pin)
{
	ck_assert(pg_cpu_set_prefetch("pages"));
	ck_assert_int_eq(pg_pf_pinned(), PG_X8_PF_PAGES);
	ck_assert(pg_cpu_set_prefetch("lines"));
	ck_assert_int_eq(pg_pf_pinned(), PG_X8_PF_LINES);
	ck_assert(!pg_cpu_set_prefetch("sometimes"));
	ck_assert_int_eq(pg_pf_pinned(), PG_X8_PF_LINES);
	ck_assert(pg_cpu_set_prefetch("auto"));
	ck_assert_int_lt(pg_pf_pinned(), 0);
}
END_TEST

static Suite *kernels_suite(void)
{
	Suite *s = suite_create("kernels");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_isa_select);
	tcase_add_loop_test(tc, test_matmul_types, 0, NTYPES);
	tcase_add_loop_test(tc, test_matmul_batch_equals_rows, 0, NTYPES);
	tcase_add_test(tc, test_act_quant_exact_across_isas);
	tcase_add_test(tc, test_quant_roundtrip);
	tcase_add_test(tc, test_quant_known_values);
	tcase_add_test(tc, test_f16_bf16_roundtrip);
	tcase_add_test(tc, test_pool);
	tcase_add_test(tc, test_elementwise);
	tcase_add_test(tc, test_float_dot_order_is_ggml);
	tcase_add_test(tc, test_q4_order_is_ggml);
	tcase_add_test(tc, test_q23_K_order_is_ggml);
	tcase_add_test(tc, test_q4_K_gemm_rows);
	tcase_add_test(tc, test_q4_K_repacked_equals_unpacked);
	tcase_add_test(tc, test_q3_K_extremes);
	tcase_add_test(tc, test_iq4_xs_order_is_ggml);
	tcase_add_test(tc, test_iq4_xs_panel_rows);
	tcase_add_loop_test(tc, test_x8_repacked_equals_unpacked, 0, 2);
	tcase_add_test(tc, test_pf_tune_follows_faster_way);
	tcase_add_test(tc, test_pf_pin);
	tcase_add_test(tc, test_iq4_nl_orders_are_ggml);
	tcase_add_test(tc, test_q8_0_order_is_ggml);
	tcase_add_test(tc, test_q8_0_s127_same_bits);
	tcase_add_loop_test(tc, test_k56_raw_bytes_same_bits, 0, 2);
	tcase_add_test(tc, test_matmul_many_equals_each);
	tcase_add_test(tc, test_decode_chunks_cover_rows);
	tcase_add_test(tc, test_f16_acc_rows);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(kernels_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
