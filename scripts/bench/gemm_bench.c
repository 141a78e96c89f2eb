/* GFLOP/s of kn_gemm against OpenBLAS on the GEMM shapes of our models,
 * measured in the same run: gemm-bench [threads] (default 2).  Columns:
 * ours (kn_gemm, or kn_gemm_serial inside pool tasks for attention),
 * OpenBLAS with its own threads, OpenBLAS held to one thread per tile on
 * our pool, and ours over the better OpenBLAS figure. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cblas.h>

#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"

/* Each figure is the best of BENCH_ROUNDS rounds of BENCH_ROUND_S. */
#define BENCH_ROUNDS 12
#define BENCH_ROUND_S 0.03

enum impl { IMPL_OURS, IMPL_BLAS_THREADS, IMPL_BLAS_POOL, IMPL_COUNT };

struct shape {
	const char *name;
	int transA, transB, M, N, K, lda, ldb, ldc;
	float beta;
	/* batch > 0: batch x nh calls, one pool task each, call (b, h)
	 * offset by b * x_seq + h * x_head in each operand x */
	int batch, nh;
	size_t a_seq, a_head, b_seq, b_head, c_seq, c_head;
};

struct bench {
	const struct shape *s;
	const float *A, *B;
	float *C;
	enum impl impl;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void
blas_call(const struct shape *s, const float *A, const float *B, float *C)
{
	cblas_sgemm(CblasRowMajor, s->transA ? CblasTrans : CblasNoTrans,
	    s->transB ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f,
	    A, s->lda, B, s->ldb, s->beta, C, s->ldc);
}

static void
batch_task(void *ctx, int t, int thread)
{
	const struct bench *b = ctx;
	const struct shape *s = b->s;
	size_t seq = (size_t)(t / s->nh), head = (size_t)(t % s->nh);
	const float *A = b->A + seq * s->a_seq + head * s->a_head;
	const float *B = b->B + seq * s->b_seq + head * s->b_head;
	float *C = b->C + seq * s->c_seq + head * s->c_head;

	(void)thread;
	if (b->impl == IMPL_OURS)
		kn_gemm_serial(s->transA, s->transB, s->M, s->N, s->K, 1.0f,
		    A, s->lda, B, s->ldb, s->beta, C, s->ldc);
	else
		blas_call(s, A, B, C);
}

static void
run_once(struct bench *b)
{
	const struct shape *s = b->s;
	int t;

	if (s->batch > 0) {
		if (b->impl == IMPL_BLAS_THREADS)
			for (t = 0; t < s->batch * s->nh; t++)
				batch_task(b, t, 0);
		else
			kn_pool_run(s->batch * s->nh, batch_task, b);
		return;
	}
	if (b->impl == IMPL_BLAS_THREADS)
		blas_call(s, b->A, b->B, b->C);
	else
		kn_gemm(s->transA, s->transB, s->M, s->N, s->K, 1.0f, b->A,
		    s->lda, b->B, s->ldb, s->beta, b->C, s->ldc);
}

/* Sets up the process for one implementation. */
static void
impl_select(enum impl impl, int threads)
{
	switch (impl) {
	case IMPL_OURS:
		kn_gemm_use(KN_GEMM_AUTO);
		openblas_set_num_threads(1);
		break;
	case IMPL_BLAS_THREADS:
		openblas_set_num_threads(threads);
		break;
	default:
		kn_gemm_use(KN_GEMM_OPENBLAS);
		openblas_set_num_threads(1);
		break;
	}
}

static double
measure_rounds(struct bench *b, enum impl impl, int threads, int rounds)
{
	double flop = 2.0 * b->s->M * b->s->N * b->s->K *
	    (b->s->batch > 0 ? b->s->batch * b->s->nh : 1);
	double best = 0.0, t0, t;
	long n;
	int r;

	b->impl = impl;
	impl_select(impl, threads);
	for (r = 0; r < rounds; r++) {
		t0 = now_s();
		n = 0;
		do {
			run_once(b);
			n++;
		} while ((t = now_s() - t0) < BENCH_ROUND_S);
		if (flop * n / t * 1e-9 > best)
			best = flop * n / t * 1e-9;
	}
	return best;
}

/* Best GFLOP/s of each implementation over BENCH_ROUNDS rounds.  Ours
 * and OpenBLAS on our pool take turns within each round, so that other
 * load on the machine hits both alike.  OpenBLAS with its own threads
 * goes last: its idle threads spin on sched_yield for a while after each
 * call and would slow whatever ran next. */
static void
measure(struct bench *b, int threads, double best[IMPL_COUNT])
{
	const struct timespec settle = { 0, 200 * 1000 * 1000 };
	double g;
	int r;

	best[IMPL_OURS] = best[IMPL_BLAS_POOL] = 0.0;
	measure_rounds(b, IMPL_OURS, threads, 1);
	measure_rounds(b, IMPL_BLAS_POOL, threads, 1);
	for (r = 0; r < BENCH_ROUNDS; r++) {
		if ((g = measure_rounds(b, IMPL_OURS, threads, 1)) >
		    best[IMPL_OURS])
			best[IMPL_OURS] = g;
		if ((g = measure_rounds(b, IMPL_BLAS_POOL, threads, 1)) >
		    best[IMPL_BLAS_POOL])
			best[IMPL_BLAS_POOL] = g;
	}
	best[IMPL_BLAS_THREADS] = measure_rounds(b, IMPL_BLAS_THREADS,
	    threads, BENCH_ROUNDS);
	impl_select(IMPL_OURS, threads);
	nanosleep(&settle, NULL);
}

static size_t
span(int rows, int ld)
{
	return (size_t)rows * ld;
}

static void
bench_shape(const struct shape *s, int threads)
{
	size_t nseq = s->batch > 0 ? (size_t)s->batch - 1 : 0;
	size_t nhead = s->batch > 0 ? (size_t)s->nh - 1 : 0;
	size_t na = span(s->transA ? s->K : s->M, s->lda) +
	    nseq * s->a_seq + nhead * s->a_head;
	size_t nb = span(s->transB ? s->N : s->K, s->ldb) +
	    nseq * s->b_seq + nhead * s->b_head;
	size_t nc = span(s->M, s->ldc) + nseq * s->c_seq + nhead * s->c_head;
	float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
	float *C = calloc(nc, sizeof(float));
	struct bench b = { .s = s, .A = A, .B = B, .C = C };
	double gf[IMPL_COUNT], best;
	size_t i;

	if (A == NULL || B == NULL || C == NULL) {
		fprintf(stderr, "gemm-bench: out of memory for %s\n", s->name);
		exit(1);
	}
	srand(1);
	for (i = 0; i < na; i++)
		A[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	for (i = 0; i < nb; i++)
		B[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	measure(&b, threads, gf);
	best = gf[IMPL_BLAS_THREADS] > gf[IMPL_BLAS_POOL] ?
	    gf[IMPL_BLAS_THREADS] : gf[IMPL_BLAS_POOL];
	printf("%-34s %c%c %5d %5d %5d %8.1f %8.1f %8.1f %6.2f\n", s->name,
	    s->transA ? 'T' : 'N', s->transB ? 'T' : 'N', s->M, s->N, s->K,
	    gf[IMPL_OURS], gf[IMPL_BLAS_THREADS], gf[IMPL_BLAS_POOL],
	    gf[IMPL_OURS] / best);
	fflush(stdout);
	free(A);
	free(B);
	free(C);
}

/* The products of one Transformer block: a linear layer of width C to
 * OC over N positions, forward and backward. */
static void
bench_linear(int N, int C, int OC, int threads)
{
	char name[3][64];
	struct shape s[3] = {
		{ .name = name[0], .transB = 1, .M = N, .N = OC, .K = C,
		    .lda = C, .ldb = C, .ldc = OC },
		{ .name = name[1], .M = N, .N = C, .K = OC, .lda = OC,
		    .ldb = C, .ldc = C },
		{ .name = name[2], .transA = 1, .M = OC, .N = C, .K = N,
		    .lda = OC, .ldb = C, .ldc = C, .beta = 1.0f },
	};
	int i;

	snprintf(name[0], sizeof(name[0]), "fwd   out=inp.W^T C%d OC%d", C, OC);
	snprintf(name[1], sizeof(name[1]), "bwd   dinp=dout.W C%d OC%d", C, OC);
	snprintf(name[2], sizeof(name[2]), "bwd   dW+=dout^T.inp C%d OC%d",
	    C, OC);
	for (i = 0; i < 3; i++)
		bench_shape(&s[i], threads);
}

/* Attention of B sequences of T positions, NH heads of hs: one serial
 * GEMM per (sequence, head), reading q, k, v out of qkv (N,3C). */
static void
bench_attention(int B, int T, int C, int NH, int threads)
{
	int hs = C / NH, n = B * NH, i;
	char name[6][64];
	/* qkv and dqkv (N,3C), out and dout (N,C), att and datt (B,NH,T,T) */
	size_t qs = (size_t)T * 3 * C, os = (size_t)T * C, h = (size_t)hs;
	size_t ts = (size_t)NH * T * T, th = (size_t)T * T;
	struct shape s[6] = {
		{ name[0], 0, 1, T, T, hs, 3 * C, 3 * C, T, 0.0f, B, NH,
		    qs, h, qs, h, ts, th },
		{ name[1], 0, 0, T, hs, T, T, 3 * C, C, 0.0f, B, NH,
		    ts, th, qs, h, os, h },
		{ name[2], 0, 1, T, T, hs, C, 3 * C, T, 0.0f, B, NH,
		    os, h, qs, h, ts, th },
		{ name[3], 1, 0, T, hs, T, T, C, 3 * C, 0.0f, B, NH,
		    ts, th, os, h, qs, h },
		{ name[4], 0, 0, T, hs, T, T, 3 * C, 3 * C, 0.0f, B, NH,
		    ts, th, qs, h, qs, h },
		{ name[5], 1, 0, T, hs, T, T, 3 * C, 3 * C, 0.0f, B, NH,
		    ts, th, qs, h, qs, h },
	};

	snprintf(name[0], sizeof(name[0]), "attn  S=q.k^T T%d hs%d x%d",
	    T, hs, n);
	snprintf(name[1], sizeof(name[1]), "attn  out=P.v T%d hs%d x%d",
	    T, hs, n);
	snprintf(name[2], sizeof(name[2]), "attn  dP=dout.v^T T%d hs%d x%d",
	    T, hs, n);
	snprintf(name[3], sizeof(name[3]), "attn  dv=P^T.dout T%d hs%d x%d",
	    T, hs, n);
	snprintf(name[4], sizeof(name[4]), "attn  dq=dS.k T%d hs%d x%d",
	    T, hs, n);
	snprintf(name[5], sizeof(name[5]), "attn  dk=dS^T.q T%d hs%d x%d",
	    T, hs, n);
	for (i = 0; i < 6; i++)
		bench_shape(&s[i], threads);
}

static void
bench_model(const char *what, int B, int T, int C, int NH, int threads)
{
	int N = B * T;

	printf("# %s: batch %d x window %d = N %d, width %d, %d heads\n",
	    what, B, T, N, C, NH);
	bench_linear(N, C, 3 * C, threads);
	bench_linear(N, C, C, threads);
	bench_linear(N, C, 4 * C, threads);
	bench_linear(N, 4 * C, C, threads);
	bench_attention(B, T, C, NH, threads);
}

int
main(int argc, char **argv)
{
	char err[KN_ERR_LEN];
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	struct shape square = { .name = "square 1024^3", .M = 1024,
	    .N = 1024, .K = 1024, .lda = 1024, .ldb = 1024, .ldc = 1024 };

	if (threads < 1)
		threads = 1;
	if (kn_pool_init(threads, err) != 0) {
		fprintf(stderr, "gemm-bench: %s\n", err);
		return 1;
	}
	if (kn_gemm_use(KN_GEMM_AUTO) != 0 ||
	    kn_gemm_current() != KN_GEMM_AVX512)
		printf("# no AVX-512 here: \"ours\" is OpenBLAS on the pool\n");
	printf("# %d threads; OpenBLAS %s, core %s; GFLOP/s, best of %d\n",
	    threads, openblas_get_config(), openblas_get_corename(),
	    BENCH_ROUNDS);
	printf("%-34s %2s %5s %5s %5s %8s %8s %8s %6s\n", "shape", "op", "M",
	    "N", "K", "ours", "blas-thr", "blas-pool", "ratio");
	bench_shape(&square, threads);
	bench_model("perf config", 32, 128, 256, 4, threads);
	bench_model("quality config (4 heads assumed)", 32, 64, 128, 4,
	    threads);
	kn_pool_shutdown();
	return 0;
}
