/* The pieces of SOMA's independence ablation (DESIGN section 3): N
 * expert bodies packed in one SPSA parameter vector, each scored on its
 * own cluster's minibatch, the minibatches and held-out split of a
 * cluster, span losses in nats per byte, and relative variances.
 * scripts/bench/soma-ablation drives them; the SOMA trainer may too. */
#ifndef SA_ABLATION_H
#define SA_ABLATION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/soma_model.h"

/* Bytes of a cluster of len bytes that training may read: all but the
 * held-out tail, the last 2% (rounded up, at least one byte when len >
 * 1). */
size_t sa_abl_train_len(size_t len);

/* B windows of T+1 bytes drawn from data[0, len) (len > T) at uniform
 * offsets, a pure function of (seed, expert, step), into tokens (B, T+1)
 * as int32.  Returns 0 or KN_EINVAL. */
int sa_abl_batch(const unsigned char *data, size_t len, int B, int T,
    uint64_t seed, uint64_t expert, uint64_t step, int32_t *tokens,
    char *err);

/* The population callback of SPSA over `groups` packed bodies: theta is
 * (groups, nbody), segment g is expert g's body, scored with the model's
 * decoder on minibatch g of tokens.  Owns its buffers. */
typedef struct {
	kn_soma_model *m;       /* borrowed: its decoder is used, its body
	                         * is overwritten by sa_abl_packed_grad */
	int groups;
	size_t nbody;
	int B, T;
	int32_t *tokens;        /* (groups, B, T+1): fill before each step */
	float *gather;          /* (k_cap, nbody) segment g of each copy */
	float *loss;            /* (k_cap) */
	int k_cap;
} sa_abl_packed;

int sa_abl_packed_init(sa_abl_packed *p, kn_soma_model *m, int groups,
    int B, int T, int k_cap, char *err);
void sa_abl_packed_free(sa_abl_packed *p);
/* A kn_zo_eval_fn: losses[k * groups + g] is the mean loss of segment g
 * of copy k (thetas (K, groups * nbody), K <= k_cap) on minibatch g. */
int sa_abl_packed_eval(void *ctx, const float *thetas, int K, float *losses,
    char *err);
/* The exact gradient (backpropagation through time) of each group's own
 * loss on its own minibatch w.r.t. its own segment, packed like theta:
 * what SPSA estimates in independent mode, and in summed mode too since
 * the summed loss is separable.  grad (groups * nbody). */
int sa_abl_packed_grad(sa_abl_packed *p, const float *theta, float *grad,
    char *err);

/* Mean loss in nats per byte of each of K bodies (K, nbody) over all of
 * data (len bytes): consecutive windows of T+1 bytes that overlap by one,
 * so every byte after the first is predicted once with its window's
 * context, the LSTM state starting at zero in each window; the last
 * (len - 1) mod T bytes are left out.  Windows go B to a call.
 * losses (K).  KN_EINVAL when len < T + 1. */
int sa_abl_span_loss(kn_soma_model *m, const float *bodies, int K,
    const unsigned char *data, size_t len, int B, int T, double *losses,
    char *err);

/* Of R estimates (R, n) of one vector whose exact value is ref (n):
 * *relvar = mean_r |g_r - ref|^2 / |ref|^2, the relative variance
 * around the exact mean, and *spread = sum_r |g_r - gbar|^2 / (R - 1),
 * the unbiased variance around their own mean gbar (R >= 2; ref may be
 * NULL, then *relvar is left alone).  Returns KN_EINVAL for R < 2 or a
 * zero ref. */
int sa_abl_relvar(const float *g, int R, size_t n, const float *ref,
    double *relvar, double *spread, char *err);

#endif
