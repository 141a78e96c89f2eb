/* The daemon's side of `shardmeter probe` (DESIGN section 4): the
 * endpoints below /v1/probe/ (proto/PROTOCOL.md).  A compute probe times
 * a scratch model of the block's shape on a thread of its own while
 * training waits at a step boundary; a link probe has this daemon
 * measure round trips and throughput to its peers with the daemon's
 * libcurl client on the loop, against their echo, source and sink.  At
 * most one probe runs at a time, none while a round is in progress, and
 * each is bounded in bytes and seconds.  Called from node.c and api.c on
 * the loop thread.  The probe knows nothing of the node: what it needs of
 * the daemon that runs it comes in a pb_config, its callbacks in pb_ops
 * (as rounds.h's rounds_ops). */
#ifndef SM_PROBE_H
#define SM_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/core/peers.h"
#include "daemon/net/http_client.h"
#include "daemon/net/http_route.h"
#include "daemon/net/http_server.h"
#include "daemon/node/worker.h"
#include "kernels/backend.h"
#include "proto/spec.h"

typedef struct pb_state pb_state;

/* What the probe asks of the daemon, on the loop thread; arg is
 * pb_config.arg. */
typedef struct pb_ops {
	/* Whether a round of averaging is in progress, its number in
	 * *round: probes are refused, and a link probe in flight ends. */
	int (*in_round)(void *arg, int64_t *round);
	/* Whether the daemon is stopping. */
	int (*stopping)(void *arg);
	/* The peer list now (a SIGHUP may replace it) and our line in it
	 * (self may be NULL). */
	const peers_list *(*peers)(void *arg, int *self);
	/* Accounts a transfer with the peer at index peer of the list, or
	 * with the clients (an index that is not one). */
	void (*meter)(void *arg, int peer, int kind, uint64_t in,
	    uint64_t out);
	/* The route table's who of a request (HR_* bits of
	 * daemon/net/http_route.h): the compute and link probes are an
	 * operator's only. */
	unsigned (*who)(void *arg, const hs_request *req);
	/* The trainer a compute probe holds at a step boundary; NULL when
	 * it has ended. */
	wk_worker *(*trainer)(void *arg);
} pb_ops;

/* The daemon's side the probe reads; the pointers outlive the probe. */
typedef struct pb_config {
	uv_loop_t *loop;
	hc_client *client;              /* the daemon's, for link probes */
	const char *advertise;          /* host:port peers know us by */
	const char *device;             /* the backend's description */
	const kn_backend *be;
	const pr_spec *spec;            /* the compute probe's shape */
	int block;                      /* ours, from 1 */
	int expert;                     /* >= 0: a SOMA expert (no compute) */
	double compute_max_s;           /* probe_compute_max_s */
	int compute_interval_s;         /* probe_compute_interval_s */
	pb_ops ops;
	void *arg;
} pb_config;

/* Bounds of the parameters (a larger one is a 400) and their defaults. */
#define PB_MAX_BYTES ((size_t)64 << 20)  /* a source, a sink, a link's B */
#define PB_MAX_SAMPLES 1000
#define PB_MAX_STREAMS 16
#define PB_MAX_SECONDS 120.0            /* a link probe in all */
#define PB_MAX_COMPUTE_SECONDS 10.0     /* each half of a repetition */
#define PB_DEFAULT_SAMPLES 20
/* CPU seconds of the compute probe's timing of an update's encode and
 * merge */
#define PB_UPDATE_CPU_SECONDS 0.05
/* on echo and sink answers: the answering loop's CPU seconds so far */
#define PB_LOOP_CPU_HEADER "Loop-CPU-Seconds"
#define PB_DEFAULT_BYTES ((size_t)16 << 20)
#define PB_DEFAULT_STREAMS 4
#define PB_DEFAULT_SECONDS 60.0
#define PB_DEFAULT_COMPUTE_SECONDS 1.0
/* repetitions of each half, the median reported (PCM_MAX_REPEATS) */
#define PB_DEFAULT_COMPUTE_REPEATS 3
/* How long a compute probe waits for training to reach a step boundary
 * (a round or a full disk may hold it elsewhere). */
#define PB_HOLD_TIMEOUT 30.0

/* Starts the probe thread into *out.  0 or a negative KN_E* code with
 * err. */
int pb_start(pb_state **out, const pb_config *c, char *err);
/* At shutdown, before the trainer thread is closed: joins the probe
 * thread (a compute probe in progress ends first, within its bound).
 * s may be NULL. */
void pb_close(pb_state *s);
/* After the loop has ended: frees what the probes hold; s may be
 * NULL. */
void pb_free(pb_state *s);
/* hs_config.discard: the sink's body is counted, never buffered. */
int pb_discard(void *ctx, const char *method, const char *target,
    size_t *max);
/* Answers a request below /v1/probe/ from the probes' route table: the
 * handler behind api.c's row "/v1/probe/{*}" (daemon/net/http_route.h);
 * ctx is the pb_state, m->rest what follows /v1/probe/. */
void pb_handle(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m);
/* Whether a value of a query (a=1&b=2) is given, in *val (len bytes,
 * NUL-terminated, cut short when longer): 1, or 0 when key is absent. */
int pb_query_get(const char *query, const char *key, char *val,
    size_t len);

#endif
