/* daemon/server/server_int.h — the IPC server's rooms share these: the
 * server and client records, and the few calls one room makes into another.
 * Not a door: only daemon/server/{conn,cq,sq,loop}.c include it.
 *
 * conn.c: the listener, accept, peer credentials, handshake, client lifetime.
 * cq.c:   completions into a client's CQ, and its overflow queue.
 * sq.c:   SQ intake, request submission, the engine's callbacks.
 * loop.c: the main loop (epoll, signals, reload, drain, sd_notify, periodic).
 */
#ifndef PAGODA_SERVER_INT_H
#define PAGODA_SERVER_INT_H

#include "daemon/engine/engine.h"
#include "daemon/server/ipc.h"
#include "daemon/server/policy.h"
#include "daemon/server/proto.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_OVERFLOW 65536 /* queued completions per client before it is cut off */

enum wkind { W_LISTEN = 1, W_SIGNAL, W_WAKE, W_SOCK, W_EFD, W_BUS };
struct watch {
	int kind;
	struct client *c;
};

struct ovf {
	struct ovf *next;
	struct pg_cqe cqe;
	size_t len;
	char text[];
};

struct sreq;

struct client {
	struct server *s;
	uint64_t id;
	int sock, efd;
	pid_t pid;
	uid_t uid;
	bool ready; /* handshake done */
	/* Refused at accept: the refusal goes out once its hello is read, so that
	 * closing never leaves unread data behind (which would turn the refusal
	 * into ECONNRESET on the client's side). */
	uint32_t refuse;
	const char *refuse_msg;
	struct watch w_sock, w_efd;
	struct client *next, *prev; /* server list: main thread only */

	void *map;
	size_t map_size;
	struct proto_conn pc; /* SQ side: main thread; CQ side: under lock */

	pthread_mutex_t lock;
	bool dead;           /* no more CQ writes */
	_Atomic bool broken; /* rule broken on the engine thread: main disconnects */
	const char *why;
	struct ovf *ovf_head, *ovf_tail;
	int n_ovf;
	struct sreq *reqs;
	int n_reqs;
	int refs;
	bool gone;                /* disconnected (main thread) */
	struct client *free_next; /* on the server's free list */
};

struct sreq {
	struct engine_req er;
	struct client *c;
	uint64_t creq; /* the client's id */
	struct sreq *next, *prev;
};

struct server {
	struct engine *eng;
	const struct tokenizer *tok;
	int n_ctx, n_vocab;
	int lfd, epfd, sfd, wake_efd;
	char path[108];
	bool own_socket;
	struct watch w_listen, w_signal, w_wake;
	struct policy pol;
	int max_clients, max_inflight;
	uint32_t arena_size;
	struct client *clients;
	int n_clients;
	uint64_t next_client;
	_Atomic uint64_t next_gid;
	_Atomic int inflight;
	_Atomic bool draining;
	_Atomic bool stop;
	bool exit_when_drained;
	int term_signals;
	struct srv_config *cfg; /* ipc_run's */
	struct pbus *bus;
	struct watch w_bus;
	int bus_fd;
	uint32_t bus_events;
	/* generated-token rate: a sample a second, the last RATE_N of them */
#define RATE_N 6
	uint64_t rate_t[RATE_N], rate_gen[RATE_N];
	int rate_i, rate_n;
	double tokens_per_s;
	uint64_t next_sample_ns, next_status_ns;
	pthread_mutex_t free_lock; /* clients whose last reference went: freed by main */
	struct client *free_list;
	pthread_t eng_thread;
};

/* loop.c */
uint64_t srv_now_ns(void);
void srv_wake(struct server *s); /* any thread: the main loop runs a turn */

/* cq.c — under c->lock */
void cq_mark_broken(struct client *c, const char *why);
void cq_flush(struct client *c);
void cq_emit(struct client *c, struct pg_cqe *e, const char *text, size_t len);
/* takes c->lock itself */
void cq_error(struct client *c, uint64_t creq, uint32_t code, const char *msg);

/* conn.c — main thread, except conn_release (any thread) */
int conn_listen(struct server *s, const char *path, char *err, size_t errlen, int mode);
void conn_accept(struct server *s);
void conn_on_sock(struct server *s, struct client *c, uint32_t events);
void conn_disconnect(struct server *s, struct client *c, const char *why);
void conn_release(struct client *c);
void conn_free_released(struct server *s);

/* sq.c — main thread */
void sq_on_efd(struct server *s, struct client *c);

#endif
