/* The tree's layering (README, "Layout"), read from the sources: each
 * folder includes only the folders below it, the daemon's root holds only
 * its main, a folder's private declarations are its one internal.h, and
 * one file parses HTTP requests.  A wall that a prefix only promised is
 * one a later change can walk through unseen; these tests make it one
 * that stops the build's tests. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/testutil.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

/* Each folder and the folders it may include, itself aside.  Lower
 * layers first; a folder not listed here (tests, scripts) is not a
 * layer. */
static const struct {
	const char *folder;
	const char *may[12];
} layers[] = {
	{ "kernels", { NULL } },
	{ "proto", { "kernels", NULL } },
	{ "soma", { "proto", "kernels", NULL } },
	{ "plan", { "proto", "kernels", NULL } },
	{ "daemon/blocktrain", { "soma", "plan", "proto", "kernels", NULL } },
	{ "daemon/core", { "soma", "plan", "proto", "kernels", NULL } },
	{ "daemon/net", { "daemon/core", "soma", "plan", "proto", "kernels",
	    NULL } },
	{ "daemon/rounds", { "daemon/net", "daemon/core", "soma", "plan",
	    "proto", "kernels", NULL } },
	{ "daemon/node", { "daemon/rounds", "daemon/net", "daemon/core",
	    "daemon/blocktrain", "soma", "plan", "proto", "kernels", NULL } },
	{ "daemon/pipeline", { "daemon/rounds", "daemon/net", "daemon/core",
	    "daemon/blocktrain", "soma", "plan", "proto", "kernels", NULL } },
	{ "daemon/cli", { "daemon/node", "daemon/pipeline", "daemon/rounds",
	    "daemon/net", "daemon/core", "daemon/blocktrain", "soma", "plan",
	    "proto", "kernels", NULL } },
};

#define NLAYERS (sizeof(layers) / sizeof(layers[0]))

/* The layer a path of the tree ("daemon/net/tls.h") belongs to: the
 * longest folder of the table that starts it, -1 for none. */
static int
layer_of(const char *path)
{
	size_t i, best_len = 0;
	int best = -1;

	for (i = 0; i < NLAYERS; i++) {
		size_t n = strlen(layers[i].folder);

		if (strncmp(path, layers[i].folder, n) == 0 &&
		    path[n] == '/' && n > best_len) {
			best = (int)i;
			best_len = n;
		}
	}
	return best;
}

static int
may_include(int from, int to)
{
	int i;

	if (from == to)
		return 1;
	for (i = 0; layers[from].may[i] != NULL; i++)
		if (strcmp(layers[from].may[i], layers[to].folder) == 0)
			return 1;
	return 0;
}

static int
is_source(const char *name)
{
	const char *dot = strrchr(name, '.');

	return dot != NULL && (strcmp(dot, ".c") == 0 ||
	    strcmp(dot, ".h") == 0 || strcmp(dot, ".cu") == 0 ||
	    strcmp(dot, ".cuh") == 0);
}

typedef void (*visit_fn)(const char *rel, const char *abs, void *arg);

/* Every source file below rel (a path from the tree's top), depth
 * first. */
static void
walk(const char *rel, visit_fn fn, void *arg)
{
	char abs[4096], sub[2048];
	struct dirent *e;
	DIR *d;

	snprintf(abs, sizeof(abs), "%s/%s", TOP_SRCDIR, rel);
	d = opendir(abs);
	ck_assert_msg(d != NULL, "cannot open %s", abs);
	while ((e = readdir(d)) != NULL) {
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", rel, e->d_name);
		snprintf(abs, sizeof(abs), "%s/%s", TOP_SRCDIR, sub);
		if (stat(abs, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			walk(sub, fn, arg);
		else if (S_ISREG(st.st_mode) && is_source(e->d_name))
			fn(sub, abs, arg);
	}
	closedir(d);
}

typedef struct {
	int files;
	int bad;
	char first[2048];
} tally;

static void
note_bad(tally *t, const char *fmt, const char *a, const char *b)
{
	if (t->bad++ == 0)
		snprintf(t->first, sizeof(t->first), fmt, a, b);
}

/* Each #include "x/y.h" of a layer's file names a layer it may include
 * (an include without a folder is a system or same-folder header). */
static void
check_includes(const char *rel, const char *abs, void *arg)
{
	tally *t = arg;
	int from = layer_of(rel);
	char line[1024];
	FILE *f;

	if (from < 0)
		return;
	t->files++;
	f = fopen(abs, "r");
	ck_assert_msg(f != NULL, "cannot read %s", abs);
	while (fgets(line, sizeof(line), f) != NULL) {
		char target[512], *q;
		const char *p = line;
		int to;

		while (*p == ' ' || *p == '\t')
			p++;
		if (*p != '#')
			continue;
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		if (strncmp(p, "include", 7) != 0)
			continue;
		p += 7;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p != '"')
			continue;
		snprintf(target, sizeof(target), "%s", p + 1);
		if ((q = strchr(target, '"')) == NULL)
			continue;
		*q = '\0';
		if (strchr(target, '/') == NULL)
			continue;
		to = layer_of(target);
		if (to >= 0 && !may_include(from, to))
			note_bad(t, "%s includes %s", rel, target);
	}
	fclose(f);
}

START_TEST(test_includes_point_down)
{
	tally t = { 0 };
	size_t i;

	for (i = 0; i < NLAYERS; i++)
		if (strchr(layers[i].folder, '/') == NULL)
			walk(layers[i].folder, check_includes, &t);
	walk("daemon", check_includes, &t);
	ck_assert_msg(t.files > 200, "only %d files read below %s", t.files,
	    TOP_SRCDIR);
	ck_assert_msg(t.bad == 0, "%d includes point up or across, first: %s",
	    t.bad, t.first);
}
END_TEST

/* daemon/ holds its main and the layer folders, no other source. */
START_TEST(test_daemon_root_holds_main_only)
{
	char abs[4096];
	struct dirent *e;
	int mains = 0, others = 0;
	char other[256] = "";
	DIR *d;

	snprintf(abs, sizeof(abs), "%s/daemon", TOP_SRCDIR);
	ck_assert((d = opendir(abs)) != NULL);
	while ((e = readdir(d)) != NULL) {
		if (!is_source(e->d_name))
			continue;
		if (strcmp(e->d_name, "blocktraind.c") == 0)
			mains++;
		else if (others++ == 0)
			snprintf(other, sizeof(other), "%s", e->d_name);
	}
	closedir(d);
	ck_assert_int_eq(mains, 1);
	ck_assert_msg(others == 0, "daemon/ holds %d other sources, such as %s",
	    others, other);
}
END_TEST

static void
check_private(const char *rel, const char *abs, void *arg)
{
	tally *t = arg;
	size_t n = strlen(rel);

	(void)abs;
	t->files++;
	if (n > 10 && strcmp(rel + n - 10, "_private.h") == 0)
		note_bad(t, "%s%s", rel, " (a folder's private declarations "
		    "belong in its internal.h)");
}

START_TEST(test_one_internal_header_per_folder)
{
	tally t = { 0 };

	walk("daemon", check_private, &t);
	ck_assert_msg(t.bad == 0, "%s", t.first);
}
END_TEST

/* The layer table knows every folder of daemon/: a new folder is a new
 * row, placed in the direction, not a hole in the wall. */
START_TEST(test_every_daemon_folder_is_a_layer)
{
	char abs[4096], rel[512];
	struct dirent *e;
	DIR *d;

	snprintf(abs, sizeof(abs), "%s/daemon", TOP_SRCDIR);
	ck_assert((d = opendir(abs)) != NULL);
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		size_t i;
		int found = 0;

		if (e->d_name[0] == '.')
			continue;
		snprintf(abs, sizeof(abs), "%s/daemon/%s", TOP_SRCDIR,
		    e->d_name);
		if (stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		snprintf(rel, sizeof(rel), "daemon/%s", e->d_name);
		for (i = 0; i < NLAYERS; i++)
			found |= strcmp(layers[i].folder, rel) == 0;
		ck_assert_msg(found, "%s is in no layer of the table", rel);
	}
	closedir(d);
}
END_TEST

static void
count_parser_calls(const char *rel, const char *abs, void *arg)
{
	tally *t = arg;
	char line[1024];
	int here = 0;
	FILE *f;
	size_t n = strlen(rel);

	if (n < 2 || strcmp(rel + n - 2, ".c") != 0)
		return;
	f = fopen(abs, "r");
	ck_assert_msg(f != NULL, "cannot read %s", abs);
	while (fgets(line, sizeof(line), f) != NULL)
		here |= strstr(line, "http_parser_" "execute(") != NULL;
	fclose(f);
	/* the first file named, and how many */
	if (here && t->files++ == 0)
		snprintf(t->first, sizeof(t->first), "%s", rel);
}

/* One HTTP stack: a single file runs the request parser, so every port's
 * requests meet the same bounds (tests and scripts included: a second
 * parser there would test something the daemon does not run). */
START_TEST(test_one_http_parser)
{
	static const char *tops[] = { "kernels", "proto", "soma", "plan",
	    "daemon", "scripts", "tests" };
	tally t = { 0 };
	size_t i;

	for (i = 0; i < sizeof(tops) / sizeof(tops[0]); i++)
		walk(tops[i], count_parser_calls, &t);
	ck_assert_msg(t.files == 1, "%d files call http_parser_execute (%s)",
	    t.files, t.first);
	ck_assert_str_eq(t.first, "daemon/net/http_server.c");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("layout");
	TCase *tc = tcase_create("tree");

	tcase_add_test(tc, test_includes_point_down);
	tcase_add_test(tc, test_daemon_root_holds_main_only);
	tcase_add_test(tc, test_one_internal_header_per_folder);
	tcase_add_test(tc, test_every_daemon_folder_is_a_layer);
	tcase_add_test(tc, test_one_http_parser);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
