/* The BlockTrain block: a bidirectional pre-LayerNorm Transformer over a
 * window of byte/mask symbols with a 256-way head at every position
 * (DESIGN section 2), and its causal-LM twin for the reference and the
 * inference baseline.  All parameters live in one backend buffer carved by
 * a size table, so checkpointing, averaging and perturbing are one loop. */
#ifndef KN_MODEL_H
#define KN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/tensor.h"

#define KN_VOCAB_IN 257         /* 256 byte values and the mask symbol */
#define KN_VOCAB_OUT 256
#define KN_MASK 256

typedef struct {
	int width;      /* d */
	int heads;      /* h; d % h == 0 */
	int layers;     /* L */
	int window;     /* n, positions per window */
	int causal;     /* 0: bidirectional block, 1: causal LM */
} kn_model_shape;

/* One training or evaluation batch in host memory: B windows of n
 * positions.  The loss is (1/B) sum_b sum_i weight[b,i] CE(b,i): the
 * masked-diffusion objective sets weight 1/(t n) on masked positions and 0
 * elsewhere, the causal LM 1/n everywhere. */
typedef struct {
	const int32_t *input;   /* (B, n) symbols in [0, 257) */
	const int32_t *target;  /* (B, n) bytes in [0, 256) */
	const float *weight;    /* (B, n) finite, >= 0 */
	int B;
} kn_batch;

typedef struct {
	float beta1, beta2, eps, weight_decay;
	float clip;             /* global gradient-norm clip; <= 0: none */
} kn_adamw;

typedef struct kn_model kn_model;

/* Checks the shape, allocates parameters, gradients, optimizer state and
 * activations for up to max_batch windows on be.  Returns 0 or KN_E*. */
int kn_model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, char *err);
void kn_model_free(kn_model *m);
int kn_model_check_shape(const kn_model_shape *shape, char *err);

const kn_model_shape *kn_model_get_shape(const kn_model *m);
const kn_backend *kn_model_backend(const kn_model *m);
size_t kn_model_num_params(const kn_model *m);
/* The most windows one call takes. */
int kn_model_max_batch(const kn_model *m);
size_t kn_model_params_for(const kn_model_shape *shape);
/* Multiply-adds of one forward pass over one window, attention included:
 * training costs about three times this. */
double kn_model_flops_per_window(const kn_model_shape *shape);

/* The size table: name, shape and offset of every parameter tensor, data
 * pointing into the backend's parameter buffer. */
const kn_tensor *kn_model_tensors(const kn_model *m, int *count);
float *kn_model_params(kn_model *m);      /* backend memory */
float *kn_model_grads(kn_model *m);       /* backend memory */
/* Host copies of the parameters (num_params floats). */
void kn_model_get_params(const kn_model *m, float *host);
int kn_model_set_params(kn_model *m, const float *host, char *err);
/* Optimizer state: m and v (num_params floats each) and the step count. */
void kn_model_get_opt_state(const kn_model *m, float *host_m,
    float *host_v, int *t);
void kn_model_set_opt_state(kn_model *m, const float *host_m,
    const float *host_v, int t);
int kn_model_opt_step(const kn_model *m);

/* GPT-2 initialisation from a seed: normal(0, 0.02) for embeddings and
 * weights, 0.02/sqrt(2L) for the projections into the residual stream,
 * zero biases, unit LayerNorm gains.  Resets the optimizer. */
void kn_model_init(kn_model *m, uint64_t seed);

/* Gradient of the batch loss into kn_model_grads() (overwritten); loss
 * receives the loss.  No parameter changes. */
int kn_model_backward(kn_model *m, const kn_batch *batch, float *loss,
    char *err);
/* Clips the global gradient norm and takes one AdamW step at rate lr;
 * grad_norm (may be NULL) receives the norm before clipping. */
void kn_model_update(kn_model *m, const kn_adamw *opt, float lr,
    float *grad_norm);
/* backward then update: one train step. */
int kn_model_step(kn_model *m, const kn_batch *batch, const kn_adamw *opt,
    float lr, float *loss, char *err);

/* Forward only: the loss of each window (B floats, weights applied, not
 * divided by B).  For held-out evaluation. */
int kn_model_eval(kn_model *m, const kn_batch *batch, float *window_loss,
    char *err);
/* Forward only: logits (B, n, 256) to host memory. */
int kn_model_forward(kn_model *m, const int32_t *input, int B,
    float *logits, char *err);
/* Forward, then one symbol per position sampled with temperature temp from
 * the uniforms u (B*n, host), into out (B*n, host). */
int kn_model_predict(kn_model *m, const int32_t *input, int B,
    const float *u, float temp, int32_t *out, char *err);

#endif
