/* daemon/server/sq.c — SQ intake: each client's submissions checked and
 * turned into engine requests; the engine's callbacks turn them back into
 * completions. */
#include "daemon/server/server_int.h"
#include "daemon/model/tokenizer.h"
#include "daemon/server/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Engine callbacks: on the engine thread, or on main for a refused submit. */
static void on_token(struct engine_req *er, int32_t token, const char *text, size_t len)
{
	struct sreq *r = er->user;
	struct client *c = r->c;
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = r->creq;
	e.type = PG_CQE_TOKEN;
	e.u.tok.token = token;
	pthread_mutex_lock(&c->lock);
	cq_emit(c, &e, text, len);
	pthread_mutex_unlock(&c->lock);
}

static uint32_t map_engine_err(int err)
{
	switch (err) {
	case ENGINE_ERR_CONTEXT: return PG_E_CONTEXT;
	case ENGINE_ERR_INVALID: return PG_E_INVALID;
	case ENGINE_ERR_DRAINING: return PG_E_DRAINING;
	case ENGINE_ERR_NOMEM: return PG_E_NOMEM;
	default: return PG_E_INTERNAL;
	}
}

static void on_done(struct engine_req *er, enum finish_reason why, int err, const char *msg)
{
	struct sreq *r = er->user;
	struct client *c = r->c;
	struct server *s = c->s;
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = r->creq;
	if (why == FINISH_ERROR) {
		e.type = PG_CQE_ERROR;
		e.u.error.code = map_engine_err(err);
		if (!msg || !*msg)
			msg = "request failed";
		size_t l = strlen(msg);
		if (l > PG_MSG_LEN)
			l = PG_MSG_LEN;
		memcpy(e.u.error.msg, msg, l);
		e.u.error.len = (uint32_t)l;
	} else {
		e.type = PG_CQE_DONE;
		e.u.done.finish = why == FINISH_EOS ? PG_FINISH_EOS
				: why == FINISH_LENGTH ? PG_FINISH_LENGTH
				: why == FINISH_STOP ? PG_FINISH_STOP
				: PG_FINISH_CANCEL;
		e.u.done.n_prompt = er->timings.n_prompt;
		e.u.done.n_cached = er->timings.n_cached;
		e.u.done.n_gen = er->timings.n_gen;
		e.u.done.t_submit_ns = er->timings.t_submit_ns;
		e.u.done.t_admit_ns = er->timings.t_admit_ns;
		e.u.done.t_first_ns = er->timings.t_first_ns;
		e.u.done.t_done_ns = er->timings.t_done_ns;
	}
	pthread_mutex_lock(&c->lock);
	cq_emit(c, &e, NULL, 0);
	if (r->prev)
		r->prev->next = r->next;
	else
		c->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	c->n_reqs--;
	int refs = --c->refs;
	unsigned long long cid = c->id; /* c may be gone once unlocked */
	pthread_mutex_unlock(&c->lock);
	log_msg(LOG_DEBUG, "client %llu: request %llu done (%s, %d generated)", cid,
		(unsigned long long)r->creq, finish_reason_name(why), er->timings.n_gen);
	free(r);
	if (refs == 0)
		conn_release(c);
	if (atomic_fetch_sub(&s->inflight, 1) == 1 && atomic_load(&s->draining))
		srv_wake(s);
}

static void submit(struct server *s, struct client *c, const struct pg_sqe *e, char *buf, size_t len)
{
	int32_t *ids = NULL, *owned = NULL;
	int n = 0;
	char msg[PG_MSG_LEN + 1];
	if (e->flags & PG_SUBMIT_IDS) {
		ids = (int32_t *)buf; /* the caller frees buf */
		n = (int)(len / 4);
		if (proto_check_ids(ids, (size_t)n, s->n_vocab) < 0) {
			cq_error(c, e->req_id, PG_E_INVALID, "token id out of the vocabulary");
			return;
		}
	} else {
		bool bos = tok_add_bos(s->tok);
		int cap = (int)len + 8;
		for (int tries = 0; tries < 2; tries++) {
			ids = malloc(sizeof *ids * (size_t)cap);
			if (!ids) {
				cq_error(c, e->req_id, PG_E_NOMEM, "out of memory tokenizing");
				return;
			}
			n = tok_encode(s->tok, buf, len, bos, true, ids, cap);
			if (n >= 0 || n == TOK_ERR)
				break;
			cap = -n;
			free(ids);
			ids = NULL;
		}
		if (n < 0 || !ids) {
			free(ids);
			cq_error(c, e->req_id, PG_E_INVALID, "the prompt cannot be tokenized");
			return;
		}
		owned = ids;
	}
	if (n == 0) {
		cq_error(c, e->req_id, PG_E_INVALID, "empty prompt");
		free(owned);
		return;
	}
	int max_tokens = e->max_tokens;
	if ((e->flags & PG_SUBMIT_CLAMP) && (int64_t)n + max_tokens > s->n_ctx)
		max_tokens = s->n_ctx - n;
	if ((int64_t)n + max_tokens > s->n_ctx || max_tokens <= 0) {
		snprintf(msg, sizeof msg, "prompt (%d tokens) + max_tokens (%d) exceed the context (%d)", n,
			 e->max_tokens, s->n_ctx);
		cq_error(c, e->req_id, PG_E_CONTEXT, msg);
		free(owned);
		return;
	}
	struct sreq *r = calloc(1, sizeof *r);
	if (!r) {
		free(owned);
		cq_error(c, e->req_id, PG_E_NOMEM, "out of memory");
		return;
	}
	r->c = c;
	r->creq = e->req_id;
	r->er.id = atomic_fetch_add(&s->next_gid, 1);
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
	r->er.n_stop = (int)e->n_stop;
	for (uint32_t i = 0; i < e->n_stop && i < ENGINE_MAX_STOP; i++) {
		memcpy(r->er.stop[i], e->stop[i], e->stop_len[i]);
		r->er.stop[i][e->stop_len[i]] = 0;
	}
	r->er.on_token = on_token;
	r->er.on_done = on_done;
	r->er.user = r;
	pthread_mutex_lock(&c->lock);
	r->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = r;
	c->reqs = r;
	c->n_reqs++;
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&s->inflight, 1);
	log_msg(LOG_DEBUG, "client %llu: request %llu: %d prompt tokens, max %d", (unsigned long long)c->id,
		(unsigned long long)e->req_id, n, e->max_tokens);
	engine_submit(s->eng, &r->er); /* on a refusal on_done has run: r is gone */
	free(owned);
}

static void fill_stats(struct server *s, struct pg_cqe *e)
{
	struct engine_stats st;
	engine_get_stats(s->eng, &st);
	e->u.stats.running = st.running;
	e->u.stats.waiting = st.waiting;
	e->u.stats.clients = s->n_clients;
	e->u.stats.inflight = atomic_load(&s->inflight);
	e->u.stats.kv_blocks_total = st.kv_blocks_total;
	e->u.stats.kv_blocks_used = st.kv_blocks_used;
	e->u.stats.requests_finished = st.requests_finished;
	e->u.stats.gen_tokens = st.gen_tokens;
	e->u.stats.n_ctx = s->n_ctx;
	e->u.stats.draining = atomic_load(&s->draining);
}

static int client_nreqs(struct client *c)
{
	pthread_mutex_lock(&c->lock);
	int n = c->n_reqs;
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* Drains the client's SQ. Returns false if the client was disconnected. */
static bool process_sq(struct server *s, struct client *c)
{
	struct pg_sqe e;
	const char *why;
	char msg[PG_MSG_LEN + 1];
	for (uint32_t budget = c->pc.lay.sq_entries; budget; budget--) {
		int rc = proto_sq_next(&c->pc, &e, &why);
		if (rc < 0) {
			conn_disconnect(s, c, why);
			return false;
		}
		if (rc == 0)
			return true;
		rc = proto_sqe_check(&c->pc, &e, msg, sizeof msg);
		if (rc < 0) {
			conn_disconnect(s, c, msg);
			return false;
		}
		char *buf = NULL;
		size_t len = 0;
		if (rc == PG_OK && e.op == PG_OP_SUBMIT && proto_copy_prompt(&c->pc, &e, &buf, &len) < 0) {
			rc = PG_E_NOMEM;
			snprintf(msg, sizeof msg, "out of memory copying the prompt");
		}
		proto_sq_consume(&c->pc); /* the arena bytes are ours now */
		if (rc != PG_OK) {
			cq_error(c, e.req_id, (uint32_t)rc, msg);
			continue;
		}
		struct pg_cqe out;
		memset(&out, 0, sizeof out);
		out.req_id = e.req_id;
		out.user = e.user;
		switch (e.op) {
		case PG_OP_NOP:
			out.type = PG_CQE_NOP;
			pthread_mutex_lock(&c->lock);
			cq_emit(c, &out, NULL, 0);
			pthread_mutex_unlock(&c->lock);
			break;
		case PG_OP_STATS:
			out.type = PG_CQE_STATS;
			fill_stats(s, &out);
			pthread_mutex_lock(&c->lock);
			cq_emit(c, &out, NULL, 0);
			pthread_mutex_unlock(&c->lock);
			break;
		case PG_OP_CANCEL: {
			uint64_t ids[64];
			int n = 0;
			pthread_mutex_lock(&c->lock);
			for (struct sreq *r = c->reqs; r && n < 64; r = r->next)
				if (r->creq == e.req_id)
					ids[n++] = r->er.id;
			pthread_mutex_unlock(&c->lock);
			for (int i = 0; i < n; i++)
				engine_cancel(s->eng, ids[i]);
			break;
		}
		case PG_OP_SUBMIT:
			if (atomic_load(&s->draining))
				cq_error(c, e.req_id, PG_E_DRAINING, "pagodad is draining: no new requests");
			else if (client_nreqs(c) >= s->max_inflight)
				cq_error(c, e.req_id, PG_E_BUSY, "too many requests in flight on this connection");
			else
				submit(s, c, &e, buf, len);
			free(buf);
			break;
		}
	}
	/* More may be waiting: come back after the others had their turn. */
	uint64_t one = 1;
	ssize_t w = write(c->efd, &one, sizeof one);
	(void)w;
	return true;
}

void sq_on_efd(struct server *s, struct client *c)
{
	uint64_t v;
	ssize_t n = read(c->efd, &v, sizeof v);
	(void)n;
	if (!c->ready)
		return;
	if (!process_sq(s, c))
		return;
	pthread_mutex_lock(&c->lock);
	if (c->ovf_head)
		cq_flush(c);
	pthread_mutex_unlock(&c->lock);
}

/* Disconnects clients the engine thread found broken; flushes overflows. */
