/* tests/gpu/test_cuda.c — every CUDA kernel against the CPU reference, on
 * random data, within the tolerance docs/cuda.md states for it. Runs the
 * kernels through libpagoda-cuda.so's test entry points (cuda_test.h);
 * without the library or a device it says SKIP and exits 77. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda_test.h"
#include "kernels/pg_backend.h"

static struct {
	const char *(*error)(void);
	int (*matmul)(int, uint32_t, const void *, int64_t, int64_t, const float *, int64_t, float *);
	int (*embed)(uint32_t, const void *, int64_t, int64_t, const int32_t *, int, float *);
	int (*rmsnorm)(const float *, const float *, int, int, float, float *);
	int (*swiglu)(const float *, const float *, int64_t, float *);
	int (*rope)(int, int, int, float, float, const float *, float *, int, const int32_t *, int);
	int (*attn)(int, int, int, int, int, const float *, const float *, const float *, const int32_t *, int, int,
		    float *);
	int (*argmax)(const float *, int, int, int32_t *);
} cu;

static int checks, fails;

static void check(int ok, const char *fmt, ...)
{
	checks++;
	if (ok)
		return;
	fails++;
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float lo, float hi)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

static float *frandv(size_t n, float lo, float hi)
{
	float *v = malloc(n * sizeof *v);
	for (size_t i = 0; i < n; i++)
		v[i] = frand(lo, hi);
	return v;
}

static int call(int r, const char *what)
{
	if (r)
		check(0, "%s: %s", what, cu.error());
	return r;
}

/* ---- matmul and embedding ------------------------------------------------- */

static const uint32_t types[] = { PG_TYPE_F32,	PG_TYPE_F16,  PG_TYPE_BF16, PG_TYPE_Q8_0, PG_TYPE_Q4_0, PG_TYPE_Q4_1,
				  PG_TYPE_Q5_0, PG_TYPE_Q5_1, PG_TYPE_Q4_K, PG_TYPE_Q5_K, PG_TYPE_Q6_K };

/* W (n x k) quantized to type from random floats; wd its dequantization. */
static void *make_w(uint32_t type, int64_t n, int64_t k, float **wd)
{
	const size_t rb = pg_row_size(type, k);
	uint8_t *w = malloc(rb * n);
	float *src = frandv(n * k, -1, 1);
	*wd = malloc(n * k * sizeof(float));
	for (int64_t r = 0; r < n; r++) {
		pg_quantize_row(type, src + r * k, w + r * rb, k);
		pg_dequant_row(type, w + r * rb, *wd + r * k, k);
	}
	free(src);
	return w;
}

/* Worst |gpu - ref| / sum|w x| over the output. */
static double mm_err(const float *y, const float *ref, const float *wd, const float *x, int64_t n, int64_t k,
		     int64_t m)
{
	double worst = 0;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 1e-30;
			for (int64_t c = 0; c < k; c++)
				s += fabs((double)wd[j * k + c] * x[i * k + c]);
			const double e = fabs((double)y[i * n + j] - ref[i * n + j]) / s;
			if (e > worst)
				worst = e;
		}
	return worst;
}

static void test_matmul(uint32_t type, int64_t n, int64_t k, int64_t m)
{
	float *wd, *x = frandv(m * k, -1, 1);
	void *w = make_w(type, n, k, &wd);
	float *exact = malloc(m * n * sizeof(float)), *cpu = malloc(m * n * sizeof(float)),
	      *y = malloc(m * n * sizeof(float));
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;
			for (int64_t c = 0; c < k; c++)
				s += (double)wd[j * k + c] * x[i * k + c];
			exact[i * n + j] = (float)s;
		}
	pg_matmul(NULL, w, type, n, k, x, m, cpu, n);
	const char *tn = pg_type_name(type);
	/* the GEMV (f32 activations): tight; the tensor-core tiles (f16 inputs) */
	if (m <= 8 && k % 32 == 0 && !call(cu.matmul(1, type, w, n, k, x, m, y), "matmul gemv")) {
		double e = mm_err(y, exact, wd, x, n, k, m);
		check(e <= 1e-5, "gemv %s %lldx%lld m=%lld: error %.2e of sum|wx| (tolerance 1e-5)", tn, (long long)n,
		      (long long)k, (long long)m, e);
	}
	if (!call(cu.matmul(2, type, w, n, k, x, m, y), "matmul wmma")) {
		double e = mm_err(y, exact, wd, x, n, k, m);
		check(e <= 2e-3, "wmma %s %lldx%lld m=%lld: error %.2e of sum|wx| (tolerance 2e-3)", tn, (long long)n,
		      (long long)k, (long long)m, e);
	}
	if (!call(cu.matmul(0, type, w, n, k, x, m, y), "matmul")) {
		double e = mm_err(y, cpu, wd, x, n, k, m);
		check(e <= 2e-2, "matmul %s m=%lld against pg_matmul: error %.2e of sum|wx| (tolerance 2e-2)", tn,
		      (long long)m, e);
	}
	free(w);
	free(wd);
	free(x);
	free(exact);
	free(cpu);
	free(y);
}

static void test_embed(uint32_t type)
{
	const int64_t rows = 50, k = 512;
	float *wd;
	void *w = make_w(type, rows, k, &wd);
	const int32_t tok[] = { 0, 7, 49, 23, 7 };
	const int n = 5;
	float *y = malloc(n * k * sizeof(float));
	if (!call(cu.embed(type, w, rows, k, tok, n, y), "embed")) {
		double worst = 0;
		for (int i = 0; i < n; i++)
			for (int64_t c = 0; c < k; c++) {
				const double r = wd[tok[i] * k + c], e = fabs(y[i * k + c] - r) / fmax(1, fabs(r));
				worst = e > worst ? e : worst;
			}
		check(worst <= 1e-6, "embed %s: error %.2e (tolerance 1e-6)", pg_type_name(type), worst);
	}
	free(w);
	free(wd);
	free(y);
}

/* ---- elementwise ----------------------------------------------------------------- */

static void test_rmsnorm(int rows, int n)
{
	float *x = frandv(rows * n, -3, 3), *w = frandv(n, -2, 2), *y = malloc(rows * n * sizeof(float)),
	      *r = malloc(n * sizeof(float));
	if (!call(cu.rmsnorm(x, w, rows, n, 1e-5f, y), "rmsnorm")) {
		double worst = 0;
		for (int i = 0; i < rows; i++) {
			pg_rmsnorm(r, x + i * n, w, n, 1e-5f);
			for (int c = 0; c < n; c++) {
				const double e = fabs(y[i * n + c] - r[c]) / fmax(1, fabs(r[c]));
				worst = e > worst ? e : worst;
			}
		}
		check(worst <= 1e-5, "rmsnorm %dx%d: error %.2e (tolerance 1e-5)", rows, n, worst);
	}
	free(x), free(w), free(y), free(r);
}

static void test_swiglu(int n)
{
	float *g = frandv(n, -10, 10), *u = frandv(n, -10, 10), *y = malloc(n * sizeof(float)),
	      *r = malloc(n * sizeof(float));
	pg_swiglu(r, g, u, n);
	if (!call(cu.swiglu(g, u, n, y), "swiglu")) {
		double worst = 0;
		for (int i = 0; i < n; i++) {
			const double e = fabs(y[i] - r[i]) / fmax(1, fabs(r[i]));
			worst = e > worst ? e : worst;
		}
		check(worst <= 1e-5, "swiglu: error %.2e (tolerance 1e-5)", worst);
	}
	free(g), free(u), free(y), free(r);
}

/* kernels/cpu/forward.c's rope: theta by repeated multiplication, the
 * first product fused. */
static void rope_ref(int nd, int hd, int neox, float base, float fs, const float *freqs, float *x, int n_heads,
		     int pos)
{
	const float theta_scale = powf(base, -2.0f / nd);
	float theta = (float)pos;
	for (int i0 = 0; i0 < nd; i0 += 2) {
		const float ff = freqs ? freqs[i0 / 2] : 1.0f, th = fs * (theta / ff);
		const float c = cosf(th), s = sinf(th);
		for (int h = 0; h < n_heads; h++) {
			float *v = x + h * hd;
			const int a = neox ? i0 / 2 : i0, b = neox ? i0 / 2 + nd / 2 : i0 + 1;
			const float x0 = v[a], x1 = v[b];
			v[a] = fmaf(x0, c, -(x1 * s));
			v[b] = fmaf(x0, s, x1 * c);
		}
		theta *= theta_scale;
	}
}

static void test_rope(int nd, int hd, int neox, float base, float fs, int with_freqs)
{
	const int n_heads = 4, n_tok = 5;
	const int32_t pos[] = { 0, 1, 17, 1000, 4095 };
	float *x = frandv(n_tok * n_heads * hd, -1, 1), *ref = malloc(n_tok * n_heads * hd * sizeof(float));
	float *freqs = with_freqs ? frandv(nd / 2, 1, 8) : NULL;
	memcpy(ref, x, n_tok * n_heads * hd * sizeof(float));
	for (int t = 0; t < n_tok; t++)
		rope_ref(nd, hd, neox, base, fs, freqs, ref + t * n_heads * hd, n_heads, pos[t]);
	if (!call(cu.rope(nd, hd, neox, base, fs, freqs, x, n_heads, pos, n_tok), "rope")) {
		double worst = 0;
		for (int i = 0; i < n_tok * n_heads * hd; i++)
			worst = fmax(worst, fabs(x[i] - ref[i]));
		check(worst <= 1e-5, "rope %s dim %d/%d base %g scale %g%s: error %.2e (tolerance 1e-5)",
		      neox ? "neox" : "norm", nd, hd, base, fs, with_freqs ? " factors" : "", worst);
	}
	free(x), free(ref), free(freqs);
}

/* ---- attention --------------------------------------------------------------------- */

static float f16r(float x)
{
	return pg_f16_to_f32(pg_f32_to_f16(x));
}

/* chunk 0: queries at 4 positions spread over the context; else the last
 * chunk positions, as a prompt chunk after a cached prefix. split_len 0:
 * the prompt kernel. */
static void test_attn(int n_head, int n_kv, int hd, int bs, int n_pos, int split_len, int chunk)
{
	const int kvd = n_kv * hd, qd = n_head * hd;
	const int nq = chunk ? chunk : 4;
	int32_t *pos = malloc(nq * sizeof *pos);
	for (int i = 0; i < nq; i++)
		pos[i] = chunk ? n_pos - chunk + i : (int32_t[]){ 0, n_pos / 3, n_pos / 2, n_pos - 1 }[i];
	float *k = frandv(n_pos * kvd, -1, 1), *v = frandv(n_pos * kvd, -1, 1), *q = frandv(nq * qd, -1, 1);
	float *out = malloc(nq * qd * sizeof(float));
	double *s = malloc(n_pos * sizeof(double));
	if (!call(cu.attn(n_head, n_kv, hd, bs, n_pos, k, v, q, pos, nq, split_len, out), "attn")) {
		double worst = 0;
		for (int t = 0; t < nq; t++)
			for (int h = 0; h < n_head; h++) {
				const int g = h / (n_head / n_kv);
				double mx = -1e300, sum = 0;
				for (int p = 0; p <= pos[t]; p++) {
					double d = 0;
					for (int c = 0; c < hd; c++)
						d += (double)q[t * qd + h * hd + c] * f16r(k[p * kvd + g * hd + c]);
					s[p] = d / sqrt(hd);
					mx = fmax(mx, s[p]);
				}
				for (int p = 0; p <= pos[t]; p++)
					sum += s[p] = exp(s[p] - mx);
				for (int c = 0; c < hd; c++) {
					double o = 0;
					for (int p = 0; p <= pos[t]; p++)
						o += s[p] * f16r(v[p * kvd + g * hd + c]);
					worst = fmax(worst, fabs(o / sum - out[t * qd + h * hd + c]));
				}
			}
		check(worst <= 1e-4, "attention %d/%d heads of %d, %d positions, blocks of %d, %d queries, %s %d: error "
				     "%.2e (tolerance 1e-4)",
		      n_head, n_kv, hd, n_pos, bs, nq, split_len ? "slices of" : "prompt tiles,", split_len, worst);
	}
	free(k), free(v), free(q), free(out), free(s), free(pos);
}

static void test_argmax(void)
{
	const int rows = 4, n = 32000;
	float *x = frandv(rows * n, -5, 5);
	x[0 * n + 100] = x[0 * n + 20000] = 9; /* a tie: the first wins */
	x[1 * n + n - 1] = 9;
	for (int i = 0; i < n; i++)
		x[2 * n + i] = 1; /* all equal: 0 */
	x[3 * n + 5] = 7, x[3 * n + 6] = 7.0000005f;
	const int32_t want[] = { 100, n - 1, 0, 6 };
	int32_t ids[4];
	if (!call(cu.argmax(x, rows, n, ids), "argmax"))
		for (int r = 0; r < rows; r++)
			check(ids[r] == want[r], "argmax row %d: %d, want %d", r, ids[r], want[r]);
	free(x);
}

/* ---- the library ----------------------------------------------------------------------- */

static void *open_lib(char *why, size_t len)
{
	char path[4096];
	const char *env = getenv("PAGODA_CUDA_LIB"), *b = getenv("PAGODA_BUILD");
	if (env && env[0])
		snprintf(path, sizeof path, "%s", env);
	else
		snprintf(path, sizeof path, "%s/libpagoda-cuda.so", b && b[0] ? b : "build");
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		snprintf(why, len, "cannot load %.400s: %.400s", path, dlerror());
	return h;
}

#define SYM(f, name)                                                  \
	do {                                                          \
		*(void **)&cu.f = dlsym(h, name);                     \
		if (!cu.f) {                                          \
			fprintf(stderr, "FAIL: no %s in the library\n", name); \
			return 1;                                     \
		}                                                     \
	} while (0)

int main(void)
{
	char why[1024] = "";
	void *h = open_lib(why, sizeof why);
	if (!h) {
		printf("SKIP: %s\n", why);
		return 77;
	}
	pg_backend_entry_fn entry;
	*(void **)&entry = dlsym(h, PG_BACKEND_CUDA_ENTRY);
	const struct pg_backend_ops *ops = entry ? entry(PG_BACKEND_ABI) : NULL;
	if (!ops) {
		fprintf(stderr, "FAIL: the library has no backend entry for ABI %d\n", PG_BACKEND_ABI);
		return 1;
	}
	if (ops->probe(why, sizeof why) <= 0) {
		printf("SKIP: %s\n", why);
		return 77;
	}
	SYM(error, "pgcu_test_error");
	SYM(matmul, "pgcu_test_matmul");
	SYM(embed, "pgcu_test_embed");
	SYM(rmsnorm, "pgcu_test_rmsnorm");
	SYM(swiglu, "pgcu_test_swiglu");
	SYM(rope, "pgcu_test_rope");
	SYM(attn, "pgcu_test_attn");
	SYM(argmax, "pgcu_test_argmax");

	static const int64_t ms[] = { 1, 2, 7, 8, 9, 70 };
	for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
		for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
			test_matmul(types[t], 130, 512, ms[i]);
		test_embed(types[t]);
	}
	test_matmul(PG_TYPE_F32, 70, 100, 3); /* a row that ends mid sub-block */
	test_matmul(PG_TYPE_F16, 70, 172, 20);
	test_rmsnorm(5, 2048);
	test_rmsnorm(3, 64);
	test_swiglu(10000);
	for (int neox = 0; neox < 2; neox++) {
		test_rope(64, 64, neox, 10000, 1, 0);
		test_rope(32, 64, neox, 10000, 1, 0);
		test_rope(128, 128, neox, 500000, 0.25f, 1);
	}
	test_attn(8, 2, 64, 16, 300, 128, 0);
	test_attn(8, 2, 64, 16, 300, 1024, 0);
	test_attn(4, 4, 8, 16, 33, 128, 0);
	test_attn(4, 1, 128, 32, 1000, 128, 0);
	test_attn(2, 2, 256, 16, 70, 32, 0);
	test_attn(8, 2, 64, 16, 300, 0, 300); /* a whole prompt */
	test_attn(8, 2, 64, 16, 300, 0, 77);  /* a chunk after a prefix */
	test_attn(4, 4, 8, 16, 130, 0, 130);
	test_attn(2, 1, 256, 16, 90, 0, 41);
	test_argmax();
	printf("test_cuda: %d passed, %d failed\n", checks - fails, fails);
	return fails ? 1 : 0;
}
