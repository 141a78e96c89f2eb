/* scripts/package-deb, without building a package (that takes minutes):
 * its dry run lists what the .deb holds, the CUDA module exactly when this
 * build has one, and the systemd unit as packaged, which must be the
 * tree's unit with /usr/bin paths; the maintainer scripts parse, and the
 * configuration the package installs passes blocktraind -n. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif
#ifndef TOP_BUILDDIR
#define TOP_BUILDDIR "."
#endif

/* The program's path from anywhere: the tests below run it in a
 * directory of their own, and tu_*() may be relative to the build tree. */
static const char *
abs_program(const char *prog)
{
	static char path[4096];

	return realpath(prog, path) != NULL ? path : prog;
}

static char listing[65536];

/* The dry run's listing, once per process; 0, or 1 when dpkg is not
 * there (the script asks it for the architecture). */
static int
dry_run(void)
{
	int rc;

	if (listing[0] != '\0')
		return 0;
	if (tu_run_cmd(NULL, 0, "command -v dpkg >/dev/null") != 0)
		return 1;
	rc = tu_run_cmd(listing, sizeof(listing), "%s/scripts/package-deb "
	    "--dry-run --build %s 2>&1", TOP_SRCDIR, TOP_BUILDDIR);
	ck_assert_msg(rc == 0, "package-deb --dry-run: %d\n%s", rc, listing);
	return 0;
}

/* The listing has a file line "MODE PATH <- ..." */
static int
has_file(const char *mode, const char *path)
{
	char want[512];

	snprintf(want, sizeof(want), "\n  %s %s <- ", mode, path);
	return strstr(listing, want) != NULL;
}

START_TEST(test_contents)
{
	static const char *const files[][2] = {
		{ "0755", "/usr/bin/shardmeter" },
		{ "0755", "/usr/bin/blocktraind" },
		{ "0644", "/usr/share/man/man1/shardmeter.1.gz" },
		{ "0644", "/usr/share/man/man5/blocktrain.conf.5.gz" },
		{ "0644", "/usr/share/man/man8/blocktraind.8.gz" },
		{ "0644", "/lib/systemd/system/blocktraind.service" },
		{ "0644", "/etc/blocktrain/blocktrain.conf" },
		{ "0644", "/usr/share/doc/shardmeter/copyright" },
		{ "0644", "/usr/share/doc/shardmeter/changelog.gz" },
		{ "0755", "/DEBIAN/postinst" },
		{ "0755", "/DEBIAN/prerm" },
		{ "0755", "/DEBIAN/postrm" },
		{ "0644", "/DEBIAN/conffiles" },
	};
	size_t i;

	if (dry_run() != 0) {
		fprintf(stderr, "# dpkg not installed: package-deb not "
		    "checked\n");
		return;
	}
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		ck_assert_msg(has_file(files[i][0], files[i][1]), "no %s %s "
		    "in:\n%s", files[i][0], files[i][1], listing);
	ck_assert_msg(strstr(listing, "Package: shardmeter\n") != NULL &&
	    strstr(listing, "adduser") != NULL, "%s", listing);
#ifdef HAVE_CUDA
	ck_assert_msg(has_file("0644", "/usr/lib/shardmeter/shardmeter-cuda.so"),
	    "a CUDA build without the module in the package:\n%s", listing);
#else
	ck_assert_msg(strstr(listing, "shardmeter-cuda.so") == NULL,
	    "a build without CUDA with the module in the package:\n%s",
	    listing);
#endif
}
END_TEST

/* Every line of the tree's unit that is not a comment is in the
 * packaged unit, with /usr/local/bin/ made /usr/bin/. */
START_TEST(test_unit)
{
	char path[512], line[1024], want[1100], *unit, *at;
	FILE *f;

	if (dry_run() != 0)
		return;
	unit = strstr(listing, "\nunit /lib/systemd/system/blocktraind.service:");
	ck_assert_msg(unit != NULL, "%s", listing);
	ck_assert_msg(strstr(unit, "/usr/local") == NULL, "%s", unit);
	ck_assert_msg(strstr(unit, "\n  ExecStartPre=/usr/bin/blocktraind -n "
	    "-c /etc/blocktrain/blocktrain.conf\n") != NULL, "%s", unit);
	ck_assert_msg(strstr(unit, "\n  User=blocktrain\n") != NULL, "%s",
	    unit);
	snprintf(path, sizeof(path), "%s/scripts/blocktraind.service",
	    TOP_SRCDIR);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if ((at = strstr(line, "/usr/local/bin/")) != NULL)
			memmove(at + 5, at + 11, strlen(at + 11) + 1);
		snprintf(want, sizeof(want), "\n  %s", line);
		ck_assert_msg(strstr(unit, want) != NULL, "the packaged unit "
		    "lacks '%.*s':\n%s", (int)strlen(line) - 1, line, unit);
	}
	fclose(f);
}
END_TEST

START_TEST(test_maintainer_scripts)
{
	static const char *const scripts[] = { "postinst", "prerm", "postrm" };
	char out[4096];
	size_t i;

	for (i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++)
		ck_assert_msg(tu_run_cmd(out, sizeof(out), "sh -n "
		    "%s/scripts/debian/%s 2>&1", TOP_SRCDIR, scripts[i]) == 0,
		    "%s: %s", scripts[i], out);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "grep -q 'adduser "
	    "--system' %s/scripts/debian/postinst", TOP_SRCDIR) == 0,
	    "postinst makes no system user");
}
END_TEST

/* The configuration the package installs is one blocktraind takes: the
 * unit's ExecStartPre on it, with a run, a peer list and an identity of
 * the test's. */
START_TEST(test_conffile_checks)
{
	char dir[256], state[300], peers[2048] = "", out[8192];
	int port = tu_port_base(1), rc;

	tu_temp_dir(dir, sizeof(dir), "check_package");
	tu_write_run(dir, 1, 2, 2, 30);
	snprintf(state, sizeof(state), "%s/state", dir);
	tu_peer_line(peers, sizeof(peers), port, 1, state);
	tu_write_file(dir, "peers", peers);
	rc = tu_run_cmd(out, sizeof(out), "cd %s && %s -n -c "
	    "%s/scripts/debian/blocktrain.conf -r run.conf -p peers -s state "
	    "-l 127.0.0.1:%d 2>&1", dir, abs_program(tu_blocktraind()), TOP_SRCDIR,
	    port);
	ck_assert_msg(rc == 0 && strstr(out, "configuration OK") != NULL,
	    "blocktraind -n: %d\n%s", rc, out);
	tu_remove_dir(dir);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("package");
	TCase *tc = tcase_create("package");

	tcase_add_test(tc, test_contents);
	tcase_add_test(tc, test_unit);
	tcase_add_test(tc, test_maintainer_scripts);
	tcase_add_test(tc, test_conffile_checks);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
