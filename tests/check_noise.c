/* The noise draws of [noise] (daemon/blocktrain/blocktrain.c): every draw's training
 * estimate of a fixed model's share is the plain stratified one's within
 * its standard error, on the same windows, with and without position
 * blocks, and at one byte per block nothing is drawn at all; the
 * keys leave the run ids of specs without them as they were; and the
 * equal-share cuts of a pilot fall where a closed form puts them. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/blocktrain/train.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/rng.h"
#include "proto/spec.h"
#include "tests/bt_fixture.h"
#include "tests/testutil.h"

enum { N = 16, BATCH = 16, ROUNDS = 40 };

static void
spec_of(pr_spec *s, int L, const char *noise)
{
	char text[512], err[PR_ERR_LEN] = "";

	snprintf(text, sizeof(text), "[model]\nblocks = 2\nwidth = 16\n"
	    "heads = 2\nlayers_per_block = 1\nwindow = %d\n"
	    "position_block = %d\np_prefix = 0.3\n[optim]\nbatch = %d\n"
	    "[noise]\n%s\n", N, L, BATCH, noise);
	ck_assert_msg(pr_spec_parse(s, text, strlen(text), err) == 0, "%s",
	    err);
}

/* A block of the spec's shape (tu_scaled_model). */
static kn_model *
make_model(const pr_spec *s, uint64_t seed)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);

	return tu_scaled_model(&shape, BATCH, seed);
}

/* est[r]: the training estimate of block 1's share (the interval (0, .5]
 * times the mean row loss) of the batch of step r. */
static void
estimates(kn_model *m, const pr_spec *s, const corpus *c, double *est)
{
	int rl = bt_row_len(s, BT_BLOCK), r, b;
	int32_t *in = malloc((size_t)BATCH * rl * 4);
	int32_t *tg = malloc((size_t)BATCH * rl * 4);
	float *w = malloc((size_t)BATCH * rl * 4), wl[BATCH];
	kn_batch batch = { in, tg, w, BATCH };
	char err[KN_ERR_LEN];

	for (r = 0; r < ROUNDS; r++) {
		bt_train_batch(s, c, BT_BLOCK, 0, 0, r, in, tg, w);
		ck_assert_int_eq(kn_model_eval(m, &batch, wl, err), 0);
		est[r] = 0.0;
		for (b = 0; b < BATCH; b++)
			est[r] += 0.5 * wl[b] / BATCH;
	}
	free(in);
	free(tg);
	free(w);
}

static double
mean_of(const double *x, int k)
{
	double m = 0.0;
	int i;

	for (i = 0; i < k; i++)
		m += x[i] / k;
	return m;
}

static double
var_of(const double *x, int k)
{
	double m = mean_of(x, k), v = 0.0;
	int i;

	for (i = 0; i < k; i++)
		v += (x[i] - m) * (x[i] - m) / (k - 1);
	return v;
}

static const struct {
	const char *name, *keys;
} draws[] = {
	{ "antithetic", "draw = antithetic" },
	{ "kform", "draw = kform" },
	{ "klevel", "draw = klevel" },
	{ "klevel tilt -0.5", "draw = klevel\ncount_tilt = -0.5" },
	{ "klevel tilt 1", "draw = klevel\ncount_tilt = 1" },
	/* tiny levels rare (4 times rarer than uniform), then common */
	{ "floor 0.02", "t_floor = 0.1\nfloor_share = 0.02" },
	{ "floor 0.6", "t_floor = 0.1\nfloor_share = 0.6" },
};
#define NDRAWS (sizeof(draws) / sizeof(draws[0]))

/* Every draw against the stratified one on the same windows (they draw
 * the same number of uniforms per window, so the batches share their
 * windows and prefixes): the mean of the paired differences is within
 * four of its standard errors of 0.  A weight off by a constant factor or
 * a density ratio upside down moves it by many. */
static void
check_unbiased(int L)
{
	size_t len = 20000, d;
	unsigned char *text = tu_letter_text(len, 12);
	corpus c = { text, len, NULL, 0 };
	double plain[ROUNDS], est[ROUNDS], diff[ROUNDS], mean, se, vp;
	pr_spec s;
	kn_model *m;
	char what[160];
	int r;

	spec_of(&s, L, "");
	m = make_model(&s, 7);
	estimates(m, &s, &c, plain);
	vp = var_of(plain, ROUNDS);
	for (d = 0; d < NDRAWS; d++) {
		spec_of(&s, L, draws[d].keys);
		estimates(m, &s, &c, est);
		for (r = 0; r < ROUNDS; r++)
			diff[r] = est[r] - plain[r];
		mean = mean_of(diff, ROUNDS);
		se = sqrt(var_of(diff, ROUNDS) / ROUNDS);
		snprintf(what, sizeof(what), "L = %d, %s: (estimate - "
		    "stratified) / its standard error", L, draws[d].name);
		tu_report(what, fabs(mean) / se);
		snprintf(what, sizeof(what), "L = %d, %s: variance of a "
		    "batch's estimate / stratified's", L, draws[d].name);
		tu_report(what, var_of(est, ROUNDS) / vp);
		ck_assert_msg(fabs(mean) < 4 * se, "L = %d, %s: %g against "
		    "%g, the difference %g +- %g", L, draws[d].name,
		    mean_of(est, ROUNDS), mean_of(plain, ROUNDS), mean, se);
		/* klevel is the stratified draw with the level integrated
		 * out: its spread can only be narrower (measured: an eighth
		 * of it in one block, a quarter with blocks of 4) */
		if (strcmp(draws[d].name, "klevel") == 0)
			ck_assert_msg(var_of(est, ROUNDS) < 0.5 * vp, "L = %d, "
			    "klevel: variance %g against stratified's %g", L,
			    var_of(est, ROUNDS), vp);
	}
	kn_model_free(m);
	free(text);
}

START_TEST(test_unbiased_one_block)
{
	check_unbiased(N);
}
END_TEST

START_TEST(test_unbiased_position_blocks)
{
	check_unbiased(4);
}
END_TEST

/* At one byte per block (the next-byte form) the level is integrated
 * out exactly and nothing is drawn: every draw of [noise] gives the
 * stratified rows, bit for bit, and so the same estimate. */
START_TEST(test_one_byte_blocks_draw_nothing)
{
	size_t len = 20000, d;
	unsigned char *text = tu_letter_text(len, 12);
	corpus c = { text, len, NULL, 0 };
	int rl, n = BATCH * N;
	int32_t *in[2], *tg[2];
	float *w[2];
	pr_spec s;
	int k;

	spec_of(&s, 1, "");
	rl = bt_row_len(&s, BT_BLOCK);
	ck_assert_int_eq(rl, N);
	for (k = 0; k < 2; k++) {
		in[k] = malloc((size_t)n * 4);
		tg[k] = malloc((size_t)n * 4);
		w[k] = malloc((size_t)n * 4);
	}
	bt_train_batch(&s, &c, BT_BLOCK, 0, 0, 5, in[0], tg[0], w[0]);
	for (d = 0; d < NDRAWS; d++) {
		spec_of(&s, 1, draws[d].keys);
		bt_train_batch(&s, &c, BT_BLOCK, 0, 0, 5, in[1], tg[1], w[1]);
		ck_assert_mem_eq(in[0], in[1], (size_t)n * 4);
		ck_assert_mem_eq(tg[0], tg[1], (size_t)n * 4);
		ck_assert_mem_eq(w[0], w[1], (size_t)n * 4);
	}
	for (k = 0; k < 2; k++) {
		free(in[k]);
		free(tg[k]);
		free(w[k]);
	}
	free(text);
}
END_TEST

/* The count form against the held-out share computed another way
 * (bt_eval_share: a table of the counts at position blocks, fixed levels
 * in one-block rows), without prompts, which the held-out rows have none
 * of. */
START_TEST(test_kform_matches_heldout)
{
	static const int Ls[] = { 4 };
	size_t len = 20000, i;
	unsigned char *text = tu_letter_text(len, 13);
	corpus c = { text, len, NULL, 0 };
	bt_eval_set set = { 256, 4 };
	double est[ROUNDS], share, mean, se;
	char err[KN_ERR_LEN];
	pr_spec s;
	kn_model *m;

	for (i = 0; i < sizeof(Ls) / sizeof(Ls[0]); i++) {
		spec_of(&s, Ls[i], "draw = kform");
		s.p_prefix = 0;
		m = make_model(&s, 8);
		estimates(m, &s, &c, est);
		ck_assert_int_eq(bt_eval_share(m, &s, &c, &set, 0.0, 0.5,
		    &share, err), 0);
		mean = mean_of(est, ROUNDS);
		se = sqrt(var_of(est, ROUNDS) / ROUNDS);
		tu_report("kform training estimate - held-out share (in its "
		    "standard errors)", fabs(mean - share) / se);
		ck_assert_msg(fabs(mean - share) < 4 * se + 0.01 * share,
		    "L = %d: held-out %g, training %g +- %g", Ls[i], share,
		    mean, se);
		kn_model_free(m);
	}
	free(text);
}
END_TEST

/* The keys at their defaults, written or not, leave the run id alone;
 * any other value moves it; a floor and the count form do not mix. */
START_TEST(test_spec_keys)
{
	static const char base[] = "[model]\nblocks = 2\n";
	static const char *const same[] = { "", "[noise]\ndraw = stratified\n",
		"[noise]\nt_floor = 0\nfloor_share = 0.05\n",
		"[noise]\ncount_tilt = 0\n" };
	static const char *const other[] = { "[noise]\ndraw = kform\n",
		"[noise]\ndraw = klevel\n",
		"[noise]\ndraw = klevel\ncount_tilt = -0.5\n",
		"[noise]\ndraw = antithetic\n", "[noise]\nt_floor = 0.01\n",
		"[noise]\nt_floor = 0.01\nfloor_share = 0.2\n" };
	char text[256], id0[PR_RUN_ID_LEN], id[PR_RUN_ID_LEN], ids[6][PR_RUN_ID_LEN];
	char err[PR_ERR_LEN] = "", printed[8192];
	size_t i, j, printed_len;
	pr_spec s;
	FILE *f;

	for (i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		snprintf(text, sizeof(text), "%s%s", base, same[i]);
		ck_assert_int_eq(pr_spec_parse(&s, text, strlen(text), err), 0);
		ck_assert_int_eq(pr_spec_run_id(&s, i ? id : id0, err), 0);
		if (i)
			ck_assert_str_eq(id, id0);
		/* and the printed spec stays as it was */
		ck_assert_ptr_nonnull(f = tmpfile());
		ck_assert_int_eq(pr_spec_print(f, &s), 0);
		tu_read_back(f, printed, sizeof(printed));
		ck_assert_ptr_null(strstr(printed, "[noise]"));
	}
	for (i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		snprintf(text, sizeof(text), "%s%s", base, other[i]);
		ck_assert_int_eq(pr_spec_parse(&s, text, strlen(text), err), 0);
		ck_assert_int_eq(pr_spec_run_id(&s, ids[i], err), 0);
		ck_assert_str_ne(ids[i], id0);
		/* printed, the keys read back to the same run */
		ck_assert_ptr_nonnull(f = tmpfile());
		ck_assert_int_eq(pr_spec_print(f, &s), 0);
		printed_len = tu_read_back(f, printed, sizeof(printed));
		ck_assert_msg(strstr(printed, "[noise]") != NULL, "%s", printed);
		ck_assert_int_eq(pr_spec_parse(&s, printed, printed_len, err), 0);
		ck_assert_int_eq(pr_spec_run_id(&s, id, err), 0);
		ck_assert_str_eq(id, ids[i]);
		for (j = 0; j < i; j++)
			ck_assert_str_ne(ids[i], ids[j]);
	}
	snprintf(text, sizeof(text), "%s[noise]\ndraw = kform\nt_floor = "
	    "0.1\n", base);
	ck_assert_int_ne(pr_spec_parse(&s, text, strlen(text), err), 0);
	ck_assert_msg(strstr(err, "t_floor") != NULL, "%s", err);
	snprintf(text, sizeof(text), "%s[noise]\ndraw = klevel\nt_floor = "
	    "0.1\n", base);
	ck_assert_int_ne(pr_spec_parse(&s, text, strlen(text), err), 0);
	ck_assert_msg(strstr(err, "klevel") != NULL, "%s", err);
	snprintf(text, sizeof(text), "%s[noise]\ndraw = kform\ncount_tilt = "
	    "-0.5\n", base);
	ck_assert_int_ne(pr_spec_parse(&s, text, strlen(text), err), 0);
	ck_assert_msg(strstr(err, "count_tilt") != NULL, "%s", err);
	snprintf(text, sizeof(text), "%s[noise]\ndraw = uniform\n", base);
	ck_assert_int_ne(pr_spec_parse(&s, text, strlen(text), err), 0);
	snprintf(text, sizeof(text), "%s[noise]\nfloor_share = 1\n", base);
	ck_assert_int_ne(pr_spec_parse(&s, text, strlen(text), err), 0);
}
END_TEST

/* Equal shares from a pilot's cells: cells of a bound with density 2t
 * give cuts at sqrt(b / T) (exact but for the linear step inside a
 * cell); equal cells give equal cuts; a share that is not positive is an
 * error. */
START_TEST(test_equal_cuts)
{
	enum { G = 64, T = 4 };
	double cells[G], cuts[T + 1];
	char err[KN_ERR_LEN];
	int g, b;

	for (g = 0; g < G; g++)
		cells[g] = ((g + 1.0) * (g + 1.0) - (double)g * g) / (G * G);
	ck_assert_int_eq(bt_equal_cuts(cells, G, T, cuts, err), 0);
	ck_assert_double_eq(cuts[0], 0.0);
	ck_assert_double_eq(cuts[T], 1.0);
	for (b = 1; b < T; b++)
		ck_assert_double_eq_tol(cuts[b], sqrt((double)b / T), 2e-4);
	for (g = 0; g < G; g++)
		cells[g] = 0.7;
	ck_assert_int_eq(bt_equal_cuts(cells, G, T, cuts, err), 0);
	for (b = 1; b < T; b++)
		ck_assert_double_eq_tol(cuts[b], (double)b / T, 1e-12);
	cells[5] = 0.0;
	ck_assert_int_eq(bt_equal_cuts(cells, G, T, cuts, err), KN_EINVAL);
	ck_assert_msg(strstr(err, "cell 6") != NULL, "%s", err);
}
END_TEST

/* shardmeter cuts on a small run: without a pilot it says how to get
 * one; with --pilot it trains the e2e reference, and the cells it prints
 * are that model's shares (recomputed here from its checkpoint) and its
 * cuts those bt_equal_cuts places on them, a line the spec takes. */
START_TEST(test_cuts_command)
{
	enum { G = 8 };
	char dir[64], out[8192], err[KN_ERR_LEN], text[1024], path[128];
	char id[PR_RUN_ID_LEN];
	unsigned char *valid = tu_letter_text(6000, 15);
	bt_eval_set set = { 64, BT_EVAL_STRATA };
	double cells[G], cuts[4], got, share;
	const char *p;
	pr_spec s;
	kn_model *m;
	corpus c;
	FILE *f;
	int g;

	tu_temp_dir(dir, sizeof(dir), "check_noise");
	snprintf(path, sizeof(path), "%s/valid.txt", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fwrite(valid, 1, 6000, f);
	fclose(f);
	snprintf(text, sizeof(text), "[model]\nblocks = 3\nwidth = 16\n"
	    "heads = 2\nlayers_per_block = 1\nwindow = %d\n[data]\n"
	    "train = valid.txt\nvalid = valid.txt\n[optim]\nbatch = 8\n"
	    "warmup = 5\n", N);
	tu_write_file(dir, "run.conf", text);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cuts --spec "
	    "%s/run.conf --dir %s/pilot", tu_shardmeter(), dir, dir), 1);
	ck_assert_msg(strstr(out, "--pilot") != NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cuts --spec "
	    "%s/run.conf --dir %s/pilot --pilot 10 --grid %d --windows 64 "
	    "2>/dev/null", tu_shardmeter(), dir, dir, G), 0);
	ck_assert_ptr_nonnull(p = strstr(out, "(0, 1]:\n#"));
	p += strlen("(0, 1]:\n#");
	for (g = 0; g < G; g++)
		cells[g] = strtod(p, (char **)&p);
	ck_assert_int_eq(bt_equal_cuts(cells, G, 3, cuts, err), 0);
	ck_assert_ptr_nonnull(p = strstr(out, "\ncuts = "));
	got = strtod(p + strlen("\ncuts = "), (char **)&p);
	ck_assert_double_eq_tol(got, cuts[1], 2e-4);
	ck_assert_double_eq_tol(strtod(p + 1, NULL), cuts[2], 2e-4);

	/* cell 3 again, from the checkpoint */
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&s, path, err), 0);
	snprintf(path, sizeof(path), "%s/pilot", dir);
	ck_assert_int_eq(pr_spec_run_id(&s, id, err), 0);
	ck_assert_int_eq(tr_load_model(&m, &s, id, path, BT_E2E, 0,
	    kn_cpu_backend(), 32, err), 0);
	ck_assert_int_eq(corpus_open(&c, s.valid, NULL, N + 2, err), 0);
	ck_assert_int_eq(bt_eval_share(m, &s, &c, &set, 2.0 / G, 3.0 / G,
	    &share, err), 0);
	corpus_close(&c);
	kn_model_free(m);
	ck_assert_double_eq_tol(cells[2], share, 1e-4);
	/* the printed line is a spec's */
	snprintf(text, sizeof(text), "[model]\nblocks = 3\n%s",
	    strstr(out, "cuts = "));
	ck_assert_msg(pr_spec_parse(&s, text, strlen(text), err) == 0, "%s",
	    err);
	ck_assert_double_eq_tol(s.cuts[1], cuts[1], 2e-4);
	tu_remove_dir(dir);
	free(valid);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("noise");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_spec_keys);
	tcase_add_test(tc, test_equal_cuts);
	tcase_add_test(tc, test_cuts_command);
	tcase_add_test(tc, test_unbiased_one_block);
	tcase_add_test(tc, test_unbiased_position_blocks);
	tcase_add_test(tc, test_one_byte_blocks_draw_nothing);
	tcase_add_test(tc, test_kform_matches_heldout);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
