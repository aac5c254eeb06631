/* kernels/cpu/dot_x86.h — integer and float dot kernels on 256-bit vectors,
 * compiled twice: by dot_avx2.c (maddubs/madd) and by dot_avx512.c with
 * PG_X86_VNNI set (dpbusd/dpwssd, AVX512-VL encodings). Zen 4 executes
 * 512-bit integer ops as two 256-bit halves, so for these block formats
 * (32-byte blocks) 256-bit vectors keep one code body; where the CPU has
 * full-width 512-bit units (Zen 5) the Q8_0 batch kernel in q8_0_avx512.c
 * pairs activation rows on 512-bit vectors.
 *
 * Each gemv computes one weight row against nr (<= PG_MAX_NR) activation
 * rows: the weight block is loaded and unpacked once, then used nr times.
 * The i16 intermediates of maddubs cannot saturate for these formats
 * (|w| <= 63 against |y| <= 127; the IQ4 levels go as |w| <= 127, each
 * pair widened at once), so both ISAs give the same integers.
 *
 * Only for inclusion by the per-ISA translation units.
 */
#ifndef PAGODA_KERNELS_CPU_DOT_X86_H
#define PAGODA_KERNELS_CPU_DOT_X86_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float f16s(pg_f16 h)
{
	return _cvtsh_ss(h);
}

ALWAYS_INLINE float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

ALWAYS_INLINE int hsum_epi32(__m256i v)
{
	__m128i h = _mm_add_epi32(_mm256_extracti128_si256(v, 1), _mm256_castsi256_si128(v));
	h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
	h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
	return _mm_cvtsi128_si32(h);
}

/* acc + sum over groups of 4 of u8 * s8 */
ALWAYS_INLINE __m256i dot_us8(__m256i acc, __m256i u, __m256i s)
{
#ifdef PG_X86_VNNI
	return _mm256_dpbusd_epi32(acc, u, s);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + sum over pairs of p16 * scale16 */
ALWAYS_INLINE __m256i madd_acc(__m256i acc, __m256i p16, __m256i scale16)
{
#ifdef PG_X86_VNNI
	return _mm256_dpwssd_epi32(acc, p16, scale16);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, scale16));
#endif
}

/* acc + sum over pairs of (u8*s8 pair sums) * scale16 */
ALWAYS_INLINE __m256i dot_us8_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale16)
{
	return madd_acc(acc, _mm256_maddubs_epi16(u, s), scale16);
}

/* ---- activation conversion (bit-exact with dot_scalar.c) ------------------ */

/* ggml's x86 quantize_row_q8_0/q8_1: 127/amax, round half to even. */
ALWAYS_INLINE void q8_block(const float *x, int8_t *qs, float *d_out, int *sum_out)
{
	__m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
	__m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 mx = _mm256_andnot_ps(sign, v0);
	mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v1));
	mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v2));
	mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v3));
	__m128 m4 = _mm_max_ps(_mm256_extractf128_ps(mx, 1), _mm256_castps256_ps128(mx));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
	const float amax = _mm_cvtss_f32(m4);
	*d_out = amax / 127.f;
	const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
	__m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	__m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	__m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	__m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	if (sum_out) {
		__m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
		__m128i h = _mm_add_epi32(_mm256_extracti128_si256(s, 1), _mm256_castsi256_si128(s));
		h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
		h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
		*sum_out = _mm_cvtsi128_si32(h);
	}
	i0 = _mm256_packs_epi32(i0, i1);
	i2 = _mm256_packs_epi32(i2, i3);
	i0 = _mm256_packs_epi16(i0, i2);
	i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)qs, i0);
}

static void x86_q8_0_from_float(const float *x, void *vy, int64_t k)
{
	block_q8_0 *y = vy;
	for (int64_t i = 0; i < k / QK8_0; i++) {
		float d;
		q8_block(x + i * QK8_0, y[i].qs, &d, NULL);
		y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
	}
}

static void x86_q8_1_from_float(const float *x, void *vy, int64_t k)
{
	block_q8_1 *y = vy;
	for (int64_t i = 0; i < k / QK8_1; i++) {
		float d;
		int sum;
		q8_block(x + i * QK8_1, y[i].qs, &d, &sum);
		y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
		y[i].s = _cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
	}
}

static void x86_f16_from_float(const float *x, void *vy, int64_t k)
{
	pg_f16 *y = vy;
	int64_t i = 0;
	for (; i + 8 <= k; i += 8)
		_mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < k; i++)
		y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* ---- gemv kernels ------------------------------------------------------------ */

#define XROW(T, x, bx, r) ((const T *)((const char *)(x) + (size_t)(r) * (bx)))

/* The one-row K-quant kernels spend too little time per block for the
 * hardware prefetchers to keep the stream full (the first load of each
 * block stalled): fetch the block PF_AHEAD bytes on, which runs into the
 * next row, the next in memory, at the end of this one. */
#define PF_AHEAD 1536
ALWAYS_INLINE void pf_block(const void *b, size_t bytes)
{
	for (size_t l = 0; l < bytes; l += 64)
		_mm_prefetch((const char *)b + PF_AHEAD + l, _MM_HINT_T0);
}

/* ggml_vec_dot_q8_0_q8_0 (AVX2) and llamafile's tinyBLAS_Q0_AVX alike: one
 * accumulator, acc = fma(dx*dy, (float)dot, acc) block after block, then
 * hsum_float_8. Both orders are the same, so m does not matter. */
#define PREP_Q8_0(b) _mm256_loadu_si256((const __m256i *)(b)->qs)
ALWAYS_INLINE void q8_0_tile(int64_t k, const block_q8_0 *w, const void *x, size_t bx, const int nr, float *s,
			     size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK8_0; i++) {
		const __m256i wq = PREP_Q8_0(w + i);
		const __m256i aw = _mm256_sign_epi8(wq, wq);
		const float dw = f16s(w[i].d);
		for (int r = 0; r < nr; r++) {
			const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
			const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
			const __m256i p = dot_us8(_mm256_setzero_si256(), aw, _mm256_sign_epi8(y, wq));
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), _mm256_cvtepi32_ps(p), acc[r]);
		}
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

ALWAYS_INLINE __m256i q4_unpack(const uint8_t *qs)
{
	const __m128i q = _mm_loadu_si128((const __m128i *)qs);
	const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
	return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/* Q4_0 weights whose row count is not a multiple of 8 (llama.cpp keeps
 * them unpacked): ggml_vec_dot_q4_0_q8_0 (AVX2) and tinyBLAS_Q0_AVX alike,
 * one 8-lane accumulator, acc = fma(dx*dy, (float)lane sums, acc), then
 * hsum_float_8. Other shapes go to x8_tile. */
#define PREP_Q4_0(b) _mm256_sub_epi8(q4_unpack((b)->qs), _mm256_set1_epi8(8))
ALWAYS_INLINE void q4_0_tile(int64_t k, const block_q4_0 *w, const void *x, size_t bx, const int nr, float *s,
			     size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK4_0; i++) {
		const __m256i wq = PREP_Q4_0(w + i);
		const __m256i aw = _mm256_sign_epi8(wq, wq);
		const float dw = f16s(w[i].d);
		for (int r = 0; r < nr; r++) {
			const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
			const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
			const __m256i p = dot_us8(_mm256_setzero_si256(), aw, _mm256_sign_epi8(y, wq));
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), _mm256_cvtepi32_ps(p), acc[r]);
		}
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

ALWAYS_INLINE __m256i q5_high_bits(const uint8_t *qh4)
{
	uint32_t qh;
	memcpy(&qh, qh4, 4);
	/* byte j gets bit j of qh, as 0x10 */
	const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
					      2, 3, 3, 3, 3, 3, 3, 3, 3);
	__m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
	return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

ALWAYS_INLINE void q5_0_tile(int64_t k, const block_q5_0 *w, const void *x, size_t bx, const int nr, float *s,
			     size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK5_0; i++) {
		const __m256i wq = _mm256_sub_epi8(_mm256_or_si256(q4_unpack(w[i].qs), q5_high_bits(w[i].qh)),
						   _mm256_set1_epi8(16));
		const __m256i aw = _mm256_sign_epi8(wq, wq);
		const float dw = f16s(w[i].d);
		for (int r = 0; r < nr; r++) {
			const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
			const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
			const __m256i p = dot_us8(_mm256_setzero_si256(), aw, _mm256_sign_epi8(y, wq));
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), _mm256_cvtepi32_ps(p), acc[r]);
		}
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

/* Q4_1/Q5_1: unsigned levels times signed activations, plus m·s. */
ALWAYS_INLINE void qx_1_tile(int64_t k, const void *vw, int five, const void *x, size_t bx, const int nr,
			     float *s, size_t bs)
{
	__m256 acc[PG_MAX_NR];
	float macc[PG_MAX_NR];
	for (int r = 0; r < nr; r++) {
		acc[r] = _mm256_setzero_ps();
		macc[r] = 0;
	}
	for (int64_t i = 0; i < k / 32; i++) {
		__m256i wq;
		float dw, mw;
		if (five) {
			const block_q5_1 *b = (const block_q5_1 *)vw + i;
			wq = _mm256_or_si256(q4_unpack(b->qs), q5_high_bits(b->qh));
			dw = f16s(b->d);
			mw = f16s(b->m);
		} else {
			const block_q4_1 *b = (const block_q4_1 *)vw + i;
			wq = q4_unpack(b->qs);
			dw = f16s(b->d);
			mw = f16s(b->m);
		}
		for (int r = 0; r < nr; r++) {
			const block_q8_1 *xb = XROW(block_q8_1, x, bx, r) + i;
			const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
			const __m256i p = dot_us8(_mm256_setzero_si256(), wq, y);
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), _mm256_cvtepi32_ps(p), acc[r]);
			macc[r] += mw * f16s(xb->s);
		}
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]) + macc[r];
}

/* Q4_K (five = 0) and Q5_K (five = 1) against Q8_K: ggml_vec_dot_q4_K_q8_K
 * and ggml_vec_dot_q5_K_q8_K (AVX2). Q4_K weights with a multiple of 8 rows
 * go to q4_K_x8_tile instead. */
ALWAYS_INLINE void qk_45_tile(int64_t k, const void *vw, const int five, const void *x, size_t bx, const int nr,
			      float *s, size_t bs)
{
	__m256 acc[PG_MAX_NR];
	__m128 accm[PG_MAX_NR];
	float summs[PG_MAX_NR];
	for (int r = 0; r < nr; r++) {
		acc[r] = _mm256_setzero_ps();
		accm[r] = _mm_setzero_ps();
		summs[r] = 0.0f;
	}
	const __m256i lo4 = _mm256_set1_epi8(0x0F);
	for (int64_t i = 0; i < k / QK_K; i++) {
		const uint8_t *qs, *scp;
		const uint8_t *qhp = NULL;
		float dw, dminw;
		if (five) {
			const block_q5_K *b = (const block_q5_K *)vw + i;
			pf_block(b, sizeof(block_q5_K));
			qs = b->qs;
			qhp = b->qh;
			scp = b->scales;
			dw = f16s(b->d);
			dminw = f16s(b->dmin);
		} else {
			const block_q4_K *b = (const block_q4_K *)vw + i;
			pf_block(b, sizeof(block_q4_K));
			qs = b->qs;
			scp = b->scales;
			dw = f16s(b->d);
			dminw = f16s(b->dmin);
		}
		uint8_t sm[16];
		pg_k4_scales(scp, sm);
		/* mins, each repeated for its two 16-sums of bsums (Q5_K) */
		const __m256i mins16 = _mm256_cvtepu8_epi16(
			_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(sm + 8)),
					 _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
		const __m128i mins8 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8)));
		__m256i isum[PG_MAX_NR];
		for (int r = 0; r < nr; r++)
			isum[r] = _mm256_setzero_si256();
		const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
		#pragma GCC unroll 4
		for (int g = 0; g < 4; g++) {
			const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
			__m256i ql = _mm256_and_si256(q, lo4);
			__m256i qhi = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
			if (five) {
				const __m256i b1 = _mm256_set1_epi8((char)(1 << (2 * g)));
				const __m256i b2 = _mm256_set1_epi8((char)(2 << (2 * g)));
				const __m256i h16 = _mm256_set1_epi8(16);
				ql = _mm256_or_si256(ql, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), h16));
				qhi = _mm256_or_si256(qhi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b2), b2), h16));
			}
			const __m256i sc0 = _mm256_set1_epi16(sm[2 * g]);
			const __m256i sc1 = _mm256_set1_epi16(sm[2 * g + 1]);
			for (int r = 0; r < nr; r++) {
				const int8_t *y = XROW(block_q8_K, x, bx, r)[i].qs + 64 * g;
				isum[r] = dot_us8_scaled(isum[r], ql, _mm256_loadu_si256((const __m256i *)y), sc0);
				isum[r] = dot_us8_scaled(isum[r], qhi, _mm256_loadu_si256((const __m256i *)(y + 32)), sc1);
			}
		}
		for (int r = 0; r < nr; r++) {
			const block_q8_K *xb = XROW(block_q8_K, x, bx, r) + i;
			const __m256i bs16 = _mm256_loadu_si256((const __m256i *)xb->bsums);
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
			if (five) {
				/* ggml_vec_dot_q5_K_q8_K: summs += dmin * isum, scalar,
				 * dmin = -y.d * x.dmin, contracted to an FMA. */
				const __m256i msum = _mm256_madd_epi16(bs16, mins16);
				summs[r] = fmaf(-xb->d * dminw, (float)hsum_epi32(msum), summs[r]);
			} else {
				/* ggml_vec_dot_q4_K_q8_K: 4 lanes, lane l = m[2l]·B[2l] +
				 * m[2l+1]·B[2l+1] (B: sums of 32), acc_m += dmin·lanes with
				 * dmin = -y.d * x.dmin; added to the total at the end. */
				const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs16),
								   _mm256_extracti128_si256(bs16, 1));
				accm[r] = _mm_fmadd_ps(_mm_set1_ps(-xb->d * dminw),
						       _mm_cvtepi32_ps(_mm_madd_epi16(mins8, q8s)), accm[r]);
			}
		}
	}
	for (int r = 0; r < nr; r++) {
		if (five) {
			s[(size_t)r * bs] = hsum_ps(acc[r]) + summs[r];
		} else {
			__m128 m = _mm_add_ps(accm[r], _mm_movehl_ps(accm[r], accm[r]));
			m = _mm_add_ss(m, _mm_movehdup_ps(m));
			s[(size_t)r * bs] = hsum_ps(acc[r]) + _mm_cvtss_f32(m);
		}
	}
}

/* With a vector of 8 int16 scales in each 128-bit half, shuffle p puts
 * scale 2p in every i16 of the low half and 2p+1 in the high one: the
 * scales of a 32-byte run whose halves belong to two groups of 16. */
static const uint8_t k_pick_pair[4][32] __attribute__((aligned(32))) = {
	{ 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3 },
	{ 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7 },
	{ 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11 },
	{ 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15 },
};

/* Q2_K (three = 0) and Q3_K (three = 1) against Q8_K:
 * ggml_vec_dot_q2_K_q8_K and ggml_vec_dot_q3_K_q8_K (AVX2), lanes as
 * dot_scalar.c describes them. A Q3_K level is taken as low - high: the
 * products of the 2 low bits less those of 4 where the hmask bit is clear,
 * both unsigned, exact in the i16 pair sums (|p| <= 1792). */
ALWAYS_INLINE void q23_K_tile(int64_t k, const void *vw, const int three, const void *x, size_t bx, const int nr,
			      float *s, size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
	for (int64_t i = 0; i < k / QK_K; i++) {
		const uint8_t *qs;
		__m128i sc8;
		__m256i hb = _mm256_setzero_si256();
		float dw;
		if (three) {
			const block_q3_K *b = (const block_q3_K *)vw + i;
			pf_block(b, sizeof(block_q3_K));
			/* the words straight into a vector: pg_q3_K_scales' bytes,
			 * stored in two halves and read back as one, stall the
			 * load (no store forwarding) */
			uint32_t u[4];
			pg_q3_K_scale_words(b->scales, u);
			sc8 = _mm_sub_epi8(_mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]),
					   _mm_set1_epi8(32));
			hb = _mm256_loadu_si256((const __m256i *)b->hmask);
			qs = b->qs;
			dw = f16s(b->d);
		} else {
			const block_q2_K *b = (const block_q2_K *)vw + i;
			pf_block(b, sizeof(block_q2_K));
			const __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
			const __m128i lo4 = _mm_set1_epi8(0xF);
			sc8 = _mm_and_si128(packed, lo4);
			/* the mins first: lane l = m[2l]·B[2l] + m[2l+1]·B[2l+1] */
			const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), lo4));
			const float dminw = f16s(b->dmin);
			for (int r = 0; r < nr; r++) {
				const block_q8_K *xb = XROW(block_q8_K, x, bx, r) + i;
				const __m256i prod = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)xb->bsums));
				acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-xb->d * dminw), _mm256_cvtepi32_ps(prod), acc[r]);
			}
			qs = b->qs;
			dw = f16s(b->d);
		}
		const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
		const __m256i halves[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00),
					    _mm256_permute2x128_si256(sc16, sc16, 0x11) };
		__m256i isum[PG_MAX_NR];
		for (int r = 0; r < nr; r++)
			isum[r] = _mm256_setzero_si256();
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
			#pragma GCC unroll 4
			for (int p = 0; p < 4; p++) {
				const __m256i scv = _mm256_shuffle_epi8(halves[j], _mm256_load_si256((const __m256i *)k_pick_pair[p]));
				const __m256i ql = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * p), m3);
				__m256i qh = _mm256_setzero_si256();
				if (three) {
					const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * j + p)));
					qh = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), four);
				}
				for (int r = 0; r < nr; r++) {
					const __m256i y = _mm256_loadu_si256(
						(const __m256i *)(XROW(block_q8_K, x, bx, r)[i].qs + 128 * j + 32 * p));
					__m256i p16 = _mm256_maddubs_epi16(ql, y);
					if (three)
						p16 = _mm256_sub_epi16(p16, _mm256_maddubs_epi16(qh, y));
					isum[r] = madd_acc(isum[r], p16, scv);
				}
			}
		}
		for (int r = 0; r < nr; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(XROW(block_q8_K, x, bx, r)[i].d * dw),
						 _mm256_cvtepi32_ps(isum[r]), acc[r]);
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

/* 16 bytes of IQ4 nibbles (an IQ4_NL block, a group of IQ4_XS) as their
 * 32 int8 levels: the nibbles of q4_unpack looked up. */
ALWAYS_INLINE __m256i iq4_unpack(const uint8_t *qs)
{
	const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pg_iq4nl_values));
	return _mm256_shuffle_epi8(values, q4_unpack(qs));
}

/* IQ4_XS against Q8_K: ggml_vec_dot_iq4_xs_q8_K (AVX2), lanes as
 * dot_scalar.c describes them: the nibbles looked up in the 16 levels
 * (pshufb), then |q| against sign(y, q) as ggml's mul_add_epi8. */
ALWAYS_INLINE void iq4_xs_tile(int64_t k, const block_iq4_xs *w, const void *x, size_t bx, const int nr, float *s,
			       size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		const block_iq4_xs *b = w + i;
		pf_block(b, sizeof(block_iq4_xs));
		__m256i isum[PG_MAX_NR];
		for (int r = 0; r < nr; r++)
			isum[r] = _mm256_setzero_si256();
		#pragma GCC unroll 8
		for (int ib = 0; ib < 8; ib++) {
			const __m256i q = iq4_unpack(b->qs + 16 * ib);
			const __m256i aq = _mm256_sign_epi8(q, q);
			const __m256i sc = _mm256_set1_epi16((short)pg_iq4_xs_scale(b, ib));
			for (int r = 0; r < nr; r++) {
				const __m256i y = _mm256_loadu_si256(
					(const __m256i *)(XROW(block_q8_K, x, bx, r)[i].qs + 32 * ib));
				isum[r] = madd_acc(isum[r], _mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), sc);
			}
		}
		const float dw = f16s(b->d);
		for (int r = 0; r < nr; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * XROW(block_q8_K, x, bx, r)[i].d),
						 _mm256_cvtepi32_ps(isum[r]), acc[r]);
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

/* IQ4_NL against Q8_0, the lane sums of one block: |q| against sign(y, q),
 * exact (pair sums at most 2·127·127). */
ALWAYS_INLINE __m256i iq4_nl_lanes(__m256i q, const block_q8_0 *xb)
{
	const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
	return dot_us8(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
}

/* ggml_vec_dot_iq4_nl_q8_0 (AVX2; see dot_scalar.c): even blocks into one
 * accumulator, odd ones into another. */
ALWAYS_INLINE void iq4_nl_tile(int64_t k, const block_iq4_nl *w, const void *x, size_t bx, const int nr, float *s,
			       size_t bs)
{
	const int64_t nb = k / 32;
	__m256 acc[2][PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[0][r] = acc[1][r] = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 1 < nb; i += 2) {
		#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			const __m256i q = iq4_unpack(w[i + h].qs);
			const float dw = f16s(w[i + h].d);
			for (int r = 0; r < nr; r++) {
				const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i + h;
				acc[h][r] = _mm256_fmadd_ps(_mm256_set1_ps(f16s(xb->d) * dw),
							    _mm256_cvtepi32_ps(iq4_nl_lanes(q, xb)), acc[h][r]);
			}
		}
	}
	for (int r = 0; r < nr; r++) {
		float sum = hsum_ps(_mm256_add_ps(acc[0][r], acc[1][r]));
		if (i < nb) {
			const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
			const int isum = hsum_epi32(iq4_nl_lanes(iq4_unpack(w[i].qs), xb));
			sum += f16s(xb->d) * f16s(w[i].d) * (float)isum;
		}
		s[(size_t)r * bs] = sum;
	}
}

/* tinyBLAS_Q0_AVX with IQ4_NL weights: one accumulator, acc = fma(dw*dy,
 * lane sums, acc), then hsum; nw weight rows a call (pg_tb_fn). */
ALWAYS_INLINE void iq4_nl_tb_tile(int64_t k, const block_iq4_nl *w, const void *x, size_t bx, const int nr,
				  float *s, size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / 32; i++) {
		const __m256i q = iq4_unpack(w[i].qs);
		const float dw = f16s(w[i].d);
		for (int r = 0; r < nr; r++) {
			const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), _mm256_cvtepi32_ps(iq4_nl_lanes(q, xb)),
						 acc[r]);
		}
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

/* Q6_K: levels kept unsigned (0..63); the -32 offset is taken out once
 * per block through Q8_K's bsums. */
ALWAYS_INLINE void q6_K_tile(int64_t k, const block_q6_K *w, const void *x, size_t bx, const int nr, float *s,
			     size_t bs)
{
	__m256 acc[PG_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	const __m256i lo4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
	for (int64_t i = 0; i < k / QK_K; i++) {
		const block_q6_K *b = w + i;
		pf_block(b, sizeof(block_q6_K));
		const float dw = f16s(b->d);
		const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
		const __m256i halves[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00),
					    _mm256_permute2x128_si256(sc16, sc16, 0x11) };
		__m256i isum[PG_MAX_NR], isum2[PG_MAX_NR];
		for (int r = 0; r < nr; r++) {
			isum2[r] = _mm256_setzero_si256();
			const __m256i bsum = _mm256_loadu_si256((const __m256i *)XROW(block_q8_K, x, bx, r)[i].bsums);
			isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
						   _mm256_slli_epi32(_mm256_madd_epi16(bsum, sc16), 5));
		}
		#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
			const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
			const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
			__m256i q[4];
			q[0] = _mm256_or_si256(_mm256_and_si256(ql0, lo4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
			q[1] = _mm256_or_si256(_mm256_and_si256(ql1, lo4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
			q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), lo4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
			q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), lo4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
			__m256i scv[4];
			for (int j = 0; j < 4; j++)
				scv[j] = _mm256_shuffle_epi8(halves[h], _mm256_load_si256((const __m256i *)k_pick_pair[j]));
			for (int r = 0; r < nr; r++) {
				const int8_t *y = XROW(block_q8_K, x, bx, r)[i].qs + 128 * h;
				/* two exact integer chains, joined below */
				isum[r] = dot_us8_scaled(isum[r], q[0], _mm256_loadu_si256((const __m256i *)y), scv[0]);
				isum2[r] = dot_us8_scaled(isum2[r], q[1], _mm256_loadu_si256((const __m256i *)(y + 32)), scv[1]);
				isum[r] = dot_us8_scaled(isum[r], q[2], _mm256_loadu_si256((const __m256i *)(y + 64)), scv[2]);
				isum2[r] = dot_us8_scaled(isum2[r], q[3], _mm256_loadu_si256((const __m256i *)(y + 96)), scv[3]);
			}
		}
		for (int r = 0; r < nr; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * XROW(block_q8_K, x, bx, r)[i].d),
						 _mm256_cvtepi32_ps(_mm256_add_epi32(isum[r], isum2[r])), acc[r]);
	}
	for (int r = 0; r < nr; r++)
		s[(size_t)r * bs] = hsum_ps(acc[r]);
}

/* ---- eight weight rows at a time: llama.cpp's repacked order -------------------
 *
 * ggml_gemv_q4_0_8x8_q8_0 / ggml_gemm_q4_0_8x8_q8_0 and
 * ggml_gemv_q4_K_8x8_q8_K keep one float accumulator per output (a lane of
 * a vector of 8 rows) and per block add the block's whole integer sum once:
 * acc = fma((float)isum, dw * dy, acc). These kernels read the rows where
 * they lie (no repacked copy): each row's block gives a vector of partial
 * integer sums, and hsum8x8 folds the 8 rows' vectors into one vector of 8
 * totals, lane j = row j, exact in integers. */

/* lane j = sum of the 8 lanes of v[j] */
ALWAYS_INLINE __m256i hsum8x8_epi32(const __m256i *v)
{
	const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
	const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
	const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
	return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* The f16 at p in each of 8 rows, stride bytes apart, as floats. */
ALWAYS_INLINE __m256 f16x8_strided(const pg_f16 *p, size_t stride)
{
	const char *c = (const char *)p;
	__m128i v = _mm_cvtsi32_si128(*(const pg_f16 *)c);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + stride), 1);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + 2 * stride), 2);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + 3 * stride), 3);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + 4 * stride), 4);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + 5 * stride), 5);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + 6 * stride), 6);
	v = _mm_insert_epi16(v, *(const pg_f16 *)(c + 7 * stride), 7);
	return _mm256_cvtph_ps(v);
}

#define WROW(T, w, bw, j) ((const T *)((const char *)(w) + (size_t)(j) * (bw)))

/* Q4_0 (and IQ4_NL, nl: llama.cpp's repacked order is the same) in the
 * file's layout. Q4_0's levels are kept unsigned (0..15): (q - 8)·y =
 * q·y - 8·Σy, and -8·Σy enters each row's sum once, spread over the lanes
 * of the accumulator start. IQ4_NL's are looked up, |q| against sign(y, q). */
ALWAYS_INLINE void x8_tile(int64_t k, const void *w, size_t bw, const void *x, size_t bx, const int nr, float *s,
			   size_t bs, const bool nl)
{
	__m256 acc[PG_MAX_NR];
	#pragma GCC unroll 8
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	const __m256i eight = _mm256_set1_epi8(8);
	for (int64_t i = 0; i < k / QK4_0; i++) {
		/* The 8 rows are one contiguous run read at 8 places at once,
		 * which the hardware prefetchers follow poorly: fetch the next
		 * group's run in step (144 bytes of it per block). */
		const char *next = (const char *)w + 8 * bw + (size_t)i * 8 * sizeof(block_q4_0);
		_mm_prefetch(next, _MM_HINT_T0);
		_mm_prefetch(next + 64, _MM_HINT_T0);
		_mm_prefetch(next + 128, _MM_HINT_T0);
		__m256i q[8];
		#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			const uint8_t *qs = WROW(block_q4_0, w, bw, j)[i].qs;
			q[j] = nl ? iq4_unpack(qs) : q4_unpack(qs);
		}
		const __m256 dw = f16x8_strided(&WROW(block_q4_0, w, bw, 0)[i].d, bw);
		#pragma GCC unroll 8
		for (int r = 0; r < nr; r++) {
			const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
			const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
			__m256i p[8];
			if (nl) {
				#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)
					p[j] = iq4_nl_lanes(q[j], xb);
			} else {
				const __m256i off = _mm256_sub_epi32(_mm256_setzero_si256(),
								     dot_us8(_mm256_setzero_si256(), eight, y));
				#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)
					p[j] = dot_us8(off, q[j], y);
			}
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8_epi32(p)),
						 _mm256_mul_ps(dw, _mm256_set1_ps(f16s(xb->d))), acc[r]);
		}
	}
	#pragma GCC unroll 8
	for (int r = 0; r < nr; r++)
		_mm256_storeu_ps(s + (size_t)r * bs, acc[r]);
}

/* out[e] lane j = dword e of v[j] */
ALWAYS_INLINE void transpose8x8_epi32(const __m256i *v, __m256i *out)
{
	__m256i t[8], u[8];
	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
	}
	for (int h = 0; h < 2; h++) {
		u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
		u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
		u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
		u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
	}
	for (int e = 0; e < 4; e++) {
		out[e] = _mm256_permute2x128_si256(u[e], u[e + 4], 0x20);
		out[e + 4] = _mm256_permute2x128_si256(u[e], u[e + 4], 0x31);
	}
}

/* IQ4_XS from 8 activation rows on, llama.cpp's IQ panel gemm (iqp.cpp):
 * per output one chain, acc = fma((float)isum, d * dy, acc) per
 * super-block, isum its whole integer sum with the group scales in it.
 * As there, each super-block of the 8 rows is decoded once into an int8
 * panel, the rows as the dword lanes (vector 4g + h of group ib: row j's
 * elements 32 ib + 8 g + 4 h .. + 3 in lane j), and then serves every
 * activation row: one broadcast of 4 activations per vector, no
 * horizontal sums. Without VNNI the levels are kept as |level| and level
 * (maddubs of |q| and sign(y, q), then madd by the scales); with it as
 * level + 128, unsigned, for one vpdpbusd a vector, the group's sum started
 * from -128·Σy (Q8_K's bsums) and then multiplied by the scales. Integer
 * sums are exact either way. */
struct iq4xs_panel {
#ifdef PG_X86_VNNI
	__m256i u[64];
	__m256i sc[8]; /* per group, each row's scale in its lane */
#else
	__m256i aq[64], q[64];
	__m256i sc[8]; /* per group, each row's scale in both words of its lane */
#endif
	__m256 d;
};

static inline void iq4xs_panel_build(const void *w, size_t bw, int64_t i, struct iq4xs_panel *p)
{
#ifdef PG_X86_VNNI
	const __m256i u128 = _mm256_set1_epi8((char)0x80);
	int32_t sc[8][8];
#else
	int16_t sc[8][16];
#endif
	for (int ib = 0; ib < 8; ib++) {
		__m256i rows[8], tr[8];
		for (int j = 0; j < 8; j++) {
			const block_iq4_xs *b = WROW(block_iq4_xs, w, bw, j) + i;
			rows[j] = iq4_unpack(b->qs + 16 * ib);
			const int scale = pg_iq4_xs_scale(b, ib);
#ifdef PG_X86_VNNI
			sc[ib][j] = scale;
#else
			sc[ib][2 * j] = sc[ib][2 * j + 1] = (int16_t)scale;
#endif
		}
		transpose8x8_epi32(rows, tr);
		for (int t = 0; t < 8; t++) {
#ifdef PG_X86_VNNI
			p->u[8 * ib + t] = _mm256_xor_si256(tr[t], u128);
#else
			p->q[8 * ib + t] = tr[t];
			p->aq[8 * ib + t] = _mm256_sign_epi8(tr[t], tr[t]);
#endif
		}
		p->sc[ib] = _mm256_loadu_si256((const __m256i *)sc[ib]);
	}
	p->d = f16x8_strided(&WROW(block_iq4_xs, w, bw, 0)[i].d, bw);
}

/* The 8 weight rows' integer sums against the super-blocks y[r] of R
 * activation rows: each panel vector is loaded once for all R. */
ALWAYS_INLINE void iq4xs_panel_dot(const struct iq4xs_panel *p, const block_q8_K *const *y, const int R,
				   __m256i *isum)
{
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		isum[r] = _mm256_setzero_si256();
	for (int ib = 0; ib < 8; ib++) {
#ifdef PG_X86_VNNI
		/* per row two chains, for the dpbusd latency */
		__m256i g0[4], g1[4];
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			g0[r] = _mm256_set1_epi32(-128 * (y[r]->bsums[2 * ib] + y[r]->bsums[2 * ib + 1]));
			g1[r] = _mm256_setzero_si256();
		}
		#pragma GCC unroll 8
		for (int t = 0; t < 8; t += 2) {
			const __m256i u0 = p->u[8 * ib + t], u1 = p->u[8 * ib + t + 1];
			#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				int32_t y0, y1;
				memcpy(&y0, y[r]->qs + 32 * ib + 4 * t, 4);
				memcpy(&y1, y[r]->qs + 32 * ib + 4 * t + 4, 4);
				g0[r] = _mm256_dpbusd_epi32(g0[r], u0, _mm256_set1_epi32(y0));
				g1[r] = _mm256_dpbusd_epi32(g1[r], u1, _mm256_set1_epi32(y1));
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(_mm256_add_epi32(g0[r], g1[r]), p->sc[ib]));
#else
		#pragma GCC unroll 8
		for (int t = 0; t < 8; t++) {
			const __m256i aq = p->aq[8 * ib + t], q = p->q[8 * ib + t];
			#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				int32_t y4;
				memcpy(&y4, y[r]->qs + 32 * ib + 4 * t, 4);
				isum[r] = madd_acc(isum[r], _mm256_maddubs_epi16(aq, _mm256_sign_epi8(_mm256_set1_epi32(y4), q)),
						   p->sc[ib]);
			}
		}
#endif
	}
}

ALWAYS_INLINE void iq4xs_panel_rows(const struct iq4xs_panel *p, const void *x, size_t bx, int64_t i, int r0,
				    const int R, __m256 *acc)
{
	const block_q8_K *y[4];
	__m256i isum[4];
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		y[r] = XROW(block_q8_K, x, bx, r0 + r) + i;
	iq4xs_panel_dot(p, y, R, isum);
	#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r0 + r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(p->d, _mm256_set1_ps(y[r]->d)),
					      acc[r0 + r]);
}

/* pg_kern.gemm8: up to PG_GEMM8_MAX_NR activation rows, each super-block
 * of the 8 weight rows decoded once for all of them. */
static void gemm8_iq4_xs(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s, size_t bs)
{
	struct iq4xs_panel p;
	__m256 acc[PG_GEMM8_MAX_NR];
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		iq4xs_panel_build(w, bw, i, &p);
		int r = 0;
		for (; r + 4 <= nr; r += 4)
			iq4xs_panel_rows(&p, x, bx, i, r, 4, acc);
		for (; r < nr; r++)
			iq4xs_panel_rows(&p, x, bx, i, r, 1, acc);
	}
	for (int r = 0; r < nr; r++)
		_mm256_storeu_ps(s + (size_t)r * bs, acc[r]);
}

/* Q8_0, eight weight rows at a time, in ggml_vec_dot_q8_0_q8_0's order
 * (the same as q8_0_tile: per output one 8-lane accumulator, acc =
 * fma(dw*dx, (float)lane sums, acc) block after block, then hsum_ps). Only
 * the tiling differs: 4 weight rows x nr activation rows in registers, each
 * weight block loaded once per tile and each activation block once per 4
 * weight rows. With VNNI the activations are made unsigned (y + 128) and
 * the 128·Σw of each lane is taken back out through the accumulator start,
 * exact in integers, so one vpdpbusd gives the lane sums. */
ALWAYS_INLINE void q8_0_x8_tile(int64_t k, const void *w, size_t bw, const void *x, size_t bx, const int nr,
				float *s, size_t bs)
{
	const int64_t nb = k / QK8_0;
#ifdef PG_X86_VNNI
	const __m256i u128 = _mm256_set1_epi8((char)0x80);
#endif
	/* dw*dx of the tile's pairs, computed 4 at a time and read back as
	 * broadcast operands of the FMAs (each the same float product). */
	float sc[4 * PG_MAX_NR] __attribute__((aligned(16)));
	for (int j0 = 0; j0 < 8; j0 += 4) {
		__m256 acc[4][PG_MAX_NR];
		#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++)
				acc[j][r] = _mm256_setzero_ps();
		const block_q8_0 *w0 = WROW(block_q8_0, w, bw, j0);
		for (int64_t i = 0; i < nb; i++) {
			__m256i wq[4], wc[4];
			#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				const block_q8_0 *b = WROW(block_q8_0, w0, bw, j) + i;
				_mm_prefetch((const char *)b + 8 * bw, _MM_HINT_T0);
				wq[j] = _mm256_loadu_si256((const __m256i *)b->qs);
#ifdef PG_X86_VNNI
				wc[j] = _mm256_sub_epi32(_mm256_setzero_si256(),
							 _mm256_dpbusd_epi32(_mm256_setzero_si256(), u128, wq[j]));
#else
				wc[j] = _mm256_sign_epi8(wq[j], wq[j]);
#endif
			}
			__m128i dwh = _mm_cvtsi32_si128(w0[i].d);
			dwh = _mm_insert_epi16(dwh, WROW(block_q8_0, w0, bw, 1)[i].d, 1);
			dwh = _mm_insert_epi16(dwh, WROW(block_q8_0, w0, bw, 2)[i].d, 2);
			dwh = _mm_insert_epi16(dwh, WROW(block_q8_0, w0, bw, 3)[i].d, 3);
			const __m128 dw = _mm_cvtph_ps(dwh);
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++)
				_mm_store_ps(sc + 4 * r, _mm_mul_ps(dw, _mm_set1_ps(f16s(XROW(block_q8_0, x, bx, r)[i].d))));
			__asm__ volatile("" : : "r"(sc) : "memory");
			#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				const block_q8_0 *xb = XROW(block_q8_0, x, bx, r) + i;
				const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
#ifdef PG_X86_VNNI
				const __m256i yu = _mm256_xor_si256(y, u128);
#endif
				#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
#ifdef PG_X86_VNNI
					const __m256i p = _mm256_dpbusd_epi32(wc[j], yu, wq[j]);
#else
					const __m256i p = dot_us8(_mm256_setzero_si256(), wc[j], _mm256_sign_epi8(y, wq[j]));
#endif
					acc[j][r] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + 4 * r + j), _mm256_cvtepi32_ps(p),
								    acc[j][r]);
				}
			}
		}
		#pragma GCC unroll 4
		for (int r = 0; r < nr; r++)
			#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				s[(size_t)r * bs + j0 + j] = hsum_ps(acc[j][r]);
	}
}

/* One activation row (decode) against the 8 rows at once: eight streams in
 * flight instead of four, the activation block loaded once, and its
 * per-block work (the scale products, and the VNNI correction) done once
 * for the 8 rows. With VNNI the weights are made unsigned (w + 128) and the
 * correction, 128·Σy per lane, is the activation's; without, |w| against
 * sign(y, w) as ggml does, or, for weights known to hold no -128
 * (PG_TYPE_Q8_0_S127, s127), |y| against sign(w, y): the same products for
 * one op less per row (decode is faster for it), wrong for w = -128.
 * Same float ops per output as q8_0_x8_tile.
 *
 * Each row's block i + Q8_ROW_PF_BLOCKS is fetched ahead, and past the
 * row's end the next group's (8 rows on): about 10 KB ahead of the eight
 * streams whatever k is. A distance that grows with k (the next group's
 * block i: 48 KB, L1's size, at k = 5632) streams well below a plain read
 * of the same weights, likely because the lines leave L1 before they are
 * read; a fixed distance keeps every row length near it (bench/mm_decode
 * measures the kernel and a token's matmuls against that read). */
#define Q8_ROW_PF_BLOCKS 36

ALWAYS_INLINE void q8_0_x8_row_block(const void *w, size_t bw, const block_q8_0 *xb, int64_t i, size_t pf,
				     __m256 *acc, const bool s127)
{
#ifdef PG_X86_VNNI
	const __m256i u128 = _mm256_set1_epi8((char)0x80);
#endif
	float sc[8] __attribute__((aligned(32)));
	const __m256i y = _mm256_loadu_si256((const __m256i *)xb[i].qs);
#ifdef PG_X86_VNNI
	const __m256i c = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), u128, y));
#else
	const __m256i ay = _mm256_sign_epi8(y, y);
#endif
	_mm256_store_ps(sc, _mm256_mul_ps(f16x8_strided(&WROW(block_q8_0, w, bw, 0)[i].d, bw),
					  _mm256_set1_ps(f16s(xb[i].d))));
	__asm__ volatile("" : : "r"(sc) : "memory");
	#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		const block_q8_0 *b = WROW(block_q8_0, w, bw, j) + i;
		_mm_prefetch((const char *)b + pf, _MM_HINT_T0);
		const __m256i wq = _mm256_loadu_si256((const __m256i *)b->qs);
#ifdef PG_X86_VNNI
		const __m256i p = _mm256_dpbusd_epi32(c, _mm256_xor_si256(wq, u128), y);
#else
		const __m256i p = s127 ? dot_us8(_mm256_setzero_si256(), ay, _mm256_sign_epi8(wq, y))
				       : dot_us8(_mm256_setzero_si256(), _mm256_sign_epi8(wq, wq), _mm256_sign_epi8(y, wq));
#endif
		acc[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + j), _mm256_cvtepi32_ps(p), acc[j]);
	}
}

ALWAYS_INLINE void q8_0_x8_row(int64_t k, const void *w, size_t bw, const void *x, float *s, const bool s127)
{
	const int64_t nb = k / QK8_0, d = nb < Q8_ROW_PF_BLOCKS ? nb : Q8_ROW_PF_BLOCKS;
	const block_q8_0 *xb = x;
	__m256 acc[8];
	#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		acc[j] = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i < nb - d; i++)
		q8_0_x8_row_block(w, bw, xb, i, (size_t)d * sizeof(block_q8_0), acc, s127);
	for (; i < nb; i++)
		q8_0_x8_row_block(w, bw, xb, i, 8 * bw - (size_t)(nb - d) * sizeof(block_q8_0), acc, s127);
	#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		s[j] = hsum_ps(acc[j]);
}

/* Q4_K, eight weight rows at a time, in llama.cpp's repacked orders: per
 * output two float chains (scaled sums, mins), acc - accm at the end, with
 * one FMA each per super-block (ggml_gemv_q4_K_8x8_q8_K) or, with pairs,
 * per pair of sub-blocks, 64 elements (ggml_gemm_q4_K_8x8_q8_K, which
 * llama.cpp runs on its ubatch's rows 4 at a time). Both read the layout
 * of PG_TYPE_Q4_K_X8 (repack.h), whose lanes are the 8 weight rows: a
 * 4-byte unit of 4 activations, broadcast, meets all 8 rows in one
 * maddubs; a sub-block's 8 units add up in i16 (at most 8·2·15·127 =
 * 30480) and one madd with the rows' scales gives each row's scaled sum
 * in its lane, so no sum is horizontal. Q4_K left in the file's layout is
 * put in that layout a block at a time as it is read. */
ALWAYS_INLINE __m256i q4kx8_pair(const uint8_t *sb, const __m256i *pre, const int8_t *y, int g)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F);
	__m256i is = _mm256_setzero_si256();
	for (int h = 0; h < 2; h++) {
		__m256i p16 = _mm256_setzero_si256();
		#pragma GCC unroll 8
		for (int e = 0; e < 8; e++) {
			__m256i q;
			if (pre) {
				q = pre[16 * g + 8 * h + e];
			} else {
				q = _mm256_loadu_si256((const __m256i *)(sb + 32 * (8 * g + e)));
				q = _mm256_and_si256(h ? _mm256_srli_epi16(q, 4) : q, lo4);
			}
			int32_t u;
			memcpy(&u, y + 64 * g + 32 * h + 4 * e, 4);
			p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(q, _mm256_set1_epi32(u)));
		}
		const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sb + 1024 + 8 * (2 * g + h))));
		is = madd_acc(is, p16, _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16)));
	}
	return is;
}

/* One super-block of the layout at sb (block i of the activation rows)
 * into the nr rows' two chains. */
ALWAYS_INLINE void q4kx8_block(const uint8_t *sb, const void *x, size_t bx, int64_t i, int nr, __m256 *acc,
			       __m256 *accm, const int pairs, const int unpacked)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0F);
	__m256i pre[64];
	if (unpacked)
		for (int g = 0; g < 4; g++)
			for (int e = 0; e < 8; e++) {
				const __m256i q = _mm256_loadu_si256((const __m256i *)(sb + 32 * (8 * g + e)));
				pre[16 * g + e] = _mm256_and_si256(q, lo4);
				pre[16 * g + 8 + e] = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
			}
	__m256i mn[8];
	for (int t = 0; t < 8; t++)
		mn[t] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sb + 1088 + 8 * t)));
	const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 1152)));
	const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 1168)));
	for (int r = 0; r < nr; r++) {
		const block_q8_K *xb = XROW(block_q8_K, x, bx, r) + i;
		const __m256 dy = _mm256_set1_ps(xb->d);
		const __m256 dd = _mm256_mul_ps(dw, dy), dm = _mm256_mul_ps(dmw, dy);
		__m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
		for (int g = 0; g < 4; g++) {
			const __m256i is = q4kx8_pair(sb, unpacked ? pre : NULL, xb->qs, g);
			const __m256i b0 = _mm256_set1_epi32(xb->bsums[4 * g] + xb->bsums[4 * g + 1]);
			const __m256i b1 = _mm256_set1_epi32(xb->bsums[4 * g + 2] + xb->bsums[4 * g + 3]);
			const __m256i gm = _mm256_add_epi32(_mm256_mullo_epi32(mn[2 * g], b0),
							    _mm256_mullo_epi32(mn[2 * g + 1], b1));
			if (pairs) {
				acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), dd, acc[r]);
				accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(gm), dm, accm[r]);
			} else {
				isum = _mm256_add_epi32(isum, is);
				msum = _mm256_add_epi32(msum, gm);
			}
		}
		if (!pairs) {
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, acc[r]);
			accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), dm, accm[r]);
		}
	}
}

/* pg_q4_K_x8_block in vectors, for the kernels that lay out each block of
 * Q4_K left in the file as they read it: the quants as a transpose of 8x8
 * dwords per 32 bytes, the 16 scales and mins of the 8 rows as one of 8x16
 * bytes, which leaves them in the layout's order (sub-block t's 8 rows at
 * 1024 + 8t, mins from 1088). */
ALWAYS_INLINE void q4kx8_build(const block_q4_K *const rows[8], int64_t i, uint8_t *sb)
{
	for (int g = 0; g < 4; g++) {
		__m256i v[8], tr[8];
		for (int j = 0; j < 8; j++)
			v[j] = _mm256_loadu_si256((const __m256i *)(rows[j][i].qs + 32 * g));
		transpose8x8_epi32(v, tr);
		for (int e = 0; e < 8; e++)
			_mm256_store_si256((__m256i *)(sb + 32 * (8 * g + e)), tr[e]);
	}
	__m128i a[8], b[8];
	pg_f16 d[8], dmin[8];
	for (int j = 0; j < 8; j++) {
		uint8_t sm[16];
		pg_k4_scales(rows[j][i].scales, sm);
		a[j] = _mm_loadu_si128((const __m128i *)sm);
		d[j] = rows[j][i].d;
		dmin[j] = rows[j][i].dmin;
	}
	for (int j = 0; j < 8; j += 2) { /* bytes of rows j, j+1 interleaved */
		b[j] = _mm_unpacklo_epi8(a[j], a[j + 1]);
		b[j + 1] = _mm_unpackhi_epi8(a[j], a[j + 1]);
	}
	for (int q = 0; q < 2; q++) /* rows 4q..4q+3, bytes 0-7 and 8-15 */
		for (int h = 0; h < 2; h++) {
			a[4 * q + 2 * h] = _mm_unpacklo_epi16(b[4 * q + h], b[4 * q + 2 + h]);
			a[4 * q + 2 * h + 1] = _mm_unpackhi_epi16(b[4 * q + h], b[4 * q + 2 + h]);
		}
	for (int c = 0; c < 4; c++) { /* a[c]: rows 0-3, a[4 + c]: rows 4-7, 4 bytes each */
		_mm_storeu_si128((__m128i *)(sb + 1024 + 32 * c), _mm_unpacklo_epi32(a[c], a[4 + c]));
		_mm_storeu_si128((__m128i *)(sb + 1024 + 32 * c + 16), _mm_unpackhi_epi32(a[c], a[4 + c]));
	}
	memcpy(sb + 1152, d, sizeof d);
	memcpy(sb + 1168, dmin, sizeof dmin);
}

/* file: w is 8 rows of Q4_K where they lie (bw bytes apart), each block
 * laid out in scratch as it is met (q4kx8_build); else w is a group
 * of PG_TYPE_Q4_K_X8. */
ALWAYS_INLINE void q4kx8_rows(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			      size_t bs, const int pairs, const int unpacked, const int file)
{
	__m256 acc[PG_Q4K_PAIRS_NR], accm[PG_Q4K_PAIRS_NR];
	uint8_t tmp[PG_Q4KX8_SB] __attribute__((aligned(32)));
	const block_q4_K *rows[8];
	for (int j = 0; file && j < 8; j++)
		rows[j] = WROW(block_q4_K, w, bw, j);
	for (int r = 0; r < nr; r++)
		acc[r] = accm[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		const uint8_t *sb = tmp;
		if (file) {
			for (int j = 0; j < 8; j++)
				pf_block(rows[j] + i, sizeof(block_q4_K));
			q4kx8_build(rows, i, tmp);
		} else {
			/* The run is linear (the next group follows the last block),
			 * but each block is read out of order, which the hardware
			 * prefetchers follow poorly: fetch 4 blocks ahead, in step. */
			sb = (const uint8_t *)w + (size_t)i * PG_Q4KX8_SB;
			for (int l = 0; l < PG_Q4KX8_SB; l += 64)
				_mm_prefetch((const char *)sb + 4 * PG_Q4KX8_SB + l, _MM_HINT_T0);
		}
		q4kx8_block(sb, x, bx, i, nr, acc, accm, pairs, unpacked);
	}
	for (int r = 0; r < nr; r++)
		_mm256_storeu_ps(s + (size_t)r * bs, _mm256_sub_ps(acc[r], accm[r]));
}

/* gemv8_q4_K_x8r, gemm8_q4_K_x8r (PG_TYPE_Q4_K_X8) and gemv8_q4_K,
 * gemm8_q4_K (Q4_K in the file's layout): one activation row (decode)
 * unpacks the nibbles as it goes, more unpack each block once. */
#define Q4KX8_KERNEL(NAME, PAIRS, FILE)                                                                \
	static void NAME(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,  \
			 size_t bs)                                                                        \
	{                                                                                                 \
		if (nr == 1)                                                                              \
			q4kx8_rows(k, w, bw, x, bx, 1, s, bs, PAIRS, 0, FILE);                            \
		for (int r = 0; nr > 1 && r < nr; r += PG_Q4K_PAIRS_NR)                                   \
			q4kx8_rows(k, w, bw, XROW(char, x, bx, r), bx,                                    \
				   nr - r < PG_Q4K_PAIRS_NR ? nr - r : PG_Q4K_PAIRS_NR, s + (size_t)r * bs, bs, \
				   PAIRS, 1, FILE);                                                       \
	}
Q4KX8_KERNEL(gemv8_q4_K_x8r, 0, 0)
Q4KX8_KERNEL(gemm8_q4_K_x8r, 1, 0)
Q4KX8_KERNEL(gemv8_q4_K, 0, 1)
Q4KX8_KERNEL(gemm8_q4_K, 1, 1)

/* Instantiates gemv_NAME(k, w, x, bx, nr, s, bs) from a tile body with the
 * row count a compile-time constant, so the per-row arrays live in
 * registers. */
#define X86_GEMV(NAME, CALL)                                                                         \
	__attribute__((unused)) /* an ISA may replace one */                                          \
	static void gemv_##NAME(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s,  \
				size_t bs)                                                            \
	{                                                                                             \
		switch (nr) {                                                                        \
		case 1: CALL(1); break;                                                              \
		case 2: CALL(2); break;                                                              \
		case 3: CALL(3); break;                                                              \
		default: CALL(4); break;                                                             \
		}                                                                                     \
	}

#define C_Q8_0(N) q8_0_tile(k, w, x, bx, N, s, bs)
#define C_Q4_0(N) q4_0_tile(k, w, x, bx, N, s, bs)
#define C_Q5_0(N) q5_0_tile(k, w, x, bx, N, s, bs)
#define C_Q4_1(N) qx_1_tile(k, w, 0, x, bx, N, s, bs)
#define C_Q5_1(N) qx_1_tile(k, w, 1, x, bx, N, s, bs)
#define C_Q2_K(N) q23_K_tile(k, w, 0, x, bx, N, s, bs)
#define C_Q3_K(N) q23_K_tile(k, w, 1, x, bx, N, s, bs)
#define C_Q4_K(N) qk_45_tile(k, w, 0, x, bx, N, s, bs)
#define C_Q5_K(N) qk_45_tile(k, w, 1, x, bx, N, s, bs)
#define C_Q6_K(N) q6_K_tile(k, w, x, bx, N, s, bs)
#define C_IQ4_NL(N) iq4_nl_tile(k, w, x, bx, N, s, bs)
#define C_IQ4_XS(N) iq4_xs_tile(k, w, x, bx, N, s, bs)
X86_GEMV(q8_0, C_Q8_0)
X86_GEMV(q4_0, C_Q4_0)
X86_GEMV(q5_0, C_Q5_0)
X86_GEMV(q4_1, C_Q4_1)
X86_GEMV(q5_1, C_Q5_1)
X86_GEMV(q2_K, C_Q2_K)
X86_GEMV(q3_K, C_Q3_K)
X86_GEMV(q4_K, C_Q4_K)
X86_GEMV(q5_K, C_Q5_K)
X86_GEMV(q6_K, C_Q6_K)
X86_GEMV(iq4_nl, C_IQ4_NL)
X86_GEMV(iq4_xs, C_IQ4_XS)

static void tb_iq4_nl(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
		      size_t bs)
{
	for (int j = 0; j < nw; j++) {
		const block_iq4_nl *wj = WROW(block_iq4_nl, w, bw, j);
		switch (nr) {
		case 1: iq4_nl_tb_tile(k, wj, x, bx, 1, s + j, bs); break;
		case 2: iq4_nl_tb_tile(k, wj, x, bx, 2, s + j, bs); break;
		case 3: iq4_nl_tb_tile(k, wj, x, bx, 3, s + j, bs); break;
		default: iq4_nl_tb_tile(k, wj, x, bx, 4, s + j, bs); break;
		}
	}
}

#define X86_GEMV8(NAME, TILE)                                                                        \
	static void gemv8_##NAME(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr,   \
				 float *s, size_t bs)                                                  \
	{                                                                                             \
		switch (nr) {                                                                        \
		case 1: TILE(k, w, bw, x, bx, 1, s, bs); break;                                      \
		case 2: TILE(k, w, bw, x, bx, 2, s, bs); break;                                      \
		case 3: TILE(k, w, bw, x, bx, 3, s, bs); break;                                      \
		default: TILE(k, w, bw, x, bx, 4, s, bs); break;                                     \
		}                                                                                     \
	}
#define Q4_0_X8_TILE(k, w, bw, x, bx, nr, s, bs) x8_tile(k, w, bw, x, bx, nr, s, bs, false)
#define IQ4_NL_X8_TILE(k, w, bw, x, bx, nr, s, bs) x8_tile(k, w, bw, x, bx, nr, s, bs, true)
X86_GEMV8(q4_0, Q4_0_X8_TILE)
X86_GEMV8(iq4_nl, IQ4_NL_X8_TILE)
static void gemv8_q8_0(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s, size_t bs)
{
	switch (nr) {
	case 1: q8_0_x8_row(k, w, bw, x, s, false); break;
	case 2: q8_0_x8_tile(k, w, bw, x, bx, 2, s, bs); break;
	case 3: q8_0_x8_tile(k, w, bw, x, bx, 3, s, bs); break;
	default: q8_0_x8_tile(k, w, bw, x, bx, 4, s, bs); break;
	}
}
#ifndef PG_X86_VNNI
/* pg_kern.q8_0_s127_row (nr == 1) */
static void gemv8_q8_0_s127_row(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs)
{
	(void)bx;
	(void)nr;
	(void)bs;
	q8_0_x8_row(k, w, bw, x, s, true);
}
#endif

#endif
