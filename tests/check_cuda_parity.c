/* Parity of the CUDA backend with the CPU backend: every op of the table
 * runs on both with the same host-generated inputs, and the outputs must
 * agree within float rounding.  The largest error of each comparison goes
 * to the log.  Without a usable GPU the whole program is one TAP skip. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/convert.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"

static const kn_backend *cpu, *gpu;

/* One tensor on both backends, made from the same host values. */
struct pair {
	void *c;        /* CPU backend memory: plain host memory */
	void *g;        /* CUDA device memory */
	size_t bytes;
};

static struct pair
pair_new(const void *host, size_t bytes)
{
	struct pair p = { cpu->alloc(bytes), gpu->alloc(bytes), bytes };

	ck_assert_ptr_nonnull(p.c);
	ck_assert_msg(p.g != NULL, "CUDA alloc of %zu bytes failed", bytes);
	if (host != NULL) {
		cpu->upload(p.c, host, bytes);
		gpu->upload(p.g, host, bytes);
	}
	return p;
}

static void
pair_free(struct pair *p)
{
	cpu->free(p->c);
	gpu->free(p->g);
	p->c = p->g = NULL;
}

/* n floats, uniform in [lo, hi), a function of seed alone */
static struct pair
pair_uniform(size_t n, float lo, float hi, uint64_t seed)
{
	float *h = malloc((n ? n : 1) * sizeof(float));
	struct pair p;
	size_t i;

	ck_assert_ptr_nonnull(h);
	kn_rng_fill_uniform(h, n, seed, 1);
	for (i = 0; i < n; i++)
		h[i] = lo + (hi - lo) * h[i];
	p = pair_new(h, n * sizeof(float));
	free(h);
	return p;
}

static struct pair
pair_normal(size_t n, float mean, float std, uint64_t seed)
{
	float *h = malloc((n ? n : 1) * sizeof(float));
	struct pair p;

	ck_assert_ptr_nonnull(h);
	kn_rng_fill_normal(h, n, mean, std, seed, 2);
	p = pair_new(h, n * sizeof(float));
	free(h);
	return p;
}

/* n floats equal to x: gradients that must be overwritten start as
 * garbage, so an op that accumulates instead shows up */
static struct pair
pair_const(size_t n, float x)
{
	float *h = malloc((n ? n : 1) * sizeof(float));
	struct pair p;
	size_t i;

	ck_assert_ptr_nonnull(h);
	for (i = 0; i < n; i++)
		h[i] = x;
	p = pair_new(h, n * sizeof(float));
	free(h);
	return p;
}

/* n symbols uniform in [0, V); with masked, about half of them are V-1
 * instead, as the mask symbol is in masked diffusion */
static struct pair
pair_symbols(size_t n, int V, int masked, uint64_t seed)
{
	int32_t *h = malloc((n ? n : 1) * sizeof(int32_t));
	kn_rng r;
	struct pair p;
	size_t i;

	ck_assert_ptr_nonnull(h);
	kn_rng_init(&r, seed, 3);
	for (i = 0; i < n; i++)
		h[i] = masked && kn_rng_uniform(&r) < 0.5f ? V - 1 :
		    (int32_t)kn_rng_below(&r, (uint64_t)V);
	p = pair_new(h, n * sizeof(int32_t));
	free(h);
	return p;
}

/* Fails the test with the first CUDA failure recorded, if any. */
static void
expect_no_cuda_error(const char *what)
{
	char err[KN_ERR_LEN];

	gpu->sync();
	ck_assert_msg(gpu->status(err) == 0, "%s: CUDA error: %s", what,
	    err);
}

/* The CUDA result, downloaded: the caller frees it. */
static void *
fetch(const struct pair *p)
{
	void *h = malloc(p->bytes ? p->bytes : 1);

	ck_assert_ptr_nonnull(h);
	gpu->download(h, p->g, p->bytes);
	return h;
}

/* The error of each element is |cpu - cuda| / (|cpu| + rms(cpu)): relative
 * to the element, or to the tensor's typical size where the element is
 * near 0 after cancellation.  Fails above tol; logs the largest. */
static void
expect_close(const char *what, const struct pair *p, size_t n, double tol)
{
	const float *c = p->c;
	float *g;
	double rms = 0.0, worst = 0.0;
	size_t i, at = 0;

	expect_no_cuda_error(what);
	g = fetch(p);
	for (i = 0; i < n; i++)
		rms += (double)c[i] * c[i];
	rms = n > 0 ? sqrt(rms / n) : 0.0;
	for (i = 0; i < n; i++) {
		double e = fabs((double)c[i] - g[i]);

		if (e != 0.0)
			e /= fabs(c[i]) + rms;
		if (!(e <= worst)) {     /* NaN counts as the worst */
			worst = isnan(e) ? INFINITY : e;
			at = i;
		}
	}
	fprintf(stderr, "# %-44s max error %.3e\n", what, worst);
	ck_assert_msg(worst <= tol,
	    "%s: max error %.3e > %.1e at %zu of %zu: cpu %.9g cuda %.9g",
	    what, worst, tol, at, n, n ? c[at] : 0.0f, n ? g[at] : 0.0f);
	free(g);
}

static void
expect_equal_ints(const char *what, const struct pair *p, size_t n)
{
	const int32_t *c = p->c;
	int32_t *g;
	size_t i;

	expect_no_cuda_error(what);
	g = fetch(p);
	for (i = 0; i < n; i++)
		ck_assert_msg(c[i] == g[i], "%s: at %zu: cpu %d cuda %d", what,
		    i, c[i], g[i]);
	fprintf(stderr, "# %-44s all %zu equal\n", what, n);
	free(g);
}

/* Tolerances.  GEMM-based ops sum up to thousands of products in another
 * order than the CPU; the rest differ by a few ulps of exp and by FMA
 * contraction. */
#define TOL_EXACT 1e-6
#define TOL_POINTWISE 1e-5
#define TOL_GEMM 1e-4

START_TEST(test_embed)
{
	/* masked: one symbol holds half the positions, a long run for the
	 * GPU's sorted scatter */
	static const struct { int N, T, C, V, masked; } cases[] = {
		{ 32 * 128, 128, 256, 257, 1 }, { 32 * 128, 128, 256, 256, 0 },
		{ 21, 7, 13, 5, 0 }, { 100, 10, 40, 3, 1 }, { 1, 1, 1, 1, 0 }
	};
	char what[128];
	size_t k;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int N = cases[k].N, T = cases[k].T, C = cases[k].C;
		int V = cases[k].V;
		struct pair sym = pair_symbols((size_t)N, V, cases[k].masked,
		    10 + k);
		struct pair wte = pair_normal((size_t)V * C, 0, 1, 20 + k);
		struct pair wpe = pair_normal((size_t)T * C, 0, 1, 30 + k);
		struct pair out = pair_const((size_t)N * C, 7.0f);
		struct pair dout = pair_normal((size_t)N * C, 0, 1, 40 + k);
		/* nonzero to start with: the gradients accumulate */
		struct pair dwte = pair_normal((size_t)V * C, 0, 1, 50 + k);
		struct pair dwpe = pair_normal((size_t)T * C, 0, 1, 60 + k);

		cpu->embed_forward(out.c, sym.c, wte.c, wpe.c, N, T, C);
		gpu->embed_forward(out.g, sym.g, wte.g, wpe.g, N, T, C);
		snprintf(what, sizeof(what), "embed_forward N=%d T=%d C=%d",
		    N, T, C);
		expect_close(what, &out, (size_t)N * C, TOL_EXACT);

		cpu->embed_backward(dwte.c, dwpe.c, dout.c, sym.c, N, T, C);
		gpu->embed_backward(dwte.g, dwpe.g, dout.g, sym.g, N, T, C);
		snprintf(what, sizeof(what), "embed_backward dwte N=%d V=%d C=%d%s",
		    N, V, C, cases[k].masked ? " masked" : "");
		/* a run is summed in chunks on the GPU, in order on the CPU */
		expect_close(what, &dwte, (size_t)V * C, TOL_GEMM);
		snprintf(what, sizeof(what), "embed_backward dwpe N=%d T=%d C=%d",
		    N, T, C);
		expect_close(what, &dwpe, (size_t)T * C, TOL_EXACT);

		pair_free(&sym); pair_free(&wte); pair_free(&wpe);
		pair_free(&out); pair_free(&dout); pair_free(&dwte);
		pair_free(&dwpe);
	}
}
END_TEST

START_TEST(test_layernorm)
{
	static const struct { int N, C; } cases[] = {
		{ 32 * 128, 256 }, { 7, 37 }, { 2, 1000 }, { 3, 1 }
	};
	char what[128];
	size_t k;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int N = cases[k].N, C = cases[k].C;
		size_t n = (size_t)N * C;
		/* an offset mean, as on the residual stream */
		struct pair inp = pair_normal(n, 0.5f, 2.0f, 100 + k);
		struct pair w = pair_normal((size_t)C, 1.0f, 0.2f, 110 + k);
		struct pair b = pair_normal((size_t)C, 0.0f, 0.2f, 120 + k);
		struct pair out = pair_const(n, 7.0f);
		struct pair mean = pair_const((size_t)N, 7.0f);
		struct pair rstd = pair_const((size_t)N, 7.0f);
		struct pair dout = pair_normal(n, 0, 1, 130 + k);
		/* all three accumulate: start them nonzero */
		struct pair dinp = pair_normal(n, 0, 1, 140 + k);
		struct pair dw = pair_normal((size_t)C, 0, 1, 150 + k);
		struct pair db = pair_normal((size_t)C, 0, 1, 160 + k);

		cpu->layernorm_forward(out.c, mean.c, rstd.c, inp.c, w.c, b.c,
		    N, C);
		gpu->layernorm_forward(out.g, mean.g, rstd.g, inp.g, w.g, b.g,
		    N, C);
		snprintf(what, sizeof(what), "layernorm_forward out N=%d C=%d",
		    N, C);
		expect_close(what, &out, n, TOL_POINTWISE);
		snprintf(what, sizeof(what), "layernorm_forward mean N=%d C=%d",
		    N, C);
		expect_close(what, &mean, (size_t)N, TOL_POINTWISE);
		snprintf(what, sizeof(what), "layernorm_forward rstd N=%d C=%d",
		    N, C);
		expect_close(what, &rstd, (size_t)N, TOL_POINTWISE);

		/* Both backward passes read the CPU's statistics, so they
		 * are compared on the same inputs. */
		gpu->upload(mean.g, mean.c, (size_t)N * sizeof(float));
		gpu->upload(rstd.g, rstd.c, (size_t)N * sizeof(float));
		cpu->layernorm_backward(dinp.c, dw.c, db.c, dout.c, inp.c, w.c,
		    mean.c, rstd.c, N, C);
		gpu->layernorm_backward(dinp.g, dw.g, db.g, dout.g, inp.g, w.g,
		    mean.g, rstd.g, N, C);
		snprintf(what, sizeof(what), "layernorm_backward dinp N=%d C=%d",
		    N, C);
		expect_close(what, &dinp, n, TOL_GEMM);
		snprintf(what, sizeof(what), "layernorm_backward dw N=%d C=%d",
		    N, C);
		expect_close(what, &dw, (size_t)C, TOL_GEMM);
		snprintf(what, sizeof(what), "layernorm_backward db N=%d C=%d",
		    N, C);
		expect_close(what, &db, (size_t)C, TOL_GEMM);

		pair_free(&inp); pair_free(&w); pair_free(&b);
		pair_free(&out); pair_free(&mean); pair_free(&rstd);
		pair_free(&dout); pair_free(&dinp); pair_free(&dw);
		pair_free(&db);
	}
}
END_TEST

START_TEST(test_matmul)
{
	static const struct { int N, C, OC; } cases[] = {
		{ 32 * 128, 256, 768 }, { 32 * 128, 256, 1024 },
		{ 32 * 128, 1024, 256 }, { 7, 13, 5 }, { 1, 3, 1 }
	};
	char what[128];
	size_t k;
	int variant;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		/* variant 0: bias, dinp and dbias; 1: all three NULL */
		for (variant = 0; variant < 2; variant++) {
			int N = cases[k].N, C = cases[k].C, OC = cases[k].OC;
			uint64_t seed = 200 + 10 * k + variant;
			struct pair inp = pair_normal((size_t)N * C, 0, 1, seed);
			struct pair w = pair_normal((size_t)OC * C, 0, 0.05f,
			    seed + 1000);
			struct pair bias = pair_normal((size_t)OC, 0, 1,
			    seed + 2000);
			struct pair out = pair_const((size_t)N * OC, 7.0f);
			struct pair dout = pair_normal((size_t)N * OC, 0, 1,
			    seed + 3000);
			struct pair dinp = pair_const((size_t)N * C, 7.0f);
			struct pair dw = pair_normal((size_t)OC * C, 0, 1,
			    seed + 4000);
			struct pair dbias = pair_normal((size_t)OC, 0, 1,
			    seed + 5000);
			const char *tag = variant == 0 ? "" : " (NULLs)";

			cpu->matmul_forward(out.c, inp.c, w.c,
			    variant == 0 ? bias.c : NULL, N, C, OC);
			gpu->matmul_forward(out.g, inp.g, w.g,
			    variant == 0 ? bias.g : NULL, N, C, OC);
			snprintf(what, sizeof(what),
			    "matmul_forward N=%d C=%d OC=%d%s", N, C, OC, tag);
			expect_close(what, &out, (size_t)N * OC, TOL_GEMM);

			cpu->matmul_backward(variant == 0 ? dinp.c : NULL,
			    dw.c, variant == 0 ? dbias.c : NULL, dout.c, inp.c,
			    w.c, N, C, OC);
			gpu->matmul_backward(variant == 0 ? dinp.g : NULL,
			    dw.g, variant == 0 ? dbias.g : NULL, dout.g, inp.g,
			    w.g, N, C, OC);
			snprintf(what, sizeof(what),
			    "matmul_backward dinp N=%d C=%d OC=%d%s", N, C, OC,
			    tag);
			expect_close(what, &dinp, (size_t)N * C, TOL_GEMM);
			snprintf(what, sizeof(what),
			    "matmul_backward dw N=%d C=%d OC=%d%s", N, C, OC,
			    tag);
			expect_close(what, &dw, (size_t)OC * C, TOL_GEMM);
			snprintf(what, sizeof(what),
			    "matmul_backward dbias N=%d C=%d OC=%d%s", N, C, OC,
			    tag);
			expect_close(what, &dbias, (size_t)OC, TOL_GEMM);

			pair_free(&inp); pair_free(&w); pair_free(&bias);
			pair_free(&out); pair_free(&dout); pair_free(&dinp);
			pair_free(&dw); pair_free(&dbias);
		}
	}
}
END_TEST

START_TEST(test_attention)
{
	static const struct { int B, T, C, NH; } cases[] = {
		{ 32, 128, 256, 4 }, { 3, 5, 12, 3 }, { 2, 37, 8, 1 },
		{ 1, 1, 4, 2 }, { 2, 33, 48, 6 }, { 2, 24, 16, 2 }
	};
	/* bidirectional, causal, and where T allows, block-causal over
	 * blocks of 4 and the twin rows of position-block training */
	static const int masks[] = { KN_ATT_FULL, KN_ATT_CAUSAL, 4, -4 };
	char what[160];
	size_t k;
	int mi;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		for (mi = 0; mi < 4 && (mi < 2 || cases[k].T % 8 == 0); mi++) {
			int B = cases[k].B, T = cases[k].T, C = cases[k].C;
			int NH = cases[k].NH, N = B * T;
			size_t natt = (size_t)B * NH * T * T;
			uint64_t seed = 300 + 10 * k + mi;
			/* wide enough that some rows are peaked */
			struct pair qkv = pair_uniform((size_t)N * 3 * C, -2, 2,
			    seed);
			struct pair out = pair_const((size_t)N * C, 7.0f);
			struct pair att = pair_const(natt, 7.0f);
			struct pair dout = pair_normal((size_t)N * C, 0, 1,
			    seed + 1000);
			struct pair dqkv = pair_const((size_t)N * 3 * C, 7.0f);
			struct pair scratch = pair_const(natt, 7.0f);
			int mask = masks[mi];

			cpu->attention_forward(out.c, att.c, qkv.c, B, T, C, NH,
			    mask);
			gpu->attention_forward(out.g, att.g, qkv.g, B, T, C, NH,
			    mask);
			snprintf(what, sizeof(what),
			    "attention_forward att B=%d T=%d C=%d NH=%d "
			    "mask %d", B, T, C, NH, mask);
			expect_close(what, &att, natt, TOL_GEMM);
			snprintf(what, sizeof(what),
			    "attention_forward out B=%d T=%d C=%d NH=%d "
			    "mask %d", B, T, C, NH, mask);
			expect_close(what, &out, (size_t)N * C, TOL_GEMM);

			/* the backward passes read the same probabilities */
			gpu->upload(att.g, att.c, natt * sizeof(float));
			cpu->attention_backward(dqkv.c, scratch.c, dout.c,
			    qkv.c, att.c, B, T, C, NH, mask);
			gpu->attention_backward(dqkv.g, scratch.g, dout.g,
			    qkv.g, att.g, B, T, C, NH, mask);
			snprintf(what, sizeof(what),
			    "attention_backward dqkv B=%d T=%d C=%d NH=%d "
			    "mask %d", B, T, C, NH, mask);
			expect_close(what, &dqkv, (size_t)N * 3 * C, TOL_GEMM);

			pair_free(&qkv); pair_free(&out); pair_free(&att);
			pair_free(&dout); pair_free(&dqkv);
			pair_free(&scratch);
		}
	}
}
END_TEST

/* Decoding: T new positions against a cache of pos0 earlier ones. */
START_TEST(test_attention_decode)
{
	static const struct { int n, pos0, T, C, NH; } cases[] = {
		{ 64, 0, 16, 128, 4 }, { 64, 16, 1, 128, 4 }, { 40, 39, 1, 48, 6 },
		{ 300, 100, 7, 64, 2 }
	};
	char what[160];
	size_t k;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int n = cases[k].n, pos0 = cases[k].pos0, T = cases[k].T;
		int C = cases[k].C, NH = cases[k].NH;
		uint64_t seed = 900 + k;
		struct pair qkv = pair_uniform((size_t)T * 3 * C, -2, 2, seed);
		struct pair kc = pair_normal((size_t)n * C, 0, 1, seed + 1);
		struct pair vc = pair_normal((size_t)n * C, 0, 1, seed + 2);
		struct pair sc = pair_const((size_t)NH * T * (pos0 + T), 7.0f);
		struct pair out = pair_const((size_t)T * C, 7.0f);

		cpu->attention_decode(out.c, kc.c, vc.c, sc.c, qkv.c, pos0, T, C,
		    NH);
		gpu->attention_decode(out.g, kc.g, vc.g, sc.g, qkv.g, pos0, T, C,
		    NH);
		snprintf(what, sizeof(what), "attention_decode out n=%d pos0=%d "
		    "T=%d C=%d NH=%d", n, pos0, T, C, NH);
		expect_close(what, &out, (size_t)T * C, TOL_GEMM);
		snprintf(what, sizeof(what), "attention_decode kcache n=%d "
		    "pos0=%d T=%d", n, pos0, T);
		expect_close(what, &kc, (size_t)n * C, TOL_EXACT);
		snprintf(what, sizeof(what), "attention_decode vcache n=%d "
		    "pos0=%d T=%d", n, pos0, T);
		expect_close(what, &vc, (size_t)n * C, TOL_EXACT);
		pair_free(&qkv); pair_free(&kc); pair_free(&vc);
		pair_free(&sc); pair_free(&out);
	}
}
END_TEST

/* fp16 weights: the CPU widens them, CUDA also narrows the activations,
 * so they agree to fp16's precision of the inputs, not fp32's. */
START_TEST(test_matmul_f16)
{
	static const struct { int N, C, OC; } cases[] = {
		{ 16 * 72, 512, 1536 }, { 1, 2048, 8192 }, { 7, 13, 5 }
	};
	char what[128];
	size_t k;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int N = cases[k].N, C = cases[k].C, OC = cases[k].OC;
		size_t nw = (size_t)OC * C;
		float *wf = malloc(nw * sizeof(float));
		uint16_t *wh = malloc(nw * sizeof(uint16_t));
		struct pair inp = pair_normal((size_t)N * C, 0, 1, 700 + k);
		struct pair bias = pair_normal((size_t)OC, 0, 1, 800 + k);
		struct pair out = pair_const((size_t)N * OC, 7.0f);
		struct pair w, scratch;
		size_t sb = cpu->matmul_f16_scratch(N, C, OC);

		if (gpu->matmul_f16_scratch(N, C, OC) > sb)
			sb = gpu->matmul_f16_scratch(N, C, OC);
		kn_rng_fill_normal(wf, nw, 0, 0.05f, 600 + k, 2);
		kn_f32_to_f16(wh, wf, nw);
		w = pair_new(wh, nw * sizeof(uint16_t));
		scratch = pair_new(NULL, sb);
		cpu->matmul_forward_f16(out.c, inp.c, w.c, bias.c, scratch.c, N,
		    C, OC);
		gpu->matmul_forward_f16(out.g, inp.g, w.g, bias.g, scratch.g, N,
		    C, OC);
		snprintf(what, sizeof(what), "matmul_forward_f16 N=%d C=%d OC=%d",
		    N, C, OC);
		expect_close(what, &out, (size_t)N * OC, 5e-3);
		pair_free(&inp); pair_free(&bias); pair_free(&out);
		pair_free(&w); pair_free(&scratch);
		free(wf);
		free(wh);
	}
}
END_TEST

START_TEST(test_gelu)
{
	static const size_t sizes[] = { (size_t)32 * 128 * 1024, 1001, 1 };
	char what[128];
	size_t k;

	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		/* wide, to reach both flat tails */
		struct pair inp = pair_normal(n, 0, 3, 400 + k);
		struct pair out = pair_const(n, 7.0f);
		struct pair dout = pair_normal(n, 0, 1, 410 + k);
		struct pair dinp = pair_const(n, 7.0f);

		cpu->gelu_forward(out.c, inp.c, n);
		gpu->gelu_forward(out.g, inp.g, n);
		snprintf(what, sizeof(what), "gelu_forward n=%zu", n);
		expect_close(what, &out, n, TOL_POINTWISE);

		cpu->gelu_backward(dinp.c, inp.c, dout.c, n);
		gpu->gelu_backward(dinp.g, inp.g, dout.g, n);
		snprintf(what, sizeof(what), "gelu_backward n=%zu", n);
		expect_close(what, &dinp, n, TOL_POINTWISE);

		/* in place: dinp aliases dout */
		cpu->gelu_backward(dout.c, inp.c, dout.c, n);
		gpu->gelu_backward(dout.g, inp.g, dout.g, n);
		snprintf(what, sizeof(what), "gelu_backward in place n=%zu", n);
		expect_close(what, &dout, n, TOL_POINTWISE);

		pair_free(&inp); pair_free(&out); pair_free(&dout);
		pair_free(&dinp);
	}
}
END_TEST

START_TEST(test_residual_scale)
{
	static const size_t sizes[] = { (size_t)32 * 128 * 256 + 3, 5, 1 };
	char what[128];
	size_t k;

	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		struct pair a = pair_normal(n, 0, 1, 500 + k);
		struct pair b = pair_normal(n, 0, 1, 510 + k);
		struct pair out = pair_const(n, 7.0f);

		cpu->residual_forward(out.c, a.c, b.c, n);
		gpu->residual_forward(out.g, a.g, b.g, n);
		snprintf(what, sizeof(what), "residual_forward n=%zu", n);
		expect_close(what, &out, n, TOL_EXACT);

		/* out aliasing a, then b */
		cpu->residual_forward(a.c, a.c, b.c, n);
		gpu->residual_forward(a.g, a.g, b.g, n);
		snprintf(what, sizeof(what), "residual_forward out=a n=%zu", n);
		expect_close(what, &a, n, TOL_EXACT);
		cpu->residual_forward(b.c, a.c, b.c, n);
		gpu->residual_forward(b.g, a.g, b.g, n);
		snprintf(what, sizeof(what), "residual_forward out=b n=%zu", n);
		expect_close(what, &b, n, TOL_EXACT);

		cpu->scale(b.c, -0.37f, n);
		gpu->scale(b.g, -0.37f, n);
		snprintf(what, sizeof(what), "scale n=%zu", n);
		expect_close(what, &b, n, TOL_EXACT);

		pair_free(&a); pair_free(&b); pair_free(&out);
	}
}
END_TEST

START_TEST(test_sumsq)
{
	static const size_t sizes[] = { (size_t)32 * 128 * 1024 + 3, 16385,
	    1000, 1, 0 };
	size_t k;

	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		struct pair x = pair_normal(n, 0, 1, 600 + k);
		double c, g, e;

		c = cpu->sumsq(x.c, n);
		g = gpu->sumsq(x.g, n);
		expect_no_cuda_error("sumsq");
		/* the CPU adds squares in float lanes within a chunk */
		e = c == g ? 0.0 : fabs(c - g) / fabs(c);
		fprintf(stderr, "# sumsq n=%-38zu max error %.3e\n", n, e);
		ck_assert_msg(e <= TOL_POINTWISE,
		    "sumsq n=%zu: cpu %.17g cuda %.17g, error %.3e", n, c, g,
		    e);
		/* the same input gives the same bits on the GPU */
		ck_assert_msg(gpu->sumsq(x.g, n) == g,
		    "sumsq n=%zu is not deterministic", n);
		pair_free(&x);
	}
}
END_TEST

START_TEST(test_xent)
{
	static const struct { int N, V; } cases[] = {
		{ 32 * 128, 256 }, { 5, 7 }, { 3, 256 }
	};
	char what[128];
	size_t k;
	int mode;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		/* mode 0: own dlogits; 1: dlogits aliases logits; 2: NULL */
		for (mode = 0; mode < 3; mode++) {
			int N = cases[k].N, V = cases[k].V, i;
			size_t n = (size_t)N * V;
			uint64_t seed = 700 + 10 * k + mode;
			float *hw = malloc((size_t)N * sizeof(float));
			struct pair logits = pair_normal(n, 0, 3, seed);
			struct pair target = pair_symbols((size_t)N, V, 0,
			    seed + 1000);
			struct pair weight;
			struct pair losses = pair_const((size_t)N, 7.0f);
			struct pair dlogits = pair_const(n, 7.0f);
			struct pair *grad = mode == 1 ? &logits : &dlogits;
			float dscale = 1.0f / N;
			const float *g;
			float *gg;
			static const char *mode_name[] = { "", " in place",
			    " forward only" };

			/* every third row weight 0, the rest as masked
			 * diffusion weights them: positive, unequal */
			ck_assert_ptr_nonnull(hw);
			for (i = 0; i < N; i++)
				hw[i] = i % 3 == 1 ? 0.0f :
				    0.5f + (float)(i % 7) / 4.0f;
			weight = pair_new(hw, (size_t)N * sizeof(float));
			free(hw);

			cpu->xent_forward_backward(losses.c,
			    mode == 2 ? NULL : grad->c, logits.c, target.c,
			    weight.c, N, V, dscale);
			gpu->xent_forward_backward(losses.g,
			    mode == 2 ? NULL : grad->g, logits.g, target.g,
			    weight.g, N, V, dscale);
			snprintf(what, sizeof(what), "xent losses N=%d V=%d%s",
			    N, V, mode_name[mode]);
			expect_close(what, &losses, (size_t)N, TOL_POINTWISE);
			if (mode != 2) {
				snprintf(what, sizeof(what),
				    "xent dlogits N=%d V=%d%s", N, V,
				    mode_name[mode]);
				expect_close(what, grad, n, TOL_POINTWISE);
				/* weight-0 rows: exactly zero on the GPU */
				gg = fetch(grad);
				g = gg;
				for (i = 1; i < N; i += 3) {
					int c;

					for (c = 0; c < V; c++)
						ck_assert_msg(g[(size_t)i * V +
						    c] == 0.0f, "xent: row %d "
						    "of weight 0 has gradient "
						    "%g at %d", i,
						    g[(size_t)i * V + c], c);
				}
				free(gg);
			} else {
				/* forward only leaves dlogits alone */
				expect_close("xent forward only dlogits "
				    "untouched", &dlogits, n, 0.0);
			}
			gg = fetch(&losses);
			for (i = 1; i < N; i += 3)
				ck_assert_msg(gg[i] == 0.0f,
				    "xent: row %d of weight 0 has loss %g", i,
				    gg[i]);
			free(gg);

			pair_free(&logits); pair_free(&target);
			pair_free(&weight); pair_free(&losses);
			pair_free(&dlogits);
		}
	}
}
END_TEST

START_TEST(test_adamw)
{
	static const size_t sizes[] = { 1000003, 7 };
	static const int steps[] = { 1, 10 };
	char what[128];
	size_t k, s;

	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		for (s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
			size_t n = sizes[k];
			int t = steps[s];
			uint64_t seed = 800 + 10 * k + s;
			struct pair p = pair_normal(n, 0, 0.05f, seed);
			struct pair grad = pair_normal(n, 0, 1, seed + 1000);
			/* at t = 1 the moments start at 0; later they hold
			 * history (v >= 0) */
			struct pair m = t == 1 ? pair_const(n, 0.0f) :
			    pair_normal(n, 0, 0.01f, seed + 2000);
			struct pair v = t == 1 ? pair_const(n, 0.0f) :
			    pair_uniform(n, 0, 1e-3f, seed + 3000);

			cpu->adamw_update(p.c, grad.c, m.c, v.c, n, 1e-3f, 0.9f,
			    0.999f, 1e-8f, 0.1f, t, 0.5f);
			gpu->adamw_update(p.g, grad.g, m.g, v.g, n, 1e-3f, 0.9f,
			    0.999f, 1e-8f, 0.1f, t, 0.5f);
			snprintf(what, sizeof(what), "adamw_update p n=%zu t=%d",
			    n, t);
			expect_close(what, &p, n, TOL_EXACT);
			snprintf(what, sizeof(what), "adamw_update m n=%zu t=%d",
			    n, t);
			expect_close(what, &m, n, TOL_EXACT);
			snprintf(what, sizeof(what), "adamw_update v n=%zu t=%d",
			    n, t);
			expect_close(what, &v, n, TOL_EXACT);

			pair_free(&p); pair_free(&grad); pair_free(&m);
			pair_free(&v);
		}
	}
}
END_TEST

/* sum of the probabilities of classes 0..c, in double, of softmax(l/temp) */
static double
cdf_through(const float *l, int V, float temp, int c)
{
	double mx = -INFINITY, sum = 0.0, below = 0.0;
	int j;

	for (j = 0; j < V; j++)
		mx = fmax(mx, l[j] / temp);
	for (j = 0; j < V; j++) {
		double e = exp(l[j] / temp - mx);

		sum += e;
		if (j <= c)
			below += e;
	}
	return below / sum;
}

/* The probe's free memory comes from the table (the programs link no
 * CUDA library to ask cudaMemGetInfo themselves). */
START_TEST(test_memory_free)
{
	char err[KN_ERR_LEN];
	uint64_t bytes = 0;

	ck_assert_ptr_null(cpu->memory_free);
	ck_assert_ptr_nonnull(gpu->memory_free);
	ck_assert_msg(gpu->memory_free(&bytes, err) == 0, "%s", err);
	ck_assert_msg(bytes > 0, "no free device memory reported");
	fprintf(stderr, "# %-44s %llu bytes\n", "memory_free",
	    (unsigned long long)bytes);
}
END_TEST

START_TEST(test_sample)
{
	static const float temps[] = { 0.0f, 0.8f, -1.0f, 1.0f };
	const int N = 32 * 128, V = 256;
	size_t n = (size_t)N * V, k;
	float *hl = malloc(n * sizeof(float));
	float *hu = malloc((size_t)N * sizeof(float));
	char what[128];
	int i, c;

	ck_assert_ptr_nonnull(hl);
	ck_assert_ptr_nonnull(hu);
	kn_rng_fill_normal(hl, n, 0, 2, 900, 4);
	kn_rng_fill_uniform(hu, (size_t)N, 901, 5);
	/* Ties: every 16th row takes only the values 0..3, so its maximum
	 * repeats and argmax must take the first. */
	for (i = 0; i < N; i += 16)
		for (c = 0; c < V; c++)
			hl[(size_t)i * V + c] = (float)((i + 7 * c) % 4);
	/* The top of [0,1): the scan may end below u and fall back to the
	 * last class with mass; row 2's last classes have none. */
	hu[1] = 0.99999994f;
	hu[2] = 0.99999994f;
	for (c = V - 8; c < V; c++)
		hl[2 * (size_t)V + c] = -200.0f;
	hu[3] = 0.0f;

	for (k = 0; k < sizeof(temps) / sizeof(temps[0]); k++) {
		float temp = temps[k];
		struct pair logits = pair_new(hl, n * sizeof(float));
		struct pair u = pair_new(hu, (size_t)N * sizeof(float));
		struct pair out = pair_new(NULL, (size_t)N * sizeof(int32_t));
		const int32_t *pc;
		int32_t *pg;
		int near = 0;

		cpu->sample(out.c, logits.c, u.c, N, V, temp);
		gpu->sample(out.g, logits.g, u.g, N, V, temp);
		snprintf(what, sizeof(what), "sample N=%d V=%d temp=%g", N, V,
		    (double)temp);
		if (temp <= 0.0f) {
			expect_equal_ints(what, &out, (size_t)N);
		} else {
			/* exp differs by an ulp or two between libm-free CPU
			 * code and CUDA, so a u within rounding of a class
			 * boundary may fall either side: allow only that */
			expect_no_cuda_error(what);
			pc = out.c;
			pg = fetch(&out);
			for (i = 0; i < N; i++) {
				int lo = pc[i] < pg[i] ? pc[i] : pg[i];
				double edge;

				ck_assert_int_ge(pg[i], 0);
				ck_assert_int_lt(pg[i], V);
				if (pc[i] == pg[i])
					continue;
				edge = cdf_through(hl + (size_t)i * V, V, temp,
				    lo);
				ck_assert_msg(fabs(edge - hu[i]) < 1e-5,
				    "%s: row %d: cpu %d cuda %d, u %.9g is "
				    "%.3e from the boundary", what, i, pc[i],
				    pg[i], (double)hu[i], fabs(edge - hu[i]));
				near++;
			}
			fprintf(stderr, "# %-44s %d of %d differ, all at a "
			    "boundary\n", what, near, N);
			ck_assert_int_le(near, N / 1000 + 2);
			free(pg);
		}
		pair_free(&logits); pair_free(&u); pair_free(&out);
	}
	free(hl);
	free(hu);
}
END_TEST

/* The SOMA population's K-copy linear layer: copies are rows of one
 * (K, stride) array, the bias after the weights in each. */
START_TEST(test_matmul_batched)
{
	static const struct { int N, C, OC, K; } cases[] = {
		{ 32 * 128, 32, 128, 8 }, { 32 * 128, 128, 32, 3 },
		{ 150, 7, 5, 3 }, { 1, 1, 1, 1 }
	};
	char what[128];
	size_t k;
	int shared;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		for (shared = 0; shared < 2; shared++) {
			int N = cases[k].N, C = cases[k].C, OC = cases[k].OC;
			int K = cases[k].K;
			size_t stride = (size_t)OC * C + OC + 3;
			size_t is = shared ? 0 : (size_t)N * C;
			struct pair inp = pair_normal(K * (size_t)N * C, 0, 1,
			    700 + k);
			struct pair w = pair_normal(K * stride, 0, 0.1f,
			    710 + k);
			struct pair out = pair_const(K * (size_t)N * OC, 7.0f);
			const float *bc = shared ? NULL :
			    (const float *)w.c + (size_t)OC * C;
			const float *bg = shared ? NULL :
			    (const float *)w.g + (size_t)OC * C;

			cpu->matmul_forward_batched(out.c, inp.c, w.c, bc, N, C,
			    OC, K, is, stride);
			gpu->matmul_forward_batched(out.g, inp.g, w.g, bg, N, C,
			    OC, K, is, stride);
			snprintf(what, sizeof(what), "matmul_forward_batched "
			    "N=%d C=%d OC=%d K=%d%s", N, C, OC, K,
			    shared ? " shared" : "");
			expect_close(what, &out, K * (size_t)N * OC, TOL_GEMM);
			pair_free(&inp); pair_free(&w); pair_free(&out);
		}
}
END_TEST

START_TEST(test_lstm)
{
	static const struct { int K, B, T, C; } cases[] = {
		{ 1, 32, 128, 32 }, { 4, 32, 128, 32 }, { 3, 11, 6, 70 },
		{ 1, 1, 1, 1 }
	};
	char what[128];
	size_t k;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int K = cases[k].K, B = cases[k].B, T = cases[k].T;
		int C = cases[k].C;
		size_t N = (size_t)B * T, stride = (size_t)4 * C * C + 5;
		struct pair gates = pair_normal(K * N * 4 * C, 0, 1, 800 + k);
		struct pair whh = pair_normal(K * stride, 0, 0.2f, 810 + k);
		struct pair h = pair_const(K * N * C, 7.0f);
		struct pair c = pair_const(K * N * C, 7.0f);
		struct pair dh = pair_normal(N * C, 0, 1, 820 + k);
		struct pair dcell = pair_const((size_t)B * C, 7.0f);
		struct pair dgates = pair_const(N * 4 * C, 7.0f);
		/* nonzero to start with: the gradient accumulates */
		struct pair dwhh = pair_normal((size_t)4 * C * C, 0, 1,
		    830 + k);

		cpu->lstm_forward(h.c, c.c, gates.c, whh.c, K, B, T, C, stride);
		gpu->lstm_forward(h.g, c.g, gates.g, whh.g, K, B, T, C, stride);
		snprintf(what, sizeof(what), "lstm_forward h K=%d B=%d T=%d "
		    "C=%d", K, B, T, C);
		expect_close(what, &h, K * N * C, TOL_GEMM);
		snprintf(what, sizeof(what), "lstm_forward c K=%d B=%d T=%d "
		    "C=%d", K, B, T, C);
		expect_close(what, &c, K * N * C, TOL_GEMM);
		snprintf(what, sizeof(what), "lstm_forward gates K=%d B=%d "
		    "T=%d C=%d", K, B, T, C);
		expect_close(what, &gates, K * N * 4 * C, TOL_GEMM);

		/* the backward pass of copy 0 */
		cpu->lstm_backward(dgates.c, dwhh.c, dh.c, dcell.c, h.c, c.c,
		    gates.c, whh.c, B, T, C);
		gpu->lstm_backward(dgates.g, dwhh.g, dh.g, dcell.g, h.g, c.g,
		    gates.g, whh.g, B, T, C);
		snprintf(what, sizeof(what), "lstm_backward dgates B=%d T=%d "
		    "C=%d", B, T, C);
		expect_close(what, &dgates, N * 4 * C, TOL_GEMM);
		snprintf(what, sizeof(what), "lstm_backward dwhh B=%d T=%d "
		    "C=%d", B, T, C);
		expect_close(what, &dwhh, (size_t)4 * C * C, TOL_GEMM);

		pair_free(&gates); pair_free(&whh); pair_free(&h);
		pair_free(&c); pair_free(&dh); pair_free(&dcell);
		pair_free(&dgates); pair_free(&dwhh);
	}
}
END_TEST

static Suite *
parity_suite(void)
{
	Suite *s = suite_create("cuda_parity");
	TCase *tc = tcase_create("cpu_vs_cuda");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_embed);
	tcase_add_test(tc, test_layernorm);
	tcase_add_test(tc, test_matmul);
	tcase_add_test(tc, test_attention);
	tcase_add_test(tc, test_attention_decode);
	tcase_add_test(tc, test_matmul_f16);
	tcase_add_test(tc, test_gelu);
	tcase_add_test(tc, test_residual_scale);
	tcase_add_test(tc, test_sumsq);
	tcase_add_test(tc, test_xent);
	tcase_add_test(tc, test_adamw);
	tcase_add_test(tc, test_sample);
	tcase_add_test(tc, test_matmul_batched);
	tcase_add_test(tc, test_lstm);
	tcase_add_test(tc, test_memory_free);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	char err[KN_ERR_LEN];
	SRunner *sr;
	int failed;

	gpu = kn_cuda_backend(err);
	if (gpu == NULL) {
		/* A TAP plan of no tests, skipped: the harness counts it as
		 * SKIP, and the reason reads the same by hand. */
		printf("1..0 # SKIP no CUDA device: %s; parity tests skipped\n",
		    err);
		return EXIT_SUCCESS;
	}
	cpu = kn_cpu_backend();
	sr = srunner_create(parity_suite());
	/* CUDA cannot be used in a child forked after the parent touched
	 * it, and kn_cuda_backend() above did. */
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	kn_pool_shutdown();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
