/* daemon/engine/logprob.h — a sampled token's log-probability under the
 * model's distribution (the raw logits' log-softmax, before the sampler's
 * penalties, truncation and temperature: what OpenAI's and vLLM's
 * `logprobs` report). */
#ifndef PAGODA_LOGPROB_H
#define PAGODA_LOGPROB_H

#include <stdint.h>

float logprob_of(const float *logits, int n_vocab, int32_t tok);

#endif
