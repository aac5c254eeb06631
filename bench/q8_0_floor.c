/* bench/q8_0_floor.c — the floor of ggml's Q8_0 order on AVX2 without VNNI:
 * cycles per (block, weight row, activation row) pair of exactly the vector
 * ops that order needs and nothing else — sign(y, w), maddubs(|w|, ·),
 * maddwd(·, 1), cvtdq2ps, the dw·dy multiply and the FMA into the
 * accumulator — as a register-only assembly loop over 8 independent
 * accumulators (the loads come from L1). No kernel can do the same work in
 * fewer cycles on this core; bench/mm_kernel.c measures how close the real
 * one comes. Cycles are wall time times the clock given (GHz, default the
 * 3.09 measured on the Zen 3 of BENCHMARKS.md run 5).
 *
 *   cc -O2 -o build/q8_0_floor bench/q8_0_floor.c && build/q8_0_floor [GHZ]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static float buf[64] __attribute__((aligned(64)));

/* ymm8 = |w|, ymm9 = w, ymm10 = dw, ymm11 = ones; y at (%0), dy at 32(%0) */
#define PAIR(ACC)                                    \
	"vmovdqu (%0),%%ymm12\n\t"                   \
	"vpsignb %%ymm9,%%ymm12,%%ymm12\n\t"         \
	"vpmaddubsw %%ymm12,%%ymm8,%%ymm12\n\t"      \
	"vpmaddwd %%ymm11,%%ymm12,%%ymm12\n\t"       \
	"vcvtdq2ps %%ymm12,%%ymm12\n\t"              \
	"vbroadcastss 32(%0),%%ymm13\n\t"            \
	"vmulps %%ymm10,%%ymm13,%%ymm13\n\t"         \
	"vfmadd231ps %%ymm13,%%ymm12," ACC "\n\t"
#define EIGHT                                                                              \
	PAIR("%%ymm0") PAIR("%%ymm1") PAIR("%%ymm2") PAIR("%%ymm3") PAIR("%%ymm4") PAIR("%%ymm5") \
	PAIR("%%ymm6") PAIR("%%ymm7")

int main(int argc, char **argv)
{
	const double ghz = argc > 1 ? atof(argv[1]) : 3.09;
	const long n = 50000000;
	double best = 1e30;
	for (int rep = 0; rep < 7; rep++) {
		double t = now();
		for (long i = 0; i < n; i++)
			__asm__ volatile(EIGHT : : "r"(buf) : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
					 "xmm7", "xmm12", "xmm13", "memory");
		t = now() - t;
		best = t < best ? t : best;
	}
	printf("ggml Q8_0 order, AVX2: %.2f cycles per block pair at %.2f GHz (best of 7)\n",
	       best * ghz * 1e9 / (n * 8.0), ghz);
	return 0;
}
#else
int main(void)
{
	fprintf(stderr, "x86-64 only\n");
	return 2;
}
#endif
