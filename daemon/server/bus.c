/* daemon/server/bus.c — the org.pagoda.Daemon1 object (see bus.h). */
#include "daemon/server/bus.h"
#include "daemon/engine/engine.h"
#include "daemon/model/model.h"
#include "daemon/server/ipc.h"
#include "daemon/server/log.h"
#include "daemon/server/notify.h"
#include "daemon/server/policy.h"
#include "kernels/types.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#define TICK_USEC 1000000ull   /* PropertiesChanged at most this often */
#define RETRY_USEC 10000000ull /* reconnect to a missing bus */

/* ---- the values ------------------------------------------------------------ */
enum field {
	F_MODEL, F_ARCH, F_PARAMS, F_WTYPE, F_CTX, F_CTX_TRAIN, F_BACKEND, F_STATE, F_UPTIME, F_PROGRESS,
	F_ACCEPTED, F_FINISHED, F_FAILED, F_CANCELLED, F_RUNNING, F_WAITING, F_CLIENTS,
	F_PROMPT, F_GEN, F_RATE, F_HIT, F_KV_TOTAL, F_KV_USED, F_KV_CACHED, F_PREEMPT,
	F_OFF_IN, F_OFF_OUT, F_TTFT50, F_TTFT99, F_ITL50, F_ITL99,
	F_KV_TYPE_K, F_KV_TYPE_V, F_KV_TOKENS,
	F_SPEC_DEFAULT, F_SPEC_DRAFTED, F_SPEC_ACCEPTED, F_SPEC_RATE, F_SPEC_TPP,
	NPROP,
	/* Stats() only */
	F_CACHED_PROMPT = NPROP, F_PREFILL, F_DECODE, F_STEPS, F_KV_WASTE, F_INFLIGHT,
	F_OFF_BLK_IN, F_OFF_BLK_OUT, F_OFF_SWAP_OUT, F_OFF_TIER_TOK, F_OFF_SLOTS, F_OFF_SLOTS_USED, F_OFF_WARM,
	F_OFF_DROPPED, F_OFF_ERR_CRC, F_OFF_ERR_SHORT, F_OFF_ERR_IO, F_OFF_ERR_NOSPC, F_OFF_ERR_HDR, F_OFF_OFF,
	F_OFF_ZC_IN, F_OFF_ZC_OUT, F_OFF_POOL_REG, F_OFF_DROPS, F_OFF_CQES,
	F_GM_REQ, F_GM_COMPILE, F_GM_MASKS, F_GM_MASK_T, F_GM_WAIT,
	NFIELD
};

struct fdef {
	const char *name;
	char sig; /* s t u d */
	bool emits;
};

static const struct fdef fields[NFIELD] = {
	[F_MODEL] = { "ModelName", 's', true },
	[F_ARCH] = { "Architecture", 's', true },
	[F_PARAMS] = { "ParameterCount", 't', true },
	[F_WTYPE] = { "WeightType", 's', true },
	[F_CTX] = { "ContextLength", 'u', true },
	[F_CTX_TRAIN] = { "TrainedContextLength", 'u', true },
	[F_BACKEND] = { "Backend", 's', true },
	[F_STATE] = { "State", 's', true },
	[F_UPTIME] = { "UptimeUSec", 't', false },
	[F_PROGRESS] = { "LoadProgress", 'd', true },
	[F_ACCEPTED] = { "RequestsAccepted", 't', true },
	[F_FINISHED] = { "RequestsFinished", 't', true },
	[F_FAILED] = { "RequestsFailed", 't', true },
	[F_CANCELLED] = { "RequestsCancelled", 't', true },
	[F_RUNNING] = { "RequestsRunning", 'u', true },
	[F_WAITING] = { "RequestsWaiting", 'u', true },
	[F_CLIENTS] = { "Clients", 'u', true },
	[F_PROMPT] = { "PromptTokens", 't', true },
	[F_GEN] = { "GeneratedTokens", 't', true },
	[F_RATE] = { "TokensPerSecond", 'd', true },
	[F_HIT] = { "PrefixCacheHitRate", 'd', true },
	[F_KV_TOTAL] = { "KVBlocksTotal", 't', true },
	[F_KV_USED] = { "KVBlocksUsed", 't', true },
	[F_KV_CACHED] = { "KVBlocksCached", 't', true },
	[F_PREEMPT] = { "Preemptions", 't', true },
	[F_OFF_IN] = { "OffloadBytesIn", 't', true },
	[F_OFF_OUT] = { "OffloadBytesOut", 't', true },
	[F_TTFT50] = { "TTFTP50USec", 't', true },
	[F_TTFT99] = { "TTFTP99USec", 't', true },
	[F_ITL50] = { "ITLP50USec", 't', true },
	[F_ITL99] = { "ITLP99USec", 't', true },
	[F_KV_TYPE_K] = { "KVCacheTypeK", 's', false },
	[F_KV_TYPE_V] = { "KVCacheTypeV", 's', false },
	[F_KV_TOKENS] = { "KVTokensTotal", 't', false },
	[F_SPEC_DEFAULT] = { "Speculative", 's', true },
	[F_SPEC_DRAFTED] = { "SpecDraftedTokens", 't', true },
	[F_SPEC_ACCEPTED] = { "SpecAcceptedTokens", 't', true },
	[F_SPEC_RATE] = { "SpecAcceptanceRate", 'd', true },
	[F_SPEC_TPP] = { "SpecTokensPerPass", 'd', true },
	[F_CACHED_PROMPT] = { "CachedPromptTokens", 't', false },
	[F_PREFILL] = { "PrefillTokens", 't', false },
	[F_DECODE] = { "DecodeTokens", 't', false },
	[F_STEPS] = { "Steps", 't', false },
	[F_KV_WASTE] = { "KVWaste", 'd', false },
	[F_INFLIGHT] = { "Inflight", 'u', false },
	[F_OFF_BLK_IN] = { "OffloadBlocksIn", 't', false },
	[F_OFF_BLK_OUT] = { "OffloadBlocksOut", 't', false },
	[F_OFF_SWAP_OUT] = { "OffloadSwapOutBlocks", 't', false },
	[F_OFF_TIER_TOK] = { "OffloadPromptTokens", 't', false },
	[F_OFF_SLOTS] = { "OffloadSlotsTotal", 't', false },
	[F_OFF_SLOTS_USED] = { "OffloadSlotsUsed", 't', false },
	[F_OFF_WARM] = { "OffloadWarmBlocks", 't', false },
	[F_OFF_DROPPED] = { "OffloadDroppedWrites", 't', false },
	[F_OFF_ERR_CRC] = { "OffloadErrorsChecksum", 't', false },
	[F_OFF_ERR_SHORT] = { "OffloadErrorsShort", 't', false },
	[F_OFF_ERR_IO] = { "OffloadErrorsIO", 't', false },
	[F_OFF_ERR_NOSPC] = { "OffloadErrorsNoSpace", 't', false },
	[F_OFF_ERR_HDR] = { "OffloadErrorsHeader", 't', false },
	[F_OFF_OFF] = { "OffloadDisabled", 'u', false },
	[F_OFF_ZC_IN] = { "OffloadZeroCopyIn", 't', false },
	[F_OFF_ZC_OUT] = { "OffloadZeroCopyOut", 't', false },
	[F_OFF_POOL_REG] = { "OffloadPoolRegistered", 'u', false },
	[F_OFF_DROPS] = { "OffloadDrops", 't', false },
	[F_OFF_CQES] = { "OffloadRingCompletions", 't', false },
	[F_GM_REQ] = { "ConstraintRequests", 't', false },
	[F_GM_COMPILE] = { "ConstraintCompileUSec", 't', false },
	[F_GM_MASKS] = { "ConstraintMasks", 't', false },
	[F_GM_MASK_T] = { "ConstraintMaskUSec", 't', false },
	[F_GM_WAIT] = { "ConstraintWaitUSec", 't', false },
};

struct val {
	const char *s;
	uint64_t u;
	double d;
};

struct pbus {
	enum bus_kind kind;
	sd_bus *bus;
	struct engine *eng;
	struct server *srv;
	struct policy pol;
	char group_name[64];
	char backend[96];
	char spec_default[8]; /* the engine's, a copy that outlives the snapshot */
	uint64_t next_tick, next_retry;
	bool warned;
	struct val last[NPROP];
	/* One snapshot serves one message, a whole GetAll or PropertiesChanged
	 * (a getter call per property; engine_get_stats takes the engine's
	 * lock): taken at the first getter, dropped before the next message. */
	struct val cache[NFIELD];
	bool cache_ok;
};

int bus_parse_kind(const char *s)
{
	if (!s || !*s || !strcmp(s, "auto"))
		return BUS_AUTO;
	if (!strcmp(s, "system"))
		return BUS_SYSTEM;
	if (!strcmp(s, "session") || !strcmp(s, "user"))
		return BUS_SESSION;
	if (!strcmp(s, "none") || !strcmp(s, "off"))
		return BUS_NONE;
	return -1;
}

enum bus_kind bus_auto_kind(void)
{
	const char *inv = getenv("INVOCATION_ID");
	if (inv && *inv && getppid() == 1)
		return BUS_SYSTEM; /* a unit of the system manager */
	if (geteuid() == 0)
		return BUS_SYSTEM;
	struct passwd *pw = getpwnam("pagoda");
	if (pw && pw->pw_uid == geteuid())
		return BUS_SYSTEM;
	return BUS_SESSION;
}

static const char *nz(const char *s) { return s ? s : ""; }

static void snapshot_now(struct pbus *b, struct val *v)
{
	memset(v, 0, sizeof(struct val) * NFIELD);
	for (int i = 0; i < NFIELD; i++)
		v[i].s = "";
	uint64_t now = notify_now_usec();
	v[F_STATE].s = notify_state_name(notify_state());
	v[F_UPTIME].u = now - notify_start_usec();
	v[F_PROGRESS].d = notify_progress();
	v[F_BACKEND].s = b->backend;
	if (b->eng) {
		const struct model *m = engine_model(b->eng);
		v[F_MODEL].s = nz(m->name);
		v[F_ARCH].s = nz(m->arch_name);
		v[F_PARAMS].u = m->n_params;
		v[F_WTYPE].s = nz(pg_type_name(m->main_type));
		v[F_CTX].u = (uint64_t)engine_n_ctx(b->eng);
		v[F_CTX_TRAIN].u = (uint64_t)m->hp.n_ctx_train;
		struct engine_stats st;
		engine_get_stats(b->eng, &st);
		v[F_ACCEPTED].u = st.requests_submitted;
		v[F_FINISHED].u = st.requests_finished;
		v[F_FAILED].u = st.requests_failed;
		v[F_CANCELLED].u = st.requests_cancelled;
		v[F_RUNNING].u = (uint64_t)(st.running > 0 ? st.running : 0);
		v[F_WAITING].u = (uint64_t)(st.waiting > 0 ? st.waiting : 0);
		v[F_PROMPT].u = st.prompt_tokens;
		v[F_GEN].u = st.gen_tokens;
		v[F_HIT].d = st.prompt_tokens ? (double)st.cached_prompt_tokens / (double)st.prompt_tokens : 0.0;
		v[F_KV_TOTAL].u = (uint64_t)(st.kv_blocks_total > 0 ? st.kv_blocks_total : 0);
		v[F_KV_USED].u = (uint64_t)(st.kv_blocks_used > 0 ? st.kv_blocks_used : 0);
		v[F_KV_CACHED].u = (uint64_t)(st.kv_blocks_cached > 0 ? st.kv_blocks_cached : 0);
		v[F_PREEMPT].u = st.preemptions;
		v[F_TTFT50].u = st.ttft_p50 / 1000;
		v[F_TTFT99].u = st.ttft_p99 / 1000;
		v[F_ITL50].u = st.itl_p50 / 1000;
		v[F_ITL99].u = st.itl_p99 / 1000;
		v[F_SPEC_DEFAULT].s = b->spec_default;
		snprintf(b->spec_default, sizeof b->spec_default, "%s", st.spec_default);
		v[F_SPEC_DRAFTED].u = st.spec_drafted;
		v[F_SPEC_ACCEPTED].u = st.spec_accepted;
		v[F_SPEC_RATE].d = st.spec_drafted ? (double)st.spec_accepted / (double)st.spec_drafted : 0.0;
		v[F_SPEC_TPP].d = st.spec_passes ? (double)st.spec_tokens / (double)st.spec_passes : 0.0;
		v[F_CACHED_PROMPT].u = st.cached_prompt_tokens;
		v[F_PREFILL].u = st.prefill_tokens;
		v[F_DECODE].u = st.decode_tokens;
		v[F_STEPS].u = st.steps;
		v[F_KV_WASTE].d = st.kv_waste;
		v[F_GM_REQ].u = st.constraint_requests;
		v[F_GM_COMPILE].u = st.constraint_compile_ns / 1000;
		v[F_GM_MASKS].u = st.constraint_masks;
		v[F_GM_MASK_T].u = st.constraint_mask_ns / 1000;
		v[F_GM_WAIT].u = st.constraint_wait_ns / 1000;
		v[F_KV_TYPE_K].s = nz(st.kv_type_k);
		v[F_KV_TYPE_V].s = nz(st.kv_type_v);
		v[F_KV_TOKENS].u = (uint64_t)(st.kv_tokens_total > 0 ? st.kv_tokens_total : 0);
		const struct engine_offload *o = &st.offload;
		v[F_OFF_IN].u = o->bytes_in;
		v[F_OFF_OUT].u = o->bytes_out;
		v[F_OFF_BLK_IN].u = o->blocks_in;
		v[F_OFF_BLK_OUT].u = o->blocks_out;
		v[F_OFF_SWAP_OUT].u = o->swap_out_blocks;
		v[F_OFF_TIER_TOK].u = st.tier_prompt_tokens;
		v[F_OFF_SLOTS].u = (uint64_t)o->slots_total;
		v[F_OFF_SLOTS_USED].u = (uint64_t)o->slots_used;
		v[F_OFF_WARM].u = o->warm_blocks;
		v[F_OFF_DROPPED].u = o->dropped_writes;
		v[F_OFF_ERR_CRC].u = o->err_crc;
		v[F_OFF_ERR_SHORT].u = o->err_short;
		v[F_OFF_ERR_IO].u = o->err_io;
		v[F_OFF_ERR_NOSPC].u = o->err_nospc;
		v[F_OFF_ERR_HDR].u = o->err_header;
		v[F_OFF_OFF].u = o->disabled;
		v[F_OFF_ZC_IN].u = o->zero_copy_in;
		v[F_OFF_ZC_OUT].u = o->zero_copy_out;
		v[F_OFF_POOL_REG].u = o->pool_bufs;
		v[F_OFF_DROPS].u = o->drops;
		v[F_OFF_CQES].u = o->ring_cqes;
	}
	if (b->srv) {
		struct ipc_live l;
		ipc_live(b->srv, &l);
		v[F_CLIENTS].u = (uint64_t)l.clients;
		v[F_INFLIGHT].u = (uint64_t)l.inflight;
		v[F_RATE].d = l.tokens_per_s;
	}
}

static void snapshot(struct pbus *b, struct val *v)
{
	if (!b->cache_ok) {
		snapshot_now(b, b->cache);
		b->cache_ok = true;
	}
	memcpy(v, b->cache, sizeof b->cache);
}

static void invalidate(struct pbus *b) { b->cache_ok = false; }

static int append_val(sd_bus_message *m, int f, const struct val *v)
{
	switch (fields[f].sig) {
	case 's': return sd_bus_message_append(m, "s", v->s);
	case 't': return sd_bus_message_append(m, "t", v->u);
	case 'u': return sd_bus_message_append(m, "u", (uint32_t)(v->u > UINT32_MAX ? UINT32_MAX : v->u));
	case 'd': return sd_bus_message_append(m, "d", v->d);
	}
	return -EINVAL;
}

static int get_prop(sd_bus *bus, const char *path, const char *iface, const char *prop, sd_bus_message *reply,
		    void *userdata, sd_bus_error *error)
{
	struct pbus *b = userdata;
	for (int f = 0; f < NPROP; f++) {
		if (strcmp(fields[f].name, prop))
			continue;
		struct val v[NFIELD];
		snapshot(b, v);
		return append_val(reply, f, &v[f]);
	}
	return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_PROPERTY, "no property %s", prop);
}

static int reply_stats(struct pbus *b, sd_bus_message *call)
{
	struct val v[NFIELD];
	snapshot(b, v);
	sd_bus_message *r = NULL;
	int rc = sd_bus_message_new_method_return(call, &r);
	if (rc >= 0)
		rc = sd_bus_message_open_container(r, 'a', "{sv}");
	for (int f = 0; rc >= 0 && f < NFIELD; f++) {
		char sig[2] = { fields[f].sig, 0 };
		rc = sd_bus_message_open_container(r, 'e', "sv");
		if (rc >= 0)
			rc = sd_bus_message_append(r, "s", fields[f].name);
		if (rc >= 0)
			rc = sd_bus_message_open_container(r, 'v', sig);
		if (rc >= 0)
			rc = append_val(r, f, &v[f]);
		if (rc >= 0)
			rc = sd_bus_message_close_container(r);
		if (rc >= 0)
			rc = sd_bus_message_close_container(r);
	}
	if (rc >= 0)
		rc = sd_bus_message_close_container(r);
	if (rc >= 0)
		rc = sd_bus_send(NULL, r, NULL);
	sd_bus_message_unref(r);
	return rc;
}

/* ---- methods: check the caller, then act ---------------------------------- */
enum op { OP_DRAIN, OP_RELOAD, OP_DROP, OP_STATS };
static const char *op_name[] = { "Drain", "Reload", "DropPrefixCache", "Stats" };

struct call {
	struct pbus *b;
	sd_bus_message *m;
	enum op op;
};

static void call_free(void *p)
{
	struct call *c = p;
	sd_bus_message_unref(c->m);
	free(c);
}

static void act(struct pbus *b, sd_bus_message *m, enum op op)
{
	char err[512];
	invalidate(b);
	switch (op) {
	case OP_DRAIN:
		if (!b->srv) {
			sd_bus_reply_method_errorf(m, SD_BUS_ERROR_FAILED, "pagodad is still loading its model");
			return;
		}
		ipc_drain(b->srv, false, "Drain() over D-Bus");
		sd_bus_reply_method_return(m, NULL);
		return;
	case OP_RELOAD:
		if (!b->srv) {
			sd_bus_reply_method_errorf(m, SD_BUS_ERROR_FAILED, "pagodad is still loading its model");
			return;
		}
		if (ipc_reload(b->srv, "Reload() over D-Bus", err, sizeof err) < 0)
			sd_bus_reply_method_errorf(m, SD_BUS_ERROR_FAILED, "reload failed: %s", err);
		else
			sd_bus_reply_method_return(m, NULL);
		return;
	case OP_DROP:
		if (b->eng) {
			engine_drop_prefix_cache(b->eng);
			log_msg(LOG_NOTICE, "DropPrefixCache() over D-Bus: dropping the cached prefix blocks (the NVMe tier's too)");
		}
		sd_bus_reply_method_return(m, NULL);
		return;
	case OP_STATS:
		if (reply_stats(b, m) < 0)
			sd_bus_reply_method_errorf(m, SD_BUS_ERROR_FAILED, "cannot build the reply");
		return;
	}
}

static int on_creds(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
	struct call *c = userdata;
	struct pbus *b = c->b;
	const sd_bus_error *e = sd_bus_message_get_error(reply);
	if (e) {
		log_msg(LOG_WARNING, "D-Bus: cannot learn who called %s(): %s", op_name[c->op], e->message);
		sd_bus_reply_method_errorf(c->m, SD_BUS_ERROR_ACCESS_DENIED, "cannot verify the caller: %s",
					   e->message);
		return 0;
	}
	bool have_uid = false;
	uint32_t uid = 0;
	const uint32_t *groups = NULL;
	size_t gsize = 0;
	int r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *key;
		if ((r = sd_bus_message_read(reply, "s", &key)) < 0)
			break;
		if (!strcmp(key, "UnixUserID")) {
			r = sd_bus_message_read(reply, "v", "u", &uid);
			have_uid = r >= 0;
		} else if (!strcmp(key, "UnixGroupIDs")) {
			if ((r = sd_bus_message_enter_container(reply, 'v', "au")) >= 0) {
				r = sd_bus_message_read_array(reply, 'u', (const void **)&groups, &gsize);
				if (r >= 0)
					r = sd_bus_message_exit_container(reply);
			}
		} else
			r = sd_bus_message_skip(reply, "v");
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	if (r < 0) {
		sd_bus_reply_method_errorf(c->m, SD_BUS_ERROR_ACCESS_DENIED, "cannot verify the caller: bad reply");
		return 0;
	}
	int ng = (int)(gsize / sizeof(uint32_t));
	gid_t g[256];
	if (ng > 256)
		ng = 256;
	for (int i = 0; i < ng; i++)
		g[i] = (gid_t)groups[i];
	const char *sender = nz(sd_bus_message_get_sender(c->m));
	if (!have_uid || !policy_allows(&b->pol, (uid_t)uid, (gid_t)-1, g, ng)) {
		log_msg(LOG_NOTICE, "D-Bus: refused %s() to %s (uid %u): not root, uid %u or in group %s", op_name[c->op],
			sender, (unsigned)uid, (unsigned)b->pol.owner, b->group_name[0] ? b->group_name : "(none)");
		sd_bus_reply_method_errorf(c->m, SD_BUS_ERROR_ACCESS_DENIED,
					   "%s() needs root, uid %u, or membership of group %s", op_name[c->op],
					   (unsigned)b->pol.owner, b->group_name[0] ? b->group_name : "(none set)");
		return 0;
	}
	log_msg(LOG_INFO, "D-Bus: %s() from %s (uid %u)", op_name[c->op], sender, (unsigned)uid);
	act(b, c->m, c->op);
	return 0;
}

static int method(sd_bus_message *m, void *userdata, sd_bus_error *error, enum op op)
{
	struct pbus *b = userdata;
	const char *sender = sd_bus_message_get_sender(m);
	if (!sender)
		return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED, "no sender to check");
	struct call *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->b = b;
	c->m = sd_bus_message_ref(m);
	c->op = op;
	sd_bus_slot *slot = NULL;
	/* Asynchronous: the loop goes on while the bus answers. */
	int r = sd_bus_call_method_async(sd_bus_message_get_bus(m), &slot, "org.freedesktop.DBus",
					 "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetConnectionCredentials",
					 on_creds, c, "s", sender);
	if (r < 0) {
		call_free(c);
		return r;
	}
	sd_bus_slot_set_destroy_callback(slot, call_free);
	sd_bus_slot_set_floating(slot, 1);
	sd_bus_slot_unref(slot);
	return 1; /* the reply comes later */
}

static int m_drain(sd_bus_message *m, void *u, sd_bus_error *e) { return method(m, u, e, OP_DRAIN); }
static int m_reload(sd_bus_message *m, void *u, sd_bus_error *e) { return method(m, u, e, OP_RELOAD); }
static int m_drop(sd_bus_message *m, void *u, sd_bus_error *e) { return method(m, u, e, OP_DROP); }
static int m_stats(sd_bus_message *m, void *u, sd_bus_error *e) { return method(m, u, e, OP_STATS); }

#define PS(name, sig) SD_BUS_PROPERTY(name, sig, get_prop, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)
static const sd_bus_vtable vtable[] = {
	SD_BUS_VTABLE_START(0),
	PS("ModelName", "s"),
	PS("Architecture", "s"),
	PS("ParameterCount", "t"),
	PS("WeightType", "s"),
	PS("ContextLength", "u"),
	PS("TrainedContextLength", "u"),
	PS("Backend", "s"),
	PS("State", "s"),
	SD_BUS_PROPERTY("UptimeUSec", "t", get_prop, 0, 0),
	PS("LoadProgress", "d"),
	PS("RequestsAccepted", "t"),
	PS("RequestsFinished", "t"),
	PS("RequestsFailed", "t"),
	PS("RequestsCancelled", "t"),
	PS("RequestsRunning", "u"),
	PS("RequestsWaiting", "u"),
	PS("Clients", "u"),
	PS("PromptTokens", "t"),
	PS("GeneratedTokens", "t"),
	PS("TokensPerSecond", "d"),
	PS("PrefixCacheHitRate", "d"),
	PS("KVBlocksTotal", "t"),
	PS("KVBlocksUsed", "t"),
	PS("KVBlocksCached", "t"),
	PS("Preemptions", "t"),
	PS("OffloadBytesIn", "t"),
	PS("OffloadBytesOut", "t"),
	PS("TTFTP50USec", "t"),
	PS("TTFTP99USec", "t"),
	PS("ITLP50USec", "t"),
	PS("ITLP99USec", "t"),
	SD_BUS_PROPERTY("KVCacheTypeK", "s", get_prop, 0, 0),
	SD_BUS_PROPERTY("KVCacheTypeV", "s", get_prop, 0, 0),
	SD_BUS_PROPERTY("KVTokensTotal", "t", get_prop, 0, 0),
	PS("Speculative", "s"),
	PS("SpecDraftedTokens", "t"),
	PS("SpecAcceptedTokens", "t"),
	PS("SpecAcceptanceRate", "d"),
	PS("SpecTokensPerPass", "d"),
	SD_BUS_METHOD("Drain", "", "", m_drain, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD("Reload", "", "", m_reload, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD("DropPrefixCache", "", "", m_drop, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Stats", "", SD_BUS_PARAM(), "a{sv}", SD_BUS_PARAM(stats), m_stats,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END
};
#undef PS

/* ---- connection ------------------------------------------------------------- */
static const char *kind_name(enum bus_kind k) { return k == BUS_SYSTEM ? "system" : "session"; }

static int on_name(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
	struct pbus *b = userdata;
	const sd_bus_error *e = sd_bus_message_get_error(reply);
	uint32_t ret = 0;
	if (e)
		log_msg(LOG_WARNING, "D-Bus: cannot own %s on the %s bus: %s", PAGODA_BUS_NAME, kind_name(b->kind),
			e->message);
	else if (sd_bus_message_read(reply, "u", &ret) >= 0 && ret != 1 /* primary owner */)
		log_msg(LOG_WARNING, "D-Bus: %s is owned by another process on the %s bus", PAGODA_BUS_NAME,
			kind_name(b->kind));
	else
		log_msg(LOG_INFO, "D-Bus: %s on the %s bus", PAGODA_BUS_NAME, kind_name(b->kind));
	return 0;
}

static void try_connect(struct pbus *b)
{
	sd_bus *bus = NULL;
	int r = b->kind == BUS_SYSTEM ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus);
	if (r >= 0)
		r = sd_bus_add_object_vtable(bus, NULL, PAGODA_BUS_PATH, PAGODA_BUS_IFACE, vtable, b);
	if (r >= 0)
		r = sd_bus_call_method_async(bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
					     "org.freedesktop.DBus", "RequestName", on_name, b, "su", PAGODA_BUS_NAME,
					     (uint32_t)0x4 /* DBUS_NAME_FLAG_DO_NOT_QUEUE */);
	if (r < 0) {
		log_msg(b->warned ? LOG_DEBUG : LOG_WARNING, "D-Bus: cannot connect to the %s bus: %s; retrying every %d s",
			kind_name(b->kind), strerror(-r), (int)(RETRY_USEC / 1000000));
		b->warned = true;
		sd_bus_unref(bus);
		b->next_retry = notify_now_usec() + RETRY_USEC;
		return;
	}
	b->bus = bus;
	b->warned = false;
	struct val v[NFIELD];
	invalidate(b);
	snapshot(b, v);
	memcpy(b->last, v, sizeof b->last);
	b->next_tick = notify_now_usec() + TICK_USEC;
}

static void resolve_group(struct pbus *b, const struct srv_config *cfg)
{
	char err[256];
	const char *g = cfg && cfg->allow_group[0] ? cfg->allow_group : NULL;
	if (!g && getgrnam("pagoda"))
		g = "pagoda";
	struct policy p;
	if (policy_init(&p, g, NULL, false, err, sizeof err) < 0) {
		log_msg(LOG_WARNING, "D-Bus: %s; methods are for root and uid %u only", err, (unsigned)geteuid());
		policy_init(&p, NULL, NULL, false, err, sizeof err);
		g = NULL;
	}
	b->pol = p;
	snprintf(b->group_name, sizeof b->group_name, "%s", g ? g : "");
}

struct pbus *bus_open(enum bus_kind kind, const struct srv_config *cfg)
{
	if (kind == BUS_AUTO)
		kind = bus_auto_kind();
	if (kind == BUS_NONE)
		return NULL;
	struct pbus *b = calloc(1, sizeof *b);
	if (!b)
		return NULL;
	b->kind = kind;
	resolve_group(b, cfg);
	try_connect(b);
	return b;
}

void bus_reconfigure(struct pbus *b, const struct srv_config *cfg)
{
	if (b)
		resolve_group(b, cfg);
}

void bus_set_engine(struct pbus *b, struct engine *e)
{
	if (b) {
		b->eng = e;
		if (e)
			engine_backend_describe(e, b->backend, sizeof b->backend);
		invalidate(b);
	}
}

void bus_set_server(struct pbus *b, struct server *s)
{
	if (b) {
		b->srv = s;
		invalidate(b);
	}
}

void bus_close(struct pbus *b)
{
	if (!b)
		return;
	if (b->bus)
		sd_bus_close_unref(b->bus); /* no flush: it could block on a stuck bus */
	free(b);
}

static void emit_changes(struct pbus *b)
{
	struct val v[NFIELD];
	invalidate(b);
	snapshot(b, v);
	char *names[NPROP + 1];
	int n = 0;
	for (int f = 0; f < NPROP; f++) {
		if (!fields[f].emits)
			continue;
		bool same = fields[f].sig == 's' ? !strcmp(v[f].s, b->last[f].s)
			  : fields[f].sig == 'd' ? v[f].d == b->last[f].d
						 : v[f].u == b->last[f].u;
		if (!same)
			names[n++] = (char *)fields[f].name;
	}
	names[n] = NULL;
	if (!n)
		return;
	int r = sd_bus_emit_properties_changed_strv(b->bus, PAGODA_BUS_PATH, PAGODA_BUS_IFACE, names);
	if (r < 0)
		log_msg(LOG_DEBUG, "D-Bus: PropertiesChanged: %s", strerror(-r));
	memcpy(b->last, v, sizeof b->last);
}

void bus_prepare(struct pbus *b, int *fd, uint32_t *events, int *timeout_ms)
{
	*fd = -1;
	*events = 0;
	*timeout_ms = -1;
	if (!b)
		return;
	uint64_t now = notify_now_usec(), until;
	if (!b->bus) {
		until = b->next_retry;
	} else {
		*fd = sd_bus_get_fd(b->bus);
		int ev = sd_bus_get_events(b->bus);
		*events = (ev & POLLIN ? EPOLLIN : 0) | (ev & POLLOUT ? EPOLLOUT : 0);
		until = b->next_tick;
		uint64_t t;
		if (sd_bus_get_timeout(b->bus, &t) >= 0 && t < until)
			until = t;
	}
	*timeout_ms = until <= now ? 0 : (int)((until - now + 999) / 1000);
}

void bus_process(struct pbus *b)
{
	if (!b)
		return;
	uint64_t now = notify_now_usec();
	if (!b->bus) {
		if (now >= b->next_retry)
			try_connect(b);
		return;
	}
	int r;
	do
		invalidate(b);
	while ((r = sd_bus_process(b->bus, NULL)) > 0);
	if (r < 0) {
		log_msg(LOG_WARNING, "D-Bus: lost the %s bus (%s); reconnecting", kind_name(b->kind), strerror(-r));
		sd_bus_close_unref(b->bus);
		b->bus = NULL;
		b->next_retry = now + RETRY_USEC / 10;
		return;
	}
	if (now >= b->next_tick) {
		emit_changes(b);
		b->next_tick = now + TICK_USEC;
	}
}
