/* The machine's memory bandwidth, STREAM-style, as the ceiling of a pass
 * over a model's weights: membw-bench [threads] [MiB per array] (defaults:
 * all cores, 512).  The triad a = b + s c over three float arrays far
 * larger than the caches, split over the project's thread pool as the
 * inference kernels are; GB/s counts the bytes read and written (12 per
 * element, the write allocate not counted, as STREAM does), best of 10. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/clock.h"
#include "kernels/pool.h"

#define MB_TASKS 64
#define MB_ROUNDS 10

struct triad {
	float *a;
	const float *b, *c;
	size_t n;
	float s;
};

static void
triad_task(void *ctx, int task, int thread)
{
	struct triad *t = ctx;
	size_t lo = t->n * (size_t)task / MB_TASKS;
	size_t hi = t->n * (size_t)(task + 1) / MB_TASKS, i;

	(void)thread;
	for (i = lo; i < hi; i++)
		t->a[i] = t->b[i] + t->s * t->c[i];
}

static void
fill_task(void *ctx, int task, int thread)
{
	struct triad *t = ctx;
	size_t lo = t->n * (size_t)task / MB_TASKS;
	size_t hi = t->n * (size_t)(task + 1) / MB_TASKS, i;

	(void)thread;
	/* each thread touches its own pages first, as the triad will */
	for (i = lo; i < hi; i++) {
		t->a[i] = 0.0f;
		((float *)t->b)[i] = 1.0f;
		((float *)t->c)[i] = 2.0f;
	}
}

int
main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 0, r;
	long mib = argc > 2 ? atol(argv[2]) : 512;
	char err[256];
	struct triad t;
	double best = 0.0, check;

	if (mib < 1 || mib > 16384 || threads < 0) {
		fprintf(stderr, "usage: membw-bench [threads] [MiB per array, "
		    "1..16384]\n");
		return 2;
	}
	if (kn_pool_init(threads, err) != 0) {
		fprintf(stderr, "membw-bench: %s\n", err);
		return 1;
	}
	t.n = (size_t)mib * 1024 * 1024 / sizeof(float);
	t.s = 3.0f;
	t.a = malloc(t.n * sizeof(float));
	t.b = malloc(t.n * sizeof(float));
	t.c = malloc(t.n * sizeof(float));
	if (t.a == NULL || t.b == NULL || t.c == NULL) {
		fprintf(stderr, "membw-bench: out of memory for 3 x %ld MiB\n",
		    mib);
		return 1;
	}
	kn_pool_run(MB_TASKS, fill_task, &t);
	for (r = 0; r < MB_ROUNDS; r++) {
		double t0 = kn_now(), dt;

		kn_pool_run(MB_TASKS, triad_task, &t);
		dt = kn_now() - t0;
		if (dt > 0 && 12.0 * (double)t.n / dt > best)
			best = 12.0 * (double)t.n / dt;
	}
	/* every element is 1 + 3 * 2: a check that the loop ran */
	check = t.a[t.n / 2];
	printf("triad_GBps=%.2f threads=%d array_MiB=%ld check=%g\n",
	    best / 1e9, kn_pool_threads(), mib, check);
	free(t.a);
	free((void *)t.b);
	free((void *)t.c);
	kn_pool_shutdown();
	return check == 7.0 ? 0 : 1;
}
