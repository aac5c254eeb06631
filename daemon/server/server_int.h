/* daemon/server/server_int.h — the IPC server's rooms share these: the
 * server and client records, and the few calls one room makes into another.
 * Not a door: only daemon/server/{conn,cq,sq,loop}.c include it.
 *
 * conn.c: the listener, accept, peer credentials, handshake, client lifetime.
 * cq.c:   completions into a client's CQ, and its overflow queue.
 * sq.c:   SQ intake on the main loop: checks that cost O(1), then requests
 *         queued to intake.c; cancels; the engine's callbacks.
 * intake.c: the one place where per-request work that grows with the
 *         request runs (tokenizing; chat templates to come), on a worker
 *         thread, one request per client in turn; then engine_submit.
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
struct chat_tmpl;

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

/* What one uid holds: its budgets are checked against these. The list and
 * conns are the main thread's; the atomics move on every thread. */
struct uacct {
	struct uacct *next;
	uid_t uid;
	int conns;
	_Atomic int inflight;
	_Atomic int64_t queued; /* overflow bytes */
};

struct sreq;

/* Who shares cached prompt blocks (docs/server.md): a shared prefix cache
 * lets one user time another's prompts. */
enum cache_scope { SCOPE_USER, SCOPE_GROUP, SCOPE_GLOBAL };

struct client {
	struct server *s;
	uint64_t id;
	int sock, efd;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	struct uacct *ua;
	bool ready; /* handshake done */
	uint32_t version; /* protocol version spoken (its hello's) */
	uint64_t hello_deadline_ns;
	struct client *pnext, *pprev; /* waiting for its hello: main thread */
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
	int64_t queued; /* overflow bytes */
	struct sreq *reqs;
	int n_reqs;
	int refs;
	bool gone;                /* disconnected (main thread) */
	struct client *free_next; /* on the server's free list */

	/* intake.c, under s->in_lock */
	struct sreq *in_head, *in_tail;
	struct client *rr_next;
	bool on_rr;
};

enum sreq_state { SREQ_QUEUED, SREQ_PREP, SREQ_ENGINE };
struct sreq {
	struct engine_req er;
	struct client *c;
	uint64_t creq; /* the client's id */
	struct sreq *next, *prev; /* c->reqs, under c->lock */
	/* intake.c, under s->in_lock */
	struct sreq *in_next;
	enum sreq_state state;
	bool cancelled;
	/* the submission as it came, until prepared */
	struct pg_sqe sqe;
	char *buf;
	size_t len;
	struct pg_submit_ext ext; /* zero without PG_SUBMIT_EXT */
	char *ctext;              /* its constraint text, until prepared */
};

struct server {
	struct engine *eng;
	const struct tokenizer *tok;
	struct chat_tmpl *chat; /* NULL: the model has no usable chat template */
	char chat_why[160];     /* then why, for the chat requests refused */
	int n_ctx, n_vocab, max_piece;
	int lfd, epfd, sfd, wake_efd;
	char path[108];
	bool own_socket;
	struct watch w_listen, w_signal, w_wake;
	struct policy pol;
	int cache_scope; /* enum cache_scope (prefix-cache-scope) */
	/* limits (config; reloaded on SIGHUP) */
	int max_clients, max_clients_uid, max_inflight, max_inflight_uid;
	int sqes_per_turn, hello_timeout_ms;
	int64_t queued_budget;
	uint32_t arena_size;
	struct client *clients;
	int n_conns;   /* accepted, handshake done or not */
	int n_clients; /* handshake done */
	struct uacct *uids;
	struct client *pend_head, *pend_tail; /* hello awaited, oldest first */
	/* EMFILE/ENFILE: the listener leaves the epoll set until a descriptor
	 * frees; an episode ends when the backlog is empty again. */
	bool listen_paused, fd_short;
	uint64_t fd_short_since_ns, listen_retry_ns;
	uint64_t next_client;
	_Atomic uint64_t next_gid;
	_Atomic int inflight;
	_Atomic int64_t queued;    /* overflow bytes, daemon-wide */
	_Atomic int64_t trim_owed; /* bytes freed since the last malloc_trim */
	uint64_t next_trim_ns;
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
	/* intake.c: clients with queued requests, served in turn */
	pthread_mutex_t in_lock;
	pthread_cond_t in_cond;
	struct client *rr_head, *rr_tail;
	bool in_stop, in_started;
	pthread_t in_thread;
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
/* c's overflow is gone (c is being freed): its bytes leave the budgets. */
void cq_forget(struct client *c);

/* conn.c — main thread, except conn_release (any thread) */
int conn_listen(struct server *s, const char *path, char *err, size_t errlen, int mode);
void conn_accept(struct server *s);
void conn_on_sock(struct server *s, struct client *c, uint32_t events);
void conn_disconnect(struct server *s, struct client *c, const char *why);
void conn_release(struct client *c);
void conn_free_released(struct server *s);
/* Drops the connections whose hello is late; ms until the next deadline
 * or the listener's retry, -1 when none. */
int conn_timers(struct server *s, uint64_t now);

/* sq.c — main thread */
void sq_on_efd(struct server *s, struct client *c);
/* Cancels c's requests with client id creq (every one when all). */
void sq_cancel(struct server *s, struct client *c, uint64_t creq, bool all);
/* engine callback, also called by intake.c for requests it ends itself */
void sq_on_done(struct engine_req *er, enum finish_reason why, int err, const char *msg);
void sq_on_token(struct engine_req *er, int32_t token, const char *text, size_t len);

/* intake.c */
int intake_start(struct server *s);
/* Ends every queued request (cancelled) and joins the worker. */
void intake_stop(struct server *s);
/* Main thread: r is on c->reqs and counted; the worker prepares it. */
void intake_push(struct server *s, struct sreq *r);

#endif
