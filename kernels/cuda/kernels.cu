/* kernels/cuda/kernels.cu — the transformer's kernels on the device:
 * embedding, norms, RoPE, SwiGLU, matmuls, the paged KV write, paged
 * attention and greedy selection. Correct first; docs/cuda.md says what
 * each one guarantees against the CPU reference. */
#include <float.h>
#include <math.h>
#include <mma.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kern.h"

bool pgcu_type_ok(uint32_t type)
{
	switch (type) {
#define X(t) case t:
		PGCU_TYPES(X)
#undef X
		return true;
	default:
		return false;
	}
}

static bool plain_type(uint32_t type)
{
	return type == PG_TYPE_F32 || type == PG_TYPE_F16 || type == PG_TYPE_BF16;
}

/* Element i of a row of a plain type. */
__device__ __forceinline__ float plain_elem(uint32_t type, const uint8_t *row, int64_t i)
{
	if (type == PG_TYPE_F32)
		return ((const float *)row)[i];
	if (type == PG_TYPE_F16)
		return pgcu_h2f(((const pg_f16 *)row)[i]);
	return pgcu_bf2f(((const pg_bf16 *)row)[i]);
}

/* ---- embedding -------------------------------------------------------------- */

template <int T>
__global__ void embed_q(const uint8_t *W, size_t row_bytes, int64_t k, const int32_t *tokens, float *out)
{
	const uint8_t *row = W + (size_t)tokens[blockIdx.x] * row_bytes;
	float *o = out + (size_t)blockIdx.x * k;
	float v[32];
	for (int sb = threadIdx.x; sb < k / 32; sb += blockDim.x) {
		pgcu_dq_sub<T>(row, sb, v);
#pragma unroll
		for (int i = 0; i < 32; i++)
			o[sb * 32 + i] = v[i];
	}
}

__global__ void embed_plain(uint32_t type, const uint8_t *W, size_t row_bytes, int64_t k, const int32_t *tokens,
			    float *out)
{
	const uint8_t *row = W + (size_t)tokens[blockIdx.x] * row_bytes;
	for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
		out[(size_t)blockIdx.x * k + i] = plain_elem(type, row, i);
}

void pgcu_embed(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t k,
		const int32_t *tokens, int n, float *out)
{
	if (n <= 0)
		return;
	if (plain_type(type)) {
		embed_plain<<<n, 256, 0, st>>>(type, (const uint8_t *)W, row_bytes, k, tokens, out);
		return;
	}
	switch (type) {
#define X(t)                                                                                \
	case t:                                                                             \
		embed_q<t><<<n, 128, 0, st>>>((const uint8_t *)W, row_bytes, k, tokens, out); \
		break;
		PGCU_TYPES(X)
#undef X
	}
}

/* ---- matmul: decode GEMV ---------------------------------------------------- */

/* One warp per weight row, GEMV_WARPS rows a block; lane l reads the
 * row's sub-blocks l, l+32, ... so a warp's loads cover a contiguous
 * stretch of the row; the m activation rows stay in L1/L2. */
#define GEMV_WARPS 4

/* Each lane's partial sums to row r of Y, for the m activation rows. */
__device__ __forceinline__ void gemv_finish(const float *acc, int m, int lane, int64_t r, float *Y, int64_t ldy)
{
#pragma unroll
	for (int j = 0; j < PGCU_GEMV_MAX_M; j++) {
		if (j >= m)
			break;
		const float s = pgcu_warp_sum(acc[j]);
		if (lane == 0)
			Y[(size_t)j * ldy + r] = s;
	}
}

template <int T>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
	gemv(const uint8_t *W, size_t row_bytes, int64_t n, int64_t k, const float *X, int m, float *Y, int64_t ldy)
{
	const int lane = threadIdx.x & 31;
	const int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	if (r >= n)
		return;
	const uint8_t *row = W + (size_t)r * row_bytes;
	float acc[PGCU_GEMV_MAX_M];
#pragma unroll
	for (int j = 0; j < PGCU_GEMV_MAX_M; j++)
		acc[j] = 0.0f;
	const int nsb = (int)(k / 32);
	float v[32];
	for (int sb = lane; sb < nsb; sb += 32) {
		pgcu_dq_sub<T>(row, sb, v);
#pragma unroll
		for (int j = 0; j < PGCU_GEMV_MAX_M; j++) {
			if (j >= m)
				break;
			const float4 *x = (const float4 *)(X + (size_t)j * k + (size_t)sb * 32);
			float s = 0.0f;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				const float4 f = x[i];
				s = fmaf(v[4 * i], f.x, s);
				s = fmaf(v[4 * i + 1], f.y, s);
				s = fmaf(v[4 * i + 2], f.z, s);
				s = fmaf(v[4 * i + 3], f.w, s);
			}
			acc[j] += s;
		}
	}
	gemv_finish(acc, m, lane, r, Y, ldy);
}

/* Q8_0 and Q4_0, the types decode streams most: lanes share a block so
 * that a warp's loads of one instruction are contiguous (a lane per block
 * strides 34 or 18 bytes, which costs L1 wavefronts, not DRAM bytes).
 * Q8_0: 8 lanes a block, 4 quants each; Q4_0: 4 lanes a block, 4 bytes
 * (8 quants) each. Quants are read as 16-bit words: blocks are only 2-byte
 * aligned. x is the block's 32 activations. */
struct gemv_q8_0_part {
	static constexpr int lanes = 8;
	__device__ static float dot(const uint8_t *row, int ib, int q, const float *x)
	{
		return pgcu_q8_0_part((const block_q8_0 *)row + ib, q, *(const float4 *)(x + 4 * q));
	}
};

struct gemv_q4_0_part {
	static constexpr int lanes = 4;
	__device__ static float dot(const uint8_t *row, int ib, int q, const float *x)
	{
		return pgcu_q4_0_part((const block_q4_0 *)row + ib, q, *(const float4 *)(x + 4 * q),
				      *(const float4 *)(x + 4 * q + 16));
	}
};

template <class P>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
	gemv_shared(const uint8_t *W, size_t row_bytes, int64_t n, int64_t k, const float *X, int m, float *Y,
		    int64_t ldy)
{
	const int lane = threadIdx.x & 31, q = lane % P::lanes;
	const int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	if (r >= n)
		return;
	const uint8_t *row = W + (size_t)r * row_bytes;
	float acc[PGCU_GEMV_MAX_M];
#pragma unroll
	for (int j = 0; j < PGCU_GEMV_MAX_M; j++)
		acc[j] = 0.0f;
	const int nb = (int)(k / 32);
	for (int ib = lane / P::lanes; ib < nb; ib += 32 / P::lanes) {
#pragma unroll
		for (int j = 0; j < PGCU_GEMV_MAX_M; j++) {
			if (j >= m)
				break;
			acc[j] += P::dot(row, ib, q, X + (size_t)j * k + (size_t)ib * 32);
		}
	}
	gemv_finish(acc, m, lane, r, Y, ldy);
}

void pgcu_gemv(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t n, int64_t k,
	       const float *X, int64_t m, float *Y, int64_t ldy)
{
	const unsigned grid = (unsigned)((n + GEMV_WARPS - 1) / GEMV_WARPS);
	if (type == PG_TYPE_Q8_0) {
		gemv_shared<gemv_q8_0_part><<<grid, GEMV_WARPS * 32, 0, st>>>((const uint8_t *)W, row_bytes, n, k, X, (int)m, Y, ldy);
		return;
	}
	if (type == PG_TYPE_Q4_0) {
		gemv_shared<gemv_q4_0_part><<<grid, GEMV_WARPS * 32, 0, st>>>((const uint8_t *)W, row_bytes, n, k, X, (int)m, Y, ldy);
		return;
	}
	switch (type) {
#define X(t)                                                                                             \
	case t:                                                                                          \
		gemv<t><<<grid, GEMV_WARPS * 32, 0, st>>>((const uint8_t *)W, row_bytes, n, k, X, (int)m, Y, \
							   ldy);                                         \
		break;
		PGCU_TYPES(X)
#undef X
	}
}

/* ---- matmul: tensor-core tiles ------------------------------------------------ */

/* A block computes a 64 x 64 tile of Y (64 activation rows by 64 weight
 * rows) in steps of 32 along k. Each step, threads 0-63 dequantize one
 * weight row's sub-block to f16 in shared memory and threads 64-127 round
 * one activation row's 32 values to f16; then each of the 4 warps
 * multiplies a 32 x 32 quarter with 2 x 2 wmma 16x16x16 fragments, f32
 * accumulation. */
#define MM_T 64
#define MM_K 32
#define MM_LD (MM_K + 8)
#define MM_CLD (MM_T + 4)

template <int T> __device__ __forceinline__ void mm_load_w(const uint8_t *row, int sb, int64_t k, float v[32])
{
	if (T == PG_TYPE_F32 || T == PG_TYPE_F16 || T == PG_TYPE_BF16) {
		/* plain rows may end mid sub-block */
#pragma unroll
		for (int i = 0; i < 32; i++) {
			const int64_t c = (int64_t)sb * 32 + i;
			v[i] = c < k ? plain_elem(T, row, c) : 0.0f;
		}
	} else {
		pgcu_dq_sub<T>(row, sb, v);
	}
}

template <int T>
__global__ void __launch_bounds__(128)
	gemm(const uint8_t *W, size_t row_bytes, int64_t n, int64_t k, const float *X, int64_t m, float *Y, int64_t ldy)
{
	using namespace nvcuda;
	__shared__ __align__(32) __half xs[MM_T * MM_LD];
	__shared__ __align__(32) __half ws[MM_T * MM_LD];
	__shared__ __align__(32) float cs[MM_T * MM_CLD];
	const int tid = threadIdx.x, warp = tid >> 5;
	const int64_t n0 = (int64_t)blockIdx.x * MM_T, m0 = (int64_t)blockIdx.y * MM_T;
	const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
			wmma::fill_fragment(acc[i][j], 0.0f);

	const int nsb = (int)((k + 31) / 32);
	for (int sb = 0; sb < nsb; sb++) {
		float v[32];
		if (tid < MM_T) {
			const int64_t r = n0 + tid;
			if (r < n)
				mm_load_w<T>(W + (size_t)r * row_bytes, sb, k, v);
			else
#pragma unroll
				for (int i = 0; i < 32; i++)
					v[i] = 0.0f;
#pragma unroll
			for (int i = 0; i < 32; i++)
				ws[tid * MM_LD + i] = __float2half_rn(v[i]);
		} else {
			const int t = tid - MM_T;
			const int64_t r = m0 + t;
#pragma unroll
			for (int i = 0; i < 32; i++) {
				const int64_t c = (int64_t)sb * 32 + i;
				v[i] = r < m && c < k ? X[(size_t)r * k + c] : 0.0f;
			}
#pragma unroll
			for (int i = 0; i < 32; i++)
				xs[t * MM_LD + i] = __float2half_rn(v[i]);
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < MM_K; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
			for (int i = 0; i < 2; i++)
				wmma::load_matrix_sync(a[i], xs + (wm + 16 * i) * MM_LD + kk, MM_LD);
#pragma unroll
			for (int j = 0; j < 2; j++)
				wmma::load_matrix_sync(b[j], ws + (wn + 16 * j) * MM_LD + kk, MM_LD);
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 2; j++)
					wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
			wmma::store_matrix_sync(cs + (wm + 16 * i) * MM_CLD + wn + 16 * j, acc[i][j], MM_CLD,
						wmma::mem_row_major);
	__syncthreads();
	for (int e = tid; e < MM_T * MM_T; e += blockDim.x) {
		const int i = e / MM_T, j = e % MM_T;
		if (m0 + i < m && n0 + j < n)
			Y[(size_t)(m0 + i) * ldy + n0 + j] = cs[i * MM_CLD + j];
	}
}

void pgcu_gemm(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t n, int64_t k,
	       const float *X, int64_t m, float *Y, int64_t ldy)
{
	const dim3 grid((unsigned)((n + MM_T - 1) / MM_T), (unsigned)((m + MM_T - 1) / MM_T));
	switch (type) {
#define X(t)                                                                                           \
	case t:                                                                                        \
		gemm<t><<<grid, 128, 0, st>>>((const uint8_t *)W, row_bytes, n, k, X, m, Y, ldy); \
		break;
		PGCU_TYPES(X)
#undef X
	}
}

void pgcu_matmul(cudaStream_t st, uint32_t type, const void *W, size_t row_bytes, int64_t n, int64_t k,
		 const float *X, int64_t m, float *Y, int64_t ldy)
{
	if (m <= 0 || n <= 0)
		return;
	if (m <= PGCU_GEMV_MAX_M && k % 32 == 0)
		pgcu_gemv(st, type, W, row_bytes, n, k, X, m, Y, ldy);
	else
		pgcu_gemm(st, type, W, row_bytes, n, k, X, m, Y, ldy);
}

/* ---- elementwise ------------------------------------------------------------------ */

__device__ float block_sum(float v, float *sh)
{
	v = pgcu_warp_sum(v);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	const int nw = (blockDim.x + 31) >> 5;
	v = lane < nw ? sh[lane] : 0.0f;
	v = pgcu_warp_sum(v);
	__syncthreads();
	return v;
}

__global__ void rmsnorm_k(float *y, const float *x, const float *w, int n, float eps)
{
	__shared__ float sh[32];
	const float *xr = x + (size_t)blockIdx.x * n;
	float *yr = y + (size_t)blockIdx.x * n;
	float s = 0.0f;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		s = fmaf(xr[i], xr[i], s);
	s = block_sum(s, sh);
	const float scale = 1.0f / sqrtf(s / n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		yr[i] = (xr[i] * scale) * w[i];
}

void pgcu_rmsnorm(cudaStream_t st, float *y, const float *x, const float *w, int rows, int n, float eps)
{
	if (rows > 0)
		rmsnorm_k<<<rows, 256, 0, st>>>(y, x, w, n, eps);
}

__global__ void add_k(float *y, const float *x, int64_t n)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += x[i];
}

void pgcu_add(cudaStream_t st, float *y, const float *x, int64_t n)
{
	if (n > 0)
		add_k<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(y, x, n);
}

__global__ void bias_k(float *y, const float *b, int64_t n, int dim)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += b[i % dim];
}

void pgcu_bias(cudaStream_t st, float *y, const float *b, int rows, int dim)
{
	const int64_t n = (int64_t)rows * dim;
	if (n > 0)
		bias_k<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(y, b, n, dim);
}

__global__ void swiglu_k(float *g, const float *u, int64_t n)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		const float x = g[i];
		g[i] = x / (1.0f + expf(-x)) * u[i];
	}
}

void pgcu_swiglu(cudaStream_t st, float *g, const float *u, int64_t n)
{
	if (n > 0)
		swiglu_k<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(g, u, n);
}

__global__ void gather_k(float *dst, const float *src, const int32_t *idx, int dim)
{
	const float *s = src + (size_t)idx[blockIdx.x] * dim;
	float *d = dst + (size_t)blockIdx.x * dim;
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		d[i] = s[i];
}

void pgcu_gather(cudaStream_t st, float *dst, const float *src, const int32_t *idx, int rows, int dim)
{
	if (rows > 0)
		gather_k<<<rows, 256, 0, st>>>(dst, src, idx, dim);
}

/* ---- RoPE ------------------------------------------------------------------------ */

/* One block per token, a thread per (head, pair). theta advances by
 * repeated multiplication, as ggml builds its cache, so the angles match
 * the CPU's to the rounding of cosf/sinf. */
__global__ void rope_k(struct pgcu_rope_args a, float *x, int ld, int n_heads, const int32_t *pos)
{
	const int half = a.rope_dim / 2;
	float *xr = x + (size_t)blockIdx.x * ld;
	const float p = (float)pos[blockIdx.x];
	for (int e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
		const int h = e / half, i = e % half;
		float theta = p;
		for (int j = 0; j < i; j++)
			theta *= a.theta_scale;
		const float ff = a.freqs ? a.freqs[i] : 1.0f;
		const float th = a.freq_scale * (theta / ff);
		const float c = cosf(th), s = sinf(th);
		float *v = xr + (size_t)h * a.hd;
		const int ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
		const float x0 = v[ia], x1 = v[ib];
		v[ia] = fmaf(x0, c, -(x1 * s));
		v[ib] = fmaf(x0, s, x1 * c);
	}
}

void pgcu_rope(cudaStream_t st, const struct pgcu_rope_args *a, float *x, int ld, int n_heads,
	       const int32_t *pos, int n_tokens)
{
	if (n_tokens > 0)
		rope_k<<<n_tokens, 128, 0, st>>>(*a, x, ld, n_heads, pos);
}

/* ---- the paged KV cache ------------------------------------------------------------ */

__device__ __forceinline__ size_t kv_row(const struct pgcu_kv &kv, const int32_t *tab, int layer, int p)
{
	const size_t blk = (size_t)tab[p / kv.bs];
	return blk * kv.block_elems + ((size_t)layer * kv.bs + p % kv.bs) * kv.kv_dim;
}

__global__ void kv_write_k(struct pgcu_kv kv, int layer, const float *k, const float *v, const int32_t *pos,
			   const int32_t *seq)
{
	const int t = blockIdx.x;
	const size_t off = kv_row(kv, kv.bt + (size_t)seq[t] * kv.max_bps, layer, pos[t]);
	for (int i = threadIdx.x; i < kv.kv_dim; i += blockDim.x) {
		kv.pool[off + i] = __float2half_rn(k[(size_t)t * kv.kv_dim + i]);
		kv.pool[kv.v_off + off + i] = __float2half_rn(v[(size_t)t * kv.kv_dim + i]);
	}
}

void pgcu_kv_write(cudaStream_t st, const struct pgcu_kv *kv, int layer, const float *k, const float *v,
		   const int32_t *pos, const int32_t *seq, int n_tokens)
{
	if (n_tokens > 0)
		kv_write_k<<<n_tokens, 128, 0, st>>>(*kv, layer, k, v, pos, seq);
}

/* ---- paged attention ------------------------------------------------------------------ */

#define ATT_WARPS 4
#define ATT_ND (PGCU_ATTN_MAX_HD / 32)

/* Block (head h, token t, slice z): positions [z*split_len, ...) of
 * token t's context; warp w takes every ATT_WARPS-th position, lane l the
 * dimensions l, l+32, ...; each warp keeps its own running max, sum and
 * V accumulator, merged at the end into part. */
__global__ void __launch_bounds__(ATT_WARPS * 32)
	attn_split(struct pgcu_kv kv, struct pgcu_attn_args a, const float *q, int ldq, const int32_t *pos,
		   const int32_t *seq, float *part)
{
	__shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
	__shared__ float sm_acc[ATT_WARPS][PGCU_ATTN_MAX_HD];
	const int h = blockIdx.x, t = blockIdx.y, z = blockIdx.z;
	const int n_pos = pos[t] + 1;
	const int p0 = z * a.split_len;
	if (p0 >= n_pos)
		return;
	const int p1 = min(n_pos, p0 + a.split_len);
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int g = h / (a.n_head / a.n_head_kv);
	const int32_t *tab = kv.bt + (size_t)seq[t] * kv.max_bps;
	const float *qr = q + (size_t)t * ldq + (size_t)h * a.hd;

	float qv[ATT_ND], acc[ATT_ND];
#pragma unroll
	for (int i = 0; i < ATT_ND; i++) {
		const int d = lane + 32 * i;
		qv[i] = d < a.hd ? qr[d] : 0.0f;
		acc[i] = 0.0f;
	}
	float m = -INFINITY, l = 0.0f;
	for (int p = p0 + w; p < p1; p += ATT_WARPS) {
		const size_t off = kv_row(kv, tab, a.layer, p) + (size_t)g * a.hd;
		const __half *kr = kv.pool + off, *vr = kv.pool + kv.v_off + off;
		float s = 0.0f;
#pragma unroll
		for (int i = 0; i < ATT_ND; i++) {
			const int d = lane + 32 * i;
			if (d < a.hd)
				s = fmaf(qv[i], __half2float(kr[d]), s);
		}
		s = pgcu_warp_sum(s) * a.scale;
		const float mn = fmaxf(m, s);
		const float corr = expf(m - mn), e = expf(s - mn);
		l = l * corr + e;
#pragma unroll
		for (int i = 0; i < ATT_ND; i++) {
			const int d = lane + 32 * i;
			if (d < a.hd)
				acc[i] = fmaf(acc[i], corr, e * __half2float(vr[d]));
		}
		m = mn;
	}
	if (lane == 0) {
		sm_m[w] = m;
		sm_l[w] = l;
	}
#pragma unroll
	for (int i = 0; i < ATT_ND; i++) {
		const int d = lane + 32 * i;
		if (d < a.hd)
			sm_acc[w][d] = acc[i];
	}
	__syncthreads();
	/* warp 0 has position p0, so the merged max is finite */
	float M = sm_m[0];
	for (int j = 1; j < ATT_WARPS; j++)
		M = fmaxf(M, sm_m[j]);
	float *pr = part + (((size_t)t * a.n_head + h) * a.n_splits + z) * (a.hd + 2);
	if (threadIdx.x == 0) {
		float L = 0.0f;
		for (int j = 0; j < ATT_WARPS; j++)
			L += sm_l[j] * expf(sm_m[j] - M);
		pr[0] = M;
		pr[1] = L;
	}
	for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
		float s = 0.0f;
		for (int j = 0; j < ATT_WARPS; j++)
			s += sm_acc[j][d] * expf(sm_m[j] - M);
		pr[2 + d] = s;
	}
}

__global__ void attn_merge(struct pgcu_attn_args a, const int32_t *pos, const float *part, float *out, int ldo)
{
	const int h = blockIdx.x, t = blockIdx.y;
	const int n_pos = pos[t] + 1;
	const int ns = (n_pos + a.split_len - 1) / a.split_len;
	const float *pr = part + ((size_t)t * a.n_head + h) * a.n_splits * (a.hd + 2);
	float M = -INFINITY;
	for (int z = 0; z < ns; z++)
		M = fmaxf(M, pr[(size_t)z * (a.hd + 2)]);
	float L = 0.0f;
	for (int z = 0; z < ns; z++)
		L += pr[(size_t)z * (a.hd + 2) + 1] * expf(pr[(size_t)z * (a.hd + 2)] - M);
	for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
		float s = 0.0f;
		for (int z = 0; z < ns; z++)
			s += pr[(size_t)z * (a.hd + 2) + 2 + d] * expf(pr[(size_t)z * (a.hd + 2)] - M);
		out[(size_t)t * ldo + (size_t)h * a.hd + d] = s / L;
	}
}

void pgcu_attn(cudaStream_t st, const struct pgcu_kv *kv, const struct pgcu_attn_args *a, const float *q,
	       int ldq, const int32_t *pos, const int32_t *seq, int n_tokens, float *part, float *out, int ldo)
{
	if (n_tokens <= 0)
		return;
	const dim3 grid((unsigned)a->n_head, (unsigned)n_tokens, (unsigned)a->n_splits);
	attn_split<<<grid, ATT_WARPS * 32, 0, st>>>(*kv, *a, q, ldq, pos, seq, part);
	attn_merge<<<dim3((unsigned)a->n_head, (unsigned)n_tokens), 128, 0, st>>>(*a, pos, part, out, ldo);
}

/* Prompts: a block per (head, tile of up to PGCU_PF_Q query rows of one
 * sequence). K and V come through shared memory PF_K positions at a time,
 * read once for all the tile's rows; warp w keeps rows w, w+4, ... each
 * with its own online softmax and causal limit. */
#define PF_K 32
#define PF_RW (PGCU_PF_Q / ATT_WARPS)

__global__ void __launch_bounds__(ATT_WARPS * 32)
	attn_prefill(struct pgcu_kv kv, struct pgcu_attn_args a, const float *q, int ldq, const int32_t *pos,
		     const int32_t *seq, const int32_t *tiles, float *out, int ldo)
{
	extern __shared__ __half pf_sh[];
	__half *ks = pf_sh, *vs = pf_sh + PF_K * a.hd;
	const int h = blockIdx.x, t0 = tiles[2 * blockIdx.y], nt = tiles[2 * blockIdx.y + 1];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int g = h / (a.n_head / a.n_head_kv);
	const int32_t *tab = kv.bt + (size_t)seq[t0] * kv.max_bps;

	float qv[PF_RW][ATT_ND], acc[PF_RW][ATT_ND], m[PF_RW], l[PF_RW];
	int lim[PF_RW];
	int max_p = 0;
	for (int r = 0; r < nt; r++)
		max_p = max(max_p, pos[t0 + r]);
#pragma unroll
	for (int i = 0; i < PF_RW; i++) {
		const int r = w + ATT_WARPS * i;
		lim[i] = r < nt ? pos[t0 + r] : -1;
		m[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int c = 0; c < ATT_ND; c++) {
			const int d = lane + 32 * c;
			qv[i][c] = r < nt && d < a.hd ? q[(size_t)(t0 + r) * ldq + (size_t)h * a.hd + d] : 0.0f;
			acc[i][c] = 0.0f;
		}
	}
	for (int kb = 0; kb <= max_p; kb += PF_K) {
		__syncthreads();
		for (int e = threadIdx.x; e < PF_K * a.hd; e += blockDim.x) {
			const int pp = e / a.hd, d = e % a.hd, p = kb + pp;
			if (p <= max_p) {
				const size_t off = kv_row(kv, tab, a.layer, p) + (size_t)g * a.hd + d;
				ks[e] = kv.pool[off];
				vs[e] = kv.pool[kv.v_off + off];
			}
		}
		__syncthreads();
#pragma unroll
		for (int i = 0; i < PF_RW; i++) {
			const int np = min(PF_K, lim[i] - kb + 1);
			for (int pp = 0; pp < np; pp++) {
				float s = 0.0f;
#pragma unroll
				for (int c = 0; c < ATT_ND; c++) {
					const int d = lane + 32 * c;
					if (d < a.hd)
						s = fmaf(qv[i][c], __half2float(ks[pp * a.hd + d]), s);
				}
				s = pgcu_warp_sum(s) * a.scale;
				const float mn = fmaxf(m[i], s);
				const float corr = expf(m[i] - mn), e = expf(s - mn);
				l[i] = l[i] * corr + e;
#pragma unroll
				for (int c = 0; c < ATT_ND; c++) {
					const int d = lane + 32 * c;
					if (d < a.hd)
						acc[i][c] = fmaf(acc[i][c], corr, e * __half2float(vs[pp * a.hd + d]));
				}
				m[i] = mn;
			}
		}
	}
#pragma unroll
	for (int i = 0; i < PF_RW; i++) {
		const int r = w + ATT_WARPS * i;
		if (r >= nt)
			continue;
#pragma unroll
		for (int c = 0; c < ATT_ND; c++) {
			const int d = lane + 32 * c;
			if (d < a.hd)
				out[(size_t)(t0 + r) * ldo + (size_t)h * a.hd + d] = acc[i][c] / l[i];
		}
	}
}

void pgcu_attn_prefill(cudaStream_t st, const struct pgcu_kv *kv, const struct pgcu_attn_args *a, const float *q,
		       int ldq, const int32_t *pos, const int32_t *seq, const int32_t *tiles, int n_tiles, float *out,
		       int ldo)
{
	if (n_tiles <= 0)
		return;
	const size_t sh = 2 * (size_t)PF_K * a->hd * sizeof(__half);
	attn_prefill<<<dim3((unsigned)a->n_head, (unsigned)n_tiles), ATT_WARPS * 32, sh, st>>>(*kv, *a, q, ldq, pos,
												seq, tiles, out, ldo);
}

/* ---- greedy ------------------------------------------------------------------------------ */

__global__ void argmax_k(const float *x, int n, int32_t *ids)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	const float *r = x + (size_t)blockIdx.x * n;
	float bv = -INFINITY;
	int bi = n;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const float v = r[i];
		if (bi == n || v > bv) {
			bv = v;
			bi = i;
		}
	}
	/* the larger value wins, the lower index among equals */
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		if (ov > bv || (ov == bv && oi < bi)) {
			bv = ov;
			bi = oi;
		}
	}
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (lane == 0) {
		sv[w] = bv;
		si[w] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int j = 1; j < (int)(blockDim.x >> 5); j++)
			if (sv[j] > bv || (sv[j] == bv && si[j] < bi)) {
				bv = sv[j];
				bi = si[j];
			}
		ids[blockIdx.x] = bi < n ? bi : 0;
	}
}

void pgcu_argmax(cudaStream_t st, const float *x, int rows, int n, int32_t *ids)
{
	if (rows > 0)
		argmax_k<<<rows, 256, 0, st>>>(x, n, ids);
}
