/* The daemon's identity and who may connect (node_trust.c): its TLS
 * context, the strikes against the peers and their quarantine.  The
 * node_trust part of struct node is written by node_trust.c only; the
 * other modules of node/ read it through node_trust_tls and
 * node_trust_strikes (the strikes table is changed through its own
 * functions, strikes.h). */
#ifndef SM_NODE_TRUST_H
#define SM_NODE_TRUST_H

#include <stdint.h>

#include "daemon/core/identity.h"
#include "daemon/core/peers.h"
#include "daemon/core/strikes.h"
#include "daemon/net/http_server.h"
#include "daemon/net/tls.h"

struct node;

typedef struct node_trust {
	tls_ctx *tls;                   /* NULL with insecure = yes */
	/* refusals of what each peer sent, and its quarantine: made by
	 * node_trust_setup, noted by the rounds, cleared by the operator */
	strikes *strikes;
	int recheck;                    /* a quarantine: cut its connections */
} node_trust;

/* The strikes of this run, with those an earlier start of it left in
 * state_dir/strikes (a quarantine lasts the run, restarts included);
 * then the identity of the state directory, with the peer list checked
 * against it (every daemon line with an id, ours with our own), or,
 * with insecure = yes, a check that we listen on loopback only.  0 or a
 * negative code with the reason in err. */
int node_trust_setup(struct node *n, char *err);
/* After the loop has ended. */
void node_trust_free(struct node *n);
/* The TLS context (NULL with insecure = yes) and the strikes table. */
tls_ctx *node_trust_tls(const struct node *n);
strikes *node_trust_strikes(const struct node *n);
/* Whether a peer list read on SIGHUP keeps those rules (self: our line
 * in it); the reason in err. */
int node_trust_check(const struct node *n, const peers_list *pl, int self,
    char *err);
/* The peer list changed: connections of ids no longer in it end now. */
void node_trust_reloaded(struct node *n);
/* hs_config.id_role: a daemon line of the peer list is a peer
 * (HS_ROLE_PEER), anyone else listed a client. */
int node_trust_role(void *ctx, const uint8_t *id);
/* Whether the identity of a request is an operator's (a client line),
 * not a daemon's: 1 over plain TCP, where nobody has an id. */
int node_trust_is_operator(const struct node *n, const uint8_t *id);
/* The route tables' who (daemon/net/http_route.h): HR_PEER for a daemon
 * line of the peer list, HR_OPERATOR for a client line; over plain TCP,
 * where nobody has an id, HR_EVERYONE.  ctx is the node. */
unsigned node_trust_who(void *ctx, const hs_request *req);
/* What the TLS layer asks in every handshake: whether id is a listed
 * daemon or operator that is not quarantined. */
int node_trust_allows(struct node *n, const uint8_t id[ID_BYTES]);
/* strikes' hook: peer_id (printed) is quarantined; new connections are
 * refused in the handshake, and node_trust_cut_quarantined, from the
 * housekeeping timer, ends the open ones. */
void node_trust_quarantined(void *arg, const char *peer_id);
void node_trust_cut_quarantined(struct node *n);

#endif
