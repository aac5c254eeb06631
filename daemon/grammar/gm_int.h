/* daemon/grammar/gm_int.h — the grammar room's insides: the byte-level
 * grammar (IR) every front end builds, and the builder they build it with.
 *
 * Symbols: a nonterminal is >= 0, a terminal (a set of bytes) is
 * -(index + 1), GM_END closes each production in the flat rhs array. */
#ifndef PAGODA_GM_INT_H
#define PAGODA_GM_INT_H

#include "daemon/grammar/grammar.h"

#include <stdatomic.h>
#include <stdint.h>

#define GM_END INT32_MIN
#define GM_MAX_SYMS (4u << 20) /* rhs symbols in one grammar */
#define GM_TERM(i) (-(int32_t)(i) - 1)
#define GM_TIDX(s) (-(s) - 1)

/* Counted repetition: sym min..max times as one nonterminal (lhs) whose
 * items carry the count in their position (GM_VPOS below), so a set
 * holds one item however far the count is, and a count far from both
 * bounds can be coded as one state (mask.c). max GM_CNT_INF: none. */
struct gm_cnt {
	int32_t lhs, sym;
	uint32_t min, max;
};
#define GM_CNT_INF UINT32_MAX

struct gm_grammar {
	atomic_int refs;
	int n_nt, n_terms;
	int32_t start;      /* position of the augmented production S' -> start */
	uint32_t accept;    /* the position after start in S' (complete there) */
	int32_t *rhs;       /* productions' symbols, each closed by GM_END */
	int32_t *pos_lhs;   /* per rhs position: its production's left side */
	uint32_t *nt_prods; /* per nonterminal: first index in prod_pos */
	uint32_t *prod_pos; /* productions grouped by left side: rhs positions */
	uint8_t *nullable;
	uint64_t (*terms)[4];
	size_t n_rhs;
	struct gm_cnt *cnts;
	int n_cnts;
	/* cache bookkeeping (cache.c) */
	uint64_t hash;
	int kind;
	size_t src_len;
	char *src;
};

/* The vocabulary as a trie over token bytes; children are contiguous. */
struct gm_node {
	uint32_t child, tok; /* first child node; first index in toks */
	uint16_t n_child, n_tok;
	uint8_t byte;
};

struct gm_vocab {
	int n_vocab;
	struct gm_node *nodes;
	size_t n_nodes;
	int32_t *toks; /* ids in byte order, grouped by trie node */
	char *blob;    /* pieces */
	uint32_t *off, *len;
	uint8_t *eog;
	int32_t *eog_ids;
	int n_eog;
	/* The split for parser states that loop on JSON string characters
	 * (loop.c): plain tokens are made of such characters only (a
	 * bitmask); tail1 and tail2 hold the other tokens that start with
	 * one or with more of them, keyed by what follows that run; head the
	 * tokens that do not start with one. NULL plain: no split. */
	uint32_t *plain;
	int n_plain;
	struct gm_trie {
		struct gm_node *nodes;
		size_t n_nodes;
		int32_t *toks;
	} head, tail1, tail2;
	/* Per node of the whole trie: the end of its subtree's tokens in toks,
	 * and whether every token below it goes on with string characters
	 * only (from the node's depth). NULL: not built. */
	uint32_t *sub_end;
	uint8_t *plain_below;
	uint8_t *height; /* the longest token below a node, in bytes past it (255: more) */
	/* The ASCII bytes of the tokens below a node, past it; bit 0 stands
	 * for the bytes from 0x80 (NUL is in no plain token). */
	uint64_t (*bytes_below)[2];
	uint32_t max_len; /* the longest token, in bytes */
};

/* The characters a JSON string holds raw (all but '"', '\\' and controls),
 * as byte-range sequences: printable ASCII in three ranges, then
 * well-formed UTF-8 (Unicode's table 3-7). */
struct gm_shape {
	uint8_t n, lo[4], hi[4];
};
#define GM_N_SHAPES 11
extern const struct gm_shape gm_shapes[GM_N_SHAPES];
/* Length of the string character at p (at most n bytes), 0 if none. */
int gm_char_len(const uint8_t *p, size_t n);

/* A position with GM_VPOS set is in counter (pos >> GM_VID_SHIFT) & GM_VID
 * at count pos & GM_VCOUNT: before one more sym while below max, complete
 * from min on (its completed item: count GM_VEND). The matcher codes a
 * count at or above min and at least the longest token below max as
 * GM_VFAR, one that far below min as GM_VLOW: such items stay so when
 * advanced. */
#define GM_VPOS (1u << 31)
#define GM_VID_SHIFT 20
#define GM_VID 0x7FFu
#define GM_VCOUNT 0xFFFFFu
#define GM_VEND 0xFFFFFu
#define GM_VFAR 0xFFFFEu
#define GM_VLOW 0xFFFFDu
#define GM_MAX_CNTS 2048
#define GM_CNT_MAX 0xFFF00u /* larger bounds are built as blocks */

static inline const struct gm_cnt *gm_cnt_of(const struct gm_grammar *g, uint32_t pos)
{
	return &g->cnts[pos >> GM_VID_SHIFT & GM_VID];
}

/* The symbol after the dot: GM_END where the item is complete. */
static inline int32_t gm_sym(const struct gm_grammar *g, uint32_t pos)
{
	if (!(pos & GM_VPOS))
		return g->rhs[pos];
	uint32_t n = pos & GM_VCOUNT;
	const struct gm_cnt *c = gm_cnt_of(g, pos);
	if (n == GM_VEND || (n < GM_VLOW && n >= c->max))
		return GM_END;
	return c->sym;
}

static inline int32_t gm_lhs(const struct gm_grammar *g, uint32_t pos)
{
	return pos & GM_VPOS ? gm_cnt_of(g, pos)->lhs : g->pos_lhs[pos];
}

/* The position after the dot's symbol. An unbounded count past its
 * minimum needs no counting: it becomes GM_VFAR for good. */
static inline uint32_t gm_next(const struct gm_grammar *g, uint32_t pos)
{
	if (!(pos & GM_VPOS))
		return pos + 1;
	uint32_t n = pos & GM_VCOUNT;
	if (n >= GM_VLOW)
		return pos;
	const struct gm_cnt *c = gm_cnt_of(g, pos);
	if (c->max == GM_CNT_INF && n + 1 >= c->min)
		return (pos & ~GM_VCOUNT) | GM_VFAR;
	return pos + 1;
}

/* A counted item that may also complete here (not one at max: that one
 * is complete itself). */
static inline bool gm_vdone(const struct gm_grammar *g, uint32_t pos)
{
	uint32_t n = pos & GM_VCOUNT;
	if (!(pos & GM_VPOS) || n == GM_VEND || n == GM_VLOW)
		return false;
	const struct gm_cnt *c = gm_cnt_of(g, pos);
	return n == GM_VFAR || (n >= c->min && n < c->max);
}

struct gm_b {
	struct { int32_t lhs; uint32_t pos; } *prods;
	size_t n_prods, cap_prods;
	int32_t *syms;
	size_t n_syms, cap_syms;
	uint64_t (*terms)[4];
	int n_terms, cap_terms;
	int32_t byte_term[256]; /* terminal of each single byte, 0 if none yet */
	struct gm_cnt *cnts;
	size_t n_cnts, cap_cnts;
	int32_t esc_nt[4], multibyte_nt; /* shared by gm_json_chars, + 1; 0: not built */
	int n_nt;
	bool failed;
	char *err;
	size_t errlen;
};

void gmb_init(struct gm_b *b, char *err, size_t errlen);
void gmb_free(struct gm_b *b);
/* Record the first error (printf format); sets failed. */
void gmb_fail(struct gm_b *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A finished grammar with start symbol start, or NULL (err set). */
struct gm_grammar *gmb_finish(struct gm_b *b, int32_t start);

int32_t gmb_nt(struct gm_b *b);
void gmb_prod(struct gm_b *b, int32_t nt, const int32_t *syms, int n);
int32_t gmb_byte(struct gm_b *b, uint8_t c);
int32_t gmb_bytes(struct gm_b *b, uint8_t lo, uint8_t hi);
int32_t gmb_set(struct gm_b *b, const uint64_t set[4]);
int32_t gmb_seq(struct gm_b *b, const int32_t *syms, int n); /* n == 1: that symbol */
int32_t gmb_alt(struct gm_b *b, const int32_t *syms, int n);
int32_t gmb_eps(struct gm_b *b);
/* Room for need elements of el bytes in *p (capacity *cap, doubled). */
bool gm_grow(void **p, size_t *cap, size_t need, size_t el);
int32_t gmb_none(struct gm_b *b); /* matches nothing */
int32_t gmb_lit(struct gm_b *b, const char *s, size_t n);
/* sym repeated min..max times (max < 0: unbounded). */
int32_t gmb_rep(struct gm_b *b, int32_t sym, long min, long max);
/* One code point of the sorted, disjoint ranges [r[i][0], r[i][1]], as UTF-8. */
int32_t gmb_cps(struct gm_b *b, const uint32_t (*r)[2], int n);

/* Code point sets: sorted disjoint ranges. */
struct gm_cps {
	uint32_t (*r)[2];
	int n, cap;
};
void cps_add(struct gm_cps *s, uint32_t lo, uint32_t hi); /* any order; normalise after */
void cps_norm(struct gm_cps *s);
void cps_negate(struct gm_cps *s); /* within 0..0x10FFFF, surrogates excluded */
void cps_free(struct gm_cps *s);
bool cps_failed(const struct gm_cps *s);

/* Regex front end. json: match the text of a JSON string's contents
 * (characters escaped as JSON needs) with search semantics unless anchored;
 * otherwise the whole output, anchors optional. */
int32_t gm_regex(struct gm_b *b, const char *re, size_t len, bool json);
int32_t gm_gbnf(struct gm_b *b, const char *src, size_t len);
int32_t gm_schema(struct gm_b *b, const char *src, size_t len);
/* In JSON-string mode: one character of s, escaped as a JSON string holds it. */
int32_t gm_json_chars(struct gm_b *b, const struct gm_cps *s);

/* Patterns as one automaton over code points (redfa.c): pattern i (JSON
 * Schema search semantics) sets bit i of the set a string matches. */
struct gm_dfa;
struct gm_dfa *gm_dfa_new(const char *const *res, const size_t *lens, int n, char *err, size_t errlen);
void gm_dfa_free(struct gm_dfa *d);
/* Some string matches every pattern of must and none of must_not. */
bool gm_dfa_some(const struct gm_dfa *d, uint32_t must, uint32_t must_not);
int gm_dfa_states(const struct gm_dfa *d);
/* The set of patterns the UTF-8 string s matches. */
uint32_t gm_dfa_match(const struct gm_dfa *d, const char *s, size_t n);
/* Those strings of mn..mx code points (mx < 0: no maximum), as the
 * contents of a JSON string. */
int32_t gm_dfa_string(struct gm_b *b, const struct gm_dfa *d, uint32_t must, uint32_t must_not, long mn, long mx);

/* JSON values for the schema compiler (jsonv.c): strict RFC 8259, objects
 * keep their key order, numbers keep their text. All memory is the arena's. */
enum jv_type { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ };
struct jv {
	enum jv_type t;
	bool b;
	double num;
	char *s; /* string (decoded) or number text */
	size_t len;
	int n;   /* array elements / object members */
	struct jv **a;
	char **keys;
	size_t *klen;
};
struct jv_arena;
struct jv_arena *jv_arena_new(void);
void jv_arena_free(struct jv_arena *a);
void *jv_alloc(struct jv_arena *a, size_t n); /* zeroed; NULL when out of memory */
int jv_parse(struct jv_arena *a, const char *s, size_t n, struct jv **out, char *err, size_t errlen);
struct jv *jv_get(const struct jv *obj, const char *key); /* NULL if absent or not an object */

struct gbuf {
	char *p;
	size_t n, cap;
	bool oom;
};
void gbuf_put(struct gbuf *b, const char *s, size_t n);
void gbuf_putc(struct gbuf *b, char c);
/* Compact JSON with minimal string escapes (as the grammars produce it). */
void jv_dump(struct gbuf *b, const struct jv *v);
void jv_dump_str(struct gbuf *b, const char *s, size_t n);
bool jv_equal(const struct jv *x, const struct jv *y);

#endif
