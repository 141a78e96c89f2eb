/* shardmeter: the command-line tool.  main only dispatches; each command
 * is a cmd_entry in its own cmd_<name>.c, listed in cmd.c's cmd_table[],
 * which --help and 'help COMMAND' also read. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "daemon/cli/cmd.h"

static void
usage(FILE *f)
{
	const struct cmd_entry *const *e;

	fprintf(f, "usage: shardmeter COMMAND [options]\n\ncommands:\n");
	for (e = cmd_table; *e != NULL; e++)
		fprintf(f, "  %-10s %s\n", (*e)->name, (*e)->summary);
	fprintf(f, "\n'shardmeter COMMAND --help' describes each command; "
	    "see shardmeter(1).\n");
}

static int
unknown(const char *name)
{
	fprintf(stderr, "shardmeter: unknown command '%s'\n", name);
	usage(stderr);
	return 2;
}

/* help [COMMAND]: the list of commands, or one command's usage. */
static int
help(int argc, char **argv)
{
	const struct cmd_entry *e;

	if (argc < 3) {
		usage(stdout);
		return 0;
	}
	if ((e = cmd_find(argv[2])) == NULL)
		return unknown(argv[2]);
	return cli_help(e);
}

int
main(int argc, char **argv)
{
	const struct cmd_entry *e;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("shardmeter %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "help") == 0)
		return help(argc, argv);
	if ((e = cmd_find(argv[1])) == NULL)
		return unknown(argv[1]);
	return e->exec(e, argc - 1, argv + 1);
}
