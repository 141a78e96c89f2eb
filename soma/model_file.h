/* A SOMA model (an expert, the seed or a control) as a checkpoint file:
 * body then decoder in one tensor table (body.* and decoder.*), in the
 * checkpoint format of proto/checkpoint.h, so every reader of
 * checkpoints validates it the same way. */
#ifndef SA_MODEL_FILE_H
#define SA_MODEL_FILE_H

#include "kernels/soma_model.h"
#include "proto/checkpoint.h"

/* Writes body (kn_soma_body_params floats) and decoder (host memory) to
 * path atomically.  0 or KN_E*. */
int sa_model_save(const char *path, const pr_ckpt_meta *meta,
    const kn_soma_shape *s, const float *body, const float *decoder,
    char *err);
/* Reads path, checks it against expect (wildcards as in pr_ckpt_decode)
 * and the shape's tensor table, and fills body and decoder (either may
 * be NULL to skip it).  Nothing is written unless the file is valid. */
int sa_model_load(const char *path, const pr_ckpt_meta *expect,
    const kn_soma_shape *s, float *body, float *decoder,
    pr_ckpt_meta *meta_out, char *err);

#endif
