/* daemon/grammar/cache.c — compiling by kind, and a process-wide cache of
 * compiled grammars keyed by the content's hash (the same schema sent by
 * every request of an agent compiles once). */
#include "daemon/grammar/gm_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#define GM_CACHE_SLOTS 64

int gm_compile(enum gm_kind kind, const char *src, size_t len, struct gm_grammar **out,
	       char *err, size_t errlen)
{
	struct gm_b b;
	gmb_init(&b, err, errlen);
	int32_t start = 0;
	switch (kind) {
	case GM_JSON_SCHEMA: start = gm_schema(&b, src, len); break;
	case GM_REGEX: start = gm_regex(&b, src, len, false); break;
	case GM_GBNF: start = gm_gbnf(&b, src, len); break;
	default: gmb_fail(&b, "unknown constraint kind %d", (int)kind); break;
	}
	struct gm_grammar *g = gmb_finish(&b, start);
	gmb_free(&b);
	if (!g)
		return -1;
	g->kind = kind;
	*out = g;
	return 0;
}

static void grammar_free(struct gm_grammar *g)
{
	free(g->rhs);
	free(g->pos_lhs);
	free(g->nt_prods);
	free(g->prod_pos);
	free(g->nullable);
	free(g->cnts);
	free(g->terms);
	free(g->src);
	free(g);
}

void gm_grammar_unref(struct gm_grammar *g)
{
	if (g && atomic_fetch_sub(&g->refs, 1) == 1)
		grammar_free(g);
}

size_t gm_grammar_size(const struct gm_grammar *g)
{
	return g->n_rhs;
}

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gm_grammar *cache[GM_CACHE_SLOTS];
static uint64_t cache_used[GM_CACHE_SLOTS], cache_clock;

int gm_compile_cached(enum gm_kind kind, const char *src, size_t len, struct gm_grammar **out,
		      char *err, size_t errlen)
{
	uint64_t h = XXH3_64bits_withSeed(src, len, (uint64_t)kind);
	pthread_mutex_lock(&cache_lock);
	for (int i = 0; i < GM_CACHE_SLOTS; i++) {
		struct gm_grammar *g = cache[i];
		if (g && g->hash == h && g->kind == (int)kind && g->src_len == len && !memcmp(g->src, src, len)) {
			atomic_fetch_add(&g->refs, 1);
			cache_used[i] = ++cache_clock;
			pthread_mutex_unlock(&cache_lock);
			*out = g;
			return 0;
		}
	}
	pthread_mutex_unlock(&cache_lock);
	struct gm_grammar *g;
	if (gm_compile(kind, src, len, &g, err, errlen))
		return -1;
	g->hash = h;
	g->src_len = len;
	if ((g->src = malloc(len + 1))) {
		memcpy(g->src, src, len);
		atomic_fetch_add(&g->refs, 1); /* the cache's reference */
		pthread_mutex_lock(&cache_lock);
		int victim = 0;
		for (int i = 1; i < GM_CACHE_SLOTS; i++)
			if (cache_used[i] < cache_used[victim])
				victim = i;
		gm_grammar_unref(cache[victim]);
		cache[victim] = g;
		cache_used[victim] = ++cache_clock;
		pthread_mutex_unlock(&cache_lock);
	}
	*out = g;
	return 0;
}
