/* The arithmetic of a shared-block round (DESIGN section 2): each replica
 * takes its update theta_start - theta_local, the daemon averages the
 * updates it gathered and applies the outer step.  Host memory, the CPU
 * thread pool, and bitwise the same results on every replica. */
#ifndef KN_AVERAGE_H
#define KN_AVERAGE_H

#include <stddef.h>

/* Every element is computed on its own by IEEE single-precision operations
 * in a fixed order, never fused into an FMA and never reassociated, so
 * the bits depend only on the inputs: not on the thread count, the pool's
 * chunking, the vector width or the host.  Each function splits its work
 * over kn_pool_run(); none allocates. */

/* out[i] = (updates[0][i] + updates[1][i] + ... + updates[count-1][i])
 *          / count
 * The sum is taken in float, left to right in index order, and divided by
 * (float)count (a correctly rounded division, not a multiplication by
 * 1/count).  So callers who want the same bits must pass the same updates
 * in the same order: the daemon orders them by replica index.  out may be
 * one of the updates; other overlaps are not allowed.  count must be at
 * least 1 (below 2^24); with count < 1 nothing is written. */
void kn_average(float *out, const float *const *updates, int count,
    size_t n);

/* params[i] = params[i] - (outer_lr * avg_update[i]), the product rounded
 * to float before the subtraction.  With outer_lr = 1 the new parameters
 * are theta_start - mean update, the plain average of the replicas. */
void kn_outer_step(float *params, const float *avg_update, float outer_lr,
    size_t n);

/* local[i] = local[i] + (consensus[i] - sent[i]), the difference rounded
 * to float before the sum.  Overlapped rounds (streaming DiLoCo with a
 * delay of one round): the replica sent its weights `sent` for averaging
 * and trained on; once the round commits, the stale point is swapped for
 * the new consensus and the progress made since is kept.  The three
 * arrays must not overlap. */
void kn_outer_rebase(float *local, const float *consensus, const float *sent,
    size_t n);

/* delta[i] = start[i] - local[i]: a replica's update after its local
 * steps.  delta may be start or local. */
void kn_update_delta(float *delta, const float *start, const float *local,
    size_t n);

#endif
