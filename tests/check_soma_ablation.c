/* Tests of the ablation's pieces (soma/ablation.c) on a tiny expert and
 * synthetic bytes: the held-out split and minibatches by brute force,
 * the packed population against one body at a time, the packed exact
 * gradient against central differences, span losses against window by
 * window, relative variances by hand, and a packed independent step
 * against each expert stepped alone. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "kernels/soma_model.h"
#include "kernels/spsa.h"
#include "soma/ablation.h"
#include "tests/testutil.h"

static kn_soma_model *
tiny_model(uint64_t seed)
{
	kn_soma_shape shape = { 8, 2, 2 };
	char err[KN_ERR_LEN];
	const kn_backend *be;
	kn_soma_model *m = NULL;

	ck_assert_int_eq(kn_pool_init(2, err), 0);
	be = kn_backend_get(KN_BACKEND_CPU, NULL, err);
	ck_assert_ptr_nonnull(be);
	ck_assert_int_eq(kn_soma_create(&m, &shape, be, err), 0);
	ck_assert_int_eq(kn_soma_init(m, seed, err), 0);
	return m;
}

static void
random_bytes(unsigned char *x, size_t n, int lo, int hi, uint64_t seed)
{
	kn_rng r;
	size_t i;

	kn_rng_init(&r, seed, 0);
	for (i = 0; i < n; i++)
		x[i] = (unsigned char)(lo + (int)kn_rng_below(&r,
		    (uint64_t)(hi - lo)));
}

static void
random_tokens(int32_t *t, size_t n, uint64_t seed)
{
	kn_rng r;
	size_t i;

	kn_rng_init(&r, seed, 1);
	for (i = 0; i < n; i++)
		t[i] = (int32_t)kn_rng_below(&r, 256);
}

/* groups copies of the model's body, each moved by noise of its own */
static float *
packed_bodies(kn_soma_model *m, int groups, int K, uint64_t seed)
{
	size_t nb = kn_soma_body_params(kn_soma_get_shape(m)), i;
	float *t = tu_alloc_fill((size_t)K * groups * nb, -0.05f, 0.05f, seed);
	float *body = malloc(nb * sizeof(float));
	int c;

	kn_soma_get_body(m, body);
	for (c = 0; c < K * groups; c++)
		for (i = 0; i < nb; i++)
			t[(size_t)c * nb + i] += body[i];
	free(body);
	return t;
}

START_TEST(test_train_len)
{
	/* the tail is ceil(len / 50) */
	ck_assert_uint_eq(sa_abl_train_len(100), 98);
	ck_assert_uint_eq(sa_abl_train_len(101), 98);
	ck_assert_uint_eq(sa_abl_train_len(50), 49);
	ck_assert_uint_eq(sa_abl_train_len(2), 1);
	ck_assert_uint_eq(sa_abl_train_len(1), 0);
	ck_assert_uint_eq(sa_abl_train_len(0), 0);
	ck_assert_uint_eq(sa_abl_train_len(4561981), 4561981 - 91240);
}
END_TEST

/* Every window is a substring of the training part (found by brute
 * force), the tail's bytes never show, both ends of the range are
 * reached, and the draw is a function of its key alone. */
START_TEST(test_batch)
{
	enum { LEN = 3000, B = 3, T = 7, STEPS = 300 };
	unsigned char data[LEN];
	int32_t tok[B * (T + 1)], again[B * (T + 1)];
	size_t train = sa_abl_train_len(LEN), lo = LEN, hi = 0, o;
	char err[KN_ERR_LEN];
	int step, b, t, found, differ = 0;

	random_bytes(data, train, 0, 200, 5);
	random_bytes(data + train, LEN - train, 200, 256, 6);
	for (step = 0; step < STEPS; step++) {
		ck_assert_int_eq(sa_abl_batch(data, train, B, T, 9, 2,
		    (uint64_t)step, tok, err), 0);
		for (b = 0; b < B; b++) {
			found = 0;
			for (o = 0; o + T + 1 <= train && !found; o++) {
				for (t = 0; t <= T; t++)
					if (tok[b * (T + 1) + t] != data[o + t])
						break;
				if (t > T) {
					found = 1;
					lo = o < lo ? o : lo;
					hi = o > hi ? o : hi;
				}
			}
			ck_assert_msg(found, "window %d of step %d is not in "
			    "the training part", b, step);
		}
		ck_assert_int_eq(sa_abl_batch(data, train, B, T, 9, 2,
		    (uint64_t)step, again, err), 0);
		ck_assert_mem_eq(tok, again, sizeof(tok));
		ck_assert_int_eq(sa_abl_batch(data, train, B, T, 9, 3,
		    (uint64_t)step, again, err), 0);
		differ += memcmp(tok, again, sizeof(tok)) != 0;
	}
	ck_assert_int_eq(differ, STEPS);
	/* 900 uniform draws over 2934 offsets: both ends come within 50 */
	ck_assert_uint_lt(lo, 50);
	ck_assert_uint_gt(hi, train - T - 1 - 50);
	ck_assert_uint_le(hi, train - T - 1);
	ck_assert_int_eq(sa_abl_batch(data, T, B, T, 9, 2, 0, tok, err),
	    KN_EINVAL);
}
END_TEST

START_TEST(test_packed_eval)
{
	enum { G = 3, K = 5, B = 2, T = 5 };
	kn_soma_model *m = tiny_model(3);
	size_t nb = kn_soma_body_params(kn_soma_get_shape(m));
	float *thetas = packed_bodies(m, G, K, 11);
	float losses[K * G];
	char err[KN_ERR_LEN];
	sa_abl_packed p;
	double want;
	int k, g;

	ck_assert_int_eq(sa_abl_packed_init(&p, m, G, B, T, K, err), 0);
	random_tokens(p.tokens, (size_t)G * B * (T + 1), 4);
	ck_assert_int_eq(sa_abl_packed_eval(&p, thetas, K, losses, err), 0);
	for (k = 0; k < K; k++)
		for (g = 0; g < G; g++) {
			ck_assert_int_eq(kn_soma_set_body(m, thetas +
			    ((size_t)k * G + g) * nb, err), 0);
			ck_assert_int_eq(kn_soma_loss(m, p.tokens +
			    (size_t)g * B * (T + 1), B, T, &want, err), 0);
			ck_assert_double_eq_tol(losses[k * G + g], want,
			    1e-5 * want);
		}
	ck_assert_int_eq(sa_abl_packed_eval(&p, thetas, K + 1, losses, err),
	    KN_EINVAL);
	sa_abl_packed_free(&p);
	free(thetas);
	kn_soma_free(m);
	kn_pool_shutdown();
}
END_TEST

/* grad_g . z_g against central differences of group g's loss along z,
 * and group h's loss unmoved by a step in group g's segment (the summed
 * loss is separable). */
START_TEST(test_packed_grad)
{
	enum { G = 2, B = 3, T = 6 };
	const float h = 1e-2f;
	kn_soma_model *m = tiny_model(5);
	size_t nb = kn_soma_body_params(kn_soma_get_shape(m)), n = G * nb, i;
	float *theta = packed_bodies(m, G, 1, 12);
	float *grad = malloc(n * sizeof(float));
	float *two = malloc(2 * n * sizeof(float));
	float *z = tu_alloc_fill(nb, -1.0f, 1.0f, 13);
	float base[G], losses[2 * G];
	char err[KN_ERR_LEN];
	sa_abl_packed p;
	int g;

	ck_assert_int_eq(sa_abl_packed_init(&p, m, G, B, T, 2, err), 0);
	random_tokens(p.tokens, (size_t)G * B * (T + 1), 7);
	ck_assert_int_eq(sa_abl_packed_grad(&p, theta, grad, err), 0);
	ck_assert_int_eq(sa_abl_packed_eval(&p, theta, 1, base, err), 0);
	for (g = 0; g < G; g++) {
		double dot = 0, fd;

		memcpy(two, theta, n * sizeof(float));
		memcpy(two + n, theta, n * sizeof(float));
		for (i = 0; i < nb; i++) {
			two[g * nb + i] += h * z[i];
			two[n + g * nb + i] -= h * z[i];
			dot += (double)grad[g * nb + i] * z[i];
		}
		ck_assert_int_eq(sa_abl_packed_eval(&p, two, 2, losses, err),
		    0);
		fd = ((double)losses[g] - losses[G + g]) / (2.0 * h);
		tu_report("packed gradient vs central difference",
		    fabs(fd - dot) / fabs(dot));
		ck_assert_double_eq_tol(fd, dot, 2e-2 * fabs(dot));
		ck_assert_float_eq(losses[1 - g], base[1 - g]);
	}
	sa_abl_packed_free(&p);
	free(theta);
	free(grad);
	free(two);
	free(z);
	kn_soma_free(m);
	kn_pool_shutdown();
}
END_TEST

START_TEST(test_span_loss)
{
	enum { LEN = 200, T = 6, B = 4, K = 2 };
	kn_soma_model *m = tiny_model(6);
	size_t nb = kn_soma_body_params(kn_soma_get_shape(m));
	float *bodies = packed_bodies(m, K, 1, 14);
	unsigned char data[LEN];
	int32_t win[T + 1];
	double got[K], want, sum;
	char err[KN_ERR_LEN];
	int k, w, t, windows = (LEN - 1) / T;

	random_bytes(data, LEN, 0, 256, 8);
	ck_assert_int_eq(sa_abl_span_loss(m, bodies, K, data, LEN, B, T, got,
	    err), 0);
	for (k = 0; k < K; k++) {
		ck_assert_int_eq(kn_soma_set_body(m, bodies + k * nb, err), 0);
		sum = 0;
		for (w = 0; w < windows; w++) {
			for (t = 0; t <= T; t++)
				win[t] = data[w * T + t];
			ck_assert_int_eq(kn_soma_loss(m, win, 1, T, &want,
			    err), 0);
			sum += want;
		}
		ck_assert_double_eq_tol(got[k], sum / windows,
		    1e-5 * sum / windows);
	}
	ck_assert_int_eq(sa_abl_span_loss(m, bodies, K, data, T, B, T, got,
	    err), KN_EINVAL);
	free(bodies);
	kn_soma_free(m);
	kn_pool_shutdown();
}
END_TEST

START_TEST(test_relvar)
{
	const float g[] = { 1, 0, 3, 2, 2, 4 };
	const float ref[] = { 2, 1 }, zero[] = { 0, 0 };
	double relvar = -1, spread = -1;
	char err[KN_ERR_LEN];

	/* |g_r - ref|^2 = 2, 2, 9 over |ref|^2 = 5; mean (2, 2): deviations
	 * 5, 1, 4 over R - 1 = 2 */
	ck_assert_int_eq(sa_abl_relvar(g, 3, 2, ref, &relvar, &spread, err),
	    0);
	ck_assert_double_eq_tol(relvar, 13.0 / 15.0, 1e-12);
	ck_assert_double_eq_tol(spread, 5.0, 1e-12);
	relvar = -1;
	ck_assert_int_eq(sa_abl_relvar(g, 2, 2, NULL, &relvar, &spread, err),
	    0);
	ck_assert_double_eq(relvar, -1);
	ck_assert_double_eq_tol(spread, 4.0, 1e-12);
	ck_assert_int_eq(sa_abl_relvar(g, 1, 2, ref, &relvar, &spread, err),
	    KN_EINVAL);
	ck_assert_int_eq(sa_abl_relvar(g, 3, 2, zero, &relvar, &spread, err),
	    KN_EINVAL);
}
END_TEST

/* Experts packed in one theta in independent mode step exactly as each
 * stepped alone with its own expert id and minibatch. */
START_TEST(test_packed_step_is_separate)
{
	enum { G = 2, B = 2, T = 5, STEPS = 3 };
	kn_soma_model *m = tiny_model(7);
	size_t nb = kn_soma_body_params(kn_soma_get_shape(m));
	float *packed = packed_bodies(m, G, 1, 15);
	float *alone = malloc(G * nb * sizeof(float));
	char err[KN_ERR_LEN];
	kn_spsa_config c;
	sa_abl_packed pp, p1;
	kn_spsa s;
	int g, step;

	memcpy(alone, packed, G * nb * sizeof(float));
	kn_spsa_config_default(&c);
	c.P = 4;
	c.k_max = 3;    /* chunks that do not divide 2P */
	c.seed = 21;
	c.expert = 10;
	c.groups = G;
	ck_assert_int_eq(sa_abl_packed_init(&pp, m, G, B, T, c.k_max, err),
	    0);
	ck_assert_int_eq(sa_abl_packed_init(&p1, m, 1, B, T, c.k_max, err),
	    0);
	ck_assert_int_eq(kn_spsa_init(&s, G * nb, &c, err), 0);
	for (step = 0; step < STEPS; step++) {
		random_tokens(pp.tokens, (size_t)G * B * (T + 1), 100 + step);
		ck_assert_int_eq(kn_spsa_step(&s, packed, sa_abl_packed_eval,
		    &pp, NULL, err), 0);
	}
	kn_spsa_free(&s);
	c.groups = 1;
	for (g = 0; g < G; g++) {
		c.expert = 10 + (uint64_t)g;
		ck_assert_int_eq(kn_spsa_init(&s, nb, &c, err), 0);
		for (step = 0; step < STEPS; step++) {
			random_tokens(pp.tokens, (size_t)G * B * (T + 1),
			    100 + step);
			memcpy(p1.tokens, pp.tokens + (size_t)g * B * (T + 1),
			    (size_t)B * (T + 1) * sizeof(int32_t));
			ck_assert_int_eq(kn_spsa_step(&s, alone + g * nb,
			    sa_abl_packed_eval, &p1, NULL, err), 0);
		}
		kn_spsa_free(&s);
	}
	tu_report("packed step vs alone", tu_max_rel_err(packed, alone,
	    G * nb, 1e-3));
	ck_assert_double_le(tu_max_rel_err(packed, alone, G * nb, 1e-3),
	    1e-6);
	sa_abl_packed_free(&pp);
	sa_abl_packed_free(&p1);
	free(packed);
	free(alone);
	kn_soma_free(m);
	kn_pool_shutdown();
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("soma_ablation");
	TCase *data = tcase_create("data");
	TCase *model = tcase_create("model");

	tcase_add_test(data, test_train_len);
	tcase_add_test(data, test_batch);
	tcase_add_test(data, test_relvar);
	tcase_add_test(model, test_packed_eval);
	tcase_add_test(model, test_packed_grad);
	tcase_add_test(model, test_span_loss);
	tcase_add_test(model, test_packed_step_is_separate);
	suite_add_tcase(s, data);
	suite_add_tcase(s, model);
	return tu_run_suite(s);
}
