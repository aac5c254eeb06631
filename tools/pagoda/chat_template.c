/* tools/pagoda/chat_template.c — `pagoda chat-template`: render one chat
 * request (a cases.jsonl line's fields, as JSON on stdin) with a model's
 * template or a template file, and print the text, nothing else. */
#include "daemon/chat/chat.h"
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "tools/pagoda/cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f)
{
	fprintf(f, "usage: pagoda chat-template (-m MODEL.gguf | -t FILE.jinja) [--now EPOCH] < request.json\n"
		   "  request: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true,\n"
		   "            \"bos_token\": \"...\", \"eos_token\": \"...\", other template variables}\n"
		   "  exit 1 with the template's message on stderr when it raises or fails\n");
	return f == stdout ? 0 : 2;
}

static char *read_all(FILE *f, size_t *n)
{
	size_t cap = 65536;
	char *s = malloc(cap);
	*n = 0;
	for (size_t r; s && (r = fread(s + *n, 1, cap - *n, f)) > 0;) {
		*n += r;
		if (*n == cap) {
			char *p = cap < (256u << 20) ? realloc(s, cap *= 2) : NULL;
			if (!p) {
				free(s);
				return NULL;
			}
			s = p;
		}
	}
	return s;
}

int cmd_chat_template(int argc, char **argv)
{
	const char *model = NULL, *file = NULL;
	time_t now = 0;
	for (int i = 1; i < argc; i++) {
		if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
			model = argv[++i];
		else if ((!strcmp(argv[i], "-t") || !strcmp(argv[i], "--template")) && i + 1 < argc)
			file = argv[++i];
		else if (!strcmp(argv[i], "--now") && i + 1 < argc)
			now = (time_t)strtoll(argv[++i], NULL, 10);
		else
			return usage(strcmp(argv[i], "--help") ? stderr : stdout);
	}
	if (!model && !file)
		return usage(stderr);
	char err[600];
	struct gguf_file *g = NULL;
	struct tokenizer *tok = NULL;
	struct chat_tmpl *c = NULL;
	if (model && (gguf_open(model, &g, err, sizeof err) || tok_load(g, &tok, err, sizeof err))) {
		fprintf(stderr, "pagoda chat-template: %s: %s\n", model, err);
		gguf_close(g);
		return 1;
	}
	int rc = chat_load(g, tok, file, &c, err, sizeof err);
	tok_free(tok);
	gguf_close(g);
	if (rc) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	size_t n, outn;
	char *in = read_all(stdin, &n), *out = NULL;
	if (!in) {
		fprintf(stderr, "pagoda chat-template: cannot read stdin\n");
		chat_free(c);
		return 1;
	}
	rc = chat_render(c, in, n, now, &out, &outn, NULL, err, sizeof err);
	free(in);
	chat_free(c);
	if (rc) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	fwrite(out, 1, outn, stdout);
	free(out);
	return fflush(stdout) ? 1 : 0;
}
