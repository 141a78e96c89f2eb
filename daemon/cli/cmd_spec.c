/* shardmeter spec: validates a run spec and prints its run id and the
 * figures derived from it (parameters, compute, memory), so a run can be
 * sized before any host starts. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "kernels/model.h"
#include "proto/spec.h"
#include "soma/trainer.h"

/* What block b costs: parameters, FLOPs of a training step and bytes a
 * host holds while training it. */
struct block_cost {
	double params, flops, memory;
};

static struct block_cost
block_cost(const pr_spec *s, int b)
{
	kn_model_shape bs = pr_spec_block_shape(s, b);
	/* position blocks train on rows of two copies of the window */
	int rl = kn_model_row_len(&bs);
	kn_model_shape rs = bs;
	struct block_cost c;
	double act;

	rs.window = rl;
	rs.pos_block = 0;
	c.params = (double)kn_model_params_for(&bs);
	c.flops = 3.0 * kn_model_flops_per_window(&rs) * s->batch;
	/* activations kept for backward, per window: about (18 d + h n)
	 * floats per position and layer, plus logits */
	act = 4.0 * s->batch * rl * (bs.layers *
	    (18.0 * s->width + (double)s->heads * rl * 2) + 2 * 256);
	c.memory = c.params * 16 + act;
	return c;
}

/* Blocks of their own sizes: one line of figures each. */
static void
spec_print_blocks(const pr_spec *s)
{
	int b;

	printf("per block   layers  parameters  MB fp32  GFLOP/step  "
	    "TFLOP/run  MB/host\n");
	for (b = 0; b < s->blocks; b++) {
		struct block_cost c = block_cost(s, b);

		printf("  block %-3d %6d  %10.0f  %7.2f  %10.3f  %9.1f  %7.0f\n",
		    b + 1, pr_spec_layers(s, b), c.params, c.params * 4 / 1e6,
		    c.flops / 1e9, c.flops * s->steps / 1e12, c.memory / 1e6);
	}
}

static void
spec_print(const pr_spec *s, const char *id)
{
	kn_model_shape bs = pr_spec_block_shape(s, 0);
	kn_model_shape es = pr_spec_reference_shape(s, 0);
	struct block_cost c = block_cost(s, 0);
	double np_e2e = (double)kn_model_params_for(&es);
	int rl = kn_model_row_len(&bs), b;

	printf("run id      %s\n", id);
	if (s->layers_given) {
		printf("blocks      %d blocks of", s->blocks);
		for (b = 0; b < s->blocks; b++)
			printf("%s %d", b > 0 ? "," : "", pr_spec_layers(s, b));
		printf(" layers (%d in all), width %d, %d heads, window %d\n",
		    pr_spec_total_layers(s), s->width, s->heads, s->window);
	} else
		printf("blocks      %d x %d layers, width %d, %d heads, window "
		    "%d\n", s->blocks, s->layers_per_block, s->width, s->heads,
		    s->window);
	if (rl > s->window)
		printf("positions   position blocks of %d, %d per window, "
		    "block-causal; each trained given the clean bytes "
		    "before it\n", s->position_block,
		    s->window / s->position_block);
	printf("intervals  ");
	for (b = 0; b < s->blocks; b++)
		printf(" (%.4g, %.4g]", s->cuts[b], s->cuts[b + 1]);
	printf("%s\n", s->equal_cuts ? " (equal)" : "");
	if (s->layers_given) {
		spec_print_blocks(s);
		printf("parameters  %.0f in the e2e reference\n", np_e2e);
	} else {
		printf("parameters  %.0f per block (%.2f MB fp32), %.0f in the "
		    "e2e reference\n", c.params, c.params * 4 / 1e6, np_e2e);
		printf("compute     %.3f GFLOP per train step per block (batch "
		    "%d), %.1f TFLOP for %d steps\n", c.flops / 1e9, s->batch,
		    c.flops * s->steps / 1e12, s->steps);
		printf("memory      about %.0f MB per host (parameters, "
		    "gradients, AdamW moments, activations)\n", c.memory / 1e6);
	}
	printf("optimizer   AdamW lr %g (warmup %d, cosine to %g), wd %g, "
	    "betas (%g, %g), clip %g, batch %d, %d steps\n", s->lr, s->warmup,
	    s->lr_min, s->weight_decay, s->beta1, s->beta2, s->clip, s->batch,
	    s->steps);
	printf("sync        %d replicas per block, %d local steps per round, "
	    "outer lr %g, deadline %gs\n", s->replicas, s->local_steps,
	    s->outer_lr, s->round_deadline);
}

/* A SOMA spec: the experts, the controls' shape, and the compute that
 * the controls are matched on. */
static void
spec_print_soma(const pr_spec *s, const char *id)
{
	const pr_soma *m = &s->soma;
	kn_soma_shape e = sa_expert_shape(s), c = sa_control_shape(s);
	int k = m->top_k < m->experts ? m->top_k : m->experts;

	printf("run id      %s\n", id);
	printf("method      soma: %d experts, top-%d of them mixed, routed on "
	    "%d bytes (%s losses)\n", m->experts, k, m->route_bytes, m->mode);
	printf("expert      %d residual blocks (LSTM + GELU MLP x%d), width "
	    "%d: %zu body and %zu decoder parameters (decoder %s)\n",
	    e.blocks, e.mlp_mult, e.width, kn_soma_body_params(&e),
	    kn_soma_decoder_params(&e), sa_expert_decoder_learns(s) ?
	    "learnt by each expert" : "the seed's, frozen");
	printf("controls    width %d: %zu body parameters (at most %d "
	    "experts' bodies)\n", c.width, kn_soma_body_params(&c),
	    m->experts);
	printf("spsa        P %d, density %g, eps %g, lr %g (halving on a "
	    "plateau of %d validations to %g)\n", m->perturbations,
	    m->density, m->eps, m->lr, m->patience, m->lr_floor);
	printf("steps       seed %d, each expert %d, batch %d x %d bytes, "
	    "validation every %d\n", m->seed_steps, m->steps, m->batch,
	    m->window, m->eval_every);
	printf("compute     %.4g byte positions: seed %.4g, experts %.4g "
	    "(the controls' budget)\n", (double)sa_soma_positions(s),
	    (double)m->seed_steps * sa_step_positions(s, SA_SEED, 0),
	    (double)m->experts * m->steps * sa_step_positions(s, SA_EXPERT,
	    0));
}

static int
spec_exec(const struct cmd_entry *self, int argc, char **argv)
{
	pr_spec s;
	char err[PR_ERR_LEN], id[PR_RUN_ID_LEN];

	if (argc != 2 || strcmp(argv[1], "--help") == 0) {
		cli_help(self);
		return argc == 2 ? 0 : 2;
	}
	if (strcmp(argv[1], "--new") == 0) {
		fputs(pr_spec_template(), stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (pr_spec_load(&s, argv[1], err) != 0 ||
	    pr_spec_run_id(&s, id, err) != 0) {
		fprintf(stderr, "shardmeter spec: %s\n", err);
		return 1;
	}
	if (pr_spec_method(&s) == PR_METHOD_SOMA)
		spec_print_soma(&s, id);
	else
		spec_print(&s, id);
	return 0;
}

const struct cmd_entry cmd_spec_entry = {
	.name = "spec",
	.summary = "validate a run spec, print its run id and figures",
	.usage = "usage: shardmeter spec FILE | --new\n"
	    "Validates a run spec and prints its run id and derived "
	    "figures.\n"
	    "--new prints a commented spec to start a run from, with the "
	    "settings that\nmeasured best (those a spec leaves out keep older "
	    "specs' meaning).\n",
	.exec = spec_exec
};
