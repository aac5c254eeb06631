/* kernels/cpu/attn_avx512.c — the avx512 table's attention pieces: the
 * tiled path's softmax as llama.cpp built for AVX-512 runs it (ggml's
 * 512-bit expf with vscalefps, one _mm512_reduce_add_ps per 16 scores), and
 * 512-bit ops for the one-chunk kernel and the tiled score and V-sum
 * loops, which give the same bits as attn_avx2.c's with half the
 * instructions. Both drivers are attn_avx2.c's (see attn.h).
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
 * The ops of attn_avx2.c's one-chunk driver with ggml's own 16-lane
 * accumulators: the same bits in half the instructions. */

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define CPOS PG_ATTN_CHUNK_POS

ALWAYS_INLINE __m512 ld_h16(const pg_f16 *p)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

ALWAYS_INLINE __m512 rt_h16(__m512 x)
{
	return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

/* ggml_vec_dot_f16 (AVX-512) for 16 positions: per position
 * (a0 + a2) + (a1 + a3), then _mm512_reduce_add_ps's tree (upper half +
 * lower, then 4 lanes apart, 2, 1) across positions, transposed. */
static void chunk_scores16(const float *kf, int nt, const float *qf, int nr, int hd, float *raw)
{
	(void)nt;
	const int h64 = hd & ~63;
	const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	for (int r = 0; r < nr; r++) {
		const float *q = qf + (size_t)r * hd;
		__m512 h[CPOS];
		#pragma GCC unroll 16
		for (int t = 0; t < CPOS; t++) {
			const float *k = kf + (size_t)t * hd;
			__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
			for (int i = 0; i < h64; i += 64) {
				a0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), _mm512_loadu_ps(q + i), a0);
				a1 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16), _mm512_loadu_ps(q + i + 16), a1);
				a2 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 32), _mm512_loadu_ps(q + i + 32), a2);
				a3 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 48), _mm512_loadu_ps(q + i + 48), a3);
			}
			h[t] = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
		}
		__m512 t3[8], t6[4], t8[2];
		for (int i = 0; i < 8; i++) /* [2i's lanes l + (l + 8) | 2i+1's] */
			t3[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
					      _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
		for (int i = 0; i < 4; i++) /* quarter j: position 4i + j, lanes l + (l + 4) */
			t6[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t3[2 * i], t3[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
					      _mm512_shuffle_f32x4(t3[2 * i], t3[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
		for (int i = 0; i < 2; i++)
			t8[i] = _mm512_add_ps(_mm512_shuffle_ps(t6[2 * i], t6[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
					      _mm512_shuffle_ps(t6[2 * i], t6[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
		/* lane 4j + e: position 4e + j */
		const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(t8[0], t8[1], _MM_SHUFFLE(2, 0, 2, 0)),
					       _mm512_shuffle_ps(t8[0], t8[1], _MM_SHUFFLE(3, 1, 3, 1)));
		_mm512_storeu_ps(raw + r * CPOS, _mm512_permutexvar_ps(order, s));
	}
}

ALWAYS_INLINE void acc_rows16(const pg_f16 *const *v, int nt, int hd, int d, const int nv, const float *ms,
			      const float *vs, const int nr, float *acc)
{
	__m512 a[4][4];
	#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
		#pragma GCC unroll 4
		for (int j = 0; j < nv; j++)
			a[r][j] = _mm512_loadu_ps(acc + (size_t)r * hd + d + 16 * j);
	for (int t = 0; t < nt; t++) {
		__m512 x[4];
		#pragma GCC unroll 4
		for (int j = 0; j < nv; j++)
			x[j] = ld_h16(v[t] + d + 16 * j);
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
			const float m = ms[r * CPOS + t];
			if (m != 1.0f)
				#pragma GCC unroll 4
				for (int j = 0; j < nv; j++)
					a[r][j] = rt_h16(_mm512_mul_ps(a[r][j], _mm512_set1_ps(m)));
			const __m512 s = _mm512_set1_ps(vs[r * CPOS + t]);
			#pragma GCC unroll 4
			for (int j = 0; j < nv; j++)
				a[r][j] = rt_h16(_mm512_fmadd_ps(x[j], s, a[r][j]));
		}
	}
	#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
		#pragma GCC unroll 4
		for (int j = 0; j < nv; j++)
			_mm512_storeu_ps(acc + (size_t)r * hd + d + 16 * j, a[r][j]);
}

#define ACC_ROWS16(NR)                                                                              \
	do {                                                                                         \
		int d = 0;                                                                           \
		for (; d + 64 <= hv; d += 64)                                                        \
			acc_rows16(v, nt, hd, d, 4, m, s, NR, a);                                    \
		for (; d < hv; d += 16)                                                              \
			acc_rows16(v, nt, hd, d, 1, m, s, NR, a);                                    \
	} while (0)

static void chunk_accumulate16(const pg_f16 *const *v, int nt, int hd, const float *ms, const float *vs, int nr,
			       float *acc)
{
	const int hv = hd & ~15;
	for (int r = 0; r < nr; r += 4) {
		const float *m = ms + r * CPOS, *s = vs + r * CPOS;
		float *a = acc + (size_t)r * hd;
		switch (nr - r) {
		case 1: ACC_ROWS16(1); break;
		case 2: ACC_ROWS16(2); break;
		case 3: ACC_ROWS16(3); break;
		default: ACC_ROWS16(4); break;
		}
	}
}

const struct pg_attn_chunk_ops pg_attn_chunk_avx512 = { chunk_scores16, chunk_accumulate16, 16 };

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
