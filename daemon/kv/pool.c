/* daemon/kv/pool.c — block allocation, reference counts, the prefix-cache
 * hash table and the LRU of cached blocks. */
#include "daemon/kv/kv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define SLOT_EMPTY (-1)
#define SLOT_DELETED (-2)

int kv_pool_init(struct kv_pool *p, struct pg_backend *be, int64_t n_blocks, int block_size, int n_layer,
		 int kv_dim, bool prefix_cache, char *err, size_t errlen)
{
	const struct pg_kv_layout l = { block_size, n_layer, kv_dim, PG_TYPE_F16, PG_TYPE_F16 };
	return kv_pool_init_layout(p, be, n_blocks, &l, prefix_cache, err, errlen);
}

int kv_pool_init_layout(struct kv_pool *p, struct pg_backend *be, int64_t n_blocks, const struct pg_kv_layout *l,
			bool prefix_cache, char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	if (n_blocks <= 0 || n_blocks > (INT32_MAX >> 2) || l->block_size <= 0 || l->block_size > 4096 ||
	    l->n_layer <= 0 || l->kv_dim <= 0) {
		snprintf(err, errlen, "kv: bad pool shape (%lld blocks of %d tokens)", (long long)n_blocks,
			 l->block_size);
		return -EINVAL;
	}
	if (!pg_kv_type_ok(l->type_k) || !pg_kv_type_ok(l->type_v) || !pg_row_size(l->type_k, (uint64_t)l->kv_dim) ||
	    !pg_row_size(l->type_v, (uint64_t)l->kv_dim)) {
		snprintf(err, errlen, "kv: cache types K %s, V %s do not fit rows of %d (types: " PG_KV_TYPE_NAMES ")",
			 pg_type_name(l->type_k), pg_type_name(l->type_v), l->kv_dim);
		return -EINVAL;
	}
	p->n_blocks = n_blocks;
	p->block_size = l->block_size;
	p->n_layer = l->n_layer;
	p->kv_dim = l->kv_dim;
	p->type_k = l->type_k;
	p->type_v = l->type_v;
	p->k_row = pg_row_size(l->type_k, (uint64_t)l->kv_dim);
	p->v_row = pg_row_size(l->type_v, (uint64_t)l->kv_dim);
	p->k_layer_stride = p->k_row * (size_t)l->block_size;
	p->k_block_stride = p->k_layer_stride * (size_t)l->n_layer;
	p->v_layer_stride = p->v_row * (size_t)l->block_size;
	p->v_block_stride = p->v_layer_stride * (size_t)l->n_layer;
	p->prefix_cache = prefix_cache;
	p->lru_head = p->lru_tail = -1;
	int r = pg_backend_kv_alloc(be, l, n_blocks, err, errlen);
	if (r)
		return r;
	p->be = be;
	struct pg_kv_host host;
	if (pg_backend_kv_host(be, &host) == 0) {
		p->k = host.k;
		p->v = host.v;
		p->k_layer_stride = host.k_layer_stride;
		p->k_block_stride = host.k_block_stride;
		p->v_layer_stride = host.v_layer_stride;
		p->v_block_stride = host.v_block_stride;
	}
	p->table_cap = 16;
	while (p->table_cap < 2 * n_blocks)
		p->table_cap *= 2;
	p->meta = calloc(n_blocks, sizeof *p->meta);
	p->free_list = malloc(n_blocks * sizeof *p->free_list);
	p->table = malloc(p->table_cap * sizeof *p->table);
	if (!p->meta || !p->free_list || !p->table) {
		kv_pool_free(p);
		snprintf(err, errlen, "kv: out of memory for the books of %lld blocks", (long long)n_blocks);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < p->table_cap; i++)
		p->table[i] = SLOT_EMPTY;
	/* LIFO: low block numbers first, so touched memory stays compact. */
	for (int64_t i = 0; i < n_blocks; i++) {
		p->free_list[i] = (int32_t)(n_blocks - 1 - i);
		p->meta[i].lru_prev = p->meta[i].lru_next = -1;
	}
	p->n_free = n_blocks;
	return 0;
}

void kv_pool_free(struct kv_pool *p)
{
	free(p->meta);
	free(p->free_list);
	free(p->table);
	memset(p, 0, sizeof *p);
}

int64_t kv_available(const struct kv_pool *p)
{
	return p->n_free + p->n_cached;
}

int64_t kv_used(const struct kv_pool *p)
{
	return p->n_blocks - p->n_free - p->n_cached;
}

int kv_blocks_needed(const struct kv_pool *p, int n_tokens)
{
	return (n_tokens + p->block_size - 1) / p->block_size;
}

/* ---- LRU of cached blocks --------------------------------------------------- */

static void lru_unlink(struct kv_pool *p, int32_t b)
{
	struct kv_block_meta *m = &p->meta[b];
	if (m->lru_prev >= 0)
		p->meta[m->lru_prev].lru_next = m->lru_next;
	else
		p->lru_head = m->lru_next;
	if (m->lru_next >= 0)
		p->meta[m->lru_next].lru_prev = m->lru_prev;
	else
		p->lru_tail = m->lru_prev;
	m->lru_prev = m->lru_next = -1;
	p->n_cached--;
}

/* First in line for eviction. */
static void lru_push_head(struct kv_pool *p, int32_t b)
{
	struct kv_block_meta *m = &p->meta[b];
	m->lru_prev = -1;
	m->lru_next = p->lru_head;
	if (p->lru_head >= 0)
		p->meta[p->lru_head].lru_prev = b;
	else
		p->lru_tail = b;
	p->lru_head = b;
	p->n_cached++;
}

static void lru_push(struct kv_pool *p, int32_t b)
{
	struct kv_block_meta *m = &p->meta[b];
	m->lru_prev = p->lru_tail;
	m->lru_next = -1;
	if (p->lru_tail >= 0)
		p->meta[p->lru_tail].lru_next = b;
	else
		p->lru_head = b;
	p->lru_tail = b;
	p->n_cached++;
}

/* ---- hash table --------------------------------------------------------------- */

static struct kv_hash chain_hash(struct kv_hash parent, const int32_t *tokens, int n)
{
	XXH3_state_t st;
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, &parent, sizeof parent);
	XXH3_128bits_update(&st, tokens, n * sizeof *tokens);
	XXH128_hash_t h = XXH3_128bits_digest(&st);
	return (struct kv_hash){ h.low64, h.high64 };
}

static bool hash_eq(struct kv_hash a, struct kv_hash b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

static int32_t table_find(const struct kv_pool *p, struct kv_hash h)
{
	uint64_t mask = p->table_cap - 1;
	for (uint64_t i = h.lo & mask, n = 0; n < (uint64_t)p->table_cap; i = (i + 1) & mask, n++) {
		int32_t b = p->table[i];
		if (b == SLOT_EMPTY)
			return -1;
		if (b >= 0 && hash_eq(p->meta[b].hash, h))
			return b;
	}
	return -1;
}

static void table_insert(struct kv_pool *p, int32_t blk)
{
	uint64_t mask = p->table_cap - 1;
	for (uint64_t i = p->meta[blk].hash.lo & mask;; i = (i + 1) & mask)
		if (p->table[i] < 0) {
			if (p->table[i] == SLOT_DELETED)
				p->n_deleted--;
			p->table[i] = blk;
			p->meta[blk].hashed = true;
			return;
		}
}

/* Tombstones lengthen probes; past a quarter of the table, start over
 * from the blocks still published. */
static void table_rebuild(struct kv_pool *p)
{
	for (int64_t i = 0; i < p->table_cap; i++)
		p->table[i] = SLOT_EMPTY;
	p->n_deleted = 0;
	for (int32_t b = 0; b < p->n_blocks; b++)
		if (p->meta[b].hashed)
			table_insert(p, b);
}

static void table_remove(struct kv_pool *p, int32_t blk)
{
	uint64_t mask = p->table_cap - 1;
	for (uint64_t i = p->meta[blk].hash.lo & mask;; i = (i + 1) & mask) {
		if (p->table[i] == SLOT_EMPTY)
			break;
		if (p->table[i] == blk) {
			p->table[i] = SLOT_DELETED;
			p->n_deleted++;
			break;
		}
	}
	p->meta[blk].hashed = false;
	if (p->n_deleted > p->table_cap / 4)
		table_rebuild(p);
}

/* ---- sequences ---------------------------------------------------------------- */

static int grow_table(struct kv_seq *s, int need)
{
	if (need <= s->cap)
		return 0;
	int cap = s->cap ? s->cap : 8;
	while (cap < need)
		cap *= 2;
	int32_t *nb = realloc(s->blocks, cap * sizeof *nb);
	if (!nb)
		return -ENOMEM;
	s->blocks = nb;
	s->cap = cap;
	return 0;
}

/* The chain's root holds the sequence's salt and names the cache types,
 * so a block written in one type is never found by a pool of another (the
 * tier keeps blocks across restarts). f16/f16 keeps the root it had. */
static struct kv_hash parent_of(const struct kv_pool *p, const struct kv_seq *s, int i)
{
	if (i > 0)
		return p->meta[s->blocks[i - 1]].hash;
	const uint64_t types = p->type_k == PG_TYPE_F16 && p->type_v == PG_TYPE_F16
				       ? 0
				       : (uint64_t)p->type_k << 40 | (uint64_t)p->type_v << 32 | 1ull << 63;
	return (struct kv_hash){ 0x70a60da ^ types, s->salt };
}

int kv_seq_match_prefix(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n)
{
	if (!p->prefix_cache || s->n_blocks != s->n_hashed)
		return s->n_blocks * p->block_size;
	int max_blocks = (n - 1) / p->block_size; /* keep one token to compute */
	if (grow_table(s, max_blocks))
		return s->n_blocks * p->block_size;
	struct kv_hash h = parent_of(p, s, s->n_blocks);
	for (int i = s->n_blocks; i < max_blocks; i++) {
		h = chain_hash(h, tokens + (size_t)i * p->block_size, p->block_size);
		int32_t b = table_find(p, h);
		if (b < 0)
			break;
		if (p->meta[b].refcnt++ == 0)
			lru_unlink(p, b);
		s->blocks[s->n_blocks++] = b;
		p->hits_blocks++;
	}
	s->n_hashed = s->n_blocks;
	return s->n_blocks * p->block_size;
}

static int32_t take_block(struct kv_pool *p)
{
	if (p->n_free)
		return p->free_list[--p->n_free];
	int32_t b = p->lru_head;
	if (p->evict)
		p->evict(p->evict_user, p, b);
	lru_unlink(p, b);
	table_remove(p, b);
	p->evictions++;
	return b;
}

int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_tokens)
{
	int need = kv_blocks_needed(p, n_tokens);
	if (need <= s->n_blocks)
		return 0;
	if (need - s->n_blocks > kv_available(p))
		return -ENOSPC;
	if (grow_table(s, need))
		return -ENOMEM;
	while (s->n_blocks < need) {
		int32_t b = take_block(p);
		p->meta[b].refcnt = 1;
		s->blocks[s->n_blocks++] = b;
	}
	return 0;
}

void kv_seq_commit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n_computed)
{
	if (!p->prefix_cache)
		return;
	int full = n_computed / p->block_size;
	if (full > s->n_blocks)
		full = s->n_blocks;
	for (int i = s->n_hashed; i < full; i++) {
		int32_t b = s->blocks[i];
		struct kv_hash h = chain_hash(parent_of(p, s, i), tokens + (size_t)i * p->block_size,
					      p->block_size);
		p->meta[b].hash = h;
		/* An equal block already published keeps its place: this one
		 * stays private and goes back to the free list when released. */
		if (table_find(p, h) < 0)
			table_insert(p, b);
	}
	if (full > s->n_hashed)
		s->n_hashed = full;
}

void kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
	/* Last block first, so a prefix's earlier blocks (more widely shared)
	 * are the last to be evicted. */
	for (int i = s->n_blocks - 1; i >= 0; i--) {
		int32_t b = s->blocks[i];
		if (--p->meta[b].refcnt > 0)
			continue;
		if (p->meta[b].hashed)
			lru_push(p, b);
		else
			p->free_list[p->n_free++] = b;
	}
	free(s->blocks);
	uint64_t salt = s->salt; /* a preempted sequence comes back in its scope */
	memset(s, 0, sizeof *s);
	s->salt = salt;
}

void kv_seq_truncate(struct kv_pool *p, struct kv_seq *s, int n_tokens)
{
	int keep = kv_blocks_needed(p, n_tokens > 0 ? n_tokens : 0);
	while (s->n_blocks > keep)
		kv_block_put(p, s->blocks[--s->n_blocks]);
	if (s->n_hashed > s->n_blocks)
		s->n_hashed = s->n_blocks;
}

void kv_drop_cache(struct kv_pool *p)
{
	while (p->lru_head >= 0) {
		int32_t b = p->lru_head;
		lru_unlink(p, b);
		table_remove(p, b);
		p->free_list[p->n_free++] = b;
	}
	table_rebuild(p);
}

/* ---- the door for the levels below ------------------------------------------ */

size_t kv_pool_block_bytes(const struct kv_pool *p)
{
	return (p->k_row + p->v_row) * (size_t)p->block_size * (size_t)p->n_layer;
}

int kv_block_span(const struct kv_pool *p, int32_t b, struct iovec *iov, int *n)
{
	if (!p->k || !p->v)
		return -EOPNOTSUPP;
	if (*n < 2)
		return -ENOBUFS;
	iov[0] = (struct iovec){ p->k + (size_t)b * p->k_block_stride, p->k_row * p->block_size * p->n_layer };
	iov[1] = (struct iovec){ p->v + (size_t)b * p->v_block_stride, p->v_row * p->block_size * p->n_layer };
	*n = 2;
	return 0;
}

int kv_pool_regions(const struct kv_pool *p, size_t max_len, struct iovec *iov, int max)
{
	if (!p->k || !p->v)
		return -EOPNOTSUPP;
	int n = 0;
	for (int half = 0; half < 2; half++) {
		/* K and V blocks differ in size when their cache types do */
		const size_t span = half ? p->v_block_stride : p->k_block_stride;
		const int64_t per = span && max_len >= span ? (int64_t)(max_len / span) : 0;
		if (!per)
			return -EINVAL;
		char *base = (char *)(half ? p->v : p->k);
		for (int64_t b = 0; b < p->n_blocks; b += per) {
			if (n == max)
				return -ENOBUFS;
			int64_t k = p->n_blocks - b < per ? p->n_blocks - b : per;
			iov[n++] = (struct iovec){ base + (size_t)b * span, (size_t)k * span };
		}
	}
	return n;
}

int kv_block_copy_out(const struct kv_pool *p, int32_t b, void *buf)
{
	return pg_backend_kv_copy_out(p->be, b, buf);
}

int kv_block_copy_in(struct kv_pool *p, int32_t b, const void *buf)
{
	return pg_backend_kv_copy_in(p->be, b, buf);
}

int32_t kv_block_take(struct kv_pool *p)
{
	if (!kv_available(p))
		return -1;
	int32_t b = take_block(p);
	p->meta[b].refcnt = 1;
	return b;
}

bool kv_block_publish(struct kv_pool *p, int32_t b, struct kv_hash h)
{
	if (!p->prefix_cache || table_find(p, h) >= 0)
		return false;
	p->meta[b].hash = h;
	table_insert(p, b);
	return true;
}

void kv_block_put(struct kv_pool *p, int32_t b)
{
	if (--p->meta[b].refcnt > 0)
		return;
	if (p->meta[b].hashed)
		lru_push(p, b);
	else
		p->free_list[p->n_free++] = b;
}

void kv_block_hold(struct kv_pool *p, int32_t b)
{
	if (p->meta[b].refcnt++ == 0 && p->meta[b].hashed)
		lru_unlink(p, b);
}

void kv_block_put_first(struct kv_pool *p, int32_t b)
{
	if (--p->meta[b].refcnt > 0)
		return;
	if (p->meta[b].hashed)
		lru_push_head(p, b);
	else
		p->free_list[p->n_free++] = b;
}

void kv_block_unpublish(struct kv_pool *p, int32_t b)
{
	if (p->meta[b].hashed)
		table_remove(p, b);
}

int32_t kv_cached_next(const struct kv_pool *p, int32_t b)
{
	return b < 0 ? p->lru_head : p->meta[b].lru_next;
}

bool kv_pool_has(const struct kv_pool *p, struct kv_hash h)
{
	return table_find(p, h) >= 0;
}

int kv_seq_next_hashes(const struct kv_pool *p, const struct kv_seq *s, const int32_t *tokens, int n,
		       struct kv_hash *out, int max)
{
	if (s->n_blocks != s->n_hashed)
		return 0;
	int last = (n - 1) / p->block_size, k = 0;
	struct kv_hash h = parent_of(p, s, s->n_blocks);
	for (int i = s->n_blocks; i < last && k < max; i++) {
		h = chain_hash(h, tokens + (size_t)i * p->block_size, p->block_size);
		out[k++] = h;
	}
	return k;
}
