/* shardmeter export: a run's trained blocks (and the references whose
 * checkpoints are there; SOMA's experts and seed) as one safetensors file
 * for PyTorch, the spec in its metadata.  The work is daemon/cli/export.c's. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>

#include "daemon/cli/cmd.h"
#include "daemon/cli/export.h"

struct export_args {
	struct cli_run run;
	const char *out;
};

static int
export_option(void *args, int ch)
{
	struct export_args *a = args;

	if (ch != 'o')
		return 2;
	a->out = optarg;
	return CLI_CONTINUE;
}

/* One line per model, then the file. */
static void
export_report(const xp_summary *sum, const char *out)
{
	int i;

	for (i = 0; i < sum->nmodels; i++)
		printf("%-8s step %lld, round %lld, %zu parameters <- %s\n",
		    sum->models[i].prefix, (long long)sum->models[i].step,
		    (long long)sum->models[i].round, sum->models[i].params,
		    sum->models[i].path);
	printf("exported %d models of run %.16s... (%zu tensors, %zu bytes) "
	    "to %s\n", sum->nmodels, sum->run_id, sum->tensors, sum->bytes,
	    out);
}

static int
export_exec(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_RUN_OPTIONS,
		{ "out", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 }
	};
	struct export_args a = { 0 };
	char err[PR_ERR_LEN];
	xp_summary sum;
	int rc;

	if ((rc = cli_run_parse(self, &a.run, argc, argv, opts,
	    export_option, &a)) != CLI_CONTINUE)
		return rc;
	if (a.out == NULL || optind != argc) {
		fprintf(stderr, "shardmeter export: --out FILE is required, and "
		    "nothing else\n");
		return 2;
	}
	a.run.no_backend = 1;   /* it converts files, computes nothing */
	if ((rc = cli_run_open(&a.run, "export", 1)) != 0)
		return rc;
	if (xp_export(&a.run.spec, a.run.run_id, a.run.dir, a.out, &sum,
	    err) != 0) {
		fprintf(stderr, "shardmeter export: %s\n", err);
		return 1;
	}
	export_report(&sum, a.out);
	return 0;
}

const struct cmd_entry cmd_export_entry = {
	.name = "export",
	.summary = "write the run's models as one safetensors file",
	.usage = "usage: shardmeter export --spec FILE --dir DIR --out "
	    "MODEL.safetensors\n"
	    "Writes every block's checkpoint in DIR (all must be there), "
	    "and the e2e and\ncausal references when their checkpoints are, "
	    "to one safetensors file\n(float32), for PyTorch and other "
	    "readers: tensors named PREFIX.wte,\nPREFIX.layerL.attn.qkv.weight, "
	    "... with PREFIX block1..blockT, e2e or causal,\nand in the "
	    "metadata the spec, its run id, the cuts and each model's shape,\n"
	    "step and round.  scripts/torch_reference.py runs it in PyTorch; "
	    "'shardmeter\nimport' writes the checkpoints back.\n"
	    "On a spec of method = soma: every expert (DIR/expert-E.ckpt, all "
	    "must be there)\nand the seed (DIR/seed.ckpt) when it is there, as "
	    "expertE.body.blockB.w_ih,\n..., expertE.decoder.e; the router "
	    "stays in the clusters folder.\n",
	.exec = export_exec
};
