/* The process's one thread budget.  Every parallel loop of the CPU backend,
 * our GEMM included, runs on this pool, and OpenBLAS is held to one thread
 * per call, so the two never oversubscribe the cores (four threads on two
 * cores halved PyTorch's speed on our machines). */
#ifndef KN_POOL_H
#define KN_POOL_H

/* task runs once for each index in [0, ntasks); thread is the worker's
 * index in [0, kn_pool_threads()), for per-thread scratch. */
typedef void (*kn_pool_fn)(void *ctx, int task, int thread);

/* Starts the pool with threads workers (the caller counts as one);
 * threads <= 0 means the number of online cores, or KN_THREADS from the
 * environment.  Calling it again resizes the pool.  Returns 0 or KN_E*. */
int kn_pool_init(int threads, char *err);
int kn_pool_threads(void);
/* Starts the default pool unless kn_pool_init() already ran. */
int kn_pool_ensure(void);

/* Runs every task and returns when all are done.  Called from inside a
 * task, it runs the tasks inline on that thread.  Results must not depend
 * on which thread runs a task: that keeps them bitwise the same whatever
 * the thread count. */
void kn_pool_run(int ntasks, kn_pool_fn fn, void *ctx);

void kn_pool_shutdown(void);

#endif
