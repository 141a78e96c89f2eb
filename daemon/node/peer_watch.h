/* The health of the daemon's peers (peer_watch.c): one status request to
 * each peer in turn from the housekeeping timer, with a backoff on
 * failure; a peer that runs another run spec is refused and reported.
 * The watch writes the health and the last status of each entry of the
 * peer list (state to share_step in peers.h) and nothing else; what it
 * needs of the daemon comes in pw_config and its pw_ops, as rounds.h's
 * rounds_ops.  On the loop thread. */
#ifndef SM_PEER_WATCH_H
#define SM_PEER_WATCH_H

#include <stdint.h>

#include "daemon/core/peers.h"
#include "daemon/net/http_client.h"

/* What the watch asks of the daemon; arg is pw_config.arg. */
typedef struct pw_ops {
	/* The peer list now (a SIGHUP may replace it between a request and
	 * its answer: entries are found again by address) and our line. */
	peers_list *(*peers)(void *arg, int *self);
	/* Accounts a status exchange with the peer at index peer. */
	void (*meter)(void *arg, int peer, int kind, uint64_t in,
	    uint64_t out);
	/* A peer of our run named its checkpoint (step, round, sha256 hex):
	 * replicas of one block must hold the same weights after the same
	 * round. */
	void (*checkpoint)(void *arg, int peer, int64_t step, int64_t round,
	    const char *sha256);
	/* Whether the daemon is stopping: answers are dropped. */
	int (*stopping)(void *arg);
	/* Seconds until the next probe of the peer at index peer, which
	 * answered; NULL: PW_INTERVAL_S for every peer. */
	double (*interval)(void *arg, int peer);
} pw_ops;

/* The probe interval of a peer that answers. */
#define PW_INTERVAL_S 2.0

typedef struct pw_config {
	hc_client *client;
	const char *advertise;          /* ours, for ?from= */
	const char *run_id;             /* ours: a peer of another is refused */
	int timeout_ms;                 /* peer_timeout_ms */
	/* the run's steps: a checkpoint whose step or round a peer names
	 * beyond them (or below 0) is not passed on */
	int64_t steps;
	pw_ops ops;
	void *arg;
} pw_config;

/* The node's part of it (struct node's watch), written by peer_watch.c
 * only. */
typedef struct pw_watch {
	pw_config c;
} pw_watch;

/* Before the first pw_poll; c's pointers outlive the watch. */
void pw_init(pw_watch *w, const pw_config *c);
/* Sends a status request to each peer that is due (not ours, none in
 * flight, its backoff over). */
void pw_poll(pw_watch *w);

#endif
