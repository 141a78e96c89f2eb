/* Averaging updates and the outer step, on host memory over the CPU pool.
 * Plain loops, deliberately without kernels/cpu's per-ISA clones: one
 * instruction sequence on every x86-64 host, and no FMA to contract a
 * product into a sum, so every replica computes the same bits.  (GCC does
 * not contract under -std=c11; the pragma covers clang.) */
#include "config.h"

#include <limits.h>

#include "kernels/average.h"
#include "kernels/pool.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Elements per pool task, and per pass of the sum over a stack tile: the
 * tile lets out alias an update, since a tile of every input is read
 * before any of out is written.  Neither affects the results. */
#define AVG_CHUNK 16384
#define AVG_TILE 512

struct avg_job {
	float *out;
	const float *const *updates;
	const float *a, *b;
	int count;
	float scale;            /* count, or outer_lr */
	size_t n, chunk;
};

static size_t
chunk_size(size_t n)
{
	size_t per_int = n / INT_MAX + 1;     /* tasks are counted in an int */

	return per_int > AVG_CHUNK ? per_int : AVG_CHUNK;
}

static int
ntasks(const struct avg_job *j)
{
	return (int)((j->n + j->chunk - 1) / j->chunk);
}

static void
task_range(const struct avg_job *j, int task, size_t *lo, size_t *hi)
{
	*lo = (size_t)task * j->chunk;
	*hi = j->n - *lo < j->chunk ? j->n : *lo + j->chunk;
}

static void
average_task(void *ctx, int task, int thread)
{
	const struct avg_job *j = ctx;
	float acc[AVG_TILE];
	size_t lo, hi, t, m, i;
	int k;

	(void)thread;
	task_range(j, task, &lo, &hi);
	for (t = lo; t < hi; t += m) {
		const float *u = j->updates[0] + t;

		m = hi - t < AVG_TILE ? hi - t : AVG_TILE;
		for (i = 0; i < m; i++)
			acc[i] = u[i];
		for (k = 1; k < j->count; k++) {
			u = j->updates[k] + t;
			for (i = 0; i < m; i++)
				acc[i] += u[i];
		}
		for (i = 0; i < m; i++)
			j->out[t + i] = acc[i] / j->scale;
	}
}

void
kn_average(float *out, const float *const *updates, int count, size_t n)
{
	struct avg_job j = { .out = out, .updates = updates, .count = count,
	    .scale = (float)count, .n = n, .chunk = chunk_size(n) };

	if (count < 1 || n == 0)
		return;
	kn_pool_run(ntasks(&j), average_task, &j);
}

static void
outer_step_task(void *ctx, int task, int thread)
{
	const struct avg_job *j = ctx;
	float *p = j->out;
	const float *g = j->a;
	size_t lo, hi, i;

	(void)thread;
	task_range(j, task, &lo, &hi);
	for (i = lo; i < hi; i++) {
		float step = j->scale * g[i];

		p[i] = p[i] - step;
	}
}

void
kn_outer_step(float *params, const float *avg_update, float outer_lr,
    size_t n)
{
	struct avg_job j = { .out = params, .a = avg_update,
	    .scale = outer_lr, .n = n, .chunk = chunk_size(n) };

	if (n == 0)
		return;
	kn_pool_run(ntasks(&j), outer_step_task, &j);
}

static void
rebase_task(void *ctx, int task, int thread)
{
	const struct avg_job *j = ctx;
	size_t lo, hi, i;

	(void)thread;
	task_range(j, task, &lo, &hi);
	for (i = lo; i < hi; i++) {
		float moved = j->a[i] - j->b[i];

		j->out[i] = j->out[i] + moved;
	}
}

void
kn_outer_rebase(float *local, const float *consensus, const float *sent,
    size_t n)
{
	struct avg_job j = { .out = local, .a = consensus, .b = sent, .n = n,
	    .chunk = chunk_size(n) };

	if (n == 0)
		return;
	kn_pool_run(ntasks(&j), rebase_task, &j);
}

static void
delta_task(void *ctx, int task, int thread)
{
	const struct avg_job *j = ctx;
	size_t lo, hi, i;

	(void)thread;
	task_range(j, task, &lo, &hi);
	for (i = lo; i < hi; i++)
		j->out[i] = j->a[i] - j->b[i];
}

void
kn_update_delta(float *delta, const float *start, const float *local,
    size_t n)
{
	struct avg_job j = { .out = delta, .a = start, .b = local, .n = n,
	    .chunk = chunk_size(n) };

	if (n == 0)
		return;
	kn_pool_run(ntasks(&j), delta_task, &j);
}
