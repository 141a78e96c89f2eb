/* kn_gemm: argument checks, the choice of kernel (ours for AVX-512 CPUs,
 * else OpenBLAS, or per shape class as a plan says) and the OpenBLAS
 * path.  The layers of the CPU backend
 * call it; the AVX-512 kernel itself is in gemm_avx512.c. */
#include "config.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "kernels/cpu/blas_load.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_private.h"
#include "kernels/error.h"
#include "kernels/pool.h"

/* OpenBLAS tiles: fixed by the shape alone, never by the thread count, as
 * OpenBLAS's bits may depend on the size of the block it is given. */
#define GEMM_BLAS_ROWS_MIN 32
#define GEMM_BLAS_TILES 8

static atomic_int gemm_kernel = KN_GEMM_AUTO;   /* AUTO: not chosen yet */

/* The plan: written once before any product of the classes it names runs,
 * then only read; plan_n is published last. */
static kn_gemm_choice plan[KN_GEMM_MAX_SHAPES];
static atomic_int plan_n;

static int
avx512_usable(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("fma");
#else
	return 0;
#endif
}

int
kn_gemm_use(kn_gemm_kernel k)
{
	switch (k) {
	case KN_GEMM_AUTO:
		k = avx512_usable() ? KN_GEMM_AVX512 : KN_GEMM_OPENBLAS;
		break;
	case KN_GEMM_AVX512:
		if (!avx512_usable())
			return KN_ENODEV;
		break;
	case KN_GEMM_OPENBLAS:
		break;
	default:
		return KN_EINVAL;
	}
	/* OpenBLAS is loaded where it is chosen (kn_gemm_plan says why it
	 * could not be); our kernel runs without it */
	if (k == KN_GEMM_OPENBLAS && kn_blas_load(NULL) == NULL)
		return KN_ENODEV;
	atomic_store(&plan_n, 0);
	atomic_store(&gemm_kernel, k);
	return KN_OK;
}

void
kn__gemm_plan_install(const kn_gemm_choice *c, int n)
{
	if (n > KN_GEMM_MAX_SHAPES)
		n = KN_GEMM_MAX_SHAPES;
	atomic_store(&plan_n, 0);
	memcpy(plan, c, (size_t)n * sizeof(*c));
	atomic_store(&plan_n, n);
}

/* The planned kernel of a class, else ours: a short scan, as a model has
 * a few dozen classes at most and each product costs microseconds. */
static kn_gemm_kernel
plan_pick(int parallel, int transA, int transB, int M, int N, int K)
{
	int i, n = atomic_load(&plan_n);

	for (i = 0; i < n; i++) {
		const kn_gemm_shape *s = &plan[i].shape;

		if (s->M == M && s->N == N && s->K == K &&
		    s->transA == transA && s->transB == transB &&
		    s->parallel == parallel)
			return plan[i].pick;
	}
	return KN_GEMM_AVX512;
}

kn_gemm_kernel
kn_gemm_current(void)
{
	int k = atomic_load(&gemm_kernel);

	if (k == KN_GEMM_AUTO) {
		kn_gemm_use(KN_GEMM_AUTO);
		k = atomic_load(&gemm_kernel);
	}
	return (kn_gemm_kernel)k;
}

const char *
kn_gemm_name(kn_gemm_kernel k)
{
	switch (k) {
	case KN_GEMM_AUTO:
		return "auto";
	case KN_GEMM_OPENBLAS:
		return "openblas";
	case KN_GEMM_AVX512:
		return "avx512";
	}
	return "unknown";
}

/* The shapes BLAS accepts; anything else leaves C untouched, as the void
 * API has no way to report it and cblas would print. */
static int
gemm_args_ok(int transA, int transB, int M, int N, int K, const float *A,
    int lda, const float *B, int ldb, const float *C, int ldc)
{
	int acols = transA ? M : K, bcols = transB ? K : N;

	if (M < 0 || N < 0 || K < 0)
		return 0;
	if (lda < (acols > 1 ? acols : 1) || ldb < (bcols > 1 ? bcols : 1) ||
	    ldc < (N > 1 ? N : 1))
		return 0;
	if (M > 0 && N > 0 && C == NULL)
		return 0;
	if (M > 0 && N > 0 && K > 0 && (A == NULL || B == NULL))
		return 0;
	return 1;
}

/* C = beta * C, for K == 0 or alpha == 0, where BLAS reads neither A nor
 * B; beta == 0 writes zeros without reading C. */
static void
gemm_scale(int M, int N, float beta, float *C, int ldc)
{
	int i, j;

	if (beta == 1.0f)
		return;
	for (i = 0; i < M; i++) {
		float *row = C + (size_t)i * ldc;

		for (j = 0; j < N; j++)
			row[j] = beta == 0.0f ? 0.0f : beta * row[j];
	}
}

struct blas_job {
	const kn_blas *blas;
	int transA, transB, M, N, K;
	float alpha, beta;
	const float *A, *B;
	float *C;
	int lda, ldb, ldc;
	int tm;                 /* rows per tile */
};

static void
blas_tile(void *ctx, int t, int thread)
{
	const struct blas_job *g = ctx;
	int r0 = t * g->tm;
	int rows = g->M - r0 < g->tm ? g->M - r0 : g->tm;
	const float *a = g->transA ? g->A + r0 : g->A + (size_t)r0 * g->lda;

	(void)thread;
	g->blas->sgemm(CblasRowMajor, g->transA ? CblasTrans : CblasNoTrans,
	    g->transB ? CblasTrans : CblasNoTrans, rows, g->N, g->K, g->alpha,
	    a, g->lda, g->B, g->ldb, g->beta, g->C + (size_t)r0 * g->ldc,
	    g->ldc);
}

static void
gemm_blas(int parallel, int transA, int transB, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc)
{
	struct blas_job g = {
		.transA = transA, .transB = transB, .M = M, .N = N, .K = K,
		.alpha = alpha, .beta = beta, .A = A, .B = B, .C = C,
		.lda = lda, .ldb = ldb, .ldc = ldc,
	};
	int i, j, t, ntiles;

	/* Reached without OpenBLAS only where neither it nor our kernel
	 * could be had (kn_gemm_use failed, and kn_gemm_plan and the CPU
	 * backend said why): NaN then, which the callers' checks of
	 * finite values report, rather than a C left as it was. */
	if ((g.blas = kn_blas_load(NULL)) == NULL) {
		for (i = 0; i < M; i++)
			for (j = 0; j < N; j++)
				C[(size_t)i * ldc + j] = NAN;
		return;
	}
	g.tm = (M + GEMM_BLAS_TILES - 1) / GEMM_BLAS_TILES;
	if (g.tm < GEMM_BLAS_ROWS_MIN)
		g.tm = GEMM_BLAS_ROWS_MIN;
	ntiles = (M + g.tm - 1) / g.tm;
	if (parallel) {
		kn_pool_run(ntiles, blas_tile, &g);
		return;
	}
	for (t = 0; t < ntiles; t++)
		blas_tile(&g, t, 0);
}

/* One kernel on checked arguments with M, N, K > 0 and alpha != 0;
 * KN_GEMM_AVX512 only where avx512_usable(). */
void
kn__gemm_run(kn_gemm_kernel k, int parallel, int transA, int transB, int M,
    int N, int K, float alpha, const float *A, int lda, const float *B,
    int ldb, float beta, float *C, int ldc)
{
	if (k == KN_GEMM_AVX512)
		kn__gemm_avx512(parallel, transA, transB, M, N, K, alpha, A,
		    lda, B, ldb, beta, C, ldc);
	else
		gemm_blas(parallel, transA, transB, M, N, K, alpha, A, lda,
		    B, ldb, beta, C, ldc);
}

kn_gemm_kernel
kn__gemm_pick(int parallel, int transA, int transB, int M, int N, int K)
{
	kn_gemm_kernel k = kn_gemm_current();

	if (k == KN_GEMM_AVX512 && atomic_load(&plan_n) > 0)
		k = plan_pick(parallel, transA != 0, transB != 0, M, N, K);
	return k;
}

static void
gemm_dispatch(int parallel, int transA, int transB, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc)
{
	transA = transA != 0;
	transB = transB != 0;
	if (!gemm_args_ok(transA, transB, M, N, K, A, lda, B, ldb, C, ldc))
		return;
	if (M == 0 || N == 0)
		return;
	if (K == 0 || alpha == 0.0f) {
		gemm_scale(M, N, beta, C, ldc);
		return;
	}
	kn__gemm_run(kn__gemm_pick(parallel, transA, transB, M, N, K),
	    parallel, transA, transB, M, N, K, alpha, A, lda, B,
	    ldb, beta, C, ldc);
}

/* Only the caller of the parallel path touches these (the pool runs one
 * kn_gemm at a time), so plain variables suffice. */
static int stats_on;
static kn_gemm_stats stats;

void
kn_gemm_stats_enable(int on)
{
	stats_on = on;
}

void
kn_gemm_stats_reset(void)
{
	memset(&stats, 0, sizeof(stats));
}

void
kn_gemm_stats_get(kn_gemm_stats *s)
{
	*s = stats;
}

static void
stats_add(double t0, int M, int N, int K)
{
	if (stats_on) {
		stats.seconds += kn_now() - t0;
		stats.flops += 2.0 * M * N * (double)K;
		stats.calls++;
	}
}

void
kn_gemm(int transA, int transB, int M, int N, int K, float alpha,
    const float *A, int lda, const float *B, int ldb, float beta,
    float *C, int ldc)
{
	double t0 = stats_on ? kn_now() : 0.0;

	gemm_dispatch(1, transA, transB, M, N, K, alpha, A, lda, B, ldb,
	    beta, C, ldc);
	stats_add(t0, M, N, K);
}

static int
gemm_f16(int parallel, int M, int N, int K, const float *A, int lda,
    const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
	if (M <= 0 || N <= 0 || K <= 0 || A == NULL || B == NULL ||
	    C == NULL || lda < K || ldb < K || ldc < N)
		return 0;
	if (kn__gemm_pick(parallel, 0, 1, M, N, K) != KN_GEMM_AVX512)
		return 0;
	kn__gemm_avx512_f16(parallel, M, N, K, A, lda, B, ldb, beta, C, ldc);
	return 1;
}

int
kn_gemm_f16(int M, int N, int K, const float *A, int lda, const uint16_t *B,
    int ldb, float beta, float *C, int ldc)
{
	return gemm_f16(1, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

int
kn_gemm_serial_f16(int M, int N, int K, const float *A, int lda,
    const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
	return gemm_f16(0, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

size_t
kn_gemm_pack_floats(int N, int K)
{
	return N > 0 && K > 0 ? kn__gemm_avx512_packed_floats(N, K) : 0;
}

void
kn_gemm_pack(const float *B, int N, int K, float *packed)
{
	if (N > 0 && K > 0)
		kn__gemm_avx512_pack(B, K, N, K, packed);
}

void
kn_gemm_packed(int M, int N, int K, const float *A, int lda,
    const float *B, const float *packed, const float *bias, float beta,
    float *C, int ldc)
{
	double t0;
	int i;

	/* the packed panels are our kernel's: any other kernel this class
	 * takes reads B itself */
	if (packed == NULL || ((uintptr_t)packed & 63) != 0 || M <= 0 ||
	    N <= 0 || K <= 0 ||
	    !gemm_args_ok(0, 1, M, N, K, A, lda, B, K, C, ldc) ||
	    kn_gemm_current() != KN_GEMM_AVX512 ||
	    (atomic_load(&plan_n) > 0 &&
	    plan_pick(1, 0, 1, M, N, K) != KN_GEMM_AVX512)) {
		for (i = 0; bias != NULL && i < M && N > 0; i++)
			memcpy(C + (size_t)i * ldc, bias,
			    (size_t)N * sizeof(float));
		kn_gemm(0, 1, M, N, K, 1.0f, A, lda, B, K, bias != NULL ?
		    1.0f : beta, C, ldc);
		return;
	}
	t0 = stats_on ? kn_now() : 0.0;
	kn__gemm_avx512_packed(1, M, N, K, A, lda, B, K, packed, bias, beta,
	    C, ldc);
	stats_add(t0, M, N, K);
}

void
kn_gemm_serial(int transA, int transB, int M, int N, int K, float alpha,
    const float *A, int lda, const float *B, int ldb, float beta,
    float *C, int ldc)
{
	gemm_dispatch(0, transA, transB, M, N, K, alpha, A, lda, B, ldb,
	    beta, C, ldc);
}
