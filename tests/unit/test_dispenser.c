/* tests/unit/test_dispenser.c — the matmuls' chunk dispenser: each
 * thread's own range front to back, claimed in batches, then the others'
 * from their back; under real threads every chunk handed out exactly once. */
#include "kernels/cpu/dispenser.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>

START_TEST(test_one_taker_order)
{
	struct pg_dispenser d;
	/* ranges of 10 over 3: [0,3) [3,6) [6,10) */
	pg_disp_init(&d, 10, 3);
	const int64_t want0[] = { 0, 1, 2, 5, 4, 3, 9, 8, 7, 6 };
	for (size_t i = 0; i < sizeof want0 / sizeof want0[0]; i++)
		ck_assert_int_eq(pg_disp_take(&d, 0), want0[i]);
	ck_assert_int_eq(pg_disp_take(&d, 0), -1);
	ck_assert_int_eq(pg_disp_take(&d, 2), -1);
	/* thread 1 of 2 over 7: its [3,7), then [0,3) from the back */
	pg_disp_init(&d, 7, 2);
	const int64_t want1[] = { 3, 4, 5, 6, 2, 1, 0 };
	for (size_t i = 0; i < sizeof want1 / sizeof want1[0]; i++)
		ck_assert_int_eq(pg_disp_take(&d, 1), want1[i]);
	ck_assert_int_eq(pg_disp_take(&d, 1), -1);
	/* nothing to hand out; one chunk among more threads than chunks */
	pg_disp_init(&d, 0, 4);
	ck_assert_int_eq(pg_disp_take(&d, 3), -1);
	pg_disp_init(&d, 1, 4);
	ck_assert_int_eq(pg_disp_take(&d, 0), 0);
	ck_assert_int_eq(pg_disp_take(&d, 3), -1);
}
END_TEST

/* A thread claims a batch of its own front at once; a thief cannot take
 * those, only what is left unclaimed behind them. */
START_TEST(test_claimed_batch_stays_with_owner)
{
	struct pg_dispenser d;
	pg_disp_init(&d, 64, 2); /* [0,32) [32,64) */
	int64_t k = 32 / (2 * PG_DISP_BATCH);
	k = k < 1 ? 1 : k > PG_DISP_BATCH ? PG_DISP_BATCH : k;
	ck_assert_int_gt(k, 1);
	ck_assert_int_eq(pg_disp_take(&d, 0), 0); /* claims [0, k) */
	for (int64_t c = 32; c < 64; c++)
		ck_assert_int_eq(pg_disp_take(&d, 1), c);
	for (int64_t c = 31; c >= k; c--)
		ck_assert_int_eq(pg_disp_take(&d, 1), c);
	ck_assert_int_eq(pg_disp_take(&d, 1), -1);
	for (int64_t c = 1; c < k; c++)
		ck_assert_int_eq(pg_disp_take(&d, 0), c);
	ck_assert_int_eq(pg_disp_take(&d, 0), -1);
	/* a fresh job forgets the claim */
	pg_disp_init(&d, 64, 2);
	ck_assert_int_eq(pg_disp_take(&d, 1), 32);
	ck_assert_int_eq(pg_disp_take(&d, 0), 0);
}
END_TEST

struct taker {
	pthread_t th;
	struct pg_dispenser *d;
	_Atomic int *count;
	int ith;
	int64_t lo, hi; /* its own range */
	int own_out_of_order;
};

static void *take_all(void *a)
{
	struct taker *t = a;
	int64_t last_own = -1;
	for (int64_t c; (c = pg_disp_take(t->d, t->ith)) >= 0;) {
		atomic_fetch_add(&t->count[c], 1);
		if (c >= t->lo && c < t->hi) {
			t->own_out_of_order += c != last_own + 1 && last_own >= 0;
			last_own = c;
		}
	}
	return NULL;
}

START_TEST(test_threads_take_each_once)
{
	const int64_t ns[] = { 1, 3, 17, 1000, 100000 };
	const int nths[] = { 2, 3, 5, PG_DISP_MAX + 4 };
	for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
		for (size_t ti = 0; ti < sizeof nths / sizeof nths[0]; ti++) {
			const int64_t n = ns[ni];
			const int nth = nths[ti];
			struct pg_dispenser d;
			pg_disp_init(&d, n, nth);
			_Atomic int *count = calloc((size_t)n, sizeof *count);
			struct taker *t = calloc((size_t)nth, sizeof *t);
			ck_assert_ptr_nonnull(count);
			ck_assert_ptr_nonnull(t);
			const int nr = nth < PG_DISP_MAX ? nth : PG_DISP_MAX;
			for (int i = 0; i < nth; i++) {
				t[i] = (struct taker){ .d = &d, .count = count, .ith = i };
				t[i].lo = i < nr ? n * i / nr : 0;
				t[i].hi = i < nr ? n * (i + 1) / nr : 0;
				ck_assert_int_eq(pthread_create(&t[i].th, NULL, take_all, &t[i]), 0);
			}
			for (int i = 0; i < nth; i++) {
				pthread_join(t[i].th, NULL);
				/* its own chunks came front to back, a run */
				ck_assert_int_eq(t[i].own_out_of_order, 0);
			}
			for (int64_t c = 0; c < n; c++)
				ck_assert_msg(count[c] == 1, "n=%ld threads=%d: chunk %ld taken %d times", (long)n, nth,
					      (long)c, (int)count[c]);
			free(count);
			free(t);
		}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dispenser");
	TCase *tc = tcase_create("take");
	tcase_add_test(tc, test_one_taker_order);
	tcase_add_test(tc, test_claimed_batch_stays_with_owner);
	tcase_add_test(tc, test_threads_take_each_once);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
