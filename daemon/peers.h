/* The peer list: one peer per line, "host:port block [peer-id]", '#'
 * comments.  The order of the lines gives each block's replicas their
 * index.  Health and metering per peer live beside each entry. */
#ifndef SM_PEERS_H
#define SM_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/conf.h"

enum { SM_KIND_CHECKPOINT, SM_KIND_UPDATE, SM_KIND_OTHER, SM_KINDS };

typedef enum {
	SM_PEER_UNKNOWN = 0,
	SM_PEER_UP,
	SM_PEER_DOWN,
	SM_PEER_REFUSED         /* answers, but runs another run spec */
} sm_peer_state;

typedef struct {
	char host[SM_HOST_LEN];
	int port;
	int block;                      /* 1-based */
	char id[65];                    /* peer id, "" until trust is on */
	char addr[SM_HOST_LEN + 8];     /* "host:port" as written */
	int self;                       /* this daemon's own line */
	/* health */
	sm_peer_state state;
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
	uint64_t bytes_in[SM_KINDS], bytes_out[SM_KINDS];
} sm_peer;

typedef struct {
	sm_peer *v;
	int n;
} sm_peer_list;

/* Reads path; 0 or a negative code with "file:line: reason" in err. */
int sm_peers_load(sm_peer_list *pl, const char *path, char *err);
void sm_peers_free(sm_peer_list *pl);
/* Index of the line whose address is addr, or -1. */
int sm_peers_find(const sm_peer_list *pl, const char *addr);
/* Replicas of block b, and the index of the peer at line i among them. */
int sm_peers_replicas(const sm_peer_list *pl, int block);
int sm_peers_replica_index(const sm_peer_list *pl, int i);
const char *sm_kind_name(int kind);

#endif
