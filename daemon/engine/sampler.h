/* daemon/engine/sampler.h — turning logits into the next token: repetition,
 * presence and frequency penalties, top-k, top-p, min-p, temperature, then a seeded draw. With
 * temperature 0 it is greedy (the first maximum, as llama.cpp). */
#ifndef PAGODA_SAMPLER_H
#define PAGODA_SAMPLER_H

#include <stdint.h>

#include "daemon/engine/engine.h"

struct sampler {
	struct sampling p;
	uint64_t rng[4];
	int n_vocab;
	int32_t *idx;   /* candidate ids, n_vocab */
	float *val;     /* candidate logits/probs, n_vocab */
	int gen_from;   /* history[gen_from..] is output: presence/frequency penalties look there */
	int32_t *count; /* per token, zero between calls (with those penalties) */
};

int sampler_init(struct sampler *s, const struct sampling *p, int n_vocab);
void sampler_free(struct sampler *s);
/* history: the tokens so far (prompt and generated), for the penalty.
 * logits may be modified. */
int32_t sampler_sample(struct sampler *s, float *logits, const int32_t *history, int n_history);
int32_t sampler_argmax(const float *logits, int n);
/* The distribution sampler_sample draws from, dense: p[n_vocab] sums to 1
 * (greedy: 1 at the argmax). logits may be modified. */
void sampler_dist(struct sampler *s, float *logits, const int32_t *history, int n_history, float *p);
/* Uniform in [0, 1), from the sampler's stream. */
double sampler_uniform(struct sampler *s);
/* An index drawn in proportion to w[0, n) (w >= 0, not all 0). */
int32_t sampler_draw(struct sampler *s, const float *w, int n);

#endif
