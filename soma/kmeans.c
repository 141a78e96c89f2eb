/* Balanced spherical k-means (see kmeans.h).  Similarities come from one
 * kn_gemm per iteration; the greedy assignment and the centroid sums run
 * in a fixed order on one thread, so results do not depend on the pool. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/rng.h"
#include "soma/kmeans.h"

#define KMEANS_STREAM 0x4b4d6e73ull

struct pair {
	float sim;
	uint32_t point;
	uint32_t cluster;
};

static int
cmp_pair(const void *pa, const void *pb)
{
	const struct pair *a = pa, *b = pb;

	if (a->sim != b->sim)
		return a->sim > b->sim ? -1 : 1;
	if (a->point != b->point)
		return a->point < b->point ? -1 : 1;
	return (a->cluster > b->cluster) - (a->cluster < b->cluster);
}

int
sa_kmeans_assign(const float *x, size_t n, int d, int k,
    const double *weight, const float *centroids, float *sims, int *assign,
    char *err)
{
	size_t i, p, np = n * (size_t)k;
	double *load, total = 0, wmax = 0, cap, w;
	struct pair *pairs;
	int pass;

	pairs = malloc(np * sizeof(*pairs));
	load = calloc((size_t)k, sizeof(*load));
	if (pairs == NULL || load == NULL) {
		free(pairs);
		free(load);
		return kn_error(err, KN_ENOMEM, "out of memory assigning %zu "
		    "points to %d clusters", n, k);
	}
	kn_gemm(0, 1, (int)n, k, d, 1.0f, x, d, centroids, d, 0.0f, sims, k);
	for (i = 0; i < n; i++) {
		int c;

		w = weight ? weight[i] : 1.0;
		total += w;
		wmax = w > wmax ? w : wmax;
		assign[i] = -1;
		for (c = 0; c < k; c++) {
			p = i * (size_t)k + (size_t)c;
			pairs[p].sim = sims[p];
			pairs[p].point = (uint32_t)i;
			pairs[p].cluster = (uint32_t)c;
		}
	}
	qsort(pairs, np, sizeof(*pairs), cmp_pair);
	/* The first pass fills clusters up to the mean load W/k.  A point
	 * left over found every cluster above W/k - its weight; the second
	 * pass puts it where it fits under W/k + wmax, which the least
	 * loaded cluster (below the mean) always has.  So every cluster
	 * ends within wmax of W/k: for unit weights, floor or ceil of n/k. */
	cap = total / k;
	for (pass = 0; pass < 2; pass++, cap = total / k + wmax)
		for (p = 0; p < np; p++) {
			uint32_t c = pairs[p].cluster;

			i = pairs[p].point;
			w = weight ? weight[i] : 1.0;
			if (assign[i] >= 0 || load[c] + w > cap)
				continue;
			assign[i] = (int)c;
			load[c] += w;
		}
	free(pairs);
	free(load);
	return 0;
}

/* k-means++ on the sphere: each next centroid is a point drawn with
 * probability proportional to 1 - its best cosine to those taken. */
static void
seed_centroids(const float *x, size_t n, int d, int k, uint64_t seed,
    float *centroids, double *best)
{
	kn_rng rng;
	size_t i, pick;
	int c, j;

	kn_rng_init(&rng, seed, KMEANS_STREAM);
	pick = (size_t)kn_rng_below(&rng, n);
	for (i = 0; i < n; i++)
		best[i] = -2.0;
	for (c = 0; c < k; c++) {
		const float *cen;
		double total = 0, r;

		memcpy(centroids + (size_t)c * d, x + pick * d,
		    (size_t)d * sizeof(*x));
		cen = centroids + (size_t)c * d;
		for (i = 0; i < n; i++) {
			double s = 0;

			for (j = 0; j < d; j++)
				s += (double)x[i * d + j] * cen[j];
			if (s > best[i])
				best[i] = s;
			total += 1.0 - best[i] > 0 ? 1.0 - best[i] : 0;
		}
		if (c + 1 == k)
			break;
		r = kn_rng_uniform(&rng) * total;
		/* all points on the centroids already: any point will do */
		pick = (size_t)kn_rng_below(&rng, n);
		for (i = 0; i < n && total > 0; i++) {
			double w = 1.0 - best[i] > 0 ? 1.0 - best[i] : 0;

			if (w > 0 && r < w) {
				pick = i;
				break;
			}
			r -= w;
		}
	}
}

/* Each centroid the normalised sum of its points, summed in point order;
 * a cluster whose sum is zero keeps its centroid. */
static void
update_centroids(const float *x, size_t n, int d, int k,
    const int *assign, float *centroids, double *sum)
{
	size_t i;
	int c, j;

	memset(sum, 0, (size_t)k * d * sizeof(*sum));
	for (i = 0; i < n; i++)
		for (j = 0; j < d; j++)
			sum[(size_t)assign[i] * d + j] += x[i * d + j];
	for (c = 0; c < k; c++) {
		double norm = 0;

		for (j = 0; j < d; j++)
			norm += sum[(size_t)c * d + j] * sum[(size_t)c * d + j];
		if (norm <= 0)
			continue;
		for (j = 0; j < d; j++)
			centroids[(size_t)c * d + j] =
			    (float)(sum[(size_t)c * d + j] / sqrt(norm));
	}
}

int
sa_kmeans(const float *x, size_t n, int d, int k, const double *weight,
    int iters, uint64_t seed, float *centroids, int *assign, sa_kmeans_progress fn,
    void *ctx, char *err)
{
	float *sims;
	double *scratch;
	int *prev, it, rc = 0;
	size_t i, moved;

	if (iters < 1)
		return kn_error(err, KN_EINVAL, "k-means needs at least one "
		    "iteration");
	if (k < 1 || (size_t)k > n)
		return kn_error(err, KN_EINVAL, "%d clusters need at least %d "
		    "points; there are %zu", k, k < 1 ? 1 : k, n);
	if (n > UINT32_MAX || n * (size_t)k > (size_t)INT32_MAX)
		return kn_error(err, KN_EINVAL, "%zu points in %d clusters "
		    "are too many", n, k);
	for (i = 0; weight != NULL && i < n; i++)
		if (!(weight[i] > 0) || !isfinite(weight[i]))
			return kn_error(err, KN_EINVAL, "point %zu has weight "
			    "%g; weights must be positive", i, weight[i]);
	sims = malloc(n * (size_t)k * sizeof(*sims));
	prev = malloc(n * sizeof(*prev));
	scratch = malloc((n > (size_t)k * d ? n : (size_t)k * d) *
	    sizeof(*scratch));
	if (sims == NULL || prev == NULL || scratch == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory clustering %zu "
		    "points", n);
		goto out;
	}
	seed_centroids(x, n, d, k, seed, centroids, scratch);
	for (i = 0; i < n; i++)
		prev[i] = -1;
	for (it = 0; it < iters; it++) {
		double cos = 0;

		if ((rc = sa_kmeans_assign(x, n, d, k, weight, centroids,
		    sims, assign, err)) != 0)
			goto out;
		for (i = 0, moved = 0; i < n; i++) {
			moved += assign[i] != prev[i];
			prev[i] = assign[i];
			cos += sims[i * (size_t)k + (size_t)assign[i]];
		}
		update_centroids(x, n, d, k, assign, centroids, scratch);
		if (fn != NULL)
			fn(ctx, it + 1, moved, cos / (double)n);
		if (moved == 0)
			break;
	}
out:
	free(sims);
	free(prev);
	free(scratch);
	return rc;
}
