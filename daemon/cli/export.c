/* `shardmeter export` and `import`: a run's checkpoints to one
 * safetensors file (proto/safetensors.c) and back.  The per-layer
 * tensors of a checkpoint ((L, ...) each) are cut into one tensor per
 * layer, so a reader maps names to layers without knowing our layout;
 * import glues them back in the checkpoint's order, so the round trip
 * gives the same bytes. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/cli/internal.h"
#include "daemon/blocktrain/train.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "proto/safetensors.h"

/* A whole export read back: bounded by the largest run we would write. */
#define XP_MAX_FILE_BYTES ((size_t)XP_MAX_MODELS * TR_CKPT_MAX_BYTES)

/* Checkpoint tensor names (proto/PROTOCOL.md) to exported names, and
 * whether the first dimension is the layer. */
static const struct xp_name {
	const char *ckpt, *name;
	int per_layer;
} xp_names[] = {
	{ "wte", "wte", 0 },
	{ "wpe", "wpe", 0 },
	{ "qkv_w", "attn.qkv.weight", 1 },
	{ "attproj_w", "attn.proj.weight", 1 },
	{ "fc_w", "mlp.fc.weight", 1 },
	{ "fcproj_w", "mlp.proj.weight", 1 },
	{ "head_w", "head.weight", 0 },
	{ "ln1_w", "ln1.weight", 1 },
	{ "ln1_b", "ln1.bias", 1 },
	{ "qkv_b", "attn.qkv.bias", 1 },
	{ "attproj_b", "attn.proj.bias", 1 },
	{ "ln2_w", "ln2.weight", 1 },
	{ "ln2_b", "ln2.bias", 1 },
	{ "fc_b", "mlp.fc.bias", 1 },
	{ "fcproj_b", "mlp.proj.bias", 1 },
	{ "lnf_w", "lnf.weight", 0 },
	{ "lnf_b", "lnf.bias", 0 },
	{ "head_b", "head.bias", 0 },
};
#define XP_NNAMES ((int)(sizeof(xp_names) / sizeof(xp_names[0])))

static const char xp_tensors_doc[] =
    "PREFIX is blockB (B from 1, block B owns noise interval (cuts[B-1], "
    "cuts[B]]), e2e or causal. PREFIX.wte (257,d): byte embedding, row "
    "256 the mask symbol; PREFIX.wpe (n,d): position embedding; per layer "
    "l from 0, PREFIX.layerl.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}"
    ".{weight,bias}; PREFIX.lnf.{weight,bias}; PREFIX.head.{weight,bias} "
    "(256,d),(256). Linear weights are (out,in): y = x W^T + b.";
/* What a reader needs to recompute shardmeter eval's figures from the
 * file alone: the model, the causal LM's targets, where the scored
 * windows start and how their noise is drawn (blocktrain.c eval_fill,
 * kernels/rng.c). */
static const char xp_forward_doc[] =
    "x = wte[sym] + wpe[pos]; per layer: x += proj(attn(ln1(x))), x += "
    "mlp.proj(gelu_tanh(mlp.fc(ln2(x)))); logits = head(lnf(x)). "
    "LayerNorm eps 1e-5. qkv rows: q, k, v, each d wide, head h at "
    "columns h*d/H..(h+1)*d/H; scores scaled by 1/sqrt(d/H); causal 0: "
    "every position sees all n, causal 1: position i sees j <= i. "
    "position_block L > 1 (0: none): position i sees j < (floor(i/L) + "
    "1) L; L = 1, the next-byte form: position i sees j <= i, its input "
    "is the symbol of position i - 1 (256 at 0) and it predicts byte i. "
    "The causal LM (causal 1) reads windows of n + 1 bytes: its input "
    "is bytes 0..n-1 and position i predicts byte i + 1; its loss is the "
    "mean over the n positions of -log softmax(logits_i)[byte i + 1]. "
    "Scoring (shardmeter eval): W windows (1024 by default) of a file of "
    "len bytes, window k from 0 starting at byte floor(k (len - n - 1) / "
    "W), evenly spaced and the same for every model. A block of "
    "interval (lo, hi] scores S = 2 noise levels per window, j = 0, 1; "
    "case (k, j) draws from Philox4x32-10 (Random123's constants) with "
    "key 0x5eed (the two 32-bit words low first) and counter (index low, "
    "index high, stream low, stream high), index 0, 1, ... taking the four "
    "output words in order, each word u giving the uniform (u >> 8) / "
    "2^24; stream = f(f(f(f(2 + G) ^ (k + G)) ^ (j + G)) ^ G), G = "
    "0x9E3779B97F4A7C15, f the splitmix64 finaliser (z ^= z >> 30, z *= "
    "0xBF58476D1CE4E5B9, z ^= z >> 27, z *= 0x94D049BB133111EB, z ^= z >> "
    "31), all modulo 2^64. The first uniform u0 gives t = lo + (hi - lo) "
    "(j + u0) / S, at least 0.001; then position i (0..n-1) is masked "
    "when the next uniform is below t, and each masked position adds "
    "-log p(byte) / (t n); the block's share is (hi - lo) times the "
    "mean over the W S cases. With position blocks below the window the same stream draws "
    "each position block's count of masked bytes instead.";

static const struct xp_name *
xp_name_of(const char *ckpt)
{
	int i;

	for (i = 0; i < XP_NNAMES; i++)
		if (strcmp(xp_names[i].ckpt, ckpt) == 0)
			return &xp_names[i];
	return NULL;
}

/* The exported tensors of one model whose checkpoint tensors are t
 * (count) with values at host + t[i].offset: appended to out at *n. */
static int
xp_split(const char *prefix, const kn_tensor *t, int count,
    const float *host, pr_st_tensor *out, int *n, int max, char *err)
{
	int i, l, d;

	for (i = 0; i < count; i++) {
		const struct xp_name *x = xp_name_of(t[i].name);
		int layers = x != NULL && x->per_layer ? (int)t[i].shape[0] : 1;
		size_t per = kn_tensor_numel(&t[i]) / (size_t)layers;

		if (x == NULL)
			return kn_error(err, KN_EINVAL, "the model has a tensor "
			    "%s that the exporter does not know", t[i].name);
		for (l = 0; l < layers; l++) {
			pr_st_tensor *o = &out[*n];

			if (*n >= max)
				return kn_error(err, KN_EINVAL, "too many "
				    "tensors");
			memset(o, 0, sizeof(*o));
			if (x->per_layer)
				snprintf(o->name, sizeof(o->name),
				    "%s.layer%d.%s", prefix, l, x->name);
			else
				snprintf(o->name, sizeof(o->name), "%s.%s",
				    prefix, x->name);
			o->ndim = t[i].ndim - x->per_layer;
			for (d = 0; d < o->ndim; d++)
				o->shape[d] = t[i].shape[d + x->per_layer];
			o->values = host + t[i].offset + (size_t)l * per;
			(*n)++;
		}
	}
	return KN_OK;
}

/* An inference model of the model's shape on the CPU, for its tensor
 * table (names, shapes, offsets) only. */
static int
xp_table(kn_model **m, const pr_spec *s, const xp_model *x, char *err)
{
	kn_model_shape shape = tr_model_shape(s, x->kind, x->block);

	return kn_model_create_inference(m, &shape, kn_cpu_backend(), 1,
	    KN_STORE_F32, err);
}

static void
xp_name_model(xp_model *x, bt_kind kind, int block)
{
	x->kind = kind;
	x->block = kind == BT_BLOCK ? block : 0;
	snprintf(x->kind_name, sizeof(x->kind_name), "%s", bt_kind_name(kind));
	if (kind == BT_BLOCK)
		snprintf(x->prefix, sizeof(x->prefix), "block%d", block);
	else
		snprintf(x->prefix, sizeof(x->prefix), "%s", bt_kind_name(kind));
}

/* Reads and verifies one checkpoint into a new host buffer *host laid out
 * by m's table. */
static int
xp_read_ckpt(xp_model *x, kn_model *m, const char *run_id, float **host,
    char *err)
{
	pr_ckpt_meta expect = { 0 }, meta;
	const kn_tensor *t;
	char *buf = NULL, msg[KN_ERR_LEN];
	size_t len;
	int count, rc;

	x->params = kn_model_num_params(m);
	if ((*host = malloc(x->params * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
	expect.block = x->block;
	snprintf(expect.kind, sizeof(expect.kind), "%s", x->kind_name);
	rc = pr_ckpt_read_file(x->path, TR_CKPT_MAX_BYTES, &buf, &len, msg);
	if (rc == 0) {
		t = kn_model_tensors(m, &count);
		rc = pr_ckpt_decode(buf, len, &expect, t, count, *host, &meta,
		    msg);
	}
	free(buf);
	if (rc != 0)
		return kn_error(err, rc, "%.100s: %.150s", x->path, msg);
	x->step = meta.step;
	x->round = meta.round;
	return KN_OK;
}

/* The models of the run in dir: every block, then the references
 * present. */
static int
xp_find_models(const pr_spec *s, const char *dir, xp_summary *sum,
    char *err)
{
	static const bt_kind refs[] = { BT_E2E, BT_CAUSAL };
	xp_model *x;
	int b, i;

	for (b = 1; b <= s->blocks; b++) {
		x = &sum->models[sum->nmodels++];
		xp_name_model(x, BT_BLOCK, b);
		tr_model_path(x->path, sizeof(x->path), dir, BT_BLOCK, b, "ckpt");
		if (access(x->path, F_OK) != 0)
			return kn_error(err, KN_EIO, "missing checkpoint %.150s: "
			    "train it, or fetch it with 'shardmeter assemble'",
			    x->path);
	}
	for (i = 0; i < 2; i++) {
		x = &sum->models[sum->nmodels];
		xp_name_model(x, refs[i], 0);
		tr_model_path(x->path, sizeof(x->path), dir, refs[i], 0, "ckpt");
		if (access(x->path, F_OK) == 0)
			sum->nmodels++;
	}
	return KN_OK;
}

/* The metadata's "models" entry of x. */
static json_t *
xp_model_json(const pr_spec *s, const xp_model *x)
{
	kn_model_shape sh = tr_model_shape(s, x->kind, x->block);
	double lo, hi;

	bt_interval(s, x->kind, x->block - 1, &lo, &hi);
	return json_pack("{s:s,s:s,s:i,s:I,s:I,s:i,s:i,s:i,s:i,s:i,s:i,"
	    "s:[f,f]}", "prefix", x->prefix, "kind", bt_kind_name(x->kind),
	    "block", x->block, "step", (json_int_t)x->step, "round",
	    (json_int_t)x->round, "width", sh.width, "heads", sh.heads,
	    "layers", sh.layers, "window", sh.window, "causal", sh.causal,
	    "position_block", !sh.causal && sh.pos_block > 0 &&
	    sh.pos_block < sh.window ? sh.pos_block : 0, "interval", lo, hi);
}

/* The metadata strings; each *owned[i] is the caller's to free. */
static int
xp_metadata(const pr_spec *s, const xp_summary *sum, pr_st_meta *meta,
    char **owned, char *err)
{
	json_t *models = json_array(), *cuts = json_array();
	int soma = pr_spec_method(s) == PR_METHOD_SOMA, i;
	size_t slen;
	FILE *f;

	for (i = 0; i < sum->nmodels; i++)
		json_array_append_new(models, soma ?
		    xp__soma_json(s, &sum->models[i]) :
		    xp_model_json(s, &sum->models[i]));
	for (i = 0; i <= s->blocks; i++)
		json_array_append_new(cuts, json_real(s->cuts[i]));
	owned[0] = json_dumps(models, JSON_COMPACT | JSON_PRESERVE_ORDER);
	owned[1] = json_dumps(cuts, JSON_COMPACT);
	json_decref(models);
	json_decref(cuts);
	owned[2] = NULL;
	if ((f = open_memstream(&owned[2], &slen)) != NULL) {
		if (pr_spec_print(f, s) != 0) {
			fclose(f);
			free(owned[2]);
			owned[2] = NULL;
		} else if (fclose(f) != 0) {
			free(owned[2]);
			owned[2] = NULL;
		}
	}
	if (owned[0] == NULL || owned[1] == NULL || owned[2] == NULL)
		return kn_error(err, KN_ENOMEM, "cannot format the metadata");
	meta[0] = (pr_st_meta){ "format", XP_FORMAT };
	meta[1] = (pr_st_meta){ "run_id", sum->run_id };
	meta[2] = (pr_st_meta){ "spec", owned[2] };
	meta[3] = (pr_st_meta){ "cuts", owned[1] };
	meta[4] = (pr_st_meta){ "models", owned[0] };
	meta[5] = (pr_st_meta){ "tensors", soma ? xp__soma_tensors_doc :
	    xp_tensors_doc };
	meta[6] = (pr_st_meta){ "forward", soma ? xp__soma_forward_doc :
	    xp_forward_doc };
	return KN_OK;
}

#define XP_NMETA 7

static int
xp_encode(const pr_spec *s, xp_summary *sum, pr_st_tensor *tensors, int n,
    char **buf, size_t *len, char *err)
{
	pr_st_meta meta[XP_NMETA];
	char *owned[3] = { NULL, NULL, NULL };
	int rc, i;

	rc = xp_metadata(s, sum, meta, owned, err);
	if (rc == 0)
		rc = pr_st_encode(tensors, n, meta, XP_NMETA, buf, len, err);
	for (i = 0; i < 3; i++)
		free(owned[i]);
	return rc;
}

/* Tensors one model of s exports: its table with each per-layer tensor
 * counted once per layer. */
static int
xp_count(const pr_spec *s, const xp_model *x)
{
	kn_model_shape sh = tr_model_shape(s, x->kind, x->block);
	int i, n = 0;

	for (i = 0; i < XP_NNAMES; i++)
		n += xp_names[i].per_layer ? sh.layers : 1;
	return n;
}

/* Reads model i of sum into buffers at buf[2i..2i+1] and appends its
 * tensors to out at *n. */
static int
xp_read_model(const pr_spec *s, xp_summary *sum, int i, float **buf,
    pr_st_tensor *out, int *n, int max, char *err)
{
	xp_model *x = &sum->models[i];
	const kn_tensor *t;
	kn_model *m;
	int count, rc;

	if (pr_spec_method(s) == PR_METHOD_SOMA)
		return xp__soma_read(s, sum->run_id, x, &buf[2 * i], out, n,
		    max, err);
	if ((rc = xp_table(&m, s, x, err)) != 0)
		return rc;
	rc = xp_read_ckpt(x, m, sum->run_id, &buf[2 * i], err);
	t = kn_model_tensors(m, &count);
	if (rc == 0)
		rc = xp_split(x->prefix, t, count, buf[2 * i], out, n, max,
		    err);
	kn_model_free(m);
	return rc;
}

int
xp_export(const pr_spec *s, const char *run_id, const char *dir,
    const char *out, xp_summary *sum, char *err)
{
	float *bufs[2 * XP_MAX_MODELS] = { NULL };
	int soma = pr_spec_method(s) == PR_METHOD_SOMA;
	pr_st_tensor *tensors = NULL;
	char *buf = NULL;
	size_t len = 0;
	int i, n = 0, max = 0, rc;

	memset(sum, 0, sizeof(*sum));
	snprintf(sum->run_id, sizeof(sum->run_id), "%s", run_id);
	if ((rc = soma ? xp__soma_find(s, dir, sum, err) :
	    xp_find_models(s, dir, sum, err)) != 0)
		return rc;
	for (i = 0; i < sum->nmodels; i++)
		max += soma ? xp__soma_count(s) :
		    xp_count(s, &sum->models[i]);
	if ((tensors = calloc((size_t)max, sizeof(*tensors))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < sum->nmodels && rc == 0; i++)
		rc = xp_read_model(s, sum, i, bufs, tensors, &n, max, err);
	if (rc == 0)
		rc = xp_encode(s, sum, tensors, n, &buf, &len, err);
	if (rc == 0)
		rc = pr_ckpt_write_file(out, buf, len, err);
	sum->tensors = (size_t)n;
	sum->bytes = len;
	free(buf);
	free(tensors);
	for (i = 0; i < 2 * XP_MAX_MODELS; i++)
		free(bufs[i]);
	return rc;
}

/* Import */

static void
xp_shape_str(const pr_st_tensor *t, char *buf, size_t len)
{
	size_t o = 0;
	int d;

	o += (size_t)snprintf(buf, len, "(");
	for (d = 0; d < t->ndim && o < len; d++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "",
		    (long long)t->shape[d]);
	if (o < len)
		snprintf(buf + o, len - o, ")");
}

/* The spec of the file's metadata, checked against its run id. */
static int
xp_import_spec(const pr_st_file *f, const char *want, pr_spec *s,
    char *run_id, char *err)
{
	const char *fmt = pr_st_meta_get(f, "format");
	const char *text = pr_st_meta_get(f, "spec");
	const char *id = pr_st_meta_get(f, "run_id");
	char msg[PR_ERR_LEN];

	if (fmt == NULL || strcmp(fmt, XP_FORMAT) != 0)
		return kn_error(err, KN_EINVAL, "metadata format is %.40s%s%s, "
		    "not \"%s\": not a ShardMeter export", fmt ? "\"" : "no "
		    "format", fmt ? fmt : "", fmt ? "\"" : "", XP_FORMAT);
	if (text == NULL || id == NULL)
		return kn_error(err, KN_EINVAL, "metadata lacks %s",
		    text == NULL ? "the spec" : "the run id");
	if (pr_spec_parse(s, text, strlen(text), msg) != 0)
		return kn_error(err, KN_EINVAL, "the spec in the metadata: "
		    "%.200s", msg);
	if (pr_spec_run_id(s, run_id, msg) != 0)
		return kn_error(err, KN_EINVAL, "%.200s", msg);
	if (strcmp(run_id, id) != 0)
		return kn_error(err, KN_EINVAL, "the spec in the metadata hashes "
		    "to run %.16s..., not to its run_id %.16s...", run_id, id);
	if (want != NULL && strcmp(want, run_id) != 0)
		return kn_error(err, KN_EINVAL, "the file is of run %.16s..., "
		    "not of --spec's run %.16s...", run_id, want);
	return KN_OK;
}

/* One entry of the metadata's "models", into x; its prefix must be the
 * one export gives that kind and block. */
static int
xp_import_entry(const pr_spec *s, const char *dir, json_t *e, int i,
    xp_model *x, char *err)
{
	const char *prefix, *kind;
	json_int_t step, round;
	int block;

	if (json_unpack(e, "{s:s,s:s,s:i,s:I,s:I}", "prefix", &prefix, "kind",
	    &kind, "block", &block, "step", &step, "round", &round) != 0)
		return kn_error(err, KN_EINVAL, "metadata models[%d] lacks "
		    "prefix, kind, block, step or round", i);
	if (pr_spec_method(s) == PR_METHOD_SOMA) {
		if (xp__soma_name(s, kind, block, dir, x) != 0)
			return kn_error(err, KN_EINVAL, "metadata models[%d]: "
			    "kind %.16s with index %d is not a model of this "
			    "run of %d experts", i, kind, block,
			    s->soma.experts);
	} else if (strcmp(kind, "block") == 0 && block >= 1 &&
	    block <= s->blocks)
		xp_name_model(x, BT_BLOCK, block);
	else if (strcmp(kind, "e2e") == 0 && block == 0)
		xp_name_model(x, BT_E2E, 0);
	else if (strcmp(kind, "causal") == 0 && block == 0)
		xp_name_model(x, BT_CAUSAL, 0);
	else
		return kn_error(err, KN_EINVAL, "metadata models[%d]: kind "
		    "%.16s with block %d is not a model of this %d-block run",
		    i, kind, block, s->blocks);
	if (strcmp(prefix, x->prefix) != 0 || step < 0 || round < 0)
		return kn_error(err, KN_EINVAL, "metadata models[%d]: prefix "
		    "%.16s (want %s), step and round >= 0", i, prefix,
		    x->prefix);
	x->step = step;
	x->round = round;
	if (x->path[0] == '\0' && tr_model_path(x->path, sizeof(x->path), dir,
	    x->kind, x->block, "ckpt") != 0)
		return kn_error(err, KN_EINVAL, "path too long");
	return KN_OK;
}

int
xp__take(const pr_st_file *f, const pr_st_tensor *want, int n,
    unsigned char *taken, char *err)
{
	const pr_st_tensor *got;
	char gs[64], ws[64];
	int i, d, rc = 0;

	for (i = 0; i < n && rc == 0; i++) {
		if ((got = pr_st_find(f, want[i].name)) == NULL)
			return kn_error(err, KN_EINVAL, "tensor %s is missing",
			    want[i].name);
		for (d = 0; d < want[i].ndim && got->ndim == want[i].ndim; d++)
			if (got->shape[d] != want[i].shape[d])
				break;
		if (got->ndim != want[i].ndim || d < want[i].ndim) {
			xp_shape_str(got, gs, sizeof(gs));
			xp_shape_str(&want[i], ws, sizeof(ws));
			return kn_error(err, KN_EINVAL, "tensor %s has shape %s; "
			    "the spec makes it %s", want[i].name, gs, ws);
		}
		taken[got - f->tensors] = 1;
		/* want[i] points into the model's buffer: read straight
		 * there */
		rc = pr_st_read_values(f, got, (float *)want[i].values, err);
	}
	return rc;
}

/* One BlockTrain model of the file to a checkpoint in a new buffer *ck
 * (*cklen). */
static int
xp_import_model(const pr_st_file *f, const pr_spec *s, const char *run_id,
    xp_model *x, unsigned char *taken, char **ck, size_t *cklen, char *err)
{
	pr_ckpt_meta meta = { 0 };
	pr_st_tensor *want = NULL;
	const kn_tensor *t;
	kn_model *m;
	float *host;
	int count, n = 0, max, rc;

	if ((rc = xp_table(&m, s, x, err)) != 0)
		return rc;
	t = kn_model_tensors(m, &count);
	x->params = kn_model_num_params(m);
	max = xp_count(s, x);
	host = malloc(x->params * sizeof(float));
	want = calloc((size_t)max, sizeof(*want));
	rc = host == NULL || want == NULL ? kn_error(err, KN_ENOMEM, "out of "
	    "memory") : xp_split(x->prefix, t, count, host, want, &n, max, err);
	if (rc == 0)
		rc = xp__take(f, want, n, taken, err);
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = x->block;
	snprintf(meta.kind, sizeof(meta.kind), "%s", x->kind_name);
	meta.step = x->step;
	meta.round = x->round;
	if (rc == 0)
		rc = pr_ckpt_encode(&meta, t, count, host, ck, cklen, err);
	free(want);
	free(host);
	kn_model_free(m);
	return rc;
}

/* What import has made of the file before it writes: a BlockTrain
 * model's checkpoint ck[i] (cklen[i] bytes), a SOMA model's body and
 * decoder at bufs[2i], bufs[2i+1]. */
struct xp_staged {
	char *ck[XP_MAX_MODELS];
	size_t cklen[XP_MAX_MODELS];
	float *bufs[2 * XP_MAX_MODELS];
};

static void
xp_staged_free(struct xp_staged *st)
{
	int i;

	for (i = 0; i < XP_MAX_MODELS; i++)
		free(st->ck[i]);
	for (i = 0; i < 2 * XP_MAX_MODELS; i++)
		free(st->bufs[i]);
}

/* Model i of the metadata's list e: named, checked and staged. */
static int
xp_import_one(const pr_st_file *f, const pr_spec *s, const char *dir,
    json_t *e, int i, xp_summary *sum, unsigned char *taken,
    struct xp_staged *st, char *err)
{
	xp_model *x = &sum->models[i];
	int j, rc;

	if ((rc = xp_import_entry(s, dir, e, i, x, err)) != 0)
		return rc;
	for (j = 0; j < i; j++)
		if (strcmp(sum->models[j].prefix, x->prefix) == 0)
			return kn_error(err, KN_EINVAL, "metadata lists model "
			    "%s twice", x->prefix);
	if (pr_spec_method(s) == PR_METHOD_SOMA)
		return xp__soma_gather(f, s, x, taken, &st->bufs[2 * i], err);
	return xp_import_model(f, s, sum->run_id, x, taken, &st->ck[i],
	    &st->cklen[i], err);
}

/* Every model listed, checked and staged; nothing of the file may be
 * left over. */
static int
xp_import_models(const pr_st_file *f, const pr_spec *s, const char *dir,
    xp_summary *sum, struct xp_staged *st, char *err)
{
	const char *text = pr_st_meta_get(f, "models");
	unsigned char *taken;
	json_t *models, *e;
	size_t i;
	int rc = 0, j;

	if (text == NULL || (models = json_loads(text, 0, NULL)) == NULL)
		return kn_error(err, KN_EINVAL, "metadata models is missing or "
		    "not JSON");
	if (!json_is_array(models) || json_array_size(models) < 1 ||
	    json_array_size(models) > XP_MAX_MODELS) {
		json_decref(models);
		return kn_error(err, KN_EINVAL, "metadata models is not an "
		    "array of 1 to %d models", XP_MAX_MODELS);
	}
	if ((taken = calloc((size_t)f->ntensors + 1, 1)) == NULL) {
		json_decref(models);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	json_array_foreach(models, i, e) {
		sum->nmodels = (int)i + 1;
		if ((rc = xp_import_one(f, s, dir, e, (int)i, sum, taken, st,
		    err)) != 0)
			break;
	}
	json_decref(models);
	for (j = 0; j < f->ntensors && rc == 0; j++)
		if (!taken[j])
			rc = kn_error(err, KN_EINVAL, "tensor %.64s belongs to "
			    "no model the metadata lists", f->tensors[j].name);
	free(taken);
	return rc;
}

static int
xp_import_write(const pr_spec *s, int force, xp_summary *sum,
    struct xp_staged *st, char *err)
{
	int i, rc;

	for (i = 0; i < sum->nmodels; i++)
		if (!force && access(sum->models[i].path, F_OK) == 0)
			return kn_error(err, KN_EINVAL, "%.150s exists: give "
			    "--force to replace it", sum->models[i].path);
	for (i = 0; i < sum->nmodels; i++) {
		if (pr_spec_method(s) == PR_METHOD_SOMA)
			rc = xp__soma_save(s, sum->run_id, &sum->models[i],
			    &st->bufs[2 * i], err);
		else
			rc = pr_ckpt_write_file(sum->models[i].path, st->ck[i],
			    st->cklen[i], err);
		if (rc != 0)
			return rc;
	}
	return KN_OK;
}

int
xp_import(const char *in, const char *dir, const char *want_run_id,
    int force, xp_summary *sum, char *err)
{
	char *buf = NULL, msg[PR_ERR_LEN];
	struct xp_staged *st;
	size_t len;
	pr_st_file f;
	pr_spec s;
	int rc;

	memset(sum, 0, sizeof(*sum));
	if ((rc = pr_ckpt_read_file(in, XP_MAX_FILE_BYTES, &buf, &len,
	    err)) != 0)
		return rc;
	sum->bytes = len;
	if ((rc = pr_st_decode(buf, len, &f, msg)) != 0) {
		free(buf);
		return kn_error(err, rc, "%.100s: %.150s", in, msg);
	}
	sum->tensors = (size_t)f.ntensors;
	if ((st = calloc(1, sizeof(*st))) == NULL)
		rc = kn_error(msg, KN_ENOMEM, "out of memory");
	if (rc == 0)
		rc = xp_import_spec(&f, want_run_id, &s, sum->run_id, msg);
	if (rc == 0)
		rc = xp_import_models(&f, &s, dir, sum, st, msg);
	if (rc != 0)
		kn_error(err, rc, "%.100s: %.150s", in, msg);
	else
		rc = xp_import_write(&s, force, sum, st, err);
	if (st != NULL)
		xp_staged_free(st);
	free(st);
	pr_st_free(&f);
	free(buf);
	return rc;
}
