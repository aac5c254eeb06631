/* kernels/cpu/attn.c — the attention entry points of the door and their
 * scalar bodies: ggml's generic C (no SIMD), as llama.cpp built without
 * vector extensions computes them. The one-chunk body keeps the scalar
 * table's f16 rounding steps (fmaf for ggml_vec_mad_f16, as pg_f16_fma_row);
 * the tiled body is simd_gemm's scalar fallback, a product then a sum.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <string.h>

#include "kernels/cpu/attn.h"
#include "kernels/cpu/cpu.h"

static void chunk_scalar(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
			 int n_q, float *out, size_t ldo)
{
	for (int r = 0; r < n_q; r++) {
		pg_f16 q16[PG_ATTN_MAX_HD], acc[PG_ATTN_MAX_HD];
		for (int i = 0; i < hd; i++) {
			q16[i] = pg_f32_to_f16(q[r * ldq + i]);
			acc[i] = 0;
		}
		float M = -INFINITY, S = 0.0f;
		for (int p = 0; p < n_pos; p++) {
			const pg_f16 *k = pg_attn_row(kv->k, kv, p), *v = pg_attn_row(kv->v, kv, p);
			double dot = 0;
			for (int i = 0; i < hd; i++)
				dot += (double)(pg_f16_to_f32(k[i]) * pg_f16_to_f32(q16[i]));
			const float s = (float)dot * scale;
			float ms = 1.0f, vs = 1.0f;
			if (s > M) {
				ms = expf(M - s);
				M = s;
				for (int i = 0; i < hd; i++)
					acc[i] = pg_f32_to_f16(pg_f16_to_f32(acc[i]) * ms);
			} else {
				vs = expf(s - M);
			}
			for (int i = 0; i < hd; i++)
				acc[i] = pg_f32_to_f16(fmaf(pg_f16_to_f32(v[i]), vs, pg_f16_to_f32(acc[i])));
			S = S * ms + vs;
		}
		const float inv = S == 0.0f ? 0.0f : 1.0f / S;
		for (int i = 0; i < hd; i++)
			out[r * ldo + i] = pg_f16_to_f32(acc[i]) * inv;
	}
}

/* One query row at a time: without SIMD each score and each output element
 * is its own chain, so the tile order only decides which rows run when. */
static void tiled_scalar(const struct pg_attn_kv *kv, const int *n_pos, int hd, float scale, const float *q,
			 size_t ldq, int n_q, float *out, size_t ldo, float *work)
{
	float *kf = work, *vf = work + pg_attn_work_v(hd), *kq = work + pg_attn_work_kq(hd);
	float *acc = work + pg_attn_work_acc(hd, 1);
	for (int r = 0; r < n_q; r++) {
		const float *qr = q + r * ldq;
		float M = -INFINITY, S = 0.0f;
		memset(acc, 0, (size_t)hd * sizeof(float));
		for (int ic = 0; ic < n_pos[r]; ic += PG_ATTN_KV_TILE) {
			const int nt = n_pos[r] - ic < PG_ATTN_KV_TILE ? n_pos[r] - ic : PG_ATTN_KV_TILE;
			float tmax = -INFINITY;
			for (int t = 0; t < nt; t++) {
				const pg_f16 *k = pg_attn_row(kv->k, kv, ic + t);
				for (int d = 0; d < hd; d++)
					kf[d] = pg_f16_to_f32(k[d]);
				float sum = 0.0f;
				for (int d = 0; d < hd; d++)
					sum += qr[d] * kf[d];
				kq[t] = sum * scale;
				tmax = tmax > kq[t] ? tmax : kq[t];
			}
			const float mnew = fmaxf(M, tmax);
			if (mnew > M) {
				const float ms = expf(M - mnew);
				for (int d = 0; d < hd; d++)
					acc[d] *= ms;
				S *= ms;
			}
			M = mnew;
			double sum = 0;
			for (int t = 0; t < nt; t++) {
				kq[t] = expf(kq[t] - mnew);
				sum += (double)kq[t];
			}
			S = (float)((double)S + sum);
			for (int t = 0; t < nt; t++) {
				const pg_f16 *v = pg_attn_row(kv->v, kv, ic + t);
				for (int d = 0; d < hd; d++)
					vf[d] = pg_f16_to_f32(v[d]);
				for (int d = 0; d < hd; d++)
					acc[d] += kq[t] * vf[d];
			}
		}
		const float inv = S == 0.0f ? 0.0f : 1.0f / S;
		for (int d = 0; d < hd; d++)
			out[r * ldo + d] = acc[d] * inv;
	}
}

void pg_attn_chunk(const struct pg_attn_kv *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		   int n_q, float *out, size_t ldo)
{
	const struct pg_kern *k = pg_kern_get();
	if (k == &pg_kern_avx512)
		pg_attn_chunk_x86(kv, n_pos, hd, scale, q, ldq, n_q, out, ldo, &pg_attn_chunk_avx512);
	else if (k == &pg_kern_avx2)
		pg_attn_chunk_x86(kv, n_pos, hd, scale, q, ldq, n_q, out, ldo, &pg_attn_chunk_avx2);
	else
		chunk_scalar(kv, n_pos, hd, scale, q, ldq, n_q, out, ldo);
}

void pg_attn_tiled(const struct pg_attn_kv *kv, const int *n_pos, int hd, float scale, const float *q,
		   size_t ldq, int n_q, float *out, size_t ldo, float *work)
{
	const struct pg_kern *k = pg_kern_get();
	if (k == &pg_kern_avx512)
		pg_attn_tiled_x86(kv, n_pos, hd, scale, q, ldq, n_q, out, ldo, work, &pg_attn_tiled_avx512);
	else if (k == &pg_kern_avx2)
		pg_attn_tiled_x86(kv, n_pos, hd, scale, q, ldq, n_q, out, ldo, work, &pg_attn_tiled_avx2);
	else
		tiled_scalar(kv, n_pos, hd, scale, q, ldq, n_q, out, ldo, work);
}

size_t pg_attn_tiled_work(int hd, int n_q)
{
	return pg_attn_work_acc(hd, n_q) + (size_t)n_q * hd;
}

bool pg_attn_tiled_ok(int hd)
{
	const struct pg_kern *k = pg_kern_get();
	if (hd > PG_ATTN_MAX_HD)
		return false;
	if (k == &pg_kern_avx512)
		return hd % 16 == 0;
	if (k == &pg_kern_avx2)
		return hd % 8 == 0;
	return true;
}
