/* tests/integration/test_systemd.c — pagodad under a pretend systemd: the test owns
 * the NOTIFY_SOCKET datagram socket and sets WATCHDOG_USEC / WATCHDOG_PID,
 * as the service manager would, then checks what the daemon tells it:
 * STATUS lines before READY=1, READY=1 only once the socket accepts clients,
 * WATCHDOG=1 more often than half of WATCHDOG_USEC, RELOADING=1 with
 * MONOTONIC_USEC on SIGHUP then READY=1, and STOPPING=1 on SIGTERM while a
 * request runs, which still completes before a clean exit.
 *
 * Skipped (passing, saying so) without the daemon binary or the model. Under
 * `make check-asan` the daemon is the sanitizer build.
 */
#include "libclient/pagoda.h"
#include "tests/integration/harness.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct th_daemon D;
static char notify_path[300], conf_path[300];
static int nfd = -1;

struct nmsg {
	uint64_t t_us; /* CLOCK_MONOTONIC when received */
	char text[512];
};
#define MAXMSG 8192
static struct nmsg msgs[MAXMSG];
static int n_msgs;

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int need(void) { return th_need(&D); }

/* True if one of msg's lines is exactly line (or starts with it, for "KEY="). */
static bool has_line(const char *msg, const char *line)
{
	size_t l = strlen(line);
	bool prefix = line[l - 1] == '=';
	for (const char *p = msg; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (prefix ? n >= l && !strncmp(p, line, l) : n == l && !strncmp(p, line, l))
			return true;
		p = nl ? nl + 1 : NULL;
	}
	return false;
}

static const char *line_value(const char *msg, const char *key)
{
	static char v[512];
	size_t l = strlen(key);
	for (const char *p = msg; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (n >= l && !strncmp(p, key, l)) {
			snprintf(v, sizeof v, "%.*s", (int)(n - l), p + l);
			return v;
		}
		p = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/* Receives datagrams for up to timeout_ms; returns the index of the first
 * new one with the line `want` (NULL: any), or -1. */
static int wait_msg(const char *want, int timeout_ms)
{
	uint64_t end = now_us() + (uint64_t)timeout_ms * 1000;
	for (;;) {
		uint64_t now = now_us();
		if (now >= end)
			return -1;
		struct pollfd p = { .fd = nfd, .events = POLLIN };
		int r = poll(&p, 1, (int)((end - now) / 1000) + 1);
		if (r <= 0)
			continue;
		char buf[512];
		ssize_t n = recv(nfd, buf, sizeof buf - 1, MSG_DONTWAIT);
		if (n <= 0)
			continue;
		buf[n] = 0;
		ck_assert_int_lt(n_msgs, MAXMSG);
		struct nmsg *m = &msgs[n_msgs];
		m->t_us = now_us();
		memcpy(m->text, buf, (size_t)n + 1);
		int idx = n_msgs++;
		if (!want || has_line(buf, want))
			return idx;
	}
}

static void setup_dir(void)
{
	th_mkdir(&D, "sd");
	snprintf(notify_path, sizeof notify_path, "%s/notify", D.dir);
	snprintf(conf_path, sizeof conf_path, "%s/pagodad.conf", D.dir);
	nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(nfd, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	ck_assert_uint_lt(strlen(notify_path), sizeof sa.sun_path);
	memcpy(sa.sun_path, notify_path, strlen(notify_path) + 1);
	ck_assert_int_eq(bind(nfd, (struct sockaddr *)&sa, sizeof sa), 0);
	int big = 1 << 20;
	setsockopt(nfd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	n_msgs = 0;
	FILE *f = fopen(conf_path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "# test config\nmax-inflight = 32\n");
	fclose(f);
}

struct watchdog {
	const char *usec;
	pid_t pid; /* 0: the daemon's own */
};

static void notify_env(void *arg)
{
	const struct watchdog *w = arg;
	char pidbuf[32];
	snprintf(pidbuf, sizeof pidbuf, "%d", w->pid ? (int)w->pid : (int)getpid());
	setenv("NOTIFY_SOCKET", notify_path, 1);
	if (w->usec) {
		setenv("WATCHDOG_USEC", w->usec, 1);
		setenv("WATCHDOG_PID", pidbuf, 1);
	}
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
}

/* watchdog_pid: 0 = the daemon's own pid, else that value. */
static void start_daemon(const char *watchdog_usec, pid_t watchdog_pid)
{
	struct watchdog w = { watchdog_usec, watchdog_pid };
	const char *argv[] = { "--threads", "2", "--config", conf_path, "--bus", "none", "--log-level", "debug", NULL };
	th_spawn(&D, argv, notify_env, &w);
}

static int wait_exit(int timeout_ms) { return th_wait_exit(&D.pid, timeout_ms); }

static void show_log(void)
{
	th_show_log(&D, 40);
	for (int i = 0; i < n_msgs; i++)
		fprintf(stderr, "notify +%llu ms: %s\n", (unsigned long long)(msgs[i].t_us - msgs[0].t_us) / 1000,
			msgs[i].text);
}

static void cleanup(void)
{
	if (nfd >= 0)
		close(nfd);
	nfd = -1;
	th_cleanup(&D);
}

/* Largest gap between WATCHDOG=1 messages in [from, to) of msgs, and how
 * many there were. */
static uint64_t watchdog_gap(int from, int to, int *count)
{
	uint64_t last = 0, gap = 0;
	*count = 0;
	for (int i = from; i < to; i++) {
		if (!has_line(msgs[i].text, "WATCHDOG=1"))
			continue;
		if (last && msgs[i].t_us - last > gap)
			gap = msgs[i].t_us - last;
		last = msgs[i].t_us;
		(*count)++;
	}
	return gap;
}

START_TEST(lifecycle)
{
	if (need() < 0)
		return;
	setup_dir();
	const uint64_t wd = 2000000; /* WATCHDOG_USEC: 2 s */
	start_daemon("2000000", 0);

	/* Loading: STATUS lines, then READY=1 — and by then the socket serves. */
	int ready = wait_msg("READY=1", 60000);
	if (ready < 0)
		show_log();
	ck_assert_msg(ready >= 0, "no READY=1 within 60 s");
	pagoda_t *pg = NULL;
	int rc = pagoda_connect(D.sock, &pg);
	ck_assert_msg(rc == 0, "READY=1 came but the socket does not serve: %s", pagoda_strerror(rc));
	ck_assert_int_gt(pagoda_n_ctx(pg), 0);
	int n_status = 0;
	bool progress = false;
	for (int i = 0; i < ready; i++) {
		ck_assert_msg(!has_line(msgs[i].text, "READY=1"), "READY=1 twice");
		if (has_line(msgs[i].text, "STATUS=")) {
			n_status++;
			const char *v = line_value(msgs[i].text, "STATUS=");
			ck_assert_msg(strstr(v, "loading"), "STATUS before READY: '%s'", v);
			progress |= strchr(v, '%') != NULL;
		}
	}
	ck_assert_msg(n_status >= 2, "only %d STATUS lines before READY=1", n_status);
	ck_assert_msg(progress, "no loading progress (a %%) in the STATUS lines");
	const char *st = line_value(msgs[ready].text, "STATUS=");
	ck_assert_msg(st && strstr(st, "serving"), "READY=1 without a serving STATUS: %s", msgs[ready].text);

	/* Idle: the engine thread pings below half of WATCHDOG_USEC. */
	int from = n_msgs;
	uint64_t t0 = now_us();
	while (now_us() - t0 < 3000000)
		wait_msg(NULL, 100);
	int pings;
	uint64_t gap = watchdog_gap(from, n_msgs, &pings);
	ck_assert_msg(pings >= 3, "%d WATCHDOG=1 in 3 s with WATCHDOG_USEC=2 s", pings);
	ck_assert_msg(gap < wd / 2, "WATCHDOG=1 gap %llu us >= half of %llu", (unsigned long long)gap,
		      (unsigned long long)wd);

	/* SIGHUP: RELOADING=1 with MONOTONIC_USEC of now, then READY=1. */
	FILE *f = fopen(conf_path, "w");
	fprintf(f, "max-inflight = 16\n");
	fclose(f);
	uint64_t before = now_us();
	kill(D.pid, SIGHUP);
	int rl = wait_msg("RELOADING=1", 10000);
	ck_assert_msg(rl >= 0, "no RELOADING=1 after SIGHUP");
	const char *mono = line_value(msgs[rl].text, "MONOTONIC_USEC=");
	ck_assert_msg(mono, "RELOADING=1 without MONOTONIC_USEC: %s", msgs[rl].text);
	uint64_t mu = strtoull(mono, NULL, 10);
	ck_assert_msg(mu >= before && mu <= now_us(), "MONOTONIC_USEC=%llu not between %llu and now",
		      (unsigned long long)mu, (unsigned long long)before);
	ck_assert_msg(wait_msg("READY=1", 10000) > rl, "no READY=1 after the reload");

	/* While serving, the STATUS line is refreshed with the load (running,
	 * waiting, tokens/s), and the watchdog keeps its pace while the engine
	 * works. The request may finish before a refresh (stories260K decodes
	 * thousands of tokens a second), so any refresh after it started will
	 * do. */
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 2000; /* about 3 s on stories260K: attention grows with the context */
	uint64_t id;
	ck_assert_int_eq(pagoda_submit_text(pg, "Once upon a time", 16, &p, &id), 0);
	struct pagoda_event ev;
	int ntok = 0;
	while (ntok < 3) {
		ck_assert_int_eq(pagoda_next(pg, &ev, 30000), 0);
		ck_assert_int_eq(ev.type, PAGODA_EV_TOKEN);
		ntok++;
	}
	from = n_msgs;
	int running = -1;
	for (uint64_t end = now_us() + 6000000; running < 0 && now_us() < end;) {
		int i = wait_msg("STATUS=", 200);
		if (i >= 0 && strstr(line_value(msgs[i].text, "STATUS="), "serving: ") &&
		    strstr(msgs[i].text, " running, "))
			running = i;
	}
	ck_assert_msg(running >= 0, "no STATUS refresh while serving");
	ck_assert_msg(strstr(msgs[running].text, "tokens/s"), "no rate in %s", msgs[running].text);
	gap = watchdog_gap(from, n_msgs, &pings);
	ck_assert_msg(gap < wd / 2, "WATCHDOG=1 gap %llu us while busy", (unsigned long long)gap);

	/* SIGTERM mid-request: STOPPING=1, the request completes, exit 0. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t t_term_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	kill(D.pid, SIGTERM);
	int stop = wait_msg("STOPPING=1", 10000);
	ck_assert_msg(stop >= 0, "no STOPPING=1 after SIGTERM");
	for (;;) {
		rc = pagoda_next(pg, &ev, 120000);
		if (rc != 0)
			show_log();
		ck_assert_msg(rc == 0, "stream broke after SIGTERM: %s", pagoda_strerror(rc));
		if (ev.type == PAGODA_EV_TOKEN) {
			ntok++;
			continue;
		}
		break;
	}
	ck_assert_msg(ev.type == PAGODA_EV_DONE, "the request in flight ended with %d (%s)", ev.type,
		      ev.type == PAGODA_EV_ERROR ? ev.text : "");
	ck_assert_int_ne(ev.finish, PAGODA_FINISH_CANCEL);
	ck_assert_msg(ev.timings.t_done_ns > t_term_ns, "the request ended before SIGTERM: not a drain test");
	ck_assert_int_eq(ev.timings.n_gen, 2000);
	pagoda_close(pg);
	int code = wait_exit(60000);
	if (code != 0)
		show_log();
	ck_assert_msg(code == 0, "pagodad exit status %d after SIGTERM", code);
	/* a new client is refused from STOPPING on; nothing said after READY but
	 * STATUS, WATCHDOG and STOPPING */
	for (int i = stop + 1; i < n_msgs; i++)
		ck_assert_msg(!has_line(msgs[i].text, "READY=1"), "READY=1 after STOPPING=1");
	cleanup();
}
END_TEST

/* WATCHDOG_PID names another process: the watchdog is not ours, no pings. */
START_TEST(watchdog_other_pid)
{
	if (need() < 0)
		return;
	setup_dir();
	start_daemon("400000", 1);
	ck_assert_msg(wait_msg("READY=1", 60000) >= 0, "no READY=1");
	uint64_t t0 = now_us();
	while (now_us() - t0 < 1200000)
		wait_msg(NULL, 100);
	int pings;
	watchdog_gap(0, n_msgs, &pings);
	ck_assert_int_eq(pings, 0);
	kill(D.pid, SIGTERM);
	ck_assert_int_eq(wait_exit(30000), 0);
	cleanup();
}
END_TEST

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

struct plain {
	int *pfd;
	bool hardened;
};

/* In the child: no systemd around it; with hardened, the unit's
 * restrictions; tells the parent through the pipe whether they took. */
static void plain_env(void *arg)
{
	const struct plain *pl = arg;
	close(pl->pfd[0]);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("LISTEN_FDS");
	char ok = 1;
	if (pl->hardened && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			     prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) < 0))
		ok = 0;
	ssize_t w = write(pl->pfd[1], &ok, 1);
	(void)w;
	if (!ok)
		_exit(77);
}

/* Serves one request from a daemon started without systemd; with hardened,
 * under no-new-privileges and memory-deny-write-execute (the kernel's
 * PR_SET_MDWE, what MemoryDenyWriteExecute= enforces), as the unit runs it. */
static void serve_plain(bool hardened)
{
	setup_dir();
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	struct plain pl = { pfd, hardened };
	const char *argv[] = { "--threads", "2", "--bus", "none", NULL };
	th_spawn(&D, argv, plain_env, &pl);
	close(pfd[1]);
	char ok = 0;
	ck_assert_int_eq(read(pfd[0], &ok, 1), 1);
	close(pfd[0]);
	if (!ok) {
		fprintf(stderr, "SKIP: this kernel has no PR_SET_MDWE\n");
		wait_exit(10000);
		cleanup();
		return;
	}
	pagoda_t *pg = NULL;
	for (uint64_t end = now_us() + 60000000; pagoda_connect(D.sock, &pg) != 0;) {
		int st;
		if (waitpid(D.pid, &st, WNOHANG) == D.pid) {
			D.pid = -1;
			show_log();
			ck_abort_msg("pagodad exited at start");
		}
		ck_assert_msg(now_us() < end, "pagodad did not come up");
		struct timespec ts = { 0, 20000000 };
		nanosleep(&ts, NULL);
	}
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 8;
	ck_assert_int_eq(pagoda_submit_text(pg, "Hello", 5, &p, NULL), 0);
	struct pagoda_event ev;
	do
		ck_assert_int_eq(pagoda_next(pg, &ev, 30000), 0);
	while (ev.type == PAGODA_EV_TOKEN);
	ck_assert_int_eq(ev.type, PAGODA_EV_DONE);
	ck_assert_int_eq(ev.timings.n_gen, 8);
	pagoda_close(pg);
	kill(D.pid, SIGTERM);
	ck_assert_int_eq(wait_exit(30000), 0);
	ck_assert_int_eq(n_msgs, 0);
	cleanup();
}

/* No NOTIFY_SOCKET: the daemon runs as before (nothing to tell). */
START_TEST(no_systemd)
{
	if (need() < 0)
		return;
	serve_plain(false);
}
END_TEST

START_TEST(hardened)
{
	if (need() < 0)
		return;
	serve_plain(true);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("systemd");
	TCase *t = tcase_create("notify");
	tcase_set_timeout(t, 600);
	tcase_add_test(t, lifecycle);
	tcase_add_test(t, watchdog_other_pid);
	tcase_add_test(t, no_systemd);
	tcase_add_test(t, hardened);
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
