/* tools/pagoda-mkmodel/mkmodel.c — writes a Llama-architecture GGUF v3 with
 * deterministic pseudo-random weights, for tests, benchmarks and `make run`.
 *
 * Weights come from xoshiro256** seeded per row by splitmix64 of (seed,
 * tensor, row), turned into an approximately normal value with integer sums
 * and one float multiply: no libm transcendental is involved, so the bytes
 * are the same on every machine and for every thread count. Rows are made
 * and quantized in parallel a batch at a time and streamed to OUT.tmp, which
 * is renamed to OUT at the end.
 *
 * main.c holds main(); the unit test links this file and calls
 * mkmodel_main() in-process.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/pagoda-mkmodel/mkmodel.h"
#include "daemon/model/gguf.h"
#include "kernels/cpu/kernels.h"
#include "kernels/types.h"

#define MK_PROG "pagoda-mkmodel"
#define MK_ALIGN 32u
#define MK_MAX_THREADS 64
#define MK_BATCH_BYTES (16u << 20)

/* ---- options ---------------------------------------------------------------- */

struct mk_opts {
	const char *out;
	const char *preset;
	const char *tokenizer;
	uint64_t dim, layers, heads, kv_heads, ffn, vocab, ctx;
	uint32_t type;
	uint64_t seed;
	double rope_base, norm_eps;
	bool tied, quiet, vocab_set, type_set;
	int threads;
};

static int mk_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int mk_err(const char *fmt, ...)
{
	va_list ap;
	fputs(MK_PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static void mk_usage(FILE *f)
{
	fprintf(f,
		"usage: " MK_PROG " -o OUT.gguf [options]\n"
		"Writes a Llama GGUF v3 with deterministic random weights (it prints noise).\n"
		"\n"
		"  -o, --out FILE        output path (written to FILE.tmp, then renamed)\n"
		"  --preset NAME         tiny (default: dim 256, 4 layers, 8/4 heads, ffn 768,\n"
		"                        vocab 512, ctx 512, F32) or tinyllama-1.1b (dim 2048,\n"
		"                        22 layers, 32/4 heads, ffn 5632, vocab 32000, ctx 2048,\n"
		"                        Q8_0); flags below override the preset\n"
		"  --dim N               embedding length (n_embd)\n"
		"  --layers N            block count\n"
		"  --heads N             attention heads (must divide dim)\n"
		"  --kv-heads N          KV heads (must divide heads)\n"
		"  --ffn N               feed-forward length\n"
		"  --vocab N             vocabulary size (>= 259 for the built-in tokenizer)\n"
		"  --ctx N               context length\n"
		"  --type T              2-D weight type: F32 F16 BF16 Q8_0 Q4_0 Q2_K Q3_K Q4_K\n"
		"                        Q5_K Q6_K IQ4_NL IQ4_XS (norms stay F32)\n"
		"  --seed S              PRNG seed (default 0)\n"
		"  --rope-base F         RoPE frequency base (default 10000)\n"
		"  --norm-eps F          RMSNorm epsilon (default 1e-5)\n"
		"  --tied                no output.weight: the output reuses token_embd\n"
		"  --tokenizer FILE      copy every tokenizer.* key from another GGUF; the vocab\n"
		"                        size is then that tokenizer's\n"
		"  -t, --threads N       worker threads (default: all online cores)\n"
		"  -q, --quiet           print nothing but errors\n"
		"  -h, --help            this text\n");
}

static const struct {
	const char *name;
	uint32_t type;
	uint32_t file_type; /* llama.cpp's LLAMA_FTYPE_* */
} mk_types[] = {
	{ "F32", PG_TYPE_F32, 0 },   { "F16", PG_TYPE_F16, 1 },   { "BF16", PG_TYPE_BF16, 32 },
	{ "Q8_0", PG_TYPE_Q8_0, 7 }, { "Q4_0", PG_TYPE_Q4_0, 2 }, { "Q2_K", PG_TYPE_Q2_K, 10 },
	{ "Q3_K", PG_TYPE_Q3_K, 11 }, { "Q4_K", PG_TYPE_Q4_K, 14 }, { "Q5_K", PG_TYPE_Q5_K, 16 },
	{ "Q6_K", PG_TYPE_Q6_K, 18 }, { "IQ4_NL", PG_TYPE_IQ4_NL, 25 }, { "IQ4_XS", PG_TYPE_IQ4_XS, 30 },
};
#define MK_NTYPES (sizeof(mk_types) / sizeof(mk_types[0]))

static int mk_type_index(uint32_t type)
{
	for (size_t i = 0; i < MK_NTYPES; i++)
		if (mk_types[i].type == type)
			return (int)i;
	return -1;
}

static void mk_preset_tiny(struct mk_opts *o)
{
	o->dim = 256;
	o->layers = 4;
	o->heads = 8;
	o->kv_heads = 4;
	o->ffn = 768;
	o->vocab = 512;
	o->ctx = 512;
	o->type = PG_TYPE_F32;
}

static void mk_preset_tinyllama(struct mk_opts *o)
{
	o->dim = 2048;
	o->layers = 22;
	o->heads = 32;
	o->kv_heads = 4;
	o->ffn = 5632;
	o->vocab = 32000;
	o->ctx = 2048;
	o->type = PG_TYPE_Q8_0;
}

static bool mk_parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return false;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

static bool mk_parse_pos_double(const char *s, double *out)
{
	if (!s || !*s)
		return false;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v <= 0)
		return false;
	*out = v;
	return true;
}

/* Returns 0 to go on, 1 on an error (already printed), -1 after --help. */
static int mk_parse_args(int argc, char **argv, struct mk_opts *o)
{
	memset(o, 0, sizeof(*o));
	mk_preset_tiny(o);
	o->rope_base = 10000.0;
	o->norm_eps = 1e-5;

	/* The preset first, so that every other flag overrides it wherever it is. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		if (strcmp(a, "--preset") == 0) {
			if (i + 1 >= argc)
				return mk_err("--preset needs a value (tiny or tinyllama-1.1b)");
			v = argv[++i];
		} else if (strncmp(a, "--preset=", 9) == 0) {
			v = a + 9;
		} else {
			continue;
		}
		if (strcmp(v, "tiny") == 0)
			mk_preset_tiny(o);
		else if (strcmp(v, "tinyllama-1.1b") == 0)
			mk_preset_tinyllama(o);
		else
			return mk_err("unknown preset '%s' (known: tiny, tinyllama-1.1b)", v);
		o->preset = v;
	}

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char flag[32];
		const char *val = NULL;
		const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
		if (eq) {
			size_t n = (size_t)(eq - a);
			if (n >= sizeof(flag))
				return mk_err("unknown option '%s' (see --help)", a);
			memcpy(flag, a, n);
			flag[n] = 0;
			val = eq + 1;
		} else {
			snprintf(flag, sizeof(flag), "%s", a);
			if (strlen(a) >= sizeof(flag))
				return mk_err("unknown option '%s' (see --help)", a);
		}

		if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
			mk_usage(stdout);
			return -1;
		}
		if (!strcmp(flag, "--tied") || !strcmp(flag, "-q") || !strcmp(flag, "--quiet")) {
			if (val)
				return mk_err("%s takes no value", flag);
			if (!strcmp(flag, "--tied"))
				o->tied = true;
			else
				o->quiet = true;
			continue;
		}

		static const char *const with_value[] = {
			"-o", "--out", "--preset", "--dim", "--layers", "--heads", "--kv-heads",
			"--ffn", "--vocab", "--ctx", "--type", "--seed", "--rope-base", "--norm-eps",
			"--tokenizer", "-t", "--threads",
		};
		bool known = false;
		for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
			known |= strcmp(flag, with_value[k]) == 0;
		if (!known)
			return mk_err("unknown option '%s' (see --help)", a);
		if (!val) {
			if (i + 1 >= argc)
				return mk_err("%s needs a value", flag);
			val = argv[++i];
		}

		uint64_t u;
		if (!strcmp(flag, "-o") || !strcmp(flag, "--out")) {
			if (!*val)
				return mk_err("%s needs a file name", flag);
			o->out = val;
		} else if (!strcmp(flag, "--preset")) {
			/* handled above */
		} else if (!strcmp(flag, "--tokenizer")) {
			o->tokenizer = val;
		} else if (!strcmp(flag, "--type")) {
			size_t k;
			for (k = 0; k < MK_NTYPES; k++)
				if (!strcasecmp(val, mk_types[k].name))
					break;
			if (k == MK_NTYPES)
				return mk_err("unknown --type '%s' (one of F32 F16 BF16 Q8_0 Q4_0 Q2_K Q3_K Q4_K "
					      "Q5_K Q6_K IQ4_NL IQ4_XS)", val);
			o->type = mk_types[k].type;
			o->type_set = true;
		} else if (!strcmp(flag, "--rope-base")) {
			if (!mk_parse_pos_double(val, &o->rope_base))
				return mk_err("--rope-base wants a positive number, not '%s'", val);
		} else if (!strcmp(flag, "--norm-eps")) {
			if (!mk_parse_pos_double(val, &o->norm_eps))
				return mk_err("--norm-eps wants a positive number, not '%s'", val);
		} else if (!strcmp(flag, "--seed")) {
			if (!mk_parse_u64(val, &o->seed))
				return mk_err("--seed wants an unsigned integer, not '%s'", val);
		} else {
			if (!mk_parse_u64(val, &u) || u == 0)
				return mk_err("%s wants a positive integer, not '%s'", flag, val);
			if (!strcmp(flag, "--dim"))
				o->dim = u;
			else if (!strcmp(flag, "--layers"))
				o->layers = u;
			else if (!strcmp(flag, "--heads"))
				o->heads = u;
			else if (!strcmp(flag, "--kv-heads"))
				o->kv_heads = u;
			else if (!strcmp(flag, "--ffn"))
				o->ffn = u;
			else if (!strcmp(flag, "--vocab")) {
				o->vocab = u;
				o->vocab_set = true;
			} else if (!strcmp(flag, "--ctx"))
				o->ctx = u;
			else { /* -t, --threads */
				if (u > MK_MAX_THREADS)
					u = MK_MAX_THREADS;
				o->threads = (int)u;
			}
		}
	}
	if (!o->out)
		return mk_err("no output file: give -o OUT.gguf (see --help)");
	return 0;
}

/* Shape checks that need no file; the vocab is checked after the tokenizer. */
static int mk_check_shape(const struct mk_opts *o)
{
	const uint64_t lim = UINT64_C(1) << 20;
	if (o->dim > lim || o->ffn > lim || o->heads > lim || o->layers > 4096 || o->ctx > (UINT64_C(1) << 31))
		return mk_err("shape too large (dim, ffn, heads <= %" PRIu64 ", layers <= 4096, ctx <= 2^31)", lim);
	if (o->dim % o->heads)
		return mk_err("--heads %" PRIu64 " does not divide --dim %" PRIu64, o->heads, o->dim);
	if (o->kv_heads > o->heads || o->heads % o->kv_heads)
		return mk_err("--kv-heads %" PRIu64 " does not divide --heads %" PRIu64, o->kv_heads, o->heads);
	uint64_t head_dim = o->dim / o->heads;
	if (head_dim % 2)
		return mk_err("head size dim/heads = %" PRIu64 " must be even (RoPE rotates pairs)", head_dim);
	const struct pg_type_info *ti = pg_type_info(o->type);
	if (o->dim % ti->blck)
		return mk_err("--dim %" PRIu64 " is not a multiple of %s's block of %u (pick another --type or dim)",
			      o->dim, ti->name, ti->blck);
	if (o->ffn % ti->blck)
		return mk_err("--ffn %" PRIu64 " is not a multiple of %s's block of %u (pick another --type or ffn)",
			      o->ffn, ti->name, ti->blck);
	return 0;
}

/* ---- growing byte buffer for the header ------------------------------------ */

struct mk_buf {
	uint8_t *p;
	size_t n, cap;
	bool oom;
};

static void mk_put(struct mk_buf *b, const void *src, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void mk_put_le(struct mk_buf *b, uint64_t v, size_t n)
{
	uint8_t t[8];
	for (size_t i = 0; i < n; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	mk_put(b, t, n);
}

static void mk_put_u32(struct mk_buf *b, uint32_t v) { mk_put_le(b, v, 4); }
static void mk_put_u64(struct mk_buf *b, uint64_t v) { mk_put_le(b, v, 8); }

static void mk_put_f32(struct mk_buf *b, float f)
{
	uint32_t w;
	memcpy(&w, &f, 4);
	mk_put_u32(b, w);
}

static void mk_put_str(struct mk_buf *b, const char *s, size_t n)
{
	mk_put_u64(b, n);
	mk_put(b, s, n);
}

/* Metadata: the key/value section, counted as it grows. */
struct mk_meta {
	struct mk_buf b;
	uint64_t n;
};

static void mk_key(struct mk_meta *m, const char *key, uint32_t type)
{
	mk_put_str(&m->b, key, strlen(key));
	mk_put_u32(&m->b, type);
	m->n++;
}

static void kv_u32(struct mk_meta *m, const char *key, uint32_t v)
{
	mk_key(m, key, GGUF_UINT32);
	mk_put_u32(&m->b, v);
}

static void kv_f32(struct mk_meta *m, const char *key, float v)
{
	mk_key(m, key, GGUF_FLOAT32);
	mk_put_f32(&m->b, v);
}

static void kv_bool(struct mk_meta *m, const char *key, bool v)
{
	mk_key(m, key, GGUF_BOOL);
	uint8_t c = v;
	mk_put(&m->b, &c, 1);
}

static void kv_str(struct mk_meta *m, const char *key, const char *v)
{
	mk_key(m, key, GGUF_STRING);
	mk_put_str(&m->b, v, strlen(v));
}

static size_t mk_vtype_size(uint32_t t)
{
	switch (t) {
	case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
	case GGUF_UINT16: case GGUF_INT16: return 2;
	case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
	case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

/* Re-encodes one key/value read by the GGUF reader. */
static int mk_copy_kv(struct mk_meta *m, const struct gguf_kv *kv)
{
	mk_put_str(&m->b, kv->key.ptr, kv->key.len);
	mk_put_u32(&m->b, kv->type);
	m->n++;
	switch (kv->type) {
	case GGUF_STRING:
		mk_put_str(&m->b, kv->v.str.ptr, kv->v.str.len);
		return 0;
	case GGUF_FLOAT32:
		mk_put_f32(&m->b, (float)kv->v.f64);
		return 0;
	case GGUF_FLOAT64: {
		uint64_t w;
		memcpy(&w, &kv->v.f64, 8);
		mk_put_u64(&m->b, w);
		return 0;
	}
	case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
		mk_put_le(&m->b, (uint64_t)kv->v.i64, mk_vtype_size(kv->type));
		return 0;
	case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64: case GGUF_BOOL:
		mk_put_le(&m->b, kv->v.u64, mk_vtype_size(kv->type));
		return 0;
	case GGUF_ARRAY: {
		const struct gguf_array *a = &kv->v.arr;
		mk_put_u32(&m->b, a->type);
		mk_put_u64(&m->b, a->n);
		if (a->type == GGUF_STRING) {
			for (uint64_t i = 0; i < a->n; i++)
				mk_put_str(&m->b, a->strs[i].ptr, a->strs[i].len);
			return 0;
		}
		size_t es = mk_vtype_size(a->type);
		if (!es)
			return -1;
		mk_put(&m->b, a->data, (size_t)a->n * es);
		return 0;
	}
	default:
		return -1;
	}
}

/* ---- the built-in SentencePiece-style vocabulary -------------------------- */

struct mk_vocab {
	char **tok;
	float *score;
	int32_t *ttype;
	uint64_t n, cap;
	uint64_t *set; /* open addressing: index+1, 0 = empty */
	uint64_t set_cap;
};

static uint64_t mk_fnv(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * UINT64_C(0x100000001b3);
	return h;
}

/* Adds s unless present or the vocab is full. Returns -1 only on OOM. */
static int mk_vocab_add(struct mk_vocab *v, const char *s, int32_t ttype, float score)
{
	if (v->n >= v->cap)
		return 0;
	uint64_t mask = v->set_cap - 1, h = mk_fnv(s) & mask;
	for (; v->set[h]; h = (h + 1) & mask)
		if (!strcmp(v->tok[v->set[h] - 1], s))
			return 0;
	char *d = strdup(s);
	if (!d)
		return -1;
	v->tok[v->n] = d;
	v->score[v->n] = score;
	v->ttype[v->n] = ttype;
	v->set[h] = ++v->n;
	return 0;
}

static void mk_vocab_free(struct mk_vocab *v)
{
	for (uint64_t i = 0; i < v->n; i++)
		free(v->tok[i]);
	free(v->tok);
	free(v->score);
	free(v->ttype);
	free(v->set);
	memset(v, 0, sizeof(*v));
}

#define MK_SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

static const char *const mk_words[] = {
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with",
	"be", "by", "on", "not", "he", "she", "they", "we", "you", "I", "this", "are", "or",
	"his", "her", "from", "at", "which", "but", "have", "an", "had", "were", "their",
	"one", "all", "there", "been", "has", "when", "who", "will", "more", "no", "if",
	"out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can",
	"only", "other", "new", "some", "could", "time", "these", "two", "may", "then",
	"do", "first", "any", "my", "now", "such", "like", "our", "over", "man", "me",
	"even", "most", "made", "after", "also", "did", "many", "before", "must", "through",
	"back", "years", "where", "much", "your", "way", "well", "down", "should", "because",
	"each", "just", "those", "people", "how", "too", "little", "state", "good", "very",
	"make", "world", "still", "own", "see", "men", "work", "long", "get", "here",
	"between", "both", "life", "being", "under", "never", "day", "same", "another",
	"know", "while", "last", "might", "us", "great", "old", "year", "off", "come",
	"since", "against", "go", "came", "right", "used", "take", "three", "Once", "upon",
	"There", "The", "She", "He", "It", "They", "One", "girl", "boy", "named", "Lily",
	"Tom", "happy", "big", "saw", "play", "wanted", "mom", "friend", "said", "tree",
	"dog", "cat", "sun", "park", "ball", "help", "Hello", "hello", "model", "random",
	"noise", "token", "pagoda",
};

static int mk_vocab_build(struct mk_vocab *v, uint64_t n)
{
	memset(v, 0, sizeof(*v));
	v->cap = n;
	v->set_cap = 64;
	while (v->set_cap < 2 * n)
		v->set_cap *= 2;
	v->tok = calloc(n, sizeof(*v->tok));
	v->score = calloc(n, sizeof(*v->score));
	v->ttype = calloc(n, sizeof(*v->ttype));
	v->set = calloc(v->set_cap, sizeof(*v->set));
	if (!v->tok || !v->score || !v->ttype || !v->set)
		return -1;

	int rc = 0;
	rc |= mk_vocab_add(v, "<unk>", 2, 0.0f); /* UNKNOWN */
	rc |= mk_vocab_add(v, "<s>", 3, 0.0f);   /* CONTROL */
	rc |= mk_vocab_add(v, "</s>", 3, 0.0f);
	char s[64];
	for (int b = 0; b < 256; b++) {
		snprintf(s, sizeof(s), "<0x%02X>", b);
		rc |= mk_vocab_add(v, s, 6, 0.0f); /* BYTE */
	}
	/* Pieces, most likely first: SentencePiece scores are log-probabilities,
	 * the tokenizer merges the highest-scoring pair first. */
	float score = 0.0f;
#define PIECE(str) (rc |= mk_vocab_add(v, (str), 1, score -= 1.0f))
	PIECE(MK_SP);
	for (int c = 'a'; c <= 'z'; c++) {
		snprintf(s, sizeof(s), "%c", c);
		PIECE(s);
	}
	for (int c = 0x21; c < 0x7f; c++) {
		snprintf(s, sizeof(s), "%c", c);
		PIECE(s);
	}
	for (int c = 0x21; c < 0x7f; c++) {
		snprintf(s, sizeof(s), MK_SP "%c", c);
		PIECE(s);
	}
	/* Whole words with every prefix, so that SentencePiece's pairwise merges
	 * can reach them. */
	for (size_t w = 0; w < sizeof(mk_words) / sizeof(mk_words[0]); w++) {
		size_t len = strlen(mk_words[w]);
		for (size_t k = 2; k <= len; k++) {
			snprintf(s, sizeof(s), MK_SP "%.*s", (int)k, mk_words[w]);
			PIECE(s);
		}
	}
	/* Filler up to the wanted size: lower-case strings of growing length,
	 * bare and after a space. */
	for (int len = 2; v->n < v->cap && len < 16; len++) {
		for (int sp = 0; sp < 2 && v->n < v->cap; sp++) {
			int idx[16] = { 0 };
			for (;;) {
				size_t o = 0;
				if (sp) {
					memcpy(s, MK_SP, 3);
					o = 3;
				}
				for (int i = 0; i < len; i++)
					s[o++] = (char)('a' + idx[i]);
				s[o] = 0;
				PIECE(s);
				if (rc || v->n >= v->cap)
					break;
				int i = len - 1;
				while (i >= 0 && ++idx[i] == 26)
					idx[i--] = 0;
				if (i < 0)
					break;
			}
		}
	}
#undef PIECE
	return rc ? -1 : 0;
}

static void mk_vocab_write(struct mk_meta *m, const struct mk_vocab *v)
{
	kv_str(m, "tokenizer.ggml.model", "llama");
	mk_key(m, "tokenizer.ggml.tokens", GGUF_ARRAY);
	mk_put_u32(&m->b, GGUF_STRING);
	mk_put_u64(&m->b, v->n);
	for (uint64_t i = 0; i < v->n; i++)
		mk_put_str(&m->b, v->tok[i], strlen(v->tok[i]));
	mk_key(m, "tokenizer.ggml.scores", GGUF_ARRAY);
	mk_put_u32(&m->b, GGUF_FLOAT32);
	mk_put_u64(&m->b, v->n);
	for (uint64_t i = 0; i < v->n; i++)
		mk_put_f32(&m->b, v->score[i]);
	mk_key(m, "tokenizer.ggml.token_type", GGUF_ARRAY);
	mk_put_u32(&m->b, GGUF_INT32);
	mk_put_u64(&m->b, v->n);
	for (uint64_t i = 0; i < v->n; i++)
		mk_put_u32(&m->b, (uint32_t)v->ttype[i]);
	kv_u32(m, "tokenizer.ggml.bos_token_id", 1);
	kv_u32(m, "tokenizer.ggml.eos_token_id", 2);
	kv_u32(m, "tokenizer.ggml.unknown_token_id", 0);
	kv_bool(m, "tokenizer.ggml.add_bos_token", true);
	kv_bool(m, "tokenizer.ggml.add_eos_token", false);
}

/* ---- tensors ---------------------------------------------------------------- */

struct mk_tensor {
	char name[48];
	uint32_t n_dims;
	uint64_t ne[2];
	uint32_t type;
	uint64_t offset, size, row_size;
	float std;     /* 0: a norm, all ones */
	uint64_t id;   /* stream id for the PRNG */
};

static uint64_t mk_align(uint64_t x) { return (x + MK_ALIGN - 1) / MK_ALIGN * MK_ALIGN; }

static void mk_tensor_set(struct mk_tensor *t, uint64_t id, const char *name, uint64_t ne0,
			  uint64_t ne1, uint32_t type, double std)
{
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->id = id;
	t->n_dims = ne1 ? 2 : 1;
	t->ne[0] = ne0;
	t->ne[1] = ne1 ? ne1 : 1;
	t->type = ne1 ? type : PG_TYPE_F32;
	t->row_size = pg_row_size(t->type, ne0);
	t->size = t->row_size * t->ne[1];
	t->std = (float)std;
}

/* ---- PRNG: splitmix64 to seed, xoshiro256** to draw ------------------------ */

static inline uint64_t mk_splitmix(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static inline uint64_t mk_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

struct mk_rng {
	uint64_t s[4];
};

static inline uint64_t mk_next(struct mk_rng *r)
{
	uint64_t *s = r->s;
	const uint64_t out = mk_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = mk_rotl(s[3], 45);
	return out;
}

/* Row r of tensor id: approximately N(0, std^2), as the centred sum of four
 * 16-bit uniforms (Irwin-Hall), all integer but one exact-scale multiply. */
static void mk_gen_row(float *dst, uint64_t n, uint64_t seed, uint64_t id, uint64_t row, float std)
{
	struct mk_rng r;
	uint64_t x = seed;
	x = mk_splitmix(&x) ^ (id * UINT64_C(0xd1b54a32d192ed03));
	x = mk_splitmix(&x) ^ (row * UINT64_C(0x8cb92ba72f3d8dd7));
	for (int i = 0; i < 4; i++)
		r.s[i] = mk_splitmix(&x);
	/* Variance of one 16-bit uniform is (65536^2 - 1)/12; four of them. */
	const float scale = (float)((double)std / sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = mk_next(&r);
		int32_t s = (int32_t)((v & 0xffff) + ((v >> 16) & 0xffff) + ((v >> 32) & 0xffff) + (v >> 48)) -
			    131070;
		dst[i] = (float)s * scale;
	}
}

/* One batch: rows [row0, row0+nrows) of tensor t into out, split over nth
 * threads. */
struct mk_job {
	const struct mk_tensor *t;
	uint64_t seed, row0, nrows;
	uint8_t *out;
	int nth;
	int fail;
};

struct mk_worker {
	struct mk_job *job;
	int ith;
	bool started;
	pthread_t th;
};

static void *mk_work(void *arg)
{
	struct mk_worker *w = arg;
	struct mk_job *j = w->job;
	const struct mk_tensor *t = j->t;
	uint64_t per = (j->nrows + (uint64_t)j->nth - 1) / (uint64_t)j->nth;
	uint64_t a = per * (uint64_t)w->ith, b = a + per < j->nrows ? a + per : j->nrows;
	if (a >= b)
		return NULL;
	float *row = malloc(t->ne[0] * sizeof(float));
	if (!row) {
		j->fail = 1;
		return NULL;
	}
	for (uint64_t r = a; r < b; r++) {
		if (t->std == 0.0f) {
			for (uint64_t i = 0; i < t->ne[0]; i++)
				row[i] = 1.0f;
		} else {
			mk_gen_row(row, t->ne[0], j->seed, t->id, j->row0 + r, t->std);
		}
		size_t got = pg_quantize_row(t->type, row, j->out + r * t->row_size, (int64_t)t->ne[0]);
		if (got != t->row_size) {
			j->fail = 2;
			break;
		}
	}
	free(row);
	return NULL;
}

static int mk_write_all(FILE *f, const void *p, size_t n, const char *path)
{
	if (n && fwrite(p, 1, n, f) != n)
		return mk_err("writing %s: %s", path, strerror(errno));
	return 0;
}

static int mk_pad(FILE *f, uint64_t pos, const char *path)
{
	static const uint8_t zeros[MK_ALIGN];
	return mk_write_all(f, zeros, (size_t)(mk_align(pos) - pos), path);
}

struct mk_batch {
	struct mk_job job;
	struct mk_worker w[MK_MAX_THREADS];
	int n;
};

static void mk_batch_start(struct mk_batch *b, const struct mk_tensor *t, uint64_t seed, uint64_t row0,
			   uint64_t nrows, uint8_t *out, int nth)
{
	if ((uint64_t)nth > nrows)
		nth = (int)nrows;
	b->job = (struct mk_job){ .t = t, .seed = seed, .row0 = row0, .nrows = nrows, .out = out, .nth = nth };
	b->n = nth;
	for (int i = 0; i < nth; i++) {
		b->w[i].job = &b->job;
		b->w[i].ith = i;
		b->w[i].started = pthread_create(&b->w[i].th, NULL, mk_work, &b->w[i]) == 0;
	}
}

static int mk_batch_finish(struct mk_batch *b)
{
	for (int i = 0; i < b->n; i++) {
		if (b->w[i].started)
			pthread_join(b->w[i].th, NULL);
		else
			mk_work(&b->w[i]); /* could not start a thread: do its share here */
	}
	const struct mk_tensor *t = b->job.t;
	if (b->job.fail == 1)
		return mk_err("out of memory");
	if (b->job.fail == 2)
		return mk_err("pg_quantize_row cannot make %s rows of %" PRIu64 " (tensor %s)",
			      pg_type_name(t->type), t->ne[0], t->name);
	return 0;
}

/* Writes every tensor's data, each padded to the alignment. Worker threads
 * make batch i+1 into one buffer while this thread writes batch i from the
 * other. */
static int mk_write_data(FILE *f, const struct mk_tensor *ts, uint64_t nt, uint64_t seed, int nth,
			 uint8_t *buf[2], size_t buf_size, const char *path)
{
	struct mk_batch bt[2];
	struct mk_batch *prev = NULL;
	int cur = 0, rc = 0;
	for (uint64_t i = 0; i < nt && !rc; i++) {
		const struct mk_tensor *t = &ts[i];
		uint64_t rows_per = buf_size / t->row_size;
		for (uint64_t r0 = 0; r0 < t->ne[1]; r0 += rows_per) {
			uint64_t nrows = t->ne[1] - r0 < rows_per ? t->ne[1] - r0 : rows_per;
			mk_batch_start(&bt[cur], t, seed, r0, nrows, buf[cur], nth);
			if (prev) {
				const struct mk_job *pj = &prev->job;
				rc = mk_write_all(f, pj->out, (size_t)(pj->nrows * pj->t->row_size), path);
				if (!rc && pj->row0 + pj->nrows == pj->t->ne[1])
					rc = mk_pad(f, pj->t->offset + pj->t->size, path);
			}
			int rc2 = mk_batch_finish(&bt[cur]);
			if (rc || rc2)
				return 1;
			prev = &bt[cur];
			cur ^= 1;
		}
	}
	if (prev) {
		const struct mk_job *pj = &prev->job;
		rc = mk_write_all(f, pj->out, (size_t)(pj->nrows * pj->t->row_size), path);
		if (!rc)
			rc = mk_pad(f, pj->t->offset + pj->t->size, path);
	}
	return rc;
}

/* ---- main ------------------------------------------------------------------- */

static double mk_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void mk_human(char *buf, size_t n, double bytes)
{
	if (bytes >= 1024.0 * 1024 * 1024)
		snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
	else if (bytes >= 1024.0 * 1024)
		snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024));
	else
		snprintf(buf, n, "%.1f KiB", bytes / 1024.0);
}

int mkmodel_main(int argc, char **argv)
{
	struct mk_opts o;
	int rc = mk_parse_args(argc, argv, &o);
	if (rc)
		return rc < 0 ? 0 : 2;
	if (mk_check_shape(&o))
		return 2;

	double t0 = mk_now();
	struct gguf_file *src = NULL;
	struct mk_vocab voc = { 0 };
	struct mk_meta meta = { 0 };
	struct mk_buf hdr = { 0 };
	struct mk_tensor *ts = NULL;
	uint8_t *bufs[2] = { NULL, NULL };
	char *tmp = NULL;
	FILE *f = NULL;
	rc = 1;

	if (o.tokenizer) {
		char err[256] = "";
		if (gguf_open(o.tokenizer, &src, err, sizeof(err)) < 0) {
			mk_err("--tokenizer: %s", err);
			src = NULL;
			goto out;
		}
		const struct gguf_array *toks = gguf_get_arr(src, "tokenizer.ggml.tokens", GGUF_STRING);
		if (!toks || toks->n == 0) {
			mk_err("--tokenizer %s has no tokenizer.ggml.tokens string array", o.tokenizer);
			goto out;
		}
		if (o.vocab_set && o.vocab != toks->n && !o.quiet)
			fprintf(stderr, MK_PROG ": note: --vocab %" PRIu64 " ignored: the tokenizer of %s has %" PRIu64
				" tokens\n", o.vocab, o.tokenizer, toks->n);
		o.vocab = toks->n;
	} else {
		if (o.vocab < 259) {
			rc = 2;
			mk_err("--vocab %" PRIu64 " is too small for the built-in tokenizer (at least 259: "
			       "<unk> <s> </s> and 256 byte tokens)", o.vocab);
			goto out;
		}
	}
	if (o.vocab > (UINT64_C(1) << 24)) {
		rc = 2;
		mk_err("vocab %" PRIu64 " is too large (at most 2^24)", o.vocab);
		goto out;
	}
	if (!o.tokenizer && mk_vocab_build(&voc, o.vocab)) {
		mk_err("out of memory");
		goto out;
	}

	const int ti = mk_type_index(o.type);
	const uint64_t kv_dim = o.dim / o.heads * o.kv_heads;
	char name[96];
	snprintf(name, sizeof(name), "random-%s-%s", o.preset ? o.preset : "llama", mk_types[ti].name);

	/* Metadata, in the order llama.cpp's converter writes it. */
	kv_str(&meta, "general.architecture", "llama");
	kv_str(&meta, "general.name", name);
	kv_u32(&meta, "general.alignment", MK_ALIGN);
	kv_u32(&meta, "llama.vocab_size", (uint32_t)o.vocab);
	kv_u32(&meta, "llama.context_length", (uint32_t)o.ctx);
	kv_u32(&meta, "llama.embedding_length", (uint32_t)o.dim);
	kv_u32(&meta, "llama.block_count", (uint32_t)o.layers);
	kv_u32(&meta, "llama.feed_forward_length", (uint32_t)o.ffn);
	kv_u32(&meta, "llama.rope.dimension_count", (uint32_t)(o.dim / o.heads));
	kv_u32(&meta, "llama.attention.head_count", (uint32_t)o.heads);
	kv_u32(&meta, "llama.attention.head_count_kv", (uint32_t)o.kv_heads);
	kv_f32(&meta, "llama.attention.layer_norm_rms_epsilon", (float)o.norm_eps);
	kv_f32(&meta, "llama.rope.freq_base", (float)o.rope_base);
	kv_u32(&meta, "general.file_type", mk_types[ti].file_type);
	if (pg_type_info(o.type)->blck > 1)
		kv_u32(&meta, "general.quantization_version", 2);
	if (src) {
		for (uint64_t i = 0; i < src->n_kv; i++) {
			const struct gguf_kv *kv = &src->kv[i];
			if (kv->key.len > 10 && memcmp(kv->key.ptr, "tokenizer.", 10) == 0 && mk_copy_kv(&meta, kv)) {
				mk_err("--tokenizer %s: key %.*s has an uncopyable type", o.tokenizer,
				       (int)kv->key.len, kv->key.ptr);
				goto out;
			}
		}
	} else {
		mk_vocab_write(&meta, &voc);
	}

	/* Tensors. ne[0] is the input dimension of each matrix. */
	const uint64_t n_tensors = 2 + (o.tied ? 0 : 1) + 9 * o.layers;
	ts = calloc(n_tensors, sizeof(*ts));
	if (!ts) {
		mk_err("out of memory");
		goto out;
	}
	const double sd_dim = 1.0 / sqrt((double)o.dim), sd_ffn = 1.0 / sqrt((double)o.ffn);
	uint64_t nt = 0, id = 0;
	mk_tensor_set(&ts[nt++], id++, "token_embd.weight", o.dim, o.vocab, o.type, sd_dim);
	for (uint64_t l = 0; l < o.layers; l++) {
		static const char *const nm[] = { "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
						  "ffn_norm", "ffn_gate", "ffn_up", "ffn_down" };
		const uint64_t ne0[] = { o.dim, o.dim, o.dim, o.dim, o.dim, o.dim, o.dim, o.dim, o.ffn };
		const uint64_t ne1[] = { 0, o.dim, kv_dim, kv_dim, o.dim, 0, o.ffn, o.ffn, o.dim };
		for (int k = 0; k < 9; k++) {
			char tn[48];
			snprintf(tn, sizeof(tn), "blk.%" PRIu64 ".%s.weight", l, nm[k]);
			mk_tensor_set(&ts[nt++], id++, tn, ne0[k], ne1[k], o.type,
				      ne1[k] == 0 ? 0.0 : k == 8 ? sd_ffn : sd_dim);
		}
	}
	mk_tensor_set(&ts[nt++], id++, "output_norm.weight", o.dim, 0, o.type, 0.0);
	if (!o.tied) /* logits of standard deviation about 2: peaked, not one-hot */
		mk_tensor_set(&ts[nt++], id++, "output.weight", o.dim, o.vocab, o.type, 2.0 * sd_dim);

	uint64_t off = 0, n_params = 0, max_row = 0;
	for (uint64_t i = 0; i < nt; i++) {
		if (ts[i].row_size == 0) {
			mk_err("internal: %s rows of %" PRIu64 " have no size", pg_type_name(ts[i].type), ts[i].ne[0]);
			goto out;
		}
		ts[i].offset = off;
		off = mk_align(off + ts[i].size);
		n_params += ts[i].ne[0] * ts[i].ne[1];
		if (ts[i].row_size > max_row)
			max_row = ts[i].row_size;
		if (ts[i].ne[0] * sizeof(float) > max_row)
			max_row = ts[i].ne[0] * sizeof(float);
	}
	const uint64_t data_size = off;

	/* Header: magic, version, counts, metadata, tensor infos. */
	mk_put(&hdr, "GGUF", 4);
	mk_put_u32(&hdr, 3);
	mk_put_u64(&hdr, nt);
	mk_put_u64(&hdr, meta.n);
	mk_put(&hdr, meta.b.p, meta.b.n);
	for (uint64_t i = 0; i < nt; i++) {
		mk_put_str(&hdr, ts[i].name, strlen(ts[i].name));
		mk_put_u32(&hdr, ts[i].n_dims);
		for (uint32_t d = 0; d < ts[i].n_dims; d++)
			mk_put_u64(&hdr, ts[i].ne[d]);
		mk_put_u32(&hdr, ts[i].type);
		mk_put_u64(&hdr, ts[i].offset);
	}
	if (hdr.oom || meta.b.oom) {
		mk_err("out of memory");
		goto out;
	}

	size_t buf_size = MK_BATCH_BYTES > max_row ? MK_BATCH_BYTES : (size_t)max_row;
	bufs[0] = malloc(buf_size);
	bufs[1] = malloc(buf_size);
	size_t plen = strlen(o.out);
	tmp = malloc(plen + 5);
	if (!bufs[0] || !bufs[1] || !tmp) {
		mk_err("out of memory");
		goto out;
	}
	memcpy(tmp, o.out, plen);
	memcpy(tmp + plen, ".tmp", 5);
	f = fopen(tmp, "wb");
	if (!f) {
		mk_err("cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
	setvbuf(f, NULL, _IOFBF, 1 << 20);

	int nth = o.threads > 0 ? o.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (nth < 1)
		nth = 1;
	if (nth > MK_MAX_THREADS)
		nth = MK_MAX_THREADS;

	if (mk_write_all(f, hdr.p, hdr.n, tmp) || mk_pad(f, hdr.n, tmp))
		goto fail_tmp;
	if (mk_write_data(f, ts, nt, o.seed, nth, bufs, buf_size, tmp))
		goto fail_tmp;
	if (fflush(f) || ferror(f)) {
		mk_err("writing %s: %s", tmp, strerror(errno));
		goto fail_tmp;
	}
	if (fclose(f)) {
		f = NULL;
		mk_err("writing %s: %s", tmp, strerror(errno));
		goto fail_tmp;
	}
	f = NULL;
	if (rename(tmp, o.out)) {
		mk_err("cannot rename %s to %s: %s", tmp, o.out, strerror(errno));
		goto fail_tmp;
	}

	if (!o.quiet) {
		char sz[32];
		uint64_t total = mk_align(hdr.n) + data_size;
		mk_human(sz, sizeof(sz), (double)total);
		fprintf(stderr,
			MK_PROG ": wrote %s in %.1f s\n"
			"  llama: dim %" PRIu64 ", %" PRIu64 " layers, %" PRIu64 " heads, %" PRIu64 " KV heads, "
			"ffn %" PRIu64 ", vocab %" PRIu64 " (%s), ctx %" PRIu64 "%s\n"
			"  weights %s (norms F32), %" PRIu64 " tensors, %.2f M parameters, %s (%" PRIu64
			" bytes), seed %" PRIu64 "\n"
			MK_PROG ": warning: the weights are random: this model prints noise. It is for tests and "
			"benchmarks; use a real GGUF for real text.\n",
			o.out, mk_now() - t0, o.dim, o.layers, o.heads, o.kv_heads, o.ffn, o.vocab,
			o.tokenizer ? o.tokenizer : "built-in tokenizer", o.ctx, o.tied ? ", tied output" : "",
			mk_types[ti].name, nt, (double)n_params / 1e6, sz, total, o.seed);
	}
	rc = 0;
	goto out;

fail_tmp:
	if (f)
		fclose(f);
	f = NULL;
	unlink(tmp);
out:
	if (f)
		fclose(f);
	free(tmp);
	free(bufs[0]);
	free(bufs[1]);
	free(ts);
	free(hdr.p);
	free(meta.b.p);
	mk_vocab_free(&voc);
	if (src)
		gguf_close(src);
	return rc;
}
