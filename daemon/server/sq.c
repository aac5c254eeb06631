/* daemon/server/sq.c — SQ intake on the main loop: each client's
 * submissions checked at a cost independent of their size and queued to
 * the intake worker (intake.c), a bounded number per client per turn;
 * cancels; the engine's callbacks turn requests back into completions. */
#include "daemon/server/server_int.h"
#include "daemon/model/tokenizer.h"
#include "daemon/server/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The token's top alternatives, each as the vocabulary spells it. Locked. */
static void emit_alts(struct client *c, const struct engine_req *er)
{
	const struct tokenizer *tok = c->s->tok;
	for (int i = 0; i < er->n_top; i++) {
		struct pg_cqe a;
		char piece[PG_CQ_TEXT_SLOT];
		memset(&a, 0, sizeof a);
		a.req_id = ((const struct sreq *)er->user)->creq;
		a.type = PG_CQE_ALT;
		a.u.tok.token = er->top_ids[i];
		a.u.tok.logprob = er->top_lp[i];
		a.u.tok.has_logprob = 1;
		int n = tok_piece(tok, er->top_ids[i], true, piece, sizeof piece);
		cq_emit(c, &a, piece, n < 0 ? 0 : n > (int)sizeof piece ? sizeof piece : (size_t)n);
	}
}

/* Engine callbacks: on the engine thread, or on the intake worker for a
 * request refused or ended before the engine saw it. */
void sq_on_token(struct engine_req *er, int32_t token, const char *text, size_t len)
{
	struct sreq *r = er->user;
	struct client *c = r->c;
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = r->creq;
	e.type = PG_CQE_TOKEN;
	e.u.tok.token = token;
	if (er->want_logprob && token >= 0) {
		e.u.tok.logprob = er->logprob;
		e.u.tok.has_logprob = 1;
	}
	pthread_mutex_lock(&c->lock);
	if (token >= 0)
		emit_alts(c, er);
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

void sq_on_done(struct engine_req *er, enum finish_reason why, int err, const char *msg)
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
		e.u.done.n_drafted = er->timings.n_drafted;
		e.u.done.n_accepted = er->timings.n_accepted;
		e.u.done.n_passes = er->timings.n_passes;
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
	atomic_fetch_sub(&c->ua->inflight, 1);
	int refs = --c->refs;
	unsigned long long cid = c->id; /* c may be gone once unlocked */
	pthread_mutex_unlock(&c->lock);
	log_msg(LOG_DEBUG, "client %llu: request %llu done (%s, %d generated)", cid,
		(unsigned long long)r->creq, finish_reason_name(why), er->timings.n_gen);
	free(r->buf);
	free(r->ctext);
	free(r);
	if (refs == 0)
		conn_release(c);
	if (atomic_fetch_sub(&s->inflight, 1) == 1 && atomic_load(&s->draining))
		srv_wake(s);
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
	e->u.stats.requests_submitted = st.requests_submitted;
	e->u.stats.requests_failed = st.requests_failed;
	e->u.stats.requests_cancelled = st.requests_cancelled;
	e->u.stats.prompt_tokens = st.prompt_tokens;
	e->u.stats.cached_prompt_tokens = st.cached_prompt_tokens;
	e->u.stats.preemptions = st.preemptions;
}

static int client_nreqs(struct client *c)
{
	pthread_mutex_lock(&c->lock);
	int n = c->n_reqs;
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* The context check that needs no tokenizing: ids are counted by their
 * bytes; a text gives at least tok_min_tokens ids. 0, or PG_E_CONTEXT with
 * msg. */
static int fits_at_once(struct server *s, const struct pg_sqe *e, const char *buf, size_t len, char *msg, size_t ml)
{
	int64_t room = (int64_t)s->n_ctx - ((e->flags & PG_SUBMIT_CLAMP) ? 1 : e->max_tokens);
	if (e->flags & PG_SUBMIT_CHAT) /* the JSON's bytes bound nothing until rendered */
		return 0;
	if (e->flags & PG_SUBMIT_IDS) {
		if ((int64_t)(len / 4) <= room)
			return 0;
		snprintf(msg, ml, "prompt (%zu tokens) + max_tokens (%d) exceed the context (%d)", len / 4,
			 e->max_tokens, s->n_ctx);
		return PG_E_CONTEXT;
	}
	if ((int64_t)(len / (size_t)s->max_piece) <= room) /* cannot tell without tokenizing */
		return 0;
	size_t least = tok_min_tokens(s->tok, buf, len);
	if ((int64_t)least <= room)
		return 0;
	snprintf(msg, ml, "prompt (%zu bytes: %zu tokens at least) + max_tokens (%d) exceed the context (%d)", len,
		 least, e->max_tokens, s->n_ctx);
	return PG_E_CONTEXT;
}

/* Checks what costs O(1), then queues the request to the intake worker. */
static void submit(struct server *s, struct client *c, const struct pg_sqe *e, char *buf, size_t len,
		   const struct pg_submit_ext *ext, char *ctext)
{
	char msg[PG_MSG_LEN + 1];
	int rc;
	if (atomic_load(&s->draining)) {
		cq_error(c, e->req_id, PG_E_DRAINING, "pagodad is draining: no new requests");
		goto refused;
	}
	if (client_nreqs(c) >= s->max_inflight) {
		cq_error(c, e->req_id, PG_E_BUSY, "too many requests in flight on this connection");
		goto refused;
	}
	if (atomic_load(&c->ua->inflight) >= s->max_inflight_uid) {
		LOG_RL(LOG_NOTICE, "uid %u: %d requests in flight: refusing more", (unsigned)c->uid,
		       atomic_load(&c->ua->inflight));
		cq_error(c, e->req_id, PG_E_BUSY, "too many requests in flight for this user");
		goto refused;
	}
	if ((rc = fits_at_once(s, e, buf, len, msg, sizeof msg)) != 0) {
		cq_error(c, e->req_id, (uint32_t)rc, msg);
		goto refused;
	}
	struct sreq *r = calloc(1, sizeof *r);
	if (!r) {
		cq_error(c, e->req_id, PG_E_NOMEM, "out of memory");
		goto refused;
	}
	r->c = c;
	r->creq = e->req_id;
	r->sqe = *e;
	r->buf = buf;
	r->len = len;
	r->ext = *ext;
	r->ctext = ctext;
	r->er.id = atomic_fetch_add(&s->next_gid, 1);
	r->er.on_token = sq_on_token;
	r->er.on_done = sq_on_done;
	r->er.user = r;
	pthread_mutex_lock(&c->lock);
	r->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = r;
	c->reqs = r;
	c->n_reqs++;
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&c->ua->inflight, 1);
	atomic_fetch_add(&s->inflight, 1);
	intake_push(s, r);
	return;
refused:
	free(buf);
	free(ctext);
}

void sq_cancel(struct server *s, struct client *c, uint64_t creq, bool all)
{
	uint64_t ids[64];
	int n = 0;
	bool more = true;
	while (more) {
		more = false;
		n = 0;
		pthread_mutex_lock(&s->in_lock);
		pthread_mutex_lock(&c->lock);
		for (struct sreq *r = c->reqs; r; r = r->next) {
			if ((!all && r->creq != creq) || r->cancelled)
				continue;
			if (r->state != SREQ_ENGINE) {
				r->cancelled = true; /* intake.c ends it */
				continue;
			}
			if (n == 64) {
				more = true;
				break;
			}
			r->cancelled = true;
			ids[n++] = r->er.id;
		}
		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&s->in_lock);
		for (int i = 0; i < n; i++)
			engine_cancel(s->eng, ids[i]);
	}
}

/* Takes at most sqes_per_turn SQEs. Returns false if the client was
 * disconnected. */
static bool process_sq(struct server *s, struct client *c)
{
	struct pg_sqe e;
	const char *why;
	char msg[PG_MSG_LEN + 1];
	for (int budget = s->sqes_per_turn; budget > 0; budget--) {
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
		/* A copy bounded by the arena: the arena bytes are free again at
		 * once, and the text is prepared off this loop. */
		if (rc == PG_OK && e.op == PG_OP_SUBMIT && proto_copy_prompt(&c->pc, &e, &buf, &len) < 0) {
			rc = PG_E_NOMEM;
			snprintf(msg, sizeof msg, "out of memory copying the prompt");
		}
		struct pg_submit_ext ext;
		char *ctext = NULL;
		memset(&ext, 0, sizeof ext);
		if (rc == PG_OK && e.op == PG_OP_SUBMIT && (e.flags & PG_SUBMIT_EXT))
			rc = proto_copy_ext(&c->pc, &e, &ext, &ctext, msg, sizeof msg);
		proto_sq_consume(&c->pc); /* the arena bytes are ours now */
		if (rc != PG_OK) {
			cq_error(c, e.req_id, (uint32_t)rc, msg);
			free(buf);
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
		case PG_OP_CANCEL:
			sq_cancel(s, c, e.req_id, false);
			break;
		case PG_OP_SUBMIT:
			submit(s, c, &e, buf, len, &ext, ctext);
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
