/* daemon/grammar/mask.c — the mask: a walk of the vocabulary's trie that
 * pushes one Earley set per trie edge and prunes every subtree whose first
 * byte the parser cannot take, with a cache of the sets it meets as
 * states, and masks kept by their root's content. */
#include "daemon/grammar/match_int.h"

#include <string.h>

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

void gmm_stc_clear(struct stc *c)
{
	c->n_items = 0;
	c->n_st = 0;
	c->tn = 0;
	c->n_grp = 0;
	c->n_rows = 0;
	if (c->index)
		memset(c->index, 0, c->icap * sizeof *c->index);
	if (c->tkey)
		memset(c->tkey, 0, c->tcap * sizeof *c->tkey);
}

void gmm_stc_free(struct stc *c)
{
	free(c->pos);
	free(c->code);
	free(c->st);
	free(c->index);
	free(c->tkey);
	free(c->tval);
	free(c->grp);
	free(c->rows);
	memset(c, 0, sizeof *c);
}

static uint64_t mix(uint64_t h, uint64_t x)
{
	h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

/* Open addressing by a hash's high half: val (an index + 1) into ix. */
static void index_put(uint32_t *ix, uint32_t cap, uint64_t hash, uint32_t val)
{
	uint32_t i = (uint32_t)(hash >> 32) & (cap - 1);
	while (ix[i])
		i = (i + 1) & (cap - 1);
	ix[i] = val;
}

static bool index_grow(struct stc *c)
{
	uint32_t cap = c->icap ? c->icap * 2 : 1024;
	uint32_t *ix = calloc(cap, sizeof *ix);
	if (!ix)
		return false;
	for (uint32_t s = 0; s < c->n_st; s++)
		index_put(ix, cap, c->st[s].hash, s + 1);
	free(c->index);
	c->index = ix;
	c->icap = cap;
	return true;
}

/* The state of set k, at or below the walk's root b (path: states by depth). */
uint32_t gmm_intern(struct gm_matcher *m, struct stc *c, size_t k, size_t b, const uint32_t *path)
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
	st->run_cut = false;
	st->one = false;
	st->grp = GRP_NONE;
	st->misses = 0;
	st->hot = 0;
	st->row = ROW_NONE;
	st->rloop = LOOP_UNKNOWN;
	st->uyes = 0;
	st->uno = UINT8_MAX;
	st->uwip = 0;
	st->utent = false;
	st->cls_known = false;
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
		pp[st->n] = gmm_code_pos(m, pos);
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

/* Where key is in a transition table of cap (a power of two) slots, or
 * the empty slot it would take. */
static uint32_t tprobe(const uint64_t *keys, uint32_t cap, uint64_t key)
{
	uint32_t j = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
	while (keys[j] && keys[j] != key)
		j = (j + 1) & (cap - 1);
	return j;
}

static uint64_t tkey(uint32_t s, uint8_t byte)
{
	return ((uint64_t)s << 8 | byte) + 1;
}

/* The transition (s, byte) if known, NULL if not. */
static const uint32_t *tfind(const struct stc *c, uint32_t s, uint8_t byte)
{
	if (!c->tcap)
		return NULL;
	uint64_t key = tkey(s, byte);
	uint32_t j = tprobe(c->tkey, c->tcap, key);
	return c->tkey[j] == key ? &c->tval[j] : NULL;
}

/* The slot of transition (s, byte), made if new (*found false). It stays
 * put until the next new one. */
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
				uint32_t j = tprobe(k, cap, c->tkey[i]);
				k[j] = c->tkey[i];
				v[j] = c->tval[i];
			}
		free(c->tkey);
		free(c->tval);
		c->tkey = k;
		c->tval = v;
		c->tcap = cap;
	}
	uint64_t key = tkey(s, byte);
	uint32_t j = tprobe(c->tkey, c->tcap, key);
	*found = c->tkey[j] == key;
	if (!*found) {
		c->tkey[j] = key;
		c->tn++;
	}
	return &c->tval[j];
}

/* Build the real sets of the path down to depth d from their states. */
bool gmm_materialize(struct walk *w, size_t d)
{
	struct gm_matcher *m = w->m;
	for (size_t i = m->n_sets - 1 - w->base + 1; i <= d; i++) {
		if (!gmm_set_push(m))
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
		m->work += st->n;
	}
	return true;
}

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

/* Give the state at depth d (its set the last) its bytes' representatives. */
static bool grp_make(struct walk *w, size_t d)
{
	struct stc *c = w->c;
	if (!gm_grow((void **)&c->grp, &c->cap_grp, c->n_grp + 256, 1))
		return false;
	byte_reps(w->m, c->grp + c->n_grp);
	c->st[w->path[d]].grp = (uint32_t)c->n_grp;
	c->n_grp += 256;
	return true;
}

/* Bytes scanned by the same items of a set lead to the same next set: the
 * byte whose transition stands for this one from the state at depth d (its
 * set the last). Worked out from a state's second new transition on. */
static uint8_t byte_rep(struct walk *w, size_t d, uint8_t byte)
{
	struct st *st = &w->c->st[w->path[d]];
	if (st->grp == GRP_NONE) {
		if (st->misses < 2) {
			st->misses++;
			return byte;
		}
		if (!grp_make(w, d))
			return byte;
	}
	return w->c->grp[w->c->st[w->path[d]].grp + byte];
}

/* Where the representatives of the state at depth d start in stc.grp,
 * GRP_NONE on OOM. */
uint32_t gmm_reps(struct walk *w, size_t d)
{
	if (w->c->st[w->path[d]].grp == GRP_NONE) {
		gmm_pop_to(w, d);
		if (!gmm_materialize(w, d) || !grp_make(w, d))
			return GRP_NONE;
	}
	return w->c->st[w->path[d]].grp;
}

/* Give state s a row once it is hot; false if it has none. */
static bool row_of(struct stc *c, uint32_t s)
{
	struct st *st = &c->st[s];
	if (st->row != ROW_NONE)
		return true;
	if (++st->hot < ROW_HOT || c->n_rows == ROW_MAX ||
	    !gm_grow((void **)&c->rows, &c->cap_rows, (c->n_rows + 1) * 256, sizeof *c->rows))
		return false;
	for (int b = 0; b < 256; b++)
		c->rows[c->n_rows * 256 + b] = ROW_UNKNOWN;
	st->row = (uint32_t)c->n_rows++;
	return true;
}

/* The state after byte from the state at depth d: known, or built from
 * the path's real sets (materialized down to d). ST_DEAD if none. */
uint32_t gmm_trans(struct walk *w, size_t d, uint8_t byte)
{
	struct gm_matcher *m = w->m;
	struct stc *c = w->c;
	uint32_t s = w->path[d];
	bool row = row_of(c, s);
	size_t cell = row ? (size_t)c->st[s].row * 256 + byte : 0; /* in c->rows, which may move */
	if (row && c->rows[cell] != ROW_UNKNOWN)
		return c->rows[cell];
	bool found;
	uint32_t *slot = tslot(m, c, s, byte, &found);
	if (!slot)
		return ST_DEAD;
	uint32_t next = found ? *slot : ST_DEAD, tcap = c->tcap;
	if (!found) {
		gmm_pop_to(w, d);
		if (gmm_materialize(w, d)) {
			uint8_t rep = byte_rep(w, d, byte);
			const uint32_t *known = rep != byte ? tfind(c, s, rep) : NULL;
			if (known)
				next = *known;
			else if (gmm_push(m, byte))
				next = gmm_intern(m, c, m->n_sets - 1, w->base, w->path);
		}
		if (c->tcap != tcap) /* the table grew on the way: the slot moved */
			slot = tslot(m, c, s, byte, &found);
		if (slot)
			*slot = next;
	}
	if (row && !m->oom)
		c->rows[cell] = next;
	return next;
}

/* Take node c from depth d if its byte is allowed there, and walk on. */
void gmm_step(struct walk *w, const struct gm_node *c, size_t d)
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
	uint32_t next = gmm_trans(w, d, c->byte);
	if (next != ST_DEAD && !m->oom) {
		w->path[d + 1] = next;
		w->bytes[d] = c->byte;
		if (!w->below || !gmm_loops_below(w, c, d + 1))
			gmm_walk(w, c, d + 1);
	}
	gmm_pop_to(w, d);
}

void gmm_walk(struct walk *w, const struct gm_node *n, size_t d)
{
	const struct gm_node *c = &w->nodes[n->child];
	for (int i = 0; i < n->n_child && !w->m->oom; i++, c++)
		gmm_step(w, c, d);
}

void gm_matcher_slow(struct gm_matcher *m, bool slow)
{
	m->slow = slow;
}

/* ---- masks by content -------------------------------------------------
 *
 * A real set's code: its items that are not complete, each origin given by
 * that set's code (its own: C_SELF), sorted. Sets with equal codes parse
 * alike wherever they are, so a root's mask is kept by its code and the
 * same context later in the output (the same key in the next element of
 * an array) takes it without a walk. */

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
		for (uint32_t c = 0; c < t->n; c++)
			index_put(ix, cap, t->hash[c], c + 1);
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
	if (!gm_grow((void **)&t->hash, &cap, t->n + 1, sizeof *t->hash) ||
	    !gm_grow((void **)&t->off, &cap2, t->n + 1, sizeof *t->off) ||
	    !gm_grow((void **)&t->len, &cap3, t->n + 1, sizeof *t->len) ||
	    !gm_grow((void **)&t->items, &capi, t->n_items + n, sizeof *t->items))
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
	if (!gm_grow((void **)&t->tmp, &t->cap_tmp, to - from + 1, sizeof *t->tmp))
		return SC_NONE;
	uint32_t n = 0;
	for (size_t j = from; j < to; j++) {
		uint32_t pos = m->it[j].pos, o = m->it[j].origin;
		if (gm_sym(g, pos) != GM_END)
			t->tmp[n++] = (uint64_t)gmm_code_pos(m, pos) << 32 | (o == k ? C_SELF : m->scode[o]);
	}
	n = (uint32_t)gmm_sort_unique(t->tmp, n);
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
static inline __attribute__((always_inline)) int count_words(const uint32_t *mask, size_t words)
{
	int n = 0;
	for (size_t i = 0; i < words; i++)
		n += __builtin_popcount(mask[i]);
	return n;
}

#if defined(__x86_64__)
__attribute__((target("popcnt"))) static int count_popcnt(const uint32_t *mask, size_t words)
{
	return count_words(mask, words);
}
#endif

static int mask_count(const uint32_t *mask, size_t words)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("popcnt"))
		return count_popcnt(mask, words);
#endif
	return count_words(mask, words);
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
		gmm_stc_clear(c);
	struct walk *w = malloc(sizeof *w);
	if (!w)
		return -1;
	*w = (struct walk){ .m = m, .v = v, .c = c, .mask = mask, .base = m->n_sets - 1,
			    .nodes = v->nodes, .toks = v->toks };
	uint32_t key = m->slow ? SC_NONE : set_code(m, w->base);
	int hit = mask_cached(m, key);
	if (hit >= 0) {
		memcpy(mask, m->masks + hit * words, words * sizeof *mask);
	} else if ((w->path[0] = gmm_intern(m, c, w->base, w->base, w->path)) != ST_DEAD && !m->oom) {
		bool fast = !m->slow && v->plain;
		if (fast && c->st[w->path[0]].rloop == LOOP_UNKNOWN)
			gmm_root_check(w);
		if (fast && !m->oom && c->st[w->path[0]].rloop == LOOP_YES) {
			gmm_loop_mask(w, words);
		} else {
			w->below = fast && v->plain_below;
			w->univ_root = w->below && gmm_univ_root(w);
			if (w->univ_root)
				memcpy(mask, v->plain, words * sizeof *mask);
			else
				memset(mask, 0, words * sizeof *mask);
			gmm_walk(w, &v->nodes[0], 0);
		}
		gmm_pop_to(w, 0);
		if (w->base > m->cache_hi)
			m->cache_hi = w->base;
		if (!m->oom)
			mask_keep(m, key, mask, words);
	}
	free(w);
	if (m->oom) { /* a transition may be left half made: forget them all */
		gmm_stc_clear(c);
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
