/* tests/unit/test_arena.c — libpagoda's prompt arena allocator at its edges:
 * a prompt of exactly the arena, half plus one page after a half (which
 * failed forever before the arena rewound when empty), wrap-around with
 * requests in flight, discards, and a long random run checking that live
 * allocations never overlap and that an idle arena always takes the
 * largest prompt. */
#include "libclient/arena.h"
#include "libclient/pagoda.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define A (1u << 20)
#define PAGE 4096u

static struct pg_arena ar;
static uint32_t sq_tail; /* SQ positions as libpagoda numbers them */

/* Allocates and "submits" n bytes; returns the offset. */
static uint32_t put(size_t n, uint64_t *id)
{
	uint32_t off;
	ck_assert_int_eq(pg_arena_alloc(&ar, n, id, &off), 0);
	ck_assert_uint_le((uint64_t)off + n, A);
	pg_arena_submitted(&ar, *id, sq_tail++);
	return off;
}

/* The daemon consumed everything submitted so far. */
static void consume_all(void) { pg_arena_reclaim(&ar, sq_tail); }

START_TEST(exactly_the_arena)
{
	pg_arena_init(&ar, A);
	uint64_t id;
	uint32_t off;
	ck_assert_int_eq(pg_arena_alloc(&ar, A + 1, &id, &off), PAGODA_E_TOOBIG);
	ck_assert_uint_eq(put(A, &id), 0);
	pg_arena_reclaim(&ar, sq_tail - 1); /* not consumed yet */
	ck_assert_int_eq(pg_arena_alloc(&ar, 8, &id, &off), PAGODA_E_AGAIN);
	consume_all();
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(put(A, &id), 0);
		consume_all();
	}
	/* a small one first, then the whole arena again once it is consumed */
	put(100, &id);
	consume_all();
	ck_assert_uint_eq(put(A, &id), 0);
}
END_TEST

START_TEST(half_then_half_plus_a_page)
{
	pg_arena_init(&ar, A);
	uint64_t id;
	put(A / 2, &id);
	consume_all();
	/* idle: before the rewind, this waited for a tail that never moved */
	ck_assert_uint_eq(put(A / 2 + PAGE, &id), 0);
	consume_all();
	put(A / 2 + 8, &id);
	consume_all();
	ck_assert_uint_eq(put(A - 8, &id), 0);
}
END_TEST

START_TEST(wrap_with_requests_in_flight)
{
	pg_arena_init(&ar, A);
	uint64_t id[4];
	uint32_t off;
	uint32_t o0 = put(A / 2 - PAGE, &id[0]);
	uint32_t o1 = put(A / 2 - PAGE, &id[1]); /* 2 pages left at the end */
	ck_assert_uint_eq(o0, 0);
	ck_assert_uint_eq(o1, A / 2 - PAGE);
	uint32_t pos1 = sq_tail - 1;
	/* the first is consumed, the second still in flight */
	pg_arena_reclaim(&ar, pos1);
	/* 3 pages do not fit in the 2 left: wraps to the start, where the
	 * first one was */
	ck_assert_uint_eq(put(3 * PAGE, &id[2]), 0);
	/* the free room now is [3 pages, A/2 - 1 page): more would overlap */
	ck_assert_int_eq(pg_arena_alloc(&ar, A / 2 - 3 * PAGE, &id[3], &off), PAGODA_E_AGAIN);
	ck_assert_uint_eq(put(A / 2 - 4 * PAGE, &id[3]), 3 * PAGE);
	ck_assert_int_eq(pg_arena_alloc(&ar, 8, &id[3], &off), PAGODA_E_AGAIN);
	consume_all();
	ck_assert_uint_eq(put(A, &id[0]), 0);
}
END_TEST

START_TEST(discards_reclaim_in_order)
{
	pg_arena_init(&ar, A);
	uint64_t a, b;
	uint32_t off;
	ck_assert_int_eq(pg_arena_alloc(&ar, A / 2, &a, &off), 0);
	ck_assert_int_eq(pg_arena_alloc(&ar, A / 2, &b, &off), 0);
	pg_arena_discard(&ar, b); /* behind a live one: kept until it goes */
	pg_arena_reclaim(&ar, sq_tail);
	ck_assert_int_eq(pg_arena_alloc(&ar, 8, &b, &off), PAGODA_E_AGAIN);
	pg_arena_discard(&ar, a);
	pg_arena_reclaim(&ar, sq_tail);
	ck_assert_uint_eq(put(A, &a), 0);
}
END_TEST

/* Random sizes, requests consumed in order at random moments: no two live
 * allocations overlap, and an idle arena always takes A bytes. */
START_TEST(random_run)
{
	pg_arena_init(&ar, A);
	struct live {
		uint32_t off, len, pos;
	} q[PG_ARENA_NREC];
	int head = 0, n = 0;
	uint32_t consumed = sq_tail;
	srand(7);
	for (int step = 0; step < 200000; step++) {
		int r = rand() % 100;
		if (r < 55) {
			size_t len = (size_t)(rand() % 4 == 0 ? rand() % (int)A : rand() % (64 << 10)) + 1;
			uint64_t id;
			uint32_t off;
			int rc = pg_arena_alloc(&ar, len, &id, &off);
			if (rc == PAGODA_E_AGAIN)
				continue;
			ck_assert_int_eq(rc, 0);
			ck_assert_uint_le((uint64_t)off + len, A);
			for (int i = 0; i < n; i++) {
				struct live *l = &q[(head + i) % PG_ARENA_NREC];
				ck_assert_msg(off + len <= l->off || l->off + l->len <= off,
					      "step %d: [%u,+%zu) overlaps live [%u,+%u)", step, off, len, l->off, l->len);
			}
			pg_arena_submitted(&ar, id, sq_tail);
			q[(head + n) % PG_ARENA_NREC] = (struct live){ off, (uint32_t)len, sq_tail++ };
			n++;
		} else if (n) {
			int k = 1 + rand() % n; /* the daemon takes k SQEs */
			head = (head + k) % PG_ARENA_NREC;
			n -= k;
			consumed += (uint32_t)k;
			pg_arena_reclaim(&ar, consumed);
		}
		if (n == 0) {
			uint64_t id;
			uint32_t off;
			ck_assert_int_eq(pg_arena_alloc(&ar, A, &id, &off), 0);
			ck_assert_uint_eq(off, 0);
			pg_arena_discard(&ar, id);
			pg_arena_reclaim(&ar, consumed);
		}
	}
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("arena");
	TCase *t = tcase_create("arena");
	tcase_add_test(t, exactly_the_arena);
	tcase_add_test(t, half_then_half_plus_a_page);
	tcase_add_test(t, wrap_with_requests_in_flight);
	tcase_add_test(t, discards_reclaim_in_order);
	tcase_add_test(t, random_run);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
