/* tools/pagoda-bench/load.c — `pagoda-bench load`: N concurrent streams
 * against pagodad, closed loop or Poisson arrivals, with TTFT / ITL / TPOT /
 * end-to-end latency, throughput, goodput under an SLO and the prefix-cache
 * hit rate.
 *
 * Each stream is a thread with its own connection and one request in flight
 * at a time (the library's blocking pagoda_next sleeps on a futex, so idle
 * streams cost no CPU: on a 2-core machine a busy-polling load generator
 * would steal a core from the daemon it measures).
 *
 * Closed loop: a stream submits its next request as soon as the previous
 * one is done. Poisson (--rate R): arrival times are drawn up front as a
 * Poisson process; a free stream takes the next arrival and waits for it;
 * when all streams are busy the arrival waits, and that wait counts in its
 * TTFT and end-to-end latency (both are measured from the arrival time).
 *
 * --http URL sends the same requests, token-id prompts included, as
 * streamed /v1/completions to an OpenAI-compatible server (http.c): the
 * gateway's cost against the rings, or another server on the same load.
 * There ITL is the gap between text chunks, and a request's token counts
 * are its usage's. */
#include "libclient/pagoda.h"
#include "tools/pagoda-bench/bench.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

struct load_opts {
	long streams;
	double rate;       /* requests/s; 0: closed loop */
	long requests;     /* measured requests (0: until duration) */
	double duration;   /* seconds (0: until requests) */
	long warmup;       /* requests run before measuring, not counted */
	struct range prompt, output;
	long prefix;       /* shared prefix tokens before each prompt */
	double slo_ttft, slo_tpot, slo_e2e; /* ms; 0: no bound */
	double temp;
	uint64_t seed;
	double timeout_s;  /* longest wait for one event */
	const char *label;
	int spec, draft_max; /* pagoda_params.speculative, draft_max */
	const char *http;  /* an OpenAI-compatible server's URL instead of the rings */
	const char *model; /* the request's "model" with --http */
	long vocab;        /* prompt ids below this (0: the model's vocabulary) */
};

struct req_rec {
	double ttft_ms, tpot_ms, e2e_ms, queue_ms, prefill_ms;
	double decode_rate; /* tokens/s of this stream after its first token */
	int n_prompt, n_cached, n_gen, n_seen;
	int finish, error;
	int n_drafted, n_accepted, n_passes;
	bool ok;
	uint64_t t_done;
};

struct load_run {
	const struct load_opts *o;
	const struct common_opts *co;
	const int32_t *prefix_ids;
	int n_vocab, n_ctx;
	pthread_mutex_t mu;
	/* under mu */
	long next_idx, limit;
	double next_arrival; /* ns, Poisson cursor */
	uint64_t arrival_rng;
	struct req_rec *recs;
	size_t n_recs, cap_recs;
	struct dvec itl;
	char first_error[160];
	/* phase */
	bool record;
	uint64_t t_start, t_deadline;
	atomic_long done, failed, inflight, tokens, workers_left;
	atomic_bool abort;
};

struct worker {
	struct load_run *run;
	pagoda_t *pg;
	struct bench_http *http;
	pthread_t th;
	int32_t *ids;
	size_t ids_cap;
	struct dvec itl; /* this request's gaps, ms */
};

static void note_error(struct load_run *r, const char *what, int rc, const char *msg)
{
	pthread_mutex_lock(&r->mu);
	if (!r->first_error[0])
		snprintf(r->first_error, sizeof r->first_error, "%s: %s%s%s", what, pagoda_strerror(rc),
			 msg ? ": " : "", msg ? msg : "");
	pthread_mutex_unlock(&r->mu);
}

/* Takes the next request: its index and arrival time; false when the phase is over. */
static bool take_request(struct load_run *r, long *idx, uint64_t *t_arrival)
{
	const struct load_opts *o = r->o;
	bool ok = true;
	pthread_mutex_lock(&r->mu);
	if (atomic_load(&r->abort) || r->next_idx >= r->limit)
		ok = false;
	else if (o->rate > 0) {
		uint64_t t = (uint64_t)r->next_arrival;
		if (r->t_deadline && t >= r->t_deadline)
			ok = false;
		else {
			*t_arrival = t;
			r->next_arrival += -log(bench_rand_unit(&r->arrival_rng)) / o->rate * 1e9;
		}
	} else {
		uint64_t t = bench_now_ns();
		if (r->t_deadline && t >= r->t_deadline)
			ok = false;
		*t_arrival = t;
	}
	if (ok)
		*idx = r->next_idx++;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static bool build_prompt(struct worker *w, long idx, size_t *n_out, int *max_tokens)
{
	struct load_run *r = w->run;
	const struct load_opts *o = r->o;
	uint64_t rng = o->seed * 0x100000001b3ull ^ ((uint64_t)idx + 1) * 0x9e3779b97f4a7c15ull;
	rng ^= r->record ? 0 : 0x5bd1e995ull; /* warmup prompts differ from measured ones */
	long suffix = range_pick(&o->prompt, &rng);
	long out = range_pick(&o->output, &rng);
	size_t n = (size_t)(o->prefix + suffix);
	if (n > w->ids_cap) {
		int32_t *p = realloc(w->ids, n * sizeof *p);
		if (!p)
			return false;
		w->ids = p;
		w->ids_cap = n;
	}
	if (o->prefix)
		memcpy(w->ids, r->prefix_ids, (size_t)o->prefix * sizeof *w->ids);
	/* Ids 0..2 are <unk>, <s>, </s> in Llama vocabularies: avoid them. */
	uint32_t span = (uint32_t)(r->n_vocab > 4 ? r->n_vocab - 3 : 1);
	for (long i = 0; i < suffix; i++)
		w->ids[o->prefix + i] = 3 + (int32_t)(bench_rand(&rng) % span);
	*n_out = n;
	*max_tokens = (int)out;
	return true;
}

static void record(struct load_run *r, struct worker *w, const struct req_rec *rec)
{
	atomic_fetch_add(rec->ok ? &r->done : &r->failed, 1);
	if (!r->record)
		return;
	pthread_mutex_lock(&r->mu);
	if (r->n_recs == r->cap_recs) {
		size_t cap = r->cap_recs ? 2 * r->cap_recs : 256;
		struct req_rec *v = realloc(r->recs, cap * sizeof *v);
		if (v) {
			r->recs = v;
			r->cap_recs = cap;
		}
	}
	if (r->n_recs < r->cap_recs)
		r->recs[r->n_recs++] = *rec;
	if (rec->ok)
		dvec_append(&r->itl, w->itl.v, w->itl.n);
	pthread_mutex_unlock(&r->mu);
}

static void run_one_http(struct worker *w, long idx, uint64_t t_arrival)
{
	struct load_run *r = w->run;
	const struct load_opts *o = r->o;
	struct req_rec rec = { .finish = 0 };
	size_t n_ids;
	int max_tokens;
	if (!build_prompt(w, idx, &n_ids, &max_tokens)) {
		atomic_store(&r->abort, true);
		return;
	}
	if (o->rate > 0)
		bench_sleep_until_ns(t_arrival);
	struct bench_http_req q = { .model = o->model, .ids = w->ids, .n_ids = n_ids, .max_tokens = max_tokens,
				    .temp = o->temp, .seed = o->seed + (uint64_t)idx };
	struct bench_http_result res = { .itl = &w->itl };
	w->itl.n = 0;
	atomic_fetch_add(&r->inflight, 1);
	int rc = bench_http_complete(w->http, &q, &res);
	atomic_fetch_sub(&r->inflight, 1);
	if (rc < 0) {
		rec.error = PAGODA_E_DISCONNECTED;
		pthread_mutex_lock(&r->mu);
		if (!r->first_error[0])
			snprintf(r->first_error, sizeof r->first_error, "http: %.150s", bench_http_error(w->http));
		pthread_mutex_unlock(&r->mu);
		atomic_store(&r->abort, true);
	} else if (res.error[0]) {
		rec.error = PAGODA_E_INVALID_REQ;
		pthread_mutex_lock(&r->mu);
		if (!r->first_error[0])
			snprintf(r->first_error, sizeof r->first_error, "http: %.150s", res.error);
		pthread_mutex_unlock(&r->mu);
	}
	atomic_fetch_add(&r->tokens, res.n_gen);
	rec.ok = rc == 0 && !res.error[0];
	if (rec.ok) {
		rec.finish = res.finish;
		rec.n_prompt = res.n_prompt;
		rec.n_cached = res.n_cached;
		rec.n_gen = res.n_gen;
		rec.n_seen = res.n_gen;
		rec.t_done = res.t_done;
		uint64_t t_first = res.t_first ? res.t_first : res.t_done;
		rec.e2e_ms = (double)(res.t_done - t_arrival) / 1e6;
		rec.ttft_ms = (double)(t_first - t_arrival) / 1e6;
		if (res.n_gen > 1 && res.t_prev > t_first) {
			rec.tpot_ms = (double)(res.t_prev - t_first) / 1e6 / (res.n_gen - 1);
			rec.decode_rate = (res.n_gen - 1) / ((double)(res.t_prev - t_first) / 1e9);
		}
	}
	record(r, w, &rec);
}

static void run_one(struct worker *w, long idx, uint64_t t_arrival)
{
	struct load_run *r = w->run;
	const struct load_opts *o = r->o;
	struct req_rec rec = { .finish = 0 };
	size_t n_ids;
	int max_tokens;
	if (!build_prompt(w, idx, &n_ids, &max_tokens)) {
		atomic_store(&r->abort, true);
		return;
	}
	if (o->rate > 0)
		bench_sleep_until_ns(t_arrival);
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = max_tokens;
	p.temp = (float)o->temp;
	p.seed = o->seed + (uint64_t)idx;
	p.flags = PAGODA_CLAMP_MAX_TOKENS;
	p.speculative = o->spec;
	p.draft_max = o->draft_max;
	uint64_t id;
	atomic_fetch_add(&r->inflight, 1);
	int rc = pagoda_submit_ids(w->pg, w->ids, n_ids, &p, &id);
	uint64_t t_first = 0, t_prev = 0, t_done = 0;
	w->itl.n = 0;
	int timeout_ms = (int)(o->timeout_s * 1000);
	struct pagoda_event ev;
	while (rc == 0) {
		rc = pagoda_next(w->pg, &ev, timeout_ms);
		if (rc < 0)
			break;
		if (ev.req_id != id)
			continue;
		uint64_t t = bench_now_ns();
		if (ev.type == PAGODA_EV_TOKEN) {
			if (ev.token < 0)
				continue; /* continuation of a long token's text */
			if (!t_first)
				t_first = t;
			else
				dvec_push(&w->itl, (double)(t - t_prev) / 1e6);
			t_prev = t;
			rec.n_seen++;
			atomic_fetch_add(&r->tokens, 1);
		} else if (ev.type == PAGODA_EV_DONE) {
			t_done = t;
			const struct pagoda_timings *tm = &ev.timings;
			rec.finish = ev.finish;
			rec.n_prompt = tm->n_prompt;
			rec.n_cached = tm->n_cached;
			rec.n_gen = tm->n_gen;
			rec.n_drafted = tm->n_drafted;
			rec.n_accepted = tm->n_accepted;
			rec.n_passes = tm->n_passes;
			if (tm->t_admit_ns >= tm->t_submit_ns)
				rec.queue_ms = (double)(tm->t_admit_ns - tm->t_submit_ns) / 1e6;
			if (tm->t_first_ns >= tm->t_admit_ns && tm->t_first_ns)
				rec.prefill_ms = (double)(tm->t_first_ns - tm->t_admit_ns) / 1e6;
			break;
		} else if (ev.type == PAGODA_EV_ERROR) {
			rec.error = ev.error;
			note_error(r, "request", ev.error, ev.text);
			break;
		}
	}
	atomic_fetch_sub(&r->inflight, 1);
	if (rc < 0) {
		rec.error = rc;
		note_error(r, "connection", rc, NULL);
		if (rc == PAGODA_E_DISCONNECTED)
			atomic_store(&r->abort, true);
	}
	rec.ok = t_done != 0 && !rec.error;
	if (rec.ok) {
		rec.t_done = t_done;
		rec.decode_rate = rec.n_seen > 1 && t_prev > t_first ? (rec.n_seen - 1) / ((double)(t_prev - t_first) / 1e9) : 0;
		rec.e2e_ms = (double)(t_done - t_arrival) / 1e6;
		rec.ttft_ms = t_first ? (double)(t_first - t_arrival) / 1e6 : rec.e2e_ms;
		rec.tpot_ms = rec.n_seen > 1 ? (double)(t_prev - t_first) / 1e6 / (rec.n_seen - 1) : 0;
	}
	record(r, w, &rec);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	long idx;
	uint64_t t_arrival;
	while (take_request(w->run, &idx, &t_arrival))
		(w->http ? run_one_http : run_one)(w, idx, t_arrival);
	atomic_fetch_sub(&w->run->workers_left, 1);
	return NULL;
}

static void progress(struct load_run *r, bool final)
{
	const struct common_opts *co = r->co;
	if (co->quiet)
		return;
	double el = (double)(bench_now_ns() - r->t_start) / 1e9;
	long done = atomic_load(&r->done), failed = atomic_load(&r->failed);
	char total[32] = "";
	if (r->limit != LONG_MAX)
		snprintf(total, sizeof total, "/%ld", r->limit);
	fprintf(stderr, "%s[%s %6.1f s] done %ld%s, failed %ld, in flight %ld, %ld tokens, %.1f tok/s%s",
		co->progress_tty ? "\r\033[K" : "", r->record ? "bench" : "warmup", el, done, total, failed,
		atomic_load(&r->inflight), atomic_load(&r->tokens), el > 0 ? (double)atomic_load(&r->tokens) / el : 0.0,
		co->progress_tty && !final ? "" : "\n");
}

static int run_phase(struct load_run *r, struct worker *ws, long nw, long limit, double duration, bool record)
{
	r->record = record;
	r->next_idx = 0;
	r->limit = limit ? limit : LONG_MAX;
	atomic_store(&r->done, 0);
	atomic_store(&r->failed, 0);
	atomic_store(&r->tokens, 0);
	atomic_store(&r->workers_left, nw);
	r->t_start = bench_now_ns();
	r->t_deadline = duration > 0 ? r->t_start + (uint64_t)(duration * 1e9) : 0;
	r->next_arrival = (double)r->t_start;
	long started = 0;
	for (; started < nw; started++)
		if (pthread_create(&ws[started].th, NULL, worker_main, &ws[started]))
			break;
	if (started < nw) {
		atomic_store(&r->abort, true);
		atomic_fetch_sub(&r->workers_left, nw - started);
	}
	uint64_t last = bench_now_ns();
	uint64_t every = r->co->progress_tty ? 250000000ull : 10000000000ull;
	while (atomic_load(&r->workers_left) > 0) {
		usleep(50000);
		uint64_t now = bench_now_ns();
		if (now - last >= every) {
			progress(r, false);
			last = now;
		}
	}
	for (long i = 0; i < started; i++)
		pthread_join(ws[i].th, NULL);
	progress(r, true);
	return started == nw && !atomic_load(&r->abort) ? 0 : -1;
}

static void usage_load(FILE *f)
{
	fprintf(f,
		"usage: pagoda-bench [load] [options]\n"
		"  -c, --concurrency N   streams, one connection each (default 1); with --rate:\n"
		"                        the most requests in flight\n"
		"      --rate R          Poisson arrivals at R requests/s (default: closed loop)\n"
		"  -n, --requests N      measured requests (default 16, or unbounded with -d)\n"
		"  -d, --duration S      stop issuing requests after S seconds\n"
		"      --warmup N        requests run first and not counted (default 0)\n"
		"  -p, --prompt-len L    prompt tokens after the prefix: N or LO:HI uniform (default 128)\n"
		"  -o, --output-len L    tokens to generate: N or LO:HI uniform (default 128)\n"
		"      --prefix-len P    shared prefix of P tokens before every prompt (default 0)\n"
		"      --slo-ttft MS     goodput: time to first token at most MS\n"
		"      --slo-tpot MS     goodput: time per output token (after the first) at most MS\n"
		"      --slo-e2e MS      goodput: end-to-end latency at most MS\n"
		"      --temp T          sampling temperature (default 0: greedy)\n"
		"      --seed S          prompts and sampling seed (default 1)\n"
		"      --timeout S       longest wait for one event before giving up (default 600)\n"
		"      --label TEXT      name of this run in the output\n"
		"      --speculative K   speculative decoding: off, ngram or draft (default: the daemon's)\n"
		"      --draft-max N     draft tokens per step, 1..16 (default: the daemon's)\n"
		"      --http URL        the same requests as streamed OpenAI /v1/completions to\n"
		"                        URL (pagoda-gateway, llama-server, ...) instead of the rings\n"
		"      --model NAME      the requests' \"model\" with --http (default pagoda)\n"
		"      --vocab N         prompt ids below N (needed with --http; default: the model's)\n"
		"Prompts are random token ids (submitted as ids, so no tokenizer is involved).\n"
		"Output length is a maximum: a request may end early at end of text.\n");
}

static void print_row(const char *name, const struct summary *s)
{
	if (!s->n) {
		printf("  %-8s %10s\n", name, "-");
		return;
	}
	printf("  %-8s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n", name, s->mean, s->p50, s->p90, s->p95,
	       s->p99, s->max);
}

int bench_load(int argc, char **argv, const struct common_opts *co)
{
	struct load_opts o = {
		.streams = 1, .prompt = { 128, 128 }, .output = { 128, 128 }, .seed = 1, .timeout_s = 600,
	};
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage_load(stdout);
			return 0;
		}
		if (!(v = arg_value(argc, argv, &i)))
			return 2;
		double d;
		bool ok = true;
		if (!strcmp(a, "-c") || !strcmp(a, "--concurrency") || !strcmp(a, "--streams"))
			ok = arg_long(a, v, 1, 4096, &o.streams);
		else if (!strcmp(a, "--rate"))
			ok = arg_double(a, v, 0, 1e6, &o.rate);
		else if (!strcmp(a, "-n") || !strcmp(a, "--requests"))
			ok = arg_long(a, v, 0, 100000000, &o.requests);
		else if (!strcmp(a, "-d") || !strcmp(a, "--duration"))
			ok = arg_double(a, v, 0, 1e7, &o.duration);
		else if (!strcmp(a, "--warmup"))
			ok = arg_long(a, v, 0, 1000000, &o.warmup);
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt-len"))
			ok = parse_range(v, 0, 1 << 20, &o.prompt);
		else if (!strcmp(a, "-o") || !strcmp(a, "--output-len"))
			ok = parse_range(v, 1, 1 << 20, &o.output);
		else if (!strcmp(a, "--prefix-len"))
			ok = arg_long(a, v, 0, 1 << 20, &o.prefix);
		else if (!strcmp(a, "--slo-ttft"))
			ok = arg_double(a, v, 0, 1e9, &o.slo_ttft);
		else if (!strcmp(a, "--slo-tpot"))
			ok = arg_double(a, v, 0, 1e9, &o.slo_tpot);
		else if (!strcmp(a, "--slo-e2e"))
			ok = arg_double(a, v, 0, 1e9, &o.slo_e2e);
		else if (!strcmp(a, "--temp"))
			ok = arg_double(a, v, 0, 100, &o.temp);
		else if (!strcmp(a, "--seed") && (ok = arg_double(a, v, 0, 1.8e19, &d)))
			o.seed = (uint64_t)d;
		else if (!strcmp(a, "--timeout"))
			ok = arg_double(a, v, 0.1, 1e6, &o.timeout_s);
		else if (!strcmp(a, "--speculative")) {
			static const char *const kinds[] = { "default", "off", "ngram", "draft" };
			o.spec = -1;
			for (int k = 0; k < 4; k++)
				if (!strcmp(v, kinds[k]))
					o.spec = k;
			ok = o.spec >= 0;
		} else if (!strcmp(a, "--draft-max")) {
			long lv = 0;
			ok = arg_long(a, v, 1, PAGODA_DRAFT_MAX, &lv);
			o.draft_max = (int)lv;
		} else if (!strcmp(a, "--label"))
			o.label = v;
		else if (!strcmp(a, "--http"))
			o.http = v;
		else if (!strcmp(a, "--model"))
			o.model = v;
		else if (!strcmp(a, "--vocab"))
			ok = arg_long(a, v, 4, INT32_MAX, &o.vocab);
		else {
			fprintf(stderr, "pagoda-bench: unknown option %s (see pagoda-bench load --help)\n", a);
			return 2;
		}
		if (!ok) {
			if (!strcmp(a, "-p") || !strcmp(a, "--prompt-len") || !strcmp(a, "-o") || !strcmp(a, "--output-len"))
				fprintf(stderr, "pagoda-bench: %s: '%s' is not N or LO:HI\n", a, v);
			return 2;
		}
	}
	if (!o.requests && !o.duration)
		o.requests = 16;
	if (o.prompt.hi + o.prefix < 1) {
		fprintf(stderr, "pagoda-bench: a prompt needs at least one token\n");
		return 2;
	}

	struct load_run r = { .o = &o, .co = co, .arrival_rng = o.seed ^ 0xa5a5a5a5ull };
	pthread_mutex_init(&r.mu, NULL);
	struct worker *ws = calloc((size_t)o.streams, sizeof *ws);
	int32_t *prefix = NULL;
	int status = 1;
	if (!ws)
		goto out;
	if (o.http && !o.vocab) {
		fprintf(stderr, "pagoda-bench: --http needs --vocab N (prompt ids are drawn below N)\n");
		goto out;
	}
	if (!o.model)
		o.model = "pagoda";
	for (long i = 0; i < o.streams; i++) {
		ws[i].run = &r;
		char err[200];
		if (o.http) {
			if (bench_http_open(o.http, &ws[i].http, err, sizeof err) < 0) {
				fprintf(stderr, "pagoda-bench: %s\n", err);
				goto out;
			}
			continue;
		}
		int rc = pagoda_connect(co->socket, &ws[i].pg);
		if (rc < 0) {
			fprintf(stderr, "pagoda-bench: connect (stream %ld): %s\n", i, pagoda_strerror(rc));
			goto out;
		}
	}
	r.n_vocab = o.http ? (int)o.vocab : pagoda_n_vocab(ws[0].pg);
	r.n_ctx = o.http ? INT_MAX : pagoda_n_ctx(ws[0].pg);
	if (o.vocab && o.vocab < r.n_vocab)
		r.n_vocab = (int)o.vocab;
	if (o.prefix + o.prompt.hi >= r.n_ctx) {
		fprintf(stderr, "pagoda-bench: prompts of up to %ld tokens do not fit the context of %d\n",
			o.prefix + o.prompt.hi, r.n_ctx);
		goto out;
	}
	if (o.prefix) {
		if (!(prefix = malloc((size_t)o.prefix * sizeof *prefix)))
			goto out;
		uint64_t rng = o.seed ^ 0x7072656669780000ull;
		for (long i = 0; i < o.prefix; i++)
			prefix[i] = 3 + (int32_t)(bench_rand(&rng) % (uint64_t)(r.n_vocab - 3));
		r.prefix_ids = prefix;
	}
	if (o.warmup && run_phase(&r, ws, o.streams, o.warmup, 0, false) < 0)
		goto failed;
	if (run_phase(&r, ws, o.streams, o.requests, o.duration, true) < 0 && !r.n_recs)
		goto failed;

	/* Summaries over the completed requests. */
	size_t n = r.n_recs, n_ok = 0, n_good = 0;
	double *ttft = calloc(n + 1, sizeof(double)), *tpot = calloc(n + 1, sizeof(double));
	double *e2e = calloc(n + 1, sizeof(double)), *queue = calloc(n + 1, sizeof(double));
	double *prefill = calloc(n + 1, sizeof(double));
	if (!ttft || !tpot || !e2e || !queue || !prefill)
		goto failed;
	size_t n_tpot = 0;
	double sum_decode_rate = 0;
	long long sum_prompt = 0, sum_cached = 0, sum_gen = 0, good_gen = 0, sum_seen = 0;
	long long sum_drafted = 0, sum_accepted = 0, sum_passes = 0;
	uint64_t t_end = r.t_start;
	int finishes[5] = { 0 };
	for (size_t i = 0; i < n; i++) {
		const struct req_rec *q = &r.recs[i];
		if (!q->ok)
			continue;
		ttft[n_ok] = q->ttft_ms;
		e2e[n_ok] = q->e2e_ms;
		queue[n_ok] = q->queue_ms;
		prefill[n_ok] = q->prefill_ms;
		n_ok++;
		if (q->n_seen > 1)
			tpot[n_tpot++] = q->tpot_ms;
		sum_prompt += q->n_prompt;
		sum_cached += q->n_cached;
		sum_gen += q->n_gen;
		sum_seen += q->n_seen;
		sum_drafted += q->n_drafted;
		sum_accepted += q->n_accepted;
		sum_passes += q->n_passes;
		sum_decode_rate += q->decode_rate;
		if (q->t_done > t_end)
			t_end = q->t_done;
		if (q->finish >= 1 && q->finish <= 4)
			finishes[q->finish]++;
		bool good = (!o.slo_ttft || q->ttft_ms <= o.slo_ttft) &&
			    (!o.slo_tpot || q->n_seen <= 1 || q->tpot_ms <= o.slo_tpot) &&
			    (!o.slo_e2e || q->e2e_ms <= o.slo_e2e);
		if (good) {
			n_good++;
			good_gen += q->n_gen;
		}
	}
	double wall = (double)(t_end - r.t_start) / 1e9;
	if (wall <= 0)
		wall = 1e-9;
	struct summary s_ttft, s_tpot, s_itl, s_e2e, s_queue, s_prefill;
	summarize(ttft, n_ok, &s_ttft);
	summarize(tpot, n_tpot, &s_tpot);
	summarize(r.itl.v, r.itl.n, &s_itl);
	summarize(e2e, n_ok, &s_e2e);
	summarize(queue, n_ok, &s_queue);
	summarize(prefill, n_ok, &s_prefill);
	size_t n_failed = n - n_ok;
	double hit = sum_prompt ? (double)sum_cached / (double)sum_prompt : 0;
	bool slo = o.slo_ttft || o.slo_tpot || o.slo_e2e;
	char prompt_s[48], output_s[48];
	if (o.prompt.lo == o.prompt.hi)
		snprintf(prompt_s, sizeof prompt_s, "%ld", o.prompt.lo);
	else
		snprintf(prompt_s, sizeof prompt_s, "%ld:%ld", o.prompt.lo, o.prompt.hi);
	if (o.output.lo == o.output.hi)
		snprintf(output_s, sizeof output_s, "%ld", o.output.lo);
	else
		snprintf(output_s, sizeof output_s, "%ld:%ld", o.output.lo, o.output.hi);

	if (co->json) {
		printf("{\"mode\":\"load\",\"label\":\"%s\",\"config\":{\"streams\":%ld,\"rate\":%.4f,\"requests\":%ld,"
		       "\"duration_s\":%.3f,\"warmup\":%ld,\"prompt_len\":\"%s\",\"output_len\":\"%s\",\"prefix_len\":%ld,"
		       "\"temp\":%.3f,\"seed\":%llu},",
		       o.label ? o.label : "", o.streams, o.rate, o.requests, o.duration, o.warmup, prompt_s, output_s,
		       o.prefix, o.temp, (unsigned long long)o.seed);
		printf("\"completed\":%zu,\"failed\":%zu,\"wall_s\":%.4f,\"req_per_s\":%.4f,\"output_tok_per_s\":%.4f,"
		       "\"total_tok_per_s\":%.4f,\"prompt_tokens\":%lld,\"cached_tokens\":%lld,\"output_tokens\":%lld,"
		       "\"tokens_received\":%lld,\"prefix_hit_rate\":%.4f,\"sum_stream_decode_tok_per_s\":%.4f,",
		       n_ok, n_failed, wall, (double)n_ok / wall, (double)sum_gen / wall,
		       (double)(sum_gen + sum_prompt) / wall, sum_prompt, sum_cached, sum_gen, sum_seen, hit,
		       sum_decode_rate);
		printf("\"spec\":{\"drafted\":%lld,\"accepted\":%lld,\"passes\":%lld,\"acceptance\":%.4f,"
		       "\"tokens_per_pass\":%.4f},",
		       sum_drafted, sum_accepted, sum_passes, sum_drafted ? (double)sum_accepted / (double)sum_drafted : 0.0,
		       sum_passes ? (double)sum_gen / (double)sum_passes : 0.0);
		printf("\"finish\":{\"eos\":%d,\"length\":%d,\"stop\":%d,\"cancel\":%d},", finishes[1], finishes[2],
		       finishes[3], finishes[4]);
		printf("\"goodput\":{\"slo_ttft_ms\":%.3f,\"slo_tpot_ms\":%.3f,\"slo_e2e_ms\":%.3f,\"good\":%zu,"
		       "\"req_per_s\":%.4f,\"output_tok_per_s\":%.4f,\"fraction\":%.4f},",
		       o.slo_ttft, o.slo_tpot, o.slo_e2e, n_good, (double)n_good / wall, (double)good_gen / wall,
		       n_ok ? (double)n_good / (double)n_ok : 0.0);
		summary_json(stdout, "ttft_ms", &s_ttft);
		putchar(',');
		summary_json(stdout, "tpot_ms", &s_tpot);
		putchar(',');
		summary_json(stdout, "itl_ms", &s_itl);
		putchar(',');
		summary_json(stdout, "e2e_ms", &s_e2e);
		putchar(',');
		summary_json(stdout, "queue_ms", &s_queue);
		putchar(',');
		summary_json(stdout, "prefill_ms", &s_prefill);
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		printf(",\"client_cpu_s\":%.4f",
		       (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
		printf(",\"first_error\":\"");
		for (const char *c = r.first_error; *c; c++)
			if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
				putchar(*c);
		printf("\"}\n");
	} else {
		printf("pagoda-bench%s%s: %ld stream%s, %s, prompt %s tokens, output %s tokens\n",
		       o.label ? " " : "", o.label ? o.label : "", o.streams, o.streams == 1 ? "" : "s",
		       o.rate > 0 ? "Poisson arrivals" : "closed loop", prompt_s, output_s);
		if (o.prefix)
			printf("  each prompt: a shared prefix of %ld tokens, then its own %s tokens\n", o.prefix, prompt_s);
		if (o.rate > 0)
			printf("  arrival rate %.3f req/s\n", o.rate);
		printf("  requests     %zu completed, %zu failed, in %.2f s (finish: %d length, %d eos, %d stop)\n",
		       n_ok, n_failed, wall, finishes[2], finishes[1], finishes[3]);
		printf("  throughput   %.3f req/s, %.2f output tok/s, %.2f total tok/s\n", (double)n_ok / wall,
		       (double)sum_gen / wall, (double)(sum_gen + sum_prompt) / wall);
		if (o.streams > 1 && o.requests == o.streams && o.rate <= 0)
			printf("  decode       %.2f tok/s: the streams' decode rates added up (one wave of requests)\n",
			       sum_decode_rate);
		printf("  prefix cache %.1f%% of prompt tokens (%lld of %lld)\n", 100 * hit, sum_cached, sum_prompt);
		if (sum_drafted)
			printf("  speculative  %lld drafted, %lld accepted (%.1f%%), %.2f tokens per pass\n", sum_drafted,
			       sum_accepted, 100.0 * (double)sum_accepted / (double)sum_drafted,
			       sum_passes ? (double)sum_gen / (double)sum_passes : 0.0);
		if (slo) {
			printf("  goodput      %.3f req/s, %.2f output tok/s: %zu of %zu requests within", (double)n_good / wall,
			       (double)good_gen / wall, n_good, n_ok);
			if (o.slo_ttft)
				printf(" TTFT<=%gms", o.slo_ttft);
			if (o.slo_tpot)
				printf(" TPOT<=%gms", o.slo_tpot);
			if (o.slo_e2e)
				printf(" E2E<=%gms", o.slo_e2e);
			printf("\n");
		}
		printf("  %-8s %10s %10s %10s %10s %10s %10s\n", "(ms)", "mean", "p50", "p90", "p95", "p99", "max");
		print_row("TTFT", &s_ttft);
		print_row("TPOT", &s_tpot);
		print_row("ITL", &s_itl);
		print_row("E2E", &s_e2e);
		print_row("queue", &s_queue);
		print_row("prefill", &s_prefill);
		printf("  (TTFT and E2E from arrival; queue = daemon admit - submit; prefill = daemon first token - admit)\n");
		if (r.first_error[0])
			printf("  first error: %s\n", r.first_error);
	}
	status = n_failed ? 1 : 0;
	free(ttft);
	free(tpot);
	free(e2e);
	free(queue);
	free(prefill);
	goto out;
failed:
	if (r.first_error[0])
		fprintf(stderr, "pagoda-bench: %s\n", r.first_error);
	else
		fprintf(stderr, "pagoda-bench: the run failed\n");
out:
	if (ws)
		for (long i = 0; i < o.streams; i++) {
			if (ws[i].pg)
				pagoda_close(ws[i].pg);
			bench_http_close(ws[i].http);
			free(ws[i].ids);
			dvec_free(&ws[i].itl);
		}
	free(ws);
	free(prefix);
	free(r.recs);
	dvec_free(&r.itl);
	pthread_mutex_destroy(&r.mu);
	return status;
}
