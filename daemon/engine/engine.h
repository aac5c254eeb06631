/* daemon/engine/engine.h — the engine door: a request queue in front of the
 * step loop (schedule → one batched forward → sample → emit).
 *
 * Used in-process by `pagoda run` and by pagodad's IPC server, which only
 * ever talks to the engine through this header. Callbacks run on the thread
 * that drives the engine (engine_step / the engine thread): they must not
 * block, and they must not call engine_submit re-entrantly.
 */
#ifndef PAGODA_ENGINE_H
#define PAGODA_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct tokenizer;
struct engine;
struct spec_drafter;

/* Speculative decoding (docs/speculative.md): which drafter proposes a
 * sequence's next tokens for the model to verify in one pass. */
enum engine_spec {
	ENGINE_SPEC_DEFAULT = 0, /* a request: the engine's default */
	ENGINE_SPEC_OFF = 1,
	ENGINE_SPEC_NGRAM = 2,   /* prompt lookup: what followed the sequence's tail earlier */
	ENGINE_SPEC_DRAFT = 3,   /* a draft model */
};
#define ENGINE_DRAFT_MAX 16 /* draft tokens a sequence verifies per step, at most */
const char *engine_spec_name(enum engine_spec k);
/* "off", "ngram", "draft" (or "none"); -1 for anything else. */
int engine_spec_parse(const char *s);

struct engine_opts {
	const char *model_path;
	const char *backend;  /* "cpu", "cuda", "auto" (kernels/pg_backend.h); NULL: "cpu" */
	int threads;          /* <= 0: all cores */
	int n_ctx;            /* per-sequence context; 0: the model's */
	int max_seqs;         /* running sequences at once; 0: default */
	int max_batch_tokens; /* tokens per step; 0: default */
	int prefill_chunk;    /* prompt tokens per sequence per step; 0: default */
	int64_t kv_blocks;    /* KV pool size in blocks; 0: from kv_mem */
	int64_t kv_mem;       /* KV pool bytes; 0: enough for max_seqs full contexts */
	int block_size;       /* tokens per KV block; 0: 16 */
	bool no_prefix_cache;
	/* The NVMe tier (daemon/kv/tier.h): off without a directory. */
	const char *offload_dir;
	int64_t offload_size; /* bytes of its file; 0: 1 GiB */
	bool offload_sqpoll;
	const char *offload_fault; /* fault injection for tests (kv_tier_fault_help) */
	/* Events an operator should see (the tier falling back or turning
	 * itself off), syslog levels; may be NULL. */
	void (*log)(void *user, int level, const char *msg);
	void *log_user;
	/* Called while loading (stage name, fraction done of that stage), on
	 * the calling thread; may be NULL. */
	void (*progress)(void *user, const char *stage, double frac);
	void *progress_user;
	/* The KV cache's types, as llama.cpp's -ctk/-ctv name them
	 * (PG_KV_TYPE_NAMES, kernels/types.h); NULL: f16. */
	const char *cache_type_k, *cache_type_v;
	/* Speculative decoding: the drafter of requests that name none
	 * (DEFAULT: draft with a draft model, else off), a draft model (a GGUF
	 * with this model's vocabulary, its own KV blocks), and the most draft
	 * tokens a sequence verifies per step (0: 8). */
	enum engine_spec speculative;
	const char *draft_model;
	int draft_max;
	/* A drafter of the caller's, serving ENGINE_SPEC_DRAFT instead of a
	 * draft model (tests); not owned. */
	struct spec_drafter *drafter;
};

struct sampling {
	float temp;           /* 0: greedy */
	int top_k;            /* 0: off */
	float top_p;          /* 1: off */
	float min_p;          /* 0: off */
	float repeat_penalty; /* 1: off */
	int repeat_last_n;    /* tokens looked back; 64 like llama.cpp */
	uint64_t seed;
	/* OpenAI's, over the generated tokens: a logit drops by presence once
	 * its token occurred and by frequency times its count (0: off) */
	float presence_penalty, frequency_penalty;
};

void sampling_defaults(struct sampling *s);

enum finish_reason {
	FINISH_NONE = 0,
	FINISH_EOS,     /* the model ended it */
	FINISH_LENGTH,  /* max_tokens */
	FINISH_STOP,    /* a stop string matched */
	FINISH_CANCEL,  /* engine_cancel */
	FINISH_ERROR,   /* see the error code and message */
};

const char *finish_reason_name(enum finish_reason r);

enum engine_err {
	ENGINE_OK = 0,
	ENGINE_ERR_CONTEXT = 1,  /* prompt + max_tokens exceed the context */
	ENGINE_ERR_INVALID = 2,  /* bad token id, empty prompt, bad parameters */
	ENGINE_ERR_DRAINING = 3, /* the engine no longer admits requests */
	ENGINE_ERR_NOMEM = 4,
};

struct req_timings {
	uint64_t t_submit_ns, t_admit_ns, t_first_ns, t_done_ns; /* CLOCK_MONOTONIC */
	int n_prompt, n_cached, n_gen;
	/* draft tokens verified, of those accepted; model passes that gave
	 * this request tokens (n_gen / n_passes: tokens per pass) */
	int n_drafted, n_accepted, n_passes;
};

#define ENGINE_MAX_STOP 4
#define ENGINE_TOP_LOGPROBS 20
#define ENGINE_STOP_LEN 64

struct engine_req;
typedef void (*engine_token_fn)(struct engine_req *r, int32_t token, const char *text, size_t len);
typedef void (*engine_done_fn)(struct engine_req *r, enum finish_reason why, int err, const char *msg);

/* Filled by the caller; owned by the caller, who must keep it alive until
 * on_done has run (on_done is the last callback for a request, always
 * called exactly once, even for a request refused at submit). */
struct engine_req {
	uint64_t id;               /* caller's; used by engine_cancel */
	const int32_t *prompt;     /* copied at submit */
	int n_prompt;
	int max_tokens;
	struct sampling sampling;
	int n_stop;
	char stop[ENGINE_MAX_STOP][ENGINE_STOP_LEN + 1];
	engine_token_fn on_token;  /* text may be empty (held back for UTF-8 or a stop string) */
	engine_done_fn on_done;
	void *user;
	struct req_timings timings; /* valid in on_done */
	void *priv;                 /* engine's */
	uint64_t cache_salt;        /* prefix-cache scope (kv_seq.salt); 0: global */
	bool want_logprob;          /* set logprob before each on_token of a sampled token */
	float logprob;              /* the token's log-probability (logprob.h) */
	/* Structured output (daemon/grammar/grammar.h): an enum gm_kind (0:
	 * none) and its text (a JSON Schema, a regex, a GBNF grammar), compiled
	 * at submit; a constraint that does not compile refuses the request. */
	int constraint_kind;
	const char *constraint;
	size_t constraint_len;
	enum engine_spec spec;      /* DEFAULT: the engine's */
	int draft_max;              /* 0: the engine's; at most ENGINE_DRAFT_MAX */
	/* With want_logprob: the top_logprobs most likely tokens of each step
	 * and their log-probabilities, most likely first, set with logprob */
	int top_logprobs;           /* 0..ENGINE_TOP_LOGPROBS */
	int n_top;
	int32_t top_ids[ENGINE_TOP_LOGPROBS];
	float top_lp[ENGINE_TOP_LOGPROBS];
};

int engine_create(const struct engine_opts *o, struct engine **out, char *err, size_t errlen);
void engine_destroy(struct engine *e); /* cancels what is left (on_done runs) */

const struct model *engine_model(const struct engine *e);
const struct tokenizer *engine_tokenizer(const struct engine *e);
int engine_n_ctx(const struct engine *e);
/* The backend in one line ("cpu (avx512, 2 threads)"), and for "auto" why
 * it was picked ("picked the CPU: ..."; "" otherwise). */
void engine_backend_describe(const struct engine *e, char *buf, size_t len);
const char *engine_backend_note(const struct engine *e);

/* Thread-safe. Queues r; returns 0, or an enum engine_err after calling
 * on_done with FINISH_ERROR. */
int engine_submit(struct engine *e, struct engine_req *r);
/* Thread-safe. Cancels every request with this id (on_done FINISH_CANCEL). */
void engine_cancel(struct engine *e, uint64_t id);
/* Thread-safe. Refuse new requests from now on (ENGINE_ERR_DRAINING). */
void engine_drain(struct engine *e);
/* Thread-safe. Forget every cached prefix block no request holds; done by
 * the engine thread at its next step. */
void engine_drop_prefix_cache(struct engine *e);

/* Runs one step on the calling thread: admits queued requests, one
 * forward, emits. Returns the number of requests still queued or running. */
int engine_step(struct engine *e);
/* Sleeps until there is work or timeout_ms passes (-1: forever); returns
 * true if there is work. engine_wake interrupts it. */
bool engine_wait(struct engine *e, int timeout_ms);
void engine_wake(struct engine *e);

struct engine_stats {
	uint64_t requests_submitted, requests_finished, requests_failed, requests_cancelled;
	uint64_t prompt_tokens;        /* prompt tokens of admitted requests */
	uint64_t cached_prompt_tokens; /* of those, served from the prefix cache */
	uint64_t prefill_tokens;       /* positions computed in prefill (recomputes too) */
	uint64_t decode_tokens;        /* positions computed one at a time */
	uint64_t gen_tokens;           /* tokens sampled */
	uint64_t steps, preemptions;
	int running, waiting;
	int64_t kv_blocks_total, kv_blocks_used, kv_blocks_cached;
	double kv_waste; /* allocated slots not holding a token / allocated slots */
	uint64_t tier_prompt_tokens; /* of cached_prompt_tokens, read back from the tier */
	struct engine_offload {
		bool enabled, disabled, direct;
		int64_t slots_total, slots_used;
		uint64_t blocks_out, bytes_out, blocks_in, bytes_in, warm_blocks, dropped_writes;
		uint64_t zero_copy_in; /* blocks read straight into the pool */
		uint64_t swap_out_blocks; /* written for preempted sequences */
		uint64_t err_crc, err_short, err_io, err_nospc, err_header;
		uint64_t read_lat_us[16]; /* bucket i: [2^i, 2^(i+1)) us */
		uint64_t zero_copy_out;     /* blocks written straight from the pool */
		uint64_t pool_unregistered; /* 1: the kernel refused to register the pool */
		uint64_t drops;             /* DropPrefixCache reaching the tier */
		bool pool_bufs;             /* the pool is registered with the ring */
		uint64_t ring_cqes;         /* io_uring completions the tier reaped */
	} offload;
	/* latency over the last ENGINE_LAT_WINDOW requests / tokens, in ns */
	uint64_t ttft_p50, ttft_p99, itl_p50, itl_p99;
	/* the KV cache: its types ("f16", "q8_0", ...), the tokens its pool
	 * holds (kv_blocks_total * block size) and a block's bytes */
	const char *kv_type_k, *kv_type_v;
	int64_t kv_tokens_total;
	int64_t kv_block_bytes;
	/* speculative decoding, over the requests that speculate: draft
	 * tokens verified and accepted, model passes that gave them tokens,
	 * and those tokens (spec_tokens / spec_passes: tokens per pass) */
	uint64_t spec_drafted, spec_accepted, spec_passes, spec_tokens;
	char spec_default[8]; /* "off", "ngram", "draft" */
	/* structured output: requests whose constraint compiled (a cache hit
	 * too) and the time that took, masks computed and their CPU time
	 * (every thread's), and the engine thread's time on masks after
	 * forward passes, waiting or computing (the part that slows decoding) */
	uint64_t constraint_requests, constraint_compile_ns;
	uint64_t constraint_masks, constraint_mask_ns, constraint_wait_ns;
};
#define ENGINE_LAT_WINDOW 1024
void engine_get_stats(struct engine *e, struct engine_stats *s); /* thread-safe */

#endif
