/* libclient/pagoda.c — libpagoda: connect, submit, stream, cancel, close. */
#include "libclient/pagoda.h"
#include "libclient/arena.h"
#include "shm/pagoda_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SPIN_ITERS 2000
/* A wait that ends sooner than this would have ended inside the spin. */
#define SPIN_WORTH_NS 30000
#define SLEEP_SLICE_MS 200
#define FULL_WAIT_MS 1000

struct pagoda {
	int sock, efd;
	void *map;
	size_t map_size;
	struct pg_shm_hdr lay;
	struct pg_ring_ctl *sqc, *cqc;
	struct pg_sqe *sq;
	const struct pg_cqe *cq;
	const char *cq_text;
	char *arena;

	pthread_mutex_t sub_lock; /* SQ producer side and the arena allocator */
	uint32_t sq_tail;
	uint64_t next_id;
	struct pg_arena ar;

	pthread_mutex_t con_lock; /* CQ consumer */
	uint32_t cq_head;
	bool pending; /* the last returned CQE is released on the next call */
	bool sleep_first; /* the last wait outlasted a spin: skip the next one */
	char msg[PG_MSG_LEN + 1];
	/* PG_CQE_ALT entries gathered for the TOKEN entry that follows them */
	uint64_t alt_req;
	int n_alt;
	bool alt_given; /* returned with a token: the next ALT starts afresh */
	struct pagoda_top alt[PG_TOP_LOGPROBS];
	char alt_text[PG_TOP_LOGPROBS][PG_CQ_TEXT_SLOT];

	_Atomic int inflight;
	_Atomic bool dead;
};

const char *pagoda_strerror(int err)
{
	switch (err) {
	case PAGODA_OK: return "success";
	case PAGODA_E_INVAL: return "invalid argument";
	case PAGODA_E_CONNECT: return "cannot connect to the pagoda daemon";
	case PAGODA_E_PERM: return "refused by the daemon's access policy";
	case PAGODA_E_VERSION: return "protocol version mismatch with the daemon";
	case PAGODA_E_PROTO: return "malformed message from the daemon";
	case PAGODA_E_DISCONNECTED: return "disconnected from the daemon";
	case PAGODA_E_TIMEOUT: return "timed out";
	case PAGODA_E_AGAIN: return "try again";
	case PAGODA_E_NOMEM: return "out of memory";
	case PAGODA_E_TOOBIG: return "prompt too large for the shared arena";
	case PAGODA_E_BUSY: return "too many requests in flight, or busy";
	case PAGODA_E_CONTEXT: return "request exceeds the model's context";
	case PAGODA_E_DRAINING: return "the daemon is shutting down and refuses new requests";
	case PAGODA_E_INVALID_REQ: return "the daemon refused the request as invalid";
	case PAGODA_E_INTERNAL: return "internal error in the daemon";
	case PAGODA_E_LIMIT: return "the daemon has too many clients";
	}
	return "unknown error";
}

const char *pagoda_finish_name(int f)
{
	switch (f) {
	case PAGODA_FINISH_EOS: return "eos";
	case PAGODA_FINISH_LENGTH: return "length";
	case PAGODA_FINISH_STOP: return "stop";
	case PAGODA_FINISH_CANCEL: return "cancel";
	}
	return "unknown";
}

static int map_err(uint32_t code)
{
	switch (code) {
	case PG_OK: return PAGODA_OK;
	case PG_E_PERM: return PAGODA_E_PERM;
	case PG_E_VERSION: return PAGODA_E_VERSION;
	case PG_E_INVALID: return PAGODA_E_INVALID_REQ;
	case PG_E_CONTEXT: return PAGODA_E_CONTEXT;
	case PG_E_DRAINING: return PAGODA_E_DRAINING;
	case PG_E_NOMEM: return PAGODA_E_NOMEM;
	case PG_E_BUSY: return PAGODA_E_BUSY;
	case PG_E_LIMIT: return PAGODA_E_LIMIT;
	default: return PAGODA_E_INTERNAL;
	}
}

void pagoda_params_init(struct pagoda_params *p)
{
	memset(p, 0, sizeof *p);
	p->max_tokens = 128;
	p->temp = 0;
	p->top_k = 0;
	p->top_p = 1;
	p->min_p = 0;
	p->repeat_penalty = 1;
	p->repeat_last_n = 64;
	p->seed = 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void)
{
	return now_ns() / 1000000;
}

/* The socket is only ever readable at hang-up (the daemon sends nothing). */
static bool sock_hup(pagoda_t *pg)
{
	if (atomic_load_explicit(&pg->dead, memory_order_relaxed))
		return true;
	struct pollfd pfd = { .fd = pg->sock, .events = POLLIN };
	if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR | POLLIN))) {
		atomic_store(&pg->dead, true);
		return true;
	}
	return false;
}

static int default_path(const char *path, char *buf, size_t len)
{
	const char *env = getenv("PAGODA_SOCKET");
	if (path && *path)
		snprintf(buf, len, "%s", path);
	else if (env && *env)
		snprintf(buf, len, "%s", env);
	else if (access("/run/pagoda/pagoda.sock", F_OK) == 0)
		snprintf(buf, len, "/run/pagoda/pagoda.sock");
	else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
		snprintf(buf, len, "%s/pagoda.sock", env);
	else
		return -1;
	return 0;
}

int pagoda_connect(const char *socket_path, pagoda_t **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[sizeof sa.sun_path + 1];
	if (!out)
		return PAGODA_E_INVAL;
	*out = NULL;
	if (default_path(socket_path, path, sizeof path) < 0 || strlen(path) >= sizeof sa.sun_path)
		return PAGODA_E_CONNECT;
	memcpy(sa.sun_path, path, strlen(path) + 1);

	int fds[2] = { -1, -1 }, rc = PAGODA_E_CONNECT;
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return PAGODA_E_CONNECT;
	if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0)
		goto fail;
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct pg_hello hello = { .magic = PG_PROTO_MAGIC, .version = PG_PROTO_VERSION };
	/* A refused peer may find the socket closed already: the refusal is
	 * still waiting to be read, so a failed send is not the last word. */
	bool sent = send(s, &hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello;

	struct pg_welcome w;
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = { .iov_base = &w, .iov_len = sizeof w };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
			     .msg_controllen = sizeof cbuf.buf };
	ssize_t n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
	/* A refused peer gets its refusal at accept, and the daemon closes at
	 * once: when our hello was still unread then, the close is reported
	 * first (ECONNRESET, once), with the refusal queued behind it. */
	if (n < 0 && errno == ECONNRESET) {
		mh.msg_controllen = sizeof cbuf.buf;
		n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			size_t nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nf; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
				if (i < 2 && fds[i] < 0)
					fds[i] = fd;
				else
					close(fd);
			}
		}
	}
	rc = n <= 0 ? (sent ? PAGODA_E_DISCONNECTED : PAGODA_E_CONNECT) : PAGODA_E_PROTO;
	if (n != (ssize_t)sizeof w || w.magic != PG_PROTO_MAGIC || (mh.msg_flags & MSG_CTRUNC))
		goto fail;
	if (w.status != PG_OK) {
		rc = map_err(w.status);
		goto fail;
	}
	if (w.version != PG_PROTO_VERSION || !sent) {
		rc = PAGODA_E_VERSION;
		goto fail;
	}
	struct stat st;
	if (fds[0] < 0 || fds[1] < 0 || fstat(fds[0], &st) < 0 || w.shm_size < sizeof(struct pg_shm_hdr) ||
	    (uint64_t)st.st_size != w.shm_size)
		goto fail;

	pagoda_t *pg = calloc(1, sizeof *pg);
	if (!pg) {
		rc = PAGODA_E_NOMEM;
		goto fail;
	}
	pg->map = mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (pg->map == MAP_FAILED) {
		free(pg);
		rc = PAGODA_E_NOMEM;
		goto fail;
	}
	close(fds[0]);
	fds[0] = -1;
	pg->map_size = w.shm_size;
	memcpy(&pg->lay, pg->map, sizeof pg->lay);
	if (!pg_hdr_valid(&pg->lay, w.shm_size)) {
		munmap(pg->map, pg->map_size);
		free(pg);
		rc = PAGODA_E_VERSION;
		goto fail;
	}
	pg->sock = s;
	pg->efd = fds[1];
	pg->sqc = PG_AT(pg->map, pg->lay.sq_ctl_off, struct pg_ring_ctl);
	pg->cqc = PG_AT(pg->map, pg->lay.cq_ctl_off, struct pg_ring_ctl);
	pg->sq = PG_AT(pg->map, pg->lay.sq_off, struct pg_sqe);
	pg->cq = PG_AT(pg->map, pg->lay.cq_off, struct pg_cqe);
	pg->cq_text = PG_AT(pg->map, pg->lay.cq_text_off, char);
	pg->arena = PG_AT(pg->map, pg->lay.arena_off, char);
	pg->sq_tail = atomic_load(&pg->sqc->tail);
	pg->cq_head = atomic_load(&pg->cqc->head);
	pg->next_id = 1;
	pg_arena_init(&pg->ar, pg->lay.arena_size);
	pthread_mutex_init(&pg->sub_lock, NULL);
	pthread_mutex_init(&pg->con_lock, NULL);
	*out = pg;
	return PAGODA_OK;
fail:
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	close(s);
	return rc;
}

void pagoda_close(pagoda_t *pg)
{
	if (!pg)
		return;
	close(pg->sock);
	close(pg->efd);
	munmap(pg->map, pg->map_size);
	pthread_mutex_destroy(&pg->sub_lock);
	pthread_mutex_destroy(&pg->con_lock);
	free(pg);
}

int pagoda_n_ctx(const pagoda_t *pg) { return pg->lay.n_ctx; }
int pagoda_n_vocab(const pagoda_t *pg) { return pg->lay.n_vocab; }
int pagoda_inflight(const pagoda_t *pg) { return atomic_load(&((pagoda_t *)pg)->inflight); }

/* ---- arena ---------------------------------------------------------------- */
/* Frees arena records whose SQE the daemon has consumed (called locked). */
static void arena_reclaim(pagoda_t *pg)
{
	pg_arena_reclaim(&pg->ar, atomic_load_explicit(&pg->sqc->head, memory_order_acquire));
}

/* Waits (unlocked) a little for the daemon to consume SQEs. */
static int wait_room(pagoda_t *pg, uint64_t deadline)
{
	if (sock_hup(pg))
		return PAGODA_E_DISCONNECTED;
	if (now_ms() >= deadline)
		return PAGODA_E_AGAIN;
	pthread_mutex_unlock(&pg->sub_lock);
	struct timespec ts = { 0, 200000 };
	nanosleep(&ts, NULL);
	pthread_mutex_lock(&pg->sub_lock);
	return 0;
}

static int alloc_locked(pagoda_t *pg, size_t n, uint64_t *rec_id, uint32_t *off)
{
	uint64_t deadline = now_ms() + FULL_WAIT_MS;
	for (;;) {
		arena_reclaim(pg);
		int rc = pg_arena_alloc(&pg->ar, n, rec_id, off);
		if (rc != PAGODA_E_AGAIN)
			return rc;
		if ((rc = wait_room(pg, deadline)) < 0)
			return rc;
	}
}

int pagoda_prompt_alloc(pagoda_t *pg, size_t cap, struct pagoda_prompt *pr)
{
	if (!pg || !pr || cap == 0)
		return PAGODA_E_INVAL;
	uint64_t id;
	uint32_t off;
	pthread_mutex_lock(&pg->sub_lock);
	int rc = alloc_locked(pg, cap, &id, &off);
	pthread_mutex_unlock(&pg->sub_lock);
	if (rc < 0)
		return rc;
	pr->data = pg->arena + off;
	pr->cap = cap;
	pr->priv_[0] = off;
	pr->priv_[1] = id;
	return 0;
}

void pagoda_prompt_discard(pagoda_t *pg, struct pagoda_prompt *pr)
{
	if (!pg || !pr || !pr->data)
		return;
	pthread_mutex_lock(&pg->sub_lock);
	pg_arena_discard(&pg->ar, pr->priv_[1]);
	arena_reclaim(pg);
	pthread_mutex_unlock(&pg->sub_lock);
	pr->data = NULL;
}

/* ---- submission ------------------------------------------------------------ */
static void wake_daemon(pagoda_t *pg)
{
	uint64_t one = 1;
	ssize_t r = write(pg->efd, &one, sizeof one);
	(void)r;
}

/* Pushes *e (locked); rec_id >= 0 marks that arena record submitted. */
static int sq_push_locked(pagoda_t *pg, struct pg_sqe *e, int64_t rec_id)
{
	uint64_t deadline = now_ms() + FULL_WAIT_MS;
	int rc;
	if (sock_hup(pg))
		return PAGODA_E_DISCONNECTED;
	while (pg_ring_space(pg->sqc, pg->lay.sq_entries, pg->sq_tail) == 0)
		if ((rc = wait_room(pg, deadline)) < 0)
			return rc;
	if (e->req_id == 0)
		e->req_id = pg->next_id++;
	memcpy(&pg->sq[pg->sq_tail & (pg->lay.sq_entries - 1)], e, sizeof *e);
	if (rec_id >= 0)
		pg_arena_submitted(&pg->ar, (uint64_t)rec_id, pg->sq_tail);
	pg->sq_tail++;
	pg_ring_publish(pg->sqc, pg->sq_tail);
	wake_daemon(pg);
	return 0;
}

static int fill_params(struct pg_sqe *e, const struct pagoda_params *p)
{
	struct pagoda_params def;
	if (!p) {
		pagoda_params_init(&def);
		p = &def;
	}
	if (p->max_tokens <= 0 || p->n_stop < 0 || p->n_stop > PAGODA_MAX_STOP)
		return PAGODA_E_INVAL;
	if (p->speculative < PAGODA_SPEC_DEFAULT || p->speculative > PAGODA_SPEC_DRAFT || p->draft_max < 0 ||
	    p->draft_max > PG_DRAFT_MAX)
		return PAGODA_E_INVAL;
	_Static_assert((int)PAGODA_SPEC_NGRAM == (int)PG_SPEC_NGRAM && (int)PAGODA_SPEC_DRAFT == (int)PG_SPEC_DRAFT,
		       "enum pagoda_spec is enum pg_spec");
	if (p->top_logprobs < 0 || p->top_logprobs > PAGODA_TOP_LOGPROBS ||
	    (p->top_logprobs && !(p->flags & PAGODA_LOGPROBS)))
		return PAGODA_E_INVAL;
	if (!(fabsf(p->presence_penalty) <= 2) || !(fabsf(p->frequency_penalty) <= 2))
		return PAGODA_E_INVAL;
	if (p->constraint_kind < PAGODA_CONSTRAINT_NONE || p->constraint_kind > PAGODA_CONSTRAINT_GBNF ||
	    (p->constraint_kind && !p->constraint))
		return PAGODA_E_INVAL;
	e->flags |= (uint32_t)p->speculative << PG_SUBMIT_SPEC_SHIFT | (uint32_t)p->draft_max << PG_SUBMIT_DRAFT_SHIFT;
	e->max_tokens = p->max_tokens;
	e->temp = p->temp;
	e->top_k = p->top_k;
	e->top_p = p->top_p;
	e->min_p = p->min_p;
	e->repeat_penalty = p->repeat_penalty;
	e->repeat_last_n = p->repeat_last_n;
	e->seed = p->seed;
	e->cache_scope = p->cache_scope;
	e->n_stop = (uint32_t)p->n_stop;
	for (int i = 0; i < p->n_stop; i++) {
		size_t l = p->stop[i] ? strlen(p->stop[i]) : 0;
		if (l == 0 || l > PG_STOP_LEN)
			return PAGODA_E_INVAL;
		e->stop_len[i] = (uint8_t)l;
		memcpy(e->stop[i], p->stop[i], l);
	}
	return 0;
}

/* The parameters the SQE has no room for, as an arena record of their own
 * (PG_SUBMIT_EXT) when any is set: 0 with *ext_id (-1: none), or an
 * error. Locked. */
static int put_ext(pagoda_t *pg, const struct pagoda_params *p, struct pg_sqe *e, int64_t *ext_id)
{
	*ext_id = -1;
	if (!p || (!p->presence_penalty && !p->frequency_penalty && !p->top_logprobs && !p->constraint_kind))
		return 0;
	size_t clen = !p->constraint_kind ? 0 : p->constraint_len ? p->constraint_len : strlen(p->constraint);
	if (p->constraint_kind && clen == 0)
		return PAGODA_E_INVAL;
	struct pg_submit_ext x = {
		.size = sizeof x,
		.constraint_kind = (uint32_t)p->constraint_kind,
		.constraint_len = (uint32_t)clen,
		.top_logprobs = (uint32_t)p->top_logprobs,
		.presence_penalty = p->presence_penalty,
		.frequency_penalty = p->frequency_penalty,
	};
	if (clen > pg->lay.arena_size - sizeof x)
		return PAGODA_E_TOOBIG;
	uint64_t id;
	uint32_t off;
	int rc = alloc_locked(pg, sizeof x + clen, &id, &off);
	if (rc < 0)
		return rc;
	memcpy(pg->arena + off, &x, sizeof x);
	if (clen)
		memcpy(pg->arena + off + sizeof x, p->constraint, clen);
	e->flags |= PG_SUBMIT_EXT;
	e->user = (uint64_t)off | (uint64_t)(sizeof x + clen) << 32;
	*ext_id = (int64_t)id;
	return 0;
}

/* kind: 0 (text), PG_SUBMIT_IDS or PG_SUBMIT_CHAT. */
static int submit_rec(pagoda_t *pg, uint64_t rec_id, uint32_t off, size_t len, uint32_t kind,
		      const struct pagoda_params *p, uint64_t *req_id)
{
	struct pg_sqe e;
	memset(&e, 0, sizeof e);
	int rc = fill_params(&e, p);
	if (rc < 0)
		return rc;
	e.op = PG_OP_SUBMIT;
	e.flags |= kind | (p && (p->flags & PAGODA_CLAMP_MAX_TOKENS) ? PG_SUBMIT_CLAMP : 0) |
		   (p && (p->flags & PAGODA_LOGPROBS) ? PG_SUBMIT_LOGPROBS : 0);
	e.prompt_off = off;
	e.prompt_len = (uint32_t)len;
	int64_t ext_id;
	if ((rc = put_ext(pg, p, &e, &ext_id)) < 0)
		return rc;
	if ((rc = sq_push_locked(pg, &e, (int64_t)rec_id)) < 0) {
		if (ext_id >= 0) {
			pg_arena_discard(&pg->ar, (uint64_t)ext_id);
			arena_reclaim(pg);
		}
		return rc;
	}
	if (ext_id >= 0) /* same SQ position: freed with the prompt */
		pg_arena_submitted(&pg->ar, (uint64_t)ext_id, pg->sq_tail - 1);
	atomic_fetch_add(&pg->inflight, 1);
	if (req_id)
		*req_id = e.req_id;
	return 0;
}

int pagoda_prompt_submit(pagoda_t *pg, struct pagoda_prompt *pr, size_t len, bool ids,
			 const struct pagoda_params *p, uint64_t *req_id)
{
	if (!pg || !pr || !pr->data || len == 0 || len > pr->cap || (ids && len % 4))
		return PAGODA_E_INVAL;
	pthread_mutex_lock(&pg->sub_lock);
	int rc = submit_rec(pg, pr->priv_[1], (uint32_t)pr->priv_[0], len, ids ? PG_SUBMIT_IDS : 0, p, req_id);
	pthread_mutex_unlock(&pg->sub_lock);
	if (rc == 0)
		pr->data = NULL;
	return rc;
}

static int submit_copy(pagoda_t *pg, const void *src, size_t len, uint32_t kind, const struct pagoda_params *p,
		       uint64_t *req_id)
{
	if (!pg || !src || len == 0)
		return PAGODA_E_INVAL;
	if (len > pg->lay.arena_size)
		return PAGODA_E_TOOBIG;
	if (p && (p->max_tokens <= 0 || p->n_stop < 0 || p->n_stop > PAGODA_MAX_STOP))
		return PAGODA_E_INVAL;
	uint64_t id;
	uint32_t off;
	pthread_mutex_lock(&pg->sub_lock);
	int rc = alloc_locked(pg, len, &id, &off);
	if (rc == 0) {
		memcpy(pg->arena + off, src, len);
		rc = submit_rec(pg, id, off, len, kind, p, req_id);
		if (rc < 0) {
			pg_arena_discard(&pg->ar, id);
			arena_reclaim(pg);
		}
	}
	pthread_mutex_unlock(&pg->sub_lock);
	return rc;
}

int pagoda_submit_text(pagoda_t *pg, const char *text, size_t len, const struct pagoda_params *p,
		       uint64_t *req_id)
{
	return submit_copy(pg, text, len, 0, p, req_id);
}

int pagoda_submit_chat(pagoda_t *pg, const char *json, size_t len, const struct pagoda_params *p,
		       uint64_t *req_id)
{
	return submit_copy(pg, json, len, PG_SUBMIT_CHAT, p, req_id);
}

int pagoda_submit_ids(pagoda_t *pg, const int32_t *ids, size_t n, const struct pagoda_params *p,
		      uint64_t *req_id)
{
	if (n > SIZE_MAX / 4)
		return PAGODA_E_TOOBIG;
	return submit_copy(pg, ids, n * 4, PG_SUBMIT_IDS, p, req_id);
}

static int simple_op(pagoda_t *pg, uint32_t op, uint64_t id, uint64_t *req_id)
{
	if (!pg)
		return PAGODA_E_INVAL;
	struct pg_sqe e;
	memset(&e, 0, sizeof e);
	e.op = op;
	e.req_id = id;
	pthread_mutex_lock(&pg->sub_lock);
	int rc = sq_push_locked(pg, &e, -1);
	pthread_mutex_unlock(&pg->sub_lock);
	if (rc == 0 && req_id)
		*req_id = e.req_id;
	return rc;
}

int pagoda_cancel(pagoda_t *pg, uint64_t req_id)
{
	if (req_id == 0)
		return PAGODA_E_INVAL;
	return simple_op(pg, PG_OP_CANCEL, req_id, NULL);
}
int pagoda_nop(pagoda_t *pg, uint64_t *req_id) { return simple_op(pg, PG_OP_NOP, 0, req_id); }
int pagoda_stats(pagoda_t *pg, uint64_t *req_id) { return simple_op(pg, PG_OP_STATS, 0, req_id); }

/* ---- completion ------------------------------------------------------------ */
static void release_pending(pagoda_t *pg)
{
	if (!pg->pending)
		return;
	pg->pending = false;
	pg->cq_head++;
	pg_ring_release(pg->cqc, pg->cq_head);
	if (atomic_load_explicit(&pg->cqc->flags, memory_order_acquire) & PG_CQ_OVERFLOW)
		wake_daemon(pg);
}

/* A token entry's text (inline or in its slot), or NULL if malformed. */
static const char *cqe_text(const pagoda_t *pg, const struct pg_cqe *c, uint32_t slot, size_t len)
{
	if (c->flags & PG_CQE_F_SLOT)
		return len <= pg->lay.cq_text_slot ? pg->cq_text + (size_t)slot * pg->lay.cq_text_slot : NULL;
	return len <= PG_CQE_INLINE ? c->u.tok.text : NULL;
}

/* Keeps an alternative until its TOKEN entry comes: 1, or PAGODA_E_PROTO. */
static int gather_alt(pagoda_t *pg, const struct pg_cqe *c, uint32_t slot)
{
	size_t len = c->u.tok.len;
	const char *text = cqe_text(pg, c, slot, len);
	if (!text)
		return PAGODA_E_PROTO;
	if (pg->alt_given || pg->alt_req != c->req_id) {
		pg->n_alt = 0;
		pg->alt_given = false;
		pg->alt_req = c->req_id;
	}
	if (pg->n_alt == PG_TOP_LOGPROBS)
		return 1;
	struct pagoda_top *t = &pg->alt[pg->n_alt];
	memcpy(pg->alt_text[pg->n_alt], text, len);
	t->token = c->u.tok.token;
	t->logprob = c->u.tok.logprob;
	t->text = pg->alt_text[pg->n_alt];
	t->len = len;
	pg->n_alt++;
	return 1;
}

/* 0 and *ev, 1 for an entry consumed without an event, or an error. */
static int parse_cqe(pagoda_t *pg, struct pagoda_event *ev)
{
	uint32_t slot = pg->cq_head & (pg->lay.cq_entries - 1);
	const struct pg_cqe *c = &pg->cq[slot];
	memset(ev, 0, sizeof *ev);
	ev->req_id = c->req_id;
	switch (c->type) {
	case PG_CQE_ALT:
		return gather_alt(pg, c, slot);
	case PG_CQE_TOKEN:
		ev->type = PAGODA_EV_TOKEN;
		ev->token = c->u.tok.token;
		ev->len = c->u.tok.len;
		if (c->u.tok.has_logprob && ev->token >= 0) {
			ev->logprob = c->u.tok.logprob;
			ev->has_logprob = true;
		}
		if (!(ev->text = cqe_text(pg, c, slot, ev->len)))
			return PAGODA_E_PROTO;
		if (ev->token >= 0 && pg->n_alt && !pg->alt_given && pg->alt_req == ev->req_id) {
			ev->top = pg->alt;
			ev->n_top = pg->n_alt;
			pg->alt_given = true;
		}
		return 0;
	case PG_CQE_DONE:
		ev->type = PAGODA_EV_DONE;
		ev->finish = (int)c->u.done.finish;
		ev->timings.t_submit_ns = c->u.done.t_submit_ns;
		ev->timings.t_admit_ns = c->u.done.t_admit_ns;
		ev->timings.t_first_ns = c->u.done.t_first_ns;
		ev->timings.t_done_ns = c->u.done.t_done_ns;
		ev->timings.n_prompt = c->u.done.n_prompt;
		ev->timings.n_cached = c->u.done.n_cached;
		ev->timings.n_gen = c->u.done.n_gen;
		ev->timings.n_drafted = c->u.done.n_drafted;
		ev->timings.n_accepted = c->u.done.n_accepted;
		ev->timings.n_passes = c->u.done.n_passes;
		atomic_fetch_sub(&pg->inflight, 1);
		return 0;
	case PG_CQE_ERROR: {
		ev->type = PAGODA_EV_ERROR;
		ev->error = map_err(c->u.error.code);
		size_t l = c->u.error.len < PG_MSG_LEN ? c->u.error.len : PG_MSG_LEN;
		memcpy(pg->msg, c->u.error.msg, l);
		pg->msg[l] = 0;
		ev->text = pg->msg;
		ev->len = l;
		atomic_fetch_sub(&pg->inflight, 1);
		return 0;
	}
	case PG_CQE_NOP:
		ev->type = PAGODA_EV_NOP;
		return 0;
	case PG_CQE_STATS:
		ev->type = PAGODA_EV_STATS;
		ev->stats.running = c->u.stats.running;
		ev->stats.waiting = c->u.stats.waiting;
		ev->stats.clients = c->u.stats.clients;
		ev->stats.inflight = c->u.stats.inflight;
		ev->stats.kv_blocks_total = c->u.stats.kv_blocks_total;
		ev->stats.kv_blocks_used = c->u.stats.kv_blocks_used;
		ev->stats.requests_finished = c->u.stats.requests_finished;
		ev->stats.gen_tokens = c->u.stats.gen_tokens;
		ev->stats.n_ctx = c->u.stats.n_ctx;
		ev->stats.draining = c->u.stats.draining;
		ev->stats.requests_submitted = c->u.stats.requests_submitted;
		ev->stats.requests_failed = c->u.stats.requests_failed;
		ev->stats.requests_cancelled = c->u.stats.requests_cancelled;
		ev->stats.prompt_tokens = c->u.stats.prompt_tokens;
		ev->stats.cached_prompt_tokens = c->u.stats.cached_prompt_tokens;
		ev->stats.preemptions = c->u.stats.preemptions;
		return 0;
	}
	return PAGODA_E_PROTO;
}

static int futex_wait(_Atomic uint32_t *w, uint32_t val, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	return (int)syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

int pagoda_next(pagoda_t *pg, struct pagoda_event *ev, int timeout_ms)
{
	if (!pg || !ev)
		return PAGODA_E_INVAL;
	if (pthread_mutex_trylock(&pg->con_lock) != 0)
		return PAGODA_E_BUSY;
	release_pending(pg);
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout_ms;
	/* Spin only while events come closer together than a spin lasts.
	 * A stream of tokens a step apart would otherwise spin for nothing
	 * before every token, on the cores the daemon computes on. */
	int rc, spins = pg->sleep_first ? SPIN_ITERS : 0;
	uint64_t t_empty = 0;
	for (;;) {
		uint32_t ready = pg_ring_ready(pg->cqc, pg->cq_head);
		if (ready > pg->lay.cq_entries) {
			rc = PAGODA_E_PROTO;
			break;
		}
		if (ready) {
			if (t_empty)
				pg->sleep_first = now_ns() - t_empty > SPIN_WORTH_NS;
			rc = parse_cqe(pg, ev);
			if (rc == 1) { /* kept for the next event: release it now */
				pg->pending = true;
				release_pending(pg);
				continue;
			}
			if (rc == 0)
				pg->pending = true;
			break;
		}
		if (!t_empty && timeout_ms != 0)
			t_empty = now_ns();
		if (spins < SPIN_ITERS && timeout_ms != 0) {
			spins++;
			__builtin_ia32_pause();
			continue;
		}
		if (sock_hup(pg)) {
			/* the daemon may have published its last CQEs before leaving */
			if (pg_ring_ready(pg->cqc, pg->cq_head))
				continue;
			rc = PAGODA_E_DISCONNECTED;
			break;
		}
		uint64_t now = now_ms();
		if (now >= deadline) {
			if (timeout_ms != 0)
				pg->sleep_first = true;
			rc = timeout_ms == 0 ? PAGODA_E_AGAIN : PAGODA_E_TIMEOUT;
			break;
		}
		uint64_t left = deadline - now;
		int ms = left < SLEEP_SLICE_MS ? (int)left : SLEEP_SLICE_MS;
		atomic_fetch_add_explicit(&pg->cqc->waiters, 1, memory_order_seq_cst);
		uint32_t seq = atomic_load_explicit(&pg->cqc->seq, memory_order_seq_cst);
		if (pg_ring_ready(pg->cqc, pg->cq_head) == 0)
			futex_wait(&pg->cqc->seq, seq, ms);
		atomic_fetch_sub_explicit(&pg->cqc->waiters, 1, memory_order_seq_cst);
	}
	pthread_mutex_unlock(&pg->con_lock);
	return rc;
}
