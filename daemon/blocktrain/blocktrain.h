/* The BlockTrain objective (DESIGN section 2): training batches of block
 * b on its noise interval, the held-out share of the bound, and the
 * denoising traversal that composes the blocks at inference.  Every random
 * draw is keyed by (seed, block, replica, step), so a run is reproducible
 * and a replica's data never overlaps another's. */
#ifndef SM_BLOCKTRAIN_H
#define SM_BLOCKTRAIN_H

#include <stdint.h>

#include "proto/corpus.h"
#include "kernels/model.h"
#include "proto/spec.h"

/* Noise levels are never below this: 1/t weights stay bounded. */
#define BT_T_MIN 1e-3

/* Which model a batch is for. */
typedef enum {
	BT_BLOCK = 0,           /* block b on (t_{b-1}, t_b] */
	BT_E2E,                 /* the end-to-end reference on (0, 1] */
	BT_CAUSAL               /* the causal byte LM */
} bt_kind;

const char *bt_kind_name(bt_kind k);

/* Positions of one window's row in the batches of kind: the window, or
 * with position blocks two copies of it (kn_model_row_len). */
int bt_row_len(const pr_spec *s, bt_kind kind);

/* Whether kind's rows are of the next-byte form (kn_model_next_byte):
 * position blocks of one byte below the window. */
int bt_next_byte(const pr_spec *s, bt_kind kind);

/* Fills one training batch of spec->batch windows (input, target, weight
 * each batch * bt_row_len long).  Windows start at uniform offsets of c;
 * noise is drawn as the spec's [noise] says (by default one level per
 * window, stratified across the batch in [lo, hi]); with
 * probability p_prefix a window keeps a random-length prefix unmasked.
 * With position blocks each block is masked at its own level and scored
 * given the clean bytes before it (DESIGN section 2); at one byte per
 * block, every byte is scored given those before it. */
void bt_train_batch(const pr_spec *s, const corpus *c, bt_kind kind,
    int block, int replica, int64_t step, int32_t *input, int32_t *target,
    float *weight);

/* Interval of block b (0-based), or (0, 1] for the references. */
void bt_interval(const pr_spec *s, bt_kind kind, int block, double *lo,
    double *hi);

/* The held-out set: `windows` windows at evenly spaced offsets of c, and
 * `strata` noise levels per window drawn stratified in each interval with
 * a fixed key, so every model is scored on the same draws. */
typedef struct {
	int windows;
	int strata;
} bt_eval_set;

#define BT_EVAL_WINDOWS 1024
#define BT_EVAL_STRATA 2

/* Share of the bound on [lo, hi] in nats per byte, as m (a bidirectional
 * model) scores it: (hi - lo) * mean over windows and levels of
 * (1/t) * (CE summed over masked positions) / n.  With position blocks,
 * the sum over blocks of the share of each given the clean bytes before
 * it, the level integrated out (blocktrain.c, block_weights): at one byte
 * per block the shares of (0, 1] sum to the next-byte cross-entropy. */
int bt_eval_share(kn_model *m, const pr_spec *s, const corpus *c,
    const bt_eval_set *set, double lo, double hi, double *share, char *err);
/* bt_eval_share case by case: value[e] (room for windows * strata, or
 * windows with position blocks of one byte; *cases says how many) is
 * case e's contribution, scaled so that their mean is the share, for
 * paired comparisons of two models on the same cases.  key 0 scores the
 * set's cases; any other, windows at offsets drawn with key and noise
 * drawn with it: a round's check (daemon/blocktrain/verify.c) keys them by the run
 * and the round, so every replica scores the same cases. */
int bt_eval_cases(kn_model *m, const pr_spec *s, const corpus *c,
    const bt_eval_set *set, uint64_t key, double lo, double hi,
    double *value, int *cases, char *err);
/* Cross-entropy of the causal LM per predicted byte on the same windows. */
int bt_eval_causal(kn_model *m, const pr_spec *s, const corpus *c,
    const bt_eval_set *set, double *nats, char *err);

/* Interval cuts from a pilot (DESIGN section 2): given the shares of
 * the bound on G equal cells of (0, 1] (a model trained on all of it
 * scores each), the T + 1 cuts 0 < ... < 1 that give each of T blocks
 * an equal share, the bound taken as linear in t within a cell.
 * KN_EINVAL when a share is not positive and finite. */
int bt_equal_cuts(const double *cell_shares, int G, int T, double *cuts,
    char *err);

/* The order in which a traversal decides the masked positions ([generate]
 * decode; the number is the name's index in pr_decoders).  A step from
 * level t to u decides, in random order, each masked position with
 * probability (t - u) / t; in the others, as many as leave a share u of
 * the free positions masked, those the model is surest of: confidence by
 * the probability of the likeliest byte, margin by its lead over the
 * second, sampled by the probability of the byte drawn there plus Gumbel
 * noise (MaskGIT's choice).  Either way the byte of a decided position is
 * drawn from the model's distribution there with the same uniform, so
 * the order is all that changes. */
typedef enum {
	BT_DECODE_RANDOM = 0,
	BT_DECODE_CONFIDENCE = 1,
	BT_DECODE_MARGIN = 2,
	BT_DECODE_SAMPLED = 3
} bt_decode;

/* 0 and *d set, or -1 when name is no decoder's */
int bt_decode_parse(const char *name, bt_decode *d);
const char *bt_decode_name(bt_decode d);

/* Runs block b's share of the traversal on seq (window symbols, KN_MASK
 * for undecided), in place, in the order of decoder dec.  Positions
 * before `fixed` are the prompt and are never changed.  Bytes are
 * sampled at temperature temp; draws are keyed by (seed, block, step,
 * position). */
int bt_denoise_block(kn_model *m, const pr_spec *s, int k, int block,
    int32_t *seq, int fixed, float temp, uint64_t seed, bt_decode dec,
    char *err);

/* bt_denoise_block one step at a time, for a server that batches the
 * steps of many requests into one forward pass.  step_draw() fills u (2n
 * floats) with step j's draws and gives its unmasking probability p and
 * end level next; it returns 0 when block b has no step j.  positions()
 * lists in pos (n) the positions step j unmasks and returns their count:
 * a step of none needs no forward pass.  Position i takes the byte
 * predicted there with the uniform u[n + i]. */
int bt_step_draw(const pr_spec *s, int k, int block, int j, uint64_t seed,
    float *u, double *p, double *next);
int bt_step_positions(const int32_t *seq, int n, int fixed, const float *u,
    double p, double next, int32_t *pos);

/* A step of decoder dec over positions [fixed, n) of seq: the positions
 * its pass predicts (pos, n; the count returned) and, in *keep, how many
 * of them it decides.  Random predicts just those it decides
 * (bt_step_positions); the others predict every masked position and
 * decide *keep of them, those bt_step_keep ranks first.  0: no pass. */
int bt_step_candidates(bt_decode dec, const int32_t *seq, int n, int fixed,
    const float *u, double p, double next, int32_t *pos, int *keep);

/* The width of a row of bt_step_keep's lp: kn_model_head_logprobs'
 * figures with k = 2 at temperature 1, the picked byte's and the two
 * likeliest bytes'. */
#define BT_DECODE_LP 3
/* After the pass over the R candidates (pos, and picked their sampled
 * bytes; lp R rows of BT_DECODE_LP): moves the keep that dec decides
 * first to the front of pos and picked, the surest first (the lower
 * position on a tie), and returns keep; random keeps all R as they are
 * and needs no lp.  usel[i - base] is the step's unmasking uniform of
 * position i (step_draw's first half), the noise of sampled, scaled by
 * the request's temperature temp.  KN_ENOMEM when out of memory. */
int bt_step_keep(bt_decode dec, int32_t *pos, int32_t *picked,
    const float *lp, const float *usel, int base, float temp, int R,
    int keep);

/* The scores bt_step_keep needs from the pass that just sampled picked
 * (R rows) in m, into lp (R x BT_DECODE_LP); nothing for random. */
int bt_step_scores(bt_decode dec, kn_model *m, int R, const int32_t *picked,
    float *lp, char *err);

/* Autoregressive generation with the causal LM: fills seq[fixed..end)
 * one byte at a time, the prompt in one pass and then one position per
 * byte against a KV cache (kn_model_decode).  The byte at position pos is
 * sampled with bt_ar_uniform(seed, window, pos, scratch of window floats),
 * so a pipeline that splits the LM by layers draws the same numbers. */
float bt_ar_uniform(uint64_t seed, int n, int pos, float *scratch);
int bt_generate_ar(kn_model *m, int32_t *seq, int fixed, int end,
    float temp, uint64_t seed, char *err);

#endif
