/* tools/pagoda-bench/main.c — pagoda-bench: load generator and IPC
 * measurements against a running pagodad, through libpagoda. */
#include "tools/pagoda-bench/bench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pagoda-bench [MODE] [--socket PATH] [--json] [-q] [mode options]\n"
		"modes:\n"
		"  load     (default) concurrent streams: TTFT, ITL, TPOT, latency, throughput,\n"
		"           goodput under an SLO, prefix-cache hit rate\n"
		"  rtt      empty round trips through the rings (pagoda_nop) vs a plain AF_UNIX socket\n"
		"  stream   tokens/s one client receives when the daemon produces faster than it reads\n"
		"common options:\n"
		"  --socket PATH   the daemon's socket (default: $PAGODA_SOCKET, then the usual places)\n"
		"  --json          one JSON object on stdout instead of the table\n"
		"  -q, --quiet     no progress on stderr\n"
		"'pagoda-bench MODE --help' lists a mode's options.\n");
}

int main(int argc, char **argv)
{
	struct common_opts co = { .progress_tty = isatty(2) };
	const char *mode = "load";
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	int n_rest = 0;
	if (!rest)
		return 1;
	int first = 1;
	if (argc > 1 && argv[1][0] != '-') {
		mode = argv[1];
		first = 2;
	}
	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json"))
			co.json = true;
		else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
			co.quiet = true;
		else if (!strcmp(a, "--socket") || !strncmp(a, "--socket=", 9)) {
			if (a[8] == '=')
				co.socket = a + 9;
			else if (!(co.socket = arg_value(argc, argv, &i)))
				return 2;
		} else if (first == 1 && (!strcmp(a, "-h") || !strcmp(a, "--help")) && n_rest == 0) {
			usage(stdout);
			return 0;
		} else
			rest[n_rest++] = argv[i];
	}
	int rc;
	if (!strcmp(mode, "load"))
		rc = bench_load(n_rest, rest, &co);
	else if (!strcmp(mode, "rtt"))
		rc = bench_rtt(n_rest, rest, &co);
	else if (!strcmp(mode, "stream"))
		rc = bench_stream(n_rest, rest, &co);
	else if (!strcmp(mode, "help")) {
		usage(stdout);
		rc = 0;
	} else {
		fprintf(stderr, "pagoda-bench: unknown mode '%s'\n", mode);
		usage(stderr);
		rc = 2;
	}
	free(rest);
	return rc;
}
