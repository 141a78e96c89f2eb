/* Tests of the GEMM choice (kernels/cpu/gemm_choose.c): the shape classes
 * of a model, the pick from constructed timings, the forced settings, the
 * cache file read, written and refused when corrupt, and the plan that
 * kn_gemm then follows.  No test looks at a time: the timings are made up
 * or come from a cache the test wrote. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "tests/testutil.h"

static char dir[256];

static void
setup(void)
{
	char err[KN_ERR_LEN];

	ck_assert_int_eq(kn_pool_init(2, err), KN_OK);
	tu_temp_dir(dir, sizeof(dir), "check_gemm_choose");
}

static void
teardown(void)
{
	tu_remove_dir(dir);
	kn_pool_shutdown();
}

static int
has_shape(const kn_gemm_shape *s, int n, int parallel, int tA, int tB,
    int M, int N, int K)
{
	int i;

	for (i = 0; i < n; i++)
		if (s[i].parallel == parallel && s[i].transA == tA &&
		    s[i].transB == tB && s[i].M == M && s[i].N == N &&
		    s[i].K == K)
			return 1;
	return 0;
}

/* The classes listed by hand from matmul.c and attention.c: at width 128
 * every linear layer has its own (C, OC), so 5 x 3 + 3 classes; at width
 * 256 the head (256, 256) is the attention output's, so 15. */
START_TEST(test_model_shapes)
{
	kn_gemm_shape s[KN_GEMM_MAX_SHAPES];
	static const int lin[5][2] = { { 128, 384 }, { 128, 128 },
	    { 128, 512 }, { 512, 128 }, { 128, 256 } };
	int n, i, N = 4 * 64;

	n = kn_gemm_model_shapes(128, 4, 64, 4, s, KN_GEMM_MAX_SHAPES);
	ck_assert_int_eq(n, 18);
	for (i = 0; i < 5; i++) {
		int C = lin[i][0], OC = lin[i][1];

		ck_assert(has_shape(s, n, 1, 0, 1, N, OC, C));
		ck_assert(has_shape(s, n, 1, 0, 0, N, C, OC));
		ck_assert(has_shape(s, n, 1, 1, 0, OC, C, N));
	}
	ck_assert(has_shape(s, n, 0, 0, 1, 64, 64, 32));
	ck_assert(has_shape(s, n, 0, 0, 0, 64, 32, 64));
	ck_assert(has_shape(s, n, 0, 1, 0, 64, 32, 64));
	ck_assert_int_eq(kn_gemm_model_shapes(256, 4, 128, 32, s,
	    KN_GEMM_MAX_SHAPES), 15);
	/* a short array gets what fits */
	ck_assert_int_eq(kn_gemm_model_shapes(128, 4, 64, 4, s, 5), 5);
}
END_TEST

START_TEST(test_choose)
{
	kn_gemm_choice c[4] = {
		{ { 1, 0, 1, 64, 64, 64 }, 100.0, 150.0, KN_GEMM_AVX512 },
		{ { 1, 0, 0, 64, 64, 64 }, 150.0, 100.0, KN_GEMM_OPENBLAS },
		/* within the margin: ours keeps it */
		{ { 1, 1, 0, 64, 64, 64 }, 100.0, 101.0, KN_GEMM_OPENBLAS },
		{ { 0, 0, 1, 64, 64, 64 }, 100.0, 103.0, KN_GEMM_AVX512 },
	};

	kn_gemm_choose(c, 4);
	ck_assert_int_eq(c[0].pick, KN_GEMM_OPENBLAS);
	ck_assert_int_eq(c[1].pick, KN_GEMM_AVX512);
	ck_assert_int_eq(c[2].pick, KN_GEMM_AVX512);
	ck_assert_int_eq(c[3].pick, KN_GEMM_OPENBLAS);
}
END_TEST

START_TEST(test_parse_mode)
{
	kn_gemm_kernel k;

	ck_assert_int_eq(kn_gemm_parse_mode("auto", &k), KN_OK);
	ck_assert_int_eq(k, KN_GEMM_AUTO);
	ck_assert_int_eq(kn_gemm_parse_mode("own", &k), KN_OK);
	ck_assert_int_eq(k, KN_GEMM_AVX512);
	ck_assert_int_eq(kn_gemm_parse_mode("blas", &k), KN_OK);
	ck_assert_int_eq(k, KN_GEMM_OPENBLAS);
	ck_assert_int_eq(kn_gemm_parse_mode("openblas", &k), KN_EINVAL);
	ck_assert_int_eq(kn_gemm_parse_mode("", &k), KN_EINVAL);
}
END_TEST

static const kn_gemm_choice two[2] = {
	{ { 1, 0, 1, 4096, 768, 256 }, 91.5, 69.7, KN_GEMM_AVX512 },
	{ { 0, 1, 0, 128, 64, 128 }, 94.5, 101.3, KN_GEMM_OPENBLAS },
};

START_TEST(test_cache_round_trip)
{
	char path[512], err[KN_ERR_LEN], text[512];
	kn_gemm_choice got[KN_GEMM_MAX_SHAPES];
	FILE *f;
	size_t len;
	int n;

	/* written into a directory that does not exist yet */
	snprintf(path, sizeof(path), "%s/sub/gemm-test", dir);
	ck_assert_int_eq(kn_gemm_cache_write(path, "k1", two, 2, err), KN_OK);
	ck_assert_int_eq(kn_gemm_cache_read(path, "k1", got,
	    KN_GEMM_MAX_SHAPES, &n, err), KN_OK);
	ck_assert_int_eq(n, 2);
	ck_assert_mem_eq(&got[0].shape, &two[0].shape, sizeof(kn_gemm_shape));
	ck_assert_mem_eq(&got[1].shape, &two[1].shape, sizeof(kn_gemm_shape));
	ck_assert_int_eq(got[0].pick, KN_GEMM_AVX512);
	ck_assert_int_eq(got[1].pick, KN_GEMM_OPENBLAS);
	ck_assert(got[1].blas_gflops == 101.3 && got[0].own_gflops == 91.5);
	/* the format as the man page gives it */
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	len = fread(text, 1, sizeof(text) - 1, f);
	text[len] = '\0';
	fclose(f);
	ck_assert_str_eq(text, KN_GEMM_CACHE_MAGIC "\nkey k1\n"
	    "1 0 1 4096 768 256 91.5 69.7 own\n"
	    "0 1 0 128 64 128 94.5 101.3 blas\n");
	/* another key: refused */
	ck_assert_int_eq(kn_gemm_cache_read(path, "k2", got,
	    KN_GEMM_MAX_SHAPES, &n, err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ":2: made for another"));
	/* too small an array: refused, not overrun */
	ck_assert_int_eq(kn_gemm_cache_read(path, "k1", got, 1, &n, err),
	    KN_EINVAL);
	ck_assert_int_eq(n, 0);
	/* missing */
	snprintf(path, sizeof(path), "%s/none", dir);
	ck_assert_int_eq(kn_gemm_cache_read(path, "k1", got,
	    KN_GEMM_MAX_SHAPES, &n, err), KN_EIO);
	/* a directory that cannot be made: an error, not a crash */
	ck_assert_int_eq(kn_gemm_cache_write("/proc/no/such/gemm", "k1", two,
	    2, err), KN_EIO);
}
END_TEST

/* Each corrupt file is refused with its line number, and nothing of it
 * is returned. */
START_TEST(test_cache_corrupt)
{
	static const struct {
		const char *text, *where;
	} bad[] = {
		{ "", ":1: truncated" },
		{ "shardmeter-gemm-choice 2\nkey k\n", ":1: not a GEMM" },
		{ KN_GEMM_CACHE_MAGIC "\n", ":2: truncated" },
		{ KN_GEMM_CACHE_MAGIC "\nkeyk\n", ":2: made for" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 64 64 64 1.0 2.0 own\n"
		    "1 0 1 64 64\n", ":4: expected" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 64 64 64 1 2 fast\n",
		    ":3: expected" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 64 64 64 1 2 auto\n",
		    ":3: expected" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 2 1 64 64 64 1 2 own\n",
		    ":3: expected" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 0 64 64 1 2 own\n",
		    ":3: expected" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 64 64 64 nan 2 own\n",
		    ":3: expected" },
		{ KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 64 64 64 1 2 own x\n",
		    ":3: expected" },
	};
	kn_gemm_choice got[KN_GEMM_MAX_SHAPES];
	char err[KN_ERR_LEN];
	size_t i;
	int n;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *path = tu_write_file(dir, "c", bad[i].text);

		n = -1;
		ck_assert_int_eq(kn_gemm_cache_read(path, "k", got,
		    KN_GEMM_MAX_SHAPES, &n, err), KN_EINVAL);
		ck_assert_int_eq(n, 0);
		ck_assert_msg(strstr(err, bad[i].where) != NULL,
		    "case %zu: '%s' lacks '%s'", i, err, bad[i].where);
	}
	/* and the good one of the same lines is taken */
	ck_assert_int_eq(kn_gemm_cache_read(tu_write_file(dir, "c",
	    KN_GEMM_CACHE_MAGIC "\nkey k\n1 0 1 64 64 64 1 2 blas\n"), "k",
	    got, KN_GEMM_MAX_SHAPES, &n, err), KN_OK);
	ck_assert_int_eq(n, 1);
}
END_TEST

START_TEST(test_forced_blas)
{
	kn_gemm_shape s[KN_GEMM_MAX_SHAPES];
	char err[KN_ERR_LEN], note[KN_ERR_LEN], desc[512];
	const kn_gemm_choice *c;
	int n = kn_gemm_model_shapes(64, 2, 32, 2, s, KN_GEMM_MAX_SHAPES);

	ck_assert_int_eq(kn_gemm_plan(s, n, KN_GEMM_OPENBLAS, "", note, err),
	    KN_OK);
	ck_assert_int_eq(kn_gemm_current(), KN_GEMM_OPENBLAS);
	kn_gemm_plan_get(&c, &n);
	ck_assert_int_eq(n, 0);
	kn_gemm_plan_describe(desc, sizeof(desc));
	ck_assert_str_eq(desc, "gemm blas (forced)");
	/* once per process: a later plan changes nothing */
	ck_assert_int_eq(kn_gemm_plan(s, 3, KN_GEMM_AUTO, "", note, err),
	    KN_OK);
	ck_assert_int_eq(kn_gemm_current(), KN_GEMM_OPENBLAS);
}
END_TEST

/* SM_GEMM overrides the caller's setting, and a bad value is refused
 * with the variable's name. */
START_TEST(test_backend_env)
{
	const kn_backend *be = kn_cpu_backend();
	char err[KN_ERR_LEN];

	setenv("SM_GEMM", "fast", 1);
	ck_assert_int_eq(kn_backend_plan(be, 64, 2, 32, 2, "auto", err),
	    KN_EINVAL);
	ck_assert_str_eq(err, "SM_GEMM: expected auto, own or blas, not "
	    "'fast'");
	unsetenv("SM_GEMM");
	ck_assert_int_eq(kn_backend_plan(be, 64, 2, 32, 2, "quick", err),
	    KN_EINVAL);
	ck_assert_str_eq(err, "gemm: expected auto, own or blas, not "
	    "'quick'");
	setenv("SM_GEMM", "blas", 1);
	ck_assert_int_eq(kn_backend_plan(be, 64, 2, 32, 2, "auto", err),
	    KN_OK);
	unsetenv("SM_GEMM");
	ck_assert_int_eq(kn_gemm_current(), KN_GEMM_OPENBLAS);
}
END_TEST

static int
avx512_here(void)
{
	int ok = kn_gemm_use(KN_GEMM_AVX512) == KN_OK;

	kn_gemm_use(KN_GEMM_AUTO);
	if (!ok)
		fprintf(stderr, "check_gemm_choose: no AVX-512 here; "
		    "skipping a test of the auto plan\n");
	return ok;
}

/* Auto with every class in the cache: the plan is the cache's, whatever
 * a timing would say, and the classes come out in the model's order. */
START_TEST(test_auto_from_cache)
{
	kn_gemm_shape s[KN_GEMM_MAX_SHAPES];
	kn_gemm_choice want[KN_GEMM_MAX_SHAPES];
	const kn_gemm_choice *c;
	char key[1024], path[512], err[KN_ERR_LEN], note[KN_ERR_LEN];
	char desc[512];
	const char *want_desc = "gemm auto: own 8, blas 7 of 15 shape "
	    "classes (0 measured, 15 cached";
	int n = kn_gemm_model_shapes(64, 2, 32, 2, s, KN_GEMM_MAX_SHAPES);
	int i, got;

	if (!avx512_here())
		return;
	/* stored in reverse, odd classes to OpenBLAS */
	for (i = 0; i < n; i++) {
		want[n - 1 - i].shape = s[i];
		want[n - 1 - i].own_gflops = 10.0;
		want[n - 1 - i].blas_gflops = 20.0;
		want[n - 1 - i].pick = i % 2 ? KN_GEMM_OPENBLAS :
		    KN_GEMM_AVX512;
	}
	kn_gemm_cache_key(key, sizeof(key));
	snprintf(path, sizeof(path), "%s/gemm", dir);
	ck_assert_int_eq(kn_gemm_cache_write(path, key, want, n, err), KN_OK);
	ck_assert_int_eq(kn_gemm_plan(s, n, KN_GEMM_AUTO, path, note, err),
	    KN_OK);
	ck_assert_str_eq(note, "");
	kn_gemm_plan_get(&c, &got);
	ck_assert_int_eq(got, n);
	for (i = 0; i < n; i++) {
		ck_assert_mem_eq(&c[i].shape, &s[i], sizeof(s[i]));
		ck_assert_int_eq(c[i].pick, i % 2 ? KN_GEMM_OPENBLAS :
		    KN_GEMM_AVX512);
	}
	kn_gemm_plan_describe(desc, sizeof(desc));
	/* width 64: the head (64, 256) is the MLP's first layer, so 15 */
	ck_assert_int_eq(n, 15);
	ck_assert_msg(strncmp(desc, want_desc, strlen(want_desc)) == 0, "%s",
	    desc);
}
END_TEST

/* A corrupt cache is measured over and rewritten whole; an unwritable
 * one is no error. */
START_TEST(test_auto_corrupt_cache)
{
	kn_gemm_shape s[2] = { { 1, 0, 1, 64, 48, 32 }, { 0, 1, 0, 16, 8, 16 } };
	kn_gemm_choice back[KN_GEMM_MAX_SHAPES];
	const kn_gemm_choice *c;
	char key[1024], path[512], err[KN_ERR_LEN], note[KN_ERR_LEN];
	int n, i;

	if (!avx512_here())
		return;
	snprintf(path, sizeof(path), "%s", tu_write_file(dir, "gemm",
	    "garbage\n"));
	ck_assert_int_eq(kn_gemm_plan(s, 2, KN_GEMM_AUTO, path, note, err),
	    KN_OK);
	ck_assert_msg(strstr(note, "ignoring the GEMM choice cache") &&
	    strstr(note, ":1: not a GEMM"), "%s", note);
	kn_gemm_plan_get(&c, &n);
	ck_assert_int_eq(n, 2);
	kn_gemm_cache_key(key, sizeof(key));
	ck_assert_int_eq(kn_gemm_cache_read(path, key, back,
	    KN_GEMM_MAX_SHAPES, &n, err), KN_OK);
	ck_assert_int_eq(n, 2);
	for (i = 0; i < 2; i++) {
		ck_assert_mem_eq(&back[i].shape, &s[i], sizeof(s[i]));
		ck_assert_int_eq(back[i].pick, c[i].pick);
		ck_assert(back[i].own_gflops > 0 && back[i].blas_gflops > 0);
	}
}
END_TEST

/* A cache already full of other classes: this model's are measured,
 * used, and kept in place of the oldest, so that the next start finds
 * them. */
START_TEST(test_auto_full_cache)
{
	kn_gemm_shape s[2] = { { 1, 0, 1, 64, 48, 32 }, { 0, 1, 0, 16, 8, 16 } };
	kn_gemm_choice full[KN_GEMM_MAX_SHAPES], back[KN_GEMM_MAX_SHAPES];
	const kn_gemm_choice *c;
	char key[1024], path[512], err[KN_ERR_LEN], note[KN_ERR_LEN];
	char desc[512];
	int n, i;

	if (!avx512_here())
		return;
	for (i = 0; i < KN_GEMM_MAX_SHAPES; i++) {
		kn_gemm_shape o = { 1, 0, 1, 8 + i, 8, 8 };

		full[i].shape = o;
		full[i].own_gflops = 1.0;
		full[i].blas_gflops = 2.0;
		full[i].pick = KN_GEMM_OPENBLAS;
	}
	kn_gemm_cache_key(key, sizeof(key));
	snprintf(path, sizeof(path), "%s/gemm", dir);
	ck_assert_int_eq(kn_gemm_cache_write(path, key, full,
	    KN_GEMM_MAX_SHAPES, err), KN_OK);
	ck_assert_int_eq(kn_gemm_plan(s, 2, KN_GEMM_AUTO, path, note, err),
	    KN_OK);
	kn_gemm_plan_get(&c, &n);
	ck_assert_int_eq(n, 2);
	kn_gemm_plan_describe(desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "of 2 shape classes (2 measured, 0 "
	    "cached") != NULL, "%s", desc);
	ck_assert_int_eq(kn_gemm_cache_read(path, key, back,
	    KN_GEMM_MAX_SHAPES, &n, err), KN_OK);
	ck_assert_int_eq(n, KN_GEMM_MAX_SHAPES);
	/* the two oldest went; this model's came last */
	ck_assert_mem_eq(&back[0].shape, &full[2].shape, sizeof(s[0]));
	for (i = 0; i < 2; i++)
		ck_assert_mem_eq(&back[KN_GEMM_MAX_SHAPES - 2 + i].shape,
		    &s[i], sizeof(s[i]));
}
END_TEST

START_TEST(test_auto_unwritable_cache)
{
	kn_gemm_shape s[1] = { { 1, 0, 0, 32, 32, 32 } };
	const kn_gemm_choice *c;
	char err[KN_ERR_LEN], note[KN_ERR_LEN];
	int n;

	if (!avx512_here())
		return;
	ck_assert_int_eq(kn_gemm_plan(s, 1, KN_GEMM_AUTO, "/proc/no/gemm",
	    note, err), KN_OK);
	ck_assert_msg(strstr(note, "GEMM choice not cached") != NULL, "%s",
	    note);
	kn_gemm_plan_get(&c, &n);
	ck_assert_int_eq(n, 1);
}
END_TEST

static Suite *
choose_suite(void)
{
	Suite *s = suite_create("gemm_choose");
	TCase *tc = tcase_create("choose");

	/* every test in its own process: the plan is once per process */
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_model_shapes);
	tcase_add_test(tc, test_choose);
	tcase_add_test(tc, test_parse_mode);
	tcase_add_test(tc, test_cache_round_trip);
	tcase_add_test(tc, test_cache_corrupt);
	tcase_add_test(tc, test_forced_blas);
	tcase_add_test(tc, test_backend_env);
	tcase_add_test(tc, test_auto_from_cache);
	tcase_add_test(tc, test_auto_corrupt_cache);
	tcase_add_test(tc, test_auto_full_cache);
	tcase_add_test(tc, test_auto_unwritable_cache);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return tu_run_suite(choose_suite());
}
