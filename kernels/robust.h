/* A robust combination of the replicas' updates (DESIGN section 5, "peers
 * we admit can still be faulty"): no single replica can move the result
 * further than an honest one could.  The daemon's trainer thread calls
 * it in place of the plain mean (kernels/average.h); host memory, the
 * CPU thread pool, and bitwise the same results on every replica. */
#ifndef KN_ROBUST_H
#define KN_ROBUST_H

#include <stddef.h>

/* Every update is clipped to this multiple of the lower median of the
 * updates' norms: one outlier can neither raise that median (it is the
 * lower one) nor, by clipping, move the result more than KN_ROBUST_CLIP
 * honest updates would.  Honest norms of one round lie well within it. */
#define KN_ROBUST_CLIP 2.0
/* With three or more updates, CenteredClip (Karimireddy et al. 2021)
 * from the coordinate-wise median: this many iterations, each clipping
 * every update's distance from the estimate to KN_ROBUST_TAU times the
 * lower median of those distances.  When no distance is clipped, the
 * first iteration gives the mean; honest updates come out within a few
 * parts in ten thousand of it (tests/check_average.c), and one poisoned
 * update among three moves the result by a fifth of an honest norm,
 * against half with twice this tau. */
#define KN_ROBUST_ITERS 3
#define KN_ROBUST_TAU 1.0
#define KN_ROBUST_MAX 64        /* updates at most */

/* What a combination did, for the log. */
typedef struct kn_robust_info {
	double bound;           /* the norm each update was clipped to */
	int clipped;            /* updates whose norm exceeded it */
	int centered;           /* 1: CenteredClip, 0: the clipped mean */
	int cc_clipped;         /* CenteredClip distances clipped, summed */
} kn_robust_info;

/* The L2 norm of x (n floats), summed in double in a fixed order (fixed
 * chunks, then the chunks in order): the same bits whatever the thread
 * count.  A non-finite element gives a non-finite norm. */
double kn_robust_norm(const float *x, size_t n);

/* out = the robust combination of the count updates (count >= 1, at most
 * KN_ROBUST_MAX), each n floats: every update clipped to KN_ROBUST_CLIP
 * times the lower median of their norms, then averaged (count <= 2) or
 * combined by CenteredClip (count >= 3).  Every element is computed by a
 * fixed sequence of IEEE operations, never contracted into an FMA, so the
 * bits depend only on the inputs and their order: callers pass the
 * updates in replica order.  out must not overlap an update.  0, or
 * KN_EINVAL (count out of range, or a non-finite update), or KN_ENOMEM,
 * with the reason in err; info may be NULL. */
int kn_robust_combine(float *out, const float *const *updates, int count,
    size_t n, kn_robust_info *info, char *err);
/* The same with each update's kn_robust_norm given in norms (count
 * values), for a caller that combines several subsets of one set and
 * so computes each norm once; norms NULL: computed here.  The result is
 * the same bits as kn_robust_combine's. */
int kn_robust_combine_normed(float *out, const float *const *updates,
    const double *norms, int count, size_t n, kn_robust_info *info,
    char *err);

#endif
