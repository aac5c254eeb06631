/* kernels/cuda/backend.cu — the CUDA backend behind kernels/pg_backend.h:
 * the ops table and its entry (pg_backend_cuda_entry, which the registry
 * dlopens libpagoda-cuda.so for), the device, its memory, the KV pool.
 * Weights: weights.cu; the step: step.cu. */
#include <stdarg.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda.h"

void cu_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- probe, create, describe ---------------------------------------------- */

static int cu_probe(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cu_errf(why, whylen, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return 0;
	}
	int ok = 0;
	for (int i = 0; i < n; i++) {
		cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) == cudaSuccess && p.major >= 8)
			ok++;
	}
	if (n == 0)
		cu_errf(why, whylen, "no CUDA device found");
	else if (ok == 0)
		cu_errf(why, whylen, "no CUDA device of compute capability 8.0 or newer (%d older ones)", n);
	return ok;
}

static int cu_create(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t errlen);

static void cu_describe(const struct pg_backend *pb, char *buf, size_t len)
{
	const struct cu_be *b = (const struct cu_be *)pb;
	snprintf(buf, len, "cuda %d: %s, sm_%d%d, %.1f GiB%s", b->dev, b->prop.name, b->prop.major, b->prop.minor,
		 b->prop.totalGlobalMem / (MIB * 1024), b->graphs_on ? "" : ", no graphs");
}

/* Free device memory for this backend, within its limit, less the margin. */
int64_t cu_mem_free(const struct cu_be *b)
{
	size_t fr = 0, tot = 0;
	if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
		return 0;
	int64_t f = (int64_t)fr - MEM_MARGIN;
	if (b->mem_limit > 0 && b->mem_limit - b->used < f)
		f = b->mem_limit - b->used;
	return f > 0 ? f : 0;
}

static int cu_mem_info(const struct pg_backend *pb, struct pg_mem_info *out)
{
	const struct cu_be *b = (const struct cu_be *)pb;
	if (cudaSetDevice(b->dev) != cudaSuccess)
		return -EIO;
	out->total = b->mem_limit > 0 ? b->mem_limit : (int64_t)b->prop.totalGlobalMem;
	out->free = cu_mem_free(b);
	return 0;
}

static const char *cu_last_error(const struct pg_backend *pb)
{
	return ((const struct cu_be *)pb)->last_err;
}

/* Records a CUDA failure as the backend's last error; -EIO. */
int cu_cuda_fail(struct cu_be *b, const char *what, cudaError_t e)
{
	snprintf(b->last_err, sizeof b->last_err, "cuda %d: %s: %s", b->dev, what, cudaGetErrorString(e));
	return -EIO;
}

/* A device allocation charged to this backend, refused with the sizes
 * when it does not fit. */
int cu_dev_alloc(struct cu_be *b, void **p, size_t bytes, const char *what, char *err, size_t errlen)
{
	const int64_t fr = cu_mem_free(b);
	if ((int64_t)bytes > fr) {
		cu_errf(err, errlen, "cuda %d: %s need %.1f MiB of device memory, %.1f MiB free%s (%s, %.1f MiB)", b->dev,
		     what, bytes / MIB, fr / MIB, b->mem_limit > 0 ? " within the memory limit" : "", b->prop.name,
		     b->prop.totalGlobalMem / MIB);
		return -ENOMEM;
	}
	cudaError_t e = cudaMalloc(p, bytes);
	if (e != cudaSuccess) {
		*p = NULL;
		cu_errf(err, errlen, "cuda %d: %s: cudaMalloc of %.1f MiB: %s", b->dev, what, bytes / MIB,
		     cudaGetErrorString(e));
		return -ENOMEM;
	}
	b->used += (int64_t)bytes;
	return 0;
}

void cu_dev_free(struct cu_be *b, void **p, size_t *bytes)
{
	if (*p) {
		cudaFree(*p);
		b->used -= (int64_t)*bytes;
	}
	*p = NULL;
	*bytes = 0;
}

static int cu_kv_alloc(struct pg_backend *pb, const struct pg_kv_layout *l, int64_t n_blocks, char *err,
		       size_t errlen)
{
	struct cu_be *b = cu(pb);
	if (!b->loaded || b->pool) {
		cu_errf(err, errlen, "cuda: kv_alloc comes once, after the weights");
		return -EINVAL;
	}
	if (l->type_k != PG_TYPE_F16 || l->type_v != PG_TYPE_F16) {
		cu_errf(err, errlen, "cuda: the KV cache is f16 only here (asked for K %s, V %s): use the cpu backend "
				     "for a quantized cache", pg_kv_type_name(l->type_k), pg_kv_type_name(l->type_v));
		return -EINVAL;
	}
	if (l->n_layer != b->hp.n_layer ||
	    l->kv_dim != b->hp.n_head_kv * b->hp.head_dim || l->block_size <= 0 || n_blocks <= 0) {
		cu_errf(err, errlen, "cuda: KV layout does not match the model (%d layers, kv_dim %d, f16)", b->hp.n_layer,
		     b->hp.n_head_kv * b->hp.head_dim);
		return -EINVAL;
	}
	cudaSetDevice(b->dev);
	const size_t bb = pg_kv_block_bytes(l);
	char what[96];
	snprintf(what, sizeof what, "%lld KV blocks of %.2f MiB", (long long)n_blocks, bb / MIB);
	size_t bytes = bb * (size_t)(n_blocks + 1);
	int r = cu_dev_alloc(b, (void **)&b->pool, bytes, what, err, errlen);
	if (r)
		return r;
	b->kvl = *l;
	b->n_blocks = n_blocks;
	b->block_elems = bb / sizeof(__half);
	return cu_alloc_inputs(b, err, errlen);
}

static int cu_kv_copy(struct pg_backend *pb, int32_t block, void *host, bool out)
{
	struct cu_be *b = cu(pb);
	if (!b->pool || block < 0 || block >= b->n_blocks) {
		snprintf(b->last_err, sizeof b->last_err, "cuda: KV block %d out of range", block);
		return -EINVAL;
	}
	cudaSetDevice(b->dev);
	__half *d = b->pool + (size_t)block * b->block_elems;
	const size_t bytes = b->block_elems * sizeof(__half);
	cudaError_t e = out ? cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, b->st)
			    : cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, b->st);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(b->st);
	return e == cudaSuccess ? 0 : cu_cuda_fail(b, out ? "KV block to host" : "KV block from host", e);
}

static int cu_kv_copy_out(struct pg_backend *pb, int32_t block, void *dst)
{
	return cu_kv_copy(pb, block, dst, true);
}

static int cu_kv_copy_in(struct pg_backend *pb, int32_t block, const void *src)
{
	return cu_kv_copy(pb, block, (void *)src, false);
}

static int cu_sync(struct pg_backend *pb)
{
	struct cu_be *b = cu(pb);
	cudaSetDevice(b->dev);
	cudaError_t e = cudaStreamSynchronize(b->st);
	return e == cudaSuccess ? 0 : cu_cuda_fail(b, "sync", e);
}

static void cu_destroy(struct pg_backend *pb)
{
	struct cu_be *b = cu(pb);
	cudaSetDevice(b->dev);
	if (b->st)
		cudaStreamSynchronize(b->st);
	cu_drop_graphs(b);
	size_t kvb = b->pool ? b->block_elems * sizeof(__half) * (size_t)(b->n_blocks + 1) : 0;
	cu_dev_free(b, (void **)&b->pool, &kvb);
	cu_dev_free(b, &b->sarena, &b->sbytes);
	cu_dev_free(b, &b->warena, &b->wbytes);
	cudaFree(b->d_in);
	cudaFreeHost(b->h_in);
	cudaFreeHost(b->h_ids);
	if (b->st)
		cudaStreamDestroy(b->st);
	free(b->layers);
	free(b);
}

static const struct pg_backend_ops cu_ops = {
	PG_BACKEND_ABI, "cuda",	     cu_probe,	   cu_create,	   cu_destroy,	  cu_describe,	 cu_mem_info,
	cu_load_weights, cu_reserve, cu_kv_alloc, NULL,		   cu_kv_copy_out, cu_kv_copy_in, cu_step,
	cu_sync,	 cu_last_error,
};

static int cu_create(const struct pg_backend_opts *o, struct pg_backend **out, char *err, size_t errlen)
{
	*out = NULL;
	int dev = 0;
	if (o->device && o->device[0]) {
		char *end;
		long v = strtol(o->device, &end, 10);
		if (*end || v < 0 || v > 1024) {
			cu_errf(err, errlen, "cuda: device '%s' is not an ordinal", o->device);
			return -EINVAL;
		}
		dev = (int)v;
	}
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || dev >= n) {
		cu_errf(err, errlen, "cuda: no device %d (%s)", dev,
		     e != cudaSuccess ? cudaGetErrorString(e) : "fewer devices");
		return -ENODEV;
	}
	struct cu_be *b = (struct cu_be *)calloc(1, sizeof *b);
	if (!b) {
		cu_errf(err, errlen, "cuda: out of memory");
		return -ENOMEM;
	}
	b->dev = dev;
	b->mem_limit = o->mem_limit;
	if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&b->prop, dev)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&b->st, cudaStreamNonBlocking)) != cudaSuccess) {
		cu_errf(err, errlen, "cuda: device %d: %s", dev, cudaGetErrorString(e));
		free(b);
		return -ENODEV;
	}
	if (b->prop.major < 8) {
		cu_errf(err, errlen, "cuda: device %d (%s) is sm_%d%d; this build needs sm_80 or newer", dev, b->prop.name,
		     b->prop.major, b->prop.minor);
		cudaStreamDestroy(b->st);
		free(b);
		return -ENODEV;
	}
	const char *g = getenv("PAGODA_CUDA_GRAPHS");
	b->graphs_on = !(g && !strcmp(g, "0"));
	b->progress = o->progress;
	b->progress_user = o->progress_user;
	b->base.ops = &cu_ops;
	b->base.name = "cuda";
	b->base.caps = PG_BACKEND_CAP_DEVICE_MEM | PG_BACKEND_CAP_GREEDY;
	*out = &b->base;
	return 0;
}

extern "C" __attribute__((visibility("default"))) const struct pg_backend_ops *pg_backend_cuda_entry(uint32_t abi)
{
	return abi == PG_BACKEND_ABI ? &cu_ops : NULL;
}
