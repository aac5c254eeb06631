/* daemon/server/notify.c — sd_notify, the state and the watchdog (see
 * notify.h). */
#include "daemon/server/notify.h"
#include "daemon/server/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

static _Atomic int state = STATE_LOADING;
static bool enabled;
static uint64_t wd_usec, start_usec;
static _Atomic uint64_t last_ping, main_beat;
static pthread_mutex_t status_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_status[256];
static struct sockaddr_un addr; /* $NOTIFY_SOCKET, when a path or '@' name */
static socklen_t addr_len;

uint64_t notify_now_usec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t notify_start_usec(void) { return start_usec; }

const char *notify_state_name(enum daemon_state s)
{
	switch (s) {
	case STATE_LOADING: return "loading";
	case STATE_SERVING: return "serving";
	case STATE_DRAINING: return "draining";
	case STATE_RELOADING: return "reloading";
	}
	return "unknown";
}

enum daemon_state notify_state(void) { return (enum daemon_state)atomic_load(&state); }
void notify_set_state(enum daemon_state s) { atomic_store(&state, s); }

static _Atomic double progress;
void notify_set_progress(double frac) { atomic_store(&progress, frac); }
double notify_progress(void) { return atomic_load(&progress); }

void notify_init(void)
{
	start_usec = notify_now_usec();
	atomic_store(&main_beat, start_usec);
	const char *ns = getenv("NOTIFY_SOCKET");
	enabled = ns && *ns;
	size_t l = enabled ? strlen(ns) : 0;
	if (enabled && (ns[0] == '/' || ns[0] == '@') && l < sizeof addr.sun_path) {
		addr.sun_family = AF_UNIX;
		memcpy(addr.sun_path, ns, l);
		if (ns[0] == '@')
			addr.sun_path[0] = 0; /* abstract */
		addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + l + (ns[0] == '/'));
	}
	uint64_t usec = 0;
	/* > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is us. */
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
		wd_usec = usec;
		log_msg(LOG_INFO, "watchdog: every %.1f s at most (WATCHDOG_USEC=%llu)", (double)usec / 4e6,
			(unsigned long long)usec);
	}
}

bool notify_enabled(void) { return enabled; }

int notify_tick_ms(void)
{
	if (!wd_usec)
		return -1;
	uint64_t ms = wd_usec / 4 / 1000;
	return ms < 1 ? 1 : ms > 1000000 ? 1000000 : (int)ms;
}

/* Sends without waiting: a service manager slow to read its socket must
 * not stall the engine thread (its queue is short: net.unix.max_dgram_qlen).
 * Messages that change the unit's state (must) fall back to sd_notify,
 * which waits; STATUS and WATCHDOG are dropped instead (a newer one comes).
 * Returns true if sent. */
static bool sendn(const char *msg, bool must)
{
	if (!enabled)
		return false;
	int r = -EAFNOSUPPORT;
	if (addr_len) {
		int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd >= 0) {
			r = sendto(fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&addr,
				   addr_len) < 0 ? -errno : 1;
			close(fd);
		} else
			r = -errno;
	}
	if (r < 0 && (must || r != -EAGAIN))
		r = sd_notify(0, msg);
	if (r < 0)
		log_msg(LOG_DEBUG, "sd_notify: %s", strerror(-r));
	return r > 0;
}

static void remember_status(const char *text)
{
	pthread_mutex_lock(&status_lock);
	snprintf(last_status, sizeof last_status, "%s", text);
	pthread_mutex_unlock(&status_lock);
}

void notify_status(const char *fmt, ...)
{
	char text[256], msg[272];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&status_lock);
	bool same = !strcmp(text, last_status);
	pthread_mutex_unlock(&status_lock);
	if (same)
		return;
	snprintf(msg, sizeof msg, "STATUS=%s", text);
	if (sendn(msg, false))
		remember_status(text);
}

void notify_ready(const char *status)
{
	char msg[300];
	if (notify_state() != STATE_DRAINING)
		notify_set_state(STATE_SERVING);
	remember_status(status);
	snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s", status);
	sendn(msg, true);
}

void notify_reloading(void)
{
	char msg[96];
	if (notify_state() != STATE_DRAINING)
		notify_set_state(STATE_RELOADING);
	remember_status("reloading");
	snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
		 (unsigned long long)notify_now_usec());
	sendn(msg, true);
}

void notify_stopping(const char *status)
{
	char msg[300];
	notify_set_state(STATE_DRAINING);
	remember_status(status);
	snprintf(msg, sizeof msg, "STOPPING=1\nSTATUS=%s", status);
	sendn(msg, true);
}

void notify_main_alive(void) { atomic_store(&main_beat, notify_now_usec()); }

void notify_watchdog(void)
{
	if (!wd_usec || !enabled)
		return;
	uint64_t now = notify_now_usec(), last = atomic_load(&last_ping);
	if (now - last < wd_usec / 4)
		return;
	if (now - atomic_load(&main_beat) >= wd_usec / 2) {
		/* The main loop is stuck: say nothing, let systemd restart us. */
		static _Atomic bool told;
		if (!atomic_exchange(&told, true))
			log_msg(LOG_CRIT, "watchdog: the main loop has not run for %.1f s; withholding pings",
				(double)(now - atomic_load(&main_beat)) / 1e6);
		return;
	}
	if (!atomic_compare_exchange_strong(&last_ping, &last, now))
		return; /* another thread just pinged */
	sendn("WATCHDOG=1", false);
}
