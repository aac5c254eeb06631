/* bpf/trace_main.c — pagoda-trace: live latency histograms of running
 * pagoda daemons from their USDT probes, and of their io_uring requests
 * from the kernel's tracepoints, every interval (docs/trace.md). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bpf/trace.h"

#define VMLINUX_BTF "/sys/kernel/btf/vmlinux"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static void usage(FILE *f)
{
	fputs("usage: pagoda-trace [-p PID]... [--json] [--duration S] [--interval S]\n"
	      "                    [--io-only | --no-io] [-v]\n"
	      "Live histograms of a pagoda daemon's queue time, time to first token,\n"
	      "inter-token latency, request and step times (its USDT probes) and of its\n"
	      "io_uring requests' completion latency, every interval. Without -p: every\n"
	      "running pagodad. Needs root and a kernel with BTF.\n"
	      "  -p, --pid PID      trace this process (repeatable)\n"
	      "  -j, --json         one JSON object per interval, one per line\n"
	      "  -d, --duration S   stop after S seconds (default: at Ctrl-C)\n"
	      "  -i, --interval S   print every S seconds (default 5)\n"
	      "      --io-only      only io_uring, for any process (no USDT probes needed)\n"
	      "      --no-io        only the USDT probes\n"
	      "  -v, --verbose      libbpf's log, and the probes a binary lacks\n",
	      f);
}

static double seconds_arg(const char *opt, const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*s == 0 || *end || !(v > 0) || !isfinite(v)) {
		fprintf(stderr, "pagoda-trace: %s wants a positive number of seconds, not '%s'\n", opt, s);
		exit(1);
	}
	return v;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool any_alive(const struct trace_target *t)
{
	for (int i = 0; i < t->n_pids; i++)
		if (trace_pid_alive(t->pids[i]) == 0)
			return true;
	return false;
}

/* Sleeps until the monotonic time `until`, in short naps so that a signal
 * or the end of every traced process is noticed; false when one came. */
static bool nap_until(double until, const struct trace_target *t)
{
	for (;;) {
		if (stop || !any_alive(t))
			return false;
		double left = until - mono();
		if (left <= 0)
			return true;
		if (left > 0.1)
			left = 0.1;
		struct timespec ts = { 0, (long)(left * 1e9) };
		nanosleep(&ts, NULL);
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },      { "json", no_argument, NULL, 'j' },
		{ "duration", required_argument, NULL, 'd' }, { "interval", required_argument, NULL, 'i' },
		{ "io-only", no_argument, NULL, 'I' },        { "no-io", no_argument, NULL, 'N' },
		{ "verbose", no_argument, NULL, 'v' },        { "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct trace_target t = { .usdt = true, .io = true };
	bool json = false, verbose = false, io_only = false, no_io = false;
	double duration = 0, interval = 5;
	int c;
	while ((c = getopt_long(argc, argv, "p:jd:i:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'p': {
			char *end;
			long pid = strtol(optarg, &end, 10);
			if (*optarg == 0 || *end || pid <= 0 || pid > 0x3fffffff) {
				fprintf(stderr, "pagoda-trace: -p wants a process id, not '%s'\n", optarg);
				return 1;
			}
			bool dup = false;
			for (int i = 0; i < t.n_pids; i++)
				dup |= t.pids[i] == (pid_t)pid;
			if (dup) /* attached twice, every event would count twice */
				break;
			if (t.n_pids == TRACE_MAX_PIDS) {
				fprintf(stderr, "pagoda-trace: at most %d processes\n", TRACE_MAX_PIDS);
				return 1;
			}
			t.pids[t.n_pids++] = (pid_t)pid;
			break;
		}
		case 'j': json = true; break;
		case 'd': duration = seconds_arg("--duration", optarg); break;
		case 'i': interval = seconds_arg("--interval", optarg); break;
		case 'I': io_only = true; break;
		case 'N': no_io = true; break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pagoda-trace: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 1;
	}
	if (io_only && no_io) {
		fprintf(stderr, "pagoda-trace: --io-only and --no-io leave nothing to trace\n");
		return 1;
	}
	t.usdt = !io_only;
	t.io = !no_io;
	if (access(VMLINUX_BTF, R_OK) != 0) {
		fprintf(stderr, "pagoda-trace: this kernel has no BTF (%s: %s); its CO-RE program needs a kernel "
				"built with CONFIG_DEBUG_INFO_BTF=y\n", VMLINUX_BTF, strerror(errno));
		return 1;
	}
	if (t.n_pids == 0) {
		if (io_only) {
			fprintf(stderr, "pagoda-trace: --io-only needs -p PID\n");
			return 1;
		}
		t.n_pids = trace_find_daemons(t.pids, TRACE_MAX_PIDS);
		if (t.n_pids <= 0) {
			fprintf(stderr, "pagoda-trace: no running pagodad found; -p PID names a process\n");
			return 1;
		}
	}
	for (int i = 0; i < t.n_pids; i++)
		if (trace_pid_alive(t.pids[i]) != 0) {
			fprintf(stderr, "pagoda-trace: pid %d: no such process\n", (int)t.pids[i]);
			return 1;
		}
	char err[512];
	struct pagoda_trace *tr = trace_open(&t, verbose, err, sizeof err);
	if (!tr) {
		fprintf(stderr, "pagoda-trace: %s\n", err);
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(stderr, "Tracing %d process%s (", t.n_pids, t.n_pids == 1 ? "" : "es");
	for (int i = 0; i < t.n_pids; i++)
		fprintf(stderr, "%s%d", i ? " " : "pid ", (int)t.pids[i]);
	if (t.usdt)
		fprintf(stderr, "): %d probes%s. Ctrl-C ends.\n", trace_n_probes(tr), t.io ? ", io_uring" : "");
	else
		fprintf(stderr, "): io_uring only. Ctrl-C ends.\n");

	struct trace_snap prev = { 0 }, cur, d;
	double start = mono(), last = start;
	int rc = 0;
	for (long k = 1;; k++) {
		double next = start + k * interval;
		bool end = duration > 0 && next >= start + duration;
		if (end)
			next = start + duration;
		bool slept = nap_until(next, &t);
		int r = trace_read(tr, &cur);
		if (r) {
			fprintf(stderr, "pagoda-trace: reading the maps: %s\n", strerror(-r));
			rc = 1;
			break;
		}
		double now = mono();
		trace_diff(&cur, &prev, &d);
		struct trace_interval iv = {
			.d = &d, .t = &t, .wall = wall(), .seconds = now - last, .final = end || !slept,
		};
		if (json)
			trace_print_json(stdout, &iv);
		else
			trace_print_text(stdout, &iv);
		prev = cur;
		last = now;
		if (iv.final) {
			if (!slept && !stop)
				fprintf(stderr, "pagoda-trace: every traced process has exited\n");
			break;
		}
	}
	trace_close(tr);
	return rc;
}
