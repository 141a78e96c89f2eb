/* Decoding a model of position blocks (DESIGN section 2) with a KV cache:
 * the serving twin of kn_model_decode for block-causal attention.  Each
 * position block of the output is one traversal of the hosts, and a host
 * keeps the keys and values of the clean context it has seen, so a pass
 * costs rows of one position block, not of the window. */
#ifndef KN_MODEL_BLOCKDECODE_H
#define KN_MODEL_BLOCKDECODE_H

#include <stdint.h>

#include "kernels/model.h"

/* The position block a bidirectional model attends by: its pos_block, or
 * the window when it has none. */
int kn_model_pos_block(const kn_model_shape *s);

/* One pass of m (bidirectional) over new positions of R sequences, rows
 * in sequence order, embedded from sym (count symbols each, KN_MASK
 * allowed) at positions pos0.. of each.  A new row at position i sees the
 * cached positions and the new ones of its own position block and those
 * before: keys [0, min(end of i's block, pos0 + count)), as the full
 * window's pass with the block-causal mask gives it.  pos0 must be the
 * cache's length and a multiple of the position block.  With commit the
 * new positions join the caches (count then a multiple of the position
 * block, or reaching the window): clean context; without, the caches keep
 * their length (a noisy position block being denoised).  Then the head
 * runs on rows (nrows, increasing indices into the pass's rows), out[r]
 * sampled with u[r] at temperature temp; nrows 0 runs no head. */
int kn_model_blockdecode(kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, int commit, const int32_t *rows, int nrows,
    const float *u, float temp, int32_t *out, char *err);

#endif
