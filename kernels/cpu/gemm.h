/* Single-precision GEMM for the CPU backend, row-major:
 * C (M,N) = alpha * op(A) . op(B) + beta * C, op(X) = X or X^T.
 * kn_gemm splits C into tiles over the thread pool; each element is
 * computed by one task with a fixed summation order, so the result does not
 * depend on the thread count.  The kernel is our AVX-512 one where the CPU
 * has AVX-512F, else OpenBLAS (held to one thread per call); a plan
 * (kn_gemm_plan, gemm_choose.c) may hand some shape classes to OpenBLAS
 * where it measured faster. */
#ifndef KN_CPU_GEMM_H
#define KN_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

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

/* kn_gemm_serial(0, 1, ...) with alpha 1 on B (N,K) stored in fp16 (rows
 * of ldb values), where our kernel runs the product's class: each weight
 * is widened as the kernel packs it, with no fp32 copy of B made
 * beforehand, and the bits are those of the float call on B widened.
 * Returns 1 when done, 0 when the class goes to another kernel (or the
 * arguments are not a product), C untouched: the caller widens B. */
int kn_gemm_serial_f16(int M, int N, int K, const float *A, int lda,
    const uint16_t *B, int ldb, float beta, float *C, int ldc);
/* The same over the pool. */
int kn_gemm_f16(int M, int N, int K, const float *A, int lda,
    const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* Weights that stay fixed, packed once: C (M,N) = A (M,K) . B^T + beta C
 * with B (N,K) row-major, as kn_gemm(0, 1, ...) with alpha 1 gives it, to
 * the bit.  kn_gemm_pack_floats is packed's size (64-byte aligned: the
 * kernel's aligned loads read it); kn_gemm_packed reads
 * packed where our kernel runs the product's class, else it is kn_gemm
 * on B (so B must stay there too).  bias (N), when not NULL, is added
 * as a C filled with it and beta 1 would (beta is then ignored), in the
 * GEMM's tiles rather than a pass of its own. */
size_t kn_gemm_pack_floats(int N, int K);
void kn_gemm_pack(const float *B, int N, int K, float *packed);
void kn_gemm_packed(int M, int N, int K, const float *A, int lda,
    const float *B, const float *packed, const float *bias, float beta,
    float *C, int ldc);

/* Chooses the kernel for the whole process and drops any plan; returns 0,
 * or KN_ENODEV when the CPU lacks what the kernel needs or OpenBLAS, where
 * it is the kernel, cannot be loaded (kn_blas_load says why).  current is
 * AUTO only while neither kernel can be had. */
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

/* The choice by measurement (gemm_choose.c).  A shape class is a product's
 * sizes and transposes, whatever its strides, and whether it runs on the
 * pool (kn_gemm) or inside one pool task (kn_gemm_serial).  The plan is
 * made once per process, before the first model step, so every product of
 * one class takes the same kernel for the life of the process. */
typedef struct {
	int parallel, transA, transB, M, N, K;
} kn_gemm_shape;

/* One class's measurement and the kernel chosen for it. */
typedef struct {
	kn_gemm_shape shape;
	double own_gflops, blas_gflops;
	kn_gemm_kernel pick;    /* KN_GEMM_AVX512 ("own") or KN_GEMM_OPENBLAS */
} kn_gemm_choice;

#define KN_GEMM_MAX_SHAPES 64
/* The cache file's first line, with its format version. */
#define KN_GEMM_CACHE_MAGIC "shardmeter-gemm-choice 1"

/* "auto" (KN_GEMM_AUTO), "own" (KN_GEMM_AVX512) or "blas"
 * (KN_GEMM_OPENBLAS); returns 0 or KN_EINVAL. */
int kn_gemm_parse_mode(const char *s, kn_gemm_kernel *mode);

/* The classes of a Transformer block train step of width d, h heads,
 * window n and batch B: its five linear layers (QKV, attention output,
 * MLP in and out, head) forward and backward, and the per-head attention
 * products.  Writes at most max; returns the count. */
int kn_gemm_model_shapes(int width, int heads, int window, int batch,
    kn_gemm_shape *out, int max);

/* Times both kernels on each class (best of a few runs of a cut of the
 * shape, taking turns) into own_gflops and blas_gflops; then picks. */
int kn_gemm_measure(kn_gemm_choice *c, int n, char *err);

/* Sets each pick to the faster kernel: OpenBLAS only when it beats ours by
 * more than KN_GEMM_MARGIN, so that noise does not flip a tie. */
#define KN_GEMM_MARGIN 0.02
void kn_gemm_choose(kn_gemm_choice *c, int n);

/* The cache: one file per key (CPU model, OpenBLAS build and core, our
 * build, threads), a text file of KN_GEMM_CACHE_MAGIC, "key <key>", then
 * one line per class: "parallel transA transB M N K own_gflops
 * blas_gflops own|blas".  read: returns 0 with *n entries, KN_EIO when the
 * file is missing (reason in err), KN_EINVAL naming file:line when it is
 * corrupt or holds another key. */
void kn_gemm_cache_key(char *buf, size_t len);
int kn_gemm_cache_path(char *buf, size_t len, const char *key);
int kn_gemm_cache_read(const char *path, const char *key, kn_gemm_choice *c,
    int max, int *n, char *err);
int kn_gemm_cache_write(const char *path, const char *key,
    const kn_gemm_choice *c, int n, char *err);

/* Makes the process's plan for these classes, once: the first call
 * decides, later ones return 0 and change nothing.  mode AUTO reads the
 * picks from the cache at cache_path (NULL: kn_gemm_cache_path; "": no
 * cache), measures the classes it lacks and writes the union back; OWN or
 * BLAS uses that kernel for every product.  note (KN_ERR_LEN) receives what
 * was not fatal (a cache that could not be read or written, "own" asked on
 * a CPU without AVX-512).  Classes outside the plan take our kernel. */
int kn_gemm_plan(const kn_gemm_shape *s, int n, kn_gemm_kernel mode,
    const char *cache_path, char *note, char *err);
/* The plan in force (NULL, 0 when none). */
void kn_gemm_plan_get(const kn_gemm_choice **c, int *n);
/* One line: the mode and, under auto, how many classes each kernel won
 * and where the figures came from. */
void kn_gemm_plan_describe(char *buf, size_t len);

/* Internal to the CPU backend (gemm.c, gemm_choose.c, attention.c). */
void kn__gemm_run(kn_gemm_kernel k, int parallel, int transA, int transB,
    int M, int N, int K, float alpha, const float *A, int lda,
    const float *B, int ldb, float beta, float *C, int ldc);
void kn__gemm_plan_install(const kn_gemm_choice *c, int n);
/* The kernel a product of this class runs on: the process's, or the
 * plan's pick for the class.  The attention's row subset asks it so as to
 * give each row the bits the full product would. */
kn_gemm_kernel kn__gemm_pick(int parallel, int transA, int transB, int M,
    int N, int K);

#endif
