/* Block-causal decoding with a KV cache (model_blockdecode.h), on the
 * backend's causal attention_decode: a query that should see the whole
 * of its position block is run as if it stood at the block's last
 * position, so every backend that decodes the causal LM decodes position
 * blocks too, with the same products and softmax. */
#include "config.h"

#include <stdlib.h>

#include "kernels/error.h"
#include "kernels/model_blockdecode.h"
#include "kernels/model_private.h"

int
kn_model_pos_block(const kn_model_shape *s)
{
	return s->pos_block > 0 ? s->pos_block : s->window;
}

void
kn__blockdecode_attention(kn_model *m, int l, float *atty,
    const float *qkv, float *tmp, const struct kn__attn *at)
{
	const kn_backend *be = m->be;
	int d = m->shape.width, n = m->shape.window, h = m->shape.heads;
	int L = at->block, r, i, off;
	size_t row = (size_t)d * sizeof(float);

	for (r = 0, off = 0; r < at->R; off += at->seqs[r].count, r++) {
		const kn_decode_seq *q = &at->seqs[r];
		float *k = kn__kv_layer(q->kv, l), *v = k + (size_t)n * d;
		const float *qr = qkv + (size_t)off * 3 * d;
		float *out = atty + (size_t)off * d;
		int end = q->pos0 + q->count;

		/* every new key and value into the cache, and the causal
		 * outputs: right for each block's last row */
		be->attention_decode(out, k, v, m->a.att, qr, q->pos0,
		    q->count, d, h);
		for (i = 0; i < q->count; i++) {
			int pos = q->pos0 + i, last = (pos / L + 1) * L;

			last = (last < end ? last : end) - 1;
			if (last == pos)
				continue;
			/* query i with the k and v of its block's last row,
			 * which attention_decode writes back unchanged */
			be->copy(tmp, qr + (size_t)i * 3 * d, row);
			be->copy(tmp + d, k + (size_t)last * d, row);
			be->copy(tmp + 2 * d, v + (size_t)last * d, row);
			be->attention_decode(out + (size_t)i * d, k, v, m->a.att,
			    tmp, last, 1, d, h);
		}
	}
}

static int
check_pass(const kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, int commit, const int32_t *rows, int nrows,
    int *total, char *err)
{
	const kn_model_shape *s = &m->shape;
	int L = kn_model_pos_block(s), r, i, N = 0;

	if (s->causal)
		return kn_error(err, KN_EINVAL, "block decoding needs a "
		    "bidirectional model");
	if (R <= 0 || sym == NULL)
		return kn_error(err, KN_EINVAL, "nothing to decode");
	for (r = 0; r < R; r++) {
		const kn_decode_seq *q = &seqs[r];
		int end = q->pos0 + q->count;

		if (q->kv == NULL || kn_kv_len(q->kv) != q->pos0 ||
		    q->pos0 % L != 0 || q->count <= 0 || end > s->window)
			return kn_error(err, KN_EINVAL, "sequence %d: positions "
			    "%d..%d do not follow a cache of whole position "
			    "blocks of %d in a window of %d", r, q->pos0, end - 1,
			    L, s->window);
		if (commit && end % L != 0 && end != s->window)
			return kn_error(err, KN_EINVAL, "sequence %d: only whole "
			    "position blocks of %d join the cache", r, L);
		N += q->count;
	}
	if (N > m->max_batch * s->window)
		return kn_error(err, KN_EINVAL, "%d positions in one pass; "
		    "this model takes %d", N, m->max_batch * s->window);
	for (i = 0; i < N; i++)
		if (sym[i] < 0 || sym[i] >= KN_VOCAB_IN)
			return kn_error(err, KN_EINVAL, "decoding symbol %d is "
			    "not a byte or the mask", sym[i]);
	for (i = 0; i < nrows; i++)
		if (rows[i] < 0 || rows[i] >= N || (i > 0 &&
		    rows[i] <= rows[i - 1]))
			return kn_error(err, KN_EINVAL, "prediction rows must "
			    "increase within the pass's %d rows", N);
	*total = N;
	return KN_OK;
}

int
kn_model_blockdecode(kn_model *m, const kn_decode_seq *seqs, int R,
    const int32_t *sym, int commit, const int32_t *rows, int nrows,
    const float *u, float temp, int32_t *out, char *err)
{
	const kn_backend *be = m->be;
	struct acts *a = &m->a;
	struct kn__attn at = { 0, seqs, R, kn_model_pos_block(&m->shape) };
	int d = m->shape.width, N = 0, l, r, rc, off;
	const float *x;

	kn__model_pass(m, 0);
	if ((rc = check_pass(m, seqs, R, sym, commit, rows, nrows, &N,
	    err)) != 0)
		return rc;
	be->upload(a->input, sym, (size_t)N * sizeof(int32_t));
	for (r = 0, off = 0; r < R; off += seqs[r].count, r++)
		be->embed_forward(a->encoded + (size_t)off * d, a->input + off,
		    m->w[P_WTE], m->w[P_WPE] + (size_t)seqs[r].pos0 * d,
		    seqs[r].count, seqs[r].count, d);
	x = a->encoded;
	for (l = 0; l < m->shape.layers; l++)
		x = kn__model_layer(m, l, x, N, &at);
	for (r = 0; commit && r < R; r++)
		kn__kv_set_len(seqs[r].kv, seqs[r].pos0 + seqs[r].count);
	if (nrows == 0)
		return be->status(err);
	return kn__model_sample_rows(m, x, rows, nrows, u, temp, out, err);
}
