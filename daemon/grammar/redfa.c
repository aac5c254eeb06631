/* daemon/grammar/redfa.c — JSON Schema patterns as one deterministic
 * automaton over code points, for what a grammar of a pattern alone cannot
 * say: a pattern together with a length (the automaton times a counter),
 * a string that matches none of some patterns (a complement), keys sorted
 * by the set of patterns they match (patternProperties).
 *
 * Each pattern is searched for, as ECMAScript does without flags: an
 * NFA with a free prefix and suffix, ^ and $ as edges taken only at the
 * start and at the end. The subset construction runs over the atoms of
 * the code point space that every class boundary splits. The same regex
 * subset as regex.c; the parsers are separate because this one builds
 * automata (to copy, complement and intersect) and that one builds the
 * grammar directly. */
#include "daemon/grammar/gm_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NFA_MAX 20000
#define DFA_MAX 3000
#define PAIRS_MAX 200000 /* (state, count) nonterminals one string may take */
#define LEFT_MAX 4096    /* pairs up to which an unbounded string is left-linear */

enum { E_EPS, E_BOL, E_EOL, E_CHR };

struct edge {
	int from, to, kind, cls;
};

struct gm_dfa {
	/* NFA */
	struct edge *e;
	int n_e, cap_e, n_st;
	int *fin; /* per NFA state: pattern index + 1 when final */
	struct gm_cps *cls;
	int n_cls, cap_cls;
	/* atoms: [atom[i], atom[i + 1]) */
	uint32_t *atom;
	int n_atom;
	/* DFA: per state its tag (patterns matched if it ends here) and its
	 * transitions, one target per atom (-1: none) */
	int n_d;
	uint32_t *tag;
	int *next; /* n_d * n_atom */
	bool failed;
	char *err;
	size_t errlen;
};

struct rp {
	struct gm_dfa *d;
	const unsigned char *s;
	size_t n, i;
	int depth;
};

struct frag {
	int in, out;
};

static bool fail(struct gm_dfa *d, const char *what, size_t at)
{
	if (!d->failed)
		snprintf(d->err, d->errlen, "regex: %s at offset %zu", what, at);
	d->failed = true;
	return false;
}

static int state(struct gm_dfa *d)
{
	if (d->n_st >= NFA_MAX)
		return fail(d, "pattern too large", 0), 0;
	return d->n_st++;
}

static void edge(struct gm_dfa *d, int from, int to, int kind, int cls)
{
	if (d->failed)
		return;
	if (d->n_e == d->cap_e) {
		int cap = d->cap_e ? d->cap_e * 2 : 256;
		struct edge *ne = realloc(d->e, cap * sizeof *ne);
		if (!ne) {
			fail(d, "out of memory", 0);
			return;
		}
		d->e = ne;
		d->cap_e = cap;
	}
	d->e[d->n_e++] = (struct edge){ from, to, kind, cls };
}

/* A fragment that reads one character of s (taken over). */
static struct frag chars(struct rp *r, struct gm_cps *s)
{
	struct gm_dfa *d = r->d;
	struct frag f = { state(d), state(d) };
	if (cps_failed(s) || d->failed) {
		cps_free(s);
		fail(d, "out of memory", r->i);
		return f;
	}
	cps_norm(s);
	if (d->n_cls == d->cap_cls) {
		int cap = d->cap_cls ? d->cap_cls * 2 : 32;
		struct gm_cps *nc = realloc(d->cls, cap * sizeof *nc);
		if (!nc) {
			cps_free(s);
			fail(d, "out of memory", r->i);
			return f;
		}
		d->cls = nc;
		d->cap_cls = cap;
	}
	d->cls[d->n_cls] = *s;
	edge(d, f.in, f.out, E_CHR, d->n_cls++);
	return f;
}

static struct frag one(struct rp *r, uint32_t c)
{
	struct gm_cps s = { 0 };
	cps_add(&s, c, c);
	return chars(r, &s);
}

static struct frag empty(struct gm_dfa *d, int kind)
{
	struct frag f = { state(d), state(d) };
	edge(d, f.in, f.out, kind, -1);
	return f;
}

/* ---- the parser ------------------------------------------------------ */

static uint32_t utf8(struct rp *r)
{
	const unsigned char *s = r->s + r->i;
	size_t left = r->n - r->i;
	uint32_t c = s[0];
	int l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if ((size_t)l > left || (l > 1 && c < 0xC2) || c > 0xF4) {
		r->i++;
		return c;
	}
	uint32_t v = l == 1 ? c : l == 2 ? c & 0x1F : l == 3 ? c & 0x0F : c & 0x07;
	for (int k = 1; k < l; k++) {
		if ((s[k] & 0xC0) != 0x80) {
			r->i++;
			return c;
		}
		v = v << 6 | (s[k] & 0x3F);
	}
	r->i += l;
	return v;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool hexn(struct rp *r, int n, uint32_t *out)
{
	uint32_t v = 0;
	for (int k = 0; k < n; k++) {
		if (r->i >= r->n || hexval(r->s[r->i]) < 0)
			return fail(r->d, "bad hex escape", r->i);
		v = v << 4 | hexval(r->s[r->i++]);
	}
	*out = v;
	return true;
}

static bool class_escape(char c, struct gm_cps *s)
{
	static const uint32_t sp[][2] = { { 9, 13 }, { 32, 32 }, { 0xA0, 0xA0 }, { 0x1680, 0x1680 },
					  { 0x2000, 0x200A }, { 0x2028, 0x2029 }, { 0x202F, 0x202F },
					  { 0x205F, 0x205F }, { 0x3000, 0x3000 }, { 0xFEFF, 0xFEFF } };
	struct gm_cps t = { 0 };
	switch (c) {
	case 'd': case 'D': cps_add(&t, '0', '9'); break;
	case 'w': case 'W':
		cps_add(&t, '0', '9');
		cps_add(&t, 'A', 'Z');
		cps_add(&t, 'a', 'z');
		cps_add(&t, '_', '_');
		break;
	case 's': case 'S':
		for (size_t k = 0; k < sizeof sp / sizeof *sp; k++)
			cps_add(&t, sp[k][0], sp[k][1]);
		break;
	default: return false;
	}
	if (c == 'D' || c == 'W' || c == 'S')
		cps_negate(&t);
	for (int k = 0; k < t.n; k++)
		cps_add(s, t.r[k][0], t.r[k][1]);
	cps_free(&t);
	return true;
}

static bool char_escape(struct rp *r, bool in_class, uint32_t *out)
{
	if (r->i >= r->n)
		return fail(r->d, "trailing backslash", r->i);
	unsigned char c = r->s[r->i];
	static const char from[] = "ntrfv0", to[] = "\n\t\r\f\v";
	const char *p = c ? strchr(from, c) : NULL;
	if (p) {
		r->i++;
		*out = p - from < 5 ? (uint32_t)to[p - from] : 0;
		return true;
	}
	if (c == 'x') {
		r->i++;
		return hexn(r, 2, out);
	}
	if (c == 'u') {
		r->i++;
		if (r->i < r->n && r->s[r->i] == '{') {
			uint32_t v = 0;
			int k = 0;
			for (r->i++; r->i < r->n && hexval(r->s[r->i]) >= 0 && k < 6; k++)
				v = v << 4 | hexval(r->s[r->i++]);
			if (!k || r->i >= r->n || r->s[r->i] != '}' || v > 0x10FFFF)
				return fail(r->d, "bad \\u{} escape", r->i);
			r->i++;
			*out = v;
			return true;
		}
		return hexn(r, 4, out);
	}
	if (c == 'b' && in_class) {
		r->i++;
		*out = '\b';
		return true;
	}
	if (strchr("bBpPck", c) || (c >= '1' && c <= '9'))
		return fail(r->d, "escape not supported", r->i);
	*out = utf8(r);
	return true;
}

static struct frag klass(struct rp *r)
{
	r->i++;
	bool neg = r->i < r->n && r->s[r->i] == '^';
	if (neg)
		r->i++;
	struct gm_cps s = { 0 };
	while (r->i < r->n && r->s[r->i] != ']' && !r->d->failed) {
		uint32_t lo, hi;
		if (r->s[r->i] == '\\') {
			r->i++;
			if (r->i < r->n && class_escape((char)r->s[r->i], &s)) {
				r->i++;
				continue;
			}
			if (!char_escape(r, true, &lo))
				break;
		} else {
			lo = utf8(r);
		}
		hi = lo;
		if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
			r->i++;
			if (r->s[r->i] == '\\') {
				r->i++;
				if (r->i < r->n && strchr("dwsDWS", r->s[r->i])) {
					cps_add(&s, lo, lo);
					cps_add(&s, '-', '-');
					class_escape((char)r->s[r->i++], &s);
					continue;
				}
				if (!char_escape(r, true, &hi))
					break;
			} else {
				hi = utf8(r);
			}
			if (hi < lo) {
				fail(r->d, "class range out of order", r->i);
				break;
			}
		}
		cps_add(&s, lo, hi);
	}
	if (r->i >= r->n)
		fail(r->d, "unterminated class", r->i);
	r->i++;
	if (neg)
		cps_negate(&s);
	return chars(r, &s);
}

static struct frag alt(struct rp *r);

static struct frag atom(struct rp *r)
{
	unsigned char c = r->s[r->i];
	struct frag bad = { 0, 0 };
	if (c == '(') {
		r->i++;
		if (r->i < r->n && r->s[r->i] == '?') {
			r->i++;
			if (r->i < r->n && r->s[r->i] == ':') {
				r->i++;
			} else if (r->i + 1 < r->n && r->s[r->i] == '<' && r->s[r->i + 1] != '=' &&
				   r->s[r->i + 1] != '!') {
				while (r->i < r->n && r->s[r->i] != '>')
					r->i++;
				r->i++;
			} else {
				return fail(r->d, "look-around is not supported", r->i), bad;
			}
		}
		if (++r->depth > 64)
			return fail(r->d, "nested too deep", r->i), bad;
		struct frag f = alt(r);
		r->depth--;
		if (r->i >= r->n || r->s[r->i] != ')')
			return fail(r->d, "missing ')'", r->i), bad;
		r->i++;
		return f;
	}
	if (c == '[')
		return klass(r);
	if (c == '^' || c == '$') {
		r->i++;
		return empty(r->d, c == '^' ? E_BOL : E_EOL);
	}
	if (c == '*' || c == '+' || c == '?')
		return fail(r->d, "nothing to repeat", r->i), bad;
	if (c == '.') {
		r->i++;
		struct gm_cps s = { 0 };
		cps_add(&s, '\n', '\n');
		cps_add(&s, '\r', '\r');
		cps_add(&s, 0x2028, 0x2029);
		cps_negate(&s);
		return chars(r, &s);
	}
	if (c == '\\') {
		r->i++;
		struct gm_cps s = { 0 };
		if (r->i < r->n && class_escape((char)r->s[r->i], &s)) {
			r->i++;
			return chars(r, &s);
		}
		uint32_t ch;
		return char_escape(r, false, &ch) ? one(r, ch) : bad;
	}
	return one(r, utf8(r));
}

static bool number(struct rp *r, long *out)
{
	if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
		return false;
	long v = 0;
	while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
		v = v < 100000 ? v * 10 + (r->s[r->i++] - '0') : (r->i++, v);
	*out = v;
	return true;
}

/* A quantifier after an atom: true with its bounds (max < 0: none). */
static bool quant(struct rp *r, long *min, long *max)
{
	if (r->i >= r->n)
		return false;
	char q = (char)r->s[r->i];
	if (q == '*' || q == '+' || q == '?') {
		*min = q == '+';
		*max = q == '?' ? 1 : -1;
		r->i++;
	} else if (q == '{') {
		size_t at = r->i++;
		if (!number(r, min)) {
			r->i = at;
			return false;
		}
		*max = *min;
		if (r->i < r->n && r->s[r->i] == ',') {
			r->i++;
			*max = -1;
			number(r, max);
		}
		if (r->i >= r->n || r->s[r->i] != '}') {
			r->i = at;
			return false;
		}
		r->i++;
	} else {
		return false;
	}
	if (r->i < r->n && r->s[r->i] == '?')
		r->i++;
	if (*max >= 0 && *max < *min)
		return fail(r->d, "bad repetition bounds", r->i);
	return true;
}

static void link(struct gm_dfa *d, int a, int b)
{
	edge(d, a, b, E_EPS, -1);
}

/* The atom at `at` repeated: each copy parsed again from its text. */
static struct frag repeat(struct rp *r, size_t at, struct frag first, long min, long max)
{
	size_t end = r->i;
	struct gm_dfa *d = r->d;
	struct frag f = { state(d), 0 };
	int cur = f.in;
	long copies = max < 0 ? (min > 1 ? min : 1) : max;
	for (long k = 0; k < copies && !d->failed; k++) {
		struct frag x = first;
		if (k) {
			r->i = at;
			x = atom(r);
		}
		link(d, cur, x.in);
		if (max < 0 && k == copies - 1)
			link(d, x.out, x.in); /* the last copy loops */
		if (k >= min || (max < 0 && min == 0))
			link(d, cur, x.out); /* this copy may be skipped */
		cur = x.out;
	}
	if (max == 0)
		link(d, cur, cur);
	r->i = end;
	f.out = cur;
	return f;
}

static struct frag seq(struct rp *r)
{
	struct gm_dfa *d = r->d;
	struct frag f = { state(d), 0 };
	int cur = f.in;
	while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')' && !d->failed) {
		size_t at = r->i;
		struct frag x = atom(r);
		size_t after = r->i;
		long min, max;
		while (!d->failed && quant(r, &min, &max)) {
			size_t q_end = r->i;
			r->i = after;
			x = repeat(r, at, x, min, max);
			r->i = q_end;
			after = q_end; /* a second quantifier repeats the whole */
			if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '{'))
				break; /* nested quantifiers: rare; read the rest literally */
		}
		link(d, cur, x.in);
		cur = x.out;
	}
	f.out = cur;
	return f;
}

static struct frag alt(struct rp *r)
{
	struct gm_dfa *d = r->d;
	struct frag f = { state(d), state(d) };
	for (;;) {
		struct frag x = seq(r);
		link(d, f.in, x.in);
		link(d, x.out, f.out);
		if (d->failed || r->i >= r->n || r->s[r->i] != '|')
			break;
		r->i++;
	}
	return f;
}

/* ---- the subset construction ------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Follow the empty edges (and ^ at the start, $ at the end). */
static void closure(const struct gm_dfa *d, const int *first, uint64_t *set, int *stack, bool bol, bool eol)
{
	int sp = 0;
	for (int w = 0; w < (d->n_st + 63) / 64; w++)
		for (uint64_t x = set[w]; x; x &= x - 1)
			stack[sp++] = w * 64 + __builtin_ctzll(x);
	while (sp) {
		int s = stack[--sp];
		for (int k = first[s]; k < first[s + 1]; k++) {
			const struct edge *e = &d->e[k];
			if (e->kind == E_CHR || (e->kind == E_BOL && !bol) || (e->kind == E_EOL && !eol))
				continue;
			if (!(set[e->to >> 6] >> (e->to & 63) & 1)) {
				set[e->to >> 6] |= 1ull << (e->to & 63);
				stack[sp++] = e->to;
			}
		}
	}
}

static int cmp_edge(const void *a, const void *b)
{
	const struct edge *x = a, *y = b;
	return x->from < y->from ? -1 : x->from > y->from;
}

static int atom_of(const struct gm_dfa *d, uint32_t c)
{
	int lo = 0, hi = d->n_atom - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (d->atom[mid] <= c)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static uint64_t hash(const uint64_t *w, size_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ w[i]) * 0x100000001B3ull, h ^= h >> 29;
	return h;
}

#define HT_SIZE 8192 /* > 2 * DFA_MAX: open addressing stays short */

static bool build(struct gm_dfa *d, int start)
{
	/* edges by source */
	if (d->n_e)
		qsort(d->e, d->n_e, sizeof *d->e, cmp_edge);
	int *first = calloc(d->n_st + 1, sizeof *first), *stack = malloc((d->n_st + 1) * sizeof *stack);
	/* atoms */
	int nb = 2;
	for (int i = 0; i < d->n_cls; i++)
		nb += 2 * d->cls[i].n;
	uint32_t *b = malloc(nb * sizeof *b);
	size_t words = (d->n_st + 63) / 64;
	uint64_t *sets = NULL, *T = NULL, *tmp = malloc(words * 8);
	int *ht = malloc(HT_SIZE * sizeof *ht), *seen = NULL; /* DFA states by set; atoms by raw target */
	uint64_t *th = NULL;
	if (!first || !stack || !b || !tmp || !ht)
		goto oom;
	for (int i = 0; i < HT_SIZE; i++)
		ht[i] = -1;
	for (int k = 0; k < d->n_e; k++)
		first[d->e[k].from + 1]++;
	for (int s = 0; s < d->n_st; s++)
		first[s + 1] += first[s];
	nb = 0;
	b[nb++] = 0;
	b[nb++] = 0x110000;
	for (int i = 0; i < d->n_cls; i++)
		for (int k = 0; k < d->cls[i].n; k++) {
			b[nb++] = d->cls[i].r[k][0];
			b[nb++] = d->cls[i].r[k][1] + 1;
		}
	qsort(b, nb, sizeof *b, cmp_u32);
	int na = 0;
	for (int i = 0; i < nb; i++)
		if (!na || b[na - 1] != b[i])
			b[na++] = b[i];
	d->atom = b;
	d->n_atom = na - 1; /* the last boundary closes the last atom */
	b = NULL;
	int cap = 64;
	sets = malloc(cap * words * 8);
	d->tag = malloc(cap * sizeof *d->tag);
	d->next = malloc((size_t)cap * d->n_atom * sizeof *d->next);
	T = malloc((size_t)d->n_atom * words * 8);
	th = malloc((size_t)d->n_atom * sizeof *th);
	seen = malloc(HT_SIZE * sizeof *seen);
	if (!sets || !d->tag || !d->next || !T || !th || !seen)
		goto oom;
	memset(sets, 0, words * 8);
	sets[start >> 6] |= 1ull << (start & 63);
	closure(d, first, sets, stack, true, false);
	d->n_d = 1;
	for (int i = 0; i < d->n_d; i++) {
		uint64_t *S = sets + i * words;
		/* its tag: the patterns it ends, $ allowed */
		memcpy(tmp, S, words * 8);
		closure(d, first, tmp, stack, i == 0, true);
		d->tag[i] = 0;
		for (int s = 0; s < d->n_st; s++)
			if (d->fin[s] && (tmp[s >> 6] >> (s & 63) & 1))
				d->tag[i] |= 1u << (d->fin[s] - 1);
		memset(T, 0, (size_t)d->n_atom * words * 8);
		for (int s = 0; s < d->n_st; s++) {
			if (!(S[s >> 6] >> (s & 63) & 1))
				continue;
			for (int k = first[s]; k < first[s + 1]; k++) {
				const struct edge *e = &d->e[k];
				if (e->kind != E_CHR)
					continue;
				const struct gm_cps *c = &d->cls[e->cls];
				for (int r = 0; r < c->n; r++)
					for (int a = atom_of(d, c->r[r][0]); a < d->n_atom && d->atom[a] <= c->r[r][1]; a++)
						T[a * words + (e->to >> 6)] |= 1ull << (e->to & 63);
			}
		}
		for (int k = 0; k < HT_SIZE; k++)
			seen[k] = -1;
		for (int a = 0; a < d->n_atom; a++) {
			uint64_t *t = T + a * words;
			int *nx = &d->next[(size_t)i * d->n_atom + a];
			if (a && !memcmp(t, T + (a - 1) * words, words * 8)) {
				*nx = nx[-1];
				continue;
			}
			/* an atom before with the same raw targets: the same state */
			th[a] = hash(t, words);
			size_t slot = th[a] % HT_SIZE;
			while (seen[slot] >= 0 && (th[seen[slot]] != th[a] || memcmp(T + seen[slot] * words, t, words * 8)))
				slot = (slot + 1) % HT_SIZE;
			if (seen[slot] >= 0) {
				*nx = d->next[(size_t)i * d->n_atom + seen[slot]];
				continue;
			}
			seen[slot] = a;
			bool none = true;
			for (size_t w = 0; w < words && none; w++)
				none = !t[w];
			if (none) {
				*nx = -1;
				continue;
			}
			memcpy(tmp, t, words * 8);
			closure(d, first, tmp, stack, false, false);
			/* state 0 is the start (^ holds there): never a target */
			size_t hs = hash(tmp, words) % HT_SIZE;
			while (ht[hs] >= 0 && memcmp(sets + ht[hs] * words, tmp, words * 8))
				hs = (hs + 1) % HT_SIZE;
			int j = ht[hs] >= 0 ? ht[hs] : d->n_d;
			if (j == d->n_d) {
				ht[hs] = j;
				if (d->n_d == DFA_MAX) {
					fail(d, "pattern too complex (automaton over 3000 states)", 0);
					goto out;
				}
				if (d->n_d == cap) {
					cap *= 2;
					uint64_t *ns = realloc(sets, cap * words * 8);
					if (ns)
						sets = ns;
					uint32_t *nt = realloc(d->tag, cap * sizeof *nt);
					if (nt)
						d->tag = nt;
					int *nn = realloc(d->next, (size_t)cap * d->n_atom * sizeof *nn);
					if (nn)
						d->next = nn;
					if (!ns || !nt || !nn)
						goto oom;
					S = sets + i * words;
					nx = &d->next[(size_t)i * d->n_atom + a];
				}
				memcpy(sets + j * words, tmp, words * 8);
				d->n_d++;
			}
			*nx = j;
		}
	}
	goto out;
oom:
	fail(d, "out of memory", 0);
out:
	free(first), free(stack), free(b), free(sets), free(T), free(tmp), free(ht), free(seen), free(th);
	return !d->failed;
}

void gm_dfa_free(struct gm_dfa *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->n_cls; i++)
		cps_free(&d->cls[i]);
	free(d->cls), free(d->e), free(d->fin), free(d->atom), free(d->tag), free(d->next);
	free(d);
}

struct gm_dfa *gm_dfa_new(const char *const *res, const size_t *lens, int n, char *err, size_t errlen)
{
	struct gm_dfa *d = calloc(1, sizeof *d);
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->err = err;
	d->errlen = errlen;
	if (n > 32) {
		fail(d, "more than 32 patterns", 0);
		gm_dfa_free(d);
		return NULL;
	}
	int start = state(d);
	int *fins = malloc((n + 1) * sizeof *fins);
	for (int p = 0; fins && p < n && !d->failed; p++) {
		struct rp r = { .d = d, .s = (const unsigned char *)res[p], .n = lens[p] };
		struct gm_cps all = { 0 };
		cps_negate(&all);
		struct frag any = chars(&r, &all);
		int st = any.in, fin = state(d);
		link(d, any.out, st); /* the free prefix: any.in --c--> any.out -> any.in */
		link(d, start, st);
		struct frag x = alt(&r);
		if (!d->failed && r.i < r.n)
			fail(d, "unmatched ')'", r.i);
		link(d, st, x.in);
		link(d, x.out, fin);
		struct gm_cps all2 = { 0 };
		cps_negate(&all2);
		struct frag tail = chars(&r, &all2);
		link(d, fin, tail.in);
		link(d, tail.out, fin);
		fins[p] = fin;
	}
	d->fin = calloc(d->n_st + 1, sizeof *d->fin);
	if (!fins || !d->fin)
		fail(d, "out of memory", 0);
	for (int p = 0; !d->failed && p < n; p++)
		d->fin[fins[p]] = p + 1;
	free(fins);
	if (d->failed || !build(d, start)) {
		gm_dfa_free(d);
		return NULL;
	}
	return d;
}

static bool fits(uint32_t tag, uint32_t must, uint32_t must_not)
{
	return (tag & must) == must && !(tag & must_not);
}

/* States from which a fitting state can be reached. */
static uint8_t *live(const struct gm_dfa *d, uint32_t must, uint32_t must_not)
{
	uint8_t *l = calloc(d->n_d, 1);
	if (!l)
		return NULL;
	for (int i = 0; i < d->n_d; i++)
		l[i] = fits(d->tag[i], must, must_not);
	for (bool more = true; more;) {
		more = false;
		for (int i = d->n_d - 1; i >= 0; i--)
			for (int a = 0; a < d->n_atom && !l[i]; a++) {
				int t = d->next[(size_t)i * d->n_atom + a];
				if (t >= 0 && l[t])
					l[i] = 1, more = true;
			}
	}
	return l;
}

bool gm_dfa_some(const struct gm_dfa *d, uint32_t must, uint32_t must_not)
{
	uint8_t *l = live(d, must, must_not);
	bool some = l && l[0];
	free(l);
	return some;
}

int32_t gm_dfa_string(struct gm_b *b, const struct gm_dfa *d, uint32_t must, uint32_t must_not, long mn, long mx)
{
	long cap = mx >= 0 ? mx : mn;
	if (mx >= 0 && mn > mx)
		return gmb_none(b);
	if ((size_t)d->n_d * (cap + 1) > PAIRS_MAX * 4)
		return gmb_fail(b, "regex: pattern with a length too large"), 0;
	uint8_t *l = live(d, must, must_not);
	int32_t *nt = calloc((size_t)d->n_d * (cap + 1), sizeof *nt);
	/* per state: its targets and the character set leading to each */
	int32_t *sym = malloc((size_t)d->n_d * sizeof *sym);
	int *queue = malloc((size_t)d->n_d * (cap + 1) * sizeof *queue);
	int32_t **gsym = calloc(d->n_d, sizeof *gsym);
	int **gto = calloc(d->n_d, sizeof *gto);
	int *ng = calloc(d->n_d, sizeof *ng);
	int32_t res = 0;
	if (!l || !nt || !sym || !queue || !gsym || !gto || !ng) {
		gmb_fail(b, "out of memory");
		goto out;
	}
	if (!l[0]) {
		res = gmb_none(b);
		goto out;
	}
	for (int i = 0; i < d->n_d && !b->failed; i++) {
		if (!l[i])
			continue;
		for (int a = 0; a < d->n_atom; a++) {
			int t = d->next[(size_t)i * d->n_atom + a];
			if (t < 0 || !l[t])
				continue;
			bool seen = false;
			for (int g = 0; g < ng[i] && !seen; g++)
				seen = gto[i][g] == t;
			if (seen)
				continue;
			struct gm_cps s = { 0 };
			for (int a2 = a; a2 < d->n_atom; a2++)
				if (d->next[(size_t)i * d->n_atom + a2] == t)
					cps_add(&s, d->atom[a2], d->atom[a2 + 1] - 1);
			/* the JSON string cannot hold surrogates */
			struct gm_cps nosur = { 0 }, all = { 0 };
			cps_negate(&all);
			cps_norm(&s);
			for (int x = 0, y = 0; x < s.n && y < all.n;) {
				uint32_t lo = s.r[x][0] > all.r[y][0] ? s.r[x][0] : all.r[y][0];
				uint32_t hi = s.r[x][1] < all.r[y][1] ? s.r[x][1] : all.r[y][1];
				if (lo <= hi)
					cps_add(&nosur, lo, hi);
				if (s.r[x][1] < all.r[y][1])
					x++;
				else
					y++;
			}
			cps_free(&s);
			cps_free(&all);
			cps_norm(&nosur);
			if (cps_failed(&nosur)) {
				gmb_fail(b, "out of memory");
				break;
			}
			int32_t c = nosur.n ? gm_json_chars(b, &nosur) : 0;
			cps_free(&nosur);
			if (!c)
				continue;
			int32_t *gs = realloc(gsym[i], (ng[i] + 1) * sizeof *gs);
			int *gt = realloc(gto[i], (ng[i] + 1) * sizeof *gt);
			if (gs)
				gsym[i] = gs;
			if (gt)
				gto[i] = gt;
			if (!gs || !gt) {
				gmb_fail(b, "out of memory");
				break;
			}
			gsym[i][ng[i]] = c;
			gto[i][ng[i]++] = t;
		}
	}
	/* (state, count) pairs from the start, breadth first. Without a
	 * maximum the pairs are few and the string is left-linear (L_q ->
	 * L_p c): Earley then keeps every item's origin at the string's
	 * start, where the right-linear form (R_p -> c R_q) completes a chain
	 * back to it at every character and never repeats a state. */
	bool left = mx < 0 && (size_t)d->n_d * (cap + 1) <= LEFT_MAX;
	int32_t top = left ? gmb_nt(b) : 0;
	int qn = 0;
	nt[0] = gmb_nt(b);
	if (left)
		gmb_prod(b, nt[0], NULL, 0);
	queue[qn++] = 0;
	for (int q = 0; q < qn && !b->failed; q++) {
		int i = queue[q] / (int)(cap + 1);
		long k = queue[q] % (cap + 1);
		int32_t me = nt[queue[q]];
		if (fits(d->tag[i], must, must_not) && k >= mn) {
			int32_t e = left ? me : gmb_eps(b);
			gmb_prod(b, left ? top : me, &e, 1);
		}
		long k2 = k < cap ? k + 1 : mx < 0 ? cap : -1;
		if (k2 < 0)
			continue;
		for (int g = 0; g < ng[i]; g++) {
			int idx = gto[i][g] * (int)(cap + 1) + (int)k2;
			if (!nt[idx]) {
				if (qn >= PAIRS_MAX) {
					gmb_fail(b, "regex: pattern with a length too large");
					break;
				}
				nt[idx] = gmb_nt(b);
				queue[qn++] = idx;
			}
			if (left) {
				int32_t two[2] = { me, gsym[i][g] };
				gmb_prod(b, nt[idx], two, 2);
			} else {
				int32_t two[2] = { gsym[i][g], nt[idx] };
				gmb_prod(b, me, two, 2);
			}
		}
	}
	res = b->failed ? 0 : left ? top : nt[0];
out:
	for (int i = 0; gsym && gto && i < d->n_d; i++)
		free(gsym[i]), free(gto[i]);
	free(l), free(nt), free(sym), free(queue), free(gsym), free(gto), free(ng);
	return res;
}

int gm_dfa_states(const struct gm_dfa *d)
{
	return d->n_d;
}

uint32_t gm_dfa_match(const struct gm_dfa *d, const char *s, size_t n)
{
	int st = 0;
	for (size_t i = 0; i < n && st >= 0;) {
		uint32_t c = (unsigned char)s[i];
		int l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
		if (i + l > n)
			l = 1;
		if (l > 1) {
			c &= l == 2 ? 0x1F : l == 3 ? 0x0F : 0x07;
			for (int k = 1; k < l; k++)
				c = c << 6 | ((unsigned char)s[i + k] & 0x3F);
		}
		i += l;
		st = d->next[(size_t)st * d->n_atom + atom_of(d, c)];
	}
	return st < 0 ? 0 : d->tag[st];
}
