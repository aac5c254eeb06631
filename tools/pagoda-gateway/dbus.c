/* tools/pagoda-gateway/dbus.c — the daemon's counters that its STATS
 * answer has no room for (the NVMe tier, speculative decoding, the
 * engine's steps), read at each scrape from pagodad's D-Bus object
 * (org.pagoda.Daemon1): Stats() when the gateway may call it (root,
 * the daemon's uid, group pagoda, as the unit's user is), else the
 * properties anyone may read, which hold fewer of them. One connection,
 * used by one scrape at a time. */
#include "tools/pagoda-gateway/gw.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define NAME "org.pagoda.Daemon1"
#define PATH "/org/pagoda/Daemon1"
#define IFACE "org.pagoda.Daemon1"
#define CALL_USEC 2000000ull

#define C(key, name, labels, help) { key, name, "counter", labels, help, 0 }
#define S(key, name, help) { key, name, "counter", "", help, 1e-6 } /* USec read, seconds shown */
#define G(key, name, labels, help) { key, name, "gauge", labels, help, 0 }
const struct gw_bus_metric gw_bus_metrics[GW_BUS_N] = {
	C("OffloadBytesIn", "pagoda_offload_read_bytes_total", "", "Bytes read back from the NVMe tier."),
	C("OffloadBytesOut", "pagoda_offload_written_bytes_total", "", "Bytes written to the NVMe tier."),
	C("OffloadBlocksIn", "pagoda_offload_read_blocks_total", "", "KV blocks read back from the NVMe tier."),
	C("OffloadBlocksOut", "pagoda_offload_written_blocks_total", "", "KV blocks written to the NVMe tier."),
	C("OffloadSwapOutBlocks", "pagoda_offload_swap_out_blocks_total", "",
	  "KV blocks written for preempted sequences."),
	C("OffloadPromptTokens", "pagoda_offload_prompt_tokens_total", "",
	  "Cached prompt tokens that came from the NVMe tier."),
	C("OffloadDroppedWrites", "pagoda_offload_dropped_writes_total", "", "Tier writes dropped (queue full)."),
	C("OffloadErrorsChecksum", "pagoda_offload_errors_total", "kind=\"checksum\"", "Tier reads or writes that failed."),
	C("OffloadErrorsShort", "pagoda_offload_errors_total", "kind=\"short\"", NULL),
	C("OffloadErrorsIO", "pagoda_offload_errors_total", "kind=\"io\"", NULL),
	C("OffloadErrorsNoSpace", "pagoda_offload_errors_total", "kind=\"nospace\"", NULL),
	C("OffloadErrorsHeader", "pagoda_offload_errors_total", "kind=\"header\"", NULL),
	G("OffloadSlotsTotal", "pagoda_offload_slots", "", "Block slots of the NVMe tier."),
	G("OffloadSlotsUsed", "pagoda_offload_slots_used", "", "Block slots of the NVMe tier holding a block."),
	G("OffloadDisabled", "pagoda_offload_disabled", "", "1 when the tier turned itself off after errors."),
	C("SpecDraftedTokens", "pagoda_spec_draft_tokens_total", "", "Draft tokens verified by speculative decoding."),
	C("SpecAcceptedTokens", "pagoda_spec_accepted_tokens_total", "", "Draft tokens the model accepted."),
	C("PrefillTokens", "pagoda_prefill_tokens_total", "", "Positions computed in prefill (recomputes too)."),
	C("DecodeTokens", "pagoda_decode_tokens_total", "", "Positions computed one at a time."),
	C("Steps", "pagoda_steps_total", "", "Engine steps that ran a forward pass."),
	C("ConstraintRequests", "pagoda_constraint_requests_total", "",
	  "Requests with a structured-output constraint (JSON Schema, regex, grammar)."),
	S("ConstraintCompileUSec", "pagoda_constraint_compile_seconds_total",
	  "Time compiling constraints (cache hits too)."),
	C("ConstraintMasks", "pagoda_constraint_masks_total", "", "Token masks computed for constrained requests."),
	S("ConstraintMaskUSec", "pagoda_constraint_mask_seconds_total",
	  "CPU time computing token masks, every thread's."),
	S("ConstraintWaitUSec", "pagoda_constraint_wait_seconds_total",
	  "Time the engine spent on masks after forward passes (what slows decoding)."),
};

struct gw_bus {
	pthread_mutex_t lock;
	int kind;      /* 0 auto, 1 system, 2 session */
	sd_bus *bus;   /* NULL until a scrape connects */
	int on;        /* the bus it is on: 1 system, 2 session */
};

int gw_bus_open(const char *kind, struct gw_bus **out, char *err, size_t errlen)
{
	*out = NULL;
	int k;
	if (!*kind || !strcmp(kind, "auto"))
		k = 0;
	else if (!strcmp(kind, "system"))
		k = 1;
	else if (!strcmp(kind, "session"))
		k = 2;
	else if (!strcmp(kind, "none"))
		return 0;
	else {
		snprintf(err, errlen, "bus: '%s' is not auto, system, session or none", kind);
		return -1;
	}
	struct gw_bus *b = calloc(1, sizeof *b);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_mutex_init(&b->lock, NULL);
	b->kind = k;
	*out = b;
	return 0;
}

void gw_bus_close(struct gw_bus *b)
{
	if (!b)
		return;
	sd_bus_flush_close_unref(b->bus);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

/* Stats()'s or GetAll's a{sv}: the values the table names. */
static int read_vals(sd_bus_message *m, struct gw_bus_vals *v)
{
	int r = sd_bus_message_enter_container(m, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *key, *contents;
		char type;
		if ((r = sd_bus_message_read(m, "s", &key)) < 0 || (r = sd_bus_message_peek_type(m, &type, &contents)) < 0)
			break;
		int i = 0;
		while (i < GW_BUS_N && strcmp(gw_bus_metrics[i].key, key))
			i++;
		uint64_t t = 0;
		uint32_t u = 0;
		double d = 0;
		char c = i < GW_BUS_N ? contents[0] : 0;
		if (c == 't')
			r = sd_bus_message_read(m, "v", "t", &t);
		else if (c == 'u')
			r = sd_bus_message_read(m, "v", "u", &u);
		else if (c == 'd')
			r = sd_bus_message_read(m, "v", "d", &d);
		else
			r = sd_bus_message_skip(m, "v");
		if (r >= 0 && (c == 't' || c == 'u' || c == 'd')) {
			v->v[i] = c == 't' ? (double)t : c == 'u' ? (double)u : d;
			if (gw_bus_metrics[i].scale)
				v->v[i] *= gw_bus_metrics[i].scale;
			v->have[i] = true;
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
	}
	return r < 0 ? r : 0;
}

/* One bus: Stats(), or GetAll when Stats() is refused. */
static int fetch(sd_bus *bus, struct gw_bus_vals *v)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	int r = sd_bus_call_method(bus, NAME, PATH, IFACE, "Stats", &e, &reply, "");
	if (r < 0 && sd_bus_error_has_name(&e, SD_BUS_ERROR_ACCESS_DENIED)) {
		sd_bus_error_free(&e);
		r = sd_bus_call_method(bus, NAME, PATH, "org.freedesktop.DBus.Properties", "GetAll", &e, &reply, "s",
				       IFACE);
	} else if (r >= 0) {
		v->full = true;
	}
	sd_bus_error_free(&e);
	if (r >= 0)
		r = read_vals(reply, v);
	sd_bus_message_unref(reply);
	return r;
}

static int connect_to(struct gw_bus *b, int which)
{
	sd_bus *bus = NULL;
	int r = which == 1 ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus);
	if (r < 0)
		return r;
	sd_bus_set_method_call_timeout(bus, CALL_USEC);
	b->bus = bus;
	b->on = which;
	return 0;
}

int gw_bus_read(struct gw_bus *b, struct gw_bus_vals *v)
{
	memset(v, 0, sizeof *v);
	if (!b)
		return -ENOENT;
	pthread_mutex_lock(&b->lock);
	int r = -ENOENT;
	if (b->bus) {
		r = fetch(b->bus, v);
		if (r < 0) { /* the daemon or the bus went away: a new connection next time */
			b->bus = sd_bus_flush_close_unref(b->bus);
			memset(v, 0, sizeof *v);
		}
	} else {
		/* auto: the system bus, then the session bus (as `pagoda status`) */
		for (int which = b->kind ? b->kind : 1; which <= (b->kind ? b->kind : 2); which++) {
			if ((r = connect_to(b, which)) < 0)
				continue;
			if ((r = fetch(b->bus, v)) >= 0)
				break;
			b->bus = sd_bus_flush_close_unref(b->bus);
			memset(v, 0, sizeof *v);
		}
	}
	v->up = r >= 0;
	pthread_mutex_unlock(&b->lock);
	return r < 0 ? r : 0;
}
