/* daemon/server/ipc.c — control socket, handshake, per-client shared memory,
 * SQ → engine request queue, engine callbacks → CQ. */
#include "daemon/server/ipc.h"
#include "daemon/chat/chat.h"
#include "daemon/engine/engine.h"
#include "daemon/model/model.h"
#include "daemon/model/tokenizer.h"
#include "daemon/server/bus.h"
#include "daemon/server/log.h"
#include "daemon/server/notify.h"
#include "daemon/server/policy.h"
#include "daemon/server/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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
	struct chat_tmpl *chat; /* NULL: the model has no usable chat template */
	char chat_why[160];     /* then why, for the chat requests refused */
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

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void wake_main(struct server *s)
{
	uint64_t one = 1;
	ssize_t r = write(s->wake_efd, &one, sizeof one);
	(void)r;
}

/* ---- completion side (under c->lock) ----------------------------------- */
static void mark_broken(struct client *c, const char *why)
{
	if (atomic_load(&c->broken))
		return;
	c->why = why;
	atomic_store(&c->broken, true);
	wake_main(c->s);
}

static void flush_ovf(struct client *c)
{
	const char *why;
	bool wrote = false;
	for (;;) {
		int space = proto_cq_space(&c->pc, &why);
		if (space < 0) {
			mark_broken(c, why);
			return;
		}
		while (space > 0 && c->ovf_head) {
			struct ovf *o = c->ovf_head;
			proto_cq_write(&c->pc, &o->cqe, o->text, o->len);
			c->ovf_head = o->next;
			if (!c->ovf_head)
				c->ovf_tail = NULL;
			c->n_ovf--;
			free(o);
			space--;
			wrote = true;
		}
		if (!c->ovf_head) {
			atomic_store(&c->pc.cqc->flags, 0);
			break;
		}
		/* Tell the client to wake us, then look again in case it already
		 * freed space (its release store and our flag store race). */
		atomic_store_explicit(&c->pc.cqc->flags, PG_CQ_OVERFLOW, memory_order_seq_cst);
		if (proto_cq_space(&c->pc, &why) == 0)
			break;
	}
	if (wrote)
		proto_cq_publish(&c->pc);
}

static void push_one(struct client *c, const struct pg_cqe *e, const char *text, size_t len)
{
	const char *why;
	if (c->ovf_head)
		flush_ovf(c);
	if (!c->ovf_head) {
		int space = proto_cq_space(&c->pc, &why);
		if (space < 0) {
			mark_broken(c, why);
			return;
		}
		if (space > 0) {
			proto_cq_write(&c->pc, e, text, len);
			return;
		}
	}
	if (c->n_ovf >= MAX_OVERFLOW) {
		mark_broken(c, "does not read its completions");
		return;
	}
	struct ovf *o = malloc(sizeof *o + len);
	if (!o) {
		mark_broken(c, "out of memory queueing completions");
		return;
	}
	o->next = NULL;
	o->cqe = *e;
	o->len = len;
	if (len)
		memcpy(o->text, text, len);
	if (c->ovf_tail)
		c->ovf_tail->next = o;
	else
		c->ovf_head = o;
	c->ovf_tail = o;
	c->n_ovf++;
	atomic_store_explicit(&c->pc.cqc->flags, PG_CQ_OVERFLOW, memory_order_seq_cst);
}

/* Emits one event (splitting long token text) and publishes. Locked. */
static void emit(struct client *c, struct pg_cqe *e, const char *text, size_t len)
{
	if (c->dead || atomic_load(&c->broken))
		return;
	if (e->type == PG_CQE_TOKEN) {
		size_t slot = c->pc.lay.cq_text_slot;
		for (;;) {
			size_t n = len > slot ? slot : len;
			e->flags = len > slot ? PG_CQE_F_MORE : 0;
			push_one(c, e, text, n);
			text += n;
			len -= n;
			if (!len)
				break;
			e->u.tok.token = -1;
		}
	} else {
		push_one(c, e, NULL, 0);
	}
	proto_cq_publish(&c->pc);
}

static void emit_error(struct client *c, uint64_t creq, uint32_t code, const char *msg)
{
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = creq;
	e.type = PG_CQE_ERROR;
	e.u.error.code = code;
	size_t l = strlen(msg);
	if (l > PG_MSG_LEN)
		l = PG_MSG_LEN;
	memcpy(e.u.error.msg, msg, l);
	e.u.error.len = (uint32_t)l;
	pthread_mutex_lock(&c->lock);
	emit(c, &e, NULL, 0);
	pthread_mutex_unlock(&c->lock);
}

/* The last reference went: main frees it between epoll batches, so that
 * watch pointers in a batch stay valid. */
static void client_release(struct client *c)
{
	struct server *s = c->s;
	pthread_mutex_lock(&s->free_lock);
	c->free_next = s->free_list;
	s->free_list = c;
	pthread_mutex_unlock(&s->free_lock);
	wake_main(s);
}

static void client_free(struct client *c)
{
	while (c->ovf_head) {
		struct ovf *o = c->ovf_head;
		c->ovf_head = o->next;
		free(o);
	}
	if (c->map)
		munmap(c->map, c->map_size);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* ---- engine callbacks (engine thread, or main on a refused submit) -------- */
static void on_token(struct engine_req *er, int32_t token, const char *text, size_t len)
{
	struct sreq *r = er->user;
	struct client *c = r->c;
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = r->creq;
	e.type = PG_CQE_TOKEN;
	e.u.tok.token = token;
	pthread_mutex_lock(&c->lock);
	emit(c, &e, text, len);
	pthread_mutex_unlock(&c->lock);
}

static uint32_t map_engine_err(int err)
{
	switch (err) {
	case ENGINE_ERR_CONTEXT: return PG_E_CONTEXT;
	case ENGINE_ERR_INVALID: return PG_E_INVALID;
	case ENGINE_ERR_DRAINING: return PG_E_DRAINING;
	case ENGINE_ERR_NOMEM: return PG_E_NOMEM;
	default: return PG_E_INTERNAL;
	}
}

static void on_done(struct engine_req *er, enum finish_reason why, int err, const char *msg)
{
	struct sreq *r = er->user;
	struct client *c = r->c;
	struct server *s = c->s;
	struct pg_cqe e;
	memset(&e, 0, sizeof e);
	e.req_id = r->creq;
	if (why == FINISH_ERROR) {
		e.type = PG_CQE_ERROR;
		e.u.error.code = map_engine_err(err);
		if (!msg || !*msg)
			msg = "request failed";
		size_t l = strlen(msg);
		if (l > PG_MSG_LEN)
			l = PG_MSG_LEN;
		memcpy(e.u.error.msg, msg, l);
		e.u.error.len = (uint32_t)l;
	} else {
		e.type = PG_CQE_DONE;
		e.u.done.finish = why == FINISH_EOS ? PG_FINISH_EOS
				: why == FINISH_LENGTH ? PG_FINISH_LENGTH
				: why == FINISH_STOP ? PG_FINISH_STOP
				: PG_FINISH_CANCEL;
		e.u.done.n_prompt = er->timings.n_prompt;
		e.u.done.n_cached = er->timings.n_cached;
		e.u.done.n_gen = er->timings.n_gen;
		e.u.done.t_submit_ns = er->timings.t_submit_ns;
		e.u.done.t_admit_ns = er->timings.t_admit_ns;
		e.u.done.t_first_ns = er->timings.t_first_ns;
		e.u.done.t_done_ns = er->timings.t_done_ns;
	}
	pthread_mutex_lock(&c->lock);
	emit(c, &e, NULL, 0);
	if (r->prev)
		r->prev->next = r->next;
	else
		c->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	c->n_reqs--;
	int refs = --c->refs;
	unsigned long long cid = c->id; /* c may be gone once unlocked */
	pthread_mutex_unlock(&c->lock);
	log_msg(LOG_DEBUG, "client %llu: request %llu done (%s, %d generated)", cid,
		(unsigned long long)r->creq, finish_reason_name(why), er->timings.n_gen);
	free(r);
	if (refs == 0)
		client_release(c);
	if (atomic_fetch_sub(&s->inflight, 1) == 1 && atomic_load(&s->draining))
		wake_main(s);
}

/* ---- connections --------------------------------------------------------- */
static void client_disconnect(struct server *s, struct client *c, const char *why)
{
	if (why)
		log_msg(LOG_WARNING, "client %llu (pid %d uid %u): disconnected: %s", (unsigned long long)c->id,
			(int)c->pid, (unsigned)c->uid, why);
	else
		log_msg(LOG_INFO, "client %llu (pid %d): gone", (unsigned long long)c->id, (int)c->pid);
	c->gone = true;
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->sock, NULL);
	if (c->efd >= 0)
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->efd, NULL);
	close(c->sock);
	if (c->efd >= 0)
		close(c->efd);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->ready)
		s->n_clients--;

	/* Cancel what it had running; on_done frees each request. */
	uint64_t *ids = NULL;
	int n = 0;
	pthread_mutex_lock(&c->lock);
	c->dead = true;
	if (c->n_reqs && (ids = malloc(sizeof *ids * (size_t)c->n_reqs)))
		for (struct sreq *r = c->reqs; r; r = r->next)
			ids[n++] = r->er.id;
	pthread_mutex_unlock(&c->lock);
	if (n)
		log_msg(LOG_INFO, "client %llu: cancelling %d request(s)", (unsigned long long)c->id, n);
	for (int i = 0; i < n; i++)
		engine_cancel(s->eng, ids[i]);
	free(ids);
	pthread_mutex_lock(&c->lock);
	int refs = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (refs == 0)
		client_release(c);
}

static void free_released(struct server *s)
{
	pthread_mutex_lock(&s->free_lock);
	struct client *l = s->free_list;
	s->free_list = NULL;
	pthread_mutex_unlock(&s->free_lock);
	while (l) {
		struct client *n = l->free_next;
		log_msg(LOG_DEBUG, "client %llu: freed", (unsigned long long)l->id);
		client_free(l);
		l = n;
	}
}

static void send_welcome(int fd, uint32_t status, uint64_t size, uint64_t id, const char *msg, int *fds, int nfds)
{
	struct pg_welcome w;
	memset(&w, 0, sizeof w);
	w.magic = PG_PROTO_MAGIC;
	w.version = PG_PROTO_VERSION;
	w.status = status;
	w.shm_size = size;
	w.client_id = id;
	if (msg)
		snprintf(w.message, sizeof w.message, "%s", msg);
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = { .iov_base = &w, .iov_len = sizeof w };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		memset(&cbuf, 0, sizeof cbuf);
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		log_msg(LOG_DEBUG, "handshake reply: %s", strerror(errno));
}

static void on_accept(struct server *s)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_msg(LOG_ERR, "accept: %s", strerror(errno));
			return;
		}
		struct ucred cr;
		socklen_t cl = sizeof cr;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
			close(fd);
			continue;
		}
		gid_t groups[256];
		socklen_t gl = sizeof groups;
		int ng = 0;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0)
			ng = (int)(gl / sizeof(gid_t));
		uint32_t refuse = 0;
		const char *refuse_msg = NULL;
		if (!policy_allows(&s->pol, cr.uid, cr.gid, groups, ng)) {
			log_msg(LOG_NOTICE, "refused connection from pid %d uid %u gid %u: not allowed by policy",
				(int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
			refuse = PG_E_PERM;
			refuse_msg = "access denied by the pagodad policy (allow-users / allow-group)";
		} else if (atomic_load(&s->draining)) {
			refuse = PG_E_DRAINING;
			refuse_msg = "pagodad is draining: no new connections";
		} else if (s->n_clients >= s->max_clients) {
			log_msg(LOG_WARNING, "refused pid %d: %d clients already", (int)cr.pid, s->n_clients);
			refuse = PG_E_LIMIT;
			refuse_msg = "too many clients";
		}
		struct client *c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			continue;
		}
		c->s = s;
		c->id = ++s->next_client;
		c->sock = fd;
		c->efd = -1;
		c->pid = cr.pid;
		c->uid = cr.uid;
		c->refs = 1;
		c->refuse = refuse;
		c->refuse_msg = refuse_msg;
		pthread_mutex_init(&c->lock, NULL);
		c->w_sock = (struct watch){ W_SOCK, c };
		c->w_efd = (struct watch){ W_EFD, c };
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = &c->w_sock };
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			pthread_mutex_destroy(&c->lock);
			free(c);
			close(fd);
			continue;
		}
		c->next = s->clients;
		if (s->clients)
			s->clients->prev = c;
		s->clients = c;
	}
}

static int client_setup(struct server *s, struct client *c, char *err, size_t errlen)
{
	struct pg_shm_hdr lay;
	memset(&lay, 0, sizeof lay);
	uint64_t size = pg_layout(&lay, PG_SQ_ENTRIES, PG_CQ_ENTRIES, PG_CQ_TEXT_SLOT, s->arena_size);
	lay.n_ctx = s->n_ctx;
	lay.n_vocab = s->n_vocab;
	lay.max_inflight = (uint32_t)s->max_inflight;
	int mfd = memfd_create("pagoda-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0) {
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return -1;
	}
	if (ftruncate(mfd, (off_t)size) < 0) {
		snprintf(err, errlen, "ftruncate: %s", strerror(errno));
		close(mfd);
		return -1;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (m == MAP_FAILED) {
		snprintf(err, errlen, "mmap: %s", strerror(errno));
		close(mfd);
		return -1;
	}
	if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		snprintf(err, errlen, "sealing the memfd: %s", strerror(errno));
		munmap(m, size);
		close(mfd);
		return -1;
	}
	c->map = m;
	c->map_size = size;
	proto_init(&c->pc, m, &lay);
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		close(mfd);
		return -1;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &c->w_efd };
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, c->efd, &ev) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		close(mfd);
		return -1;
	}
	int fds[2] = { mfd, c->efd };
	send_welcome(c->sock, PG_OK, size, c->id, NULL, fds, 2);
	close(mfd);
	c->ready = true;
	s->n_clients++;
	log_msg(LOG_INFO, "client %llu connected: pid %d uid %u, %llu bytes shared", (unsigned long long)c->id,
		(int)c->pid, (unsigned)c->uid, (unsigned long long)size);
	return 0;
}

static void on_sock(struct server *s, struct client *c, uint32_t events)
{
	if (!c->ready && (events & EPOLLIN)) {
		struct pg_hello h;
		ssize_t n = recv(c->sock, &h, sizeof h, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n == 0) {
			client_disconnect(s, c, NULL);
			return;
		}
		if (n != (ssize_t)sizeof h || h.magic != PG_PROTO_MAGIC) {
			client_disconnect(s, c, "malformed hello");
			return;
		}
		if (!c->refuse && atomic_load(&s->draining)) {
			c->refuse = PG_E_DRAINING;
			c->refuse_msg = "pagodad is draining: no new connections";
		}
		if (c->refuse) {
			send_welcome(c->sock, c->refuse, 0, 0, c->refuse_msg, NULL, 0);
			client_disconnect(s, c, NULL);
			return;
		}
		if (h.version != PG_PROTO_VERSION) {
			char m[96];
			snprintf(m, sizeof m, "protocol version %u unsupported (daemon speaks %u)", h.version,
				 PG_PROTO_VERSION);
			send_welcome(c->sock, PG_E_VERSION, 0, 0, m, NULL, 0);
			client_disconnect(s, c, "protocol version mismatch");
			return;
		}
		char err[160];
		if (client_setup(s, c, err, sizeof err) < 0) {
			log_msg(LOG_ERR, "client %llu: %s", (unsigned long long)c->id, err);
			send_welcome(c->sock, PG_E_NOMEM, 0, 0, err, NULL, 0);
			client_disconnect(s, c, "setup failed");
		}
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		client_disconnect(s, c, NULL);
		return;
	}
	if (events & EPOLLIN)
		client_disconnect(s, c, "sent data on the control socket after the handshake");
}

/* A chat request (JSON) rendered with the model's chat template: the text
 * to tokenize, malloc'd, or NULL with the error sent. Its cost grows with
 * the request, like tokenizing: it belongs with tokenization, off the main
 * loop once tokenization moves there. */
static char *render_chat(struct server *s, struct client *c, const struct pg_sqe *e, const char *buf,
			 size_t len, size_t *outlen, bool *add_bos)
{
	char err[PG_MSG_LEN + 1], *text;
	if (!s->chat) {
		emit_error(c, e->req_id, PG_E_INVALID, s->chat_why);
		return NULL;
	}
	if (chat_render(s->chat, buf, len, 0, &text, outlen, NULL, err, sizeof err)) {
		emit_error(c, e->req_id, PG_E_INVALID, err);
		return NULL;
	}
	/* A template that writes bos_token itself gets no second BOS. */
	const char *bos = chat_bos(s->chat);
	*add_bos = tok_add_bos(s->tok) && !(*bos && !strncmp(text, bos, strlen(bos)));
	return text;
}

/* Tokenizes or checks the prompt, then queues it. Main thread. */
static void submit(struct server *s, struct client *c, const struct pg_sqe *e, char *buf, size_t len)
{
	int32_t *ids = NULL, *owned = NULL;
	int n = 0;
	char msg[PG_MSG_LEN + 1];
	char *rendered = NULL;
	bool bos = tok_add_bos(s->tok);
	if (e->flags & PG_SUBMIT_CHAT) {
		if (!(rendered = render_chat(s, c, e, buf, len, &len, &bos)))
			return;
		buf = rendered;
	}
	if (e->flags & PG_SUBMIT_IDS) {
		ids = (int32_t *)buf; /* the caller frees buf */
		n = (int)(len / 4);
		if (proto_check_ids(ids, (size_t)n, s->n_vocab) < 0) {
			emit_error(c, e->req_id, PG_E_INVALID, "token id out of the vocabulary");
			return;
		}
	} else {
		int cap = len < (size_t)INT32_MAX - 8 ? (int)len + 8 : INT32_MAX;
		for (int tries = 0; tries < 2; tries++) {
			ids = malloc(sizeof *ids * (size_t)cap);
			if (!ids) {
				emit_error(c, e->req_id, PG_E_NOMEM, "out of memory tokenizing");
				return;
			}
			n = tok_encode(s->tok, buf, len, bos, true, ids, cap);
			if (n >= 0 || n == TOK_ERR)
				break;
			cap = -n;
			free(ids);
			ids = NULL;
		}
		free(rendered);
		if (n < 0 || !ids) {
			free(ids);
			emit_error(c, e->req_id, PG_E_INVALID, "the prompt cannot be tokenized");
			return;
		}
		owned = ids;
	}
	if (n == 0) {
		emit_error(c, e->req_id, PG_E_INVALID, "empty prompt");
		free(owned);
		return;
	}
	int max_tokens = e->max_tokens;
	if ((e->flags & PG_SUBMIT_CLAMP) && (int64_t)n + max_tokens > s->n_ctx)
		max_tokens = s->n_ctx - n;
	if ((int64_t)n + max_tokens > s->n_ctx || max_tokens <= 0) {
		snprintf(msg, sizeof msg, "prompt (%d tokens) + max_tokens (%d) exceed the context (%d)", n,
			 e->max_tokens, s->n_ctx);
		emit_error(c, e->req_id, PG_E_CONTEXT, msg);
		free(owned);
		return;
	}
	struct sreq *r = calloc(1, sizeof *r);
	if (!r) {
		free(owned);
		emit_error(c, e->req_id, PG_E_NOMEM, "out of memory");
		return;
	}
	r->c = c;
	r->creq = e->req_id;
	r->er.id = atomic_fetch_add(&s->next_gid, 1);
	r->er.prompt = ids;
	r->er.n_prompt = n;
	r->er.max_tokens = max_tokens;
	sampling_defaults(&r->er.sampling);
	r->er.sampling.temp = e->temp;
	r->er.sampling.top_k = e->top_k;
	r->er.sampling.top_p = e->top_p;
	r->er.sampling.min_p = e->min_p;
	r->er.sampling.repeat_penalty = e->repeat_penalty;
	r->er.sampling.repeat_last_n = e->repeat_last_n;
	r->er.sampling.seed = e->seed;
	r->er.n_stop = (int)e->n_stop;
	for (uint32_t i = 0; i < e->n_stop && i < ENGINE_MAX_STOP; i++) {
		memcpy(r->er.stop[i], e->stop[i], e->stop_len[i]);
		r->er.stop[i][e->stop_len[i]] = 0;
	}
	r->er.on_token = on_token;
	r->er.on_done = on_done;
	r->er.user = r;
	pthread_mutex_lock(&c->lock);
	r->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = r;
	c->reqs = r;
	c->n_reqs++;
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&s->inflight, 1);
	log_msg(LOG_DEBUG, "client %llu: request %llu: %d prompt tokens, max %d", (unsigned long long)c->id,
		(unsigned long long)e->req_id, n, e->max_tokens);
	engine_submit(s->eng, &r->er); /* on a refusal on_done has run: r is gone */
	free(owned);
}

static void fill_stats(struct server *s, struct pg_cqe *e)
{
	struct engine_stats st;
	engine_get_stats(s->eng, &st);
	e->u.stats.running = st.running;
	e->u.stats.waiting = st.waiting;
	e->u.stats.clients = s->n_clients;
	e->u.stats.inflight = atomic_load(&s->inflight);
	e->u.stats.kv_blocks_total = st.kv_blocks_total;
	e->u.stats.kv_blocks_used = st.kv_blocks_used;
	e->u.stats.requests_finished = st.requests_finished;
	e->u.stats.gen_tokens = st.gen_tokens;
	e->u.stats.n_ctx = s->n_ctx;
	e->u.stats.draining = atomic_load(&s->draining);
}

static int client_nreqs(struct client *c)
{
	pthread_mutex_lock(&c->lock);
	int n = c->n_reqs;
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* Drains the client's SQ. Returns false if the client was disconnected. */
static bool process_sq(struct server *s, struct client *c)
{
	struct pg_sqe e;
	const char *why;
	char msg[PG_MSG_LEN + 1];
	for (uint32_t budget = c->pc.lay.sq_entries; budget; budget--) {
		int rc = proto_sq_next(&c->pc, &e, &why);
		if (rc < 0) {
			client_disconnect(s, c, why);
			return false;
		}
		if (rc == 0)
			return true;
		rc = proto_sqe_check(&c->pc, &e, msg, sizeof msg);
		if (rc < 0) {
			client_disconnect(s, c, msg);
			return false;
		}
		char *buf = NULL;
		size_t len = 0;
		if (rc == PG_OK && e.op == PG_OP_SUBMIT && proto_copy_prompt(&c->pc, &e, &buf, &len) < 0) {
			rc = PG_E_NOMEM;
			snprintf(msg, sizeof msg, "out of memory copying the prompt");
		}
		proto_sq_consume(&c->pc); /* the arena bytes are ours now */
		if (rc != PG_OK) {
			emit_error(c, e.req_id, (uint32_t)rc, msg);
			continue;
		}
		struct pg_cqe out;
		memset(&out, 0, sizeof out);
		out.req_id = e.req_id;
		out.user = e.user;
		switch (e.op) {
		case PG_OP_NOP:
			out.type = PG_CQE_NOP;
			pthread_mutex_lock(&c->lock);
			emit(c, &out, NULL, 0);
			pthread_mutex_unlock(&c->lock);
			break;
		case PG_OP_STATS:
			out.type = PG_CQE_STATS;
			fill_stats(s, &out);
			pthread_mutex_lock(&c->lock);
			emit(c, &out, NULL, 0);
			pthread_mutex_unlock(&c->lock);
			break;
		case PG_OP_CANCEL: {
			uint64_t ids[64];
			int n = 0;
			pthread_mutex_lock(&c->lock);
			for (struct sreq *r = c->reqs; r && n < 64; r = r->next)
				if (r->creq == e.req_id)
					ids[n++] = r->er.id;
			pthread_mutex_unlock(&c->lock);
			for (int i = 0; i < n; i++)
				engine_cancel(s->eng, ids[i]);
			break;
		}
		case PG_OP_SUBMIT:
			if (atomic_load(&s->draining))
				emit_error(c, e.req_id, PG_E_DRAINING, "pagodad is draining: no new requests");
			else if (client_nreqs(c) >= s->max_inflight)
				emit_error(c, e.req_id, PG_E_BUSY, "too many requests in flight on this connection");
			else
				submit(s, c, &e, buf, len);
			free(buf);
			break;
		}
	}
	/* More may be waiting: come back after the others had their turn. */
	uint64_t one = 1;
	ssize_t w = write(c->efd, &one, sizeof one);
	(void)w;
	return true;
}

static void on_efd(struct server *s, struct client *c)
{
	uint64_t v;
	ssize_t n = read(c->efd, &v, sizeof v);
	(void)n;
	if (!c->ready)
		return;
	if (!process_sq(s, c))
		return;
	pthread_mutex_lock(&c->lock);
	if (c->ovf_head)
		flush_ovf(c);
	pthread_mutex_unlock(&c->lock);
}

/* Disconnects clients the engine thread found broken; flushes overflows. */
static bool sweep(struct server *s)
{
	bool pending = false;
	for (struct client *c = s->clients, *next; c; c = next) {
		next = c->next;
		if (atomic_load(&c->broken)) {
			client_disconnect(s, c, c->why);
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (c->ovf_head)
			flush_ovf(c);
		pending |= c->ovf_head != NULL;
		pthread_mutex_unlock(&c->lock);
	}
	return pending;
}

/* ---- engine thread ---------------------------------------------------------- */
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

/* ---- setup / loop --------------------------------------------------------------- */
static int listen_on(struct server *s, const char *path, char *err, size_t errlen, int mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			close(fd);
			return -1;
		}
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
			close(probe);
			snprintf(err, errlen, "%s: another pagodad is listening there", path);
			close(fd);
			return -1;
		}
		if (probe >= 0)
			close(probe);
		unlink(path); /* stale */
	}
	mode_t old = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (rc < 0) {
		snprintf(err, errlen, "bind %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	chmod(path, (mode_t)mode);
	if (listen(fd, 128) < 0) {
		snprintf(err, errlen, "listen: %s", strerror(errno));
		close(fd);
		unlink(path);
		return -1;
	}
	s->lfd = fd;
	s->own_socket = true;
	snprintf(s->path, sizeof s->path, "%s", path);
	return 0;
}

static int apply_runtime(struct server *s, const struct srv_config *cfg, char *err, size_t errlen)
{
	struct policy p;
	if (policy_init(&p, cfg->allow_group, cfg->allow_users, cfg->allow_any, err, errlen) < 0)
		return -1;
	s->pol = p;
	s->max_clients = cfg->max_clients > 0 ? cfg->max_clients : 256;
	s->max_inflight = cfg->max_inflight > 0 ? cfg->max_inflight : 64;
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
	s->lfd = s->epfd = s->sfd = s->wake_efd = -1;
	if (chat_load(engine_model(e)->gguf, s->tok, cfg->chat_template[0] ? cfg->chat_template : NULL,
		      &s->chat, s->chat_why, sizeof s->chat_why)) {
		s->chat = NULL;
		if (cfg->chat_template[0]) {   /* asked for by name: a mistake to report */
			snprintf(err, errlen, "%s", s->chat_why);
			free(s);
			return -1;
		}
		log_msg(LOG_WARNING, "chat requests refused: %s", s->chat_why);
	}
	pthread_mutex_init(&s->free_lock, NULL);
	atomic_store(&s->next_gid, 1);
	int64_t arena = cfg->arena_size;
	if (arena < 4096)
		arena = 4096;
	if (arena > (1ll << 30))
		arena = 1ll << 30;
	s->arena_size = (uint32_t)((arena + 4095) & ~4095ll);
	if (apply_runtime(s, cfg, err, errlen) < 0)
		goto fail;
	if (listen_fd >= 0) {
		s->lfd = listen_fd;
		fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
	} else if (listen_on(s, path, err, errlen, cfg->socket_mode) < 0)
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
	for (struct client *c = s->clients; c; c = c->next) {
		uint64_t ids[256];
		int n = 0;
		pthread_mutex_lock(&c->lock);
		for (struct sreq *r = c->reqs; r && n < 256; r = r->next)
			ids[n++] = r->er.id;
		pthread_mutex_unlock(&c->lock);
		for (int i = 0; i < n; i++)
			engine_cancel(s->eng, ids[i]);
	}
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
	uint64_t now = now_ns();
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
	sample_rate(s, now_ns());
	s->next_sample_ns = now_ns() + 1000000000ull;
	s->next_status_ns = now_ns() + STATUS_EVERY_NS;
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
			uint64_t t = now_ns();
			if (!drained_at)
				drained_at = t;
			if (s->exit_when_drained && (!pending || t - drained_at > 5000000000ull))
				break;
		}
		int tmo = pending ? 50 : (atomic_load(&s->draining) && s->exit_when_drained ? 200 : -1);
		tmo = min_tmo(tmo, periodic(s));
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
				on_accept(s);
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
				on_sock(s, w->c, evs[i].events);
				break;
			case W_EFD:
				on_efd(s, w->c);
				break;
			case W_BUS:
				break; /* bus_process below */
			}
		}
		bus_process(s->bus);
		pending = sweep(s);
		free_released(s);
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
		client_disconnect(s, s->clients, NULL);
	/* Requests cancelled just now end at the next steps (on_done needs s). */
	for (int i = 0; i < 10000 && atomic_load(&s->inflight) > 0; i++)
		engine_step(s->eng);
	free_released(s);
	pthread_mutex_destroy(&s->free_lock);
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
