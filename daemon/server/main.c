/* daemon/server/main.c — pagodad: load the model, serve the control socket
 * until SIGTERM drains it. Foreground; logs to stderr with "<N>" prefixes. */
#include "daemon/engine/engine.h"
#include "daemon/server/config.h"
#include "daemon/server/ipc.h"
#include "daemon/server/log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

	/* Signals are taken by the signalfd in the main loop: block them before
	 * any thread starts so that every thread inherits the mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	int listen_fd = -1;
	char path[108] = "";
	int nfds = sd_listen_fds(1);
	if (nfds >= 1 && sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0) > 0) {
		listen_fd = SD_LISTEN_FDS_START;
		log_msg(LOG_INFO, "using the socket passed by systemd");
	} else if (socket_path(&cfg, path, sizeof path) < 0) {
		log_msg(LOG_ERR, "no socket path: pass --socket, or set PAGODA_SOCKET or XDG_RUNTIME_DIR");
		return 2;
	}

	struct engine_opts eo = {
		.model_path = cfg.model,
		.threads = cfg.threads,
		.n_ctx = cfg.ctx,
		.max_seqs = cfg.max_seqs,
		.max_batch_tokens = cfg.max_batch_tokens,
		.prefill_chunk = cfg.prefill_chunk,
		.kv_blocks = cfg.kv_blocks,
		.kv_mem = cfg.kv_mem,
		.block_size = cfg.block_size,
		.no_prefix_cache = cfg.no_prefix_cache,
	};
	sd_notifyf(0, "STATUS=loading %s", cfg.model);
	log_msg(LOG_INFO, "loading %s", cfg.model);
	struct engine *e;
	if (engine_create(&eo, &e, err, sizeof err) != 0) {
		log_msg(LOG_ERR, "cannot load the model: %s", err);
		return 1;
	}
	log_msg(LOG_INFO, "model loaded: context %d", engine_n_ctx(e));

	struct server *s;
	if (ipc_create(&s, e, &cfg, path, listen_fd, err, sizeof err) < 0) {
		log_msg(LOG_ERR, "%s", err);
		engine_destroy(e);
		return 1;
	}
	rc = ipc_run(s, &cfg);
	ipc_destroy(s);
	engine_destroy(e);
	return rc;
}
