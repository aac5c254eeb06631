/* bpf/trace_attach.c — finds the daemons, loads pagoda_trace.bpf.c through
 * its skeleton, attaches it to their USDT probes and to io_uring's
 * tracepoints, and reads its maps. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "bpf/trace.h"
#include "pagoda_trace.skel.h"

#define N_USDT 10
#define MAX_LINKS (TRACE_MAX_PIDS * N_USDT + 2)

struct pagoda_trace {
	struct pagoda_trace_bpf *skel;
	struct bpf_link *links[MAX_LINKS];
	int n_links;
	int n_probes;
	int ncpu;
	void *buf; /* one per-CPU value, all CPUs */
};

static bool verbose_libbpf;

static int print_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (!verbose_libbpf)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static int comm_of(pid_t pid, char *comm, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	bool ok = fgets(comm, (int)len, f) != NULL;
	fclose(f);
	if (!ok)
		return -EIO;
	comm[strcspn(comm, "\n")] = 0;
	return 0;
}

int trace_pid_alive(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -ESRCH;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	/* the state follows the last ')': a zombie has exited */
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' ? 0 : -ESRCH;
}

int trace_find_daemons(pid_t *pids, int max)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) && n < max) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		char comm[32];
		if (*end || pid <= 0 || pid == getpid())
			continue;
		if (comm_of((pid_t)pid, comm, sizeof comm) == 0 && strcmp(comm, "pagodad") == 0 &&
		    trace_pid_alive((pid_t)pid) == 0)
			pids[n++] = (pid_t)pid;
	}
	closedir(d);
	return n;
}

/* io_uring's tracepoints, by the BTF of the running kernel: a kernel built
 * without io_uring has none, and the io_uring half is left unloaded. */
static bool kernel_has_io_uring_tracepoints(void)
{
	struct btf *btf = btf__load_vmlinux_btf();
	if (!btf)
		return false;
	bool ok = btf__find_by_name_kind(btf, "btf_trace_io_uring_submit_req", BTF_KIND_TYPEDEF) > 0 &&
		  btf__find_by_name_kind(btf, "btf_trace_io_uring_complete", BTF_KIND_TYPEDEF) > 0;
	btf__free(btf);
	return ok;
}

static int add_link(struct pagoda_trace *tr, struct bpf_link *l)
{
	if (!l)
		return -errno;
	tr->links[tr->n_links++] = l;
	return 0;
}

static int attach_pid(struct pagoda_trace *tr, pid_t pid, char *err, size_t errlen)
{
	struct pagoda_trace_bpf *s = tr->skel;
	const struct {
		struct bpf_program *prog;
		const char *probe;
	} usdt[N_USDT] = {
		{ s->progs.on_submit, "request__submit" },
		{ s->progs.on_admit, "request__admit" },
		{ s->progs.on_first_token, "request__first_token" },
		{ s->progs.on_token, "request__token" },
		{ s->progs.on_done, "request__done" },
		{ s->progs.on_preempt, "request__preempt" },
		{ s->progs.on_step, "step" },
		{ s->progs.on_swap_out, "kv__swap_out" },
		{ s->progs.on_swap_in, "kv__swap_in" },
		{ s->progs.on_prefix_hit, "kv__prefix_hit" },
	};
	char exe[64], target[4096];
	snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(exe, target, sizeof target - 1);
	if (n < 0) {
		snprintf(err, errlen, "pid %d has no executable to trace (%s): %s", (int)pid, exe,
			 strerror(errno));
		return -1;
	}
	target[n] = 0;
	int found = 0;
	for (int i = 0; i < N_USDT; i++) {
		/* through /proc/PID/exe: the binary the process runs, even one
		 * replaced or deleted on disk since it started */
		int r = add_link(tr, bpf_program__attach_usdt(usdt[i].prog, pid, exe, "pagoda", usdt[i].probe, NULL));
		if (r == 0) {
			found++;
			continue;
		}
		if (r != -ENOENT) {
			snprintf(err, errlen, "attaching to probe %s of pid %d (%s): %s", usdt[i].probe, (int)pid,
				 target, strerror(-r));
			return -1;
		}
		if (verbose_libbpf)
			fprintf(stderr, "pagoda-trace: pid %d (%s) has no probe %s\n", (int)pid, target,
				usdt[i].probe);
	}
	if (!found) {
		snprintf(err, errlen,
			 "pid %d (%s) has no pagoda probes: not a pagodad, or a binary stripped of its "
			 "USDT notes (.note.stapsdt); --io-only times its io_uring requests alone",
			 (int)pid, target);
		return -1;
	}
	tr->n_probes += found;
	return 0;
}

struct pagoda_trace *trace_open(struct trace_target *t, bool verbose, char *err, size_t errlen)
{
	verbose_libbpf = verbose;
	libbpf_set_print(print_libbpf);
	struct pagoda_trace *tr = calloc(1, sizeof *tr);
	if (!tr) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	tr->ncpu = libbpf_num_possible_cpus();
	if (tr->ncpu <= 0) {
		snprintf(err, errlen, "cannot count the CPUs: %s", strerror(-tr->ncpu));
		goto fail;
	}
	tr->buf = calloc((size_t)tr->ncpu, sizeof(struct trace_hist));
	tr->skel = pagoda_trace_bpf__open();
	if (!tr->buf || !tr->skel) {
		snprintf(err, errlen, "opening the BPF program: %s", strerror(errno));
		goto fail;
	}
	if (t->io && !kernel_has_io_uring_tracepoints()) {
		if (!t->usdt) {
			snprintf(err, errlen, "this kernel has no io_uring tracepoints (io_uring_submit_req, "
					      "io_uring_complete in its BTF)");
			goto fail;
		}
		fprintf(stderr, "pagoda-trace: this kernel has no io_uring tracepoints: no io_uring latency\n");
		t->io = false;
	}
	bpf_program__set_autoload(tr->skel->progs.on_io_submit, t->io);
	bpf_program__set_autoload(tr->skel->progs.on_io_complete, t->io);
	int r = pagoda_trace_bpf__load(tr->skel);
	if (r == -EPERM) {
		snprintf(err, errlen, "loading BPF needs root (CAP_BPF and CAP_PERFMON): %s", strerror(-r));
		goto fail;
	}
	if (r) {
		snprintf(err, errlen, "loading the BPF program: %s%s", strerror(-r),
			 verbose ? "" : " (-v prints libbpf's log)");
		goto fail;
	}
	for (int i = 0; i < t->n_pids; i++) {
		if (t->usdt && attach_pid(tr, t->pids[i], err, errlen))
			goto fail;
		__u32 key = (__u32)t->pids[i];
		__u8 one = 1;
		if (t->io && bpf_map__update_elem(tr->skel->maps.io_pids, &key, sizeof key, &one, sizeof one, BPF_ANY)) {
			snprintf(err, errlen, "io_uring pid filter: %s", strerror(errno));
			goto fail;
		}
	}
	if (t->io) {
		struct bpf_link *sub = bpf_program__attach(tr->skel->progs.on_io_submit);
		struct bpf_link *done = sub ? bpf_program__attach(tr->skel->progs.on_io_complete) : NULL;
		if (!done) {
			int e = errno;
			bpf_link__destroy(sub);
			if (!t->usdt) {
				snprintf(err, errlen, "attaching to io_uring's tracepoints: %s", strerror(e));
				goto fail;
			}
			/* the probes alone are still worth watching */
			fprintf(stderr, "pagoda-trace: io_uring's tracepoints: %s: no io_uring latency\n", strerror(e));
			t->io = false;
		} else {
			tr->links[tr->n_links++] = sub;
			tr->links[tr->n_links++] = done;
		}
	}
	return tr;
fail:
	trace_close(tr);
	return NULL;
}

void trace_close(struct pagoda_trace *tr)
{
	if (!tr)
		return;
	for (int i = 0; i < tr->n_links; i++)
		bpf_link__destroy(tr->links[i]);
	pagoda_trace_bpf__destroy(tr->skel);
	free(tr->buf);
	free(tr);
}

int trace_n_probes(const struct pagoda_trace *tr)
{
	return tr->n_probes;
}

int trace_read(struct pagoda_trace *tr, struct trace_snap *s)
{
	memset(s, 0, sizeof *s);
	int fd = bpf_map__fd(tr->skel->maps.hists);
	for (__u32 k = 0; k < TRACE_N_HIST; k++) {
		if (bpf_map_lookup_elem(fd, &k, tr->buf))
			return -errno;
		const struct trace_hist *v = tr->buf;
		for (int c = 0; c < tr->ncpu; c++) {
			for (int i = 0; i < TRACE_SLOTS; i++)
				s->h[k].slots[i] += v[c].slots[i];
			s->h[k].count += v[c].count;
			s->h[k].sum_ns += v[c].sum_ns;
		}
	}
	fd = bpf_map__fd(tr->skel->maps.counters);
	for (__u32 k = 0; k < TRACE_N_COUNTER; k++) {
		if (bpf_map_lookup_elem(fd, &k, tr->buf))
			return -errno;
		const __u64 *v = tr->buf;
		for (int c = 0; c < tr->ncpu; c++)
			s->c[k] += v[c];
	}
	return 0;
}

void trace_diff(const struct trace_snap *cur, const struct trace_snap *prev, struct trace_snap *d)
{
	const __u64 *a = (const __u64 *)cur, *b = (const __u64 *)prev;
	__u64 *out = (__u64 *)d;
	for (size_t i = 0; i < sizeof *d / sizeof(__u64); i++)
		out[i] = a[i] - b[i];
}
