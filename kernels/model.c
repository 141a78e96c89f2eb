/* The block model: size table, GPT-2 initialisation, forward, backward and
 * the AdamW step, all through the backend table so that the same code runs
 * on the CPU and on the GPU. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/rng.h"

/* Parameter tensors in buffer order.  The decayed ones (matrices and
 * embeddings) come first so that AdamW is two calls: one with weight decay,
 * one without (biases and LayerNorm). */
enum {
	P_WTE,          /* (257, d) */
	P_WPE,          /* (n, d) */
	P_QKVW,         /* (L, 3d, d) */
	P_ATTPROJW,     /* (L, d, d) */
	P_FCW,          /* (L, 4d, d) */
	P_FCPROJW,      /* (L, d, 4d) */
	P_HEADW,        /* (256, d) */
	P_LN1W,         /* (L, d) */
	P_LN1B,         /* (L, d) */
	P_QKVB,         /* (L, 3d) */
	P_ATTPROJB,     /* (L, d) */
	P_LN2W,         /* (L, d) */
	P_LN2B,         /* (L, d) */
	P_FCB,          /* (L, 4d) */
	P_FCPROJB,      /* (L, d) */
	P_LNFW,         /* (d) */
	P_LNFB,         /* (d) */
	P_HEADB,        /* (256) */
	P_COUNT
};
#define P_FIRST_UNDECAYED P_LN1W

static const char *const param_names[P_COUNT] = {
	"wte", "wpe", "qkv_w", "attproj_w", "fc_w", "fcproj_w", "head_w",
	"ln1_w", "ln1_b", "qkv_b", "attproj_b", "ln2_w", "ln2_b", "fc_b",
	"fcproj_b", "lnf_w", "lnf_b", "head_b",
};

/* Activations of one forward pass, per layer where it says (L, ...). */
struct acts {
	int32_t *input, *target;        /* (N) */
	float *weight;                  /* (N) */
	float *encoded;                 /* (N, d) */
	float *ln1, *ln1_mean, *ln1_rstd;       /* (L, N, d), (L, N) x2 */
	float *qkv;                     /* (L, N, 3d) */
	float *atty;                    /* (L, N, d) */
	float *att;                     /* (L, B, h, n, n) */
	float *attproj;                 /* (L, N, d) */
	float *resid2;                  /* (L, N, d) */
	float *ln2, *ln2_mean, *ln2_rstd;       /* (L, N, d), (L, N) x2 */
	float *fch, *fch_gelu;          /* (L, N, 4d) */
	float *fcproj;                  /* (L, N, d) */
	float *resid3;                  /* (L, N, d) */
	float *lnf, *lnf_mean, *lnf_rstd;       /* (N, d), (N) x2 */
	float *logits;                  /* (N, 256) */
	float *losses;                  /* (N) */
	/* backward work space */
	float *dres, *dln, *datty, *dqkv, *dfch, *datt;
	float *u;                       /* (N) uniforms for sampling */
	int32_t *picked;                /* (N) */
};

struct kn_model {
	kn_model_shape shape;
	const kn_backend *be;
	int max_batch;
	kn_tensor tensors[P_COUNT];
	size_t num_params;
	float *params, *grads, *m, *v;
	int t;                          /* AdamW steps taken */
	int inference;                  /* no gradients, optimizer or backward */
	int act_layers;                 /* L, or 1 when layers share buffers */
	struct acts a;
	void *act_block;                /* all activations, one allocation */
	float *host_losses;             /* (N) */
};

int
kn_model_check_shape(const kn_model_shape *s, char *err)
{
	if (s->width <= 0 || s->heads <= 0 || s->layers <= 0 ||
	    s->window <= 0)
		return kn_error(err, KN_EINVAL, "model shape needs positive "
		    "width, heads, layers and window (got %d, %d, %d, %d)",
		    s->width, s->heads, s->layers, s->window);
	if (s->width % s->heads != 0)
		return kn_error(err, KN_EINVAL, "width %d is not a multiple of "
		    "heads %d", s->width, s->heads);
	if (s->width > 16384 || s->layers > 1024 || s->window > 65536)
		return kn_error(err, KN_EINVAL, "model shape too large "
		    "(width %d, layers %d, window %d)", s->width, s->layers,
		    s->window);
	return KN_OK;
}

static void
size_table(const kn_model_shape *s, int64_t shapes[P_COUNT][3],
    int ndims[P_COUNT])
{
	int64_t d = s->width, L = s->layers, n = s->window;
	int64_t tab[P_COUNT][3] = {
		[P_WTE] = { KN_VOCAB_IN, d }, [P_WPE] = { n, d },
		[P_QKVW] = { L, 3 * d, d }, [P_ATTPROJW] = { L, d, d },
		[P_FCW] = { L, 4 * d, d }, [P_FCPROJW] = { L, d, 4 * d },
		[P_HEADW] = { KN_VOCAB_OUT, d },
		[P_LN1W] = { L, d }, [P_LN1B] = { L, d },
		[P_QKVB] = { L, 3 * d }, [P_ATTPROJB] = { L, d },
		[P_LN2W] = { L, d }, [P_LN2B] = { L, d },
		[P_FCB] = { L, 4 * d }, [P_FCPROJB] = { L, d },
		[P_LNFW] = { d }, [P_LNFB] = { d }, [P_HEADB] = { KN_VOCAB_OUT },
	};
	int i, k;

	for (i = 0; i < P_COUNT; i++) {
		for (k = 0; k < 3 && tab[i][k] != 0; k++)
			shapes[i][k] = tab[i][k];
		ndims[i] = k;
	}
}

size_t
kn_model_params_for(const kn_model_shape *s)
{
	int64_t shapes[P_COUNT][3];
	int ndims[P_COUNT], i, k;
	size_t total = 0;

	size_table(s, shapes, ndims);
	for (i = 0; i < P_COUNT; i++) {
		size_t n = 1;

		for (k = 0; k < ndims[i]; k++)
			n *= (size_t)shapes[i][k];
		total += n;
	}
	return total;
}

double
kn_model_flops_per_window(const kn_model_shape *s)
{
	double d = s->width, n = s->window, L = s->layers;
	/* projections 12 d^2 per position per layer, q.k and att.v 2 n d,
	 * the head 256 d; counted as 2 flops per multiply-add */
	double per_pos = L * (12.0 * d * d + 2.0 * n * d) + KN_VOCAB_OUT * d;

	return 2.0 * per_pos * n;
}

/* Carves one allocation into consecutive float arrays (and the int32
 * arrays, which have the same size). */
struct carve {
	char *base;
	size_t used;
};

static void *
carve(struct carve *c, size_t count)
{
	void *p = c->base ? c->base + c->used : NULL;

	c->used += (count * sizeof(float) + 63) & ~(size_t)63;
	return p;
}

/* L is the number of layers whose activations are kept: all of them for
 * training, one for inference, where each layer overwrites the last. */
static void
layout_acts(struct acts *a, struct carve *c, const kn_model_shape *s, int B,
    int inference)
{
	size_t d = (size_t)s->width, L = inference ? 1 : (size_t)s->layers;
	size_t n = (size_t)s->window, N = (size_t)B * n;
	size_t h = (size_t)s->heads, bw = inference ? 0 : 1;

	a->input = carve(c, N);
	a->target = carve(c, N);
	a->weight = carve(c, N);
	a->encoded = carve(c, N * d);
	a->ln1 = carve(c, L * N * d);
	a->ln1_mean = carve(c, L * N);
	a->ln1_rstd = carve(c, L * N);
	a->qkv = carve(c, L * N * 3 * d);
	a->atty = carve(c, L * N * d);
	a->att = carve(c, L * B * h * n * n);
	a->attproj = carve(c, L * N * d);
	a->resid2 = carve(c, L * N * d);
	a->ln2 = carve(c, L * N * d);
	a->ln2_mean = carve(c, L * N);
	a->ln2_rstd = carve(c, L * N);
	a->fch = carve(c, L * N * 4 * d);
	a->fch_gelu = carve(c, L * N * 4 * d);
	a->fcproj = carve(c, L * N * d);
	a->resid3 = carve(c, L * N * d);
	a->lnf = carve(c, N * d);
	a->lnf_mean = carve(c, N);
	a->lnf_rstd = carve(c, N);
	a->logits = carve(c, N * KN_VOCAB_OUT);
	a->losses = carve(c, N);
	a->dres = carve(c, bw * N * d);
	a->dln = carve(c, bw * N * d);
	a->datty = carve(c, bw * N * d);
	a->dqkv = carve(c, bw * N * 3 * d);
	a->dfch = carve(c, bw * N * 4 * d);
	a->datt = carve(c, bw * (size_t)B * h * n * n);
	a->u = carve(c, N);
	a->picked = carve(c, N);
}

static int
model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, int inference, char *err)
{
	kn_model *m;
	int64_t shapes[P_COUNT][3];
	int ndims[P_COUNT], i, k, rc;
	size_t off = 0, np;
	struct carve c = { NULL, 0 };

	*out = NULL;
	if ((rc = kn_model_check_shape(shape, err)) != 0)
		return rc;
	if (max_batch <= 0)
		return kn_error(err, KN_EINVAL, "batch must be positive");
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	m->shape = *shape;
	m->be = be;
	m->max_batch = max_batch;
	m->inference = inference;
	m->act_layers = inference ? 1 : shape->layers;
	size_table(shape, shapes, ndims);
	for (i = 0; i < P_COUNT; i++) {
		kn_tensor *t = &m->tensors[i];

		snprintf(t->name, sizeof(t->name), "%s", param_names[i]);
		t->ndim = ndims[i];
		for (k = 0; k < ndims[i]; k++)
			t->shape[k] = shapes[i][k];
		t->offset = off;
		off += kn_tensor_numel(t);
	}
	m->num_params = np = off;
	m->params = be->alloc(np * sizeof(float));
	if (!inference) {
		m->grads = be->alloc(np * sizeof(float));
		m->m = be->alloc(np * sizeof(float));
		m->v = be->alloc(np * sizeof(float));
	}
	layout_acts(&m->a, &c, shape, max_batch, inference);
	m->act_block = be->alloc(c.used);
	m->host_losses = calloc((size_t)max_batch * shape->window,
	    sizeof(float));
	if (m->params == NULL || (!inference && (m->grads == NULL ||
	    m->m == NULL || m->v == NULL)) || m->act_block == NULL ||
	    m->host_losses == NULL) {
		kn_model_free(m);
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB of "
		    "%s memory for the model", ((inference ? 4.0 : 16.0) * np +
		    c.used) / 1048576.0, be->name);
	}
	c.base = m->act_block;
	c.used = 0;
	layout_acts(&m->a, &c, shape, max_batch, inference);
	for (i = 0; i < P_COUNT; i++)
		m->tensors[i].data = m->params + m->tensors[i].offset;
	*out = m;
	return KN_OK;
}

int
kn_model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, char *err)
{
	return model_create(out, shape, be, max_batch, 0, err);
}

int
kn_model_create_inference(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, char *err)
{
	return model_create(out, shape, be, max_batch, 1, err);
}

size_t
kn_model_inference_bytes(const kn_model_shape *shape, int max_batch)
{
	struct carve c = { NULL, 0 };
	struct acts a;

	layout_acts(&a, &c, shape, max_batch, 1);
	return kn_model_params_for(shape) * sizeof(float) + c.used;
}

void
kn_model_free(kn_model *m)
{
	if (m == NULL)
		return;
	m->be->free(m->params);
	if (m->grads != NULL) {
		m->be->free(m->grads);
		m->be->free(m->m);
		m->be->free(m->v);
	}
	m->be->free(m->act_block);
	free(m->host_losses);
	free(m);
}

const kn_model_shape *kn_model_get_shape(const kn_model *m) { return &m->shape; }
const kn_backend *kn_model_backend(const kn_model *m) { return m->be; }
size_t kn_model_num_params(const kn_model *m) { return m->num_params; }
int kn_model_max_batch(const kn_model *m) { return m->max_batch; }
float *kn_model_params(kn_model *m) { return m->params; }
float *kn_model_grads(kn_model *m) { return m->grads; }
int kn_model_opt_step(const kn_model *m) { return m->t; }

const kn_tensor *
kn_model_tensors(const kn_model *m, int *count)
{
	*count = P_COUNT;
	return m->tensors;
}

void
kn_model_get_params(const kn_model *m, float *host)
{
	m->be->download(host, m->params, m->num_params * sizeof(float));
}

int
kn_model_set_params(kn_model *m, const float *host, char *err)
{
	long bad = kn_first_nonfinite(host, m->num_params);

	if (bad >= 0)
		return kn_error(err, KN_ENUM, "parameter %ld is not finite",
		    bad);
	m->be->upload(m->params, host, m->num_params * sizeof(float));
	return KN_OK;
}

void
kn_model_get_opt_state(const kn_model *m, float *host_m, float *host_v,
    int *t)
{
	if (m->inference) {
		memset(host_m, 0, m->num_params * sizeof(float));
		memset(host_v, 0, m->num_params * sizeof(float));
		*t = 0;
		return;
	}
	m->be->download(host_m, m->m, m->num_params * sizeof(float));
	m->be->download(host_v, m->v, m->num_params * sizeof(float));
	*t = m->t;
}

void
kn_model_set_opt_state(kn_model *m, const float *host_m, const float *host_v,
    int t)
{
	if (m->inference)
		return;
	m->be->upload(m->m, host_m, m->num_params * sizeof(float));
	m->be->upload(m->v, host_v, m->num_params * sizeof(float));
	m->t = t;
}

void
kn_model_init(kn_model *m, uint64_t seed)
{
	float *host = malloc(m->num_params * sizeof(float));
	float proj_std = 0.02f / sqrtf(2.0f * (float)m->shape.layers);
	int i;

	if (host == NULL)
		return;
	for (i = 0; i < P_COUNT; i++) {
		kn_tensor *t = &m->tensors[i];
		float *x = host + t->offset;
		size_t n = kn_tensor_numel(t);

		switch (i) {
		case P_WTE: case P_WPE: case P_QKVW: case P_FCW: case P_HEADW:
			kn_rng_fill_normal(x, n, 0.0f, 0.02f, seed, (uint64_t)i);
			break;
		case P_ATTPROJW: case P_FCPROJW:
			kn_rng_fill_normal(x, n, 0.0f, proj_std, seed,
			    (uint64_t)i);
			break;
		case P_LN1W: case P_LN2W: case P_LNFW:
			for (size_t k = 0; k < n; k++)
				x[k] = 1.0f;
			break;
		default:
			memset(x, 0, n * sizeof(float));
		}
	}
	m->be->upload(m->params, host, m->num_params * sizeof(float));
	free(host);
	if (!m->inference) {
		m->be->zero(m->m, m->num_params * sizeof(float));
		m->be->zero(m->v, m->num_params * sizeof(float));
	}
	m->t = 0;
}

static int
check_batch(const kn_model *m, const int32_t *input, const int32_t *target,
    const float *weight, int B, char *err)
{
	size_t N = (size_t)B * m->shape.window, i;

	if (B <= 0 || B > m->max_batch)
		return kn_error(err, KN_EINVAL, "batch of %d windows; this "
		    "model takes 1 to %d", B, m->max_batch);
	for (i = 0; i < N; i++) {
		if (input[i] < 0 || input[i] >= KN_VOCAB_IN)
			return kn_error(err, KN_EINVAL, "input symbol %d at "
			    "%zu is outside [0, %d)", input[i], i, KN_VOCAB_IN);
		if (target != NULL && (target[i] < 0 ||
		    target[i] >= KN_VOCAB_OUT))
			return kn_error(err, KN_EINVAL, "target %d at %zu is "
			    "not a byte", target[i], i);
		if (weight != NULL && !(weight[i] >= 0.0f &&
		    weight[i] < INFINITY))
			return kn_error(err, KN_EINVAL, "weight at %zu is "
			    "negative or not finite", i);
	}
	return KN_OK;
}

#define LAYER(base, l, per) ((base) + (size_t)(l) * (per))

/* The layers of the forward pass on the batch already uploaded; returns
 * the residual stream after the last layer (N, d). */
static const float *
forward_layers(kn_model *m, int B)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, L = m->shape.layers, n = m->shape.window;
	int h = m->shape.heads, N = B * n, l;
	size_t Nd = (size_t)N * d, attsz = (size_t)B * h * n * n;
	const float *p = m->params;
	const float *x;

	be->embed_forward(a->encoded, a->input, p + m->tensors[P_WTE].offset,
	    p + m->tensors[P_WPE].offset, N, n, d);
	x = a->encoded;
	for (l = 0; l < L; l++) {
		/* activations of layer l live in slot la; weights in layer l */
		int la = l % m->act_layers;
		float *ln1 = LAYER(a->ln1, la, Nd), *qkv = LAYER(a->qkv, la, 3 * Nd);
		float *atty = LAYER(a->atty, la, Nd), *att = LAYER(a->att, la, attsz);
		float *attproj = LAYER(a->attproj, la, Nd);
		float *resid2 = LAYER(a->resid2, la, Nd), *ln2 = LAYER(a->ln2, la, Nd);
		float *fch = LAYER(a->fch, la, 4 * Nd);
		float *fch_gelu = LAYER(a->fch_gelu, la, 4 * Nd);
		float *fcproj = LAYER(a->fcproj, la, Nd);
		float *resid3 = LAYER(a->resid3, la, Nd);
		size_t dd = (size_t)d * d;

		be->layernorm_forward(ln1, LAYER(a->ln1_mean, la, N),
		    LAYER(a->ln1_rstd, la, N), x,
		    p + m->tensors[P_LN1W].offset + (size_t)l * d,
		    p + m->tensors[P_LN1B].offset + (size_t)l * d, N, d);
		be->matmul_forward(qkv, ln1,
		    p + m->tensors[P_QKVW].offset + l * 3 * dd,
		    p + m->tensors[P_QKVB].offset + (size_t)l * 3 * d, N, d,
		    3 * d);
		be->attention_forward(atty, att, qkv, B, n, d, h,
		    m->shape.causal);
		be->matmul_forward(attproj, atty,
		    p + m->tensors[P_ATTPROJW].offset + l * dd,
		    p + m->tensors[P_ATTPROJB].offset + (size_t)l * d, N, d, d);
		be->residual_forward(resid2, x, attproj, Nd);
		be->layernorm_forward(ln2, LAYER(a->ln2_mean, la, N),
		    LAYER(a->ln2_rstd, la, N), resid2,
		    p + m->tensors[P_LN2W].offset + (size_t)l * d,
		    p + m->tensors[P_LN2B].offset + (size_t)l * d, N, d);
		be->matmul_forward(fch, ln2,
		    p + m->tensors[P_FCW].offset + l * 4 * dd,
		    p + m->tensors[P_FCB].offset + (size_t)l * 4 * d, N, d,
		    4 * d);
		be->gelu_forward(fch_gelu, fch, 4 * Nd);
		be->matmul_forward(fcproj, fch_gelu,
		    p + m->tensors[P_FCPROJW].offset + l * 4 * dd,
		    p + m->tensors[P_FCPROJB].offset + (size_t)l * d, N, 4 * d,
		    d);
		be->residual_forward(resid3, resid2, fcproj, Nd);
		x = resid3;
	}
	return x;
}

/* The forward pass up to the logits. */
static void
forward(kn_model *m, int B)
{
	const float *p = m->params, *x = forward_layers(m, B);
	struct acts *a = &m->a;
	int d = m->shape.width, N = B * m->shape.window;

	m->be->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x,
	    p + m->tensors[P_LNFW].offset, p + m->tensors[P_LNFB].offset, N, d);
	m->be->matmul_forward(a->logits, a->lnf, p + m->tensors[P_HEADW].offset,
	    p + m->tensors[P_HEADB].offset, N, d, KN_VOCAB_OUT);
}

static void
backward(kn_model *m, int B)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, L = m->shape.layers, n = m->shape.window;
	int h = m->shape.heads, N = B * n, l;
	size_t Nd = (size_t)N * d, attsz = (size_t)B * h * n * n;
	size_t dd = (size_t)d * d;
	const float *p = m->params;
	float *g = m->grads;
	const float *xL = L > 0 ? LAYER(a->resid3, L - 1, Nd) : a->encoded;

	/* the logits buffer holds dlogits now */
	be->matmul_backward(a->dln, g + m->tensors[P_HEADW].offset,
	    g + m->tensors[P_HEADB].offset, a->logits, a->lnf,
	    p + m->tensors[P_HEADW].offset, N, d, KN_VOCAB_OUT);
	be->zero(a->dres, Nd * sizeof(float));
	be->layernorm_backward(a->dres, g + m->tensors[P_LNFW].offset,
	    g + m->tensors[P_LNFB].offset, a->dln, xL,
	    p + m->tensors[P_LNFW].offset, a->lnf_mean, a->lnf_rstd, N, d);
	for (l = L - 1; l >= 0; l--) {
		const float *x = l > 0 ? LAYER(a->resid3, l - 1, Nd) : a->encoded;
		const float *ln1 = LAYER(a->ln1, l, Nd);
		const float *qkv = LAYER(a->qkv, l, 3 * Nd);
		const float *atty = LAYER(a->atty, l, Nd);
		const float *att = LAYER(a->att, l, attsz);
		const float *resid2 = LAYER(a->resid2, l, Nd);
		const float *ln2 = LAYER(a->ln2, l, Nd);
		const float *fch = LAYER(a->fch, l, 4 * Nd);
		const float *fch_gelu = LAYER(a->fch_gelu, l, 4 * Nd);

		/* MLP branch: dres is the gradient of resid3 */
		be->matmul_backward(a->dfch,
		    g + m->tensors[P_FCPROJW].offset + l * 4 * dd,
		    g + m->tensors[P_FCPROJB].offset + (size_t)l * d, a->dres,
		    fch_gelu, p + m->tensors[P_FCPROJW].offset + l * 4 * dd,
		    N, 4 * d, d);
		be->gelu_backward(a->dfch, fch, a->dfch, 4 * Nd);
		be->matmul_backward(a->dln,
		    g + m->tensors[P_FCW].offset + l * 4 * dd,
		    g + m->tensors[P_FCB].offset + (size_t)l * 4 * d, a->dfch,
		    ln2, p + m->tensors[P_FCW].offset + l * 4 * dd, N, d, 4 * d);
		be->layernorm_backward(a->dres,
		    g + m->tensors[P_LN2W].offset + (size_t)l * d,
		    g + m->tensors[P_LN2B].offset + (size_t)l * d, a->dln,
		    resid2, p + m->tensors[P_LN2W].offset + (size_t)l * d,
		    LAYER(a->ln2_mean, l, N), LAYER(a->ln2_rstd, l, N), N, d);
		/* attention branch: dres is now the gradient of resid2 */
		be->matmul_backward(a->datty,
		    g + m->tensors[P_ATTPROJW].offset + l * dd,
		    g + m->tensors[P_ATTPROJB].offset + (size_t)l * d, a->dres,
		    atty, p + m->tensors[P_ATTPROJW].offset + l * dd, N, d, d);
		be->attention_backward(a->dqkv, a->datt, a->datty, qkv, att, B,
		    n, d, h, m->shape.causal);
		be->matmul_backward(a->dln,
		    g + m->tensors[P_QKVW].offset + l * 3 * dd,
		    g + m->tensors[P_QKVB].offset + (size_t)l * 3 * d, a->dqkv,
		    ln1, p + m->tensors[P_QKVW].offset + l * 3 * dd, N, d, 3 * d);
		be->layernorm_backward(a->dres,
		    g + m->tensors[P_LN1W].offset + (size_t)l * d,
		    g + m->tensors[P_LN1B].offset + (size_t)l * d, a->dln, x,
		    p + m->tensors[P_LN1W].offset + (size_t)l * d,
		    LAYER(a->ln1_mean, l, N), LAYER(a->ln1_rstd, l, N), N, d);
	}
	be->embed_backward(g + m->tensors[P_WTE].offset,
	    g + m->tensors[P_WPE].offset, a->dres, a->input, N, n, d);
}

static void
upload_batch(kn_model *m, const int32_t *input, const int32_t *target,
    const float *weight, int B)
{
	size_t N = (size_t)B * m->shape.window;

	m->be->upload(m->a.input, input, N * sizeof(int32_t));
	if (target != NULL)
		m->be->upload(m->a.target, target, N * sizeof(int32_t));
	if (weight != NULL)
		m->be->upload(m->a.weight, weight, N * sizeof(float));
}

int
kn_model_backward(kn_model *m, const kn_batch *batch, float *loss, char *err)
{
	int B = batch->B, rc;
	size_t N = (size_t)B * m->shape.window, i;
	double sum = 0.0;

	if (m->inference)
		return kn_error(err, KN_EINVAL, "an inference model has no "
		    "gradients: create it with kn_model_create to train");
	rc = check_batch(m, batch->input, batch->target, batch->weight, B, err);
	if (rc != 0)
		return rc;
	upload_batch(m, batch->input, batch->target, batch->weight, B);
	m->be->zero(m->grads, m->num_params * sizeof(float));
	forward(m, B);
	m->be->xent_forward_backward(m->a.losses, m->a.logits, m->a.logits,
	    m->a.target, m->a.weight, (int)N, KN_VOCAB_OUT, 1.0f / (float)B);
	backward(m, B);
	m->be->download(m->host_losses, m->a.losses, N * sizeof(float));
	if ((rc = m->be->status(err)) != 0)
		return rc;
	for (i = 0; i < N; i++)
		sum += m->host_losses[i];
	*loss = (float)(sum / B);
	if (!isfinite(*loss))
		return kn_error(err, KN_ENUM, "loss is not finite");
	return KN_OK;
}

void
kn_model_update(kn_model *m, const kn_adamw *opt, float lr, float *grad_norm)
{
	const kn_backend *be = m->be;
	size_t split = m->tensors[P_FIRST_UNDECAYED].offset;
	float norm, gscale = 1.0f;

	if (m->inference)
		return;
	norm = (float)sqrt(be->sumsq(m->grads, m->num_params));

	if (opt->clip > 0.0f && norm > opt->clip)
		gscale = opt->clip / norm;
	if (grad_norm != NULL)
		*grad_norm = norm;
	m->t++;
	be->adamw_update(m->params, m->grads, m->m, m->v, split, lr,
	    opt->beta1, opt->beta2, opt->eps, opt->weight_decay, m->t, gscale);
	be->adamw_update(m->params + split, m->grads + split, m->m + split,
	    m->v + split, m->num_params - split, lr, opt->beta1, opt->beta2,
	    opt->eps, 0.0f, m->t, gscale);
}

int
kn_model_step(kn_model *m, const kn_batch *batch, const kn_adamw *opt,
    float lr, float *loss, char *err)
{
	int rc = kn_model_backward(m, batch, loss, err);

	if (rc != 0)
		return rc;
	kn_model_update(m, opt, lr, NULL);
	return KN_OK;
}

int
kn_model_eval(kn_model *m, const kn_batch *batch, float *window_loss,
    char *err)
{
	int B = batch->B, b, i, n = m->shape.window, rc;
	size_t N = (size_t)B * n;

	rc = check_batch(m, batch->input, batch->target, batch->weight, B, err);
	if (rc != 0)
		return rc;
	upload_batch(m, batch->input, batch->target, batch->weight, B);
	forward(m, B);
	m->be->xent_forward_backward(m->a.losses, NULL, m->a.logits,
	    m->a.target, m->a.weight, (int)N, KN_VOCAB_OUT, 1.0f);
	m->be->download(m->host_losses, m->a.losses, N * sizeof(float));
	if ((rc = m->be->status(err)) != 0)
		return rc;
	for (b = 0; b < B; b++) {
		double s = 0.0;

		for (i = 0; i < n; i++)
			s += m->host_losses[(size_t)b * n + i];
		window_loss[b] = (float)s;
	}
	return KN_OK;
}

int
kn_model_forward(kn_model *m, const int32_t *input, int B, float *logits,
    char *err)
{
	int rc = check_batch(m, input, NULL, NULL, B, err);

	if (rc != 0)
		return rc;
	upload_batch(m, input, NULL, NULL, B);
	forward(m, B);
	m->be->download(logits, m->a.logits,
	    (size_t)B * m->shape.window * KN_VOCAB_OUT * sizeof(float));
	return m->be->status(err);
}

int
kn_model_predict(kn_model *m, const int32_t *input, int B, const float *u,
    float temp, int32_t *out, char *err)
{
	size_t N = (size_t)B * m->shape.window;
	int rc = check_batch(m, input, NULL, NULL, B, err);

	if (rc != 0)
		return rc;
	upload_batch(m, input, NULL, NULL, B);
	forward(m, B);
	m->be->upload(m->a.u, u, N * sizeof(float));
	m->be->sample(m->a.picked, m->a.logits, m->a.u, (int)N, KN_VOCAB_OUT,
	    temp);
	m->be->download(out, m->a.picked, N * sizeof(int32_t));
	return m->be->status(err);
}

int
kn_model_predict_at(kn_model *m, const int32_t *input, int B,
    const int32_t *rows, int R, const float *u, float temp, int32_t *out,
    char *err)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	const float *p = m->params, *x;
	int d = m->shape.width, N = B * m->shape.window, r, rc;

	if ((rc = check_batch(m, input, NULL, NULL, B, err)) != 0)
		return rc;
	for (r = 0; r < R; r++)
		if (rows[r] < 0 || rows[r] >= N || (r > 0 &&
		    rows[r] <= rows[r - 1]))
			return kn_error(err, KN_EINVAL, "prediction rows must "
			    "increase within the batch's %d positions", N);
	if (R == 0)
		return KN_OK;
	upload_batch(m, input, NULL, NULL, B);
	x = forward_layers(m, B);
	/* the final LayerNorm, head and sampling act on each row alone, so
	 * the rows wanted are gathered first and the rest never computed */
	for (r = 0; r < R; r++)
		be->copy(a->ln1 + (size_t)r * d, x + (size_t)rows[r] * d,
		    (size_t)d * sizeof(float));
	be->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->ln1,
	    p + m->tensors[P_LNFW].offset, p + m->tensors[P_LNFB].offset, R, d);
	be->matmul_forward(a->logits, a->lnf, p + m->tensors[P_HEADW].offset,
	    p + m->tensors[P_HEADB].offset, R, d, KN_VOCAB_OUT);
	be->upload(a->u, u, (size_t)R * sizeof(float));
	be->sample(a->picked, a->logits, a->u, R, KN_VOCAB_OUT, temp);
	be->download(out, a->picked, (size_t)R * sizeof(int32_t));
	return be->status(err);
}

/* Decoding with KV caches (the causal LM at inference): a cache holds k
 * and v of every layer for one sequence, in backend memory. */
struct kn_kv {
	const kn_backend *be;
	int layers, window, width;
	float *buf;                     /* (L, 2, n, d): k then v per layer */
	int len;                        /* positions cached */
};

size_t
kn_kv_bytes(const kn_model_shape *s)
{
	return (size_t)2 * s->layers * s->window * s->width * sizeof(float);
}

int
kn_kv_create(kn_kv **out, const kn_model *m, char *err)
{
	kn_kv *kv = calloc(1, sizeof(*kv));

	*out = NULL;
	if (kv == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	kv->be = m->be;
	kv->layers = m->shape.layers;
	kv->window = m->shape.window;
	kv->width = m->shape.width;
	if ((kv->buf = m->be->alloc(kn_kv_bytes(&m->shape))) == NULL) {
		free(kv);
		return kn_error(err, KN_ENOMEM, "cannot allocate a KV cache of "
		    "%.1f MiB", kn_kv_bytes(&m->shape) / 1048576.0);
	}
	*out = kv;
	return KN_OK;
}

void
kn_kv_free(kn_kv *kv)
{
	if (kv == NULL)
		return;
	kv->be->free(kv->buf);
	free(kv);
}

int
kn_kv_len(const kn_kv *kv)
{
	return kv->len;
}

static int
check_decode(const kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, int *rows, char *err)
{
	int r, i, total = 0;

	if (!m->shape.causal)
		return kn_error(err, KN_EINVAL, "decoding needs a causal model");
	if (R <= 0)
		return kn_error(err, KN_EINVAL, "nothing to decode");
	for (r = 0; r < R; r++) {
		const kn_decode_seq *q = &seqs[r];

		if (q->kv == NULL || q->kv->layers != m->shape.layers ||
		    q->kv->width != m->shape.width ||
		    q->kv->window != m->shape.window)
			return kn_error(err, KN_EINVAL, "sequence %d: the cache "
			    "is not of this model", r);
		if (q->count <= 0 || q->pos0 != q->kv->len ||
		    q->pos0 + q->count > m->shape.window)
			return kn_error(err, KN_EINVAL, "sequence %d: positions "
			    "%d..%d do not follow the %d cached in a window of %d",
			    r, q->pos0, q->pos0 + q->count - 1, q->kv->len,
			    m->shape.window);
		total += q->count;
	}
	if (total > m->max_batch * m->shape.window)
		return kn_error(err, KN_EINVAL, "%d positions in one pass; "
		    "this model takes %d", total,
		    m->max_batch * m->shape.window);
	for (i = 0; sym != NULL && i < total; i++)
		if (sym[i] < 0 || sym[i] >= KN_VOCAB_OUT)
			return kn_error(err, KN_EINVAL, "decoding symbol %d is "
			    "not a byte", sym[i]);
	*rows = total;
	return KN_OK;
}

/* The layers of forward(), on rows that belong to several sequences: the
 * per-row ops run once over all rows (one batched GEMM per weight), the
 * attention once per sequence against its cache. */
int
kn_model_decode(kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, float *hidden, const float *u, float temp,
    int32_t *picked, char *err)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, L = m->shape.layers, h = m->shape.heads;
	int N = 0, l, r, rc, off;
	const float *p = m->params;
	const float *x;
	size_t Nd, dd = (size_t)d * d;

	if ((rc = check_decode(m, seqs, R, sym, &N, err)) != 0)
		return rc;
	Nd = (size_t)N * d;
	if (sym != NULL) {
		be->upload(a->input, sym, (size_t)N * sizeof(int32_t));
		for (r = 0, off = 0; r < R; off += seqs[r].count, r++)
			be->embed_forward(a->encoded + (size_t)off * d,
			    a->input + off, p + m->tensors[P_WTE].offset,
			    p + m->tensors[P_WPE].offset +
			    (size_t)seqs[r].pos0 * d, seqs[r].count,
			    seqs[r].count, d);
	} else
		be->upload(a->encoded, hidden, Nd * sizeof(float));
	x = a->encoded;
	for (l = 0; l < L; l++) {
		int la = l % m->act_layers;
		float *ln1 = LAYER(a->ln1, la, Nd), *qkv = LAYER(a->qkv, la, 3 * Nd);
		float *atty = LAYER(a->atty, la, Nd);
		float *attproj = LAYER(a->attproj, la, Nd);
		float *resid2 = LAYER(a->resid2, la, Nd);
		float *ln2 = LAYER(a->ln2, la, Nd);
		float *fch = LAYER(a->fch, la, 4 * Nd);
		float *fch_gelu = LAYER(a->fch_gelu, la, 4 * Nd);
		float *fcproj = LAYER(a->fcproj, la, Nd);
		float *resid3 = LAYER(a->resid3, la, Nd);

		be->layernorm_forward(ln1, LAYER(a->ln1_mean, la, N),
		    LAYER(a->ln1_rstd, la, N), x,
		    p + m->tensors[P_LN1W].offset + (size_t)l * d,
		    p + m->tensors[P_LN1B].offset + (size_t)l * d, N, d);
		be->matmul_forward(qkv, ln1,
		    p + m->tensors[P_QKVW].offset + l * 3 * dd,
		    p + m->tensors[P_QKVB].offset + (size_t)l * 3 * d, N, d,
		    3 * d);
		for (r = 0, off = 0; r < R; off += seqs[r].count, r++) {
			float *k = seqs[r].kv->buf + (size_t)l * 2 *
			    m->shape.window * d;

			be->attention_decode(atty + (size_t)off * d, k,
			    k + (size_t)m->shape.window * d, a->att,
			    qkv + (size_t)off * 3 * d, seqs[r].pos0,
			    seqs[r].count, d, h);
		}
		be->matmul_forward(attproj, atty,
		    p + m->tensors[P_ATTPROJW].offset + l * dd,
		    p + m->tensors[P_ATTPROJB].offset + (size_t)l * d, N, d, d);
		be->residual_forward(resid2, x, attproj, Nd);
		be->layernorm_forward(ln2, LAYER(a->ln2_mean, la, N),
		    LAYER(a->ln2_rstd, la, N), resid2,
		    p + m->tensors[P_LN2W].offset + (size_t)l * d,
		    p + m->tensors[P_LN2B].offset + (size_t)l * d, N, d);
		be->matmul_forward(fch, ln2,
		    p + m->tensors[P_FCW].offset + l * 4 * dd,
		    p + m->tensors[P_FCB].offset + (size_t)l * 4 * d, N, d,
		    4 * d);
		be->gelu_forward(fch_gelu, fch, 4 * Nd);
		be->matmul_forward(fcproj, fch_gelu,
		    p + m->tensors[P_FCPROJW].offset + l * 4 * dd,
		    p + m->tensors[P_FCPROJB].offset + (size_t)l * d, N, 4 * d,
		    d);
		be->residual_forward(resid3, resid2, fcproj, Nd);
		x = resid3;
	}
	for (r = 0; r < R; r++)
		seqs[r].kv->len += seqs[r].count;
	if (picked == NULL) {
		be->download(hidden, x, Nd * sizeof(float));
		return be->status(err);
	}
	/* the head only where a byte is picked: each sequence's last row */
	for (r = 0, off = 0; r < R; off += seqs[r].count, r++)
		be->copy(a->lnf + (size_t)r * d, x + (size_t)(off +
		    seqs[r].count - 1) * d, (size_t)d * sizeof(float));
	/* ln1's first slot is free once the layers are done */
	be->layernorm_forward(a->ln1, a->lnf_mean, a->lnf_rstd, a->lnf,
	    p + m->tensors[P_LNFW].offset, p + m->tensors[P_LNFB].offset, R, d);
	be->matmul_forward(a->logits, a->ln1,
	    p + m->tensors[P_HEADW].offset, p + m->tensors[P_HEADB].offset, R,
	    d, KN_VOCAB_OUT);
	be->upload(a->u, u, (size_t)R * sizeof(float));
	be->sample(a->picked, a->logits, a->u, R, KN_VOCAB_OUT, temp);
	be->download(picked, a->picked, (size_t)R * sizeof(int32_t));
	return be->status(err);
}

int
kn_model_copy_layers(kn_model *dst, const kn_model *src, int first,
    char *err)
{
	const kn_model_shape *ds = &dst->shape, *ss = &src->shape;
	float *from, *to;
	int i;

	if (ds->width != ss->width || ds->heads != ss->heads ||
	    ds->window != ss->window || ds->causal != ss->causal ||
	    first < 0 || first + ds->layers > ss->layers)
		return kn_error(err, KN_EINVAL, "layers %d..%d of a %d-layer "
		    "model do not fit a %d-layer slice of the same width",
		    first, first + ds->layers - 1, ss->layers, ds->layers);
	from = malloc(src->num_params * sizeof(float));
	to = malloc(dst->num_params * sizeof(float));
	if (from == NULL || to == NULL) {
		free(from);
		free(to);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	kn_model_get_params(src, from);
	for (i = 0; i < P_COUNT; i++) {
		const kn_tensor *st = &src->tensors[i], *dt = &dst->tensors[i];
		/* per-layer tensors are (L, ...): a slice of whole layers */
		int per_layer = i >= P_QKVW && i <= P_FCPROJB && i != P_HEADW;
		size_t n = kn_tensor_numel(dt);
		size_t skip = per_layer ? n / (size_t)ds->layers * first : 0;

		memcpy(to + dt->offset, from + st->offset + skip,
		    n * sizeof(float));
	}
	dst->be->upload(dst->params, to, dst->num_params * sizeof(float));
	free(from);
	free(to);
	return KN_OK;
}
