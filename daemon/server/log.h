/* daemon/server/log.h — pagodad's one log function: stderr lines with a
 * syslog "<N>" priority prefix, which journald understands. */
#ifndef PAGODA_SERVER_LOG_H
#define PAGODA_SERVER_LOG_H

#include <syslog.h>

/* Messages above this priority (numerically greater) are dropped. */
void log_set_level(int level);
int log_get_level(void);
/* "emerg".."debug" or 0..7; -1 if unknown. */
int log_parse_level(const char *s);
void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
