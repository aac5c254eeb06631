/* daemon/server/log.c — one write(2) per line, so threads never interleave;
 * per-cause rate limits for the lines clients can provoke. */
#include "daemon/server/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int max_level = LOG_INFO;

void log_set_level(int level) { atomic_store(&max_level, level); }

int log_parse_level(const char *s)
{
	static const char *names[] = { "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug" };
	for (int i = 0; i < 8; i++)
		if (!strcasecmp(s, names[i]))
			return i;
	if (!strcasecmp(s, "error"))
		return LOG_ERR;
	if (!strcasecmp(s, "warn"))
		return LOG_WARNING;
	if (s[0] >= '0' && s[0] <= '7' && !s[1])
		return s[0] - '0';
	return -1;
}

static void log_v(int prio, unsigned suppressed, const char *fmt, va_list ap)
{
	int saved = errno;
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "<%d>", prio);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof buf - 2)
		len = sizeof buf - 2;
	if (suppressed) {
		int k = snprintf(buf + len, sizeof buf - len - 1, " (%u like it suppressed)", suppressed);
		if (k > 0)
			len += (size_t)k;
		if (len > sizeof buf - 2)
			len = sizeof buf - 2;
	}
	buf[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, len);
	(void)w;
	errno = saved;
}

void log_msg(int prio, const char *fmt, ...)
{
	if (prio > atomic_load(&max_level))
		return;
	va_list ap;
	va_start(ap, fmt);
	log_v(prio, 0, fmt, ap);
	va_end(ap);
}

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

void log_rl(struct log_rl *rl, int prio, const char *fmt, ...)
{
	if (prio > atomic_load(&max_level))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	unsigned suppressed = 0;
	pthread_mutex_lock(&rl_lock);
	if (now - rl->window_start_ns >= LOG_RL_WINDOW_S * 1000000000ull) {
		rl->window_start_ns = now;
		rl->printed = 0;
	}
	bool print = rl->printed < LOG_RL_BURST;
	if (print) {
		rl->printed++;
		suppressed = rl->suppressed;
		rl->suppressed = 0;
	} else {
		rl->suppressed++;
	}
	pthread_mutex_unlock(&rl_lock);
	if (!print)
		return;
	va_list ap;
	va_start(ap, fmt);
	log_v(prio, suppressed, fmt, ap);
	va_end(ap);
}
