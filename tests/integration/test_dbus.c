/* tests/integration/test_dbus.c — pagodad's D-Bus object against a private
 * dbus-daemon started by the test (its own config: a session-type bus that
 * lets every uid connect and call, so that what refuses a caller is the
 * daemon's own check, not the bus policy).
 *
 * Properties are checked against the work the test did through libpagoda;
 * each method is called and its effect observed; a caller outside the policy
 * (uid 65534, in a child) is refused with AccessDenied, and let in once a
 * Reload() puts its group in allow-group.
 *
 * Skipped (passing, saying so) without dbus-daemon, the daemon binary or the
 * model. Under `make check-asan` the daemon is the sanitizer build.
 */
#include "libclient/pagoda.h"
#include "tests/integration/harness.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#define NAME "org.pagoda.Daemon1"
#define PATH "/org/pagoda/Daemon1"
#define IFACE "org.pagoda.Daemon1"

static struct th_daemon D;
static char dbus_bin[1024], conf_path[300], bus_conf[300], bus_addr[400];
static pid_t bpid = -1;

static int need(void)
{
	if (th_need(&D) < 0)
		return -1;
	const char *cands[] = { "/usr/bin/dbus-daemon", "/bin/dbus-daemon", "/usr/local/bin/dbus-daemon" };
	for (size_t i = 0; i < 3; i++)
		if (access(cands[i], X_OK) == 0) {
			snprintf(dbus_bin, sizeof dbus_bin, "%s", cands[i]);
			return 0;
		}
	fprintf(stderr, "SKIP: dbus-daemon not installed\n");
	return -1;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static int open_bus(sd_bus **out)
{
	sd_bus *b = NULL;
	int r = sd_bus_new(&b);
	if (r >= 0)
		r = sd_bus_set_address(b, bus_addr);
	if (r >= 0)
		r = sd_bus_set_bus_client(b, 1);
	if (r >= 0)
		r = sd_bus_start(b);
	if (r < 0) {
		sd_bus_unref(b);
		return r;
	}
	*out = b;
	return 0;
}

static void bus_env(void *arg)
{
	setenv("DBUS_SESSION_BUS_ADDRESS", bus_addr, 1);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
}

static void start_all(void)
{
	th_mkdir(&D, "dbus"); /* uid 65534 reaches the bus socket */
	snprintf(conf_path, sizeof conf_path, "%s/pagodad.conf", D.dir);
	snprintf(bus_conf, sizeof bus_conf, "%s/bus.conf", D.dir);
	snprintf(bus_addr, sizeof bus_addr, "unix:path=%s/bus", D.dir);
	char xml[2048];
	snprintf(xml, sizeof xml,
		 "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
		 " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
		 "<busconfig>\n"
		 "  <type>session</type>\n"
		 "  <listen>unix:path=%s/bus</listen>\n"
		 "  <auth>EXTERNAL</auth>\n"
		 "  <policy context=\"default\">\n"
		 "    <allow user=\"*\"/>\n"
		 "    <allow send_destination=\"*\" eavesdrop=\"true\"/>\n"
		 "    <allow eavesdrop=\"true\"/>\n"
		 "    <allow own=\"*\"/>\n"
		 "  </policy>\n"
		 "</busconfig>\n",
		 D.dir);
	write_file(bus_conf, xml);
	write_file(conf_path, "# test\nallow-group = 4242\n");

	bpid = fork();
	ck_assert_int_ge(bpid, 0);
	if (bpid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		char arg[400];
		snprintf(arg, sizeof arg, "--config-file=%s", bus_conf);
		char blog[320];
		snprintf(blog, sizeof blog, "%s/dbus-daemon.log", D.dir);
		int fd = open(blog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(dbus_bin, dbus_bin, arg, "--nofork", "--nopidfile", (char *)NULL);
		_exit(127);
	}
	sd_bus *b = NULL;
	for (uint64_t end = th_now_ms() + 10000; open_bus(&b) < 0;) {
		ck_assert_msg(th_now_ms() < end, "the private dbus-daemon did not come up");
		th_msleep(20);
	}
	sd_bus_flush_close_unref(b);

	const char *argv[] = { "--threads", "2", "--config", conf_path, "--bus", "session", "--log-level", "debug",
			       NULL };
	th_spawn(&D, argv, bus_env, NULL);
}

static void cleanup(void)
{
	th_cleanup(&D);
	if (bpid > 0) {
		kill(bpid, SIGTERM);
		waitpid(bpid, NULL, 0);
		bpid = -1;
	}
}

static uint64_t prop_t(sd_bus *b, const char *name)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	uint64_t v = 0;
	int r = sd_bus_get_property_trivial(b, NAME, PATH, IFACE, name, &e, 't', &v);
	ck_assert_msg(r >= 0, "Get %s: %s", name, e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	return v;
}

static uint32_t prop_u(sd_bus *b, const char *name)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	uint32_t v = 0;
	int r = sd_bus_get_property_trivial(b, NAME, PATH, IFACE, name, &e, 'u', &v);
	ck_assert_msg(r >= 0, "Get %s: %s", name, e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	return v;
}

static double prop_d(sd_bus *b, const char *name)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	double v = 0;
	int r = sd_bus_get_property_trivial(b, NAME, PATH, IFACE, name, &e, 'd', &v);
	ck_assert_msg(r >= 0, "Get %s: %s", name, e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	return v;
}

static char *prop_s(sd_bus *b, const char *name)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	char *v = NULL;
	int r = sd_bus_get_property_string(b, NAME, PATH, IFACE, name, &e, &v);
	ck_assert_msg(r >= 0, "Get %s: %s", name, e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	return v;
}

static bool state_is(sd_bus *b, const char *want)
{
	char *s = prop_s(b, "State");
	bool eq = !strcmp(s, want);
	free(s);
	return eq;
}

/* Calls a method without arguments: 0, or -1 with the error's name in ename. */
static int call(sd_bus *b, const char *method, char *ename, size_t len, sd_bus_message **reply)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL;
	int r = sd_bus_call_method(b, NAME, PATH, IFACE, method, &e, &m, "");
	if (r < 0 && ename)
		snprintf(ename, len, "%s: %s", e.name ? e.name : "?", e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	if (reply && r >= 0)
		*reply = m;
	else
		sd_bus_message_unref(m);
	return r < 0 ? -1 : 0;
}

/* In a child as uid/gid 65534 with the given supplementary groups: calls
 * method (NULL: reads State). Exit 0 ok, 1 AccessDenied, 2 other error,
 * 3 cannot connect. */
static int as_nobody(const char *method, const gid_t *groups, int ng)
{
	pid_t p = fork();
	ck_assert_int_ge(p, 0);
	if (p == 0) {
		if (setgroups((size_t)ng, groups) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(4);
		sd_bus *b;
		if (open_bus(&b) < 0)
			_exit(3);
		sd_bus_error e = SD_BUS_ERROR_NULL;
		int r;
		if (method) {
			r = sd_bus_call_method(b, NAME, PATH, IFACE, method, &e, NULL, "");
		} else {
			char *s = NULL;
			r = sd_bus_get_property_string(b, NAME, PATH, IFACE, "State", &e, &s);
			free(s);
		}
		if (r >= 0)
			_exit(0);
		if (sd_bus_error_has_name(&e, SD_BUS_ERROR_ACCESS_DENIED))
			_exit(1);
		fprintf(stderr, "as uid 65534: %s: %s\n", method ? method : "Get State", e.message);
		_exit(2);
	}
	int st;
	waitpid(p, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

struct pc_log {
	int n;
	uint64_t t[64];
	bool gen, uptime, cached;
};

static int on_changed(sd_bus_message *m, void *userdata, sd_bus_error *ret)
{
	struct pc_log *l = userdata;
	const char *iface;
	if (sd_bus_message_read(m, "s", &iface) < 0 || strcmp(iface, IFACE))
		return 0;
	if (l->n < 64)
		l->t[l->n++] = th_now_ms();
	if (sd_bus_message_enter_container(m, 'a', "{sv}") < 0)
		return 0;
	while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
		const char *name;
		sd_bus_message_read(m, "s", &name);
		l->gen |= !strcmp(name, "GeneratedTokens");
		l->cached |= !strcmp(name, "KVBlocksCached");
		l->uptime |= !strcmp(name, "UptimeUSec");
		sd_bus_message_skip(m, "v");
		sd_bus_message_exit_container(m);
	}
	return 0;
}

static void pump(sd_bus *b, int ms)
{
	for (uint64_t end = th_now_ms() + (uint64_t)ms; th_now_ms() < end;) {
		while (sd_bus_process(b, NULL) > 0)
			;
		sd_bus_wait(b, 50000);
	}
}

START_TEST(daemon_object)
{
	if (need() < 0)
		return;
	start_all();
	sd_bus *b = NULL;
	ck_assert_int_eq(open_bus(&b), 0);
	/* the name appears while loading or right after */
	for (uint64_t end = th_now_ms() + 60000;;) {
		sd_bus_error e = SD_BUS_ERROR_NULL;
		char *s = NULL;
		int r = sd_bus_get_property_string(b, NAME, PATH, IFACE, "State", &e, &s);
		sd_bus_error_free(&e);
		bool serving = r >= 0 && !strcmp(s, "serving");
		free(s);
		if (serving)
			break;
		if (th_now_ms() > end)
			th_show_log(&D, 40);
		ck_assert_msg(th_now_ms() < end, "org.pagoda.Daemon1 not serving within 60 s");
		th_msleep(50);
	}
	/* the model */
	char *str = prop_s(b, "ModelName");
	ck_assert_msg(str[0], "empty ModelName");
	free(str);
	str = prop_s(b, "Architecture");
	ck_assert_str_eq(str, "llama");
	free(str);
	str = prop_s(b, "WeightType");
	ck_assert_str_eq(str, "F32");
	free(str);
	str = prop_s(b, "Backend");
	ck_assert_msg(!strncmp(str, "cpu (", 5), "Backend %s", str);
	free(str);
	ck_assert_uint_gt(prop_t(b, "ParameterCount"), 100000);
	ck_assert_uint_gt(prop_t(b, "UptimeUSec"), 0);
	ck_assert(prop_d(b, "LoadProgress") == 1.0);
	ck_assert_uint_eq(prop_t(b, "RequestsAccepted"), 0);
	ck_assert_uint_eq(prop_t(b, "OffloadBytesIn"), 0);
	ck_assert_uint_eq(prop_t(b, "OffloadBytesOut"), 0);

	/* PropertiesChanged, watched while the work goes on */
	struct pc_log pcl = { 0 };
	sd_bus_slot *slot = NULL;
	ck_assert_int_ge(sd_bus_match_signal(b, &slot, NAME, PATH, "org.freedesktop.DBus.Properties",
					     "PropertiesChanged", on_changed, &pcl),
			 0);

	/* Work: the same long prompt three times (prefix-cache hits). */
	pagoda_t *pg;
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), 0);
	ck_assert_uint_eq(prop_u(b, "ContextLength"), (uint32_t)pagoda_n_ctx(pg));
	ck_assert_uint_eq(prop_u(b, "Clients"), 1);
	const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside "
			     "in the sunshine with her dog, who was big and brown and liked to run.";
	uint64_t n_prompt = 0, n_gen = 0, n_cached = 0;
	for (int i = 0; i < 3; i++) {
		struct pagoda_params p;
		pagoda_params_init(&p);
		p.max_tokens = 12 + i;
		ck_assert_int_eq(pagoda_submit_text(pg, prompt, strlen(prompt), &p, NULL), 0);
		struct pagoda_event ev;
		do
			ck_assert_int_eq(pagoda_next(pg, &ev, 30000), 0);
		while (ev.type == PAGODA_EV_TOKEN);
		ck_assert_int_eq(ev.type, PAGODA_EV_DONE);
		n_prompt += (uint64_t)ev.timings.n_prompt;
		n_gen += (uint64_t)ev.timings.n_gen;
		n_cached += (uint64_t)ev.timings.n_cached;
	}
	ck_assert_uint_gt(n_cached, 0);
	pump(b, 2600);
	ck_assert_uint_eq(prop_t(b, "RequestsAccepted"), 3);
	ck_assert_uint_eq(prop_t(b, "RequestsFinished"), 3);
	ck_assert_uint_eq(prop_t(b, "RequestsFailed"), 0);
	ck_assert_uint_eq(prop_t(b, "RequestsCancelled"), 0);
	ck_assert_uint_eq(prop_t(b, "PromptTokens"), n_prompt);
	ck_assert_uint_eq(prop_t(b, "GeneratedTokens"), n_gen);
	ck_assert_uint_eq(prop_u(b, "RequestsRunning"), 0);
	ck_assert_uint_eq(prop_u(b, "RequestsWaiting"), 0);
	double hit = prop_d(b, "PrefixCacheHitRate");
	ck_assert_msg(fabs(hit - (double)n_cached / (double)n_prompt) < 1e-9, "hit rate %f, expected %f", hit,
		      (double)n_cached / (double)n_prompt);
	ck_assert_uint_gt(prop_t(b, "KVBlocksTotal"), 0);
	ck_assert_uint_gt(prop_t(b, "KVBlocksCached"), 0);
	ck_assert_uint_le(prop_t(b, "KVBlocksUsed") + prop_t(b, "KVBlocksCached"), prop_t(b, "KVBlocksTotal"));
	ck_assert_uint_eq(prop_t(b, "Preemptions"), 0);
	uint64_t t50 = prop_t(b, "TTFTP50USec"), t99 = prop_t(b, "TTFTP99USec");
	ck_assert_uint_gt(t50, 0);
	ck_assert_uint_ge(t99, t50);
	uint64_t i50 = prop_t(b, "ITLP50USec"), i99 = prop_t(b, "ITLP99USec");
	ck_assert_uint_gt(i50, 0);
	ck_assert_uint_ge(i99, i50);
	ck_assert_msg(pcl.n >= 1 && pcl.gen, "no PropertiesChanged with GeneratedTokens (%d signals)", pcl.n);
	ck_assert_msg(!pcl.uptime, "UptimeUSec announced itself");
	for (int i = 1; i < pcl.n; i++)
		ck_assert_msg(pcl.t[i] - pcl.t[i - 1] >= 700, "PropertiesChanged %llu ms apart",
			      (unsigned long long)(pcl.t[i] - pcl.t[i - 1]));

	/* Stats() */
	sd_bus_message *reply = NULL;
	char ename[512];
	ck_assert_msg(call(b, "Stats", ename, sizeof ename, &reply) == 0, "Stats: %s", ename);
	ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "{sv}"), 0);
	int seen = 0, keys = 0;
	while (sd_bus_message_enter_container(reply, 'e', "sv") > 0) {
		const char *k;
		uint64_t v;
		keys++;
		ck_assert_int_ge(sd_bus_message_read(reply, "s", &k), 0);
		if (!strcmp(k, "RequestsFinished") || !strcmp(k, "GeneratedTokens") || !strcmp(k, "PrefillTokens")) {
			ck_assert_int_ge(sd_bus_message_read(reply, "v", "t", &v), 0);
			if (!strcmp(k, "RequestsFinished"))
				ck_assert_uint_eq(v, 3);
			else if (!strcmp(k, "GeneratedTokens"))
				ck_assert_uint_eq(v, n_gen);
			else
				ck_assert_uint_gt(v, 0);
			seen++;
		} else
			sd_bus_message_skip(reply, "v");
		sd_bus_message_exit_container(reply);
	}
	sd_bus_message_unref(reply);
	ck_assert_int_eq(seen, 3);
	ck_assert_int_ge(keys, 30);

	/* DropPrefixCache(): the cached blocks go */
	ck_assert_msg(call(b, "DropPrefixCache", ename, sizeof ename, NULL) == 0, "DropPrefixCache: %s", ename);
	uint64_t cached = 1;
	for (uint64_t end = th_now_ms() + 5000; (cached = prop_t(b, "KVBlocksCached")) && th_now_ms() < end;)
		th_msleep(20);
	ck_assert_uint_eq(cached, 0);
	pump(b, 1200);
	ck_assert_msg(pcl.cached, "no PropertiesChanged for KVBlocksCached");

	/* Access: anyone reads; uid 65534 may not call, whatever its group,
	 * until Reload() makes its group allow-group. */
	gid_t g4243 = 4243;
	ck_assert_int_eq(as_nobody(NULL, NULL, 0), 0);
	ck_assert_int_eq(as_nobody("Drain", NULL, 0), 1);
	ck_assert_int_eq(as_nobody("Reload", NULL, 0), 1);
	ck_assert_int_eq(as_nobody("DropPrefixCache", NULL, 0), 1);
	ck_assert_int_eq(as_nobody("Stats", NULL, 0), 1);
	ck_assert_int_eq(as_nobody("Stats", &g4243, 1), 1);
	ck_assert_msg(state_is(b, "serving"), "a refused Drain() drained");
	write_file(conf_path, "allow-group = 4243\n");
	ck_assert_msg(call(b, "Reload", ename, sizeof ename, NULL) == 0, "Reload: %s", ename);
	ck_assert_int_eq(as_nobody("Stats", &g4243, 1), 0);
	ck_assert_int_eq(as_nobody("Stats", NULL, 0), 1);
	/* a broken config: Reload() fails, the old settings stay */
	write_file(conf_path, "no-such-key = 1\n");
	ck_assert_int_eq(call(b, "Reload", ename, sizeof ename, NULL), -1);
	ck_assert_msg(strstr(ename, "org.freedesktop.DBus.Error.Failed") && strstr(ename, "no-such-key"), "%s",
		      ename);
	ck_assert_int_eq(as_nobody("Stats", &g4243, 1), 0);
	ck_assert_msg(state_is(b, "serving"), "State after reloads");

	/* Drain(): new requests refused, the daemon stays up */
	ck_assert_msg(call(b, "Drain", ename, sizeof ename, NULL) == 0, "Drain: %s", ename);
	ck_assert_msg(state_is(b, "draining"), "State after Drain()");
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = 4;
	ck_assert_int_eq(pagoda_submit_text(pg, "Hello", 5, &p, NULL), 0);
	struct pagoda_event ev;
	ck_assert_int_eq(pagoda_next(pg, &ev, 30000), 0);
	ck_assert_int_eq(ev.type, PAGODA_EV_ERROR);
	ck_assert_int_eq(ev.error, PAGODA_E_DRAINING);
	pagoda_close(pg);
	ck_assert_int_eq(pagoda_connect(D.sock, &pg), PAGODA_E_DRAINING);
	th_msleep(500);
	ck_assert_int_eq(waitpid(D.pid, NULL, WNOHANG), 0);
	ck_assert_uint_eq(prop_t(b, "RequestsAccepted"), 3);

	sd_bus_slot_unref(slot);
	sd_bus_flush_close_unref(b);
	kill(D.pid, SIGTERM);
	int code = th_wait_exit(&D.pid, 30000);
	if (code)
		th_show_log(&D, 40);
	ck_assert_int_eq(code, 0);
	cleanup();
}
END_TEST

/* `bus = none`: no connection at all; a bad value is refused at start. */
START_TEST(bus_flag)
{
	if (need() < 0)
		return;
	pid_t p = fork();
	ck_assert_int_ge(p, 0);
	if (p == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 2);
		execl(D.bin, D.bin, "--model", D.model, "--socket", "/nonexistent/s.sock", "--bus", "bogus",
		      (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(th_wait_exit(&p, 30000), 2);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("dbus");
	TCase *t = tcase_create("dbus");
	tcase_set_timeout(t, 600);
	tcase_add_checked_fixture(t, NULL, cleanup);
	tcase_add_test(t, daemon_object);
	tcase_add_test(t, bus_flag);
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
