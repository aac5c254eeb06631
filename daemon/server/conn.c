/* daemon/server/conn.c — the listening socket, accept and the peer's
 * credentials, the handshake (hello → welcome with the memfd), and a
 * client's lifetime up to its free.
 *
 * Nothing here waits on a peer: a refused peer (policy, limits, draining)
 * gets its refusal at accept and is closed at once; a peer owes its hello
 * within hello-timeout-ms; connections count against max-clients and
 * max-clients-per-uid from accept on. When the daemon runs out of
 * descriptors, the listener leaves the epoll set until one frees. */
#include "daemon/server/server_int.h"
#include "daemon/server/log.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The last reference went: main frees it between epoll batches, so that
 * watch pointers in a batch stay valid. */
void conn_release(struct client *c)
{
	struct server *s = c->s;
	pthread_mutex_lock(&s->free_lock);
	c->free_next = s->free_list;
	s->free_list = c;
	pthread_mutex_unlock(&s->free_lock);
	srv_wake(s);
}

static struct uacct *uacct_get(struct server *s, uid_t uid, bool create)
{
	for (struct uacct *u = s->uids; u; u = u->next)
		if (u->uid == uid)
			return u;
	if (!create)
		return NULL;
	struct uacct *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	u->uid = uid;
	u->next = s->uids;
	s->uids = u;
	return u;
}

static void uacct_put(struct server *s, struct uacct *u)
{
	if (--u->conns > 0)
		return;
	for (struct uacct **pp = &s->uids; *pp; pp = &(*pp)->next)
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	free(u);
}

static void client_free(struct client *c)
{
	struct server *s = c->s;
	cq_forget(c);
	if (c->map)
		munmap(c->map, c->map_size);
	uacct_put(s, c->ua);
	pthread_mutex_destroy(&c->lock);
	free(c);
	s->n_conns--;
}

static void pend_unlink(struct server *s, struct client *c)
{
	if (c->pprev)
		c->pprev->pnext = c->pnext;
	else if (s->pend_head == c)
		s->pend_head = c->pnext;
	if (c->pnext)
		c->pnext->pprev = c->pprev;
	else if (s->pend_tail == c)
		s->pend_tail = c->pprev;
	c->pnext = c->pprev = NULL;
}

static void listen_resume(struct server *s)
{
	if (!s->listen_paused)
		return;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &s->w_listen };
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) == 0)
		s->listen_paused = false;
}

static void listen_pause(struct server *s, int err)
{
	uint64_t now = srv_now_ns();
	if (!s->fd_short) {
		s->fd_short = true;
		s->fd_short_since_ns = now;
		LOG_RL(LOG_ERR, "accept: %s: not accepting connections until a descriptor frees (%d connections)",
		       strerror(err), s->n_conns);
	}
	if (epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL) == 0)
		s->listen_paused = true;
	s->listen_retry_ns = now + 1000000000ull; /* descriptors may free elsewhere */
}

void conn_disconnect(struct server *s, struct client *c, const char *why)
{
	if (why)
		LOG_RL(LOG_WARNING, "client %llu (pid %d uid %u): disconnected: %s", (unsigned long long)c->id,
		       (int)c->pid, (unsigned)c->uid, why);
	else
		LOG_RL(LOG_INFO, "client %llu (pid %d): gone", (unsigned long long)c->id, (int)c->pid);
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
	else
		pend_unlink(s, c);
	listen_resume(s); /* a descriptor or two just freed */

	/* Cancel what it had running; sq_on_done frees each request. */
	pthread_mutex_lock(&c->lock);
	c->dead = true;
	int n = c->n_reqs;
	pthread_mutex_unlock(&c->lock);
	if (n) {
		LOG_RL(LOG_INFO, "client %llu: cancelling %d request(s)", (unsigned long long)c->id, n);
		sq_cancel(s, c, 0, true);
	}
	pthread_mutex_lock(&c->lock);
	int refs = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (refs == 0)
		conn_release(c);
}

void conn_free_released(struct server *s)
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
	/* Many small frees (queued completions, prompts) leave pages that
	 * glibc keeps: give them back, so an attack leaves no lasting RSS. */
	uint64_t now = srv_now_ns();
	if (atomic_load(&s->trim_owed) >= (1 << 20) && now >= s->next_trim_ns) {
		atomic_store(&s->trim_owed, 0);
		malloc_trim(0);
		s->next_trim_ns = now + 1000000000ull;
	}
}

int conn_timers(struct server *s, uint64_t now)
{
	while (s->pend_head && s->pend_head->hello_deadline_ns <= now)
		conn_disconnect(s, s->pend_head, "no hello in time");
	if (s->listen_paused && now >= s->listen_retry_ns) {
		listen_resume(s);
		s->listen_retry_ns = now + 1000000000ull;
	}
	uint64_t next = UINT64_MAX;
	if (s->pend_head)
		next = s->pend_head->hello_deadline_ns;
	if (s->listen_paused && s->listen_retry_ns < next)
		next = s->listen_retry_ns;
	if (atomic_load(&s->trim_owed) >= (1 << 20) && s->next_trim_ns < next)
		next = s->next_trim_ns > now ? s->next_trim_ns : now;
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

/* version: the one spoken with this peer (a refusal says the daemon's). */
static void send_welcome(int fd, uint32_t version, uint32_t status, uint64_t size, uint64_t id, const char *msg,
			 int *fds, int nfds)
{
	struct pg_welcome w;
	memset(&w, 0, sizeof w);
	w.magic = PG_PROTO_MAGIC;
	w.version = version;
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

/* Tells a refused peer why, and closes. The peer's hello may be unread
 * then, which its side sees as ECONNRESET before the refusal (libpagoda
 * reads on past it); either way the slot is free at once. */
static void refuse(int fd, uint32_t status, const char *msg)
{
	send_welcome(fd, PG_PROTO_VERSION, status, 0, 0, msg, NULL, 0);
	close(fd);
}

void conn_accept(struct server *s)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			int err = errno;
			if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
				listen_pause(s, err);
				return;
			}
			if (err == EAGAIN || err == EWOULDBLOCK) {
				if (s->fd_short) {
					s->fd_short = false;
					LOG_RL(LOG_NOTICE, "accepting connections again (%.1f s short of descriptors)",
					       (double)(srv_now_ns() - s->fd_short_since_ns) / 1e9);
				}
			} else if (err != EINTR && err != ECONNABORTED) {
				LOG_RL(LOG_ERR, "accept: %s", strerror(err));
			}
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
		struct uacct *ua = uacct_get(s, cr.uid, false);
		if (!policy_allows(&s->pol, cr.uid, cr.gid, groups, ng)) {
			LOG_RL(LOG_NOTICE, "refused connection from pid %d uid %u gid %u: not allowed by policy",
			       (int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
			refuse(fd, PG_E_PERM, "access denied by the pagodad policy (allow-users / allow-group)");
			continue;
		}
		if (atomic_load(&s->draining)) {
			refuse(fd, PG_E_DRAINING, "pagodad is draining: no new connections");
			continue;
		}
		if (s->n_conns >= s->max_clients) {
			LOG_RL(LOG_WARNING, "refused pid %d uid %u: %d connections already (max-clients)", (int)cr.pid,
			       (unsigned)cr.uid, s->n_conns);
			refuse(fd, PG_E_LIMIT, "too many clients");
			continue;
		}
		if (ua && ua->conns >= s->max_clients_uid) {
			LOG_RL(LOG_WARNING, "refused pid %d uid %u: %d connections of this uid already (max-clients-per-uid)",
			       (int)cr.pid, (unsigned)cr.uid, ua->conns);
			refuse(fd, PG_E_LIMIT, "too many connections from this user");
			continue;
		}
		struct client *c = calloc(1, sizeof *c);
		if (!c || !(ua = uacct_get(s, cr.uid, true))) {
			free(c);
			refuse(fd, PG_E_NOMEM, "out of memory");
			continue;
		}
		c->s = s;
		c->id = ++s->next_client;
		c->sock = fd;
		c->efd = -1;
		c->pid = cr.pid;
		c->uid = cr.uid;
		c->gid = cr.gid;
		c->ua = ua;
		c->refs = 1;
		pthread_mutex_init(&c->lock, NULL);
		c->w_sock = (struct watch){ W_SOCK, c };
		c->w_efd = (struct watch){ W_EFD, c };
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = &c->w_sock };
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			pthread_mutex_destroy(&c->lock);
			free(c);
			ua->conns++;
			uacct_put(s, ua); /* frees it if it was new */
			refuse(fd, PG_E_NOMEM, "out of memory");
			continue;
		}
		ua->conns++;
		s->n_conns++;
		c->hello_deadline_ns = srv_now_ns() + (uint64_t)s->hello_timeout_ms * 1000000ull;
		c->pprev = s->pend_tail;
		if (s->pend_tail)
			s->pend_tail->pnext = c;
		else
			s->pend_head = c;
		s->pend_tail = c;
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
	lay.version = c->version; /* an older client checks its own */
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
	send_welcome(c->sock, c->version, PG_OK, size, c->id, NULL, fds, 2);
	close(mfd);
	pend_unlink(s, c);
	c->ready = true;
	s->n_clients++;
	LOG_RL(LOG_INFO, "client %llu connected: pid %d uid %u, %llu bytes shared", (unsigned long long)c->id,
		(int)c->pid, (unsigned)c->uid, (unsigned long long)size);
	return 0;
}

void conn_on_sock(struct server *s, struct client *c, uint32_t events)
{
	if (!c->ready && (events & EPOLLIN)) {
		struct pg_hello h;
		ssize_t n = recv(c->sock, &h, sizeof h, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n == 0) {
			conn_disconnect(s, c, NULL);
			return;
		}
		if (n != (ssize_t)sizeof h || h.magic != PG_PROTO_MAGIC) {
			conn_disconnect(s, c, "malformed hello");
			return;
		}
		if (atomic_load(&s->draining)) {
			send_welcome(c->sock, PG_PROTO_VERSION, PG_E_DRAINING, 0, 0, "pagodad is draining: no new connections", NULL, 0);
			conn_disconnect(s, c, NULL);
			return;
		}
		if (h.version < PG_PROTO_VERSION_MIN || h.version > PG_PROTO_VERSION) {
			char m[96];
			snprintf(m, sizeof m, "protocol version %u unsupported (daemon speaks %u to %u)", h.version,
				 PG_PROTO_VERSION_MIN, PG_PROTO_VERSION);
			send_welcome(c->sock, PG_PROTO_VERSION, PG_E_VERSION, 0, 0, m, NULL, 0);
			conn_disconnect(s, c, "protocol version mismatch");
			return;
		}
		c->version = h.version;
		char err[160];
		if (client_setup(s, c, err, sizeof err) < 0) {
			LOG_RL(LOG_ERR, "client %llu: %s", (unsigned long long)c->id, err);
			send_welcome(c->sock, PG_PROTO_VERSION, PG_E_NOMEM, 0, 0, err, NULL, 0);
			conn_disconnect(s, c, "setup failed");
		}
		return;
	}
	if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		conn_disconnect(s, c, NULL);
		return;
	}
	if (events & EPOLLIN)
		conn_disconnect(s, c, "sent data on the control socket after the handshake");
}

/* Tokenizes or checks the prompt, then queues it. Main thread. */
int conn_listen(struct server *s, const char *path, char *err, size_t errlen, int mode)
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

