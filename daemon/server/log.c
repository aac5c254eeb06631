/* daemon/server/log.c — one write(2) per line, so threads never interleave. */
#include "daemon/server/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static _Atomic int max_level = LOG_INFO;

void log_set_level(int level) { atomic_store(&max_level, level); }
int log_get_level(void) { return atomic_load(&max_level); }

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

void log_msg(int prio, const char *fmt, ...)
{
	if (prio > atomic_load(&max_level))
		return;
	int saved = errno;
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "<%d>", prio);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof buf - 2)
		len = sizeof buf - 2;
	buf[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, len);
	(void)w;
	errno = saved;
}
