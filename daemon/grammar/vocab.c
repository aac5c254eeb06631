/* daemon/grammar/vocab.c — the vocabulary as byte tries, built once per
 * model: tokens sharing a prefix share the parser work for it. Besides the
 * whole trie, a split for states that loop on JSON string characters:
 * tokens made of such characters only, and tries of the rest by tail. */
#include "daemon/grammar/gm_int.h"

#include <stdlib.h>
#include <string.h>

const struct gm_shape gm_shapes[GM_N_SHAPES] = {
	{ 1, { 0x20 }, { 0x21 } },
	{ 1, { 0x23 }, { 0x5B } },
	{ 1, { 0x5D }, { 0x7F } },
	{ 2, { 0xC2, 0x80 }, { 0xDF, 0xBF } },
	{ 3, { 0xE0, 0xA0, 0x80 }, { 0xE0, 0xBF, 0xBF } },
	{ 3, { 0xE1, 0x80, 0x80 }, { 0xEC, 0xBF, 0xBF } },
	{ 3, { 0xED, 0x80, 0x80 }, { 0xED, 0x9F, 0xBF } },
	{ 3, { 0xEE, 0x80, 0x80 }, { 0xEF, 0xBF, 0xBF } },
	{ 4, { 0xF0, 0x90, 0x80, 0x80 }, { 0xF0, 0xBF, 0xBF, 0xBF } },
	{ 4, { 0xF1, 0x80, 0x80, 0x80 }, { 0xF3, 0xBF, 0xBF, 0xBF } },
	{ 4, { 0xF4, 0x80, 0x80, 0x80 }, { 0xF4, 0x8F, 0xBF, 0xBF } },
};

int gm_char_len(const uint8_t *p, size_t n)
{
	for (int s = 0; s < GM_N_SHAPES; s++) {
		const struct gm_shape *sh = &gm_shapes[s];
		if (n < sh->n || p[0] < sh->lo[0] || p[0] > sh->hi[0])
			continue;
		for (int i = 1; i < sh->n; i++)
			if (p[i] < sh->lo[i] || p[i] > sh->hi[i])
				return 0;
		return sh->n;
	}
	return 0;
}

/* The n bytes at p begin a string character without ending it. */
static bool char_start(const uint8_t *p, size_t n)
{
	for (int s = 0; s < GM_N_SHAPES; s++) {
		const struct gm_shape *sh = &gm_shapes[s];
		if (n == 0 || n >= sh->n || p[0] < sh->lo[0] || p[0] > sh->hi[0])
			continue;
		for (size_t i = 1; i < n; i++)
			if (p[i] < sh->lo[i] || p[i] > sh->hi[i])
				return false;
		return true;
	}
	return false;
}

/* A token's bytes, or the tail of them a trie holds. */
struct ent {
	uint32_t off, len;
	int32_t id;
};

static int by_bytes(const void *a, const void *b, void *arg)
{
	const char *blob = arg;
	const struct ent *x = a, *y = b;
	int c = memcmp(blob + x->off, blob + y->off, x->len < y->len ? x->len : y->len);
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : 1;
}

struct tb {
	struct gm_trie *t;
	const struct ent *e;
	const uint8_t *blob;
	bool over; /* a node would hold more than 65535 tokens */
};

static void build(struct tb *b, uint32_t node, uint32_t lo, uint32_t hi, uint32_t depth)
{
	struct gm_trie *t = b->t;
	const struct ent *e = b->e;
	struct gm_node *n = &t->nodes[node];
	n->tok = lo;
	while (lo < hi && e[lo].len == depth)
		lo++;
	if (lo - n->tok > UINT16_MAX)
		b->over = true;
	n->n_tok = (uint16_t)(lo - n->tok);
	int groups = 0;
	for (uint32_t i = lo; i < hi; i++)
		if (i == lo || b->blob[e[i].off + depth] != b->blob[e[i - 1].off + depth])
			groups++;
	n->child = (uint32_t)t->n_nodes;
	n->n_child = (uint16_t)groups;
	t->n_nodes += groups;
	uint32_t c = n->child;
	for (uint32_t i = lo; i < hi;) {
		uint8_t byte = b->blob[e[i].off + depth];
		uint32_t j = i;
		while (j < hi && b->blob[e[j].off + depth] == byte)
			j++;
		t->nodes[c].byte = byte;
		build(b, c, i, j, depth + 1);
		c++;
		i = j;
	}
}

static void trie_free(struct gm_trie *t)
{
	free(t->nodes);
	free(t->toks);
	memset(t, 0, sizeof *t);
}

/* The trie of n entries (sorted here); false when out of memory (toks
 * NULL) or when a node would hold more than 65535 tokens. */
static bool trie_new(struct gm_trie *t, struct ent *e, uint32_t n, const char *blob)
{
	size_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += e[i].len;
	t->nodes = calloc(total + 1, sizeof *t->nodes);
	t->toks = malloc((n ? n : 1) * sizeof *t->toks);
	if (!t->nodes || !t->toks) {
		trie_free(t);
		return false;
	}
	qsort_r(e, n, sizeof *e, by_bytes, (void *)blob);
	for (uint32_t i = 0; i < n; i++)
		t->toks[i] = e[i].id;
	struct tb b = { .t = t, .e = e, .blob = (const uint8_t *)blob };
	t->n_nodes = 1;
	build(&b, 0, 0, n, 0);
	return !b.over;
}

/* Split the tokens by their longest run of string characters: all of it,
 * or all but the start of one more character (plain: a state that takes
 * every character takes those too), one or more characters (tail1,
 * tail2: the rest after the run), none (head). */
static bool split(struct gm_vocab *v, const struct ent *all, uint32_t n)
{
	size_t sz = (n ? n : 1) * sizeof(struct ent);
	struct ent *t1 = malloc(sz), *t2 = malloc(sz), *head = malloc(sz);
	v->plain = calloc(((size_t)v->n_vocab + 31) / 32, sizeof *v->plain);
	bool ok = t1 && t2 && head && v->plain;
	uint32_t n1 = 0, n2 = 0, nh = 0;
	for (uint32_t i = 0; ok && i < n; i++) {
		const uint8_t *p = (const uint8_t *)v->blob + all[i].off;
		uint32_t run = 0, chars = 0;
		for (int k; run < all[i].len && (k = gm_char_len(p + run, all[i].len - run)); run += k)
			chars++;
		if (run == all[i].len || char_start(p + run, all[i].len - run)) {
			v->plain[all[i].id >> 5] |= 1u << (all[i].id & 31);
			v->n_plain++;
		} else if (chars == 1) {
			t1[n1++] = (struct ent){ all[i].off + run, all[i].len - run, all[i].id };
		} else if (chars) {
			t2[n2++] = (struct ent){ all[i].off + run, all[i].len - run, all[i].id };
		} else {
			head[nh++] = all[i];
		}
	}
	ok = ok && trie_new(&v->tail1, t1, n1, v->blob) && trie_new(&v->tail2, t2, n2, v->blob) &&
	     trie_new(&v->head, head, nh, v->blob);
	free(t1);
	free(t2);
	free(head);
	if (!ok) {
		free(v->plain);
		v->plain = NULL;
		trie_free(&v->tail1);
		trie_free(&v->tail2);
		trie_free(&v->head);
	}
	return ok;
}

/* From node n on, byte i of a character of shape sh: it completes in every
 * token below and what follows it is plain. */
static bool char_below(const struct gm_vocab *v, const struct gm_node *n, const struct gm_shape *sh, int i)
{
	if (i == sh->n - 1)
		return v->plain_below[n - v->nodes];
	if (n->n_tok)
		return false;
	for (int j = 0; j < n->n_child; j++) {
		const struct gm_node *c = &v->nodes[n->child + j];
		if (c->byte < sh->lo[i + 1] || c->byte > sh->hi[i + 1] || !char_below(v, c, sh, i + 1))
			return false;
	}
	return true;
}

/* Children come after their parent: fill both arrays from the end. */
static bool below(struct gm_vocab *v)
{
	v->sub_end = malloc(v->n_nodes * sizeof *v->sub_end);
	v->plain_below = malloc(v->n_nodes);
	v->height = malloc(v->n_nodes);
	v->bytes_below = malloc(v->n_nodes * sizeof *v->bytes_below);
	if (!v->sub_end || !v->plain_below || !v->height || !v->bytes_below) {
		free(v->sub_end);
		free(v->plain_below);
		free(v->height);
		free(v->bytes_below);
		v->sub_end = NULL;
		v->plain_below = NULL;
		v->height = NULL;
		v->bytes_below = NULL;
		return false;
	}
	for (size_t k = v->n_nodes; k-- > 0;) {
		const struct gm_node *n = &v->nodes[k];
		v->sub_end[k] = n->n_child ? v->sub_end[n->child + n->n_child - 1] : n->tok + n->n_tok;
		int h = 0;
		for (int j = 0; j < n->n_child; j++)
			if (v->height[n->child + j] + 1 > h)
				h = v->height[n->child + j] + 1;
		v->height[k] = h > 255 ? 255 : (uint8_t)h;
		uint64_t *bb = v->bytes_below[k];
		bb[0] = bb[1] = 0;
		for (int j = 0; j < n->n_child; j++) {
			const struct gm_node *c = &v->nodes[n->child + j];
			bb[0] |= v->bytes_below[n->child + j][0] | (c->byte < 64 ? 1ull << c->byte : c->byte >= 128);
			bb[1] |= v->bytes_below[n->child + j][1] | (c->byte >= 64 && c->byte < 128 ? 1ull << (c->byte - 64) : 0);
		}
		bool ok = true;
		for (int j = 0; j < n->n_child && ok; j++) {
			const struct gm_node *c = &v->nodes[n->child + j];
			int s = 0;
			while (s < GM_N_SHAPES && (c->byte < gm_shapes[s].lo[0] || c->byte > gm_shapes[s].hi[0]))
				s++;
			ok = s < GM_N_SHAPES && char_below(v, c, &gm_shapes[s], 0);
		}
		v->plain_below[k] = ok;
	}
	return true;
}

struct gm_vocab *gm_vocab_new(int n_vocab, const char *const *pieces, const int *lens,
			      const bool *eog)
{
	struct gm_vocab *v = calloc(1, sizeof *v);
	struct ent *e = NULL;
	if (!v || n_vocab <= 0)
		goto fail;
	v->n_vocab = n_vocab;
	size_t total = 0;
	for (int i = 0; i < n_vocab; i++)
		total += lens[i] > 0 ? (size_t)lens[i] : 0;
	v->blob = malloc(total + 1);
	v->off = malloc(n_vocab * sizeof *v->off);
	v->len = malloc(n_vocab * sizeof *v->len);
	v->eog = calloc(n_vocab, 1);
	v->eog_ids = malloc(n_vocab * sizeof *v->eog_ids);
	e = malloc(n_vocab * sizeof *e);
	if (!v->blob || !v->off || !v->len || !v->eog || !v->eog_ids || !e)
		goto fail;
	size_t at = 0;
	uint32_t n = 0;
	for (int i = 0; i < n_vocab; i++) {
		int l = lens[i] > 0 ? lens[i] : 0;
		memcpy(v->blob + at, pieces[i], l);
		v->off[i] = (uint32_t)at;
		v->len[i] = (uint32_t)l;
		if ((uint32_t)l > v->max_len)
			v->max_len = (uint32_t)l;
		at += l;
		if (eog && eog[i]) {
			v->eog[i] = 1;
			v->eog_ids[v->n_eog++] = i;
		} else if (l > 0) {
			e[n++] = (struct ent){ v->off[i], (uint32_t)l, i };
		}
	}
	/* identical pieces share a node: n_tok counts them (at most 65535) */
	struct gm_trie all = { 0 };
	if (!trie_new(&all, e, n, v->blob) && !all.toks) {
		trie_free(&all);
		goto fail;
	}
	v->nodes = all.nodes;
	v->n_nodes = all.n_nodes;
	v->toks = all.toks;
	/* without these, masks take the whole trie */
	if (split(v, e, n))
		below(v);
	free(e);
	return v;
fail:
	free(e);
	gm_vocab_free(v);
	return NULL;
}

void gm_vocab_free(struct gm_vocab *v)
{
	if (!v)
		return;
	free(v->nodes);
	free(v->toks);
	free(v->blob);
	free(v->off);
	free(v->len);
	free(v->eog);
	free(v->eog_ids);
	free(v->plain);
	free(v->sub_end);
	free(v->plain_below);
	free(v->height);
	free(v->bytes_below);
	trie_free(&v->tail1);
	trie_free(&v->tail2);
	trie_free(&v->head);
	free(v);
}

int gm_vocab_size(const struct gm_vocab *v)
{
	return v->n_vocab;
}

int gm_vocab_longest(const struct gm_vocab *v)
{
	return (int)v->max_len;
}
