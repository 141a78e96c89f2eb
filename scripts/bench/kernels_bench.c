/* Times the block train step (forward, backward, clipped AdamW) of one
 * model shape on one backend, and the GEMM share of it, and prints one
 * line of key=value pairs.  scripts/bench/kernels runs it beside the
 * PyTorch reference and OpenBLAS's sgemm peak. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/pool.h"
#include "kernels/rng.h"

extern void openblas_set_num_threads(int);
extern void cblas_sgemm(int, int, int, int, int, int, float, const float *,
    int, const float *, int, float, float *, int);

/* GFLOP/s of a square sgemm of size n, best of reps. */
static double
sgemm_peak(int n, int ours, int reps)
{
	float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4);
	float *c = malloc((size_t)n * n * 4);
	double best = 1e30;
	int r;

	kn_rng_fill_uniform(a, (size_t)n * n, 1, 1);
	kn_rng_fill_uniform(b, (size_t)n * n, 1, 2);
	for (r = 0; r < reps + 1; r++) {
		double t0 = kn_now();

		if (ours)
			kn_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
		else
			cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a, n, b, n,
			    0.0f, c, n);
		if (r > 0 && kn_now() - t0 < best)
			best = kn_now() - t0;
	}
	free(a); free(b); free(c);
	return 2.0 * n * n * (double)n / best / 1e9;
}

static void
usage(void)
{
	fprintf(stderr, "usage: kernels-bench [--width D] [--heads H] "
	    "[--layers L] [--window N] [--batch B] [--steps S] [--warmup W]\n"
	    "                     [--causal] [--backend auto|cpu|cuda] "
	    "[--threads T] [--peak]\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "width", required_argument, NULL, 'd' },
		{ "heads", required_argument, NULL, 'h' },
		{ "layers", required_argument, NULL, 'l' },
		{ "window", required_argument, NULL, 'n' },
		{ "batch", required_argument, NULL, 'b' },
		{ "steps", required_argument, NULL, 's' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "causal", no_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 't' },
		{ "peak", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 }
	};
	kn_model_shape shape = { 256, 4, 2, 128, 0 };
	kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	int batch = 32, steps = 30, warmup = 5, threads = 0, peak = 0, ch, i;
	kn_backend_kind kind = KN_BACKEND_CPU;
	const kn_backend *be;
	char err[KN_ERR_LEN], note[KN_ERR_LEN], desc[512];
	kn_model *m;
	size_t N;
	int32_t *input, *target;
	float *weight, loss = 0;
	double t0, dt, gemm_s = 0, gemm_flops = 0;
	kn_gemm_stats gs;
	kn_rng r;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'd': shape.width = atoi(optarg); break;
		case 'h': shape.heads = atoi(optarg); break;
		case 'l': shape.layers = atoi(optarg); break;
		case 'n': shape.window = atoi(optarg); break;
		case 'b': batch = atoi(optarg); break;
		case 's': steps = atoi(optarg); break;
		case 'w': warmup = atoi(optarg); break;
		case 'c': shape.causal = 1; break;
		case 't': threads = atoi(optarg); break;
		case 'p': peak = 1; break;
		case 'k':
			if (kn_backend_parse(optarg, &kind) != 0) {
				usage();
				return 2;
			}
			break;
		case 'H': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (kn_pool_init(threads, err) != 0) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	if ((be = kn_backend_get(kind, note, err)) == NULL) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	if (note[0])
		fprintf(stderr, "kernels-bench: %s\n", note);
	kn_backend_describe(be, desc, sizeof(desc));
	fprintf(stderr, "kernels-bench: %s\n", desc);
	if (kn_model_create(&m, &shape, be, batch, err) != 0) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	kn_model_init(m, 1);
	N = (size_t)batch * shape.window;
	input = malloc(N * 4);
	target = malloc(N * 4);
	weight = malloc(N * 4);
	/* the same batch as the PyTorch bench: random bytes, t ~ U(0,1)
	 * clamped at 1e-3, each position masked with probability t */
	kn_rng_init(&r, 1, 2);
	for (i = 0; i < batch; i++) {
		float t = fmaxf(kn_rng_uniform(&r), 1e-3f);

		for (int k = 0; k < shape.window; k++) {
			size_t p = (size_t)i * shape.window + k;
			int x = (int)kn_rng_below(&r, 256);
			int masked = kn_rng_uniform(&r) < t;

			target[p] = x;
			if (shape.causal) {
				input[p] = x;
				weight[p] = 1.0f / (float)shape.window;
			} else {
				input[p] = masked ? KN_MASK : x;
				weight[p] = masked ? 1.0f / (t * shape.window) : 0;
			}
		}
	}
	{
		kn_batch b = { input, target, weight, batch };

		for (i = 0; i < warmup; i++)
			kn_model_step(m, &b, &opt, 1e-3f, &loss, err);
		be->sync();
		kn_gemm_stats_reset();
		kn_gemm_stats_enable(be->kind == KN_BACKEND_CPU);
		t0 = kn_now();
		for (i = 0; i < steps; i++)
			if (kn_model_step(m, &b, &opt, 1e-3f, &loss, err) != 0) {
				fprintf(stderr, "kernels-bench: %s\n", err);
				return 1;
			}
		be->sync();
		dt = kn_now() - t0;
		kn_gemm_stats_enable(0);
		kn_gemm_stats_get(&gs);
		gemm_s = gs.seconds;
		gemm_flops = gs.flops;
	}
	printf("impl=shardmeter-%s causal=%d width=%d heads=%d layers=%d "
	    "window=%d batch=%d params=%zu steps=%d step_ms=%.3f "
	    "positions_per_s=%.1f model_gflops=%.1f gemm_share=%.3f "
	    "gemm_gflops=%.1f gemm=%s threads=%d loss=%.4f",
	    be->name, shape.causal, shape.width, shape.heads, shape.layers,
	    shape.window, batch, kn_model_num_params(m), steps,
	    1000.0 * dt / steps, (double)N * steps / dt,
	    3.0 * kn_model_flops_per_window(&shape) * batch * steps / dt / 1e9,
	    gemm_s / dt, gemm_s > 0 ? gemm_flops / gemm_s / 1e9 : 0.0,
	    kn_gemm_name(kn_gemm_current()), kn_pool_threads(), loss);
	if (peak && be->kind == KN_BACKEND_CPU) {
		double ours = sgemm_peak(1024, 1, 5), blas;

		openblas_set_num_threads(kn_pool_threads());
		blas = sgemm_peak(1024, 0, 5);
		openblas_set_num_threads(1);
		printf(" sgemm1024_ours_gflops=%.1f sgemm1024_openblas_gflops=%.1f",
		    ours, blas);
	}
	printf("\n");
	kn_model_free(m);
	free(input); free(target); free(weight);
	kn_pool_shutdown();
	return 0;
}
