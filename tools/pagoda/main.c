/* tools/pagoda/main.c — `pagoda`, the command-line client: dispatches to
 * the subcommands in this folder. */
#include "tools/pagoda/cmds.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} cmds[] = {
	{ "run", cmd_run, "run the engine in-process on a prompt, streaming the completion" },
	{ "generate", cmd_generate, "stream a completion from the pagodad daemon" },
	{ "ping", cmd_ping, "measure round trips to the daemon" },
	{ "status", cmd_status, "show the daemon's state (model, load, cache, latencies) from D-Bus" },
	{ "tokenize", cmd_tokenize, "print the token ids of stdin" },
	{ "detokenize", cmd_detokenize, "print the text of the token ids on stdin" },
	{ "perplexity", cmd_perplexity, "perplexity of a text file (llama.cpp's method)" },
	{ "chat", cmd_chat, "talk with the daemon's model (its chat template) in the terminal" },
	{ "chat-template", cmd_chat_template, "render a chat request (JSON on stdin) with a chat template" },
	{ "constrain", cmd_constrain, "walk stdin through a JSON Schema, regex or grammar, token by token" },
	{ "info", cmd_info, "print a GGUF file's metadata and tensors" },
};

static int usage(FILE *f)
{
	fprintf(f, "usage: pagoda COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
		fprintf(f, "  %-11s %s\n", cmds[i].name, cmds[i].help);
	fprintf(f, "\n'pagoda COMMAND --help' describes each.\n");
	return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage(stderr);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
		return usage(stdout);
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "pagoda: unknown command '%s'\n", argv[1]);
	return usage(stderr);
}
