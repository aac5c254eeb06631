/* bench/membw.c — the memory-bandwidth probe of `make bench`: T threads
 * stream reads over a buffer much larger than the caches (each its own
 * slice), the way single-stream decode reads the weights, on 2 MiB pages
 * where the kernel grants them (as the engine holds its weights). Passes
 * alternate a plain read and one that fetches ahead (stream_read.h).
 * Prints the best and the median GB/s (1e9 bytes/s) of all passes, and
 * each way's best.
 *
 *   membw [THREADS=2] [MIB=1024] [PASSES=10] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "stream_read.h"

struct slice {
	const uint64_t *p;
	size_t n;
	uint64_t sum;
	pthread_barrier_t *bar;
	int passes;
	double *secs; /* per pass, written by thread 0 */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	struct slice *s = arg;
	for (int k = 0; k < s->passes; k++) {
		pthread_barrier_wait(s->bar);
		double t0 = now_s();
		s->sum ^= k % 2 ? read_slice_ahead(s->p, s->n) : read_slice(s->p, s->n);
		pthread_barrier_wait(s->bar);
		if (s->secs)
			s->secs[k] = now_s() - t0;
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
	int passes = argc > 3 ? atoi(argv[3]) : 10;
	if (threads < 1 || threads > 256 || mib < 1 || passes < 1) {
		fprintf(stderr, "usage: membw [THREADS] [MIB] [PASSES]\n");
		return 2;
	}
	size_t bytes = mib << 20, n = bytes / 8;
	const size_t huge = 2u << 20, alloc = (bytes + huge - 1) / huge * huge;
	uint64_t *buf = aligned_alloc(huge, alloc);
	if (!buf)
		return 1;
	madvise(buf, alloc, MADV_HUGEPAGE);
	for (size_t i = 0; i < n; i++)
		buf[i] = i * 0x9e3779b97f4a7c15ull;
	double *secs = calloc((size_t)passes, sizeof *secs);
	struct slice *sl = calloc((size_t)threads, sizeof *sl);
	pthread_t *th = calloc((size_t)threads, sizeof *th);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, (unsigned)threads);
	size_t per = n / (size_t)threads / 16 * 16;
	for (int t = 0; t < threads; t++) {
		sl[t] = (struct slice){ .p = buf + (size_t)t * per, .n = per, .bar = &bar, .passes = passes,
					.secs = t == 0 ? secs : NULL };
		pthread_create(&th[t], NULL, run, &sl[t]);
	}
	uint64_t x = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		x ^= sl[t].sum;
	}
	double read = (double)per * 8 * threads, best_way[2] = { 0, 0 };
	for (int k = 0; k < passes; k++)
		if (read / secs[k] > best_way[k % 2])
			best_way[k % 2] = read / secs[k];
	qsort(secs, (size_t)passes, sizeof *secs, cmp);
	printf("{\"threads\":%d,\"mib\":%zu,\"passes\":%d,\"best_gbs\":%.3f,\"median_gbs\":%.3f,\"best_plain_gbs\":%.3f,"
	       "\"best_ahead_gbs\":%.3f,\"check\":%llu}\n",
	       threads, mib, passes, read / secs[0] / 1e9, read / secs[passes / 2] / 1e9, best_way[0] / 1e9,
	       best_way[1] / 1e9, (unsigned long long)(x & 1));
	return 0;
}
