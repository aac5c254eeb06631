/* kernels/cpu/cpu_backend.c — the CPU behind the backend door: a thread
 * pool, the weights as kernels/cpu/weights.c lays them out, the KV pool in
 * anonymous host memory, and forward.c's step. The reference backend: it
 * rounds as llama.cpp's CPU backend does. */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct cpu_backend *cpu_of(struct pg_backend *b)
{
	return (struct cpu_backend *)b;
}

static int cpu_probe(char *why, size_t whylen)
{
	if (whylen)
		why[0] = '\0';
	return 1;
}

static const struct pg_backend_ops cpu_ops;

static int cpu_create(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t errlen)
{
	struct cpu_backend *cb = calloc(1, sizeof *cb);
	if (!cb) {
		snprintf(err, errlen, "cpu: out of memory");
		return -ENOMEM;
	}
	cb->base = (struct pg_backend){ .ops = &cpu_ops, .name = "cpu",
					.caps = PG_BACKEND_CAP_EXACT | PG_BACKEND_CAP_KV_HOST };
	cb->pool = pg_pool_create(o ? o->threads : 0);
	if (!cb->pool) {
		free(cb);
		snprintf(err, errlen, "cpu: cannot start the thread pool");
		return -ENOMEM;
	}
	cb->threads = pg_pool_size(cb->pool);
	if (o) {
		cb->progress = o->progress;
		cb->progress_user = o->progress_user;
	}
	*out = &cb->base;
	return 0;
}

static size_t kv_bytes(const struct cpu_kv *kv, const struct cpu_kv_half *h)
{
	return h->block_stride * (size_t)kv->n_blocks;
}

static void cpu_destroy(struct pg_backend *b)
{
	struct cpu_backend *cb = cpu_of(b);
	fwd_ctx_free(cb->fwd);
	if (cb->kv.k.base)
		munmap(cb->kv.k.base, kv_bytes(&cb->kv, &cb->kv.k));
	if (cb->kv.v.base)
		munmap(cb->kv.v.base, kv_bytes(&cb->kv, &cb->kv.v));
	cpu_model_free(&cb->m);
	pg_pool_destroy(cb->pool);
	free(cb);
}

static void cpu_describe(const struct pg_backend *b, char *buf, size_t len)
{
	const struct cpu_backend *cb = (const struct cpu_backend *)b;
	snprintf(buf, len, "cpu (%s, %d thread%s)", pg_cpu_isa(), cb->threads, cb->threads == 1 ? "" : "s");
}

/* MemAvailable, and MemTotal, in bytes: 0 when /proc cannot be read. */
static int cpu_mem_info(const struct pg_backend *b, struct pg_mem_info *out)
{
	*out = (struct pg_mem_info){ 0 };
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return -errno;
	char line[128];
	unsigned long long kb;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			out->total = (int64_t)kb * 1024;
		else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			out->free = (int64_t)kb * 1024;
	}
	fclose(f);
	return 0;
}

static int cpu_load_weights(struct pg_backend *b, const struct pg_model_desc *d, char *err, size_t errlen)
{
	struct cpu_backend *cb = cpu_of(b);
	if (cb->loaded) {
		snprintf(err, errlen, "cpu: weights already loaded");
		return -EBUSY;
	}
	int r = cpu_model_load(cb, d, err, errlen);
	if (r) {
		cpu_model_free(&cb->m);
		return r;
	}
	cb->loaded = true;
	return 0;
}

static int cpu_reserve(struct pg_backend *b, const struct pg_step_limits *lim, char *err, size_t errlen)
{
	struct cpu_backend *cb = cpu_of(b);
	if (!cb->loaded) {
		snprintf(err, errlen, "cpu: reserve before load_weights");
		return -EINVAL;
	}
	if (lim->max_tokens <= 0 || lim->n_ctx <= 0) {
		snprintf(err, errlen, "cpu: bad step limits (%d tokens, context %d)", lim->max_tokens, lim->n_ctx);
		return -EINVAL;
	}
	if (cb->fwd && lim->max_tokens <= cb->lim.max_tokens && lim->n_ctx <= cb->lim.n_ctx)
		return 0;
	struct fwd_ctx *c = fwd_ctx_create(&cb->m, lim->max_tokens, lim->n_ctx, cb->pool);
	if (!c) {
		snprintf(err, errlen, "cpu: out of memory for %d-token steps", lim->max_tokens);
		return -ENOMEM;
	}
	fwd_ctx_free(cb->fwd);
	cb->fwd = c;
	cb->lim = *lim;
	return 0;
}

/* As llama.cpp refuses it (llama_init_from_model): a head of K or V must
 * be a whole number of the cache type's blocks. */
static int kv_type_check(const struct cpu_backend *cb, const char *which, uint32_t type, char *err, size_t errlen)
{
	if (!pg_kv_type_ok(type)) {
		snprintf(err, errlen, "cpu: %s cache type %s is not one of " PG_KV_TYPE_NAMES, which,
			 pg_type_name(type));
		return -EINVAL;
	}
	const uint32_t blck = pg_type_info(type)->blck;
	if (cb->m.hp.head_dim % (int)blck) {
		snprintf(err, errlen, "%s cache type %s with block size %u does not divide the head size %d", which,
			 pg_kv_type_name(type), blck, cb->m.hp.head_dim);
		return -EINVAL;
	}
	return 0;
}

static int kv_half_map(struct cpu_kv_half *h, const struct pg_kv_layout *l, uint32_t type, int64_t n_blocks)
{
	h->type = type;
	h->row = pg_row_size(type, (uint64_t)l->kv_dim);
	h->layer_stride = h->row * (size_t)l->block_size;
	h->block_stride = h->layer_stride * (size_t)l->n_layer;
	/* Anonymous mappings: pages cost memory only once a block is used. */
	void *p = mmap(NULL, h->block_stride * (size_t)n_blocks, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	h->base = p == MAP_FAILED ? NULL : p;
	return h->base ? 0 : -ENOMEM;
}

static int cpu_kv_alloc(struct pg_backend *b, const struct pg_kv_layout *l, int64_t n_blocks, char *err,
			size_t errlen)
{
	struct cpu_backend *cb = cpu_of(b);
	if (cb->kv.k.base) {
		snprintf(err, errlen, "cpu: KV pool already allocated");
		return -EBUSY;
	}
	if (n_blocks <= 0 || l->block_size <= 0 || l->n_layer <= 0 || l->kv_dim <= 0) {
		snprintf(err, errlen, "cpu: bad KV pool shape (%lld blocks of %d tokens)", (long long)n_blocks,
			 l->block_size);
		return -EINVAL;
	}
	int r;
	if ((r = kv_type_check(cb, "K", l->type_k, err, errlen)) || (r = kv_type_check(cb, "V", l->type_v, err, errlen)))
		return r;
	struct cpu_kv kv = { .layout = *l, .n_blocks = n_blocks };
	if (kv_half_map(&kv.k, l, l->type_k, n_blocks) || kv_half_map(&kv.v, l, l->type_v, n_blocks)) {
		if (kv.k.base)
			munmap(kv.k.base, kv_bytes(&kv, &kv.k));
		snprintf(err, errlen, "kv: cannot allocate %zu bytes for %lld blocks", pg_kv_block_bytes(l) * n_blocks,
			 (long long)n_blocks);
		return -ENOMEM;
	}
	cb->kv = kv;
	return 0;
}

static int cpu_kv_host(struct pg_backend *b, struct pg_kv_host *out)
{
	const struct cpu_kv *kv = &cpu_of(b)->kv;
	if (!kv->k.base)
		return -EINVAL;
	*out = (struct pg_kv_host){ kv->k.base, kv->v.base, kv->k.layer_stride, kv->k.block_stride,
				    kv->v.layer_stride, kv->v.block_stride };
	return 0;
}

/* A block's K (then V) part is one run of n_layer * block_size rows in the
 * pool, already in the host image's order. */
static int cpu_kv_copy_out(struct pg_backend *b, int32_t block, void *dst)
{
	const struct cpu_kv *kv = &cpu_of(b)->kv;
	if (!kv->k.base || block < 0 || block >= kv->n_blocks)
		return -EINVAL;
	memcpy(dst, kv->k.base + (size_t)block * kv->k.block_stride, kv->k.block_stride);
	memcpy((char *)dst + kv->k.block_stride, kv->v.base + (size_t)block * kv->v.block_stride, kv->v.block_stride);
	return 0;
}

static int cpu_kv_copy_in(struct pg_backend *b, int32_t block, const void *src)
{
	const struct cpu_kv *kv = &cpu_of(b)->kv;
	if (!kv->k.base || block < 0 || block >= kv->n_blocks)
		return -EINVAL;
	memcpy(kv->k.base + (size_t)block * kv->k.block_stride, src, kv->k.block_stride);
	memcpy(kv->v.base + (size_t)block * kv->v.block_stride, (const char *)src + kv->k.block_stride,
	       kv->v.block_stride);
	return 0;
}

static int cpu_step(struct pg_backend *b, const struct pg_batch *batch)
{
	struct cpu_backend *cb = cpu_of(b);
	if (!cb->fwd || !cb->kv.k.base) {
		snprintf(cb->err, sizeof cb->err, "cpu: step before reserve and kv_alloc");
		return -EINVAL;
	}
	int r = cpu_forward(&cb->m, cb->fwd, &cb->kv, batch);
	if (r)
		snprintf(cb->err, sizeof cb->err, "cpu: step of %d tokens: %s", batch->n_tokens, strerror(-r));
	return r;
}

static int cpu_sync(struct pg_backend *b)
{
	return 0; /* every call completes before it returns */
}

static const char *cpu_last_error(const struct pg_backend *b)
{
	return ((const struct cpu_backend *)b)->err;
}

static const struct pg_backend_ops cpu_ops = {
	.abi = PG_BACKEND_ABI,
	.name = "cpu",
	.probe = cpu_probe,
	.create = cpu_create,
	.destroy = cpu_destroy,
	.describe = cpu_describe,
	.mem_info = cpu_mem_info,
	.load_weights = cpu_load_weights,
	.reserve = cpu_reserve,
	.kv_alloc = cpu_kv_alloc,
	.kv_host = cpu_kv_host,
	.kv_copy_out = cpu_kv_copy_out,
	.kv_copy_in = cpu_kv_copy_in,
	.step = cpu_step,
	.sync = cpu_sync,
	.last_error = cpu_last_error,
};

const struct pg_backend_ops *pg_backend_cpu_ops(void)
{
	return &cpu_ops;
}

const struct cpu_model *pg_cpu_backend_model(const struct pg_backend *b)
{
	if (!b || b->ops != &cpu_ops)
		return NULL;
	const struct cpu_backend *cb = (const struct cpu_backend *)b;
	return cb->loaded ? &cb->m : NULL;
}

struct pg_pool *pg_cpu_backend_pool(const struct pg_backend *b)
{
	return b && b->ops == &cpu_ops ? ((const struct cpu_backend *)b)->pool : NULL;
}
