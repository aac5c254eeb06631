/* daemon/server/cq.c — completions into a client's CQ; what does not fit
 * waits in the client's overflow queue until the client frees space.
 *
 * Queued bytes are budgeted: a connection may hold 1/16 of queued-budget,
 * a uid 1/4, and past the daemon-wide budget only connections holding
 * little (QUEUED_SLACK) may queue more: so a slow reader is cut off before
 * it pins memory, and well-behaved clients are not cut off for it. */
#include "daemon/server/server_int.h"

#include <stdlib.h>
#include <string.h>

void cq_mark_broken(struct client *c, const char *why)
{
	if (atomic_load(&c->broken))
		return;
	c->why = why;
	atomic_store(&c->broken, true);
	srv_wake(c->s);
}

#define QUEUED_SLACK (64 << 10)

static void account(struct client *c, int64_t bytes)
{
	c->queued += bytes;
	atomic_fetch_add(&c->ua->queued, bytes);
	atomic_fetch_add(&c->s->queued, bytes);
}

/* Why c may not queue bytes more, or NULL. */
static const char *over_budget(struct client *c, int64_t bytes)
{
	struct server *s = c->s;
	int64_t b = s->queued_budget;
	if (c->n_ovf >= MAX_OVERFLOW || c->queued + bytes > b / 16)
		return "does not read its completions";
	if (atomic_load(&c->ua->queued) + bytes > b / 4)
		return "does not read its completions (its user's share of the queue budget is spent)";
	if (atomic_load(&s->queued) + bytes > b && c->queued > QUEUED_SLACK)
		return "does not read its completions (the daemon's queue budget is spent)";
	return NULL;
}

void cq_forget(struct client *c)
{
	int64_t bytes = c->queued;
	while (c->ovf_head) {
		struct ovf *o = c->ovf_head;
		c->ovf_head = o->next;
		free(o);
	}
	c->ovf_tail = NULL;
	c->n_ovf = 0;
	account(c, -bytes);
	atomic_fetch_add(&c->s->trim_owed, bytes);
}

void cq_flush(struct client *c)
{
	const char *why;
	bool wrote = false;
	for (;;) {
		int space = proto_cq_space(&c->pc, &why);
		if (space < 0) {
			cq_mark_broken(c, why);
			return;
		}
		while (space > 0 && c->ovf_head) {
			struct ovf *o = c->ovf_head;
			proto_cq_write(&c->pc, &o->cqe, o->text, o->len);
			c->ovf_head = o->next;
			if (!c->ovf_head)
				c->ovf_tail = NULL;
			c->n_ovf--;
			account(c, -(int64_t)(sizeof *o + o->len));
			free(o);
			space--;
			wrote = true;
		}
		if (!c->ovf_head) {
			atomic_store(&c->pc.cqc->flags, 0);
			break;
		}
		/* Tell the client to wake us, then look again in case it already
		 * freed space (its release store and our flag store race). */
		atomic_store_explicit(&c->pc.cqc->flags, PG_CQ_OVERFLOW, memory_order_seq_cst);
		if (proto_cq_space(&c->pc, &why) == 0)
			break;
	}
	if (wrote)
		proto_cq_publish(&c->pc);
}

static void push_one(struct client *c, const struct pg_cqe *e, const char *text, size_t len)
{
	const char *why;
	if (c->ovf_head)
		cq_flush(c);
	if (!c->ovf_head) {
		int space = proto_cq_space(&c->pc, &why);
		if (space < 0) {
			cq_mark_broken(c, why);
			return;
		}
		if (space > 0) {
			proto_cq_write(&c->pc, e, text, len);
			return;
		}
	}
	const char *why_not = over_budget(c, (int64_t)(sizeof(struct ovf) + len));
	if (why_not) {
		cq_mark_broken(c, why_not);
		return;
	}
	struct ovf *o = malloc(sizeof *o + len);
	if (!o) {
		cq_mark_broken(c, "out of memory queueing completions");
		return;
	}
	o->next = NULL;
	o->cqe = *e;
	o->len = len;
	if (len)
		memcpy(o->text, text, len);
	if (c->ovf_tail)
		c->ovf_tail->next = o;
	else
		c->ovf_head = o;
	c->ovf_tail = o;
	c->n_ovf++;
	account(c, (int64_t)(sizeof *o + len));
	atomic_store_explicit(&c->pc.cqc->flags, PG_CQ_OVERFLOW, memory_order_seq_cst);
}

/* Emits one event (splitting long token text) and publishes. Locked. */
void cq_emit(struct client *c, struct pg_cqe *e, const char *text, size_t len)
{
	if (c->dead || atomic_load(&c->broken))
		return;
	if (e->type == PG_CQE_TOKEN) {
		size_t slot = c->pc.lay.cq_text_slot;
		for (;;) {
			size_t n = len > slot ? slot : len;
			e->flags = len > slot ? PG_CQE_F_MORE : 0;
			push_one(c, e, text, n);
			text += n;
			len -= n;
			if (!len)
				break;
			e->u.tok.token = -1;
		}
	} else if (e->type == PG_CQE_ALT) { /* a vocabulary piece: one slot */
		size_t slot = c->pc.lay.cq_text_slot;
		push_one(c, e, text, len > slot ? slot : len);
	} else {
		push_one(c, e, NULL, 0);
	}
	proto_cq_publish(&c->pc);
}

void cq_error(struct client *c, uint64_t creq, uint32_t code, const char *msg)
{
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = creq;
	e.type = PG_CQE_ERROR;
	e.u.error.code = code;
	size_t l = strlen(msg);
	if (l > PG_MSG_LEN)
		l = PG_MSG_LEN;
	memcpy(e.u.error.msg, msg, l);
	e.u.error.len = (uint32_t)l;
	pthread_mutex_lock(&c->lock);
	cq_emit(c, &e, NULL, 0);
	pthread_mutex_unlock(&c->lock);
}

