/* libclient/arena.h — the prompt arena's allocator (libpagoda inside; not
 * installed).
 *
 * The arena is a ring of A bytes addressed by free-running 64-bit virtual
 * positions [tail, head). Each allocation is a record, freed in order: a
 * record is reclaimed once its SQE has been consumed by the daemon (which
 * copies the prompt out at once) or once it was discarded unsubmitted. An
 * allocation never wraps: what is left before the ring's end is skipped.
 * When no record is live the positions rewind to 0, so that any size up to
 * A fits an idle arena whatever came before.
 */
#ifndef PAGODA_CLIENT_ARENA_H
#define PAGODA_CLIENT_ARENA_H

#include <stdint.h>
#include <stddef.h>

#define PG_ARENA_NREC 1024 /* live allocations at most */

enum { PG_REC_ALLOC = 1, PG_REC_SUBMITTED, PG_REC_DISCARDED };
struct pg_arena_rec {
	uint64_t vstart, vend;
	uint32_t sq_pos; /* SQ position of the SQE naming it */
	int state;
};

struct pg_arena {
	uint64_t size; /* A */
	uint64_t head, tail;
	uint64_t rec_head, rec_tail;
	struct pg_arena_rec rec[PG_ARENA_NREC];
};

void pg_arena_init(struct pg_arena *a, uint64_t size);
/* Reclaims the records whose SQE the daemon consumed (sq_head: the SQ's
 * head as the daemon published it) and the discarded ones, in order. */
void pg_arena_reclaim(struct pg_arena *a, uint32_t sq_head);
/* 0 with *rec_id and *off (n rounded up to 8 bytes), or PAGODA_E_TOOBIG
 * (n > A) or PAGODA_E_AGAIN (no room until records are reclaimed). */
int pg_arena_alloc(struct pg_arena *a, size_t n, uint64_t *rec_id, uint32_t *off);
void pg_arena_submitted(struct pg_arena *a, uint64_t rec_id, uint32_t sq_pos);
void pg_arena_discard(struct pg_arena *a, uint64_t rec_id);

#endif
