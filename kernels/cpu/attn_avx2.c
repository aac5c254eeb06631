/* kernels/cpu/attn_avx2.c — flash attention over the paged f16 KV cache
 * with F16C and FMA: the avx2 table's kernels, ggml's 256-bit softmax, and
 * the tiled driver both x86 tables share (attn_avx512.c supplies 512-bit
 * pieces for it, see attn.h).
 *
 * One-chunk (decode): the query rows of one GQA group walk the positions
 * together, a block at a time (attn.h), so each K row is converted once
 * for all of them and the V sums stay in registers across the block.
 * Tiled (prefill): a KV tile is converted to f32 once for every query row
 * of the task; q·k runs as broadcast-q FMAs across 8 positions at a time,
 * which is ggml's simd_gemm chain for each score.
 */
#pragma GCC optimize("fp-contract=off") /* no FMAs beyond the ones written */

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/attn.h"
#include "kernels/cpu/vexpf_x86.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define CPOS PG_ATTN_CHUNK_POS
#define CROWS PG_ATTN_CHUNK_ROWS

ALWAYS_INLINE __m256 ld_h(const pg_f16 *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* x rounded to f16 and back: what storing to an f16 accumulator keeps */
ALWAYS_INLINE __m256 rt_h(__m256 x)
{
	return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

ALWAYS_INLINE float rt_h1(float x)
{
	return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

/* _mm512_reduce_add_ps's tree on the upper half's sum with the lower. */
ALWAYS_INLINE float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

ALWAYS_INLINE void to_f32(const pg_f16 *x, float *y, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, ld_h(x + i));
	for (; i < n; i++)
		y[i] = _cvtsh_ss(x[i]);
}

/* ---- one chunk -------------------------------------------------------------- */

/* One block's softmax steps for one query row, in position order, as
 * ggml's one-chunk loop takes them; M and S carry over between blocks. */
static void chunk_steps(const float *s, int nt, float *M, float *S, float *ms, float *vs)
{
	float m = *M, sum = *S;
	for (int t = 0; t < nt; t++) {
		if (s[t] > m) {
			ms[t] = expf(m - s[t]);
			vs[t] = 1.0f;
			m = s[t];
		} else {
			ms[t] = 1.0f;
			vs[t] = expf(s[t] - m);
		}
		sum = fmaf(sum, ms[t], vs[t]); /* contracted in ggml's C++ (-ffp-contract=fast) */
	}
	*M = m;
	*S = sum;
}

/* The elements past the ops' vector width, one at a time. */
static void chunk_tail(const pg_f16 *const *v, int nt, int d0, int hd, const float *ms, const float *vs, int nr,
		       float *acc)
{
	for (int r = 0; r < nr; r++)
		for (int d = d0; d < hd; d++) {
			float a = acc[(size_t)r * hd + d];
			for (int t = 0; t < nt; t++) {
				if (ms[r * CPOS + t] != 1.0f)
					a = rt_h1(a * ms[r * CPOS + t]);
				a = rt_h1(fmaf(_cvtsh_ss(v[t][d]), vs[r * CPOS + t], a));
			}
			acc[(size_t)r * hd + d] = a;
		}
}

/* The K and V rows of the block at p0: the weights streamed since this
 * layer's KV was written have pushed it out of the caches, and each row
 * is a few lines a whole position apart, which the hardware prefetchers
 * do not chase ahead of the loop (the loads were half of the driver's
 * time). */
ALWAYS_INLINE void prefetch_rows(const struct pg_attn_kv *kv, int p0, int n_pos, int hd)
{
	const int end = n_pos - p0 < CPOS ? n_pos : p0 + CPOS;
	for (int p = p0; p < end; p++) {
		const char *k = (const char *)pg_attn_row(kv->k, kv, p), *v = (const char *)pg_attn_row(kv->v, kv, p);
		for (size_t b = 0; b < (size_t)hd * sizeof(pg_f16); b += 64) {
			_mm_prefetch(k + b, _MM_HINT_T0);
			_mm_prefetch(v + b, _MM_HINT_T0);
		}
	}
}

static void chunk_pass(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		       int n_q, float *out, size_t ldo, const struct pg_attn_chunk_ops *ops)
{
	float qf[CROWS * PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float acc[CROWS * PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float kf[CPOS * PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float sc[CROWS * CPOS], ms[CROWS * CPOS], vs[CROWS * CPOS], M[CROWS], S[CROWS];
	const pg_f16 *vr[CPOS];
	const int h64 = hd & ~63, hv = hd - hd % ops->width;
	for (int r = 0; r < n_q; r++) {
		/* the query as ggml's q_to_vec_dot leaves it: rounded to f16 */
		for (int i = 0; i < hd; i++)
			qf[r * hd + i] = rt_h1(q[r * ldq + i]);
		M[r] = -INFINITY;
		S[r] = 0.0f;
	}
	memset(acc, 0, (size_t)n_q * hd * sizeof(float));
	prefetch_rows(kv, 0, n_pos, hd);
	for (int p0 = 0; p0 < n_pos; p0 += CPOS) {
		const int nt = n_pos - p0 < CPOS ? n_pos - p0 : CPOS;
		prefetch_rows(kv, p0 + CPOS, n_pos, hd);
		for (int t = 0; t < nt; t++) {
			to_f32(pg_attn_row(kv->k, kv, p0 + t), kf + (size_t)t * hd, hd);
			vr[t] = pg_attn_row(kv->v, kv, p0 + t);
		}
		if (nt < CPOS) /* the scores of a short block read whole vectors of rows */
			memset(kf + (size_t)nt * hd, 0, (size_t)(CPOS - nt) * hd * sizeof(float));
		ops->scores(kf, nt, qf, n_q, hd, sc);
		for (int r = 0; r < n_q; r++) {
			float *s = sc + r * CPOS;
			for (int t = 0; t < nt; t++) {
				if (h64 != hd) { /* ggml_vec_dot_f16's leftovers, in double */
					double d = s[t];
					for (int i = h64; i < hd; i++)
						d += (double)(kf[(size_t)t * hd + i] * qf[r * hd + i]);
					s[t] = (float)d;
				}
				s[t] *= scale;
			}
			chunk_steps(s, nt, &M[r], &S[r], ms + r * CPOS, vs + r * CPOS);
		}
		ops->accumulate(vr, nt, hd, ms, vs, n_q, acc);
		if (hv != hd)
			chunk_tail(vr, nt, hv, hd, ms, vs, n_q, acc);
	}
	for (int r = 0; r < n_q; r++) {
		const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
		for (int i = 0; i < hd; i++)
			out[r * ldo + i] = acc[r * hd + i] * inv;
	}
}

void pg_attn_chunk_x86(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		       int n_q, float *out, size_t ldo, const struct pg_attn_chunk_ops *ops)
{
	for (int r = 0; r < n_q; r += CROWS)
		chunk_pass(kv, n_pos, hd, scale, q + (size_t)r * ldq, ldq, n_q - r < CROWS ? n_q - r : CROWS,
			   out + (size_t)r * ldo, ldo, ops);
}

/* The 16-lane sum of ggml_vec_dot_f16 (AVX-512 build) for 8 positions at
 * once: per position the upper eight lanes' sum with the lower (the tree's
 * first level), then the other three levels across positions, transposed,
 * which pairs the same lanes as hsum8 would per position. */
ALWAYS_INLINE __m256 dot8_f16(const float *kf, int hd, int h64, const float *q)
{
	__m256 t3[8];
	#pragma GCC unroll 8
	for (int t = 0; t < 8; t++) {
		const float *k = kf + (size_t)t * hd;
		/* named accumulators: a[2j], a[2j+1] are ggml's accumulator j */
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
		for (int i = 0; i < h64; i += 64) {
#define STEP(A, J) A = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8 * (J)), _mm256_loadu_ps(q + i + 8 * (J)), A)
			STEP(a0, 0);
			STEP(a1, 1);
			STEP(a2, 2);
			STEP(a3, 3);
			STEP(a4, 4);
			STEP(a5, 5);
			STEP(a6, 6);
			STEP(a7, 7);
#undef STEP
		}
		const __m256 lo = _mm256_add_ps(_mm256_add_ps(a0, a4), _mm256_add_ps(a2, a6));
		const __m256 hi = _mm256_add_ps(_mm256_add_ps(a1, a5), _mm256_add_ps(a3, a7));
		t3[t] = _mm256_add_ps(hi, lo);
	}
	__m256 t6[4], t8[2];
	for (int i = 0; i < 4; i++) /* [position 2i | 2i+1], lanes l + (l + 4) */
		t6[i] = _mm256_add_ps(_mm256_permute2f128_ps(t3[2 * i], t3[2 * i + 1], 0x20),
				      _mm256_permute2f128_ps(t3[2 * i], t3[2 * i + 1], 0x31));
	for (int i = 0; i < 2; i++) /* per half: (0 + 2, 1 + 3) of two positions */
		t8[i] = _mm256_add_ps(_mm256_shuffle_ps(t6[2 * i], t6[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
				      _mm256_shuffle_ps(t6[2 * i], t6[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
	const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t8[0], t8[1], _MM_SHUFFLE(2, 0, 2, 0)),
				       _mm256_shuffle_ps(t8[0], t8[1], _MM_SHUFFLE(3, 1, 3, 1)));
	/* r holds positions 0 2 4 6 1 3 5 7 */
	return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void chunk_scores8(const float *kf, int nt, const float *qf, int nr, int hd, float *raw)
{
	const int h64 = hd & ~63;
	for (int r = 0; r < nr; r++)
		for (int t0 = 0; t0 < nt; t0 += 8)
			_mm256_storeu_ps(raw + r * CPOS + t0, dot8_f16(kf + (size_t)t0 * hd, hd, h64, qf + (size_t)r * hd));
}

/* nv vectors of 8 elements from d, nr rows (both constants per instance),
 * accumulators in registers across the block's positions. */
ALWAYS_INLINE void acc_rows8(const pg_f16 *const *v, int nt, int hd, int d, const int nv, const float *ms,
			     const float *vs, const int nr, float *acc)
{
	__m256 a[2][4];
	#pragma GCC unroll 2
	for (int r = 0; r < nr; r++)
		#pragma GCC unroll 4
		for (int j = 0; j < nv; j++)
			a[r][j] = _mm256_loadu_ps(acc + (size_t)r * hd + d + 8 * j);
	for (int t = 0; t < nt; t++) {
		__m256 x[4];
		#pragma GCC unroll 4
		for (int j = 0; j < nv; j++)
			x[j] = ld_h(v[t] + d + 8 * j);
		#pragma GCC unroll 2
		for (int r = 0; r < nr; r++) {
			const float m = ms[r * CPOS + t];
			if (m != 1.0f)
				#pragma GCC unroll 4
				for (int j = 0; j < nv; j++)
					a[r][j] = rt_h(_mm256_mul_ps(a[r][j], _mm256_set1_ps(m)));
			const __m256 s = _mm256_set1_ps(vs[r * CPOS + t]);
			#pragma GCC unroll 4
			for (int j = 0; j < nv; j++)
				a[r][j] = rt_h(_mm256_fmadd_ps(x[j], s, a[r][j]));
		}
	}
	#pragma GCC unroll 2
	for (int r = 0; r < nr; r++)
		#pragma GCC unroll 4
		for (int j = 0; j < nv; j++)
			_mm256_storeu_ps(acc + (size_t)r * hd + d + 8 * j, a[r][j]);
}

static void chunk_accumulate8(const pg_f16 *const *v, int nt, int hd, const float *ms, const float *vs, int nr,
			      float *acc)
{
	const int hv = hd & ~7;
	for (int r = 0; r < nr; r += 2) {
		const float *m = ms + r * CPOS, *s = vs + r * CPOS;
		float *a = acc + (size_t)r * hd;
		int d = 0;
		if (r + 1 < nr) {
			for (; d + 32 <= hv; d += 32)
				acc_rows8(v, nt, hd, d, 4, m, s, 2, a);
			for (; d < hv; d += 8)
				acc_rows8(v, nt, hd, d, 1, m, s, 2, a);
		} else {
			for (; d + 32 <= hv; d += 32)
				acc_rows8(v, nt, hd, d, 4, m, s, 1, a);
			for (; d < hv; d += 8)
				acc_rows8(v, nt, hd, d, 1, m, s, 1, a);
		}
	}
}

const struct pg_attn_chunk_ops pg_attn_chunk_avx2 = { chunk_scores8, chunk_accumulate8, 8 };


/* ---- tiled ---------------------------------------------------------------- */

#define KVT PG_ATTN_KV_TILE

/* Scores of up to 4 query rows against tile columns [0, nw) (nw a multiple
 * of 8): kq[r][j] = (fma chain over d of kt[d][j] * q[r][d]) * scale. The
 * row count is a constant in each instance (tile_scores below), so the
 * accumulators stay in registers instead of going through the stack on
 * every FMA. */
ALWAYS_INLINE void scores_nr(const float *kt, int hd, const float *q, size_t ldq, const int nr, float scale,
			     int nw, float *kq)
{
	const __m256 vsc = _mm256_set1_ps(scale);
	for (int j = 0; j < nw; j += 16) {
		const int two = j + 16 <= nw;
		__m256 a[4][2];
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++)
			a[r][0] = a[r][1] = _mm256_setzero_ps();
		for (int d = 0; d < hd; d++) {
			const __m256 k0 = _mm256_load_ps(kt + (size_t)d * KVT + j);
			const __m256 k1 = two ? _mm256_load_ps(kt + (size_t)d * KVT + j + 8) : k0;
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				const __m256 qv = _mm256_set1_ps(q[r * ldq + d]);
				a[r][0] = _mm256_fmadd_ps(k0, qv, a[r][0]);
				a[r][1] = _mm256_fmadd_ps(k1, qv, a[r][1]);
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			_mm256_storeu_ps(kq + r * KVT + j, _mm256_mul_ps(a[r][0], vsc));
			if (two)
				_mm256_storeu_ps(kq + r * KVT + j + 8, _mm256_mul_ps(a[r][1], vsc));
		}
	}
}

static void tile_scores(const float *kt, int hd, const float *q, size_t ldq, int nr, float scale, int nw,
			float *kq)
{
	switch (nr) {
	case 1: scores_nr(kt, hd, q, ldq, 1, scale, nw, kq); break;
	case 2: scores_nr(kt, hd, q, ldq, 2, scale, nw, kq); break;
	case 3: scores_nr(kt, hd, q, ldq, 3, scale, nw, kq); break;
	default: scores_nr(kt, hd, q, ldq, 4, scale, nw, kq); break;
	}
}

/* acc[r] += sum over t < nt of kq[r][t] * v[t], as one FMA chain per
 * element in t order (ggml's simd_gemm on VKQ32); instances as above. */
ALWAYS_INLINE void accumulate_nr(const float *v, int hd, const float *kq, const int nr, int nt, float *acc)
{
	for (int d = 0; d < hd; d += 16) {
		const int two = d + 16 <= hd;
		__m256 a[4][2];
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			a[r][0] = _mm256_load_ps(acc + (size_t)r * hd + d);
			a[r][1] = two ? _mm256_load_ps(acc + (size_t)r * hd + d + 8) : a[r][0];
		}
		for (int t = 0; t < nt; t++) {
			const __m256 v0 = _mm256_load_ps(v + (size_t)t * hd + d);
			const __m256 v1 = two ? _mm256_load_ps(v + (size_t)t * hd + d + 8) : v0;
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				const __m256 p = _mm256_set1_ps(kq[r * KVT + t]);
				a[r][0] = _mm256_fmadd_ps(v0, p, a[r][0]);
				a[r][1] = _mm256_fmadd_ps(v1, p, a[r][1]);
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			_mm256_store_ps(acc + (size_t)r * hd + d, a[r][0]);
			if (two)
				_mm256_store_ps(acc + (size_t)r * hd + d + 8, a[r][1]);
		}
	}
}

static void tile_accumulate(const float *v, int hd, const float *kq, int nr, int nt, float *acc)
{
	switch (nr) {
	case 1: accumulate_nr(v, hd, kq, 1, nt, acc); break;
	case 2: accumulate_nr(v, hd, kq, 2, nt, acc); break;
	case 3: accumulate_nr(v, hd, kq, 3, nt, acc); break;
	default: accumulate_nr(v, hd, kq, 4, nt, acc); break;
	}
}

static void scale_row(float *x, int n, float s)
{
	const __m256 vs = _mm256_set1_ps(s);
	for (int i = 0; i < n; i += 8)
		_mm256_store_ps(x + i, _mm256_mul_ps(_mm256_load_ps(x + i), vs));
}

void pg_attn_tiled_x86(const struct pg_attn_kv *kv, const int *n_pos, int hd, float scale, const float *q,
		       size_t ldq, int n_q, float *out, size_t ldo, float *work, const struct pg_attn_tiled_ops *ops)
{
	const int sm_width = ops->sm_width;
	float *kt = work + pg_attn_work_kt(hd), *vt = work + pg_attn_work_v(hd);
	float *kq = work + pg_attn_work_kq(hd), *M = work + pg_attn_work_ms(hd), *S = M + n_q;
	float *acc = work + pg_attn_work_acc(hd, n_q);
	int max_pos = 0;
	for (int r = 0; r < n_q; r++) {
		M[r] = -INFINITY;
		S[r] = 0.0f;
		if (n_pos[r] > max_pos)
			max_pos = n_pos[r];
	}
	memset(acc, 0, (size_t)n_q * hd * sizeof(float));
	for (int ic = 0; ic < max_pos; ic += KVT) {
		const int nt = max_pos - ic < KVT ? max_pos - ic : KVT;
		/* columns past the tile are read (and then masked): keep them finite */
		for (int d = 0; d < hd && nt % 16; d++)
			memset(kt + (size_t)d * KVT + nt, 0, (size_t)(-nt & 15) * sizeof(float));
		for (int t = 0; t < nt; t++) {
			const pg_f16 *kr = pg_attn_row(kv->k, kv, ic + t);
			to_f32(pg_attn_row(kv->v, kv, ic + t), vt + (size_t)t * hd, hd);
			for (int d = 0; d < hd; d += 8) {
				float tmp[8];
				_mm256_storeu_ps(tmp, ld_h(kr + d));
				for (int e = 0; e < 8; e++)
					kt[(size_t)(d + e) * KVT + t] = tmp[e];
			}
		}
		for (int r0 = 0; r0 < n_q; r0 += 4) {
			const int nr = n_q - r0 < 4 ? n_q - r0 : 4;
			int nv[4], nvmax = 0;
			for (int r = 0; r < nr; r++) {
				const int left = n_pos[r0 + r] - ic;
				nv[r] = left <= 0 ? 0 : left < KVT ? left : KVT;
				if (nv[r] > nvmax)
					nvmax = nv[r];
			}
			if (!nvmax)
				continue;
			/* every score a softmax vector of any row can reach */
			const int nw = (nvmax + 15) & ~15;
			ops->scores(kt, hd, q + (size_t)r0 * ldq, ldq, nr, scale, nw, kq);
			for (int r = 0; r < nr; r++) {
				float *row = kq + r * KVT;
				const int i = r0 + r;
				if (!nv[r]) {
					memset(row, 0, (size_t)nvmax * sizeof(float));
					continue;
				}
				/* ggml masks the positions past the row's own with -inf
				 * and pads the tile: they give exp() == 0 */
				const int ns = (nv[r] + sm_width - 1) / sm_width * sm_width;
				for (int t = nv[r]; t < ns; t++)
					row[t] = -INFINITY;
				float tmax = -INFINITY;
				for (int t = 0; t < nv[r]; t++)
					tmax = tmax > row[t] ? tmax : row[t];
				const float mnew = fmaxf(M[i], tmax);
				if (mnew > M[i]) {
					const float ms = expf(M[i] - mnew);
					scale_row(acc + (size_t)i * hd, hd, ms);
					S[i] *= ms;
				}
				M[i] = mnew;
				S[i] = (float)((double)S[i] + ops->softmax(row, ns, mnew));
				for (int t = ns; t < nvmax; t++)
					row[t] = 0.0f;
			}
			ops->accumulate(vt, hd, kq, nr, nvmax, acc + (size_t)r0 * hd);
		}
	}
	for (int r = 0; r < n_q; r++) {
		const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
		for (int d = 0; d < hd; d++)
			out[r * ldo + d] = acc[(size_t)r * hd + d] * inv;
	}
}

/* ---- ggml's 256-bit softmax ------------------------------------------------ */

static double softmax_avx2(float *x, int n, float max)
{
	double sum = 0;
	for (int i = 0; i < n; i += 8) {
		const __m256 v = pg_v_expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
		_mm256_storeu_ps(x + i, v);
		sum += (double)hsum8(v);
	}
	return sum;
}

const struct pg_attn_tiled_ops pg_attn_tiled_avx2 = { tile_scores, tile_accumulate, softmax_avx2, 8 };
