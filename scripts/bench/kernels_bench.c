/* Times the block train step (forward, backward, clipped AdamW) of one
 * model shape on one backend, and the GEMM share of it, and prints one
 * line of key=value pairs; --gemm-report adds a line per GEMM shape class
 * with both kernels' GFLOP/s, measured again here, and the one the plan
 * chose.  scripts/bench/kernels runs it beside the PyTorch reference and
 * OpenBLAS's sgemm peak. */
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
	    "[--threads T] [--peak]\n"
	    "                     [--gemm auto|own|blas] [--gemm-report]\n");
}

/* What the command line asks for. */
struct bench_opts {
	kn_model_shape shape;
	int batch, steps, warmup, threads, peak, gemm_report;
	kn_backend_kind kind;
	const char *gemm;       /* NULL: SM_GEMM, else auto */
};

/* What the timed steps measured. */
struct bench_result {
	double dt, gemm_s, gemm_flops;
	float loss;             /* of the last step */
};

/* -1 to go on, else the exit status: 0 after --help, 2 for a bad option. */
static int
parse_options(int argc, char **argv, struct bench_opts *o)
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
		{ "gemm", required_argument, NULL, 'g' },
		{ "gemm-report", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'd': o->shape.width = atoi(optarg); break;
		case 'h': o->shape.heads = atoi(optarg); break;
		case 'l': o->shape.layers = atoi(optarg); break;
		case 'n': o->shape.window = atoi(optarg); break;
		case 'b': o->batch = atoi(optarg); break;
		case 's': o->steps = atoi(optarg); break;
		case 'w': o->warmup = atoi(optarg); break;
		case 'c': o->shape.causal = 1; break;
		case 't': o->threads = atoi(optarg); break;
		case 'p': o->peak = 1; break;
		case 'g': o->gemm = optarg; break;
		case 'r': o->gemm_report = 1; break;
		case 'k':
			if (kn_backend_parse(optarg, &o->kind) != 0) {
				usage();
				return 2;
			}
			break;
		case 'H': usage(); return 0;
		default: usage(); return 2;
		}
	}
	return -1;
}

/* The same batch as the PyTorch bench: random bytes, t ~ U(0,1) clamped
 * at 1e-3, each position masked with probability t.  Arrays are
 * (batch, window). */
static void
fill_batch(const kn_model_shape *shape, int batch, int32_t *input,
    int32_t *target, float *weight)
{
	kn_rng r;
	int i;

	kn_rng_init(&r, 1, 2);
	for (i = 0; i < batch; i++) {
		float t = fmaxf(kn_rng_uniform(&r), 1e-3f);

		for (int k = 0; k < shape->window; k++) {
			size_t p = (size_t)i * shape->window + k;
			int x = (int)kn_rng_below(&r, 256);
			int masked = kn_rng_uniform(&r) < t;

			target[p] = x;
			if (shape->causal) {
				input[p] = x;
				weight[p] = 1.0f / (float)shape->window;
			} else {
				input[p] = masked ? KN_MASK : x;
				weight[p] = masked ? 1.0f / (t * shape->window) : 0;
			}
		}
	}
}

/* Warm-up steps (errors ignored), then the timed ones with the GEMM
 * share counted on the CPU backend. */
static int
time_steps(kn_model *m, const kn_backend *be, const kn_batch *b,
    const struct bench_opts *o, struct bench_result *res, char *err)
{
	static const kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	kn_gemm_stats gs;
	double t0;
	int i;

	for (i = 0; i < o->warmup; i++)
		kn_model_step(m, b, &opt, 1e-3f, &res->loss, err);
	be->sync();
	kn_gemm_stats_reset();
	kn_gemm_stats_enable(be->kind == KN_BACKEND_CPU);
	t0 = kn_now();
	for (i = 0; i < o->steps; i++)
		if (kn_model_step(m, b, &opt, 1e-3f, &res->loss, err) != 0)
			return -1;
	be->sync();
	res->dt = kn_now() - t0;
	kn_gemm_stats_enable(0);
	kn_gemm_stats_get(&gs);
	res->gemm_s = gs.seconds;
	res->gemm_flops = gs.flops;
	return 0;
}

/* The plan in a word for the result line: own, blas, or auto:ownX,blasY. */
static void
gemm_word(char *buf, size_t len)
{
	const kn_gemm_choice *c;
	int n, i, blas = 0;

	kn_gemm_plan_get(&c, &n);
	for (i = 0; i < n; i++)
		blas += c[i].pick == KN_GEMM_OPENBLAS;
	if (n > 0)
		snprintf(buf, len, "auto:own%d,blas%d", n - blas, blas);
	else
		snprintf(buf, len, "%s", kn_gemm_current() == KN_GEMM_AVX512 ?
		    "own" : "blas");
}

/* A line per class of the plan: both kernels timed afresh (the plan's
 * figures may come from the cache) beside the kernel the plan chose. */
static int
gemm_report(char *err)
{
	kn_gemm_choice fresh[KN_GEMM_MAX_SHAPES];
	const kn_gemm_choice *c;
	int n, i;

	kn_gemm_plan_get(&c, &n);
	if (n == 0) {
		printf("gemm_class none: the plan was forced (%s)\n",
		    kn_gemm_current() == KN_GEMM_AVX512 ? "own" : "blas");
		return 0;
	}
	memcpy(fresh, c, (size_t)n * sizeof(*c));
	if (kn_gemm_measure(fresh, n, err) != 0)
		return -1;
	for (i = 0; i < n; i++) {
		const kn_gemm_shape *s = &c[i].shape;

		printf("gemm_class op=%c%c M=%d N=%d K=%d pool=%d "
		    "own_gflops=%.1f blas_gflops=%.1f chosen=%s "
		    "plan_own_gflops=%.1f plan_blas_gflops=%.1f\n",
		    s->transA ? 'T' : 'N', s->transB ? 'T' : 'N', s->M, s->N,
		    s->K, s->parallel, fresh[i].own_gflops,
		    fresh[i].blas_gflops,
		    c[i].pick == KN_GEMM_OPENBLAS ? "blas" : "own",
		    c[i].own_gflops, c[i].blas_gflops);
	}
	return 0;
}

/* The one key=value line, with the sgemm peaks when --peak asks. */
static void
print_result(const struct bench_opts *o, const kn_backend *be,
    const kn_model *m, const struct bench_result *res)
{
	const kn_model_shape *s = &o->shape;
	size_t N = (size_t)o->batch * s->window;
	double dt = res->dt;
	char gemm[64];

	gemm_word(gemm, sizeof(gemm));
	printf("impl=shardmeter-%s causal=%d width=%d heads=%d layers=%d "
	    "window=%d batch=%d params=%zu steps=%d step_ms=%.3f "
	    "positions_per_s=%.1f model_gflops=%.1f gemm_share=%.3f "
	    "gemm_gflops=%.1f gemm=%s threads=%d loss=%.4f",
	    be->name, s->causal, s->width, s->heads, s->layers,
	    s->window, o->batch, kn_model_num_params(m), o->steps,
	    1000.0 * dt / o->steps, (double)N * o->steps / dt,
	    3.0 * kn_model_flops_per_window(s) * o->batch * o->steps / dt /
	    1e9, res->gemm_s / dt,
	    res->gemm_s > 0 ? res->gemm_flops / res->gemm_s / 1e9 : 0.0,
	    gemm, kn_pool_threads(), res->loss);
	if (o->peak && be->kind == KN_BACKEND_CPU) {
		double ours = sgemm_peak(1024, 1, 5), blas;

		openblas_set_num_threads(kn_pool_threads());
		blas = sgemm_peak(1024, 0, 5);
		openblas_set_num_threads(1);
		printf(" sgemm1024_ours_gflops=%.1f sgemm1024_openblas_gflops=%.1f",
		    ours, blas);
	}
	printf("\n");
}

int
main(int argc, char **argv)
{
	struct bench_opts o = { { 256, 4, 2, 128, 0, 0 }, 32, 30, 5, 0, 0, 0,
	    KN_BACKEND_CPU, NULL };
	struct bench_result res = { 0, 0, 0, 0 };
	const kn_backend *be;
	char err[KN_ERR_LEN], note[KN_ERR_LEN], desc[512];
	kn_model *m;
	size_t N;
	int32_t *input, *target;
	float *weight;
	int rc;

	if ((rc = parse_options(argc, argv, &o)) >= 0)
		return rc;
	if (kn_pool_init(o.threads, err) != 0 ||
	    (be = kn_backend_get(o.kind, note, err)) == NULL) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	if (note[0])
		fprintf(stderr, "kernels-bench: %s\n", note);
	if (kn_backend_plan(be, o.shape.width, o.shape.heads, o.shape.window,
	    o.batch, o.gemm, err) != 0) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	kn_backend_describe(be, desc, sizeof(desc));
	fprintf(stderr, "kernels-bench: %s\n", desc);
	if (kn_model_create(&m, &o.shape, be, o.batch, err) != 0) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	kn_model_init(m, 1);
	N = (size_t)o.batch * o.shape.window;
	input = malloc(N * 4);
	target = malloc(N * 4);
	weight = malloc(N * 4);
	fill_batch(&o.shape, o.batch, input, target, weight);
	{
		kn_batch b = { input, target, weight, o.batch };

		if (time_steps(m, be, &b, &o, &res, err) != 0) {
			fprintf(stderr, "kernels-bench: %s\n", err);
			return 1;
		}
	}
	print_result(&o, be, m, &res);
	if (o.gemm_report && be->kind == KN_BACKEND_CPU &&
	    gemm_report(err) != 0) {
		fprintf(stderr, "kernels-bench: %s\n", err);
		return 1;
	}
	kn_model_free(m);
	free(input); free(target); free(weight);
	kn_pool_shutdown();
	return 0;
}
