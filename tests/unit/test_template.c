/* tests/unit/test_template.c — the Jinja engine: every case of
 * ../shared/testdata/chat/cases.jsonl rendered byte for byte against
 * Jinja2's output, then the engine's own rules (whitespace control,
 * scoping, errors naming the line, limits). */
#include "daemon/template/template.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc(len + 1);
	*n = fread(s, 1, len, f);
	s[*n] = 0;
	fclose(f);
	return s;
}

/* 2026-12-06 04:00 UTC: the clock the expected outputs were made with. */
#define FROZEN_NOW 1796529600

static const char *str_field(struct tpl_val *d, const char *k, size_t *n);

START_TEST(test_cases)
{
	char path[4096];
	size_t n;
	if (testdata_path(path, sizeof path, "chat/cases.jsonl"))
		return;
	setenv("TZ", "UTC", 1);
	tzset();
	char *all = slurp(path, &n);
	ck_assert_ptr_nonnull(all);
	int pass = 0, fail = 0, skipped = 0;
	for (char *line = all, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		struct tpl_heap *h = tpl_heap_new(0);
		struct tpl_val *c;
		char err[256];
		ck_assert_msg(tpl_json_parse(h, line, strlen(line), &c, err, sizeof err) == 0, "%s", err);
		size_t tn, en, rn;
		const char *tname = str_field(c, "template", &tn), *cname = str_field(c, "case", &tn);
		const char *expected = str_field(c, "expected", &en), *raises = str_field(c, "raises", &rn);
		if (!expected && !raises) {   /* undetermined: no verdict */
			skipped++;
			tpl_heap_free(h);
			continue;
		}
		char tpath[4096];
		snprintf(tpath, sizeof tpath, "%s/chat/templates/%s", getenv("PAGODA_TESTDATA"), tname);
		size_t sn;
		char *src = slurp(tpath, &sn);
		ck_assert_msg(src, "cannot read %s", tpath);
		struct tpl_template *t;
		struct tpl_error e;
		char *out = NULL;
		size_t outn = 0;
		struct tpl_opts o = { .now = FROZEN_NOW };
		int rc = tpl_compile(src, sn, &t, &e);
		if (rc == 0) {
			rc = tpl_render(t, h, c, &o, &out, &outn, &e);
			tpl_free(t);
		}
		bool ok;
		if (expected)
			ok = rc == 0 && outn == en && !memcmp(out, expected, en);
		else
			ok = rc != 0 && e.raised && strlen(e.msg) == rn && !memcmp(e.msg, raises, rn);
		if (ok) {
			pass++;
		} else {
			fail++;
			fprintf(stderr, "FAIL %s / %s: %s\n", tname, cname,
				rc ? e.msg : "output differs");
			if (rc == 0 && getenv("TPL_DIFF")) {
				fprintf(stderr, "--- expected\n%s\n--- got\n%s\n---\n", expected ? expected : "(raise)", out);
			}
		}
		free(out);
		free(src);
		tpl_heap_free(h);
	}
	free(all);
	fprintf(stderr, "chat cases: %d pass, %d fail, %d undetermined\n", pass, fail, skipped);
	ck_assert_int_eq(fail, 0);
	ck_assert_int_gt(pass, 200);
}
END_TEST

/* Render src with {"x": 3, "l": [1, 2]}: 0 and the text in out, or -1 and e. */
static int run(const char *src, char **out, struct tpl_error *e)
{
	struct tpl_heap *h = tpl_heap_new(8u << 20);
	struct tpl_val *vars;
	struct tpl_template *t;
	char err[128];
	size_t n;
	const char *json = "{\"x\": 3, \"l\": [1, 2]}";
	ck_assert_int_eq(tpl_json_parse(h, json, strlen(json), &vars, err, sizeof err), 0);
	int rc = tpl_compile(src, strlen(src), &t, e);
	if (rc == 0) {
		struct tpl_opts o = { .max_output = 1u << 16 };
		rc = tpl_render(t, h, vars, &o, out, &n, e);
		tpl_free(t);
	}
	tpl_heap_free(h);
	return rc;
}

static void expect_text(const char *src, const char *want)
{
	char *out = NULL;
	struct tpl_error e;
	ck_assert_msg(run(src, &out, &e) == 0, "%s: %s", src, e.msg);
	ck_assert_str_eq(out, want);
	free(out);
}

static void expect_error(const char *src, const char *want)
{
	char *out = NULL;
	struct tpl_error e;
	ck_assert_msg(run(src, &out, &e) != 0, "%s rendered '%s'", src, out);
	ck_assert_msg(strstr(e.msg, want), "%s: error '%s' lacks '%s'", src, e.msg, want);
}

START_TEST(test_whitespace)
{
	/* trim_blocks drops the newline after a tag, lstrip_blocks the indent before it */
	expect_text("a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "a\n  b\nc");
	expect_text("  {{ x }}\n", "  3");                 /* not for {{ }} */
	expect_text("a  {%- if true -%}  b  {%- endif %}", "ab");
	expect_text("a\n  {%+ if true %}b{% endif %}", "a\n  b");
	expect_text("{# c #}\nx {#- c -#} y", "xy");
	expect_text("a\r\nb\r\n", "a\nb");                 /* newlines normalised, last dropped */
}
END_TEST

START_TEST(test_scoping)
{
	expect_text("{% set y = 1 %}{% for i in l %}{% set y = i %}{% endfor %}{{ y }}", "1");
	expect_text("{% set ns = namespace(y=1) %}{% for i in l %}{% set ns.y = i %}{% endfor %}{{ ns.y }}", "2");
	expect_text("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", "5");
	expect_text("{% macro m(a, b=x) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(b=2, a=0) }}", "1302");
}
END_TEST

START_TEST(test_errors_name_line_and_construct)
{
	expect_error("a\n{% include 'x' %}", "line 2: unsupported tag 'include'");
	expect_error("{{ x | frobnicate }}", "line 1: unsupported filter 'frobnicate'");
	expect_error("\n\n{{ x is frob }}", "line 3: unsupported test 'frob'");
	expect_error("{% if x %}", "missing 'endif'");
	expect_error("{% for a in l %}{% endif %}", "line 1: unexpected tag 'endif'");
	expect_error("{{ x + }}", "line 1: expected an expression");
	expect_error("{{ 'abc }}", "unterminated string");
	expect_error("{{ nope.attr }}", "UndefinedError: 'nope' is undefined");
	expect_error("{{ l.append(3) }}", "SecurityError: access to attribute 'append' of 'list' object is unsafe.");
	expect_error("{{ 1 / 0 }}", "ZeroDivisionError");
	expect_error("{{ 9223372036854775807 + 1 }}", "OverflowError");
	char *out;
	struct tpl_error e;
	ck_assert_int_ne(run("\n{{ raise_exception('no ' ~ x) }}", &out, &e), 0);
	ck_assert(e.raised);
	ck_assert_str_eq(e.msg, "no 3");
	ck_assert_int_eq(e.line, 2);
}
END_TEST

START_TEST(test_limits)
{
	/* recursion, loop counts, output and nesting are bounded, not fatal */
	expect_error("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "recursion deeper than");
	expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
		     "limit");   /* memory or iterations, whichever comes first */
	expect_error("{% set l = range(3000000) %}", "limit");
	expect_error("{% for i in range(1000) %}{{ 'x' * 1000 }}{% endfor %}", "output limit");
	char deep[4096] = "{{ ";
	for (int i = 0; i < 1000; i++)
		strcat(deep, "(");
	strcat(deep, "1");
	for (int i = 0; i < 1000; i++)
		strcat(deep, ")");
	strcat(deep, " }}");
	expect_error(deep, "nesting deeper than");
	expect_error("{{ 'x' * 100000000000 }}", "too large");
}
END_TEST

START_TEST(test_json_strict)
{
	static const char *bad[] = {
		"", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "+1", "'x'", "\"\\x\"", "\"\x01\"",
		"\"\\ud800\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"", "nul", "[1] 2", "{1: 2}", "1e999",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct tpl_heap *h = tpl_heap_new(0);
		struct tpl_val *v;
		char err[128] = "";
		ck_assert_msg(tpl_json_parse(h, bad[i], strlen(bad[i]), &v, err, sizeof err) != 0, "accepted %s", bad[i]);
		ck_assert_msg(strstr(err, "at byte"), "%s", err);
		tpl_heap_free(h);
	}
	char deep[300];
	memset(deep, '[', sizeof deep);
	struct tpl_heap *h = tpl_heap_new(0);
	struct tpl_val *v;
	char err[128];
	ck_assert_int_ne(tpl_json_parse(h, deep, sizeof deep, &v, err, sizeof err), 0);
	const char *ok = "{\"a\": [1, -2.5e3, true, null, \"\\u00e9\\ud83d\\ude00\"], \"a\": 9223372036854775808}";
	ck_assert_int_eq(tpl_json_parse(h, ok, strlen(ok), &v, err, sizeof err), 0);
	size_t n;
	ck_assert(tpl_dict_get(v, "a") && !tpl_str_data(tpl_dict_get(v, "a"), &n)); /* later key wins: a float */
	tpl_heap_free(h);
}
END_TEST

static const char *str_field(struct tpl_val *d, const char *k, size_t *n)
{
	struct tpl_val *v = tpl_dict_get(d, k);
	return v ? tpl_str_data(v, n) : NULL;
}

Suite *template_suite(void)
{
	Suite *s = suite_create("template");
	TCase *tc = tcase_create("conformance");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cases);
	suite_add_tcase(s, tc);
	tc = tcase_create("engine");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_whitespace);
	tcase_add_test(tc, test_scoping);
	tcase_add_test(tc, test_errors_name_line_and_construct);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_json_strict);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(template_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
