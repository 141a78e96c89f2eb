/* Replicas that join and leave a running block (DESIGN section 5).
 *
 * A peer list read on SIGHUP may add or drop replicas of our block.  The
 * round protocol counts its members by their index in the block's
 * replicas, and a replica's data shard is its index too, so the set
 * cannot change inside a round: the trainer is asked to stop at the next
 * round boundary, once that round's outcome is in its weights and
 * written as a checkpoint, and a new engine (trainer and rounds) starts
 * from that checkpoint with the new replicas.  The listener, the
 * serving of checkpoints and the peer watch stay up meanwhile: to the
 * others the daemon is only busy for the time a restart from a
 * checkpoint takes.  Every request of the rounds carries its roster's
 * hash (rounds.h), so for the round or two in which replicas that took
 * the SIGHUP at different moments disagree, none mistakes another's
 * members for its own: they take the coordinator's checkpoint instead.
 * A daemon whose own line left the list stops at once, leaving the round
 * in flight to the others (who no longer let it in): staying for it, it
 * would end that round alone, with weights of its own. */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/core/log.h"
#include "daemon/node/internal.h"
#include "daemon/node/node.h"
#include "daemon/node/roster.h"
#include "kernels/error.h"

/* Our block's replicas in pl, in order, into a new array; -1 when out
 * of memory. */
static int
roster_from(const peers_list *pl, int block, char (**out)[CF_HOST_LEN + 8])
{
	char (*v)[CF_HOST_LEN + 8];
	int i, k = 0;

	if ((v = calloc((size_t)pl->n + 1, sizeof(*v))) == NULL)
		return -1;
	for (i = 0; i < pl->n; i++)
		if (pl->v[i].block == block)
			snprintf(v[k++], sizeof(v[0]), "%s", pl->v[i].addr);
	*out = v;
	return k;
}

static int
listed(char (*v)[CF_HOST_LEN + 8], int n, const char *addr)
{
	int i;

	for (i = 0; i < n; i++)
		if (strcmp(v[i], addr) == 0)
			return 1;
	return 0;
}

int
node_roster_init(node *n, char *err)
{
	int k;

	if (n->soma)
		return KN_OK;
	free(n->training.roster);
	n->training.roster = NULL;
	if ((k = roster_from(&n->peers, n->cfg.block,
	    &n->training.roster)) < 0)
		return kn_error(err, KN_ENOMEM, "out of memory");
	n->training.roster_n = k;
	return KN_OK;
}

void
node_roster_free(node *n)
{
	free(n->training.roster);
	n->training.roster = NULL;
	n->training.roster_n = 0;
}

/* Whether our block's replicas in pl are the engine's, in its order. */
static int
same_roster(const node *n, const peers_list *pl)
{
	int i, k = 0;

	for (i = 0; i < pl->n; i++) {
		if (pl->v[i].block != n->cfg.block)
			continue;
		if (k >= n->training.roster_n ||
		    strcmp(pl->v[i].addr, n->training.roster[k]) != 0)
			return 0;
		k++;
	}
	return k == n->training.roster_n;
}

/* A trainer still at work, which a stop at a round boundary reaches. */
static int
training_on(const node *n)
{
	return n->training.worker != NULL && !n->training.worker_done;
}

int
node_roster_hup(node *n, const peers_list *fresh, int self)
{
	int replicas;

	if (n->soma)
		return NODE_ROSTER_TAKE;
	if (self < 0) {
		if (n->training.leaving)
			return NODE_ROSTER_LEAVE;
		n->training.leaving = 1;
		node_journal(n, "leaving: %s is no longer in the peer list",
		    n->peers.v[n->self].addr);
		if (training_on(n)) {
			/* at once: the others, who no longer let us in, finish
			 * the round in flight without us; staying for it, we
			 * would only end it alone, with weights of our own */
			log_info("SIGHUP: %s is no longer in the peer list: this "
			    "replica leaves the run, abandoning its round in "
			    "flight to the others", n->peers.v[n->self].addr);
			wk_stop(n->training.worker);
		} else {
			log_info("SIGHUP: %s is no longer in the peer list and "
			    "training is over here: stopping",
			    n->peers.v[n->self].addr);
			node__stop(n);
		}
		return NODE_ROSTER_LEAVE;
	}
	if (fresh->v[self].block != n->cfg.block) {
		log_warnx("SIGHUP: the new peer list puts %s on block %d, this "
		    "daemon trains block %d (a daemon cannot change block); "
		    "keeping the old list", fresh->v[self].addr,
		    fresh->v[self].block, n->cfg.block);
		return NODE_ROSTER_REFUSE;
	}
	replicas = peers_replicas(fresh, n->cfg.block);
	if (replicas > ROUNDS_MAX_REPLICAS) {
		log_warnx("SIGHUP: the new peer list gives block %d %d replicas, "
		    "at most %d are supported; keeping the old list",
		    n->cfg.block, replicas, ROUNDS_MAX_REPLICAS);
		return NODE_ROSTER_REFUSE;
	}
	if (replicas > 1 && n->spec.steps % n->spec.local_steps != 0) {
		log_warnx("SIGHUP: the new peer list gives block %d %d replicas, "
		    "but [optim] steps (%d) is not a multiple of [sync] "
		    "local_steps (%d); keeping the old list", n->cfg.block,
		    replicas, n->spec.steps, n->spec.local_steps);
		return NODE_ROSTER_REFUSE;
	}
	return NODE_ROSTER_TAKE;
}

/* "a, b" of the addresses of a that b lacks, into out. */
static void
missing_from(char (*a)[CF_HOST_LEN + 8], int na, char (*b)[CF_HOST_LEN + 8],
    int nb, char *out, size_t len)
{
	size_t used = 0;
	int i;

	snprintf(out, len, "%s", "none");
	for (i = 0; i < na && used < len; i++) {
		if (listed(b, nb, a[i]))
			continue;
		used += (size_t)snprintf(out + used, len - used, "%s%s",
		    used ? ", " : "", a[i]);
	}
}

void
node_roster_changed(node *n)
{
	char (*v)[CF_HOST_LEN + 8];
	char joining[512], leaving[512];
	int k;

	if (n->soma || n->training.leaving || same_roster(n, &n->peers))
		return;
	if ((k = roster_from(&n->peers, n->cfg.block, &v)) < 0)
		return;
	missing_from(v, k, n->training.roster, n->training.roster_n, joining,
	    sizeof(joining));
	missing_from(n->training.roster, n->training.roster_n, v, k, leaving,
	    sizeof(leaving));
	free(v);
	if (!training_on(n)) {
		/* nothing left to average: the list is only followed */
		log_info("SIGHUP: block %d now has %d replica(s) (joining: %s; "
		    "leaving: %s); training is over here", n->cfg.block, k,
		    joining, leaving);
		node_roster_init(n, (char[KN_ERR_LEN]){ 0 });
		n->replica = peers_replica_index(&n->peers, n->self);
		n->replicas = k;
		return;
	}
	log_info("SIGHUP: block %d goes from %d to %d replica(s) (joining: %s; "
	    "leaving: %s) at the next round boundary", n->cfg.block,
	    n->training.roster_n, k, joining, leaving);
	node_journal(n, "roster change asked: %d -> %d replicas, joining %s, "
	    "leaving %s", n->training.roster_n, k, joining, leaving);
	if (n->training.reshape == 0) {
		n->training.reshape = 1;
		wk_stop_at_round(n->training.worker);
	}
}

static void
note_change(node *n, int joined, const char *addr)
{
	struct node_roster_change *c = &n->report.roster_changes[
	    n->report.roster_changes_n % NODE_ROSTER_CHANGES];
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	c->at = (double)t.tv_sec + (double)t.tv_nsec / 1e9;
	c->step = n->ckpt.step;
	c->round = n->ckpt.round;
	c->joined = joined;
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	n->report.roster_changes_n++;
	log_info("block %d: %s %s at step %" PRId64 " (round %" PRId64 ")",
	    n->cfg.block, addr, joined ? "joined" : "left", c->step, c->round);
	node_journal(n, "roster: %s %s at step %" PRId64 " round %" PRId64,
	    addr, joined ? "joined" : "left", c->step, c->round);
}

/* The old engine is gone: the new one starts from the checkpoint the old
 * one wrote at the round boundary. */
static void
on_engine_closed(void *arg)
{
	node *n = arg;
	char (*old)[CF_HOST_LEN + 8] = n->training.roster;
	char err[KN_ERR_LEN];
	int i, nold = n->training.roster_n;

	if (n->stopping)
		return;
	n->training.roster = NULL;
	if (node_roster_init(n, err) != 0) {
		n->training.roster = old;
		node__fail(n, err);
		return;
	}
	for (i = 0; i < n->training.roster_n; i++)
		if (!listed(old, nold, n->training.roster[i]))
			note_change(n, 1, n->training.roster[i]);
	for (i = 0; i < nold; i++)
		if (!listed(n->training.roster, n->training.roster_n, old[i]))
			note_change(n, 0, old[i]);
	free(old);
	n->replica = peers_replica_index(&n->peers, n->self);
	n->replicas = n->training.roster_n;
	n->overlap = n->replicas > 1 &&
	    strcmp(n->cfg.overlap_rounds, "yes") == 0;
	n->training.reshape = 0;
	n->training.worker_done = 0;
	log_info("block %d: replica %d of %d from step %" PRId64 " (round %"
	    PRId64 "), the roster's change in effect", n->cfg.block, n->replica,
	    n->replicas, n->ckpt.step, n->ckpt.round);
	if (node__start_rounds(n, err) != 0 ||
	    node__start_worker(n, err) != 0)
		node__fail(n, err);
}

int
node_roster_stopped(node *n)
{
	if (n->training.reshape != 1 || n->stopping || n->training.leaving)
		return 0;
	n->training.reshape = 2;
	n->training.in_round = 0;
	n->report.state = "starting";
	rounds_free(n->training.rounds);
	n->training.rounds = NULL;
	wk_close(n->training.worker, on_engine_closed, n);
	n->training.worker = NULL;
	return 1;
}
