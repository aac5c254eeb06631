/* daemon/model/tokenizer.c — loading, special tokens, pieces, decoding and
 * streaming. The encoders are in tok_encode.c (special-token partition, SPM)
 * and tok_bpe.c (pre-tokenizers, BPE merges); tok_unidata.c holds the
 * Unicode category table. Internals are in tok_internal.h. */
#include "daemon/model/tok_internal.h"
#include "daemon/model/gguf.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- hash tables ------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
	return XXH3_64bits(s, n);
}

int32_t tokp_find(const struct tokenizer *t, const char *s, size_t n)
{
	uint64_t h = hash_bytes(s, n);
	for (uint32_t i = (uint32_t)h & t->tmask;; i = (i + 1) & t->tmask) {
		uint32_t v = t->ttab[i];
		if (!v)
			return -1;
		const struct tokp_entry *e = &t->tok[v - 1];
		if (e->len == n && memcmp(t->arena + e->off, s, n) == 0)
			return (int32_t)(v - 1);
	}
}

static uint64_t pair_hash(const char *a, size_t an, const char *b, size_t bn)
{
	return hash_bytes(a, an) * 0x9E3779B97F4A7C15ull ^ hash_bytes(b, bn);
}

int tokp_merge_rank(const struct tokenizer *t, const char *a, size_t an, const char *b, size_t bn)
{
	if (!t->mtab || an + bn > t->max_merge_len)
		return -1;
	uint64_t h = pair_hash(a, an, b, bn);
	for (uint32_t i = (uint32_t)h & t->mmask;; i = (i + 1) & t->mmask) {
		uint32_t v = t->mtab[i];
		if (!v)
			return -1;
		const struct tokp_merge *m = &t->merges[v - 1];
		if (m->alen == an && m->blen == bn && memcmp(t->marena + m->aoff, a, an) == 0 &&
		    memcmp(t->marena + m->boff, b, bn) == 0)
			return (int)(v - 1);
	}
}

static uint32_t pow2_at_least(uint64_t n)
{
	uint64_t c = 16;
	while (c < n)
		c <<= 1;
	return (uint32_t)c;
}

/* ---- GPT-2 byte <-> unicode map ---------------------------------------- */

static bool byte_is_direct(int b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* code point standing for byte b */
uint32_t tokp_byte_to_cp(uint8_t b)
{
	if (byte_is_direct(b))
		return b;
	uint32_t n = 0;
	for (int c = 0; c < b; c++)
		if (!byte_is_direct(c))
			n++;
	return 256 + n;
}

/* ---- UTF-8 ------------------------------------------------------------- */

int tokp_utf8_len(uint8_t c)
{
	static const uint8_t lookup[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
	return lookup[c >> 4];
}

/* llama.cpp's permissive decoder: overlong forms and surrogates are taken
 * as they come; a malformed sequence yields U+FFFD and consumes one byte.
 * Values above U+10FFFF (which llama.cpp cannot re-encode) become U+FFFD. */
uint32_t tokp_decode_cp(const uint8_t *s, size_t n, size_t *off)
{
	size_t o = *off;
	uint8_t c = s[o];
	if (!(c & 0x80)) {
		*off = o + 1;
		return c;
	}
	if (!(c & 0x40))
		goto bad;
	if (!(c & 0x20)) {
		if (o + 1 >= n || (s[o + 1] & 0xC0) != 0x80)
			goto bad;
		*off = o + 2;
		return ((uint32_t)(c & 0x1F) << 6) | (s[o + 1] & 0x3F);
	}
	if (!(c & 0x10)) {
		if (o + 2 >= n || (s[o + 1] & 0xC0) != 0x80 || (s[o + 2] & 0xC0) != 0x80)
			goto bad;
		*off = o + 3;
		return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[o + 1] & 0x3F) << 6) | (s[o + 2] & 0x3F);
	}
	if (!(c & 0x08)) {
		if (o + 3 >= n || (s[o + 1] & 0xC0) != 0x80 || (s[o + 2] & 0xC0) != 0x80 ||
		    (s[o + 3] & 0xC0) != 0x80)
			goto bad;
		*off = o + 4;
		uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[o + 1] & 0x3F) << 12) |
			      ((uint32_t)(s[o + 2] & 0x3F) << 6) | (s[o + 3] & 0x3F);
		return cp > 0x10FFFF ? 0xFFFD : cp;
	}
bad:
	*off = o + 1;
	return 0xFFFD;
}

int tokp_encode_cp(uint32_t cp, char *out)
{
	if (cp <= 0x7F) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp <= 0x7FF) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp <= 0xFFFF) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* ---- growable buffers --------------------------------------------------- */

int tokp_reserve(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 16;
	while (c < need) {
		if (c > SIZE_MAX / 2 / elem)
			return -1;
		c *= 2;
	}
	void *q = realloc(*p, c * elem);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

#define HEAP_AT(h, i) ((char *)(h)->v + (i) * (h)->size)

int tokp_heap_push(struct tokp_heap *h, const void *elem)
{
	if (tokp_reserve(&h->v, &h->cap, h->n + 1, h->size))
		return -1;
	size_t i = h->n++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!h->before(elem, HEAP_AT(h, p)))
			break;
		memcpy(HEAP_AT(h, i), HEAP_AT(h, p), h->size);
		i = p;
	}
	memcpy(HEAP_AT(h, i), elem, h->size);
	return 0;
}

void tokp_heap_pop(struct tokp_heap *h, void *out)
{
	char last[64];
	memcpy(out, HEAP_AT(h, 0), h->size);
	memcpy(last, HEAP_AT(h, --h->n), h->size);
	size_t i = 0, n = h->n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && h->before(HEAP_AT(h, c + 1), HEAP_AT(h, c)))
			c++;
		if (!h->before(HEAP_AT(h, c), last))
			break;
		memcpy(HEAP_AT(h, i), HEAP_AT(h, c), h->size);
		i = c;
	}
	if (n)
		memcpy(HEAP_AT(h, i), last, h->size);
}

int tokp_push(struct tokp_ids *v, int32_t id)
{
	if (tokp_reserve((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v))
		return -1;
	v->v[v->n++] = id;
	return 0;
}

/* ---- pieces ------------------------------------------------------------- */

/* The piece of id as llama.cpp's token_to_piece(special = true) makes it. */
static int make_piece(struct tokenizer *t, int32_t id, char **buf, size_t *cap, size_t *len)
{
	const struct tokp_entry *e = &t->tok[id];
	const char *s = t->arena + e->off;
	size_t n = e->len;
	*len = 0;
#define PUT(ptr, cnt)                                                                 \
	do {                                                                          \
		if (tokp_reserve((void **)buf, cap, *len + (cnt), 1))                   \
			return -1;                                                    \
		memcpy(*buf + *len, (ptr), (cnt));                                      \
		*len += (cnt);                                                        \
	} while (0)
	if (e->attr & (TOKA_UNKNOWN | TOKA_CONTROL | TOKA_USER_DEFINED)) {
		PUT(s, n);
		return 0;
	}
	if (e->attr & TOKA_NORMAL) {
		if (t->type == TOKP_SPM) {
			for (size_t i = 0; i < n;) {
				if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
					PUT(" ", 1);
					i += 3;
				} else {
					PUT(s + i, 1);
					i++;
				}
			}
			return 0;
		}
		/* BPE: every code point maps back to one byte */
		size_t off = 0;
		while (off < n) {
			uint32_t cp = tokp_decode_cp((const uint8_t *)s, n, &off);
			if (cp < TOKP_CP_MAP && t->cp_to_byte[cp] >= 0) {
				char b = (char)t->cp_to_byte[cp];
				PUT(&b, 1);
			} else {
				char u[4], hx[12];
				int un = tokp_encode_cp(cp, u);
				PUT("[UNK_BYTE_0x", 12);
				for (int k = 0; k < un; k++) {
					snprintf(hx, sizeof hx, "%02x", (uint8_t)u[k]);
					PUT(hx, 2);
				}
				PUT(s, n);
				PUT("]", 1);
			}
		}
		return 0;
	}
	if (e->attr & TOKA_BYTE) {
		char b = 0;
		if (n >= 5) {
			char hx[3] = { s[3], s[4], 0 };
			b = (char)strtol(hx, NULL, 16);
		}
		PUT(&b, 1);
		return 0;
	}
#undef PUT
	return 0; /* unused / undefined types print nothing */
}

/* ---- loading ------------------------------------------------------------ */

struct pre_def {
	const char *names;   /* '|' separated tokenizer.ggml.pre values */
	int kind;            /* TOKP_PRE_* */
	bool clean_spaces;   /* llama.cpp cleans spaces on decode; pagoda does not
			      * (decode is the exact inverse), noted for reference */
	bool ignore_merges;
	bool add_bos;
};

static const struct pre_def pre_defs[] = {
	{ "default", TOKP_PRE_DEFAULT, true, false, false },
	{ "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", TOKP_PRE_LLAMA3, true, true, true },
	{ "dbrx|smaug-bpe", TOKP_PRE_LLAMA3, true, false, false },
	{ "glm4|chatglm-bpe", TOKP_PRE_LLAMA3, true, false, false },
	{ "deepseek-llm", TOKP_PRE_DEEPSEEK_LLM, false, false, false },
	{ "deepseek-coder", TOKP_PRE_DEEPSEEK_CODER, false, false, false },
	{ "deepseek-v3|hunyuan-dense|joyai-llm", TOKP_PRE_DEEPSEEK3, false, false, false },
	{ "falcon", TOKP_PRE_FALCON, true, false, false },
	{ "mpt|gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|"
	  "jina-v1-en|jina-v2-code|roberta-bpe|olmo|jais|exaone4", TOKP_PRE_GPT2, true, false, false },
	{ "trillion|granite-docling", TOKP_PRE_GPT2, false, false, false },
	{ "starcoder|refact|codeshell|exaone|minerva-7b|mellum2", TOKP_PRE_STARCODER, true, false, false },
	{ "command-r|smollm", TOKP_PRE_STARCODER, false, false, false },
	{ "qwen2|deepseek-r1-qwen|kormo|f2llmv2|hunyuan|solar-open|grok-2", TOKP_PRE_QWEN2, false, false, false },
	{ "stablelm2|megrez", TOKP_PRE_QWEN2, true, false, false },
	{ "poro-chat", TOKP_PRE_BLOOM, false, false, false },
	{ "bloom|gpt3-finnish", TOKP_PRE_BLOOM, true, false, false },
	{ "viking", TOKP_PRE_VIKING, false, false, false },
	{ "tekken", TOKP_PRE_TEKKEN, false, true, true },
	{ "gpt-4o|llama4|kanana2|talkie|minimax-m2", TOKP_PRE_GPT4O, false, false, false },
	{ "seed-coder", TOKP_PRE_SEED_CODER, false, false, false },
	{ "bailingmoe|bailingmoe2|llada-moe", TOKP_PRE_BAILINGMOE, false, false, false },
	{ "exaone-moe", TOKP_PRE_EXAONE_MOE, true, false, false },
	{ "laguna", TOKP_PRE_LAGUNA, false, false, false },
	{ "jais-2", TOKP_PRE_JAIS2, true, false, false },
	{ "minicpm5", TOKP_PRE_MINICPM5, true, true, false },
};

static bool name_in(const char *list, const char *s, size_t n)
{
	const char *p = list;
	while (*p) {
		const char *q = strchr(p, '|');
		size_t l = q ? (size_t)(q - p) : strlen(p);
		if (l == n && memcmp(p, s, n) == 0)
			return true;
		if (!q)
			break;
		p = q + 1;
	}
	return false;
}

static int32_t find_cstr(const struct tokenizer *t, const char *s)
{
	return tokp_find(t, s, strlen(s));
}

/* First (lowest id) token whose text is one of names, forcing it to
 * CONTROL as llama.cpp does; -1 if none. */
static int32_t detect_by_text(struct tokenizer *t, const char *const *names)
{
	int32_t best = -1;
	for (; *names; names++) {
		int32_t id = find_cstr(t, *names);
		if (id >= 0 && (best < 0 || id < best))
			best = id;
	}
	if (best >= 0)
		t->tok[best].attr |= TOKA_CONTROL;
	return best;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
	const struct tokenizer *t = ctx;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	uint32_t lx = t->tok[x].len, ly = t->tok[y].len;
	if (lx != ly)
		return lx > ly ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int load_merges(struct tokenizer *t, const struct gguf_file *f, char *err, size_t errlen)
{
	const struct gguf_kv *kv = gguf_find(f, "tokenizer.ggml.merges");
	if (!kv) {
		seterr(err, errlen, "tokenizer: BPE vocabulary without tokenizer.ggml.merges");
		return -1;
	}
	const struct gguf_array *a = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING);
	if (!a) {
		seterr(err, errlen, "tokenizer: tokenizer.ggml.merges is not an array of strings");
		return -1;
	}
	if (a->n > INT32_MAX) {
		seterr(err, errlen, "tokenizer: %llu merges is too many", (unsigned long long)a->n);
		return -1;
	}
	size_t total = 0;
	for (uint64_t i = 0; i < a->n; i++)
		total += a->strs[i].len;
	t->n_merges = (uint32_t)a->n;
	t->merges = calloc(a->n ? a->n : 1, sizeof *t->merges);
	t->marena = malloc(total ? total : 1);
	t->mmask = pow2_at_least((uint64_t)a->n * 2 + 1) - 1;
	t->mtab = calloc((size_t)t->mmask + 1, sizeof *t->mtab);
	if (!t->merges || !t->marena || !t->mtab) {
		seterr(err, errlen, "tokenizer: out of memory for %u merges", t->n_merges);
		return -1;
	}
	size_t off = 0;
	for (uint32_t i = 0; i < t->n_merges; i++) {
		const char *s = a->strs[i].ptr;
		size_t n = a->strs[i].len;
		memcpy(t->marena + off, s, n);
		struct tokp_merge *m = &t->merges[i];
		/* llama.cpp: split at the first space at position >= 1; no such
		 * space gives the pair ("", "") */
		const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
		if (sp) {
			size_t p = (size_t)(sp - s);
			m->aoff = (uint32_t)off;
			m->alen = (uint32_t)p;
			m->boff = (uint32_t)(off + p + 1);
			m->blen = (uint32_t)(n - p - 1);
		} else {
			m->aoff = m->boff = (uint32_t)off;
			m->alen = m->blen = 0;
		}
		off += n;
		if ((size_t)m->alen + m->blen > t->max_merge_len)
			t->max_merge_len = (size_t)m->alen + m->blen;
		/* first occurrence of a pair keeps its rank (std::map::emplace) */
		const char *ap = t->marena + m->aoff, *bp = t->marena + m->boff;
		if (tokp_merge_rank(t, ap, m->alen, bp, m->blen) >= 0)
			continue;
		uint64_t h = pair_hash(ap, m->alen, bp, m->blen);
		uint32_t j = (uint32_t)h & t->mmask;
		while (t->mtab[j])
			j = (j + 1) & t->mmask;
		t->mtab[j] = i + 1;
	}
	return 0;
}

/* tokenizer.ggml.model and, for BPE, tokenizer.ggml.pre: the type and the
 * defaults llama.cpp gives it. *pre is the pre-tokenizer name ({0} for SPM). */
static int load_model(struct tokenizer *t, const struct gguf_file *f, struct gguf_str *pre, char *err,
		      size_t errlen)
{
	struct gguf_str model = { 0 };
	if (!gguf_get_str(f, "tokenizer.ggml.model", &model)) {
		seterr(err, errlen, "tokenizer: tokenizer.ggml.model missing or not a string");
		return -1;
	}
	if (gguf_str_eq(model, "llama")) {
		t->type = TOKP_SPM;
		t->bos = 1;
		t->eos = 2;
		t->unk = 0;
		t->add_space_prefix = true;
		t->add_bos = true;
		snprintf(t->model_name, sizeof t->model_name, "llama");
	} else if (gguf_str_eq(model, "gpt2")) {
		const struct pre_def *pd = NULL;
		t->type = TOKP_BPE;
		t->bos = 11;
		t->eos = 11;
		t->unk = -1;
		snprintf(t->model_name, sizeof t->model_name, "gpt2");
		if (!gguf_get_str(f, "tokenizer.ggml.pre", pre) || pre->len == 0) {
			pd = &pre_defs[0];
		} else {
			for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
				if (name_in(pre_defs[i].names, pre->ptr, pre->len)) {
					pd = &pre_defs[i];
					break;
				}
			if (!pd) {
				seterr(err, errlen, "tokenizer: unknown pre-tokenizer type '%.*s'",
				       (int)(pre->len > 64 ? 64 : pre->len), pre->ptr);
				return -1;
			}
		}
		snprintf(t->pre_name, sizeof t->pre_name, "%.*s", (int)(pre->len > 60 ? 60 : pre->len),
			 pre->len ? pre->ptr : "default");
		t->pre = pd->kind;
		t->ignore_merges = pd->ignore_merges;
		t->add_bos = pd->add_bos;
		if (name_in("glm4|chatglm-bpe", pre->ptr, pre->len))
			t->bos = -1;
	} else {
		seterr(err, errlen, "tokenizer: unsupported tokenizer model '%.*s'",
		       (int)(model.len > 64 ? 64 : model.len), model.ptr);
		return -1;
	}
	t->eot = t->eom = t->pad = t->sep = -1;
	t->fim_pad = t->fim_rep = t->fim_sep = -1;
	bool bv;
	if (gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &bv))
		t->add_space_prefix = bv;
	return 0;
}

static uint32_t token_attr(int64_t type)
{
	switch (type) {
	case 1: return TOKA_NORMAL;
	case 2: return TOKA_UNKNOWN;
	case 3: return TOKA_CONTROL;
	case 4: return TOKA_USER_DEFINED;
	case 5: return TOKA_UNUSED;
	case 6: return TOKA_BYTE;
	default: return 0;
	}
}

/* tokenizer.ggml.tokens, scores and token_type: the text arena, the entries
 * and the text -> id table. */
static int load_tokens(struct tokenizer *t, const struct gguf_file *f, char *err, size_t errlen)
{
	const struct gguf_array *toks = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
	if (!toks) {
		seterr(err, errlen, "tokenizer: tokenizer.ggml.tokens missing or not an array of strings");
		return -1;
	}
	if (toks->n == 0 || toks->n > INT32_MAX / 2) {
		seterr(err, errlen, "tokenizer: bad vocabulary size %llu", (unsigned long long)toks->n);
		return -1;
	}
	uint32_t n = (uint32_t)toks->n;
	t->n_vocab = (int)n;
	const struct gguf_array *scores = NULL, *types = NULL;
	if (gguf_find(f, "tokenizer.ggml.scores")) {
		scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32);
		if (!scores)
			scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_INT32);
		if (!scores) {
			seterr(err, errlen, "tokenizer: tokenizer.ggml.scores has the wrong type");
			return -1;
		}
		if (scores->n < n) {
			seterr(err, errlen, "tokenizer: %llu scores for %u tokens", (unsigned long long)scores->n, n);
			return -1;
		}
	}
	if (gguf_find(f, "tokenizer.ggml.token_type")) {
		types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
		if (!types) {
			seterr(err, errlen, "tokenizer: tokenizer.ggml.token_type is not an array of int32");
			return -1;
		}
		if (types->n < n) {
			seterr(err, errlen, "tokenizer: %llu token types for %u tokens", (unsigned long long)types->n, n);
			return -1;
		}
	}
	size_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += toks->strs[i].len ? toks->strs[i].len : 24;
	t->tok = calloc(n, sizeof *t->tok);
	t->arena = malloc(total + 1);
	t->tmask = pow2_at_least((uint64_t)n * 2 + 1) - 1;
	t->ttab = calloc((size_t)t->tmask + 1, sizeof *t->ttab);
	t->eog = calloc(n, 1);
	if (!t->tok || !t->arena || !t->ttab || !t->eog) {
		seterr(err, errlen, "tokenizer: out of memory for %u tokens", n);
		return -1;
	}
	size_t off = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct tokp_entry *e = &t->tok[i];
		e->off = (uint32_t)off;
		if (toks->strs[i].len) {
			memcpy(t->arena + off, toks->strs[i].ptr, toks->strs[i].len);
			e->len = (uint32_t)toks->strs[i].len;
		} else {
			e->len = (uint32_t)snprintf(t->arena + off, 24, "[EMPTY_%u]", i);
		}
		off += e->len;
		if (e->len > t->max_token_len)
			t->max_token_len = e->len;
		e->score = scores ? (float)gguf_arr_f64(scores, i) : 0.0f;
		e->attr = types ? token_attr(gguf_arr_i64(types, i)) : TOKA_NORMAL;
		/* text -> id; a repeated text maps to its last id */
		uint64_t h = hash_bytes(t->arena + e->off, e->len);
		uint32_t j = (uint32_t)h & t->tmask;
		for (;; j = (j + 1) & t->tmask) {
			uint32_t v = t->ttab[j];
			if (!v)
				break;
			const struct tokp_entry *o = &t->tok[v - 1];
			if (o->len == e->len && memcmp(t->arena + o->off, t->arena + e->off, e->len) == 0)
				break;
		}
		t->ttab[j] = i + 1;
	}
	return 0;
}

/* The token of each byte (SPM: <0xNN>, else the byte itself; BPE: the GPT-2
 * map's code point) and the GPT-2 map both ways. */
static void init_byte_maps(struct tokenizer *t)
{
	for (int b = 0; b < 256; b++) {
		char buf[8];
		if (t->type == TOKP_SPM) {
			snprintf(buf, sizeof buf, "<0x%02X>", b);
			int32_t id = find_cstr(t, buf);
			if (id < 0) {
				char c = (char)b;
				id = tokp_find(t, &c, 1);
			}
			t->byte_tok[b] = id;
		} else {
			int k = tokp_encode_cp(tokp_byte_to_cp((uint8_t)b), buf);
			t->byte_tok[b] = tokp_find(t, buf, (size_t)k);
		}
	}
	for (int i = 0; i < TOKP_CP_MAP; i++)
		t->cp_to_byte[i] = -1;
	for (int b = 0; b < 256; b++) {
		uint32_t cp = tokp_byte_to_cp((uint8_t)b);
		char u[4];
		t->cp_to_byte[cp] = (int16_t)b;
		t->byte_enc_len[b] = (uint8_t)tokp_encode_cp(cp, u);
		memcpy(t->byte_enc[b], u, t->byte_enc_len[b]);
	}
}

/* Special ids and add_bos / add_eos from the tokenizer.ggml.* keys; an id
 * out of range is none. */
static void load_special_ids(struct tokenizer *t, const struct gguf_file *f)
{
	struct {
		const char *key;
		int32_t *id;
	} sk[] = {
		{ "tokenizer.ggml.bos_token_id", &t->bos },
		{ "tokenizer.ggml.eos_token_id", &t->eos },
		{ "tokenizer.ggml.eot_token_id", &t->eot },
		{ "tokenizer.ggml.eom_token_id", &t->eom },
		{ "tokenizer.ggml.unknown_token_id", &t->unk },
		{ "tokenizer.ggml.seperator_token_id", &t->sep },
		{ "tokenizer.ggml.padding_token_id", &t->pad },
		{ "tokenizer.ggml.fim_pad_token_id", &t->fim_pad },
		{ "tokenizer.ggml.fim_rep_token_id", &t->fim_rep },
		{ "tokenizer.ggml.fim_sep_token_id", &t->fim_sep },
	};
	for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++) {
		if (*sk[i].id >= t->n_vocab)
			*sk[i].id = -1;
		uint32_t v;
		if (gguf_get_u32(f, sk[i].key, &v) && v < (uint32_t)t->n_vocab)
			*sk[i].id = (int32_t)v;
	}
	bool bv;
	if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &bv))
		t->add_bos = bv;
	if (gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &bv))
		t->add_eos = bv;
}

/* EOT, EOM and the FIM tokens the keys did not name, found by their text as
 * llama.cpp does (and marked CONTROL); control tokens named "unused" are
 * UNUSED. */
static void detect_special_by_text(struct tokenizer *t)
{
	static const char *const eot_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
		"<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
		"<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<end_of_utterance>", NULL };
	static const char *const eom_names[] = { "<|eom_id|>", NULL };
	static const char *const fim_pad_names[] = { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL };
	static const char *const fim_rep_names[] = { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
		"<reponame>", NULL };
	static const char *const fim_sep_names[] = { "<|file_sep|>", NULL };
	static const char *const fim_other[] = { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
		"<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>", "\xE2\x96\x81<PRE>",
		"<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
		"<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>",
		"<|code_suffix|>", "<|suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
		"<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>",
		"<|code_middle|>", "<|middle|>", NULL };
	if (t->eot < 0)
		t->eot = detect_by_text(t, eot_names);
	if (t->eom < 0)
		t->eom = detect_by_text(t, eom_names);
	if (t->fim_pad < 0)
		t->fim_pad = detect_by_text(t, fim_pad_names);
	if (t->fim_rep < 0)
		t->fim_rep = detect_by_text(t, fim_rep_names);
	if (t->fim_sep < 0)
		t->fim_sep = detect_by_text(t, fim_sep_names);
	/* FIM prefix/suffix/middle: only their CONTROL marking matters here
	 * (llama.cpp picks one per kind; we mark the lowest id of each). */
	static const int groups[4] = { 0, 8, 16, 24 };
	for (int g = 0; g < 3; g++) {
		int32_t best = -1;
		for (int k = groups[g]; k < groups[g + 1]; k++) {
			int32_t id = find_cstr(t, fim_other[k]);
			if (id >= 0 && (best < 0 || id < best))
				best = id;
		}
		if (best >= 0)
			t->tok[best].attr |= TOKA_CONTROL;
	}
	for (int i = 0; i < t->n_vocab; i++) {
		struct tokp_entry *e = &t->tok[i];
		if ((e->attr & TOKA_CONTROL) && !(e->attr & TOKA_UNUSED) &&
		    memmem(t->arena + e->off, e->len, "unused", 6))
			e->attr |= TOKA_UNUSED;
	}
}

/* The end-of-generation set, as llama.cpp builds it: the special ids, the
 * tokens known by text, and its two exceptions (gpt-oss's <|end|>, and
 * </s> beside <|tool_response>). */
static void mark_eog(struct tokenizer *t)
{
	static const char *const eog_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
		"<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
		"_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
		"<|tool_response>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[", NULL };
	static const char *const render[] = { "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL };
	if (t->fim_pad >= 0)
		t->eog[t->fim_pad] = 1;
	if (t->fim_rep >= 0)
		t->eog[t->fim_rep] = 1;
	if (t->fim_sep >= 0)
		t->eog[t->fim_sep] = 1;
	for (const char *const *p = eog_names; *p; p++) {
		int32_t id = find_cstr(t, *p);
		if (id >= 0) {
			t->eog[id] = 1;
			t->tok[id].attr |= TOKA_CONTROL;
		}
	}
	for (const char *const *p = render; *p; p++) {
		int32_t id = find_cstr(t, *p);
		if (id >= 0)
			t->tok[id].attr = TOKA_USER_DEFINED;
	}
	if (t->eos >= 0)
		t->eog[t->eos] = 1;
	if (t->eot >= 0)
		t->eog[t->eot] = 1;
	if (t->eom >= 0)
		t->eog[t->eom] = 1;
	int32_t ret = find_cstr(t, "<|return|>"), call = find_cstr(t, "<|call|>"),
		calls = find_cstr(t, "<|calls|>"), flush = find_cstr(t, "<|flush|>"),
		end = find_cstr(t, "<|end|>");
	bool has_ret = ret >= 0 && t->eog[ret];
	bool has_call = (call >= 0 && t->eog[call]) || (calls >= 0 && t->eog[calls]);
	bool has_flush = flush >= 0 && t->eog[flush];
	bool has_end = end >= 0 && t->eog[end];
	if ((has_ret && has_call && has_end) || (has_call && has_flush && has_end)) {
		t->eog[end] = 0;
		t->tok[end].attr = TOKA_USER_DEFINED;
	}
	int32_t tr = find_cstr(t, "<|tool_response>"), s = find_cstr(t, "</s>");
	if (tr >= 0 && t->eog[tr] && s >= 0 && t->eog[s]) {
		t->eog[s] = 0;
		t->tok[s].attr = TOKA_NORMAL;
	}
}

/* The special (control, user-defined, unknown) tokens, longest first, ties
 * by id: the order the partition tries them in. */
static int collect_special(struct tokenizer *t, char *err, size_t errlen)
{
	const uint32_t special = TOKA_CONTROL | TOKA_USER_DEFINED | TOKA_UNKNOWN;
	for (int i = 0; i < t->n_vocab; i++)
		if (t->tok[i].attr & special)
			t->n_special++;
	t->special = malloc((size_t)(t->n_special ? t->n_special : 1) * sizeof *t->special);
	if (!t->special) {
		seterr(err, errlen, "tokenizer: out of memory");
		return -1;
	}
	t->n_special = 0;
	for (int i = 0; i < t->n_vocab; i++)
		if (t->tok[i].attr & special)
			t->special[t->n_special++] = i;
	qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);
	return 0;
}

/* Every token's piece (special = true) into parena, and the longest. */
static int build_pieces(struct tokenizer *t, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t cap = 0, len = 0, ptotal = 0, pcap = 0;
	for (int i = 0; i < t->n_vocab; i++) {
		if (make_piece(t, i, &buf, &cap, &len) ||
		    tokp_reserve((void **)&t->parena, &pcap, ptotal + len + 1, 1)) {
			free(buf);
			seterr(err, errlen, "tokenizer: out of memory");
			return -1;
		}
		memcpy(t->parena + ptotal, buf, len);
		t->tok[i].poff = (uint32_t)ptotal;
		t->tok[i].plen = (uint32_t)len;
		ptotal += len;
		if ((int)len > t->max_piece)
			t->max_piece = (int)len;
	}
	free(buf);
	return 0;
}

/* Per-token lstrip / rstrip, chosen by model name as llama.cpp does. */
static void apply_strip_rules(struct tokenizer *t, const struct gguf_file *f, struct gguf_str pre)
{
	struct gguf_str name = { 0 };
	char lname[256] = "";
	if (gguf_get_str(f, "general.name", &name)) {
		size_t l = name.len < sizeof lname - 1 ? name.len : sizeof lname - 1;
		for (size_t i = 0; i < l; i++)
			lname[i] = (char)tolower((unsigned char)name.ptr[i]);
		lname[l] = 0;
	}
	struct gguf_str arch = { 0 };
	bool jina = pre.len && (memmem(pre.ptr, pre.len, "jina-v2-de", 10) ||
				memmem(pre.ptr, pre.len, "jina-v2-es", 10) ||
				memmem(pre.ptr, pre.len, "jina-v2-code", 12));
	if (gguf_get_str(f, "general.architecture", &arch) &&
	    (memmem(arch.ptr, arch.len, "nomic-bert-moe", 14) || memmem(arch.ptr, arch.len, "jina-bert-v3", 12)))
		jina = true;
	if (jina) {
		int32_t id = find_cstr(t, "<mask>");
		if (id >= 0)
			t->tok[id].attr |= TOKA_LSTRIP;
	} else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
		for (int i = 0; i < t->n_special; i++)
			t->tok[t->special[i]].attr |= TOKA_RSTRIP;
		int32_t id = find_cstr(t, "</s>");
		if (id >= 0)
			t->tok[id].attr |= TOKA_RSTRIP;
		static const char *const no[] = { "<unk>", "<s>", "<|endoftext|>", NULL };
		for (const char *const *p = no; *p; p++)
			if ((id = find_cstr(t, *p)) >= 0)
				t->tok[id].attr &= ~(uint32_t)TOKA_RSTRIP;
	} else if (strstr(lname, "modern-bert")) {
		int32_t id = find_cstr(t, "[MASK]");
		if (id >= 0)
			t->tok[id].attr |= TOKA_LSTRIP;
	}
}

int tok_load(const struct gguf_file *f, struct tokenizer **out, char *err, size_t errlen)
{
	*out = NULL;
	struct tokenizer *t = calloc(1, sizeof *t);
	if (!t) {
		seterr(err, errlen, "tokenizer: out of memory");
		return -1;
	}
	struct gguf_str pre = { 0 };
	if (load_model(t, f, &pre, err, errlen) || load_tokens(t, f, err, errlen))
		goto fail;
	if (t->type == TOKP_BPE && load_merges(t, f, err, errlen))
		goto fail;
	init_byte_maps(t);
	load_special_ids(t, f);
	detect_special_by_text(t);
	mark_eog(t);
	if (collect_special(t, err, errlen) || build_pieces(t, err, errlen))
		goto fail;
	apply_strip_rules(t, f, pre);
	if (t->type == TOKP_BPE && tokp_pre_init(t, err, errlen))
		goto fail;
	*out = t;
	return 0;
fail:
	tok_free(t);
	return -1;
}

void tok_free(struct tokenizer *t)
{
	if (!t)
		return;
	tokp_pre_free(t);
	free(t->tok);
	free(t->arena);
	free(t->parena);
	free(t->ttab);
	free(t->merges);
	free(t->marena);
	free(t->mtab);
	free(t->special);
	free(t->eog);
	free(t);
}

int tok_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const struct tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct tokenizer *t) { return t->eos; }
bool tok_add_bos(const struct tokenizer *t) { return t->add_bos; }
const char *tok_model_name(const struct tokenizer *t) { return t->model_name; }
const char *tok_pre_name(const struct tokenizer *t) { return t->pre_name; }
int tok_max_piece(const struct tokenizer *t) { return t->max_piece; }

size_t tok_min_tokens(const struct tokenizer *t, const char *text, size_t len)
{
	size_t n = len;
	for (int i = 0; i < t->n_special; i++)
		if (t->tok[t->special[i]].attr & (TOKA_LSTRIP | TOKA_RSTRIP)) {
			n = 0;
			for (size_t k = 0; k < len; k++)
				n += !isspace((unsigned char)text[k]);
			break;
		}
	size_t mp = t->max_piece > 0 ? (size_t)t->max_piece : 1;
	return (n + mp - 1) / mp;
}

bool tok_is_eog(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && t->eog[id];
}

/* ---- pieces, decoding, streaming ---------------------------------------- */

static bool piece_of(const struct tokenizer *t, int32_t id, bool special, const char **p, int *n)
{
	if (id < 0 || id >= t->n_vocab)
		return false;
	const struct tokp_entry *e = &t->tok[id];
	if (!special && (e->attr & (TOKA_UNKNOWN | TOKA_CONTROL))) {
		*p = "";
		*n = 0;
		return true;
	}
	*p = t->parena + e->poff;
	*n = (int)e->plen;
	return true;
}

int tok_piece(const struct tokenizer *t, int32_t id, bool special, char *buf, int cap)
{
	const char *p;
	int n;
	if (!piece_of(t, id, special, &p, &n))
		return -1;
	int c = n < cap ? n : (cap > 0 ? cap : 0);
	if (c > 0)
		memcpy(buf, p, (size_t)c);
	return n;
}

int tok_decode(const struct tokenizer *t, const int32_t *ids, int n, char *buf, int cap)
{
	if (n < 0 || (n > 0 && !ids) || cap < 0 || (cap > 0 && !buf))
		return TOK_ERR;
	long long total = 0;
	bool remove_space = t->add_space_prefix;
	for (int i = 0; i < n; i++) {
		const char *p;
		int pn;
		if (!piece_of(t, ids[i], false, &p, &pn))
			return TOK_ERR;
		if (remove_space && pn > 0 && p[0] == ' ') {
			p++;
			pn--;
		}
		remove_space = false;
		if (pn > 0 && total + pn <= cap)
			memcpy(buf + total, p, (size_t)pn);
		total += pn;
		if (total > INT_MAX)
			return TOK_ERR;
	}
	if (total > cap)
		return -(int)total;
	int len = (int)total;
	return len;
}

void tok_stream_init(struct tok_stream *s)
{
	memset(s, 0, sizeof *s);
}

/* Length of a valid but incomplete UTF-8 sequence at the end of b[0..n),
 * or 0 when b ends on a character boundary or in an invalid sequence. */
static int trailing_partial(const uint8_t *b, int n)
{
	for (int back = 1; back <= 3 && back <= n; back++) {
		int p = n - back;
		uint8_t c = b[p];
		if ((c & 0xC0) == 0x80)
			continue; /* continuation: look further back */
		int need;
		if (c >= 0xC2 && c <= 0xDF)
			need = 2;
		else if (c >= 0xE0 && c <= 0xEF)
			need = 3;
		else if (c >= 0xF0 && c <= 0xF4)
			need = 4;
		else
			return 0;
		if (back >= need)
			return 0; /* complete (or over-long run: invalid anyway) */
		if (back >= 2) {
			uint8_t c1 = b[p + 1];
			if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
			    (c == 0xF4 && c1 > 0x8F))
				return 0;
		}
		return back;
	}
	return 0;
}

int tok_stream_push(const struct tokenizer *t, struct tok_stream *s, int32_t id, char *out, int cap)
{
	const char *p;
	int pn;
	if (!piece_of(t, id, false, &p, &pn))
		return TOK_ERR;
	int np = s->npending;
	int total = np + pn;
	/* look at the last (up to) 3 bytes of pending + piece */
	uint8_t tail[4];
	int tn = total < 3 ? total : 3;
	for (int i = 0; i < tn; i++) {
		int idx = total - tn + i;
		tail[i] = (uint8_t)(idx < np ? s->pending[idx] : p[idx - np]);
	}
	int hold = trailing_partial(tail, tn);
	int emit = total - hold;
	if (emit > cap)
		return -emit;
	int w = 0;
	int from_pending = np < emit ? np : emit;
	memcpy(out, s->pending, (size_t)from_pending);
	w = from_pending;
	if (emit > np) {
		memcpy(out + w, p, (size_t)(emit - np));
		w = emit;
	}
	/* the held bytes become the new pending */
	char keep[8];
	for (int i = 0; i < hold; i++) {
		int idx = emit + i;
		keep[i] = idx < np ? s->pending[idx] : p[idx - np];
	}
	memcpy(s->pending, keep, (size_t)hold);
	s->npending = hold;
	return w;
}

int tok_stream_flush(struct tok_stream *s, char *out, int cap)
{
	if (s->npending > cap)
		return -s->npending;
	memcpy(out, s->pending, (size_t)s->npending);
	int n = s->npending;
	s->npending = 0;
	return n;
}
