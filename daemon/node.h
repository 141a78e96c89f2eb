/* The state of one blocktraind: its run, its peers, the trainer thread,
 * the HTTP server and client, and what it reports.  Shared by node.c (life
 * cycle, events, housekeeping), api.c (the HTTP API) and rounds.c (the
 * averaging rounds of a block's replicas).  Everything here is touched on
 * the loop thread only. */
#ifndef SM_NODE_H
#define SM_NODE_H

#include <stdint.h>
#include <uv.h>

#include "daemon/conf.h"
#include "daemon/http_client.h"
#include "daemon/http_server.h"
#include "daemon/peers.h"
#include "daemon/worker.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "proto/spec.h"

typedef struct round_state round_state;

typedef struct node {
	uv_loop_t *loop;
	sm_config cfg;
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	char *spec_body;                /* canonical msgpack, for /v1/spec */
	size_t spec_len;
	sm_peer_list peers;
	int self;                       /* our line in the peer list */
	int replica, replicas;          /* among the peers of our block */
	const kn_backend *be;
	char backend_desc[256];
	hs_server *http;
	hc_client *client;
	wk_worker *worker;
	uv_timer_t cron;
	uv_signal_t sigterm, sigint, sighup;
	/* what we report */
	const char *state;              /* starting, training, round, done, ... */
	char error[256];
	int64_t step, round;
	float loss;
	double positions_per_s;
	double share;
	int64_t share_step;
	int have_share;
	double started;                 /* monotonic seconds */
	/* the latest checkpoint, served as is */
	char *ckpt;
	size_t ckpt_len;
	char etag[65];
	int64_t ckpt_step, ckpt_round;
	/* bytes with callers that are not peers (tools, clients) */
	uint64_t client_in[SM_KINDS], client_out[SM_KINDS];
	uint64_t requests, client_errors;
	int stopping;
	int worker_done;                /* the trainer thread has ended */
	int exit_code;
	round_state *rounds;
} node;

/* Accounts a transfer with the peer whose address is addr (or a client). */
void node_meter(node *n, const char *addr, int kind, uint64_t in,
    uint64_t out);
int node_peer_of(const node *n, const char *addr);
/* Appends one line to the state directory's journal of rounds: what each
 * round did, for a person reading what happened after a crash. */
void node_journal(node *n, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* api.c */
void api_handle(void *ctx, const hs_request *req, hs_response *res);
void api_on_exchange(void *ctx, const char *peer, const char *kind,
    size_t in, size_t out);
/* A status with a one-line text/plain body: every error, and the short
 * acknowledgements of the round exchange. */
void api_text(hs_response *res, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The status as JSON text (malloc'd), for /v1/status and the log. */
char *api_status_json(node *n, size_t *len);

/* rounds.c */
int rounds_init(node *n, char *err);
/* Closes the round timer; the state goes once libuv has let go. */
void rounds_free(node *n);
/* Our update for round r is ready (from the trainer thread). */
void rounds_on_update(node *n, wk_event *ev);
/* The HTTP side of the exchange: returns 1 if it handled the request. */
int rounds_handle(node *n, const hs_request *req, hs_response *res,
    int block, int64_t round, const char *rest);
void rounds_cron(node *n);
/* SIGHUP: whether a new peer list keeps our block's replicas, the same
 * addresses in the same order (the round protocol depends on it); and the
 * replica map rebuilt once the new list is in place. */
int rounds_same_replicas(const node *n, const sm_peer_list *fresh);
void rounds_remap(node *n);
/* A replica of our block, at line peer, reports another checkpoint for
 * the same step and round: two coordinators decided differently.  The
 * replica of higher index adopts the other's weights at its next round. */
void rounds_diverged(node *n, int peer, const char *their_sha256);

#endif
