/* bpf/trace.h — pagoda-trace's user-space rooms: finding and attaching to
 * the daemons (trace_attach.c) and printing an interval (trace_print.c). */
#ifndef PAGODA_TRACE_H
#define PAGODA_TRACE_H

#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include "bpf/trace_maps.h"

#define TRACE_MAX_PIDS 64

struct pagoda_trace;

/* One reading of the maps, summed over the CPUs; two readings' difference
 * is an interval. */
struct trace_snap {
	struct trace_hist h[TRACE_N_HIST];
	__u64 c[TRACE_N_COUNTER];
};

struct trace_target {
	pid_t pids[TRACE_MAX_PIDS];
	int n_pids;
	bool usdt; /* the engine's probes (off with --io-only) */
	bool io;   /* io_uring's tracepoints (off with --no-io) */
};

/* The pids of every running pagodad (by its comm), at most max; the count. */
int trace_find_daemons(pid_t *pids, int max);

/* 0 when pid is a live process; -ESRCH otherwise. */
int trace_pid_alive(pid_t pid);

/* Loads the BPF program (the io_uring half only when t->io and the kernel
 * has the tracepoints; t->io is cleared otherwise) and attaches it to
 * every pid of t. NULL with a message in err on failure. */
struct pagoda_trace *trace_open(struct trace_target *t, bool verbose, char *err, size_t errlen);
void trace_close(struct pagoda_trace *tr);
/* How many USDT probes were attached, over all pids. */
int trace_n_probes(const struct pagoda_trace *tr);

/* Reads the maps into s; 0 or a negative errno. */
int trace_read(struct pagoda_trace *tr, struct trace_snap *s);

/* d = cur - prev, field by field. */
void trace_diff(const struct trace_snap *cur, const struct trace_snap *prev, struct trace_snap *d);

struct trace_interval {
	const struct trace_snap *d;
	const struct trace_target *t;
	double wall;       /* seconds since the epoch, at the end of the interval */
	double seconds;    /* its length */
	bool final;        /* the last one printed */
};

void trace_print_text(FILE *f, const struct trace_interval *iv);
void trace_print_json(FILE *f, const struct trace_interval *iv);

#endif
