/* The BlockTrain block: a bidirectional pre-LayerNorm Transformer over a
 * window of byte/mask symbols with a 256-way head at every position
 * (DESIGN section 2), and its causal-LM twin for the reference and the
 * inference baseline.  All parameters live in one backend buffer carved by
 * a size table, so checkpointing, averaging and perturbing are one loop.
 * Implemented in kernels/model.c (creation, parameters, forward, training)
 * and kernels/model_infer.c (inference-only models, fp16 storage,
 * predictions, KV-cache decoding, layer slices). */
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
	/* Position blocks of a bidirectional model (DESIGN section 2): 0 or
	 * window, none (today's model); L dividing the window, block-causal
	 * attention over blocks of L.  Its training and scoring rows then
	 * hold two copies of the window (kn_model_row_len); serving rows
	 * hold one, attended block-causally.  L = 1 below the window is the
	 * next-byte form (kn_model_next_byte). */
	int pos_block;
} kn_model_shape;

/* Position blocks of one byte (pos_block 1 below the window): the noisy
 * copy would hold only a mask per block, which tells the model nothing
 * but its position, so the row is one copy of the window, shifted: the
 * input at position i is the byte at i - 1 (KN_MASK at 0), attention is
 * causal, and position i predicts byte i, given every byte before it.
 * Half the work of the twin rows for the same bound. */
int kn_model_next_byte(const kn_model_shape *shape);

/* Positions of one window's row in kn_model_backward and kn_model_eval:
 * the window, or with position blocks of more than one byte 2 x window,
 * the noisy copy in [0, n) and the clean copy in [n, 2n) (KN_ATT_* in
 * kernels/backend.h).
 * The other calls take rows of one window. */
int kn_model_row_len(const kn_model_shape *shape);

/* One training or evaluation batch in host memory: B windows of
 * kn_model_row_len positions.  The loss is (1/B) sum_b sum_i weight[b,i]
 * CE(b,i): the masked-diffusion objective sets weight 1/(t n) on masked
 * positions and 0 elsewhere, the causal LM 1/n everywhere. */
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

/* How a served model keeps its weights: fp32, or the layer matrices in
 * IEEE fp16 (half the memory; the CPU computes in fp32 from them, CUDA
 * runs fp16 GEMMs with fp32 accumulation).  Training is fp32 only. */
typedef enum { KN_STORE_F32 = 0, KN_STORE_F16 } kn_storage;

typedef struct kn_model kn_model;

/* Checks the shape, allocates parameters, gradients, optimizer state and
 * activations for up to max_batch windows on be.  Returns 0 or KN_E*. */
int kn_model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, char *err);
/* The same for forward passes only: no gradients, no optimizer state, and
 * one layer's activations reused by every layer, so a model far too large
 * to train here can still be served.  Backward and update refuse it. */
int kn_model_create_inference(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, kn_storage storage, char *err);
/* Bytes such a model takes on its backend, scratch aside. */
size_t kn_model_inference_bytes(const kn_model_shape *shape, int max_batch,
    kn_storage storage);
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
/* The same table for shape without a model (data NULL), for a reader
 * that checks a checkpoint of a block it does not train: the count of
 * tensors written to out, or -1 when max is too small (KN_MODEL_TENSORS
 * always fits). */
#define KN_MODEL_TENSORS 32
int kn_model_table(const kn_model_shape *shape, kn_tensor *out, int max);
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

/* kn_model_predict for some positions only: rows (R, increasing) index
 * the B*n positions, u (R) their uniforms, out (R) their symbols; the
 * head runs on those rows alone.  Each gets what kn_model_predict gives
 * it. */
int kn_model_predict_at(kn_model *m, const int32_t *input, int B,
    const int32_t *rows, int R, const float *u, float temp, int32_t *out,
    char *err);

/* Decoding the causal LM with a KV cache, for the autoregressive baseline
 * (one traversal per byte) and for splitting the LM by layers over hosts:
 * a host runs its layers on the new positions and hands the hidden states
 * on.  A cache holds k and v of every layer of m for one sequence. */
typedef struct kn_kv kn_kv;

int kn_kv_create(kn_kv **out, const kn_model *m, char *err);
void kn_kv_free(kn_kv *kv);
/* The passes (forward, training or decoding) begun on m so far, one that
 * its checks refused included: what a caller can count its work by. */
uint64_t kn_model_passes(const kn_model *m);

/* Positions cached so far; bytes one cache takes for a shape. */
int kn_kv_len(const kn_kv *kv);
size_t kn_kv_bytes(const kn_model_shape *s);

typedef struct {
	kn_kv *kv;
	int pos0;       /* first new position: the cache's length */
	int count;      /* new positions */
} kn_decode_seq;

/* One pass of m's layers over the new positions of R sequences, rows in
 * sequence order (sum of count rows of width d).  The input is sym (bytes,
 * embedded at their positions) or, when sym is NULL, hidden (host).  With
 * picked NULL the output hidden states go to hidden; otherwise the final
 * LayerNorm and the head run on each sequence's last row and picked[r]
 * receives a byte sampled at temperature temp with the uniform u[r].
 * The caches grow by count. */
int kn_model_decode(kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, float *hidden, const float *u, float temp,
    int32_t *picked, char *err);

/* After a pass that sampled R rows (kn_model_predict_at, kn_model_decode
 * with picked, kn_model_blockdecode), whose logits m still holds: for
 * each row r, lp[r * (k + 1)] is the natural log-probability of picked[r]
 * and lp[r * (k + 1) + 1 ..] those of the k likeliest bytes (top[r * k
 * ..], most likely first, the lower byte first on a tie), under the
 * distribution the byte was drawn from: softmax(logits / temp), or,
 * where temp <= 0 picked the argmax, softmax(logits).  k 0 to 255;
 * serving's logprobs. */
int kn_model_head_logprobs(kn_model *m, int R, float temp,
    const int32_t *picked, int k, float *lp, unsigned char *top, char *err);

/* Copies layers first..first+L-1 of src (L = dst's layers), with the
 * embeddings, the final LayerNorm and the head, into dst: a host's slice
 * of a model split by layers. */
int kn_model_copy_layers(kn_model *dst, const kn_model *src, int first,
    char *err);

#endif
