/* kernels/cpu/dispenser.h — chunks of a job handed out to the pool's threads.
 *
 * Chunks 0..n-1 are split into one contiguous range per thread. A thread
 * takes its own range's chunks from the front, in order, so in decode its
 * weights are one stream that the kernels' prefetches stay ahead of; a
 * thread whose range is done takes the others' chunks from their back, so
 * the join waits on at most one chunk. (From one shared counter a thread's
 * next chunk is rarely the one after its last, so every chunk begins where
 * its prefetches have not reached; bench/mm_decode measures the difference
 * against a plain read of the same weights.)
 *
 * A thread claims up to PG_DISP_BATCH chunks of its own range at once (an
 * eighth as many as its range has left, so the last ones still go one by
 * one) and hands them out with no atomic. Each claim is a lock cmpxchg,
 * which waits until the thread's loads in flight have completed: in
 * decode those are the weight stream's misses, so a claim per chunk stalls
 * the stream (perf shows it on the instruction after the cmpxchg; bench/
 * mm_decode measures the matmuls against a plain read of the weights).
 * Stealing from another's back stays one chunk at a time.
 */
#ifndef PAGODA_KERNELS_CPU_DISPENSER_H
#define PAGODA_KERNELS_CPU_DISPENSER_H

#include <stdatomic.h>
#include <stdint.h>

#define PG_DISP_MAX 16 /* threads with a range of their own; the rest only take */
#define PG_DISP_BATCH 4 /* the most chunks a thread claims from its own front at once */

struct pg_dispenser {
	int nr;
	struct {
		_Alignas(64) _Atomic uint64_t v; /* front | back << 32 */
	} r[PG_DISP_MAX];
	struct {
		_Alignas(64) int64_t next, end; /* claimed, not yet handed out: the thread's alone */
	} own[PG_DISP_MAX];
};

/* n chunks (< 2^32) for a run on nth threads (1 when the caller runs the
 * job alone). */
static inline void pg_disp_init(struct pg_dispenser *d, int64_t n, int nth)
{
	d->nr = nth < 1 ? 1 : nth > PG_DISP_MAX ? PG_DISP_MAX : nth;
	for (int t = 0; t < d->nr; t++) {
		const uint64_t f = (uint64_t)(n * t / d->nr), b = (uint64_t)(n * (t + 1) / d->nr);
		atomic_store_explicit(&d->r[t].v, f | b << 32, memory_order_relaxed);
		d->own[t].next = d->own[t].end = 0;
	}
}

/* Thread ith's next chunk, or -1 when all are taken. Relaxed: the pool's
 * join orders what the chunks wrote. */
static inline int64_t pg_disp_take(struct pg_dispenser *d, int ith)
{
	if (ith < d->nr && d->own[ith].next < d->own[ith].end)
		return d->own[ith].next++;
	for (int i = 0; i < d->nr; i++) {
		const int t = (ith + i) % d->nr;
		const int front = i == 0 && ith < d->nr; /* its own range */
		uint64_t v = atomic_load_explicit(&d->r[t].v, memory_order_relaxed);
		for (;;) {
			const uint64_t f = v & 0xffffffffu, b = v >> 32;
			if (f >= b)
				break;
			uint64_t k = (b - f) / (2 * PG_DISP_BATCH);
			k = !front || k < 1 ? 1 : k > PG_DISP_BATCH ? PG_DISP_BATCH : k;
			const uint64_t nv = front ? (f + k) | b << 32 : f | (b - 1) << 32;
			if (!atomic_compare_exchange_weak_explicit(&d->r[t].v, &v, nv, memory_order_relaxed,
								   memory_order_relaxed))
				continue;
			if (!front)
				return (int64_t)(b - 1);
			d->own[ith].next = (int64_t)f + 1;
			d->own[ith].end = (int64_t)(f + k);
			return (int64_t)f;
		}
	}
	return -1;
}

#endif
