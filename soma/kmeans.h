/* Balanced spherical k-means for SOMA's clusters (DESIGN section 3):
 * unit vectors, cosine similarity, k-means++ seeding from a seeded
 * counter-based generator, and assignments under capacities that keep
 * every cluster's weight within the largest point weight of the mean:
 * with unit weights (documents) floor(n/k) or ceil(n/k) points, with
 * weights in bytes within one document's bytes of an equal share.  The
 * same for a seed whatever the thread count. */
#ifndef SA_KMEANS_H
#define SA_KMEANS_H

#include <stddef.h>
#include <stdint.h>

#define SA_KMEANS_ITERS 30

/* Progress after each iteration (NULL: none): the points that changed
 * cluster and the mean cosine to the assigned centroid. */
typedef void (*sa_kmeans_progress)(void *ctx, int iter, size_t moved,
    double mean_cos);

/* Clusters the n points x (n, d), unit rows (zero rows allowed), of
 * weight (n, positive; NULL: all 1) into k clusters: centroids (k, d)
 * unit rows, assign (n) the cluster of each point.  Stops when no point
 * moves or after iters iterations.  0 or KN_EINVAL (k < 1 or k > n) /
 * KN_ENOMEM. */
int sa_kmeans(const float *x, size_t n, int d, int k, const double *weight,
    int iters, uint64_t seed, float *centroids, int *assign, sa_kmeans_progress fn,
    void *ctx, char *err);

/* The balanced assignment alone, for given centroids: point i's cluster
 * in assign, taken greedily over all (point, cluster) pairs by descending
 * cosine, ties to the lower point then the lower cluster, while the
 * cluster has room (two passes: see kmeans.c).  sims (n, k) receives the
 * cosines.  0 or KN_ENOMEM. */
int sa_kmeans_assign(const float *x, size_t n, int d, int k,
    const double *weight, const float *centroids, float *sims, int *assign,
    char *err);

#endif
