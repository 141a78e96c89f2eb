/* The block model: size table, creation, parameters, GPT-2
 * initialisation, forward, backward and the AdamW step, all through the
 * backend table so that the same code runs on the CPU and on the GPU.
 * What only serving needs is in model_infer.c. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/model_private.h"
#include "kernels/rng.h"

static const char *const param_names[P_COUNT] = {
	"wte", "wpe", "qkv_w", "attproj_w", "fc_w", "fcproj_w", "head_w",
	"ln1_w", "ln1_b", "qkv_b", "attproj_b", "ln2_w", "ln2_b", "fc_b",
	"fcproj_b", "lnf_w", "lnf_b", "head_b",
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
	if (s->pos_block < 0 || s->pos_block > s->window ||
	    (s->pos_block > 0 && s->window % s->pos_block != 0))
		return kn_error(err, KN_EINVAL, "position block %d does not "
		    "divide the window of %d", s->pos_block, s->window);
	if (s->causal && s->pos_block != 0 && s->pos_block != s->window)
		return kn_error(err, KN_EINVAL, "a causal model has no "
		    "position blocks");
	return KN_OK;
}

/* Position blocks change the model only below the window: one block of
 * the whole window is today's bidirectional model, to the bit. */
static int
has_pos_blocks(const kn_model_shape *s)
{
	return !s->causal && s->pos_block > 1 && s->pos_block < s->window;
}

int
kn_model_next_byte(const kn_model_shape *s)
{
	return !s->causal && s->pos_block == 1 && s->window > 1;
}

int
kn_model_row_len(const kn_model_shape *s)
{
	return has_pos_blocks(s) ? 2 * s->window : s->window;
}

uint64_t
kn_model_passes(const kn_model *m)
{
	return m->passes;
}

void
kn__model_pass(kn_model *m, int train)
{
	const kn_model_shape *s = &m->shape;

	if (m->inference)
		kn__model_repack(m);
	m->passes++;
	m->T = train ? kn_model_row_len(s) : s->window;
	if (s->causal || kn_model_next_byte(s))
		m->mask = KN_ATT_CAUSAL;
	else if (!has_pos_blocks(s))
		m->mask = KN_ATT_FULL;
	else
		m->mask = train ? -s->pos_block : s->pos_block;
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

int
kn_model_table(const kn_model_shape *s, kn_tensor *out, int max)
{
	int64_t shapes[P_COUNT][3];
	int ndims[P_COUNT], i, k;
	size_t off = 0;

	if (max < P_COUNT)
		return -1;
	size_table(s, shapes, ndims);
	for (i = 0; i < P_COUNT; i++) {
		kn_tensor *t = &out[i];

		memset(t, 0, sizeof(*t));
		snprintf(t->name, sizeof(t->name), "%s", param_names[i]);
		t->ndim = ndims[i];
		for (k = 0; k < ndims[i]; k++)
			t->shape[k] = shapes[i][k];
		t->offset = off;
		off += kn_tensor_numel(t);
	}
	return P_COUNT;
}

_Static_assert(P_COUNT <= KN_MODEL_TENSORS, "KN_MODEL_TENSORS holds the "
    "table");

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
	size_t n = (size_t)kn_model_row_len(s), N = (size_t)B * n;
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

size_t
kn__model_acts_bytes(const kn_model_shape *s, int B, int inference)
{
	struct carve c = { NULL, 0 };
	struct acts a;

	layout_acts(&a, &c, s, B, inference);
	return c.used;
}

int
kn__model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, int inference, kn_storage storage,
    char *err)
{
	kn_model *m;
	int i, rc;
	size_t off, np, nm = 0, stage = 0, bytes;
	struct carve c = { NULL, 0 };

	*out = NULL;
	if ((rc = kn_model_check_shape(shape, err)) != 0)
		return rc;
	if (max_batch <= 0)
		return kn_error(err, KN_EINVAL, "batch must be positive");
	if (storage == KN_STORE_F16 && !inference)
		return kn_error(err, KN_EINVAL, "fp16 storage is for serving: "
		    "training keeps fp32 weights");
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	m->shape = *shape;
	m->be = be;
	m->max_batch = max_batch;
	m->inference = inference;
	m->storage = storage;
	m->act_layers = inference ? 1 : shape->layers;
	kn__model_pass(m, 0);
	/* the tensors lie one after another: the last one ends the buffer */
	(void)kn_model_table(shape, m->tensors, P_COUNT);
	off = m->tensors[P_COUNT - 1].offset +
	    kn_tensor_numel(&m->tensors[P_COUNT - 1]);
	m->num_params = np = off;
	/* the matrices in fp16, the rest (embeddings, head, vectors) in
	 * fp32 at the same offsets less the matrices' room */
	if (storage == KN_STORE_F16)
		nm = kn__model_alloc_f16(m, &stage);
	m->params = be->alloc((np - nm) * sizeof(float));
	if (!inference) {
		m->grads = be->alloc(np * sizeof(float));
		m->m = be->alloc(np * sizeof(float));
		m->v = be->alloc(np * sizeof(float));
	}
	layout_acts(&m->a, &c, shape, max_batch, inference);
	m->act_block = be->alloc(c.used);
	m->host_losses = calloc((size_t)max_batch * kn_model_row_len(shape),
	    sizeof(float));
	bytes = (np - nm) * 4 + nm * 2 + stage + c.used +
	    (inference ? 0 : 12 * np);
	if (m->params == NULL || (!inference && (m->grads == NULL ||
	    m->m == NULL || m->v == NULL)) || m->act_block == NULL ||
	    m->host_losses == NULL || (nm > 0 && (m->params16 == NULL ||
	    m->stage == NULL))) {
		kn_model_free(m);
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB of "
		    "%s memory for the model", bytes / 1048576.0, be->name);
	}
	c.base = m->act_block;
	c.used = 0;
	layout_acts(&m->a, &c, shape, max_batch, inference);
	for (i = 0; i < P_COUNT; i++) {
		size_t o = m->tensors[i].offset;

		if (nm > 0 && KN_IS_MATRIX(i))
			m->w16[i] = m->params16 + (o - m->tensors[P_QKVW].offset);
		else
			m->w[i] = m->params + (nm > 0 && i > P_FCPROJW ? o - nm : o);
		m->tensors[i].data = m->w[i];
	}
	if (inference && nm == 0)
		kn__model_alloc_packed(m);
	*out = m;
	return KN_OK;
}

int
kn_model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, char *err)
{
	/* the first model of the process fixes the backend's kernels for
	 * its shapes (SM_GEMM or auto); a caller with a setting of its own
	 * planned before */
	int rc = kn_backend_plan(be, shape->width, shape->heads,
	    shape->window, max_batch, NULL, err);

	if (rc != 0)
		return rc;
	return kn__model_create(out, shape, be, max_batch, 0, KN_STORE_F32,
	    err);
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
	if (m->params16 != NULL) {
		m->be->free(m->params16);
		m->be->free(m->stage);
	}
	kn__model_free_infer(m);
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
	if (m->params16 == NULL)
		m->be->download(host, m->params, m->num_params * sizeof(float));
	else
		kn__model_get_params_f16(m, host);
}

int
kn_model_set_params(kn_model *m, const float *host, char *err)
{
	long bad = kn_first_nonfinite(host, m->num_params);

	if (bad >= 0)
		return kn_error(err, KN_ENUM, "parameter %ld is not finite",
		    bad);
	if (m->params16 != NULL)
		return kn__model_set_params_f16(m, host, err);
	m->be->upload(m->params, host, m->num_params * sizeof(float));
	m->params_gen++;
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
	float *piece = malloc(KN_MODEL_PIECE * sizeof(float));
	uint16_t *half = malloc(KN_MODEL_PIECE * sizeof(uint16_t));
	float proj_std = 0.02f / sqrtf(2.0f * (float)m->shape.layers);
	char err[KN_ERR_LEN];
	size_t k, n, len, j;
	int i;

	if (piece == NULL || half == NULL) {
		free(piece);
		free(half);
		return;
	}
	/* tensor by tensor, a piece at a time: element k of tensor i is
	 * drawn at index k of stream i whatever the piece */
	for (i = 0; i < P_COUNT; i++) {
		n = kn_tensor_numel(&m->tensors[i]);
		for (k = 0; k < n; k += KN_MODEL_PIECE) {
			len = n - k < KN_MODEL_PIECE ? n - k : KN_MODEL_PIECE;
			switch (i) {
			case P_WTE: case P_WPE: case P_QKVW: case P_FCW:
			case P_HEADW:
				kn_rng_fill_normal_from(piece, len, 0.0f, 0.02f,
				    seed, (uint64_t)i, k);
				break;
			case P_ATTPROJW: case P_FCPROJW:
				kn_rng_fill_normal_from(piece, len, 0.0f, proj_std,
				    seed, (uint64_t)i, k);
				break;
			case P_LN1W: case P_LN2W: case P_LNFW:
				for (j = 0; j < len; j++)
					piece[j] = 1.0f;
				break;
			default:
				memset(piece, 0, len * sizeof(float));
			}
			/* GPT-2 draws are far inside the fp16 range */
			kn__model_put_values(m, i, k, piece, len, half, err);
		}
	}
	free(piece);
	free(half);
	if (!m->inference) {
		m->be->zero(m->m, m->num_params * sizeof(float));
		m->be->zero(m->v, m->num_params * sizeof(float));
	}
	m->t = 0;
}

int
kn__model_check_batch(const kn_model *m, const int32_t *input,
    const int32_t *target, const float *weight, int B, char *err)
{
	size_t N = (size_t)B * m->T, i;

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

/* out = inp . W^T + bias for layer l's matrix i, from either storage. */
static void
linear(kn_model *m, int i, int l, float *out, const float *inp,
    const float *bias, int N, int C, int OC)
{
	size_t per = (size_t)OC * C;

	if (m->w16[i] != NULL)
		m->be->matmul_forward_f16(out, inp, m->w16[i] + l * per, bias,
		    m->stage, N, C, OC);
	else if (m->packed[i] != NULL)
		m->be->matmul_forward_packed(out, inp, m->w[i] + l * per,
		    m->packed[i] + l * m->packed_per[i], bias, N, C, OC);
	else
		m->be->matmul_forward(out, inp, m->w[i] + l * per, bias, N, C,
		    OC);
}

const float *
kn__model_layer_attn(kn_model *m, int l, const float *x, int N,
    const struct kn__attn *at)
{
	return kn__model_attend(m, l, kn__model_layer_qkv(m, l, x, N), N, at);
}

const float *
kn__model_layer_qkv(kn_model *m, int l, const float *x, int N)
{
	struct acts *a = &m->a;
	int d = m->shape.width;
	/* activations of layer l live in slot la */
	int la = l % m->act_layers;
	size_t Nd = (size_t)N * d;
	float *ln1 = LAYER(a->ln1, la, Nd), *qkv = LAYER(a->qkv, la, 3 * Nd);

	m->be->layernorm_forward(ln1, LAYER(a->ln1_mean, la, N),
	    LAYER(a->ln1_rstd, la, N), x, m->w[P_LN1W] + (size_t)l * d,
	    m->w[P_LN1B] + (size_t)l * d, N, d);
	linear(m, P_QKVW, l, qkv, ln1, m->w[P_QKVB] + (size_t)l * 3 * d, N, d,
	    3 * d);
	return qkv;
}

const float *
kn__model_attend(kn_model *m, int l, const float *qkv, int N,
    const struct kn__attn *at)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, n = m->shape.window, h = m->shape.heads, r, off;
	int la = l % m->act_layers, T = m->T;
	size_t Nd = (size_t)N * d, attsz = (size_t)at->B * h * T * T;
	float *atty = LAYER(a->atty, la, Nd), *att = LAYER(a->att, la, attsz);

	if (at->seqs == NULL)
		be->attention_forward(atty, att, qkv, at->B, T, d, h, m->mask);
	else if (at->block > 0)
		/* the layer's MLP rows are free until its MLP: work space */
		kn__blockdecode_attention(m, l, atty, qkv,
		    LAYER(a->fch, la, 4 * Nd), at);
	else
		/* each sequence against its own cache; a->att is work space */
		for (r = 0, off = 0; r < at->R; off += at->seqs[r].count, r++) {
			float *k = kn__kv_layer(at->seqs[r].kv, l);

			be->attention_decode(atty + (size_t)off * d, k,
			    k + (size_t)n * d, a->att, qkv + (size_t)off * 3 * d,
			    at->seqs[r].pos0, at->seqs[r].count, d, h);
		}
	return atty;
}

void
kn__model_linear(kn_model *m, int i, int l, float *out, const float *inp,
    const float *bias, int N, int C, int OC)
{
	linear(m, i, l, out, inp, bias, N, C, OC);
}

const float *
kn__model_layer_mlp(kn_model *m, int l, const float *x, const float *atty,
    int N)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, la = l % m->act_layers;
	size_t Nd = (size_t)N * d;
	float *attproj = LAYER(a->attproj, la, Nd);
	float *resid2 = LAYER(a->resid2, la, Nd), *ln2 = LAYER(a->ln2, la, Nd);
	float *fch = LAYER(a->fch, la, 4 * Nd);
	float *fch_gelu = LAYER(a->fch_gelu, la, 4 * Nd);
	float *fcproj = LAYER(a->fcproj, la, Nd);
	float *resid3 = LAYER(a->resid3, la, Nd);

	linear(m, P_ATTPROJW, l, attproj, atty, m->w[P_ATTPROJB] +
	    (size_t)l * d, N, d, d);
	be->residual_forward(resid2, x, attproj, Nd);
	be->layernorm_forward(ln2, LAYER(a->ln2_mean, la, N),
	    LAYER(a->ln2_rstd, la, N), resid2, m->w[P_LN2W] + (size_t)l * d,
	    m->w[P_LN2B] + (size_t)l * d, N, d);
	linear(m, P_FCW, l, fch, ln2, m->w[P_FCB] + (size_t)l * 4 * d, N, d,
	    4 * d);
	be->gelu_forward(fch_gelu, fch, 4 * Nd);
	linear(m, P_FCPROJW, l, fcproj, fch_gelu, m->w[P_FCPROJB] +
	    (size_t)l * d, N, 4 * d, d);
	be->residual_forward(resid3, resid2, fcproj, Nd);
	return resid3;
}

const float *
kn__model_layer(kn_model *m, int l, const float *x, int N,
    const struct kn__attn *at)
{
	return kn__model_layer_mlp(m, l, x, kn__model_layer_attn(m, l, x, N,
	    at), N);
}

const float *
kn__model_forward_layers(kn_model *m, int B)
{
	struct kn__attn at = { B, NULL, 0, 0 };
	int n = m->shape.window, N = B * m->T, l;
	const float *x;

	m->be->embed_forward(m->a.encoded, m->a.input, m->w[P_WTE],
	    m->w[P_WPE], N, n, m->shape.width);
	x = m->a.encoded;
	for (l = 0; l < m->shape.layers; l++)
		x = kn__model_layer(m, l, x, N, &at);
	return x;
}

void
kn__model_head(kn_model *m, const float *x, int N)
{
	struct acts *a = &m->a;
	int d = m->shape.width;

	m->be->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x,
	    m->w[P_LNFW], m->w[P_LNFB], N, d);
	linear(m, P_HEADW, 0, a->logits, a->lnf, m->w[P_HEADB], N, d,
	    KN_VOCAB_OUT);
}

void
kn__model_forward(kn_model *m, int B)
{
	kn__model_head(m, kn__model_forward_layers(m, B), B * m->T);
}

static void
backward(kn_model *m, int B)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, L = m->shape.layers, n = m->shape.window;
	int h = m->shape.heads, T = m->T, N = B * T, l;
	size_t Nd = (size_t)N * d, attsz = (size_t)B * h * T * T;
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
		    T, d, h, m->mask);
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

void
kn__model_upload_batch(kn_model *m, const int32_t *input,
    const int32_t *target, const float *weight, int B)
{
	size_t N = (size_t)B * m->T;

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
	size_t N, i;
	double sum = 0.0;

	if (m->inference)
		return kn_error(err, KN_EINVAL, "an inference model has no "
		    "gradients: create it with kn_model_create to train");
	kn__model_pass(m, 1);
	N = (size_t)B * m->T;
	rc = kn__model_check_batch(m, batch->input, batch->target,
	    batch->weight, B, err);
	if (rc != 0)
		return rc;
	kn__model_upload_batch(m, batch->input, batch->target,
	    batch->weight, B);
	m->be->zero(m->grads, m->num_params * sizeof(float));
	kn__model_forward(m, B);
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
	int B = batch->B, b, i, n, rc;
	size_t N;

	kn__model_pass(m, 1);
	n = m->T;
	N = (size_t)B * n;
	rc = kn__model_check_batch(m, batch->input, batch->target,
	    batch->weight, B, err);
	if (rc != 0)
		return rc;
	kn__model_upload_batch(m, batch->input, batch->target,
	    batch->weight, B);
	kn__model_forward(m, B);
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
	int rc;

	kn__model_pass(m, 0);
	if ((rc = kn__model_check_batch(m, input, NULL, NULL, B, err)) != 0)
		return rc;
	kn__model_upload_batch(m, input, NULL, NULL, B);
	kn__model_forward(m, B);
	m->be->download(logits, m->a.logits,
	    (size_t)B * m->shape.window * KN_VOCAB_OUT * sizeof(float));
	return m->be->status(err);
}
