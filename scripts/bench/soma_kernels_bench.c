/* Times the SOMA expert's forward pass three ways on one backend: the
 * plain loss of one body on K*B sequences at once (the same positions as
 * the population, in the batch where the plain pass is fastest), the
 * population loss of K bodies
 * (the 2P evaluations of an SPSA step), and a whole SPSA step of P = K/2
 * directions (directions regenerated, the population, the estimate and
 * the Adam update), in byte positions per second (K*B*T per call), and
 * prints one line of key=value pairs with their ratios to the plain
 * forward. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "kernels/soma_model.h"
#include "kernels/spsa.h"

static void
usage(void)
{
	fprintf(stderr, "usage: soma-kernels-bench [--width D] [--mult M] "
	    "[--blocks L] [--batch B] [--window T] [--population K]\n"
	    "                          [--seconds S] [--backend "
	    "auto|cpu|cuda] [--threads N] [--group G]\n");
}

/* Calls fn until at least seconds have passed (after one warm-up call);
 * returns seconds per call. */
static double
time_calls(int (*fn)(void *), void *ctx, double seconds)
{
	double t0;
	int n = 0;

	if (fn(ctx) != 0)
		return -1.0;
	t0 = kn_now();
	do {
		if (fn(ctx) != 0)
			return -1.0;
		n++;
	} while (kn_now() - t0 < seconds);
	return (kn_now() - t0) / n;
}

struct bench {
	kn_soma_model *m;
	kn_spsa spsa;
	float *theta;
	float *bodies, *losses;
	int32_t *tokens;
	int K, B, T;
	char err[KN_ERR_LEN];
};

static int
plain(void *ctx)
{
	struct bench *b = ctx;
	double loss;

	return kn_soma_loss(b->m, b->tokens, b->K * b->B, b->T, &loss, b->err);
}

static int
population(void *ctx)
{
	struct bench *b = ctx;

	return kn_soma_population_loss(b->m, b->bodies, b->K, b->tokens, b->B,
	    b->T, b->losses, b->err);
}

static int
eval_population(void *ctx, const float *thetas, int K, float *losses,
    char *err)
{
	struct bench *b = ctx;

	return kn_soma_population_loss(b->m, thetas, K, b->tokens, b->B,
	    b->T, losses, err);
}

static int
spsa_step(void *ctx)
{
	struct bench *b = ctx;

	return kn_spsa_step(&b->spsa, b->theta, eval_population, b, NULL,
	    b->err);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "width", required_argument, NULL, 'd' },
		{ "mult", required_argument, NULL, 'm' },
		{ "blocks", required_argument, NULL, 'l' },
		{ "batch", required_argument, NULL, 'b' },
		{ "window", required_argument, NULL, 't' },
		{ "population", required_argument, NULL, 'k' },
		{ "seconds", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'e' },
		{ "threads", required_argument, NULL, 'n' },
		{ "group", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 }
	};
	kn_soma_shape shape = { 32, 4, 2 };
	kn_backend_kind kind = KN_BACKEND_CPU;
	const kn_backend *be;
	struct bench b = { .K = 128, .B = 32, .T = 128 };
	double seconds = 3.0, t_plain, t_pop, t_step, pos_plain, pos_pop;
	double pos_step;
	kn_spsa_config cfg;
	char desc[256];
	size_t nbody, i;
	int ch, threads = 0, group = 0, k;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'd': shape.width = atoi(optarg); break;
		case 'm': shape.mlp_mult = atoi(optarg); break;
		case 'l': shape.blocks = atoi(optarg); break;
		case 'b': b.B = atoi(optarg); break;
		case 't': b.T = atoi(optarg); break;
		case 'k': b.K = atoi(optarg); break;
		case 's': seconds = atof(optarg); break;
		case 'n': threads = atoi(optarg); break;
		case 'g': group = atoi(optarg); break;
		case 'e':
			if (kn_backend_parse(optarg, &kind) == 0)
				break;
			/* FALLTHROUGH */
		default:
			usage();
			return 2;
		}
	}
	if (b.K <= 0 || b.B <= 0 || b.T <= 0) {
		usage();
		return 2;
	}
	if (kn_pool_init(threads, b.err) != 0 ||
	    (be = kn_backend_get(kind, NULL, b.err)) == NULL ||
	    kn_soma_create(&b.m, &shape, be, b.err) != 0) {
		fprintf(stderr, "soma-kernels-bench: %s\n", b.err);
		return 1;
	}
	kn_soma_set_max_group(b.m, group);
	kn_backend_describe(be, desc, sizeof(desc));
	fprintf(stderr, "soma-kernels-bench: %s\n", desc);
	if (kn_soma_init(b.m, 1, b.err) != 0) {
		fprintf(stderr, "soma-kernels-bench: %s\n", b.err);
		return 1;
	}
	nbody = kn_soma_body_params(&shape);
	b.bodies = malloc((size_t)b.K * nbody * sizeof(float));
	b.losses = malloc((size_t)b.K * sizeof(float));
	b.tokens = malloc((size_t)b.K * b.B * (b.T + 1) * sizeof(int32_t));
	if (b.bodies == NULL || b.losses == NULL || b.tokens == NULL) {
		fprintf(stderr, "soma-kernels-bench: out of memory\n");
		return 1;
	}
	/* copies of the body, each perturbed as an SPSA step would */
	kn_soma_get_body(b.m, b.bodies);
	for (k = 1; k < b.K; k++)
		for (i = 0; i < nbody; i++)
			b.bodies[(size_t)k * nbody + i] = b.bodies[i] +
			    1e-3f * (float)((int)((k * 7 + i * 13) % 3) - 1);
	{
		kn_rng r;

		kn_rng_init(&r, 7, 0);
		for (i = 0; i < (size_t)b.K * b.B * (b.T + 1); i++)
			b.tokens[i] = (int32_t)kn_rng_below(&r, 256);
	}
	kn_spsa_config_default(&cfg);
	cfg.P = b.K / 2 > 0 ? b.K / 2 : 1;
	cfg.k_max = 2 * cfg.P;
	if ((b.theta = malloc(nbody * sizeof(float))) == NULL ||
	    kn_spsa_init(&b.spsa, nbody, &cfg, b.err) != 0) {
		fprintf(stderr, "soma-kernels-bench: %s\n", b.err);
		return 1;
	}
	kn_soma_get_body(b.m, b.theta);
	t_plain = time_calls(plain, &b, seconds);
	t_pop = time_calls(population, &b, seconds);
	t_step = time_calls(spsa_step, &b, seconds);
	if (t_plain < 0 || t_pop < 0 || t_step < 0) {
		fprintf(stderr, "soma-kernels-bench: %s\n", b.err);
		return 1;
	}
	pos_plain = (double)b.K * b.B * b.T / t_plain;
	pos_pop = (double)b.K * b.B * b.T / t_pop;
	pos_step = 2.0 * cfg.P * b.B * b.T / t_step;
	printf("impl=shardmeter-%s width=%d mult=%d blocks=%d body_params=%zu "
	    "B=%d T=%d K=%d P=%d threads=%d plain_positions_per_s=%.0f "
	    "population_positions_per_s=%.0f spsa_step_positions_per_s=%.0f "
	    "population_ratio=%.3f spsa_step_ratio=%.3f\n", be->name,
	    shape.width, shape.mlp_mult, shape.blocks, nbody, b.B, b.T, b.K,
	    cfg.P, kn_pool_threads(), pos_plain, pos_pop, pos_step,
	    pos_pop / pos_plain, pos_step / pos_plain);
	kn_spsa_free(&b.spsa);
	free(b.theta);
	kn_soma_free(b.m);
	free(b.bodies);
	free(b.losses);
	free(b.tokens);
	kn_pool_shutdown();
	return 0;
}
