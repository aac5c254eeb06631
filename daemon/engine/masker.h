/* daemon/engine/masker.h — the constrained sequences' token masks of one
 * step, computed in parallel across sequences on worker threads. A mask
 * depends only on its matcher's state, which the forward pass does not
 * change, so on a device backend the workers run while the device
 * computes; on the CPU, whose cores the forward pass keeps busy, they run
 * after it, the engine thread working with them. */
#ifndef PAGODA_MASKER_H
#define PAGODA_MASKER_H

#include <stdbool.h>
#include <stdint.h>

struct gm_matcher;
struct masker;

/* n_threads workers (>= 0; 0: the caller computes every mask alone). */
int masker_create(int n_threads, struct masker **out);
void masker_destroy(struct masker *mk); /* NULL-safe */
/* Queues gm_matcher_mask(m, mask), its result to go to *result. */
int masker_add(struct masker *mk, struct gm_matcher *m, uint32_t *mask, int *result);
/* Starts the queued jobs on the workers and returns at once. */
void masker_start(struct masker *mk);
/* Computes what is left with the workers, returns when every queued job is
 * done, and empties the queue. */
void masker_finish(struct masker *mk);
/* One mask now, on the caller's thread (gm_matcher_mask, counted). */
int masker_run(struct masker *mk, struct gm_matcher *m, uint32_t *mask);
/* Masks computed so far and their CPU time (any thread may ask). */
void masker_totals(struct masker *mk, uint64_t *masks, uint64_t *ns);

#endif
