/* Reading, validating and hashing the run spec.  The run id hashes the
 * parsed values, never the text, so key order, spacing and comments do
 * not change it. */
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
#include "proto/spec.h"

void
pr_spec_defaults(pr_spec *s)
{
	memset(s, 0, sizeof(*s));
	s->blocks = 4;
	s->width = 128;
	s->heads = 4;
	s->layers_per_block = 2;
	s->window = 64;
	s->equal_cuts = 1;
	s->p_prefix = 0.1;
	s->lr = 1e-3;
	s->lr_min = 1e-4;
	s->warmup = 100;
	s->weight_decay = 0.1;
	s->clip = 1.0;
	s->beta1 = 0.9;
	s->beta2 = 0.95;
	s->batch = 32;
	s->steps = 2000;
	s->replicas = 1;
	s->local_steps = 50;
	s->outer_lr = 1.0;
	s->round_deadline = 60.0;
	s->seed = 1;
}

struct parse_ctx {
	pr_spec *s;
	char *err;
	int failed;
	char cuts_text[1024];
	int have_cuts;
};

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
parse_int(struct parse_ctx *c, const char *sec, const char *key,
    const char *v, int *out)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || x < -2147483647L ||
	    x > 2147483647L)
		return fail(c, "[%s] %s: '%s' is not an integer", sec, key, v);
	*out = (int)x;
	return 1;
}

static int
parse_real(struct parse_ctx *c, const char *sec, const char *key,
    const char *v, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0' || !isfinite(x))
		return fail(c, "[%s] %s: '%s' is not a finite number", sec,
		    key, v);
	*out = x;
	return 1;
}

static int
parse_hash(struct parse_ctx *c, const char *sec, const char *key,
    const char *v, char out[65])
{
	size_t i;

	if (strlen(v) != 64)
		return fail(c, "[%s] %s: a sha256 is 64 hex digits", sec, key);
	for (i = 0; i < 64; i++) {
		char ch = v[i];

		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
		    (ch >= 'A' && ch <= 'F')))
			return fail(c, "[%s] %s: '%c' is not a hex digit",
			    sec, key, ch);
		out[i] = (char)(ch >= 'A' && ch <= 'F' ? ch + 32 : ch);
	}
	out[64] = '\0';
	return 1;
}

static int
parse_path(struct parse_ctx *c, const char *sec, const char *key,
    const char *v, char out[PR_PATH_LEN])
{
	if (strlen(v) >= PR_PATH_LEN)
		return fail(c, "[%s] %s: path too long", sec, key);
	strcpy(out, v);
	return 1;
}

static int
on_key(void *user, const char *sec, const char *key, const char *v)
{
	struct parse_ctx *c = user;
	pr_spec *s = c->s;

	if (c->failed)
		return 0;
	if (strcmp(sec, "") == 0) {
		if (strcmp(key, "seed") == 0) {
			char *end;
			unsigned long long x;

			errno = 0;
			x = strtoull(v, &end, 10);
			if (errno || end == v || *end || v[0] == '-')
				return fail(c, "seed: '%s' is not a "
				    "non-negative integer", v);
			s->seed = x;
			return 1;
		}
	} else if (strcmp(sec, "model") == 0) {
		if (strcmp(key, "blocks") == 0)
			return parse_int(c, sec, key, v, &s->blocks);
		if (strcmp(key, "width") == 0)
			return parse_int(c, sec, key, v, &s->width);
		if (strcmp(key, "heads") == 0)
			return parse_int(c, sec, key, v, &s->heads);
		if (strcmp(key, "layers_per_block") == 0)
			return parse_int(c, sec, key, v, &s->layers_per_block);
		if (strcmp(key, "window") == 0)
			return parse_int(c, sec, key, v, &s->window);
		if (strcmp(key, "p_prefix") == 0)
			return parse_real(c, sec, key, v, &s->p_prefix);
		if (strcmp(key, "cuts") == 0) {
			if (strlen(v) >= sizeof(c->cuts_text))
				return fail(c, "[model] cuts: too long");
			strcpy(c->cuts_text, v);
			c->have_cuts = 1;
			return 1;
		}
	} else if (strcmp(sec, "data") == 0) {
		if (strcmp(key, "train") == 0)
			return parse_path(c, sec, key, v, s->train);
		if (strcmp(key, "valid") == 0)
			return parse_path(c, sec, key, v, s->valid);
		if (strcmp(key, "test") == 0)
			return parse_path(c, sec, key, v, s->test);
		if (strcmp(key, "train_sha256") == 0)
			return parse_hash(c, sec, key, v, s->train_sha256);
		if (strcmp(key, "valid_sha256") == 0)
			return parse_hash(c, sec, key, v, s->valid_sha256);
		if (strcmp(key, "test_sha256") == 0)
			return parse_hash(c, sec, key, v, s->test_sha256);
	} else if (strcmp(sec, "optim") == 0) {
		if (strcmp(key, "lr") == 0)
			return parse_real(c, sec, key, v, &s->lr);
		if (strcmp(key, "lr_min") == 0)
			return parse_real(c, sec, key, v, &s->lr_min);
		if (strcmp(key, "warmup") == 0)
			return parse_int(c, sec, key, v, &s->warmup);
		if (strcmp(key, "weight_decay") == 0)
			return parse_real(c, sec, key, v, &s->weight_decay);
		if (strcmp(key, "clip") == 0)
			return parse_real(c, sec, key, v, &s->clip);
		if (strcmp(key, "beta1") == 0)
			return parse_real(c, sec, key, v, &s->beta1);
		if (strcmp(key, "beta2") == 0)
			return parse_real(c, sec, key, v, &s->beta2);
		if (strcmp(key, "betas") == 0) {
			char *end, *end2;

			s->beta1 = strtod(v, &end);
			while (*end == ' ' || *end == ',')
				end++;
			s->beta2 = strtod(end, &end2);
			if (end == v || end2 == end || *end2 != '\0')
				return fail(c, "[optim] betas: expected two "
				    "numbers, as in 'betas = 0.9, 0.95'");
			return 1;
		}
		if (strcmp(key, "batch") == 0)
			return parse_int(c, sec, key, v, &s->batch);
		if (strcmp(key, "steps") == 0)
			return parse_int(c, sec, key, v, &s->steps);
	} else if (strcmp(sec, "sync") == 0) {
		if (strcmp(key, "replicas") == 0)
			return parse_int(c, sec, key, v, &s->replicas);
		if (strcmp(key, "local_steps") == 0)
			return parse_int(c, sec, key, v, &s->local_steps);
		if (strcmp(key, "outer_lr") == 0)
			return parse_real(c, sec, key, v, &s->outer_lr);
		if (strcmp(key, "round_deadline") == 0)
			return parse_real(c, sec, key, v, &s->round_deadline);
	} else {
		return fail(c, "unknown section [%s]", sec);
	}
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

int
pr_spec_validate(const pr_spec *s, char *err)
{
	kn_model_shape shape;
	char kerr[KN_ERR_LEN];
	int b;

	if (s->blocks < 1 || s->blocks > PR_MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "[model] blocks must be 1 to "
		    "%d, not %d", PR_MAX_BLOCKS, s->blocks);
	shape = pr_spec_block_shape(s);
	if (kn_model_check_shape(&shape, kerr) != 0)
		return kn_error(err, KN_EINVAL, "[model] %s", kerr);
	for (b = 1; b <= s->blocks; b++)
		if (!(s->cuts[b] > s->cuts[b - 1]))
			return kn_error(err, KN_EINVAL, "[model] cuts must be "
			    "strictly increasing in (0, 1)");
	if (s->cuts[0] != 0.0 || s->cuts[s->blocks] != 1.0)
		return kn_error(err, KN_EINVAL, "[model] cuts must span (0, 1]");
	if (s->p_prefix < 0 || s->p_prefix > 1)
		return kn_error(err, KN_EINVAL, "[model] p_prefix must be in "
		    "[0, 1]");
	if (s->lr <= 0 || s->lr_min < 0 || s->lr_min > s->lr)
		return kn_error(err, KN_EINVAL, "[optim] need 0 <= lr_min <= lr "
		    "and lr > 0");
	if (s->warmup < 0 || s->steps < 1 || s->batch < 1)
		return kn_error(err, KN_EINVAL, "[optim] need warmup >= 0, "
		    "steps >= 1 and batch >= 1");
	if (s->weight_decay < 0 || s->clip < 0)
		return kn_error(err, KN_EINVAL, "[optim] weight_decay and clip "
		    "must not be negative");
	if (s->beta1 < 0 || s->beta1 >= 1 || s->beta2 < 0 || s->beta2 >= 1)
		return kn_error(err, KN_EINVAL, "[optim] betas must be in [0, 1)");
	if (s->replicas < 1 || s->local_steps < 1 || s->outer_lr <= 0 ||
	    s->round_deadline <= 0)
		return kn_error(err, KN_EINVAL, "[sync] need replicas >= 1, "
		    "local_steps >= 1, outer_lr > 0 and round_deadline > 0");
	return KN_OK;
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
	if (s->blocks < 1 || s->blocks > PR_MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "[model] blocks must be 1 to "
		    "%d, not %d", PR_MAX_BLOCKS, s->blocks);
	if (c->have_cuts) {
		if (!parse_cuts(c))
			return KN_EINVAL;
	} else {
		for (b = 0; b <= s->blocks; b++)
			s->cuts[b] = (double)b / s->blocks;
		s->equal_cuts = 1;
	}
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
	if (resolve(s->train, dir) || resolve(s->valid, dir) ||
	    resolve(s->test, dir))
		return kn_error(err, KN_EINVAL, "%s: data path too long", path);
	return KN_OK;
}

kn_model_shape
pr_spec_block_shape(const pr_spec *s)
{
	kn_model_shape m = { s->width, s->heads, s->layers_per_block,
	    s->window, 0 };

	return m;
}

kn_model_shape
pr_spec_reference_shape(const pr_spec *s, int causal)
{
	kn_model_shape m = { s->width, s->heads,
	    s->blocks * s->layers_per_block, s->window, causal };

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

/* Canonical encoding: a map of dotted names in byte order. */
static void
pack_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str(pk, strlen(k));
	msgpack_pack_str_body(pk, k, strlen(k));
}

static void
pack_int(msgpack_packer *pk, const char *k, int64_t v)
{
	pack_key(pk, k);
	msgpack_pack_int64(pk, v);
}

static void
pack_real(msgpack_packer *pk, const char *k, double v)
{
	pack_key(pk, k);
	msgpack_pack_double(pk, v);
}

static void
pack_strv(msgpack_packer *pk, const char *k, const char *v)
{
	pack_key(pk, k);
	msgpack_pack_str(pk, strlen(v));
	msgpack_pack_str_body(pk, v, strlen(v));
}

int
pr_spec_encode(const pr_spec *s, char **buf, size_t *len, char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int b, rc;

	if ((rc = pr_spec_validate(s, err)) != 0)
		return rc;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* keys in byte order; the count must match the entries below */
	msgpack_pack_map(&pk, 25);
	pack_strv(&pk, "data.test_sha256", s->test_sha256);
	pack_strv(&pk, "data.train_sha256", s->train_sha256);
	pack_strv(&pk, "data.valid_sha256", s->valid_sha256);
	pack_strv(&pk, "format", "shardmeter-spec-1");
	pack_int(&pk, "model.blocks", s->blocks);
	pack_key(&pk, "model.cuts");
	msgpack_pack_array(&pk, (size_t)s->blocks + 1);
	for (b = 0; b <= s->blocks; b++)
		msgpack_pack_double(&pk, s->cuts[b]);
	pack_int(&pk, "model.heads", s->heads);
	pack_int(&pk, "model.layers_per_block", s->layers_per_block);
	pack_real(&pk, "model.p_prefix", s->p_prefix);
	pack_int(&pk, "model.width", s->width);
	pack_int(&pk, "model.window", s->window);
	pack_int(&pk, "optim.batch", s->batch);
	pack_real(&pk, "optim.beta1", s->beta1);
	pack_real(&pk, "optim.beta2", s->beta2);
	pack_real(&pk, "optim.clip", s->clip);
	pack_real(&pk, "optim.lr", s->lr);
	pack_real(&pk, "optim.lr_min", s->lr_min);
	pack_int(&pk, "optim.steps", s->steps);
	pack_int(&pk, "optim.warmup", s->warmup);
	pack_real(&pk, "optim.weight_decay", s->weight_decay);
	pack_int(&pk, "seed", (int64_t)s->seed);
	pack_int(&pk, "sync.local_steps", s->local_steps);
	pack_real(&pk, "sync.outer_lr", s->outer_lr);
	pack_int(&pk, "sync.replicas", s->replicas);
	pack_real(&pk, "sync.round_deadline", s->round_deadline);
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
