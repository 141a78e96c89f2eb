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
    const float *centroids, float *sims, int *assign, char *err)
{
	size_t i, p, floor_n = n / (size_t)k, nbig = n % (size_t)k, full = 0;
	size_t *size;
	struct pair *pairs;

	pairs = malloc(n * (size_t)k * sizeof(*pairs));
	size = calloc((size_t)k, sizeof(*size));
	if (pairs == NULL || size == NULL) {
		free(pairs);
		free(size);
		return kn_error(err, KN_ENOMEM, "out of memory assigning %zu "
		    "points to %d clusters", n, k);
	}
	kn_gemm(0, 1, (int)n, k, d, 1.0f, x, d, centroids, d, 0.0f, sims, k);
	for (i = 0; i < n; i++) {
		int c;

		assign[i] = -1;
		for (c = 0; c < k; c++) {
			p = i * (size_t)k + (size_t)c;
			pairs[p].sim = sims[p];
			pairs[p].point = (uint32_t)i;
			pairs[p].cluster = (uint32_t)c;
		}
	}
	qsort(pairs, n * (size_t)k, sizeof(*pairs), cmp_pair);
	/* nbig clusters may hold floor_n + 1 points, the rest floor_n: the
	 * capacities add up to n, so every point finds room */
	for (p = 0; p < n * (size_t)k; p++) {
		uint32_t c = pairs[p].cluster;

		if (assign[pairs[p].point] >= 0)
			continue;
		if (size[c] == floor_n + 1 ||
		    (size[c] == floor_n && full == nbig))
			continue;
		assign[pairs[p].point] = (int)c;
		if (++size[c] == floor_n + 1)
			full++;
	}
	free(pairs);
	free(size);
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
sa_kmeans(const float *x, size_t n, int d, int k, int iters,
    uint64_t seed, float *centroids, int *assign, sa_kmeans_progress fn,
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

		if ((rc = sa_kmeans_assign(x, n, d, k, centroids, sims,
		    assign, err)) != 0)
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
