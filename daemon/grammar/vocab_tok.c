/* daemon/grammar/vocab_tok.c — a vocabulary from the model's tokenizer:
 * each token's bytes as the stream writes them, end-of-generation ids. */
#include "daemon/grammar/gm_int.h"
#include "daemon/model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

struct gm_vocab *gm_vocab_from_tokenizer(const struct tokenizer *t)
{
	int n = tok_n_vocab(t);
	char **p = calloc(n, sizeof *p);
	int *l = calloc(n, sizeof *l);
	bool *e = calloc(n, sizeof *e);
	struct gm_vocab *v = NULL;
	if (!p || !l || !e)
		goto out;
	for (int i = 0; i < n; i++) {
		char buf[512];
		int k = tok_piece(t, i, false, buf, sizeof buf);
		if (k < 0)
			k = 0;
		if (k > (int)sizeof buf) {
			if (!(p[i] = malloc(k)))
				goto out;
			tok_piece(t, i, false, p[i], k);
		} else if (!(p[i] = malloc(k + 1))) {
			goto out;
		} else {
			memcpy(p[i], buf, k);
		}
		l[i] = k;
		e[i] = tok_is_eog(t, i);
	}
	v = gm_vocab_new(n, (const char *const *)p, l, e);
out:
	if (p)
		for (int i = 0; i < n; i++)
			free(p[i]);
	free(p);
	free(l);
	free(e);
	return v;
}
