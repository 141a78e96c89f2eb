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

static void
spec_print(const pr_spec *s, const char *id)
{
	kn_model_shape bs = pr_spec_block_shape(s);
	kn_model_shape es = pr_spec_reference_shape(s, 0);
	double np_block = (double)kn_model_params_for(&bs);
	double np_e2e = (double)kn_model_params_for(&es);
	/* position blocks train on rows of two copies of the window */
	int rl = kn_model_row_len(&bs);
	kn_model_shape rs = bs;
	double fl, act;
	int b;

	rs.window = rl;
	rs.pos_block = 0;
	fl = 3.0 * kn_model_flops_per_window(&rs) * s->batch;
	/* activations kept for backward, per window: about (18 d + h n)
	 * floats per position and layer, plus logits */
	act = 4.0 * s->batch * rl * (s->layers_per_block *
	    (18.0 * s->width + (double)s->heads * rl * 2) + 2 * 256);

	printf("run id      %s\n", id);
	printf("blocks      %d x %d layers, width %d, %d heads, window %d\n",
	    s->blocks, s->layers_per_block, s->width, s->heads, s->window);
	if (rl > s->window)
		printf("positions   position blocks of %d, %d per window, "
		    "block-causal; each trained given the clean bytes "
		    "before it\n", s->position_block,
		    s->window / s->position_block);
	printf("intervals  ");
	for (b = 0; b < s->blocks; b++)
		printf(" (%.4g, %.4g]", s->cuts[b], s->cuts[b + 1]);
	printf("%s\n", s->equal_cuts ? " (equal)" : "");
	printf("parameters  %.0f per block (%.2f MB fp32), %.0f in the e2e "
	    "reference\n", np_block, np_block * 4 / 1e6, np_e2e);
	printf("compute     %.3f GFLOP per train step per block (batch %d), "
	    "%.1f TFLOP for %d steps\n", fl / 1e9, s->batch,
	    fl * s->steps / 1e12, s->steps);
	printf("memory      about %.0f MB per host (parameters, gradients, "
	    "AdamW moments, activations)\n", (np_block * 16 + act) / 1e6);
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
	    "%d: %zu body and %zu decoder parameters\n", e.blocks, e.mlp_mult,
	    e.width, kn_soma_body_params(&e), kn_soma_decoder_params(&e));
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
	.usage = "usage: shardmeter spec FILE\n"
	    "Validates a run spec and prints its run id and derived "
	    "figures.\n",
	.exec = spec_exec
};
