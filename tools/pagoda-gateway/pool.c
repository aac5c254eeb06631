/* tools/pagoda-gateway/pool.c — a few libpagoda connections to pagodad,
 * each with a dispatcher thread that reads its events and hands them to the
 * calls (HTTP requests) waiting on them. Requests of many HTTP clients are
 * multiplexed over these connections; a connection that loses the daemon
 * fails its calls and reconnects. */
#include "tools/pagoda-gateway/gw.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct conn;

/* Wakes the one thread that waits on several calls (the choices of n > 1). */
struct gw_wake {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t seq;
};

struct gw_call {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int refs;                 /* the holder's and, until the final event, the map's */
	uint64_t id;
	struct conn *conn;
	bool is_stats;
	struct pagoda_stats st;
	char *buf;                /* text gathered since the last take */
	size_t len, cap;
	int n_tokens;
	struct gw_tok *toks;      /* tokens with a logprob since the last take */
	int n_toks, cap_toks;
	bool final;
	int finish, error;
	char errmsg[128];
	struct pagoda_timings t;
	uint64_t last_tok_ns;
	struct gw_wake *wake;     /* under lock; NULL once the holder released the call */
};

struct conn {
	struct gw_pool *pool;
	pthread_rwlock_t rw;      /* pg's lifetime: users read, the dispatcher writes */
	pagoda_t *pg;             /* NULL while the daemon is unreachable */
	pthread_mutex_t mlock;    /* the map of calls in flight */
	struct gw_call **calls;
	int n, cap;
	pthread_t th;
};

struct gw_pool {
	char socket[256];
	int n;
	struct conn *c;
	atomic_bool stop;
	atomic_int n_ctx;
	atomic_int up;
	atomic_int last_err;  /* why the last connect failed */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void call_unref(struct gw_call *c)
{
	pthread_mutex_lock(&c->lock);
	int r = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (r)
		return;
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c->buf);
	gw_toks_free(c->toks, c->n_toks);
	free(c);
}

void gw_toks_free(struct gw_tok *t, int n)
{
	for (int i = 0; t && i < n; i++)
		json_decref(t[i].top);
	free(t);
}

/* OpenAI's top_logprobs entries: token (as text), logprob, bytes. */
static json_t *top_json(const struct pagoda_event *ev)
{
	json_t *a = json_array();
	for (int i = 0; a && i < ev->n_top; i++) {
		const struct pagoda_top *t = &ev->top[i];
		json_t *o = json_object(), *bytes = json_array();
		json_object_set_new(o, "token", gw_json_text(t->text, t->len));
		json_object_set_new(o, "logprob", json_real(t->logprob));
		for (size_t k = 0; k < t->len; k++)
			json_array_append_new(bytes, json_integer((unsigned char)t->text[k]));
		json_object_set_new(o, "bytes", bytes);
		json_array_append_new(a, o);
	}
	return a;
}

static struct gw_call *call_new(void)
{
	struct gw_call *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->refs = 2;
	return c;
}

/* With c->lock held: tells the call's group something came. */
static void wake_up(struct gw_call *c)
{
	struct gw_wake *w = c->wake;
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->seq++;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

struct gw_wake *gw_wake_new(void)
{
	struct gw_wake *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	return w;
}

void gw_wake_free(struct gw_wake *w)
{
	if (!w)
		return;
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
}

uint64_t gw_wake_seq(struct gw_wake *w)
{
	pthread_mutex_lock(&w->lock);
	uint64_t s = w->seq;
	pthread_mutex_unlock(&w->lock);
	return s;
}

/* timeout_ms from now on CLOCK_REALTIME, for pthread_cond_timedwait. */
static struct timespec deadline(int timeout_ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return dl;
}

int gw_wake_wait(struct gw_wake *w, uint64_t seen, int timeout_ms)
{
	struct timespec dl = deadline(timeout_ms);
	int rc = 0;
	pthread_mutex_lock(&w->lock);
	while (w->seq == seen && rc == 0)
		rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	bool moved = w->seq != seen;
	pthread_mutex_unlock(&w->lock);
	return moved ? 0 : PAGODA_E_TIMEOUT;
}

void gw_call_set_wake(struct gw_call *c, struct gw_wake *w)
{
	pthread_mutex_lock(&c->lock);
	c->wake = w;
	if (c->len || c->final || c->n_tokens)
		wake_up(c);
	pthread_mutex_unlock(&c->lock);
}

/* With mlock held: the call leaves the map (its final event came). */
static void map_del(struct conn *k, int i)
{
	k->calls[i] = k->calls[--k->n];
}

static int map_add(struct conn *k, struct gw_call *c)
{
	if (k->n == k->cap) {
		int cap = k->cap ? 2 * k->cap : 64;
		struct gw_call **n = realloc(k->calls, (size_t)cap * sizeof *n);
		if (!n)
			return PAGODA_E_NOMEM;
		k->calls = n;
		k->cap = cap;
	}
	k->calls[k->n++] = c;
	return 0;
}

static void append(struct gw_call *c, const char *s, size_t n)
{
	if (c->len + n + 1 > c->cap) {
		size_t cap = c->cap ? c->cap : 256;
		while (cap < c->len + n + 1)
			cap *= 2;
		char *b = realloc(c->buf, cap);
		if (!b) {
			c->error = PAGODA_E_NOMEM;
			return;
		}
		c->buf = b;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, s, n);
	c->len += n;
	c->buf[c->len] = 0;
}

static void deliver(struct conn *k, const struct pagoda_event *ev)
{
	pthread_mutex_lock(&k->mlock);
	struct gw_call *c = NULL;
	int at = -1;
	for (int i = 0; i < k->n; i++)
		if (k->calls[i]->id == ev->req_id) {
			c = k->calls[i];
			at = i;
			break;
		}
	if (!c) {
		pthread_mutex_unlock(&k->mlock);
		return;
	}
	bool final = ev->type != PAGODA_EV_TOKEN;
	if (final)
		map_del(k, at);
	pthread_mutex_unlock(&k->mlock);

	pthread_mutex_lock(&c->lock);
	switch (ev->type) {
	case PAGODA_EV_TOKEN:
		if (ev->has_logprob) {
			if (c->n_toks == c->cap_toks) {
				int cap = c->cap_toks ? 2 * c->cap_toks : 16;
				struct gw_tok *n = realloc(c->toks, (size_t)cap * sizeof *n);
				if (n) {
					c->toks = n;
					c->cap_toks = cap;
				}
			}
			if (c->n_toks < c->cap_toks)
				c->toks[c->n_toks++] = (struct gw_tok){ c->len, 0, ev->logprob,
									ev->n_top ? top_json(ev) : NULL };
		}
		append(c, ev->text, ev->len);
		if (c->n_toks && (ev->has_logprob || ev->token < 0)) /* continuations extend it */
			c->toks[c->n_toks - 1].len = c->len - c->toks[c->n_toks - 1].off;
		if (ev->token >= 0) {
			uint64_t t = now_ns();
			if (c->last_tok_ns)
				gw_metrics_itl(t - c->last_tok_ns);
			c->last_tok_ns = t;
			c->n_tokens++;
		}
		break;
	case PAGODA_EV_DONE:
		c->finish = ev->finish;
		c->t = ev->timings;
		gw_metrics_done(&ev->timings, ev->finish);
		break;
	case PAGODA_EV_ERROR:
		c->error = ev->error < 0 ? ev->error : PAGODA_E_INTERNAL;
		snprintf(c->errmsg, sizeof c->errmsg, "%s", ev->text ? ev->text : "");
		break;
	case PAGODA_EV_STATS:
		c->st = ev->stats;
		break;
	}
	c->final = c->final || final;
	pthread_cond_broadcast(&c->cond);
	wake_up(c);
	pthread_mutex_unlock(&c->lock);
	if (final)
		call_unref(c);
}

/* The daemon went away: every call of this connection ends with an error. */
static void fail_all(struct conn *k, int err)
{
	pthread_mutex_lock(&k->mlock);
	int n = k->n;
	struct gw_call **calls = k->calls;
	k->calls = NULL;
	k->n = k->cap = 0;
	pthread_mutex_unlock(&k->mlock);
	for (int i = 0; i < n; i++) {
		struct gw_call *c = calls[i];
		pthread_mutex_lock(&c->lock);
		c->final = true;
		c->error = err;
		snprintf(c->errmsg, sizeof c->errmsg, "pagodad: %s", pagoda_strerror(err));
		pthread_cond_broadcast(&c->cond);
		wake_up(c);
		pthread_mutex_unlock(&c->lock);
		call_unref(c);
	}
	free(calls);
}

static void *dispatch(void *arg)
{
	struct conn *k = arg;
	struct gw_pool *p = k->pool;
	while (!atomic_load(&p->stop)) {
		if (!k->pg) {
			pagoda_t *pg;
			const char *sock = p->socket[0] ? p->socket : NULL;
			int rc = pagoda_connect(sock, &pg);
			if (rc < 0) {
				atomic_store(&p->last_err, rc);
				usleep(200 * 1000);
				continue;
			}
			atomic_store(&p->n_ctx, pagoda_n_ctx(pg));
			pthread_rwlock_wrlock(&k->rw);
			k->pg = pg;
			pthread_rwlock_unlock(&k->rw);
			atomic_fetch_add(&p->up, 1);
		}
		struct pagoda_event ev;
		int rc = pagoda_next(k->pg, &ev, 200);
		if (rc == PAGODA_E_TIMEOUT || rc == PAGODA_E_AGAIN)
			continue;
		if (rc < 0) {
			atomic_store(&p->last_err, rc);
			atomic_fetch_sub(&p->up, 1);
			pthread_rwlock_wrlock(&k->rw);
			pagoda_close(k->pg);
			k->pg = NULL;
			pthread_rwlock_unlock(&k->rw);
			fail_all(k, rc);
			continue;
		}
		deliver(k, &ev);
	}
	return NULL;
}

int gw_pool_open(const char *socket, int n, struct gw_pool **out)
{
	struct gw_pool *p = calloc(1, sizeof *p);
	if (!p || n < 1 || !(p->c = calloc((size_t)n, sizeof *p->c))) {
		free(p);
		return PAGODA_E_NOMEM;
	}
	snprintf(p->socket, sizeof p->socket, "%s", socket ? socket : "");
	for (int i = 0; i < n; i++) {
		struct conn *k = &p->c[i];
		k->pool = p;
		pthread_rwlock_init(&k->rw, NULL);
		pthread_mutex_init(&k->mlock, NULL);
		/* the first connection is tried at once, so that a daemon already
		 * running serves the very first request */
		if (i == 0 && pagoda_connect(socket && *socket ? socket : NULL, &k->pg) == 0) {
			atomic_store(&p->n_ctx, pagoda_n_ctx(k->pg));
			atomic_fetch_add(&p->up, 1);
		}
		if (pthread_create(&k->th, NULL, dispatch, k)) {
			atomic_store(&p->stop, true);
			for (int j = 0; j < i; j++)
				pthread_join(p->c[j].th, NULL);
			free(p->c);
			free(p);
			return PAGODA_E_NOMEM;
		}
		p->n = i + 1;
	}
	*out = p;
	return 0;
}

void gw_pool_close(struct gw_pool *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, true);
	for (int i = 0; i < p->n; i++) {
		struct conn *k = &p->c[i];
		pthread_join(k->th, NULL);
		if (k->pg)
			pagoda_close(k->pg);
		k->pg = NULL;
		fail_all(k, PAGODA_E_DISCONNECTED);
		pthread_rwlock_destroy(&k->rw);
		pthread_mutex_destroy(&k->mlock);
	}
	free(p->c);
	free(p);
}

bool gw_pool_up(struct gw_pool *p) { return atomic_load(&p->up) > 0; }
int gw_pool_last_error(struct gw_pool *p) { return atomic_load(&p->last_err); }
int gw_pool_n_ctx(struct gw_pool *p) { return atomic_load(&p->n_ctx); }

/* The connection with the fewest calls in flight, read-locked; NULL when
 * none is up. */
static struct conn *pick(struct gw_pool *p)
{
	static atomic_uint rr;
	unsigned start = atomic_fetch_add(&rr, 1);
	struct conn *best = NULL;
	int best_n = 1 << 30;
	for (int j = 0; j < p->n; j++) {
		struct conn *k = &p->c[(start + (unsigned)j) % (unsigned)p->n];
		pthread_rwlock_rdlock(&k->rw);
		if (k->pg) {
			pthread_mutex_lock(&k->mlock);
			int n = k->n;
			pthread_mutex_unlock(&k->mlock);
			if (n < best_n) {
				if (best)
					pthread_rwlock_unlock(&best->rw);
				best = k;
				best_n = n;
				continue;
			}
		}
		pthread_rwlock_unlock(&k->rw);
	}
	return best;
}

/* Submits with the map locked, so that no event of the new id can be
 * routed before the call is in the map. */
static int start(struct gw_pool *p, const struct gw_req *r, struct gw_call *c)
{
	struct conn *k = pick(p);
	if (!k)
		return PAGODA_E_DISCONNECTED;
	int rc;
	pthread_mutex_lock(&k->mlock);
	if (!r) {
		rc = pagoda_stats(k->pg, &c->id);
	} else {
		struct pagoda_params par = r->p;
		if (r->to_context) {
			int n_ctx = pagoda_n_ctx(k->pg);
			par.max_tokens = n_ctx > 0 ? n_ctx : 1 << 20;
			par.flags |= PAGODA_CLAMP_MAX_TOKENS;
		}
		if (!r->seed_set && getrandom(&par.seed, sizeof par.seed, 0) != (ssize_t)sizeof par.seed)
			par.seed = now_ns();
		if (r->ids)
			rc = pagoda_submit_ids(k->pg, r->ids, r->n_ids, &par, &c->id);
		else if (r->kind == GW_CHAT)
			rc = pagoda_submit_chat(k->pg, r->text, r->text_len, &par, &c->id);
		else
			rc = pagoda_submit_text(k->pg, r->text, r->text_len, &par, &c->id);
	}
	if (rc == 0 && (rc = map_add(k, c)) < 0)
		pagoda_cancel(k->pg, c->id); /* its final event finds no call */
	pthread_mutex_unlock(&k->mlock);
	pthread_rwlock_unlock(&k->rw);
	if (rc == 0)
		c->conn = k;
	return rc;
}

int gw_call_start(struct gw_pool *p, const struct gw_req *r, struct gw_call **out)
{
	struct gw_call *c = call_new();
	if (!c)
		return PAGODA_E_NOMEM;
	int rc = start(p, r, c);
	if (rc < 0) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int gw_call_take(struct gw_call *c, struct gw_take *t, int timeout_ms)
{
	memset(t, 0, sizeof *t);
	struct timespec dl = deadline(timeout_ms);
	pthread_mutex_lock(&c->lock);
	while (!c->len && !c->final && !c->n_tokens)
		if (pthread_cond_timedwait(&c->cond, &c->lock, &dl)) {
			pthread_mutex_unlock(&c->lock);
			return PAGODA_E_TIMEOUT;
		}
	t->text = c->buf;
	t->len = c->len;
	t->n_tokens = c->n_tokens;
	t->toks = c->toks;
	t->n_toks = c->n_toks;
	c->buf = NULL;
	c->len = c->cap = 0;
	c->n_tokens = 0;
	c->toks = NULL;
	c->n_toks = c->cap_toks = 0;
	t->final = c->final;
	t->finish = c->finish;
	t->error = c->error;
	t->t = c->t;
	memcpy(t->errmsg, c->errmsg, sizeof t->errmsg);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void gw_call_release(struct gw_call *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	bool final = c->final;
	c->wake = NULL;
	pthread_mutex_unlock(&c->lock);
	if (!final && !c->is_stats) {
		struct conn *k = c->conn;
		pthread_rwlock_rdlock(&k->rw);
		if (k->pg)
			pagoda_cancel(k->pg, c->id);
		pthread_rwlock_unlock(&k->rw);
	}
	call_unref(c);
}

int gw_pool_stats(struct gw_pool *p, struct pagoda_stats *st, int timeout_ms)
{
	struct gw_call *c = call_new();
	if (!c)
		return PAGODA_E_NOMEM;
	c->is_stats = true;
	int rc = start(p, NULL, c);
	if (rc < 0) {
		free(c);
		return rc;
	}
	struct gw_take t;
	rc = gw_call_take(c, &t, timeout_ms);
	if (rc == 0 && t.error)
		rc = t.error;
	if (rc == 0)
		*st = c->st;
	free(t.text);
	gw_toks_free(t.toks, t.n_toks);
	gw_call_release(c);
	return rc;
}
