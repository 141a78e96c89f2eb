/* Verified averaging (DESIGN section 5): before a round's average or a
 * peer's checkpoint is taken, the trainer thread scores it on its own
 * held-out windows, since a block's share is an exact slice of the bound
 * that every replica computes alone.  The cases (windows and noise draws)
 * are keyed by the run and the round, so every replica of a round scores
 * the same cases with the same weights and reaches the same decision.
 * Runs on the trainer thread (worker.c); it uses the model's weights as
 * scratch. */
#ifndef SM_VERIFY_H
#define SM_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/robust.h"

#define VF_MAX KN_ROBUST_MAX
/* An update is left out when including it raises the share on the
 * round's cases by more than VF_Z standard errors of the paired
 * per-case differences (the noise of the run's own cases) and by more
 * than VF_FLOOR of the share, unless it is, alone (clipped as in the
 * combination), a step down from the round's start by more than
 * VF_SOLO_Z standard errors.  The second test keeps an honest update that is only
 * worse than the others' (early in a run, the better of two honest
 * updates alone beats their mean by several per cent,
 * tests/check_verify.c); a poisoned one is no step down. */
#define VF_Z 2.0
#define VF_FLOOR 0.01
#define VF_SOLO_Z 1.0
/* With VF_OUTLIER_MIN updates or more, one whose norm is more than
 * VF_OUTLIER times their lower median is left out unscored: honest
 * updates of one round, H steps each from the same weights, differ in
 * norm by well under KN_ROBUST_CLIP. */
#define VF_OUTLIER 10.0
#define VF_OUTLIER_MIN 3
/* The check's share of a round: the cases are chosen so that scoring
 * them all costs at most this fraction (r + 1 scores with r replicas,
 * and at most r + 1 more for updates that fail the first test)
 * of the round's training (a case is a forward pass of one window, a
 * training window about three). */
#define VF_BUDGET 0.04
#define VF_MIN_WINDOWS 4
#define VF_MAX_WINDOWS 64

typedef struct vf_scorer {
	kn_model *m;
	const pr_spec *spec;
	const corpus *valid;    /* NULL: nothing to score on, no check */
	double lo, hi;          /* the block's interval */
	const char *run_id;     /* the cases' key, with block and round */
	int block;
	int windows;            /* per score; strata: BT_EVAL_STRATA */
} vf_scorer;

/* One comparison: the share with and without a candidate. */
typedef struct vf_score {
	double with, without;   /* shares on the round's cases */
	double rise, se;        /* mean paired difference and its error */
	/* vf_round: the update alone against the round's start */
	double solo_rise, solo_se;
	double outlier;         /* > 0: left out for its norm, this many
				 * times the lower median's */
	int refused;
} vf_score;

typedef struct vf_verdict {
	int count;              /* updates checked */
	int checked;            /* 0: no held-out split, combined unchecked */
	vf_score of[VF_MAX];    /* per update, in the order given */
	uint64_t left_out;      /* bit i: update i left out */
	kn_robust_info robust;  /* of the final combination */
	double seconds;         /* the check and the combination */
} vf_verdict;

/* Windows per score for a round of H local steps of batch B among
 * replicas, within VF_BUDGET of the round. */
int vf_windows_for(int local_steps, int batch, int replicas);

/* The key of the cases of (run, block, round): never 0. */
uint64_t vf_case_key(const char *run_id, int block, int64_t round);

/* The round's updates (count, in replica order, n floats each), checked
 * and combined: each update is left out when including it in the robust
 * combination (kernels/robust.h) raises the share of start - outer_lr *
 * combination on the round's cases beyond the threshold; avg receives
 * the robust combination of those kept (zeros when none).  With no
 * held-out split, the robust combination of all.  The model's weights
 * are overwritten.  0 or KN_E* with the reason in err. */
int vf_round(const vf_scorer *sc, int64_t round, const float *start,
    const float *const *updates, int count, float outer_lr, float *avg,
    vf_verdict *v, char *err);

/* The norm of x (n floats), an update of the round from a replica that
 * is not a member, over the members' (count updates): their lower
 * median with VF_OUTLIER_MIN or more, else the largest, so that a
 * member's small update never makes an honest one look large.  0 when
 * there is nothing to compare with; not finite when x is not. */
double vf_norm_ratio(const float *const *members, int count, const float *x,
    size_t n);

/* A checkpoint's weights against ours (n floats each), on the cases of
 * its round: s->refused when it is worse beyond the threshold.  The
 * model's weights are overwritten.  With no held-out split nothing is
 * refused.  0 or KN_E*. */
int vf_checkpoint(const vf_scorer *sc, int64_t round, const float *ours,
    const float *theirs, vf_score *s, char *err);

#endif
