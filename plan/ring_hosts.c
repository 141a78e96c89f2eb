/* The other hosts of each block of a serving ring.  A block's first
 * other host is the one a frame is re-sent to when its ring host is
 * down, so it alone decides that loss; the search over the free hosts
 * is thus one assignment of a host to every block per round, minimising
 * the worst block's loss (a bottleneck assignment: the smallest cost
 * under which Kuhn's matching still covers every block, found by
 * bisection over the costs), in O(T F) predicted losses and O(log(T F)
 * T^2 F) matching for F free hosts. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/ring_hosts.h"
#include "plan/search.h"

/* What the search is given: the topology, spec and prediction of the
 * ring, and a count of the losses predicted. */
struct ring_ctx {
	const topo_topology *t;
	const pr_spec *s;
	const pn_prediction *p;
	double *evaluated;
};

/* Seconds of one traversal of c's ring with block b's ring host lost
 * and h taking its frames. */
static double
loss_with(const struct ring_ctx *x, pn_candidate *c, int b, int h)
{
	pn_serve_loss l;
	int nalt = c->nalt[b], first = c->alt[b][0];

	c->nalt[b] = 1;
	c->alt[b][0] = h;
	pn_serve_loss_of(x->t, x->s, c, x->p, b, 0, &l);
	c->nalt[b] = nalt;
	c->alt[b][0] = first;
	(*x->evaluated)++;
	return l.latency_s;
}

/* Kuhn's augmenting path from block b among the pairs of cost at most
 * limit, hosts tried cheapest first (order[b]). */
static int
augment(int b, int F, const double *cost, const int *order, double limit,
    int *owner, unsigned char *seen)
{
	int i;

	for (i = 0; i < F; i++) {
		int f = order[(size_t)b * F + i];

		/* taken hosts cost INFINITY after the order was made */
		if (cost[(size_t)b * F + f] > limit || seen[f])
			continue;
		seen[f] = 1;
		if (owner[f] < 0 || augment(owner[f], F, cost, order, limit,
		    owner, seen)) {
			owner[f] = b;
			return 1;
		}
	}
	return 0;
}

/* Whether every block gets a host of cost at most limit; owner[f]: the
 * block host f goes to, -1: none. */
static int
match_all(int T, int F, const double *cost, const int *order, double limit,
    int *owner, unsigned char *seen)
{
	int b;

	for (b = 0; b < F; b++)
		owner[b] = -1;
	for (b = 0; b < T; b++) {
		memset(seen, 0, (size_t)F);
		if (!augment(b, F, cost, order, limit, owner, seen))
			return 0;
	}
	return 1;
}

struct priced {
	double cost;
	int f;
};

static int
by_cost(const void *a, const void *b)
{
	const struct priced *x = a, *y = b;

	return x->cost < y->cost ? -1 : x->cost > y->cost ? 1 : x->f - y->f;
}

static int
by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The ring's other hosts from the hosts it leaves free that hold the
 * block's weights, one round per further host of a block: each round
 * gives every block one host so that the slowest traversal with a ring
 * host lost (and that one taking its frames) is the fastest it can be,
 * a bottleneck assignment solved by matching under the smallest cost
 * that lets every block have one.  0, or -1 when the free hosts cannot
 * give every block its hosts. */
static int
from_free(const struct ring_ctx *x, pn_candidate *c, int N,
    const int *hosts, int nhosts)
{
	int T = c->blocks, F = 0, free_h[PN_MAX_HOSTS], b, f, j, k, rc = -1;
	unsigned char taken[PN_MAX_HOSTS] = { 0 }, *seen;
	double *cost, *sorted;
	int *order, *owner;
	struct priced *row;

	for (b = 0; b < T; b++)
		taken[c->ring[b]] = 1;
	for (f = 0; f < nhosts; f++)
		if (!taken[hosts[f]])
			free_h[F++] = hosts[f];
	if (F < T * (N - 1))
		return -1;
	cost = malloc((size_t)T * F * sizeof(*cost));
	sorted = malloc((size_t)T * F * sizeof(*sorted));
	order = malloc((size_t)T * F * sizeof(*order));
	owner = malloc((size_t)F * sizeof(*owner));
	seen = malloc((size_t)F);
	row = malloc((size_t)F * sizeof(*row));
	if (cost == NULL || sorted == NULL || order == NULL || owner == NULL ||
	    seen == NULL || row == NULL)
		goto out;
	for (b = 0; b < T; b++)
		for (f = 0; f < F; f++) {
			const topo_host *h = &x->t->hosts[free_h[f]];

			cost[(size_t)b * F + f] = h->memory_bytes <
			    pn_serve_bytes(x->s, c->layers[b]) ? INFINITY :
			    loss_with(x, c, b, free_h[f]);
		}
	for (b = 0; b < T; b++) {
		for (f = 0; f < F; f++)
			row[f] = (struct priced){ cost[(size_t)b * F + f], f };
		qsort(row, (size_t)F, sizeof(*row), by_cost);
		for (f = 0; f < F; f++)
			order[(size_t)b * F + f] = row[f].f;
	}
	for (k = 1; k < N; k++) {
		int n = 0, lo = 0, hi;

		for (f = 0; f < (int)((size_t)T * F); f++)
			if (cost[f] < INFINITY)
				sorted[n++] = cost[f];
		qsort(sorted, (size_t)n, sizeof(double), by_double);
		if (n == 0 || !match_all(T, F, cost, order, sorted[n - 1],
		    owner, seen))
			goto out;
		/* the smallest limit that still matches every block */
		hi = n - 1;
		while (lo < hi) {
			int mid = (lo + hi) / 2;

			if (match_all(T, F, cost, order, sorted[mid], owner,
			    seen))
				hi = mid;
			else
				lo = mid + 1;
		}
		match_all(T, F, cost, order, sorted[hi], owner, seen);
		for (f = 0; f < F; f++) {
			if (owner[f] < 0)
				continue;
			b = owner[f];
			c->alt[b][c->nalt[b]++] = free_h[f];
			/* taken: no block may have it again */
			for (j = 0; j < T; j++)
				cost[(size_t)j * F + f] = INFINITY;
		}
	}
	rc = 0;
out:
	free(cost);
	free(sorted);
	free(order);
	free(owner);
	free(seen);
	free(row);
	return rc;
}

/* Each block's other ring hosts among its training replicas, those
 * that serve fastest in its ring host's place first. */
static int
replicas_of_block(const struct ring_ctx *x, pn_candidate *c, int N)
{
	int b, r, k;

	for (b = 0; b < c->blocks; b++) {
		double cost[PN_MAX_REPLICAS];
		int order[PN_MAX_REPLICAS], n = 0;

		if (c->nrep[b] < N)
			return -1;
		for (r = 0; r < c->nrep[b]; r++)
			if (c->host[b][r] != c->ring[b]) {
				cost[n] = loss_with(x, c, b, c->host[b][r]);
				order[n++] = r;
			}
		/* by cost, replica order among equals (n < 64) */
		for (r = 1; r < n; r++)
			for (k = r; k > 0 && cost[k] < cost[k - 1]; k--) {
				double tc = cost[k];
				int to = order[k];

				cost[k] = cost[k - 1];
				order[k] = order[k - 1];
				cost[k - 1] = tc;
				order[k - 1] = to;
			}
		for (k = 0; k < N - 1; k++)
			c->alt[b][c->nalt[b]++] = c->host[b][order[k]];
	}
	return 0;
}

int
pn_ring_hosts(const topo_topology *t, const pr_spec *s,
    const pn_prediction *p, pn_candidate *c, int n, int from_replicas,
    const int *hosts, int nhosts, double *evaluated)
{
	struct ring_ctx x = { t, s, p, evaluated };
	int rc;

	memset(c->nalt, 0, sizeof(c->nalt));
	memset(c->alt, 0, sizeof(c->alt));
	if (n <= 1)
		return 0;
	rc = from_replicas ? replicas_of_block(&x, c, n) :
	    from_free(&x, c, n, hosts, nhosts);
	if (rc != 0) {
		memset(c->nalt, 0, sizeof(c->nalt));
		memset(c->alt, 0, sizeof(c->alt));
	}
	return rc;
}
