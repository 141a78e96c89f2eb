/* The thread pool: every task runs once, nested runs stay inline, and the
 * pool can be resized. */
#include "config.h"

#include <check.h>
#include <stdatomic.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pool.h"
#include "tests/testutil.h"

struct count_job {
	atomic_int hits[1000];
	atomic_int max_thread;
};

static void
count_task(void *ctx, int task, int thread)
{
	struct count_job *j = ctx;
	int seen = atomic_load(&j->max_thread);

	atomic_fetch_add(&j->hits[task], 1);
	while (thread > seen &&
	    !atomic_compare_exchange_weak(&j->max_thread, &seen, thread))
		;
}

static void
nested_task(void *ctx, int task, int thread)
{
	struct count_job *j = ctx;

	/* inline inside a task: the inner tasks see this thread's index */
	kn_pool_run(10, count_task, j);
	(void)task;
	(void)thread;
}

START_TEST(test_every_task_once)
{
	static struct count_job j;
	int threads, i, round;

	for (threads = 1; threads <= 4; threads++) {
		ck_assert_int_eq(kn_pool_init(threads, NULL), 0);
		ck_assert_int_eq(kn_pool_threads(), threads);
		for (round = 0; round < 50; round++) {
			for (i = 0; i < 1000; i++)
				atomic_store(&j.hits[i], 0);
			atomic_store(&j.max_thread, 0);
			kn_pool_run(1000, count_task, &j);
			for (i = 0; i < 1000; i++)
				ck_assert_int_eq(atomic_load(&j.hits[i]), 1);
			ck_assert_int_lt(atomic_load(&j.max_thread), threads);
		}
	}
	kn_pool_shutdown();
}
END_TEST

START_TEST(test_nested)
{
	static struct count_job j;
	int i;

	ck_assert_int_eq(kn_pool_init(2, NULL), 0);
	for (i = 0; i < 10; i++)
		atomic_store(&j.hits[i], 0);
	kn_pool_run(7, nested_task, &j);
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(atomic_load(&j.hits[i]), 7);
	kn_pool_shutdown();
}
END_TEST

/* Short jobs back to back, as a forward pass makes them: each task once,
 * and none of a job after kn_pool_run returned (a worker that woke late
 * must not take a task of a job the caller finished alone, nor of the
 * next one under the old one's generation). */
START_TEST(test_short_jobs_end_with_the_run)
{
	static struct count_job j;
	int threads, round, i, n;

	for (threads = 2; threads <= 4; threads++) {
		ck_assert_int_eq(kn_pool_init(threads, NULL), 0);
		for (round = 0; round < 3000; round++) {
			n = 1 + round % 7;
			for (i = 0; i < n; i++)
				atomic_store(&j.hits[i], 0);
			kn_pool_run(n, count_task, &j);
			for (i = 0; i < n; i++)
				ck_assert_int_eq(atomic_load(&j.hits[i]), 1);
		}
		/* whatever ran late would have left a 2 behind */
		for (i = 0; i < 7; i++)
			ck_assert_int_le(atomic_load(&j.hits[i]), 1);
	}
	kn_pool_shutdown();
}
END_TEST

/* The worker threads named kn-pool-N in this process now, read at once
 * (no command in between, which would give late threads time). */
static int
named_workers(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], name[32];
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
		    e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fgets(name, sizeof(name), f) != NULL &&
		    strncmp(name, "kn-pool-", 8) == 0)
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* kn_pool_init returns only when every worker has started (named, in its
 * loop): a fork() right after it, as a test runner's, must not find a
 * thread still starting, which may hold a lock of the C library's or of a
 * sanitizer's allocator for ever in the child.  A thread starts after
 * pthread_create returns, so without the wait the names lag behind. */
START_TEST(test_init_returns_with_workers_started)
{
	int round, threads;

	for (round = 0; round < 40; round++) {
		threads = 2 + round % 3;
		ck_assert_int_eq(kn_pool_init(threads, NULL), 0);
		ck_assert_int_eq(named_workers(), threads - 1);
		kn_pool_shutdown();
		ck_assert_int_eq(named_workers(), 0);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("pool");

	/* 200 runs of 1000 tasks on up to 4 threads: on 2 loaded cores under
	 * the sanitizers that took longer than check's default 4 s */
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_every_task_once);
	tcase_add_test(tc, test_nested);
	tcase_add_test(tc, test_short_jobs_end_with_the_run);
	tcase_add_test(tc, test_init_returns_with_workers_started);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
