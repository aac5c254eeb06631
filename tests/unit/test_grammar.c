/* tests/unit/test_grammar.c — the constraint engine: each front end's
 * language over a small vocabulary (mask and matcher agree, EOS only when
 * complete, rollback), and constrained requests in the engine on a real
 * model (stories260K): several at once, each output in its own language,
 * greedy and sampled; a constraint that does not compile is refused. The
 * masker's parallel masks equal the ones computed one by one. On a real
 * 128k vocabulary, the mask's shortcuts give the plain walk's masks. */
#include "daemon/engine/engine.h"
#include "daemon/engine/masker.h"
#include "daemon/grammar/grammar.h"
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *pieces[] = { "{", "}", "\"", ":", ",", "a", "b", "ab", "1", "12", "-", "yes", "no",
				"\"a\":", "x", "" };
#define NV (int)(sizeof pieces / sizeof *pieces)
#define EOS (NV - 1)

static struct gm_vocab *vocab(void)
{
	int lens[NV];
	bool eog[NV];
	for (int i = 0; i < NV; i++) {
		lens[i] = (int)strlen(pieces[i]);
		eog[i] = i == EOS;
	}
	struct gm_vocab *v = gm_vocab_new(NV, pieces, lens, eog);
	ck_assert_ptr_nonnull(v);
	return v;
}

static bool in_mask(struct gm_matcher *m, int tok)
{
	uint32_t mask[1];
	ck_assert_int_ge(gm_matcher_mask(m, mask), 0);
	return mask[0] >> tok & 1;
}

/* Walk the text; true when every byte is taken and it is complete. */
static bool accepts(enum gm_kind k, const char *src, const char *text)
{
	struct gm_grammar *g;
	char err[256];
	ck_assert_msg(gm_compile(k, src, strlen(src), &g, err, sizeof err) == 0, "%s: %s", src, err);
	struct gm_vocab *v = vocab();
	struct gm_matcher *m = gm_matcher_new(g, v);
	bool ok = gm_matcher_accept_bytes(m, text, strlen(text)) == 0 && gm_matcher_is_complete(m);
	ck_assert_int_eq(ok, in_mask(m, EOS) && gm_matcher_accept_bytes(m, "", 0) == 0);
	gm_matcher_free(m);
	gm_vocab_free(v);
	gm_grammar_unref(g);
	return ok;
}

START_TEST(test_languages)
{
	ck_assert(accepts(GM_REGEX, "a(b|c)*\\d{2}", "abcb12"));
	ck_assert(!accepts(GM_REGEX, "a(b|c)*\\d{2}", "abcb1"));
	ck_assert(!accepts(GM_REGEX, "a(b|c)*\\d{2}", "abcb123"));
	ck_assert(accepts(GM_REGEX, "[^a-c]{1,3}", "\xc3\xa9z"));
	ck_assert(!accepts(GM_REGEX, "[^a-c]{1,3}", "za"));
	ck_assert(accepts(GM_GBNF, "root ::= x+\nx ::= \"ab\" | [0-9]\n", "ab1ab"));
	ck_assert(!accepts(GM_GBNF, "root ::= x+\nx ::= \"ab\" | [0-9]\n", "a"));
	const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":12}},"
			"\"required\":[\"a\"],\"additionalProperties\":false}";
	ck_assert(accepts(GM_JSON_SCHEMA, s, "{\"a\":12}"));
	ck_assert(accepts(GM_JSON_SCHEMA, s, "{\"a\":-3}"));
	ck_assert(!accepts(GM_JSON_SCHEMA, s, "{\"a\":13}"));
	ck_assert(!accepts(GM_JSON_SCHEMA, s, "{\"a\":-4}"));
	ck_assert(!accepts(GM_JSON_SCHEMA, s, "{}"));
	ck_assert(accepts(GM_JSON_SCHEMA, "{\"$ref\":\"#/$defs/t\",\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}}}",
			  "[[],[[]]]"));
}
END_TEST

/* Bounded repetition in blocks (ir.c): every count from min to max, and
 * none outside, across the block sizes and the remainder. */
static bool takes(const struct gm_grammar *g, const struct gm_vocab *v, const char *text)
{
	struct gm_matcher *m = gm_matcher_new(g, v);
	ck_assert_ptr_nonnull(m);
	bool ok = gm_matcher_accept_bytes(m, text, strlen(text)) == 0 && gm_matcher_is_complete(m);
	gm_matcher_free(m);
	return ok;
}

START_TEST(test_bounded_repetition)
{
	/* counters above 16; a nullable one counts non-empty matches only, so
	 * its minimum says nothing; {20,} has no maximum (-1: up to 1000) */
	static const char *res[] = { "(ab|a){0,16}", "(ab|a){0,17}", "(ab|a){3,50}", "(ab|a){0,81}",
				     "(ab|a){7,300}", "(ab|a){0,1000}", "(a?){30,40}", "(ab|a){20,}" };
	static const long bounds[][2] = { { 0, 16 }, { 0, 17 }, { 3, 50 }, { 0, 81 },
					  { 7, 300 }, { 0, 1000 }, { 0, 40 }, { 20, -1 } };
	struct gm_vocab *v = vocab();
	struct gm_grammar *g;
	char err[256], text[1100];
	memset(text, 'a', sizeof text);
	for (size_t i = 0; i < sizeof res / sizeof *res; i++) {
		long lo = bounds[i][0], hi = bounds[i][1];
		ck_assert_msg(gm_compile(GM_REGEX, res[i], strlen(res[i]), &g, err, sizeof err) == 0, "%s", err);
		for (long n = lo > 2 ? lo - 2 : 0; n <= (hi < 0 ? 1000 : hi + 2); n++) {
			text[n] = 0;
			ck_assert_msg(takes(g, v, text) == (n >= lo && (hi < 0 || n <= hi)), "%s on %ld", res[i], n);
			text[n] = 'a';
		}
		gm_grammar_unref(g);
	}
	const char *s = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":40}";
	ck_assert_msg(gm_compile(GM_JSON_SCHEMA, s, strlen(s), &g, err, sizeof err) == 0, "%s", err);
	char arr[200] = "[";
	for (int n = 1; n <= 42; n++) {
		strcat(arr, n > 1 ? ",1" : "1");
		size_t l = strlen(arr);
		arr[l] = ']';
		arr[l + 1] = 0;
		ck_assert_msg(takes(g, v, arr) == (n >= 2 && n <= 40), "%d items", n);
		arr[l] = 0;
	}
	gm_grammar_unref(g);
	gm_vocab_free(v);
}
END_TEST

/* Each keyword the grammar says by rewriting or counting: a valid instance
 * accepted, an invalid one refused. */
static const struct { const char *schema; const char *yes[4], *no[4]; } kw[] = {
	{ "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":2}",
	  { "{\"a\":1,\"c\":2}", "{\"a\":1,\"x\":2}" }, { "{\"a\":1}", "{}", "{\"x\":1}" } },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{}},\"maxProperties\":2}",
	  { "{\"a\":1,\"x\":2}", "{}" }, { "{\"a\":1,\"x\":2,\"y\":3}", "{\"x\":1,\"y\":2,\"z\":3}" } },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"dependentRequired\":{\"a\":[\"b\"]}}",
	  { "{\"a\":1,\"b\":2}", "{\"b\":2}", "{}" }, { "{\"a\":1}" } },
	{ "{\"dependencies\":{\"a\":{\"required\":[\"c\"]}}}", { "{\"a\":1,\"c\":2}", "{\"c\":2}", "5" },
	  { "{\"a\":1}", "{\"z\":1,\"a\":2}" } },
	{ "{\"dependentSchemas\":{\"a\":{\"properties\":{\"b\":{\"type\":\"string\"}}}},\"properties\":{\"a\":{},\"b\":{}}}",
	  { "{\"a\":1,\"b\":\"x\"}", "{\"b\":2}" }, { "{\"a\":1,\"b\":2}" } },
	{ "{\"if\":{\"properties\":{\"k\":{\"const\":\"x\"}}},\"then\":{\"required\":[\"y\"]},\"else\":{\"required\":[\"z\"]}}",
	  { "{\"k\":\"x\",\"y\":1}", "{\"k\":\"w\",\"z\":1}", "\"s\"" }, { "{\"k\":\"x\"}", "{\"k\":\"w\",\"y\":1}", "{\"z\":1}" } },
	{ "{\"not\":{\"enum\":[\"ab\",true]}}", { "\"a\"", "\"abc\"", "false", "[1]" }, { "\"ab\"", "true" } },
	{ "{\"type\":\"string\",\"not\":{\"maxLength\":2}}", { "\"abc\"" }, { "\"ab\"", "5" } },
	{ "{\"type\":\"integer\",\"not\":{\"anyOf\":[{\"minimum\":3},{\"maximum\":-3}]}}", { "2", "-2" }, { "3", "-3" } },
	{ "{\"allOf\":[{\"not\":{\"type\":\"string\"}},{\"not\":{\"type\":\"null\"}}]}", { "1", "{}" }, { "\"a\"", "null" } },
	{ "{\"type\":\"object\",\"not\":{\"required\":[\"a\",\"b\"]}}", { "{\"a\":1}", "{}" }, { "{\"a\":1,\"b\":2}", "1" } },
	{ "{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.25}", { "0.5", "1", "2.250", "1.999" },
	  { "0.4999", "2.251", "3", "-1" } },
	{ "{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"exclusiveMaximum\":0}", { "-1.49", "-0.5", "-1" },
	  { "-1.5", "0", "0.1", "-2" } },
	{ "{\"type\":\"number\",\"multipleOf\":0.01,\"maximum\":99.99}", { "99.99", "1.5", "-3.01", "12.340" },
	  { "99.991", "100", "0.001" } },
	{ "{\"type\":\"number\",\"multipleOf\":0.25}", { "0.25", "1.75", "-2", "3.0" }, { "0.2", "0.125", "1.3" } },
	{ "{\"type\":\"integer\",\"multipleOf\":3}", { "0", "-9", "123" }, { "1", "124" } },
	{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}", { "\"abc\"", "\"a\"" }, { "\"abcd\"", "\"\"", "\"aB\"" } },
	{ "{\"type\":\"string\",\"pattern\":\"b\",\"minLength\":3}", { "\"abc\"", "\"xxb\"" }, { "\"ab\"", "\"aaa\"" } },
	{ "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":6}", { "\"a@b.co\"" }, { "\"ab@b.co\"", "\"ab\"" } },
	{ "{\"type\":\"string\",\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", { "\"ab\"", "\"xbxa\"" }, { "\"aa\"", "\"b\"" } },
	{ "{\"type\":\"string\",\"not\":{\"pattern\":\"^x\"}}", { "\"ax\"", "\"\"" }, { "\"x\"", "\"xa\"" } },
	{ "{\"type\":\"string\",\"pattern\":\"^(?:\\\\S+\\\\s+){0,9}\\\\S+$\",\"maxLength\":12}", { "\"a b c\"", "\"hello world\"" },
	  { "\"hello world!!\"", "\" a\"" } },
	{ "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"patternProperties\":{\"^x_[a-z]+$\":{\"type\":\"string\"}}}",
	  { "{\"id\":1,\"x_ab\":\"x\"}", "{\"A1\":5}", "{}" }, { "{\"x_ab\":5}", "{\"id\":\"x\"}", "{\"id\":1,\"id\":2}" } },
	{ "{\"type\":\"object\",\"patternProperties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"minimum\":3}},\"additionalProperties\":{\"type\":\"boolean\"}}",
	  { "{\"a\":1,\"ab\":4,\"b\":7.5,\"x\":true}" }, { "{\"ab\":2}", "{\"x\":1}", "{\"a\":\"s\"}", "{\"b\":1}" } },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{}},\"patternProperties\":{\".*\":{\"type\":\"string\"}}}",
	  { "{\"a\":\"t\",\"q\":\"s\"}", "{\"\":\"s\"}" }, { "{\"q\":1}", "{\"a\":1}" } },
	{ "{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]+$\",\"maxLength\":3}}", { "{\"abc\":1}", "{}" },
	  { "{\"abcd\":1}", "{\"A\":1}" } },
	{ "{\"type\":\"object\",\"propertyNames\":{\"maxLength\":3}}", { "{\"abc\":1,\"x\":2}", "{}" }, { "{\"abcd\":1}" } },
	{ "{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"x\",\"y\"]}}", { "{\"x\":1,\"y\":2}" }, { "{\"z\":1}" } },
	{ "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":5}}", { "[5]", "[1,2,7,3]", "[9,1]" },
	  { "[]", "[1,2]", "[\"a\",6]" } },
	{ "{\"allOf\":[{\"const\":1},{\"const\":2}]}", { 0 }, { "1", "2" } },
	{ "{\"not\":{\"type\":\"integer\"}}", { "1.5", "\"a\"", "-0.01" }, { "1", "0", "-7" } },
	{ "{\"type\":\"integer\",\"not\":{\"multipleOf\":3}}", { "1", "-5", "10" }, { "3", "0", "-9" } },
	{ "{\"type\":\"number\",\"not\":{\"multipleOf\":2}}", { "1", "2.5", "3.0" }, { "4", "4.0" } },
	{ "{\"type\":\"integer\",\"multipleOf\":16,\"minimum\":-40,\"maximum\":40}", { "-32", "0", "16" }, { "48", "-48", "8" } },
	{ "{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":0.25,\"maximum\":2}", { "0.25", "1.750", "2.0" },
	  { "0", "2.25", "0.3" } },
	{ "{\"type\":\"object\",\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", { "{\"a\":1}", "{\"b\":1}" },
	  { "{\"a\":1,\"b\":2}", "{}" } },
	{ "{\"oneOf\":[{\"type\":\"string\"},{\"minLength\":2}]}", { "\"a\"", "1" }, { "\"ab\"" } },
	{ "{\"type\":\"string\",\"format\":\"date\"}", { "\"2024-02-29\"", "\"2000-02-29\"", "\"2023-04-30\"" },
	  { "\"2023-02-29\"", "\"1900-02-29\"", "\"2023-04-31\"" } },
	{ "{\"type\":\"string\",\"enum\":[\"ab\",\"abc\",1],\"maxLength\":2}", { "\"ab\"" }, { "\"abc\"", "1" } },
	{ "{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"type\":\"integer\"}}", { "[1,2]", "[]" }, { "[\"a\"]" } },
};

START_TEST(test_schema_keywords)
{
	for (size_t i = 0; i < sizeof kw / sizeof *kw; i++) {
		for (int j = 0; j < 4 && kw[i].yes[j]; j++)
			ck_assert_msg(accepts(GM_JSON_SCHEMA, kw[i].schema, kw[i].yes[j]), "%s refuses %s", kw[i].schema,
				      kw[i].yes[j]);
		for (int j = 0; j < 4 && kw[i].no[j]; j++)
			ck_assert_msg(!accepts(GM_JSON_SCHEMA, kw[i].schema, kw[i].no[j]), "%s accepts %s", kw[i].schema,
				      kw[i].no[j]);
	}
}
END_TEST

START_TEST(test_mask_matches_matcher_and_rollback)
{
	struct gm_grammar *g;
	char err[256];
	const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"ab\",\"b\"]}},\"additionalProperties\":false}";
	ck_assert(gm_compile(GM_JSON_SCHEMA, s, strlen(s), &g, err, sizeof err) == 0);
	struct gm_vocab *v = vocab();
	struct gm_matcher *m = gm_matcher_new(g, v);
	ck_assert(in_mask(m, 0) && !in_mask(m, EOS) && !in_mask(m, 5));
	ck_assert_int_eq(gm_matcher_accept_token(m, 0), 0);
	size_t at = gm_matcher_pos(m);
	/* after '{': '}' or "a": (one token or three) */
	for (int t = 0; t < NV; t++) {
		size_t before = gm_matcher_pos(m);
		bool allowed = in_mask(m, t);
		ck_assert_int_eq(gm_matcher_accept_token(m, t) == 0, allowed);
		if (allowed)
			gm_matcher_rollback(m, before);
		ck_assert_int_eq(gm_matcher_pos(m), before);
	}
	ck_assert(in_mask(m, 1) && in_mask(m, 13) && in_mask(m, 2) && !in_mask(m, 5));
	ck_assert_int_eq(gm_matcher_accept_token(m, 13), 0);
	ck_assert_int_eq(gm_matcher_accept_token(m, 2), 0);
	ck_assert(in_mask(m, 7) && in_mask(m, 6) && in_mask(m, 5) && !in_mask(m, 8) && !in_mask(m, 14));
	gm_matcher_rollback(m, at);
	ck_assert(in_mask(m, 1));
	ck_assert_int_eq(gm_matcher_accept_token(m, 1), 0);
	ck_assert(in_mask(m, EOS) && !in_mask(m, 0));
	ck_assert_int_eq(gm_matcher_accept_token(m, EOS), 0);
	gm_matcher_free(m);
	gm_vocab_free(v);
	gm_grammar_unref(g);
}
END_TEST

START_TEST(test_refusals_name_what)
{
	static const struct { enum gm_kind k; const char *src, *want; } bad[] = {
		{ GM_JSON_SCHEMA, "{\"contains\":{\"type\":\"null\"},\"maxItems\":3,\"type\":\"array\"}", "contains" },
		{ GM_JSON_SCHEMA, "{\"if\":{\"uniqueItems\":true},\"then\":{\"minItems\":1}}", "'if'" },
		{ GM_JSON_SCHEMA, "{\"not\":{\"multipleOf\":0.5}}", "'not'" },
		{ GM_JSON_SCHEMA, "{\"$ref\":\"http://x/y.json\"}", "$ref" },
		{ GM_JSON_SCHEMA, "{\"type\":", "JSON" },
		{ GM_REGEX, "(a)\\1", "back-references" },
		{ GM_REGEX, "a(?=b)", "look-around" },
		{ GM_GBNF, "root ::= foo\n", "undefined rule 'foo'" },
		{ GM_GBNF, "x ::= \"a\"\n", "no rule 'root'" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct gm_grammar *g;
		char err[256];
		ck_assert_int_eq(gm_compile(bad[i].k, bad[i].src, strlen(bad[i].src), &g, err, sizeof err), -1);
		ck_assert_msg(strstr(err, bad[i].want), "%s: '%s' lacks '%s'", bad[i].src, err, bad[i].want);
	}
}
END_TEST

/* ---- in the engine ------------------------------------------------------- */

struct out {
	char text[4096];
	int len;
	bool done;
	enum finish_reason why;
	char msg[256];
};

static void on_tok(struct engine_req *r, int32_t tok, const char *text, size_t len)
{
	struct out *o = r->user;
	ck_assert_int_lt(o->len + (int)len, (int)sizeof o->text);
	memcpy(o->text + o->len, text, len);
	o->len += (int)len;
}

static void on_done(struct engine_req *r, enum finish_reason why, int err, const char *msg)
{
	struct out *o = r->user;
	o->done = true;
	o->why = why;
	snprintf(o->msg, sizeof o->msg, "%s", msg ? msg : "");
}

START_TEST(test_engine_constrained_batch)
{
	char path[4096], err[512];
	if (testdata_path(path, sizeof path, "models/stories260K.gguf"))
		return;
	struct engine *e;
	ck_assert_msg(engine_create(&(struct engine_opts){ .model_path = path, .threads = 2 }, &e, err, sizeof err) == 0,
		      "%s", err);
	const struct tokenizer *t = engine_tokenizer(e);
	int32_t ids[64];
	int n = tok_encode(t, "Once upon a time", 16, tok_add_bos(t), false, ids, 64);
	static const char *res[] = { "(yes|no)", "[a-z]+( [a-z]+){2,4}\\.", "[0-9]{1,3}(,[0-9]{1,3}){0,3}",
				     "(yes|no)" };
	struct engine_req r[4];
	struct out o[4];
	for (int i = 0; i < 4; i++) {
		memset(&r[i], 0, sizeof r[i]);
		memset(&o[i], 0, sizeof o[i]);
		r[i].id = i + 1;
		r[i].prompt = ids;
		r[i].n_prompt = n;
		r[i].max_tokens = 64;
		sampling_defaults(&r[i].sampling);
		r[i].sampling.temp = i == 3 ? 1.5f : 0; /* one sampled, hot */
		r[i].sampling.seed = 42;
		r[i].on_token = on_tok;
		r[i].on_done = on_done;
		r[i].user = &o[i];
		r[i].constraint_kind = GM_REGEX;
		r[i].constraint = res[i];
		r[i].constraint_len = strlen(res[i]);
		ck_assert_int_eq(engine_submit(e, &r[i]), 0);
	}
	for (int guard = 0; engine_step(e) > 0; guard++)
		ck_assert_int_lt(guard, 10000);
	for (int i = 0; i < 4; i++) {
		ck_assert(o[i].done);
		ck_assert_msg(o[i].why == FINISH_EOS, "request %d ended %s: %s", i, finish_reason_name(o[i].why), o[i].msg);
		char anchored[128];
		snprintf(anchored, sizeof anchored, "^%s$", res[i]);
		regex_t re;
		ck_assert_int_eq(regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB), 0);
		o[i].text[o[i].len] = 0;
		ck_assert_msg(regexec(&re, o[i].text, 0, NULL, 0) == 0, "'%s' does not match %s", o[i].text, res[i]);
		regfree(&re);
	}
	/* refused at submit, naming the reason */
	struct engine_req bad = r[0];
	struct out ob = { 0 };
	bad.user = &ob;
	bad.constraint_kind = GM_JSON_SCHEMA;
	bad.constraint = "{\"not\":{\"uniqueItems\":true}}";
	bad.constraint_len = strlen(bad.constraint);
	ck_assert_int_eq(engine_submit(e, &bad), ENGINE_ERR_INVALID);
	ck_assert(ob.done && ob.why == FINISH_ERROR);
	ck_assert_msg(strstr(ob.msg, "'not'"), "%s", ob.msg);
	engine_destroy(e);
}
END_TEST

/* Rounds of 1..12 matchers in different states: the masker's masks (0, 1
 * and 3 workers, started early or not) equal gm_matcher_mask's. */
START_TEST(test_masker_parallel)
{
	struct gm_vocab *v = vocab();
	const char *src = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}}";
	char err[256];
	struct gm_grammar *g;
	ck_assert(gm_compile(GM_JSON_SCHEMA, src, strlen(src), &g, err, sizeof err) == 0);
	uint32_t seed = 7;
	for (int nt = 0; nt <= 3; nt += nt ? 2 : 1) {
		struct masker *mk;
		ck_assert_int_eq(masker_create(nt, &mk), 0);
		for (int round = 0; round < 40; round++) {
			enum { MAXM = 12 };
			struct gm_matcher *m[MAXM];
			uint32_t got[MAXM][1], want[MAXM][1];
			int got_n[MAXM];
			int n = 1 + round % MAXM;
			for (int i = 0; i < n; i++) {
				m[i] = gm_matcher_new(g, v);
				for (int step = 0; step < (int)((seed = seed * 1103515245u + 12345u) >> 16) % 8; step++) {
					uint32_t mask[1];
					gm_matcher_mask(m[i], mask);
					mask[0] &= ~(1u << EOS);
					if (!mask[0])
						break;
					int t;
					do
						t = (int)((seed = seed * 1103515245u + 12345u) >> 16) % NV;
					while (!(mask[0] >> t & 1));
					ck_assert_int_eq(gm_matcher_accept_token(m[i], t), 0);
				}
				ck_assert_int_eq(masker_add(mk, m[i], got[i], &got_n[i]), 0);
			}
			if (round % 2)
				masker_start(mk);
			masker_finish(mk);
			for (int i = 0; i < n; i++) {
				int want_n = gm_matcher_mask(m[i], want[i]);
				ck_assert_int_eq(got_n[i], want_n);
				ck_assert_uint_eq(got[i][0], want[i][0]);
				gm_matcher_free(m[i]);
			}
		}
		masker_destroy(mk);
	}
	gm_grammar_unref(g);
	gm_vocab_free(v);
}
END_TEST

/* Masks with the shortcuts (string loops, the vocabulary's split, whole
 * subtrees, the mask cache) equal the plain trie walk's, token by token. */
START_TEST(test_fast_masks_equal_plain_walk)
{
	char path[512], err[256];
	if (testdata_path(path, sizeof path, "vocab/ggml-vocab-llama-bpe.gguf"))
		return;
	struct gguf_file *gf;
	struct tokenizer *t;
	ck_assert_msg(gguf_open(path, &gf, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(tok_load(gf, &t, err, sizeof err) == 0, "%s", err);
	gguf_close(gf);
	struct gm_vocab *v = gm_vocab_from_tokenizer(t);
	ck_assert_ptr_nonnull(v);
	static const char *cases[][2] = {
		{ "{\"type\":\"string\"}", "\"caf\xc3\xa9 \\\"quoted\\\" \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\\n tab\\t end\"" },
		{ "{\"type\":\"object\",\"properties\":{\"result\":{\"type\":\"string\"},\"res\":{\"type\":\"integer\"}}}",
		  "{\"result\":\"ok\",\"res\":12,\"other\":[1,\"x y\",{\"k\":null}],\"r\":true}" },
		{ "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
		  "\"tag\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"name\"],\"additionalProperties\":false}}",
		  "[{\"name\":\"Ann Lee\",\"tag\":\"a\"},{\"name\":\"Bob\"},{\"name\":\"Bob\"},{\"name\":\"\xc3\xa9\"}]" },
		{ "{\"type\":\"string\",\"maxLength\":12}", "\"twelve chars\"" },
		/* a count (blocks of the repetition) that runs out inside the text */
		{ "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":30,\"maxLength\":90}}",
		  "[\"The quick brown fox jumps over the lazy dog, caf\xc3\xa9 \\\"quoted\\\" and then some more words here.\","
		  "\"                                                                                          \"]" },
		{ "{\"type\":\"string\",\"pattern\":\"^[a-z]+-[0-9]+$\"}", "\"abc-123\"" },
		{ "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date-time\"},"
		  "\"n\":{\"type\":\"number\"}}}", "{\"d\":\"2024-01-02T03:04:05Z\",\"n\":-1.5e3}" },
		/* a pattern as one automaton (left-linear): inside it the string
		 * state takes every character but ':' back to itself */
		{ "{\"type\":\"object\",\"properties\":{\"img\":{\"type\":\"string\",\"pattern\":\"(.+/)?.+:.+\"}}}",
		  "{\"img\":\"docker.io/library/nginx:latest\"}" },
		/* undeclared keys sorted by patternProperties (an automaton too) */
		{ "{\"type\":\"object\",\"properties\":{\"alpha\":{\"type\":\"integer\"},\"beta\":{\"type\":\"integer\"}},"
		  "\"patternProperties\":{\"^x-\":{\"type\":\"string\"}}}",
		  "{\"alpha\":1,\"x-tag\":\"v\",\"other key here\":[true],\"al\":2}" },
	};
	size_t words = ((size_t)gm_vocab_size(v) + 31) / 32;
	uint32_t *fast = malloc(words * sizeof *fast), *slow = malloc(words * sizeof *slow);
	int32_t ids[512];
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct gm_grammar *g;
		ck_assert_msg(gm_compile(GM_JSON_SCHEMA, cases[i][0], strlen(cases[i][0]), &g, err, sizeof err) == 0,
			      "%s: %s", cases[i][0], err);
		struct gm_matcher *m = gm_matcher_new(g, v);
		int n = tok_encode(t, cases[i][1], strlen(cases[i][1]), false, false, ids, 512);
		ck_assert_int_gt(n, 0);
		for (int k = 0; k <= n; k++) {
			int nf = gm_matcher_mask(m, fast);
			gm_matcher_slow(m, true);
			int ns = gm_matcher_mask(m, slow);
			gm_matcher_slow(m, false);
			ck_assert_msg(nf == ns && !memcmp(fast, slow, words * sizeof *fast),
				      "case %zu token %d: %d tokens allowed, the plain walk %d", i, k, nf, ns);
			if (k < n)
				ck_assert_msg(gm_matcher_accept_token(m, ids[k]) == 0, "case %zu token %d refused", i, k);
		}
		ck_assert(gm_matcher_is_complete(m));
		gm_matcher_free(m);
		gm_grammar_unref(g);
	}
	free(fast);
	free(slow);
	gm_vocab_free(v);
	tok_free(t);
}
END_TEST

/* The same over a small vocabulary whose tokens cross what the shortcuts
 * assume: a declared key's name followed by its closing quote, runs of
 * characters with tails, characters cut in the middle. */
START_TEST(test_fast_masks_small_vocab)
{
	static const char *pc[] = { "{", "}", "\"", ":", ",", "a", "b", "ab", "ab\"", "ab\":", "abc\"", "x",
				    "xa", "xab\"", "1", "\xc3", "\xa9\"", "\xc3\xa9", "a\xc3", " \"", "\\", "\\\"",
				    "\",\"", "\"a", "" };
	enum { N = sizeof pc / sizeof *pc };
	int lens[N];
	bool eog[N];
	for (int i = 0; i < N; i++) {
		lens[i] = (int)strlen(pc[i]);
		eog[i] = i == N - 1;
	}
	struct gm_vocab *v = gm_vocab_new(N, pc, lens, eog);
	ck_assert_ptr_nonnull(v);
	static const char *cases[][2] = {
		{ "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}}}", "{\"ab\":1,\"xab\":1,\"a\xc3\xa9\":\"ab\"}" },
		{ "{\"type\":\"string\"}", "\"ab\\\"x\xc3\xa9 ab\"" },
	};
	char err[256];
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct gm_grammar *g;
		ck_assert_msg(gm_compile(GM_JSON_SCHEMA, cases[i][0], strlen(cases[i][0]), &g, err, sizeof err) == 0,
			      "%s", err);
		struct gm_matcher *m = gm_matcher_new(g, v);
		const char *text = cases[i][1];
		for (size_t at = 0;; at++) {
			uint32_t fast[1], slow[1];
			int nf = gm_matcher_mask(m, fast);
			gm_matcher_slow(m, true);
			int ns = gm_matcher_mask(m, slow);
			gm_matcher_slow(m, false);
			ck_assert_msg(nf == ns && fast[0] == slow[0], "case %zu byte %zu: %08x, the plain walk %08x", i, at,
				      fast[0], slow[0]);
			if (!text[at])
				break;
			ck_assert_int_eq(gm_matcher_accept_bytes(m, text + at, 1), 0);
		}
		ck_assert(gm_matcher_is_complete(m));
		gm_matcher_free(m);
		gm_grammar_unref(g);
	}
	gm_vocab_free(v);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("grammar");
	TCase *tc = tcase_create("grammar");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_languages);
	tcase_add_test(tc, test_bounded_repetition);
	tcase_add_test(tc, test_schema_keywords);
	tcase_add_test(tc, test_mask_matches_matcher_and_rollback);
	tcase_add_test(tc, test_refusals_name_what);
	tcase_add_test(tc, test_fast_masks_equal_plain_walk);
	tcase_add_test(tc, test_fast_masks_small_vocab);
	tcase_add_test(tc, test_engine_constrained_batch);
	tcase_add_test(tc, test_masker_parallel);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
