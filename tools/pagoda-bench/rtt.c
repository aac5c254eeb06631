/* tools/pagoda-bench/rtt.c — the IPC measurements of issue 3:
 *
 * `pagoda-bench rtt`: round-trip latency of an empty request through the
 * shared-memory rings (pagoda_nop: an SQE in, a CQE back, eventfd and futex
 * wake-ups) side by side with the same message sizes over a plain AF_UNIX
 * socket to an echo server in a child process (write, then read the answer).
 * The two alternate in blocks so that both see the same machine load.
 *
 * `pagoda-bench stream`: the tokens/s one client receives when the daemon
 * produces faster than it reads: K requests in flight on one connection
 * (a small model makes the daemon fast); the client may first stall without
 * reading so that the completion ring fills and the daemon has to hold
 * completions back, then it drains as fast as it can. Every token must
 * arrive exactly once: the count per request is checked against n_gen. */
#include "libclient/pagoda.h"
#include "shm/pagoda_shm.h"
#include "tools/pagoda-bench/bench.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static bool io_full(int fd, void *buf, size_t n, bool wr)
{
	char *p = buf;
	while (n) {
		ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
	}
	return true;
}

/* The echo server: reads a request of req bytes, answers resp bytes. */
static void echo_child(int fd, size_t req, size_t resp, int type)
{
	char *buf = calloc(1, req > resp ? req : resp);
	if (!buf)
		_exit(1);
	for (;;) {
		if (type == SOCK_SEQPACKET) {
			ssize_t k = read(fd, buf, req);
			if (k <= 0)
				_exit(0);
		} else if (!io_full(fd, buf, req, false))
			_exit(0);
		if (!io_full(fd, buf, resp, true))
			_exit(0);
	}
}

static int ring_rtt(pagoda_t *pg, double *out, long n)
{
	for (long i = 0; i < n; i++) {
		uint64_t id, t = bench_now_ns();
		struct pagoda_event ev;
		int rc = pagoda_nop(pg, &id);
		if (rc == 0)
			do
				rc = pagoda_next(pg, &ev, 5000);
			while (rc == 0 && !(ev.type == PAGODA_EV_NOP && ev.req_id == id));
		if (rc < 0)
			return rc;
		out[i] = (double)(bench_now_ns() - t) / 1e3;
	}
	return 0;
}

static int unix_rtt(int fd, char *buf, size_t req, size_t resp, int type, double *out, long n)
{
	for (long i = 0; i < n; i++) {
		uint64_t t = bench_now_ns();
		if (!io_full(fd, buf, req, true))
			return -1;
		if (type == SOCK_SEQPACKET) {
			if (read(fd, buf, resp) != (ssize_t)resp)
				return -1;
		} else if (!io_full(fd, buf, resp, false))
			return -1;
		out[i] = (double)(bench_now_ns() - t) / 1e3;
	}
	return 0;
}

static void print_us(const char *name, const struct summary *s)
{
	printf("  %-26s %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, s->min, s->p50, s->mean, s->p99, s->max);
}

int bench_rtt(int argc, char **argv, const struct common_opts *co)
{
	long n = 10000, blocks = 10, warm = 200;
	long req = sizeof(struct pg_sqe), resp = sizeof(struct pg_cqe);
	int type = SOCK_STREAM;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: pagoda-bench rtt [options]\n"
			       "  -n, --count N      round trips of each kind (default 10000)\n"
			       "      --blocks K     alternate ring and socket in K blocks each (default 10)\n"
			       "      --warmup N     untimed round trips of each kind first (default 200)\n"
			       "      --req-size B   socket request bytes (default %zu: one SQE)\n"
			       "      --resp-size B  socket answer bytes (default %zu: one CQE)\n"
			       "      --seqpacket    SOCK_SEQPACKET (default SOCK_STREAM)\n",
			       sizeof(struct pg_sqe), sizeof(struct pg_cqe));
			return 0;
		}
		if (!strcmp(a, "--seqpacket")) {
			type = SOCK_SEQPACKET;
			continue;
		}
		if (!(v = arg_value(argc, argv, &i)))
			return 2;
		bool ok;
		if (!strcmp(a, "-n") || !strcmp(a, "--count"))
			ok = arg_long(a, v, 1, 100000000, &n);
		else if (!strcmp(a, "--blocks"))
			ok = arg_long(a, v, 1, 100000, &blocks);
		else if (!strcmp(a, "--warmup"))
			ok = arg_long(a, v, 0, 1000000, &warm);
		else if (!strcmp(a, "--req-size"))
			ok = arg_long(a, v, 1, 65536, &req);
		else if (!strcmp(a, "--resp-size"))
			ok = arg_long(a, v, 1, 65536, &resp);
		else {
			fprintf(stderr, "pagoda-bench: unknown option %s (see pagoda-bench rtt --help)\n", a);
			return 2;
		}
		if (!ok)
			return 2;
	}
	if (blocks > n)
		blocks = n;
	pagoda_t *pg;
	int rc = pagoda_connect(co->socket, &pg);
	if (rc < 0) {
		fprintf(stderr, "pagoda-bench: connect: %s\n", pagoda_strerror(rc));
		return 1;
	}
	int sv[2];
	if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) < 0) {
		perror("pagoda-bench: socketpair");
		pagoda_close(pg);
		return 1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("pagoda-bench: fork");
		pagoda_close(pg);
		return 1;
	}
	if (pid == 0) {
		close(sv[0]);
		echo_child(sv[1], (size_t)req, (size_t)resp, type);
	}
	close(sv[1]);
	int status = 1;
	double *ring = calloc((size_t)n + (size_t)warm + 1, sizeof(double));
	double *sock = calloc((size_t)n + (size_t)warm + 1, sizeof(double));
	char *buf = calloc(1, (size_t)(req > resp ? req : resp));
	if (!ring || !sock || !buf)
		goto out;
	if (warm && (ring_rtt(pg, ring, warm) < 0 ||
		     unix_rtt(sv[0], buf, (size_t)req, (size_t)resp, type, sock, warm) < 0)) {
		fprintf(stderr, "pagoda-bench: warm-up round trips failed\n");
		goto out;
	}
	long off = 0;
	for (long b = 0; b < blocks; b++) {
		long k = n / blocks + (b < n % blocks);
		if ((rc = ring_rtt(pg, ring + off, k)) < 0) {
			fprintf(stderr, "pagoda-bench: nop: %s\n", pagoda_strerror(rc));
			goto out;
		}
		if (unix_rtt(sv[0], buf, (size_t)req, (size_t)resp, type, sock + off, k) < 0) {
			fprintf(stderr, "pagoda-bench: echo over the unix socket failed\n");
			goto out;
		}
		off += k;
		if (!co->quiet && co->progress_tty)
			fprintf(stderr, "\r\033[K[rtt] %ld / %ld", off, n);
	}
	if (!co->quiet && co->progress_tty)
		fprintf(stderr, "\r\033[K");
	struct summary sr, su;
	summarize(ring, (size_t)n, &sr);
	summarize(sock, (size_t)n, &su);
	if (co->json) {
		printf("{\"mode\":\"rtt\",\"count\":%ld,\"blocks\":%ld,\"req_bytes\":%ld,\"resp_bytes\":%ld,\"socket_type\":\"%s\",",
		       n, blocks, req, resp, type == SOCK_STREAM ? "stream" : "seqpacket");
		summary_json(stdout, "ring_us", &sr);
		putchar(',');
		summary_json(stdout, "unix_us", &su);
		printf(",\"ratio_p50\":%.4f,\"ratio_p99\":%.4f}\n", su.p50 > 0 ? sr.p50 / su.p50 : 0,
		       su.p99 > 0 ? sr.p99 / su.p99 : 0);
	} else {
		printf("pagoda-bench rtt: %ld empty round trips of each kind, alternating in %ld blocks\n", n, blocks);
		printf("  %-26s %9s %9s %9s %9s %9s\n", "(us)", "min", "p50", "mean", "p99", "max");
		print_us("rings (pagoda_nop)", &sr);
		char name[64];
		snprintf(name, sizeof name, "AF_UNIX %s %ld/%ld B", type == SOCK_STREAM ? "stream" : "seqpkt", req, resp);
		print_us(name, &su);
		printf("  rings / socket: p50 %.2fx, p99 %.2fx\n", su.p50 > 0 ? sr.p50 / su.p50 : 0,
		       su.p99 > 0 ? sr.p99 / su.p99 : 0);
	}
	status = 0;
out:
	close(sv[0]);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	pagoda_close(pg);
	free(ring);
	free(sock);
	free(buf);
	return status;
}

int bench_stream(int argc, char **argv, const struct common_opts *co)
{
	long k = 32, out_len = 256, prompt_len = 8, stall_ms = 0, delay_us = 0, timeout_s = 120;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: pagoda-bench stream [options]   (best with a small, fast model)\n"
			       "  -k, --inflight K    requests in flight on the one connection (default 32)\n"
			       "  -o, --output-len N  tokens per request (default 256)\n"
			       "  -p, --prompt-len N  prompt tokens per request (default 8)\n"
			       "      --stall MS      read nothing for MS ms after submitting (default 0)\n"
			       "      --read-delay US pause US microseconds after each event (a slow reader)\n"
			       "      --timeout S     longest wait for one event (default 120)\n");
			return 0;
		}
		if (!(v = arg_value(argc, argv, &i)))
			return 2;
		bool ok;
		if (!strcmp(a, "-k") || !strcmp(a, "--inflight"))
			ok = arg_long(a, v, 1, 4096, &k);
		else if (!strcmp(a, "-o") || !strcmp(a, "--output-len"))
			ok = arg_long(a, v, 1, 1 << 20, &out_len);
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt-len"))
			ok = arg_long(a, v, 1, 1 << 20, &prompt_len);
		else if (!strcmp(a, "--stall"))
			ok = arg_long(a, v, 0, 3600000, &stall_ms);
		else if (!strcmp(a, "--read-delay"))
			ok = arg_long(a, v, 0, 10000000, &delay_us);
		else if (!strcmp(a, "--timeout"))
			ok = arg_long(a, v, 1, 100000, &timeout_s);
		else {
			fprintf(stderr, "pagoda-bench: unknown option %s (see pagoda-bench stream --help)\n", a);
			return 2;
		}
		if (!ok)
			return 2;
	}
	pagoda_t *pg;
	int rc = pagoda_connect(co->socket, &pg);
	if (rc < 0) {
		fprintf(stderr, "pagoda-bench: connect: %s\n", pagoda_strerror(rc));
		return 1;
	}
	int status = 1;
	int n_vocab = pagoda_n_vocab(pg);
	uint64_t *ids = calloc((size_t)k, sizeof *ids);
	long *seen = calloc((size_t)k, sizeof *seen), *gen = calloc((size_t)k, sizeof *gen);
	int32_t *prompt = calloc((size_t)prompt_len, sizeof *prompt);
	bool *fin = calloc((size_t)k, sizeof *fin);
	if (!ids || !seen || !gen || !prompt || !fin)
		goto out;
	struct pagoda_params p;
	pagoda_params_init(&p);
	p.max_tokens = (int)out_len;
	p.flags = PAGODA_CLAMP_MAX_TOKENS;
	uint64_t rng = 42;
	uint64_t t0 = bench_now_ns();
	for (long i = 0; i < k; i++) {
		for (long j = 0; j < prompt_len; j++)
			prompt[j] = 3 + (int32_t)(bench_rand(&rng) % (uint64_t)(n_vocab > 4 ? n_vocab - 3 : 1));
		if ((rc = pagoda_submit_ids(pg, prompt, (size_t)prompt_len, &p, &ids[i])) < 0) {
			fprintf(stderr, "pagoda-bench: submit %ld: %s\n", i, pagoda_strerror(rc));
			goto out;
		}
	}
	if (stall_ms)
		usleep((useconds_t)stall_ms * 1000);
	uint64_t t_read = bench_now_ns(), t_last = t_read, t_first_tok = 0;
	uint64_t d_admit = UINT64_MAX, d_done = 0;
	long n_tok = 0, n_fin = 0, n_events = 0, errors = 0;
	while (n_fin < k) {
		struct pagoda_event ev;
		if ((rc = pagoda_next(pg, &ev, (int)timeout_s * 1000)) < 0) {
			fprintf(stderr, "pagoda-bench: next: %s\n", pagoda_strerror(rc));
			goto out;
		}
		n_events++;
		long i = 0;
		while (i < k && ids[i] != ev.req_id)
			i++;
		if (i == k)
			continue;
		if (ev.type == PAGODA_EV_TOKEN && ev.token >= 0) {
			seen[i]++;
			n_tok++;
			if (!t_first_tok)
				t_first_tok = bench_now_ns();
		} else if (ev.type == PAGODA_EV_DONE || ev.type == PAGODA_EV_ERROR) {
			if (fin[i]) {
				fprintf(stderr, "pagoda-bench: two final events for request %ld\n", i);
				goto out;
			}
			fin[i] = true;
			n_fin++;
			if (ev.type == PAGODA_EV_ERROR)
				errors++;
			else {
				gen[i] = ev.timings.n_gen;
				if (ev.timings.t_admit_ns < d_admit)
					d_admit = ev.timings.t_admit_ns;
				if (ev.timings.t_done_ns > d_done)
					d_done = ev.timings.t_done_ns;
			}
		}
		t_last = bench_now_ns();
		if (delay_us)
			usleep((useconds_t)delay_us);
	}
	long long sum_gen = 0, lost = 0;
	for (long i = 0; i < k; i++) {
		sum_gen += gen[i];
		if (seen[i] != gen[i])
			lost += gen[i] > seen[i] ? gen[i] - seen[i] : seen[i] - gen[i];
	}
	double wall = (double)(t_last - t0) / 1e9, read_s = (double)(t_last - t_read) / 1e9;
	double prod_s = d_done > d_admit ? (double)(d_done - d_admit) / 1e9 : 0;
	/* Tokens already produced when the client starts reading: the backlog. */
	double recv = wall > 0 ? (double)n_tok / wall : 0, drain = read_s > 0 ? (double)n_tok / read_s : 0;
	double prod = prod_s > 0 ? (double)sum_gen / prod_s : 0;
	if (co->json)
		printf("{\"mode\":\"stream\",\"inflight\":%ld,\"output_len\":%ld,\"prompt_len\":%ld,\"stall_ms\":%ld,"
		       "\"read_delay_us\":%ld,\"tokens\":%ld,\"events\":%ld,\"errors\":%ld,\"mismatched_tokens\":%lld,"
		       "\"wall_s\":%.4f,\"read_s\":%.4f,\"recv_tok_per_s\":%.2f,\"read_phase_tok_per_s\":%.2f,"
		       "\"daemon_tok_per_s\":%.2f}\n",
		       k, out_len, prompt_len, stall_ms, delay_us, n_tok, n_events, errors, lost, wall, read_s, recv,
		       drain, prod);
	else {
		printf("pagoda-bench stream: %ld requests x %ld tokens on one connection%s\n", k, out_len,
		       stall_ms ? "" : ", read as they come");
		if (stall_ms)
			printf("  the client read nothing for the first %ld ms\n", stall_ms);
		printf("  received %ld tokens (%ld events, %ld errors, %lld tokens missing or extra) in %.3f s\n", n_tok,
		       n_events, errors, lost, wall);
		printf("  client receives     %10.1f tok/s (submit to last event)\n", recv);
		if (stall_ms)
			printf("  reading phase       %10.1f tok/s (after the stall: backlog drain + rest)\n", drain);
		printf("  daemon produced     %10.1f tok/s (daemon clock: first admit to last done)\n", prod);
	}
	status = lost || errors ? 1 : 0;
out:
	pagoda_close(pg);
	free(ids);
	free(seen);
	free(gen);
	free(prompt);
	free(fin);
	return status;
}
