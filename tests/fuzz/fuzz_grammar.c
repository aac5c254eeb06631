// fuzz-sources: daemon/grammar/ir.c daemon/grammar/match.c daemon/grammar/mask.c daemon/grammar/loop.c daemon/grammar/vocab.c daemon/grammar/gbnf.c daemon/grammar/regex.c daemon/grammar/schema.c daemon/grammar/schema_num.c daemon/grammar/schema_not.c daemon/grammar/redfa.c daemon/grammar/jsonv.c daemon/grammar/cache.c
/* libFuzzer target: the three compilers (the first byte picks JSON Schema,
 * regex, GBNF, or a regex as a JSON Schema pattern with a length, which
 * takes the automaton path; the rest is the source) and, on what compiles, the mask
 * walk and the matcher: tokens drawn from the mask by the input's bytes
 * must be accepted, and a token outside the mask must be refused; the mask
 * with its shortcuts must equal the plain trie walk's. */
#include "daemon/grammar/grammar.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct gm_vocab *vocab;
static const char *pieces[] = { "{", "}", "[", "]", "\"", ":", ",", "a", "b", "ab", "\"a", "1", "0", "-",
				"12", ".", "e", "true", "false", "null", " ", "\\", "\\n", "\xc3\xa9", "\xc3",
				"\xa9", "yes", "no", "\n", "x", "\":", "\",\"", "ab\"", "ab\":", "a\xc3", "\xa9\"",
				" \"", "xab\"", "\\\"", "" };
#define NV (int)(sizeof pieces / sizeof *pieces)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!vocab) {
		int lens[NV];
		bool eog[NV];
		for (int i = 0; i < NV; i++) {
			lens[i] = (int)strlen(pieces[i]);
			eog[i] = i == NV - 1;
		}
		vocab = gm_vocab_new(NV, pieces, lens, eog);
		if (!vocab)
			abort();
	}
	if (size < 2)
		return 0;
	int mode = data[0] % 4;
	enum gm_kind kind = mode == 0 || mode == 3 ? GM_JSON_SCHEMA : mode == 1 ? GM_REGEX : GM_GBNF;
	size_t n = size - 1, split = n;
	/* what follows a NUL drives the walk */
	const uint8_t *nul = memchr(data + 1, 0, n);
	if (nul)
		split = (size_t)(nul - (data + 1));
	struct gm_grammar *g;
	char err[256], src[4200];
	const char *text = (const char *)data + 1;
	size_t len = split;
	if (mode == 3) { /* {"type":"string","pattern":"<source>","minLength":1,"maxLength":6} */
		if (split > 600)
			return 0;
		len = (size_t)snprintf(src, sizeof src, "{\"type\":\"string\",\"pattern\":\"");
		for (size_t i = 0; i < split; i++)
			len += (size_t)snprintf(src + len, sizeof src - len, "\\u%04x", data[1 + i]);
		len += (size_t)snprintf(src + len, sizeof src - len, "\",\"minLength\":1,\"maxLength\":6}");
		text = src;
	}
	if (gm_compile(kind, text, len, &g, err, sizeof err))
		return 0;
	struct gm_matcher *m = gm_matcher_new(g, vocab);
	uint32_t mask[(NV + 31) / 32];
	for (size_t i = split + 1; m && i < n && i < split + 64; i++) {
		int k = gm_matcher_mask(m, mask);
		if (k < 0)
			abort();
		uint32_t slow[(NV + 31) / 32];
		gm_matcher_slow(m, true);
		int ks = gm_matcher_mask(m, slow);
		gm_matcher_slow(m, false);
		if (ks != k || memcmp(mask, slow, sizeof mask))
			abort(); /* the shortcuts and the plain walk disagree */
		int pick = data[1 + i] % NV, allowed = mask[pick >> 5] >> (pick & 31) & 1;
		size_t at = gm_matcher_pos(m);
		int r = gm_matcher_accept_token(m, pick);
		if ((r == 0) != allowed)
			abort(); /* the mask and the matcher disagree */
		if (data[1 + i] & 0x80)
			gm_matcher_rollback(m, at);
	}
	gm_matcher_free(m);
	gm_grammar_unref(g);
	return 0;
}
