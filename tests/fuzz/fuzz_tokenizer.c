// fuzz-sources: daemon/model/tokenizer.c daemon/model/tok_encode.c daemon/model/tok_bpe.c daemon/model/tok_unidata.c daemon/model/gguf.c kernels/types.c
/* libFuzzer target: tokenizer encode/decode/stream over arbitrary bytes, on
 * an SPM and a BPE vocabulary from $PAGODA_TESTDATA. The first input byte
 * picks the vocabulary and the flags. */
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct gguf_file *files[2];
static struct tokenizer *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *names[2] = { "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-bpe.gguf" };
	const char *root = getenv("PAGODA_TESTDATA");
	for (int i = 0; i < 2 && root; i++) {
		char path[4096], err[256];
		snprintf(path, sizeof path, "%s/%s", root, names[i]);
		if (gguf_open(path, &files[i], err, sizeof err) == 0 &&
		    tok_load(files[i], &toks[i], err, sizeof err) != 0)
			toks[i] = NULL;
	}
	return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF):
 * only such text must round-trip; invalid bytes may become U+FFFD. */
static bool valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		if (!len || i + len > n)
			return false;
		unsigned cp = len == 1 ? c : c & (0x7f >> len);
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		static const unsigned min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
		if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	if (size < 1)
		return 0;
	const struct tokenizer *t = toks[data[0] & 1];
	if (!t)
		return 0;
	bool bos = data[0] & 2, special = data[0] & 4;
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	int cap = (int)len + 8;
	int32_t *ids = malloc(cap * sizeof *ids);
	int n = tok_encode(t, text, len, bos, special, ids, cap);
	if (n > 0) {
		int dcap = n * tok_max_piece(t) + 8;
		char *buf = malloc(dcap);
		int m = tok_decode(t, ids, n, buf, dcap);
		/* plain valid UTF-8 with no BOS round-trips exactly, except that
		 * SentencePiece reads U+2581 (its space marker) as a space */
		bool spm = (data[0] & 1) == 0;
		if (!bos && !special && valid_utf8((const unsigned char *)text, len) &&
		    !(spm && memmem(text, len, "\xe2\x96\x81", 3)) &&
		    (m < 0 || (size_t)m != len || memcmp(buf, text, len) != 0))
			abort();
		struct tok_stream st;
		tok_stream_init(&st);
		char piece[512];
		for (int i = 0; i < n; i++)
			tok_stream_push(t, &st, ids[i], piece, sizeof piece);
		tok_stream_flush(&st, piece, sizeof piece);
		free(buf);
	}
	free(ids);
	return 0;
}
