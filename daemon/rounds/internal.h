/* Private to the round protocol's files: rounds.c (the round's state
 * machine and the requests it sends) and rounds_serve.c (the answers to
 * the other replicas' requests).  Everything here runs on the loop. */
#ifndef SM_DAEMON_ROUNDS_INTERNAL_H
#define SM_DAEMON_ROUNDS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/rounds/rounds.h"
#include "daemon/rounds/rounds_parts.h"

#define MAX_REPLICAS ROUNDS_MAX_REPLICAS

struct rounds {
	rounds_config cfg;
	uv_timer_t timer;
	int closing;                    /* rounds_free was called */
	int timer_open;
	int calls;                      /* requests in flight */
	/* the trainer's last checkpoint */
	int64_t ckpt_step, ckpt_round;
	char ckpt_sha256[65];
	/* The roster: the block's replicas when the engine started, in
	 * the peer list's order, fixed for its life (a changed list takes
	 * effect at a round boundary, with a new engine).  Each is found
	 * again by address in the live list after a SIGHUP; one no longer
	 * listed has left and is down for good (rep_peer -1). */
	char rep_addr[MAX_REPLICAS][CF_HOST_LEN + 8];
	int rep_peer[MAX_REPLICAS];     /* replica index -> peer index, -1 */
	peers_entry gone;               /* what a replica that left looks like */
	char roster[ROUNDS_ROSTER_LEN]; /* the roster's hash, hex */
	int64_t round;                  /* the round we gather, -1: none */
	int active;                     /* our own update is in */
	double ready_at;
	size_t count;
	char *bytes[MAX_REPLICAS];      /* each replica's update, as sent */
	size_t len[MAX_REPLICAS];
	float *delta[MAX_REPLICAS];
	int fetching[MAX_REPLICAS];
	/* answered that it counts this round by another roster: neither
	 * waited for nor offered our update again this round */
	unsigned char roster_differs[MAX_REPLICAS];
	int pushed[MAX_REPLICAS];       /* 0 to do, 1 in flight, 2 accepted */
	double push_at[MAX_REPLICAS];   /* no offer to a replica before */
	double behind_wait[MAX_REPLICAS];       /* its last wait, 0: none */
	/* when our update first went to each replica (0: not yet), and
	 * how long it took to be taken (0: not yet): the same link brings
	 * that replica's update to us */
	double push_start[MAX_REPLICAS], push_secs[MAX_REPLICAS];
	/* when a commit first named the replica while we lacked its
	 * update (0: not yet) */
	double missing_since[MAX_REPLICAS];
	char *mine;                     /* our update, for retries */
	size_t mine_len;
	/* update_streams: the parts it goes in (1: one POST), its hash, and
	 * each part's state at each replica, as pushed[] */
	int nparts;
	char mine_sha256[65];
	unsigned char part_state[MAX_REPLICAS][RP_MAX_PARTS];
	rp_set asm_;                    /* the others' updates in parts */
	/* the last commit, kept for late followers */
	int64_t committed_round;        /* -1: none yet */
	uint64_t members;
	char *kept[MAX_REPLICAS];       /* that round's updates */
	size_t kept_len[MAX_REPLICAS];
	int polling, catching_up;
	double next_poll;
	int diverged_from;              /* replica to copy next round, or -1 */
	/* error feedback: residual_count floats that our encoding dropped
	 * from the updates we sent; NULL in f32 and until the first */
	float *residual;
	size_t residual_count;
	/* updates for the round after current_round(), sent whole, held
	 * until we stand at it */
	int64_t early_round;            /* -1: none held */
	char *early_bytes[MAX_REPLICAS];
	size_t early_len[MAX_REPLICAS];
	float *early_delta[MAX_REPLICAS];
};

/* The replica index in the roster of the peer at line peer of the live
 * list, or -1 (another block's, or not in the roster). */
int rounds__replica_of_peer(const rounds *r, int peer);

/* The round the replica stands at (see rounds.c). */
int64_t rounds__current_round(const rounds *r);
/* An update for round (its bytes as sent) decoded into the current
 * round's slots, or held apart for the round after ours; only replica
 * sender's own (sender -1: any, over plain TCP).  0 or KN_E* with the
 * reason in err; *replica_out says whose it is. */
int rounds__store_update(rounds *r, const char *buf, size_t len,
    int64_t round, int sender, int *replica_out, char *err);
int rounds__hold_update(rounds *r, const char *buf, size_t len,
    int64_t round, int sender, int *replica_out, char *err);
/* The members a commit answer (res, handle_commit's JSON) lists, as a
 * bit set; 0 when it lists none or cannot be read. */
/* The members of a commit answer; *other_roster set when the
 * coordinator named another roster (its indices are not ours). */
uint64_t rounds__commit_members(const rounds *r, const hc_result *res,
    int *other_roster);
/* Drops the updates held for the round after ours. */
void rounds__drop_early(rounds *r);
/* Whether replica k is quarantined (rounds_ops.quarantined). */
int rounds__quarantined(const rounds *r, int replica);
/* Reports a refusal of replica k's (rounds_ops.refused) and logs it. */
void rounds__refused(rounds *r, int replica, int kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Moves the round on: pushes, polls or commits as the state allows. */
void rounds__progress(rounds *r);

#endif
