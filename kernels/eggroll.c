/* EGGROLL on the CPU: the population is built one (member, tensor) at a
 * time from regenerated low-rank factors, and the update regenerates them
 * again, block of rows by block of rows, summing the pairs in index order
 * so that the bits do not depend on the pool. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/eggroll.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"

/* Rows of a matrix, or elements of a vector, per update task. */
#define EGG_ROWS 16
#define EGG_VBLOCK 1024
/* The factors' streams, apart from each other and from SPSA's. */
#define EGG_TAG_A 0x45474741u
#define EGG_TAG_B 0x45474742u
#define EGG_TAG_V 0x45474756u

static int
is_vector(const kn_egg_tensor *t)
{
	return t->cols == 1;
}

static size_t
tensor_size(const kn_egg_tensor *t)
{
	return (size_t)t->rows * (size_t)t->cols;
}

static uint64_t
egg_stream(uint64_t step, int pair, int t, uint64_t tag)
{
	return kn_rng_stream(step, (uint64_t)pair, (uint64_t)t, tag);
}

/* Rows row0 .. row0 + nr - 1 of A, and all of B, into a (nr, r) and
 * b (cols, r). */
static void
factors(const kn_egg *s, int t, uint64_t step, int pair, int row0, int nr,
    float *a, float *b)
{
	int r = s->cfg.rank;

	kn_rng_fill_normal_from(a, (size_t)nr * r, 0.0f, 1.0f, s->cfg.seed,
	    egg_stream(step, pair, t, EGG_TAG_A), (size_t)row0 * r);
	kn_rng_fill_normal(b, (size_t)s->tensors[t].cols * r, 0.0f, 1.0f,
	    s->cfg.seed, egg_stream(step, pair, t, EGG_TAG_B));
}

/* E[row, col] from a row of A and a row of B: one function, so the
 * population and the update see the same bits. */
static float
lowrank_elem(const float *arow, const float *brow, int r, float inv_sqrt_r)
{
	float acc = 0.0f;
	int q;

	for (q = 0; q < r; q++)
		acc += arow[q] * brow[q];
	return acc * inv_sqrt_r;
}

void
kn_egg_perturbation(const kn_egg *s, int t, uint64_t step, int member,
    float *E, float *scratch)
{
	const kn_egg_tensor *tt = &s->tensors[t];
	int pair = member / 2, r = s->cfg.rank, row, col;
	float inv = 1.0f / sqrtf((float)r);
	float *a = scratch, *b = scratch + (size_t)tt->rows * r;

	if (is_vector(tt)) {
		kn_rng_fill_normal(E, (size_t)tt->rows, 0.0f, 1.0f,
		    s->cfg.seed, egg_stream(step, pair, t, EGG_TAG_V));
		return;
	}
	factors(s, t, step, pair, 0, tt->rows, a, b);
	for (row = 0; row < tt->rows; row++)
		for (col = 0; col < tt->cols; col++)
			E[(size_t)row * tt->cols + col] = lowrank_elem(
			    a + (size_t)row * r, b + (size_t)col * r, r, inv);
}

int
kn_egg_init(kn_egg *s, size_t n, const kn_egg_tensor *tensors,
    int ntensors, const kn_egg_config *cfg, char *err)
{
	size_t end = 0, need = EGG_VBLOCK;
	int t;

	memset(s, 0, sizeof(*s));
	if (cfg->K < 2 || cfg->K % 2 || cfg->rank < 1 || cfg->k_max < 1 ||
	    cfg->groups < 1)
		return kn_error(err, KN_EINVAL, "eggroll: K %d (even, >= 2), "
		    "rank %d, k_max %d, groups %d", cfg->K, cfg->rank,
		    cfg->k_max, cfg->groups);
	if (!(cfg->sigma > 0) || !(cfg->lr >= 0) || !isfinite(cfg->sigma) ||
	    !isfinite(cfg->lr))
		return kn_error(err, KN_EINVAL, "eggroll: sigma %g, lr %g",
		    (double)cfg->sigma, (double)cfg->lr);
	if (ntensors < 1 || ntensors > INT_MAX / 2 - 1 || n == 0)
		return kn_error(err, KN_EINVAL, "eggroll: %d tensors in %zu "
		    "parameters", ntensors, n);
	for (t = 0; t < ntensors; t++) {
		const kn_egg_tensor *tt = &tensors[t];

		if (tt->rows < 1 || tt->cols < 1 || tt->offset < end ||
		    tt->offset > n || tensor_size(tt) > n - tt->offset)
			return kn_error(err, KN_EINVAL, "eggroll: tensor %d "
			    "(%d x %d at %zu) overlaps another or leaves the "
			    "%zu parameters", t, tt->rows, tt->cols,
			    tt->offset, n);
		end = tt->offset + tensor_size(tt);
		if (!is_vector(tt) && (size_t)(tt->rows + tt->cols) *
		    cfg->rank > need)
			need = (size_t)(tt->rows + tt->cols) * cfg->rank;
	}
	if (n > SIZE_MAX / sizeof(float) / (size_t)cfg->k_max)
		return kn_error(err, KN_ENOMEM, "eggroll: %d copies of %zu "
		    "parameters overflow", cfg->k_max, n);
	s->cfg = *cfg;
	s->n = n;
	s->ntensors = ntensors;
	s->scratch_len = need;
	s->alloc_K = cfg->K;
	s->alloc_k_max = cfg->k_max;
	s->alloc_groups = cfg->groups;
	s->alloc_rank = cfg->rank;
	s->tensors = malloc((size_t)ntensors * sizeof(*tensors));
	s->copies = malloc((size_t)cfg->k_max * n * sizeof(float));
	s->losses = malloc((size_t)cfg->K * cfg->groups * sizeof(float));
	s->weight = malloc((size_t)(cfg->K / 2) * sizeof(float));
	s->delta = calloc(n, sizeof(float));
	s->group_loss = calloc((size_t)cfg->groups, sizeof(double));
	if (!s->tensors || !s->copies || !s->losses || !s->weight ||
	    !s->delta || !s->group_loss) {
		kn_egg_free(s);
		return kn_error(err, KN_ENOMEM, "eggroll: no memory for %zu "
		    "parameters, %d copies", n, cfg->k_max);
	}
	memcpy(s->tensors, tensors, (size_t)ntensors * sizeof(*tensors));
	return 0;
}

void
kn_egg_free(kn_egg *s)
{
	free(s->tensors);
	free(s->copies);
	free(s->losses);
	free(s->weight);
	free(s->delta);
	free(s->scratch);
	free(s->group_loss);
	memset(s, 0, sizeof(*s));
}

struct egg_job {
	kn_egg *s;
	float *theta;
};

static float *
thread_scratch(const kn_egg *s, int thread)
{
	return s->scratch + (size_t)thread * s->scratch_len;
}

/* Piece t < ntensors perturbs tensor t; piece ntensors copies what lies
 * between the tensors. */
static void
egg_build(void *ctx, float *copy, int member, int piece, int thread)
{
	struct egg_job *j = ctx;
	const kn_egg *s = j->s;
	float ss = member % 2 ? -s->cfg.sigma : s->cfg.sigma;
	int r = s->cfg.rank, row, col;
	float inv = 1.0f / sqrtf((float)r);
	const kn_egg_tensor *tt;
	float *a, *b;
	size_t i, at, end;

	if (piece == s->ntensors) {
		for (i = 0, at = 0; i <= (size_t)s->ntensors; i++) {
			end = i < (size_t)s->ntensors ? s->tensors[i].offset :
			    s->n;
			memcpy(copy + at, j->theta + at,
			    (end - at) * sizeof(float));
			if (i < (size_t)s->ntensors)
				at = end + tensor_size(&s->tensors[i]);
		}
		return;
	}
	tt = &s->tensors[piece];
	if (is_vector(tt)) {
		float *out = copy + tt->offset;
		const float *th = j->theta + tt->offset;

		kn_rng_fill_normal(out, (size_t)tt->rows, 0.0f, 1.0f,
		    s->cfg.seed, egg_stream(s->step, member / 2, piece,
		    EGG_TAG_V));
		for (i = 0; i < (size_t)tt->rows; i++)
			out[i] = th[i] + ss * out[i];
		return;
	}
	a = thread_scratch(s, thread);
	b = a + (size_t)tt->rows * r;
	factors(s, piece, s->step, member / 2, 0, tt->rows, a, b);
	for (row = 0; row < tt->rows; row++)
		for (col = 0; col < tt->cols; col++) {
			size_t e = tt->offset + (size_t)row * tt->cols + col;

			copy[e] = j->theta[e] + ss * lowrank_elem(
			    a + (size_t)row * r, b + (size_t)col * r, r, inv);
		}
}

static int
tensor_blocks(const kn_egg_tensor *t)
{
	return is_vector(t) ? (t->rows + EGG_VBLOCK - 1) / EGG_VBLOCK :
	    (t->rows + EGG_ROWS - 1) / EGG_ROWS;
}

/* delta = sum_i weight_i E_i over one block of one tensor, pairs in
 * order, then theta += delta there. */
static void
egg_update(void *ctx, int task, int thread)
{
	struct egg_job *j = ctx;
	const kn_egg *s = j->s;
	int r = s->cfg.rank, t = 0, pairs = s->cfg.K / 2, i, row, col, nr;
	float inv = 1.0f / sqrtf((float)r);
	float *a = thread_scratch(s, thread), *b, *delta;
	const kn_egg_tensor *tt;
	size_t first, len, e;

	while (task >= tensor_blocks(&s->tensors[t]))
		task -= tensor_blocks(&s->tensors[t++]);
	tt = &s->tensors[t];
	if (is_vector(tt)) {
		first = (size_t)task * EGG_VBLOCK;
		len = (size_t)tt->rows - first < EGG_VBLOCK ?
		    (size_t)tt->rows - first : EGG_VBLOCK;
	} else {
		first = (size_t)task * EGG_ROWS * tt->cols;
		nr = tt->rows - task * EGG_ROWS < EGG_ROWS ?
		    tt->rows - task * EGG_ROWS : EGG_ROWS;
		len = (size_t)nr * tt->cols;
	}
	delta = s->delta + tt->offset + first;
	memset(delta, 0, len * sizeof(float));
	for (i = 0; i < pairs; i++) {
		float w = s->weight[i];

		if (w == 0.0f)
			continue;
		if (is_vector(tt)) {
			kn_rng_fill_normal_from(a, len, 0.0f, 1.0f,
			    s->cfg.seed, egg_stream(s->step, i, t, EGG_TAG_V),
			    first);
			for (e = 0; e < len; e++)
				delta[e] += w * a[e];
			continue;
		}
		nr = (int)(len / (size_t)tt->cols);
		b = a + (size_t)nr * r;
		factors(s, t, s->step, i, task * EGG_ROWS, nr, a, b);
		for (row = 0; row < nr; row++)
			for (col = 0; col < tt->cols; col++)
				delta[(size_t)row * tt->cols + col] += w *
				    lowrank_elem(a + (size_t)row * r,
				    b + (size_t)col * r, r, inv);
	}
	for (e = 0; e < len; e++)
		j->theta[tt->offset + first + e] += delta[e];
}

/* Normalised fitness into the pairs' weights; all zero when the losses
 * do not spread. */
static void
egg_weights(kn_egg *s)
{
	int K = s->cfg.K, G = s->cfg.groups, k, g;
	double mean = 0, var = 0, sd, scale;
	double total[2];

	for (k = 0; k < K; k++)
		for (g = 0; g < G; g++)
			mean += s->losses[(size_t)k * G + g];
	mean /= K;
	for (k = 0; k < K; k++) {
		double l = 0;

		for (g = 0; g < G; g++)
			l += s->losses[(size_t)k * G + g];
		var += (l - mean) * (l - mean);
	}
	sd = sqrt(var / K);
	/* f_k = -(L_k - mean) / sd; pair i weighs f_2i - f_2i+1 */
	scale = (double)s->cfg.lr / ((double)K * s->cfg.sigma);
	for (k = 0; k < K / 2; k++) {
		if (!(sd > 0)) {
			s->weight[k] = 0.0f;
			continue;
		}
		for (g = 0, total[0] = total[1] = 0; g < G; g++) {
			total[0] += s->losses[(size_t)2 * k * G + g];
			total[1] += s->losses[(size_t)(2 * k + 1) * G + g];
		}
		s->weight[k] = (float)(scale * -(total[0] - total[1]) / sd);
	}
}

int
kn_egg_step(kn_egg *s, float *theta, kn_zo_eval_fn eval, void *ctx,
    kn_zo_stats *stats, char *err)
{
	struct egg_job job = { .s = s, .theta = theta };
	int threads, blocks = 0, calls, rc, t, k, g;
	int G = s->cfg.groups;

	if (s->cfg.K != s->alloc_K || s->cfg.k_max != s->alloc_k_max ||
	    s->cfg.groups != s->alloc_groups || s->cfg.rank != s->alloc_rank)
		return kn_error(err, KN_EINVAL, "eggroll: K, rank, k_max and "
		    "groups changed after kn_egg_init");
	if (!(s->cfg.sigma > 0) || !(s->cfg.lr >= 0))
		return kn_error(err, KN_EINVAL, "eggroll: sigma %g, lr %g",
		    (double)s->cfg.sigma, (double)s->cfg.lr);
	/* kn_pool_run would start the pool itself, with more threads than
	 * the scratch counted */
	kn_pool_ensure();
	threads = kn_pool_threads();
	if (threads > s->scratch_threads) {
		float *p = realloc(s->scratch, (size_t)threads *
		    s->scratch_len * sizeof(float));

		if (!p)
			return kn_error(err, KN_ENOMEM, "eggroll: no memory "
			    "for scratch of %d threads", threads);
		s->scratch = p;
		s->scratch_threads = threads;
	}
	rc = kn_zo_population(s->cfg.K, s->cfg.k_max, s->n, G,
	    s->ntensors + 1, egg_build, &job, s->copies, eval, ctx, s->losses,
	    &calls, err);
	if (rc != 0)
		return rc;
	egg_weights(s);
	for (t = 0; t < s->ntensors; t++)
		blocks += tensor_blocks(&s->tensors[t]);
	kn_pool_run(blocks, egg_update, &job);
	s->step++;
	if (stats) {
		stats->loss = 0;
		for (g = 0; g < G; g++) {
			s->group_loss[g] = 0;
			for (k = 0; k < s->cfg.K; k++)
				s->group_loss[g] += s->losses[(size_t)k * G + g];
			s->group_loss[g] /= s->cfg.K;
			stats->loss += s->group_loss[g] / G;
		}
		stats->group_loss = s->group_loss;
		stats->copies = (uint64_t)s->cfg.K;
		stats->calls = calls;
	}
	return 0;
}
