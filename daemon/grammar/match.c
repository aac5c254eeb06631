/* daemon/grammar/match.c — the Earley matcher over bytes.
 *
 * Sets live on one stack of items; rolling back is truncating it. Nullable
 * nonterminals are advanced over when predicted (Aycock and Horspool), so
 * completion never has to look at the set it is building. The mask walk
 * is mask.c and loop.c. */
#include "daemon/grammar/match_int.h"

#include <string.h>

static bool hash_grow(struct gm_matcher *m);

/* Position pos as states are compared: a counter's count at least the
 * longest token from its bounds as GM_VFAR or GM_VLOW. No walk from there
 * reaches a bound (each counted symbol takes a byte), and what a walk
 * finds out from such a state (that it loops, or takes a run) is used
 * only for the tokens below it. */
uint32_t gmm_code_pos(const struct gm_matcher *m, uint32_t pos)
{
	uint32_t n = pos & GM_VCOUNT;
	if (!(pos & GM_VPOS) || n >= GM_VLOW)
		return pos;
	const struct gm_cnt *c = gm_cnt_of(m->g, pos);
	uint32_t r = m->v->max_len;
	if (c->max != GM_CNT_INF && (c->max < r || n > c->max - r))
		return pos;
	if (n >= c->min)
		return (pos & ~GM_VCOUNT) | GM_VFAR;
	return c->min - n >= r ? (pos & ~GM_VCOUNT) | GM_VLOW : pos;
}

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
 * into the set takes a binary search, not a pass over every item; and
 * its items before a terminal, in order: scanning a byte from it passes
 * over those only. Built the first time either is needed, dropped with
 * the set. */
struct byn {
	uint32_t n, n_scan; /* it[0..n): by nonterminal; it[n..n + n_scan): terminals */
	struct byn_item {
		int32_t sym;
		uint32_t pos, origin;
	} it[];
};

#define BYN_MIN 48 /* smaller sets are scanned */

/* Sort keys k (each with payload v[i] where v is not NULL) stably: LSD
 * radix, 11 bits a pass, a pass skipped where every key has the same
 * digit. A large set's sort went mostly to qsort's callbacks. False on
 * OOM (k and v as they were). */
static bool radix_sort(uint64_t *k, uint32_t *v, size_t n)
{
	if (n < 32) { /* insertion: stable, and cheaper at this size */
		for (size_t i = 1; i < n; i++) {
			uint64_t x = k[i];
			uint32_t y = v ? v[i] : 0;
			size_t j = i;
			for (; j > 0 && k[j - 1] > x; j--) {
				k[j] = k[j - 1];
				if (v)
					v[j] = v[j - 1];
			}
			k[j] = x;
			if (v)
				v[j] = y;
		}
		return true;
	}
	uint64_t *k2 = malloc(n * sizeof *k2), all = ~0ull, any = 0;
	uint32_t *v2 = v ? malloc(n * sizeof *v2) : NULL;
	if (!k2 || (v && !v2)) {
		free(k2);
		free(v2);
		return false;
	}
	for (size_t i = 0; i < n; i++)
		all &= k[i], any |= k[i];
	uint64_t *ks = k, *kd = k2;
	uint32_t *vs = v, *vd = v2;
	for (int shift = 0; shift < 64; shift += 11) {
		if (!((all ^ any) >> shift & 0x7FF))
			continue;
		uint32_t at[2048] = { 0 };
		for (size_t i = 0; i < n; i++)
			at[ks[i] >> shift & 0x7FF]++;
		for (uint32_t d = 0, sum = 0; d < 2048; d++) {
			uint32_t c = at[d];
			at[d] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++) {
			uint32_t j = at[ks[i] >> shift & 0x7FF]++;
			kd[j] = ks[i];
			if (v)
				vd[j] = vs[i];
		}
		uint64_t *tk = ks;
		ks = kd, kd = tk;
		uint32_t *tv = vs;
		vs = vd, vd = tv;
	}
	if (ks != k) {
		memcpy(k, ks, n * sizeof *k);
		if (v)
			memcpy(v, vs, n * sizeof *v);
	}
	free(k2);
	free(v2);
	return true;
}

static struct byn *byn_build(struct gm_matcher *m, size_t o)
{
	size_t from = m->sets[o], to = m->sets[o + 1], n = 0;
	struct byn *b = malloc(sizeof *b + (to - from) * sizeof b->it[0]);
	uint64_t *key = malloc((to - from + 1) * sizeof *key);
	uint32_t *org = malloc((to - from + 1) * sizeof *org);
	if (!b || !key || !org) {
		free(b), free(key), free(org);
		return NULL;
	}
	for (size_t j = from; j < to; j++) {
		int32_t sym = gm_sym(m->g, m->it[j].pos);
		if (sym >= 0) {
			key[n] = (uint64_t)sym << 32 | m->it[j].pos;
			org[n++] = m->it[j].origin;
		}
	}
	if (!radix_sort(key, org, n)) {
		free(b), free(key), free(org);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		b->it[i] = (struct byn_item){ (int32_t)(key[i] >> 32), (uint32_t)key[i], org[i] };
	b->n = (uint32_t)n;
	b->n_scan = 0;
	for (size_t j = from; j < to; j++) {
		int32_t sym = gm_sym(m->g, m->it[j].pos);
		if (sym < 0 && sym != GM_END)
			b->it[n + b->n_scan++] = (struct byn_item){ sym, m->it[j].pos, m->it[j].origin };
	}
	free(key);
	free(org);
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

bool gmm_set_push(struct gm_matcher *m)
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

/* Scan byte c from the last set into a new one: false if none takes it. */
bool gmm_push(struct gm_matcher *m, uint8_t c)
{
	const struct gm_grammar *g = m->g;
	size_t k = m->n_sets - 1, from = m->sets[k], to = m->n_it;
	if (!gmm_set_push(m))
		return false;
	uint64_t bit = 1ull << (c & 63);
	int w = c >> 6;
	if (m->byn[k] || (to - from >= 4 * BYN_MIN && (m->byn[k] = byn_build(m, k)))) {
		const struct byn *b = m->byn[k];
		for (uint32_t i = b->n; i < b->n + b->n_scan; i++)
			if (g->terms[GM_TIDX(b->it[i].sym)][w] & bit)
				add(m, gm_next(g, b->it[i].pos), b->it[i].origin);
	} else {
		for (size_t j = from; j < to; j++) {
			int32_t sym = gm_sym(g, m->it[j].pos);
			if (sym < 0 && sym != GM_END && (g->terms[GM_TIDX(sym)][w] & bit))
				add(m, gm_next(g, m->it[j].pos), m->it[j].origin);
		}
	}
	if (m->n_it == m->sets[m->n_sets - 1] || m->oom) {
		gmm_pop(m);
		return false;
	}
	closure(m, (uint32_t)m->n_sets - 1);
	if (m->oom) {
		gmm_pop(m);
		return false;
	}
	m->work += m->n_it - m->sets[m->n_sets - 1];
	return true;
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
	m->scode = malloc(m->cap_sets * sizeof *m->scode);
	m->byn = malloc(m->cap_sets * sizeof *m->byn);
	m->hkey = malloc(m->hcap * sizeof *m->hkey);
	m->hgen = calloc(m->hcap, sizeof *m->hgen);
	if (!m->it || !m->sets || !m->scode || !m->byn || !m->hkey || !m->hgen)
		goto fail;
	gmm_set_push(m);
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
	gmm_stc_free(&m->cache);
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
		gmm_stc_clear(&m->cache);
		m->cache_hi = 0;
	}
	while (m->n_sets - 1 > pos)
		gmm_pop(m);
}

int gm_matcher_accept_bytes(struct gm_matcher *m, const char *s, size_t n)
{
	size_t at = gm_matcher_pos(m);
	if (m->done && n)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!gmm_push(m, (uint8_t)s[i])) {
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

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

size_t gmm_sort_unique(uint64_t *a, size_t n)
{
	if (!radix_sort(a, NULL, n))
		qsort(a, n, sizeof *a, cmp_u64);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!k || a[i] != a[k - 1])
			a[k++] = a[i];
	return k;
}
