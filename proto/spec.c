/* Reading, validating, hashing and printing the run spec, all from one
 * table of its keys.  The run id hashes the parsed values, never the
 * text, so key order, spacing and comments do not change it. */
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <libgen.h>
#include <math.h>
#include <msgpack.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/intcheck.h"
#include "proto/spec.h"

struct parse_ctx {
	pr_spec *s;
	char *err;
	int failed;
	char cuts_text[1024];
	int have_cuts;
	char layers_text[1024];
	int have_layers;
	int have_layers_per_block;
};

static const pr_key *spec_key(const char *section, const char *name);

/* A list kept as text until every key is in, since it is checked
 * against blocks, which may come later in the file. */
static int
keep_text(const pr_key *k, const char *v, char *buf, size_t size, int *have,
    char *msg)
{
	if (strlen(v) >= size)
		return kn_error(msg, KN_EINVAL, "[%s] %s: too long", k->section,
		    k->name);
	strcpy(buf, v);
	*have = 1;
	return KN_OK;
}

static int
set_cuts(const pr_key *k, void *obj, void *ctx, const char *v, char *msg)
{
	struct parse_ctx *c = ctx;

	(void)obj;
	return keep_text(k, v, c->cuts_text, sizeof(c->cuts_text),
	    &c->have_cuts, msg);
}

/* Printed comment lines stay this short: inih reads a longer line as
 * two, and the second is not 'key = value'. */
#define CUTS_COMMENT_WIDTH 72

/* Equal cuts are derived from blocks, and printed commented out, over as
 * many comment lines as they need. */
static int
format_cuts(const pr_key *k, const void *obj, char *buf, size_t len)
{
	const pr_spec *s = obj;
	size_t used = 0, line = 0;
	int b;

	(void)k;
	for (b = 1; b < s->blocks && b < PR_MAX_BLOCKS && used < len; b++) {
		const char *sep = b > 1 ? ", " : "";
		char x[32];
		int n;

		pr_key_real(s->cuts[b], x, sizeof(x));
		if (s->equal_cuts && b > 1 &&
		    used - line + strlen(x) + 2 > CUTS_COMMENT_WIDTH) {
			sep = ",\n#   ";
			line = used + 2;
		}
		n = snprintf(buf + used, len - used, "%s%s", sep, x);
		used += n > 0 ? (size_t)n : 0;
	}
	return s->equal_cuts;
}

/* "0.9, 0.95": beta1 and beta2 on one line */
static int
set_betas(const pr_key *k, void *obj, void *ctx, const char *v, char *msg)
{
	pr_spec *s = obj;
	const char *second;
	char *end, *end2;
	int rc;

	(void)ctx;
	s->beta1 = strtod(v, &end);
	for (second = end; *second == ' ' || *second == ','; second++)
		;
	s->beta2 = strtod(second, &end2);
	if (end == v || end2 == second || *end2 != '\0')
		return kn_error(msg, KN_EINVAL, "[%s] %s: expected two "
		    "numbers, as in 'betas = 0.9, 0.95'", k->section, k->name);
	if ((rc = pr_key_check(spec_key("optim", "beta1"), s, msg)) != 0 ||
	    (rc = pr_key_check(spec_key("optim", "beta2"), s, msg)) != 0)
		return rc;
	return KN_OK;
}

/* position_block: an integer, range-checked against the window in
 * pr_spec_validate.  Absent it is 0, printed commented out as the window,
 * and left out of the run id, as it is when it equals the window: both are
 * today's model, whose run ids must not move. */
static int
set_position_block(const pr_key *k, void *obj, void *ctx, const char *v,
    char *msg)
{
	pr_spec *s = obj;
	int64_t x;

	(void)ctx;
	if (pr_int_parse_str(v, 1, 65536, &x) != 0)
		return kn_error(msg, KN_EINVAL, "[%s] %s: '%s' is not a whole "
		    "number from 1 to the window", k->section, k->name, v);
	s->position_block = (int)x;
	return KN_OK;
}

static int
format_position_block(const pr_key *k, const void *obj, char *buf,
    size_t len)
{
	const pr_spec *s = obj;

	(void)k;
	snprintf(buf, len, "%d", s->position_block > 0 ? s->position_block :
	    s->window);
	return s->position_block == 0;
}

/* layers: one count per block, read once blocks is known, like cuts */
static int
set_layers(const pr_key *k, void *obj, void *ctx, const char *v, char *msg)
{
	struct parse_ctx *c = ctx;

	(void)obj;
	return keep_text(k, v, c->layers_text, sizeof(c->layers_text),
	    &c->have_layers, msg);
}

/* Absent, layers is every block's layers_per_block, printed commented
 * out. */
static int
format_layers(const pr_key *k, const void *obj, char *buf, size_t len)
{
	const pr_spec *s = obj;
	size_t used = 0;
	int b, n;

	(void)k;
	buf[0] = '\0';
	for (b = 0; b < s->blocks && b < PR_MAX_BLOCKS && used < len; b++) {
		n = snprintf(buf + used, len - used, "%s%d", b > 0 ? ", " : "",
		    pr_spec_layers(s, b));
		used += n > 0 ? (size_t)n : 0;
	}
	return !s->layers_given;
}

/* With layers given, layers_per_block says nothing: printed commented
 * out, so that the text reads back. */
static int
format_layers_per_block(const pr_key *k, const void *obj, char *buf,
    size_t len)
{
	const pr_spec *s = obj;

	(void)k;
	snprintf(buf, len, "%d", s->layers_per_block);
	return 1;
}

static const pr_key_ops layers_ops = { set_layers, format_layers };
static const pr_key_ops layers_per_block_given_ops = { NULL,
	format_layers_per_block };
static const pr_key_ops cuts_ops = { set_cuts, format_cuts };
static const pr_key_ops position_block_ops = { set_position_block,
	format_position_block };
static const pr_key_ops betas_ops = { set_betas, NULL };

#define FIELD(f) .offset = offsetof(pr_spec, f), \
	.size = sizeof(((pr_spec *)0)->f)

/* Every key of the run spec.  The keys before any section come first,
 * as printing needs; the canonical encoding sorts the hashed ones by
 * their dotted names, so the order here does not touch run ids.  The
 * shape limits are the kernels' (kn_model_check_shape). */
static const char *const methods[] = { "blocktrain", "soma", NULL };
static const char *const soma_modes[] = { "independent", "summed", NULL };
static const char *const soma_decoders[] = { "frozen", "delta", NULL };
const char *const pr_decoders[] = { "random", "confidence", "margin",
	"sampled", NULL };
static const char *const noise_draws[] = { "stratified", "antithetic",
	"kform", "klevel", NULL };

const pr_key pr_spec_keys[] = {
	{ .section = "", .name = "seed", .type = PR_KEY_U64, FIELD(seed),
	  .def = 1, .flags = PR_KEY_HASHED,
	  .doc = "fixes the initial weights and the training draws" },
	{ .section = "", .name = "method", .type = PR_KEY_CHOICE,
	  FIELD(method), .def_str = "blocktrain", .choices = methods,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "blocktrain (blockwise masked diffusion) or soma (zero-order "
	  "experts)" },

	{ .section = "model", .name = "blocks", .type = PR_KEY_INT,
	  FIELD(blocks), .min = 1, .max = PR_MAX_BLOCKS, .def = 4,
	  .flags = PR_KEY_HASHED, .doc = "the number of blocks T" },
	{ .section = "model", .name = "width", .type = PR_KEY_INT,
	  FIELD(width), .min = 1, .max = 16384, .def = 128,
	  .flags = PR_KEY_HASHED,
	  .doc = "the width of every block, a multiple of heads" },
	{ .section = "model", .name = "heads", .type = PR_KEY_INT,
	  FIELD(heads), .min = 1, .max = INFINITY, .def = 4,
	  .flags = PR_KEY_HASHED, .doc = "attention heads" },
	{ .section = "model", .name = "layers_per_block", .type = PR_KEY_INT,
	  FIELD(layers_per_block), .min = 1, .max = 1024, .def = 2,
	  .flags = PR_KEY_HASHED, .doc = "transformer layers in each block" },
	{ .section = "model", .name = "layers", .type = PR_KEY_CUSTOM,
	  FIELD(block_layers), .flags = PR_KEY_HASHED, .ops = &layers_ops,
	  .doc = "the layers of each block, one count per block (as in "
	  "'layers = 2, 3, 1, 2'), instead of layers_per_block: blocks sized "
	  "to their hosts' speed; default: layers_per_block each" },
	{ .section = "model", .name = "window", .type = PR_KEY_INT,
	  FIELD(window), .min = 1, .max = 65536, .def = 64,
	  .flags = PR_KEY_HASHED,
	  .doc = "the length of a training window, in bytes" },
	{ .section = "model", .name = "cuts", .type = PR_KEY_CUSTOM,
	  FIELD(cuts), .flags = PR_KEY_HASHED, .ops = &cuts_ops,
	  .doc = "the T - 1 interior cuts of the noise levels; default: T "
	  "equal parts" },
	{ .section = "model", .name = "position_block", .type = PR_KEY_CUSTOM,
	  FIELD(position_block), .flags = PR_KEY_HASHED,
	  .ops = &position_block_ops,
	  .doc = "bytes per position block, dividing the window: attention "
	  "block-causal, each block trained given the clean bytes before it; "
	  "default: the window (one block)" },
	{ .section = "model", .name = "p_prefix", .type = PR_KEY_REAL,
	  FIELD(p_prefix), .min = 0, .max = 1, .def = 0.1,
	  .flags = PR_KEY_HASHED,
	  .doc = "the probability that a window keeps a prefix unmasked" },

	{ .section = "noise", .name = "draw", .type = PR_KEY_CHOICE,
	  FIELD(noise_draw), .def_str = "stratified", .choices = noise_draws,
	  .flags = PR_KEY_HASHED | PR_KEY_NEW_DEFAULT,
	  .doc = "stratified: one level per window, stratified across the "
	  "batch; antithetic: the same with mirrored pairs of levels; kform: "
	  "the count of masked bytes drawn with the level integrated out, "
	  "every masked byte weighted alike; klevel: counts drawn as the "
	  "stratified levels give them, each row's masked bytes weighted by "
	  "the mean of 1 / t given their count" },
	{ .section = "noise", .name = "t_floor", .type = PR_KEY_REAL,
	  FIELD(t_floor), .min = 0, .max = 1, .def = 0,
	  .flags = PR_KEY_HASHED | PR_KEY_NEW_DEFAULT | PR_KEY_MAX_OPEN,
	  .doc = "levels below it are drawn floor_share of the time, weighted "
	  "by the density ratio so the estimate stays the exact share; 0: "
	  "levels uniform in the interval" },
	{ .section = "noise", .name = "floor_share", .type = PR_KEY_REAL,
	  FIELD(floor_share), .min = 0, .max = 1, .def = 0.05,
	  .flags = PR_KEY_HASHED | PR_KEY_NEW_DEFAULT | PR_KEY_MIN_OPEN |
	  PR_KEY_MAX_OPEN,
	  .doc = "the share of a block's draws below t_floor, when t_floor "
	  "cuts its interval" },
	{ .section = "noise", .name = "count_tilt", .type = PR_KEY_REAL,
	  FIELD(count_tilt), .min = -2, .max = 2, .def = 0,
	  .flags = PR_KEY_HASHED | PR_KEY_NEW_DEFAULT,
	  .doc = "with draw = klevel: counts k drawn in proportion to the "
	  "level form's times k^tilt, weighted to keep the share exact; "
	  "below 0 fewer masked bytes a row, each weighing more" },

	{ .section = "data", .name = "train", .type = PR_KEY_STR,
	  FIELD(train), .flags = PR_KEY_PATH,
	  .doc = "the training file, local to each host" },
	{ .section = "data", .name = "valid", .type = PR_KEY_STR,
	  FIELD(valid), .flags = PR_KEY_PATH,
	  .doc = "the held-out file of the shares" },
	{ .section = "data", .name = "test", .type = PR_KEY_STR,
	  FIELD(test), .flags = PR_KEY_PATH,
	  .doc = "the test file of shardmeter eval --split test" },
	{ .section = "data", .name = "train_sha256", .type = PR_KEY_SHA256,
	  FIELD(train_sha256), .flags = PR_KEY_HASHED,
	  .doc = "the SHA-256 of train, checked when it is opened" },
	{ .section = "data", .name = "valid_sha256", .type = PR_KEY_SHA256,
	  FIELD(valid_sha256), .flags = PR_KEY_HASHED,
	  .doc = "the SHA-256 of valid" },
	{ .section = "data", .name = "test_sha256", .type = PR_KEY_SHA256,
	  FIELD(test_sha256), .flags = PR_KEY_HASHED,
	  .doc = "the SHA-256 of test" },

	{ .section = "optim", .name = "lr", .type = PR_KEY_REAL, FIELD(lr),
	  .min = 0, .max = INFINITY, .def = 1e-3,
	  .flags = PR_KEY_HASHED | PR_KEY_MIN_OPEN,
	  .doc = "the peak learning rate of AdamW" },
	{ .section = "optim", .name = "lr_min", .type = PR_KEY_REAL,
	  FIELD(lr_min), .min = 0, .max = INFINITY, .def = 1e-4,
	  .flags = PR_KEY_HASHED,
	  .doc = "the final learning rate, at most lr" },
	{ .section = "optim", .name = "warmup", .type = PR_KEY_INT,
	  FIELD(warmup), .min = 0, .max = INFINITY, .def = 100,
	  .flags = PR_KEY_HASHED,
	  .doc = "steps of linear warm-up before the cosine decay" },
	{ .section = "optim", .name = "weight_decay", .type = PR_KEY_REAL,
	  FIELD(weight_decay), .min = 0, .max = INFINITY, .def = 0.1,
	  .flags = PR_KEY_HASHED, .doc = "decoupled weight decay" },
	{ .section = "optim", .name = "clip", .type = PR_KEY_REAL,
	  FIELD(clip), .min = 0, .max = INFINITY, .def = 1.0,
	  .flags = PR_KEY_HASHED,
	  .doc = "the largest global gradient norm; 0: no clipping" },
	{ .section = "optim", .name = "beta1", .type = PR_KEY_REAL,
	  FIELD(beta1), .min = 0, .max = 1, .def = 0.9,
	  .flags = PR_KEY_HASHED | PR_KEY_MAX_OPEN,
	  .doc = "the decay rate of AdamW's first moment" },
	{ .section = "optim", .name = "beta2", .type = PR_KEY_REAL,
	  FIELD(beta2), .min = 0, .max = 1, .def = 0.95,
	  .flags = PR_KEY_HASHED | PR_KEY_MAX_OPEN,
	  .doc = "the decay rate of AdamW's second moment" },
	{ .section = "optim", .name = "betas", .type = PR_KEY_CUSTOM,
	  .flags = PR_KEY_ALIAS, .ops = &betas_ops,
	  .doc = "beta1 and beta2 on one line" },
	{ .section = "optim", .name = "batch", .type = PR_KEY_INT,
	  FIELD(batch), .min = 1, .max = INFINITY, .def = 32,
	  .flags = PR_KEY_HASHED, .doc = "windows per training step" },
	{ .section = "optim", .name = "steps", .type = PR_KEY_INT,
	  FIELD(steps), .min = 1, .max = INFINITY, .def = 2000,
	  .flags = PR_KEY_HASHED, .doc = "optimizer steps of every block" },

	{ .section = "sync", .name = "replicas", .type = PR_KEY_INT,
	  FIELD(replicas), .min = 1, .max = INFINITY, .def = 1,
	  .flags = PR_KEY_HASHED,
	  .doc = "replicas per block the run is planned for" },
	{ .section = "sync", .name = "local_steps", .type = PR_KEY_INT,
	  FIELD(local_steps), .min = 1, .max = INFINITY, .def = 50,
	  .flags = PR_KEY_HASHED, .doc = "steps between two rounds" },
	{ .section = "sync", .name = "outer_lr", .type = PR_KEY_REAL,
	  FIELD(outer_lr), .min = 0, .max = INFINITY, .def = 1.0,
	  .flags = PR_KEY_HASHED | PR_KEY_MIN_OPEN,
	  .doc = "the outer step; 1: the average of the members' weights" },
	{ .section = "sync", .name = "round_deadline", .type = PR_KEY_REAL,
	  FIELD(round_deadline), .min = 0, .max = INFINITY, .def = 60.0,
	  .flags = PR_KEY_HASHED | PR_KEY_MIN_OPEN,
	  .doc = "seconds a coordinator waits for the updates of a round" },

	{ .section = "generate", .name = "decode", .type = PR_KEY_CHOICE,
	  FIELD(decode), .def_str = "sampled", .choices = pr_decoders,
	  .doc = "the order in which a BlockTrain traversal decides the "
	  "masked bytes, for a request that names none: random (each step "
	  "unmasks a random share), confidence (the bytes the model is "
	  "surest of first), margin (those with the widest gap between "
	  "the two likeliest bytes first) or sampled (those whose drawn "
	  "byte is likeliest, with Gumbel noise: MaskGIT's order; its "
	  "samples have the most words and the least entropy)" },

	{ .section = "soma", .name = "experts", .type = PR_KEY_INT,
	  FIELD(soma.experts), .min = 1, .max = PR_MAX_BLOCKS, .def = 2,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "experts N, one per data cluster" },
	{ .section = "soma", .name = "width", .type = PR_KEY_INT,
	  FIELD(soma.width), .min = 1, .max = 4096, .def = 32,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "an expert's width d (embedding, LSTM state)" },
	{ .section = "soma", .name = "mlp_mult", .type = PR_KEY_INT,
	  FIELD(soma.mlp_mult), .min = 1, .max = 64, .def = 4,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "the hidden width of each GELU MLP, in multiples of d" },
	{ .section = "soma", .name = "layers", .type = PR_KEY_INT,
	  FIELD(soma.layers), .min = 1, .max = 64, .def = 2,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "residual blocks of an expert, each an LSTM then an MLP" },
	{ .section = "soma", .name = "window", .type = PR_KEY_INT,
	  FIELD(soma.window), .min = 1, .max = 65536, .def = 128,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "bytes per training sequence" },
	{ .section = "soma", .name = "batch", .type = PR_KEY_INT,
	  FIELD(soma.batch), .min = 1, .max = 65536, .def = 16,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "sequences per minibatch" },
	{ .section = "soma", .name = "perturbations", .type = PR_KEY_INT,
	  FIELD(soma.perturbations), .min = 1, .max = 1 << 20, .def = 64,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "SPSA directions P per step (2P forward passes)" },
	{ .section = "soma", .name = "eps", .type = PR_KEY_REAL,
	  FIELD(soma.eps), .min = 0, .max = INFINITY, .def = 1e-3,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA | PR_KEY_MIN_OPEN,
	  .doc = "the initial perturbation size" },
	{ .section = "soma", .name = "lr", .type = PR_KEY_REAL,
	  FIELD(soma.lr), .min = 0, .max = INFINITY, .def = 1e-3,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA | PR_KEY_MIN_OPEN,
	  .doc = "the initial learning rate of the Adam-style update" },
	{ .section = "soma", .name = "lr_floor", .type = PR_KEY_REAL,
	  FIELD(soma.lr_floor), .min = 0, .max = INFINITY, .def = 1e-5,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "lr and eps halve on a plateau down to this floor" },
	{ .section = "soma", .name = "density", .type = PR_KEY_REAL,
	  FIELD(soma.density), .min = 0, .max = 1, .def = 0.5,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA | PR_KEY_MIN_OPEN,
	  .doc = "the share of nonzero entries of a direction" },
	{ .section = "soma", .name = "patience", .type = PR_KEY_INT,
	  FIELD(soma.patience), .min = 1, .max = INFINITY, .def = 3,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "validations without improvement before lr and eps halve" },
	{ .section = "soma", .name = "seed_steps", .type = PR_KEY_INT,
	  FIELD(soma.seed_steps), .min = 0, .max = INFINITY, .def = 500,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "SPSA steps of the N = 1 seed model" },
	{ .section = "soma", .name = "steps", .type = PR_KEY_INT,
	  FIELD(soma.steps), .min = 0, .max = INFINITY, .def = 1000,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "SPSA steps of each expert" },
	{ .section = "soma", .name = "eval_every", .type = PR_KEY_INT,
	  FIELD(soma.eval_every), .min = 1, .max = INFINITY, .def = 50,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "steps between two validations (the plateau schedule)" },
	{ .section = "soma", .name = "mode", .type = PR_KEY_CHOICE,
	  FIELD(soma.mode), .def_str = "independent", .choices = soma_modes,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "independent: each expert its own loss; summed: the control "
	  "of one summed loss" },
	{ .section = "soma", .name = "expert_decoder", .type = PR_KEY_CHOICE,
	  FIELD(soma.expert_decoder), .def_str = "frozen",
	  .choices = soma_decoders,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA | PR_KEY_NEW_DEFAULT,
	  .doc = "frozen: every expert keeps the seed's decoder (published); "
	  "delta: each expert goes on learning its own copy by the delta "
	  "rule on its cluster (ours)" },
	{ .section = "soma", .name = "top_k", .type = PR_KEY_INT,
	  FIELD(soma.top_k), .min = 1, .max = PR_MAX_BLOCKS, .def = 4,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "experts mixed at inference; min(top_k, N) are" },
	{ .section = "soma", .name = "route_bytes", .type = PR_KEY_INT,
	  FIELD(soma.route_bytes), .min = 1, .max = 1 << 20, .def = 256,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "bytes of a context the router reads" },
	{ .section = "soma", .name = "eggroll_rank", .type = PR_KEY_INT,
	  FIELD(soma.eggroll_rank), .min = 1, .max = 1024, .def = 1,
	  .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "the rank r of the EGGROLL control's perturbations" },
	{ .section = "soma", .name = "clusters", .type = PR_KEY_STR,
	  FIELD(soma.clusters), .flags = PR_KEY_PATH | PR_KEY_SOMA,
	  .doc = "the folder shardmeter cluster wrote (router.smr, "
	  "cluster-<e>.txt), local to each host" },
	{ .section = "soma", .name = "router_sha256", .type = PR_KEY_SHA256,
	  FIELD(soma.router_sha256), .flags = PR_KEY_HASHED | PR_KEY_SOMA,
	  .doc = "the SHA-256 of clusters/router.smr, checked when it is "
	  "opened" },
};

#define NKEYS (sizeof(pr_spec_keys) / sizeof(pr_spec_keys[0]))
const size_t pr_spec_nkeys = NKEYS;

static const pr_key *
spec_key(const char *section, const char *name)
{
	return pr_key_find(pr_spec_keys, NKEYS, section, name);
}

void
pr_spec_defaults(pr_spec *s)
{
	memset(s, 0, sizeof(*s));
	pr_key_defaults(pr_spec_keys, NKEYS, s);
	/* the cuts themselves wait for blocks (see finish) */
	s->equal_cuts = 1;
}

static int
fail(struct parse_ctx *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->failed) {
		va_start(ap, fmt);
		vsnprintf(c->err, PR_ERR_LEN, fmt, ap);
		va_end(ap);
	}
	c->failed = 1;
	return 0;
}

static int
on_key(void *user, const char *sec, const char *key, const char *v)
{
	struct parse_ctx *c = user;
	const pr_key *k;

	if (c->failed)
		return 0;
	if ((k = spec_key(sec, key)) != NULL) {
		if (pr_key_set(k, c->s, c, v, c->err) == 0) {
			if (k->offset == offsetof(pr_spec, layers_per_block))
				c->have_layers_per_block = 1;
			return 1;
		}
		c->failed = 1;
		return 0;
	}
	if (!pr_key_section_known(pr_spec_keys, NKEYS, sec))
		return fail(c, "unknown section [%s]", sec);
	if (sec[0])
		return fail(c, "unknown key '%s' in [%s]", key, sec);
	return fail(c, "unknown key '%s' before any section", key);
}

/* "0.25, 0.5, 0.75": the T-1 interior cuts, strictly increasing in (0,1) */
static int
parse_cuts(struct parse_ctx *c)
{
	pr_spec *s = c->s;
	char *p = c->cuts_text, *end;
	int k = 0;

	s->cuts[0] = 0.0;
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (!*p)
			break;
		if (k + 1 >= PR_MAX_BLOCKS)
			return fail(c, "[model] cuts: too many values");
		s->cuts[k + 1] = strtod(p, &end);
		if (end == p)
			return fail(c, "[model] cuts: '%s' is not a list of "
			    "numbers", c->cuts_text);
		k++;
		p = end;
	}
	if (k != s->blocks - 1)
		return fail(c, "[model] cuts: %d blocks need %d interior cuts "
		    "(values strictly between 0 and 1), got %d", s->blocks,
		    s->blocks - 1, k);
	s->cuts[s->blocks] = 1.0;
	s->equal_cuts = 0;
	return 1;
}

void
pr_spec_set_layers(pr_spec *s, const int *layers)
{
	int b, equal = 1;

	for (b = 1; b < s->blocks; b++)
		equal &= layers[b] == layers[0];
	memset(s->block_layers, 0, sizeof(s->block_layers));
	if (equal)
		s->layers_per_block = layers[0];
	else
		memcpy(s->block_layers, layers, sizeof(int) * (size_t)s->blocks);
	s->layers_given = !equal;
}

/* "2, 3, 1": one count of at least 1 per block. */
static int
parse_layers(struct parse_ctx *c)
{
	pr_spec *s = c->s;
	char *p = c->layers_text, *end;
	int k = 0, layers[PR_MAX_BLOCKS];
	long v;

	if (c->have_layers_per_block)
		return fail(c, "[model] layers and layers_per_block are "
		    "mutually exclusive: give one count per block in layers, "
		    "or one count for every block in layers_per_block");
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (!*p)
			break;
		errno = 0;
		v = strtol(p, &end, 10);
		if (end == p || errno != 0 || (*end && *end != ',' &&
		    *end != ' ' && *end != '\t'))
			return fail(c, "[model] layers: '%s' is not a list of "
			    "whole numbers", c->layers_text);
		if (v < 1 || v > 1024)
			return fail(c, "[model] layers: block %d has %ld layers; "
			    "each block needs 1 to 1024", k + 1, v);
		if (k < PR_MAX_BLOCKS)
			layers[k] = (int)v;
		k++;
		p = end;
	}
	if (k != s->blocks)
		return fail(c, "[model] layers: %d blocks need %d layer counts, "
		    "one per block, got %d", s->blocks, s->blocks, k);
	pr_spec_set_layers(s, layers);
	return 1;
}

int
pr_spec_validate(const pr_spec *s, char *err)
{
	kn_model_shape shape;
	char kerr[KN_ERR_LEN];
	int b, rc;

	if ((rc = pr_key_check_all(pr_spec_keys, NKEYS, s, err)) != 0)
		return rc;
	/* what no single row can say */
	if (s->position_block != 0 && (s->position_block > s->window ||
	    s->window % s->position_block != 0))
		return kn_error(err, KN_EINVAL, "[model] position_block %d must "
		    "divide window %d (1 <= position_block <= window)",
		    s->position_block, s->window);
	for (b = 0; b < s->blocks; b++) {
		if (s->layers_given && (s->block_layers[b] < 1 ||
		    s->block_layers[b] > 1024))
			return kn_error(err, KN_EINVAL, "[model] layers: block "
			    "%d has %d layers; each block needs 1 to 1024",
			    b + 1, s->block_layers[b]);
		shape = pr_spec_block_shape(s, b);
		if (kn_model_check_shape(&shape, kerr) != 0)
			return kn_error(err, KN_EINVAL, "[model] %s", kerr);
	}
	if (s->t_floor > 0 && (strcmp(s->noise_draw, "kform") == 0 ||
	    strcmp(s->noise_draw, "klevel") == 0))
		return kn_error(err, KN_EINVAL, "[noise] t_floor draws levels, "
		    "and draw = %s draws no level: set one or the other",
		    s->noise_draw);
	if (s->count_tilt != 0 && strcmp(s->noise_draw, "klevel") != 0)
		return kn_error(err, KN_EINVAL, "[noise] count_tilt tilts the "
		    "counts of draw = klevel, and draw is %s", s->noise_draw);
	for (b = 1; b <= s->blocks; b++)
		if (!(s->cuts[b] > s->cuts[b - 1]))
			return kn_error(err, KN_EINVAL, "[model] cuts must be "
			    "strictly increasing in (0, 1)");
	if (s->cuts[0] != 0.0 || s->cuts[s->blocks] != 1.0)
		return kn_error(err, KN_EINVAL, "[model] cuts must span (0, 1]");
	if (s->lr_min > s->lr)
		return kn_error(err, KN_EINVAL, "[optim] need lr_min <= lr, "
		    "not lr_min %g above lr %g", s->lr_min, s->lr);
	if (pr_spec_method(s) == PR_METHOD_SOMA) {
		if (s->soma.lr_floor > s->soma.lr || s->soma.lr_floor > s->soma.eps)
			return kn_error(err, KN_EINVAL, "[soma] need lr_floor "
			    "<= lr and <= eps, not %g", s->soma.lr_floor);
	}
	return KN_OK;
}

pr_method
pr_spec_method(const pr_spec *s)
{
	return strcmp(s->method, "soma") == 0 ? PR_METHOD_SOMA :
	    PR_METHOD_BLOCKTRAIN;
}

static int
finish(pr_spec *s, struct parse_ctx *c, int line, char *err)
{
	int b;

	if (line > 0 && !c->failed)
		return kn_error(err, KN_EINVAL, "line %d: not 'key = value' or "
		    "'[section]'", line);
	if (line < 0)
		return kn_error(err, KN_EIO, "cannot read the spec");
	if (c->failed) {
		if (line > 0) {
			char msg[PR_ERR_LEN];

			snprintf(msg, sizeof(msg), "%s", err);
			return kn_error(err, KN_EINVAL, "line %d: %s", line,
			    msg);
		}
		return KN_EINVAL;
	}
	/* blocks was checked against its range as it was read */
	if (c->have_cuts) {
		if (!parse_cuts(c))
			return KN_EINVAL;
	} else {
		for (b = 0; b <= s->blocks; b++)
			s->cuts[b] = (double)b / s->blocks;
		s->equal_cuts = 1;
	}
	if (c->have_layers && !parse_layers(c))
		return KN_EINVAL;
	return pr_spec_validate(s, err);
}

int
pr_spec_parse(pr_spec *s, const char *text, size_t len, char *err)
{
	struct parse_ctx c = { .s = s, .err = err };
	char *copy = malloc(len + 1);
	int line;

	if (copy == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	memcpy(copy, text, len);
	copy[len] = '\0';
	pr_spec_defaults(s);
	line = ini_parse_string(copy, on_key, &c);
	free(copy);
	return finish(s, &c, line, err);
}

static int
resolve(char *path, const char *dir)
{
	char joined[PR_PATH_LEN];

	if (path[0] == '\0' || path[0] == '/' || strcmp(dir, ".") == 0)
		return 0;
	if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", dir, path) >=
	    sizeof(joined))
		return -1;
	strcpy(path, joined);
	return 0;
}

int
pr_spec_load(pr_spec *s, const char *path, char *err)
{
	FILE *f = fopen(path, "r");
	char *text, dirbuf[PR_PATH_LEN], *dir;
	long size;
	size_t i;
	int rc;

	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open spec %s: %s", path,
		    strerror(errno));
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
	    size > (1 << 20)) {
		fclose(f);
		return kn_error(err, KN_EIO, "spec %s is unreadable or larger "
		    "than 1 MiB", path);
	}
	rewind(f);
	text = malloc((size_t)size + 1);
	if (text == NULL || fread(text, 1, (size_t)size, f) != (size_t)size) {
		free(text);
		fclose(f);
		return kn_error(err, KN_EIO, "cannot read spec %s", path);
	}
	fclose(f);
	rc = pr_spec_parse(s, text, (size_t)size, err);
	free(text);
	if (rc != 0) {
		char msg[PR_ERR_LEN];

		snprintf(msg, sizeof(msg), "%s", err);
		return kn_error(err, rc, "%.200s: %s", path, msg);
	}
	snprintf(dirbuf, sizeof(dirbuf), "%s", path);
	dir = dirname(dirbuf);
	for (i = 0; i < NKEYS; i++)
		if ((pr_spec_keys[i].flags & PR_KEY_PATH) &&
		    resolve((char *)s + pr_spec_keys[i].offset, dir) != 0)
			return kn_error(err, KN_EINVAL, "%s: data path too "
			    "long", path);
	return KN_OK;
}

int
pr_spec_layers(const pr_spec *s, int block)
{
	return s->layers_given && block >= 0 && block < PR_MAX_BLOCKS ?
	    s->block_layers[block] : s->layers_per_block;
}

int
pr_spec_total_layers(const pr_spec *s)
{
	int b, sum = 0;

	for (b = 0; b < s->blocks; b++)
		sum += pr_spec_layers(s, b);
	return sum;
}

kn_model_shape
pr_spec_block_shape(const pr_spec *s, int block)
{
	kn_model_shape m = { s->width, s->heads, pr_spec_layers(s, block),
	    s->window, 0, s->position_block };

	return m;
}

kn_model_shape
pr_spec_reference_shape(const pr_spec *s, int causal)
{
	kn_model_shape m = { s->width, s->heads, pr_spec_total_layers(s),
	    s->window, causal,
	    causal ? 0 : s->position_block };

	return m;
}

double
pr_spec_lr(const pr_spec *s, int step)
{
	double progress;

	if (step < s->warmup)
		return s->lr * (step + 1) / s->warmup;
	if (s->steps <= s->warmup)
		return s->lr;
	progress = (double)(step - s->warmup) / (s->steps - s->warmup);
	if (progress > 1)
		progress = 1;
	return s->lr_min + 0.5 * (s->lr - s->lr_min) *
	    (1 + cos(3.14159265358979323846 * progress));
}

/* The canonical encoding: a map of the hashed rows' dotted names
 * ("model.blocks", "seed") and "format", in byte order. */
struct hashed_key {
	char name[64];
	const pr_key *k;        /* NULL: the format tag */
};

static int
by_name(const void *a, const void *b)
{
	return strcmp(((const struct hashed_key *)a)->name,
	    ((const struct hashed_key *)b)->name);
}

static void
pack_str(msgpack_packer *pk, const char *v)
{
	msgpack_pack_str(pk, strlen(v));
	msgpack_pack_str_body(pk, v, strlen(v));
}

static void
pack_value(msgpack_packer *pk, const pr_key *k, const pr_spec *s)
{
	const char *p = (const char *)s + k->offset;
	int b;

	switch (k->type) {
	case PR_KEY_INT:
		msgpack_pack_int64(pk, *(const int *)(const void *)p);
		break;
	case PR_KEY_U64:
		/* as int64, as it always was: seeds above 2^63 wrap */
		msgpack_pack_int64(pk,
		    (int64_t)*(const uint64_t *)(const void *)p);
		break;
	case PR_KEY_REAL:
		msgpack_pack_double(pk, *(const double *)(const void *)p);
		break;
	case PR_KEY_SHA256:
	case PR_KEY_STR:
	case PR_KEY_CHOICE:
		pack_str(pk, p);
		break;
	default:
		if (k->offset == offsetof(pr_spec, position_block)) {
			/* one byte per block became the next-byte form, a
			 * different model of the same size: its checkpoints
			 * are of a run of their own */
			if (s->position_block == 1)
				pack_str(pk, "1 next-byte");
			else
				msgpack_pack_int64(pk, s->position_block);
			break;
		}
		if (k->offset == offsetof(pr_spec, block_layers)) {
			msgpack_pack_array(pk, (size_t)s->blocks);
			for (b = 0; b < s->blocks; b++)
				msgpack_pack_int64(pk, s->block_layers[b]);
			break;
		}
		/* cuts, 0 and 1 included */
		msgpack_pack_array(pk, (size_t)s->blocks + 1);
		for (b = 0; b <= s->blocks; b++)
			msgpack_pack_double(pk, s->cuts[b]);
		break;
	}
}

/* A key flagged PR_KEY_NEW_DEFAULT (the [noise] keys, expert_decoder) at
 * its default is left out of the run id and of the printed spec: the
 * specs from before the key keep both. */
static int
at_new_default(const pr_key *k, const pr_spec *s)
{
	const char *p = (const char *)s + k->offset;

	if (!(k->flags & PR_KEY_NEW_DEFAULT))
		return 0;
	if (k->type == PR_KEY_CHOICE)
		return strcmp(p, k->def_str) == 0;
	return *(const double *)(const void *)p == k->def;
}

int
pr_spec_encode(const pr_spec *s, char **buf, size_t *len, char *err)
{
	struct hashed_key keys[NKEYS + 1] = { { "format", NULL } };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t i, n = 1;
	int rc;

	if ((rc = pr_spec_validate(s, err)) != 0)
		return rc;
	for (i = 0; i < NKEYS; i++) {
		const pr_key *k = &pr_spec_keys[i];

		if (!(k->flags & PR_KEY_HASHED))
			continue;
		if ((k->flags & PR_KEY_SOMA) &&
		    pr_spec_method(s) != PR_METHOD_SOMA)
			continue;
		if (k->offset == offsetof(pr_spec, position_block) &&
		    (s->position_block == 0 ||
		    s->position_block == s->window))
			continue;
		/* one of layers and layers_per_block, as the spec has it:
		 * specs of equal blocks keep their run ids */
		if (k->offset == offsetof(pr_spec, block_layers) &&
		    !s->layers_given)
			continue;
		if (k->offset == offsetof(pr_spec, layers_per_block) &&
		    s->layers_given)
			continue;
		if (at_new_default(k, s))
			continue;
		snprintf(keys[n].name, sizeof(keys[n].name), "%s%s%s",
		    k->section, k->section[0] ? "." : "", k->name);
		keys[n++].k = k;
	}
	qsort(keys, n, sizeof(keys[0]), by_name);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	for (i = 0; i < n; i++) {
		pack_str(&pk, keys[i].name);
		if (keys[i].k == NULL)
			pack_str(&pk, "shardmeter-spec-1");
		else
			pack_value(&pk, keys[i].k, s);
	}
	*buf = sb.data;
	*len = sb.size;
	return KN_OK;
}

int
pr_spec_run_id(const pr_spec *s, char id[PR_RUN_ID_LEN], char *err)
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	char *buf;
	size_t len;
	int rc, i;

	if ((rc = pr_spec_encode(s, &buf, &len, err)) != 0)
		return rc;
	if (EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) != 1) {
		free(buf);
		return kn_error(err, KN_EIO, "SHA-256 failed");
	}
	free(buf);
	for (i = 0; i < 32; i++)
		snprintf(id + 2 * i, 3, "%02x", md[i]);
	return KN_OK;
}

int
pr_spec_print(FILE *f, const pr_spec *s)
{
	pr_key rows[NKEYS];
	size_t i, n = 0;

	/* a BlockTrain spec prints as it did before SOMA had keys */
	for (i = 0; i < NKEYS; i++) {
		if ((pr_spec_method(s) != PR_METHOD_SOMA &&
		    (pr_spec_keys[i].flags & PR_KEY_SOMA)) ||
		    at_new_default(&pr_spec_keys[i], s))
			continue;
		rows[n++] = pr_spec_keys[i];
		if (s->layers_given && pr_spec_keys[i].offset ==
		    offsetof(pr_spec, layers_per_block)) {
			rows[n - 1].type = PR_KEY_CUSTOM;
			rows[n - 1].ops = &layers_per_block_given_ops;
		}
	}
	return pr_key_print(rows, n, s, f);
}

int
pr_spec_steps_of(const pr_spec *s, int k, int block)
{
	int steps = (int)lround(k * (s->cuts[block + 1] - s->cuts[block]));

	return steps < 1 ? 1 : steps;
}

/* The levels run downwards: step j of block b starts at
 * hi - (hi - lo) j / count. */
double
pr_spec_time_of(const pr_spec *s, int k, int block, int j)
{
	double lo = s->cuts[block], hi = s->cuts[block + 1];
	int count = pr_spec_steps_of(s, k, block);

	return j >= count ? lo : hi - (hi - lo) * j / count;
}
