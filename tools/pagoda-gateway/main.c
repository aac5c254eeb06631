/* tools/pagoda-gateway/main.c — pagoda-gateway: flags and config, the
 * connections to pagodad, the HTTP server (or the socket systemd passes),
 * then it waits for SIGTERM/SIGINT. */
#include "tools/pagoda-gateway/gw.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>

int main(int argc, char **argv)
{
	struct gw_conf conf;
	char err[512];
	gw_conf_defaults(&conf);
	int rc = gw_conf_load(&conf, argc, argv, err, sizeof err);
	if (rc == 1) {
		gw_conf_usage();
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "pagoda-gateway: %s\n", err);
		return 2;
	}
	if (conf.api_key_file[0] && gw_auth_load(conf.api_key_file, err, sizeof err) < 0) {
		fprintf(stderr, "pagoda-gateway: %s\n", err);
		return 1;
	}
	/* Every thread inherits this mask; main takes the signals with sigwait. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	int fd = -1, n = sd_listen_fds(1);
	if (n > 1) {
		fprintf(stderr, "pagoda-gateway: systemd passed %d sockets, expected one\n", n);
		return 1;
	}
	if (n == 1) {
		fd = SD_LISTEN_FDS_START;
		if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
			fprintf(stderr, "pagoda-gateway: the socket systemd passed is not a listening stream socket\n");
			return 1;
		}
	}
	gw_metrics_init(conf.model_name);
	struct gw_pool *pool;
	if ((rc = gw_pool_open(conf.socket, conf.connections, &pool)) < 0) {
		fprintf(stderr, "pagoda-gateway: %s\n", pagoda_strerror(rc));
		return 1;
	}
	struct gw_server *srv;
	if (gw_http_start(&conf, pool, fd, &srv, err, sizeof err) < 0) {
		fprintf(stderr, "pagoda-gateway: %s\n", err);
		gw_pool_close(pool);
		return 1;
	}
	if (!conf.quiet)
		fprintf(stderr, "pagoda-gateway: serving %s on %s, pagodad %s%s\n", conf.model_name,
			fd >= 0 ? "the socket systemd passed" : conf.listen, conf.socket[0] ? conf.socket : "(default socket)",
			gw_pool_up(pool) ? "" : " (not reachable yet: retrying)");
	sd_notify(0, "READY=1");
	int sig = 0;
	do
		sigwait(&set, &sig);
	while (sig == SIGHUP); /* nothing to reload yet: keys and limits need a restart */
	sd_notify(0, "STOPPING=1");
	gw_http_stop(srv);
	gw_pool_close(pool);
	return 0;
}
