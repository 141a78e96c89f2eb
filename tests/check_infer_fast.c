/* The serving shortcuts against the plain computation they replace: the
 * GEMM on pre-packed weights (its bias added in the tiles) against
 * kn_gemm (to the bit) and a direct sum, kn_model_predict_at (packed weights, the last layer on the wanted
 * rows only, layer 0 kept for the rows whose symbol did not change)
 * against the full forward pass of an unpacked training model
 * sampled at those rows, and the vectorised softmax row against the
 * running-sum one it replaced (to the bit). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "tests/testutil.h"

static const kn_backend *be;

static float *
normals(size_t n, float sd, uint64_t seed)
{
	float *x = malloc(n * sizeof(float));
	kn_rng r;
	size_t i;

	ck_assert_ptr_nonnull(x);
	kn_rng_init(&r, seed, 0);
	for (i = 0; i < n; i++)
		x[i] = sd * kn_rng_normal(&r);
	return x;
}

START_TEST(test_gemm_packed)
{
	/* sizes around the kernel's 12 x 32 tile and 256-deep K blocks */
	static const int shape[][3] = {
		{ 1, 256, 64 }, { 5, 32, 17 }, { 72, 384, 128 },
		{ 13, 100, 300 }, { 200, 512, 128 }, { 72, 128, 512 },
	};
	size_t s;

	for (s = 0; s < sizeof(shape) / sizeof(shape[0]); s++) {
		int M = shape[s][0], N = shape[s][1], K = shape[s][2], i, j, k;
		float *A = normals((size_t)M * K, 1.0f, 1 + s);
		float *B = normals((size_t)N * K, 1.0f, 100 + s);
		float *C0 = normals((size_t)M * N, 1.0f, 200 + s);
		float *C1 = malloc((size_t)M * N * sizeof(float));
		float *C2 = malloc((size_t)M * N * sizeof(float));
		float *P = aligned_alloc(64, (kn_gemm_pack_floats(N, K) *
		    sizeof(float) + 63) & ~(size_t)63);
		float *bias = normals((size_t)N, 1.0f, 400 + s);
		int mode;

		ck_assert_ptr_nonnull(C1);
		ck_assert_ptr_nonnull(C2);
		ck_assert_ptr_nonnull(P);
		kn_gemm_pack(B, N, K, P);
		/* mode 0: beta 0; 1: beta 1 on C0; 2: the bias, on C0's
		 * garbage, against C filled with it and beta 1 */
		for (mode = 0; mode <= 2; mode++) {
			for (i = 0; i < M; i++)
				memcpy(C1 + (size_t)i * N, mode == 2 ? bias :
				    C0 + (size_t)i * N, (size_t)N * sizeof(float));
			memcpy(C2, C0, (size_t)M * N * sizeof(float));
			kn_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, mode ? 1.0f :
			    0.0f, C1, N);
			kn_gemm_packed(M, N, K, A, K, B, P, mode == 2 ? bias :
			    NULL, mode == 1 ? 1.0f : 0.0f, C2, N);
			ck_assert_msg(memcmp(C1, C2, (size_t)M * N *
			    sizeof(float)) == 0, "%dx%dx%d mode %d: packed "
			    "differs from kn_gemm", M, N, K, mode);
			/* and both are the product: a sum in double */
			for (i = 0; i < M; i++)
				for (j = 0; j < N; j++) {
					double d = mode == 1 ?
					    C0[(size_t)i * N + j] : mode == 2 ?
					    bias[j] : 0;

					for (k = 0; k < K; k++)
						d += (double)A[(size_t)i * K + k] *
						    B[(size_t)j * K + k];
					ck_assert_msg(fabs(C2[(size_t)i * N + j] -
					    d) <= 1e-4 * (sqrt((double)K) + 1),
					    "%dx%dx%d (%d,%d): %g, not %g", M, N,
					    K, i, j, C2[(size_t)i * N + j], d);
				}
		}
		free(A); free(B); free(C0); free(C1); free(C2); free(P);
		free(bias);
	}
}
END_TEST

/* The softmax row as it was: one running maximum, exp and sum in one
 * loop (the same exp, through kn_cpu_exp_row with shift m). */
static void
softmax_ref(float *x, int n, float scale)
{
	float m = -INFINITY, sum = 0.0f, inv;
	int j;

	for (j = 0; j < n; j++)
		m = x[j] * scale > m ? x[j] * scale : m;
	for (j = 0; j < n; j++) {
		x[j] *= scale;
		kn_cpu_exp_row(&x[j], &x[j], 1, m, 1.0f);
		sum += x[j];
	}
	inv = 1.0f / sum;
	for (j = 0; j < n; j++)
		x[j] *= inv;
}

START_TEST(test_softmax_row)
{
	static const int len[] = { 1, 2, 15, 16, 17, 31, 72, 300 };
	size_t s;
	int j;

	for (s = 0; s < sizeof(len) / sizeof(len[0]); s++) {
		int n = len[s];
		float *x = normals((size_t)n, 4.0f, 300 + s);
		float *y = malloc((size_t)n * sizeof(float));
		double total = 0;

		ck_assert_ptr_nonnull(y);
		memcpy(y, x, (size_t)n * sizeof(float));
		kn_cpu_softmax_row(x, n, 0.35f);
		softmax_ref(y, n, 0.35f);
		for (j = 0; j < n; j++) {
			ck_assert_msg(memcmp(&x[j], &y[j], sizeof(float)) == 0,
			    "n %d, element %d: %.9g, not %.9g", n, j, x[j],
			    y[j]);
			total += x[j];
		}
		ck_assert_double_eq_tol(total, 1.0, 1e-5);
		free(x);
		free(y);
	}
	/* rows side by side: each row's bits are kn_cpu_softmax_row's */
	for (s = 0; s < sizeof(len) / sizeof(len[0]); s++) {
		int n = len[s], rows = 19, ld = n + 3, r;
		float *x = normals((size_t)rows * ld, 4.0f, 500 + s);
		float *y = malloc((size_t)rows * ld * sizeof(float));

		ck_assert_ptr_nonnull(y);
		memcpy(y, x, (size_t)rows * ld * sizeof(float));
		kn_cpu_softmax_rows(x, rows, n, (size_t)ld, 0.35f);
		for (r = 0; r < rows; r++) {
			softmax_ref(y + (size_t)r * ld, n, 0.35f);
			ck_assert_msg(memcmp(x + (size_t)r * ld, y + (size_t)r *
			    ld, (size_t)ld * sizeof(float)) == 0,
			    "n %d: row %d differs", n, r);
		}
		free(x);
		free(y);
	}
}
END_TEST

/* attention_rows against attention_forward, to the bit, on the rows
 * picked (their outputs and, for every head, their probabilities), under
 * each kind of mask; the rows not picked are left as they were. */
static void
check_attention_rows(const char *what)
{
	static const struct {
		int B, T, C, NH, mask;
	} cfg[] = {
		{ 2, 48, 64, 4, KN_ATT_FULL }, { 2, 48, 64, 4, KN_ATT_CAUSAL },
		{ 2, 48, 64, 4, 8 }, { 2, 48, 64, 4, -8 },
		{ 1, 72, 128, 4, KN_ATT_FULL }, { 2, 72, 128, 4, 24 },
		{ 1, 30, 48, 3, KN_ATT_FULL },
	};
	size_t c;

	for (c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
		int B = cfg[c].B, T = cfg[c].T, C = cfg[c].C, NH = cfg[c].NH;
		int N = B * T, pick, R, i, h, r;
		size_t nout = (size_t)N * C, natt = (size_t)B * NH * T * T;
		float *qkv = normals((size_t)N * 3 * C, 1.5f, 900 + c);
		float *out0 = malloc(nout * sizeof(float));
		float *att0 = malloc(natt * sizeof(float));
		float *out1 = malloc(nout * sizeof(float));
		float *att1 = malloc(natt * sizeof(float));
		int32_t rows[200];
		kn_rng g;

		ck_assert_ptr_nonnull(out0);
		ck_assert_ptr_nonnull(att0);
		ck_assert_ptr_nonnull(out1);
		ck_assert_ptr_nonnull(att1);
		kn_cpu_attention_forward(out0, att0, qkv, B, T, C, NH,
		    cfg[c].mask);
		kn_rng_init(&g, 950 + c, 0);
		/* one row, the first and last, a few at random, all */
		for (pick = 0; pick < 4; pick++) {
			R = 0;
			if (pick == 0)
				rows[R++] = (int32_t)kn_rng_below(&g,
				    (uint64_t)N);
			for (i = 0; pick > 0 && i < N; i++)
				if (pick == 3 || (pick == 1 && (i == 0 ||
				    i == N - 1)) || (pick == 2 &&
				    kn_rng_uniform(&g) < 0.1f))
					rows[R++] = i;
			if (R == 0)
				rows[R++] = T / 2;
			memset(out1, 0xff, nout * sizeof(float));
			memset(att1, 0xff, natt * sizeof(float));
			kn_cpu_attention_rows(out1, att1, qkv, B, T, C, NH,
			    cfg[c].mask, rows, R);
			for (r = 0; r < R; r++) {
				int b = rows[r] / T, q = rows[r] % T;

				ck_assert_msg(memcmp(out0 + (size_t)rows[r] *
				    C, out1 + (size_t)rows[r] * C, (size_t)C *
				    sizeof(float)) == 0, "%s: config %zu pick "
				    "%d: output row %d differs", what, c, pick,
				    rows[r]);
				for (h = 0; h < NH; h++) {
					size_t o = (((size_t)b * NH + h) * T +
					    q) * T;

					ck_assert_msg(memcmp(att0 + o, att1 + o,
					    (size_t)T * sizeof(float)) == 0,
					    "%s: config %zu pick %d: row %d head "
					    "%d: probabilities differ", what, c,
					    pick, rows[r], h);
				}
			}
		}
		free(qkv); free(out0); free(att0); free(out1); free(att1);
	}
}

START_TEST(test_attention_rows)
{
	check_attention_rows(kn_gemm_name(kn_gemm_current()));
	/* where the attention's products run on OpenBLAS, whose bits may
	 * depend on the rows beside, the rows come from the full pass */
	if (kn_gemm_current() == KN_GEMM_AVX512) {
		ck_assert_int_eq(kn_gemm_use(KN_GEMM_OPENBLAS), 0);
		check_attention_rows("openblas");
		ck_assert_int_eq(kn_gemm_use(KN_GEMM_AVX512), 0);
	}
}
END_TEST

/* The parameters of m, drawn with a spread that makes the predictions
 * far from uniform. */
static float *
params_for(const kn_model *m, uint64_t seed)
{
	size_t n = kn_model_num_params(m);

	return normals(n, 0.3f, seed);
}

/* For each shape: an inference model (packed, last layer on the wanted
 * rows) and a training model (unpacked, every row) with the same
 * parameters; the bytes predict_at samples must be those sampled from the
 * training model's full logits, at several temperatures, for 1 and 2
 * windows, again after new parameters (the packing redone), and as a
 * few symbols change from call to call. */
START_TEST(test_predict_at)
{
	static const kn_model_shape shapes[] = {
		{ 64, 4, 2, 24, 0, 0 }, { 64, 4, 1, 24, 0, 0 },
		{ 96, 2, 3, 24, 0, 8 }, { 64, 4, 2, 24, 1, 0 },
	};
	static const float temps[] = { 0.0f, 0.7f, 1.0f };
	char err[KN_ERR_LEN];
	size_t s;

	for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		const kn_model_shape *sh = &shapes[s];
		int n = sh->window, B = 2, N = B * n, round, t, i, R;
		kn_model *fast, *ref;
		int32_t in[48], rows[48], got[48], want;
		float u[48], *logits = malloc((size_t)N * 256 * sizeof(float));
		kn_rng r;

		ck_assert_ptr_nonnull(logits);
		ck_assert_int_eq(kn_model_create_inference(&fast, sh, be, B,
		    KN_STORE_F32, err), 0);
		ck_assert_int_eq(kn_model_create(&ref, sh, be, B, err), 0);
		kn_rng_init(&r, 7 + s, 1);
		/* rounds 0 and 1 draw new parameters and symbols; the later
		 * ones change a few symbols, as denoising steps do, so the
		 * kept layer-0 rows are used */
		for (round = 0; round < 6; round++) {
			if (round < 2) {
				float *p = params_for(ref, 50 + 10 * s + round);

				ck_assert_int_eq(kn_model_set_params(fast, p,
				    err), 0);
				ck_assert_int_eq(kn_model_set_params(ref, p,
				    err), 0);
				free(p);
			}
			for (i = 0; i < N; i++)
				if (round < 2 || kn_rng_uniform(&r) < 0.08f)
					in[i] = kn_rng_uniform(&r) < 0.5f ?
					    KN_MASK :
					    (int32_t)kn_rng_below(&r, 256);
			ck_assert_int_eq(kn_model_forward(ref, in, B, logits,
			    err), 0);
			for (t = 0; t < 3; t++) {
				/* every other window's rows, or a few */
				for (i = 0, R = 0; i < N; i++)
					if (t == 1 ? i % 5 == 2 : in[i] == KN_MASK) {
						rows[R] = i;
						u[R++] = kn_rng_uniform(&r);
					}
				ck_assert_int_gt(R, 0);
				for (i = 0; i < 2; i++) {
					int Bw = i == 0 ? 1 : B, Rw = 0;

					while (Rw < R && rows[Rw] < Bw * n)
						Rw++;
					if (Rw == 0)
						continue;
					ck_assert_int_eq(kn_model_predict_at(fast,
					    in, Bw, rows, Rw, u, temps[t], got,
					    err), 0);
					for (int k = 0; k < Rw; k++) {
						be->sample(&want, logits +
						    (size_t)rows[k] * 256, &u[k],
						    1, 256, temps[t]);
						ck_assert_msg(got[k] == want,
						    "shape %zu round %d temp %g "
						    "row %d: %d, not %d", s, round,
						    temps[t], rows[k], got[k],
						    want);
					}
				}
			}
		}
		kn_model_free(fast);
		kn_model_free(ref);
		free(logits);
	}
}
END_TEST

/* fp16 storage takes no shortcut (a GEMV for a few rows has bits of its
 * own): predict_at must give what kn_model_predict gives at its rows. */
START_TEST(test_predict_at_f16)
{
	static const kn_model_shape sh = { 64, 4, 2, 24, 0, 0 };
	char err[KN_ERR_LEN];
	kn_model *m;
	int32_t in[24], rows[24], got[24], all[24];
	float u[24], ufull[24] = { 0 };
	int i, R = 0, step;
	kn_rng r;
	float *p;

	ck_assert_int_eq(kn_model_create_inference(&m, &sh, be, 1,
	    KN_STORE_F16, err), 0);
	p = params_for(m, 77);
	ck_assert_int_eq(kn_model_set_params(m, p, err), 0);
	free(p);
	kn_rng_init(&r, 78, 0);
	for (i = 0; i < 24; i++)
		in[i] = i < 4 ? 'a' + i : KN_MASK;
	for (step = 0; step < 3; step++) {
		for (i = 4, R = 0; i < 24; i += 3 + step) {
			rows[R] = i;
			u[R] = ufull[i] = kn_rng_uniform(&r);
			R++;
		}
		ck_assert_int_eq(kn_model_predict_at(m, in, 1, rows, R, u, 1.0f,
		    got, err), 0);
		ck_assert_int_eq(kn_model_predict(m, in, 1, ufull, 1.0f, all,
		    err), 0);
		for (i = 0; i < R; i++) {
			ck_assert_int_eq(got[i], all[rows[i]]);
			in[rows[i]] = got[i];
		}
	}
	kn_model_free(m);
}
END_TEST

static Suite *
infer_suite(void)
{
	Suite *s = suite_create("infer_fast");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_gemm_packed);
	tcase_add_test(tc, test_softmax_row);
	tcase_add_test(tc, test_attention_rows);
	tcase_add_test(tc, test_predict_at);
	tcase_add_test(tc, test_predict_at_f16);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	char err[KN_ERR_LEN];
	int rc;

	be = kn_cpu_backend();
	/* our kernel for every class, as a server that made no plan has
	 * it, so that the training model's products are the same kernel's;
	 * OpenBLAS where the CPU has no AVX-512 (nothing is packed then) */
	if (kn_backend_plan(be, 64, 4, 24, 2, "own", err) != 0 &&
	    kn_backend_plan(be, 64, 4, 24, 2, "blas", err) != 0) {
		fprintf(stderr, "check_infer_fast: %s\n", err);
		return 1;
	}
	rc = tu_run_suite(infer_suite());
	kn_pool_shutdown();
	return rc;
}
