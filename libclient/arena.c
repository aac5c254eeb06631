/* libclient/arena.c — the prompt arena's allocator (see arena.h). */
#include "libclient/arena.h"
#include "libclient/pagoda.h"

void pg_arena_init(struct pg_arena *a, uint64_t size)
{
	a->size = size;
	a->head = a->tail = 0;
	a->rec_head = a->rec_tail = 0;
}

void pg_arena_reclaim(struct pg_arena *a, uint32_t sq_head)
{
	while (a->rec_tail != a->rec_head) {
		struct pg_arena_rec *r = &a->rec[a->rec_tail % PG_ARENA_NREC];
		if (r->state == PG_REC_ALLOC)
			break;
		if (r->state == PG_REC_SUBMITTED && (int32_t)(sq_head - r->sq_pos) <= 0)
			break;
		a->tail = r->vend;
		a->rec_tail++;
	}
	/* Empty: start over at the ring's beginning, or an allocation larger
	 * than what is left past head would wait forever for a tail that
	 * never moves again. */
	if (a->rec_tail == a->rec_head)
		a->head = a->tail = 0;
}

int pg_arena_alloc(struct pg_arena *a, size_t n, uint64_t *rec_id, uint32_t *off)
{
	uint64_t A = a->size;
	n = (n + 7) & ~(size_t)7;
	if (n == 0)
		n = 8;
	if (n > A)
		return PAGODA_E_TOOBIG;
	if (a->rec_head - a->rec_tail >= PG_ARENA_NREC)
		return PAGODA_E_AGAIN;
	uint64_t start = a->head;
	if (start % A + n > A)
		start += A - start % A; /* wrap: the rest of the ring is skipped */
	if (start + n - a->tail > A)
		return PAGODA_E_AGAIN;
	struct pg_arena_rec *r = &a->rec[a->rec_head % PG_ARENA_NREC];
	r->vstart = start;
	r->vend = start + n;
	r->state = PG_REC_ALLOC;
	*rec_id = a->rec_head++;
	a->head = start + n;
	*off = (uint32_t)(start % A);
	return 0;
}

void pg_arena_submitted(struct pg_arena *a, uint64_t rec_id, uint32_t sq_pos)
{
	struct pg_arena_rec *r = &a->rec[rec_id % PG_ARENA_NREC];
	r->state = PG_REC_SUBMITTED;
	r->sq_pos = sq_pos;
}

void pg_arena_discard(struct pg_arena *a, uint64_t rec_id)
{
	struct pg_arena_rec *r = &a->rec[rec_id % PG_ARENA_NREC];
	if (r->state == PG_REC_ALLOC)
		r->state = PG_REC_DISCARDED;
}
