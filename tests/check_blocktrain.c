/* BlockTrain end to end in one process: training through the real
 * shardmeter binary on a generated corpus, its determinism, the held-out
 * bound, generation, and the errors a user meets. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/blocktrain/train.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"
#include "tests/testutil.h"

static char dir[64];
static const char *tool;

static void
write_corpus(const char *path, uint64_t seed, size_t len)
{
	static const char *words[] = { "the ", "cat ", "sat ", "on ", "a ",
	    "mat. ", "dog ", "ran ", "to ", "park. ", "and ", "then " };
	FILE *f = fopen(path, "w");
	size_t n = 0;
	kn_rng r;

	ck_assert_ptr_nonnull(f);
	kn_rng_init(&r, seed, 0);
	while (n < len) {
		const char *w = words[kn_rng_below(&r, 12)];

		fputs(w, f);
		n += strlen(w);
	}
	fclose(f);
}

static void
setup(void)
{
	char path[128];

	tool = tu_shardmeter();
	tu_temp_dir(dir, sizeof(dir), "check_bt");
	snprintf(path, sizeof(path), "%s/train.txt", dir);
	write_corpus(path, 1, 60000);
	snprintf(path, sizeof(path), "%s/valid.txt", dir);
	write_corpus(path, 2, 20000);
	tu_write_file(dir, "run.conf", "seed = 5\n[model]\nblocks = 2\n"
	    "width = 32\nheads = 2\nlayers_per_block = 1\nwindow = 24\n"
	    "p_prefix = 0.2\n[data]\ntrain = train.txt\nvalid = valid.txt\n"
	    "test = valid.txt\n[optim]\nbatch = 16\nsteps = 120\n"
	    "warmup = 10\nlr = 3e-3\n");
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

static void
file_hash(const char *path, char hex[65])
{
	char *buf, err[PR_ERR_LEN];
	size_t len;

	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 30, &buf, &len, err), 0);
	pr_ckpt_sha256_hex(buf, len, hex, err);
	free(buf);
}

/* Reads "key":number from the eval JSON. */
static double
json_number(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	ck_assert_msg(p != NULL, "no %s in %s", key, json);
	return strtod(p + strlen(pat), NULL);
}

/* The composed bound of eval's JSON for two blocks, checked to be the sum
 * of the shares each block computes alone. */
static double
summed_bound(const char *out)
{
	const char *p = strchr(out, '{');
	double total, s1, s2;

	ck_assert_ptr_nonnull(p);
	total = json_number(p, "blocktrain_nats_per_byte");
	p = strstr(p, "\"shares\"");
	ck_assert_ptr_nonnull(p);
	s1 = json_number(p, "share");
	s2 = json_number(strstr(p, "\"block\":2"), "share");
	ck_assert_double_eq_tol(total, s1 + s2, 1e-5);
	return total;
}

START_TEST(test_train_eval_generate)
{
	char out[8192], h1[65], h2[65], path[160];
	double before, after;
	const char *p;

	/* the bound of the untrained blocks, then trained */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s train --spec %s/run.conf "
	    "--dir %s/a --all --steps 0", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s eval --spec %s/run.conf "
	    "--dir %s/a --json --windows 128", tool, dir, dir), 0);
	before = json_number(strchr(out, '{'), "blocktrain_nats_per_byte");
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s train --spec %s/run.conf "
	    "--dir %s/a --all --every 50", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s eval --spec %s/run.conf "
	    "--dir %s/a --json --windows 128", tool, dir, dir), 0);
	after = summed_bound(out);
	ck_assert_msg(after < 0.7 * before, "bound %g -> %g", before, after);

	/* --text: any file by the same fixed procedure; the valid split's
	 * bytes under another name score exactly as the split does, other
	 * bytes do not */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "cp %s/valid.txt %s/other.txt",
	    dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s eval --spec %s/run.conf --dir %s/a --json --windows 128 "
	    "--text %s/other.txt", tool, dir, dir, dir), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"split\":\"text\""));
	ck_assert_double_eq(json_number(strchr(out, '{'),
	    "blocktrain_nats_per_byte"), after);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s eval --spec %s/run.conf --dir %s/a --json --windows 128 "
	    "--text %s/train.txt", tool, dir, dir, dir), 0);
	ck_assert_double_ne(json_number(strchr(out, '{'),
	    "blocktrain_nats_per_byte"), after);

	/* determinism: the same checkpoint bytes from a second training */
	ck_assert_int_eq(tu_run_cmd(NULL, 0,
	    "%s train --spec %s/run.conf --dir %s/b "
	    "--block 1 --quiet", tool, dir, dir), 0);
	snprintf(path, sizeof(path), "%s/a/block-1.ckpt", dir);
	file_hash(path, h1);
	snprintf(path, sizeof(path), "%s/b/block-1.ckpt", dir);
	file_hash(path, h2);
	ck_assert_str_eq(h1, h2);

	/* generation keeps the prompt and leaves no mask */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s generate --spec %s/run.conf "
	    "--dir %s/a --steps 8 --seed 3 'the cat '", tool, dir, dir), 0);
	p = strstr(out, "the cat ");
	ck_assert_msg(p != NULL, "prompt lost: %s", out);
	ck_assert_uint_eq(strlen(p), 24 + 1);
	ck_assert_ptr_null(strchr(p, '_'));
	{
		char again[8192];

		tu_run_cmd(again, sizeof(again),
		    "%s generate --spec %s/run.conf "
		    "--dir %s/a --steps 8 --seed 3 'the cat '", tool, dir, dir);
		ck_assert_str_eq(strstr(again, "the cat "), p);
		/* the same prompt from standard input */
		tu_run_cmd(again, sizeof(again),
		    "printf 'the cat ' | %s generate --spec %s/run.conf "
		    "--dir %s/a --steps 8 --seed 3 -", tool, dir, dir);
		ck_assert_str_eq(strstr(again, "the cat "), p);
	}
}
END_TEST

START_TEST(test_resume)
{
	char h1[65], h2[65], path[160];

	/* 120 steps in one go, or 60, a stop, and the rest: the same bytes */
	ck_assert_int_eq(tu_run_cmd(NULL, 0,
	    "%s train --spec %s/run.conf --dir %s/c "
	    "--block 2 --quiet", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(NULL, 0,
	    "%s train --spec %s/run.conf --dir %s/d "
	    "--block 2 --steps 60 --quiet", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(NULL, 0,
	    "%s train --spec %s/run.conf --dir %s/d "
	    "--block 2 --quiet", tool, dir, dir), 0);
	snprintf(path, sizeof(path), "%s/c/block-2.ckpt", dir);
	file_hash(path, h1);
	snprintf(path, sizeof(path), "%s/d/block-2.ckpt", dir);
	file_hash(path, h2);
	ck_assert_str_eq(h1, h2);
}
END_TEST

/* Block 1 of run.conf trained on the start commit of position blocks
 * (b9bbe0f), CPU backend: a spec without position_block must keep
 * training to these bytes.  The figures depend on the GEMM kernel, so
 * the pin holds where the kernel is the one it was taken with. */
#define PIN_GEMM "avx512"
#define PIN_BLOCK1 \
    "ac5acfc0a421ea90093a3cd5750ede198966ff1b0a5716a9c1ba5833bcbbabc8"

START_TEST(test_checkpoint_pinned)
{
	char h[65], h2[65], path[160];
	const char *gemm = kn_gemm_name(kn_gemm_current());

	ck_assert_int_eq(tu_run_cmd(NULL, 0,
	    "%s train --spec %s/run.conf --dir %s/p --block 1 --backend cpu "
	    "--quiet", tool, dir, dir), 0);
	snprintf(path, sizeof(path), "%s/p/block-1.ckpt", dir);
	file_hash(path, h);
	if (strcmp(gemm, PIN_GEMM) == 0)
		ck_assert_msg(strcmp(h, PIN_BLOCK1) == 0, "block 1 trained to "
		    "%s, pinned %s", h, PIN_BLOCK1);
	else
		fprintf(stderr, "GEMM kernel %s, not %s: the pinned checkpoint "
		    "is not compared\n", gemm, PIN_GEMM);
	/* one position block of the whole window is the same model */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "sed 's/^window = 24$/&\\n"
	    "position_block = 24/' %s/run.conf > %s/whole.conf", dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(NULL, 0,
	    "%s train --spec %s/whole.conf --dir %s/q --block 1 "
	    "--backend cpu --quiet", tool, dir, dir), 0);
	snprintf(path, sizeof(path), "%s/q/block-1.ckpt", dir);
	file_hash(path, h2);
	ck_assert_str_eq(h, h2);
}
END_TEST

/* Position blocks of 4 through the tool: every block and the e2e
 * reference train, the composed bound is the sum of the shares and lies
 * below the untrained one, and generation still fills the window. */
START_TEST(test_position_blocks)
{
	char out[8192];
	double before, after;
	const char *p;

	ck_assert_int_eq(tu_run_cmd(NULL, 0, "sed 's/^window = 24$/&\\n"
	    "position_block = 4/;s/^steps = 120$/steps = 60/' %s/run.conf > "
	    "%s/pb.conf", dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s spec %s/pb.conf",
	    tool, dir), 0);
	ck_assert_msg(strstr(out, "position blocks of 4") != NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/pb.conf --dir %s/pb --all --steps 0", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/pb.conf --dir %s/pb --json --windows 64", tool, dir, dir), 0);
	before = json_number(strchr(out, '{'), "blocktrain_nats_per_byte");
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/pb.conf --dir %s/pb --all --quiet", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/pb.conf --dir %s/pb --reference e2e --quiet", tool, dir, dir),
	    0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec "
	    "%s/pb.conf --dir %s/pb --json --windows 64", tool, dir, dir), 0);
	after = summed_bound(out);
	ck_assert_msg(after < 0.8 * before, "bound %g -> %g", before, after);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --spec "
	    "%s/pb.conf --dir %s/pb --steps 8 --seed 3 'the cat '", tool, dir,
	    dir), 0);
	p = strstr(out, "the cat ");
	ck_assert_msg(p != NULL, "prompt lost: %s", out);
	ck_assert_uint_eq(strlen(p), 24 + 1);
}
END_TEST

/* The lines of a file, and whether each ends with a newline. */
static int
count_lines(const char *path, char *last, size_t len)
{
	char line[256];
	int n = 0;
	FILE *f = fopen(path, "r");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		ck_assert_msg(strchr(line, '\n') != NULL, "line cut: %s", line);
		snprintf(last, len, "%s", line);
		n++;
	}
	fclose(f);
	return n;
}

/* A kill leaves the temporary file of a write cut short, and the steps
 * after the checkpoint are trained again: open removes the leftovers of
 * this block (another pid's), and the learning curve loses its lines
 * after the checkpoint, so that no step comes twice. */
START_TEST(test_reopen_after_kill)
{
	static const char *const gone[] = { "block-1.ckpt.tmp.999999",
	    "block-1.optim.tmp.1", "block-1.csv.tmp.77" };
	char path[160], state[160], own[64], last[256], h1[65], h2[65];
	char err[KN_ERR_LEN];
	const char *names;
	char run_id[PR_RUN_ID_LEN];
	tr_trainer *t;
	pr_spec spec;
	tr_opts o = { 0 };
	struct stat st;
	ino_t ino;
	float loss;
	size_t i;
	FILE *f;

	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	snprintf(state, sizeof(state), "%s/k", dir);
	o.spec = &spec;
	o.run_id = run_id;
	o.dir = state;
	o.kind = BT_BLOCK;
	o.block = 1;
	o.steps = 20;
	o.be = kn_cpu_backend();
	ck_assert_int_eq(tr_train(&o, err), 0);
	snprintf(path, sizeof(path), "%s/k/block-1.ckpt", dir);
	file_hash(path, h1);
	/* what a kill at step 25, in the middle of a write, leaves */
	snprintf(path, sizeof(path), "%s/k/block-1.csv", dir);
	f = fopen(path, "a");
	ck_assert_ptr_nonnull(f);
	for (i = 21; i <= 25; i++)
		fprintf(f, "%zu,2.5,0.003,0.1,1000.0,1.000\n", i);
	fputs("26,2.4", f);     /* cut short */
	fclose(f);
	for (i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
		tu_write_file(state, gone[i], "partial");
	/* kept: another block's, not a pid, and one of this process's,
	 * whose write may be under way */
	tu_write_file(state, "block-2.ckpt.tmp.5", "x");
	tu_write_file(state, "block-1.ckpt.tmp.x5", "x");
	snprintf(own, sizeof(own), "block-1.optim.tmp.%ld", (long)getpid());
	tu_write_file(state, own, "x");

	ck_assert_msg(tr_trainer_open(&t, &o, err) == 0, "%s", err);
	ck_assert_int_eq(tr_trainer_steps(t), 20);
	ck_assert_int_eq(tr_trainer_removed(t, &names), 3);
	for (i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		ck_assert_msg(strstr(names, gone[i]) != NULL, "%s not in '%s'",
		    gone[i], names);
		snprintf(path, sizeof(path), "%s/k/%s", dir, gone[i]);
		ck_assert_int_ne(access(path, F_OK), 0);
	}
	snprintf(path, sizeof(path), "%s/k/block-2.ckpt.tmp.5", dir);
	ck_assert_int_eq(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/k/block-1.ckpt.tmp.x5", dir);
	ck_assert_int_eq(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/k/%s", dir, own);
	ck_assert_int_eq(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/k/block-1.ckpt", dir);
	file_hash(path, h2);
	ck_assert_str_eq(h1, h2);
	/* the header and steps 1..20, then step 21 once */
	snprintf(path, sizeof(path), "%s/k/block-1.csv", dir);
	ck_assert_int_eq(count_lines(path, last, sizeof(last)), 1 + 20);
	ck_assert_msg(strncmp(last, "20,", 3) == 0, "last line %s", last);
	ck_assert_int_eq(tr_trainer_step(t, &loss, err), 0);
	ck_assert_int_eq(tr_trainer_save(t, err), 0);
	tr_trainer_close(t);
	ck_assert_int_eq(count_lines(path, last, sizeof(last)), 1 + 21);
	ck_assert_msg(strncmp(last, "21,", 3) == 0, "last line %s", last);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fgetc(f), 's');  /* "step,...": the header first */
	fclose(f);
	/* nothing to drop: the file is left as it is, not rewritten */
	ck_assert_int_eq(stat(path, &st), 0);
	ino = st.st_ino;
	ck_assert_msg(tr_trainer_open(&t, &o, err) == 0, "%s", err);
	ck_assert_int_eq(tr_trainer_removed(t, &names), 0);
	ck_assert_str_eq(names, "");
	tr_trainer_close(t);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(st.st_ino == ino);
	ck_assert_int_eq(count_lines(path, last, sizeof(last)), 1 + 21);
}
END_TEST

/* Runs the tool with args (a printf format over the test folder, which
 * it may name up to three times) and expects failure with fragment. */
static void
expect_failure(const char *fragment, const char *args)
{
	char out[4096], line[1024];
	int rc;

	snprintf(line, sizeof(line), args, dir, dir, dir);
	rc = tu_run_cmd(out, sizeof(out), "%s %s", tool, line);
	ck_assert_int_ne(rc, 0);
	ck_assert_msg(strstr(out, fragment) != NULL, "'%s' lacks '%s'", out,
	    fragment);
}

START_TEST(test_errors)
{
	expect_failure("cannot open spec", "spec %s/missing.conf");
	tu_write_file(dir, "bad.conf", "[model]\nwidth = 30\nheads = 4\n");
	expect_failure("multiple of heads", "spec %s/bad.conf");
	expect_failure("missing checkpoint", "eval --spec %s/run.conf "
	    "--dir %s/nothing");
	expect_failure("missing checkpoint", "generate --spec %s/run.conf "
	    "--dir %s/nothing x");
	expect_failure("not both", "eval --spec %s/run.conf --dir %s/a "
	    "--split test --text %s/valid.txt");
	expect_failure("cannot open", "eval --spec %s/run.conf --dir %s "
	    "--text %s/nowhere.txt");
	tu_write_file(dir, "nodata.conf", "[data]\ntrain = nowhere.txt\n");
	expect_failure("cannot open", "train --spec %s/nodata.conf --dir "
	    "%s/x --block 1");
	expect_failure("exactly one of", "train --spec %s/run.conf --dir %s/x");
	expect_failure("does not exist", "train --spec %s/run.conf --dir %s/x "
	    "--block 9");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("blocktrain");
	TCase *tc = tcase_create("cli");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_train_eval_generate);
	tcase_add_test(tc, test_resume);
	tcase_add_test(tc, test_checkpoint_pinned);
	tcase_add_test(tc, test_position_blocks);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_reopen_after_kill);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
