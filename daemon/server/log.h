/* daemon/server/log.h — pagodad's one log function: stderr lines with a
 * syslog "<N>" priority prefix, which journald understands. */
#ifndef PAGODA_SERVER_LOG_H
#define PAGODA_SERVER_LOG_H

#include <stdint.h>
#include <syslog.h>

/* Messages above this priority (numerically greater) are dropped. */
void log_set_level(int level);
/* "emerg".."debug" or 0..7; -1 if unknown. */
int log_parse_level(const char *s);
void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One cause's budget: LOG_RL_BURST lines per LOG_RL_WINDOW_S seconds; the
 * next line after a quiet spell says how many were suppressed. So that no
 * client can flood the journal, every line a client can provoke goes
 * through one (a static per call site: one cause each). */
#define LOG_RL_BURST 10
#define LOG_RL_WINDOW_S 10
struct log_rl {
	uint64_t window_start_ns;
	unsigned printed, suppressed;
};
void log_rl(struct log_rl *rl, int prio, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define LOG_RL(prio, ...)                                  \
	do {                                               \
		static struct log_rl rl_;                  \
		log_rl(&rl_, (prio), __VA_ARGS__);         \
	} while (0)

#endif
