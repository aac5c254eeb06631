/* tools/pagoda/opts.h — flag parsing shared by the subcommands. */
#ifndef PAGODA_OPTS_H
#define PAGODA_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/engine/engine.h"

/* If argv[*i] is a sampling flag (--temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --seed, --presence-penalty,
 * --frequency-penalty), consumes it and its value,
 * advancing *i, and returns 1; returns 0 if it is not one, -1 on a bad or
 * missing value (after printing why). */
int opt_sampling(int argc, char **argv, int *i, struct sampling *s);
/* The value of the flag at argv[*i], advancing *i; NULL (after printing
 * why) if missing. */
const char *opt_value(int argc, char **argv, int *i);
bool opt_int(const char *s, long lo, long hi, long *out);
/* A byte count with an optional K, M, G or T suffix (powers of 1024). */
bool opt_size(const char *s, int64_t *out);
bool opt_float(const char *s, float *out);
/* Reads a whole stream into a NUL-terminated buffer (caller frees). */
char *read_all(FILE *f, size_t *len);
/* read_all of a file, or NULL after perror(path). */
char *read_path(const char *path, size_t *len);
double ns_to_s(uint64_t ns);

#define SPEC_FLAGS_HELP                                                                 \
	"  --speculative KIND   speculative decoding: off, ngram (prompt lookup) or draft\n" \
	"                       (a draft model); the same output, faster where guessed\n"   \
	"  --draft-max N        draft tokens verified per step, 1..16 (default 8)\n"

#define SAMPLING_FLAGS_HELP                                                             \
	"  --temp T             temperature, 0 = greedy (default 0.8)\n"                  \
	"  --top-k K            keep the K most likely tokens, 0 = off (default 40)\n"    \
	"  --top-p P            nucleus sampling, 1 = off (default 0.95)\n"               \
	"  --min-p P            drop tokens below P x the best one (default 0.05)\n"      \
	"  --repeat-penalty R   penalize recent tokens, 1 = off (default 1)\n"            \
	"  --repeat-last-n N    tokens the penalty looks back (default 64)\n"             \
	"  --presence-penalty P OpenAI's: lower tokens the output has, -2..2 (default 0)\n" \
	"  --frequency-penalty F  ... by F times their count, -2..2 (default 0)\n"       \
	"  --seed S             sampling seed\n"

#endif
