/* pool.c: see pool.h. */
#include "pool.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

int ms_pool_default_threads(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return n;
	}
	return 1;
}

static void run_tasks(struct ms_pool *p, int worker)
{
	for (;;) {
		int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
		if (t >= p->n_tasks)
			break;
		p->fn(p->ctx, t, worker);
	}
}

struct helper_arg {
	struct ms_pool *pool;
	int worker;
};

/* ~50-80 us of polling (a pause is 25-40 ns on Zen 4): longer than the
 * gaps inside a forward pass, short enough not to starve other processes. */
#define SPIN_ITERS 2000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

void ms_pool_wait_ge(atomic_int *v, int want)
{
	for (int i = 0; atomic_load_explicit(v, memory_order_acquire) < want; i++) {
		if (i < SPIN_ITERS)
			cpu_relax();
		else
			sched_yield();
	}
}

static void *helper_main(void *argp)
{
	struct helper_arg a = *(struct helper_arg *)argp;
	free(argp);
	struct ms_pool *p = a.pool;
	unsigned long seen = 0;
	for (;;) {
		unsigned long g = seen;
		for (int i = 0; i < SPIN_ITERS && !atomic_load(&p->stop); i++) {
			if ((g = atomic_load(&p->generation)) != seen)
				break;
			cpu_relax();
		}
		if (g == seen) {
			/* Sleep. sleepers goes up before generation is re-read, and
			 * ms_pool_run bumps generation before it reads sleepers (both
			 * sequentially consistent), so one of the two sees the other. */
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (!atomic_load(&p->stop) && (g = atomic_load(&p->generation)) == seen)
				pthread_cond_wait(&p->cv_start, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->stop))
			break;
		seen = g;
		run_tasks(p, a.worker);
		if (atomic_fetch_sub(&p->n_busy, 1) == 1 && atomic_load(&p->caller_asleep)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->cv_done);
			pthread_mutex_unlock(&p->mu);
		}
	}
	return NULL;
}

/* The k-th CPU of the affinity mask, or -1. */
static int nth_cpu(const cpu_set_t *set, int k)
{
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set) && k-- == 0)
			return c;
	return -1;
}

int ms_pool_init(struct ms_pool *p, int n_threads, bool pin, struct ms_err *err)
{
	memset(p, 0, sizeof(*p));
	if (n_threads <= 0)
		n_threads = ms_pool_default_threads();
	if (n_threads > 1024)
		return ms_err_set(err, -EINVAL, "threads: %d is more than 1024", n_threads);
	p->n_threads = 1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_start, NULL);
	pthread_cond_init(&p->cv_done, NULL);
	if (n_threads == 1)
		return 0;
	p->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
	if (!p->threads)
		return ms_err_set(err, -ENOMEM, "thread pool: out of memory");
	for (int i = 1; i < n_threads; i++) {
		struct helper_arg *a = malloc(sizeof(*a));
		if (a)
			*a = (struct helper_arg){p, i};
		int rc = a ? pthread_create(&p->threads[i - 1], NULL, helper_main, a) : ENOMEM;
		if (rc) {
			free(a);
			ms_pool_free(p);
			return ms_err_set(err, -rc, "thread pool: cannot start thread %d", i);
		}
		p->n_threads++;
		cpu_set_t mask, one;
		int cpu;
		if (pin && sched_getaffinity(0, sizeof(mask), &mask) == 0 &&
		    (cpu = nth_cpu(&mask, i % CPU_COUNT(&mask))) >= 0) {
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			/* best effort: a container may forbid it, and that is fine */
			pthread_setaffinity_np(p->threads[i - 1], sizeof(one), &one);
		}
	}
	return 0;
}

void ms_pool_run(struct ms_pool *p, int n_tasks, ms_pool_fn fn, void *ctx)
{
	if (n_tasks <= 0)
		return;
	if (p->n_threads == 1 || n_tasks == 1) {
		for (int t = 0; t < n_tasks; t++)
			fn(ctx, t, 0);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	p->n_tasks = n_tasks;
	atomic_store(&p->next, 0);
	atomic_store(&p->n_busy, p->n_threads - 1);
	atomic_fetch_add(&p->generation, 1); /* publishes the job (seq_cst) */
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv_start);
		pthread_mutex_unlock(&p->mu);
	}
	run_tasks(p, 0);
	for (int i = 0; i < SPIN_ITERS && atomic_load(&p->n_busy) > 0; i++)
		cpu_relax();
	if (atomic_load(&p->n_busy) > 0) {
		pthread_mutex_lock(&p->mu);
		atomic_store(&p->caller_asleep, true);
		while (atomic_load(&p->n_busy) > 0)
			pthread_cond_wait(&p->cv_done, &p->mu);
		atomic_store(&p->caller_asleep, false);
		pthread_mutex_unlock(&p->mu);
	}
}

int64_t ms_split_per(int64_t total, int64_t tasks, int64_t align)
{
	int64_t per = (total + tasks - 1) / tasks;
	if (per < align)
		per = align;
	return (per + align - 1) / align * align;
}

void ms_pool_free(struct ms_pool *p)
{
	if (!p || !p->n_threads)
		return;
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->stop, true);
	pthread_cond_broadcast(&p->cv_start);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n_threads - 1; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv_start);
	pthread_cond_destroy(&p->cv_done);
	memset(p, 0, sizeof(*p));
}
