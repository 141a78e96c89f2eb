/* Averaging rounds between the replicas of one block (DESIGN section 2).
 * The round protocol knows nothing of the daemon around it: it is given
 * a small context (a clock, a meter, a journal, the peer list, and where
 * the round's outcome goes), so tests/check_rounds.c can drive several
 * replicas in one process with a clock of its own.  Everything here runs
 * on the loop thread. */
#ifndef SM_ROUNDS_H
#define SM_ROUNDS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/peers.h"
#include "proto/update.h"

#define ROUNDS_MAX_REPLICAS 64

/* What a 409 answer to a POSTed update means, in its X-Round-State
 * header: the round is over here (fetch the checkpoint), or this replica
 * is behind (offer the update again). */
#define ROUNDS_STATE_HEADER "X-Round-State"
#define ROUNDS_STATE_OVER "over"
#define ROUNDS_STATE_BEHIND "behind"
/* ... and to an update from a replica the receiver's roster (its
 * block's replicas for this round) does not hold, or that sent with
 * another roster: a changed peer list is taking effect at a round
 * boundary; not a refusal, the sender offers again later */
#define ROUNDS_STATE_ROSTER "roster"
/* A roster's hash: the first 16 hex digits of the sha256 of its lines
 * "host:port peer-id\n", sent as ?roster= on every request of the
 * round protocol and in the commit. */
#define ROUNDS_ROSTER_LEN 17

/* ... and to a part of an update (update_streams): the receiver already
 * holds that part; it counts as delivered */
#define ROUNDS_STATE_HAVE "have"

/* What rounds_ops.refused refused, in the order of the strikes' kinds
 * (daemon/core/strikes.h) and of the trainer's (wk_refusal). */
enum {
	ROUNDS_REFUSED_UPDATE,          /* an update, or a part of one */
	ROUNDS_REFUSED_CHECKPOINT,      /* a checkpoint to adopt */
	ROUNDS_REFUSED_CLAIM            /* a step, round or state claimed */
};

/* A round's outcome, handed on as it came: the protocol does no
 * arithmetic on the updates (the trainer checks and combines them,
 * daemon/blocktrain/verify.h). */
typedef struct rounds_outcome {
	int64_t round;
	int count;                              /* the members' updates */
	float *update[ROUNDS_MAX_REPLICAS];     /* in replica order */
	int replica[ROUNDS_MAX_REPLICAS];
	int peer[ROUNDS_MAX_REPLICAS];          /* lines in the peer list */
	float outer_lr;
	char *ckpt;                             /* a published checkpoint */
	size_t len;
	int ckpt_replica, ckpt_peer;            /* who served it */
	/* updates of the round from replicas that are not members (late,
	 * or left out by the coordinator): never combined, only looked at
	 * for a norm no honest replica sends (daemon/blocktrain/verify.h), so that a
	 * hostile replica the coordinator already keeps out is named by
	 * every replica it sends to */
	int extras;
	float *extra[ROUNDS_MAX_REPLICAS];
	int extra_replica[ROUNDS_MAX_REPLICAS];
	int extra_peer[ROUNDS_MAX_REPLICAS];
} rounds_outcome;

typedef struct rounds_ops {
	/* monotonic seconds: deadlines and polls are measured with it */
	double (*now)(void *arg);
	/* bytes exchanged with the peer at index peer of the list */
	void (*meter)(void *arg, int peer, int kind, uint64_t in,
	    uint64_t out);
	/* one line for the journal of rounds */
	void (*journal)(void *arg, const char *line);
	/* The round's outcome, for the trainer (the buffers' ownership
	 * passes): the members' updates (count floats each) to check,
	 * combine and apply with outer_lr; or ckpt, a published checkpoint
	 * (len bytes) to check and adopt; or neither, keep the local
	 * weights. */
	void (*commit)(void *arg, rounds_outcome *o);
	/* The peer at index peer refused something (kind ROUNDS_REFUSED_*),
	 * why for the log; may be NULL. */
	void (*refused)(void *arg, int peer, int kind, const char *why);
	/* Whether the peer at index peer is quarantined: its updates are
	 * refused, its answers not acted on; may be NULL (none is). */
	int (*quarantined)(void *arg, int peer);
} rounds_ops;

typedef struct rounds_config {
	uv_loop_t *loop;
	hc_client *client;
	/* health is read from it (and an unreachable replica marked down);
	 * it may be replaced in place on SIGHUP, then rounds_remap */
	peers_list *peers;
	int block;
	int replica, replicas;          /* ours, and the block's */
	const char *run_id;
	const char *advertise;          /* host:port, sent as ?from= */
	size_t count;                   /* floats in an update */
	pr_encoding enc;                /* lossy ones get error feedback */
	pr_compression comp;
	double round_deadline;          /* seconds */
	double outer_lr;
	long peer_timeout_ms;
	/* update_streams: our update goes to each replica as this many
	 * parts on as many connections at once (0 or 1: one POST), none
	 * smaller than chunk bytes (0: 1 MiB) */
	int streams;
	size_t chunk;
	/* bytes of the others' updates being put together from parts, all
	 * replicas together (0: four of the largest update) */
	size_t max_assembly;
	rounds_ops ops;
	void *arg;
} rounds_config;

typedef struct rounds rounds;

/* Starts the round timer.  cfg (its strings and the peer list too) must
 * outlive r.  0 or a negative KN_E* code with a reason in err. */
int rounds_new(rounds **out, const rounds_config *cfg, char *err);
/* Stops the timer; r is freed once libuv and every request in flight
 * have let go of it.  Nothing is called back after this. */
void rounds_free(rounds *r);

/* Our update for round (count floats) is ready: encode it, send it and
 * gather the others'. */
void rounds_on_update(rounds *r, int64_t round, int64_t step,
    const float *delta, size_t count);
/* The trainer has installed the checkpoint of (step, round), sha256: for
 * the answers to peers that are behind, and to recognise a split. */
void rounds_on_checkpoint(rounds *r, int64_t step, int64_t round,
    const char *sha256);
/* The HTTP side of the exchange, below /v1/blocks/{b}/rounds/{round}/:
 * rest is "updates" (POST, our block's replicas only), "commit" or
 * "updates/{k}" (GET), the rows of rounds_serve.c's route table
 * (daemon/net/http_route.h).  Returns 1 if it answered (a 405 or 403
 * included), 0 if rest names nothing; the caller meters the exchange. */
int rounds_handle(rounds *r, const hs_request *req, hs_response *res,
    int64_t round, const char *rest);
/* Bytes of the others' updates being put together from parts now. */
size_t rounds_assembling(const rounds *r);
/* Housekeeping tick (the daemon's cron). */
void rounds_cron(rounds *r);
/* SIGHUP: whether a new peer list keeps the block's replicas, the same
 * addresses in the same order as the engine's roster (otherwise the
 * daemon starts a new engine at the next round boundary); and the map
 * from the roster to the new list rebuilt once it is in place, a
 * replica no longer listed being down for the rest of the engine's
 * life. */
int rounds_same_replicas(const rounds *r, const peers_list *fresh);
void rounds_remap(rounds *r);
/* The roster's hash (ROUNDS_ROSTER_LEN - 1 hex digits) of block's
 * replicas in pl, as rounds_new fixes it: into out. */
void rounds_roster_of(const peers_list *pl, int block,
    char out[ROUNDS_ROSTER_LEN]);
/* The engine's roster's hash. */
const char *rounds_roster(const rounds *r);
/* A replica of our block, at line peer, reports another checkpoint for
 * the step and round of ours: two coordinators decided differently.  The
 * replica of higher index adopts the other's weights at its next
 * round. */
void rounds_diverged(rounds *r, int peer, int64_t step, int64_t round,
    const char *their_sha256);

#endif
