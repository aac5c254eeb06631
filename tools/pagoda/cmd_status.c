/* tools/pagoda/cmd_status.c — `pagoda status`: the daemon's state, read from
 * its D-Bus object (org.pagoda.Daemon1), for people or (--json) scripts. */
#include "tools/pagoda/cmds.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define NAME "org.pagoda.Daemon1"
#define PATH "/org/pagoda/Daemon1"
#define IFACE "org.pagoda.Daemon1"

struct prop {
	char name[48];
	char type; /* s t u d b i x */
	char *s;
	uint64_t u;
	int64_t i;
	double d;
};

struct props {
	struct prop *p;
	int n;
};

static void props_free(struct props *ps)
{
	for (int i = 0; i < ps->n; i++)
		free(ps->p[i].s);
	free(ps->p);
}

static const struct prop *find(const struct props *ps, const char *name)
{
	for (int i = 0; i < ps->n; i++)
		if (!strcmp(ps->p[i].name, name))
			return &ps->p[i];
	return NULL;
}

static const char *S(const struct props *ps, const char *name)
{
	const struct prop *p = find(ps, name);
	return p && p->s ? p->s : "";
}

static uint64_t U(const struct props *ps, const char *name)
{
	const struct prop *p = find(ps, name);
	return !p ? 0 : p->type == 'd' ? (uint64_t)p->d : p->type == 'i' || p->type == 'x' ? (uint64_t)p->i : p->u;
}

static double D(const struct props *ps, const char *name)
{
	const struct prop *p = find(ps, name);
	return !p ? 0 : p->type == 'd' ? p->d : p->type == 'i' || p->type == 'x' ? (double)p->i : (double)p->u;
}

/* Reads GetAll's a{sv}; unknown value types are skipped. */
static int read_props(sd_bus_message *m, struct props *ps)
{
	int r = sd_bus_message_enter_container(m, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *name, *contents;
		char type;
		if ((r = sd_bus_message_read(m, "s", &name)) < 0 ||
		    (r = sd_bus_message_peek_type(m, &type, &contents)) < 0)
			break;
		struct prop p;
		memset(&p, 0, sizeof p);
		snprintf(p.name, sizeof p.name, "%s", name);
		p.type = contents[0];
		uint32_t u32;
		int32_t i32;
		int b;
		const char *s;
		switch (p.type) {
		case 's': r = sd_bus_message_read(m, "v", "s", &s); if (r >= 0) p.s = strdup(s); break;
		case 't': r = sd_bus_message_read(m, "v", "t", &p.u); break;
		case 'x': r = sd_bus_message_read(m, "v", "x", &p.i); break;
		case 'u': r = sd_bus_message_read(m, "v", "u", &u32); p.u = u32; break;
		case 'i': r = sd_bus_message_read(m, "v", "i", &i32); p.i = i32; break;
		case 'b': r = sd_bus_message_read(m, "v", "b", &b); p.u = (uint64_t)b; break;
		case 'd': r = sd_bus_message_read(m, "v", "d", &p.d); break;
		default: r = sd_bus_message_skip(m, "v"); p.type = 0; break;
		}
		if (r < 0)
			break;
		if (p.type) {
			struct prop *np = realloc(ps->p, sizeof *np * (size_t)(ps->n + 1));
			if (!np) {
				free(p.s);
				return -1;
			}
			ps->p = np;
			ps->p[ps->n++] = p;
		}
		r = sd_bus_message_exit_container(m);
	}
	return r < 0 ? r : 0;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_json(const struct props *ps, const char *bus)
{
	printf("{\"Bus\":");
	json_str(bus);
	for (int i = 0; i < ps->n; i++) {
		const struct prop *p = &ps->p[i];
		printf(",");
		json_str(p->name);
		putchar(':');
		switch (p->type) {
		case 's': json_str(p->s ? p->s : ""); break;
		case 'b': printf("%s", p->u ? "true" : "false"); break;
		case 'i': case 'x': printf("%" PRId64, p->i); break;
		case 'd': printf("%.6g", p->d); break;
		default: printf("%" PRIu64, p->u); break;
		}
	}
	printf("}\n");
}

/* 1234567 -> "1,234,567" */
static const char *grouped(uint64_t v, char *buf, size_t len)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v), o = 0;
	for (int i = 0; i < n && (size_t)o + 2 < len; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = 0;
	return buf;
}

static const char *human_count(uint64_t v, char *buf, size_t len)
{
	if (v >= 1000000000ull)
		snprintf(buf, len, "%.1fB", (double)v / 1e9);
	else if (v >= 1000000ull)
		snprintf(buf, len, "%.1fM", (double)v / 1e6);
	else if (v >= 1000ull)
		snprintf(buf, len, "%.1fK", (double)v / 1e3);
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

static const char *human_bytes(uint64_t v, char *buf, size_t len)
{
	const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double x = (double)v;
	int i = 0;
	while (x >= 1024 && i < 4) {
		x /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", x, u[i]);
	return buf;
}

static const char *human_usec(uint64_t us, char *buf, size_t len)
{
	if (us == 0)
		snprintf(buf, len, "-");
	else if (us < 1000)
		snprintf(buf, len, "%" PRIu64 " us", us);
	else if (us < 1000000)
		snprintf(buf, len, "%.1f ms", (double)us / 1e3);
	else
		snprintf(buf, len, "%.2f s", (double)us / 1e6);
	return buf;
}

static const char *human_uptime(uint64_t us, char *buf, size_t len)
{
	uint64_t s = us / 1000000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
	if (d)
		snprintf(buf, len, "%" PRIu64 "d %" PRIu64 "h %02" PRIu64 "m", d, h, m);
	else if (h)
		snprintf(buf, len, "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", h, m, s % 60);
	else if (m)
		snprintf(buf, len, "%" PRIu64 "m %02" PRIu64 "s", m, s % 60);
	else
		snprintf(buf, len, "%" PRIu64 "s", s);
	return buf;
}

static void print_human(const struct props *ps, const char *bus)
{
	char a[32], b[32], c[32], d[32];
	const char *state = S(ps, "State");
	printf("pagodad: %s", state);
	if (!strcmp(state, "loading"))
		printf(" (%.0f%%)", D(ps, "LoadProgress") * 100);
	printf(", up %s, on the %s bus\n", human_uptime(U(ps, "UptimeUSec"), a, sizeof a), bus);
	if (strcmp(state, "loading")) {
		printf("  model     %s (%s, %s parameters, %s), context %" PRIu64, S(ps, "ModelName"),
		       S(ps, "Architecture"), human_count(U(ps, "ParameterCount"), a, sizeof a), S(ps, "WeightType"),
		       U(ps, "ContextLength"));
		if (U(ps, "TrainedContextLength") && U(ps, "TrainedContextLength") != U(ps, "ContextLength"))
			printf(" (trained %" PRIu64 ")", U(ps, "TrainedContextLength"));
		printf("\n");
	}
	printf("  backend   %s\n", S(ps, "Backend"));
	printf("  load      %" PRIu64 " running, %" PRIu64 " waiting, %" PRIu64 " client(s), %.1f tokens/s\n",
	       U(ps, "RequestsRunning"), U(ps, "RequestsWaiting"), U(ps, "Clients"), D(ps, "TokensPerSecond"));
	printf("  requests  %s accepted, %s finished, %s failed, %s cancelled\n",
	       grouped(U(ps, "RequestsAccepted"), a, sizeof a), grouped(U(ps, "RequestsFinished"), b, sizeof b),
	       grouped(U(ps, "RequestsFailed"), c, sizeof c), grouped(U(ps, "RequestsCancelled"), d, sizeof d));
	printf("  tokens    %s prompt, %s generated\n", grouped(U(ps, "PromptTokens"), a, sizeof a),
	       grouped(U(ps, "GeneratedTokens"), b, sizeof b));
	uint64_t total = U(ps, "KVBlocksTotal");
	printf("  cache     prefix hits %.1f%%; KV blocks %s used + %s cached of %s (%.1f%% in use); %s preemption(s)\n",
	       D(ps, "PrefixCacheHitRate") * 100, grouped(U(ps, "KVBlocksUsed"), a, sizeof a),
	       grouped(U(ps, "KVBlocksCached"), b, sizeof b), grouped(total, c, sizeof c),
	       total ? 100.0 * (double)U(ps, "KVBlocksUsed") / (double)total : 0.0,
	       grouped(U(ps, "Preemptions"), d, sizeof d));
	if (*S(ps, "KVCacheTypeK"))
		printf("  kv        K %s, V %s; the pool holds %s tokens\n", S(ps, "KVCacheTypeK"), S(ps, "KVCacheTypeV"),
		       grouped(U(ps, "KVTokensTotal"), a, sizeof a));
	printf("  offload   %s in, %s out\n", human_bytes(U(ps, "OffloadBytesIn"), a, sizeof a),
	       human_bytes(U(ps, "OffloadBytesOut"), b, sizeof b));
	printf("  latency   first token p50 %s, p99 %s; between tokens p50 %s, p99 %s\n",
	       human_usec(U(ps, "TTFTP50USec"), a, sizeof a), human_usec(U(ps, "TTFTP99USec"), b, sizeof b),
	       human_usec(U(ps, "ITLP50USec"), c, sizeof c), human_usec(U(ps, "ITLP99USec"), d, sizeof d));
	if (U(ps, "SpecDraftedTokens") || (*S(ps, "Speculative") && strcmp(S(ps, "Speculative"), "off")))
		printf("  speculate %s by default; %s drafted, %s accepted (%.1f%%), %.2f tokens per pass\n",
		       S(ps, "Speculative"), grouped(U(ps, "SpecDraftedTokens"), a, sizeof a),
		       grouped(U(ps, "SpecAcceptedTokens"), b, sizeof b), D(ps, "SpecAcceptanceRate") * 100,
		       D(ps, "SpecTokensPerPass"));
}

/* GetAll from one bus: 0, or a negative errno with *why set. */
static int fetch(int system, struct props *ps, char *why, size_t len)
{
	sd_bus *bus = NULL;
	sd_bus_message *reply = NULL;
	sd_bus_error err = SD_BUS_ERROR_NULL;
	int r = system ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus);
	if (r < 0) {
		snprintf(why, len, "cannot connect to the %s bus: %s", system ? "system" : "session", strerror(-r));
		return r;
	}
	r = sd_bus_call_method(bus, NAME, PATH, "org.freedesktop.DBus.Properties", "GetAll", &err, &reply, "s", IFACE);
	if (r < 0)
		snprintf(why, len, "%s bus: %s", system ? "system" : "session", err.message ? err.message : strerror(-r));
	else if ((r = read_props(reply, ps)) < 0)
		snprintf(why, len, "%s bus: malformed answer", system ? "system" : "session");
	sd_bus_error_free(&err);
	sd_bus_message_unref(reply);
	sd_bus_flush_close_unref(bus);
	return r;
}

int cmd_status(int argc, char **argv)
{
	bool json = false;
	int which = -1; /* -1: system, then session */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: pagoda status [--json] [--system | --session]\n\n"
			       "Prints pagodad's state from its D-Bus object (org.pagoda.Daemon1): model, uptime,\n"
			       "load, cache and latencies. Looks on the system bus, then the session bus, unless\n"
			       "told which. --json prints every property as one JSON object.\n");
			return 0;
		}
		if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--system"))
			which = 1;
		else if (!strcmp(a, "--session") || !strcmp(a, "--user"))
			which = 0;
		else {
			fprintf(stderr, "pagoda status: unknown option %s (see --help)\n", a);
			return 2;
		}
	}
	struct props ps = { 0 };
	char why1[256] = "", why2[256] = "";
	int r, used;
	if (which >= 0) {
		used = which;
		r = fetch(which, &ps, why1, sizeof why1);
	} else {
		used = 1;
		r = fetch(1, &ps, why1, sizeof why1);
		if (r < 0) {
			props_free(&ps);
			memset(&ps, 0, sizeof ps);
			used = 0;
			r = fetch(0, &ps, why2, sizeof why2);
		}
	}
	if (r < 0) {
		fprintf(stderr, "pagoda status: pagodad not found: %s%s%s\n", why1, why2[0] ? "; " : "", why2);
		props_free(&ps);
		return 1;
	}
	const char *bus = used ? "system" : "session";
	if (json)
		print_json(&ps, bus);
	else
		print_human(&ps, bus);
	props_free(&ps);
	return 0;
}
