/* daemon/server/proto.c — checked access to a client's rings and arena. */
#include "daemon/server/proto.h"

#include <linux/futex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

void proto_attach(struct proto_conn *p, void *base, const struct pg_shm_hdr *lay)
{
	memset(p, 0, sizeof *p);
	p->base = base;
	p->lay = *lay;
	p->sqc = PG_AT(base, lay->sq_ctl_off, struct pg_ring_ctl);
	p->cqc = PG_AT(base, lay->cq_ctl_off, struct pg_ring_ctl);
	p->sq = PG_AT(base, lay->sq_off, struct pg_sqe);
	p->cq = PG_AT(base, lay->cq_off, struct pg_cqe);
	p->cq_text = PG_AT(base, lay->cq_text_off, char);
	p->arena = PG_AT(base, lay->arena_off, char);
}

void proto_init(struct proto_conn *p, void *base, const struct pg_shm_hdr *lay)
{
	memcpy(base, lay, sizeof *lay);
	proto_attach(p, base, lay);
	atomic_store(&p->sqc->head, 0);
	atomic_store(&p->sqc->tail, 0);
	atomic_store(&p->cqc->head, 0);
	atomic_store(&p->cqc->tail, 0);
	atomic_store(&p->cqc->seq, 0);
	atomic_store(&p->cqc->waiters, 0);
	atomic_store(&p->cqc->flags, 0);
}

int proto_sq_next(struct proto_conn *p, struct pg_sqe *out, const char **why)
{
	uint32_t tail = atomic_load_explicit(&p->sqc->tail, memory_order_acquire);
	uint32_t n = tail - p->sq_head;
	if (n > p->lay.sq_entries) {
		*why = "submission tail moved past the ring's capacity or backwards";
		return -1;
	}
	if (n < p->sq_tail_seen - p->sq_head) {
		*why = "submission tail moved backwards";
		return -1;
	}
	p->sq_tail_seen = tail;
	if (n == 0)
		return 0;
	/* One copy; from here on only *out is looked at. */
	memcpy(out, &p->sq[p->sq_head & (p->lay.sq_entries - 1)], sizeof *out);
	return 1;
}

void proto_sq_consume(struct proto_conn *p)
{
	p->sq_head++;
	atomic_store_explicit(&p->sqc->head, p->sq_head, memory_order_release);
}

static int bad(char *msg, size_t len, const char *what)
{
	if (len) {
		strncpy(msg, what, len - 1);
		msg[len - 1] = 0;
	}
	return PG_E_INVALID;
}

/* A rule no well-behaved client breaks: the caller disconnects. */
static int hard(char *msg, size_t len, const char *what)
{
	bad(msg, len, what);
	return -1;
}

int proto_sqe_check(const struct proto_conn *p, const struct pg_sqe *e, char *msg, size_t len)
{
	switch (e->op) {
	case PG_OP_NOP:
	case PG_OP_CANCEL:
	case PG_OP_STATS:
		return PG_OK;
	case PG_OP_SUBMIT:
		break;
	default:
		return hard(msg, len, "unknown opcode");
	}
	if (e->flags & ~(PG_SUBMIT_IDS | PG_SUBMIT_CLAMP | PG_SUBMIT_CHAT | PG_SUBMIT_LOGPROBS | PG_SUBMIT_SPEC_MASK |
			 PG_SUBMIT_DRAFT_MASK | PG_SUBMIT_EXT))
		return hard(msg, len, "unknown submit flags");
	if (e->flags & PG_SUBMIT_EXT) {
		uint64_t off = e->user & 0xffffffffu, n = e->user >> 32;
		if (n < PG_SUBMIT_EXT_SIZE0 || off + n > p->lay.arena_size)
			return hard(msg, len, "extension record lies outside the arena");
	}
	if ((e->flags & PG_SUBMIT_IDS) && (e->flags & PG_SUBMIT_CHAT))
		return hard(msg, len, "a chat request is JSON text, not token ids");
	if (e->prompt_len == 0)
		return bad(msg, len, "empty prompt");
	if ((uint64_t)e->prompt_off + e->prompt_len > p->lay.arena_size)
		return hard(msg, len, "prompt lies outside the arena");
	if ((e->flags & PG_SUBMIT_IDS) && (e->prompt_len % 4 || e->prompt_off % 4))
		return hard(msg, len, "token-id prompt not aligned to 4 bytes");
	if (e->max_tokens <= 0)
		return bad(msg, len, "max_tokens must be positive");
	if (p->lay.n_ctx > 0 && e->max_tokens > p->lay.n_ctx && !(e->flags & PG_SUBMIT_CLAMP))
		return bad(msg, len, "max_tokens exceeds the context");
	if (!isfinite(e->temp) || e->temp < 0 || e->temp > 1e6f)
		return bad(msg, len, "temperature out of range");
	if (!isfinite(e->top_p) || e->top_p < 0 || e->top_p > 1)
		return bad(msg, len, "top_p out of range");
	if (!isfinite(e->min_p) || e->min_p < 0 || e->min_p > 1)
		return bad(msg, len, "min_p out of range");
	if (!isfinite(e->repeat_penalty) || e->repeat_penalty <= 0 || e->repeat_penalty > 100)
		return bad(msg, len, "repeat_penalty out of range");
	if (e->top_k < 0)
		return bad(msg, len, "top_k negative");
	if (e->repeat_last_n < -1 || (p->lay.n_ctx > 0 && e->repeat_last_n > p->lay.n_ctx))
		return bad(msg, len, "repeat_last_n out of range");
	if ((e->flags & PG_SUBMIT_DRAFT_MASK) >> PG_SUBMIT_DRAFT_SHIFT > PG_DRAFT_MAX)
		return bad(msg, len, "draft_max out of range");
	if (e->n_stop > PG_MAX_STOP)
		return hard(msg, len, "too many stop strings");
	for (uint32_t i = 0; i < e->n_stop; i++) {
		if (e->stop_len[i] == 0 || e->stop_len[i] > PG_STOP_LEN)
			return hard(msg, len, "stop string length out of range");
		if (memchr(e->stop[i], 0, e->stop_len[i]))
			return bad(msg, len, "stop string contains a NUL byte");
	}
	return PG_OK;
}

int proto_copy_prompt(const struct proto_conn *p, const struct pg_sqe *e, char **buf, size_t *len)
{
	/* Re-checked here: the caller may hand any copied SQE. */
	if ((uint64_t)e->prompt_off + e->prompt_len > p->lay.arena_size)
		return -1;
	char *b = malloc((size_t)e->prompt_len + 1);
	if (!b)
		return -1;
	memcpy(b, p->arena + e->prompt_off, e->prompt_len);
	b[e->prompt_len] = 0;
	*buf = b;
	*len = e->prompt_len;
	return 0;
}

int proto_copy_ext(const struct proto_conn *p, const struct pg_sqe *e, struct pg_submit_ext *ext, char **text,
		   char *msg, size_t ml)
{
	uint64_t off = e->user & 0xffffffffu, n = e->user >> 32;
	memset(ext, 0, sizeof *ext);
	*text = NULL;
	if (off + n > p->lay.arena_size || n < PG_SUBMIT_EXT_SIZE0)
		return bad(msg, ml, "extension record lies outside the arena");
	/* one copy, then only the copy is read: the client may write on */
	char *rec = malloc(n);
	if (!rec) {
		bad(msg, ml, "out of memory copying the extension record");
		return PG_E_NOMEM;
	}
	memcpy(rec, p->arena + off, n);
	uint32_t size;
	memcpy(&size, rec, sizeof size);
	if (size < PG_SUBMIT_EXT_SIZE0 || size > n || size % 4) {
		free(rec);
		return bad(msg, ml, "extension record: bad size");
	}
	memcpy(ext, rec, size < sizeof *ext ? size : sizeof *ext);
	for (uint32_t i = sizeof *ext; i < size; i++)
		if (rec[i]) {
			free(rec);
			return bad(msg, ml, "extension record: fields this daemon does not know are set");
		}
	if (ext->reserved[0] || ext->reserved[1]) {
		free(rec);
		return bad(msg, ml, "extension record: reserved fields are set");
	}
	if ((uint64_t)size + ext->constraint_len != n) {
		free(rec);
		return bad(msg, ml, "extension record: constraint length disagrees with the record");
	}
	if (ext->constraint_len) {
		memmove(rec, rec + size, ext->constraint_len);
		rec[ext->constraint_len] = 0; /* size >= 8 bytes were dropped: room for it */
		*text = rec;
	} else {
		free(rec);
	}
	return PG_OK;
}

int proto_check_ids(const int32_t *ids, size_t n, int32_t n_vocab)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (n_vocab > 0 && ids[i] >= n_vocab))
			return -1;
	return 0;
}

int proto_cq_space(struct proto_conn *p, const char **why)
{
	uint32_t head = atomic_load_explicit(&p->cqc->head, memory_order_acquire);
	uint32_t used = p->cq_tail - head;
	if (used > p->lay.cq_entries) {
		*why = "completion head moved past the tail or backwards";
		return -1;
	}
	if (head - p->cq_head_seen > p->cq_tail - p->cq_head_seen) {
		*why = "completion head moved backwards";
		return -1;
	}
	p->cq_head_seen = head;
	return (int)(p->lay.cq_entries - used);
}

void proto_cq_write(struct proto_conn *p, const struct pg_cqe *e, const char *text, size_t len)
{
	uint32_t slot = p->cq_tail & (p->lay.cq_entries - 1);
	struct pg_cqe c = *e;
	if (c.type == PG_CQE_TOKEN || c.type == PG_CQE_ALT) {
		if (len > p->lay.cq_text_slot)
			len = p->lay.cq_text_slot;
		c.u.tok.len = (uint32_t)len;
		if (len <= PG_CQE_INLINE) {
			if (len)
				memcpy(c.u.tok.text, text, len);
		} else {
			memcpy(p->cq_text + (size_t)slot * p->lay.cq_text_slot, text, len);
			c.flags |= PG_CQE_F_SLOT;
		}
	}
	memcpy(&p->cq[slot], &c, sizeof c);
	p->cq_tail++;
}

void proto_cq_publish(struct proto_conn *p)
{
	atomic_store_explicit(&p->cqc->tail, p->cq_tail, memory_order_release);
	atomic_fetch_add_explicit(&p->cqc->seq, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&p->cqc->waiters, memory_order_seq_cst))
		syscall(SYS_futex, &p->cqc->seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}
