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

struct engine;
struct server;

/* Creates the server listening on path (or on listen_fd >= 0 when handed one
 * by systemd). 0, or -1 with a message. */
int ipc_create(struct server **out, struct engine *e, const struct srv_config *cfg, const char *path,
	       int listen_fd, char *err, size_t errlen);
/* Runs until drained after SIGTERM/SIGINT (or on a fatal error); handles
 * SIGHUP by reloading cfg. Signals must already be blocked in every thread.
 * Returns the exit status. */
int ipc_run(struct server *s, struct srv_config *cfg);
void ipc_destroy(struct server *s);

#endif
