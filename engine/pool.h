/*
 * pool.h: the worker pool every parallel loop in moeserve runs on.
 *
 * One pool of persistent pthreads; the calling thread works too. A job is
 * n_tasks independent tasks claimed through an atomic counter, so uneven
 * tasks balance themselves. Each output element must be written by exactly
 * one task: then results do not depend on the number of threads at all.
 */
#ifndef MS_POOL_H
#define MS_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ms-error.h"

/* task: index in [0, n_tasks); worker: in [0, n_threads), for per-thread
 * scratch buffers. */
typedef void (*ms_pool_fn)(void *ctx, int task, int worker);

struct ms_pool {
	int n_threads;          /* including the caller */
	pthread_t *threads;     /* n_threads - 1 helpers */
	pthread_mutex_t mu;
	pthread_cond_t cv_start, cv_done;
	/* Jobs come in bursts (a decode step runs ~10 per layer, microseconds
	 * apart): a helper spins on generation for a short while before it
	 * sleeps on cv_start, and the caller spins on n_busy before cv_done, so
	 * a job costs no futex round trip while the pool is hot. */
	atomic_ulong generation;   /* bumped per job; helpers wait for a change */
	atomic_int n_busy;         /* helpers still inside the current job */
	atomic_int sleepers;       /* helpers asleep (or going to sleep) on cv_start */
	atomic_bool caller_asleep; /* the caller waits on cv_done */
	atomic_bool stop;
	/* current job */
	ms_pool_fn fn;
	void *ctx;
	int n_tasks;
	atomic_int next;
};

/* n_threads <= 0 means "one per CPU this process may run on". With pin,
 * helper thread i runs only on the i-th CPU of the process's affinity mask
 * (i = 1 .. n_threads-1; the calling thread, which works too, keeps CPU 0 of
 * the mask to itself), so threads neither migrate nor share a core. */
int ms_pool_init(struct ms_pool *pool, int n_threads, bool pin, struct ms_err *err);

/* Run fn over n_tasks tasks and return when all are done. Not reentrant:
 * one job at a time per pool. Tasks are claimed one at a time in index
 * order, so a task may wait for one with a smaller index: that one has
 * already been claimed by a running thread (ms_pool_wait_ge). */
void ms_pool_run(struct ms_pool *pool, int n_tasks, ms_pool_fn fn, void *ctx);

/* Wait until *v >= want (acquire), spinning, then yielding the CPU (a
 * thread that is not running cannot finish what we wait for). */
void ms_pool_wait_ge(atomic_int *v, int want);

void ms_pool_free(struct ms_pool *pool);

/* Items per task for about `tasks` tasks over `total`: a multiple of align,
 * at least align. */
int64_t ms_split_per(int64_t total, int64_t tasks, int64_t align);

/* Number of CPUs in this process's affinity mask. */
int ms_pool_default_threads(void);

#endif
