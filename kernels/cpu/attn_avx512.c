/* kernels/cpu/attn_avx512.c — the avx512 table's attention pieces: the
 * tiled path's softmax as llama.cpp built for AVX-512 runs it (ggml's
 * 512-bit expf with vscalefps, one _mm512_reduce_add_ps per 16 scores), and
 * 512-bit bodies for the one-chunk kernel and the tiled score and V-sum
 * loops, which give the same bits as attn_avx2.c's with half the
 * instructions. The tiled driver is attn_avx2.c's (see attn.h).
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/attn.h"
#include "kernels/cpu/vexpf_x86.h"

static double softmax_avx512(float *x, int n, float max)
{
	double sum = 0;
	for (int i = 0; i < n; i += 16) {
		const __m512 v = pg_v_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
		_mm512_storeu_ps(x + i, v);
		sum += (double)_mm512_reduce_add_ps(v);
	}
	return sum;
}

/* ---- one chunk, 512-bit ------------------------------------------------------
 * The same arithmetic as attn_avx2.c's chunk_pass (and the same bits), with
 * ggml's own 16-lane accumulators: half the instructions per row. */

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define CHUNK_ROWS 16

ALWAYS_INLINE __m512 ld_h16(const pg_f16 *p)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* ggml_vec_dot_f16, AVX-512: sum[j] over steps of 64, (s0 + s2) + (s1 + s3),
 * _mm512_reduce_add_ps; leftovers in double. */
ALWAYS_INLINE float dot16(const float *k, const float *q, int hd)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int i = 0;
	for (; i + 64 <= hd; i += 64) {
		a0 = _mm512_fmadd_ps(_mm512_load_ps(k + i), _mm512_load_ps(q + i), a0);
		a1 = _mm512_fmadd_ps(_mm512_load_ps(k + i + 16), _mm512_load_ps(q + i + 16), a1);
		a2 = _mm512_fmadd_ps(_mm512_load_ps(k + i + 32), _mm512_load_ps(q + i + 32), a2);
		a3 = _mm512_fmadd_ps(_mm512_load_ps(k + i + 48), _mm512_load_ps(q + i + 48), a3);
	}
	const float v = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
	if (i == hd)
		return v;
	double t = v;
	for (; i < hd; i++)
		t += (double)(k[i] * q[i]);
	return (float)t;
}

ALWAYS_INLINE void acc_update16(pg_f16 *acc, const float *v, float ms, float vs, int hd, int rescale)
{
	const __m512 vms = _mm512_set1_ps(ms), vvs = _mm512_set1_ps(vs);
	int i = 0;
	for (; i + 16 <= hd; i += 16) {
		__m512 a = ld_h16(acc + i);
		if (rescale)
			a = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(a, vms), _MM_FROUND_TO_NEAREST_INT));
		_mm256_storeu_si256((__m256i *)(acc + i),
				    _mm512_cvtps_ph(_mm512_fmadd_ps(_mm512_load_ps(v + i), vvs, a), _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < hd; i++) {
		float a = _cvtsh_ss(acc[i]);
		if (rescale)
			a = _cvtsh_ss(_cvtss_sh(a * ms, _MM_FROUND_TO_NEAREST_INT));
		acc[i] = _cvtss_sh(fmaf(v[i], vs, a), _MM_FROUND_TO_NEAREST_INT);
	}
}

ALWAYS_INLINE void to_f32_16(const pg_f16 *x, float *y, int n)
{
	int i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_store_ps(y + i, ld_h16(x + i));
	for (; i < n; i++)
		y[i] = _cvtsh_ss(x[i]);
}

static void chunk_pass16(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
			 int n_q, float *out, size_t ldo)
{
	float qf[CHUNK_ROWS][PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	pg_f16 acc[CHUNK_ROWS][PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float kf[PG_ATTN_MAX_HD] __attribute__((aligned(64))), vf[PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float M[CHUNK_ROWS], S[CHUNK_ROWS];
	for (int r = 0; r < n_q; r++) {
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
			to_f32_16(kb + (size_t)i * kv->stride, kf, hd);
			to_f32_16(vb + (size_t)i * kv->stride, vf, hd);
			for (int r = 0; r < n_q; r++) {
				const float s = dot16(kf, qf[r], hd) * scale;
				float ms = 1.0f, vs = 1.0f;
				int rescale = 0;
				if (s > M[r]) {
					ms = expf(M[r] - s);
					M[r] = s;
					rescale = 1;
				} else {
					vs = expf(s - M[r]);
				}
				acc_update16(acc[r], vf, ms, vs, hd, rescale);
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

void pg_attn_chunk_avx512(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q,
			  size_t ldq, int n_q, float *out, size_t ldo)
{
	for (int r = 0; r < n_q; r += CHUNK_ROWS)
		chunk_pass16(kv, n_pos, hd, scale, q + (size_t)r * ldq, ldq, n_q - r < CHUNK_ROWS ? n_q - r : CHUNK_ROWS,
			     out + (size_t)r * ldo, ldo);
}

/* ---- tiled, 512-bit ------------------------------------------------------- */

#define KVT PG_ATTN_KV_TILE

/* The row count is a constant in each instance (see the wrappers below),
 * so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void scores16_nr(const float *kt, int hd, const float *q, size_t ldq,
							      const int nr, float scale, int nw, float *kq)
{
	const __m512 vsc = _mm512_set1_ps(scale);
	for (int j = 0; j < nw; j += 32) {
		const int two = j + 32 <= nw;
		__m512 a[4][2];
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++)
			a[r][0] = a[r][1] = _mm512_setzero_ps();
		for (int d = 0; d < hd; d++) {
			const __m512 k0 = _mm512_load_ps(kt + (size_t)d * KVT + j);
			const __m512 k1 = two ? _mm512_load_ps(kt + (size_t)d * KVT + j + 16) : k0;
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				const __m512 qv = _mm512_set1_ps(q[r * ldq + d]);
				a[r][0] = _mm512_fmadd_ps(k0, qv, a[r][0]);
				a[r][1] = _mm512_fmadd_ps(k1, qv, a[r][1]);
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			_mm512_storeu_ps(kq + r * KVT + j, _mm512_mul_ps(a[r][0], vsc));
			if (two)
				_mm512_storeu_ps(kq + r * KVT + j + 16, _mm512_mul_ps(a[r][1], vsc));
		}
	}
}

static inline __attribute__((always_inline)) void accumulate16_nr(const float *v, int hd, const float *kq,
								   const int nr, int nt, float *acc)
{
	for (int d = 0; d < hd; d += 32) {
		const int two = d + 32 <= hd;
		__m512 a[4][2];
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			a[r][0] = _mm512_loadu_ps(acc + (size_t)r * hd + d);
			a[r][1] = two ? _mm512_loadu_ps(acc + (size_t)r * hd + d + 16) : a[r][0];
		}
		for (int t = 0; t < nt; t++) {
			const __m512 v0 = _mm512_loadu_ps(v + (size_t)t * hd + d);
			const __m512 v1 = two ? _mm512_loadu_ps(v + (size_t)t * hd + d + 16) : v0;
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				const __m512 p = _mm512_set1_ps(kq[r * KVT + t]);
				a[r][0] = _mm512_fmadd_ps(v0, p, a[r][0]);
				a[r][1] = _mm512_fmadd_ps(v1, p, a[r][1]);
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			_mm512_storeu_ps(acc + (size_t)r * hd + d, a[r][0]);
			if (two)
				_mm512_storeu_ps(acc + (size_t)r * hd + d + 16, a[r][1]);
		}
	}
}

static void tile_scores16(const float *kt, int hd, const float *q, size_t ldq, int nr, float scale, int nw,
			  float *kq)
{
	switch (nr) {
	case 1: scores16_nr(kt, hd, q, ldq, 1, scale, nw, kq); break;
	case 2: scores16_nr(kt, hd, q, ldq, 2, scale, nw, kq); break;
	case 3: scores16_nr(kt, hd, q, ldq, 3, scale, nw, kq); break;
	default: scores16_nr(kt, hd, q, ldq, 4, scale, nw, kq); break;
	}
}

static void tile_accumulate16(const float *v, int hd, const float *kq, int nr, int nt, float *acc)
{
	switch (nr) {
	case 1: accumulate16_nr(v, hd, kq, 1, nt, acc); break;
	case 2: accumulate16_nr(v, hd, kq, 2, nt, acc); break;
	case 3: accumulate16_nr(v, hd, kq, 3, nt, acc); break;
	default: accumulate16_nr(v, hd, kq, 4, nt, acc); break;
	}
}

const struct pg_attn_tiled_ops pg_attn_tiled_avx512 = { tile_scores16, tile_accumulate16, softmax_avx512, 16 };
