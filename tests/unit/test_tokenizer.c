/* tests/unit/test_tokenizer.c — tokenizer conformance with llama.cpp. */
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	ck_assert_msg(fp != NULL, "cannot open %s", path);
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	ck_assert(buf != NULL);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
	buf[n] = 0;
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

struct loaded {
	struct gguf_file *f;
	struct tokenizer *t;
};

/* Returns false (test should return) when the test data is absent. */
static bool load_rel(const char *rel, struct loaded *l)
{
	char path[4096], err[256] = "";
	if (testdata_path(path, sizeof path, rel) != 0)
		return false;
	ck_assert_msg(gguf_open(path, &l->f, err, sizeof err) == 0, "gguf_open %s: %s", path, err);
	ck_assert_msg(tok_load(l->f, &l->t, err, sizeof err) == 0, "tok_load %s: %s", path, err);
	/* the tokenizer copies what it needs: the file may go */
	gguf_close(l->f);
	l->f = NULL;
	return true;
}

static int encode(const struct tokenizer *t, const char *s, size_t n, bool bos, bool special, int32_t **ids)
{
	int need = tok_encode(t, s, n, bos, special, NULL, 0);
	if (need == 0) {
		*ids = NULL;
		return 0;
	}
	ck_assert_int_lt(need, 0);
	ck_assert_int_ne(need, TOK_ERR);
	*ids = malloc((size_t)-need * sizeof **ids);
	int got = tok_encode(t, s, n, bos, special, *ids, -need);
	ck_assert_int_eq(got, -need);
	return got;
}

static char *decode(const struct tokenizer *t, const int32_t *ids, int n, int *len)
{
	int need = tok_decode(t, ids, n, NULL, 0);
	ck_assert_int_ne(need, TOK_ERR);
	int cap = need < 0 ? -need : need;
	char *buf = malloc((size_t)cap + 1);
	int got = tok_decode(t, ids, n, buf, cap);
	ck_assert_int_eq(got >= 0, 1);
	ck_assert_int_le(got, cap);
	buf[got] = 0;
	*len = got;
	return buf;
}

static void check_vocab(const char *name)
{
	char rel[256], path[4096];
	struct loaded l;
	snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
	if (!load_rel(rel, &l))
		return;
	snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
	ck_assert_int_eq(testdata_path(path, sizeof path, rel), 0);
	size_t inl, outl;
	char *inp = read_all(path, &inl);
	snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
	ck_assert_int_eq(testdata_path(path, sizeof path, rel), 0);
	char *outp = read_all(path, &outl);

	const char *sep = "\n__ggml_vocab_test__\n";
	size_t sepl = strlen(sep), pos = 0;
	char *line = outp;
	int cases = 0;
	while (pos < inl) {
		char *next = strstr(inp + pos, sep);
		size_t slen = next ? (size_t)(next - (inp + pos)) : inl - pos;
		const char *s = inp + pos;
		/* expected ids */
		ck_assert_msg(line && *line, "%s: .out has fewer lines than .inp", name);
		char *eol = strchr(line, '\n');
		if (eol)
			*eol = 0;
		int32_t want[4096];
		int nw = 0;
		for (char *p = line; *p;) {
			char *endp;
			long v = strtol(p, &endp, 10);
			if (endp == p)
				break;
			ck_assert_int_lt(nw, 4096);
			want[nw++] = (int32_t)v;
			p = endp;
		}
		line = eol ? eol + 1 : NULL;

		int32_t *ids;
		int n = encode(l.t, s, slen, false, false, &ids);
		bool same = n == nw && (n == 0 || memcmp(ids, want, (size_t)n * sizeof *ids) == 0);
		if (!same) {
			char got[8192] = "";
			size_t k = 0;
			for (int i = 0; i < n && k < sizeof got - 16; i++)
				k += (size_t)snprintf(got + k, sizeof got - k, " %d", ids[i]);
			char ws[8192] = "";
			k = 0;
			for (int i = 0; i < nw && k < sizeof ws - 16; i++)
				k += (size_t)snprintf(ws + k, sizeof ws - k, " %d", want[i]);
			ck_abort_msg("%s case %d '%.*s': got [%s ] want [%s ]", name, cases, (int)slen, s, got, ws);
		}
		/* detokenization gives the string back, byte for byte */
		int dl;
		char *d = decode(l.t, ids, n, &dl);
		char *exp = malloc(slen + 1);
		memcpy(exp, s, slen);
		size_t el = slen;
		ck_assert_msg((size_t)dl == el && memcmp(d, exp, el) == 0, "%s case %d: decode '%s' != '%.*s'", name,
			      cases, d, (int)el, exp);
		free(exp);
		free(d);
		free(ids);
		cases++;
		if (!next)
			break;
		pos = (size_t)(next - inp) + sepl;
	}
	ck_assert_int_gt(cases, 10);
	ck_assert_msg(!line || !*line, "%s: .out has more lines than .inp", name);
	free(inp);
	free(outp);
	tok_free(l.t);
}

START_TEST(vocab_llama_spm) { check_vocab("llama-spm"); }
END_TEST
START_TEST(vocab_llama_bpe) { check_vocab("llama-bpe"); }
END_TEST
START_TEST(vocab_gpt2) { check_vocab("gpt-2"); }
END_TEST
START_TEST(vocab_qwen2) { check_vocab("qwen2"); }
END_TEST

START_TEST(vocab_properties)
{
	struct loaded l;
	if (!load_rel("vocab/ggml-vocab-llama-spm.gguf", &l))
		return;
	ck_assert_int_eq(tok_n_vocab(l.t), 32000);
	ck_assert_int_eq(tok_bos(l.t), 1);
	ck_assert_int_eq(tok_eos(l.t), 2);
	ck_assert(tok_add_bos(l.t));
	ck_assert(tok_is_eog(l.t, 2));
	ck_assert(!tok_is_eog(l.t, 1));
	ck_assert(!tok_is_eog(l.t, 100));
	ck_assert(!tok_is_eog(l.t, -1));
	ck_assert(!tok_is_eog(l.t, 32000));
	char buf[64];
	/* control token: "" unless special */
	ck_assert_int_eq(tok_piece(l.t, 1, false, buf, sizeof buf), 0);
	ck_assert_int_eq(tok_piece(l.t, 1, true, buf, sizeof buf), 3);
	ck_assert(memcmp(buf, "<s>", 3) == 0);
	/* byte token <0x0A> is "\n"; U+2581 becomes a space */
	ck_assert_int_eq(tok_piece(l.t, 13, false, buf, sizeof buf), 1);
	ck_assert_int_eq(buf[0], '\n');
	int32_t *ids;
	int n = encode(l.t, "Hello", 5, true, false, &ids);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(ids[0], 1);
	int pl = tok_piece(l.t, ids[1], false, buf, sizeof buf);
	ck_assert_int_eq(pl, 6);
	ck_assert(memcmp(buf, " Hello", 6) == 0);
	/* truncated copy, full length returned */
	memset(buf, 0, sizeof buf);
	ck_assert_int_eq(tok_piece(l.t, ids[1], false, buf, 3), 6);
	ck_assert(memcmp(buf, " He\0", 4) == 0);
	ck_assert_int_lt(tok_piece(l.t, -1, false, buf, sizeof buf), 0);
	ck_assert_int_lt(tok_piece(l.t, 32000, false, buf, sizeof buf), 0);
	/* too small: -(needed) */
	int32_t one;
	ck_assert_int_eq(tok_encode(l.t, "Hello world", 11, true, false, &one, 1), -3);
	ck_assert_int_eq(tok_decode(l.t, ids, n, buf, 2), -6);
	int32_t bad = 99999;
	ck_assert_int_eq(tok_decode(l.t, &bad, 1, buf, sizeof buf), TOK_ERR);
	free(ids);
	tok_free(l.t);

	if (!load_rel("vocab/ggml-vocab-llama-bpe.gguf", &l))
		return;
	ck_assert_int_eq(tok_bos(l.t), 128000);
	ck_assert(tok_add_bos(l.t));
	int32_t eot = 128009; /* <|eot_id|> */
	ck_assert(tok_is_eog(l.t, eot));
	ck_assert(tok_is_eog(l.t, tok_eos(l.t)));
	ck_assert(!tok_is_eog(l.t, 128000));
	ck_assert_str_eq(tok_model_name(l.t), "gpt2");
	ck_assert_str_eq(tok_pre_name(l.t), "llama-bpe");
	n = encode(l.t, "Hello", 5, true, false, &ids);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(ids[0], 128000);
	ck_assert_int_eq(ids[1], 9906);
	free(ids);
	tok_free(l.t);
}
END_TEST

START_TEST(special_parsing)
{
	struct loaded l;
	if (!load_rel("vocab/ggml-vocab-llama-bpe.gguf", &l))
		return;
	const char *s = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
	int32_t *ids;
	int n = encode(l.t, s, strlen(s), false, true, &ids);
	/* 128006 user 128007 "\n\n" Hi 128009 */
	ck_assert_int_eq(n, 6);
	ck_assert_int_eq(ids[0], 128006);
	ck_assert_int_eq(ids[2], 128007);
	ck_assert_int_eq(ids[5], 128009);
	int dl;
	char *d = decode(l.t, ids, n, &dl);
	ck_assert_str_eq(d, "user\n\nHi"); /* control tokens print nothing */
	free(d);
	free(ids);
	n = encode(l.t, s, strlen(s), false, false, &ids);
	ck_assert_int_gt(n, 6);
	for (int i = 0; i < n; i++)
		ck_assert_int_lt(ids[i], 128000);
	d = decode(l.t, ids, n, &dl);
	ck_assert_str_eq(d, s); /* plain text round trip */
	free(d);
	free(ids);
	tok_free(l.t);

	if (!load_rel("vocab/ggml-vocab-llama-spm.gguf", &l))
		return;
	/* SPM: a space prefix follows a special token */
	n = encode(l.t, "<s>Hi</s>", 9, false, true, &ids);
	int32_t hi[8];
	int nh = tok_encode(l.t, "Hi", 2, false, false, hi, 8);
	ck_assert_int_eq(n, nh + 2);
	ck_assert_int_eq(ids[0], 1);
	ck_assert_int_eq(ids[n - 1], 2);
	ck_assert(memcmp(ids + 1, hi, (size_t)nh * sizeof *hi) == 0);
	free(ids);
	n = encode(l.t, "<s>Hi</s>", 9, false, false, &ids);
	for (int i = 0; i < n; i++)
		ck_assert(ids[i] != 1 && ids[i] != 2);
	free(ids);
	tok_free(l.t);
}
END_TEST

/* push ids through the stream, checking every chunk ends on a character
 * boundary; returns the concatenation */
static char *stream_all(const struct tokenizer *t, const int32_t *ids, int n, size_t *len)
{
	struct tok_stream st;
	tok_stream_init(&st);
	size_t cap = (size_t)n * (size_t)(tok_max_piece(t) + 8) + 16, k = 0;
	char *all = malloc(cap);
	char chunk[512];
	for (int i = 0; i < n; i++) {
		int w = tok_stream_push(t, &st, ids[i], chunk, sizeof chunk);
		ck_assert_int_ge(w, 0);
		memcpy(all + k, chunk, (size_t)w);
		k += (size_t)w;
		ck_assert_int_le(st.npending, 3);
	}
	int w = tok_stream_flush(&st, chunk, sizeof chunk);
	ck_assert_int_ge(w, 0);
	memcpy(all + k, chunk, (size_t)w);
	k += (size_t)w;
	*len = k;
	return all;
}

static bool valid_utf8(const char *s, int n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (int i = 0; i < n;) {
		int need = u[i] < 0x80 ? 1 : u[i] >= 0xC2 && u[i] <= 0xDF ? 2 : u[i] >= 0xE0 && u[i] <= 0xEF ? 3
			 : u[i] >= 0xF0 && u[i] <= 0xF4 ? 4 : 0;
		if (!need || i + need > n)
			return false;
		for (int j = 1; j < need; j++)
			if ((u[i + j] & 0xC0) != 0x80)
				return false;
		i += need;
	}
	return true;
}

START_TEST(streaming_utf8)
{
	struct loaded l;
	if (!load_rel("vocab/ggml-vocab-llama-spm.gguf", &l))
		return;
	/* rare characters fall back to <0xNN> byte tokens: 4-byte emoji and
	 * CJK spread over several ids */
	const char *s = "a \xF0\x9F\xA6\x99\xF0\x9F\x8C\x8B \xE1\xBB\x85\xE8\xA5\xBF x \xC3\xA9";
	int32_t *ids;
	int n = encode(l.t, s, strlen(s), false, false, &ids);
	int nbyte = 0;
	for (int i = 0; i < n; i++)
		if (ids[i] >= 3 && ids[i] < 259)
			nbyte++;
	ck_assert_int_ge(nbyte, 8);
	struct tok_stream st;
	tok_stream_init(&st);
	char chunk[256];
	for (int i = 0; i < n; i++) {
		int w = tok_stream_push(l.t, &st, ids[i], chunk, sizeof chunk);
		ck_assert_int_ge(w, 0);
		ck_assert_msg(valid_utf8(chunk, w), "chunk %d splits a character", i);
	}
	ck_assert_int_eq(st.npending, 0);
	size_t sl;
	char *all = stream_all(l.t, ids, n, &sl);
	int dl;
	char *d = decode(l.t, ids, n, &dl);
	/* decode strips the first leading space; the stream does not */
	ck_assert_uint_eq(sl, (size_t)dl + 1);
	ck_assert(all[0] == ' ' && memcmp(all + 1, d, (size_t)dl) == 0);
	ck_assert_str_eq(d, s);
	free(all);
	free(d);

	/* a byte that can never complete is flushed, not held: C3 then 'a' */
	int32_t c3 = 3 + 0xC3, a_tok[4];
	ck_assert_int_eq(tok_encode(l.t, "a", 1, false, false, a_tok, 4), 1); /* "▁a" */
	tok_stream_init(&st);
	ck_assert_int_eq(tok_stream_push(l.t, &st, c3, chunk, sizeof chunk), 0);
	ck_assert_int_eq(st.npending, 1);
	int w = tok_stream_push(l.t, &st, a_tok[0], chunk, sizeof chunk);
	ck_assert_int_eq(w, 3);
	ck_assert(memcmp(chunk, "\xC3 a", 3) == 0);
	/* a dangling lead byte comes out at flush */
	ck_assert_int_eq(tok_stream_push(l.t, &st, 3 + 0xE2, chunk, sizeof chunk), 0);
	ck_assert_int_eq(tok_stream_push(l.t, &st, 3 + 0x82, chunk, sizeof chunk), 0);
	ck_assert_int_eq(tok_stream_flush(&st, chunk, sizeof chunk), 2);
	ck_assert(memcmp(chunk, "\xE2\x82", 2) == 0);
	/* too small an output buffer leaves the stream unchanged */
	tok_stream_init(&st);
	ck_assert_int_eq(tok_stream_push(l.t, &st, a_tok[0], chunk, 1), -2);
	ck_assert_int_eq(tok_stream_push(l.t, &st, a_tok[0], chunk, 2), 2);
	ck_assert_int_eq(tok_stream_push(l.t, &st, 99999, chunk, 2), TOK_ERR);
	free(ids);
	tok_free(l.t);

	/* BPE: the same through GPT-2 byte-level tokens */
	if (!load_rel("vocab/ggml-vocab-qwen2.gguf", &l))
		return;
	const char *b = "\xF0\x9F\xA6\x99 \xE1\xBB\x85 \xF0\x9F\x98\x80\xF0\x9F\x98\x80";
	n = encode(l.t, b, strlen(b), false, false, &ids);
	tok_stream_init(&st);
	for (int i = 0; i < n; i++) {
		w = tok_stream_push(l.t, &st, ids[i], chunk, sizeof chunk);
		ck_assert_int_ge(w, 0);
		ck_assert_msg(valid_utf8(chunk, w), "chunk %d splits a character", i);
	}
	all = stream_all(l.t, ids, n, &sl);
	ck_assert_uint_eq(sl, strlen(b));
	ck_assert(memcmp(all, b, sl) == 0);
	free(all);
	free(ids);
	tok_free(l.t);
}
END_TEST

START_TEST(golden_prompts)
{
	static const char *names[] = { "once_upon_a_time", "lily_and_ben_went_to_the_park",
		"one_day_a_boy_named_tim_found_a_box", "sara_liked_to_draw" };
	struct loaded l;
	if (!load_rel("models/stories260K.gguf", &l))
		return;
	ck_assert(tok_add_bos(l.t));
	for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
		char rel[256], path[4096];
		size_t pl, il;
		snprintf(rel, sizeof rel, "golden/%s.prompt", names[k]);
		ck_assert_int_eq(testdata_path(path, sizeof path, rel), 0);
		char *prompt = read_all(path, &pl);
		while (pl && prompt[pl - 1] == '\n') /* as "$(cat X.prompt)" */
			pl--;
		snprintf(rel, sizeof rel, "golden/%s.ids", names[k]);
		ck_assert_int_eq(testdata_path(path, sizeof path, rel), 0);
		char *idf = read_all(path, &il);
		ck_assert(strncmp(idf, "prompt_ids", 10) == 0);
		int32_t want[1024], gen[1024];
		int nw = 0, ng = 0;
		char *p = idf + 10, *endp;
		char *eol = strchr(idf, '\n');
		while (p < eol) {
			long v = strtol(p, &endp, 10);
			if (endp == p)
				break;
			want[nw++] = (int32_t)v;
			p = endp;
		}
		ck_assert(strncmp(eol + 1, "output_ids", 10) == 0);
		p = eol + 11;
		while (*p) {
			long v = strtol(p, &endp, 10);
			if (endp == p)
				break;
			gen[ng++] = (int32_t)v;
			p = endp;
		}
		int32_t *ids;
		int n = encode(l.t, prompt, pl, tok_add_bos(l.t), false, &ids);
		ck_assert_int_eq(n, nw);
		ck_assert_msg(memcmp(ids, want, (size_t)n * sizeof *ids) == 0, "%s: prompt ids differ", names[k]);

		/* the stream of the output ids is the .expected text:
		 * decode(P + G) with decode(P) cut off the front */
		size_t sl, el;
		char *st = stream_all(l.t, gen, ng, &sl);
		snprintf(rel, sizeof rel, "golden/%s.expected", names[k]);
		ck_assert_int_eq(testdata_path(path, sizeof path, rel), 0);
		char *exp = read_all(path, &el);
		ck_assert_uint_eq(sl, el);
		ck_assert(memcmp(st, exp, el) == 0);
		int32_t *all = malloc((size_t)(n + ng) * sizeof *all);
		memcpy(all, ids, (size_t)n * sizeof *all);
		memcpy(all + n, gen, (size_t)ng * sizeof *all);
		int dpl, dal;
		char *dp = decode(l.t, ids, n, &dpl), *da = decode(l.t, all, n + ng, &dal);
		ck_assert_int_eq(dal - dpl, (int)el);
		ck_assert(memcmp(da, dp, (size_t)dpl) == 0 && memcmp(da + dpl, exp, el) == 0);
		free(dp);
		free(da);
		free(all);
		free(exp);
		free(st);
		free(ids);
		free(prompt);
		free(idf);
	}
	tok_free(l.t);
}
END_TEST

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

START_TEST(hostile_input)
{
	static const char *vocabs[] = { "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-bpe.gguf",
		"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-qwen2.gguf" };
	for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
		struct loaded l;
		if (!load_rel(vocabs[v], &l))
			return;
		bool spm = strcmp(tok_model_name(l.t), "llama") == 0;
		/* invalid UTF-8: SPM falls back to the raw bytes; BPE (as
		 * llama.cpp) reads each bad byte as U+FFFD */
		const char bad[] = "a\xFF\xC3(\xE2\x82 \xF8\x88\x80\x80\x80 \xED\xA0\x80z\xC0\xAF";
		int32_t *ids;
		int n = encode(l.t, bad, sizeof bad - 1, false, false, &ids);
		ck_assert_int_gt(n, 0);
		int dl;
		char *d = decode(l.t, ids, n, &dl);
		if (spm)
			ck_assert(dl == (int)sizeof bad - 1 && memcmp(d, bad, sizeof bad - 1) == 0);
		else
			ck_assert(memmem(d, (size_t)dl, "\xEF\xBF\xBD", 3) != NULL);
		free(d);
		free(ids);
		/* NUL bytes are text */
		const char nul[] = "a\0b\0\0 c";
		n = encode(l.t, nul, sizeof nul - 1, false, false, &ids);
		ck_assert_int_gt(n, 0);
		d = decode(l.t, ids, n, &dl);
		ck_assert_int_eq(dl, (int)sizeof nul - 1);
		ck_assert(memcmp(d, nul, sizeof nul - 1) == 0);
		free(d);
		free(ids);
		/* 1 MB of random bytes, and 1 MB of one letter */
		size_t big = 1 << 20;
		char *buf = malloc(big);
		/* (no spaces: SPM escapes a space to U+2581 before splitting, so
		 * "\xCD " falls back to the bytes CD E2 96 81, as in llama.cpp) */
		for (size_t i = 0; i < big; i++)
			if ((buf[i] = (char)rnd()) == ' ')
				buf[i] = 'x';
		n = encode(l.t, buf, big, true, true, &ids);
		ck_assert_int_gt(n, 1000);
		for (int i = 0; i < n; i++)
			ck_assert(ids[i] >= 0 && ids[i] < tok_n_vocab(l.t));
		free(ids);
		n = encode(l.t, buf, big, true, false, &ids);
		ck_assert_int_eq(ids[0], tok_bos(l.t));
		d = decode(l.t, ids, n, &dl);
		ck_assert_int_gt(dl, 0);
		if (spm) /* every byte survives; after BOS the prefix space stays */
			ck_assert(dl == (int)big + 1 && d[0] == ' ' && memcmp(d + 1, buf, big) == 0);
		free(d);
		free(ids);
		memset(buf, 'a', big);
		n = encode(l.t, buf, big, false, false, &ids);
		ck_assert_int_gt(n, 0);
		d = decode(l.t, ids, n, &dl);
		ck_assert(dl == (int)big && memcmp(d, buf, big) == 0);
		free(d);
		free(ids);
		free(buf);
		/* bad arguments */
		int32_t o[4];
		ck_assert_int_eq(tok_encode(l.t, NULL, 5, false, false, o, 4), TOK_ERR);
		ck_assert_int_eq(tok_encode(l.t, "x", 1, false, false, o, -1), TOK_ERR);
		ck_assert_int_eq(tok_encode(l.t, "", 0, false, false, o, 4), 0);
		tok_free(l.t);
	}
}
END_TEST

/* tok_min_tokens never exceeds what tok_encode gives (the daemon refuses a
 * prompt at once on it): texts of every kind, worst cases for the bound
 * included (one long piece repeated, runs of spaces, specials' text). */
START_TEST(min_tokens_bound)
{
	static const char *vocabs[] = { "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-bpe.gguf",
		"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-qwen2.gguf" };
	for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
		struct loaded l;
		if (!load_rel(vocabs[v], &l))
			return;
		size_t big = 16 << 10;
		char *buf = malloc(big);
		for (int kind = 0; kind < 6; kind++) {
			/* the longest piece, over and over: the bound's own case */
			int32_t longest = 0;
			char piece[512];
			int best = 0;
			for (int32_t id = 0; id < tok_n_vocab(l.t); id++) {
				int pl = tok_piece(l.t, id, true, piece, sizeof piece);
				if (pl > best && pl <= (int)sizeof piece)
					best = pl, longest = id;
			}
			int pl = tok_piece(l.t, longest, true, piece, sizeof piece);
			static const char specials[] = "<|endoftext|> <s></s>\n\n\t";
			for (size_t i = 0; i < big; i++) {
				switch (kind) {
				case 0: buf[i] = piece[i % (size_t)pl]; break;
				case 1: buf[i] = ' '; break;
				case 2: buf[i] = (char)rnd(); break;
				case 3: buf[i] = "Once upon a time, there was a dog. "[i % 35]; break;
				case 4: buf[i] = specials[i % (sizeof specials - 1)]; break;
				case 5: buf[i] = i % 97 ? 'a' : ' '; break;
				}
			}
			for (size_t len = 1; len <= big; len *= 4) {
				int32_t *ids;
				int n = encode(l.t, buf, len, false, true, &ids);
				ck_assert_int_ge(n, 0);
				ck_assert_msg(tok_min_tokens(l.t, buf, len) <= (size_t)n, "%s, text %d of %zu bytes: bound %zu > %d",
					      vocabs[v], kind, len, tok_min_tokens(l.t, buf, len), n);
				free(ids);
			}
		}
		free(buf);
		tok_free(l.t);
	}
}
END_TEST

START_TEST(load_errors)
{
	/* a GGUF without a vocabulary is refused with a message */
	static const uint8_t hdr[] = { 'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
	struct gguf_file *f;
	char err[256] = "";
	ck_assert_int_eq(gguf_parse(hdr, sizeof hdr, &f, err, sizeof err), 0);
	struct tokenizer *t = (struct tokenizer *)1;
	err[0] = 0;
	ck_assert_int_lt(tok_load(f, &t, err, sizeof err), 0);
	ck_assert_ptr_null(t);
	ck_assert(strstr(err, "tokenizer.ggml.model") != NULL);
	gguf_close(f);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("tokenizer");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, vocab_llama_spm);
	tcase_add_test(tc, vocab_llama_bpe);
	tcase_add_test(tc, vocab_gpt2);
	tcase_add_test(tc, vocab_qwen2);
	tcase_add_test(tc, vocab_properties);
	tcase_add_test(tc, special_parsing);
	tcase_add_test(tc, streaming_utf8);
	tcase_add_test(tc, golden_prompts);
	tcase_add_test(tc, hostile_input);
	tcase_add_test(tc, min_tokens_bound);
	tcase_add_test(tc, load_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
