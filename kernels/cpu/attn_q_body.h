/* kernels/cpu/attn_q_body.h — the body of the one-chunk attention over a
 * quantized KV cache (kernels.h: pg_attn_chunk_q), included once by each
 * ISA's unit (attn_q.c, attn_q_avx2.c, attn_q_avx512.c) with ATTN_Q_FN
 * naming its entry. Every step is one rounding per element (fmaf is exact),
 * so each unit gives the same bits; the ISA only changes how fast the
 * compiler makes them and which kernel table's vec_dot runs.
 */
#ifndef ATTN_Q_FN
#error "define ATTN_Q_FN before including attn_q_body.h"
#endif

#include <math.h>
#include <string.h>

#include "kernels/cpu/attn.h"
#include "kernels/cpu/cpu.h"

/* ggml_vec_dot_f16 as llama.cpp's AVX-512 build sums it (an f16 K beside a
 * quantized V): four 16-lane FMA chains over each 64 elements,
 * (a0 + a2) + (a1 + a3), _mm512_reduce_add_ps's tree, then the leftovers'
 * products added in double. */
static float attn_q_dot_f16(const pg_f16 *k, const pg_f16 *q, int n)
{
	float a[4][16] = { { 0 } }, x[64], y[64];
	const int np = n & ~63;
	for (int i = 0; i < np; i += 64) {
		pg_f16_to_f32_row(k + i, x, 64);
		pg_f16_to_f32_row(q + i, y, 64);
		for (int j = 0; j < 4; j++)
			for (int l = 0; l < 16; l++)
				a[j][l] = fmaf(x[16 * j + l], y[16 * j + l], a[j][l]);
	}
	float v[16];
	for (int l = 0; l < 16; l++)
		v[l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
	for (int l = 0; l < 8; l++)
		v[l] = v[l + 8] + v[l];
	for (int l = 0; l < 4; l++)
		v[l] = v[l + 4] + v[l];
	double sum = (v[0] + v[2]) + (v[1] + v[3]);
	for (int i = np; i < n; i++)
		sum += (double)(pg_f16_to_f32(k[i]) * pg_f16_to_f32(q[i]));
	return (float)sum;
}

/* Up to PG_ATTN_CHUNK_ROWS query rows of one KV head walk the positions
 * together, so a V row is dequantized once for all of them. */
static void attn_q_pass(const struct pg_kern *kn, const struct pg_attn_kvq *kv, int n_pos, int hd, float scale,
			const float *q, size_t ldq, int nr, float *out, size_t ldo)
{
	enum { R = PG_ATTN_CHUNK_ROWS };
	/* the query in K's vec-dot type: f16 (2 bytes an element) is the widest */
	uint8_t qq[R * 2 * PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float acc[R * PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	pg_f16 acc16[R * PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float vf[PG_ATTN_MAX_HD] __attribute__((aligned(64)));
	float M[R], S[R];
	const bool k16 = kv->type_k == PG_TYPE_F16, v16 = kv->type_v == PG_TYPE_F16;
	const size_t qrow = pg_act_row_size(kv->type_k, hd);
	const pg_gemv_fn dot = kn->gemv[kv->type_k];
	for (int r = 0; r < nr; r++) {
		pg_quantize_act(kv->type_k, q + (size_t)r * ldq, qq + (size_t)r * qrow, hd);
		M[r] = -INFINITY;
		S[r] = 0.0f;
	}
	memset(acc, 0, (size_t)nr * hd * sizeof(float));
	memset(acc16, 0, (size_t)nr * hd * sizeof(pg_f16));
	for (int p = 0; p < n_pos; p++) {
		const int b = p / kv->block_size, j = p % kv->block_size;
		const uint8_t *kr = kv->k[b] + (size_t)j * kv->k_stride, *vr = kv->v[b] + (size_t)j * kv->v_stride;
		if (!v16)
			pg_dequant_row(kv->type_v, vr, vf, hd);
		for (int r = 0; r < nr; r++) {
			const uint8_t *qr = qq + (size_t)r * qrow;
			float s;
			if (k16)
				s = attn_q_dot_f16((const pg_f16 *)kr, (const pg_f16 *)qr, hd);
			else
				dot(hd, kr, qr, 0, 1, &s, 0);
			s *= scale;
			float ms = 1.0f, vs = 1.0f;
			if (s > M[r]) {
				ms = expf(M[r] - s);
				M[r] = s;
			} else {
				vs = expf(s - M[r]);
			}
			if (v16) {
				pg_f16 *a = acc16 + (size_t)r * hd;
				if (ms != 1.0f)
					kn->f16_scale(a, ms, hd);
				kn->f16_fma(a, (const pg_f16 *)vr, vs, hd);
			} else {
				/* ggml_vec_scale_f32, then ggml_vec_mad_f32 (one FMA an element) */
				float *a = acc + (size_t)r * hd;
				if (ms != 1.0f)
					for (int d = 0; d < hd; d++)
						a[d] *= ms;
				for (int d = 0; d < hd; d++)
					a[d] = fmaf(vf[d], vs, a[d]);
			}
			S[r] = fmaf(S[r], ms, vs); /* contracted in ggml's C++ */
		}
	}
	for (int r = 0; r < nr; r++) {
		const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
		float *o = out + (size_t)r * ldo;
		if (v16)
			kn->f16_to_f32(acc16 + (size_t)r * hd, o, hd);
		else
			memcpy(o, acc + (size_t)r * hd, (size_t)hd * sizeof(float));
		for (int d = 0; d < hd; d++)
			o[d] *= inv;
	}
}

void ATTN_Q_FN(const struct pg_kern *kn, const struct pg_attn_kvq *kv, int n_pos, int hd, float scale,
	       const float *q, size_t ldq, int n_q, float *out, size_t ldo)
{
	for (int r = 0; r < n_q; r += PG_ATTN_CHUNK_ROWS)
		attn_q_pass(kn, kv, n_pos, hd, scale, q + (size_t)r * ldq, ldq,
			    n_q - r < PG_ATTN_CHUNK_ROWS ? n_q - r : PG_ATTN_CHUNK_ROWS, out + (size_t)r * ldo, ldo);
}
