/* kernels/cpu/pool.c — a fork-join pool for the compute kernels.
 *
 * One job at a time: the caller publishes (fn, arg), bumps a generation
 * word and runs its own share as thread 0. Workers spin a little on the
 * generation (a decode step issues hundreds of short jobs back to back,
 * and a futex round trip per job would cost more than the job), then
 * sleep on it with a futex so an idle engine leaves the cores alone.
 * Wake-ups and the final join only pay a syscall when someone sleeps.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"

#define SPIN_ITERS 20000 /* ~50-100 us of pause before sleeping */

struct pg_worker {
	struct pg_pool *pool;
	int ith;
	pthread_t th;
};

struct pg_pool {
	int n;
	pthread_mutex_t run_lock;
	void (*fn)(void *, int, int);
	void *arg;
	_Atomic uint32_t gen;     /* futex word: bumped per job */
	_Atomic int sleepers;     /* workers in (or entering) futex_wait */
	_Atomic uint32_t pending; /* futex word: workers still busy on the job */
	_Atomic int caller_sleeps;
	_Atomic int stop;
	struct pg_worker *w;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *worker_main(void *a)
{
	struct pg_worker *w = a;
	struct pg_pool *p = w->pool;
	uint32_t seen = 0;
	for (;;) {
		uint32_t g;
		int spins = 0;
		while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
			if (++spins < SPIN_ITERS) {
				cpu_relax();
				continue;
			}
			/* Announce the sleep before the last look at gen: the
			 * publisher bumps gen then reads sleepers (both seq_cst),
			 * so one of us sees the other. */
			atomic_fetch_add(&p->sleepers, 1);
			if (atomic_load(&p->gen) == seen)
				futex_wait(&p->gen, seen);
			atomic_fetch_sub(&p->sleepers, 1);
			spins = 0;
		}
		seen = g;
		if (atomic_load_explicit(&p->stop, memory_order_acquire))
			return NULL;
		p->fn(p->arg, w->ith, p->n);
		if (atomic_fetch_sub(&p->pending, 1) == 1 &&
		    atomic_load(&p->caller_sleeps))
			futex_wake(&p->pending);
	}
}

int pg_pool_size(const struct pg_pool *p)
{
	return p ? p->n : 1;
}

struct pg_pool *pg_pool_create(int nthreads)
{
	if (nthreads <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = c > 0 ? (int)c : 1;
	}
	struct pg_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n = nthreads;
	pthread_mutex_init(&p->run_lock, NULL);
	p->w = calloc((size_t)nthreads, sizeof(*p->w));
	if (!p->w) {
		free(p);
		return NULL;
	}
	for (int i = 1; i < nthreads; i++) {
		p->w[i].pool = p;
		p->w[i].ith = i;
		if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]) != 0) {
			p->n = i; /* shut down the ones that started */
			pg_pool_destroy(p);
			return NULL;
		}
	}
	return p;
}

void pg_pool_destroy(struct pg_pool *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, 1);
	atomic_fetch_add(&p->gen, 1);
	futex_wake(&p->gen);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->w[i].th, NULL);
	pthread_mutex_destroy(&p->run_lock);
	free(p->w);
	free(p);
}

void pg_pool_run(struct pg_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg)
{
	if (!p || p->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&p->run_lock);
	p->fn = fn;
	p->arg = arg;
	atomic_store(&p->pending, (uint32_t)(p->n - 1));
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->sleepers) > 0)
		futex_wake(&p->gen);
	fn(arg, 0, p->n);
	int spins = 0;
	uint32_t left;
	while ((left = atomic_load_explicit(&p->pending, memory_order_acquire)) != 0) {
		if (++spins < SPIN_ITERS) {
			cpu_relax();
			continue;
		}
		atomic_store(&p->caller_sleeps, 1);
		left = atomic_load(&p->pending);
		if (left)
			futex_wait(&p->pending, left);
		atomic_store(&p->caller_sleeps, 0);
		spins = 0;
	}
	pthread_mutex_unlock(&p->run_lock);
}
