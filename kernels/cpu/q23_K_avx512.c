/* kernels/cpu/q23_K_avx512.c — Q2_K, Q3_K, Q5_K and Q6_K weights against pairs of
 * Q8_K activation rows on 512-bit vectors (prompts, batched decode).
 * Q3_K's form is described at q3_K_rows2 (Q6_K's and Q5_K's, q6_K_rows2
 * and q5_K_rows2, are variations of it); Q2_K's here.
 *
 * The float order is ggml_vec_dot_q2_K_q8_K's (AVX2) for every output:
 * per super-block, acc = fma(-dy·dmin, (float)mins lanes, acc), then
 * acc = fma(dy·dw, (float)lanes, acc), lane l holding the integer sum of
 * the products of elements 4l..4l+3 of each 32-element run, each times
 * its group's scale; hsum_float_8 at the end. Only the integers are found
 * another way, and they are exact either way:
 *   - a level (0..3) times its group's scale (0..15) fits a byte, so one
 *     vpshufb of a table {0, s, 2s, 3s} per 128-bit lane (a lane is one
 *     group of 16) turns a run's levels into level·scale, and one vpdpbusd
 *     against the activations gives each lane its scaled sum: ggml's
 *     maddubs, madd by the scale and add, in one op;
 *   - two activation rows share each instruction (row a in the low half,
 *     row b in the high half), so the weight work of a run is done once
 *     per pair.
 * Where the matmul packs the activations (n % 8 == 0, m >= 2), each pair's
 * runs lie side by side once per matmul, and 8 weight rows go two at a
 * time against up to 4 pairs: a load of activations serves two weight
 * rows, a row's unpacking serves 4 pairs. Otherwise the rows are read as
 * they are, up to 2 pairs against one weight row.
 */
#include <immintrin.h>

#include "kernels/cpu/cpu.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

#define YB(x, bx, r) ((const block_q8_K *)((const char *)(x) + (size_t)(r) * (bx)))

AI float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* A super-block's weight work: group g's word in lane g of tables, bytes
 * (0, s, 2s, 3s) (s <= 15: no carries), and the 16 mins as i16. */
AI void weight_prep(const block_q2_K *b, __m512i *tables, __m256i *mins)
{
	const __m128i lo4 = _mm_set1_epi8(0xF);
	const __m128i packed = _mm_loadu_si128((const __m128i *)b->scales);
	*tables = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(packed, lo4)), _mm512_set1_epi32(0x03020100));
	*mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), lo4));
}

/* Group g's dword of v in lanes 0-3 of each pair half, group g + 1's in
 * 4-7 (v: group t's in dword t), for a run of 32 that spans two groups of
 * 16: a Q2_K table or a Q3_K/Q6_K scale per lane. */
AI __m512i group_scales(__m512i v, int g)
{
	const __m512i gi = _mm512_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1, g, g, g, g, g + 1, g + 1,
					     g + 1, g + 1);
	return _mm512_permutexvar_epi32(gi, v);
}

/* Run 4j + p of the super-block (its levels at bits 2p of qs[32j..]) as
 * level·scale, in both halves: bytes 0-15 are group 8j + 2p, 16-31 the
 * next. */
AI __m512i scaled_levels(__m512i tables, __m512i bits, int j, int p)
{
	return _mm512_shuffle_epi8(group_scales(tables, 8 * j + 2 * p),
				   _mm512_and_si512(_mm512_srli_epi16(bits, 2 * p), _mm512_set1_epi8(3)));
}

/* 32 bytes of row a's block, 32 of row b's, at the same offset */
AI __m512i pair_load(const void *a, const void *b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
				  _mm256_loadu_si256((const __m256i *)b), 1);
}

/* dy of row a in lanes 0-7, of row b in lanes 8-15 */
AI __m512 pair_d(float da, float db)
{
	return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(da)), _mm256_set1_ps(db), 1);
}

/* One weight row against NP pairs of activation rows (pair q: rows 2q and
 * 2q + 1 of x). */
AI void q2_K_pairs(int64_t k, const block_q2_K *w, const void *x, size_t bx, const int NP, float *s, size_t bs)
{
	__m512 acc[2];
	#pragma GCC unroll 2
	for (int q = 0; q < NP; q++)
		acc[q] = _mm512_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		const block_q2_K *b = w + i;
		_mm_prefetch((const char *)(b + 2), _MM_HINT_T0);
		__m512i tables, isum[2];
		__m256i mins;
		weight_prep(b, &tables, &mins);
		const float dw = _cvtsh_ss(b->d), dminw = _cvtsh_ss(b->dmin);
		#pragma GCC unroll 2
		for (int q = 0; q < NP; q++) {
			const block_q8_K *ya = YB(x, bx, 2 * q) + i, *yb = YB(x, bx, 2 * q + 1) + i;
			const __m512i prod = _mm512_madd_epi16(_mm512_broadcast_i64x4(mins), pair_load(ya->bsums, yb->bsums));
			const __m512 dmin = _mm512_mul_ps(pair_d(-ya->d, -yb->d), _mm512_set1_ps(dminw));
			acc[q] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(prod), acc[q]);
			isum[q] = _mm512_setzero_si512();
		}
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
			#pragma GCC unroll 4
			for (int p = 0; p < 4; p++) {
				const __m512i ls = scaled_levels(tables, bits, j, p);
				#pragma GCC unroll 2
				for (int q = 0; q < NP; q++) {
					const block_q8_K *ya = YB(x, bx, 2 * q) + i, *yb = YB(x, bx, 2 * q + 1) + i;
					const int off = 128 * j + 32 * p;
					isum[q] = _mm512_dpbusd_epi32(isum[q], ls, pair_load(ya->qs + off, yb->qs + off));
				}
			}
		}
		#pragma GCC unroll 2
		for (int q = 0; q < NP; q++) {
			const float da = YB(x, bx, 2 * q)[i].d, db = YB(x, bx, 2 * q + 1)[i].d;
			const __m512 d = _mm512_mul_ps(pair_d(da, db), _mm512_set1_ps(dw));
			acc[q] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[q]), acc[q]);
		}
	}
	#pragma GCC unroll 2
	for (int q = 0; q < NP; q++) {
		s[(size_t)(2 * q) * bs] = hsum8(_mm512_castps512_ps256(acc[q]));
		s[(size_t)(2 * q + 1) * bs] = hsum8(_mm512_extractf32x8_ps(acc[q], 1));
	}
}

/* nr even, 2 or 4 */
void pg_gemv_q2_K_pairs_avx512(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s, size_t bs)
{
	if (nr >= 4)
		q2_K_pairs(k, w, x, bx, 2, s, bs);
	else
		q2_K_pairs(k, w, x, bx, 1, s, bs);
}

/* ---- packed pairs: the activations laid out once per matmul ------------ */

/* A pair of Q8_K rows (a, b), per super-block: Y, the 8 runs of 32
 * activations as [a's run | b's run] (64 bytes each, run r = elements
 * 32r..32r+31); B, [a's bsums | b's bsums]; D, a's d and b's d. */
struct q2k_pair_layout {
	size_t y, b, d, stride;
};

AI struct q2k_pair_layout layout(int64_t nb)
{
	struct q2k_pair_layout l = { 0, (size_t)nb * 512, (size_t)nb * 576, (size_t)nb * 584 };
	return l;
}

size_t pg_q8_K_pair_bytes_avx512(int64_t k)
{
	return layout(k / QK_K).stride;
}

/* Rows 2p and 2p+1 (an odd last row with itself) of xq into pair p. */
void pg_q8_K_pack_pairs_avx512(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride)
{
	const int64_t nb = k / QK_K;
	const struct q2k_pair_layout l = layout(nb);
	for (int64_t p = 0; p < (m + 1) / 2; p++) {
		const block_q8_K *a = YB(xq, xrow, 2 * p), *b = YB(xq, xrow, 2 * p + 1 < m ? 2 * p + 1 : 2 * p);
		char *base = (char *)dst + (size_t)p * pstride;
		for (int64_t i = 0; i < nb; i++) {
			for (int r = 0; r < 8; r++) {
				memcpy(base + l.y + 512 * i + 64 * r, a[i].qs + 32 * r, 32);
				memcpy(base + l.y + 512 * i + 64 * r + 32, b[i].qs + 32 * r, 32);
			}
			memcpy(base + l.b + 64 * i, a[i].bsums, 32);
			memcpy(base + l.b + 64 * i + 32, b[i].bsums, 32);
			float *d = (float *)(base + l.d) + 2 * i;
			d[0] = a[i].d;
			d[1] = b[i].d;
		}
	}
}

/* a's d in lanes 0-7, b's in 8-15, from D */
AI __m512 pair_dy(const char *pq, const struct q2k_pair_layout *l, int64_t i)
{
	const __m512i dperm = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	return _mm512_permutexvar_ps(dperm, _mm512_castps128_ps512(_mm_castpd_ps(
						    _mm_load_sd((const double *)(pq + l->d) + i))));
}

/* acc[h][q] = 0 for both weight rows and NP pairs */
AI void acc_zero(__m512 (*acc)[PG_PACK_PAIRS], const int NP)
{
	#pragma GCC unroll 4
	for (int h = 0; h < 2; h++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++)
			acc[h][q] = _mm512_setzero_ps();
}

/* Run r of super-block i of NP packed pairs against both weight rows'
 * unsigned levels lv: isum += sv · (the lane's Σ (lv - off)·y), vpdpbusd
 * then vpdpwssd (the lane's sum an i16, sv's scale in each dword's low
 * word). off4: Q3_K's levels are level + 4, taken back out through the
 * accumulator start (-4·Σy, shared by the two rows); the other types
 * take their offset out elsewhere. */
AI void run_dots(__m512i (*isum)[PG_PACK_PAIRS], const __m512i lv[2], const __m512i sv[2], const char *x,
		 size_t ps, const struct q2k_pair_layout *l, int64_t i, int r, const int NP, const bool off4)
{
	#pragma GCC unroll 4
	for (int q = 0; q < NP; q++) {
		const __m512i y = _mm512_loadu_si512(x + (size_t)q * ps + l->y + 512 * i + 64 * r);
		const __m512i c =
			off4 ? _mm512_sub_epi32(_mm512_setzero_si512(),
						_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(4), y))
			     : _mm512_setzero_si512();
		#pragma GCC unroll 4
		for (int h = 0; h < 2; h++)
			isum[h][q] = _mm512_dpwssd_epi32(isum[h][q], _mm512_dpbusd_epi32(c, lv[h], y), sv[h]);
	}
}

/* The end of a super-block for two weight rows (d0, d1) against NP pairs:
 * acc += dy·dw·(float)isum, ggml's one FMA per lane. */
AI void close_block(__m512 (*acc)[PG_PACK_PAIRS], __m512i (*isum)[PG_PACK_PAIRS], pg_f16 d0, pg_f16 d1,
		    const char *x, size_t ps, const struct q2k_pair_layout *l, int64_t i, const int NP)
{
	const __m512 dw[2] = { _mm512_set1_ps(_cvtsh_ss(d0)), _mm512_set1_ps(_cvtsh_ss(d1)) };
	#pragma GCC unroll 4
	for (int h = 0; h < 2; h++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++)
			acc[h][q] = _mm512_fmadd_ps(_mm512_mul_ps(pair_dy(x + (size_t)q * ps, l, i), dw[h]),
						    _mm512_cvtepi32_ps(isum[h][q]), acc[h][q]);
}

/* ggml's hsum_float_8 of each half: out[q][h][a|b] */
AI void sums_out(__m512 (*acc)[PG_PACK_PAIRS], const int NP, float (*out)[2][2])
{
	#pragma GCC unroll 4
	for (int h = 0; h < 2; h++)
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++) {
			out[q][h][0] = hsum8(_mm512_castps512_ps256(acc[h][q]));
			out[q][h][1] = hsum8(_mm512_extractf32x8_ps(acc[h][q], 1));
		}
}

/* Two weight rows (w, and w + bw) against NP packed pairs starting at x
 * (stride ps): each activation load serves both rows. */
AI void q2_K_rows2(int64_t nb, const block_q2_K *w, size_t bw, const char *x, size_t ps, const int NP,
		   float (*out)[2][2])
{
	const struct q2k_pair_layout l = layout(nb);
	__m512 acc[2][PG_PACK_PAIRS];
	acc_zero(acc, NP);
	for (int64_t i = 0; i < nb; i++) {
		const block_q2_K *b[2] = { w + i, (const block_q2_K *)((const char *)w + bw) + i };
		__m512i tables[2];
		__m512i isum[2][PG_PACK_PAIRS];
		#pragma GCC unroll 4
		for (int h = 0; h < 2; h++) {
			_mm_prefetch((const char *)(b[h] + 2), _MM_HINT_T0);
			__m256i mins;
			weight_prep(b[h], &tables[h], &mins);
			const __m512 dminw = _mm512_set1_ps(_cvtsh_ss(b[h]->dmin));
			#pragma GCC unroll 4
			for (int q = 0; q < NP; q++) {
				const char *pq = x + (size_t)q * ps;
				const __m512i prod = _mm512_madd_epi16(_mm512_broadcast_i64x4(mins),
								       _mm512_loadu_si512(pq + l.b + 64 * i));
				const __m512 dmin =
					_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), pair_dy(pq, &l, i)), dminw);
				acc[h][q] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(prod), acc[h][q]);
				isum[h][q] = _mm512_setzero_si512();
			}
		}
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			__m512i bits[2];
			#pragma GCC unroll 4
			for (int h = 0; h < 2; h++)
				bits[h] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[h]->qs + 32 * j)));
			#pragma GCC unroll 4
			for (int p = 0; p < 4; p++) {
				const __m512i ls[2] = { scaled_levels(tables[0], bits[0], j, p),
							scaled_levels(tables[1], bits[1], j, p) };
				#pragma GCC unroll 4
				for (int q = 0; q < NP; q++) {
					const __m512i y = _mm512_loadu_si512(x + (size_t)q * ps + l.y + 512 * i + 64 * (4 * j + p));
					isum[0][q] = _mm512_dpbusd_epi32(isum[0][q], ls[0], y);
					isum[1][q] = _mm512_dpbusd_epi32(isum[1][q], ls[1], y);
				}
			}
		}
		close_block(acc, isum, b[0]->d, b[1]->d, x, ps, &l, i, NP);
	}
	sums_out(acc, NP, out);
}

/* pg_gemv8_fn over packed pairs (nr <= 2 * PG_PACK_PAIRS) from a ROWS2
 * kernel: x is the tile's first pair, the pair stride 2 * bx; the pair
 * count a constant in each call, so the per-pair arrays stay in
 * registers. */
#define PAIRS_GEMV8(NAME, ROWS2, BLOCK)                                                                     \
	void NAME(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s, size_t bs) \
	{                                                                                                    \
		const int64_t nb = k / QK_K;                                                                 \
		for (int j = 0; j < 8; j += 2) {                                                             \
			float out[PG_PACK_PAIRS][2][2];                                                      \
			const BLOCK *wj = (const BLOCK *)((const char *)w + (size_t)j * bw);                 \
			switch ((nr + 1) / 2) {                                                              \
			case 1: ROWS2(nb, wj, bw, x, 2 * bx, 1, out); break;                                 \
			case 2: ROWS2(nb, wj, bw, x, 2 * bx, 2, out); break;                                 \
			case 3: ROWS2(nb, wj, bw, x, 2 * bx, 3, out); break;                                 \
			default: ROWS2(nb, wj, bw, x, 2 * bx, 4, out); break;                                \
			}                                                                                    \
			for (int r = 0; r < nr; r++) {                                                       \
				s[(size_t)r * bs + j] = out[r / 2][0][r % 2];                                \
				s[(size_t)r * bs + j + 1] = out[r / 2][1][r % 2];                            \
			}                                                                                    \
		}                                                                                            \
	}

PAIRS_GEMV8(pg_gemv8_q2_K_pairs_avx512, q2_K_rows2, block_q2_K)

/* ---- Q3_K from the same packed pairs -------------------------------------
 * ggml_vec_dot_q3_K_q8_K's order: per super-block one FMA per lane of
 * dy·dw·(lane sum), lane l the sum over runs of the group's scale s times
 * the products of elements 4l..4l+3, a level being low - 4 where its hmask
 * bit is clear (-4..3). Here a level goes in as l' = level + 4 (0..7,
 * unsigned), the accumulator of its dot product starts at -4·(the lane's
 * activations), so vpdpbusd gives the lane's Σ level·y exactly (|·| <=
 * 2048: an i16), and vpdpwssd multiplies it by s (the low half of a
 * dword, the high half 0) into the sum: two multiply ops where ggml's
 * form takes three, for two activation rows at once. */
AI void q3_K_rows2(int64_t nb, const block_q3_K *w, size_t bw, const char *x, size_t ps, const int NP,
		   float (*out)[2][2])
{
	const struct q2k_pair_layout l = layout(nb);
	const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
	__m512 acc[2][PG_PACK_PAIRS];
	acc_zero(acc, NP);
	for (int64_t i = 0; i < nb; i++) {
		const block_q3_K *b[2] = { w + i, (const block_q3_K *)((const char *)w + bw) + i };
		__m512i sdw[2], hb[2], isum[2][PG_PACK_PAIRS];
		#pragma GCC unroll 4
		for (int h = 0; h < 2; h++) {
			_mm_prefetch((const char *)(b[h] + 2), _MM_HINT_T0);
			uint32_t u[4];
			pg_q3_K_scale_words(b[h]->scales, u);
			const __m128i sc8 = _mm_sub_epi8(_mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]),
							 _mm_set1_epi8(32));
			sdw[h] = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), _mm512_set1_epi32(0xFFFF));
			hb[h] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[h]->hmask));
			#pragma GCC unroll 4
			for (int q = 0; q < NP; q++)
				isum[h][q] = _mm512_setzero_si512();
		}
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			__m512i bits[2];
			#pragma GCC unroll 4
			for (int h = 0; h < 2; h++)
				bits[h] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[h]->qs + 32 * j)));
			#pragma GCC unroll 4
			for (int p = 0; p < 4; p++) {
				__m512i lv[2], sv[2];
				#pragma GCC unroll 4
				for (int h = 0; h < 2; h++) {
					const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(bits[h], 2 * p), m3);
					const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(hb[h], 4 * j + p), one);
					lv[h] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 2));
					sv[h] = group_scales(sdw[h], 8 * j + 2 * p);
				}
				run_dots(isum, lv, sv, x, ps, &l, i, 4 * j + p, NP, true);
			}
		}
		close_block(acc, isum, b[0]->d, b[1]->d, x, ps, &l, i, NP);
	}
	sums_out(acc, NP, out);
}

PAIRS_GEMV8(pg_gemv8_q3_K_pairs_avx512, q3_K_rows2, block_q3_K)

/* ---- Q6_K from the same packed pairs -------------------------------------
 * ggml_vec_dot_q6_K_q8_K's order: per super-block one FMA per lane of
 * dy·dw·(lane sum), lane l the sum over the 8 runs of the group's scale s
 * (int8) times the products of elements 4l..4l+3 with the unsigned 6-bit
 * levels q (0..63), less 32·(s·bsum) of groups 2l and 2l+1 (ggml takes the
 * -32 of each level out through the activations' group sums). vpdpbusd
 * gives the lane's Σ q·y (<= 32256: an i16) and vpdpwssd multiplies it by
 * s into the sum, which starts at -32 times a vpmaddwd of the scales and
 * the packed bsums. Run 4j + k (elements 128j + 32k ..) takes its low 4
 * bits from ql[64j + 32(k & 1) ..] (the high nibbles for k >= 2) and its
 * top 2 from qh[32j ..] >> 2k. */
AI void q6_K_rows2(int64_t nb, const block_q6_K *w, size_t bw, const char *x, size_t ps, const int NP,
		   float (*out)[2][2])
{
	const struct q2k_pair_layout l = layout(nb);
	const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
	__m512 acc[2][PG_PACK_PAIRS];
	acc_zero(acc, NP);
	for (int64_t i = 0; i < nb; i++) {
		const block_q6_K *b[2] = { w + i, (const block_q6_K *)((const char *)w + bw) + i };
		__m512i sdw[2], isum[2][PG_PACK_PAIRS];
		#pragma GCC unroll 4
		for (int h = 0; h < 2; h++) {
			const char *next = (const char *)(b[h] + 2);
			_mm_prefetch(next, _MM_HINT_T0);
			_mm_prefetch(next + 64, _MM_HINT_T0);
			_mm_prefetch(next + 128, _MM_HINT_T0);
			_mm_prefetch(next + 192, _MM_HINT_T0);
			const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[h]->scales);
			sdw[h] = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), _mm512_set1_epi32(0xFFFF));
			const __m512i sc16 = _mm512_broadcast_i64x4(_mm256_cvtepi8_epi16(sc8));
			#pragma GCC unroll 4
			for (int q = 0; q < NP; q++) {
				const __m512i mins = _mm512_madd_epi16(sc16, _mm512_loadu_si512(x + (size_t)q * ps + l.b + 64 * i));
				isum[h][q] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(mins, 5));
			}
		}
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			__m512i ql[2][2], qh[2];
			#pragma GCC unroll 4
			for (int h = 0; h < 2; h++) {
				ql[h][0] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[h]->ql + 64 * j)));
				ql[h][1] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[h]->ql + 64 * j + 32)));
				qh[h] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[h]->qh + 32 * j)));
			}
			#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) {
				__m512i lv[2], sv[2];
				#pragma GCC unroll 4
				for (int h = 0; h < 2; h++) {
					const __m512i lo = _mm512_and_si512(k >= 2 ? _mm512_srli_epi16(ql[h][k & 1], 4)
										   : ql[h][k & 1],
									    m4);
					const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qh[h], 2 * k), m3);
					lv[h] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
					sv[h] = group_scales(sdw[h], 8 * j + 2 * k);
				}
				run_dots(isum, lv, sv, x, ps, &l, i, 4 * j + k, NP, false);
			}
		}
		close_block(acc, isum, b[0]->d, b[1]->d, x, ps, &l, i, NP);
	}
	sums_out(acc, NP, out);
}

PAIRS_GEMV8(pg_gemv8_q6_K_pairs_avx512, q6_K_rows2, block_q6_K)

/* ---- Q5_K from the same packed pairs -------------------------------------
 * ggml_vec_dot_q5_K_q8_K's order: per super-block one FMA per lane of
 * dw·dy·(lane sum), lane l the sum over the 8 runs of 32 of the run's
 * 6-bit scale times the products of elements 4l..4l+3 with the 5-bit
 * levels (0..31); and one scalar FMA of -dy·dmin times Σ min·(the run's
 * activations, from bsums); at the end hsum_float_8 plus that scalar.
 * vpdpbusd gives a lane's Σ level·y (<= 15872: an i16) and vpdpwssd
 * multiplies it by the scale, for two activation rows at once. Run 2g + t
 * (elements 64g + 32t ..) takes its low 4 bits from the low (t = 0) or
 * high nibbles of qs[32g ..] and its fifth from bit 2g + t of qh. */
AI void q5_K_rows2(int64_t nb, const block_q5_K *w, size_t bw, const char *x, size_t ps, const int NP,
		   float (*out)[2][2])
{
	const struct q2k_pair_layout l = layout(nb);
	const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
	const __m512i abab = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
	__m512 acc[2][PG_PACK_PAIRS];
	/* the scalar chains of the mins, 128-bit lane 2h + (0: a, 1: b) */
	__m512 summs[PG_PACK_PAIRS];
	acc_zero(acc, NP);
	#pragma GCC unroll 4
	for (int q = 0; q < NP; q++)
		summs[q] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const block_q5_K *b[2] = { w + i, (const block_q5_K *)((const char *)w + bw) + i };
		uint8_t sm[2][16];
		__m512i qh[2], m16[2], isum[2][PG_PACK_PAIRS];
		#pragma GCC unroll 4
		for (int h = 0; h < 2; h++) {
			const char *next = (const char *)(b[h] + 2);
			_mm_prefetch(next, _MM_HINT_T0);
			_mm_prefetch(next + 64, _MM_HINT_T0);
			_mm_prefetch(next + 128, _MM_HINT_T0);
			pg_k4_scales(b[h]->scales, sm[h]);
			/* min g against groups 2g and 2g+1 of the bsums */
			const __m128i mn = _mm_loadl_epi64((const __m128i *)(sm[h] + 8));
			m16[h] = _mm512_broadcast_i64x4(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn)));
			qh[h] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[h]->qh));
		}
		const __m512 dmin = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(b[0]->dmin)),
						       _mm256_set1_ps(_cvtsh_ss(b[1]->dmin)), 1);
		#pragma GCC unroll 4
		for (int q = 0; q < NP; q++) {
			const char *pq = x + (size_t)q * ps;
			const __m512i bs = _mm512_loadu_si512(pq + l.b + 64 * i);
			const __m512i t0 = _mm512_madd_epi16(m16[0], bs), t1 = _mm512_madd_epi16(m16[1], bs);
			/* each 128-bit lane's dwords all its sum: a and b of row 0, of row 1 */
			__m512i c = _mm512_add_epi32(_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD));
			c = _mm512_add_epi32(c, _mm512_shuffle_epi32(c, 0x4E));
			c = _mm512_add_epi32(c, _mm512_shuffle_epi32(c, 0xB1));
			const __m512 dy = _mm512_permutexvar_ps(
				abab, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(pq + l.d) + i))));
			summs[q] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), dy), dmin),
						   _mm512_cvtepi32_ps(c), summs[q]);
			isum[0][q] = isum[1][q] = _mm512_setzero_si512();
		}
		#pragma GCC unroll 4
		for (int g = 0; g < 4; g++) {
			__m512i bits[2];
			#pragma GCC unroll 4
			for (int h = 0; h < 2; h++)
				bits[h] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[h]->qs + 32 * g)));
			#pragma GCC unroll 2
			for (int t = 0; t < 2; t++) {
				const int r = 2 * g + t;
				__m512i lv[2], sv[2];
				#pragma GCC unroll 4
				for (int h = 0; h < 2; h++) {
					const __m512i lo = _mm512_and_si512(t ? _mm512_srli_epi16(bits[h], 4) : bits[h], m4);
					const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qh[h], r), one);
					lv[h] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
					sv[h] = _mm512_set1_epi32(sm[h][r]);
				}
				run_dots(isum, lv, sv, x, ps, &l, i, r, NP, false);
			}
		}
		close_block(acc, isum, b[0]->d, b[1]->d, x, ps, &l, i, NP);
	}
	sums_out(acc, NP, out);
	#pragma GCC unroll 4
	for (int q = 0; q < NP; q++) {
		float sm4[16];
		_mm512_storeu_ps(sm4, summs[q]);
		#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			out[q][h][0] += sm4[8 * h];
			out[q][h][1] += sm4[8 * h + 4];
		}
	}
}

PAIRS_GEMV8(pg_gemv8_q5_K_pairs_avx512, q5_K_rows2, block_q5_K)

/* ---- one row (decode) --------------------------------------------------- */

/* Q2_K against one Q8_K row: two runs per 512-bit instruction (runs 4j + p
 * and 4j + p + 1 side by side, as the activations lie), the halves added
 * at the end of each super-block into ggml's 8 lanes. */
void pg_gemv_q2_K_row_avx512(int64_t k, const void *vw, const void *x, float *s)
{
	const block_q2_K *w = vw;
	const block_q8_K *y = x;
	const __m512i m3 = _mm512_set1_epi8(3);
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < k / QK_K; i++) {
		const block_q2_K *b = w + i;
		_mm_prefetch((const char *)(b + 4), _MM_HINT_T0);
		__m512i tables;
		__m256i mins;
		weight_prep(b, &tables, &mins);
		const __m256i prod = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)y[i].bsums));
		acc = _mm256_fmadd_ps(_mm256_set1_ps(-y[i].d * _cvtsh_ss(b->dmin)), _mm256_cvtepi32_ps(prod), acc);
		__m512i isum = _mm512_setzero_si512();
		#pragma GCC unroll 2
		for (int j = 0; j < 2; j++) {
			const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * j)));
			#pragma GCC unroll 2
			for (int p = 0; p < 4; p += 2) {
				const int g = 8 * j + 2 * p;
				const __m512i gi = _mm512_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1, g + 2, g + 2,
								     g + 2, g + 2, g + 3, g + 3, g + 3, g + 3);
				const __m512i sh = _mm512_setr_epi64(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 2, 2 * p + 2,
								     2 * p + 2, 2 * p + 2);
				const __m512i lv = _mm512_and_si512(_mm512_srlv_epi64(bits, sh), m3);
				const __m512i ls = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(gi, tables), lv);
				isum = _mm512_dpbusd_epi32(isum, ls,
							   _mm512_loadu_si512((const __m512i *)(y[i].qs + 128 * j + 32 * p)));
			}
		}
		const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
		acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * _cvtsh_ss(b->d)), _mm256_cvtepi32_ps(lanes), acc);
	}
	*s = hsum8(acc);
}
