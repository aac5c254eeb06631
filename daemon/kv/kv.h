/* daemon/kv/kv.h — the paged KV-cache: a pool of fixed-size blocks (all
 * layers of block_size tokens each, K and V in f16) and per-sequence block
 * tables. Nothing outside daemon/kv/ reads a block table: others reach a
 * token's K/V rows through kv_k_row / kv_v_row.
 */
#ifndef PAGODA_KV_H
#define PAGODA_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

struct kv_pool {
	int64_t n_blocks;
	int block_size;
	int n_layer;
	int kv_dim;          /* n_head_kv * head_dim */
	size_t layer_stride; /* elements between two layers of a block */
	size_t block_stride; /* elements between two blocks */
	pg_f16 *k, *v;
	/* block bookkeeping */
	int32_t *refcnt;
	int32_t *free_list;
	int64_t n_free;
};

struct kv_seq {
	int32_t *blocks;     /* block table */
	int n_blocks, cap;
	int n_tokens;        /* positions with K/V written */
};

int kv_pool_init(struct kv_pool *p, int64_t n_blocks, int block_size, int n_layer, int kv_dim,
		 char *err, size_t errlen);
void kv_pool_free(struct kv_pool *p);
size_t kv_block_bytes(int block_size, int n_layer, int kv_dim);

/* Make room for positions [0, n_tokens). Returns 0, or -ENOSPC when the
 * pool cannot supply the blocks (the sequence then holds what it had). */
int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_tokens);
/* Returns every block to the pool and empties the table. */
void kv_seq_release(struct kv_pool *p, struct kv_seq *s);
int kv_blocks_needed(const struct kv_pool *p, int n_tokens);

static inline pg_f16 *kv_row(const struct kv_pool *p, pg_f16 *base, const struct kv_seq *s,
			     int layer, int pos)
{
	int32_t b = s->blocks[pos / p->block_size];
	return base + (size_t)b * p->block_stride + (size_t)layer * p->layer_stride +
	       (size_t)(pos % p->block_size) * p->kv_dim;
}

static inline pg_f16 *kv_k_row(const struct kv_pool *p, const struct kv_seq *s, int layer, int pos)
{
	return kv_row(p, p->k, s, layer, pos);
}

static inline pg_f16 *kv_v_row(const struct kv_pool *p, const struct kv_seq *s, int layer, int pos)
{
	return kv_row(p, p->v, s, layer, pos);
}

#endif
