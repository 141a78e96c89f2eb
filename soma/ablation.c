/* SOMA's independence ablation, the parts worth a test: packing several
 * experts into one SPSA vector, their minibatches, span losses and the
 * variance statistics (soma/ablation.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/rng.h"
#include "soma/ablation.h"

/* keys the minibatch streams apart from SPSA's and the model's */
#define SA_ABL_TAG 0x61626c6174696f6eull   /* "ablation" */

size_t
sa_abl_train_len(size_t len)
{
	size_t tail = len / 50 + (len % 50 != 0);

	return len > tail ? len - tail : 0;
}

int
sa_abl_batch(const unsigned char *data, size_t len, int B, int T,
    uint64_t seed, uint64_t expert, uint64_t step, int32_t *tokens,
    char *err)
{
	kn_rng r;
	int b, t;

	if (B <= 0 || T <= 0 || len < (size_t)T + 1)
		return kn_error(err, KN_EINVAL, "ablation: %zu bytes cannot "
		    "give windows of %d bytes", len, T + 1);
	kn_rng_init(&r, seed, kn_rng_stream(SA_ABL_TAG, expert, step, 0));
	for (b = 0; b < B; b++) {
		size_t off = (size_t)kn_rng_below(&r, len - (size_t)T);
		int32_t *row = tokens + (size_t)b * (T + 1);

		for (t = 0; t <= T; t++)
			row[t] = data[off + t];
	}
	return KN_OK;
}

int
sa_abl_packed_init(sa_abl_packed *p, kn_soma_model *m, int groups, int B,
    int T, int k_cap, char *err)
{
	memset(p, 0, sizeof(*p));
	if (groups <= 0 || B <= 0 || T <= 0 || k_cap <= 0)
		return kn_error(err, KN_EINVAL, "ablation: %d groups, B %d, "
		    "T %d, %d copies", groups, B, T, k_cap);
	p->m = m;
	p->groups = groups;
	p->nbody = kn_soma_body_params(kn_soma_get_shape(m));
	p->B = B;
	p->T = T;
	p->k_cap = k_cap;
	p->tokens = calloc((size_t)groups * B * (T + 1), sizeof(int32_t));
	p->gather = malloc((size_t)k_cap * p->nbody * sizeof(float));
	p->loss = malloc((size_t)k_cap * sizeof(float));
	if (!p->tokens || !p->gather || !p->loss) {
		sa_abl_packed_free(p);
		return kn_error(err, KN_ENOMEM, "ablation: packed buffers");
	}
	return KN_OK;
}

void
sa_abl_packed_free(sa_abl_packed *p)
{
	free(p->tokens);
	free(p->gather);
	free(p->loss);
	memset(p, 0, sizeof(*p));
}

static const int32_t *
group_tokens(const sa_abl_packed *p, int g)
{
	return p->tokens + (size_t)g * p->B * (p->T + 1);
}

int
sa_abl_packed_eval(void *ctx, const float *thetas, int K, float *losses,
    char *err)
{
	sa_abl_packed *p = ctx;
	size_t n = (size_t)p->groups * p->nbody;
	int g, k, rc;

	if (K <= 0 || K > p->k_cap)
		return kn_error(err, KN_EINVAL, "ablation: %d copies for a "
		    "buffer of %d", K, p->k_cap);
	/* the population pass wants each group's bodies contiguous */
	for (g = 0; g < p->groups; g++) {
		for (k = 0; k < K; k++)
			memcpy(p->gather + (size_t)k * p->nbody,
			    thetas + (size_t)k * n + (size_t)g * p->nbody,
			    p->nbody * sizeof(float));
		rc = kn_soma_population_loss(p->m, p->gather, K,
		    group_tokens(p, g), p->B, p->T, p->loss, err);
		if (rc != 0)
			return rc;
		for (k = 0; k < K; k++)
			losses[(size_t)k * p->groups + g] = p->loss[k];
	}
	return KN_OK;
}

int
sa_abl_packed_grad(sa_abl_packed *p, const float *theta, float *grad,
    char *err)
{
	double loss;
	int g, rc;

	for (g = 0; g < p->groups; g++) {
		rc = kn_soma_set_body(p->m, theta + (size_t)g * p->nbody, err);
		if (rc != 0)
			return rc;
		kn_soma_zero_grad(p->m);
		rc = kn_soma_forward_backward(p->m, group_tokens(p, g), p->B,
		    p->T, &loss, err);
		if (rc != 0)
			return rc;
		kn_soma_get_grads(p->m, grad + (size_t)g * p->nbody, NULL);
	}
	kn_soma_zero_grad(p->m);
	return KN_OK;
}

int
sa_abl_span_loss(kn_soma_model *m, const float *bodies, int K,
    const unsigned char *data, size_t len, int B, int T, double *losses,
    char *err)
{
	size_t windows, w0, positions = 0;
	int32_t *tokens;
	float *lk;
	int rc = KN_OK, b, t, k;

	if (K <= 0 || B <= 0 || T <= 0 || len < (size_t)T + 1)
		return kn_error(err, KN_EINVAL, "ablation: span of %zu bytes, "
		    "%d bodies, windows of %d x %d", len, K, B, T + 1);
	windows = (len - 1) / (size_t)T;
	tokens = malloc((size_t)B * (T + 1) * sizeof(int32_t));
	lk = malloc((size_t)K * sizeof(float));
	if (tokens == NULL || lk == NULL) {
		rc = kn_error(err, KN_ENOMEM, "ablation: span buffers");
		goto out;
	}
	for (k = 0; k < K; k++)
		losses[k] = 0;
	for (w0 = 0; w0 < windows; w0 += (size_t)B) {
		int nb = windows - w0 < (size_t)B ? (int)(windows - w0) : B;

		for (b = 0; b < nb; b++)
			for (t = 0; t <= T; t++)
				tokens[(size_t)b * (T + 1) + t] =
				    data[(w0 + (size_t)b) * T + t];
		rc = kn_soma_population_loss(m, bodies, K, tokens, nb, T, lk,
		    err);
		if (rc != 0)
			goto out;
		/* each call is a mean over its own nb * T positions */
		for (k = 0; k < K; k++)
			losses[k] += (double)lk[k] * nb * T;
		positions += (size_t)nb * T;
	}
	for (k = 0; k < K; k++)
		losses[k] /= (double)positions;
out:
	free(tokens);
	free(lk);
	return rc;
}

int
sa_abl_relvar(const float *g, int R, size_t n, const float *ref,
    double *relvar, double *spread, char *err)
{
	double *mean, ref2 = 0, dev = 0, sp = 0;
	size_t i;
	int r;

	if (R < 2 || n == 0)
		return kn_error(err, KN_EINVAL, "ablation: variance of %d "
		    "samples of %zu", R, n);
	if (ref) {
		for (i = 0; i < n; i++)
			ref2 += (double)ref[i] * ref[i];
		if (ref2 == 0)
			return kn_error(err, KN_EINVAL, "ablation: relative "
			    "variance around a zero vector");
	}
	mean = calloc(n, sizeof(double));
	if (mean == NULL)
		return kn_error(err, KN_ENOMEM, "ablation: variance");
	for (r = 0; r < R; r++)
		for (i = 0; i < n; i++) {
			double x = g[(size_t)r * n + i];

			mean[i] += x / R;
			if (ref)
				dev += (x - ref[i]) * (x - ref[i]);
		}
	for (r = 0; r < R; r++)
		for (i = 0; i < n; i++) {
			double e = g[(size_t)r * n + i] - mean[i];

			sp += e * e;
		}
	free(mean);
	if (ref)
		*relvar = dev / R / ref2;
	*spread = sp / (R - 1);
	return KN_OK;
}
