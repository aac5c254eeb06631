/* kernels/cuda/kern.h — the CUDA kernels' launchers, as the backend
 * (backend.cu) and the test entry points (test_api.cu) call them. Every
 * pointer is device memory unless named host; every launcher enqueues on
 * st and returns without waiting. Internal to kernels/cuda/. */
#ifndef PAGODA_KERNELS_CUDA_KERN_H
#define PAGODA_KERNELS_CUDA_KERN_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Weight types the device reads (matrices and the token embedding). */
bool pgcu_type_ok(uint32_t type);

/* out[i] = row tokens[i] of W (rows of k elements of type), as f32. */
void pgcu_embed(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t k,
		const int32_t *tokens, int n, float *out);

/* Y[i][j] = sum_k X[i][k] W[j][k], i < m, j < n; Y row stride ldy.
 * m <= PGCU_GEMV_MAX_M and k % 32 == 0: one warp per weight row with f32
 * activations (decode); else f16 tensor-core tiles (wmma) with the weight
 * dequantized into shared memory. */
#define PGCU_GEMV_MAX_M 8
void pgcu_matmul(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t n, int64_t k,
		 const float *X, int64_t m, float *Y, int64_t ldy);
/* The two paths, for tests. */
void pgcu_gemv(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t n, int64_t k,
	       const float *X, int64_t m, float *Y, int64_t ldy);
void pgcu_gemm(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t n, int64_t k,
	       const float *X, int64_t m, float *Y, int64_t ldy);

/* Rows of n: y = x / sqrt(mean(x^2) + eps) * w. */
void pgcu_rmsnorm(cudaStream_t st, float *y, const float *x, const float *w, int rows, int n, float eps);
/* y[i] += x[i] */
void pgcu_add(cudaStream_t st, float *y, const float *x, int64_t n);
/* y[r][i] += b[i] for rows of dim */
void pgcu_bias(cudaStream_t st, float *y, const float *b, int rows, int dim);
/* g[i] = silu(g[i]) * u[i] */
void pgcu_swiglu(cudaStream_t st, float *g, const float *u, int64_t n);
/* dst[i] = src[idx[i]] rows of dim */
void pgcu_gather(cudaStream_t st, float *dst, const float *src, const int32_t *idx, int rows, int dim);

/* RoPE in place on x (rows of ld floats, n_heads heads of hd each) for
 * token t at position pos[t]: theta_i = pos * theta_scale^i, freq_scale *
 * theta_i / freqs[i] (freqs may be NULL), as ggml_rope_ext. */
struct pgcu_rope_args {
	int rope_dim, hd, neox;
	float theta_scale, freq_scale;
	const float *freqs;
};
void pgcu_rope(cudaStream_t st, const struct pgcu_rope_args *a, float *x, int ld, int n_heads,
	       const int32_t *pos, int n_tokens);

/* The paged KV cache: block b, layer l, slot j, K row at
 * pool + b*block_elems + l*bs*kv_dim + j*kv_dim, V row v_off further. A
 * token's block table is bt + seq[t]*max_bps. */
struct pgcu_kv {
	__half *pool;
	size_t block_elems, v_off;
	int bs, kv_dim, n_layer;
	const int32_t *bt;
	int max_bps;
};
/* K and V rows of token t (f32, kv_dim each) at position pos[t], f16. */
void pgcu_kv_write(cudaStream_t st, const struct pgcu_kv *kv, int layer, const float *k, const float *v,
		   const int32_t *pos, const int32_t *seq, int n_tokens);

/* Causal attention of token t's query heads over positions [0, pos[t]]
 * of its sequence, read from the pool. The context is cut in n_splits
 * slices of split_len positions, each reduced with an online softmax
 * (flash-decoding), then merged; part holds n_tokens*n_head*n_splits*
 * (hd+2) floats. */
struct pgcu_attn_args {
	int n_head, n_head_kv, hd, layer;
	float scale;
	int split_len, n_splits;
};
#define PGCU_ATTN_MAX_HD 256
void pgcu_attn(cudaStream_t st, const struct pgcu_kv *kv, const struct pgcu_attn_args *a, const float *q,
	       int ldq, const int32_t *pos, const int32_t *seq, int n_tokens, float *part, float *out, int ldo);

/* The same attention for prompts: tiles[2i], tiles[2i+1] are the first
 * token and the count (<= PGCU_PF_Q) of a run of one sequence's tokens,
 * which share each K/V tile read from the pool. */
#define PGCU_PF_Q 16
void pgcu_attn_prefill(cudaStream_t st, const struct pgcu_kv *kv, const struct pgcu_attn_args *a, const float *q,
		       int ldq, const int32_t *pos, const int32_t *seq, const int32_t *tiles, int n_tiles, float *out,
		       int ldo);

/* ids[r] = the first index of row r's maximum. */
void pgcu_argmax(cudaStream_t st, const float *x, int rows, int n, int32_t *ids);

#endif
