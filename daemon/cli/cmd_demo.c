/* shardmeter demo: one small block trained on a text file for a few
 * hundred steps, to show the compute core working end to end on this
 * machine, with no spec and no run directory. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/cli/cmd.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/pool.h"
#include "kernels/rng.h"

#define DEMO_TEXT "/usr/share/common-licenses/GPL-3"
#define DEMO_BATCH 16
#define DEMO_WINDOW 64

struct demo_args {
	const char *path;
	int steps;
	int threads;
	kn_backend_kind backend;
};

static int
demo_parse(const struct cmd_entry *self, struct demo_args *d, int argc,
    char **argv)
{
	static const struct option opts[] = {
		{ "steps", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 's': d->steps = atoi(optarg); break;
		case 't': d->threads = atoi(optarg); break;
		case 'b':
			if (kn_backend_parse(optarg, &d->backend) != 0) {
				fprintf(stderr, "shardmeter demo: --backend takes "
				    "auto, cpu or cuda\n");
				return 2;
			}
			break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (optind < argc)
		d->path = argv[optind];
	if (d->steps <= 0) {
		fprintf(stderr, "shardmeter demo: --steps must be positive\n");
		return 2;
	}
	return CLI_CONTINUE;
}

/* Step step's batch of B windows: random windows of text, each masked at
 * its own noise level t, stratified over the batch and never below 1e-3. */
static void
demo_batch(const char *text, size_t len, int step, int B, int32_t *input,
    int32_t *target, float *weight)
{
	kn_rng r;
	int b, i;

	kn_rng_init(&r, 1, (uint64_t)step);
	for (b = 0; b < B; b++) {
		size_t start = kn_rng_below(&r, len - DEMO_WINDOW);
		float t = fmaxf((b + kn_rng_uniform(&r)) / B, 1e-3f);

		for (i = 0; i < DEMO_WINDOW; i++) {
			size_t p = (size_t)b * DEMO_WINDOW + i;
			int masked = kn_rng_uniform(&r) < t;

			target[p] = (unsigned char)text[start + i];
			input[p] = masked ? KN_MASK : target[p];
			weight[p] = masked ? 1.0f / (t * DEMO_WINDOW) : 0.0f;
		}
	}
}

/* The training loop with a live progress line on stdout. */
static void
demo_train(kn_model *m, const char *text, size_t len, int steps)
{
	kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	size_t N = (size_t)DEMO_BATCH * DEMO_WINDOW;
	int32_t *input = malloc(N * 4), *target = malloc(N * 4);
	float *weight = malloc(N * 4), loss = 0, first = 0;
	kn_batch batch = { input, target, weight, DEMO_BATCH };
	char err[KN_ERR_LEN];
	double t0 = kn_now(), el;
	int step;

	for (step = 0; step < steps; step++) {
		demo_batch(text, len, step, DEMO_BATCH, input, target, weight);
		if (kn_model_step(m, &batch, &opt, 2e-3f, &loss, err) != 0) {
			fprintf(stderr, "\nshardmeter demo: %s\n", err);
			break;
		}
		if (step == 0)
			first = loss;
		if (step % 10 == 0 || step == steps - 1) {
			el = kn_now() - t0;
			printf("\rstep %d/%d  loss %.3f nats/byte  %.0f "
			    "positions/s  ETA %.0fs   ", step + 1, steps, loss,
			    (double)N * (step + 1) / el,
			    el / (step + 1) * (steps - step - 1));
			fflush(stdout);
		}
	}
	printf("\ndemo: loss %.3f -> %.3f nats/byte in %.1fs\n", first, loss,
	    kn_now() - t0);
	free(input);
	free(target);
	free(weight);
}

static int
demo_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct demo_args d = { .path = DEMO_TEXT, .steps = 300 };
	kn_model_shape shape = { 64, 4, 2, DEMO_WINDOW, 0, 0 };
	char err[KN_ERR_LEN], note[KN_ERR_LEN], *text;
	const kn_backend *be;
	kn_model *m;
	size_t len;
	int rc;

	if ((rc = demo_parse(self, &d, argc, argv)) != CLI_CONTINUE)
		return rc;
	if (cli_read_file(d.path, &text, &len, err) != 0) {
		fprintf(stderr, "shardmeter: %s\n", err);
		return 1;
	}
	if (len < 1000) {
		fprintf(stderr, "shardmeter demo: %s is too short (%zu bytes)\n",
		    d.path, len);
		free(text);
		return 1;
	}
	if ((be = cli_backend_open(d.backend, d.threads, note, err)) == NULL ||
	    kn_model_create(&m, &shape, be, DEMO_BATCH, err) != 0) {
		fprintf(stderr, "shardmeter demo: %s\n", err);
		free(text);
		return 1;
	}
	cli_backend_report(be, note);
	printf("demo: one block, width %d, %d layers, window %d, %zu "
	    "parameters, on %s (%zu bytes)\n", shape.width, shape.layers,
	    shape.window, kn_model_num_params(m), d.path, len);
	kn_model_init(m, 1);
	demo_train(m, text, len, d.steps);
	free(text);
	kn_model_free(m);
	kn_pool_shutdown();
	return 0;
}

const struct cmd_entry cmd_demo_entry = {
	.name = "demo",
	.summary = "train one small block on a text file",
	.usage = "usage: shardmeter demo [--steps N] [--backend "
	    "auto|cpu|cuda] [--threads T] [FILE]\n"
	    "Trains one small masked-diffusion block on FILE "
	    "(default " DEMO_TEXT ").\n",
	.exec = demo_exec
};
