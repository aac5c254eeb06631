/* daemon/grammar/grammar.h — constrained decoding: JSON Schema, regular
 * expressions and GBNF grammars compiled into one byte-level context-free
 * grammar, matched by an Earley parser, and turned into a mask over the
 * model's vocabulary by walking a token trie against the parser.
 *
 * A compiled grammar (gm_grammar) and a vocabulary (gm_vocab) are immutable
 * and may be shared by threads; a matcher belongs to one thread at a time.
 * Errors are returned with a message, never printed.
 */
#ifndef PAGODA_GRAMMAR_H
#define PAGODA_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct gm_grammar;
struct gm_vocab;
struct gm_matcher;

enum gm_kind {
	GM_NONE = 0,
	GM_JSON_SCHEMA = 1,
	GM_REGEX = 2, /* the whole output matches (anchored at both ends) */
	GM_GBNF = 3,  /* llama.cpp's GBNF, start rule "root" */
};

/* Compile len bytes of source. 0, or -1 with a message in err naming what
 * was refused ("unsupported keyword 'not' at /properties/a"). */
int gm_compile(enum gm_kind kind, const char *src, size_t len, struct gm_grammar **out,
	       char *err, size_t errlen);
/* gm_compile through a process-wide cache keyed by the content's hash: the
 * result is shared; release it with gm_grammar_unref. Thread-safe. */
int gm_compile_cached(enum gm_kind kind, const char *src, size_t len, struct gm_grammar **out,
		      char *err, size_t errlen);
void gm_grammar_unref(struct gm_grammar *g);
/* Productions and symbols, for limits and logs. */
size_t gm_grammar_size(const struct gm_grammar *g);

/* A vocabulary: token id -> bytes, and which ids end generation. Tokens
 * with no bytes that do not end generation (control tokens) are never
 * allowed. */
struct gm_vocab *gm_vocab_new(int n_vocab, const char *const *pieces, const int *lens,
			      const bool *eog);
struct gm_vocab *gm_vocab_from_tokenizer(const struct tokenizer *t);
void gm_vocab_free(struct gm_vocab *v);
int gm_vocab_size(const struct gm_vocab *v);
/* The longest token, in bytes: counts this far from their bounds are alike
 * to the masks. */
int gm_vocab_longest(const struct gm_vocab *v);

struct gm_matcher *gm_matcher_new(const struct gm_grammar *g, const struct gm_vocab *v);
void gm_matcher_free(struct gm_matcher *m);
/* The allowed tokens now: bit i of mask[i / 32] for token i (n_vocab bits;
 * the caller's array has (n_vocab + 31) / 32 words). End-of-generation
 * tokens are allowed only where the output is complete. Returns how many
 * tokens are allowed, -1 on allocation failure. */
int gm_matcher_mask(struct gm_matcher *m, uint32_t *mask);
/* Advance by a token: 0, or -1 if it is not allowed (the state is then
 * unchanged). An end-of-generation token is accepted when complete. */
int gm_matcher_accept_token(struct gm_matcher *m, int32_t tok);
/* Advance by bytes: 0, or -1 (state unchanged) if they leave the language. */
int gm_matcher_accept_bytes(struct gm_matcher *m, const char *s, size_t n);
/* Compute masks by walking the whole trie, without the shortcuts (for
 * tests: both ways must give the same masks). */
void gm_matcher_slow(struct gm_matcher *m, bool slow);
/* The output so far is a complete sentence. */
bool gm_matcher_is_complete(const struct gm_matcher *m);
/* Bytes accepted so far; gm_matcher_rollback(m, n) goes back to n of them. */
size_t gm_matcher_pos(const struct gm_matcher *m);
void gm_matcher_rollback(struct gm_matcher *m, size_t pos);

/* A JSON instance serialized as gm_compile's JSON Schema grammar produces
 * it: compact, strings with minimal escapes, and each object's keys in the
 * order its schema declares them (undeclared keys after, in their own
 * order). 0 and a malloc'd NUL-terminated *out, or -1 with err. */
int gm_json_canonical(const char *schema, size_t slen, const char *inst, size_t ilen, char **out,
		      size_t *outlen, char *err, size_t errlen);

#endif
