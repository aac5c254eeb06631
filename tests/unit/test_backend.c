/* tests/unit/test_backend.c — the backend door on the CPU backend: the
 * registry's names, the order of the calls, what a step refuses (a token
 * past its block table, a sequence index out of range, a batch beyond the
 * limits), a weight type the kernels lack named at load, and a ragged
 * batch of two sequences giving each the logits it gets alone. */
#include "daemon/kv/kv.h"
#include "daemon/model/model.h"
#include "kernels/pg_backend.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_registry_names)
{
	char msg[512];
	struct pg_backend *b;
	ck_assert_int_eq(pg_backend_open("tpu", NULL, &b, msg, sizeof msg), -EINVAL);
	ck_assert_ptr_null(b);
	ck_assert_msg(strstr(msg, "unknown backend 'tpu'"), "%s", msg);
	ck_assert_int_eq(pg_backend_open("cpu", NULL, &b, msg, sizeof msg), 0);
	ck_assert_str_eq(msg, "");
	ck_assert_str_eq(b->name, "cpu");
	ck_assert_uint_eq(b->caps, PG_BACKEND_CAP_EXACT | PG_BACKEND_CAP_KV_HOST);
	char d[128];
	pg_backend_describe(b, d, sizeof d);
	ck_assert_msg(!strncmp(d, "cpu (", 5), "%s", d);
	struct pg_mem_info mi;
	ck_assert_int_eq(pg_backend_mem_info(b, &mi), 0);
	ck_assert(mi.total > 0 && mi.free > 0 && mi.free <= mi.total);
	/* the order of the calls: a step needs weights, scratch and a pool */
	const struct pg_step_limits lim = { 4, 1, 32 };
	ck_assert_int_eq(pg_backend_reserve(b, &lim, msg, sizeof msg), -EINVAL);
	const struct pg_batch none = { 0 };
	ck_assert_int_eq(pg_backend_step(b, &none), -EINVAL);
	ck_assert_msg(strstr(pg_backend_last_error(b), "before"), "%s", pg_backend_last_error(b));
	pg_backend_close(b);
	pg_backend_close(NULL);
	/* no library here under this name: auto says why it took the CPU */
	setenv("PAGODA_CUDA_LIB", "/nonexistent/libpagoda-cuda.so", 1);
	ck_assert_int_eq(pg_backend_open("auto", NULL, &b, msg, sizeof msg), 0);
	ck_assert_str_eq(b->name, "cpu");
	ck_assert_msg(strstr(msg, "picked the CPU: cannot load /nonexistent/libpagoda-cuda.so"), "%s", msg);
	pg_backend_close(b);
	ck_assert_int_eq(pg_backend_open("cuda", NULL, &b, msg, sizeof msg), -ENODEV);
	ck_assert_msg(strstr(msg, "backend cuda: cannot load"), "%s", msg);
	unsetenv("PAGODA_CUDA_LIB");
}
END_TEST

struct rig {
	struct model *m;
	struct pg_backend *be;
	struct kv_pool kv;
};

static bool rig_open(struct rig *r, int max_tokens)
{
	char path[4096], err[512];
	if (testdata_path(path, sizeof path, "models/stories260K.gguf") != 0)
		return false;
	const struct pg_backend_opts o = { .threads = 2 };
	const struct pg_step_limits lim = { max_tokens, 2, 64 };
	ck_assert_msg(model_load(path, &r->m, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_open("cpu", &o, &r->be, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_load_weights(r->be, &r->m->desc, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(pg_backend_reserve(r->be, &lim, err, sizeof err) == 0, "%s", err);
	const struct model_hparams *hp = &r->m->hp;
	ck_assert_msg(kv_pool_init(&r->kv, r->be, 16, 16, hp->n_layer, hp->n_head_kv * hp->head_dim, false, err,
				   sizeof err) == 0,
		      "%s", err);
	return true;
}

static void rig_close(struct rig *r)
{
	kv_pool_free(&r->kv);
	pg_backend_close(r->be);
	model_free(r->m);
}

START_TEST(test_step_refuses_bad_batches)
{
	struct rig r;
	if (!rig_open(&r, 8))
		return;
	struct kv_seq s = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&r.kv, &s, 16), 0); /* one block: positions 0-15 */
	const struct pg_block_table t = kv_seq_table(&s);
	const int n_vocab = r.m->hp.n_vocab;
	float *logits = malloc(sizeof(float) * 9 * (size_t)n_vocab);
	int32_t tok[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, pos[9] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 }, seq[9] = { 0 };
	bool want[9] = { false, false, false, false, false, false, false, false, true };
	struct pg_batch b = { .n_tokens = 8, .tokens = tok, .pos = pos, .seq = seq, .want = want,
			      .n_seqs = 1, .seqs = &t, .logits = logits };
	b.n_tokens = 9; /* beyond max_tokens */
	ck_assert_int_eq(pg_backend_step(r.be, &b), -EINVAL);
	b.n_tokens = 1;
	pos[0] = 16; /* past the block table */
	ck_assert_int_eq(pg_backend_step(r.be, &b), -EINVAL);
	pos[0] = 0;
	seq[0] = 1; /* no such sequence */
	ck_assert_int_eq(pg_backend_step(r.be, &b), -EINVAL);
	seq[0] = 0;
	tok[0] = n_vocab;
	ck_assert_int_eq(pg_backend_step(r.be, &b), -EINVAL);
	tok[0] = 1;
	want[0] = true;
	b.logits = NULL; /* wanted, nowhere to go: the CPU has no greedy ids */
	ck_assert_int_eq(pg_backend_step(r.be, &b), -EINVAL);
	b.logits = logits;
	ck_assert_int_eq(pg_backend_step(r.be, &b), 0);
	ck_assert(isfinite(logits[0]) && isfinite(logits[n_vocab - 1]));
	kv_seq_release(&r.kv, &s);
	free(logits);
	rig_close(&r);
}
END_TEST

/* Two prompts in one ragged step (block tables of their own, interleaved
 * nowhere but in the batch) give each the last-token logits it gets
 * alone, bit for bit. */
START_TEST(test_ragged_equals_solo)
{
	struct rig r;
	if (!rig_open(&r, 16))
		return;
	const int n_vocab = r.m->hp.n_vocab;
	static const int32_t pa[5] = { 1, 400, 50, 7, 300 }, pb[3] = { 1, 90, 12 };
	float *solo = malloc(sizeof(float) * 2 * (size_t)n_vocab), *both = malloc(sizeof(float) * 2 * (size_t)n_vocab);
	for (int which = 0; which < 2; which++) {
		const int32_t *p = which ? pb : pa;
		const int n = which ? 3 : 5;
		struct kv_seq s = { 0 };
		ck_assert_int_eq(kv_seq_reserve(&r.kv, &s, n), 0);
		const struct pg_block_table t = kv_seq_table(&s);
		int32_t pos[5], seq[5] = { 0 }, ub[5];
		bool want[5];
		for (int i = 0; i < n; i++) {
			pos[i] = i;
			ub[i] = model_ubatch_of(i, n);
			want[i] = i == n - 1;
		}
		const struct pg_batch b = { .n_tokens = n, .tokens = p, .pos = pos, .seq = seq, .want = want,
					    .ubatch = ub, .n_seqs = 1, .seqs = &t, .logits = solo + (size_t)which * n_vocab };
		ck_assert_int_eq(pg_backend_step(r.be, &b), 0);
		kv_seq_release(&r.kv, &s);
	}
	struct kv_seq sa = { 0 }, sb = { 0 };
	ck_assert_int_eq(kv_seq_reserve(&r.kv, &sa, 5), 0);
	ck_assert_int_eq(kv_seq_reserve(&r.kv, &sb, 3), 0);
	/* b's tokens first: the step orders nothing by sequence */
	const struct pg_block_table t[2] = { kv_seq_table(&sb), kv_seq_table(&sa) };
	int32_t tok[8], pos[8], seq[8], ub[8];
	bool want[8];
	for (int i = 0; i < 8; i++) {
		const bool isb = i < 3;
		const int j = isb ? i : i - 3, n = isb ? 3 : 5;
		tok[i] = isb ? pb[j] : pa[j];
		pos[i] = j;
		seq[i] = isb ? 0 : 1;
		ub[i] = model_ubatch_of(j, n);
		want[i] = j == n - 1;
	}
	const struct pg_batch b = { .n_tokens = 8, .tokens = tok, .pos = pos, .seq = seq, .want = want,
				    .ubatch = ub, .n_seqs = 2, .seqs = t, .logits = both };
	ck_assert_int_eq(pg_backend_step(r.be, &b), 0);
	/* rows in batch order: b's, then a's */
	ck_assert(!memcmp(both, solo + n_vocab, sizeof(float) * (size_t)n_vocab));
	ck_assert(!memcmp(both + n_vocab, solo, sizeof(float) * (size_t)n_vocab));
	kv_seq_release(&r.kv, &sa);
	kv_seq_release(&r.kv, &sb);
	free(solo);
	free(both);
	rig_close(&r);
}
END_TEST

/* A tensor of a type the kernels lack is refused at load, by name. */
START_TEST(test_unsupported_type_named)
{
	char path[4096], err[512];
	if (testdata_path(path, sizeof path, "models/stories260K.gguf") != 0)
		return;
	struct model *m;
	struct pg_backend *be;
	ck_assert_msg(model_load(path, &m, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(pg_backend_open("cpu", NULL, &be, err, sizeof err), 0);
	struct pg_model_desc d = m->desc;
	struct pg_layer_desc *ly = malloc(sizeof *ly * (size_t)d.hp.n_layer);
	memcpy(ly, d.layers, sizeof *ly * (size_t)d.hp.n_layer);
	ly[1].w_up.type = PG_TYPE_I32;
	d.layers = ly;
	ck_assert_int_eq(pg_backend_load_weights(be, &d, err, sizeof err), -EINVAL);
	ck_assert_msg(strstr(err, "blk.1.ffn_up.weight") && strstr(err, "not supported"), "%s", err);
	/* the failed load left nothing behind: the real one goes through */
	ck_assert_msg(pg_backend_load_weights(be, &m->desc, err, sizeof err) == 0, "%s", err);
	free(ly);
	pg_backend_close(be);
	model_free(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backend");
	TCase *tc = tcase_create("cpu");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_registry_names);
	tcase_add_test(tc, test_step_refuses_bad_batches);
	tcase_add_test(tc, test_ragged_equals_solo);
	tcase_add_test(tc, test_unsupported_type_named);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
