/* tools/pagoda-gateway/reply.c — pieces of OpenAI's response objects: text
 * as JSON strings, the error object, finish reasons, ids, and tool calls
 * parsed back out of a reply. */
#include "tools/pagoda-gateway/gw.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* The length of the valid UTF-8 sequence at s (1..4), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t l;
	unsigned min;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		l = 2, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		l = 3, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		l = 4, min = 0x10000;
	else
		return 0;
	if (n < l)
		return 0;
	unsigned cp = c & (0x3f >> (l - 1));
	for (size_t i = 1; i < l; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return l;
}

json_t *gw_json_text(const char *s, size_t len)
{
	json_t *v = json_stringn(s ? s : "", s ? len : 0);
	if (v)
		return v;
	/* a model may emit bytes that are not UTF-8: each becomes U+FFFD */
	char *o = malloc(len * 3 + 1);
	if (!o)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		size_t l = s[i] ? utf8_seq((const unsigned char *)s + i, len - i) : 0;
		if (l) {
			memcpy(o + n, s + i, l);
			n += l;
			i += l;
		} else {
			memcpy(o + n, "\xef\xbf\xbd", 3);
			n += 3;
			i++;
		}
	}
	v = json_stringn(o, n);
	free(o);
	return v;
}

char *gw_error_body(const struct gw_err *e, size_t *len)
{
	json_t *err = json_object();
	json_object_set_new(err, "message", gw_json_text(e->msg, strlen(e->msg)));
	json_object_set_new(err, "type", json_string(e->type ? e->type : "invalid_request_error"));
	json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
	json_object_set_new(err, "code", json_null());
	json_t *o = json_object();
	json_object_set_new(o, "error", err);
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (s)
		*len = strlen(s);
	return s;
}

const char *gw_finish_name(int finish, bool tool_calls)
{
	if (tool_calls)
		return "tool_calls";
	switch (finish) {
	case PAGODA_FINISH_LENGTH: return "length";
	case PAGODA_FINISH_CANCEL: return "abort";
	default: return "stop"; /* EOS / end of turn, or a stop string */
	}
}

void gw_new_id(char *buf, size_t len, const char *prefix)
{
	unsigned char r[12];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		memset(r, 0, sizeof r);
	size_t n = (size_t)snprintf(buf, len, "%s", prefix);
	for (size_t i = 0; i < sizeof r && n + 2 < len; i++, n += 2)
		snprintf(buf + n, len - n, "%02x", r[i]);
}

/* One OpenAI tool call from {"name": ..., "arguments"|"parameters": {...}}. */
static json_t *one_call(json_t *o)
{
	json_t *name = json_is_object(o) ? json_object_get(o, "name") : NULL;
	if (!json_is_string(name))
		return NULL;
	json_t *args = json_object_get(o, "arguments");
	if (!args)
		args = json_object_get(o, "parameters");
	char *a = args ? (json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT))
		       : strdup("{}");
	if (!a)
		return NULL;
	char id[40];
	gw_new_id(id, sizeof id, "call_");
	json_t *f = json_object(), *c = json_object();
	json_object_set(f, "name", name);
	json_object_set_new(f, "arguments", json_string(a));
	free(a);
	json_object_set_new(c, "id", json_string(id));
	json_object_set_new(c, "type", json_string("function"));
	json_object_set_new(c, "function", f);
	return c;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

json_t *gw_parse_tool_calls(const char *text, size_t len, char **content, size_t *content_len)
{
	static const char open[] = "<tool_call>", close[] = "</tool_call>";
	*content = NULL;
	*content_len = 0;
	const char *first = memmem(text, len, open, sizeof open - 1);
	json_t *calls = json_array();
	if (first) {
		/* Hermes / Qwen: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated */
		const char *p = first, *end = text + len;
		while (p && p < end) {
			const char *b = p + sizeof open - 1;
			const char *e = memmem(b, (size_t)(end - b), close, sizeof close - 1);
			json_t *o = json_loadb(b, e ? (size_t)(e - b) : (size_t)(end - b), 0, NULL);
			json_t *c = one_call(o);
			json_decref(o);
			if (!c)
				break;
			json_array_append_new(calls, c);
			if (!e)
				break;
			p = memmem(e, (size_t)(end - e), open, sizeof open - 1);
		}
		if (json_array_size(calls) && !blank(text, (size_t)(first - text))) {
			*content_len = (size_t)(first - text);
			*content = strndup(text, *content_len);
		}
	} else {
		/* Llama 3.x: the whole reply is {"name": ..., "parameters": {...}},
		 * optionally after <|python_tag|>, several separated by ';' */
		const char *p = text, *end = text + len;
		static const char tag[] = "<|python_tag|>";
		while (p < end && blank(p, 1))
			p++;
		if ((size_t)(end - p) >= sizeof tag - 1 && !memcmp(p, tag, sizeof tag - 1))
			p += sizeof tag - 1;
		while (p < end) {
			json_error_t je;
			json_t *o = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, &je);
			json_t *c = one_call(o);
			json_decref(o);
			if (!c) {
				json_array_clear(calls);
				break;
			}
			json_array_append_new(calls, c);
			p += je.position;
			while (p < end && (blank(p, 1) || *p == ';'))
				p++;
		}
	}
	if (!json_array_size(calls)) {
		json_decref(calls);
		return NULL;
	}
	return calls;
}

/* ---- tool calls while a reply streams --------------------------------------- */
static const char tc_open[] = "<tool_call>", tc_close[] = "</tool_call>";

/* Bytes at the end of s that could begin the marker m (a proper prefix). */
static size_t partial_tail(const char *s, size_t n, const char *m, size_t mlen)
{
	for (size_t k = mlen - 1 < n ? mlen - 1 : n; k > 0; k--)
		if (!memcmp(s + n - k, m, k))
			return k;
	return 0;
}

/* The calls of one Hermes segment <tool_call>...[</tool_call>], numbered on. */
static void take_calls(struct gw_tcs *t, const char *seg, size_t n, json_t *out)
{
	char *content = NULL;
	size_t clen = 0;
	json_t *tc = gw_parse_tool_calls(seg, n, &content, &clen);
	free(content);
	size_t i;
	json_t *c;
	json_array_foreach(tc, i, c) {
		json_object_set_new(c, "index", json_integer(t->n_calls++));
		json_array_append(out, c);
	}
	json_decref(tc);
}

void gw_tcs_step(struct gw_tcs *t, const char *text, size_t len, bool final, struct gw_tcs_out *o)
{
	static const char tag[] = "<|python_tag|>";
	memset(o, 0, sizeof *o);
	o->calls = json_array();
	if (t->mode == GW_TCS_TEXT) {
		size_t k = t->emitted;
		while (k < len && blank(text + k, 1))
			k++;
		if (t->emitted == 0 && k < len) {
			/* Llama 3.x form: the whole reply is the call(s), parsed at the end */
			size_t rest = len - k;
			if (text[k] == '{' || (rest >= sizeof tag - 1 && !memcmp(text + k, tag, sizeof tag - 1)))
				t->mode = GW_TCS_HOLD;
			else if (!final && rest < sizeof tag - 1 && !memcmp(text + k, tag, rest))
				return; /* maybe the tag: wait */
		}
		if (t->mode == GW_TCS_TEXT) {
			if (k == len && !final)
				return; /* only blanks so far: the call may come next */
			const char *p = memmem(text + t->emitted, len - t->emitted, tc_open, sizeof tc_open - 1);
			size_t end = p ? (size_t)(p - text) : len - (final ? 0 : partial_tail(text, len, tc_open, sizeof tc_open - 1));
			bool lead = t->emitted == 0 && blank(text, end); /* blanks before a call are no content */
			if (lead && !p && !final)
				return;
			if (end > t->emitted && !(lead && p)) {
				o->content_off = t->emitted;
				o->content_len = end - t->emitted;
			}
			t->emitted = end;
			if (p) {
				t->mode = GW_TCS_CALLS;
				t->call_pos = end;
			}
		}
	}
	if (t->mode == GW_TCS_CALLS) {
		for (;;) {
			const char *b = text + t->call_pos;
			const char *e = memmem(b, len - t->call_pos, tc_close, sizeof tc_close - 1);
			if (!e)
				break;
			size_t seg = (size_t)(e - b) + sizeof tc_close - 1;
			take_calls(t, b, seg, o->calls);
			t->call_pos += seg;
			const char *nx = memmem(text + t->call_pos, len - t->call_pos, tc_open, sizeof tc_open - 1);
			if (!nx) { /* text after the calls: ignored, as in a whole answer; a later call is looked for */
				size_t keep = partial_tail(text + t->call_pos, len - t->call_pos, tc_open, sizeof tc_open - 1);
				t->call_pos = len - keep;
				break;
			}
			t->call_pos = (size_t)(nx - text);
		}
		if (final && len - t->call_pos >= sizeof tc_open - 1 &&
		    !memcmp(text + t->call_pos, tc_open, sizeof tc_open - 1))
			take_calls(t, text + t->call_pos, len - t->call_pos, o->calls); /* no closing tag */
		if (final && !t->n_calls && t->emitted < len) { /* a marker and no call: it was text */
			o->content_off = t->emitted;
			o->content_len = len - t->emitted;
			t->emitted = len;
		}
	}
	if (t->mode == GW_TCS_HOLD && final) {
		char *content = NULL;
		size_t clen = 0;
		json_t *tc = gw_parse_tool_calls(text, len, &content, &clen);
		free(content);
		if (tc) {
			size_t i;
			json_t *c;
			json_array_foreach(tc, i, c) {
				json_object_set_new(c, "index", json_integer(t->n_calls++));
				json_array_append(o->calls, c);
			}
			json_decref(tc);
		} else {
			o->content_off = t->emitted;
			o->content_len = len - t->emitted;
			t->emitted = len;
		}
	}
}
