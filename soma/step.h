/* A SOMA expert one byte at a time on the host: the LSTM state of a
 * session kept between bytes, so generation costs O(d^2) per byte and
 * expert instead of a pass over the whole context.  The serving hosts
 * (daemon/pipeline/serve_soma.c) and the in-process path of `shardmeter generate
 * --mode soma` both run it, so their outputs agree byte for byte. */
#ifndef SA_STEP_H
#define SA_STEP_H

#include <stddef.h>

#include "kernels/soma_model.h"

/* The shapes served (the work space of a step is on the stack). */
#define SA_STEP_MAX_BLOCKS 16
#define SA_STEP_MAX_WIDTH 512
#define SA_STEP_MAX_HIDDEN 4096        /* mlp_mult x width */

/* An expert's parameters in host memory, with the offsets of its
 * tensors, read-only once made (any number of sessions share it). */
typedef struct {
	kn_soma_shape shape;
	float *body;            /* kn_soma_body_params floats */
	float *decoder;         /* kn_soma_decoder_params: e (256,d), bias */
	size_t off[SA_STEP_MAX_BLOCKS][7]; /* w_ih w_hh b w1 b1 w2 b2 */
} sa_stepper;

/* Takes copies of body and decoder (host memory).  0 or KN_E*. */
int sa_stepper_init(sa_stepper *st, const kn_soma_shape *s,
    const float *body, const float *decoder, char *err);
void sa_stepper_free(sa_stepper *st);
/* Floats of one session's state: h and c of every block. */
size_t sa_step_state_len(const kn_soma_shape *s);
/* Feeds byte to the session state (zeros at the start of a session) and,
 * with logp, writes the log-probabilities of the next byte (256). */
void sa_step(const sa_stepper *st, float *state, int byte, float *logp);

#endif
