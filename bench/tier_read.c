/* bench/tier_read.c — the NVMe tier's restore against plain reads of the
 * same file: N blocks of a TinyLlama-shaped pool (16 tokens, 22 layers,
 * 4 KV heads of 64: 352 KiB) are written through the tier, then read back
 * three ways, alternating round by round:
 *   tier     kv_tier_fetch of every block, one submission, reaped (checked
 *            with CRC32C, copied into the pool, published)
 *   pread    the same restore done by hand: a pread loop over the slots,
 *            the same CRC32C and copy into the pool
 *   direct   a plain O_DIRECT pread loop over the same bytes, nothing else
 * usage: tier_read DIR [N_BLOCKS [ROUNDS]]; prints one JSON line per round.
 */
#include "daemon/kv/crc32c.h"
#include "daemon/kv/kv.h"
#include "daemon/kv/tier.h"
#include "kernels/pg_backend.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
	for (int i = 0; i < n; i++) {
		h[i] = pool.meta[s.blocks[i]].hash;
		kv_tier_save(t, &pool, s.blocks[i]);
	}
	kv_seq_release(&pool, &s);
	kv_tier_submit(t);
	while (kv_tier_inflight(t))
		kv_tier_reap(t, &pool, 100);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
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
		printf("{\"what\":\"tier_read\",\"round\":%d,\"blocks\":%d,\"slot_bytes\":%zu,\"verified\":%d,"
		       "\"bad\":%d,\"tier_gbs\":%.3f,\"pread_restore_gbs\":%.3f,\"direct_read_gbs\":%.3f,"
		       "\"tier_over_direct\":%.3f,\"tier_over_pread\":%.3f}\n",
		       r, n, slot, got, bad, bytes / t_tier / 1e9, bytes / t_pread / 1e9, bytes / t_direct / 1e9,
		       t_direct / t_tier, t_pread / t_tier);
		fflush(stdout);
	}
	close(fd);
	kv_tier_close(t);
	kv_pool_free(&pool);
	pg_backend_close(be);
	free(buf);
	free(blk);
	free(h);
	free(toks);
	return 0;
}
