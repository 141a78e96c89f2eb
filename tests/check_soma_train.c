/* SOMA training in one process (soma/trainer.c, text.c, model_file.c):
 * the seed, an expert started from it and a control, on text the test
 * makes; determinism, the frozen decoder (and an expert's own with
 * expert_decoder = delta), the compute count, and bad
 * model files refused with nothing changed. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "proto/checkpoint.h"
#include "soma/model_file.h"
#include "soma/text.h"
#include "soma/trainer.h"
#include "tests/testutil.h"

static char dir[256];
static char files[2][300];
static pr_spec spec;
static char run_id[PR_RUN_ID_LEN];

/* Two kinds of text, so that the two clusters differ: words of letters,
 * and lines of numbers. */
static void
make_text(const char *path, int kind, size_t len, uint64_t seed)
{
	static const char *const words[] = { "the", "river", "stone", "of",
	    "a", "green", "hill", "and", "light", "over" };
	FILE *f = fopen(path, "w");
	kn_rng r;
	size_t n = 0;

	ck_assert_ptr_nonnull(f);
	kn_rng_init(&r, seed, (uint64_t)kind);
	while (n < len) {
		if (kind == 0)
			n += (size_t)fprintf(f, "%s ",
			    words[kn_rng_below(&r, 10)]);
		else
			n += (size_t)fprintf(f, "%u,%u;\n",
			    (unsigned)kn_rng_below(&r, 1000),
			    (unsigned)kn_rng_below(&r, 100));
	}
	fclose(f);
}

/* The test spec's text, with extra [soma] lines. */
static void
spec_text(char *text, size_t len, const char *extra)
{
	snprintf(text, len, "seed = 5\nmethod = soma\n[soma]\n"
	    "experts = 2\nwidth = 8\nmlp_mult = 2\nlayers = 1\nwindow = 16\n"
	    "batch = 4\nperturbations = 4\nseed_steps = 6\nsteps = 4\n"
	    "eval_every = 2\n%sclusters = %s\n", extra, dir);
}

static void
setup(void)
{
	char text[1024], err[PR_ERR_LEN];
	int i;

	tu_temp_dir(dir, sizeof(dir), "check_soma_train");
	for (i = 0; i < 2; i++) {
		snprintf(files[i], sizeof(files[i]), "%s/cluster-%d.txt", dir,
		    i);
		make_text(files[i], i, 20000, 7);
	}
	spec_text(text, sizeof(text), "");
	ck_assert_msg(pr_spec_parse(&spec, text, strlen(text), err) == 0,
	    "%s", err);
	ck_assert(pr_spec_run_id(&spec, run_id, err) == 0);
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

static void
train(sa_kind k, int expert, long steps, uint64_t budget, const char *out,
    sa_result *res)
{
	const char *all[2] = { files[0], files[1] };
	sa_train_opts o = { 0 };
	char err[KN_ERR_LEN], seed[400];

	snprintf(seed, sizeof(seed), "%s/seed.ckpt", dir);
	o.spec = &spec;
	o.run_id = run_id;
	o.kind = k;
	o.expert = expert;
	o.steps = steps;
	o.budget = budget;
	o.train = k == SA_EXPERT ? all + expert : all;
	o.ntrain = k == SA_EXPERT ? 1 : 2;
	o.seed_path = seed;
	o.out_path = out;
	o.valid_windows = 16;
	o.be = kn_cpu_backend();
	ck_assert_msg(sa_train(&o, res, err) == 0, "%s", err);
}

/* A control of kind k on both clusters' text (which all holds), scored
 * on 8 validation windows; the caller sets steps, budget and paths. */
static void
control_opts(sa_train_opts *o, sa_kind k, const char **all)
{
	memset(o, 0, sizeof(*o));
	o->spec = &spec;
	o->run_id = run_id;
	o->kind = k;
	o->train = all;
	o->ntrain = 2;
	o->valid_windows = 8;
	o->be = kn_cpu_backend();
}

static float *
load(const char *path, const char *kind, int block, const kn_soma_shape *s,
    float **dec)
{
	float *body = malloc(kn_soma_body_params(s) * sizeof(float));
	pr_ckpt_meta want = { .block = block };
	char err[KN_ERR_LEN];

	*dec = malloc(kn_soma_decoder_params(s) * sizeof(float));
	snprintf(want.kind, sizeof(want.kind), "%s", kind);
	snprintf(want.run_id, sizeof(want.run_id), "%s", run_id);
	ck_assert_msg(sa_model_load(path, &want, s, body, *dec, NULL, err) ==
	    0, "%s", err);
	return body;
}

START_TEST(test_seed_then_expert)
{
	kn_soma_shape s = sa_expert_shape(&spec);
	size_t nb = kn_soma_body_params(&s), nd = kn_soma_decoder_params(&s);
	char seedp[400], e1[400], e2[400];
	float *sb, *sd, *eb, *ed, *fb, *fd;
	sa_result r;

	snprintf(seedp, sizeof(seedp), "%s/seed.ckpt", dir);
	snprintf(e1, sizeof(e1), "%s/expert-1.ckpt", dir);
	snprintf(e2, sizeof(e2), "%s/expert-1b.ckpt", dir);
	train(SA_SEED, 0, -1, 0, seedp, &r);
	ck_assert_int_eq(r.steps, 6);
	/* 2P + 1 positions per seed step: SPSA's copies and the delta rule */
	ck_assert_uint_eq(r.positions, 6 * (2 * 4 + 1) * 4 * 16);
	ck_assert(isfinite(r.val) && r.val > 0 && r.val < 6);
	train(SA_EXPERT, 1, -1, 0, e1, &r);
	ck_assert_int_eq(r.steps, 4);
	ck_assert_uint_eq(r.positions, 4 * 2 * 4 * 4 * 16);
	/* the same key gives the same bytes */
	train(SA_EXPERT, 1, -1, 0, e2, &r);
	sb = load(seedp, "seed", 0, &s, &sd);
	eb = load(e1, "expert", 1, &s, &ed);
	fb = load(e2, "expert", 1, &s, &fd);
	ck_assert_mem_eq(eb, fb, nb * sizeof(float));
	/* the expert moved its body from the seed's, not the decoder */
	ck_assert_mem_eq(sd, ed, nd * sizeof(float));
	ck_assert(memcmp(sb, eb, nb * sizeof(float)) != 0);
	free(sb); free(sd); free(eb); free(ed); free(fb); free(fd);
}
END_TEST

/* [soma] expert_decoder = delta: the expert goes on learning its own
 * decoder, each step counts the delta rule's pass, and the key names
 * another run; written at its default, frozen, it names the same run as
 * a spec without it. */
START_TEST(test_expert_decoder_delta)
{
	kn_soma_shape s = sa_expert_shape(&spec);
	size_t nb = kn_soma_body_params(&s), nd = kn_soma_decoder_params(&s);
	char seedp[400], e1[400], err[PR_ERR_LEN], text[1024];
	char frozen_id[PR_RUN_ID_LEN], id[PR_RUN_ID_LEN];
	float *sb, *sd, *eb, *ed;
	pr_spec same;
	sa_result r;

	spec_text(text, sizeof(text), "expert_decoder = frozen\n");
	ck_assert_msg(pr_spec_parse(&same, text, strlen(text), err) == 0,
	    "%s", err);
	ck_assert(pr_spec_run_id(&same, frozen_id, err) == 0);
	ck_assert_str_eq(frozen_id, run_id);
	snprintf(spec.soma.expert_decoder, sizeof(spec.soma.expert_decoder),
	    "delta");
	ck_assert(pr_spec_run_id(&spec, id, err) == 0);
	ck_assert_str_ne(id, frozen_id);
	snprintf(run_id, sizeof(run_id), "%s", id);
	ck_assert_int_eq(sa_expert_decoder_learns(&spec), 1);

	snprintf(seedp, sizeof(seedp), "%s/seed.ckpt", dir);
	snprintf(e1, sizeof(e1), "%s/expert-1.ckpt", dir);
	train(SA_SEED, 0, -1, 0, seedp, &r);
	train(SA_EXPERT, 1, -1, 0, e1, &r);
	ck_assert_int_eq(r.steps, 4);
	ck_assert_uint_eq(r.positions, 4 * (2 * 4 + 1) * 4 * 16);
	ck_assert_uint_eq(sa_soma_positions(&spec),
	    (6 + 2 * 4) * (2 * 4 + 1) * 4 * 16);
	sb = load(seedp, "seed", 0, &s, &sd);
	eb = load(e1, "expert", 1, &s, &ed);
	ck_assert(memcmp(sd, ed, nd * sizeof(float)) != 0);
	ck_assert(memcmp(sb, eb, nb * sizeof(float)) != 0);
	free(sb); free(sd); free(eb); free(ed);
}
END_TEST

/* An expert's whole run, and an EGGROLL run, give the same bytes with one
 * thread and with three: every parallel sum has a fixed order. */
START_TEST(test_threads_bitwise)
{
	kn_soma_shape s = sa_expert_shape(&spec), c = sa_control_shape(&spec);
	size_t nb = kn_soma_body_params(&s), nc = kn_soma_body_params(&c);
	char seedp[400], p[2][400], g[2][400], err[KN_ERR_LEN];
	float *b[2], *d[2], *e[2], *f[2];
	sa_result r;
	int i;

	snprintf(seedp, sizeof(seedp), "%s/seed.ckpt", dir);
	for (i = 0; i < 2; i++) {
		snprintf(p[i], sizeof(p[i]), "%s/expert-0.%d.ckpt", dir, i);
		snprintf(g[i], sizeof(g[i]), "%s/eggroll.%d.ckpt", dir, i);
		kn_pool_shutdown();
		ck_assert_int_eq(kn_pool_init(i == 0 ? 1 : 3, err), 0);
		train(SA_SEED, 0, 3, 0, seedp, &r);
		train(SA_EXPERT, 0, 3, 0, p[i], &r);
		{
			const char *all[2] = { files[0], files[1] };
			sa_train_opts o;

			control_opts(&o, SA_EGGROLL, all);
			o.steps = 3;
			o.out_path = g[i];
			ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
		}
		b[i] = load(p[i], "expert", 0, &s, &d[i]);
		e[i] = load(g[i], "eggroll", 0, &c, &f[i]);
	}
	ck_assert_mem_eq(b[0], b[1], nb * sizeof(float));
	ck_assert_mem_eq(e[0], e[1], nc * sizeof(float));
	for (i = 0; i < 2; i++) {
		free(b[i]); free(d[i]); free(e[i]); free(f[i]);
	}
	kn_pool_shutdown();
}
END_TEST

START_TEST(test_controls_budget)
{
	kn_soma_shape e = sa_expert_shape(&spec), c = sa_control_shape(&spec);
	uint64_t per = sa_step_positions(&spec, SA_SPSA, 8);
	char out[400];
	sa_result r;

	/* the control has at most N experts' body parameters, and the next
	 * width would have more */
	ck_assert_uint_le(kn_soma_body_params(&c), 2 * kn_soma_body_params(&e));
	c.width++;
	ck_assert_uint_gt(kn_soma_body_params(&c), 2 * kn_soma_body_params(&e));
	ck_assert_uint_eq(sa_soma_positions(&spec),
	    6 * 9 * 64 + 2 * 4 * 8 * 64);
	snprintf(out, sizeof(out), "%s/spsa-p8.ckpt", dir);
	/* P = 8: steps are the budget over the positions of one step,
	 * rounded up */
	{
		const char *all[2] = { files[0], files[1] };
		sa_train_opts o;
		char err[KN_ERR_LEN];

		control_opts(&o, SA_SPSA, all);
		o.P = 8;
		o.steps = -1;
		o.budget = 5 * per - 1;
		o.out_path = out;
		ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
		ck_assert_int_eq(r.steps, 5);
		o.kind = SA_EGGROLL;
		snprintf(out, sizeof(out), "%s/eggroll-p8.ckpt", dir);
		ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
		ck_assert(isfinite(r.val));
		o.kind = SA_BPTT;
		o.budget = 0;
		o.steps = 3;
		snprintf(out, sizeof(out), "%s/bptt.ckpt", dir);
		ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
		ck_assert_uint_eq(r.positions, 3 * 4 * 16);
	}
}
END_TEST

/* Reads a whole file into a new buffer. */
static char *
slurp(const char *path, size_t *len)
{
	char err[PR_ERR_LEN], *buf = NULL;

	ck_assert_msg(pr_ckpt_read_file(path, 1 << 24, &buf, len, err) == 0,
	    "%s", err);
	return buf;
}

/* The control at SOMA's forward multiply-adds: fewer positions than
 * SOMA's, by the ratio of the shapes' multiply-adds a position, and
 * the snapshot a longer run writes on the way is, bit for bit, what a
 * run of that budget writes at its end, for SPSA and EGGROLL alike. */
START_TEST(test_equal_macs_snapshot)
{
	kn_soma_shape e = sa_expert_shape(&spec), c = sa_control_shape(&spec);
	uint64_t eq = sa_control_equal_macs_positions(&spec);
	uint64_t per = sa_step_positions(&spec, SA_SPSA, 8);
	const char *all[2] = { files[0], files[1] };
	static const sa_kind kinds[] = { SA_SPSA, SA_EGGROLL };
	char full[400], snap[400], alone[400], err[KN_ERR_LEN];
	sa_train_opts o;
	sa_result r;
	size_t la, lb;
	char *a, *b;
	int i;

	ck_assert_uint_gt(kn_soma_forward_macs(&c), kn_soma_forward_macs(&e));
	ck_assert_uint_lt(eq, sa_soma_positions(&spec));
	ck_assert_uint_eq(eq, sa_soma_positions(&spec) *
	    kn_soma_forward_macs(&e) / kn_soma_forward_macs(&c));
	ck_assert(fabs(sa_soma_macs(&spec) - (double)sa_soma_positions(&spec) *
	    (double)kn_soma_forward_macs(&e)) < 1);
	for (i = 0; i < 2; i++) {
		snprintf(full, sizeof(full), "%s/full-%d.ckpt", dir, i);
		snprintf(snap, sizeof(snap), "%s/snap-%d.ckpt", dir, i);
		snprintf(alone, sizeof(alone), "%s/alone-%d.ckpt", dir, i);
		control_opts(&o, kinds[i], all);
		o.P = 8;
		o.steps = -1;
		o.budget = 7 * per;
		o.snapshot_at = 3 * per + 1;
		o.snapshot_path = snap;
		o.out_path = full;
		ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
		ck_assert_int_eq(r.steps, 7);
		ck_assert_int_eq(r.snapshot_steps, 4);
		ck_assert_uint_eq(r.snapshot_positions, 4 * per);
		o.budget = o.snapshot_at;
		o.snapshot_at = 0;
		o.out_path = alone;
		ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
		ck_assert_int_eq(r.steps, 4);
		ck_assert_int_eq(r.snapshot_steps, 0);
		a = slurp(snap, &la);
		b = slurp(alone, &lb);
		ck_assert_uint_eq(la, lb);
		ck_assert_mem_eq(a, b, la);
		free(a);
		free(b);
		/* and the longer run went on past it */
		a = slurp(full, &la);
		b = slurp(snap, &lb);
		ck_assert(la != lb || memcmp(a, b, la) != 0);
		free(a);
		free(b);
	}
	kn_pool_shutdown();
}
END_TEST

/* A control whose decoder learns for its first 2 steps only: its decoder
 * after 5 steps is the one after 2, its body moves on, and the steps
 * past 2 cost the delta rule's pass less, in the budget and the count. */
START_TEST(test_decoder_steps)
{
	kn_soma_shape c = sa_control_shape(&spec);
	size_t nb = kn_soma_body_params(&c), nd = kn_soma_decoder_params(&c);
	uint64_t per = sa_step_positions(&spec, SA_SPSA, 8), bt = 4 * 16;
	const char *all[2] = { files[0], files[1] };
	char a[400], b[400], f[400], err[KN_ERR_LEN];
	float *ab, *ad, *bb, *bd, *fb, *fd;
	sa_train_opts o;
	sa_result r;

	snprintf(a, sizeof(a), "%s/spsa-a.ckpt", dir);
	snprintf(b, sizeof(b), "%s/spsa-b.ckpt", dir);
	snprintf(f, sizeof(f), "%s/spsa-f.ckpt", dir);
	control_opts(&o, SA_SPSA, all);
	o.P = 8;
	o.decoder_steps = 2;
	o.steps = 2;
	o.out_path = a;
	ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
	ck_assert_uint_eq(r.positions, 2 * per);
	o.steps = -1;
	o.budget = 2 * per + 3 * (per - bt);
	o.out_path = b;
	ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
	ck_assert_int_eq(r.steps, 5);
	ck_assert_uint_eq(r.positions, o.budget);
	/* the same 5 steps with the decoder learning throughout */
	o.decoder_steps = 0;
	o.budget = 0;
	o.steps = 5;
	o.out_path = f;
	ck_assert_msg(sa_train(&o, &r, err) == 0, "%s", err);
	ck_assert_uint_eq(r.positions, 5 * per);
	ab = load(a, "spsa", 0, &c, &ad);
	bb = load(b, "spsa", 0, &c, &bd);
	fb = load(f, "spsa", 0, &c, &fd);
	ck_assert_mem_eq(ad, bd, nd * sizeof(float));
	ck_assert(memcmp(ab, bb, nb * sizeof(float)) != 0);
	ck_assert(memcmp(bd, fd, nd * sizeof(float)) != 0);
	free(ab); free(ad); free(bb); free(bd); free(fb); free(fd);
}
END_TEST

START_TEST(test_text)
{
	const char *all[2] = { files[0], files[1] };
	int32_t a[4 * 17], b[4 * 17], v[17];
	char err[KN_ERR_LEN];
	sa_text t;
	int i, n;

	ck_assert_msg(sa_text_open(&t, all, 2, SA_TEXT_VALID_SHARE, 16, err) ==
	    0, "%s", err);
	ck_assert_uint_eq(t.train_total + t.valid_total,
	    t.files[0].len + t.files[1].len);
	sa_text_batch(&t, 1, 2, 3, 4, 16, a);
	sa_text_batch(&t, 1, 2, 3, 4, 16, b);
	ck_assert_mem_eq(a, b, sizeof(a));
	sa_text_batch(&t, 1, 2, 4, 4, 16, b);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	/* validation windows come from the held-out tails only */
	n = sa_text_valid_count(&t, 16, 1000);
	ck_assert_int_gt(n, 10);
	for (i = 0; i < n; i++) {
		int f, found = 0;

		sa_text_valid_window(&t, i, n, 16, v);
		for (f = 0; f < 2 && !found; f++) {
			size_t p;

			for (p = t.train_len[f]; p + 17 <= t.files[f].len &&
			    !found; p++) {
				int j;

				for (j = 0; j < 17 &&
				    t.files[f].data[p + j] == v[j]; j++)
					;
				found = j == 17;
			}
		}
		ck_assert_msg(found, "validation window %d is not held out", i);
	}
	sa_text_close(&t);
	ck_assert_int_eq(sa_text_open(&t, all, 2, 0.02, 40000, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "cluster-0.txt"));
}
END_TEST

START_TEST(test_bad_model_files)
{
	kn_soma_shape s = sa_expert_shape(&spec), wide = s;
	size_t nb = kn_soma_body_params(&s), nd = kn_soma_decoder_params(&s);
	float *body = calloc(nb, sizeof(float)), *dec = calloc(nd,
	    sizeof(float)), *got = malloc(nb * sizeof(float));
	pr_ckpt_meta meta = { .block = 3, .kind = "expert" }, want = meta;
	char path[400], err[KN_ERR_LEN], *buf;
	size_t len;
	FILE *f;

	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	snprintf(path, sizeof(path), "%s/m.ckpt", dir);
	body[0] = 1.5f;
	ck_assert(sa_model_save(path, &meta, &s, body, dec, err) == 0);
	memset(got, 0x5a, nb * sizeof(float));
	/* another kind, another expert, another shape: refused, untouched */
	strcpy(want.kind, "seed");
	ck_assert_int_eq(sa_model_load(path, &want, &s, got, NULL, NULL, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "kind"));
	want = meta;
	want.block = 2;
	ck_assert_int_eq(sa_model_load(path, &want, &s, got, NULL, NULL, err),
	    KN_EINVAL);
	wide.width++;
	ck_assert_int_eq(sa_model_load(path, &meta, &wide, NULL, NULL, NULL,
	    err), KN_EINVAL);
	ck_assert_int_eq(((unsigned char *)got)[0], 0x5a);
	/* truncated */
	ck_assert(pr_ckpt_read_file(path, 1 << 24, &buf, &len, err) == 0);
	f = fopen(path, "w");
	fwrite(buf, 1, len / 2, f);
	fclose(f);
	free(buf);
	ck_assert_int_eq(sa_model_load(path, &meta, &s, got, NULL, NULL, err),
	    KN_EINVAL);
	ck_assert_int_eq(((unsigned char *)got)[0], 0x5a);
	free(body);
	free(dec);
	free(got);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("soma_train");
	TCase *tc = tcase_create("soma_train");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_seed_then_expert);
	tcase_add_test(tc, test_controls_budget);
	tcase_add_test(tc, test_equal_macs_snapshot);
	tcase_add_test(tc, test_decoder_steps);
	tcase_add_test(tc, test_expert_decoder_delta);
	tcase_add_test(tc, test_threads_bitwise);
	tcase_add_test(tc, test_text);
	tcase_add_test(tc, test_bad_model_files);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
