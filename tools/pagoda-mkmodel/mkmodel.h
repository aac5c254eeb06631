/* tools/pagoda-mkmodel/mkmodel.h — the GGUF writer behind pagoda-mkmodel,
 * callable in-process (the unit test does). */
#ifndef PAGODA_MKMODEL_H
#define PAGODA_MKMODEL_H

/* Runs pagoda-mkmodel with argv (argv[0] is the program name). Returns the
 * exit status: 0 (also for --help), 1 for a failure, 2 for bad usage; messages go to stderr. */
int mkmodel_main(int argc, char **argv);

#endif
