/* daemon/template/value.c — the heap and Python's value semantics:
 * truth, equality, ordering, str(), repr() and json.dumps(). */
#include "daemon/template/tpl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpl_chunk {
	struct tpl_chunk *next;
	size_t used, size;
	max_align_t data[];
};

struct tpl_heap *tpl_heap_new(size_t limit)
{
	struct tpl_heap *h = calloc(1, sizeof *h);
	if (h)
		h->limit = limit ? limit : TPL_HEAP_DEFAULT;
	return h;
}

void tpl_heap_free(struct tpl_heap *h)
{
	if (!h)
		return;
	for (struct tpl_chunk *c = h->chunks, *n; c; c = n) {
		n = c->next;
		free(c);
	}
	free(h);
}

void tpl_fail(struct tpl_heap *h, int line, const char *fmt, ...)
{
	struct tpl_error *e = h->err;
	va_list ap;
	e->line = line;
	e->raised = false;
	int off = line > 0 ? snprintf(e->msg, sizeof e->msg, "line %d: ", line) : 0;
	va_start(ap, fmt);
	vsnprintf(e->msg + off, sizeof e->msg - off, fmt, ap);
	va_end(ap);
	longjmp(*h->fail, 1);
}

void *tpl_alloc(struct tpl_heap *h, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct tpl_chunk *c = h->chunks;
	if (!c || c->size - c->used < n) {
		size_t size = n > 65536 ? n : 65536;
		if (n > h->limit || h->used + size > h->limit ||
		    !(c = malloc(sizeof *c + size))) {
			if (h->fail)
				tpl_fail(h, 0, "template memory limit (%zu bytes) reached", h->limit);
			return NULL;
		}
		h->used += size;
		c->size = size;
		c->used = 0;
		c->next = h->chunks;
		h->chunks = c;
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	return p;
}

char *tpl_strdup(struct tpl_heap *h, const char *s, size_t n)
{
	char *p = tpl_alloc(h, n + 1);
	if (p) {
		if (n)
			memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

struct tpl_val *tpl_new(struct tpl_heap *h, enum tpl_kind k)
{
	struct tpl_val *v = tpl_alloc(h, sizeof *v);
	if (v) {
		memset(v, 0, sizeof *v);
		v->kind = k;
	}
	return v;
}

struct tpl_val *tpl_undef(struct tpl_heap *h, const char *hint)
{
	struct tpl_val *v = tpl_new(h, V_UNDEF);
	if (v) {
		v->str.s = hint;
		v->str.n = hint ? strlen(hint) : 0;
	}
	return v;
}

struct tpl_val *tpl_none(struct tpl_heap *h) { return tpl_new(h, V_NONE); }
struct tpl_val *tpl_list(struct tpl_heap *h) { return tpl_new(h, V_LIST); }
struct tpl_val *tpl_dict(struct tpl_heap *h) { return tpl_new(h, V_DICT); }
bool tpl_is_dict(const struct tpl_val *v) { return v && v->kind == V_DICT; }

const char *tpl_str_data(const struct tpl_val *v, size_t *len)
{
	if (!v || v->kind != V_STR)
		return NULL;
	*len = v->str.n;
	return v->str.s;
}

struct tpl_val *tpl_bool(struct tpl_heap *h, bool b)
{
	struct tpl_val *v = tpl_new(h, V_BOOL);
	if (v)
		v->b = b;
	return v;
}

struct tpl_val *tpl_int(struct tpl_heap *h, int64_t i)
{
	struct tpl_val *v = tpl_new(h, V_INT);
	if (v)
		v->i = i;
	return v;
}

struct tpl_val *tpl_float(struct tpl_heap *h, double d)
{
	struct tpl_val *v = tpl_new(h, V_FLOAT);
	if (v)
		v->f = d;
	return v;
}

struct tpl_val *tpl_str(struct tpl_heap *h, const char *s, size_t len)
{
	struct tpl_val *v = tpl_new(h, V_STR);
	if (v && !(v->str.s = tpl_strdup(h, s, len)))
		return NULL;
	if (v)
		v->str.n = len;
	return v;
}

static bool grow(struct tpl_heap *h, void ***a, size_t *cap, size_t n)
{
	if (n < *cap)
		return true;
	size_t nc = *cap ? *cap * 2 : 4;
	void **p = tpl_alloc(h, nc * sizeof *p);
	if (!p)
		return false;
	if (n)
		memcpy(p, *a, n * sizeof *p);
	*a = p;
	*cap = nc;
	return true;
}

int tpl_list_push(struct tpl_heap *h, struct tpl_val *l, struct tpl_val *v)
{
	if (!l || !v || l->kind != V_LIST ||
	    !grow(h, (void ***)&l->list.v, &l->list.cap, l->list.n))
		return -1;
	l->list.v[l->list.n++] = v;
	return 0;
}

void tpl_list_add(struct tpl_heap *h, struct tpl_val *l, struct tpl_val *v)
{
	tpl_list_push(h, l, v);   /* inside a render, running out longjmps */
}

struct tpl_val *tpl_dict_find(const struct tpl_val *d, const struct tpl_val *k)
{
	for (size_t i = 0; i < d->dict.n; i++)
		if (tpl_equal(d->dict.k[i], k))
			return d->dict.v[i];
	return NULL;
}

struct tpl_val *tpl_dict_findz(const struct tpl_val *d, const char *k, size_t n)
{
	for (size_t i = 0; i < d->dict.n; i++) {
		const struct tpl_val *key = d->dict.k[i];
		if (key->kind == V_STR && key->str.n == n && !memcmp(key->str.s, k, n))
			return d->dict.v[i];
	}
	return NULL;
}

struct tpl_val *tpl_dict_get(const struct tpl_val *d, const char *key)
{
	return d && d->kind == V_DICT ? tpl_dict_findz(d, key, strlen(key)) : NULL;
}

static int dict_put(struct tpl_heap *h, struct tpl_val *d, struct tpl_val *k, struct tpl_val *v)
{
	for (size_t i = 0; i < d->dict.n; i++)
		if (tpl_equal(d->dict.k[i], k)) {
			d->dict.v[i] = v;
			return 0;
		}
	size_t cap = d->dict.cap;
	if (!grow(h, (void ***)&d->dict.k, &cap, d->dict.n) ||
	    !grow(h, (void ***)&d->dict.v, &d->dict.cap, d->dict.n))
		return -1;
	d->dict.k[d->dict.n] = k;
	d->dict.v[d->dict.n++] = v;
	return 0;
}

void tpl_dict_put(struct tpl_heap *h, struct tpl_val *d, struct tpl_val *k, struct tpl_val *v)
{
	dict_put(h, d, k, v);
}

int tpl_dict_set(struct tpl_heap *h, struct tpl_val *d, const char *key, struct tpl_val *v)
{
	struct tpl_val *k;
	if (!d || !v || d->kind != V_DICT || !(k = tpl_str(h, key, strlen(key))))
		return -1;
	return dict_put(h, d, k, v);
}

/* ---- buffers ---- */

void tpl_buf_put(struct tpl_heap *h, struct tpl_buf *b, const char *s, size_t n)
{
	if (b->max && b->n + n > b->max)
		tpl_fail(h, 0, "template output limit (%zu bytes) reached", b->max);
	if (b->n + n + 1 > b->cap) {
		size_t nc = b->cap ? b->cap : 64;
		while (nc < b->n + n + 1)
			nc *= 2;
		char *p = tpl_alloc(h, nc);
		if (!p)
			tpl_fail(h, 0, "out of memory");
		if (b->n)
			memcpy(p, b->s, b->n);
		b->s = p;
		b->cap = nc;
	}
	if (n)
		memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
}

void tpl_buf_printf(struct tpl_heap *h, struct tpl_buf *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	tpl_buf_put(h, b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* ---- semantics ---- */

const char *tpl_type_name(const struct tpl_val *v)
{
	switch (v->kind) {
	case V_UNDEF: return "Undefined";
	case V_NONE: return "NoneType";
	case V_BOOL: return "bool";
	case V_INT: return "int";
	case V_FLOAT: return "float";
	case V_STR: return "str";
	case V_LIST: return v->tuple ? "tuple" : "list";
	case V_DICT: return v->ns ? "Namespace" : "dict";
	case V_MACRO: return "Macro";
	default: return "function";
	}
}

bool tpl_truthy(const struct tpl_val *v)
{
	switch (v->kind) {
	case V_UNDEF: case V_NONE: return false;
	case V_BOOL: return v->b;
	case V_INT: return v->i != 0;
	case V_FLOAT: return v->f != 0;
	case V_STR: return v->str.n != 0;
	case V_LIST: return v->list.n != 0;
	case V_DICT: return v->ns || v->dict.n != 0;
	default: return true;
	}
}

static bool is_num(const struct tpl_val *v)
{
	return v->kind == V_BOOL || v->kind == V_INT || v->kind == V_FLOAT;
}

static double num(const struct tpl_val *v)
{
	return v->kind == V_FLOAT ? v->f : v->kind == V_INT ? (double)v->i : v->b;
}

static int64_t inum(const struct tpl_val *v)
{
	return v->kind == V_INT ? v->i : v->b;
}

bool tpl_equal(const struct tpl_val *a, const struct tpl_val *b)
{
	if (a == b)
		return true;
	if (is_num(a) && is_num(b)) {
		if (a->kind != V_FLOAT && b->kind != V_FLOAT)
			return inum(a) == inum(b);
		return num(a) == num(b);
	}
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case V_UNDEF: case V_NONE: return true;
	case V_STR: return a->str.n == b->str.n && !memcmp(a->str.s, b->str.s, a->str.n);
	case V_LIST:
		if (a->list.n != b->list.n || a->tuple != b->tuple)
			return false;
		for (size_t i = 0; i < a->list.n; i++)
			if (!tpl_equal(a->list.v[i], b->list.v[i]))
				return false;
		return true;
	case V_DICT:
		if (a->dict.n != b->dict.n || a->ns || b->ns)
			return false;
		for (size_t i = 0; i < a->dict.n; i++) {
			struct tpl_val *o = tpl_dict_find(b, a->dict.k[i]);
			if (!o || !tpl_equal(o, a->dict.v[i]))
				return false;
		}
		return true;
	default:
		return false;
	}
}

int tpl_compare(struct tpl_heap *h, int line, const struct tpl_val *a, const struct tpl_val *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->kind != V_FLOAT && b->kind != V_FLOAT)
			return (inum(a) > inum(b)) - (inum(a) < inum(b));
		double x = num(a), y = num(b);
		return (x > y) - (x < y);
	}
	if (a->kind == V_STR && b->kind == V_STR) {
		size_t n = a->str.n < b->str.n ? a->str.n : b->str.n;
		int c = n ? memcmp(a->str.s, b->str.s, n) : 0;
		if (c)
			return c;
		return (a->str.n > b->str.n) - (a->str.n < b->str.n);
	}
	if (a->kind == V_LIST && b->kind == V_LIST) {
		for (size_t i = 0; i < a->list.n && i < b->list.n; i++)
			if (!tpl_equal(a->list.v[i], b->list.v[i]))
				return tpl_compare(h, line, a->list.v[i], b->list.v[i]);
		return (a->list.n > b->list.n) - (a->list.n < b->list.n);
	}
	tpl_fail(h, line, "TypeError: cannot compare '%s' and '%s'", tpl_type_name(a), tpl_type_name(b));
}

size_t tpl_utf8_len(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* Python's repr of a float: the shortest digits that read back the same,
 * positional from 1e-4 up to 1e16, scientific outside. */
void tpl_float_repr(char out[32], double d)
{
	if (isnan(d)) {
		strcpy(out, "nan");
		return;
	}
	if (isinf(d)) {
		strcpy(out, d < 0 ? "-inf" : "inf");
		return;
	}
	char e[40];
	int prec;
	for (prec = 1; prec < 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, d);
		if (strtod(e, NULL) == d)
			break;
	}
	snprintf(e, sizeof e, "%.*e", prec - 1, d);
	/* e = [-]D[.DDD]e[+-]XX */
	char digits[24];
	int nd = 0, exp;
	const char *p = e;
	bool neg = *p == '-';
	if (neg)
		p++;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	exp = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	char *o = out;
	if (neg)
		*o++ = '-';
	if (exp < -4 || exp >= 16) {
		*o++ = digits[0];
		if (nd > 1) {
			*o++ = '.';
			memcpy(o, digits + 1, nd - 1);
			o += nd - 1;
		}
		sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
		return;
	}
	if (exp < 0) {
		*o++ = '0';
		*o++ = '.';
		for (int i = 0; i < -exp - 1; i++)
			*o++ = '0';
		memcpy(o, digits, nd);
		o += nd;
	} else {
		for (int i = 0; i <= exp; i++)
			*o++ = i < nd ? digits[i] : '0';
		*o++ = '.';
		if (nd > exp + 1) {
			memcpy(o, digits + exp + 1, nd - exp - 1);
			o += nd - exp - 1;
		} else {
			*o++ = '0';
		}
	}
	*o = 0;
}

static void repr_str(struct tpl_heap *h, struct tpl_buf *b, const char *s, size_t n)
{
	bool sq = memchr(s, '\'', n), dq = memchr(s, '"', n);
	char q = sq && !dq ? '"' : '\'';
	tpl_buf_put(h, b, &q, 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		if (c == (unsigned char)q || c == '\\') {
			char e[2] = { '\\', c };
			tpl_buf_put(h, b, e, 2);
		} else if (c == '\n') {
			tpl_buf_put(h, b, "\\n", 2);
		} else if (c == '\r') {
			tpl_buf_put(h, b, "\\r", 2);
		} else if (c == '\t') {
			tpl_buf_put(h, b, "\\t", 2);
		} else if (c < 0x20 || c == 0x7f) {
			tpl_buf_printf(h, b, "\\x%02x", c);
		} else if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
			   (unsigned char)s[i + 1] <= 0xa0) {
			/* C1 controls and U+00A0 are not printable to Python */
			tpl_buf_printf(h, b, "\\x%02x", (unsigned char)s[++i]);
		} else {
			tpl_buf_put(h, b, (const char *)&s[i], 1);
		}
	}
	tpl_buf_put(h, b, &q, 1);
}

static void str_or_repr(struct tpl_heap *h, struct tpl_buf *b, const struct tpl_val *v, bool repr)
{
	char tmp[32];
	switch (v->kind) {
	case V_UNDEF:
		return;
	case V_NONE:
		tpl_buf_put(h, b, "None", 4);
		return;
	case V_BOOL:
		tpl_buf_put(h, b, v->b ? "True" : "False", v->b ? 4 : 5);
		return;
	case V_INT:
		tpl_buf_printf(h, b, "%lld", (long long)v->i);
		return;
	case V_FLOAT:
		tpl_float_repr(tmp, v->f);
		tpl_buf_put(h, b, tmp, strlen(tmp));
		return;
	case V_STR:
		if (repr)
			repr_str(h, b, v->str.s, v->str.n);
		else
			tpl_buf_put(h, b, v->str.s, v->str.n);
		return;
	case V_LIST:
		tpl_buf_put(h, b, v->tuple ? "(" : "[", 1);
		for (size_t i = 0; i < v->list.n; i++) {
			if (i)
				tpl_buf_put(h, b, ", ", 2);
			tpl_repr(h, b, v->list.v[i]);
		}
		if (v->tuple && v->list.n == 1)
			tpl_buf_put(h, b, ",", 1);
		tpl_buf_put(h, b, v->tuple ? ")" : "]", 1);
		return;
	case V_DICT:
		tpl_buf_put(h, b, v->ns ? "<Namespace {" : "{", v->ns ? 12 : 1);
		for (size_t i = 0; i < v->dict.n; i++) {
			if (i)
				tpl_buf_put(h, b, ", ", 2);
			tpl_repr(h, b, v->dict.k[i]);
			tpl_buf_put(h, b, ": ", 2);
			tpl_repr(h, b, v->dict.v[i]);
		}
		tpl_buf_put(h, b, v->ns ? "}>" : "}", v->ns ? 2 : 1);
		return;
	case V_MACRO:
		tpl_buf_put(h, b, "<Macro>", 7);
		return;
	default:
		tpl_buf_printf(h, b, "<built-in method %s>", v->method.name);
		return;
	}
}

void tpl_str_of(struct tpl_heap *h, struct tpl_buf *b, const struct tpl_val *v)
{
	str_or_repr(h, b, v, false);
}

void tpl_repr(struct tpl_heap *h, struct tpl_buf *b, const struct tpl_val *v)
{
	str_or_repr(h, b, v, true);
}

/* ---- json.dumps ---- */

static void json_str(struct tpl_heap *h, struct tpl_buf *b, const char *s, size_t n, bool ascii)
{
	tpl_buf_put(h, b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		const char *e = NULL;
		char u[8];
		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		default:
			if (c < 0x20) {
				snprintf(u, sizeof u, "\\u%04x", c);
				e = u;
			} else if (c >= 0x80 && ascii) {
				tpl_buf_put(h, b, s + run, i - run);
				unsigned cp = c >= 0xf0 ? c & 7 : c >= 0xe0 ? c & 15 : c & 31;
				size_t k = i + 1;
				for (; k < n && ((unsigned char)s[k] & 0xc0) == 0x80; k++)
					cp = cp << 6 | ((unsigned char)s[k] & 63);
				if (cp >= 0x10000) {
					cp -= 0x10000;
					tpl_buf_printf(h, b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
				} else {
					tpl_buf_printf(h, b, "\\u%04x", cp);
				}
				run = k;
				i = k - 1;
				continue;
			}
		}
		if (!e)
			continue;
		tpl_buf_put(h, b, s + run, i - run);
		tpl_buf_put(h, b, e, strlen(e));
		run = i + 1;
	}
	tpl_buf_put(h, b, s + run, n - run);
	tpl_buf_put(h, b, "\"", 1);
}

static void json_nl(struct tpl_heap *h, struct tpl_buf *b, int indent, int depth)
{
	tpl_buf_put(h, b, "\n", 1);
	for (int i = 0; i < indent * depth; i++)
		tpl_buf_put(h, b, " ", 1);
}

static void json_key(struct tpl_heap *h, int line, struct tpl_buf *b, const struct tpl_val *k,
		     const struct tpl_json_style *st)
{
	char tmp[32];
	switch (k->kind) {
	case V_STR: json_str(h, b, k->str.s, k->str.n, st->ascii); return;
	case V_NONE: tpl_buf_put(h, b, "\"null\"", 6); return;
	case V_BOOL: tpl_buf_put(h, b, k->b ? "\"true\"" : "\"false\"", k->b ? 6 : 7); return;
	case V_INT: tpl_buf_printf(h, b, "\"%lld\"", (long long)k->i); return;
	case V_FLOAT:
		tpl_float_repr(tmp, k->f);
		tpl_buf_printf(h, b, "\"%s\"", tmp);
		return;
	default:
		tpl_fail(h, line, "TypeError: keys must be str, int, float, bool or None, not %s",
			 tpl_type_name(k));
	}
}

static void json_dump(struct tpl_heap *h, int line, struct tpl_buf *b, const struct tpl_val *v,
		      const struct tpl_json_style *st, int depth)
{
	int indent = st->indent;
	bool sort = st->sort_keys;
	const char *isep = st->item_sep ? st->item_sep : indent >= 0 ? "," : ", ";
	const char *ksep = st->key_sep ? st->key_sep : ": ";
	char tmp[32];
	if (depth > 200)
		tpl_fail(h, line, "tojson: nesting too deep");
	switch (v->kind) {
	case V_NONE: tpl_buf_put(h, b, "null", 4); return;
	case V_BOOL: tpl_buf_put(h, b, v->b ? "true" : "false", v->b ? 4 : 5); return;
	case V_INT: tpl_buf_printf(h, b, "%lld", (long long)v->i); return;
	case V_FLOAT:
		if (isnan(v->f))
			strcpy(tmp, "NaN");
		else if (isinf(v->f))
			strcpy(tmp, v->f < 0 ? "-Infinity" : "Infinity");
		else
			tpl_float_repr(tmp, v->f);
		tpl_buf_put(h, b, tmp, strlen(tmp));
		return;
	case V_STR: json_str(h, b, v->str.s, v->str.n, st->ascii); return;
	case V_LIST:
		if (!v->list.n) {
			tpl_buf_put(h, b, "[]", 2);
			return;
		}
		tpl_buf_put(h, b, "[", 1);
		for (size_t i = 0; i < v->list.n; i++) {
			if (i)
				tpl_buf_put(h, b, isep, strlen(isep));
			if (indent >= 0)
				json_nl(h, b, indent, depth + 1);
			json_dump(h, line, b, v->list.v[i], st, depth + 1);
		}
		if (indent >= 0)
			json_nl(h, b, indent, depth);
		tpl_buf_put(h, b, "]", 1);
		return;
	case V_DICT: {
		if (v->ns)
			break;
		if (!v->dict.n) {
			tpl_buf_put(h, b, "{}", 2);
			return;
		}
		size_t n = v->dict.n, *ord = tpl_alloc(h, n * sizeof *ord);
		for (size_t i = 0; i < n; i++)
			ord[i] = i;
		for (size_t i = 1; sort && i < n; i++)   /* insertion sort: stable, small dicts */
			for (size_t j = i; j > 0 && tpl_compare(h, line, v->dict.k[ord[j - 1]],
								 v->dict.k[ord[j]]) > 0; j--) {
				size_t t = ord[j];
				ord[j] = ord[j - 1];
				ord[j - 1] = t;
			}
		tpl_buf_put(h, b, "{", 1);
		for (size_t i = 0; i < n; i++) {
			if (i)
				tpl_buf_put(h, b, isep, strlen(isep));
			if (indent >= 0)
				json_nl(h, b, indent, depth + 1);
			json_key(h, line, b, v->dict.k[ord[i]], st);
			tpl_buf_put(h, b, ksep, strlen(ksep));
			json_dump(h, line, b, v->dict.v[ord[i]], st, depth + 1);
		}
		if (indent >= 0)
			json_nl(h, b, indent, depth);
		tpl_buf_put(h, b, "}", 1);
		return;
	}
	default:
		break;
	}
	tpl_fail(h, line, "TypeError: Object of type %s is not JSON serializable", tpl_type_name(v));
}

void tpl_json_dump(struct tpl_heap *h, int line, struct tpl_buf *b, const struct tpl_val *v,
		   const struct tpl_json_style *st)
{
	json_dump(h, line, b, v, st, 0);
}
