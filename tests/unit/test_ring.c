/* tests/unit/test_ring.c — the shared-memory rings and the daemon's checks.
 *
 * - SPSC correctness: a producer and a consumer thread pass millions of
 *   entries through small rings (many wrap-arounds of the free-running
 *   counters, also across the 2^32 wrap), every entry exactly once, in order.
 * - The daemon's validation (daemon/server/proto.c, linked from libpagoda-server.a): the SQ tail
 *   moving backwards or past capacity, the CQ head moving backwards or past
 *   the tail, SQEs naming bytes outside the arena, bad opcodes, flags, stop
 *   strings and sampling parameters.
 */
#include "daemon/server/proto.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

/* ---- SPSC under two threads -------------------------------------------- */
struct spsc {
	struct pg_ring_ctl ctl;
	uint32_t entries;
	uint64_t *slots;
	uint64_t n;
	uint32_t start;
};

static void *producer(void *arg)
{
	struct spsc *r = arg;
	uint32_t tail = r->start;
	for (uint64_t i = 0; i < r->n;) {
		uint32_t space = pg_ring_space(&r->ctl, r->entries, tail);
		if (space > r->entries)
			abort();
		if (!space) {
			sched_yield();
			continue;
		}
		/* publish a variable-size batch */
		uint32_t batch = 1 + (uint32_t)(i % 7);
		if (batch > space)
			batch = space;
		for (uint32_t k = 0; k < batch && i < r->n; k++, i++)
			r->slots[tail++ & (r->entries - 1)] = i * 2654435761u + 1;
		pg_ring_publish(&r->ctl, tail);
	}
	return NULL;
}

static void run_spsc(uint32_t entries, uint64_t n, uint32_t start)
{
	struct spsc r;
	memset(&r, 0, sizeof r);
	r.entries = entries;
	r.n = n;
	r.start = start;
	r.slots = calloc(entries, sizeof *r.slots);
	atomic_store(&r.ctl.head, start);
	atomic_store(&r.ctl.tail, start);
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, producer, &r), 0);
	uint32_t head = start;
	uint64_t got = 0;
	while (got < n) {
		uint32_t ready = pg_ring_ready(&r.ctl, head);
		ck_assert_uint_le(ready, entries);
		if (!ready) {
			sched_yield();
			continue;
		}
		for (uint32_t k = 0; k < ready; k++, got++) {
			uint64_t v = r.slots[head++ & (entries - 1)];
			if (v != got * 2654435761u + 1)
				ck_abort_msg("entry %llu: got %llu", (unsigned long long)got, (unsigned long long)v);
		}
		pg_ring_release(&r.ctl, head);
	}
	pthread_join(th, NULL);
	ck_assert_uint_eq(pg_ring_ready(&r.ctl, head), 0);
	free(r.slots);
}

START_TEST(spsc_two_threads)
{
	run_spsc(4, 300000, 0);
	run_spsc(64, 1000000, 0);
}
END_TEST

START_TEST(spsc_counter_wrap)
{
	/* the free-running counters cross 2^32 during the run */
	run_spsc(8, 200000, UINT32_MAX - 1000);
	run_spsc(1, 20000, UINT32_MAX - 10);
}
END_TEST

START_TEST(layout_sane)
{
	struct pg_shm_hdr h;
	memset(&h, 0, sizeof h);
	uint64_t size = pg_layout(&h, PG_SQ_ENTRIES, PG_CQ_ENTRIES, PG_CQ_TEXT_SLOT, PG_ARENA_SIZE);
	ck_assert(pg_hdr_valid(&h, size));
	ck_assert(!pg_hdr_valid(&h, size - 1));
	ck_assert_uint_eq(h.sq_ctl_off % PG_CACHELINE, 0);
	ck_assert_uint_eq(h.cq_ctl_off % PG_CACHELINE, 0);
	ck_assert_uint_eq(offsetof(struct pg_ring_ctl, tail) - offsetof(struct pg_ring_ctl, head), PG_CACHELINE);
	ck_assert_uint_ge(h.arena_off, h.cq_text_off + PG_CQ_ENTRIES * PG_CQ_TEXT_SLOT);
	struct pg_shm_hdr bad = h;
	bad.sq_entries = 63;
	ck_assert(!pg_hdr_valid(&bad, size));
	bad = h;
	bad.arena_size += 1;
	ck_assert(!pg_hdr_valid(&bad, size));
	bad = h;
	bad.version++;
	ck_assert(!pg_hdr_valid(&bad, size));
}
END_TEST

/* ---- the daemon's checks ------------------------------------------------ */
static struct pg_shm_hdr lay;
static void *mem;
static struct proto_conn pc;

static void setup(void)
{
	memset(&lay, 0, sizeof lay);
	uint64_t size = pg_layout(&lay, 8, 8, 64, 4096);
	lay.n_ctx = 256;
	lay.n_vocab = 512;
	mem = aligned_alloc(4096, size);
	memset(mem, 0, size);
	proto_init(&pc, mem, &lay);
}

static void teardown(void) { free(mem); }

static struct pg_sqe *sqe_at(uint32_t pos) { return &pc.sq[pos & (lay.sq_entries - 1)]; }

static void good_sqe(struct pg_sqe *e)
{
	memset(e, 0, sizeof *e);
	e->op = PG_OP_SUBMIT;
	e->req_id = 7;
	e->prompt_off = 0;
	e->prompt_len = 5;
	e->max_tokens = 10;
	e->top_p = 1;
	e->repeat_penalty = 1;
	e->repeat_last_n = 64;
}

START_TEST(sq_in_order)
{
	struct pg_sqe e, got;
	const char *why;
	ck_assert_int_eq(proto_sq_next(&pc, &got, &why), 0);
	for (uint32_t i = 0; i < 20; i++) {
		good_sqe(&e);
		e.req_id = i;
		*sqe_at(i) = e;
		atomic_store(&pc.sqc->tail, i + 1);
		ck_assert_int_eq(proto_sq_next(&pc, &got, &why), 1);
		ck_assert_uint_eq(got.req_id, i);
		proto_sq_consume(&pc);
		ck_assert_uint_eq(atomic_load(&pc.sqc->head), i + 1);
		ck_assert_int_eq(proto_sq_next(&pc, &got, &why), 0);
	}
}
END_TEST

START_TEST(sq_tail_past_capacity)
{
	struct pg_sqe got;
	const char *why;
	atomic_store(&pc.sqc->tail, lay.sq_entries + 1);
	ck_assert_int_eq(proto_sq_next(&pc, &got, &why), -1);
	teardown();
	setup();
	atomic_store(&pc.sqc->tail, UINT32_MAX); /* "backwards" from 0 */
	ck_assert_int_eq(proto_sq_next(&pc, &got, &why), -1);
	teardown();
	setup();
	atomic_store(&pc.sqc->tail, lay.sq_entries); /* exactly full is fine */
	ck_assert_int_eq(proto_sq_next(&pc, &got, &why), 1);
}
END_TEST

START_TEST(sq_tail_backwards)
{
	struct pg_sqe got;
	const char *why;
	atomic_store(&pc.sqc->tail, 5);
	ck_assert_int_eq(proto_sq_next(&pc, &got, &why), 1);
	proto_sq_consume(&pc); /* head 1, seen tail 5 */
	atomic_store(&pc.sqc->tail, 3);
	ck_assert_int_eq(proto_sq_next(&pc, &got, &why), -1);
	ck_assert_ptr_nonnull(why);
}
END_TEST

START_TEST(sqe_checks)
{
	struct pg_sqe e;
	char msg[128];
	good_sqe(&e);
	ck_assert_int_eq(proto_sqe_check(&pc, &e, msg, sizeof msg), PG_OK);

	/* protocol violations: disconnect */
	struct pg_sqe b = e;
	b.op = 99;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b = e;
	b.flags = 0x80;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b.flags = 1u << 26;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	/* speculative decoding's settings: a drafter, a draft length in range */
	b.flags = PG_SPEC_DRAFT << PG_SUBMIT_SPEC_SHIFT | (uint32_t)PG_DRAFT_MAX << PG_SUBMIT_DRAFT_SHIFT;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_OK);
	b.flags = (PG_DRAFT_MAX + 1u) << PG_SUBMIT_DRAFT_SHIFT;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	b = e;
	b.prompt_off = 4000;
	b.prompt_len = 97; /* 4097 > 4096 */
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b.prompt_len = 96;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_OK);
	b = e;
	b.prompt_off = UINT32_MAX;
	b.prompt_len = UINT32_MAX; /* overflow-safe */
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b = e;
	b.flags = PG_SUBMIT_IDS;
	b.prompt_len = 6;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b = e;
	b.n_stop = 5;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b = e;
	b.n_stop = 1;
	b.stop_len[0] = 200;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);
	b.stop_len[0] = 0;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), -1);

	/* bad requests: an error completion */
	b = e;
	b.n_stop = 1;
	b.stop_len[0] = 3;
	memcpy(b.stop[0], "a\0b", 3);
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	memcpy(b.stop[0], "abc", 3);
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_OK);
	b = e;
	b.max_tokens = 0;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	b.max_tokens = 257; /* > n_ctx */
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	b.flags = PG_SUBMIT_CLAMP;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_OK);
	b = e;
	b.temp = NAN;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	b = e;
	b.top_p = 2;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	b = e;
	b.prompt_len = 0;
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_E_INVALID);
	b = e;
	b.op = PG_OP_NOP;
	b.prompt_off = UINT32_MAX; /* ignored for a NOP */
	ck_assert_int_eq(proto_sqe_check(&pc, &b, msg, sizeof msg), PG_OK);
}
END_TEST

START_TEST(prompt_copy_and_ids)
{
	struct pg_sqe e;
	good_sqe(&e);
	memcpy(pc.arena, "hello", 5);
	char *buf;
	size_t len;
	ck_assert_int_eq(proto_copy_prompt(&pc, &e, &buf, &len), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert_str_eq(buf, "hello");
	memcpy(pc.arena, "XXXXX", 5); /* the copy is the daemon's */
	ck_assert_str_eq(buf, "hello");
	free(buf);
	e.prompt_off = 4095;
	e.prompt_len = 2;
	ck_assert_int_eq(proto_copy_prompt(&pc, &e, &buf, &len), -1);
	int32_t ids[3] = { 1, 511, 2 };
	ck_assert_int_eq(proto_check_ids(ids, 3, 512), 0);
	ids[1] = 512;
	ck_assert_int_eq(proto_check_ids(ids, 3, 512), -1);
	ids[1] = -1;
	ck_assert_int_eq(proto_check_ids(ids, 3, 512), -1);
}
END_TEST

START_TEST(cq_checks)
{
	const char *why;
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.type = PG_CQE_TOKEN;
	ck_assert_int_eq(proto_cq_space(&pc, &why), 8);
	char text[64];
	memset(text, 'x', sizeof text);
	for (int i = 0; i < 8; i++) {
		e.u.tok.token = i;
		proto_cq_write(&pc, &e, text, i == 3 ? 64 : 3);
	}
	proto_cq_publish(&pc);
	ck_assert_uint_eq(atomic_load(&pc.cqc->tail), 8);
	ck_assert_uint_eq(atomic_load(&pc.cqc->seq), 1);
	ck_assert_int_eq(proto_cq_space(&pc, &why), 0);
	ck_assert_uint_eq(pc.cq[2].u.tok.len, 3);
	ck_assert_uint_eq(pc.cq[2].flags, 0);
	ck_assert_uint_eq(pc.cq[3].flags, 0); /* 64 <= inline */
	/* the client consumes 5 */
	atomic_store(&pc.cqc->head, 5);
	ck_assert_int_eq(proto_cq_space(&pc, &why), 5);
	/* head moved backwards */
	atomic_store(&pc.cqc->head, 4);
	ck_assert_int_eq(proto_cq_space(&pc, &why), -1);
	/* head past the tail */
	atomic_store(&pc.cqc->head, 9);
	ck_assert_int_eq(proto_cq_space(&pc, &why), -1);
	atomic_store(&pc.cqc->head, UINT32_MAX);
	ck_assert_int_eq(proto_cq_space(&pc, &why), -1);
}
END_TEST

START_TEST(cq_text_slot)
{
	struct pg_shm_hdr l2;
	memset(&l2, 0, sizeof l2);
	uint64_t size = pg_layout(&l2, 8, 8, 512, 4096);
	void *m = aligned_alloc(4096, size);
	struct proto_conn p2;
	proto_init(&p2, m, &l2);
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.type = PG_CQE_TOKEN;
	char text[512];
	for (int i = 0; i < 512; i++)
		text[i] = (char)('a' + i % 26);
	proto_cq_write(&p2, &e, text, 300);
	ck_assert_uint_eq(p2.cq[0].flags, PG_CQE_F_SLOT);
	ck_assert_uint_eq(p2.cq[0].u.tok.len, 300);
	ck_assert_int_eq(memcmp(p2.cq_text, text, 300), 0);
	free(m);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("ring");
	TCase *t = tcase_create("spsc");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, spsc_two_threads);
	tcase_add_test(t, spsc_counter_wrap);
	tcase_add_test(t, layout_sane);
	suite_add_tcase(s, t);
	t = tcase_create("proto");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, sq_in_order);
	tcase_add_test(t, sq_tail_past_capacity);
	tcase_add_test(t, sq_tail_backwards);
	tcase_add_test(t, sqe_checks);
	tcase_add_test(t, prompt_copy_and_ids);
	tcase_add_test(t, cq_checks);
	tcase_add_test(t, cq_text_slot);
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
