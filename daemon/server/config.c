/* daemon/server/config.c — the key table, flag and file parsing. */
#include "daemon/server/config.h"
#include "daemon/server/log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum ktype { K_STR, K_INT, K_SIZE, K_BOOL, K_MODE, K_LEVEL };

struct key {
	const char *name;
	char shortopt;
	enum ktype type;
	size_t off, len;
	bool runtime; /* applied on SIGHUP; else needs a restart */
	const char *help;
};

#define F(field) offsetof(struct srv_config, field), sizeof(((struct srv_config *)0)->field)
static const struct key keys[] = {
	{ "model", 'm', K_STR, F(model), false, "GGUF model file (required)" },
	{ "chat-template", 0, K_STR, F(chat_template), false, "Jinja chat template file (default: the model's own)" },
	{ "socket", 's', K_STR, F(socket), false, "control socket path" },
	{ "config", 'c', K_STR, F(config), false, "config file of key = value lines" },
	{ "threads", 't', K_INT, F(threads), false, "compute threads (0: all cores)" },
	{ "backend", 0, K_STR, F(backend), false, "cpu, cuda or auto (default: cuda when a GPU is found)" },
	{ "ctx", 0, K_INT, F(ctx), false, "context length per sequence (0: the model's)" },
	{ "max-seqs", 0, K_INT, F(max_seqs), false, "sequences running at once (0: default)" },
	{ "max-batch-tokens", 0, K_INT, F(max_batch_tokens), false, "tokens per engine step (0: default)" },
	{ "prefill-chunk", 0, K_INT, F(prefill_chunk), false, "prompt tokens per sequence per step (0: default)" },
	{ "kv-blocks", 0, K_SIZE, F(kv_blocks), false, "KV pool size in blocks (0: from kv-mem)" },
	{ "kv-mem", 0, K_SIZE, F(kv_mem), false, "KV pool bytes, K/M/G suffixes (0: default)" },
	{ "block-size", 0, K_INT, F(block_size), false, "tokens per KV block (0: 16)" },
	{ "cache-type-k", 0, K_STR, F(cache_type_k), false,
	  "KV cache type of K (-ctk): f16 (default), q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1" },
	{ "cache-type-v", 0, K_STR, F(cache_type_v), false, "KV cache type of V (-ctv), the same types" },
	{ "no-prefix-cache", 0, K_BOOL, F(no_prefix_cache), false, "disable prefix caching" },
	{ "offload-dir", 0, K_STR, F(offload_dir), false, "NVMe tier: KV blocks the pool lets go of go to DIR/pagoda-kv.tier" },
	{ "offload-size", 0, K_SIZE, F(offload_size), false, "bytes of the tier's file, K/M/G suffixes (default 1G)" },
	{ "offload-sqpoll", 0, K_BOOL, F(offload_sqpoll), false, "a kernel thread polls the tier's io_uring" },
	{ "allow-group", 0, K_STR, F(allow_group), true, "group (name or gid) whose members may connect" },
	{ "allow-users", 0, K_STR, F(allow_users), true, "users (names or uids, comma-separated) who may connect" },
	{ "allow-any", 0, K_BOOL, F(allow_any), true, "let every local user connect" },
	{ "socket-mode", 0, K_MODE, F(socket_mode), false, "socket file mode, octal (default 0666: the policy decides)" },
	{ "max-clients", 0, K_INT, F(max_clients), true, "connections at once (default 256)" },
	{ "max-clients-per-uid", 0, K_INT, F(max_clients_per_uid), true, "connections at once per user (default 64)" },
	{ "max-inflight", 0, K_INT, F(max_inflight), true, "requests in flight per connection (default 64)" },
	{ "max-inflight-per-uid", 0, K_INT, F(max_inflight_per_uid), true, "requests in flight per user (default 256)" },
	{ "hello-timeout-ms", 0, K_INT, F(hello_timeout_ms), true, "a new connection's time to say hello (default 3000)" },
	{ "sqes-per-turn", 0, K_INT, F(sqes_per_turn), true, "submissions taken from one client per turn (default 16)" },
	{ "queued-budget", 0, K_SIZE, F(queued_budget), true,
	  "completions queued for slow readers, daemon-wide; a connection may hold 1/16, a user 1/4 (default 256M)" },
	{ "arena-size", 0, K_SIZE, F(arena_size), false, "per-client prompt arena bytes (default 1M)" },
	{ "log-level", 'v', K_LEVEL, F(log_level), true, "emerg..debug or 0..7 (default info)" },
	{ "prefix-cache-scope", 0, K_STR, F(prefix_cache_scope), true,
	  "who shares cached prompt blocks: user (default), group (primary group) or global" },
	{ "bus", 0, K_STR, F(bus), false, "D-Bus: system, session, none or auto (default: system bus for a system service)" },
	{ "speculative", 0, K_STR, F(speculative), false,
	  "speculative decoding for requests that ask for none: off, ngram or draft (default: draft with a draft model, else off)" },
	{ "draft-model", 0, K_STR, F(draft_model), false, "draft model for speculative decoding (a GGUF with the model's vocabulary)" },
	{ "draft-max", 0, K_INT, F(draft_max), false, "draft tokens a sequence verifies per step, 1..16 (0: 8)" },
};
#define NKEYS (sizeof keys / sizeof keys[0])

void config_defaults(struct srv_config *c)
{
	memset(c, 0, sizeof *c);
	c->socket_mode = 0666;
	c->max_clients = 256;
	c->max_clients_per_uid = 64;
	c->max_inflight = 64;
	c->max_inflight_per_uid = 256;
	c->hello_timeout_ms = 3000;
	c->sqes_per_turn = 16;
	c->queued_budget = 256ll << 20;
	c->arena_size = 1 << 20;
	c->log_level = LOG_INFO;
	snprintf(c->backend, sizeof c->backend, "auto");
	snprintf(c->prefix_cache_scope, sizeof c->prefix_cache_scope, "user");
}

void config_usage(FILE *f)
{
	fprintf(f, "usage: pagodad --model M.gguf [--socket PATH] [--threads N] [--config FILE] [options]\n\n"
		   "Every option is also a key of the config file (key = value); flags win.\n\n");
	for (size_t i = 0; i < NKEYS; i++) {
		char flag[48];
		if (keys[i].shortopt)
			snprintf(flag, sizeof flag, "-%c, --%s", keys[i].shortopt, keys[i].name);
		else
			snprintf(flag, sizeof flag, "    --%s", keys[i].name);
		fprintf(f, "  %-26s %s%s\n", flag, keys[i].help, keys[i].runtime ? " [reloaded on SIGHUP]" : "");
	}
	fprintf(f, "\nSocket: --socket, else $PAGODA_SOCKET, else /run/pagoda/pagoda.sock when /run/pagoda\n"
		   "is writable, else $XDG_RUNTIME_DIR/pagoda.sock.\n"
		   "Signals: SIGTERM/SIGINT drain (running requests finish, new ones are refused), SIGHUP reloads.\n"
		   "Under systemd (Type=notify): READY once the model is loaded, STATUS lines, WATCHDOG pings;\n"
		   "socket activation through the socket systemd passes (a SOCK_SEQPACKET unix socket).\n"
		   "D-Bus: org.pagoda.Daemon1 at /org/pagoda/Daemon1 (see pagodad(8)).\n");
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
	if (*end == 'B' || *end == 'b' || (*end == 'i' && end[1] == 'B' && end++))
		end++;
	if (*end || n > INT64_MAX / mul)
		return -1;
	*out = n * mul;
	return 0;
}

static int set_key(struct srv_config *c, const struct key *k, const char *v, char *err, size_t errlen)
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
	case K_MODE:
		errno = 0;
		n = strtol(v, &end, 8);
		if (errno || end == v || *end || n < 0 || n > 07777) {
			snprintf(err, errlen, "%s: '%s' is not an octal mode", k->name, v);
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
	case K_LEVEL:
		if ((n = log_parse_level(v)) < 0) {
			snprintf(err, errlen, "%s: unknown level '%s'", k->name, v);
			return -1;
		}
		*(int *)p = (int)n;
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

static int read_file(struct srv_config *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "config %s: %s", path, strerror(errno));
		return -1;
	}
	char line[8192];
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f)) {
		lineno++;
		char *s = trim(line);
		if (!*s || *s == '#' || *s == ';')
			continue;
		char *eq = strchr(s, '=');
		char *name = s, *val;
		if (eq) {
			*eq = 0;
			val = trim(eq + 1);
		} else {
			val = (char *)"true"; /* a bare key is a bool flag */
		}
		name = trim(name);
		const struct key *k = find_key(name, strlen(name));
		if (!k) {
			snprintf(err, errlen, "config %s:%d: unknown key '%s'", path, lineno, name);
			rc = -1;
			break;
		}
		if (k - keys == 2) /* "config" inside a config file: ignored */
			continue;
		if (c->set_by_flag & (1ull << (k - keys)))
			continue; /* flags win */
		size_t vl = strlen(val);
		if (vl >= 2 && (val[0] == '"' || val[0] == '\'') && val[vl - 1] == val[0]) {
			val[vl - 1] = 0;
			val++;
		}
		char e2[256];
		if (set_key(c, k, val, e2, sizeof e2) < 0) {
			snprintf(err, errlen, "config %s:%d: %s", path, lineno, e2);
			rc = -1;
		}
	}
	fclose(f);
	return rc;
}

int config_load(struct srv_config *c, int argc, char **argv, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct key *k = NULL;
		const char *val = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			config_usage(stdout);
			return 1;
		}
		if (a[0] == '-' && a[1] == '-') {
			const char *name = a + 2, *eq = strchr(name, '=');
			k = find_key(name, eq ? (size_t)(eq - name) : strlen(name));
			if (eq)
				val = eq + 1;
		} else if (!strcmp(a, "-ctk") || !strcmp(a, "-ctv")) { /* llama.cpp's spellings */
			k = find_key(a[3] == 'k' ? "cache-type-k" : "cache-type-v", strlen("cache-type-k"));
		} else if (a[0] == '-' && a[1] && !a[2]) {
			for (size_t j = 0; j < NKEYS; j++)
				if (keys[j].shortopt == a[1])
					k = &keys[j];
		}
		if (!k) {
			snprintf(err, errlen, "unknown option '%s' (see --help)", a);
			return -1;
		}
		if (!val) {
			if (k->type == K_BOOL && (i + 1 >= argc || argv[i + 1][0] == '-'))
				val = "true";
			else if (i + 1 < argc)
				val = argv[++i];
			else {
				snprintf(err, errlen, "option '%s' needs a value", a);
				return -1;
			}
		}
		if (set_key(c, k, val, err, errlen) < 0)
			return -1;
		c->set_by_flag |= 1ull << (k - keys);
	}
	if (c->config[0] && read_file(c, c->config, err, errlen) < 0)
		return -1;
	return 0;
}

int config_reload(const struct srv_config *old, struct srv_config *out, char *err, size_t errlen)
{
	/* Start from defaults, keep the flag-set keys, then read the file. */
	struct srv_config n;
	config_defaults(&n);
	for (size_t i = 0; i < NKEYS; i++)
		if (old->set_by_flag & (1ull << i))
			memcpy((char *)&n + keys[i].off, (const char *)old + keys[i].off, keys[i].len);
	n.set_by_flag = old->set_by_flag;
	memcpy(n.config, old->config, sizeof n.config);
	if (n.config[0] && read_file(&n, n.config, err, errlen) < 0)
		return -1;
	*out = n;
	return 0;
}

void config_restart_diff(const struct srv_config *a, const struct srv_config *b, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; i < NKEYS; i++) {
		if (keys[i].runtime)
			continue;
		if (memcmp((const char *)a + keys[i].off, (const char *)b + keys[i].off, keys[i].len)) {
			int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", keys[i].name);
			if (w < 0 || (size_t)w >= len - used)
				break;
			used += (size_t)w;
		}
	}
}
