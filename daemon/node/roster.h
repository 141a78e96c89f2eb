/* Replicas of our block that join and leave on SIGHUP, at a round
 * boundary (roster.c). */
#ifndef SM_NODE_ROSTER_H
#define SM_NODE_ROSTER_H

#include "daemon/core/peers.h"

struct node;

/* What a SIGHUP's list means for our block. */
enum {
	NODE_ROSTER_TAKE,       /* the list goes in (a change or none) */
	NODE_ROSTER_LEAVE,      /* our line left: we stop, the round to the
				 * others */
	NODE_ROSTER_REFUSE      /* the old list stays (logged why) */
};

/* The engine's roster from the peer list now (at start, and for each
 * new engine).  0 or KN_E*. */
int node_roster_init(struct node *n, char *err);
void node_roster_free(struct node *n);
/* A SIGHUP's list fresh, our line in it self (-1: none): NODE_ROSTER_*. */
int node_roster_hup(struct node *n, const peers_list *fresh, int self);
/* After a taken list replaced ours: a changed roster asks the trainer to
 * stop at the next round boundary. */
void node_roster_changed(struct node *n);
/* WK_STOPPED: 1 when it was that stop (the new engine follows), 0 when
 * the daemon is to go down as usual. */
int node_roster_stopped(struct node *n);

#endif
