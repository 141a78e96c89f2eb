/* Serving the block model: inference-only models (no gradients, one
 * layer's activations, weights in fp32 or fp16 storage), predictions at
 * every position or some only, decoding the causal LM with KV caches
 * (batched over sequences), a host's slice of a model split by layers.
 * The size table, the layers and training are model.c's. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/model_private.h"

int
kn_model_create_inference(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, kn_storage storage, char *err)
{
	return kn__model_create(out, shape, be, max_batch, 1, storage, err);
}

size_t
kn_model_inference_bytes(const kn_model_shape *shape, int max_batch,
    kn_storage storage)
{
	size_t np = kn_model_params_for(shape), d = (size_t)shape->width;
	size_t nm = storage == KN_STORE_F16 ? 12 * d * d * shape->layers : 0;

	return (np - nm) * sizeof(float) + nm * sizeof(uint16_t) +
	    kn__model_acts_bytes(shape, max_batch, 1);
}

/* Elements of the four layer matrices, which fp16 storage holds. */
static size_t
matrix_elems(const kn_model *m)
{
	return m->tensors[P_HEADW].offset - m->tensors[P_QKVW].offset;
}

size_t
kn__model_alloc_f16(kn_model *m, size_t *stage)
{
	const kn_backend *be = m->be;
	size_t nm = matrix_elems(m);

	*stage = be->matmul_f16_scratch((int)((size_t)m->max_batch *
	    kn_model_row_len(&m->shape)), 4 * m->shape.width,
	    4 * m->shape.width);
	m->params16 = be->alloc(nm * sizeof(uint16_t));
	m->stage = be->alloc(*stage);
	return nm;
}

void
kn__model_get_params_f16(const kn_model *m, float *host)
{
	uint16_t *half;
	size_t k, n;
	int i;

	if ((half = malloc(KN_MODEL_PIECE * sizeof(uint16_t))) == NULL)
		return;
	for (i = 0; i < P_COUNT; i++) {
		const kn_tensor *t = &m->tensors[i];

		n = kn_tensor_numel(t);
		if (m->w16[i] == NULL) {
			m->be->download(host + t->offset, m->w[i], n * 4);
			continue;
		}
		for (k = 0; k < n; k += KN_MODEL_PIECE) {
			size_t len = n - k < KN_MODEL_PIECE ? n - k :
			    KN_MODEL_PIECE;

			m->be->download(half, m->w16[i] + k, len * 2);
			kn_f16_to_f32(host + t->offset + k, half, len);
		}
	}
	free(half);
}

int
kn__model_put_values(kn_model *m, int i, size_t first, const float *host,
    size_t len, uint16_t *half, char *err)
{
	if (m->w16[i] == NULL) {
		m->be->upload(m->w[i] + first, host, len * sizeof(float));
		m->params_gen++;
		return KN_OK;
	}
	m->params_gen++;
	kn_f32_to_f16(half, host, len);
	if (kn_f16_first_nonfinite(half, len) >= 0)
		return kn_error(err, KN_ENUM, "%s: a value is beyond the fp16 "
		    "range", m->tensors[i].name);
	m->be->upload(m->w16[i] + first, half, len * sizeof(uint16_t));
	return KN_OK;
}

int
kn__model_set_params_f16(kn_model *m, const float *host, char *err)
{
	uint16_t *half;
	size_t k, n;
	int i, rc = KN_OK;

	if ((half = malloc(KN_MODEL_PIECE * sizeof(uint16_t))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < P_COUNT && rc == 0; i++) {
		n = kn_tensor_numel(&m->tensors[i]);
		for (k = 0; k < n && rc == 0; k += KN_MODEL_PIECE)
			rc = kn__model_put_values(m, i, k,
			    host + m->tensors[i].offset + k,
			    n - k < KN_MODEL_PIECE ? n - k : KN_MODEL_PIECE, half,
			    err);
	}
	free(half);
	return rc;
}

/* The matrices a pass multiplies by: the layers' and the head. */
static int
is_packed(int i)
{
	return KN_IS_MATRIX(i) || i == P_HEADW;
}

void
kn__model_alloc_packed(kn_model *m)
{
	const kn_backend *be = m->be;
	size_t total = 0, off, qb, kvb;
	int i, d = m->shape.width;

	if (be->matmul_pack == NULL || be->matmul_pack_bytes == NULL ||
	    be->matmul_forward_packed == NULL)
		return;
	for (i = 0; i < P_COUNT; i++) {
		const kn_tensor *t = &m->tensors[i];

		if (!is_packed(i))
			continue;
		/* (L, OC, C) or the head's (256, d); 64-byte steps */
		m->packed_per[i] = (be->matmul_pack_bytes(
		    (int)t->shape[t->ndim - 1], (int)t->shape[t->ndim - 2]) +
		    63) & ~(size_t)63;
		if (m->packed_per[i] == 0)
			return;         /* this backend's kernel takes none */
		total += m->packed_per[i] * (t->ndim == 3 ? t->shape[0] : 1);
	}
	qb = (be->matmul_pack_bytes(d, d) + 63) & ~(size_t)63;
	kvb = (be->matmul_pack_bytes(d, 2 * d) + 63) & ~(size_t)63;
	if ((m->packed_block = be->alloc(total + qb + kvb)) == NULL)
		return;
	m->packed_q = (char *)m->packed_block + total;
	m->packed_kv = m->packed_q + qb;
	for (i = 0, off = 0; i < P_COUNT; i++) {
		const kn_tensor *t = &m->tensors[i];

		if (!is_packed(i))
			continue;
		m->packed[i] = (char *)m->packed_block + off;
		off += m->packed_per[i] * (t->ndim == 3 ? t->shape[0] : 1);
	}
	/* behind the parameters' generation: packed at the first pass */
	m->packed_gen = m->params_gen - 1;
}

void
kn__model_repack(kn_model *m)
{
	int i, l, d = m->shape.width;
	const float *w;

	if (m->packed_block == NULL || m->packed_gen == m->params_gen)
		return;
	for (i = 0; i < P_COUNT; i++) {
		const kn_tensor *t = &m->tensors[i];
		int L = t->ndim == 3 ? (int)t->shape[0] : 1, OC, C;

		if (m->packed[i] == NULL)
			continue;
		OC = (int)t->shape[t->ndim - 2];
		C = (int)t->shape[t->ndim - 1];
		for (l = 0; l < L; l++)
			m->be->matmul_pack(m->packed[i] + l * m->packed_per[i],
			    m->w[i] + (size_t)l * OC * C, C, OC);
	}
	w = m->w[P_QKVW] + (size_t)(m->shape.layers - 1) * 3 * d * d;
	m->be->matmul_pack(m->packed_q, w, d, d);
	m->be->matmul_pack(m->packed_kv, w + (size_t)d * d, d, 2 * d);
	m->packed_gen = m->params_gen;
}

void
kn__model_free_infer(kn_model *m)
{
	if (m->packed_block != NULL)
		m->be->free(m->packed_block);
	if (m->qkv0 != NULL)
		m->be->free(m->qkv0);
	free(m->qkv0_in);
}

int
kn_model_predict(kn_model *m, const int32_t *input, int B, const float *u,
    float temp, int32_t *out, char *err)
{
	size_t N = (size_t)B * m->shape.window;
	int rc;

	kn__model_pass(m, 0);
	if ((rc = kn__model_check_batch(m, input, NULL, NULL, B, err)) != 0)
		return rc;
	kn__model_upload_batch(m, input, NULL, NULL, B);
	kn__model_forward(m, B);
	m->be->upload(m->a.u, u, N * sizeof(float));
	m->be->sample(m->a.picked, m->a.logits, m->a.u, (int)N, KN_VOCAB_OUT,
	    temp);
	m->be->download(out, m->a.picked, N * sizeof(int32_t));
	return m->be->status(err);
}

/* The final LayerNorm, the head and sampling act on each row alone: the
 * R rows of x wanted are gathered (into ln1's first slot, free once the
 * layers are done) and the rest never computed; rows NULL: x holds just
 * those R.  out[r] is the symbol sampled for row rows[r] with u[r]. */
static int
head_sample(kn_model *m, const float *x, const int32_t *rows, int R,
    const float *u, float temp, int32_t *out, char *err)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, r;

	for (r = 0; rows != NULL && r < R; r++)
		be->copy(a->ln1 + (size_t)r * d, x + (size_t)rows[r] * d,
		    (size_t)d * sizeof(float));
	kn__model_head(m, rows != NULL ? a->ln1 : x, R);
	be->upload(a->u, u, (size_t)R * sizeof(float));
	be->sample(a->picked, a->logits, a->u, R, KN_VOCAB_OUT, temp);
	be->download(out, a->picked, (size_t)R * sizeof(int32_t));
	return be->status(err);
}

/* Layer 0's q, k, v for the B windows uploaded (embedded in
 * a->encoded), into m->qkv0: LayerNorm and the QKV product run on the
 * rows whose symbol changed since the last call only (the denoising steps
 * of a request unmask a few positions each), gathered into the ln1 and
 * qkv slots.  A row's bits do not depend on the rows beside it.  Returns
 * NULL when the cache cannot be allocated. */
static const float *
qkv0_update(kn_model *m, const int32_t *input, int B)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, N = B * m->T, i, c;
	size_t rowd = (size_t)d * sizeof(float), row3 = 3 * rowd;
	size_t cap = (size_t)m->max_batch * m->T;
	int valid = m->qkv0_gen == m->params_gen ? m->qkv0_rows : 0;
	const float *ln1w = m->w[P_LN1W], *ln1b = m->w[P_LN1B];

	if (m->qkv0 == NULL) {
		if ((m->qkv0 = be->alloc(cap * row3)) == NULL ||
		    (m->qkv0_in = malloc(cap * sizeof(int32_t))) == NULL) {
			if (m->qkv0 != NULL)
				be->free(m->qkv0);
			m->qkv0 = NULL;
			return NULL;
		}
		valid = 0;
	}
	/* rows valid up to the first stale one: a new batch gathers none */
	for (i = 0; i < N && i < valid && m->qkv0_in[i] == input[i]; i++)
		;
	if (i == 0) {
		be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd,
		    a->encoded, ln1w, ln1b, N, d);
		kn__model_linear(m, P_QKVW, 0, m->qkv0, a->ln1, m->w[P_QKVB], N,
		    d, 3 * d);
	} else {
		for (i = 0, c = 0; i < N; i++)
			if (i >= valid || m->qkv0_in[i] != input[i])
				be->copy(a->qkv + (size_t)c++ * d, a->encoded +
				    (size_t)i * d, rowd);
		if (c > 0) {
			be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd,
			    a->qkv, ln1w, ln1b, c, d);
			kn__model_linear(m, P_QKVW, 0, a->qkv, a->ln1,
			    m->w[P_QKVB], c, d, 3 * d);
		}
		for (i = 0, c = 0; i < N; i++)
			if (i >= valid || m->qkv0_in[i] != input[i])
				be->copy(m->qkv0 + (size_t)i * 3 * d, a->qkv +
				    (size_t)c++ * 3 * d, row3);
	}
	memcpy(m->qkv0_in, input, (size_t)N * sizeof(int32_t));
	m->qkv0_rows = N;
	m->qkv0_gen = m->params_gen;
	return m->qkv0;
}

/* The last layer's q, k, v for kn_model_predict_at: k and v of every row
 * (each is attended to), q of the R rows wanted alone, from the two packs
 * of the weight's parts and written where the whole product puts them.
 * An output column's dot product does not depend on the columns or rows
 * beside it in our kernel, so each value has the whole product's bits.
 * The layer's MLP rows are work space until its MLP. */
static const float *
last_qkv(kn_model *m, int l, const float *x, int N, const int32_t *rows,
    int R)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	int d = m->shape.width, la = l % m->act_layers, i;
	size_t Nd = (size_t)N * d, rowd = (size_t)d * sizeof(float);
	float *ln1 = LAYER(a->ln1, la, Nd), *qkv = LAYER(a->qkv, la, 3 * Nd);
	float *kv = LAYER(a->fch, la, 4 * Nd), *lnr = kv + 2 * Nd;
	float *q = lnr + (size_t)R * d;
	const float *w = m->w[P_QKVW] + (size_t)l * 3 * d * d;
	const float *b = m->w[P_QKVB] + (size_t)l * 3 * d;

	be->layernorm_forward(ln1, LAYER(a->ln1_mean, la, N),
	    LAYER(a->ln1_rstd, la, N), x, m->w[P_LN1W] + (size_t)l * d,
	    m->w[P_LN1B] + (size_t)l * d, N, d);
	be->matmul_forward_packed(kv, ln1, w + (size_t)d * d, m->packed_kv,
	    b + d, N, d, 2 * d);
	for (i = 0; i < R; i++)
		be->copy(lnr + (size_t)i * d, ln1 + (size_t)rows[i] * d, rowd);
	be->matmul_forward_packed(q, lnr, w, m->packed_q, b, R, d, d);
	for (i = 0; i < N; i++)
		be->copy(qkv + (size_t)i * 3 * d + d, kv + (size_t)i * 2 * d,
		    2 * rowd);
	for (i = 0; i < R; i++)
		be->copy(qkv + (size_t)rows[i] * 3 * d, q + (size_t)i * d,
		    rowd);
	return qkv;
}

/* Layer l of B windows, its q, k, v computed from x or given (qkv); with
 * rows, only the R rows wanted come out (gathered): every row's keys and
 * values feed the attention, but past them each query row is on its own,
 * so the attention (where the backend has attention_rows), the projection
 * and the MLP run on the R rows alone.  The kernels give a row the same
 * bits whichever rows share its GEMM, so each row is the full pass's. */
static const float *
layer_at(kn_model *m, int l, const float *x, const float *qkv, int B,
    const int32_t *rows, int R)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	struct kn__attn at = { B, NULL, 0, 0 };
	int d = m->shape.width, h = m->shape.heads, T = m->T, N = B * T, r;
	int la = l % m->act_layers;
	size_t row = (size_t)d * sizeof(float), Nd = (size_t)N * d;
	const float *atty;
	/* qkv and ln1 of this slot are free once the attention is done */
	float *xg = LAYER(a->qkv, la, 3 * Nd), *ag = LAYER(a->ln1, la, Nd);

	if (rows == NULL || be->attention_rows == NULL)
		atty = qkv != NULL ? kn__model_attend(m, l, qkv, N, &at) :
		    kn__model_layer_attn(m, l, x, N, &at);
	else {
		float *y = LAYER(a->atty, la, Nd);

		/* the rows path runs on the last layer only */
		if (qkv == NULL && m->packed_q != NULL)
			qkv = last_qkv(m, l, x, N, rows, R);
		else if (qkv == NULL)
			qkv = kn__model_layer_qkv(m, l, x, N);
		be->attention_rows(y, LAYER(a->att, la, (size_t)B * h * T * T),
		    qkv, B, T, d, h, m->mask, rows, R);
		atty = y;
	}
	if (rows == NULL)
		return kn__model_layer_mlp(m, l, x, atty, N);
	for (r = 0; r < R; r++) {
		be->copy(xg + (size_t)r * d, x + (size_t)rows[r] * d, row);
		be->copy(ag + (size_t)r * d, atty + (size_t)rows[r] * d, row);
	}
	return kn__model_layer_mlp(m, l, xg, ag, R);
}

int
kn_model_predict_at(kn_model *m, const int32_t *input, int B,
    const int32_t *rows, int R, const float *u, float temp, int32_t *out,
    char *err)
{
	int N = B * m->shape.window, L = m->shape.layers, l, r, rc, fast;
	const float *x, *qkv0 = NULL;

	kn__model_pass(m, 0);
	if ((rc = kn__model_check_batch(m, input, NULL, NULL, B, err)) != 0)
		return rc;
	for (r = 0; r < R; r++)
		if (rows[r] < 0 || rows[r] >= N || (r > 0 &&
		    rows[r] <= rows[r - 1]))
			return kn_error(err, KN_EINVAL, "prediction rows must "
			    "increase within the batch's %d positions", N);
	if (R == 0)
		return KN_OK;
	kn__model_upload_batch(m, input, NULL, NULL, B);
	m->be->embed_forward(m->a.encoded, m->a.input, m->w[P_WTE],
	    m->w[P_WPE], N, m->shape.window, m->shape.width);
	x = m->a.encoded;
	/* The shortcuts need a row's bits not to depend on the rows beside
	 * it, which our CPU kernel promises (the one that packs) but fp16
	 * storage (a GEMV for a few rows) and cuBLAS do not: elsewhere every
	 * layer runs on every row, so the bytes never depend on how the
	 * requests were grouped. */
	fast = m->packed_block != NULL;
	if (fast)
		qkv0 = qkv0_update(m, input, B);
	for (l = 0; l < L; l++)
		x = layer_at(m, l, x, l == 0 ? qkv0 : NULL, B,
		    fast && l == L - 1 ? rows : NULL, R);
	return head_sample(m, x, fast ? NULL : rows, R, u, temp, out, err);
}

/* A cache holds k and v of every layer for one sequence, in backend
 * memory. */
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

void
kn__kv_set_len(kn_kv *kv, int len)
{
	kv->len = len;
}

float *
kn__kv_layer(kn_kv *kv, int l)
{
	return kv->buf + (size_t)l * 2 * kv->window * kv->width;
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

/* The layers of the forward pass on rows that belong to several
 * sequences: the per-row ops run once over all rows (one batched GEMM per
 * weight), the attention once per sequence against its cache. */
int
kn_model_decode(kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, float *hidden, const float *u, float temp,
    int32_t *picked, char *err)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	struct kn__attn at = { 0, seqs, R, 0 };
	int d = m->shape.width, N = 0, l, r, rc, off;
	int32_t *last;
	const float *x;

	kn__model_pass(m, 0);
	if ((rc = check_decode(m, seqs, R, sym, &N, err)) != 0)
		return rc;
	if (sym != NULL) {
		be->upload(a->input, sym, (size_t)N * sizeof(int32_t));
		for (r = 0, off = 0; r < R; off += seqs[r].count, r++)
			be->embed_forward(a->encoded + (size_t)off * d,
			    a->input + off, m->w[P_WTE], m->w[P_WPE] +
			    (size_t)seqs[r].pos0 * d, seqs[r].count,
			    seqs[r].count, d);
	} else
		be->upload(a->encoded, hidden, (size_t)N * d * sizeof(float));
	x = a->encoded;
	for (l = 0; l < m->shape.layers; l++)
		x = kn__model_layer(m, l, x, N, &at);
	for (r = 0; r < R; r++)
		seqs[r].kv->len += seqs[r].count;
	if (picked == NULL) {
		be->download(hidden, x, (size_t)N * d * sizeof(float));
		return be->status(err);
	}
	/* a byte from each sequence's last row */
	if ((last = malloc((size_t)R * sizeof(int32_t))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (r = 0, off = 0; r < R; r++) {
		off += seqs[r].count;
		last[r] = off - 1;
	}
	rc = head_sample(m, x, last, R, u, temp, picked, err);
	free(last);
	return rc;
}

int
kn__model_sample_rows(kn_model *m, const float *x, const int32_t *rows,
    int R, const float *u, float temp, int32_t *out, char *err)
{
	return head_sample(m, x, rows, R, u, temp, out, err);
}

int
kn_model_head_logprobs(kn_model *m, int R, float temp,
    const int32_t *picked, int k, float *lp, unsigned char *top, char *err)
{
	const int V = KN_VOCAB_OUT;
	double t = temp > 0.0f ? (double)temp : 1.0, mx, sum, lse;
	float *l;
	int r, c, j, rc;

	if (R < 0 || k < 0 || k > V)
		return kn_error(err, KN_EINVAL, "logprobs of %d rows, %d "
		    "alternatives", R, k);
	if (R == 0)
		return KN_OK;
	if ((l = malloc((size_t)R * V * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	m->be->download(l, m->a.logits, (size_t)R * V * sizeof(float));
	if ((rc = m->be->status(err)) != 0) {
		free(l);
		return rc;
	}
	for (r = 0; r < R; r++) {
		float *row = l + (size_t)r * V, *o = lp + (size_t)r * (k + 1);
		unsigned char taken[KN_VOCAB_OUT] = { 0 };

		/* in double, so the figures are those of the distribution
		 * to float's precision however peaked it is */
		for (c = 1, mx = row[0]; c < V; c++)
			if (row[c] > mx)
				mx = row[c];
		for (c = 0, sum = 0.0; c < V; c++)
			sum += exp((row[c] - mx) / t);
		lse = log(sum);
		o[0] = picked[r] >= 0 && picked[r] < V ?
		    (float)((row[picked[r]] - mx) / t - lse) : -INFINITY;
		for (j = 0; j < k; j++) {
			int best = -1;

			for (c = 0; c < V; c++)
				if (!taken[c] && (best < 0 || row[c] > row[best]))
					best = c;
			taken[best] = 1;
			top[(size_t)r * k + j] = (unsigned char)best;
			o[1 + j] = (float)((row[best] - mx) / t - lse);
		}
	}
	free(l);
	return KN_OK;
}

int
kn_model_copy_layers(kn_model *dst, const kn_model *src, int first,
    char *err)
{
	const kn_model_shape *ds = &dst->shape, *ss = &src->shape;
	float *from, *to;
	int i, rc;

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
	rc = kn_model_set_params(dst, to, err);
	free(from);
	free(to);
	return rc;
}
