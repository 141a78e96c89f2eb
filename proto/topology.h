/* The topology file (DESIGN section 4): hosts with their device, free
 * memory and compute rates at one block shape, and a directed link for
 * every ordered pair of hosts (round trip, one- and several-stream
 * throughput).  `shardmeter probe` writes it from measurements, a person
 * may write it by hand, and `shardmeter plan` reads it; this is its only
 * reader and writer.  JSON, read strictly: an unknown key, a missing or
 * repeated link, a repeated host or a number that is not positive and
 * finite is an error that names the file, the key and the host or link.
 * Hand-written files may use a compact form (hosts with "count" and
 * "site", links between "site:NAME"s), expanded on reading into the full
 * form the probe writes; shardmeter(1), "Topology files", is the format's
 * one description. */
#ifndef PR_TOPOLOGY_H
#define PR_TOPOLOGY_H

#include <stddef.h>

#include "kernels/model.h"

#define TOPO_VERSION 1
#define TOPO_MAX_HOSTS 1024
#define TOPO_NAME_LEN 128       /* name, address, id, measured_at */
#define TOPO_DEVICE_LEN 256
/* An optional measure the file does not give (no measure is negative) */
#define TOPO_UNKNOWN (-1.0)
/* A link end "site:NAME" stands for every host of site NAME */
#define TOPO_SITE_PREFIX "site:"

/* The block shape the compute rates were measured at (the spec's). */
typedef struct {
	int width, heads, layers, window, batch;
} topo_shape;

typedef struct {
	char name[TOPO_NAME_LEN];       /* unique; probe writes "host:port" */
	char address[TOPO_NAME_LEN];    /* "" when not given */
	char id[TOPO_NAME_LEN];         /* peer id; "" when not given */
	char device[TOPO_DEVICE_LEN];   /* free text; "" when not given */
	char site[TOPO_NAME_LEN];       /* compact form's site; "" when none */
	double memory_bytes;            /* free on the training device */
	double train_positions_per_s;   /* forward+backward+optimizer */
	double forward_positions_per_s; /* forward only */
	/* seconds of one serving pass over a window that picks one row, and
	 * every row; 0 when not given (the planner then derives a pass from
	 * forward_positions_per_s) */
	double serve_pass_one_s, serve_pass_window_s;
	/* hosts of one machine (its CPUs, memory bandwidth) have the same
	 * machine; "" when not known.  train_shared: the training rate with
	 * every host of the machine that has one training at once; 0 when
	 * not given (then no host slows another) */
	char machine[TOPO_NAME_LEN];
	double train_shared;
	/* what a round's exchange costs its training, where both are given
	 * (0 when not: nothing): cpu_share, the CPU seconds per second its
	 * training got (a CPU host's quota or threads), and exchange_cpu,
	 * the CPU seconds its daemon's event loop spends to send one byte of
	 * update and take one (TLS, TCP, HTTP), which come out of that
	 * share */
	double cpu_share, exchange_cpu;
	/* and beside the bytes, per parameter of the block: encode_cpu,
	 * encoding its own update once a round, and merge_cpu, taking each
	 * replica's (decoding and checking it, its share of the average);
	 * CPU seconds, 0 when not given */
	double encode_cpu, merge_cpu;
	char *notes;                    /* owned; NULL when not given */
} topo_host;

/* Bytes flow from the host of the row to the host of the column.  The
 * probe writes every field; a hand-written link may leave out the
 * spread and samples (read as TOPO_UNKNOWN and 0) and the pair streams
 * and multi_bytes_per_s (read as 1 and stream_bytes_per_s: no gain
 * from parallel streams is assumed). */
typedef struct {
	double rtt_ms;                  /* median of samples round trips */
	double rtt_spread_ms;           /* their interquartile range, >= 0;
	                                 * TOPO_UNKNOWN when not given */
	int samples;                    /* 0 when not given */
	double stream_bytes_per_s;      /* one TCP stream */
	int streams;
	double multi_bytes_per_s;       /* streams parallel streams together */
	char *notes;                    /* owned; NULL when not given */
} topo_link;

typedef struct {
	char measured_at[TOPO_NAME_LEN];        /* ISO-8601 UTC, or "by hand" */
	topo_shape shape;
	int nhosts;
	topo_host *hosts;               /* nhosts */
	/* nhosts x nhosts, row from, column to; the diagonal is unused */
	topo_link *links;
	char *notes;                    /* owned; NULL when not given */
} topo_topology;

/* An empty topology of nhosts hosts and their links, all zero, for a
 * writer to fill.  0 or a negative KN_E* code with the reason in err
 * (KN_ERR_LEN bytes). */
int topo_init(topo_topology *t, int nhosts, char *err);
/* Reads and checks the file at path into t (topo_free it).  On an error
 * t holds nothing and err says "path: what, where". */
int topo_load(topo_topology *t, const char *path, char *err);
/* The same from text (len bytes); what names it in messages. */
int topo_parse(topo_topology *t, const char *text, size_t len,
    const char *what, char *err);
/* Checks t as topo_load would, then writes it to path through a
 * temporary file and a rename. */
int topo_save(const topo_topology *t, const char *path, char *err);
/* The JSON text of t (malloc'd, the caller frees), or NULL with err. */
char *topo_dump(const topo_topology *t, char *err);
void topo_free(topo_topology *t);

/* The link from host from to host to (indices), or NULL on the
 * diagonal or out of range. */
topo_link *topo_link_at(const topo_topology *t, int from, int to);
/* The index of the host named name, or -1. */
int topo_find(const topo_topology *t, const char *name);
/* The model shape of s (not causal), as kernels/model.h counts it. */
kn_model_shape topo_model_shape(const topo_shape *s);

#endif
