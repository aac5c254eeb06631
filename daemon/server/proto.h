/* daemon/server/proto.h — the daemon's side of one client's shared memory.
 *
 * Everything the client can write is hostile: this code keeps private copies
 * of the layout and of the positions the daemon owns (SQ head, CQ tail),
 * copies an SQE once before looking at it, and bounds-checks every index,
 * offset and length. It depends on nothing but shm/pagoda_shm.h, so the fuzz
 * target compiles it alone.
 */
#ifndef PAGODA_SERVER_PROTO_H
#define PAGODA_SERVER_PROTO_H

#include "shm/pagoda_shm.h"

#include <stdbool.h>
#include <stddef.h>

struct proto_conn {
	char *base;
	struct pg_shm_hdr lay; /* private copy; never re-read from shared memory */
	struct pg_ring_ctl *sqc, *cqc;
	struct pg_sqe *sq;
	struct pg_cqe *cq;
	char *cq_text;
	char *arena;
	uint32_t sq_head, sq_tail_seen; /* daemon owns sq head */
	uint32_t cq_tail, cq_head_seen; /* daemon owns cq tail */
};

/* Writes the header into base (size bytes from pg_layout) and sets p up. */
void proto_init(struct proto_conn *p, void *base, const struct pg_shm_hdr *lay);
/* Sets p up over base from a trusted layout without writing anything. */
void proto_attach(struct proto_conn *p, void *base, const struct pg_shm_hdr *lay);

/* 1: the next SQE was copied to *out (call proto_sq_consume when done with
 * the arena bytes it names); 0: the ring is empty; -1: the client broke the
 * ring rules (*why says how): disconnect it. */
int proto_sq_next(struct proto_conn *p, struct pg_sqe *out, const char **why);
void proto_sq_consume(struct proto_conn *p);

/* Checks a copied SQE: PG_OK; PG_E_INVALID with a message for a request the
 * daemon answers with an error; -1 with a message for a broken protocol rule
 * (unknown opcode or flags, bytes outside the arena, malformed stop strings):
 * disconnect the client. */
int proto_sqe_check(const struct proto_conn *p, const struct pg_sqe *e, char *msg, size_t len);
/* Copies the prompt bytes the (checked) SQE names out of the arena into a
 * fresh malloc'd buffer of *len bytes (+1 NUL byte). -1 on ENOMEM. */
int proto_copy_prompt(const struct proto_conn *p, const struct pg_sqe *e, char **buf, size_t *len);
/* For a (checked) SQE with PG_SUBMIT_EXT: copies its extension record
 * out of the arena into *ext (fields the client did not send read 0) and
 * the constraint text, if any, into a malloc'd NUL-terminated *text.
 * PG_OK, or PG_E_INVALID / PG_E_NOMEM with msg. Only the layout is checked
 * here; the values are the caller's to judge. */
int proto_copy_ext(const struct proto_conn *p, const struct pg_sqe *e, struct pg_submit_ext *ext, char **text,
		   char *msg, size_t ml);
/* Checks copied token ids against the vocabulary: -1 if any is out of range. */
int proto_check_ids(const int32_t *ids, size_t n, int32_t n_vocab);

/* Free CQ entries, or -1 when the client broke the rules (*why). */
int proto_cq_space(struct proto_conn *p, const char **why);
/* Writes one CQE (with up to lay.cq_text_slot text bytes) at the tail; the
 * caller checked proto_cq_space() > 0. Not visible until proto_cq_publish. */
void proto_cq_write(struct proto_conn *p, const struct pg_cqe *e, const char *text, size_t len);
/* Makes the written CQEs visible and wakes a sleeping client. */
void proto_cq_publish(struct proto_conn *p);

#endif
