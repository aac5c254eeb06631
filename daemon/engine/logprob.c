/* daemon/engine/logprob.c — log-softmax at one token, in double so that a
 * vocabulary of 150k logits sums without losing the small terms; and the
 * most likely tokens of a row, for top_logprobs. */
#include "daemon/engine/logprob.h"

#include <math.h>

/* The row's max and log-sum-exp around it. */
static void row_norm(const float *logits, int n_vocab, float *max_out, double *lse)
{
	float max = logits[0];
	for (int i = 1; i < n_vocab; i++)
		if (logits[i] > max)
			max = logits[i];
	double sum = 0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - max);
	*max_out = max;
	*lse = log(sum);
}

/* The k largest logits, largest first; among equal ones the lower id. */
static int top_k(const float *logits, int n_vocab, int k, int32_t *ids)
{
	int n = 0;
	for (int i = 0; i < n_vocab; i++) {
		float v = logits[i];
		if (n == k && !(v > logits[ids[k - 1]]))
			continue;
		int j = n < k ? n++ : k - 1;
		while (j > 0 && v > logits[ids[j - 1]]) {
			ids[j] = ids[j - 1];
			j--;
		}
		ids[j] = i;
	}
	return n;
}

void logprob_fill(struct engine_req *r, const float *logits, int n_vocab, int32_t tok)
{
	float max;
	double lse;
	row_norm(logits, n_vocab, &max, &lse);
	r->logprob = (float)((double)logits[tok] - max - lse);
	int k = r->top_logprobs < ENGINE_TOP_LOGPROBS ? r->top_logprobs : ENGINE_TOP_LOGPROBS;
	r->n_top = k > 0 ? top_k(logits, n_vocab, k, r->top_ids) : 0;
	for (int i = 0; i < r->n_top; i++)
		r->top_lp[i] = (float)((double)logits[r->top_ids[i]] - max - lse);
}
