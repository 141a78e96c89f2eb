/* Single-precision GEMM for the CPU backend, row-major:
 * C (M,N) = alpha * op(A) . op(B) + beta * C, op(X) = X or X^T.
 * kn_gemm splits C into tiles over the thread pool; each element is
 * computed by one task with a fixed summation order, so the result does not
 * depend on the thread count.  The kernel is our AVX-512 one where the CPU
 * has AVX-512F, else OpenBLAS (held to one thread per call). */
#ifndef KN_CPU_GEMM_H
#define KN_CPU_GEMM_H

typedef enum {
	KN_GEMM_AUTO = 0,     /* AVX-512 when the CPU has it, else OpenBLAS */
	KN_GEMM_OPENBLAS,     /* cblas_sgemm: the reference */
	KN_GEMM_AVX512
} kn_gemm_kernel;

/* Parallel over the pool. */
void kn_gemm(int transA, int transB, int M, int N, int K, float alpha,
    const float *A, int lda, const float *B, int ldb, float beta,
    float *C, int ldc);

/* In the calling thread only: for use inside a pool task. */
void kn_gemm_serial(int transA, int transB, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc);

/* Chooses the kernel for the whole process; returns 0, or KN_ENODEV when
 * the CPU lacks what the kernel needs. */
int kn_gemm_use(kn_gemm_kernel k);
kn_gemm_kernel kn_gemm_current(void);
const char *kn_gemm_name(kn_gemm_kernel k);

/* Wall time and flops of the parallel kn_gemm calls, for the benchmarks'
 * GEMM share of a step; off unless enabled, and then one clock read per
 * call. */
typedef struct {
	double seconds;
	double flops;
	long calls;
} kn_gemm_stats;

void kn_gemm_stats_enable(int on);
void kn_gemm_stats_reset(void);
void kn_gemm_stats_get(kn_gemm_stats *s);

#endif
