// fuzz-sources: tools/pagoda-gateway/req.c tools/pagoda-gateway/reply.c daemon/template/value.c daemon/template/json.c daemon/template/lex.c daemon/template/parse.c daemon/template/render.c daemon/template/builtins.c
/* libFuzzer target: pagoda-gateway's mapping of an OpenAI request body onto
 * a pagoda request (req.c), for both endpoints, and the tool-call parser
 * (reply.c). A body is either refused with a 400 and a message, or mapped
 * to a request the daemon can take: parameters in range, a prompt, and for
 * chat a request that the daemon's own JSON reader (daemon/template/json.c)
 * accepts as an object. */
#include "daemon/template/template.h"
#include "tools/pagoda-gateway/gw.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void check(enum gw_kind kind, const char *d, size_t n)
{
	struct gw_req r;
	struct gw_err e;
	if (gw_req_parse(kind, d, n, &r, &e) < 0) {
		if (e.status != 400 || !e.msg[0] || r.text || r.ids)
			abort();
		return;
	}
	if (r.p.max_tokens < 1 || r.p.n_stop < 0 || r.p.n_stop > PAGODA_MAX_STOP)
		abort();
	for (int i = 0; i < r.p.n_stop; i++) {
		size_t l = strlen(r.p.stop[i]);
		if (l < 1 || l > PAGODA_STOP_LEN)
			abort();
	}
	if (!(r.p.temp >= 0 && r.p.temp <= 2 && r.p.top_p > 0 && r.p.top_p <= 1 && r.p.min_p >= 0 &&
	      r.p.min_p <= 1 && r.p.top_k >= 0 && r.p.repeat_penalty > 0))
		abort();
	if (kind == GW_CHAT) {
		if (!r.text || r.ids || strlen(r.text) != r.text_len)
			abort();
		struct tpl_heap *h = tpl_heap_new(64u << 20);
		struct tpl_val *v;
		char err[128];
		if (tpl_json_parse(h, r.text, r.text_len, &v, err, sizeof err) < 0 || !v)
			abort();
		tpl_heap_free(h);
		json_t *o = json_loadb(r.text, r.text_len, 0, NULL);
		if (!json_is_array(json_object_get(o, "messages")) || !json_array_size(json_object_get(o, "messages")))
			abort();
		json_decref(o);
	} else if (!((r.text && r.text_len && !r.ids) || (r.ids && r.n_ids && !r.text))) {
		abort();
	}
	gw_req_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(GW_CHAT, (const char *)data, size);
	check(GW_COMPLETION, (const char *)data, size);
	char *content;
	size_t clen;
	json_t *calls = gw_parse_tool_calls((const char *)data, size, &content, &clen);
	if (calls && (!json_is_array(calls) || !json_array_size(calls)))
		abort();
	json_decref(calls);
	free(content);
	/* the streamed form, in pieces of 7 bytes: content stays inside what
	 * arrived and never goes back */
	struct gw_tcs t = { 0 };
	size_t sent = 0;
	for (size_t n = size < 7 ? size : 7;; n = n + 7 < size ? n + 7 : size) {
		struct gw_tcs_out o;
		gw_tcs_step(&t, (const char *)data, n, n == size, &o);
		if (o.content_len && (o.content_off < sent || o.content_off + o.content_len > n))
			abort();
		if (o.content_len)
			sent = o.content_off + o.content_len;
		json_decref(o.calls);
		if (n == size)
			break;
	}
	return 0;
}
