/* Verified averaging (daemon/blocktrain/verify.h) with a real block: three replicas
 * train H steps each from the same round-start weights on their own
 * shards; their honest updates all go in, while a poisoned one (noise
 * of sigma 100, every value 1e30, a real update's sign flipped and times
 * 10) is left out or bounded, the share stays that of the honest
 * average, and two replicas scoring on models of their own reach the
 * same bits.  A checkpoint worse than ours (all zero) is refused, ours
 * or a better one taken.  It also reports what the check costs against
 * the round's training. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/corpus.h"
#include "daemon/blocktrain/train.h"
#include "daemon/blocktrain/verify.h"
#include "kernels/average.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/rng.h"
#include "tests/testutil.h"

#define NREP 3
#define H 10                    /* local steps of the round */
#define PRE 20                  /* steps before the round, for weights
                                 * past their start */
#define OUTER_LR 0.7f

static char dir[64];
static pr_spec spec;
static char run_id[PR_RUN_ID_LEN];
static tr_trainer *tr[NREP];
static corpus valid;
static size_t n;
static float *start, *upd[NREP], *poison, *avg, *avg2;
static double train_s;          /* H steps of one replica */

static void
open_trainer(int k)
{
	char state[128], err[KN_ERR_LEN];
	tr_opts o = { 0 };

	snprintf(state, sizeof(state), "%s/r%d", dir, k);
	o.spec = &spec;
	o.run_id = run_id;
	o.dir = state;
	o.kind = BT_BLOCK;
	o.block = 1;
	o.replica = k;
	o.steps = 1000;
	o.be = kn_cpu_backend();
	ck_assert_msg(tr_trainer_open(&tr[k], &o, err) == 0, "%s", err);
}

static float *
floats(void)
{
	float *p = malloc(n * sizeof(float));

	ck_assert_ptr_nonnull(p);
	return p;
}

/* Every replica starts the round from the weights of replica 0 after
 * PRE steps, trains H steps on its own shard, and its update is start -
 * local. */
static void
setup(void)
{
	char path[128], err[KN_ERR_LEN];
	float loss;
	double t0;
	int k, i;

	tu_temp_dir(dir, sizeof(dir), "verify");
	tu_write_run(dir, 1, 1000, H, 5);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	ck_assert_msg(corpus_open(&valid, spec.valid, NULL,
	    (size_t)spec.window + 2, err) == 0, "%s", err);
	for (k = 0; k < NREP; k++)
		open_trainer(k);
	n = kn_model_num_params(tr_trainer_model(tr[0]));
	start = floats();
	poison = floats();
	avg = floats();
	avg2 = floats();
	for (i = 0; i < PRE; i++)
		ck_assert_int_eq(tr_trainer_step(tr[0], &loss, err), 0);
	kn_model_get_params(tr_trainer_model(tr[0]), start);
	for (k = 0; k < NREP; k++) {
		kn_model *m = tr_trainer_model(tr[k]);

		ck_assert_int_eq(kn_model_set_params(m, start, err), 0);
		t0 = kn_now();
		for (i = 0; i < H; i++)
			ck_assert_int_eq(tr_trainer_step(tr[k], &loss, err), 0);
		if (k == 0)
			train_s = kn_now() - t0;
		upd[k] = floats();
		kn_model_get_params(m, upd[k]);
		kn_update_delta(upd[k], start, upd[k], n);
	}
}

static void
teardown(void)
{
	int k;

	for (k = 0; k < NREP; k++) {
		tr_trainer_close(tr[k]);
		free(upd[k]);
	}
	free(start);
	free(poison);
	free(avg);
	free(avg2);
	corpus_close(&valid);
	tu_remove_dir(dir);
}

static vf_scorer
scorer(int k)
{
	vf_scorer sc = { 0 };

	sc.m = tr_trainer_model(tr[k]);
	sc.spec = &spec;
	sc.valid = &valid;
	bt_interval(&spec, BT_BLOCK, 0, &sc.lo, &sc.hi);
	sc.run_id = run_id;
	sc.block = 1;
	sc.windows = vf_windows_for(H, spec.batch, NREP);
	return sc;
}

/* The share of start - OUTER_LR * a on the round's cases. */
static double
share_of(const float *a)
{
	vf_scorer sc = scorer(0);
	float *theta = floats();
	char err[KN_ERR_LEN];
	vf_score s;

	memcpy(theta, start, n * sizeof(float));
	kn_outer_step(theta, a, OUTER_LR, n);
	ck_assert_int_eq(vf_checkpoint(&sc, 7, theta, theta, &s, err), 0);
	free(theta);
	return s.with;
}

/* vf_round on replicas 0 and 1's models: the same verdict and bits. */
static void
check_twice(const float *const *u, int m, vf_verdict *v)
{
	vf_scorer a = scorer(0), b = scorer(1);
	char err[KN_ERR_LEN];
	vf_verdict w;

	ck_assert_msg(vf_round(&a, 7, start, u, m, OUTER_LR, avg, v, err) == 0,
	    "%s", err);
	ck_assert_msg(vf_round(&b, 7, start, u, m, OUTER_LR, avg2, &w,
	    err) == 0, "%s", err);
	/* one update alone has nothing to be compared with */
	ck_assert_int_eq(v->checked, m > 1);
	ck_assert(v->left_out == w.left_out);
	ck_assert_int_eq(memcmp(avg, avg2, n * sizeof(float)), 0);
}

START_TEST(test_honest_all_in)
{
	const float *u[NREP] = { upd[0], upd[1], upd[2] };
	vf_verdict v;
	int m, i;

	for (m = 1; m <= NREP; m++) {
		check_twice(u, m, &v);
		for (i = 0; i < m; i++)
			fprintf(stderr, "# %d honest: update %d raises the share by "
			    "%+.4f (%.2f %% of %.4f; se %.4f; alone %+.4f se "
			    "%.4f)\n", m, i, v.of[i].rise, 100 * v.of[i].rise /
			    v.of[i].without, v.of[i].without, v.of[i].se,
			    v.of[i].solo_rise, v.of[i].solo_se);
		fprintf(stderr, "# the check of %d updates took %.3f s on %d "
		    "windows; %d steps of one replica %.3f s (%.1f %%)\n", m,
		    v.seconds, scorer(0).windows, H, train_s, 100 * v.seconds /
		    train_s);
		ck_assert_msg(v.left_out == 0, "%d honest updates: left out 0x%llx",
		    m, (unsigned long long)v.left_out);
	}
}
END_TEST

enum { SIGMA100, HUGE, FLIPPED, POISONS };
static const char *poison_name[] = { "sigma 100", "all 1e30",
    "flipped x10" };

static void
make_poison(int kind)
{
	size_t i;

	if (kind == SIGMA100)
		kn_rng_fill_normal(poison, n, 0.0f, 100.0f, 77, 1);
	for (i = 0; kind != SIGMA100 && i < n; i++)
		poison[i] = kind == HUGE ? 1e30f : -10.0f * upd[0][i];
}

/* With one poisoned update among two or three, the poisoned one is left
 * out or its pull bounded: no honest one is left out, the weights are
 * finite, and the share is within 2 % of where honest updates take it
 * (the worse of the m - 1 honest ones' combination and that of m). */
START_TEST(test_poison_left_out)
{
	const float *u[NREP];
	vf_verdict v;
	double honest, got;
	int kind, m, k;

	for (m = 2; m <= NREP; m++) {
		/* the worse of the honest combinations of m - 1 and m: where
		 * an honest m-th replica could take the share */
		for (k = 0; k < m; k++)
			u[k] = upd[k];
		ck_assert_int_eq(kn_robust_combine(avg, u, m - 1, n, NULL, NULL),
		    0);
		honest = share_of(avg);
		ck_assert_int_eq(kn_robust_combine(avg, u, m, n, NULL, NULL), 0);
		if (share_of(avg) > honest)
			honest = share_of(avg);
		for (kind = 0; kind < POISONS; kind++) {
			make_poison(kind);
			u[m - 1] = poison;
			check_twice(u, m, &v);
			ck_assert_msg((v.left_out & ((1ULL << (m - 1)) - 1)) == 0,
			    "%s among %d: an honest update left out (0x%llx)",
			    poison_name[kind], m, (unsigned long long)v.left_out);
			got = share_of(avg);
			fprintf(stderr, "# %s among %d: %s (rise %+.4f, se %.4f; "
			    "alone %+.4f, se %.4f); share %.4f, honest %.4f\n",
			    poison_name[kind], m, v.left_out ? "left out" :
			    "kept, bounded", v.of[m - 1].rise, v.of[m - 1].se,
			    v.of[m - 1].solo_rise, v.of[m - 1].solo_se, got,
			    honest);
			ck_assert_msg(isfinite(got) && got <= honest * 1.02,
			    "%s among %d: share %g, honest %g", poison_name[kind],
			    m, got, honest);
			/* among three or more, noise of sigma 100 and 1e30
			 * everywhere are far beyond an honest norm: left out
			 * for it, and so named, though clipping bounds them */
			if (kind != FLIPPED && m >= VF_OUTLIER_MIN)
				ck_assert_msg(v.left_out == 1ULL << (m - 1) &&
				    v.of[m - 1].outlier > VF_OUTLIER, "%s among %d: "
				    "not left out for its norm (%g)",
				    poison_name[kind], m, v.of[m - 1].outlier);
			/* a flipped update is a step up, the huge one's clipped
			 * direction too: both left out */
			if (kind == FLIPPED)
				ck_assert_msg(v.left_out == 1ULL << (m - 1), "%s among "
				    "%d: not left out (rise %g, se %g)",
				    poison_name[kind], m, v.of[m - 1].rise,
				    v.of[m - 1].se);
		}
	}
}
END_TEST

START_TEST(test_checkpoint_check)
{
	vf_scorer sc = scorer(0);
	float *ours = floats(), *zero = floats();
	char err[KN_ERR_LEN];
	vf_score s;

	memcpy(ours, start, n * sizeof(float));
	memset(zero, 0, n * sizeof(float));
	ck_assert_int_eq(vf_checkpoint(&sc, 3, ours, zero, &s, err), 0);
	fprintf(stderr, "# an all-zero checkpoint: %.4f against our %.4f\n",
	    s.with, s.without);
	ck_assert_int_eq(s.refused, 1);
	ck_assert_int_eq(vf_checkpoint(&sc, 3, ours, ours, &s, err), 0);
	ck_assert_int_eq(s.refused, 0);
	/* a checkpoint a round ahead (the honest average applied) */
	ck_assert_int_eq(kn_robust_combine(avg, (const float *const *)upd,
	    NREP, n, NULL, err), 0);
	memcpy(zero, start, n * sizeof(float));
	kn_outer_step(zero, avg, OUTER_LR, n);
	ck_assert_int_eq(vf_checkpoint(&sc, 3, ours, zero, &s, err), 0);
	ck_assert_int_eq(s.refused, 0);
	free(ours);
	free(zero);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("verify");
	TCase *tc = tcase_create("verify");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_honest_all_in);
	tcase_add_test(tc, test_poison_left_out);
	tcase_add_test(tc, test_checkpoint_check);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
