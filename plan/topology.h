/* The planner's view of a topology file (the JSON that `shardmeter probe`
 * writes, or a hand-written one): hosts with their compute rates and the
 * directed link between every two of them.  Hand-written files may use a
 * compact form (hosts with "count" and "site", links between "site:NAME"s)
 * that is expanded here into the full form; shardmeter(1) documents both. */
#ifndef PL_TOPOLOGY_H
#define PL_TOPOLOGY_H

#include <stddef.h>

#include "kernels/model.h"

#define PL_MAX_HOSTS 256
#define PL_NAME_LEN 96

typedef struct {
	char name[PL_NAME_LEN];         /* unique */
	char address[PL_NAME_LEN];      /* host:port, or "" */
	char id[PL_NAME_LEN];           /* peer id, or "" */
	char device[128];
	char site[PL_NAME_LEN];         /* compact form only, or "" */
	double memory_bytes;
	double train_pps;               /* positions/s, forward + backward */
	double forward_pps;             /* positions/s, forward only */
} pl_host;

typedef struct {
	double rtt_ms, rtt_spread_ms;
	int samples;
	double stream_bps;              /* one TCP stream, bytes/s */
	int streams;                    /* how many the multi figure used */
	double multi_bps;               /* that many streams together */
} pl_link;

typedef struct {
	int version;
	char measured_at[64];
	kn_model_shape shape;           /* what the rates were measured at */
	int batch;
	int n;                          /* hosts */
	pl_host *hosts;                 /* n */
	pl_link *links;                 /* n x n, [from * n + to]; diagonal unused */
} pl_topology;

/* Reads path (or text of len bytes, named name in messages).  0, or a
 * negative KN_E* code with a reason that names the file and the host or
 * link at fault (err: KN_ERR_LEN bytes).  On success the caller frees t
 * with pl_topology_free. */
int pl_topology_load(pl_topology *t, const char *path, char *err);
int pl_topology_parse(pl_topology *t, const char *text, size_t len,
    const char *name, char *err);
void pl_topology_free(pl_topology *t);

/* Index of the host named name, or -1. */
int pl_topology_find(const pl_topology *t, const char *name);

/* The link that carries bytes from host from to host to. */
const pl_link *pl_topology_link(const pl_topology *t, int from, int to);

#endif
