/* The other hosts of each block of a serving ring (shardmeter plan
 * --serve-replicas): where a frame is re-sent when the block's ring host
 * is down.  search.c calls it for each ring it ranks;
 * tests/check_plan_loss.c checks its choice against every other. */
#ifndef PN_RING_HOSTS_H
#define PN_RING_HOSTS_H

#include "plan/cost.h"

/* Gives each block of c's ring n - 1 other hosts (any it had are
 * dropped first), p being pn_predict's for c without them.  With
 * from_replicas, the block's training replicas that serve fastest in
 * its ring host's place; else, of hosts[0 .. nhosts - 1], those not in
 * the ring that hold the block's weights (pn_serve_bytes), one round
 * per further host of a block, each round a bottleneck assignment: the
 * slowest traversal with a ring host lost (the block's first other host
 * taking its frames) as fast as any choice makes it.  *evaluated counts
 * the losses predicted.  0, or -1 when the hosts cannot give every
 * block as many (c then has none). */
int pn_ring_hosts(const topo_topology *t, const pr_spec *s,
    const pn_prediction *p, pn_candidate *c, int n, int from_replicas,
    const int *hosts, int nhosts, double *evaluated);

#endif
