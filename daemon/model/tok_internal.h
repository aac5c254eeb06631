/* daemon/model/tok_internal.h — the tokenizer's insides, shared by
 * tokenizer.c and tok_*.c only: not an API (the door is tokenizer.h). */
#ifndef PAGODA_TOK_INTERNAL_H
#define PAGODA_TOK_INTERNAL_H

#include "daemon/model/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Unicode general-category flags used by the pre-tokenizers
 * (tok_unidata.c). */
enum {
	TOK_UF_UNDEFINED = 0x001,
	TOK_UF_NUMBER = 0x002,
	TOK_UF_LETTER = 0x004,
	TOK_UF_SEPARATOR = 0x008,
	TOK_UF_MARK = 0x010,
	TOK_UF_PUNCT = 0x020,
	TOK_UF_SYMBOL = 0x040,
	TOK_UF_CONTROL = 0x080,
	TOK_UF_WHITESPACE = 0x100,
};
uint16_t tok_unicode_flags(uint32_t cp);

enum { TOKP_SPM = 1, TOKP_BPE = 2 };
enum {
	TOKA_UNKNOWN = 1 << 0,
	TOKA_UNUSED = 1 << 1,
	TOKA_NORMAL = 1 << 2,
	TOKA_CONTROL = 1 << 3,
	TOKA_USER_DEFINED = 1 << 4,
	TOKA_BYTE = 1 << 5,
	TOKA_LSTRIP = 1 << 7,
	TOKA_RSTRIP = 1 << 8,
};
enum {
	TOKP_PRE_DEFAULT = 1, TOKP_PRE_LLAMA3, TOKP_PRE_DEEPSEEK_LLM, TOKP_PRE_DEEPSEEK_CODER,
	TOKP_PRE_DEEPSEEK3, TOKP_PRE_FALCON, TOKP_PRE_GPT2, TOKP_PRE_STARCODER, TOKP_PRE_QWEN2,
	TOKP_PRE_BLOOM, TOKP_PRE_VIKING, TOKP_PRE_TEKKEN, TOKP_PRE_GPT4O, TOKP_PRE_SEED_CODER,
	TOKP_PRE_BAILINGMOE, TOKP_PRE_EXAONE_MOE, TOKP_PRE_LAGUNA, TOKP_PRE_JAIS2, TOKP_PRE_MINICPM5,
};
#define TOKP_CP_MAP 324 /* GPT-2 byte map code points are < 256 + 68 */
#define TOKP_MAX_RE 8

struct tokp_entry {
	uint32_t off, len;   /* text in arena */
	uint32_t poff, plen; /* piece (special = true) in parena */
	float score;
	uint32_t attr;       /* TOKA_* */
};

struct tokp_merge {
	uint32_t aoff, alen, boff, blen; /* in marena */
};

struct tokp_re {
	int kind;      /* TOKP_SPLIT_* */
	bool collapsed;
	void *code;    /* pcre2_code_8 * for TOKP_SPLIT_REGEX */
};
enum { TOKP_SPLIT_GPT2 = 1, TOKP_SPLIT_LLAMA3, TOKP_SPLIT_QWEN2, TOKP_SPLIT_NEWLINES, TOKP_SPLIT_REGEX };

struct tokenizer {
	int type, pre, n_vocab;
	char model_name[16], pre_name[64];
	struct tokp_entry *tok;
	char *arena, *parena;
	uint32_t *ttab, tmask;     /* text -> id + 1 */
	struct tokp_merge *merges;
	char *marena;
	uint32_t n_merges, *mtab, mmask; /* pair -> merge index + 1 */
	size_t max_merge_len, max_token_len; /* longest a + b of a merge; longest text */
	int32_t bos, eos, eot, eom, unk, pad, sep, fim_pad, fim_rep, fim_sep;
	bool add_bos, add_eos, add_space_prefix, ignore_merges;
	int32_t *special;
	int n_special;
	uint8_t *eog;
	int32_t byte_tok[256];
	int16_t cp_to_byte[TOKP_CP_MAP];
	char byte_enc[256][2]; /* GPT-2 map: UTF-8 of the code point for each byte */
	uint8_t byte_enc_len[256];
	int max_piece;
	struct tokp_re re[TOKP_MAX_RE];
	int n_re;
};

struct tokp_ids {
	int32_t *v;
	size_t n, cap;
};

int32_t tokp_find(const struct tokenizer *t, const char *s, size_t n);
int tokp_merge_rank(const struct tokenizer *t, const char *a, size_t an, const char *b, size_t bn);
uint32_t tokp_byte_to_cp(uint8_t b);
int tokp_utf8_len(uint8_t c);
uint32_t tokp_decode_cp(const uint8_t *s, size_t n, size_t *off);
int tokp_encode_cp(uint32_t cp, char *out);
int tokp_reserve(void **p, size_t *cap, size_t need, size_t elem);
/* A binary heap of fixed-size elements (at most 64 bytes): before(a, b)
 * is true when a must pop first. Used by both merge algorithms. */
struct tokp_heap {
	void *v;
	size_t n, cap, size;
	bool (*before)(const void *a, const void *b);
};
int tokp_heap_push(struct tokp_heap *h, const void *elem);
void tokp_heap_pop(struct tokp_heap *h, void *out);
int tokp_push(struct tokp_ids *v, int32_t id);
int tokp_pre_init(struct tokenizer *t, char *err, size_t errlen);
void tokp_pre_free(struct tokenizer *t);
int tokp_bpe_encode(const struct tokenizer *t, const char *s, size_t n, struct tokp_ids *out);

#endif
