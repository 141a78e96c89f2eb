/* Predicted beside measured: a daemon started with `plan = FILE` (the
 * plan.json of shardmeter plan) keeps what the plan predicts for its
 * block and its links, measures the same figures from the trainer's
 * events and its own byte meters, and reports each pair with the error
 * (measured - predicted) / predicted.  node.c feeds it; api.c reports it. */
#ifndef SM_PREDICTED_H
#define SM_PREDICTED_H

#include <stdint.h>

#include <jansson.h>

#include "daemon/core/peers.h"

/* Rounds whose periods (and bytes) the measured figures are taken over. */
#define PD_ROUNDS 5
/* Seconds of training the positions/s is taken over. */
#define PD_WINDOW_S 60.0

typedef struct pd_state pd_state;

/* What a plan is checked against: the daemon's own run and place. */
typedef struct {
	const char *run_id;
	int block;              /* 1-based */
	int replica, replicas;  /* among the peer list's lines of the block */
	int steps, local_steps; /* the spec's */
	double step_positions;  /* batch x window */
} pd_self;

/* Reads path and keeps the chosen candidate's predictions for self.  0, or
 * a negative KN_E* code with a reason naming path in err (PR_ERR_LEN): the
 * file unreadable or malformed, a plan of another run id, or one that
 * has no such block or another number of its replicas.  The caller frees
 * *out with pd_free. */
int pd_load(pd_state **out, const char *path, const pd_self *self,
    char *err);
void pd_free(pd_state *p);

/* The trainer reported step at monotonic time t (WK_STARTED, WK_PROGRESS). */
void pd_on_step(pd_state *p, double t, int64_t step);
/* Our update of a round was ready at time t: a round's period ends; the
 * update bytes this daemon has sent to each peer of pl so far are noted. */
void pd_on_round(pd_state *p, double t, const peers_list *pl);

/* The "predicted" object of the status JSON (a new reference). */
json_t *pd_status_json(const pd_state *p, const peers_list *pl);
/* The Prometheus lines (labels block and replica), malloc'd text; NULL
 * when out of memory. */
char *pd_metrics_text(const pd_state *p, const peers_list *pl);

#endif
