/* daemon/engine/sampler.c — the sampling chain, in llama.cpp's order:
 * penalties (repetition, then presence and frequency), top-k, top-p,
 * min-p, temperature, draw. */
#include "daemon/engine/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampling_defaults(struct sampling *s)
{
	s->temp = 0.8f;
	s->top_k = 40;
	s->top_p = 0.95f;
	s->min_p = 0.05f;
	s->repeat_penalty = 1.0f;
	s->repeat_last_n = 64;
	s->seed = 0xdeadbeefULL;
	s->presence_penalty = 0;
	s->frequency_penalty = 0;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static uint64_t next_u64(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

int sampler_init(struct sampler *s, const struct sampling *p, int n_vocab)
{
	memset(s, 0, sizeof *s);
	s->p = *p;
	s->n_vocab = n_vocab;
	uint64_t seed = p->seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&seed);
	if (p->temp > 0) {
		s->idx = malloc(n_vocab * sizeof *s->idx);
		s->val = malloc(n_vocab * sizeof *s->val);
		if (!s->idx || !s->val) {
			sampler_free(s);
			return -ENOMEM;
		}
	}
	if (p->presence_penalty != 0 || p->frequency_penalty != 0) {
		s->count = calloc(n_vocab, sizeof *s->count);
		if (!s->count) {
			sampler_free(s);
			return -ENOMEM;
		}
	}
	return 0;
}

void sampler_free(struct sampler *s)
{
	free(s->idx);
	free(s->val);
	free(s->count);
	s->idx = NULL;
	s->val = NULL;
	s->count = NULL;
}

/* The first index of the largest logit, NaNs never chosen (unless the
 * first one is NaN: a plain scan keeps index 0 then). Two passes instead
 * of one chained on logits[best]: eight independent maxima vectorise and
 * a vocabulary of 32000 takes a few microseconds, not a hundred. */
int32_t sampler_argmax(const float *logits, int n)
{
	if (n <= 0 || isnan(logits[0]))
		return 0;
	float m[8];
	for (int j = 0; j < 8; j++)
		m[j] = logits[0];
	int i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
	for (; i < n; i++)
		m[0] = logits[i] > m[0] ? logits[i] : m[0];
	float best = m[0];
	for (int j = 1; j < 8; j++)
		best = m[j] > best ? m[j] : best;
	for (i = 0; i < n; i++)
		if (logits[i] == best)
			break;
	return i;
}

/* llama.cpp's repetition penalty: each distinct recent token once. */
static void apply_penalty(struct sampler *s, float *logits, const int32_t *hist, int n_hist)
{
	float pen = s->p.repeat_penalty;
	if (pen == 1.0f || s->p.repeat_last_n == 0)
		return;
	int from = s->p.repeat_last_n < 0 || n_hist < s->p.repeat_last_n ? 0 : n_hist - s->p.repeat_last_n;
	for (int i = from; i < n_hist; i++) {
		int32_t t = hist[i];
		if (t < 0 || t >= s->n_vocab)
			continue;
		bool seen = false;
		for (int j = from; j < i && !seen; j++)
			seen = hist[j] == t;
		if (seen)
			continue;
		logits[t] = logits[t] > 0 ? logits[t] / pen : logits[t] * pen;
	}
}

/* OpenAI's presence and frequency penalties over the output so far;
 * counts are cleared on the way out, so a call costs O(output). */
static void apply_oai_penalties(struct sampler *s, float *logits, const int32_t *hist, int n_hist)
{
	if (!s->count)
		return;
	int from = s->gen_from < n_hist ? s->gen_from : n_hist;
	for (int i = from; i < n_hist; i++)
		if (hist[i] >= 0 && hist[i] < s->n_vocab)
			s->count[hist[i]]++;
	for (int i = from; i < n_hist; i++) {
		int32_t t = hist[i];
		if (t < 0 || t >= s->n_vocab || !s->count[t])
			continue;
		logits[t] -= (float)s->count[t] * s->p.frequency_penalty + s->p.presence_penalty;
		s->count[t] = 0;
	}
}

static int by_logit_desc(const void *a, const void *b, void *logits)
{
	const float *l = logits;
	float x = l[*(const int32_t *)a], y = l[*(const int32_t *)b];
	if (x != y)
		return x < y ? 1 : -1;
	return *(const int32_t *)a - *(const int32_t *)b;
}

/* Candidates sorted by logit; returns how many survive top-k. Sorting is
 * partial when top-k is set: selection of the k best, then a sort. */
static int sorted_candidates(struct sampler *s, float *logits)
{
	int n = s->n_vocab, k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
	int m = 0;
	if (k < n) {
		/* threshold: the k-th largest, by a partial selection over a copy */
		memcpy(s->val, logits, n * sizeof(float));
		int lo = 0, hi = n - 1, want = k - 1;
		while (lo < hi) {
			float pivot = s->val[(lo + hi) / 2];
			int i = lo, j = hi;
			while (i <= j) {
				while (s->val[i] > pivot) i++;
				while (s->val[j] < pivot) j--;
				if (i <= j) {
					float t = s->val[i]; s->val[i] = s->val[j]; s->val[j] = t;
					i++; j--;
				}
			}
			if (want <= j) hi = j;
			else if (want >= i) lo = i;
			else break;
		}
		float thr = s->val[want];
		for (int i = 0; i < n && m < n; i++)
			if (logits[i] >= thr)
				s->idx[m++] = i;
	} else {
		for (int i = 0; i < n; i++)
			s->idx[m++] = i;
	}
	qsort_r(s->idx, m, sizeof *s->idx, by_logit_desc, logits);
	return m < k ? m : k;
}

/* The truncation chain after top-k (the m sorted candidates): top-p and
 * min-p on probabilities at temperature 1, as llama.cpp; leaves the
 * survivors' weights at the sampling temperature in s->val, returns how
 * many survive and their sum in *sum. */
static int truncate_chain(struct sampler *s, const float *logits, int m, double *sum_out)
{
	/* probabilities at temperature 1 for top-p and min-p, as llama.cpp */
	float maxl = logits[s->idx[0]];
	double sum = 0;
	for (int i = 0; i < m; i++)
		sum += (s->val[i] = expf(logits[s->idx[i]] - maxl));
	if (s->p.top_p < 1.0f) {
		double cum = 0;
		for (int i = 0; i < m; i++) {
			cum += s->val[i] / sum;
			if (cum >= s->p.top_p) {
				m = i + 1;
				break;
			}
		}
	}
	if (s->p.min_p > 0) {
		int keep = 1;
		while (keep < m && s->val[keep] >= s->p.min_p * s->val[0])
			keep++;
		m = keep;
	}
	sum = 0;
	for (int i = 0; i < m; i++)
		sum += (s->val[i] = expf((logits[s->idx[i]] - maxl) / s->p.temp));
	*sum_out = sum;
	return m;
}

int32_t sampler_sample(struct sampler *s, float *logits, const int32_t *history, int n_history)
{
	apply_penalty(s, logits, history, n_history);
	apply_oai_penalties(s, logits, history, n_history);
	if (s->p.temp <= 0)
		return sampler_argmax(logits, s->n_vocab);
	int m = sorted_candidates(s, logits);
	/* a constraint's -inf logits never make the cut, even by rounding */
	while (m > 1 && logits[s->idx[m - 1]] == -INFINITY)
		m--;
	double sum;
	m = truncate_chain(s, logits, m, &sum);
	double r = (double)(next_u64(s->rng) >> 11) * 0x1.0p-53 * sum;
	for (int i = 0; i < m; i++) {
		r -= s->val[i];
		if (r < 0)
			return s->idx[i];
	}
	return s->idx[m - 1];
}

void sampler_dist(struct sampler *s, float *logits, const int32_t *history, int n_history, float *p)
{
	apply_penalty(s, logits, history, n_history);
	apply_oai_penalties(s, logits, history, n_history);
	memset(p, 0, s->n_vocab * sizeof *p);
	if (s->p.temp <= 0) {
		p[sampler_argmax(logits, s->n_vocab)] = 1;
		return;
	}
	/* sampler_sample's chain, kept as weights instead of drawn from */
	double sum;
	int m = truncate_chain(s, logits, sorted_candidates(s, logits), &sum);
	for (int i = 0; i < m; i++)
		p[s->idx[i]] = (float)(s->val[i] / sum);
}

double sampler_uniform(struct sampler *s)
{
	return (double)(next_u64(s->rng) >> 11) * 0x1.0p-53;
}

int32_t sampler_draw(struct sampler *s, const float *w, int n)
{
	double sum = 0;
	int last = 0;
	for (int i = 0; i < n; i++)
		if (w[i] > 0) {
			sum += w[i];
			last = i;
		}
	double r = sampler_uniform(s) * sum;
	for (int i = 0; i < n; i++) {
		if (w[i] <= 0)
			continue;
		r -= w[i];
		if (r < 0)
			return i;
	}
	return last;
}
