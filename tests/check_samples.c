/* shardmeter eval --samples: the measure of a run's samples, on a tiny
 * run trained on system text, with word lists the test writes. */
#include "config.h"

#include <check.h>
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#define WINDOW 40
#define PROMPT 6
#define SPLIT "/usr/share/common-licenses/GPL-2"

static const char *tool;
static char dir[64];

/* Every run of ASCII letters of SPLIT, one a line: a word list that
 * holds each word of the split's text. */
static void
write_split_words(void)
{
	char path[128];
	FILE *in = fopen(SPLIT, "rb"), *out;
	int c, inword = 0;

	ck_assert_ptr_nonnull(in);
	snprintf(path, sizeof(path), "%s/split-words", dir);
	ck_assert_ptr_nonnull(out = fopen(path, "w"));
	while ((c = getc(in)) != EOF) {
		int letter = c < 128 && isalpha(c);

		if (letter)
			putc(c, out);
		else if (inword)
			putc('\n', out);
		inword = letter;
	}
	fclose(in);
	fclose(out);
}

static void
train_once(void)
{
	char out[4096];

	tool = tu_shardmeter();
	tu_temp_dir(dir, sizeof(dir), "check_samples");
	tu_write_file(dir, "run.conf", "seed = 5\n[model]\nblocks = 2\n"
	    "width = 32\nheads = 2\nlayers_per_block = 1\nwindow = 40\n"
	    "[data]\ntrain = /usr/share/common-licenses/GPL-3\n"
	    "valid = " SPLIT "\ntest = " SPLIT "\n"
	    "[optim]\nbatch = 8\nsteps = 30\nwarmup = 5\nlr = 3e-3\n");
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/run.conf --dir %s/run --all --quiet --threads 2 && %s train "
	    "--spec %s/run.conf --dir %s/run --reference causal --quiet "
	    "--threads 2 && mkdir -p %s/blocks && cp %s/run/block-*.ckpt "
	    "%s/blocks/", tool, dir, dir, tool, dir, dir, dir, dir, dir) == 0,
	    "training: %s", out);
	/* the run again with its end-to-end reference beside it */
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/run.conf --dir %s/ref --reference e2e --quiet --threads 2 && "
	    "mkdir -p %s/with-e2e && cp %s/run/*.ckpt %s/ref/e2e.ckpt "
	    "%s/with-e2e/", tool, dir, dir, dir, dir, dir, dir) == 0,
	    "training the e2e reference: %s", out);
	write_split_words();
	tu_write_file(dir, "no-words", "zzqqx\n");
}

static void
cleanup_once(void)
{
	tu_remove_dir(dir);
}

/* eval --samples on run directory d with the extra arguments; its JSON
 * (the test fails when it does not exit 0 with one). */
static json_t *
samples_json(const char *d, const char *extra)
{
	static char out[1 << 16];
	json_error_t jerr;
	json_t *o;
	int rc;

	rc = tu_run_cmd(out, sizeof(out), "%s eval --spec %s/run.conf --dir "
	    "%s/%s --split test --samples 5 --prompt-bytes %d --json %s "
	    "2>/dev/null", tool, dir, dir, d, PROMPT, extra);
	ck_assert_msg(rc == 0, "eval --samples %s: %d\n%s", extra, rc, out);
	o = json_loads(out, 0, &jerr);
	ck_assert_msg(o != NULL, "not JSON (%s): %s", jerr.text, out);
	return o;
}

static json_t *
row(json_t *o, size_t i)
{
	json_t *r = json_array_get(json_object_get(o, "rows"), i);

	ck_assert_ptr_nonnull(r);
	return r;
}

static double
num(json_t *r, const char *key)
{
	json_t *v = json_object_get(r, key);

	ck_assert_msg(json_is_number(v), "%s is not a number", key);
	return json_number_value(v);
}

/* Row i of a and of b hold the same samples: every figure but the time
 * the same. */
static void
same_figures(json_t *a, json_t *b, size_t i, const char *what)
{
	static const char *const keys[] = { "gen_ce", "entropy", "dict_share",
		"words" };
	size_t k;

	for (k = 0; k < 4; k++)
		ck_assert_msg(num(row(a, i), keys[k]) == num(row(b, i), keys[k]),
		    "row %zu: %s moved %s", i, keys[k], what);
}

/* The rows: the split's own text, the causal LM, then each decoder at
 * each step count; every figure in its range, a traversal for each
 * BlockTrain sample and one per byte for the causal LM's. */
START_TEST(test_rows)
{
	char extra[256];
	json_t *o, *r;
	size_t i;

	snprintf(extra, sizeof(extra), "--decode random,sampled --steps 4,12 "
	    "--words %s/split-words", dir);
	o = samples_json("run", extra);
	ck_assert_int_eq(json_array_size(json_object_get(o, "rows")), 6);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "window")),
	    WINDOW);
	r = row(o, 0);
	ck_assert_str_eq(json_string_value(json_object_get(r, "samples")),
	    "text (the split)");
	/* every word of the split is in this list */
	ck_assert_msg(num(r, "words") > 0, "no word counted in the text");
	ck_assert_msg(num(r, "dict_share") == 1.0, "the split's words are "
	    "not all found in a list of them: %g", num(r, "dict_share"));
	ck_assert_str_eq(json_string_value(json_object_get(row(o, 1),
	    "samples")), "causal LM, T=1");
	ck_assert_int_eq((int)num(row(o, 1), "traversals"), WINDOW - PROMPT);
	for (i = 0; i < 6; i++) {
		r = row(o, i);
		ck_assert(num(r, "gen_ce") > 0.0 && num(r, "gen_ce") < 20.0);
		/* at most log of the bytes a sample has */
		ck_assert(num(r, "entropy") > 0.0 &&
		    num(r, "entropy") <= log(WINDOW - PROMPT) + 1e-9);
		ck_assert(num(r, "dict_share") >= 0.0 &&
		    num(r, "dict_share") <= 1.0);
		if (i >= 2) {
			ck_assert_int_eq((int)num(r, "traversals"), 1);
			ck_assert_int_eq((int)num(r, "steps"),
			    (i - 2) % 2 == 0 ? 4 : 12);
		}
	}
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(row(o,
	    2), "samples")), "random"));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(row(o,
	    4), "samples")), "sampled"));
	json_decref(o);
}
END_TEST

/* The same samples each time: every figure but the time repeats; a list
 * without the words finds none of them, in the same count of words. */
START_TEST(test_repeatable_and_words)
{
	char extra[256];
	json_t *a, *b, *c;
	size_t i;

	snprintf(extra, sizeof(extra), "--decode margin --steps 8 --words "
	    "%s/split-words", dir);
	a = samples_json("run", extra);
	b = samples_json("run", extra);
	snprintf(extra, sizeof(extra), "--decode margin --steps 8 --words "
	    "%s/no-words", dir);
	c = samples_json("run", extra);
	for (i = 0; i < 3; i++) {
		same_figures(a, b, i, "on a second run");
		ck_assert(num(row(c, i), "dict_share") == 0.0);
		ck_assert(num(row(c, i), "words") == num(row(a, i), "words"));
	}
	json_decref(a);
	json_decref(b);
	json_decref(c);
}
END_TEST

/* Without the causal LM: no anchor row and no cross-entropy; with
 * another run's named, the figures that run's own LM gives. */
START_TEST(test_without_causal)
{
	char extra[512];
	json_t *o, *own, *judged;
	size_t i;

	snprintf(extra, sizeof(extra), "--decode confidence --steps 8 "
	    "--words %s/split-words", dir);
	o = samples_json("blocks", extra);
	ck_assert_int_eq(json_array_size(json_object_get(o, "rows")), 2);
	ck_assert(json_is_null(json_object_get(row(o, 1), "gen_ce")));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(row(o,
	    1), "samples")), "confidence"));
	json_decref(o);
	own = samples_json("run", extra);
	snprintf(extra, sizeof(extra), "--decode confidence --steps 8 "
	    "--words %s/split-words --causal-spec %s/run.conf --causal-dir "
	    "%s/run", dir, dir, dir);
	judged = samples_json("blocks", extra);
	ck_assert_int_eq(json_array_size(json_object_get(judged, "rows")), 3);
	for (i = 0; i < 3; i++)
		ck_assert_msg(num(row(own, i), "gen_ce") ==
		    num(row(judged, i), "gen_ce"), "row %zu", i);
	json_decref(own);
	json_decref(judged);
}
END_TEST

/* With the e2e reference in the run's directory: the blocks' rows as
 * without it, then the same sets drawn by the reference, named for it,
 * one traversal each, other samples than the blocks' and the same ones
 * each time. */
START_TEST(test_e2e_rows)
{
	char extra[256];
	json_t *own, *a, *b;
	size_t i;
	int differ = 0;

	snprintf(extra, sizeof(extra), "--decode random,sampled --steps 6 "
	    "--words %s/split-words", dir);
	own = samples_json("run", extra);
	a = samples_json("with-e2e", extra);
	b = samples_json("with-e2e", extra);
	ck_assert_int_eq(json_array_size(json_object_get(own, "rows")), 4);
	ck_assert_int_eq(json_array_size(json_object_get(a, "rows")), 6);
	for (i = 0; i < 4; i++)
		same_figures(own, a, i, "with the e2e reference beside the "
		    "blocks");
	ck_assert_str_eq(json_string_value(json_object_get(row(a, 4),
	    "samples")), "e2e random, T=1");
	ck_assert_str_eq(json_string_value(json_object_get(row(a, 5),
	    "samples")), "e2e sampled, T=1");
	for (i = 4; i < 6; i++) {
		ck_assert_int_eq((int)num(row(a, i), "traversals"), 1);
		ck_assert_int_eq((int)num(row(a, i), "steps"), 6);
		ck_assert(num(row(a, i), "gen_ce") > 0.0 &&
		    num(row(a, i), "gen_ce") < 20.0);
		same_figures(a, b, i, "on a second run");
		/* the reference's samples, not the blocks' again */
		differ += num(row(a, i), "gen_ce") != num(row(a, i - 2),
		    "gen_ce");
	}
	ck_assert_msg(differ == 2, "the e2e rows repeat the blocks' samples");
	json_decref(own);
	json_decref(a);
	json_decref(b);
}
END_TEST

START_TEST(test_refusals)
{
	char out[4096];

	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/run.conf --dir %s/run --samples 0", tool, dir, dir), 2);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/run.conf --dir %s/run --samples 3 --decode foo", tool, dir,
	    dir), 2);
	ck_assert_msg(strstr(out, "random, confidence, margin and sampled") !=
	    NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/run.conf --dir %s/run --samples 3 --steps 0", tool, dir, dir),
	    2);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/run.conf --dir %s/run --samples 3 --prompt-bytes %d", tool,
	    dir, dir, WINDOW), 2);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/run.conf --dir %s/run --samples 3 --words %s/absent", tool,
	    dir, dir, dir), 1);
	ck_assert_msg(strstr(out, "wamerican") != NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/run.conf --dir %s/run --samples 3 --causal-dir %s/run", tool,
	    dir, dir, dir), 2);
	ck_assert_msg(strstr(out, "together") != NULL, "%s", out);
}
END_TEST

int
main(void)
{
	Suite *su = suite_create("samples");
	TCase *tc = tcase_create("samples");

	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, train_once, cleanup_once);
	tcase_add_test(tc, test_rows);
	tcase_add_test(tc, test_repeatable_and_words);
	tcase_add_test(tc, test_without_causal);
	tcase_add_test(tc, test_e2e_rows);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(su, tc);
	return tu_run_suite(su);
}
