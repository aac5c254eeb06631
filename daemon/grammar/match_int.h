/* daemon/grammar/match_int.h — the matcher's insides, shared by its three
 * files: match.c (the Earley matcher), mask.c (the mask walk, its state
 * cache and masks by content) and loop.c (states that loop on string
 * characters: the walk's shortcuts). */
#ifndef PAGODA_MATCH_INT_H
#define PAGODA_MATCH_INT_H

#include "daemon/grammar/gm_int.h"

#include <stdlib.h>

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
	bool run_cut;    /* run stopped at the length looked for: a lower bound */
	bool one;        /* known to take every string character to one state */
	uint8_t rloop;   /* as a root: root_check's verdict */
	uint32_t s1, s2; /* rloop LOOP_YES: the states after one, two characters */
	uint32_t grp;    /* offset of its bytes' representatives in stc.grp, GRP_NONE */
	uint8_t misses;  /* transitions built from it, up to 2 */
	uint8_t hot;     /* its transitions looked up, up to ROW_HOT */
	uint32_t row;    /* its row in stc.rows, ROW_NONE */
	uint8_t uyes;    /* takes every run of string characters this many bytes long */
	uint8_t uno;     /* a run this long it does not take, UINT8_MAX */
	uint8_t uwip;    /* the run length a proof in progress claims for it, 0 */
	bool utent;      /* uyes leans on a proof not done yet (undone if it fails) */
	uint16_t ud;     /* the depth its claim in progress is at */
	uint64_t exc[4]; /* rloop LOOP_YES: first bytes that do not lead to s1 */
	uint64_t cls[2]; /* the ASCII characters it takes back to itself, bit 0:
			  * every multi-byte one (as gm_vocab.bytes_below) */
	bool cls_known;
};

#define GRP_NONE UINT32_MAX
/* A state looked up this often gets a row: its transitions by byte, one
 * load instead of a hash probe (the walk's cost per node). */
#define ROW_HOT 8
#define ROW_MAX 16384 /* rows (1 KiB each) per cache */
#define ROW_NONE UINT32_MAX
#define ROW_UNKNOWN (UINT32_MAX - 1)
#define RUN_UNKNOWN 0xFF
#define RUN_MAX 40 /* the longest run looked for: taller subtrees are walked */

/* origins in a set's position-independent items (loop checks, codes) */
#define C_ROOT 0xFFFFFFFFu
#define C_SELF 0xFFFFFFFEu
#define C_ANCHOR 0xFFFFFFFDu

#define MASKS 64
/* What a root's proof that every run of characters is taken may cost, in
 * items built (a transition looked up: 1); one cut short is resumed by
 * the next root, what it proved kept. */
#define UNIV_BUDGET 20000
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
	uint32_t *rows; /* per hot state: its transitions by byte, ROW_UNKNOWN if not looked up */
	size_t n_rows, cap_rows;
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
	size_t work; /* items sets were built with, for the proofs' budgets */
	struct stc cache; /* the mask walk's states, below */
	size_t cache_hi;  /* the highest real set a cached state may name */
	uint32_t *scode;  /* per set: its content code, SC_NONE until known */
	struct byn **byn; /* per set: its items by the nonterminal after the dot, or NULL */
	struct codes codes;
	uint32_t *masks;  /* the last masks (without end-of-generation) */
	uint32_t mkey[MASKS]; /* their roots' codes */
	int n_masks, next_mask;
};

struct walk {
	struct gm_matcher *m;
	const struct gm_vocab *v;
	const struct gm_node *nodes; /* the trie walked */
	const int32_t *toks;
	struct stc *c;
	uint32_t *mask;
	size_t base;     /* the real set the walk starts from */
	bool below;      /* whole subtrees may be taken where the state loops */
	int budget;      /* what the root's proof may still cost */
	bool univ_root;  /* the root takes every run of characters: plain tokens allowed */
	struct undo { uint32_t s; uint8_t uyes; } *undo; /* what the root's proof leans on */
	size_t n_undo, cap_undo;
	uint32_t path[1024]; /* state by depth */
	uint8_t bytes[1024]; /* the byte taken at each depth */
};

/* match.c */
bool gmm_set_push(struct gm_matcher *m);
/* Scan byte c from the last set into a new one: false if none takes it. */
bool gmm_push(struct gm_matcher *m, uint8_t c);
uint32_t gmm_code_pos(const struct gm_matcher *m, uint32_t pos);
/* Sort items and drop repeats: counts coded alike may repeat. */
size_t gmm_sort_unique(uint64_t *a, size_t n);

static inline void gmm_pop(struct gm_matcher *m)
{
	m->n_it = m->sets[--m->n_sets];
	if (m->byn[m->n_sets]) {
		free(m->byn[m->n_sets]);
		m->byn[m->n_sets] = NULL;
	}
}

/* Drop the real sets deeper than depth d of the walk. */
static inline void gmm_pop_to(struct walk *w, size_t d)
{
	while (w->m->n_sets - 1 > w->base + d)
		gmm_pop(w->m);
}

/* mask.c */
void gmm_stc_clear(struct stc *c);
void gmm_stc_free(struct stc *c);
/* The state of set k, at or below the walk's root b (path: states by depth). */
uint32_t gmm_intern(struct gm_matcher *m, struct stc *c, size_t k, size_t b, const uint32_t *path);
/* Build the real sets of the path down to depth d from their states. */
bool gmm_materialize(struct walk *w, size_t d);
/* The state after byte from the state at depth d: known, or built from
 * the path's real sets (materialized down to d). ST_DEAD if none. */
uint32_t gmm_trans(struct walk *w, size_t d, uint8_t byte);
/* Where the byte representatives of the state at depth d start in
 * stc.grp (bytes scanned by the same items), GRP_NONE on OOM. */
uint32_t gmm_reps(struct walk *w, size_t d);
/* Take node c from depth d if its byte is allowed there, and walk on. */
void gmm_step(struct walk *w, const struct gm_node *c, size_t d);
void gmm_walk(struct walk *w, const struct gm_node *n, size_t d);

/* loop.c */
/* Node c (at depth d) is taken: its subtree's tokens allowed without a
 * walk where the state loops, or takes a run as long as the subtree. */
bool gmm_loops_below(struct walk *w, const struct gm_node *c, size_t d);
/* Whether the walk's root loops (its rloop, s1, s2, exc). */
void gmm_root_check(struct walk *w);
/* Whether the root takes every run of characters a token long. */
bool gmm_univ_root(struct walk *w);
/* The mask of a root that loops. */
void gmm_loop_mask(struct walk *w, size_t words);

#endif
