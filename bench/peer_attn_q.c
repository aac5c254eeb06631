/* bench/peer_attn_q.c — attention over a quantized KV cache against ggml's
 * own, bit for bit, on the llama.cpp that `make bench` builds: for every
 * pair of cache types (-ctk/-ctv), rows written by ggml_set_rows and by
 * pg_kv_store_row (the same bytes), then ggml_flash_attn_ext on the
 * permuted cache views llama.cpp builds against pg_attn_chunk_q, one query
 * token of 4 heads over 2 KV heads, on every ISA this CPU runs; and the
 * Hadamard rotation llama.cpp applies around such a cache. Prints
 * a line per case that differs and a summary; exit 1 on a mismatch.
 * Not part of `make check`: CI has no llama.cpp.
 *
 *   sh mk/peer.sh && make -f mk/build.mk bench-peer
 *   build/bench/bin/peer_attn_q
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/cpu/kernels.h"

#define HKV 2
#define NH 4

static uint64_t rng = 0x243F6A8885A308D3ull;
static float grand(void)
{
	float s = 0;
	for (int i = 0; i < 4; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		s += (float)((rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
	}
	return s * 0.866f;
}

static const struct {
	const char *name;
	uint32_t pg;
	enum ggml_type gg;
} types[] = {
	{ "f16", PG_TYPE_F16, GGML_TYPE_F16 },	     { "q8_0", PG_TYPE_Q8_0, GGML_TYPE_Q8_0 },
	{ "q4_0", PG_TYPE_Q4_0, GGML_TYPE_Q4_0 },    { "q4_1", PG_TYPE_Q4_1, GGML_TYPE_Q4_1 },
	{ "iq4_nl", PG_TYPE_IQ4_NL, GGML_TYPE_IQ4_NL }, { "q5_0", PG_TYPE_Q5_0, GGML_TYPE_Q5_0 },
	{ "q5_1", PG_TYPE_Q5_1, GGML_TYPE_Q5_1 },
};
#define NT ((int)(sizeof types / sizeof types[0]))
static const char *const isas[] = { "scalar", "avx2", "avx512" };

/* One case: returns the number of mismatches (bytes or outputs). */
static int one(int ik, int iv, int hd, int n_kv, float qscale)
{
	const int kvd = HKV * hd;
	const size_t mem = (size_t)64 << 20;
	struct ggml_init_params ip = { mem, NULL, false };
	struct ggml_context *ctx = ggml_init(ip);
	struct ggml_tensor *kf = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kvd, n_kv);
	struct ggml_tensor *vf = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kvd, n_kv);
	struct ggml_tensor *idx = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n_kv);
	struct ggml_tensor *kc = ggml_new_tensor_2d(ctx, types[ik].gg, kvd, n_kv);
	struct ggml_tensor *vc = ggml_new_tensor_2d(ctx, types[iv].gg, kvd, n_kv);
	struct ggml_tensor *qs = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hd, NH, 1);
	for (int i = 0; i < kvd * n_kv; i++) {
		((float *)kf->data)[i] = grand() * 2.0f;
		((float *)vf->data)[i] = grand();
	}
	for (int i = 0; i < n_kv; i++)
		((int64_t *)idx->data)[i] = i;
	for (int i = 0; i < hd * NH; i++)
		((float *)qs->data)[i] = grand() * qscale;
	struct ggml_cgraph *g1 = ggml_new_graph(ctx);
	ggml_build_forward_expand(g1, ggml_set_rows(ctx, kc, kf, idx));
	ggml_build_forward_expand(g1, ggml_set_rows(ctx, vc, vf, idx));
	ggml_graph_compute_with_ctx(ctx, g1, 1);

	int bad = 0;
	/* pagoda's rows */
	const size_t krow = pg_row_size(types[ik].pg, kvd), vrow = pg_row_size(types[iv].pg, kvd);
	uint8_t *pk = malloc(krow * n_kv), *pv = malloc(vrow * n_kv);
	for (int p = 0; p < n_kv; p++) {
		pg_kv_store_row(types[ik].pg, (const float *)kf->data + (size_t)p * kvd, pk + p * krow, kvd);
		pg_kv_store_row(types[iv].pg, (const float *)vf->data + (size_t)p * kvd, pv + p * vrow, kvd);
	}
	if (memcmp(pk, kc->data, krow * n_kv) || memcmp(pv, vc->data, vrow * n_kv)) {
		printf("rows differ: K %s V %s hd %d\n", types[ik].name, types[iv].name, hd);
		bad++;
	}

	/* llama.cpp's views: [hd, n_kv, heads] of the [kvd, n_kv] cache */
	struct ggml_tensor *k = ggml_view_3d(ctx, kc, hd, HKV, n_kv, ggml_row_size(kc->type, hd),
					     ggml_row_size(kc->type, kvd), 0);
	struct ggml_tensor *v = ggml_view_3d(ctx, vc, hd, HKV, n_kv, ggml_row_size(vc->type, hd),
					     ggml_row_size(vc->type, kvd), 0);
	k = ggml_permute(ctx, k, 0, 2, 1, 3);
	v = ggml_permute(ctx, v, 0, 2, 1, 3);
	struct ggml_tensor *q = ggml_permute(ctx, qs, 0, 2, 1, 3);
	const float scale = 1.0f / sqrtf((float)hd);
	struct ggml_tensor *fa = ggml_flash_attn_ext(ctx, q, k, v, NULL, scale, 0.0f, 0.0f);
	ggml_prec_set_acc(fa, GGML_PREC_F32);
	struct ggml_cgraph *g2 = ggml_new_graph(ctx);
	ggml_build_forward_expand(g2, fa);
	ggml_graph_compute_with_ctx(ctx, g2, 1);
	const float *want = fa->data; /* [hd, NH, 1] */

	const uint8_t *kb[HKV], *vb[HKV];
	float got[NH * 512];
	for (int h = 0; h < HKV; h++) {
		kb[h] = (const uint8_t *)kc->data + h * ggml_row_size(kc->type, hd);
		vb[h] = (const uint8_t *)vc->data + h * ggml_row_size(vc->type, hd);
	}
	const char *saved = pg_cpu_isa();
	for (int is = 0; is < 3; is++) {
		if (!pg_cpu_set_isa(isas[is]))
			continue;
		for (int h = 0; h < HKV; h++) {
			const struct pg_attn_kvq kv = { &kb[h], &vb[h], types[ik].pg, types[iv].pg, n_kv, krow, vrow };
			pg_attn_chunk_q(&kv, n_kv, hd, scale, (const float *)qs->data + (size_t)h * (NH / HKV) * hd, hd,
					NH / HKV, got + (size_t)h * (NH / HKV) * hd, hd);
		}
		int diff = 0, first = -1;
		for (int i = 0; i < NH * hd; i++)
			if (memcmp(&got[i], &want[i], 4)) {
				diff++;
				if (first < 0)
					first = i;
			}
		if (diff) {
			printf("K %-6s V %-6s hd %3d n_kv %4d %-6s: %d of %d differ, first [%d] %.9g want %.9g\n",
			       types[ik].name, types[iv].name, hd, n_kv, isas[is], diff, NH * hd, first, got[first],
			       want[first]);
			bad++;
		}
	}
	pg_cpu_set_isa(saved);
	free(pk);
	free(pv);
	ggml_free(ctx);
	return bad;
}

/* llama.cpp's Hadamard rotation of what a quantized cache holds (a
 * mul_mat hinted GGML_HINT_SRC0_IS_HADAMARD: ggml's FWHT) against
 * pg_kv_rotate: 0 or 1 mismatch. */
static int rotation(int n)
{
	struct ggml_init_params ip = { (size_t)16 << 20, NULL, false };
	struct ggml_context *ctx = ggml_init(ip);
	const int rows = 8;
	struct ggml_tensor *rot = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
	struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
	float *mine = malloc((size_t)n * rows * sizeof(float));
	for (int i = 0; i < n * rows; i++)
		mine[i] = ((float *)x->data)[i] = grand() * 3.0f;
	memset(rot->data, 0, (size_t)n * n * sizeof(float)); /* not read: the hint says what it is */
	struct ggml_tensor *y = ggml_mul_mat(ctx, rot, x);
	ggml_mul_mat_set_hint(y, GGML_HINT_SRC0_IS_HADAMARD);
	struct ggml_cgraph *g = ggml_new_graph(ctx);
	ggml_build_forward_expand(g, y);
	ggml_graph_compute_with_ctx(ctx, g, 1);
	pg_kv_rotate(mine, (int64_t)n * rows, n);
	const int bad = memcmp(mine, y->data, (size_t)n * rows * sizeof(float)) != 0;
	if (bad)
		printf("rotation of %d differs\n", n);
	free(mine);
	ggml_free(ctx);
	return bad;
}

int main(void)
{
	static const int shapes[][2] = { { 64, 1 }, { 64, 7 }, { 64, 45 }, { 64, 300 }, { 128, 7 }, { 128, 45 } };
	/* Built -march=native on a CPU with AVX512-FP16, ggml sums an f16 V
	 * of 128 or more per head in half precision (GGML_F16_STEP 128);
	 * pagoda follows its f32 path, which every other x86 build takes. */
	__builtin_cpu_init();
	const bool fp16 = __builtin_cpu_supports("avx512fp16");
	int bad = 0, cases = 0, skipped = 0;
	for (int n = 64; n <= 256; n *= 2, cases++)
		bad += rotation(n);
	for (int ik = 0; ik < NT; ik++)
		for (int iv = 0; iv < NT; iv++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
				if (fp16 && iv == 0 && shapes[s][0] >= 128) {
					skipped++;
					continue;
				}
				bad += one(ik, iv, shapes[s][0], shapes[s][1], s == 3 ? 4.0f : 1.0f);
				cases++;
			}
	printf("peer_attn_q: %d cases, %d mismatches", cases, bad);
	if (skipped)
		printf("; %d skipped: f16 V with heads of 128 (this CPU has AVX512-FP16, where ggml sums it in halves)",
		       skipped);
	printf("\n");
	return bad != 0;
}
