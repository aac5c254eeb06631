/* daemon/grammar/match.c — the Earley matcher over bytes, and the mask: a
 * walk of the vocabulary's trie that pushes one Earley set per trie edge
 * and prunes every subtree whose first byte the parser cannot take.
 *
 * Sets live on one stack of items; rolling back is truncating it. Nullable
 * nonterminals are advanced over when predicted (Aycock and Horspool), so
 * completion never has to look at the set it is building. */
#include "daemon/grammar/gm_int.h"

#include <stdlib.h>
#include <string.h>

struct gm_item {
	uint32_t pos, origin;
};

#define ST_MAX_ITEMS (8u << 20)
#define ST_DEAD UINT32_MAX
#define REL (1ull << 63)
#define AT_ROOT 0x7fffffffull /* a distance standing for the walk's root */

enum { LOOP_UNKNOWN, LOOP_NO, LOOP_YES };

struct st {
	uint32_t off, n;
	uint64_t ok[4];
	uint64_t hash;
	uint8_t loop;    /* deeper than a root: loops on string characters */
	uint8_t run;     /* takes at least this many string characters, each to
			  * one state whatever it is (a count), RUN_UNKNOWN */
	bool one;        /* known to take every string character to one state */
	uint8_t rloop;   /* as a root: root_check's verdict */
	uint32_t s1, s2; /* rloop LOOP_YES: the states after one, two characters */
	uint32_t grp;    /* offset of its bytes' representatives in stc.grp, GRP_NONE */
	uint8_t misses;  /* transitions built from it, up to 2 */
	uint64_t exc[4]; /* rloop LOOP_YES: first bytes that do not lead to s1 */
};

#define GRP_NONE UINT32_MAX
#define RUN_UNKNOWN 0xFF
#define RUN_MAX 40 /* the longest run looked for: taller subtrees are walked */

#define MASKS 64
#define SC_NONE UINT32_MAX

struct stc {
	uint32_t *pos;
	uint64_t *code;
	size_t n_items, cap_items;
	struct st *st;
	uint32_t n_st, cap_st;
	uint32_t *index; /* hash -> state + 1 */
	uint32_t icap;
	uint64_t *tkey; /* (state << 8 | byte) + 1 */
	uint32_t *tval;
	uint32_t tcap, tn;
	uint8_t *grp; /* per state that has them: 256 bytes, each one's representative */
	size_t n_grp, cap_grp;
};

/* Sets by content (below): interned arrays of (pos << 32 | origin code). */
struct codes {
	uint64_t *items;
	size_t n_items, cap_items;
	uint64_t *hash;
	uint32_t *off, *len;
	uint32_t n, cap;
	uint32_t *index; /* hash -> code + 1 */
	uint32_t icap;
	uint64_t *tmp;
	size_t cap_tmp;
};

struct gm_matcher {
	const struct gm_grammar *g;
	const struct gm_vocab *v;
	struct gm_item *it;
	size_t n_it, cap_it;
	uint32_t *sets; /* first item of each set */
	size_t n_sets, cap_sets;
	/* the set under construction: (pos, origin) seen, by generation */
	uint64_t *hkey;
	uint32_t *hgen;
	uint32_t hcap, gen, hcount;
	bool done; /* an end-of-generation token was accepted */
	bool oom;
	bool slow; /* masks by the whole trie only (tests) */
	uint32_t reach; /* the longest token: counts this far from a bound are alike */
	struct stc cache; /* the mask walk's states, below */
	size_t cache_hi;  /* the highest real set a cached state may name */
	uint32_t *scode;  /* per set: its content code, SC_NONE until known */
	struct byn **byn; /* per set: its items by the nonterminal after the dot, or NULL */
	struct codes codes;
	uint32_t *masks;  /* the last masks (without end-of-generation) */
	uint32_t mkey[MASKS]; /* their roots' codes */
	int n_masks, next_mask;
};

static bool hash_grow(struct gm_matcher *m);

/* Position pos as states are compared: a counter's count at least the
 * longest token from its bounds as GM_VFAR or GM_VLOW. No walk from there
 * reaches a bound (each counted symbol takes a byte), and what a walk
 * finds out from such a state (that it loops, or takes a run) is used
 * only for the tokens below it. */
static uint32_t code_pos(const struct gm_matcher *m, uint32_t pos)
{
	uint32_t n = pos & GM_VCOUNT;
	if (!(pos & GM_VPOS) || n >= GM_VLOW)
		return pos;
	const struct gm_cnt *c = gm_cnt_of(m->g, pos);
	uint32_t r = m->reach;
	if (c->max != GM_CNT_INF && (c->max < r || n > c->max - r))
		return pos;
	if (n >= c->min)
		return (pos & ~GM_VCOUNT) | GM_VFAR;
	return c->min - n >= r ? (pos & ~GM_VCOUNT) | GM_VLOW : pos;
}

/* Sort items and drop repeats: counts coded alike may repeat. */
static size_t sort_unique(uint64_t *a, size_t n);
static void stc_clear(struct stc *c);
static void stc_free(struct stc *c);

static inline uint32_t hslot(uint64_t k, uint32_t cap)
{
	k *= 0x9E3779B97F4A7C15ull;
	return (uint32_t)(k >> 32) & (cap - 1);
}

static void add(struct gm_matcher *m, uint32_t pos, uint32_t origin)
{
	if (m->hcount * 2 >= m->hcap && !hash_grow(m))
		return;
	uint64_t k = (uint64_t)pos << 32 | origin;
	uint32_t i = hslot(k, m->hcap);
	while (m->hgen[i] == m->gen) {
		if (m->hkey[i] == k)
			return;
		i = (i + 1) & (m->hcap - 1);
	}
	if (m->n_it == m->cap_it) {
		size_t cap = m->cap_it * 2;
		struct gm_item *n = realloc(m->it, cap * sizeof *n);
		if (!n) {
			m->oom = true;
			return;
		}
		m->it = n;
		m->cap_it = cap;
	}
	m->hgen[i] = m->gen;
	m->hkey[i] = k;
	m->hcount++;
	m->it[m->n_it++] = (struct gm_item){ pos, origin };
}

static void new_gen(struct gm_matcher *m)
{
	m->hcount = 0;
	if (++m->gen == 0) {
		memset(m->hgen, 0, m->hcap * sizeof *m->hgen);
		m->gen = 1;
	}
}

/* Rehash the current set's items into a table twice the size. */
static bool hash_grow(struct gm_matcher *m)
{
	uint32_t cap = m->hcap * 2;
	uint64_t *k = malloc(cap * sizeof *k);
	uint32_t *g = calloc(cap, sizeof *g);
	if (!k || !g) {
		free(k);
		free(g);
		m->oom = true;
		return false;
	}
	free(m->hkey);
	free(m->hgen);
	m->hkey = k;
	m->hgen = g;
	m->hcap = cap;
	m->gen = 1;
	m->hcount = 0;
	for (size_t j = m->sets[m->n_sets - 1]; j < m->n_it; j++) {
		uint64_t key = (uint64_t)m->it[j].pos << 32 | m->it[j].origin;
		uint32_t i = hslot(key, cap);
		while (g[i] == 1)
			i = (i + 1) & (cap - 1);
		g[i] = 1;
		k[i] = key;
		m->hcount++;
	}
	return true;
}

/* A large set's items waiting for a nonterminal, sorted by it: completing
 * into the set takes a binary search, not a pass over every item. Built
 * the first time a completion looks into the set, dropped with it. */
struct byn {
	uint32_t n;
	struct byn_item {
		int32_t sym;
		uint32_t pos, origin;
	} it[];
};

#define BYN_MIN 48 /* smaller sets are scanned */

static int cmp_byn(const void *a, const void *b)
{
	const struct byn_item *x = a, *y = b;
	if (x->sym != y->sym)
		return x->sym < y->sym ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static struct byn *byn_build(struct gm_matcher *m, size_t o)
{
	size_t from = m->sets[o], to = m->sets[o + 1], n = 0;
	struct byn *b = malloc(sizeof *b + (to - from) * sizeof b->it[0]);
	if (!b)
		return NULL;
	for (size_t j = from; j < to; j++) {
		int32_t sym = gm_sym(m->g, m->it[j].pos);
		if (sym >= 0)
			b->it[n++] = (struct byn_item){ sym, m->it[j].pos, m->it[j].origin };
	}
	b->n = (uint32_t)n;
	qsort(b->it, n, sizeof b->it[0], cmp_byn);
	return b;
}

/* Advance the items of set o that wait for lhs. */
static void complete(struct gm_matcher *m, size_t o, int32_t lhs)
{
	const struct gm_grammar *g = m->g;
	size_t from = m->sets[o], end = m->sets[o + 1];
	if (end - from < BYN_MIN || (!m->byn[o] && !(m->byn[o] = byn_build(m, o)))) {
		for (size_t j = from; j < end; j++)
			if (gm_sym(g, m->it[j].pos) == lhs)
				add(m, gm_next(g, m->it[j].pos), m->it[j].origin);
		return;
	}
	const struct byn *b = m->byn[o];
	uint32_t lo = 0, hi = b->n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (b->it[mid].sym < lhs)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < b->n && b->it[lo].sym == lhs; lo++)
		add(m, gm_next(g, b->it[lo].pos), b->it[lo].origin);
}

static void closure(struct gm_matcher *m, uint32_t k)
{
	const struct gm_grammar *g = m->g;
	for (size_t i = m->sets[k]; i < m->n_it && !m->oom; i++) {
		struct gm_item x = m->it[i];
		int32_t sym = gm_sym(g, x.pos);
		if (sym == GM_END) {
			if (x.origin == k)
				continue;
			complete(m, x.origin, gm_lhs(g, x.pos));
			continue;
		}
		if (sym >= 0) {
			for (uint32_t p = g->nt_prods[sym]; p < g->nt_prods[sym + 1]; p++)
				add(m, g->prod_pos[p], k);
			if (g->nullable[sym] && !(x.pos & GM_VPOS))
				add(m, x.pos + 1, x.origin);
		}
		if (gm_vdone(g, x.pos))
			add(m, x.pos | GM_VEND, x.origin);
	}
}

static bool set_push(struct gm_matcher *m)
{
	if (m->n_sets == m->cap_sets) {
		uint32_t *n = realloc(m->sets, m->cap_sets * 2 * sizeof *n);
		if (n)
			m->sets = n;
		uint32_t *c = n ? realloc(m->scode, m->cap_sets * 2 * sizeof *c) : NULL;
		if (c)
			m->scode = c;
		struct byn **y = c ? realloc(m->byn, m->cap_sets * 2 * sizeof *y) : NULL;
		if (y)
			m->byn = y;
		if (!n || !c || !y) {
			m->oom = true;
			return false;
		}
		m->cap_sets *= 2;
	}
	m->scode[m->n_sets] = SC_NONE;
	m->byn[m->n_sets] = NULL;
	m->sets[m->n_sets++] = (uint32_t)m->n_it;
	new_gen(m);
	return true;
}

static inline void pop(struct gm_matcher *m)
{
	m->n_it = m->sets[--m->n_sets];
	if (m->byn[m->n_sets]) {
		free(m->byn[m->n_sets]);
		m->byn[m->n_sets] = NULL;
	}
}

/* Scan byte c from the last set into a new one: false if none takes it. */
static bool push(struct gm_matcher *m, uint8_t c)
{
	const struct gm_grammar *g = m->g;
	size_t from = m->sets[m->n_sets - 1], to = m->n_it;
	if (!set_push(m))
		return false;
	uint64_t bit = 1ull << (c & 63);
	int w = c >> 6;
	for (size_t j = from; j < to; j++) {
		int32_t sym = gm_sym(g, m->it[j].pos);
		if (sym < 0 && sym != GM_END && (g->terms[GM_TIDX(sym)][w] & bit))
			add(m, gm_next(g, m->it[j].pos), m->it[j].origin);
	}
	if (m->n_it == m->sets[m->n_sets - 1] || m->oom) {
		pop(m);
		return false;
	}
	closure(m, (uint32_t)m->n_sets - 1);
	if (m->oom) {
		pop(m);
		return false;
	}
	return true;
}

struct gm_matcher *gm_matcher_new(const struct gm_grammar *g, const struct gm_vocab *v)
{
	struct gm_matcher *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->g = g;
	m->v = v;
	m->reach = v->max_len;
	m->cap_it = 256;
	m->cap_sets = 256;
	m->hcap = 256;
	m->it = malloc(m->cap_it * sizeof *m->it);
	m->sets = malloc(m->cap_sets * sizeof *m->sets);
	m->scode = malloc(m->cap_sets * sizeof *m->scode);
	m->byn = malloc(m->cap_sets * sizeof *m->byn);
	m->hkey = malloc(m->hcap * sizeof *m->hkey);
	m->hgen = calloc(m->hcap, sizeof *m->hgen);
	if (!m->it || !m->sets || !m->scode || !m->byn || !m->hkey || !m->hgen)
		goto fail;
	set_push(m);
	add(m, (uint32_t)g->start, 0);
	closure(m, 0);
	if (m->oom)
		goto fail;
	return m;
fail:
	gm_matcher_free(m);
	return NULL;
}

void gm_matcher_free(struct gm_matcher *m)
{
	if (!m)
		return;
	free(m->it);
	free(m->sets);
	free(m->scode);
	if (m->byn)
		for (size_t k = 0; k < m->n_sets; k++)
			free(m->byn[k]);
	free(m->byn);
	free(m->masks);
	free(m->codes.items);
	free(m->codes.hash);
	free(m->codes.off);
	free(m->codes.len);
	free(m->codes.index);
	free(m->codes.tmp);
	free(m->hkey);
	free(m->hgen);
	stc_free(&m->cache);
	free(m);
}

bool gm_matcher_is_complete(const struct gm_matcher *m)
{
	for (size_t j = m->sets[m->n_sets - 1]; j < m->n_it; j++)
		if (m->it[j].pos == m->g->accept && m->it[j].origin == 0)
			return true;
	return false;
}

size_t gm_matcher_pos(const struct gm_matcher *m)
{
	return m->n_sets - 1;
}

void gm_matcher_rollback(struct gm_matcher *m, size_t pos)
{
	m->done = false;
	if (pos < m->cache_hi) {
		stc_clear(&m->cache);
		m->cache_hi = 0;
	}
	while (m->n_sets - 1 > pos)
		pop(m);
}

int gm_matcher_accept_bytes(struct gm_matcher *m, const char *s, size_t n)
{
	size_t at = gm_matcher_pos(m);
	if (m->done && n)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!push(m, (uint8_t)s[i])) {
			gm_matcher_rollback(m, at);
			m->oom = false;
			return -1;
		}
	return 0;
}

int gm_matcher_accept_token(struct gm_matcher *m, int32_t tok)
{
	const struct gm_vocab *v = m->v;
	if (tok < 0 || tok >= v->n_vocab || m->done)
		return -1;
	if (v->eog[tok]) {
		if (!gm_matcher_is_complete(m))
			return -1;
		m->done = true;
		return 0;
	}
	if (v->len[tok] == 0)
		return -1;
	return gm_matcher_accept_bytes(m, v->blob + v->off[tok], v->len[tok]);
}

/* ---- the mask walk's state cache --------------------------------------
 *
 * A set's future depends only on its items that are not complete, and on
 * the sets their origins name. Origins before the walk's root are real
 * sets that never change (until a rollback); deeper ones are coded as
 * (distance, state of that set), the set's own items as distance 0, and
 * the root by its state alone: a set that looks back only to the root is
 * one state at any depth (a key that left every declared name loops).
 * Two sets with the same coded items therefore take the same bytes to
 * the same states, and the walk remembers (state, byte) -> state: a set is
 * built only where the cache has not seen the step yet, and roots that
 * differ only in where they are (inside one JSON string) share it all. */

static void stc_clear(struct stc *c)
{
	c->n_items = 0;
	c->n_st = 0;
	c->tn = 0;
	c->n_grp = 0;
	if (c->index)
		memset(c->index, 0, c->icap * sizeof *c->index);
	if (c->tkey)
		memset(c->tkey, 0, c->tcap * sizeof *c->tkey);
}

static void stc_free(struct stc *c)
{
	free(c->pos);
	free(c->code);
	free(c->st);
	free(c->index);
	free(c->tkey);
	free(c->tval);
	free(c->grp);
	memset(c, 0, sizeof *c);
}

static uint64_t mix(uint64_t h, uint64_t x)
{
	h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static bool index_grow(struct stc *c)
{
	uint32_t cap = c->icap ? c->icap * 2 : 1024;
	uint32_t *ix = calloc(cap, sizeof *ix);
	if (!ix)
		return false;
	for (uint32_t s = 0; s < c->n_st; s++) {
		uint32_t i = (uint32_t)(c->st[s].hash >> 32) & (cap - 1);
		while (ix[i])
			i = (i + 1) & (cap - 1);
		ix[i] = s + 1;
	}
	free(c->index);
	c->index = ix;
	c->icap = cap;
	return true;
}

/* The state of set k, at or below the walk's root b (path: states by depth). */
static uint32_t intern(struct gm_matcher *m, struct stc *c, size_t k, size_t b, const uint32_t *path)
{
	const struct gm_grammar *g = m->g;
	size_t from = m->sets[k], to = m->n_it, need = c->n_items + (to - from);
	if (need > c->cap_items) {
		size_t cap = c->cap_items ? c->cap_items * 2 : 4096;
		while (cap < need)
			cap *= 2;
		uint32_t *p = realloc(c->pos, cap * sizeof *p);
		if (p)
			c->pos = p;
		uint64_t *q = realloc(c->code, cap * sizeof *q);
		if (q)
			c->code = q;
		if (!p || !q)
			return m->oom = true, ST_DEAD;
		c->cap_items = cap;
	}
	if (c->n_st == c->cap_st) {
		uint32_t cap = c->cap_st ? c->cap_st * 2 : 1024;
		struct st *n = realloc(c->st, cap * sizeof *n);
		if (!n)
			return m->oom = true, ST_DEAD;
		c->st = n;
		c->cap_st = cap;
	}
	if ((c->n_st + 1) * 2 > c->icap && !index_grow(c))
		return m->oom = true, ST_DEAD;
	struct st *st = &c->st[c->n_st];
	st->off = (uint32_t)c->n_items;
	st->n = 0;
	st->loop = LOOP_UNKNOWN;
	st->run = RUN_UNKNOWN;
	st->one = false;
	st->grp = GRP_NONE;
	st->misses = 0;
	st->rloop = LOOP_UNKNOWN;
	memset(st->exc, 0, sizeof st->exc);
	memset(st->ok, 0, sizeof st->ok);
	uint32_t *pp = c->pos + c->n_items;
	uint64_t *cp = c->code + c->n_items;
	for (size_t j = from; j < to; j++) {
		uint32_t pos = m->it[j].pos, o = m->it[j].origin;
		int32_t sym = gm_sym(g, pos);
		if (sym == GM_END)
			continue;
		if (sym < 0) {
			const uint64_t *t = g->terms[GM_TIDX(sym)];
			for (int w = 0; w < 4; w++)
				st->ok[w] |= t[w];
		}
		uint64_t code = o < b ? o : o == k ? REL : o == b ? REL | AT_ROOT << 32 | path[0]
							: REL | (uint64_t)(k - o) << 32 | path[o - b];
		pp[st->n] = code_pos(m, pos);
		cp[st->n] = code;
		st->n++;
	}
	uint64_t h = 0;
	for (uint32_t j = 0; j < st->n; j++)
		h = mix(mix(h, pp[j]), cp[j]);
	st->hash = h;
	uint32_t i = (uint32_t)(h >> 32) & (c->icap - 1);
	for (; c->index[i]; i = (i + 1) & (c->icap - 1)) {
		const struct st *o = &c->st[c->index[i] - 1];
		if (o->hash == h && o->n == st->n && !memcmp(c->pos + o->off, c->pos + st->off, st->n * sizeof *c->pos) &&
		    !memcmp(c->code + o->off, c->code + st->off, st->n * sizeof *c->code))
			return c->index[i] - 1;
	}
	c->index[i] = c->n_st + 1;
	c->n_items += st->n;
	return c->n_st++;
}

/* The transition (s, byte) if known, NULL if not. */
static const uint32_t *tfind(const struct stc *c, uint32_t s, uint8_t byte)
{
	if (!c->tcap)
		return NULL;
	uint64_t key = ((uint64_t)s << 8 | byte) + 1;
	uint32_t j = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (c->tcap - 1);
	while (c->tkey[j] && c->tkey[j] != key)
		j = (j + 1) & (c->tcap - 1);
	return c->tkey[j] == key ? &c->tval[j] : NULL;
}

static uint32_t *tslot(struct gm_matcher *m, struct stc *c, uint32_t s, uint8_t byte, bool *found)
{
	if ((c->tn + 1) * 2 > c->tcap) {
		uint32_t cap = c->tcap ? c->tcap * 2 : 4096;
		uint64_t *k = calloc(cap, sizeof *k);
		uint32_t *v = malloc(cap * sizeof *v);
		if (!k || !v) {
			free(k);
			free(v);
			m->oom = true;
			return NULL;
		}
		for (uint32_t i = 0; i < c->tcap; i++)
			if (c->tkey[i]) {
				uint32_t j = (uint32_t)((c->tkey[i] * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
				while (k[j])
					j = (j + 1) & (cap - 1);
				k[j] = c->tkey[i];
				v[j] = c->tval[i];
			}
		free(c->tkey);
		free(c->tval);
		c->tkey = k;
		c->tval = v;
		c->tcap = cap;
	}
	uint64_t key = ((uint64_t)s << 8 | byte) + 1;
	uint32_t j = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (c->tcap - 1);
	while (c->tkey[j] && c->tkey[j] != key)
		j = (j + 1) & (c->tcap - 1);
	*found = c->tkey[j] == key;
	if (!*found) {
		c->tkey[j] = key;
		c->tn++;
	}
	return &c->tval[j];
}

struct walk {
	struct gm_matcher *m;
	const struct gm_vocab *v;
	const struct gm_node *nodes; /* the trie walked */
	const int32_t *toks;
	struct stc *c;
	uint32_t *mask;
	size_t base;     /* the real set the walk starts from */
	bool below;      /* whole subtrees may be taken where the state loops */
	uint32_t path[1024]; /* state by depth */
};

/* Build the real sets of the path down to depth d from their states. */
static bool materialize(struct walk *w, size_t d)
{
	struct gm_matcher *m = w->m;
	for (size_t i = m->n_sets - 1 - w->base + 1; i <= d; i++) {
		if (!set_push(m))
			return false;
		const struct st *st = &w->c->st[w->path[i]];
		size_t k = w->base + i;
		for (uint32_t j = 0; j < st->n; j++) {
			if (m->n_it == m->cap_it) {
				struct gm_item *n = realloc(m->it, m->cap_it * 2 * sizeof *n);
				if (!n)
					return m->oom = true, false;
				m->it = n;
				m->cap_it *= 2;
			}
			uint64_t code = w->c->code[st->off + j];
			uint64_t dist = code >> 32 & AT_ROOT;
			uint32_t o = !(code & REL) ? (uint32_t)code : dist == AT_ROOT ? (uint32_t)w->base : (uint32_t)(k - dist);
			m->it[m->n_it++] = (struct gm_item){ w->c->pos[st->off + j], o };
		}
	}
	return true;
}

static bool loops_below(struct walk *w, const struct gm_node *c, size_t d);

static void walk(struct walk *w, const struct gm_node *n, size_t d);

/* Each byte's representative: the first byte scanned by the same items of
 * the last set (its signature: which of the set's terminals take it). */
static void byte_reps(const struct gm_matcher *m, uint8_t *rep)
{
	const uint64_t *terms[64];
	int nt = 0;
	for (size_t j = m->sets[m->n_sets - 1]; j < m->n_it; j++) {
		int32_t sym = gm_sym(m->g, m->it[j].pos);
		if (sym >= 0 || sym == GM_END)
			continue;
		const uint64_t *t = m->g->terms[GM_TIDX(sym)];
		int i = 0;
		while (i < nt && terms[i] != t)
			i++;
		if (i < nt)
			continue;
		if (nt == 64) {
			for (int b = 0; b < 256; b++)
				rep[b] = (uint8_t)b;
			return;
		}
		terms[nt++] = t;
	}
	uint64_t sig[256] = { 0 }, seen[256];
	for (int i = 0; i < nt; i++)
		for (int wd = 0; wd < 4; wd++)
			for (uint64_t bits = terms[i][wd]; bits; bits &= bits - 1)
				sig[wd * 64 + __builtin_ctzll(bits)] |= 1ull << i;
	int n_seen = 0;
	uint8_t first[256];
	for (int b = 0; b < 256; b++) {
		uint64_t x = sig[b];
		int k = 0;
		while (k < n_seen && seen[k] != x)
			k++;
		if (k == n_seen) {
			seen[n_seen] = x;
			first[n_seen++] = (uint8_t)b;
		}
		rep[b] = first[k];
	}
}

/* Bytes scanned by the same items of a set lead to the same next set: the
 * byte whose transition stands for this one from the state at depth d (its
 * set the last). Worked out from a state's second new transition on. */
static uint8_t byte_rep(struct walk *w, size_t d, uint8_t byte)
{
	struct stc *c = w->c;
	struct st *st = &c->st[w->path[d]];
	if (st->grp == GRP_NONE) {
		if (st->misses < 2) {
			st->misses++;
			return byte;
		}
		if (c->n_grp + 256 > c->cap_grp) {
			size_t cap = c->cap_grp ? c->cap_grp * 2 : 64 * 256;
			uint8_t *g = realloc(c->grp, cap);
			if (!g)
				return byte;
			c->grp = g;
			c->cap_grp = cap;
		}
		byte_reps(w->m, c->grp + c->n_grp);
		st->grp = (uint32_t)c->n_grp;
		c->n_grp += 256;
	}
	return c->grp[st->grp + byte];
}

/* Take node c from depth d if its byte is allowed there, and walk on. */
static void step(struct walk *w, const struct gm_node *c, size_t d)
{
	struct gm_matcher *m = w->m;
	const uint64_t *ok = w->c->st[w->path[d]].ok;
	if (!(ok[c->byte >> 6] >> (c->byte & 63) & 1))
		return;
	for (int t = 0; t < c->n_tok; t++) {
		int32_t id = w->toks[c->tok + t];
		w->mask[id >> 5] |= 1u << (id & 31);
	}
	if (!c->n_child || d + 1 >= sizeof w->path / sizeof *w->path)
		return;
	bool found;
	uint32_t *slot = tslot(m, w->c, w->path[d], c->byte, &found);
	if (!slot)
		return;
	uint32_t next = *slot;
	if (!found) {
		if (!materialize(w, d))
			return;
		uint8_t rep = byte_rep(w, d, c->byte);
		const uint32_t *known = rep != c->byte ? tfind(w->c, w->path[d], rep) : NULL;
		if (known)
			next = *known;
		else
			next = push(m, c->byte) ? intern(m, w->c, m->n_sets - 1, w->base, w->path) : ST_DEAD;
		/* the slot may have moved while interning: look it up again */
		slot = tslot(m, w->c, w->path[d], c->byte, &found);
		if (!slot)
			return;
		*slot = next;
	}
	if (next != ST_DEAD) {
		w->path[d + 1] = next;
		if (!w->below || !loops_below(w, c, d + 1))
			walk(w, c, d + 1);
	}
	while (m->n_sets - 1 > w->base + d)
		pop(m);
}

static void walk(struct walk *w, const struct gm_node *n, size_t d)
{
	const struct gm_node *c = &w->nodes[n->child];
	for (int i = 0; i < n->n_child && !w->m->oom; i++, c++)
		step(w, c, d);
}

/* ---- states that loop on string characters ----------------------------
 *
 * Inside a JSON string every raw character (gm_shapes) takes the parser
 * from one state to the same next one. Where the root R takes every
 * character to one state S1 and S1 takes every character back to itself,
 * every token made of such characters is allowed (the vocabulary's plain
 * bitmask), a token that starts with some of them is decided by its tail
 * walked from S1, and only the tokens that start otherwise are walked from
 * R: a few thousand trie nodes instead of the whole vocabulary. */

#define LOOP_MAX_PUSHES 512
#define LOOP_DEPTH 3
#define C_ROOT 0xFFFFFFFFu
#define C_SELF 0xFFFFFFFEu
#define C_ANCHOR 0xFFFFFFFDu

struct loop {
	struct gm_matcher *m;
	size_t base;
	size_t anchor; /* where S1 is, when past it; 0: not */
	uint64_t *want, *tmp; /* S1's canonical items, the set's at hand */
	size_t n_want, cap;
	bool have;
	int pushes;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static size_t sort_unique(uint64_t *a, size_t n)
{
	qsort(a, n, sizeof *a, cmp_u64);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!k || a[i] != a[k - 1])
			a[k++] = a[i];
	return k;
}

/* The last set's items that are not complete, origins made independent of
 * where the set is: before the root as they are, the root and the set
 * itself marked. -1 if an item starts inside a character, or on OOM. */
static long canon(struct loop *l, uint64_t **out)
{
	struct gm_matcher *m = l->m;
	size_t k = m->n_sets - 1, from = m->sets[k], n = 0;
	if (m->n_it - from > l->cap) {
		size_t cap = (m->n_it - from) * 2;
		uint64_t *a = realloc(l->want, cap * sizeof *a), *b;
		if (a)
			l->want = a;
		b = a ? realloc(l->tmp, cap * sizeof *b) : NULL;
		if (b)
			l->tmp = b;
		if (!a || !b)
			return m->oom = true, -1;
		l->cap = cap;
	}
	uint64_t *o = l->have ? l->tmp : l->want;
	for (size_t j = from; j < m->n_it; j++) {
		uint32_t pos = m->it[j].pos, org = m->it[j].origin;
		if (gm_sym(m->g, pos) == GM_END)
			continue;
		uint32_t c;
		if (org < l->base)
			c = org;
		else if (org == l->base)
			c = C_ROOT;
		else if (org == k)
			c = C_SELF;
		else if (org == l->anchor)
			c = C_ANCHOR;
		else
			return -1;
		o[n++] = (uint64_t)code_pos(m, pos) << 32 | c;
	}
	n = sort_unique(o, n);
	*out = o;
	return (long)n;
}

/* Bytes a and b are scanned by the same items of the last set. */
/* Group bytes lo..hi by the items of the last set that scan them (only
 * the terminals that take some byte of the range tell them apart): each
 * byte's group in grp, one byte of each in reps. Returns the groups. */
static int group_bytes(const struct gm_matcher *m, uint8_t lo, uint8_t hi, uint8_t *grp, uint8_t *reps)
{
	uint64_t range[4] = { 0 };
	for (int b = lo; b <= hi; b++)
		range[b >> 6] |= 1ull << (b & 63);
	const uint64_t *terms[64];
	int nt = 0;
	bool all = false;
	for (size_t j = m->sets[m->n_sets - 1]; j < m->n_it && !all; j++) {
		int32_t sym = gm_sym(m->g, m->it[j].pos);
		if (sym >= 0 || sym == GM_END)
			continue;
		const uint64_t *t = m->g->terms[GM_TIDX(sym)];
		if (!((t[0] & range[0]) | (t[1] & range[1]) | (t[2] & range[2]) | (t[3] & range[3])))
			continue;
		if (nt == 64)
			all = true; /* too many to tell apart cheaply: each byte alone */
		else
			terms[nt++] = t;
	}
	int nr = 0;
	for (int b = lo; b <= hi; b++) {
		int r = 0;
		for (; !all && r < nr; r++) {
			uint8_t a = reps[r];
			int i = 0;
			while (i < nt && (terms[i][a >> 6] >> (a & 63) & 1) == (terms[i][b >> 6] >> (b & 63) & 1))
				i++;
			if (i == nt)
				break;
		}
		if (all || r == nr) {
			r = nr;
			reps[nr++] = (uint8_t)b;
		}
		grp[b - lo] = (uint8_t)r;
	}
	return nr;
}

/* Every character of shape sh from byte i on, from the last set, is
 * scanned and ends in S1 (the first one found defines it). Bytes scanned
 * by the same items lead to the same set: one of each group is pushed. */
static bool shape_ok(struct loop *l, const struct gm_shape *sh, int i)
{
	struct gm_matcher *m = l->m;
	if (i == sh->n) {
		uint64_t *c;
		long n = canon(l, &c);
		if (n < 0)
			return false;
		if (!l->have) {
			l->have = true;
			l->n_want = (size_t)n;
			return true;
		}
		return (size_t)n == l->n_want && !memcmp(c, l->want, n * sizeof *c);
	}
	uint8_t reps[256], grp[256];
	int nr = group_bytes(m, sh->lo[i], sh->hi[i], grp, reps);
	for (int r = 0; r < nr; r++) {
		if (++l->pushes > LOOP_MAX_PUSHES || !push(m, reps[r]))
			return false;
		bool ok = shape_ok(l, sh, i + 1);
		pop(m);
		if (!ok)
			return false;
	}
	return true;
}

static bool chars_ok(struct loop *l)
{
	for (int s = 0; s < GM_N_SHAPES; s++)
		if (!shape_ok(l, &gm_shapes[s], 0))
			return false;
	return true;
}

/* Decide whether the state at depth d (its set the last) loops. One that
 * does not take every character to one state takes no run either. */
static void loop_check(struct walk *w, size_t d)
{
	struct gm_matcher *m = w->m;
	struct loop l = { .m = m, .base = w->base + d };
	bool one = chars_ok(&l), ok = one && push(m, gm_shapes[0].lo[0]);
	if (ok) {
		ok = chars_ok(&l);
		pop(m);
	}
	free(l.want);
	free(l.tmp);
	struct st *st = &w->c->st[w->path[d]];
	st->loop = ok ? LOOP_YES : LOOP_NO;
	st->one = one;
	if (!one)
		st->run = 0;
}

/* How many string characters (up to max) the state at depth d takes,
 * each to one state whatever the character: a state that counts (inside
 * maxLength) does not loop but takes a run as long as its bound allows.
 * Its set is the last; the states on the way are kept (path[d + 1] on). */
static int run_of(struct walk *w, size_t d, int max)
{
	struct gm_matcher *m = w->m;
	struct st *st = &w->c->st[w->path[d]];
	if (st->loop == LOOP_YES)
		return max;
	if (st->run != RUN_UNKNOWN)
		return st->run < max ? st->run : max;
	int run = 0;
	if (max > 0 && d + 2 < sizeof w->path / sizeof *w->path) {
		bool ok = st->one;
		if (!ok) {
			struct loop l = { .m = m, .base = w->base + d };
			ok = chars_ok(&l);
			free(l.want);
			free(l.tmp);
		}
		if (ok && push(m, gm_shapes[0].lo[0])) {
			uint32_t next = intern(m, w->c, w->base + d + 1, w->base, w->path);
			if (next != ST_DEAD && !m->oom) {
				w->path[d + 1] = next;
				/* after an opening quote the next state often loops */
				if (w->c->st[next].loop == LOOP_UNKNOWN && w->c->st[next].run == RUN_UNKNOWN)
					loop_check(w, d + 1);
				run = 1 + run_of(w, d + 1, max - 1);
			}
			pop(m);
		}
	}
	/* a run cut by max is a lower bound: still true when kept */
	w->c->st[w->path[d]].run = (uint8_t)run;
	return run;
}

/* Node c (at depth d) is taken; where every token below it goes on with
 * string characters only and the state loops on them, or takes a run of
 * them as long as the longest token below, they are all allowed without
 * walking. States first met deeper than LOOP_DEPTH are not checked (a
 * check costs some 70 parser steps), but a run found from above is used. */
static bool loops_below(struct walk *w, const struct gm_node *c, size_t d)
{
	size_t at = (size_t)(c - w->v->nodes);
	if (!w->v->plain_below[at])
		return false;
	struct st *st = &w->c->st[w->path[d]];
	if (st->loop == LOOP_UNKNOWN && d <= LOOP_DEPTH) {
		if (!materialize(w, d))
			return false;
		loop_check(w, d);
		st = &w->c->st[w->path[d]];
	}
	if (st->loop != LOOP_YES) {
		int h = w->v->height[at];
		if (st->run == RUN_UNKNOWN && d <= LOOP_DEPTH && h <= RUN_MAX) {
			uint32_t s = w->path[d];
			if (!materialize(w, d))
				return false;
			run_of(w, d, RUN_MAX);
			w->path[d] = s;
			st = &w->c->st[s];
		}
		if (st->run == RUN_UNKNOWN || st->run < h)
			return false;
	}
	uint32_t from = c->tok + c->n_tok, to = w->v->sub_end[at];
	for (uint32_t i = from; i < to; i++) {
		int32_t id = w->toks[i];
		w->mask[id >> 5] |= 1u << (id & 31);
	}
	return true;
}

/* The root's items, its own origins as C_SELF, are exactly items (a
 * canon() of a set after it). */
static bool like_root(const struct gm_matcher *m, size_t base, const uint64_t *items, size_t n)
{
	uint64_t *o = malloc((n ? n : 1) * sizeof *o);
	size_t k = 0;
	bool same = o != NULL;
	for (size_t j = m->sets[base]; same && j < m->sets[base + 1]; j++) {
		uint32_t pos = m->it[j].pos, org = m->it[j].origin;
		if (gm_sym(m->g, pos) == GM_END)
			continue;
		if (k == n)
			same = false;
		else
			o[k++] = (uint64_t)code_pos(m, pos) << 32 | (org == base ? C_SELF : org);
	}
	if (same)
		k = sort_unique(o, k);
	if (same && k == n) {
		same = !memcmp(o, items, n * sizeof *o);
	} else {
		same = false;
	}
	free(o);
	return same;
}

#define ROOT_MAX_CANDS 16
#define ROOT_MAX_EXC 32

/* The root need not loop itself: its first characters are grouped by the
 * state they lead to. The most common one, reached by some ASCII
 * character, is S1 and must loop; the lead bytes of the other characters
 * are exceptions, their subtrees walked on their own. */
static void root_check(struct walk *w)
{
	struct gm_matcher *m = w->m;
	struct loop l = { .m = m, .base = w->base };
	struct cand {
		uint64_t *items;
		size_t n;
		int weight;
		int ascii; /* a one-byte character that leads to it, -1 if none */
	} cands[ROOT_MAX_CANDS];
	int nc = 0;
	int16_t lead[256]; /* candidate of each lead byte, -1: none */
	for (int b = 0; b < 256; b++)
		lead[b] = -1;
	for (int si = 0; si < GM_N_SHAPES && !m->oom; si++) {
		const struct gm_shape *sh = &gm_shapes[si];
		/* bytes scanned by the same items have the same outcome */
		uint8_t reps[256], grp[256];
		int16_t res_of[256];
		int nr = group_bytes(m, sh->lo[0], sh->hi[0], grp, reps);
		for (int r = 0; r < nr; r++) {
			int res = -1;
			if (push(m, reps[r])) {
				l.have = false;
				bool ok = shape_ok(&l, sh, 1);
				pop(m);
				for (int c = 0; ok && c < nc && res < 0; c++)
					if (cands[c].n == l.n_want && !memcmp(cands[c].items, l.want, l.n_want * sizeof *l.want))
						res = c;
				if (ok && res < 0 && nc < ROOT_MAX_CANDS) {
					uint64_t *it = malloc((l.n_want ? l.n_want : 1) * sizeof *it);
					if (it) {
						memcpy(it, l.want, l.n_want * sizeof *it);
						cands[nc] = (struct cand){ it, l.n_want, 0, -1 };
						res = nc++;
					}
				}
			}
			res_of[r] = (int16_t)res;
		}
		for (int b = sh->lo[0]; b <= sh->hi[0]; b++) {
			lead[b] = res_of[grp[b - sh->lo[0]]];
			if (lead[b] >= 0) {
				cands[lead[b]].weight++;
				if (sh->n == 1 && cands[lead[b]].ascii < 0)
					cands[lead[b]].ascii = b;
			}
		}
	}
	int best = -1;
	for (int c = 0; c < nc; c++)
		if (cands[c].ascii >= 0 && (best < 0 || cands[c].weight > cands[best].weight))
			best = c;
	uint64_t exc[4] = { 0 };
	int n_exc = 0;
	for (int si = 0; si < GM_N_SHAPES; si++)
		for (int b = gm_shapes[si].lo[0]; b <= gm_shapes[si].hi[0]; b++)
			if (lead[b] != best) {
				exc[b >> 6] |= 1ull << (b & 63);
				n_exc++;
			}
	uint32_t s1 = ST_DEAD, s2 = ST_DEAD;
	bool ok = best >= 0 && (n_exc == 0 || (n_exc <= ROOT_MAX_EXC && m->v->sub_end)) && !m->oom;
	if (ok)
		ok = push(m, (uint8_t)cands[best].ascii);
	if (ok) {
		/* S1 (at depth 1) takes every character to S2, and S2 to itself.
		 * Where the root is like S1 (inside a string) or S2 like S1
		 * (after the opening quote), what is shown for one holds for the
		 * other; but a root with exceptions shows nothing for S1. */
		s1 = intern(m, w->c, w->base + 1, w->base, w->path);
		w->path[1] = s1;
		l.anchor = w->base + 1;
		l.have = false;
		bool root_s1 = s1 != ST_DEAD && n_exc == 0 && like_root(m, w->base, cands[best].items, cands[best].n);
		if (s1 != ST_DEAD && (root_s1 || chars_ok(&l)) && push(m, gm_shapes[0].lo[0])) {
			bool s2_s1 = root_s1 || (l.n_want == cands[best].n &&
						 !memcmp(l.want, cands[best].items, l.n_want * sizeof *l.want));
			if (s2_s1 || chars_ok(&l))
				s2 = intern(m, w->c, w->base + 2, w->base, w->path);
			pop(m);
		}
		pop(m);
	}
	for (int c = 0; c < nc; c++)
		free(cands[c].items);
	free(l.want);
	free(l.tmp);
	struct st *r = &w->c->st[w->path[0]];
	r->rloop = s1 != ST_DEAD && s2 != ST_DEAD ? LOOP_YES : LOOP_NO;
	r->s1 = s1;
	r->s2 = s2;
	memcpy(r->exc, exc, sizeof exc);
}

/* Walk the root's subtrees of the exceptions' lead bytes afresh. */
static void root_exceptions(struct walk *w, const uint64_t *exc)
{
	const struct gm_vocab *v = w->v;
	const struct gm_node *root = &v->nodes[0];
	for (int i = 0; i < root->n_child && !w->m->oom; i++) {
		const struct gm_node *c = &v->nodes[root->child + i];
		if (!(exc[c->byte >> 6] >> (c->byte & 63) & 1))
			continue;
		for (uint32_t t = c->tok; t < v->sub_end[root->child + i]; t++) {
			int32_t id = v->toks[t];
			w->mask[id >> 5] &= ~(1u << (id & 31));
		}
		step(w, c, 0);
	}
}

void gm_matcher_slow(struct gm_matcher *m, bool slow)
{
	m->slow = slow;
}

/* The mask of a root that loops: the plain tokens, the head walked from
 * the root, the tails from S1 and S2, then the exceptions afresh. */
static void loop_mask(struct walk *w, size_t words)
{
	struct gm_matcher *m = w->m;
	const struct gm_vocab *v = w->v;
	memcpy(w->mask, v->plain, words * sizeof *w->mask);
	const struct gm_trie *tries[3] = { &v->head, &v->tail1, &v->tail2 };
	for (size_t d = 0; d < 3 && !m->oom; d++) {
		/* the walks write the path */
		w->path[1] = w->c->st[w->path[0]].s1;
		w->path[2] = w->c->st[w->path[0]].s2;
		w->nodes = tries[d]->nodes;
		w->toks = tries[d]->toks;
		walk(w, &w->nodes[0], d);
		while (m->n_sets - 1 > w->base)
			pop(m);
	}
	w->nodes = v->nodes;
	w->toks = v->toks;
	w->below = v->plain_below != NULL;
	uint64_t exc[4];
	memcpy(exc, w->c->st[w->path[0]].exc, sizeof exc); /* st may move */
	if ((exc[0] | exc[1] | exc[2] | exc[3]) && !m->oom)
		root_exceptions(w, exc);
}

/* ---- masks by content -------------------------------------------------
 *
 * A real set's code: its items that are not complete, each origin given by
 * that set's code (its own: C_SELF), sorted. Sets with equal codes parse
 * alike wherever they are, so a root's mask is kept by its code and the
 * same context later in the output (the same key in the next element of
 * an array) takes it without a walk. */

static bool grow(void **p, size_t *cap, size_t need, size_t el)
{
	if (need <= *cap)
		return true;
	size_t n = *cap ? *cap * 2 : 256;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * el);
	if (!q)
		return false;
	*p = q;
	*cap = n;
	return true;
}

static uint32_t codes_intern(struct codes *t, const uint64_t *it, uint32_t n)
{
	uint64_t h = n;
	for (uint32_t i = 0; i < n; i++)
		h = mix(h, it[i]);
	if ((t->n + 1) * 2 > t->icap) {
		uint32_t cap = t->icap ? t->icap * 2 : 1024;
		uint32_t *ix = calloc(cap, sizeof *ix);
		if (!ix)
			return SC_NONE;
		for (uint32_t c = 0; c < t->n; c++) {
			uint32_t i = (uint32_t)(t->hash[c] >> 32) & (cap - 1);
			while (ix[i])
				i = (i + 1) & (cap - 1);
			ix[i] = c + 1;
		}
		free(t->index);
		t->index = ix;
		t->icap = cap;
	}
	uint32_t i = (uint32_t)(h >> 32) & (t->icap - 1);
	for (; t->index[i]; i = (i + 1) & (t->icap - 1)) {
		uint32_t c = t->index[i] - 1;
		if (t->hash[c] == h && t->len[c] == n && (!n || !memcmp(t->items + t->off[c], it, n * sizeof *it)))
			return c;
	}
	size_t cap = t->cap, cap2 = t->cap, cap3 = t->cap, capi = t->cap_items;
	if (!grow((void **)&t->hash, &cap, t->n + 1, sizeof *t->hash) ||
	    !grow((void **)&t->off, &cap2, t->n + 1, sizeof *t->off) ||
	    !grow((void **)&t->len, &cap3, t->n + 1, sizeof *t->len) ||
	    !grow((void **)&t->items, &capi, t->n_items + n, sizeof *t->items))
		return SC_NONE;
	t->cap = (uint32_t)cap;
	t->cap_items = capi;
	t->hash[t->n] = h;
	t->off[t->n] = (uint32_t)t->n_items;
	t->len[t->n] = n;
	if (n) /* an empty set: items may still be NULL */
		memcpy(t->items + t->n_items, it, n * sizeof *it);
	t->n_items += n;
	t->index[i] = t->n + 1;
	return t->n++;
}

/* The code of real set k (its origins' first). */
static uint32_t set_code(struct gm_matcher *m, size_t k)
{
	if (m->scode[k] != SC_NONE)
		return m->scode[k];
	const struct gm_grammar *g = m->g;
	size_t from = m->sets[k], to = k + 1 < m->n_sets ? m->sets[k + 1] : m->n_it;
	for (size_t j = from; j < to; j++) {
		uint32_t o = m->it[j].origin;
		if (gm_sym(g, m->it[j].pos) != GM_END && o != k && set_code(m, o) == SC_NONE)
			return SC_NONE;
	}
	struct codes *t = &m->codes;
	if (!grow((void **)&t->tmp, &t->cap_tmp, to - from + 1, sizeof *t->tmp))
		return SC_NONE;
	uint32_t n = 0;
	for (size_t j = from; j < to; j++) {
		uint32_t pos = m->it[j].pos, o = m->it[j].origin;
		if (gm_sym(g, pos) != GM_END)
			t->tmp[n++] = (uint64_t)code_pos(m, pos) << 32 | (o == k ? C_SELF : m->scode[o]);
	}
	n = (uint32_t)sort_unique(t->tmp, n);
	return m->scode[k] = codes_intern(t, t->tmp, n);
}

static int mask_cached(const struct gm_matcher *m, uint32_t key)
{
	for (int i = 0; key != SC_NONE && i < m->n_masks; i++)
		if (m->mkey[i] == key)
			return i;
	return -1;
}

static void mask_keep(struct gm_matcher *m, uint32_t key, const uint32_t *mask, size_t words)
{
	if (key == SC_NONE || (!m->masks && !(m->masks = malloc(MASKS * words * sizeof *m->masks))))
		return;
	int i = m->next_mask;
	m->next_mask = (i + 1) % MASKS;
	if (m->n_masks < MASKS)
		m->n_masks++;
	m->mkey[i] = key;
	memcpy(m->masks + i * words, mask, words * sizeof *mask);
}

/* Tokens in a mask. Without -mpopcnt GCC calls a table lookup per word,
 * some 10 us a mask on 128k tokens: the instruction where there is one. */
#if defined(__x86_64__)
__attribute__((target("popcnt"))) static int count_popcnt(const uint32_t *mask, size_t words)
{
	int n = 0;
	for (size_t i = 0; i < words; i++)
		n += __builtin_popcount(mask[i]);
	return n;
}
#endif

static int mask_count(const uint32_t *mask, size_t words)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("popcnt"))
		return count_popcnt(mask, words);
#endif
	int n = 0;
	for (size_t i = 0; i < words; i++)
		n += __builtin_popcount(mask[i]);
	return n;
}

int gm_matcher_mask(struct gm_matcher *m, uint32_t *mask)
{
	const struct gm_vocab *v = m->v;
	struct stc *c = &m->cache;
	size_t words = ((size_t)v->n_vocab + 31) / 32;
	if (m->done) {
		memset(mask, 0, words * sizeof *mask);
		return 0;
	}
	if (c->n_items > ST_MAX_ITEMS)
		stc_clear(c);
	struct walk *w = malloc(sizeof *w);
	if (!w)
		return -1;
	*w = (struct walk){ .m = m, .v = v, .c = c, .mask = mask, .base = m->n_sets - 1,
			    .nodes = v->nodes, .toks = v->toks };
	uint32_t key = m->slow ? SC_NONE : set_code(m, w->base);
	int hit = mask_cached(m, key);
	if (hit >= 0) {
		memcpy(mask, m->masks + hit * words, words * sizeof *mask);
	} else if ((w->path[0] = intern(m, c, w->base, w->base, w->path)) != ST_DEAD && !m->oom) {
		bool fast = !m->slow && v->plain;
		if (fast && c->st[w->path[0]].rloop == LOOP_UNKNOWN)
			root_check(w);
		if (fast && !m->oom && c->st[w->path[0]].rloop == LOOP_YES) {
			loop_mask(w, words);
		} else {
			memset(mask, 0, words * sizeof *mask);
			w->below = fast && v->plain_below;
			walk(w, &v->nodes[0], 0);
		}
		while (m->n_sets - 1 > w->base)
			pop(m);
		if (w->base > m->cache_hi)
			m->cache_hi = w->base;
		if (!m->oom)
			mask_keep(m, key, mask, words);
	}
	free(w);
	if (m->oom) {
		m->oom = false;
		return -1;
	}
	int count = mask_count(mask, words);
	if (gm_matcher_is_complete(m))
		for (int i = 0; i < v->n_eog; i++) {
			int32_t id = v->eog_ids[i];
			count += !(mask[id >> 5] >> (id & 31) & 1);
			mask[id >> 5] |= 1u << (id & 31);
		}
	return count;
}
