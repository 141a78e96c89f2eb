/* Error feedback for lossy update encodings (f16, bf16, int8): what a
 * replica's encoding dropped in one round is added to its next round's
 * update, so the rounding does not pile up over rounds.  daemon/rounds/rounds.c
 * keeps the residual and calls these around pr_update_encode(). */
#ifndef KN_FEEDBACK_H
#define KN_FEEDBACK_H

#include <stddef.h>

/* out[i] = delta[i] + residual[i]: the update to encode this round.  out
 * may be delta or residual. */
void kn_feedback_add(float *out, const float *delta, const float *residual,
    size_t n);

/* residual[i] = sent[i] - decoded[i]: what the encoding of sent lost,
 * carried to the next round.  residual may be sent or decoded. */
void kn_feedback_residual(float *residual, const float *sent,
    const float *decoded, size_t n);

#endif
