/* daemon/engine/spec_rule.c — the acceptance rule and the adaptive draft
 * length of speculative decoding (spec.h). */
#include "daemon/engine/sampler.h"
#include "daemon/engine/spec.h"

#include <string.h>

const char *engine_spec_name(enum engine_spec k)
{
	switch (k) {
	case ENGINE_SPEC_DEFAULT: return "default";
	case ENGINE_SPEC_OFF: return "off";
	case ENGINE_SPEC_NGRAM: return "ngram";
	case ENGINE_SPEC_DRAFT: return "draft";
	}
	return "?";
}

int engine_spec_parse(const char *s)
{
	if (!s)
		return -1;
	if (!strcmp(s, "off") || !strcmp(s, "none"))
		return ENGINE_SPEC_OFF;
	if (!strcmp(s, "ngram"))
		return ENGINE_SPEC_NGRAM;
	if (!strcmp(s, "draft"))
		return ENGINE_SPEC_DRAFT;
	return -1;
}

int spec_verify(struct sampler *smp, float *rows, int n_vocab, const int32_t *drafts, const float *q, int k,
		int32_t *hist, int n_hist, float *work)
{
	float *p = work, *r = work + n_vocab;
	for (int j = 0;; j++) {
		float *row = rows + (size_t)j * n_vocab;
		int32_t *out = &hist[n_hist + j];
		if (smp->p.temp <= 0) {
			/* what decoding one token at a time picks from this row */
			*out = sampler_sample(smp, row, hist, n_hist + j);
			if (j == k || *out != drafts[j])
				return j + 1;
			continue;
		}
		sampler_dist(smp, row, hist, n_hist + j, p);
		if (j == k) {
			*out = sampler_draw(smp, p, n_vocab);
			return j + 1;
		}
		const int32_t x = drafts[j];
		const float *qj = q ? q + (size_t)j * n_vocab : NULL;
		const float qx = qj ? qj[x] : 1.0f;
		if (qx > 0 && sampler_uniform(smp) * qx < p[x]) {
			*out = x;
			continue;
		}
		/* rejected: the rest of p that q did not already cover */
		bool any = false;
		for (int i = 0; i < n_vocab; i++) {
			float d = p[i] - (qj ? qj[i] : (float)(i == x));
			r[i] = d > 0 ? d : 0;
			any = any || r[i] > 0;
		}
		*out = sampler_draw(smp, any ? r : p, n_vocab);
		return j + 1;
	}
}

void spec_pace_init(struct spec_pace *p, int max)
{
	*p = (struct spec_pace){ .max = max, .k = max < 4 ? max : 4, .pause_len = 8 };
}

int spec_pace_want(struct spec_pace *p)
{
	if (p->pause > 0) {
		p->pause--;
		return 0;
	}
	return p->k;
}

/* What a pass that kept nothing weighs toward a pause (three of them),
 * and an empty answer of a costly drafter: a third of one until a draft
 * has stood, a sixth after. A real draft model is unsure now and then (at
 * the start of a story, of a sentence) and worth asking through a run of
 * empty answers; one that never drafts is paused after nine. */
#define MISS 6
#define EMPTY_COLD 2
#define EMPTY 1

/* Grow while every draft stands; cut to one past what stood; after three
 * passes that kept nothing, stop drafting for a while; the pass after a
 * pause is a probe, and if it keeps nothing too the next pause is twice as
 * long, so a sequence the drafter cannot guess pays for a probe now and
 * then, not every pass. k = 0: a costly drafter was asked and had
 * nothing. */
void spec_pace_update(struct spec_pace *p, int k, int acc)
{
	if (k < 0)
		return;
	if (k > 0)
		p->stood = acc == k;
	if (k > 0 && acc == k) {
		int base = p->k > k ? p->k : k;
		p->k = base + 2 < p->max ? base + 2 : p->max;
	} else if (k > 0) {
		p->k = acc + 1;
	}
	if (acc > 0) {
		p->hit = true;
		p->misses = 0;
		p->pause_len = 8;
	} else if ((p->misses += k ? MISS : p->hit ? EMPTY : EMPTY_COLD) >= 3 * MISS) {
		p->misses = 3 * MISS - 1;
		p->pause = p->pause_len;
		p->pause_len = p->pause_len < 128 ? p->pause_len * 2 : 256;
	}
}
