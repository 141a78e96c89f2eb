/* The README's "Three hosts by hand" run as it stands: its indented
 * blocks, taken out by tests/readme-commands, in one shell on loopback,
 * with only the section's own variables (SM_DIR, SM_PORT) and the
 * operator's XDG_CONFIG_HOME set here.  A command of the section that
 * fails fails the test, so the README cannot drift from the programs. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "tests/testutil.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define SECTION "Three hosts by hand"
/* the commands' output: a few kilobytes when all goes well */
#define OUT_LEN (256 * 1024)

static char dir[256];

/* The directory of program, for the PATH the README asks for. */
static void
add_to_path(const char *program)
{
	char copy[1024], path[8192], *d;
	const char *old = getenv("PATH");

	ck_assert_ptr_nonnull(realpath(program, copy));
	d = dirname(copy);
	snprintf(path, sizeof(path), "%s:%s", d, old ? old : "/usr/bin:/bin");
	setenv("PATH", path, 1);
}

/* SIGTERM to every daemon the section left with a pid file, and how
 * many pid files are left after waiting for them (limit seconds). */
static int
stop_left(const char *by_hand, double limit)
{
	char out[4096];
	double t0 = kn_now();
	int left;

	tu_run_cmd(NULL, 0, "cd '%s' 2>/dev/null && for f in */*.pid; do "
	    "[ -f \"$f\" ] && kill $(cat \"$f\") 2>/dev/null; done; true",
	    by_hand);
	do {
		tu_run_cmd(out, sizeof(out), "ls '%s'/*/*.pid 2>/dev/null | wc "
		    "-l", by_hand);
		left = atoi(out);
		if (left == 0)
			break;
		usleep(200000);
	} while (kn_now() - t0 < limit);
	return left;
}

/* The line of out that starts with prefix, copied into line. */
static int
line_starting(const char *out, const char *prefix, int nth, char *line,
    size_t len)
{
	const char *p = out;
	int seen = 0;

	while (p != NULL && *p) {
		const char *end = strchr(p, '\n');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (strncmp(p, prefix, strlen(prefix)) == 0 && seen++ == nth) {
			snprintf(line, len, "%.*s", (int)n, p);
			return 1;
		}
		p = end ? end + 1 : NULL;
	}
	return 0;
}

START_TEST(test_extract)
{
	char out[OUT_LEN];
	static const char *const steps[] = {
		"export SM_DIR=", "export SM_PORT=", "shardmeter init --dir",
		"shardmeter init --client", "cat > peers", "blocktraind -n -c",
		"blocktraind -c", "shardmeter status --peers peers",
		"shardmeter assemble --peers peers", "blocktraind -S",
		"cat > pipeline", "shardmeter status --peers pipeline",
		"shardmeter generate --peers pipeline", "curl ",
		"/v1/completions", "--pinnedpubkey", "kill $(cat",
	};
	size_t i;

	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "'%s/tests/"
	    "readme-commands' '%s/README' '%s'", TOP_SRCDIR, TOP_SRCDIR,
	    SECTION), 0);
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		ck_assert_msg(strstr(out, steps[i]) != NULL, "the README's "
		    "\"%s\" has no '%s'", SECTION, steps[i]);
	/* prose is never taken for a command, and no other section is */
	ck_assert_ptr_null(strstr(out, "Every indented block"));
	ck_assert_ptr_null(strstr(out, "scripts/quickstart check"));
	/* a title that is not there is an error, not an empty script */
	ck_assert_int_ne(tu_run_cmd(NULL, 0, "'%s/tests/readme-commands' "
	    "'%s/README' 'No such section'", TOP_SRCDIR, TOP_SRCDIR), 0);
}
END_TEST

START_TEST(test_three_hosts_by_hand)
{
	static char out[OUT_LEN];
	char by_hand[320], xdg[320], port[16], local[256], remote[256];
	int rc, left;

	/* the section asks the ring with curl, as its reader would */
	if (tu_run_cmd(NULL, 0, "command -v curl") != 0) {
		fprintf(stderr, "# skipped: the README's section runs curl "
		    "(Debian: apt-get install curl; scripts/install-deps does)\n");
		return;
	}
	snprintf(by_hand, sizeof(by_hand), "%s/by-hand", dir);
	snprintf(xdg, sizeof(xdg), "%s/xdg", dir);
	/* the training ports, the ring's at +101..+103 and the /metrics
	 * ports 2000 above all: below the ephemeral range */
	snprintf(port, sizeof(port), "%d", tu_port_base(2104));
	setenv("SM_DIR", by_hand, 1);
	setenv("SM_PORT", port, 1);
	setenv("XDG_CONFIG_HOME", xdg, 1);
	add_to_path(tu_blocktraind());
	add_to_path(tu_shardmeter());
	/* the daemons go to the background as the README says, even when
	 * make check runs under a service manager */
	unsetenv("INVOCATION_ID");
	unsetenv("NOTIFY_SOCKET");
	unsetenv("JOURNAL_STREAM");
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "'%s/tests/readme-commands' "
	    "'%s/README' '%s' > '%s/commands.sh'", TOP_SRCDIR, TOP_SRCDIR,
	    SECTION, dir), 0);
	rc = tu_run_cmd(out, sizeof(out), "cd '%s' && timeout 600 sh -eu "
	    "commands.sh < /dev/null", dir);
	/* the daemons are stopped whatever happened; the section's last
	 * block stops them itself, and each removes its pid file */
	left = stop_left(by_hand, 60);
	ck_assert_msg(rc == 0, "the README's \"%s\" failed (exit %d); its "
	    "output:\n%s", SECTION, rc, out);
	ck_assert_msg(left == 0, "%d daemons left a pid file", left);
	ck_assert_msg(strstr(out, "configuration OK: block 1") != NULL, "%s",
	    out);
	ck_assert_msg(strstr(out, "composed held-out bound: ") != NULL, "%s",
	    out);
	ck_assert_msg(strstr(out, "blocktrain bound") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\"object\":\"text_completion\"") != NULL,
	    "%s", out);
	/* the same seed, the same bytes: in one process and through the
	 * ring */
	ck_assert_msg(line_starting(out, " The ", 0, local, sizeof(local)) &&
	    line_starting(out, " The ", 1, remote, sizeof(remote)), "%s", out);
	ck_assert_str_eq(local, remote);
	ck_assert_int_eq(strlen(local), 32);
	/* where the README says the logs are */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "grep -q 'listening on' "
	    "'%s/host1/blocktraind.log' && grep -q 'listening on' "
	    "'%s/serve3/pipeline.log'", by_hand, by_hand), 0);
}
END_TEST

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_readme");
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

int
main(void)
{
	Suite *s = suite_create("readme");
	TCase *tc = tcase_create("three hosts by hand");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 900);
	tcase_add_test(tc, test_extract);
	tcase_add_test(tc, test_three_hosts_by_hand);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
