/* shardmeter cuts: interval cuts that give every block an equal share of
 * the bound (DESIGN section 2), from a pilot: the e2e reference, trained
 * briefly on all of (0, 1], scores the bound on a grid of cells and the
 * cuts fall where the running share passes each block's part. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/cli/cmd.h"
#include "proto/corpus.h"
#include "daemon/blocktrain/train.h"
#include "kernels/error.h"
#include "kernels/pool.h"

#define CUTS_MAX_GRID 1024

struct cuts_args {
	struct cli_run run;
	int pilot;              /* steps of the pilot to train; 0: none */
	int grid;
	bt_eval_set set;
};

static int
cuts_option(void *args, int ch)
{
	struct cuts_args *a = args;

	switch (ch) {
	case 'p':
		return cli_parse_int("cuts", "pilot", optarg, 1, 1 << 30,
		    &a->pilot) ? 2 : CLI_CONTINUE;
	case 'g':
		return cli_parse_int("cuts", "grid", optarg, 2, CUTS_MAX_GRID,
		    &a->grid) ? 2 : CLI_CONTINUE;
	case 'w':
		return cli_parse_int("cuts", "windows", optarg, 1, 1 << 20,
		    &a->set.windows) ? 2 : CLI_CONTINUE;
	default: return 2;
	}
}

/* The pilot's checkpoint, trained here first when --pilot asks for it
 * and it is not there yet (or has fewer steps: training resumes). */
static int
cuts_pilot(const struct cuts_args *a, char *err)
{
	char path[PR_PATH_LEN + 32];
	tr_opts o = { 0 };

	tr_model_path(path, sizeof(path), a->run.dir, BT_E2E, 0, "ckpt");
	if (a->pilot == 0) {
		if (access(path, F_OK) != 0)
			return kn_error(err, KN_EINVAL, "no pilot in %s (%s "
			    "is missing): give --pilot STEPS to train one, or "
			    "train the e2e reference there", a->run.dir, path);
		return KN_OK;
	}
	o.spec = &a->run.spec;
	o.run_id = a->run.run_id;
	o.dir = a->run.dir;
	o.kind = BT_E2E;
	o.steps = a->pilot;
	o.every = a->pilot;
	o.be = a->run.be;
	o.progress = 1;
	return tr_train(&o, err);
}

/* The shares of the G cells of (0, 1] on the valid split, as the pilot
 * scores them. */
static int
cuts_cells(const struct cuts_args *a, double *cells, char *err)
{
	const pr_spec *s = &a->run.spec;
	kn_model *m;
	corpus c;
	int g, rc;

	if ((rc = corpus_open(&c, s->valid, s->valid_sha256,
	    (size_t)s->window + 2, err)) != 0)
		return rc;
	if ((rc = tr_load_model(&m, s, a->run.run_id, a->run.dir, BT_E2E, 0,
	    a->run.be, 32, err)) != 0) {
		corpus_close(&c);
		return rc;
	}
	for (g = 0; g < a->grid && rc == 0; g++)
		rc = bt_eval_share(m, s, &c, &a->set, (double)g / a->grid,
		    (double)(g + 1) / a->grid, &cells[g], err);
	kn_model_free(m);
	corpus_close(&c);
	return rc;
}

static int
cuts_exec(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_RUN_OPTIONS,
		{ "pilot", required_argument, NULL, 'p' },
		{ "grid", required_argument, NULL, 'g' },
		{ "windows", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 }
	};
	struct cuts_args a = { .grid = 16, .set = { 256, BT_EVAL_STRATA } };
	double cells[CUTS_MAX_GRID], cuts[PR_MAX_BLOCKS + 1], total = 0.0;
	char err[KN_ERR_LEN];
	int rc, b, T;

	if ((rc = cli_run_parse(self, &a.run, argc, argv, opts, cuts_option,
	    &a)) != CLI_CONTINUE)
		return rc;
	if (optind < argc) {
		fprintf(stderr, "shardmeter cuts: unexpected '%s'\n",
		    argv[optind]);
		return 2;
	}
	if ((rc = cli_run_open(&a.run, "cuts", 1)) != 0)
		return rc;
	if (pr_spec_method(&a.run.spec) != PR_METHOD_BLOCKTRAIN) {
		fprintf(stderr, "shardmeter cuts: %s is not a BlockTrain "
		    "spec\n", a.run.spec_path);
		return 2;
	}
	T = a.run.spec.blocks;
	if (cuts_pilot(&a, err) != 0 || cuts_cells(&a, cells, err) != 0 ||
	    bt_equal_cuts(cells, a.grid, T, cuts, err) != 0) {
		fprintf(stderr, "shardmeter cuts: %s\n", err);
		kn_pool_shutdown();
		return 1;
	}
	for (b = 0; b < a.grid; b++)
		total += cells[b];
	printf("# the pilot's bound %.4f nats/byte on %d cells of (0, 1]:\n#",
	    total, a.grid);
	for (b = 0; b < a.grid; b++)
		printf(" %.4f", cells[b]);
	printf("\n# equal shares of %.4f for %d blocks; put this line in "
	    "[model]:\ncuts = ", total / T, T);
	for (b = 1; b < T; b++)
		printf("%s%.4f", b > 1 ? ", " : "", cuts[b]);
	printf("\n");
	kn_pool_shutdown();
	return 0;
}

const struct cmd_entry cmd_cuts_entry = {
	.name = "cuts",
	.summary = "interval cuts that give each block an equal share, from "
	    "a pilot",
	.usage = "usage: shardmeter cuts --spec FILE --dir DIR [--pilot "
	    "STEPS] [--grid G]\n"
	    "                       [--windows N]\n"
	    "Scores the bound of the e2e reference in DIR (trained on all "
	    "of (0, 1]) on G\nequal cells of the noise range (default 16) "
	    "on the valid split, N windows\neach (default 256), and prints "
	    "the [model] cuts line that gives each of the\nspec's blocks an "
	    "equal share of it.  --pilot STEPS first trains that reference\n"
	    "to STEPS steps in DIR (resuming one there): a pilot of a few "
	    "hundred steps\nis enough.  Use a DIR of its own: the cuts "
	    "change the run id.\n",
	.exec = cuts_exec
};
