/* daemon/model/gguf.c — GGUF v2/v3 reader: a bounds-checked cursor over a
 * mapped file. Nothing is trusted: every length is checked against what is
 * left before it is read, every product against overflow. */
#include "daemon/model/gguf.h"
#include "kernels/types.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
/* Limits far above any real model that keep a hostile header from making
 * us allocate unbounded memory before the file's size would catch it. */
#define GGUF_MAX_KV (1u << 20)
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_ARRAY (1ull << 32)

struct cursor {
	const uint8_t *p;
	size_t left;
	size_t size;
	char *err;
	size_t errlen;
};

static int fail(struct cursor *c, const char *fmt, ...)
{
	if (c->errlen) {
		va_list ap;
		int n = snprintf(c->err, c->errlen, "gguf: at byte %zu: ", c->size - c->left);
		va_start(ap, fmt);
		if (n >= 0 && (size_t)n < c->errlen)
			vsnprintf(c->err + n, c->errlen - n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int take(struct cursor *c, void *dst, size_t n, const char *what)
{
	if (c->left < n)
		return fail(c, "truncated file reading %s (need %zu bytes, %zu left)", what, n, c->left);
	memcpy(dst, c->p, n);
	c->p += n;
	c->left -= n;
	return 0;
}

static int skip(struct cursor *c, uint64_t n, const char *what)
{
	if (c->left < n)
		return fail(c, "truncated file in %s (need %llu bytes, %zu left)", what,
			    (unsigned long long)n, c->left);
	c->p += n;
	c->left -= n;
	return 0;
}

static int read_str(struct cursor *c, struct gguf_str *s, const char *what)
{
	uint64_t len = 0;
	int r = take(c, &len, 8, what);
	if (r)
		return r;
	if (len > c->left)
		return fail(c, "%s: string length %llu exceeds the %zu bytes left", what,
			    (unsigned long long)len, c->left);
	s->ptr = (const char *)c->p;
	s->len = len;
	c->p += len;
	c->left -= len;
	return 0;
}

static size_t scalar_size(uint32_t t)
{
	switch (t) {
	case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
	case GGUF_UINT16: case GGUF_INT16: return 2;
	case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
	case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

static void decode_scalar(uint32_t t, const uint8_t *p, struct gguf_kv *kv)
{
	uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
	float f32; double f64; uint64_t u64; int64_t i64;
	switch (t) {
	case GGUF_UINT8: memcpy(&u8, p, 1); kv->v.u64 = u8; break;
	case GGUF_BOOL: memcpy(&u8, p, 1); kv->v.u64 = u8 != 0; break;
	case GGUF_INT8: memcpy(&i8, p, 1); kv->v.i64 = i8; break;
	case GGUF_UINT16: memcpy(&u16, p, 2); kv->v.u64 = u16; break;
	case GGUF_INT16: memcpy(&i16, p, 2); kv->v.i64 = i16; break;
	case GGUF_UINT32: memcpy(&u32, p, 4); kv->v.u64 = u32; break;
	case GGUF_INT32: memcpy(&i32, p, 4); kv->v.i64 = i32; break;
	case GGUF_FLOAT32: memcpy(&f32, p, 4); kv->v.f64 = f32; break;
	case GGUF_UINT64: memcpy(&u64, p, 8); kv->v.u64 = u64; break;
	case GGUF_INT64: memcpy(&i64, p, 8); kv->v.i64 = i64; break;
	case GGUF_FLOAT64: memcpy(&f64, p, 8); kv->v.f64 = f64; break;
	}
}

static int read_array(struct cursor *c, struct gguf_kv *kv)
{
	struct gguf_array *a = &kv->v.arr;
	int r;
	if ((r = take(c, &a->type, 4, "array type")) || (r = take(c, &a->n, 8, "array length")))
		return r;
	if (a->type == GGUF_ARRAY)
		return fail(c, "key '%.*s': nested arrays are not supported", (int)kv->key.len, kv->key.ptr);
	if (a->n > GGUF_MAX_ARRAY)
		return fail(c, "key '%.*s': array length %llu is absurd", (int)kv->key.len,
			    kv->key.ptr, (unsigned long long)a->n);
	a->data = c->p;
	if (a->type == GGUF_STRING) {
		/* each string needs at least its 8-byte length */
		if (a->n > c->left / 8)
			return fail(c, "key '%.*s': %llu strings cannot fit in %zu bytes", (int)kv->key.len,
				    kv->key.ptr, (unsigned long long)a->n, c->left);
		a->strs = calloc(a->n ? a->n : 1, sizeof *a->strs);
		if (!a->strs)
			return fail(c, "out of memory for %llu strings", (unsigned long long)a->n);
		for (uint64_t i = 0; i < a->n; i++)
			if ((r = read_str(c, &a->strs[i], "array string")))
				return r;
		return 0;
	}
	size_t es = scalar_size(a->type);
	if (!es)
		return fail(c, "key '%.*s': unknown array element type %u", (int)kv->key.len,
			    kv->key.ptr, a->type);
	if (a->n > c->left / es)
		return fail(c, "key '%.*s': array of %llu x %zu bytes exceeds the file", (int)kv->key.len,
			    kv->key.ptr, (unsigned long long)a->n, es);
	return skip(c, a->n * es, "array data");
}

static int read_kv(struct cursor *c, struct gguf_kv *kv)
{
	int r;
	if ((r = read_str(c, &kv->key, "key")) || (r = take(c, &kv->type, 4, "value type")))
		return r;
	if (kv->type == GGUF_STRING)
		return read_str(c, &kv->v.str, "string value");
	if (kv->type == GGUF_ARRAY)
		return read_array(c, kv);
	size_t es = scalar_size(kv->type);
	if (!es)
		return fail(c, "key '%.*s': unknown value type %u", (int)kv->key.len, kv->key.ptr, kv->type);
	if (c->left < es)
		return fail(c, "key '%.*s': truncated value", (int)kv->key.len, kv->key.ptr);
	decode_scalar(kv->type, c->p, kv);
	return skip(c, es, "value");
}

static int read_tensor_info(struct cursor *c, struct gguf_tensor *t)
{
	int r;
	if ((r = read_str(c, &t->name, "tensor name")) || (r = take(c, &t->n_dims, 4, "tensor dims")))
		return r;
	if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
		return fail(c, "tensor '%.*s': %u dimensions (1..%d allowed)", (int)t->name.len,
			    t->name.ptr, t->n_dims, GGUF_MAX_DIMS);
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	if ((r = take(c, t->ne, 8ull * t->n_dims, "tensor shape")) ||
	    (r = take(c, &t->type, 4, "tensor type")) || (r = take(c, &t->offset, 8, "tensor offset")))
		return r;
	const struct pg_type_info *ti = pg_type_info(t->type);
	if (!ti)
		return fail(c, "tensor '%.*s': unsupported type %u", (int)t->name.len, t->name.ptr, t->type);
	uint64_t nel = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		if (t->ne[d] == 0 || t->ne[d] > INT64_MAX / nel)
			return fail(c, "tensor '%.*s': bad dimension %u = %llu", (int)t->name.len,
				    t->name.ptr, d, (unsigned long long)t->ne[d]);
		nel *= t->ne[d];
	}
	if (t->ne[0] % ti->blck)
		return fail(c, "tensor '%.*s': row of %llu is not a multiple of the %s block (%u)",
			    (int)t->name.len, t->name.ptr, (unsigned long long)t->ne[0], ti->name, ti->blck);
	uint64_t blocks = nel / ti->blck;
	if (blocks > UINT64_MAX / ti->size)
		return fail(c, "tensor '%.*s': size overflows", (int)t->name.len, t->name.ptr);
	t->size = blocks * ti->size;
	return 0;
}

static int check_tensors(struct cursor *c, struct gguf_file *f)
{
	size_t data = f->data_offset;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		if (t->offset % f->alignment)
			return fail(c, "tensor '%.*s': offset %llu not aligned to %u", (int)t->name.len,
				    t->name.ptr, (unsigned long long)t->offset, f->alignment);
		if (t->offset > f->size - data || t->size > f->size - data - t->offset)
			return fail(c, "tensor '%.*s': data [%llu, +%llu) lies outside the file (%zu data bytes)",
				    (int)t->name.len, t->name.ptr, (unsigned long long)t->offset,
				    (unsigned long long)t->size, f->size - data);
		t->data = f->base + data + t->offset;
		for (uint64_t j = 0; j < i; j++) {
			const struct gguf_tensor *u = &f->tensors[j];
			if (u->name.len == t->name.len && !memcmp(u->name.ptr, t->name.ptr, t->name.len))
				return fail(c, "tensor '%.*s' appears twice", (int)t->name.len, t->name.ptr);
		}
	}
	return 0;
}

static int parse(struct gguf_file *f, char *err, size_t errlen)
{
	struct cursor c = { f->base, f->size, f->size, err, errlen };
	uint32_t magic = 0;
	int r;
	if ((r = take(&c, &magic, 4, "magic")))
		return r;
	if (magic != GGUF_MAGIC)
		return fail(&c, "not a GGUF file (bad magic 0x%08x)", magic);
	if ((r = take(&c, &f->version, 4, "version")))
		return r;
	if (f->version != 2 && f->version != 3)
		return fail(&c, "GGUF version %u is not supported (2 and 3 are)", f->version);
	if ((r = take(&c, &f->n_tensors, 8, "tensor count")) || (r = take(&c, &f->n_kv, 8, "kv count")))
		return r;
	if (f->n_kv > GGUF_MAX_KV || f->n_kv > c.left / 12)
		return fail(&c, "metadata count %llu is impossible for this file", (unsigned long long)f->n_kv);
	if (f->n_tensors > GGUF_MAX_TENSORS || f->n_tensors > c.left / 24)
		return fail(&c, "tensor count %llu is impossible for this file", (unsigned long long)f->n_tensors);
	f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
	f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
	if (!f->kv || !f->tensors)
		return fail(&c, "out of memory");
	for (uint64_t i = 0; i < f->n_kv; i++)
		if ((r = read_kv(&c, &f->kv[i])))
			return r;
	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	const struct gguf_kv *al = gguf_find(f, "general.alignment");
	if (al) {
		if (al->type != GGUF_UINT32 || al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)))
			return fail(&c, "general.alignment must be a power-of-two uint32");
		f->alignment = (uint32_t)al->v.u64;
	}
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if ((r = read_tensor_info(&c, &f->tensors[i])))
			return r;
	size_t pos = f->size - c.left;
	size_t pad = (f->alignment - pos % f->alignment) % f->alignment;
	if (f->n_tensors && pad > c.left)
		return fail(&c, "file ends before the tensor data section");
	f->data_offset = pos + (pad <= c.left ? pad : c.left);
	return check_tensors(&c, f);
}

int gguf_parse(const void *buf, size_t size, struct gguf_file **out, char *err, size_t errlen)
{
	struct gguf_file *f = calloc(1, sizeof *f);
	if (!f) {
		snprintf(err, errlen, "gguf: out of memory");
		return -ENOMEM;
	}
	f->base = buf;
	f->size = size;
	int r = parse(f, err, errlen);
	if (r) {
		gguf_close(f);
		return r;
	}
	*out = f;
	return 0;
}

int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if (st.st_size == 0) {
		snprintf(err, errlen, "%s: empty file", path);
		close(fd);
		return -EINVAL;
	}
	void *map = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(err, errlen, "%s: mmap: %s", path, strerror(e));
		return -e;
	}
	char inner[256] = "";
	struct gguf_file *f;
	int r = gguf_parse(map, st.st_size, &f, inner, sizeof inner);
	if (r) {
		snprintf(err, errlen, "%s: %s", path, inner);
		munmap(map, st.st_size);
		return r;
	}
	f->map = map;
	*out = f;
	return 0;
}

void gguf_close(struct gguf_file *f)
{
	if (!f)
		return;
	if (f->kv)
		for (uint64_t i = 0; i < f->n_kv; i++)
			if (f->kv[i].type == GGUF_ARRAY)
				free(f->kv[i].v.arr.strs);
	free(f->kv);
	free(f->tensors);
	if (f->map)
		munmap(f->map, f->size);
	free(f);
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.len == n && memcmp(s.ptr, c, n) == 0;
}

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key)
{
	for (uint64_t i = 0; i < f->n_kv; i++)
		if (gguf_str_eq(f->kv[i].key, key))
			return &f->kv[i];
	return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if (gguf_str_eq(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

static bool is_unsigned(uint32_t t)
{
	return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64 || t == GGUF_BOOL;
}

static bool is_signed(uint32_t t)
{
	return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (!kv)
		return false;
	if (is_signed(kv->type)) {
		*out = kv->v.i64;
		return true;
	}
	if (is_unsigned(kv->type) && kv->v.u64 <= INT64_MAX) {
		*out = (int64_t)kv->v.u64;
		return true;
	}
	return false;
}

bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
	int64_t v;
	if (!gguf_get_i64(f, key, &v) || v < 0 || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (!kv || (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64))
		return false;
	double d = kv->v.f64; /* a FLOAT64 may not fit: saturate */
	*out = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
	return true;
}

bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (!kv || kv->type != GGUF_BOOL)
		return false;
	*out = kv->v.u64 != 0;
	return true;
}

bool gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (!kv || kv->type != GGUF_STRING)
		return false;
	*out = kv->v.str;
	return true;
}

const struct gguf_array *gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t elem_type)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (!kv || kv->type != GGUF_ARRAY || kv->v.arr.type != elem_type)
		return NULL;
	return &kv->v.arr;
}

int64_t gguf_arr_i64(const struct gguf_array *a, uint64_t i)
{
	struct gguf_kv kv = { 0 };
	size_t es = scalar_size(a->type);
	if (!es)
		return 0;
	decode_scalar(a->type, a->data + i * es, &kv);
	if (a->type == GGUF_FLOAT32 || a->type == GGUF_FLOAT64) {
		/* a float array read as integers: saturate, NaN is 0 */
		double d = kv.v.f64;
		if (!(d == d))
			return 0;
		if (d >= 9.2e18)
			return INT64_MAX;
		if (d <= -9.2e18)
			return INT64_MIN;
		return (int64_t)d;
	}
	if (is_signed(a->type))
		return kv.v.i64;
	return kv.v.u64 > INT64_MAX ? INT64_MAX : (int64_t)kv.v.u64;
}

double gguf_arr_f64(const struct gguf_array *a, uint64_t i)
{
	struct gguf_kv kv = { 0 };
	size_t es = scalar_size(a->type);
	if (!es)
		return 0;
	decode_scalar(a->type, a->data + i * es, &kv);
	if (a->type == GGUF_FLOAT32 || a->type == GGUF_FLOAT64)
		return kv.v.f64;
	return is_signed(a->type) ? (double)kv.v.i64 : (double)kv.v.u64;
}

const char *gguf_vtype_name(uint32_t t)
{
	static const char *names[GGUF_VTYPE_COUNT] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
	};
	return t < GGUF_VTYPE_COUNT ? names[t] : "?";
}
