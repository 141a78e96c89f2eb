/* Private to the pipeline host: its state, shared by serve.c (the loop:
 * connections, frames, requests, housekeeping) and serve_main.c (options
 * and start-up). */
#ifndef SM_SERVE_PRIVATE_H
#define SM_SERVE_PRIVATE_H

#include <stdint.h>
#include <uv.h>

#include "daemon/conf.h"
#include "daemon/pipeline_hosts.h"
#include "daemon/serve_compute.h"
#include "proto/pipeline.h"

/* Housekeeping runs this often (deadlines, stalled frames, the link). */
#define SV_CRON_MS 100

typedef struct sv sv;

typedef struct conn {
	sv *s;
	uv_tcp_t tcp;
	int outbound;                   /* our link to the next host */
	int up;                         /* connected (outbound) */
	unsigned char hdr[PL_HEADER];
	size_t hdr_got;
	char *body;
	size_t body_len, body_got;
	double partial_since;           /* 0: between frames */
	int closing;
	char peer[64];
	struct conn *next;
} conn;

/* A frame waiting for the link to the next host to come up. */
typedef struct queued {
	uint64_t id;
	char *buf;
	size_t len;
	struct queued *next;
} queued;

/* A request at the entry host, from its arrival to its answer. */
typedef struct request {
	uint64_t id;                    /* on the ring */
	uint64_t client_id;             /* the client's own */
	conn *client;                   /* NULL once the client has gone */
	pl_mode mode;
	int fixed, end, steps;
	double temperature;
	uint64_t seed;
	unsigned char *seq;             /* ar: the window so far */
	double deadline;
	uint64_t compute_us;
	int hops, traversals;
	struct request *next;
} request;

struct sv {
	uv_loop_t *loop;
	cf_config cfg;
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	ph_list hosts;
	int self, entry, exit_host;
	const kn_backend *be;
	sc *compute;
	uv_tcp_t listener;
	uv_timer_t cron;
	uv_signal_t sigterm, sigint;
	conn *conns;
	conn *link;                     /* to the next host, or NULL */
	double link_retry;
	queued *q_head, *q_tail;
	int q_len;
	request *requests;
	int inflight;
	uint64_t next_id;
	int stopping, closing_handles;
	int trimmed;                    /* memory given back since idle */
	uint64_t served, failed;
};

void sv_on_connection(uv_stream_t *server, int status);
/* Opens the link to the next host unless it is there or opening. */
void sv_link_connect(sv *s);
void sv_on_cron(uv_timer_t *t);
void sv_on_compute_done(void *ctx, sc_job *job);
/* Fails what is in flight, closes every handle; the loop then ends. */
void sv_shutdown(sv *s);

#endif
