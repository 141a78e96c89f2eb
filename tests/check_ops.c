/* Every CPU op against values computed another way: central differences
 * for each gradient, direct loops for the rest.  The largest relative
 * error of each gradient check is written to the log. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/convert.h"
#include "kernels/pool.h"
#include "tests/testutil.h"

static const kn_backend *be;

/* sum_i r[i] * out[i] in double: a scalar loss whose gradient in out is r */
static double
dot(const float *r, const float *out, size_t n)
{
	double s = 0.0;
	size_t i;

	for (i = 0; i < n; i++)
		s += (double)r[i] * out[i];
	return s;
}

struct op_ctx {
	int N, T, C, OC, B, NH, V, mask;
	float *x, *w, *b, *out, *r, *mean, *rstd, *wpe, *att, *losses;
	int32_t *sym;
	float *weight;
};

static double
embed_loss(void *p)
{
	struct op_ctx *c = p;

	be->embed_forward(c->out, c->sym, c->w, c->wpe, c->N, c->T, c->C);
	return dot(c->r, c->out, (size_t)c->N * c->C);
}

START_TEST(test_embed_grad)
{
	struct op_ctx c = { .N = 12, .T = 4, .C = 8 };
	float *dwte = calloc(257 * 8, sizeof(float));
	float *dwpe = calloc(4 * 8, sizeof(float));
	double e1, e2;
	int i;

	c.sym = malloc(12 * sizeof(int32_t));
	for (i = 0; i < 12; i++)
		c.sym[i] = (i * 37) % 257;
	c.sym[5] = c.sym[1];    /* a repeated symbol must accumulate */
	c.w = tu_alloc_fill(257 * 8, -1, 1, 1);
	c.wpe = tu_alloc_fill(4 * 8, -1, 1, 2);
	c.r = tu_alloc_fill(12 * 8, -1, 1, 3);
	c.out = calloc(12 * 8, sizeof(float));
	be->embed_backward(dwte, dwpe, c.r, c.sym, 12, 4, 8);
	e1 = tu_gradcheck(embed_loss, &c, c.w, dwte, 257 * 8, 2056, 1e-2f, 1e-3);
	e2 = tu_gradcheck(embed_loss, &c, c.wpe, dwpe, 4 * 8, 32, 1e-2f, 1e-3);
	tu_report("embed dwte", e1);
	tu_report("embed dwpe", e2);
	ck_assert_double_lt(e1, 1e-3);
	ck_assert_double_lt(e2, 1e-3);
	free(dwte); free(dwpe); free(c.sym); free(c.w); free(c.wpe);
	free(c.r); free(c.out);
}
END_TEST

static double
ln_loss(void *p)
{
	struct op_ctx *c = p;

	be->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b,
	    c->N, c->C);
	return dot(c->r, c->out, (size_t)c->N * c->C);
}

START_TEST(test_layernorm_grad)
{
	struct op_ctx c = { .N = 40, .C = 24 };
	size_t nc = 40 * 24;
	float *dx = calloc(nc, sizeof(float)), *dw = calloc(24, sizeof(float));
	float *db = calloc(24, sizeof(float));
	double ex, ew, eb;

	c.x = tu_alloc_fill(nc, -2, 2, 4);
	c.w = tu_alloc_fill(24, 0.5f, 1.5f, 5);
	c.b = tu_alloc_fill(24, -0.5f, 0.5f, 6);
	c.r = tu_alloc_fill(nc, -1, 1, 7);
	c.out = calloc(nc, sizeof(float));
	c.mean = calloc(40, sizeof(float));
	c.rstd = calloc(40, sizeof(float));
	ln_loss(&c);
	be->layernorm_backward(dx, dw, db, c.r, c.x, c.w, c.mean, c.rstd, 40, 24);
	ex = tu_gradcheck(ln_loss, &c, c.x, dx, nc, 300, 1e-2f, 1e-2);
	ew = tu_gradcheck(ln_loss, &c, c.w, dw, 24, 24, 1e-2f, 1e-2);
	eb = tu_gradcheck(ln_loss, &c, c.b, db, 24, 24, 1e-2f, 1e-2);
	tu_report("layernorm dinp", ex);
	tu_report("layernorm dw", ew);
	tu_report("layernorm db", eb);
	ck_assert_double_lt(ex, 2e-2);
	ck_assert_double_lt(ew, 1e-2);
	ck_assert_double_lt(eb, 1e-2);
	free(dx); free(dw); free(db); free(c.x); free(c.w); free(c.b);
	free(c.r); free(c.out); free(c.mean); free(c.rstd);
}
END_TEST

static double
matmul_loss(void *p)
{
	struct op_ctx *c = p;

	be->matmul_forward(c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
	return dot(c->r, c->out, (size_t)c->N * c->OC);
}

START_TEST(test_matmul_grad)
{
	struct op_ctx c = { .N = 37, .C = 19, .OC = 23 };
	float *dx = calloc(37 * 19, sizeof(float));
	float *dw = calloc(23 * 19, sizeof(float)), *db = calloc(23, sizeof(float));
	double ex, ew, eb;

	c.x = tu_alloc_fill(37 * 19, -1, 1, 8);
	c.w = tu_alloc_fill(23 * 19, -1, 1, 9);
	c.b = tu_alloc_fill(23, -1, 1, 10);
	c.r = tu_alloc_fill(37 * 23, -1, 1, 11);
	c.out = calloc(37 * 23, sizeof(float));
	be->matmul_backward(dx, dw, db, c.r, c.x, c.w, 37, 19, 23);
	ex = tu_gradcheck(matmul_loss, &c, c.x, dx, 37 * 19, 200, 1e-2f, 1e-2);
	ew = tu_gradcheck(matmul_loss, &c, c.w, dw, 23 * 19, 200, 1e-2f, 1e-2);
	eb = tu_gradcheck(matmul_loss, &c, c.b, db, 23, 23, 1e-2f, 1e-2);
	tu_report("matmul dinp", ex);
	tu_report("matmul dw", ew);
	tu_report("matmul dbias", eb);
	ck_assert_double_lt(ex, 1e-2);
	ck_assert_double_lt(ew, 1e-2);
	ck_assert_double_lt(eb, 1e-2);
	/* parameter gradients accumulate: a second call doubles them */
	{
		float *dw1 = malloc(23 * 19 * sizeof(float));

		memcpy(dw1, dw, 23 * 19 * sizeof(float));
		be->matmul_backward(NULL, dw, NULL, c.r, c.x, c.w, 37, 19, 23);
		for (int i = 0; i < 23 * 19; i++)
			ck_assert_float_eq_tol(dw[i], 2 * dw1[i], 1e-4f);
		free(dw1);
	}
	free(dx); free(dw); free(db); free(c.x); free(c.w); free(c.b);
	free(c.r); free(c.out);
}
END_TEST

static double
att_loss(void *p)
{
	struct op_ctx *c = p;

	be->attention_forward(c->out, c->att, c->x, c->B, c->T, c->C, c->NH,
	    c->mask);
	return dot(c->r, c->out, (size_t)c->B * c->T * c->C);
}

/* Whether query i sees key j under mask (KN_ATT_* in kernels/backend.h),
 * written from the definition, apart from the kernels' ranges. */
static int
sees(int mask, int T, int i, int j)
{
	int n = T / 2, L = mask < 0 ? -mask : mask;
	int noisy_i = i < n, noisy_j = j < n;

	if (mask >= 0)
		return mask == 0 || j / L <= i / L;
	if (!noisy_i)
		return !noisy_j && (j - n) / L <= (i - n) / L;
	return noisy_j ? j / L == i / L : (j - n) / L < i / L;
}

static void
attention_case(int mask, int T)
{
	struct op_ctx c = { .B = 2, .T = T, .C = 12, .NH = 3, .mask = mask };
	size_t N = 2 * (size_t)T, nq = N * 36, natt = 2 * 3 * (size_t)T * T;
	float *dqkv = calloc(nq, sizeof(float));
	float *scratch = calloc(natt, sizeof(float));
	char what[64];
	double e;
	int b, i, j;

	c.x = tu_alloc_fill(nq, -1.5f, 1.5f, 12 + (mask != 0));
	c.r = tu_alloc_fill(N * 12, -1, 1, 14);
	c.out = calloc(N * 12, sizeof(float));
	c.att = calloc(natt, sizeof(float));
	att_loss(&c);
	/* rows of att are distributions over the keys the mask shows, with
	 * nothing anywhere else */
	for (b = 0; b < 2 * 3; b++)
		for (i = 0; i < T; i++) {
			double s = 0;

			for (j = 0; j < T; j++) {
				float a = c.att[((size_t)b * T + i) * T + j];

				if (!sees(mask, T, i, j))
					ck_assert_float_eq(a, 0.0f);
				else
					ck_assert_float_gt(a, 0.0f);
				s += a;
			}
			ck_assert_double_eq_tol(s, 1.0, 1e-5);
		}
	be->attention_backward(dqkv, scratch, c.r, c.x, c.att, 2, T, 12, 3,
	    mask);
	e = tu_gradcheck(att_loss, &c, c.x, dqkv, nq, (int)(N * 36), 1e-2f,
	    1e-2);
	snprintf(what, sizeof(what), "attention dqkv (mask %d, T %d)", mask,
	    T);
	tu_report(what, e);
	ck_assert_double_lt(e, 2e-2);
	free(dqkv); free(scratch); free(c.x); free(c.r); free(c.out);
	free(c.att);
}

START_TEST(test_attention_grad)
{
	attention_case(KN_ATT_FULL, 7);
	attention_case(KN_ATT_CAUSAL, 7);
	/* block-causal over blocks of 3, and the twin rows of training with
	 * blocks of 2: two copies of a window of 6 */
	attention_case(3, 9);
	attention_case(-2, 12);
}
END_TEST

static double
gelu_loss(void *p)
{
	struct op_ctx *c = p;

	be->gelu_forward(c->out, c->x, (size_t)c->N);
	return dot(c->r, c->out, (size_t)c->N);
}

START_TEST(test_gelu)
{
	struct op_ctx c = { .N = 1000 };
	float *dx = calloc(1000, sizeof(float));
	double e, worst = 0;
	int i;

	c.x = tu_alloc_fill(1000, -6, 6, 15);
	c.r = tu_alloc_fill(1000, -1, 1, 16);
	c.out = calloc(1000, sizeof(float));
	gelu_loss(&c);
	/* against libm's tanh */
	for (i = 0; i < 1000; i++) {
		double x = c.x[i];
		double ref = 0.5 * x * (1 + tanh(0.7978845608028654 *
		    (x + 0.044715 * x * x * x)));

		worst = fmax(worst, fabs(ref - c.out[i]) / fmax(fabs(ref), 1e-3));
	}
	tu_report("gelu forward vs libm", worst);
	ck_assert_double_lt(worst, 1e-5);
	be->gelu_backward(dx, c.x, c.r, 1000);
	e = tu_gradcheck(gelu_loss, &c, c.x, dx, 1000, 1000, 1e-3f, 1e-2);
	tu_report("gelu dinp", e);
	ck_assert_double_lt(e, 1e-2);
	/* in place: dinp aliasing dout */
	memcpy(dx, c.r, 1000 * sizeof(float));
	be->gelu_backward(dx, c.x, dx, 1000);
	be->gelu_backward(c.out, c.x, c.r, 1000);
	ck_assert_mem_eq(dx, c.out, 1000 * sizeof(float));
	free(dx); free(c.x); free(c.r); free(c.out);
}
END_TEST

static double
xent_loss(void *p)
{
	struct op_ctx *c = p;
	double s = 0;
	int i;

	be->xent_forward_backward(c->losses, NULL, c->x, c->sym, c->weight,
	    c->N, c->V, 1.0f);
	for (i = 0; i < c->N; i++)
		s += c->losses[i];
	return s;
}

START_TEST(test_xent)
{
	struct op_ctx c = { .N = 9, .V = 256 };
	float *dl = calloc(9 * 256, sizeof(float));
	double e, ref;
	int i, k;

	c.x = tu_alloc_fill(9 * 256, -4, 4, 17);
	c.sym = malloc(9 * sizeof(int32_t));
	c.weight = malloc(9 * sizeof(float));
	c.losses = calloc(9, sizeof(float));
	for (i = 0; i < 9; i++) {
		c.sym[i] = (i * 71) % 256;
		c.weight[i] = (i % 3 == 0) ? 0.0f : 0.25f * i;
	}
	xent_loss(&c);
	for (i = 0; i < 9; i++) {
		double m = -1e30, s = 0;

		for (k = 0; k < 256; k++)
			m = fmax(m, c.x[i * 256 + k]);
		for (k = 0; k < 256; k++)
			s += exp(c.x[i * 256 + k] - m);
		ref = c.weight[i] * (m + log(s) - c.x[i * 256 + c.sym[i]]);
		ck_assert_double_eq_tol(c.losses[i], ref, 1e-5 * fmax(1, ref));
	}
	be->xent_forward_backward(c.losses, dl, c.x, c.sym, c.weight, 9, 256,
	    1.0f);
	for (k = 0; k < 256; k++)
		ck_assert_float_eq(dl[3 * 256 + k], 0.0f);  /* weight 0 */
	e = tu_gradcheck(xent_loss, &c, c.x, dl, 9 * 256, 2304, 5e-2f, 1e-2);
	tu_report("xent dlogits", e);
	ck_assert_double_lt(e, 1e-2);
	/* in place, scaled */
	be->xent_forward_backward(c.losses, c.x, c.x, c.sym, c.weight, 9, 256,
	    0.5f);
	for (i = 0; i < 9 * 256; i++)
		ck_assert_float_eq_tol(c.x[i], 0.5f * dl[i], 1e-7f);
	free(dl); free(c.x); free(c.sym); free(c.weight); free(c.losses);
}
END_TEST

START_TEST(test_residual_scale_sumsq)
{
	size_t n = 100003, i;
	float *a = tu_alloc_fill(n, -1, 1, 18), *b = tu_alloc_fill(n, -1, 1, 19);
	float *o = calloc(n, sizeof(float));
	double ref = 0, got;

	be->residual_forward(o, a, b, n);
	for (i = 0; i < n; i++)
		ck_assert_float_eq(o[i], a[i] + b[i]);
	for (i = 0; i < n; i++)
		ref += (double)a[i] * a[i];
	got = be->sumsq(a, n);
	ck_assert_double_eq_tol(got, ref, 1e-5 * ref);
	be->scale(a, 0.5f, n);
	for (i = 0; i < n; i++)
		ck_assert_float_eq(a[i] * 2.0f, o[i] - b[i]);
	free(a); free(b); free(o);
}
END_TEST

/* The hand-computed step: p=1, g=0.5, lr=0.1, betas (0.9, 0.999),
 * wd 0.1, eps 1e-8.  m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25, so the
 * step is 0.1 * 0.5/0.5 = 0.1 and decay takes 1 * 0.1 * 0.1: p = 0.89.
 * Then g = -0.25 at t = 2: m = 0.02, v = 0.00031225,
 * m^ = 0.02/0.19 = 0.1052632, v^ = 0.00031225/0.001999 = 0.1562031,
 * p = 0.89 * 0.99 - 0.1 * 0.1052632/0.3952254 = 0.8544663. */
START_TEST(test_adamw_hand)
{
	float p = 1.0f, m = 0.0f, v = 0.0f, g = 0.5f;

	be->adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f,
	    1, 1.0f);
	ck_assert_float_eq_tol(m, 0.05f, 1e-7f);
	ck_assert_float_eq_tol(v, 0.00025f, 1e-8f);
	ck_assert_float_eq_tol(p, 0.89f, 1e-6f);
	g = -0.25f;
	be->adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f,
	    2, 1.0f);
	ck_assert_float_eq_tol(m, 0.02f, 1e-7f);
	ck_assert_float_eq_tol(v, 0.00031225f, 1e-8f);
	ck_assert_float_eq_tol(p, 0.8544663f, 2e-6f);
	/* gscale multiplies the gradient before anything else */
	p = 1.0f; m = 0.0f; v = 0.0f; g = 1.0f;
	be->adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f,
	    1, 0.5f);
	ck_assert_float_eq_tol(m, 0.05f, 1e-7f);
	ck_assert_float_eq_tol(p, 0.9f, 1e-6f);
}
END_TEST

START_TEST(test_sample)
{
	float logits[2 * 256], u[2], probs[256];
	int32_t out[2];
	int counts[256] = { 0 }, k, draws = 20000;
	double total = 0, worst = 0;

	tu_fill(logits, 512, -2, 2, 20);
	logits[77] = 5.0f;
	be->sample(out, logits, u, 1, 256, 0.0f);
	ck_assert_int_eq(out[0], 77);
	/* frequencies follow softmax(l / 0.8) */
	for (k = 0; k < 256; k++)
		total += probs[k] = (float)exp(logits[k] / 0.8);
	for (k = 0; k < draws; k++) {
		u[0] = (k + 0.5f) / draws;
		be->sample(out, logits, u, 1, 256, 0.8f);
		ck_assert_int_ge(out[0], 0);
		ck_assert_int_lt(out[0], 256);
		counts[out[0]]++;
	}
	for (k = 0; k < 256; k++)
		worst = fmax(worst, fabs(counts[k] / (double)draws -
		    probs[k] / total));
	ck_assert_double_lt(worst, 1e-3);
}
END_TEST

/* The fp16-storage layer against a direct double loop over the widened
 * weights, for the few-row shapes of decoding (the path that reads fp16
 * weights in place where the CPU has it) and more rows (widen and GEMM),
 * tails, odd column counts and sliced inputs included; and bitwise the
 * same on 1 and 2 threads. */
START_TEST(test_matmul_f16)
{
	/* C = 2100: several slices of the few-row path's inputs, and both
	 * of its tails */
	static const int Ns[] = { 1, 2, 3, 4, 5, 8, 9 }, Cs[] = { 16, 37, 64,
	    100, 200, 2100 }, OCs[] = { 1, 65, 130 };
	size_t ni, ci, oi, k;

	for (ni = 0; ni < sizeof(Ns) / sizeof(Ns[0]); ni++)
	for (ci = 0; ci < sizeof(Cs) / sizeof(Cs[0]); ci++)
	for (oi = 0; oi < sizeof(OCs) / sizeof(OCs[0]); oi++) {
		int N = Ns[ni], C = Cs[ci], OC = OCs[oi], n, o, c, t;
		size_t nw = (size_t)OC * C;
		float *x = malloc((size_t)N * C * sizeof(float));
		float *wf = malloc(nw * sizeof(float));
		float *bias = malloc((size_t)OC * sizeof(float));
		float *out[2];
		uint16_t *wh = malloc(nw * sizeof(uint16_t));
		void *scratch;

		for (k = 0; k < (size_t)N * C; k++)
			x[k] = (float)((k * 37) % 101) / 50.0f - 1.0f;
		for (k = 0; k < nw; k++)
			wf[k] = (float)((k * 53) % 97) / 40.0f - 1.2f;
		for (o = 0; o < OC; o++)
			bias[o] = 0.01f * (float)o;
		kn_f32_to_f16(wh, wf, nw);
		kn_f16_to_f32(wf, wh, nw);
		for (t = 0; t < 2; t++) {
			ck_assert_int_eq(kn_pool_init(t + 1, NULL), 0);
			out[t] = malloc((size_t)N * OC * sizeof(float));
			scratch = malloc(be->matmul_f16_scratch(N, C, OC));
			be->matmul_forward_f16(out[t], x, wh, bias, scratch, N, C,
			    OC);
			free(scratch);
		}
		ck_assert_mem_eq(out[0], out[1], (size_t)N * OC * sizeof(float));
		for (n = 0; n < N; n++)
			for (o = 0; o < OC; o++) {
				double want = bias[o];

				for (c = 0; c < C; c++)
					want += (double)x[n * C + c] *
					    wf[(size_t)o * C + c];
				ck_assert_msg(fabs(out[0][n * OC + o] - want) <=
				    1e-5 * (1.0 + fabs(want)) * C, "N=%d C=%d OC=%d "
				    "[%d,%d]: %g, not %g", N, C, OC, n, o,
				    out[0][n * OC + o], want);
			}
		free(x);
		free(wf);
		free(bias);
		free(wh);
		free(out[0]);
		free(out[1]);
	}
}
END_TEST

static Suite *
ops_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_embed_grad);
	tcase_add_test(tc, test_layernorm_grad);
	tcase_add_test(tc, test_matmul_grad);
	tcase_add_test(tc, test_attention_grad);
	tcase_add_test(tc, test_gelu);
	tcase_add_test(tc, test_xent);
	tcase_add_test(tc, test_residual_scale_sumsq);
	tcase_add_test(tc, test_adamw_hand);
	tcase_add_test(tc, test_sample);
	tcase_add_test(tc, test_matmul_f16);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	int rc;

	be = kn_cpu_backend();
	rc = tu_run_suite(ops_suite());
	kn_pool_shutdown();
	return rc;
}
