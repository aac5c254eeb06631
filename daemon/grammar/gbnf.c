/* daemon/grammar/gbnf.c — llama.cpp's GBNF into the grammar: rules
 * `name ::= ...`, "literals", [classes], '.', groups, | and the postfix
 * * + ? {m} {m,} {m,n}; '#' comments; the start rule is "root". Rules may
 * be used before they are defined; an undefined one is an error. */
#include "daemon/grammar/gm_int.h"

#include <stdlib.h>
#include <string.h>

#define GB_MAX_DEPTH 64

struct gb {
	struct gm_b *b;
	const char *s;
	size_t n, i;
	int line;
	struct { const char *name; size_t len; int32_t nt; bool defined; int line; } *rules;
	int n_rules, cap_rules;
	int depth;
};

static bool gerr(struct gb *p, const char *what)
{
	gmb_fail(p->b, "grammar: line %d: %s", p->line, what);
	return false;
}

static bool word_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '_';
}

/* Skip blanks and comments; newlines only when nl. */
static void space(struct gb *p, bool nl)
{
	while (p->i < p->n) {
		char c = p->s[p->i];
		if (c == '#') {
			while (p->i < p->n && p->s[p->i] != '\n')
				p->i++;
		} else if (c == ' ' || c == '\t' || c == '\r') {
			p->i++;
		} else if (c == '\n' && nl) {
			p->line++;
			p->i++;
		} else if (c == '\\' && p->i + 1 < p->n && p->s[p->i + 1] == '\n') {
			p->line++;
			p->i += 2;
		} else {
			break;
		}
	}
}

static int32_t rule_ref(struct gb *p, const char *name, size_t len, bool define)
{
	for (int k = 0; k < p->n_rules; k++)
		if (p->rules[k].len == len && !memcmp(p->rules[k].name, name, len)) {
			if (define)
				p->rules[k].defined = true;
			return p->rules[k].nt;
		}
	if (p->n_rules == p->cap_rules) {
		int cap = p->cap_rules ? p->cap_rules * 2 : 16;
		void *r = realloc(p->rules, cap * sizeof *p->rules);
		if (!r) {
			gmb_fail(p->b, "out of memory");
			return 0;
		}
		p->rules = r;
		p->cap_rules = cap;
	}
	int32_t nt = gmb_nt(p->b);
	p->rules[p->n_rules].name = name;
	p->rules[p->n_rules].len = len;
	p->rules[p->n_rules].nt = nt;
	p->rules[p->n_rules].defined = define;
	p->rules[p->n_rules].line = p->line;
	p->n_rules++;
	return nt;
}

static uint32_t utf8_next(struct gb *p)
{
	const unsigned char *s = (const unsigned char *)p->s + p->i;
	size_t left = p->n - p->i;
	uint32_t c = s[0];
	int l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if ((size_t)l > left || (l > 1 && c < 0xC2) || c > 0xF4) {
		p->i++;
		return c;
	}
	uint32_t v = l == 1 ? c : l == 2 ? c & 0x1F : l == 3 ? c & 0x0F : c & 0x07;
	for (int k = 1; k < l; k++) {
		if ((s[k] & 0xC0) != 0x80) {
			p->i++;
			return c;
		}
		v = v << 6 | (s[k] & 0x3F);
	}
	p->i += l;
	return v;
}

static bool hexn(struct gb *p, int n, uint32_t *out)
{
	uint32_t v = 0;
	for (int k = 0; k < n; k++) {
		char c = p->i < p->n ? p->s[p->i] : 0;
		int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (h < 0)
			return gerr(p, "bad hex escape");
		v = v << 4 | h;
		p->i++;
	}
	*out = v;
	return true;
}

/* One character of a literal or class, escapes decoded. */
static bool one(struct gb *p, uint32_t *out)
{
	if (p->i >= p->n)
		return gerr(p, "unexpected end");
	if (p->s[p->i] != '\\') {
		*out = utf8_next(p);
		return true;
	}
	p->i++;
	char c = p->i < p->n ? p->s[p->i++] : 0;
	switch (c) {
	case 'x': return hexn(p, 2, out);
	case 'u': return hexn(p, 4, out);
	case 'U': return hexn(p, 8, out);
	case 't': *out = '\t'; return true;
	case 'r': *out = '\r'; return true;
	case 'n': *out = '\n'; return true;
	case '\\': case '"': case '[': case ']': case '-': case '^': case '.': case '/':
		*out = (uint8_t)c;
		return true;
	default:
		return gerr(p, "unknown escape");
	}
}

static int32_t chars(struct gb *p, struct gm_cps *s)
{
	if (cps_failed(s)) {
		gmb_fail(p->b, "out of memory");
		return 0;
	}
	cps_norm(s);
	int32_t sym = gmb_cps(p->b, (const uint32_t(*)[2])s->r, s->n);
	cps_free(s);
	return sym;
}

static int32_t alternates(struct gb *p, bool nested);

static bool push(struct gb *p, int32_t **v, int *n, int *cap, int32_t x)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 8;
		int32_t *nv = realloc(*v, *cap * sizeof **v);
		if (!nv) {
			gmb_fail(p->b, "out of memory");
			return false;
		}
		*v = nv;
	}
	(*v)[(*n)++] = x;
	return true;
}

static int32_t literal(struct gb *p)
{
	p->i++; /* '"' */
	int32_t *v = NULL;
	int n = 0, cap = 0;
	while (p->i < p->n && p->s[p->i] != '"' && !p->b->failed) {
		uint32_t c;
		if (!one(p, &c))
			break;
		uint8_t u[4];
		int l = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
		if (c > 0x10FFFF) {
			gerr(p, "code point out of range");
			break;
		}
		if (l == 1) u[0] = c;
		else if (l == 2) u[0] = 0xC0 | c >> 6, u[1] = 0x80 | (c & 63);
		else if (l == 3) u[0] = 0xE0 | c >> 12, u[1] = 0x80 | (c >> 6 & 63), u[2] = 0x80 | (c & 63);
		else u[0] = 0xF0 | c >> 18, u[1] = 0x80 | (c >> 12 & 63), u[2] = 0x80 | (c >> 6 & 63), u[3] = 0x80 | (c & 63);
		for (int k = 0; k < l; k++)
			push(p, &v, &n, &cap, gmb_byte(p->b, u[k]));
	}
	if (!p->b->failed && p->i >= p->n)
		gerr(p, "unterminated literal");
	p->i++;
	int32_t s = n ? gmb_seq(p->b, v, n) : gmb_eps(p->b);
	free(v);
	return s;
}

static int32_t class(struct gb *p)
{
	p->i++; /* '[' */
	bool neg = p->i < p->n && p->s[p->i] == '^';
	if (neg)
		p->i++;
	struct gm_cps s = { 0 };
	while (p->i < p->n && p->s[p->i] != ']' && !p->b->failed) {
		uint32_t lo, hi;
		if (!one(p, &lo))
			break;
		hi = lo;
		if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			if (!one(p, &hi))
				break;
		}
		if (hi < lo) {
			gerr(p, "class range out of order");
			break;
		}
		cps_add(&s, lo, hi);
	}
	if (!p->b->failed && p->i >= p->n)
		gerr(p, "unterminated class");
	p->i++;
	if (p->b->failed) {
		cps_free(&s);
		return 0;
	}
	if (neg)
		cps_negate(&s);
	return chars(p, &s);
}

static bool num(struct gb *p, long *out)
{
	if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
		return false;
	long v = 0;
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
		if ((v = v * 10 + (p->s[p->i++] - '0')) > 100000)
			v = 100000;
	*out = v;
	return true;
}

static int32_t sequence(struct gb *p, bool nested)
{
	int32_t *v = NULL;
	int n = 0, cap = 0;
	while (p->i < p->n && !p->b->failed) {
		char c = p->s[p->i];
		int32_t a;
		if (c == '"') {
			a = literal(p);
		} else if (c == '[') {
			a = class(p);
		} else if (c == '.') {
			p->i++;
			struct gm_cps s = { 0 };
			cps_negate(&s);
			a = chars(p, &s);
		} else if (c == '(') {
			p->i++;
			space(p, true);
			if (++p->depth > GB_MAX_DEPTH) {
				gerr(p, "nested too deep");
				break;
			}
			a = alternates(p, true);
			p->depth--;
			if (p->b->failed)
				break;
			if (p->i >= p->n || p->s[p->i] != ')') {
				gerr(p, "missing ')'");
				break;
			}
			p->i++;
		} else if (word_char(c)) {
			size_t st = p->i;
			while (p->i < p->n && word_char(p->s[p->i]))
				p->i++;
			/* a rule name followed by ::= starts the next rule */
			size_t save = p->i;
			space(p, false);
			if (p->n - p->i >= 3 && !memcmp(p->s + p->i, "::=", 3)) {
				p->i = st;
				break;
			}
			p->i = save;
			a = rule_ref(p, p->s + st, p->i - st, false);
		} else {
			break;
		}
		space(p, nested);
		for (;;) {
			if (p->i >= p->n)
				break;
			char q = p->s[p->i];
			long min, max;
			if (q == '*') min = 0, max = -1;
			else if (q == '+') min = 1, max = -1;
			else if (q == '?') min = 0, max = 1;
			else if (q == '{') {
				p->i++;
				space(p, nested);
				if (!num(p, &min)) {
					gerr(p, "expected a number after '{'");
					break;
				}
				space(p, nested);
				max = min;
				if (p->i < p->n && p->s[p->i] == ',') {
					p->i++;
					space(p, nested);
					max = -1;
					num(p, &max);
					space(p, nested);
				}
				if (p->i >= p->n || p->s[p->i] != '}') {
					gerr(p, "expected '}'");
					break;
				}
				if (max >= 0 && max < min) {
					gerr(p, "bad repetition bounds");
					break;
				}
			} else
				break;
			p->i++;
			a = gmb_rep(p->b, a, min, max);
			space(p, nested);
		}
		if (!push(p, &v, &n, &cap, a))
			break;
	}
	int32_t s = p->b->failed ? 0 : n ? gmb_seq(p->b, v, n) : gmb_eps(p->b);
	free(v);
	return s;
}

static int32_t alternates(struct gb *p, bool nested)
{
	int32_t *v = NULL;
	int n = 0, cap = 0;
	for (;;) {
		int32_t s = sequence(p, nested);
		if (p->b->failed || !push(p, &v, &n, &cap, s))
			break;
		if (p->i < p->n && p->s[p->i] == '|') {
			p->i++;
			space(p, true);
			continue;
		}
		break;
	}
	int32_t s = p->b->failed ? 0 : gmb_alt(p->b, v, n);
	free(v);
	return s;
}

int32_t gm_gbnf(struct gm_b *b, const char *src, size_t len)
{
	struct gb p = { .b = b, .s = src, .n = len, .line = 1 };
	space(&p, true);
	while (p.i < p.n && !b->failed) {
		size_t st = p.i;
		while (p.i < p.n && word_char(p.s[p.i]))
			p.i++;
		if (p.i == st) {
			gerr(&p, "expected a rule name");
			break;
		}
		size_t nlen = p.i - st;
		space(&p, false);
		if (p.n - p.i < 3 || memcmp(p.s + p.i, "::=", 3)) {
			gerr(&p, "expected '::='");
			break;
		}
		p.i += 3;
		space(&p, true);
		int32_t nt = rule_ref(&p, p.s + st, nlen, true);
		int32_t body = alternates(&p, false);
		if (b->failed)
			break;
		gmb_prod(b, nt, &body, 1);
		if (p.i < p.n && p.s[p.i] != '\n' && !word_char(p.s[p.i])) {
			/* llama.cpp's token references name one vocabulary's ids */
			gerr(&p, p.s[p.i] == '<' || p.s[p.i] == '!' ? "token references (<[id]>, !<[id]>) are not supported: "
								      "pagoda's grammars are over bytes"
								    : "unexpected character");
			break;
		}
		space(&p, true);
	}
	int32_t root = -1;
	for (int k = 0; k < p.n_rules && !b->failed; k++) {
		if (!p.rules[k].defined) {
			p.line = p.rules[k].line;
			gmb_fail(b, "grammar: line %d: undefined rule '%.*s'", p.line, (int)p.rules[k].len,
				 p.rules[k].name);
		}
		if (p.rules[k].len == 4 && !memcmp(p.rules[k].name, "root", 4))
			root = p.rules[k].nt;
	}
	if (!b->failed && root < 0)
		gmb_fail(b, "grammar: no rule 'root'");
	free(p.rules);
	return root < 0 ? 0 : root;
}
