/* tools/pagoda/cmds.h — the subcommands of the `pagoda` CLI. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit status. */
#ifndef PAGODA_CMDS_H
#define PAGODA_CMDS_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_ping(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_constrain(int argc, char **argv);

#endif
