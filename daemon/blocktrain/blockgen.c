/* Generation with position blocks (blockgen.h): the draws of each step,
 * the cache of the clean context, and the traversals of one process. */
#include "config.h"

#include <stdlib.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "kernels/error.h"
#include "kernels/model_blockdecode.h"
#include "kernels/rng.h"

/* The stream tag of position-block steps: apart from blocktrain.c's. */
#define BG_TAG 17

int
bg_has_pos_blocks(const pr_spec *s)
{
	return s->position_block > 0 && s->position_block < s->window;
}

int
bg_pos_block(const pr_spec *s)
{
	return bg_has_pos_blocks(s) ? s->position_block : s->window;
}

void
bg_symbols(const pr_spec *s, const int32_t *seq, int from, int count,
    int32_t *sym)
{
	int shift = bt_next_byte(s, BT_BLOCK), i;

	for (i = 0; i < count; i++)
		sym[i] = !shift ? seq[from + i] :
		    from + i == 0 ? KN_MASK : seq[from + i - 1];
}

int
bg_commits_picks(const pr_spec *s)
{
	return bt_next_byte(s, BT_BLOCK);
}

void
bg_span(const pr_spec *s, int fixed, int end, int *first, int *last)
{
	int L = bg_pos_block(s);

	*first = fixed / L;
	*last = (end + L - 1) / L - 1;
	if (*last < *first)
		*last = *first;
}

int
bg_traversals(const pr_spec *s, int fixed, int end)
{
	int first, last;

	bg_span(s, fixed, end, &first, &last);
	return last - first + 1;
}

int
bg_step_draw(const pr_spec *s, int k, int block, int j, int p,
    uint64_t seed, float *u, double *prob, double *next)
{
	int L = bg_pos_block(s);
	double t = pr_spec_time_of(s, k, block, j);

	if (j >= pr_spec_steps_of(s, k, block))
		return 0;
	*next = pr_spec_time_of(s, k, block, j + 1);
	*prob = (t - *next) / t;
	kn_rng_fill_uniform(u, (size_t)2 * L, seed,
	    kn_rng_stream(BG_TAG, (uint64_t)block, (uint64_t)j, (uint64_t)p));
	return 1;
}

int
bg_step_positions(const pr_spec *s, const int32_t *seq, int p, int fixed,
    const float *u, double prob, double next, int32_t *pos)
{
	int L = bg_pos_block(s), from = fixed - p * L, i, count;

	count = bt_step_positions(seq + (size_t)p * L, L, from < 0 ? 0 : from,
	    u, prob, next, pos);
	for (i = 0; i < count; i++)
		pos[i] += p * L;
	return count;
}

int
bg_step_candidates(const pr_spec *s, bt_decode dec, const int32_t *seq,
    int p, int fixed, const float *u, double prob, double next,
    int32_t *pos, int *keep)
{
	int L = bg_pos_block(s), from = fixed - p * L, i, count;

	count = bt_step_candidates(dec, seq + (size_t)p * L, L,
	    from < 0 ? 0 : from, u, prob, next, pos, keep);
	for (i = 0; i < count; i++)
		pos[i] += p * L;
	return count;
}

int
bg_extend(kn_model *m, kn_kv *kv, const pr_spec *s, int p,
    const int32_t *seq, char *err)
{
	int L = bg_pos_block(s), len = kn_kv_len(kv), i, rc;
	kn_decode_seq q = { kv, len, p * L - len };
	int32_t *sym;

	if (q.count <= 0)
		return q.count == 0 ? KN_OK : kn_error(err, KN_EINVAL, "the "
		    "cache holds %d positions, past position block %d", len, p);
	for (i = len; i < p * L; i++)
		if (seq[i] == KN_MASK)
			return kn_error(err, KN_EINVAL, "position %d before "
			    "position block %d is not decided", i, p);
	if ((sym = malloc((size_t)q.count * sizeof(int32_t))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	bg_symbols(s, seq, len, q.count, sym);
	rc = kn_model_blockdecode(m, &q, 1, sym, 1, NULL, 0, NULL, 0.0f, NULL,
	    err);
	free(sym);
	return rc;
}

int
bg_denoise(kn_model *m, kn_kv *kv, const pr_spec *s, int k, int block,
    int p, int32_t *seq, int fixed, float temp, uint64_t seed,
    bt_decode dec, char *err)
{
	int L = bg_pos_block(s), n = s->window, j, r, count, keep, rc;
	int32_t *picked = malloc((size_t)L * 4), *pos = malloc((size_t)L * 4);
	int32_t *rows = malloc((size_t)L * 4), *sym = malloc((size_t)n * 4);
	float *u = malloc((size_t)2 * L * 4), *upick = malloc((size_t)L * 4);
	float *lp = malloc((size_t)L * BT_DECODE_LP * sizeof(float));
	kn_decode_seq q = { kv, p * L, L };
	double prob, next;

	rc = picked == NULL || pos == NULL || rows == NULL || sym == NULL ||
	    u == NULL || upick == NULL || lp == NULL ? kn_error(err,
	    KN_ENOMEM, "out of memory") : KN_OK;
	if (rc == 0 && kv != NULL)
		rc = bg_extend(m, kv, s, p, seq, err);
	for (j = 0; rc == 0 && bg_step_draw(s, k, block, j, p, seed, u, &prob,
	    &next); j++) {
		if ((count = bg_step_candidates(s, dec, seq, p, fixed, u, prob,
		    next, pos, &keep)) == 0)
			continue;
		for (r = 0; r < count; r++) {
			upick[r] = u[L + pos[r] - p * L];
			rows[r] = pos[r] - p * L;
		}
		/* the cache: this position block's symbols; without one,
		 * the window's */
		if (kv != NULL)
			bg_symbols(s, seq, p * L, L, sym);
		else
			bg_symbols(s, seq, 0, n, sym);
		rc = kv != NULL ? kn_model_blockdecode(m, &q, 1, sym,
		    bg_commits_picks(s), rows, count, upick, temp, picked,
		    err) :
		    kn_model_predict_at(m, sym, 1, pos, count, upick, temp,
		    picked, err);
		if (rc == 0)
			rc = bt_step_scores(dec, m, count, picked, lp, err);
		if (rc == 0 && (keep = bt_step_keep(dec, pos, picked, lp, u,
		    p * L, temp, count, keep)) < 0)
			rc = kn_error(err, KN_ENOMEM, "out of memory");
		for (r = 0; r < keep && rc == 0; r++)
			seq[pos[r]] = picked[r];
	}
	free(picked);
	free(pos);
	free(rows);
	free(sym);
	free(u);
	free(upick);
	free(lp);
	return rc;
}

int
bg_generate(kn_model *const *blocks, const pr_spec *s, int k,
    int32_t *seq, int fixed, int end, float temp, uint64_t seed,
    bt_decode dec, int cached, int *traversals, char *err)
{
	kn_kv *kv[PR_MAX_BLOCKS] = { NULL };
	int T = s->blocks, first, last, p, b, rc = KN_OK;

	if (!bg_has_pos_blocks(s)) {
		for (b = T - 1; b >= 0 && rc == 0; b--)
			rc = bt_denoise_block(blocks[b], s, k, b, seq, fixed, temp,
			    seed, dec, err);
		if (traversals != NULL)
			*traversals = 1;
		return rc;
	}
	for (b = 0; cached && b < T && rc == 0; b++)
		rc = kn_kv_create(&kv[b], blocks[b], err);
	bg_span(s, fixed, end, &first, &last);
	for (p = first; p <= last && rc == 0; p++)
		for (b = T - 1; b >= 0 && rc == 0; b--)
			rc = bg_denoise(blocks[b], kv[b], s, k, b, p, seq, fixed,
			    temp, seed, dec, err);
	for (b = 0; b < T; b++)
		kn_kv_free(kv[b]);
	if (traversals != NULL)
		*traversals = last - first + 1;
	return rc;
}
