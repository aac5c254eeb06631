/* daemon/engine/logprob.c — log-softmax at one token, in double so that a
 * vocabulary of 150k logits sums without losing the small terms. */
#include "daemon/engine/logprob.h"

#include <math.h>

float logprob_of(const float *logits, int n_vocab, int32_t tok)
{
	float max = logits[0];
	for (int i = 1; i < n_vocab; i++)
		if (logits[i] > max)
			max = logits[i];
	double sum = 0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - max);
	return (float)((double)logits[tok] - max - log(sum));
}
