/* daemon/grammar/regex.c — regular expressions (the ECMAScript subset JSON
 * Schema patterns use) into the grammar: literals, '.', classes, the \d \w
 * \s families, groups, alternation, * + ? {m} {m,} {m,n}. Back-references,
 * look-around and word boundaries are refused: a grammar cannot say them.
 *
 * In JSON mode the grammar matches a JSON string's contents: each character
 * as the JSON writer escapes it, and the match may start and end anywhere
 * unless anchored (JSON Schema's pattern searches). */
#include "daemon/grammar/gm_int.h"

#include <stdlib.h>
#include <string.h>

#define RE_MAX_DEPTH 64

struct re {
	struct gm_b *b;
	const unsigned char *s;
	size_t n, i;
	bool json;
	int depth;
};

static int32_t re_alt(struct re *r);

static int32_t chars(struct re *r, struct gm_cps *s)
{
	if (cps_failed(s)) {
		gmb_fail(r->b, "out of memory");
		return 0;
	}
	cps_norm(s);
	int32_t sym = r->json ? gm_json_chars(r->b, s) : gmb_cps(r->b, (const uint32_t(*)[2])s->r, s->n);
	cps_free(s);
	return sym;
}

static int32_t one_char(struct re *r, uint32_t c)
{
	struct gm_cps s = { 0 };
	cps_add(&s, c, c);
	return chars(r, &s);
}

static bool err(struct re *r, const char *what)
{
	gmb_fail(r->b, "regex: %s at offset %zu", what, r->i);
	return false;
}

static uint32_t utf8_next(struct re *r)
{
	const unsigned char *s = r->s + r->i;
	size_t left = r->n - r->i;
	uint32_t c = s[0];
	int l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if ((size_t)l > left || (l > 1 && c < 0xC2) || c > 0xF4) {
		r->i++;
		return c; /* not UTF-8: the byte as a Latin-1 character */
	}
	uint32_t v = l == 1 ? c : l == 2 ? c & 0x1F : l == 3 ? c & 0x0F : c & 0x07;
	for (int k = 1; k < l; k++) {
		if ((s[k] & 0xC0) != 0x80) {
			r->i++;
			return c;
		}
		v = v << 6 | (s[k] & 0x3F);
	}
	r->i += l;
	return v;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool hexn(struct re *r, int n, uint32_t *out)
{
	uint32_t v = 0;
	for (int k = 0; k < n; k++) {
		if (r->i >= r->n || hexval(r->s[r->i]) < 0)
			return err(r, "bad hex escape");
		v = v << 4 | hexval(r->s[r->i++]);
	}
	*out = v;
	return true;
}

static void add_space(struct gm_cps *s)
{
	static const uint32_t sp[][2] = { { 9, 13 }, { 32, 32 }, { 0xA0, 0xA0 }, { 0x1680, 0x1680 },
					  { 0x2000, 0x200A }, { 0x2028, 0x2029 }, { 0x202F, 0x202F },
					  { 0x205F, 0x205F }, { 0x3000, 0x3000 }, { 0xFEFF, 0xFEFF } };
	for (size_t k = 0; k < sizeof sp / sizeof *sp; k++)
		cps_add(s, sp[k][0], sp[k][1]);
}

/* A class escape (\d \w \s and negations) into s: true if c was one. */
static bool class_escape(char c, struct gm_cps *s)
{
	struct gm_cps t = { 0 };
	switch (c) {
	case 'd': case 'D': cps_add(&t, '0', '9'); break;
	case 'w': case 'W':
		cps_add(&t, '0', '9');
		cps_add(&t, 'A', 'Z');
		cps_add(&t, 'a', 'z');
		cps_add(&t, '_', '_');
		break;
	case 's': case 'S': add_space(&t); break;
	default: return false;
	}
	if (c == 'D' || c == 'W' || c == 'S')
		cps_negate(&t);
	for (int k = 0; k < t.n; k++)
		cps_add(s, t.r[k][0], t.r[k][1]);
	if (cps_failed(&t))
		s->n = -1;
	cps_free(&t);
	return true;
}

/* After a backslash: one character's escape. in_class: \b is backspace. */
static bool char_escape(struct re *r, bool in_class, uint32_t *out)
{
	if (r->i >= r->n)
		return err(r, "trailing backslash");
	unsigned char c = r->s[r->i];
	switch (c) {
	case 'n': r->i++; *out = '\n'; return true;
	case 't': r->i++; *out = '\t'; return true;
	case 'r': r->i++; *out = '\r'; return true;
	case 'f': r->i++; *out = '\f'; return true;
	case 'v': r->i++; *out = '\v'; return true;
	case '0': r->i++; *out = 0; return true;
	case 'x': r->i++; return hexn(r, 2, out);
	case 'u':
		r->i++;
		if (r->i < r->n && r->s[r->i] == '{') {
			r->i++;
			uint32_t v = 0;
			int k = 0;
			while (r->i < r->n && hexval(r->s[r->i]) >= 0 && k < 6)
				v = v << 4 | hexval(r->s[r->i++]), k++;
			if (!k || r->i >= r->n || r->s[r->i] != '}' || v > 0x10FFFF)
				return err(r, "bad \\u{} escape");
			r->i++;
			*out = v;
			return true;
		}
		return hexn(r, 4, out);
	case 'b':
		if (in_class) {
			r->i++;
			*out = '\b';
			return true;
		}
		return err(r, "word boundary \\b is not supported");
	case 'B': return err(r, "\\B is not supported");
	case 'p': case 'P': return err(r, "Unicode property escapes are not supported");
	case 'c': return err(r, "control escapes \\c are not supported");
	case 'k': return err(r, "named back-references are not supported");
	default:
		if (c >= '1' && c <= '9')
			return err(r, "back-references are not supported");
		*out = utf8_next(r);
		return true;
	}
}

static int32_t class(struct re *r)
{
	r->i++; /* '[' */
	bool neg = r->i < r->n && r->s[r->i] == '^';
	if (neg)
		r->i++;
	struct gm_cps s = { 0 };
	bool first = true;
	for (;;) {
		if (r->i >= r->n) {
			cps_free(&s);
			err(r, "unterminated class");
			return 0;
		}
		if (r->s[r->i] == ']' && !first)
			break;
		if (r->s[r->i] == ']' && first) {
			/* ECMAScript: [] matches nothing, [^] anything */
			break;
		}
		first = false;
		uint32_t lo;
		if (r->s[r->i] == '\\') {
			r->i++;
			if (r->i < r->n && class_escape((char)r->s[r->i], &s)) {
				r->i++;
				continue;
			}
			if (!char_escape(r, true, &lo)) {
				cps_free(&s);
				return 0;
			}
		} else {
			lo = utf8_next(r);
		}
		uint32_t hi = lo;
		if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
			r->i++;
			if (r->s[r->i] == '\\') {
				r->i++;
				if (r->i < r->n && strchr("dwsDWS", r->s[r->i])) {
					/* [a-\d]: '-' is literal */
					cps_add(&s, lo, lo);
					cps_add(&s, '-', '-');
					class_escape((char)r->s[r->i++], &s);
					continue;
				}
				if (!char_escape(r, true, &hi)) {
					cps_free(&s);
					return 0;
				}
			} else {
				hi = utf8_next(r);
			}
			if (hi < lo) {
				cps_free(&s);
				err(r, "class range out of order");
				return 0;
			}
		}
		cps_add(&s, lo, hi);
	}
	r->i++; /* ']' */
	if (neg)
		cps_negate(&s);
	return chars(r, &s);
}

static bool number(struct re *r, long *out)
{
	if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
		return false;
	long v = 0;
	while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
		v = v * 10 + (r->s[r->i++] - '0');
		if (v > 100000)
			v = 100000;
	}
	*out = v;
	return true;
}

/* {m}, {m,}, {m,n}: true and the bounds, or false with r->i unmoved when
 * the brace is a literal (as ECMAScript's Annex B reads it). */
static bool braces(struct re *r, long *min, long *max)
{
	size_t at = r->i;
	r->i++;
	if (!number(r, min))
		goto literal;
	*max = *min;
	if (r->i < r->n && r->s[r->i] == ',') {
		r->i++;
		*max = -1;
		number(r, max);
	}
	if (r->i < r->n && r->s[r->i] == '}') {
		r->i++;
		return true;
	}
literal:
	r->i = at;
	return false;
}

static int32_t atom(struct re *r)
{
	unsigned char c = r->s[r->i];
	switch (c) {
	case '(': {
		r->i++;
		if (r->i < r->n && r->s[r->i] == '?') {
			r->i++;
			if (r->i < r->n && r->s[r->i] == ':') {
				r->i++;
			} else if (r->i < r->n && (r->s[r->i] == '<' || r->s[r->i] == 'P') &&
				   !(r->i + 1 < r->n && (r->s[r->i + 1] == '=' || r->s[r->i + 1] == '!'))) {
				while (r->i < r->n && r->s[r->i] != '>')
					r->i++;
				if (r->i >= r->n) {
					err(r, "unterminated group name");
					return 0;
				}
				r->i++;
			} else {
				err(r, "look-around is not supported");
				return 0;
			}
		}
		if (++r->depth > RE_MAX_DEPTH) {
			err(r, "nested too deep");
			return 0;
		}
		int32_t s = re_alt(r);
		r->depth--;
		if (r->b->failed)
			return 0;
		if (r->i >= r->n || r->s[r->i] != ')') {
			err(r, "missing ')'");
			return 0;
		}
		r->i++;
		return s;
	}
	case '[':
		return class(r);
	case '.': {
		r->i++;
		struct gm_cps s = { 0 };
		cps_add(&s, '\n', '\n');
		cps_add(&s, '\r', '\r');
		cps_add(&s, 0x2028, 0x2029);
		cps_negate(&s);
		return chars(r, &s);
	}
	case '\\': {
		r->i++;
		struct gm_cps s = { 0 };
		if (r->i < r->n && class_escape((char)r->s[r->i], &s)) {
			r->i++;
			return chars(r, &s);
		}
		uint32_t ch;
		if (!char_escape(r, false, &ch))
			return 0;
		return one_char(r, ch);
	}
	case '*': case '+': case '?':
		err(r, "nothing to repeat");
		return 0;
	case '^': case '$':
		err(r, "anchor inside the expression is not supported");
		return 0;
	default:
		return one_char(r, utf8_next(r));
	}
}

static int32_t re_seq(struct re *r)
{
	int32_t *v = NULL;
	int n = 0, cap = 0;
	while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')' && !r->b->failed) {
		if (r->s[r->i] == '$' && r->depth == 0 &&
		    (r->i + 1 == r->n || r->s[r->i + 1] == '|'))
			break;
		int32_t a = atom(r);
		if (r->b->failed)
			break;
		for (;;) {
			long min = -2, max = -1;
			if (r->i >= r->n)
				break;
			char q = (char)r->s[r->i];
			if (q == '*') min = 0, max = -1;
			else if (q == '+') min = 1, max = -1;
			else if (q == '?') min = 0, max = 1;
			else if (q == '{' && braces(r, &min, &max)) r->i--;
			else break;
			r->i++;
			if (r->i < r->n && r->s[r->i] == '?')
				r->i++; /* lazy: same language */
			if (max >= 0 && max < min) {
				err(r, "bad repetition bounds");
				break;
			}
			a = gmb_rep(r->b, a, min, max);
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			int32_t *nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				gmb_fail(r->b, "out of memory");
				break;
			}
			v = nv;
		}
		v[n++] = a;
	}
	int32_t s = n ? gmb_seq(r->b, v, n) : gmb_eps(r->b);
	free(v);
	return s;
}

/* The top level: each branch may be anchored; in JSON mode an unanchored
 * side matches any characters. */
static int32_t re_alt(struct re *r)
{
	int32_t *v = NULL;
	int n = 0, cap = 0;
	int32_t any = 0;
	for (;;) {
		bool start = false, end = false;
		if (r->depth == 0 && r->i < r->n && r->s[r->i] == '^') {
			r->i++;
			start = true;
		}
		int32_t s = re_seq(r);
		if (r->depth == 0 && r->i < r->n && r->s[r->i] == '$') {
			r->i++;
			end = true;
		}
		if (r->b->failed)
			break;
		if (r->json && r->depth == 0 && (!start || !end)) {
			if (!any) {
				struct gm_cps all = { 0 };
				cps_negate(&all);
				any = gmb_rep(r->b, chars(r, &all), 0, -1);
			}
			int32_t three[3], k = 0;
			if (!start)
				three[k++] = any;
			three[k++] = s;
			if (!end)
				three[k++] = any;
			s = gmb_seq(r->b, three, k);
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 4;
			int32_t *nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				gmb_fail(r->b, "out of memory");
				break;
			}
			v = nv;
		}
		v[n++] = s;
		if (r->i < r->n && r->s[r->i] == '|') {
			r->i++;
			continue;
		}
		break;
	}
	int32_t s = r->b->failed || !n ? 0 : gmb_alt(r->b, v, n);
	free(v);
	return s;
}

int32_t gm_regex(struct gm_b *b, const char *re, size_t len, bool json)
{
	struct re r = { .b = b, .s = (const unsigned char *)re, .n = len, .json = json };
	int32_t s = re_alt(&r);
	if (!b->failed && r.i < r.n)
		err(&r, r.s[r.i] == ')' ? "unmatched ')'" : "unexpected character");
	return s;
}

/* The terminal taking any byte of chars. */
static int32_t chars_term(struct gm_b *b, const char *chars)
{
	uint64_t set[4] = { 0 };
	for (const uint8_t *c = (const uint8_t *)chars; *c; c++)
		set[*c >> 6] |= 1ull << (*c & 63);
	return gmb_set(b, set);
}

/* A backslash and what follows it for the control characters in ctl (a
 * bit each; short forms where JSON has them, else \u00XX in lowercase
 * hex), and for '"' and '\\' as asked: one alternative where each escape
 * would be its own, so a parser state inside a string holds a handful of
 * items, not dozens (`\S` takes 27 controls). 0 if there are none. */
static int32_t esc_of(struct gm_b *b, uint32_t ctl, bool quote, bool bslash)
{
	int32_t *nt = ctl == UINT32_MAX ? &b->esc_nt[quote * 2 + bslash] : NULL;
	if (nt && *nt)
		return *nt - 1;
	static const char sh[32] = { ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't' };
	static const char hx[] = "0123456789abcdef";
	char shorts[8], low[2][17];
	int ns = 0, nl[2] = { 0, 0 };
	for (int c = 0; c < 32; c++)
		if (ctl >> c & 1) {
			if (sh[c])
				shorts[ns++] = sh[c];
			else
				low[c >> 4][nl[c >> 4]++] = hx[c & 15];
		}
	if (quote)
		shorts[ns++] = '"';
	if (bslash)
		shorts[ns++] = '\\';
	shorts[ns] = 0;
	int32_t tail[2], last[2];
	int nt_ = 0, nlast = 0;
	if (ns)
		tail[nt_++] = chars_term(b, shorts);
	for (int h = 0; h < 2; h++)
		if (nl[h]) {
			low[h][nl[h]] = 0;
			int32_t two[2] = { gmb_byte(b, (uint8_t)"01"[h]), chars_term(b, low[h]) };
			last[nlast++] = gmb_seq(b, two, 2);
		}
	if (nlast) {
		int32_t u[4] = { gmb_byte(b, 'u'), gmb_byte(b, '0'), gmb_byte(b, '0'), gmb_alt(b, last, nlast) };
		tail[nt_++] = gmb_seq(b, u, 4);
	}
	if (!nt_)
		return 0;
	int32_t e[2] = { gmb_byte(b, '\\'), gmb_alt(b, tail, nt_) };
	int32_t r = gmb_seq(b, e, 2);
	if (nt)
		*nt = r + 1;
	return r;
}

/* Every character of two bytes or more (surrogates excluded). */
static int32_t multibyte_all(struct gm_b *b)
{
	if (!b->multibyte_nt) {
		const uint32_t r[1][2] = { { 0x80, 0x10FFFF } };
		b->multibyte_nt = gmb_cps(b, r, 1) + 1;
	}
	return b->multibyte_nt - 1;
}

int32_t gm_json_chars(struct gm_b *b, const struct gm_cps *s)
{
	struct gm_cps raw = { 0 };
	int32_t alts[3];
	int n = 0;
	uint32_t ctl = 0;
	bool quote = false, bslash = false;
	for (int i = 0; i < s->n; i++) {
		uint32_t lo = s->r[i][0], hi = s->r[i][1];
		for (uint32_t c = lo; c <= hi && c < 0x20; c++)
			ctl |= 1u << c;
		quote |= lo <= '"' && hi >= '"';
		bslash |= lo <= '\\' && hi >= '\\';
		if (lo < 0x20)
			lo = 0x20;
		/* the raw part: all but '"' and '\\' */
		if (lo <= '"' && hi >= '"') {
			if (lo < '"')
				cps_add(&raw, lo, '"' - 1);
			lo = '"' + 1;
		}
		if (lo <= '\\' && hi >= '\\') {
			if (lo < '\\')
				cps_add(&raw, lo, '\\' - 1);
			lo = '\\' + 1;
		}
		if (lo <= hi)
			cps_add(&raw, lo, hi);
	}
	if (ctl || quote || bslash)
		alts[n++] = esc_of(b, ctl, quote, bslash);
	if (cps_failed(&raw)) {
		gmb_fail(b, "out of memory");
		return 0;
	}
	/* the one-byte characters as one terminal; the rest shared where whole */
	uint64_t ascii[4] = { 0 };
	bool any = false;
	struct gm_cps wide = { 0 };
	for (int i = 0; i < raw.n; i++) {
		uint32_t lo = raw.r[i][0], hi = raw.r[i][1];
		for (uint32_t c = lo; c <= hi && c < 0x80; c++, any = true)
			ascii[c >> 6] |= 1ull << (c & 63);
		if (hi >= 0x80)
			cps_add(&wide, lo < 0x80 ? 0x80 : lo, hi);
	}
	cps_free(&raw);
	if (any)
		alts[n++] = gmb_set(b, ascii);
	if (cps_failed(&wide)) {
		gmb_fail(b, "out of memory");
		return 0;
	}
	if (wide.n == 1 && wide.r[0][0] == 0x80 && wide.r[0][1] >= 0x10FFFF)
		alts[n++] = multibyte_all(b);
	else if (wide.n > 0)
		alts[n++] = gmb_cps(b, (const uint32_t(*)[2])wide.r, wide.n);
	cps_free(&wide);
	if (n == 0)
		return gmb_none(b);
	return gmb_alt(b, alts, n);
}
