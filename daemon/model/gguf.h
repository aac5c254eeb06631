/* daemon/model/gguf.h — GGUF v2/v3 reader.
 *
 * The file is mapped read-only; strings and tensor data point into the
 * mapping and live as long as the gguf_file. Every count, offset and size is
 * checked against the file before it is used: a malformed file yields an
 * error message naming what is wrong, never a crash.
 */
#ifndef PAGODA_GGUF_H
#define PAGODA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
	GGUF_UINT8 = 0,
	GGUF_INT8 = 1,
	GGUF_UINT16 = 2,
	GGUF_INT16 = 3,
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
	GGUF_UINT64 = 10,
	GGUF_INT64 = 11,
	GGUF_FLOAT64 = 12,
	GGUF_VTYPE_COUNT
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* Not NUL-terminated: ptr points into the mapping. */
struct gguf_str {
	const char *ptr;
	uint64_t len;
};

struct gguf_array {
	uint32_t type;           /* element type; never GGUF_ARRAY */
	uint64_t n;
	const uint8_t *data;     /* scalar elements, packed little-endian */
	struct gguf_str *strs;   /* for GGUF_STRING arrays: n entries */
};

struct gguf_kv {
	struct gguf_str key;
	uint32_t type;
	union {
		uint64_t u64;    /* all unsigned integer types and bool */
		int64_t i64;     /* all signed integer types */
		double f64;      /* FLOAT32 and FLOAT64 */
		struct gguf_str str;
		struct gguf_array arr;
	} v;
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims 1 */
	uint32_t type;              /* enum pg_type */
	uint64_t offset;            /* relative to the data section */
	uint64_t size;              /* bytes */
	const void *data;
};

struct gguf_file {
	uint32_t version;
	uint32_t alignment;
	uint64_t n_kv;
	struct gguf_kv *kv;
	uint64_t n_tensors;
	struct gguf_tensor *tensors;
	const uint8_t *base;     /* start of file bytes */
	size_t size;
	size_t data_offset;      /* start of the tensor data section */
	void *map;               /* owned mapping, NULL when parsing a caller buffer */
};

/* Open and map path. On failure returns -errno-like negative value and
 * writes a message to err (errlen bytes, may be 0). */
int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen);

/* Parse a caller-owned buffer (it must outlive the result). */
int gguf_parse(const void *buf, size_t size, struct gguf_file **out, char *err, size_t errlen);

void gguf_close(struct gguf_file *f);

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters: false when the key is absent or of an incompatible type
 * (integers convert between widths when the value fits). */
bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out);
const struct gguf_array *gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t elem_type);

/* Element i of a numeric array converted to the wanted type (no bounds
 * beyond i < n, which the caller checks). */
int64_t gguf_arr_i64(const struct gguf_array *a, uint64_t i);
double gguf_arr_f64(const struct gguf_array *a, uint64_t i);

bool gguf_str_eq(struct gguf_str s, const char *c);
const char *gguf_vtype_name(uint32_t t);

#endif
