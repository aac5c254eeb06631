/* daemon/grammar/ir.c — building the byte-level grammar: nonterminals,
 * productions, byte-set terminals, repetition, UTF-8 code point ranges. */
#include "daemon/grammar/gm_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gmb_init(struct gm_b *b, char *err, size_t errlen)
{
	memset(b, 0, sizeof *b);
	b->err = err;
	b->errlen = errlen;
	if (errlen)
		err[0] = 0;
}

void gmb_free(struct gm_b *b)
{
	free(b->prods);
	free(b->syms);
	free(b->terms);
	free(b->cnts);
	b->prods = NULL;
	b->syms = NULL;
	b->terms = NULL;
	b->cnts = NULL;
}

void gmb_fail(struct gm_b *b, const char *fmt, ...)
{
	if (b->failed)
		return;
	b->failed = true;
	if (b->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(b->err, b->errlen, fmt, ap);
		va_end(ap);
	}
}

bool gm_grow(void **p, size_t *cap, size_t need, size_t el)
{
	if (need <= *cap)
		return true;
	size_t n = *cap ? *cap * 2 : 64;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * el);
	if (!q)
		return false;
	*p = q;
	*cap = n;
	return true;
}

static bool grow(struct gm_b *b, void **p, size_t *cap, size_t need, size_t el)
{
	if (gm_grow(p, cap, need, el))
		return true;
	gmb_fail(b, "out of memory");
	return false;
}

int32_t gmb_nt(struct gm_b *b)
{
	if (b->n_nt >= INT32_MAX / 2) {
		gmb_fail(b, "grammar too large");
		return 0;
	}
	return b->n_nt++;
}

void gmb_prod(struct gm_b *b, int32_t nt, const int32_t *syms, int n)
{
	if (b->failed)
		return;
	if (b->n_syms + n + 1 > GM_MAX_SYMS) {
		gmb_fail(b, "grammar too large (more than %u symbols)", GM_MAX_SYMS);
		return;
	}
	if (!grow(b, (void **)&b->syms, &b->cap_syms, b->n_syms + n + 1,
		  sizeof *b->syms) ||
	    !grow(b, (void **)&b->prods, &b->cap_prods, b->n_prods + 1, sizeof *b->prods))
		return;
	b->prods[b->n_prods].lhs = nt;
	b->prods[b->n_prods].pos = (uint32_t)b->n_syms;
	b->n_prods++;
	if (n)
		memcpy(b->syms + b->n_syms, syms, n * sizeof *syms);
	b->n_syms += n;
	b->syms[b->n_syms++] = GM_END;
}

int32_t gmb_set(struct gm_b *b, const uint64_t set[4])
{
	if (b->failed)
		return 0;
	size_t cap = b->cap_terms;
	if (!grow(b, (void **)&b->terms, &cap, b->n_terms + 1, sizeof *b->terms))
		return 0;
	b->cap_terms = (int)cap;
	memcpy(b->terms[b->n_terms], set, sizeof b->terms[0]);
	return GM_TERM(b->n_terms++);
}

int32_t gmb_byte(struct gm_b *b, uint8_t c)
{
	if (b->byte_term[c])
		return b->byte_term[c];
	uint64_t s[4] = { 0 };
	s[c >> 6] |= 1ull << (c & 63);
	int32_t t = gmb_set(b, s);
	if (!b->failed)
		b->byte_term[c] = t;
	return t;
}

int32_t gmb_bytes(struct gm_b *b, uint8_t lo, uint8_t hi)
{
	if (lo == hi)
		return gmb_byte(b, lo);
	uint64_t s[4] = { 0 };
	for (int c = lo; c <= hi; c++)
		s[c >> 6] |= 1ull << (c & 63);
	return gmb_set(b, s);
}

int32_t gmb_seq(struct gm_b *b, const int32_t *syms, int n)
{
	if (n == 1)
		return syms[0];
	int32_t nt = gmb_nt(b);
	gmb_prod(b, nt, syms, n);
	return nt;
}

int32_t gmb_alt(struct gm_b *b, const int32_t *syms, int n)
{
	if (n == 1)
		return syms[0];
	int32_t nt = gmb_nt(b);
	for (int i = 0; i < n; i++)
		gmb_prod(b, nt, &syms[i], 1);
	return nt;
}

int32_t gmb_eps(struct gm_b *b)
{
	int32_t nt = gmb_nt(b);
	gmb_prod(b, nt, NULL, 0);
	return nt;
}

int32_t gmb_none(struct gm_b *b)
{
	return gmb_nt(b);
}

int32_t gmb_lit(struct gm_b *b, const char *s, size_t n)
{
	if (n == 0)
		return gmb_eps(b);
	if (n > GM_MAX_SYMS) {
		gmb_fail(b, "grammar too large");
		return 0;
	}
	int32_t *v = malloc(n * sizeof *v);
	if (!v) {
		gmb_fail(b, "out of memory");
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		v[i] = gmb_byte(b, (uint8_t)s[i]);
	int32_t r = gmb_seq(b, v, (int)n);
	free(v);
	return r;
}

/* sym repeated 0..n times. A plain right-recursive chain (O_k -> eps |
 * sym O_k-1) leaves one completed item per repetition read in every
 * later Earley set, since each tail is nullable: sets grow with the
 * count. Above REP_CHAIN the count is split in blocks of about sqrt(n):
 * T_i -> P | F T_i-1, with P up to a block less one and F a whole block
 * (flat), so a set holds about 2 sqrt(n) such items (less, since P is
 * split the same way). */
#define REP_CHAIN 16

static int32_t rep_upto(struct gm_b *b, int32_t sym, long n)
{
	int32_t tail;
	if (n <= REP_CHAIN) {
		tail = gmb_eps(b);
		for (long k = 0; k < n && !b->failed; k++) {
			int32_t o = gmb_nt(b), two[2] = { sym, tail };
			gmb_prod(b, o, NULL, 0);
			gmb_prod(b, o, two, 2);
			tail = o;
		}
		return tail;
	}
	long bs = 1;
	while (bs * bs < n)
		bs++;
	int32_t *v = calloc((size_t)bs, sizeof *v); /* calloc: GCC with ASan thinks malloc'd v read unset */
	if (!v) {
		gmb_fail(b, "out of memory");
		return 0;
	}
	for (long i = 0; i < bs; i++)
		v[i] = sym;
	int32_t whole = gmb_seq(b, v, (int)bs);
	free(v);
	int32_t part = rep_upto(b, sym, bs - 1);
	tail = rep_upto(b, sym, n % bs);
	for (long i = n / bs; i > 0 && !b->failed; i--) {
		int32_t t = gmb_nt(b), two[2] = { whole, tail };
		gmb_prod(b, t, &part, 1);
		gmb_prod(b, t, two, 2);
		tail = t;
	}
	return tail;
}

/* sym min..max times as a counter (gm_cnt), or 0 where the grammar has
 * as many as it can hold. */
static int32_t rep_count(struct gm_b *b, int32_t sym, uint32_t min, uint32_t max)
{
	if (b->failed || b->n_cnts >= GM_MAX_CNTS)
		return 0;
	if (!grow(b, (void **)&b->cnts, &b->cap_cnts, b->n_cnts + 1, sizeof *b->cnts) ||
	    !grow(b, (void **)&b->prods, &b->cap_prods, b->n_prods + 1, sizeof *b->prods))
		return 0;
	int32_t nt = gmb_nt(b);
	b->cnts[b->n_cnts] = (struct gm_cnt){ nt, sym, min, max };
	b->prods[b->n_prods].lhs = nt;
	b->prods[b->n_prods].pos = GM_VPOS | (uint32_t)b->n_cnts << GM_VID_SHIFT;
	b->n_prods++;
	b->n_cnts++;
	return nt;
}

/* Unbounded repetition is left-recursive (S -> S x | eps): Earley then
 * keeps a constant number of items per byte, where right recursion would
 * grow them with the length. */
int32_t gmb_rep(struct gm_b *b, int32_t sym, long min, long max)
{
	if (min < 0 || (max >= 0 && max < min) || min > (long)GM_MAX_SYMS ||
	    (max >= 0 && max > (long)GM_MAX_SYMS)) {
		gmb_fail(b, "bad repetition {%ld,%ld}", min, max);
		return 0;
	}
	if (min == 1 && max == 1)
		return sym;
	/* large counts count: one item a set, and a state for far counts */
	if ((max > REP_CHAIN && max < (long)GM_CNT_MAX) || (max < 0 && min > REP_CHAIN && min < (long)GM_CNT_MAX)) {
		int32_t nt = rep_count(b, sym, (uint32_t)min, max < 0 ? GM_CNT_INF : (uint32_t)max);
		if (nt || b->failed)
			return nt;
	}
	int32_t tail;
	if (max < 0) {
		tail = gmb_nt(b);
		int32_t two[2] = { tail, sym };
		gmb_prod(b, tail, NULL, 0);
		gmb_prod(b, tail, two, 2);
	} else {
		tail = rep_upto(b, sym, max - min);
	}
	if (min == 0)
		return tail;
	int32_t *v = malloc((min + 1) * sizeof *v);
	if (!v) {
		gmb_fail(b, "out of memory");
		return 0;
	}
	for (long i = 0; i < min; i++)
		v[i] = sym;
	v[min] = tail;
	int32_t nt = gmb_nt(b);
	gmb_prod(b, nt, v, (int)min + 1);
	free(v);
	return nt;
}

/* ---- code point sets ---------------------------------------------------- */

void cps_add(struct gm_cps *s, uint32_t lo, uint32_t hi)
{
	if (s->n < 0 || lo > hi)
		return;
	if (s->n == s->cap) {
		int cap = s->cap ? s->cap * 2 : 8;
		void *p = realloc(s->r, cap * sizeof *s->r);
		if (!p) {
			s->n = -1;
			return;
		}
		s->r = p;
		s->cap = cap;
	}
	s->r[s->n][0] = lo;
	s->r[s->n][1] = hi;
	s->n++;
}

static int cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

void cps_norm(struct gm_cps *s)
{
	if (s->n <= 0)
		return;
	qsort(s->r, s->n, sizeof *s->r, cmp_range);
	int m = 0;
	for (int i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[m][1] + 1) {
			if (s->r[i][1] > s->r[m][1])
				s->r[m][1] = s->r[i][1];
		} else {
			m++;
			s->r[m][0] = s->r[i][0];
			s->r[m][1] = s->r[i][1];
		}
	}
	s->n = m + 1;
}

void cps_negate(struct gm_cps *s)
{
	if (s->n < 0)
		return;
	cps_norm(s);
	struct gm_cps o = { 0 };
	uint32_t next = 0;
	for (int i = 0; i < s->n; i++) {
		if (s->r[i][0] > next)
			cps_add(&o, next, s->r[i][0] - 1);
		next = s->r[i][1] + 1;
	}
	if (next <= 0x10FFFF)
		cps_add(&o, next, 0x10FFFF);
	free(s->r);
	*s = o;
}

void cps_free(struct gm_cps *s)
{
	free(s->r);
	s->r = NULL;
	s->n = s->cap = 0;
}

bool cps_failed(const struct gm_cps *s)
{
	return s->n < 0;
}

/* ---- UTF-8 ranges: split [lo, hi] until each piece is a sequence of byte
 * ranges (as RE2 and regex-syntax's Utf8Sequences do). */

static int utf8_enc(uint32_t c, uint8_t *o)
{
	if (c < 0x80) {
		o[0] = c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = 0xC0 | c >> 6;
		o[1] = 0x80 | (c & 63);
		return 2;
	}
	if (c < 0x10000) {
		o[0] = 0xE0 | c >> 12;
		o[1] = 0x80 | (c >> 6 & 63);
		o[2] = 0x80 | (c & 63);
		return 3;
	}
	o[0] = 0xF0 | c >> 18;
	o[1] = 0x80 | (c >> 12 & 63);
	o[2] = 0x80 | (c >> 6 & 63);
	o[3] = 0x80 | (c & 63);
	return 4;
}

/* A code point range as UTF-8: one byte range per byte. */
struct u8seq {
	uint8_t n, lo[4], hi[4];
};

struct u8seqs {
	struct u8seq *s;
	size_t n, cap;
	bool oom;
};

static void utf8_split(struct u8seqs *out, uint32_t lo, uint32_t hi)
{
	static const uint32_t bound[] = { 0x7F, 0x7FF, 0xFFFF, 0x10FFFF };
	for (int i = 0; i < 3; i++)
		if (lo <= bound[i] && hi > bound[i]) {
			utf8_split(out, lo, bound[i]);
			utf8_split(out, bound[i] + 1, hi);
			return;
		}
	uint8_t a[4], z[4];
	int n = utf8_enc(lo, a);
	if (n > 1)
		for (int i = 1; i < n; i++) {
			uint32_t m = (1u << (6 * i)) - 1;
			if ((lo & ~m) != (hi & ~m)) {
				if (lo & m) {
					utf8_split(out, lo, lo | m);
					utf8_split(out, (lo | m) + 1, hi);
					return;
				}
				if ((hi & m) != m) {
					utf8_split(out, lo, (hi & ~m) - 1);
					utf8_split(out, hi & ~m, hi);
					return;
				}
			}
		}
	utf8_enc(hi, z);
	if (!gm_grow((void **)&out->s, &out->cap, out->n + 1, sizeof *out->s)) {
		out->oom = true;
		return;
	}
	struct u8seq *q = &out->s[out->n++];
	q->n = (uint8_t)n;
	memcpy(q->lo, a, n);
	memcpy(q->hi, z, n);
}

static int by_ranges(const void *x, const void *y)
{
	const struct u8seq *p = x, *q = y;
	for (int i = 0; i < 4 && i < p->n && i < q->n; i++) {
		if (p->lo[i] != q->lo[i])
			return p->lo[i] - q->lo[i];
		if (p->hi[i] != q->hi[i])
			return p->hi[i] - q->hi[i];
	}
	return p->n - q->n;
}

/* Sequences s[0..n) (sorted) from byte i on, those that share a byte range
 * there under one production: a set expecting the class then holds one
 * item per distinct first range, not one per range of code points. */
static int32_t factor(struct gm_b *b, const struct u8seq *s, size_t n, int i)
{
	int32_t nt = gmb_nt(b);
	for (size_t a = 0, e; a < n && !b->failed; a = e) {
		for (e = a + 1; e < n && s[e].lo[i] == s[a].lo[i] && s[e].hi[i] == s[a].hi[i]; e++)
			;
		int32_t seq[4];
		int k = 0;
		seq[k++] = gmb_bytes(b, s[a].lo[i], s[a].hi[i]);
		if (e - a == 1)
			for (int j = i + 1; j < s[a].n; j++)
				seq[k++] = gmb_bytes(b, s[a].lo[j], s[a].hi[j]);
		else if (s[a].n > i + 1)
			seq[k++] = factor(b, s + a, e - a, i + 1);
		gmb_prod(b, nt, seq, k);
	}
	return nt;
}

int32_t gmb_cps(struct gm_b *b, const uint32_t (*r)[2], int n)
{
	struct u8seqs q = { 0 };
	for (int i = 0; i < n; i++) {
		uint32_t lo = r[i][0], hi = r[i][1] > 0x10FFFF ? 0x10FFFF : r[i][1];
		/* surrogates are not characters: UTF-8 cannot carry them */
		if (lo <= 0xDFFF && hi >= 0xD800) {
			if (lo < 0xD800)
				utf8_split(&q, lo, 0xD7FF);
			if (hi > 0xDFFF)
				utf8_split(&q, 0xE000, hi);
		} else if (lo <= hi) {
			utf8_split(&q, lo, hi);
		}
	}
	int32_t alt = 0;
	if (q.oom) {
		gmb_fail(b, "out of memory");
	} else if (!q.n) {
		alt = gmb_nt(b); /* no production: matches nothing */
	} else {
		qsort(q.s, q.n, sizeof *q.s, by_ranges);
		alt = factor(b, q.s, q.n, 0);
	}
	free(q.s);
	return alt;
}

/* ---- finishing: group productions by left side, nullable set ------------ */

struct gm_grammar *gmb_finish(struct gm_b *b, int32_t start)
{
	if (b->failed)
		return NULL;
	/* the augmented production S' -> start */
	int32_t top = gmb_nt(b);
	gmb_prod(b, top, &start, 1);
	if (b->failed)
		return NULL;
	struct gm_grammar *g = calloc(1, sizeof *g);
	if (!g)
		goto oom;
	g->n_nt = b->n_nt;
	g->n_terms = b->n_terms;
	g->n_rhs = b->n_syms;
	g->rhs = b->syms;
	b->syms = NULL;
	g->terms = b->terms;
	b->terms = NULL;
	g->pos_lhs = malloc(g->n_rhs * sizeof *g->pos_lhs);
	g->nt_prods = calloc(g->n_nt + 1, sizeof *g->nt_prods);
	g->prod_pos = malloc((b->n_prods + 1) * sizeof *g->prod_pos);
	g->nullable = calloc(g->n_nt, 1);
	if (!g->pos_lhs || !g->nt_prods || !g->prod_pos || !g->nullable)
		goto oom;
	g->cnts = b->cnts;
	g->n_cnts = (int)b->n_cnts;
	b->cnts = NULL;
	for (size_t p = 0; p < b->n_prods; p++) {
		uint32_t pos = b->prods[p].pos;
		g->nt_prods[b->prods[p].lhs + 1]++;
		if (pos & GM_VPOS)
			continue;
		do
			g->pos_lhs[pos] = b->prods[p].lhs;
		while (g->rhs[pos++] != GM_END);
	}
	for (int i = 0; i < g->n_nt; i++)
		g->nt_prods[i + 1] += g->nt_prods[i];
	uint32_t *fill = calloc(g->n_nt, sizeof *fill);
	if (!fill)
		goto oom;
	for (size_t p = 0; p < b->n_prods; p++) {
		int32_t l = b->prods[p].lhs;
		g->prod_pos[g->nt_prods[l] + fill[l]++] = b->prods[p].pos;
	}
	free(fill);
	/* nullable: iterate to a fixed point */
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t p = 0; p < b->n_prods; p++) {
			int32_t l = b->prods[p].lhs;
			if (g->nullable[l])
				continue;
			uint32_t pos = b->prods[p].pos;
			if (pos & GM_VPOS) {
				/* a nullable sym may match empty any number of times */
				const struct gm_cnt *c = gm_cnt_of(g, pos);
				if (c->min && !(c->sym >= 0 && g->nullable[c->sym]))
					continue;
				g->nullable[l] = 1;
				changed = true;
				continue;
			}
			while (g->rhs[pos] >= 0 && g->nullable[g->rhs[pos]])
				pos++;
			if (g->rhs[pos] == GM_END) {
				g->nullable[l] = 1;
				changed = true;
			}
		}
	}
	/* a count is not advanced over an empty sym (that would take an
	 * item per count): a nullable sym's counter completes at any count */
	for (int i = 0; i < g->n_cnts; i++)
		if (g->cnts[i].sym >= 0 && g->nullable[g->cnts[i].sym])
			g->cnts[i].min = 0;
	g->start = (int32_t)b->prods[b->n_prods - 1].pos;
	g->accept = g->start + 1;
	atomic_init(&g->refs, 1);
	gmb_free(b);
	return g;
oom:
	gmb_fail(b, "out of memory");
	if (g) {
		free(g->rhs);
		free(g->terms);
		free(g->pos_lhs);
		free(g->nt_prods);
		free(g->prod_pos);
		free(g->nullable);
		free(g->cnts);
		free(g);
	}
	return NULL;
}
