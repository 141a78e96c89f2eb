/* SPSA and EGGROLL (kernels/spsa.h, kernels/eggroll.h) against closed
 * forms on quadratics: the directions' keys and moments, the estimator's
 * bias and relative error against (d - 2 + 1/density)/P, the variance
 * ratio of summed against independent losses, Adam by hand, the plateau
 * schedule, EGGROLL's perturbations and update, and bitwise equality
 * across thread counts.  The measured figures go to the log ("# ..."). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eggroll.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/spsa.h"
#include "tests/testutil.h"

/* A population loss of quadratics: group g's loss is
 * 0.5 x^T A x + b^T x over its own segment x, with A dense (one group
 * only) or diagonal, computed in double. */
struct quad {
	size_t n;
	int groups;
	const double *A;        /* (n, n) or NULL */
	const double *diag, *b; /* (n) */
	int calls, copies, last_k;
	float *record;          /* (record_cap, n) every copy seen, or NULL */
	int record_cap;
	int fail;               /* returned by the next call when nonzero */
	int nan;                /* the next call's losses are NaN */
};

static int
quad_eval(void *ctx, const float *thetas, int K, float *losses, char *err)
{
	struct quad *q = ctx;
	size_t seg = q->n / (size_t)q->groups, i, l;
	int k, g;

	if (q->fail)
		return kn_error(err, q->fail, "quad: told to fail");
	for (k = 0; k < K; k++) {
		const float *x = thetas + (size_t)k * q->n;

		if (q->record && q->copies + k < q->record_cap)
			memcpy(q->record + (size_t)(q->copies + k) * q->n, x,
			    q->n * sizeof(float));
		for (g = 0; g < q->groups; g++) {
			double L = 0;

			for (i = g * seg; i < (g + 1) * seg; i++) {
				double ax = q->diag ? q->diag[i] * x[i] : 0;

				if (q->A)
					for (l = 0; l < q->n; l++)
						ax += q->A[i * q->n + l] * x[l];
				L += 0.5 * x[i] * ax + (q->b ? q->b[i] * x[i] : 0);
			}
			losses[(size_t)k * q->groups + g] =
			    q->nan ? NAN : (float)L;
		}
	}
	q->calls++;
	q->copies += K;
	q->last_k = K;
	return 0;
}

static void
quad_grad(const struct quad *q, const float *theta, double *grad)
{
	size_t i, l;

	for (i = 0; i < q->n; i++) {
		grad[i] = (q->diag ? q->diag[i] * theta[i] : 0) +
		    (q->b ? q->b[i] : 0);
		if (q->A)
			for (l = 0; l < q->n; l++)
				grad[i] += q->A[i * q->n + l] * theta[l];
	}
}

static double *
alloc_doubles(size_t n, double lo, double hi, uint64_t seed)
{
	float *f = tu_alloc_fill(n, (float)lo, (float)hi, seed);
	double *d = malloc(n * sizeof(double));
	size_t i;

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(d);
	for (i = 0; i < n; i++)
		d[i] = f[i];
	free(f);
	return d;
}

static void
spsa_setup(kn_spsa *s, size_t n, int P, float density, int groups,
    int mode, int k_max)
{
	kn_spsa_config c;
	char err[KN_ERR_LEN];

	kn_spsa_config_default(&c);
	c.P = P;
	c.k_max = k_max ? k_max : 2 * P;
	c.density = density;
	c.groups = groups;
	c.mode = mode;
	c.seed = 20240611;
	/* a quadratic's central difference is exact for any eps; a large one
	 * keeps float rounding of theta and the losses out of the figures */
	c.eps = 0.5f;
	ck_assert_msg(kn_spsa_init(s, n, &c, err) == 0, "%s", err);
}

/* Mean and standard error of the relative squared error
 * |g - grad|^2 / |grad|^2 over draws steps first .. first + draws - 1. */
static void
relative_mse(kn_spsa *s, struct quad *q, const float *theta, int first,
    int draws, double *mean, double *se)
{
	double *grad = malloc(q->n * sizeof(double)), norm = 0, sum = 0,
	    sum2 = 0;
	char err[KN_ERR_LEN];
	size_t i;
	int d;

	ck_assert_ptr_nonnull(grad);
	quad_grad(q, theta, grad);
	for (i = 0; i < q->n; i++)
		norm += grad[i] * grad[i];
	for (d = 0; d < draws; d++) {
		double e = 0;

		s->step = (uint64_t)(first + d);
		ck_assert_msg(kn_spsa_estimate(s, theta, quad_eval, q, s->grad,
		    NULL, err) == 0, "%s", err);
		for (i = 0; i < q->n; i++)
			e += (s->grad[i] - grad[i]) * (s->grad[i] - grad[i]);
		sum += e / norm;
		sum2 += (e / norm) * (e / norm);
	}
	*mean = sum / draws;
	*se = sqrt((sum2 / draws - *mean * *mean) / (draws - 1));
	free(grad);
}

START_TEST(test_direction_keyed)
{
	const size_t n = 100003;
	float *z = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float));
	float big = 1.0f / sqrtf(0.5f);
	size_t i, nz = 0, plus = 0;
	double p = 0.5, se = sqrt(p * (1 - p) / n), dot;
	int key;

	ck_assert_ptr_nonnull(z);
	ck_assert_ptr_nonnull(w);
	kn_spsa_direction(z, n, 1, 2, 3, 4, 0.5f);
	kn_spsa_direction(w, n, 1, 2, 3, 4, 0.5f);
	ck_assert_mem_eq(z, w, n * sizeof(float));
	/* element i depends on i alone, not on n */
	kn_spsa_direction(w, 1001, 1, 2, 3, 4, 0.5f);
	ck_assert_mem_eq(z, w, 1001 * sizeof(float));
	for (i = 0; i < n; i++) {
		ck_assert(z[i] == 0.0f || z[i] == big || z[i] == -big);
		nz += z[i] != 0.0f;
		plus += z[i] > 0.0f;
	}
	ck_assert_double_le(fabs((double)nz / n - p), 5 * se);
	ck_assert_double_le(fabs((double)plus / n - p / 2),
	    5 * sqrt(p / 2 * (1 - p / 2) / n));
	/* each part of the key gives another, uncorrelated direction:
	 * E[z_a z_b] = 0 and Var[z_a z_b] = 1 */
	for (key = 0; key < 4; key++) {
		kn_spsa_direction(w, n, 1 + (key == 0), 2 + (key == 1),
		    3 + (key == 2), 4 + (key == 3), 0.5f);
		ck_assert(memcmp(z, w, n * sizeof(float)) != 0);
		for (i = 0, dot = 0; i < n; i++)
			dot += (double)z[i] * w[i];
		ck_assert_double_le(fabs(dot / n), 5 / sqrt((double)n));
	}
	kn_spsa_direction(w, n, 1, 2, 3, 4, 1.0f);
	for (i = 0; i < n; i++)
		ck_assert(w[i] == 1.0f || w[i] == -1.0f);
	free(z);
	free(w);
}
END_TEST

/* On a linear loss the estimate is exactly mean_j (b . z_j) z_j, with
 * each group's z_j regenerated from its own key (expert + g) across
 * several pool pieces, in both modes. */
START_TEST(test_estimate_uses_keys)
{
	const size_t seg = 5000, n = 3 * seg;
	const int P = 3;
	double *b = alloc_doubles(n, -1, 1, 5);
	float *theta = tu_alloc_fill(n, -1, 1, 6), *z = malloc(seg * 4);
	double *want = calloc(n, sizeof(double)), c[3][3], worst = 0;
	struct quad q = { .n = n, .groups = 3, .b = b };
	char err[KN_ERR_LEN];
	int mode, j, g;
	size_t i;
	kn_spsa s;

	ck_assert_ptr_nonnull(z);
	ck_assert_ptr_nonnull(want);
	for (mode = 0; mode < 2; mode++) {
		spsa_setup(&s, n, P, 0.5f, 3, mode, 4);
		s.cfg.expert = 7;
		s.step = 11;
		ck_assert_msg(kn_spsa_estimate(&s, theta, quad_eval, &q,
		    s.grad, NULL, err) == 0, "%s", err);
		for (j = 0; j < P; j++)
			for (g = 0; g < 3; g++) {
				kn_spsa_direction(z, seg, s.cfg.seed, 7 + g, 11,
				    j, 0.5f);
				for (i = 0, c[j][g] = 0; i < seg; i++)
					c[j][g] += b[g * seg + i] * z[i];
			}
		memset(want, 0, n * sizeof(double));
		for (j = 0; j < P; j++)
			for (g = 0; g < 3; g++) {
				double cj = mode == KN_SPSA_SUMMED ?
				    c[j][0] + c[j][1] + c[j][2] : c[j][g];

				kn_spsa_direction(z, seg, s.cfg.seed, 7 + g, 11,
				    j, 0.5f);
				for (i = 0; i < seg; i++)
					want[g * seg + i] += cj * z[i] / P;
			}
		for (i = 0; i < n; i++)
			if (fabs(s.grad[i] - want[i]) > worst)
				worst = fabs(s.grad[i] - want[i]);
		kn_spsa_free(&s);
	}
	/* float rounding of theta +- eps z and of losses of size ~50 */
	ck_assert_double_le(worst, 2e-3);
	free(b);
	free(theta);
	free(z);
	free(want);
}
END_TEST

/* The mean over independent draws is the true gradient within five
 * standard errors in every coordinate. */
START_TEST(test_unbiased)
{
	const int d = 16, P = 4, draws = 4000;
	double *A = malloc((size_t)d * d * sizeof(double));
	double *M = alloc_doubles((size_t)d * d, -1, 1, 11);
	double *b = alloc_doubles((size_t)d, -1, 1, 12);
	float *theta = tu_alloc_fill((size_t)d, -1, 1, 13);
	double grad[16], sum[16] = { 0 }, sum2[16] = { 0 };
	struct quad q = { .n = (size_t)d, .groups = 1, .b = b };
	char err[KN_ERR_LEN];
	int i, k, l, t;
	kn_spsa s;

	/* A = M M^T / d + I: symmetric positive definite */
	for (i = 0; i < d; i++)
		for (k = 0; k < d; k++) {
			A[i * d + k] = i == k;
			for (l = 0; l < d; l++)
				A[i * d + k] += M[i * d + l] * M[k * d + l] / d;
		}
	q.A = A;
	quad_grad(&q, theta, grad);
	spsa_setup(&s, (size_t)d, P, 0.5f, 1, KN_SPSA_INDEPENDENT, 0);
	for (t = 0; t < draws; t++) {
		s.step = (uint64_t)t;
		ck_assert_msg(kn_spsa_estimate(&s, theta, quad_eval, &q,
		    s.grad, NULL, err) == 0, "%s", err);
		for (i = 0; i < d; i++) {
			sum[i] += s.grad[i];
			sum2[i] += (double)s.grad[i] * s.grad[i];
		}
	}
	for (i = 0; i < d; i++) {
		double mean = sum[i] / draws;
		double se = sqrt((sum2[i] / draws - mean * mean) / (draws - 1));

		ck_assert_msg(fabs(mean - grad[i]) <= 5 * se,
		    "coordinate %d: mean %g, gradient %g, se %g", i, mean,
		    grad[i], se);
	}
	kn_spsa_free(&s);
	free(A);
	free(M);
	free(b);
	free(theta);
}
END_TEST

/* E|g - grad|^2 / |grad|^2 = (d - 2 + 1/density) / P: one direction
 * gives E[(z.grad)^2 |z|^2] = (d - 1 + E z^4) |grad|^2 with E z^4 =
 * 1/density, less |grad|^2 for the mean, and P directions divide it. */
START_TEST(test_relative_error)
{
	static const struct {
		int d, P, draws;
		float density;
	} cases[] = {
		{ 8, 2, 24000, 0.5f },
		{ 16, 4, 16000, 1.0f },
		{ 64, 8, 12000, 0.5f },
		{ 256, 16, 6000, 0.25f },
	};
	size_t c;

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int d = cases[c].d, P = cases[c].P;
		double *diag = alloc_doubles((size_t)d, 0.5, 2, 20 + c);
		double *b = alloc_doubles((size_t)d, -1, 1, 30 + c);
		float *theta = tu_alloc_fill((size_t)d, -1, 1, 40 + c);
		struct quad q = { .n = (size_t)d, .groups = 1, .diag = diag,
		    .b = b };
		double want = (d - 2 + 1 / (double)cases[c].density) / P;
		double mean, se;
		kn_spsa s;

		spsa_setup(&s, (size_t)d, P, cases[c].density, 1,
		    KN_SPSA_INDEPENDENT, 0);
		relative_mse(&s, &q, theta, 0, cases[c].draws, &mean, &se);
		fprintf(stderr, "# relative error d %3d P %2d density %.2f: "
		    "%.4f +- %.4f, (d-2+1/density)/P %.4f, (d-1)/P %.4f\n",
		    d, P, (double)cases[c].density, mean, se, want,
		    (d - 1.0) / P);
		ck_assert_msg(fabs(mean - want) <= 4 * se,
		    "d %d P %d: %g +- %g, want %g", d, P, mean, se, want);
		/* precise enough to tell the formula from (d-1)/P where they
		 * differ by more than 6% */
		ck_assert_double_le(se, 0.03 * want);
		kn_spsa_free(&s);
		free(diag);
		free(b);
		free(theta);
	}
}
END_TEST

/* N = 4 separable blocks of m = 64, each group's loss its own: the
 * summed loss's relative error over the independent one's is
 * (N m - 2 + 1/density) / (m - 2 + 1/density) = N at density 0.5. */
START_TEST(test_variance_ratio)
{
	const int N = 4, m = 64, P = 8, draws = 10000;
	const size_t n = (size_t)N * m;
	double *diag = alloc_doubles(n, 0.5, 2, 50);
	double *b = alloc_doubles(n, -1, 1, 51);
	float *theta = tu_alloc_fill(n, -1, 1, 52);
	struct quad q = { .n = n, .groups = N, .diag = diag, .b = b };
	double ind, ind_se, sum, sum_se, ratio, rel_se;
	kn_spsa s;

	spsa_setup(&s, n, P, 0.5f, N, KN_SPSA_INDEPENDENT, 0);
	relative_mse(&s, &q, theta, 0, draws, &ind, &ind_se);
	s.cfg.mode = KN_SPSA_SUMMED;
	relative_mse(&s, &q, theta, draws, draws, &sum, &sum_se);
	ratio = sum / ind;
	rel_se = sqrt((ind_se / ind) * (ind_se / ind) +
	    (sum_se / sum) * (sum_se / sum));
	fprintf(stderr, "# variance ratio N %d (m %d, P %d, density 0.5, "
	    "%d draws each): %.3f +- %.3f, expected %d; independent %.3f "
	    "(want %.3f), summed %.3f (want %.3f)\n", N, m, P, draws, ratio,
	    ratio * rel_se, N, ind, (double)m / P, sum, (double)N * m / P);
	ck_assert_double_le(fabs(ratio - N), 4 * ratio * rel_se);
	ck_assert_double_le(rel_se, 0.05);
	kn_spsa_free(&s);
	free(diag);
	free(b);
	free(theta);
}
END_TEST

/* Three steps over three groups of two pool pieces each, in chunks of
 * three copies: the same bits with one thread and two. */
START_TEST(test_spsa_threads)
{
	const size_t n = 3 * 5000;
	double *diag = alloc_doubles(n, 0.5, 2, 60);
	double *b = alloc_doubles(n, -1, 1, 61);
	float *theta[2], *m[2], *v[2];
	struct quad q = { .n = n, .groups = 3, .diag = diag, .b = b };
	char err[KN_ERR_LEN];
	kn_zo_stats st;
	int threads, t;
	kn_spsa s;

	for (threads = 1; threads <= 2; threads++) {
		ck_assert_int_eq(kn_pool_init(threads, err), 0);
		theta[threads - 1] = tu_alloc_fill(n, -1, 1, 62);
		spsa_setup(&s, n, 5, 0.5f, 3, KN_SPSA_INDEPENDENT, 3);
		s.cfg.eps = 1e-2f;
		s.cfg.lr = 1e-2f;
		q.calls = 0;
		for (t = 0; t < 3; t++)
			ck_assert_msg(kn_spsa_step(&s, theta[threads - 1],
			    quad_eval, &q, &st, err) == 0, "%s", err);
		ck_assert_int_eq(q.calls, 3 * 4);
		ck_assert_int_eq(st.calls, 4);
		ck_assert_uint_eq(st.copies, 10);
		m[threads - 1] = s.m;
		v[threads - 1] = s.v;
		s.m = s.v = NULL;
		kn_spsa_free(&s);
	}
	ck_assert_mem_eq(theta[0], theta[1], n * sizeof(float));
	ck_assert_mem_eq(m[0], m[1], n * sizeof(float));
	ck_assert_mem_eq(v[0], v[1], n * sizeof(float));
	for (t = 0; t < 2; t++) {
		free(theta[t]);
		free(m[t]);
		free(v[t]);
	}
	free(diag);
	free(b);
	kn_pool_shutdown();
}
END_TEST

/* Two steps on L = b . theta with dense directions, every value exact
 * in float, against Adam computed in double. */
START_TEST(test_adam_by_hand)
{
	enum { n = 4, P = 2 };
	static const double b[n] = { 1, -2, 0.5, 3 };
	float theta[n] = { 0.5f, -0.25f, 1.0f, 2.0f };
	double th[n], m[n] = { 0 }, v[n] = { 0 }, g[n];
	struct quad q = { .n = n, .groups = 1, .b = b };
	char err[KN_ERR_LEN];
	float z[P][n];
	kn_zo_stats st;
	int t, j, i;
	kn_spsa s;

	for (i = 0; i < n; i++)
		th[i] = theta[i];
	spsa_setup(&s, n, P, 1.0f, 1, KN_SPSA_INDEPENDENT, 3);
	s.cfg.eps = 0.25f;
	s.cfg.lr = 0.1f;
	for (t = 1; t <= 2; t++) {
		double mean = 0;

		for (j = 0; j < P; j++)
			kn_spsa_direction(z[j], n, s.cfg.seed, 0,
			    (uint64_t)t - 1, (uint64_t)j, 1.0f);
		for (i = 0; i < n; i++)
			g[i] = 0;
		for (j = 0; j < P; j++) {
			double c = 0;

			for (i = 0; i < n; i++)
				c += b[i] * z[j][i];
			for (i = 0; i < n; i++)
				g[i] += c * z[j][i] / P;
			for (i = 0; i < n; i++)
				mean += b[i] * th[i] / P;
		}
		for (i = 0; i < n; i++) {
			m[i] = 0.9 * m[i] + 0.1 * g[i];
			v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
			th[i] -= 0.1 * (m[i] / (1 - pow(0.9, t))) /
			    (sqrt(v[i] / (1 - pow(0.999, t))) + 1e-8);
		}
		ck_assert_msg(kn_spsa_step(&s, theta, quad_eval, &q, &st,
		    err) == 0, "%s", err);
		/* 2P = 4 copies in calls of 3 and 1 */
		ck_assert_int_eq(st.calls, 2);
		ck_assert_int_eq(q.last_k, 1);
		ck_assert_double_eq_tol(st.loss, mean, 1e-6);
		for (i = 0; i < n; i++) {
			/* the second step's losses round (theta moved) */
			ck_assert_double_eq_tol(s.grad[i], g[i], 1e-5);
			ck_assert_double_eq_tol(s.m[i], m[i], 1e-5);
			ck_assert_double_eq_tol(s.v[i], v[i], 1e-5);
			ck_assert_double_eq_tol(theta[i], th[i], 1e-5);
		}
	}
	ck_assert_uint_eq(s.step, 2);
	kn_spsa_free(&s);
}
END_TEST

/* A failing or diverged evaluation leaves theta and the state alone. */
START_TEST(test_spsa_errors)
{
	enum { n = 6 };
	static const double b[n] = { 1, 2, 3, 4, 5, 6 };
	float theta[n] = { 1, 2, 3, 4, 5, 6 }, before[n];
	struct quad q = { .n = n, .groups = 2, .b = b, .fail = KN_EIO };
	char err[KN_ERR_LEN];
	kn_spsa_config c;
	kn_spsa s;

	memcpy(before, theta, sizeof(theta));
	spsa_setup(&s, n, 2, 0.5f, 2, KN_SPSA_INDEPENDENT, 0);
	ck_assert_int_eq(kn_spsa_step(&s, theta, quad_eval, &q, NULL, err),
	    KN_EIO);
	ck_assert_ptr_nonnull(strstr(err, "told to fail"));
	q.fail = 0;
	q.nan = 1;
	ck_assert_int_eq(kn_spsa_step(&s, theta, quad_eval, &q, NULL, err),
	    KN_ENUM);
	ck_assert_mem_eq(theta, before, sizeof(theta));
	ck_assert_uint_eq(s.step, 0);
	/* the buffers are sized for P */
	q.nan = 0;
	s.cfg.P = 3;
	ck_assert_int_eq(kn_spsa_step(&s, theta, quad_eval, &q, NULL, err),
	    KN_EINVAL);
	ck_assert_mem_eq(theta, before, sizeof(theta));
	kn_spsa_free(&s);
	kn_spsa_config_default(&c);
	c.groups = 4;
	ck_assert_int_eq(kn_spsa_init(&s, n, &c, err), KN_EINVAL);
	c.groups = 1;
	c.density = 0;
	ck_assert_int_eq(kn_spsa_init(&s, n, &c, err), KN_EINVAL);
}
END_TEST

START_TEST(test_plateau)
{
	kn_spsa s;
	float want = 1e-3f;
	int i, halvings = 0;

	spsa_setup(&s, 4, 1, 0.5f, 1, KN_SPSA_INDEPENDENT, 0);
	s.cfg.eps = s.cfg.lr = 1e-3f;
	s.cfg.patience = 2;
	ck_assert_int_eq(kn_spsa_plateau(&s, 10.0), 0);
	/* 10 - 1e-3 * 10 = 9.99: 9.995 is no improvement */
	ck_assert_int_eq(kn_spsa_plateau(&s, 9.995), 0);
	ck_assert_int_eq(kn_spsa_plateau(&s, 9.999), 1);
	ck_assert(s.cfg.lr == 0.5e-3f && s.cfg.eps == 0.5e-3f);
	/* an improvement restarts the count */
	ck_assert_int_eq(kn_spsa_plateau(&s, 9.0), 0);
	ck_assert_int_eq(kn_spsa_plateau(&s, 9.0), 0);
	ck_assert_int_eq(kn_spsa_plateau(&s, 8.5), 0);
	ck_assert_int_eq(kn_spsa_plateau(&s, 8.5), 0);
	ck_assert(s.cfg.lr == 0.5e-3f);
	want = 0.5e-3f;
	for (i = 0; i < 40; i++)
		if (kn_spsa_plateau(&s, 8.5)) {
			want = want / 2 > 1e-5f ? want / 2 : 1e-5f;
			halvings++;
			ck_assert(s.cfg.lr == want && s.cfg.eps == want);
		}
	ck_assert_int_eq(halvings, 20);
	ck_assert(s.cfg.lr == 1e-5f && s.cfg.eps == 1e-5f);
	kn_spsa_free(&s);
}
END_TEST

/* EGGROLL: a matrix, a vector and another matrix with gaps between. */
static const kn_egg_tensor egg_tensors[] = {
	{ 0, 12, 9 }, { 108, 7, 1 }, { 120, 5, 4 },
};
#define EGG_N 144

static void
egg_setup(kn_egg *s, int K, int k_max, int rank, int groups)
{
	kn_egg_config c = { .K = K, .rank = rank, .sigma = 0.1f,
	    .lr = 0.05f, .k_max = k_max, .groups = groups, .seed = 99 };
	char err[KN_ERR_LEN];

	ck_assert_msg(kn_egg_init(s, EGG_N, egg_tensors, 3, &c, err) == 0,
	    "%s", err);
}

static double *
egg_quad_diag(void)
{
	return alloc_doubles(EGG_N, 1, 1, 0);
}

/* Every copy is theta + s_k sigma E_k of kn_egg_perturbation, bit for
 * bit, with the gaps untouched; the update is lr/(K sigma) sum f_k s_k
 * E_k with normalised fitness; the run repeats bit for bit. */
START_TEST(test_egg_population_and_update)
{
	enum { K = 6 };
	double *diag = egg_quad_diag(), *b = alloc_doubles(EGG_N, -1, 1, 70);
	float *theta = tu_alloc_fill(EGG_N, -1, 1, 71), *after;
	float *rec = malloc((size_t)K * EGG_N * sizeof(float));
	float E[EGG_N], scratch[(12 + 9) * 3];
	double want[EGG_N], L[K], mean = 0, sd = 0;
	struct quad q = { .n = EGG_N, .groups = 1, .diag = diag,
	    .b = b, .record = rec, .record_cap = K };
	char err[KN_ERR_LEN];
	kn_zo_stats st;
	size_t i, covered[EGG_N] = { 0 };
	int k, t;
	kn_egg s;

	after = malloc(EGG_N * sizeof(float));
	memcpy(after, theta, EGG_N * sizeof(float));
	egg_setup(&s, K, 4, 3, 1);
	ck_assert_msg(kn_egg_step(&s, after, quad_eval, &q, &st, err) == 0,
	    "%s", err);
	ck_assert_int_eq(st.calls, 2);
	ck_assert_uint_eq(st.copies, K);
	for (k = 0; k < K; k++) {
		const float *copy = rec + (size_t)k * EGG_N;
		float ss = k % 2 ? -0.1f : 0.1f;

		for (t = 0; t < 3; t++) {
			const kn_egg_tensor *tt = &egg_tensors[t];

			kn_egg_perturbation(&s, t, 0, k, E, scratch);
			for (i = 0; i < (size_t)tt->rows * tt->cols; i++) {
				float x = theta[tt->offset + i] + ss * E[i];

				ck_assert(copy[tt->offset + i] == x);
				covered[tt->offset + i] = 1;
			}
		}
		for (i = 0; i < EGG_N; i++)
			if (!covered[i])
				ck_assert(copy[i] == theta[i]);
		L[k] = 0;
		for (i = 0; i < EGG_N; i++)
			L[k] += 0.5 * diag[i] * copy[i] * copy[i] +
			    b[i] * copy[i];
		mean += L[k] / K;
	}
	for (k = 0; k < K; k++)
		sd += (L[k] - mean) * (L[k] - mean) / K;
	sd = sqrt(sd);
	for (i = 0; i < EGG_N; i++)
		want[i] = theta[i];
	for (k = 0; k < K; k++) {
		double f = -(L[k] - mean) / sd, w = 0.05 / (K * 0.1) * f *
		    (k % 2 ? -1 : 1);

		for (t = 0; t < 3; t++) {
			kn_egg_perturbation(&s, t, 0, k, E, scratch);
			for (i = 0; i < (size_t)egg_tensors[t].rows *
			    egg_tensors[t].cols; i++)
				want[egg_tensors[t].offset + i] += w * E[i];
		}
	}
	for (i = 0; i < EGG_N; i++) {
		ck_assert_double_eq_tol(after[i], want[i], 1e-5);
		if (!covered[i])
			ck_assert(after[i] == theta[i]);
	}
	ck_assert(memcmp(after, theta, EGG_N * sizeof(float)) != 0);
	/* again from the start, in other chunks: the same bits */
	kn_egg_free(&s);
	egg_setup(&s, K, 5, 3, 1);
	memcpy(E, theta, EGG_N * sizeof(float));
	ck_assert_int_eq(kn_egg_step(&s, E, quad_eval, &q, NULL, err), 0);
	ck_assert_mem_eq(E, after, EGG_N * sizeof(float));
	kn_egg_free(&s);
	/* two groups: their losses are summed, so the same step within the
	 * rounding of the losses */
	q.groups = 2;
	q.record = NULL;
	egg_setup(&s, K, 4, 3, 2);
	memcpy(E, theta, EGG_N * sizeof(float));
	ck_assert_int_eq(kn_egg_step(&s, E, quad_eval, &q, NULL, err), 0);
	for (i = 0; i < EGG_N; i++)
		ck_assert_double_eq_tol(E[i], after[i], 1e-5);
	kn_egg_free(&s);
	free(diag);
	free(b);
	free(theta);
	free(after);
	free(rec);
}
END_TEST

/* Around zero the members of a pair are exact negatives; pairs differ. */
START_TEST(test_egg_antithetic)
{
	enum { K = 4 };
	float theta[EGG_N] = { 0 };
	float *rec = malloc((size_t)K * EGG_N * sizeof(float));
	struct quad q = { .n = EGG_N, .groups = 1, .record = rec,
	    .record_cap = K };
	double *diag = egg_quad_diag();
	char err[KN_ERR_LEN];
	size_t i;
	kn_egg s;

	q.diag = diag;
	egg_setup(&s, K, K, 2, 1);
	ck_assert_msg(kn_egg_step(&s, theta, quad_eval, &q, NULL, err) == 0,
	    "%s", err);
	for (i = 0; i < EGG_N; i++) {
		ck_assert(rec[i] == -rec[EGG_N + i]);
		ck_assert(rec[2 * EGG_N + i] == -rec[3 * EGG_N + i]);
	}
	ck_assert(memcmp(rec, rec + 2 * EGG_N, 108 * sizeof(float)) != 0);
	/* a symmetric loss scores both members of a pair alike: no update */
	for (i = 0; i < EGG_N; i++)
		ck_assert(theta[i] == 0.0f);
	kn_egg_free(&s);
	free(diag);
	free(rec);
}
END_TEST

/* Rank by Gaussian elimination with full pivoting, in double. */
static int
numeric_rank(const float *E, int rows, int cols)
{
	double a[12 * 9], top = 0;
	int rank = 0, r, c, i, k;

	for (i = 0; i < rows * cols; i++) {
		a[i] = E[i];
		if (fabs(a[i]) > top)
			top = fabs(a[i]);
	}
	for (rank = 0; rank < rows && rank < cols; rank++) {
		int pr = rank, pc = rank;

		for (r = rank; r < rows; r++)
			for (c = rank; c < cols; c++)
				if (fabs(a[r * cols + c]) >
				    fabs(a[pr * cols + pc])) {
					pr = r;
					pc = c;
				}
		if (fabs(a[pr * cols + pc]) < 1e-4 * top)
			break;
		for (c = 0; c < cols; c++) {
			double x = a[rank * cols + c];

			a[rank * cols + c] = a[pr * cols + c];
			a[pr * cols + c] = x;
		}
		for (r = 0; r < rows; r++) {
			double x = a[r * cols + rank];

			a[r * cols + rank] = a[r * cols + pc];
			a[r * cols + pc] = x;
		}
		for (r = rank + 1; r < rows; r++) {
			double f = a[r * cols + rank] / a[rank * cols + rank];

			for (k = rank; k < cols; k++)
				a[r * cols + k] -= f * a[rank * cols + k];
		}
	}
	return rank;
}

START_TEST(test_egg_rank)
{
	float E[12 * 9], scratch[(12 + 9) * 12];
	int r;
	kn_egg s;

	for (r = 1; r <= 4; r++) {
		egg_setup(&s, 2, 2, r, 1);
		kn_egg_perturbation(&s, 0, 5, 0, E, scratch);
		ck_assert_int_eq(numeric_rank(E, 12, 9), r);
		kn_egg_free(&s);
	}
	egg_setup(&s, 2, 2, 12, 1);
	kn_egg_perturbation(&s, 0, 5, 0, E, scratch);
	ck_assert_int_eq(numeric_rank(E, 12, 9), 9);
	kn_egg_free(&s);
}
END_TEST

/* Whatever the rank, an element of E = A B^T / sqrt(r) has variance 1,
 * as the vectors' full Gaussian has: the mean square over 400 pairs,
 * within five standard errors of the per-pair means. */
START_TEST(test_egg_scale)
{
	const int pairs = 400;
	float E[12 * 9], scratch[(12 + 9) * 4];
	double sum = 0, sum2 = 0, mean, se;
	int k, i;
	kn_egg s;

	egg_setup(&s, 2, 2, 4, 1);
	for (k = 0; k < pairs; k++) {
		double ms = 0;

		kn_egg_perturbation(&s, 0, 0, 2 * k, E, scratch);
		for (i = 0; i < 12 * 9; i++)
			ms += (double)E[i] * E[i] / (12 * 9);
		sum += ms;
		sum2 += ms * ms;
	}
	mean = sum / pairs;
	se = sqrt((sum2 / pairs - mean * mean) / (pairs - 1));
	ck_assert_msg(fabs(mean - 1) <= 5 * se && se < 0.05,
	    "mean square %g +- %g", mean, se);
	kn_egg_free(&s);
}
END_TEST

/* 0.5 |theta + b|^2 over the tensors' parameters: what the steps can
 * lower (the rest never moves). */
static double
egg_gap(const float *theta, const double *b)
{
	double gap = 0;
	size_t t, i;

	for (t = 0; t < 3; t++)
		for (i = 0; i < (size_t)egg_tensors[t].rows *
		    egg_tensors[t].cols; i++) {
			size_t e = egg_tensors[t].offset + i;

			gap += 0.5 * (theta[e] + b[e]) * (theta[e] + b[e]);
		}
	return gap;
}

/* Steps lower 0.5 theta^T theta + b^T theta. */
START_TEST(test_egg_descends)
{
	double *diag = egg_quad_diag(), *b = alloc_doubles(EGG_N, -1, 1, 80);
	float *theta = tu_alloc_fill(EGG_N, -1, 1, 81);
	struct quad q = { .n = EGG_N, .groups = 1, .diag = diag, .b = b };
	char err[KN_ERR_LEN];
	double first = egg_gap(theta, b), last;
	int t;
	kn_egg s;

	egg_setup(&s, 32, 16, 2, 1);
	for (t = 0; t < 40; t++)
		ck_assert_msg(kn_egg_step(&s, theta, quad_eval, &q, NULL,
		    err) == 0, "%s", err);
	last = egg_gap(theta, b);
	fprintf(stderr, "# eggroll quadratic: distance to the minimum %.3f, "
	    "%.3f after 40 steps\n", first, last);
	ck_assert_double_lt(last, 0.5 * first);
	kn_egg_free(&s);
	free(diag);
	free(b);
	free(theta);
}
END_TEST

START_TEST(test_egg_threads)
{
	double *diag = egg_quad_diag(), *b = alloc_doubles(EGG_N, -1, 1, 90);
	float *theta[2];
	struct quad q = { .n = EGG_N, .groups = 1, .diag = diag, .b = b };
	char err[KN_ERR_LEN];
	int threads, t;
	kn_egg s;

	for (threads = 1; threads <= 2; threads++) {
		ck_assert_int_eq(kn_pool_init(threads, err), 0);
		theta[threads - 1] = tu_alloc_fill(EGG_N, -1, 1, 91);
		egg_setup(&s, 8, 3, 2, 1);
		for (t = 0; t < 3; t++)
			ck_assert_msg(kn_egg_step(&s, theta[threads - 1],
			    quad_eval, &q, NULL, err) == 0, "%s", err);
		kn_egg_free(&s);
	}
	ck_assert_mem_eq(theta[0], theta[1], EGG_N * sizeof(float));
	free(theta[0]);
	free(theta[1]);
	free(diag);
	free(b);
	kn_pool_shutdown();
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("spsa");
	TCase *dir = tcase_create("directions");
	TCase *est = tcase_create("estimator");
	TCase *step = tcase_create("step");
	TCase *egg = tcase_create("eggroll");

	tcase_add_test(dir, test_direction_keyed);
	tcase_add_test(dir, test_estimate_uses_keys);
	tcase_set_timeout(est, 120);
	tcase_add_test(est, test_unbiased);
	tcase_add_test(est, test_relative_error);
	tcase_add_test(est, test_variance_ratio);
	tcase_add_test(step, test_spsa_threads);
	tcase_add_test(step, test_adam_by_hand);
	tcase_add_test(step, test_spsa_errors);
	tcase_add_test(step, test_plateau);
	tcase_add_test(egg, test_egg_population_and_update);
	tcase_add_test(egg, test_egg_antithetic);
	tcase_add_test(egg, test_egg_rank);
	tcase_add_test(egg, test_egg_scale);
	tcase_add_test(egg, test_egg_descends);
	tcase_add_test(egg, test_egg_threads);
	suite_add_tcase(s, dir);
	suite_add_tcase(s, est);
	suite_add_tcase(s, step);
	suite_add_tcase(s, egg);
	return tu_run_suite(s);
}
