/* tools/pagoda-gateway/conf.c — the key table: every key of the config file
 * (key = value lines) is also a flag (--key VALUE, --key=VALUE); flags win. */
#include "tools/pagoda-gateway/gw.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum ktype { K_STR, K_INT, K_SIZE, K_BOOL };

struct key {
	const char *name;
	enum ktype type;
	size_t off, len;
	const char *help;
};

#define F(field) offsetof(struct gw_conf, field), sizeof(((struct gw_conf *)0)->field)
static const struct key keys[] = {
	{ "listen", K_STR, F(listen), "ADDR:PORT to serve HTTP on (default 127.0.0.1:8080; [::1]:8080 for IPv6)" },
	{ "socket", K_STR, F(socket), "pagodad's socket (default: libpagoda's, see libpagoda(3))" },
	{ "config", K_STR, F(config), "config file of key = value lines" },
	{ "model-name", K_STR, F(model_name), "the model id /v1/models lists and responses carry (default pagoda)" },
	{ "api-key-file", K_STR, F(api_key_file), "file of API keys, one a line: requests need 'Authorization: Bearer KEY'" },
	{ "connections", K_INT, F(connections), "libpagoda connections to pagodad (default 4)" },
	{ "max-connections", K_INT, F(max_connections), "HTTP connections at once (default 256)" },
	{ "max-connections-per-ip", K_INT, F(max_connections_per_ip), "HTTP connections at once per client address (default 64)" },
	{ "timeout", K_INT, F(timeout_s), "seconds an idle or slow HTTP connection is kept (default 30)" },
	{ "max-body", K_SIZE, F(max_body), "request body bytes, K/M suffixes (default 4M)" },
	{ "max-header", K_INT, F(max_header), "bytes of a request's line and headers (default 16384)" },
	{ "bus", K_STR, F(bus), "D-Bus where pagodad's other counters are read for /metrics: auto (system, then session), system, session, none (default auto)" },
	{ "quiet", K_BOOL, F(quiet), "log nothing but errors" },
};
#define NKEYS (sizeof keys / sizeof keys[0])

void gw_conf_defaults(struct gw_conf *c)
{
	memset(c, 0, sizeof *c);
	snprintf(c->listen, sizeof c->listen, "127.0.0.1:8080");
	snprintf(c->model_name, sizeof c->model_name, "pagoda");
	c->connections = 4;
	c->max_connections = 256;
	c->max_connections_per_ip = 64;
	c->timeout_s = 30;
	c->max_body = 4 << 20;
	c->max_header = 16384;
	snprintf(c->bus, sizeof c->bus, "auto");
}

void gw_conf_usage(void)
{
	printf("usage: pagoda-gateway [--listen ADDR:PORT] [--socket PATH] [--config FILE] [options]\n\n"
	       "An OpenAI-compatible HTTP server in front of pagodad. Every option is also a key\n"
	       "of the config file (key = value); flags win.\n\n");
	for (size_t i = 0; i < NKEYS; i++)
		printf("  --%-24s %s\n", keys[i].name, keys[i].help);
	printf("\nRoutes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions,\n"
	       "GET /health, GET /metrics (Prometheus), GET /openapi.json. See pagoda-gateway(8).\n"
	       "Socket activation: a listening TCP socket passed by systemd replaces --listen.\n");
}

static int parse_size(const char *v, int64_t *out)
{
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || n < 0)
		return -1;
	int64_t mul = 1;
	switch (toupper((unsigned char)*end)) {
	case 0: break;
	case 'K': mul = 1LL << 10; end++; break;
	case 'M': mul = 1LL << 20; end++; break;
	case 'G': mul = 1LL << 30; end++; break;
	default: return -1;
	}
	if (*end || n > INT64_MAX / mul)
		return -1;
	*out = n * mul;
	return 0;
}

static int set_key(struct gw_conf *c, const struct key *k, const char *v, char *err, size_t errlen)
{
	char *p = (char *)c + k->off, *end;
	long n;
	switch (k->type) {
	case K_STR:
		if (strlen(v) >= k->len) {
			snprintf(err, errlen, "%s: value too long", k->name);
			return -1;
		}
		strcpy(p, v);
		return 0;
	case K_INT:
		errno = 0;
		n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < 0 || n > INT_MAX) {
			snprintf(err, errlen, "%s: '%s' is not a non-negative integer", k->name, v);
			return -1;
		}
		*(int *)p = (int)n;
		return 0;
	case K_SIZE:
		if (parse_size(v, (int64_t *)p) < 0) {
			snprintf(err, errlen, "%s: '%s' is not a size", k->name, v);
			return -1;
		}
		return 0;
	case K_BOOL:
		if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
			*(bool *)p = true;
		else if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
			*(bool *)p = false;
		else {
			snprintf(err, errlen, "%s: '%s' is not a boolean", k->name, v);
			return -1;
		}
		return 0;
	}
	return -1;
}

static const struct key *find_key(const char *name, size_t len)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strlen(keys[i].name) == len && !strncmp(keys[i].name, name, len))
			return &keys[i];
	return NULL;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

static int read_file(struct gw_conf *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "config %s: %s", path, strerror(errno));
		return -1;
	}
	char line[1024];
	int no = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f)) {
		no++;
		char *s = trim(line);
		if (!*s || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "config %s:%d: expected key = value", path, no);
			rc = -1;
			break;
		}
		*eq = 0;
		char *k = trim(s), *v = trim(eq + 1);
		const struct key *key = find_key(k, strlen(k));
		if (!key || !strcmp(k, "config")) {
			snprintf(err, errlen, "config %s:%d: unknown key '%s'", path, no, k);
			rc = -1;
			break;
		}
		char e2[200];
		if (set_key(c, key, v, e2, sizeof e2) < 0) {
			snprintf(err, errlen, "config %s:%d: %s", path, no, e2);
			rc = -1;
		}
	}
	fclose(f);
	return rc;
}

static int parse_flags(struct gw_conf *c, int argc, char **argv, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;
		if (strncmp(a, "--", 2)) {
			snprintf(err, errlen, "unexpected argument '%s'", a);
			return -1;
		}
		a += 2;
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		const struct key *k = find_key(a, len);
		if (!k) {
			snprintf(err, errlen, "unknown option '%s'", argv[i]);
			return -1;
		}
		const char *v = eq ? eq + 1 : NULL;
		if (!v && k->type == K_BOOL)
			v = "true";
		if (!v) {
			if (i + 1 >= argc) {
				snprintf(err, errlen, "--%s needs a value", k->name);
				return -1;
			}
			v = argv[++i];
		}
		if (set_key(c, k, v, err, errlen) < 0)
			return -1;
	}
	return 0;
}

int gw_conf_load(struct gw_conf *c, int argc, char **argv, char *err, size_t errlen)
{
	struct gw_conf first = *c;
	int rc = parse_flags(&first, argc, argv, err, errlen);
	if (rc)
		return rc;
	if (first.config[0]) {
		snprintf(c->config, sizeof c->config, "%s", first.config);
		if (read_file(c, c->config, err, errlen) < 0)
			return -1;
	}
	if ((rc = parse_flags(c, argc, argv, err, errlen)))
		return rc;
	if (c->connections < 1 || c->connections > 64) {
		snprintf(err, errlen, "connections must be 1..64");
		return -1;
	}
	if (c->max_connections < 1 || c->max_body < 1 || c->max_header < 1024) {
		snprintf(err, errlen, "max-connections and max-body must be positive, max-header at least 1024");
		return -1;
	}
	return 0;
}
