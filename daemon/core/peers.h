/* The peer list: one daemon per line, "host:port block peer-id" (a SOMA
 * run: "host:port expert=E peer-id", E from 0), and the operators
 * allowed in, "client peer-id [name]"; '#' comments.  The order
 * of the daemon lines gives each block's replicas their index.  A peer id
 * (identity.h) is what TLS pins each link to; a list without ids is only
 * good for a daemon that runs with insecure = yes.  Health and metering
 * per peer live beside each entry. */
#ifndef SM_PEERS_H
#define SM_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/core/conf.h"
#include "daemon/core/identity.h"

/* What bytes exchanged with a peer were for. */
enum {
	PEERS_KIND_CHECKPOINT,
	PEERS_KIND_UPDATE,
	PEERS_KIND_OTHER,
	PEERS_KINDS
};

typedef enum {
	PEERS_UNKNOWN = 0,
	PEERS_UP,
	PEERS_DOWN,
	PEERS_REFUSED         /* answers, but runs another run spec */
} peers_state;

typedef struct {
	char host[CF_HOST_LEN];
	int port;
	int block;                      /* 1-based; 0 on an expert line */
	int expert;                     /* 0-based; -1 on a block line */
	int line;                       /* in the file, for messages */
	int has_id;
	uint8_t id[ID_BYTES];           /* its peer id, when has_id */
	char id_text[ID_LEN];           /* the same printed, "" without */
	char addr[CF_HOST_LEN + 8];     /* "host:port" as written */
	int self;                       /* this daemon's own line */
	/* health */
	peers_state state;
	double last_seen;               /* monotonic seconds, 0: never */
	double rtt_ms;
	int failures;                   /* in a row */
	double next_probe;              /* backoff */
	int probing;
	char why[160];                  /* last failure or refusal */
	/* what its last status said */
	char run_id[65];
	int64_t step, steps, round;
	double share;
	int64_t share_step;
	/* bytes we exchanged with it, by kind */
	uint64_t bytes_in[PEERS_KINDS], bytes_out[PEERS_KINDS];
} peers_entry;

/* An operator's identity, allowed to use the API (status, checkpoints,
 * the pipeline's entry) but not to take part in rounds. */
#define PEERS_NAME_LEN 48
typedef struct {
	uint8_t id[ID_BYTES];
	char id_text[ID_LEN];
	char name[PEERS_NAME_LEN];      /* as written, or "" */
} peers_client;

typedef struct {
	peers_entry *v;
	int n;
	peers_client *clients;
	int nclients;
	int missing_ids;                /* daemon lines without a peer id */
	int experts;                    /* the daemon lines are expert lines */
} peers_list;

/* Reads path; 0 or a negative code with "file:line: reason" in err.  A
 * peer id listed twice (on any two lines) is refused, so that an id names
 * one node, and so is a list that mixes block and expert lines. */
int peers_load(peers_list *pl, const char *path, char *err);
void peers_free(peers_list *pl);
/* The tokens of a line "client peer-id [name]" (n of them, tok[0] being
 * "client") into c: the pipeline's host list has the same lines.  0 or
 * KN_EINVAL with "path:lineno: reason" in err. */
int peers_parse_client(peers_client *c, char **tok, int n, const char *path,
    int lineno, char *err);
/* Index of the line whose address is addr, or -1. */
int peers_find(const peers_list *pl, const char *addr);
/* Index of the daemon, or of the client, whose peer id is id, or -1. */
int peers_find_id(const peers_list *pl, const uint8_t id[ID_BYTES]);
int peers_client_find(const peers_list *pl, const uint8_t id[ID_BYTES]);
/* Replicas of block b, and the index of the peer at line i among them. */
int peers_replicas(const peers_list *pl, int block);
int peers_replica_index(const peers_list *pl, int i);
const char *peers_kind_name(int kind);

#endif
