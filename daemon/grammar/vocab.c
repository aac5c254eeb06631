/* daemon/grammar/vocab.c — the vocabulary as a byte trie, built once per
 * model: tokens sharing a prefix share the parser work for it. */
#include "daemon/grammar/gm_int.h"

#include <stdlib.h>
#include <string.h>

static int by_bytes(const void *a, const void *b, void *arg)
{
	const struct gm_vocab *v = arg;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	uint32_t lx = v->len[x], ly = v->len[y];
	int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
	if (c)
		return c;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return x < y ? -1 : 1;
}

static void build(struct gm_vocab *v, uint32_t node, uint32_t lo, uint32_t hi, uint32_t depth)
{
	struct gm_node *n = &v->nodes[node];
	n->tok = lo;

	while (lo < hi && v->len[v->toks[lo]] == depth)
		lo++;
	n->n_tok = (uint16_t)(lo - n->tok);
	int groups = 0;
	for (uint32_t i = lo; i < hi; i++)
		if (i == lo || v->blob[v->off[v->toks[i]] + depth] != v->blob[v->off[v->toks[i - 1]] + depth])
			groups++;
	n->child = (uint32_t)v->n_nodes;
	n->n_child = (uint16_t)groups;
	v->n_nodes += groups;
	uint32_t c = n->child;
	for (uint32_t i = lo; i < hi;) {
		uint8_t byte = (uint8_t)v->blob[v->off[v->toks[i]] + depth];
		uint32_t j = i;
		while (j < hi && (uint8_t)v->blob[v->off[v->toks[j]] + depth] == byte)
			j++;
		v->nodes[c].byte = byte;
		build(v, c, i, j, depth + 1);
		c++;
		i = j;
	}
}

struct gm_vocab *gm_vocab_new(int n_vocab, const char *const *pieces, const int *lens,
			      const bool *eog)
{
	struct gm_vocab *v = calloc(1, sizeof *v);
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
	v->toks = malloc(n_vocab * sizeof *v->toks);
	v->nodes = calloc(total + 1, sizeof *v->nodes);
	if (!v->blob || !v->off || !v->len || !v->eog || !v->eog_ids || !v->toks || !v->nodes)
		goto fail;
	size_t at = 0;
	int n = 0;
	for (int i = 0; i < n_vocab; i++) {
		int l = lens[i] > 0 ? lens[i] : 0;
		memcpy(v->blob + at, pieces[i], l);
		v->off[i] = (uint32_t)at;
		v->len[i] = (uint32_t)l;
		at += l;
		if (eog && eog[i]) {
			v->eog[i] = 1;
			v->eog_ids[v->n_eog++] = i;
		} else if (l > 0) {
			v->toks[n++] = i;
		}
	}
	qsort_r(v->toks, n, sizeof *v->toks, by_bytes, v);
	/* identical pieces share a node: n_tok counts them (at most 65535) */
	v->n_nodes = 1;
	build(v, 0, 0, (uint32_t)n, 0);
	return v;
fail:
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
	free(v);
}

int gm_vocab_size(const struct gm_vocab *v)
{
	return v->n_vocab;
}
