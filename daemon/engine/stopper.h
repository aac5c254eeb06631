/* daemon/engine/stopper.h — stop strings matched on the detokenized stream.
 * Text that could still become a stop string is held back; text before a
 * match is released, the match and what follows are not. */
#ifndef PAGODA_STOPPER_H
#define PAGODA_STOPPER_H

#include <stdbool.h>

#include "daemon/engine/engine.h"

struct stopper {
	const char (*stop)[ENGINE_STOP_LEN + 1];
	int n_stop;
	char hold[ENGINE_STOP_LEN];
	int n_hold;
};

void stopper_init(struct stopper *s, const char (*stop)[ENGINE_STOP_LEN + 1], int n_stop);
/* Appends text; writes what is safe to release to out (cap >= n +
 * ENGINE_STOP_LEN) and returns its length; *matched on a stop string. */
int stopper_feed(struct stopper *s, const char *text, int n, char *out, int cap, bool *matched);
/* Releases held text at the end of a request. */
int stopper_flush(struct stopper *s, char *out, int cap);

#endif
