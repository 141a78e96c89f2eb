/* Strikes: every refusal of what a listed peer sent, counted per peer and
 * kind, and the quarantine of a peer past a threshold (DESIGN section 5:
 * peers we admit can still be wrong).  The rounds code notes a refusal;
 * node.c reports the counts (/v1/status, /metrics), refuses a
 * quarantined identity's connections (node_trust.c) and clears on the
 * operator's word.  Loop thread only: no locking. */
#ifndef SM_STRIKES_H
#define SM_STRIKES_H

#include <stdint.h>

#include "daemon/core/identity.h"
#include "kernels/error.h"

/* STRIKES_UPDATE: an update left out of an average; STRIKES_CHECKPOINT:
 * a checkpoint refused; STRIKES_CLAIM: an answer whose step or round the
 * run does not allow (an "over", a future step) */
typedef enum strikes_kind {
	STRIKES_UPDATE,
	STRIKES_CHECKPOINT,
	STRIKES_CLAIM,
	STRIKES_KINDS
} strikes_kind;

/* The threshold's range: 0 counts without ever quarantining. */
#define STRIKES_MAX_THRESHOLD 1000000
/* Peers with a record at most: a peer list is far shorter; beyond, a
 * refusal is still logged but not counted. */
#define STRIKES_MAX_PEERS 4096
#define STRIKES_WHY_LEN 160
/* A refusal of the same kind and reason as the peer's latest, within
 * this many seconds of it, is counted in the totals but is no new
 * strike (strikes.c). */
#define STRIKES_REPEAT_S 30.0

typedef struct strikes strikes;

/* One peer's record. */
typedef struct strikes_peer {
	char id[ID_LEN];                /* printed peer id */
	/* every refusal since the start, by kind: /metrics counters, which
	 * never go back */
	uint64_t total[STRIKES_KINDS];
	/* refusals since the start or the operator's last clear: what the
	 * threshold counts */
	uint64_t current;
	int quarantined;
	uint64_t refused;               /* connections refused in quarantine */
	char why[STRIKES_WHY_LEN];      /* the latest refusal */
	int why_kind;                   /* its kind */
	double why_at;                  /* when it was last refused (kn_now) */
	uint64_t repeats;               /* refusals that repeated it */
} strikes_peer;

/* threshold: refusals after which a peer is quarantined (0: never).  0 or
 * a negative KN_E* code with the reason in err (KN_ERR_LEN). */
int strikes_new(strikes **out, int threshold, char *err);
void strikes_free(strikes *s);
/* Counts and logs one refusal of what peer_id sent, why (for the log);
 * returns 1 if the peer is now quarantined, 0 if not.  peer_id is the
 * peer list entry's printed id (id_text), or its address (addr) in a
 * list without ids (insecure = yes, where no handshake can refuse it). */
int strikes_note(strikes *s, const char *peer_id, strikes_kind kind,
    const char *why);
/* Whether peer_id is quarantined; 0 for NULL s or an unknown id. */
int strikes_quarantined(const strikes *s, const char *peer_id);
/* Counts one connection of quarantined peer_id refused; returns how many
 * so far (0: peer_id is not quarantined), for a log that names the first
 * and then every hundredth. */
uint64_t strikes_refused(strikes *s, const char *peer_id);
/* The operator's clear: every quarantine lifted and every current count
 * back to 0 (the totals stay). */
void strikes_clear(strikes *s);

/* Called once each time a peer becomes quarantined (the id as printed),
 * after it is counted: node.c cuts its connections there. */
void strikes_on_quarantine(strikes *s,
    void (*fn)(void *arg, const char *peer_id), void *arg);

/* The run's quarantines outlast a restart: with a file set, every
 * refusal and clear rewrites it (atomically, as JSON with the run id),
 * and strikes_load takes a file of the same run back at start.  A file
 * that cannot be read, or of another run, is left aside with the reason
 * in err (KN_EINVAL, KN_EIO); a missing one is no error. */
void strikes_set_file(strikes *s, const char *path, const char *run_id);
int strikes_load(strikes *s, const char *path, const char *run_id,
    char *err);

/* Reading the records, for status and metrics: count, then each. */
int strikes_count(const strikes *s);
const strikes_peer *strikes_at(const strikes *s, int i);
/* The record of peer_id, or NULL. */
const strikes_peer *strikes_find(const strikes *s, const char *peer_id);
int strikes_threshold(const strikes *s);
/* Peers quarantined now; clears by the operator so far. */
int strikes_quarantined_count(const strikes *s);
uint64_t strikes_clears(const strikes *s);
/* "update", "checkpoint", "claim": label values and JSON keys. */
const char *strikes_kind_name(strikes_kind kind);

#endif
