/* A fixed pool of worker threads behind kn_pool_run().  Workers wait on a
 * condition variable between jobs; the caller takes tasks too, so a pool of
 * n threads has n-1 workers.  Tasks are handed out by an atomic counter. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/error.h"
#include "kernels/pool.h"

#define KN_POOL_MAX 256
/* A worker that just finished a job, and a caller waiting for its
 * workers, poll before they sleep on the condition variable: a forward
 * pass of a small model is dozens of short jobs in a row, and a wake-up
 * through the kernel costs more than such a job.  After the first polls
 * each one yields the CPU, so a poller never holds a core that another
 * thread or process could use (pipeline hosts share one machine in the
 * testbed). */
#define KN_POOL_SPIN 100
#define KN_POOL_YIELDS 400

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

static struct {
	pthread_mutex_t lock;
	pthread_cond_t start;      /* a new job, or shutdown */
	pthread_cond_t done;       /* the last worker left the job */
	pthread_t tid[KN_POOL_MAX];
	int nthreads;              /* including the caller */
	int started;               /* kn_pool_init has run */
	int nworkers;              /* started worker threads */
	unsigned long generation;  /* bumped per job */
	atomic_ulong published;    /* generation, for workers that poll */
	int quit;
	/* the job in flight */
	kn_pool_fn fn;
	void *ctx;
	int ntasks;
	atomic_int next;
	atomic_int busy;           /* workers still inside the job */
	pthread_mutex_t run_lock;  /* one job at a time from outside */
} pool = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.start = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
	.run_lock = PTHREAD_MUTEX_INITIALIZER,
	.nthreads = 1,
};

static void
poll_pause(int i)
{
	if (i < KN_POOL_SPIN)
		cpu_relax();
	else
		sched_yield();
}

static _Thread_local int in_task;
static _Thread_local int self_thread;  /* 0 for the caller */

static void
pool_take(int thread)
{
	int t;

	while ((t = atomic_fetch_add(&pool.next, 1)) < pool.ntasks)
		pool.fn(pool.ctx, t, thread);
}

static void *
pool_worker(void *arg)
{
	int thread = (int)(intptr_t)arg;
	unsigned long seen = 0;
	char name[16];

	/* the compute pool's share of a host's CPU, apart in top -H */
	snprintf(name, sizeof(name), "kn-pool-%d", thread);
	(void)pthread_setname_np(pthread_self(), name);
	in_task = 1;
	self_thread = thread;
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		if (!pool.quit && pool.generation == seen) {
			int spin;

			pthread_mutex_unlock(&pool.lock);
			for (spin = 0; spin < KN_POOL_SPIN + KN_POOL_YIELDS &&
			    atomic_load_explicit(&pool.published,
			    memory_order_acquire) == seen; spin++)
				poll_pause(spin);
			pthread_mutex_lock(&pool.lock);
		}
		while (!pool.quit && pool.generation == seen)
			pthread_cond_wait(&pool.start, &pool.lock);
		if (pool.quit)
			break;
		seen = pool.generation;
		pthread_mutex_unlock(&pool.lock);
		pool_take(thread);
		pthread_mutex_lock(&pool.lock);
		if (--pool.busy == 0)
			pthread_cond_signal(&pool.done);
	}
	pthread_mutex_unlock(&pool.lock);
	return NULL;
}

void
kn_pool_shutdown(void)
{
	int i;

	pthread_mutex_lock(&pool.lock);
	pool.quit = 1;
	pthread_cond_broadcast(&pool.start);
	pthread_mutex_unlock(&pool.lock);
	for (i = 0; i < pool.nworkers; i++)
		pthread_join(pool.tid[i], NULL);
	pool.nworkers = 0;
	pool.nthreads = 1;
	pool.quit = 0;
}

static int
pool_default_threads(void)
{
	const char *env = getenv("KN_THREADS");
	long n;

	if (env != NULL && (n = strtol(env, NULL, 10)) > 0)
		return (int)n;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* A forked child has only the thread that forked: forget the workers so
 * that its first parallel loop starts a pool of its own. */
static void
pool_after_fork(void)
{
	pthread_mutex_init(&pool.lock, NULL);
	pthread_mutex_init(&pool.run_lock, NULL);
	pthread_cond_init(&pool.start, NULL);
	pthread_cond_init(&pool.done, NULL);
	pool.nworkers = 0;
	pool.nthreads = 1;
	pool.started = 0;
	pool.quit = 0;
	in_task = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void
pool_register_atfork(void)
{
	pthread_atfork(NULL, NULL, pool_after_fork);
}

int
kn_pool_init(int threads, char *err)
{
	int i, rc;

	pthread_once(&atfork_once, pool_register_atfork);

	if (threads <= 0)
		threads = pool_default_threads();
	if (threads > KN_POOL_MAX)
		threads = KN_POOL_MAX;
	if (pool.nworkers > 0 || pool.nthreads != 1)
		kn_pool_shutdown();
	for (i = 0; i < threads - 1; i++) {
		rc = pthread_create(&pool.tid[i], NULL, pool_worker,
		    (void *)(intptr_t)(i + 1));
		if (rc != 0) {
			pool.nworkers = i;
			kn_pool_shutdown();
			return kn_error(err, KN_ENOMEM,
			    "cannot start pool thread: %s", strerror(rc));
		}
		pool.nworkers = i + 1;
	}
	pool.nthreads = threads;
	pool.started = 1;
	return KN_OK;
}

int
kn_pool_ensure(void)
{
	if (pool.started)
		return KN_OK;
	if (kn_pool_init(0, NULL) != KN_OK)
		return kn_pool_init(1, NULL);
	return KN_OK;
}

int
kn_pool_threads(void)
{
	return pool.nthreads;
}

void
kn_pool_run(int ntasks, kn_pool_fn fn, void *ctx)
{
	int t;

	if (ntasks <= 0)
		return;
	if (!pool.started)
		kn_pool_ensure();
	if (in_task || pool.nworkers == 0 || ntasks == 1) {
		for (t = 0; t < ntasks; t++)
			fn(ctx, t, self_thread);
		return;
	}
	pthread_mutex_lock(&pool.run_lock);
	pthread_mutex_lock(&pool.lock);
	pool.fn = fn;
	pool.ctx = ctx;
	pool.ntasks = ntasks;
	atomic_store(&pool.next, 0);
	atomic_store(&pool.busy, pool.nworkers);
	pool.generation++;
	atomic_store_explicit(&pool.published, pool.generation,
	    memory_order_release);
	pthread_cond_broadcast(&pool.start);
	pthread_mutex_unlock(&pool.lock);

	in_task = 1;
	pool_take(0);
	in_task = 0;

	for (t = 0; t < KN_POOL_SPIN + KN_POOL_YIELDS &&
	    atomic_load(&pool.busy) > 0; t++)
		poll_pause(t);
	pthread_mutex_lock(&pool.lock);
	while (pool.busy > 0)
		pthread_cond_wait(&pool.done, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
	pthread_mutex_unlock(&pool.run_lock);
}
