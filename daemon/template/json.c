/* daemon/template/json.c — a strict JSON reader (RFC 8259) into template
 * values: chat messages and tools arrive as JSON. Objects keep their key
 * order (a later duplicate key wins, as in Python); integers that fit in
 * 64 bits stay integers. */
#include "daemon/template/tpl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 128

struct jp {
	struct tpl_heap *h;
	const char *s;
	size_t n, i;
	char *err;
	size_t errlen;
	jmp_buf jb;
};

__attribute__((noreturn)) static void jfail(struct jp *p, const char *what)
{
	if (p->errlen)
		snprintf(p->err, p->errlen, "JSON: %s at byte %zu", what, p->i);
	longjmp(p->jb, 1);
}

static void *jcheck(struct jp *p, void *x)
{
	if (!x)
		jfail(p, "out of memory");
	return x;
}

static void ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
			       p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

static unsigned hex4(struct jp *p)
{
	unsigned u = 0;
	for (int k = 0; k < 4; k++, p->i++) {
		char c = p->i < p->n ? p->s[p->i] : 0;
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			jfail(p, "bad \\u escape");
		u = u * 16 + d;
	}
	return u;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	unsigned min, cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; cp = c & 0x1f; }
	else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; cp = c & 0x0f; }
	else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; cp = c & 0x07; }
	else return 0;
	if (n < len)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static struct tpl_val *string(struct jp *p)
{
	p->i++;   /* the opening quote */
	size_t start = p->i;
	/* Decoded text never outgrows its source. */
	size_t on = 0;
	char *o = jcheck(p, tpl_alloc(p->h, p->n - start + 1));
	for (;;) {
		if (p->i >= p->n)
			jfail(p, "unterminated string");
		unsigned char c = p->s[p->i];
		if (c == '"') {
			p->i++;
			break;
		}
		if (c < 0x20)
			jfail(p, "control character in string");
		if (c != '\\') {
			size_t k = utf8_seq((const unsigned char *)p->s + p->i, p->n - p->i);
			if (!k)
				jfail(p, "invalid UTF-8");
			memcpy(o + on, p->s + p->i, k);
			on += k;
			p->i += k;
			continue;
		}
		p->i++;
		char e = p->i < p->n ? p->s[p->i++] : 0;
		switch (e) {
		case '"': o[on++] = '"'; break;
		case '\\': o[on++] = '\\'; break;
		case '/': o[on++] = '/'; break;
		case 'b': o[on++] = '\b'; break;
		case 'f': o[on++] = '\f'; break;
		case 'n': o[on++] = '\n'; break;
		case 'r': o[on++] = '\r'; break;
		case 't': o[on++] = '\t'; break;
		case 'u': {
			unsigned cp = hex4(p);
			if (cp >= 0xdc00 && cp <= 0xdfff)
				jfail(p, "lone low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (p->i + 1 >= p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
					jfail(p, "lone high surrogate");
				p->i += 2;
				unsigned lo = hex4(p);
				if (lo < 0xdc00 || lo > 0xdfff)
					jfail(p, "bad surrogate pair");
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			on += utf8_put(o + on, cp);
			break;
		}
		default:
			jfail(p, "bad escape");
		}
	}
	o[on] = 0;
	struct tpl_val *v = jcheck(p, tpl_new(p->h, V_STR));
	v->str.s = o;
	v->str.n = on;
	return v;
}

static struct tpl_val *number(struct jp *p)
{
	size_t st = p->i;
	bool frac = false;
	if (p->s[p->i] == '-')
		p->i++;
	if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
		jfail(p, "bad number");
	if (p->s[p->i] == '0')
		p->i++;
	else
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	if (p->i < p->n && p->s[p->i] == '.') {
		frac = true;
		p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			jfail(p, "bad number");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		frac = true;
		p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			jfail(p, "bad number");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	char tmp[64];
	size_t len = p->i - st;
	if (len >= sizeof tmp)
		frac = true;   /* too many digits for an int64 anyway */
	char *num = len < sizeof tmp ? tmp : jcheck(p, tpl_strdup(p->h, p->s + st, len));
	memcpy(num, p->s + st, len);
	num[len] = 0;
	if (!frac) {
		errno = 0;
		long long ll = strtoll(num, NULL, 10);
		if (!errno)
			return jcheck(p, tpl_int(p->h, ll));
	}
	double d = strtod(num, NULL);
	if (isinf(d))
		jfail(p, "number out of range");
	return jcheck(p, tpl_float(p->h, d));
}

static bool word(struct jp *p, const char *w)
{
	size_t n = strlen(w);
	if (p->n - p->i >= n && !memcmp(p->s + p->i, w, n)) {
		p->i += n;
		return true;
	}
	return false;
}

static struct tpl_val *value(struct jp *p, int depth)
{
	ws(p);
	if (p->i >= p->n)
		jfail(p, "unexpected end");
	if (depth > JSON_MAX_DEPTH)
		jfail(p, "nesting too deep");
	char c = p->s[p->i];
	if (c == '"')
		return string(p);
	if (c == '-' || (c >= '0' && c <= '9'))
		return number(p);
	if (word(p, "true"))
		return jcheck(p, tpl_bool(p->h, true));
	if (word(p, "false"))
		return jcheck(p, tpl_bool(p->h, false));
	if (word(p, "null"))
		return jcheck(p, tpl_none(p->h));
	if (c == '[') {
		struct tpl_val *l = jcheck(p, tpl_list(p->h));
		p->i++;
		ws(p);
		if (p->i < p->n && p->s[p->i] == ']') {
			p->i++;
			return l;
		}
		for (;;) {
			if (tpl_list_push(p->h, l, value(p, depth + 1)))
				jfail(p, "out of memory");
			ws(p);
			if (p->i < p->n && p->s[p->i] == ',') {
				p->i++;
				continue;
			}
			if (p->i < p->n && p->s[p->i] == ']') {
				p->i++;
				return l;
			}
			jfail(p, "expected ',' or ']'");
		}
	}
	if (c == '{') {
		struct tpl_val *d = jcheck(p, tpl_dict(p->h));
		p->i++;
		ws(p);
		if (p->i < p->n && p->s[p->i] == '}') {
			p->i++;
			return d;
		}
		for (;;) {
			ws(p);
			if (p->i >= p->n || p->s[p->i] != '"')
				jfail(p, "expected a string key");
			struct tpl_val *k = string(p);
			ws(p);
			if (p->i >= p->n || p->s[p->i] != ':')
				jfail(p, "expected ':'");
			p->i++;
			struct tpl_val *v = value(p, depth + 1);
			tpl_dict_put(p->h, d, k, v);
			if (d->dict.n == 0 || !tpl_dict_find(d, k))
				jfail(p, "out of memory");
			ws(p);
			if (p->i < p->n && p->s[p->i] == ',') {
				p->i++;
				continue;
			}
			if (p->i < p->n && p->s[p->i] == '}') {
				p->i++;
				return d;
			}
			jfail(p, "expected ',' or '}'");
		}
	}
	jfail(p, "unexpected character");
}

int tpl_json_parse(struct tpl_heap *h, const char *s, size_t len, struct tpl_val **out,
		   char *err, size_t errlen)
{
	struct jp p = { .h = h, .s = s, .n = len, .err = err, .errlen = errlen };
	if (setjmp(p.jb))
		return -1;
	struct tpl_val *v = value(&p, 0);
	ws(&p);
	if (p.i != p.n)
		jfail(&p, "trailing data");
	*out = v;
	return 0;
}
