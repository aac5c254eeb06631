/* kernels/cuda/cuda_test.h — entry points of libpagoda-cuda.so that run
 * one kernel on host data, for tests/gpu/test_cuda.c (looked up with
 * dlsym; the engine never calls them). Each returns 0, or -1 with the
 * reason in pgcu_test_error(). Pointers are host memory. */
#ifndef PAGODA_KERNELS_CUDA_TEST_H
#define PAGODA_KERNELS_CUDA_TEST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char *pgcu_test_error(void);
/* Y (m x n) = X (m x k) times W (n rows of k, ggml layout)^T; path: 0 as
 * the backend picks, 1 the GEMV, 2 the tensor-core tiles. */
int pgcu_test_matmul(int path, uint32_t type, const void *W, int64_t n, int64_t k, const float *X, int64_t m,
		     float *Y);
/* out (n x k) = rows tok[] of W (rows x k) as f32. */
int pgcu_test_embed(uint32_t type, const void *W, int64_t rows, int64_t k, const int32_t *tok, int n, float *out);
int pgcu_test_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y);
/* out = silu(g) * u */
int pgcu_test_swiglu(const float *g, const float *u, int64_t n, float *out);
/* x: n_tokens rows of n_heads*hd, rotated in place; freqs: rope_dim/2 or NULL. */
int pgcu_test_rope(int rope_dim, int hd, int neox, float base, float freq_scale, const float *freqs, float *x,
		   int n_heads, const int32_t *pos, int n_tokens);
/* One sequence of n_pos positions, K and V (f32, n_pos x n_head_kv*hd)
 * written to a paged pool of blocks of bs positions (the table in reverse
 * order, layer 1 of 2) by the KV-write kernel; then each query row t
 * (n_head*hd) attends positions [0, pos[t]] in slices of split_len (the
 * decode kernel), or, with split_len 0, through the prompt kernel's tiles. */
int pgcu_test_attn(int n_head, int n_head_kv, int hd, int bs, int n_pos, const float *k, const float *v,
		   const float *q, const int32_t *pos, int n_tokens, int split_len, float *out);
int pgcu_test_argmax(const float *x, int rows, int n, int32_t *ids);

#ifdef __cplusplus
}
#endif

#endif
