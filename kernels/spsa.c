/* SPSA with sparse Rademacher directions, the population evaluation it
 * shares with EGGROLL, Adam, and the plateau schedule.  Every parallel
 * loop splits the vector into fixed pieces and sums over directions in
 * index order inside a piece, so results do not depend on the pool. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "kernels/spsa.h"

/* Elements per pool task; also the stack scratch of one direction piece. */
#define SPSA_PIECE 4096
/* Folded into the stream so SPSA directions never share draws with other
 * users of the same seed (EGGROLL, initialisation). */
#define SPSA_TAG 0x53505341u /* "SPSA" */

struct zo_job {
	kn_zo_build_fn build;
	void *ctx;
	float *buf;
	size_t n;
	int k0, npieces;
};

static void
zo_build_task(void *ctx, int task, int thread)
{
	struct zo_job *j = ctx;
	int local = task / j->npieces;

	j->build(j->ctx, j->buf + (size_t)local * j->n, j->k0 + local,
	    task % j->npieces, thread);
}

int
kn_zo_population(int K, int k_max, size_t n, int groups, int npieces,
    kn_zo_build_fn build, void *bctx, float *buf, kn_zo_eval_fn eval,
    void *ectx, float *losses, int *calls, char *err)
{
	struct zo_job job = { .build = build, .ctx = bctx, .buf = buf,
	    .n = n, .npieces = npieces };
	int k0, rc, ncalls = 0;
	size_t i;

	if (K < 1 || k_max < 1 || groups < 1 || npieces < 1 || n == 0)
		return kn_error(err, KN_EINVAL, "zero-order population: K %d, "
		    "k_max %d, groups %d, pieces %d, n %zu", K, k_max, groups,
		    npieces, n);
	if ((k_max > K ? K : k_max) > INT_MAX / npieces)
		return kn_error(err, KN_EINVAL, "zero-order population: "
		    "%d copies of %d pieces is too many tasks", k_max,
		    npieces);
	for (k0 = 0; k0 < K; k0 += k_max) {
		int kc = K - k0 < k_max ? K - k0 : k_max;
		float *out = losses + (size_t)k0 * groups;

		job.k0 = k0;
		kn_pool_run(kc * npieces, zo_build_task, &job);
		if (err)
			err[0] = '\0';
		rc = eval(ectx, buf, kc, out, err);
		ncalls++;
		if (rc != 0) {
			if (err && err[0])
				return rc < 0 ? rc : KN_EINVAL;
			return kn_error(err, rc < 0 ? rc : KN_EINVAL,
			    "zero-order population: eval failed (%d)", rc);
		}
		for (i = 0; i < (size_t)kc * groups; i++)
			if (!isfinite(out[i]))
				return kn_error(err, KN_ENUM, "zero-order "
				    "population: copy %zu has a non-finite "
				    "loss (group %zu)", k0 + i / groups,
				    i % groups);
	}
	if (calls)
		*calls = ncalls;
	return 0;
}

/* Elements first .. first + len - 1 of the direction on stream; element i
 * is 16-bit half i % 8 of Philox block i / 8 (eight elements a call: the
 * draws were a quarter of an SPSA step's time at one word each).  The
 * density is taken in steps of 2^-16, and the scale from the density
 * actually drawn, so that E[z z^T] = I still holds exactly. */
static void
direction_range(float *z, size_t first, size_t len, uint64_t seed,
    uint64_t stream, float density)
{
	uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
	uint32_t ctr[4], w[4];
	/* u < half: +; half <= u < whole: -; so density 1 has no zeros */
	uint32_t whole = (uint32_t)lrint(ldexp((double)density, 16));
	uint32_t half;
	float scale;
	size_t i = 0;

	if (whole < 2)
		whole = 2;
	half = whole / 2;
	scale = (float)(1.0 / sqrt(ldexp((double)whole, -16)));
	ctr[2] = (uint32_t)stream;
	ctr[3] = (uint32_t)(stream >> 32);
	while (i < len) {
		uint64_t idx = first + i, block = idx / 8;
		size_t e;

		ctr[0] = (uint32_t)block;
		ctr[1] = (uint32_t)(block >> 32);
		kn_philox4x32(key, ctr, w);
		/* the elements of this block still wanted, from idx on */
		for (e = idx % 8; e < 8 && i < len; e++, i++) {
			uint32_t u = (w[e / 2] >> (16 * (e % 2))) & 0xffffu;

			z[i] = u < half ? scale : u < whole ? -scale : 0.0f;
		}
	}
}

static uint64_t
direction_stream(uint64_t expert, uint64_t step, uint64_t j)
{
	return kn_rng_stream(expert, step, j, SPSA_TAG);
}

void
kn_spsa_direction(float *z, size_t n, uint64_t seed, uint64_t expert,
    uint64_t step, uint64_t j, float density)
{
	direction_range(z, 0, n, seed, direction_stream(expert, step, j),
	    density);
}

void
kn_spsa_config_default(kn_spsa_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->P = 64;
	cfg->eps = 1e-3f;
	cfg->lr = 1e-3f;
	cfg->density = 0.5f;
	cfg->beta1 = 0.9f;
	cfg->beta2 = 0.999f;
	cfg->adam_eps = 1e-8f;
	cfg->k_max = 128;
	cfg->mode = KN_SPSA_INDEPENDENT;
	cfg->groups = 1;
	cfg->patience = 3;
	cfg->plateau_rel = 1e-3f;
	cfg->floor = 1e-5f;
}

static int
check_config(const kn_spsa_config *c, char *err)
{
	if (c->P < 1 || c->k_max < 1 || c->groups < 1)
		return kn_error(err, KN_EINVAL, "spsa: P %d, k_max %d and "
		    "groups %d must be at least 1", c->P, c->k_max, c->groups);
	if (c->P > INT_MAX / 2)
		return kn_error(err, KN_EINVAL, "spsa: P %d is too large",
		    c->P);
	if (!(c->eps > 0) || !(c->lr > 0) || !(c->adam_eps > 0) ||
	    !isfinite(c->eps) || !isfinite(c->lr))
		return kn_error(err, KN_EINVAL, "spsa: eps %g, lr %g and "
		    "adam_eps %g must be positive", (double)c->eps,
		    (double)c->lr, (double)c->adam_eps);
	if (!(c->density > 0 && c->density <= 1))
		return kn_error(err, KN_EINVAL, "spsa: density %g is not in "
		    "(0, 1]", (double)c->density);
	if (!(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 &&
	    c->beta2 < 1))
		return kn_error(err, KN_EINVAL, "spsa: Adam betas %g, %g are "
		    "not in [0, 1)", (double)c->beta1, (double)c->beta2);
	if (c->mode != KN_SPSA_INDEPENDENT && c->mode != KN_SPSA_SUMMED)
		return kn_error(err, KN_EINVAL, "spsa: unknown mode %d",
		    c->mode);
	if (c->patience < 1 || !(c->plateau_rel >= 0) || !(c->floor > 0))
		return kn_error(err, KN_EINVAL, "spsa: patience %d, "
		    "plateau_rel %g, floor %g", c->patience,
		    (double)c->plateau_rel, (double)c->floor);
	return 0;
}

int
kn_spsa_init(kn_spsa *s, size_t n, const kn_spsa_config *cfg, char *err)
{
	int rc;

	memset(s, 0, sizeof(*s));
	if ((rc = check_config(cfg, err)) != 0)
		return rc;
	if (n == 0 || n % (size_t)cfg->groups != 0)
		return kn_error(err, KN_EINVAL, "spsa: %zu parameters do not "
		    "split into %d equal groups", n, cfg->groups);
	if (n > SIZE_MAX / sizeof(float) / (size_t)cfg->k_max)
		return kn_error(err, KN_ENOMEM, "spsa: %d copies of %zu "
		    "parameters overflow", cfg->k_max, n);
	s->cfg = *cfg;
	s->n = n;
	s->seg = n / (size_t)cfg->groups;
	s->alloc_P = cfg->P;
	s->alloc_k_max = cfg->k_max;
	s->best = HUGE_VAL;
	s->m = calloc(n, sizeof(float));
	s->v = calloc(n, sizeof(float));
	s->grad = calloc(n, sizeof(float));
	s->copies = malloc((size_t)cfg->k_max * n * sizeof(float));
	s->losses = malloc((size_t)2 * cfg->P * cfg->groups * sizeof(float));
	s->coef = malloc((size_t)cfg->P * cfg->groups * sizeof(float));
	s->group_loss = calloc((size_t)cfg->groups, sizeof(double));
	if (!s->m || !s->v || !s->grad || !s->copies || !s->losses ||
	    !s->coef || !s->group_loss) {
		kn_spsa_free(s);
		return kn_error(err, KN_ENOMEM, "spsa: no memory for %zu "
		    "parameters, %d copies", n, cfg->k_max);
	}
	return 0;
}

void
kn_spsa_free(kn_spsa *s)
{
	free(s->m);
	free(s->v);
	free(s->grad);
	free(s->copies);
	free(s->losses);
	free(s->coef);
	free(s->group_loss);
	memset(s, 0, sizeof(*s));
}

/* The pieces of SPSA's loops: each lies inside one group's segment, so it
 * has one direction key. */
static size_t
pieces_per_group(const kn_spsa *s)
{
	return (s->seg + SPSA_PIECE - 1) / SPSA_PIECE;
}

static void
piece_range(const kn_spsa *s, int piece, size_t *group, size_t *lo,
    size_t *len)
{
	size_t per = pieces_per_group(s);

	*group = (size_t)piece / per;
	*lo = ((size_t)piece % per) * SPSA_PIECE;
	*len = s->seg - *lo < SPSA_PIECE ? s->seg - *lo : SPSA_PIECE;
}

struct spsa_job {
	const kn_spsa *s;
	const float *theta;
	float *grad;
};

/* Member 2j is theta + eps z_j, member 2j+1 theta - eps z_j. */
static void
spsa_build(void *ctx, float *copy, int member, int piece, int thread)
{
	struct spsa_job *j = ctx;
	const kn_spsa *s = j->s;
	float z[SPSA_PIECE];
	float eps = member % 2 ? -s->cfg.eps : s->cfg.eps;
	size_t g, lo, len, off, i;

	(void)thread;
	piece_range(s, piece, &g, &lo, &len);
	direction_range(z, lo, len, s->cfg.seed,
	    direction_stream(s->cfg.expert + g, s->step, (uint64_t)member / 2),
	    s->cfg.density);
	off = g * s->seg + lo;
	for (i = 0; i < len; i++)
		copy[off + i] = j->theta[off + i] + eps * z[i];
}

static void
spsa_accumulate(void *ctx, int task, int thread)
{
	struct spsa_job *j = ctx;
	const kn_spsa *s = j->s;
	float z[SPSA_PIECE];
	float *out;
	size_t g, lo, len, i;
	int d;

	(void)thread;
	piece_range(s, task, &g, &lo, &len);
	out = j->grad + g * s->seg + lo;
	memset(out, 0, len * sizeof(float));
	for (d = 0; d < s->cfg.P; d++) {
		float c = s->coef[(size_t)d * s->cfg.groups + g];

		direction_range(z, lo, len, s->cfg.seed,
		    direction_stream(s->cfg.expert + g, s->step,
		    (uint64_t)d), s->cfg.density);
		for (i = 0; i < len; i++)
			out[i] += c * z[i];
	}
	for (i = 0; i < len; i++)
		out[i] /= (float)s->cfg.P;
}

int
kn_spsa_estimate(kn_spsa *s, const float *theta, kn_zo_eval_fn eval,
    void *ctx, float *grad, kn_zo_stats *stats, char *err)
{
	struct spsa_job job = { .s = s, .theta = theta, .grad = grad };
	int P = s->cfg.P, G = s->cfg.groups, npieces, calls, rc, d, g;
	size_t per = pieces_per_group(s);

	if ((rc = check_config(&s->cfg, err)) != 0)
		return rc;
	if (P != s->alloc_P || s->cfg.k_max != s->alloc_k_max ||
	    (size_t)G * s->seg != s->n)
		return kn_error(err, KN_EINVAL, "spsa: P, k_max and groups "
		    "changed after kn_spsa_init");
	if (per > (size_t)INT_MAX / (size_t)G)
		return kn_error(err, KN_EINVAL, "spsa: too many pieces");
	npieces = (int)(per * (size_t)G);
	rc = kn_zo_population(2 * P, s->cfg.k_max, s->n, G, npieces,
	    spsa_build, &job, s->copies, eval, ctx, s->losses, &calls, err);
	if (rc != 0)
		return rc;
	for (g = 0; g < G; g++)
		s->group_loss[g] = 0;
	for (d = 0; d < P; d++) {
		const float *plus = s->losses + (size_t)2 * d * G;
		const float *minus = plus + G;
		double sum = 0;

		for (g = 0; g < G; g++) {
			double diff = (double)plus[g] - minus[g];

			s->coef[(size_t)d * G + g] =
			    (float)(diff / (2.0 * s->cfg.eps));
			sum += diff;
			s->group_loss[g] += ((double)plus[g] + minus[g]) / 2;
		}
		if (s->cfg.mode == KN_SPSA_SUMMED)
			for (g = 0; g < G; g++)
				s->coef[(size_t)d * G + g] =
				    (float)(sum / (2.0 * s->cfg.eps));
	}
	kn_pool_run(npieces, spsa_accumulate, &job);
	for (g = 0; g < G; g++)
		s->group_loss[g] /= P;
	if (stats) {
		stats->loss = 0;
		for (g = 0; g < G; g++)
			stats->loss += s->group_loss[g] / G;
		stats->group_loss = s->group_loss;
		stats->copies = (uint64_t)2 * P;
		stats->calls = calls;
	}
	return 0;
}

struct adam_job {
	kn_spsa *s;
	float *theta;
	float c1, c2;   /* bias corrections 1/(1 - beta^t) */
};

static void
adam_task(void *ctx, int task, int thread)
{
	struct adam_job *j = ctx;
	kn_spsa *s = j->s;
	float b1 = s->cfg.beta1, b2 = s->cfg.beta2;
	size_t lo = (size_t)task * SPSA_PIECE, hi = lo + SPSA_PIECE, i;

	(void)thread;
	if (hi > s->n)
		hi = s->n;
	for (i = lo; i < hi; i++) {
		float g = s->grad[i];
		float m = b1 * s->m[i] + (1.0f - b1) * g;
		float v = b2 * s->v[i] + (1.0f - b2) * g * g;

		s->m[i] = m;
		s->v[i] = v;
		j->theta[i] -= s->cfg.lr * (m * j->c1) /
		    (sqrtf(v * j->c2) + s->cfg.adam_eps);
	}
}

int
kn_spsa_step(kn_spsa *s, float *theta, kn_zo_eval_fn eval, void *ctx,
    kn_zo_stats *stats, char *err)
{
	struct adam_job job = { .s = s, .theta = theta };
	double t;
	int rc;

	rc = kn_spsa_estimate(s, theta, eval, ctx, s->grad, stats, err);
	if (rc != 0)
		return rc;
	t = (double)s->step + 1;
	job.c1 = (float)(1.0 / (1.0 - pow(s->cfg.beta1, t)));
	job.c2 = (float)(1.0 / (1.0 - pow(s->cfg.beta2, t)));
	kn_pool_run((int)((s->n + SPSA_PIECE - 1) / SPSA_PIECE), adam_task,
	    &job);
	s->step++;
	return 0;
}

int
kn_zo_plateau(double *best, int *stale, double val_loss, double rel,
    int patience)
{
	if (val_loss < *best - rel * fabs(*best) || *best == HUGE_VAL) {
		*best = val_loss;
		*stale = 0;
		return 0;
	}
	if (++*stale < patience)
		return 0;
	*stale = 0;
	return 1;
}

int
kn_spsa_plateau(kn_spsa *s, double val_loss)
{
	kn_spsa_config *c = &s->cfg;

	if (!kn_zo_plateau(&s->best, &s->stale, val_loss, c->plateau_rel,
	    c->patience))
		return 0;
	c->lr = c->lr / 2 > c->floor ? c->lr / 2 : c->floor;
	c->eps = c->eps / 2 > c->floor ? c->eps / 2 : c->floor;
	s->halvings++;
	return 1;
}
