/* The block model as a whole: its gradient against central differences,
 * bitwise determinism across runs and thread counts, and a loss that falls
 * on a small generated corpus. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/convert.h"
#include "kernels/model.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "tests/testutil.h"

/* A masked-diffusion batch in the way the trainer builds one: noise level
 * t per window, each position masked with probability t, weight 1/(t n). */
struct mdbatch {
	int32_t *input, *target;
	float *weight;
	kn_batch b;
};

static void
make_batch(struct mdbatch *mb, const char *text, size_t len, int B, int n,
    int causal, uint64_t seed, uint64_t step)
{
	kn_rng r;
	int b, i;

	mb->input = malloc((size_t)B * n * sizeof(int32_t));
	mb->target = malloc((size_t)B * n * sizeof(int32_t));
	mb->weight = malloc((size_t)B * n * sizeof(float));
	kn_rng_init(&r, seed, step);
	for (b = 0; b < B; b++) {
		size_t start = kn_rng_below(&r, len - n - 1);
		float t = 0.05f + 0.9f * kn_rng_uniform(&r);

		for (i = 0; i < n; i++) {
			size_t k = (size_t)b * n + i;
			unsigned char x = (unsigned char)text[start + i];

			if (causal) {
				mb->input[k] = x;
				mb->target[k] = (unsigned char)text[start + i + 1];
				mb->weight[k] = 1.0f / n;
			} else {
				int masked = kn_rng_uniform(&r) < t;

				mb->input[k] = masked ? KN_MASK : x;
				mb->target[k] = x;
				mb->weight[k] = masked ? 1.0f / (t * n) : 0.0f;
			}
		}
	}
	mb->b = (kn_batch){ mb->input, mb->target, mb->weight, B };
}

static void
free_batch(struct mdbatch *mb)
{
	free(mb->input);
	free(mb->target);
	free(mb->weight);
}

static char *
corpus(size_t *len)
{
	static const char *words[] = { "the ", "cat ", "sat ", "on ", "a ",
	    "mat. ", "dog ", "ran ", "to ", "park. " };
	size_t cap = 20000, n = 0;
	char *s = malloc(cap + 16);
	kn_rng r;

	kn_rng_init(&r, 42, 0);
	while (n < cap) {
		const char *w = words[kn_rng_below(&r, 10)];

		memcpy(s + n, w, strlen(w));
		n += strlen(w);
	}
	*len = n;
	return s;
}

struct fd_ctx {
	kn_model *m;
	float *params;
	struct mdbatch *mb;
};

static double
model_loss(void *p)
{
	struct fd_ctx *c = p;
	float loss = 0;
	char err[KN_ERR_LEN];

	kn_model_set_params(c->m, c->params, err);
	kn_model_backward(c->m, &c->mb->b, &loss, err);
	return loss;
}

/* pos_block: position blocks, whose training rows (two copies of the
 * window under the twin mask) any symbols exercise alike */
static void
gradcheck_case(int causal, int pos_block)
{
	kn_model_shape s = { .width = 16, .heads = 2, .layers = 2,
	    .window = 8, .causal = causal, .pos_block = pos_block };
	kn_model *m;
	char err[KN_ERR_LEN];
	struct mdbatch mb;
	struct fd_ctx c;
	size_t len, np;
	char *text = corpus(&len);
	float *grad, loss;
	const kn_tensor *t;
	int count, i;
	double worst = 0;

	ck_assert_int_eq(kn_model_create(&m, &s, kn_cpu_backend(), 3, err), 0);
	kn_model_init(m, 7);
	np = kn_model_num_params(m);
	ck_assert_uint_eq(np, kn_model_params_for(&s));
	c.params = malloc(np * sizeof(float));
	grad = malloc(np * sizeof(float));
	/* weights 3x GPT-2's make every path matter while the loss stays
	 * smooth enough for differences in float32 */
	kn_model_get_params(m, c.params);
	for (i = 0; i < (int)np; i++)
		c.params[i] *= 3.0f;
	make_batch(&mb, text, len, 3, kn_model_row_len(&s), causal, 3, 1);
	c.m = m;
	c.mb = &mb;
	ck_assert_int_eq(kn_model_set_params(m, c.params, err), 0);
	ck_assert_int_eq(kn_model_backward(m, &mb.b, &loss, err), 0);
	memcpy(grad, kn_model_grads(m), np * sizeof(float));
	/* Per tensor, the derivative along a random direction v of that
	 * tensor: sum_k g_k v_k against (L(p + eps v) - L(p - eps v)) / 2 eps.
	 * In float32 one coordinate's difference drowns in rounding where its
	 * gradient is small; a direction sums them all.  The error is relative
	 * to the larger of the two and of |g||v|, the most g.v can be. */
	t = kn_model_tensors(m, &count);
	for (i = 0; i < count; i++) {
		size_t n = kn_tensor_numel(&t[i]), k;
		float *x = c.params + t[i].offset, *keep = malloc(n * 4);
		float *v = tu_alloc_fill(n, -1, 1, 100 + i);
		double gv = 0, gg = 0, vv = 0, up, down, fd, e, eps = 1e-3;
		char what[64];

		memcpy(keep, x, n * 4);
		for (k = 0; k < n; k++) {
			gv += (double)grad[t[i].offset + k] * v[k];
			gg += (double)grad[t[i].offset + k] * grad[t[i].offset + k];
			vv += (double)v[k] * v[k];
		}
		for (k = 0; k < n; k++)
			x[k] = keep[k] + (float)eps * v[k];
		up = model_loss(&c);
		for (k = 0; k < n; k++)
			x[k] = keep[k] - (float)eps * v[k];
		down = model_loss(&c);
		memcpy(x, keep, n * 4);
		fd = (up - down) / (2 * eps);
		e = fabs(fd - gv) / fmax(fmax(fabs(fd), fabs(gv)),
		    sqrt(gg * vv));
		snprintf(what, sizeof(what), "block%s %s",
		    causal ? " (causal)" : pos_block ? " (position blocks)" :
		    "", t[i].name);
		tu_report(what, e);
		worst = fmax(worst, e);
		free(keep);
		free(v);
	}
	ck_assert_double_lt(worst, 1e-2);
	free_batch(&mb);
	free(c.params);
	free(grad);
	free(text);
	kn_model_free(m);
}

START_TEST(test_block_gradcheck)
{
	gradcheck_case(0, 0);
	gradcheck_case(0, 2);
}
END_TEST

START_TEST(test_causal_gradcheck)
{
	gradcheck_case(1, 0);
}
END_TEST

/* Trains a few steps and returns the parameters. */
static float *
train(int threads, int steps, float *first, float *last)
{
	kn_model_shape s = { .width = 32, .heads = 4, .layers = 2,
	    .window = 16 };
	kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	kn_model *m;
	char err[KN_ERR_LEN];
	size_t len;
	char *text = corpus(&len);
	float *params, loss = 0;
	int i;

	ck_assert_int_eq(kn_pool_init(threads, err), 0);
	ck_assert_int_eq(kn_model_create(&m, &s, kn_cpu_backend(), 16, err), 0);
	kn_model_init(m, 11);
	for (i = 0; i < steps; i++) {
		struct mdbatch mb;

		make_batch(&mb, text, len, 16, 16, 0, 5, (uint64_t)i);
		ck_assert_int_eq(kn_model_step(m, &mb.b, &opt, 3e-3f, &loss,
		    err), 0);
		if (i == 0 && first)
			*first = loss;
		free_batch(&mb);
	}
	if (last)
		*last = loss;
	params = malloc(kn_model_num_params(m) * sizeof(float));
	kn_model_get_params(m, params);
	kn_model_free(m);
	free(text);
	return params;
}

START_TEST(test_determinism)
{
	kn_model_shape s = { .width = 32, .heads = 4, .layers = 2,
	    .window = 16 };
	size_t np = kn_model_params_for(&s);
	float *a = train(1, 5, NULL, NULL);
	float *b = train(2, 5, NULL, NULL);
	float *c = train(2, 5, NULL, NULL);
	float *d = train(3, 5, NULL, NULL);

	ck_assert_mem_eq(a, b, np * sizeof(float));
	ck_assert_mem_eq(b, c, np * sizeof(float));
	ck_assert_mem_eq(a, d, np * sizeof(float));
	free(a); free(b); free(c); free(d);
	kn_pool_init(0, NULL);
}
END_TEST

START_TEST(test_loss_falls)
{
	float first, last;
	float *p = train(0, 150, &first, &last);

	/* 10 words: the masked loss at start is about ln 256 per masked byte;
	 * a model that has learnt the words is far below */
	ck_assert_msg(last < 0.5f * first, "loss %g -> %g", first, last);
	free(p);
}
END_TEST

START_TEST(test_bad_input)
{
	kn_model_shape s = { .width = 16, .heads = 3, .layers = 1, .window = 8 };
	kn_model *m;
	char err[KN_ERR_LEN];
	int32_t in[8] = { 0, 1, 2, 3, 4, 5, 6, 300 }, tg[8] = { 0 };
	float w[8] = { 0 }, loss;
	kn_batch b = { in, tg, w, 1 };

	ck_assert_int_eq(kn_model_create(&m, &s, kn_cpu_backend(), 1, err),
	    KN_EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_ptr_nonnull(strstr(err, "multiple of heads"));
	s.heads = 2;
	ck_assert_int_eq(kn_model_create(&m, &s, kn_cpu_backend(), 1, err), 0);
	kn_model_init(m, 1);
	ck_assert_int_eq(kn_model_backward(m, &b, &loss, err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "input symbol 300"));
	in[7] = KN_MASK;
	w[2] = NAN;
	ck_assert_int_eq(kn_model_backward(m, &b, &loss, err), KN_EINVAL);
	b.B = 2;
	w[2] = 0;
	ck_assert_int_eq(kn_model_backward(m, &b, &loss, err), KN_EINVAL);
	kn_model_free(m);
}
END_TEST

/* Decoding with a KV cache gives the causal forward pass's logits: the
 * prompt in one pass, then one position at a time. */
START_TEST(test_decode_matches_forward)
{
	kn_model_shape s = { .width = 32, .heads = 4, .layers = 3,
	    .window = 24, .causal = 1 };
	kn_model *m, *inf;
	kn_kv *kv;
	char err[KN_ERR_LEN];
	int32_t in[24], picked;
	float *logits = malloc(24 * 256 * sizeof(float)), u = 0.5f;
	float hidden[24 * 32];
	kn_decode_seq q;
	int i, p, agree = 0;

	ck_assert_int_eq(kn_model_create(&m, &s, kn_cpu_backend(), 1, err), 0);
	ck_assert_int_eq(kn_model_create_inference(&inf, &s, kn_cpu_backend(),
	    1, KN_STORE_F32, err), 0);
	kn_model_init(m, 11);
	{
		float *host = malloc(kn_model_num_params(m) * sizeof(float));

		kn_model_get_params(m, host);
		ck_assert_int_eq(kn_model_set_params(inf, host, err), 0);
		free(host);
	}
	for (i = 0; i < 24; i++)
		in[i] = "The quick brown fox jump"[i];
	ck_assert_int_eq(kn_model_forward(m, in, 1, logits, err), 0);
	ck_assert_int_eq(kn_kv_create(&kv, inf, err), 0);
	q.kv = kv;
	q.pos0 = 0;
	q.count = 5;
	for (p = 5; p <= 24; p++) {
		/* greedy: the argmax of the full pass's row p-1 */
		int best = 0, c;

		for (c = 1; c < 256; c++)
			if (logits[(p - 1) * 256 + c] > logits[(p - 1) * 256 + best])
				best = c;
		ck_assert_int_eq(kn_model_decode(inf, &q, 1, in + q.pos0, NULL,
		    &u, 0.0f, &picked, err), 0);
		agree += picked == best;
		q.pos0 = p;
		q.count = 1;
		if (p == 24)
			break;
	}
	ck_assert_int_eq(kn_kv_len(kv), 24);
	ck_assert_int_eq(agree, 20);
	/* a position past the window, or one that skips the cache, is
	 * refused */
	q.pos0 = 24;
	ck_assert_int_ne(kn_model_decode(inf, &q, 1, in, NULL, &u, 0.0f,
	    &picked, err), 0);
	kn_kv_free(kv);
	/* hidden states out of the layers: finite, and the same for a
	 * model cut in two and run one half after the other */
	{
		kn_model_shape a = s, b = s;
		kn_model *lo, *hi;
		kn_kv *k1, *k2, *k3;
		float h2[24 * 32];
		int32_t pa, pb;

		a.layers = 1;
		b.layers = 2;
		ck_assert_int_eq(kn_model_create_inference(&lo, &a,
		    kn_cpu_backend(), 1, KN_STORE_F32, err), 0);
		ck_assert_int_eq(kn_model_create_inference(&hi, &b,
		    kn_cpu_backend(), 1, KN_STORE_F32, err), 0);
		ck_assert_int_eq(kn_model_copy_layers(lo, inf, 0, err), 0);
		ck_assert_int_eq(kn_model_copy_layers(hi, inf, 1, err), 0);
		ck_assert_int_ne(kn_model_copy_layers(hi, inf, 2, err), 0);
		ck_assert_int_eq(kn_kv_create(&k1, inf, err), 0);
		ck_assert_int_eq(kn_kv_create(&k2, lo, err), 0);
		ck_assert_int_eq(kn_kv_create(&k3, hi, err), 0);
		for (p = 0; p < 24; p += 8) {
			kn_decode_seq w = { k1, p, 8 }, x = { k2, p, 8 };
			kn_decode_seq y = { k3, p, 8 };

			ck_assert_int_eq(kn_model_decode(inf, &w, 1, in + p,
			    NULL, &u, 0.7f, &pa, err), 0);
			ck_assert_int_eq(kn_model_decode(lo, &x, 1, in + p,
			    hidden, NULL, 0, NULL, err), 0);
			memcpy(h2, hidden, sizeof(hidden));
			ck_assert_int_eq(kn_model_decode(hi, &y, 1, NULL, h2,
			    &u, 0.7f, &pb, err), 0);
			ck_assert_int_eq(pa, pb);
		}
		kn_kv_free(k1); kn_kv_free(k2); kn_kv_free(k3);
		kn_model_free(lo);
		kn_model_free(hi);
	}
	kn_model_free(m);
	kn_model_free(inf);
	free(logits);
}
END_TEST

/* A window's prediction does not depend on the other windows of its
 * batch, nor a row of a decoding pass on the other sequences': a server
 * batches requests without changing anyone's output. */
START_TEST(test_batch_invariance)
{
	kn_model_shape s = { .width = 48, .heads = 4, .layers = 2,
	    .window = 40, .causal = 0 }, cs = s;
	kn_model *m, *c;
	char err[KN_ERR_LEN];
	int32_t in[5 * 40], one[40], all[5 * 40];
	float u[5 * 40], hid1[4 * 48], hidall[9 * 48];
	kn_kv *kv[3], *kw[3];
	int i, b;

	ck_assert_int_eq(kn_model_create_inference(&m, &s, kn_cpu_backend(), 5,
	    KN_STORE_F32, err), 0);
	kn_model_init(m, 3);
	for (i = 0; i < 5 * 40; i++) {
		in[i] = i % 7 == 0 ? KN_MASK : 'a' + (i * 13) % 26;
		u[i] = (float)((i * 37) % 100) / 100.0f;
	}
	ck_assert_int_eq(kn_model_predict(m, in, 5, u, 0.9f, all, err), 0);
	for (b = 0; b < 5; b++) {
		ck_assert_int_eq(kn_model_predict(m, in + b * 40, 1, u + b * 40,
		    0.9f, one, err), 0);
		ck_assert_mem_eq(one, all + b * 40, sizeof(one));
	}
	{
		/* some rows only: what the whole prediction gives them */
		int32_t rows[4] = { 3, 41, 77, 199 }, some[4];
		float us[4];

		for (i = 0; i < 4; i++)
			us[i] = u[rows[i]];
		ck_assert_int_eq(kn_model_predict_at(m, in, 5, rows, 4, us, 0.9f,
		    some, err), 0);
		for (i = 0; i < 4; i++)
			ck_assert_int_eq(some[i], all[rows[i]]);
		rows[2] = 20;
		ck_assert_int_ne(kn_model_predict_at(m, in, 5, rows, 4, us, 0.9f,
		    some, err), 0);
	}
	cs.causal = 1;
	ck_assert_int_eq(kn_model_create_inference(&c, &cs, kn_cpu_backend(),
	    2, KN_STORE_F32, err), 0);
	kn_model_init(c, 4);
	for (b = 0; b < 3; b++) {
		ck_assert_int_eq(kn_kv_create(&kv[b], c, err), 0);
		ck_assert_int_eq(kn_kv_create(&kw[b], c, err), 0);
	}
	{
		/* three sequences of 2, 3 and 4 new positions together, and
		 * each alone */
		kn_decode_seq q[3] = { { kv[0], 0, 2 }, { kv[1], 0, 3 },
		    { kv[2], 0, 4 } };
		int32_t sym[9];
		int off = 0;

		for (i = 0; i < 9; i++)
			sym[i] = 'k' + i;
		ck_assert_int_eq(kn_model_decode(c, q, 3, sym, hidall, NULL, 0,
		    NULL, err), 0);
		for (b = 0; b < 3; b++) {
			kn_decode_seq w = { kw[b], 0, q[b].count };

			ck_assert_int_eq(kn_model_decode(c, &w, 1, sym + off,
			    hid1, NULL, 0, NULL, err), 0);
			ck_assert_mem_eq(hid1, hidall + off * 48,
			    (size_t)w.count * 48 * sizeof(float));
			off += w.count;
		}
	}
	for (b = 0; b < 3; b++) {
		kn_kv_free(kv[b]);
		kn_kv_free(kw[b]);
	}
	kn_model_free(m);
	kn_model_free(c);
}
END_TEST

/* fp16 storage: the model of the weights rounded to fp16, whatever the
 * storage, gives the same predictions and decodes; values past the fp16
 * range are refused. */
/* kn_model_head_logprobs after kn_model_predict_at: the log-softmax, at
 * the sampling temperature, of the logits kn_model_forward gives those
 * rows (computed here in double), the chosen byte's and the k likeliest
 * in order; at temperature 0 (argmax) those of softmax(logits). */
START_TEST(test_head_logprobs)
{
	kn_model_shape s = { .width = 32, .heads = 2, .layers = 1,
	    .window = 16, .causal = 0 };
	static const float temps[] = { 0.7f, 1.0f, 0.0f };
	int32_t in[2 * 16], rows[3] = { 2, 9, 30 }, picked[3];
	float logits[2 * 16 * 256], u[3] = { 0.1f, 0.5f, 0.93f }, lp[3 * 6];
	unsigned char top[3 * 5];
	char err[KN_ERR_LEN];
	kn_model *m;
	int i, r, c, j, ti;

	ck_assert_int_eq(kn_model_create_inference(&m, &s, kn_cpu_backend(), 2,
	    KN_STORE_F32, err), 0);
	kn_model_init(m, 11);
	for (i = 0; i < 2 * 16; i++)
		in[i] = i % 3 == 2 ? KN_MASK : 'a' + (i * 7) % 26;
	ck_assert_int_eq(kn_model_forward(m, in, 2, logits, err), 0);
	for (ti = 0; ti < 3; ti++) {
		double t = temps[ti] > 0 ? temps[ti] : 1.0;

		ck_assert_int_eq(kn_model_predict_at(m, in, 2, rows, 3, u,
		    temps[ti], picked, err), 0);
		ck_assert_int_eq(kn_model_head_logprobs(m, 3, temps[ti], picked,
		    5, lp, top, err), 0);
		for (r = 0; r < 3; r++) {
			const float *l = logits + (size_t)rows[r] * 256;
			double mx = l[0], sum = 0, want;

			for (c = 1; c < 256; c++)
				if (l[c] > mx)
					mx = l[c];
			for (c = 0; c < 256; c++)
				sum += exp((l[c] - mx) / t);
			want = (l[picked[r]] - mx) / t - log(sum);
			ck_assert_msg(fabs(lp[r * 6] - want) < 1e-5, "row %d: %g, "
			    "not %g", rows[r], lp[r * 6], want);
			for (j = 0; j < 5; j++) {
				int b = top[r * 5 + j];

				ck_assert(fabs(lp[r * 6 + 1 + j] - ((l[b] - mx) / t -
				    log(sum))) < 1e-5);
				if (j > 0)
					ck_assert(l[b] <= l[top[r * 5 + j - 1]]);
				/* none left out is likelier */
				for (c = 0; c < 256 && j == 4; c++)
					ck_assert(l[c] <= l[b] ||
					    memchr(top + r * 5, c, 5) != NULL);
			}
			if (temps[ti] == 0)
				ck_assert_int_eq(picked[r], top[r * 5]);
		}
	}
	ck_assert_int_ne(kn_model_head_logprobs(m, 3, 1, picked, 300, lp, top,
	    err), 0);
	kn_model_free(m);
}
END_TEST

START_TEST(test_f16_storage)
{
	kn_model_shape s = { .width = 64, .heads = 4, .layers = 2,
	    .window = 24, .causal = 0 }, cs = s;
	kn_model *h, *f;
	char err[KN_ERR_LEN];
	size_t np, i;
	float *p, *back, u[2 * 24];
	uint16_t *half;
	int32_t in[2 * 24], oh[2 * 24], of[2 * 24];

	ck_assert_int_eq(kn_model_create_inference(&h, &s, kn_cpu_backend(), 2,
	    KN_STORE_F16, err), 0);
	ck_assert_int_eq(kn_model_create_inference(&f, &s, kn_cpu_backend(), 2,
	    KN_STORE_F32, err), 0);
	np = kn_model_num_params(h);
	kn_model_init(h, 5);
	p = malloc(np * sizeof(float));
	back = malloc(np * sizeof(float));
	half = malloc(np * sizeof(uint16_t));
	kn_model_get_params(h, p);
	/* an fp32 init, its matrices rounded to fp16, the rest exact */
	kn_model_init(f, 5);
	kn_model_get_params(f, back);
	{
		const kn_tensor *t;
		int count, k;

		t = kn_model_tensors(f, &count);
		for (k = 0; k < count; k++) {
			size_t n = kn_tensor_numel(&t[k]);
			float *x = back + t[k].offset;

			if (strcmp(t[k].name, "qkv_w") == 0 ||
			    strcmp(t[k].name, "attproj_w") == 0 ||
			    strcmp(t[k].name, "fc_w") == 0 ||
			    strcmp(t[k].name, "fcproj_w") == 0) {
				kn_f32_to_f16(half, x, n);
				kn_f16_to_f32(x, half, n);
			}
		}
	}
	ck_assert_mem_eq(p, back, np * sizeof(float));
	ck_assert_int_eq(kn_model_set_params(f, p, err), 0);
	for (i = 0; i < 2 * 24; i++) {
		in[i] = i % 3 ? KN_MASK : 'a' + (int)i % 26;
		u[i] = (float)((i * 41) % 100) / 100.0f;
	}
	ck_assert_int_eq(kn_model_predict(h, in, 2, u, 0.8f, oh, err), 0);
	ck_assert_int_eq(kn_model_predict(f, in, 2, u, 0.8f, of, err), 0);
	ck_assert_mem_eq(oh, of, sizeof(oh));
	/* a value past 65504 does not fit fp16 storage */
	p[kn_model_tensors(h, &(int){ 0 })[2].offset] = 1e6f;
	ck_assert_int_ne(kn_model_set_params(h, p, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "fp16"));
	kn_model_free(h);
	kn_model_free(f);
	/* decoding the causal LM from fp16 storage */
	cs.causal = 1;
	ck_assert_int_eq(kn_model_create_inference(&h, &cs, kn_cpu_backend(),
	    1, KN_STORE_F16, err), 0);
	ck_assert_int_eq(kn_model_create_inference(&f, &cs, kn_cpu_backend(),
	    1, KN_STORE_F32, err), 0);
	kn_model_init(h, 6);
	kn_model_get_params(h, p);
	ck_assert_int_eq(kn_model_set_params(f, p, err), 0);
	{
		kn_kv *k1, *k2;
		kn_decode_seq q1, q2;
		int32_t a, b, sym[24];
		float uu = 0.3f;
		int pos;

		for (pos = 0; pos < 24; pos++)
			sym[pos] = 'A' + pos;
		ck_assert_int_eq(kn_kv_create(&k1, h, err), 0);
		ck_assert_int_eq(kn_kv_create(&k2, f, err), 0);
		for (pos = 0; pos < 24; pos += 6) {
			q1 = (kn_decode_seq){ k1, pos, 6 };
			q2 = (kn_decode_seq){ k2, pos, 6 };
			ck_assert_int_eq(kn_model_decode(h, &q1, 1, sym + pos, NULL,
			    &uu, 0.9f, &a, err), 0);
			ck_assert_int_eq(kn_model_decode(f, &q2, 1, sym + pos, NULL,
			    &uu, 0.9f, &b, err), 0);
			ck_assert_int_eq(a, b);
		}
		kn_kv_free(k1);
		kn_kv_free(k2);
	}
	ck_assert_uint_lt(kn_model_inference_bytes(&cs, 1, KN_STORE_F16),
	    kn_model_inference_bytes(&cs, 1, KN_STORE_F32));
	kn_model_free(h);
	kn_model_free(f);
	free(p);
	free(back);
	free(half);
}
END_TEST

static Suite *
model_suite(void)
{
	Suite *s = suite_create("model");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_block_gradcheck);
	tcase_add_test(tc, test_causal_gradcheck);
	tcase_add_test(tc, test_determinism);
	tcase_add_test(tc, test_loss_falls);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_decode_matches_forward);
	tcase_add_test(tc, test_batch_invariance);
	tcase_add_test(tc, test_f16_storage);
	tcase_add_test(tc, test_head_logprobs);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	int rc;

	kn_cpu_backend();
	rc = tu_run_suite(model_suite());
	kn_pool_shutdown();
	return rc;
}
