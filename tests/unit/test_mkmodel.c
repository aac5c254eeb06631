/* tests/unit/test_mkmodel.c — pagoda-mkmodel writes GGUFs that read back
 * with the metadata, tensor names, shapes, types and sizes it promises,
 * deterministically, and refuses bad shapes with an error.
 *
 * The tool's writer (tools/pagoda-mkmodel/mkmodel.c) is linked in and run
 * in-process, so this test needs no other build product and runs under the
 * sanitizers.
 * When $PAGODA_BUILD/pagoda-mkmodel exists, its output is also compared
 * byte for byte with the in-process one.
 */
#include "tools/pagoda-mkmodel/mkmodel.h"
#include "daemon/model/gguf.h"
#include "kernels/cpu/kernels.h"
#include "kernels/types.h"

#include "tests/unit/testdata.h"

#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char tmpdir[256];

static void setup(void)
{
	const char *t = getenv("TMPDIR");
	snprintf(tmpdir, sizeof tmpdir, "%s/mkmodel-XXXXXX", t && *t ? t : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* Runs mkmodel_main on a NULL-terminated argument list. */
static int run(const char *first, ...)
{
	char *argv[64];
	int argc = 0;
	argv[argc++] = (char *)"pagoda-mkmodel";
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		ck_assert_int_lt(argc, 63);
		argv[argc++] = (char *)a;
	}
	va_end(ap);
	argv[argc] = NULL;
	return mkmodel_main(argc, argv);
}

static char *path_in(const char *name)
{
	static char bufs[8][512];
	static int k;
	char *p = bufs[k++ % 8];
	snprintf(p, 512, "%s/%s", tmpdir, name);
	return p;
}

static bool exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static uint8_t *slurp(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", p);
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)sz + 1);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
	fclose(f);
	*n = (size_t)sz;
	return b;
}

static bool same_file(const char *a, const char *b)
{
	size_t na, nb;
	uint8_t *pa = slurp(a, &na), *pb = slurp(b, &nb);
	bool same = na == nb && memcmp(pa, pb, na) == 0;
	free(pa);
	free(pb);
	return same;
}

static struct gguf_file *open_ok(const char *p)
{
	struct gguf_file *f = NULL;
	char err[512] = "";
	ck_assert_msg(gguf_open(p, &f, err, sizeof err) == 0, "%s: %s", p, err);
	return f;
}

static uint32_t get_u32(const struct gguf_file *f, const char *key)
{
	uint32_t v = 0;
	ck_assert_msg(gguf_get_u32(f, key, &v), "missing %s", key);
	return v;
}

static float get_f32(const struct gguf_file *f, const char *key)
{
	float v = 0;
	ck_assert_msg(gguf_get_f32(f, key, &v), "missing %s", key);
	return v;
}

static void check_tensor(const struct gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1,
			 uint32_t type)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);
	ck_assert_msg(t != NULL, "missing tensor %s", name);
	ck_assert_msg(t->type == type, "%s: type %s, want %s", name, pg_type_name(t->type), pg_type_name(type));
	ck_assert_uint_eq(t->n_dims, ne1 ? 2 : 1);
	ck_assert_uint_eq(t->ne[0], ne0);
	ck_assert_uint_eq(t->ne[1], ne1 ? ne1 : 1);
	ck_assert_uint_eq(t->size, pg_row_size(type, ne0) * (ne1 ? ne1 : 1));
	ck_assert_uint_eq(t->offset % 32, 0);
	ck_assert_uint_eq(((const uint8_t *)t->data - f->base) % 32, 0);
	if (!ne1) { /* norms: all ones */
		const float *w = t->data;
		for (uint64_t i = 0; i < ne0; i++)
			ck_assert_msg(w[i] == 1.0f, "%s[%" PRIu64 "] = %g", name, i, w[i]);
	}
}

/* Mean and standard deviation of a dequantized matrix's first rows. */
static void check_stats(const struct gguf_file *f, const char *name, double want_sd)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);
	ck_assert_ptr_nonnull(t);
	uint64_t rows = t->ne[1] < 64 ? t->ne[1] : 64;
	size_t rs = pg_row_size(t->type, t->ne[0]);
	float *row = malloc(t->ne[0] * sizeof(float));
	double s = 0, s2 = 0;
	for (uint64_t r = 0; r < rows; r++) {
		pg_dequant_row(t->type, (const uint8_t *)t->data + r * rs, row, (int64_t)t->ne[0]);
		for (uint64_t i = 0; i < t->ne[0]; i++) {
			s += row[i];
			s2 += (double)row[i] * row[i];
		}
	}
	free(row);
	double n = (double)(rows * t->ne[0]), mean = s / n, sd = sqrt(s2 / n - mean * mean);
	ck_assert_msg(fabs(mean) < 0.1 * want_sd, "%s: mean %g (sd wanted %g)", name, mean, want_sd);
	ck_assert_msg(sd > 0.8 * want_sd && sd < 1.2 * want_sd, "%s: sd %g, want about %g", name, sd, want_sd);
}

/* Shape used by most tests: every dimension a multiple of 256 so that the
 * K-quants fit. */
#define DIM 256
#define FFN 512
#define LAYERS 2
#define HEADS 4
#define KV_HEADS 2
#define VOCAB 300

static const char *const shape_args[] = { "--dim", "256", "--ffn", "512", "--layers", "2", "--heads", "4",
					   "--kv-heads", "2", "--vocab", "300", "--ctx", "128" };

static int run_shape(const char *out, const char *type, const char *seed, const char *extra)
{
	char *argv[40];
	int argc = 0;
	argv[argc++] = (char *)"pagoda-mkmodel";
	for (size_t i = 0; i < sizeof shape_args / sizeof shape_args[0]; i++)
		argv[argc++] = (char *)shape_args[i];
	argv[argc++] = (char *)"-q";
	argv[argc++] = (char *)"-o";
	argv[argc++] = (char *)out;
	argv[argc++] = (char *)"--type";
	argv[argc++] = (char *)type;
	argv[argc++] = (char *)"--seed";
	argv[argc++] = (char *)seed;
	if (extra)
		argv[argc++] = (char *)extra;
	argv[argc] = NULL;
	return mkmodel_main(argc, argv);
}

static const struct {
	const char *name;
	uint32_t type, ftype;
} types[] = {
	{ "F32", PG_TYPE_F32, 0 },   { "F16", PG_TYPE_F16, 1 },   { "BF16", PG_TYPE_BF16, 32 },
	{ "Q8_0", PG_TYPE_Q8_0, 7 }, { "Q4_0", PG_TYPE_Q4_0, 2 }, { "Q2_K", PG_TYPE_Q2_K, 10 },
	{ "Q3_K", PG_TYPE_Q3_K, 11 }, { "Q4_K", PG_TYPE_Q4_K, 14 }, { "Q5_K", PG_TYPE_Q5_K, 16 },
	{ "Q6_K", PG_TYPE_Q6_K, 18 }, { "IQ4_NL", PG_TYPE_IQ4_NL, 25 }, { "IQ4_XS", PG_TYPE_IQ4_XS, 30 },
};
#define NTYPES (int)(sizeof types / sizeof types[0])

START_TEST(test_each_type)
{
	const uint32_t type = types[_i].type;
	char *out = path_in("m.gguf");
	ck_assert_int_eq(run_shape(out, types[_i].name, "7", NULL), 0);
	ck_assert(!exists(path_in("m.gguf.tmp")));
	struct gguf_file *f = open_ok(out);

	ck_assert_uint_eq(f->version, 3);
	ck_assert_uint_eq(f->alignment, 32);
	struct gguf_str s;
	ck_assert(gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama"));
	ck_assert(gguf_get_str(f, "general.name", &s) && s.len > 0);
	ck_assert_uint_eq(get_u32(f, "general.alignment"), 32);
	ck_assert_uint_eq(get_u32(f, "general.file_type"), types[_i].ftype);
	ck_assert_uint_eq(get_u32(f, "llama.context_length"), 128);
	ck_assert_uint_eq(get_u32(f, "llama.embedding_length"), DIM);
	ck_assert_uint_eq(get_u32(f, "llama.block_count"), LAYERS);
	ck_assert_uint_eq(get_u32(f, "llama.feed_forward_length"), FFN);
	ck_assert_uint_eq(get_u32(f, "llama.attention.head_count"), HEADS);
	ck_assert_uint_eq(get_u32(f, "llama.attention.head_count_kv"), KV_HEADS);
	ck_assert_uint_eq(get_u32(f, "llama.rope.dimension_count"), DIM / HEADS);
	ck_assert_uint_eq(get_u32(f, "llama.vocab_size"), VOCAB);
	ck_assert_float_eq(get_f32(f, "llama.rope.freq_base"), 10000.0f);
	ck_assert_float_eq(get_f32(f, "llama.attention.layer_norm_rms_epsilon"), 1e-5f);
	ck_assert(gguf_get_str(f, "tokenizer.ggml.model", &s) && gguf_str_eq(s, "llama"));
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.bos_token_id"), 1);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.eos_token_id"), 2);
	ck_assert_uint_eq(get_u32(f, "tokenizer.ggml.unknown_token_id"), 0);
	bool b = false;
	ck_assert(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) && b);

	const uint64_t kv = DIM / HEADS * KV_HEADS;
	ck_assert_uint_eq(f->n_tensors, 3 + 9 * LAYERS);
	check_tensor(f, "token_embd.weight", DIM, VOCAB, type);
	check_tensor(f, "output_norm.weight", DIM, 0, PG_TYPE_F32);
	check_tensor(f, "output.weight", DIM, VOCAB, type);
	for (int l = 0; l < LAYERS; l++) {
		char n[64];
#define T(nm, a, b, ty) (snprintf(n, sizeof n, "blk.%d." nm ".weight", l), check_tensor(f, n, a, b, ty))
		T("attn_norm", DIM, 0, PG_TYPE_F32);
		T("attn_q", DIM, DIM, type);
		T("attn_k", DIM, kv, type);
		T("attn_v", DIM, kv, type);
		T("attn_output", DIM, DIM, type);
		T("ffn_norm", DIM, 0, PG_TYPE_F32);
		T("ffn_gate", DIM, FFN, type);
		T("ffn_up", DIM, FFN, type);
		T("ffn_down", FFN, DIM, type);
#undef T
	}
	/* Tensors tile the data section in order, and the file ends at the
	 * last one's padding. */
	uint64_t end = 0;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		ck_assert_uint_eq(f->tensors[i].offset, end);
		end = (f->tensors[i].offset + f->tensors[i].size + 31) / 32 * 32;
	}
	ck_assert_uint_eq(f->data_offset + end, f->size);

	/* Weight scales: N(0, 1/fan_in) for the layers, 2/sqrt(dim) for the
	 * output (quantization noise stays well inside the tolerance). */
	check_stats(f, "token_embd.weight", 1.0 / sqrt(DIM));
	check_stats(f, "blk.0.attn_q.weight", 1.0 / sqrt(DIM));
	check_stats(f, "blk.1.ffn_down.weight", 1.0 / sqrt(FFN));
	check_stats(f, "output.weight", 2.0 / sqrt(DIM));
	gguf_close(f);
}
END_TEST

START_TEST(test_builtin_tokenizer)
{
	char *out = path_in("v.gguf");
	ck_assert_int_eq(run("-q", "-o", out, "--vocab", "2000", NULL), 0);
	struct gguf_file *f = open_ok(out);
	const struct gguf_array *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
	const struct gguf_array *sc = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32);
	const struct gguf_array *tt = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
	ck_assert(tok && sc && tt);
	ck_assert_uint_eq(tok->n, 2000);
	ck_assert_uint_eq(sc->n, 2000);
	ck_assert_uint_eq(tt->n, 2000);
	ck_assert_uint_eq(get_u32(f, "llama.vocab_size"), 2000);
	ck_assert(gguf_str_eq(tok->strs[0], "<unk>") && gguf_arr_i64(tt, 0) == 2);
	ck_assert(gguf_str_eq(tok->strs[1], "<s>") && gguf_arr_i64(tt, 1) == 3);
	ck_assert(gguf_str_eq(tok->strs[2], "</s>") && gguf_arr_i64(tt, 2) == 3);
	for (int b = 0; b < 256; b++) {
		char want[8];
		snprintf(want, sizeof want, "<0x%02X>", b);
		ck_assert_msg(gguf_str_eq(tok->strs[3 + b], want), "token %d", 3 + b);
		ck_assert_int_eq(gguf_arr_i64(tt, 3 + (uint64_t)b), 6);
	}
	ck_assert(gguf_str_eq(tok->strs[259], "\xe2\x96\x81"));
	bool have_the = false;
	for (uint64_t i = 259; i < tok->n; i++) {
		ck_assert_int_eq(gguf_arr_i64(tt, i), 1);
		ck_assert(tok->strs[i].len > 0);
		if (i > 259) /* strictly decreasing scores: a total merge order */
			ck_assert(gguf_arr_f64(sc, i) < gguf_arr_f64(sc, i - 1));
		have_the |= gguf_str_eq(tok->strs[i], "\xe2\x96\x81the");
		/* pieces are unique */
		for (uint64_t j = 0; j < i; j++)
			ck_assert_msg(tok->strs[i].len != tok->strs[j].len ||
					      memcmp(tok->strs[i].ptr, tok->strs[j].ptr, tok->strs[i].len),
				      "token %" PRIu64 " repeats %" PRIu64, i, j);
	}
	ck_assert(have_the);
	gguf_close(f);

	/* The smallest vocab that holds the specials and byte tokens. */
	ck_assert_int_eq(run("-q", "-o", out, "--vocab", "259", NULL), 0);
	ck_assert_int_ne(run("-q", "-o", out, "--vocab", "258", NULL), 0);
	/* A vocab larger than every built-in word fills with generated pieces. */
	ck_assert_int_eq(run("-q", "-o", out, "--dim", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "32",
			     "--layers", "1", "--vocab", "40000", NULL), 0);
	f = open_ok(out);
	tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
	ck_assert(tok && tok->n == 40000);
	gguf_close(f);
}
END_TEST

static void check_same_kv(const struct gguf_file *a, const struct gguf_file *b, const char *key)
{
	const struct gguf_kv *x = gguf_find(a, key), *y = gguf_find(b, key);
	ck_assert_msg(x && y, "%s missing", key);
	ck_assert_uint_eq(x->type, y->type);
	if (x->type == GGUF_ARRAY) {
		ck_assert_uint_eq(x->v.arr.type, y->v.arr.type);
		ck_assert_uint_eq(x->v.arr.n, y->v.arr.n);
		for (uint64_t i = 0; i < x->v.arr.n; i++) {
			if (x->v.arr.type == GGUF_STRING) {
				ck_assert_uint_eq(x->v.arr.strs[i].len, y->v.arr.strs[i].len);
				ck_assert(!memcmp(x->v.arr.strs[i].ptr, y->v.arr.strs[i].ptr, x->v.arr.strs[i].len));
			} else {
				ck_assert(gguf_arr_f64(&x->v.arr, i) == gguf_arr_f64(&y->v.arr, i));
			}
		}
	} else if (x->type == GGUF_STRING) {
		ck_assert(x->v.str.len == y->v.str.len && !memcmp(x->v.str.ptr, y->v.str.ptr, x->v.str.len));
	} else {
		ck_assert(x->v.u64 == y->v.u64);
	}
}

static void check_tokenizer_copy(const char *from, const char *out)
{
	ck_assert_int_eq(run("-q", "-o", out, "--tokenizer", from, "--vocab", "999", "--dim", "64", "--heads",
			     "2", "--kv-heads", "2", "--ffn", "96", "--layers", "1", NULL),
			 0);
	struct gguf_file *a = open_ok(from), *b = open_ok(out);
	uint64_t n_tok = 0;
	for (uint64_t i = 0; i < a->n_kv; i++) {
		const struct gguf_kv *kv = &a->kv[i];
		if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)) {
			char key[256];
			snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
			check_same_kv(a, b, key);
			n_tok++;
		}
	}
	for (uint64_t i = 0; i < b->n_kv; i++)
		n_tok -= b->kv[i].key.len > 10 && !memcmp(b->kv[i].key.ptr, "tokenizer.", 10);
	ck_assert_uint_eq(n_tok, 0); /* no tokenizer key of its own */
	const struct gguf_array *tok = gguf_get_arr(a, "tokenizer.ggml.tokens", GGUF_STRING);
	ck_assert_uint_eq(get_u32(b, "llama.vocab_size"), tok->n);
	check_tensor(b, "token_embd.weight", 64, tok->n, PG_TYPE_F32);
	check_tensor(b, "output.weight", 64, tok->n, PG_TYPE_F32);
	gguf_close(a);
	gguf_close(b);
}

START_TEST(test_tokenizer_copy)
{
	/* From a file of our own... */
	char *src = path_in("src.gguf");
	ck_assert_int_eq(run("-q", "-o", src, "--vocab", "700", "--dim", "32", "--heads", "2", "--kv-heads",
			     "1", "--ffn", "32", "--layers", "1", NULL),
			 0);
	check_tokenizer_copy(src, path_in("copy.gguf"));
	/* ...and from a real model, when the test data is there. */
	char real[4096];
	if (testdata_path(real, sizeof real, "models/stories260K.gguf") == 0)
		check_tokenizer_copy(real, path_in("copy2.gguf"));
}
END_TEST

START_TEST(test_deterministic)
{
	char *a = path_in("a.gguf"), *b = path_in("b.gguf"), *c = path_in("c.gguf");
	const char *ty = types[_i].name;
	ck_assert_int_eq(run_shape(a, ty, "42", "--threads=1"), 0);
	ck_assert_int_eq(run_shape(b, ty, "42", "--threads=3"), 0);
	ck_assert_msg(same_file(a, b), "%s: same seed, different bytes", ty);
	ck_assert_int_eq(run_shape(c, ty, "43", NULL), 0);
	ck_assert_msg(!same_file(a, c), "%s: different seeds, same bytes", ty);

	/* The built binary writes what the code under test writes. */
	const char *bd = getenv("PAGODA_BUILD");
	char bin[1024];
	snprintf(bin, sizeof bin, "%s/pagoda-mkmodel", bd ? bd : "build");
	if (access(bin, X_OK) == 0) {
		char cmd[4096], *d = path_in("d.gguf");
		snprintf(cmd, sizeof cmd,
			 "'%s' -q --dim 256 --ffn 512 --layers 2 --heads 4 --kv-heads 2 --vocab 300 --ctx 128 "
			 "-o '%s' --type %s --seed 42",
			 bin, d, ty);
		ck_assert_int_eq(system(cmd), 0);
		ck_assert_msg(same_file(a, d), "%s: %s writes other bytes", ty, bin);
	}
}
END_TEST

/* Pins the bytes: an F32 model depends on nothing but this tool's PRNG and
 * writer, so a change of hash means every machine's models changed. */
START_TEST(test_golden_hash)
{
	char *a = path_in("g.gguf");
	ck_assert_int_eq(run("-q", "-o", a, "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
			     "--layers", "2", "--vocab", "300", "--ctx", "64", "--seed", "1234", NULL),
			 0);
	size_t n;
	uint8_t *p = slurp(a, &n);
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * UINT64_C(0x100000001b3);
	free(p);
	ck_assert_msg(h == UINT64_C(0x482a922e845e09a8), "golden hash changed: 0x%016" PRIx64 " (%zu bytes)", h, n);
}
END_TEST

START_TEST(test_tied_and_options)
{
	char *out = path_in("t.gguf");
	ck_assert_int_eq(run("-q", "-o", out, "--tied", "--rope-base", "500000", "--norm-eps=1e-6", "--ctx",
			     "4096", "--type", "q8_0", NULL),
			 0);
	struct gguf_file *f = open_ok(out);
	ck_assert_ptr_null(gguf_find_tensor(f, "output.weight"));
	ck_assert_ptr_nonnull(gguf_find_tensor(f, "token_embd.weight"));
	ck_assert_uint_eq(f->n_tensors, 2 + 9 * 4);
	ck_assert_float_eq(get_f32(f, "llama.rope.freq_base"), 500000.0f);
	ck_assert_float_eq(get_f32(f, "llama.attention.layer_norm_rms_epsilon"), 1e-6f);
	ck_assert_uint_eq(get_u32(f, "llama.context_length"), 4096);
	ck_assert_uint_eq(get_u32(f, "general.quantization_version"), 2);
	/* the tiny preset is the default shape */
	ck_assert_uint_eq(get_u32(f, "llama.embedding_length"), 256);
	ck_assert_uint_eq(get_u32(f, "llama.block_count"), 4);
	ck_assert_uint_eq(get_u32(f, "llama.attention.head_count"), 8);
	ck_assert_uint_eq(get_u32(f, "llama.attention.head_count_kv"), 4);
	ck_assert_uint_eq(get_u32(f, "llama.feed_forward_length"), 768);
	ck_assert_uint_eq(get_u32(f, "llama.vocab_size"), 512);
	gguf_close(f);

	/* Flags override the preset wherever they stand. */
	ck_assert_int_eq(run("-q", "--layers", "1", "-o", out, "--preset", "tinyllama-1.1b", "--dim", "64",
			     "--ffn", "64", "--vocab", "300", "--heads", "4", NULL),
			 0);
	f = open_ok(out);
	ck_assert_uint_eq(get_u32(f, "llama.block_count"), 1);
	ck_assert_uint_eq(get_u32(f, "llama.embedding_length"), 64);
	ck_assert_uint_eq(get_u32(f, "llama.attention.head_count_kv"), 4);
	ck_assert_uint_eq(get_u32(f, "llama.context_length"), 2048);
	ck_assert_uint_eq(get_u32(f, "general.file_type"), 7); /* the preset's Q8_0 */
	gguf_close(f);
}
END_TEST

START_TEST(test_errors)
{
	char *out = path_in("e.gguf");
	/* usage and shape errors: exit 2, nothing written */
	ck_assert_int_eq(run("--dim", "256", NULL), 2);                               /* no -o */
	ck_assert_int_eq(run("-o", out, "--bogus", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", "abc", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", "0", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", "-5", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--type", "IQ2_XS", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--type", "Q3", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--preset", "huge", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--rope-base", "nan", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--norm-eps", "-1", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--tied=1", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", "250", "--heads", "8", NULL), 2);    /* heads ∤ dim */
	ck_assert_int_eq(run("-o", out, "--kv-heads", "3", NULL), 2);                /* kv ∤ heads */
	ck_assert_int_eq(run("-o", out, "--kv-heads", "16", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", "24", "--heads", "8", NULL), 2);     /* odd head size */
	ck_assert_int_eq(run("-o", out, "--dim", "128", "--heads", "4", "--type", "Q4_K", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--ffn", "640", "--type", "Q2_K", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--ffn", "100", "--type", "Q8_0", NULL), 2);
	ck_assert_int_eq(run("-o", out, "--dim", "8", "--heads", "2", "--kv-heads", "1", "--ffn", "8",
			     "--type", "Q4_0", NULL), 2);
	ck_assert(!exists(out));
	/* run-time errors: exit 1, no file and no .tmp left behind */
	ck_assert_int_eq(run("-q", "-o", out, "--tokenizer", path_in("nonexistent.gguf"), NULL), 1);
	ck_assert_int_eq(run("-q", "-o", path_in("no/such/dir.gguf"), NULL), 1);
	ck_assert(!exists(out));
	ck_assert(!exists(path_in("e.gguf.tmp")));
	/* a tokenizer source without tokens */
	FILE *g = fopen(path_in("empty.gguf"), "wb");
	const uint8_t hdr[24] = { 'G', 'G', 'U', 'F', 3 };
	fwrite(hdr, 1, sizeof hdr, g);
	fclose(g);
	ck_assert_int_eq(run("-q", "-o", out, "--tokenizer", path_in("empty.gguf"), NULL), 1);
	ck_assert(!exists(out));
	/* --help succeeds */
	ck_assert_int_eq(run("--help", NULL), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mkmodel");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_each_type, 0, NTYPES);
	tcase_add_loop_test(tc, test_deterministic, 0, NTYPES);
	tcase_add_test(tc, test_builtin_tokenizer);
	tcase_add_test(tc, test_tokenizer_copy);
	tcase_add_test(tc, test_golden_hash);
	tcase_add_test(tc, test_tied_and_options);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
