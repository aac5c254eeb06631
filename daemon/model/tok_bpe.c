/* daemon/model/tok_bpe.c — byte-level BPE: pre-tokenizers and merges.
 *
 * The pre-tokenizer is a chain of splits, as llama.cpp's unicode_regex_split:
 * each expression splits every piece the previous one produced, and the text
 * between matches stays a piece of its own. The common expressions (GPT-2,
 * Llama 3, Qwen2) run through hand-written splitters with llama.cpp's exact
 * behaviour; the others run on PCRE2 the way llama.cpp runs them on
 * std::regex: when the expression uses \p{..} classes, on a "collapsed" text
 * where every non-ASCII code point becomes one byte naming its category
 * (0xD1 N, 0xD2 L, 0xD3 P, 0xD4 M, 0xD5 S, 0x0B whitespace, 0xD0 other) and
 * \p{X} becomes that byte plus X's ASCII members; otherwise on the code
 * points themselves (non-ASCII whitespace as 0x0B). The expressions are the
 * ones of the models' tokenizer.json files, as llama.cpp adapts them.
 */
#include "daemon/model/tok_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define SPLIT_LLAMA3 "\x01llama3"
#define SPLIT_QWEN2 "\x01qwen2"
#define SPLIT_NEWLINES "\x01newlines"

struct pre_set {
	int kind;
	const char *re[6];
};

static const struct pre_set pre_sets[] = {
	{ TOKP_PRE_DEFAULT, { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" } },
	{ TOKP_PRE_LLAMA3, { SPLIT_LLAMA3 } },
	{ TOKP_PRE_GPT2, { RE_GPT2 } },
	{ TOKP_PRE_QWEN2, { SPLIT_QWEN2 } },
	{ TOKP_PRE_FALCON, { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" } },
	{ TOKP_PRE_STARCODER, { "\\p{N}", RE_GPT2 } },
	{ TOKP_PRE_DEEPSEEK_LLM,
	  { "[\r\n]",
	    "\\s?[A-Za-z\xC2\xB5\xC3\x80-\xC3\x96\xC3\x98-\xC3\xB6\xC3\xB8-\xC6\xBA\xC6\xBC-\xC6\xBF\xC7\x84-\xCA\x93"
	    "\xCA\x95-\xCA\xAF\xCD\xB0-\xCD\xB3\xCD\xB6\xCD\xB7\xCD\xBB-\xCD\xBD\xCD\xBF\xCE\x86\xCE\x88-\xCE\x8A"
	    "\xCE\x8C\xCE\x8E-\xCE\xA1\xCE\xA3-\xCF\xB5\xCF\xB7-\xD2\x81\xD2\x8A-\xD4\xAF\xD4\xB1-\xD5\x96"
	    "\xE1\x82\xA0-\xE1\x83\x85\xE1\x8E\xA0-\xE1\x8F\xB5\xE1\x8F\xB8-\xE1\x8F\xBD\xE1\xB2\x90-\xE1\xB2\xBA"
	    "\xE1\xB2\xBD-\xE1\xB2\xBF\xE1\xB4\x80-\xE1\xB4\xAB\xE1\xB5\xAB-\xE1\xB5\xB7\xE1\xB5\xB9-\xE1\xB6\x9A"
	    "\xE1\xB8\x80-\xE1\xBC\x95\xE1\xBC\x98-\xE1\xBC\x9D\xE1\xBC\xA0-\xE1\xBD\x85\xE1\xBD\x88-\xE1\xBD\x8D"
	    "\xE1\xBD\x90-\xE1\xBD\x97\xE1\xBD\x99\xE1\xBD\x9B\xE1\xBD\x9D\xE1\xBD\x9F-\xE1\xBD\xBD"
	    "\xE1\xBE\x80-\xE1\xBE\xB4\xE1\xBE\xB6-\xE1\xBE\xBC\xE1\xBE\xBE\xE1\xBF\x82-\xE1\xBF\x84"
	    "\xE1\xBF\x86-\xE1\xBF\x8C\xE1\xBF\x90-\xE1\xBF\x93\xE1\xBF\x96-\xE1\xBF\x9B\xE1\xBF\xA0-\xE1\xBF\xAC"
	    "\xE1\xBF\xB2-\xE1\xBF\xB4\xE1\xBF\xB6-\xE1\xBF\xBC\xE2\x84\x82\xE2\x84\x87\xE2\x84\x8A-\xE2\x84\x93"
	    "\xE2\x84\x95\xE2\x84\x99-\xE2\x84\x9D\xE2\x84\xA4\xE2\x84\xA6\xE2\x84\xA8\xE2\x84\xAA-\xE2\x84\xAD"
	    "\xE2\x84\xAF-\xE2\x84\xB4\xE2\x84\xB9\xE2\x84\xBC-\xE2\x84\xBF\xE2\x85\x85-\xE2\x85\x89\xE2\x85\x8E"
	    "\xE2\x86\x83\xE2\x86\x84\xE2\xB0\x80-\xE2\xB1\xBB\xE2\xB1\xBE-\xE2\xB3\xA4\xE2\xB3\xAB-\xE2\xB3\xAE"
	    "\xE2\xB3\xB2\xE2\xB3\xB3\xEA\x99\x80-\xEA\x99\xAD\xEA\x9A\x80-\xEA\x9A\x9B\xEA\x9C\xA2-\xEA\x9D\xAF"
	    "\xEA\x9D\xB1-\xEA\x9E\x87\xEA\x9E\x8B-\xEA\x9E\x8E\xEA\xAD\xB0-\xEA\xAE\xBF\xEF\xAC\x80-\xEF\xAC\x86"
	    "\xEF\xAC\x93-\xEF\xAC\x97\xEF\xBC\xA1-\xEF\xBC\xBA\xEF\xBD\x81-\xEF\xBD\x9A\xF0\x90\x90\x80-\xF0\x90\x91\x8F"
	    "\xF0\x90\x92\xB0-\xF0\x90\x93\x93\xF0\x90\x93\x98-\xF0\x90\x93\xBB\xF0\x90\xB2\x80-\xF0\x90\xB2\xB2"
	    "\xF0\x90\xB3\x80-\xF0\x90\xB3\xB2\xF0\x91\xA2\xA0-\xF0\x91\xA3\x9F\xF0\x9E\xA4\x80-\xF0\x9E\xA5\x83]+",
	    "\\s?[!-/:-~\xEF\xBC\x81-\xEF\xBC\x8F\xEF\xBC\x9A-\xEF\xBD\x9E\xE2\x80\x98-\xE2\x80\x9F\xE3\x80\x80-\xE3\x80\x82]+",
	    "\\s+$",
	    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+",
	    "\\p{N}+" } },
	{ TOKP_PRE_DEEPSEEK_CODER,
	  { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+",
	    "\\p{N}" } },
	{ TOKP_PRE_DEEPSEEK3,
	  { "\\p{N}{1,3}", "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
	    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+" } },
	{ TOKP_PRE_BLOOM,
	  { " ?[^(\\s|.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C)]+" } },
	{ TOKP_PRE_VIKING,
	  { " ?[^(\\s|.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C)]+", "\\p{N}" } },
	{ TOKP_PRE_TEKKEN,
	  { "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
	{ TOKP_PRE_GPT4O,
	  { "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_CONTRACT "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_CONTRACT "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
	{ TOKP_PRE_SEED_CODER,
	  { RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
	{ TOKP_PRE_BAILINGMOE,
	  { "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+" } },
	{ TOKP_PRE_EXAONE_MOE,
	  { RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+" } },
	{ TOKP_PRE_LAGUNA, { SPLIT_NEWLINES, SPLIT_QWEN2 } },
	{ TOKP_PRE_JAIS2,
	  { RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}" } },
	{ TOKP_PRE_MINICPM5,
	  { "\\p{N}{1,3}", RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
};

/* \p{X} names and what they collapse to */
static const struct {
	const char *name;
	char cat;
	const char *ascii;
} ucats[] = {
	{ "\\p{N}", (char)0xD1, "0-9" },
	{ "\\p{L}", (char)0xD2, "A-Za-z" },
	{ "\\p{P}", (char)0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}" },
	{ "\\p{M}", (char)0xD4, "" },
	{ "\\p{S}", (char)0xD5, "\\$\\+<->^`\\|\\~" },
	{ "\\p{Lu}", (char)0xD2, "A-Za-z" },
	{ "\\p{Ll}", (char)0xD2, "A-Za-z" },
	{ "\\p{Lt}", (char)0xD2, "A-Za-z" },
	{ "\\p{Lm}", (char)0xD2, "A-Za-z" },
	{ "\\p{Lo}", (char)0xD2, "A-Za-z" },
};
#define N_UCATS (sizeof ucats / sizeof ucats[0])

static bool uses_ucat(const char *re)
{
	for (size_t i = 0; i < N_UCATS; i++)
		if (strstr(re, ucats[i].name))
			return true;
	return false;
}

/* llama.cpp's rewrite of \p{X} for the collapsed text */
static char *collapse_regex(const char *re)
{
	size_t n = strlen(re), cap = n * 16 + 16, k = 0;
	char *o = malloc(cap);
	if (!o)
		return NULL;
	bool inside = false;
	for (size_t i = 0; i < n; i++) {
		if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
			o[k++] = '[';
			inside = true;
			continue;
		}
		if (inside && re[i] == ']' && re[i - 1] != '\\') {
			o[k++] = ']';
			inside = false;
			continue;
		}
		if (re[i] == '\\' && i + 3 < n && re[i + 1] == 'p' && re[i + 2] == '{') {
			const char *cb = strchr(re + i + 3, '}');
			if (cb && (size_t)(cb - re) <= i + 10) {
				size_t pl = (size_t)(cb - re) - i + 1;
				size_t u;
				for (u = 0; u < N_UCATS; u++)
					if (strlen(ucats[u].name) == pl && memcmp(ucats[u].name, re + i, pl) == 0)
						break;
				if (u < N_UCATS) {
					if (!inside)
						o[k++] = '[';
					o[k++] = ucats[u].cat;
					size_t al = strlen(ucats[u].ascii);
					memcpy(o + k, ucats[u].ascii, al);
					k += al;
					if (!inside)
						o[k++] = ']';
					i = (size_t)(cb - re);
					continue;
				}
			}
		}
		o[k++] = re[i];
	}
	o[k] = 0;
	return o;
}

int tokp_pre_init(struct tokenizer *t, char *err, size_t errlen)
{
	const struct pre_set *ps = NULL;
	for (size_t i = 0; i < sizeof pre_sets / sizeof pre_sets[0]; i++)
		if (pre_sets[i].kind == t->pre)
			ps = &pre_sets[i];
	if (!ps) {
		snprintf(err, errlen, "tokenizer: no pre-tokenizer for kind %d", t->pre);
		return -1;
	}
	t->n_re = 0;
	for (int i = 0; i < 6 && ps->re[i]; i++) {
		struct tokp_re *r = &t->re[t->n_re++];
		const char *re = ps->re[i];
		if (strcmp(re, RE_GPT2) == 0) {
			r->kind = TOKP_SPLIT_GPT2;
			continue;
		}
		if (strcmp(re, SPLIT_LLAMA3) == 0) {
			r->kind = TOKP_SPLIT_LLAMA3;
			continue;
		}
		if (strcmp(re, SPLIT_QWEN2) == 0) {
			r->kind = TOKP_SPLIT_QWEN2;
			continue;
		}
		if (strcmp(re, SPLIT_NEWLINES) == 0) {
			r->kind = TOKP_SPLIT_NEWLINES;
			continue;
		}
		r->kind = TOKP_SPLIT_REGEX;
		r->collapsed = uses_ucat(re);
		char *pat = r->collapsed ? collapse_regex(re) : strdup(re);
		if (!pat) {
			snprintf(err, errlen, "tokenizer: out of memory");
			return -1;
		}
		int ec;
		PCRE2_SIZE eo;
		uint32_t opts = PCRE2_DOLLAR_ENDONLY | (r->collapsed ? 0 : PCRE2_UTF);
		pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
		free(pat);
		if (!code) {
			PCRE2_UCHAR msg[128];
			pcre2_get_error_message(ec, msg, sizeof msg);
			snprintf(err, errlen, "tokenizer: pre-tokenizer regex %d: %s at %zu", i, (char *)msg, (size_t)eo);
			t->n_re--;
			return -1;
		}
		pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
		r->code = code;
	}
	return 0;
}

void tokp_pre_free(struct tokenizer *t)
{
	for (int i = 0; i < t->n_re; i++)
		if (t->re[i].code)
			pcre2_code_free(t->re[i].code);
	t->n_re = 0;
}

/* ---- splitting ------------------------------------------------------------ */

struct offs {
	size_t *v;
	size_t n, cap;
};

static int offs_add(struct offs *o, size_t len)
{
	if (len == 0)
		return 0;
	if (tokp_reserve((void **)&o->v, &o->cap, o->n + 1, sizeof *o->v))
		return -1;
	o->v[o->n++] = len;
	return 0;
}

#define OOR 0xFFFFFFFFu

/* The hand-written splitters: cp/fl are the code points and their flags;
 * each segment of in is split into out. */
static int split_custom(int kind, const uint32_t *cp, const uint16_t *fl, const struct offs *in, struct offs *out)
{
	const uint16_t WS = TOK_UF_WHITESPACE, L = TOK_UF_LETTER, N = TOK_UF_NUMBER;
	size_t start = 0;
	for (size_t si = 0; si < in->n; si++) {
		const size_t ini = start, end = start + in->v[si];
		start = end;
#define CP(p) ((p) >= ini && (p) < end ? cp[p] : OOR)
#define FL(p) ((p) >= ini && (p) < end ? fl[p] : (uint16_t)0)
#define ADD(e)                                       \
	do {                                         \
		if (offs_add(out, (e) - prev))       \
			return -1;                   \
		prev = (e);                          \
	} while (0)
		size_t prev = ini;
		if (kind == TOKP_SPLIT_NEWLINES) {
			size_t pos = ini;
			while (pos < end) {
				bool nl = cp[pos] == '\n';
				while (pos < end && (cp[pos] == '\n') == nl)
					pos++;
				ADD(pos);
			}
			continue;
		}
		for (size_t pos = ini; pos < end;) {
			const uint32_t c = CP(pos);
			const uint16_t f = FL(pos);
			/* contractions ('s 't 're 've 'm 'll 'd; any case for llama3/qwen2) */
			if (c == '\'' && pos + 1 < end) {
				uint32_t c1 = CP(pos + 1);
				if (kind != TOKP_SPLIT_GPT2 && c1 >= 'A' && c1 <= 'Z')
					c1 += 32;
				if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
					pos += 2;
					ADD(pos);
					continue;
				}
				if (pos + 2 < end) {
					uint32_t c2 = CP(pos + 2);
					if (kind != TOKP_SPLIT_GPT2 && c2 >= 'A' && c2 <= 'Z')
						c2 += 32;
					if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
						pos += 3;
						ADD(pos);
						continue;
					}
				}
			}
			if (kind == TOKP_SPLIT_GPT2) {
				uint16_t f2 = c == ' ' ? FL(pos + 1) : f;
				if (f2 & L) { /* ' ?\p{L}+' */
					pos += c == ' ';
					while (f2 & L)
						f2 = (++pos, FL(pos));
					ADD(pos);
					continue;
				}
				if (f2 & N) { /* ' ?\p{N}+' */
					pos += c == ' ';
					while (f2 & N)
						f2 = (++pos, FL(pos));
					ADD(pos);
					continue;
				}
				if (!(f2 & (WS | L | N)) && f2) { /* ' ?[^\s\p{L}\p{N}]+' */
					pos += c == ' ';
					while (!(f2 & (WS | L | N)) && f2)
						f2 = (++pos, FL(pos));
					ADD(pos);
					continue;
				}
				size_t nws = 0;
				while (FL(pos + nws) & WS)
					nws++;
				if (nws > 1 && CP(pos + nws) != OOR) { /* '\s+(?!\S)' */
					pos += nws - 1;
					ADD(pos);
					continue;
				}
				if (nws > 0) {
					pos += nws;
					ADD(pos);
					continue;
				}
				pos++;
				ADD(pos);
				continue;
			}
			/* llama3 / qwen2: '[^\r\n\p{L}\p{N}]?\p{L}+' */
			if (!(c == '\r' || c == '\n' || (f & N))) {
				if ((f & L) || (FL(pos + 1) & L)) {
					pos++;
					while (FL(pos) & L)
						pos++;
					ADD(pos);
					continue;
				}
			}
			if (f & N) {
				if (kind == TOKP_SPLIT_QWEN2) { /* '\p{N}' */
					pos++;
					ADD(pos);
					continue;
				}
				size_t n0 = pos; /* '\p{N}{1,3}' */
				while (FL(pos) & N) {
					if (++pos - n0 >= 3) {
						ADD(pos);
						n0 = pos;
					}
				}
				ADD(pos);
				continue;
			}
			/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
			uint16_t f2 = c == ' ' ? FL(pos + 1) : f;
			if (!(f2 & (WS | L | N)) && f) {
				pos += c == ' ';
				while (!(f2 & (WS | L | N)) && f2)
					f2 = (++pos, FL(pos));
				uint32_t c2 = CP(pos);
				while (c2 == '\r' || c2 == '\n')
					c2 = (++pos, CP(pos));
				ADD(pos);
				continue;
			}
			size_t nws = 0, last_rn = 0;
			while (FL(pos + nws) & WS) {
				uint32_t c2 = CP(pos + nws);
				if (c2 == '\r' || c2 == '\n')
					last_rn = pos + nws + 1;
				nws++;
			}
			if (last_rn > 0) { /* '\s*[\r\n]+' */
				pos = last_rn;
				ADD(pos);
				continue;
			}
			if (nws > 1 && CP(pos + nws) != OOR) {
				pos += nws - 1;
				ADD(pos);
				continue;
			}
			if (nws > 0) {
				pos += nws;
				ADD(pos);
				continue;
			}
			pos++;
			ADD(pos);
		}
#undef CP
#undef FL
#undef ADD
	}
	return 0;
}

/* Regex split of each segment; subj holds one code unit per code point
 * (collapsed) or UTF-8 with boff[i] the byte offset of code point i. */
static int split_regex(const pcre2_code *code, const uint8_t *subj, const size_t *boff, const struct offs *in,
		       struct offs *out, pcre2_match_data *md, pcre2_match_context **mctx, pcre2_jit_stack **jstack)
{
	size_t start = 0;
	for (size_t si = 0; si < in->n; si++) {
		size_t seg = in->v[si];
		size_t b0 = boff ? boff[start] : start;
		size_t blen = (boff ? boff[start + seg] : start + seg) - b0;
		const uint8_t *s = subj + b0;
		size_t prev = 0, pos = 0; /* bytes, relative to b0 */
		uint32_t flags = 0;
		while (pos <= blen) {
			uint32_t mo = flags | (boff ? PCRE2_NO_UTF_CHECK : 0);
			int rc = pcre2_match(code, s, blen, pos, mo, md, *mctx);
			if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !*jstack) {
				/* long pieces on backtracking expressions: a bigger stack */
				if (!*mctx)
					*mctx = pcre2_match_context_create(NULL);
				*jstack = pcre2_jit_stack_create(64 * 1024, 512 * 1024 * 1024, NULL);
				if (!*mctx || !*jstack)
					return -1;
				pcre2_jit_stack_assign(*mctx, NULL, *jstack);
				rc = pcre2_match(code, s, blen, pos, mo, md, *mctx);
			}
			if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
				return -1;
			if (rc < 0) {
				if (flags) { /* empty match retry failed: step one character */
					flags = 0;
					if (pos >= blen)
						break;
					pos++;
					if (boff)
						while (pos < blen && (s[pos] & 0xC0) == 0x80)
							pos++;
					continue;
				}
				break;
			}
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			size_t ms = ov[0], me = ov[1];
			if (ms > prev) {
				size_t gap = boff ? 0 : ms - prev;
				if (boff) /* count code points */
					for (size_t k = prev; k < ms; k++)
						gap += (s[k] & 0xC0) != 0x80;
				if (offs_add(out, gap))
					return -1;
			}
			size_t mlen = me - ms;
			if (boff) {
				mlen = 0;
				for (size_t k = ms; k < me; k++)
					mlen += (s[k] & 0xC0) != 0x80;
			}
			if (offs_add(out, mlen))
				return -1;
			prev = me;
			pos = me;
			flags = me == ms ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
		}
		if (prev < blen) {
			size_t rest = boff ? 0 : blen - prev;
			if (boff)
				for (size_t k = prev; k < blen; k++)
					rest += (s[k] & 0xC0) != 0x80;
			if (offs_add(out, rest))
				return -1;
		}
		start += seg;
	}
	return 0;
}

/* ---- BPE merges ------------------------------------------------------------- */

struct bsym {
	int prev, next;
	size_t off, n;
};

struct bbigram {
	int left, right, rank;
	size_t size;
};

static bool bb_before(const void *x, const void *y)
{
	const struct bbigram *a = x, *b = y;
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

struct bpe_ctx {
	struct bsym *sym;
	size_t sym_cap;
	struct tokp_heap heap;
	char *word;
	size_t word_cap;
};

static int bpe_try(const struct tokenizer *t, const char *w, struct bsym *sym, int l, int r, struct tokp_heap *h)
{
	if (l < 0 || r < 0)
		return 0;
	int rank = tokp_merge_rank(t, w + sym[l].off, sym[l].n, w + sym[r].off, sym[r].n);
	if (rank < 0)
		return 0;
	return tokp_heap_push(h, &(struct bbigram){ l, r, rank, sym[l].n + sym[r].n });
}

/* w: one pre-tokenized word, already byte-encoded */
static int bpe_word(const struct tokenizer *t, struct bpe_ctx *c, const char *w, size_t n, struct tokp_ids *out)
{
	if (n == 0)
		return 0;
	if (t->ignore_merges) {
		int32_t id = tokp_find(t, w, n);
		if (id >= 0)
			return tokp_push(out, id);
	}
	if (tokp_reserve((void **)&c->sym, &c->sym_cap, n, sizeof *c->sym))
		return -1;
	struct bsym *sym = c->sym;
	int ns = 0;
	for (size_t off = 0; off < n;) {
		size_t l = (size_t)tokp_utf8_len((uint8_t)w[off]);
		if (l > n - off)
			l = n - off;
		sym[ns] = (struct bsym){ ns - 1, off + l == n ? -1 : ns + 1, off, l };
		off += l;
		ns++;
	}
	c->heap.n = 0;
	for (int i = 1; i < ns; i++)
		if (bpe_try(t, w, sym, i - 1, i, &c->heap))
			return -1;
	while (c->heap.n) {
		struct bbigram b;
		tokp_heap_pop(&c->heap, &b);
		struct bsym *L = &sym[b.left], *R = &sym[b.right];
		if (L->n == 0 || R->n == 0 || L->n + R->n != b.size)
			continue;
		L->n += R->n;
		R->n = 0;
		L->next = R->next;
		if (R->next >= 0)
			sym[R->next].prev = b.left;
		if (bpe_try(t, w, sym, L->prev, b.left, &c->heap) || bpe_try(t, w, sym, b.left, L->next, &c->heap))
			return -1;
	}
	for (int i = 0; i < ns; i++) {
		if (sym[i].n == 0)
			continue;
		int32_t id = tokp_find(t, w + sym[i].off, sym[i].n);
		if (id >= 0) {
			if (tokp_push(out, id))
				return -1;
			continue;
		}
		for (size_t j = 0; j < sym[i].n; j++) { /* single bytes of the encoded text */
			int32_t bid = tokp_find(t, w + sym[i].off + j, 1);
			if (bid >= 0 && tokp_push(out, bid))
				return -1;
		}
	}
	return 0;
}

int tokp_bpe_encode(const struct tokenizer *t, const char *s, size_t n, struct tokp_ids *out)
{
	int rc = -1;
	uint32_t *cp = NULL;
	uint16_t *fl = NULL;
	uint8_t *sub = NULL;
	size_t *boff = NULL;
	struct offs a = { 0 }, b = { 0 };
	struct bpe_ctx c = { .heap = { .size = sizeof(struct bbigram), .before = bb_before } };
	pcre2_match_data *md = NULL;
	pcre2_match_context *mctx = NULL;
	pcre2_jit_stack *jstack = NULL;
	if (n == 0)
		return 0;
	cp = malloc(n * sizeof *cp);
	fl = malloc(n * sizeof *fl);
	if (!cp || !fl)
		goto out;
	size_t ncp = 0;
	for (size_t off = 0; off < n;)
		cp[ncp++] = tokp_decode_cp((const uint8_t *)s, n, &off);
	for (size_t i = 0; i < ncp; i++)
		fl[i] = tok_unicode_flags(cp[i]);
	if (offs_add(&a, ncp))
		goto out;
	for (int ri = 0; ri < t->n_re; ri++) {
		const struct tokp_re *r = &t->re[ri];
		b.n = 0;
		if (r->kind != TOKP_SPLIT_REGEX) {
			if (split_custom(r->kind, cp, fl, &a, &b))
				goto out;
		} else {
			if (!md && !(md = pcre2_match_data_create(1, NULL)))
				goto out;
			if (r->collapsed) {
				free(boff);
				boff = NULL;
				uint8_t *ns = realloc(sub, ncp + 1);
				if (!ns)
					goto out;
				sub = ns;
				for (size_t i = 0; i < ncp; i++) {
					uint16_t f = fl[i];
					if (cp[i] < 128)
						sub[i] = (uint8_t)cp[i];
					else if (f & TOK_UF_WHITESPACE)
						sub[i] = 0x0B;
					else if ((f & 0xFF) == TOK_UF_NUMBER)
						sub[i] = 0xD1;
					else if ((f & 0xFF) == TOK_UF_LETTER)
						sub[i] = 0xD2;
					else if ((f & 0xFF) == TOK_UF_PUNCT)
						sub[i] = 0xD3;
					else if ((f & 0xFF) == TOK_UF_MARK)
						sub[i] = 0xD4;
					else if ((f & 0xFF) == TOK_UF_SYMBOL)
						sub[i] = 0xD5;
					else
						sub[i] = 0xD0;
				}
			} else {
				uint8_t *ns = realloc(sub, ncp * 4 + 1);
				size_t *nb = realloc(boff, (ncp + 1) * sizeof *boff);
				if (ns)
					sub = ns;
				if (nb)
					boff = nb;
				if (!ns || !nb)
					goto out;
				size_t k = 0;
				for (size_t i = 0; i < ncp; i++) {
					uint32_t v = cp[i];
					if (v > 0x7F && (fl[i] & TOK_UF_WHITESPACE))
						v = 0x0B;
					if (v >= 0xD800 && v <= 0xDFFF)
						v = 0xFFFD;
					boff[i] = k;
					k += (size_t)tokp_encode_cp(v, (char *)sub + k);
				}
				boff[ncp] = k;
			}
			if (split_regex(r->code, sub, r->collapsed ? NULL : boff, &a, &b, md, &mctx, &jstack))
				goto out;
		}
		struct offs tmp = a;
		a = b;
		b = tmp;
	}
	/* GPT-2 byte encoding of each byte */
	size_t start = 0;
	for (size_t wi = 0; wi < a.n; wi++) {
		size_t wl = a.v[wi];
		size_t need = wl * 8 + 1;
		if (tokp_reserve((void **)&c.word, &c.word_cap, need, 1))
			goto out;
		size_t k = 0;
		for (size_t i = start; i < start + wl; i++) {
			char u[4];
			int un = tokp_encode_cp(cp[i], u);
			for (int j = 0; j < un; j++) {
				uint8_t by = (uint8_t)u[j];
				memcpy(c.word + k, t->byte_enc[by], t->byte_enc_len[by]);
				k += t->byte_enc_len[by];
			}
		}
		if (bpe_word(t, &c, c.word, k, out))
			goto out;
		start += wl;
	}
	rc = 0;
out:
	free(cp);
	free(fl);
	free(sub);
	free(boff);
	free(a.v);
	free(b.v);
	free(c.sym);
	free(c.heap.v);
	free(c.word);
	if (md)
		pcre2_match_data_free(md);
	if (mctx)
		pcre2_match_context_free(mctx);
	if (jstack)
		pcre2_jit_stack_free(jstack);
	return rc;
}
