/* The candidates of shardmeter plan and how they are found.  Training:
 * for every set of options the daemon can run (replicas per block R, H,
 * encoding, zstd, streams, overlap), the placement of T x R replicas on
 * the hosts that minimises the time to the run's positions.  Up to
 * exhaustive_limit placements per set are all tried; beyond, a greedy
 * start (fastest hosts first, each block's replicas on the links that
 * carry its update fastest) is improved by swapping any two hosts
 * (used or not) while that helps: a local optimum, in O(passes x N x TR)
 * predictions per set. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "plan/ring_hosts.h"
#include "plan/search.h"

/* Local search passes at most: each pass tries every swap once. */
#define MAX_PASSES 64
/* Rings as fast as the last of the table's that the search still gives
 * other hosts, at most: their worst loss ranks them. */
#define MAX_TIED 256

struct ctx {
	const topo_topology *t;
	const pr_spec *s;
	const pn_model *m;
	const pn_options *o;
	int usable[PN_MAX_HOSTS];       /* hosts that can hold a block */
	int nusable;
	double evaluated;
	int skipped;                    /* rings without hosts to spare */
	int total_layers;               /* the spec's, which splits share */
	/* pn_train_bytes(s, L) = bytes0 + L * bytes_per_layer */
	double bytes0, bytes_per_layer;
};

void
pn_options_defaults(pn_options *o)
{
	memset(o, 0, sizeof(*o));
	o->goal = PN_GOAL_TRAIN;
	/* what a replica learns from a shorter share is not predicted, so
	 * by default no plan trades it for speed */
	o->same_steps = 1;
	o->max_streams = 1;
	o->exhaustive_limit = 20000;
	o->tie = 0.01;
	o->split = 1;
}

double
pn_serve_bytes(const pr_spec *s, int layers)
{
	return 4.0 * (double)pn_block_params(s, layers);
}

double
pn_train_bytes(const pr_spec *s, int layers)
{
	return 16.0 * (double)pn_block_params(s, layers);
}

int
pn_steps_for(const pr_spec *s, int R, int H, int same_steps)
{
	long long base = (long long)s->steps * s->replicas;
	long long steps = same_steps ? s->steps : (base + R - 1) / R;

	if (R > 1)
		steps = (steps + H - 1) / H * H;
	return steps > (1 << 30) ? (1 << 30) : (int)steps;
}

static void
base_candidate(const pr_spec *s, pn_candidate *c)
{
	int b;

	memset(c, 0, sizeof(*c));
	c->blocks = s->blocks;
	for (b = 0; b < PR_MAX_BLOCKS; b++) {
		c->layers[b] = b < s->blocks ? pr_spec_layers(s, b) : 0;
		c->ring[b] = -1;
	}
	c->local_steps = s->local_steps;
	c->enc = PR_ENC_F32;
	c->streams = 1;
	c->steps = pn_steps_for(s, 1, s->local_steps, 0);
}

/* The fewest layers of a block: the split's floor, one layer, or the
 * spec's smallest block when the split is kept. */
static int
min_layers(const pr_spec *s, int split)
{
	int b, min = 1024;

	for (b = 0; b < s->blocks; b++)
		if (pr_spec_layers(s, b) < min)
			min = pr_spec_layers(s, b);
	return split ? 1 : min;
}

static int
check_hostable(const topo_topology *t, const pr_spec *s, int usable,
    int split, char *err)
{
	if (pr_spec_method(s) != PR_METHOD_BLOCKTRAIN)
		return kn_error(err, KN_EINVAL, "plan covers BlockTrain runs; "
		    "this spec is method = %s", s->method);
	if (s->blocks > t->nhosts)
		return kn_error(err, KN_EINVAL, "the spec has %d blocks but the "
		    "topology only %d hosts: every block needs a host of its "
		    "own", s->blocks, t->nhosts);
	if (s->blocks > usable)
		return kn_error(err, KN_EINVAL, "the spec has %d blocks but only "
		    "%d hosts have the memory to train one (at least %.3g "
		    "bytes each)", s->blocks, usable,
		    pn_train_bytes(s, min_layers(s, split)));
	return KN_OK;
}

int
pn_default_candidate(const topo_topology *t, const pr_spec *s, pn_candidate *c,
    char *err)
{
	int b, rc;

	if ((rc = check_hostable(t, s, t->nhosts, 0, err)) != 0)
		return rc;
	base_candidate(s, c);
	for (b = 0; b < s->blocks; b++) {
		c->nrep[b] = 1;
		c->host[b][0] = b;
		c->ring[b] = b;
	}
	return KN_OK;
}

/* Options changed from the default, for the first choice among near
 * ties: each may cost quality or needs more of the daemon. */
static int
simplicity(const pr_spec *s, const pn_candidate *c)
{
	int b, resized = 0;

	for (b = 0; b < c->blocks; b++)
		resized |= c->layers[b] != pr_spec_layers(s, b);
	return (c->nrep[0] > 1) + (c->nrep[0] > 1 &&
	    c->local_steps != s->local_steps) + (c->enc != PR_ENC_F32) +
	    (c->enc == PR_ENC_INT8) + c->zstd + (c->streams > 1) +
	    c->overlap + resized;
}

/* The most layers block b's hosts have the memory to train, or 0. */
static int
layers_cap(struct ctx *x, const pn_candidate *c, int b)
{
	double mem = INFINITY, L;
	int r;

	for (r = 0; r < c->nrep[b]; r++)
		mem = fmin(mem, x->t->hosts[c->host[b][r]].memory_bytes);
	L = floor((mem - x->bytes0) / x->bytes_per_layer);
	return L < 0 ? 0 : L > 1024 ? 1024 : (int)L;
}

/* Block b's time to its steps with one layer more than it has, or
 * INFINITY past what its hosts can hold. */
static double
time_with_one_more(struct ctx *x, pn_candidate *c, int b, int cap)
{
	pn_block_pred bp;

	if (c->layers[b] >= cap)
		return INFINITY;
	c->layers[b]++;
	pn_predict_block(x->t, x->s, x->m, c, b, &bp);
	c->layers[b]--;
	return bp.train_s;
}

/* The split of the spec's layers over c's blocks that minimises the
 * slowest block's time, for c's placement and options: from one layer
 * each, every further layer goes where it adds least to that block's
 * time.  Each block's time grows with its layers, so this greedy order
 * reaches the smallest maximum.  Equal hosts get equal blocks.  0, or
 * -1 when the hosts cannot hold the layers. */
static int
split_layers(struct ctx *x, pn_candidate *c)
{
	double next[PR_MAX_BLOCKS];
	int cap[PR_MAX_BLOCKS], b, left = x->total_layers - c->blocks;

	for (b = 0; b < c->blocks; b++) {
		c->layers[b] = 1;
		if ((cap[b] = layers_cap(x, c, b)) < 1)
			return -1;
	}
	for (b = 0; b < c->blocks; b++)
		next[b] = time_with_one_more(x, c, b, cap[b]);
	for (; left > 0; left--) {
		int best = 0;

		for (b = 1; b < c->blocks; b++)
			if (next[b] < next[best])
				best = b;
		if (next[best] == INFINITY)
			return -1;
		c->layers[best]++;
		next[best] = time_with_one_more(x, c, best, cap[best]);
	}
	x->evaluated++;
	return 0;
}

/* Time to the run's positions, and a little of every block's own time,
 * so that blocks off the critical path are placed well too. */
static double
objective(struct ctx *x, const pn_candidate *c, pn_prediction *p)
{
	double sum = 0;
	int b;

	x->evaluated++;
	if (pn_predict(x->t, x->s, x->m, c, p, NULL) != 0)
		return INFINITY;
	for (b = 0; b < c->blocks; b++)
		sum += p->block[b].train_s;
	return p->train_s + 1e-6 * sum;
}

static void
slots_to_candidate(const int *slot, int T, int R, pn_candidate *c)
{
	int b, r;

	for (b = 0; b < T; b++) {
		c->nrep[b] = R;
		for (r = 0; r < R; r++)
			c->host[b][r] = slot[b * R + r];
	}
}

/* A training placement with its split of the layers, when the search
 * splits them; -1 when its hosts cannot hold them. */
static int
train_candidate(struct ctx *x, const int *slot, int T, int R, pn_candidate *c)
{
	int b;

	slots_to_candidate(slot, T, R, c);
	if (x->o->split)
		return split_layers(x, c);
	for (b = 0; b < T; b++)
		if (layers_cap(x, c, b) < c->layers[b])
			return -1;
	return 0;
}

static double
slots_value(struct ctx *x, const int *slot, int T, int R, pn_candidate *c)
{
	pn_prediction p;

	if (train_candidate(x, slot, T, R, c) != 0)
		return INFINITY;
	return objective(x, c, &p);
}

/* Placements of T blocks of R replicas on n hosts, replicas unordered. */
static double
placements(int n, int T, int R)
{
	double count = 1;
	int i, k;

	for (i = 0; i < T * R; i++)
		count *= n - i;
	for (k = 0; k < T; k++)
		for (i = 2; i <= R; i++)
			count /= i;
	return count;
}

struct enumerate {
	struct ctx *x;
	pn_candidate *c;
	int T, R, nslots;
	int slot[PN_MAX_HOSTS];
	unsigned char used[PN_MAX_HOSTS];
	int best[PN_MAX_HOSTS];
	double best_value;
};

/* Every placement: a block's replicas in increasing host order, so
 * replica 0, the coordinator, is the block's first host in the list. */
static void
enumerate(struct enumerate *e, int k)
{
	int i, lo = 0;

	if (k == e->T * e->R) {
		double v = slots_value(e->x, e->slot, e->T, e->R, e->c);

		if (v < e->best_value) {
			e->best_value = v;
			memcpy(e->best, e->slot, sizeof(int) * k);
		}
		return;
	}
	if (k % e->R != 0)
		lo = e->slot[k - 1] + 1;
	for (i = lo; i < e->x->t->nhosts; i++) {
		if (e->used[i])
			continue;
		e->used[i] = 1;
		e->slot[k] = i;
		enumerate(e, k + 1);
		e->used[i] = 0;
	}
}

/* The hosts by training rate, fastest first (list order among equals). */
static void
by_speed(struct ctx *x, int *order)
{
	int i, j;

	memcpy(order, x->usable, sizeof(int) * x->nusable);
	for (i = 1; i < x->nusable; i++)
		for (j = i; j > 0 && x->t->hosts[order[j]].train_positions_per_s >
		    x->t->hosts[order[j - 1]].train_positions_per_s; j--) {
			int tmp = order[j];

			order[j] = order[j - 1];
			order[j - 1] = tmp;
		}
}

/* Seconds for an update from a to b and back the other way. */
static double
pair_cost(struct ctx *x, const pn_candidate *c, int a, int b, double U)
{
	const topo_link *ab = topo_link_at(x->t, a, b);
	const topo_link *ba = topo_link_at(x->t, b, a);

	return fmax(ab->rtt_ms / 2000 + U / pn_link_rate(ab, c->streams),
	    ba->rtt_ms / 2000 + U / pn_link_rate(ba, c->streams));
}

/* Greedy start: each block seeded with the fastest free host, its other
 * replicas the free hosts whose links to the seed are quickest. */
static void
greedy(struct ctx *x, const pn_candidate *c, int T, int R, int *slot)
{
	unsigned char taken[PN_MAX_HOSTS] = { 0 };
	int order[PN_MAX_HOSTS], b, r, i, k = 0;
	double U;

	by_speed(x, order);
	for (b = 0; b < T; b++) {
		int seed = -1;

		U = pn_update_bytes(x->m, pn_block_params(x->s, c->layers[b]),
		    c->enc, c->zstd);

		for (i = 0; i < x->nusable && seed < 0; i++)
			if (!taken[order[i]])
				seed = order[i];
		taken[seed] = 1;
		slot[k++] = seed;
		for (r = 1; r < R; r++) {
			int best = -1;
			double best_cost = INFINITY;

			for (i = 0; i < x->nusable; i++) {
				int h = order[i];
				double cost;

				if (taken[h])
					continue;
				cost = pair_cost(x, c, seed, h, U);
				if (cost < best_cost) {
					best_cost = cost;
					best = h;
				}
			}
			taken[best] = 1;
			slot[k++] = best;
		}
	}
	for (i = 0; i < x->nusable; i++)
		if (!taken[order[i]])
			slot[k++] = order[i];
}

/* Swaps of two slots (the first T x R are placed, the rest idle) while
 * one helps.  Returns the value reached. */
static double
swap_search(struct ctx *x, pn_candidate *c, int T, int R, int *slot)
{
	int used = T * R, pass, i, j, improved = 1;
	double best = slots_value(x, slot, T, R, c);

	for (pass = 0; pass < MAX_PASSES && improved; pass++) {
		improved = 0;
		for (i = 0; i < used; i++)
			for (j = i + 1; j < x->nusable; j++) {
				double v;
				int tmp = slot[i];

				if (j < used && j / R == i / R && i % R != 0)
					continue;       /* same block: only the
					                 * coordinator matters */
				slot[i] = slot[j];
				slot[j] = tmp;
				v = slots_value(x, slot, T, R, c);
				if (v < best * (1 - 1e-12)) {
					best = v;
					improved = 1;
				} else {
					slot[j] = slot[i];
					slot[i] = tmp;
				}
			}
	}
	return best;
}

/* The best placement of T x R replicas for c's options, into c. */
static void
place(struct ctx *x, pn_candidate *c, int R, int *warm, int *have_warm,
    int *exhaustive)
{
	int T = c->blocks, slot[PN_MAX_HOSTS], i;
	double v, w;

	if (placements(x->nusable, T, R) <= x->o->exhaustive_limit) {
		struct enumerate *e = calloc(1, sizeof(*e));

		if (e == NULL)
			abort();        /* a few KiB: nothing to recover */
		e->x = x;
		e->c = c;
		e->T = T;
		e->R = R;
		e->best_value = INFINITY;
		/* hosts too small for a block are marked used up front */
		memset(e->used, 1, sizeof(e->used));
		for (i = 0; i < x->nusable; i++)
			e->used[x->usable[i]] = 0;
		enumerate(e, 0);
		(void)train_candidate(x, e->best, T, R, c);
		free(e);
		return;
	}
	*exhaustive = 0;
	greedy(x, c, T, R, slot);
	v = swap_search(x, c, T, R, slot);
	if (*have_warm) {
		w = swap_search(x, c, T, R, warm);
		if (w < v)
			memcpy(slot, warm, sizeof(int) * x->nusable);
	}
	memcpy(warm, slot, sizeof(int) * x->nusable);
	*have_warm = 1;
	(void)train_candidate(x, slot, T, R, c);
}

/* The serving ring among c's replicas: each block's host, one block at a
 * time, while the traversal gets faster. */
static void
choose_ring(struct ctx *x, pn_candidate *c)
{
	pn_prediction p;
	int b, r, pass, improved = 1;
	double best;

	for (b = 0; b < c->blocks; b++)
		c->ring[b] = c->host[b][0];
	pn_predict(x->t, x->s, x->m, c, &p, NULL);
	best = p.bt.latency_s;
	for (pass = 0; pass < 4 && improved; pass++) {
		improved = 0;
		for (b = 0; b < c->blocks; b++)
			for (r = 0; r < c->nrep[b]; r++) {
				int old = c->ring[b];

				c->ring[b] = c->host[b][r];
				if (pn_predict(x->t, x->s, x->m, c, &p,
				    NULL) == 0 && p.bt.latency_s < best *
				    (1 - 1e-12)) {
					best = p.bt.latency_s;
					improved = 1;
				} else {
					c->ring[b] = old;
				}
			}
	}
}

/* Gives c's ring its other hosts (--serve-replicas).  0, or -1 when
 * the hosts cannot give every block as many. */
static int
choose_alternates(struct ctx *x, pn_candidate *c)
{
	int N = x->o->serve_replicas;
	pn_prediction *p;
	int rc = -1;

	memset(c->nalt, 0, sizeof(c->nalt));
	memset(c->alt, 0, sizeof(c->alt));
	if (N <= 1)
		return 0;
	if ((p = malloc(sizeof(*p))) == NULL)
		return -1;
	if (pn_predict(x->t, x->s, x->m, c, p, NULL) == 0)
		rc = pn_ring_hosts(x->t, x->s, p, c, N, x->o->goal ==
		    PN_GOAL_BOTH, x->usable, x->nusable, &x->evaluated);
	free(p);
	return rc;
}

struct results {
	pn_result *v;
	int n, cap;
};

/* Adds c to the results, with its ring and the ring's other hosts for
 * a serving goal; a ring the hosts cannot give its other hosts is left
 * out (counted in x->skipped). */
static int
add_result(struct ctx *x, struct results *rs, const pn_candidate *given,
    char *err)
{
	pn_candidate c_copy = *given, *c = &c_copy;
	pn_result *r;
	int rc;

	if (x->o->goal != PN_GOAL_TRAIN && c->ring[0] < 0)
		choose_ring(x, c);
	if (x->o->goal != PN_GOAL_TRAIN && choose_alternates(x, c) != 0) {
		x->skipped++;
		return KN_OK;
	}
	if (rs->n == rs->cap) {
		int cap = rs->cap ? 2 * rs->cap : 64;
		pn_result *v = realloc(rs->v, (size_t)cap * sizeof(*v));

		if (v == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		rs->v = v;
		rs->cap = cap;
	}
	r = &rs->v[rs->n];
	r->c = *c;
	if ((rc = pn_predict(x->t, x->s, x->m, c, &r->p, err)) != 0)
		return rc;
	pn_predict_train_loss(x->t, x->s, x->m, c, &r->p);
	r->score = x->o->goal == PN_GOAL_SERVE ? r->p.bt.latency_s :
	    r->p.train_s;
	r->simplicity = simplicity(x->s, c);
	rs->n++;
	return KN_OK;
}

/* Training: one best placement per option set. */
static int
search_train(struct ctx *x, struct results *rs, pn_plan *plan, char *err)
{
	const pn_options *o = x->o;
	const pr_spec *s = x->s;
	int T = s->blocks, R, Rmax = x->nusable / T, hs[PN_MAX_H], nh, i;
	int rc, warm[PN_MAX_HOSTS], have_warm;
	/* --goal both serves from the training replicas */
	int Rmin = o->goal == PN_GOAL_BOTH && o->serve_replicas > 1 ?
	    o->serve_replicas : 1;

	if (o->max_replicas > 0 && Rmax > o->max_replicas)
		Rmax = o->max_replicas;
	if (Rmax > PN_MAX_REPLICAS)
		Rmax = PN_MAX_REPLICAS;
	if ((o->replicas > 0 ? o->replicas : Rmax) < Rmin)
		return kn_error(err, KN_EINVAL, "%d serving hosts per block "
		    "need as many training replicas with --goal both; %s %d",
		    Rmin, o->replicas > 0 ? "--replicas gives" : "the hosts "
		    "allow at most", o->replicas > 0 ? o->replicas : Rmax);
	if (o->nh > 0) {
		nh = o->nh;
		memcpy(hs, o->h, sizeof(int) * nh);
	} else {
		int cand[4] = { s->local_steps / 2, s->local_steps,
		    2 * s->local_steps, 4 * s->local_steps };

		for (i = nh = 0; i < 4; i++)
			if (cand[i] >= 1 && (nh == 0 || hs[nh - 1] != cand[i]))
				hs[nh++] = cand[i];
	}
	for (R = o->replicas > 0 ? o->replicas : Rmin;
	    R <= (o->replicas > 0 ? o->replicas : Rmax); R++) {
		int ih, enc, z, st, ov;

		if (T * R > x->nusable)
			return kn_error(err, KN_EINVAL, "%d blocks of %d replicas "
			    "need %d hosts; the topology has %d that can "
			    "train a block", T, R, T * R, x->nusable);
		plan->placements = fmax(plan->placements,
		    placements(x->nusable, T, R));
		have_warm = 0;
		for (ih = 0; ih < (R > 1 ? nh : 1); ih++)
		for (enc = 0; enc < (R > 1 ? PN_ENCS : 1); enc++)
		for (z = 0; z <= (R > 1 && o->zstd &&
		    x->m->zstd_ratio[enc] < 1); z++)
		for (st = 1; st <= (R > 1 ? o->max_streams : 1);
		    st = st < o->max_streams ? o->max_streams : st + 1)
		for (ov = 0; ov <= (R > 1 && o->overlap); ov++) {
			pn_candidate c;

			/* bf16 moves the bytes of f16 and keeps f32's range */
			if (enc == PR_ENC_F16 ||
			    (enc == PR_ENC_INT8 && !o->int8))
				continue;
			base_candidate(s, &c);
			if (R > 1)
				c.local_steps = hs[ih];
			c.steps = pn_steps_for(s, R, c.local_steps,
			    o->same_steps);
			c.enc = (pr_encoding)enc;
			c.zstd = z;
			c.streams = st;
			c.overlap = ov;
			place(x, &c, R, warm, &have_warm, &plan->exhaustive);
			if ((rc = add_result(x, rs, &c, err)) != 0)
				return rc;
		}
	}
	return KN_OK;
}

/* Serving: the host of each block, one block per host, best rings
 * first.  Rings are few enough to try all up to exhaustive_limit; else
 * the fastest hosts and swaps. */
struct ring {
	double latency;
	int host[PR_MAX_BLOCKS];
};

static int
by_latency(const void *a, const void *b)
{
	const struct ring *x = a, *y = b;

	return x->latency < y->latency ? -1 : x->latency > y->latency;
}

/* Every ordered choice of T hosts, by odometer; the top best become
 * results. */
static int
serve_all(struct ctx *x, struct results *rs, pn_candidate *c, int top,
    char *err)
{
	int T = x->s->blocks, idx[PR_MAX_BLOCKS] = { 0 }, b, k, n = 0, rc = 0;
	int added, before;
	double last = INFINITY;
	size_t cap = (size_t)x->o->exhaustive_limit + 1;
	struct ring *all = malloc(cap * sizeof(*all));
	pn_prediction p;

	if (all == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (;;) {
		unsigned char seen[PN_MAX_HOSTS] = { 0 };
		int ok = 1;

		for (b = 0; b < T && ok; b++) {
			ok = !seen[x->usable[idx[b]]];
			seen[x->usable[idx[b]]] = 1;
			c->host[b][0] = c->ring[b] = x->usable[idx[b]];
		}
		if (ok && (size_t)n < cap && pn_predict(x->t, x->s, x->m, c, &p,
		    NULL) == 0) {
			x->evaluated++;
			all[n].latency = p.bt.latency_s;
			memcpy(all[n++].host, c->ring, sizeof(int) * T);
		}
		for (k = 0; k < T && ++idx[k] == x->nusable; k++)
			idx[k] = 0;
		if (k == T)
			break;
	}
	qsort(all, (size_t)n, sizeof(*all), by_latency);
	/* a ring without hosts to spare for its blocks adds no row; with
	 * other hosts, rings as fast as the last row are rows too (up to
	 * MAX_TIED more), so that of equal rings the one that loses a host
	 * best ranks first */
	for (k = 0, added = rs->n; k < n && rc == 0; k++) {
		if (rs->n - added >= top && !(x->o->serve_replicas > 1 &&
		    rs->n - added < top + MAX_TIED &&
		    all[k].latency <= last * (1 + 1e-12)))
			break;
		for (b = 0; b < T; b++)
			c->host[b][0] = c->ring[b] = all[k].host[b];
		before = rs->n;
		rc = add_result(x, rs, c, err);
		if (rs->n > before)
			last = all[k].latency;
	}
	free(all);
	return rc;
}

static int
search_serve(struct ctx *x, struct results *rs, pn_plan *plan, int top,
    char *err)
{
	int T = x->s->blocks, slot[PN_MAX_HOSTS], b, rc;
	int N = x->o->serve_replicas > 1 ? x->o->serve_replicas : 1;
	pn_candidate c;

	if (T * N > x->nusable)
		return kn_error(err, KN_EINVAL, "%d blocks of %d serving hosts "
		    "need %d hosts; the topology has %d that can hold a block",
		    T, N, T * N, x->nusable);
	plan->placements = placements(x->nusable, T, 1);
	base_candidate(x->s, &c);
	for (b = 0; b < T; b++)
		c.nrep[b] = 1;
	if (plan->placements <= x->o->exhaustive_limit)
		return serve_all(x, rs, &c, top, err);
	plan->exhaustive = 0;
	/* the fastest forward hosts, improved by swaps on the latency */
	for (b = 0; b < x->nusable; b++)
		slot[b] = x->usable[b];
	for (b = 1; b < x->nusable; b++) {
		int j;

		for (j = b; j > 0 && x->t->hosts[slot[j]].forward_positions_per_s >
		    x->t->hosts[slot[j - 1]].forward_positions_per_s; j--) {
			int tmp = slot[j];

			slot[j] = slot[j - 1];
			slot[j - 1] = tmp;
		}
	}
	{
		int i, j, pass, improved = 1;
		pn_prediction p;
		double best;

		slots_to_candidate(slot, T, 1, &c);
		memcpy(c.ring, slot, sizeof(int) * T);
		pn_predict(x->t, x->s, x->m, &c, &p, NULL);
		best = p.bt.latency_s;
		for (pass = 0; pass < MAX_PASSES && improved; pass++) {
			improved = 0;
			for (i = 0; i < T; i++)
				for (j = i + 1; j < x->nusable; j++) {
					int tmp = slot[i];

					slot[i] = slot[j];
					slot[j] = tmp;
					slots_to_candidate(slot, T, 1, &c);
					memcpy(c.ring, slot, sizeof(int) * T);
					x->evaluated++;
					if (pn_predict(x->t, x->s, x->m, &c, &p,
					    NULL) == 0 && p.bt.latency_s <
					    best * (1 - 1e-12)) {
						best = p.bt.latency_s;
						improved = 1;
						if ((rc = add_result(x, rs, &c,
						    err)) != 0)
							return rc;
					} else {
						slot[j] = slot[i];
						slot[i] = tmp;
					}
				}
		}
		slots_to_candidate(slot, T, 1, &c);
		memcpy(c.ring, slot, sizeof(int) * T);
		return add_result(x, rs, &c, err);
	}
}

/* A ring's traversal with its worst host lost; a ring that fails then,
 * or no ring, is the worst. */
static double
loss_key(const pn_result *r)
{
	return !r->p.serve || r->p.serve_lost.fails ? INFINITY :
	    r->p.serve_lost.latency_s;
}

/* By score, then simplicity, then the ring's worst host lost. */
static int
by_score(const void *a, const void *b)
{
	const pn_result *x = a, *y = b;
	double lx = loss_key(x), ly = loss_key(y);

	if (x->score != y->score)
		return x->score < y->score ? -1 : 1;
	if (x->simplicity != y->simplicity)
		return x->simplicity - y->simplicity;
	return lx < ly ? -1 : lx > ly;
}

/* Drops rows that repeat an earlier one's candidate. */
static int
same_candidate(const pn_candidate *a, const pn_candidate *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

int
pn_search(const topo_topology *t, const pr_spec *s, const pn_model *m,
    const pn_options *o, int top, pn_plan *plan, char *err)
{
	struct ctx x = { t, s, m, o, { 0 }, 0, 0, 0, pr_spec_total_layers(s), 0,
	    0 };
	int split = o->split && o->goal != PN_GOAL_SERVE;
	struct results rs = { NULL, 0, 0 };
	int i, n, rc;

	memset(plan, 0, sizeof(*plan));
	plan->exhaustive = 1;
	if (o->serve_replicas > PN_MAX_SERVE)
		return kn_error(err, KN_EINVAL, "at most %d serving hosts per "
		    "block, not %d", PN_MAX_SERVE, o->serve_replicas);
	if (o->serve_replicas > 1 && o->goal == PN_GOAL_TRAIN)
		return kn_error(err, KN_EINVAL, "serving hosts per block need a "
		    "serving goal (serve or both)");
	x.bytes_per_layer = pn_train_bytes(s, 2) - pn_train_bytes(s, 1);
	x.bytes0 = pn_train_bytes(s, 1) - x.bytes_per_layer;
	for (i = 0; i < t->nhosts; i++)
		if (t->hosts[i].memory_bytes >= pn_train_bytes(s,
		    min_layers(s, split)))
			x.usable[x.nusable++] = i;
	if ((rc = check_hostable(t, s, x.nusable, split, err)) != 0 ||
	    (rc = pn_default_candidate(t, s, &plan->def.c, err)) != 0)
		return rc;
	if (o->same_steps)
		plan->def.c.steps = pn_steps_for(s, 1, s->local_steps, 1);
	if ((rc = pn_predict(t, s, m, &plan->def.c, &plan->def.p, err)) != 0)
		return rc;
	pn_predict_train_loss(t, s, m, &plan->def.c, &plan->def.p);
	plan->def.score = o->goal == PN_GOAL_SERVE ? plan->def.p.bt.latency_s :
	    plan->def.p.train_s;
	rc = o->goal == PN_GOAL_SERVE ? search_serve(&x, &rs, plan, top, err) :
	    search_train(&x, &rs, plan, err);
	if (rc == 0 && rs.n == 0)
		rc = kn_error(err, KN_EINVAL, "no candidate gives every block "
		    "%d serving hosts: %d ring(s) left too few hosts free with "
		    "the memory for a block's weights (at least %.3g bytes)",
		    o->serve_replicas, x.skipped, pn_serve_bytes(s,
		    min_layers(s, 0)));
	if (rc != 0) {
		free(rs.v);
		return rc;
	}
	qsort(rs.v, (size_t)rs.n, sizeof(*rs.v), by_score);
	for (i = n = 0; i < rs.n; i++)
		if (n == 0 || !same_candidate(&rs.v[n - 1].c, &rs.v[i].c))
			rs.v[n++] = rs.v[i];
	plan->chosen = 0;
	for (i = 1; i < n; i++)
		if (rs.v[i].score <= rs.v[0].score * (1 + o->tie) &&
		    rs.v[i].simplicity < rs.v[plan->chosen].simplicity)
			plan->chosen = i;
	plan->v = rs.v;
	plan->nall = n;
	plan->n = n < top ? n : top;
	plan->evaluated = x.evaluated;
	return KN_OK;
}

void
pn_plan_free(pn_plan *plan)
{
	free(plan->v);
	plan->v = NULL;
	plan->n = plan->nall = 0;
}
