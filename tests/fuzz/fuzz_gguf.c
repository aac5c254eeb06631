// fuzz-sources: daemon/model/gguf.c kernels/types.c
/* libFuzzer target: the GGUF parser over arbitrary bytes. Every accessor is
 * exercised on what parses, so an unchecked offset shows up under ASan. */
#include "daemon/model/gguf.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf_file *f;
	char err[256];
	if (gguf_parse(data, size, &f, err, sizeof err) != 0)
		return 0;
	volatile uint64_t sink = 0;
	volatile double fsink = 0;
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *kv = &f->kv[i];
		sink += kv->key.len ? (uint8_t)kv->key.ptr[kv->key.len - 1] : 0;
		if (kv->type == GGUF_STRING && kv->v.str.len)
			sink += (uint8_t)kv->v.str.ptr[kv->v.str.len - 1];
		if (kv->type == GGUF_ARRAY) {
			const struct gguf_array *a = &kv->v.arr;
			for (uint64_t j = 0; j < a->n && j < 64; j++) {
				if (a->type == GGUF_STRING)
					sink += a->strs[j].len ? (uint8_t)a->strs[j].ptr[a->strs[j].len - 1] : 0;
				else {
					sink += (uint64_t)gguf_arr_i64(a, j);
					fsink += gguf_arr_f64(a, j);
				}
			}
		}
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		const uint8_t *p = t->data;
		sink += p[0] + p[t->size - 1];
	}
	(void)sink;
	(void)fsink;
	gguf_close(f);
	return 0;
}
