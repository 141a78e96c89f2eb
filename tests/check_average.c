/* Averaging updates and the outer step: bitwise the same results with one
 * thread or several, the sum taken in index order (checked bit for bit
 * against a plain loop and within float rounding of a double sum), and
 * the outer-step and update arithmetic, and the rebase of overlapped
 * rounds.  The robust combination (kernels/robust.h): honest updates
 * come out as their mean, a poisoned one (noise of sigma 100, every
 * value 1e30, a real update's sign flipped and times 10) moves the
 * result no further than an honest one could, and the bits do not
 * depend on the thread count. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/average.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/robust.h"
#include "tests/testutil.h"

/* Several pool tasks of 16384 elements and a ragged end. */
#define N (3 * 16384 + 1000 + 7)
#define COUNT 5

static float *updates[COUNT];
static float *start, *local;

/* Values over many binades and both signs, so sums round often. */
static void
setup(void)
{
	size_t i;
	int k;

	for (k = 0; k < COUNT; k++) {
		updates[k] = tu_alloc_fill(N, -1.0f, 1.0f, 100 + (uint64_t)k);
		ck_assert_ptr_nonnull(updates[k]);
		for (i = 0; i < N; i++)
			updates[k][i] = ldexpf(updates[k][i],
			    (int)((i * 7 + (size_t)k * 13) % 41) - 20);
	}
	start = tu_alloc_fill(N, -2.0f, 2.0f, 7);
	local = tu_alloc_fill(N, -2.0f, 2.0f, 8);
	ck_assert_ptr_nonnull(start);
	ck_assert_ptr_nonnull(local);
}

static void
teardown(void)
{
	int k;

	for (k = 0; k < COUNT; k++)
		free(updates[k]);
	free(start);
	free(local);
	kn_pool_shutdown();
}

static uint32_t
bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static const float *const *
inputs(void)
{
	return (const float *const *)updates;
}

static float *
alloc_floats(size_t n)
{
	float *p = malloc(n * sizeof(float));

	ck_assert_ptr_nonnull(p);
	return p;
}

START_TEST(test_thread_count_independent)
{
	float *out[4], *params[4], *delta[4];
	int threads, k;

	for (threads = 1; threads <= 4; threads++) {
		int t = threads - 1;

		ck_assert_int_eq(kn_pool_init(threads, NULL), 0);
		out[t] = alloc_floats(N);
		params[t] = alloc_floats(N);
		delta[t] = alloc_floats(N);
		kn_average(out[t], inputs(), COUNT, N);
		memcpy(params[t], start, N * sizeof(float));
		kn_outer_step(params[t], out[t], 0.7f, N);
		kn_update_delta(delta[t], start, local, N);
	}
	for (k = 1; k < 4; k++) {
		ck_assert_int_eq(memcmp(out[0], out[k], N * sizeof(float)), 0);
		ck_assert_int_eq(memcmp(params[0], params[k],
		    N * sizeof(float)), 0);
		ck_assert_int_eq(memcmp(delta[0], delta[k],
		    N * sizeof(float)), 0);
	}
	for (k = 0; k < 4; k++) {
		free(out[k]);
		free(params[k]);
		free(delta[k]);
	}
}
END_TEST

/* The same bits as a plain loop in the documented order, and within
 * float rounding of a double sum: each of the count - 1 additions errs
 * by at most half an ulp of its partial sum, the division by half an ulp
 * of the result. */
START_TEST(test_sum_in_order)
{
	float *out = alloc_floats(N);
	double worst = 0;
	size_t i;
	int k;

	ck_assert_int_eq(kn_pool_init(2, NULL), 0);
	kn_average(out, inputs(), COUNT, N);
	for (i = 0; i < N; i++) {
		float s = updates[0][i];
		double ref = 0, mag = 0, bound, err;

		for (k = 1; k < COUNT; k++)
			s += updates[k][i];
		ck_assert_uint_eq(bits(out[i]), bits(s / (float)COUNT));
		for (k = 0; k < COUNT; k++) {
			ref += updates[k][i];
			mag += fabs(updates[k][i]);
		}
		ref /= COUNT;
		bound = ((COUNT - 1) * 0x1p-24 * mag / COUNT +
		    0x1p-24 * fabs(ref)) * (1 + 0x1p-20);
		err = fabs(out[i] - ref);
		ck_assert_msg(err <= bound, "element %zu: %a vs %a", i,
		    (double)out[i], ref);
		if (mag > 0 && err / mag > worst)
			worst = err / mag;
	}
	tu_report("average vs double, relative to sum |u|", worst);
	free(out);
}
END_TEST

/* (1e8 + 1) - 1e8 is 0 in float, (1e8 - 1e8) + 1 is 1: the average
 * takes the first. */
START_TEST(test_order_is_index_order)
{
	float a[3] = { 1e8f, 2.0f, 0.5f }, b[3] = { 1.0f, 2.0f, 0.5f },
	    c[3] = { -1e8f, 2.0f, 0.5f }, out[3];
	const float *abc[3] = { a, b, c }, *acb[3] = { a, c, b };

	kn_average(out, abc, 3, 3);
	ck_assert(out[0] == 0.0f);
	ck_assert(out[1] == 2.0f && out[2] == 0.5f);
	kn_average(out, acb, 3, 3);
	ck_assert(out[0] == 1.0f / 3.0f);
}
END_TEST

START_TEST(test_edges)
{
	float *out = alloc_floats(N), *copy = alloc_floats(N);
	float *moved[COUNT];
	int k;

	/* one update: itself, -0 and all */
	updates[0][5] = -0.0f;
	kn_average(out, inputs(), 1, N);
	ck_assert_int_eq(memcmp(out, updates[0], N * sizeof(float)), 0);
	/* no updates, or no elements: nothing written */
	memset(out, 0x5a, N * sizeof(float));
	memcpy(copy, out, N * sizeof(float));
	kn_average(out, inputs(), 0, N);
	kn_average(out, inputs(), 3, 0);
	kn_outer_step(out, updates[0], 1.0f, 0);
	kn_update_delta(out, start, local, 0);
	ck_assert_int_eq(memcmp(out, copy, N * sizeof(float)), 0);
	/* out may be one of the updates, first or not */
	kn_average(copy, inputs(), COUNT, N);
	for (k = 0; k < COUNT; k += 2) {
		int j;

		for (j = 0; j < COUNT; j++) {
			moved[j] = alloc_floats(N);
			memcpy(moved[j], updates[j], N * sizeof(float));
		}
		kn_average(moved[k], (const float *const *)moved, COUNT, N);
		ck_assert_int_eq(memcmp(moved[k], copy, N * sizeof(float)),
		    0);
		for (j = 0; j < COUNT; j++)
			free(moved[j]);
	}
	free(out);
	free(copy);
}
END_TEST

START_TEST(test_outer_step)
{
	float *params = alloc_floats(N), *avg = alloc_floats(N);
	float *delta[COUNT], *locals[COUNT];
	const float lrs[3] = { 1.0f, 0.7f, 1.3f };
	size_t i;
	int k, l;

	ck_assert_int_eq(kn_pool_init(2, NULL), 0);
	for (l = 0; l < 3; l++) {
		memcpy(params, start, N * sizeof(float));
		kn_outer_step(params, updates[1], lrs[l], N);
		for (i = 0; i < N; i++) {
			float step = lrs[l] * updates[1][i];
			float want = start[i] - step;

			ck_assert_uint_eq(bits(params[i]), bits(want));
		}
	}
	/* a whole round: replicas start from start, end at locals[k]; with
	 * outer_lr 1 the result is the mean of the locals, up to rounding */
	for (k = 0; k < COUNT; k++) {
		locals[k] = alloc_floats(N);
		delta[k] = alloc_floats(N);
		for (i = 0; i < N; i++)
			locals[k][i] = start[i] + updates[k][i];
		kn_update_delta(delta[k], start, locals[k], N);
		for (i = 0; i < N; i++) {
			float want = start[i] - locals[k][i];

			ck_assert_uint_eq(bits(delta[k][i]), bits(want));
		}
	}
	kn_average(avg, (const float *const *)delta, COUNT, N);
	memcpy(params, start, N * sizeof(float));
	kn_outer_step(params, avg, 1.0f, N);
	for (i = 0; i < N; i++) {
		double mean = 0, mag = fabs(start[i]);

		for (k = 0; k < COUNT; k++) {
			mean += locals[k][i];
			mag += fabs(updates[k][i]);
		}
		mean /= COUNT;
		ck_assert_msg(fabs(params[i] - mean) <= 8 * 0x1p-24 * mag,
		    "element %zu: %a vs %a", i, (double)params[i], mean);
	}
	/* delta may overwrite start or local */
	memcpy(params, start, N * sizeof(float));
	kn_update_delta(params, params, locals[0], N);
	ck_assert_int_eq(memcmp(params, delta[0], N * sizeof(float)), 0);
	memcpy(avg, locals[0], N * sizeof(float));
	kn_update_delta(avg, start, avg, N);
	ck_assert_int_eq(memcmp(avg, delta[0], N * sizeof(float)), 0);
	for (k = 0; k < COUNT; k++) {
		free(locals[k]);
		free(delta[k]);
	}
	free(params);
	free(avg);
}
END_TEST

/* Overlapped rounds: local + (consensus - sent), the difference first.
 * Constructed so that every value is exact in float, then one case where
 * the order shows: 1 + (1e8 - (1e8 - 8)) is 9, while (1 + 1e8) - (1e8 -
 * 8) would round 1 away and give 8. */
START_TEST(test_outer_rebase)
{
	float *x = alloc_floats(N), *g = alloc_floats(N), *sent = alloc_floats(N);
	float one[1] = { 1.0f }, big[1] = { 1e8f }, near[1] = { 1e8f - 8.0f };
	size_t i;

	ck_assert_int_eq(kn_pool_init(3, NULL), 0);
	/* x = sent + p (progress since sending), g = sent - q (the commit):
	 * the result is g + p, in quarters small enough to stay exact */
	for (i = 0; i < N; i++) {
		float p = (float)((int)(i % 97) - 48) * 0.25f;
		float q = (float)((int)(i % 31) - 15) * 0.5f;

		sent[i] = (float)((int)(i % 1013) - 506);
		x[i] = sent[i] + p;
		g[i] = sent[i] - q;
	}
	kn_outer_rebase(x, g, sent, N);
	for (i = 0; i < N; i++) {
		float p = (float)((int)(i % 97) - 48) * 0.25f;
		float q = (float)((int)(i % 31) - 15) * 0.5f;
		float want = (float)((int)(i % 1013) - 506) - q + p;

		ck_assert_msg(x[i] == want, "element %zu: %a, want %a", i,
		    (double)x[i], (double)want);
	}
	kn_outer_rebase(one, big, near, 1);
	ck_assert_float_eq(one[0], 9.0f);
	/* the stale point is the consensus: only the progress is kept */
	memcpy(x, local, N * sizeof(float));
	kn_outer_rebase(x, start, start, N);
	ck_assert_int_eq(memcmp(x, local, N * sizeof(float)), 0);
	kn_outer_rebase(x, start, local, 0);
	ck_assert_int_eq(memcmp(x, local, N * sizeof(float)), 0);
	free(x);
	free(g);
	free(sent);
}
END_TEST

/* Robust combination.  Honest updates: a shared direction plus each
 * replica's own noise, as replicas of one round are. */
#define RN (2 * 16384 + 333)
#define RMAX 6

static float *honest[RMAX], *poison;

static void
robust_setup(void)
{
	float *base = tu_alloc_fill(RN, -1.0f, 1.0f, 41);
	size_t i;
	int k;

	ck_assert_ptr_nonnull(base);
	for (k = 0; k < RMAX; k++) {
		honest[k] = tu_alloc_fill(RN, -0.5f, 0.5f, 50 + (uint64_t)k);
		ck_assert_ptr_nonnull(honest[k]);
		for (i = 0; i < RN; i++)
			honest[k][i] = 1e-3f * (base[i] + honest[k][i]);
	}
	free(base);
	poison = alloc_floats(RN);
}

static void
robust_teardown(void)
{
	int k;

	for (k = 0; k < RMAX; k++)
		free(honest[k]);
	free(poison);
	ck_assert_int_eq(kn_pool_init(0, NULL), 0);
}

/* |a - b| */
static double
distance(const float *a, const float *b, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
	return sqrt(s);
}

static void
plain_mean(float *out, const float *const *u, int m)
{
	size_t i;
	int k;

	for (i = 0; i < RN; i++) {
		double s = 0;

		for (k = 0; k < m; k++)
			s += u[k][i];
		out[i] = (float)(s / m);
	}
}

/* Honest updates alone come out as their mean, none clipped for its
 * norm: to float rounding with one or two, within 0.2 % with three or
 * more, where CenteredClip pulls the farthest in a little. */
START_TEST(test_robust_honest_is_mean)
{
	float *out = alloc_floats(RN), *mean = alloc_floats(RN);
	char err[KN_ERR_LEN];
	kn_robust_info info;
	int m;

	for (m = 1; m <= RMAX; m++) {
		ck_assert_int_eq(kn_robust_combine(out, (const float *const *)
		    honest, m, RN, &info, err), 0);
		ck_assert_int_eq(info.clipped, 0);
		ck_assert_int_eq(info.centered, m >= 3);
		plain_mean(mean, (const float *const *)honest, m);
		if (m < 3)
			ck_assert_double_le(tu_max_rel_err(out, mean, RN, 1e-6),
			    1e-6);
		else
			/* CenteredClip pulls the farthest in a little */
			ck_assert_double_le(distance(out, mean, RN), 2e-3 *
			    kn_robust_norm(mean, RN));
	}
	free(out);
	free(mean);
}
END_TEST

enum { SIGMA100, HUGE, FLIPPED, POISONS };

static void
make_poison(int kind, const float *real)
{
	size_t i;
	float *g = tu_alloc_fill(RN, -1.0f, 1.0f, 99);

	ck_assert_ptr_nonnull(g);
	for (i = 0; i < RN; i++)
		/* uniform of sigma 100: as far as a Gaussian's norm goes */
		poison[i] = kind == SIGMA100 ? 173.2f * g[i] :
		    kind == HUGE ? 1e30f : -10.0f * real[i];
	free(g);
}

/* One poisoned update among m - 1 honest ones moves the result from the
 * honest updates' mean by no more than an honest update's norm times
 * KN_ROBUST_CLIP over m (the clipped poison's share of a mean), and with
 * three or more, by less than a quarter of an honest norm. */
START_TEST(test_robust_poison_bounded)
{
	const float *u[RMAX];
	float *out = alloc_floats(RN), *mean = alloc_floats(RN);
	char err[KN_ERR_LEN];
	kn_robust_info info;
	double hn = 0, d, plain;
	int kind, m, k;

	for (k = 0; k < RMAX; k++)
		if (kn_robust_norm(honest[k], RN) > hn)
			hn = kn_robust_norm(honest[k], RN);
	for (kind = 0; kind < POISONS; kind++) {
		for (m = 2; m <= RMAX; m++) {
			make_poison(kind, honest[0]);
			for (k = 0; k < m - 1; k++)
				u[k] = honest[k];
			u[m - 1] = poison;
			plain_mean(mean, u, m - 1);
			ck_assert_int_eq(kn_robust_combine(out, u, m, RN, &info,
			    err), 0);
			ck_assert_int_eq(info.clipped, 1);
			d = distance(out, mean, RN);
			plain = kind == HUGE ? 1e30 * sqrt(RN) / m :
			    distance(poison, mean, RN) / m;
			ck_assert_msg(d <= (KN_ROBUST_CLIP + 1) * hn / m * 1.0001,
			    "poison %d, %d updates: moved %g, an honest norm is %g",
			    kind, m, d, hn);
			if (m >= 3)
				ck_assert_msg(d < 0.25 * hn, "poison %d, %d updates: "
				    "moved %g, an honest norm is %g", kind, m, d, hn);
			ck_assert_double_lt(d, plain);
		}
	}
	free(out);
	free(mean);
}
END_TEST

/* The same bits with one thread or several, poison included. */
START_TEST(test_robust_thread_count_independent)
{
	const float *u[4] = { honest[0], honest[1], honest[2], poison };
	float *out[4];
	char err[KN_ERR_LEN];
	int threads, m, k;

	make_poison(SIGMA100, honest[0]);
	for (m = 2; m <= 4; m++) {
		for (threads = 1; threads <= 4; threads++) {
			ck_assert_int_eq(kn_pool_init(threads, NULL), 0);
			out[threads - 1] = alloc_floats(RN);
			ck_assert_int_eq(kn_robust_combine(out[threads - 1],
			    u + 4 - m, m, RN, NULL, err), 0);
		}
		for (k = 1; k < 4; k++)
			ck_assert_int_eq(memcmp(out[0], out[k], RN *
			    sizeof(float)), 0);
		for (k = 0; k < 4; k++)
			free(out[k]);
	}
}
END_TEST

START_TEST(test_robust_refuses)
{
	const float *u[2] = { honest[0], poison };
	float *out = alloc_floats(RN);
	char err[KN_ERR_LEN];

	memcpy(poison, honest[1], RN * sizeof(float));
	poison[RN / 2] = NAN;
	ck_assert_int_eq(kn_robust_combine(out, u, 2, RN, NULL, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "not finite"));
	ck_assert_int_eq(kn_robust_combine(out, u, 0, RN, NULL, err),
	    KN_EINVAL);
	ck_assert_int_eq(kn_robust_combine(out, u, KN_ROBUST_MAX + 1, RN, NULL,
	    err), KN_EINVAL);
	/* a zero update alone is its own result */
	memset(poison, 0, RN * sizeof(float));
	ck_assert_int_eq(kn_robust_combine(out, u + 1, 1, RN, NULL, err), 0);
	ck_assert_double_eq(kn_robust_norm(out, RN), 0);
	free(out);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("average");
	TCase *tc = tcase_create("average");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_thread_count_independent);
	tcase_add_test(tc, test_sum_in_order);
	tcase_add_test(tc, test_order_is_index_order);
	tcase_add_test(tc, test_edges);
	tcase_add_test(tc, test_outer_step);
	tcase_add_test(tc, test_outer_rebase);
	suite_add_tcase(s, tc);
	tc = tcase_create("robust");
	tcase_add_checked_fixture(tc, robust_setup, robust_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_robust_honest_is_mean);
	tcase_add_test(tc, test_robust_poison_bounded);
	tcase_add_test(tc, test_robust_thread_count_independent);
	tcase_add_test(tc, test_robust_refuses);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
