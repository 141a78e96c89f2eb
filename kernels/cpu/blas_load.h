/* OpenBLAS, loaded with dlopen on first use rather than linked: loading
 * it starts its threads, about 6 ms of every start of the programs,
 * which the commands that compute nothing should not pay.  cblas.h still
 * gives the types; the functions are called through this table. */
#ifndef KN_CPU_BLAS_LOAD_H
#define KN_CPU_BLAS_LOAD_H

#include <stddef.h>

#include <cblas.h>

/* The soname loaded, and the Debian package that installs it. */
#define KN_BLAS_LIBRARY "libopenblas.so.0"
#define KN_BLAS_PACKAGE "libopenblas0"

/* What the tree calls of OpenBLAS, typed as cblas.h declares it
 * (blas_load.c checks cblas_sgemm against it), and the three LAPACK
 * routines of soma/svd.c, which OpenBLAS exports with Fortran's calling
 * convention (no lapacke.h here): the hidden length arguments are those
 * gfortran passes for CHARACTER arguments. */
typedef struct {
	void (*sgemm)(const enum CBLAS_ORDER order,
	    const enum CBLAS_TRANSPOSE transA,
	    const enum CBLAS_TRANSPOSE transB, const blasint M,
	    const blasint N, const blasint K, const float alpha,
	    const float *A, const blasint lda, const float *B,
	    const blasint ldb, const float beta, float *C, const blasint ldc);
	char *(*get_corename)(void);
	char *(*get_config)(void);
	void (*sgeqrf)(const int *m, const int *n, float *a, const int *lda,
	    float *tau, float *work, const int *lwork, int *info);
	void (*sorgqr)(const int *m, const int *n, const int *k, float *a,
	    const int *lda, const float *tau, float *work, const int *lwork,
	    int *info);
	void (*dgesvd)(const char *jobu, const char *jobvt, const int *m,
	    const int *n, double *a, const int *lda, double *s, double *u,
	    const int *ldu, double *vt, const int *ldvt, double *work,
	    const int *lwork, int *info, size_t jobu_len, size_t jobvt_len);
} kn_blas;

/* Loads OpenBLAS once per process (any thread; later calls return the
 * first's outcome) and holds it to one thread, LAPACK included: our pool
 * is the thread budget, and one thread keeps the bits independent of
 * the machine.  Returns the table, or NULL with the reason in err
 * (KN_ERR_LEN bytes, NULL allowed): KN_ENODEV, naming the package to
 * install. */
const kn_blas *kn_blas_load(char *err);

#endif
