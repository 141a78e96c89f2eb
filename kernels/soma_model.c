/* The SOMA expert through the backend table: size table, initialisation,
 * the forward pass shared by the single model and the population of K
 * bodies, backpropagation through time and the decoder's delta rule.
 * See soma_model.h for the model and the conventions. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/rng.h"
#include "kernels/soma_model.h"
#include "kernels/tensor.h"

/* The tensors of one block, in buffer order. */
enum {
	W_IH,           /* (4d, d) */
	W_HH,           /* (4d, d) */
	B_LSTM,         /* (4d) gates i, f, g, o */
	W_1,            /* (mult d, d) */
	B_1,            /* (mult d) */
	W_2,            /* (d, mult d) */
	B_2,            /* (d) */
	PER_BLOCK
};

static const char *const block_names[PER_BLOCK] = {
	"w_ih", "w_hh", "b", "w1", "b1", "w2", "b2",
};

/* The decoder: E (256, d), then dec_bias (256). */
#define DEC_E 0
#define DEC_BIAS(d) ((size_t)KN_SOMA_VOCAB * (d))

/* Random streams of the initialisation, by meaning. */
#define SOMA_STREAM 0x534f4d41u         /* "SOMA" */
#define STREAM_DECODER 0xdec

/* Work space for the population, in bytes: copies are grouped so that a
 * group's activations fit, the group size following from the shape alone
 * so that results never depend on anything else. */
#define GROUP_BYTES_CPU ((size_t)96 << 20)
#define GROUP_BYTES_CUDA ((size_t)4 << 30)

/* Bounds that keep every count of an op (G*B*T*256 at most) in an int. */
#define MAX_WIDTH 4096
#define MAX_MULT 16
#define MAX_BLOCKS 64
#define MAX_POSITIONS (1 << 22)

/* Activations of one pass over G copies of N = B*T positions.  Training
 * (G = 1) keeps every block's; otherwise one set serves every block and
 * the residual stream x is updated in place. */
struct soma_acts {
	int32_t *input;                 /* (N) */
	int32_t *target;                /* (G, N): the targets, per copy */
	float *weight;                  /* (G, N) ones */
	float *x;                       /* (L+1, N, d) training, (G, N, d) */
	float *xmid;                    /* (L, N, d) training; NULL */
	float *gates;                   /* (L or G, N, 4d) */
	float *c, *h;                   /* (L or G, N, d) */
	float *u, *a;                   /* (L or G, N, mult d) */
	float *y;                       /* (G, N, d) the MLP's output */
	float *logits;                  /* (G, N, 256) */
	float *losses;                  /* (G, N) */
	float *zero_row, *dummy_row;    /* (d): embed without positions */
	float *bodies;                  /* (G, nbody) population bodies */
	/* backward work space (training) */
	float *dx, *dtmp, *dh, *dcell;  /* (N, d) x3, (B, d) */
	float *dgates;                  /* (N, 4d) */
	float *du;                      /* (N, mult d) */
};

struct kn_soma_model {
	kn_soma_shape shape;
	const kn_backend *be;
	size_t nbody, ndec;
	float *body, *decoder;          /* (nbody), (ndec) */
	float *body_grad, *decoder_grad;
	int max_group;                  /* 0: by the memory budget */
	void *work;                     /* all activations, one allocation */
	size_t work_bytes;
	struct soma_acts a;
};

int
kn_soma_check_shape(const kn_soma_shape *s, char *err)
{
	if (s->width <= 0 || s->mlp_mult <= 0 || s->blocks <= 0)
		return kn_error(err, KN_EINVAL, "SOMA shape needs positive "
		    "width, mlp_mult and blocks (got %d, %d, %d)", s->width,
		    s->mlp_mult, s->blocks);
	if (s->width > MAX_WIDTH || s->mlp_mult > MAX_MULT ||
	    s->blocks > MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "SOMA shape too large (width "
		    "%d of %d, mlp_mult %d of %d, blocks %d of %d)", s->width,
		    MAX_WIDTH, s->mlp_mult, MAX_MULT, s->blocks, MAX_BLOCKS);
	return KN_OK;
}

static void
block_shape(const kn_soma_shape *s, int rows[PER_BLOCK], int cols[PER_BLOCK])
{
	int d = s->width, md = s->mlp_mult * s->width;
	const int r[PER_BLOCK] = { 4 * d, 4 * d, 4 * d, md, md, d, d };
	const int c[PER_BLOCK] = { d, d, 1, d, 1, md, 1 };

	memcpy(rows, r, sizeof(r));
	memcpy(cols, c, sizeof(c));
}

static size_t
block_params(const kn_soma_shape *s)
{
	int rows[PER_BLOCK], cols[PER_BLOCK], i;
	size_t n = 0;

	block_shape(s, rows, cols);
	for (i = 0; i < PER_BLOCK; i++)
		n += (size_t)rows[i] * cols[i];
	return n;
}

/* Offset in floats of tensor which of block l in the body. */
static size_t
body_offset(const kn_soma_shape *s, int l, int which)
{
	int rows[PER_BLOCK], cols[PER_BLOCK], i;
	size_t off = (size_t)l * block_params(s);

	block_shape(s, rows, cols);
	for (i = 0; i < which; i++)
		off += (size_t)rows[i] * cols[i];
	return off;
}

size_t
kn_soma_body_params(const kn_soma_shape *s)
{
	return (size_t)s->blocks * block_params(s);
}

size_t
kn_soma_decoder_params(const kn_soma_shape *s)
{
	return (size_t)KN_SOMA_VOCAB * s->width + KN_SOMA_VOCAB;
}

uint64_t
kn_soma_forward_macs(const kn_soma_shape *s)
{
	uint64_t d = (uint64_t)s->width;

	return (uint64_t)s->blocks * (8 + 2 * (uint64_t)s->mlp_mult) * d * d +
	    KN_SOMA_VOCAB * d;
}

int
kn_soma_body_tensors(const kn_soma_shape *s, kn_soma_tensor *out, int max)
{
	int rows[PER_BLOCK], cols[PER_BLOCK], l, i, n = 0;

	block_shape(s, rows, cols);
	for (l = 0; l < s->blocks; l++)
		for (i = 0; i < PER_BLOCK; i++, n++) {
			if (out == NULL || n >= max)
				continue;
			snprintf(out[n].name, sizeof(out[n].name),
			    "block%d.%s", l, block_names[i]);
			out[n].offset = body_offset(s, l, i);
			out[n].rows = rows[i];
			out[n].cols = cols[i];
		}
	return n;
}

int
kn_soma_decoder_tensors(const kn_soma_shape *s, kn_soma_tensor *out, int max)
{
	const kn_soma_tensor t[2] = {
		{ "e", DEC_E, KN_SOMA_VOCAB, s->width },
		{ "dec_bias", DEC_BIAS(s->width), KN_SOMA_VOCAB, 1 },
	};
	int i;

	for (i = 0; i < 2 && out != NULL && i < max; i++)
		out[i] = t[i];
	return 2;
}

/* The next array of count floats (int32 arrays are the same size) in a
 * work space at base, each 64-byte aligned; with base NULL, *used only
 * counts the bytes. */
static void *
next_array(char *base, size_t *used, size_t count)
{
	size_t at = *used;

	*used += (count * sizeof(float) + 63) / 64 * 64;
	return base != NULL ? base + at : NULL;
}

static void
layout(struct soma_acts *a, char *base, size_t *used,
    const kn_soma_shape *s, int G, int B, int T, int train, size_t nbody)
{
	size_t d = (size_t)s->width, md = d * s->mlp_mult;
	size_t N = (size_t)B * T, L = (size_t)s->blocks;
	size_t sets = train ? L : (size_t)G;    /* activation sets */

	memset(a, 0, sizeof(*a));
	*used = 0;
	a->input = next_array(base, used, N);
	a->target = next_array(base, used, G * N);
	a->weight = next_array(base, used, G * N);
	a->x = next_array(base, used, (train ? L + 1 : (size_t)G) * N * d);
	a->xmid = train ? next_array(base, used, L * N * d) : NULL;
	a->gates = next_array(base, used, sets * N * 4 * d);
	a->c = next_array(base, used, sets * N * d);
	a->h = next_array(base, used, sets * N * d);
	a->u = next_array(base, used, sets * N * md);
	a->a = next_array(base, used, sets * N * md);
	a->y = next_array(base, used, G * N * d);
	a->logits = next_array(base, used, G * N * KN_SOMA_VOCAB);
	a->losses = next_array(base, used, G * N);
	a->zero_row = next_array(base, used, d);
	a->dummy_row = next_array(base, used, d);
	if (!train) {
		a->bodies = next_array(base, used, G * nbody);
		return;
	}
	a->dx = next_array(base, used, N * d);
	a->dtmp = next_array(base, used, N * d);
	a->dh = next_array(base, used, N * d);
	a->dcell = next_array(base, used, (size_t)B * d);
	a->dgates = next_array(base, used, N * 4 * d);
	a->du = next_array(base, used, N * md);
}

/* Lays out the work space for this pass, growing it when it is too small.
 * The zero row moves with the layout, so it is cleared every time. */
static int
workspace(kn_soma_model *m, int G, int B, int T, int train, char *err)
{
	size_t bytes;

	layout(&m->a, NULL, &bytes, &m->shape, G, B, T, train, m->nbody);
	if (bytes > m->work_bytes) {
		m->be->free(m->work);
		m->work = m->be->alloc(bytes);
		m->work_bytes = m->work != NULL ? bytes : 0;
		if (m->work == NULL)
			return kn_error(err, KN_ENOMEM, "SOMA work space of "
			    "%zu MiB", bytes >> 20);
	}
	layout(&m->a, m->work, &bytes, &m->shape, G, B, T, train, m->nbody);
	m->be->zero(m->a.zero_row, (size_t)m->shape.width * sizeof(float));
	return KN_OK;
}

int
kn_soma_create(kn_soma_model **out, const kn_soma_shape *s,
    const kn_backend *be, char *err)
{
	kn_soma_model *m;
	int rc;

	*out = NULL;
	if ((rc = kn_soma_check_shape(s, err)) != 0)
		return rc;
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return kn_error(err, KN_ENOMEM, "SOMA model");
	m->shape = *s;
	m->be = be;
	m->nbody = kn_soma_body_params(s);
	m->ndec = kn_soma_decoder_params(s);
	m->body = be->alloc(m->nbody * sizeof(float));
	m->decoder = be->alloc(m->ndec * sizeof(float));
	m->body_grad = be->alloc(m->nbody * sizeof(float));
	m->decoder_grad = be->alloc(m->ndec * sizeof(float));
	if (m->body == NULL || m->decoder == NULL || m->body_grad == NULL ||
	    m->decoder_grad == NULL) {
		kn_soma_free(m);
		return kn_error(err, KN_ENOMEM, "SOMA parameters (%zu floats)",
		    2 * (m->nbody + m->ndec));
	}
	*out = m;
	return KN_OK;
}

void
kn_soma_free(kn_soma_model *m)
{
	if (m == NULL)
		return;
	m->be->free(m->body);
	m->be->free(m->decoder);
	m->be->free(m->body_grad);
	m->be->free(m->decoder_grad);
	m->be->free(m->work);
	free(m);
}

const kn_soma_shape *
kn_soma_get_shape(const kn_soma_model *m)
{
	return &m->shape;
}

const kn_backend *
kn_soma_backend(const kn_soma_model *m)
{
	return m->be;
}

float *
kn_soma_body(kn_soma_model *m)
{
	return m->body;
}

float *
kn_soma_decoder(kn_soma_model *m)
{
	return m->decoder;
}

float *
kn_soma_body_grad(kn_soma_model *m)
{
	return m->body_grad;
}

float *
kn_soma_decoder_grad(kn_soma_model *m)
{
	return m->decoder_grad;
}

void
kn_soma_zero_grad(kn_soma_model *m)
{
	m->be->zero(m->body_grad, m->nbody * sizeof(float));
	m->be->zero(m->decoder_grad, m->ndec * sizeof(float));
}

void
kn_soma_get_body(const kn_soma_model *m, float *host)
{
	m->be->download(host, m->body, m->nbody * sizeof(float));
}

void
kn_soma_get_decoder(const kn_soma_model *m, float *host)
{
	m->be->download(host, m->decoder, m->ndec * sizeof(float));
}

void
kn_soma_get_grads(const kn_soma_model *m, float *host_body,
    float *host_decoder)
{
	if (host_body != NULL)
		m->be->download(host_body, m->body_grad,
		    m->nbody * sizeof(float));
	if (host_decoder != NULL)
		m->be->download(host_decoder, m->decoder_grad,
		    m->ndec * sizeof(float));
}

/* Uploads n host floats to dst unless one is not finite. */
static int
set_params(kn_soma_model *m, float *dst, const float *host, size_t n,
    const char *what, char *err)
{
	long at = kn_first_nonfinite(host, n);

	if (at >= 0)
		return kn_error(err, KN_ENUM, "%s: value %ld of %zu is not "
		    "finite", what, at, n);
	m->be->upload(dst, host, n * sizeof(float));
	return KN_OK;
}

int
kn_soma_set_body(kn_soma_model *m, const float *host, char *err)
{
	return set_params(m, m->body, host, m->nbody, "SOMA body", err);
}

int
kn_soma_set_decoder(kn_soma_model *m, const float *host, char *err)
{
	return set_params(m, m->decoder, host, m->ndec, "SOMA decoder", err);
}

int
kn_soma_init(kn_soma_model *m, uint64_t seed, char *err)
{
	const kn_soma_shape *s = &m->shape;
	int rows[PER_BLOCK], cols[PER_BLOCK], d = s->width, l, i;
	size_t nmax = m->nbody > m->ndec ? m->nbody : m->ndec;
	float *host = calloc(nmax, sizeof(float));
	float std[PER_BLOCK] = { 0 };

	if (host == NULL)
		return kn_error(err, KN_ENOMEM, "SOMA initialisation");
	block_shape(s, rows, cols);
	std[W_IH] = std[W_HH] = std[W_1] = 1.0f / sqrtf((float)d);
	/* the residual stream gains 2 blocks of MLP output; keep its sum
	 * near the embedding's scale */
	std[W_2] = 1.0f / sqrtf(2.0f * s->blocks * s->mlp_mult * d);
	for (l = 0; l < s->blocks; l++) {
		for (i = 0; i < PER_BLOCK; i++)
			if (std[i] > 0.0f)
				kn_rng_fill_normal(host + body_offset(s, l, i),
				    (size_t)rows[i] * cols[i], 0.0f, std[i],
				    seed, kn_rng_stream(SOMA_STREAM,
				    (uint64_t)l, (uint64_t)i, 0));
		/* forget gate bias 1: remember by default */
		for (i = 0; i < d; i++)
			host[body_offset(s, l, B_LSTM) + d + i] = 1.0f;
	}
	m->be->upload(m->body, host, m->nbody * sizeof(float));
	memset(host, 0, m->ndec * sizeof(float));
	kn_rng_fill_normal(host + DEC_E, (size_t)KN_SOMA_VOCAB * d, 0.0f,
	    1.0f / sqrtf((float)d), seed,
	    kn_rng_stream(SOMA_STREAM, STREAM_DECODER, 0, 0));
	m->be->upload(m->decoder, host, m->ndec * sizeof(float));
	free(host);
	kn_soma_zero_grad(m);
	return KN_OK;
}

/* Checks the shape of a batch and the byte range of its tokens. */
static int
check_tokens(const int32_t *tokens, int B, int T, int stride, char *err)
{
	int b, t;

	if (B <= 0 || T <= 0 || (size_t)B * T > MAX_POSITIONS)
		return kn_error(err, KN_EINVAL, "SOMA batch of B %d x T %d "
		    "positions (at most %d in all)", B, T, MAX_POSITIONS);
	for (b = 0; b < B; b++)
		for (t = 0; t < stride; t++) {
			int32_t v = tokens[(size_t)b * stride + t];

			if (v < 0 || v >= KN_SOMA_VOCAB)
				return kn_error(err, KN_EINVAL, "token %d of "
				    "sequence %d is %d, not a byte", t, b,
				    (int)v);
		}
	return KN_OK;
}

/* Uploads the inputs of tokens (B, T + with_targets) and, with targets,
 * the targets repeated for G copies and their unit weights. */
static int
load_tokens(kn_soma_model *m, const int32_t *tokens, int B, int T, int G,
    int with_targets, char *err)
{
	size_t N = (size_t)B * T, stride = (size_t)T + with_targets, n;
	int32_t *host = malloc(G * N * sizeof(int32_t));
	float *ones;
	int b, t, k;

	if (host == NULL)
		return kn_error(err, KN_ENOMEM, "SOMA batch");
	for (b = 0; b < B; b++)
		for (t = 0; t < T; t++)
			host[(size_t)b * T + t] = tokens[b * stride + t];
	m->be->upload(m->a.input, host, N * sizeof(int32_t));
	if (!with_targets) {
		free(host);
		return KN_OK;
	}
	for (k = 0; k < G; k++)
		for (b = 0; b < B; b++)
			for (t = 0; t < T; t++)
				host[k * N + (size_t)b * T + t] =
				    tokens[b * stride + t + 1];
	m->be->upload(m->a.target, host, G * N * sizeof(int32_t));
	ones = (float *)host;   /* int32 and float have the same size */
	for (n = 0; n < G * N; n++)
		ones[n] = 1.0f;
	m->be->upload(m->a.weight, ones, G * N * sizeof(float));
	free(host);
	return KN_OK;
}

/* The forward pass of G copies (bodies at body, stride nbody) up to the
 * logits, on the inputs already loaded.  Returns the final residual
 * stream (G, N, d). */
static float *
forward(kn_soma_model *m, const float *body, int G, int B, int T, int train)
{
	const kn_backend *be = m->be;
	const kn_soma_shape *s = &m->shape;
	struct soma_acts *a = &m->a;
	int d = s->width, md = s->mlp_mult * d, N = B * T, L = s->blocks;
	size_t nd = (size_t)N * d, nb = m->nbody;
	float *xf;
	int l, k;

	/* the embedding once, then one copy of the stream per body */
	be->embed_forward(a->x, a->input, m->decoder + DEC_E, a->zero_row, N,
	    1, d);
	for (k = 1; k < G; k++)
		be->copy(a->x + k * nd, a->x, nd * sizeof(float));
	for (l = 0; l < L; l++) {
		size_t sl = train ? (size_t)l : 0;      /* activation set */
		float *xin = a->x + (train ? l * nd : 0);
		float *xmid = train ? a->xmid + l * nd : xin;
		float *xout = train ? xin + nd : xin;
		float *gates = a->gates + sl * 4 * nd, *c = a->c + sl * nd;
		float *h = a->h + sl * nd;
		float *u = a->u + sl * nd * s->mlp_mult;
		float *act = a->a + sl * nd * s->mlp_mult;

		be->matmul_forward_batched(gates, xin, body +
		    body_offset(s, l, W_IH), body + body_offset(s, l, B_LSTM),
		    N, d, 4 * d, G, nd, nb);
		be->lstm_forward(h, c, gates, body + body_offset(s, l, W_HH),
		    G, B, T, d, nb);
		be->residual_forward(xmid, xin, h, G * nd);
		be->matmul_forward_batched(u, xmid, body +
		    body_offset(s, l, W_1), body + body_offset(s, l, B_1),
		    N, d, md, G, nd, nb);
		be->gelu_forward(act, u, G * nd * s->mlp_mult);
		be->matmul_forward_batched(a->y, act, body +
		    body_offset(s, l, W_2), body + body_offset(s, l, B_2),
		    N, md, d, G, nd * s->mlp_mult, nb);
		be->residual_forward(xout, xmid, a->y, G * nd);
	}
	xf = a->x + (train ? L * nd : 0);
	be->matmul_forward(a->logits, xf, m->decoder + DEC_E,
	    m->decoder + DEC_BIAS(d), G * N, d, KN_SOMA_VOCAB);
	return xf;
}

/* Cross-entropy of the G copies' logits; with grad, dlogits (into the
 * logits) for the mean over the N positions of one copy.  losses[k]:
 * mean of copy k, summed in order in double.  Copy k is body first + k
 * in messages. */
static int
head_loss(kn_soma_model *m, int G, int N, int grad, int first,
    double *losses, char *err)
{
	const kn_backend *be = m->be;
	float *host = malloc((size_t)G * N * sizeof(float));
	int k, i, rc;

	if (host == NULL)
		return kn_error(err, KN_ENOMEM, "SOMA losses");
	be->xent_forward_backward(m->a.losses, grad ? m->a.logits : NULL,
	    m->a.logits, m->a.target, m->a.weight, G * N, KN_SOMA_VOCAB,
	    1.0f / (float)N);
	be->download(host, m->a.losses, (size_t)G * N * sizeof(float));
	if ((rc = be->status(err)) != 0) {
		free(host);
		return rc;
	}
	for (k = 0; k < G; k++) {
		double sum = 0.0;

		for (i = 0; i < N; i++)
			sum += host[(size_t)k * N + i];
		losses[k] = sum / N;
	}
	free(host);
	for (k = 0; k < G; k++)
		if (!isfinite(losses[k]))
			return kn_error(err, KN_ENUM, "SOMA loss of body %d "
			    "is not finite", first + k);
	return KN_OK;
}

/* One body, forward only (the population path with one copy). */
static int
single_loss(kn_soma_model *m, const int32_t *tokens, int B, int T,
    int delta, double *loss, char *err)
{
	int d = m->shape.width, rc;
	float *xf;

	if ((rc = check_tokens(tokens, B, T, T + 1, err)) != 0 ||
	    (rc = workspace(m, 1, B, T, 0, err)) != 0 ||
	    (rc = load_tokens(m, tokens, B, T, 1, 1, err)) != 0)
		return rc;
	xf = forward(m, m->body, 1, B, T, 0);
	if ((rc = head_loss(m, 1, B * T, delta, 0, loss, err)) != 0)
		return rc;
	if (delta)
		m->be->matmul_backward(NULL, m->decoder_grad + DEC_E,
		    m->decoder_grad + DEC_BIAS(d), m->a.logits, xf,
		    m->decoder + DEC_E, B * T, d, KN_SOMA_VOCAB);
	return KN_OK;
}

int
kn_soma_loss(kn_soma_model *m, const int32_t *tokens, int B, int T,
    double *loss, char *err)
{
	return single_loss(m, tokens, B, T, 0, loss, err);
}

int
kn_soma_target_logprobs(kn_soma_model *m, const int32_t *tokens, int B,
    int T, float *logp, char *err)
{
	size_t i, N = (size_t)B * T;
	int rc;

	if ((rc = check_tokens(tokens, B, T, T + 1, err)) != 0 ||
	    (rc = workspace(m, 1, B, T, 0, err)) != 0 ||
	    (rc = load_tokens(m, tokens, B, T, 1, 1, err)) != 0)
		return rc;
	forward(m, m->body, 1, B, T, 0);
	/* the loss op's per-position values at unit weight are -log p */
	m->be->xent_forward_backward(m->a.losses, NULL, m->a.logits,
	    m->a.target, m->a.weight, (int)N, KN_SOMA_VOCAB, 1.0f);
	m->be->download(logp, m->a.losses, N * sizeof(float));
	if ((rc = m->be->status(err)) != 0)
		return rc;
	for (i = 0; i < N; i++)
		logp[i] = -logp[i];
	return KN_OK;
}

int
kn_soma_decoder_delta(kn_soma_model *m, const int32_t *tokens, int B, int T,
    double *loss, char *err)
{
	return single_loss(m, tokens, B, T, 1, loss, err);
}

int
kn_soma_forward_backward(kn_soma_model *m, const int32_t *tokens, int B,
    int T, double *loss, char *err)
{
	const kn_backend *be = m->be;
	const kn_soma_shape *s = &m->shape;
	struct soma_acts *a = &m->a;
	int d = s->width, md = s->mlp_mult * d, N, l, rc;
	size_t nd, nm;
	float *body = m->body, *g = m->body_grad, *xf;

	if ((rc = check_tokens(tokens, B, T, T + 1, err)) != 0 ||
	    (rc = workspace(m, 1, B, T, 1, err)) != 0 ||
	    (rc = load_tokens(m, tokens, B, T, 1, 1, err)) != 0)
		return rc;
	N = B * T;
	nd = (size_t)N * d;
	nm = (size_t)N * md;
	xf = forward(m, body, 1, B, T, 1);
	if ((rc = head_loss(m, 1, N, 1, 0, loss, err)) != 0)
		return rc;
	be->matmul_backward(a->dx, m->decoder_grad + DEC_E,
	    m->decoder_grad + DEC_BIAS(d), a->logits, xf, m->decoder + DEC_E,
	    N, d, KN_SOMA_VOCAB);
	for (l = s->blocks - 1; l >= 0; l--) {
		float *xin = a->x + l * nd, *xmid = a->xmid + l * nd;

		/* x_out = x_mid + W2 gelu(W1 x_mid + b1) + b2 */
		be->matmul_backward(a->du, g + body_offset(s, l, W_2),
		    g + body_offset(s, l, B_2), a->dx, a->a + l * nm,
		    body + body_offset(s, l, W_2), N, md, d);
		be->gelu_backward(a->du, a->u + l * nm, a->du, nm);
		be->matmul_backward(a->dtmp, g + body_offset(s, l, W_1),
		    g + body_offset(s, l, B_1), a->du, xmid,
		    body + body_offset(s, l, W_1), N, d, md);
		be->residual_forward(a->dx, a->dx, a->dtmp, nd);
		/* x_mid = x_in + LSTM(x_in); lstm_backward spends dh */
		be->copy(a->dh, a->dx, nd * sizeof(float));
		be->lstm_backward(a->dgates, g + body_offset(s, l, W_HH), a->dh,
		    a->dcell, a->h + l * nd, a->c + l * nd,
		    a->gates + l * 4 * nd, body + body_offset(s, l, W_HH), B, T,
		    d);
		be->matmul_backward(a->dtmp, g + body_offset(s, l, W_IH),
		    g + body_offset(s, l, B_LSTM), a->dgates, xin,
		    body + body_offset(s, l, W_IH), N, d, 4 * d);
		be->residual_forward(a->dx, a->dx, a->dtmp, nd);
	}
	/* E's input use; the row gradient of the absent positions is
	 * dropped into dummy_row */
	be->embed_backward(m->decoder_grad + DEC_E, a->dummy_row, a->dx,
	    a->input, N, 1, d);
	return be->status(err);
}

static size_t
group_size(const kn_soma_model *m, int K, int B, int T)
{
	struct soma_acts a;
	size_t budget = m->be->kind == KN_BACKEND_CUDA ? GROUP_BYTES_CUDA :
	    GROUP_BYTES_CPU;
	size_t one, g;

	layout(&a, NULL, &one, &m->shape, 1, B, T, 0, m->nbody);
	g = budget / one;
	if (g < 1)
		g = 1;
	if (m->max_group > 0 && g > (size_t)m->max_group)
		g = (size_t)m->max_group;
	if (g > (size_t)K)
		g = (size_t)K;
	/* every op's count G*N*256 stays an int */
	while (g > 1 && g * B * T * KN_SOMA_VOCAB > (size_t)1 << 30)
		g--;
	return g;
}

void
kn_soma_set_max_group(kn_soma_model *m, int copies)
{
	m->max_group = copies > 0 ? copies : 0;
}

int
kn_soma_population_loss(kn_soma_model *m, const float *bodies, int K,
    const int32_t *tokens, int B, int T, float *losses, char *err)
{
	double *lk;
	int k0, k, G, rc;

	if (K <= 0)
		return kn_error(err, KN_EINVAL, "population of %d bodies", K);
	if ((rc = check_tokens(tokens, B, T, T + 1, err)) != 0)
		return rc;
	G = (int)group_size(m, K, B, T);
	lk = malloc((size_t)G * sizeof(double));
	if (lk == NULL)
		return kn_error(err, KN_ENOMEM, "population losses");
	if ((rc = workspace(m, G, B, T, 0, err)) != 0 ||
	    (rc = load_tokens(m, tokens, B, T, G, 1, err)) != 0)
		goto out;
	for (k0 = 0; k0 < K; k0 += G) {
		int g = K - k0 < G ? K - k0 : G;

		m->be->upload(m->a.bodies, bodies + (size_t)k0 * m->nbody,
		    (size_t)g * m->nbody * sizeof(float));
		forward(m, m->a.bodies, g, B, T, 0);
		if ((rc = head_loss(m, g, B * T, 0, k0, lk, err)) != 0)
			goto out;
		for (k = 0; k < g; k++)
			losses[k0 + k] = (float)lk[k];
	}
out:
	free(lk);
	return rc;
}

int
kn_soma_last_logits(kn_soma_model *m, const int32_t *tokens, int B, int T,
    float *logits, char *err)
{
	int b, rc;

	if ((rc = check_tokens(tokens, B, T, T, err)) != 0 ||
	    (rc = workspace(m, 1, B, T, 0, err)) != 0 ||
	    (rc = load_tokens(m, tokens, B, T, 1, 0, err)) != 0)
		return rc;
	forward(m, m->body, 1, B, T, 0);
	for (b = 0; b < B; b++)
		m->be->download(logits + (size_t)b * KN_SOMA_VOCAB,
		    m->a.logits + ((size_t)b * T + T - 1) * KN_SOMA_VOCAB,
		    KN_SOMA_VOCAB * sizeof(float));
	return m->be->status(err);
}
