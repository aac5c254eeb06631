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
};

static bool hash_grow(struct gm_matcher *m);

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

static void closure(struct gm_matcher *m, uint32_t k)
{
	const struct gm_grammar *g = m->g;
	for (size_t i = m->sets[k]; i < m->n_it && !m->oom; i++) {
		struct gm_item x = m->it[i];
		int32_t sym = g->rhs[x.pos];
		if (sym == GM_END) {
			if (x.origin == k)
				continue;
			int32_t lhs = g->pos_lhs[x.pos];
			size_t end = m->sets[x.origin + 1];
			for (size_t j = m->sets[x.origin]; j < end; j++)
				if (g->rhs[m->it[j].pos] == lhs)
					add(m, m->it[j].pos + 1, m->it[j].origin);
		} else if (sym >= 0) {
			for (uint32_t p = g->nt_prods[sym]; p < g->nt_prods[sym + 1]; p++)
				add(m, g->prod_pos[p], k);
			if (g->nullable[sym])
				add(m, x.pos + 1, x.origin);
		}
	}
}

static bool set_push(struct gm_matcher *m)
{
	if (m->n_sets == m->cap_sets) {
		uint32_t *n = realloc(m->sets, m->cap_sets * 2 * sizeof *n);
		if (!n) {
			m->oom = true;
			return false;
		}
		m->sets = n;
		m->cap_sets *= 2;
	}
	m->sets[m->n_sets++] = (uint32_t)m->n_it;
	new_gen(m);
	return true;
}

static inline void pop(struct gm_matcher *m)
{
	m->n_it = m->sets[--m->n_sets];
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
		int32_t sym = g->rhs[m->it[j].pos];
		if (sym < 0 && sym != GM_END && (g->terms[GM_TIDX(sym)][w] & bit))
			add(m, m->it[j].pos + 1, m->it[j].origin);
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

static void allowed_bytes(const struct gm_matcher *m, uint64_t out[4])
{
	const struct gm_grammar *g = m->g;
	out[0] = out[1] = out[2] = out[3] = 0;
	for (size_t j = m->sets[m->n_sets - 1]; j < m->n_it; j++) {
		int32_t sym = g->rhs[m->it[j].pos];
		if (sym < 0 && sym != GM_END) {
			const uint64_t *t = g->terms[GM_TIDX(sym)];
			out[0] |= t[0];
			out[1] |= t[1];
			out[2] |= t[2];
			out[3] |= t[3];
		}
	}
}

struct gm_matcher *gm_matcher_new(const struct gm_grammar *g, const struct gm_vocab *v)
{
	struct gm_matcher *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->g = g;
	m->v = v;
	m->cap_it = 256;
	m->cap_sets = 256;
	m->hcap = 256;
	m->it = malloc(m->cap_it * sizeof *m->it);
	m->sets = malloc(m->cap_sets * sizeof *m->sets);
	m->hkey = malloc(m->hcap * sizeof *m->hkey);
	m->hgen = calloc(m->hcap, sizeof *m->hgen);
	if (!m->it || !m->sets || !m->hkey || !m->hgen)
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
	free(m->hkey);
	free(m->hgen);
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

struct walk {
	struct gm_matcher *m;
	const struct gm_vocab *v;
	uint32_t *mask;
	int count;
};

static void walk(struct walk *w, const struct gm_node *n)
{
	uint64_t ok[4];
	allowed_bytes(w->m, ok);
	const struct gm_node *c = &w->v->nodes[n->child];
	for (int i = 0; i < n->n_child; i++, c++) {
		if (!(ok[c->byte >> 6] >> (c->byte & 63) & 1))
			continue;
		for (int t = 0; t < c->n_tok; t++) {
			int32_t id = w->v->toks[c->tok + t];
			w->mask[id >> 5] |= 1u << (id & 31);
		}
		w->count += c->n_tok;
		if (c->n_child && push(w->m, c->byte)) {
			walk(w, c);
			pop(w->m);
		}
	}
}

int gm_matcher_mask(struct gm_matcher *m, uint32_t *mask)
{
	const struct gm_vocab *v = m->v;
	memset(mask, 0, ((size_t)v->n_vocab + 31) / 32 * sizeof *mask);
	if (m->done)
		return 0;
	struct walk w = { m, v, mask, 0 };
	walk(&w, &v->nodes[0]);
	if (m->oom) {
		m->oom = false;
		return -1;
	}
	if (gm_matcher_is_complete(m))
		for (int i = 0; i < v->n_eog; i++) {
			int32_t id = v->eog_ids[i];
			mask[id >> 5] |= 1u << (id & 31);
			w.count++;
		}
	return w.count;
}
