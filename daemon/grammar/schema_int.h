/* daemon/grammar/schema_int.h — the JSON Schema compiler's insides, shared
 * by its files: schema.c (schemas into the grammar), schema_num.c
 * (numbers: ranges, multipleOf), schema_not.c (not, if/then/else and the
 * dependencies rewritten as plain schemas). Schemas
 * are jv values; rewritten ones live in the compiler's arena. */
#ifndef PAGODA_SCHEMA_INT_H
#define PAGODA_SCHEMA_INT_H

#include "daemon/grammar/gm_int.h"

#include <string.h>

#define SC_MAX_DEPTH 200

struct sc {
	struct gm_b *b;
	struct jv_arena *a;
	struct jv *root;
	struct { const struct jv *node; int32_t nt; } *memo;
	int n_memo, cap_memo;
	int32_t any, string, number, integer, jchar;
	int depth;
	struct { char *key; size_t len; int32_t sym; } *autom; /* strings by automaton, by content */
	int n_autom;
};

/* Keywords that constrain instances, and those that only annotate. */
extern const char *const sc_validation[], *const sc_annotations[];
bool sc_in(const char *k, const char *const *list);

/* Fail the compile with "JSON Schema: " and fmt (one %s: arg); false. */
bool sc_err(struct sc *c, const char *fmt, const char *arg);
bool sc_true(const struct jv *v);
struct jv *sc_new(struct sc *c, enum jv_type t);
/* Set o[k] (an object) or append x (an array, k NULL). */
void sc_put(struct sc *c, struct jv *o, const char *k, size_t kl, struct jv *x);
struct jv *sc_pair(struct sc *c, const struct jv *x, const struct jv *y); /* allOf [x, y] */
const struct jv *sc_pointer(struct sc *c, const char *ref);
/* allOf/$ref merged into one schema object, or NULL (error set). */
const struct jv *sc_merge(struct sc *c, const struct jv *const *parts, int n);
struct jv *sc_types(struct sc *c, const struct jv *t); /* "type" as an array */
bool sc_has_type(const struct jv *l, const char *t);

/* Grammar pieces. */
static inline int32_t sc_lit(struct sc *c, const char *s)
{
	return gmb_lit(c->b, s, strlen(s));
}

static inline int32_t sc_seq2(struct sc *c, int32_t x, int32_t y)
{
	int32_t v[2] = { x, y };
	return gmb_seq(c->b, v, 2);
}

static inline int32_t sc_seq3(struct sc *c, int32_t x, int32_t y, int32_t z)
{
	int32_t v[3] = { x, y, z };
	return gmb_seq(c->b, v, 3);
}

static inline int32_t sc_alt2(struct sc *c, int32_t x, int32_t y)
{
	int32_t v[2] = { x, y };
	return gmb_alt(c->b, v, 2);
}

static inline int32_t sc_digits(struct sc *c, char lo, char hi)
{
	return gmb_bytes(c->b, (uint8_t)lo, (uint8_t)hi);
}

/* Numbers (schema_num.c): any JSON integer / number, and those a schema's
 * bounds and multipleOf allow. */
int32_t sc_json_int(struct sc *c);
int32_t sc_json_number(struct sc *c);
int32_t sc_integer(struct sc *c, const struct jv *s);
int32_t sc_number(struct sc *c, const struct jv *s);

/* not n as a schema without "not" where a grammar can say it, else NULL
 * with *why naming what could not be negated (no error is set). */
const struct jv *sc_negate(struct sc *c, const struct jv *n, const char **why, int depth);
/* s with if/then/else and dependencies* rewritten into anyOf/allOf: s
 * itself when it has none; NULL on error. */
const struct jv *sc_rewrite(struct sc *c, const struct jv *s);

#endif
