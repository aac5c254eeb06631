/* daemon/engine/spec_ngram.c — prompt lookup: the sequence's last few
 * tokens, found earlier in it (prompt or output), propose what followed
 * them there. No model, no state: it pays where the output copies its
 * input (editing, quoting code, summaries that reuse phrases). */
#include "daemon/engine/spec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The latest earlier occurrence of the tail, longest tail first. What
 * follows it is read on past the end of the sequence into the proposal
 * itself, so a repeating stretch proposes its continuation. The proposal
 * is at most half as long as the stretch that matched there (the tail,
 * followed back while the two agree): a long match is a copy under way,
 * a short one often chance, and every draft that falls costs a row. While
 * the sequence's last drafts all stood (stood), a copy is under way and
 * the whole stretch may be proposed, so it regrows at once after an edit.
 * It stops where the occurrence of the tail before this one went on
 * otherwise: the sequence took both ways there, a guess either way. */
int spec_ngram_lookup(const int32_t *tokens, int n, int max, bool stood, int32_t *out)
{
	for (int g = n - 1 < SPEC_NGRAM_MAX ? n - 1 : SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
		const int32_t *tail = tokens + n - g;
		for (int i = n - g - 1; i >= 0; i--) {
			if (tokens[i] != tail[0] || memcmp(tokens + i, tail, g * sizeof *tokens))
				continue;
			int len = g;
			while (len < 2 * ENGINE_DRAFT_MAX && i + g - len > 0 &&
			       tokens[i + g - len - 1] == tokens[n - len - 1])
				len++;
			if (max > (stood ? len : len / 2))
				max = stood ? len : len / 2;
			int from = i + g;
			for (int c = 0; c < max; c++, from++)
				out[c] = from < n ? tokens[from] : out[from - n];
			for (int j = i - 1; j >= 0; j--) {
				if (tokens[j] != tail[0] || memcmp(tokens + j, tail, g * sizeof *tokens))
					continue;
				int c = 0;
				while (c < max && j + g + c < n && tokens[j + g + c] == out[c])
					c++;
				if (c < max && j + g + c < n)
					max = c;
				break;
			}
			return max;
		}
	}
	return 0;
}

static int ngram_open(struct spec_drafter *d, void **state, const struct sampling *sampling)
{
	*state = NULL;
	return 0;
}

static void ngram_close(struct spec_drafter *d, void *state)
{
}

static void ngram_propose(struct spec_drafter *d, struct spec_ask *asks, int n)
{
	for (int i = 0; i < n; i++)
		asks[i].n_out = spec_ngram_lookup(asks[i].tokens, asks[i].n_tokens, asks[i].max, asks[i].stood,
						   asks[i].out);
}

static void ngram_destroy(struct spec_drafter *d)
{
	free(d);
}

int spec_ngram_create(struct spec_drafter **out)
{
	struct spec_drafter *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	*d = (struct spec_drafter){
		.name = "ngram",
		.open = ngram_open,
		.close = ngram_close,
		.propose = ngram_propose,
		.destroy = ngram_destroy,
	};
	*out = d;
	return 0;
}
