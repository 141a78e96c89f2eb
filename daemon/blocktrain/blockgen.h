/* Generation with position blocks (DESIGN section 2, issue 14): the
 * output is produced position block by position block, each one
 * traversal of the blocks T..1; within it block b denoises the position
 * block's masks over its interval given the clean bytes before it, with
 * the keys and values of that context cached.  Shared by `shardmeter
 * generate` and the pipeline hosts (serve_pb.c), so one seed gives one
 * output in one process and through the ring. */
#ifndef SM_BLOCKGEN_H
#define SM_BLOCKGEN_H

#include <stdint.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/model.h"
#include "proto/spec.h"

/* Whether the run cuts the window into position blocks (0 <
 * position_block < window); otherwise generation is the one traversal of
 * bt_denoise_block, as it always was. */
int bg_has_pos_blocks(const pr_spec *s);
/* L: the run's position block, or the window. */
int bg_pos_block(const pr_spec *s);

/* The symbols the model reads at positions [from, from + count) of seq:
 * the bytes and masks themselves, or in the next-byte form
 * (kn_model_next_byte) those one position earlier, KN_MASK at 0. */
void bg_symbols(const pr_spec *s, const int32_t *seq, int from, int count,
    int32_t *sym);

/* Whether a pass that picks bytes of a position block may also add its
 * rows to the cache: in the next-byte form a row reads the byte before
 * it, decided already, so the row the pass computes is the one the next
 * traversal's bg_extend would compute again. */
int bg_commits_picks(const pr_spec *s);

/* The traversals of a request whose prompt is seq[0, fixed) and output
 * seq[fixed, end): position blocks first = floor(fixed / L) to last =
 * ceil(end / L) - 1, each one traversal, so last - first + 1 in all
 * (ceil(m / L) for m bytes after a prompt that ends a position block;
 * 1 at L = window).  Positions after end in the last one are denoised
 * too, as the whole window is at L = window. */
void bg_span(const pr_spec *s, int fixed, int end, int *first, int *last);
int bg_traversals(const pr_spec *s, int fixed, int end);

/* Step j of block b (0-based) in position block p: its draws into u (2L:
 * u[i] decides whether position pL + i is unmasked, u[L + i] picks its
 * byte), unmasking probability *prob and end level *next; 0 when block
 * b has no step j.  Keyed by (seed, b, j, p). */
int bg_step_draw(const pr_spec *s, int k, int block, int j, int p,
    uint64_t seed, float *u, double *prob, double *next);
/* The positions (absolute, into pos) that step unmasks in position block
 * p of seq; their count. */
int bg_step_positions(const pr_spec *s, const int32_t *seq, int p, int fixed,
    const float *u, double prob, double next, int32_t *pos);
/* bt_step_candidates of decoder dec in position block p of seq: absolute
 * positions into pos, *keep of them decided. */
int bg_step_candidates(const pr_spec *s, bt_decode dec, const int32_t *seq,
    int p, int fixed, const float *u, double prob, double next,
    int32_t *pos, int *keep);

/* Adds the clean context seq[len, pL) to the cache kv of block model m
 * (len its length now): KN_EINVAL if a byte there is still masked. */
int bg_extend(kn_model *m, kn_kv *kv, const pr_spec *s, int p,
    const int32_t *seq, char *err);

/* Block b's (0-based) share of the traversal of position block p, on
 * seq (window symbols, KN_MASK undecided) in place, positions before
 * fixed never changed.  With kv, the context goes into the cache first
 * and each step runs on the L rows of the position block; with kv NULL,
 * each step runs the whole window (the uncached reference).  Decided in
 * the order of decoder dec. */
int bg_denoise(kn_model *m, kn_kv *kv, const pr_spec *s, int k, int block,
    int p, int32_t *seq, int fixed, float temp, uint64_t seed,
    bt_decode dec, char *err);

/* The whole generation in one process: blocks[b] is block b + 1; seq
 * fills [fixed, end) in the order of decoder dec.  cached 0 runs the
 * uncached reference.
 * *traversals (may be NULL) receives the traversals made. */
int bg_generate(kn_model *const *blocks, const pr_spec *s, int k,
    int32_t *seq, int fixed, int end, float temp, uint64_t seed,
    bt_decode dec, int cached, int *traversals, char *err);

#endif
