/* daemon/kv/pool.c — block allocation for the paged KV-cache. */
#include "daemon/kv/kv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

size_t kv_block_bytes(int block_size, int n_layer, int kv_dim)
{
	return 2 * sizeof(pg_f16) * (size_t)block_size * n_layer * kv_dim;
}

int kv_pool_init(struct kv_pool *p, int64_t n_blocks, int block_size, int n_layer, int kv_dim,
		 char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	if (n_blocks <= 0 || n_blocks > INT32_MAX || block_size <= 0 || n_layer <= 0 || kv_dim <= 0) {
		snprintf(err, errlen, "kv: bad pool shape (%lld blocks of %d tokens)", (long long)n_blocks,
			 block_size);
		return -EINVAL;
	}
	p->n_blocks = n_blocks;
	p->block_size = block_size;
	p->n_layer = n_layer;
	p->kv_dim = kv_dim;
	p->layer_stride = (size_t)block_size * kv_dim;
	p->block_stride = p->layer_stride * n_layer;
	size_t bytes = p->block_stride * sizeof(pg_f16) * (size_t)n_blocks;
	/* Anonymous mappings: pages are touched only when a block is used. */
	p->k = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	p->v = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	p->refcnt = calloc(n_blocks, sizeof *p->refcnt);
	p->free_list = malloc(n_blocks * sizeof *p->free_list);
	if (p->k == MAP_FAILED || p->v == MAP_FAILED || !p->refcnt || !p->free_list) {
		if (p->k == MAP_FAILED)
			p->k = NULL;
		if (p->v == MAP_FAILED)
			p->v = NULL;
		kv_pool_free(p);
		snprintf(err, errlen, "kv: cannot allocate %zu bytes for %lld blocks", 2 * bytes,
			 (long long)n_blocks);
		return -ENOMEM;
	}
	/* LIFO: hand out low block numbers first so memory stays compact. */
	for (int64_t i = 0; i < n_blocks; i++)
		p->free_list[i] = (int32_t)(n_blocks - 1 - i);
	p->n_free = n_blocks;
	return 0;
}

void kv_pool_free(struct kv_pool *p)
{
	size_t bytes = p->block_stride * sizeof(pg_f16) * (size_t)p->n_blocks;
	if (p->k)
		munmap(p->k, bytes);
	if (p->v)
		munmap(p->v, bytes);
	free(p->refcnt);
	free(p->free_list);
	memset(p, 0, sizeof *p);
}

int kv_blocks_needed(const struct kv_pool *p, int n_tokens)
{
	return (n_tokens + p->block_size - 1) / p->block_size;
}

int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_tokens)
{
	int need = kv_blocks_needed(p, n_tokens);
	if (need <= s->n_blocks)
		return 0;
	if (need - s->n_blocks > p->n_free)
		return -ENOSPC;
	if (need > s->cap) {
		int cap = s->cap ? s->cap : 8;
		while (cap < need)
			cap *= 2;
		int32_t *nb = realloc(s->blocks, cap * sizeof *nb);
		if (!nb)
			return -ENOMEM;
		s->blocks = nb;
		s->cap = cap;
	}
	while (s->n_blocks < need) {
		int32_t b = p->free_list[--p->n_free];
		p->refcnt[b] = 1;
		s->blocks[s->n_blocks++] = b;
	}
	return 0;
}

void kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
	for (int i = 0; i < s->n_blocks; i++) {
		int32_t b = s->blocks[i];
		if (--p->refcnt[b] == 0)
			p->free_list[p->n_free++] = b;
	}
	free(s->blocks);
	memset(s, 0, sizeof *s);
}
