/* A fixed pool of worker threads behind kn_pool_run().  Workers wait on a
 * condition variable between jobs; the caller takes tasks too, so a pool of
 * n threads has n-1 workers.  Tasks are handed out by an atomic counter
 * tagged with the job's generation, and the caller waits only for the
 * tasks that were taken, never for a worker that has not woken yet: on a
 * machine whose cores are busy with other processes a worker may wait a
 * whole time slice (milliseconds) to run, and a forward pass of a small
 * model is dozens of jobs, so waiting for every worker to check in made
 * one pass ten to twenty times slower (a pipeline request seconds
 * instead of tens of milliseconds).  A late worker finds the tasks gone,
 * or a newer job, and takes nothing of the old one. */
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
	pthread_cond_t up;         /* a worker reached its loop */
	int ready;                 /* workers that reached it */
	pthread_t tid[KN_POOL_MAX];
	int nthreads;              /* including the caller */
	int started;               /* kn_pool_init has run */
	int nworkers;              /* started worker threads */
	unsigned long generation;  /* bumped per job */
	atomic_ulong published;    /* generation, for workers that poll */
	int quit;
	/* the job in flight, under lock: fn, ctx and ntasks */
	kn_pool_fn fn;
	void *ctx;
	int ntasks;
	/* (generation & 0xffffffff) << 32 | the next task to take: a task is
	 * taken only while the generation is still the taker's */
	atomic_ullong claim;
	atomic_int finished;       /* tasks of this job done */
	pthread_mutex_t run_lock;  /* one job at a time from outside */
} pool = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.start = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
	.up = PTHREAD_COND_INITIALIZER,
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

static unsigned long long
claim_of(unsigned long generation, int task)
{
	return (unsigned long long)(generation & 0xffffffffUL) << 32 |
	    (unsigned)task;
}

/* One job as the thread saw it when it began: its tasks are claimed
 * against its generation. */
struct pool_job {
	unsigned long generation;
	kn_pool_fn fn;
	void *ctx;
	int ntasks;
};

/* Takes tasks of job until none is left or a newer job began; returns
 * whether this thread finished the job's last task. */
static int
pool_take(const struct pool_job *job, int thread)
{
	unsigned long long tag = claim_of(job->generation, 0), v;
	int last = 0;

	v = atomic_load(&pool.claim);
	for (;;) {
		int t = (int)(v & 0xffffffffULL);

		if ((v & ~0xffffffffULL) != tag || t >= job->ntasks)
			return last;
		if (!atomic_compare_exchange_weak(&pool.claim, &v, v + 1))
			continue;
		job->fn(job->ctx, t, thread);
		last = atomic_fetch_add(&pool.finished, 1) + 1 == job->ntasks;
		v = atomic_load(&pool.claim);
	}
}

static void *
pool_worker(void *arg)
{
	int thread = (int)(intptr_t)arg, last;
	unsigned long seen = 0;
	struct pool_job job;
	char name[16];

	/* the compute pool's share of a host's CPU, apart in top -H */
	snprintf(name, sizeof(name), "kn-pool-%d", thread);
	(void)pthread_setname_np(pthread_self(), name);
	in_task = 1;
	self_thread = thread;
	pthread_mutex_lock(&pool.lock);
	pool.ready++;
	pthread_cond_signal(&pool.up);
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
		seen = job.generation = pool.generation;
		job.fn = pool.fn;
		job.ctx = pool.ctx;
		job.ntasks = pool.ntasks;
		pthread_mutex_unlock(&pool.lock);
		last = pool_take(&job, thread);
		pthread_mutex_lock(&pool.lock);
		/* under the lock, so the caller cannot miss it between its
		 * check and its wait */
		if (last)
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
	pool.ready = 0;
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
	pthread_cond_init(&pool.up, NULL);
	pool.nworkers = 0;
	pool.ready = 0;
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
	/* Back only when every worker waits in its loop: a thread still
	 * starting may hold a lock of the C library's (or a sanitizer's
	 * allocator), and a fork() then, such as a test runner's for each
	 * test, would leave the child that lock held for ever. */
	pthread_mutex_lock(&pool.lock);
	while (pool.ready < pool.nworkers)
		pthread_cond_wait(&pool.up, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
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
	struct pool_job job;
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
	atomic_store(&pool.finished, 0);
	pool.generation++;
	job = (struct pool_job){ pool.generation, fn, ctx, ntasks };
	atomic_store(&pool.claim, claim_of(pool.generation, 0));
	atomic_store_explicit(&pool.published, pool.generation,
	    memory_order_release);
	pthread_cond_broadcast(&pool.start);
	pthread_mutex_unlock(&pool.lock);

	in_task = 1;
	pool_take(&job, 0);
	in_task = 0;

	/* every task is taken now; wait for those still running */
	for (t = 0; t < KN_POOL_SPIN + KN_POOL_YIELDS &&
	    atomic_load(&pool.finished) < ntasks; t++)
		poll_pause(t);
	pthread_mutex_lock(&pool.lock);
	while (atomic_load(&pool.finished) < ntasks)
		pthread_cond_wait(&pool.done, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
	pthread_mutex_unlock(&pool.run_lock);
}
