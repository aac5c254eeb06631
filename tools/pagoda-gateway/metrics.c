/* tools/pagoda-gateway/metrics.c — /metrics in Prometheus' text format.
 * Counters and gauges of the whole daemon come from pagodad itself (a
 * PG_OP_STATS snapshot per scrape), under vLLM's names where the meaning is
 * the same, so that routers and dashboards made for vLLM read them. The
 * latency histograms cover the requests of this gateway, from the times
 * the daemon measured (a DONE event's timings); inter-token latency is the
 * gap between tokens as they reach the gateway. */
#include "tools/pagoda-gateway/gw.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's buckets, so that its dashboards' quantiles mean the same here. */
static const double ttft_b[] = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
				 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0 };
static const double itl_b[] = { 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
				0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0 };
static const double req_b[] = { 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
				30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0 };
#define NB(a) (sizeof(a) / sizeof(a[0]))
#define MAXB 24

struct hist {
	const char *name, *help;
	const double *b;
	size_t nb;
	uint64_t count[MAXB + 1]; /* per bucket, the last one +Inf */
	uint64_t n;
	double sum;
};

enum { H_TTFT, H_ITL, H_E2E, H_QUEUE, H_PREFILL, H_DECODE, NH };

static struct {
	pthread_mutex_t lock;
	char model[160];          /* the label's value, escaped */
	struct hist h[NH];
	uint64_t finish[5];       /* by PAGODA_FINISH_*, 0 unknown */
	struct route { char name[32]; int status; uint64_t n; } routes[64];
	int n_routes;
} M = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.h = {
		[H_TTFT] = { "vllm:time_to_first_token_seconds", "Time to first token, from submission.", ttft_b, NB(ttft_b) },
		[H_ITL] = { "vllm:inter_token_latency_seconds", "Time between two tokens of a request.", itl_b, NB(itl_b) },
		[H_E2E] = { "vllm:e2e_request_latency_seconds", "Request latency, submission to the last token.", req_b, NB(req_b) },
		[H_QUEUE] = { "vllm:request_queue_time_seconds", "Time a request waited before admission.", req_b, NB(req_b) },
		[H_PREFILL] = { "vllm:request_prefill_time_seconds", "Admission to the first token.", req_b, NB(req_b) },
		[H_DECODE] = { "vllm:request_decode_time_seconds", "First token to the last.", req_b, NB(req_b) },
	},
};

void gw_metrics_init(const char *model_name)
{
	char *o = M.model;
	for (const char *s = model_name; *s && o < M.model + sizeof M.model - 3; s++) {
		if (*s == '\\' || *s == '"')
			*o++ = '\\';
		if (*s == '\n') {
			*o++ = '\\';
			*o++ = 'n';
			continue;
		}
		*o++ = *s;
	}
	*o = 0;
}

static void observe(struct hist *h, double v)
{
	size_t i = 0;
	while (i < h->nb && v > h->b[i])
		i++;
	h->count[i]++;
	h->n++;
	h->sum += v;
}

static double span(uint64_t a, uint64_t b) { return a && b > a ? (double)(b - a) / 1e9 : 0.0; }

void gw_metrics_done(const struct pagoda_timings *t, int finish)
{
	pthread_mutex_lock(&M.lock);
	if (t->t_first_ns)
		observe(&M.h[H_TTFT], span(t->t_submit_ns, t->t_first_ns));
	observe(&M.h[H_E2E], span(t->t_submit_ns, t->t_done_ns));
	if (t->t_admit_ns) {
		observe(&M.h[H_QUEUE], span(t->t_submit_ns, t->t_admit_ns));
		if (t->t_first_ns)
			observe(&M.h[H_PREFILL], span(t->t_admit_ns, t->t_first_ns));
	}
	if (t->t_first_ns)
		observe(&M.h[H_DECODE], span(t->t_first_ns, t->t_done_ns));
	M.finish[finish >= 1 && finish <= 4 ? finish : 0]++;
	pthread_mutex_unlock(&M.lock);
}

void gw_metrics_itl(uint64_t ns)
{
	pthread_mutex_lock(&M.lock);
	observe(&M.h[H_ITL], (double)ns / 1e9);
	pthread_mutex_unlock(&M.lock);
}

void gw_metrics_http(const char *route, int status)
{
	pthread_mutex_lock(&M.lock);
	int i;
	for (i = 0; i < M.n_routes; i++)
		if (M.routes[i].status == status && !strcmp(M.routes[i].name, route))
			break;
	if (i == M.n_routes && M.n_routes < (int)NB(M.routes)) {
		snprintf(M.routes[i].name, sizeof M.routes[i].name, "%s", route);
		M.routes[i].status = status;
		M.n_routes++;
	}
	if (i < M.n_routes)
		M.routes[i].n++;
	pthread_mutex_unlock(&M.lock);
}

struct out {
	char *s;
	size_t n, cap;
	bool oom;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int k = vsnprintf(o->s ? o->s + o->n : NULL, o->s ? o->cap - o->n : 0, fmt, ap);
		va_end(ap);
		if (k < 0) {
			o->oom = true;
			return;
		}
		if (o->s && o->n + (size_t)k < o->cap) {
			o->n += (size_t)k;
			return;
		}
		size_t cap = o->cap ? o->cap * 2 : 8192;
		while (cap < o->n + (size_t)k + 1)
			cap *= 2;
		char *s = realloc(o->s, cap);
		if (!s) {
			o->oom = true;
			return;
		}
		o->s = s;
		o->cap = cap;
	}
}

static void metric(struct out *o, const char *type, const char *name, const char *help, double v)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"%s\"} %.17g\n", name, help, name, type, name, M.model, v);
}

static void hist_out(struct out *o, const struct hist *h)
{
	put(o, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
	uint64_t cum = 0;
	for (size_t i = 0; i <= h->nb; i++) {
		cum += h->count[i];
		if (i < h->nb)
			put(o, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", h->name, h->b[i], M.model,
			    (unsigned long long)cum);
		else
			put(o, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", h->name, M.model,
			    (unsigned long long)cum);
	}
	put(o, "%s_sum{model_name=\"%s\"} %.17g\n%s_count{model_name=\"%s\"} %llu\n", h->name, M.model, h->sum,
	    h->name, M.model, (unsigned long long)h->n);
}

/* The counters read on D-Bus: each name's HELP and TYPE once, then its
 * samples (the offload errors one per kind). */
static void bus_out(struct out *o, const struct gw_bus_vals *bv)
{
	metric(o, "gauge", "pagoda_bus_up", "1 when pagodad answered on D-Bus (the pagoda_offload_*, pagoda_spec_*, "
	       "pagoda_constraint_* and step counters come from there).", bv->up);
	const char *last = "";
	for (int i = 0; i < GW_BUS_N; i++) {
		const struct gw_bus_metric *m = &gw_bus_metrics[i];
		if (!bv->have[i])
			continue;
		if (strcmp(m->name, last)) {
			const char *help = m->help;
			for (int k = i; !help && k > 0; k--) /* the name's first row has it */
				help = gw_bus_metrics[k - 1].help;
			put(o, "# HELP %s %s\n# TYPE %s %s\n", m->name, help, m->name, m->type);
			last = m->name;
		}
		put(o, "%s{%s%smodel_name=\"%s\"} %.17g\n", m->name, m->labels, *m->labels ? "," : "", M.model, bv->v[i]);
	}
}

char *gw_metrics_render(const struct pagoda_stats *st, bool daemon_up, const struct gw_bus_vals *bv, size_t *len)
{
	struct out o = { 0 };
	metric(&o, "gauge", "pagoda_up", "1 when the gateway reaches pagodad.", daemon_up && st ? 1 : 0);
	if (st) {
		metric(&o, "gauge", "vllm:num_requests_running", "Requests in the running batch.", st->running);
		metric(&o, "gauge", "vllm:num_requests_waiting", "Requests waiting for admission.", st->waiting);
		metric(&o, "gauge", "vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).",
		       st->kv_blocks_total > 0 ? (double)st->kv_blocks_used / (double)st->kv_blocks_total : 0);
		metric(&o, "counter", "vllm:prefix_cache_queries_total",
		       "Prompt tokens looked up in the prefix cache.", (double)st->prompt_tokens);
		metric(&o, "counter", "vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
		       (double)st->cached_prompt_tokens);
		metric(&o, "counter", "vllm:prompt_tokens_total", "Prompt tokens of admitted requests.",
		       (double)st->prompt_tokens);
		metric(&o, "counter", "vllm:generation_tokens_total", "Tokens generated.", (double)st->gen_tokens);
		metric(&o, "counter", "vllm:num_preemptions_total", "Sequences preempted for KV memory.",
		       (double)st->preemptions);
		metric(&o, "counter", "pagoda_requests_submitted_total", "Requests pagodad accepted (every client).",
		       (double)st->requests_submitted);
		metric(&o, "counter", "pagoda_requests_finished_total", "Requests pagodad finished (every client).",
		       (double)st->requests_finished);
		metric(&o, "counter", "pagoda_requests_failed_total", "Requests pagodad failed.",
		       (double)st->requests_failed);
		metric(&o, "counter", "pagoda_requests_cancelled_total", "Requests cancelled.",
		       (double)st->requests_cancelled);
		metric(&o, "gauge", "pagoda_kv_blocks_total", "KV-cache blocks in the pool.", (double)st->kv_blocks_total);
		metric(&o, "gauge", "pagoda_kv_blocks_used", "KV-cache blocks held by sequences.",
		       (double)st->kv_blocks_used);
		metric(&o, "gauge", "pagoda_clients", "Connections to pagodad (every client).", st->clients);
		metric(&o, "gauge", "pagoda_inflight", "Requests in flight in pagodad.", st->inflight);
		metric(&o, "gauge", "pagoda_context_tokens", "Context length per sequence.", st->n_ctx);
		metric(&o, "gauge", "pagoda_draining", "1 while pagodad drains for shutdown.", st->draining);
	}
	if (bv)
		bus_out(&o, bv);
	pthread_mutex_lock(&M.lock);
	for (int i = 0; i < NH; i++)
		hist_out(&o, &M.h[i]);
	put(&o, "# HELP vllm:request_success_total Requests of this gateway that finished, by reason.\n"
		"# TYPE vllm:request_success_total counter\n");
	/* EOS and a stop string are both OpenAI's "stop" */
	put(&o, "vllm:request_success_total{finished_reason=\"stop\",model_name=\"%s\"} %llu\n", M.model,
	    (unsigned long long)(M.finish[PAGODA_FINISH_EOS] + M.finish[PAGODA_FINISH_STOP]));
	put(&o, "vllm:request_success_total{finished_reason=\"length\",model_name=\"%s\"} %llu\n", M.model,
	    (unsigned long long)M.finish[PAGODA_FINISH_LENGTH]);
	put(&o, "vllm:request_success_total{finished_reason=\"abort\",model_name=\"%s\"} %llu\n", M.model,
	    (unsigned long long)M.finish[PAGODA_FINISH_CANCEL]);
	put(&o, "# HELP pagoda_gateway_http_requests_total HTTP requests answered, by route and status.\n"
		"# TYPE pagoda_gateway_http_requests_total counter\n");
	for (int i = 0; i < M.n_routes; i++)
		put(&o, "pagoda_gateway_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n", M.routes[i].name,
		    M.routes[i].status, (unsigned long long)M.routes[i].n);
	pthread_mutex_unlock(&M.lock);
	if (o.oom) {
		free(o.s);
		return NULL;
	}
	*len = o.n;
	return o.s;
}
