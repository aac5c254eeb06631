/* tools/pagoda-gateway/gw.h — pagoda-gateway's rooms: the OpenAI-compatible
 * HTTP gateway in front of pagodad (docs/gateway.md). Every file of this
 * folder includes this header; nothing outside the folder does, but the
 * fuzz target of the request mapping (req.c). */
#ifndef PAGODA_GW_H
#define PAGODA_GW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "libclient/pagoda.h"

/* ---- conf.c: keys of the config file, each also a flag -------------------- */
struct gw_conf {
	char listen[128];        /* ADDR:PORT */
	char socket[256];        /* pagodad's socket ("" = libpagoda's default) */
	char config[256];
	char model_name[128];    /* the id /v1/models shows */
	char api_key_file[256];
	int connections;         /* libpagoda connections */
	int max_connections;     /* HTTP connections at once */
	int max_connections_per_ip;
	int timeout_s;           /* idle HTTP connection */
	int64_t max_body;        /* request body bytes */
	int max_header;          /* bytes of a request's headers (MHD's pool) */
	char bus[16];            /* D-Bus to read pagodad's other counters on */
	bool quiet;
};
void gw_conf_defaults(struct gw_conf *c);
/* Flags first pass finds --config; then the file, then the flags again
 * (flags win). 0, or -1 with the reason in err; 1 for --help. */
int gw_conf_load(struct gw_conf *c, int argc, char **argv, char *err, size_t errlen);
void gw_conf_usage(void);

/* ---- req.c: an OpenAI request body -> a pagoda request -------------------- */
enum gw_kind { GW_COMPLETION = 1, GW_CHAT = 2 };
#define GW_MAX_N 16 /* choices of one request (n) */

struct gw_err {
	int status;          /* HTTP status */
	const char *type;    /* OpenAI error type */
	char param[48];      /* offending field, "" when none */
	char msg[256];
};

struct gw_req {
	enum gw_kind kind;
	bool stream, include_usage;
	bool to_context;            /* no max_tokens: until the end of the context */
	bool seed_set;              /* else the pool draws one (OpenAI: random) */
	struct pagoda_params p;     /* p.stop[] point into stop_buf */
	char stop_buf[PAGODA_MAX_STOP][PAGODA_STOP_LEN + 1];
	/* the prompt: text, ids, or (GW_CHAT) the chat request as JSON */
	char *text;
	size_t text_len;
	int32_t *ids;
	size_t n_ids;
	bool tools;                 /* tools offered: parse tool calls from the reply */
	bool logprobs;              /* each token's log-probability (p.flags has PAGODA_LOGPROBS) */
	char *constraint;           /* response_format's schema (p.constraint points here) */
	int n;                      /* choices: n requests, seeds seed, seed + 1, ... */
};
/* 0, or -1 with err filled (status 400 and OpenAI's wording). */
int gw_req_parse(enum gw_kind kind, const char *body, size_t len, struct gw_req *r, struct gw_err *err);
void gw_req_free(struct gw_req *r);

/* ---- pool.c: connections to pagodad, requests multiplexed ------------------ */
struct gw_pool;
struct gw_call;

/* A sampled token's share of the text (the bytes it released: may be
 * empty while a UTF-8 character or a stop string is held back) and its
 * log-probability. */
struct gw_tok {
	size_t off, len;
	float logprob;
	struct json_t *top; /* with top_logprobs: OpenAI's array of alternatives, owned */
};
/* Frees n tokens' alternatives and the array. */
void gw_toks_free(struct gw_tok *t, int n);

/* What a call has gathered since the last gw_call_take: text of the tokens
 * that arrived, and the end when it came. */
struct gw_take {
	char *text;          /* malloc'd, NUL-terminated (caller frees); may be NULL */
	size_t len;
	int n_tokens;
	struct gw_tok *toks; /* with logprobs: malloc'd (caller frees), offsets into text */
	int n_toks;
	bool final;
	int finish;          /* PAGODA_FINISH_* when final and !error */
	int error;           /* a negative pagoda_error when the request failed */
	char errmsg[128];
	struct pagoda_timings t;
};

int gw_pool_open(const char *socket, int n, struct gw_pool **out);
void gw_pool_close(struct gw_pool *p);
bool gw_pool_up(struct gw_pool *p);  /* a connection to pagodad is open */
int gw_pool_last_error(struct gw_pool *p); /* why the last connect failed (a pagoda_error) */
int gw_pool_n_ctx(struct gw_pool *p);
/* A daemon-wide snapshot (PG_OP_STATS) within timeout_ms. */
int gw_pool_stats(struct gw_pool *p, struct pagoda_stats *st, int timeout_ms);
/* Submits r on the least busy connection. A negative pagoda_error on failure. */
int gw_call_start(struct gw_pool *p, const struct gw_req *r, struct gw_call **out);
/* Waits up to timeout_ms for something new. 0 (t filled, maybe empty) or
 * PAGODA_E_TIMEOUT. */
int gw_call_take(struct gw_call *c, struct gw_take *t, int timeout_ms);
/* Cancels the request unless it ended, and lets go of it. */
void gw_call_release(struct gw_call *c);
/* One thread waiting on several calls (n > 1): each call set to a wake
 * bumps its count when something arrives. Read the count, take from every
 * call (timeout 0), and wait for the count to move when none had anything.
 * A released call no longer touches its wake. */
struct gw_wake;
struct gw_wake *gw_wake_new(void);
void gw_wake_free(struct gw_wake *w);
void gw_call_set_wake(struct gw_call *c, struct gw_wake *w);
uint64_t gw_wake_seq(struct gw_wake *w);
/* 0 when the count is no longer seen, else PAGODA_E_TIMEOUT. */
int gw_wake_wait(struct gw_wake *w, uint64_t seen, int timeout_ms);

/* ---- dbus.c: the daemon's counters beyond its STATS answer ----------------- */
struct gw_bus_metric {
	const char *key;     /* the D-Bus name (Stats() key or property) */
	const char *name, *type, *labels, *help; /* help NULL: as the row before */
	double scale; /* the value times this (0: as read) */
};
#define GW_BUS_N 25
extern const struct gw_bus_metric gw_bus_metrics[GW_BUS_N];
struct gw_bus_vals {
	bool up;             /* the daemon answered on the bus */
	bool full;           /* Stats() (every counter), not the properties */
	bool have[GW_BUS_N];
	double v[GW_BUS_N];
};
struct gw_bus;
/* kind: auto (system, then session), system, session, none (*out NULL). */
int gw_bus_open(const char *kind, struct gw_bus **out, char *err, size_t errlen);
void gw_bus_close(struct gw_bus *b);
/* 0, or a negative errno (v->up false). Thread-safe. */
int gw_bus_read(struct gw_bus *b, struct gw_bus_vals *v);

/* ---- metrics.c: counters and histograms, Prometheus text ------------------- */
void gw_metrics_init(const char *model_name);
void gw_metrics_http(const char *route, int status);
/* A request ended: its timings, measured by the daemon. */
void gw_metrics_done(const struct pagoda_timings *t, int finish);
/* The gap between two tokens of one request as they reached the gateway. */
void gw_metrics_itl(uint64_t ns);
/* The text exposition; st may be NULL (daemon unreachable), bv NULL (no
 * bus). malloc'd. */
char *gw_metrics_render(const struct pagoda_stats *st, bool daemon_up, const struct gw_bus_vals *bv, size_t *len);

/* ---- reply.c: OpenAI's response objects ------------------------------------ */
struct json_t;
/* Text as a JSON string value, invalid UTF-8 replaced by U+FFFD. */
struct json_t *gw_json_text(const char *s, size_t len);
char *gw_error_body(const struct gw_err *e, size_t *len);
const char *gw_finish_name(int finish, bool tool_calls);
/* A tool call reply in Hermes/Qwen (<tool_call>{json}</tool_call>) or
 * Llama 3.x ({"name": ..., "parameters": ...}) form: an array of OpenAI
 * tool_calls, or NULL when the text is not one. */
struct json_t *gw_parse_tool_calls(const char *text, size_t len, char **content, size_t *content_len);
void gw_new_id(char *buf, size_t len, const char *prefix);
/* A streamed reply with tools: the text before a Hermes <tool_call> goes
 * out as it comes (a marker's possible start held back), each call as
 * soon as its </tool_call> arrives; a Llama 3.x reply ('{' or
 * <|python_tag|> first) is held and parsed at the end; a marker that gave
 * no call is text after all. Step after each piece with the whole text so
 * far. */
enum { GW_TCS_TEXT, GW_TCS_HOLD, GW_TCS_CALLS };
struct gw_tcs {
	int mode;
	size_t emitted;   /* text bytes sent as content (or passed over) */
	size_t call_pos;  /* where the next call's segment starts */
	int n_calls;
};
struct gw_tcs_out {
	size_t content_off, content_len; /* content to send now: text[off, off + len) */
	struct json_t *calls;            /* the calls complete now, each with "index" (caller frees) */
};
void gw_tcs_step(struct gw_tcs *t, const char *text, size_t len, bool final, struct gw_tcs_out *o);

/* ---- openapi.c --------------------------------------------------------------- */
extern const char gw_openapi_json[];

/* ---- auth.c: API keys -------------------------------------------------------- */
/* Loads one key a line ('#' comments). 0 or -1 with err. */
int gw_auth_load(const char *path, char *err, size_t errlen);
bool gw_auth_enabled(void);
/* Authorization: "Bearer KEY" against every key, in constant time: -1
 * refused, 0 when no keys are configured, else 1 + the key's line index,
 * the request's prefix-cache scope (each key its own tenant). */
int gw_auth_check(const char *authorization);

/* ---- http.c: the server ------------------------------------------------------ */
struct gw_server;
int gw_http_start(const struct gw_conf *c, struct gw_pool *pool, int listen_fd, struct gw_server **out,
		  char *err, size_t errlen);
void gw_http_stop(struct gw_server *s);

/* ---- api.c: the generation routes -------------------------------------------- */
struct MHD_Connection;
struct MHD_Response;
/* Runs one completion or chat request; returns the response to queue and
 * its status. */
/* scope: the API key's prefix-cache scope (gw_auth_check), 0 none. */
struct MHD_Response *gw_api_generate(struct gw_pool *pool, const struct gw_conf *conf, enum gw_kind kind,
				     const char *body, size_t len, uint32_t scope, struct MHD_Connection *conn,
				     int *status);
struct MHD_Response *gw_api_json_response(char *body, size_t len);
struct MHD_Response *gw_api_error(const struct gw_err *e, int *status);

#endif
