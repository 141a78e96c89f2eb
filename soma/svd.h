/* Truncated SVD of the tf-idf rows for SOMA's document embeddings
 * (DESIGN section 3; published: 128 dimensions): a seeded randomized
 * range finder with power iterations (Halko, Martinsson and Tropp 2011),
 * its GEMMs through kn_gemm, and a small QR and SVD from LAPACK. */
#ifndef SA_SVD_H
#define SA_SVD_H

#include <stddef.h>
#include <stdint.h>

#include "soma/tfidf.h"

#define SA_SVD_DIMS 128
/* Extra directions of the range finder, and its power iterations. */
#define SA_SVD_OVERSAMPLE 10
#define SA_SVD_POWER_ITERS 3

/* The top dims right singular vectors of a as the columns of basis
 * (a->ncols, dims), row-major, and the singular values, descending, in
 * sigma (dims; NULL allowed).  The same for a seed whatever the thread
 * count.  dims must be at most min(a->nrows, a->ncols).  0 or KN_EINVAL
 * / KN_ENOMEM / KN_ENUM (LAPACK failed). */
int sa_svd(const sa_csr *a, int dims, int power_iters, uint64_t seed,
    float *basis, float *sigma, char *err);

/* The leading singular directions the embedding leaves out by default.
 * On tf-idf rows of natural text the first is the words most documents
 * share, in proportion to how many of them a document holds: clusters
 * along it follow a document's length and register, not its topic (on
 * the enwiki article text two clusters of equal bytes came out as 1,763
 * long articles against 29,834 short ones, both with top words "the of
 * and").  The same reasoning removes the first principal component of
 * averaged word embeddings (Arora, Liang and Ma 2017). */
#define SA_SVD_SKIP 1

/* basis (rows, total), row-major, keeps its columns skip .. total - 1,
 * in place, as a (rows, total - skip) matrix.  0 <= skip < total. */
void sa_basis_skip(float *basis, size_t rows, int total, int skip);

/* The embedding of one sparse row (nnz entries): the row times basis
 * (ncols, dims), L2-normalised (all zeros for a row of no word) into out
 * (dims).  Documents and the router's contexts both go through this. */
void sa_embed_row(const uint32_t *col, const float *val, size_t nnz,
    const float *basis, int dims, float *out);
/* Every row of a embedded into out (a->nrows, dims), over the pool. */
void sa_embed_rows(const sa_csr *a, const float *basis, int dims,
    float *out);

#endif
