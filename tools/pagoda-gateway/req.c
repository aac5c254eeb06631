/* tools/pagoda-gateway/req.c — an OpenAI request body (completions or chat
 * completions) checked and mapped onto a pagoda request: parameters, and the
 * prompt as text, token ids or the chat request the daemon renders. What
 * pagoda cannot do yet is refused with a 400 naming the field, never
 * ignored. tests/fuzz/fuzz_gateway_req.c fuzzes it. */
#include "tools/pagoda-gateway/gw.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(struct gw_err *e, const char *param, const char *fmt, ...)
{
	e->status = 400;
	e->type = "invalid_request_error";
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
}

static int unsupported(struct gw_err *e, const char *param, const char *what)
{
	return fail(e, param, "'%s'%s%s is not supported by pagoda-gateway", param, *what ? " " : "", what);
}

/* The daemon's JSON reader nests at most 128 deep (docs/chat.md): bodies
 * are held well under it. */
#define MAX_DEPTH 64

static int depth(json_t *v)
{
	int d = 0, k;
	size_t i;
	const char *key;
	json_t *x;
	if (json_is_array(v)) {
		json_array_foreach(v, i, x)
			if ((k = depth(x)) > d)
				d = k;
	} else if (json_is_object(v)) {
		json_object_foreach(v, key, x)
			if ((k = depth(x)) > d)
				d = k;
	} else {
		return 0;
	}
	return d + 1;
}

static bool absent(json_t *v) { return !v || json_is_null(v); }

/* A number field within [lo, hi]; absent leaves *out alone. */
static int get_num(json_t *o, const char *k, double lo, double hi, double *out, struct gw_err *e)
{
	json_t *v = json_object_get(o, k);
	if (absent(v))
		return 0;
	if (!json_is_number(v))
		return fail(e, k, "'%s' must be a number", k);
	double d = json_number_value(v);
	if (!(d >= lo && d <= hi))
		return fail(e, k, "'%s' must be between %g and %g, got %g", k, lo, hi, d);
	*out = d;
	return 0;
}

static int get_int(json_t *o, const char *k, json_int_t lo, json_int_t hi, json_int_t *out, struct gw_err *e)
{
	json_t *v = json_object_get(o, k);
	if (absent(v))
		return 0;
	if (!json_is_integer(v))
		return fail(e, k, "'%s' must be an integer", k);
	json_int_t i = json_integer_value(v);
	if (i < lo || i > hi)
		return fail(e, k, "'%s' must be between %lld and %lld, got %lld", k, (long long)lo, (long long)hi,
			    (long long)i);
	*out = i;
	return 0;
}

static int get_bool(json_t *o, const char *k, bool *out, struct gw_err *e)
{
	json_t *v = json_object_get(o, k);
	if (absent(v))
		return 0;
	if (!json_is_boolean(v))
		return fail(e, k, "'%s' must be a boolean", k);
	*out = json_is_true(v);
	return 0;
}

static int add_stop(struct gw_req *r, json_t *s, struct gw_err *e)
{
	if (!json_is_string(s))
		return fail(e, "stop", "'stop' must be a string or an array of strings");
	size_t l = json_string_length(s);
	if (l == 0)
		return 0; /* an empty stop string stops nothing */
	if (l > PAGODA_STOP_LEN)
		return fail(e, "stop", "a stop string may have at most %d bytes", PAGODA_STOP_LEN);
	if (memchr(json_string_value(s), 0, l))
		return fail(e, "stop", "a stop string may not contain NUL");
	if (r->p.n_stop == PAGODA_MAX_STOP)
		return fail(e, "stop", "at most %d stop strings", PAGODA_MAX_STOP);
	memcpy(r->stop_buf[r->p.n_stop], json_string_value(s), l);
	r->stop_buf[r->p.n_stop][l] = 0;
	r->p.stop[r->p.n_stop] = r->stop_buf[r->p.n_stop];
	r->p.n_stop++;
	return 0;
}

/* OpenAI's response_format: "text"; "json_object" (any JSON object);
 * "json_schema" with json_schema.schema. The daemon compiles the schema
 * and refuses, naming the keyword, one it cannot enforce (a 400 here). */
static int response_format(json_t *v, struct gw_req *r, struct gw_err *e)
{
	if (absent(v))
		return 0;
	json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
	if (!json_is_string(t))
		return fail(e, "response_format", "'response_format' must be an object with a 'type'");
	const char *type = json_string_value(t);
	if (!strcmp(type, "text"))
		return 0;
	if (!strcmp(type, "json_object")) {
		r->constraint = strdup("{\"type\":\"object\"}");
	} else if (!strcmp(type, "json_schema")) {
		json_t *js = json_object_get(v, "json_schema");
		json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
		if (!json_is_object(schema) && !json_is_boolean(schema))
			return fail(e, "response_format", "'response_format.json_schema.schema' must be a JSON Schema");
		r->constraint = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
	} else {
		return fail(e, "response_format", "'response_format' type '%s' is not one of text, json_object, json_schema",
			    type);
	}
	if (!r->constraint)
		return fail(e, NULL, "out of memory");
	r->p.constraint_kind = PAGODA_CONSTRAINT_JSON_SCHEMA;
	r->p.constraint = r->constraint;
	return 0;
}

/* The fields both endpoints share. */
static int common(json_t *o, struct gw_req *r, struct gw_err *e)
{
	double d;
	json_int_t i;
	json_t *v;

	if (get_bool(o, "stream", &r->stream, e) < 0)
		return -1;
	v = json_object_get(o, "stream_options");
	if (!absent(v)) {
		if (!json_is_object(v))
			return fail(e, "stream_options", "'stream_options' must be an object");
		if (get_bool(v, "include_usage", &r->include_usage, e) < 0)
			return -1;
	}
	d = 1.0; /* OpenAI's default temperature */
	if (get_num(o, "temperature", 0, 2, &d, e) < 0)
		return -1;
	r->p.temp = (float)d;
	d = 1.0;
	if (get_num(o, "top_p", 0, 1, &d, e) < 0)
		return -1;
	r->p.top_p = d > 0 ? (float)d : 1e-6f; /* top_p 0: the best token alone */
	i = 0;
	if (get_int(o, "top_k", -1, 1 << 30, &i, e) < 0)
		return -1;
	r->p.top_k = i < 0 ? 0 : (int)i; /* vLLM's -1 and 0 both mean off */
	d = 0;
	if (get_num(o, "min_p", 0, 1, &d, e) < 0)
		return -1;
	r->p.min_p = (float)d;
	d = 1.0;
	if (get_num(o, "repetition_penalty", 0.01, 100, &d, e) < 0)
		return -1;
	r->p.repeat_penalty = (float)d;
	v = json_object_get(o, "seed");
	if (!absent(v)) {
		if (!json_is_integer(v))
			return fail(e, "seed", "'seed' must be an integer");
		r->p.seed = (uint64_t)json_integer_value(v);
		r->seed_set = true;
	}
	/* max_completion_tokens is the chat API's newer name for max_tokens */
	i = 0;
	if (get_int(o, "max_tokens", 1, 1 << 24, &i, e) < 0 ||
	    get_int(o, "max_completion_tokens", 1, 1 << 24, &i, e) < 0)
		return -1;
	if (i > 0) {
		r->p.max_tokens = (int)i;
		r->to_context = false;
	}
	v = json_object_get(o, "stop");
	if (json_is_array(v)) {
		size_t k;
		json_t *s;
		json_array_foreach(v, k, s)
			if (add_stop(r, s, e) < 0)
				return -1;
	} else if (!absent(v) && add_stop(r, v, e) < 0) {
		return -1;
	}
	i = 1;
	if (get_int(o, "n", 1, GW_MAX_N, &i, e) < 0)
		return -1;
	r->n = (int)i;
	d = 0;
	if (get_num(o, "presence_penalty", -2, 2, &d, e) < 0)
		return -1;
	r->p.presence_penalty = (float)d;
	d = 0;
	if (get_num(o, "frequency_penalty", -2, 2, &d, e) < 0)
		return -1;
	r->p.frequency_penalty = (float)d;
	v = json_object_get(o, "logit_bias");
	if (!absent(v) && !(json_is_object(v) && json_object_size(v) == 0))
		return unsupported(e, "logit_bias", "");
	return response_format(json_object_get(o, "response_format"), r, e);
}

/* ---- completions ----------------------------------------------------------- */
static int ids_from(json_t *a, struct gw_req *r, struct gw_err *e)
{
	size_t n = json_array_size(a);
	if (n == 0)
		return fail(e, "prompt", "'prompt' is empty");
	if (!(r->ids = malloc(n * sizeof *r->ids)))
		return fail(e, NULL, "out of memory");
	for (size_t k = 0; k < n; k++) {
		json_t *t = json_array_get(a, k);
		if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
			return fail(e, "prompt", "a prompt of token ids holds non-negative integers only");
		r->ids[k] = (int32_t)json_integer_value(t);
	}
	r->n_ids = n;
	return 0;
}

static int text_from(json_t *s, struct gw_req *r, struct gw_err *e)
{
	size_t l = json_string_length(s);
	if (l == 0)
		return fail(e, "prompt", "'prompt' is empty");
	if (!(r->text = malloc(l + 1)))
		return fail(e, NULL, "out of memory");
	memcpy(r->text, json_string_value(s), l + 1);
	r->text_len = l;
	return 0;
}

static int completion(json_t *o, struct gw_req *r, struct gw_err *e)
{
	json_t *v = json_object_get(o, "prompt");
	if (absent(v))
		return fail(e, "prompt", "'prompt' is required");
	if (json_is_string(v))
		return text_from(v, r, e);
	if (!json_is_array(v))
		return fail(e, "prompt", "'prompt' must be a string, an array of token ids, or an array of one of them");
	json_t *first = json_array_get(v, 0);
	if (!first)
		return fail(e, "prompt", "'prompt' is empty");
	if (json_is_integer(first))
		return ids_from(v, r, e);
	if (json_array_size(v) != 1)
		return fail(e, "prompt", "one prompt per request: batches of prompts are not supported");
	if (json_is_string(first))
		return text_from(first, r, e);
	if (json_is_array(first))
		return ids_from(first, r, e);
	return fail(e, "prompt", "'prompt' must be a string, an array of token ids, or an array of one of them");
}

static int completion_only(json_t *o, struct gw_err *e)
{
	bool echo = false;
	if (get_bool(o, "echo", &echo, e) < 0)
		return -1;
	if (echo)
		return unsupported(e, "echo", "true");
	json_int_t best = 1;
	if (get_int(o, "best_of", 1, 1 << 20, &best, e) < 0)
		return -1;
	if (best != 1)
		return unsupported(e, "best_of", "other than 1");
	json_t *v = json_object_get(o, "suffix");
	if (!absent(v) && !(json_is_string(v) && json_string_length(v) == 0))
		return unsupported(e, "suffix", "");
	return 0;
}

/* Completions' logprobs is a count of top alternatives; 0 gives each
 * sampled token's own. */
static int completion_logprobs(json_t *o, struct gw_req *r, struct gw_err *e)
{
	json_int_t lp = -1;
	if (get_int(o, "logprobs", 0, PAGODA_TOP_LOGPROBS, &lp, e) < 0)
		return -1;
	if (lp >= 0) {
		r->logprobs = true;
		r->p.flags |= PAGODA_LOGPROBS;
		r->p.top_logprobs = (int)lp;
	}
	return 0;
}

/* ---- chat -------------------------------------------------------------------- */
/* content: a string, or text parts joined. An assistant message that only
 * calls tools may have none: it becomes "", as templates apply string
 * tests ('x' in content) to it (vLLM does the same). */
static json_t *content_of(json_t *m, const char *role, struct gw_err *e)
{
	json_t *c = json_object_get(m, "content");
	if (absent(c)) {
		if (!strcmp(role, "assistant"))
			return json_string("");
		fail(e, "messages", "a '%s' message needs 'content'", role);
		return NULL;
	}
	if (json_is_string(c))
		return json_incref(c);
	if (!json_is_array(c)) {
		fail(e, "messages", "'content' must be a string or an array of text parts");
		return NULL;
	}
	size_t n = 0, k;
	json_t *part;
	json_array_foreach(c, k, part) {
		json_t *t = json_is_object(part) ? json_object_get(part, "type") : NULL;
		json_t *x = json_is_object(part) ? json_object_get(part, "text") : NULL;
		if (!json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(x)) {
			fail(e, "messages", "content parts other than {\"type\": \"text\", \"text\": ...} are not supported");
			return NULL;
		}
		n += json_string_length(x);
	}
	char *buf = malloc(n + 1), *p = buf;
	if (!buf) {
		fail(e, NULL, "out of memory");
		return NULL;
	}
	json_array_foreach(c, k, part) {
		json_t *x = json_object_get(part, "text");
		memcpy(p, json_string_value(x), json_string_length(x));
		p += json_string_length(x);
	}
	json_t *s = json_stringn(buf, n);
	free(buf);
	if (!s)
		fail(e, "messages", "'content' is not valid UTF-8");
	return s;
}

/* OpenAI sends a call's arguments as a JSON string; the templates expect
 * the object (transformers passes it so), so it is parsed when it is one. */
static json_t *tool_calls_of(json_t *calls, struct gw_err *e)
{
	if (!json_is_array(calls)) {
		fail(e, "messages", "'tool_calls' must be an array");
		return NULL;
	}
	json_t *out = json_array();
	size_t k;
	json_t *tc;
	json_array_foreach(calls, k, tc) {
		json_t *f = json_is_object(tc) ? json_object_get(tc, "function") : NULL;
		json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
		if (!json_is_string(name)) {
			json_decref(out);
			fail(e, "messages", "a tool call needs 'function' with a 'name'");
			return NULL;
		}
		json_t *c = json_deep_copy(tc), *cf = json_object_get(c, "function");
		json_t *args = json_object_get(cf, "arguments");
		if (json_is_string(args)) {
			json_t *parsed = json_loadb(json_string_value(args), json_string_length(args),
						    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
			if (json_is_object(parsed) && depth(parsed) <= MAX_DEPTH / 2)
				json_object_set_new(cf, "arguments", parsed);
			else
				json_decref(parsed);
		}
		json_array_append_new(out, c);
	}
	return out;
}

static int chat(json_t *o, struct gw_req *r, struct gw_err *e)
{
	json_t *msgs = json_object_get(o, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return fail(e, "messages", "'messages' must be a non-empty array");
	json_t *req = json_object(), *out = json_array();
	json_object_set_new(req, "messages", out);
	size_t k;
	json_t *m;
	json_array_foreach(msgs, k, m) {
		json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
		const char *rs = json_is_string(role) ? json_string_value(role) : "";
		if (!strcmp(rs, "developer"))
			rs = "system"; /* OpenAI's newer name for the system role */
		if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool")) {
			json_decref(req);
			return fail(e, "messages", "message %zu: 'role' must be system, developer, user, assistant or tool", k);
		}
		json_t *calls = json_object_get(m, "tool_calls");
		bool has_calls = !absent(calls) && strcmp(rs, "assistant") == 0;
		json_t *c = content_of(m, rs, e);
		if (!c) {
			json_decref(req);
			return -1;
		}
		json_t *nm = json_object();
		json_object_set_new(nm, "role", json_string(rs));
		json_object_set_new(nm, "content", c);
		if (has_calls) {
			json_t *tc = tool_calls_of(calls, e);
			if (!tc) {
				json_decref(nm);
				json_decref(req);
				return -1;
			}
			json_object_set_new(nm, "tool_calls", tc);
		}
		static const char *const keep[] = { "name", "tool_call_id" };
		for (size_t j = 0; j < sizeof keep / sizeof *keep; j++) {
			json_t *x = json_object_get(m, keep[j]);
			if (json_is_string(x))
				json_object_set(nm, keep[j], x);
		}
		json_array_append_new(out, nm);
	}
	json_t *tools = json_object_get(o, "tools");
	json_t *choice = json_object_get(o, "tool_choice");
	bool none = json_is_string(choice) && !strcmp(json_string_value(choice), "none");
	if (!absent(choice) && !none && !(json_is_string(choice) && !strcmp(json_string_value(choice), "auto"))) {
		json_decref(req);
		return unsupported(e, "tool_choice", "other than \"auto\" or \"none\"");
	}
	if (!absent(tools)) {
		if (!json_is_array(tools)) {
			json_decref(req);
			return fail(e, "tools", "'tools' must be an array");
		}
		if (json_array_size(tools) && !none) {
			json_object_set(req, "tools", tools);
			r->tools = true;
		}
	}
	/* vLLM's extension: more variables for the template */
	json_t *kw = json_object_get(o, "chat_template_kwargs");
	if (json_is_object(kw)) {
		const char *key;
		json_t *val;
		json_object_foreach(kw, key, val)
			if (strcmp(key, "messages") && strcmp(key, "tools"))
				json_object_set(req, key, val);
	} else if (!absent(kw)) {
		json_decref(req);
		return fail(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
	}
	json_object_set_new(req, "add_generation_prompt", json_true());
	r->text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!r->text)
		return fail(e, NULL, "out of memory");
	r->text_len = strlen(r->text);

	json_t *lp = json_object_get(o, "logprobs");
	if (!absent(lp) && !json_is_boolean(lp))
		return fail(e, "logprobs", "'logprobs' must be a boolean");
	if (json_is_true(lp)) {
		r->logprobs = true;
		r->p.flags |= PAGODA_LOGPROBS;
	}
	json_int_t top = 0;
	if (get_int(o, "top_logprobs", 0, PAGODA_TOP_LOGPROBS, &top, e) < 0)
		return -1;
	if (top && !r->logprobs)
		return fail(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	r->p.top_logprobs = (int)top;
	return 0;
}

int gw_req_parse(enum gw_kind kind, const char *body, size_t len, struct gw_req *r, struct gw_err *e)
{
	memset(r, 0, sizeof *r);
	memset(e, 0, sizeof *e);
	r->kind = kind;
	/* OpenAI's defaults: completions 16 tokens, chat until the end; the
	 * sampling defaults are set in common() */
	r->p.max_tokens = 16;
	r->p.repeat_last_n = 64;
	r->to_context = kind == GW_CHAT;
	json_error_t je;
	json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return fail(e, NULL, "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
	int rc;
	if (!json_is_object(o))
		rc = fail(e, NULL, "the body must be a JSON object");
	else if (depth(o) > MAX_DEPTH)
		rc = fail(e, NULL, "the body nests deeper than %d", MAX_DEPTH);
	else if ((rc = common(o, r, e)) == 0)
		rc = kind == GW_CHAT ? chat(o, r, e)
				     : (completion_only(o, e) < 0 || completion_logprobs(o, r, e) < 0 ? -1 : completion(o, r, e));
	json_decref(o);
	if (rc < 0)
		gw_req_free(r);
	return rc;
}

void gw_req_free(struct gw_req *r)
{
	free(r->text);
	free(r->ids);
	free(r->constraint);
	r->text = NULL;
	r->ids = NULL;
	r->constraint = NULL;
	r->p.constraint = NULL;
	r->text_len = r->n_ids = 0;
}
