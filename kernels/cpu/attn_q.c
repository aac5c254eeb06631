/* kernels/cpu/attn_q.c — attention over a quantized KV cache: the scalar
 * table's body (attn_q_body.h), the dispatch, and how a K or V row is
 * written into the cache.
 */
#pragma GCC optimize("fp-contract=off") /* no FMAs beyond the ones written */

#define ATTN_Q_FN pg_attn_chunk_q_scalar
#include "kernels/cpu/attn_q_body.h"

void pg_attn_chunk_q(const struct pg_attn_kvq *kv, int n_pos, int hd, float scale, const float *q, size_t ldq,
		     int n_q, float *out, size_t ldo)
{
	const struct pg_kern *k = pg_kern_get();
	if (k == &pg_kern_avx512)
		pg_attn_chunk_q_avx512(k, kv, n_pos, hd, scale, q, ldq, n_q, out, ldo);
	else if (k == &pg_kern_avx2)
		pg_attn_chunk_q_avx2(k, kv, n_pos, hd, scale, q, ldq, n_q, out, ldo);
	else
		pg_attn_chunk_q_scalar(k, kv, n_pos, hd, scale, q, ldq, n_q, out, ldo);
}

/* ggml_set_rows into the cache takes the CPU type traits' from_float: f16
 * rounding, Q8_0's x86 activation quantizer, the reference quantizers for
 * the others (IQ4_NL's in its one-fit row form). */
void pg_kv_store_row(uint32_t type, const float *x, void *dst, int64_t n)
{
	switch (type) {
	case PG_TYPE_F16: pg_f32_to_f16_row(x, dst, n); break;
	case PG_TYPE_Q8_0: pg_kern_get()->from_float[PG_TYPE_Q8_0](x, dst, n); break;
	case PG_TYPE_IQ4_NL: pg_iq4_nl_row_ref(x, dst, n); break;
	default: pg_quantize_row(type, x, dst, n); break;
	}
}

void pg_kv_rotate(float *x, int64_t len, int n)
{
	const float scale = 1.0f / sqrtf((float)n);
	for (int64_t c = 0; c + n <= len; c += n) {
		float *y = x + c;
		for (int i = 0; i < n; i++)
			y[i] *= scale;
		for (int span = 1; span < n; span *= 2)
			for (int i = 0; i < n; i += 2 * span)
				for (int j = i; j < i + span; j++) {
					const float u = y[j], v = y[j + span];
					y[j] = u + v;
					y[j + span] = u - v;
				}
	}
}
