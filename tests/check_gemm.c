/* Tests of kn_gemm (kernels/cpu/gemm.h): both kernels against a
 * double-precision loop and against cblas_sgemm, over every transpose
 * combination, odd sizes, strides, alpha and beta; fp16 weights against
 * the same weights widened; and the promise that the bits do not depend
 * on the thread count. */
#include "config.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "kernels/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "tests/testutil.h"

/* Written into the gaps of C beyond column N: must survive every call. */
#define SENTINEL 12345.0f

struct gcase {
	int transA, transB, M, N, K;
	int lda, ldb, ldc;
	float alpha, beta;
	int offset;             /* floats: 1 makes every operand unaligned */
};

/* Operands with their gaps: A and B hold NaN between rows, so any read
 * past a row shows up in C; each buffer ends at its last element, so a
 * read past the end shows up under AddressSanitizer. */
struct operands {
	float *abuf, *bbuf, *cbuf, *c0;
	float *A, *B, *C;
	size_t na, nb, nc;
};

static uint64_t rng_state;

static float
rng_float(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)(rng_state >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* rows of len valid floats, ld apart, then nothing */
static size_t
extent(int rows, int len, int ld)
{
	return rows == 0 || len == 0 ? 1 : (size_t)(rows - 1) * ld + len;
}

static float *
fill_matrix(int rows, int len, int ld, int offset, float gap, int nan_data,
    size_t *n, float **buf)
{
	size_t i, total = extent(rows, len, ld) + offset;
	float *x = malloc(total * sizeof(float));

	ck_assert_ptr_nonnull(x);
	for (i = 0; i < total; i++) {
		size_t at = i - offset;
		int inside = i >= (size_t)offset && (int)(at % ld) < len;

		x[i] = !inside ? gap : nan_data ? NAN : rng_float();
	}
	*n = total;
	*buf = x;
	return x + offset;
}

static void
operands_make(const struct gcase *c, struct operands *o, uint64_t seed)
{
	int arows = c->transA ? c->K : c->M, alen = c->transA ? c->M : c->K;
	int brows = c->transB ? c->N : c->K, blen = c->transB ? c->K : c->N;

	rng_state = seed * 0x9e3779b97f4a7c15ULL + 1;
	o->A = fill_matrix(arows, alen, c->lda, c->offset, NAN, 0, &o->na,
	    &o->abuf);
	o->B = fill_matrix(brows, blen, c->ldb, c->offset, NAN, 0, &o->nb,
	    &o->bbuf);
	/* beta == 0 must not read C: garbage it with NaN */
	o->C = fill_matrix(c->M, c->N, c->ldc, c->offset, SENTINEL,
	    c->beta == 0.0f, &o->nc, &o->cbuf);
	o->c0 = malloc(o->nc * sizeof(float));
	ck_assert_ptr_nonnull(o->c0);
	memcpy(o->c0, o->cbuf, o->nc * sizeof(float));
}

static void
operands_free(struct operands *o)
{
	free(o->abuf);
	free(o->bbuf);
	free(o->cbuf);
	free(o->c0);
}

static float
elem_a(const struct gcase *c, const float *A, int i, int k)
{
	return c->transA ? A[(size_t)k * c->lda + i] :
	    A[(size_t)i * c->lda + k];
}

static float
elem_b(const struct gcase *c, const float *B, int k, int j)
{
	return c->transB ? B[(size_t)j * c->ldb + k] :
	    B[(size_t)k * c->ldb + j];
}

static const char *
case_str(const struct gcase *c)
{
	static char s[160];

	snprintf(s, sizeof(s), "%c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d "
	    "alpha=%g beta=%g offset=%d", c->transA ? 'T' : 'N',
	    c->transB ? 'T' : 'N', c->M, c->N, c->K, c->lda, c->ldb, c->ldc,
	    c->alpha, c->beta, c->offset);
	return s;
}

/* got holds C after the call.  Each element must be within the float
 * bound (K + 4) eps (|alpha| sum |a b| + |beta c0|) of the double sum,
 * and the gaps of C must be untouched. */
static void
check_against_double(const struct gcase *c, const struct operands *o,
    const float *got, const char *who)
{
	const float *c0 = o->c0 + c->offset;
	int i, j, k;

	for (i = 0; i < c->M; i++) {
		for (j = 0; j < c->N; j++) {
			double sum = 0.0, mag = 0.0, want, bound, cij;

			for (k = 0; k < c->K; k++) {
				double p = (double)elem_a(c, o->A, i, k) *
				    elem_b(c, o->B, k, j);

				sum += p;
				mag += fabs(p);
			}
			want = c->alpha * sum;
			mag *= fabs(c->alpha);
			if (c->beta != 0.0f) {
				cij = c0[(size_t)i * c->ldc + j];
				want += c->beta * cij;
				mag += fabs(c->beta * cij);
			}
			bound = (c->K + 4) * FLT_EPSILON * mag + FLT_MIN;
			if (!(fabs(got[(size_t)i * c->ldc + j] - want) <=
			    bound))
				ck_abort_msg("%s: %s: C[%d][%d] = %.9g, want "
				    "%.9g (bound %.3g)", who, case_str(c), i,
				    j, got[(size_t)i * c->ldc + j], want,
				    bound);
		}
		for (j = c->N; j < c->ldc && i + 1 < c->M; j++)
			if (got[(size_t)i * c->ldc + j] != SENTINEL)
				ck_abort_msg("%s: %s: gap C[%d][%d] written",
				    who, case_str(c), i, j);
	}
	if (c->offset > 0)
		ck_assert_msg(got[-1] == SENTINEL, "%s: %s: C[-1] written",
		    who, case_str(c));
}

static void
blas_gemm(const struct gcase *c, const float *A, const float *B, float *C)
{
	cblas_sgemm(CblasRowMajor, c->transA ? CblasTrans : CblasNoTrans,
	    c->transB ? CblasTrans : CblasNoTrans, c->M, c->N, c->K,
	    c->alpha, A, c->lda, B, c->ldb, c->beta, C, c->ldc);
}

/* For shapes too big for the double loop: against cblas_sgemm, with the
 * bound of both errors, taken from |A| |B| and |C| by cblas too. */
static void
check_against_blas(const struct gcase *c, const struct operands *o,
    const float *got, const char *who)
{
	float *want = malloc(o->nc * sizeof(float));
	float *mag = malloc(o->nc * sizeof(float));
	float *absa = malloc(o->na * sizeof(float));
	float *absb = malloc(o->nb * sizeof(float));
	struct gcase m = *c;
	size_t at;
	int i, j;

	ck_assert(want && mag && absa && absb);
	memcpy(want, o->c0, o->nc * sizeof(float));
	blas_gemm(c, o->A, o->B, want + c->offset);
	for (at = 0; at < o->na; at++)
		absa[at] = fabsf(o->abuf[at]);
	for (at = 0; at < o->nb; at++)
		absb[at] = fabsf(o->bbuf[at]);
	for (at = 0; at < o->nc; at++)
		mag[at] = c->beta == 0.0f ? 0.0f : fabsf(o->c0[at]);
	m.alpha = fabsf(c->alpha);
	m.beta = fabsf(c->beta);
	blas_gemm(&m, absa + c->offset, absb + c->offset, mag + c->offset);
	for (i = 0; i < c->M; i++)
		for (j = 0; j < c->N; j++) {
			size_t e = c->offset + (size_t)i * c->ldc + j;
			double bound = 2.0 * (c->K + 4) * FLT_EPSILON * mag[e] +
			    FLT_MIN;

			if (!(fabs((double)got[e - c->offset] - want[e]) <=
			    bound))
				ck_abort_msg("%s: %s: C[%d][%d] = %.9g, cblas "
				    "%.9g (bound %.3g)", who, case_str(c), i,
				    j, got[e - c->offset], want[e], bound);
		}
	free(want);
	free(mag);
	free(absa);
	free(absb);
}

/* Runs kn_gemm (or kn_gemm_serial) on c and checks the result. */
static void
run_case(const struct gcase *c, int serial, uint64_t seed, int vs_double)
{
	struct operands o;
	const char *who = serial ? "kn_gemm_serial" : "kn_gemm";

	operands_make(c, &o, seed);
	if (serial)
		kn_gemm_serial(c->transA, c->transB, c->M, c->N, c->K,
		    c->alpha, o.A, c->lda, o.B, c->ldb, c->beta, o.C, c->ldc);
	else
		kn_gemm(c->transA, c->transB, c->M, c->N, c->K, c->alpha,
		    o.A, c->lda, o.B, c->ldb, c->beta, o.C, c->ldc);
	if (vs_double)
		check_against_double(c, &o, o.C, who);
	if (c->K > 0 && c->alpha != 0.0f)
		check_against_blas(c, &o, o.C, who);
	operands_free(&o);
}

static struct gcase
make_case(int t, int M, int N, int K, int pad, float alpha, float beta,
    int offset)
{
	struct gcase c = {
		.transA = t & 1, .transB = (t >> 1) & 1, .M = M, .N = N,
		.K = K, .alpha = alpha, .beta = beta, .offset = offset,
	};

	c.lda = (c.transA ? M : K) + pad;
	c.ldb = (c.transB ? K : N) + pad;
	c.ldc = N + pad;
	if (c.lda < 1)
		c.lda = 1;
	if (c.ldb < 1)
		c.ldb = 1;
	if (c.ldc < 1)
		c.ldc = 1;
	return c;
}

static int
avx512_here(void)
{
	return kn_gemm_use(KN_GEMM_AVX512) == KN_OK;
}

/* Loop tests take _i = kernel * 4 + transpose combination. */
static int
use_loop_kernel(int i)
{
	if (i / 4 == 0) {
		if (!avx512_here()) {
			fprintf(stderr, "check_gemm: this CPU lacks AVX-512F; "
			    "skipping the AVX-512 kernel test\n");
			return 0;
		}
		return 1;
	}
	ck_assert_int_eq(kn_gemm_use(KN_GEMM_OPENBLAS), KN_OK);
	return 1;
}

static void
setup_pool2(void)
{
	char err[KN_ERR_LEN];

	ck_assert_int_eq(kn_pool_init(2, err), KN_OK);
	kn_gemm_use(KN_GEMM_AUTO);
}

static void
teardown_pool(void)
{
	kn_pool_shutdown();
}

static const int sizes[] = { 1, 2, 3, 7, 13, 31, 33, 63, 65, 127, 129,
	257 };
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

/* Every M x N of the odd sizes, with K cycling through them, and the
 * stride, alignment, alpha and beta varied along the way. */
START_TEST(test_odd_sizes)
{
	static const float alphas[] = { 1.0f, -0.75f, 2.0f };
	static const float betas[] = { 0.0f, 1.0f, -0.5f, 0.0f };
	static const int pads[] = { 0, 1, 5, 16 };
	int m, n, q = 0;

	if (!use_loop_kernel(_i))
		return;
	for (m = 0; m < NSIZES; m++)
		for (n = 0; n < NSIZES; n++, q++) {
			struct gcase c = make_case(_i % 4, sizes[m], sizes[n],
			    sizes[(m * 5 + n * 7 + _i) % NSIZES], pads[q % 4],
			    alphas[q % 3], betas[q % 4], (q / 4) % 2);

			run_case(&c, q % 5 == 0, (uint64_t)q + 100 * _i, 1);
		}
}
END_TEST

/* K across several blocks with a tail, M across several row blocks, N
 * wide enough that packed B is split into column chunks. */
START_TEST(test_blocking_edges)
{
	static const int shapes[][3] = {
		{ 385, 97, 600 }, { 12, 32, 256 }, { 24, 64, 512 },
		{ 11, 31, 255 }, { 25, 33, 257 }, { 193, 40, 513 },
		{ 37, 1100, 2100 }, { 1, 1, 1000 }, { 500, 3, 7 },
	};
	int s;

	if (!use_loop_kernel(_i))
		return;
	for (s = 0; s < (int)(sizeof(shapes) / sizeof(shapes[0])); s++) {
		struct gcase c = make_case(_i % 4, shapes[s][0], shapes[s][1],
		    shapes[s][2], s % 3, s % 2 ? 1.0f : -1.25f,
		    s % 3 == 0 ? 0.0f : 0.75f, s % 2);

		run_case(&c, s % 2, (uint64_t)s + 7, 1);
	}
}
END_TEST

START_TEST(test_alpha_beta)
{
	static const float alphas[] = { 1.0f, -1.0f, 0.5f, 2.5f, 0.0f };
	static const float betas[] = { 0.0f, 1.0f, -1.0f, 0.25f };
	int a, b;

	if (!use_loop_kernel(_i))
		return;
	for (a = 0; a < 5; a++)
		for (b = 0; b < 4; b++) {
			struct gcase c = make_case(_i % 4, 29, 45, 70, 3,
			    alphas[a], betas[b], 0);

			run_case(&c, 0, (uint64_t)(a * 4 + b), 1);
		}
}
END_TEST

/* BLAS rules: beta == 0 ignores C (even NaN); alpha == 0 or K == 0
 * reads neither A nor B and scales C. */
START_TEST(test_special_scalars)
{
	int t = _i % 4, i, j, M = 17, N = 35, K = 21;
	struct gcase c = make_case(t, M, N, K, 2, 0.0f, 0.0f, 0);
	struct operands o;

	if (!use_loop_kernel(_i))
		return;
	/* alpha == 0, beta == 0, A and B full of NaN: C = 0 */
	operands_make(&c, &o, 1);
	for (i = 0; i < (int)(o.na - c.offset); i++)
		o.A[i] = NAN;
	for (i = 0; i < (int)(o.nb - c.offset); i++)
		o.B[i] = NAN;
	kn_gemm(c.transA, c.transB, M, N, K, 0.0f, o.A, c.lda, o.B, c.ldb,
	    0.0f, o.C, c.ldc);
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++)
			if (o.C[(size_t)i * c.ldc + j] != 0.0f)
				ck_abort_msg("alpha=beta=0: C[%d][%d] = %g", i,
				    j, o.C[(size_t)i * c.ldc + j]);
	/* alpha == 0, beta == 2: C doubles, A and B still NaN */
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++)
			o.C[(size_t)i * c.ldc + j] = (float)(i - j);
	kn_gemm_serial(c.transA, c.transB, M, N, K, 0.0f, o.A, c.lda, o.B,
	    c.ldb, 2.0f, o.C, c.ldc);
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++)
			if (o.C[(size_t)i * c.ldc + j] != 2.0f * (float)(i - j))
				ck_abort_msg("alpha=0, beta=2: C[%d][%d] = %g",
				    i, j, o.C[(size_t)i * c.ldc + j]);
	/* K == 0, beta == 0 on NaN: zeros */
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++)
			o.C[(size_t)i * c.ldc + j] = NAN;
	kn_gemm(c.transA, c.transB, M, N, 0, 1.0f, o.A, c.lda, o.B, c.ldb,
	    0.0f, o.C, c.ldc);
	for (i = 0; i < M; i++)
		for (j = 0; j < N; j++)
			if (o.C[(size_t)i * c.ldc + j] != 0.0f)
				ck_abort_msg("K=0, beta=0: C[%d][%d] = %g", i,
				    j, o.C[(size_t)i * c.ldc + j]);
	operands_free(&o);
	/* the NaN-filled C of beta == 0 through the whole kernel */
	c = make_case(t, 130, 70, 300, 1, 1.0f, 0.0f, 1);
	run_case(&c, 0, 5, 1);
	c = make_case(t, 13, 7, 3, 0, -2.0f, 0.0f, 0);
	run_case(&c, 1, 6, 1);
}
END_TEST

/* Shapes BLAS refuses leave C as it was (cblas itself would print). */
START_TEST(test_bad_args)
{
	float A[64], B[64], C[64];
	int i;

	for (i = 0; i < 64; i++) {
		A[i] = 1.0f;
		B[i] = 1.0f;
		C[i] = 7.0f;
	}
	kn_gemm(0, 0, 4, 4, 4, 1.0f, A, 3, B, 4, 0.0f, C, 4);    /* lda */
	kn_gemm(0, 1, 4, 4, 4, 1.0f, A, 4, B, 3, 0.0f, C, 4);    /* ldb */
	kn_gemm(1, 0, 4, 5, 4, 1.0f, A, 4, B, 5, 0.0f, C, 4);    /* ldc */
	kn_gemm(0, 0, -1, 4, 4, 1.0f, A, 4, B, 4, 0.0f, C, 4);
	kn_gemm_serial(0, 0, 4, 4, 4, 1.0f, NULL, 4, B, 4, 0.0f, C, 4);
	for (i = 0; i < 64; i++)
		if (C[i] != 7.0f)
			ck_abort_msg("C[%d] = %g after a refused call", i,
			    C[i]);
	kn_gemm(0, 0, 0, 4, 4, 1.0f, A, 4, B, 4, 0.0f, NULL, 4);  /* no-op */
}
END_TEST

START_TEST(test_stats)
{
	float A[6] = { 1, 2, 3, 4, 5, 6 }, B[6] = { 1, 0, 0, 1, 1, 1 };
	float C[4];
	kn_gemm_stats st;

	kn_gemm_stats_reset();
	kn_gemm_stats_enable(1);
	kn_gemm(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
	kn_gemm_serial(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
	kn_gemm_stats_enable(0);
	kn_gemm(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
	kn_gemm_stats_get(&st);
	ck_assert_int_eq(st.calls, 1);
	ck_assert(st.flops == 2.0 * 2 * 2 * 3);
	ck_assert(st.seconds >= 0.0);
	/* [1 2 3; 4 5 6] . [1 0; 0 1; 1 1] */
	ck_assert(C[0] == 4.0f && C[1] == 5.0f && C[2] == 10.0f &&
	    C[3] == 11.0f);
	kn_gemm_stats_reset();
	kn_gemm_stats_get(&st);
	ck_assert_int_eq(st.calls, 0);
}
END_TEST

START_TEST(test_kernel_choice)
{
	int have = 0;

#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	have = __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl");
#endif
	ck_assert_int_eq(kn_gemm_use(KN_GEMM_AUTO), KN_OK);
	ck_assert_int_eq(kn_gemm_current(),
	    have ? KN_GEMM_AVX512 : KN_GEMM_OPENBLAS);
	ck_assert_int_eq(kn_gemm_use(KN_GEMM_AVX512),
	    have ? KN_OK : KN_ENODEV);
	ck_assert_int_eq(kn_gemm_use(KN_GEMM_OPENBLAS), KN_OK);
	ck_assert_int_eq(kn_gemm_current(), KN_GEMM_OPENBLAS);
	ck_assert_int_eq(kn_gemm_use((kn_gemm_kernel)42), KN_EINVAL);
	ck_assert_int_eq(kn_gemm_current(), KN_GEMM_OPENBLAS);
	ck_assert_str_eq(kn_gemm_name(KN_GEMM_AVX512), "avx512");
	ck_assert_str_eq(kn_gemm_name(KN_GEMM_OPENBLAS), "openblas");
	ck_assert_str_eq(kn_gemm_name(KN_GEMM_AUTO), "auto");
	if (!have)
		fprintf(stderr, "check_gemm: this CPU lacks AVX-512F; "
		    "the AVX-512 kernel tests are skipped\n");
}
END_TEST

/* The shapes of our models, against cblas_sgemm: (C, OC) linear layers
 * over N positions, forward and both backward products. */
START_TEST(test_model_shapes)
{
	static const int widths[][2] = {
		{ 256, 768 }, { 256, 256 }, { 256, 1024 }, { 1024, 256 },
	};
	int s, N = 4096;

	if (!use_loop_kernel(_i * 4))
		return;
	for (s = 0; s < 4; s++) {
		int C = widths[s][0], OC = widths[s][1];
		struct gcase fwd = { 0, 1, N, OC, C, C, C, OC, 1.0f, 0.0f, 0 };
		struct gcase dinp = { 0, 0, N, C, OC, OC, C, C, 1.0f, 0.0f, 0 };
		struct gcase dw = { 1, 0, OC, C, N, OC, C, C, 1.0f, 1.0f, 0 };

		run_case(&fwd, 0, 11, 0);
		run_case(&dinp, 0, 12, 0);
		run_case(&dw, 0, 13, 0);
	}
}
END_TEST

/* The classes the GEMM choice times for a model (kn_gemm_model_shapes),
 * each kernel against the double loop: whichever kernel a plan picks for
 * a class computes it within the bound. */
START_TEST(test_planned_classes)
{
	kn_gemm_shape sh[KN_GEMM_MAX_SHAPES];
	int n = kn_gemm_model_shapes(128, 4, 64, 4, sh, KN_GEMM_MAX_SHAPES);
	int i;

	if (!use_loop_kernel(_i * 4))
		return;
	ck_assert_int_gt(n, 0);
	for (i = 0; i < n; i++) {
		struct gcase c = make_case(sh[i].transA | sh[i].transB << 1,
		    sh[i].M, sh[i].N, sh[i].K, 0, 1.0f, sh[i].transA ? 1.0f :
		    0.0f, 0);

		run_case(&c, !sh[i].parallel, 20 + i, 1);
	}
}
END_TEST

/* A plan of mixed picks: each planned class gives the bits of the kernel
 * picked for it, and a class outside the plan those of ours. */
START_TEST(test_plan_dispatch)
{
	kn_gemm_shape sh[KN_GEMM_MAX_SHAPES];
	kn_gemm_choice plan[KN_GEMM_MAX_SHAPES];
	/* N = 1024 positions: the dW products sum over more k than one
	 * block of either kernel, where their bits part */
	int n = kn_gemm_model_shapes(64, 2, 64, 16, sh, KN_GEMM_MAX_SHAPES);
	int i, extra, apart = 0;

	if (!avx512_here()) {
		fprintf(stderr, "check_gemm: this CPU lacks AVX-512F; "
		    "skipping the plan test\n");
		return;
	}
	for (i = 0; i < n; i++) {
		plan[i].shape = sh[i];
		plan[i].pick = i % 2 ? KN_GEMM_OPENBLAS : KN_GEMM_AVX512;
	}
	kn_gemm_use(KN_GEMM_AUTO);
	kn__gemm_plan_install(plan, n);
	for (i = 0; i <= n; i++) {
		/* one more class than planned: 33 rows of the first */
		kn_gemm_shape s = i < n ? sh[i] : sh[0];
		kn_gemm_kernel k = i < n ? plan[i].pick : KN_GEMM_AVX512;
		struct gcase c;
		struct operands o;
		float *want, *other;

		extra = i == n;
		if (extra)
			s.M = 33;
		/* beta 1 for dW, as the model accumulates it */
		c = make_case(s.transA | s.transB << 1, s.M, s.N, s.K, 0, 1.0f,
		    s.transA ? 1.0f : 0.0f, 0);
		operands_make(&c, &o, 40 + i);
		ck_assert_ptr_nonnull(want = malloc(o.nc * sizeof(float)));
		ck_assert_ptr_nonnull(other = malloc(o.nc * sizeof(float)));
		memcpy(want, o.cbuf, o.nc * sizeof(float));
		memcpy(other, o.cbuf, o.nc * sizeof(float));
		kn__gemm_run(k, s.parallel, c.transA, c.transB, c.M, c.N, c.K,
		    1.0f, o.A, c.lda, o.B, c.ldb, c.beta, want, c.ldc);
		kn__gemm_run(k == KN_GEMM_AVX512 ? KN_GEMM_OPENBLAS :
		    KN_GEMM_AVX512, s.parallel, c.transA, c.transB, c.M, c.N,
		    c.K, 1.0f, o.A, c.lda, o.B, c.ldb, c.beta, other, c.ldc);
		if (s.parallel)
			kn_gemm(c.transA, c.transB, c.M, c.N, c.K, 1.0f, o.A,
			    c.lda, o.B, c.ldb, c.beta, o.C, c.ldc);
		else
			kn_gemm_serial(c.transA, c.transB, c.M, c.N, c.K,
			    1.0f, o.A, c.lda, o.B, c.ldb, c.beta, o.C, c.ldc);
		ck_assert_msg(memcmp(want, o.C, o.nc * sizeof(float)) == 0,
		    "%s: not the bits of %s", case_str(&c), kn_gemm_name(k));
		apart += k == KN_GEMM_OPENBLAS &&
		    memcmp(other, o.C, o.nc * sizeof(float)) != 0;
		free(other);
		check_against_double(&c, &o, o.C, "planned kn_gemm");
		free(want);
		operands_free(&o);
	}
	/* else the test could not tell which kernel ran */
	ck_assert_msg(apart > 0, "no OpenBLAS class differs from ours");
	/* kn_gemm_use drops the plan */
	ck_assert_int_eq(kn_gemm_use(KN_GEMM_AUTO), KN_OK);
}
END_TEST

/* C of c computed with a pool of the given size, into a new buffer. */
static float *
result_with_threads(const struct gcase *c, const struct operands *o,
    int threads, int serial)
{
	char err[KN_ERR_LEN];
	float *out = malloc(o->nc * sizeof(float));

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(kn_pool_init(threads, err), KN_OK);
	memcpy(out, o->c0, o->nc * sizeof(float));
	if (serial)
		kn_gemm_serial(c->transA, c->transB, c->M, c->N, c->K,
		    c->alpha, o->A, c->lda, o->B, c->ldb, c->beta,
		    out + c->offset, c->ldc);
	else
		kn_gemm(c->transA, c->transB, c->M, c->N, c->K, c->alpha,
		    o->A, c->lda, o->B, c->ldb, c->beta, out + c->offset,
		    c->ldc);
	return out;
}

/* One pool thread or two, kn_gemm or kn_gemm_serial, first run or
 * second: the same bits. */
START_TEST(test_thread_count_bitwise)
{
	static const int shapes[][5] = {   /* transA, transB, M, N, K */
		{ 0, 1, 4096, 768, 256 }, { 0, 0, 4096, 256, 768 },
		{ 1, 0, 768, 256, 4096 }, { 0, 1, 4096, 256, 1024 },
		{ 1, 0, 256, 1024, 4096 }, { 1, 1, 257, 129, 600 },
		{ 0, 0, 1000, 333, 517 }, { 0, 1, 129, 2100, 1030 },
		{ 1, 1, 65, 65, 65 }, { 0, 0, 40, 600, 300 },
		{ 0, 1, 50, 700, 129 }, { 0, 0, 30, 1000, 512 },
	};
	int s;

	if (!use_loop_kernel(_i * 4))
		return;
	for (s = 0; s < (int)(sizeof(shapes) / sizeof(shapes[0])); s++) {
		struct gcase c = make_case(shapes[s][0] + 2 * shapes[s][1],
		    shapes[s][2], shapes[s][3], shapes[s][4], s % 2,
		    s % 3 ? 1.0f : 0.5f, s % 2 ? 1.0f : 0.0f, s % 2);
		struct operands o;
		float *one, *two, *again, *serial;

		operands_make(&c, &o, (uint64_t)s + 31);
		one = result_with_threads(&c, &o, 1, 0);
		two = result_with_threads(&c, &o, 2, 0);
		again = result_with_threads(&c, &o, 2, 0);
		serial = result_with_threads(&c, &o, 2, 1);
		ck_assert_msg(memcmp(one, two, o.nc * sizeof(float)) == 0,
		    "%s: 1 and 2 threads differ", case_str(&c));
		ck_assert_msg(memcmp(two, again, o.nc * sizeof(float)) == 0,
		    "%s: two runs differ", case_str(&c));
		ck_assert_msg(memcmp(two, serial, o.nc * sizeof(float)) == 0,
		    "%s: kn_gemm and kn_gemm_serial differ", case_str(&c));
		free(one);
		free(two);
		free(again);
		free(serial);
		operands_free(&o);
	}
}
END_TEST

/* Attention's use: one kn_gemm_serial per (sequence, head) inside pool
 * tasks, on column slices of qkv (N,3C).  Must equal the same calls made
 * one by one, and the double loop. */
struct attn_job {
	const float *qkv;
	float *att;
	int T, C, NH;
};

static void
attn_scores_task(void *ctx, int task, int thread)
{
	const struct attn_job *j = ctx;
	int b = task / j->NH, h = task % j->NH, hs = j->C / j->NH;
	const float *q = j->qkv + (size_t)b * j->T * 3 * j->C + h * hs;

	(void)thread;
	kn_gemm_serial(0, 1, j->T, j->T, hs, 1.0f, q, 3 * j->C, q + j->C,
	    3 * j->C, 0.0f, j->att + (size_t)task * j->T * j->T, j->T);
}

START_TEST(test_serial_in_pool_tasks)
{
	int B = 4, T = 128, C = 256, NH = 4, hs = C / NH;
	size_t nqkv = (size_t)B * T * 3 * C, natt = (size_t)B * NH * T * T;
	float *qkv = malloc(nqkv * sizeof(float));
	float *att1 = malloc(natt * sizeof(float));
	float *att2 = malloc(natt * sizeof(float));
	struct attn_job j = { .qkv = qkv, .T = T, .C = C, .NH = NH };
	size_t i;
	int t;

	if (!use_loop_kernel(_i * 4))
		return;
	ck_assert(qkv && att1 && att2);
	rng_state = 99;
	for (i = 0; i < nqkv; i++)
		qkv[i] = rng_float();
	for (i = 0; i < natt; i++)
		att1[i] = att2[i] = NAN;
	j.att = att1;
	kn_pool_run(B * NH, attn_scores_task, &j);
	j.att = att2;
	for (t = 0; t < B * NH; t++)
		attn_scores_task(&j, t, 0);
	ck_assert(memcmp(att1, att2, natt * sizeof(float)) == 0);
	for (t = 0; t < B * NH; t += 5) {
		int b = t / NH, h = t % NH, r, s, k;
		const float *q = qkv + (size_t)b * T * 3 * C + h * hs;

		for (r = 0; r < T; r += 3)
			for (s = 0; s < T; s++) {
				double sum = 0.0, mag = 0.0;
				float got = att1[(size_t)t * T * T +
				    (size_t)r * T + s];

				for (k = 0; k < hs; k++) {
					double p = (double)q[(size_t)r * 3 * C
					    + k] * q[(size_t)s * 3 * C + C + k];

					sum += p;
					mag += fabs(p);
				}
				if (!(fabs(got - sum) <= (hs + 4) *
				    FLT_EPSILON * mag + FLT_MIN))
					ck_abort_msg("task %d S[%d][%d] = %g, "
					    "want %g", t, r, s, got, sum);
			}
	}
	free(qkv);
	free(att1);
	free(att2);
}
END_TEST

/* kn_gemm_serial_f16 and kn_gemm_f16 against the float call on the
 * weights widened beforehand, to the bit, over panel and K-block edges,
 * strides and both betas; under OpenBLAS they decline and leave C as it
 * was.  _i: kernel (0 AVX-512, 1 OpenBLAS). */
START_TEST(test_f16_weights)
{
	static const int shapes[][3] = {   /* M, N, K */
		{ 1, 1, 1 }, { 9, 17, 15 }, { 12, 32, 16 }, { 13, 33, 17 },
		{ 40, 100, 300 }, { 64, 96, 513 }, { 200, 65, 128 },
	};
	int si, beta;

	if (!use_loop_kernel(_i * 4))
		return;
	for (si = 0; si < (int)(sizeof(shapes) / sizeof(shapes[0])); si++)
		for (beta = 0; beta <= 1; beta++) {
			int M = shapes[si][0], N = shapes[si][1];
			int K = shapes[si][2], lda = K + si % 3;
			int ldb = K + (si % 2) * 3, ldc = N + 1;
			size_t na = (size_t)M * lda, nb = (size_t)N * ldb;
			size_t nc = (size_t)M * ldc, i;
			float *A = malloc(na * sizeof(float));
			float *Bf = malloc(nb * sizeof(float));
			uint16_t *B16 = malloc(nb * sizeof(uint16_t));
			float *C1 = malloc(nc * sizeof(float));
			float *C2 = malloc(nc * sizeof(float));
			float *C0 = malloc(nc * sizeof(float));
			int done;

			ck_assert(A && Bf && B16 && C1 && C2 && C0);
			for (i = 0; i < na; i++)
				A[i] = rng_float();
			for (i = 0; i < nb; i++)
				Bf[i] = rng_float();
			for (i = 0; i < nc; i++)
				C0[i] = rng_float();
			kn_f32_to_f16(B16, Bf, nb);
			kn_f16_to_f32(Bf, B16, nb);
			memcpy(C1, C0, nc * sizeof(float));
			memcpy(C2, C0, nc * sizeof(float));
			done = kn_gemm_serial_f16(M, N, K, A, lda, B16, ldb,
			    (float)beta, C1, ldc);
			if (_i == 1) {
				ck_assert_int_eq(done, 0);
				ck_assert_int_eq(kn_gemm_f16(M, N, K, A, lda,
				    B16, ldb, (float)beta, C1, ldc), 0);
				ck_assert_mem_eq(C1, C0, nc * sizeof(float));
			} else {
				ck_assert_int_eq(done, 1);
				kn_gemm_serial(0, 1, M, N, K, 1.0f, A, lda, Bf,
				    ldb, (float)beta, C2, ldc);
				if (memcmp(C1, C2, nc * sizeof(float)) != 0)
					ck_abort_msg("shape %d beta %d: fp16 "
					    "weights differ from widened ones",
					    si, beta);
				/* over the pool: the same bits */
				memcpy(C1, C0, nc * sizeof(float));
				ck_assert_int_eq(kn_gemm_f16(M, N, K, A, lda,
				    B16, ldb, (float)beta, C1, ldc), 1);
				if (memcmp(C1, C2, nc * sizeof(float)) != 0)
					ck_abort_msg("shape %d beta %d: fp16 "
					    "weights over the pool differ", si,
					    beta);
			}
			free(A);
			free(Bf);
			free(B16);
			free(C1);
			free(C2);
			free(C0);
		}
}
END_TEST

static Suite *
gemm_suite(void)
{
	Suite *s = suite_create("gemm");
	TCase *tc;

	tc = tcase_create("api");
	tcase_add_checked_fixture(tc, setup_pool2, teardown_pool);
	tcase_add_test(tc, test_kernel_choice);
	tcase_add_test(tc, test_bad_args);
	tcase_add_test(tc, test_stats);
	suite_add_tcase(s, tc);

	/* _i: kernel (0 AVX-512, 1 OpenBLAS) * 4 + transposes */
	tc = tcase_create("accuracy");
	tcase_add_checked_fixture(tc, setup_pool2, teardown_pool);
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_odd_sizes, 0, 8);
	tcase_add_loop_test(tc, test_blocking_edges, 0, 8);
	tcase_add_loop_test(tc, test_alpha_beta, 0, 8);
	tcase_add_loop_test(tc, test_special_scalars, 0, 8);
	tcase_add_loop_test(tc, test_model_shapes, 0, 2);
	tcase_add_loop_test(tc, test_planned_classes, 0, 2);
	tcase_add_test(tc, test_plan_dispatch);
	tcase_add_loop_test(tc, test_f16_weights, 0, 2);
	suite_add_tcase(s, tc);

	/* _i: kernel (0 AVX-512, 1 OpenBLAS) */
	tc = tcase_create("determinism");
	tcase_add_checked_fixture(tc, setup_pool2, teardown_pool);
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_thread_count_bitwise, 0, 2);
	tcase_add_loop_test(tc, test_serial_in_pool_tasks, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return tu_run_suite(gemm_suite());
}
