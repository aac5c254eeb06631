/* daemon/template/builtins.c — the filters, tests, methods and globals
 * chat templates use, with Jinja2's and Python's semantics. */
#include "daemon/template/tpl.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H (tpl_render_heap(r))

static struct tpl_val *mkstr(struct tpl_render *r, struct tpl_buf *b)
{
	struct tpl_val *v = tpl_new(H, V_STR);
	v->str.s = b->s ? b->s : "";
	v->str.n = b->n;
	return v;
}

static struct tpl_val *as_str(struct tpl_render *r, struct tpl_val *v)
{
	if (v->kind == V_STR)
		return v;
	struct tpl_buf b = { 0 };
	tpl_str_of(H, &b, v);
	return mkstr(r, &b);
}

/* Argument i (positional) or the keyword name; def when absent. */
static struct tpl_val *arg(struct tpl_args *a, size_t i, const char *name, struct tpl_val *def)
{
	if (i < a->npos)
		return a->pos[i];
	for (size_t k = 0; k < a->nkw; k++)
		if (!strcmp(a->kwn[k], name))
			return a->kwv[k];
	return def;
}

static void max_args(struct tpl_render *r, int line, struct tpl_args *a, size_t n, const char *what)
{
	if (a->npos > n)
		tpl_fail(H, line, "TypeError: %s takes at most %zu argument(s) (%zu given)", what, n, a->npos);
}

static const struct tpl_val *need_str(struct tpl_render *r, int line, const struct tpl_val *v, const char *what)
{
	if (v->kind == V_UNDEF)
		tpl_fail(H, line, "%.*s", (int)v->str.n, v->str.s ? v->str.s : "UndefinedError");
	if (v->kind != V_STR)
		tpl_fail(H, line, "TypeError: %s needs a string, not %s", what, tpl_type_name(v));
	return v;
}

static int64_t need_int(struct tpl_render *r, int line, const struct tpl_val *v, const char *what)
{
	if (v->kind == V_INT)
		return v->i;
	if (v->kind == V_BOOL)
		return v->b;
	tpl_fail(H, line, "TypeError: %s needs an integer, not %s", what, tpl_type_name(v));
}

static bool is_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* str.strip / lstrip / rstrip: chars NULL strips whitespace. */
static struct tpl_val *strip(struct tpl_render *r, const struct tpl_val *s, const struct tpl_val *chars,
			     bool left, bool right)
{
	const char *p = s->str.s;
	size_t a = 0, b = s->str.n;
	bool ws = !chars || chars->kind == V_NONE;
#define STRIPPABLE(c) (ws ? is_space(c) : memchr(chars->str.s, (c), chars->str.n) != NULL)
	if (!ws && chars->kind != V_STR)
		tpl_fail(H, 0, "TypeError: strip arg must be None or str");
	while (left && a < b && STRIPPABLE((unsigned char)p[a]))
		a++;
	while (right && b > a && STRIPPABLE((unsigned char)p[b - 1]))
		b--;
#undef STRIPPABLE
	return tpl_str(H, p + a, b - a);
}

static struct tpl_val *split(struct tpl_render *r, int line, const struct tpl_val *s,
			     const struct tpl_val *sep, int64_t maxsplit)
{
	struct tpl_val *l = tpl_list(H);
	const char *p = s->str.s;
	size_t n = s->str.n, i = 0;
	if (!sep || sep->kind == V_NONE) {
		while (i < n) {
			while (i < n && is_space(p[i]))
				i++;
			if (i >= n)
				break;
			if (maxsplit >= 0 && (int64_t)l->list.n >= maxsplit) {
				size_t e = n;
				while (e > i && is_space(p[e - 1]))
					e--;
				tpl_list_add(H, l, tpl_str(H, p + i, e - i));
				break;
			}
			size_t j = i;
			while (j < n && !is_space(p[j]))
				j++;
			tpl_list_add(H, l, tpl_str(H, p + i, j - i));
			i = j;
		}
		return l;
	}
	need_str(r, line, sep, "split");
	if (!sep->str.n)
		tpl_fail(H, line, "ValueError: empty separator");
	for (;;) {
		const char *f = maxsplit >= 0 && (int64_t)l->list.n >= maxsplit ? NULL
			: memmem(p + i, n - i, sep->str.s, sep->str.n);
		if (!f) {
			tpl_list_add(H, l, tpl_str(H, p + i, n - i));
			return l;
		}
		tpl_list_add(H, l, tpl_str(H, p + i, f - (p + i)));
		i = f - p + sep->str.n;
	}
}

static struct tpl_val *replace(struct tpl_render *r, int line, const struct tpl_val *s,
			       const struct tpl_val *old, const struct tpl_val *new, int64_t count)
{
	need_str(r, line, old, "replace");
	new = need_str(r, line, new, "replace");
	struct tpl_buf b = { .max = r ? 0 : 0 };
	tpl_buf_put(H, &b, "", 0);
	const char *p = s->str.s;
	size_t n = s->str.n, i = 0;
	int64_t done = 0;
	if (!old->str.n) {   /* Python inserts new between every character */
		for (;;) {
			if (count >= 0 && done >= count) {
				tpl_buf_put(H, &b, p + i, n - i);
				break;
			}
			tpl_buf_put(H, &b, new->str.s, new->str.n);
			done++;
			if (i >= n)
				break;
			size_t j = i + 1;
			while (j < n && ((unsigned char)p[j] & 0xc0) == 0x80)
				j++;
			tpl_buf_put(H, &b, p + i, j - i);
			i = j;
		}
		return mkstr(r, &b);
	}
	for (;;) {
		const char *f = count >= 0 && done >= count ? NULL : memmem(p + i, n - i, old->str.s, old->str.n);
		if (!f) {
			tpl_buf_put(H, &b, p + i, n - i);
			return mkstr(r, &b);
		}
		tpl_buf_put(H, &b, p + i, f - (p + i));
		tpl_buf_put(H, &b, new->str.s, new->str.n);
		i = f - p + old->str.n;
		done++;
	}
}

static bool has_prefix(const struct tpl_val *s, const struct tpl_val *x, bool end)
{
	if (x->kind != V_STR || x->str.n > s->str.n)
		return false;
	return !memcmp(s->str.s + (end ? s->str.n - x->str.n : 0), x->str.s, x->str.n);
}

static struct tpl_val *starts_ends(struct tpl_render *r, int line, const struct tpl_val *s,
				   const struct tpl_val *x, bool end)
{
	if (x->kind == V_LIST && x->tuple) {
		for (size_t i = 0; i < x->list.n; i++)
			if (has_prefix(s, x->list.v[i], end))
				return tpl_bool(H, true);
		return tpl_bool(H, false);
	}
	need_str(r, line, x, end ? "endswith" : "startswith");
	return tpl_bool(H, has_prefix(s, x, end));
}

static struct tpl_val *case_map(struct tpl_render *r, const struct tpl_val *s, int mode)
{
	/* mode 0 lower, 1 upper, 2 capitalize, 3 title; ASCII letters only */
	char *o = tpl_strdup(H, s->str.s, s->str.n);
	bool word_start = true;
	for (size_t i = 0; i < s->str.n; i++) {
		unsigned char c = o[i];
		bool up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && word_start);
		if (c < 0x80)
			o[i] = up ? toupper(c) : tolower(c);
		word_start = !isalpha(c) && c < 0x80;
	}
	struct tpl_val *v = tpl_new(H, V_STR);
	v->str.s = o;
	v->str.n = s->str.n;
	return v;
}

/* str.format with {} {0} {name} fields (conversions !s !r; no format specs). */
static struct tpl_val *format(struct tpl_render *r, int line, const struct tpl_val *s, struct tpl_args *a)
{
	struct tpl_buf b = { 0 };
	size_t autoi = 0;
	tpl_buf_put(H, &b, "", 0);
	for (size_t i = 0; i < s->str.n; i++) {
		char c = s->str.s[i];
		if ((c == '{' || c == '}') && i + 1 < s->str.n && s->str.s[i + 1] == c) {
			tpl_buf_put(H, &b, &c, 1);
			i++;
			continue;
		}
		if (c == '}')
			tpl_fail(H, line, "ValueError: Single '}' encountered in format string");
		if (c != '{') {
			tpl_buf_put(H, &b, &c, 1);
			continue;
		}
		const char *e = memchr(s->str.s + i, '}', s->str.n - i);
		if (!e)
			tpl_fail(H, line, "ValueError: Single '{' encountered in format string");
		const char *f = s->str.s + i + 1;
		size_t fl = e - f;
		const char *conv = memchr(f, '!', fl);
		if (memchr(f, ':', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
			tpl_fail(H, line, "unsupported construct: format field '{%.*s}'", (int)(fl > 40 ? 40 : fl), f);
		size_t nl = conv ? (size_t)(conv - f) : fl;
		struct tpl_val *v = NULL;
		if (nl == 0) {
			v = autoi < a->npos ? a->pos[autoi++] : NULL;
		} else if (isdigit((unsigned char)f[0])) {
			size_t k = strtoul(f, NULL, 10);
			v = k < a->npos ? a->pos[k] : NULL;
		} else {
			for (size_t k = 0; k < a->nkw; k++)
				if (strlen(a->kwn[k]) == nl && !memcmp(a->kwn[k], f, nl))
					v = a->kwv[k];
		}
		if (!v)
			tpl_fail(H, line, "IndexError: format field '{%.*s}' has no argument", (int)(fl > 40 ? 40 : fl), f);
		if (conv && conv + 1 < e && conv[1] == 'r')
			tpl_repr(H, &b, v);
		else
			tpl_str_of(H, &b, v);
		i = e - s->str.s;
	}
	return mkstr(r, &b);
}

struct tpl_val *tpl_percent(struct tpl_render *r, int line, const struct tpl_val *fmt,
			    struct tpl_val **args, size_t nargs)
{
	struct tpl_buf b = { 0 };
	size_t k = 0;
	const char *s = fmt->str.s, *end = s + fmt->str.n;
	tpl_buf_put(H, &b, "", 0);
	while (s < end) {
		const char *pct = memchr(s, '%', end - s);
		if (!pct) {
			tpl_buf_put(H, &b, s, end - s);
			break;
		}
		tpl_buf_put(H, &b, s, pct - s);
		const char *p = pct + 1;
		struct tpl_val *named = NULL;
		if (p < end && *p == '(') {   /* %(key)s: the argument is a mapping */
			const char *close = memchr(p, ')', end - p);
			if (!close || nargs != 1 || args[0]->kind != V_DICT)
				tpl_fail(H, line, "TypeError: format requires a mapping");
			named = tpl_dict_findz(args[0], p + 1, close - p - 1);
			if (!named)
				tpl_fail(H, line, "KeyError: '%.*s'", (int)(close - p - 1 > 40 ? 40 : close - p - 1), p + 1);
			p = close + 1;
		}
		char flags[8] = "";
		int nf = 0, width = -1, prec = -1;
		while (p < end && strchr("-0+ #", *p) && nf < 6)
			flags[nf++] = *p++;
		if (p < end && isdigit((unsigned char)*p))
			for (width = 0; p < end && isdigit((unsigned char)*p) && width < 1000; p++)
				width = width * 10 + (*p - '0');
		if (p < end && *p == '.')
			for (p++, prec = 0; p < end && isdigit((unsigned char)*p) && prec < 100; p++)
				prec = prec * 10 + (*p - '0');
		if (p >= end)
			tpl_fail(H, line, "ValueError: incomplete format");
		char conv = *p++;
		s = p;
		if (conv == '%') {
			tpl_buf_put(H, &b, "%", 1);
			continue;
		}
		if (!named && k >= nargs)
			tpl_fail(H, line, "TypeError: not enough arguments for format string");
		struct tpl_val *v = named ? named : args[k++];
		if (named)
			k = nargs;
		char spec[32], out[512];
		if (conv == 's' || conv == 'r') {
			struct tpl_buf t = { 0 };
			tpl_buf_put(H, &t, "", 0);
			if (conv == 's')
				tpl_str_of(H, &t, v);
			else
				tpl_repr(H, &t, v);
			size_t n = prec >= 0 && (size_t)prec < t.n ? (size_t)prec : t.n;
			size_t w = tpl_utf8_len(t.s, n);
			bool left = strchr(flags, '-') != NULL;
			for (size_t i = 0; !left && width > 0 && i + w < (size_t)width; i++)
				tpl_buf_put(H, &b, " ", 1);
			tpl_buf_put(H, &b, t.s, n);
			for (size_t i = 0; left && width > 0 && i + w < (size_t)width; i++)
				tpl_buf_put(H, &b, " ", 1);
			continue;
		}
		if (!strchr("dixXoeEfFgG", conv))
			tpl_fail(H, line, "ValueError: unsupported format character '%c'", conv);
		if (v->kind != V_INT && v->kind != V_FLOAT && v->kind != V_BOOL)
			tpl_fail(H, line, "TypeError: %%%c format: a real number is required, not %s", conv,
				 tpl_type_name(v));
		double d = v->kind == V_FLOAT ? v->f : v->kind == V_INT ? (double)v->i : v->b;
		if (strchr("dixXo", conv)) {
			long long i = v->kind == V_INT ? v->i : (long long)d;
			/* the '*' placeholders only where a width / precision was given */
			snprintf(spec, sizeof spec, "%%%s%s%s%s", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "",
				 conv == 'x' ? "llx" : conv == 'X' ? "llX" : conv == 'o' ? "llo" : "lld");
			if (width >= 0 && prec >= 0)
				snprintf(out, sizeof out, spec, width, prec, i);
			else if (width >= 0)
				snprintf(out, sizeof out, spec, width, i);
			else if (prec >= 0)
				snprintf(out, sizeof out, spec, prec, i);
			else
				snprintf(out, sizeof out, spec, i);
		} else {
			snprintf(spec, sizeof spec, "%%%s%s%s%c", flags, width >= 0 ? "*" : "", prec >= 0 ? ".*" : "", conv);
			if (width >= 0 && prec >= 0)
				snprintf(out, sizeof out, spec, width, prec, d);
			else if (width >= 0)
				snprintf(out, sizeof out, spec, width, d);
			else if (prec >= 0)
				snprintf(out, sizeof out, spec, prec, d);
			else
				snprintf(out, sizeof out, spec, d);
		}
		tpl_buf_put(H, &b, out, strlen(out));
	}
	if (k < nargs)
		tpl_fail(H, line, "TypeError: not all arguments converted during string formatting");
	return mkstr(r, &b);
}

bool tpl_has_method(const struct tpl_val *self, const char *name)
{
	static const char *const str_m[] = {
		"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace",
		"upper", "lower", "title", "capitalize", "find", "rfind", "count", "format", "join",
		"isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", NULL,
	};
	static const char *const dict_m[] = { "get", "items", "keys", "values", NULL };
	static const char *const list_m[] = { "index", "count", NULL };
	const char *const *m = self->kind == V_STR ? str_m : self->kind == V_DICT && !self->ns ? dict_m
		: self->kind == V_LIST ? list_m : NULL;
	for (; m && *m; m++)
		if (!strcmp(*m, name))
			return true;
	return false;
}

static struct tpl_val *pairs(struct tpl_render *r, const struct tpl_val *d)
{
	struct tpl_val *l = tpl_list(H);
	for (size_t i = 0; i < d->dict.n; i++) {
		struct tpl_val *t = tpl_list(H);
		t->tuple = true;
		tpl_list_add(H, t, d->dict.k[i]);
		tpl_list_add(H, t, d->dict.v[i]);
		tpl_list_add(H, l, t);
	}
	return l;
}

static bool str_class(const struct tpl_val *s, int (*cls)(int))
{
	if (!s->str.n)
		return false;
	for (size_t i = 0; i < s->str.n; i++)
		if (!cls((unsigned char)s->str.s[i]))
			return false;
	return true;
}

struct tpl_val *tpl_method(struct tpl_render *r, int line, struct tpl_val *self, const char *name,
			   struct tpl_args *a)
{
	struct tpl_val *none = tpl_none(H);
#define IS(w) (!strcmp(name, w))
	if (self->kind == V_DICT) {
		if (IS("get")) {
			max_args(r, line, a, 2, "get");
			struct tpl_val *k = arg(a, 0, "key", NULL);
			if (!k)
				tpl_fail(H, line, "TypeError: get expected at least 1 argument");
			struct tpl_val *v = tpl_dict_find(self, k);
			return v ? v : arg(a, 1, "default", none);
		}
		if (IS("items"))
			return pairs(r, self);
		if (IS("cycle")) {   /* loop.cycle(a, b, ...): the loop dict's own method */
			struct tpl_val *i0 = tpl_dict_findz(self, "index0", 6);
			if (!a->npos || !i0 || i0->kind != V_INT)
				tpl_fail(H, line, "TypeError: cycle needs at least one item");
			return a->pos[i0->i % (int64_t)a->npos];
		}
		struct tpl_val *l = tpl_list(H);
		for (size_t i = 0; i < self->dict.n; i++)
			tpl_list_add(H, l, IS("keys") ? self->dict.k[i] : self->dict.v[i]);
		return l;
	}
	if (self->kind == V_LIST) {
		struct tpl_val *x = arg(a, 0, "value", NULL);
		if (!x)
			tpl_fail(H, line, "TypeError: %s expected 1 argument", name);
		int64_t c = 0;
		for (size_t i = 0; i < self->list.n; i++)
			if (tpl_equal(self->list.v[i], x)) {
				if (IS("index"))
					return tpl_int(H, i);
				c++;
			}
		if (IS("index"))
			tpl_fail(H, line, "ValueError: value is not in list");
		return tpl_int(H, c);
	}
	/* str */
	if (IS("strip") || IS("lstrip") || IS("rstrip"))
		return strip(r, self, arg(a, 0, "chars", NULL), !IS("rstrip"), !IS("lstrip"));
	if (IS("split") || IS("rsplit")) {
		struct tpl_val *m = arg(a, 1, "maxsplit", NULL);
		if (IS("rsplit") && m && need_int(r, line, m, "rsplit") >= 0)
			tpl_fail(H, line, "unsupported construct: rsplit with maxsplit");
		return split(r, line, self, arg(a, 0, "sep", NULL), m ? need_int(r, line, m, "split") : -1);
	}
	if (IS("startswith") || IS("endswith")) {
		struct tpl_val *x = arg(a, 0, "prefix", NULL);
		if (!x)
			tpl_fail(H, line, "TypeError: %s takes at least 1 argument", name);
		return starts_ends(r, line, self, x, IS("endswith"));
	}
	if (IS("replace")) {
		struct tpl_val *o = arg(a, 0, "old", NULL), *n = arg(a, 1, "new", NULL), *c = arg(a, 2, "count", NULL);
		if (!o || !n)
			tpl_fail(H, line, "TypeError: replace expected at least 2 arguments");
		return replace(r, line, self, o, n, c ? need_int(r, line, c, "replace") : -1);
	}
	if (IS("upper") || IS("lower") || IS("capitalize") || IS("title"))
		return case_map(r, self, IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 3);
	if (IS("find") || IS("rfind") || IS("count")) {
		const struct tpl_val *x = need_str(r, line, arg(a, 0, "sub", none), name);
		int64_t found = -1, c = 0;
		for (size_t i = 0; i + x->str.n <= self->str.n; i++)
			if (!memcmp(self->str.s + i, x->str.s, x->str.n)) {
				if (found < 0 || IS("rfind"))
					found = tpl_utf8_len(self->str.s, i);
				c++;
				if (IS("count") && x->str.n)
					i += x->str.n - 1;
			}
		return tpl_int(H, IS("count") ? c : found);
	}
	if (IS("format"))
		return format(r, line, self, a);
	if (IS("join")) {
		struct tpl_val *l = tpl_iter_list(r, line, arg(a, 0, "iterable", none));
		struct tpl_buf b = { 0 };
		tpl_buf_put(H, &b, "", 0);
		for (size_t i = 0; i < l->list.n; i++) {
			if (i)
				tpl_buf_put(H, &b, self->str.s, self->str.n);
			need_str(r, line, l->list.v[i], "join");
			tpl_buf_put(H, &b, l->list.v[i]->str.s, l->list.v[i]->str.n);
		}
		return mkstr(r, &b);
	}
	if (IS("splitlines")) {
		struct tpl_val *l = tpl_list(H);
		size_t i = 0, n = self->str.n;
		while (i < n) {
			size_t j = i;
			while (j < n && self->str.s[j] != '\n' && self->str.s[j] != '\r')
				j++;
			tpl_list_add(H, l, tpl_str(H, self->str.s + i, j - i));
			if (j + 1 < n && self->str.s[j] == '\r' && self->str.s[j + 1] == '\n')
				j++;
			i = j + 1;
		}
		return l;
	}
	if (IS("isdigit"))
		return tpl_bool(H, str_class(self, isdigit));
	if (IS("isalpha"))
		return tpl_bool(H, str_class(self, isalpha));
	if (IS("isalnum"))
		return tpl_bool(H, str_class(self, isalnum));
	if (IS("isspace"))
		return tpl_bool(H, str_class(self, isspace));
	if (IS("islower") || IS("isupper")) {
		bool cased = false, ok = true;
		for (size_t i = 0; i < self->str.n; i++) {
			int c = (unsigned char)self->str.s[i];
			if (islower(c) || isupper(c)) {
				cased = true;
				ok &= IS("islower") ? islower(c) != 0 : isupper(c) != 0;
			}
		}
		return tpl_bool(H, cased && ok);
	}
#undef IS
	tpl_fail(H, line, "unsupported method '%s' of %s", name, tpl_type_name(self));
}

/* ---- sorting: a merge sort whose comparison may fail (longjmp) ---- */

struct sortkey {
	struct tpl_render *r;
	int line;
	bool fold, reverse;
};

static int key_cmp(struct sortkey *k, struct tpl_val *a, struct tpl_val *b)
{
	if (k->fold && a->kind == V_STR && b->kind == V_STR) {
		struct tpl_render *r = k->r;
		a = case_map(r, a, 0);
		b = case_map(r, b, 0);
	}
	int c = tpl_compare(tpl_render_heap(k->r), k->line, a, b);
	return k->reverse ? -c : c;
}

static void msort(struct sortkey *k, struct tpl_val **v, struct tpl_val **keys, struct tpl_val **tv,
		  struct tpl_val **tk, size_t n)
{
	if (n < 2)
		return;
	size_t m = n / 2;
	msort(k, v, keys, tv, tk, m);
	msort(k, v + m, keys + m, tv, tk, n - m);
	size_t i = 0, j = m, o = 0;
	while (i < m && j < n) {
		if (key_cmp(k, keys[j], keys[i]) < 0) {
			tv[o] = v[j]; tk[o++] = keys[j++];
		} else {
			tv[o] = v[i]; tk[o++] = keys[i++];
		}
	}
	while (i < m) { tv[o] = v[i]; tk[o++] = keys[i++]; }
	while (j < n) { tv[o] = v[j]; tk[o++] = keys[j++]; }
	memcpy(v, tv, n * sizeof *v);
	memcpy(keys, tk, n * sizeof *keys);
}

static struct tpl_val *sorted(struct tpl_render *r, struct sortkey *k, struct tpl_val *items,
			      struct tpl_val **keys)
{
	size_t n = items->list.n;
	struct tpl_val *l = tpl_list(H);
	l->list.v = tpl_alloc(H, (n + 1) * sizeof *l->list.v);
	l->list.n = l->list.cap = n;
	if (n)
		memcpy(l->list.v, items->list.v, n * sizeof *l->list.v);
	struct tpl_val **tv = tpl_alloc(H, (n + 1) * sizeof *tv), **tk = tpl_alloc(H, (n + 1) * sizeof *tk);
	msort(k, l->list.v, keys, tv, tk, n);
	return l;
}

/* Jinja's attribute paths ("a.b", "0"): item access first, then attribute. */
static struct tpl_val *attr_path(struct tpl_render *r, int line, struct tpl_val *v, const struct tpl_val *path)
{
	if (path->kind == V_INT)
		return tpl_getitem(r, line, v, (struct tpl_val *)path);
	need_str(r, line, path, "attribute");
	const char *p = path->str.s, *end = p + path->str.n;
	while (p <= end) {
		const char *dot = memchr(p, '.', end - p);
		if (!dot)
			dot = end;
		struct tpl_val *k;
		char *e;
		long long idx = strtoll(p, &e, 10);
		if (dot > p && e == dot)
			k = tpl_int(H, idx);
		else
			k = tpl_str(H, p, dot - p);
		if (v->kind == V_UNDEF)
			return v;
		v = tpl_getitem(r, line, v, k);
		p = dot + 1;
	}
	return v;
}

static struct tpl_val *sort_filter(struct tpl_render *r, int line, struct tpl_val *v, struct tpl_args *a,
				   bool dictsort)
{
	struct sortkey k = { .r = r, .line = line };
	struct tpl_val *f = tpl_bool(H, false);
	struct tpl_val *items = dictsort ? pairs(r, v) : tpl_iter_list(r, line, v);
	k.fold = !tpl_truthy(arg(a, dictsort ? 0 : 1, "case_sensitive", f));
	k.reverse = tpl_truthy(arg(a, dictsort ? 2 : 0, "reverse", f));
	struct tpl_val *attr = dictsort ? NULL : arg(a, 2, "attribute", NULL);
	struct tpl_val *by = dictsort ? arg(a, 1, "by", NULL) : NULL;
	bool by_value = by && by->kind == V_STR && by->str.n == 5 && !memcmp(by->str.s, "value", 5);
	struct tpl_val **keys = tpl_alloc(H, (items->list.n + 1) * sizeof *keys);
	for (size_t i = 0; i < items->list.n; i++) {
		struct tpl_val *x = items->list.v[i];
		keys[i] = dictsort ? x->list.v[by_value] : attr ? attr_path(r, line, x, attr) : x;
	}
	return sorted(r, &k, items, keys);
}

static struct tpl_val *unique(struct tpl_render *r, int line, struct tpl_val *v, struct tpl_args *a)
{
	struct tpl_val *items = tpl_iter_list(r, line, v), *out = tpl_list(H), *seen = tpl_list(H);
	bool fold = !tpl_truthy(arg(a, 0, "case_sensitive", tpl_bool(H, false)));
	struct tpl_val *attr = arg(a, 1, "attribute", NULL);
	for (size_t i = 0; i < items->list.n; i++) {
		struct tpl_val *x = items->list.v[i], *key = attr ? attr_path(r, line, x, attr) : x;
		if (fold && key->kind == V_STR)
			key = case_map(r, key, 0);
		bool dup = false;
		for (size_t j = 0; j < seen->list.n && !dup; j++)
			dup = tpl_equal(seen->list.v[j], key);
		tpl_tick(r, line);
		if (!dup) {
			tpl_list_add(H, seen, key);
			tpl_list_add(H, out, x);
		}
	}
	return out;
}

static struct tpl_val *indent(struct tpl_render *r, int line, struct tpl_val *v, struct tpl_args *a)
{
	struct tpl_val *w = arg(a, 0, "width", NULL);
	bool first = tpl_truthy(arg(a, 1, "first", tpl_bool(H, false)));
	bool blank = tpl_truthy(arg(a, 2, "blank", tpl_bool(H, false)));
	struct tpl_buf ind = { 0 }, b = { 0 };
	tpl_buf_put(H, &ind, "", 0);
	if (w && w->kind == V_STR) {
		tpl_buf_put(H, &ind, w->str.s, w->str.n);
	} else {
		int64_t n = w ? need_int(r, line, w, "indent") : 4;
		if (n > 4096)
			tpl_fail(H, line, "indent width too large");
		for (int64_t i = 0; i < n; i++)
			tpl_buf_put(H, &ind, " ", 1);
	}
	struct tpl_val *s = as_str(r, v);
	/* Jinja appends a newline, then splits lines: a trailing newline goes */
	struct tpl_val *lines = tpl_list(H);
	size_t i = 0, n = s->str.n;
	while (i <= n) {
		size_t j = i;
		while (j < n && s->str.s[j] != '\n' && s->str.s[j] != '\r')
			j++;
		if (j == n && i == n)
			break;
		tpl_list_add(H, lines, tpl_str(H, s->str.s + i, j - i));
		if (j + 1 < n && s->str.s[j] == '\r' && s->str.s[j + 1] == '\n')
			j++;
		i = j + 1;
	}
	tpl_buf_put(H, &b, "", 0);
	if (first)
		tpl_buf_put(H, &b, ind.s, ind.n);
	for (size_t k = 0; k < lines->list.n; k++) {
		struct tpl_val *l = lines->list.v[k];
		if (k) {
			tpl_buf_put(H, &b, "\n", 1);
			if (blank || l->str.n)
				tpl_buf_put(H, &b, ind.s, ind.n);
		}
		tpl_buf_put(H, &b, l->str.s, l->str.n);
	}
	return mkstr(r, &b);
}

static struct tpl_val *select_items(struct tpl_render *r, int line, struct tpl_val *v, struct tpl_args *a,
				    bool by_attr, bool keep)
{
	/* Jinja skips a false value ("if value:") instead of iterating it */
	struct tpl_val *items = tpl_truthy(v) ? tpl_iter_list(r, line, v) : tpl_list(H), *out = tpl_list(H);
	size_t skip = by_attr ? 1 : 0;
	struct tpl_val *attr = by_attr ? arg(a, 0, "attribute", NULL) : NULL;
	if (by_attr && !attr)
		tpl_fail(H, line, "TypeError: selectattr needs an attribute");
	struct tpl_val *test = a->npos > skip ? a->pos[skip] : NULL;
	if (test)
		need_str(r, line, test, "test name");
	struct tpl_args rest = { .pos = a->pos + (a->npos > skip + 1 ? skip + 1 : a->npos),
				 .npos = a->npos > skip + 1 ? a->npos - skip - 1 : 0 };
	for (size_t i = 0; i < items->list.n; i++) {
		struct tpl_val *x = items->list.v[i], *k = attr ? attr_path(r, line, x, attr) : x;
		bool t = test ? tpl_test(r, line, test->str.s, k, &rest) : tpl_truthy(k);
		tpl_tick(r, line);
		if (t == keep)
			tpl_list_add(H, out, x);
	}
	return out;
}

static struct tpl_val *map(struct tpl_render *r, int line, struct tpl_val *v, struct tpl_args *a)
{
	struct tpl_val *items = tpl_truthy(v) ? tpl_iter_list(r, line, v) : tpl_list(H), *out = tpl_list(H);
	struct tpl_val *attr = a->npos ? NULL : arg(a, 99, "attribute", NULL);
	struct tpl_val *def = arg(a, 99, "default", NULL);
	if (!attr && !a->npos)
		tpl_fail(H, line, "TypeError: map needs a filter name or attribute=");
	if (!attr)
		need_str(r, line, a->pos[0], "map");
	struct tpl_args rest = { .pos = a->pos + (a->npos ? 1 : 0), .npos = a->npos ? a->npos - 1 : 0 };
	for (size_t i = 0; i < items->list.n; i++) {
		struct tpl_val *x = items->list.v[i], *y;
		tpl_tick(r, line);
		if (attr) {
			y = attr_path(r, line, x, attr);
			if (y->kind == V_UNDEF && def)
				y = def;
		} else {
			y = tpl_filter(r, line, a->pos[0]->str.s, x, &rest);
		}
		tpl_list_add(H, out, y);
	}
	return out;
}

static double to_float(struct tpl_render *r, struct tpl_val *v, double def)
{
	if (v->kind == V_FLOAT)
		return v->f;
	if (v->kind == V_INT)
		return (double)v->i;
	if (v->kind == V_BOOL)
		return v->b;
	if (v->kind == V_STR) {
		char *s = tpl_strdup(H, v->str.s, v->str.n), *e;
		double d = strtod(s, &e);
		while (is_space(*e))
			e++;
		if (e != s && !*e)
			return d;
	}
	return def;
}

struct tpl_val *tpl_filter(struct tpl_render *r, int line, const char *name, struct tpl_val *v,
			   struct tpl_args *a)
{
	struct tpl_val *f = tpl_bool(H, false);
#define IS(w) (!strcmp(name, w))
	if (IS("default") || IS("d")) {
		struct tpl_val *d = arg(a, 0, "default_value", NULL);
		bool boolean = tpl_truthy(arg(a, 1, "boolean", f));
		if (v->kind == V_UNDEF || (boolean && !tpl_truthy(v)))
			return d ? d : tpl_str(H, "", 0);
		return v;
	}
	if (IS("safe") && v->kind == V_STR) {
		struct tpl_val *m = tpl_new(H, V_STR);
		*m = *v;
		m->markup = true;
		return m;
	}
	if (IS("safe") || (IS("list") && v->kind == V_LIST && !v->tuple))
		return v;
	if (IS("length") || IS("count")) {
		switch (v->kind) {
		case V_UNDEF: return tpl_int(H, 0);
		case V_STR: return tpl_int(H, tpl_utf8_len(v->str.s, v->str.n));
		case V_LIST: return tpl_int(H, v->list.n);
		case V_DICT: return tpl_int(H, v->ns ? 0 : v->dict.n);
		default: tpl_fail(H, line, "TypeError: object of type '%s' has no len()", tpl_type_name(v));
		}
	}
	if (IS("string"))
		return as_str(r, v);
	if (IS("list"))
		return tpl_iter_list(r, line, v);
	if (IS("tojson")) {
		struct tpl_val *ind = arg(a, 0, "indent", NULL), *sk = arg(a, 99, "sort_keys", f);
		struct tpl_val *ea = arg(a, 99, "ensure_ascii", f), *sep = arg(a, 99, "separators", NULL);
		int64_t n = ind && ind->kind != V_NONE ? need_int(r, line, ind, "tojson indent") : -1;
		if (n > 64)
			tpl_fail(H, line, "tojson indent too large");
		struct tpl_json_style st = { .indent = n < 0 ? -1 : (int)n, .sort_keys = tpl_truthy(sk),
					     .ascii = tpl_truthy(ea) };
		if (sep && sep->kind != V_NONE) {
			if (sep->kind != V_LIST || sep->list.n != 2 || sep->list.v[0]->kind != V_STR ||
			    sep->list.v[1]->kind != V_STR)
				tpl_fail(H, line, "TypeError: tojson separators must be two strings");
			st.item_sep = sep->list.v[0]->str.s;
			st.key_sep = sep->list.v[1]->str.s;
		}
		struct tpl_buf b = { 0 };
		tpl_buf_put(H, &b, "", 0);
		tpl_json_dump(H, line, &b, v, &st);
		return mkstr(r, &b);
	}
	if (IS("items")) {
		if (v->kind == V_UNDEF)
			return tpl_list(H);
		if (v->kind != V_DICT || v->ns)
			tpl_fail(H, line, "TypeError: Can only get item pairs from a mapping.");
		return pairs(r, v);
	}
	if (IS("join")) {
		struct tpl_val *items = tpl_iter_list(r, line, v), *sep = as_str(r, arg(a, 0, "d", tpl_str(H, "", 0)));
		struct tpl_val *attr = arg(a, 1, "attribute", NULL);
		struct tpl_buf b = { 0 };
		tpl_buf_put(H, &b, "", 0);
		for (size_t i = 0; i < items->list.n; i++) {
			if (i)
				tpl_buf_put(H, &b, sep->str.s, sep->str.n);
			struct tpl_val *x = items->list.v[i];
			tpl_str_of(H, &b, attr ? attr_path(r, line, x, attr) : x);
		}
		return mkstr(r, &b);
	}
	if (IS("first") || IS("last")) {
		struct tpl_val *items = tpl_iter_list(r, line, v);
		if (!items->list.n)
			return tpl_undef(H, IS("first") ? "UndefinedError: No first item, sequence was empty."
							: "UndefinedError: No last item, sequence was empty.");
		return items->list.v[IS("first") ? 0 : items->list.n - 1];
	}
	if (IS("trim"))
		return strip(r, as_str(r, v), arg(a, 0, "chars", NULL), true, true);
	if (IS("upper") || IS("lower") || IS("capitalize") || IS("title"))
		return case_map(r, as_str(r, v), IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 3);
	if (IS("replace")) {
		struct tpl_val *o = arg(a, 0, "old", NULL), *n = arg(a, 1, "new", NULL), *c = arg(a, 2, "count", NULL);
		if (!o || !n)
			tpl_fail(H, line, "TypeError: replace needs old and new");
		return replace(r, line, as_str(r, v), o, n, c && c->kind != V_NONE ? need_int(r, line, c, "replace") : -1);
	}
	if (IS("selectattr") || IS("rejectattr"))
		return select_items(r, line, v, a, true, IS("selectattr"));
	if (IS("select") || IS("reject"))
		return select_items(r, line, v, a, false, IS("select"));
	if (IS("map"))
		return map(r, line, v, a);
	if (IS("unique"))
		return unique(r, line, v, a);
	if (IS("sort") || IS("dictsort")) {
		if (IS("dictsort") && (v->kind != V_DICT || v->ns))
			tpl_fail(H, line, "TypeError: dictsort needs a mapping");
		return sort_filter(r, line, v, a, IS("dictsort"));
	}
	if (IS("reverse")) {
		if (v->kind == V_STR) {
			struct tpl_val *chars = tpl_iter_list(r, line, v);
			struct tpl_buf b = { 0 };
			tpl_buf_put(H, &b, "", 0);
			for (size_t i = chars->list.n; i-- > 0;)
				tpl_buf_put(H, &b, chars->list.v[i]->str.s, chars->list.v[i]->str.n);
			return mkstr(r, &b);
		}
		struct tpl_val *items = tpl_iter_list(r, line, v), *out = tpl_list(H);
		for (size_t i = items->list.n; i-- > 0;)
			tpl_list_add(H, out, items->list.v[i]);
		return out;
	}
	if (IS("indent"))
		return indent(r, line, v, a);
	if (IS("int")) {
		struct tpl_val *d = arg(a, 0, "default", NULL);
		if (v->kind == V_INT)
			return v;
		if (v->kind == V_BOOL)
			return tpl_int(H, v->b);
		if (v->kind == V_STR) {
			char *s = tpl_strdup(H, v->str.s, v->str.n), *e;
			long long ll = strtoll(s, &e, 10);
			while (is_space(*e))
				e++;
			if (e != s && !*e)
				return tpl_int(H, ll);
		}
		double x = to_float(r, v, NAN);
		if (!isnan(x) && fabs(x) < 9.2e18)
			return tpl_int(H, (int64_t)x);
		return d ? d : tpl_int(H, 0);
	}
	if (IS("float")) {
		struct tpl_val *d = arg(a, 0, "default", NULL);
		double x = to_float(r, v, NAN);
		if (isnan(x) && !(v->kind == V_FLOAT))
			return d ? d : tpl_float(H, 0);
		return tpl_float(H, x);
	}
	if (IS("abs")) {
		if (v->kind == V_INT && v->i != INT64_MIN)
			return tpl_int(H, v->i < 0 ? -v->i : v->i);
		if (v->kind == V_FLOAT)
			return tpl_float(H, fabs(v->f));
		tpl_fail(H, line, "TypeError: bad operand type for abs(): '%s'", tpl_type_name(v));
	}
	if (IS("round")) {
		int64_t p = need_int(r, line, arg(a, 0, "precision", tpl_int(H, 0)), "round");
		struct tpl_val *m = arg(a, 1, "method", NULL);
		if (v->kind != V_FLOAT && v->kind != V_INT)
			tpl_fail(H, line, "TypeError: round needs a number");
		if (p < -20 || p > 20)
			tpl_fail(H, line, "round precision out of range");
		double x = v->kind == V_FLOAT ? v->f : (double)v->i, sc = pow(10, p);
		const char *ms = m && m->kind == V_STR ? m->str.s : "common";
		double y = !strcmp(ms, "floor") ? floor(x * sc) / sc : !strcmp(ms, "ceil") ? ceil(x * sc) / sc
			: rint(x * sc) / sc;
		return tpl_float(H, y);
	}
	if (IS("sum")) {
		struct tpl_val *items = tpl_iter_list(r, line, v), *attr = arg(a, 0, "attribute", NULL);
		struct tpl_val *acc = arg(a, 1, "start", tpl_int(H, 0));
		for (size_t i = 0; i < items->list.n; i++) {
			struct tpl_val *x = attr ? attr_path(r, line, items->list.v[i], attr) : items->list.v[i];
			if (!((x->kind == V_INT || x->kind == V_FLOAT || x->kind == V_BOOL) &&
			      (acc->kind == V_INT || acc->kind == V_FLOAT || acc->kind == V_BOOL)))
				tpl_fail(H, line, "TypeError: sum needs numbers");
			if (acc->kind == V_FLOAT || x->kind == V_FLOAT)
				acc = tpl_float(H, (acc->kind == V_FLOAT ? acc->f : (double)(acc->kind == V_INT ? acc->i : acc->b)) +
						   (x->kind == V_FLOAT ? x->f : (double)(x->kind == V_INT ? x->i : x->b)));
			else {
				int64_t s;
				if (__builtin_add_overflow(acc->kind == V_INT ? acc->i : acc->b, x->kind == V_INT ? x->i : x->b, &s))
					tpl_fail(H, line, "OverflowError: integer result out of range");
				acc = tpl_int(H, s);
			}
		}
		return acc;
	}
	if (IS("min") || IS("max")) {
		struct tpl_val *items = tpl_iter_list(r, line, v), *attr = arg(a, 1, "attribute", NULL);
		struct sortkey k = { .r = r, .line = line, .fold = !tpl_truthy(arg(a, 0, "case_sensitive", f)) };
		struct tpl_val *best = NULL, *bk = NULL;
		for (size_t i = 0; i < items->list.n; i++) {
			struct tpl_val *x = items->list.v[i], *key = attr ? attr_path(r, line, x, attr) : x;
			int c = best ? key_cmp(&k, key, bk) : 0;
			if (!best || (IS("min") ? c < 0 : c > 0)) {
				best = x;
				bk = key;
			}
		}
		return best ? best : tpl_undef(H, "UndefinedError: No aggregated item, sequence was empty.");
	}
	if (IS("attr")) {   /* attributes only: a dict's keys are items, not attributes */
		const struct tpl_val *n = need_str(r, line, arg(a, 0, "name", tpl_none(H)), "attr");
		if (v->kind == V_DICT && !v->ns && !tpl_has_method(v, n->str.s))
			return tpl_undef(H, "UndefinedError: 'dict object' has no attribute");
		return tpl_getattr(r, line, v, n->str.s);
	}
	if (IS("batch")) {
		int64_t n = need_int(r, line, arg(a, 0, "linecount", tpl_none(H)), "batch");
		struct tpl_val *fill = arg(a, 1, "fill_with", NULL), *items = tpl_iter_list(r, line, v);
		struct tpl_val *out = tpl_list(H), *cur = NULL;
		if (n <= 0)
			tpl_fail(H, line, "ValueError: batch size must be positive");
		for (size_t i = 0; i < items->list.n; i++) {
			if (!cur || (int64_t)cur->list.n == n)
				tpl_list_add(H, out, cur = tpl_list(H));
			tpl_list_add(H, cur, items->list.v[i]);
		}
		while (cur && fill && fill->kind != V_NONE && (int64_t)cur->list.n < n)
			tpl_list_add(H, cur, fill);
		return out;
	}
	if (IS("center")) {
		struct tpl_val *s = as_str(r, v);
		int64_t w = need_int(r, line, arg(a, 0, "width", tpl_int(H, 80)), "center");
		int64_t len = tpl_utf8_len(s->str.s, s->str.n);
		if (w > 100000)
			tpl_fail(H, line, "center width too large");
		if (w <= len)
			return s;
		int64_t marg = w - len, left = marg / 2 + (marg & w & 1);
		struct tpl_buf b = { 0 };
		tpl_buf_put(H, &b, "", 0);
		for (int64_t i = 0; i < left; i++)
			tpl_buf_put(H, &b, " ", 1);
		tpl_buf_put(H, &b, s->str.s, s->str.n);
		for (int64_t i = 0; i < marg - left; i++)
			tpl_buf_put(H, &b, " ", 1);
		return mkstr(r, &b);
	}
	if (IS("truncate")) {
		struct tpl_val *s = as_str(r, v);
		int64_t n = need_int(r, line, arg(a, 0, "length", tpl_int(H, 255)), "truncate");
		bool kill = tpl_truthy(arg(a, 1, "killwords", f));
		const struct tpl_val *end = need_str(r, line, arg(a, 2, "end", tpl_str(H, "...", 3)), "truncate");
		struct tpl_val *lw = arg(a, 3, "leeway", NULL);
		int64_t leeway = lw && lw->kind != V_NONE ? need_int(r, line, lw, "truncate") : 5;
		int64_t len = tpl_utf8_len(s->str.s, s->str.n), endn = tpl_utf8_len(end->str.s, end->str.n);
		if (len <= n + leeway)
			return s;
		int64_t keep = n - endn < 0 ? 0 : n - endn;
		struct tpl_val *chars = tpl_iter_list(r, line, s);
		struct tpl_buf b = { 0 };
		tpl_buf_put(H, &b, "", 0);
		for (int64_t i = 0; i < keep && i < (int64_t)chars->list.n; i++)
			tpl_buf_put(H, &b, chars->list.v[i]->str.s, chars->list.v[i]->str.n);
		if (!kill) {   /* drop the last, cut word: .rsplit(' ', 1)[0] */
			char *sp = memrchr(b.s, ' ', b.n);
			if (sp)
				b.n = sp - b.s;
		}
		tpl_buf_put(H, &b, end->str.s, end->str.n);
		return mkstr(r, &b);
	}
	if (IS("escape") || IS("e") || IS("forceescape")) {
		struct tpl_val *s = as_str(r, v);
		if (s->markup && !IS("forceescape"))
			return s;
		struct tpl_buf b = { 0 };
		tpl_buf_put(H, &b, "", 0);
		tpl_escape(H, &b, s->str.s, s->str.n);
		struct tpl_val *m = mkstr(r, &b);
		m->markup = true;
		return m;
	}
	if (IS("format")) {
		struct tpl_val *s = as_str(r, v);
		return tpl_percent(r, line, s, a->pos, a->npos);
	}
	if (IS("wordcount"))
		return tpl_int(H, split(r, line, as_str(r, v), NULL, -1)->list.n);
#undef IS
	tpl_fail(H, line, "unsupported filter '%s'", name);
}

void tpl_escape(struct tpl_heap *h, struct tpl_buf *b, const char *s, size_t n)
{
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
			: c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
		if (!e)
			continue;
		tpl_buf_put(h, b, s + run, i - run);
		tpl_buf_put(h, b, e, strlen(e));
		run = i + 1;
	}
	tpl_buf_put(h, b, s + run, n - run);
}

bool tpl_test(struct tpl_render *r, int line, const char *name, struct tpl_val *v, struct tpl_args *a)
{
	struct tpl_val *x = arg(a, 0, "other", NULL);
#define IS(w) (!strcmp(name, w))
	if (IS("defined"))
		return v->kind != V_UNDEF;
	if (IS("undefined"))
		return v->kind == V_UNDEF;
	if (IS("none"))
		return v->kind == V_NONE;
	if (IS("boolean"))
		return v->kind == V_BOOL;
	if (IS("true") || IS("false"))
		return v->kind == V_BOOL && v->b == IS("true");
	if (IS("integer"))
		return v->kind == V_INT;
	if (IS("float"))
		return v->kind == V_FLOAT;
	if (IS("number"))
		return v->kind == V_INT || v->kind == V_FLOAT || v->kind == V_BOOL;
	if (IS("string"))
		return v->kind == V_STR;
	if (IS("mapping"))
		return v->kind == V_DICT && !v->ns;
	if (IS("iterable") || IS("sequence"))
		return v->kind == V_UNDEF || v->kind == V_STR || v->kind == V_LIST || (v->kind == V_DICT && !v->ns);
	if (IS("callable"))
		return v->kind == V_MACRO || v->kind == V_METHOD || v->kind == V_GLOBAL;
	if (IS("lower") || IS("upper")) {
		struct tpl_args none = { 0 };
		return v->kind == V_STR &&
		       tpl_truthy(tpl_method(r, line, v, IS("lower") ? "islower" : "isupper", &none));
	}
	if (IS("escaped"))
		return false;
	if (IS("odd") || IS("even")) {
		int64_t i = need_int(r, line, v, name);
		return (i % 2 != 0) == IS("odd");
	}
	if (IS("divisibleby")) {
		int64_t d = need_int(r, line, x ? x : tpl_none(H), "divisibleby");
		if (d == 0)
			tpl_fail(H, line, "ZeroDivisionError: integer modulo by zero");
		return d == -1 || need_int(r, line, v, "divisibleby") % d == 0;
	}
	static const char *const binary[] = { "eq", "equalto", "==", "ne", "!=", "sameas", "in", "lt", "<",
					       "lessthan", "le", "<=", "gt", ">", "greaterthan", "ge", ">=", NULL };
	const char *const *b = binary;
	while (*b && strcmp(*b, name))
		b++;
	if (!*b)
		tpl_fail(H, line, "unsupported test '%s'", name);
	if (!x)
		x = arg(a, 0, IS("in") ? "seq" : "value", NULL);
	if (!x)
		tpl_fail(H, line, "TypeError: test '%s' needs an argument", name);
	if (IS("eq") || IS("equalto") || IS("=="))
		return tpl_equal(v, x);
	if (IS("ne") || IS("!="))
		return !tpl_equal(v, x);
	if (IS("sameas"))
		return v == x || ((v->kind == V_NONE || v->kind == V_BOOL) && tpl_equal(v, x) && v->kind == x->kind);
	if (IS("in")) {
		struct tpl_val *l = x->kind == V_STR ? NULL : tpl_iter_list(r, line, x);
		if (!l)
			return v->kind == V_STR && (!v->str.n || memmem(x->str.s, x->str.n, v->str.s, v->str.n));
		for (size_t i = 0; i < l->list.n; i++)
			if (tpl_equal(l->list.v[i], v))
				return true;
		return false;
	}
	int c = 0;
	if (IS("lt") || IS("<") || IS("lessthan") || IS("le") || IS("<=") || IS("gt") || IS(">") ||
	    IS("greaterthan") || IS("ge") || IS(">="))
		c = tpl_compare(H, line, v, x);
	if (IS("lt") || IS("lessthan") || IS("<"))
		return c < 0;
	if (IS("le") || IS("<="))
		return c <= 0;
	if (IS("gt") || IS("greaterthan") || IS(">"))
		return c > 0;
	if (IS("ge") || IS(">="))
		return c >= 0;
#undef IS
	tpl_fail(H, line, "unsupported test '%s'", name);
}

bool tpl_is_global(const char *name)
{
	static const char *const g[] = { "range", "namespace", "raise_exception", "strftime_now", "dict", NULL };
	for (const char *const *p = g; *p; p++)
		if (!strcmp(*p, name))
			return true;
	return false;
}

struct tpl_val *tpl_global(struct tpl_render *r, int line, const char *name, struct tpl_args *a)
{
#define IS(w) (!strcmp(name, w))
	if (IS("raise_exception")) {
		struct tpl_heap *h = H;
		struct tpl_val *m = as_str(r, arg(a, 0, "message", tpl_str(H, "", 0)));
		struct tpl_error *e = h->err;
		e->line = line;
		e->raised = true;
		snprintf(e->msg, sizeof e->msg, "%.*s", (int)m->str.n, m->str.s);
		longjmp(*h->fail, 1);
	}
	if (IS("namespace") || IS("dict")) {
		struct tpl_val *d = tpl_dict(H);
		d->ns = IS("namespace");
		for (size_t i = 0; i < a->npos; i++) {
			struct tpl_val *init = a->pos[i];
			if (init->kind != V_DICT || init->ns)
				tpl_fail(H, line, "TypeError: %s() takes a mapping", name);
			for (size_t k = 0; k < init->dict.n; k++)
				tpl_dict_put(H, d, init->dict.k[k], init->dict.v[k]);
		}
		for (size_t k = 0; k < a->nkw; k++)
			tpl_dict_set(H, d, a->kwn[k], a->kwv[k]);
		return d;
	}
	if (IS("strftime_now")) {
		const struct tpl_val *fmt = need_str(r, line, arg(a, 0, "format", tpl_none(H)), "strftime_now");
		time_t now = tpl_render_now(r);
		struct tm tm;
		char out[512];
		localtime_r(&now, &tm);
		char *f = tpl_strdup(H, fmt->str.s, fmt->str.n > 256 ? 256 : fmt->str.n);
		size_t n = strftime(out, sizeof out, f, &tm);
		return tpl_str(H, out, n);
	}
	if (IS("range")) {
		int64_t start = 0, stop, step = 1;
		if (a->npos == 0 || a->npos > 3)
			tpl_fail(H, line, "TypeError: range expected 1 to 3 arguments");
		if (a->npos == 1) {
			stop = need_int(r, line, a->pos[0], "range");
		} else {
			start = need_int(r, line, a->pos[0], "range");
			stop = need_int(r, line, a->pos[1], "range");
			if (a->npos == 3)
				step = need_int(r, line, a->pos[2], "range");
		}
		if (step == 0)
			tpl_fail(H, line, "ValueError: range() arg 3 must not be zero");
		struct tpl_val *l = tpl_list(H);
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
			tpl_tick(r, line);
			tpl_list_add(H, l, tpl_int(H, i));
			if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step)
				break;
		}
		return l;
	}
#undef IS
	tpl_fail(H, line, "unsupported function '%s'", name);
}
