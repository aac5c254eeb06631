/* daemon/server/ipc.h — pagodad's IPC server: the control socket, the
 * handshake, one shared-memory connection per client, and the glue between
 * the clients' rings and the engine's request queue.
 *
 * Threads: ipc_run runs the epoll loop on the calling (main) thread; the
 * engine runs on its own thread (ipc_run starts it) and its callbacks write
 * completions straight into the clients' completion rings. Each client's
 * completion ring has one producer at a time: every write to it happens under
 * that client's mutex.
 */
#ifndef PAGODA_SERVER_IPC_H
#define PAGODA_SERVER_IPC_H

#include "daemon/server/config.h"

#include <stdbool.h>

struct engine;
struct server;
struct pbus;

/* Creates the server listening on path (or on listen_fd >= 0 when handed one
 * by systemd). 0, or -1 with a message. */
int ipc_create(struct server **out, struct engine *e, const struct srv_config *cfg, const char *path,
	       int listen_fd, char *err, size_t errlen);
/* Runs until drained after SIGTERM/SIGINT (or on a fatal error); handles
 * SIGHUP by reloading cfg. Signals must already be blocked in every thread.
 * Tells the service manager READY once the engine thread runs, STATUS every
 * few seconds, and feeds the watchdog from the engine thread (notify.h).
 * bus (may be NULL) is served on the same epoll loop. Returns the exit
 * status. */
int ipc_run(struct server *s, struct srv_config *cfg, struct pbus *bus);

/* Main thread, while ipc_run runs (from D-Bus methods). */
struct ipc_live {
	int clients, inflight;
	bool draining;
	double tokens_per_s; /* generated, over the last few seconds */
};
void ipc_live(struct server *s, struct ipc_live *out);
/* Refuses new requests from now on; the running ones finish. With exit,
 * ipc_run returns once they have (SIGTERM); else the daemon stays up,
 * drained, until stopped. Idempotent. */
void ipc_drain(struct server *s, bool exit, const char *why);
/* Re-reads the config file (RELOADING=1 ... READY=1 around it). 0, or -1
 * with a message, the old settings kept. */
int ipc_reload(struct server *s, const char *why, char *err, size_t errlen);
void ipc_destroy(struct server *s);

#endif
