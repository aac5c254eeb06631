/* tools/pagoda-bench/stats.c — clocks, PRNG, summaries, argument helpers. */
#include "tools/pagoda-bench/bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void bench_sleep_until_ns(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

uint64_t bench_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double bench_rand_unit(uint64_t *state)
{
	return ((double)(bench_rand(state) >> 11) + 1.0) / 9007199254740992.0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Linear interpolation between closest ranks (numpy's default). */
static double pct(const double *v, size_t n, double p)
{
	if (n == 1)
		return v[0];
	double r = p / 100.0 * (double)(n - 1);
	size_t i = (size_t)r;
	if (i + 1 >= n)
		return v[n - 1];
	return v[i] + (v[i + 1] - v[i]) * (r - (double)i);
}

void summarize(double *v, size_t n, struct summary *s)
{
	memset(s, 0, sizeof *s);
	s->n = n;
	if (!n)
		return;
	qsort(v, n, sizeof *v, cmp_double);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	s->mean = sum / (double)n;
	s->min = v[0];
	s->max = v[n - 1];
	s->p50 = pct(v, n, 50);
	s->p90 = pct(v, n, 90);
	s->p95 = pct(v, n, 95);
	s->p99 = pct(v, n, 99);
}

void summary_json(FILE *f, const char *name, const struct summary *s)
{
	fprintf(f, "\"%s\":{\"n\":%zu,\"mean\":%.4f,\"min\":%.4f,\"p50\":%.4f,\"p90\":%.4f,\"p95\":%.4f,\"p99\":%.4f,\"max\":%.4f}",
		name, s->n, s->mean, s->min, s->p50, s->p90, s->p95, s->p99, s->max);
}

bool dvec_push(struct dvec *d, double x)
{
	return dvec_append(d, &x, 1);
}

bool dvec_append(struct dvec *d, const double *x, size_t n)
{
	if (d->n + n > d->cap) {
		size_t cap = d->cap ? d->cap : 256;
		while (cap < d->n + n)
			cap *= 2;
		double *v = realloc(d->v, cap * sizeof *v);
		if (!v)
			return false;
		d->v = v;
		d->cap = cap;
	}
	if (n)
		memcpy(d->v + d->n, x, n * sizeof *x);
	d->n += n;
	return true;
}

void dvec_free(struct dvec *d)
{
	free(d->v);
	memset(d, 0, sizeof *d);
}

static bool parse_long(const char *s, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end)
		return false;
	*out = v;
	return true;
}

bool parse_range(const char *s, long min, long max, struct range *r)
{
	char buf[64];
	if (strlen(s) >= sizeof buf)
		return false;
	strcpy(buf, s);
	char *colon = strchr(buf, ':');
	if (colon) {
		*colon = 0;
		if (!parse_long(buf, &r->lo) || !parse_long(colon + 1, &r->hi))
			return false;
	} else {
		if (!parse_long(buf, &r->lo))
			return false;
		r->hi = r->lo;
	}
	return r->lo >= min && r->hi <= max && r->lo <= r->hi;
}

long range_pick(const struct range *r, uint64_t *rng)
{
	if (r->hi == r->lo)
		return r->lo;
	return r->lo + (long)(bench_rand(rng) % (uint64_t)(r->hi - r->lo + 1));
}

const char *arg_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		fprintf(stderr, "pagoda-bench: %s needs a value\n", argv[*i]);
		return NULL;
	}
	return argv[++*i];
}

bool arg_long(const char *flag, const char *s, long lo, long hi, long *out)
{
	if (!parse_long(s, out) || *out < lo || *out > hi) {
		fprintf(stderr, "pagoda-bench: %s: '%s' is not an integer in [%ld, %ld]\n", flag, s, lo, hi);
		return false;
	}
	return true;
}

bool arg_double(const char *flag, const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
		fprintf(stderr, "pagoda-bench: %s: '%s' is not a number in [%g, %g]\n", flag, s, lo, hi);
		return false;
	}
	*out = v;
	return true;
}
