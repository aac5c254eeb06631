/* daemon/engine/spec.h — speculative decoding's drafters and its
 * acceptance rule.
 *
 * A drafter guesses a sequence's next tokens cheaply; the engine puts them
 * in the step's ragged batch after the sequence's last token, with logits
 * wanted for each row, and keeps the longest prefix the model agrees with
 * (spec_verify), so one pass over the weights can give several tokens.
 * Every drafter sits behind struct spec_drafter: prompt lookup (n-gram,
 * spec_ngram.c), a draft model (spec_draft.c); a head that reads the
 * model's hidden state (MTP, EAGLE) would add a hook beside propose.
 * Drafters run on the engine thread, between steps.
 */
#ifndef PAGODA_SPEC_H
#define PAGODA_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/engine.h"

struct sampler;

/* One sequence's question to a drafter. */
struct spec_ask {
	void *state;             /* the sequence's, from open */
	const int32_t *tokens;   /* the sequence: prompt, then generated */
	int n_tokens;
	int max;                 /* 1 .. ENGINE_DRAFT_MAX */
	bool stood;              /* every draft of its last verified pass stood */
	const struct sampling *sampling; /* the request's; temp 0: greedy */
	int32_t *out;            /* [max]: the drafts */
	/* [max][n_vocab]: the distribution each draft was drawn from, filled
	 * by a drafter with has_q when sampling (temp > 0) */
	float *q;
	int n_out;               /* set by propose: 0 .. max */
};

struct spec_drafter {
	const char *name;
	/* Drafts are drawn from a distribution it reports (ask.q) when
	 * sampling; without it each draft is taken as certain (q = 1 there). */
	bool has_q;
	/* Asking costs a model pass even when no draft comes back (a draft
	 * model): the engine counts an empty answer toward a pause
	 * (spec_pace_update with k = 0), so such a sequence soon stops asking. */
	bool costly;
	uint64_t n_computed; /* tokens its own model computed: what drafting cost */
	/* Per-sequence state (*state may stay NULL); 0 or a negative errno. */
	int (*open)(struct spec_drafter *d, void **state, const struct sampling *sampling);
	void (*close)(struct spec_drafter *d, void *state);
	/* Drafts for n sequences at once, so a draft model batches them. A
	 * sequence's tokens may have changed anywhere past what the drafter
	 * last saw of them (rejected drafts are gone). */
	void (*propose)(struct spec_drafter *d, struct spec_ask *asks, int n);
	void (*destroy)(struct spec_drafter *d);
};

/* Prompt lookup: the longest recent n-gram (SPEC_NGRAM_MAX down to
 * SPEC_NGRAM_MIN tokens) ending the sequence that occurred earlier in it
 * proposes the tokens that followed that occurrence, at most half as many
 * as the tokens before them that agree with the sequence's end (as many
 * when stood: the sequence's last drafts all stood), and none past where
 * the occurrence before that one went on otherwise. */
#define SPEC_NGRAM_MAX 4
#define SPEC_NGRAM_MIN 2
int spec_ngram_create(struct spec_drafter **out);

/* The same search, for tests and benches: up to max tokens into out. */
int spec_ngram_lookup(const int32_t *tokens, int n, int max, bool stood, int32_t *out);

struct spec_draft_opts {
	const char *path;              /* the draft GGUF */
	const struct tokenizer *vocab; /* the target's: the draft's must equal it */
	const char *backend;           /* the target's backend ("cpu", "cuda") */
	int threads;
	int n_ctx, max_seqs, max_batch; /* as the target's engine */
};
/* A draft model with its own backend instance and KV pool. */
int spec_draft_create(const struct spec_draft_opts *o, struct spec_drafter **out, char *err, size_t errlen);

/* The acceptance rule over one sequence's k + 1 rows of logits (row j
 * follows the sequence and drafts[0, j)). hist holds the sequence
 * (n_hist tokens) and has room for k + 1 more: the tokens kept are written
 * there, and their count returned: the accepted drafts, then one token of
 * the model's (the correction at the first rejection, or one past the
 * last draft). Greedy: a draft stands when it is the row's argmax, so the
 * tokens are those decoding one at a time gives. Sampling (Leviathan et
 * al., Chen et al., 2023): draft x stands with probability min(1, p(x) /
 * q(x)); at the first that falls, the token is drawn from max(0, p - q)
 * renormalized; the output is distributed as the model's alone. q: the
 * drafts' distributions ([k][n_vocab]), or NULL for certain drafts. p is
 * the sampler's distribution (penalties, top-k/p, min-p, temperature).
 * work: 2 * n_vocab floats. */
int spec_verify(struct sampler *smp, float *rows, int n_vocab, const int32_t *drafts, const float *q, int k,
		int32_t *hist, int n_hist, float *work);

/* A sequence's draft length, adapted to how much of it is accepted. */
struct spec_pace {
	int max;      /* the request's limit */
	int k;        /* the next draft's length */
	int misses;   /* passes in a row that accepted nothing (spec_rule.c: MISS) */
	bool hit;     /* a draft has stood */
	bool stood;   /* every draft of the last pass that verified some stood */
	int pause;    /* passes left without drafting */
	int pause_len;
};
void spec_pace_init(struct spec_pace *p, int max);
/* Draft tokens to ask for now (0: none, this pass counts toward a pause). */
int spec_pace_want(struct spec_pace *p);
/* After a pass that verified k drafts and accepted acc of them; k = 0:
 * a costly drafter had nothing (a third of a miss until a draft has
 * stood, a sixth after). */
void spec_pace_update(struct spec_pace *p, int k, int acc);

#endif
