/* tools/pagoda/cmd_generate.c — `pagoda generate`: one request to pagodad
 * through libpagoda, the text streamed to stdout as it arrives. With the same
 * model, prompt and greedy settings its stdout equals `pagoda run`'s. */
#include "libclient/pagoda.h"
#include "tools/pagoda/cmds.h"
#include "tools/pagoda/jsonw.h"
#include "tools/pagoda/opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f)
{
	fprintf(f, "usage: pagoda generate -p PROMPT [options]\n"
		   "  -p, --prompt TEXT    the prompt (-f FILE reads it from a file)\n"
		   "  -n, --n-predict N    tokens to generate (default: until end of text or context)\n"
		   "  --chat               the prompt is a user message: the daemon renders the\n"
		   "                       model's chat template around it (and --system TEXT)\n"
		   "  --chat-json FILE     a whole chat request, JSON ({\"messages\": [...], ...}; - is stdin)\n"
		   "  --stop STR           stop before this text (up to 4 times)\n"
		   "  --socket PATH        the daemon's socket (default: $PAGODA_SOCKET,\n"
		   "                       /run/pagoda/pagoda.sock, $XDG_RUNTIME_DIR/pagoda.sock)\n"
		   "  --ids                print generated token ids instead of text\n"
		   "  --timings            print timings to stderr\n"
		   "  --json-schema FILE   the output is JSON valid against this schema (docs/grammar.md)\n"
		   "  --regex RE           the output matches this regular expression\n"
		   "  --grammar FILE       the output is a sentence of this GBNF grammar\n"
		   "  --top-logprobs N     print each token's N most likely alternatives to stderr\n"
		   SPEC_FLAGS_HELP
		   "                       (draft: the daemon's --draft-model)\n"
		   SAMPLING_FLAGS_HELP);
	return f == stdout ? 0 : 2;
}

/* One line per token on stderr: its id and logprob, then the
 * alternatives as id:logprob:"piece". */
static void print_top(const struct pagoda_event *ev)
{
	fprintf(stderr, "top %d %.4f", ev->token, ev->logprob);
	for (int i = 0; i < ev->n_top; i++) {
		fprintf(stderr, " %d:%.4f:\"", ev->top[i].token, ev->top[i].logprob);
		for (size_t k = 0; k < ev->top[i].len; k++) {
			unsigned char ch = (unsigned char)ev->top[i].text[k];
			fprintf(stderr, ch < 0x20 || ch == '"' || ch == '\\' ? "\\x%02x" : "%c", ch);
		}
		fputc('"', stderr);
	}
	fputc('\n', stderr);
}

int cmd_generate(int argc, char **argv)
{
	struct sampling smp;
	sampling_defaults(&smp); /* the same defaults as `pagoda run` */
	struct pagoda_params par;
	pagoda_params_init(&par);
	const char *prompt = NULL, *prompt_file = NULL, *sock = NULL, *system = NULL, *cfile = NULL;
	long n_predict = -1, v;
	bool ids = false, timings = false, chat = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val;
		int r = opt_sampling(argc, argv, &i, &smp);
		if (r < 0)
			return 2;
		if (r > 0)
			continue;
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return usage(stdout);
		if (!strcmp(a, "--ids")) {
			ids = true;
			continue;
		}
		if (!strcmp(a, "--timings")) {
			timings = true;
			continue;
		}
		if (!strcmp(a, "--chat")) {
			chat = true;
			continue;
		}
		if (!(val = opt_value(argc, argv, &i)))
			return 2;
		if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
			prompt = val;
		else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
			prompt_file = val;
		else if (!strcmp(a, "--socket"))
			sock = val;
		else if (!strcmp(a, "--system"))
			system = val;
		else if (!strcmp(a, "--chat-json")) {
			prompt_file = strcmp(val, "-") ? val : "/dev/stdin";
			chat = true;
		}
		else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && opt_int(val, -1, 1 << 24, &v))
			n_predict = v;
		else if (!strcmp(a, "--speculative") && (v = engine_spec_parse(val)) >= 0)
			par.speculative = (int)v;
		else if (!strcmp(a, "--draft-max") && opt_int(val, 1, PAGODA_DRAFT_MAX, &v))
			par.draft_max = (int)v;
		else if (!strcmp(a, "--json-schema") || !strcmp(a, "--grammar")) {
			par.constraint_kind = a[2] == 'j' ? PAGODA_CONSTRAINT_JSON_SCHEMA : PAGODA_CONSTRAINT_GBNF;
			cfile = val;
		} else if (!strcmp(a, "--regex")) {
			par.constraint_kind = PAGODA_CONSTRAINT_REGEX;
			par.constraint = val;
			cfile = NULL;
		} else if (!strcmp(a, "--top-logprobs") && opt_int(val, 0, PAGODA_TOP_LOGPROBS, &v)) {
			par.top_logprobs = (int)v;
			par.flags |= v ? PAGODA_LOGPROBS : 0;
		} else if (!strcmp(a, "--stop")) {
			if (par.n_stop == PAGODA_MAX_STOP || !*val || strlen(val) > PAGODA_STOP_LEN) {
				fprintf(stderr, "pagoda generate: at most %d stop strings of 1..%d bytes\n",
					PAGODA_MAX_STOP, PAGODA_STOP_LEN);
				return 2;
			}
			par.stop[par.n_stop++] = val;
		} else {
			fprintf(stderr, "pagoda generate: bad option %s %s\n", a, val);
			return usage(stderr);
		}
	}
	char *file_text = NULL;
	size_t plen = 0;
	if (prompt_file) {
		if (!(file_text = read_path(prompt_file, &plen)))
			return 1;
		prompt = file_text;
	} else if (prompt) {
		plen = strlen(prompt);
	}
	if (!prompt || !plen) {
		fprintf(stderr, "pagoda generate: -p PROMPT is required\n");
		free(file_text);
		return usage(stderr);
	}
	char *ctext = NULL;
	if (cfile) {
		if (!(ctext = read_path(cfile, &par.constraint_len))) {
			free(file_text);
			return 1;
		}
		par.constraint = ctext;
	}
	struct jsonw req = { 0 };
	if (chat && !file_text) {   /* -p TEXT: one user turn, asking for the reply */
		jsonw_raw(&req, "{\"messages\": [");
		if (system) {
			jsonw_message(&req, "system", system, strlen(system));
			jsonw_raw(&req, ", ");
		}
		jsonw_message(&req, "user", prompt, plen);
		jsonw_raw(&req, "], \"add_generation_prompt\": true}");
		if (!req.ok) {
			fprintf(stderr, "pagoda generate: out of memory\n");
			return 1;
		}
		prompt = req.s;
		plen = req.n;
	}
	par.temp = smp.temp;
	par.top_k = smp.top_k;
	par.top_p = smp.top_p;
	par.min_p = smp.min_p;
	par.repeat_penalty = smp.repeat_penalty;
	par.repeat_last_n = smp.repeat_last_n;
	par.seed = smp.seed;
	par.presence_penalty = smp.presence_penalty;
	par.frequency_penalty = smp.frequency_penalty;

	pagoda_t *pg;
	int rc = pagoda_connect(sock, &pg);
	if (rc < 0) {
		fprintf(stderr, "pagoda generate: %s\n", pagoda_strerror(rc));
		free(file_text);
		free(req.s);
		free(ctext);
		return 1;
	}
	if (n_predict < 0 || n_predict == 0) {
		/* like `pagoda run`: until the end of text or of the context */
		par.max_tokens = pagoda_n_ctx(pg) > 0 ? pagoda_n_ctx(pg) : 1 << 20;
		par.flags |= PAGODA_CLAMP_MAX_TOKENS;
	} else {
		par.max_tokens = (int)n_predict;
	}
	int status = 0;
	if (n_predict == 0) {
		pagoda_close(pg);
		free(file_text);
		free(req.s);
		free(ctext);
		return 0;
	}
	/* The prompt goes straight into the shared arena. */
	struct pagoda_prompt pr;
	uint64_t id;
	if (chat) {
		rc = pagoda_submit_chat(pg, prompt, plen, &par, &id);
	} else if ((rc = pagoda_prompt_alloc(pg, plen, &pr)) == 0) {
		memcpy(pr.data, prompt, plen);
		rc = pagoda_prompt_submit(pg, &pr, plen, false, &par, &id);
		if (rc < 0)
			pagoda_prompt_discard(pg, &pr);
	}
	free(file_text);
	free(req.s);
	free(ctext);
	if (rc < 0) {
		fprintf(stderr, "pagoda generate: %s\n", pagoda_strerror(rc));
		pagoda_close(pg);
		return 1;
	}
	bool first = true;
	struct pagoda_event ev;
	for (;;) {
		rc = pagoda_next(pg, &ev, -1);
		if (rc < 0) {
			fflush(stdout);
			fprintf(stderr, "\npagoda generate: %s\n", pagoda_strerror(rc));
			status = 1;
			break;
		}
		if (ev.req_id != id)
			continue;
		if (ev.type == PAGODA_EV_TOKEN) {
			if (ids) {
				if (ev.token >= 0) {
					printf(first ? "%d" : " %d", ev.token);
					first = false;
				}
			} else if (ev.len) {
				fwrite(ev.text, 1, ev.len, stdout);
			}
			fflush(stdout);
			if (ev.n_top)
				print_top(&ev);
		} else if (ev.type == PAGODA_EV_DONE) {
			if (ids)
				printf("\n");
			fflush(stdout);
			if (timings) {
				const struct pagoda_timings *t = &ev.timings;
				double ttft = t->t_first_ns ? (double)(t->t_first_ns - t->t_submit_ns) / 1e6 : 0;
				double gen = t->t_first_ns && t->n_gen > 1 ? (double)(t->t_done_ns - t->t_first_ns) / 1e9 : 0;
				fprintf(stderr, "\npagoda: prompt %d tokens (%d cached) | generated %d tokens, %.2f tok/s | TTFT %.1f ms | %s\n",
					t->n_prompt, t->n_cached, t->n_gen, gen > 0 ? (t->n_gen - 1) / gen : 0.0, ttft,
					pagoda_finish_name(ev.finish));
				if (t->n_drafted)
					fprintf(stderr, "pagoda: speculative: %d drafted, %d accepted (%.1f%%), %.2f tokens per pass\n",
						t->n_drafted, t->n_accepted, 100.0 * t->n_accepted / t->n_drafted,
						t->n_passes ? (double)t->n_gen / t->n_passes : 0.0);
			}
			break;
		} else if (ev.type == PAGODA_EV_ERROR) {
			fflush(stdout);
			fprintf(stderr, "pagoda generate: %s: %s\n", pagoda_strerror(ev.error), ev.text);
			status = 1;
			break;
		}
	}
	pagoda_close(pg);
	return status;
}
