/* Verified averaging (verify.h): the trainer thread scores a round's
 * combination with and without each update, or a peer's checkpoint
 * against its own weights, on held-out cases keyed by the run and the
 * round, and leaves out what makes its share worse beyond the noise of
 * those very cases.  Each replica decides alone; since every member of
 * a round holds the same round-start weights, the same update bytes and
 * the same cases, and the scoring and the combination are deterministic,
 * they all decide alike.  Where hardware makes two replicas score a
 * borderline update differently, their weights differ after the round,
 * and the split detection of the rounds (rounds_diverged, fed by the
 * peers' status) makes the replica of higher index adopt the other's
 * checkpoint: the rare case costs a round, not the run. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/verify.h"
#include "kernels/average.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/rng.h"

int
vf_windows_for(int local_steps, int batch, int replicas)
{
	double w = VF_BUDGET * 3.0 * local_steps * batch /
	    ((2.0 * replicas + 2.0) * BT_EVAL_STRATA);

	if (!(w >= VF_MIN_WINDOWS))
		return VF_MIN_WINDOWS;
	return w > VF_MAX_WINDOWS ? VF_MAX_WINDOWS : (int)w;
}

uint64_t
vf_case_key(const char *run_id, int block, int64_t round)
{
	uint64_t h = 1469598103934665603ULL, key;
	const char *p;

	/* FNV-1a of the run id: the key is the run's, whatever its form */
	for (p = run_id; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	key = kn_rng_stream(h, (uint64_t)block, (uint64_t)round, 0x7e51fULL);
	return key != 0 ? key : 1;
}

/* The cases' values of the weights theta (n floats) in v. */
static int
score(const vf_scorer *sc, const bt_eval_set *set, uint64_t key,
    const float *theta, double *v, int *cases, char *err)
{
	int rc, e;

	/* weights that are not finite score as infinitely bad: refused,
	 * not an error that would end the trainer */
	if ((rc = kn_model_set_params(sc->m, theta, err)) == KN_ENUM) {
		*cases = bt_next_byte(sc->spec, BT_BLOCK) ? set->windows :
		    set->windows * set->strata;
		for (e = 0; e < *cases; e++)
			v[e] = INFINITY;
		return KN_OK;
	}
	if (rc != 0)
		return rc;
	if ((rc = bt_eval_cases(sc->m, sc->spec, sc->valid, set, key, sc->lo,
	    sc->hi, v, cases, err)) != 0)
		return rc;
	/* finite weights that overflow in the forward pass: as bad as
	 * weights that are not finite, never a NaN that would compare as
	 * neither better nor worse */
	for (e = 0; e < *cases; e++)
		if (!isfinite(v[e]))
			v[e] = INFINITY;
	return KN_OK;
}

/* Compares the cases of a candidate (with) to those of the reference
 * (without), paired case by case. */
static void
compare(const double *with, const double *without, int cases, vf_score *s)
{
	double sw = 0, so = 0, sd = 0, mean, var = 0, d;
	int e;

	/* a case infinite both ways (weights that overflow either way) is
	 * no difference, not a NaN */
#define VF_DIFF(e) (with[e] == without[e] ? 0.0 : with[e] - without[e])
	for (e = 0; e < cases; e++) {
		sw += with[e];
		so += without[e];
		sd += VF_DIFF(e);
	}
	s->with = sw / cases;
	s->without = so / cases;
	mean = sd / cases;
	for (e = 0; e < cases; e++) {
		d = VF_DIFF(e) - mean;
		var += d * d;
	}
#undef VF_DIFF
	s->rise = mean;
	s->se = cases > 1 ? sqrt(var / (cases - 1) / cases) : 0.0;
	/* not "> both" written as a sum: a NaN share refuses too */
	s->refused = !(mean <= VF_Z * s->se || mean <= VF_FLOOR *
	    fabs(s->without));
}

/* The update alone, clipped by scale, against the round's start: a
 * clear step down keeps it whatever it does to the combination. */
static void
compare_solo(const double *solo, const double *base, int cases,
    vf_score *s)
{
	vf_score t;

	compare(solo, base, cases, &t);
	s->solo_rise = t.rise;
	s->solo_se = t.se;
	if (t.rise < -VF_SOLO_Z * t.se)
		s->refused = 0;
}

/* theta = start - lr * (float)(u * scale) */
static void
solo_candidate(const float *start, const float *u, double scale, float lr,
    size_t n, float *comb, float *theta)
{
	size_t i;

	for (i = 0; i < n; i++)
		comb[i] = (float)((double)u[i] * scale);
	memcpy(theta, start, n * sizeof(float));
	kn_outer_step(theta, comb, lr, n);
}

/* Each update's clipping factor in the combination of all of them
 * (kernels/robust.h: KN_ROBUST_CLIP times the lower median norm), and
 * its norm over that lower median (ratio). */
static void
clip_scales(const float *const *updates, int count, size_t n,
    double *norm, double *scale, double *ratio)
{
	double sorted[VF_MAX], x, bound, median;
	int i, k;

	for (i = 0; i < count; i++) {
		norm[i] = kn_robust_norm(updates[i], n);
		x = norm[i];
		for (k = i; k > 0 && sorted[k - 1] > x; k--)
			sorted[k] = sorted[k - 1];
		sorted[k] = x;
	}
	median = sorted[(count - 1) / 2];
	bound = KN_ROBUST_CLIP * median;
	for (i = 0; i < count; i++) {
		scale[i] = norm[i] > bound ? bound / norm[i] : 1.0;
		ratio[i] = median > 0 ? norm[i] / median : 0;
	}
}

/* With VF_OUTLIER_MIN updates or more, the lower median norm is an
 * honest one's, so an update VF_OUTLIER times beyond it is nobody's
 * honest work: it is left out before any scoring (clipping alone would
 * bound it, but its sender is named).  With two, either may be the
 * outlier, and the scores decide.  Returns the mask of those kept. */
static uint64_t
outliers(const double *ratio, int count, vf_verdict *v)
{
	uint64_t keep = count >= 64 ? ~0ULL : (1ULL << count) - 1;
	int i;

	if (count < VF_OUTLIER_MIN)
		return keep;
	for (i = 0; i < count; i++)
		if (ratio[i] > VF_OUTLIER) {
			v->of[i].refused = 1;
			v->of[i].outlier = ratio[i];
			v->left_out |= 1ULL << i;
			keep &= ~(1ULL << i);
		}
	return keep;
}

/* theta = start - lr * (robust combination of the updates whose bit is
 * in keep; none: start itself). */
static int
candidate(const float *start, const float *const *updates,
    const double *norm, int count, uint64_t keep, float lr, size_t n,
    float *comb, float *theta, kn_robust_info *info, char *err)
{
	const float *list[VF_MAX];
	double norms[VF_MAX];
	int i, m = 0, rc;

	for (i = 0; i < count; i++)
		if (keep & (1ULL << i)) {
			norms[m] = norm[i];
			list[m++] = updates[i];
		}
	if (m == 0) {
		memset(comb, 0, n * sizeof(float));
		memset(info, 0, sizeof(*info));
	} else if ((rc = kn_robust_combine_normed(comb, list, norms, m, n,
	    info, err)) != 0)
		return rc;
	memcpy(theta, start, n * sizeof(float));
	kn_outer_step(theta, comb, lr, n);
	return KN_OK;
}

struct scratch {
	float *comb, *theta;
	double *with, *without, *base;
};

static void
scratch_free(struct scratch *s)
{
	free(s->comb);
	free(s->theta);
	free(s->with);
	free(s->without);
	free(s->base);
}

static int
scratch_alloc(struct scratch *s, size_t n, const bt_eval_set *set)
{
	size_t cases = (size_t)set->windows * set->strata;

	memset(s, 0, sizeof(*s));
	s->comb = malloc(n * sizeof(float));
	s->theta = malloc(n * sizeof(float));
	s->with = malloc(cases * sizeof(double));
	s->without = malloc(cases * sizeof(double));
	s->base = malloc(cases * sizeof(double));
	return s->comb && s->theta && s->with && s->without && s->base ? 0 :
	    -1;
}

int
vf_round(const vf_scorer *sc, int64_t round, const float *start,
    const float *const *updates, int count, float outer_lr, float *avg,
    vf_verdict *v, char *err)
{
	size_t n = kn_model_num_params(sc->m);
	bt_eval_set set = { sc->windows, BT_EVAL_STRATA };
	uint64_t key = vf_case_key(sc->run_id, sc->block, round);
	uint64_t all = count >= 64 ? ~0ULL : (1ULL << count) - 1, keep;
	double t0 = kn_now(), norm[VF_MAX], scale[VF_MAX], ratio[VF_MAX];
	struct scratch s;
	kn_robust_info info;
	int i, cases, rc, based = 0;

	memset(v, 0, sizeof(*v));
	v->count = count;
	if (count < 0 || count > VF_MAX)
		return kn_error(err, KN_EINVAL, "%d updates: at most %d", count,
		    VF_MAX);
	if (count == 0) {
		memset(avg, 0, n * sizeof(float));
		return KN_OK;
	}
	clip_scales(updates, count, n, norm, scale, ratio);
	all = outliers(ratio, count, v);
	/* one update left has nothing to be compared with: a replica alone
	 * would otherwise drop its own training whenever a few windows'
	 * noise goes against it (non-finite weights still roll back) */
	if (sc->valid == NULL || sc->windows <= 0 ||
	    __builtin_popcountll(all) < 2) {
		const float *list[VF_MAX];
		double norms[VF_MAX];
		int m = 0;

		for (i = 0; i < count; i++)
			if (all & (1ULL << i)) {
				norms[m] = norm[i];
				list[m++] = updates[i];
			}
		rc = kn_robust_combine_normed(avg, list, norms, m, n, &v->robust,
		    err);
		v->seconds = kn_now() - t0;
		return rc;
	}
	if (scratch_alloc(&s, n, &set) != 0) {
		scratch_free(&s);
		return kn_error(err, KN_ENOMEM, "out of memory for the check");
	}
	v->checked = 1;
	rc = candidate(start, updates, norm, count, all, outer_lr, n, avg,
	    s.theta, &v->robust, err);
	if (rc == 0)
		rc = score(sc, &set, key, s.theta, s.with, &cases, err);
	for (i = 0; rc == 0 && i < count; i++) {
		if (!(all & (1ULL << i)))
			continue;
		rc = candidate(start, updates, norm, count, all & ~(1ULL << i),
		    outer_lr, n, s.comb, s.theta, &info, err);
		if (rc == 0)
			rc = score(sc, &set, key, s.theta, s.without, &cases, err);
		if (rc == 0)
			compare(s.with, s.without, cases, &v->of[i]);
		/* the round's start, scored once, for the first flagged */
		if (rc == 0 && v->of[i].refused && !based++)
			rc = score(sc, &set, key, start, s.base, &cases, err);
		if (rc == 0 && v->of[i].refused) {
			/* "without" is free again: the update alone */
			solo_candidate(start, updates[i], scale[i], outer_lr, n,
			    s.comb, s.theta);
			rc = score(sc, &set, key, s.theta, s.without, &cases, err);
			if (rc == 0)
				compare_solo(s.without, s.base, cases, &v->of[i]);
		}
		if (rc == 0 && v->of[i].refused)
			v->left_out |= 1ULL << i;
	}
	keep = all & ~v->left_out;
	if (rc == 0 && keep != all)
		rc = candidate(start, updates, norm, count, keep, outer_lr, n,
		    avg, s.theta, &v->robust, err);
	scratch_free(&s);
	v->seconds = kn_now() - t0;
	return rc;
}

double
vf_norm_ratio(const float *const *members, int count, const float *x,
    size_t n)
{
	double norm[VF_MAX], v, ref;
	int i, k;

	if (count <= 0 || count > VF_MAX)
		return 0;
	for (i = 0; i < count; i++) {
		v = kn_robust_norm(members[i], n);
		for (k = i; k > 0 && norm[k - 1] > v; k--)
			norm[k] = norm[k - 1];
		norm[k] = v;
	}
	ref = count >= VF_OUTLIER_MIN ? norm[(count - 1) / 2] : norm[count - 1];
	if (!(ref > 0))
		return 0;
	return kn_robust_norm(x, n) / ref;
}

int
vf_checkpoint(const vf_scorer *sc, int64_t round, const float *ours,
    const float *theirs, vf_score *out, char *err)
{
	size_t n = kn_model_num_params(sc->m);
	bt_eval_set set = { sc->windows, BT_EVAL_STRATA };
	uint64_t key = vf_case_key(sc->run_id, sc->block, round);
	struct scratch s;
	int cases, rc;

	memset(out, 0, sizeof(*out));
	if (sc->valid == NULL || sc->windows <= 0)
		return KN_OK;
	if (scratch_alloc(&s, n, &set) != 0) {
		scratch_free(&s);
		return kn_error(err, KN_ENOMEM, "out of memory for the check");
	}
	rc = score(sc, &set, key, ours, s.without, &cases, err);
	if (rc == 0)
		rc = score(sc, &set, key, theirs, s.with, &cases, err);
	if (rc == 0)
		compare(s.with, s.without, cases, out);
	scratch_free(&s);
	return rc;
}
