/* SOMA's models in `shardmeter export` and `import`: the seed and every
 * expert, each its body and its decoder, read and written with
 * soma/model_file.c so the checkpoints come back the same bytes.  The
 * router is not exported: it lives in the spec's clusters folder. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/cli/internal.h"
#include "kernels/error.h"
#include "kernels/soma_model.h"
#include "soma/model_file.h"
#include "soma/trainer.h"

const char xp__soma_tensors_doc[] =
    "PREFIX is seed (the N = 1 seed model) or expertE (E from 0). "
    "PREFIX.body.blockB.{w_ih (4d,d), w_hh (4d,d), b (4d; gates i, f, g, "
    "o), w1 (m d,d), b1 (m d), w2 (d,m d), b2 (d)}; PREFIX.decoder.e "
    "(256,d): the weight-tied byte embedding and output; "
    "PREFIX.decoder.dec_bias (256).";
const char xp__soma_forward_doc[] =
    "x = e[byte]; per block: x += LSTM(x) (state zero at the start of a "
    "sequence), x += w2 gelu_tanh(w1 x + b1) + b2; logits = x e^T + "
    "dec_bias; no LayerNorm. At inference the top_k experts the router "
    "picks (the router is in the spec's clusters folder, not here) have "
    "their next-byte probabilities averaged.";

static void
soma_name(xp_model *x, const char *dir, sa_kind kind, int expert)
{
	memset(x, 0, sizeof(*x));
	x->block = kind == SA_EXPERT ? expert : 0;
	snprintf(x->kind_name, sizeof(x->kind_name), "%s",
	    sa_kind_name(kind));
	if (kind == SA_EXPERT)
		snprintf(x->prefix, sizeof(x->prefix), "expert%d", expert);
	else
		snprintf(x->prefix, sizeof(x->prefix), "seed");
	if (kind == SA_EXPERT)
		snprintf(x->path, sizeof(x->path), "%s/expert-%d.ckpt", dir,
		    expert);
	else
		snprintf(x->path, sizeof(x->path), "%s/seed.ckpt", dir);
}

int
xp__soma_find(const pr_spec *s, const char *dir, xp_summary *sum,
    char *err)
{
	xp_model *x;
	int e;

	soma_name(&sum->models[0], dir, SA_SEED, 0);
	if (access(sum->models[0].path, F_OK) == 0)
		sum->nmodels++;
	for (e = 0; e < s->soma.experts; e++) {
		x = &sum->models[sum->nmodels++];
		soma_name(x, dir, SA_EXPERT, e);
		if (access(x->path, F_OK) != 0)
			return kn_error(err, KN_EIO, "missing checkpoint %.150s: "
			    "train it with 'shardmeter train --expert %d'",
			    x->path, e);
	}
	return KN_OK;
}

/* The body's and the decoder's tables of shape sh into new arrays t[0],
 * t[1] of nt[0], nt[1] entries. */
static int
soma_tables(const kn_soma_shape *sh, kn_soma_tensor **t, int *nt, char *err)
{
	nt[0] = kn_soma_body_tensors(sh, NULL, 0);
	nt[1] = kn_soma_decoder_tensors(sh, NULL, 0);
	t[0] = calloc((size_t)nt[0], sizeof(**t));
	t[1] = calloc((size_t)nt[1], sizeof(**t));
	if (t[0] == NULL || t[1] == NULL) {
		free(t[0]);
		free(t[1]);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	kn_soma_body_tensors(sh, t[0], nt[0]);
	kn_soma_decoder_tensors(sh, t[1], nt[1]);
	return KN_OK;
}

int
xp__soma_count(const pr_spec *s)
{
	kn_soma_shape sh = sa_expert_shape(s);

	return kn_soma_body_tensors(&sh, NULL, 0) +
	    kn_soma_decoder_tensors(&sh, NULL, 0);
}

/* x's tensors, pointing into buf[0..1], appended to out at *n. */
static int
soma_split(const kn_soma_shape *sh, const xp_model *x, float *const *buf,
    pr_st_tensor *out, int *n, int max, char *err)
{
	static const char *const part[2] = { "body", "decoder" };
	kn_soma_tensor *t[2];
	int nt[2], p, i, rc;

	if ((rc = soma_tables(sh, t, nt, err)) != 0)
		return rc;
	for (p = 0; p < 2; p++)
		for (i = 0; i < nt[p]; i++) {
			pr_st_tensor *o = &out[*n];

			if (*n >= max) {
				rc = kn_error(err, KN_EINVAL, "too many tensors");
				break;
			}
			memset(o, 0, sizeof(*o));
			snprintf(o->name, sizeof(o->name), "%s.%s.%s", x->prefix,
			    part[p], t[p][i].name);
			o->ndim = t[p][i].cols > 1 ? 2 : 1;
			o->shape[0] = t[p][i].rows;
			o->shape[1] = t[p][i].cols;
			o->values = buf[p] + t[p][i].offset;
			(*n)++;
		}
	free(t[0]);
	free(t[1]);
	return rc;
}

static int
soma_alloc(const kn_soma_shape *sh, float **buf, char *err)
{
	buf[0] = malloc(kn_soma_body_params(sh) * sizeof(float));
	buf[1] = malloc(kn_soma_decoder_params(sh) * sizeof(float));
	if (buf[0] == NULL || buf[1] == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return KN_OK;
}

int
xp__soma_read(const pr_spec *s, const char *run_id, xp_model *x,
    float **buf, pr_st_tensor *out, int *n, int max, char *err)
{
	kn_soma_shape sh = sa_expert_shape(s);
	pr_ckpt_meta expect = { 0 }, meta;
	char msg[KN_ERR_LEN];
	int rc;

	if ((rc = soma_alloc(&sh, buf, err)) != 0)
		return rc;
	x->params = kn_soma_body_params(&sh) + kn_soma_decoder_params(&sh);
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
	expect.block = x->block;
	snprintf(expect.kind, sizeof(expect.kind), "%s", x->kind_name);
	if ((rc = sa_model_load(x->path, &expect, &sh, buf[0], buf[1], &meta,
	    msg)) != 0)
		return kn_error(err, rc, "%.100s: %.150s", x->path, msg);
	x->step = meta.step;
	x->round = meta.round;
	return soma_split(&sh, x, buf, out, n, max, err);
}

json_t *
xp__soma_json(const pr_spec *s, const xp_model *x)
{
	kn_soma_shape sh = sa_expert_shape(s);

	return json_pack("{s:s,s:s,s:i,s:I,s:I,s:i,s:i,s:i}", "prefix",
	    x->prefix, "kind", x->kind_name, "block", x->block, "step",
	    (json_int_t)x->step, "round", (json_int_t)x->round, "width",
	    sh.width, "mlp_mult", sh.mlp_mult, "layers", sh.blocks);
}

int
xp__soma_name(const pr_spec *s, const char *kind, int index,
    const char *dir, xp_model *x)
{
	if (strcmp(kind, "expert") == 0 && index >= 0 &&
	    index < s->soma.experts)
		soma_name(x, dir, SA_EXPERT, index);
	else if (strcmp(kind, "seed") == 0 && index == 0)
		soma_name(x, dir, SA_SEED, 0);
	else
		return -1;
	return 0;
}

int
xp__soma_gather(const pr_st_file *f, const pr_spec *s, xp_model *x,
    unsigned char *taken, float **buf, char *err)
{
	kn_soma_shape sh = sa_expert_shape(s);
	int max = xp__soma_count(s), n = 0, rc;
	pr_st_tensor *want = calloc((size_t)max, sizeof(*want));

	if (want == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	x->params = kn_soma_body_params(&sh) + kn_soma_decoder_params(&sh);
	rc = soma_alloc(&sh, buf, err);
	if (rc == 0)
		rc = soma_split(&sh, x, buf, want, &n, max, err);
	if (rc == 0)
		rc = xp__take(f, want, n, taken, err);
	free(want);
	return rc;
}

int
xp__soma_save(const pr_spec *s, const char *run_id, const xp_model *x,
    float *const *buf, char *err)
{
	kn_soma_shape sh = sa_expert_shape(s);
	pr_ckpt_meta meta = { 0 };

	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = x->block;
	snprintf(meta.kind, sizeof(meta.kind), "%s", x->kind_name);
	meta.step = x->step;
	meta.round = x->round;
	return sa_model_save(x->path, &meta, &sh, buf[0], buf[1], err);
}
