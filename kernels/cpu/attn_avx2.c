/* kernels/cpu/attn_avx2.c — flash attention over the paged f16 KV cache
 * with F16C and FMA: the avx2 table's kernels, ggml's 256-bit softmax, and
 * the tiled driver both x86 tables share (attn_avx512.c supplies 512-bit
 * pieces for it, see attn.h).
 *
 * One-chunk (decode): the query rows of one GQA group walk the positions
 * together, so each K and V row is converted once for all of them.
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

/* Query rows one pass of the one-chunk kernel carries. */
#define CHUNK_ROWS 16

ALWAYS_INLINE __m256 ld_h(const pg_f16 *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

ALWAYS_INLINE void st_h(pg_f16 *p, __m256 v)
{
	_mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* _mm512_reduce_add_ps's tree on the upper half's sum with the lower. */
ALWAYS_INLINE float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* ggml_vec_dot_f16 as llama.cpp's AVX-512 build sums it: four 16-lane
 * accumulators over steps of 64 (here as eight 8-lane halves; a[2j] and
 * a[2j+1] are accumulator j), reduced (a0 + a2) + (a1 + a3), then the
 * 16-lane tree; leftovers one by one in double. */
ALWAYS_INLINE float dot_ggml(const float *k, const float *q, int hd)
{
	/* named accumulators: an array of them ends up on the stack */
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
	int i = 0;
	for (; i + 64 <= hd; i += 64) {
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
	const float v = hsum8(_mm256_add_ps(hi, lo));
	if (i == hd)
		return v;
	double t = v;
	for (; i < hd; i++)
		t += (double)(k[i] * q[i]);
	return (float)t;
}

/* acc = f16(f32(acc) * ms) then acc = f16(fma(v, vs, f32(acc))):
 * ggml_vec_scale_f16 and ggml_vec_mad_f16, one rounding each. */
ALWAYS_INLINE void acc_update(pg_f16 *acc, const float *v, float ms, float vs, int hd, int rescale)
{
	const __m256 vms = _mm256_set1_ps(ms), vvs = _mm256_set1_ps(vs);
	int i = 0;
	for (; i + 8 <= hd; i += 8) {
		__m256 a = ld_h(acc + i);
		if (rescale)
			a = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(a, vms), _MM_FROUND_TO_NEAREST_INT));
		st_h(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vvs, a));
	}
	for (; i < hd; i++) {
		float a = _cvtsh_ss(acc[i]);
		if (rescale)
			a = _cvtsh_ss(_cvtss_sh(a * ms, _MM_FROUND_TO_NEAREST_INT));
		acc[i] = _cvtss_sh(fmaf(v[i], vs, a), _MM_FROUND_TO_NEAREST_INT);
	}
}

ALWAYS_INLINE void to_f32(const pg_f16 *x, float *y, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, ld_h(x + i));
	for (; i < n; i++)
		y[i] = _cvtsh_ss(x[i]);
}

static void chunk_pass(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		       int n_q, float *out, size_t ldo)
{
	float qf[CHUNK_ROWS][PG_ATTN_MAX_HD] __attribute__((aligned(32)));
	pg_f16 acc[CHUNK_ROWS][PG_ATTN_MAX_HD] __attribute__((aligned(32)));
	float kf[PG_ATTN_MAX_HD] __attribute__((aligned(32))), vf[PG_ATTN_MAX_HD] __attribute__((aligned(32)));
	float M[CHUNK_ROWS], S[CHUNK_ROWS];
	for (int r = 0; r < n_q; r++) {
		/* the query as ggml's q_to_vec_dot leaves it: rounded to f16 */
		for (int i = 0; i < hd; i++)
			qf[r][i] = _cvtsh_ss(_cvtss_sh(q[r * ldq + i], _MM_FROUND_TO_NEAREST_INT));
		memset(acc[r], 0, (size_t)hd * sizeof(pg_f16));
		M[r] = -INFINITY;
		S[r] = 0.0f;
	}
	for (int p0 = 0; p0 < n_pos; p0 += kv->block_size) {
		const pg_f16 *kb = kv->k[p0 / kv->block_size], *vb = kv->v[p0 / kv->block_size];
		const int end = n_pos - p0 < kv->block_size ? n_pos - p0 : kv->block_size;
		for (int i = 0; i < end; i++) {
			to_f32(kb + (size_t)i * kv->stride, kf, hd);
			to_f32(vb + (size_t)i * kv->stride, vf, hd);
			for (int r = 0; r < n_q; r++) {
				const float s = dot_ggml(kf, qf[r], hd) * scale;
				float ms = 1.0f, vs = 1.0f;
				int rescale = 0;
				if (s > M[r]) {
					ms = expf(M[r] - s);
					M[r] = s;
					rescale = 1;
				} else {
					vs = expf(s - M[r]);
				}
				acc_update(acc[r], vf, ms, vs, hd, rescale);
				S[r] = fmaf(S[r], ms, vs); /* contracted in ggml's C++ (-ffp-contract=fast) */
			}
		}
	}
	for (int r = 0; r < n_q; r++) {
		const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
		for (int i = 0; i < hd; i++)
			out[r * ldo + i] = _cvtsh_ss(acc[r][i]) * inv;
	}
}

void pg_attn_chunk_x86(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		       int n_q, float *out, size_t ldo)
{
	for (int r = 0; r < n_q; r += CHUNK_ROWS)
		chunk_pass(kv, n_pos, hd, scale, q + (size_t)r * ldq, ldq, n_q - r < CHUNK_ROWS ? n_q - r : CHUNK_ROWS,
			   out + (size_t)r * ldo, ldo);
}

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
