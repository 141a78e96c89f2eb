/* SOMA's independence ablation (issue 11, DESIGN section 3): N experts
 * from one start, on the same data and the same SPSA directions, trained
 * once on their independent losses and once on the summed loss; prints
 * the test loss of both after the same updates and the variance ratio
 * of the two gradient estimators at the start, per seed. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/corpus.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/spsa.h"
#include "soma/ablation.h"

#define MAX_EXPERTS 16
#define PROG "soma-ablation"

struct opts {
	const char *cluster[MAX_EXPERTS];
	int N;
	const char *test, *out;
	int steps, seeds, P, width, B, T, threads, eval_every, reps,
	    eval_batch;
	float lr, eps, density;
	kn_backend_kind kind;
};

/* What the runs of one seed share. */
struct ablation {
	struct opts o;
	corpus cl[MAX_EXPERTS], test;
	size_t train_len[MAX_EXPERTS];
	kn_soma_model *m;
	sa_abl_packed p;
	size_t nbody, n;
	float *theta0;  /* (N, nbody) the common start */
	char err[KN_ERR_LEN];
};

/* What one run ends with. */
struct result {
	double test[MAX_EXPERTS], held[MAX_EXPERTS], test_mean, held_mean;
	double seconds, step_seconds;   /* all, and in updates alone */
};

static void
usage(void)
{
	fprintf(stderr, "usage: " PROG " --clusters F0,F1,... --test FILE "
	    "[--steps 1000] [--seeds 3] [--P 64]\n"
	    "       [--width 32] [--batch 2] [--window 32] [--threads N] "
	    "[--eval-every 100] [--out DIR]\n"
	    "       [--lr 1e-3] [--eps 1e-3] [--density 0.5] [--reps 16] "
	    "[--eval-batch 256] [--backend cpu|cuda]\n");
}

static int
parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "clusters", required_argument, NULL, 'c' },
		{ "test", required_argument, NULL, 'x' },
		{ "steps", required_argument, NULL, 's' },
		{ "seeds", required_argument, NULL, 'S' },
		{ "P", required_argument, NULL, 'P' },
		{ "width", required_argument, NULL, 'd' },
		{ "batch", required_argument, NULL, 'b' },
		{ "window", required_argument, NULL, 't' },
		{ "threads", required_argument, NULL, 'n' },
		{ "eval-every", required_argument, NULL, 'v' },
		{ "out", required_argument, NULL, 'o' },
		{ "lr", required_argument, NULL, 'l' },
		{ "eps", required_argument, NULL, 'e' },
		{ "density", required_argument, NULL, 'D' },
		{ "reps", required_argument, NULL, 'r' },
		{ "eval-batch", required_argument, NULL, 'E' },
		{ "backend", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 }
	};
	static char list[4096];
	char *tok, *save;
	int ch;

	*o = (struct opts){ .steps = 1000, .seeds = 3, .P = 64, .width = 32,
	    .B = 2, .T = 32, .eval_every = 100, .reps = 16,
	    .eval_batch = 256, .lr = 1e-3f, .eps = 1e-3f, .density = 0.5f,
	    .kind = KN_BACKEND_CPU };
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'c':
			snprintf(list, sizeof(list), "%s", optarg);
			o->N = 0;
			for (tok = strtok_r(list, ",", &save); tok != NULL;
			    tok = strtok_r(NULL, ",", &save)) {
				if (o->N == MAX_EXPERTS)
					return -1;
				o->cluster[o->N++] = tok;
			}
			break;
		case 'x': o->test = optarg; break;
		case 's': o->steps = atoi(optarg); break;
		case 'S': o->seeds = atoi(optarg); break;
		case 'P': o->P = atoi(optarg); break;
		case 'd': o->width = atoi(optarg); break;
		case 'b': o->B = atoi(optarg); break;
		case 't': o->T = atoi(optarg); break;
		case 'n': o->threads = atoi(optarg); break;
		case 'v': o->eval_every = atoi(optarg); break;
		case 'o': o->out = optarg; break;
		case 'l': o->lr = strtof(optarg, NULL); break;
		case 'e': o->eps = strtof(optarg, NULL); break;
		case 'D': o->density = strtof(optarg, NULL); break;
		case 'r': o->reps = atoi(optarg); break;
		case 'E': o->eval_batch = atoi(optarg); break;
		case 'k':
			if (kn_backend_parse(optarg, &o->kind) == 0)
				break;
			return -1;
		default:
			return -1;
		}
	}
	if (optind != argc || o->N < 1 || o->test == NULL ||
	    o->steps < 1 || o->seeds < 1 || o->P < 1 || o->width < 1 ||
	    o->B < 1 || o->T < 1 || o->eval_every < 1 || o->reps < 2 ||
	    o->eval_batch < 1 || !(o->lr > 0) || !(o->eps > 0) ||
	    !(o->density > 0 && o->density <= 1))
		return -1;
	return 0;
}

static void
spsa_config(const struct ablation *a, uint64_t seed, int mode,
    kn_spsa_config *c)
{
	kn_spsa_config_default(c);
	c->P = a->o.P;
	c->k_max = 2 * a->o.P;
	c->lr = a->o.lr;
	c->eps = a->o.eps;
	c->density = a->o.density;
	c->mode = mode;
	c->groups = a->o.N;
	c->seed = seed;
	c->expert = 0;
}

/* Every expert's minibatch of a step, from its cluster's training part. */
static int
draw(struct ablation *a, uint64_t seed, uint64_t step)
{
	int g, rc;

	for (g = 0; g < a->o.N; g++) {
		rc = sa_abl_batch(a->cl[g].data, a->train_len[g], a->o.B,
		    a->o.T, seed, (uint64_t)g, step, a->p.tokens +
		    (size_t)g * a->o.B * (a->o.T + 1), a->err);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* Each expert on its own cluster's held-out tail; the mean to *mean. */
static int
held_out(struct ablation *a, const float *theta, double *held, double *mean)
{
	int g, rc;

	*mean = 0;
	for (g = 0; g < a->o.N; g++) {
		rc = sa_abl_span_loss(a->m, theta + (size_t)g * a->nbody, 1,
		    a->cl[g].data + a->train_len[g],
		    a->cl[g].len - a->train_len[g], a->o.eval_batch, a->o.T,
		    &held[g], a->err);
		if (rc != 0)
			return rc;
		*mean += held[g] / a->o.N;
	}
	return 0;
}

static int
test_loss(struct ablation *a, const float *theta, int K, double *test,
    double *mean)
{
	int g, rc;

	rc = sa_abl_span_loss(a->m, theta, K, a->test.data, a->test.len,
	    a->o.eval_batch, a->o.T, test, a->err);
	if (rc != 0)
		return rc;
	*mean = 0;
	for (g = 0; g < K; g++)
		*mean += test[g] / K;
	return 0;
}

/* The relative variance of both estimators at the start, on step 0's
 * minibatches, over reps direction keys, around the exact gradient;
 * *ratio_spread is the same ratio from the estimates' own spread. */
static int
variance(struct ablation *a, uint64_t seed, double relvar[2],
    double *ratio_spread)
{
	kn_spsa s;
	kn_spsa_config c;
	float *g, *exact;
	double spread[2];
	int mode, r, rc;

	g = malloc((size_t)a->o.reps * a->n * sizeof(float));
	exact = malloc(a->n * sizeof(float));
	if (g == NULL || exact == NULL) {
		free(g);
		free(exact);
		return kn_error(a->err, KN_ENOMEM, "variance buffers");
	}
	if ((rc = draw(a, seed, 0)) != 0 ||
	    (rc = sa_abl_packed_grad(&a->p, a->theta0, exact, a->err)) != 0)
		goto out;
	for (mode = 0; mode < 2; mode++) {
		spsa_config(a, seed, mode ? KN_SPSA_SUMMED :
		    KN_SPSA_INDEPENDENT, &c);
		if ((rc = kn_spsa_init(&s, a->n, &c, a->err)) != 0)
			goto out;
		for (r = 0; r < a->o.reps && rc == 0; r++) {
			/* keys far from the training steps' */
			s.step = (1ull << 40) + (uint64_t)r;
			rc = kn_spsa_estimate(&s, a->theta0, sa_abl_packed_eval,
			    &a->p, g + (size_t)r * a->n, NULL, a->err);
		}
		kn_spsa_free(&s);
		if (rc != 0 || (rc = sa_abl_relvar(g, a->o.reps, a->n, exact,
		    &relvar[mode], &spread[mode], a->err)) != 0)
			goto out;
	}
	*ratio_spread = spread[1] / spread[0];
out:
	free(g);
	free(exact);
	return rc;
}

static FILE *
open_csv(const struct ablation *a, const char *mode, uint64_t seed)
{
	char path[4096];
	FILE *f;

	if (a->o.out == NULL)
		return NULL;
	snprintf(path, sizeof(path), "%s/%s-s%llu.csv", a->o.out, mode,
	    (unsigned long long)seed);
	if ((f = fopen(path, "w")) == NULL)
		fprintf(stderr, PROG ": %s: %s (no CSV)\n", path,
		    strerror(errno));
	else
		fprintf(f, "step,loss,val\n");
	return f;
}

/* steps updates from the common start in one mode; theta (n) ends as
 * the trained experts. */
static int
run(struct ablation *a, uint64_t seed, int mode, float *theta,
    struct result *res)
{
	const char *name = mode == KN_SPSA_SUMMED ? "summed" : "independent";
	kn_spsa s;
	kn_spsa_config c;
	kn_zo_stats st;
	double t0 = kn_now(), ts, val;
	FILE *csv;
	int t, rc;

	memcpy(theta, a->theta0, a->n * sizeof(float));
	spsa_config(a, seed, mode, &c);
	if ((rc = kn_spsa_init(&s, a->n, &c, a->err)) != 0)
		return rc;
	csv = open_csv(a, name, seed);
	if (csv && (rc = held_out(a, theta, res->held, &val)) == 0)
		fprintf(csv, "0,,%.6f\n", val);
	res->step_seconds = 0;
	for (t = 0; t < a->o.steps && rc == 0; t++) {
		ts = kn_now();
		if ((rc = draw(a, seed, (uint64_t)t)) != 0 ||
		    (rc = kn_spsa_step(&s, theta, sa_abl_packed_eval, &a->p,
		    &st, a->err)) != 0)
			break;
		res->step_seconds += kn_now() - ts;
		if ((t + 1) % a->o.eval_every != 0 && t + 1 != a->o.steps) {
			if (csv)
				fprintf(csv, "%d,%.6f,\n", t + 1, st.loss);
			continue;
		}
		if ((rc = held_out(a, theta, res->held, &val)) != 0)
			break;
		if (csv)
			fprintf(csv, "%d,%.6f,%.6f\n", t + 1, st.loss, val);
		fprintf(stderr, PROG ": seed %llu %s step %d train %.4f "
		    "held-out %.4f (%.0f s)\n", (unsigned long long)seed,
		    name, t + 1, st.loss, val, kn_now() - t0);
	}
	kn_spsa_free(&s);
	if (csv)
		fclose(csv);
	if (rc == 0)
		rc = held_out(a, theta, res->held, &res->held_mean);
	if (rc == 0)
		rc = test_loss(a, theta, a->o.N, res->test, &res->test_mean);
	res->seconds = kn_now() - t0;
	return rc;
}

static void
print_list(const char *what, const double *x, int n)
{
	int i;

	printf("  %s", what);
	for (i = 0; i < n; i++)
		printf(" %.4f", x[i]);
	printf("\n");
}

static int
open_data(struct ablation *a)
{
	size_t need = (size_t)a->o.T + 1;
	int g, rc;

	for (g = 0; g < a->o.N; g++) {
		rc = corpus_open(&a->cl[g], a->o.cluster[g], "", need,
		    a->err);
		if (rc != 0)
			return rc;
		a->train_len[g] = sa_abl_train_len(a->cl[g].len);
		if (a->train_len[g] < need ||
		    a->cl[g].len - a->train_len[g] < need)
			return kn_error(a->err, KN_EINVAL, "%s: %zu bytes are "
			    "too few for a training part and a 2%% held-out "
			    "tail of %zu bytes each", a->o.cluster[g],
			    a->cl[g].len, need);
	}
	return corpus_open(&a->test, a->o.test, "", need, a->err);
}

static int
setup(struct ablation *a)
{
	kn_soma_shape shape = { a->o.width, 4, 2 };
	const kn_backend *be;
	char desc[256];
	int rc, g;

	if ((rc = open_data(a)) != 0 ||
	    (rc = kn_pool_init(a->o.threads, a->err)) != 0)
		return rc;
	if ((be = kn_backend_get(a->o.kind, NULL, a->err)) == NULL)
		return KN_ENODEV;
	if ((rc = kn_soma_create(&a->m, &shape, be, a->err)) != 0 ||
	    (rc = sa_abl_packed_init(&a->p, a->m, a->o.N, a->o.B, a->o.T,
	    2 * a->o.P, a->err)) != 0)
		return rc;
	a->nbody = kn_soma_body_params(&shape);
	a->n = (size_t)a->o.N * a->nbody;
	if ((a->theta0 = malloc(a->n * sizeof(float))) == NULL)
		return kn_error(a->err, KN_ENOMEM, "start");
	kn_backend_describe(be, desc, sizeof(desc));
	printf("# %s; %d threads\n", desc, kn_pool_threads());
	printf("# N %d experts, width %d (%zu body parameters each), "
	    "P %d, density %.2f, lr %g, eps %g (fixed: no plateau "
	    "schedule), Adam defaults\n", a->o.N, a->o.width, a->nbody,
	    a->o.P, a->o.density, a->o.lr, a->o.eps);
	printf("# minibatch %d windows of %d bytes per expert per step; "
	    "%d steps, %d seeds; held-out every %d steps\n", a->o.B,
	    a->o.T + 1, a->o.steps, a->o.seeds, a->o.eval_every);
	for (g = 0; g < a->o.N; g++)
		printf("# cluster %d: %s, %zu bytes, training %zu, held-out "
		    "tail %zu\n", g, a->o.cluster[g], a->cl[g].len,
		    a->train_len[g], a->cl[g].len - a->train_len[g]);
	printf("# test CE: each expert on all of %s (%zu bytes) in windows "
	    "of %d bytes, mean over the experts (no router); nats/byte\n",
	    a->o.test, a->test.len, a->o.T + 1);
	printf("# difference = summed - independent (> 0: independent "
	    "better)\n");
	fflush(stdout);
	return 0;
}

static void
teardown(struct ablation *a)
{
	int g;

	sa_abl_packed_free(&a->p);
	kn_soma_free(a->m);
	free(a->theta0);
	for (g = 0; g < a->o.N; g++)
		if (a->cl[g].data)
			corpus_close(&a->cl[g]);
	if (a->test.data)
		corpus_close(&a->test);
	kn_pool_shutdown();
}

/* One seed: the start, the variance ratio, both runs; adds the
 * difference and the variance ratio to the totals. */
static int
one_seed(struct ablation *a, uint64_t seed, float *theta, double *diff,
    double *ratio)
{
	struct result res[2];
	double relvar[2], ratio_spread = 0, start[1], start_mean,
	    held0[MAX_EXPERTS], held0_mean;
	int g, mode, rc;

	if ((rc = kn_soma_init(a->m, seed, a->err)) != 0)
		return rc;
	kn_soma_get_body(a->m, a->theta0);
	for (g = 1; g < a->o.N; g++)
		memcpy(a->theta0 + (size_t)g * a->nbody, a->theta0,
		    a->nbody * sizeof(float));
	if ((rc = test_loss(a, a->theta0, 1, start, &start_mean)) != 0 ||
	    (rc = held_out(a, a->theta0, held0, &held0_mean)) != 0 ||
	    (rc = variance(a, seed, relvar, &ratio_spread)) != 0)
		return rc;
	printf("seed %llu: start test CE %.4f, held-out %.4f; relative "
	    "variance independent %.1f summed %.1f (theory %.1f, %.1f) "
	    "ratio %.3f (from spread %.3f)\n", (unsigned long long)seed,
	    start_mean, held0_mean, relvar[0], relvar[1],
	    (a->nbody - 2 + 1 / a->o.density) / a->o.P,
	    (a->n - 2 + 1 / a->o.density) / a->o.P, relvar[1] / relvar[0],
	    ratio_spread);
	fflush(stdout);
	for (mode = 0; mode < 2; mode++)
		if ((rc = run(a, seed, mode ? KN_SPSA_SUMMED :
		    KN_SPSA_INDEPENDENT, theta, &res[mode])) != 0)
			return rc;
	printf("seed %llu: steps %d independent test CE %.4f summed test CE "
	    "%.4f difference %+.4f (runs %.0f s, %.0f s; %.3f, %.3f s a "
	    "step)\n", (unsigned long long)seed, a->o.steps,
	    res[0].test_mean, res[1].test_mean,
	    res[1].test_mean - res[0].test_mean, res[0].seconds,
	    res[1].seconds, res[0].step_seconds / a->o.steps,
	    res[1].step_seconds / a->o.steps);
	print_list("independent test per expert:", res[0].test, a->o.N);
	print_list("summed      test per expert:", res[1].test, a->o.N);
	print_list("independent held-out per expert:", res[0].held, a->o.N);
	print_list("summed      held-out per expert:", res[1].held, a->o.N);
	fflush(stdout);
	*diff = res[1].test_mean - res[0].test_mean;
	*ratio = relvar[1] / relvar[0];
	return 0;
}

int
main(int argc, char **argv)
{
	static struct ablation a;
	double diff, ratio, diff_sum = 0, ratio_sum = 0;
	float *theta = NULL;
	int s, better = 0, rc;

	if (parse(argc, argv, &a.o) != 0) {
		usage();
		return 2;
	}
	if (a.o.out && mkdir(a.o.out, 0777) != 0 && errno != EEXIST) {
		fprintf(stderr, PROG ": %s: %s\n", a.o.out, strerror(errno));
		return 1;
	}
	if ((rc = setup(&a)) != 0 ||
	    (theta = malloc(a.n * sizeof(float))) == NULL) {
		fprintf(stderr, PROG ": %s\n", rc ? a.err : "out of memory");
		teardown(&a);
		return 1;
	}
	for (s = 1; s <= a.o.seeds; s++) {
		if ((rc = one_seed(&a, (uint64_t)s, theta, &diff, &ratio))
		    != 0) {
			fprintf(stderr, PROG ": seed %d: %s\n", s, a.err);
			break;
		}
		diff_sum += diff;
		ratio_sum += ratio;
		better += diff > 0;
	}
	free(theta);
	teardown(&a);
	if (rc != 0)
		return 1;
	printf("mean difference (summed - independent) %.4f nats/byte over "
	    "%d seeds; independent lower in %d of %d\n", diff_sum /
	    a.o.seeds, a.o.seeds, better, a.o.seeds);
	printf("ablation_diff_mean=%.4f independent_better=%d/%d "
	    "variance_ratio=%.3f\n", diff_sum / a.o.seeds, better,
	    a.o.seeds, ratio_sum / a.o.seeds);
	return 0;
}
