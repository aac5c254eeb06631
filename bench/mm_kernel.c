/* bench/mm_kernel.c — one matmul, timed: random weights of a type, m
 * activation rows, the best of some repetitions (wall clock).
 *
 *   cc -O2 -I. -o build/mm_kernel bench/mm_kernel.c build/libpagoda-engine.a -lm -pthread
 *   build/mm_kernel TYPE N K M THREADS REPS [ISA]     (TYPE as GGUF numbers it: 8 = Q8_0;
 *                                                     39 = Q8_0 as the loader marks it, no -128;
 *                                                     38 = Q4_0 repacked 8 rows at a time)
 *
 * N large enough (131072 x 2048 is 285 MB of Q8_0) reads the weights from
 * memory; small N measures the kernel from cache. Not part of make check:
 * a measuring tool, no assertion.
 */
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/repack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: %s TYPE N K M THREADS REPS [ISA]\n", argv[0]);
		return 2;
	}
	const int type = atoi(argv[1]), th = atoi(argv[5]), reps = atoi(argv[6]);
	const int64_t n = atoll(argv[2]), k = atoll(argv[3]), m = atoll(argv[4]);
	if (argc > 7 && !pg_cpu_set_isa(argv[7])) {
		fprintf(stderr, "ISA %s not available\n", argv[7]);
		return 2;
	}
	/* the random rows are quantized by the file type's quantizer, which
	 * writes no -128, so they are what the loader would mark S127 */
	const uint32_t ftype = type == PG_TYPE_Q8_0_S127 ? PG_TYPE_Q8_0
			       : type == PG_TYPE_Q4_0_X8 ? PG_TYPE_Q4_0
							 : (uint32_t)type;
	const size_t wr = pg_row_size(ftype, (uint64_t)k);
	/* on 2 MiB pages where the kernel grants them, as the engine holds its
	 * weights (kernels/cpu/weights.c), so a from-memory run pays the same TLB misses */
	const size_t wbytes = (wr * (size_t)n + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	char *W = wr ? aligned_alloc(2u << 20, wbytes) : NULL;
	if (W)
		madvise(W, wbytes, MADV_HUGEPAGE);
	float *row = malloc(sizeof(float) * (size_t)k), *X = malloc(sizeof(float) * (size_t)(k * m)),
	      *Y = malloc(sizeof(float) * (size_t)(n * m));
	if (!wr || !W || !row || !X || !Y) {
		fprintf(stderr, "type %d not supported or out of memory\n", type);
		return 1;
	}
	srand(1);
	for (int64_t j = 0; j < n; j++) {
		for (int64_t i = 0; i < k; i++)
			row[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		pg_quantize_row(ftype, row, W + wr * (size_t)j, k);
	}
	if (type == PG_TYPE_Q4_0_X8) {
		/* in place through a copy: the groups are padded, the rows not */
		char *src = malloc(wr * (size_t)n);
		if (!src || pg_q4_0_x8_size(n, k) > wbytes)
			return 1;
		memcpy(src, W, wr * (size_t)n);
		pg_q4_0_x8_repack(src, W, n, k);
		free(src);
	}
	for (int64_t i = 0; i < k * m; i++)
		X[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	struct pg_pool *p = pg_pool_create(th);
	pg_matmul(p, W, (uint32_t)type, n, k, X, m, Y, n);
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t = now();
		pg_matmul(p, W, (uint32_t)type, n, k, X, m, Y, n);
		t = now() - t;
		best = t < best ? t : best;
	}
	printf("%s type %d n %ld k %ld m %ld threads %d: %.3f ms, %.1f GMAC/s, %.1f GB/s of weights\n", pg_cpu_isa(),
	       type, (long)n, (long)k, (long)m, th, best * 1e3, (double)n * k * m / best / 1e9,
	       (double)wr * n / best / 1e9);
	pg_pool_destroy(p);
	return 0;
}
