/* The planner with hosts lost: a serving ring of several hosts per block
 * (shardmeter plan --serve-replicas), the traversal re-routed around a
 * lost host against rings predicted without it, the search's choice of
 * each block's other hosts against every choice, the pipeline file of
 * such a ring, and the training replica whose loss hurts most.  No
 * daemons, no timings. */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/conf.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/error.h"
#include "plan/cost.h"
#include "plan/output.h"
#include "plan/search.h"
#include "proto/topology.h"
#include "tests/testutil.h"

#define TOL 1e-12

static void
spec_of(pr_spec *s, int blocks, int layers, int steps, int H)
{
	char text[512], err[PR_ERR_LEN];
	int n;

	n = snprintf(text, sizeof(text), "[model]\nblocks = %d\nwidth = 64\n"
	    "heads = 4\nlayers_per_block = %d\nwindow = 32\n[optim]\n"
	    "batch = 8\nsteps = %d\nwarmup = 10\n[sync]\nlocal_steps = %d\n",
	    blocks, layers, steps, H);
	ck_assert_msg(pr_spec_parse(s, text, (size_t)n, err) == 0, "%s", err);
}

/* n equal hosts of rate positions/s at the spec's shape, every link bw
 * bytes/s; the round trip between i and j (either way) 1 + ((3i + 3j +
 * ij) mod 11) ms, so that every hop costs its own. */
static void
topo_of(topo_topology *t, const pr_spec *s, int n, double rate, double bw)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);
	char err[KN_ERR_LEN];
	int i, j;

	ck_assert_msg(topo_init(t, n, err) == 0, "%s", err);
	t->shape = (topo_shape){ shape.width, shape.heads, shape.layers,
	    shape.window, s->batch };
	snprintf(t->measured_at, sizeof(t->measured_at), "by hand");
	for (i = 0; i < n; i++) {
		snprintf(t->hosts[i].name, sizeof(t->hosts[i].name), "h%d", i);
		snprintf(t->hosts[i].address, sizeof(t->hosts[i].address),
		    "127.0.0.1:%d", 7400 + i);
		t->hosts[i].memory_bytes = 1e12;
		t->hosts[i].train_positions_per_s = rate;
		t->hosts[i].forward_positions_per_s = 3 * rate;
	}
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++) {
			topo_link *l = topo_link_at(t, i, j);

			if (l == NULL)
				continue;
			l->rtt_ms = 1 + (3 * i + 3 * j + i * j) % 11;
			l->rtt_spread_ms = TOPO_UNKNOWN;
			l->stream_bytes_per_s = l->multi_bytes_per_s = bw;
			l->streams = 1;
		}
}

/* One hop of a frame from a to b, as PROTOCOL.md sizes the frame. */
static double
hop_s(const topo_topology *t, const pr_spec *s, int a, int b)
{
	const topo_link *l = topo_link_at(t, a, b);

	return (2.0 * s->window + PN_FRAME_BYTES) / l->stream_bytes_per_s +
	    l->rtt_ms / 2000;
}

static void
predict(const topo_topology *t, const pr_spec *s, const pn_candidate *c,
    pn_prediction *p)
{
	char err[KN_ERR_LEN];
	pn_model m;

	pn_model_defaults(&m);
	ck_assert_msg(pn_predict(t, s, &m, c, p, err) == 0, "%s", err);
}

/* Three blocks on h2 (the entry), h1, h0, with other hosts h3 (block 3)
 * and h4 (block 2), h4 slower: a ring host lost costs what a ring
 * through the other host costs, plus the hop already paid to the lost
 * one (none for the entry, whose client re-sends); an other host lost
 * costs nothing; block 1's only host lost fails the ring, and with an
 * other host h5 there, the worst loss is the slowest of the three. */
START_TEST(test_serve_loss_against_rings)
{
	pn_prediction p, q;
	pn_serve_loss l;
	pn_candidate c, d;
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_model m;
	pr_spec s;
	double worst;

	spec_of(&s, 3, 2, 100, 10);
	topo_of(&t, &s, 6, 1000, 1e6);
	t.hosts[4].forward_positions_per_s /= 2;
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	c.nalt[2] = 1;
	c.alt[2][0] = 3;
	c.nalt[1] = 1;
	c.alt[1][0] = 4;
	predict(&t, &s, &c, &p);

	/* the inner block: h1 lost, h2 re-sends to h4 */
	pn_serve_loss_of(&t, &s, &c, &p, 1, 0, &l);
	d = c;
	d.ring[1] = 4;
	d.nalt[1] = 0;
	predict(&t, &s, &d, &q);
	ck_assert_int_eq(l.host, 1);
	ck_assert_int_eq(l.via, 4);
	ck_assert(!l.fails);
	ck_assert_double_eq_tol(l.latency_s, q.bt.latency_s +
	    hop_s(&t, &s, 2, 1), TOL);
	ck_assert_double_eq_tol(l.part.compute, q.bt.part.compute, TOL);
	/* the slower host computes longer: it shows */
	ck_assert_double_gt(l.part.compute, p.bt.part.compute * 1.1);
	/* and the network by hand: 2 -> 1 (lost), 2 -> 4, 4 -> 0, 0 -> 2 */
	ck_assert_double_eq_tol(l.part.transfer + l.part.latency,
	    hop_s(&t, &s, 2, 1) + hop_s(&t, &s, 2, 4) + hop_s(&t, &s, 4, 0) +
	    hop_s(&t, &s, 0, 2), TOL);

	/* the entry: the client re-sends to h3, which takes the output */
	pn_serve_loss_of(&t, &s, &c, &p, 2, 0, &l);
	d = c;
	d.ring[2] = 3;
	d.nalt[2] = 0;
	predict(&t, &s, &d, &q);
	ck_assert_int_eq(l.via, 3);
	ck_assert_double_eq_tol(l.latency_s, q.bt.latency_s, TOL);

	/* an other host: not on the path */
	pn_serve_loss_of(&t, &s, &c, &p, 2, 1, &l);
	ck_assert_int_eq(l.host, 3);
	ck_assert(!l.fails);
	ck_assert_double_eq_tol(l.latency_s, p.bt.latency_s, TOL);

	/* block 1 alone on h0 */
	pn_serve_loss_of(&t, &s, &c, &p, 0, 0, &l);
	ck_assert(l.fails);
	ck_assert_int_eq(l.via, -1);
	ck_assert(p.serve_lost.fails);
	ck_assert_int_eq(p.serve_lost.host, 0);
	ck_assert_int_eq(p.serve_lost.block, 0);

	/* block 1 with h5: h1 re-sends to it, it returns to the entry */
	c.nalt[0] = 1;
	c.alt[0][0] = 5;
	predict(&t, &s, &c, &p);
	pn_serve_loss_of(&t, &s, &c, &p, 0, 0, &l);
	d = c;
	d.ring[0] = 5;
	d.nalt[0] = 0;
	predict(&t, &s, &d, &q);
	ck_assert_double_eq_tol(l.latency_s, q.bt.latency_s +
	    hop_s(&t, &s, 1, 0), TOL);
	ck_assert(!p.serve_lost.fails);
	worst = 0;
	for (int b = 0; b < 3; b++) {
		pn_serve_loss_of(&t, &s, &c, &p, b, 0, &l);
		worst = fmax(worst, l.latency_s);
	}
	ck_assert_double_eq_tol(p.serve_lost.latency_s, worst, TOL);
	ck_assert_double_gt(p.serve_lost.latency_s, p.bt.latency_s);

	/* a host twice in the ring, or too many others, is refused */
	pn_model_defaults(&m);
	d = c;
	d.alt[0][0] = 1;
	ck_assert_int_eq(pn_predict(&t, &s, &m, &d, &q, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "twice in the serving ring"), "%s", err);
	d = c;
	d.alt[0][0] = 4;
	ck_assert_int_eq(pn_predict(&t, &s, &m, &d, &q, err), KN_EINVAL);
	d = c;
	d.nalt[0] = PN_MAX_SERVE;
	ck_assert_int_eq(pn_predict(&t, &s, &m, &d, &q, err), KN_EINVAL);
	topo_free(&t);
}
END_TEST

/* One block on one host: its loss fails the ring; with a second host
 * the traversal is that host's (the client re-sends, it returns to
 * itself). */
START_TEST(test_serve_loss_one_block)
{
	pn_prediction p, q;
	pn_candidate c, d;
	char err[KN_ERR_LEN];
	topo_topology t;
	pr_spec s;

	spec_of(&s, 1, 2, 100, 10);
	topo_of(&t, &s, 2, 1000, 1e6);
	t.hosts[1].forward_positions_per_s /= 3;
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	predict(&t, &s, &c, &p);
	ck_assert(p.serve_lost.fails);
	c.nalt[0] = 1;
	c.alt[0][0] = 1;
	predict(&t, &s, &c, &p);
	d = c;
	d.ring[0] = 1;
	d.nalt[0] = 0;
	predict(&t, &s, &d, &q);
	ck_assert(!p.serve_lost.fails);
	ck_assert_int_eq(p.serve_lost.host, 0);
	ck_assert_int_eq(p.serve_lost.via, 1);
	ck_assert_double_eq_tol(p.serve_lost.latency_s, q.bt.latency_s, TOL);
	ck_assert_double_eq_tol(p.serve_lost.part.latency, 0, TOL);
	topo_free(&t);
}
END_TEST

/* The worst loss of ring c with block b's other host from free[] as
 * perm gives them, or INFINITY when the ring fails. */
static double
worst_with(const topo_topology *t, const pr_spec *s, pn_candidate c,
    const int *hosts)
{
	pn_prediction p;
	int b;

	for (b = 0; b < c.blocks; b++) {
		c.nalt[b] = 1;
		c.alt[b][0] = hosts[b];
	}
	predict(t, s, &c, &p);
	return p.serve_lost.fails ? INFINITY : p.serve_lost.latency_s;
}

/* Every choice of the other hosts of 3 blocks from the hosts the ring
 * leaves free (n - 3 of them), by brute force: the smallest worst loss. */
static double
best_worst(const topo_topology *t, const pr_spec *s, const pn_candidate *c)
{
	int free_h[16], nf = 0, h, b, i, j, k;
	unsigned char in_ring[16] = { 0 };
	double best = INFINITY;

	for (b = 0; b < 3; b++)
		in_ring[c->ring[b]] = 1;
	for (h = 0; h < t->nhosts; h++)
		if (!in_ring[h])
			free_h[nf++] = h;
	for (i = 0; i < nf; i++)
		for (j = 0; j < nf; j++)
			for (k = 0; k < nf; k++) {
				int hosts[3] = { free_h[i], free_h[j], free_h[k] };

				if (i == j || j == k || i == k)
					continue;
				best = fmin(best, worst_with(t, s, *c, hosts));
			}
	return best;
}

static void
plan_of(const topo_topology *t, const pr_spec *s, const pn_options *o,
    pn_plan *plan)
{
	char err[KN_ERR_LEN];
	pn_model m;

	pn_model_defaults(&m);
	ck_assert_msg(pn_search(t, s, &m, o, 1000, plan, err) == 0, "%s", err);
}

/* --goal serve --serve-replicas 2 on 6 and on 7 hosts with unequal
 * links and hosts: every row gives each block two hosts, none twice;
 * rows of one traversal rank the smaller worst loss first; and each
 * row's other hosts make the worst loss as small as any choice of the
 * free hosts does. */
START_TEST(test_serve_replicas_search)
{
	int n;

	for (n = 6; n <= 7; n++) {
		topo_topology t;
		pn_options o;
		pn_plan plan;
		pr_spec s;
		int i, b;

		spec_of(&s, 3, 2, 100, 10);
		topo_of(&t, &s, n, 1000, 1e6);
		t.hosts[2].forward_positions_per_s *= 2;
		t.hosts[5].forward_positions_per_s /= 2;
		pn_options_defaults(&o);
		o.goal = PN_GOAL_SERVE;
		o.serve_replicas = 2;
		plan_of(&t, &s, &o, &plan);
		ck_assert_int_gt(plan.n, 1);
		for (i = 0; i < plan.n; i++) {
			const pn_result *r = &plan.v[i];
			unsigned char seen[16] = { 0 };

			for (b = 0; b < 3; b++) {
				ck_assert_int_eq(r->c.nalt[b], 1);
				ck_assert(!seen[r->c.ring[b]]++);
				ck_assert(!seen[r->c.alt[b][0]]++);
			}
			ck_assert(!r->p.serve_lost.fails);
			ck_assert_double_eq_tol(r->p.serve_lost.latency_s,
			    best_worst(&t, &s, &r->c), TOL);
			if (i > 0 && r->score == plan.v[i - 1].score)
				ck_assert_double_ge(r->p.serve_lost.latency_s,
				    plan.v[i - 1].p.serve_lost.latency_s);
		}
		/* the default has one host a block */
		ck_assert(plan.def.p.serve_lost.fails);
		/* with one row asked for, of the fastest rings the one that
		 * loses a host best */
		{
			pn_plan one;
			char err[KN_ERR_LEN];
			pn_model m;
			double best = INFINITY;

			pn_model_defaults(&m);
			ck_assert_msg(pn_search(&t, &s, &m, &o, 1, &one, err) == 0,
			    "%s", err);
			ck_assert_int_eq(one.n, 1);
			for (i = 0; i < plan.nall; i++)
				if (plan.v[i].score == plan.v[0].score)
					best = fmin(best,
					    plan.v[i].p.serve_lost.latency_s);
			ck_assert_double_eq(one.v[0].score, plan.v[0].score);
			ck_assert_double_eq_tol(one.v[one.chosen].p.serve_lost.
			    latency_s, best, TOL);
			pn_plan_free(&one);
		}
		pn_plan_free(&plan);
		topo_free(&t);
	}
}
END_TEST

/* Three serving hosts a block on 9 hosts: each block's two others, the
 * first re-sent to taking the worst loss's place. */
START_TEST(test_serve_replicas_three)
{
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s;
	const pn_candidate *c;
	unsigned char seen[16] = { 0 };
	int b, k;

	spec_of(&s, 3, 2, 100, 10);
	topo_of(&t, &s, 9, 1000, 1e6);
	pn_options_defaults(&o);
	o.goal = PN_GOAL_SERVE;
	o.serve_replicas = 3;
	plan_of(&t, &s, &o, &plan);
	c = &plan.v[plan.chosen].c;
	for (b = 0; b < 3; b++) {
		ck_assert_int_eq(c->nalt[b], 2);
		ck_assert(!seen[c->ring[b]]++);
		for (k = 0; k < 2; k++)
			ck_assert(!seen[c->alt[b][k]]++);
	}
	ck_assert_double_eq_tol(plan.v[plan.chosen].p.serve_lost.latency_s,
	    best_worst(&t, &s, c), TOL);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* Too few hosts for N a block, or too few with the memory: the reason;
 * serving hosts asked of a training plan, or more than PN_MAX_SERVE:
 * refused. */
START_TEST(test_serve_replicas_refused)
{
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pn_model m;
	pr_spec s;

	spec_of(&s, 3, 2, 100, 10);
	pn_model_defaults(&m);
	pn_options_defaults(&o);
	o.goal = PN_GOAL_SERVE;
	o.serve_replicas = 2;
	topo_of(&t, &s, 5, 1000, 1e6);
	ck_assert_int_eq(pn_search(&t, &s, &m, &o, 5, &plan, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "need 6 hosts") && strstr(err, "has 5"),
	    "%s", err);
	topo_free(&t);

	topo_of(&t, &s, 6, 1000, 1e6);
	t.hosts[4].memory_bytes = pn_serve_bytes(&s, 2) / 2;
	ck_assert_int_eq(pn_search(&t, &s, &m, &o, 5, &plan, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "has 5"), "%s", err);
	t.hosts[4].memory_bytes = 1e12;

	o.goal = PN_GOAL_TRAIN;
	ck_assert_int_eq(pn_search(&t, &s, &m, &o, 5, &plan, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "serving goal"), "%s", err);
	o.goal = PN_GOAL_SERVE;
	o.serve_replicas = PN_MAX_SERVE + 1;
	ck_assert_int_eq(pn_search(&t, &s, &m, &o, 5, &plan, err), KN_EINVAL);

	/* --goal both serves from the replicas: --replicas 1 cannot */
	o.goal = PN_GOAL_BOTH;
	o.serve_replicas = 2;
	o.replicas = 1;
	ck_assert_int_eq(pn_search(&t, &s, &m, &o, 5, &plan, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "--replicas gives 1"), "%s", err);
	topo_free(&t);
}
END_TEST

/* --goal both --serve-replicas 2: every row trains 2 or more replicas a
 * block and serves from two of them, the other the block's replica that
 * serves fastest in the ring host's place. */
START_TEST(test_serve_replicas_both)
{
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s;
	int i, b, r;

	spec_of(&s, 2, 2, 100, 10);
	topo_of(&t, &s, 6, 1000, 1e6);
	t.hosts[3].forward_positions_per_s /= 2;
	pn_options_defaults(&o);
	o.goal = PN_GOAL_BOTH;
	o.serve_replicas = 2;
	plan_of(&t, &s, &o, &plan);
	for (i = 0; i < plan.nall; i++) {
		const pn_candidate *c = &plan.v[i].c;

		for (b = 0; b < 2; b++) {
			int ring_in = 0, alt_in = 0;
			double best = INFINITY;

			ck_assert_int_ge(c->nrep[b], 2);
			ck_assert_int_eq(c->nalt[b], 1);
			for (r = 0; r < c->nrep[b]; r++) {
				ring_in |= c->host[b][r] == c->ring[b];
				alt_in |= c->host[b][r] == c->alt[b][0];
			}
			ck_assert(ring_in && alt_in);
			/* no other replica of the block serves better in its
			 * place */
			for (r = 0; r < c->nrep[b]; r++) {
				pn_candidate d = *c;
				pn_serve_loss l;

				if (c->host[b][r] == c->ring[b])
					continue;
				d.alt[b][0] = c->host[b][r];
				pn_serve_loss_of(&t, &s, &d, &plan.v[i].p, b, 0,
				    &l);
				best = fmin(best, l.latency_s);
			}
			{
				pn_serve_loss l;

				pn_serve_loss_of(&t, &s, c, &plan.v[i].p, b, 0,
				    &l);
				ck_assert_double_eq_tol(l.latency_s, best, TOL);
			}
		}
	}
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* Training: with one replica a block the worst loss stops the block
 * with the most positions/s; with two a block, the worst is the replica
 * without which the run predicts longest, found here by predicting each
 * run without one. */
START_TEST(test_train_loss)
{
	pn_prediction p, q;
	pn_candidate c, d;
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_model m;
	pr_spec s;
	double worst = 0, lost_s[4], lost_round[4];
	int b, r, host;

	spec_of(&s, 2, 2, 100, 10);
	topo_of(&t, &s, 4, 1000, 1e6);
	t.hosts[1].train_positions_per_s *= 2;
	pn_model_defaults(&m);
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	predict(&t, &s, &c, &p);
	ck_assert_int_eq(p.train_lost.host, -1);
	pn_predict_train_loss(&t, &s, &m, &c, &p);
	ck_assert(p.train_lost.halts);
	ck_assert_int_eq(p.train_lost.host, 1);
	ck_assert_int_eq(p.train_lost.block, 1);
	ck_assert_double_eq_tol(p.train_lost.positions_per_s,
	    p.block[0].positions_per_s, 1e-9);

	/* two replicas a block; h3's link to its coordinator slow */
	c.nrep[0] = c.nrep[1] = 2;
	c.host[0][1] = 2;
	c.host[1][1] = 3;
	topo_link_at(&t, 3, 1)->stream_bytes_per_s = 1e4;
	topo_link_at(&t, 1, 3)->stream_bytes_per_s = 1e4;
	predict(&t, &s, &c, &p);
	pn_predict_train_loss(&t, &s, &m, &c, &p);
	ck_assert(!p.train_lost.halts);
	for (b = 0; b < 2; b++)
		for (r = 0; r < 2; r++) {
			d = c;
			d.host[b][0] = c.host[b][1 - r];
			d.nrep[b] = 1;
			predict(&t, &s, &d, &q);
			lost_s[c.host[b][r]] = q.train_s;
			lost_round[c.host[b][r]] = q.block[b].round_s;
			worst = fmax(worst, q.train_s);
		}
	host = p.train_lost.host;
	ck_assert_int_ge(host, 0);
	ck_assert_int_eq(p.train_lost.block, host % 2);
	ck_assert_double_eq_tol(p.train_lost.train_s, worst, 1e-9 * worst);
	ck_assert_double_eq_tol(lost_s[host], worst, 1e-9 * worst);
	ck_assert_double_eq_tol(p.train_lost.round_s, lost_round[host],
	    1e-9 * lost_round[host]);
	/* the slow link is left in the run: h0 or h2 lost */
	ck_assert(host == 0 || host == 2);
	topo_free(&t);
}
END_TEST

/* Reads the host lines of a pipeline file: "addr block" each. */
static int
pipeline_lines(const char *path, char addr[][64], int *block, int max)
{
	char line[512];
	FILE *f = fopen(path, "r");
	int n = 0;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL && n < max) {
		char id[256] = "";

		if (line[0] == '#' || line[0] == '\n')
			continue;
		ck_assert_int_ge(sscanf(line, "%63s %d %255s", addr[n],
		    &block[n], id), 2);
		n++;
	}
	fclose(f);
	return n;
}

/* The written pipeline file lists each block's hosts on consecutive
 * lines, block T first, a block's ring host before its others, as the
 * plan's ring has them; plan.json gives the hosts and each one lost. */
START_TEST(test_written_pipeline)
{
	char dir[256], path[512], err[KN_ERR_LEN], addr[8][64], want[64];
	int block[8], n, b, k, line = 0;
	const pn_result *r;
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s;
	json_t *j, *cand, *serve;
	json_error_t jerr;

	spec_of(&s, 3, 2, 100, 10);
	topo_of(&t, &s, 6, 1000, 1e6);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.goal = PN_GOAL_SERVE;
	o.serve_replicas = 2;
	plan_of(&t, &s, &o, &plan);
	r = &plan.v[plan.chosen];
	tu_temp_dir(dir, sizeof(dir), "check_plan_loss");
	ck_assert_msg(pn_write(dir, &t, &s, &o, &plan, err) == 0, "%s", err);
	snprintf(path, sizeof(path), "%s/pipeline", dir);
	n = pipeline_lines(path, addr, block, 8);
	ck_assert_int_eq(n, 6);
	for (b = 2; b >= 0; b--)
		for (k = 0; k < 2; k++, line++) {
			pn_host_addr(&t, k == 0 ? r->c.ring[b] : r->c.alt[b][0],
			    want, sizeof(want));
			ck_assert_str_eq(addr[line], want);
			ck_assert_int_eq(block[line], b + 1);
		}
	/* and the daemons read it: three stages of two hosts */
	{
		ph_list pl;

		ck_assert_msg(ph_load(&pl, path, err) == 0, "%s", err);
		ck_assert_int_eq(pl.n, 6);
		ck_assert_int_eq(ph_stage_size(&pl, 0), 2);
		ph_free(&pl);
	}

	snprintf(path, sizeof(path), "%s/plan.json", dir);
	j = json_load_file(path, 0, &jerr);
	ck_assert_ptr_nonnull(j);
	cand = json_array_get(json_object_get(j, "candidates"), plan.chosen);
	serve = json_object_get(cand, "serve");
	ck_assert_int_eq(json_array_size(json_object_get(serve, "hosts")), 3);
	ck_assert_int_eq(json_array_size(json_array_get(json_object_get(serve,
	    "hosts"), 0)), 2);
	ck_assert_str_eq(json_string_value(json_array_get(json_array_get(
	    json_object_get(serve, "hosts"), 0), 1)),
	    t.hosts[r->c.alt[2][0]].name);
	ck_assert_int_eq(json_array_size(json_object_get(serve,
	    "one_host_down")), 6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(
	    json_object_get(serve, "worst_host_down"), "latency_s")),
	    r->p.serve_lost.latency_s, 1e-9);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(
	    serve, "worst_host_down"), "host")),
	    t.hosts[r->p.serve_lost.host].name);
	/* the default, one host a block, fails */
	ck_assert(json_is_true(json_object_get(json_object_get(json_object_get(
	    json_object_get(j, "default"), "serve"), "worst_host_down"),
	    "ring_fails")));
	json_decref(j);
	tu_remove_dir(dir);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* The command: --serve-replicas in its help, the ring of each row with
 * its worst loss, a training goal refused. */
START_TEST(test_command)
{
	char dir[256], out[32768], err[KN_ERR_LEN];
	const char *topo, *spec;
	topo_topology t;
	pr_spec s;
	int rc;

	tu_temp_dir(dir, sizeof(dir), "check_plan_loss_cmd");
	spec = strdup(tu_write_file(dir, "spec.conf", "[model]\nblocks = 2\n"
	    "width = 64\nheads = 4\nlayers_per_block = 2\nwindow = 32\n"
	    "[optim]\nbatch = 8\nsteps = 400\nwarmup = 10\n"));
	spec_of(&s, 2, 2, 400, 50);
	topo_of(&t, &s, 4, 1000, 1e6);
	snprintf(out, sizeof(out), "%s/topology.json", dir);
	ck_assert_msg(topo_save(&t, out, err) == 0, "%s", err);
	topo = strdup(out);
	rc = tu_run_cmd(out, sizeof(out), "%s plan --help 2>&1",
	    tu_shardmeter());
	ck_assert_int_eq(rc, 0);
	ck_assert_ptr_nonnull(strstr(out, "--serve-replicas"));
	rc = tu_run_cmd(out, sizeof(out), "%s plan --topology %s --spec %s "
	    "--goal serve --serve-replicas 2 --top 2 2>&1", tu_shardmeter(),
	    topo, spec);
	ck_assert_msg(rc == 0, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "ring: ["));
	ck_assert_msg(strstr(out, "one host down: the ring fails: h1 is the "
	    "only host of block 2"), "%s", out);
	ck_assert_msg(strstr(out, "), worst h"), "%s", out);
	ck_assert_msg(strstr(out, "  serving: h"), "%s", out);
	rc = tu_run_cmd(out, sizeof(out), "%s plan --topology %s --spec %s "
	    "--goal train --serve-replicas 2 2>&1", tu_shardmeter(), topo,
	    spec);
	ck_assert_int_eq(rc, 2);
	ck_assert_msg(strstr(out, "--serve-replicas needs --goal serve or "
	    "both"), "%s", out);
	rc = tu_run_cmd(out, sizeof(out), "%s plan --topology %s --spec %s "
	    "--goal serve --serve-replicas 3 2>&1", tu_shardmeter(), topo,
	    spec);
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out, "need 6 hosts"), "%s", out);
	topo_free(&t);
	free((char *)topo);
	free((char *)spec);
	tu_remove_dir(dir);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("plan_loss");
	TCase *tc = tcase_create("cost");

	tcase_add_test(tc, test_serve_loss_against_rings);
	tcase_add_test(tc, test_serve_loss_one_block);
	tcase_add_test(tc, test_train_loss);
	suite_add_tcase(s, tc);
	tc = tcase_create("search");
	tcase_add_test(tc, test_serve_replicas_search);
	tcase_add_test(tc, test_serve_replicas_three);
	tcase_add_test(tc, test_serve_replicas_refused);
	tcase_add_test(tc, test_serve_replicas_both);
	suite_add_tcase(s, tc);
	tc = tcase_create("files");
	tcase_add_test(tc, test_written_pipeline);
	tcase_add_test(tc, test_command);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
