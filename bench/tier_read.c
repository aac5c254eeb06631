/* bench/tier_read.c — the NVMe tier's restore against plain reads of the
 * same file: N blocks of a TinyLlama-shaped pool (16 tokens, 22 layers,
 * 4 KV heads of 64: 352 KiB) are written through the tier, then read back
 * three ways, alternating round by round:
 *   tier     kv_tier_fetch of every block, one submission, reaped: io_uring
 *            straight into the (registered) pool where it is aligned,
 *            checked with CRC32C, published
 *   pread    the same restore done by hand: a pread loop over the slots,
 *            the same CRC32C and copy into the pool
 *   direct   a plain O_DIRECT pread loop over the same bytes, nothing else
 * usage: tier_read DIR [N_BLOCKS [ROUNDS]]. Prints a line per round, then
 * one line per figure (medians over the rounds; the first round, which
 * warms up, is left out when there are more). Timings mean something only
 * on a quiet machine with the tier's file on the disk to measure.
 */
#include "daemon/kv/crc32c.h"
#include "daemon/kv/kv.h"
#include "daemon/kv/tier.h"
#include "kernels/pg_backend.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof *v, cmp_d);
	return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : NAN;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: tier_read DIR [N_BLOCKS [ROUNDS]]\n");
		return 2;
	}
	int n = argc > 2 ? atoi(argv[2]) : 500, rounds = argc > 3 ? atoi(argv[3]) : 3;
	struct kv_pool pool;
	char err[512];
	struct pg_backend *be;
	const struct pg_backend_opts bo = { .threads = 1 };
	if (pg_backend_open("cpu", &bo, &be, err, sizeof err) ||
	    kv_pool_init(&pool, be, n + 1, 16, 22, 256, true, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	size_t bb = kv_pool_block_bytes(&pool);
	struct kv_tier_opts o = { .dir = argv[1], .size = KV_TIER_FILE_HDR + (int64_t)(n + 8) * (int64_t)(bb + 4096),
				  .fingerprint = 0x7e57 };
	struct kv_tier *t;
	if (kv_tier_open(&t, &o, &pool, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	/* n published blocks of pseudo-random bytes, written through the tier */
	struct kv_seq s = { 0 };
	int32_t *toks = malloc(((size_t)n * 16 + 1) * sizeof *toks);
	for (int i = 0; i < n * 16 + 1; i++)
		toks[i] = i * 7 + 3;
	kv_seq_reserve(&pool, &s, n * 16 + 1);
	uint64_t x = 88172645463325252ull;
	uint8_t *blk = malloc(bb);
	for (int i = 0; i < n; i++) {
		for (size_t j = 0; j < bb; j += 8) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			memcpy(blk + j, &x, 8);
		}
		kv_block_copy_in(&pool, s.blocks[i], blk);
	}
	kv_seq_commit(&pool, &s, toks, n * 16 + 1);
	struct kv_hash *h = malloc(n * sizeof *h);
	for (int i = 0; i < n; i++)
		h[i] = pool.meta[s.blocks[i]].hash;
	kv_seq_release(&pool, &s);
	kv_tier_flush(t, &pool); /* every cached block, as a shutdown does */
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	if (st.blocks_out != (uint64_t)n) {
		fprintf(stderr, "tier_read: %llu of %d blocks written\n", (unsigned long long)st.blocks_out, n);
		return 1;
	}
	size_t slot = st.slot_bytes;
	char path[4200];
	snprintf(path, sizeof path, "%s/pagoda-kv.tier", argv[1]);
	int fd = open(path, O_RDONLY | O_DIRECT);
	uint8_t *buf = aligned_alloc(4096, slot);
	if (fd < 0 || !buf || !st.direct) {
		fprintf(stderr, "tier_read: O_DIRECT on %s is needed\n", path);
		return 1;
	}
	double bytes = (double)n * slot;
	double *g_tier = calloc(rounds, sizeof(double)), *g_pread = calloc(rounds, sizeof(double)),
	       *g_direct = calloc(rounds, sizeof(double)), *r_direct = calloc(rounds, sizeof(double)),
	       *r_pread = calloc(rounds, sizeof(double));
	int n_ok = 0, all_bad = 0;
	printf("tier_read: %d blocks of %zu bytes (slots of %zu), O_DIRECT%s, %d rounds\n", n, bb, slot,
	       st.pool_bufs ? ", the pool registered with io_uring" : ", the pool NOT registered (readv)", rounds);
	for (int r = 0; r < rounds; r++) {
		kv_drop_cache(&pool);
		double t0 = now_s();
		for (int i = 0; i < n; i++)
			kv_tier_fetch(t, &pool, h[i]);
		kv_tier_submit(t);
		while (kv_tier_inflight(t))
			kv_tier_reap(t, &pool, 100);
		double t_tier = now_s() - t0;
		int got = 0;
		for (int i = 0; i < n; i++)
			got += kv_pool_has(&pool, h[i]);

		/* the slots in the order the tier wrote them: 0..n-1 */
		kv_drop_cache(&pool);
		int bad = 0;
		t0 = now_s();
		for (int i = 0; i < n; i++) {
			int32_t b = kv_block_take(&pool);
			if (pread(fd, buf, slot, KV_TIER_FILE_HDR + (off_t)i * slot) != (ssize_t)slot)
				bad++;
			uint32_t want;
			memcpy(&want, buf + 48, 4); /* data_crc in the slot header (tier.c) */
			bad += crc32c(0, buf + KV_TIER_SLOT_HDR, bb) != want;
			kv_block_copy_in(&pool, b, buf + KV_TIER_SLOT_HDR);
			kv_block_put(&pool, b);
		}
		double t_pread = now_s() - t0;

		t0 = now_s();
		for (int i = 0; i < n; i++)
			if (pread(fd, buf, slot, KV_TIER_FILE_HDR + (off_t)i * slot) != (ssize_t)slot)
				bad++;
		double t_direct = now_s() - t0;
		printf("tier_read: round %d: tier %.3f GB/s (%d of %d verified), pread restore %.3f GB/s, "
		       "O_DIRECT loop %.3f GB/s%s\n",
		       r, bytes / t_tier / 1e9, got, n, bytes / t_pread / 1e9, bytes / t_direct / 1e9,
		       bad ? " (BAD reads in the loops)" : "");
		fflush(stdout);
		all_bad += bad + (n - got);
		if (rounds > 1 && r == 0)
			continue; /* warm-up */
		g_tier[n_ok] = bytes / t_tier / 1e9;
		g_pread[n_ok] = bytes / t_pread / 1e9;
		g_direct[n_ok] = bytes / t_direct / 1e9;
		r_direct[n_ok] = t_direct / t_tier;
		r_pread[n_ok++] = t_pread / t_tier;
	}
	printf("tier restore (io_uring, checked, into the pool): %.3f GB/s\n", median(g_tier, n_ok));
	printf("plain O_DIRECT pread loop, same file: %.3f GB/s\n", median(g_direct, n_ok));
	printf("pread-loop restore (same checks and copy): %.3f GB/s\n", median(g_pread, n_ok));
	printf("tier / plain O_DIRECT loop: %.0f%% (target >= 80%%)\n", 100 * median(r_direct, n_ok));
	printf("io_uring restore / pread-loop restore: %.2fx\n", median(r_pread, n_ok));
	if (all_bad)
		printf("tier_read: %d blocks failed to verify or read: the figures above are void\n", all_bad);
	free(g_tier);
	free(g_pread);
	free(g_direct);
	free(r_direct);
	free(r_pread);
	close(fd);
	kv_tier_close(t);
	kv_pool_free(&pool);
	pg_backend_close(be);
	free(buf);
	free(blk);
	free(h);
	free(toks);
	return all_bad ? 1 : 0;
}
