/* tests/unit/test_gguf.c — the GGUF reader on real files and on every kind
 * of damage: each must be refused with a message naming the problem. */
#include "daemon/model/gguf.h"
#include "kernels/types.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* A tiny in-memory GGUF writer, enough to make valid and broken files. */
struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}
static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }

/* 3 kv (u32, string, string array) and 2 F32 tensors of 8 and 4x2. */
static struct buf make_valid(size_t *tensor_info_at, size_t *data_at)
{
	struct buf b = { 0 };
	put_u32(&b, 0x46554747u);
	put_u32(&b, 3);
	put_u64(&b, 2);
	put_u64(&b, 3);
	put_str(&b, "test.count");
	put_u32(&b, GGUF_UINT32);
	put_u32(&b, 42);
	put_str(&b, "general.name");
	put_u32(&b, GGUF_STRING);
	put_str(&b, "tiny");
	put_str(&b, "tokenizer.ggml.tokens");
	put_u32(&b, GGUF_ARRAY);
	put_u32(&b, GGUF_STRING);
	put_u64(&b, 3);
	put_str(&b, "a");
	put_str(&b, "bc");
	put_str(&b, "");
	*tensor_info_at = b.n;
	put_str(&b, "vec");
	put_u32(&b, 1);
	put_u64(&b, 8);
	put_u32(&b, PG_TYPE_F32);
	put_u64(&b, 0);
	put_str(&b, "mat");
	put_u32(&b, 2);
	put_u64(&b, 4);
	put_u64(&b, 2);
	put_u32(&b, PG_TYPE_F32);
	put_u64(&b, 32);
	while (b.n % 32)
		put(&b, "", 1);
	*data_at = b.n;
	for (int i = 0; i < 16; i++) {
		float f = (float)i;
		put(&b, &f, 4);
	}
	return b;
}

static int parse_buf(struct buf *b, struct gguf_file **f, char *err)
{
	return gguf_parse(b->p, b->n, f, err, 256);
}

START_TEST(test_valid)
{
	size_t ti, da;
	struct buf b = make_valid(&ti, &da);
	struct gguf_file *f;
	char err[256];
	ck_assert_int_eq(parse_buf(&b, &f, err), 0);
	ck_assert_uint_eq(f->version, 3);
	uint32_t v;
	ck_assert(gguf_get_u32(f, "test.count", &v));
	ck_assert_uint_eq(v, 42);
	struct gguf_str s;
	ck_assert(gguf_get_str(f, "general.name", &s));
	ck_assert(gguf_str_eq(s, "tiny"));
	ck_assert(!gguf_get_str(f, "test.count", &s));
	const struct gguf_array *a = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_eq(a->n, 3);
	ck_assert(gguf_str_eq(a->strs[1], "bc"));
	const struct gguf_tensor *t = gguf_find_tensor(f, "mat");
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t->ne[0], 4);
	ck_assert_uint_eq(t->ne[1], 2);
	ck_assert_uint_eq(t->size, 32);
	ck_assert_float_eq(((const float *)t->data)[0], 8.0f);
	ck_assert_ptr_eq(t->data, b.p + da + 32);
	gguf_close(f);
	free(b.p);
}
END_TEST

/* Every truncation of a valid file is refused, none crashes. */
START_TEST(test_truncated)
{
	size_t ti, da;
	struct buf b = make_valid(&ti, &da);
	for (size_t n = 0; n < b.n; n++) {
		struct gguf_file *f = NULL;
		char err[256] = "";
		uint8_t *copy = malloc(n ? n : 1);
		memcpy(copy, b.p, n);
		int r = gguf_parse(copy, n, &f, err, sizeof err);
		ck_assert_msg(r != 0, "truncation at %zu accepted", n);
		ck_assert_msg(strlen(err) > 0, "no message at %zu", n);
		free(copy);
	}
	free(b.p);
}
END_TEST

static void expect_error(struct buf *b, const char *needle)
{
	struct gguf_file *f = NULL;
	char err[256] = "";
	int r = gguf_parse(b->p, b->n, &f, err, sizeof err);
	ck_assert_msg(r != 0, "accepted, expected '%s'", needle);
	ck_assert_msg(strstr(err, needle), "error '%s' does not mention '%s'", err, needle);
}

START_TEST(test_damaged)
{
	size_t ti, da;
	struct buf b = make_valid(&ti, &da);
	uint8_t *orig = malloc(b.n);
	memcpy(orig, b.p, b.n);
#define RESET() memcpy(b.p, orig, b.n)
	b.p[0] = 'X';
	expect_error(&b, "magic");
	RESET();
	b.p[4] = 9;
	expect_error(&b, "version");
	RESET();
	uint64_t huge = UINT64_MAX / 2;
	memcpy(b.p + 8, &huge, 8);
	expect_error(&b, "tensor count");
	RESET();
	memcpy(b.p + 16, &huge, 8);
	expect_error(&b, "metadata count");
	RESET();
	/* first key's length made enormous */
	memcpy(b.p + 24, &huge, 8);
	expect_error(&b, "length");
	RESET();
	/* tensor "vec": dims = 7 */
	uint32_t seven = 7;
	memcpy(b.p + ti + 8 + 3, &seven, 4);
	expect_error(&b, "dimensions");
	RESET();
	/* tensor "vec": type unknown */
	uint32_t badtype = 99;
	memcpy(b.p + ti + 8 + 3 + 4 + 8, &badtype, 4);
	expect_error(&b, "unsupported type");
	RESET();
	/* tensor "vec": offset past the end */
	uint64_t off = 1 << 20;
	memcpy(b.p + ti + 8 + 3 + 4 + 8 + 4, &off, 8);
	expect_error(&b, "outside the file");
	RESET();
	/* misaligned offset */
	off = 4;
	memcpy(b.p + ti + 8 + 3 + 4 + 8 + 4, &off, 8);
	expect_error(&b, "aligned");
	RESET();
	/* dimension 0 */
	uint64_t zero = 0;
	memcpy(b.p + ti + 8 + 3 + 4, &zero, 8);
	expect_error(&b, "bad dimension");
	RESET();
	/* element count overflow: ne = 2^62 */
	uint64_t big = 1ull << 62;
	memcpy(b.p + ti + 8 + 3 + 4, &big, 8);
	expect_error(&b, "overflows");
#undef RESET
	free(orig);
	free(b.p);
}
END_TEST

START_TEST(test_open_errors)
{
	struct gguf_file *f;
	char err[256];
	ck_assert_int_ne(gguf_open("/nonexistent/x.gguf", &f, err, sizeof err), 0);
	ck_assert(strstr(err, "/nonexistent/x.gguf"));
	ck_assert_int_ne(gguf_open("/dev/null", &f, err, sizeof err), 0);
	ck_assert_int_ne(gguf_open("/tmp", &f, err, sizeof err), 0);
}
END_TEST

START_TEST(test_real_models)
{
	static const char *names[] = {
		"models/stories260K.gguf", "models/stories260K-F16.gguf", "models/stories260K-Q8_0.gguf",
		"models/stories260K-Q4_0.gguf", "models/synth-kq-Q4_K_M.gguf", "models/synth-kq-Q6_K.gguf",
	};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char path[4096], err[512];
		if (testdata_path(path, sizeof path, names[i]))
			return;
		struct gguf_file *f;
		ck_assert_msg(gguf_open(path, &f, err, sizeof err) == 0, "%s", err);
		struct gguf_str arch;
		ck_assert(gguf_get_str(f, "general.architecture", &arch));
		ck_assert(gguf_str_eq(arch, "llama"));
		uint32_t n_layer;
		ck_assert(gguf_get_u32(f, "llama.block_count", &n_layer));
		ck_assert(gguf_find_tensor(f, "token_embd.weight"));
		ck_assert(gguf_find_tensor(f, "blk.0.attn_q.weight"));
		char name[64];
		snprintf(name, sizeof name, "blk.%u.ffn_down.weight", n_layer - 1);
		ck_assert(gguf_find_tensor(f, name));
		const struct gguf_array *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
		ck_assert_ptr_nonnull(tok);
		ck_assert_uint_ge(tok->n, 512);
		gguf_close(f);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gguf");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_valid);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_damaged);
	tcase_add_test(tc, test_open_errors);
	tcase_add_test(tc, test_real_models);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
