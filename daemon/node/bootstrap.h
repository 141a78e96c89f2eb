/* Bootstrap (bootstrap.c): before the trainer starts, a daemon whose
 * state directory holds no checkpoint of its block, or an older one than
 * the run has, asks the other hosts of its block (their checkpoint) and
 * every host of another block (its mirror of ours, mirror.h) for the
 * newest (step, round, sha256), fetches that checkpoint and its
 * optimizer state, checks them (the hash it was named by, the spec's
 * shape, finite values; where several sources name the same step, the
 * majority's hash), and installs them in the state directory, so that
 * the trainer resumes from that step.  A source that serves bytes not
 * matching its hash is refused and counted against it (strikes.h).
 * A daemon with no checkpoint at all asks again, BS_ASKS times in all,
 * while some hosts do not answer and none named a checkpoint; then, or
 * with nothing newer: the trainer starts from what the state
 * directory holds, with a line in the log saying so.  A host of our
 * block whose roster (its status) does not count this daemon yet has
 * not reached the round boundary where it takes the new list: the
 * checkpoint it holds is older than the one its new engine, and so our
 * rounds, start from, and a replica that started from it would be
 * rounds behind, left to adopt a checkpoint its own check may refuse.
 * So it is asked again, BS_ASKS times in all, until it counts us; at
 * the last ask its claim is taken as it is.  Every request is
 * bounded in time and a transfer tried at most BS_TRIES times per
 * source, so a bootstrap always ends.  node.c starts it; on the loop
 * thread. */
#ifndef SM_BOOTSTRAP_H
#define SM_BOOTSTRAP_H

#include <jansson.h>
#include <stdint.h>

#include "daemon/core/conf.h"

struct node;
typedef struct bs_state bs_state;

/* What one other daemon said it holds of our block. */
struct bs_claim {
	char addr[CF_HOST_LEN + 8];
	int mirror;             /* 1: its mirror's copy; 0: a host of ours */
	int answered;           /* any HTTP answer */
	int valid;              /* it named a checkpoint */
	int not_counted;        /* a host of ours whose rounds do not count
				 * us yet: its checkpoint is from before the
				 * boundary where it takes us in */
	int64_t step, round;
	uint64_t bytes;
	char sha[65];
};

/* Of the n claims, the newest (step, then round) above floor and at most
 * steps, and the sha256 most of the claims of that step and round name
 * (a tie: one a host of the block names, then the first): the indices of
 * the claims naming it into order (hosts of the block first, then
 * mirrors, each in list order), their count; 0 when none is newer. */
int bs_choose(const struct bs_claim *c, int n, int64_t floor,
    int64_t steps, int *order);

/* Tries of one source before the next is asked. */
#define BS_TRIES 2
/* Rounds of asking, 1 s and then 2 s apart, when nobody answers a host
 * that holds no checkpoint at all. */
#define BS_ASKS 5
/* Seconds between the log's lines while a transfer is under way. */
#define BS_PROGRESS_S 15

/* Whether n has anyone to ask: a BlockTrain daemon with another daemon
 * line in its peer list. */
int bs_wanted(const struct node *n);
/* Starts the bootstrap of n into n->bootstrap; then(n) runs on the loop
 * once it is over, whatever came of it, unless the daemon is stopping.
 * 0 or KN_E* with the reason in err (PR_ERR_LEN). */
int bs_start(struct node *n, void (*then)(struct node *n), char *err);
void bs_free(bs_state *b);
/* What the bootstrap did, for /v1/status; NULL when none ran. */
json_t *bs_status_json(const bs_state *b);

#endif
