/* daemon/server/main.c — pagodad: load the model, serve the control socket
 * until SIGTERM drains it. Foreground; logs to stderr with "<N>" prefixes.
 *
 * Under systemd (Type=notify): STATUS lines with the loading progress, READY
 * once the model is loaded and the socket listens, WATCHDOG pings from the
 * engine thread, RELOADING/READY around a SIGHUP, STOPPING on SIGTERM (see
 * notify.h). The socket comes from systemd when it passes one (socket
 * activation), else the daemon binds it itself. The D-Bus object (bus.h)
 * answers from the start, while the model loads on a thread of its own. */
#include "daemon/engine/engine.h"
#include "daemon/server/bus.h"
#include "daemon/server/config.h"
#include "daemon/server/ipc.h"
#include "daemon/server/log.h"
#include "daemon/server/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

/* --socket, $PAGODA_SOCKET, /run/pagoda/pagoda.sock when /run/pagoda is
 * writable, $XDG_RUNTIME_DIR/pagoda.sock. */
static int socket_path(const struct srv_config *c, char *buf, size_t len)
{
	const char *env;
	if (c->socket[0])
		snprintf(buf, len, "%s", c->socket);
	else if ((env = getenv("PAGODA_SOCKET")) && *env)
		snprintf(buf, len, "%s", env);
	else if (access("/run/pagoda", W_OK) == 0)
		snprintf(buf, len, "/run/pagoda/pagoda.sock");
	else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
		snprintf(buf, len, "%s/pagoda.sock", env);
	else
		return -1;
	return 0;
}

/* The listening socket systemd passed (sd_listen_fds), if any: it must be a
 * listening AF_UNIX SOCK_SEQPACKET socket; others are closed. *fd = -1 when
 * none was passed. -1 when some were but none fits. */
static int passed_socket(int *fd)
{
	*fd = -1;
	int n = sd_listen_fds(1); /* unsets $LISTEN_FDS: children don't see it */
	if (n < 0) {
		log_msg(LOG_ERR, "sd_listen_fds: %s", strerror(-n));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		int f = SD_LISTEN_FDS_START + i;
		if (*fd < 0 && sd_is_socket_unix(f, SOCK_SEQPACKET, 1, NULL, 0) > 0) {
			*fd = f;
			fcntl(f, F_SETFD, FD_CLOEXEC);
			continue;
		}
		log_msg(LOG_WARNING, "ignoring fd %d from systemd: %s", f,
			*fd < 0 ? "not a listening AF_UNIX SOCK_SEQPACKET socket" : "one socket is enough");
		close(f);
	}
	if (n > 0 && *fd < 0) {
		log_msg(LOG_ERR, "systemd passed %d fd(s), none a listening AF_UNIX SOCK_SEQPACKET socket: "
				 "pagodad.socket needs ListenSequentialPacket=",
			n);
		return -1;
	}
	if (*fd >= 0)
		log_msg(LOG_INFO, "using the socket passed by systemd (fd %d)", *fd);
	return 0;
}

/* ---- loading on a thread, the main thread serving signals and D-Bus -------- */
struct loader {
	struct engine_opts eo;
	const char *base;
	struct engine *e;
	int rc;
	char err[512];
	int done_fd;
};

static void on_engine_log(void *user, int level, const char *msg)
{
	log_msg(level, "%s", msg);
}

static void on_progress(void *user, const char *stage, double frac)
{
	struct loader *l = user;
	int pct = (int)(frac * 100.0 + 0.5);
	bool weights = !strcmp(stage, "loading weights");
	notify_set_progress(weights ? frac : 0.0);
	notify_status("loading %s: %s %d%%", l->base, stage, pct);
	notify_watchdog();
}

static void *load_main(void *arg)
{
	struct loader *l = arg;
	l->rc = engine_create(&l->eo, &l->e, l->err, sizeof l->err);
	uint64_t one = 1;
	ssize_t w = write(l->done_fd, &one, sizeof one);
	(void)w;
	return NULL;
}

static int min_tmo(int a, int b) { return a < 0 ? b : b < 0 ? a : a < b ? a : b; }

/* Runs the loader thread; returns the engine or NULL (message logged). */
static struct engine *load(struct srv_config *cfg, struct pbus *bus, const sigset_t *sigs)
{
	struct loader l = {
		.eo = {
			.model_path = cfg->model,
			.backend = cfg->backend,
			.threads = cfg->threads,
			.n_ctx = cfg->ctx,
			.max_seqs = cfg->max_seqs,
			.max_batch_tokens = cfg->max_batch_tokens,
			.prefill_chunk = cfg->prefill_chunk,
			.kv_blocks = cfg->kv_blocks,
			.kv_mem = cfg->kv_mem,
			.block_size = cfg->block_size,
			.cache_type_k = cfg->cache_type_k[0] ? cfg->cache_type_k : NULL,
			.cache_type_v = cfg->cache_type_v[0] ? cfg->cache_type_v : NULL,
			.no_prefix_cache = cfg->no_prefix_cache,
			.offload_dir = cfg->offload_dir,
			.offload_size = cfg->offload_size,
			.offload_sqpoll = cfg->offload_sqpoll,
			.offload_fault = getenv("PAGODA_OFFLOAD_FAULT"),
			.log = on_engine_log,
			.progress = on_progress,
			.draft_model = cfg->draft_model,
			.draft_max = cfg->draft_max,
		},
	};
	if (cfg->speculative[0]) {
		int k = engine_spec_parse(cfg->speculative);
		if (k < 0) {
			log_msg(LOG_CRIT, "speculative: '%s' is none of off, ngram, draft", cfg->speculative);
			return NULL;
		}
		l.eo.speculative = (enum engine_spec)k;
	}
	l.eo.progress_user = &l;
	const char *slash = strrchr(cfg->model, '/');
	l.base = slash ? slash + 1 : cfg->model;
	l.done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int sfd = signalfd(-1, sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (l.done_fd < 0 || sfd < 0 || ep < 0) {
		log_msg(LOG_CRIT, "eventfd/signalfd/epoll: %s", strerror(errno));
		return NULL;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1 };
	epoll_ctl(ep, EPOLL_CTL_ADD, l.done_fd, &ev);
	ev.data.u32 = 2;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);

	notify_set_state(STATE_LOADING);
	notify_status("loading %s", l.base);
	log_msg(LOG_INFO, "loading %s", cfg->model);
	pthread_t th;
	if (pthread_create(&th, NULL, load_main, &l) != 0) {
		log_msg(LOG_CRIT, "cannot start the loading thread");
		return NULL;
	}
	int bus_fd = -1;
	uint32_t bus_ev = 0;
	bool done = false;
	while (!done) {
		notify_main_alive();
		int fd, tmo;
		uint32_t bev;
		bus_prepare(bus, &fd, &bev, &tmo);
		if (fd != bus_fd) {
			if (bus_fd >= 0)
				epoll_ctl(ep, EPOLL_CTL_DEL, bus_fd, NULL);
			bus_fd = -1;
			struct epoll_event be = { .events = bev, .data.u32 = 3 };
			if (fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &be) == 0)
				bus_fd = fd, bus_ev = bev;
		} else if (fd >= 0 && bev != bus_ev) {
			struct epoll_event be = { .events = bev, .data.u32 = 3 };
			epoll_ctl(ep, EPOLL_CTL_MOD, fd, &be);
			bus_ev = bev;
		}
		tmo = min_tmo(tmo, notify_tick_ms());
		struct epoll_event evs[4];
		int n = epoll_wait(ep, evs, 4, tmo);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u32 == 1) {
				done = true;
			} else if (evs[i].data.u32 == 2) {
				struct signalfd_siginfo si;
				while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
					if (si.ssi_signo == SIGHUP) {
						struct srv_config nc;
						char err[512];
						if (!cfg->config[0])
							log_msg(LOG_NOTICE, "SIGHUP while loading: no config file to reload");
						else if (config_reload(cfg, &nc, err, sizeof err) < 0)
							log_msg(LOG_ERR, "SIGHUP while loading: keeping the old settings: %s", err);
						else {
							/* the runtime keys apply once loaded */
							*cfg = nc;
							bus_reconfigure(bus, cfg);
							log_msg(LOG_NOTICE, "SIGHUP while loading: configuration re-read");
						}
						continue;
					}
					/* Nothing runs yet: nothing to drain. */
					log_msg(LOG_NOTICE, "%s while loading the model: exiting",
						strsignal((int)si.ssi_signo));
					notify_stopping("stopping: interrupted while loading");
					_exit(0);
				}
			}
		}
		bus_process(bus);
	}
	pthread_join(th, NULL);
	if (bus_fd >= 0)
		epoll_ctl(ep, EPOLL_CTL_DEL, bus_fd, NULL);
	close(ep);
	close(sfd);
	close(l.done_fd);
	if (l.rc != 0) {
		log_msg(LOG_ERR, "cannot load the model: %s", l.err);
		return NULL;
	}
	char be[128];
	engine_backend_describe(l.e, be, sizeof be);
	const char *note = engine_backend_note(l.e);
	log_msg(LOG_INFO, "backend %s%s%s", be, note[0] ? ": " : "", note);
	struct engine_stats st;
	engine_get_stats(l.e, &st);
	if (strcmp(st.spec_default, "off") || cfg->draft_model[0])
		log_msg(LOG_INFO, "speculative decoding by default: %s%s%s", st.spec_default,
			cfg->draft_model[0] ? "; draft model " : "", cfg->draft_model);
	notify_set_progress(1.0);
	return l.e;
}

/* Every client holds a socket and an eventfd here: take every descriptor
 * the hard limit allows (systemd's default soft limit is 1,024). Under the
 * unit, LimitNOFILE= has set both already and setrlimit is filtered out. */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
		log_msg(LOG_DEBUG, "descriptors: soft limit raised from %llu to %llu", (unsigned long long)was,
			(unsigned long long)rl.rlim_max);
	else
		log_msg(LOG_DEBUG, "descriptors: soft limit stays %llu: %s", (unsigned long long)was, strerror(errno));
}

int main(int argc, char **argv)
{
	struct srv_config cfg;
	char err[512];
	config_defaults(&cfg);
	int rc = config_load(&cfg, argc, argv, err, sizeof err);
	if (rc == 1)
		return 0;
	if (rc < 0) {
		log_msg(LOG_ERR, "%s", err);
		return 2;
	}
	log_set_level(cfg.log_level);
	if (!cfg.model[0]) {
		log_msg(LOG_ERR, "no model: pass --model M.gguf (or model = in the config file)");
		return 2;
	}
	if (strcmp(cfg.backend, "cpu") && strcmp(cfg.backend, "cuda") && strcmp(cfg.backend, "auto")) {
		log_msg(LOG_ERR, "backend: '%s' is not one of cpu, cuda, auto", cfg.backend);
		return 2;
	}
	int bus_kind = bus_parse_kind(cfg.bus);
	if (bus_kind < 0) {
		log_msg(LOG_ERR, "bus: '%s' is not one of system, session, none, auto", cfg.bus);
		return 2;
	}
	notify_init();
	raise_nofile();

	/* Signals are taken by signalfds in the main loops: block them before
	 * any thread starts so that every thread inherits the mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	int listen_fd;
	char path[108] = "";
	if (passed_socket(&listen_fd) < 0)
		return 1;
	if (listen_fd < 0 && socket_path(&cfg, path, sizeof path) < 0) {
		log_msg(LOG_ERR, "no socket path: pass --socket, or set PAGODA_SOCKET or XDG_RUNTIME_DIR");
		return 2;
	}

	struct pbus *bus = bus_open((enum bus_kind)bus_kind, &cfg);
	struct engine *e = load(&cfg, bus, &set);
	if (!e) {
		notify_status("failed to load %s", cfg.model);
		bus_close(bus);
		return 1;
	}
	log_msg(LOG_INFO, "model loaded: context %d", engine_n_ctx(e));
	struct engine_stats kst;
	engine_get_stats(e, &kst);
	log_msg(LOG_INFO, "KV cache: K %s, V %s; %lld tokens in %lld blocks of %lld bytes", kst.kv_type_k, kst.kv_type_v,
		(long long)kst.kv_tokens_total, (long long)kst.kv_blocks_total, (long long)kst.kv_block_bytes);
	bus_set_engine(bus, e);

	struct server *s;
	if (ipc_create(&s, e, &cfg, path, listen_fd, err, sizeof err) < 0) {
		log_msg(LOG_ERR, "%s", err);
		notify_status("failed: %s", err);
		bus_close(bus);
		engine_destroy(e);
		return 1;
	}
	bus_set_server(bus, s);
	rc = ipc_run(s, &cfg, bus);
	bus_set_server(bus, NULL);
	ipc_destroy(s);
	bus_close(bus);
	engine_destroy(e);
	return rc;
}
