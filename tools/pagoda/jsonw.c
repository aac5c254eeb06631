/* tools/pagoda/jsonw.c — JSON text for chat requests. */
#include "tools/pagoda/jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(struct jsonw *w, const char *s, size_t n)
{
	if (!w->s && !w->cap)
		w->ok = true;
	if (!w->ok)
		return;
	if (w->n + n + 1 > w->cap) {
		size_t cap = (w->n + n + 1) * 2;
		char *p = realloc(w->s, cap);
		if (!p) {
			w->ok = false;
			return;
		}
		w->s = p;
		w->cap = cap;
	}
	memcpy(w->s + w->n, s, n);
	w->n += n;
	w->s[w->n] = 0;
}

void jsonw_raw(struct jsonw *w, const char *s)
{
	put(w, s, strlen(s));
}

void jsonw_str(struct jsonw *w, const char *s, size_t n)
{
	put(w, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		char e[8];
		if (c == '"' || c == '\\')
			snprintf(e, sizeof e, "\\%c", c);
		else if (c < 0x20)
			snprintf(e, sizeof e, "\\u%04x", c);
		else
			continue;
		put(w, s + run, i - run);
		put(w, e, strlen(e));
		run = i + 1;
	}
	put(w, s + run, n - run);
	put(w, "\"", 1);
}

void jsonw_message(struct jsonw *w, const char *role, const char *content, size_t len)
{
	jsonw_raw(w, "{\"role\": ");
	jsonw_str(w, role, strlen(role));
	jsonw_raw(w, ", \"content\": ");
	jsonw_str(w, content, len);
	jsonw_raw(w, "}");
}
