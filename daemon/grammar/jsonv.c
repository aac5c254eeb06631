/* daemon/grammar/jsonv.c — a small JSON reader and compact writer for the
 * schema compiler: objects keep key order, numbers keep their text (a
 * schema's 1.0 and 1 are written back as they came). */
#include "daemon/grammar/gm_int.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JV_MAX_DEPTH 256

struct jv_block {
	struct jv_block *next;
	size_t used, cap;
	max_align_t data[];
};

struct jv_arena {
	struct jv_block *head;
};

struct jv_arena *jv_arena_new(void)
{
	return calloc(1, sizeof(struct jv_arena));
}

void jv_arena_free(struct jv_arena *a)
{
	if (!a)
		return;
	for (struct jv_block *b = a->head, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	free(a);
}

void *jv_alloc(struct jv_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct jv_block *b = a->head;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		b = malloc(sizeof *b + cap);
		if (!b)
			return NULL;
		b->cap = cap;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

struct jp {
	struct jv_arena *a;
	const char *s;
	size_t n, i;
	char *err;
	size_t errlen;
	jmp_buf jb;
	int depth;
};

__attribute__((noreturn)) static void jfail(struct jp *p, const char *what)
{
	if (p->errlen)
		snprintf(p->err, p->errlen, "JSON: %s at byte %zu", what, p->i);
	longjmp(p->jb, 1);
}

static void *jal(struct jp *p, size_t n)
{
	void *x = jv_alloc(p->a, n);
	if (!x)
		jfail(p, "out of memory");
	return x;
}

static void ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
			       p->s[p->i] == '\r'))
		p->i++;
}

static int hex4(struct jp *p)
{
	if (p->n - p->i < 4)
		jfail(p, "short \\u escape");
	int v = 0;
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->i++];
		v <<= 4;
		if (c >= '0' && c <= '9') v |= c - '0';
		else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
		else jfail(p, "bad \\u escape");
	}
	return v;
}

static size_t put_utf8(char *o, uint32_t c)
{
	if (c < 0x80) { o[0] = c; return 1; }
	if (c < 0x800) { o[0] = 0xC0 | c >> 6; o[1] = 0x80 | (c & 63); return 2; }
	if (c < 0x10000) { o[0] = 0xE0 | c >> 12; o[1] = 0x80 | (c >> 6 & 63); o[2] = 0x80 | (c & 63); return 3; }
	o[0] = 0xF0 | c >> 18; o[1] = 0x80 | (c >> 12 & 63); o[2] = 0x80 | (c >> 6 & 63); o[3] = 0x80 | (c & 63);
	return 4;
}

/* Length of a valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	int l = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
	if (!l || (size_t)l > n)
		return 0;
	for (int k = 1; k < l; k++)
		if ((s[k] & 0xC0) != 0x80)
			return 0;
	if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
	    (c == 0xF4 && s[1] > 0x8F))
		return 0;
	return l;
}

static char *str(struct jp *p, size_t *len)
{
	p->i++; /* '"' */
	size_t start = p->i;
	while (p->i < p->n && p->s[p->i] != '"') {
		if (p->s[p->i] == '\\')
			p->i++;
		p->i++;
	}
	if (p->i >= p->n)
		jfail(p, "unterminated string");
	/* decoding never lengthens: the raw bytes bound the result */
	char *o = jal(p, p->i - start + 1);
	p->i = start;
	size_t k = 0;
	for (;;) {
		unsigned char c = (unsigned char)p->s[p->i];
		if (c == '"') {
			p->i++;
			break;
		}
		if (c < 0x20)
			jfail(p, "control character in string");
		if (c == '\\') {
			p->i++;
			char e = p->i < p->n ? p->s[p->i++] : 0;
			switch (e) {
			case '"': o[k++] = '"'; break;
			case '\\': o[k++] = '\\'; break;
			case '/': o[k++] = '/'; break;
			case 'b': o[k++] = '\b'; break;
			case 'f': o[k++] = '\f'; break;
			case 'n': o[k++] = '\n'; break;
			case 'r': o[k++] = '\r'; break;
			case 't': o[k++] = '\t'; break;
			case 'u': {
				uint32_t u = hex4(p);
				if (u >= 0xD800 && u <= 0xDBFF && p->n - p->i >= 6 && p->s[p->i] == '\\' &&
				    p->s[p->i + 1] == 'u') {
					p->i += 2;
					uint32_t lo = hex4(p);
					if (lo < 0xDC00 || lo > 0xDFFF)
						jfail(p, "lone surrogate");
					u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
				} else if (u >= 0xD800 && u <= 0xDFFF) {
					jfail(p, "lone surrogate");
				}
				/* a \u escape is at least 6 bytes of input: room enough */
				k += put_utf8(o + k, u);
				break;
			}
			default: jfail(p, "bad escape");
			}
			continue;
		}
		int l = utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
		if (!l)
			jfail(p, "invalid UTF-8");
		memcpy(o + k, p->s + p->i, l);
		k += l;
		p->i += l;
	}
	o[k] = 0;
	*len = k;
	return o;
}

static struct jv *value(struct jp *p);

static struct jv *number(struct jp *p)
{
	size_t st = p->i;
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
		p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			jfail(p, "bad number");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			jfail(p, "bad number");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	struct jv *v = jal(p, sizeof *v);
	v->t = JV_NUM;
	v->len = p->i - st;
	v->s = jal(p, v->len + 1);
	memcpy(v->s, p->s + st, v->len);
	v->num = strtod(v->s, NULL);
	return v;
}

static bool word(struct jp *p, const char *w)
{
	size_t l = strlen(w);
	if (p->n - p->i >= l && !memcmp(p->s + p->i, w, l)) {
		p->i += l;
		return true;
	}
	return false;
}

static struct jv *value(struct jp *p)
{
	ws(p);
	if (p->i >= p->n)
		jfail(p, "unexpected end");
	if (++p->depth > JV_MAX_DEPTH)
		jfail(p, "nested too deep");
	struct jv *v;
	char c = p->s[p->i];
	if (c == '{' || c == '[') {
		bool obj = c == '{';
		p->i++;
		v = jal(p, sizeof *v);
		v->t = obj ? JV_OBJ : JV_ARR;
		int cap = 0;
		ws(p);
		if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
			p->i++;
		} else {
			for (;;) {
				char *key = NULL;
				size_t klen = 0;
				if (obj) {
					ws(p);
					if (p->i >= p->n || p->s[p->i] != '"')
						jfail(p, "expected a key");
					key = str(p, &klen);
					ws(p);
					if (p->i >= p->n || p->s[p->i] != ':')
						jfail(p, "expected ':'");
					p->i++;
				}
				struct jv *x = value(p);
				int at = v->n;
				if (obj)
					for (int k = 0; k < v->n; k++)
						if (v->klen[k] == klen && !memcmp(v->keys[k], key, klen))
							at = k; /* a later duplicate wins */
				if (at == v->n) {
					if (v->n == cap) {
						cap = cap ? cap * 2 : 4;
						struct jv **na = jal(p, cap * sizeof *na);
						if (v->n)
							memcpy(na, v->a, v->n * sizeof *na);
						v->a = na;
						if (obj) {
							char **nk = jal(p, cap * sizeof *nk);
							size_t *nl = jal(p, cap * sizeof *nl);
							if (v->n) {
								memcpy(nk, v->keys, v->n * sizeof *nk);
								memcpy(nl, v->klen, v->n * sizeof *nl);
							}
							v->keys = nk;
							v->klen = nl;
						}
					}
					v->n++;
				}
				v->a[at] = x;
				if (obj) {
					v->keys[at] = key;
					v->klen[at] = klen;
				}
				ws(p);
				if (p->i < p->n && p->s[p->i] == ',') {
					p->i++;
					continue;
				}
				if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
					p->i++;
					break;
				}
				jfail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
			}
		}
	} else if (c == '"') {
		v = jal(p, sizeof *v);
		v->t = JV_STR;
		v->s = str(p, &v->len);
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		v = number(p);
	} else {
		v = jal(p, sizeof *v);
		if (word(p, "true")) {
			v->t = JV_BOOL;
			v->b = true;
		} else if (word(p, "false")) {
			v->t = JV_BOOL;
		} else if (word(p, "null")) {
			v->t = JV_NULL;
		} else {
			jfail(p, "unexpected character");
		}
	}
	p->depth--;
	return v;
}

int jv_parse(struct jv_arena *a, const char *s, size_t n, struct jv **out, char *err, size_t errlen)
{
	struct jp p = { .a = a, .s = s, .n = n, .err = err, .errlen = errlen };
	if (setjmp(p.jb))
		return -1;
	struct jv *v = value(&p);
	ws(&p);
	if (p.i != n)
		jfail(&p, "trailing characters");
	*out = v;
	return 0;
}

struct jv *jv_get(const struct jv *o, const char *key)
{
	if (!o || o->t != JV_OBJ)
		return NULL;
	size_t l = strlen(key);
	for (int i = 0; i < o->n; i++)
		if (o->klen[i] == l && !memcmp(o->keys[i], key, l))
			return o->a[i];
	return NULL;
}

void gbuf_put(struct gbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

void gbuf_putc(struct gbuf *b, char c)
{
	gbuf_put(b, &c, 1);
}

void jv_dump_str(struct gbuf *b, const char *s, size_t n)
{
	gbuf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[8];
		switch (c) {
		case '"': gbuf_put(b, "\\\"", 2); break;
		case '\\': gbuf_put(b, "\\\\", 2); break;
		case '\b': gbuf_put(b, "\\b", 2); break;
		case '\f': gbuf_put(b, "\\f", 2); break;
		case '\n': gbuf_put(b, "\\n", 2); break;
		case '\r': gbuf_put(b, "\\r", 2); break;
		case '\t': gbuf_put(b, "\\t", 2); break;
		default:
			if (c < 0x20) {
				snprintf(e, sizeof e, "\\u%04x", c);
				gbuf_put(b, e, 6);
			} else {
				gbuf_putc(b, (char)c);
			}
		}
	}
	gbuf_putc(b, '"');
}

void jv_dump(struct gbuf *b, const struct jv *v)
{
	switch (v->t) {
	case JV_NULL: gbuf_put(b, "null", 4); break;
	case JV_BOOL: v->b ? gbuf_put(b, "true", 4) : gbuf_put(b, "false", 5); break;
	case JV_NUM: gbuf_put(b, v->s, v->len); break;
	case JV_STR: jv_dump_str(b, v->s, v->len); break;
	case JV_ARR:
	case JV_OBJ:
		gbuf_putc(b, v->t == JV_OBJ ? '{' : '[');
		for (int i = 0; i < v->n; i++) {
			if (i)
				gbuf_putc(b, ',');
			if (v->t == JV_OBJ) {
				jv_dump_str(b, v->keys[i], v->klen[i]);
				gbuf_putc(b, ':');
			}
			jv_dump(b, v->a[i]);
		}
		gbuf_putc(b, v->t == JV_OBJ ? '}' : ']');
		break;
	}
}

bool jv_equal(const struct jv *x, const struct jv *y)
{
	if (x->t != y->t)
		return false;
	switch (x->t) {
	case JV_NULL: return true;
	case JV_BOOL: return x->b == y->b;
	case JV_NUM: return x->num == y->num;
	case JV_STR: return x->len == y->len && !memcmp(x->s, y->s, x->len);
	case JV_ARR:
		if (x->n != y->n)
			return false;
		for (int i = 0; i < x->n; i++)
			if (!jv_equal(x->a[i], y->a[i]))
				return false;
		return true;
	case JV_OBJ:
		if (x->n != y->n)
			return false;
		for (int i = 0; i < x->n; i++) {
			bool found = false;
			for (int j = 0; j < y->n && !found; j++)
				if (x->klen[i] == y->klen[j] && !memcmp(x->keys[i], y->keys[j], x->klen[i]))
					found = jv_equal(x->a[i], y->a[j]);
			if (!found)
				return false;
		}
		return true;
	}
	return false;
}
