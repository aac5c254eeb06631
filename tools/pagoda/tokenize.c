/* tools/pagoda/tokenize.c — `pagoda tokenize` and `pagoda detokenize`:
 * the model's own tokenizer on stdin, for scripts and conformance tests. */
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tok_cli {
	struct gguf_file *f;
	struct tokenizer *t;
};

static int open_tokenizer(const char *path, struct tok_cli *c)
{
	char err[512];
	if (gguf_open(path, &c->f, err, sizeof err) == 0) {
		if (tok_load(c->f, &c->t, err, sizeof err) == 0)
			return 0;
		gguf_close(c->f);
	}
	fprintf(stderr, "pagoda: %s\n", err);
	return -1;
}

static void close_tokenizer(struct tok_cli *c)
{
	tok_free(c->t);
	gguf_close(c->f);
}

int cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL;
	bool bos = false, special = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--bos"))
			bos = true;
		else if (!strcmp(argv[i], "--special"))
			special = true;
		else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
			if (!(model = opt_value(argc, argv, &i)))
				return 2;
		} else {
			fprintf(stderr, "usage: pagoda tokenize -m MODEL.gguf [--bos] [--special] < text\n"
					"  --bos      add BOS (when the model's tokenizer has one)\n"
					"  --special  special-token text becomes those tokens\n");
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
	}
	if (!model) {
		fprintf(stderr, "pagoda tokenize: -m MODEL is required\n");
		return 2;
	}
	struct tok_cli c;
	if (open_tokenizer(model, &c))
		return 1;
	size_t len;
	char *text = read_all(stdin, &len);
	int cap = (int)len + 16, n = -1;
	int32_t *ids = NULL;
	for (int tries = 0; text && tries < 2; tries++) {
		free(ids);
		ids = malloc(cap * sizeof *ids);
		if (!ids)
			break;
		n = tok_encode(c.t, text, len, bos, special, ids, cap);
		if (n >= 0 || n == TOK_ERR)
			break;
		cap = -n;
	}
	int rc = 0;
	if (n < 0) {
		fprintf(stderr, "pagoda tokenize: cannot tokenize the input\n");
		rc = 1;
	} else {
		for (int i = 0; i < n; i++)
			printf(i ? " %d" : "%d", ids[i]);
		putchar('\n');
	}
	free(ids);
	free(text);
	close_tokenizer(&c);
	return rc;
}

int cmd_detokenize(int argc, char **argv)
{
	const char *model = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
			if (!(model = opt_value(argc, argv, &i)))
				return 2;
		} else {
			fprintf(stderr, "usage: pagoda detokenize -m MODEL.gguf < ids\n");
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
	}
	if (!model) {
		fprintf(stderr, "pagoda detokenize: -m MODEL is required\n");
		return 2;
	}
	struct tok_cli c;
	if (open_tokenizer(model, &c))
		return 1;
	size_t len;
	char *text = read_all(stdin, &len);
	int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
	int n = 0, rc = 0;
	char *p = text;
	while (text && ids && *p) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p) {
			if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
				p++;
				continue;
			}
			fprintf(stderr, "pagoda detokenize: not a token id at '%.10s'\n", p);
			rc = 1;
			break;
		}
		if (errno || v < 0 || v >= tok_n_vocab(c.t)) {
			fprintf(stderr, "pagoda detokenize: token id %ld is outside the vocabulary\n", v);
			rc = 1;
			break;
		}
		ids[n++] = (int32_t)v;
		p = end;
	}
	if (!rc) {
		int cap = n * tok_max_piece(c.t) + 16;
		char *out = malloc(cap);
		int m = out ? tok_decode(c.t, ids, n, out, cap) : -1;
		if (m >= 0)
			fwrite(out, 1, m, stdout);
		else
			rc = 1;
		free(out);
	}
	free(ids);
	free(text);
	close_tokenizer(&c);
	return rc;
}
