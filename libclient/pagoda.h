/* pagoda.h — libpagoda, the client library of the pagoda daemon (pagodad).
 *
 * Prompts go in and tokens come out through rings in memory shared with the
 * daemon; the library prints nothing and every failure is a returned
 * negative code (pagoda_strerror names it).
 *
 *   pagoda_t *pg;
 *   if (pagoda_connect(NULL, &pg) < 0) ...;            // default socket
 *   struct pagoda_params p; pagoda_params_init(&p);     // greedy, 128 tokens
 *   uint64_t id; pagoda_submit_text(pg, "Once upon", 9, &p, &id);
 *   struct pagoda_event ev;
 *   while (pagoda_next(pg, &ev, -1) == 0 && ev.type == PAGODA_EV_TOKEN)
 *           fwrite(ev.text, 1, ev.len, stdout);          // then DONE or ERROR
 *   pagoda_close(pg);
 *
 * Socket: the path given to pagoda_connect, else $PAGODA_SOCKET, else
 * /run/pagoda/pagoda.sock when it exists, else $XDG_RUNTIME_DIR/pagoda.sock.
 *
 * Access: the daemon admits root, its own uid, the uids of its `allow-users`
 * and members of its `allow-group` (or everyone with `allow-any`); others get
 * PAGODA_E_PERM from pagoda_connect.
 *
 * Events: every request yields zero or more PAGODA_EV_TOKEN events, in order,
 * then exactly one final event, PAGODA_EV_DONE (with a finish reason and
 * timings) or PAGODA_EV_ERROR (with a code). Several requests may be in
 * flight on one connection; their events interleave, told apart by req_id.
 * Token text is UTF-8-safe (never splits a character) and already stripped
 * of stop strings; a token's text may be empty (held back). A token whose
 * text is longer than 512 bytes is delivered as several events, the
 * following ones with token == -1.
 *
 * Thread safety: a pagoda_t may be shared by threads. Submitting functions
 * (pagoda_submit_*, pagoda_prompt_*, pagoda_cancel, pagoda_nop) lock an
 * internal mutex. pagoda_next is the ring's single consumer: call it from one
 * thread at a time (a concurrent call returns PAGODA_E_BUSY); the event's
 * text stays valid until that connection's next pagoda_next or pagoda_close.
 * pagoda_close must not race with any other call on the same pagoda_t.
 * Distinct pagoda_t are independent. After fork, the child must not use the
 * parent's connections (other than to pagoda_close them).
 *
 * If the daemon dies, every call returns PAGODA_E_DISCONNECTED, a blocked
 * pagoda_next within about 200 ms.
 */
#ifndef PAGODA_H
#define PAGODA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pagoda pagoda_t;

enum pagoda_error {
	PAGODA_OK = 0,
	PAGODA_E_INVAL = -1,        /* bad argument */
	PAGODA_E_CONNECT = -2,      /* cannot reach the daemon's socket */
	PAGODA_E_PERM = -3,         /* refused by the daemon's access policy */
	PAGODA_E_VERSION = -4,      /* daemon speaks another protocol version */
	PAGODA_E_PROTO = -5,        /* malformed answer from the daemon */
	PAGODA_E_DISCONNECTED = -6, /* the daemon closed the connection or died */
	PAGODA_E_TIMEOUT = -7,      /* nothing arrived within the timeout */
	PAGODA_E_AGAIN = -8,        /* nothing ready (timeout 0), or rings full */
	PAGODA_E_NOMEM = -9,
	PAGODA_E_TOOBIG = -10,      /* prompt larger than the shared arena */
	PAGODA_E_BUSY = -11,        /* too many requests in flight, or concurrent pagoda_next */
	PAGODA_E_CONTEXT = -12,     /* prompt + max_tokens exceed the model's context */
	PAGODA_E_DRAINING = -13,    /* the daemon is shutting down */
	PAGODA_E_INVALID_REQ = -14, /* the daemon refused the request's contents */
	PAGODA_E_INTERNAL = -15,    /* the daemon failed */
	PAGODA_E_LIMIT = -16,       /* the daemon has too many clients */
};
const char *pagoda_strerror(int err);

#define PAGODA_MAX_STOP 4
#define PAGODA_STOP_LEN 64

struct pagoda_params {
	int max_tokens;        /* > 0; default 128 */
	float temp;            /* 0: greedy (default) */
	int top_k;             /* 0: off (default) */
	float top_p;           /* 1: off */
	float min_p;           /* 0: off */
	float repeat_penalty;  /* 1: off */
	int repeat_last_n;     /* default 64 */
	uint64_t seed;
	int n_stop;            /* <= PAGODA_MAX_STOP */
	const char *stop[PAGODA_MAX_STOP]; /* 1..PAGODA_STOP_LEN bytes each */
	unsigned flags;        /* PAGODA_CLAMP_MAX_TOKENS */
	/* 0, or a scope within this user's prefix cache: requests of other
	 * scopes never share cached prompt blocks with it (for a client that
	 * serves several tenants). */
	uint32_t cache_scope;
	/* Speculative decoding: PAGODA_SPEC_DEFAULT (the daemon's setting),
	 * _OFF, _NGRAM (prompt lookup) or _DRAFT (the daemon's draft model);
	 * the output is the same, only faster where the drafts are right. */
	int speculative;
	int draft_max;         /* draft tokens per step, 0..PAGODA_DRAFT_MAX; 0: the daemon's */
	/* OpenAI's penalties over the output so far, -2..2 (0: off): a token's
	 * logit drops by presence_penalty once it occurred, and by
	 * frequency_penalty times the number of times it did. */
	float presence_penalty, frequency_penalty;
	/* With PAGODA_LOGPROBS: each token event also carries the step's
	 * top_logprobs most likely tokens (0..PAGODA_TOP_LOGPROBS). */
	int top_logprobs;
	/* Structured output (docs/grammar.md): every token keeps the output
	 * inside a JSON Schema, a regular expression (matching the whole
	 * output) or a GBNF grammar, and the end of generation comes only
	 * where it is complete. A constraint that does not compile fails the
	 * request with PAGODA_E_INVALID_REQ naming why. */
	int constraint_kind;    /* enum pagoda_constraint */
	const char *constraint; /* its text */
	size_t constraint_len;  /* 0: strlen(constraint) */
};
enum pagoda_constraint {
	PAGODA_CONSTRAINT_NONE = 0,
	PAGODA_CONSTRAINT_JSON_SCHEMA = 1,
	PAGODA_CONSTRAINT_REGEX = 2,
	PAGODA_CONSTRAINT_GBNF = 3,
};
#define PAGODA_TOP_LOGPROBS 20
#define PAGODA_DRAFT_MAX 16
enum pagoda_spec {
	PAGODA_SPEC_DEFAULT = 0,
	PAGODA_SPEC_OFF = 1,
	PAGODA_SPEC_NGRAM = 2,
	PAGODA_SPEC_DRAFT = 3,
};
/* max_tokens is cut to the context left after the prompt instead of the
 * request failing with PAGODA_E_CONTEXT. */
#define PAGODA_CLAMP_MAX_TOKENS 1u
/* Each token event carries the token's log-probability (has_logprob). */
#define PAGODA_LOGPROBS 2u
void pagoda_params_init(struct pagoda_params *p);

int pagoda_connect(const char *socket_path, pagoda_t **out);
void pagoda_close(pagoda_t *pg);
/* The model's context length and vocabulary size, as the daemon said. */
int pagoda_n_ctx(const pagoda_t *pg);
int pagoda_n_vocab(const pagoda_t *pg);

/* Submit a request; *req_id (may be NULL) gets its id. The prompt is copied
 * into the shared arena. PAGODA_E_AGAIN when the rings stay full for 1 s. */
int pagoda_submit_text(pagoda_t *pg, const char *text, size_t len, const struct pagoda_params *p,
		       uint64_t *req_id);
int pagoda_submit_ids(pagoda_t *pg, const int32_t *ids, size_t n, const struct pagoda_params *p,
		      uint64_t *req_id);
/* A chat request: json (len bytes, UTF-8) is an object
 *   {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": TEXT
 *                  or [{"type": "text", "text": TEXT}, ...], "tool_calls": [...],
 *                  "tool_call_id": ...}, ...],
 *    "tools": [...], "add_generation_prompt": true, other template variables}
 * which the daemon renders with the model's chat template (bos_token and
 * eos_token default to the model's), tokenizes with special tokens parsed,
 * and answers like a text prompt; generation also ends at the model's
 * end-of-turn tokens. A bad request or a template that raises ends in a
 * PAGODA_EV_ERROR (PAGODA_E_INVALID) naming the problem. */
int pagoda_submit_chat(pagoda_t *pg, const char *json, size_t len, const struct pagoda_params *p,
		       uint64_t *req_id);

/* Zero copy: reserve cap bytes of the shared arena, write the prompt there,
 * then submit it (or discard it). data is 4-byte aligned. A prompt buffer
 * must be submitted or discarded before pagoda_close. */
struct pagoda_prompt {
	void *data;
	size_t cap;
	uint64_t priv_[2]; /* private */
};
int pagoda_prompt_alloc(pagoda_t *pg, size_t cap, struct pagoda_prompt *pr);
/* len bytes of text, or len / 4 token ids when ids is true. */
int pagoda_prompt_submit(pagoda_t *pg, struct pagoda_prompt *pr, size_t len, bool ids,
			 const struct pagoda_params *p, uint64_t *req_id);
void pagoda_prompt_discard(pagoda_t *pg, struct pagoda_prompt *pr);

/* Ask the daemon to stop a request; its final event (DONE with
 * PAGODA_FINISH_CANCEL, or whatever came first) still arrives. */
int pagoda_cancel(pagoda_t *pg, uint64_t req_id);
/* An empty round trip: answered by a PAGODA_EV_NOP event with this id. */
int pagoda_nop(pagoda_t *pg, uint64_t *req_id);
/* Asks for the daemon's counters: answered by a PAGODA_EV_STATS event. */
int pagoda_stats(pagoda_t *pg, uint64_t *req_id);

enum pagoda_event_type {
	PAGODA_EV_TOKEN = 1,
	PAGODA_EV_DONE = 2,
	PAGODA_EV_ERROR = 3,
	PAGODA_EV_NOP = 4,
	PAGODA_EV_STATS = 5,
};
enum pagoda_finish {
	PAGODA_FINISH_EOS = 1,
	PAGODA_FINISH_LENGTH = 2,
	PAGODA_FINISH_STOP = 3,
	PAGODA_FINISH_CANCEL = 4,
};
const char *pagoda_finish_name(int finish);

struct pagoda_timings {
	uint64_t t_submit_ns, t_admit_ns, t_first_ns, t_done_ns; /* CLOCK_MONOTONIC */
	int n_prompt, n_cached, n_gen;
	/* speculative decoding: draft tokens verified, of those accepted;
	 * model passes that gave tokens (n_gen / n_passes: tokens per pass) */
	int n_drafted, n_accepted, n_passes;
};
struct pagoda_stats {
	int running, waiting, clients, inflight, n_ctx, draining;
	int64_t kv_blocks_total, kv_blocks_used;
	uint64_t requests_finished, gen_tokens;
	uint64_t requests_submitted, requests_failed, requests_cancelled;
	uint64_t prompt_tokens;        /* of admitted requests */
	uint64_t cached_prompt_tokens; /* of those, found in the prefix cache */
	uint64_t preemptions;
};

struct pagoda_event {
	int type; /* enum pagoda_event_type */
	uint64_t req_id;
	int32_t token;       /* TOKEN */
	const char *text;    /* TOKEN: len bytes, not NUL-terminated; ERROR: message, NUL-terminated */
	size_t len;
	int finish;          /* DONE: enum pagoda_finish */
	int error;           /* ERROR: a negative pagoda_error */
	struct pagoda_timings timings; /* DONE */
	struct pagoda_stats stats;     /* STATS */
	/* TOKEN with PAGODA_LOGPROBS: the token's log-probability under the
	 * model (before sampling's penalties, truncation and temperature) */
	float logprob;
	bool has_logprob;
	/* TOKEN with top_logprobs: the step's most likely tokens, most likely
	 * first, each as the vocabulary spells it (which may be part of a
	 * UTF-8 character); valid as long as text is */
	int n_top;
	const struct pagoda_top *top;
};
struct pagoda_top {
	int32_t token;
	float logprob;
	const char *text;
	size_t len;
};

/* Waits up to timeout_ms (-1: forever, 0: don't wait) for the next event.
 * 0 and *ev filled; PAGODA_E_AGAIN (timeout 0) or PAGODA_E_TIMEOUT when
 * nothing came; PAGODA_E_DISCONNECTED when the daemon is gone. */
int pagoda_next(pagoda_t *pg, struct pagoda_event *ev, int timeout_ms);

/* Requests submitted on this connection whose final event has not yet been
 * returned by pagoda_next. */
int pagoda_inflight(const pagoda_t *pg);

#ifdef __cplusplus
}
#endif
#endif
