/* The checkpoint file: one block's parameters in msgpack with a tensor
 * table and a SHA-256 of the payload (format in proto/PROTOCOL.md), and
 * the local optimizer-state file beside it.  The daemon publishes and
 * loads checkpoints through these; `shardmeter` inspects them. */
#ifndef PR_CHECKPOINT_H
#define PR_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/tensor.h"
#include "proto/spec.h"

#define PR_CKPT_VERSION 1
#define PR_CKPT_KIND_LEN 16
/* Far above any model of ours (18 tensors); bounds what a decoder
 * allocates for a file's tensor table. */
#define PR_CKPT_MAX_TENSORS 1024

/* Who a checkpoint belongs to.  As the expect argument of a decoder,
 * run_id "" , block < 0 and kind "" each match anything. */
typedef struct {
	char run_id[PR_RUN_ID_LEN];     /* 64 lowercase hex digits */
	int block;                      /* 0 .. PR_MAX_BLOCKS; an expert's
					 * index for kind "expert" */
	/* "block", "e2e", "causal"; SOMA: "expert", "seed", "spsa",
	 * "eggroll", "bptt" */
	char kind[PR_CKPT_KIND_LEN];
	int64_t step;                   /* optimizer steps taken, >= 0 */
	int64_t round;                  /* averaging rounds done, >= 0 */
} pr_ckpt_meta;

/* All functions return 0 or a negative KN_E* code (KN_EINVAL for a bad
 * or mismatched file, KN_ENUM for a non-finite value, KN_EIO, KN_ENOMEM)
 * with a one-line reason in err (PR_ERR_LEN bytes; NULL allowed). */

/* Encodes tensors[0..ntensors) of the host parameter buffer params (each
 * tensor's floats at params + tensors[i].offset) into a new buffer *buf
 * of *len bytes, which the caller frees with free().  Refuses non-finite
 * values, so a checkpoint that was written can always be read. */
int pr_ckpt_encode(const pr_ckpt_meta *meta, const kn_tensor *tensors,
    int ntensors, const float *params, char **buf, size_t *len, char *err);

/* Validates a whole checkpoint against expect (fields may be wildcards)
 * and the tensor table (names and shapes, in order), then copies each
 * tensor to params_out + tensors[i].offset.  Nothing is written to
 * params_out or meta_out (either may be NULL) unless the checkpoint is
 * valid.  With tensors NULL the file is checked on its own (hash,
 * finiteness) and params_out must be NULL. */
int pr_ckpt_decode(const char *buf, size_t len, const pr_ckpt_meta *expect,
    const kn_tensor *tensors, int ntensors, float *params_out,
    pr_ckpt_meta *meta_out, char *err);

/* Reads a checkpoint's metadata only: the file must be well-formed
 * msgpack with the right fields, but the payload is neither hashed nor
 * checked against any table. */
int pr_ckpt_peek(const char *buf, size_t len, pr_ckpt_meta *meta_out,
    char *err);

/* The optimizer state (AdamW m and v, nparams floats each, and the step
 * t), sent only to the run's daemons (mirrors, bootstraps).  Its own
 * magic, same strictness; v must be >= 0. */
int pr_ckpt_encode_optim(const pr_ckpt_meta *meta, size_t nparams,
    const float *m, const float *v, int t, char **buf, size_t *len,
    char *err);
int pr_ckpt_decode_optim(const char *buf, size_t len,
    const pr_ckpt_meta *expect, size_t nparams, float *m_out, float *v_out,
    int *t_out, pr_ckpt_meta *meta_out, char *err);

/* Replaces path with buf atomically: writes path.tmp.<pid>, syncs it,
 * renames it over path and syncs the folder, so a crash at any moment
 * leaves either the old file or the new one.  One writer per path.
 * KN_ENOSPC when the disk (or a quota) is full: path is left as it was. */
int pr_ckpt_write_file(const char *path, const char *buf, size_t len,
    char *err);
/* Reads a regular file of at most max_len bytes into a new buffer *buf
 * (caller frees); a larger file is refused before it is read. */
int pr_ckpt_read_file(const char *path, size_t max_len, char **buf,
    size_t *len, char *err);

/* Lowercase hex SHA-256 of len bytes (a whole checkpoint file: the
 * daemon's HTTP ETag). */
int pr_ckpt_sha256_hex(const char *buf, size_t len, char hex[65],
    char *err);

#endif
