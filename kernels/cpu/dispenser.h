/* kernels/cpu/dispenser.h — chunks of a job handed out to the pool's threads.
 *
 * Chunks 0..n-1 are split into one contiguous range per thread. A thread
 * takes its own range's chunks from the front, in order, so in decode its
 * weights are one stream that the kernels' prefetches stay ahead of; a
 * thread whose range is done takes the others' chunks from their back, so
 * the join waits on at most one chunk. (From one shared counter a thread's
 * next chunk was rarely the one after its last, so every chunk began where
 * its prefetches had not reached: on the Zen 5, Q4_0 decode's matmuls ran
 * at 0.67 of a plain read of the same weights, 0.77-0.81 this way; Q8_0's
 * at 0.82-0.84, 0.88-0.91.)
 */
#ifndef PAGODA_KERNELS_CPU_DISPENSER_H
#define PAGODA_KERNELS_CPU_DISPENSER_H

#include <stdatomic.h>
#include <stdint.h>

#define PG_DISP_MAX 16 /* threads with a range of their own; the rest only take */

struct pg_dispenser {
	int nr;
	struct {
		_Alignas(64) _Atomic uint64_t v; /* front | back << 32 */
	} r[PG_DISP_MAX];
};

/* n chunks (< 2^32) for a run on nth threads (1 when the caller runs the
 * job alone). */
static inline void pg_disp_init(struct pg_dispenser *d, int64_t n, int nth)
{
	d->nr = nth < 1 ? 1 : nth > PG_DISP_MAX ? PG_DISP_MAX : nth;
	for (int t = 0; t < d->nr; t++) {
		const uint64_t f = (uint64_t)(n * t / d->nr), b = (uint64_t)(n * (t + 1) / d->nr);
		atomic_store_explicit(&d->r[t].v, f | b << 32, memory_order_relaxed);
	}
}

/* Thread ith's next chunk, or -1 when all are taken. Relaxed: the pool's
 * join orders what the chunks wrote. */
static inline int64_t pg_disp_take(struct pg_dispenser *d, int ith)
{
	for (int i = 0; i < d->nr; i++) {
		const int t = (ith + i) % d->nr;
		const int front = i == 0 && ith < d->nr; /* its own range */
		uint64_t v = atomic_load_explicit(&d->r[t].v, memory_order_relaxed);
		for (;;) {
			const uint64_t f = v & 0xffffffffu, b = v >> 32;
			if (f >= b)
				break;
			const uint64_t nv = front ? (f + 1) | b << 32 : f | (b - 1) << 32;
			if (atomic_compare_exchange_weak_explicit(&d->r[t].v, &v, nv, memory_order_relaxed,
								  memory_order_relaxed))
				return (int64_t)(front ? f : b - 1);
		}
	}
	return -1;
}

#endif
