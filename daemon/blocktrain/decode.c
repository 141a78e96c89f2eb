/* The decoders of a BlockTrain traversal (blocktrain.h bt_decode): which
 * masked positions a denoising step decides.  The pass and the draws are
 * those of random order; a decoder by confidence predicts every masked
 * position and keeps the ones the model is surest of, as MaskGIT's
 * schedule and LLaDA's low-confidence remasking do, at no extra
 * traversal. */

/* sampled: the scale of the Gumbel noise on the log-probability of the
 * drawn byte at temperature 1, in proportion to the temperature, so that
 * temperature 0 is greedy (the surest position, its likeliest byte) and
 * a hot one nears random order.  0 keeps only the likeliest draws (few,
 * repeated bytes); 0.5 is where the quality run's samples kept most of
 * their entropy and most of the gain in words (scripts/bench/samples). */
#define BT_SAMPLED_NOISE 0.5
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/error.h"

int
bt_decode_parse(const char *name, bt_decode *d)
{
	int i;

	for (i = 0; pr_decoders[i] != NULL; i++)
		if (strcmp(name, pr_decoders[i]) == 0) {
			*d = (bt_decode)i;
			return 0;
		}
	return -1;
}

const char *
bt_decode_name(bt_decode d)
{
	int i;

	for (i = 0; pr_decoders[i] != NULL; i++)
		if (i == (int)d)
			return pr_decoders[i];
	return "unknown";
}

int
bt_step_candidates(bt_decode dec, const int32_t *seq, int n, int fixed,
    const float *u, double p, double next, int32_t *pos, int *keep)
{
	int i, masked = 0, left;

	if (dec == BT_DECODE_RANDOM) {
		*keep = bt_step_positions(seq, n, fixed, u, p, next, pos);
		return *keep;
	}
	for (i = fixed; i < n; i++)
		if (seq[i] == KN_MASK)
			pos[masked++] = i;
	/* the share next of the free positions stays masked after the
	 * step, as random order leaves it on average; counted from the
	 * free positions, not the masked ones, so that rounding cannot
	 * hold every step of a long schedule at none */
	left = next <= 0.0 ? 0 : (int)floor((n - fixed) * next + 0.5);
	*keep = masked > left ? masked - left : 0;
	return *keep > 0 ? masked : 0;
}

int
bt_step_scores(bt_decode dec, kn_model *m, int R, const int32_t *picked,
    float *lp, char *err)
{
	unsigned char *top;
	int rc;

	if (dec == BT_DECODE_RANDOM || R == 0)
		return KN_OK;
	if ((top = malloc((size_t)R * 2)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	/* at temperature 1 whatever the request's: the order follows the
	 * model's certainty, which a temperature near 0 would flatten into
	 * ties at probability 1 */
	rc = kn_model_head_logprobs(m, R, 1.0f, picked, 2, lp, top, err);
	free(top);
	return rc;
}

struct ranked {
	double score;
	int32_t pos, picked;
};

static int
by_score(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The Gumbel draw of uniform u, kept finite. */
static double
gumbel(float u)
{
	double x = u < 1e-12f ? 1e-12 : u >= 1.0f ? 1.0 - 1e-7 : (double)u;

	return -log(-log(x));
}

int
bt_step_keep(bt_decode dec, int32_t *pos, int32_t *picked, const float *lp,
    const float *usel, int base, float temp, int R, int keep)
{
	struct ranked *r;
	int i;

	if (dec == BT_DECODE_RANDOM || R == 0)
		return R;
	if (keep > R)
		keep = R;
	if ((r = malloc((size_t)R * sizeof(*r))) == NULL)
		return KN_ENOMEM;
	for (i = 0; i < R; i++) {
		const float *l = lp + (size_t)i * BT_DECODE_LP;

		switch (dec) {
		case BT_DECODE_MARGIN:
			r[i].score = exp((double)l[1]) - exp((double)l[2]);
			break;
		case BT_DECODE_SAMPLED:
			/* the step's unmasking uniform of the position,
			 * unused by this order, makes the noise */
			r[i].score = (double)l[0] + BT_SAMPLED_NOISE *
			    (temp > 0.0f ? (double)temp : 0.0) *
			    gumbel(usel[pos[i] - base]);
			break;
		default:
			r[i].score = (double)l[1];
			break;
		}
		/* NaN logits rank last rather than anywhere */
		if (isnan(r[i].score))
			r[i].score = -INFINITY;
		r[i].pos = pos[i];
		r[i].picked = picked[i];
	}
	qsort(r, (size_t)R, sizeof(*r), by_score);
	for (i = 0; i < R; i++) {
		pos[i] = r[i].pos;
		picked[i] = r[i].picked;
	}
	free(r);
	return keep;
}
