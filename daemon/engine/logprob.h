/* daemon/engine/logprob.h — a sampled token's log-probability under the
 * model's distribution (the raw logits' log-softmax, before the sampler's
 * penalties, truncation and temperature: what OpenAI's and vLLM's
 * `logprobs` report), and the row's most likely tokens. */
#ifndef PAGODA_LOGPROB_H
#define PAGODA_LOGPROB_H

#include <stdint.h>

#include "daemon/engine/engine.h"

/* Sets r->logprob, tok's log-probability, and, when r->top_logprobs > 0, r->top_ids,
 * r->top_lp and r->n_top from the same row. */
void logprob_fill(struct engine_req *r, const float *logits, int n_vocab, int32_t tok);

#endif
