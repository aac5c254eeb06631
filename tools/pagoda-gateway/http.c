/* tools/pagoda-gateway/http.c — the HTTP/1.1 server (libmicrohttpd, a
 * thread per connection, bounded by max-connections): limits, API keys,
 * routing. A request's body is gathered here, up to max-body; the routes
 * answer from api.c and below. */
#include "tools/pagoda-gateway/gw.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct gw_server {
	struct MHD_Daemon *d;
	const struct gw_conf *conf;
	struct gw_pool *pool;
	struct gw_bus *bus;
};

enum route { R_NONE, R_MODELS, R_COMPLETIONS, R_CHAT, R_HEALTH, R_METRICS, R_OPENAPI };

static const struct {
	const char *path, *method, *name;
	enum route r;
	bool auth;
} routes[] = {
	{ "/v1/models", "GET", "/v1/models", R_MODELS, true },
	{ "/v1/completions", "POST", "/v1/completions", R_COMPLETIONS, true },
	{ "/v1/chat/completions", "POST", "/v1/chat/completions", R_CHAT, true },
	{ "/health", "GET", "/health", R_HEALTH, false },
	{ "/metrics", "GET", "/metrics", R_METRICS, false },
	{ "/openapi.json", "GET", "/openapi.json", R_OPENAPI, false },
};
#define NROUTES (sizeof routes / sizeof routes[0])

struct hreq {
	int route;          /* index into routes, -1 none */
	uint32_t scope;     /* the API key's prefix-cache scope */
	char *body;
	size_t len, cap;
	bool too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, const char *route, int status, struct MHD_Response *r)
{
	if (!r)
		return MHD_NO;
	gw_metrics_http(route, status);
	enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, const char *route, int status, const char *type,
				  const char *fmt, const char *arg)
{
	struct gw_err e = { .status = status, .type = type };
	snprintf(e.msg, sizeof e.msg, fmt, arg);
	int st;
	struct MHD_Response *r = gw_api_error(&e, &st);
	if (r && status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	return reply(c, route, st, r);
}

static struct MHD_Response *text(const char *s, const char *type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), (void *)s, MHD_RESPMEM_PERSISTENT);
	if (r)
		MHD_add_response_header(r, "Content-Type", type);
	return r;
}

static enum MHD_Result models(struct gw_server *s, struct MHD_Connection *c)
{
	json_t *m = json_object();
	json_object_set_new(m, "id", json_string(s->conf->model_name));
	json_object_set_new(m, "object", json_string("model"));
	json_object_set_new(m, "created", json_integer(0));
	json_object_set_new(m, "owned_by", json_string("pagoda"));
	int n_ctx = gw_pool_n_ctx(s->pool);
	if (n_ctx > 0)
		json_object_set_new(m, "max_model_len", json_integer(n_ctx));
	json_t *o = json_object(), *a = json_array();
	json_array_append_new(a, m);
	json_object_set_new(o, "object", json_string("list"));
	json_object_set_new(o, "data", a);
	char *b = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return reply(c, "/v1/models", 200, b ? gw_api_json_response(b, strlen(b)) : NULL);
}

static enum MHD_Result metrics(struct gw_server *s, struct MHD_Connection *c)
{
	struct pagoda_stats st;
	bool up = gw_pool_up(s->pool) && gw_pool_stats(s->pool, &st, 2000) == 0;
	struct gw_bus_vals bv;
	gw_bus_read(s->bus, &bv);
	size_t len = 0;
	char *b = gw_metrics_render(up ? &st : NULL, up, s->bus ? &bv : NULL, &len);
	struct MHD_Response *r = b ? MHD_create_response_from_buffer(len, b, MHD_RESPMEM_MUST_FREE) : NULL;
	if (r)
		MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	return reply(c, "/metrics", 200, r);
}

static enum MHD_Result route_once(struct gw_server *s, struct MHD_Connection *c, struct hreq *h)
{
	const char *name = routes[h->route].name;
	int status = 500;
	struct MHD_Response *r;
	switch (routes[h->route].r) {
	case R_MODELS:
		return models(s, c);
	case R_COMPLETIONS:
	case R_CHAT:
		r = gw_api_generate(s->pool, s->conf, routes[h->route].r == R_CHAT ? GW_CHAT : GW_COMPLETION,
				    h->body ? h->body : "", h->len, h->scope, c, &status);
		return reply(c, name, status, r);
	case R_HEALTH:
		if (gw_pool_up(s->pool))
			return reply(c, name, 200, text("{\"status\":\"ok\"}", "application/json"));
		return reply_error(c, name, 503, "server_error", "pagodad is not reachable: %s",
				   pagoda_strerror(gw_pool_last_error(s->pool)));
	case R_METRICS:
		return metrics(s, c);
	case R_OPENAPI:
		return reply(c, name, 200, text(gw_openapi_json, "application/json"));
	case R_NONE:
		break;
	}
	return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct gw_server *s = cls;
	struct hreq *h = *con_cls;
	if (!h) {
		/* First call: the headers are in; refuse what needs no body. */
		int found = -1, path = -1;
		for (size_t i = 0; i < NROUTES; i++)
			if (!strcmp(url, routes[i].path)) {
				path = (int)i;
				if (!strcmp(method, routes[i].method) ||
				    (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET")))
					found = (int)i;
			}
		if (path < 0)
			return reply_error(c, "other", 404, "invalid_request_error", "no route %s", url);
		if (found < 0)
			return reply_error(c, routes[path].name, 405, "invalid_request_error",
					  "method not allowed here; use %s", routes[path].method);
		int key = routes[found].auth ? gw_auth_check(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
											  "Authorization")) : 0;
		if (key < 0)
			return reply_error(c, routes[found].name, 401, "invalid_request_error", "%s",
					  "a valid API key is required (Authorization: Bearer KEY)");
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->conf->max_body)
			return reply_error(c, routes[found].name, 413, "invalid_request_error",
					  "the body is larger than max-body (%s bytes)", cl);
		if (!(h = calloc(1, sizeof *h)))
			return MHD_NO;
		h->route = found;
		h->scope = (uint32_t)key;
		*con_cls = h;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (h->too_big || h->len + n > (size_t)s->conf->max_body) {
			h->too_big = true; /* chunked, without Content-Length: read on, then refuse */
			return MHD_YES;
		}
		if (h->len + n + 1 > h->cap) {
			size_t cap = h->cap ? h->cap : 4096;
			while (cap < h->len + n + 1)
				cap *= 2;
			char *b = realloc(h->body, cap);
			if (!b)
				return MHD_NO;
			h->body = b;
			h->cap = cap;
		}
		memcpy(h->body + h->len, upload, n);
		h->len += n;
		h->body[h->len] = 0;
		return MHD_YES;
	}
	if (h->too_big)
		return reply_error(c, routes[h->route].name, 413, "invalid_request_error",
				  "the body is larger than max-body%s", "");
	return route_once(s, c, h);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct hreq *h = *con_cls;
	if (h) {
		free(h->body);
		free(h);
	}
	*con_cls = NULL;
}

/* "ADDR:PORT", "[ADDR6]:PORT" or ":PORT" (every IPv4 address). */
static int parse_listen(const char *s, struct sockaddr_storage *ss, char *err, size_t errlen)
{
	char host[128];
	const char *colon = strrchr(s, ':');
	if (!colon || !colon[1]) {
		snprintf(err, errlen, "listen '%s': expected ADDR:PORT", s);
		return -1;
	}
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535) {
		snprintf(err, errlen, "listen '%s': bad port", s);
		return -1;
	}
	size_t hl = (size_t)(colon - s);
	if (hl >= sizeof host) {
		snprintf(err, errlen, "listen '%s': address too long", s);
		return -1;
	}
	memcpy(host, s, hl);
	host[hl] = 0;
	memset(ss, 0, sizeof *ss);
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		host[hl - 1] = 0;
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) == 1)
			return 0;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (!hl || inet_pton(AF_INET, host, &a->sin_addr) == 1)
			return 0;
	}
	snprintf(err, errlen, "listen '%s': '%s' is not a numeric address", s, host);
	return -1;
}

int gw_http_start(const struct gw_conf *c, struct gw_pool *pool, int listen_fd, struct gw_server **out, char *err,
		  size_t errlen)
{
	struct gw_server *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->conf = c;
	s->pool = pool;
	if (gw_bus_open(c->bus, &s->bus, err, errlen) < 0) {
		free(s);
		return -1;
	}
	struct sockaddr_storage ss;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
	if (listen_fd < 0) {
		if (parse_listen(c->listen, &ss, err, errlen) < 0) {
			gw_bus_close(s->bus);
			free(s);
			return -1;
		}
		if (ss.ss_family == AF_INET6)
			flags |= MHD_USE_IPv6;
	}
	struct MHD_OptionItem opts[] = {
		{ MHD_OPTION_CONNECTION_LIMIT, c->max_connections, NULL },
		{ MHD_OPTION_PER_IP_CONNECTION_LIMIT, c->max_connections_per_ip, NULL },
		{ MHD_OPTION_CONNECTION_TIMEOUT, c->timeout_s, NULL },
		{ MHD_OPTION_CONNECTION_MEMORY_LIMIT, c->max_header, NULL },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s },
		{ MHD_OPTION_END, 0, NULL },
	};
	if (listen_fd >= 0)
		s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, listen_fd,
					MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	else
		s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
					(struct sockaddr *)&ss, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	if (!s->d) {
		snprintf(err, errlen, "cannot listen on %s (in use, or not this machine's address?)",
			 listen_fd >= 0 ? "the socket systemd passed" : c->listen);
		gw_bus_close(s->bus);
		free(s);
		return -1;
	}
	*out = s;
	return 0;
}

void gw_http_stop(struct gw_server *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	gw_bus_close(s->bus);
	free(s);
}
