/* tools/pagoda/jsonw.h — building chat requests (JSON) in the CLI. */
#ifndef PAGODA_JSONW_H
#define PAGODA_JSONW_H

#include <stdbool.h>
#include <stddef.h>

/* A growing JSON text; on allocation failure ok turns false. */
struct jsonw {
	char *s;
	size_t n, cap;
	bool ok;
};
void jsonw_raw(struct jsonw *w, const char *s);
/* s (n bytes) as a JSON string, quotes included. */
void jsonw_str(struct jsonw *w, const char *s, size_t n);
/* {"messages": [ ... ]} one message at a time: role and content. */
void jsonw_message(struct jsonw *w, const char *role, const char *content, size_t len);

#endif
