/* SOMA models in the checkpoint format: one table, body then decoder. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "soma/model_file.h"

/* The table of body and decoder, the decoder's offsets after the body's
 * floats; its length, or a negative code. */
static int
model_table(const kn_soma_shape *s, kn_tensor **out, char *err)
{
	int nb = kn_soma_body_tensors(s, NULL, 0);
	int nd = kn_soma_decoder_tensors(s, NULL, 0);
	size_t nbody = kn_soma_body_params(s);
	kn_soma_tensor *st = calloc((size_t)(nb + nd), sizeof(*st));
	kn_tensor *t = calloc((size_t)(nb + nd), sizeof(*t));
	int i;

	if (st == NULL || t == NULL) {
		free(st);
		free(t);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	kn_soma_body_tensors(s, st, nb);
	kn_soma_decoder_tensors(s, st + nb, nd);
	for (i = 0; i < nb + nd; i++) {
		snprintf(t[i].name, sizeof(t[i].name), "%s.%s",
		    i < nb ? "body" : "decoder", st[i].name);
		t[i].ndim = st[i].cols > 1 ? 2 : 1;
		t[i].shape[0] = st[i].rows;
		t[i].shape[1] = st[i].cols;
		t[i].offset = st[i].offset + (i < nb ? 0 : nbody);
	}
	free(st);
	*out = t;
	return nb + nd;
}

/* The flat host buffer of body then decoder, and the table over it; the
 * table's length, or a negative code with nothing to free. */
static int
model_buffers(const kn_soma_shape *s, float **all, kn_tensor **t, char *err)
{
	int n;

	*all = malloc((kn_soma_body_params(s) + kn_soma_decoder_params(s)) *
	    sizeof(float));
	if (*all == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if ((n = model_table(s, t, err)) < 0) {
		free(*all);
		*all = NULL;
	}
	return n;
}

int
sa_model_save(const char *path, const pr_ckpt_meta *meta,
    const kn_soma_shape *s, const float *body, const float *decoder,
    char *err)
{
	size_t nbody = kn_soma_body_params(s), ndec = kn_soma_decoder_params(s);
	float *all;
	kn_tensor *t = NULL;
	char *buf = NULL;
	size_t len;
	int n, rc;

	if ((n = model_buffers(s, &all, &t, err)) < 0)
		return n;
	memcpy(all, body, nbody * sizeof(float));
	memcpy(all + nbody, decoder, ndec * sizeof(float));
	rc = pr_ckpt_encode(meta, t, n, all, &buf, &len, err);
	if (rc == 0)
		rc = pr_ckpt_write_file(path, buf, len, err);
	free(buf);
	free(t);
	free(all);
	return rc;
}

int
sa_model_load(const char *path, const pr_ckpt_meta *expect,
    const kn_soma_shape *s, float *body, float *decoder,
    pr_ckpt_meta *meta_out, char *err)
{
	size_t nbody = kn_soma_body_params(s), ndec = kn_soma_decoder_params(s);
	float *all;
	kn_tensor *t = NULL;
	char *buf = NULL, msg[KN_ERR_LEN];
	size_t len;
	int n, rc;

	if ((n = model_buffers(s, &all, &t, err)) < 0)
		return n;
	rc = pr_ckpt_read_file(path, 16 + 8 * (nbody + ndec) + (1 << 20),
	    &buf, &len, err);
	if (rc == 0) {
		rc = pr_ckpt_decode(buf, len, expect, t, n, all, meta_out,
		    msg);
		if (rc != 0)
			kn_error(err, rc, "%s: %s", path, msg);
	}
	if (rc == 0) {
		if (body != NULL)
			memcpy(body, all, nbody * sizeof(float));
		if (decoder != NULL)
			memcpy(decoder, all + nbody, ndec * sizeof(float));
	}
	free(buf);
	free(t);
	free(all);
	return rc;
}
