/* daemon/kv/kv.h — the paged KV-cache: a pool of fixed-size blocks (all
 * layers of block_size tokens each, K and V in f16 or a quantized cache
 * type, kernels/types.h: pg_kv_type_ok), per-sequence block
 * tables, reference counts and prefix caching. The backend owns the
 * blocks' bytes (kernels/pg_backend.h); the pool here keeps the books.
 *
 * A full block is content-addressed by a chained hash of (parent block's
 * hash, its token ids), the chain rooted in the cache types: a later sequence whose prompt starts with the same
 * tokens maps the same blocks instead of recomputing them. Blocks no
 * sequence holds stay cached, least recently released first out, until
 * their memory is needed. A block another sequence may map is never
 * written: sequences only write positions past their matched prefix, in
 * blocks they alone hold.
 *
 * Nothing outside daemon/kv/ reads a block table: the engine hands each
 * sequence's to the backend's step (kv_seq_table), and host code reaches a
 * token's K/V rows through kv_k_row / kv_v_row. Not thread-safe: the
 * engine thread owns the pool.
 */
#ifndef PAGODA_KV_H
#define PAGODA_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/pg_backend.h"
#include "kernels/types.h"

struct iovec;

struct kv_hash {
	uint64_t lo, hi;
};

struct kv_block_meta {
	int32_t refcnt;
	int32_t lru_prev, lru_next; /* cached (refcnt 0, hashed) blocks */
	bool hashed;                /* listed in the hash table */
	struct kv_hash hash;
};

struct kv_pool {
	int64_t n_blocks;
	int block_size;
	int n_layer;
	int kv_dim;          /* n_head_kv * head_dim */
	uint32_t type_k, type_v;
	size_t k_row, v_row; /* bytes of a K row, a V row */
	/* bytes between two layers of a block, between two blocks */
	size_t k_layer_stride, k_block_stride, v_layer_stride, v_block_stride;
	struct pg_backend *be; /* owns the bytes */
	uint8_t *k, *v;       /* where they are; NULL when not in host memory */
	struct kv_block_meta *meta;
	int32_t *free_list;  /* blocks holding nothing */
	int64_t n_free;
	int32_t lru_head, lru_tail; /* cached blocks, oldest first; -1 when empty */
	int64_t n_cached;
	int32_t *table;      /* open addressing: block id, -1 empty, -2 deleted */
	int64_t table_cap, n_deleted;
	bool prefix_cache;
	/* Called with a cached block about to be reused, while its hash and
	 * bytes are intact: the level below (kv/tier.h) keeps a copy. */
	void (*evict)(void *user, struct kv_pool *p, int32_t block);
	void *evict_user;
	/* counters */
	uint64_t hits_blocks, evictions;
};

struct kv_seq {
	int32_t *blocks;     /* block table */
	int n_blocks, cap;
	int n_hashed;        /* leading blocks whose hash chain is known */
	/* The root of its hash chain: sequences of different salts never
	 * share a cached block (prefix-cache scope); 0 is the global cache.
	 * Kept across kv_seq_release. */
	uint64_t salt;
};

/* Has the backend allocate the blocks' bytes (pg_backend_kv_alloc), then
 * keeps the books for them. kv_pool_init: K and V in f16. */
int kv_pool_init(struct kv_pool *p, struct pg_backend *be, int64_t n_blocks, int block_size, int n_layer,
		 int kv_dim, bool prefix_cache, char *err, size_t errlen);
int kv_pool_init_layout(struct kv_pool *p, struct pg_backend *be, int64_t n_blocks, const struct pg_kv_layout *l,
			bool prefix_cache, char *err, size_t errlen);
void kv_pool_free(struct kv_pool *p);

/* Blocks that could be handed out now (free + cached). */
int64_t kv_available(const struct kv_pool *p);
int64_t kv_used(const struct kv_pool *p);
int kv_blocks_needed(const struct kv_pool *p, int n_tokens);

/* For a sequence holding only published blocks (none, or an earlier
 * match): maps the further cached blocks that hold a prefix of tokens[0, n),
 * leaving at least one token to compute. Returns the number of tokens now
 * present (a multiple of block_size). */
int kv_seq_match_prefix(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n);
/* Make room for positions [0, n_tokens). Returns 0, or -ENOSPC when the
 * pool cannot supply the blocks (the sequence then holds what it had). */
int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_tokens);
/* After positions [0, n_computed) hold K/V for tokens: publishes every full
 * block not yet published, so later sequences can share it. */
void kv_seq_commit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n_computed);
/* Returns every block (cached ones stay cached) and empties the table. */
void kv_seq_release(struct kv_pool *p, struct kv_seq *s);
/* Gives back the blocks past those that positions [0, n_tokens) need:
 * speculative decoding rolls back the positions of rejected draft tokens
 * (never published: kv_seq_commit only sees accepted ones). */
void kv_seq_truncate(struct kv_pool *p, struct kv_seq *s, int n_tokens);
/* Forgets every cached block (the ones no sequence holds). */
void kv_drop_cache(struct kv_pool *p);

/* A sequence's block table, as a backend's step takes it. */
static inline struct pg_block_table kv_seq_table(const struct kv_seq *s)
{
	return (struct pg_block_table){ s->blocks, s->n_blocks };
}

/* ---- the door for the levels below (daemon/kv/tier.h) ----------------------
 * A block's bytes are reached only through these, so that the pool's
 * memory may move (to a compute backend) without the tiers changing. */

/* Bytes of one block: K of every layer, then V of every layer. */
size_t kv_pool_block_bytes(const struct kv_pool *p);
/* Host-addressable spans of block b, in the order copy_out writes them:
 * up to *n iovecs; *n becomes the number used. -ENOBUFS when *n is short,
 * -EOPNOTSUPP when the bytes are not in host memory. */
int kv_block_span(const struct kv_pool *p, int32_t b, struct iovec *iov, int *n);
/* The host memory holding every block's bytes, as regions of at most
 * max_len bytes, none splitting a block's span: for registering it with
 * the kernel. Returns the count, -ENOBUFS past max, -EOPNOTSUPP as above. */
int kv_pool_regions(const struct kv_pool *p, size_t max_len, struct iovec *iov, int max);
/* Through a staging buffer of kv_pool_block_bytes bytes (the backend's
 * kv_copy_out / kv_copy_in: the block's host image). */
int kv_block_copy_out(const struct kv_pool *p, int32_t b, void *buf);
int kv_block_copy_in(struct kv_pool *p, int32_t b, const void *buf);

/* A block for this level to fill: refcnt 1, unhashed (may evict a cached
 * one). -1 when every block is held. */
int32_t kv_block_take(struct kv_pool *p);
/* Publishes a filled block under h, as kv_seq_commit would; false when an
 * equal block is published already (b stays private). */
bool kv_block_publish(struct kv_pool *p, int32_t b, struct kv_hash h);
/* Drops a reference: a hashed block stays cached, others are freed. */
void kv_block_put(struct kv_pool *p, int32_t b);
/* A reference on block b while its bytes are written below; a cached
 * block leaves the LRU meanwhile, so that it is not reused. */
void kv_block_hold(struct kv_pool *p, int32_t b);
/* As kv_block_put, but a block that becomes cached is first in line for
 * eviction: it was held from there, and the level below has it now. */
void kv_block_put_first(struct kv_pool *p, int32_t b);
/* A held block leaves the hash table (the cache was dropped meanwhile):
 * its last put frees it. */
void kv_block_unpublish(struct kv_pool *p, int32_t b);
/* Cached blocks in eviction order: the one after b (b < 0: the first);
 * -1 past the last. */
int32_t kv_cached_next(const struct kv_pool *p, int32_t b);
bool kv_pool_has(const struct kv_pool *p, struct kv_hash h);
/* The chained hashes of the full blocks of tokens[0, n) past the s->n_blocks
 * blocks s holds (all published), leaving one token to compute: at most max
 * into out. Returns how many. */
int kv_seq_next_hashes(const struct kv_pool *p, const struct kv_seq *s, const int32_t *tokens, int n,
		       struct kv_hash *out, int max);

/* The accessors below need the bytes in host memory (p->k non-NULL);
 * the row ones give f16 rows, for an f16 pool. */
static inline uint8_t *kv_k_block(const struct kv_pool *p, const struct kv_seq *s, int layer, int i)
{
	return p->k + (size_t)s->blocks[i] * p->k_block_stride + (size_t)layer * p->k_layer_stride;
}

static inline uint8_t *kv_v_block(const struct kv_pool *p, const struct kv_seq *s, int layer, int i)
{
	return p->v + (size_t)s->blocks[i] * p->v_block_stride + (size_t)layer * p->v_layer_stride;
}

static inline pg_f16 *kv_k_row(const struct kv_pool *p, const struct kv_seq *s, int layer, int pos)
{
	return (pg_f16 *)(kv_k_block(p, s, layer, pos / p->block_size) + (size_t)(pos % p->block_size) * p->k_row);
}

static inline pg_f16 *kv_v_row(const struct kv_pool *p, const struct kv_seq *s, int layer, int pos)
{
	return (pg_f16 *)(kv_v_block(p, s, layer, pos / p->block_size) + (size_t)(pos % p->block_size) * p->v_row);
}

#endif
