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
#include "daemon/node/worker.h"
#include "kernels/backend.h"
#include "proto/spec.h"

/* Who a meter charges that is not a peer of the list: tools, clients. */
#define NODE_CLIENT (-1)

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
	const kn_backend *be;
	char backend_desc[256];
	hs_server *http;
	hs_server *metrics;             /* plain /metrics; NULL when off */
	char metrics_addr[CF_HOST_LEN + 8];
	hc_client *client;
	tls_ctx *tls;                   /* NULL with insecure = yes */
	wk_worker *worker;
	rounds *rounds;                 /* NULL with one replica */
	/* refusals of what each peer sent, and its quarantine: made by
	 * node_setup, noted by the rounds, cleared by the operator */
	strikes *strikes;
	int trust_recheck;              /* a quarantine: cut its connections */
	struct pb_state *probe;         /* probe.c */
	struct pd_state *predicted;     /* predicted.c; NULL without a plan */
	/* our update is out and the round's outcome not back: probes wait */
	int in_round;
	uv_timer_t cron;
	uv_signal_t sigterm, sigint, sighup;
	/* what we report */
	const char *state;              /* starting, training, round, done, ... */
	char error[256];
	int64_t step, round;
	int overlap;                    /* overlap_rounds, with replicas */
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
	/* the latest checkpoint, served as is: peers download it while a
	 * newer one replaces it, so responses share it (ckpt is its data) */
	hs_shared *ckpt_body;
	const char *ckpt;
	size_t ckpt_len;
	char etag[65];
	int64_t ckpt_step, ckpt_round;
	/* method = soma (node_soma.c): the expert this daemon trains, from
	 * its line of the peer list, what it reports beside step and loss,
	 * and its latest held-out message (proto/heldout.h), served as is */
	int soma, expert;
	char seed_path[PR_PATH_LEN + 16];       /* state_dir/seed.ckpt */
	double val, lr, eps;            /* val: NAN before a validation */
	int64_t val_step;
	uint64_t positions;
	char *heldout;
	size_t heldout_len;
	int64_t heldout_step;
	/* bytes with callers that are not peers (tools, clients) */
	uint64_t client_in[PEERS_KINDS], client_out[PEERS_KINDS];
	uint64_t requests, client_errors;
	/* roll-backs of the trainer to its last good checkpoint (a
	 * non-finite loss, unhealthy weights), the latest's step and the
	 * last round whose outcome it undid (-1: none, one replica) */
	int64_t rollbacks, rolled_back_step, rolled_back_round;
	/* called at each roll-back with that round and step: where the
	 * rounds learn which round's outcome to exclude; NULL: nobody */
	void (*on_rollback)(struct node *n, int64_t round, int64_t step);
	int stopping;
	int worker_done;                /* the trainer thread has ended */
	int exit_code;
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

/* node_soma.c: a SOMA expert daemon. */

/* With a soma spec, after the peer list is loaded and our line found:
 * our expert from that line, every line checked against the spec, the
 * seed (state_dir/seed.ckpt, of this run) and the router there.  0 or a
 * negative code with the reason in err. */
int node_soma_setup(node *n, char *err);
/* The trainer thread's options for our expert. */
void node_soma_worker_opts(node *n, wk_opts *wo);
/* A trainer event of a soma daemon that differs from BlockTrain's;
 * 1 when handled (ev is still the caller's), 0 for the common path. */
int node_soma_event(node *n, const wk_event *ev);

/* node_trust.c: the daemon's identity and who may connect. */

/* Loads the identity of the state directory and checks the peer list
 * against it (every daemon line with an id, ours with our own), or, with
 * insecure = yes, checks that we listen on loopback only.  0 or a
 * negative code with the reason in err. */
int node_trust_setup(node *n, char *err);
/* Whether a peer list read on SIGHUP keeps those rules (self: our line
 * in it); the reason in err. */
int node_trust_check(const node *n, const peers_list *pl, int self,
    char *err);
/* The peer list changed: connections of ids no longer in it end now. */
void node_trust_reloaded(node *n);
/* hs_config.id_role: a daemon line of the peer list is a peer
 * (HS_ROLE_PEER), anyone else listed a client. */
int node_trust_role(void *ctx, const uint8_t *id);
/* Whether the identity of a request is an operator's (a client line),
 * not a daemon's: 1 over plain TCP, where nobody has an id. */
int node_trust_is_operator(const node *n, const uint8_t *id);
/* The route tables' who (daemon/net/http_route.h): HR_PEER for a daemon
 * line of the peer list, HR_OPERATOR for a client line; over plain TCP,
 * where nobody has an id, HR_EVERYONE.  ctx is the node. */
unsigned node_trust_who(void *ctx, const hs_request *req);
/* What the TLS layer asks in every handshake: whether id is a listed
 * daemon or operator that is not quarantined. */
int node_trust_allows(node *n, const uint8_t id[ID_BYTES]);
/* strikes' hook: peer_id (printed) is quarantined; new connections are
 * refused in the handshake, and node_trust_cut_quarantined, from the
 * housekeeping timer, ends the open ones. */
void node_trust_quarantined(void *arg, const char *peer_id);
void node_trust_cut_quarantined(node *n);

/* Accounts a transfer with the peer at index peer of the list, or with
 * the clients (NODE_CLIENT, or an index that is not one). */
void node_meter(node *n, int peer, int kind, uint64_t in, uint64_t out);
/* Appends one line to the state directory's journal of rounds: what each
 * round did, for a person reading what happened after a crash. */
void node_journal(node *n, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
