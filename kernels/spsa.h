/* Zero-order training for SOMA (DESIGN section 3): SPSA over a flat
 * parameter vector, with perturbation directions regenerated from Philox
 * and never stored.  The model is reached only through a callback that
 * scores a population of parameter vectors on one minibatch, so the same
 * code trains one expert, several packed experts, or a test quadratic. */
#ifndef KN_SPSA_H
#define KN_SPSA_H

#include <stddef.h>
#include <stdint.h>

/* Scores K parameter vectors thetas (K, n), all on the same minibatch
 * (ctx owns it), into losses (K, groups): losses[k * groups + g] is group
 * g's loss for copy k.  Returns 0 or a negative KN_E* code with a message
 * in err (KN_ERR_LEN bytes). */
typedef int (*kn_zo_eval_fn)(void *ctx, const float *thetas, int K,
    float *losses, char *err);

/* What one step cost and saw. */
typedef struct {
	/* mean loss of the population per group (groups entries, owned by
	 * the optimiser's state, valid until its next step): for SPSA the
	 * mean over j of (L+ + L-)/2 */
	const double *group_loss;
	double loss;              /* mean of group_loss over the groups */
	uint64_t copies;          /* parameter vectors evaluated (2P) */
	int calls;                /* eval calls it took */
} kn_zo_stats;

/* Writes piece `piece` of population member `member` into copy (n
 * floats); thread is the pool worker's index, for scratch. */
typedef void (*kn_zo_build_fn)(void *ctx, float *copy, int member,
    int piece, int thread);

/* Scores K members in calls of at most k_max copies each: every member
 * is built into buf (k_max, n) by build over npieces pieces on the pool,
 * then eval scores the chunk into losses (K, groups).  Fails with KN_ENUM
 * on a non-finite loss, so that a diverged model stops the step before
 * it reaches the parameters.  *calls (may be NULL) counts eval calls. */
int kn_zo_population(int K, int k_max, size_t n, int groups, int npieces,
    kn_zo_build_fn build, void *bctx, float *buf, kn_zo_eval_fn eval,
    void *ectx, float *losses, int *calls, char *err);

/* How the directional derivative of each group is formed. */
enum {
	KN_SPSA_INDEPENDENT = 0,  /* group g's segment: group g's own loss */
	KN_SPSA_SUMMED = 1        /* every segment: the sum over groups (the
	                           * control of DESIGN section 3) */
};

/* Directions are sparse Rademacher scaled to unit second moment: element
 * i is +1/sqrt(density) or -1/sqrt(density) with probability density/2
 * each, 0 otherwise, so E[z z^T] = I for every density and
 * (L+ - L-)/(2 eps) z is an unbiased gradient estimate (exact on a
 * quadratic).  Its relative mean squared error with P directions is
 * (d - 2 + 1/density) / P for d parameters: (d - 1)/P for dense
 * Rademacher, d/P at the published density 0.5.
 *
 * z (n) gets elements 0..n-1 of the direction keyed by (seed, expert,
 * step, j); element i is a pure function of the key and i.  density is
 * in (0, 1]. */
void kn_spsa_direction(float *z, size_t n, uint64_t seed, uint64_t expert,
    uint64_t step, uint64_t j, float density);

typedef struct {
	int P;                  /* directions per step */
	float eps;              /* perturbation scale (schedule: halves) */
	float lr;               /* Adam step size (schedule: halves) */
	float density;          /* nonzero fraction of a direction, (0, 1] */
	float beta1, beta2;     /* Adam moment decays */
	float adam_eps;         /* Adam denominator floor */
	int k_max;              /* copies per eval call, >= 1 */
	int mode;               /* KN_SPSA_INDEPENDENT or KN_SPSA_SUMMED */
	int groups;             /* experts packed in theta, equal segments */
	uint64_t seed;
	uint64_t expert;        /* id of group 0; group g is expert + g */
	/* plateau schedule, kn_spsa_plateau */
	int patience;           /* validations without improvement */
	float plateau_rel;      /* improvement that counts, relative */
	float floor;            /* lr and eps never go below it */
} kn_spsa_config;

/* The published settings: P = 64, eps = lr = 1e-3, density 0.5, Adam
 * (0.9, 0.999, 1e-8), k_max = 2P, independent, one group, patience 3,
 * plateau_rel 1e-3, floor 1e-5. */
void kn_spsa_config_default(kn_spsa_config *cfg);

/* One optimiser: everything it allocates it frees in kn_spsa_free.
 * Memory is O(k_max n): moments, gradient and one chunk of copies. */
typedef struct {
	kn_spsa_config cfg;     /* lr and eps move with the schedule */
	size_t n;               /* parameters, groups * seg */
	size_t seg;             /* parameters per group */
	uint64_t step;          /* updates done; keys this step's directions */
	float *m, *v;           /* (n) Adam moments */
	float *grad;            /* (n) the last estimate */
	float *copies;          /* (k_max, n) */
	float *losses;          /* (2P, groups): member 2j is theta + eps z_j,
	                         * member 2j+1 theta - eps z_j */
	float *coef;            /* (P, groups) directional derivatives */
	double *group_loss;     /* (groups) for kn_zo_stats */
	double best;            /* best validation loss so far */
	int stale;              /* validations since it improved */
	int halvings;           /* times the schedule halved lr and eps */
	int alloc_P, alloc_k_max; /* what the buffers were sized for */
} kn_spsa;

/* Sizes the state for n parameters and cfg; P, k_max and groups are
 * fixed from then on, the other fields of s->cfg may change between
 * steps. */
int kn_spsa_init(kn_spsa *s, size_t n, const kn_spsa_config *cfg,
    char *err);
void kn_spsa_free(kn_spsa *s);

/* grad (n; may be s->grad) = (1/P) sum_j (L+_j - L-_j)/(2 eps) z_j for
 * the directions of step s->step, from 2P evaluations around theta.
 * Changes nothing else in s.  stats may be NULL. */
int kn_spsa_estimate(kn_spsa *s, const float *theta, kn_zo_eval_fn eval,
    void *ctx, float *grad, kn_zo_stats *stats, char *err);

/* Estimates s->grad, then the Adam update with bias-corrected moments
 * (t = step + 1): theta -= lr mhat / (sqrt(vhat) + adam_eps); step++.
 * Bitwise the same whatever the pool's thread count.  On failure theta,
 * the moments and the step are unchanged. */
int kn_spsa_step(kn_spsa *s, float *theta, kn_zo_eval_fn eval, void *ctx,
    kn_zo_stats *stats, char *err);

/* The schedule: a validation loss improves when it is below
 * best - plateau_rel * |best| (the first one always does).  After
 * `patience` validations in a row without improvement lr and eps halve,
 * each floored at `floor`, and the count starts again.  Returns 1 when
 * the plateau fired (also once both sit at the floor), 0 otherwise. */
int kn_spsa_plateau(kn_spsa *s, double val_loss);
/* The rule alone, for any optimiser's schedule (EGGROLL's too): *best
 * starts at HUGE_VAL and *stale at 0; returns 1 when the step sizes are
 * due to halve. */
int kn_zo_plateau(double *best, int *stale, double val_loss, double rel,
    int patience);

#endif
