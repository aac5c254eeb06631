/* daemon/server/intake.c — request preparation off the main loop.
 *
 * Whatever a request costs in proportion to its size runs here, on one
 * worker thread, never on the loop that serves every client: tokenizing the
 * text, checking the ids, the exact context check, then engine_submit.
 * Chat requests are rendered with the model's template here too. The worker
 * takes one request per client in turn, so a client queueing large prompts
 * delays others by one of its requests at most.
 *
 * Cancels race with preparation; s->in_lock settles them: a request is
 * QUEUED or in PREP (a cancel only marks it, and the worker ends it without
 * the engine) or in the ENGINE (set under in_lock around engine_submit, so
 * a cancel that sees it there finds the engine knowing it).
 */
#include "daemon/server/server_int.h"
#include "daemon/chat/chat.h"
#include "daemon/grammar/grammar.h"
#include "daemon/model/tokenizer.h"
#include "daemon/server/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Called locked. */
static struct sreq *next_locked(struct server *s)
{
	struct client *c = s->rr_head;
	if (!c)
		return NULL;
	s->rr_head = c->rr_next;
	if (!s->rr_head)
		s->rr_tail = NULL;
	struct sreq *r = c->in_head;
	c->in_head = r->in_next;
	if (!c->in_head) {
		c->in_tail = NULL;
		c->on_rr = false;
	} else { /* its next request waits for everyone else's */
		c->rr_next = NULL;
		if (s->rr_tail)
			s->rr_tail->rr_next = c;
		else
			s->rr_head = c;
		s->rr_tail = c;
	}
	r->state = SREQ_PREP;
	return r;
}

/* A chat request (JSON) rendered with the model's chat template: the text
 * to tokenize, malloc'd, or NULL with msg. A template that writes
 * bos_token itself gets no second BOS. */
static char *render_chat(struct server *s, const char *buf, size_t len, size_t *outlen, bool *add_bos,
			 char *msg, size_t ml)
{
	char *text;
	if (!s->chat) {
		snprintf(msg, ml, "%.*s", (int)(ml > 0 ? ml - 1 : 0), s->chat_why);
		return NULL;
	}
	if (chat_render(s->chat, buf, len, 0, &text, outlen, NULL, msg, ml))
		return NULL;
	const char *bos = chat_bos(s->chat);
	*add_bos = tok_add_bos(s->tok) && !(*bos && !strncmp(text, bos, strlen(bos)));
	return text;
}

/* Tokenizes (or checks the ids) and checks the context: 0 with r->er
 * ready and *owned the ids to free after engine_submit, or an
 * ENGINE_ERR_* with msg. Frees r->buf either way. */
/* The request's prefix-cache salt: its user's (or primary group's) scope,
 * narrowed by the scope the client asked for; 0 (the global cache) only
 * when the daemon's scope is global and the client asked for none. */
static uint64_t cache_salt(struct server *s, const struct client *c, uint32_t client_scope)
{
	int scope = __atomic_load_n(&s->cache_scope, __ATOMIC_RELAXED);
	if (scope == SCOPE_GLOBAL && client_scope == 0)
		return 0;
	uint32_t key[3] = { (uint32_t)scope, 0, client_scope };
	if (scope == SCOPE_USER)
		key[1] = (uint32_t)c->uid;
	else if (scope == SCOPE_GROUP)
		key[1] = (uint32_t)c->gid;
	uint64_t h = XXH3_64bits(key, sizeof key);
	return h ? h : 1;
}

/* The extension record's values (proto_copy_ext checked its layout). */
static int check_ext(const struct sreq *r, char *msg, size_t ml)
{
	const struct pg_submit_ext *x = &r->ext;
	if (x->constraint_kind > PG_CONSTRAINT_GBNF) {
		snprintf(msg, ml, "unknown constraint kind %u", x->constraint_kind);
		return -1;
	}
	if (!x->constraint_kind != !r->ctext) {
		snprintf(msg, ml, "a constraint needs both its kind and its text");
		return -1;
	}
	if (x->top_logprobs > PG_TOP_LOGPROBS) {
		snprintf(msg, ml, "top_logprobs %u is not within 0..%d", x->top_logprobs, PG_TOP_LOGPROBS);
		return -1;
	}
	if (x->top_logprobs && !(r->sqe.flags & PG_SUBMIT_LOGPROBS)) {
		snprintf(msg, ml, "top_logprobs needs logprobs");
		return -1;
	}
	if (!isfinite(x->presence_penalty) || fabsf(x->presence_penalty) > 2 || !isfinite(x->frequency_penalty) ||
	    fabsf(x->frequency_penalty) > 2) {
		snprintf(msg, ml, "presence and frequency penalties must be within -2..2");
		return -1;
	}
	return 0;
}

static int prepare(struct server *s, struct sreq *r, int32_t **owned, char *msg, size_t ml)
{
	const struct pg_sqe *e = &r->sqe;
	int32_t *ids = NULL;
	int n = 0, rc = 0;
	*owned = NULL;
	if (check_ext(r, msg, ml)) {
		rc = ENGINE_ERR_INVALID;
		goto out;
	}
	if (e->flags & PG_SUBMIT_IDS) {
		ids = (int32_t *)r->buf;
		n = (int)(r->len / 4);
		r->buf = NULL;
		if (proto_check_ids(ids, (size_t)n, s->n_vocab) < 0) {
			snprintf(msg, ml, "token id out of the vocabulary");
			rc = ENGINE_ERR_INVALID;
			goto out;
		}
	} else {
		/* A token stands for at least one byte of the text (specials
		 * added: BOS, EOS), so len + 8 ids always suffice. */
		bool bos = tok_add_bos(s->tok);
		if (e->flags & PG_SUBMIT_CHAT) {
			size_t tl;
			char *text = render_chat(s, r->buf, r->len, &tl, &bos, msg, ml);
			if (!text) {
				rc = ENGINE_ERR_INVALID;
				goto out;
			}
			free(r->buf);
			r->buf = text;
			r->len = tl;
		}
		int cap = r->len < (size_t)INT32_MAX - 8 ? (int)r->len + 8 : INT32_MAX;
		ids = malloc(sizeof *ids * (size_t)cap);
		if (!ids) {
			snprintf(msg, ml, "out of memory tokenizing");
			rc = ENGINE_ERR_NOMEM;
			goto out;
		}
		n = tok_encode(s->tok, r->buf, r->len, bos, true, ids, cap);
		if (n < 0) {
			snprintf(msg, ml, "the prompt cannot be tokenized");
			rc = ENGINE_ERR_INVALID;
			goto out;
		}
	}
	if (n == 0) {
		snprintf(msg, ml, "empty prompt");
		rc = ENGINE_ERR_INVALID;
		goto out;
	}
	int max_tokens = e->max_tokens;
	if ((e->flags & PG_SUBMIT_CLAMP) && (int64_t)n + max_tokens > s->n_ctx)
		max_tokens = s->n_ctx - n;
	if ((int64_t)n + max_tokens > s->n_ctx || max_tokens <= 0) {
		snprintf(msg, ml, "prompt (%d tokens) + max_tokens (%d) exceed the context (%d)", n, e->max_tokens,
			 s->n_ctx);
		rc = ENGINE_ERR_CONTEXT;
		goto out;
	}
	r->er.prompt = ids;
	r->er.n_prompt = n;
	r->er.max_tokens = max_tokens;
	sampling_defaults(&r->er.sampling);
	r->er.sampling.temp = e->temp;
	r->er.sampling.top_k = e->top_k;
	r->er.sampling.top_p = e->top_p;
	r->er.sampling.min_p = e->min_p;
	r->er.sampling.repeat_penalty = e->repeat_penalty;
	r->er.sampling.repeat_last_n = e->repeat_last_n;
	r->er.sampling.seed = e->seed;
	r->er.cache_salt = cache_salt(s, r->c, e->cache_scope);
	r->er.want_logprob = (e->flags & PG_SUBMIT_LOGPROBS) != 0;
	_Static_assert((int)PG_CONSTRAINT_JSON_SCHEMA == (int)GM_JSON_SCHEMA && (int)PG_CONSTRAINT_REGEX == (int)GM_REGEX &&
			       (int)PG_CONSTRAINT_GBNF == (int)GM_GBNF && PG_TOP_LOGPROBS == ENGINE_TOP_LOGPROBS,
		       "enum pg_constraint is enum gm_kind");
	r->er.top_logprobs = (int)r->ext.top_logprobs;
	r->er.sampling.presence_penalty = r->ext.presence_penalty;
	r->er.sampling.frequency_penalty = r->ext.frequency_penalty;
	r->er.constraint_kind = (int)r->ext.constraint_kind;
	r->er.constraint = r->ctext; /* compiled in engine_submit, freed after it */
	r->er.constraint_len = r->ext.constraint_len;
	_Static_assert((int)PG_SPEC_OFF == (int)ENGINE_SPEC_OFF && (int)PG_SPEC_NGRAM == (int)ENGINE_SPEC_NGRAM &&
			       (int)PG_SPEC_DRAFT == (int)ENGINE_SPEC_DRAFT && PG_DRAFT_MAX == ENGINE_DRAFT_MAX,
		       "enum pg_spec is enum engine_spec");
	r->er.spec = (enum engine_spec)((e->flags & PG_SUBMIT_SPEC_MASK) >> PG_SUBMIT_SPEC_SHIFT);
	r->er.draft_max = (int)((e->flags & PG_SUBMIT_DRAFT_MASK) >> PG_SUBMIT_DRAFT_SHIFT);
	r->er.n_stop = (int)e->n_stop;
	for (uint32_t i = 0; i < e->n_stop && i < ENGINE_MAX_STOP; i++) {
		memcpy(r->er.stop[i], e->stop[i], e->stop_len[i]);
		r->er.stop[i][e->stop_len[i]] = 0;
	}
	*owned = ids;
	ids = NULL;
out:
	free(ids);
	free(r->buf);
	r->buf = NULL;
	return rc;
}

static void *intake_main(void *arg)
{
	struct server *s = arg;
	char msg[PG_MSG_LEN + 1];
	pthread_mutex_lock(&s->in_lock);
	for (;;) {
		struct sreq *r = next_locked(s);
		if (!r) {
			if (s->in_stop)
				break;
			pthread_cond_wait(&s->in_cond, &s->in_lock);
			continue;
		}
		bool cancel = r->cancelled || s->in_stop;
		pthread_mutex_unlock(&s->in_lock);
		int32_t *owned = NULL;
		int rc = 0;
		size_t bytes = r->len;
		if (!cancel)
			rc = prepare(s, r, &owned, msg, sizeof msg);
		free(r->buf);
		r->buf = NULL;
		if (bytes >= 65536)
			atomic_fetch_add(&s->trim_owed, (int64_t)bytes * 5); /* the text and its ids */
		pthread_mutex_lock(&s->in_lock);
		cancel = r->cancelled || s->in_stop;
		if (cancel || rc) {
			pthread_mutex_unlock(&s->in_lock);
			if (cancel)
				sq_on_done(&r->er, FINISH_CANCEL, 0, NULL);
			else
				sq_on_done(&r->er, FINISH_ERROR, rc, msg);
			free(owned);
			pthread_mutex_lock(&s->in_lock);
			continue;
		}
		struct client *c = r->c;
		log_msg(LOG_DEBUG, "client %llu: request %llu: %d prompt tokens, max %d", (unsigned long long)c->id,
			(unsigned long long)r->creq, r->er.n_prompt, r->sqe.max_tokens);
		r->state = SREQ_ENGINE;
		char *ctext = r->ctext;
		r->ctext = NULL;
		engine_submit(s->eng, &r->er); /* on a refusal sq_on_done has run: r is gone */
		free(owned);
		free(ctext);
	}
	pthread_mutex_unlock(&s->in_lock);
	return NULL;
}

void intake_push(struct server *s, struct sreq *r)
{
	struct client *c = r->c;
	pthread_mutex_lock(&s->in_lock);
	r->state = SREQ_QUEUED;
	r->in_next = NULL;
	if (c->in_tail)
		c->in_tail->in_next = r;
	else
		c->in_head = r;
	c->in_tail = r;
	if (!c->on_rr) {
		c->on_rr = true;
		c->rr_next = NULL;
		if (s->rr_tail)
			s->rr_tail->rr_next = c;
		else
			s->rr_head = c;
		s->rr_tail = c;
	}
	pthread_cond_signal(&s->in_cond);
	pthread_mutex_unlock(&s->in_lock);
}

int intake_start(struct server *s)
{
	if (pthread_create(&s->in_thread, NULL, intake_main, s) != 0)
		return -1;
	s->in_started = true;
	return 0;
}

void intake_stop(struct server *s)
{
	if (!s->in_started)
		return;
	pthread_mutex_lock(&s->in_lock);
	s->in_stop = true;
	pthread_cond_signal(&s->in_cond);
	pthread_mutex_unlock(&s->in_lock);
	pthread_join(s->in_thread, NULL);
	s->in_started = false;
}
