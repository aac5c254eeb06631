/* kernels/cpu/q8_0_avx2.c — Q8_0 weights against two or more activation
 * rows on AVX2 without VNNI (prefill and batched decode).
 *
 * The float order is ggml_vec_dot_q8_0_q8_0's (and tinyBLAS_Q0_AVX's) for
 * every output: eight lanes, lane g holding the integer sum of the block's
 * elements 4g..4g+3 (maddubs(|w|, sign(y, w)), then madd with ones), acc =
 * fma(dw*dy, (float)lanes, acc) block after block, then hsum_float_8. That
 * is five vector ops per block per output and the broadcast of its scale.
 * On Zen 3 the kernel is bound by the vector ops it issues (about 3.4 a
 * cycle), so the rest is taken out of the per-output work:
 *
 * - activations are packed once per matmul in quads of rows, their scales
 *   as floats, the four of a block side by side;
 * - the eight scale products dw_j*dy_r of a 2 x 4 tile are one multiply
 *   per block, stored and broadcast back, formed one block ahead into the
 *   other half of a two-slot buffer (a broadcast of a store still in
 *   flight stalls);
 * - the weight rows of the next group of 8 are prefetched block by block
 *   (batched decode reads them from memory);
 * - the full tile is one assembly loop in which the 16 registers hold the
 *   8 accumulators, w and |w| of both weight rows, ones and three
 *   temporaries (the compiler's version spills).
 * Together about 2.4 cycles per block pair on cached rows (bench/mm_kernel),
 * against a floor of 2.0 for ggml's ops alone (bench/q8_0_floor.c); 2 x 4
 * tiles beat 1 x 4, 1 x 8, 2 x 3 and 4 x 2 there.
 *
 * Packed quad (stride 4 * nb * 36 bytes; rows past m repeat the last row):
 *   Y: four rows of nb blocks of 32 quants, row after row;
 *   D: nb times the four rows' dy (floats).
 */
#include <immintrin.h>

#include "kernels/cpu/cpu.h"

#define AI static inline __attribute__((always_inline))

#define WB(w, bw, j) ((const block_q8_0 *)((const char *)(w) + (size_t)(j) * (bw)))

/* Bytes of one packed row's share: 32 quants and a float per block. */
AI size_t row_bytes(int64_t nb)
{
	return (size_t)nb * 36;
}

size_t pg_q8_0_quad_bytes_avx2(int64_t k)
{
	return 4 * row_bytes(k / QK8_0);
}

void pg_q8_0_pack_quads_avx2(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t qstride)
{
	const int64_t nb = k / QK8_0;
	for (int64_t q = 0; q < (m + 3) / 4; q++) {
		char *base = (char *)dst + (size_t)q * qstride;
		float *d = (float *)(base + 4 * (size_t)nb * 32);
		for (int h = 0; h < 4; h++) {
			const int64_t r = 4 * q + h < m ? 4 * q + h : m - 1;
			const block_q8_0 *a = (const block_q8_0 *)((const char *)xq + (size_t)r * xrow);
			char *y = base + (size_t)h * nb * 32;
			for (int64_t i = 0; i < nb; i++) {
				_mm256_storeu_si256((__m256i *)(y + 32 * i),
						    _mm256_loadu_si256((const __m256i *)a[i].qs));
				d[4 * i + h] = _cvtsh_ss(a[i].d);
			}
		}
	}
}

AI float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* The eight scale products of a 2 x 4 tile at block i: pr[4 j + r] = dw_j * dy_r. */
AI void products(const block_q8_0 *b0, const block_q8_0 *b1, const float *D, int64_t i, float *pr)
{
	const __m128i dh = _mm_blend_epi32(_mm_set1_epi16((short)b0[i].d), _mm_set1_epi16((short)b1[i].d), 0xc);
	const __m256 dw = _mm256_cvtph_ps(dh);
	_mm256_store_ps(pr, _mm256_mul_ps(dw, _mm256_broadcast_ps((const __m128 *)(D + 4 * i))));
}

/* ymm0-3: rows 0-3 against weight row 0, ymm4-7: against weight row 1;
 * ymm8/9: w, ymm10/11: |w|, ymm12: ones, ymm13: y, ymm14: lanes, ymm15: scale. */
#define Q8_PAIR(OFF, Q, A, C)                                 \
	"vpsignb %%" Q ", %%ymm13, %%ymm14\n\t"               \
	"vpmaddubsw %%ymm14, %%" A ", %%ymm14\n\t"            \
	"vpmaddwd %%ymm12, %%ymm14, %%ymm14\n\t"              \
	"vcvtdq2ps %%ymm14, %%ymm14\n\t"                      \
	"vbroadcastss " #OFF "(%[pp]), %%ymm15\n\t"           \
	"vfmadd231ps %%ymm14, %%ymm15, %%" C "\n\t"
#define Q8_ROW(YADDR, R, C0, C1)                              \
	"vmovdqu " YADDR ", %%ymm13\n\t"                      \
	Q8_PAIR(R * 4, "ymm8", "ymm10", C0) Q8_PAIR(16 + R * 4, "ymm9", "ymm11", C1)
#define Q8_BLOCK                                              \
	"prefetcht0 (%[pf])\n\t"                              \
	"prefetcht0 (%[pf],%[bw],1)\n\t"                      \
	"vmovdqu 2(%[wp]), %%ymm8\n\t"                        \
	"vmovdqu 2(%[wp],%[bw],1), %%ymm9\n\t"                \
	"vpabsb %%ymm8, %%ymm10\n\t"                          \
	"vpabsb %%ymm9, %%ymm11\n\t"                          \
	Q8_ROW("(%[yp])", 0, "ymm0", "ymm4")                  \
	Q8_ROW("(%[yp],%[ys],1)", 1, "ymm1", "ymm5")          \
	Q8_ROW("(%[yp],%[ys],2)", 2, "ymm2", "ymm6")          \
	Q8_ROW("(%[yp],%[ys3],1)", 3, "ymm3", "ymm7")
/* products() of the next block into pn, in the registers free at the top */
#define Q8_NEXT                                               \
	"vpbroadcastw 34(%[wp]), %%xmm13\n\t"                 \
	"vpbroadcastw 34(%[wp],%[bw],1), %%xmm14\n\t"         \
	"vpblendd $0xc, %%xmm14, %%xmm13, %%xmm13\n\t"        \
	"vcvtph2ps %%xmm13, %%ymm13\n\t"                      \
	"vbroadcastf128 16(%[dp]), %%ymm14\n\t"               \
	"vmulps %%ymm14, %%ymm13, %%ymm13\n\t"                \
	"vmovaps %%ymm13, (%[pn])\n\t"

/* Weight rows w, w + bw against the four rows of the quad at x. */
static void tile_2x4(int64_t nb, const block_q8_0 *w, size_t bw, const char *x, float *s, size_t bs)
{
	static const short ones[16] __attribute__((aligned(32))) = { 1, 1, 1, 1, 1, 1, 1, 1,
								     1, 1, 1, 1, 1, 1, 1, 1 };
	const float *D = (const float *)(x + 4 * (size_t)nb * 32);
	const size_t ys = (size_t)nb * 32, ys3 = 3 * ys;
	float pr[16] __attribute__((aligned(32)));
	__m256 acc[8] __attribute__((aligned(32)));
	products(w, WB(w, bw, 1), D, 0, pr);
	const char *wp = (const char *)w, *yp = x, *pf = wp + 8 * bw;
	const float *dp = D;
	float *pp = pr, *pn = pr + 8;
	int64_t n = nb - 1; /* blocks with a next one; the last runs after the loop */
	__asm__ volatile("vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
			 "vmovaps %%ymm0, %%ymm1\n\t"
			 "vmovaps %%ymm0, %%ymm2\n\t"
			 "vmovaps %%ymm0, %%ymm3\n\t"
			 "vmovaps %%ymm0, %%ymm4\n\t"
			 "vmovaps %%ymm0, %%ymm5\n\t"
			 "vmovaps %%ymm0, %%ymm6\n\t"
			 "vmovaps %%ymm0, %%ymm7\n\t"
			 "vmovdqa (%[ones]), %%ymm12\n\t"
			 "test %[n], %[n]\n\t"
			 "jz 2f\n\t"
			 "1:\n\t" Q8_NEXT Q8_BLOCK
			 "add $34, %[wp]\n\t"
			 "add $34, %[pf]\n\t"
			 "add $32, %[yp]\n\t"
			 "add $16, %[dp]\n\t"
			 "xchg %[pp], %[pn]\n\t"
			 "dec %[n]\n\t"
			 "jnz 1b\n\t"
			 "2:\n\t" Q8_BLOCK
			 "vmovaps %%ymm0, 0(%[acc])\n\t"
			 "vmovaps %%ymm1, 32(%[acc])\n\t"
			 "vmovaps %%ymm2, 64(%[acc])\n\t"
			 "vmovaps %%ymm3, 96(%[acc])\n\t"
			 "vmovaps %%ymm4, 128(%[acc])\n\t"
			 "vmovaps %%ymm5, 160(%[acc])\n\t"
			 "vmovaps %%ymm6, 192(%[acc])\n\t"
			 "vmovaps %%ymm7, 224(%[acc])\n\t"
			 : [wp] "+r"(wp), [pf] "+r"(pf), [yp] "+r"(yp), [dp] "+r"(dp), [pp] "+r"(pp), [pn] "+r"(pn),
			   [n] "+r"(n)
			 : [acc] "r"(acc), [ones] "r"(ones), [bw] "r"(bw), [ys] "r"(ys), [ys3] "r"(ys3)
			 : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
			   "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
	for (int r = 0; r < 4; r++) {
		s[(size_t)r * bs] = hsum8(acc[r]);
		s[(size_t)r * bs + 1] = hsum8(acc[4 + r]);
	}
}

#undef Q8_NEXT
#undef Q8_BLOCK
#undef Q8_ROW
#undef Q8_PAIR

/* The same for the last NR < 4 rows of a matmul (the quad's padding rows
 * are not computed). */
AI void tile_tail(int64_t nb, const block_q8_0 *w, size_t bw, const char *x, const int NR, float *s, size_t bs)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const float *D = (const float *)(x + 4 * (size_t)nb * 32);
	const block_q8_0 *w1 = WB(w, bw, 1);
	float prod[16] __attribute__((aligned(32)));
	__m256 acc[2][3];
	for (int r = 0; r < NR; r++)
		acc[0][r] = acc[1][r] = _mm256_setzero_ps();
	products(w, w1, D, 0, prod);
	for (int64_t i = 0; i < nb; i++) {
		const float *pr = prod + 8 * (i & 1);
		if (i + 1 < nb) /* a block ahead, as in tile_2x4 */
			products(w, w1, D, i + 1, prod + 8 * ((i + 1) & 1));
		const __m256i q0 = _mm256_loadu_si256((const __m256i *)w[i].qs);
		const __m256i q1 = _mm256_loadu_si256((const __m256i *)w1[i].qs);
		const __m256i a0 = _mm256_sign_epi8(q0, q0), a1 = _mm256_sign_epi8(q1, q1);
		for (int r = 0; r < NR; r++) {
			const __m256i y = _mm256_loadu_si256((const __m256i *)(x + (size_t)r * nb * 32 + 32 * i));
			const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(y, q0)), ones);
			const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(y, q1)), ones);
			acc[0][r] = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + r), _mm256_cvtepi32_ps(p0), acc[0][r]);
			acc[1][r] = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + 4 + r), _mm256_cvtepi32_ps(p1), acc[1][r]);
		}
	}
	for (int r = 0; r < NR; r++) {
		s[(size_t)r * bs] = hsum8(acc[0][r]);
		s[(size_t)r * bs + 1] = hsum8(acc[1][r]);
	}
}

/* pg_gemv8_fn over packed quads: x is a quad's first row (row stride bx,
 * nr <= 2 * PG_PACK_PAIRS). */
void pg_gemv8_q8_0_quads_avx2(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			      size_t bs)
{
	const int64_t nb = k / QK8_0;
	for (int r0 = 0; r0 < nr; r0 += 4) {
		const char *xr = (const char *)x + (size_t)r0 * bx;
		float *sr = s + (size_t)r0 * bs;
		for (int j0 = 0; j0 < 8; j0 += 2) {
			const block_q8_0 *wj = WB(w, bw, j0);
			switch (nr - r0) {
			case 1: tile_tail(nb, wj, bw, xr, 1, sr + j0, bs); break;
			case 2: tile_tail(nb, wj, bw, xr, 2, sr + j0, bs); break;
			case 3: tile_tail(nb, wj, bw, xr, 3, sr + j0, bs); break;
			default: tile_2x4(nb, wj, bw, xr, sr + j0, bs); break;
			}
		}
	}
}
