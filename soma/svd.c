/* The randomized truncated SVD of sparse tf-idf rows (see svd.h).  The
 * sparse products run over the pool in fixed blocks of rows, each row
 * summed in one order, and LAPACK runs on one thread (kn_blas_load holds
 * OpenBLAS to one), so a seed gives the same basis on any machine
 * count of threads. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/blas_load.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "soma/svd.h"

/* Rows per pool task: fixed, so the split never depends on the threads. */
#define ROWS_PER_TASK 256
/* The stream of the range finder's test matrix. */
#define SVD_STREAM 0x5356440aull

/* ---- sparse products ---- */

struct spmm_job {
	const sa_csr *a;
	const float *m;         /* (a->ncols, l) */
	float *out;             /* (a->nrows, l) */
	int l;
};

static void
spmm_task(void *ctx, int task, int thread)
{
	const struct spmm_job *g = ctx;
	size_t i, k, end = (size_t)(task + 1) * ROWS_PER_TASK;
	int c;

	(void)thread;
	if (end > g->a->nrows)
		end = g->a->nrows;
	for (i = (size_t)task * ROWS_PER_TASK; i < end; i++) {
		float *o = g->out + i * (size_t)g->l;

		memset(o, 0, (size_t)g->l * sizeof(*o));
		for (k = g->a->rowptr[i]; k < g->a->rowptr[i + 1]; k++) {
			const float *r = g->m + (size_t)g->a->col[k] * g->l;
			float v = g->a->val[k];

			for (c = 0; c < g->l; c++)
				o[c] += v * r[c];
		}
	}
}

/* out = a m */
static void
spmm(const sa_csr *a, const float *m, int l, float *out)
{
	struct spmm_job g = { a, m, out, l };

	kn_pool_run((int)((a->nrows + ROWS_PER_TASK - 1) / ROWS_PER_TASK),
	    spmm_task, &g);
}

static int
csr_transpose(const sa_csr *a, sa_csr *t)
{
	size_t nnz = a->rowptr[a->nrows], i, k, *fill;

	memset(t, 0, sizeof(*t));
	t->nrows = a->ncols;
	t->ncols = a->nrows;
	t->rowptr = calloc(a->ncols + 1, sizeof(*t->rowptr));
	t->col = malloc((nnz ? nnz : 1) * sizeof(*t->col));
	t->val = malloc((nnz ? nnz : 1) * sizeof(*t->val));
	fill = malloc((a->ncols + 1) * sizeof(*fill));
	if (t->rowptr == NULL || t->col == NULL || t->val == NULL ||
	    fill == NULL) {
		free(fill);
		sa_csr_free(t);
		return KN_ENOMEM;
	}
	for (k = 0; k < nnz; k++)
		t->rowptr[a->col[k] + 1]++;
	for (i = 0; i < a->ncols; i++)
		t->rowptr[i + 1] += t->rowptr[i];
	memcpy(fill, t->rowptr, (a->ncols + 1) * sizeof(*fill));
	for (i = 0; i < a->nrows; i++)
		for (k = a->rowptr[i]; k < a->rowptr[i + 1]; k++) {
			size_t at = fill[a->col[k]]++;

			t->col[at] = (uint32_t)i;
			t->val[at] = a->val[k];
		}
	free(fill);
	return 0;
}

/* ---- dense steps ---- */

/* dst (cols, rows) = src (rows, cols)^T */
static void
transpose(const float *src, size_t rows, size_t cols, float *dst)
{
	size_t i, j;

	for (i = 0; i < rows; i++)
		for (j = 0; j < cols; j++)
			dst[j * rows + i] = src[i * cols + j];
}

/* a (m, l), column-major, becomes the Q of its QR; its R (l, l), upper
 * triangular and column-major, goes to r unless r is NULL. */
static int
qr_colmajor(float *a, int m, int l, double *r, char *err)
{
	const kn_blas *bl = kn_blas_load(err);
	float *tau, *work, wq;
	int info = 0, lwork = -1, i, j;

	if (bl == NULL)
		return KN_ENODEV;
	bl->sgeqrf(&m, &l, a, &m, NULL, &wq, &lwork, &info);
	lwork = (int)wq;
	bl->sorgqr(&m, &l, &l, a, &m, NULL, &wq, &(int){ -1 }, &info);
	if ((int)wq > lwork)
		lwork = (int)wq;
	if (lwork < l)
		lwork = l;
	tau = malloc((size_t)l * sizeof(*tau));
	work = malloc((size_t)lwork * sizeof(*work));
	if (tau == NULL || work == NULL) {
		free(tau);
		free(work);
		return kn_error(err, KN_ENOMEM, "out of memory for a QR of "
		    "%d x %d", m, l);
	}
	bl->sgeqrf(&m, &l, a, &m, tau, work, &lwork, &info);
	if (info == 0 && r != NULL)
		for (j = 0; j < l; j++)
			for (i = 0; i < l; i++)
				r[(size_t)j * l + i] = i <= j ?
				    a[(size_t)j * m + i] : 0.0;
	if (info == 0)
		bl->sorgqr(&m, &l, &l, a, &m, tau, work, &lwork, &info);
	free(tau);
	free(work);
	if (info != 0)
		return kn_error(err, KN_ENUM, "LAPACK QR of %d x %d failed "
		    "(info %d)", m, l, info);
	return 0;
}

/* The columns of m (rows, l), row-major, replaced by an orthonormal basis
 * of their span; scratch holds rows * l floats. */
static int
orthonormalize(float *m, size_t rows, int l, float *scratch, char *err)
{
	int rc;

	transpose(m, rows, (size_t)l, scratch);
	if ((rc = qr_colmajor(scratch, (int)rows, l, NULL, err)) != 0)
		return rc;
	transpose(scratch, (size_t)l, rows, m);
	return 0;
}

/* The SVD r = U S W^T of the small (l, l) r: U, column-major, as floats
 * into u and S into s. */
static int
small_svd(double *r, int l, float *u, double *s, char *err)
{
	const kn_blas *bl = kn_blas_load(err);
	double *ud, *work, wq, vt = 0;
	int info = 0, lwork = -1, one = 1;
	size_t i;

	if (bl == NULL)
		return KN_ENODEV;
	bl->dgesvd("A", "N", &l, &l, r, &l, s, NULL, &l, &vt, &one, &wq, &lwork,
	    &info, 1, 1);
	lwork = (int)wq;
	ud = malloc((size_t)l * l * sizeof(*ud));
	work = malloc((size_t)lwork * sizeof(*work));
	if (ud == NULL || work == NULL) {
		free(ud);
		free(work);
		return kn_error(err, KN_ENOMEM, "out of memory for an SVD of "
		    "%d x %d", l, l);
	}
	bl->dgesvd("A", "N", &l, &l, r, &l, s, ud, &l, &vt, &one, work, &lwork,
	    &info, 1, 1);
	for (i = 0; info == 0 && i < (size_t)l * l; i++)
		u[i] = (float)ud[i];
	free(ud);
	free(work);
	if (info != 0)
		return kn_error(err, KN_ENUM, "LAPACK SVD of %d x %d failed "
		    "(info %d)", l, l, info);
	return 0;
}

/* Each column of basis (rows, dims) with its largest entry positive, so
 * the sign of a singular vector is a function of the data. */
static void
fix_signs(float *basis, size_t rows, int dims)
{
	size_t i;
	int c;

	for (c = 0; c < dims; c++) {
		float big = 0;

		for (i = 0; i < rows; i++)
			if (fabsf(basis[i * dims + c]) > fabsf(big))
				big = basis[i * dims + c];
		if (big < 0)
			for (i = 0; i < rows; i++)
				basis[i * dims + c] = -basis[i * dims + c];
	}
}

int
sa_svd(const sa_csr *a, int dims, int power_iters, uint64_t seed,
    float *basis, float *sigma, char *err)
{
	size_t n = a->nrows, v = a->ncols, big;
	float *y = NULL, *z = NULL, *scratch = NULL, *u = NULL;
	double *r = NULL, *s = NULL;
	sa_csr at = { 0 };
	int l, it, c, rc;

	if (dims < 1 || (size_t)dims > n || (size_t)dims > v)
		return kn_error(err, KN_EINVAL, "an SVD of %zu x %zu has at "
		    "most %zu dimensions, not %d", n, v, n < v ? n : v, dims);
	if (n > INT32_MAX / 1024 || v > INT32_MAX / 1024)
		return kn_error(err, KN_EINVAL, "an SVD of %zu x %zu is too "
		    "large", n, v);
	l = dims + SA_SVD_OVERSAMPLE;
	if ((size_t)l > n)
		l = (int)n;
	if ((size_t)l > v)
		l = (int)v;
	big = n > v ? n : v;
	y = malloc(n * (size_t)l * sizeof(*y));
	z = malloc(v * (size_t)l * sizeof(*z));
	scratch = malloc(big * (size_t)l * sizeof(*scratch));
	u = malloc((size_t)l * l * sizeof(*u));
	r = malloc((size_t)l * l * sizeof(*r));
	s = malloc((size_t)l * sizeof(*s));
	if (y == NULL || z == NULL || scratch == NULL || u == NULL ||
	    r == NULL || s == NULL || csr_transpose(a, &at) != 0) {
		rc = kn_error(err, KN_ENOMEM, "out of memory for an SVD of "
		    "%zu x %zu", n, v);
		goto out;
	}

	kn_rng_fill_normal(z, v * (size_t)l, 0.0f, 1.0f, seed, SVD_STREAM);
	spmm(a, z, l, y);
	for (it = 0; it < power_iters; it++) {
		if ((rc = orthonormalize(y, n, l, scratch, err)) != 0)
			goto out;
		spmm(&at, y, l, z);
		if ((rc = orthonormalize(z, v, l, scratch, err)) != 0)
			goto out;
		spmm(a, z, l, y);
	}
	if ((rc = orthonormalize(y, n, l, scratch, err)) != 0)
		goto out;
	/* a ~ Q Q^T a = Q B with B^T = a^T Q = Q2 R and R = U S W^T, so
	 * a ~ (Q W) S (Q2 U)^T: the right singular vectors are Q2 U. */
	spmm(&at, y, l, z);
	transpose(z, v, (size_t)l, scratch);
	if ((rc = qr_colmajor(scratch, (int)v, l, r, err)) != 0 ||
	    (rc = small_svd(r, l, u, s, err)) != 0)
		goto out;
	kn_gemm(1, 1, (int)v, dims, l, 1.0f, scratch, (int)v, u, l, 0.0f,
	    basis, dims);
	fix_signs(basis, v, dims);
	for (c = 0; sigma != NULL && c < dims; c++)
		sigma[c] = (float)s[c];
	rc = 0;
out:
	free(y);
	free(z);
	free(scratch);
	free(u);
	free(r);
	free(s);
	sa_csr_free(&at);
	return rc;
}

/* ---- embeddings ---- */

void
sa_embed_row(const uint32_t *col, const float *val, size_t nnz,
    const float *basis, int dims, float *out)
{
	double norm = 0;
	size_t k;
	int c;

	memset(out, 0, (size_t)dims * sizeof(*out));
	for (k = 0; k < nnz; k++) {
		const float *b = basis + (size_t)col[k] * dims;

		for (c = 0; c < dims; c++)
			out[c] += val[k] * b[c];
	}
	for (c = 0; c < dims; c++)
		norm += (double)out[c] * out[c];
	if (norm > 0)
		for (c = 0; c < dims; c++)
			out[c] = (float)(out[c] / sqrt(norm));
}

struct embed_job {
	const sa_csr *a;
	const float *basis;
	int dims;
	float *out;
};

static void
embed_task(void *ctx, int task, int thread)
{
	const struct embed_job *g = ctx;
	size_t i, end = (size_t)(task + 1) * ROWS_PER_TASK;

	(void)thread;
	if (end > g->a->nrows)
		end = g->a->nrows;
	for (i = (size_t)task * ROWS_PER_TASK; i < end; i++) {
		size_t k = g->a->rowptr[i];

		sa_embed_row(g->a->col + k, g->a->val + k,
		    g->a->rowptr[i + 1] - k, g->basis, g->dims,
		    g->out + i * (size_t)g->dims);
	}
}

void
sa_embed_rows(const sa_csr *a, const float *basis, int dims, float *out)
{
	struct embed_job g = { a, basis, dims, out };

	kn_pool_run((int)((a->nrows + ROWS_PER_TASK - 1) / ROWS_PER_TASK),
	    embed_task, &g);
}

void
sa_basis_skip(float *basis, size_t rows, int total, int skip)
{
	size_t i, keep = (size_t)(total - skip);

	/* row i moves down to i * keep, never past where it starts */
	for (i = 0; skip > 0 && i < rows; i++)
		memmove(basis + i * keep, basis + i * (size_t)total + skip,
		    keep * sizeof(*basis));
}
