/* The HTTP API v1 of the training daemon (proto/PROTOCOL.md), answered
 * from the node's state on the loop thread. */
#ifndef SM_API_H
#define SM_API_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/core/peers.h"
#include "daemon/net/http_server.h"

struct node;

/* api.c's part of struct node: what it counts of the requests it
 * answers, written by api.c only. */
typedef struct api_counters {
	uint64_t requests, client_errors;
} api_counters;

/* The hs_server handler; ctx is the node. */
void api_handle(void *ctx, const hs_request *req, hs_response *res);
/* The hs_server meter: charges each exchange to the peer the handler
 * named, or to the clients. */
void api_on_exchange(void *ctx, const char *peer, hs_meter m, size_t in,
    size_t out);
/* The handler of the metrics listener: GET /metrics and nothing else. */
void api_metrics_handle(void *ctx, const hs_request *req, hs_response *res);
/* The status as JSON text (malloc'd), for /v1/status and the log. */
char *api_status_json(struct node *n, size_t *len);
/* The Prometheus text of /metrics (malloc'd; metrics.c). */
char *api_metrics_text(struct node *n, size_t *len);
/* Byte positions one training step evaluates. */
double api_step_positions(const struct node *n);
/* The key a peer's strikes are kept under: its printed id, or with
 * insecure = yes (a list without ids) its address. */
const char *api_strikes_key(const peers_entry *p);
/* The listed address of a strikes key, or NULL (an operator). */
const char *api_strikes_addr(const struct node *n, const char *id);

#endif
