/* tests/unit/test_tier.c — the NVMe tier on a real file with real
 * io_uring: CRC32C, a round trip through the file, the pool's evictions
 * landing there, the tier's own LRU, a warm restart (and a cold one for
 * another model or a corrupt header), injected faults, ENOSPC at
 * preallocation, direct I/O to and from the registered pool (and its
 * fallback under RLIMIT_MEMLOCK), saves that never wait, the warm scan in
 * batches, and dropping the tier. */
#include "daemon/kv/crc32c.h"
#include "daemon/kv/kv.h"
#include "daemon/kv/tier.h"
#include "kernels/pg_backend.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define BS 4
#define NB 8

static struct kv_pool pool;
static struct pg_backend *be;
static char dir[256];
static int n_logs;
static char last_log[512];

static void on_log(void *user, int level, const char *msg)
{
	n_logs++;
	snprintf(last_log, sizeof last_log, "%s", msg);
}

static void setup(void)
{
	char err[256];
	const struct pg_backend_opts bo = { .threads = 1 };
	ck_assert_msg(pg_backend_open("cpu", &bo, &be, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(kv_pool_init(&pool, be, NB, BS, 2, 8, true, err, sizeof err), 0);
	snprintf(dir, sizeof dir, "%s/pagoda-tier-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	n_logs = 0;
}

static void teardown(void)
{
	kv_pool_free(&pool);
	pg_backend_close(be);
	char path[300];
	snprintf(path, sizeof path, "%s/pagoda-kv.tier", dir);
	unlink(path);
	rmdir(dir);
}

static bool sqpoll;

static struct kv_tier *open_tier(int64_t slots, uint64_t fp, const char *fault)
{
	int64_t slot = KV_TIER_SLOT_HDR + (kv_pool_block_bytes(&pool) + 4095) / 4096 * 4096;
	struct kv_tier_opts o = { .dir = dir, .size = KV_TIER_FILE_HDR + slots * slot, .fingerprint = fp, .fault = fault,
				  .log = on_log, .sqpoll = sqpoll };
	struct kv_tier *t;
	char err[512];
	int r = kv_tier_open(&t, &o, &pool, err, sizeof err);
	ck_assert_msg(r == 0, "%s", err);
	return t;
}

static void settle(struct kv_tier *t)
{
	kv_tier_submit(t);
	for (int i = 0; i < 100 && kv_tier_inflight(t); i++)
		kv_tier_reap(t, &pool, 100);
	ck_assert_int_eq(kv_tier_inflight(t), 0);
}

/* A sequence of n blocks whose K/V bytes are a pattern of (tag, block),
 * committed (so hashed) and released: the blocks stay cached. */
static void fill(int tag, int n, struct kv_hash *hashes)
{
	struct kv_seq s = { 0 };
	int32_t toks[256];
	const int bs = pool.block_size;
	for (int i = 0; i < n * bs + 1; i++)
		toks[i] = tag * 1000 + i;
	ck_assert_int_eq(kv_seq_reserve(&pool, &s, n * bs + 1), 0);
	for (int i = 0; i < n; i++)
		for (int l = 0; l < pool.n_layer; l++)
			for (int j = 0; j < bs * pool.kv_dim; j++) {
				((pg_f16 *)kv_k_block(&pool, &s, l, i))[j] = (pg_f16)(tag * 7 + i * 131 + l * 17 + j);
				((pg_f16 *)kv_v_block(&pool, &s, l, i))[j] = (pg_f16)(tag * 5 + i * 31 + l * 3 + j * 2);
			}
	kv_seq_commit(&pool, &s, toks, n * bs + 1);
	for (int i = 0; i < n; i++)
		hashes[i] = pool.meta[s.blocks[i]].hash;
	kv_seq_release(&pool, &s);
}

static int32_t block_of(struct kv_hash h)
{
	for (int32_t b = 0; b < pool.n_blocks; b++)
		if (pool.meta[b].hashed && pool.meta[b].hash.lo == h.lo && pool.meta[b].hash.hi == h.hi)
			return b;
	return -1;
}

static void check_bytes(int tag, int i, struct kv_hash h)
{
	int32_t b = block_of(h);
	ck_assert_int_ge(b, 0);
	struct kv_seq s = { .blocks = &b, .n_blocks = 1 };
	for (int l = 0; l < pool.n_layer; l++)
		for (int j = 0; j < pool.block_size * pool.kv_dim; j++) {
			ck_assert_uint_eq(((pg_f16 *)kv_k_block(&pool, &s, l, 0))[j], (pg_f16)(tag * 7 + i * 131 + l * 17 + j));
			ck_assert_uint_eq(((pg_f16 *)kv_v_block(&pool, &s, l, 0))[j], (pg_f16)(tag * 5 + i * 31 + l * 3 + j * 2));
		}
}

/* Saves the cached blocks, forgets them in the pool, reads them back. */
static void round_trip(struct kv_tier *t, int tag, int n, struct kv_hash *h)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[i])), 0);
	settle(t);
	kv_drop_cache(&pool);
	for (int i = 0; i < n; i++) {
		ck_assert(!kv_pool_has(&pool, h[i]));
		ck_assert(kv_tier_has(t, h[i]));
		ck_assert_int_eq(kv_tier_fetch(t, &pool, h[i]), 0);
		ck_assert(kv_tier_pending(t, h[i]));
	}
	settle(t);
}

START_TEST(test_crc32c)
{
	ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(crc32c_sw(0, "123456789", 9), 0xe3069283u);
	uint8_t buf[1024 + 8];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len < 1024; len += 37)
			ck_assert_uint_eq(crc32c(7, buf + off, len), crc32c_sw(7, buf + off, len));
	/* continuing equals one pass */
	ck_assert_uint_eq(crc32c(crc32c(0, buf, 100), buf + 100, 900), crc32c(0, buf, 1000));
}
END_TEST

START_TEST(test_round_trip)
{
	struct kv_tier *t = open_tier(16, 42, NULL);
	struct kv_hash h[3];
	fill(1, 3, h);
	round_trip(t, 1, 3, h);
	for (int i = 0; i < 3; i++)
		check_bytes(1, i, h[i]);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert(st.direct); /* /tmp here is ext4; tmpfs would fall back */
	ck_assert_uint_eq(st.blocks_out, 3);
	ck_assert_uint_eq(st.blocks_in, 3);
	ck_assert_uint_eq(st.bytes_in, 3 * kv_pool_block_bytes(&pool));
	ck_assert_int_eq(st.slots_used, 3);
	/* the same hash twice is one slot */
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[0])), 1);
	kv_tier_close(t);
}
END_TEST

static void on_evict(void *user, struct kv_pool *p, int32_t b)
{
	kv_tier_save(user, p, b);
}

/* The same through a ring whose submission queue a kernel thread polls. */
START_TEST(test_sqpoll)
{
	sqpoll = true;
	struct kv_tier *t = open_tier(16, 42, NULL);
	sqpoll = false;
	struct kv_hash h[4];
	fill(8, 4, h);
	round_trip(t, 8, 4, h);
	for (int i = 0; i < 4; i++)
		check_bytes(8, i, h[i]);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert(st.sqpoll);
	ck_assert_uint_eq(st.blocks_in, 4);
	kv_tier_close(t);
}
END_TEST

START_TEST(test_evictions_and_lru)
{
	/* 3 slots: of 6 evicted blocks the tier keeps the last 3 */
	struct kv_tier *t = open_tier(3, 42, NULL);
	pool.evict = on_evict;
	pool.evict_user = t;
	struct kv_hash a[NB - 1], x[1];
	fill(1, NB - 1, a); /* 7 cached, a[6] oldest (released last block first), 1 free */
	/* one eviction a step, reaped between steps as the engine does:
	 * a[6], a[5], ..., a[1] */
	for (int r = 0; r < 6; r++) {
		fill(20 + r, 1, x);
		settle(t);
	}
	int kept = 0;
	for (int i = 0; i < NB - 1; i++)
		kept += kv_tier_has(t, a[i]);
	ck_assert_int_eq(kept, 3);
	ck_assert(kv_tier_has(t, a[1]) && kv_tier_has(t, a[2]) && kv_tier_has(t, a[3]));
	pool.evict = NULL;
	kv_drop_cache(&pool);
	ck_assert_int_eq(kv_tier_fetch(t, &pool, a[1]), 0);
	settle(t);
	check_bytes(1, 1, a[1]);
	kv_tier_close(t);
}
END_TEST

START_TEST(test_warm_restart)
{
	struct kv_tier *t = open_tier(16, 42, NULL);
	struct kv_hash h[3];
	fill(3, 3, h);
	kv_tier_flush(t, &pool);
	kv_tier_close(t);
	kv_drop_cache(&pool);

	t = open_tier(16, 42, NULL);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.warm_blocks, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(kv_tier_fetch(t, &pool, h[i]), 0);
	settle(t);
	for (int i = 0; i < 3; i++)
		check_bytes(3, i, h[i]);
	kv_tier_close(t);

	/* another model: empty, and it says so */
	n_logs = 0;
	t = open_tier(16, 43, NULL);
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.warm_blocks, 0);
	ck_assert(!kv_tier_has(t, h[0]));
	ck_assert_int_gt(n_logs, 0);
	ck_assert_ptr_nonnull(strstr(last_log, "different model"));
	kv_tier_close(t);
}
END_TEST

/* The cache types are part of the fingerprint: a restart with other types
 * (here the same block bytes, K and V swapped) starts empty, the same
 * types find their blocks. */
START_TEST(test_cache_types_restart)
{
	static const uint32_t types[2][2] = { { PG_TYPE_Q4_0, PG_TYPE_Q8_0 }, { PG_TYPE_Q8_0, PG_TYPE_Q4_0 } };
	struct kv_hash h[2];
	char err[256];
	for (int round = 0; round < 3; round++) {
		const uint32_t *ty = types[round == 2];
		kv_pool_free(&pool);
		pg_backend_close(be);
		const struct pg_backend_opts bo = { .threads = 1 };
		ck_assert_msg(pg_backend_open("cpu", &bo, &be, err, sizeof err) == 0, "%s", err);
		const struct pg_kv_layout l = { BS, 2, 64, ty[0], ty[1] };
		ck_assert_msg(kv_pool_init_layout(&pool, be, NB, &l, true, err, sizeof err) == 0, "%s", err);
		struct kv_tier *t = open_tier(16, 42, NULL);
		struct kv_tier_stats st;
		kv_tier_get_stats(t, &st);
		ck_assert_uint_eq(st.warm_blocks, round == 1 ? 2 : 0);
		if (round == 0) {
			struct kv_seq s = { 0 };
			int32_t toks[2 * BS + 1];
			for (int i = 0; i < 2 * BS + 1; i++)
				toks[i] = 500 + i;
			ck_assert_int_eq(kv_seq_reserve(&pool, &s, 2 * BS + 1), 0);
			for (int i = 0; i < 2; i++)
				for (size_t j = 0; j < pool.k_row * BS; j++)
					kv_k_block(&pool, &s, 1, i)[j] = (uint8_t)(j * 3 + i);
			kv_seq_commit(&pool, &s, toks, 2 * BS + 1);
			for (int i = 0; i < 2; i++)
				h[i] = pool.meta[s.blocks[i]].hash;
			kv_seq_release(&pool, &s);
			kv_tier_flush(t, &pool);
		} else if (round == 1) {
			ck_assert_int_eq(kv_tier_fetch(t, &pool, h[1]), 0);
			settle(t);
			int32_t b = block_of(h[1]);
			ck_assert_int_ge(b, 0);
			struct kv_seq s = { .blocks = &b, .n_blocks = 1 };
			for (size_t j = 0; j < pool.k_row * BS; j++)
				ck_assert_uint_eq(kv_k_block(&pool, &s, 1, 0)[j], (uint8_t)(j * 3 + 1));
		} else {
			ck_assert(!kv_tier_has(t, h[0]));
		}
		kv_tier_close(t);
	}
}
END_TEST

START_TEST(test_corrupt_header)
{
	struct kv_tier *t = open_tier(16, 42, NULL);
	struct kv_hash h[2];
	fill(4, 2, h);
	kv_tier_flush(t, &pool);
	kv_tier_close(t);
	kv_drop_cache(&pool);
	/* the first slot's header gets a flipped byte */
	char path[300];
	snprintf(path, sizeof path, "%s/pagoda-kv.tier", dir);
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	uint8_t c;
	ck_assert_int_eq(pread(fd, &c, 1, 4096 + 20), 1);
	c ^= 1;
	ck_assert_int_eq(pwrite(fd, &c, 1, 4096 + 20), 1);
	close(fd);
	t = open_tier(16, 42, NULL);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.warm_blocks, 1);
	ck_assert_uint_eq(st.err_header, 1);
	ck_assert_int_eq(kv_tier_has(t, h[0]) + kv_tier_has(t, h[1]), 1);
	kv_tier_close(t);
}
END_TEST

/* One fault on the first read: the block is dropped, never published. */
static void read_fault(const char *spec, size_t off_crc, size_t off_short, size_t off_io)
{
	struct kv_tier *t = open_tier(16, 42, spec);
	struct kv_hash h[2];
	fill(5, 2, h);
	round_trip(t, 5, 2, h);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.blocks_in, 1);
	ck_assert_uint_eq(st.err_crc, off_crc);
	ck_assert_uint_eq(st.err_short, off_short);
	ck_assert_uint_eq(st.err_io, off_io);
	ck_assert(!kv_pool_has(&pool, h[0]));
	ck_assert(!kv_tier_has(t, h[0]));
	check_bytes(5, 1, h[1]);
	ck_assert(!st.disabled);
	kv_tier_close(t);
}

START_TEST(test_fault_corrupt) { read_fault("read:1:corrupt", 1, 0, 0); }
END_TEST
START_TEST(test_fault_short) { read_fault("read:1:short", 0, 1, 0); }
END_TEST
START_TEST(test_fault_eio) { read_fault("read:1:eio", 0, 0, 1); }
END_TEST

/* A pool of n_blocks blocks of 16 tokens x 2 layers x kv_dim in place of
 * the fixture's (a backend holds one pool). kv_dim 64: 4 KiB for K, 4 for
 * V, page-aligned. */
static void aligned_pool(int64_t n_blocks, int kv_dim)
{
	char err[256];
	kv_pool_free(&pool);
	pg_backend_close(be);
	const struct pg_backend_opts bo = { .threads = 1 };
	ck_assert_msg(pg_backend_open("cpu", &bo, &be, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(kv_pool_init(&pool, be, n_blocks, 16, 2, kv_dim, true, err, sizeof err), 0);
}

/* Page-aligned blocks are read straight into the pool; a corruption there
 * is caught too. */
START_TEST(test_zero_copy)
{
	aligned_pool(NB, 64);
	struct kv_tier *t = open_tier(16, 42, "read:3:corrupt");
	struct kv_hash h[3];
	fill(9, 3, h);
	round_trip(t, 9, 3, h);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.zero_copy_in, 2);
	ck_assert_uint_eq(st.err_crc, 1);
	check_bytes(9, 0, h[0]);
	check_bytes(9, 1, h[1]);
	ck_assert(!kv_pool_has(&pool, h[2]));
	kv_tier_close(t);
}
END_TEST

START_TEST(test_fault_write)
{
	/* a corrupted write is caught on the read */
	struct kv_tier *t = open_tier(16, 42, "write:2:corrupt,write:3:enospc");
	struct kv_hash h[3];
	fill(6, 3, h);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[i])), 0);
	settle(t);
	kv_drop_cache(&pool);
	ck_assert_int_eq(kv_tier_fetch(t, &pool, h[0]), 0);
	ck_assert_int_eq(kv_tier_fetch(t, &pool, h[1]), 0);
	settle(t);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.err_crc, 1);
	ck_assert(kv_pool_has(&pool, h[0]));
	ck_assert(!kv_pool_has(&pool, h[1]));
	/* ENOSPC on a later write turns the tier off, saying so */
	n_logs = 0;
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[0])), 1); /* has it */
	fill(7, 1, h + 2);
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[2])), 0);
	settle(t);
	kv_tier_get_stats(t, &st);
	ck_assert(st.disabled);
	ck_assert_uint_eq(st.err_nospc, 1);
	ck_assert_int_eq(n_logs, 1);
	ck_assert_ptr_nonnull(strstr(last_log, "off"));
	ck_assert(!kv_tier_has(t, h[0]));
	ck_assert_int_lt(kv_tier_save(t, &pool, block_of(h[0])), 0);
	kv_tier_close(t);
}
END_TEST

/* ENOSPC preallocating, on a 1 MiB tmpfs (root: never on the shared
 * disk, which a failing fallocate would fill for a moment), and nothing
 * of the attempt left behind; bad sizes and specs refused with a message. */
START_TEST(test_enospc_at_open)
{
	struct kv_tier_opts o = { .dir = dir, .fingerprint = 1 };
	struct kv_tier *t;
	char err[512] = "", small[300];
	snprintf(small, sizeof small, "%s/small", dir);
	ck_assert_int_eq(mkdir(small, 0700), 0);
	if (mount("tmpfs", small, "tmpfs", 0, "size=1m") == 0) {
		o.dir = small;
		o.size = 4 << 20;
		ck_assert_int_eq(kv_tier_open(&t, &o, &pool, err, sizeof err), -ENOSPC);
		ck_assert_ptr_nonnull(strstr(err, "no space left"));
		ck_assert_ptr_nonnull(strstr(err, small));
		char path[400];
		snprintf(path, sizeof path, "%s/pagoda-kv.tier", small);
		struct stat st;
		ck_assert_int_eq(stat(path, &st), 0);
		ck_assert_int_eq(st.st_blocks, 0);
		/* what fits, fits */
		o.size = 256 << 10;
		ck_assert_int_eq(kv_tier_open(&t, &o, &pool, err, sizeof err), 0);
		kv_tier_close(t);
		unlink(path);
		/* the ring lets go of the file a moment after it is closed */
		ck_assert_int_eq(umount2(small, MNT_DETACH), 0);
		o.dir = dir;
	}
	rmdir(small);
	o.size = 100;
	ck_assert_int_eq(kv_tier_open(&t, &o, &pool, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "holds no block"));
	o.size = 1 << 20;
	o.fault = "read:x:eio";
	ck_assert_int_eq(kv_tier_open(&t, &o, &pool, err, sizeof err), -EINVAL);
}
END_TEST

START_TEST(test_in_use)
{
	struct kv_tier *t = open_tier(4, 42, NULL), *t2;
	struct kv_tier_opts o = { .dir = dir, .size = 1 << 20, .fingerprint = 42 };
	char err[512];
	ck_assert_int_eq(kv_tier_open(&t2, &o, &pool, err, sizeof err), -EBUSY);
	kv_tier_close(t);
}
END_TEST

/* Blocks written ahead of their eviction go straight from the registered
 * pool, held meanwhile and put back first in line; an evicted one then
 * costs no I/O, and all come back straight into the pool. */
START_TEST(test_clean_registered)
{
	aligned_pool(NB, 64);
	struct kv_tier *t = open_tier(16, 42, NULL);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert(st.direct);
	ck_assert(st.fixed_bufs);
	/* as root (CAP_IPC_LOCK) the kernel pins the pool without a limit */
	if (geteuid() == 0)
		ck_assert(st.pool_bufs);
	ck_assert(st.pool_bufs || st.pool_unregistered == 1);
	struct kv_hash h[3];
	fill(10, 3, h); /* 5 blocks free, 3 cached (h[2] oldest: released last block first) */
	/* nothing to do while as many blocks as a step may take are free */
	ck_assert_int_eq(kv_tier_clean(t, &pool, 5), 0);
	/* ahead 6: of the 8 available, 2 may be held: the two oldest */
	ck_assert_int_eq(kv_tier_clean(t, &pool, 6), 2);
	ck_assert_int_eq(kv_available(&pool), 6);
	ck_assert_int_eq(kv_tier_clean(t, &pool, 6), 0); /* its window is in flight */
	ck_assert(!kv_tier_has(t, h[2])); /* written, not yet complete */
	settle(t);
	ck_assert_int_eq(kv_available(&pool), 8);
	/* back first in line for eviction, still cached in the pool */
	int32_t first = kv_cached_next(&pool, -1), second = kv_cached_next(&pool, first);
	ck_assert(first == block_of(h[2]) || first == block_of(h[1]));
	ck_assert(second == block_of(h[2]) || second == block_of(h[1]));
	ck_assert(kv_tier_has(t, h[2]) && kv_tier_has(t, h[1]) && !kv_tier_has(t, h[0]));
	/* its eviction finds the tier has it: no copy, no I/O */
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[2])), 1);
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[0])), 0); /* through a staging buffer */
	settle(t);
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.blocks_out, 3);
	ck_assert_uint_eq(st.zero_copy_out, 2);
	kv_drop_cache(&pool);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(kv_tier_fetch(t, &pool, h[i]), 0);
	settle(t);
	for (int i = 0; i < 3; i++)
		check_bytes(10, i, h[i]);
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.zero_copy_in, 3);
	/* a registered direct I/O is three completions (header page, K, V);
	 * readv/writev one; a staged write one */
	ck_assert_uint_eq(st.ring_cqes, st.pool_bufs ? 2 * 3 + 1 + 3 * 3 : 2 + 1 + 3);
	kv_tier_close(t);
}
END_TEST

/* A corrupt fault on a write straight from the pool spoils the checksum
 * (the pool's bytes are live): the read catches it. */
START_TEST(test_clean_fault)
{
	aligned_pool(NB, 64);
	struct kv_tier *t = open_tier(16, 42, "write:1:corrupt");
	struct kv_hash h[2];
	fill(11, 2, h);
	ck_assert_int_eq(kv_tier_clean(t, &pool, 7), 1); /* 8 available - 7 */
	settle(t);
	ck_assert(kv_tier_has(t, h[1]));
	check_bytes(11, 1, h[1]); /* the pool's copy is untouched */
	kv_drop_cache(&pool);
	ck_assert_int_eq(kv_tier_fetch(t, &pool, h[1]), 0);
	settle(t);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.zero_copy_out, 1);
	ck_assert_uint_eq(st.err_crc, 1);
	ck_assert(!kv_pool_has(&pool, h[1]));
	ck_assert(!kv_tier_has(t, h[1]));
	kv_tier_close(t);
}
END_TEST

static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -1;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	return (int)syscall(SYS_capset, &hdr, data);
}

/* Where RLIMIT_MEMLOCK refuses the pool (the staging buffers fit), the
 * tier says so, counts it, and still moves blocks straight to and from the
 * pool, with readv/writev. In a child: it gives up CAP_IPC_LOCK. */
START_TEST(test_pool_unregistered)
{
	aligned_pool(512, 64); /* 4 MiB of pool; 256 staging buffers of 12 KiB */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* the staging area: 32 MiB of slots, 8 to 256 of them */
		size_t slot = KV_TIER_SLOT_HDR + kv_pool_block_bytes(&pool);
		size_t n = (32u << 20) / slot, staging = (n < 8 ? 8 : n > 256 ? 256 : n) * slot;
		struct rlimit rl = { staging + (512u << 10), staging + (512u << 10) };
		if (drop_ipc_lock() < 0 || setrlimit(RLIMIT_MEMLOCK, &rl) < 0)
			_exit(10);
		n_logs = 0;
		struct kv_tier *t = open_tier(16, 42, NULL);
		struct kv_tier_stats st;
		kv_tier_get_stats(t, &st);
		if (st.pool_bufs || st.pool_unregistered != 1 || !st.fixed_bufs)
			_exit(11);
		if (!strstr(last_log, "RLIMIT_MEMLOCK"))
			_exit(12);
		struct kv_hash h[2];
		fill(12, 2, h);
		if (kv_tier_clean(t, &pool, 511) != 1) /* 512 available - 511 */
			_exit(13);
		settle(t);
		kv_drop_cache(&pool);
		if (kv_tier_fetch(t, &pool, h[1]) != 0)
			_exit(14);
		settle(t);
		check_bytes(12, 1, h[1]);
		kv_tier_get_stats(t, &st);
		if (st.zero_copy_out != 1 || st.zero_copy_in != 1 || st.ring_cqes != 2)
			_exit(15);
		kv_tier_close(t);
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x", status);
}
END_TEST

/* Direct I/O from and into the registered pool through an SQPOLL ring,
 * and its warm scan. */
START_TEST(test_sqpoll_direct)
{
	aligned_pool(NB, 64);
	sqpoll = true;
	struct kv_tier *t = open_tier(16, 42, NULL);
	struct kv_hash h[3];
	fill(16, 3, h);
	ck_assert_int_eq(kv_tier_clean(t, &pool, 6), 2);
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[0])), 0);
	settle(t);
	kv_tier_close(t);
	kv_drop_cache(&pool);
	t = open_tier(16, 42, NULL);
	sqpoll = false;
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert(st.sqpoll);
	ck_assert_uint_eq(st.warm_blocks, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(kv_tier_fetch(t, &pool, h[i]), 0);
	settle(t);
	for (int i = 0; i < 3; i++)
		check_bytes(16, i, h[i]);
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.zero_copy_in, 3);
	kv_tier_close(t);
}
END_TEST

/* With every slot in flight a save is dropped and counted at once: the
 * engine never waits on the disk there. */
START_TEST(test_save_never_waits)
{
	struct kv_tier *t = open_tier(3, 42, NULL);
	struct kv_hash h[4];
	fill(13, 4, h);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[i])), 0);
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[3])), -EBUSY);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.dropped_writes, 1);
	ck_assert_int_eq(kv_tier_inflight(t), 3); /* not even submitted */
	settle(t);
	/* once they complete, the least recently used slot is reused */
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[3])), 0);
	settle(t);
	/* the slot whose write completed first */
	ck_assert_int_eq(kv_tier_has(t, h[0]) + kv_tier_has(t, h[1]) + kv_tier_has(t, h[2]), 2);
	ck_assert(kv_tier_has(t, h[3]));
	kv_tier_close(t);
}
END_TEST

/* A warm start reads every slot header through the ring, in batches (here
 * more slots than one batch holds), and indexes those written. */
START_TEST(test_scan_batches)
{
	const int slots = 1200, rounds = 100;
	struct kv_tier *t = open_tier(slots, 42, NULL);
	struct kv_hash first[NB - 1], last[NB - 1];
	for (int r = 0; r < rounds; r++) {
		struct kv_hash h[NB - 1];
		fill(100 + r, NB - 1, h);
		for (int i = 0; i < NB - 1; i++)
			ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[i])), 0);
		settle(t);
		kv_drop_cache(&pool);
		memcpy(r ? last : first, h, sizeof h);
	}
	kv_tier_close(t);
	t = open_tier(slots, 42, NULL);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.warm_blocks, rounds * (NB - 1));
	ck_assert_uint_eq(st.ring_cqes, slots); /* one header page a slot */
	ck_assert_uint_eq(st.err_header, 0);
	ck_assert_int_eq(kv_tier_fetch(t, &pool, first[0]), 0);
	ck_assert_int_eq(kv_tier_fetch(t, &pool, last[NB - 2]), 0);
	settle(t);
	check_bytes(100, 0, first[0]);
	check_bytes(100 + rounds - 1, NB - 2, last[NB - 2]);
	kv_tier_close(t);
}
END_TEST

/* kv_tier_drop (DropPrefixCache) forgets every block, those in flight
 * included, and a restart does not bring them back. */
START_TEST(test_drop)
{
	aligned_pool(NB, 64);
	struct kv_tier *t = open_tier(16, 42, NULL);
	struct kv_hash h[3], g[1];
	fill(14, 3, h);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(kv_tier_save(t, &pool, block_of(h[i])), 0);
	settle(t);
	kv_drop_cache(&pool);
	fill(14, 3, h); /* the same blocks again, in the pool */
	ck_assert_int_eq(kv_tier_clean(t, &pool, 7), 1);   /* h[2] from the pool, in flight */
	int32_t held = block_of(h[2]);
	kv_drop_cache(&pool);                           /* h[2] is held: stays */
	ck_assert_int_eq(kv_tier_fetch(t, &pool, h[0]), 0); /* a read in flight */
	n_logs = 0;
	kv_tier_drop(t, &pool);
	for (int i = 0; i < 3; i++)
		ck_assert(!kv_tier_has(t, h[i]));
	ck_assert(!kv_tier_pending(t, h[0]));
	ck_assert_int_eq(n_logs, 1);
	ck_assert_ptr_nonnull(strstr(last_log, "dropped"));
	settle(t);
	/* the read is not published; the held block is freed, not cached */
	ck_assert(!kv_pool_has(&pool, h[0]));
	ck_assert(!kv_pool_has(&pool, h[2]));
	ck_assert(!pool.meta[held].hashed);
	ck_assert_int_eq(kv_available(&pool), NB);
	ck_assert_int_eq(pool.n_cached, 0);
	struct kv_tier_stats st;
	kv_tier_get_stats(t, &st);
	ck_assert_int_eq(st.slots_used, 0);
	ck_assert_uint_eq(st.drops, 1);
	ck_assert_uint_eq(st.blocks_in, 0);
	/* what is saved after the drop is kept, and only that survives */
	fill(15, 1, g);
	ck_assert_int_eq(kv_tier_save(t, &pool, block_of(g[0])), 0);
	settle(t);
	kv_tier_close(t);
	t = open_tier(16, 42, NULL);
	kv_tier_get_stats(t, &st);
	ck_assert_uint_eq(st.warm_blocks, 1);
	ck_assert(kv_tier_has(t, g[0]));
	ck_assert(!kv_tier_has(t, h[0]) && !kv_tier_has(t, h[1]));
	ck_assert_uint_ge(st.err_header, 2); /* the old epoch's slots, left out */
	kv_tier_close(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tier");
	TCase *tc = tcase_create("tier");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_crc32c);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_sqpoll);
	tcase_add_test(tc, test_evictions_and_lru);
	tcase_add_test(tc, test_warm_restart);
	tcase_add_test(tc, test_cache_types_restart);
	tcase_add_test(tc, test_corrupt_header);
	tcase_add_test(tc, test_fault_corrupt);
	tcase_add_test(tc, test_fault_short);
	tcase_add_test(tc, test_fault_eio);
	tcase_add_test(tc, test_zero_copy);
	tcase_add_test(tc, test_fault_write);
	tcase_add_test(tc, test_enospc_at_open);
	tcase_add_test(tc, test_in_use);
	tcase_add_test(tc, test_clean_registered);
	tcase_add_test(tc, test_clean_fault);
	tcase_add_test(tc, test_pool_unregistered);
	tcase_add_test(tc, test_save_never_waits);
	tcase_add_test(tc, test_sqpoll_direct);
	tcase_add_test(tc, test_scan_batches);
	tcase_add_test(tc, test_drop);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
