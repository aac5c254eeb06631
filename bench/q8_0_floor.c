/* bench/q8_0_floor.c — what ggml's Q8_0 order costs on AVX2 without VNNI,
 * in cycles per (block, weight row, activation row) pair, and two forms
 * that give the same lane sums.
 *
 * The floor: exactly the vector ops that order needs and nothing else —
 * sign(y, w), maddubs(|w|, ·), maddwd(·, 1), cvtdq2ps, the dw·dy multiply
 * and the FMA into the accumulator — as a register-only assembly loop over
 * 8 independent accumulators (the loads come from L1). No kernel in that
 * order can do the same work in fewer cycles on this core; bench/mm_kernel.c
 * measures how close the real one comes.
 *
 * The forms, as the 2 x 4 tile of kernels/cpu/q8_0_avx2.c would run them
 * (2 weight rows, 4 activation rows, 8 accumulators, operands in L1):
 *
 *   ggml:  maddubs(|w|, sign(y, w)), madd with ones, cvt, fma — the form
 *          the kernel uses (5 vector ops per block pair);
 *   int16: weights and activations widened to int16 with each block's
 *          elements ordered (0,1,4,5,...,28,29 | 2,3,6,7,...,30,31), so
 *          madd(lo) + madd(hi) gives lane g = elements 4g..4g+3, the same
 *          integers as ggml's lanes (same float order, same bits);
 *          either the weights are in that order in memory (a load-time
 *          permutation: two vpmovsxbw per row per block) or each block is
 *          shuffled in the kernel (pshufb, vpermq, two vpmovsxbw);
 *   even/odd: the weights as they are, split per row and block by shifts
 *          into int16 lanes of their even and odd bytes (vpsllw + vpsraw,
 *          vpsraw), the activations packed the same way: madd(even) +
 *          madd(odd) is again ggml's lane g, with no new weight layout.
 *
 * On Zen 3 fma and sign share pipes 0/1 and the two integer multiplies
 * pipes 0/3; the int16 forms trade the sign for an add that any pipe
 * takes. Cycles are wall time times the clock given (GHz, default the
 * 3.09 measured on the Zen 3 of the AVX2 runs); the floor best of 7,
 * the forms best of 5, three times, in brackets the ratio to ggml's form.
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

/* w rows at 0 and 64, int8 y rows at 256 + 32 r, int16 y rows at
 * 512 + 64 r, scale products at 1024, the shuffle mask at 2048 */
static char buf[4096] __attribute__((aligned(64)));
static const short ones[16] __attribute__((aligned(32))) = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };

#define G_PAIR(OFF, Q, A, C)                                   \
	"vpsignb %%" Q ", %%ymm13, %%ymm14\n\t"                \
	"vpmaddubsw %%ymm14, %%" A ", %%ymm14\n\t"             \
	"vpmaddwd %%ymm12, %%ymm14, %%ymm14\n\t"               \
	"vcvtdq2ps %%ymm14, %%ymm14\n\t"                       \
	"vbroadcastss " #OFF "+1024(%0), %%ymm15\n\t"          \
	"vfmadd231ps %%ymm14, %%ymm15, %%" C "\n\t"
#define G_ROW(YOFF, R, C0, C1)                                 \
	"vmovdqu " #YOFF "(%0), %%ymm13\n\t"                   \
	G_PAIR(R * 4, "ymm8", "ymm10", C0) G_PAIR(16 + R * 4, "ymm9", "ymm11", C1)
#define G_BLOCK                                                \
	"vmovdqu 0(%0), %%ymm8\n\t"                            \
	"vmovdqu 64(%0), %%ymm9\n\t"                           \
	"vpabsb %%ymm8, %%ymm10\n\t"                           \
	"vpabsb %%ymm9, %%ymm11\n\t"                           \
	G_ROW(256, 0, "ymm0", "ymm4") G_ROW(288, 1, "ymm1", "ymm5") \
	G_ROW(320, 2, "ymm2", "ymm6") G_ROW(352, 3, "ymm3", "ymm7")

#define W_PAIR(OFF, YOFF, LO, HI, C)                           \
	"vpmaddwd " #YOFF "(%0), %%" LO ", %%ymm12\n\t"        \
	"vpmaddwd " #YOFF "+32(%0), %%" HI ", %%ymm13\n\t"     \
	"vpaddd %%ymm13, %%ymm12, %%ymm12\n\t"                 \
	"vcvtdq2ps %%ymm12, %%ymm12\n\t"                       \
	"vbroadcastss " #OFF "+1024(%0), %%ymm14\n\t"          \
	"vfmadd231ps %%ymm12, %%ymm14, %%" C "\n\t"
#define W_PAIRS                                                                      \
	W_PAIR(0, 512, "ymm8", "ymm9", "ymm0") W_PAIR(16, 512, "ymm10", "ymm11", "ymm4")   \
	W_PAIR(4, 576, "ymm8", "ymm9", "ymm1") W_PAIR(20, 576, "ymm10", "ymm11", "ymm5")   \
	W_PAIR(8, 640, "ymm8", "ymm9", "ymm2") W_PAIR(24, 640, "ymm10", "ymm11", "ymm6")   \
	W_PAIR(12, 704, "ymm8", "ymm9", "ymm3") W_PAIR(28, 704, "ymm10", "ymm11", "ymm7")
#define W_SHUF(WOFF, LO, HI)                                   \
	"vmovdqu " #WOFF "(%0), %%ymm15\n\t"                   \
	"vpshufb 2048(%0), %%ymm15, %%ymm15\n\t"               \
	"vpermq $0xd8, %%ymm15, %%ymm15\n\t"                   \
	"vpmovsxbw %%xmm15, %%" LO "\n\t"                      \
	"vextracti128 $1, %%ymm15, %%xmm15\n\t"                \
	"vpmovsxbw %%xmm15, %%" HI "\n\t"
#define W_PERM(WOFF, LO, HI)                                   \
	"vpmovsxbw " #WOFF "(%0), %%" LO "\n\t"                \
	"vpmovsxbw " #WOFF "+16(%0), %%" HI "\n\t"
#define W_EVOD(WOFF, EV, OD)                                   \
	"vmovdqu " #WOFF "(%0), %%" OD "\n\t"                  \
	"vpsllw $8, %%" OD ", %%" EV "\n\t"                    \
	"vpsraw $8, %%" EV ", %%" EV "\n\t"                    \
	"vpsraw $8, %%" OD ", %%" OD "\n\t"
#define W_BLOCK_EVOD W_EVOD(0, "ymm8", "ymm9") W_EVOD(64, "ymm10", "ymm11") W_PAIRS
#define W_BLOCK_SHUF W_SHUF(0, "ymm8", "ymm9") W_SHUF(64, "ymm10", "ymm11") W_PAIRS
#define W_BLOCK_PERM W_PERM(0, "ymm8", "ymm9") W_PERM(64, "ymm10", "ymm11") W_PAIRS

#define CLOBBER                                                                                              \
	"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
		"xmm13", "xmm14", "xmm15", "memory"

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

#define TIME(BEST, ASM)                                                   \
	do {                                                              \
		double t = now();                                         \
		for (long i = 0; i < n; i++)                              \
			__asm__ volatile(ASM : : "r"(buf), "r"(ones) : CLOBBER); \
		t = now() - t;                                            \
		BEST = t < BEST ? t : BEST;                               \
	} while (0)

static void floor_pairs(double ghz)
{
	const long n = 50000000; /* x 8 pairs */
	double best = 1e30;
	for (int rep = 0; rep < 7; rep++)
		TIME(best, EIGHT);
	printf("ggml Q8_0 order, AVX2: %.2f cycles per block pair at %.2f GHz (best of 7)\n",
	       best * ghz * 1e9 / (n * 8.0), ghz);
}

static void tile_forms(double ghz)
{
	const long n = 5000000; /* x 4 blocks x 8 pairs */
	/* ymm12 holds the ones of ggml's form; the int16 forms use it as a temporary */
	for (int rep = 0; rep < 3; rep++) {
		double g = 1e30, s = 1e30, p = 1e30, e = 1e30;
		for (int r = 0; r < 5; r++) {
			TIME(g, "vmovdqa (%1), %%ymm12\n\t" G_BLOCK G_BLOCK G_BLOCK G_BLOCK);
			TIME(s, W_BLOCK_SHUF W_BLOCK_SHUF W_BLOCK_SHUF W_BLOCK_SHUF);
			TIME(p, W_BLOCK_PERM W_BLOCK_PERM W_BLOCK_PERM W_BLOCK_PERM);
			TIME(e, W_BLOCK_EVOD W_BLOCK_EVOD W_BLOCK_EVOD W_BLOCK_EVOD);
		}
		const double k = ghz * 1e9 / (n * 32.0);
		printf("cycles per block pair: ggml %.2f, int16 shuffled in the kernel %.2f, int16 permuted at load %.2f "
		       "(%.3f), even/odd %.2f (%.3f)\n",
		       g * k, s * k, p * k, p / g, e * k, e / g);
	}
}

int main(int argc, char **argv)
{
	const double ghz = argc > 1 ? atof(argv[1]) : 3.09;
	floor_pairs(ghz);
	tile_forms(ghz);
	return 0;
}
#else
int main(void)
{
	fprintf(stderr, "x86-64 only\n");
	return 2;
}
#endif
