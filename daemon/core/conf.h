/* blocktrain.conf: the daemon's own settings (the run itself is in the
 * run spec it names).  Every key, its default and its meaning are in
 * blocktrain.conf(5). */
#ifndef SM_CONF_H
#define SM_CONF_H

#include <stddef.h>
#include <stdio.h>

#include "proto/keys.h"
#include "proto/spec.h"

#define CF_HOST_LEN 256
#define CF_MODEL_NAME_LEN 64
/* update_streams at most (rounds_parts.h RP_MAX_PARTS), and the range
 * of update_chunk */
#define CF_MAX_STREAMS 16
#define CF_MIN_CHUNK 4096
#define CF_MAX_CHUNK ((size_t)1 << 30)
/* mirrors at most: a copy on every host of a large run is no use */
#define CF_MAX_MIRRORS 16

typedef struct {
	char listen_host[CF_HOST_LEN];
	int listen_port;
	char advertise[CF_HOST_LEN + 8];  /* host:port peers know us by */
	char spec[PR_PATH_LEN];
	char peers[PR_PATH_LEN];
	char state_dir[PR_PATH_LEN];
	int block;                      /* 1-based */
	char device[16];                /* auto | cpu | cuda */
	int threads;                    /* 0: all cores */
	char gemm[8];                   /* auto | own | blas */
	int eval_every;                 /* steps between held-out shares */
	int eval_windows;
	int checkpoint_every;           /* steps, for a block of one replica */
	int strikes_quarantine;         /* refusals of a peer; 0: never */
	char overlap_rounds[4];         /* no | yes: rounds one round late */
	char update_encoding[8];        /* f32 | f16 | bf16 | int8 */
	char update_compression[8];     /* none | zstd */
	char plan[PR_PATH_LEN];         /* plan.json; "": none */
	int update_streams;             /* parallel POSTs per update, 1..16 */
	size_t update_chunk;            /* bytes: the smallest part */
	size_t max_body;                /* bytes; 0: derived from the model */
	int max_connections;            /* HTTP connections at once */
	int max_connections_per_addr;   /* from one address */
	size_t max_buffered;            /* request bodies held, all together;
					 * 0: 4 x max_body */
	int request_timeout_ms;         /* headers; then each period of a body */
	int min_body_rate;              /* bytes per second */
	int peer_timeout_ms;
	char insecure[4];               /* no | yes: plain TCP, loopback only */
	/* host:port of the plain /metrics listener; "": loopback on the
	 * API port + 2000; "off": none */
	char metrics_listen[CF_HOST_LEN + 8];
	int handshake_timeout_ms;
	int header_timeout_ms;          /* a request's headers, at most */
	/* per listed identity, both ports */
	int max_connections_per_peer;   /* a daemon (host) line */
	int max_connections_per_client; /* a client line */
	int max_requests_per_id;        /* in flight at once */
	/* POST /v1/probe/compute: seconds x repeats at most, and the
	 * seconds between two */
	double probe_compute_max_s;
	int probe_compute_interval_s;
	/* the inference pipeline (blocktraind -S) */
	char pipeline_listen[CF_HOST_LEN + 8];  /* host:port; "": first match */
	char pipeline_hosts[PR_PATH_LEN];
	char pipeline_next[CF_HOST_LEN + 8];    /* "": as the list says */
	int pipeline_timeout_ms;        /* a request's wait for progress */
	size_t pipeline_max_frame;      /* bytes */
	int pipeline_batch;             /* windows per forward pass */
	int pipeline_cache_mb;          /* KV caches in all */
	int pipeline_idle_s;            /* an unused KV cache is evicted */
	char pipeline_open_entry[4];    /* no | yes: any TLS client at the entry */
	int pipeline_client_requests;   /* in flight per unlisted client */
	int pipeline_client_rate;       /* bytes/s per unlisted client */
	/* the model's name to OpenAI-style clients; "": made from the spec */
	char model_name[CF_MODEL_NAME_LEN];
	/* mirrors (mirror.c): other hosts that keep a copy of each block's
	 * newest checkpoint and optimizer state, and the bytes this host
	 * may keep of other blocks' copies */
	int mirrors;
	size_t mirror_budget;
} cf_config;

/* One row per key (proto/keys.h), which parsing, validation, defaults
 * and printing read. */
extern const pr_key cf_keys[];
extern const size_t cf_nkeys;

void cf_defaults(cf_config *c);
/* Reads path over the defaults; 0 or a negative code with "file:line:
 * reason" in err (PR_ERR_LEN). */
int cf_load(cf_config *c, const char *path, char *err);
/* Parses "host:port" ("[v6]:port" too) into its parts. */
int cf_parse_hostport(const char *s, char *host, size_t hostlen, int *port);
/* Whether host (as in listen) is a loopback address. */
int cf_is_loopback(const char *host);
/* Checks every key against its range or choices. */
int cf_validate(const cf_config *c, char *err);
/* Every key as INI text under [blocktraind], values as in c: the
 * configuration in effect, defaults included.  0, or KN_EIO. */
int cf_print(FILE *f, const cf_config *c);
/* A line of a list file (peer list, pipeline host list) without its '#'
 * comment and surrounding blanks, in place: "" for nothing. */
char *cf_list_line(char *line);

#endif
