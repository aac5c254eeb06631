/* tests/peer/greedy.c — the peer's greedy golden: llama.cpp (built by
 * mk/peer.sh) tokenizes PROMPT with BOS, decodes greedily with no
 * repetition penalty until N tokens or end of generation (not written), and
 * writes the golden files' two lines
 *
 *   prompt_ids 1 ...
 *   output_ids ...
 *
 * to stdout; with a third argument, the text the output streams as
 * (detokenize(prompt + output) with detokenize(prompt) cut off the front)
 * goes to that file. Built and run by tests/make-testdata.sh. With --ids,
 * PROMPT is the prompt's token ids (space separated), taken as they are: a
 * chat prompt as llama.cpp tokenized it (tests/e2e/make-smollm2-golden.py).
 * With -ctk/-ctv, the KV cache takes those types (llama.cpp's names) and
 * flash attention is on, as `llama-completion -fa on -ctk T -ctv T` runs
 * (tests/peer/make-kvq-golden.sh).
 *
 *   greedy [--ids] [-ctk TYPE] [-ctv TYPE] MODEL PROMPT N [TEXT_OUT]
 */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *data)
{
	(void)data;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int detok(const struct llama_vocab *v, const llama_token *ids, int n, char **out)
{
	int cap = 64 + n * 16;
	for (;;) {
		*out = realloc(*out, (size_t)cap);
		int k = llama_detokenize(v, ids, n, *out, cap, false, false);
		if (k >= 0)
			return k;
		cap = -k + 1;
	}
}

static int count_ids(const char *s)
{
	int n = 0;
	for (const char *p = s; *p;) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		n++;
		while (*p && *p != ' ')
			p++;
	}
	return n;
}

/* space-separated ids, each below n_vocab: 0 or -1 */
static int parse_ids(const char *s, llama_token *ids, int n_vocab)
{
	int n = 0;
	for (const char *p = s;;) {
		while (*p == ' ')
			p++;
		if (!*p)
			return n ? 0 : -1;
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || (*end && *end != ' ') || v < 0 || v >= n_vocab)
			return -1;
		ids[n++] = (llama_token)v;
		p = end;
	}
}

static const struct {
	const char *name;
	enum ggml_type type;
} cache_types[] = {
	{ "f16", GGML_TYPE_F16 },   { "q8_0", GGML_TYPE_Q8_0 }, { "q4_0", GGML_TYPE_Q4_0 },
	{ "q4_1", GGML_TYPE_Q4_1 }, { "iq4_nl", GGML_TYPE_IQ4_NL }, { "q5_0", GGML_TYPE_Q5_0 },
	{ "q5_1", GGML_TYPE_Q5_1 },
};

static int cache_type(const char *name, enum ggml_type *out)
{
	for (size_t i = 0; i < sizeof cache_types / sizeof cache_types[0]; i++)
		if (!strcmp(name, cache_types[i].name)) {
			*out = cache_types[i].type;
			return 0;
		}
	fprintf(stderr, "greedy: unknown cache type %s\n", name);
	return -1;
}

int main(int argc, char **argv)
{
	int given_ids = 0, typed = 0;
	enum ggml_type tk = GGML_TYPE_F16, tv = GGML_TYPE_F16;
	while (argc > 1 && argv[1][0] == '-') {
		if (!strcmp(argv[1], "--ids")) {
			given_ids = 1;
		} else if (argc > 2 && (!strcmp(argv[1], "-ctk") || !strcmp(argv[1], "-ctv"))) {
			if (cache_type(argv[2], argv[1][3] == 'k' ? &tk : &tv))
				return 2;
			typed = 1;
			argc--;
			argv++;
		} else {
			break;
		}
		argc--;
		argv++;
	}
	if (argc < 4) {
		fprintf(stderr, "usage: greedy [--ids] [-ctk TYPE] [-ctv TYPE] MODEL PROMPT N [TEXT_OUT]\n");
		return 2;
	}
	const char *prompt = argv[2];
	int n_predict = atoi(argv[3]);
	llama_log_set(quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model = llama_model_load_from_file(argv[1], mp);
	if (!model) {
		fprintf(stderr, "greedy: cannot load %s\n", argv[1]);
		return 1;
	}
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	int np = given_ids ? count_ids(prompt)
			   : -llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), NULL, 0, true, false);
	llama_token *ids = malloc(sizeof *ids * (size_t)(np + n_predict + 1));
	if (given_ids) {
		if (parse_ids(prompt, ids, llama_vocab_n_tokens(vocab))) {
			fprintf(stderr, "greedy: bad prompt ids '%s'\n", prompt);
			return 2;
		}
	} else {
		llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), ids, np, true, false);
	}

	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)(np + n_predict + 16);
	cp.n_batch = cp.n_ctx;
	cp.n_threads = cp.n_threads_batch = 2;
	if (typed) {
		cp.type_k = tk;
		cp.type_v = tv;
		cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
	}
	struct llama_context *ctx = llama_init_from_model(model, cp);
	struct llama_sampler *smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
	llama_sampler_chain_add(smpl, llama_sampler_init_greedy());
	if (!ctx || !smpl) {
		fprintf(stderr, "greedy: cannot make a context\n");
		return 1;
	}

	int n = np;
	struct llama_batch batch = llama_batch_get_one(ids, np);
	while (n - np < n_predict) {
		if (llama_decode(ctx, batch)) {
			fprintf(stderr, "greedy: llama_decode failed\n");
			return 1;
		}
		llama_token id = llama_sampler_sample(smpl, ctx, -1);
		if (llama_vocab_is_eog(vocab, id))
			break;
		ids[n++] = id;
		batch = llama_batch_get_one(&ids[n - 1], 1);
	}

	printf("prompt_ids");
	for (int i = 0; i < np; i++)
		printf(" %d", ids[i]);
	printf("\noutput_ids");
	for (int i = np; i < n; i++)
		printf(" %d", ids[i]);
	printf("\n");
	if (argc > 4) {
		char *all = NULL, *pre = NULL;
		int la = detok(vocab, ids, n, &all), lp = detok(vocab, ids, np, &pre);
		FILE *f = fopen(argv[4], "wb");
		if (!f || la < lp || fwrite(all + lp, 1, (size_t)(la - lp), f) != (size_t)(la - lp) || fclose(f)) {
			fprintf(stderr, "greedy: cannot write %s\n", argv[4]);
			return 1;
		}
		free(all);
		free(pre);
	}
	llama_sampler_free(smpl);
	llama_free(ctx);
	llama_model_free(model);
	free(ids);
	return 0;
}
