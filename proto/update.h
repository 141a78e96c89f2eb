/* The update message: one replica's theta_start - theta_local for one
 * block and round, in msgpack with a SHA-256 of the payload, in f32, f16
 * or bf16 (format in proto/PROTOCOL.md).  The daemon encodes its own
 * update with these, and validates each peer's before averaging it. */
#ifndef PR_UPDATE_H
#define PR_UPDATE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/spec.h"

#define PR_UPDATE_VERSION 1

/* How the payload stores each value: IEEE binary32, IEEE binary16 or
 * bfloat16, little-endian, rounded to nearest even from f32. */
typedef enum { PR_ENC_F32, PR_ENC_F16, PR_ENC_BF16 } pr_encoding;

/* "f32", "f16" or "bf16" (exactly, lowercase): 0, or KN_EINVAL. */
int pr_encoding_parse(const char *s, pr_encoding *e);
/* The name above, or "?" for a value outside the enum. */
const char *pr_encoding_name(pr_encoding e);
/* Bytes per value: 4 or 2 (0 for a value outside the enum). */
size_t pr_encoding_width(pr_encoding e);

/* Who an update comes from and what it holds.  As the expect argument of
 * pr_update_decode(), run_id "", block < 0 and round < 0 each match
 * anything, and count must be given unless nothing is decoded;
 * replica, step and enc are not checked. */
typedef struct {
	char run_id[PR_RUN_ID_LEN];     /* 64 lowercase hex digits */
	int block;                      /* 0 .. PR_MAX_BLOCKS */
	int64_t round;                  /* the round it belongs to, >= 0 */
	int replica;                    /* sender's replica index, >= 0 */
	int64_t step;                   /* sender's local step count, >= 0 */
	pr_encoding enc;
	size_t count;                   /* parameters, >= 1 */
} pr_update_meta;

/* All functions return 0 or a negative KN_E* code (KN_EINVAL for a bad
 * or mismatched message, KN_ENUM for a non-finite value, KN_ENOMEM) with
 * a one-line reason in err (PR_ERR_LEN bytes; NULL allowed). */

/* Encodes delta (m->count floats) in m->enc into a new buffer *buf of
 * *len bytes, which the caller frees with free().  Refuses a non-finite
 * value, and one that would overflow to Inf in f16 or bf16 (|x| >= 65520
 * in f16), so an update that was written can always be read.  f16 and
 * bf16 are lossy: to average the same numbers as its peers, a replica
 * averages its own update as decoded from *buf, not delta itself. */
int pr_update_encode(const pr_update_meta *m, const float *delta,
    char **buf, size_t *len, char *err);

/* Validates a whole update (format, expect, hash, finiteness) and only
 * then converts its payload to f32 in delta_out (expect->count floats)
 * and fills *got; either may be NULL, and nothing is written to them
 * unless the update is valid.  expect may be NULL (all open) when
 * delta_out is NULL. */
int pr_update_decode(const char *buf, size_t len,
    const pr_update_meta *expect, float *delta_out, pr_update_meta *got,
    char *err);

/* An upper bound of the encoded size of an update of count parameters in
 * any encoding (SIZE_MAX if that would overflow): the cap for an HTTP
 * body. */
size_t pr_update_max_bytes(size_t count);

#endif
