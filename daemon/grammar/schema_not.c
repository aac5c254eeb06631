/* daemon/grammar/schema_not.c — the JSON Schema keywords that are said
 * with other keywords: "not" pushed down to the keywords it negates (De
 * Morgan over a schema's conjunction of keywords), if/then/else as
 * anyOf(allOf(if, then), allOf(not if, else)), and dependencies as
 * anyOf(name absent, name present with what it brings).
 *
 * Each negation is exact except "not enum/const" on numbers, objects and
 * arrays, which keeps all values of that type (a grammar would have to
 * spell every other way of writing the number): those few values are
 * accepted though invalid. */
#include "daemon/grammar/schema_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NOT_MAX_DEPTH 32
#define DEP_MAX 6 /* dependencies and ifs per schema: 2^n branches */

static const char *const all_types[] = { "object", "array", "string", "number", "integer", "boolean", "null" };

static struct jv *str(struct sc *c, const char *s)
{
	struct jv *v = sc_new(c, JV_STR);
	if (v) {
		v->s = (char *)s;
		v->len = strlen(s);
	}
	return v;
}

static struct jv *num(struct sc *c, double x)
{
	struct jv *v = sc_new(c, JV_NUM);
	char *t = jv_alloc(c->a, 32);
	if (!v || !t)
		return NULL;
	snprintf(t, 32, "%.17g", x);
	v->num = x;
	v->s = t;
	v->len = strlen(t);
	return v;
}

static struct jv *boolean(struct sc *c, bool b)
{
	struct jv *v = sc_new(c, JV_BOOL);
	if (v)
		v->b = b;
	return v;
}

/* {"type": type, k: v} (k may be NULL) */
static struct jv *typed(struct sc *c, const char *type, const char *k, struct jv *v)
{
	struct jv *o = sc_new(c, JV_OBJ);
	if (!o)
		return NULL;
	if (type)
		sc_put(c, o, "type", 4, str(c, type));
	if (k)
		sc_put(c, o, k, strlen(k), v);
	return o;
}

static struct jv *one_list(struct sc *c, struct jv *x)
{
	struct jv *l = sc_new(c, JV_ARR);
	if (l)
		sc_put(c, l, NULL, 0, x);
	return l;
}

static struct jv *one_of_list(struct sc *c, const char *k, struct jv *x)
{
	struct jv *l = sc_new(c, JV_ARR), *o = sc_new(c, JV_OBJ);
	if (!l || !o)
		return NULL;
	sc_put(c, l, NULL, 0, x);
	sc_put(c, o, k, strlen(k), l);
	return o;
}

static const char *type_of(const struct jv *v)
{
	static const char *const t[] = { [JV_NULL] = "null", [JV_BOOL] = "boolean", [JV_NUM] = "number",
					 [JV_STR] = "string", [JV_ARR] = "array", [JV_OBJ] = "object" };
	return t[v->t];
}

/* not enum: the other types, the other strings ("\x01notIn"), the other
 * boolean; numbers, objects and arrays stay whole (see the top). */
static bool neg_enum(struct sc *c, const struct jv *l, struct jv *alts)
{
	struct jv *others = sc_new(c, JV_ARR), *strs = sc_new(c, JV_ARR);
	bool seen[7] = { 0 }, tf[2] = { 0 };
	if (!others || !strs)
		return false;
	for (int i = 0; i < l->n; i++) {
		const char *t = type_of(l->a[i]);
		for (int k = 0; k < 7; k++)
			seen[k] |= !strcmp(t, all_types[k]);
		if (l->a[i]->t == JV_STR)
			sc_put(c, strs, NULL, 0, l->a[i]);
		if (l->a[i]->t == JV_BOOL)
			tf[l->a[i]->b] = true;
	}
	for (int k = 0; k < 7; k++)
		if (k != 4 && (!seen[k] || k == 0 || k == 1 || k == 3))
			sc_put(c, others, NULL, 0, str(c, all_types[k]));
	if (others->n)
		sc_put(c, alts, NULL, 0, typed(c, NULL, "type", others));
	if (seen[2])
		sc_put(c, alts, NULL, 0, typed(c, "string", "\x01notIn", strs));
	if (seen[5] && !(tf[0] && tf[1]))
		sc_put(c, alts, NULL, 0, typed(c, NULL, "const", boolean(c, !tf[1])));
	return true;
}

static bool neg_type(struct sc *c, const struct jv *t, struct jv *alts, const char **why)
{
	struct jv *x = sc_types(c, t), *keep = sc_new(c, JV_ARR);
	if (!x || !keep)
		return false;
	if (sc_has_type(x, "integer") && !sc_has_type(x, "number")) /* the numbers with a fraction */
		sc_put(c, alts, NULL, 0, typed(c, "number", "\x01fraction", boolean(c, true)));
	for (int k = 0; k < 7; k++)
		if (!sc_has_type(x, all_types[k]) && k != 4 && !(k == 3 && sc_has_type(x, "integer")))
			sc_put(c, keep, NULL, 0, str(c, all_types[k]));
	if (keep->n)
		sc_put(c, alts, NULL, 0, typed(c, NULL, "type", keep));
	return true;
}

/* minimum <-> exclusiveMaximum, minLength n <-> maxLength n - 1, ... */
static bool neg_bound(struct sc *c, const struct jv *s, const char *k, const struct jv *v, struct jv *alts)
{
	static const struct { const char *k, *type, *neg; int shift; } b[] = {
		{ "minimum", "number", "exclusiveMaximum", 0 }, { "maximum", "number", "exclusiveMinimum", 0 },
		{ "exclusiveMinimum", "number", "maximum", 0 }, { "exclusiveMaximum", "number", "minimum", 0 },
		{ "minLength", "string", "maxLength", -1 },     { "maxLength", "string", "minLength", 1 },
		{ "minItems", "array", "maxItems", -1 },         { "maxItems", "array", "minItems", 1 },
		{ "minProperties", "object", "maxProperties", -1 }, { "maxProperties", "object", "minProperties", 1 },
	};
	for (size_t i = 0; i < sizeof b / sizeof *b; i++) {
		if (strcmp(k, b[i].k))
			continue;
		if (v->t == JV_BOOL) /* draft 4's exclusive flags: read with their bound */
			return true;
		if (v->t != JV_NUM)
			return false;
		const char *neg = b[i].neg;
		if (b[i].shift < 0 && v->num <= 0)
			return true; /* minLength 0: nothing violates it */
		if (!strcmp(k, "minimum") && sc_true(jv_get(s, "exclusiveMinimum")))
			neg = "maximum";
		if (!strcmp(k, "maximum") && sc_true(jv_get(s, "exclusiveMaximum")))
			neg = "minimum";
		struct jv *x = b[i].shift ? num(c, floor(v->num) + b[i].shift) : (struct jv *)v;
		if (b[i].shift > 0 && v->num != floor(v->num))
			x = num(c, ceil(v->num));
		sc_put(c, alts, NULL, 0, typed(c, b[i].type, neg, x));
		return true;
	}
	return false;
}

const struct jv *sc_negate(struct sc *c, const struct jv *n, const char **why, int depth)
{
	if (depth > NOT_MAX_DEPTH) {
		*why = "nested too deep";
		return NULL;
	}
	if (n->t == JV_BOOL)
		return boolean(c, !n->b);
	if (n->t != JV_OBJ) {
		*why = "not a schema";
		return NULL;
	}
	const struct jv *r = sc_rewrite(c, n);
	if (!r || c->b->failed)
		return NULL;
	const struct jv *s = sc_merge(c, &r, 1);
	if (!s)
		return NULL;
	struct jv *alts = sc_new(c, JV_ARR);
	if (!alts)
		return NULL;
	for (int i = 0; i < s->n; i++) {
		const char *k = s->keys[i];
		const struct jv *v = s->a[i];
		if (!strcmp(k, "not")) {
			sc_put(c, alts, NULL, 0, (struct jv *)v);
		} else if (!strcmp(k, "type")) {
			if (!neg_type(c, v, alts, why))
				return NULL;
		} else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
			if (!strcmp(k, "enum") && v->t != JV_ARR) {
				*why = "enum is not an array";
				return NULL;
			}
			struct jv one = { .t = JV_ARR, .n = 1, .a = (struct jv **)&v };
			if (!neg_enum(c, !strcmp(k, "enum") ? v : &one, alts))
				return NULL;
		} else if (!strcmp(k, "required") && v->t == JV_ARR) {
			for (int j = 0; j < v->n; j++) {
				struct jv *p = sc_new(c, JV_OBJ);
				if (!p || v->a[j]->t != JV_STR)
					continue;
				sc_put(c, p, v->a[j]->s, v->a[j]->len, boolean(c, false));
				sc_put(c, alts, NULL, 0, typed(c, "object", "properties", p));
			}
		} else if (!strcmp(k, "properties") && v->t == JV_OBJ) {
			for (int j = 0; j < v->n; j++) {
				const struct jv *x = sc_negate(c, v->a[j], why, depth + 1);
				if (!x)
					return NULL;
				if (x->t == JV_BOOL && !x->b)
					continue;
				struct jv *p = sc_new(c, JV_OBJ), *o = one_of_list(c, "required", str(c, v->keys[j]));
				if (!p || !o)
					return NULL;
				sc_put(c, p, v->keys[j], v->klen[j], (struct jv *)x);
				sc_put(c, o, "type", 4, str(c, "object"));
				sc_put(c, o, "properties", 10, p);
				sc_put(c, alts, NULL, 0, o);
			}
		} else if (!strcmp(k, "anyOf") || (!strcmp(k, "oneOf") && v->t == JV_ARR && v->n == 1)) {
			if (v->t != JV_ARR) {
				*why = "anyOf is not an array";
				return NULL;
			}
			struct jv *l = sc_new(c, JV_ARR), *o = sc_new(c, JV_OBJ);
			if (!l || !o)
				return NULL;
			for (int j = 0; j < v->n; j++) {
				const struct jv *x = sc_negate(c, v->a[j], why, depth + 1);
				if (!x)
					return NULL;
				sc_put(c, l, NULL, 0, (struct jv *)x);
			}
			sc_put(c, o, "allOf", 5, l);
			sc_put(c, alts, NULL, 0, o);
		} else if (!strcmp(k, "multipleOf") && v->t == JV_NUM) {
			sc_put(c, alts, NULL, 0, typed(c, "number", "\x01notMultipleOf", one_list(c, (struct jv *)v)));
		} else if (!strcmp(k, "pattern") && v->t == JV_STR) {
			sc_put(c, alts, NULL, 0, typed(c, "string", "\x01notPatterns", one_list(c, (struct jv *)v)));
		} else if (!strcmp(k, "uniqueItems") && v->t == JV_BOOL && !v->b) {
			continue;
		} else if (!strcmp(k, "format") || sc_in(k, sc_annotations) || !sc_in(k, sc_validation)) {
			if (!strcmp(k, "format")) {
				*why = "not format";
				return NULL;
			}
		} else if (!neg_bound(c, s, k, v, alts)) {
			static char m[64];
			snprintf(m, sizeof m, "not %.40s", k);
			*why = m;
			return NULL;
		}
	}
	if (c->b->failed)
		return NULL;
	if (alts->n == 0)
		return boolean(c, false);
	if (alts->n == 1)
		return alts->a[0];
	struct jv *o = sc_new(c, JV_OBJ);
	if (o)
		sc_put(c, o, "anyOf", 5, alts);
	return o;
}

static bool dep_key(const char *k)
{
	return !strcmp(k, "dependencies") || !strcmp(k, "dependentRequired") || !strcmp(k, "dependentSchemas");
}

/* anyOf [{properties: {name: false}}, with] */
static struct jv *absent_or(struct sc *c, const char *name, size_t nl, struct jv *with)
{
	struct jv *p = sc_new(c, JV_OBJ), *l = sc_new(c, JV_ARR), *o = sc_new(c, JV_OBJ);
	if (!p || !l || !o)
		return NULL;
	sc_put(c, p, name, nl, boolean(c, false));
	sc_put(c, l, NULL, 0, typed(c, NULL, "properties", p));
	sc_put(c, l, NULL, 0, with);
	sc_put(c, o, "anyOf", 5, l);
	return o;
}

const struct jv *sc_rewrite(struct sc *c, const struct jv *s)
{
	if (s->t != JV_OBJ)
		return s;
	bool any = false;
	for (int i = 0; i < s->n && !any; i++)
		any = !strcmp(s->keys[i], "if") || !strcmp(s->keys[i], "then") || !strcmp(s->keys[i], "else") ||
		      dep_key(s->keys[i]);
	if (!any)
		return s;
	struct jv *o = sc_new(c, JV_OBJ), *all = sc_new(c, JV_ARR);
	if (!o || !all)
		return NULL;
	const struct jv *old = jv_get(s, "allOf");
	for (int i = 0; old && old->t == JV_ARR && i < old->n; i++)
		sc_put(c, all, NULL, 0, old->a[i]);
	int added = 0;
	for (int i = 0; i < s->n; i++) {
		const char *k = s->keys[i];
		const struct jv *v = s->a[i];
		if (!dep_key(k)) {
			if (strcmp(k, "if") && strcmp(k, "then") && strcmp(k, "else") && strcmp(k, "allOf"))
				sc_put(c, o, k, s->klen[i], (struct jv *)v);
			continue;
		}
		if (v->t != JV_OBJ)
			return sc_err(c, "'%s' must be an object", k), NULL;
		for (int j = 0; j < v->n; j++, added++) {
			const struct jv *d = v->a[j];
			struct jv *with;
			if (d->t == JV_ARR) { /* the names it requires, itself first */
				struct jv *req = sc_new(c, JV_ARR);
				if (!req)
					return NULL;
				sc_put(c, req, NULL, 0, str(c, v->keys[j]));
				for (int q = 0; q < d->n; q++)
					sc_put(c, req, NULL, 0, d->a[q]);
				with = typed(c, NULL, "required", req);
			} else {
				with = sc_pair(c, one_of_list(c, "required", str(c, v->keys[j])), d);
			}
			sc_put(c, all, NULL, 0, absent_or(c, v->keys[j], v->klen[j], with));
		}
	}
	const struct jv *cond = jv_get(s, "if"), *th = jv_get(s, "then"), *el = jv_get(s, "else");
	if (cond && (th || el)) {
		const char *why = NULL;
		const struct jv *neg = sc_negate(c, cond, &why, 0);
		if (!neg) {
			if (!c->b->failed)
				sc_err(c, "unsupported keyword 'if' (its negation: %s)", why);
			return NULL;
		}
		struct jv *l = sc_new(c, JV_ARR), *x = sc_new(c, JV_OBJ), *yes = boolean(c, true);
		if (!l || !x)
			return NULL;
		sc_put(c, l, NULL, 0, sc_pair(c, cond, th ? th : yes));
		sc_put(c, l, NULL, 0, sc_pair(c, neg, el ? el : yes));
		sc_put(c, x, "anyOf", 5, l);
		sc_put(c, all, NULL, 0, x);
		added++;
	}
	if (added > DEP_MAX)
		return sc_err(c, "more than 6 dependencies and if/then/else in one schema%s", ""), NULL;
	if (all->n)
		sc_put(c, o, "allOf", 5, all);
	return c->b->failed ? NULL : o;
}
