/* The robust combination of updates (robust.h): clipping to a multiple
 * of the lower median norm, then the mean or CenteredClip.  Plain loops
 * on the CPU pool, like average.c: every element and every norm is a
 * fixed sequence of IEEE operations in double, rounded to float once,
 * so every replica computes the same bits.  Norms are summed over fixed
 * chunks, whatever the thread count, then the chunks in order. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/robust.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Elements per pool task; the results do not depend on it, but the
 * norms' summation order does, so it never depends on the threads. */
#define ROB_CHUNK 16384

struct rob_job {
	float *out;
	const float *const *u;
	const double *scale;    /* each update's clipping factor */
	double weight[KN_ROBUST_MAX];   /* CenteredClip: each distance's
	                                 * factor */
	const float *a, *b;     /* a norm's input: |a * s - b| (b: NULL) */
	double s;
	double *partial;        /* a norm's sum per task */
	int count;
	size_t n, chunk;
};

static size_t
chunk_size(size_t n)
{
	size_t per_int = n / INT_MAX + 1;     /* tasks are counted in an int */

	return per_int > ROB_CHUNK ? per_int : ROB_CHUNK;
}

static int
ntasks(const struct rob_job *j)
{
	return (int)((j->n + j->chunk - 1) / j->chunk);
}

static void
task_range(const struct rob_job *j, int task, size_t *lo, size_t *hi)
{
	*lo = (size_t)task * j->chunk;
	*hi = j->n - *lo < j->chunk ? j->n : *lo + j->chunk;
}

/* Update i's element e, clipped: the product rounded to float, as the
 * clipped update would be stored. */
static double
clipped(const struct rob_job *j, int i, size_t e)
{
	return (double)(float)((double)j->u[i][e] * j->scale[i]);
}

/* One element of a norm's input: a[e] * s rounded to float, less b[e]. */
#define SQ_TERM(j, e) ((double)(float)((double)(j)->a[e] * (j)->s) - \
    ((j)->b != NULL ? (double)(j)->b[e] : 0.0))

static void
sq_task(void *ctx, int task, int thread)
{
	struct rob_job *j = ctx;
	/* four sums, elements e mod 4, added in a fixed order at the end:
	 * the same bits whatever the threads, and four independent
	 * additions in flight instead of one chain */
	double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, x0, x1, x2, x3;
	size_t lo, hi, e;

	(void)thread;
	task_range(j, task, &lo, &hi);
	for (e = lo; e + 4 <= hi; e += 4) {
		x0 = SQ_TERM(j, e);
		x1 = SQ_TERM(j, e + 1);
		x2 = SQ_TERM(j, e + 2);
		x3 = SQ_TERM(j, e + 3);
		s0 += x0 * x0;
		s1 += x1 * x1;
		s2 += x2 * x2;
		s3 += x3 * x3;
	}
	for (; e < hi; e++) {
		x0 = SQ_TERM(j, e);
		s0 += x0 * x0;
	}
	j->partial[task] = (s0 + s1) + (s2 + s3);
}
#undef SQ_TERM

/* |a * s - b| (b may be NULL), in double, in a fixed order; -1 when out
 * of memory. */
static double
norm_of(const float *a, double s, const float *b, size_t n)
{
	struct rob_job j = { .a = a, .b = b, .s = s, .n = n,
	    .chunk = chunk_size(n) };
	double sum = 0.0;
	int t, tasks;

	if (n == 0)
		return 0.0;
	tasks = ntasks(&j);
	if ((j.partial = malloc((size_t)tasks * sizeof(double))) == NULL)
		return -1.0;
	kn_pool_run(tasks, sq_task, &j);
	for (t = 0; t < tasks; t++)
		sum += j.partial[t];
	free(j.partial);
	return sqrt(sum);
}

double
kn_robust_norm(const float *x, size_t n)
{
	return norm_of(x, 1.0, NULL, n);
}

/* The lower median of v (count values; v is left as it was). */
static double
lower_median(const double *v, int count)
{
	double s[KN_ROBUST_MAX], x;
	int i, k;

	for (i = 0; i < count; i++) {
		x = v[i];
		for (k = i; k > 0 && s[k - 1] > x; k--)
			s[k] = s[k - 1];
		s[k] = x;
	}
	return s[(count - 1) / 2];
}

/* Whether no update of the job is clipped: then clipped(j, i, e) is
 * (double)u[i][e] exactly, and the loops below can skip the product
 * and its rounding (the same bits, a loop the compiler vectorises). */
static int
unclipped(const struct rob_job *j)
{
	int i;

	for (i = 0; i < j->count; i++)
		if (j->scale[i] != 1.0)
			return 0;
	return 1;
}

static void
mean_task(void *ctx, int task, int thread)
{
	const struct rob_job *j = ctx;
	size_t lo, hi, e;
	double sum;
	int i;

	(void)thread;
	task_range(j, task, &lo, &hi);
	if (j->count == 2 && unclipped(j)) {
		const float *a = j->u[0], *b = j->u[1];

		/* 0.0 + a as the general loop's first sum: -0.0 becomes +0.0
		 * there too */
		for (e = lo; e < hi; e++)
			j->out[e] = (float)(((0.0 + (double)a[e]) + (double)b[e]) /
			    2.0);
		return;
	}
	for (e = lo; e < hi; e++) {
		sum = 0.0;
		for (i = 0; i < j->count; i++)
			sum += clipped(j, i, e);
		j->out[e] = (float)(sum / j->count);
	}
}

/* The coordinate-wise median of the clipped updates (the mean of the
 * two middle values for an even count). */
static void
median_task(void *ctx, int task, int thread)
{
	const struct rob_job *j = ctx;
	double s[KN_ROBUST_MAX], x;
	size_t lo, hi, e;
	int i, k, m = j->count;

	(void)thread;
	task_range(j, task, &lo, &hi);
	if (m == 3 && unclipped(j)) {
		const float *a = j->u[0], *b = j->u[1], *c = j->u[2];
		double x0, x1, x2, l, h;

		/* the insertion below, written out for three: the same
		 * comparisons, so the same value, ties and zeros included */
		for (e = lo; e < hi; e++) {
			x0 = (double)a[e];
			x1 = (double)b[e];
			x2 = (double)c[e];
			l = x0 > x1 ? x1 : x0;
			h = x0 > x1 ? x0 : x1;
			j->out[e] = (float)(h > x2 ? (l > x2 ? l : x2) : h);
		}
		return;
	}
	for (e = lo; e < hi; e++) {
		for (i = 0; i < m; i++) {
			x = clipped(j, i, e);
			for (k = i; k > 0 && s[k - 1] > x; k--)
				s[k] = s[k - 1];
			s[k] = x;
		}
		j->out[e] = (float)(m % 2 ? s[m / 2] :
		    (s[m / 2 - 1] + s[m / 2]) / 2.0);
	}
}

/* One CenteredClip iteration: v += mean over i of w_i (x_i - v). */
static void
centered_task(void *ctx, int task, int thread)
{
	const struct rob_job *j = ctx;
	size_t lo, hi, e;
	double v, sum;
	int i;

	(void)thread;
	task_range(j, task, &lo, &hi);
	if (j->count == 3 && unclipped(j)) {
		const float *a = j->u[0], *b = j->u[1], *c = j->u[2];
		double w0 = j->weight[0], w1 = j->weight[1], w2 = j->weight[2];

		/* the general loop's sums in its order, written out */
		for (e = lo; e < hi; e++) {
			v = (double)j->out[e];
			sum = 0.0 + w0 * ((double)a[e] - v);
			sum += w1 * ((double)b[e] - v);
			sum += w2 * ((double)c[e] - v);
			j->out[e] = (float)(v + sum / 3);
		}
		return;
	}
	for (e = lo; e < hi; e++) {
		v = (double)j->out[e];
		sum = 0.0;
		for (i = 0; i < j->count; i++)
			sum += j->weight[i] * (clipped(j, i, e) - v);
		j->out[e] = (float)(v + sum / j->count);
	}
}

/* CenteredClip from the coordinate-wise median, in out. */
static int
centered_clip(struct rob_job *j, kn_robust_info *info, char *err)
{
	double dist[KN_ROBUST_MAX], tau;
	int it, i;

	kn_pool_run(ntasks(j), median_task, j);
	for (it = 0; it < KN_ROBUST_ITERS; it++) {
		for (i = 0; i < j->count; i++)
			if ((dist[i] = norm_of(j->u[i], j->scale[i], j->out,
			    j->n)) < 0)
				return kn_error(err, KN_ENOMEM, "out of memory");
		tau = KN_ROBUST_TAU * lower_median(dist, j->count);
		for (i = 0; i < j->count; i++) {
			j->weight[i] = dist[i] > tau ? tau / dist[i] : 1.0;
			info->cc_clipped += dist[i] > tau;
		}
		kn_pool_run(ntasks(j), centered_task, j);
	}
	return KN_OK;
}

int
kn_robust_combine(float *out, const float *const *updates, int count,
    size_t n, kn_robust_info *info, char *err)
{
	return kn_robust_combine_normed(out, updates, NULL, count, n, info,
	    err);
}

int
kn_robust_combine_normed(float *out, const float *const *updates,
    const double *norms, int count, size_t n, kn_robust_info *info,
    char *err)
{
	double norm[KN_ROBUST_MAX], scale[KN_ROBUST_MAX];
	struct rob_job j = { .out = out, .u = updates, .scale = scale,
	    .count = count, .n = n, .chunk = chunk_size(n) };
	kn_robust_info own;
	int i;

	if (info == NULL)
		info = &own;
	memset(info, 0, sizeof(*info));
	if (count < 1 || count > KN_ROBUST_MAX)
		return kn_error(err, KN_EINVAL, "%d updates to combine: 1 to %d "
		    "are allowed", count, KN_ROBUST_MAX);
	if (n == 0)
		return KN_OK;
	for (i = 0; i < count; i++) {
		norm[i] = norms != NULL ? norms[i] : kn_robust_norm(updates[i], n);
		if (norm[i] < 0)
			return kn_error(err, KN_ENOMEM, "out of memory");
		if (!isfinite(norm[i]))
			return kn_error(err, KN_EINVAL, "update %d is not finite",
			    i);
	}
	info->bound = KN_ROBUST_CLIP * lower_median(norm, count);
	for (i = 0; i < count; i++) {
		scale[i] = norm[i] > info->bound ? info->bound / norm[i] : 1.0;
		info->clipped += norm[i] > info->bound;
	}
	if (count < 3) {
		kn_pool_run(ntasks(&j), mean_task, &j);
		return KN_OK;
	}
	info->centered = 1;
	return centered_clip(&j, info, err);
}
