/* The HTTP API v1 of the training daemon (proto/PROTOCOL.md), answered
 * from the node's state on the loop thread. */
#ifndef SM_API_H
#define SM_API_H

#include <stddef.h>
#include <stdint.h>

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
/* The Prometheus text of /metrics (malloc'd). */
char *api_metrics_text(struct node *n, size_t *len);

#endif
