/* tools/pagoda/cmd_chat.c — `pagoda chat`: a conversation with the daemon's
 * model in the terminal. Each turn sends the whole conversation as a chat
 * request (the daemon renders the model's template; its prefix cache keeps
 * the earlier turns), the reply streams as it comes. Line editing and
 * history from libedit; Ctrl-C cancels a reply, not the session. */
#include "libclient/pagoda.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/jsonw.h"
#include "tools/pagoda/opts.h"

#include <editline/readline.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct turn {
	char *role, *text;
};

struct convo {
	struct turn *t;
	size_t n, cap;
	char *system;
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int usage(FILE *f)
{
	fprintf(f, "usage: pagoda chat [-p MESSAGE] [--system TEXT] [options]\n"
		   "  -p, --prompt TEXT    one-shot: send TEXT, print the reply, exit\n"
		   "  --system TEXT        the system prompt\n"
		   "  -n, --n-predict N    reply tokens at most (default: until end of turn)\n"
		   "  --socket PATH        the daemon's socket (as pagoda generate)\n"
		   SAMPLING_FLAGS_HELP
		   "In a session: /reset forgets the conversation, /system TEXT sets the system\n"
		   "prompt (and resets), /quit or Ctrl-D ends; Ctrl-C stops a reply.\n");
	return f == stdout ? 0 : 2;
}

static bool push(struct convo *c, const char *role, const char *text, size_t len)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 8;
		struct turn *t = realloc(c->t, cap * sizeof *t);
		if (!t)
			return false;
		c->t = t;
		c->cap = cap;
	}
	char *r = strdup(role), *x = malloc(len + 1);
	if (!r || !x) {
		free(r);
		free(x);
		return false;
	}
	memcpy(x, text, len);
	x[len] = 0;
	c->t[c->n++] = (struct turn){ r, x };
	return true;
}

static void reset(struct convo *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->t[i].role);
		free(c->t[i].text);
	}
	c->n = 0;
}

static char *request(const struct convo *c, size_t *len)
{
	struct jsonw w = { 0 };
	jsonw_raw(&w, "{\"messages\": [");
	if (c->system) {
		jsonw_message(&w, "system", c->system, strlen(c->system));
		if (c->n)
			jsonw_raw(&w, ", ");
	}
	for (size_t i = 0; i < c->n; i++) {
		if (i)
			jsonw_raw(&w, ", ");
		jsonw_message(&w, c->t[i].role, c->t[i].text, strlen(c->t[i].text));
	}
	jsonw_raw(&w, "], \"add_generation_prompt\": true}");
	if (!w.ok) {
		free(w.s);
		return NULL;
	}
	*len = w.n;
	return w.s;
}

/* One turn: send, stream the reply to stdout, append it. 0, or -1 when the
 * connection is lost. A refused request prints why and leaves no turn. */
static int turn(pagoda_t *pg, struct convo *c, const char *msg, const struct pagoda_params *par)
{
	size_t len;
	if (!push(c, "user", msg, strlen(msg))) {
		fprintf(stderr, "pagoda chat: out of memory\n");
		return -1;
	}
	char *req = request(c, &len);
	uint64_t id;
	int rc = req ? pagoda_submit_chat(pg, req, len, par, &id) : PAGODA_E_NOMEM;
	free(req);
	if (rc < 0) {
		fprintf(stderr, "pagoda chat: %s\n", pagoda_strerror(rc));
		c->n--;
		free(c->t[c->n].role);
		free(c->t[c->n].text);
		return rc == PAGODA_E_DISCONNECTED ? -1 : 0;
	}
	char *reply = NULL;
	size_t rn = 0;
	bool cancelled = false;
	interrupted = 0;
	for (;;) {
		struct pagoda_event ev;
		if (interrupted && !cancelled) {
			pagoda_cancel(pg, id);
			cancelled = true;
		}
		rc = pagoda_next(pg, &ev, 100);
		if (rc == PAGODA_E_TIMEOUT || rc == PAGODA_E_AGAIN)
			continue;
		if (rc < 0) {
			fprintf(stderr, "\npagoda chat: %s\n", pagoda_strerror(rc));
			free(reply);
			return -1;
		}
		if (ev.req_id != id)
			continue;
		if (ev.type == PAGODA_EV_TOKEN && ev.len) {
			fwrite(ev.text, 1, ev.len, stdout);
			fflush(stdout);
			char *p = realloc(reply, rn + ev.len + 1);
			if (!p) {
				fprintf(stderr, "\npagoda chat: out of memory\n");
				free(reply);
				return -1;
			}
			memcpy(p + rn, ev.text, ev.len);
			reply = p;
			rn += ev.len;
			p[rn] = 0;
		} else if (ev.type == PAGODA_EV_DONE) {
			printf(ev.finish == PAGODA_FINISH_CANCEL ? " [stopped]\n" : "\n");
			break;
		} else if (ev.type == PAGODA_EV_ERROR) {
			printf("\n");
			fprintf(stderr, "pagoda chat: %s: %s\n", pagoda_strerror(ev.error), ev.text);
			c->n--;
			free(c->t[c->n].role);
			free(c->t[c->n].text);
			free(reply);
			return 0;
		}
	}
	fflush(stdout);
	bool ok = push(c, "assistant", reply ? reply : "", rn);
	free(reply);
	return ok ? 0 : -1;
}

int cmd_chat(int argc, char **argv)
{
	struct sampling smp;
	sampling_defaults(&smp);
	struct pagoda_params par;
	pagoda_params_init(&par);
	const char *once = NULL, *sock = NULL;
	long n_predict = -1, v;
	struct convo c = { 0 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val;
		int r = opt_sampling(argc, argv, &i, &smp);
		if (r < 0)
			return 2;
		if (r > 0)
			continue;
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return usage(stdout);
		if (!(val = opt_value(argc, argv, &i)))
			return 2;
		if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
			once = val;
		else if (!strcmp(a, "--system"))
			c.system = strdup(val);
		else if (!strcmp(a, "--socket"))
			sock = val;
		else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && opt_int(val, 1, 1 << 24, &v))
			n_predict = v;
		else {
			fprintf(stderr, "pagoda chat: bad option %s %s\n", a, val);
			return usage(stderr);
		}
	}
	par.temp = smp.temp;
	par.top_k = smp.top_k;
	par.top_p = smp.top_p;
	par.min_p = smp.min_p;
	par.repeat_penalty = smp.repeat_penalty;
	par.repeat_last_n = smp.repeat_last_n;
	par.seed = smp.seed;
	pagoda_t *pg;
	int rc = pagoda_connect(sock, &pg);
	if (rc < 0) {
		fprintf(stderr, "pagoda chat: %s\n", pagoda_strerror(rc));
		free(c.system);
		return 1;
	}
	if (n_predict > 0) {
		par.max_tokens = (int)n_predict;
	} else {
		par.max_tokens = pagoda_n_ctx(pg) > 0 ? pagoda_n_ctx(pg) : 1 << 20;
	}
	par.flags |= PAGODA_CLAMP_MAX_TOKENS;
	struct sigaction sa = { .sa_handler = on_sigint };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	int status = 0;
	if (once) {
		status = turn(pg, &c, once, &par) < 0 ? 1 : c.n == 2 ? 0 : 1;
	} else {
		using_history();
		for (;;) {
			interrupted = 0;
			char *line = readline("> ");
			if (!line)
				break;
			if (!*line) {
				free(line);
				continue;
			}
			add_history(line);
			if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) {
				free(line);
				break;
			} else if (!strcmp(line, "/reset")) {
				reset(&c);
				printf("(conversation reset)\n");
			} else if (!strncmp(line, "/system", 7) && (!line[7] || line[7] == ' ')) {
				free(c.system);
				c.system = line[7] && line[8] ? strdup(line + 8) : NULL;
				reset(&c);
				printf(c.system ? "(system prompt set, conversation reset)\n"
						: "(system prompt cleared, conversation reset)\n");
			} else if (line[0] == '/') {
				printf("(commands: /reset, /system TEXT, /quit)\n");
			} else if (turn(pg, &c, line, &par) < 0) {
				free(line);
				status = 1;
				break;
			}
			fflush(stdout);
			free(line);
		}
	}
	reset(&c);
	free(c.t);
	free(c.system);
	pagoda_close(pg);
	return status;
}
