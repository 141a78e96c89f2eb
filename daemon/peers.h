/* The peer list: one peer per line, "host:port block [peer-id]", '#'
 * comments.  The order of the lines gives each block's replicas their
 * index.  Health and metering per peer live beside each entry. */
#ifndef SM_PEERS_H
#define SM_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/conf.h"

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
	int block;                      /* 1-based */
	char id[65];                    /* peer id, "" until trust is on */
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

typedef struct {
	peers_entry *v;
	int n;
} peers_list;

/* Reads path; 0 or a negative code with "file:line: reason" in err. */
int peers_load(peers_list *pl, const char *path, char *err);
void peers_free(peers_list *pl);
/* Index of the line whose address is addr, or -1. */
int peers_find(const peers_list *pl, const char *addr);
/* Replicas of block b, and the index of the peer at line i among them. */
int peers_replicas(const peers_list *pl, int block);
int peers_replica_index(const peers_list *pl, int i);
const char *peers_kind_name(int kind);

#endif
