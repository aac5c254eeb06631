/* daemon/chat/chat.c — loads a chat template and renders requests with it. */
#include "daemon/chat/chat.h"
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "daemon/template/template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chat_tmpl {
	struct tpl_template *t;
	char *bos, *eos;
};

/* Requests are bounded: the heap of one render, and its output. */
#define CHAT_HEAP_MAX (64u << 20)
#define CHAT_OUTPUT_MAX (16u << 20)

static char *token_text(const struct tokenizer *tok, int32_t id)
{
	if (!tok || id < 0)
		return NULL;
	int n = tok_piece(tok, id, true, NULL, 0);
	if (n < 0)
		return NULL;
	char *s = malloc(n + 1);
	if (s) {
		tok_piece(tok, id, true, s, n);
		s[n] = 0;
	}
	return s;
}

int chat_load_text(const char *src, size_t len, const char *bos, const char *eos,
		   struct chat_tmpl **out, char *err, size_t errlen)
{
	struct chat_tmpl *c = calloc(1, sizeof *c);
	struct tpl_error e;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (tpl_compile(src, len, &c->t, &e)) {
		snprintf(err, errlen, "chat template: %s", e.msg);
		free(c);
		return -1;
	}
	c->bos = strdup(bos ? bos : "");
	c->eos = strdup(eos ? eos : "");
	if (!c->bos || !c->eos) {
		chat_free(c);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	*out = c;
	return 0;
}

int chat_load(const struct gguf_file *f, const struct tokenizer *tok, const char *path,
	      struct chat_tmpl **out, char *err, size_t errlen)
{
	char *src = NULL;
	size_t len = 0;
	if (path) {
		FILE *fp = fopen(path, "rb");
		if (!fp) {
			snprintf(err, errlen, "chat template %s: cannot open", path);
			return -1;
		}
		char buf[65536];
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, fp)) > 0) {
			char *p = len + n <= (1u << 20) ? realloc(src, len + n + 1) : NULL;
			if (!p) {
				fclose(fp);
				free(src);
				snprintf(err, errlen, "chat template %s: larger than 1 MiB or no memory", path);
				return -1;
			}
			src = p;
			memcpy(src + len, buf, n);
			len += n;
		}
		fclose(fp);
		if (!src && !(src = calloc(1, 1))) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	} else {
		struct gguf_str s;
		if (!f || !gguf_get_str(f, "tokenizer.chat_template", &s)) {
			snprintf(err, errlen, "the model has no tokenizer.chat_template (give one with --chat-template FILE)");
			return -1;
		}
		if (!(src = malloc(s.len + 1))) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		memcpy(src, s.ptr, s.len);
		len = s.len;
	}
	char *bos = token_text(tok, tok ? tok_bos(tok) : -1);
	char *eos = token_text(tok, tok ? tok_eos(tok) : -1);
	int rc = chat_load_text(src, len, bos, eos, out, err, errlen);
	free(bos);
	free(eos);
	free(src);
	return rc;
}

void chat_free(struct chat_tmpl *c)
{
	if (!c)
		return;
	tpl_free(c->t);
	free(c->bos);
	free(c->eos);
	free(c);
}

const char *chat_bos(const struct chat_tmpl *c) { return c->bos; }
const char *chat_eos(const struct chat_tmpl *c) { return c->eos; }

int chat_render(const struct chat_tmpl *c, const char *json, size_t len, time_t now, char **out,
		size_t *outlen, bool *raised, char *err, size_t errlen)
{
	struct tpl_heap *h = tpl_heap_new(CHAT_HEAP_MAX);
	struct tpl_val *vars;
	struct tpl_error e;
	int rc = -1;
	if (raised)
		*raised = false;
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (tpl_json_parse(h, json, len, &vars, err, errlen))
		goto out;
	if (!tpl_is_dict(vars)) {
		snprintf(err, errlen, "a chat request is a JSON object");
		goto out;
	}
	struct tpl_val *m = tpl_dict_get(vars, "messages");
	if (!m) {
		snprintf(err, errlen, "a chat request needs \"messages\"");
		goto out;
	}
	if ((!tpl_dict_get(vars, "bos_token") && tpl_dict_set(h, vars, "bos_token", tpl_str(h, c->bos, strlen(c->bos)))) ||
	    (!tpl_dict_get(vars, "eos_token") && tpl_dict_set(h, vars, "eos_token", tpl_str(h, c->eos, strlen(c->eos)))) ||
	    (!tpl_dict_get(vars, "add_generation_prompt") &&
	     tpl_dict_set(h, vars, "add_generation_prompt", tpl_bool(h, false)))) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	struct tpl_opts o = { .now = now, .max_output = CHAT_OUTPUT_MAX };
	if (tpl_render(c->t, h, vars, &o, out, outlen, &e)) {
		if (raised)
			*raised = e.raised;
		if (e.raised)
			snprintf(err, errlen, "%s", e.msg);
		else
			snprintf(err, errlen, "chat template: %s", e.msg);
		goto out;
	}
	rc = 0;
out:
	tpl_heap_free(h);
	return rc;
}
