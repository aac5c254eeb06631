/* bench/peer_vec_dot.c — pagoda's quantized dot products against ggml's own,
 * bit for bit: the weight types whose CPU matmul in llama.cpp is vec_dot
 * (no repack for one row), on the llama.cpp that `make bench` builds.
 *
 * Per type, random rows are quantized by pagoda (pg_quantize_row) and the
 * activations by both (pagoda's pg_quantize_act and ggml's from_float,
 * which must give the same bytes); then one weight row against one
 * activation row through ggml's vec_dot and through pg_matmul_q, on every
 * ISA this CPU runs. Prints a line per type and ISA; exit 1 on a mismatch.
 * Not part of `make check`: CI has no llama.cpp.
 *
 *   sh mk/peer.sh && make -f mk/build.mk bench-peer
 *   build/bench/bin/peer_vec_dot
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/cpu/kernels.h"

#define ROWS 64
#define K (8 * 256)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static float sample(int heavy)
{
	const float g = (frand() + frand() + frand() + frand()) * 0.866f;
	return heavy ? g * g * g : g;
}

/* 0 when pagoda and ggml agree bit for bit on every pair */
static int check_type(uint32_t t, const char *isa)
{
	const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu((enum ggml_type)t);
	const uint32_t vt = pg_vec_dot_type(t);
	const size_t wr = pg_row_size(t, K), xr = pg_act_row_size(t, K);
	char *W = malloc(wr * ROWS), *Xp = malloc(xr * ROWS), *Xg = malloc(xr * ROWS);
	float *f = malloc(sizeof(float) * K);
	int bad_act = 0, bad = 0;
	double worst = 0;
	for (int r = 0; r < ROWS; r++) {
		for (int i = 0; i < K; i++)
			f[i] = sample(r % 3 == 0);
		pg_quantize_row(t, f, W + wr * r, K);
		for (int i = 0; i < K; i++)
			f[i] = sample(r % 5 == 0) * (r % 2 ? 30.0f : 0.1f);
		pg_quantize_act(t, f, Xp + xr * r, K);
		ggml_get_type_traits_cpu((enum ggml_type)vt)->from_float(f, Xg + xr * r, K);
		bad_act += memcmp(Xp + xr * r, Xg + xr * r, xr) != 0;
	}
	for (int j = 0; j < ROWS; j++)
		for (int r = 0; r < ROWS; r++) {
			float want, got;
			tr->vec_dot(K, &want, 0, W + wr * j, 0, Xg + xr * r, 0, 1);
			pg_matmul_q(NULL, W + wr * j, t, 1, K, Xg + xr * r, 1, &got, 1);
			if (memcmp(&want, &got, sizeof(float)) != 0) {
				bad++;
				const double rel = fabs((double)got - want) / (fabs(want) + 1e-30);
				worst = rel > worst ? rel : worst;
			}
		}
	printf("%-6s %-7s activations %s, %d of %d dots differ", pg_type_name(t), isa,
	       bad_act ? "DIFFER" : "same bytes", bad, ROWS * ROWS);
	if (bad)
		printf(" (worst relative %.2g)", worst);
	printf("\n");
	free(W);
	free(Xp);
	free(Xg);
	free(f);
	return bad || bad_act;
}

int main(void)
{
	static const uint32_t types[] = { PG_TYPE_Q2_K, PG_TYPE_Q3_K, PG_TYPE_Q4_K, PG_TYPE_Q5_K, PG_TYPE_Q6_K,
					  PG_TYPE_Q8_0, PG_TYPE_Q4_0, PG_TYPE_Q5_0, PG_TYPE_Q4_1, PG_TYPE_Q5_1, PG_TYPE_IQ4_NL,
					  PG_TYPE_IQ4_XS };
	static const char *isas[] = { "scalar", "avx2", "avx512" };
	ggml_cpu_init();
	int fails = 0;
	for (size_t a = 0; a < sizeof(isas) / sizeof(isas[0]); a++) {
		if (!pg_cpu_set_isa(isas[a]))
			continue;
		for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
			fails += check_type(types[i], isas[a]);
	}
	return fails ? 1 : 0;
}
