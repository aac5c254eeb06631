/* daemon/engine/masker.c — a step's masks on a few persistent threads. Jobs
 * are claimed with one atomic counter; the caller claims too in
 * masker_finish, so nothing waits on a worker that has not woken yet. */
#include "daemon/engine/masker.h"
#include "daemon/grammar/grammar.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

struct mask_job {
	struct gm_matcher *m;
	uint32_t *mask;
	int *result;
};

struct masker {
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	pthread_t *th;
	int n_th;
	struct mask_job *jobs;
	int n_jobs, cap_jobs;
	_Atomic int next;    /* the next job to claim */
	_Atomic int n_done;  /* jobs finished this round */
	/* under lock: a round is open from masker_start until masker_finish
	 * has seen every job done and no worker inside drain(); jobs and
	 * n_jobs change only between rounds */
	uint64_t round;
	bool open, stop;
	int busy;
	_Atomic uint64_t masks, mask_ns; /* every job so far, its thread's CPU time */
};

static uint64_t thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int masker_run(struct masker *mk, struct gm_matcher *m, uint32_t *mask)
{
	uint64_t t0 = thread_ns();
	int r = gm_matcher_mask(m, mask);
	atomic_fetch_add(&mk->mask_ns, thread_ns() - t0);
	atomic_fetch_add(&mk->masks, 1);
	return r;
}

/* Claims and runs jobs until none is left. */
static void drain(struct masker *mk)
{
	for (;;) {
		int i = atomic_fetch_add(&mk->next, 1);
		if (i >= mk->n_jobs)
			return;
		struct mask_job *j = &mk->jobs[i];
		*j->result = masker_run(mk, j->m, j->mask);
		if (atomic_fetch_add(&mk->n_done, 1) + 1 == mk->n_jobs) {
			pthread_mutex_lock(&mk->lock);
			pthread_cond_broadcast(&mk->done);
			pthread_mutex_unlock(&mk->lock);
		}
	}
}

static void *worker(void *arg)
{
	struct masker *mk = arg;
	uint64_t seen = 0;
	pthread_mutex_lock(&mk->lock);
	for (;;) {
		while (!mk->stop && !(mk->open && mk->round != seen))
			pthread_cond_wait(&mk->go, &mk->lock);
		if (mk->stop)
			break;
		seen = mk->round;
		mk->busy++;
		pthread_mutex_unlock(&mk->lock);
		drain(mk);
		pthread_mutex_lock(&mk->lock);
		if (--mk->busy == 0)
			pthread_cond_broadcast(&mk->done);
	}
	pthread_mutex_unlock(&mk->lock);
	return NULL;
}

int masker_create(int n_threads, struct masker **out)
{
	struct masker *mk = calloc(1, sizeof *mk);
	if (!mk)
		return -ENOMEM;
	pthread_mutex_init(&mk->lock, NULL);
	pthread_cond_init(&mk->go, NULL);
	pthread_cond_init(&mk->done, NULL);
	if (n_threads > 0 && !(mk->th = calloc((size_t)n_threads, sizeof *mk->th))) {
		masker_destroy(mk);
		return -ENOMEM;
	}
	for (; mk->n_th < n_threads; mk->n_th++)
		if (pthread_create(&mk->th[mk->n_th], NULL, worker, mk)) {
			masker_destroy(mk);
			return -EAGAIN;
		}
	*out = mk;
	return 0;
}

void masker_destroy(struct masker *mk)
{
	if (!mk)
		return;
	pthread_mutex_lock(&mk->lock);
	mk->stop = true;
	pthread_cond_broadcast(&mk->go);
	pthread_mutex_unlock(&mk->lock);
	for (int i = 0; i < mk->n_th; i++)
		pthread_join(mk->th[i], NULL);
	pthread_mutex_destroy(&mk->lock);
	pthread_cond_destroy(&mk->go);
	pthread_cond_destroy(&mk->done);
	free(mk->th);
	free(mk->jobs);
	free(mk);
}

int masker_add(struct masker *mk, struct gm_matcher *m, uint32_t *mask, int *result)
{
	if (mk->n_jobs == mk->cap_jobs) {
		int cap = mk->cap_jobs ? 2 * mk->cap_jobs : 16;
		struct mask_job *n = realloc(mk->jobs, (size_t)cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		mk->jobs = n;
		mk->cap_jobs = cap;
	}
	mk->jobs[mk->n_jobs++] = (struct mask_job){ m, mask, result };
	return 0;
}

void masker_start(struct masker *mk)
{
	if (!mk->n_jobs || !mk->n_th)
		return;
	pthread_mutex_lock(&mk->lock);
	mk->round++;
	mk->open = true;
	pthread_cond_broadcast(&mk->go);
	pthread_mutex_unlock(&mk->lock);
}

void masker_finish(struct masker *mk)
{
	if (!mk->n_jobs)
		return;
	drain(mk);
	pthread_mutex_lock(&mk->lock);
	while (atomic_load(&mk->n_done) < mk->n_jobs || mk->busy)
		pthread_cond_wait(&mk->done, &mk->lock);
	mk->open = false; /* a worker waking late finds nothing to do */
	pthread_mutex_unlock(&mk->lock);
	mk->n_jobs = 0;
	atomic_store(&mk->next, 0);
	atomic_store(&mk->n_done, 0);
}

void masker_totals(struct masker *mk, uint64_t *masks, uint64_t *ns)
{
	*masks = atomic_load(&mk->masks);
	*ns = atomic_load(&mk->mask_ns);
}
