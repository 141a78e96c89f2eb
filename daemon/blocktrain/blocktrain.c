/* The BlockTrain objective: batches, held-out shares and the denoising
 * traversal, on top of the block model of kernels/. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/error.h"
#include "kernels/rng.h"

/* Stream tags: what a draw is for, so that no two uses share numbers. */
enum { TAG_TRAIN = 1, TAG_EVAL = 2, TAG_GEN = 3, TAG_AR = 4, TAG_PAIR = 5 };

const char *
bt_kind_name(bt_kind k)
{
	return k == BT_E2E ? "e2e" : k == BT_CAUSAL ? "causal" : "block";
}

void
bt_interval(const pr_spec *s, bt_kind kind, int block, double *lo, double *hi)
{
	if (kind == BT_BLOCK) {
		*lo = s->cuts[block];
		*hi = s->cuts[block + 1];
	} else {
		*lo = 0.0;
		*hi = 1.0;
	}
}

int
bt_row_len(const pr_spec *s, bt_kind kind)
{
	/* the row does not depend on the layers: block 0's will do */
	kn_model_shape shape = pr_spec_block_shape(s, 0);

	return kind == BT_CAUSAL ? s->window : kn_model_row_len(&shape);
}

int
bt_next_byte(const pr_spec *s, bt_kind kind)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);

	return kind != BT_CAUSAL && kn_model_next_byte(&shape);
}

/* A row of the next-byte form (kn_model_next_byte): the window shifted
 * one on, every byte predicted from all before it at weight wt.  At one
 * byte per position block a masked block is the mask alone whatever the
 * level, so the level is integrated out exactly: the interval's share is
 * (hi - lo) times the next-byte cross-entropy, with no draw at all. */
static void
next_byte_row(const unsigned char *x, int n, float wt, int32_t *in,
    int32_t *tg, float *w)
{
	int i;

	for (i = 0; i < n; i++) {
		in[i] = i == 0 ? KN_MASK : x[i - 1];
		tg[i] = x[i];
		w[i] = wt;
	}
}

/* The noise draws of a training row ([noise] in the spec).  A row's
 * masks come from stratified uniforms u = (slice + U) / B, one per
 * window, or per position block of a window.  The level form maps u to a
 * level t in (lo, hi] and weights each masked byte f / (t n), f the
 * density ratio of the proposal; the count form (kform) maps u to a count
 * k of masked bytes with the level integrated out and weights every
 * masked byte alike; klevel draws k as the level form does and weighs
 * by 1 / t's mean given k (kform_walk).  Each estimates the share / (hi
 * - lo), as the one-level rows always did, so the loss keeps its scale. */
struct noise {
	const pr_spec *s;
	double lo, hi;
	int antithetic, kform;
	int klevel;             /* kform with counts drawn as levels give them */
	double z;               /* kform: the sum of the count weights */
};

static int kform_walk(const struct noise *nz, int L, double stop,
    double *sum, double *ratio);

static void
noise_init(struct noise *nz, const pr_spec *s, double lo, double hi, int L)
{
	double ratio;

	nz->s = s;
	nz->lo = lo;
	nz->hi = hi;
	nz->antithetic = strcmp(s->noise_draw, "antithetic") == 0;
	nz->klevel = strcmp(s->noise_draw, "klevel") == 0;
	nz->kform = nz->klevel || strcmp(s->noise_draw, "kform") == 0;
	nz->z = 0.0;
	if (nz->kform)
		kform_walk(nz, L, INFINITY, &nz->z, &ratio);
}

/* The level of stratum slice of B with the uniform U, and in *f the ratio
 * of the uniform density to the proposal's: below t_floor the proposal
 * puts floor_share of the draws, above it the rest, each part uniform.
 * Without a floor the expression is the one of the first runs, so their
 * draws are bit for bit what they were. */
static double
noise_level(const struct noise *nz, int slice, float U, int B, double *f)
{
	double lo = nz->lo, hi = nz->hi, e = nz->s->t_floor, t, u, m;

	*f = 1.0;
	if (e > lo && e < hi) {
		u = (slice + U) / B;
		m = nz->s->floor_share;
		if (u < m) {
			t = lo + (e - lo) * u / m;
			*f = (e - lo) / (m * (hi - lo));
		} else {
			t = e + (hi - e) * (u - m) / (1 - m);
			*f = (hi - e) / ((1 - m) * (hi - lo));
		}
	} else
		t = lo + (hi - lo) * (slice + U) / B;
	return t < BT_T_MIN ? BT_T_MIN : t;
}

/* Masks positions [a, a + L) of a row of window n after the draw of
 * stratum slice with the uniform U; positions before prefix stay as
 * they are (a prompt). */
static void
noise_mask(const struct noise *nz, kn_rng *r, int slice, float U, int B,
    int a, int L, int n, int prefix, int32_t *in, float *w)
{
	double f, t;
	int i, k;

	if (nz->kform) {
		double wk = nz->z / ((double)n * (nz->hi - nz->lo)), sum, ratio;

		k = kform_walk(nz, L, (1.0 - (slice + U) / B) * nz->z, &sum,
		    &ratio);
		if (nz->klevel)
			wk *= ratio;
		/* a uniform k-subset, one position at a time (selection
		 * sampling); a prompt byte picked stays unmasked, which
		 * leaves the rest's masks as the level form has them */
		for (i = a; i < a + L; i++) {
			if (kn_rng_uniform(r) * (a + L - i) >= k)
				continue;
			k--;
			if (i >= prefix) {
				in[i] = KN_MASK;
				w[i] = (float)wk;
			}
		}
		return;
	}
	t = noise_level(nz, slice, U, B, &f);
	for (i = a; i < a + L; i++) {
		int masked = i >= prefix && kn_rng_uniform(r) < t;

		if (masked) {
			in[i] = KN_MASK;
			w[i] = (float)(f / (t * n));
		}
	}
}

/* A window's bytes, unmasked and unweighted, at [0, n) of its row. */
static void
clean_row(const unsigned char *x, int n, int32_t *in, int32_t *tg,
    float *w)
{
	int i;

	for (i = 0; i < n; i++) {
		in[i] = tg[i] = x[i];
		w[i] = 0.0f;
	}
}

/* The clean copy of a position-block row, [n, 2n): context, no loss. */
static void
clean_copy(const unsigned char *x, int n, int32_t *in, int32_t *tg,
    float *w)
{
	clean_row(x, n, in + n, tg + n, w + n);
}

/* A window with position blocks of L (DESIGN section 2) as one training
 * row of 2n (KN_ATT_* in kernels/backend.h): the noisy copy in [0, n),
 * the clean copy in [n, 2n).  Block j of the noisy copy is masked at its
 * own draw, stratified across the batch (window b, block j draws in
 * slice (b + j) mod B, so every block visits every slice; antithetic
 * draws pair block 2i + 1 with the mirror of block 2i); the twin mask
 * shows block j the clean bytes before it and hides every other block's
 * noise, so one pass gives each block's share of the bound given its
 * clean context.  The weights make the row's loss the sum over blocks in
 * nats per byte; the clean copy carries none.  A prompt prefix stays
 * unmasked as in the one-block row. */
static void
fill_blocks(const struct noise *nz, kn_rng *r, const unsigned char *x,
    int b, int prefix, int32_t *in, int32_t *tg, float *w)
{
	int n = nz->s->window, L = nz->s->position_block, B = nz->s->batch, j;
	int slice = 0;
	float U = 0.0f;

	clean_row(x, n, in, tg, w);
	for (j = 0; j < n / L; j++) {
		if (nz->antithetic && j % 2 == 1) {
			slice = B - 1 - slice;
			U = 1.0f - U;
			(void)kn_rng_uniform(r);
		} else {
			slice = (b + j) % B;
			U = kn_rng_uniform(r);
		}
		noise_mask(nz, r, slice, U, B, j * L, L, n, prefix, in, w);
	}
	clean_copy(x, n, in, tg, w);
}

/* The uniform of window b of a batch with antithetic draws: window
 * B - 1 - b takes the mirror of window b's, from a stream of the pair's
 * own, so either can be drawn first. */
static float
antithetic_uniform(const pr_spec *s, uint64_t key, int64_t step, int b)
{
	int B = s->batch, p = b < B - 1 - b ? b : B - 1 - b;
	kn_rng q;
	float U;

	kn_rng_init(&q, s->seed, kn_rng_stream(TAG_PAIR, key,
	    (uint64_t)step, (uint64_t)p));
	U = kn_rng_uniform(&q);
	return p == b ? U : 1.0f - U;
}

void
bt_train_batch(const pr_spec *s, const corpus *c, bt_kind kind, int block,
    int replica, int64_t step, int32_t *input, int32_t *target,
    float *weight)
{
	int B = s->batch, n = s->window, rl = bt_row_len(s, kind), b, i;
	uint64_t key = ((uint64_t)kind << 32) | (uint64_t)block;
	struct noise nz;
	double lo, hi;
	kn_rng r;

	bt_interval(s, kind, block, &lo, &hi);
	noise_init(&nz, s, lo, hi, rl > n ? s->position_block : n);
	kn_rng_init(&r, s->seed, kn_rng_stream(TAG_TRAIN, key,
	    (uint64_t)replica, (uint64_t)step));
	for (b = 0; b < B; b++) {
		size_t start = kn_rng_below(&r, c->len - n);
		/* stratified: window b draws from the b-th slice */
		float U = kn_rng_uniform(&r);
		int prefix = 0;
		int32_t *in = input + (size_t)b * rl, *tg = target + (size_t)b * rl;
		float *w = weight + (size_t)b * rl;

		if (kind == BT_CAUSAL) {
			for (i = 0; i < n; i++) {
				in[i] = c->data[start + i];
				tg[i] = c->data[start + i + 1];
				w[i] = 1.0f / (float)n;
			}
			continue;
		}
		if (bt_next_byte(s, kind)) {
			/* the training estimate of share / (hi - lo), as the
			 * other forms give it; a prompt is context already */
			next_byte_row(c->data + start, n, 1.0f / (float)n, in, tg,
			    w);
			continue;
		}
		if (s->p_prefix > 0 && kn_rng_uniform(&r) < s->p_prefix)
			prefix = 1 + (int)kn_rng_below(&r, (uint64_t)n - 1);
		if (rl > n) {
			fill_blocks(&nz, &r, c->data + start, b, prefix, in, tg,
			    w);
			continue;
		}
		if (nz.antithetic)
			U = antithetic_uniform(s, key | (uint64_t)replica << 40,
			    step, b);
		clean_row(c->data + start, n, in, tg, w);
		noise_mask(&nz, &r, b, U, B, 0, n, n, prefix, in, w);
	}
}

/* Offsets of the held-out windows: evenly spaced over the file, or
 * drawn with key. */
static size_t
eval_offset(const corpus *c, const bt_eval_set *set, uint64_t key, int n,
    int k)
{
	kn_rng r;

	if (key != 0) {
		kn_rng_init(&r, key, kn_rng_stream(TAG_EVAL, (uint64_t)k,
		    0xffffffffULL, 0));
		return kn_rng_below(&r, c->len - n - 1);
	}
	return (size_t)((double)k * (double)(c->len - n - 1) / set->windows);
}

/* One held-out case: window k of the set, noise level j (the causal LM
 * has one case per window).  Fills one row of a batch. */
struct eval_job {
	const pr_spec *s;
	const corpus *c;
	const bt_eval_set *set;
	double lo, hi;
	int causal;
	int next_byte;          /* kn_model_next_byte: one case per window */
	/* with position blocks: the masked count's distribution (below) */
	const double *cdf;      /* (L) P(k' <= k), k = 1..L */
	double z;               /* the weight of every masked byte, x n */
	uint64_t key;           /* 0: the set's own cases (eval_offset) */
};

/* P[Bin(L, p) = k] */
static double
binom_pmf(int L, int k, double p)
{
	if (p <= 0.0)
		return k == 0 ? 1.0 : 0.0;
	if (p >= 1.0)
		return k == L ? 1.0 : 0.0;
	return exp(lgamma(L + 1.0) - lgamma(k + 1.0) - lgamma(L - k + 1.0) +
	    k * log(p) + (L - k) * log1p(-p));
}

/* The share of one position block of L bytes on (lo, hi], with the
 * level integrated out: given k of the L masked, each set of k is as
 * likely whatever t, and integral_lo^hi t^(k-1) (1-t)^(L-k) dt C(L,k) =
 * (P[Bin(L,hi) >= k] - P[Bin(L,lo) >= k]) / k =: w_k, so the share is
 * sum_k w_k E[CE summed over a uniform k-subset masked].  Drawing k with
 * probability w_k / z (z the sum) and weighting each masked byte z gives
 * it without bias and with no 1/t: at L = 1 it is exact, z = hi - lo, and
 * the shares of (0, 1] sum to the next-byte cross-entropy.  cdf (L)
 * receives the cumulative draw probabilities; returns z. */
static double
block_weights(int L, double lo, double hi, double *cdf)
{
	double tail_lo = 0.0, tail_hi = 0.0, z = 0.0;
	int k;

	/* tails from the top: P[Bin >= k] = P[Bin >= k + 1] + pmf(k) */
	for (k = L; k >= 1; k--) {
		tail_lo += binom_pmf(L, k, lo);
		tail_hi += binom_pmf(L, k, hi);
		cdf[k - 1] = (tail_hi - tail_lo) / k;
	}
	for (k = 0; k < L; k++) {
		z += cdf[k];
		cdf[k] = z;
	}
	for (k = 0; k < L; k++)
		cdf[k] /= z;
	return z;
}

/* The counts k = L..1 of a position block of L on (lo, hi] with their
 * weights w_k (block_weights), walked from the top: the first k at which
 * the running sum reaches stop, with the sum so far in *sum (stop =
 * INFINITY: 1, and the total z).  Drawing from the top with stop = (1 -
 * u) z takes k with probability w_k / z and needs no table.
 *
 * klevel walks v_k = integral_lo^hi C(L,k) t^k (1 - t)^(L - k) dt
 * instead, (P[Bin(L + 1, hi) > k] - P[Bin(L + 1, lo) > k]) / (L + 1):
 * the level form's own counts, k = 0 left out, so as many masked bytes a
 * row.  The level form weighs each masked byte 1 / (t L) with t drawn,
 * the estimate's widest factor (one masked byte at t near 0 weighs a
 * hundred times a typical row); given k this weighs w_k / v_k, the mean
 * of 1 / t given k, which by Rao and Blackwell can only narrow the
 * spread.  count_tilt draws v_k k^tilt instead: below 0, fewer masked
 * bytes, each weighing more.  *ratio receives w_k / (v_k k^tilt). */
static int
kform_walk(const struct noise *nz, int L, double stop, double *sum,
    double *ratio)
{
	double lo = nz->lo, hi = nz->hi, tilt = nz->s->count_tilt;
	double tail_lo = 0.0, tail_hi = 0.0, up_lo = 0.0, up_hi = 0.0, wk, vk;
	int k;

	*sum = 0.0;
	for (k = L; k >= 1; k--) {
		tail_lo += binom_pmf(L, k, lo);
		tail_hi += binom_pmf(L, k, hi);
		wk = (tail_hi - tail_lo) / k;
		vk = wk;
		if (nz->klevel) {
			up_lo += binom_pmf(L + 1, k + 1, lo);
			up_hi += binom_pmf(L + 1, k + 1, hi);
			vk = (up_hi - up_lo) / (L + 1);
			if (tilt != 0)
				vk *= pow(k, tilt);
		}
		*sum += vk;
		*ratio = vk > 0.0 ? wk / vk : 0.0;
		if (*sum >= stop)
			return k;
	}
	return 1;
}

/* A held-out row with position blocks (the training row's layout): per
 * block, a count k from the stratified uniform u and a uniform k-subset
 * of its bytes masked, each weighted z / n. */
static void
eval_fill_blocks(const struct eval_job *job, kn_rng *r,
    const unsigned char *x, int j, int32_t *in, int32_t *tg, float *w)
{
	int n = job->s->window, L = job->s->position_block, b, i, k, m;
	int32_t *pick = in + n;         /* the clean copy's room, for now */

	for (i = 0; i < n; i++) {
		tg[i] = x[i];
		in[i] = x[i];
		w[i] = 0.0f;
	}
	for (b = 0; b < n / L; b++) {
		double u = (j + kn_rng_uniform(r)) / job->set->strata;

		for (k = 1; k < L && job->cdf[k - 1] < u; k++)
			;
		for (i = 0; i < L; i++)
			pick[i] = b * L + i;
		/* the first k of a partial Fisher-Yates shuffle */
		for (i = 0; i < k; i++) {
			m = i + (int)kn_rng_below(r, (uint64_t)(L - i));
			in[pick[m]] = KN_MASK;
			w[pick[m]] = (float)(job->z / n);
			pick[m] = pick[i];
		}
	}
	clean_copy(x, n, in, tg, w);
}

static void
eval_fill(const struct eval_job *job, int e, int32_t *in, int32_t *tg,
    float *w)
{
	int n = job->s->window, i;
	int one = job->causal || job->next_byte;
	int k = one ? e : e / job->set->strata;
	int j = one ? 0 : e % job->set->strata;
	size_t off = eval_offset(job->c, job->set, job->key, n, k);
	const unsigned char *x = job->c->data + off;
	kn_rng r;
	double t;

	if (job->causal) {
		for (i = 0; i < n; i++) {
			in[i] = x[i];
			tg[i] = x[i + 1];
			w[i] = 1.0f / (float)n;
		}
		return;
	}
	if (job->next_byte) {
		next_byte_row(x, n, (float)((job->hi - job->lo) / n), in, tg, w);
		return;
	}
	/* the same key for every model and interval: the draws are paired
	 * across the models compared */
	kn_rng_init(&r, job->key ? job->key : 0x5eedULL,
	    kn_rng_stream(TAG_EVAL, (uint64_t)k,
	    (uint64_t)j, 0));
	if (job->cdf != NULL) {
		eval_fill_blocks(job, &r, x, j, in, tg, w);
		return;
	}
	t = job->lo + (job->hi - job->lo) * (j + kn_rng_uniform(&r)) /
	    job->set->strata;
	if (t < BT_T_MIN)
		t = BT_T_MIN;
	for (i = 0; i < n; i++) {
		int masked = kn_rng_uniform(&r) < t;

		tg[i] = x[i];
		in[i] = masked ? KN_MASK : tg[i];
		w[i] = masked ? (float)(1.0 / (t * n)) : 0.0f;
	}
}

/* Sum of the window losses over the cases, in batches the model takes;
 * each case's loss also in value[e] unless value is NULL. */
static int
eval_cases(kn_model *m, const struct eval_job *job, int cases, double *sum,
    double *value, char *err)
{
	int n = kn_model_row_len(kn_model_get_shape(m)), e, b, rc = KN_OK;
	int B = kn_model_max_batch(m) < 32 ? kn_model_max_batch(m) : 32;
	int32_t *in = malloc((size_t)B * n * 4), *tg = malloc((size_t)B * n * 4);
	float *w = malloc((size_t)B * n * 4), *wl = malloc((size_t)B * 4);

	*sum = 0.0;
	if (in == NULL || tg == NULL || w == NULL || wl == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	for (e = 0; e < cases && rc == 0; e += B) {
		int nb = cases - e < B ? cases - e : B;
		kn_batch batch = { in, tg, w, nb };

		for (b = 0; b < nb; b++)
			eval_fill(job, e + b, in + (size_t)b * n, tg + (size_t)b * n,
			    w + (size_t)b * n);
		rc = kn_model_eval(m, &batch, wl, err);
		for (b = 0; b < nb && rc == 0; b++) {
			*sum += wl[b];
			if (value != NULL)
				value[e + b] = wl[b];
		}
	}
out:
	free(in); free(tg); free(w); free(wl);
	return rc;
}

static int
eval_sum(kn_model *m, const struct eval_job *job, int cases, double *sum,
    char *err)
{
	return eval_cases(m, job, cases, sum, NULL, err);
}

int
bt_eval_cases(kn_model *m, const pr_spec *s, const corpus *c,
    const bt_eval_set *set, uint64_t key, double lo, double hi,
    double *value, int *cases, char *err)
{
	struct eval_job job = { s, c, set, lo, hi, 0, 0, NULL, 0.0, key };
	double sum, scale = hi - lo, *cdf = NULL;
	int e, rc;

	*cases = set->windows * set->strata;
	if (bt_next_byte(s, BT_BLOCK)) {
		job.next_byte = 1;
		*cases = set->windows;
		scale = 1.0;
	} else if (bt_row_len(s, BT_BLOCK) > s->window) {
		if ((cdf = malloc((size_t)s->position_block *
		    sizeof(double))) == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		job.z = block_weights(s->position_block, lo, hi, cdf);
		job.cdf = cdf;
		scale = 1.0;
	}
	rc = eval_cases(m, &job, *cases, &sum, value, err);
	for (e = 0; rc == 0 && e < *cases; e++)
		value[e] *= scale;
	free(cdf);
	return rc;
}

int
bt_eval_share(kn_model *m, const pr_spec *s, const corpus *c,
    const bt_eval_set *set, double lo, double hi, double *share, char *err)
{
	struct eval_job job = { s, c, set, lo, hi, 0, 0, NULL, 0.0, 0 };
	int cases = set->windows * set->strata, rc;
	double sum, *cdf = NULL;

	if (bt_next_byte(s, BT_BLOCK)) {
		/* no draw to stratify: each window once, weighted hi - lo */
		job.next_byte = 1;
		if ((rc = eval_sum(m, &job, set->windows, &sum, err)) == 0)
			*share = sum / set->windows;
		return rc;
	}
	if (bt_row_len(s, BT_BLOCK) > s->window) {
		if ((cdf = malloc((size_t)s->position_block *
		    sizeof(double))) == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		job.z = block_weights(s->position_block, lo, hi, cdf);
		job.cdf = cdf;
	}
	if ((rc = eval_sum(m, &job, cases, &sum, err)) == 0)
		/* the 1/t rows' levels are uniform on (lo, hi]; the
		 * position-block rows carry the interval in z */
		*share = (cdf != NULL ? 1.0 : hi - lo) * sum / cases;
	free(cdf);
	return rc;
}

int
bt_eval_causal(kn_model *m, const pr_spec *s, const corpus *c,
    const bt_eval_set *set, double *nats, char *err)
{
	struct eval_job job = { s, c, set, 0.0, 1.0, 1, 0, NULL, 0.0, 0 };
	double sum;
	int rc;

	if ((rc = eval_sum(m, &job, set->windows, &sum, err)) == 0)
		*nats = sum / set->windows;
	return rc;
}

int
bt_equal_cuts(const double *cell_shares, int G, int T, double *cuts,
    char *err)
{
	double total = 0.0, below = 0.0;
	int g = 0, b;

	for (b = 0; b < G; b++) {
		if (!(cell_shares[b] > 0.0) || !isfinite(cell_shares[b]))
			return kn_error(err, KN_EINVAL, "the share of cell %d "
			    "of %d is %g, not a positive number", b + 1, G,
			    cell_shares[b]);
		total += cell_shares[b];
	}
	cuts[0] = 0.0;
	cuts[T] = 1.0;
	/* below: the bound on (0, g / G]; cut b falls in the cell where it
	 * passes b / T of the total */
	for (b = 1; b < T; b++) {
		double want = total * b / T;

		while (g < G - 1 && below + cell_shares[g] < want)
			below += cell_shares[g++];
		cuts[b] = (g + (want - below) / cell_shares[g]) / G;
		/* equal shares need strictly increasing cuts; rounding at a
		 * cell's edge may not give them */
		if (!(cuts[b] > cuts[b - 1]) || !(cuts[b] < 1.0))
			return kn_error(err, KN_EINVAL, "cut %d of %d at %g does "
			    "not rise above %g: use a finer grid", b, T,
			    cuts[b], cuts[b - 1]);
	}
	return KN_OK;
}

int
bt_step_draw(const pr_spec *s, int k, int block, int j, uint64_t seed,
    float *u, double *p, double *next)
{
	int n = s->window;
	double t = pr_spec_time_of(s, k, block, j);

	if (j >= pr_spec_steps_of(s, k, block))
		return 0;
	*next = pr_spec_time_of(s, k, block, j + 1);
	*p = (t - *next) / t;
	/* u[0..n) decide who is unmasked, u[n..2n) pick the byte */
	kn_rng_fill_uniform(u, (size_t)2 * n, seed,
	    kn_rng_stream(TAG_GEN, (uint64_t)block, (uint64_t)j, 0));
	return 1;
}

/* The last step of block 1 (next = 0) decides every position left. */
static int
step_unmasks(int32_t sym, float u, double p, double next)
{
	return sym == KN_MASK && (next <= 0.0 || u < p);
}

int
bt_step_positions(const int32_t *seq, int n, int fixed, const float *u,
    double p, double next, int32_t *pos)
{
	int i, count = 0;

	for (i = fixed; i < n; i++)
		if (step_unmasks(seq[i], u[i], p, next))
			pos[count++] = i;
	return count;
}

int
bt_denoise_block(kn_model *m, const pr_spec *s, int k, int block,
    int32_t *seq, int fixed, float temp, uint64_t seed, bt_decode dec,
    char *err)
{
	int n = s->window, j, r, count, keep, rc;
	int32_t *picked = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4);
	float *u = malloc((size_t)2 * n * 4), *upick = malloc((size_t)n * 4);
	float *lp = malloc((size_t)n * BT_DECODE_LP * sizeof(float));
	double p, next;

	rc = picked == NULL || pos == NULL || u == NULL || upick == NULL ||
	    lp == NULL ? kn_error(err, KN_ENOMEM, "out of memory") : KN_OK;
	for (j = 0; rc == 0 && bt_step_draw(s, k, block, j, seed, u, &p,
	    &next); j++) {
		/* only the positions this step may decide are predicted; a
		 * step that decides none needs no forward pass */
		if ((count = bt_step_candidates(dec, seq, n, fixed, u, p, next,
		    pos, &keep)) == 0)
			continue;
		for (r = 0; r < count; r++)
			upick[r] = u[n + pos[r]];
		rc = kn_model_predict_at(m, seq, 1, pos, count, upick, temp,
		    picked, err);
		if (rc == 0)
			rc = bt_step_scores(dec, m, count, picked, lp, err);
		if (rc == 0 && (keep = bt_step_keep(dec, pos, picked, lp, u, 0,
		    temp, count, keep)) < 0)
			rc = kn_error(err, KN_ENOMEM, "out of memory");
		for (r = 0; r < keep && rc == 0; r++)
			seq[pos[r]] = picked[r];
	}
	free(picked);
	free(pos);
	free(u);
	free(upick);
	free(lp);
	return rc;
}

float
bt_ar_uniform(uint64_t seed, int n, int pos, float *scratch)
{
	/* the draw of the byte at pos, as the full-window pass had it */
	kn_rng_fill_uniform(scratch, (size_t)n, seed,
	    kn_rng_stream(TAG_AR, (uint64_t)pos, 0, 0));
	return scratch[pos - 1];
}

int
bt_generate_ar(kn_model *m, int32_t *seq, int fixed, int end, float temp,
    uint64_t seed, char *err)
{
	int n = kn_model_get_shape(m)->window, p, rc;
	float *scratch = malloc((size_t)n * 4), u;
	kn_kv *kv = NULL;
	kn_decode_seq q;
	int32_t picked;

	if (scratch == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	if (fixed < 1 || end > n) {
		rc = kn_error(err, KN_EINVAL, "causal generation needs a "
		    "prompt of at least one byte and at most %d bytes in all",
		    n);
		goto out;
	}
	if ((rc = kn_kv_create(&kv, m, err)) != 0)
		goto out;
	/* the prompt in one pass, then one position per byte, each seeing
	 * the cache of those before */
	q.kv = kv;
	q.pos0 = 0;
	q.count = fixed;
	for (p = fixed; p < end && rc == 0; p++) {
		u = bt_ar_uniform(seed, n, p, scratch);
		rc = kn_model_decode(m, &q, 1, seq + q.pos0, NULL, &u, temp,
		    &picked, err);
		if (rc == 0)
			seq[p] = picked;
		q.pos0 = p;
		q.count = 1;
	}
out:
	kn_kv_free(kv);
	free(scratch);
	return rc;
}
