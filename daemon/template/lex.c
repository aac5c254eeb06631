/* daemon/template/lex.c — Jinja's lexer with trim_blocks, lstrip_blocks and
 * keep_trailing_newline=False, as transformers configures it. */
#include "daemon/template/tpl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lx {
	struct tpl_heap *h;
	const char *s;
	size_t n, i;
	int line;
	struct tpl_token *t;
	size_t nt, cap;
};

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static struct tpl_token *push(struct lx *x, enum tpl_tok type, int line)
{
	if (x->nt == x->cap) {
		size_t nc = x->cap ? x->cap * 2 : 256;
		struct tpl_token *p = tpl_alloc(x->h, nc * sizeof *p);
		if (x->nt)
			memcpy(p, x->t, x->nt * sizeof *p);
		x->t = p;
		x->cap = nc;
	}
	struct tpl_token *t = &x->t[x->nt++];
	memset(t, 0, sizeof *t);
	t->type = type;
	t->line = line;
	return t;
}

static void advance(struct lx *x, size_t to)
{
	for (; x->i < to; x->i++)
		x->line += x->s[x->i] == '\n';
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal: Python's unicode-escape rules; unknown escapes stay. */
static void string_lit(struct lx *x)
{
	char q = x->s[x->i];
	size_t j = x->i + 1;
	while (j < x->n && x->s[j] != q)
		j += x->s[j] == '\\' ? 2 : 1;
	if (j >= x->n)
		tpl_fail(x->h, x->line, "unterminated string");
	struct tpl_token *t = push(x, T_STRING, x->line);
	char *o = tpl_alloc(x->h, j - x->i + 4);
	size_t on = 0;
	for (size_t k = x->i + 1; k < j; k++) {
		char c = x->s[k];
		if (c != '\\') {
			o[on++] = c;
			continue;
		}
		char e = x->s[++k];
		int nd = 0;
		switch (e) {
		case 'n': o[on++] = '\n'; break;
		case 't': o[on++] = '\t'; break;
		case 'r': o[on++] = '\r'; break;
		case '\\': o[on++] = '\\'; break;
		case '\'': o[on++] = '\''; break;
		case '"': o[on++] = '"'; break;
		case 'a': o[on++] = '\a'; break;
		case 'b': o[on++] = '\b'; break;
		case 'f': o[on++] = '\f'; break;
		case 'v': o[on++] = '\v'; break;
		case '\n': break;
		case 'x': nd = 2; break;
		case 'u': nd = 4; break;
		case 'U': nd = 8; break;
		default:
			if (e >= '0' && e <= '7') {
				unsigned v = 0;
				int m = 0;
				for (; m < 3 && k < j && x->s[k] >= '0' && x->s[k] <= '7'; m++, k++)
					v = v * 8 + (x->s[k] - '0');
				k--;
				on += utf8_put(o + on, v);
			} else {
				o[on++] = '\\';
				o[on++] = e;
			}
		}
		if (nd) {
			unsigned v = 0;
			for (int m = 0; m < nd; m++) {
				int d = k + 1 + m < j ? hexval(x->s[k + 1 + m]) : -1;
				if (d < 0)
					tpl_fail(x->h, x->line, "bad \\%c escape in a string", e);
				v = v * 16 + d;
			}
			if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
				tpl_fail(x->h, x->line, "bad \\%c escape in a string", e);
			k += nd;
			on += utf8_put(o + on, v);
		}
	}
	o[on] = 0;
	t->s = o;
	t->n = on;
	advance(x, j + 1);
}

static bool isname0(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool isdig(char c) { return c >= '0' && c <= '9'; }

static void number(struct lx *x)
{
	size_t j = x->i;
	bool flt = false;
	while (j < x->n && (isdig(x->s[j]) || (x->s[j] == '_' && j + 1 < x->n && isdig(x->s[j + 1]))))
		j++;
	if (j + 1 < x->n && x->s[j] == '.' && isdig(x->s[j + 1])) {
		flt = true;
		for (j++; j < x->n && isdig(x->s[j]); j++)
			;
	}
	if (j < x->n && (x->s[j] == 'e' || x->s[j] == 'E')) {
		size_t k = j + 1;
		if (k < x->n && (x->s[k] == '+' || x->s[k] == '-'))
			k++;
		if (k < x->n && isdig(x->s[k])) {
			flt = true;
			for (j = k; j < x->n && isdig(x->s[j]); j++)
				;
		}
	}
	char tmp[128];
	size_t m = 0;
	for (size_t k = x->i; k < j && m < sizeof tmp - 1; k++)
		if (x->s[k] != '_')
			tmp[m++] = x->s[k];
	tmp[m] = 0;
	struct tpl_token *t = push(x, flt ? T_FLOAT : T_INT, x->line);
	errno = 0;
	if (flt) {
		t->f = strtod(tmp, NULL);
	} else {
		t->i = strtoll(tmp, NULL, 10);
		if (errno || j - x->i >= sizeof tmp)
			tpl_fail(x->h, x->line, "integer literal too large");
	}
	advance(x, j);
}

static const char ops2[][3] = { "//", "**", "==", "!=", "<=", ">=" };
static const char ops1[] = "+-*/%~<>=()[]{},.:|";

/* Tokens inside {{ }} or {% %} up to the closing delimiter; returns the
 * index just past it (and its '-' flag in *strip). */
static void inside(struct lx *x, char close, bool *strip, size_t *end_at)
{
	int depth = 0;
	for (;;) {
		while (x->i < x->n && is_ws(x->s[x->i]))
			advance(x, x->i + 1);
		if (x->i >= x->n)
			tpl_fail(x->h, x->line, "unexpected end of template inside a tag");
		const char *p = x->s + x->i;
		size_t left = x->n - x->i;
		if (depth == 0) {
			if (left >= 3 && p[0] == '-' && p[1] == close && p[2] == '}') {
				*strip = true;
				*end_at = x->i + 3;
				return;
			}
			if (left >= 3 && p[0] == '+' && p[1] == close && p[2] == '}' && close == '%') {
				*strip = false;
				*end_at = x->i + 3;   /* '+%}' keeps the newline */
				return;
			}
			if (left >= 2 && p[0] == close && p[1] == '}') {
				*strip = false;
				*end_at = x->i + 2;
				return;
			}
		}
		char c = *p;
		if (c == '\'' || c == '"') {
			string_lit(x);
		} else if (isdig(c)) {
			number(x);
		} else if (isname0(c)) {
			size_t j = x->i;
			while (j < x->n && (isname0(x->s[j]) || isdig(x->s[j])))
				j++;
			struct tpl_token *t = push(x, T_NAME, x->line);
			t->s = p;
			t->n = j - x->i;
			advance(x, j);
		} else {
			int op = 0;
			for (size_t k = 0; k < sizeof ops2 / sizeof *ops2 && left >= 2; k++)
				if (p[0] == ops2[k][0] && p[1] == ops2[k][1])
					op = TPL_OP2(p[0], p[1]);
			if (!op && c && strchr(ops1, c))
				op = c;
			if (!op)
				tpl_fail(x->h, x->line, "unexpected character '%c'", c);
			if (op == '(' || op == '[' || op == '{')
				depth++;
			if ((op == ')' || op == ']' || op == '}') && depth > 0)
				depth--;
			push(x, T_OP, x->line)->op = op;
			advance(x, x->i + (op > 255 ? 2 : 1));
		}
	}
}

/* After "{%" at i: " raw %}" or " raw -%}"? Returns the index past it, 0 if not. */
static size_t raw_begin(const char *s, size_t n, size_t i)
{
	while (i < n && is_ws(s[i]))
		i++;
	if (n - i < 3 || memcmp(s + i, "raw", 3))
		return 0;
	for (i += 3; i < n && is_ws(s[i]); i++)
		;
	if (n - i >= 3 && !memcmp(s + i, "-%}", 3)) {
		for (i += 3; i < n && is_ws(s[i]); i++)
			;
		return i;
	}
	return n - i >= 2 && !memcmp(s + i, "%}", 2) ? i + 2 : 0;
}

/* The first "{% endraw %}" from i: its start in *at, its sign ('-', '+' or 0)
 * before and after in *pre, *post; returns the index past it, 0 if none. */
static size_t raw_end(const char *s, size_t n, size_t i, size_t *at, char *pre, char *post)
{
	for (; i + 1 < n; i++) {
		if (s[i] != '{' || s[i + 1] != '%')
			continue;
		size_t k = i + 2;
		*pre = k < n && (s[k] == '-' || s[k] == '+') ? s[k++] : 0;
		while (k < n && is_ws(s[k]))
			k++;
		if (n - k < 6 || memcmp(s + k, "endraw", 6))
			continue;
		for (k += 6; k < n && is_ws(s[k]); k++)
			;
		*post = k < n && (s[k] == '-' || s[k] == '+') ? s[k++] : 0;
		if (n - k >= 2 && !memcmp(s + k, "%}", 2)) {
			*at = i;
			return k + 2;
		}
	}
	return 0;
}

struct tpl_token *tpl_lex(struct tpl_heap *h, const char *src, size_t len, size_t *ntok)
{
	/* Newlines normalised to \n and one trailing newline dropped, as Jinja. */
	char *s = tpl_alloc(h, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[n++] = src[i];
		}
	}
	if (n && s[n - 1] == '\n')
		n--;
	s[n] = 0;
	struct lx x = { .h = h, .s = s, .n = n, .line = 1 };
	bool line_starting = true;
	while (x.i < x.n) {
		/* the next tag */
		size_t j = x.i;
		const char *tag = NULL;
		for (; j + 1 < x.n; j++)
			if (s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')) {
				tag = s + j;
				break;
			}
		if (!tag)
			j = x.n;
		size_t tlen = j - x.i;
		char kind = tag ? tag[1] : 0;
		char mod = tag && j + 2 < x.n ? tag[2] : 0;
		if (tag && mod == '-') {
			while (tlen && is_ws(s[x.i + tlen - 1]))
				tlen--;
		} else if (tag && kind != '{' && mod != '+') {
			size_t lpos = tlen;
			while (lpos && s[x.i + lpos - 1] != '\n')
				lpos--;
			if (lpos > 0 || line_starting) {
				bool blank = true;
				for (size_t k = lpos; k < tlen; k++)
					blank &= is_ws(s[x.i + k]);
				if (blank)
					tlen = lpos;
			}
		}
		if (tlen) {
			struct tpl_token *t = push(&x, T_TEXT, x.line);
			t->s = s + x.i;
			t->n = tlen;
		}
		advance(&x, j);
		if (!tag)
			break;
		int tag_line = x.line;
		size_t end_at, body;
		bool strip = false;
		advance(&x, j + 2 + (mod == '-' || mod == '+'));
		if (kind == '%' && (body = raw_begin(s, x.n, x.i))) {
			/* {% raw %}: the text up to {% endraw %} is data, as written */
			size_t at, after;
			char pre, post;
			if (!(after = raw_end(s, x.n, body, &at, &pre, &post)))
				tpl_fail(h, tag_line, "missing 'endraw' for the raw block opened here");
			size_t clen = at - body;
			if (pre == '-') {
				while (clen && is_ws(s[body + clen - 1]))
					clen--;
			} else if (pre != '+') {
				size_t lpos = clen;
				while (lpos && s[body + lpos - 1] != '\n')
					lpos--;
				bool blank = true;
				for (size_t k = lpos; k < clen; k++)
					blank &= is_ws(s[body + k]);
				if (blank && (lpos > 0 || (body > 0 && s[body - 1] == '\n')))
					clen = lpos;
			}
			advance(&x, body);
			if (clen) {
				struct tpl_token *t = push(&x, T_TEXT, x.line);
				t->s = s + body;
				t->n = clen;
			}
			advance(&x, after);
			size_t k = after;
			if (post == '-')
				while (k < x.n && is_ws(s[k]))
					k++;
			else if (post != '+' && k < x.n && s[k] == '\n')
				k++;
			line_starting = k > after && s[k - 1] == '\n';
			advance(&x, k);
			continue;
		}
		if (kind == '#') {
			const char *e = NULL;
			for (size_t k = x.i; k + 1 < x.n; k++)
				if (s[k] == '#' && s[k + 1] == '}') {
					e = s + k;
					break;
				}
			if (!e)
				tpl_fail(h, tag_line, "unterminated comment");
			size_t k = e - s;
			strip = k > x.i && s[k - 1] == '-';
			end_at = k + 2;
		} else {
			push(&x, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, tag_line);
			inside(&x, kind == '{' ? '}' : '%', &strip, &end_at);
			push(&x, kind == '{' ? T_VAR_END : T_BLOCK_END, x.line);
		}
		bool plus = x.i < end_at && s[x.i] == '+';
		advance(&x, end_at);
		size_t k = x.i;
		if (strip) {
			while (k < x.n && is_ws(s[k]))
				k++;
		} else if (kind != '{' && !plus && k < x.n && s[k] == '\n') {
			k++;
		}
		line_starting = k > end_at && s[k - 1] == '\n';
		advance(&x, k);
	}
	push(&x, T_EOF, x.line);
	*ntok = x.nt;
	return x.t;
}
