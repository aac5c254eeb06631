/* tools/pagoda-bench/bench.h — shared pieces of the load generator:
 * clocks, summaries (mean and percentiles), a small PRNG and JSON output. */
#ifndef PAGODA_BENCH_H
#define PAGODA_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

uint64_t bench_now_ns(void);             /* CLOCK_MONOTONIC, as the daemon's timings */
void bench_sleep_until_ns(uint64_t t);   /* absolute CLOCK_MONOTONIC */

/* splitmix64: deterministic, per-request streams from (seed, index). */
uint64_t bench_rand(uint64_t *state);
double bench_rand_unit(uint64_t *state); /* (0, 1] */

struct summary {
	size_t n;
	double mean, min, p50, p90, p95, p99, max;
};
/* Sorts v in place. An empty array gives n = 0 and zeros. */
void summarize(double *v, size_t n, struct summary *s);
void summary_json(FILE *f, const char *name, const struct summary *s);

/* A growable array of doubles. */
struct dvec {
	double *v;
	size_t n, cap;
};
bool dvec_push(struct dvec *d, double x);
bool dvec_append(struct dvec *d, const double *x, size_t n);
void dvec_free(struct dvec *d);

/* Flags shared by the modes. */
struct common_opts {
	const char *socket;
	bool json, quiet;
	bool progress_tty; /* stderr is a terminal: progress redraws one line */
};

/* Integer or "LO:HI" (uniform, inclusive). */
struct range {
	long lo, hi;
};
bool parse_range(const char *s, long min, long max, struct range *r);
long range_pick(const struct range *r, uint64_t *rng);

/* http.c: streamed OpenAI /v1/completions over HTTP/1.1 (load --http). */
struct bench_http;
struct bench_http_req {
	const char *model;
	const int32_t *ids;
	size_t n_ids;
	int max_tokens;
	double temp;
	uint64_t seed;
};
struct bench_http_result {
	struct dvec *itl;            /* gaps between text chunks, ms (in; may be NULL) */
	uint64_t t_sent, t_first, t_prev, t_done;
	int n_chunks, n_prompt, n_cached, n_gen; /* n_gen: the usage's, else n_chunks */
	int finish;                  /* 1 stop, 2 length, 0 none seen */
	bool usage;
	char error[160];             /* the server's error, "" when none */
};
/* URL: http://HOST:PORT[/PREFIX] (the API under PREFIX/v1). 0 or -1 with err. */
int bench_http_open(const char *url, struct bench_http **out, char *err, size_t errlen);
void bench_http_close(struct bench_http *h);
/* One request, read to its end. -1 when the connection failed
 * (bench_http_error says why); 0 otherwise, r->error set when the server
 * refused or failed the request. */
int bench_http_complete(struct bench_http *h, const struct bench_http_req *q, struct bench_http_result *r);
const char *bench_http_error(const struct bench_http *h);

int bench_load(int argc, char **argv, const struct common_opts *co);
int bench_rtt(int argc, char **argv, const struct common_opts *co);
int bench_stream(int argc, char **argv, const struct common_opts *co);

/* Parsing helpers: the value after argv[*i] (advancing *i) or NULL after a message. */
const char *arg_value(int argc, char **argv, int *i);
bool arg_long(const char *flag, const char *s, long lo, long hi, long *out);
bool arg_double(const char *flag, const char *s, double lo, double hi, double *out);

#endif
