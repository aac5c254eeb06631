/* shm/pagoda_shm.h — the pagoda wire protocol: one definition for pagodad
 * and libpagoda. Only layout, constants and tiny inline helpers live here;
 * no daemon-only code.
 *
 * Connection
 * ----------
 * 1. The client connects to the control socket (AF_UNIX, SOCK_SEQPACKET) and
 *    sends one struct pg_hello.
 * 2. The daemon reads the peer's credentials (SO_PEERCRED, SO_PEERGROUPS) and
 *    checks them against its policy. A peer is admitted when it is root, when
 *    its uid is the daemon's own uid (the owner), when its uid is listed in
 *    the daemon's `allow-users`, or when its primary or a supplementary group
 *    is the daemon's `allow-group`; with `allow-any = true` everyone is.
 *    Otherwise it gets a struct pg_welcome with status PG_E_PERM and the
 *    socket is closed.
 * 3. An admitted peer gets a struct pg_welcome with status 0 and, by
 *    SCM_RIGHTS, two descriptors: [0] a memfd of welcome.shm_size bytes
 *    (sealed with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, so its size never
 *    changes under a mapping) and [1] an eventfd the client writes to wake
 *    the daemon after it produced submission entries.
 * 4. The socket stays open for the life of the connection: its hang-up is how
 *    each side learns that the other died. Nothing else travels on it.
 *
 * Shared memory (one memfd per client: no client sees another's memory)
 * ---------------------------------------------------------------------
 *   [struct pg_shm_hdr]   written by the daemon before the handshake
 *   [SQ ring control][SQ entries]   client produces, daemon consumes
 *   [CQ ring control][CQ entries]   daemon produces, client consumes
 *   [CQ text slots]       one slot of PG_CQ_TEXT_SLOT bytes per CQ entry,
 *                         for token text longer than fits inline in a CQE
 *   [arena]               prompt bytes; the client alone allocates in it
 *
 * Rings are single-producer single-consumer. head (consumer) and tail
 * (producer) are free-running uint32 counters on their own cache lines; an
 * entry's slot is counter & (entries - 1). The producer writes the entry, then
 * stores tail with release order; the consumer loads tail with acquire order,
 * reads the entry, then stores head with release order.
 *
 * Prompts: the client writes the prompt (UTF-8 text, or int32 token ids in
 * host order) into the arena, then submits an SQE naming its offset and
 * length. The daemon copies each SQE once into its own memory, checks it,
 * copies the prompt out of the arena, and only then advances SQ head: once
 * head has passed an SQE, the client may reuse the arena bytes it named.
 *
 * Wake-ups: client → daemon by writing the eventfd (the daemon has it in its
 * epoll set). Daemon → client by a futex on cq.seq: the daemon bumps seq after
 * publishing CQEs and calls FUTEX_WAKE when cq.waiters is non-zero; the client
 * spins briefly, then increments waiters, re-checks the ring and sleeps in
 * FUTEX_WAIT with a timeout, checking the socket for hang-up between sleeps.
 * When the daemon has completions that do not fit in the CQ it keeps them and
 * sets cq.flags |= PG_CQ_OVERFLOW; a client that frees CQ space while that
 * flag is set writes the eventfd so the daemon flushes them.
 *
 * Every request ends with exactly one final CQE: PG_CQE_DONE or PG_CQE_ERROR.
 *
 * Hostile clients: the daemon never trusts anything in the mapping. It keeps
 * its own copies of the layout and of both ring positions it owns, and
 * disconnects a client whose SQ tail or CQ head moves backwards or past the
 * ring's capacity, or whose SQE names bytes outside the arena, an unknown
 * opcode or invalid parameters (those last get a PG_CQE_ERROR instead when
 * the request id is readable: see PG_E_INVALID).
 */
#ifndef PAGODA_SHM_H
#define PAGODA_SHM_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PG_PROTO_MAGIC 0x41444750u /* "PGDA" little-endian */
/* 2: PG_SUBMIT_CHAT (a chat request the daemon renders with the model's template).
 * 3: PG_SUBMIT_EXT (penalties, top logprobs, a constraint) and PG_CQE_ALT.
 * The daemon also accepts version 2 clients: the layout is the same. */
#define PG_PROTO_VERSION 3u
#define PG_PROTO_VERSION_MIN 2u

#define PG_CACHELINE 64

/* Default geometry chosen by the daemon (the client reads it from the header). */
#define PG_SQ_ENTRIES 64u
#define PG_CQ_ENTRIES 256u
#define PG_CQ_TEXT_SLOT 512u
#define PG_ARENA_SIZE (1u << 20)

#define PG_MAX_STOP 4
#define PG_STOP_LEN 64
#define PG_CQE_INLINE 88
#define PG_MSG_LEN 88

/* Error codes carried by pg_welcome.status and PG_CQE_ERROR.code. */
enum pg_err {
	PG_OK = 0,
	PG_E_PERM = 1,      /* refused by the daemon's policy */
	PG_E_VERSION = 2,   /* protocol version mismatch */
	PG_E_INVALID = 3,   /* malformed request / bad parameters / bad token id */
	PG_E_CONTEXT = 4,   /* prompt + max_tokens exceed the context */
	PG_E_DRAINING = 5,  /* daemon is shutting down, no new requests */
	PG_E_NOMEM = 6,     /* out of memory in the daemon */
	PG_E_BUSY = 7,      /* too many requests in flight on this connection */
	PG_E_INTERNAL = 8,  /* engine error */
	PG_E_LIMIT = 9,     /* too many clients */
};

/* ---- handshake (SOCK_SEQPACKET messages) -------------------------------- */
struct pg_hello {
	uint32_t magic;   /* PG_PROTO_MAGIC */
	uint32_t version; /* PG_PROTO_VERSION */
	uint32_t flags;   /* 0 */
	uint32_t reserved;
};

struct pg_welcome {
	uint32_t magic;
	uint32_t version;
	uint32_t status;   /* enum pg_err */
	uint32_t reserved;
	uint64_t shm_size; /* bytes of the memfd */
	uint64_t client_id;
	char message[128]; /* why, when status != 0; NUL-terminated */
};

/* ---- shared memory ----------------------------------------------------- */
struct pg_ring_ctl {
	alignas(PG_CACHELINE) _Atomic uint32_t head; /* consumer */
	alignas(PG_CACHELINE) _Atomic uint32_t tail; /* producer */
	alignas(PG_CACHELINE) _Atomic uint32_t seq;  /* futex word (CQ: bumped by the daemon) */
	_Atomic uint32_t waiters;                      /* CQ: client threads asleep on seq */
	_Atomic uint32_t flags;                        /* PG_CQ_OVERFLOW */
};
#define PG_CQ_OVERFLOW 1u

enum pg_sqe_op {
	PG_OP_NOP = 1,    /* answered by PG_CQE_NOP with the same req_id/user */
	PG_OP_SUBMIT = 2, /* a generation request */
	PG_OP_CANCEL = 3, /* cancel every request of this connection with req_id */
	PG_OP_STATS = 4,  /* answered by PG_CQE_STATS */
};

#define PG_SUBMIT_IDS 1u   /* the prompt is int32 token ids, not UTF-8 text */
#define PG_SUBMIT_CLAMP 2u /* clamp max_tokens to the context left after the prompt */
/* The prompt is a chat request, a UTF-8 JSON object: {"messages": [...],
 * "tools": [...], "add_generation_prompt": true, other template variables}.
 * The daemon renders it with the model's chat template, then tokenizes the
 * text with special tokens parsed. Not with PG_SUBMIT_IDS. */
#define PG_SUBMIT_CHAT 4u
/* Each sampled token's CQE carries its log-probability (tok.logprob, with
 * tok.has_logprob set). */
#define PG_SUBMIT_LOGPROBS 0x100u
/* Parameters beyond the SQE's: its user word names an arena record, offset
 * in the low 32 bits and length in the high 32, holding a struct
 * pg_submit_ext and after it (at offset ext.size) the constraint's text.
 * The record is the client's again once SQ head passed the SQE. */
#define PG_SUBMIT_EXT 0x200u

enum pg_constraint {
	PG_CONSTRAINT_NONE = 0,
	PG_CONSTRAINT_JSON_SCHEMA = 1,
	PG_CONSTRAINT_REGEX = 2, /* the whole output matches */
	PG_CONSTRAINT_GBNF = 3,  /* llama.cpp's GBNF, start rule "root" */
};
#define PG_TOP_LOGPROBS 20 /* alternatives per token at most */

/* Extensible like the kernel's structs passed by size: a client may send a
 * larger one (a newer header) as long as the bytes this daemon does not
 * know are zero, or a smaller one (an older header; the rest reads 0). */
struct pg_submit_ext {
	uint32_t size;            /* bytes of this struct as the client knows it */
	uint32_t constraint_kind; /* enum pg_constraint */
	uint32_t constraint_len;  /* bytes of constraint text after the struct */
	/* With PG_SUBMIT_LOGPROBS: each TOKEN CQE is preceded by up to this
	 * many PG_CQE_ALT entries, the most likely tokens at that step. */
	uint32_t top_logprobs;
	/* OpenAI's: each generated token's logit drops by presence once it
	 * occurred in the output and by frequency times its count; -2..2. */
	float presence_penalty, frequency_penalty;
	uint32_t reserved[2];     /* 0 */
};
#define PG_SUBMIT_EXT_SIZE0 8u /* the smallest: size and constraint_kind */

/* Speculative decoding (docs/speculative.md), in the submit flags: the
 * drafter, an enum pg_spec, in bits 16-17, and the draft tokens a step
 * verifies, 0..PG_DRAFT_MAX (0: the daemon's setting), in bits 20-24. */
#define PG_SUBMIT_SPEC_SHIFT 16
#define PG_SUBMIT_SPEC_MASK (3u << PG_SUBMIT_SPEC_SHIFT)
#define PG_SUBMIT_DRAFT_SHIFT 20
#define PG_SUBMIT_DRAFT_MASK (31u << PG_SUBMIT_DRAFT_SHIFT)
enum pg_spec {
	PG_SPEC_DEFAULT = 0, /* the daemon's setting */
	PG_SPEC_OFF = 1,
	PG_SPEC_NGRAM = 2,   /* prompt lookup */
	PG_SPEC_DRAFT = 3,   /* the daemon's draft model */
};
#define PG_DRAFT_MAX 16

struct pg_sqe {
	uint32_t op;
	uint32_t flags;
	uint64_t req_id;      /* client's; echoed in every CQE of the request */
	uint64_t user;        /* echoed in NOP/STATS answers; SUBMIT: see PG_SUBMIT_EXT */
	uint32_t prompt_off;  /* in the arena, bytes */
	uint32_t prompt_len;  /* bytes (a multiple of 4 with PG_SUBMIT_IDS) */
	int32_t max_tokens;   /* > 0 */
	int32_t top_k;
	float temp, top_p, min_p, repeat_penalty;
	int32_t repeat_last_n;
	uint32_t n_stop;      /* <= PG_MAX_STOP */
	uint64_t seed;
	uint8_t stop_len[PG_MAX_STOP]; /* 1..PG_STOP_LEN, no NUL bytes */
	/* A scope within the client's own prefix-cache scope (0: none): the
	 * daemon mixes it into the request's cache salt, so a client serving
	 * several tenants (pagoda-gateway, per API key) keeps them apart. It
	 * can narrow a scope, never widen it. Was reserved (0). */
	uint32_t cache_scope;
	char stop[PG_MAX_STOP][PG_STOP_LEN];
};

enum pg_cqe_type {
	PG_CQE_TOKEN = 1,
	PG_CQE_DONE = 2,
	PG_CQE_ERROR = 3,
	PG_CQE_NOP = 4,
	PG_CQE_STATS = 5,
	/* v3: one of a token's top alternatives (u.tok: token, logprob, text
	 * as the vocabulary spells it), most likely first, right before the
	 * TOKEN entry it belongs to. */
	PG_CQE_ALT = 6,
};

#define PG_CQE_F_SLOT 1u /* text is in this entry's CQ text slot */
#define PG_CQE_F_MORE 2u /* text continues in the next CQE (token = -1 there) */

enum pg_finish {
	PG_FINISH_EOS = 1,
	PG_FINISH_LENGTH = 2,
	PG_FINISH_STOP = 3,
	PG_FINISH_CANCEL = 4,
};

struct pg_cqe {
	uint64_t req_id;
	uint64_t user;
	uint32_t type;  /* enum pg_cqe_type */
	uint32_t flags; /* PG_CQE_F_* */
	union {
		struct {
			int32_t token; /* -1 on a continuation */
			uint32_t len;  /* text bytes */
			float logprob;        /* with PG_SUBMIT_LOGPROBS (was reserved) */
			uint32_t has_logprob; /* 1 when logprob is set */
			char text[PG_CQE_INLINE];
		} tok;
		struct {
			uint32_t finish; /* enum pg_finish */
			int32_t n_prompt, n_cached, n_gen;
			uint64_t t_submit_ns, t_admit_ns, t_first_ns, t_done_ns; /* CLOCK_MONOTONIC */
			/* speculative decoding: draft tokens verified, accepted;
			 * model passes that gave tokens (0 from an older daemon) */
			int32_t n_drafted, n_accepted, n_passes;
		} done;
		struct {
			uint32_t code; /* enum pg_err */
			uint32_t len;
			uint32_t reserved[2];
			char msg[PG_MSG_LEN]; /* len bytes, not NUL-terminated */
		} error;
		struct {
			int32_t running, waiting;
			int32_t clients, inflight; /* daemon-wide */
			int64_t kv_blocks_total, kv_blocks_used;
			uint64_t requests_finished, gen_tokens;
			int32_t n_ctx, draining;
			/* since the gateway's metrics; zero from an older daemon */
			uint64_t requests_submitted, requests_failed, requests_cancelled;
			uint64_t prompt_tokens, cached_prompt_tokens, preemptions;
		} stats;
		uint8_t raw[104];
	} u;
};

struct pg_shm_hdr {
	uint32_t magic, version;
	uint64_t size;          /* bytes of the whole mapping */
	uint32_t sq_ctl_off, sq_off, sq_entries, sqe_size;
	uint32_t cq_ctl_off, cq_off, cq_entries, cqe_size;
	uint32_t cq_text_off, cq_text_slot;
	uint32_t arena_off, arena_size;
	int32_t n_ctx, n_vocab;
	uint32_t max_inflight;  /* requests per connection */
	uint32_t reserved;
};

_Static_assert(sizeof(struct pg_cqe) == 128, "CQE is two cache lines");
_Static_assert(sizeof(struct pg_sqe) == 336, "SQE layout");
_Static_assert(sizeof(struct pg_submit_ext) == 32, "extension record layout");
_Static_assert(sizeof(struct pg_ring_ctl) == 3 * PG_CACHELINE, "ring control");

/* The layout the daemon writes for given ring sizes (powers of two). */
static inline uint64_t pg_layout(struct pg_shm_hdr *h, uint32_t sq_entries, uint32_t cq_entries,
				 uint32_t text_slot, uint32_t arena_size)
{
	uint64_t off = 4096; /* header page */
	h->magic = PG_PROTO_MAGIC;
	h->version = PG_PROTO_VERSION;
	h->sq_ctl_off = (uint32_t)off;
	off += sizeof(struct pg_ring_ctl);
	h->sq_off = (uint32_t)off;
	h->sq_entries = sq_entries;
	h->sqe_size = sizeof(struct pg_sqe);
	off += (uint64_t)sq_entries * sizeof(struct pg_sqe);
	off = (off + 4095) & ~(uint64_t)4095;
	h->cq_ctl_off = (uint32_t)off;
	off += sizeof(struct pg_ring_ctl);
	h->cq_off = (uint32_t)off;
	h->cq_entries = cq_entries;
	h->cqe_size = sizeof(struct pg_cqe);
	off += (uint64_t)cq_entries * sizeof(struct pg_cqe);
	h->cq_text_off = (uint32_t)off;
	h->cq_text_slot = text_slot;
	off += (uint64_t)cq_entries * text_slot;
	off = (off + 4095) & ~(uint64_t)4095;
	h->arena_off = (uint32_t)off;
	h->arena_size = arena_size;
	off += arena_size;
	h->size = off;
	return off;
}

static inline int pg_is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

/* A header the client may trust enough to map: every region inside size. */
static inline int pg_hdr_valid(const struct pg_shm_hdr *h, uint64_t size)
{
	if (h->magic != PG_PROTO_MAGIC || h->version != PG_PROTO_VERSION || h->size != size)
		return 0;
	if (!pg_is_pow2(h->sq_entries) || !pg_is_pow2(h->cq_entries))
		return 0;
	if (h->sqe_size != sizeof(struct pg_sqe) || h->cqe_size != sizeof(struct pg_cqe))
		return 0;
	if ((uint64_t)h->sq_ctl_off + sizeof(struct pg_ring_ctl) > size || h->sq_ctl_off % PG_CACHELINE)
		return 0;
	if ((uint64_t)h->cq_ctl_off + sizeof(struct pg_ring_ctl) > size || h->cq_ctl_off % PG_CACHELINE)
		return 0;
	if ((uint64_t)h->sq_off + (uint64_t)h->sq_entries * h->sqe_size > size || h->sq_off % 8)
		return 0;
	if ((uint64_t)h->cq_off + (uint64_t)h->cq_entries * h->cqe_size > size || h->cq_off % 8)
		return 0;
	if ((uint64_t)h->cq_text_off + (uint64_t)h->cq_entries * h->cq_text_slot > size)
		return 0;
	if ((uint64_t)h->arena_off + h->arena_size > size || h->arena_off % 8)
		return 0;
	return 1;
}

#define PG_AT(base, off, type) ((type *)((char *)(base) + (off)))

/* Trusting ring helpers (for the side that owns the other position).
 * Producer: space, then write entries, then publish. */
static inline uint32_t pg_ring_space(struct pg_ring_ctl *c, uint32_t entries, uint32_t my_tail)
{
	return entries - (my_tail - atomic_load_explicit(&c->head, memory_order_acquire));
}
static inline void pg_ring_publish(struct pg_ring_ctl *c, uint32_t new_tail)
{
	atomic_store_explicit(&c->tail, new_tail, memory_order_release);
}
/* Consumer: ready, then read entries, then release. */
static inline uint32_t pg_ring_ready(struct pg_ring_ctl *c, uint32_t my_head)
{
	return atomic_load_explicit(&c->tail, memory_order_acquire) - my_head;
}
static inline void pg_ring_release(struct pg_ring_ctl *c, uint32_t new_head)
{
	atomic_store_explicit(&c->head, new_head, memory_order_release);
}

#endif
