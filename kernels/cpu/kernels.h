/* kernels/cpu/kernels.h — the CPU kernels: what the CPU backend
 * (kernels/cpu/cpu_backend.c) runs a model with, and what the kernel tests,
 * tools and benchmarks call directly. The engine never sees them: it goes
 * through kernels/pg_backend.h.
 *
 * Numerics follow ggml's CPU backend (llama.cpp built for x86 with AVX2 or
 * AVX-512): a matmul converts the f32 activations to the weight type's
 * "vec-dot type" exactly as ggml does (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
 * Q4_1/Q5_1, Q8_K for the K-quants, f16/bf16 rounding for F16/BF16), then
 * takes dot products of those quantized values with ggml's scale formulas.
 * Only the order of floating-point summation may differ from ggml.
 */
#ifndef PAGODA_KERNELS_CPU_KERNELS_H
#define PAGODA_KERNELS_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

/* ---- thread pool ---------------------------------------------------------- */
struct pg_pool;
/* nthreads <= 0: all online cores. Returns NULL on failure. */
struct pg_pool *pg_pool_create(int nthreads);
void pg_pool_destroy(struct pg_pool *p);
int pg_pool_size(const struct pg_pool *p);
/* Runs fn(arg, ith, nth) on every pool thread (the caller is thread 0) and
 * returns when all are done. Idle workers spin briefly, then sleep on a
 * futex. Calls from several threads are serialized. p == NULL runs
 * fn(arg, 0, 1) on the caller. */
void pg_pool_run(struct pg_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* ---- matmul --------------------------------------------------------------- */
/* Y[i][j] = sum_k X[i][k] * W[j][k] for i<m, j<n. W: n rows of type wtype,
 * each pg_row_size(wtype,k) bytes, contiguous. X: m x k f32 row-major.
 * Y: m x n f32 with row stride ldy (>= n). p may be NULL (one thread).
 * k must be a whole number of wtype's blocks. */
void pg_matmul(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k,
	       const float *X, int64_t m, float *Y, int64_t ldy);
/* Same, with activations already converted by pg_quantize_act (row stride
 * pg_act_row_size(wtype,k) bytes): lets a caller quantize once and feed
 * several matmuls of the same weight type (Q, K, V; gate, up). */
void pg_matmul_q(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k,
		 const void *Xq, int64_t m, float *Y, int64_t ldy);
/* Several weights (same type, k columns each) against the same X: outs[i]
 * gets Y = X · W_iᵀ, exactly as pg_matmul would give it, with X converted
 * once and all of them in one pool run (Q/K/V, gate/up). */
struct pg_mm_out {
	const void *W;
	uint32_t wtype;
	int64_t n;
	float *Y;
	int64_t ldy;
};
void pg_matmul_many(struct pg_pool *p, const struct pg_mm_out *outs, int count, int64_t k, const float *X,
		    int64_t m);
/* Same as pg_matmul, except that an activation row i with tb[i] set is
 * summed in the order of llama.cpp's batched kernel for this weight, where
 * it has one that rounds differently from its one-row kernel:
 *  - F32/F16 (suitable shape, SIMD tables): llamafile_sgemm (tinyBLAS),
 *    which llama.cpp takes for every row of a ubatch of two or more rows;
 *  - Q4_K with n % 8 == 0: the repacked gemm, which llama.cpp takes for the
 *    first rows - rows % 4 of the rows the matmul sees.
 * The caller knows llama.cpp's ubatch and sets tb[i] accordingly (see
 * pg_matmul_tb_applies for the weights where it matters). tb may be NULL. */
void pg_matmul_tb(struct pg_pool *p, const void *W, uint32_t wtype, int64_t n, int64_t k,
		  const float *X, int64_t m, float *Y, int64_t ldy, const bool *tb);
/* Whether pg_matmul_tb's flags change anything for this weight shape. */
bool pg_matmul_tb_applies(uint32_t wtype, int64_t n, int64_t k);
/* The type activations are converted to for a weight of type wtype
 * (ggml's vec_dot_type), its row size, and the conversion itself (the
 * same on every ISA, bit for bit). */
uint32_t pg_vec_dot_type(uint32_t wtype);
size_t pg_act_row_size(uint32_t wtype, int64_t k);
void pg_quantize_act(uint32_t wtype, const float *x, void *dst, int64_t k);

bool pg_type_supported(uint32_t type);
/* k a multiple of the type's block. */
void pg_dequant_row(uint32_t type, const void *src, float *dst, int64_t k);
/* ggml's reference quantizers (*_ref): F32, F16, BF16, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, Q8_1, Q8_K, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Returns bytes
 * written, 0 if the type is not supported or k is not a whole number of
 * blocks. */
size_t pg_quantize_row(uint32_t type, const float *src, void *dst, int64_t k);

/* ---- ISA ------------------------------------------------------------------ */
/* "avx512", "avx2" or "scalar". PAGODA_ISA=scalar|avx2|avx512 caps it. */
const char *pg_cpu_isa(void);
/* Forces an ISA no higher than the CPU has; false if the CPU lacks it or
 * the name is unknown. Not for use while other threads compute. */
bool pg_cpu_set_isa(const char *name);
/* How decode's Q4_0 and IQ4_NL kernels fetch ahead: "lines", "pages", or
 * "auto" (timed as decode runs; kernels/cpu/pf_tune.h).
 * PAGODA_PREFETCH=lines|pages|auto sets it at start. False for an unknown
 * name. */
bool pg_cpu_set_prefetch(const char *name);

/* ---- elementwise, with ggml's numerics ------------------------------------ */
/* Sum of squares in double, scale = 1/sqrtf(mean+eps), y = (x*scale)*w. */
void pg_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* In place: x - max, exp, sum in double, scale by 1/sum (ggml_soft_max).
 * exp is ggml's vector approximation on the SIMD ISAs, as ggml on x86. */
void pg_softmax(float *x, int64_t n);
/* out = silu(gate) * up, silu(x) = x/(1+exp(-x)) (ggml_vec_swiglu_f32). */
void pg_swiglu(float *out, const float *gate, const float *up, int64_t n);
void pg_f32_to_f16_row(const float *x, pg_f16 *y, int64_t n);
void pg_f16_to_f32_row(const pg_f16 *x, float *y, int64_t n);
/* dot of two f16 rows, f32 products and accumulation (ggml_vec_dot_f16). */
float pg_dot_f16(const pg_f16 *a, const pg_f16 *b, int64_t n);
/* An f16 accumulator row, updated element by element with one rounding to
 * f16 per step (ggml's flash attention on an f16 V cache):
 *   pg_f16_scale_row: acc[i] = f16(f32(acc[i]) * s)
 *   pg_f16_fma_row:   acc[i] = f16(fmaf(f32(v[i]), s, f32(acc[i])))
 * The same bits on every ISA. */
void pg_f16_scale_row(pg_f16 *acc, float s, int64_t n);
void pg_f16_fma_row(pg_f16 *acc, const pg_f16 *v, float s, int64_t n);

/* ---- attention: ggml's CPU flash attention on an f16 KV cache ----------- */
/* One KV head of one sequence: position p's K row starts at
 * k[p / block_size] + (p % block_size) * stride, likewise V. */
struct pg_attn_kv {
	const pg_f16 *const *k, *const *v;
	int block_size;
	size_t stride; /* elements between two positions of a block */
};
/* ggml_compute_forward_flash_attn_ext_f16_one_chunk, what llama.cpp runs
 * for a ubatch of fewer than 64 tokens: n_q query rows (f32, rounded to
 * f16 here) that all attend positions [0, n_pos), hd = DK = DV. Online
 * softmax per position with libm expf, V sum kept in f16. out: n_q rows. */
void pg_attn_chunk(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		   int n_q, float *out, size_t ldo);
/* ggml_compute_forward_flash_attn_ext_tiled, what llama.cpp runs for a
 * ubatch of 64 tokens or more: the query stays f32, KV tiles of 64
 * positions from 0, q·k and the V sum in f32 by FMA, the softmax with the
 * ISA's vector expf. Row r attends positions [0, n_pos[r]). work: at
 * least pg_attn_tiled_work(hd, n_q) floats, 64-byte aligned. */
void pg_attn_tiled(const struct pg_attn_kv *kv, const int *n_pos, int hd, float scale, const float *q,
		   size_t ldq, int n_q, float *out, size_t ldo, float *work);
size_t pg_attn_tiled_work(int hd, int n_q);
/* Whether llama.cpp built for the active ISA would take the tiled path
 * for this head size (DV a whole number of its f32 vectors). */
bool pg_attn_tiled_ok(int hd);

/* ---- a quantized KV cache ------------------------------------------------ */
/* One K or V row of n elements as llama.cpp writes it into a cache of
 * type (a pg_kv_type_ok type; n a whole number of its blocks). */
void pg_kv_store_row(uint32_t type, const float *x, void *dst, int64_t n);
/* x[0, len) in chunks of n (a power of two), each replaced by its
 * normalized Walsh-Hadamard transform as ggml's CPU backend computes
 * llama.cpp's Hadamard rotation (ggml_compute_forward_fwht): times
 * 1/sqrtf(n), then butterflies u + v, u - v of span 1, 2, ... n/2. Its
 * own inverse up to rounding. The same bits on every ISA. */
void pg_kv_rotate(float *x, int64_t len, int n);
/* One KV head of one sequence in a cache of any pg_kv_type_ok types:
 * position p's K row starts at k[p / block_size] + (p % block_size) *
 * k_stride bytes, likewise V. */
struct pg_attn_kvq {
	const uint8_t *const *k, *const *v;
	uint32_t type_k, type_v;
	int block_size;
	size_t k_stride, v_stride; /* bytes between two positions of a block */
};
/* ggml_compute_forward_flash_attn_ext_f16_one_chunk when K or V is not f16,
 * which llama.cpp then runs for every ubatch (its tiled path takes f16
 * alone): each query row converted to K's vec-dot type (Q8_0 for Q8_0,
 * Q4_0, Q5_0, IQ4_NL; Q8_1 for Q4_1, Q5_1; f16 for F16), one vec_dot per
 * position, online softmax with libm expf; an f16 V summed in f16 as
 * pg_attn_chunk does, a quantized one dequantized to f32 and summed in
 * f32, one FMA an element. The same bits on every ISA. hd <=
 * PG_ATTN_MAX_HD (attn.h, 512), a whole number of each type's blocks. */
void pg_attn_chunk_q(const struct pg_attn_kvq *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		     int n_q, float *out, size_t ldo);

#endif
