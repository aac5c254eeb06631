/* tests/unit/test_attn.c — the attention kernels against a plain C
 * transcription of ggml's CPU flash attention (ggml-cpu/ops.cpp:
 * ggml_compute_forward_flash_attn_ext_f16_one_chunk and
 * ggml_compute_forward_flash_attn_ext_tiled, with vec.h's helpers and
 * simd-gemm.h), bit for bit, on every ISA the machine has.
 *
 * The reference works the way llama.cpp does: one contiguous K/V per head
 * over a padded cache, a causal f16 mask, whole 64x64 tiles, SIMD lanes
 * emulated one by one (ggml_v_expf lane by lane, the reduction trees of
 * _mm512_reduce_add_ps and of the 256-bit hsum). The kernels under test
 * read a paged cache whose blocks are shuffled.
 */
#pragma GCC optimize("fp-contract=off") /* the reference writes its FMAs */

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

enum isa { ISA_SCALAR, ISA_AVX2, ISA_AVX512 };
static const char *const isa_name[] = { "scalar", "avx2", "avx512" };

static uint64_t rng = 0x243F6A8885A308D3ull;
static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}
static float grand(void)
{
	return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()));
}

static float h2f(pg_f16 h)
{
	return pg_f16_to_f32(h);
}
static pg_f16 f2h(float f)
{
	return pg_f32_to_f16(f);
}

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}
static float bitsf(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* ---- ggml's SIMD pieces, one lane at a time ------------------------------ */

/* ggml_v_expf, AVX-512 (vec.h) */
static float expf_512(float x, int *special)
{
	const float r = 0x1.8p23f, z = fmaf(x, 0x1.715476p+0f, r), n = z - r;
	const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	const float u = b * b;
	const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
			     u, fmaf(0x1.ffffecp-1f, b, 1.0f));
	if (fabsf(n) > 192) {
		*special = 1;
		return n <= 0 ? 0.0f : INFINITY;
	}
	return ldexpf(j, (int)n); /* vscalefps with an integral n */
}

/* ggml_v_expf, AVX2 (vec.h) */
static float expf_256(float x)
{
	const float r = 0x1.8p23f, z = fmaf(x, 0x1.715476p+0f, r), n = z - r;
	const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	const uint32_t e = fbits(z) << 23;
	const float k = bitsf(e + fbits(1.0f));
	const float u = b * b;
	const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
			     u, 0x1.ffffecp-1f * b);
	if (!(fabsf(n) > 126))
		return fmaf(k, j, k);
	const uint32_t g = n <= 0 ? 0x82000000u : 0;
	const float s1 = bitsf(g + 0x7f000000u), s2 = bitsf(e - g);
	if (fabsf(n) > 192)
		return s1 * s1;
	return fmaf(s2, j, s2) * s1;
}

/* _mm512_reduce_add_ps */
static float reduce16(const float *l)
{
	float t3[8], t6[4];
	for (int i = 0; i < 8; i++)
		t3[i] = l[i + 8] + l[i];
	for (int i = 0; i < 4; i++)
		t6[i] = t3[i + 4] + t3[i];
	return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

/* the 256-bit hsum of vec.cpp's softmax */
static float reduce8(const float *l)
{
	float s[4];
	for (int i = 0; i < 4; i++)
		s[i] = l[i + 4] + l[i];
	return (s[0] + s[2]) + (s[1] + s[3]);
}

/* ggml_vec_soft_max_f32(n, x, x, max) */
static double ref_softmax(enum isa isa, int n, float *x, float max)
{
	double sum = 0;
	int i = 0;
	if (isa == ISA_AVX512)
		for (; i + 15 < n; i += 16) {
			float v[16];
			int special = 0;
			for (int l = 0; l < 16; l++)
				v[l] = expf_512(x[i + l] - max, &special);
			memcpy(x + i, v, sizeof v);
			sum += (double)reduce16(v);
		}
	else if (isa == ISA_AVX2)
		for (; i + 7 < n; i += 8) {
			float v[8];
			for (int l = 0; l < 8; l++)
				v[l] = expf_256(x[i + l] - max);
			memcpy(x + i, v, sizeof v);
			sum += (double)reduce8(v);
		}
	for (; i < n; ++i) {
		const float val = expf(x[i] - max);
		sum += (double)val;
		x[i] = val;
	}
	return sum;
}

/* ggml_vec_dot_f16 as pagoda's SIMD tables sum it: llama.cpp's AVX-512
 * build (GGML_F16_STEP 64, four 16-lane accumulators); scalar: double. */
static float ref_dot_f16(enum isa isa, int n, const pg_f16 *x, const pg_f16 *y)
{
	if (isa == ISA_SCALAR) {
		double s = 0;
		for (int i = 0; i < n; i++)
			s += (double)(h2f(x[i]) * h2f(y[i]));
		return (float)s;
	}
	float acc[4][16] = { { 0 } };
	int i = 0;
	for (; i + 64 <= n; i += 64)
		for (int j = 0; j < 4; j++)
			for (int l = 0; l < 16; l++)
				acc[j][l] = fmaf(h2f(x[i + 16 * j + l]), h2f(y[i + 16 * j + l]), acc[j][l]);
	float h[16];
	for (int l = 0; l < 16; l++)
		h[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
	double s = reduce16(h);
	for (; i < n; i++)
		s += (double)(h2f(x[i]) * h2f(y[i]));
	return (float)s;
}

/* simd_gemm: C[M x N] += A[M x K] * B[K x N]; with SIMD each element is
 * one FMA chain over kk (GGML_F32_VEC_FMA), without it a*b then +. */
static void ref_gemm(enum isa isa, float *C, const float *A, const float *B, int M, int K, int N)
{
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float acc = C[i * N + j];
			for (int kk = 0; kk < K; kk++)
				acc = isa == ISA_SCALAR ? acc + A[i * K + kk] * B[kk * N + j]
							: fmaf(B[kk * N + j], A[i * K + kk], acc);
			C[i * N + j] = acc;
		}
}

/* ---- the cache as llama.cpp holds it ---------------------------------------- */

struct cache {
	int n_kv, hd, n_head_kv;
	pg_f16 *k, *v; /* [n_kv][n_head_kv][hd] */
};

static const pg_f16 *ck(const struct cache *c, int pos, int h)
{
	return c->k + ((size_t)pos * c->n_head_kv + h) * c->hd;
}
static const pg_f16 *cv(const struct cache *c, int pos, int h)
{
	return c->v + ((size_t)pos * c->n_head_kv + h) * c->hd;
}

/* ggml_compute_forward_flash_attn_ext_f16_one_chunk for one row, mask 0 on
 * positions <= qpos and -inf past it. */
static void ref_one_chunk(enum isa isa, const struct cache *c, int h, const float *q, int qpos, float scale,
			  float *out)
{
	const int D = c->hd;
	pg_f16 Q_q[512], VKQ16[512];
	float VKQ32[512];
	float S = 0.0f, M = -INFINITY;
	memset(VKQ16, 0, sizeof VKQ16);
	for (int i = 0; i < D; i++)
		Q_q[i] = f2h(q[i]);
	for (int ic = 0; ic < c->n_kv; ++ic) {
		const float mv = ic <= qpos ? 0.0f : -INFINITY;
		if (mv == -INFINITY)
			continue;
		float s = ref_dot_f16(isa, D, ck(c, ic, h), Q_q);
		s = s * scale;
		s += mv;
		const float Mold = M;
		float ms = 1.0f, vs = 1.0f;
		const pg_f16 *v = cv(c, ic, h);
		if (s > M) {
			M = s;
			ms = expf(Mold - M);
			for (int i = 0; i < D; i++) /* ggml_vec_scale_f16 */
				VKQ16[i] = f2h(h2f(VKQ16[i]) * ms);
		} else {
			vs = expf(s - M);
		}
		for (int i = 0; i < D; i++) /* ggml_vec_mad_f16 */
			VKQ16[i] = f2h(fmaf(h2f(v[i]), vs, h2f(VKQ16[i])));
		/* GCC contracts this line of ops.cpp (C++, -ffp-contract=fast)
		 * where the build has FMA */
		S = isa == ISA_SCALAR ? S * ms + vs : fmaf(S, ms, vs);
	}
	for (int d = 0; d < D; ++d)
		VKQ32[d] = h2f(VKQ16[d]);
	const float S_inv = S == 0.0f ? 0.0f : 1.0f / S;
	for (int d = 0; d < D; d++)
		out[d] = VKQ32[d] * S_inv;
}

#define QT 64
#define KT 64

/* ggml_compute_forward_flash_attn_ext_tiled for query head h over a
 * ubatch of n_tok tokens at positions qpos[] (q rows of hd, row stride ldq):
 * Q tiles of 64 rows of that head, KV tiles of 64 from 0. */
static void ref_tiled(enum isa isa, const struct cache *c, int h, const float *q, size_t ldq, const int *qpos,
		      int n_tok, float scale, float *out, size_t ldo)
{
	const int DK = c->hd, DV = c->hd;
	float *Q = calloc((size_t)QT * DK, 4), *KQ = calloc(QT * KT, 4), *mask32 = calloc(QT * KT, 4);
	float *VKQ = calloc((size_t)QT * DV, 4), *V32 = calloc((size_t)KT * DV, 4), *K32 = calloc((size_t)KT * DK, 4);
	for (int ir = 0; ir < n_tok; ir += QT) {
		const int tile_rows = n_tok - ir < QT ? n_tok - ir : QT;
		float S[QT], M[QT];
		for (int i = 0; i < QT; i++) {
			S[i] = 0.0f;
			M[i] = -INFINITY;
		}
		memset(VKQ, 0, (size_t)QT * DV * 4);
		memset(mask32, 0, QT * KT * 4);
		memset(Q, 0, (size_t)QT * DK * 4);
		for (int tq = 0; tq < tile_rows; tq++)
			memcpy(Q + tq * DK, q + (ir + tq) * ldq, DK * 4);
		memset(K32, 0, (size_t)DK * KT * 4);
		memset(V32, 0, (size_t)KT * DV * 4);
		for (int ic = 0; ic < c->n_kv; ic += KT) {
			const int kv_tile = c->n_kv - ic < KT ? c->n_kv - ic : KT;
			int can_skip = 1;
			for (int tq = 0; tq < tile_rows; tq++) {
				for (int tk = 0; tk < kv_tile; tk++) {
					const float mv = ic + tk <= qpos[ir + tq] ? 0.0f : -INFINITY;
					mask32[tq * KT + tk] = 1.0f * h2f(f2h(mv));
					if (mask32[tq * KT + tk] != -INFINITY)
						can_skip = 0;
				}
				for (int tk = kv_tile; tk < KT; tk++)
					mask32[tq * KT + tk] = -INFINITY;
			}
			if (can_skip)
				continue;
			for (int tk = 0; tk < kv_tile; tk++)
				for (int dk = 0; dk < DK; dk++)
					K32[dk * KT + tk] = h2f(ck(c, ic + tk, h)[dk]);
			memset(KQ, 0, QT * KT * 4);
			ref_gemm(isa, KQ, Q, K32, QT, DK, KT);
			for (int i = 0; i < QT * KT; i++)
				KQ[i] *= scale;
			if (kv_tile < KT)
				for (int tq = 0; tq < QT; tq++)
					for (int tk = kv_tile; tk < KT; tk++)
						KQ[tq * KT + tk] = -INFINITY;
			for (int i = 0; i < tile_rows * KT; i++)
				KQ[i] = KQ[i] + mask32[i];
			int skip[QT] = { 0 };
			for (int tq = 0; tq < QT; tq++) {
				float *row = KQ + tq * KT, tile_max = -INFINITY;
				for (int i = 0; i < KT; i++)
					tile_max = tile_max > row[i] ? tile_max : row[i];
				if (tile_max == -INFINITY) {
					skip[tq] = 1;
					continue;
				}
				const float Mold = M[tq], Mnew = fmaxf(Mold, tile_max);
				if (Mnew > Mold) {
					const float ms = expf(Mold - Mnew);
					for (int d = 0; d < DV; d++)
						VKQ[tq * DV + d] *= ms;
					S[tq] *= ms;
				}
				M[tq] = Mnew;
				S[tq] += ref_softmax(isa, KT, row, Mnew);
			}
			for (int tk = 0; tk < kv_tile; tk++)
				for (int d = 0; d < DV; d++)
					V32[tk * DV + d] = h2f(cv(c, ic + tk, h)[d]);
			for (int tq = 0; tq < QT; tq++)
				if (skip[tq])
					memset(KQ + tq * KT, 0, KT * 4);
			ref_gemm(isa, VKQ, KQ, V32, QT, KT, DV);
		}
		for (int tq = 0; tq < tile_rows; tq++) {
			const float S_inv = S[tq] == 0.0f ? 0.0f : 1.0f / S[tq];
			for (int d = 0; d < DV; d++)
				out[(ir + tq) * ldo + d] = VKQ[tq * DV + d] * S_inv;
		}
	}
	free(Q);
	free(KQ);
	free(mask32);
	free(VKQ);
	free(V32);
	free(K32);
}

/* ---- the cache as pagoda pages it --------------------------------------------- */

#define BS 16

struct paged {
	pg_f16 *k, *v;                 /* n_blocks blocks of BS positions x kv_dim */
	const pg_f16 **kb, **vb;       /* per head: nb pointers */
	int nb;
};

/* Copies c into shuffled blocks; kb/vb for head h at [h * nb]. */
static void page(const struct cache *c, struct paged *p)
{
	const int kv_dim = c->n_head_kv * c->hd;
	p->nb = (c->n_kv + BS - 1) / BS;
	int *perm = malloc(p->nb * sizeof *perm);
	for (int i = 0; i < p->nb; i++)
		perm[i] = i;
	for (int i = p->nb - 1; i > 0; i--) {
		int j = (int)(urand() * (i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	p->k = calloc((size_t)p->nb * BS * kv_dim, sizeof(pg_f16));
	p->v = calloc((size_t)p->nb * BS * kv_dim, sizeof(pg_f16));
	p->kb = malloc((size_t)p->nb * c->n_head_kv * sizeof *p->kb);
	p->vb = malloc((size_t)p->nb * c->n_head_kv * sizeof *p->vb);
	for (int pos = 0; pos < c->n_kv; pos++) {
		const size_t at = ((size_t)perm[pos / BS] * BS + pos % BS) * kv_dim;
		memcpy(p->k + at, ck(c, pos, 0), kv_dim * sizeof(pg_f16));
		memcpy(p->v + at, cv(c, pos, 0), kv_dim * sizeof(pg_f16));
	}
	for (int h = 0; h < c->n_head_kv; h++)
		for (int b = 0; b < p->nb; b++) {
			p->kb[h * p->nb + b] = p->k + (size_t)perm[b] * BS * kv_dim + (size_t)h * c->hd;
			p->vb[h * p->nb + b] = p->v + (size_t)perm[b] * BS * kv_dim + (size_t)h * c->hd;
		}
	free(perm);
}

static void unpage(struct paged *p)
{
	free(p->k);
	free(p->v);
	free(p->kb);
	free(p->vb);
}

/* Random K/V with a spread of scores wide enough that the running maximum
 * moves (rescales) and narrow enough that many positions weigh in. */
static void fill_cache(struct cache *c, int n_kv, int hd, int n_head_kv)
{
	c->n_kv = n_kv;
	c->hd = hd;
	c->n_head_kv = n_head_kv;
	const size_t n = (size_t)n_kv * n_head_kv * hd;
	c->k = malloc(n * sizeof(pg_f16));
	c->v = malloc(n * sizeof(pg_f16));
	for (size_t i = 0; i < n; i++) {
		c->k[i] = f2h(grand() * 1.5f);
		c->v[i] = f2h(grand());
	}
}

static int n_mismatch(const float *a, const float *b, size_t n, const char *what, enum isa isa, int len, int hd)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++)
		if (fbits(a[i]) != fbits(b[i])) {
			if (!bad)
				fprintf(stderr, "%s %s len %d hd %d: [%zu] got %.9g want %.9g\n", what, isa_name[isa],
					len, hd, i, a[i], b[i]);
			bad++;
		}
	return bad;
}

static const int lens[] = { 1, 63, 64, 65, 200, 700 };
static const int hds[] = { 64, 128, 80 };
#define GROUP 4
#define N_HEAD_KV 2

/* One token at position len-1 (one-chunk) for a GQA group of `group`
 * query rows, against ggml's loop, in every ISA this CPU runs. */
static void check_chunk(int hd, int len, int group)
{
	struct cache c;
	fill_cache(&c, len + 37, hd, N_HEAD_KV); /* positions past the query: masked */
	struct paged p;
	page(&c, &p);
	const float scale = 1.0f / sqrtf((float)hd);
	float *q = malloc((size_t)group * hd * 4), *got = malloc((size_t)group * hd * 4),
	      *want = malloc((size_t)group * hd * 4);
	for (int i = 0; i < group * hd; i++)
		q[i] = grand();
	const char *saved = pg_cpu_isa();
	int tested = 0;
	for (int isa = ISA_SCALAR; isa <= ISA_AVX512; isa++) {
		if (!pg_cpu_set_isa(isa_name[isa]))
			continue;
		tested++;
		for (int kvh = 0; kvh < N_HEAD_KV; kvh++) {
			struct pg_attn_kv kv = { p.kb + kvh * p.nb, p.vb + kvh * p.nb, BS,
						 (size_t)N_HEAD_KV * hd };
			pg_attn_chunk(&kv, len, hd, scale, q, hd, group, got, hd);
			for (int r = 0; r < group; r++)
				ref_one_chunk(isa, &c, kvh, q + r * hd, len - 1, scale, want + r * hd);
			ck_assert_int_eq(n_mismatch(got, want, (size_t)group * hd, "one-chunk", isa, len, hd), 0);
		}
	}
	ck_assert_int_gt(tested, 0);
	ck_assert(pg_cpu_set_isa(saved));
	free(q);
	free(got);
	free(want);
	unpage(&p);
	free(c.k);
	free(c.v);
}

START_TEST(test_chunk_matches_ggml)
{
	check_chunk(hds[_i % 3], lens[_i / 3], GROUP);
}
END_TEST

/* The kernels take blocks of positions and groups of rows (4 at a time on
 * 512 bits, 2 on 256, 16 a pass): odd group sizes, more rows than a pass,
 * head sizes with no whole 64 (the dot's leftovers) or no whole vector
 * (the V sum's scalar tail). */
START_TEST(test_chunk_shapes)
{
	static const int groups[] = { 1, 3, 6, 17 }, shd[] = { 64, 32, 72, 128 }, slen[] = { 40, 17, 33, 90 };
	check_chunk(shd[_i % 4], slen[_i % 4], groups[_i / 4]);
}
END_TEST

START_TEST(test_tiled_matches_ggml)
{
	const int hd = hds[_i % 3], len = lens[(_i / 3) % 6], prefix = _i >= 18 ? 100 : 0;
	const int n_kv = (prefix + len + 255) / 256 * 256; /* llama.cpp pads the cache view */
	struct cache c;
	fill_cache(&c, n_kv, hd, N_HEAD_KV);
	struct paged p;
	page(&c, &p);
	const float scale = 1.0f / sqrtf((float)hd);
	/* rows token-major: (token i, head g) at row i * GROUP + g */
	const int n_q = len * GROUP;
	float *q = malloc((size_t)n_q * hd * 4), *got = malloc((size_t)n_q * hd * 4),
	      *want = malloc((size_t)n_q * hd * 4);
	int *n_pos = malloc(n_q * sizeof(int)), *qpos = malloc(len * sizeof(int));
	for (int i = 0; i < n_q * hd; i++)
		q[i] = grand();
	for (int i = 0; i < len; i++) {
		qpos[i] = prefix + i;
		for (int g = 0; g < GROUP; g++)
			n_pos[i * GROUP + g] = prefix + i + 1;
	}
	const char *saved = pg_cpu_isa();
	int tested = 0;
	for (int isa = ISA_SCALAR; isa <= ISA_AVX512; isa++) {
		if (!pg_cpu_set_isa(isa_name[isa]))
			continue;
		ck_assert(pg_attn_tiled_ok(hd));
		tested++;
		float *work = aligned_alloc(64, (pg_attn_tiled_work(hd, n_q) * 4 + 63) & ~(size_t)63);
		for (int kvh = 0; kvh < N_HEAD_KV; kvh++) {
			struct pg_attn_kv kv = { p.kb + kvh * p.nb, p.vb + kvh * p.nb, BS,
						 (size_t)N_HEAD_KV * hd };
			pg_attn_tiled(&kv, n_pos, hd, scale, q, hd, n_q, got, hd, work);
			/* the reference's cache holds one head: view it at kvh */
			struct cache ch = c;
			ch.k = c.k + (size_t)kvh * hd;
			ch.v = c.v + (size_t)kvh * hd;
			for (int g = 0; g < GROUP; g++)
				ref_tiled(isa, &ch, 0, q + g * hd, (size_t)GROUP * hd, qpos, len, scale, want + g * hd,
					  (size_t)GROUP * hd);
			ck_assert_int_eq(n_mismatch(got, want, (size_t)n_q * hd, "tiled", isa, len, hd), 0);
		}
		free(work);
	}
	ck_assert_int_gt(tested, 0);
	ck_assert(pg_cpu_set_isa(saved));
	free(q);
	free(got);
	free(want);
	free(n_pos);
	free(qpos);
	unpage(&p);
	free(c.k);
	free(c.v);
}
END_TEST

/* The tiled path differs from the one-chunk path in rounding only: close. */
START_TEST(test_paths_agree_roughly)
{
	const int hd = 64, len = 200;
	struct cache c;
	fill_cache(&c, len, hd, 1);
	struct paged p;
	page(&c, &p);
	float q[64], a[64], b[64];
	for (int i = 0; i < hd; i++)
		q[i] = grand();
	float *work = aligned_alloc(64, (pg_attn_tiled_work(hd, 1) * 4 + 63) & ~(size_t)63);
	struct pg_attn_kv kv = { p.kb, p.vb, BS, (size_t)hd };
	int n_pos = len;
	pg_attn_chunk(&kv, len, hd, 0.125f, q, hd, 1, a, hd);
	pg_attn_tiled(&kv, &n_pos, hd, 0.125f, q, hd, 1, b, hd, work);
	for (int i = 0; i < hd; i++)
		ck_assert_float_eq_tol(a[i], b[i], 2e-2f);
	free(work);
	unpage(&p);
	free(c.k);
	free(c.v);
}
END_TEST

static Suite *attn_suite(void)
{
	Suite *s = suite_create("attn");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_chunk_matches_ggml, 0, 18);
	tcase_add_loop_test(tc, test_chunk_shapes, 0, 16);
	tcase_add_loop_test(tc, test_tiled_matches_ggml, 0, 36);
	tcase_add_test(tc, test_paths_agree_roughly);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(attn_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
