/* daemon/grammar/schema.c — JSON Schema into the grammar. Output is
 * compact JSON with properties in the schema's order (optional ones may be
 * left out, undeclared ones follow when allowed). A validation keyword the
 * grammar cannot express is refused, naming it; keywords that are not
 * validation keywords (title, description, x-..., unknown formats) are
 * annotations and change nothing.
 *
 * allOf is merged into one schema; anyOf/oneOf become alternatives, each
 * merged with its siblings (oneOf is read as anyOf: a grammar cannot count
 * matches); $ref is a nonterminal, so recursion is free. */
#include "daemon/grammar/schema_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t sym(struct sc *c, const struct jv *s);

bool sc_err(struct sc *c, const char *fmt, const char *arg)
{
	char m[200];
	snprintf(m, sizeof m, fmt, arg);
	gmb_fail(c->b, "JSON Schema: %s", m);
	return false;
}

bool sc_true(const struct jv *v)
{
	return v && v->t == JV_BOOL && v->b;
}

/* ---- building jv values in the arena ---------------------------------- */

struct jv *sc_new(struct sc *c, enum jv_type t)
{
	struct jv *v = jv_alloc(c->a, sizeof *v);
	if (!v)
		gmb_fail(c->b, "out of memory");
	else
		v->t = t;
	return v;
}

void sc_put(struct sc *c, struct jv *o, const char *k, size_t kl, struct jv *x)
{
	for (int i = 0; o->t == JV_OBJ && i < o->n; i++)
		if (o->klen[i] == kl && !memcmp(o->keys[i], k, kl)) {
			o->a[i] = x;
			return;
		}
	struct jv **na = jv_alloc(c->a, (o->n + 1) * sizeof *na);
	char **nk = jv_alloc(c->a, (o->n + 1) * sizeof *nk);
	size_t *nl = jv_alloc(c->a, (o->n + 1) * sizeof *nl);
	if (!na || !nk || !nl) {
		gmb_fail(c->b, "out of memory");
		return;
	}
	if (o->n) {
		memcpy(na, o->a, o->n * sizeof *na);
		if (o->keys) {
			memcpy(nk, o->keys, o->n * sizeof *nk);
			memcpy(nl, o->klen, o->n * sizeof *nl);
		}
	}
	na[o->n] = x;
	nk[o->n] = (char *)k;
	nl[o->n] = kl;
	o->a = na;
	o->keys = nk;
	o->klen = nl;
	o->n++;
}

struct jv *sc_pair(struct sc *c, const struct jv *x, const struct jv *y)
{
	struct jv *arr = sc_new(c, JV_ARR), *o = sc_new(c, JV_OBJ);
	if (!arr || !o)
		return NULL;
	sc_put(c, arr, NULL, 0, (struct jv *)x);
	sc_put(c, arr, NULL, 0, (struct jv *)y);
	sc_put(c, o, "allOf", 5, arr);
	return o;
}

/* ---- $ref ---------------------------------------------------------------- */

const struct jv *sc_pointer(struct sc *c, const char *ref)
{
	if (ref[0] != '#')
		return sc_err(c, "$ref to '%s' (only local references are supported)", ref), NULL;
	const struct jv *v = c->root;
	const char *p = ref + 1;
	if (*p && *p != '/')
		return sc_err(c, "$ref to the anchor '%s' is not supported", ref), NULL;
	while (*p == '/') {
		p++;
		char tok[512];
		size_t n = 0;
		while (*p && *p != '/' && n + 1 < sizeof tok) {
			if (p[0] == '~' && p[1] == '0') tok[n++] = '~', p += 2;
			else if (p[0] == '~' && p[1] == '1') tok[n++] = '/', p += 2;
			else if (p[0] == '%' && p[1] && p[2]) {
				char h[3] = { p[1], p[2], 0 };
				tok[n++] = (char)strtol(h, NULL, 16);
				p += 3;
			} else tok[n++] = *p++;
		}
		tok[n] = 0;
		if (v->t == JV_OBJ) {
			v = jv_get(v, tok);
		} else if (v->t == JV_ARR) {
			char *end;
			long i = strtol(tok, &end, 10);
			v = *end || i < 0 || i >= v->n ? NULL : v->a[i];
		} else {
			v = NULL;
		}
		if (!v)
			return sc_err(c, "$ref '%s' points nowhere", ref), NULL;
	}
	return v;
}

static const struct jv *deref(struct sc *c, const struct jv *s)
{
	for (int hops = 0; s && s->t == JV_OBJ; hops++) {
		const struct jv *r = jv_get(s, "$ref");
		if (!r || r->t != JV_STR)
			return s;
		if (hops > 64)
			return sc_err(c, "$ref chain too long at '%s'", r->s), NULL;
		s = sc_pointer(c, r->s);
	}
	return s;
}

/* ---- keyword classes --------------------------------------------------- */

bool sc_in(const char *k, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(k, *list))
			return true;
	return false;
}

static const char *const refused[] = {
	"minContains", "maxContains", "unevaluatedProperties",
	"unevaluatedItems", "$dynamicRef", "$recursiveRef", NULL
};

const char *const sc_validation[] = {
	"type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
	"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
	"maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
	"multipleOf", "anyOf", "oneOf", "allOf", "not", "$ref", "minProperties", "maxProperties",
	"dependencies", "dependentRequired", "dependentSchemas", "propertyNames", "if", "then", "else",
	"contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems",
	"$dynamicRef", "$recursiveRef", NULL
};

const char *const sc_annotations[] = {
	"$schema", "$id", "id", "title", "description", "default", "examples", "$comment",
	"readOnly", "writeOnly", "deprecated", "definitions", "$defs", "contentMediaType",
	"contentEncoding", "$anchor", "$vocabulary", "format", NULL
};

/* ---- literals and fixed pieces ---------------------------------------- */

static int32_t lit_value(struct sc *c, const struct jv *v)
{
	/* 2, 2.0 and 2e0 are one number to JSON Schema: a whole number is
	 * written as an integer or as the schema wrote it */
	if (v->t == JV_NUM && v->num == floor(v->num) && fabs(v->num) < 1e15) {
		char t[32];
		int n = snprintf(t, sizeof t, "%lld", (long long)v->num);
		if ((size_t)n != v->len || memcmp(t, v->s, n)) {
			int32_t two[2] = { gmb_lit(c->b, t, n), gmb_lit(c->b, v->s, v->len) };
			return gmb_alt(c->b, two, 2);
		}
	}
	struct gbuf b = { 0 };
	jv_dump(&b, v);
	int32_t s = b.oom ? (gmb_fail(c->b, "out of memory"), 0) : gmb_lit(c->b, b.p, b.n);
	free(b.p);
	return s;
}

static int32_t jchar(struct sc *c)
{
	if (!c->jchar) {
		struct gm_cps all = { 0 };
		cps_negate(&all);
		c->jchar = gm_json_chars(c->b, &all);
		cps_free(&all);
	}
	return c->jchar;
}

static int32_t json_string(struct sc *c)
{
	if (!c->string)
		c->string = sc_seq3(c, sc_lit(c, "\""), gmb_rep(c->b, jchar(c), 0, -1), sc_lit(c, "\""));
	return c->string;
}

static int32_t json_any(struct sc *c)
{
	if (c->any)
		return c->any;
	c->any = gmb_nt(c->b);
	int32_t v = c->any, str = json_string(c);
	int32_t comma_v = sc_seq2(c, sc_lit(c, ","), v);
	int32_t arr = sc_seq3(c, sc_lit(c, "["), gmb_rep(c->b, sc_seq2(c, v, gmb_rep(c->b, comma_v, 0, -1)), 0, 1), sc_lit(c, "]"));
	int32_t kv = sc_seq3(c, str, sc_lit(c, ":"), v);
	int32_t obj = sc_seq3(c, sc_lit(c, "{"), gmb_rep(c->b, sc_seq2(c, kv, gmb_rep(c->b, sc_seq2(c, sc_lit(c, ","), kv), 0, -1)), 0, 1),
			   sc_lit(c, "}"));
	int32_t alts[] = { obj, arr, str, sc_json_number(c), sc_lit(c, "true"), sc_lit(c, "false"), sc_lit(c, "null") };
	for (int i = 0; i < 7; i++)
		gmb_prod(c->b, v, &alts[i], 1);
	return v;
}

/* ---- strings ------------------------------------------------------------ */

static int32_t other_name(struct sc *c, const char *const *k, const size_t *kl, int n);
static uint32_t cp_at(const char *s, size_t n, size_t *len);

/* RFC 3339 full-date: days per month, February 29 in leap years only */
#define DATE "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|" \
	     "02-(0[1-9]|1[0-9]|2[0-8]))|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"

static const struct { const char *name, *re; } formats[] = {
	{ "date", "^" DATE "$" },
	{ "time", "^([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$" },
	{ "date-time", "^" DATE "[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$" },
	{ "uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" },
	{ "email", "^[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*$" },
	{ "uri", "^[a-zA-Z][a-zA-Z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]*$" },
	{ "ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$" },
};

/* "^(?:a|b)$" for the names, every character escaped: a pattern matching
 * exactly them. */
static char *names_re(struct sc *c, const char *const *k, const size_t *kl, int n, size_t *len)
{
	struct gbuf g = { 0 };
	gbuf_put(&g, "^(?:", 4);
	for (int i = 0; i < n; i++) {
		if (i)
			gbuf_putc(&g, '|');
		for (size_t o = 0; o < kl[i];) {
			size_t l;
			char e[16];
			int m = snprintf(e, sizeof e, "\\u{%X}", (unsigned)cp_at(k[i] + o, kl[i] - o, &l));
			gbuf_put(&g, e, m);
			o += l;
		}
	}
	gbuf_put(&g, ")$", 2);
	char *r = g.oom ? NULL : jv_alloc(c->a, g.n + 1);
	if (r) {
		memcpy(r, g.p, g.n);
		r[g.n] = 0;
		*len = g.n;
	} else {
		gmb_fail(c->b, "out of memory");
	}
	free(g.p);
	return r;
}

struct pats {
	const char *re[32];
	size_t len[32];
	int n;
	uint32_t neg; /* patterns that must not match */
};

static bool pats_add(struct sc *c, struct pats *p, const char *re, size_t len, bool neg)
{
	if (p->n == 32)
		return sc_err(c, "more than 32 patterns on one %s", "string");
	if (neg)
		p->neg |= 1u << p->n;
	p->re[p->n] = re;
	p->len[p->n++] = len;
	return true;
}

/* The contents of the strings that match the positive patterns, none of
 * the negative ones, with mn..mx characters. */
#define SC_MAX_AUTOM 256
#define SC_SOFT_STATES 2048 /* a lone pattern takes its automaton up to this size */

static int32_t pats_string(struct sc *c, const struct pats *p, long mn, long mx, bool soft)
{
	/* the same patterns and length again (anyOf branches merged with
	 * their siblings repeat them): the same nonterminal */
	struct gbuf k = { 0 };
	char h[64];
	gbuf_put(&k, h, (size_t)snprintf(h, sizeof h, "%ld %ld %u|", mn, mx, p->neg));
	for (int i = 0; i < p->n; i++) {
		gbuf_put(&k, p->re[i], p->len[i]);
		gbuf_putc(&k, 0);
	}
	for (int i = 0; !k.oom && i < c->n_autom; i++)
		if (c->autom[i].len == k.n && !memcmp(c->autom[i].key, k.p, k.n)) {
			free(k.p);
			return c->autom[i].sym;
		}
	if (k.oom || c->n_autom == SC_MAX_AUTOM) {
		free(k.p);
		return k.oom ? (gmb_fail(c->b, "out of memory"), 0) :
			       (sc_err(c, "more than 256 pattern automata in one schema%s", ""), 0);
	}
	if (!c->autom && !(c->autom = calloc(SC_MAX_AUTOM, sizeof *c->autom))) {
		free(k.p);
		return gmb_fail(c->b, "out of memory"), 0;
	}
	int32_t nt = gmb_nt(c->b);
	c->autom[c->n_autom].key = k.p;
	c->autom[c->n_autom].len = k.n;
	c->autom[c->n_autom++].sym = nt;
	char err[160];
	struct gm_dfa *d = gm_dfa_new(p->re, p->len, p->n, err, sizeof err);
	if (soft && (!d || gm_dfa_states(d) > SC_SOFT_STATES)) {
		gm_dfa_free(d);
		free(c->autom[--c->n_autom].key);
		return 0;
	}
	if (!d)
		return gmb_fail(c->b, "%s", err), 0;
	uint32_t all = p->n == 32 ? ~0u : (1u << p->n) - 1;
	int32_t s = gm_dfa_string(c->b, d, all & ~p->neg, p->neg, mn, mx);
	gm_dfa_free(d);
	if (s)
		gmb_prod(c->b, nt, &s, 1);
	return s ? nt : 0;
}

static const char *format_re(const struct jv *fmt)
{
	for (size_t i = 0; fmt && fmt->t == JV_STR && i < sizeof formats / sizeof *formats; i++)
		if (!strcmp(fmt->s, formats[i].name))
			return formats[i].re;
	return NULL;
}

/* ^ or $ inside the pattern (regex.c takes them only at the ends of the
 * top-level branches; the automaton anywhere). */
static bool inner_anchor(const char *re, size_t n)
{
	int depth = 0;
	bool cls = false;
	for (size_t i = 0; i < n; i++) {
		char ch = re[i];
		if (ch == '\\') {
			i++;
		} else if (cls) {
			cls = ch != ']';
		} else if (ch == '[') {
			cls = true;
		} else if (ch == '(') {
			depth++;
		} else if (ch == ')') {
			depth--;
		} else if (ch == '^' && (depth || (i && re[i - 1] != '|'))) {
			return true;
		} else if (ch == '$' && (depth || (i + 1 < n && re[i + 1] != '|'))) {
			return true;
		}
	}
	return false;
}

static int32_t string(struct sc *c, const struct jv *s)
{
	double mn = 0, mx = -1;
	const struct jv *v;
	if ((v = jv_get(s, "minLength")) && v->t == JV_NUM)
		mn = v->num;
	if ((v = jv_get(s, "maxLength")) && v->t == JV_NUM)
		mx = v->num;
	if (mx > 100000) /* not enforced: no generation runs that long */
		mx = -1;
	if (mn > 100000)
		return sc_err(c, "'%s' above 100000", "minLength"), 0;
	/* the patterns: pattern, format, those allOf merged, those "not" or
	 * "not enum" excluded (schema_not.c) */
	struct pats p = { .n = 0 };
	const struct jv *pat = jv_get(s, "pattern"), *more = jv_get(s, "\x01patterns");
	const struct jv *notp = jv_get(s, "\x01notPatterns"), *out = jv_get(s, "\x01notIn");
	const char *fre = format_re(jv_get(s, "format"));
	if (pat && pat->t == JV_STR)
		pats_add(c, &p, pat->s, pat->len, false);
	for (int i = 0; more && more->t == JV_ARR && i < more->n; i++)
		if (more->a[i]->t == JV_STR)
			pats_add(c, &p, more->a[i]->s, more->a[i]->len, false);
	if (fre)
		pats_add(c, &p, fre, strlen(fre), false);
	for (int i = 0; notp && notp->t == JV_ARR && i < notp->n; i++)
		if (notp->a[i]->t == JV_STR)
			pats_add(c, &p, notp->a[i]->s, notp->a[i]->len, true);
	if (out && out->t == JV_ARR && out->n) {
		const char **k = malloc(out->n * sizeof *k);
		size_t *kl = malloc(out->n * sizeof *kl), rl = 0;
		int n = 0;
		for (int i = 0; k && kl && i < out->n; i++)
			if (out->a[i]->t == JV_STR)
				k[n] = out->a[i]->s, kl[n++] = out->a[i]->len;
		if (p.n == 0 && mn <= 0 && mx < 0) { /* the plain case: a trie */
			int32_t r = k && kl ? sc_seq2(c, sc_lit(c, "\""), other_name(c, k, kl, n)) : 0;
			free(k);
			free(kl);
			return r ? r : (gmb_fail(c->b, "out of memory"), 0);
		}
		const char *re = k && kl ? names_re(c, k, kl, n, &rl) : NULL;
		free(k);
		free(kl);
		if (!re || !pats_add(c, &p, re, rl, true))
			return c->b->failed ? 0 : (gmb_fail(c->b, "out of memory"), 0);
	}
	if (c->b->failed)
		return 0;
	int32_t body;
	/* a lone pattern as its automaton where it is small: the regex's
	 * grammar may be ambiguous (`.+:.+` searched for), its Earley sets
	 * growing with the string */
	if (p.n == 1 && !p.neg && mn <= 0 && mx < 0 && !inner_anchor(p.re[0], p.len[0])) {
		body = pats_string(c, &p, 0, -1, true);
		if (!body && !c->b->failed)
			body = gm_regex(c->b, p.re[0], p.len[0], true);
	} else if (p.n) {
		body = pats_string(c, &p, (long)mn, mx < 0 ? -1 : (long)mx, false);
	} else {
		body = gmb_rep(c->b, jchar(c), (long)mn, mx < 0 ? -1 : (long)mx);
	}
	return sc_seq3(c, sc_lit(c, "\""), body, sc_lit(c, "\""));
}

/* ---- arrays ------------------------------------------------------------- */

static int32_t array(struct sc *c, const struct jv *s)
{
	const struct jv *items = jv_get(s, "items"), *prefix = jv_get(s, "prefixItems"), *v;
	if (items && items->t == JV_ARR) {
		prefix = items;
		items = jv_get(s, "additionalItems");
	}
	long mn = 0, mx = -1;
	if ((v = jv_get(s, "minItems")) && v->t == JV_NUM)
		mn = (long)v->num;
	if ((v = jv_get(s, "maxItems")) && v->t == JV_NUM)
		mx = (long)v->num;
	/* uniqueItems is not enforced (a grammar cannot compare items): every
	 * valid array is accepted, and so are some with repeated items */
	if (mx > 100000) /* not enforced, as maxLength */
		mx = -1;
	if (mn > 100000)
		return sc_err(c, "'%s' above 100000", "minItems"), 0;
	const struct jv *has = jv_get(s, "contains");
	if (has && !(has->t == JV_OBJ && has->n == 0) && !sc_true(has)) {
		/* items* (items and contains) items*: some element is one */
		if ((prefix && prefix->t == JV_ARR && prefix->n) || mn > 1 || mx >= 0)
			return sc_err(c, "unsupported keyword '%s' (with prefixItems, minItems > 1 or maxItems)",
				      "contains"), 0;
		int32_t item = !items || sc_true(items) ? json_any(c) : sym(c, items);
		const struct jv *both = items && items->t != JV_ARR ? sc_pair(c, items, has) : has;
		int32_t one = both ? sym(c, both) : 0, before = gmb_rep(c->b, sc_seq2(c, item, sc_lit(c, ",")), 0, -1);
		int32_t after = gmb_rep(c->b, sc_seq2(c, sc_lit(c, ","), item), 0, -1);
		return c->b->failed ? 0 : sc_seq3(c, sc_lit(c, "["), sc_seq3(c, before, one, after), sc_lit(c, "]"));
	}
	int k = prefix && prefix->t == JV_ARR ? prefix->n : 0;
	if (mx >= 0 && k > mx)
		k = (int)mx;
	bool tail_ok = mx < 0 || mx > k;
	int32_t item = !items || sc_true(items) ? json_any(c) : sym(c, items);
	int32_t comma_item = sc_seq2(c, sc_lit(c, ","), item);
	long lo = mn > k ? mn - k : 0, hi = mx < 0 ? -1 : mx - k;
	int32_t tf, ta; /* the tail, first in the array / after an element */
	if (!tail_ok || (items && items->t == JV_BOOL && !items->b)) {
		tf = ta = lo == 0 ? gmb_eps(c->b) : gmb_none(c->b);
	} else {
		ta = gmb_rep(c->b, comma_item, lo, hi);
		int32_t some = sc_seq2(c, item, gmb_rep(c->b, comma_item, lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1));
		tf = lo == 0 ? sc_alt2(c, gmb_eps(c->b), some) : some;
	}
	for (int i = k - 1; i >= 0 && !c->b->failed; i--) {
		int32_t e = sym(c, prefix->a[i]);
		int32_t nf = sc_seq2(c, e, ta), na = sc_seq3(c, sc_lit(c, ","), e, ta);
		if (i >= mn) {
			nf = sc_alt2(c, gmb_eps(c->b), nf);
			na = sc_alt2(c, gmb_eps(c->b), na);
		}
		tf = nf;
		ta = na;
	}
	return sc_seq3(c, sc_lit(c, "["), tf, sc_lit(c, "]"));
}

/* ---- objects ------------------------------------------------------------ */

static int32_t key_lit(struct sc *c, const char *k, size_t n)
{
	struct gbuf b = { 0 };
	jv_dump_str(&b, k, n);
	gbuf_putc(&b, ':');
	int32_t s = b.oom ? (gmb_fail(c->b, "out of memory"), 0) : gmb_lit(c->b, b.p, b.n);
	free(b.p);
	return s;
}

static uint32_t cp_at(const char *s, size_t n, size_t *len)
{
	const unsigned char *u = (const unsigned char *)s;
	uint32_t c = u[0];
	int l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if ((size_t)l > n)
		l = 1;
	uint32_t v = l == 1 ? c : l == 2 ? c & 0x1F : l == 3 ? c & 0x0F : c & 0x07;
	for (int k = 1; k < l; k++)
		v = v << 6 | (u[k] & 0x3F);
	*len = l;
	return v;
}

/* Keys that are none of the names, as prefix · divergence · rest: the
 * prefixes of the names are left-linear (N_pc -> N_p c), so once a key
 * leaves every name the parser is in one state whichever letter it left
 * at (nothing pending per prefix), and the mask walk checks that state's
 * loop once. */
struct other {
	int32_t *div, *end; /* N_p then a character no name goes on with; N_p that is no name */
	int n_div, n_end, cap;
};

static void other_add(struct sc *c, struct other *o, int32_t **v, int *n, int32_t sym)
{
	if (*n == o->cap) {
		int cap = o->cap ? o->cap * 2 : 16;
		int32_t *d = realloc(o->div, cap * sizeof *d), *e = d ? realloc(o->end, cap * sizeof *e) : NULL;
		if (d)
			o->div = d;
		if (e)
			o->end = e;
		if (!d || !e) {
			gmb_fail(c->b, "out of memory");
			return;
		}
		o->cap = cap;
	}
	(*v)[(*n)++] = sym;
}

/* The names k (all sharing their first off bytes, which prefix parses). */
static void other_prefix(struct sc *c, struct other *o, const char *const *k, const size_t *kl, int n, size_t off,
			 int32_t prefix, int depth)
{
	if (depth > 256) {
		sc_err(c, "property name too long%s", "");
		return;
	}
	uint32_t *cps = malloc((n + 1) * sizeof *cps);
	const char **sk = malloc((n + 1) * sizeof *sk);
	size_t *sl = malloc((n + 1) * sizeof *sl);
	if (!cps || !sk || !sl) {
		free(cps);
		free(sk);
		free(sl);
		gmb_fail(c->b, "out of memory");
		return;
	}
	int nc = 0;
	bool ends = false;
	struct gm_cps next = { 0 };
	for (int i = 0; i < n; i++) {
		if (kl[i] == off) {
			ends = true;
			continue;
		}
		size_t l;
		uint32_t cp = cp_at(k[i] + off, kl[i] - off, &l);
		cps_add(&next, cp, cp);
	}
	if (!ends)
		other_add(c, o, &o->end, &o->n_end, prefix);
	cps_negate(&next);
	other_add(c, o, &o->div, &o->n_div, sc_seq2(c, prefix, gm_json_chars(c->b, &next)));
	cps_free(&next);
	for (int i = 0; i < n && !c->b->failed; i++) {
		if (kl[i] == off)
			continue;
		size_t l;
		uint32_t cp = cp_at(k[i] + off, kl[i] - off, &l);
		bool seen = false;
		for (int j = 0; j < nc && !seen; j++)
			seen = cps[j] == cp;
		if (seen)
			continue;
		cps[nc++] = cp;
		/* the names that go on with this character */
		int m = 0;
		for (int j = i; j < n; j++) {
			size_t l2;
			if (kl[j] > off && cp_at(k[j] + off, kl[j] - off, &l2) == cp) {
				sk[m] = k[j];
				sl[m++] = kl[j];
			}
		}
		struct gm_cps one = { 0 };
		cps_add(&one, cp, cp);
		int32_t ch = gm_json_chars(c->b, &one);
		cps_free(&one);
		other_prefix(c, o, sk, sl, m, off + l, sc_seq2(c, prefix, ch), depth + 1);
	}
	free(cps);
	free(sk);
	free(sl);
}

/* The rest of a key (closing quote included) that makes it none of the n
 * names: an undeclared member must not reuse a declared name with
 * another schema. */
static int32_t other_name(struct sc *c, const char *const *k, const size_t *kl, int n)
{
	struct other o = { 0 };
	other_prefix(c, &o, k, kl, n, 0, gmb_eps(c->b), 0);
	int32_t r = 0;
	if (!c->b->failed) {
		int32_t rest = sc_seq2(c, gmb_rep(c->b, jchar(c), 0, -1), sc_lit(c, "\""));
		int32_t alts[2];
		int na = 0;
		alts[na++] = sc_seq2(c, gmb_alt(c->b, o.div, o.n_div), rest);
		if (o.n_end)
			alts[na++] = sc_seq2(c, gmb_alt(c->b, o.end, o.n_end), sc_lit(c, "\""));
		r = c->b->failed ? 0 : gmb_alt(c->b, alts, na);
	}
	free(o.div);
	free(o.end);
	return r;
}

/* Does name match the pattern (searching)? 1, 0, or -1 when the
 * pattern cannot be read. */
static int pattern_matches(const char *re, size_t rl, const char *name, size_t nl)
{
	char err[160];
	struct gm_dfa *d = gm_dfa_new(&re, &rl, 1, err, sizeof err);
	if (!d)
		return -1;
	int r = gm_dfa_match(d, name, nl) & 1;
	gm_dfa_free(d);
	return r;
}

/* The schema of an undeclared member: the first pattern it matches, else
 * additionalProperties. */
static const struct jv *pattern_schema(const struct jv *pp, const char *name, size_t nl, const struct jv *ap)
{
	for (int i = 0; pp && pp->t == JV_OBJ && i < pp->n; i++)
		if (pattern_matches(pp->keys[i], pp->klen[i], name, nl) == 1)
			return pp->a[i];
	return ap;
}

/* propertyNames as patterns and a length; false when it says more. */
static bool names_rule(struct sc *c, const struct jv *pn, struct pats *p, long *mn, long *mx)
{
	pn = deref(c, pn);
	if (!pn || pn->t != JV_OBJ)
		return false;
	for (int i = 0; i < pn->n; i++) {
		const char *k = pn->keys[i];
		const struct jv *v = pn->a[i];
		if (!strcmp(k, "pattern") && v->t == JV_STR) {
			pats_add(c, p, v->s, v->len, false);
		} else if (!strcmp(k, "format")) {
			const char *re = format_re(v);
			if (re)
				pats_add(c, p, re, strlen(re), false);
		} else if ((!strcmp(k, "minLength") || !strcmp(k, "maxLength")) && v->t == JV_NUM) {
			*(k[1] == 'i' ? mn : mx) = (long)v->num;
		} else if ((!strcmp(k, "enum") && v->t == JV_ARR) || !strcmp(k, "const")) {
			int m = k[0] == 'e' ? v->n : 1;
			const char **nk = malloc((m + 1) * sizeof *nk);
			size_t *nl = malloc((m + 1) * sizeof *nl), rl = 0;
			int q = 0;
			for (int j = 0; nk && nl && j < m; j++) {
				const struct jv *x = k[0] == 'e' ? v->a[j] : v;
				if (x->t == JV_STR)
					nk[q] = x->s, nl[q++] = x->len;
			}
			const char *re = nk && nl ? names_re(c, nk, nl, q, &rl) : NULL;
			free(nk);
			free(nl);
			if (!re)
				return false;
			pats_add(c, p, re, rl, false);
		} else if (!(!strcmp(k, "type") && v->t == JV_STR && !strcmp(v->s, "string")) &&
			   sc_in(k, sc_validation)) {
			return false;
		}
	}
	return true;
}

/* One undeclared member when patternProperties or propertyNames rule the
 * keys: for each set of patterns a key can match (and no declared name),
 * the key's strings and the value all those patterns' schemas want, or
 * additionalProperties' where it matches none. Exact for up to 4 patterns;
 * past that a key matching several is checked against one of them. */
static int32_t keyed(struct sc *c, const struct jv *pp, const struct jv *ap, const struct jv *pn, const char *const *nk,
		     const size_t *nl, int n)
{
	struct pats p = { .n = 0 };
	int m = pp ? pp->n : 0;
	long mn = 0, mx = -1;
	if (m > 30)
		return sc_err(c, "more than 30 %s", "patternProperties"), 0;
	for (int i = 0; i < m; i++)
		pats_add(c, &p, pp->keys[i], pp->klen[i], false);
	uint32_t ppbits = m == 32 ? ~0u : (1u << m) - 1, decl = 0, names = 0;
	if (n) {
		size_t rl = 0;
		const char *re = names_re(c, nk, nl, n, &rl);
		if (!re)
			return 0;
		decl = 1u << p.n;
		pats_add(c, &p, re, rl, true);
	}
	if (pn && pn->t == JV_BOOL && !pn->b)
		return 0;
	int before = p.n;
	if (pn && !names_rule(c, pn, &p, &mn, &mx))
		return c->b->failed ? 0 : sc_err(c, "unsupported keyword '%s' (only pattern, length, enum)", "propertyNames"), 0;
	if (p.n == 0) /* the empty pattern: every key */
		pats_add(c, &p, "", 0, false);
	for (int i = before; i < p.n; i++)
		names |= 1u << i;
	char err[160];
	struct gm_dfa *d = gm_dfa_new(p.re, p.len, p.n, err, sizeof err);
	if (!d)
		return gmb_fail(c->b, "%s", err), 0;
	bool exact = m <= 4;
	int nsets = exact ? 1 << m : m + 1;
	int32_t *alts = malloc(nsets * sizeof *alts);
	int na = 0;
	for (int k = 0; alts && k < nsets && !c->b->failed; k++) {
		uint32_t set = exact ? (uint32_t)k : k < m ? 1u << k : 0;
		uint32_t must = set | names, must_not = decl | (exact || !set ? ppbits & ~set : 0);
		const struct jv *val = ap;
		if (set) {
			struct jv *l = sc_new(c, JV_ARR), *o = sc_new(c, JV_OBJ);
			for (int i = 0; l && o && i < m; i++)
				if (set >> i & 1)
					sc_put(c, l, NULL, 0, pp->a[i]);
			if (o && l)
				sc_put(c, o, "allOf", 5, l);
			val = l && l->n == 1 ? l->a[0] : o;
		}
		if ((val && val->t == JV_BOOL && !val->b) || !gm_dfa_some(d, must, must_not))
			continue;
		int32_t key = sc_seq3(c, sc_lit(c, "\""), gm_dfa_string(c->b, d, must, must_not, mn, mx), sc_lit(c, "\":"));
		alts[na++] = sc_seq2(c, key, !val || sc_true(val) ? json_any(c) : sym(c, val));
	}
	gm_dfa_free(d);
	int32_t r = !alts ? (gmb_fail(c->b, "out of memory"), 0) : na ? gmb_alt(c->b, alts, na) : 0;
	free(alts);
	return r;
}

static int32_t object(struct sc *c, const struct jv *s)
{
	const struct jv *props = jv_get(s, "properties"), *req = jv_get(s, "required");
	const struct jv *ap = jv_get(s, "additionalProperties"), *pp = jv_get(s, "patternProperties");
	if (props && props->t != JV_OBJ)
		props = NULL;
	int np = props ? props->n : 0, nr = req && req->t == JV_ARR ? req->n : 0;
	struct ent { const char *k; size_t kl; const struct jv *s; bool req; } *e = calloc(np + nr + 1, sizeof *e);
	if (!e)
		return gmb_fail(c->b, "out of memory"), 0;
	int n = 0;
	for (int i = 0; i < np; i++)
		e[n++] = (struct ent){ props->keys[i], props->klen[i], props->a[i], false };
	for (int i = 0; i < nr; i++) {
		const struct jv *r = req->a[i];
		if (r->t != JV_STR)
			continue;
		int j = 0;
		while (j < n && !(e[j].kl == r->len && !memcmp(e[j].k, r->s, r->len)))
			j++;
		if (j == n)
			e[n++] = (struct ent){ r->s, r->len, pattern_schema(pp, r->s, r->len, ap), false };
		e[j].req = true;
	}
	/* a declared member whose name a pattern matches answers to both */
	for (int i = 0; i < np && pp && pp->t == JV_OBJ; i++)
		for (int j = 0; j < pp->n; j++)
			if (pattern_matches(pp->keys[j], pp->klen[j], e[i].k, e[i].kl) == 1)
				e[i].s = e[i].s ? sc_pair(c, e[i].s, pp->a[j]) : pp->a[j];
	bool ap_false = ap && ap->t == JV_BOOL && !ap->b;
	int32_t extra = 0; /* one undeclared member, 0 if none is allowed */
	const struct jv *pn = jv_get(s, "propertyNames");
	if ((pp && pp->t == JV_OBJ && pp->n > 0) || (pn && !sc_true(pn) && !(pn->t == JV_OBJ && pn->n == 0))) {
		const char **nk = malloc((n + 1) * sizeof *nk);
		size_t *nl = malloc((n + 1) * sizeof *nl);
		for (int i = 0; nk && nl && i < n; i++)
			nk[i] = e[i].k, nl[i] = e[i].kl;
		extra = nk && nl ? keyed(c, pp && pp->t == JV_OBJ ? pp : NULL, ap, pn, nk, nl, n) : 0;
		free(nk);
		free(nl);
		if (c->b->failed) {
			free(e);
			return 0;
		}
	} else if (!ap_false) {
		const char **nk = malloc((n + 1) * sizeof *nk);
		size_t *nl = malloc((n + 1) * sizeof *nl);
		if (!nk || !nl) {
			free(nk);
			free(nl);
			free(e);
			return gmb_fail(c->b, "out of memory"), 0;
		}
		for (int i = 0; i < n; i++)
			nk[i] = e[i].k, nl[i] = e[i].kl;
		int32_t key = n ? sc_seq2(c, sc_lit(c, "\""), other_name(c, nk, nl, n)) : json_string(c);
		free(nk);
		free(nl);
		extra = sc_seq3(c, key, sc_lit(c, ":"), !ap || sc_true(ap) ? json_any(c) : sym(c, ap));
	}
	const struct jv *v;
	long mnp = 0, mxp = -1;
	if ((v = jv_get(s, "minProperties")) && v->t == JV_NUM && v->num > 0)
		mnp = (long)ceil(v->num);
	if ((v = jv_get(s, "maxProperties")) && v->t == JV_NUM && v->num >= 0)
		mxp = (long)v->num;
	if (mxp >= 0 && !extra && mxp >= n)
		mxp = -1; /* says nothing more than the declared names do */
	/* counts 0..cap of members written so far, the last standing for "cap
	 * or more" when there is no maximum */
	long cap = mxp >= 0 ? mxp : mnp > 1 ? mnp : 1;
	if (cap > 64) {
		free(e);
		return sc_err(c, "'%s' above 64", mxp >= 0 ? "maxProperties" : "minProperties"), 0;
	}
	int32_t *T = malloc((cap + 1) * sizeof *T), *U = malloc((cap + 1) * sizeof *U);
	if (!T || !U) {
		free(e), free(T), free(U);
		return gmb_fail(c->b, "out of memory"), 0;
	}
	/* T[k]: the rest of the object after k members (no comma first at 0) */
	for (long k = 0; k <= cap; k++) {
		long lo = mnp > k ? mnp - k : 0, hi = mxp < 0 ? -1 : mxp - k;
		if (!extra) {
			T[k] = lo == 0 ? gmb_eps(c->b) : gmb_none(c->b);
		} else if (k > 0) {
			T[k] = gmb_rep(c->b, sc_seq2(c, sc_lit(c, ","), extra), lo, hi);
		} else {
			int32_t more = gmb_rep(c->b, sc_seq2(c, sc_lit(c, ","), extra), lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
			int32_t some = hi == 0 ? gmb_none(c->b) : sc_seq2(c, extra, more);
			T[k] = lo == 0 ? sc_alt2(c, gmb_eps(c->b), some) : some;
		}
	}
	for (int i = n - 1; i >= 0 && !c->b->failed; i--) {
		const struct jv *ps = e[i].s;
		if (ps && ps->t == JV_BOOL && !ps->b) { /* never there */
			if (e[i].req)
				for (long k = 0; k <= cap; k++)
					T[k] = gmb_none(c->b);
			continue;
		}
		int32_t kv = sc_seq2(c, key_lit(c, e[i].k, e[i].kl), !ps || sc_true(ps) ? json_any(c) : sym(c, ps));
		for (long k = 0; k <= cap; k++) {
			long next = k < cap ? k + 1 : mxp >= 0 ? -1 : cap;
			int32_t with = next < 0 ? gmb_none(c->b) : k ? sc_seq3(c, sc_lit(c, ","), kv, T[next]) : sc_seq2(c, kv, T[next]);
			U[k] = e[i].req ? with : sc_alt2(c, with, T[k]);
		}
		memcpy(T, U, (cap + 1) * sizeof *T);
	}
	int32_t B = T[0];
	free(T);
	free(U);
	free(e);
	return sc_seq3(c, sc_lit(c, "{"), B, sc_lit(c, "}"));
}

/* ---- allOf: one schema from several ----------------------------------- */

struct jv *sc_types(struct sc *c, const struct jv *t)
{
	struct jv *l = sc_new(c, JV_ARR);
	if (!l)
		return NULL;
	if (t->t == JV_STR)
		sc_put(c, l, NULL, 0, (struct jv *)t);
	else if (t->t == JV_ARR)
		for (int i = 0; i < t->n; i++)
			sc_put(c, l, NULL, 0, t->a[i]);
	return l;
}

bool sc_has_type(const struct jv *l, const char *t)
{
	for (int i = 0; i < l->n; i++)
		if (l->a[i]->t == JV_STR && (!strcmp(l->a[i]->s, t) ||
					      (!strcmp(t, "integer") && !strcmp(l->a[i]->s, "number"))))
			return true;
	return false;
}

static void merge_into(struct sc *c, struct jv *res, const struct jv *s, int depth)
{
	if (depth > 32) {
		sc_err(c, "%s nested too deep", "allOf");
		return;
	}
	if (s && s->t == JV_BOOL) {
		struct jv *t = s->b ? NULL : sc_new(c, JV_BOOL);
		if (t) {
			t->b = true;
			sc_put(c, res, "not", 3, t); /* not: true, nothing matches */
		}
		return;
	}
	if (!s || s->t != JV_OBJ) {
		sc_err(c, "%s: a schema is not an object", "allOf");
		return;
	}
	if (!(s = sc_rewrite(c, s)))
		return;
	const struct jv *r = jv_get(s, "$ref");
	if (r && r->t == JV_STR) {
		const struct jv *t = sc_pointer(c, r->s);
		if (!t)
			return;
		merge_into(c, res, t, depth + 1);
	}
	const struct jv *all = jv_get(s, "allOf");
	if (all && all->t == JV_ARR)
		for (int i = 0; i < all->n && !c->b->failed; i++)
			merge_into(c, res, all->a[i], depth + 1);
	for (int i = 0; i < s->n && !c->b->failed; i++) {
		const char *k = s->keys[i];
		const struct jv *v = s->a[i], *old = jv_get(res, k);
		if (!strcmp(k, "allOf") || !strcmp(k, "$ref"))
			continue;
		if (!old || sc_in(k, sc_annotations) || (!sc_in(k, sc_validation) && k[0] != '\x01')) {
			if (!old)
				sc_put(c, res, k, s->klen[i], (struct jv *)v);
			continue;
		}
		if (jv_equal(old, v))
			continue;
		if (k[0] == '\x01' && old->t == JV_ARR && v->t == JV_ARR) { /* internal lists: both */
			struct jv *l = sc_new(c, JV_ARR);
			for (int j = 0; l && j < old->n; j++)
				sc_put(c, l, NULL, 0, old->a[j]);
			for (int j = 0; l && j < v->n; j++)
				sc_put(c, l, NULL, 0, v->a[j]);
			sc_put(c, res, k, s->klen[i], l);
			continue;
		}
		if (!strcmp(k, "pattern")) { /* both must match */
			struct jv *l = sc_new(c, JV_ARR);
			const struct jv *was = jv_get(res, "\x01patterns");
			for (int j = 0; l && was && j < was->n; j++)
				sc_put(c, l, NULL, 0, was->a[j]);
			sc_put(c, l, NULL, 0, (struct jv *)v);
			sc_put(c, res, "\x01patterns", 9, l);
			continue;
		}
		if (!strcmp(k, "const")) { /* two different values: nothing */
			sc_put(c, res, "not", 3, sc_new(c, JV_OBJ));
			continue;
		}
		if (!strcmp(k, "not")) { /* not a and not b: not (a or b) */
			struct jv *l = sc_new(c, JV_ARR), *o = sc_new(c, JV_OBJ);
			if (!l || !o)
				return;
			sc_put(c, l, NULL, 0, (struct jv *)old);
			sc_put(c, l, NULL, 0, (struct jv *)v);
			sc_put(c, o, "anyOf", 5, l);
			sc_put(c, res, k, s->klen[i], o);
			continue;
		}
		if (!strcmp(k, "properties") && old->t == JV_OBJ && v->t == JV_OBJ) {
			struct jv *o = sc_new(c, JV_OBJ);
			if (!o)
				return;
			for (int j = 0; j < old->n; j++)
				sc_put(c, o, old->keys[j], old->klen[j], old->a[j]);
			for (int j = 0; j < v->n; j++) {
				const struct jv *was = jv_get(o, v->keys[j]);
				sc_put(c, o, v->keys[j], v->klen[j], was ? sc_pair(c, was, v->a[j]) : v->a[j]);
			}
			sc_put(c, res, k, s->klen[i], o);
		} else if (!strcmp(k, "required") && old->t == JV_ARR && v->t == JV_ARR) {
			struct jv *l = sc_new(c, JV_ARR);
			if (!l)
				return;
			for (int j = 0; j < old->n; j++)
				sc_put(c, l, NULL, 0, old->a[j]);
			for (int j = 0; j < v->n; j++) {
				bool dup = false;
				for (int q = 0; q < l->n && !dup; q++)
					dup = jv_equal(l->a[q], v->a[j]);
				if (!dup)
					sc_put(c, l, NULL, 0, v->a[j]);
			}
			sc_put(c, res, k, s->klen[i], l);
		} else if (!strcmp(k, "type")) {
			struct jv *a = sc_types(c, old), *b = sc_types(c, v), *l = sc_new(c, JV_ARR);
			if (!a || !b || !l)
				return;
			for (int j = 0; j < a->n; j++)
				if (a->a[j]->t == JV_STR && sc_has_type(b, a->a[j]->s))
					sc_put(c, l, NULL, 0, a->a[j]);
				else if (a->a[j]->t == JV_STR && !strcmp(a->a[j]->s, "number") && sc_has_type(b, "integer")) {
					struct jv *t = sc_new(c, JV_STR);
					if (!t)
						return;
					t->s = "integer";
					t->len = 7;
					sc_put(c, l, NULL, 0, t);
				}
			sc_put(c, res, k, s->klen[i], l);
		} else if (!strcmp(k, "enum") && old->t == JV_ARR && v->t == JV_ARR) {
			struct jv *l = sc_new(c, JV_ARR);
			if (!l)
				return;
			for (int j = 0; j < old->n; j++)
				for (int q = 0; q < v->n; q++)
					if (jv_equal(old->a[j], v->a[q])) {
						sc_put(c, l, NULL, 0, old->a[j]);
						break;
					}
			sc_put(c, res, k, s->klen[i], l);
		} else if ((!strcmp(k, "additionalProperties") || !strcmp(k, "items")) && old->t != JV_ARR &&
			   v->t != JV_ARR) {
			sc_put(c, res, k, s->klen[i], sc_pair(c, old, v));
		} else if (old->t == JV_NUM && v->t == JV_NUM &&
			   (!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
			    !strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems"))) {
			bool take_max = !strncmp(k, "min", 3);
			if (take_max ? v->num > old->num : v->num < old->num)
				sc_put(c, res, k, s->klen[i], (struct jv *)v);
		} else if ((!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) && v->t == JV_ARR && old->t == JV_ARR) {
			/* (a|b) & (c|d): nest the second inside each branch of the first */
			struct jv *l = sc_new(c, JV_ARR);
			if (!l)
				return;
			for (int j = 0; j < old->n; j++) {
				struct jv *o = sc_new(c, JV_OBJ);
				if (!o)
					return;
				sc_put(c, o, k, s->klen[i], (struct jv *)v);
				sc_put(c, l, NULL, 0, sc_pair(c, old->a[j], o));
			}
			sc_put(c, res, k, s->klen[i], l);
		} else {
			sc_err(c, "allOf: conflicting values for '%s'", k);
		}
	}
}

const struct jv *sc_merge(struct sc *c, const struct jv *const *parts, int n)
{
	struct jv *res = sc_new(c, JV_OBJ);
	if (!res)
		return NULL;
	for (int i = 0; i < n && !c->b->failed; i++)
		merge_into(c, res, parts[i], 0);
	return c->b->failed ? NULL : res;
}

/* ---- a schema ----------------------------------------------------------- */

static int32_t by_type(struct sc *c, const struct jv *s)
{
	const struct jv *t = jv_get(s, "type");
	static const char *const all[] = { "object", "array", "string", "number", "integer", "boolean", "null" };
	bool want[7] = { 0 };
	if (!t) {
		for (int i = 0; i < 7; i++)
			want[i] = i != 4; /* number covers integer */
	} else {
		const struct jv *one[1] = { t };
		const struct jv *const *l = t->t == JV_ARR ? (const struct jv *const *)t->a : one;
		int n = t->t == JV_ARR ? t->n : 1;
		for (int i = 0; i < n; i++) {
			int k = 0;
			while (k < 7 && !(l[i]->t == JV_STR && !strcmp(l[i]->s, all[k])))
				k++;
			if (k == 7)
				return sc_err(c, "unknown type in '%s'", "type"), 0;
			want[k] = true;
		}
		if (want[3])
			want[4] = false;
	}
	int32_t alts[7];
	int n = 0;
	if (want[0]) alts[n++] = object(c, s);
	if (want[1]) alts[n++] = array(c, s);
	if (want[2]) alts[n++] = string(c, s);
	if (want[3]) alts[n++] = sc_number(c, s);
	if (want[4]) alts[n++] = sc_integer(c, s);
	if (want[5]) alts[n++] = sc_alt2(c, sc_lit(c, "true"), sc_lit(c, "false"));
	if (want[6]) alts[n++] = sc_lit(c, "null");
	return n ? gmb_alt(c->b, alts, n) : gmb_none(c->b);
}

static int32_t body(struct sc *c, const struct jv *s);

static size_t n_chars(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

/* An enum/const value against the sibling keywords it can be checked
 * against here: type, the other list, lengths, pattern, bounds, counts,
 * required. The rest of the siblings are not checked (docs/grammar.md). */
static bool value_fits(const struct jv *s, const struct jv *v, const struct jv *other)
{
	static const char *const tn[] = { [JV_NULL] = "null", [JV_BOOL] = "boolean", [JV_NUM] = "number",
					  [JV_STR] = "string", [JV_ARR] = "array", [JV_OBJ] = "object" };
	const struct jv *t = jv_get(s, "type"), *x;
	if (t) {
		const struct jv *one[1] = { t };
		const struct jv *const *l = t->t == JV_ARR ? (const struct jv *const *)t->a : one;
		bool ok = false;
		for (int i = 0; i < (t->t == JV_ARR ? t->n : 1) && !ok; i++)
			ok = l[i]->t == JV_STR && (!strcmp(l[i]->s, tn[v->t]) ||
						   (v->t == JV_NUM && !strcmp(l[i]->s, "integer") && v->num == floor(v->num)));
		if (!ok)
			return false;
	}
	if (other) {
		bool in_other = false;
		for (int i = 0; i < other->n && !in_other; i++)
			in_other = jv_equal(other->a[i], v);
		if (!in_other)
			return false;
	}
	double d;
	if (v->t == JV_STR) {
		size_t n = n_chars(v->s, v->len);
		if (((x = jv_get(s, "minLength")) && x->t == JV_NUM && n < x->num) ||
		    ((x = jv_get(s, "maxLength")) && x->t == JV_NUM && n > x->num))
			return false;
		if ((x = jv_get(s, "pattern")) && x->t == JV_STR && pattern_matches(x->s, x->len, v->s, v->len) == 0)
			return false;
	}
	if (v->t == JV_NUM) {
		d = v->num;
		if (((x = jv_get(s, "minimum")) && x->t == JV_NUM && d < x->num) ||
		    ((x = jv_get(s, "maximum")) && x->t == JV_NUM && d > x->num) ||
		    ((x = jv_get(s, "exclusiveMinimum")) && x->t == JV_NUM && d <= x->num) ||
		    ((x = jv_get(s, "exclusiveMaximum")) && x->t == JV_NUM && d >= x->num))
			return false;
	}
	if (v->t == JV_ARR && (((x = jv_get(s, "minItems")) && x->t == JV_NUM && v->n < x->num) ||
			       ((x = jv_get(s, "maxItems")) && x->t == JV_NUM && v->n > x->num)))
		return false;
	if (v->t == JV_OBJ) {
		if (((x = jv_get(s, "minProperties")) && x->t == JV_NUM && v->n < x->num) ||
		    ((x = jv_get(s, "maxProperties")) && x->t == JV_NUM && v->n > x->num))
			return false;
		x = jv_get(s, "required");
		for (int i = 0; x && x->t == JV_ARR && i < x->n; i++)
			if (x->a[i]->t == JV_STR && !jv_get(v, x->a[i]->s))
				return false;
	}
	return true;
}

#define ONEOF_MAX_ALTS 16

/* oneOf exactly: branch i and not any other. The negations of the
 * branches, or NULL (then oneOf is read as anyOf) when one cannot be said
 * or the branches would multiply past ONEOF_MAX_ALTS. */
static const struct jv **one_of_negs(struct sc *c, const struct jv *l)
{
	const struct jv **negs = calloc(l->n, sizeof *negs);
	int *alts = calloc(l->n, sizeof *alts);
	bool ok = negs && alts && l->n <= 8;
	for (int j = 0; ok && j < l->n; j++) {
		const char *why;
		negs[j] = sc_negate(c, l->a[j], &why, 0);
		if (c->b->failed) /* a merge it needed failed: not an error here */
			c->b->failed = false, negs[j] = NULL;
		const struct jv *any = negs[j] ? jv_get(negs[j], "anyOf") : NULL;
		alts[j] = any && any->t == JV_ARR ? any->n : 1;
		ok = negs[j] != NULL;
	}
	long total = 0;
	for (int i = 0; ok && i < l->n; i++) {
		long p = 1;
		for (int j = 0; j < l->n && p <= ONEOF_MAX_ALTS; j++)
			if (j != i)
				p *= alts[j];
		total += p;
	}
	free(alts);
	if (!ok || total > ONEOF_MAX_ALTS) {
		free(negs);
		return NULL;
	}
	return negs;
}

static int32_t body(struct sc *c, const struct jv *s)
{
	if (s->t == JV_BOOL)
		return s->b ? json_any(c) : gmb_none(c->b);
	if (s->t != JV_OBJ)
		return sc_err(c, "a schema must be an object or a boolean%s", ""), 0;
	const struct jv *rw = sc_rewrite(c, s), *n = jv_get(s, "not");
	if (rw != s)
		return rw ? sym(c, rw) : 0;
	if (n) {
		if (sc_true(n) || (n->t == JV_OBJ && n->n == 0))
			return gmb_none(c->b);
		const char *why = NULL;
		const struct jv *neg = sc_negate(c, n, &why, 0);
		if (!neg)
			return c->b->failed ? 0 : (sc_err(c, "unsupported keyword 'not' (%s)", why), 0);
		struct jv *rest = sc_new(c, JV_OBJ);
		for (int i = 0; rest && i < s->n; i++)
			if (strcmp(s->keys[i], "not"))
				sc_put(c, rest, s->keys[i], s->klen[i], s->a[i]);
		const struct jv *parts[2] = { rest, neg };
		const struct jv *m = rest ? sc_merge(c, parts, 2) : NULL;
		return m ? sym(c, m) : 0;
	}
	for (int i = 0; i < s->n; i++)
		if (sc_in(s->keys[i], refused))
			return sc_err(c, "unsupported keyword '%s'", s->keys[i]), 0;
	const struct jv *all = jv_get(s, "allOf"), *r = jv_get(s, "$ref");
	bool ref_alone = r && r->t == JV_STR;
	for (int i = 0; i < s->n && ref_alone; i++)
		if (strcmp(s->keys[i], "$ref") && !sc_in(s->keys[i], sc_annotations))
			ref_alone = false;
	if (ref_alone) {
		const struct jv *t = sc_pointer(c, r->s);
		return t ? sym(c, t) : 0;
	}
	if ((all && all->t == JV_ARR) || (r && r->t == JV_STR)) {
		const struct jv *m = sc_merge(c, &s, 1);
		return m ? sym(c, m) : 0;
	}
	const char *which = jv_get(s, "anyOf") ? "anyOf" : jv_get(s, "oneOf") ? "oneOf" : NULL;
	if (which) {
		const struct jv *l = jv_get(s, which);
		if (l->t != JV_ARR || l->n == 0)
			return sc_err(c, "'%s' must be a non-empty array", which), 0;
		/* the siblings, without this keyword, merged into every branch */
		struct jv *rest = sc_new(c, JV_OBJ);
		if (!rest)
			return 0;
		bool siblings = false;
		for (int i = 0; i < s->n; i++)
			if (strcmp(s->keys[i], which)) {
				sc_put(c, rest, s->keys[i], s->klen[i], s->a[i]);
				siblings |= !sc_in(s->keys[i], sc_annotations);
			}
		const struct jv **negs = !strcmp(which, "oneOf") ? one_of_negs(c, l) : NULL;
		int32_t *alts = malloc(l->n * sizeof *alts);
		const struct jv **br = malloc((l->n + 2) * sizeof *br);
		if (!alts || !br) {
			free(alts), free(br), free(negs);
			return gmb_fail(c->b, "out of memory"), 0;
		}
		for (int i = 0; i < l->n && !c->b->failed; i++) {
			if (negs) { /* this branch and none of the others */
				int np = 0;
				br[np++] = rest;
				br[np++] = l->a[i];
				for (int j = 0; j < l->n; j++)
					if (j != i)
						br[np++] = negs[j];
				const struct jv *m = sc_merge(c, br, np);
				alts[i] = m ? sym(c, m) : 0;
			} else if (!siblings) {
				alts[i] = sym(c, l->a[i]);
			} else {
				const struct jv *parts[2] = { rest, l->a[i] };
				const struct jv *m = sc_merge(c, parts, 2);
				alts[i] = m ? sym(c, m) : 0;
			}
		}
		int32_t a = c->b->failed ? 0 : gmb_alt(c->b, alts, l->n);
		free(alts), free(br), free(negs);
		return a;
	}
	const struct jv *k = jv_get(s, "const"), *en = jv_get(s, "enum");
	if (en && en->t != JV_ARR)
		return sc_err(c, "'%s' must be an array", "enum"), 0;
	if (k || en) {
		const struct jv *const *vals = k ? &k : (const struct jv *const *)en->a;
		int nv = k ? 1 : en->n, m = 0;
		int32_t *alts = malloc((nv + 1) * sizeof *alts);
		if (!alts)
			return gmb_fail(c->b, "out of memory"), 0;
		for (int i = 0; i < nv && !c->b->failed; i++)
			if (value_fits(s, vals[i], k && en ? en : NULL))
				alts[m++] = lit_value(c, vals[i]);
		int32_t a = c->b->failed ? 0 : m ? gmb_alt(c->b, alts, m) : gmb_none(c->b);
		free(alts);
		return a;
	}
	return by_type(c, s);
}

/* Every schema node gets its own nonterminal, made before its body: a $ref
 * back to a node being compiled finds it. */
static int32_t sym(struct sc *c, const struct jv *s)
{
	if (c->b->failed)
		return 0;
	for (int i = 0; i < c->n_memo; i++)
		if (c->memo[i].node == s)
			return c->memo[i].nt;
	if (++c->depth > SC_MAX_DEPTH) {
		c->depth--;
		return sc_err(c, "schema nested too deep%s", ""), 0;
	}
	if (c->n_memo == c->cap_memo) {
		int cap = c->cap_memo ? c->cap_memo * 2 : 64;
		void *m = realloc(c->memo, cap * sizeof *c->memo);
		if (!m)
			return gmb_fail(c->b, "out of memory"), 0;
		c->memo = m;
		c->cap_memo = cap;
	}
	int32_t nt = gmb_nt(c->b);
	c->memo[c->n_memo].node = s;
	c->memo[c->n_memo].nt = nt;
	c->n_memo++;
	int32_t x = body(c, s);
	gmb_prod(c->b, nt, &x, 1);
	c->depth--;
	return nt;
}

int32_t gm_schema(struct gm_b *b, const char *src, size_t len)
{
	struct sc c = { .b = b };
	if (!(c.a = jv_arena_new()))
		return gmb_fail(b, "out of memory"), 0;
	int32_t s = 0;
	char err[160];
	if (jv_parse(c.a, src, len, &c.root, err, sizeof err))
		gmb_fail(b, "JSON Schema: %s", err);
	else
		s = sym(&c, c.root);
	for (int i = 0; i < c.n_autom; i++)
		free(c.autom[i].key);
	free(c.autom);
	free(c.memo);
	jv_arena_free(c.a);
	return s;
}

/* ---- instances in the grammar's key order ----------------------------- */

struct names {
	const char **k;
	size_t *l;
	int n, cap;
};

static void add_name(struct names *o, const char *k, size_t l)
{
	for (int j = 0; j < o->n; j++)
		if (o->l[j] == l && !memcmp(o->k[j], k, l))
			return;
	if (o->n == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 16;
		const char **nk = realloc(o->k, o->cap * sizeof *nk);
		if (nk)
			o->k = nk;
		size_t *nl = realloc(o->l, o->cap * sizeof *nl);
		if (nl)
			o->l = nl;
		if (!nk || !nl) {
			o->n = -1;
			return;
		}
	}
	o->k[o->n] = k;
	o->l[o->n++] = l;
}

/* Property names in the order the compiler writes them: a $ref's and the
 * allOf parts' first (merge_into takes them first), then the schema's own,
 * then the anyOf/oneOf branches' (each merged after its siblings). */
static void props_of(struct sc *c, const struct jv *s, struct names *o, int depth);

static bool has_key(const struct jv *v, const char *k, size_t l)
{
	for (int i = 0; i < v->n; i++)
		if (v->klen[i] == l && !memcmp(v->keys[i], k, l))
			return true;
	return false;
}

/* Does branch b (with the names o already taken) fit the object v: it
 * names all v's keys and v has all it requires? */
static bool fits(struct sc *c, const struct jv *b, const struct jv *v, const struct names *o)
{
	struct names t = { 0 };
	for (int j = 0; j < o->n; j++)
		add_name(&t, o->k[j], o->l[j]);
	props_of(c, b, &t, 1);
	bool ok = t.n >= 0;
	for (int i = 0; ok && i < v->n; i++) {
		bool named = false;
		for (int j = 0; j < t.n && !named; j++)
			named = t.l[j] == v->klen[i] && !memcmp(t.k[j], v->keys[i], t.l[j]);
		ok = named;
	}
	const struct jv *d = deref(c, b);
	c->b->failed = false;
	const struct jv *req = d ? jv_get(d, "required") : NULL;
	for (int i = 0; ok && req && req->t == JV_ARR && i < req->n; i++)
		ok = req->a[i]->t != JV_STR || has_key(v, req->a[i]->s, req->a[i]->len);
	/* a member the branch fixes (const, enum) must have that value */
	const struct jv *props = d ? jv_get(d, "properties") : NULL;
	for (int i = 0; ok && props && i < v->n; i++) {
		const struct jv *p = deref(c, jv_get(props, v->keys[i])), *k;
		c->b->failed = false;
		if (!p || p->t != JV_OBJ)
			continue;
		if ((k = jv_get(p, "const")))
			ok = jv_equal(k, v->a[i]);
		if ((k = jv_get(p, "enum")) && k->t == JV_ARR) {
			bool any = false;
			for (int j = 0; j < k->n && !any; j++)
				any = jv_equal(k->a[j], v->a[i]);
			ok = ok && any;
		}
	}
	free(t.k);
	free(t.l);
	return ok;
}

/* As props_of, but of anyOf/oneOf only the first branch that fits v. */
static void props_for(struct sc *c, const struct jv *s, const struct jv *v, struct names *o, int depth)
{
	if (!s || s->t != JV_OBJ || depth > 32 || o->n < 0)
		return;
	const struct jv *r = jv_get(s, "$ref");
	if (r && r->t == JV_STR) {
		const struct jv *t = sc_pointer(c, r->s);
		c->b->failed = false;
		props_for(c, t, v, o, depth + 1);
	}
	const struct jv *l = jv_get(s, "allOf");
	for (int i = 0; l && l->t == JV_ARR && i < l->n; i++)
		props_for(c, l->a[i], v, o, depth + 1);
	const struct jv *p = jv_get(s, "properties");
	for (int i = 0; p && p->t == JV_OBJ && i < p->n && o->n >= 0; i++)
		add_name(o, p->keys[i], p->klen[i]);
	static const char *const subs[] = { "anyOf", "oneOf" };
	for (int k = 0; k < 2; k++) {
		l = jv_get(s, subs[k]);
		int pick = -1;
		for (int i = 0; l && l->t == JV_ARR && i < l->n && pick < 0; i++)
			if (fits(c, l->a[i], v, o))
				pick = i;
		for (int i = 0; l && l->t == JV_ARR && i < l->n; i++)
			if (pick < 0 || i == pick)
				props_for(c, l->a[i], v, o, depth + 1);
	}
}

static void props_of(struct sc *c, const struct jv *s, struct names *o, int depth)
{
	if (!s || s->t != JV_OBJ || depth > 32 || o->n < 0)
		return;
	const struct jv *r = jv_get(s, "$ref");
	if (r && r->t == JV_STR) {
		const struct jv *t = sc_pointer(c, r->s);
		c->b->failed = false;
		props_of(c, t, o, depth + 1);
	}
	const struct jv *l = jv_get(s, "allOf");
	for (int i = 0; l && l->t == JV_ARR && i < l->n; i++)
		props_of(c, l->a[i], o, depth + 1);
	const struct jv *p = jv_get(s, "properties");
	for (int i = 0; p && p->t == JV_OBJ && i < p->n && o->n >= 0; i++)
		add_name(o, p->keys[i], p->klen[i]);
	static const char *const subs[] = { "anyOf", "oneOf" };
	for (int k = 0; k < 2; k++) {
		l = jv_get(s, subs[k]);
		for (int i = 0; l && l->t == JV_ARR && i < l->n; i++)
			props_of(c, l->a[i], o, depth + 1);
	}
}

/* The schema of member k of object v: from properties, through the
 * branches (those v fits first), else its pattern or additionalProperties. */
static const struct jv *child_of(struct sc *c, const struct jv *s, const char *k, const struct jv *v, int depth)
{
	s = deref(c, s);
	if (!s || s->t != JV_OBJ || depth > 32)
		return NULL;
	const struct jv *p = jv_get(jv_get(s, "properties"), k);
	if (p)
		return p;
	static const char *const subs[] = { "allOf", "anyOf", "oneOf" };
	struct names none = { 0 };
	for (int pass = 0; pass < 2; pass++)
		for (int j = 0; j < 3; j++) {
			const struct jv *l = jv_get(s, subs[j]);
			for (int i = 0; l && l->t == JV_ARR && i < l->n; i++)
				if ((j == 0 || fits(c, l->a[i], v, &none) == (pass == 0)) &&
				    (p = child_of(c, l->a[i], k, v, depth + 1)))
					return p;
		}
	p = pattern_schema(jv_get(s, "patternProperties"), k, strlen(k), jv_get(s, "additionalProperties"));
	return p && p->t == JV_OBJ ? p : NULL;
}

static const struct jv *item_of(struct sc *c, const struct jv *s, int i, int depth)
{
	s = deref(c, s);
	if (!s || s->t != JV_OBJ || depth > 32)
		return NULL;
	const struct jv *pre = jv_get(s, "prefixItems"), *it = jv_get(s, "items");
	if (it && it->t == JV_ARR) {
		pre = it;
		it = jv_get(s, "additionalItems");
	}
	if (pre && pre->t == JV_ARR && i < pre->n)
		return pre->a[i];
	if (it && it->t == JV_OBJ)
		return it;
	/* an array among the branches */
	static const char *const subs[] = { "allOf", "anyOf", "oneOf" };
	for (int j = 0; j < 3; j++) {
		const struct jv *l = jv_get(s, subs[j]), *x;
		for (int k = 0; l && l->t == JV_ARR && k < l->n; k++)
			if ((x = item_of(c, l->a[k], i, depth + 1)))
				return x;
	}
	return NULL;
}

static void canon(struct sc *c, const struct jv *s, const struct jv *v, struct gbuf *b, int depth)
{
	if (depth > 256 || (v->t != JV_OBJ && v->t != JV_ARR) || !s) {
		jv_dump(b, v);
		return;
	}
	if (v->t == JV_ARR) {
		gbuf_putc(b, '[');
		for (int i = 0; i < v->n; i++) {
			if (i)
				gbuf_putc(b, ',');
			canon(c, item_of(c, s, i, 0), v->a[i], b, depth + 1);
		}
		gbuf_putc(b, ']');
		return;
	}
	struct names nm = { 0 };
	props_for(c, s, v, &nm, 0);
	gbuf_putc(b, '{');
	bool *done = calloc(v->n + 1, 1);
	bool first = true;
	for (int pass = 0; pass < 2; pass++) {
		for (int j = 0; j < (pass ? v->n : (nm.n > 0 ? nm.n : 0)); j++) {
			int i;
			if (pass == 0) {
				for (i = 0; i < v->n; i++)
					if (v->klen[i] == nm.l[j] && !memcmp(v->keys[i], nm.k[j], nm.l[j]))
						break;
				if (i == v->n)
					continue;
			} else {
				i = j;
			}
			if (!done || done[i])
				continue;
			done[i] = true;
			if (!first)
				gbuf_putc(b, ',');
			first = false;
			jv_dump_str(b, v->keys[i], v->klen[i]);
			gbuf_putc(b, ':');
			canon(c, child_of(c, s, v->keys[i], v, 0), v->a[i], b, depth + 1);
		}
	}
	gbuf_putc(b, '}');
	free(done);
	free(nm.k);
	free(nm.l);
}

int gm_json_canonical(const char *schema, size_t slen, const char *inst, size_t ilen, char **out,
		      size_t *outlen, char *err, size_t errlen)
{
	struct gm_b b;
	gmb_init(&b, err, errlen);
	struct sc c = { .b = &b };
	struct jv *iv;
	struct gbuf g = { 0 };
	int rc = -1;
	if (!(c.a = jv_arena_new()))
		return -1;
	if (jv_parse(c.a, schema, slen, &c.root, err, errlen) || jv_parse(c.a, inst, ilen, &iv, err, errlen))
		goto out;
	canon(&c, c.root, iv, &g, 0);
	if (g.oom || b.failed)
		goto out;
	*out = g.p;
	*outlen = g.n;
	g.p = NULL;
	rc = 0;
out:
	free(g.p);
	jv_arena_free(c.a);
	gmb_free(&b);
	return rc;
}
