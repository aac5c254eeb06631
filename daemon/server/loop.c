/* daemon/server/loop.c — the daemon's main loop: epoll over the listener,
 * clients, signals and the bus; reload, drain, sd_notify status and the
 * periodic work; the engine thread's start and stop. */
#include "daemon/server/server_int.h"
#include "daemon/chat/chat.h"
#include "daemon/model/model.h"
#include "daemon/model/tokenizer.h"
#include "daemon/server/bus.h"
#include "daemon/server/log.h"
#include "daemon/server/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

uint64_t srv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void srv_wake(struct server *s)
{
	uint64_t one = 1;
	ssize_t r = write(s->wake_efd, &one, sizeof one);
	(void)r;
}

static bool sweep(struct server *s)
{
	bool pending = false;
	for (struct client *c = s->clients, *next; c; c = next) {
		next = c->next;
		if (atomic_load(&c->broken)) {
			conn_disconnect(s, c, c->why);
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (c->ovf_head)
			cq_flush(c);
		pending |= c->ovf_head != NULL;
		pthread_mutex_unlock(&c->lock);
	}
	return pending;
}

/* ---- engine thread --------------------------------------------------------- */
static void *engine_main(void *arg)
{
	struct server *s = arg;
	/* The watchdog is fed from here: a stuck step stops the pings. */
	int tick = notify_tick_ms();
	int wait_ms = tick > 0 && tick < 1000 ? tick : 1000;
	while (!atomic_load(&s->stop)) {
		notify_watchdog();
		if (engine_step(s->eng) == 0)
			engine_wait(s->eng, wait_ms);
	}
	return NULL;
}

/* ---- setup and the loop ---------------------------------------------------- */
static int apply_runtime(struct server *s, const struct srv_config *cfg, char *err, size_t errlen)
{
	struct policy p;
	if (policy_init(&p, cfg->allow_group, cfg->allow_users, cfg->allow_any, err, errlen) < 0)
		return -1;
	const char *sc = cfg->prefix_cache_scope;
	int scope;
	if (!*sc || !strcmp(sc, "user"))
		scope = SCOPE_USER;
	else if (!strcmp(sc, "group"))
		scope = SCOPE_GROUP;
	else if (!strcmp(sc, "global"))
		scope = SCOPE_GLOBAL;
	else {
		snprintf(err, errlen, "prefix-cache-scope: '%s' is not user, group or global", sc);
		return -1;
	}
	__atomic_store_n(&s->cache_scope, scope, __ATOMIC_RELAXED); /* the intake thread reads it */
	s->pol = p;
	s->max_clients = cfg->max_clients > 0 ? cfg->max_clients : 256;
	s->max_clients_uid = cfg->max_clients_per_uid > 0 ? cfg->max_clients_per_uid : 64;
	s->max_inflight = cfg->max_inflight > 0 ? cfg->max_inflight : 64;
	s->max_inflight_uid = cfg->max_inflight_per_uid > 0 ? cfg->max_inflight_per_uid : 256;
	s->hello_timeout_ms = cfg->hello_timeout_ms > 0 ? cfg->hello_timeout_ms : 3000;
	s->sqes_per_turn = cfg->sqes_per_turn > 0 ? cfg->sqes_per_turn : 16;
	s->queued_budget = cfg->queued_budget >= (1 << 20) ? cfg->queued_budget : 1 << 20;
	log_set_level(cfg->log_level);
	return 0;
}

int ipc_create(struct server **out, struct engine *e, const struct srv_config *cfg, const char *path,
	       int listen_fd, char *err, size_t errlen)
{
	struct server *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->eng = e;
	s->tok = engine_tokenizer(e);
	s->n_ctx = engine_n_ctx(e);
	s->n_vocab = tok_n_vocab(s->tok);
	s->max_piece = tok_max_piece(s->tok) > 0 ? tok_max_piece(s->tok) : 1;
	s->lfd = s->epfd = s->sfd = s->wake_efd = -1;
	pthread_mutex_init(&s->free_lock, NULL);
	pthread_mutex_init(&s->in_lock, NULL);
	pthread_cond_init(&s->in_cond, NULL);
	atomic_store(&s->next_gid, 1);
	int64_t arena = cfg->arena_size;
	if (arena < 4096)
		arena = 4096;
	if (arena > (1ll << 30))
		arena = 1ll << 30;
	s->arena_size = (uint32_t)((arena + 4095) & ~4095ll);
	if (apply_runtime(s, cfg, err, errlen) < 0)
		goto fail;
	if (chat_load(engine_model(e)->gguf, s->tok, cfg->chat_template[0] ? cfg->chat_template : NULL, &s->chat,
		      s->chat_why, sizeof s->chat_why)) {
		s->chat = NULL;
		if (cfg->chat_template[0]) { /* asked for by name: a mistake to report */
			snprintf(err, errlen, "%s", s->chat_why);
			goto fail;
		}
		log_msg(LOG_WARNING, "chat requests refused: %s", s->chat_why);
	}
	if (listen_fd >= 0) {
		s->lfd = listen_fd;
		fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
	} else if (conn_listen(s, path, err, errlen, cfg->socket_mode) < 0)
		goto fail;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	s->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	s->wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->sfd < 0 || s->wake_efd < 0 || s->epfd < 0) {
		snprintf(err, errlen, "signalfd/eventfd/epoll: %s", strerror(errno));
		goto fail;
	}
	s->w_listen = (struct watch){ W_LISTEN, NULL };
	s->w_signal = (struct watch){ W_SIGNAL, NULL };
	s->w_wake = (struct watch){ W_WAKE, NULL };
	struct epoll_event ev = { .events = EPOLLIN };
	ev.data.ptr = &s->w_listen;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev);
	ev.data.ptr = &s->w_signal;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sfd, &ev);
	ev.data.ptr = &s->w_wake;
	epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_efd, &ev);
	*out = s;
	return 0;
fail:
	ipc_destroy(s);
	return -1;
}

void ipc_live(struct server *s, struct ipc_live *out)
{
	out->clients = s->n_clients;
	out->inflight = atomic_load(&s->inflight);
	out->draining = atomic_load(&s->draining);
	out->tokens_per_s = s->tokens_per_s;
}

/* One sample of the generated-token counter; the rate over the window. */
static void sample_rate(struct server *s, uint64_t now)
{
	struct engine_stats st;
	engine_get_stats(s->eng, &st);
	s->rate_t[s->rate_i] = now;
	s->rate_gen[s->rate_i] = st.gen_tokens;
	s->rate_i = (s->rate_i + 1) % RATE_N;
	if (s->rate_n < RATE_N)
		s->rate_n++;
	int oldest = s->rate_n < RATE_N ? 0 : s->rate_i;
	int newest = (s->rate_i + RATE_N - 1) % RATE_N;
	uint64_t dt = s->rate_t[newest] - s->rate_t[oldest];
	s->tokens_per_s = dt ? (double)(s->rate_gen[newest] - s->rate_gen[oldest]) * 1e9 / (double)dt : 0.0;
}

/* The STATUS= line while serving or draining. */
static void status_text(struct server *s, char *buf, size_t len)
{
	struct engine_stats st;
	engine_get_stats(s->eng, &st);
	int inflight = atomic_load(&s->inflight);
	if (atomic_load(&s->draining)) {
		if (inflight)
			snprintf(buf, len, "draining: %d request(s) to finish, new ones refused", inflight);
		else
			snprintf(buf, len, "drained: idle, new requests refused (restart to serve again)");
		return;
	}
	snprintf(buf, len, "serving: %d running, %d waiting, %.1f tokens/s, %d client(s)", st.running, st.waiting,
		 s->tokens_per_s, s->n_clients);
}

static void cancel_all(struct server *s)
{
	for (struct client *c = s->clients; c; c = c->next)
		sq_cancel(s, c, 0, true);
}

int ipc_reload(struct server *s, const char *why, char *err, size_t errlen)
{
	struct srv_config *cfg = s->cfg, n;
	char diff[512];
	notify_reloading();
	int rc = 0;
	if (!cfg->config[0]) {
		log_msg(LOG_NOTICE, "%s: no config file to reload", why);
	} else if (config_reload(cfg, &n, err, errlen) < 0 || apply_runtime(s, &n, err, errlen) < 0) {
		log_msg(LOG_ERR, "%s: reload failed, keeping the old settings: %s", why, err);
		rc = -1;
	} else {
		config_restart_diff(cfg, &n, diff, sizeof diff);
		if (diff[0])
			log_msg(LOG_WARNING, "%s: changed keys take effect at restart: %s", why, diff);
		*cfg = n;
		bus_reconfigure(s->bus, cfg);
		log_msg(LOG_NOTICE, "%s: configuration reloaded from %s", why, cfg->config);
	}
	char st[160];
	status_text(s, st, sizeof st);
	notify_ready(st);
	return rc;
}

void ipc_drain(struct server *s, bool exit, const char *why)
{
	if (exit)
		s->exit_when_drained = true;
	if (atomic_load(&s->draining))
		return;
	log_msg(LOG_NOTICE, "%s: draining: %d request(s) running, new ones refused", why, atomic_load(&s->inflight));
	atomic_store(&s->draining, true);
	engine_drain(s->eng);
	char st[160];
	status_text(s, st, sizeof st);
	notify_stopping(st);
}

static void on_signal(struct server *s)
{
	struct signalfd_siginfo si;
	char err[512];
	while (read(s->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGHUP) {
			ipc_reload(s, "SIGHUP", err, sizeof err);
			continue;
		}
		if (++s->term_signals == 1) {
			ipc_drain(s, true, strsignal((int)si.ssi_signo));
		} else {
			log_msg(LOG_NOTICE, "%s again: cancelling every request", strsignal((int)si.ssi_signo));
			cancel_all(s);
		}
	}
}

/* Keeps the bus fd in the epoll set as sd-bus wants it; its longest wait. */
static int bus_arm(struct server *s)
{
	int fd, tmo;
	uint32_t ev;
	bus_prepare(s->bus, &fd, &ev, &tmo);
	if (fd != s->bus_fd) {
		if (s->bus_fd >= 0)
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->bus_fd, NULL);
		s->bus_fd = -1;
		struct epoll_event e = { .events = ev, .data.ptr = &s->w_bus };
		if (fd >= 0 && epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) == 0) {
			s->bus_fd = fd;
			s->bus_events = ev;
		}
	} else if (fd >= 0 && ev != s->bus_events) {
		struct epoll_event e = { .events = ev, .data.ptr = &s->w_bus };
		epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &e);
		s->bus_events = ev;
	}
	return tmo;
}

static int min_tmo(int a, int b) { return a < 0 ? b : b < 0 ? a : a < b ? a : b; }

/* Once a second: the rate; every STATUS_EVERY_NS: the STATUS= line (sent
 * only when its text changed). */
#define STATUS_EVERY_NS 2000000000ull
static int periodic(struct server *s)
{
	uint64_t now = srv_now_ns();
	if (now >= s->next_sample_ns) {
		sample_rate(s, now);
		s->next_sample_ns = now + 1000000000ull;
	}
	if (notify_enabled() && now >= s->next_status_ns) {
		char st[160];
		status_text(s, st, sizeof st);
		notify_status("%s", st);
		s->next_status_ns = now + STATUS_EVERY_NS;
	}
	if (!notify_enabled() && !s->bus)
		return -1; /* nobody looks: sleep until something happens */
	uint64_t next = s->next_sample_ns;
	if (notify_enabled() && s->next_status_ns < next)
		next = s->next_status_ns;
	return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

int ipc_run(struct server *s, struct srv_config *cfg, struct pbus *bus)
{
	s->cfg = cfg;
	s->bus = bus;
	s->bus_fd = -1;
	s->w_bus = (struct watch){ W_BUS, NULL };
	if (pthread_create(&s->eng_thread, NULL, engine_main, s) != 0) {
		log_msg(LOG_CRIT, "cannot start the engine thread");
		return 1;
	}
	if (intake_start(s) < 0) {
		log_msg(LOG_CRIT, "cannot start the intake thread");
		return 1;
	}
	if (s->path[0]) {
		log_msg(LOG_NOTICE, "listening on %s", s->path);
	} else {
		struct sockaddr_un sa;
		socklen_t sl = sizeof sa;
		memset(&sa, 0, sizeof sa);
		if (getsockname(s->lfd, (struct sockaddr *)&sa, &sl) == 0 && sa.sun_path[0])
			log_msg(LOG_NOTICE, "listening on %.*s (socket from systemd)", (int)sizeof sa.sun_path, sa.sun_path);
		else
			log_msg(LOG_NOTICE, "listening on the socket from systemd");
	}
	sample_rate(s, srv_now_ns());
	s->next_sample_ns = srv_now_ns() + 1000000000ull;
	s->next_status_ns = srv_now_ns() + STATUS_EVERY_NS;
	char st[160];
	status_text(s, st, sizeof st);
	notify_ready(st);
	uint64_t drained_at = 0;
	bool pending = false;
	for (;;) {
		notify_main_alive();
		if (atomic_load(&s->draining) && atomic_load(&s->inflight) == 0) {
			if (!drained_at) {
				status_text(s, st, sizeof st);
				notify_status("%s", st);
			}
			/* Let slow readers take what is queued for them, a little while. */
			uint64_t t = srv_now_ns();
			if (!drained_at)
				drained_at = t;
			if (s->exit_when_drained && (!pending || t - drained_at > 5000000000ull))
				break;
		}
		int tmo = pending ? 50 : (atomic_load(&s->draining) && s->exit_when_drained ? 200 : -1);
		tmo = min_tmo(tmo, periodic(s));
		tmo = min_tmo(tmo, conn_timers(s, srv_now_ns()));
		tmo = min_tmo(tmo, notify_tick_ms());
		tmo = min_tmo(tmo, bus_arm(s));
		struct epoll_event evs[64];
		int n = epoll_wait(s->epfd, evs, 64, tmo);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_msg(LOG_CRIT, "epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct watch *w = evs[i].data.ptr;
			if (w->c && w->c->gone)
				continue; /* disconnected earlier in this batch */
			switch (w->kind) {
			case W_LISTEN:
				conn_accept(s);
				break;
			case W_SIGNAL:
				on_signal(s);
				break;
			case W_WAKE: {
				uint64_t v;
				ssize_t r = read(s->wake_efd, &v, sizeof v);
				(void)r;
				break;
			}
			case W_SOCK:
				conn_on_sock(s, w->c, evs[i].events);
				break;
			case W_EFD:
				sq_on_efd(s, w->c);
				break;
			case W_BUS:
				break; /* bus_process below */
			}
		}
		bus_process(s->bus);
		pending = sweep(s);
		conn_free_released(s);
	}
	if (s->bus_fd >= 0)
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->bus_fd, NULL);
	s->bus_fd = -1;
	log_msg(LOG_NOTICE, "drained; exiting");
	return 0;
}

void ipc_destroy(struct server *s)
{
	if (!s)
		return;
	if (s->eng_thread) {
		atomic_store(&s->stop, true);
		engine_wake(s->eng);
		pthread_join(s->eng_thread, NULL);
	}
	while (s->clients)
		conn_disconnect(s, s->clients, NULL);
	intake_stop(s); /* ends the queued requests, all cancelled by now */
	/* Requests cancelled just now end at the next steps (on_done needs s). */
	for (int i = 0; i < 10000 && atomic_load(&s->inflight) > 0; i++)
		engine_step(s->eng);
	conn_free_released(s);
	pthread_mutex_destroy(&s->free_lock);
	pthread_mutex_destroy(&s->in_lock);
	pthread_cond_destroy(&s->in_cond);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->own_socket)
		unlink(s->path);
	if (s->sfd >= 0)
		close(s->sfd);
	if (s->wake_efd >= 0)
		close(s->wake_efd);
	if (s->epfd >= 0)
		close(s->epfd);
	chat_free(s->chat);
	free(s);
}
