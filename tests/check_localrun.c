/* scripts/local-run, the main job, at a size that runs in seconds: a run
 * trains, is scored and sampled, and the samples' word share is printed
 * (rough at this size); the same run again resumes from the daemons'
 * state; a run whose spec changed (more steps) starts afresh instead of
 * failing on the other run's checkpoints, as a second quickstart did
 * after local-run's defaults changed. */
#include "config.h"

#include <check.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define OUT_LEN (64 * 1024)

static char dir[256];

/* local-run with --steps steps in dir/run; its exit status, its output in
 * out. */
static int
local_run(char *out, int steps, int port)
{
	char build[1024];

	ck_assert_ptr_nonnull(realpath(tu_shardmeter(), build));
	return tu_run_cmd(out, OUT_LEN, "BUILD_DIR='%s' XDG_CONFIG_HOME="
	    "'%s/xdg' timeout 300 '%s/scripts/local-run' --quiet "
	    "--no-dashboard --no-pipeline --steps %d --dir '%s/run' "
	    "--port %d < /dev/null", dirname(build), dir, TOP_SRCDIR, steps,
	    dir, port);
}

START_TEST(test_rerun_and_changed_spec)
{
	static char out[OUT_LEN];
	int port = tu_port_base(4), rc;

	/* the daemons run in the foreground under local-run whatever
	 * make check runs under */
	unsetenv("INVOCATION_ID");
	unsetenv("NOTIFY_SOCKET");
	unsetenv("JOURNAL_STREAM");
	rc = local_run(out, 100, port);
	ck_assert_msg(rc == 0, "local-run exit %d:\n%s", rc, out);
	ck_assert_msg(strstr(out, "blocktrain bound") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\nsample: ") != NULL, "%s", out);
	if (tu_run_cmd(NULL, 0, "test -r /usr/share/dict/words") == 0) {
		/* a hundred steps: few of the words are words */
		ck_assert_msg(strstr(out, "\nwords: ") != NULL, "%s", out);
		ck_assert_msg(strstr(out, "the samples are rough") != NULL,
		    "%s", out);
	} else
		ck_assert_msg(strstr(out, "no /usr/share/dict/words") != NULL,
		    "%s", out);
	ck_assert_msg(strstr(out, "starts afresh") == NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "cp '%s/run/peers' "
	    "'%s/peers.first'", dir, dir), 0);

	/* the same run: the daemons' checkpoints are taken up */
	rc = local_run(out, 100, port);
	ck_assert_msg(rc == 0, "local-run exit %d:\n%s", rc, out);
	ck_assert_msg(strstr(out, "resumes from them") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "blocktrain bound") != NULL, "%s", out);

	/* another run in the same directory */
	rc = local_run(out, 200, port);
	ck_assert_msg(rc == 0, "local-run exit %d:\n%s", rc, out);
	ck_assert_msg(strstr(out, "starts afresh") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "step 200") != NULL, "%s", out);
	/* the identities stayed: the peer list, ids and all, is the one
	 * the first run wrote */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "cmp -s '%s/peers.first' "
	    "'%s/run/peers'", dir, dir), 0);
}
END_TEST

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_localrun");
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

int
main(void)
{
	Suite *s = suite_create("localrun");
	TCase *tc = tcase_create("main job");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 900);
	tcase_add_test(tc, test_rerun_and_changed_spec);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
