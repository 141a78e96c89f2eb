/* The planner: its cost model on constructed topologies whose answer is
 * known (a slow link, a fast host, int8 against f32, overlapped rounds,
 * bytes per hour by hand), the search's greedy path against exhaustive
 * search, the files a plan writes read back by the daemon's own readers,
 * and the command's clear error for a bad topology file (the reader's
 * own cases are tests/check_topology.c's).  No daemons, no timings. */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/core/conf.h"
#include "daemon/core/peers.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/error.h"
#include "plan/cost.h"
#include "plan/output.h"
#include "plan/search.h"
#include "proto/topology.h"
#include "proto/update.h"
#include "tests/testutil.h"

/* int8's gain over f32 when compute dominates stays below this */
#define COMPUTE_BOUND_EPS 0.01

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

/* n equal hosts (rate positions/s at the spec's shape), every link bw
 * bytes/s at rtt_ms. */
static void
topo_of(topo_topology *t, const pr_spec *s, int n, double rate, double bw,
    double rtt_ms)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);
	char err[KN_ERR_LEN];
	int i;

	ck_assert_msg(topo_init(t, n, err) == 0, "%s", err);
	t->shape = (topo_shape){ shape.width, shape.heads, shape.layers,
	    shape.window, s->batch };
	for (i = 0; i < n; i++) {
		snprintf(t->hosts[i].name, sizeof(t->hosts[i].name), "h%d", i);
		t->hosts[i].memory_bytes = 1e12;
		t->hosts[i].train_positions_per_s = rate;
		t->hosts[i].forward_positions_per_s = 3 * rate;
	}
	for (i = 0; i < n * n; i++) {
		t->links[i].rtt_ms = rtt_ms;
		t->links[i].stream_bytes_per_s = t->links[i].multi_bytes_per_s = bw;
		t->links[i].streams = 1;
	}
}

static void
set_pair(topo_topology *t, int a, int b, double bw)
{
	topo_link_at(t, a, b)->stream_bytes_per_s =
	    topo_link_at(t, a, b)->multi_bytes_per_s = bw;
	topo_link_at(t, b, a)->stream_bytes_per_s =
	    topo_link_at(t, b, a)->multi_bytes_per_s = bw;
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

static const pn_candidate *
chosen(const pn_plan *plan)
{
	return &plan->v[plan->chosen].c;
}

static int
uses(const pn_candidate *c, int b, int host)
{
	int r;

	for (r = 0; r < c->nrep[b]; r++)
		if (c->host[b][r] == host)
			return 1;
	return 0;
}

/* One block, two replicas out of three hosts: with every link alike the
 * first two hosts in list order are taken; with the link between them
 * ten times slower, the replicated block moves off it. */
/* The expected forward passes of each block in one traversal against
 * the daemon's own draws (bt_step_draw, bt_step_positions), counted over
 * many seeds: a step runs a pass only when it unmasks a position, so
 * fewer run than there are steps, the more so with fewer outputs. */
START_TEST(test_bt_passes_simulated)
{
	enum { SEEDS = 4000, K = 64, WINDOW = 32 };
	static const int prompts[] = { 0, 20 };
	int32_t seq[WINDOW], pos[WINDOW];
	float u[2 * WINDOW];
	double sum[3], sq[3], p, next;
	pr_spec s;
	size_t k;
	int b, j, i, seed, cnt, passes;

	spec_of(&s, 3, 1, 100, 50);
	for (k = 0; k < sizeof(prompts) / sizeof(prompts[0]); k++) {
		int fixed = prompts[k];

		memset(sum, 0, sizeof(sum));
		memset(sq, 0, sizeof(sq));
		for (seed = 1; seed <= SEEDS; seed++) {
			for (i = 0; i < WINDOW; i++)
				seq[i] = i < fixed ? 'a' : KN_MASK;
			for (b = s.blocks - 1; b >= 0; b--) {
				passes = 0;
				for (j = 0; bt_step_draw(&s, K, b, j, (uint64_t)seed,
				    u, &p, &next); j++) {
					cnt = bt_step_positions(seq, WINDOW, fixed, u, p,
					    next, pos);
					passes += cnt > 0;
					for (i = 0; i < cnt; i++)
						seq[pos[i]] = 'x';
				}
				sum[b] += passes;
				sq[b] += (double)passes * passes;
			}
			for (i = fixed; i < WINDOW; i++)
				ck_assert_int_ne(seq[i], KN_MASK);
		}
		for (b = 0; b < s.blocks; b++) {
			double mean = sum[b] / SEEDS;
			double se = sqrt((sq[b] / SEEDS - mean * mean) / SEEDS);
			double want = pn_bt_passes(&s, K, b, WINDOW - fixed);

			ck_assert_msg(fabs(mean - want) < 5 * se + 1e-9,
			    "prompt %d block %d: %.3f passes by the draws, %.3f "
			    "expected (se %.3f)", fixed, b + 1, mean, want, se);
			/* and not simply every step */
			ck_assert(want < pr_spec_steps_of(&s, K, b) - 10 * se);
		}
	}
}
END_TEST

START_TEST(test_slow_link_moves_replicas)
{
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s;

	spec_of(&s, 1, 2, 400, 20);
	/* an update of ~100k floats over 1e6 B/s: transfer matters */
	topo_of(&t, &s, 3, 2000, 1e6, 1);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 2;
	plan_of(&t, &s, &o, &plan);
	ck_assert(uses(chosen(&plan), 0, 0) && uses(chosen(&plan), 0, 1));
	pn_plan_free(&plan);

	set_pair(&t, 0, 1, 1e5);
	plan_of(&t, &s, &o, &plan);
	ck_assert_int_eq(chosen(&plan)->nrep[0], 2);
	ck_assert(!(uses(chosen(&plan), 0, 0) && uses(chosen(&plan), 0, 1)));
	ck_assert(uses(chosen(&plan), 0, 2));
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* The best f32 and int8 rows of a plan. */
static void
best_by_encoding(const pn_plan *plan, double *f32, double *int8)
{
	int i;

	*f32 = *int8 = INFINITY;
	for (i = 0; i < plan->nall; i++) {
		const pn_result *r = &plan->v[i];

		if (r->c.enc == PR_ENC_F32)
			*f32 = fmin(*f32, r->score);
		if (r->c.enc == PR_ENC_INT8)
			*int8 = fmin(*int8, r->score);
	}
	ck_assert(isfinite(*f32) && isfinite(*int8));
}

START_TEST(test_int8_only_when_link_bound)
{
	double f32, int8;
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s;

	spec_of(&s, 1, 2, 400, 20);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 2;
	o.int8 = 1;
	o.nh = 1;
	o.h[0] = 20;
	/* compute-bound: a fast link, slow hosts */
	topo_of(&t, &s, 2, 2000, 1e11, 0.05);
	plan_of(&t, &s, &o, &plan);
	best_by_encoding(&plan, &f32, &int8);
	ck_assert_msg(f32 / int8 - 1 < COMPUTE_BOUND_EPS, "int8 gains %g",
	    f32 / int8 - 1);
	ck_assert_int_ne(chosen(&plan)->enc, PR_ENC_INT8);
	pn_plan_free(&plan);
	topo_free(&t);

	/* link-bound: the same hosts behind a slow link */
	topo_of(&t, &s, 2, 2000, 2e4, 0.05);
	plan_of(&t, &s, &o, &plan);
	best_by_encoding(&plan, &f32, &int8);
	ck_assert_msg(f32 / int8 > 2, "int8 gains only %g", f32 / int8 - 1);
	ck_assert_int_eq(chosen(&plan)->enc, PR_ENC_INT8);
	ck_assert_int_eq(plan.v[0].c.enc, PR_ENC_INT8);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* A host twice as fast: the plan trains a block on it and leaves the
 * slow host idle; and, in the cost model, more layers on it shorten the
 * run (the spec cannot express unequal blocks, so the search keeps
 * them equal). */
START_TEST(test_fast_host)
{
	pn_candidate c;
	pn_prediction eq, more, fewer;
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pn_model m;
	pr_spec s;

	spec_of(&s, 2, 4, 400, 20);
	topo_of(&t, &s, 4, 1000, 1e9, 1);
	t.hosts[1].train_positions_per_s = 2000;
	t.hosts[0].train_positions_per_s = 500;
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 1;
	plan_of(&t, &s, &o, &plan);
	ck_assert(uses(chosen(&plan), 0, 1) || uses(chosen(&plan), 1, 1));
	ck_assert(!uses(chosen(&plan), 0, 0) && !uses(chosen(&plan), 1, 0));
	ck_assert_double_lt(plan.v[plan.chosen].score, plan.def.score);
	pn_plan_free(&plan);

	pn_model_defaults(&m);
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	c.host[0][0] = 1;       /* the fast host */
	c.host[1][0] = 2;
	ck_assert(pn_predict(&t, &s, &m, &c, &eq, err) == 0);
	c.layers[0] = 5;
	c.layers[1] = 3;
	ck_assert(pn_predict(&t, &s, &m, &c, &more, err) == 0);
	c.layers[0] = 3;
	c.layers[1] = 5;
	ck_assert(pn_predict(&t, &s, &m, &c, &fewer, err) == 0);
	ck_assert_double_lt(more.train_s, eq.train_s);
	ck_assert_double_lt(eq.train_s, fewer.train_s);
	topo_free(&t);
}
END_TEST

/* Hosts 0-2 share one machine, training at 600 positions/s all at once
 * against 1000 alone; host 3 has one of its own.  A host's rate falls
 * linearly from alone to shared with the hosts of its machine that the
 * candidate trains, and the planner puts two single-replica blocks on
 * two machines rather than one. */
START_TEST(test_shared_machine)
{
	pn_prediction apart, together;
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_candidate c;
	pn_options o;
	pn_plan plan;
	pn_model m;
	pr_spec s;
	int i;

	spec_of(&s, 2, 4, 400, 20);
	topo_of(&t, &s, 4, 1000, 1e9, 1);
	for (i = 0; i < 3; i++) {
		snprintf(t.hosts[i].machine, sizeof(t.hosts[i].machine), "m1");
		t.hosts[i].train_shared = 600;
	}
	pn_model_defaults(&m);
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	ck_assert(pn_shared_rate(&t, NULL, 0) == 1000);
	c.host[0][0] = 0;
	c.host[1][0] = 3;
	ck_assert(pn_shared_rate(&t, &c, 0) == 1000);   /* 1 of 3 */
	ck_assert(pn_shared_rate(&t, &c, 3) == 1000);   /* its own */
	ck_assert(pn_predict(&t, &s, &m, &c, &apart, err) == 0);
	c.host[1][0] = 1;
	ck_assert(pn_shared_rate(&t, &c, 0) == 800);    /* 2 of 3 */
	ck_assert(pn_shared_rate(&t, &c, 1) == 800);
	ck_assert(pn_predict(&t, &s, &m, &c, &together, err) == 0);
	ck_assert(fabs(together.train_s / apart.train_s - 1.25) < 1e-9);
	c.nrep[0] = 2;
	c.host[0][1] = 2;
	ck_assert(pn_shared_rate(&t, &c, 0) == 600);    /* 3 of 3 */
	/* a machine of one host with a shared rate: alone */
	t.hosts[1].train_shared = t.hosts[2].train_shared = 0;
	ck_assert(pn_shared_rate(&t, &c, 0) == 1000);
	t.hosts[1].train_shared = t.hosts[2].train_shared = 600;
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 1;
	plan_of(&t, &s, &o, &plan);
	ck_assert(uses(chosen(&plan), 0, 3) || uses(chosen(&plan), 1, 3));
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* Where the probe timed serving passes, a BlockTrain request's compute
 * is each block's passes at the time of a pass, between the one-row and
 * every-row times by the rows a pass picks on average; a host whose
 * passes take twice as long doubles it.  Without the times, the forward
 * rate gives it, as before. */
START_TEST(test_serve_pass_measured)
{
	pn_candidate c;
	pn_prediction rate, meas, slow;
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_model m;
	pr_spec s;
	double want = 0.0, n;
	int b, i;

	spec_of(&s, 2, 2, 100, 10);
	topo_of(&t, &s, 2, 1000, 1e9, 1);
	n = t.shape.window;
	pn_model_defaults(&m);
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	ck_assert(pn_predict(&t, &s, &m, &c, &rate, err) == 0);
	for (i = 0; i < 2; i++) {
		t.hosts[i].serve_pass_one_s = 1e-3;
		t.hosts[i].serve_pass_window_s = 4e-3;
	}
	ck_assert(pn_predict(&t, &s, &m, &c, &meas, err) == 0);
	for (b = 0; b < 2; b++) {
		double passes = pn_bt_passes(&s, PN_SERVE_STEPS, b,
		    meas.output_bytes);
		double r = meas.output_bytes * (s.cuts[b + 1] - s.cuts[b]) /
		    passes;

		r = r < 1 ? 1 : r > n ? n : r;
		want += passes * (1e-3 + 3e-3 * (r - 1) / (n - 1));
	}
	ck_assert_double_eq_tol(meas.bt.part.compute, want, 1e-12);
	ck_assert_double_ne(meas.bt.part.compute, rate.bt.part.compute);
	/* the links are the same: only the compute moved */
	ck_assert_double_eq_tol(meas.bt.part.latency, rate.bt.part.latency,
	    1e-12);
	for (i = 0; i < 2; i++) {
		t.hosts[i].serve_pass_one_s *= 2;
		t.hosts[i].serve_pass_window_s *= 2;
	}
	ck_assert(pn_predict(&t, &s, &m, &c, &slow, err) == 0);
	ck_assert_double_eq_tol(slow.bt.part.compute, 2 * want, 1e-12);
	topo_free(&t);
}
END_TEST

/* Two replicas over one link: the round by hand, the bytes per hour by
 * hand, the update's size against a real encoded update. */
START_TEST(test_round_and_bytes_by_hand)
{
	double rate = 4000, bw = 3e6, rtt = 0.004, U, step, end, bph, *out;
	pn_prediction p;
	pn_candidate c;
	char err[KN_ERR_LEN];
	/* the round and step of a long run, as the model assumes */
	pr_update_meta meta = { .block = 1, .round = 100000, .replica = 1,
	    .step = 10000000, .enc = PR_ENC_F32 };
	kn_model_shape shape;
	topo_topology t;
	pn_model m;
	pr_spec s;
	size_t count, len;
	float *zeros;
	char *buf;

	spec_of(&s, 1, 2, 400, 20);
	topo_of(&t, &s, 2, rate, bw, rtt * 1000);
	pn_model_defaults(&m);
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	c.nrep[0] = 2;
	c.host[0][1] = 1;
	c.steps = 200;
	ck_assert(pn_predict(&t, &s, &m, &c, &p, err) == 0);

	/* the update is exactly as long as a real one of that many
	 * parameters */
	shape = (kn_model_shape){ 64, 4, 2, 32, 0, 0 };
	count = kn_model_params_for(&shape);
	zeros = calloc(count, sizeof(float));
	memset(meta.run_id, 'f', PR_RUN_ID_LEN - 1);
	meta.count = count;
	ck_assert(pr_update_encode(&meta, zeros, &buf, &len, err) == 0);
	U = (double)len;
	ck_assert_double_eq(p.block[0].update_bytes, U);
	free(buf);
	free(zeros);

	/* H steps, replica 1's update reaches the coordinator (half a round
	 * trip and the bytes), the commit is seen by replica 1's poll (half
	 * the 100 ms poll period and half a round trip) */
	step = s.batch * s.window / rate;
	end = 20 * step + rtt / 2 + U / bw + PN_POLL_S / 2 + rtt / 2;
	ck_assert_double_eq_tol(p.block[0].round_s, end, 1e-9 * end);
	ck_assert_double_eq_tol(p.block[0].round.compute, 20 * step, 1e-9);
	ck_assert_double_eq_tol(p.block[0].round.transfer, U / bw, 1e-9);
	ck_assert_double_eq_tol(p.block[0].round.latency, rtt + PN_POLL_S / 2,
	    1e-9);
	ck_assert_double_eq_tol(p.train_s, 10 * end, 1e-9 * end);
	bph = U * 3600 / end;
	out = calloc(4, sizeof(double));
	pn_link_bytes(&t, &c, &p, out);
	ck_assert_double_eq_tol(out[0 * 2 + 1], bph, 1e-9 * bph);
	ck_assert_double_eq_tol(out[1 * 2 + 0], bph, 1e-9 * bph);
	ck_assert_double_eq(out[0], 0);
	ck_assert_double_eq_tol(p.max_link_bytes_per_h, bph, 1e-9 * bph);
	free(out);
	topo_free(&t);
}
END_TEST

/* A round's own CPU work on a host held to a tenth of a core, by hand:
 * (R - 1) U bytes each way at exchange_cpu, an encode and R merges of
 * the block's parameters, over the share; it lengthens every replica's
 * H steps by as much, so a blocking round by exactly that.  Without a
 * share (a GPU host) or with one replica it is nothing. */
START_TEST(test_exchange_cpu)
{
	double U, params, x;
	pn_prediction base, with;
	pn_candidate c;
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_model m;
	pr_spec s;
	int i;

	spec_of(&s, 1, 2, 400, 20);
	topo_of(&t, &s, 3, 4000, 3e6, 4);
	pn_model_defaults(&m);
	ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
	c.nrep[0] = 3;
	c.host[0][1] = 1;
	c.host[0][2] = 2;
	ck_assert(pn_predict(&t, &s, &m, &c, &base, err) == 0);
	for (i = 0; i < 3; i++) {
		t.hosts[i].exchange_cpu = 10e-9;
		t.hosts[i].encode_cpu = 1e-9;
		t.hosts[i].merge_cpu = 2e-9;
	}
	U = base.block[0].update_bytes;
	params = (double)pn_block_params(&s, 2);
	/* no share: no term */
	ck_assert_double_eq(pn_exchange_cpu_s(&t, 0, U, params, 3), 0);
	for (i = 0; i < 3; i++)
		t.hosts[i].cpu_share = 0.1;
	x = (10e-9 * U * 2 + params * (1e-9 + 3 * 2e-9)) / 0.1;
	ck_assert_double_eq_tol(pn_exchange_cpu_s(&t, 0, U, params, 3), x,
	    1e-12);
	ck_assert_double_eq(pn_exchange_cpu_s(&t, 0, U, params, 1), 0);
	ck_assert(pn_predict(&t, &s, &m, &c, &with, err) == 0);
	ck_assert_double_eq_tol(with.block[0].round_s - base.block[0].round_s,
	    x, 1e-9);
	ck_assert_double_eq_tol(with.block[0].step_s - base.block[0].step_s,
	    x / 20, 1e-12);
	/* a block of one exchanges nothing: its steps are the rate's */
	c.nrep[0] = 1;
	ck_assert(pn_predict(&t, &s, &m, &c, &with, err) == 0);
	ck_assert_double_eq_tol(with.block[0].step_s, s.batch * s.window /
	    4000.0, 1e-12);
	topo_free(&t);
}
END_TEST

/* The bytes of the payload bin of the update msg (len bytes). */
static size_t
payload_bin_bytes(const char *msg, size_t len)
{
	msgpack_unpacked u;
	size_t off = 0, n = 0;
	uint32_t i;

	msgpack_unpacked_init(&u);
	ck_assert(msgpack_unpack_next(&u, msg, len, &off) ==
	    MSGPACK_UNPACK_SUCCESS);
	ck_assert(u.data.type == MSGPACK_OBJECT_MAP);
	for (i = 0; i < u.data.via.map.size; i++) {
		const msgpack_object_kv *kv = &u.data.via.map.ptr[i];

		if (kv->key.via.str.size == 7 &&
		    memcmp(kv->key.via.str.ptr, "payload", 7) == 0)
			n = kv->val.via.bin.size;
	}
	msgpack_unpacked_destroy(&u);
	ck_assert_uint_gt(n, 0);
	return n;
}

/* pn_update_bytes against real updates of every encoding, of counts on
 * both sides of msgpack's integer and bin widths and int8's 256-value
 * scale blocks, uncompressed and zstd-compressed (the ratio set to what
 * zstd made of them). */
START_TEST(test_update_bytes_real)
{
	static const size_t counts[] = { 1, 100, 256, 257, 40000, 70000,
	    300000 };
	pr_update_meta meta = { .block = 1, .round = 100000, .replica = 1,
	    .step = 10000000 };
	char err[KN_ERR_LEN], *buf;
	size_t k, len, zlen;
	float *x = malloc(300000 * sizeof(float));
	pn_model m;
	int e;

	ck_assert_ptr_nonnull(x);
	for (k = 0; k < 300000; k++)
		x[k] = (float)((k * 2654435761u) % 1000) * 1e-4f;
	memset(meta.run_id, 'a', PR_RUN_ID_LEN - 1);
	for (e = 0; e < PN_ENCS; e++)
		for (k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
			pn_model_defaults(&m);
			meta.enc = (pr_encoding)e;
			meta.count = counts[k];
			meta.comp = PR_COMP_NONE;
			ck_assert_msg(pr_update_encode(&meta, x, &buf, &len,
			    err) == 0, "%s", err);
			ck_assert_msg(pn_update_bytes(&m, counts[k], meta.enc, 0) ==
			    (double)len, "%s, %zu values: %.0f, not %zu",
			    pr_encoding_name(meta.enc), counts[k],
			    pn_update_bytes(&m, counts[k], meta.enc, 0), len);
			/* zstd at a ratio of 1 sends it uncompressed */
			ck_assert(pn_update_bytes(&m, counts[k], meta.enc, 1) ==
			    (double)len);
			free(buf);
			if (counts[k] < 40000)
				continue;
			meta.comp = PR_COMP_ZSTD;
			ck_assert(pr_update_encode(&meta, x, &buf, &len, err) == 0);
			zlen = payload_bin_bytes(buf, len);
			ck_assert_uint_lt(zlen, pr_update_payload_bytes(meta.enc,
			    counts[k]));
			m.zstd_ratio[e] = ((double)zlen - 0.5) /
			    (double)pr_update_payload_bytes(meta.enc, counts[k]);
			ck_assert_msg(pn_update_bytes(&m, counts[k], meta.enc, 1) ==
			    (double)len, "%s zstd, %zu values: %.0f, not %zu",
			    pr_encoding_name(meta.enc), counts[k],
			    pn_update_bytes(&m, counts[k], meta.enc, 1), len);
			free(buf);
		}
	free(x);
}
END_TEST

/* Overlapped rounds cost max(compute, exchange), blocking their sum. */
START_TEST(test_overlap_max_not_sum)
{
	double bws[2] = { 1e8, 2e4 };
	char err[KN_ERR_LEN];
	pn_prediction blk, ovl;
	pn_candidate c;
	topo_topology t;
	pn_model m;
	pr_spec s;
	int k;

	spec_of(&s, 1, 2, 400, 20);
	pn_model_defaults(&m);
	for (k = 0; k < 2; k++) {
		double compute, X;

		topo_of(&t, &s, 2, 4000, bws[k], 2);
		ck_assert(pn_default_candidate(&t, &s, &c, err) == 0);
		c.nrep[0] = 2;
		c.host[0][1] = 1;
		c.steps = 200;
		ck_assert(pn_predict(&t, &s, &m, &c, &blk, err) == 0);
		c.overlap = 1;
		ck_assert(pn_predict(&t, &s, &m, &c, &ovl, err) == 0);
		compute = 20 * blk.block[0].step_s;
		X = blk.block[0].exchange_s;
		/* the exchange hides under the compute on a fast link and
		 * the compute under the exchange on a slow one */
		ck_assert(k == 0 ? X < compute : X > compute);
		ck_assert_double_eq_tol(blk.block[0].round_s, compute + X,
		    1e-9 * (compute + X));
		ck_assert_double_eq_tol(ovl.block[0].round_s, fmax(compute, X),
		    1e-9 * (compute + X));
		/* ten rounds; the last exchange has nothing to hide behind */
		ck_assert_double_eq_tol(blk.train_s, 10 * (compute + X),
		    1e-9 * blk.train_s);
		ck_assert_double_eq_tol(ovl.train_s, 10 * fmax(compute, X) +
		    fmin(compute, X), 1e-9 * ovl.train_s);
		ck_assert_double_eq_tol(ovl.block[0].round.compute +
		    ovl.block[0].round.straggler + ovl.block[0].round.transfer +
		    ovl.block[0].round.latency, ovl.block[0].round_s, 1e-9);
		topo_free(&t);
	}
}
END_TEST

/* Two sites of three hosts joined by a slow link: the greedy start and
 * swaps reach what trying every placement finds. */
START_TEST(test_greedy_matches_exhaustive)
{
	pn_plan all, greedy;
	topo_topology t;
	pn_options o;
	pr_spec s;
	int a, b;

	spec_of(&s, 2, 2, 400, 20);
	topo_of(&t, &s, 6, 2000, 1e8, 0.1);
	for (a = 0; a < 6; a++)
		for (b = 0; b < 6; b++)
			if (a != b && (a % 2) != (b % 2)) {
				t.links[a * 6 + b].stream_bytes_per_s = 1e5;
				t.links[a * 6 + b].multi_bytes_per_s = 1e5;
				t.links[a * 6 + b].rtt_ms = 80;
			}
	t.hosts[5].train_positions_per_s = 1000;
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 2;
	plan_of(&t, &s, &o, &all);
	ck_assert_int_eq(all.exhaustive, 1);
	o.exhaustive_limit = 0;
	plan_of(&t, &s, &o, &greedy);
	ck_assert_int_eq(greedy.exhaustive, 0);
	ck_assert_double_le(greedy.v[0].score, all.v[0].score * (1 + 1e-9));
	ck_assert_double_le(all.v[0].score, greedy.v[0].score * (1 + 1e-9));
	/* each block within one site, the slow host left out */
	for (b = 0; b < 2; b++) {
		const pn_candidate *c = &greedy.v[0].c;

		ck_assert_int_eq(c->host[b][0] % 2, c->host[b][1] % 2);
		ck_assert(!uses(c, b, 5));
	}
	pn_plan_free(&all);
	pn_plan_free(&greedy);
	topo_free(&t);
}
END_TEST

static const char *topo_head =
    "{ \"version\": 1, \"measured_at\": \"by hand\",\n"
    "  \"shape\": { \"width\": 64, \"heads\": 4, \"layers\": 2, "
    "\"window\": 32, \"batch\": 8 },\n";

/* hosts h0..h(n-1) at 127.0.0.1:7400+i with all links */
static char *
full_topology(int n)
{
	size_t cap = 65536, used = 0;
	char *text = malloc(cap);
	int i, j;

	used += (size_t)snprintf(text + used, cap - used, "%s  \"hosts\": [",
	    topo_head);
	for (i = 0; i < n; i++)
		used += (size_t)snprintf(text + used, cap - used, "%s{ \"name\": "
		    "\"h%d\", \"address\": \"127.0.0.1:%d\", \"memory_bytes\": "
		    "1e9, \"train_positions_per_s\": %d, "
		    "\"forward_positions_per_s\": 9000 }", i ? ", " : "", i,
		    7400 + i, 3000 + 100 * i);
	used += (size_t)snprintf(text + used, cap - used, "],\n  \"links\": [");
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++)
			if (i != j)
				used += (size_t)snprintf(text + used, cap - used,
				    "%s{ \"from\": \"h%d\", \"to\": \"h%d\", "
				    "\"rtt_ms\": 1, \"rtt_spread_ms\": 0.1, "
				    "\"samples\": 20, \"stream_bytes_per_s\": 1e7, "
				    "\"streams\": 4, \"multi_bytes_per_s\": 3e7 }",
				    used > 0 && text[used - 1] == '[' ? "" : ", ",
				    i, j);
	snprintf(text + used, cap - used, "] }\n");
	return text;
}

/* The files of a plan load with the daemon's own readers and say what
 * the plan says. */
START_TEST(test_written_plan_loads)
{
	char dir[256], path[512], err[KN_ERR_LEN], addr[128];
	const pn_candidate *c;
	topo_topology t;
	pn_options o;
	pn_plan plan;
	peers_list pl;
	ph_list hosts;
	pr_spec s, back;
	json_t *j;
	json_error_t jerr;
	char *text = full_topology(5);
	int b, r, i;

	spec_of(&s, 2, 2, 400, 20);
	ck_assert_msg(topo_parse(&t, text, strlen(text), "t.json",
	    err) == 0, "%s", err);
	free(text);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.goal = PN_GOAL_BOTH;
	o.replicas = 2;
	o.same_steps = 0;               /* --share-steps */
	plan_of(&t, &s, &o, &plan);
	c = chosen(&plan);
	tu_temp_dir(dir, sizeof(dir), "check_plan");
	ck_assert_msg(pn_write(dir, &t, &s, &o, &plan, err) == 0, "%s", err);

	snprintf(path, sizeof(path), "%s/spec.conf", dir);
	ck_assert_msg(pr_spec_load(&back, path, err) == 0, "%s", err);
	ck_assert_int_eq(back.blocks, 2);
	ck_assert_int_eq(back.replicas, 2);
	ck_assert_int_eq(back.steps, c->steps);
	ck_assert_int_eq(back.steps, 200);      /* 400 steps over 2 replicas */
	ck_assert_int_eq(back.local_steps, c->local_steps);
	ck_assert_int_eq(back.steps % back.local_steps, 0);

	snprintf(path, sizeof(path), "%s/peers", dir);
	ck_assert_msg(peers_load(&pl, path, err) == 0, "%s", err);
	ck_assert_int_eq(pl.n, 4);
	for (b = 0; b < 2; b++) {
		ck_assert_int_eq(peers_replicas(&pl, b + 1), 2);
		for (r = 0; r < 2; r++) {
			pn_host_addr(&t, c->host[b][r], addr, sizeof(addr));
			i = peers_find(&pl, addr);
			ck_assert_int_ge(i, 0);
			ck_assert_int_eq(pl.v[i].block, b + 1);
			ck_assert_int_eq(peers_replica_index(&pl, i), r);
		}
	}
	peers_free(&pl);

	snprintf(path, sizeof(path), "%s/pipeline", dir);
	ck_assert_msg(ph_load(&hosts, path, err) == 0, "%s", err);
	ck_assert_int_eq(hosts.n, 2);
	pn_host_addr(&t, c->ring[1], addr, sizeof(addr));
	ck_assert_str_eq(hosts.v[0].addr, addr);
	ck_assert_int_eq(hosts.v[0].block_hi, 2);
	ph_free(&hosts);

	snprintf(path, sizeof(path), "%s/plan.json", dir);
	j = json_load_file(path, 0, &jerr);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "chosen")),
	    plan.chosen + 1);
	ck_assert_ptr_nonnull(json_object_get(json_object_get(j, "default"),
	    "train_s"));
	json_decref(j);
	tu_remove_dir(dir);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* --same-steps: every replica trains the spec's steps, so a replica
 * adds a round's cost and no speed; on 4 equal hosts and 2 blocks the
 * first choice keeps one replica each, and every row trains the spec's
 * steps (a multiple of H once it has replicas), the default too. */
START_TEST(test_same_steps)
{
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s;
	int i, b;

	spec_of(&s, 2, 2, 410, 20);
	topo_of(&t, &s, 4, 2000, 1e8, 1);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.same_steps = 1;
	plan_of(&t, &s, &o, &plan);
	ck_assert_int_eq(plan.def.c.steps, 410);
	for (b = 0; b < 2; b++)
		ck_assert_int_eq(chosen(&plan)->nrep[b], 1);
	ck_assert_int_eq(chosen(&plan)->steps, 410);
	for (i = 0; i < plan.n; i++)
		ck_assert_int_eq(plan.v[i].c.steps, plan.v[i].c.nrep[0] > 1 ?
		    (410 + plan.v[i].c.local_steps - 1) /
		    plan.v[i].c.local_steps * plan.v[i].c.local_steps : 410);
	pn_plan_free(&plan);
	/* without it, two replicas share the positions out: half the steps */
	o.same_steps = 0;
	o.replicas = 2;
	plan_of(&t, &s, &o, &plan);
	ck_assert_int_eq(chosen(&plan)->steps, (205 + chosen(&plan)->local_steps
	    - 1) / chosen(&plan)->local_steps * chosen(&plan)->local_steps);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* --pick: the default configuration (hosts in list order, one replica,
 * the spec's H and steps) and a lower row are written as they are in
 * the table; a row the table does not show is refused. */
START_TEST(test_written_pick)
{
	char *text = full_topology(5);
	int b, r, i, k;
	pr_spec s, back;
	json_error_t jerr;
	json_t *j;
	peers_list pl;
	pn_plan plan;
	pn_options o;
	topo_topology t;
	const pn_candidate *c;
	char dir[256], path[512], err[KN_ERR_LEN], addr[128];
	char id[PR_RUN_ID_LEN];

	spec_of(&s, 2, 2, 400, 20);
	ck_assert_msg(topo_parse(&t, text, strlen(text), "t.json",
	    err) == 0, "%s", err);
	free(text);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	plan_of(&t, &s, &o, &plan);
	ck_assert_int_ge(plan.n, 2);
	tu_temp_dir(dir, sizeof(dir), "check_plan");
	for (k = 0; k <= 2; k++) {
		c = k == 0 ? &plan.def.c : &plan.v[k - 1].c;
		ck_assert_msg(pn_write_pick(dir, &t, &s, &o, &plan, k, err) == 0,
		    "%s", err);
		snprintf(path, sizeof(path), "%s/spec.conf", dir);
		ck_assert_msg(pr_spec_load(&back, path, err) == 0, "%s", err);
		ck_assert_int_eq(back.replicas, c->nrep[0]);
		ck_assert_int_eq(back.steps, c->steps);
		ck_assert_int_eq(back.local_steps, c->local_steps);
		if (k == 0) {
			ck_assert_int_eq(back.replicas, 1);
			ck_assert_int_eq(back.steps, 400);
			ck_assert_int_eq(back.local_steps, 20);
		}
		snprintf(path, sizeof(path), "%s/peers", dir);
		ck_assert_msg(peers_load(&pl, path, err) == 0, "%s", err);
		ck_assert_int_eq(pl.n, 2 * c->nrep[0]);
		for (b = 0; b < 2; b++)
			for (r = 0; r < c->nrep[b]; r++) {
				/* the default: block b on host b, in list order */
				ck_assert(k != 0 || c->host[b][r] == b);
				pn_host_addr(&t, c->host[b][r], addr, sizeof(addr));
				i = peers_find(&pl, addr);
				ck_assert_int_ge(i, 0);
				ck_assert_int_eq(pl.v[i].block, b + 1);
			}
		peers_free(&pl);
		snprintf(path, sizeof(path), "%s/plan.json", dir);
		j = json_load_file(path, 0, &jerr);
		ck_assert_ptr_nonnull(j);
		/* daemons started from these files check this run id */
		ck_assert(pr_spec_run_id(&back, id, err) == 0);
		ck_assert_str_eq(json_string_value(json_object_get(j,
		    "run_id")), id);
		if (k == plan.chosen + 1)
			ck_assert_ptr_null(json_object_get(j, "written"));
		else
			ck_assert_int_eq(json_integer_value(json_object_get(j,
			    "written")), k);
		json_decref(j);
	}
	ck_assert_int_eq(pn_write_pick(dir, &t, &s, &o, &plan, plan.nall + 1,
	    err), KN_EINVAL);
	ck_assert_int_eq(pn_write_pick(dir, &t, &s, &o, &plan, -1, err),
	    KN_EINVAL);
	tu_remove_dir(dir);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

static char *
replaced(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char *out = malloc(strlen(text) + strlen(to) + 1);

	ck_assert_ptr_nonnull(at);
	memcpy(out, text, (size_t)(at - text));
	strcpy(out + (at - text), to);
	strcat(out, at + strlen(from));
	return out;
}

/* The network options of a first choice go into conf/HOST.conf as the
 * daemon's own keys: its reader takes the file and holds the encoding
 * and compression the plan chose; a key this build's daemon lacks is
 * there commented out, never set. */
START_TEST(test_written_confs_load)
{
	static const char *const later[] = { PN_KEY_STREAMS, PN_KEY_OVERLAP };
	char dir[256], path[512], err[KN_ERR_LEN], *text = full_topology(4);
	char line[256];
	pn_candidate *c;
	topo_topology t;
	pn_options o;
	pn_plan plan;
	cf_config cf;
	pr_spec s;
	FILE *f;
	int b, k, set[2];

	spec_of(&s, 2, 2, 400, 20);
	ck_assert_msg(topo_parse(&t, text, strlen(text), "t.json", err) == 0,
	    "%s", err);
	free(text);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 1;
	plan_of(&t, &s, &o, &plan);
	c = &plan.v[plan.chosen].c;
	c->enc = PR_ENC_INT8;
	c->zstd = 1;
	c->streams = 3;
	c->overlap = 1;
	tu_temp_dir(dir, sizeof(dir), "check_plan_conf");
	ck_assert_msg(pn_write(dir, &t, &s, &o, &plan, err) == 0, "%s", err);
	for (b = 0; b < 2; b++) {
		snprintf(path, sizeof(path), "%s/conf/%s.conf", dir,
		    t.hosts[c->host[b][0]].name);
		cf_defaults(&cf);
		ck_assert_msg(cf_load(&cf, path, err) == 0, "%s", err);
		ck_assert_int_eq(cf.block, b + 1);
		ck_assert_str_eq(cf.update_encoding, "int8");
		ck_assert_str_eq(cf.update_compression, "zstd");
		set[0] = set[1] = 0;
		ck_assert_ptr_nonnull(f = fopen(path, "r"));
		while (fgets(line, sizeof(line), f) != NULL)
			for (k = 0; k < 2; k++)
				if (strncmp(line, later[k], strlen(later[k])) == 0)
					set[k] = 1;
		fclose(f);
		for (k = 0; k < 2; k++)
			ck_assert_int_eq(set[k], pr_key_find(cf_keys, cf_nkeys,
			    "", later[k]) != NULL);
	}
	tu_remove_dir(dir);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

/* A spec of more blocks than the topology has hosts is refused, naming
 * both counts.  (The reader's own refusals are tests/check_topology.c's.) */
START_TEST(test_more_blocks_than_hosts)
{
	char *good = full_topology(3);
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pn_model m;
	pr_spec s;

	ck_assert_msg(topo_parse(&t, good, strlen(good), "ok.json",
	    err) == 0, "%s", err);
	spec_of(&s, 4, 2, 400, 20);
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	pn_model_defaults(&m);
	ck_assert_int_eq(pn_search(&t, &s, &m, &o, 5, &plan, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "4 blocks") && strstr(err, "3 hosts"), "%s",
	    err);
	topo_free(&t);
	free(good);
}
END_TEST

/* The command on files: the table with the default and a first choice,
 * the files written, and a bad topology named with its reason. */
START_TEST(test_command)
{
	char dir[256], out[16384], *text = full_topology(4), *bad;
	const char *topo, *spec;
	int rc;

	tu_temp_dir(dir, sizeof(dir), "check_plan_cmd");
	topo = tu_write_file(dir, "topology.json", text);
	topo = strdup(topo);
	spec = strdup(tu_write_file(dir, "spec.conf", "[model]\nblocks = 2\n"
	    "width = 64\nheads = 4\nlayers_per_block = 2\nwindow = 32\n"
	    "[optim]\nbatch = 8\nsteps = 400\nwarmup = 10\n"));
	rc = tu_run_cmd(out, sizeof(out), "%s plan --topology %s --spec %s "
	    "--goal both --top 3 --out %s/out 2>&1", tu_shardmeter(), topo,
	    spec, dir);
	ck_assert_msg(rc == 0, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "dflt "));
	ck_assert_ptr_nonnull(strstr(out, "search: exhaustive"));
	ck_assert_ptr_nonnull(strstr(out, "first choice"));
	ck_assert_ptr_nonnull(strstr(out, "split: the 4 layers shared"));
	ck_assert_ptr_nonnull(strstr(out, " layers\n"));
	ck_assert_ptr_nonnull(strstr(out, "wrote "));
	snprintf(out, sizeof(out), "%s/out/plan.json", dir);
	ck_assert_int_eq(access(out, R_OK), 0);
	snprintf(out, sizeof(out), "%s/out/peers", dir);
	ck_assert_int_eq(access(out, R_OK), 0);

	bad = replaced(text, "\"rtt_ms\": 1,", "\"rtt_ms\": 0,");
	tu_write_file(dir, "topology.json", bad);
	rc = tu_run_cmd(out, sizeof(out), "%s plan --topology %s --spec %s "
	    "2>&1", tu_shardmeter(), topo, spec);
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out, "topology.json: links[0] (h0 -> h1): "
	    "\"rtt_ms\" must be a positive finite number") != NULL, "%s", out);
	free(bad);
	free(text);
	free((char *)topo);
	free((char *)spec);
	tu_remove_dir(dir);
}
END_TEST

/* A training step's seconds for a block of layers layers on a host of
 * rate positions/s at the topology's shape (layers_at), from the
 * kernels' FLOPs: the cost model's scaling, computed apart from it. */
static double
step_by_hand(const pr_spec *s, int layers, int layers_at, double rate)
{
	kn_model_shape mine = pr_spec_block_shape(s, 0), at = mine;

	mine.layers = layers;
	at.layers = layers_at;
	return (double)s->batch * s->window / (rate *
	    kn_model_flops_per_window(&at) / kn_model_flops_per_window(&mine));
}

/* Two blocks of 2 layers, two hosts, one three times faster: the search
 * gives the fast host's block 3 of the 4 layers, and its predicted round
 * beats the equal split's by the FLOPs worked out by hand; on equal hosts
 * the split stays equal, and --equal-blocks keeps the spec's. */
START_TEST(test_split_layers)
{
	double r = 1000, eq_round, split_round;
	const pn_candidate *c;
	topo_topology t;
	pn_options o;
	pn_plan plan;
	pr_spec s, out;
	char err[KN_ERR_LEN];
	int fast, slow;

	spec_of(&s, 2, 2, 400, 20);
	topo_of(&t, &s, 2, r, 1e9, 1);
	t.hosts[1].train_positions_per_s = 3 * r;
	pn_options_defaults(&o);
	o.daemon_keys = cf_keys;
	o.daemon_nkeys = cf_nkeys;
	o.replicas = 1;
	plan_of(&t, &s, &o, &plan);
	c = chosen(&plan);
	fast = uses(c, 0, 1) ? 0 : 1;
	slow = 1 - fast;
	ck_assert(uses(c, fast, 1) && uses(c, slow, 0));
	ck_assert_int_eq(c->layers[fast], 3);
	ck_assert_int_eq(c->layers[slow], 1);
	/* the default keeps 2 + 2: the slow host's 2 layers decide */
	ck_assert_int_eq(plan.def.c.layers[0], 2);
	ck_assert_int_eq(plan.def.c.layers[1], 2);
	eq_round = 20 * step_by_hand(&s, 2, 2, r);
	split_round = fmax(20 * step_by_hand(&s, 1, 2, r),
	    20 * step_by_hand(&s, 3, 2, 3 * r));
	ck_assert_double_eq_tol(plan.def.p.block[plan.def.p.slowest].round_s,
	    eq_round, 1e-9 * eq_round);
	ck_assert_double_eq_tol(plan.v[plan.chosen].p.block[
	    plan.v[plan.chosen].p.slowest].round_s, split_round,
	    1e-9 * split_round);
	ck_assert_double_lt(split_round, eq_round);
	ck_assert_double_lt(plan.v[plan.chosen].score, plan.def.score);
	/* each block's own FLOPs: the 3-layer block on the fast host */
	ck_assert_double_eq_tol(plan.v[plan.chosen].p.block[fast].step_s,
	    step_by_hand(&s, 3, 2, 3 * r), 1e-12);
	/* the written spec carries the split, block by block */
	ck_assert_msg(pn_candidate_spec(&s, c, &out, err) == 0, "%s", err);
	ck_assert(out.layers_given);
	ck_assert_int_eq(pr_spec_layers(&out, fast), 3);
	ck_assert_int_eq(pr_spec_layers(&out, slow), 1);
	pn_plan_free(&plan);

	o.split = 0;
	plan_of(&t, &s, &o, &plan);
	ck_assert_int_eq(chosen(&plan)->layers[0], 2);
	ck_assert_int_eq(chosen(&plan)->layers[1], 2);
	pn_plan_free(&plan);

	/* equal hosts: equal blocks, and the spec keeps its run id */
	o.split = 1;
	t.hosts[1].train_positions_per_s = r;
	plan_of(&t, &s, &o, &plan);
	ck_assert_int_eq(chosen(&plan)->layers[0], 2);
	ck_assert_int_eq(chosen(&plan)->layers[1], 2);
	ck_assert_msg(pn_candidate_spec(&s, chosen(&plan), &out, err) == 0,
	    "%s", err);
	ck_assert(!out.layers_given);
	pn_plan_free(&plan);

	/* a host without the memory for more than one layer keeps one */
	t.hosts[1].train_positions_per_s = 3 * r;
	t.hosts[1].memory_bytes = pn_train_bytes(&s, 1) + 1;
	plan_of(&t, &s, &o, &plan);
	c = chosen(&plan);
	fast = uses(c, 0, 1) ? 0 : 1;
	ck_assert_int_eq(c->layers[fast], 1);
	ck_assert_int_eq(c->layers[1 - fast], 3);
	pn_plan_free(&plan);
	topo_free(&t);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("plan");
	TCase *tc = tcase_create("cost");

	tcase_add_test(tc, test_bt_passes_simulated);
	tcase_add_test(tc, test_slow_link_moves_replicas);
	tcase_add_test(tc, test_int8_only_when_link_bound);
	tcase_add_test(tc, test_fast_host);
	tcase_add_test(tc, test_shared_machine);
	tcase_add_test(tc, test_serve_pass_measured);
	tcase_add_test(tc, test_split_layers);
	tcase_add_test(tc, test_round_and_bytes_by_hand);
	tcase_add_test(tc, test_exchange_cpu);
	tcase_add_test(tc, test_update_bytes_real);
	tcase_add_test(tc, test_overlap_max_not_sum);
	tcase_add_test(tc, test_greedy_matches_exhaustive);
	suite_add_tcase(s, tc);
	tc = tcase_create("files");
	tcase_add_test(tc, test_written_plan_loads);
	tcase_add_test(tc, test_written_confs_load);
	tcase_add_test(tc, test_more_blocks_than_hosts);
	tcase_add_test(tc, test_written_pick);
	tcase_add_test(tc, test_same_steps);
	tcase_add_test(tc, test_command);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
