/* tests/integration/test_e2e_daemon.c — a real pagodad ($PAGODA_BUILD/pagodad, or
 * build/pagodad) on a temporary socket with stories260K.gguf, real clients
 * through libpagoda (and raw, hostile ones through the bare protocol).
 *
 * References are computed in-process with the same engine (greedy), so every
 * output is compared token by token and byte by byte with its solo run.
 * Skipped (passing, saying so) when the daemon binary or the model is absent.
 * Under `make check-asan` the daemon itself is the ASan+UBSan build.
 */
#include "daemon/engine/engine.h"
#include "daemon/model/tokenizer.h"
#include "libclient/pagoda.h"
#include "shm/pagoda_shm.h"
#include "tests/integration/harness.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct th_daemon D;

static int need(void) { return th_need(&D); }

static void start_daemon_args(const char *extra[])
{
	th_mkdir(&D, "e2e");
	const char *argv[32] = { "--threads", "2", "--log-level", "debug" };
	int n = 4;
	for (int i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	th_spawn(&D, argv, NULL, NULL);
	th_wait_up(&D, 20000);
}

static void start_daemon(void) { start_daemon_args(NULL); }

/* Signals the daemon and waits for it; returns its exit status (or -sig). */
static int stop_daemon(int sig)
{
	int rc = th_stop(&D, sig, 20000);
	if (rc != 0 && sig != SIGKILL) /* show why */
		th_show_log(&D, 60);
	return rc;
}

static void cleanup(void) { th_cleanup(&D); }

static bool log_contains(const char *s) { return th_log_count(&D, s) > 0; }

/* ---- in-process reference -------------------------------------------------- */
struct out {
	char text[16384];
	size_t len;
	int32_t ids[4096];
	int n;
	int finish, error;
	bool done;
};

static void ref_tok(struct engine_req *r, int32_t tok, const char *text, size_t len)
{
	struct out *o = r->user;
	if (o->n < 4096)
		o->ids[o->n++] = tok;
	if (o->len + len <= sizeof o->text) {
		memcpy(o->text + o->len, text, len);
		o->len += len;
	}
}
static void ref_done(struct engine_req *r, enum finish_reason why, int err, const char *msg)
{
	struct out *o = r->user;
	o->done = true;
	o->finish = why;
	o->error = err;
}

/* Runs each prompt alone, greedy, with max_tokens n[i] and optional stop. */
static void reference(const char **prompts, const int *n, const char *stop, int count, struct out *outs)
{
	struct engine_opts eo = { .model_path = D.model, .threads = 2 };
	struct engine *e;
	char err[256];
	ck_assert_msg(engine_create(&eo, &e, err, sizeof err) == 0, "%s", err);
	const struct tokenizer *tok = engine_tokenizer(e);
	for (int i = 0; i < count; i++) {
		int32_t ids[4096];
		int k = tok_encode(tok, prompts[i], strlen(prompts[i]), tok_add_bos(tok), true, ids, 4096);
		ck_assert_int_gt(k, 0);
		memset(&outs[i], 0, sizeof outs[i]);
		struct engine_req r = { .id = (uint64_t)i + 1, .prompt = ids, .n_prompt = k, .max_tokens = n[i],
					.on_token = ref_tok, .on_done = ref_done, .user = &outs[i] };
		sampling_defaults(&r.sampling);
		r.sampling.temp = 0;
		if (stop) {
			r.n_stop = 1;
			snprintf(r.stop[0], sizeof r.stop[0], "%s", stop);
		}
		ck_assert_int_eq(engine_submit(e, &r), 0);
		while (!outs[i].done)
			engine_step(e);
	}
	engine_destroy(e);
}

/* Collects every request's events on one connection until all are final. */
static int collect(pagoda_t *pg, const uint64_t *ids, int count, struct out *outs, int timeout_ms)
{
	int left = count;
	for (int i = 0; i < count; i++)
		memset(&outs[i], 0, sizeof outs[i]);
	while (left > 0) {
		struct pagoda_event ev;
		int rc = pagoda_next(pg, &ev, timeout_ms);
		if (rc < 0)
			return rc;
		int i = 0;
		while (i < count && ids[i] != ev.req_id)
			i++;
		if (i == count)
			return -1000; /* an event for nobody */
		struct out *o = &outs[i];
		if (o->done)
			return -1001; /* an event after the final one */
		switch (ev.type) {
		case PAGODA_EV_TOKEN:
			if (ev.token >= 0 && o->n < 4096)
				o->ids[o->n++] = ev.token;
			if (o->len + ev.len <= sizeof o->text) {
				memcpy(o->text + o->len, ev.text, ev.len);
				o->len += ev.len;
			}
			break;
		case PAGODA_EV_DONE:
			o->done = true;
			o->finish = ev.finish;
			left--;
			break;
		case PAGODA_EV_ERROR:
			o->done = true;
			o->error = ev.error;
			left--;
			break;
		}
	}
	return 0;
}

static const char *prompts[16] = {
	"Once upon a time",
	"Lily and Ben went to the park",
	"The cat sat on the mat.",
	"Tom had a big red ball",
	"One day, a little girl named Sue",
	"The sun was shining and",
	"There was a dog",
	"Mom said",
	"Tim and his friend",
	"In a small house lived",
	"The bird flew",
	"Sara wanted to play with",
	"\"Look!\" said the boy.",
	"It was a rainy day.",
	"The big tree",
	"A",
};

static bool same(const struct out *a, const struct out *b, char *why, size_t wl)
{
	if (a->n != b->n) {
		snprintf(why, wl, "%d tokens vs %d", a->n, b->n);
		return false;
	}
	for (int i = 0; i < a->n; i++)
		if (a->ids[i] != b->ids[i]) {
			snprintf(why, wl, "token %d: %d vs %d", i, a->ids[i], b->ids[i]);
			return false;
		}
	if (a->len != b->len || memcmp(a->text, b->text, a->len)) {
		snprintf(why, wl, "text differs");
		return false;
	}
	return true;
}

/* ---- 8 processes x 16 requests --------------------------------------------- */
START_TEST(many_clients)
{
	if (need() < 0)
		return;
	static struct out ref[16], got[16];
	int n[16];
	for (int i = 0; i < 16; i++)
		n[i] = 24 + 7 * i;
	reference(prompts, n, NULL, 16, ref);
	start_daemon();
	pid_t kids[8];
	for (int k = 0; k < 8; k++) {
		kids[k] = fork();
		ck_assert_int_ge(kids[k], 0);
		if (kids[k] == 0) {
			pagoda_t *pg;
			if (pagoda_connect(D.sock, &pg) < 0)
				_exit(10);
			uint64_t ids[16];
			for (int j = 0; j < 16; j++) {
				int i = (j + k) % 16; /* different orders per client */
				struct pagoda_params p;
				pagoda_params_init(&p);
				p.max_tokens = n[i];
				int rc;
				if (k % 2 == 0) {
					rc = pagoda_submit_text(pg, prompts[i], strlen(prompts[i]), &p, &ids[i]);
				} else { /* zero copy */
					struct pagoda_prompt pr;
					size_t l = strlen(prompts[i]);
					rc = pagoda_prompt_alloc(pg, l, &pr);
					if (rc == 0) {
						memcpy(pr.data, prompts[i], l);
						rc = pagoda_prompt_submit(pg, &pr, l, false, &p, &ids[i]);
					}
				}
				if (rc < 0)
					_exit(11);
			}
			if (pagoda_inflight(pg) != 16)
				_exit(12);
			int rc = collect(pg, ids, 16, got, 120000);
			if (rc < 0) {
				fprintf(stderr, "client %d: %s (%d)\n", k, pagoda_strerror(rc), rc);
				_exit(13);
			}
			for (int i = 0; i < 16; i++) {
				char why[128];
				if (got[i].error || !same(&got[i], &ref[i], why, sizeof why)) {
					fprintf(stderr, "client %d request %d (%s): %s\n", k, i, prompts[i],
						got[i].error ? pagoda_strerror(got[i].error) : why);
					_exit(14);
				}
			}
			pagoda_close(pg);
			_exit(0);
		}
	}
	for (int k = 0; k < 8; k++) {
		int st;
		ck_assert_int_eq(waitpid(kids[k], &st, 0), kids[k]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d failed: status %d", k, st);
	}
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

/* A token-id prompt through the zero-copy path, and ping. */
START_TEST(ids_and_nop)
{
	if (need() < 0)
		return;
	static struct out ref[1], got[1];
	int n = 40;
	reference(prompts, &n, NULL, 1, ref);
	start_daemon();
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	ck_assert_int_eq(pagoda_n_vocab(pg), 512);
	/* the same prompt as ids: tokenize like the daemon does */
	struct engine_opts eo = { .model_path = D.model, .threads = 1 };
	struct engine *e;
	char err[256];
	ck_assert_int_eq(engine_create(&eo, &e, err, sizeof err), 0);
	int32_t ids[64];
	const struct tokenizer *tok = engine_tokenizer(e);
	int k = tok_encode(tok, prompts[0], strlen(prompts[0]), tok_add_bos(tok), true, ids, 64);
	engine_destroy(e);
	struct pagoda_prompt pr;
	ck_assert_int_eq(pagoda_prompt_alloc(pg, (size_t)k * 4, &pr), 0);
	memcpy(pr.data, ids, (size_t)k * 4);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = n;
	uint64_t id, nop;
	ck_assert_int_eq(pagoda_prompt_submit(pg, &pr, (size_t)k * 4, true, &p, &id), 0);
	ck_assert_int_eq(collect(pg, &id, 1, got, 10000), 0);
	char why[128];
	ck_assert_msg(same(&got[0], &ref[0], why, sizeof why), "%s", why);
	ck_assert_int_eq(got[0].finish, PAGODA_FINISH_LENGTH);
	/* out-of-vocabulary id */
	int32_t bad[2] = { 1, 100000 };
	ck_assert_int_eq(pagoda_submit_ids(pg, bad, 2, &p, &id), 0);
	ck_assert_int_eq(collect(pg, &id, 1, got, 10000), 0);
	ck_assert_int_eq(got[0].error, PAGODA_E_INVALID_REQ);
	/* nop round trip */
	struct pagoda_event ev;
	ck_assert_int_eq(pagoda_nop(pg, &nop), 0);
	ck_assert_int_eq(pagoda_next(pg, &ev, 5000), 0);
	ck_assert_int_eq(ev.type, PAGODA_EV_NOP);
	ck_assert_uint_eq(ev.req_id, nop);
	ck_assert_int_eq(pagoda_next(pg, &ev, 0), PAGODA_E_AGAIN);
	ck_assert_int_eq(pagoda_next(pg, &ev, 50), PAGODA_E_TIMEOUT);
	pagoda_close(pg);
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

/* A client whose events come further apart than a spin lasts goes to the
 * futex at once (the spin before every token took a core the daemon
 * computes on). That path must never lose a wake-up: each round here makes
 * the client skip its spin (an idle wait first), then waits for a reply
 * that comes while it sleeps. What the spin cost is measured in make bench
 * (generate against run on the tiny model), not here: in a VM a futex
 * sleep with its timer costs about as much CPU as the spin did. */
START_TEST(sleeping_client_wakes)
{
	if (need() < 0)
		return;
	start_daemon();
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	struct pagoda_event ev;
	for (int i = 0; i < 200; i++) {
		ck_assert_int_eq(pagoda_next(pg, &ev, 1), PAGODA_E_TIMEOUT);
		uint64_t nop;
		ck_assert_int_eq(pagoda_nop(pg, &nop), 0);
		ck_assert_int_eq(pagoda_next(pg, &ev, 5000), 0);
		ck_assert_int_eq(ev.type, PAGODA_EV_NOP);
		ck_assert_uint_eq(ev.req_id, nop);
	}
	pagoda_close(pg);
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

/* ---- stop strings, context, cancel ------------------------------------------------ */
START_TEST(stop_context_cancel)
{
	if (need() < 0)
		return;
	static struct out ref[1], got[1], stopped[1];
	int n = 100;
	reference(prompts + 1, &n, NULL, 1, ref);
	ck_assert_uint_gt(ref[0].len, 60);
	char stop[9];
	memcpy(stop, ref[0].text + 40, 8);
	stop[8] = 0;
	reference(prompts + 1, &n, stop, 1, stopped);
	start_daemon();
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = n;
	p.n_stop = 1;
	p.stop[0] = stop;
	uint64_t id;
	ck_assert_int_eq(pagoda_submit_text(pg, prompts[1], strlen(prompts[1]), &p, &id), 0);
	ck_assert_int_eq(collect(pg, &id, 1, got, 10000), 0);
	ck_assert_int_eq(got[0].finish, PAGODA_FINISH_STOP);
	char *hit = memmem(ref[0].text, ref[0].len, stop, 8);
	ck_assert_ptr_nonnull(hit);
	ck_assert_uint_eq(got[0].len, (size_t)(hit - ref[0].text)); /* text up to the stop string */
	ck_assert_int_eq(memcmp(got[0].text, ref[0].text, got[0].len), 0);
	char why[128];
	ck_assert_msg(same(&got[0], &stopped[0], why, sizeof why), "%s", why);

	/* more than the context */
	pagoda_params_init(&p);
	p.max_tokens = pagoda_n_ctx(pg);
	ck_assert_int_eq(pagoda_submit_text(pg, "Hello", 5, &p, &id), 0);
	ck_assert_int_eq(collect(pg, &id, 1, got, 10000), 0);
	ck_assert_int_eq(got[0].error, PAGODA_E_CONTEXT);
	int n_ctx = pagoda_n_ctx(pg);
	int32_t *many = calloc((size_t)n_ctx + 10, sizeof *many);
	for (int i = 0; i < n_ctx + 10; i++)
		many[i] = 100 + i % 50;
	p.max_tokens = 1;
	ck_assert_int_eq(pagoda_submit_ids(pg, many, (size_t)n_ctx + 10, &p, &id), 0);
	free(many);
	struct pagoda_event ev;
	ck_assert_int_eq(pagoda_next(pg, &ev, 10000), 0);
	ck_assert_int_eq(ev.type, PAGODA_EV_ERROR);
	ck_assert_int_eq(ev.error, PAGODA_E_CONTEXT);
	ck_assert_ptr_nonnull(strstr(ev.text, "context"));
	/* clamped instead */
	p.max_tokens = n_ctx;
	p.flags = PAGODA_CLAMP_MAX_TOKENS;
	ck_assert_int_eq(pagoda_submit_text(pg, "Hello", 5, &p, &id), 0);
	ck_assert_int_eq(pagoda_cancel(pg, id), 0);
	ck_assert_int_eq(collect(pg, &id, 1, got, 10000), 0);
	ck_assert_int_eq(got[0].error, 0);

	/* cancel mid-stream */
	pagoda_params_init(&p);
	p.max_tokens = 1500;
	ck_assert_int_eq(pagoda_submit_text(pg, "Once", 4, &p, &id), 0);
	int toks = 0;
	while (toks < 5) {
		ck_assert_int_eq(pagoda_next(pg, &ev, 10000), 0);
		ck_assert_int_eq(ev.type, PAGODA_EV_TOKEN);
		toks++;
	}
	ck_assert_int_eq(pagoda_cancel(pg, id), 0);
	for (;;) {
		ck_assert_int_eq(pagoda_next(pg, &ev, 10000), 0);
		if (ev.type != PAGODA_EV_TOKEN)
			break;
		toks++;
	}
	ck_assert_int_eq(ev.type, PAGODA_EV_DONE);
	ck_assert_int_eq(ev.finish, PAGODA_FINISH_CANCEL);
	ck_assert_int_lt(toks, 1500);
	ck_assert_int_eq(pagoda_inflight(pg), 0);
	pagoda_close(pg);
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

/* ---- deaths -------------------------------------------------------------------------- */
static int wait_idle(pagoda_t *pg, int ms)
{
	uint64_t end = th_now_ms() + (uint64_t)ms;
	while (th_now_ms() < end) {
		uint64_t id;
		struct pagoda_event ev;
		if (pagoda_stats(pg, &id) < 0 || pagoda_next(pg, &ev, 5000) < 0 || ev.type != PAGODA_EV_STATS)
			return -1;
		if (ev.stats.inflight == 0 && ev.stats.running == 0 && ev.stats.waiting == 0)
			return 0;
		th_msleep(20);
	}
	return -1;
}

START_TEST(client_killed)
{
	if (need() < 0)
		return;
	static struct out ref[1], got[1];
	int n = 60;
	reference(prompts + 2, &n, NULL, 1, ref);
	start_daemon();
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t kid = fork();
	if (kid == 0) {
		pagoda_t *pg;
		struct pagoda_params p;
		pagoda_params_init(&p);
		p.max_tokens = 1900;
		uint64_t id[4];
		if (pagoda_connect(D.sock, &pg) < 0)
			_exit(1);
		for (int i = 0; i < 4; i++)
			pagoda_submit_text(pg, prompts[i], strlen(prompts[i]), &p, &id[i]);
		struct pagoda_event ev;
		for (int i = 0; i < 10; i++)
			pagoda_next(pg, &ev, 5000);
		if (write(pfd[1], "x", 1) != 1)
			_exit(1);
		for (;;) /* keep reading slowly, never finishing */
			pagoda_next(pg, &ev, 5000), th_msleep(1);
	}
	char c;
	ck_assert_int_eq(read(pfd[0], &c, 1), 1);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	ck_assert_msg(wait_idle(pg, 5000) == 0, "the killed client's requests are still running");
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = n;
	uint64_t id;
	ck_assert_int_eq(pagoda_submit_text(pg, prompts[2], strlen(prompts[2]), &p, &id), 0);
	ck_assert_int_eq(collect(pg, &id, 1, got, 10000), 0);
	char why[128];
	ck_assert_msg(same(&got[0], &ref[0], why, sizeof why), "%s", why);
	pagoda_close(pg);
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	ck_assert(log_contains("cancelling 4 request(s)"));
	cleanup();
}
END_TEST

START_TEST(daemon_killed)
{
	if (need() < 0)
		return;
	start_daemon();
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 1900;
	uint64_t id;
	ck_assert_int_eq(pagoda_submit_text(pg, "Once", 4, &p, &id), 0);
	struct pagoda_event ev;
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(pagoda_next(pg, &ev, 5000), 0);
	kill(D.pid, SIGKILL);
	uint64_t t0 = th_now_ms();
	int rc;
	while ((rc = pagoda_next(pg, &ev, -1)) == 0) /* drain what was already produced */
		ck_assert_msg(th_now_ms() - t0 < 1000, "still receiving after the daemon died");
	uint64_t dt = th_now_ms() - t0;
	ck_assert_int_eq(rc, PAGODA_E_DISCONNECTED);
	ck_assert_msg(dt < 1000, "took %llu ms to notice", (unsigned long long)dt);
	ck_assert_int_eq(pagoda_submit_text(pg, "x", 1, &p, &id), PAGODA_E_DISCONNECTED);
	ck_assert_int_eq(pagoda_next(pg, &ev, 100), PAGODA_E_DISCONNECTED);
	pagoda_close(pg);
	waitpid(D.pid, NULL, 0);
	D.pid = -1;
	cleanup();
}
END_TEST

/* ---- SIGTERM drains ------------------------------------------------------------------- */
START_TEST(drain)
{
	if (need() < 0)
		return;
	start_daemon();
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 300;
	uint64_t id, id2;
	ck_assert_int_eq(pagoda_submit_text(pg, "Once", 4, &p, &id), 0);
	struct pagoda_event ev;
	ck_assert_int_eq(pagoda_next(pg, &ev, 5000), 0);
	kill(D.pid, SIGTERM);
	th_msleep(50);
	ck_assert_int_eq(pagoda_submit_text(pg, "Again", 5, &p, &id2), 0);
	int toks = 1;
	bool refused = false, done = false;
	while (!(refused && done)) {
		ck_assert_int_eq(pagoda_next(pg, &ev, 10000), 0);
		if (ev.req_id == id2) {
			ck_assert_int_eq(ev.type, PAGODA_EV_ERROR);
			ck_assert_int_eq(ev.error, PAGODA_E_DRAINING);
			refused = true;
		} else if (ev.type == PAGODA_EV_TOKEN) {
			toks++;
		} else {
			ck_assert_int_eq(ev.type, PAGODA_EV_DONE);
			done = true;
		}
	}
	ck_assert_int_eq(ev.finish == PAGODA_FINISH_LENGTH || ev.finish == PAGODA_FINISH_EOS, 1);
	pagoda_t *late;
	ck_assert_int_ne(pagoda_connect(D.sock, &late), 0);
	int st;
	ck_assert_int_eq(waitpid(D.pid, &st, 0), D.pid);
	D.pid = -1;
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_int_eq(pagoda_next(pg, &ev, 2000), PAGODA_E_DISCONNECTED);
	pagoda_close(pg);
	cleanup();
}
END_TEST

/* ---- policy ----------------------------------------------------------------------------- */
static int connect_as_nobody(void)
{
	pid_t k = fork();
	if (k == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(100);
		pagoda_t *pg;
		int rc = pagoda_connect(D.sock, &pg);
		if (rc == 0)
			pagoda_close(pg);
		_exit(-rc);
	}
	int st;
	waitpid(k, &st, 0);
	return WIFEXITED(st) ? -WEXITSTATUS(st) : -999;
}

START_TEST(other_uid)
{
	if (need() < 0)
		return;
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: other_uid needs root to become another user\n");
		return;
	}
	start_daemon();
	ck_assert_int_eq(connect_as_nobody(), PAGODA_E_PERM);
	ck_assert(log_contains("not allowed by policy"));
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
	const char *allow[] = { "--allow-users", "65534", NULL };
	start_daemon_args(allow);
	ck_assert_int_eq(connect_as_nobody(), 0);
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

/* ---- hostile clients ---------------------------------------------------------------------- */
struct raw {
	int sock, efd;
	char *m;
	size_t size;
	struct pg_shm_hdr h;
	struct pg_ring_ctl *sqc, *cqc;
	struct pg_sqe *sq;
	struct pg_cqe *cq;
	uint32_t version; /* the welcome's */
};

static int raw_connect_v(struct raw *r, uint32_t version)
{
	memset(r, 0, sizeof *r);
	r->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(D.sock) >= sizeof sa.sun_path)
		return -1;
	memcpy(sa.sun_path, D.sock, strlen(D.sock) + 1);
	if (connect(r->sock, (struct sockaddr *)&sa, sizeof sa) < 0)
		return -1;
	struct pg_hello h = { PG_PROTO_MAGIC, version, 0, 0 };
	if (send(r->sock, &h, sizeof h, 0) != sizeof h)
		return -1;
	struct pg_welcome w;
	union {
		char b[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr a;
	} cb;
	struct iovec iov = { &w, sizeof w };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof cb.b };
	if (recvmsg(r->sock, &mh, 0) != sizeof w || w.status)
		return -1;
	int fds[2];
	memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof fds);
	r->size = w.shm_size;
	r->m = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	/* the seals hold */
	if (ftruncate(fds[0], (off_t)r->size * 2) == 0 || ftruncate(fds[0], 4096) == 0)
		return -2;
	close(fds[0]);
	r->efd = fds[1];
	memcpy(&r->h, r->m, sizeof r->h);
	r->sqc = PG_AT(r->m, r->h.sq_ctl_off, struct pg_ring_ctl);
	r->cqc = PG_AT(r->m, r->h.cq_ctl_off, struct pg_ring_ctl);
	r->sq = PG_AT(r->m, r->h.sq_off, struct pg_sqe);
	r->cq = PG_AT(r->m, r->h.cq_off, struct pg_cqe);
	r->version = w.version;
	return 0;
}

static int raw_connect(struct raw *r) { return raw_connect_v(r, PG_PROTO_VERSION); }

static void raw_kick(struct raw *r)
{
	uint64_t one = 1;
	if (write(r->efd, &one, 8) != 8)
		return;
}

/* true when the daemon hung up within ms */
static bool raw_dropped(struct raw *r, int ms)
{
	struct pollfd p = { r->sock, POLLIN | POLLRDHUP, 0 };
	return poll(&p, 1, ms) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLIN));
}

static void raw_close(struct raw *r)
{
	munmap(r->m, r->size);
	close(r->sock);
	close(r->efd);
}

static uint32_t rnd_state = 12345;
static uint32_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 17;
	rnd_state ^= rnd_state << 5;
	return rnd_state;
}

/* A well-behaved client in a child process that runs requests and checks
 * them against the reference until told to stop (SIGTERM), exit 0 if all
 * matched. */
static pid_t good_client(const struct out *ref, int n)
{
	pid_t k = fork();
	if (k)
		return k;
	static struct out got[1];
	pagoda_t *pg;
	if (pagoda_connect(D.sock, &pg) < 0)
		_exit(20);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (int round = 0;; round++) {
		struct pagoda_params p;
		pagoda_params_init(&p);
		p.max_tokens = n;
		uint64_t id;
		if (pagoda_submit_text(pg, prompts[3], strlen(prompts[3]), &p, &id) < 0)
			_exit(21);
		int rc = collect(pg, &id, 1, got, 10000);
		char why[128];
		if (rc < 0 || !same(&got[0], ref, why, sizeof why)) {
			fprintf(stderr, "good client: round %d: %s\n", round, rc < 0 ? pagoda_strerror(rc) : why);
			_exit(22);
		}
		sigset_t pend;
		sigpending(&pend);
		if (sigismember(&pend, SIGTERM) && round > 0)
			_exit(0);
	}
}

START_TEST(hostile)
{
	if (need() < 0)
		return;
	static struct out ref[1];
	int n = 30;
	reference(prompts + 3, &n, NULL, 1, ref);
	start_daemon();
	pid_t good = good_client(&ref[0], n);
	struct raw r;
	struct pg_sqe e;

	/* tail past capacity */
	ck_assert_int_eq(raw_connect(&r), 0);
	atomic_store(&r.sqc->tail, 1000);
	raw_kick(&r);
	ck_assert(raw_dropped(&r, 2000));
	raw_close(&r);

	/* tail backwards after a valid NOP */
	ck_assert_int_eq(raw_connect(&r), 0);
	memset(&e, 0, sizeof e);
	e.op = PG_OP_NOP;
	r.sq[0] = e;
	atomic_store(&r.sqc->tail, 1);
	raw_kick(&r);
	uint64_t end = th_now_ms() + 2000;
	while (atomic_load(&r.sqc->head) != 1 && th_now_ms() < end)
		th_msleep(1);
	ck_assert_uint_eq(atomic_load(&r.sqc->head), 1);
	ck_assert_uint_eq(atomic_load(&r.cqc->tail), 1); /* the NOP answer */
	atomic_store(&r.sqc->tail, 0);
	raw_kick(&r);
	ck_assert(raw_dropped(&r, 2000));
	raw_close(&r);

	/* huge lengths, offsets past the arena, unknown ops, bad stop strings */
	for (int c = 0; c < 5; c++) {
		ck_assert_int_eq(raw_connect(&r), 0);
		memset(&e, 0, sizeof e);
		e.op = PG_OP_SUBMIT;
		e.max_tokens = 5;
		e.top_p = 1;
		e.repeat_penalty = 1;
		e.prompt_len = 10;
		switch (c) {
		case 0: e.prompt_len = UINT32_MAX; break;
		case 1: e.prompt_off = r.h.arena_size - 5; break;
		case 2: e.op = 0xdeadbeef; break;
		case 3: e.n_stop = 1; e.stop_len[0] = 255; break;
		case 4: e.flags = PG_SUBMIT_IDS; e.prompt_len = 7; break;
		}
		r.sq[0] = e;
		atomic_store(&r.sqc->tail, 1);
		raw_kick(&r);
		ck_assert_msg(raw_dropped(&r, 2000), "case %d not disconnected", c);
		raw_close(&r);
	}

	/* completion head moved past the tail */
	ck_assert_int_eq(raw_connect(&r), 0);
	atomic_store(&r.cqc->head, 77);
	memset(&e, 0, sizeof e);
	e.op = PG_OP_NOP;
	r.sq[0] = e;
	atomic_store(&r.sqc->tail, 1);
	raw_kick(&r);
	ck_assert(raw_dropped(&r, 2000));
	raw_close(&r);

	/* random garbage over the whole mapping, header included */
	for (int round = 0; round < 30; round++) {
		ck_assert_int_eq(raw_connect(&r), 0);
		for (size_t i = 0; i < r.size; i += 4) {
			uint32_t v = rnd();
			memcpy(r.m + i, &v, 4);
		}
		if (round % 3 == 0) /* plausible positions, garbage entries */
			atomic_store(&r.sqc->tail, rnd() % (r.h.sq_entries + 1)), atomic_store(&r.sqc->head, 0);
		raw_kick(&r);
		th_msleep(5);
		raw_close(&r);
	}

	/* entries and tail changing while the daemon reads them */
	ck_assert_int_eq(raw_connect(&r), 0);
	uint32_t tail = 0;
	end = th_now_ms() + 1000;
	bool dropped = false;
	while (th_now_ms() < end && !dropped) {
		for (uint32_t i = 0; i < r.h.sq_entries; i++) {
			struct pg_sqe *s = &r.sq[i];
			s->op = rnd() % 2 ? PG_OP_NOP : (rnd() % 3 ? PG_OP_SUBMIT : rnd());
			s->prompt_off = rnd() % 3 ? rnd() % 64 : rnd();
			s->prompt_len = rnd() % 3 ? rnd() % 64 : rnd();
			s->max_tokens = (int32_t)(rnd() % 8);
			s->top_p = 1;
			s->repeat_penalty = 1;
			s->flags = rnd() % 4 ? 0 : rnd() % 3;
			if (rnd() % 5 == 0) { /* an extension record anywhere, of any length */
				s->flags |= PG_SUBMIT_EXT;
				s->user = rnd() % 3 ? (rnd() % 4096) | (uint64_t)(rnd() % 256) << 32 : (uint64_t)rnd() << 32 | rnd();
			}
			s->n_stop = rnd() % 6;
			s->stop_len[0] = (uint8_t)rnd();
		}
		for (int i = 0; i < 4096; i++)
			r.m[r.h.arena_off + i] = (char)(rnd() % 256);
		tail += rnd() % 4;
		atomic_store(&r.sqc->tail, tail);
		/* keep the completion ring drained as a client would */
		atomic_store(&r.cqc->head, atomic_load(&r.cqc->tail));
		raw_kick(&r);
		dropped = raw_dropped(&r, 1);
	}
	raw_close(&r);

	/* the daemon is alive and the good client saw nothing wrong */
	kill(good, SIGTERM);
	int st;
	ck_assert_int_eq(waitpid(good, &st, 0), good);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the well-behaved client failed: %d", st);
	ck_assert_int_eq(kill(D.pid, 0), 0);
	ck_assert(log_contains("disconnected"));
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

/* One SUBMIT with an extension record of n bytes (rec) at arena offset 0
 * and the prompt "Once" after it; the final CQE's type and code, or -1 if
 * the daemon hung up or said nothing in 10 s. The CQ is drained. */
static int raw_submit_ext(struct raw *r, const void *rec, uint32_t n, uint32_t flags, uint32_t *code)
{
	struct pg_sqe e;
	memset(&e, 0, sizeof e);
	memcpy(r->m + r->h.arena_off, rec, n);
	memcpy(r->m + r->h.arena_off + 4096, "Once", 4);
	e.op = PG_OP_SUBMIT;
	e.flags = PG_SUBMIT_EXT | flags;
	e.user = (uint64_t)n << 32;
	e.req_id = 7;
	e.prompt_off = 4096;
	e.prompt_len = 4;
	e.max_tokens = 4;
	e.top_p = 1;
	e.repeat_penalty = 1;
	uint32_t t = atomic_load(&r->sqc->tail);
	r->sq[t & (r->h.sq_entries - 1)] = e;
	atomic_store(&r->sqc->tail, t + 1);
	raw_kick(r);
	uint64_t end = th_now_ms() + 10000;
	uint32_t head = atomic_load(&r->cqc->head);
	while (th_now_ms() < end) {
		if (head == atomic_load(&r->cqc->tail)) {
			if (raw_dropped(r, 1))
				return -1;
			continue;
		}
		const struct pg_cqe *c = &r->cq[head & (r->h.cq_entries - 1)];
		head++;
		atomic_store(&r->cqc->head, head);
		if (c->type == PG_CQE_DONE || c->type == PG_CQE_ERROR) {
			*code = c->type == PG_CQE_ERROR ? c->u.error.code : 0;
			return (int)c->type;
		}
	}
	return -1;
}

/* Protocol v3's extension record from a hostile or older client: a bad
 * layout is refused with an error (the connection stays), a record outside
 * the arena disconnects, a larger record from a newer client whose unknown
 * bytes are zero works; a version 2 client is served as before. */
START_TEST(ext_record)
{
	if (need() < 0)
		return;
	start_daemon();
	struct raw r;
	uint32_t code;
	ck_assert_int_eq(raw_connect_v(&r, 2), 0);
	ck_assert_uint_eq(r.version, 2);
	ck_assert_uint_eq(r.h.version, 2);
	struct pg_sqe e;
	memset(&e, 0, sizeof e);
	memcpy(r.m + r.h.arena_off, "Once", 4);
	e.op = PG_OP_SUBMIT;
	e.prompt_len = 4;
	e.max_tokens = 3;
	e.top_p = 1;
	e.repeat_penalty = 1;
	r.sq[0] = e;
	atomic_store(&r.sqc->tail, 1);
	raw_kick(&r);
	uint64_t end = th_now_ms() + 10000;
	bool done = false;
	for (uint32_t head = 0; !done && th_now_ms() < end;)
		if (head != atomic_load(&r.cqc->tail)) {
			done = r.cq[head & (r.h.cq_entries - 1)].type == PG_CQE_DONE;
			atomic_store(&r.cqc->head, ++head);
		}
	ck_assert_msg(done, "a version 2 client was not served");
	raw_close(&r);

	ck_assert_int_eq(raw_connect(&r), 0);
	ck_assert_uint_eq(r.version, PG_PROTO_VERSION);
	struct pg_submit_ext x;
	char big[256];
	memset(&x, 0, sizeof x);
	x.size = sizeof x;
	x.top_logprobs = 3;
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, PG_SUBMIT_LOGPROBS, &code), PG_CQE_DONE);
	memset(big, 0, sizeof big);
	memcpy(big, &x, sizeof x);
	((struct pg_submit_ext *)big)->size = sizeof big;
	ck_assert_int_eq(raw_submit_ext(&r, big, sizeof big, PG_SUBMIT_LOGPROBS, &code), PG_CQE_DONE);
	big[200] = 1; /* a field this daemon does not know */
	ck_assert_int_eq(raw_submit_ext(&r, big, sizeof big, PG_SUBMIT_LOGPROBS, &code), PG_CQE_ERROR);
	ck_assert_uint_eq(code, PG_E_INVALID);
	x.size = 6; /* below the smallest */
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, 0, &code), PG_CQE_ERROR);
	x.size = sizeof x;
	x.constraint_len = 100; /* more than the record holds */
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, 0, &code), PG_CQE_ERROR);
	x.constraint_len = 0;
	x.top_logprobs = 21;
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, PG_SUBMIT_LOGPROBS, &code), PG_CQE_ERROR);
	x.top_logprobs = 2; /* without PG_SUBMIT_LOGPROBS */
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, 0, &code), PG_CQE_ERROR);
	x.top_logprobs = 0;
	x.presence_penalty = NAN;
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, 0, &code), PG_CQE_ERROR);
	x.presence_penalty = 0;
	x.constraint_kind = 9;
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, 0, &code), PG_CQE_ERROR);
	x.constraint_kind = PG_CONSTRAINT_REGEX; /* a kind without text */
	ck_assert_int_eq(raw_submit_ext(&r, &x, sizeof x, 0, &code), PG_CQE_ERROR);
	memcpy(big, &x, sizeof x);
	((struct pg_submit_ext *)big)->constraint_len = 3;
	memcpy(big + sizeof x, "(a|", 3); /* a regex that does not compile */
	ck_assert_int_eq(raw_submit_ext(&r, big, sizeof x + 3, 0, &code), PG_CQE_ERROR);
	memcpy(big + sizeof x, "On.", 3);
	((struct pg_submit_ext *)big)->constraint_len = 3;
	ck_assert_int_eq(raw_submit_ext(&r, big, sizeof x + 3, 0, &code), PG_CQE_DONE);
	ck_assert(!raw_dropped(&r, 1));
	/* outside the arena: a broken rule */
	memset(&e, 0, sizeof e);
	e.op = PG_OP_SUBMIT;
	e.flags = PG_SUBMIT_EXT;
	e.user = (uint64_t)64 << 32 | (r.h.arena_size - 32);
	e.prompt_len = 4;
	e.max_tokens = 4;
	e.top_p = 1;
	e.repeat_penalty = 1;
	uint32_t t = atomic_load(&r.sqc->tail);
	r.sq[t & (r.h.sq_entries - 1)] = e;
	atomic_store(&r.sqc->tail, t + 1);
	raw_kick(&r);
	ck_assert(raw_dropped(&r, 2000));
	raw_close(&r);
	ck_assert_int_eq(stop_daemon(SIGTERM), 0);
	cleanup();
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("e2e_daemon");
	TCase *t = tcase_create("daemon");
	tcase_set_timeout(t, 900);
	tcase_add_test(t, many_clients);
	tcase_add_test(t, ids_and_nop);
	tcase_add_test(t, sleeping_client_wakes);
	tcase_add_test(t, stop_context_cancel);
	tcase_add_test(t, client_killed);
	tcase_add_test(t, daemon_killed);
	tcase_add_test(t, drain);
	tcase_add_test(t, other_uid);
	tcase_add_test(t, hostile);
	tcase_add_test(t, ext_record);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
