/* kernels/cpu/cpu.h — what the per-ISA translation units share.
 *
 * Each ISA fills one struct pg_kern; dispatch.c picks one at run time.
 * Nothing here is part of kernels/cpu/kernels.h.
 */
#ifndef PAGODA_KERNELS_CPU_H
#define PAGODA_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/repack.h"

/* Widest tile of activation rows a gemv kernel takes in one call: each
 * weight block is decoded once and used against this many rows. */
#define PG_MAX_NR 4
/* The same for the Q4_K kernels of pg_kern.gemm8, whose per-block set-up
 * is larger */
#define PG_Q4K_PAIRS_NR 16
/* The most activation rows one pg_kern.gemm8 call takes (IQ4_XS decodes
 * each super-block of its 8 weight rows once a call) */
#define PG_GEMM8_MAX_NR 64

/* s[r*bs] = dot(w, x + r*bx) for r < nr (1 <= nr <= PG_MAX_NR); w is one
 * weight row, x rows of the weight's vec-dot type; k elements. */
typedef void (*pg_gemv_fn)(int64_t k, const void *w, const void *x, size_t bx, int nr,
			   float *s, size_t bs);
/* Eight consecutive weight rows (row stride bw bytes) against nr activation
 * rows: s[r*bs + j] = dot(w_j, x_r) for j < 8, r < nr (<= PG_MAX_NR).
 * Used for the weights that llama.cpp's CPU backend repacks 8 rows at a
 * time (Q4_0 and Q4_K with a multiple of 8 rows: q4_0_8x8, q4_K_8x8), to
 * follow the float order of its repacked kernels: per output one float
 * accumulator, one FMA per block of the block's whole integer sum. That
 * order depends on the output alone, so it holds for any m and any split
 * of the rows. */
typedef void (*pg_gemv8_fn)(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			    size_t bs);
/* nw (<= PG_TB_NW) consecutive weight rows (stride bw) against nr (<=
 * PG_MAX_NR) activation rows: s[r*bs + j] = dot(w_j, x_r), in the order
 * of llamafile's tinyBLAS (tinyblas.h). */
#define PG_TB_NW 4
typedef void (*pg_tb_fn)(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
			 size_t bs);
/* Activation conversion to the vec-dot type; identical output on every ISA. */
typedef void (*pg_from_float_fn)(const float *x, void *y, int64_t k);

struct pg_kern {
	const char *name;
	pg_gemv_fn gemv[PG_TYPE_COUNT];
	pg_gemv8_fn gemv8[PG_TYPE_COUNT]; /* weights with n % 8 == 0; NULL: gemv */
	/* The prompt rows llama.cpp gives tinyBLAS (F32, F16; IQ4_NL where not
	 * repacked), where its order differs from vec_dot's; see tinyblas.c. */
	pg_tb_fn tb[PG_TYPE_COUNT];
	pg_q4_0_x8_fn q4_0_x8;   /* PG_TYPE_Q4_0_X8 (repack.h) */
	pg_q4_0_x8_fn iq4_nl_x8; /* PG_TYPE_IQ4_NL_X8, the same layout */
	pg_gemv8_fn q8_0_s127_row; /* PG_TYPE_Q8_0_S127, one activation row; NULL: gemv8[Q8_0] */
	/* Where llama.cpp's batched kernel sums in another order than its
	 * one-row one (n % 8 == 0; Q4_K: ggml_gemm_q4_K_8x8_q8_K, for the rows
	 * its matmul takes 4 at a time; IQ4_XS: the IQ panel gemm, for
	 * matmuls of 8 rows or more): that order, up to PG_GEMM8_MAX_NR rows a
	 * call. gemv8 (or, where NULL, gemv) is the other, for the rest. */
	pg_gemv8_fn gemm8[PG_TYPE_COUNT];
	/* gemm8's order on 16 weight rows (bw apart) at once, where wider
	 * vectors pay; NULL: gemm8 twice */
	pg_gemv8_fn gemm16[PG_TYPE_COUNT];
	pg_from_float_fn from_float[PG_TYPE_COUNT]; /* indexed by vec-dot type */
	const struct pg_act_pack *act_pack[PG_TYPE_COUNT]; /* by weight type; NULL: none */
	void (*softmax)(float *x, int64_t n);
	void (*swiglu)(float *out, const float *g, const float *u, int64_t n);
	void (*f32_to_f16)(const float *x, pg_f16 *y, int64_t n);
	void (*f16_to_f32)(const pg_f16 *x, float *y, int64_t n);
	float (*dot_f16)(const pg_f16 *a, const pg_f16 *b, int64_t n);
	void (*f16_scale)(pg_f16 *acc, float s, int64_t n);
	void (*f16_fma)(pg_f16 *acc, const pg_f16 *v, float s, int64_t n);
};

extern const struct pg_kern pg_kern_scalar;
extern const struct pg_kern pg_kern_avx2;
extern const struct pg_kern pg_kern_avx512;

/* SIMD elementwise ops (ops_avx2.c, ops_avx512.c): ggml's vector expf of
 * the same width, so softmax and SwiGLU round as llama.cpp's build. */
void pg_softmax_avx2(float *x, int64_t n);
void pg_swiglu_avx2(float *out, const float *g, const float *u, int64_t n);
void pg_f32_to_f16_avx2(const float *x, pg_f16 *y, int64_t n);
void pg_f16_to_f32_avx2(const pg_f16 *x, float *y, int64_t n);
void pg_softmax_avx512(float *x, int64_t n);
void pg_swiglu_avx512(float *out, const float *g, const float *u, int64_t n);
void pg_f32_to_f16_avx512(const float *x, pg_f16 *y, int64_t n);
void pg_f16_to_f32_avx512(const pg_f16 *x, float *y, int64_t n);
void pg_f16_scale_avx2(pg_f16 *acc, float s, int64_t n);
void pg_f16_fma_avx2(pg_f16 *acc, const pg_f16 *v, float s, int64_t n);
void pg_f16_scale_avx512(pg_f16 *acc, float s, int64_t n);
void pg_f16_fma_avx512(pg_f16 *acc, const pg_f16 *v, float s, int64_t n);

/* Activations repacked for a kernel, once per matmul: rows in units of
 * `rows` (2 or 4; rows past m repeat the last one), a unit taking
 * unit_bytes(k) bytes, a multiple of `rows`. gemv8 then reads row i0 (a
 * multiple of 2 * PG_PACK_PAIRS) at x = packed + i0 * (unit_bytes / rows),
 * the stride matmul.c uses for rows, with nr up to 2 * PG_PACK_PAIRS. Only
 * for m >= 2 and weights with n % 8 == 0. */
#define PG_PACK_PAIRS 4 /* pairs per packed tile: up to 8 activation rows */
struct pg_act_pack {
	int rows;
	size_t (*unit_bytes)(int64_t k);
	void (*pack)(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t unit_stride);
	pg_gemv8_fn gemv8;
};

/* Q2_K and Q3_K against Q8_K rows on 512-bit vectors (q23_K_avx512.c):
 * Q2_K against an even number (2 or 4) of rows as they are, otherwise a
 * pg_gemv_fn; both as pg_act_pack pairs (pack shared: Q8_K rows). */
void pg_gemv_q2_K_pairs_avx512(int64_t k, const void *w, const void *x, size_t bx, int nr, float *s, size_t bs);
size_t pg_q8_K_pair_bytes_avx512(int64_t k);
void pg_q8_K_pack_pairs_avx512(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride);
void pg_gemv8_q2_K_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);
void pg_gemv_q2_K_row_avx512(int64_t k, const void *w, const void *x, float *s);
void pg_gemv8_q3_K_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);
void pg_gemv8_q5_K_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);
void pg_gemv8_q6_K_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);
/* Q8_0 on 512-bit vectors (q8_0_avx512.c): rows in pairs. */
size_t pg_q8_0_pair_bytes_avx512(int64_t k);
void pg_q8_0_pack_pairs_avx512(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride);
void pg_gemv8_q8_0_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);

/* Q4_1 and Q5_1 on 512-bit vectors (q4_1_avx512.c): Q8_1 rows in pairs. */
size_t pg_q8_1_pair_bytes_avx512(int64_t k);
void pg_q8_1_pack_pairs_avx512(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t pstride);
void pg_gemv8_q4_1_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);
void pg_gemv8_q5_1_pairs_avx512(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
				size_t bs);

/* Q8_0 on AVX2 without VNNI (q8_0_avx2.c): rows in quads, scales as floats. */
size_t pg_q8_0_quad_bytes_avx2(int64_t k);
void pg_q8_0_pack_quads_avx2(const void *xq, size_t xrow, int64_t m, int64_t k, void *dst, size_t qstride);
void pg_gemv8_q8_0_quads_avx2(int64_t k, const void *w, size_t bw, const void *x, size_t bx, int nr, float *s,
			      size_t bs);

/* Bytes from one weight row to the next as the kernels step (for the
 * 8-row layouts a group's bytes / 8); 0 for a type no kernel takes. */
size_t pg_wrow_bytes(uint32_t wtype, int64_t k);

/* The table in use (dispatch.c). */
const struct pg_kern *pg_kern_get(void);

/* Scalar pieces the SIMD tables reuse (dot_scalar.c, quant_ref.c). */
void pg_q8_0_from_float(const float *x, void *y, int64_t k);
void pg_q8_1_from_float(const float *x, void *y, int64_t k);
void pg_q8_K_from_float(const float *x, void *y, int64_t k);
void pg_bf16_from_float(const float *x, void *y, int64_t k);
void pg_f16_from_float_scalar(const float *x, void *y, int64_t k);
/* quantize_row_iq4_nl_ref: one least-squares fit a block, no tries
 * (what llama.cpp's cache writes; pg_quantize_row's IQ4_NL is the file's). */
void pg_iq4_nl_row_ref(const float *x, void *y, int64_t k);
void pg_softmax_scalar(float *x, int64_t n);
float pg_softmax_finish(float *x, int64_t n, double sum);

/* ggml's round-half-even through the float mantissa (nearest_int). */
static inline int pg_nearest_int(float f)
{
	float v = f + 12582912.f;
	int32_t i;
	__builtin_memcpy(&i, &v, 4);
	return (i & 0x007fffff) - 0x00400000;
}

static inline void pg_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
	}
}

/* The 16 scales of a Q3_K block, 6 bits each in 12 bytes: bytes 0-7 hold
 * the low 4 bits of scales 0-7 (low nibble) and 8-15 (high), bytes 8-11 the
 * top 2 bits, four scales to a byte. As 4 words of 4 scales, biased by 32
 * (the SIMD kernels take them as one vector), and as the signed scales. */
static inline void pg_q3_K_scale_words(const uint8_t packed[12], uint32_t u[4])
{
	const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
	uint32_t a[3];
	__builtin_memcpy(a, packed, 12);
	u[0] = (a[0] & m4) | (((a[2] >> 0) & m2) << 4);
	u[1] = (a[1] & m4) | (((a[2] >> 2) & m2) << 4);
	u[2] = ((a[0] >> 4) & m4) | (((a[2] >> 4) & m2) << 4);
	u[3] = ((a[1] >> 4) & m4) | (((a[2] >> 6) & m2) << 4);
}

/* The 12 packed bytes of Q4_K/Q5_K as 8 scales then 8 mins. */
static inline void pg_k4_scales(const uint8_t *packed, uint8_t out[16])
{
	uint32_t u[4];
	__builtin_memcpy(u, packed, 12);
	const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
	u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
	const uint32_t mins_lo = u[1] & m6;
	u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
	u[2] = mins_lo;
	u[0] &= m6;
	__builtin_memcpy(out, u, 16);
}

/* The signed scale of group ib of an IQ4_XS block: 6 bits, the low 4 in
 * scales_l (two groups a byte), the top 2 in scales_h, biased by 32. */
static inline int pg_iq4_xs_scale(const block_iq4_xs *b, int ib)
{
	return (((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

static inline void pg_q3_K_scales(const uint8_t packed[12], int8_t out[16])
{
	uint32_t u[4];
	pg_q3_K_scale_words(packed, u);
	__builtin_memcpy(out, u, 16);
	for (int j = 0; j < 16; j++)
		out[j] = (int8_t)(out[j] - 32);
}

#endif
