/* daemon/chat/chat.h — a model's chat template: messages in, prompt text out.
 *
 * The template is the model's own (GGUF tokenizer.chat_template) or a file
 * given instead; bos_token and eos_token default to the model's tokens.
 * A loaded chat_tmpl is immutable: chat_render may run on several threads.
 */
#ifndef PAGODA_CHAT_H
#define PAGODA_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

struct gguf_file;
struct tokenizer;
struct chat_tmpl;

/* From path when it is not NULL, else from f's tokenizer.chat_template.
 * tok (may be NULL) supplies bos_token / eos_token. 0, or -1 with err
 * ("chat template line 3: unsupported tag 'include'"). */
int chat_load(const struct gguf_file *f, const struct tokenizer *tok, const char *path,
	      struct chat_tmpl **out, char *err, size_t errlen);
/* A template from memory (src, len bytes) with the given bos/eos (may be NULL). */
int chat_load_text(const char *src, size_t len, const char *bos, const char *eos,
		   struct chat_tmpl **out, char *err, size_t errlen);
void chat_free(struct chat_tmpl *c);

/* Render a request given as a JSON object: messages (required), tools,
 * add_generation_prompt, bos_token, eos_token and any extra variables
 * (enable_thinking, ...). now: strftime_now's clock (0: the real one).
 * On success *out is malloc'd text of *outlen bytes. -1 with err on bad
 * JSON, a template error, or the template's raise_exception (its message
 * is then err verbatim, and *raised is set when raised is not NULL). */
int chat_render(const struct chat_tmpl *c, const char *json, size_t len, time_t now, char **out,
		size_t *outlen, bool *raised, char *err, size_t errlen);

/* The bos_token / eos_token text the template gets by default. */
const char *chat_bos(const struct chat_tmpl *c);
const char *chat_eos(const struct chat_tmpl *c);

#endif
