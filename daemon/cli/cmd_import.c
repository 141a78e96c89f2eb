/* shardmeter import: the checkpoints of a file that 'shardmeter export'
 * wrote, checked whole and written back into a run's folder, the same
 * bytes export read. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/cli/cmd.h"
#include "daemon/cli/export.h"

struct import_args {
	const char *in, *dir, *spec_path;
	int force;
};

static int
import_parse(const struct cmd_entry *self, struct import_args *a, int argc,
    char **argv)
{
	static const struct option opts[] = {
		{ "in", required_argument, NULL, 'i' },
		{ "dir", required_argument, NULL, 'D' },
		{ "spec", required_argument, NULL, 'S' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'i': a->in = optarg; break;
		case 'D': a->dir = optarg; break;
		case 'S': a->spec_path = optarg; break;
		case 'f': a->force = 1; break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (a->in == NULL || a->dir == NULL || optind != argc) {
		fprintf(stderr, "shardmeter import: --in FILE and --dir DIR are "
		    "required, and nothing else\n");
		return 2;
	}
	return CLI_CONTINUE;
}

static int
import_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct import_args a = { 0 };
	char err[PR_ERR_LEN], want[PR_RUN_ID_LEN];
	xp_summary sum;
	pr_spec s;
	int rc, i;

	if ((rc = import_parse(self, &a, argc, argv)) != CLI_CONTINUE)
		return rc;
	if (a.spec_path != NULL && (pr_spec_load(&s, a.spec_path, err) != 0 ||
	    pr_spec_run_id(&s, want, err) != 0)) {
		fprintf(stderr, "shardmeter import: %s\n", err);
		return 1;
	}
	if (mkdir(a.dir, 0755) != 0 && access(a.dir, W_OK) != 0) {
		fprintf(stderr, "shardmeter import: cannot create %s\n", a.dir);
		return 1;
	}
	if (xp_import(a.in, a.dir, a.spec_path ? want : NULL, a.force, &sum,
	    err) != 0) {
		fprintf(stderr, "shardmeter import: %s\n", err);
		return 1;
	}
	for (i = 0; i < sum.nmodels; i++)
		printf("%-8s step %lld, round %lld -> %s\n",
		    sum.models[i].prefix, (long long)sum.models[i].step,
		    (long long)sum.models[i].round, sum.models[i].path);
	printf("imported %d models of run %.16s... from %s\n", sum.nmodels,
	    sum.run_id, a.in);
	return 0;
}

const struct cmd_entry cmd_import_entry = {
	.name = "import",
	.summary = "write the checkpoints of an exported safetensors file",
	.usage = "usage: shardmeter import --in MODEL.safetensors --dir DIR "
	    "[--spec FILE] [--force]\n"
	    "Reads a file 'shardmeter export' wrote, checks it whole (header, "
	    "offsets,\ndtypes and shapes, the spec in its metadata against "
	    "its run id, with --spec\nthat it is that run's) and writes each "
	    "model's checkpoint to DIR, the same\nbytes the export read.  An "
	    "existing checkpoint is replaced only with --force;\nnothing is "
	    "written unless the whole file is valid.\n",
	.exec = import_exec
};
