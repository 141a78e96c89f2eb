/* The SOMA expert's forward pass for one byte of one session, in plain
 * loops: the same equations as kernels/soma_model.c (tested against
 * kn_soma_last_logits), with the recurrent state carried in and out. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "soma/step.h"

#define GELU_K 0.7978845608028654f      /* sqrt(2/pi) */
#define GELU_C 0.044715f

int
sa_stepper_init(sa_stepper *st, const kn_soma_shape *s, const float *body,
    const float *decoder, char *err)
{
	kn_soma_tensor t[SA_STEP_MAX_BLOCKS * 7];
	size_t nb, nd;
	int n, i, rc;

	memset(st, 0, sizeof(*st));
	if ((rc = kn_soma_check_shape(s, err)) != 0)
		return rc;
	if (s->blocks > SA_STEP_MAX_BLOCKS || s->width > SA_STEP_MAX_WIDTH ||
	    s->width * s->mlp_mult > SA_STEP_MAX_HIDDEN)
		return kn_error(err, KN_EINVAL, "a SOMA expert of %d blocks, "
		    "width %d, MLP %d is too large to step (at most %d, %d, "
		    "%d)", s->blocks, s->width, s->width * s->mlp_mult,
		    SA_STEP_MAX_BLOCKS, SA_STEP_MAX_WIDTH, SA_STEP_MAX_HIDDEN);
	n = kn_soma_body_tensors(s, t, SA_STEP_MAX_BLOCKS * 7);
	if (n != 7 * s->blocks)
		return kn_error(err, KN_EINVAL, "the expert's body has %d "
		    "tensors, not 7 per block", n);
	nb = kn_soma_body_params(s);
	nd = kn_soma_decoder_params(s);
	st->body = malloc(nb * sizeof(float));
	st->decoder = malloc(nd * sizeof(float));
	if (st->body == NULL || st->decoder == NULL) {
		sa_stepper_free(st);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	memcpy(st->body, body, nb * sizeof(float));
	memcpy(st->decoder, decoder, nd * sizeof(float));
	for (i = 0; i < n; i++)
		st->off[i / 7][i % 7] = t[i].offset;
	st->shape = *s;
	return KN_OK;
}

void
sa_stepper_free(sa_stepper *st)
{
	free(st->body);
	free(st->decoder);
	memset(st, 0, sizeof(*st));
}

size_t
sa_step_state_len(const kn_soma_shape *s)
{
	return (size_t)2 * s->blocks * s->width;
}

static float
sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

/* out (rows) = W (rows, cols) x + b */
static void
affine(float *out, const float *w, const float *b, const float *x,
    int rows, int cols)
{
	int r, c;

	for (r = 0; r < rows; r++) {
		float acc = 0.0f;

		for (c = 0; c < cols; c++)
			acc += w[(size_t)r * cols + c] * x[c];
		out[r] = acc + (b != NULL ? b[r] : 0.0f);
	}
}

void
sa_step(const sa_stepper *st, float *state, int byte, float *logp)
{
	const kn_soma_shape *s = &st->shape;
	int d = s->width, md = s->mlp_mult * d, l, j;
	float x[SA_STEP_MAX_WIDTH], g[4 * SA_STEP_MAX_WIDTH];
	float hh[4 * SA_STEP_MAX_WIDTH], u[SA_STEP_MAX_HIDDEN];
	float y[SA_STEP_MAX_WIDTH];
	const float *e = st->decoder;   /* (256, d) then the bias */
	double mx, sum;

	memcpy(x, e + (size_t)byte * d, (size_t)d * sizeof(float));
	for (l = 0; l < s->blocks; l++) {
		const size_t *o = st->off[l];
		float *h = state + (size_t)2 * l * d, *c = h + d;

		/* gates = W_ih x + b + W_hh h_prev; i, f, g, o */
		affine(g, st->body + o[0], st->body + o[2], x, 4 * d, d);
		affine(hh, st->body + o[1], NULL, h, 4 * d, d);
		for (j = 0; j < d; j++) {
			float gi = sigmoid(g[j] + hh[j]);
			float gf = sigmoid(g[d + j] + hh[d + j]);
			float gg = tanhf(g[2 * d + j] + hh[2 * d + j]);
			float go = sigmoid(g[3 * d + j] + hh[3 * d + j]);

			c[j] = gf * c[j] + gi * gg;
			h[j] = go * tanhf(c[j]);
			x[j] += h[j];
		}
		affine(u, st->body + o[3], st->body + o[4], x, md, d);
		for (j = 0; j < md; j++) {
			float v = u[j], k = GELU_K * (v + GELU_C * v * v * v);

			u[j] = 0.5f * v * (1.0f + tanhf(k));
		}
		affine(y, st->body + o[5], st->body + o[6], u, d, md);
		for (j = 0; j < d; j++)
			x[j] += y[j];
	}
	if (logp == NULL)
		return;
	affine(logp, e, e + (size_t)256 * d, x, 256, d);
	mx = logp[0];
	for (j = 1; j < 256; j++)
		if (logp[j] > mx)
			mx = logp[j];
	sum = 0.0;
	for (j = 0; j < 256; j++)
		sum += exp(logp[j] - mx);
	sum = mx + log(sum);
	for (j = 0; j < 256; j++)
		logp[j] = (float)(logp[j] - sum);
}
