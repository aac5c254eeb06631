/* daemon/grammar/loop.c — the mask walk's shortcuts where the parser loops
 * on JSON string characters (or takes a run of them). */
#include "daemon/grammar/match_int.h"

#include <string.h>

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

struct loop {
	struct gm_matcher *m;
	size_t base;
	size_t anchor; /* where S1 is, when past it; 0: not */
	uint64_t *want, *tmp; /* S1's canonical items, the set's at hand */
	size_t n_want, cap;
	bool have;
	int pushes;
};

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
		o[n++] = (uint64_t)gmm_code_pos(m, pos) << 32 | c;
	}
	n = gmm_sort_unique(o, n);
	*out = o;
	return (long)n;
}

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
		if (++l->pushes > LOOP_MAX_PUSHES || !gmm_push(m, reps[r]))
			return false;
		bool ok = shape_ok(l, sh, i + 1);
		gmm_pop(m);
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
	bool one = chars_ok(&l), ok = one && gmm_push(m, gm_shapes[0].lo[0]);
	if (ok) {
		ok = chars_ok(&l);
		gmm_pop(m);
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
	if (st->run != RUN_UNKNOWN && (st->run >= max || !st->run_cut))
		return st->run < max ? st->run : max;
	int run = 0;
	if (max > 0 && d + 2 < sizeof w->path / sizeof *w->path) {
		bool ok = st->one;
		if (!ok) {
			struct loop l = { .m = m, .base = w->base + d };
			ok = chars_ok(&l);
			free(l.want);
			free(l.tmp);
			w->c->st[w->path[d]].one = ok;
		}
		if (ok && gmm_push(m, gm_shapes[0].lo[0])) {
			uint32_t next = gmm_intern(m, w->c, w->base + d + 1, w->base, w->path);
			if (next != ST_DEAD && !m->oom) {
				w->path[d + 1] = next;
				/* after an opening quote the next state often loops */
				if (w->c->st[next].loop == LOOP_UNKNOWN && w->c->st[next].run == RUN_UNKNOWN)
					loop_check(w, d + 1);
				run = 1 + run_of(w, d + 1, max - 1);
			}
			gmm_pop(m);
		}
	}
	/* a run cut by max is a lower bound, looked at again for a longer one */
	w->c->st[w->path[d]].run = (uint8_t)run;
	w->c->st[w->path[d]].run_cut = run == max;
	return run;
}

/* ---- roots where every run of characters goes on ----------------------
 *
 * A root need not loop for every token of string characters to be
 * allowed: inside `[a-zA-Z0-9_-]{162}` searched for, each character leads
 * elsewhere but none is refused. univ(S, h): every run of characters of at
 * most h bytes, the last one possibly cut short, is taken from S. It holds
 * when each character's state S' has univ(S', h - its length). A state
 * whose proof is in progress for at least that length needs nothing more
 * (induction on the run's length), so a search's states that lead back to
 * each other are proven once, not once per byte of h. Bytes are tried one
 * per group of those scanned by the same items, and what is proven is
 * kept per state, so the next root (a state of this proof) extends it by
 * a token; what leaned on a claim above it is kept only if the root's
 * proof holds. */

/* The representatives of bytes lo..hi (one byte per group) for the
 * state whose groups start at off in stc.grp, in order. */
static int range_reps(const struct walk *w, uint32_t off, uint8_t lo, uint8_t hi, uint8_t *reps)
{
	uint64_t seen[4] = { 0 };
	int n = 0;
	for (int b = lo; b <= hi; b++) {
		uint8_t r = w->c->grp[off + b];
		if (!(seen[r >> 6] >> (r & 63) & 1)) {
			seen[r >> 6] |= 1ull << (r & 63);
			reps[n++] = r;
		}
	}
	return n;
}

static bool univ(struct walk *w, size_t d, int h, size_t *dep);

/* Byte i of every character of shape sh begun at depth d0 (now at d). */
static bool univ_char(struct walk *w, size_t d0, const struct gm_shape *sh, int i, size_t d, int h,
		      size_t *dep)
{
	if (i == h)
		return true; /* a token ends inside the character */
	if (i == sh->n)
		return w->path[d] == w->path[d0] || univ(w, d, h - sh->n, dep);
	size_t work = w->m->work;
	uint32_t off = gmm_reps(w, d);
	w->budget -= (int)(w->m->work - work);
	if (off == GRP_NONE)
		return false;
	uint8_t reps[256];
	for (int j = 0, nr = range_reps(w, off, sh->lo[i], sh->hi[i], reps); j < nr; j++) {
		uint8_t r = reps[j];
		const uint64_t *ok = w->c->st[w->path[d]].ok;
		if (!(ok[r >> 6] >> (r & 63) & 1))
			return false;
		work = w->m->work;
		uint32_t next = gmm_trans(w, d, r);
		w->budget -= 1 + (int)(w->m->work - work);
		bool taken = next != ST_DEAD && !w->m->oom && w->budget > 0;
		if (taken) {
			w->path[d + 1] = next;
			taken = univ_char(w, d0, sh, i + 1, d + 1, h, dep);
		}
		gmm_pop_to(w, d);
		if (!taken)
			return false;
	}
	return true;
}

/* Keep state s's uyes to restore should the root's proof fail. */
static bool undo_push(struct walk *w, uint32_t s, uint8_t uyes)
{
	if (!gm_grow((void **)&w->undo, &w->cap_undo, w->n_undo + 1, sizeof *w->undo))
		return w->m->oom = true, false;
	w->undo[w->n_undo++] = (struct undo){ s, uyes };
	return true;
}

/* dep: lowered to the depth of the shallowest claim in progress leaned
 * on; to 0 for a claim kept that leans on one (known only at the end). */
static bool univ(struct walk *w, size_t d, int h, size_t *dep)
{
	struct st *st = &w->c->st[w->path[d]];
	if (st->loop == LOOP_YES)
		return true;
	if (h <= st->uyes) {
		if (st->utent)
			*dep = 0;
		return true;
	}
	if (h <= st->uwip) {
		if (st->ud < *dep)
			*dep = st->ud;
		return true;
	}
	if (h >= st->uno || w->budget <= 0)
		return false;
	st->uwip = (uint8_t)h;
	st->ud = (uint16_t)d;
	size_t mine = SIZE_MAX;
	bool ok = true;
	for (int s = 0; s < GM_N_SHAPES && ok; s++)
		ok = univ_char(w, d, &gm_shapes[s], 0, d, h, &mine);
	st = &w->c->st[w->path[d]];
	st->uwip = 0;
	if (ok && mine < d) {
		*dep = mine < *dep ? mine : *dep;
		ok = st->utent = undo_push(w, w->path[d], st->uyes);
	}
	if (ok)
		st->uyes = (uint8_t)h;
	else if (w->budget > 0 && !w->m->oom)
		st->uno = (uint8_t)h; /* a failure, not a proof cut short */
	return ok;
}

/* Whether the root takes every run of characters a token long: then the
 * plain tokens are all allowed and only the rest of the trie is walked.
 * Not beyond the longest token: counts far from their bounds are exact
 * only that far (gmm_code_pos). */
bool gmm_univ_root(struct walk *w)
{
	int h = (int)w->v->max_len;
	/* a root that takes every character to one state counts: its runs
	 * (gmm_loops_below) show as much, for less */
	if (h >= UINT8_MAX || h + 2 >= (int)(sizeof w->path / sizeof *w->path) || w->c->st[w->path[0]].one)
		return false;
	const uint64_t *first = w->c->st[w->path[0]].ok; /* every character's first byte, first */
	for (int s = 0; s < GM_N_SHAPES; s++)
		for (int b = gm_shapes[s].lo[0]; b <= gm_shapes[s].hi[0]; b++)
			if (!(first[b >> 6] >> (b & 63) & 1))
				return false;
	w->budget = UNIV_BUDGET;
	size_t dep = SIZE_MAX;
	bool ok = univ(w, 0, h, &dep);
	while (w->n_undo) { /* what leaned on the root's claim holds with it */
		struct undo *u = &w->undo[--w->n_undo];
		w->c->st[u->s].utent = false;
		if (!ok)
			w->c->st[u->s].uyes = u->uyes;
	}
	free(w->undo);
	w->undo = NULL;
	w->n_undo = w->cap_undo = 0;
	gmm_pop_to(w, 0);
	return ok;
}

/* ---- states that loop on some characters --------------------------------
 *
 * Inside `[a-z0-9-]*` or a URI's path a state takes some characters back
 * to itself and refuses or leaves on the others: every token below a node
 * whose bytes are all such characters is allowed (gm_vocab.bytes_below),
 * whatever the loop on all characters or the every-run proof say. */

/* Every character of shape sh from byte i on (at depth d) ends back in
 * the state at depth d0. */
static bool back_char(struct walk *w, size_t d0, const struct gm_shape *sh, int i, size_t d)
{
	if (i == sh->n)
		return w->path[d] == w->path[d0];
	uint32_t off = gmm_reps(w, d);
	if (off == GRP_NONE)
		return false;
	uint8_t reps[256];
	for (int j = 0, nr = range_reps(w, off, sh->lo[i], sh->hi[i], reps); j < nr; j++) {
		uint32_t next = gmm_trans(w, d, reps[j]);
		bool back = next != ST_DEAD && !w->m->oom;
		if (back) {
			w->path[d + 1] = next;
			back = back_char(w, d0, sh, i + 1, d + 1);
		}
		gmm_pop_to(w, d);
		if (!back)
			return false;
	}
	return true;
}

/* The characters the state at depth d takes back to itself (its cls). */
static void class_of(struct walk *w, size_t d)
{
	uint64_t cls[2] = { 0 };
	bool mb = true;
	uint32_t off = gmm_reps(w, d);
	for (int s = 0; off != GRP_NONE && s < GM_N_SHAPES && !w->m->oom; s++) {
		const struct gm_shape *sh = &gm_shapes[s];
		if (sh->n > 1) {
			mb = mb && back_char(w, d, sh, 0, d);
			continue;
		}
		/* a group's representative tells for all its bytes */
		uint8_t reps[256];
		uint64_t back[4] = { 0 };
		for (int j = 0, nr = range_reps(w, off, sh->lo[0], sh->hi[0], reps); j < nr; j++) {
			uint8_t r = reps[j];
			back[r >> 6] |= (uint64_t)(gmm_trans(w, d, r) == w->path[d]) << (r & 63);
			gmm_pop_to(w, d); /* no real set left for the next byte's state */
		}
		for (int b = sh->lo[0]; b <= sh->hi[0]; b++) {
			uint8_t r = w->c->grp[off + b];
			if (back[r >> 6] >> (r & 63) & 1)
				cls[b >> 6] |= 1ull << (b & 63);
		}
	}
	gmm_pop_to(w, d);
	struct st *st = &w->c->st[w->path[d]];
	st->cls[0] = cls[0] | (mb && !w->m->oom);
	st->cls[1] = cls[1];
	st->cls_known = !w->m->oom;
}

/* Every token below node c (at depth d) is made of characters the state
 * at depth d takes back to itself. */
static bool class_below(struct walk *w, size_t at, size_t d)
{
	struct st *st = &w->c->st[w->path[d]];
	if (!st->cls_known) {
		if (d > LOOP_DEPTH)
			return false;
		class_of(w, d);
		st = &w->c->st[w->path[d]];
	}
	const uint64_t *bb = w->v->bytes_below[at];
	return !(bb[0] & ~st->cls[0]) && !(bb[1] & ~st->cls[1]);
}

/* The walk's first d bytes are string characters. */
static bool plain_path(const struct walk *w, size_t d)
{
	for (size_t i = 0, k; i < d; i += k)
		if (!(k = (size_t)gm_char_len(w->bytes + i, d - i)))
			return false;
	return true;
}

/* Node c (at depth d) is taken; where every token below it goes on with
 * string characters only and the state loops on them, or takes a run of
 * them as long as the longest token below, they are all allowed without
 * walking. States first met deeper than LOOP_DEPTH are not checked (a
 * check costs some 70 parser steps), but a run found from above is used. */
bool gmm_loops_below(struct walk *w, const struct gm_node *c, size_t d)
{
	size_t at = (size_t)(c - w->v->nodes);
	if (!w->v->plain_below[at])
		return false;
	if (w->univ_root && plain_path(w, d)) /* its tokens are plain: in the mask already */
		return true;
	struct st *st = &w->c->st[w->path[d]];
	if (st->loop == LOOP_UNKNOWN && d <= LOOP_DEPTH) {
		if (!gmm_materialize(w, d))
			return false;
		loop_check(w, d);
		st = &w->c->st[w->path[d]];
	}
	if (st->loop != LOOP_YES) {
		int h = w->v->height[at];
		if ((st->run == RUN_UNKNOWN || (st->run_cut && st->run < h)) && d <= LOOP_DEPTH && h <= RUN_MAX) {
			uint32_t s = w->path[d];
			if (!gmm_materialize(w, d))
				return false;
			run_of(w, d, RUN_MAX);
			w->path[d] = s;
			st = &w->c->st[s];
		}
		if ((st->run == RUN_UNKNOWN || st->run < h) && !class_below(w, at, d))
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
			o[k++] = (uint64_t)gmm_code_pos(m, pos) << 32 | (org == base ? C_SELF : org);
	}
	if (same)
		k = gmm_sort_unique(o, k);
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
void gmm_root_check(struct walk *w)
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
			if (gmm_push(m, reps[r])) {
				l.have = false;
				bool ok = shape_ok(&l, sh, 1);
				gmm_pop(m);
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
		ok = gmm_push(m, (uint8_t)cands[best].ascii);
	if (ok) {
		/* S1 (at depth 1) takes every character to S2, and S2 to itself.
		 * Where the root is like S1 (inside a string) or S2 like S1
		 * (after the opening quote), what is shown for one holds for the
		 * other; but a root with exceptions shows nothing for S1. */
		s1 = gmm_intern(m, w->c, w->base + 1, w->base, w->path);
		w->path[1] = s1;
		l.anchor = w->base + 1;
		l.have = false;
		bool root_s1 = s1 != ST_DEAD && n_exc == 0 && like_root(m, w->base, cands[best].items, cands[best].n);
		if (s1 != ST_DEAD && (root_s1 || chars_ok(&l)) && gmm_push(m, gm_shapes[0].lo[0])) {
			bool s2_s1 = root_s1 || (l.n_want == cands[best].n &&
						 !memcmp(l.want, cands[best].items, l.n_want * sizeof *l.want));
			if (s2_s1 || chars_ok(&l))
				s2 = gmm_intern(m, w->c, w->base + 2, w->base, w->path);
			gmm_pop(m);
		}
		gmm_pop(m);
	}
	for (int c = 0; c < nc; c++)
		free(cands[c].items);
	free(l.want);
	free(l.tmp);
	struct st *r = &w->c->st[w->path[0]];
	r->rloop = s1 != ST_DEAD && s2 != ST_DEAD ? LOOP_YES : LOOP_NO;
	r->one = best >= 0 && n_exc == 0 && !m->oom;
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
		gmm_step(w, c, 0);
	}
}

/* The mask of a root that loops: the plain tokens, the head walked from
 * the root, the tails from S1 and S2, then the exceptions afresh. */
void gmm_loop_mask(struct walk *w, size_t words)
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
		gmm_walk(w, &w->nodes[0], d);
		gmm_pop_to(w, 0);
	}
	w->nodes = v->nodes;
	w->toks = v->toks;
	w->below = v->plain_below != NULL;
	uint64_t exc[4];
	memcpy(exc, w->c->st[w->path[0]].exc, sizeof exc); /* st may move */
	if ((exc[0] | exc[1] | exc[2] | exc[3]) && !m->oom)
		root_exceptions(w, exc);
}
