/* tests/integration/test_soak.c — pagodad under the attacks of issue 24, each on
 * its own and then all together beside well-behaved clients.
 *
 * A real daemon ($PAGODA_BUILD/pagodad) on a temporary socket with
 * stories260K.gguf; attackers of other uids are forked children that setuid
 * (CI is root; skipped, saying so, otherwise). Each finding has its test:
 *   - idle connections that never say hello are dropped at the deadline;
 *   - a refused user is refused at accept, before any hello, and still
 *     reads a clear PAGODA_E_PERM; the journal sees a few lines, not one
 *     per attempt;
 *   - 1,100 idle connections against a 1,024-descriptor limit: no busy
 *     loop, one log line, and service again once they go;
 *   - huge text prompts do not stall other clients (refused at once by
 *     their byte length; tokenizing is off the main loop);
 *   - clients that never read their completions are cut off at their
 *     budget, and the memory comes back when they leave;
 *   - one uid cannot take more than max-clients-per-uid connections;
 *   - libpagoda: a prompt of half the arena plus a page after a half, on an
 *     idle connection, is accepted (the arena rewinds).
 * The soak runs all of them at once for a while: the good clients' output
 * equals their solo run token for token, their latency stays bounded, and
 * the daemon's descriptors and RSS return to their baseline.
 */
#include "daemon/engine/engine.h"
#include "daemon/model/tokenizer.h"
#include "libclient/pagoda.h"
#include "shm/pagoda_shm.h"
#include "tests/integration/harness.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Under make check-asan the daemon is the ASan build: slower, and freed
 * memory waits in ASan's quarantine, so RSS is reported, not checked. */
#ifdef __SANITIZE_ADDRESS__
#define SLOW 4
#define RSS_CHECKED 0
#else
#define SLOW 1
#define RSS_CHECKED 1
#endif

#define UID_A 4242 /* allowed by --allow-users */
#define UID_B 4243
#define UID_NOBODY 65534 /* refused by the policy */

static struct th_daemon D;

static int need(bool root, const char *name)
{
	/* PAGODA_SOAK_ONLY=name runs one test (while working on it) */
	const char *only = getenv("PAGODA_SOAK_ONLY");
	if (only && *only && strcmp(only, name))
		return -1;
	if (th_need(&D) < 0)
		return -1;
	if (root && geteuid() != 0) {
		fprintf(stderr, "SKIP: needs root to act as other users\n");
		return -1;
	}
	return 0;
}

/* Starts pagodad with extra flags; nofile > 0 caps its descriptors (soft
 * and hard, so that it cannot raise them). */
static void cap_nofile(void *arg)
{
	rlim_t n = *(rlim_t *)arg;
	struct rlimit rl = { n, n };
	setrlimit(RLIMIT_NOFILE, &rl);
}

static void start(const char *const *extra, rlim_t nofile)
{
	th_mkdir(&D, "soak");
	const char *argv[40] = { "--threads", "2", "--allow-users", "4242,4243" };
	int n = 4;
	for (int i = 0; extra && extra[i] && n < 39; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	th_spawn(&D, argv, nofile ? cap_nofile : NULL, &nofile);
	th_wait_up(&D, 20000);
}

/* Drains and stops the daemon: it must exit 0 (under ASan: no leak, no
 * error at exit either). */
static void stop(void)
{
	int rc = D.pid > 0 ? th_stop(&D, SIGTERM, 30000) : 0;
	if (rc != 0) {
		th_show_log(&D, 40);
		ck_abort_msg("pagodad did not exit cleanly: status %d", rc);
	}
	th_cleanup(&D);
}

static int log_count(const char *s) { return th_log_count(&D, s); }

/* ---- the daemon seen from /proc ------------------------------------------- */
static int fd_count(void)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/fd", (int)D.pid);
	DIR *d = opendir(p);
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static long rss_kb(void)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/%d/status", (int)D.pid);
	FILE *f = fopen(p, "r");
	long kb = -1;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kb;
}

static double cpu_s(void)
{
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)D.pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *q = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- clients --------------------------------------------------------------- */
/* A connection that never says hello. */
static int raw_connect(void)
{
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, D.sock, strlen(D.sock) + 1);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof sa) == 0)
		return s;
	if (s >= 0)
		close(s);
	return -1;
}

/* true when the daemon closed fd within ms */
static bool closed_by_daemon(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN | POLLRDHUP, 0 };
	return poll(&p, 1, ms) > 0 && (p.revents & (POLLHUP | POLLRDHUP));
}

static void become(uid_t uid)
{
	if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
		_exit(100);
}

static int wait_child(pid_t k)
{
	int st;
	if (waitpid(k, &st, 0) != k)
		return -1000;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

struct out {
	char text[8192];
	size_t len;
	int32_t ids[1024];
	int n, error;
};

static const char *prompt = "Tom had a big red ball";
#define N_GEN 40

static bool ref_done_flag;
static void ref_tok(struct engine_req *r, int32_t tok, const char *text, size_t len)
{
	struct out *o = r->user;
	if (o->n < 1024)
		o->ids[o->n++] = tok;
	if (o->len + len <= sizeof o->text) {
		memcpy(o->text + o->len, text, len);
		o->len += len;
	}
}
static void ref_done(struct engine_req *r, enum finish_reason why, int err, const char *msg)
{
	ref_done_flag = true;
}

/* The solo run: the same engine in-process, greedy. */
static void reference(struct out *o)
{
	struct engine_opts eo = { .model_path = D.model, .threads = 2 };
	struct engine *e;
	char err[256];
	ck_assert_msg(engine_create(&eo, &e, err, sizeof err) == 0, "%s", err);
	const struct tokenizer *tok = engine_tokenizer(e);
	int32_t ids[256];
	int k = tok_encode(tok, prompt, strlen(prompt), tok_add_bos(tok), true, ids, 256);
	ck_assert_int_gt(k, 0);
	memset(o, 0, sizeof *o);
	struct engine_req r = { .id = 1, .prompt = ids, .n_prompt = k, .max_tokens = N_GEN,
				.on_token = ref_tok, .on_done = ref_done, .user = o };
	sampling_defaults(&r.sampling);
	r.sampling.temp = 0;
	ref_done_flag = false;
	ck_assert_int_eq(engine_submit(e, &r), 0);
	while (!ref_done_flag)
		engine_step(e);
	engine_destroy(e);
}

/* Runs one greedy request on pg; 0, or a negative code. */
static int run_one(pagoda_t *pg, struct out *o, int timeout_ms)
{
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = N_GEN;
	uint64_t id;
	int rc = pagoda_submit_text(pg, prompt, strlen(prompt), &p, &id);
	if (rc < 0)
		return rc;
	memset(o, 0, sizeof *o);
	for (;;) {
		struct pagoda_event ev;
		if ((rc = pagoda_next(pg, &ev, timeout_ms)) < 0)
			return rc;
		if (ev.req_id != id)
			return -1000;
		if (ev.type == PAGODA_EV_TOKEN) {
			if (ev.token >= 0 && o->n < 1024)
				o->ids[o->n++] = ev.token;
			if (o->len + ev.len <= sizeof o->text) {
				memcpy(o->text + o->len, ev.text, ev.len);
				o->len += ev.len;
			}
		} else if (ev.type == PAGODA_EV_DONE) {
			return 0;
		} else if (ev.type == PAGODA_EV_ERROR) {
			return ev.error;
		}
	}
}

static bool same(const struct out *a, const struct out *b)
{
	return a->n == b->n && !memcmp(a->ids, b->ids, sizeof a->ids[0] * (size_t)a->n) && a->len == b->len &&
	       !memcmp(a->text, b->text, a->len);
}

/* A well-behaved client (a child) that runs requests until SIGTERM and
 * checks each against the solo run: exit 0 when all matched within
 * max_ms each. */
static pid_t good_client(const struct out *ref, int max_ms)
{
	pid_t k = fork();
	if (k)
		return k;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	pagoda_t *pg;
	if (pagoda_connect(D.sock, &pg) < 0)
		_exit(20);
	static struct out got;
	uint64_t worst = 0;
	for (int round = 0;; round++) {
		uint64_t t0 = th_now_ms();
		int rc = run_one(pg, &got, 30000);
		uint64_t dt = th_now_ms() - t0;
		worst = dt > worst ? dt : worst;
		if (rc < 0 || !same(&got, ref)) {
			fprintf(stderr, "good client: round %d: %s\n", round, rc < 0 ? pagoda_strerror(rc) : "output differs");
			_exit(21);
		}
		sigset_t pend;
		sigpending(&pend);
		if (sigismember(&pend, SIGTERM) && round > 0) {
			fprintf(stderr, "good client: %d requests, slowest %llu ms\n", round + 1, (unsigned long long)worst);
			_exit(worst > (uint64_t)max_ms ? 22 : 0);
		}
	}
}

static void good_client_ok(pid_t k)
{
	kill(k, SIGTERM);
	int rc = wait_child(k);
	ck_assert_msg(rc == 0, "a well-behaved client failed (%d: 21 wrong output, 22 too slow)", rc);
}

/* ---- one finding at a time ------------------------------------------------ */
START_TEST(idle_without_hello)
{
	if (need(false, "idle_without_hello") < 0)
		return;
	const char *a[] = { "--hello-timeout-ms", "1000", NULL };
	start(a, 0);
	th_msleep(300); /* the probe connection of start() is gone */
	int base = fd_count();
	int fds[50];
	for (int i = 0; i < 50; i++)
		ck_assert_int_ge(fds[i] = raw_connect(), 0);
	uint64_t end = th_now_ms() + 3000;
	while (fd_count() < base + 50 && th_now_ms() < end)
		th_msleep(20);
	ck_assert_int_ge(fd_count(), base + 50);
	for (int i = 0; i < 50; i++)
		ck_assert_msg(closed_by_daemon(fds[i], 3000), "connection %d without a hello still open", i);
	for (int i = 0; i < 50; i++)
		close(fds[i]);
	ck_assert(log_count("no hello in time") > 0);
	th_msleep(100);
	ck_assert_int_le(fd_count(), base);
	stop();
}
END_TEST

START_TEST(refused_at_accept)
{
	if (need(true, "refused_at_accept") < 0)
		return;
	start(NULL, 0);
	pid_t k = fork();
	if (k == 0) {
		become(UID_NOBODY);
		/* no hello sent: the refusal comes anyway, and the socket closes */
		int s = raw_connect();
		struct pollfd p = { s, POLLIN, 0 };
		if (s < 0 || poll(&p, 1, 2000) != 1)
			_exit(10);
		struct pg_welcome w;
		if (recv(s, &w, sizeof w, 0) != (ssize_t)sizeof w || w.status != PG_E_PERM)
			_exit(11);
		if (!closed_by_daemon(s, 2000))
			_exit(12);
		/* the library reads the refusal whatever the timing */
		for (int i = 0; i < 300; i++) {
			pagoda_t *pg;
			int rc = pagoda_connect(D.sock, &pg);
			if (rc != PAGODA_E_PERM)
				_exit(30 + (rc < 0 ? -rc : 0));
		}
		_exit(0);
	}
	ck_assert_int_eq(wait_child(k), 0);
	/* 301 refusals, a handful of lines */
	int lines = log_count("not allowed by policy");
	ck_assert_msg(lines >= 1 && lines <= 12, "%d log lines for 301 refusals", lines);
	stop();
}
END_TEST

START_TEST(descriptors_exhausted)
{
	if (need(false, "descriptors_exhausted") < 0)
		return;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < 2048) {
		fprintf(stderr, "SKIP: descriptors_exhausted needs 2048 descriptors here\n");
		return;
	}
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	static struct out ref, got;
	reference(&ref);
	const char *a[] = { "--max-clients", "5000", "--max-clients-per-uid", "5000", "--hello-timeout-ms", "4000", NULL };
	start(a, 1024);
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	enum { N = 1100 };
	static int fds[N];
	int n = 0;
	for (; n < N; n++)
		if ((fds[n] = raw_connect()) < 0)
			break;
	ck_assert_int_ge(n, 1024); /* the backlog takes the rest */
	th_msleep(500);
	double c0 = cpu_s();
	th_msleep(1500);
	double used = cpu_s() - c0;
	ck_assert_msg(used < 0.3 * SLOW, "the daemon used %.2f s of CPU in 1.5 s while out of descriptors", used);
	int lines = log_count("accept:");
	ck_assert_msg(lines >= 1 && lines <= 2, "%d accept log lines", lines);
	/* the connected client is served meanwhile */
	ck_assert_int_eq(run_one(pg, &got, 10000), 0);
	ck_assert(same(&got, &ref));
	for (int i = 0; i < n; i++)
		close(fds[i]);
	/* and a new one gets in again */
	uint64_t end = th_now_ms() + 10000;
	pagoda_t *late = NULL;
	while (pagoda_connect(D.sock, &late) != 0) {
		ck_assert_msg(th_now_ms() < end, "no new connection after the idle ones left");
		th_msleep(50);
	}
	ck_assert_int_eq(run_one(late, &got, 10000), 0);
	ck_assert(same(&got, &ref));
	pagoda_close(late);
	pagoda_close(pg);
	stop();
}
END_TEST

static char *big_text(size_t n)
{
	char *t = malloc(n);
	const char *w = "Once upon a time there was a little cat named Tom. ";
	for (size_t i = 0; i < n; i++)
		t[i] = w[i % strlen(w)];
	return t;
}

START_TEST(huge_prompts_do_not_stall)
{
	if (need(false, "huge_prompts_do_not_stall") < 0)
		return;
	const char *a[] = { "--arena-size", "16M", NULL };
	start(a, 0);
	pagoda_t *atk, *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &atk), 0);
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	size_t len = 1 << 20;
	char *t = big_text(len);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 8;
	uint64_t ids[12];
	for (int i = 0; i < 12; i++)
		ck_assert_int_eq(pagoda_submit_text(atk, t, len, &p, &ids[i]), 0);
	uint64_t t0 = th_now_ms(), nop;
	ck_assert_int_eq(pagoda_nop(pg, &nop), 0);
	struct pagoda_event ev;
	ck_assert_int_eq(pagoda_next(pg, &ev, 30000), 0);
	uint64_t dt = th_now_ms() - t0;
	ck_assert_int_eq(ev.type, PAGODA_EV_NOP);
	ck_assert_msg(dt < 300 * SLOW, "a NOP took %llu ms behind 12 prompts of 1 MiB", (unsigned long long)dt);
	for (int i = 0; i < 12; i++) {
		ck_assert_int_eq(pagoda_next(atk, &ev, 30000), 0);
		ck_assert_int_eq(ev.type, PAGODA_EV_ERROR);
		ck_assert_int_eq(ev.error, PAGODA_E_CONTEXT);
	}
	free(t);
	pagoda_close(atk);
	pagoda_close(pg);
	stop();
}
END_TEST

/* A half-arena prompt, then half plus a page on the idle connection. */
START_TEST(arena_rewinds)
{
	if (need(false, "arena_rewinds") < 0)
		return;
	start(NULL, 0);
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	size_t A = 1 << 20; /* the default arena */
	char *t = big_text(A);
	struct pagoda_params p;
	pagoda_params_init(&p);
	uint64_t id;
	struct pagoda_event ev;
	size_t sizes[] = { A / 2, A / 2 + 4096, A, A / 2, A };
	for (int i = 0; i < 5; i++) {
		ck_assert_msg(pagoda_submit_text(pg, t, sizes[i], &p, &id) == 0, "prompt %d of %zu bytes", i, sizes[i]);
		ck_assert_int_eq(pagoda_next(pg, &ev, 30000), 0);
		ck_assert_int_eq(ev.type, PAGODA_EV_ERROR); /* too long for the context, and said so */
	}
	free(t);
	pagoda_close(pg);
	stop();
}
END_TEST

/* uid A: conns connections, each with 64 long requests, none read. */
static pid_t never_reader(uid_t uid, int conns)
{
	pid_t k = fork();
	if (k)
		return k;
	become(uid);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 400;
	for (int c = 0; c < conns; c++) {
		pagoda_t *pg;
		if (pagoda_connect(D.sock, &pg) < 0)
			_exit(40);
		for (int i = 0; i < 64; i++)
			if (pagoda_submit_text(pg, prompt, strlen(prompt), &p, NULL) < 0)
				break;
	}
	pause();
	_exit(0);
}

START_TEST(never_read_and_many_connections)
{
	if (need(true, "never_read_and_many_connections") < 0)
		return;
	const char *a[] = { "--queued-budget", "2M", "--max-clients-per-uid", "16", NULL };
	start(a, 0);
	th_msleep(300);
	long rss0 = rss_kb();
	int fd0 = fd_count();
	pid_t k = never_reader(UID_A, 4); /* 4 x 64 requests: all admitted */
	uint64_t end = th_now_ms() + 60000;
	while (log_count("does not read its completions") < 4 && th_now_ms() < end)
		th_msleep(100);
	ck_assert_msg(log_count("does not read its completions") >= 4, "slow readers not cut off");
	long rss1 = rss_kb();
	kill(k, SIGKILL);
	wait_child(k);

	/* one uid, more connections than its share */
	pid_t m = fork();
	if (m == 0) {
		become(UID_B);
		pagoda_t *pg[20];
		for (int i = 0; i < 20; i++) {
			int rc = pagoda_connect(D.sock, &pg[i]);
			if ((i < 16) != (rc == 0))
				_exit(50 + i);
			if (i >= 16 && rc != PAGODA_E_LIMIT)
				_exit(49);
		}
		_exit(0);
	}
	ck_assert_int_eq(wait_child(m), 0);
	th_msleep(1500);
	long rss2 = rss_kb();
	fprintf(stderr, "never_read: RSS %ld kB before, %ld kB with the slow readers, %ld kB after; fds %d then %d\n",
		rss0, rss1, rss2, fd0, fd_count());
	if (RSS_CHECKED) {
		ck_assert_int_le(rss1 - rss0, 48 * 1024);
		ck_assert_int_le(rss2 - rss0, 8 * 1024);
	}
	ck_assert_int_le(fd_count(), fd0);
	stop();
}
END_TEST

/* ---- everything at once ---------------------------------------------------- */
static pid_t attacker(int kind, uid_t uid)
{
	pid_t k = fork();
	if (k)
		return k;
	if (uid)
		become(uid);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	char *t = big_text(1 << 20);
	for (int round = 0;; round++) {
		sigset_t pend;
		sigpending(&pend);
		if (sigismember(&pend, SIGTERM))
			_exit(0);
		switch (kind) {
		case 0: { /* idle connections, no hello, 300 at a time */
			static int fds[300];
			for (int i = 0; i < 300; i++)
				fds[i] = raw_connect();
			th_msleep(1500);
			for (int i = 0; i < 300; i++)
				if (fds[i] >= 0)
					close(fds[i]);
			break;
		}
		case 1: { /* a refused user knocking */
			pagoda_t *pg;
			for (int i = 0; i < 50; i++)
				if (pagoda_connect(D.sock, &pg) == 0)
					_exit(60);
			th_msleep(50);
			break;
		}
		case 2: { /* huge text prompts */
			pagoda_t *pg;
			if (pagoda_connect(D.sock, &pg) == 0) {
				struct pagoda_params p;
				pagoda_params_init(&p);
				for (int i = 0; i < 4; i++)
					pagoda_submit_text(pg, t, (1 << 20) - 8, &p, NULL);
				th_msleep(200);
				pagoda_close(pg);
			}
			break;
		}
		case 3: { /* never reads, many connections of one uid */
			static pagoda_t *pg[24];
			struct pagoda_params p;
			pagoda_params_init(&p);
			p.max_tokens = 400;
			for (int c = 0; c < 24; c++)
				if (pagoda_connect(D.sock, &pg[c]) == 0)
					for (int i = 0; i < 64; i++)
						if (pagoda_submit_text(pg[c], prompt, strlen(prompt), &p, NULL) < 0)
							break;
			th_msleep(3000);
			for (int c = 0; c < 24; c++)
				if (pg[c])
					pagoda_close(pg[c]);
			memset(pg, 0, sizeof pg);
			break;
		}
		}
	}
}

START_TEST(soak)
{
	if (need(true, "soak") < 0)
		return;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	static struct out ref;
	reference(&ref);
	const char *a[] = { "--queued-budget", "8M", "--hello-timeout-ms", "1000", "--max-clients-per-uid", "16", NULL };
	start(a, 1024);
	pid_t good[2];
	for (int i = 0; i < 2; i++)
		good[i] = good_client(&ref, 8000 * SLOW);
	th_msleep(2000); /* the baseline: serving, before the attacks */
	long rss0 = rss_kb();
	int fd0 = fd_count() - 4; /* less the good clients' */
	static const int kinds[5] = { 0, 1, 2, 3, 3 };
	static const uid_t uids[5] = { 0, UID_NOBODY, UID_A, UID_B, UID_B };
	pid_t atk[5];
	for (int i = 0; i < 5; i++)
		atk[i] = attacker(kinds[i], uids[i]);
	int secs = getenv("PAGODA_SOAK_S") ? atoi(getenv("PAGODA_SOAK_S")) : 40;
	long rss_max = 0;
	for (int s = 0; s < secs; s++) {
		th_msleep(1000);
		long r = rss_kb();
		rss_max = r > rss_max ? r : rss_max;
		ck_assert_msg(kill(D.pid, 0) == 0, "pagodad died");
	}
	for (int i = 0; i < 5; i++)
		kill(atk[i], SIGTERM);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(wait_child(atk[i]) == 0, "attacker %d: unexpected result", i);
	for (int i = 0; i < 2; i++)
		good_client_ok(good[i]);
	th_msleep(2000); /* hello deadlines, frees, the trim */
	long rss1 = rss_kb();
	int fd1 = fd_count();
	fprintf(stderr, "soak: %d s; RSS %ld kB at start, %ld kB at most, %ld kB after; fds %d then %d\n", secs, rss0,
		rss_max, rss1, fd0, fd1);
	ck_assert_int_le(fd1, fd0);
	if (RSS_CHECKED) {
		ck_assert_int_le(rss1 - rss0, 8 * 1024);
		ck_assert_int_le(rss_max - rss0, 96 * 1024);
	}
	/* the journal saw a bounded number of lines */
	FILE *f = fopen(D.log, "r");
	int lines = 0;
	char line[2048];
	while (f && fgets(line, sizeof line, f))
		lines++;
	if (f)
		fclose(f);
	ck_assert_msg(lines < 40 * secs, "%d log lines in %d s", lines, secs);
	stop();
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("soak");
	TCase *t = tcase_create("attacks");
	tcase_set_timeout(t, 300);
	tcase_add_test(t, idle_without_hello);
	tcase_add_test(t, refused_at_accept);
	tcase_add_test(t, descriptors_exhausted);
	tcase_add_test(t, huge_prompts_do_not_stall);
	tcase_add_test(t, arena_rewinds);
	tcase_add_test(t, never_read_and_many_connections);
	tcase_add_test(t, soak);
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
