/* daemon/template/template.h — Jinja chat templates, as Hugging Face renders them.
 *
 * A subset of Jinja2 large enough for the chat templates models ship
 * (docs/chat.md lists it), rendered the way transformers does: trim_blocks,
 * lstrip_blocks, loop controls, {% generation %}, raise_exception,
 * strftime_now and a tojson that keeps non-ASCII text.
 *
 * Templates are untrusted data: compiling and rendering are bounded in
 * nesting, recursion, loop iterations, memory and output, and never crash;
 * every failure comes back as a tpl_error naming the line. A compiled
 * template is immutable and may be rendered from several threads at once,
 * each with its own tpl_heap.
 */
#ifndef PAGODA_TEMPLATE_H
#define PAGODA_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct tpl_template;
struct tpl_heap;
struct tpl_val;

struct tpl_error {
	int line;      /* 1-based line of the template, 0 if none applies */
	bool raised;   /* msg is the template's own raise_exception() text */
	char msg[512];
};

/* Compile len bytes of template source. 0, or -1 with err filled in
 * ("line 3: unsupported tag 'include'"). */
int tpl_compile(const char *src, size_t len, struct tpl_template **out, struct tpl_error *err);
void tpl_free(struct tpl_template *t);

/* Values live in a heap (an arena freed all at once) capped at limit bytes
 * (0: TPL_HEAP_DEFAULT). The constructors return NULL when the cap is hit. */
#define TPL_HEAP_DEFAULT (64u << 20)
struct tpl_heap *tpl_heap_new(size_t limit);
void tpl_heap_free(struct tpl_heap *h);

struct tpl_val *tpl_none(struct tpl_heap *h);
struct tpl_val *tpl_bool(struct tpl_heap *h, bool b);
struct tpl_val *tpl_int(struct tpl_heap *h, int64_t i);
struct tpl_val *tpl_float(struct tpl_heap *h, double d);
struct tpl_val *tpl_str(struct tpl_heap *h, const char *s, size_t len); /* copied */
struct tpl_val *tpl_list(struct tpl_heap *h);
struct tpl_val *tpl_dict(struct tpl_heap *h);
/* -1 when out of heap or when list/dict is not one. */
int tpl_list_push(struct tpl_heap *h, struct tpl_val *list, struct tpl_val *v);
int tpl_dict_set(struct tpl_heap *h, struct tpl_val *dict, const char *key, struct tpl_val *v);
struct tpl_val *tpl_dict_get(const struct tpl_val *dict, const char *key); /* NULL if absent */
bool tpl_is_dict(const struct tpl_val *v);
/* The bytes of a string value (NUL-terminated), NULL if v is not one. */
const char *tpl_str_data(const struct tpl_val *v, size_t *len);

/* Strict JSON (RFC 8259, UTF-8, nesting <= 128) into values of h.
 * 0, or -1 with a message naming the byte offset in err. */
int tpl_json_parse(struct tpl_heap *h, const char *s, size_t len, struct tpl_val **out,
		   char *err, size_t errlen);

struct tpl_opts {
	time_t now;        /* strftime_now's clock (local time); 0: time(NULL) */
	size_t max_output; /* bytes; 0: 4 MiB */
};

/* Render t with the variables of the dict vars (messages, tools,
 * add_generation_prompt, bos_token, ...). On success *out is a malloc'd
 * NUL-terminated string of *outlen bytes. -1 with err on failure, err->raised
 * set when the template called raise_exception. */
int tpl_render(const struct tpl_template *t, struct tpl_heap *h, struct tpl_val *vars,
	       const struct tpl_opts *opts, char **out, size_t *outlen, struct tpl_error *err);

#endif
