/* Private to the pipeline host: its state, shared by serve.c (frames,
 * requests, housekeeping), serve_conn.c (connections: TLS, who each peer
 * is, limits, the link to the next host), serve_http.c (HTTP on the same
 * port, as handlers of the daemon's one HTTP server) and serve_main.c
 * (options, start-up, trust, signals).  serve.c answers a request's
 * client through the request's sv_reply_ops, and serve_conn.c hands a
 * connection that speaks HTTP on through sv_http_ops: neither names a
 * function of serve_http.c. */
#ifndef SM_DAEMON_PIPELINE_INTERNAL_H
#define SM_DAEMON_PIPELINE_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "daemon/core/conf.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "daemon/pipeline/serve_compute.h"
#include "daemon/net/tls_stream.h"
#include "proto/pipeline.h"

/* Housekeeping runs this often (deadlines, stalled frames, the link). */
#define SV_CRON_MS 100
/* The ids of requests ended lately that a host past the entry keeps, so
 * that a frame overtaken by its end frame is dropped. */
#define SV_ENDED 256

typedef struct sv sv;
typedef struct ss_host ss_host;         /* serve_soma.c */
typedef struct sh_conn sh_conn;         /* serve_http.c */
struct hs_server;

/* Why a request, or a client's frame, was not answered: the kinds of
 * the errors counted in the status and /metrics (serve_stats.c). */
typedef enum {
	SV_ERR_INVALID,         /* bad input: a frame or a body that does not fit */
	SV_ERR_REFUSED,         /* not the entry, a mode not served, a peer kind */
	SV_ERR_LIMIT,           /* an open client's requests in flight */
	SV_ERR_TIMEOUT,         /* no progress from the pipeline in time */
	SV_ERR_LINK,            /* the next host down or congested */
	SV_ERR_PIPELINE,        /* an error from a host of the ring */
	SV_ERR_CLIENT_GONE,
	SV_ERR_SHUTDOWN,
	SV_ERR_MEMORY,
	SV_ERR_KINDS
} sv_err;

/* Where the bytes a host counts came from or went to. */
typedef enum {
	SV_BYTES_CLIENT,        /* pipeline frames of clients, and answers */
	SV_BYTES_HTTP,          /* HTTP requests and responses */
	SV_BYTES_RING,          /* frames between the hosts */
	SV_BYTES_KINDS
} sv_bytes;

/* Upper bounds of the latency histogram's buckets, in seconds (then
 * +Inf). */
#define SV_LAT_BUCKETS 14

/* What a host counts for its status and /metrics; the loop's own. */
typedef struct {
	uint64_t requests[2];           /* arrived, by pl_mode */
	uint64_t http_requests;         /* HTTP requests, any path */
	uint64_t errors[SV_ERR_KINDS];
	uint64_t bytes_in[SV_BYTES_KINDS], bytes_out[SV_BYTES_KINDS];
	/* requests answered at the entry: arrival to answer */
	uint64_t lat_count[SV_LAT_BUCKETS + 1];  /* not cumulative */
	double lat_sum;
	/* the slowest of them and its compute on all hosts, seconds: the
	 * buckets hide one stalled request */
	double lat_max, lat_max_compute;
	/* over those requests: frames between the hosts, and the time
	 * they took beside the compute (latency - compute, summed) */
	uint64_t hops;
	double hop_s, compute_s;
	/* compute jobs done on this host, and their compute */
	uint64_t jobs;
	double job_compute_s;
	/* requests at the entry whose work was stopped before their answer
	 * (their client went, or they timed out): here and round the ring */
	uint64_t cancelled;
	/* frames sent on to another host of the next stage after the one
	 * they went to failed */
	uint64_t rerouted;
} sv_stats;

/* Who is at the other end of a connection, from its peer id once the TLS
 * handshake is over; it decides which frames the connection may send. */
typedef enum {
	SV_PEER_UNKNOWN,                /* TLS, before the handshake ends */
	SV_PEER_ANY,                    /* insecure = yes: no ids, no checks */
	SV_PEER_PREV,                   /* the previous host of the ring */
	SV_PEER_NEXT,                   /* our link, pinned to the next host */
	SV_PEER_HOST,                   /* another host of the list */
	SV_PEER_CLIENT,                 /* a client line of the list */
	SV_PEER_OPEN,                   /* anyone else, at an open entry */
	/* a client without a certificate at an open entry: its handshake
	 * ends so that HTTP can tell it what it lacks, and nothing else */
	SV_PEER_NOCERT
} sv_peer;

typedef struct sv_link sv_link;

typedef struct conn {
	sv *s;
	uv_tcp_t tcp;
	uv_shutdown_t shutdown;
	int outbound;                   /* our link to the next host */
	sv_link *link;                  /* outbound: the link it is */
	double heard;                   /* outbound: when it was up, or a
					 * frame last came from it */
	int up;                         /* connected and past TLS (outbound) */
	tls_conn *tls;                  /* NULL: plain TCP */
	int handshaking;
	/* let in beyond max_connections for its handshake to say whether
	 * it is a host of the ring (serve_limits.c) */
	int provisional;
	double opened;                  /* accepted, or connected (outbound) */
	sv_peer kind;
	int inflight;                   /* its requests at the entry */
	/* the rate of a client the list does not name, in bytes */
	double tokens, tokens_at;
	int paused;                     /* reading stopped until tokens >= 0 */
	unsigned char hdr[PL_HEADER];
	size_t hdr_got;
	char *body;
	size_t body_len, body_got;
	double partial_since;           /* 0: between frames */
	int closing;
	int released;                   /* uv_close called */
	double draining_since;          /* closing once its alert is out */
	char peer[64];                  /* host:port */
	char addr[48];                  /* the peer's address, for limits */
	int frames;                     /* frames read whole */
	sh_conn *http;                  /* it speaks HTTP: serve_http.c */
	int http_full;                  /* reading stopped: HTTP holds its
					 * answer's place */
	struct conn *next;
} conn;

/* A frame for a link to the next stage: waiting for it to come up, or
 * (a bt or ar frame, when the next stage has several hosts) sent and
 * held until the host it went to says it passed it on. */
typedef struct queued {
	uint64_t id;
	char *buf;
	size_t len;
	/* bt or ar: re-sent on failover (SV_WORK), or an ar frame after
	 * position 0, which needs the KV cache of the host it went to
	 * (SV_WORK_CACHED: its request starts again instead) */
	int work;
	struct queued *next;
} queued;

enum { SV_WORK = 1, SV_WORK_CACHED = 2 };

/* One persistent link to a host of the next stage (serve_links.c). */
struct sv_link {
	conn *c;                        /* NULL: down */
	int host;                       /* its line in the host list */
	unsigned gen;                   /* times it came up: a new process
					 * behind it has none of our caches */
	double retry_at;                /* down: not connected before */
	double backoff;                 /* s: grows while it keeps failing */
	double ping_at;                 /* the last keep-alive sent */
	queued *q_head, *q_tail;        /* waiting for it to come up */
	int q_len;
	queued *held;                   /* sent, until its ack */
	int nheld;
};

/* A bt or ar frame taken from the host before, to be acked to it once
 * this host has passed the work on (serve_links.c). */
typedef struct sv_owe {
	uint64_t id;
	conn *from;
} sv_owe;

/* The link an ar request, or one of position blocks, went on, and its
 * generation then: the host that holds the request's caches. */
typedef struct sv_pin {
	uint64_t id;
	int link;
	unsigned gen;
} sv_pin;

typedef struct request request;

/* How a request's client is answered, chosen by whoever started the
 * request (a client's gen frame in serve.c, a completion in
 * serve_http.c); serve.c calls these while the client is there. */
typedef struct sv_reply_ops {
	/* the output, len bytes */
	void (*answer)(conn *c, request *r, const unsigned char *data,
	    size_t len);
	/* the request failed: why (kind counted already), and for whom */
	void (*fail)(conn *c, request *r, sv_err kind, const char *msg);
	/* progress, for a client that streams (NULL: none): a BlockTrain
	 * window (data and mask, window bytes) after the blocks of host
	 * line host (from 1), or one more ar byte, at pos */
	void (*partial)(conn *c, request *r, const unsigned char *data,
	    const unsigned char *mask, int next_block, int host);
	void (*partial_byte)(conn *c, request *r, int pos);
} sv_reply_ops;

/* What serve_conn.c does with a connection whose first byte is a
 * method's capital letter (serve_http.c sets it at start). */
typedef struct sv_http_ops {
	/* plaintext read (counted as HTTP here); -1 once c was closed, 1
	 * when c is to stop reading until sv_conn_hold(c, 0) */
	int (*feed)(conn *c, const char *p, size_t n);
	/* c is closing: its HTTP side lets go of it */
	void (*gone)(conn *c);
} sv_http_ops;

/* A request at the entry host, from its arrival to its answer. */
struct request {
	uint64_t id;                    /* on the ring */
	uint64_t client_id;             /* the client's own */
	conn *client;                   /* NULL once the client has gone */
	const sv_reply_ops *reply;      /* how the client is answered */
	pl_mode mode;
	int fixed, end, steps;
	double temperature;
	uint64_t seed;
	int decode;                     /* bt: pl_frame's; 0 random */
	int stream;                     /* bt: the hosts send their windows */
	int dropped;                    /* its client let go of it */
	int parts;                      /* bt: stages whose window went (host
					 * lines, with one host a block) */
	int pos_block, pblock;          /* bt of position blocks: L and the
					 * position block in the ring now */
	unsigned char *seq;             /* ar: the window so far */
	/* logprobs asked (lpk = k + 1; 0: none): lpk figures and lpk - 1
	 * bytes per window position, as the ring's frames carry them */
	int lpk;
	float *lp;
	unsigned char *lpb;
	double deadline;
	uint64_t compute_us;
	int hops, traversals;
	double arrived;
	struct request *next;
};

struct sv {
	uv_loop_t *loop;
	cf_config cfg;
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	/* the name completions and GET /v1/models give the model
	 * (model_name, or one made from the spec) */
	char model_name[CF_MODEL_NAME_LEN];
	long long model_created;        /* its "created": when we started */
	ph_list hosts;
	int self, entry, exit_host;
	int stage;                      /* our blocks' stage, from 0 */
	tls_ctx *tls;                   /* NULL: insecure, plain TCP */
	int open_entry;                 /* the entry takes any TLS client */
	const kn_backend *be;
	sc *compute;                    /* NULL on a SOMA host */
	ss_host *soma;                  /* the experts of a SOMA host */
	uv_tcp_t listener;
	uv_timer_t cron;
	uv_signal_t sigterm, sigint, sighup;
	conn *conns;
	/* the links to the hosts of the next stage (none in a ring of one
	 * stage); spare: a frame can go to another host of that stage when
	 * one fails (several hosts, and not the exit, whose answers go to
	 * the entry that owns the request) */
	sv_link links[PH_MAX_HOSTS];
	int nlinks, spare;
	uint64_t ping_id;
	double links_cron_at;           /* the last keep-alive check */
	sv_owe *owes;                   /* what we owe the stage before */
	int nowes, owes_cap;
	sv_pin *pins;
	int npins, pins_cap;
	request *requests;
	int inflight;
	uint64_t next_id;
	int stopping, closing_handles;
	int trimmed;                    /* memory given back since idle */
	uint64_t served, failed;
	double started;
	sv_stats st;
	uint64_t ended[SV_ENDED];       /* past the entry: lately ended ids */
	int ended_at, ended_count;
	struct hs_server *metrics;      /* the plain /metrics listener */
	/* HTTP on the pipeline port: the server its connections are fed
	 * to, and how serve_conn.c hands them on */
	struct hs_server *http;
	const sv_http_ops *http_ops;
	char metrics_addr[CF_HOST_LEN + 8];
};

/* serve.c */

void sv_on_cron(uv_timer_t *t);
void sv_on_compute_done(void *ctx, sc_job *job);
/* A frame c may send (serve_conn.c checked who c is); takes what f owns. */
void sv_dispatch(sv *s, conn *c, pl_frame *f);
/* c is closing: its requests lose their client; the loss of a link
 * sends what it held to another host of the next stage, or fails it. */
void sv_conn_gone(sv *s, conn *c, const char *why);
/* At the entry: the request id is lost (msg, kind SV_ERR_LINK) with a
 * link, if it is still in flight; and every request in flight. */
void sv_request_lost(sv *s, uint64_t id, const char *msg);
/* At the entry: the ar request id lost its KV caches with a host of its
 * path; it starts again from position 0 with the bytes it has. */
void sv_request_redo(sv *s, uint64_t id);
void sv_requests_lost(sv *s, const char *msg);
/* At the entry: the client of request id lets go of it, which is no
 * error (a completion's choice has all it wants); its work stops at the
 * next housekeeping, here and round the ring. */
void sv_request_drop(sv *s, uint64_t id);
/* Fails what is in flight, closes every handle; the loop then ends. */
void sv_shutdown(sv *s);

/* The error kind of an answer, counted (sv_stats.errors). */
void sv_count_error(sv *s, sv_err kind);

/* serve_soma.c: a host of SOMA experts (s->soma set, no ring) */

/* Loads this host's experts from the state directory. */
int ss_start(sv *s, char *err);
/* A client's score, step or end frame; takes what f owns. */
void ss_dispatch(sv *s, conn *c, pl_frame *f);
/* c's sessions go with it. */
void ss_conn_gone(sv *s, conn *c);
void ss_stop(sv *s);

/* serve_conn.c */

void sv_on_connection(uv_stream_t *server, int status);
/* Opens link l unless it is there or opening. */
void sv_link_connect(sv *s, sv_link *l);
/* Writes buf (len bytes, taken) to c; -1 when c is or goes closing. */
int sv_conn_write(conn *c, char *buf, size_t len);
int sv_conn_send(conn *c, const pl_frame *f);
/* Closes c once what is written to it has gone (HTTP's close). */
void sv_conn_finish(conn *c);
/* Stops reading c (hold 1) while its HTTP answer waits, or reads again,
 * what the TLS engine kept first (hold 0). */
void sv_conn_hold(conn *c, int hold);
/* Closes c at once; why (NULL: nothing) goes to the log. */
void sv_conn_close(conn *c, const char *why);
/* Stalled frames and handshakes, paused clients, the link's retry. */
void sv_conns_cron(sv *s, double now);
/* After the host list's clients changed: connections of ids no longer
 * allowed are closed, the others take their new kind.  The count
 * closed. */
int sv_conns_recheck(sv *s);
/* Whether the host list or an open entry lets id in (tls_allow_fn). */
int sv_allows(void *arg, const uint8_t id[ID_BYTES]);

/* serve_links.c: the links to the next stage, failover, keep-alive */

/* The links of s->self's place in the ring. */
void sv_links_init(sv *s);
/* Opens every link. */
void sv_links_start(sv *s);
/* Sends f on to the next stage: a request's frames to one host of it
 * (the same for every frame of an id while it stays up; at the exit,
 * to the entry that owns the id), an end frame to every host. */
void sv_links_send(sv *s, const pl_frame *f);
/* Link l's connection is up (what waited goes), or went (why). */
void sv_link_up(sv *s, sv_link *l);
void sv_link_down(sv *s, sv_link *l, const char *why);
/* Reconnects, keep-alives, links that no longer answer. */
void sv_links_cron(sv *s, double now);
/* A ping, pong or ack frame on c. */
void sv_links_frame(sv *s, conn *c, const pl_frame *f);
/* A bt or ar frame of id came from c: to ack once passed on.  The
 * frames of id held for the next stage (or waiting for a link there);
 * and the work of id has gone on from here (its frame sent on where
 * nothing is held, or acked where it was): the host before is told. */
void sv_links_owe(sv *s, conn *c, uint64_t id);
int sv_links_held(const sv *s, uint64_t id);
void sv_links_passed(sv *s, uint64_t id);
/* The request id ended: what is held or owed for it goes. */
void sv_links_forget(sv *s, uint64_t id);
/* Inbound c closes: nothing more is owed to it. */
void sv_links_conn_gone(sv *s, conn *c);
/* Whether some link is up; at shut-down, everything held goes. */
int sv_links_any_up(const sv *s);
void sv_links_free(sv *s);

/* serve_limits.c */

/* Whether the new inbound connection c may stay (max_connections and
 * max_connections_per_addr), room made by closing one still in its TLS
 * handshake if need be: 0, or -1 with the reason in why. */
int sv_limits_accept(conn *c, char *why, size_t len);
/* The handshake of inbound c is over and its kind known: its identity's
 * cap (max_connections_per_peer for a host, _per_client for a client),
 * and a host let in beyond max_connections takes a client's place.  0,
 * or -1 once c is closed. */
int sv_limits_admit(conn *c);

/* serve_stats.c: the status and /metrics of a pipeline host */

/* A request answered at the entry: its latency, hops and compute. */
void sv_stats_answered(sv *s, const request *r);
/* The status as compact JSON (malloc'd, NUL-terminated), NULL when out
 * of memory; and the Prometheus text (malloc'd, *len bytes). */
char *sv_status_json(sv *s, size_t *len);
char *sv_metrics_text(sv *s, size_t *len);
/* The plain loopback listener of /metrics (metrics_listen; its default
 * is 127.0.0.1 on the pipeline port + 2000), and its end. */
int sv_metrics_start(sv *s, char *err);
void sv_metrics_stop(sv *s);

/* serve_http.c: HTTP on the pipeline port (GET /v1/status, POST
 * /v1/completions) as handlers of the daemon's HTTP server
 * (daemon/net/http_server.h), each connection fed to it as a link */

/* Makes s->http and sets s->http_ops; KN_OK or an error in err. */
int sh_start(sv *s, char *err);

/* serve.c, for whoever starts a request */

/* Starts the request of a client's gen frame (or a completion) at the
 * entry, answered through reply (stream: the client wants each host's
 * window, if reply has partial); takes what f owns.  0, or -1 with msg
 * set and the error counted (kind in *kind). */
int sv_start_request(sv *s, conn *c, pl_frame *f, const sv_reply_ops *reply,
    int stream, char *msg, size_t len, sv_err *kind);


/* ---- the compute thread and its batchers ---- */
/* Between the compute thread (serve_compute.c) and its two batchers:
 * BlockTrain (serve_bt.c) and autoregressive with its KV caches
 * (serve_ar.c).  Every sc__ function runs on the compute thread, or at
 * close once the thread has been joined. */

#include <stdatomic.h>

#include "daemon/core/loop_thread.h"

struct bt_state;        /* serve_bt.c */
struct cache;           /* serve_ar.c */
struct spb_cache;        /* serve_pb.c */

struct sc {
	sc_opts o;
	pr_spec spec;
	lt_thread *lt;
	/* the loop's: jobs held back while a read is dispatched (sc_hold),
	 * to go to the thread together */
	int holds;
	lt_item *held_head, *held_tail;
	void (*done)(void *, sc_job *);
	void *ctx;
	void (*closed)(void *);
	void *closed_arg;
	/* set at start, read-only after */
	kn_model *blocks[PR_MAX_BLOCKS + 1];    /* by 1-based block */
	kn_model *causal;                       /* this host's layers */
	size_t kv_bytes;                        /* one KV cache's */
	/* the thread's own */
	struct bt_state *active;
	struct cache *caches;
	struct spb_cache *spb_caches;             /* position blocks' */
	atomic_int ncaches;                     /* the loop reads it too */
	atomic_uint_fast64_t cancelled;         /* jobs dropped unfinished */
	float *ar_scratch;                      /* window floats */
	/* posted by the thread once its warm-up passes ran (sc_start waits) */
	uv_sem_t warmed;
	double warm_s;                          /* they took */
};

/* The job's answer becomes an error: prefix, then msg. */
void sc__fail(sc_job *job, const char *prefix, const char *msg);
/* Hands a finished job back to the loop. */
void sc__post(sc *c, sc_job *job);

/* A BlockTrain job joins the active requests; -1: it failed (answer set,
 * the caller posts it). */
int sc__bt_begin(sc *c, sc_job *job);
/* One step of every active request; the finished ones are posted. */
void sc__bt_round(sc *c);
/* At close: the active requests and their jobs. */
void sc__bt_free_all(sc *c);
/* The request id ended: its work here goes unfinished, unanswered; 1
 * when it had some. */
int sc__bt_drop(sc *c, uint64_t id);

/* serve_pb.c: the caches of requests of position blocks.  begin finds
 * or makes the request's caches for position block p and adds the
 * clean context seq[.., pL) to them; -1 with why set when it cannot. */
int sc__pb_begin(sc *c, uint64_t id, const int32_t *seq, int p, char *why,
    size_t len);
/* The request's cache over block (1-based), NULL when it has none. */
kn_kv *sc__pb_kv(sc *c, uint64_t id, int block);
void sc__pb_drop(sc *c, uint64_t id);
void sc__pb_evict_idle(sc *c, double t);
void sc__pb_free_all(sc *c);

/* -1: the autoregressive job does not fit this host (answer set, the
 * caller posts it). */
int sc__ar_accept(sc *c, sc_job *job);
/* Runs the accepted jobs (a list through next) in batched passes and
 * posts each. */
void sc__ar_run(sc *c, sc_job *list);
/* Drops the request's KV cache, if it has one. */
void sc__ar_drop(sc *c, uint64_t id);
/* Drops the caches unused for idle_s at time t (kn_now). */
void sc__ar_evict_idle(sc *c, double t);
/* At close: every cache. */
void sc__ar_free_all(sc *c);

#endif
