/* bench/x86_pipes.c — what the core's vector pipes take, in cycles per
 * block of 8 independent 512-bit ops (one kind, or two kinds mixed): the
 * figures behind the kernels' op budgets (docs/kernels.md).
 *
 *   cc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -o build/x86_pipes bench/x86_pipes.c
 *   build/x86_pipes
 *
 * The clock comes from a chain of dependent adds (one a cycle). A pair
 * that takes the time of one kind alone issues on different pipes; one
 * that takes the sum shares them. Not part of make check: a measuring
 * tool, no assertion.
 */
#include <stdio.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

#define X8(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7)
/* accumulators zmm0-7 (dp) and zmm20-27 (FMA: a pair of the two must not
 * chain on one register, or it measures their latencies), results
 * zmm10-17, operands zmm30/31, memory (%0) */
#define DP(k) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #k "\n"
#define FMA(k) "vfmadd231ps %%zmm30, %%zmm31, %%zmm2" #k "\n"
#define MUL(k) "vmulps %%zmm30, %%zmm31, %%zmm1" #k "\n"
#define CVT(k) "vcvtdq2ps %%zmm30, %%zmm1" #k "\n"
#define ADD(k) "vpaddd %%zmm30, %%zmm31, %%zmm1" #k "\n"
#define SHUF(k) "vpshufb %%zmm30, %%zmm31, %%zmm1" #k "\n"
#define PERM(k) "vpermq %%zmm30, %%zmm31, %%zmm1" #k "\n"
#define BLEND(k) "vpblendmd %%zmm30, %%zmm31, %%zmm1" #k "%{%%k1%}\n"
#define LOAD(k) "vmovdqu64 (%0), %%zmm1" #k "\n"
#define BCQ(k) "vpbroadcastq (%0), %%zmm1" #k "\n"
#define BC128(k) "vbroadcasti32x4 (%0), %%zmm1" #k "\n"
#define BC256(k) "vbroadcasti64x4 (%0), %%zmm1" #k "\n"
#define BCGPR(k) "vpbroadcastd %%eax, %%zmm1" #k "\n"

static double ghz;

#define REPS 5000000L
/* the best of 5: the machine is shared */
#define RUN(name, body)                                                                            \
	do {                                                                                       \
		double rbest = 1e30;                                                                  \
		for (int k = 0; k < 5; k++) {                                                      \
			double t = now();                                                          \
			for (long i = 0; i < REPS; i++)                                            \
				__asm__ volatile(body ::"r"(buf)                                   \
						 : "memory", "eax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", \
						   "xmm5", "xmm6", "xmm7", "xmm10", "xmm11", "xmm12",     \
						   "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm20",  \
						   "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26",  \
						   "xmm27");                                              \
			t = now() - t;                                                             \
			rbest = t < rbest ? t : rbest;                                                \
		}                                                                                  \
		printf("%-26s %5.2f\n", name, rbest * ghz * 1e9 / REPS);                            \
	} while (0)

int main(void)
{
	long x = 0;
	double best = 1e30;
	for (int k = 0; k < 5; k++) {
		double t = now();
		for (long i = 0; i < 50000000L; i++)
			__asm__ volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(x));
		t = now() - t;
		best = t < best ? t : best;
	}
	ghz = 2e8 / best / 1e9;
	static char buf[256] __attribute__((aligned(64)));
	__asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n"
			 "kxnorw %%k1, %%k1, %%k1" ::: "xmm30", "xmm31");
	printf("clock %.2f GHz; cycles per 8 ops of each kind\n", ghz);
	RUN("vpdpbusd", X8(DP));
	RUN("vfmadd231ps", X8(FMA));
	RUN("vmulps", X8(MUL));
	RUN("vcvtdq2ps", X8(CVT));
	RUN("vpaddd", X8(ADD));
	RUN("vpshufb", X8(SHUF));
	RUN("vpermq", X8(PERM));
	RUN("load", X8(LOAD));
	RUN("vpbroadcastq m64", X8(BCQ));
	RUN("vpbroadcastd r32", X8(BCGPR));
	RUN("dp + fma", X8(DP) X8(FMA));
	RUN("dp + mul", X8(DP) X8(MUL));
	RUN("dp + cvt", X8(DP) X8(CVT));
	RUN("dp + add", X8(DP) X8(ADD));
	RUN("dp + vpshufb", X8(DP) X8(SHUF));
	RUN("dp + vpermq", X8(DP) X8(PERM));
	RUN("dp + blend", X8(DP) X8(BLEND));
	RUN("dp + load", X8(DP) X8(LOAD));
	RUN("dp + vpbroadcastq m64", X8(DP) X8(BCQ));
	RUN("dp + vbroadcasti32x4", X8(DP) X8(BC128));
	RUN("dp + vbroadcasti64x4", X8(DP) X8(BC256));
	RUN("dp + cvt + add + add", X8(DP) X8(CVT) X8(ADD) X8(ADD));
	return 0;
}
