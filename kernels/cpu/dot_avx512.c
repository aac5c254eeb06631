/* kernels/cpu/dot_avx512.c — the AVX-512 (F/BW/VL/DQ + VNNI) table.
 *
 * Integer kernels are dot_x86.h with VNNI (vpdpbusd/vpdpwssd); float
 * kernels use 512-bit vectors, and vdpbf16ps for BF16 where the CPU has
 * AVX512-BF16, as ggml's vec_dot_bf16 does.
 */
#pragma GCC optimize("fp-contract=off")

#define PG_X86_VNNI 1
#include "kernels/cpu/dot_x86.h"
#include "kernels/cpu/tinyblas.h"

#include <math.h>

ALWAYS_INLINE __m512 ld_f32(const float *p)
{
	return _mm512_loadu_ps(p);
}
ALWAYS_INLINE __m512 ld_f16(const pg_f16 *p)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
ALWAYS_INLINE __m512 ld_bf16(const pg_bf16 *p)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline float cv_f32(float v)
{
	return v;
}

/* ggml_vec_dot_f32 / ggml_vec_dot_f16 on AVX-512 (what ggml runs for one
 * activation row): GGML_F32_STEP 64 = four accumulators of 16 lanes, FMA,
 * reduced as (a0 + a2) + (a1 + a3), then _mm512_reduce_add_ps; leftovers
 * (k % 64) in order, in double for f16 and in float for f32 (see LEFT_F32). */
#define VECDOT_TILE(NAME, T, LD, CV, ACC_T, LEFT)                                                      \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const T *w, const void *x, size_t bx, const int nr,    \
				       float *s, size_t bs)                                              \
	{                                                                                                \
		__m512 a[PG_MAX_NR][4];                                                                  \
		for (int r = 0; r < nr; r++)                                                             \
			a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();                     \
		int64_t i = 0;                                                                           \
		for (; i + 64 <= k; i += 64) {                                                           \
			const __m512 w0 = LD(w + i), w1 = LD(w + i + 16);                                \
			const __m512 w2 = LD(w + i + 32), w3 = LD(w + i + 48);                           \
			for (int r = 0; r < nr; r++) {                                                   \
				const T *xr = XROW(T, x, bx, r);                                         \
				a[r][0] = _mm512_fmadd_ps(w0, LD(xr + i), a[r][0]);                      \
				a[r][1] = _mm512_fmadd_ps(w1, LD(xr + i + 16), a[r][1]);                 \
				a[r][2] = _mm512_fmadd_ps(w2, LD(xr + i + 32), a[r][2]);                 \
				a[r][3] = _mm512_fmadd_ps(w3, LD(xr + i + 48), a[r][3]);                 \
			}                                                                                \
		}                                                                                        \
		for (int r = 0; r < nr; r++) {                                                           \
			const T *xr = XROW(T, x, bx, r);                                                 \
			const __m512 h = _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][2]),                  \
						       _mm512_add_ps(a[r][1], a[r][3]));                 \
			ACC_T t = (ACC_T)_mm512_reduce_add_ps(h);                                        \
			for (int64_t j = i; j < k; j++)                                                  \
				LEFT(t, CV(w[j]), CV(xr[j]), j >= i + (k - i) / 8 * 8);                  \
			s[(size_t)r * bs] = (float)t;                                                    \
		}                                                                                        \
	}
/* GCC vectorizes ggml's f32 leftover loop 16 and 8 elements at a time:
 * those products are rounded, then added one by one; only the last k % 8
 * are fused (vfmadd231ss). f16 products are exact, so fusing is moot. */
#define LEFT_F32(t, a, b, fused) t = (fused) ? fmaf(a, b, t) : t + (a) * (b)
#define LEFT_F64(t, a, b, fused) t += (double)((a) * (b))
VECDOT_TILE(f32, float, ld_f32, cv_f32, float, LEFT_F32)
VECDOT_TILE(f16, pg_f16, ld_f16, f16s, double, LEFT_F64)

#define FLOAT_TILE(NAME, T, LD, CV)                                                                    \
	ALWAYS_INLINE void NAME##_tile(int64_t k, const T *w, const void *x, size_t bx, const int nr,    \
				       float *s, size_t bs)                                              \
	{                                                                                                \
		__m512 a0[PG_MAX_NR], a1[PG_MAX_NR];                                                     \
		for (int r = 0; r < nr; r++)                                                             \
			a0[r] = a1[r] = _mm512_setzero_ps();                                             \
		int64_t i = 0;                                                                           \
		for (; i + 32 <= k; i += 32) {                                                           \
			const __m512 w0 = LD(w + i), w1 = LD(w + i + 16);                                \
			for (int r = 0; r < nr; r++) {                                                   \
				const T *xr = XROW(T, x, bx, r);                                         \
				a0[r] = _mm512_fmadd_ps(w0, LD(xr + i), a0[r]);                          \
				a1[r] = _mm512_fmadd_ps(w1, LD(xr + i + 16), a1[r]);                     \
			}                                                                                \
		}                                                                                        \
		for (int r = 0; r < nr; r++) {                                                           \
			const T *xr = XROW(T, x, bx, r);                                                 \
			float t = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));                     \
			for (int64_t j = i; j < k; j++)                                                  \
				t += CV(w[j]) * CV(xr[j]);                                               \
			s[(size_t)r * bs] = t;                                                           \
		}                                                                                        \
	}
FLOAT_TILE(bf16, pg_bf16, ld_bf16, pg_bf16_to_f32)

/* vdpbf16ps: 32 bf16 pairs per instruction, accumulated in f32. */
ALWAYS_INLINE void bf16dp_tile(int64_t k, const pg_bf16 *w, const void *x, size_t bx, const int nr, float *s,
			       size_t bs)
{
	__m512 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 32 <= k; i += 32) {
		const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + i);
		for (int r = 0; r < nr; r++)
			acc[r] = _mm512_dpbf16_ps(acc[r], wv, (__m512bh)_mm512_loadu_si512(XROW(pg_bf16, x, bx, r) + i));
	}
	for (int r = 0; r < nr; r++) {
		const pg_bf16 *xr = XROW(pg_bf16, x, bx, r);
		float t = _mm512_reduce_add_ps(acc[r]);
		for (int64_t j = i; j < k; j++)
			t += pg_bf16_to_f32(w[j]) * pg_bf16_to_f32(xr[j]);
		s[(size_t)r * bs] = t;
	}
}

#define C_F32(N) f32_tile(k, w, x, bx, N, s, bs)
#define C_F16(N) f16_tile(k, w, x, bx, N, s, bs)
#define C_BF16(N) bf16_tile(k, w, x, bx, N, s, bs)
#define C_BF16DP(N) bf16dp_tile(k, w, x, bx, N, s, bs)
/* One order for every m (pg_matmul is batch invariant): ggml's vec_dot,
 * which is what llama.cpp runs for decode. For two or more activation rows
 * ggml instead takes llamafile's tinyBLAS<16, __m512> when k % 16 == 0: one
 * accumulator, FMA over k in steps of 16, one _mm512_reduce_add_ps; that
 * differs from this in the last bits of prompt rows of F32/F16 weights. */
X86_GEMV(f32, C_F32)
X86_GEMV(f16, C_F16)
X86_GEMV(bf16_cvt, C_BF16)
X86_GEMV(bf16_dp, C_BF16DP)

static void gemv_bf16(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s, size_t bs)
{
	if (__builtin_cpu_supports("avx512bf16"))
		gemv_bf16_dp(k, w, x, bx, nr, s, bs);
	else
		gemv_bf16_cvt(k, w, x, bx, nr, s, bs);
}

static float dot_f16_rows(const pg_f16 *a, const pg_f16 *b, int64_t n)
{
	float s;
	f16_tile(n, a, b, 0, 1, &s, 0);
	return s;
}

static void f32_from_float(const float *x, void *y, int64_t k)
{
	memcpy(y, x, (size_t)k * sizeof(float));
}

/* IQ4_XS's panel gemm (gemm8_iq4_xs) on 16 weight rows: two 8-row panels
 * side by side in 512-bit vectors, each activation broadcast to all 16
 * lanes. Every output gets the same integer sum and float ops as on 256
 * bits, at twice the width where the units are full width (Zen 5). */
struct iq4xs_panel16 {
	__m512i u[64];
	__m512i sc[8];
	__m512 d;
};

static void iq4xs_panel16_build(const void *w, size_t bw, int64_t i, struct iq4xs_panel16 *p)
{
	struct iq4xs_panel a, b;
	iq4xs_panel_build(w, bw, i, &a);
	iq4xs_panel_build((const char *)w + 8 * bw, bw, i, &b);
	for (int v = 0; v < 64; v++)
		p->u[v] = _mm512_inserti64x4(_mm512_castsi256_si512(a.u[v]), b.u[v], 1);
	for (int g = 0; g < 8; g++)
		p->sc[g] = _mm512_inserti64x4(_mm512_castsi256_si512(a.sc[g]), b.sc[g], 1);
	p->d = _mm512_insertf32x8(_mm512_castps256_ps512(a.d), b.d, 1);
}

ALWAYS_INLINE void iq4xs_panel16_rows(const struct iq4xs_panel16 *p, const void *x, size_t bx, int64_t i, int r0,
				      const int R, __m512 *acc)
{
	const block_q8_K *y[4];
	__m512i isum[4];
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		y[r] = XROW(block_q8_K, x, bx, r0 + r) + i;
		isum[r] = _mm512_setzero_si512();
	}
	for (int ib = 0; ib < 8; ib++) {
		__m512i g0[4], g1[4];
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			g0[r] = _mm512_set1_epi32(-128 * (y[r]->bsums[2 * ib] + y[r]->bsums[2 * ib + 1]));
			g1[r] = _mm512_setzero_si512();
		}
		#pragma GCC unroll 8
		for (int t = 0; t < 8; t += 2) {
			const __m512i u0 = p->u[8 * ib + t], u1 = p->u[8 * ib + t + 1];
			#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				int32_t y0, y1;
				memcpy(&y0, y[r]->qs + 32 * ib + 4 * t, 4);
				memcpy(&y1, y[r]->qs + 32 * ib + 4 * t + 4, 4);
				g0[r] = _mm512_dpbusd_epi32(g0[r], u0, _mm512_set1_epi32(y0));
				g1[r] = _mm512_dpbusd_epi32(g1[r], u1, _mm512_set1_epi32(y1));
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(_mm512_add_epi32(g0[r], g1[r]), p->sc[ib]));
	}
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r0 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(p->d, _mm512_set1_ps(y[r]->d)),
					      acc[r0 + r]);
}

/* pg_kern.gemm16 */
static void gemm16_iq4_xs(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			  size_t bs)
{
	struct iq4xs_panel16 p;
	__m512 acc[PG_GEMM8_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm512_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		iq4xs_panel16_build(w, bw, i, &p);
		int r = 0;
		for (; r + 4 <= nr; r += 4)
			iq4xs_panel16_rows(&p, x, bx, i, r, 4, acc);
		for (; r < nr; r++)
			iq4xs_panel16_rows(&p, x, bx, i, r, 1, acc);
	}
	for (int r = 0; r < nr; r++)
		_mm512_storeu_ps(s + (size_t)r * bs, acc[r]);
}

/* PG_TYPE_Q4_K_X8 in the gemm's order (q4kx8_block with pairs: per 64
 * elements one fma of the scaled sum and one of the mins) on 16 weight
 * rows: two groups side by side in 512-bit vectors, the nibbles of a
 * super-block unpacked once for all activation rows, 4 of those at a
 * time against each vector. The same integers and float ops per output
 * as the 256-bit kernel. */
struct q4kx16 {
	__m512i q[64]; /* [16 g + 8 h + e]: sub-block 2g+h, 4 bytes of each row */
	__m512i sc[8], mn[8];
	__m512 d, dmin;
};

ALWAYS_INLINE __m512i two_groups(const uint8_t *a, const uint8_t *b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
				  _mm256_loadu_si256((const __m256i *)b), 1);
}

ALWAYS_INLINE __m512i two_groups_u8(const uint8_t *a, const uint8_t *b)
{
	return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a),
						       _mm_loadl_epi64((const __m128i *)b)));
}

static void q4kx16_build(const uint8_t *a, const uint8_t *b, struct q4kx16 *p)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0F);
	for (int g = 0; g < 4; g++)
		for (int e = 0; e < 8; e++) {
			const __m512i q = two_groups(a + 32 * (8 * g + e), b + 32 * (8 * g + e));
			p->q[16 * g + e] = _mm512_and_si512(q, lo4);
			p->q[16 * g + 8 + e] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
		}
	for (int t = 0; t < 8; t++) {
		p->sc[t] = two_groups_u8(a + 1024 + 8 * t, b + 1024 + 8 * t);
		p->mn[t] = two_groups_u8(a + 1088 + 8 * t, b + 1088 + 8 * t);
	}
	p->d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 1152))),
						       _mm_loadu_si128((const __m128i *)(b + 1152)), 1));
	p->dmin = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 1168))),
							  _mm_loadu_si128((const __m128i *)(b + 1168)), 1));
}

ALWAYS_INLINE void q4kx16_rows(const struct q4kx16 *p, const void *x, size_t bx, int64_t i, int r0, const int R,
			       __m512 *acc, __m512 *accm)
{
	const block_q8_K *y[4];
	__m512 dd[4], dm[4];
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		y[r] = XROW(block_q8_K, x, bx, r0 + r) + i;
		const __m512 dy = _mm512_set1_ps(y[r]->d);
		dd[r] = _mm512_mul_ps(p->d, dy);
		dm[r] = _mm512_mul_ps(p->dmin, dy);
	}
	for (int g = 0; g < 4; g++) {
		__m512i is[4];
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			is[r] = _mm512_setzero_si512();
		for (int h = 0; h < 2; h++) {
			__m512i s0[4], s1[4];
			#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				s0[r] = s1[r] = _mm512_setzero_si512();
			#pragma GCC unroll 8
			for (int e = 0; e < 8; e += 2) {
				const __m512i q0 = p->q[16 * g + 8 * h + e], q1 = p->q[16 * g + 8 * h + e + 1];
				#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					int32_t u0, u1;
					memcpy(&u0, y[r]->qs + 64 * g + 32 * h + 4 * e, 4);
					memcpy(&u1, y[r]->qs + 64 * g + 32 * h + 4 * e + 4, 4);
					s0[r] = _mm512_dpbusd_epi32(s0[r], q0, _mm512_set1_epi32(u0));
					s1[r] = _mm512_dpbusd_epi32(s1[r], q1, _mm512_set1_epi32(u1));
				}
			}
			#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				is[r] = _mm512_add_epi32(is[r], _mm512_mullo_epi32(_mm512_add_epi32(s0[r], s1[r]), p->sc[2 * g + h]));
		}
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const __m512i b0 = _mm512_set1_epi32(y[r]->bsums[4 * g] + y[r]->bsums[4 * g + 1]);
			const __m512i b1 = _mm512_set1_epi32(y[r]->bsums[4 * g + 2] + y[r]->bsums[4 * g + 3]);
			const __m512i gm = _mm512_add_epi32(_mm512_mullo_epi32(p->mn[2 * g], b0),
							    _mm512_mullo_epi32(p->mn[2 * g + 1], b1));
			acc[r0 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r]), dd[r], acc[r0 + r]);
			accm[r0 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(gm), dm[r], accm[r0 + r]);
		}
	}
}

/* pg_kern.gemm16 for PG_TYPE_Q4_K_X8: w is a group, w + 8 bw the next */
static void gemm16_q4_K_x8r(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			    size_t bs)
{
	struct q4kx16 p;
	__m512 acc[PG_GEMM8_MAX_NR], accm[PG_GEMM8_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = accm[r] = _mm512_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		const uint8_t *a = (const uint8_t *)w + (size_t)i * PG_Q4KX8_SB, *b = a + 8 * bw;
		for (int l = 0; l < PG_Q4KX8_SB; l += 64) {
			_mm_prefetch((const char *)a + 4 * PG_Q4KX8_SB + l, _MM_HINT_T0);
			_mm_prefetch((const char *)b + 4 * PG_Q4KX8_SB + l, _MM_HINT_T0);
		}
		q4kx16_build(a, b, &p);
		int r = 0;
		for (; r + 4 <= nr; r += 4)
			q4kx16_rows(&p, x, bx, i, r, 4, acc, accm);
		for (; r < nr; r++)
			q4kx16_rows(&p, x, bx, i, r, 1, acc, accm);
	}
	for (int r = 0; r < nr; r++)
		_mm512_storeu_ps(s + (size_t)r * bs, _mm512_sub_ps(acc[r], accm[r]));
}

/* Q2_K rows as they are (decode; n % 8 != 0), q23_K_avx512.c: pairs of
 * rows, then an odd last one with two runs per 512-bit instruction. */
static void gemv_q2_K_x512(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s, size_t bs)
{
	const int even = nr & ~1;
	if (even)
		pg_gemv_q2_K_pairs_avx512(k, w, x, bx, even, s, bs);
	if (nr & 1)
		pg_gemv_q2_K_row_avx512(k, w, (const char *)x + (size_t)even * bx, s + (size_t)even * bs);
}

/* The K-quants whose prompt kernels read Q8_K rows in packed pairs
 * (q23_K_avx512.c): one pack, a kernel per type. */
#define Q8_K_PAIRS(NAME, GEMV8)                              \
	static const struct pg_act_pack NAME = {             \
		.rows = 2,                                   \
		.unit_bytes = pg_q8_K_pair_bytes_avx512,     \
		.pack = pg_q8_K_pack_pairs_avx512,           \
		.gemv8 = GEMV8,                              \
	};
Q8_K_PAIRS(q2_K_pairs, pg_gemv8_q2_K_pairs_avx512)
Q8_K_PAIRS(q3_K_pairs, pg_gemv8_q3_K_pairs_avx512)
Q8_K_PAIRS(q5_K_pairs, pg_gemv8_q5_K_pairs_avx512)
Q8_K_PAIRS(q6_K_pairs, pg_gemv8_q6_K_pairs_avx512)

/* Two or more activation rows of Q8_0: packed pairs on 512-bit vectors.
 * One row (decode) stays on the 256-bit kernel: it is bound by memory. */
static const struct pg_act_pack q8_0_pairs = {
	.rows = 2,
	.unit_bytes = pg_q8_0_pair_bytes_avx512,
	.pack = pg_q8_0_pack_pairs_avx512,
	.gemv8 = pg_gemv8_q8_0_pairs_avx512,
};

/* Two or more activation rows of Q8_1 (Q4_1, Q5_1 weights): likewise. */
#define Q8_1_PAIRS(NAME, GEMV8)                              \
	static const struct pg_act_pack NAME = {             \
		.rows = 2,                                   \
		.unit_bytes = pg_q8_1_pair_bytes_avx512,     \
		.pack = pg_q8_1_pack_pairs_avx512,           \
		.gemv8 = GEMV8,                              \
	};
Q8_1_PAIRS(q4_1_pairs, pg_gemv8_q4_1_pairs_avx512)
Q8_1_PAIRS(q5_1_pairs, pg_gemv8_q5_1_pairs_avx512)

const struct pg_kern pg_kern_avx512 = {
	.name = "avx512",
	.gemv = {
		[PG_TYPE_F32] = gemv_f32,
		[PG_TYPE_F16] = gemv_f16,
		[PG_TYPE_BF16] = gemv_bf16,
		[PG_TYPE_Q4_0] = gemv_q4_0,
		[PG_TYPE_Q4_1] = gemv_q4_1,
		[PG_TYPE_Q5_0] = gemv_q5_0,
		[PG_TYPE_Q5_1] = gemv_q5_1,
		[PG_TYPE_Q8_0] = gemv_q8_0,
		[PG_TYPE_Q2_K] = gemv_q2_K_x512,
		[PG_TYPE_Q3_K] = gemv_q3_K,
		[PG_TYPE_Q4_K] = gemv_q4_K,
		[PG_TYPE_Q5_K] = gemv_q5_K,
		[PG_TYPE_Q6_K] = gemv_q6_K,
		[PG_TYPE_IQ4_NL] = gemv_iq4_nl,
		[PG_TYPE_IQ4_XS] = gemv_iq4_xs,
	},
	.gemv8 = {
		[PG_TYPE_Q4_0] = gemv8_q4_0,
		[PG_TYPE_IQ4_NL] = gemv8_iq4_nl,
		[PG_TYPE_Q8_0] = gemv8_q8_0,
		[PG_TYPE_Q4_K] = gemv8_q4_K,
		[PG_TYPE_Q4_K_X8] = gemv8_q4_K_x8r,
	},
	.gemm8 = {
		[PG_TYPE_Q4_K] = gemm8_q4_K,
		[PG_TYPE_Q4_K_X8] = gemm8_q4_K_x8r,
		[PG_TYPE_IQ4_XS] = gemm8_iq4_xs,
	},
	.gemm16 = {
		[PG_TYPE_Q4_K_X8] = gemm16_q4_K_x8r,
		[PG_TYPE_IQ4_XS] = gemm16_iq4_xs,
	},
	.tb = {
		[PG_TYPE_F32] = pg_tb_f32_avx512,
		[PG_TYPE_F16] = pg_tb_f16_avx512,
		[PG_TYPE_IQ4_NL] = tb_iq4_nl,
	},
	.q4_0_x8 = pg_q4_0_x8_avx512,
	.iq4_nl_x8 = pg_iq4_nl_x8_avx512,
	.from_float = {
		[PG_TYPE_F32] = f32_from_float,
		[PG_TYPE_F16] = x86_f16_from_float,
		[PG_TYPE_BF16] = pg_bf16_from_float,
		[PG_TYPE_Q8_0] = x86_q8_0_from_float,
		[PG_TYPE_Q8_1] = x86_q8_1_from_float,
		[PG_TYPE_Q8_K] = pg_q8_K_from_float,
	},
	.act_pack = {
		[PG_TYPE_Q8_0] = &q8_0_pairs,
		[PG_TYPE_Q4_1] = &q4_1_pairs,
		[PG_TYPE_Q5_1] = &q5_1_pairs,
		[PG_TYPE_Q2_K] = &q2_K_pairs,
		[PG_TYPE_Q3_K] = &q3_K_pairs,
		[PG_TYPE_Q5_K] = &q5_K_pairs,
		[PG_TYPE_Q6_K] = &q6_K_pairs,
	},
	.softmax = pg_softmax_avx512,
	.swiglu = pg_swiglu_avx512,
	.f32_to_f16 = pg_f32_to_f16_avx512,
	.f16_to_f32 = pg_f16_to_f32_avx512,
	.dot_f16 = dot_f16_rows,
	.f16_scale = pg_f16_scale_avx512,
	.f16_fma = pg_f16_fma_avx512,
};
