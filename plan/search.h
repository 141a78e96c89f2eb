/* The planner's search over candidates (plan/cost.h): for training, one
 * best placement per set of options (replicas, H, encoding, zstd,
 * streams, overlap), found exhaustively when the placements are few and
 * by a greedy start and pairwise swaps when they are many; for serving,
 * the hosts of each block in the pipeline ring.  shardmeter plan calls it;
 * tests/check_plan.c checks its choices on constructed topologies. */
#ifndef PN_SEARCH_H
#define PN_SEARCH_H

#include "plan/cost.h"

typedef enum { PN_GOAL_TRAIN, PN_GOAL_SERVE, PN_GOAL_BOTH } pn_goal;

#define PN_MAX_H 8

typedef struct {
	pn_goal goal;
	int replicas;           /* 0: search 1 .. hosts / blocks; else that */
	int max_replicas;       /* 0: no bound but the hosts' */
	int h[PN_MAX_H], nh;    /* local steps to try; nh 0: the spec's
	                         * H / 2, H, 2H and 4H */
	/* options the daemon can run: the search tries only these */
	int int8, zstd, overlap;
	int max_streams;        /* 1: one stream per transfer */
	/* every replica trains the spec's steps (replicas add data, not
	 * speed), rather than the spec's positions per block shared out */
	int same_steps;
	/* training: the spec's layers shared among the blocks as each
	 * placement's hosts train fastest (a faster host, a larger block),
	 * rather than each block keeping the spec's */
	int split;
	/* serving: hosts of each block in the ring (0 or 1: one), the
	 * first the one a request takes, the others where it is re-sent
	 * when that one is down; with PN_GOAL_BOTH they are the block's
	 * training replicas, so every candidate has at least as many */
	int serve_replicas;
	/* placements per option set up to which the search is exhaustive */
	double exhaustive_limit;
	/* the first choice: the simplest candidate within this fraction of
	 * the fastest (the model's error is larger than such gains) */
	double tie;
	/* the daemon's configuration keys, handed in by the caller (the
	 * CLI gives cf_keys): a line for a key not among them is written
	 * commented out, with the reason */
	const pr_key *daemon_keys;
	int daemon_nkeys;
} pn_options;

typedef struct {
	pn_candidate c;
	pn_prediction p;
	double score;           /* seconds, what the goal ranks by */
	int simplicity;         /* options changed from the default */
} pn_result;

typedef struct {
	pn_result *v;           /* ranked, fastest first */
	int n;                  /* the top rows asked for (or fewer) */
	int nall;               /* rows in v, n and those below */
	int chosen;             /* the first choice, an index into v */
	pn_result def;          /* the default configuration */
	int exhaustive;         /* every placement was tried */
	double evaluated;       /* candidates predicted */
	double placements;      /* placements per option set, largest */
} pn_plan;

void pn_options_defaults(pn_options *o);

/* Equal blocks, one replica each on the hosts in list order, the spec's
 * H, f32, one stream, blocking rounds; the ring in the same order. */
int pn_default_candidate(const topo_topology *t, const pr_spec *s,
    pn_candidate *c, char *err);

/* Each replica's steps when every block has R replicas: the spec's
 * positions per block (steps x replicas x batch x window) held, or with
 * same_steps the spec's steps; rounded up to a multiple of H when R > 1. */
int pn_steps_for(const pr_spec *s, int R, int H, int same_steps);

/* Searches; plan->v holds at most top rows.  0, or a negative KN_E* code
 * with the reason (a spec the topology cannot host).  The caller frees
 * plan with pn_plan_free. */
int pn_search(const topo_topology *t, const pr_spec *s, const pn_model *m,
    const pn_options *o, int top, pn_plan *plan, char *err);
void pn_plan_free(pn_plan *plan);

/* A lower bound of the device memory that serving a block of layers
 * layers needs: its parameters in f32. */
double pn_serve_bytes(const pr_spec *s, int layers);

/* A lower bound of the device memory that training a block of layers
 * layers needs: parameters, gradients and AdamW's two moments in f32. */
double pn_train_bytes(const pr_spec *s, int layers);

#endif
