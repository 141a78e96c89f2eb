/* blocktraind with a SOMA run spec (node_soma.c): the expert this daemon
 * trains, from its line of the peer list, what it reports beside step
 * and loss, and its latest held-out message (proto/heldout.h), served as
 * is.  The node_soma part of struct node is written by node_soma.c only;
 * the other modules of node/ read it through node_soma_of.  node_soma.c
 * reads the node's run (spec, peers, configuration) and calls nothing of
 * node.c: its journal lines go through the callback it is given. */
#ifndef SM_NODE_SOMA_H
#define SM_NODE_SOMA_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/node/worker.h"
#include "proto/spec.h"

struct node;

typedef struct node_soma {
	int expert;
	char seed_path[PR_PATH_LEN + 16];       /* state_dir/seed.ckpt */
	double val, lr, eps;            /* val: NAN before a validation */
	int64_t val_step;
	uint64_t positions;
	char *heldout;
	size_t heldout_len;
	int64_t heldout_step;
	/* the node's journal of rounds */
	void (*journal)(void *arg, const char *line);
	void *journal_arg;
} node_soma;

/* With a soma spec, after the peer list of n is loaded and our line
 * found: our expert from that line, every line checked against the
 * spec, the seed (state_dir/seed.ckpt, of this run) and the router
 * there, into s; journal takes its lines.  0 or a negative code with the
 * reason in err. */
int node_soma_setup(node_soma *s, const struct node *n,
    void (*journal)(void *arg, const char *line), void *journal_arg,
    char *err);
/* The trainer thread's options for our expert. */
void node_soma_worker_opts(const node_soma *s, const struct node *n,
    wk_opts *wo);
/* A trainer event of a soma daemon that differs from BlockTrain's: the
 * expert's part kept and logged (node.c keeps the report); 1 when
 * handled (ev is still the caller's, a held-out buffer taken from it),
 * 0 for the common path. */
int node_soma_event(node_soma *s, const struct node *n, wk_event *ev);
/* After the loop has ended. */
void node_soma_free(node_soma *s);
/* The part, read-only. */
const node_soma *node_soma_of(const struct node *n);

#endif
