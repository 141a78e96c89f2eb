/* The update message: one replica's theta_start - theta_local for one
 * block and round, in msgpack with a SHA-256 of the payload, in f32, f16,
 * bf16 or block-scaled int8, optionally zstd-compressed (format in
 * proto/PROTOCOL.md).  The daemon encodes its own
 * update with these, and validates each peer's before averaging it. */
#ifndef PR_UPDATE_H
#define PR_UPDATE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/spec.h"

#define PR_UPDATE_VERSION 1

/* How the payload stores each value: IEEE binary32, IEEE binary16 or
 * bfloat16, little-endian, rounded to nearest even from f32; or int8,
 * one signed byte per value and one binary32 scale per PR_INT8_BLOCK
 * values (kernels/int8.h).  Values are fixed by the format: a new
 * encoding goes at the end. */
typedef enum { PR_ENC_F32, PR_ENC_F16, PR_ENC_BF16, PR_ENC_INT8 }
    pr_encoding;

/* Values per int8 scale, fixed by the format.  256 keeps the scales at
 * 1.6% of the payload (4 bytes per 256) while a block stays small next
 * to the block's tensors (a width-128 LayerNorm or bias is 128 values,
 * a weight matrix 16384 and more), so one large value coarsens the step
 * of at most 255 others; 1024 would save 1.2% of the bytes and let an
 * outlier coarsen four times as many. */
#define PR_INT8_BLOCK 256

/* "f32", "f16", "bf16" or "int8" (exactly, lowercase): 0, or
 * KN_EINVAL. */
int pr_encoding_parse(const char *s, pr_encoding *e);
/* The name above, or "?" for a value outside the enum. */
const char *pr_encoding_name(pr_encoding e);
/* Bytes per value: 4, 2 or 1 (int8, whose scales come on top: see
 * pr_update_payload_bytes); 0 for a value outside the enum. */
size_t pr_encoding_width(pr_encoding e);
/* Bytes of the uncompressed payload of count values in e: count x width,
 * plus 4 per started block of PR_INT8_BLOCK for int8; 0 for an encoding
 * outside the enum or a size beyond what a msgpack bin holds. */
size_t pr_update_payload_bytes(pr_encoding e, size_t count);

/* Whether the payload is compressed: not at all, or as one zstd frame of
 * the payload above at level PR_ZSTD_LEVEL.  Level 1, zstd's fastest
 * regular level: on an update of the quality spec's block
 * (scripts/bench/update-bench) level 3 gave the same size (within 0.1%)
 * at 1.1-1.3x the time, level 9 at most 1.2% less at 10x, level 19 at
 * most 2% less at 200x; update values are mostly mantissa noise. */
typedef enum { PR_COMP_NONE, PR_COMP_ZSTD } pr_compression;
#define PR_ZSTD_LEVEL 1

/* "none" or "zstd" (exactly, lowercase): 0, or KN_EINVAL. */
int pr_compression_parse(const char *s, pr_compression *c);
/* The name above, or "?" for a value outside the enum. */
const char *pr_compression_name(pr_compression c);

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
	/* encoding: the compression asked for; decoded: the one the
	 * message used (zstd falls back to none when it would not make the
	 * payload smaller); not checked as an expectation */
	pr_compression comp;
} pr_update_meta;

/* All functions return 0 or a negative KN_E* code (KN_EINVAL for a bad
 * or mismatched message, KN_ENUM for a non-finite value, KN_ENOMEM) with
 * a one-line reason in err (PR_ERR_LEN bytes; NULL allowed). */

/* Encodes delta (m->count floats) in m->enc, compressed as m->comp asks,
 * into a new buffer *buf of *len bytes, which the caller frees with
 * free().  Refuses a non-finite value, and one that would overflow to Inf
 * in f16 or bf16 (|x| >= 65520 in f16) or whose int8 scale would (|x|
 * within a few ulps of FLT_MAX), so an update that was written can
 * always be read.  f16, bf16 and int8 are lossy: to average the same
 * numbers as its peers, a replica averages its own update as decoded
 * from *buf, not delta itself. */
int pr_update_encode(const pr_update_meta *m, const float *delta,
    char **buf, size_t *len, char *err);

/* Validates a whole update (format, expect, hash, decompressed size,
 * finiteness, int8 scales and range) and only then converts its payload
 * to f32 in delta_out (expect->count floats) and fills *got; either may
 * be NULL, and nothing is written to them unless the update is valid.
 * expect may be NULL (all open) when delta_out is NULL.  A compressed
 * payload is decompressed into exactly the bytes its count and encoding
 * take, and refused if its frame says or holds anything else; without
 * delta_out it is checked in pieces of 64 KiB, so a small message that
 * claims a large count costs no large allocation. */
int pr_update_decode(const char *buf, size_t len,
    const pr_update_meta *expect, float *delta_out, pr_update_meta *got,
    char *err);

/* An upper bound of the encoded size of an update of count parameters in
 * any encoding (SIZE_MAX if that would overflow): the cap for an HTTP
 * body. */
size_t pr_update_max_bytes(size_t count);

#endif
