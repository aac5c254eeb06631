/* daemon/model/tokenizer.h — tokenizer read from a GGUF file.
 *
 * Reproduces llama.cpp's tokenization: SentencePiece-style vocabularies
 * (tokenizer.ggml.model = "llama": scores, bigram merges, <0xNN> byte
 * fallback, add_space_prefix) and byte-level BPE ("gpt2": merges ranked by
 * tokenizer.ggml.merges, the GPT-2 byte<->unicode map, the pre-tokenizer
 * named by tokenizer.ggml.pre). Special / added tokens (CONTROL,
 * USER_DEFINED, UNKNOWN) are split out of the text first, as llama.cpp does.
 *
 * tok_load copies everything it needs: the gguf_file may be closed as soon
 * as tok_load returns. A loaded tokenizer is immutable: every function below
 * taking a const struct tokenizer * may be called from several threads at
 * once. Errors are returned, never printed.
 */
#ifndef PAGODA_TOKENIZER_H
#define PAGODA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct tokenizer;

/* Returned by tok_encode on bad arguments or allocation failure. Any other
 * negative value -n from tok_encode / tok_decode means "n needed". */
#define TOK_ERR (-2147483647 - 1)

/* Load the tokenizer of f. Returns 0, or a negative value with a message in
 * err (errlen bytes, may be 0) for a missing or malformed vocabulary, an
 * unknown tokenizer model or an unknown tokenizer.ggml.pre. */
int tok_load(const struct gguf_file *f, struct tokenizer **out, char *err, size_t errlen);
void tok_free(struct tokenizer *t);

int tok_n_vocab(const struct tokenizer *t);
int32_t tok_bos(const struct tokenizer *t); /* -1 if none */
int32_t tok_eos(const struct tokenizer *t); /* -1 if none */
/* tokenizer.ggml.add_bos_token, else llama.cpp's default for the model type
 * (SPM: true; BPE: true for the llama3 family, tekken, chameleon). */
bool tok_add_bos(const struct tokenizer *t);
/* End of generation, as llama.cpp's set: EOS, EOT, EOM, FIM pad/rep/sep and
 * the tokens llama.cpp recognises by text (<|eot_id|>, <|im_end|>, ...). */
bool tok_is_eog(const struct tokenizer *t, int32_t id);
/* "llama" (SPM) or "gpt2" (BPE), and the pre-tokenizer name ("" for SPM). */
const char *tok_model_name(const struct tokenizer *t);
const char *tok_pre_name(const struct tokenizer *t);

/* Encode len bytes of text (any bytes: NULs and invalid UTF-8 are text).
 * Returns the number of ids written to out (at most max), TOK_ERR on bad
 * arguments / no memory, or -(needed) when the result would not fit in max:
 * nothing useful is in out then; retry with max >= needed.
 * parse_special: the text of control / unknown tokens becomes those tokens
 * (llama.cpp's parse_special); user-defined tokens are always matched.
 * add_bos: prepend BOS (if the vocabulary has one) and append EOS when the
 * model says add_eos; pass tok_add_bos(t) to follow the model. */
int tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_bos,
               bool parse_special, int32_t *out, int max);

/* The bytes token id stands for (SPM: U+2581 -> space, <0xNN> -> that byte;
 * BPE: GPT-2 byte-level mapping reversed). Control and unknown tokens give ""
 * unless special is true. Returns the piece length, which may exceed cap:
 * then the first cap bytes are copied. Negative on a bad id. No NUL added. */
int tok_piece(const struct tokenizer *t, int32_t id, bool special, char *buf, int cap);

/* The longest piece of any token, in bytes. */
int tok_max_piece(const struct tokenizer *t);
/* A lower bound on the ids tok_encode gives for this text, specials added
 * not counted: no token stands for more than tok_max_piece bytes of the
 * text, except whitespace that a special token with lstrip/rstrip swallows
 * (counted out for vocabularies that have one). O(len) at most. */
size_t tok_min_tokens(const struct tokenizer *t, const char *text, size_t len);

/* Full detokenization: the exact inverse of tok_encode. As llama.cpp's
 * llama_detokenize(remove_special=false, unparse_special=false), except
 * that the "clean-up of tokenization spaces" some BPE vocabularies ask for
 * is not applied: decode(encode(s)) == s, and decode agrees with the
 * streamed text. Control tokens give "", with add_space_prefix the first
 * token's leading space is dropped. Returns the length, -(needed) when cap
 * is too small (buf then holds garbage), TOK_ERR on a bad id or bad
 * arguments. No NUL added. */
int tok_decode(const struct tokenizer *t, const int32_t *ids, int n, char *buf, int cap);

/* Streaming detokenization of generated ids: emits only complete UTF-8
 * characters, holding back a trailing partial sequence (at most 3 bytes)
 * until it completes; bytes that can never form a valid character are
 * emitted as they are. The concatenated output of tok_stream_push over ids
 * G followed by tok_stream_flush equals the concatenation of their pieces
 * (special = false), i.e. decode(P + G) with decode(P) cut off the front for
 * SPM vocabularies and BPE ones without space clean-up. */
struct tok_stream {
	char pending[8];
	int npending;
};
void tok_stream_init(struct tok_stream *s);
/* Returns the bytes written to out, or -(needed) when cap is too small (the
 * stream is then unchanged; cap >= tok_max_piece(t) + 4 always suffices),
 * or TOK_ERR for a bad id. */
int tok_stream_push(const struct tokenizer *t, struct tok_stream *s, int32_t id, char *out, int cap);
/* Emit what is still held back (an incomplete sequence, as is). Returns the
 * bytes written (cap >= 4 always suffices; -(needed) otherwise). */
int tok_stream_flush(struct tok_stream *s, char *out, int cap);

#endif
