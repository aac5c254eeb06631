/* kernels/cpu/attn.h — what the attention kernels of each ISA share
 * (attn.c: scalar and dispatch; attn_avx2.c, attn_avx512.c).
 *
 * Both of ggml's paths have per-element arithmetic that does not depend on
 * the vector width except in two places: the f16 dot of the one-chunk path
 * (summation order) and the softmax of the tiled path (vector expf, sum
 * order). Everything else is one FMA chain or one rounding per element, so
 * the 256-bit and 512-bit bodies give the same bits wherever ggml's do.
 */
#ifndef PAGODA_KERNELS_CPU_ATTN_H
#define PAGODA_KERNELS_CPU_ATTN_H

#include "kernels/cpu/kernels.h"

/* ggml_fa_tile_config::KV: the tiled path's KV tile, aligned at position 0. */
#define PG_ATTN_KV_TILE 64
/* Largest head size the kernels take (stack buffers). */
#define PG_ATTN_MAX_HD 512

/* ggml_vec_soft_max_f32(n, x, x, max): x[i] = exp(x[i] - max), returns the
 * sum in double, accumulated one vector of the ISA's width at a time.
 * n is a multiple of that width. */
typedef double (*pg_attn_softmax_fn)(float *x, int n, float max);


/* The one-chunk kernel runs in blocks of PG_ATTN_CHUNK_POS positions, in
 * three passes that each keep ggml's per-element arithmetic: all the
 * block's scores (independent dots), then per query row the sequential
 * online-softmax steps (scalar: the running max, libm expf, S), then the
 * f16-rounded V sums with the accumulators in registers across the block.
 * Done position by position instead, every step would wait on the last
 * one's dot, expf and f16 round trips (bench/run.sh's tg@512 shows it). */
#define PG_ATTN_CHUNK_POS 16
/* Query rows one pass carries. */
#define PG_ATTN_CHUNK_ROWS 16
struct pg_attn_chunk_ops {
	/* raw[r][t] for r < nr, t < PG_ATTN_CHUNK_POS (rows of
	 * PG_ATTN_CHUNK_POS): ggml_vec_dot_f16 of llama.cpp's AVX-512 build
	 * over the first hd & ~63 elements of kf[t] and qf[r] (rows of hd
	 * floats): four 16-lane FMA chains, (a0 + a2) + (a1 + a3), then
	 * _mm512_reduce_add_ps's tree. Rows t >= nt give any value. */
	void (*scores)(const float *kf, int nt, const float *qf, int nr, int hd, float *raw);
	/* For d < hd rounded down to a multiple of width, r < nr, t < nt in
	 * order: acc[r][d] = f16(acc * ms[r][t]) where ms != 1 (ggml_vec_scale_f16),
	 * then acc = f16(fma(v[t][d], vs[r][t], acc)) (ggml_vec_mad_f16).
	 * acc rows of hd floats holding f16 values; ms, vs rows of
	 * PG_ATTN_CHUNK_POS. */
	void (*accumulate)(const pg_f16 *const *v, int nt, int hd, const float *ms, const float *vs, int nr,
			   float *acc);
	int width;
};
extern const struct pg_attn_chunk_ops pg_attn_chunk_avx2, pg_attn_chunk_avx512;
/* The driver both x86 tables share (attn_avx2.c): the same bits from
 * either set of ops. */
void pg_attn_chunk_x86(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q,
		       size_t ldq, int n_q, float *out, size_t ldo, const struct pg_attn_chunk_ops *ops);
/* The ISA-specific pieces of the tiled kernel. Scores: kq[r][j] = (FMA
 * chain over d of kt[d][j] * q[r][d]) * scale for r < nr (<= 4), j < nw (a
 * multiple of 16). Accumulate: acc[r] += sum over t < nt of kq[r][t] * v[t],
 * one FMA chain per element in t order. Both are ggml's simd_gemm element
 * by element, whatever the vector width. */
struct pg_attn_tiled_ops {
	void (*scores)(const float *kt, int hd, const float *q, size_t ldq, int nr, float scale, int nw, float *kq);
	void (*accumulate)(const float *v, int hd, const float *kq, int nr, int nt, float *acc);
	pg_attn_softmax_fn softmax;
	int sm_width; /* the softmax's vector width: 8 or 16 floats */
};
extern const struct pg_attn_tiled_ops pg_attn_tiled_avx2, pg_attn_tiled_avx512;
void pg_attn_tiled_x86(const struct pg_attn_kv *kv, const int *n_pos, int hd, float scale, const float *q,
		       size_t ldq, int n_q, float *out, size_t ldo, float *work, const struct pg_attn_tiled_ops *ops);

/* pg_attn_chunk_q's body as each ISA's unit builds it (attn_q_body.h),
 * with the kernel table whose vec_dot it takes. */
struct pg_kern;
void pg_attn_chunk_q_scalar(const struct pg_kern *kn, const struct pg_attn_kvq *kv, int n_pos, int hd, float scale,
			    const float *q, size_t ldq, int n_q, float *out, size_t ldo);
void pg_attn_chunk_q_avx2(const struct pg_kern *kn, const struct pg_attn_kvq *kv, int n_pos, int hd, float scale,
			  const float *q, size_t ldq, int n_q, float *out, size_t ldo);
void pg_attn_chunk_q_avx512(const struct pg_kern *kn, const struct pg_attn_kvq *kv, int n_pos, int hd,
			    float scale, const float *q, size_t ldq, int n_q, float *out, size_t ldo);

/* Where position p's row starts. */
static inline const pg_f16 *pg_attn_row(const pg_f16 *const *blocks, const struct pg_attn_kv *kv, int p)
{
	return blocks[p / kv->block_size] + (size_t)(p % kv->block_size) * kv->stride;
}

/* Work layout of the tiled kernels, in floats: the K tile transposed
 * (hd x 64), the V tile (64 x hd), 4 rows of scores, then per query row
 * M, S and the f32 V accumulator. */
static inline size_t pg_attn_work_kt(int hd)
{
	(void)hd;
	return 0;
}
static inline size_t pg_attn_work_v(int hd)
{
	return (size_t)hd * PG_ATTN_KV_TILE;
}
static inline size_t pg_attn_work_kq(int hd)
{
	return 2 * (size_t)hd * PG_ATTN_KV_TILE;
}
static inline size_t pg_attn_work_ms(int hd)
{
	return pg_attn_work_kq(hd) + 4 * PG_ATTN_KV_TILE;
}
static inline size_t pg_attn_work_acc(int hd, int n_q)
{
	return (pg_attn_work_ms(hd) + 2 * (size_t)n_q + 15) & ~(size_t)15;
}

#endif
