/* The training daemon's runtime (node.c): its run, its peers, the trainer
 * thread, the HTTP server and client, the averaging rounds, and what it
 * reports.  blocktraind.c reads the flags and the configuration and starts
 * it; api.c answers the HTTP API from it.  Everything here is touched on
 * the loop thread only. */
#ifndef SM_NODE_H
#define SM_NODE_H

#include <stdint.h>
#include <uv.h>

#include "daemon/core/conf.h"
#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/peers.h"
#include "daemon/rounds/rounds.h"
#include "daemon/core/strikes.h"
#include "daemon/node/api.h"
#include "daemon/node/bootstrap.h"
#include "daemon/node/mirror.h"
#include "daemon/node/node_soma.h"
#include "daemon/node/node_trust.h"
#include "daemon/node/peer_watch.h"
#include "daemon/node/worker.h"
#include "kernels/backend.h"
#include "proto/spec.h"

/* Who a meter charges that is not a peer of the list: tools, clients. */
#define NODE_CLIENT (-1)

/* What the node reports, in /v1/status and /metrics: written by node.c
 * from the trainer's events, the rounds and the meter, read by the
 * others through node_report_of. */
typedef struct node_report {
	const char *state;              /* starting, training, round, done, ... */
	char error[256];
	int64_t step, round;
	int64_t overlapped;             /* steps trained with a round out */
	float loss;
	double positions_per_s;
	double share;
	int64_t share_step;
	int have_share;
	double started;                 /* monotonic seconds */
	/* when the trainer first reported and when it trained its last
	 * step (0: not yet): a time to the steps measured from outside
	 * would count the start-up and the lateness of whoever polls */
	double train_began, train_ended;
	/* seconds after train_began at which this replica went on past the
	 * last step of each of its latest NODE_ROUND_TIMES rounds (the
	 * commit, or the round's start where training does not wait for
	 * it), round_times_n of them in all: a bench reads them once, not
	 * by polling the daemon it times */
#define NODE_ROUND_TIMES 64
	double round_times[NODE_ROUND_TIMES];
	int64_t round_times_n;
	/* roll-backs of the trainer to its last good checkpoint (a
	 * non-finite loss, unhealthy weights), the latest's step and the
	 * last round whose outcome it undid (-1: none, one replica) */
	int64_t rollbacks, rolled_back_step, rolled_back_round;
	/* bytes with callers that are not peers (tools, clients), by
	 * node_meter; a peer's are in its line of the peer list */
	uint64_t client_in[PEERS_KINDS], client_out[PEERS_KINDS];
	/* replicas of our block that joined or left, as the changes took
	 * effect here: the latest NODE_ROSTER_CHANGES, roster_changes_n in
	 * all */
#define NODE_ROSTER_CHANGES 32
	struct node_roster_change {
		double at;              /* wall clock, seconds */
		int64_t step, round;    /* the engine's first */
		int joined;             /* else left */
		char addr[CF_HOST_LEN + 8];
	} roster_changes[NODE_ROSTER_CHANGES];
	int64_t roster_changes_n;
} node_report;

/* The latest checkpoint, served as is: peers download it while a newer
 * one replaces it, so responses share it (data is its bytes).  Written
 * by node.c as the trainer posts one, read through node_ckpt_of. */
typedef struct node_ckpt {
	hs_shared *body;
	const char *data;               /* NULL: none yet */
	size_t len;
	char etag[65];                  /* sha256 hex */
	int64_t step, round;
} node_ckpt;

/* The trainer thread and the rounds of averaging, node.c's; the others
 * reach the rounds through node_rounds_of and the trainer only through
 * the callbacks node.c hands them. */
typedef struct node_training {
	wk_worker *worker;
	int worker_done;                /* the trainer thread has ended */
	rounds *rounds;                 /* NULL with one replica */
	/* our update is out and the round's outcome not back: probes wait */
	int in_round;
	/* called at each roll-back with that round and step: where the
	 * rounds learn which round's outcome to exclude; NULL: nobody */
	void (*on_rollback)(struct node *n, int64_t round, int64_t step);
	/* the roster of the engine (trainer and rounds) running now, our
	 * block's replicas in the list's order (roster.c) */
	char (*roster)[CF_HOST_LEN + 8];
	int roster_n;
	/* a changed roster waits for the round boundary (1), the engine is
	 * being closed for the new one (2); leaving: our line left the
	 * list, the daemon stops at its next step */
	int reshape, leaving;
} node_training;

/* The daemon.  Its first fields are the run, set by blocktraind.c (cfg,
 * backend_desc) and node.c (node_setup, node_start) and read by every
 * module of node/; then one part per module, each written by its owner
 * only and read by the others through the functions named beside it. */
typedef struct node {
	uv_loop_t *loop;
	cf_config cfg;
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	char *spec_body;                /* canonical msgpack, for /v1/spec */
	size_t spec_len;
	peers_list peers;
	int self;                       /* our line in the peer list */
	int replica, replicas;          /* among the peers of our block */
	int overlap;                    /* overlap_rounds, with replicas */
	int soma;                       /* method = soma: see soma_expert */
	const kn_backend *be;
	char backend_desc[256];
	hs_server *http;
	hs_server *metrics;             /* plain /metrics; NULL when off */
	char metrics_addr[CF_HOST_LEN + 8];
	hc_client *client;
	uv_timer_t cron;
	uv_signal_t sigterm, sigint, sighup;
	int stopping;
	int exit_code;
	/* node.c's parts */
	node_report report;             /* node_report_of */
	node_ckpt ckpt;                 /* node_ckpt_of */
	node_training training;         /* node_rounds_of */
	/* the other modules' */
	node_trust trust;               /* node_trust.c: node_trust_tls, ... */
	node_soma soma_expert;          /* node_soma.c: node_soma_of */
	api_counters api;               /* api.c */
	pw_watch watch;                 /* peer_watch.c: the peers' health */
	struct pb_state *probe;         /* probe.c, opaque */
	struct pd_state *predicted;     /* predicted.c; NULL without a plan */
	mr_state *mirror;               /* mirror.c; NULL: mirrors nothing */
	bs_state *bootstrap;            /* bootstrap.c; NULL: none ran */
} node;

/* Loads the spec and the peer list named by n->cfg (already validated)
 * and finds our place in it.  0 or a negative KN_E* code with a reason in
 * err (PR_ERR_LEN). */
int node_setup(node *n, char *err);
/* Starts the HTTP server and client, the rounds, the housekeeping timer,
 * the signals and the trainer thread on loop, with backend be. */
int node_start(node *n, uv_loop_t *loop, const kn_backend *be, char *err);
/* After uv_run has returned: frees what the node still holds. */
void node_free(node *n);

/* node.c's parts, read-only. */
const node_report *node_report_of(const node *n);
const node_ckpt *node_ckpt_of(const node *n);
/* The rounds of averaging; NULL with one replica. */
rounds *node_rounds_of(const node *n);

/* Accounts a transfer with the peer at index peer of the list, or with
 * the clients (NODE_CLIENT, or an index that is not one). */
void node_meter(node *n, int peer, int kind, uint64_t in, uint64_t out);
/* Appends one line to the state directory's journal of rounds: what each
 * round did, for a person reading what happened after a crash. */
void node_journal(node *n, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
