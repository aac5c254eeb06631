/* tools/pagoda/opts.c — flag parsing shared by the subcommands. */
#include "tools/pagoda/opts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *opt_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		fprintf(stderr, "pagoda: %s needs a value\n", argv[*i]);
		return NULL;
	}
	return argv[++*i];
}

bool opt_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool opt_size(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	int64_t mul = 1;
	switch (*end) {
	case 'K': case 'k': mul = 1ll << 10; end++; break;
	case 'M': case 'm': mul = 1ll << 20; end++; break;
	case 'G': case 'g': mul = 1ll << 30; end++; break;
	case 'T': case 't': mul = 1ll << 40; end++; break;
	}
	if (errno || end == s || *end || v < 0 || v > INT64_MAX / mul)
		return false;
	*out = v * mul;
	return true;
}

bool opt_float(const char *s, float *out)
{
	char *end;
	errno = 0;
	float v = strtof(s, &end);
	if (errno || end == s || *end || v != v)
		return false;
	*out = v;
	return true;
}

int opt_sampling(int argc, char **argv, int *i, struct sampling *s)
{
	static const char *flags[] = { "--temp",		"--top-k", "--top-p",
				       "--min-p",		"--repeat-penalty", "--repeat-last-n",
				       "--seed",		"--presence-penalty", "--frequency-penalty" };
	int which = -1;
	for (int k = 0; k < (int)(sizeof flags / sizeof *flags); k++)
		if (!strcmp(argv[*i], flags[k]))
			which = k;
	if (which < 0)
		return 0;
	const char *flag = argv[*i];
	const char *v = opt_value(argc, argv, i);
	if (!v)
		return -1;
	long n;
	bool ok = true;
	switch (which) {
	case 0: ok = opt_float(v, &s->temp) && s->temp >= 0; break;
	case 1: ok = opt_int(v, 0, 1 << 24, &n); s->top_k = (int)n; break;
	case 2: ok = opt_float(v, &s->top_p) && s->top_p > 0 && s->top_p <= 1; break;
	case 3: ok = opt_float(v, &s->min_p) && s->min_p >= 0 && s->min_p <= 1; break;
	case 4: ok = opt_float(v, &s->repeat_penalty) && s->repeat_penalty > 0; break;
	case 5: ok = opt_int(v, -1, 1 << 24, &n); s->repeat_last_n = (int)n; break;
	case 6: {
		char *end;
		errno = 0;
		s->seed = strtoull(v, &end, 0);
		ok = !errno && end != v && !*end;
		break;
	}
	case 7: ok = opt_float(v, &s->presence_penalty) && fabsf(s->presence_penalty) <= 2; break;
	case 8: ok = opt_float(v, &s->frequency_penalty) && fabsf(s->frequency_penalty) <= 2; break;
	}
	if (!ok) {
		fprintf(stderr, "pagoda: bad value '%s' for %s\n", v, flag);
		return -1;
	}
	return 1;
}

char *read_path(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *text = f ? read_all(f, len) : NULL;
	if (!text)
		perror(path);
	if (f)
		fclose(f);
	return text;
}

char *read_all(FILE *f, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
		if (cap - n - 1 == 0) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	if (buf) {
		buf[n] = 0;
		*len = n;
	}
	return buf;
}

double ns_to_s(uint64_t ns)
{
	return (double)ns / 1e9;
}
