/* The held-out message of a SOMA expert daemon (GET /v1/soma/heldout,
 * proto/PROTOCOL.md): the per-byte log-probabilities of its expert on
 * the held-out windows the router gives it, so that a client mixes the
 * experts' probabilities without moving any weights.  Encoded by the
 * daemon, decoded strictly by shardmeter status. */
#ifndef PR_HELDOUT_H
#define PR_HELDOUT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/spec.h"

#define PR_HELDOUT_VERSION 1
/* Bounds a decoder accepts: windows per message and bytes per window. */
#define PR_HELDOUT_MAX_WINDOWS 65536
#define PR_HELDOUT_MAX_T 65536

typedef struct {
	char run_id[PR_RUN_ID_LEN];
	int expert;             /* 0 .. experts-1 */
	int experts;            /* N of the spec */
	int top_k;              /* experts per window: min(top_k, N) */
	int64_t step;           /* the expert's step when it scored */
	int T;                  /* bytes predicted per window */
	long windows;           /* M: windows of the held-out set in all */
	long count;             /* windows routed to this expert */
} pr_heldout_meta;

/* Encodes m, index (count ascending window numbers below windows) and
 * logp (count, T) into a new buffer (*buf, caller frees).  0 or KN_E*. */
int pr_heldout_encode(const pr_heldout_meta *m, const uint32_t *index,
    const float *logp, char **buf, size_t *len, char *err);
/* Decodes buf strictly (every key once, types, ranges, index strictly
 * ascending and below windows, every log-probability finite and <= 0,
 * no trailing bytes) into m and new arrays *index and *logp (caller
 * frees both).  Nothing is returned unless the message is valid. */
int pr_heldout_decode(const char *buf, size_t len, pr_heldout_meta *m,
    uint32_t **index, float **logp, char *err);

#endif
