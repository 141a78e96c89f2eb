/* Tests of the SOMA expert (kernels/soma_model.c) and its CPU ops
 * (kernels/cpu/lstm.c): every value is checked against a plain
 * double-precision reference written here, every gradient against central
 * differences of that reference, the population against one body at a
 * time, and the bits against other thread counts. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "kernels/soma_model.h"
#include "tests/testutil.h"

/* The reference */

static double
sigmoid(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

static double
gelu(double x)
{
	return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x *
	    x * x)));
}

/* One sequence through an LSTM: gx (T, 4C) the input projections, whh
 * (4C, C); h (T, C) out. */
static void
ref_lstm_seq(const double *gx, const float *whh, int T, int C, double *h)
{
	double *c = calloc((size_t)C, sizeof(double));
	double *g = malloc((size_t)4 * C * sizeof(double));
	int t, r, j;

	for (t = 0; t < T; t++) {
		for (r = 0; r < 4 * C; r++) {
			g[r] = gx[(size_t)t * 4 * C + r];
			for (j = 0; t > 0 && j < C; j++)
				g[r] += (double)whh[(size_t)r * C + j] *
				    h[(size_t)(t - 1) * C + j];
		}
		for (j = 0; j < C; j++) {
			c[j] = sigmoid(g[C + j]) * c[j] +
			    sigmoid(g[j]) * tanh(g[2 * C + j]);
			h[(size_t)t * C + j] = sigmoid(g[3 * C + j]) *
			    tanh(c[j]);
		}
	}
	free(c);
	free(g);
}

/* out (rows) = w (rows, cols) . x (cols) + b (rows; NULL: none) */
static void
ref_affine(double *out, const float *w, const float *b, const double *x,
    int rows, int cols)
{
	int r, j;

	for (r = 0; r < rows; r++) {
		out[r] = b != NULL ? b[r] : 0.0;
		for (j = 0; j < cols; j++)
			out[r] += (double)w[(size_t)r * cols + j] * x[j];
	}
}

/* The model with its input embedding ein and its decoder eout apart, so
 * that the delta rule's gradient (eout only) has a reference too. */
struct ref {
	kn_soma_shape s;
	const float *body, *ein, *eout, *bias;
	const int32_t *tokens;
	int B, T;
};

/* Mean loss over the (B, T+1) tokens; with last (B, 256), the logits of
 * the last position of each (B, T) context instead. */
static double
ref_forward(const struct ref *r, double *last)
{
	int d = r->s.width, md = r->s.mlp_mult * d, T = r->T, V = 256;
	size_t bp = kn_soma_body_params(&r->s) / r->s.blocks;
	int stride = last ? T : T + 1, b, t, l, j, v;
	double *x = malloc((size_t)T * d * sizeof(double));
	double *gx = malloc((size_t)T * 4 * d * sizeof(double));
	double *h = malloc((size_t)T * d * sizeof(double));
	double *u = malloc((size_t)md * sizeof(double));
	double *y = malloc((size_t)d * sizeof(double));
	double *lg = malloc((size_t)V * sizeof(double));
	double loss = 0.0;

	for (b = 0; b < r->B; b++) {
		const int32_t *tok = r->tokens + (size_t)b * stride;

		for (t = 0; t < T; t++)
			for (j = 0; j < d; j++)
				x[(size_t)t * d + j] =
				    r->ein[(size_t)tok[t] * d + j];
		for (l = 0; l < r->s.blocks; l++) {
			const float *w = r->body + l * bp;
			const float *wih = w, *whh = wih + 4 * d * d;
			const float *bl = whh + 4 * d * d, *w1 = bl + 4 * d;
			const float *b1 = w1 + md * d, *w2 = b1 + md;
			const float *b2 = w2 + d * md;

			for (t = 0; t < T; t++)
				ref_affine(gx + (size_t)t * 4 * d, wih, bl,
				    x + (size_t)t * d, 4 * d, d);
			ref_lstm_seq(gx, whh, T, d, h);
			for (t = 0; t < T; t++) {
				double *xt = x + (size_t)t * d;

				for (j = 0; j < d; j++)
					xt[j] += h[(size_t)t * d + j];
				ref_affine(u, w1, b1, xt, md, d);
				for (j = 0; j < md; j++)
					u[j] = gelu(u[j]);
				ref_affine(y, w2, b2, u, d, md);
				for (j = 0; j < d; j++)
					xt[j] += y[j];
			}
		}
		for (t = last ? T - 1 : 0; t < T; t++) {
			double m = -INFINITY, sum = 0.0;

			ref_affine(lg, r->eout, r->bias, x + (size_t)t * d, V,
			    d);
			if (last) {
				memcpy(last + (size_t)b * V, lg,
				    V * sizeof(double));
				continue;
			}
			for (v = 0; v < V; v++)
				m = lg[v] > m ? lg[v] : m;
			for (v = 0; v < V; v++)
				sum += exp(lg[v] - m);
			loss += m + log(sum) - lg[tok[t + 1]];
		}
	}
	free(x); free(gx); free(h); free(u); free(y); free(lg);
	return loss / ((double)r->B * T);
}

static double
ref_loss(void *ctx)
{
	return ref_forward(ctx, NULL);
}

/* Fixtures */

static const kn_backend *be;

static void
setup(void)
{
	char err[KN_ERR_LEN];

	ck_assert_int_eq(kn_pool_init(2, err), 0);
	be = kn_cpu_backend();
}

static int32_t *
random_tokens(int B, int T1, uint64_t seed)
{
	int32_t *tok = malloc((size_t)B * T1 * sizeof(int32_t));
	kn_rng r;
	int i;

	ck_assert_ptr_nonnull(tok);
	kn_rng_init(&r, seed, 9);
	for (i = 0; i < B * T1; i++)
		tok[i] = (int32_t)kn_rng_below(&r, 256);
	return tok;
}

/* A model of shape s made from seed, its parameters copied to the host. */
struct fixture {
	kn_soma_shape s;
	kn_soma_model *m;
	float *body, *dec;
	size_t nbody, ndec;
};

static void
fixture_open(struct fixture *f, int d, int mult, int blocks, uint64_t seed)
{
	char err[KN_ERR_LEN];
	kn_soma_shape s = { d, mult, blocks };

	f->s = s;
	ck_assert_msg(kn_soma_create(&f->m, &s, be, err) == 0, "%s", err);
	ck_assert_int_eq(kn_soma_init(f->m, seed, err), 0);
	f->nbody = kn_soma_body_params(&s);
	f->ndec = kn_soma_decoder_params(&s);
	f->body = malloc(f->nbody * sizeof(float));
	f->dec = malloc(f->ndec * sizeof(float));
	kn_soma_get_body(f->m, f->body);
	kn_soma_get_decoder(f->m, f->dec);
}

static void
fixture_close(struct fixture *f)
{
	kn_soma_free(f->m);
	free(f->body);
	free(f->dec);
}

static struct ref
fixture_ref(const struct fixture *f, const int32_t *tok, int B, int T)
{
	struct ref r = { f->s, f->body, f->dec, f->dec,
	    f->dec + 256 * f->s.width, tok, B, T };

	return r;
}

/* The ops */

START_TEST(test_matmul_batched)
{
	const int N = 150, C = 7, OC = 5, K = 3;
	const size_t stride = 61;       /* rows of a (K, nbody) array */
	float *inp = tu_alloc_fill((size_t)K * N * C, -1, 1, 1);
	float *w = tu_alloc_fill(K * stride, -1, 1, 2);
	float *out = malloc((size_t)K * N * OC * sizeof(float));
	double want[OC], worst = 0.0;
	int shared, k, i, o;

	for (shared = 0; shared < 2; shared++) {
		size_t is = shared ? 0 : (size_t)N * C;
		/* the bias follows the weights in each row */
		const float *bias = shared ? NULL : w + OC * C;

		be->matmul_forward_batched(out, inp, w, bias, N, C, OC, K, is,
		    stride);
		for (k = 0; k < K; k++)
			for (i = 0; i < N; i++) {
				double x[C];
				int j;

				for (j = 0; j < C; j++)
					x[j] = inp[k * is + (size_t)i * C + j];
				ref_affine(want, w + k * stride,
				    bias ? bias + k * stride : NULL, x, OC, C);
				for (o = 0; o < OC; o++) {
					size_t q = ((size_t)k * N + i) * OC + o;

					worst = fmax(worst, fabs(want[o] -
					    out[q]));
				}
			}
	}
	tu_report("matmul_forward_batched", worst);
	ck_assert_double_lt(worst, 1e-5);
	free(inp); free(w); free(out);
}
END_TEST

/* sum of R . h over an LSTM with input projections gx */
struct lstm_case {
	float *gx, *whh, *R;
	int B, T, C;
};

static double
lstm_case_loss(void *ctx)
{
	const struct lstm_case *lc = ctx;
	int C = lc->C, T = lc->T, b, q;
	double *gx = malloc((size_t)T * 4 * C * sizeof(double));
	double *h = malloc((size_t)T * C * sizeof(double)), sum = 0.0;

	for (b = 0; b < lc->B; b++) {
		for (q = 0; q < T * 4 * C; q++)
			gx[q] = lc->gx[(size_t)b * T * 4 * C + q];
		ref_lstm_seq(gx, lc->whh, T, C, h);
		for (q = 0; q < T * C; q++)
			sum += lc->R[(size_t)b * T * C + q] * h[q];
	}
	free(gx);
	free(h);
	return sum;
}

START_TEST(test_lstm_ops)
{
	/* B above the CPU's rows per task, two copies of which the second
	 * is checked, C not a multiple of the cell's column chunk */
	const int B = 11, T = 6, C = 70, K = 2;
	size_t ng = (size_t)B * T * 4 * C, nh = (size_t)B * T * C;
	size_t wstride = (size_t)4 * C * C + 5;
	struct lstm_case lc = { tu_alloc_fill(ng, -1.5, 1.5, 3),
	    NULL, tu_alloc_fill(nh, -1, 1, 4), B, T, C };
	float *whh = tu_alloc_fill(K * wstride, -0.2, 0.2, 5);
	float *gates = malloc(K * ng * sizeof(float));
	float *h = malloc(K * nh * sizeof(float)), *c = malloc(K * nh * 4);
	float *dgates = malloc(ng * sizeof(float)), *dh = malloc(nh * 4);
	float *dcell = malloc((size_t)B * C * sizeof(float));
	float *dwhh = calloc((size_t)4 * C * C, sizeof(float));
	double *href = malloc((size_t)T * C * sizeof(double));
	double *gx = malloc((size_t)T * 4 * C * sizeof(double)), worst = 0;
	int k, b, q;

	for (k = 0; k < K; k++)
		memcpy(gates + k * ng, lc.gx, ng * sizeof(float));
	be->lstm_forward(h, c, gates, whh, K, B, T, C, wstride);
	for (k = 0; k < K; k++)
		for (b = 0; b < B; b++) {
			for (q = 0; q < T * 4 * C; q++)
				gx[q] = lc.gx[(size_t)b * T * 4 * C + q];
			ref_lstm_seq(gx, whh + k * wstride, T, C, href);
			for (q = 0; q < T * C; q++) {
				double e = fabs(href[q] - h[k * nh +
				    (size_t)b * T * C + q]);

				worst = e > worst ? e : worst;
			}
		}
	tu_report("lstm_forward vs reference", worst);
	ck_assert_double_lt(worst, 2e-6);

	/* the gradient of sum R . h, copy 1's weights */
	lc.whh = whh + wstride;
	memcpy(dh, lc.R, nh * sizeof(float));
	be->lstm_backward(dgates, dwhh, dh, dcell, h + nh, c + nh,
	    gates + ng, lc.whh, B, T, C);
	worst = tu_gradcheck(lstm_case_loss, &lc, lc.gx, dgates, ng, 300,
	    1e-3f, 1e-3);
	tu_report("lstm_backward d(gx)", worst);
	ck_assert_double_lt(worst, 1e-3);
	worst = tu_gradcheck(lstm_case_loss, &lc, whh + wstride, dwhh,
	    (size_t)4 * C * C, 300, 1e-3f, 1e-3);
	tu_report("lstm_backward dW_hh", worst);
	ck_assert_double_lt(worst, 1e-3);
	free(lc.gx); free(lc.R); free(whh); free(gates); free(h); free(c);
	free(dgates); free(dh); free(dcell); free(dwhh); free(href); free(gx);
}
END_TEST

/* The model */

START_TEST(test_shape_and_init)
{
	kn_soma_shape pub = { 32, 4, 2 }, bad = { 32, 0, 2 };
	kn_soma_tensor t[16];
	struct fixture f, g;
	char err[KN_ERR_LEN];
	size_t off = 0;
	int n, i, l;

	/* per block 2 (4d d) + 4d + 2 (4d d) + 4d + d at d = 32 */
	ck_assert_uint_eq(kn_soma_body_params(&pub), 33344);
	ck_assert_uint_eq(kn_soma_decoder_params(&pub), 256 * 32 + 256);
	/* 2 blocks of 2 (4d d) + 2 (4d d), then 256 d */
	ck_assert_uint_eq(kn_soma_forward_macs(&pub), 40960);
	ck_assert_int_eq(kn_soma_check_shape(&bad, err), KN_EINVAL);
	n = kn_soma_body_tensors(&pub, t, 16);
	ck_assert_int_eq(n, 14);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(t[i].offset, off);
		off += (size_t)t[i].rows * t[i].cols;
	}
	ck_assert_uint_eq(off, 33344);
	/* every matrix of the body once a position, and the logits */
	for (i = 0, off = 256 * 32; i < n; i++)
		off += t[i].cols > 1 ? (size_t)t[i].rows * t[i].cols : 0;
	ck_assert_uint_eq(kn_soma_forward_macs(&pub), off);
	ck_assert_str_eq(t[8].name, "block1.w_hh");
	ck_assert_int_eq(t[8].rows, 128);
	ck_assert_int_eq(t[8].cols, 32);
	ck_assert_int_eq(kn_soma_decoder_tensors(&pub, t, 2), 2);
	ck_assert_str_eq(t[1].name, "dec_bias");
	ck_assert_uint_eq(t[1].offset, 256 * 32);

	/* the same seed gives the same bytes whatever the thread count */
	fixture_open(&f, 32, 4, 2, 7);
	ck_assert_int_eq(kn_pool_init(1, err), 0);
	fixture_open(&g, 32, 4, 2, 7);
	ck_assert_mem_eq(f.body, g.body, f.nbody * sizeof(float));
	ck_assert_mem_eq(f.dec, g.dec, f.ndec * sizeof(float));
	fixture_close(&g);
	fixture_open(&g, 32, 4, 2, 8);
	ck_assert(memcmp(f.body, g.body, f.nbody * sizeof(float)) != 0);
	ck_assert(memcmp(f.dec, g.dec, f.ndec * sizeof(float)) != 0);
	kn_soma_body_tensors(&pub, t, 16);
	for (l = 0; l < 2; l++)
		for (i = 0; i < 4 * 32; i++)
			ck_assert_float_eq(f.body[t[l * 7 + 2].offset + i],
			    i >= 32 && i < 64 ? 1.0f : 0.0f);
	fixture_close(&f);
	fixture_close(&g);
}
END_TEST

START_TEST(test_loss_matches_reference)
{
	struct fixture f;
	int32_t *tok = random_tokens(5, 14, 1);
	struct ref r;
	char err[KN_ERR_LEN];
	double loss, want, logits_ref[5 * 256];
	float logits[5 * 256];
	int i;

	fixture_open(&f, 12, 3, 2, 2);
	r = fixture_ref(&f, tok, 5, 13);
	ck_assert_msg(kn_soma_loss(f.m, tok, 5, 13, &loss, err) == 0, "%s",
	    err);
	want = ref_forward(&r, NULL);
	tu_report("loss vs reference", fabs(loss - want) / want);
	ck_assert_double_lt(fabs(loss - want), 1e-5 * want);
	/* near log 256 at initialisation, as the scales intend */
	ck_assert_double_lt(fabs(loss - log(256.0)), 0.5);

	/* the last position's logits, on 5 contexts of 14 */
	r.T = 14;
	ref_forward(&r, logits_ref);
	ck_assert_int_eq(kn_soma_last_logits(f.m, tok, 5, 14, logits, err), 0);
	for (i = 0; i < 5 * 256; i++)
		ck_assert_double_lt(fabs(logits[i] - logits_ref[i]), 1e-5);

	tok[17] = 256;
	ck_assert_int_eq(kn_soma_loss(f.m, tok, 5, 13, &loss, err),
	    KN_EINVAL);
	ck_assert_int_eq(kn_soma_loss(f.m, tok, 0, 13, &loss, err),
	    KN_EINVAL);
	fixture_close(&f);
	free(tok);
}
END_TEST

START_TEST(test_gradient)
{
	/* B = 9 spans two LSTM tasks; the weights are scaled up so that the
	 * gates leave their linear range */
	const int B = 9, T = 7;
	struct fixture f;
	int32_t *tok = random_tokens(B, T + 1, 2);
	float *gb, *gd, *zb;
	struct ref r;
	char err[KN_ERR_LEN];
	double loss, worst;
	size_t i;

	fixture_open(&f, 8, 2, 2, 3);
	for (i = 0; i < f.nbody; i++)
		f.body[i] *= 2.0f;
	ck_assert_int_eq(kn_soma_set_body(f.m, f.body, err), 0);
	gb = malloc(f.nbody * sizeof(float));
	gd = malloc(f.ndec * sizeof(float));
	zb = malloc(f.nbody * sizeof(float));
	ck_assert_msg(kn_soma_forward_backward(f.m, tok, B, T, &loss, err) ==
	    0, "%s", err);
	kn_soma_get_grads(f.m, gb, gd);
	r = fixture_ref(&f, tok, B, T);
	ck_assert_double_lt(fabs(loss - ref_loss(&r)), 1e-5 * loss);
	worst = tu_gradcheck(ref_loss, &r, f.body, gb, f.nbody, f.nbody,
	    1e-3f, 1e-4);
	tu_report("body gradient", worst);
	ck_assert_double_lt(worst, 1e-3);
	/* E is both input embedding and decoder; ref's ein and eout are
	 * the same buffer, so the difference sees both uses */
	worst = tu_gradcheck(ref_loss, &r, f.dec, gd, f.ndec, 700, 3e-4f,
	    1e-4);
	tu_report("decoder gradient", worst);
	ck_assert_double_lt(worst, 1e-3);

	/* a second pass adds into the gradients */
	ck_assert_int_eq(kn_soma_forward_backward(f.m, tok, B, T, &loss, err),
	    0);
	kn_soma_get_grads(f.m, zb, NULL);
	for (i = 0; i < f.nbody; i++)
		ck_assert_float_eq_tol(zb[i], 2.0f * gb[i], 1e-6f);

	/* the delta rule: the head alone, the states held fixed */
	kn_soma_zero_grad(f.m);
	ck_assert_int_eq(kn_soma_decoder_delta(f.m, tok, B, T, &loss, err), 0);
	kn_soma_get_grads(f.m, zb, gd);
	for (i = 0; i < f.nbody; i++)
		ck_assert_float_eq(zb[i], 0.0f);
	{
		/* perturb a copy used only as the decoder */
		float *eout = malloc(f.ndec * sizeof(float));

		memcpy(eout, f.dec, f.ndec * sizeof(float));
		r.eout = eout;
		r.bias = eout + 256 * f.s.width;
		worst = tu_gradcheck(ref_loss, &r, eout, gd, f.ndec, 700,
		    1e-3f, 1e-4);
		tu_report("delta-rule gradient", worst);
		ck_assert_double_lt(worst, 1e-3);
		free(eout);
	}
	fixture_close(&f);
	free(tok); free(gb); free(gd); free(zb);
}
END_TEST

/* K bodies: the model's, perturbed by copy-dependent noise. */
static float *
population_bodies(const struct fixture *f, int K)
{
	float *bodies = malloc((size_t)K * f->nbody * sizeof(float));
	size_t i;
	int k;

	for (k = 0; k < K; k++) {
		float *bk = bodies + (size_t)k * f->nbody;

		kn_rng_fill_normal(bk, f->nbody, 0.0f, 0.05f, 11,
		    (uint64_t)k);
		for (i = 0; i < f->nbody; i++)
			bk[i] += f->body[i];
	}
	return bodies;
}

START_TEST(test_population)
{
	const int K = 5, B = 10, T = 17;
	struct fixture f;
	int32_t *tok = random_tokens(B, T + 1, 3);
	float *bodies, losses[5], grouped[5];
	char err[KN_ERR_LEN];
	double one, worst = 0.0;
	int k;

	fixture_open(&f, 16, 2, 2, 4);
	bodies = population_bodies(&f, K);
	ck_assert_msg(kn_soma_population_loss(f.m, bodies, K, tok, B, T,
	    losses, err) == 0, "%s", err);
	/* groups of 2, 2 and 1 copies */
	kn_soma_set_max_group(f.m, 2);
	ck_assert_int_eq(kn_soma_population_loss(f.m, bodies, K, tok, B, T,
	    grouped, err), 0);
	for (k = 0; k < K; k++) {
		struct ref r = fixture_ref(&f, tok, B, T);

		ck_assert_int_eq(kn_soma_set_body(f.m, bodies +
		    (size_t)k * f.nbody, err), 0);
		ck_assert_int_eq(kn_soma_loss(f.m, tok, B, T, &one, err), 0);
		worst = fmax(worst, fabs(losses[k] - one) / one);
		worst = fmax(worst, fabs(grouped[k] - one) / one);
		r.body = bodies + (size_t)k * f.nbody;
		ck_assert_double_lt(fabs(one - ref_loss(&r)), 1e-5 * one);
		if (k > 0)
			ck_assert_float_ne(losses[k], losses[k - 1]);
	}
	tu_report("population vs one body", worst);
	ck_assert_double_lt(worst, 1e-5);
	ck_assert_int_eq(kn_soma_population_loss(f.m, bodies, 0, tok, B, T,
	    losses, err), KN_EINVAL);
	fixture_close(&f);
	free(tok);
	free(bodies);
}
END_TEST

/* Population losses and the full gradient with threads threads. */
static void
run_threads(int threads, float *losses, float *grad, float *dgrad)
{
	const int K = 4, B = 20, T = 16;
	struct fixture f;
	int32_t *tok = random_tokens(B, T + 1, 5);
	float *bodies;
	char err[KN_ERR_LEN];
	double loss;

	ck_assert_int_eq(kn_pool_init(threads, err), 0);
	fixture_open(&f, 16, 4, 2, 5);
	bodies = population_bodies(&f, K);
	ck_assert_int_eq(kn_soma_population_loss(f.m, bodies, K, tok, B, T,
	    losses, err), 0);
	ck_assert_int_eq(kn_soma_forward_backward(f.m, tok, B, T, &loss, err),
	    0);
	ck_assert_int_eq(kn_soma_decoder_delta(f.m, tok, B, T, &loss, err), 0);
	kn_soma_get_grads(f.m, grad, dgrad);
	fixture_close(&f);
	free(tok);
	free(bodies);
}

START_TEST(test_thread_determinism)
{
	kn_soma_shape s = { 16, 4, 2 };
	size_t nb = kn_soma_body_params(&s), nd = kn_soma_decoder_params(&s);
	float l1[4], l2[4], l3[4];
	float *g1 = malloc(nb * 4), *g2 = malloc(nb * 4), *g3 = malloc(nb * 4);
	float *d1 = malloc(nd * 4), *d2 = malloc(nd * 4), *d3 = malloc(nd * 4);

	run_threads(1, l1, g1, d1);
	run_threads(2, l2, g2, d2);
	run_threads(3, l3, g3, d3);
	ck_assert_mem_eq(l1, l2, sizeof(l1));
	ck_assert_mem_eq(l1, l3, sizeof(l1));
	ck_assert_mem_eq(g1, g2, nb * sizeof(float));
	ck_assert_mem_eq(g1, g3, nb * sizeof(float));
	ck_assert_mem_eq(d1, d2, nd * sizeof(float));
	ck_assert_mem_eq(d1, d3, nd * sizeof(float));
	free(g1); free(g2); free(g3); free(d1); free(d2); free(d3);
}
END_TEST

/* The BPTT control as a trainer would run it: AdamW on the gradients in
 * backend memory learns a periodic text. */
START_TEST(test_bptt_learns)
{
	const int B = 4, T = 24;
	const char *text = "the cat sat on the mat. ";
	struct fixture f;
	int32_t tok[4 * 25];
	float *mb, *vb, *md, *vd;
	char err[KN_ERR_LEN];
	double first = 0.0, loss = 0.0;
	int step, i;

	for (i = 0; i < B * (T + 1); i++)
		tok[i] = (unsigned char)text[(i % (T + 1) + 5 * (i / (T + 1))) %
		    (int)strlen(text)];
	fixture_open(&f, 16, 4, 2, 6);
	mb = be->alloc(f.nbody * 4); vb = be->alloc(f.nbody * 4);
	md = be->alloc(f.ndec * 4); vd = be->alloc(f.ndec * 4);
	for (step = 1; step <= 60; step++) {
		kn_soma_zero_grad(f.m);
		ck_assert_msg(kn_soma_forward_backward(f.m, tok, B, T, &loss,
		    err) == 0, "%s", err);
		if (step == 1)
			first = loss;
		be->adamw_update(kn_soma_body(f.m), kn_soma_body_grad(f.m), mb,
		    vb, f.nbody, 1e-2f, 0.9f, 0.99f, 1e-8f, 0.0f, step, 1.0f);
		be->adamw_update(kn_soma_decoder(f.m),
		    kn_soma_decoder_grad(f.m), md, vd, f.ndec, 1e-2f, 0.9f,
		    0.99f, 1e-8f, 0.0f, step, 1.0f);
	}
	fprintf(stderr, "# bptt: loss %.3f -> %.3f in 60 steps\n", first,
	    loss);
	ck_assert_msg(loss < 0.3 * first, "loss %g -> %g", first, loss);
	be->free(mb); be->free(vb); be->free(md); be->free(vd);
	fixture_close(&f);
}
END_TEST

static Suite *
soma_suite(void)
{
	Suite *s = suite_create("soma_model");
	TCase *tc = tcase_create("soma");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_matmul_batched);
	tcase_add_test(tc, test_lstm_ops);
	tcase_add_test(tc, test_shape_and_init);
	tcase_add_test(tc, test_loss_matches_reference);
	tcase_add_test(tc, test_gradient);
	tcase_add_test(tc, test_population);
	tcase_add_test(tc, test_thread_determinism);
	tcase_add_test(tc, test_bptt_learns);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return tu_run_suite(soma_suite());
}
