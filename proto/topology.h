/* The topology file (DESIGN section 4): hosts with their device, free
 * memory and compute rates at one block shape, and a directed link for
 * every ordered pair of hosts (round trip, one- and several-stream
 * throughput).  `shardmeter probe` writes it from measurements, a person
 * may write it by hand, and `shardmeter plan` reads it.  JSON, read
 * strictly: an unknown key, a missing or repeated link, a repeated host
 * or a number that is not positive and finite is an error that names
 * the key and the host or link. */
#ifndef PR_TOPOLOGY_H
#define PR_TOPOLOGY_H

#include <stddef.h>

#define TOPO_VERSION 1
#define TOPO_MAX_HOSTS 1024
#define TOPO_NAME_LEN 128       /* name, address, id, measured_at */
#define TOPO_DEVICE_LEN 256

/* The block shape the compute rates were measured at (the spec's). */
typedef struct {
	int width, heads, layers, window, batch;
} topo_shape;

typedef struct {
	char name[TOPO_NAME_LEN];       /* unique; probe writes "host:port" */
	char address[TOPO_NAME_LEN];    /* "" when not given */
	char id[TOPO_NAME_LEN];         /* peer id; "" when not given */
	char device[TOPO_DEVICE_LEN];   /* free text */
	double memory_bytes;            /* free on the training device */
	double train_positions_per_s;   /* forward+backward+optimizer */
	double forward_positions_per_s; /* forward only */
	char *notes;                    /* owned; NULL when not given */
} topo_host;

/* Bytes flow from the host of the row to the host of the column. */
typedef struct {
	double rtt_ms;                  /* median of samples round trips */
	double rtt_spread_ms;           /* their interquartile range, >= 0 */
	int samples;
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

#endif
