/* The SOMA expert (DESIGN section 3): a small LSTM byte language model,
 * its loss on one parameter set, its exact gradient (the BPTT control),
 * the decoder's delta-rule gradient, and the population loss that
 * evaluates the K perturbed bodies of an SPSA step in one batched pass.
 * The SOMA trainers and `shardmeter train` call it.
 *
 * Model: x0 = E[byte]; per block x += LSTM(x); x += W2 gelu(W1 x + b1) +
 * b2; logits = x . E^T + dec_bias (E weight-tied).  No layer norm.  The
 * body (every block) and the decoder (E, dec_bias) are two allocations:
 * SPSA perturbs the body, the decoder is shared and frozen after the seed.
 *
 * Tokens are host int32 bytes (B, T+1): position t of a sequence predicts
 * token t+1 from tokens 0..t, the LSTM state starting at zero for every
 * sequence; the loss is the mean cross-entropy in nats over B*T
 * positions. */
#ifndef KN_SOMA_MODEL_H
#define KN_SOMA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#define KN_SOMA_VOCAB 256
#define KN_SOMA_NAME_LEN 32

typedef struct {
	int width;      /* d (published 32) */
	int mlp_mult;   /* MLP hidden width / d (4) */
	int blocks;     /* residual LSTM + MLP blocks (2) */
} kn_soma_shape;

/* One tensor of the body or the decoder: rows x cols floats at offset
 * (in floats) of its buffer; a vector has cols = 1. */
typedef struct {
	char name[KN_SOMA_NAME_LEN];    /* "block0.w_ih", "dec_bias", ... */
	size_t offset;
	int rows, cols;
} kn_soma_tensor;

typedef struct kn_soma_model kn_soma_model;

/* 0, or KN_EINVAL with the reason. */
int kn_soma_check_shape(const kn_soma_shape *s, char *err);
/* Floats in the body (33,344 at d = 32, mult 4, 2 blocks) and in the
 * decoder (256 d + 256: 8,448 at d = 32). */
size_t kn_soma_body_params(const kn_soma_shape *s);
size_t kn_soma_decoder_params(const kn_soma_shape *s);
/* Multiply-adds of one byte position's forward pass: per block the
 * LSTM's two (4d, d) products and the MLP's two (mult d, d) ones, then
 * the (256, d) logits; 40,960 at d = 32, mult 4, 2 blocks.  Positions
 * of models of different widths compare by it, not by their count. */
uint64_t kn_soma_forward_macs(const kn_soma_shape *s);
/* The body's tensors in buffer order, per block: w_ih (4d,d), w_hh
 * (4d,d), b (4d; gates i, f, g, o), w1 (mult d, d), b1 (mult d), w2 (d,
 * mult d), b2 (d).  Writes min(count, max) entries to out (may be NULL)
 * and returns the count.  The decoder's: e (256,d), dec_bias (256). */
int kn_soma_body_tensors(const kn_soma_shape *s, kn_soma_tensor *out,
    int max);
int kn_soma_decoder_tensors(const kn_soma_shape *s, kn_soma_tensor *out,
    int max);

/* Work space grows on demand with the largest B, T and population seen. */
int kn_soma_create(kn_soma_model **out, const kn_soma_shape *s,
    const kn_backend *be, char *err);
void kn_soma_free(kn_soma_model *m);
const kn_soma_shape *kn_soma_get_shape(const kn_soma_model *m);
const kn_backend *kn_soma_backend(const kn_soma_model *m);

/* Initialises body and decoder from seed alone (kernels/rng.h), the same
 * bytes whatever the thread count or backend: E ~ N(0, 1/sqrt(d)),
 * w_ih, w_hh, w1 ~ N(0, 1/sqrt(fan_in)), w2 ~ N(0, 1/sqrt(2 blocks mult
 * d)), biases 0 except the forget gate's, 1.  Gradients are zeroed.
 * Returns 0 or KN_ENOMEM (host staging). */
int kn_soma_init(kn_soma_model *m, uint64_t seed, char *err);

/* Backend memory: parameters and their gradients (accumulated by the
 * passes below, zeroed by kn_soma_zero_grad), for the optimizer. */
float *kn_soma_body(kn_soma_model *m);
float *kn_soma_decoder(kn_soma_model *m);
float *kn_soma_body_grad(kn_soma_model *m);
float *kn_soma_decoder_grad(kn_soma_model *m);
void kn_soma_zero_grad(kn_soma_model *m);
/* Host copies of the parameters and gradients.  set_* refuse (KN_ENUM)
 * a non-finite value. */
void kn_soma_get_body(const kn_soma_model *m, float *host);
void kn_soma_get_decoder(const kn_soma_model *m, float *host);
int kn_soma_set_body(kn_soma_model *m, const float *host, char *err);
int kn_soma_set_decoder(kn_soma_model *m, const float *host, char *err);
void kn_soma_get_grads(const kn_soma_model *m, float *host_body,
    float *host_decoder);

/* Mean next-byte loss in nats of the model's own body on tokens (B,
 * T+1). */
int kn_soma_loss(kn_soma_model *m, const int32_t *tokens, int B, int T,
    double *loss, char *err);
/* logp (B, T), host memory: the log-probability of each target byte
 * (token t + 1 of each sequence) under the model's own body; their
 * negated mean is kn_soma_loss.  What a mixture of experts is scored
 * from. */
int kn_soma_target_logprobs(kn_soma_model *m, const int32_t *tokens, int B,
    int T, float *logp, char *err);
/* The loss and its exact gradient (backpropagation through time),
 * added into the body and decoder gradients; E's gradient has both its
 * uses, input embedding and decoder. */
int kn_soma_forward_backward(kn_soma_model *m, const int32_t *tokens, int B,
    int T, double *loss, char *err);
/* The delta rule: the loss and the gradient w.r.t. E and dec_bias
 * through the head alone, the hidden states held fixed (dE +=
 * dlogits^T . x_final, d dec_bias += sum of dlogits), added into the
 * decoder gradient.  The body gradient is untouched. */
int kn_soma_decoder_delta(kn_soma_model *m, const int32_t *tokens, int B,
    int T, double *loss, char *err);
/* The K bodies in bodies (K, kn_soma_body_params, host memory), each with
 * the model's decoder, on the same tokens (B, T+1): losses[k] is the
 * mean loss of body k, as kn_soma_loss would give with that body.  The
 * model's own body is not used.  Copies share the embedding and run
 * their GEMMs together; results are the same for any thread count. */
int kn_soma_population_loss(kn_soma_model *m, const float *bodies, int K,
    const int32_t *tokens, int B, int T, float *losses, char *err);
/* Copies evaluated per pass of the population: 0 (the default) sizes
 * groups to a memory budget of the backend (96 MiB of activations on the
 * CPU, 4 GiB on CUDA); a positive count caps it. */
void kn_soma_set_max_group(kn_soma_model *m, int copies);
/* Logits (B, 256) for the byte after each of B contexts tokens (B, T),
 * host memory. */
int kn_soma_last_logits(kn_soma_model *m, const int32_t *tokens, int B,
    int T, float *logits, char *err);

#endif
