/* tools/pagoda-gateway/api.c — POST /v1/completions and /v1/chat/completions:
 * one pagoda request each, answered whole or streamed as server-sent events
 * (chunks, then a usage chunk when asked, then `data: [DONE]`). A client
 * that goes away cancels its request: its socket is watched while the
 * request waits, and a failed write ends the stream. */
#include "tools/pagoda-gateway/gw.h"

#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define WAIT_MS 200 /* how often a waiting request looks at its client */

struct MHD_Response *gw_api_json_response(char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (r)
		MHD_add_response_header(r, "Content-Type", "application/json");
	else
		free(body);
	return r;
}

struct MHD_Response *gw_api_error(const struct gw_err *e, int *status)
{
	size_t len = 0;
	char *b = gw_error_body(e, &len);
	*status = e->status;
	return b ? gw_api_json_response(b, len) : NULL;
}

static void pagoda_err(struct gw_err *e, int err, const char *msg, int n_ctx)
{
	memset(e, 0, sizeof *e);
	e->status = 500;
	e->type = "server_error";
	switch (err) {
	case PAGODA_E_CONTEXT:
		e->status = 400;
		e->type = "invalid_request_error";
		snprintf(e->msg, sizeof e->msg,
			 "the prompt and max_tokens exceed the model's context of %d tokens%s%s", n_ctx,
			 msg && *msg ? ": " : "", msg ? msg : "");
		return;
	case PAGODA_E_INVALID_REQ:
	case PAGODA_E_INVAL:
	case PAGODA_E_TOOBIG:
		e->status = 400;
		e->type = "invalid_request_error";
		break;
	case PAGODA_E_BUSY:
	case PAGODA_E_AGAIN:
	case PAGODA_E_LIMIT:
		e->status = 429;
		e->type = "rate_limit_error";
		break;
	case PAGODA_E_CONNECT:
	case PAGODA_E_DISCONNECTED:
	case PAGODA_E_DRAINING:
	case PAGODA_E_PERM:
	case PAGODA_E_VERSION:
		e->status = 503;
		break;
	}
	snprintf(e->msg, sizeof e->msg, "%s%s%s", pagoda_strerror(err), msg && *msg ? ": " : "", msg ? msg : "");
}

/* The client hung up (or half-closed: an HTTP client sends nothing more
 * while it waits for its answer). */
static bool client_gone(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The connection's idle timeout guards against slow clients, not slow
 * generation: it is off while a request waits for tokens, and restarts
 * (zero, then the value, resets MHD's timer) when there is data to write. */
static void timeout_off(struct MHD_Connection *conn)
{
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
}

static void timeout_on(struct MHD_Connection *conn, int secs)
{
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)secs);
}

static int conn_fd(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

/* usage of all choices: the prompt counted once (the first choice's), the
 * completions added up */
static json_t *usage_of(const struct pagoda_timings *t, int n)
{
	int gen = 0;
	for (int i = 0; i < n; i++)
		gen += t[i].n_gen;
	json_t *u = json_object(), *d = json_object();
	json_object_set_new(u, "prompt_tokens", json_integer(t[0].n_prompt));
	json_object_set_new(u, "completion_tokens", json_integer(gen));
	json_object_set_new(u, "total_tokens", json_integer(t[0].n_prompt + gen));
	json_object_set_new(d, "cached_tokens", json_integer(t[0].n_cached));
	json_object_set_new(u, "prompt_tokens_details", d);
	return u;
}

static json_t *envelope(const char *id, const char *object, time_t created, const char *model)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(id));
	json_object_set_new(o, "object", json_string(object));
	json_object_set_new(o, "created", json_integer((json_int_t)created));
	json_object_set_new(o, "model", json_string(model));
	return o;
}

/* Chat's logprobs object: {"content": [{"token", "logprob", "bytes",
 * "top_logprobs": []}, ...]}, a token's text being the bytes it released. */
static json_t *logprobs_chat(const char *text, const struct gw_tok *toks, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = json_object(), *bytes = json_array();
		const char *s = text ? text + toks[i].off : "";
		json_object_set_new(o, "token", gw_json_text(s, toks[i].len));
		json_object_set_new(o, "logprob", json_real(toks[i].logprob));
		for (size_t k = 0; k < toks[i].len; k++)
			json_array_append_new(bytes, json_integer((unsigned char)s[k]));
		json_object_set_new(o, "bytes", bytes);
		json_object_set_new(o, "top_logprobs", toks[i].top ? json_incref(toks[i].top) : json_array());
		json_array_append_new(a, o);
	}
	json_t *lp = json_object();
	json_object_set_new(lp, "content", a);
	return lp;
}

/* Characters in n bytes of UTF-8 (bytes that do not continue one). */
static size_t chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; s && i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* Completions' (legacy) logprobs object: parallel arrays, text_offset in
 * characters from the start of the choice's text (base: those before). */
static json_t *logprobs_completion(const char *text, const struct gw_tok *toks, int n, size_t base)
{
	json_t *tk = json_array(), *lp = json_array(), *off = json_array(), *top = json_array();
	bool any_top = false;
	for (int i = 0; i < n; i++) {
		json_array_append_new(tk, gw_json_text(text ? text + toks[i].off : "", toks[i].len));
		json_array_append_new(lp, json_real(toks[i].logprob));
		json_array_append_new(off, json_integer((json_int_t)(base + chars(text, toks[i].off))));
		/* the legacy form of the alternatives: {token: logprob} */
		json_t *alt = json_object();
		size_t k;
		json_t *a;
		json_array_foreach(toks[i].top, k, a) {
			json_t *t = json_object_get(a, "token");
			if (json_is_string(t) && !json_object_get(alt, json_string_value(t)))
				json_object_set(alt, json_string_value(t), json_object_get(a, "logprob"));
		}
		any_top = any_top || toks[i].top;
		json_array_append_new(top, alt);
	}
	json_t *o = json_object();
	json_object_set_new(o, "tokens", tk);
	json_object_set_new(o, "token_logprobs", lp);
	if (any_top)
		json_object_set_new(o, "top_logprobs", top);
	else {
		json_decref(top);
		json_object_set_new(o, "top_logprobs", json_null());
	}
	json_object_set_new(o, "text_offset", off);
	return o;
}

static json_t *logprobs_of(enum gw_kind kind, const char *text, const struct gw_tok *toks, int n, size_t base)
{
	return kind == GW_CHAT ? logprobs_chat(text, toks, n) : logprobs_completion(text, toks, n, base);
}

/* ---- the choices: n requests ---------------------------------------------- */
struct choice {
	struct gw_call *call;
	char *text;              /* whole: the reply; streamed with tools: the text so far */
	size_t len;
	struct gw_tok *toks;     /* whole: every token's logprob */
	int n_toks;
	size_t sent;             /* streamed: characters sent, for text_offset */
	struct gw_tcs tcs;       /* streamed with tools: the tool calls' progress */
	bool done;
	int finish, error;
	char errmsg[128];
	struct pagoda_timings t;
};

static void choices_free(struct choice *ch, int n)
{
	for (int i = 0; ch && i < n; i++) {
		gw_call_release(ch[i].call);
		free(ch[i].text);
		gw_toks_free(ch[i].toks, ch[i].n_toks);
	}
	free(ch);
}

/* Starts the n requests. With n > 1 the first goes alone until its first
 * event (its prompt is then in the prefix cache), so that the others
 * prefill only what the cache lacks. 0, a negative pagoda_error, or 1 when
 * the client went away meanwhile. */
static int choices_start(struct gw_pool *pool, const struct gw_req *r, struct choice *ch, struct gw_wake *w, int fd)
{
	struct gw_req q = *r;
	for (int i = 0; i < r->n; i++) {
		if (i == 1) {
			uint64_t seen = gw_wake_seq(w);
			gw_call_set_wake(ch[0].call, w);
			while (gw_wake_wait(w, seen, WAIT_MS) < 0)
				if (client_gone(fd))
					return 1;
		}
		q.p.seed = r->p.seed + (uint64_t)i;
		int rc = gw_call_start(pool, &q, &ch[i].call);
		if (rc < 0)
			return rc;
		if (w)
			gw_call_set_wake(ch[i].call, w);
	}
	return 0;
}

static void take_end(struct choice *c, const struct gw_take *t)
{
	c->done = true;
	c->finish = t->finish;
	c->error = t->error;
	memcpy(c->errmsg, t->errmsg, sizeof c->errmsg);
	c->t = t->t;
}

/* ---- one answer ------------------------------------------------------------ */
/* Gathers one choice to its end; -1 when the client went away. */
static int gather(struct choice *c, int fd)
{
	struct gw_take t;
	for (;;) {
		if (gw_call_take(c->call, &t, WAIT_MS) < 0) {
			if (client_gone(fd))
				return -1;
			continue;
		}
		bool moved = false;
		if (t.len) {
			char *n = realloc(c->text, c->len + t.len + 1);
			if (!n) {
				t.error = PAGODA_E_NOMEM;
				t.final = true;
			} else {
				c->text = n;
				memcpy(c->text + c->len, t.text, t.len);
				struct gw_tok *nt = t.n_toks ? realloc(c->toks, (size_t)(c->n_toks + t.n_toks) * sizeof *nt)
							     : c->toks;
				if (nt) {
					c->toks = nt;
					for (int i = 0; i < t.n_toks; i++) {
						c->toks[c->n_toks] = t.toks[i];
						c->toks[c->n_toks++].off += c->len;
					}
					moved = true;
				}
				c->len += t.len;
				c->text[c->len] = 0;
			}
		}
		free(t.text);
		if (moved)
			free(t.toks); /* the alternatives moved to c->toks */
		else
			gw_toks_free(t.toks, t.n_toks);
		if (t.final) {
			take_end(c, &t);
			return 0;
		}
	}
}

static json_t *whole_choice(const struct gw_req *r, struct choice *c, int index)
{
	json_t *choice = json_object();
	json_object_set_new(choice, "index", json_integer(index));
	bool calls = false;
	if (r->kind == GW_CHAT) {
		json_t *m = json_object();
		json_object_set_new(m, "role", json_string("assistant"));
		char *content = NULL;
		size_t clen = 0;
		json_t *tc = r->tools ? gw_parse_tool_calls(c->text ? c->text : "", c->len, &content, &clen) : NULL;
		if (tc) {
			calls = true;
			json_object_set_new(m, "content", content ? gw_json_text(content, clen) : json_null());
			json_object_set_new(m, "tool_calls", tc);
			free(content);
		} else {
			json_object_set_new(m, "content", gw_json_text(c->text, c->len));
		}
		json_object_set_new(choice, "message", m);
	} else {
		json_object_set_new(choice, "text", gw_json_text(c->text, c->len));
	}
	json_object_set_new(choice, "logprobs",
			    r->logprobs ? logprobs_of(r->kind, c->text, c->toks, c->n_toks, 0) : json_null());
	json_object_set_new(choice, "finish_reason", json_string(gw_finish_name(c->finish, calls)));
	return choice;
}

static struct MHD_Response *whole(struct gw_pool *pool, const struct gw_conf *conf, const struct gw_req *r,
				  struct choice *ch, struct MHD_Connection *conn, int *status)
{
	int fd = conn_fd(conn);
	for (int i = 0; i < r->n; i++)
		if (gather(&ch[i], fd) < 0)
			return NULL; /* nobody to answer; the requests are cancelled */
	for (int i = 0; i < r->n; i++)
		if (ch[i].error) {
			struct gw_err e;
			pagoda_err(&e, ch[i].error, ch[i].errmsg, gw_pool_n_ctx(pool));
			return gw_api_error(&e, status);
		}
	char id[48];
	gw_new_id(id, sizeof id, r->kind == GW_CHAT ? "chatcmpl-" : "cmpl-");
	json_t *o = envelope(id, r->kind == GW_CHAT ? "chat.completion" : "text_completion", time(NULL),
			     conf->model_name);
	json_t *choices = json_array();
	struct pagoda_timings t[GW_MAX_N];
	for (int i = 0; i < r->n; i++) {
		json_array_append_new(choices, whole_choice(r, &ch[i], i));
		t[i] = ch[i].t;
	}
	json_object_set_new(o, "choices", choices);
	json_object_set_new(o, "usage", usage_of(t, r->n));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return NULL;
	*status = 200;
	return gw_api_json_response(s, strlen(s));
}

/* ---- server-sent events ---------------------------------------------------- */
struct sse {
	struct choice *ch;
	int n, n_done;
	struct gw_wake *wake;    /* n > 1 */
	enum gw_kind kind;
	bool include_usage, tools, done, logprobs;
	int fd, n_ctx, timeout_s;
	struct MHD_Connection *conn;
	char id[48];
	const char *model;
	time_t created;
	char *out;               /* bytes not yet handed to MHD */
	size_t len, off, cap;
};

static void emit_raw(struct sse *s, const char *b, size_t n)
{
	if (s->len + n > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < s->len + n)
			cap *= 2;
		char *o = realloc(s->out, cap);
		if (!o)
			return;
		s->out = o;
		s->cap = cap;
	}
	memcpy(s->out + s->len, b, n);
	s->len += n;
}

/* One event: "data: {json}\n\n"; takes o. */
static void emit(struct sse *s, json_t *o)
{
	char *j = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!j)
		return;
	emit_raw(s, "data: ", 6);
	emit_raw(s, j, strlen(j));
	emit_raw(s, "\n\n", 2);
	free(j);
}

static json_t *chunk(struct sse *s, int index, json_t *delta_or_text, const char *finish)
{
	json_t *o = envelope(s->id, s->kind == GW_CHAT ? "chat.completion.chunk" : "text_completion", s->created,
			     s->model);
	json_t *c = json_object();
	json_object_set_new(c, "index", json_integer(index));
	json_object_set_new(c, s->kind == GW_CHAT ? "delta" : "text", delta_or_text);
	json_object_set_new(c, "logprobs", json_null());
	json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
	json_t *a = json_array();
	json_array_append_new(a, c);
	json_object_set_new(o, "choices", a);
	if (s->include_usage)
		json_object_set_new(o, "usage", json_null());
	return o;
}

/* One content chunk of choice i; toks (n of them, offsets into text) give
 * it logprobs. */
static void emit_text_lp(struct sse *s, int i, const char *text, size_t len, const struct gw_tok *toks, int n)
{
	json_t *o;
	if (s->kind == GW_CHAT) {
		json_t *d = json_object();
		json_object_set_new(d, "content", gw_json_text(text, len));
		o = chunk(s, i, d, NULL);
	} else {
		o = chunk(s, i, gw_json_text(text, len), NULL);
	}
	if (s->logprobs && n)
		json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "logprobs",
				    logprobs_of(s->kind, text, toks, n, s->ch[i].sent));
	s->ch[i].sent += chars(text, len);
	emit(s, o);
}

static void emit_text(struct sse *s, int i, const char *text, size_t len) { emit_text_lp(s, i, text, len, NULL, 0); }

static void emit_error(struct sse *s, const struct choice *c)
{
	struct gw_err e;
	pagoda_err(&e, c->error, c->errmsg, s->n_ctx);
	size_t n;
	char *b = gw_error_body(&e, &n);
	if (b) {
		emit_raw(s, "data: ", 6);
		emit_raw(s, b, n);
		emit_raw(s, "\n\n", 2);
		free(b);
	}
	emit_raw(s, "data: [DONE]\n\n", 14);
	s->done = true;
}

/* Choice i ended: its held tool calls, its finish chunk; after the last
 * one, usage and [DONE]. */
static void emit_end(struct sse *s, int i)
{
	struct choice *c = &s->ch[i];
	if (c->error) {
		emit_error(s, c);
		return;
	}
	bool calls = c->tcs.n_calls > 0;
	const char *fin = gw_finish_name(c->finish, calls);
	emit(s, chunk(s, i, s->kind == GW_CHAT ? json_object() : json_string(""), fin));
	if (++s->n_done < s->n)
		return;
	if (s->include_usage) {
		json_t *o = envelope(s->id, s->kind == GW_CHAT ? "chat.completion.chunk" : "text_completion",
				     s->created, s->model);
		struct pagoda_timings t[GW_MAX_N];
		for (int k = 0; k < s->n; k++)
			t[k] = s->ch[k].t;
		json_object_set_new(o, "choices", json_array());
		json_object_set_new(o, "usage", usage_of(t, s->n));
		emit(s, o);
	}
	emit_raw(s, "data: [DONE]\n\n", 14);
	s->done = true;
}

/* A tool call as OpenAI streams one: its id, type and name with empty
 * arguments, then the arguments. */
static void emit_call(struct sse *s, int i, json_t *call)
{
	json_t *f = json_object_get(call, "function");
	json_t *head = json_object(), *hf = json_object();
	json_object_set(head, "index", json_object_get(call, "index"));
	json_object_set(head, "id", json_object_get(call, "id"));
	json_object_set(head, "type", json_object_get(call, "type"));
	json_object_set(hf, "name", json_object_get(f, "name"));
	json_object_set_new(hf, "arguments", json_string(""));
	json_object_set_new(head, "function", hf);
	json_t *d = json_object(), *a = json_array();
	json_array_append_new(a, head);
	json_object_set_new(d, "tool_calls", a);
	emit(s, chunk(s, i, d, NULL));
	json_t *args = json_object(), *af = json_object();
	json_object_set(args, "index", json_object_get(call, "index"));
	json_object_set(af, "arguments", json_object_get(f, "arguments"));
	json_object_set_new(args, "function", af);
	d = json_object();
	a = json_array();
	json_array_append_new(a, args);
	json_object_set_new(d, "tool_calls", a);
	emit(s, chunk(s, i, d, NULL));
}

/* With tools: what of choice i's text can go out now. */
static void tools_step(struct sse *s, int i, bool final)
{
	struct choice *c = &s->ch[i];
	struct gw_tcs_out o;
	gw_tcs_step(&c->tcs, c->text ? c->text : "", c->len, final, &o);
	if (o.content_len)
		emit_text(s, i, c->text + o.content_off, o.content_len);
	size_t k;
	json_t *call;
	json_array_foreach(o.calls, k, call)
		emit_call(s, i, call);
	json_decref(o.calls);
}

/* Takes what choice i gathered into the stream. */
static void absorb(struct sse *s, int i, struct gw_take *t)
{
	struct choice *c = &s->ch[i];
	if (s->tools) {
		char *h = t->len ? realloc(c->text, c->len + t->len + 1) : c->text;
		if (h && t->len) {
			memcpy(h + c->len, t->text, t->len);
			c->text = h;
			c->len += t->len;
			h[c->len] = 0;
		}
		if (t->len || (t->final && !t->error))
			tools_step(s, i, t->final);
	} else if (t->len || t->n_toks) {
		emit_text_lp(s, i, t->text, t->len, t->toks, t->n_toks);
	}
	free(t->text);
	gw_toks_free(t->toks, t->n_toks);
	t->text = NULL;
	t->toks = NULL;
	if (t->final) {
		take_end(c, t);
		emit_end(s, i);
	}
}

/* Something from any choice into the stream; false when nothing came
 * within WAIT_MS. */
static bool pump(struct sse *s)
{
	struct gw_take t;
	if (s->n == 1) {
		if (gw_call_take(s->ch[0].call, &t, WAIT_MS) < 0)
			return false;
		absorb(s, 0, &t);
		return true;
	}
	uint64_t seen = gw_wake_seq(s->wake);
	bool any = false;
	for (int i = 0; i < s->n && !s->done; i++)
		if (!s->ch[i].done && gw_call_take(s->ch[i].call, &t, 0) == 0) {
			absorb(s, i, &t);
			any = true;
		}
	if (!any && gw_wake_wait(s->wake, seen, WAIT_MS) < 0)
		return false;
	return true;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sse *s = cls;
	for (;;) {
		if (s->off < s->len) {
			timeout_on(s->conn, s->timeout_s);
			size_t n = s->len - s->off < max ? s->len - s->off : max;
			memcpy(buf, s->out + s->off, n);
			s->off += n;
			return (ssize_t)n;
		}
		s->off = s->len = 0;
		if (s->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		timeout_off(s->conn);
		if (!pump(s) && client_gone(s->fd))
			return MHD_CONTENT_READER_END_WITH_ERROR; /* sse_free cancels */
	}
}

static void sse_free(void *cls)
{
	struct sse *s = cls;
	choices_free(s->ch, s->n);
	gw_wake_free(s->wake);
	free(s->out);
	free(s);
}

static struct MHD_Response *streamed(struct gw_pool *pool, const struct gw_conf *conf, const struct gw_req *r,
				     struct sse *s, struct MHD_Connection *conn, int *status)
{
	s->kind = r->kind;
	s->include_usage = r->include_usage;
	s->tools = r->tools;
	s->logprobs = r->logprobs;
	s->conn = conn;
	s->timeout_s = conf->timeout_s;
	s->n_ctx = gw_pool_n_ctx(pool);
	s->model = conf->model_name;
	s->created = time(NULL);
	gw_new_id(s->id, sizeof s->id, r->kind == GW_CHAT ? "chatcmpl-" : "cmpl-");
	if (r->kind == GW_CHAT)
		for (int i = 0; i < s->n; i++) {
			json_t *d = json_object();
			json_object_set_new(d, "role", json_string("assistant"));
			json_object_set_new(d, "content", json_string(""));
			emit(s, chunk(s, i, d, NULL));
		}
	/* The headers wait for the first event, so that a request the daemon
	 * refuses (context, template) gets its HTTP status, not a 200. */
	struct gw_take t;
	while (gw_call_take(s->ch[0].call, &t, WAIT_MS) < 0)
		if (client_gone(s->fd)) {
			sse_free(s);
			return NULL;
		}
	timeout_on(conn, conf->timeout_s);
	if (t.final && t.error) {
		struct gw_err e;
		free(t.text);
		gw_toks_free(t.toks, t.n_toks);
		pagoda_err(&e, t.error, t.errmsg, s->n_ctx);
		sse_free(s);
		return gw_api_error(&e, status);
	}
	absorb(s, 0, &t);
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, s, sse_free);
	if (!resp) {
		sse_free(s);
		return NULL;
	}
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	*status = 200;
	return resp;
}

struct MHD_Response *gw_api_generate(struct gw_pool *pool, const struct gw_conf *conf, enum gw_kind kind,
				     const char *body, size_t len, uint32_t scope, struct MHD_Connection *conn,
				     int *status)
{
	struct gw_req r;
	struct gw_err e;
	if (gw_req_parse(kind, body, len, &r, &e) < 0)
		return gw_api_error(&e, status);
	r.p.cache_scope = scope;
	if (r.n > 1 && !r.seed_set) { /* one random seed, then seed + 1, ... */
		if (getrandom(&r.p.seed, sizeof r.p.seed, 0) != (ssize_t)sizeof r.p.seed)
			r.p.seed = (uint64_t)time(NULL);
		r.seed_set = true;
	}
	struct MHD_Response *resp = NULL;
	struct choice *ch = calloc((size_t)r.n, sizeof *ch);
	struct gw_wake *w = r.n > 1 ? gw_wake_new() : NULL;
	int fd = conn_fd(conn);
	int rc = !ch || (r.n > 1 && !w) ? PAGODA_E_NOMEM : 0;
	timeout_off(conn);
	if (rc == 0)
		rc = choices_start(pool, &r, ch, w, fd);
	if (rc < 0) {
		pagoda_err(&e, rc, NULL, gw_pool_n_ctx(pool));
		resp = gw_api_error(&e, status);
	} else if (rc == 0 && r.stream) {
		struct sse *s = calloc(1, sizeof *s);
		if (s) {
			s->ch = ch;
			s->n = r.n;
			s->wake = w;
			s->fd = fd;
			ch = NULL;
			w = NULL;
			resp = streamed(pool, conf, &r, s, conn, status);
		}
	} else if (rc == 0) {
		resp = whole(pool, conf, &r, ch, conn, status);
	}
	if (!r.stream || rc != 0 || !resp)
		timeout_on(conn, conf->timeout_s);
	choices_free(ch, r.n);
	gw_wake_free(w);
	gw_req_free(&r);
	return resp;
}
