/* tools/pagoda/cmd_ping.c — `pagoda ping`: empty round trips through the
 * shared-memory rings (NOP in the submission ring, NOP back in the
 * completion ring), with their latency. */
#include "libclient/pagoda.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int cmd_ping(int argc, char **argv)
{
	const char *sock = NULL;
	long count = 1, v;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: pagoda ping [-c COUNT] [--socket PATH]\n");
			return 0;
		}
		if (!(val = opt_value(argc, argv, &i)))
			return 2;
		if (!strcmp(a, "-c") && opt_int(val, 1, 10000000, &v))
			count = v;
		else if (!strcmp(a, "--socket"))
			sock = val;
		else {
			fprintf(stderr, "pagoda ping: bad option %s %s\n", a, val);
			return 2;
		}
	}
	pagoda_t *pg;
	uint64_t t0 = now_ns();
	int rc = pagoda_connect(sock, &pg);
	if (rc < 0) {
		fprintf(stderr, "pagoda ping: %s\n", pagoda_strerror(rc));
		return 1;
	}
	uint64_t t_conn = now_ns() - t0;
	uint64_t *rtt = malloc(sizeof *rtt * (size_t)count);
	if (!rtt) {
		pagoda_close(pg);
		return 1;
	}
	int status = 0;
	long done = 0;
	for (; done < count; done++) {
		uint64_t id, t = now_ns();
		struct pagoda_event ev;
		if ((rc = pagoda_nop(pg, &id)) == 0) {
			do
				rc = pagoda_next(pg, &ev, 2000);
			while (rc == 0 && !(ev.type == PAGODA_EV_NOP && ev.req_id == id));
		}
		if (rc < 0) {
			fprintf(stderr, "pagoda ping: %s\n", pagoda_strerror(rc));
			status = 1;
			break;
		}
		rtt[done] = now_ns() - t;
		if (count <= 10)
			printf("round trip %ld: %.1f us\n", done + 1, (double)rtt[done] / 1e3);
	}
	if (done > 0) {
		qsort(rtt, (size_t)done, sizeof *rtt, cmp_u64);
		printf("connect %.1f us; %ld round trips: min %.1f us, median %.1f us, p99 %.1f us, max %.1f us\n",
		       (double)t_conn / 1e3, done, (double)rtt[0] / 1e3, (double)rtt[done / 2] / 1e3,
		       (double)rtt[(size_t)((double)done * 0.99)] / 1e3, (double)rtt[done - 1] / 1e3);
	}
	free(rtt);
	pagoda_close(pg);
	return status;
}
