/* tests/integration/harness.c — start, watch and stop a real pagodad. */
#include "tests/integration/harness.h"

#include "libclient/pagoda.h"
#include "tests/unit/testdata.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t th_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void th_msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int th_need(struct th_daemon *d)
{
	d->pid = -1;
	if (testdata_path(d->model, sizeof d->model, "models/stories260K.gguf") < 0)
		return -1;
	const char *b = getenv("PAGODA_BUILD");
	snprintf(d->bin, sizeof d->bin, "%s/pagodad", b && *b ? b : "build");
	if (access(d->bin, X_OK) != 0) {
		fprintf(stderr, "SKIP: %s not built\n", d->bin);
		return -1;
	}
	return 0;
}

void th_mkdir(struct th_daemon *d, const char *tag)
{
	const char *t = getenv("TMPDIR");
	snprintf(d->dir, sizeof d->dir, "%s/pagoda-%s-XXXXXX", t && *t ? t : "/tmp", tag);
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	chmod(d->dir, 0755); /* so that other uids reach the socket */
	snprintf(d->sock, sizeof d->sock, "%s/s.sock", d->dir);
	snprintf(d->log, sizeof d->log, "%s/pagodad.log", d->dir);
}

void th_spawn(struct th_daemon *d, const char *const *extra, void (*pre)(void *), void *arg)
{
	d->pid = fork();
	ck_assert_int_ge(d->pid, 0);
	if (d->pid)
		return;
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
	const char *argv[48] = { d->bin, "--model", d->model, "--socket", d->sock };
	int n = 5;
	for (int i = 0; extra && extra[i] && n < 47; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	if (pre)
		pre(arg);
	execv(d->bin, (char **)argv);
	_exit(127);
}

void th_wait_up(struct th_daemon *d, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		pagoda_t *pg;
		if (pagoda_connect(d->sock, &pg) == 0) {
			pagoda_close(pg);
			return;
		}
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = -1;
			th_show_log(d, 40);
			ck_abort_msg("pagodad exited at start; see %s", d->log);
		}
		ck_assert_msg(th_now_ms() < end, "pagodad did not come up; see %s", d->log);
		th_msleep(20);
	}
}

int th_wait_exit(pid_t *pid, int timeout_ms)
{
	int st = 0;
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;
	while (waitpid(*pid, &st, WNOHANG) == 0) {
		if (th_now_ms() > end) {
			kill(*pid, SIGKILL);
			waitpid(*pid, &st, 0);
			*pid = -1;
			return -1000;
		}
		th_msleep(10);
	}
	*pid = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

int th_stop(struct th_daemon *d, int sig, int timeout_ms)
{
	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	return th_wait_exit(&d->pid, timeout_ms);
}

void th_show_log(const struct th_daemon *d, int lines)
{
	char cmd[400];
	snprintf(cmd, sizeof cmd, "tail -%d '%s' >&2", lines, d->log);
	if (system(cmd) != 0)
		fprintf(stderr, "see %s\n", d->log);
}

int th_log_count(const struct th_daemon *d, const char *s)
{
	FILE *f = fopen(d->log, "r");
	if (!f)
		return 0;
	char line[2048];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, s) != NULL;
	fclose(f);
	return n;
}

void th_cleanup(struct th_daemon *d)
{
	if (d->pid > 0)
		th_stop(d, SIGKILL, 5000);
	if (d->dir[0]) {
		char cmd[400];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", d->dir);
		d->dir[0] = 0;
	}
}
