/* bench/peer_matmul.c — pagoda's matmul against llama.cpp's CPU backend,
 * bit for bit, batch by batch: a ggml graph of one mul_mat (weights in the
 * CPU backend's repack buffer where llama.cpp puts them, Q4_0, IQ4_NL and
 * Q4_K with a multiple of 8 rows, in the plain CPU buffer otherwise) against
 * pg_matmul_tb on the same weights and the same f32 activations, for
 * batches of 1 to 13 rows, each row flagged as llama.cpp's ubatch would
 * compute it (F32/F16, IQ4_NL not repacked: tinyBLAS from 2 rows; Q4_K:
 * the 4-row gemm for the first m - m % 4; IQ4_XS: the panel gemm from 8
 * rows); the repacked types also as the
 * loader repacks them (PG_TYPE_*_X8). Q4_0 and IQ4_NL run twice, with 64
 * rows and with 60 (not repacked). Prints, per type and batch, which rows
 * differ; exit 1 if any does. pagoda's F32/F16 kernels follow llama.cpp's
 * AVX-512 build (the reference's), so against a llama.cpp built for AVX2
 * they differ by design and are reported but not counted. IQ4_XS batches
 * of 8 rows or more take llama.cpp's IQ panel gemm (iqp.cpp). Not part of
 * `make check`: CI has no llama.cpp.
 *
 *   sh mk/peer.sh && make -f mk/build.mk bench-peer
 *   build/bench/bin/peer_matmul
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/repack.h"

#define K 1024

static int N = 64; /* weight rows of the case at hand */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static ggml_backend_buffer_type_t repack_buft(void)
{
	ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
	ggml_backend_dev_get_extra_bufts_t get =
		(ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
	for (ggml_backend_buffer_type_t *b = get ? get(dev) : NULL; b && *b; b++)
		if (strstr(ggml_backend_buft_name(*b), "REPACK"))
			return *b;
	return NULL;
}

/* ggml's Y (m x N) for W (N rows of type t) and X (m x K) */
static void ggml_y(ggml_backend_t be, uint32_t t, const void *W, const float *X, int m, float *Y)
{
	const bool repack = (t == PG_TYPE_Q4_0 || t == PG_TYPE_IQ4_NL || t == PG_TYPE_Q4_K) && N % 8 == 0;
	struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
	struct ggml_context *cw = ggml_init(ip), *cx = ggml_init(ip);
	struct ggml_tensor *w = ggml_new_tensor_2d(cw, (enum ggml_type)t, K, N);
	struct ggml_tensor *x = ggml_new_tensor_2d(cx, GGML_TYPE_F32, K, m);
	struct ggml_tensor *y = ggml_mul_mat(cx, w, x);
	ggml_backend_buffer_type_t rb = repack ? repack_buft() : NULL;
	ggml_backend_buffer_t bw = ggml_backend_alloc_ctx_tensors_from_buft(
		cw, rb ? rb : ggml_backend_get_default_buffer_type(be));
	ggml_backend_buffer_t bx = ggml_backend_alloc_ctx_tensors(cx, be);
	ggml_backend_tensor_set(w, W, 0, ggml_nbytes(w));
	ggml_backend_tensor_set(x, X, 0, ggml_nbytes(x));
	struct ggml_cgraph *g = ggml_new_graph(cx);
	ggml_build_forward_expand(g, y);
	ggml_backend_graph_compute(be, g);
	ggml_backend_tensor_get(y, Y, 0, ggml_nbytes(y));
	ggml_backend_buffer_free(bw);
	ggml_backend_buffer_free(bx);
	ggml_free(cw);
	ggml_free(cx);
}

int main(void)
{
	static const struct {
		uint32_t t;
		int n;
	} cases[] = { { PG_TYPE_F32, 64 },  { PG_TYPE_F16, 64 },    { PG_TYPE_Q4_K, 64 },   { PG_TYPE_Q4_0, 64 },
		      { PG_TYPE_Q4_0, 60 }, { PG_TYPE_IQ4_NL, 64 }, { PG_TYPE_IQ4_NL, 60 }, { PG_TYPE_Q8_0, 64 },
		      { PG_TYPE_Q2_K, 64 }, { PG_TYPE_Q3_K, 64 },   { PG_TYPE_Q5_K, 64 },   { PG_TYPE_Q6_K, 64 },
		      { PG_TYPE_Q5_0, 64 }, { PG_TYPE_Q4_1, 64 },   { PG_TYPE_IQ4_XS, 64 } };
	static const int ms[] = { 1, 2, 3, 4, 5, 7, 8, 9, 13, 22, 64, 101, 329 };
	ggml_backend_t be = ggml_backend_cpu_init();
	ggml_backend_cpu_set_n_threads(be, 2);
	struct pg_pool *pool = pg_pool_create(2);
	int fails = 0;
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const uint32_t t = cases[ci].t;
		N = cases[ci].n;
		const size_t wr = pg_row_size(t, K);
		char *W = malloc(wr * N);
		float row[K];
		for (int j = 0; j < N; j++) {
			for (int i = 0; i < K; i++)
				row[i] = frand() * (j % 3 ? 1.0f : 0.05f);
			pg_quantize_row(t, row, W + wr * j, K);
		}
		void *Wx = NULL;
		uint32_t tx = PG_TYPE_COUNT;
		if (t == PG_TYPE_Q4_K && posix_memalign(&Wx, 64, pg_q4_K_x8_size(N, K)) == 0) {
			pg_q4_K_x8_repack(W, Wx, N, K);
			tx = PG_TYPE_Q4_K_X8;
		} else if ((t == PG_TYPE_Q4_0 || t == PG_TYPE_IQ4_NL) && N % 8 == 0 &&
			   posix_memalign(&Wx, 64, pg_q4_0_x8_size(N, K)) == 0) {
			pg_q4_0_x8_repack(W, Wx, N, K);
			tx = t == PG_TYPE_Q4_0 ? PG_TYPE_Q4_0_X8 : PG_TYPE_IQ4_NL_X8;
		}
		printf("%-6s n=%d", pg_type_name(t), N);
		for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
			const int m = ms[mi];
			float *X = malloc(sizeof(float) * K * m), *Yg = malloc(sizeof(float) * N * m),
			      *Yp = malloc(sizeof(float) * N * m);
			for (int i = 0; i < K * m; i++)
				X[i] = frand() * 3.0f;
			ggml_y(be, t, W, X, m, Yg);
			bool tb[512];
			for (int r = 0; r < m; r++)
				tb[r] = t == PG_TYPE_Q4_K ? r < m - m % 4 : t == PG_TYPE_IQ4_XS ? m >= 8 : m >= 2;
			pg_matmul_tb(pool, W, t, N, K, X, m, Yp, N, tb);
			char bad[128] = "";
			for (int r = 0; r < m; r++)
				if (memcmp(Yg + (size_t)r * N, Yp + (size_t)r * N, sizeof(float) * N) != 0)
					snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "%s%d", *bad ? "," : "", r);
			if (Wx) { /* and as the loader repacks it */
				pg_matmul_tb(pool, Wx, tx, N, K, X, m, Yp, N, tb);
				for (int r = 0; r < m; r++)
					if (memcmp(Yg + (size_t)r * N, Yp + (size_t)r * N, sizeof(float) * N) != 0)
						snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "%sx8:%d",
							 *bad ? "," : "", r);
			}
			printf("  m=%d:%s", m, *bad ? bad : "ok");
			fails += *bad != 0 && (ggml_cpu_has_avx512() || (t != PG_TYPE_F32 && t != PG_TYPE_F16));
			free(X);
			free(Yg);
			free(Yp);
		}
		if ((t == PG_TYPE_F32 || t == PG_TYPE_F16) && !ggml_cpu_has_avx512())
			printf("  (not counted: this llama.cpp is not its AVX-512 build)");
		printf("\n");
		free(W);
		free(Wx);
	}
	pg_pool_destroy(pool);
	ggml_backend_free(be);
	return fails ? 1 : 0;
}
