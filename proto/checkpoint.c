/* Checkpoint and optimizer-state files: msgpack encoding, strict decoding
 * and atomic storage (format in proto/PROTOCOL.md).  The daemon calls
 * these to publish, receive and resume; nothing read here touches the
 * caller's buffers until the whole file has been validated. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.h>

#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "proto/msgpack_strict.h"

#define CKPT_MAGIC "ShardMeter checkpoint"
#define OPTIM_MAGIC "ShardMeter optimizer state"
#define PAYLOAD_MAX PR_MP_BIN_MAX

/* Bounds of the pre-scan.  Our files nest four deep (file map, tensor
 * table, tensor map, shape) and hold about 14 objects per tensor. */
#define SCAN_MAX_DEPTH PR_MP_MAX_DEPTH
#define SCAN_MAX_OBJECTS (64 + 16 * (size_t)PR_CKPT_MAX_TENSORS)

/* Top-level fields, in the order they are written.  The two formats share
 * the first seven and end with the payload and its hash. */
enum {
	F_MAGIC, F_VERSION, F_RUN_ID, F_BLOCK, F_KIND, F_STEP, F_ROUND,
	F_TENSORS, F_CKPT_PAYLOAD, F_CKPT_SHA256, F_CKPT_COUNT
};
enum {
	F_NPARAMS = F_ROUND + 1, F_T, F_OPTIM_PAYLOAD, F_OPTIM_SHA256,
	F_OPTIM_COUNT
};
#define F_MAX F_OPTIM_COUNT

static const char *const ckpt_keys[F_CKPT_COUNT] = {
	"magic", "version", "run_id", "block", "kind", "step", "round",
	"tensors", "payload", "sha256"
};
static const char *const optim_keys[F_OPTIM_COUNT] = {
	"magic", "version", "run_id", "block", "kind", "step", "round",
	"nparams", "t", "payload", "sha256"
};

enum { T_NAME, T_DTYPE, T_SHAPE, T_BYTES, T_COUNT };
static const char *const tensor_keys[T_COUNT] = {
	"name", "dtype", "shape", "bytes"
};

/* BlockTrain's three, then SOMA's (DESIGN section 3): an expert (block
 * holds its index), the N = 1 seed, and the three controls */
static const char *const kinds[] = { "block", "e2e", "causal", "expert",
    "seed", "spsa", "eggroll", "bptt" };
#define KINDS_TEXT "block, e2e, causal, expert, seed, spsa, eggroll or bptt"

struct format {
	struct pr_mp_format mp;
	const char *const *keys;
	int nkeys;
};

static const struct format ckpt_format = {
	{ CKPT_MAGIC, "checkpoint", "not a ShardMeter checkpoint",
	    "the file is damaged", PR_CKPT_VERSION, SCAN_MAX_DEPTH,
	    SCAN_MAX_OBJECTS },
	ckpt_keys, F_CKPT_COUNT
};
static const struct format optim_format = {
	{ OPTIM_MAGIC, "optimizer state",
	    "not a ShardMeter optimizer-state file", "the file is damaged",
	    PR_CKPT_VERSION, SCAN_MAX_DEPTH, SCAN_MAX_OBJECTS },
	optim_keys, F_OPTIM_COUNT
};
/* Each format names the other (and an update) when handed one. */
static const struct pr_mp_format update_format_name = {
	"ShardMeter update", "update", NULL, NULL, 0, 0, 0
};
static const struct pr_mp_format *const ckpt_others[] = {
	&optim_format.mp, &update_format_name, NULL
};
static const struct pr_mp_format *const optim_others[] = {
	&ckpt_format.mp, &update_format_name, NULL
};

/* ---- helpers ---- */

static const char *
errno_str(int e, char *b, size_t n)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
	return strerror_r(e, b, n);
#else
	if (strerror_r(e, b, n) != 0)
		snprintf(b, n, "error %d", e);
	return b;
#endif
}

static int
is_kind(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strlen(kinds[i]) == n && memcmp(kinds[i], s, n) == 0)
			return 1;
	return 0;
}

int
pr_ckpt_sha256_hex(const char *buf, size_t len, char hex[65], char *err)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[PR_SHA256_LEN];
	int i;

	hex[0] = '\0';
	if (pr_mp_sha256(buf, len, md) != 0)
		return kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
	for (i = 0; i < PR_SHA256_LEN; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
	return 0;
}

/* ---- encoding ---- */

static int
check_meta(const pr_ckpt_meta *meta, char *err)
{
	if (!pr_mp_is_run_id(meta->run_id,
	    strnlen(meta->run_id, PR_RUN_ID_LEN)))
		return kn_error(err, KN_EINVAL, "run id must be 64 lowercase "
		    "hex digits");
	if (meta->block < 0 || meta->block > PR_MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "block index %d is outside "
		    "[0, %d]", meta->block, PR_MAX_BLOCKS);
	if (!is_kind(meta->kind, strnlen(meta->kind, PR_CKPT_KIND_LEN)))
		return kn_error(err, KN_EINVAL, "checkpoint kind must be "
		    KINDS_TEXT);
	if (meta->step < 0 || meta->round < 0)
		return kn_error(err, KN_EINVAL, "step and round must be "
		    "non-negative (got %lld and %lld)",
		    (long long)meta->step, (long long)meta->round);
	return 0;
}

/* Starts the buffer at its final size, so a large payload is copied once
 * rather than through repeated doublings. */
static int
sbuffer_start(msgpack_sbuffer *sb, uint64_t size, char *err)
{
	msgpack_sbuffer_init(sb);
	sb->data = malloc((size_t)size);
	if (sb->data == NULL)
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB for "
		    "a checkpoint", (double)size / 1048576.0);
	sb->alloc = (size_t)size;
	return 0;
}

static int
pack_head(msgpack_packer *pk, const struct format *f,
    const pr_ckpt_meta *meta)
{
	int rc = 0;

	rc |= msgpack_pack_map(pk, (size_t)f->nkeys);
	rc |= pr_mp_pack_key(pk, f->keys[F_MAGIC]);
	rc |= msgpack_pack_str_with_body(pk, f->mp.magic, strlen(f->mp.magic));
	rc |= pr_mp_pack_key(pk, f->keys[F_VERSION]);
	rc |= msgpack_pack_uint64(pk, PR_CKPT_VERSION);
	rc |= pr_mp_pack_key(pk, f->keys[F_RUN_ID]);
	rc |= msgpack_pack_str_with_body(pk, meta->run_id,
	    strlen(meta->run_id));
	rc |= pr_mp_pack_key(pk, f->keys[F_BLOCK]);
	rc |= msgpack_pack_uint64(pk, (uint64_t)meta->block);
	rc |= pr_mp_pack_key(pk, f->keys[F_KIND]);
	rc |= msgpack_pack_str_with_body(pk, meta->kind, strlen(meta->kind));
	rc |= pr_mp_pack_key(pk, f->keys[F_STEP]);
	rc |= msgpack_pack_uint64(pk, (uint64_t)meta->step);
	rc |= pr_mp_pack_key(pk, f->keys[F_ROUND]);
	rc |= msgpack_pack_uint64(pk, (uint64_t)meta->round);
	return rc;
}

/* Appends the hash of the last payload_len bytes written, which are the
 * payload. */
static int
pack_hash(msgpack_packer *pk, msgpack_sbuffer *sb, size_t payload_len)
{
	unsigned char md[PR_SHA256_LEN];
	int rc = 0;

	if (pr_mp_sha256(sb->data + sb->size - payload_len, payload_len,
	    md) != 0)
		return -1;
	rc |= pr_mp_pack_key(pk, "sha256");
	rc |= msgpack_pack_bin_with_body(pk, md, PR_SHA256_LEN);
	return rc;
}

static int
finish(msgpack_sbuffer *sb, int rc, char **buf, size_t *len, char *err)
{
	if (rc != 0) {
		msgpack_sbuffer_destroy(sb);
		return kn_error(err, KN_ENOMEM, "out of memory while encoding "
		    "a checkpoint");
	}
	*buf = sb->data;
	*len = sb->size;
	return 0;
}

int
pr_ckpt_encode(const pr_ckpt_meta *meta, const kn_tensor *tensors,
    int ntensors, const float *params, char **buf, size_t *len, char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint64_t payload = 0, n;
	int i, d, rc;

	*buf = NULL;
	*len = 0;
	if ((rc = check_meta(meta, err)) != 0)
		return rc;
	if (ntensors < 1 || ntensors > PR_CKPT_MAX_TENSORS)
		return kn_error(err, KN_EINVAL, "a checkpoint holds 1 to %d "
		    "tensors, not %d", PR_CKPT_MAX_TENSORS, ntensors);
	for (i = 0; i < ntensors; i++) {
		const kn_tensor *t = &tensors[i];
		size_t nlen = strnlen(t->name, KN_NAME_LEN);
		long bad;

		if (nlen == 0 || nlen == KN_NAME_LEN)
			return kn_error(err, KN_EINVAL, "tensor %d has an empty "
			    "or unterminated name", i);
		if (t->ndim < 1 || t->ndim > KN_MAX_DIMS)
			return kn_error(err, KN_EINVAL, "tensor %s has %d "
			    "dimensions; 1 to %d are allowed", t->name,
			    t->ndim, KN_MAX_DIMS);
		for (d = 0; d < t->ndim; d++)
			if (t->shape[d] < 1 || t->shape[d] > UINT32_MAX)
				return kn_error(err, KN_EINVAL, "tensor %s has "
				    "dimension %lld", t->name,
				    (long long)t->shape[d]);
		/* factors below 2^32 and a running total kept below 2^30:
		 * the product cannot wrap */
		for (d = 0, n = 1; d < t->ndim && n <= PAYLOAD_MAX / 4; d++)
			n *= (uint64_t)t->shape[d];
		if (n > PAYLOAD_MAX / 4 || (payload += 4 * n) > PAYLOAD_MAX)
			return kn_error(err, KN_EINVAL, "checkpoint payload "
			    "exceeds the 4 GiB a msgpack bin holds");
		bad = kn_first_nonfinite(params + t->offset,
		    kn_tensor_numel(t));
		if (bad >= 0)
			return kn_error(err, KN_ENUM, "tensor %s holds a "
			    "non-finite value at index %ld", t->name, bad);
	}

	if ((rc = sbuffer_start(&sb, payload + 1024 +
	    (uint64_t)ntensors * (KN_NAME_LEN + 96), err)) != 0)
		return rc;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	rc = pack_head(&pk, &ckpt_format, meta);
	rc |= pr_mp_pack_key(&pk, "tensors");
	rc |= msgpack_pack_array(&pk, (size_t)ntensors);
	for (i = 0; i < ntensors; i++) {
		const kn_tensor *t = &tensors[i];

		rc |= msgpack_pack_map(&pk, T_COUNT);
		rc |= pr_mp_pack_key(&pk, "name");
		rc |= pr_mp_pack_key(&pk, t->name);
		rc |= pr_mp_pack_key(&pk, "dtype");
		rc |= pr_mp_pack_key(&pk, "f32");
		rc |= pr_mp_pack_key(&pk, "shape");
		rc |= msgpack_pack_array(&pk, (size_t)t->ndim);
		for (d = 0; d < t->ndim; d++)
			rc |= msgpack_pack_uint64(&pk, (uint64_t)t->shape[d]);
		rc |= pr_mp_pack_key(&pk, "bytes");
		rc |= msgpack_pack_uint64(&pk,
		    (uint64_t)kn_tensor_numel(t) * sizeof(float));
	}
	rc |= pr_mp_pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, (size_t)payload);
	for (i = 0; i < ntensors && rc == 0; i++)
		rc |= pr_mp_pack_le_floats(&pk, params + tensors[i].offset,
		    kn_tensor_numel(&tensors[i]));
	if (rc == 0)
		rc = pack_hash(&pk, &sb, (size_t)payload);
	return finish(&sb, rc, buf, len, err);
}

int
pr_ckpt_encode_optim(const pr_ckpt_meta *meta, size_t nparams,
    const float *m, const float *v, int t, char **buf, size_t *len,
    char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t i;
	long bad;
	int rc;

	*buf = NULL;
	*len = 0;
	if ((rc = check_meta(meta, err)) != 0)
		return rc;
	if (nparams < 1 || nparams > PAYLOAD_MAX / 8)
		return kn_error(err, KN_EINVAL, "optimizer state of %zu "
		    "parameters does not fit a msgpack bin", nparams);
	if (t < 0)
		return kn_error(err, KN_EINVAL, "optimizer step %d is "
		    "negative", t);
	if ((bad = kn_first_nonfinite(m, nparams)) >= 0)
		return kn_error(err, KN_ENUM, "optimizer state m holds a "
		    "non-finite value at index %ld", bad);
	if ((bad = kn_first_nonfinite(v, nparams)) >= 0)
		return kn_error(err, KN_ENUM, "optimizer state v holds a "
		    "non-finite value at index %ld", bad);
	for (i = 0; i < nparams; i++)
		if (v[i] < 0)
			return kn_error(err, KN_ENUM, "optimizer state v holds "
			    "a negative value at index %zu", i);

	if ((rc = sbuffer_start(&sb, 8 * (uint64_t)nparams + 1024, err)) != 0)
		return rc;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	rc = pack_head(&pk, &optim_format, meta);
	rc |= pr_mp_pack_key(&pk, "nparams");
	rc |= msgpack_pack_uint64(&pk, nparams);
	rc |= pr_mp_pack_key(&pk, "t");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)t);
	rc |= pr_mp_pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, 8 * nparams);
	if (rc == 0)
		rc |= pr_mp_pack_le_floats(&pk, m, nparams);
	if (rc == 0)
		rc |= pr_mp_pack_le_floats(&pk, v, nparams);
	if (rc == 0)
		rc = pack_hash(&pk, &sb, 8 * nparams);
	return finish(&sb, rc, buf, len, err);
}

/* ---- decoding ---- */

/* Everything both formats share: the checks of pr_mp_open(), then the
 * metadata fields.  up must be initialised; the caller destroys it. */
static int
parse_head(const char *buf, size_t len, const struct format *f,
    msgpack_unpacked *up, const msgpack_object **fields, pr_ckpt_meta *meta,
    char *err)
{
	const msgpack_object *root, *o;
	uint64_t u = 0;
	int rc;

	if ((rc = pr_mp_open(buf, len, &f->mp, f == &ckpt_format ?
	    ckpt_others : optim_others, up, &root, err)) != 0)
		return rc;
	if ((rc = pr_mp_collect_fields(root, f->keys, f->nkeys, fields,
	    f->mp.what, err)) != 0)
		return rc;

	memset(meta, 0, sizeof(*meta));
	o = fields[F_RUN_ID];
	if (o->type != MSGPACK_OBJECT_STR ||
	    !pr_mp_is_run_id(o->via.str.ptr, o->via.str.size))
		return kn_error(err, KN_EINVAL, "%s field 'run_id' must be 64 "
		    "lowercase hex digits", f->mp.what);
	memcpy(meta->run_id, o->via.str.ptr, o->via.str.size);
	if ((rc = pr_mp_get_uint(fields[F_BLOCK], PR_MAX_BLOCKS, &u,
	    f->mp.what, "block", err)) != 0)
		return rc;
	meta->block = (int)u;
	o = fields[F_KIND];
	if (o->type != MSGPACK_OBJECT_STR ||
	    !is_kind(o->via.str.ptr, o->via.str.size))
		return kn_error(err, KN_EINVAL, "%s field 'kind' must be "
		    "one of " KINDS_TEXT, f->mp.what);
	memcpy(meta->kind, o->via.str.ptr, o->via.str.size);
	if ((rc = pr_mp_get_uint(fields[F_STEP], INT64_MAX, &u, f->mp.what,
	    "step", err)) != 0)
		return rc;
	meta->step = (int64_t)u;
	if ((rc = pr_mp_get_uint(fields[F_ROUND], INT64_MAX, &u, f->mp.what,
	    "round", err)) != 0)
		return rc;
	meta->round = (int64_t)u;
	return 0;
}

static int
check_expect(const pr_ckpt_meta *got, const pr_ckpt_meta *expect,
    const char *what, char *err)
{
	char want[PR_RUN_ID_LEN];

	if (expect == NULL)
		return 0;
	if (expect->run_id[0] != '\0' &&
	    strncmp(got->run_id, expect->run_id, PR_RUN_ID_LEN) != 0) {
		pr_mp_printable(want, sizeof(want), expect->run_id,
		    strnlen(expect->run_id, PR_RUN_ID_LEN - 1));
		return kn_error(err, KN_EINVAL, "%s belongs to run %s, not %s",
		    what, got->run_id, want);
	}
	if (expect->block >= 0 && got->block != expect->block)
		return kn_error(err, KN_EINVAL, "%s is for block %d, not "
		    "block %d", what, got->block, expect->block);
	if (expect->kind[0] != '\0' &&
	    strncmp(got->kind, expect->kind, PR_CKPT_KIND_LEN) != 0) {
		pr_mp_printable(want, sizeof(want), expect->kind,
		    strnlen(expect->kind, PR_CKPT_KIND_LEN - 1));
		return kn_error(err, KN_EINVAL, "%s is of kind '%s', not "
		    "'%s'", what, got->kind, want);
	}
	return 0;
}

/* Checks the payload bin against its hash; *payload points into buf. */
static int
check_payload(const msgpack_object *po, const msgpack_object *ho,
    const char *what, const unsigned char **payload, size_t *size,
    char *err)
{
	unsigned char md[PR_SHA256_LEN];

	if (po->type != MSGPACK_OBJECT_BIN)
		return kn_error(err, KN_EINVAL, "%s field 'payload' must be a "
		    "msgpack bin", what);
	if (ho->type != MSGPACK_OBJECT_BIN ||
	    ho->via.bin.size != PR_SHA256_LEN)
		return kn_error(err, KN_EINVAL, "%s field 'sha256' must be a "
		    "bin of %d bytes", what, PR_SHA256_LEN);
	if (pr_mp_sha256(po->via.bin.ptr, po->via.bin.size, md) != 0)
		return kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
	if (memcmp(md, ho->via.bin.ptr, PR_SHA256_LEN) != 0)
		return kn_error(err, KN_EINVAL, "payload hash mismatch: the "
		    "file is corrupt");
	*payload = (const unsigned char *)po->via.bin.ptr;
	*size = po->via.bin.size;
	return 0;
}

/* One entry of the file's tensor table, checked on its own. */
struct table_entry {
	char name[KN_NAME_LEN];
	kn_tensor shape;        /* ndim and shape only */
	uint64_t bytes;
};

static int
parse_tensor(const msgpack_object *o, int i, struct table_entry *e,
    char *err)
{
	const msgpack_object *f[T_COUNT];
	char ctx[48], shown[KN_NAME_LEN];
	uint64_t n = 1;
	uint32_t d, c;
	int rc;

	snprintf(ctx, sizeof(ctx), "tensor %d of the table", i);
	if (o->type != MSGPACK_OBJECT_MAP)
		return kn_error(err, KN_EINVAL, "%s is not a map", ctx);
	if ((rc = pr_mp_collect_fields(o, tensor_keys, T_COUNT, f, ctx,
	    err)) != 0)
		return rc;
	memset(e, 0, sizeof(*e));
	if (f[T_NAME]->type != MSGPACK_OBJECT_STR ||
	    f[T_NAME]->via.str.size == 0 ||
	    f[T_NAME]->via.str.size >= KN_NAME_LEN)
		return kn_error(err, KN_EINVAL, "%s has no name of 1 to %d "
		    "characters", ctx, KN_NAME_LEN - 1);
	for (c = 0; c < f[T_NAME]->via.str.size; c++) {
		unsigned char ch = (unsigned char)f[T_NAME]->via.str.ptr[c];

		if (ch <= 0x20 || ch >= 0x7f)
			return kn_error(err, KN_EINVAL, "%s has a name with a "
			    "space or a non-ASCII byte", ctx);
	}
	memcpy(e->name, f[T_NAME]->via.str.ptr, f[T_NAME]->via.str.size);
	if (!pr_mp_str_is(f[T_DTYPE], "f32")) {
		if (f[T_DTYPE]->type == MSGPACK_OBJECT_STR) {
			pr_mp_printable(shown, sizeof(shown),
			    f[T_DTYPE]->via.str.ptr, f[T_DTYPE]->via.str.size);
			return kn_error(err, KN_EINVAL, "tensor %s has dtype "
			    "'%s'; this build reads only f32", e->name, shown);
		}
		return kn_error(err, KN_EINVAL, "tensor %s has no dtype",
		    e->name);
	}
	if (f[T_SHAPE]->type != MSGPACK_OBJECT_ARRAY ||
	    f[T_SHAPE]->via.array.size < 1 ||
	    f[T_SHAPE]->via.array.size > KN_MAX_DIMS)
		return kn_error(err, KN_EINVAL, "tensor %s must have a shape "
		    "of 1 to %d dimensions", e->name, KN_MAX_DIMS);
	e->shape.ndim = (int)f[T_SHAPE]->via.array.size;
	for (d = 0; d < f[T_SHAPE]->via.array.size; d++) {
		const msgpack_object *dim = &f[T_SHAPE]->via.array.ptr[d];

		if (dim->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    dim->via.u64 < 1 || dim->via.u64 > UINT32_MAX)
			return kn_error(err, KN_EINVAL, "tensor %s has a "
			    "dimension that is not an integer in [1, 2^32)",
			    e->name);
		e->shape.shape[d] = (int64_t)dim->via.u64;
		/* factors below 2^32 and a total kept below 2^30: no wrap */
		n *= dim->via.u64;
		if (n > PAYLOAD_MAX / 4)
			return kn_error(err, KN_EINVAL, "tensor %s is larger "
			    "than a payload can hold", e->name);
	}
	if (f[T_BYTES]->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    f[T_BYTES]->via.u64 != 4 * n)
		return kn_error(err, KN_EINVAL, "tensor %s: 'bytes' must be "
		    "%llu, 4 times its element count", e->name,
		    (unsigned long long)(4 * n));
	e->bytes = 4 * n;
	return 0;
}

static int
same_shape(const kn_tensor *a, const kn_tensor *b)
{
	int d;

	if (a->ndim != b->ndim)
		return 0;
	for (d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return 0;
	return 1;
}

/* Name and shape of table entry i against the model's tensor i. */
static int
match_tensor(const struct table_entry *e, const kn_tensor *t, uint32_t i,
    char *err)
{
	char got[96], want[96];

	if (strncmp(e->name, t->name, KN_NAME_LEN) != 0)
		return kn_error(err, KN_EINVAL, "tensor %u is named %s, "
		    "expected %s", i, e->name, t->name);
	if (!same_shape(&e->shape, t)) {
		kn_tensor_shape_str(&e->shape, got, sizeof(got));
		kn_tensor_shape_str(t, want, sizeof(want));
		return kn_error(err, KN_EINVAL, "tensor %s has shape %s, "
		    "expected %s", e->name, got, want);
	}
	return 0;
}

/* The checkpoint's tensor table, each entry matched against the model's
 * when tensors is given; *entries is the caller's to free, even on error,
 * and *total the payload bytes the table describes. */
static int
parse_table(const msgpack_object *table, const kn_tensor *tensors,
    int ntensors, struct table_entry **entries, uint32_t *count,
    uint64_t *total, char *err)
{
	uint32_t i;
	int rc;

	if (table->type != MSGPACK_OBJECT_ARRAY ||
	    table->via.array.size < 1 ||
	    table->via.array.size > PR_CKPT_MAX_TENSORS)
		return kn_error(err, KN_EINVAL, "checkpoint field 'tensors' "
		    "must be an array of 1 to %d tensors",
		    PR_CKPT_MAX_TENSORS);
	*count = table->via.array.size;
	if (tensors != NULL && *count != (uint32_t)ntensors)
		return kn_error(err, KN_EINVAL, "checkpoint has %u tensors, "
		    "expected %d", *count, ntensors);
	if ((*entries = calloc(*count, sizeof(**entries))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < *count; i++) {
		struct table_entry *e = &(*entries)[i];

		if ((rc = parse_tensor(&table->via.array.ptr[i], (int)i, e,
		    err)) != 0)
			return rc;
		*total += e->bytes;
		if (tensors != NULL &&
		    (rc = match_tensor(e, &tensors[i], i, err)) != 0)
			return rc;
	}
	return 0;
}

/* The payload against the table: its size, then every value finite. */
static int
check_tensor_values(const struct table_entry *entries, uint32_t count,
    const unsigned char *payload, size_t payload_size, uint64_t total,
    char *err)
{
	uint64_t at;
	uint32_t i;

	if (payload_size != total)
		return kn_error(err, KN_EINVAL, "checkpoint payload holds %zu "
		    "bytes but its tensor table describes %llu", payload_size,
		    (unsigned long long)total);
	for (i = 0, at = 0; i < count; at += entries[i].bytes, i++) {
		long bad = pr_mp_first_nonfinite_le(payload + at,
		    entries[i].bytes / 4);

		if (bad >= 0)
			return kn_error(err, KN_ENUM, "tensor %s holds a "
			    "non-finite value at index %ld", entries[i].name,
			    bad);
	}
	return 0;
}

int
pr_ckpt_decode(const char *buf, size_t len, const pr_ckpt_meta *expect,
    const kn_tensor *tensors, int ntensors, float *params_out,
    pr_ckpt_meta *meta_out, char *err)
{
	const msgpack_object *fields[F_MAX];
	struct table_entry *entries = NULL;
	msgpack_unpacked up;
	pr_ckpt_meta meta;
	const unsigned char *payload = NULL;
	size_t payload_size = 0;
	uint64_t total = 0, at;
	uint32_t count = 0, i;
	int rc;

	if (params_out != NULL && tensors == NULL)
		return kn_error(err, KN_EINVAL, "decoding parameters needs "
		    "the model's tensor table");
	msgpack_unpacked_init(&up);
	if ((rc = parse_head(buf, len, &ckpt_format, &up, fields, &meta,
	    err)) != 0 ||
	    (rc = check_expect(&meta, expect, "checkpoint", err)) != 0 ||
	    (rc = parse_table(fields[F_TENSORS], tensors, ntensors, &entries,
	    &count, &total, err)) != 0 ||
	    (rc = check_payload(fields[F_CKPT_PAYLOAD], fields[F_CKPT_SHA256],
	    "checkpoint", &payload, &payload_size, err)) != 0 ||
	    (rc = check_tensor_values(entries, count, payload, payload_size,
	    total, err)) != 0)
		goto out;

	/* valid: only now touch the caller's memory */
	if (params_out != NULL)
		for (i = 0, at = 0; i < count; at += entries[i].bytes, i++)
			pr_mp_load_le_floats(params_out + tensors[i].offset,
			    payload + at, entries[i].bytes / 4);
	if (meta_out != NULL)
		*meta_out = meta;
	rc = 0;
out:
	free(entries);
	msgpack_unpacked_destroy(&up);
	return rc;
}

int
pr_ckpt_peek(const char *buf, size_t len, pr_ckpt_meta *meta_out,
    char *err)
{
	const msgpack_object *fields[F_MAX];
	msgpack_unpacked up;
	pr_ckpt_meta meta;
	int rc;

	msgpack_unpacked_init(&up);
	rc = parse_head(buf, len, &ckpt_format, &up, fields, &meta, err);
	msgpack_unpacked_destroy(&up);
	if (rc == 0 && meta_out != NULL)
		*meta_out = meta;
	return rc;
}

int
pr_ckpt_decode_optim(const char *buf, size_t len,
    const pr_ckpt_meta *expect, size_t nparams, float *m_out, float *v_out,
    int *t_out, pr_ckpt_meta *meta_out, char *err)
{
	const msgpack_object *fields[F_MAX];
	msgpack_unpacked up;
	pr_ckpt_meta meta;
	const unsigned char *payload = NULL;
	size_t payload_size = 0, i;
	uint64_t n = 0, t = 0;
	long bad;
	int rc;

	msgpack_unpacked_init(&up);
	if ((rc = parse_head(buf, len, &optim_format, &up, fields, &meta,
	    err)) != 0)
		goto out;
	if ((rc = check_expect(&meta, expect, "optimizer state", err)) != 0)
		goto out;
	if ((rc = pr_mp_get_uint(fields[F_NPARAMS], PAYLOAD_MAX / 8, &n,
	    "optimizer state", "nparams", err)) != 0 ||
	    (rc = pr_mp_get_uint(fields[F_T], INT_MAX, &t, "optimizer state",
	    "t", err)) != 0)
		goto out;
	if (n != nparams) {
		rc = kn_error(err, KN_EINVAL, "optimizer state holds %llu "
		    "parameters, expected %zu", (unsigned long long)n,
		    nparams);
		goto out;
	}
	if ((rc = check_payload(fields[F_OPTIM_PAYLOAD],
	    fields[F_OPTIM_SHA256], "optimizer state", &payload,
	    &payload_size, err)) != 0)
		goto out;
	if (payload_size != 8 * n) {
		rc = kn_error(err, KN_EINVAL, "optimizer state payload holds "
		    "%zu bytes, expected %llu", payload_size,
		    (unsigned long long)(8 * n));
		goto out;
	}
	for (i = 0; i < 2; i++)
		if ((bad = pr_mp_first_nonfinite_le(payload + 4 * n * i,
		    n)) >= 0) {
			rc = kn_error(err, KN_ENUM, "optimizer state %s holds "
			    "a non-finite value at index %ld", i ? "v" : "m",
			    bad);
			goto out;
		}
	for (i = 0; i < n; i++)
		if (pr_mp_load_le_float(payload + 4 * (n + i)) < 0) {
			rc = kn_error(err, KN_ENUM, "optimizer state v holds a "
			    "negative value at index %zu", i);
			goto out;
		}

	if (m_out != NULL)
		pr_mp_load_le_floats(m_out, payload, n);
	if (v_out != NULL)
		pr_mp_load_le_floats(v_out, payload + 4 * n, n);
	if (t_out != NULL)
		*t_out = (int)t;
	if (meta_out != NULL)
		*meta_out = meta;
	rc = 0;
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}

/* ---- files ---- */

static int
write_all(int fd, const char *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		/* Linux moves at most about 2 GiB per call anyway */
		size_t chunk = len - done > (1u << 30) ? (1u << 30) :
		    len - done;
		ssize_t w = write(fd, buf + done, chunk);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

static int
fsync_retry(int fd)
{
	int r;

	while ((r = fsync(fd)) != 0 && errno == EINTR)
		;
	return r;
}

/* After a rename the new name lives in the folder's entries, which are
 * durable only once the folder itself is synced. */
static int
sync_folder(const char *path, char *err)
{
	const char *slash = strrchr(path, '/');
	char *dir, msg[128];
	int fd, e;

	if (slash == NULL)
		dir = strdup(".");
	else if (slash == path)
		dir = strdup("/");
	else
		dir = strndup(path, (size_t)(slash - path));
	if (dir == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync_retry(fd) != 0) {
		e = errno;
		if (fd >= 0)
			close(fd);
		kn_error(err, KN_EIO, "wrote %s but cannot sync its folder "
		    "%s: %s", path, dir, errno_str(e, msg, sizeof(msg)));
		free(dir);
		return KN_EIO;
	}
	close(fd);
	free(dir);
	return 0;
}

/* A full disk is told apart from other failures: the daemon waits for
 * space instead of giving up (worker.c). */
static int
space_code(int e)
{
	return e == ENOSPC || e == EDQUOT ? KN_ENOSPC : KN_EIO;
}

int
pr_ckpt_write_file(const char *path, const char *buf, size_t len,
    char *err)
{
	size_t n = strlen(path) + 32;
	char *tmp = malloc(n), msg[128];
	const char *step;
	int fd, e;

	if (tmp == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
	/* O_TRUNC, not O_EXCL: a temporary file left by a crash under the
	 * same pid must not block every later write */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
	    0644);
	if (fd < 0) {
		e = errno;
		kn_error(err, space_code(e), "cannot create %s: %s", tmp,
		    errno_str(e, msg, sizeof(msg)));
		free(tmp);
		return space_code(e);
	}
	if (write_all(fd, buf, len) != 0)
		step = "write";
	else if (fsync_retry(fd) != 0)
		step = "sync";
	else
		step = NULL;
	e = errno;
	/* close reports delayed write errors on some file systems */
	if (close(fd) != 0 && step == NULL) {
		step = "close";
		e = errno;
	}
	if (step == NULL && rename(tmp, path) != 0) {
		step = "rename";
		e = errno;
	}
	if (step != NULL) {
		unlink(tmp);
		kn_error(err, space_code(e), "cannot %s %s: %s", step,
		    strcmp(step, "rename") == 0 ? path : tmp,
		    errno_str(e, msg, sizeof(msg)));
		free(tmp);
		return space_code(e);
	}
	free(tmp);
	return sync_folder(path, err);
}

int
pr_ckpt_read_file(const char *path, size_t max_len, char **buf,
    size_t *len, char *err)
{
	struct stat st;
	char *data = NULL, msg[128], extra;
	size_t size, done = 0;
	ssize_t r;
	int fd, e, io_err = 0, changed = 0;

	*buf = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		return kn_error(err, KN_EIO, "cannot open %s: %s", path,
		    errno_str(e, msg, sizeof(msg)));
	}
	if (fstat(fd, &st) != 0) {
		e = errno;
		close(fd);
		return kn_error(err, KN_EIO, "cannot stat %s: %s", path,
		    errno_str(e, msg, sizeof(msg)));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return kn_error(err, KN_EIO, "%s is not a regular file", path);
	}
	if ((uintmax_t)st.st_size > max_len) {
		close(fd);
		return kn_error(err, KN_EINVAL, "%s is %lld bytes, more than "
		    "the %zu this reader accepts", path,
		    (long long)st.st_size, max_len);
	}
	size = (size_t)st.st_size;
	data = malloc(size ? size : 1);
	if (data == NULL) {
		close(fd);
		return kn_error(err, KN_ENOMEM, "cannot allocate %zu bytes "
		    "for %s", size, path);
	}
	while (done < size) {
		r = read(fd, data + done, size - done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			io_err = errno;
			break;
		}
		if (r == 0) {
			changed = 1;
			break;
		}
		done += (size_t)r;
	}
	/* one more byte tells whether the file grew meanwhile */
	while (io_err == 0 && !changed &&
	    (r = read(fd, &extra, 1)) != 0) {
		if (r > 0)
			changed = 1;
		else if (errno != EINTR)
			io_err = errno;
	}
	close(fd);
	if (io_err != 0 || changed) {
		free(data);
		if (io_err != 0)
			return kn_error(err, KN_EIO, "cannot read %s: %s",
			    path, errno_str(io_err, msg, sizeof(msg)));
		return kn_error(err, KN_EIO, "%s changed while it was being "
		    "read", path);
	}
	*buf = data;
	*len = size;
	return 0;
}
