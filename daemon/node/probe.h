/* The daemon's side of `shardmeter probe` (DESIGN section 4): the
 * endpoints below /v1/probe/ (proto/PROTOCOL.md).  A compute probe times
 * a scratch model of the block's shape on a thread of its own while
 * training waits at a step boundary; a link probe has this daemon
 * measure round trips and throughput to its peers with the daemon's
 * libcurl client on the loop, against their echo, source and sink.  At
 * most one probe runs at a time, none while a round is in progress, and
 * each is bounded in bytes and seconds.  Called from node.c and api.c on
 * the loop thread. */
#ifndef SM_PROBE_H
#define SM_PROBE_H

#include <stddef.h>

#include "daemon/net/http_route.h"
#include "daemon/net/http_server.h"

struct node;

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

/* Starts the probe thread.  0 or a negative KN_E* code with err. */
int pb_start(struct node *n, char *err);
/* At shutdown, before the trainer thread is closed: joins the probe
 * thread (a compute probe in progress ends first, within its bound). */
void pb_close(struct node *n);
/* After the loop has ended: frees what the probes hold. */
void pb_free(struct node *n);
/* hs_config.discard: the sink's body is counted, never buffered. */
int pb_discard(void *ctx, const char *method, const char *target,
    size_t *max);
/* Answers a request below /v1/probe/ from the probes' route table: the
 * handler of api.c's row "/v1/probe/{*}" (daemon/net/http_route.h);
 * ctx is the node, m->rest what follows /v1/probe/. */
void pb_handle(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m);
/* Whether a value of a query (a=1&b=2) is given, in *val (len bytes,
 * NUL-terminated, cut short when longer): 1, or 0 when key is absent. */
int pb_query_get(const char *query, const char *key, char *val,
    size_t len);

#endif
