/* Position blocks (DESIGN section 2): no position sees a later position
 * block, at one byte per block the bound is the next-byte cross-entropy
 * of the same weights, the training rows are laid out as the twin mask
 * reads them, and the held-out shares agree with the 1/t estimator the
 * blocks train on and add up over any cut of the noise range. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/rng.h"
#include "proto/spec.h"
#include "tests/bt_fixture.h"
#include "tests/testutil.h"

static void
spec_of(pr_spec *s, int window, int pos_block)
{
	char text[256], err[PR_ERR_LEN] = "";

	snprintf(text, sizeof(text), "[model]\nblocks = 2\nwidth = 32\n"
	    "heads = 2\nlayers_per_block = 2\nwindow = %d\n"
	    "position_block = %d\np_prefix = 0\n[optim]\nbatch = 16\n",
	    window, pos_block);
	ck_assert_msg(pr_spec_parse(s, text, strlen(text), err) == 0, "%s",
	    err);
}

/* A block of the spec's shape (tu_scaled_model). */
static kn_model *
make_model(const pr_spec *s, uint64_t seed)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);

	return tu_scaled_model(&shape, 32, seed);
}

/* -log softmax(logits)[y], in double. */
static double
xent(const float *logits, int y)
{
	double mx = logits[0], sum = 0.0;
	int v;

	for (v = 1; v < KN_VOCAB_OUT; v++)
		mx = fmax(mx, logits[v]);
	for (v = 0; v < KN_VOCAB_OUT; v++)
		sum += exp(logits[v] - mx);
	return mx + log(sum) - logits[y];
}

/* Serving rows (one window, attended block-causally): changing the bytes
 * of position block j changes no logit of blocks before j, bit for bit,
 * and does change block j's. */
START_TEST(test_later_blocks_unseen)
{
	enum { n = 12, L = 4, V = KN_VOCAB_OUT };
	pr_spec s;
	kn_model *m;
	int32_t x[n], y[n];
	float *a = malloc(n * V * sizeof(float)), *b = malloc(n * V * 4);
	char err[KN_ERR_LEN];
	int i, j;

	spec_of(&s, n, L);
	m = make_model(&s, 3);
	for (i = 0; i < n; i++)
		x[i] = i % 3 == 0 ? KN_MASK : 'a' + i;
	ck_assert_int_eq(kn_model_forward(m, x, 1, a, err), 0);
	for (j = 1; j < n / L; j++) {
		memcpy(y, x, sizeof(x));
		for (i = j * L; i < n; i++)
			y[i] = y[i] == KN_MASK ? 'q' : KN_MASK;
		ck_assert_int_eq(kn_model_forward(m, y, 1, b, err), 0);
		ck_assert_mem_eq(a, b, (size_t)j * L * V * sizeof(float));
		ck_assert(memcmp(a + j * L * V, b + j * L * V,
		    (size_t)L * V * sizeof(float)) != 0);
	}
	kn_model_free(m);
	free(a);
	free(b);
}
END_TEST

/* The loss of one row with weight 1 at position p alone. */
static float
loss_at(kn_model *m, const int32_t *in, const int32_t *tg, int T, int p)
{
	float *w = calloc((size_t)T, sizeof(float)), loss;
	kn_batch batch = { in, tg, w, 1 };
	char err[KN_ERR_LEN];

	w[p] = 1.0f;
	ck_assert_int_eq(kn_model_eval(m, &batch, &loss, err), 0);
	free(w);
	return loss;
}

/* Training rows (noisy copy, clean copy): a noisy position of block j
 * reads the clean copy of blocks before j and nothing of the noise of
 * other blocks or of the clean copy from block j on. */
START_TEST(test_twin_rows_see_clean_context_only)
{
	enum { n = 12, L = 4, T = 2 * n };
	pr_spec s;
	kn_model *m;
	int32_t in[T], tg[T], alt[T];
	int i, j, p;

	spec_of(&s, n, L);
	m = make_model(&s, 4);
	ck_assert_int_eq(kn_model_row_len(kn_model_get_shape(m)), T);
	for (i = 0; i < n; i++) {
		tg[i] = tg[n + i] = in[n + i] = 'a' + (i * 5) % 26;
		in[i] = i % 2 ? KN_MASK : tg[i];
	}
	for (j = 0; j < n / L; j++)
		for (p = j * L; p < (j + 1) * L; p++) {
			float base = loss_at(m, in, tg, T, p);

			/* other blocks' noisy copies, and the clean copy of
			 * block j and after */
			memcpy(alt, in, sizeof(in));
			for (i = 0; i < n; i++)
				if (i / L != j)
					alt[i] = alt[i] == KN_MASK ? 'z' : KN_MASK;
			for (i = n + j * L; i < T; i++)
				alt[i] = 'z';
			ck_assert_float_eq(loss_at(m, alt, tg, T, p), base);
			/* the clean context is read */
			if (j > 0) {
				memcpy(alt, in, sizeof(in));
				alt[n + j * L - 1] = 'z';
				ck_assert_float_ne(loss_at(m, alt, tg, T, p),
				    base);
			}
		}
	kn_model_free(m);
}
END_TEST

/* At one byte per block the shares of any cut of (0, 1] add up to the
 * next-byte cross-entropy of the same weights, on serving rows of the
 * next-byte form: the bytes before position i at positions 1..i (the
 * mask at 0), whatever after; the rows are one window, not two. */
START_TEST(test_one_byte_blocks_are_the_causal_lm)
{
	enum { n = 8, W = 48 };
	size_t len = 6000, off;
	unsigned char *text = tu_letter_text(len, 9);
	corpus c = { text, len, NULL, 0 };
	bt_eval_set set = { W, 2 };
	double lo_share, hi_share, whole, ce = 0.0, blind = 0.0;
	float *logits = malloc((size_t)n * KN_VOCAB_OUT * sizeof(float));
	char err[KN_ERR_LEN];
	int32_t x[n];
	pr_spec s;
	kn_model *m;
	int k, i, p;

	spec_of(&s, n, 1);
	m = make_model(&s, 5);
	ck_assert(kn_model_next_byte(kn_model_get_shape(m)));
	ck_assert_int_eq(kn_model_row_len(kn_model_get_shape(m)), n);
	ck_assert_int_eq(bt_eval_share(m, &s, &c, &set, 0.0, 0.3, &lo_share,
	    err), 0);
	ck_assert_int_eq(bt_eval_share(m, &s, &c, &set, 0.3, 1.0, &hi_share,
	    err), 0);
	ck_assert_int_eq(bt_eval_share(m, &s, &c, &set, 0.0, 1.0, &whole,
	    err), 0);
	/* the windows bt_eval_share scores: evenly spaced */
	for (k = 0; k < W; k++) {
		off = (size_t)((double)k * (double)(len - n - 1) / W);
		for (i = 0; i < n; i++) {
			for (p = 0; p < n; p++)
				x[p] = p == 0 ? KN_MASK : p <= i ?
				    text[off + p - 1] : 'z';
			ck_assert_int_eq(kn_model_forward(m, x, 1, logits, err),
			    0);
			ce += xent(logits + (size_t)i * KN_VOCAB_OUT,
			    text[off + i]);
			/* the same byte with no context at all */
			for (p = 0; p < n; p++)
				x[p] = KN_MASK;
			ck_assert_int_eq(kn_model_forward(m, x, 1, logits, err),
			    0);
			blind += xent(logits + (size_t)i * KN_VOCAB_OUT,
			    text[off + i]);
		}
	}
	ce /= (double)W * n;
	blind /= (double)W * n;
	tu_report("L = 1: bound - next-byte cross-entropy",
	    fabs(lo_share + hi_share - ce));
	ck_assert_double_eq_tol(lo_share + hi_share, ce, 1e-5);
	ck_assert_double_eq_tol(whole, ce, 1e-5);
	ck_assert_double_eq_tol(lo_share, 0.3 * ce, 1e-5);
	/* the context matters here, or the test would prove little */
	ck_assert_double_gt(fabs(blind - ce), 0.05);
	kn_model_free(m);
	free(logits);
	free(text);
}
END_TEST

/* Training rows of the next-byte form: one window shifted one on, every
 * byte a target at weight 1/n, and no byte of the row seen by an
 * earlier position. */
START_TEST(test_next_byte_rows)
{
	enum { n = 16 };
	size_t len = 4000;
	unsigned char *text = tu_letter_text(len, 12);
	corpus c = { text, len, NULL, 0 };
	int32_t *in, *tg, alt[n];
	float *w, base;
	pr_spec s;
	kn_model *m;
	int b, i;

	spec_of(&s, n, 1);
	ck_assert(bt_next_byte(&s, BT_BLOCK));
	ck_assert(bt_next_byte(&s, BT_E2E));
	ck_assert(!bt_next_byte(&s, BT_CAUSAL));
	ck_assert_int_eq(bt_row_len(&s, BT_BLOCK), n);
	in = malloc((size_t)s.batch * n * sizeof(int32_t));
	tg = malloc((size_t)s.batch * n * sizeof(int32_t));
	w = malloc((size_t)s.batch * n * sizeof(float));
	bt_train_batch(&s, &c, BT_BLOCK, 0, 0, 3, in, tg, w);
	for (b = 0; b < s.batch; b++)
		for (i = 0; i < n; i++) {
			size_t at = (size_t)b * n + (size_t)i;

			ck_assert_int_eq(in[at], i == 0 ? KN_MASK : tg[at - 1]);
			ck_assert_float_eq(w[at], 1.0f / n);
		}
	/* position i reads the row up to i, nothing after */
	m = make_model(&s, 8);
	for (i = 0; i < n - 1; i++) {
		base = loss_at(m, in, tg, n, i);
		memcpy(alt, in, sizeof(alt));
		alt[i + 1] = alt[i + 1] == 'z' ? 'y' : 'z';
		ck_assert_float_eq(loss_at(m, alt, tg, n, i), base);
		memcpy(alt, in, sizeof(alt));
		alt[i] = alt[i] == 'z' ? 'y' : 'z';
		ck_assert_float_ne(loss_at(m, alt, tg, n, i), base);
	}
	kn_model_free(m);
	free(in);
	free(tg);
	free(w);
	free(text);
}
END_TEST

/* bt_train_batch's rows: the noisy copy, each block masked at one level
 * (weight 1/(t n) on its masked bytes), and the clean copy with no
 * weight. */
START_TEST(test_train_rows)
{
	enum { n = 16, L = 4, T = 2 * n };
	size_t len = 4000;
	unsigned char *text = tu_letter_text(len, 10);
	corpus c = { text, len, NULL, 0 };
	int32_t *in, *tg;
	float *w;
	pr_spec s;
	int b, i, j, masked = 0, total = 0;

	spec_of(&s, n, L);
	ck_assert_int_eq(bt_row_len(&s, BT_BLOCK), T);
	ck_assert_int_eq(bt_row_len(&s, BT_E2E), T);
	ck_assert_int_eq(bt_row_len(&s, BT_CAUSAL), n);
	in = malloc((size_t)s.batch * T * sizeof(int32_t));
	tg = malloc((size_t)s.batch * T * sizeof(int32_t));
	w = malloc((size_t)s.batch * T * sizeof(float));
	bt_train_batch(&s, &c, BT_BLOCK, 1, 0, 7, in, tg, w);
	for (b = 0; b < s.batch; b++) {
		const int32_t *ib = in + (size_t)b * T, *tb = tg + (size_t)b * T;
		const float *wb = w + (size_t)b * T;

		for (i = 0; i < n; i++) {
			ck_assert_int_eq(tb[i], tb[n + i]);
			ck_assert_int_eq(ib[n + i], tb[i]);
			ck_assert_float_eq(wb[n + i], 0.0f);
		}
		for (j = 0; j < n / L; j++) {
			float wj = 0.0f;

			for (i = j * L; i < (j + 1) * L; i++) {
				total++;
				if (ib[i] != KN_MASK) {
					ck_assert_int_eq(ib[i], tb[i]);
					ck_assert_float_eq(wb[i], 0.0f);
					continue;
				}
				masked++;
				if (wj == 0.0f)
					wj = wb[i];
				ck_assert_float_eq(wb[i], wj);
				/* block 2 of 2: t in (0.5, 1] */
				ck_assert_float_ge(wb[i], 1.0f / n - 1e-6f);
				ck_assert_float_le(wb[i], 2.0f / n + 1e-6f);
			}
		}
	}
	/* about three in four masked */
	ck_assert_int_gt(masked, total / 2);
	ck_assert_int_lt(masked, total);
	free(in);
	free(tg);
	free(w);
	free(text);
}
END_TEST

/* The held-out share of blocks of 4 against the estimator the blocks
 * train on: (hi - lo) times the mean loss of bt_train_batch's rows, levels
 * drawn in (lo, hi], weights 1/(t n).  Two ways to one number. */
START_TEST(test_share_matches_training_estimator)
{
	enum { n = 16, L = 4, T = 2 * n, ROUNDS = 60 };
	size_t len = 30000;
	unsigned char *text = tu_letter_text(len, 11);
	corpus c = { text, len, NULL, 0 };
	bt_eval_set set = { 256, 4 };
	double share, mc = 0.0, mc2 = 0.0, se;
	char err[KN_ERR_LEN];
	int32_t *in, *tg;
	float *w, *wl;
	pr_spec s;
	kn_model *m;
	kn_batch batch;
	int r, b;

	spec_of(&s, n, L);
	m = make_model(&s, 6);
	ck_assert_int_eq(bt_eval_share(m, &s, &c, &set, 0.5, 1.0, &share,
	    err), 0);
	in = malloc((size_t)s.batch * T * sizeof(int32_t));
	tg = malloc((size_t)s.batch * T * sizeof(int32_t));
	w = malloc((size_t)s.batch * T * sizeof(float));
	wl = malloc((size_t)s.batch * sizeof(float));
	batch = (kn_batch){ in, tg, w, s.batch };
	for (r = 0; r < ROUNDS; r++) {
		double mean = 0.0;

		bt_train_batch(&s, &c, BT_BLOCK, 1, 0, r, in, tg, w);
		ck_assert_int_eq(kn_model_eval(m, &batch, wl, err), 0);
		for (b = 0; b < s.batch; b++)
			mean += 0.5 * wl[b] / s.batch;
		mc += mean / ROUNDS;
		mc2 += mean * mean / ROUNDS;
	}
	se = sqrt((mc2 - mc * mc) / (ROUNDS - 1));
	tu_report("L = 4: held-out share - training estimator (in its "
	    "standard errors)", fabs(share - mc) / se);
	ck_assert_msg(fabs(share - mc) < 4 * se + 0.01 * share, "share %g, "
	    "training estimator %g +- %g", share, mc, se);
	kn_model_free(m);
	free(in);
	free(tg);
	free(w);
	free(wl);
	free(text);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("posblock");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_later_blocks_unseen);
	tcase_add_test(tc, test_twin_rows_see_clean_context_only);
	tcase_add_test(tc, test_one_byte_blocks_are_the_causal_lm);
	tcase_add_test(tc, test_train_rows);
	tcase_add_test(tc, test_next_byte_rows);
	tcase_add_test(tc, test_share_matches_training_estimator);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
