/* tools/pagoda-bench/http.c — `pagoda-bench load --http URL`: the same
 * requests as through the rings, sent as streamed OpenAI /v1/completions
 * (token-id prompts) to pagoda-gateway or any server that speaks the API
 * (llama.cpp's llama-server). A small HTTP/1.1 client of its own: one
 * keep-alive connection per stream, a blocking read per event, so that, as
 * with the rings, an idle stream costs no CPU. */
#include "tools/pagoda-bench/bench.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

struct bench_http {
	char host[256], port[16], path[256];
	int fd;
	char buf[65536];
	size_t off, len;  /* unread bytes are buf[off, len) */
	char err[160];
};

int bench_http_open(const char *url, struct bench_http **out, char *err, size_t errlen)
{
	if (strncmp(url, "http://", 7)) {
		snprintf(err, errlen, "--http: '%s' is not an http:// URL", url);
		return -1;
	}
	struct bench_http *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	h->fd = -1;
	const char *hp = url + 7, *slash = strchr(hp, '/');
	size_t hl = slash ? (size_t)(slash - hp) : strlen(hp);
	const char *colon = memchr(hp, ':', hl);
	size_t nl = colon ? (size_t)(colon - hp) : hl;
	if (!nl || nl >= sizeof h->host || (colon && (hl - nl - 1 == 0 || hl - nl - 1 >= sizeof h->port))) {
		snprintf(err, errlen, "--http: cannot read host and port in '%s'", url);
		free(h);
		return -1;
	}
	memcpy(h->host, hp, nl);
	if (colon)
		memcpy(h->port, colon + 1, hl - nl - 1);
	else
		strcpy(h->port, "80");
	/* the API's root: URL/v1/completions */
	snprintf(h->path, sizeof h->path, "%s", slash ? slash : "");
	size_t pl = strlen(h->path);
	while (pl && h->path[pl - 1] == '/')
		h->path[--pl] = 0;
	*out = h;
	return 0;
}

void bench_http_close(struct bench_http *h)
{
	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	free(h);
}

const char *bench_http_error(const struct bench_http *h) { return h->err; }

static int fail(struct bench_http *h, const char *fmt, const char *arg)
{
	snprintf(h->err, sizeof h->err, fmt, arg);
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	return -1;
}

static int connect_to(struct bench_http *h)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *a;
	int rc = getaddrinfo(h->host, h->port, &hints, &ai);
	if (rc)
		return fail(h, "resolve: %s", gai_strerror(rc));
	for (a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			h->fd = fd;
			break;
		}
		close(fd);
	}
	freeaddrinfo(ai);
	h->off = h->len = 0;
	return h->fd >= 0 ? 0 : fail(h, "connect: %s", strerror(errno));
}

static int send_all(struct bench_http *h, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(h->fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* More bytes into buf; 0, or -1 at the end of the stream or an error. */
static int fill(struct bench_http *h)
{
	if (h->off && h->off == h->len)
		h->off = h->len = 0;
	if (h->len == sizeof h->buf) {
		if (!h->off)
			return fail(h, "%s", "a line longer than 64 KiB");
		memmove(h->buf, h->buf + h->off, h->len - h->off);
		h->len -= h->off;
		h->off = 0;
	}
	for (;;) {
		ssize_t k = recv(h->fd, h->buf + h->len, sizeof h->buf - h->len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return fail(h, "%s", k < 0 ? strerror(errno) : "the server closed the connection");
		h->len += (size_t)k;
		return 0;
	}
}

/* One line (CRLF or LF cut off), pointing into buf until the next read. */
static int line(struct bench_http *h, char **s, size_t *n)
{
	for (;;) {
		char *b = h->buf + h->off, *e = memchr(b, '\n', h->len - h->off);
		if (e) {
			*s = b;
			*n = (size_t)(e - b);
			if (*n && b[*n - 1] == '\r')
				(*n)--;
			b[*n] = 0;
			h->off = (size_t)(e - h->buf) + 1;
			return 0;
		}
		if (fill(h) < 0)
			return -1;
	}
}

/* The body's bytes as they come: through chunked coding, a length, or
 * until the server closes. */
struct body {
	enum { B_CHUNKED, B_LENGTH, B_CLOSE } kind;
	size_t left;     /* of this chunk or of the length */
	bool done;
};

/* Up to max bytes of the body into dst; 0 at its end, -1 on error. */
static ssize_t body_read(struct bench_http *h, struct body *b, char *dst, size_t max)
{
	if (b->done)
		return 0;
	if (b->kind == B_CHUNKED && !b->left) {
		char *s;
		size_t n;
		if (line(h, &s, &n) < 0)
			return -1;
		if (!n && line(h, &s, &n) < 0) /* the CRLF after the last chunk's data */
			return -1;
		char *end;
		unsigned long long sz = strtoull(s, &end, 16);
		if (end == s)
			return fail(h, "bad chunk size line '%s'", s);
		if (!sz) {
			do /* trailers, then the empty line */
				if (line(h, &s, &n) < 0)
					return -1;
			while (n);
			b->done = true;
			return 0;
		}
		b->left = (size_t)sz;
	}
	if (b->kind == B_LENGTH && !b->left) {
		b->done = true;
		return 0;
	}
	if (h->off == h->len && fill(h) < 0) {
		if (b->kind == B_CLOSE) {
			b->done = true;
			return 0;
		}
		return -1;
	}
	size_t n = h->len - h->off;
	if (n > max)
		n = max;
	if (b->kind != B_CLOSE && n > b->left)
		n = b->left;
	memcpy(dst, h->buf + h->off, n);
	h->off += n;
	if (b->kind != B_CLOSE)
		b->left -= n;
	return (ssize_t)n;
}

/* One server-sent event's data: a chunk of text, or the usage at the end. */
static void on_event(const char *data, size_t n, struct bench_http_result *r)
{
	if (n == 6 && !memcmp(data, "[DONE]", 6))
		return;
	json_t *o = json_loadb(data, n, 0, NULL);
	if (!o)
		return;
	uint64_t t = bench_now_ns();
	json_t *c = json_array_get(json_object_get(o, "choices"), 0);
	json_t *text = json_object_get(c, "text");
	if (json_is_string(text) && json_string_length(text)) {
		if (!r->t_first)
			r->t_first = t;
		else if (r->itl)
			dvec_push(r->itl, (double)(t - r->t_prev) / 1e6);
		r->t_prev = t;
		r->n_chunks++;
	}
	json_t *fin = json_object_get(c, "finish_reason");
	if (json_is_string(fin))
		r->finish = !strcmp(json_string_value(fin), "length") ? 2 : 1;
	json_t *u = json_object_get(o, "usage");
	if (json_is_object(u)) {
		r->n_prompt = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
		r->n_gen = (int)json_integer_value(json_object_get(u, "completion_tokens"));
		json_t *d = json_object_get(u, "prompt_tokens_details");
		r->n_cached = (int)json_integer_value(json_object_get(d, "cached_tokens"));
		r->usage = true;
	}
	json_t *e = json_object_get(o, "error");
	if (e && !r->error[0]) {
		json_t *m = json_object_get(e, "message");
		snprintf(r->error, sizeof r->error, "%s", json_is_string(m) ? json_string_value(m) : "an error event");
	}
	json_decref(o);
}

int bench_http_complete(struct bench_http *h, const struct bench_http_req *q, struct bench_http_result *r)
{
	struct dvec *itl = r->itl;
	memset(r, 0, sizeof *r);
	r->itl = itl;
	h->err[0] = 0;
	/* the request body */
	size_t cap = 256 + q->n_ids * 12 + strlen(q->model);
	char *body = malloc(cap), *p = body;
	if (!body)
		return fail(h, "%s", "out of memory");
	p += sprintf(p, "{\"model\":\"%s\",\"prompt\":[", q->model);
	for (size_t i = 0; i < q->n_ids; i++)
		p += sprintf(p, "%s%d", i ? "," : "", (int)q->ids[i]);
	p += sprintf(p,
		     "],\"max_tokens\":%d,\"temperature\":%.6g,\"seed\":%llu,\"stream\":true,"
		     "\"stream_options\":{\"include_usage\":true}}",
		     q->max_tokens, q->temp, (unsigned long long)q->seed);
	size_t blen = (size_t)(p - body);
	char head[640];
	int hn = snprintf(head, sizeof head,
			  "POST %s/v1/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
			  "Accept: text/event-stream\r\nContent-Length: %zu\r\n\r\n",
			  h->path, h->host, h->port, blen);
	/* a keep-alive connection the server closed meanwhile: one new try */
	for (int attempt = 0;; attempt++) {
		if (h->fd < 0 && connect_to(h) < 0)
			break;
		if (send_all(h, head, (size_t)hn) == 0 && send_all(h, body, blen) == 0) {
			r->t_sent = bench_now_ns();
			if (h->off < h->len || fill(h) == 0)
				break;
		}
		if (h->fd >= 0)
			close(h->fd);
		h->fd = -1;
		if (attempt)
			break;
	}
	free(body);
	if (h->fd < 0) {
		if (!h->err[0])
			snprintf(h->err, sizeof h->err, "send: %s", strerror(errno));
		return -1;
	}
	/* status line and headers */
	char *s;
	size_t n;
	if (line(h, &s, &n) < 0)
		return -1;
	int status = 0;
	if (sscanf(s, "HTTP/1.%*d %d", &status) != 1)
		return fail(h, "bad status line '%s'", s);
	struct body b = { .kind = B_CLOSE };
	bool close_after = false;
	for (;;) {
		if (line(h, &s, &n) < 0)
			return -1;
		if (!n)
			break;
		if (!strncasecmp(s, "content-length:", 15)) {
			b.kind = B_LENGTH;
			b.left = (size_t)strtoull(s + 15, NULL, 10);
		} else if (!strncasecmp(s, "transfer-encoding:", 18) && strcasestr(s + 18, "chunked")) {
			b.kind = B_CHUNKED;
		} else if (!strncasecmp(s, "connection:", 11) && strcasestr(s + 11, "close")) {
			close_after = true;
		}
	}
	/* the body, split into SSE lines; "data: " lines are events */
	char ev[65536];
	size_t evn = 0;
	bool overflow = false;
	char chunk[16384];
	ssize_t k;
	while ((k = body_read(h, &b, chunk, sizeof chunk)) > 0) {
		for (ssize_t i = 0; i < k; i++) {
			char c = chunk[i];
			if (c != '\n') {
				if (evn < sizeof ev - 1)
					ev[evn++] = c;
				else
					overflow = true;
				continue;
			}
			if (evn && ev[evn - 1] == '\r')
				evn--;
			if (status == 200 && !overflow && evn > 6 && !memcmp(ev, "data: ", 6))
				on_event(ev + 6, evn - 6, r);
			else if (status != 200 && !r->error[0])
				snprintf(r->error, sizeof r->error, "HTTP %d: %.*s", status, (int)(evn > 120 ? 120 : evn), ev);
			evn = 0;
			overflow = false;
		}
	}
	if (k < 0)
		return -1;
	if (status != 200 && evn && !r->error[0]) /* a JSON error body without a newline */
		snprintf(r->error, sizeof r->error, "HTTP %d: %.*s", status, (int)(evn > 120 ? 120 : evn), ev);
	if (status != 200 && !r->error[0])
		snprintf(r->error, sizeof r->error, "HTTP %d", status);
	r->t_done = bench_now_ns();
	if (close_after || b.kind == B_CLOSE) {
		close(h->fd);
		h->fd = -1;
	}
	if (!r->usage)
		r->n_gen = r->n_chunks;
	return 0;
}
