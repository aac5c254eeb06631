/* tools/pagoda/constrain.c — `pagoda constrain`: walk a text through a
 * constraint token by token, as the engine would see it generated. Exit 0
 * when every token is allowed and the text is complete, 2 when refused
 * (naming the token), 1 when the constraint does not compile.
 *
 * --sweep FILE checks a set of schemas and instances (lines "S\t<schema>",
 * "V\t<valid instance>", "I\t<invalid instance>") and prints coverage;
 * --bench adds compile and mask times. */
#include "daemon/grammar/grammar.h"
#include "daemon/model/gguf.h"
#include "daemon/model/tokenizer.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/opts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

struct lat {
	uint64_t *v;
	size_t n, cap;
};

static void lat_add(struct lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		uint64_t *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void lat_print(const char *what, struct lat *l)
{
	if (!l->n) {
		printf("%s: no samples\n", what);
		return;
	}
	qsort(l->v, l->n, sizeof *l->v, cmp_u64);
	printf("%s: n=%zu p50=%.1f us p99=%.1f us max=%.1f us\n", what, l->n, l->v[l->n / 2] / 1e3,
	       l->v[(size_t)(l->n * 0.99)] / 1e3, l->v[l->n - 1] / 1e3);
}

/* --worst N: the N slowest masks, with where they were */
struct worst {
	uint64_t ns;
	long schema;
	size_t pos;
	char ctx[48]; /* the text before the mask */
};

struct ctx {
	const struct tokenizer *t;
	struct gm_vocab *v;
	uint32_t *mask, *slow; /* slow: the plain walk's mask (--check-fast) */
	bool spm;
	struct lat mask_ns;
	bool bench, verbose;
	bool exact; /* --check-exact: try every token against each mask */
	bool timed; /* --bench times this walk's masks (valid instances only) */
	long mismatches;
	struct worst *worst;
	int n_worst, cap_worst;
	long schema;	  /* the sweep's schema number, for --worst */
	const char *text; /* the text walked, for --worst */
};

static void worst_add(struct ctx *c, uint64_t ns, size_t pos)
{
	int n = c->n_worst;
	if (!c->cap_worst || (n == c->cap_worst && c->worst[n - 1].ns >= ns))
		return;
	int i = n < c->cap_worst ? n++ : n - 1;
	for (; i > 0 && c->worst[i - 1].ns < ns; i--)
		c->worst[i] = c->worst[i - 1];
	struct worst *w = &c->worst[i];
	w->ns = ns;
	w->schema = c->schema;
	w->pos = pos;
	size_t from = pos > sizeof w->ctx - 1 ? pos - (sizeof w->ctx - 1) : 0;
	snprintf(w->ctx, sizeof w->ctx, "%.*s", (int)(pos - from), c->text ? c->text + from : "");
	c->n_worst = n;
}

static void worst_print(struct ctx *c)
{
	for (int i = 0; i < c->n_worst; i++)
		printf("slow mask %.1f us: schema %ld, byte %zu, after '%s'\n", c->worst[i].ns / 1e3,
		       c->worst[i].schema, c->worst[i].pos, c->worst[i].ctx);
}

/* Every token tried by accepting it and rolling back: the mask must
 * hold exactly those taken. */
static void try_tokens(struct ctx *c, struct gm_matcher *m)
{
	size_t at = gm_matcher_pos(m);
	long wrong = 0;
	for (int id = 0; id < tok_n_vocab(c->t); id++) {
		bool took = gm_matcher_accept_token(m, id) == 0;
		if (took)
			gm_matcher_rollback(m, at);
		if (took == (bool)(c->mask[id >> 5] >> (id & 31) & 1))
			continue;
		if (c->verbose && wrong < 8) {
			char piece[256];
			int pl = tok_piece(c->t, id, false, piece, sizeof piece - 1);
			piece[pl > 0 ? pl : 0] = 0;
			printf("mask wrong at byte %zu: token %d '%s' %s\n", at, id, piece,
			       took ? "taken, not in the mask" : "in the mask, not taken");
		}
		wrong++;
	}
	if (wrong)
		c->mismatches++;
}

/* The mask now, timed for --bench; with --check-fast also the plain
 * walk's, which must be the same; with --check-exact, tried token by
 * token. */
static void mask(struct ctx *c, struct gm_matcher *m)
{
	uint64_t t0 = now_ns();
	int n = gm_matcher_mask(m, c->mask);
	if (c->timed) {
		uint64_t ns = now_ns() - t0;
		lat_add(&c->mask_ns, ns);
		worst_add(c, ns, gm_matcher_pos(m));
	}
	if (c->exact)
		try_tokens(c, m);
	if (!c->slow)
		return;
	gm_matcher_slow(m, true);
	int ns = gm_matcher_mask(m, c->slow);
	gm_matcher_slow(m, false);
	size_t words = ((size_t)tok_n_vocab(c->t) + 31) / 32;
	if (n != ns || memcmp(c->mask, c->slow, words * sizeof *c->mask)) {
		c->mismatches++;
		if (c->verbose)
			printf("mask mismatch at byte %zu: %d tokens, the plain walk %d\n", gm_matcher_pos(m), n, ns);
		for (size_t i = 0, shown = 0; c->verbose && i < words * 32 && shown < 8; i++) {
			if (!((c->mask[i / 32] ^ c->slow[i / 32]) >> (i % 32) & 1))
				continue;
			printf("  token %zu: %s\n", i, c->slow[i / 32] >> (i % 32) & 1 ? "plain only" : "fast only");
			shown++;
		}
	}
}

/* Walk text: 0 accepted and complete; 2 refused (where in *at, -1: at the
 * end, EOS not allowed). masks: check each token against the mask. */
static int walk(struct ctx *c, const struct gm_grammar *g, const char *text, size_t len, int masks,
		int *at, int32_t **ids_out, int *n_out)
{
	int cap = (int)len + 16;
	int32_t *ids = malloc(cap * sizeof *ids);
	int n = ids ? tok_encode(c->t, text, len, false, false, ids, cap) : TOK_ERR;
	if (n < 0) {
		free(ids);
		*at = -2;
		return 1;
	}
	*ids_out = ids;
	*n_out = n;
	c->text = text;
	struct gm_matcher *m = gm_matcher_new(g, c->v);
	if (!m) {
		*at = -2;
		return 1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char piece[1024];
		int pl = tok_piece(c->t, ids[i], false, piece, sizeof piece);
		/* SPM adds a space in front of the text: the stream drops it */
		bool strip = i == 0 && c->spm && pl > 0 && piece[0] == ' ' && (len == 0 || text[0] != ' ');
		if (i < masks || c->timed) {
			mask(c, m);
			if (i < masks && !strip && !(c->mask[ids[i] >> 5] >> (ids[i] & 31) & 1)) {
				*at = i;
				rc = 2;
				break;
			}
		}
		int r = strip ? gm_matcher_accept_bytes(m, piece + 1, pl - 1) : gm_matcher_accept_token(m, ids[i]);
		if (r) {
			*at = i;
			rc = 2;
			break;
		}
	}
	if (!rc) {
		if (n < masks || c->timed)
			mask(c, m);
		if (!gm_matcher_is_complete(m)) {
			*at = -1;
			rc = 2;
		}
	}
	gm_matcher_free(m);
	return rc;
}

static int sweep(struct ctx *c, const char *path, bool all_masks)
{
	size_t len;
	FILE *f = fopen(path, "r");
	char *data = f ? read_all(f, &len) : NULL;
	if (f)
		fclose(f);
	if (!data) {
		fprintf(stderr, "pagoda constrain: cannot read %s\n", path);
		return 1;
	}
	struct lat compile_ns = { 0 };
	long schemas = 0, compiled = 0, nv = 0, nv_ok = 0, ni = 0, ni_refused = 0, skipped = 0;
	struct gm_grammar *g = NULL;
	char *schema = NULL;
	size_t slen = 0;
	bool first_valid = true;
	for (char *line = data, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		if (!line[0] || line[1] != '\t')
			continue;
		char kind = line[0], *json = line + 2;
		size_t jl = strlen(json);
		if (kind == 'S') {
			gm_grammar_unref(g);
			g = NULL;
			schema = json;
			slen = jl;
			schemas++;
			c->schema = schemas;
			first_valid = true;
			char err[256];
			uint64_t t0 = now_ns();
			if (gm_compile(GM_JSON_SCHEMA, json, jl, &g, err, sizeof err) == 0) {
				lat_add(&compile_ns, now_ns() - t0);
				compiled++;
			} else {
				printf("refused schema %ld: %s\n", schemas, err);
			}
			continue;
		}
		if (!g || (kind != 'V' && kind != 'I'))
			continue;
		char *canon, err[256];
		size_t cl;
		if (gm_json_canonical(schema, slen, json, jl, &canon, &cl, err, sizeof err)) {
			skipped++;
			continue;
		}
		int at = 0, n = 0;
		int32_t *ids = NULL;
		int masks = all_masks ? INT32_MAX : kind == 'V' && first_valid ? 4 : 0;
		c->timed = c->bench && kind == 'V';
		int rc = walk(c, g, canon, cl, masks, &at, &ids, &n);
		if (kind == 'V') {
			first_valid = false;
			nv++;
			if (rc == 0)
				nv_ok++;
			else
				printf("valid instance refused (schema %ld, token %d of %d): %.300s\n", schemas, at, n,
				       canon);
		} else {
			ni++;
			ni_refused += rc == 2;
			if (rc != 2 && c->verbose)
				printf("invalid instance accepted (schema %ld): %.300s\n", schemas, canon);
		}
		free(ids);
		free(canon);
	}
	gm_grammar_unref(g);
	free(data);
	printf("schemas: %ld, compiled: %ld (%.1f%%)\n", schemas, compiled,
	       schemas ? 100.0 * compiled / schemas : 0.0);
	printf("valid instances: %ld, accepted: %ld, refused: %ld\n", nv, nv_ok, nv - nv_ok);
	printf("invalid instances: %ld, refused: %ld (%.1f%%), accepted: %ld\n", ni, ni_refused,
	       ni ? 100.0 * ni_refused / ni : 0.0, ni - ni_refused);
	if (skipped)
		printf("instances not representable (skipped): %ld\n", skipped);
	if (c->slow || c->exact)
		printf("masks unlike the %s: %ld\n", c->exact ? "tokens taken" : "plain walk's", c->mismatches);
	if (c->bench) {
		lat_print("compile", &compile_ns);
		lat_print("mask", &c->mask_ns);
		worst_print(c);
	}
	free(compile_ns.v);
	return nv_ok == nv && !c->mismatches ? 0 : 2;
}

static int usage(FILE *f)
{
	fprintf(f, "usage: pagoda constrain -m MODEL (--json-schema FILE | --regex RE | --grammar FILE) [--bench] < text\n"
		   "       pagoda constrain -m MODEL --sweep FILE [--all-masks] [--bench [--worst N]]\n"
		   "  walks stdin through the constraint token by token (the model's tokenizer, no BOS):\n"
		   "  exit 0: every token allowed and the text complete; 2: refused; 1: does not compile\n"
		   "  --bench       print compile and mask times (indicative on a shared machine)\n"
		   "  --sweep FILE  lines 'S\\t<schema>', 'V\\t<valid>', 'I\\t<invalid>': coverage\n"
		   "  --all-masks   in a sweep, check every token against the mask (default: the\n"
		   "                first 4 tokens of each schema's first valid instance; the\n"
		   "                rest is walked, which takes the same parser steps)\n"
		   "  --check-fast  compare every mask with the plain trie walk's (exit 2 if unlike)\n"
		   "  --check-exact compare every mask with the tokens the matcher takes, each\n"
		   "                tried and rolled back (slow: the whole vocabulary a mask)\n"
		   "  --worst N     with --bench, list the N slowest masks (schema, byte, text before)\n");
	return f == stdout ? 0 : 2;
}

int cmd_constrain(int argc, char **argv)
{
	const char *model = NULL, *file = NULL, *re = NULL, *sweep_file = NULL;
	enum gm_kind kind = GM_NONE;
	bool bench = false, all_masks = false, verbose = false, check_fast = false, check_exact = false;
	int n_worst = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
			if (!(model = opt_value(argc, argv, &i)))
				return 1;
		} else if (!strcmp(a, "--json-schema") || !strcmp(a, "--grammar")) {
			kind = a[2] == 'j' ? GM_JSON_SCHEMA : GM_GBNF;
			if (!(file = opt_value(argc, argv, &i)))
				return 1;
		} else if (!strcmp(a, "--regex")) {
			kind = GM_REGEX;
			if (!(re = opt_value(argc, argv, &i)))
				return 1;
		} else if (!strcmp(a, "--sweep")) {
			if (!(sweep_file = opt_value(argc, argv, &i)))
				return 1;
		} else if (!strcmp(a, "--bench")) {
			bench = true;
		} else if (!strcmp(a, "-v")) {
			verbose = true;
		} else if (!strcmp(a, "--all-masks")) {
			all_masks = true;
		} else if (!strcmp(a, "--check-fast")) {
			check_fast = true;
		} else if (!strcmp(a, "--check-exact")) {
			check_exact = true;
		} else if (!strcmp(a, "--worst")) {
			const char *v = opt_value(argc, argv, &i);
			if (!v)
				return 1;
			n_worst = atoi(v);
		} else {
			usage(stderr);
			return !strcmp(a, "--help") ? 0 : 1;
		}
	}
	if (!model || (kind == GM_NONE && !sweep_file)) {
		usage(stderr);
		return 1;
	}
	char err[512];
	struct gguf_file *gf;
	struct tokenizer *t;
	if (gguf_open(model, &gf, err, sizeof err) || tok_load(gf, &t, err, sizeof err)) {
		fprintf(stderr, "pagoda constrain: %s\n", err);
		return 1;
	}
	gguf_close(gf);
	struct ctx c = { .t = t, .bench = bench, .verbose = verbose, .exact = check_exact,
			 .spm = !strcmp(tok_model_name(t), "llama") };
	uint64_t t0 = now_ns();
	c.v = gm_vocab_from_tokenizer(t);
	c.mask = malloc(((size_t)tok_n_vocab(t) + 31) / 32 * sizeof *c.mask);
	if (n_worst > 0 && (c.worst = calloc(n_worst, sizeof *c.worst)))
		c.cap_worst = n_worst;
	if (check_fast)
		c.slow = malloc(((size_t)tok_n_vocab(t) + 31) / 32 * sizeof *c.slow);
	if (!c.v || !c.mask || (check_fast && !c.slow)) {
		fprintf(stderr, "pagoda constrain: out of memory\n");
		return 1;
	}
	if (bench)
		printf("vocabulary trie: %d tokens (the longest %d bytes) in %.1f ms\n", tok_n_vocab(t),
		       gm_vocab_longest(c.v), (now_ns() - t0) / 1e6);
	int rc;
	if (sweep_file) {
		rc = sweep(&c, sweep_file, all_masks);
	} else {
		size_t slen = 0, len;
		char *src = NULL;
		if (file) {
			FILE *f = fopen(file, "r");
			src = f ? read_all(f, &slen) : NULL;
			if (f)
				fclose(f);
			if (!src) {
				fprintf(stderr, "pagoda constrain: cannot read %s\n", file);
				return 1;
			}
		}
		struct gm_grammar *g;
		t0 = now_ns();
		if (gm_compile(kind, re ? re : src, re ? strlen(re) : slen, &g, err, sizeof err)) {
			fprintf(stderr, "pagoda constrain: %s\n", err);
			return 1;
		}
		if (bench)
			printf("compile: %.1f us (%zu symbols)\n", (now_ns() - t0) / 1e3, gm_grammar_size(g));
		char *text = read_all(stdin, &len);
		int at = 0, n = 0;
		int32_t *ids = NULL;
		c.timed = bench;
		rc = text ? walk(&c, g, text, len, INT32_MAX, &at, &ids, &n) : 1;
		if (rc == 0 && c.mismatches) {
			fprintf(stderr, "pagoda constrain: %ld masks unlike the plain walk's\n", c.mismatches);
			rc = 2;
			at = -3;
		}
		if (rc == 2 && at >= 0) {
			char piece[256];
			int pl = tok_piece(t, ids[at], false, piece, sizeof piece - 1);
			fprintf(stderr, "pagoda constrain: token %d of %d (id %d, '%.*s') is not allowed\n", at, n,
				ids[at], pl < 0 ? 0 : pl > 255 ? 255 : pl, piece);
		} else if (rc == 2 && at == -1) {
			fprintf(stderr, "pagoda constrain: the text is incomplete (end of generation not allowed after %d tokens)\n", n);
		} else if (rc == 1) {
			fprintf(stderr, "pagoda constrain: cannot tokenize the input\n");
		}
		if (bench) {
			lat_print("mask", &c.mask_ns);
			worst_print(&c);
		}
		free(ids);
		free(text);
		free(src);
		gm_grammar_unref(g);
	}
	free(c.mask_ns.v);
	free(c.worst);
	free(c.mask);
	free(c.slow);
	gm_vocab_free(c.v);
	tok_free(t);
	return rc;
}
