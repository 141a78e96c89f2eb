/* EGGROLL-style evolution strategies, a control of DESIGN section 3: each
 * matrix of the parameter vector is perturbed by a rank-r product
 * E = A B^T / sqrt(r), each vector by a full Gaussian, in antithetic
 * pairs, with normalised fitness.  Same callback and chunking as SPSA. */
#ifndef KN_EGGROLL_H
#define KN_EGGROLL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/spsa.h"

/* One tensor of the flat parameter vector, row-major (rows, cols) at
 * offset; a vector is rows x 1.  Parameters outside every tensor are
 * neither perturbed nor updated. */
typedef struct {
	size_t offset;
	int rows, cols;
} kn_egg_tensor;

typedef struct {
	int K;                  /* population, even: antithetic pairs */
	int rank;               /* r of each matrix perturbation */
	float sigma;            /* perturbation scale */
	float lr;
	int k_max;              /* copies per eval call, >= 1 */
	int groups;             /* columns of the eval's losses; summed */
	uint64_t seed;
} kn_egg_config;

/* Owns everything it allocates, freed by kn_egg_free.  Memory is
 * O(k_max n) plus the population's losses. */
typedef struct {
	kn_egg_config cfg;
	size_t n;
	kn_egg_tensor *tensors; /* (ntensors), ordered by offset */
	int ntensors;
	uint64_t step;          /* updates done; keys this step's draws */
	float *copies;          /* (k_max, n) */
	float *losses;          /* (K, groups) */
	float *weight;          /* (K/2) update weight of each pair */
	float *delta;           /* (n) the last update */
	float *scratch;         /* (threads, scratch_len) A and B */
	size_t scratch_len;
	int scratch_threads;
	double *group_loss;     /* (groups) for kn_zo_stats */
	/* what the buffers were sized for */
	int alloc_K, alloc_k_max, alloc_groups, alloc_rank;
} kn_egg;

/* Tensors must lie inside n, in increasing offset, without overlap.  K,
 * rank, k_max and groups are fixed from then on; sigma, lr and seed may
 * change between steps. */
int kn_egg_init(kn_egg *s, size_t n, const kn_egg_tensor *tensors,
    int ntensors, const kn_egg_config *cfg, char *err);
void kn_egg_free(kn_egg *s);

/* E (rows, cols) of tensor t for the pair of member `member` (members
 * 2i and 2i+1 share pair i; member 2i gets +sigma E, 2i+1 -sigma E) at
 * step: A (rows, r) and B (cols, r) standard normal keyed by (seed, step,
 * pair, t), E = A B^T / sqrt(r); a vector's E is its own standard normal
 * draw.  scratch holds (rows + cols) r floats. */
void kn_egg_perturbation(const kn_egg *s, int t, uint64_t step, int member,
    float *E, float *scratch);

/* One step: K evaluations of theta + sigma s_k E_k (s_k = +1 for even
 * members, -1 for odd), fitness f_k = -(L_k - mean L) / std L with the
 * loss summed over groups and the population std (all equal: no
 * update), then theta += lr / (K sigma) sum_k f_k s_k E_k.  Fitness is
 * minus the loss, so the step descends.  Bitwise the same whatever the
 * pool's thread count; on failure theta and step are unchanged. */
int kn_egg_step(kn_egg *s, float *theta, kn_zo_eval_fn eval, void *ctx,
    kn_zo_stats *stats, char *err);

#endif
