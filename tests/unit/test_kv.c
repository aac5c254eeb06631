/* tests/unit/test_kv.c — the block manager: allocation, sharing through the
 * prefix cache, hash chaining, LRU eviction order, reference counts, and a
 * pool that is whole again after everything is released; the bytes, owned
 * by the CPU backend, reached through kv_k_row and moved as a block's host
 * image. */
#include "daemon/kv/kv.h"
#include "kernels/pg_backend.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define BS 4

static struct kv_pool pool;
static struct pg_backend *be;

static struct pg_backend *cpu(void)
{
	char err[256];
	struct pg_backend *b;
	const struct pg_backend_opts o = { .threads = 1 };
	ck_assert_msg(pg_backend_open("cpu", &o, &b, err, sizeof err) == 0, "%s", err);
	return b;
}

static void setup(void)
{
	char err[256];
	be = cpu();
	ck_assert_int_eq(kv_pool_init(&pool, be, 8, BS, 2, 8, true, err, sizeof err), 0);
}

static void teardown(void)
{
	kv_pool_free(&pool);
	pg_backend_close(be);
}

static void check_whole(void)
{
	int64_t refs = 0;
	for (int64_t b = 0; b < pool.n_blocks; b++) {
		ck_assert_int_ge(pool.meta[b].refcnt, 0);
		refs += pool.meta[b].refcnt;
	}
	ck_assert_int_eq(refs, 0);
	ck_assert_int_eq(kv_used(&pool), 0);
	ck_assert_int_eq(pool.n_free + pool.n_cached, pool.n_blocks);
}

static void tokens(int32_t *t, int n, int base)
{
	for (int i = 0; i < n; i++)
		t[i] = base + i;
}

START_TEST(test_alloc_release)
{
	struct kv_seq s = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &s, 1), 0);
	ck_assert_int_eq(s.n_blocks, 1);
	ck_assert_int_eq(kv_seq_reserve(&pool, &s, BS), 0);
	ck_assert_int_eq(s.n_blocks, 1);
	ck_assert_int_eq(kv_seq_reserve(&pool, &s, BS + 1), 0);
	ck_assert_int_eq(s.n_blocks, 2);
	ck_assert_int_eq(kv_used(&pool), 2);
	/* distinct blocks, distinct memory */
	ck_assert_int_ne(s.blocks[0], s.blocks[1]);
	ck_assert_ptr_ne(kv_k_row(&pool, &s, 0, 0), kv_k_row(&pool, &s, 0, BS));
	ck_assert_ptr_ne(kv_k_row(&pool, &s, 0, 0), kv_k_row(&pool, &s, 1, 0));
	/* more than the pool: refused, nothing taken */
	struct kv_seq big = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &big, 7 * BS), -ENOSPC);
	ck_assert_int_eq(big.n_blocks, 0);
	ck_assert_int_eq(kv_seq_reserve(&pool, &big, 6 * BS), 0);
	ck_assert_int_eq(kv_available(&pool), 0);
	kv_seq_release(&pool, &s);
	kv_seq_release(&pool, &big);
	check_whole();
}
END_TEST

START_TEST(test_prefix_sharing)
{
	int32_t t[3 * BS + 1];
	tokens(t, 3 * BS + 1, 100);
	struct kv_seq a = { 0 }, b = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &a, t, 3 * BS + 1), 0);
	ck_assert_int_eq(kv_seq_reserve(&pool, &a, 3 * BS + 1), 0);
	kv_seq_commit(&pool, &a, t, 3 * BS + 1);
	/* b shares the three full blocks, not the partial fourth */
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &b, t, 3 * BS + 1), 3 * BS);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(b.blocks[i], a.blocks[i]);
		ck_assert_int_eq(pool.meta[a.blocks[i]].refcnt, 2);
	}
	/* at least one token is always left to compute */
	struct kv_seq c = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &c, t, 3 * BS), 2 * BS);
	/* b's new block is its own: shared blocks are never handed out again */
	ck_assert_int_eq(kv_seq_reserve(&pool, &b, 3 * BS + 1), 0);
	ck_assert_int_ne(b.blocks[3], a.blocks[3]);
	ck_assert_int_eq(pool.meta[b.blocks[3]].refcnt, 1);
	kv_seq_release(&pool, &a);
	kv_seq_release(&pool, &b);
	kv_seq_release(&pool, &c);
	check_whole();
	/* released full blocks stay cached */
	ck_assert_int_eq(pool.n_cached, 3);
	struct kv_seq d = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &d, t, 3 * BS + 1), 3 * BS);
	ck_assert_int_eq(pool.n_cached, 0);
	kv_seq_release(&pool, &d);
	check_whole();
}
END_TEST

START_TEST(test_chained_hash)
{
	/* same second block, different first block: no match past block 0 */
	int32_t x[2 * BS + 1], y[2 * BS + 1];
	tokens(x, 2 * BS + 1, 10);
	tokens(y, 2 * BS + 1, 10);
	y[0] = 999;
	struct kv_seq a = { 0 }, b = { 0 };
	kv_seq_reserve(&pool, &a, 2 * BS + 1);
	kv_seq_commit(&pool, &a, x, 2 * BS + 1);
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &b, y, 2 * BS + 1), 0);
	kv_seq_release(&pool, &b);
	/* a different last token in a block: that block does not match */
	int32_t z[2 * BS + 1];
	memcpy(z, x, sizeof z);
	z[2 * BS - 1] = 7;
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &b, z, 2 * BS + 1), BS);
	kv_seq_release(&pool, &a);
	kv_seq_release(&pool, &b);
	check_whole();
}
END_TEST

START_TEST(test_lru_eviction)
{
	/* cache three single-block prefixes, released in order A, B, C */
	int32_t p[3][BS + 1];
	struct kv_seq s[3] = { { 0 } };
	for (int i = 0; i < 3; i++) {
		tokens(p[i], BS + 1, 1000 * (i + 1));
		kv_seq_reserve(&pool, &s[i], BS + 1);
		kv_seq_commit(&pool, &s[i], p[i], BS + 1);
	}
	int32_t first_block[3];
	for (int i = 0; i < 3; i++) {
		first_block[i] = s[i].blocks[0];
		kv_seq_release(&pool, &s[i]);
	}
	ck_assert_int_eq(pool.n_cached, 3);
	/* touch A again: it becomes the most recently released */
	struct kv_seq t = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &t, p[0], BS + 1), BS);
	kv_seq_release(&pool, &t);
	/* take every free block, then one more: B (oldest) is evicted first */
	struct kv_seq hog = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &hog, (int)pool.n_free * BS), 0);
	struct kv_seq one = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &one, 1), 0);
	ck_assert_int_eq(one.blocks[0], first_block[1]);
	ck_assert_int_eq(pool.evictions, 1);
	struct kv_seq q = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &q, p[1], BS + 1), 0);
	kv_seq_release(&pool, &q);
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &q, p[0], BS + 1), BS);
	struct kv_seq c = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &c, p[2], BS + 1), BS);
	ck_assert_int_eq(c.blocks[0], first_block[2]);
	kv_seq_release(&pool, &c);
	kv_seq_release(&pool, &q);
	kv_seq_release(&pool, &one);
	kv_seq_release(&pool, &hog);
	check_whole();
}
END_TEST

START_TEST(test_drop_cache_and_no_prefix)
{
	int32_t t[2 * BS + 1];
	tokens(t, 2 * BS + 1, 5);
	struct kv_seq a = { 0 };
	kv_seq_reserve(&pool, &a, 2 * BS + 1);
	kv_seq_commit(&pool, &a, t, 2 * BS + 1);
	kv_seq_release(&pool, &a);
	ck_assert_int_eq(pool.n_cached, 2);
	kv_drop_cache(&pool);
	ck_assert_int_eq(pool.n_cached, 0);
	ck_assert_int_eq(pool.n_free, pool.n_blocks);
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &a, t, 2 * BS + 1), 0);
	kv_seq_release(&pool, &a);

	struct kv_pool off;
	char err[128];
	struct pg_backend *be_off = cpu();
	ck_assert_int_eq(kv_pool_init(&off, be_off, 4, BS, 1, 4, false, err, sizeof err), 0);
	kv_seq_reserve(&off, &a, 2 * BS + 1);
	kv_seq_commit(&off, &a, t, 2 * BS + 1);
	kv_seq_release(&off, &a);
	ck_assert_int_eq(off.n_cached, 0);
	ck_assert_int_eq(kv_seq_match_prefix(&off, &a, t, 2 * BS + 1), 0);
	kv_seq_release(&off, &a);
	kv_pool_free(&off);
	pg_backend_close(be_off);
	check_whole();
}
END_TEST

/* A block's host image is K[layer][slot][kv_dim] then V, whatever the
 * pool's layout; copied into another block it reads back the same. */
START_TEST(test_block_image)
{
	struct kv_seq a = { 0 }, b = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &a, BS), 0);
	ck_assert_int_eq(kv_seq_reserve(&pool, &b, BS), 0);
	ck_assert_int_ne(a.blocks[0], b.blocks[0]);
	for (int l = 0; l < pool.n_layer; l++)
		for (int j = 0; j < BS; j++)
			for (int i = 0; i < pool.kv_dim; i++) {
				kv_k_row(&pool, &a, l, j)[i] = (pg_f16)(1000 + l * 100 + j * 10 + i);
				kv_v_row(&pool, &a, l, j)[i] = (pg_f16)(2000 + l * 100 + j * 10 + i);
			}
	const struct pg_kv_layout lay = { BS, pool.n_layer, pool.kv_dim, PG_TYPE_F16, PG_TYPE_F16 };
	const size_t n = pg_kv_block_bytes(&lay) / sizeof(pg_f16), half = n / 2;
	ck_assert_uint_eq(n, 2 * (size_t)BS * pool.n_layer * pool.kv_dim);
	pg_f16 *img = malloc(n * sizeof *img);
	ck_assert_int_eq(pg_backend_kv_copy_out(be, a.blocks[0], img), 0);
	for (int l = 0; l < pool.n_layer; l++)
		for (int j = 0; j < BS; j++)
			for (int i = 0; i < pool.kv_dim; i++) {
				const size_t at = ((size_t)l * BS + j) * pool.kv_dim + i;
				ck_assert_uint_eq(img[at], 1000 + l * 100 + j * 10 + i);
				ck_assert_uint_eq(img[half + at], 2000 + l * 100 + j * 10 + i);
			}
	ck_assert_int_eq(pg_backend_kv_copy_in(be, b.blocks[0], img), 0);
	for (int l = 0; l < pool.n_layer; l++)
		for (int j = 0; j < BS; j++) {
			ck_assert(!memcmp(kv_k_row(&pool, &a, l, j), kv_k_row(&pool, &b, l, j), pool.kv_dim * sizeof(pg_f16)));
			ck_assert(!memcmp(kv_v_row(&pool, &a, l, j), kv_v_row(&pool, &b, l, j), pool.kv_dim * sizeof(pg_f16)));
		}
	ck_assert_int_eq(pg_backend_kv_copy_out(be, (int32_t)pool.n_blocks, img), -EINVAL);
	free(img);
	kv_seq_release(&pool, &a);
	kv_seq_release(&pool, &b);
	check_whole();
}
END_TEST

/* A quantized pool: rows of the types' bytes, the host image K of every
 * layer then V, and hash chains rooted in the types, so a block of one type
 * is never found by a pool of another (the tier keeps blocks across
 * restarts); f16 keeps the chain it always had. */
START_TEST(test_quantized_layout)
{
	char err[256];
	const uint32_t kt[] = { PG_TYPE_Q8_0, PG_TYPE_Q4_0, PG_TYPE_IQ4_NL, PG_TYPE_F16 };
	const uint32_t vt[] = { PG_TYPE_Q8_0, PG_TYPE_Q5_1, PG_TYPE_F16, PG_TYPE_Q4_1 };
	int32_t t[3 * BS];
	tokens(t, 3 * BS, 7);
	struct kv_hash h16[2], hq[4][2];
	struct kv_seq s0 = { 0 };
	ck_assert_int_eq(kv_seq_next_hashes(&pool, &s0, t, 3 * BS, h16, 2), 2);
	for (int c = 0; c < 4; c++) {
		struct pg_backend *b = cpu();
		struct kv_pool q;
		const struct pg_kv_layout l = { BS, 2, 64, kt[c], vt[c] };
		ck_assert_msg(kv_pool_init_layout(&q, b, 4, &l, true, err, sizeof err) == 0, "%s", err);
		const size_t kr = pg_row_size(kt[c], 64), vr = pg_row_size(vt[c], 64);
		ck_assert_uint_eq(q.k_row, kr);
		ck_assert_uint_eq(q.v_row, vr);
		ck_assert_uint_eq(kv_pool_block_bytes(&q), (kr + vr) * BS * 2);
		ck_assert_uint_eq(kv_pool_block_bytes(&q), pg_kv_block_bytes(&l));
		struct kv_seq a = { 0 }, d = { 0 };
		ck_assert_int_eq(kv_seq_reserve(&q, &a, BS), 0);
		ck_assert_int_eq(kv_seq_reserve(&q, &d, BS), 0);
		for (int layer = 0; layer < 2; layer++)
			for (size_t i = 0; i < kr * BS; i++)
				kv_k_block(&q, &a, layer, 0)[i] = (uint8_t)(i * 7 + layer * 3 + 1);
		for (int layer = 0; layer < 2; layer++)
			for (size_t i = 0; i < vr * BS; i++)
				kv_v_block(&q, &a, layer, 0)[i] = (uint8_t)(i * 5 + layer * 11 + 2);
		uint8_t *img = malloc(kv_pool_block_bytes(&q));
		ck_assert_int_eq(kv_block_copy_out(&q, a.blocks[0], img), 0);
		for (int layer = 0; layer < 2; layer++) {
			ck_assert(!memcmp(img + layer * kr * BS, kv_k_block(&q, &a, layer, 0), kr * BS));
			ck_assert(!memcmp(img + 2 * kr * BS + layer * vr * BS, kv_v_block(&q, &a, layer, 0), vr * BS));
		}
		ck_assert_int_eq(kv_block_copy_in(&q, d.blocks[0], img), 0);
		ck_assert(!memcmp(kv_k_block(&q, &a, 0, 0), kv_k_block(&q, &d, 0, 0), kr * BS * 2));
		ck_assert(!memcmp(kv_v_block(&q, &a, 0, 0), kv_v_block(&q, &d, 0, 0), vr * BS * 2));
		struct iovec iov[2];
		int niov = 2;
		ck_assert_int_eq(kv_block_span(&q, a.blocks[0], iov, &niov), 0);
		ck_assert_uint_eq(iov[0].iov_len + iov[1].iov_len, kv_pool_block_bytes(&q));
		ck_assert(!memcmp(iov[0].iov_base, img, iov[0].iov_len));
		free(img);
		kv_seq_release(&q, &a);
		kv_seq_release(&q, &d);
		ck_assert_int_eq(kv_seq_next_hashes(&q, &s0, t, 3 * BS, hq[c], 2), 2);
		for (int j = 0; j < 2; j++)
			ck_assert(hq[c][j].lo != h16[j].lo || hq[c][j].hi != h16[j].hi);
		for (int o = 0; o < c; o++)
			ck_assert(hq[c][0].lo != hq[o][0].lo || hq[c][0].hi != hq[o][0].hi);
		kv_pool_free(&q);
		pg_backend_close(b);
	}
	/* an unknown type is refused before the backend is asked */
	struct pg_backend *b = cpu();
	struct kv_pool q;
	const struct pg_kv_layout bad = { BS, 2, 64, PG_TYPE_Q4_K, PG_TYPE_F16 };
	ck_assert_int_eq(kv_pool_init_layout(&q, b, 4, &bad, true, err, sizeof err), -EINVAL);
	ck_assert_msg(strstr(err, "Q4_K"), "%s", err);
	pg_backend_close(b);
}
END_TEST

/* Random churn: refcounts never negative, and the pool is whole after. */
START_TEST(test_churn)
{
	struct kv_seq s[6] = { { 0 } };
	int32_t t[6][6 * BS];
	srand(7);
	for (int round = 0; round < 2000; round++) {
		int i = rand() % 6;
		if (s[i].n_blocks && rand() % 3 == 0) {
			kv_seq_release(&pool, &s[i]);
			continue;
		}
		if (!s[i].n_blocks) {
			int shared = rand() % 3; /* a few common prefixes */
			for (int j = 0; j < 6 * BS; j++)
				t[i][j] = j < 2 * BS ? shared * 100 + j : rand() % 50;
			kv_seq_match_prefix(&pool, &s[i], t[i], 6 * BS);
		}
		int want = s[i].n_blocks * BS + 1 + rand() % (2 * BS);
		if (want > 6 * BS)
			want = 6 * BS;
		if (kv_seq_reserve(&pool, &s[i], want) == 0)
			kv_seq_commit(&pool, &s[i], t[i], want);
		for (int64_t b = 0; b < pool.n_blocks; b++)
			ck_assert_int_ge(pool.meta[b].refcnt, 0);
		ck_assert_int_eq(kv_used(&pool) + kv_available(&pool), pool.n_blocks);
	}
	for (int i = 0; i < 6; i++)
		kv_seq_release(&pool, &s[i]);
	check_whole();
}
END_TEST

/* The calls a lower level (the NVMe tier) fills the pool through: a block
 * taken, filled, published, released into the cache, then matched; a match
 * extended past an earlier one; the block's bytes through spans and copies. */
START_TEST(test_lower_level_door)
{
	int32_t t[3 * BS + 1];
	tokens(t, 3 * BS + 1, 500);
	struct kv_seq a = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &a, 3 * BS + 1), 0);
	kv_seq_commit(&pool, &a, t, 3 * BS + 1);
	struct kv_hash h[3], got[4];
	for (int i = 0; i < 3; i++)
		h[i] = pool.meta[a.blocks[i]].hash;
	kv_seq_release(&pool, &a);
	struct kv_seq s = { 0 };
	ck_assert_int_eq(kv_seq_next_hashes(&pool, &s, t, 3 * BS + 1, got, 4), 3);
	for (int i = 0; i < 3; i++)
		ck_assert(got[i].lo == h[i].lo && got[i].hi == h[i].hi);
	ck_assert_int_eq(kv_seq_next_hashes(&pool, &s, t, 3 * BS, got, 4), 2); /* one token left to compute */

	kv_drop_cache(&pool);
	ck_assert(!kv_pool_has(&pool, h[0]));
	size_t bb = kv_pool_block_bytes(&pool);
	uint8_t *in = malloc(bb), *out = malloc(bb);
	for (size_t i = 0; i < bb; i++)
		in[i] = (uint8_t)(i * 31 + 7);
	int32_t b0 = kv_block_take(&pool);
	ck_assert_int_ge(b0, 0);
	ck_assert_int_eq(kv_used(&pool), 1);
	kv_block_copy_in(&pool, b0, in);
	kv_block_copy_out(&pool, b0, out);
	ck_assert_mem_eq(in, out, bb);
	struct iovec iov[2];
	int n = 1;
	ck_assert_int_eq(kv_block_span(&pool, b0, iov, &n), -ENOBUFS);
	n = 2;
	ck_assert_int_eq(kv_block_span(&pool, b0, iov, &n), 0);
	ck_assert_int_eq(n, 2);
	ck_assert_uint_eq(iov[0].iov_len + iov[1].iov_len, bb);
	ck_assert_mem_eq(iov[0].iov_base, in, iov[0].iov_len);
	ck_assert_mem_eq(iov[1].iov_base, in + iov[0].iov_len, iov[1].iov_len);
	ck_assert(kv_block_publish(&pool, b0, h[0]));
	kv_block_put(&pool, b0);
	ck_assert_int_eq(kv_used(&pool), 0);
	ck_assert_int_eq(pool.n_cached, 1);
	/* an equal block published already: the second stays private, freed */
	int32_t dup = kv_block_take(&pool);
	ck_assert(!kv_block_publish(&pool, dup, h[0]));
	kv_block_put(&pool, dup);
	ck_assert_int_eq(pool.n_cached, 1);

	ck_assert_int_eq(kv_seq_match_prefix(&pool, &s, t, 3 * BS + 1), BS);
	ck_assert_int_eq(kv_seq_next_hashes(&pool, &s, t, 3 * BS + 1, got, 4), 2);
	ck_assert(got[0].lo == h[1].lo && got[1].lo == h[2].lo);
	int32_t b1 = kv_block_take(&pool);
	ck_assert(kv_block_publish(&pool, b1, h[1]));
	kv_block_put(&pool, b1);
	/* the match goes on from where it stopped */
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &s, t, 3 * BS + 1), 2 * BS);
	ck_assert_int_eq(s.blocks[0], b0);
	ck_assert_int_eq(s.blocks[1], b1);
	kv_seq_release(&pool, &s);
	free(in);
	free(out);
	check_whole();
}
END_TEST

/* What the tier uses to write blocks ahead of eviction: the cached blocks
 * in eviction order, a hold that takes one out of the LRU (so it is not
 * reused) and a put that brings it back first in line, or frees it when it
 * was unpublished meanwhile; and the pool's memory as regions to register,
 * none splitting a block. */
START_TEST(test_hold_and_regions)
{
	int32_t t[3 * BS + 1];
	tokens(t, 3 * BS + 1, 700);
	struct kv_seq a = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&pool, &a, 3 * BS + 1), 0);
	kv_seq_commit(&pool, &a, t, 3 * BS + 1);
	int32_t blk[3] = { a.blocks[0], a.blocks[1], a.blocks[2] };
	kv_seq_release(&pool, &a); /* last block first: blk[2] oldest */
	ck_assert_int_eq(kv_cached_next(&pool, -1), blk[2]);
	ck_assert_int_eq(kv_cached_next(&pool, blk[2]), blk[1]);
	ck_assert_int_eq(kv_cached_next(&pool, blk[0]), -1);
	kv_block_hold(&pool, blk[2]);
	ck_assert_int_eq(pool.n_cached, 2);
	ck_assert_int_eq(kv_available(&pool), pool.n_blocks - 1);
	ck_assert_int_eq(kv_cached_next(&pool, -1), blk[1]);
	/* a sequence maps it meanwhile, and lets go of it */
	struct kv_seq s = { 0 };
	ck_assert_int_eq(kv_seq_match_prefix(&pool, &s, t, 3 * BS + 1), 3 * BS);
	kv_seq_release(&pool, &s);
	ck_assert_int_eq(kv_cached_next(&pool, -1), blk[1]); /* still held */
	/* put back first in line for eviction, not last */
	kv_block_put_first(&pool, blk[2]);
	ck_assert_int_eq(kv_cached_next(&pool, -1), blk[2]);
	ck_assert_int_eq(pool.n_cached, 3);
	/* unpublished while held: the last put frees it */
	kv_block_hold(&pool, blk[2]);
	kv_block_unpublish(&pool, blk[2]);
	ck_assert(!pool.meta[blk[2]].hashed);
	kv_block_put_first(&pool, blk[2]);
	ck_assert_int_eq(pool.n_cached, 2);
	check_whole();

	struct iovec reg[8];
	size_t span = kv_pool_block_bytes(&pool) / 2;
	ck_assert_int_eq(kv_pool_regions(&pool, span - 1, reg, 8), -EINVAL);
	ck_assert_int_eq(kv_pool_regions(&pool, 8 * span, reg, 8), 2); /* K and V whole */
	ck_assert_uint_eq(reg[0].iov_len, 8 * span);
	ck_assert_int_eq(kv_pool_regions(&pool, 3 * span, reg, 8), 6); /* 3 + 3 + 2 blocks, twice */
	ck_assert_uint_eq(reg[2].iov_len, 2 * span);
	ck_assert_ptr_eq((char *)reg[1].iov_base, (char *)reg[0].iov_base + 3 * span);
	ck_assert_int_eq(kv_pool_regions(&pool, 3 * span, reg, 5), -ENOBUFS);
	struct iovec iov[2];
	int n = 2;
	kv_block_span(&pool, 7, iov, &n);
	ck_assert((char *)iov[0].iov_base >= (char *)reg[2].iov_base &&
		  (char *)iov[0].iov_base + iov[0].iov_len <= (char *)reg[2].iov_base + reg[2].iov_len);
	ck_assert((char *)iov[1].iov_base >= (char *)reg[5].iov_base &&
		  (char *)iov[1].iov_base + iov[1].iov_len <= (char *)reg[5].iov_base + reg[5].iov_len);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kv");
	TCase *tc = tcase_create("blocks");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_alloc_release);
	tcase_add_test(tc, test_prefix_sharing);
	tcase_add_test(tc, test_chained_hash);
	tcase_add_test(tc, test_lru_eviction);
	tcase_add_test(tc, test_drop_cache_and_no_prefix);
	tcase_add_test(tc, test_churn);
	tcase_add_test(tc, test_block_image);
	tcase_add_test(tc, test_lower_level_door);
	tcase_add_test(tc, test_hold_and_regions);
	tcase_add_test(tc, test_quantized_layout);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
