/* kernels/cpu/tinyblas.h — the F32/F16 dot kernels in the summation order
 * of llamafile's tinyBLAS, which llama.cpp's CPU backend runs for a
 * matmul of two or more activation rows (prompt processing) where its
 * shape conditions hold; see tinyblas.c for the rule.
 *
 * llama.cpp's AVX-512 build (the one the references come from) runs
 * tinyBLAS<16, __m512>: per output one 16-lane accumulator, zero at the
 * start, FMA over k in steps of 16 (weight lane times activation lane),
 * then _mm512_reduce_add_ps as GCC defines it: upper 8 lanes onto the
 * lower 8, upper 4 onto the lower 4, then (l0 + l2) + (l1 + l3). F16
 * weights meet activations converted to f16 first (vec_dot_type F16),
 * both widened to f32 lane by lane. The avx2 table computes the same bits
 * on two 256-bit halves, as it does for ggml's vec_dot.
 *
 * A kernel takes nw (<= PG_TB_NW) consecutive weight rows (stride bw bytes)
 * against nr (<= PG_MAX_NR) activation rows (stride bx): s[r*bs + j] =
 * dot(w_j, x_r); k % 16 == 0. Several weight rows per call give the FMA
 * units independent chains, one accumulator per output being the order.
 */
#ifndef PAGODA_KERNELS_CPU_TINYBLAS_H
#define PAGODA_KERNELS_CPU_TINYBLAS_H

#include "kernels/cpu/cpu.h"

/* llama.cpp's KN for F32 and F16 on its AVX-512 build */
#define PG_TB_KN 16


void pg_tb_f32_avx512(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
		      size_t bs);
void pg_tb_f16_avx512(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
		      size_t bs);
void pg_tb_f32_avx2(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
		    size_t bs);
void pg_tb_f16_avx2(int64_t k, const void *w, size_t bw, int nw, const void *x, size_t bx, int nr, float *s,
		    size_t bs);

#endif
