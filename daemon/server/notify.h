/* daemon/server/notify.h — pagodad and its service manager: the daemon's
 * state, sd_notify messages (READY, STATUS, RELOADING, STOPPING) and the
 * watchdog.
 *
 * Without systemd ($NOTIFY_SOCKET unset) every call is a cheap no-op, apart
 * from keeping the state that D-Bus shows.
 *
 * Watchdog: systemd sets WATCHDOG_USEC (and WATCHDOG_PID). The engine thread
 * calls notify_watchdog() from its loop; a ping goes out when the last one
 * is a quarter of WATCHDOG_USEC old, so a missed one still leaves the next
 * below half of it. The main loop calls notify_main_alive() every turn (it
 * wakes at least every notify_tick_ms()); the engine thread withholds its
 * pings while the main loop has not turned for half of WATCHDOG_USEC, so a
 * stuck main loop gets the daemon restarted as well as a stuck engine.
 *
 * All functions are thread-safe.
 */
#ifndef PAGODA_SERVER_NOTIFY_H
#define PAGODA_SERVER_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

enum daemon_state { STATE_LOADING, STATE_SERVING, STATE_DRAINING, STATE_RELOADING };

const char *notify_state_name(enum daemon_state s);
enum daemon_state notify_state(void);
void notify_set_state(enum daemon_state s);

/* Model loading progress, 0..1 (shown on D-Bus). */
void notify_set_progress(double frac);
double notify_progress(void);

/* Reads $NOTIFY_SOCKET and the watchdog settings. Call once, early. */
void notify_init(void);
/* True when a service manager listens. */
bool notify_enabled(void);
/* The longest a loop that feeds the watchdog may sleep, in ms (-1: no limit). */
int notify_tick_ms(void);

/* STATUS=<text>; nothing is sent when the text equals the last one. */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* READY=1 with a STATUS line; state serving (unless draining). */
void notify_ready(const char *status);
/* RELOADING=1 and MONOTONIC_USEC=now; state reloading. */
void notify_reloading(void);
/* STOPPING=1 with a STATUS line; state draining. */
void notify_stopping(const char *status);

/* WATCHDOG=1 if one is due (see above). */
void notify_watchdog(void);
void notify_main_alive(void);

/* CLOCK_MONOTONIC in microseconds, and the daemon's start time on it. */
uint64_t notify_now_usec(void);
uint64_t notify_start_usec(void);

#endif
