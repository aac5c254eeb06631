/* kernels/cuda/test_api.cu — cuda_test.h: one kernel at a time on host
 * data, so that tests/gpu compares each against the CPU reference. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_test.h"
#include "kernels/cuda/kern.h"
#include "kernels/types.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

static char g_err[256];

EXPORT const char *pgcu_test_error(void)
{
	return g_err;
}

/* Device buffers of one call, freed together. */
struct bufs {
	void *p[16];
	int n;
	cudaError_t e;
};

static void *up(struct bufs *b, const void *host, size_t bytes)
{
	void *d = NULL;
	if (b->e != cudaSuccess || b->n == 16)
		return NULL;
	if ((b->e = cudaMalloc(&d, bytes ? bytes : 1)) != cudaSuccess)
		return NULL;
	b->p[b->n++] = d;
	if (host)
		b->e = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
	else
		b->e = cudaMemset(d, 0, bytes);
	return d;
}

static int done(struct bufs *b, void *host, const void *dev, size_t bytes)
{
	if (b->e == cudaSuccess)
		b->e = cudaGetLastError();
	if (b->e == cudaSuccess)
		b->e = cudaDeviceSynchronize();
	if (b->e == cudaSuccess && host)
		b->e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
	for (int i = 0; i < b->n; i++)
		cudaFree(b->p[i]);
	if (b->e != cudaSuccess) {
		snprintf(g_err, sizeof g_err, "%s", cudaGetErrorString(b->e));
		return -1;
	}
	return 0;
}

EXPORT int pgcu_test_matmul(int path, uint32_t type, const void *W, int64_t n, int64_t k, const float *X, int64_t m,
			    float *Y)
{
	const size_t rb = pg_row_size(type, (uint64_t)k);
	if (!pgcu_type_ok(type) || rb == 0) {
		snprintf(g_err, sizeof g_err, "type %u, %lld columns: not read on the device", type, (long long)k);
		return -1;
	}
	struct bufs b = {};
	const void *dw = up(&b, W, rb * n);
	const float *dx = (const float *)up(&b, X, sizeof(float) * m * k);
	float *dy = (float *)up(&b, NULL, sizeof(float) * m * n);
	if (b.e == cudaSuccess) {
		if (path == 1)
			pgcu_gemv(0, type, dw, rb, n, k, dx, m, dy, n);
		else if (path == 2)
			pgcu_gemm(0, type, dw, rb, n, k, dx, m, dy, n);
		else
			pgcu_matmul(0, type, dw, rb, n, k, dx, m, dy, n);
	}
	return done(&b, Y, dy, sizeof(float) * m * n);
}

EXPORT int pgcu_test_embed(uint32_t type, const void *W, int64_t rows, int64_t k, const int32_t *tok, int n,
			   float *out)
{
	const size_t rb = pg_row_size(type, (uint64_t)k);
	if (!pgcu_type_ok(type) || rb == 0) {
		snprintf(g_err, sizeof g_err, "type %u: not read on the device", type);
		return -1;
	}
	struct bufs b = {};
	const void *dw = up(&b, W, rb * rows);
	const int32_t *dt = (const int32_t *)up(&b, tok, sizeof(int32_t) * n);
	float *dy = (float *)up(&b, NULL, sizeof(float) * n * k);
	if (b.e == cudaSuccess)
		pgcu_embed(0, type, dw, rb, k, dt, n, dy);
	return done(&b, out, dy, sizeof(float) * n * k);
}

EXPORT int pgcu_test_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y)
{
	struct bufs b = {};
	const float *dx = (const float *)up(&b, x, sizeof(float) * rows * n);
	const float *dw = (const float *)up(&b, w, sizeof(float) * n);
	float *dy = (float *)up(&b, NULL, sizeof(float) * rows * n);
	if (b.e == cudaSuccess)
		pgcu_rmsnorm(0, dy, dx, dw, rows, n, eps);
	return done(&b, y, dy, sizeof(float) * rows * n);
}

EXPORT int pgcu_test_swiglu(const float *g, const float *u, int64_t n, float *out)
{
	struct bufs b = {};
	float *dg = (float *)up(&b, g, sizeof(float) * n);
	const float *du = (const float *)up(&b, u, sizeof(float) * n);
	if (b.e == cudaSuccess)
		pgcu_swiglu(0, dg, du, n);
	return done(&b, out, dg, sizeof(float) * n);
}

EXPORT int pgcu_test_rope(int rope_dim, int hd, int neox, float base, float freq_scale, const float *freqs,
			  float *x, int n_heads, const int32_t *pos, int n_tokens)
{
	struct bufs b = {};
	const size_t xn = (size_t)n_tokens * n_heads * hd;
	float *dx = (float *)up(&b, x, sizeof(float) * xn);
	const int32_t *dp = (const int32_t *)up(&b, pos, sizeof(int32_t) * n_tokens);
	struct pgcu_rope_args a = { rope_dim, hd, neox, powf(base, -2.0f / rope_dim), freq_scale, NULL };
	if (freqs)
		a.freqs = (const float *)up(&b, freqs, sizeof(float) * rope_dim / 2);
	if (b.e == cudaSuccess)
		pgcu_rope(0, &a, dx, n_heads * hd, n_heads, dp, n_tokens);
	return done(&b, x, dx, sizeof(float) * xn);
}

EXPORT int pgcu_test_attn(int n_head, int n_head_kv, int hd, int bs, int n_pos, const float *k, const float *v,
			  const float *q, const int32_t *pos, int n_tokens, int split_len, float *out)
{
	if (hd > PGCU_ATTN_MAX_HD || n_head % n_head_kv || split_len < 0 || n_pos > 65536 || n_tokens > 65536) {
		snprintf(g_err, sizeof g_err, "bad attention shape");
		return -1;
	}
	const int kvd = n_head_kv * hd, qd = n_head * hd, n_layer = 2;
	const int nb = (n_pos + bs - 1) / bs;
	static int32_t table[65536];
	static int32_t seq0[65536], wpos[65536];
	for (int i = 0; i < nb; i++)
		table[i] = nb - 1 - i;
	for (int i = 0; i < n_pos; i++) {
		seq0[i] = 0;
		wpos[i] = i;
	}
	int max_pos = 0;
	for (int t = 0; t < n_tokens; t++)
		if (pos[t] + 1 > max_pos)
			max_pos = pos[t] + 1;
	const int n_splits = split_len ? (max_pos + split_len - 1) / split_len : 1;
	static int32_t tiles[2 * 65536];
	int n_tiles = 0;
	for (int t = 0; t < n_tokens; t += PGCU_PF_Q) {
		tiles[2 * n_tiles] = t;
		tiles[2 * n_tiles + 1] = n_tokens - t < PGCU_PF_Q ? n_tokens - t : PGCU_PF_Q;
		n_tiles++;
	}
	struct bufs b = {};
	const size_t block_elems = 2 * (size_t)n_layer * bs * kvd;
	struct pgcu_kv kv = { (__half *)up(&b, NULL, sizeof(__half) * block_elems * nb),
			      block_elems,
			      (size_t)n_layer * bs * kvd,
			      bs,
			      kvd,
			      n_layer,
			      (const int32_t *)up(&b, table, sizeof(int32_t) * nb),
			      nb };
	const float *dk = (const float *)up(&b, k, sizeof(float) * n_pos * kvd);
	const float *dv = (const float *)up(&b, v, sizeof(float) * n_pos * kvd);
	const int32_t *dseq = (const int32_t *)up(&b, seq0, sizeof(int32_t) * (n_pos > n_tokens ? n_pos : n_tokens));
	const int32_t *dwpos = (const int32_t *)up(&b, wpos, sizeof(int32_t) * n_pos);
	const float *dq = (const float *)up(&b, q, sizeof(float) * n_tokens * qd);
	const int32_t *dpos = (const int32_t *)up(&b, pos, sizeof(int32_t) * n_tokens);
	float *part = (float *)up(&b, NULL, sizeof(float) * n_tokens * n_head * n_splits * (hd + 2));
	float *dout = (float *)up(&b, NULL, sizeof(float) * n_tokens * qd);
	const int32_t *dtiles = (const int32_t *)up(&b, tiles, sizeof(int32_t) * 2 * n_tiles);
	if (b.e == cudaSuccess) {
		pgcu_kv_write(0, &kv, 1, dk, dv, dwpos, dseq, n_pos);
		const struct pgcu_attn_args a = { n_head, n_head_kv, hd, 1, 1.0f / sqrtf((float)hd), split_len, n_splits };
		if (split_len)
			pgcu_attn(0, &kv, &a, dq, qd, dpos, dseq, n_tokens, part, dout, qd);
		else
			pgcu_attn_prefill(0, &kv, &a, dq, qd, dpos, dseq, dtiles, n_tiles, dout, qd);
	}
	return done(&b, out, dout, sizeof(float) * n_tokens * qd);
}

EXPORT int pgcu_test_argmax(const float *x, int rows, int n, int32_t *ids)
{
	struct bufs b = {};
	const float *dx = (const float *)up(&b, x, sizeof(float) * rows * n);
	int32_t *di = (int32_t *)up(&b, NULL, sizeof(int32_t) * rows);
	if (b.e == cudaSuccess)
		pgcu_argmax(0, dx, rows, n, di);
	return done(&b, ids, di, sizeof(int32_t) * rows);
}
