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
#include <openssl/evp.h>

#include "kernels/error.h"
#include "proto/checkpoint.h"

#define CKPT_MAGIC "ShardMeter checkpoint"
#define OPTIM_MAGIC "ShardMeter optimizer state"
#define SHA256_LEN 32
/* A msgpack bin holds at most 2^32 - 1 bytes. */
#define PAYLOAD_MAX ((uint64_t)UINT32_MAX)

/* Bounds of the pre-scan.  Our files nest four deep (file map, tensor
 * table, tensor map, shape) and hold about 14 objects per tensor. */
#define SCAN_MAX_DEPTH 8
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

static const char *const kinds[] = { "block", "e2e", "causal" };

struct format {
	const char *magic;
	const char *what;       /* how messages name the file */
	const char *notme;      /* said of a file without this magic */
	const char *const *keys;
	int nkeys;
};

static const struct format ckpt_format = {
	CKPT_MAGIC, "checkpoint", "not a ShardMeter checkpoint",
	ckpt_keys, F_CKPT_COUNT
};
static const struct format optim_format = {
	OPTIM_MAGIC, "optimizer state",
	"not a ShardMeter optimizer-state file", optim_keys, F_OPTIM_COUNT
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
str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	    memcmp(o->via.str.ptr, s, n) == 0;
}

/* Copies bytes from the file into a message, so a hostile name cannot
 * put control characters into a log line. */
static void
printable(char *dst, size_t dlen, const char *src, size_t slen)
{
	size_t i, n = slen < dlen - 1 ? slen : dlen - 1;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	dst[n] = '\0';
}

static int
is_run_id(const char *s, size_t n)
{
	size_t i;

	if (n != PR_RUN_ID_LEN - 1)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
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

static int
little_endian(void)
{
	const uint32_t one = 1;

	return *(const unsigned char *)&one == 1;
}

static float
load_le_float(const unsigned char *p)
{
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
	    (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* n floats from little-endian bytes; the bytes sit inside a msgpack
 * buffer and need not be aligned. */
static void
load_le_floats(float *dst, const unsigned char *src, size_t n)
{
	size_t i;

	if (little_endian()) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	for (i = 0; i < n; i++)
		dst[i] = load_le_float(src + 4 * i);
}

/* Index of the first non-finite of n little-endian floats, or -1. */
static long
first_nonfinite_le(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isfinite(load_le_float(p + 4 * i)))
			return (long)i;
	return -1;
}

static int
pack_le_floats(msgpack_packer *pk, const float *src, size_t n)
{
	unsigned char chunk[4096];
	size_t i, done;
	int rc = 0;

	if (little_endian())
		return msgpack_pack_bin_body(pk, src, n * sizeof(float));
	for (done = 0; done < n && rc == 0; ) {
		size_t k = n - done < sizeof(chunk) / 4 ?
		    n - done : sizeof(chunk) / 4;

		for (i = 0; i < k; i++) {
			uint32_t u;

			memcpy(&u, &src[done + i], sizeof(u));
			chunk[4 * i] = (unsigned char)u;
			chunk[4 * i + 1] = (unsigned char)(u >> 8);
			chunk[4 * i + 2] = (unsigned char)(u >> 16);
			chunk[4 * i + 3] = (unsigned char)(u >> 24);
		}
		rc = msgpack_pack_bin_body(pk, chunk, 4 * k);
		done += k;
	}
	return rc;
}

static int
sha256(const void *p, size_t n, unsigned char md[SHA256_LEN])
{
	unsigned int mdlen = 0;

	if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != SHA256_LEN)
		return -1;
	return 0;
}

int
pr_ckpt_sha256_hex(const char *buf, size_t len, char hex[65], char *err)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[SHA256_LEN];
	int i;

	hex[0] = '\0';
	if (sha256(buf, len, md) != 0)
		return kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
	for (i = 0; i < SHA256_LEN; i++) {
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
	if (!is_run_id(meta->run_id, strnlen(meta->run_id, PR_RUN_ID_LEN)))
		return kn_error(err, KN_EINVAL, "run id must be 64 lowercase "
		    "hex digits");
	if (meta->block < 0 || meta->block > PR_MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "block index %d is outside "
		    "[0, %d]", meta->block, PR_MAX_BLOCKS);
	if (!is_kind(meta->kind, strnlen(meta->kind, PR_CKPT_KIND_LEN)))
		return kn_error(err, KN_EINVAL, "checkpoint kind must be "
		    "block, e2e or causal");
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
pack_key(msgpack_packer *pk, const char *key)
{
	return msgpack_pack_str_with_body(pk, key, strlen(key));
}

static int
pack_head(msgpack_packer *pk, const struct format *f,
    const pr_ckpt_meta *meta)
{
	int rc = 0;

	rc |= msgpack_pack_map(pk, (size_t)f->nkeys);
	rc |= pack_key(pk, f->keys[F_MAGIC]);
	rc |= msgpack_pack_str_with_body(pk, f->magic, strlen(f->magic));
	rc |= pack_key(pk, f->keys[F_VERSION]);
	rc |= msgpack_pack_uint64(pk, PR_CKPT_VERSION);
	rc |= pack_key(pk, f->keys[F_RUN_ID]);
	rc |= msgpack_pack_str_with_body(pk, meta->run_id,
	    strlen(meta->run_id));
	rc |= pack_key(pk, f->keys[F_BLOCK]);
	rc |= msgpack_pack_uint64(pk, (uint64_t)meta->block);
	rc |= pack_key(pk, f->keys[F_KIND]);
	rc |= msgpack_pack_str_with_body(pk, meta->kind, strlen(meta->kind));
	rc |= pack_key(pk, f->keys[F_STEP]);
	rc |= msgpack_pack_uint64(pk, (uint64_t)meta->step);
	rc |= pack_key(pk, f->keys[F_ROUND]);
	rc |= msgpack_pack_uint64(pk, (uint64_t)meta->round);
	return rc;
}

/* Appends the hash of the last payload_len bytes written, which are the
 * payload. */
static int
pack_hash(msgpack_packer *pk, msgpack_sbuffer *sb, size_t payload_len)
{
	unsigned char md[SHA256_LEN];
	int rc = 0;

	if (sha256(sb->data + sb->size - payload_len, payload_len, md) != 0)
		return -1;
	rc |= pack_key(pk, "sha256");
	rc |= msgpack_pack_bin_with_body(pk, md, SHA256_LEN);
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
	rc |= pack_key(&pk, "tensors");
	rc |= msgpack_pack_array(&pk, (size_t)ntensors);
	for (i = 0; i < ntensors; i++) {
		const kn_tensor *t = &tensors[i];

		rc |= msgpack_pack_map(&pk, T_COUNT);
		rc |= pack_key(&pk, "name");
		rc |= pack_key(&pk, t->name);
		rc |= pack_key(&pk, "dtype");
		rc |= pack_key(&pk, "f32");
		rc |= pack_key(&pk, "shape");
		rc |= msgpack_pack_array(&pk, (size_t)t->ndim);
		for (d = 0; d < t->ndim; d++)
			rc |= msgpack_pack_uint64(&pk, (uint64_t)t->shape[d]);
		rc |= pack_key(&pk, "bytes");
		rc |= msgpack_pack_uint64(&pk,
		    (uint64_t)kn_tensor_numel(t) * sizeof(float));
	}
	rc |= pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, (size_t)payload);
	for (i = 0; i < ntensors && rc == 0; i++)
		rc |= pack_le_floats(&pk, params + tensors[i].offset,
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
	rc |= pack_key(&pk, "nparams");
	rc |= msgpack_pack_uint64(&pk, nparams);
	rc |= pack_key(&pk, "t");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)t);
	rc |= pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, 8 * nparams);
	if (rc == 0)
		rc |= pack_le_floats(&pk, m, nparams);
	if (rc == 0)
		rc |= pack_le_floats(&pk, v, nparams);
	if (rc == 0)
		rc = pack_hash(&pk, &sb, 8 * nparams);
	return finish(&sb, rc, buf, len, err);
}

/* ---- decoding ---- */

enum { SCAN_OK, SCAN_TRUNCATED, SCAN_MALFORMED, SCAN_TOO_BIG };

/* Walks one msgpack object without building it.  msgpack-c allocates a
 * container's elements as soon as it reads the count, so a five-byte
 * array header could ask for gigabytes: this bounds the counts by the
 * bytes left and the total by what our formats can hold before msgpack-c
 * sees the buffer.  *end receives the object's length. */
static int
scan_msgpack(const unsigned char *p, size_t len, size_t *end)
{
	uint64_t left[SCAN_MAX_DEPTH];  /* items still to read per level */
	uint64_t pending = 1;           /* sum of left[] */
	size_t pos = 0, objects = 0;
	int depth = 1;

	left[0] = 1;
	while (pending > 0) {
		uint64_t skip = 0, count = 0, children = 0;
		int count_bytes = 0, container = 0, i;
		unsigned char b;

		while (left[depth - 1] == 0)
			depth--;
		left[depth - 1]--;
		pending--;
		if (pos >= len)
			return SCAN_TRUNCATED;
		if (++objects > SCAN_MAX_OBJECTS)
			return SCAN_TOO_BIG;
		b = p[pos++];
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 ||
		    b == 0xc3)
			;       /* fixint, nil, bool: the byte is the object */
		else if (b <= 0x8f)
			children = 2 * (uint64_t)(b & 0x0f);
		else if (b <= 0x9f)
			children = b & 0x0f;
		else if (b <= 0xbf)
			skip = b & 0x1f;
		else {
			switch (b) {
			case 0xc4: case 0xd9: count_bytes = 1; break;
			case 0xc5: case 0xda: count_bytes = 2; break;
			case 0xc6: case 0xdb: count_bytes = 4; break;
			/* ext: length, then a type byte, then the data */
			case 0xc7: count_bytes = 1; skip = 1; break;
			case 0xc8: count_bytes = 2; skip = 1; break;
			case 0xc9: count_bytes = 4; skip = 1; break;
			case 0xca: skip = 4; break;
			case 0xcb: skip = 8; break;
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xce: case 0xd2: skip = 4; break;
			case 0xcf: case 0xd3: skip = 8; break;
			case 0xd4: skip = 2; break;
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			case 0xdc: count_bytes = 2; container = 1; break;
			case 0xdd: count_bytes = 4; container = 1; break;
			case 0xde: count_bytes = 2; container = 2; break;
			case 0xdf: count_bytes = 4; container = 2; break;
			default:
				return SCAN_MALFORMED;  /* 0xc1 */
			}
		}
		if ((size_t)count_bytes > len - pos)
			return SCAN_TRUNCATED;
		for (i = 0; i < count_bytes; i++)
			count = count << 8 | p[pos++];
		if (container)
			children = count * (uint64_t)container;
		else
			skip += count;
		if (skip > len - pos)
			return SCAN_TRUNCATED;
		pos += (size_t)skip;
		if (children > 0) {
			if (depth == SCAN_MAX_DEPTH)
				return SCAN_TOO_BIG;
			left[depth++] = children;
			pending += children;
			/* every pending object takes at least one byte */
			if (pending > len - pos)
				return SCAN_TRUNCATED;
		}
	}
	*end = pos;
	return SCAN_OK;
}

static const msgpack_object *
map_get(const msgpack_object *map, const char *key)
{
	uint32_t i;

	for (i = 0; i < map->via.map.size; i++)
		if (str_is(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

/* Fills out[k] with the value of keys[k]; the map must hold exactly
 * these keys, each once. */
static int
collect_fields(const msgpack_object *map, const char *const *keys,
    int nkeys, const msgpack_object **out, const char *ctx, char *err)
{
	char name[40];
	uint32_t i;
	int k;

	for (k = 0; k < nkeys; k++)
		out[k] = NULL;
	for (i = 0; i < map->via.map.size; i++) {
		const msgpack_object *key = &map->via.map.ptr[i].key;

		if (key->type != MSGPACK_OBJECT_STR)
			return kn_error(err, KN_EINVAL, "%s has a field name "
			    "that is not a string", ctx);
		for (k = 0; k < nkeys && !str_is(key, keys[k]); k++)
			;
		if (k == nkeys) {
			printable(name, sizeof(name), key->via.str.ptr,
			    key->via.str.size);
			return kn_error(err, KN_EINVAL, "%s has an unknown "
			    "field '%s'", ctx, name);
		}
		if (out[k] != NULL)
			return kn_error(err, KN_EINVAL, "%s has field '%s' "
			    "twice", ctx, keys[k]);
		out[k] = &map->via.map.ptr[i].val;
	}
	for (k = 0; k < nkeys; k++)
		if (out[k] == NULL)
			return kn_error(err, KN_EINVAL, "%s lacks field '%s'",
			    ctx, keys[k]);
	return 0;
}

static int
get_uint(const msgpack_object *o, uint64_t max, uint64_t *v,
    const char *what, const char *field, char *err)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
		return kn_error(err, KN_EINVAL, "%s field '%s' must be an "
		    "integer in [0, %llu]", what, field,
		    (unsigned long long)max);
	*v = o->via.u64;
	return 0;
}

/* Everything both formats share, in the order that gives the most useful
 * message: is it msgpack, is it ours, which version, is it whole, then
 * the metadata fields.  up must be initialised; the caller destroys it. */
static int
parse_head(const char *buf, size_t len, const struct format *f,
    msgpack_unpacked *up, const msgpack_object **fields, pr_ckpt_meta *meta,
    char *err)
{
	const struct format *other = f == &ckpt_format ? &optim_format :
	    &ckpt_format;
	const msgpack_object *root, *o;
	unsigned char first;
	size_t end = 0, off = 0;
	uint64_t u = 0;
	int rc;

	if (len == 0)
		return kn_error(err, KN_EINVAL, "%s is truncated (empty)",
		    f->what);
	first = (unsigned char)buf[0];
	if (!((first >= 0x80 && first <= 0x8f) || first == 0xde ||
	    first == 0xdf))
		return kn_error(err, KN_EINVAL, "%s (it does not start with "
		    "a msgpack map)", f->notme);
	switch (scan_msgpack((const unsigned char *)buf, len, &end)) {
	case SCAN_TRUNCATED:
		return kn_error(err, KN_EINVAL, "%s is truncated (%zu bytes "
		    "end inside its msgpack object)", f->what, len);
	case SCAN_MALFORMED:
		return kn_error(err, KN_EINVAL, "%s (malformed msgpack)",
		    f->notme);
	case SCAN_TOO_BIG:
		return kn_error(err, KN_EINVAL, "%s (more than %zu msgpack "
		    "objects or %d levels)", f->notme,
		    (size_t)SCAN_MAX_OBJECTS, SCAN_MAX_DEPTH);
	}
	switch (msgpack_unpack_next(up, buf, end, &off)) {
	case MSGPACK_UNPACK_SUCCESS:
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		return kn_error(err, KN_ENOMEM, "out of memory while reading "
		    "a %s", f->what);
	default:
		return kn_error(err, KN_EINVAL, "%s (malformed msgpack)",
		    f->notme);
	}
	root = &up->data;
	if (off != end || root->type != MSGPACK_OBJECT_MAP)
		return kn_error(err, KN_EINVAL, "%s (malformed msgpack)",
		    f->notme);

	o = map_get(root, "magic");
	if (o == NULL || !str_is(o, f->magic)) {
		if (o != NULL && str_is(o, other->magic))
			return kn_error(err, KN_EINVAL, "%s: this is a "
			    "ShardMeter %s file", f->notme, other->what);
		return kn_error(err, KN_EINVAL, "%s (wrong magic)", f->notme);
	}
	o = map_get(root, "version");
	if (o == NULL || (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
	    o->type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
		return kn_error(err, KN_EINVAL, "%s has no format version",
		    f->what);
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    o->via.u64 != PR_CKPT_VERSION) {
		int newer = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
		    o->via.u64 > PR_CKPT_VERSION;

		if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			return kn_error(err, KN_EINVAL, "%s format version "
			    "%llu; this build reads version %d: %s", f->what,
			    (unsigned long long)o->via.u64, PR_CKPT_VERSION,
			    newer ? "a newer ShardMeter wrote it, upgrade "
			    "this host" : "the file is damaged");
		return kn_error(err, KN_EINVAL, "%s format version %lld; "
		    "this build reads version %d: the file is damaged",
		    f->what, (long long)o->via.i64, PR_CKPT_VERSION);
	}
	if (end != len)
		return kn_error(err, KN_EINVAL, "%s has %zu trailing bytes "
		    "after its end", f->what, len - end);
	if ((rc = collect_fields(root, f->keys, f->nkeys, fields, f->what,
	    err)) != 0)
		return rc;

	memset(meta, 0, sizeof(*meta));
	o = fields[F_RUN_ID];
	if (o->type != MSGPACK_OBJECT_STR ||
	    !is_run_id(o->via.str.ptr, o->via.str.size))
		return kn_error(err, KN_EINVAL, "%s field 'run_id' must be 64 "
		    "lowercase hex digits", f->what);
	memcpy(meta->run_id, o->via.str.ptr, o->via.str.size);
	if ((rc = get_uint(fields[F_BLOCK], PR_MAX_BLOCKS, &u, f->what,
	    "block", err)) != 0)
		return rc;
	meta->block = (int)u;
	o = fields[F_KIND];
	if (o->type != MSGPACK_OBJECT_STR ||
	    !is_kind(o->via.str.ptr, o->via.str.size))
		return kn_error(err, KN_EINVAL, "%s field 'kind' must be "
		    "\"block\", \"e2e\" or \"causal\"", f->what);
	memcpy(meta->kind, o->via.str.ptr, o->via.str.size);
	if ((rc = get_uint(fields[F_STEP], INT64_MAX, &u, f->what, "step",
	    err)) != 0)
		return rc;
	meta->step = (int64_t)u;
	if ((rc = get_uint(fields[F_ROUND], INT64_MAX, &u, f->what, "round",
	    err)) != 0)
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
		printable(want, sizeof(want), expect->run_id,
		    strnlen(expect->run_id, PR_RUN_ID_LEN - 1));
		return kn_error(err, KN_EINVAL, "%s belongs to run %s, not %s",
		    what, got->run_id, want);
	}
	if (expect->block >= 0 && got->block != expect->block)
		return kn_error(err, KN_EINVAL, "%s is for block %d, not "
		    "block %d", what, got->block, expect->block);
	if (expect->kind[0] != '\0' &&
	    strncmp(got->kind, expect->kind, PR_CKPT_KIND_LEN) != 0) {
		printable(want, sizeof(want), expect->kind,
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
	unsigned char md[SHA256_LEN];

	if (po->type != MSGPACK_OBJECT_BIN)
		return kn_error(err, KN_EINVAL, "%s field 'payload' must be a "
		    "msgpack bin", what);
	if (ho->type != MSGPACK_OBJECT_BIN || ho->via.bin.size != SHA256_LEN)
		return kn_error(err, KN_EINVAL, "%s field 'sha256' must be a "
		    "bin of %d bytes", what, SHA256_LEN);
	if (sha256(po->via.bin.ptr, po->via.bin.size, md) != 0)
		return kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
	if (memcmp(md, ho->via.bin.ptr, SHA256_LEN) != 0)
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
	if ((rc = collect_fields(o, tensor_keys, T_COUNT, f, ctx, err)) != 0)
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
	if (!str_is(f[T_DTYPE], "f32")) {
		if (f[T_DTYPE]->type == MSGPACK_OBJECT_STR) {
			printable(shown, sizeof(shown), f[T_DTYPE]->via.str.ptr,
			    f[T_DTYPE]->via.str.size);
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

int
pr_ckpt_decode(const char *buf, size_t len, const pr_ckpt_meta *expect,
    const kn_tensor *tensors, int ntensors, float *params_out,
    pr_ckpt_meta *meta_out, char *err)
{
	const msgpack_object *fields[F_MAX], *table;
	struct table_entry *entries = NULL;
	msgpack_unpacked up;
	pr_ckpt_meta meta;
	const unsigned char *payload = NULL;
	size_t payload_size = 0;
	uint64_t total = 0, at;
	uint32_t count, i;
	int rc;

	if (params_out != NULL && tensors == NULL)
		return kn_error(err, KN_EINVAL, "decoding parameters needs "
		    "the model's tensor table");
	msgpack_unpacked_init(&up);
	if ((rc = parse_head(buf, len, &ckpt_format, &up, fields, &meta,
	    err)) != 0)
		goto out;
	if ((rc = check_expect(&meta, expect, "checkpoint", err)) != 0)
		goto out;

	table = fields[F_TENSORS];
	if (table->type != MSGPACK_OBJECT_ARRAY ||
	    table->via.array.size < 1 ||
	    table->via.array.size > PR_CKPT_MAX_TENSORS) {
		rc = kn_error(err, KN_EINVAL, "checkpoint field 'tensors' must "
		    "be an array of 1 to %d tensors", PR_CKPT_MAX_TENSORS);
		goto out;
	}
	count = table->via.array.size;
	if (tensors != NULL && count != (uint32_t)ntensors) {
		rc = kn_error(err, KN_EINVAL, "checkpoint has %u tensors, "
		    "expected %d", count, ntensors);
		goto out;
	}
	entries = calloc(count, sizeof(*entries));
	if (entries == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < count; i++) {
		struct table_entry *e = &entries[i];

		if ((rc = parse_tensor(&table->via.array.ptr[i], (int)i, e,
		    err)) != 0)
			goto out;
		total += e->bytes;
		if (tensors == NULL)
			continue;
		if (strncmp(e->name, tensors[i].name, KN_NAME_LEN) != 0) {
			rc = kn_error(err, KN_EINVAL, "tensor %u is named %s, "
			    "expected %s", i, e->name, tensors[i].name);
			goto out;
		}
		if (!same_shape(&e->shape, &tensors[i])) {
			char got[96], want[96];

			kn_tensor_shape_str(&e->shape, got, sizeof(got));
			kn_tensor_shape_str(&tensors[i], want, sizeof(want));
			rc = kn_error(err, KN_EINVAL, "tensor %s has shape %s, "
			    "expected %s", e->name, got, want);
			goto out;
		}
	}

	if ((rc = check_payload(fields[F_CKPT_PAYLOAD], fields[F_CKPT_SHA256],
	    "checkpoint", &payload, &payload_size, err)) != 0)
		goto out;
	if (payload_size != total) {
		rc = kn_error(err, KN_EINVAL, "checkpoint payload holds %zu "
		    "bytes but its tensor table describes %llu", payload_size,
		    (unsigned long long)total);
		goto out;
	}
	for (i = 0, at = 0; i < count; at += entries[i].bytes, i++) {
		long bad = first_nonfinite_le(payload + at,
		    entries[i].bytes / 4);

		if (bad >= 0) {
			rc = kn_error(err, KN_ENUM, "tensor %s holds a "
			    "non-finite value at index %ld", entries[i].name,
			    bad);
			goto out;
		}
	}

	/* valid: only now touch the caller's memory */
	if (params_out != NULL)
		for (i = 0, at = 0; i < count; at += entries[i].bytes, i++)
			load_le_floats(params_out + tensors[i].offset,
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
	if ((rc = get_uint(fields[F_NPARAMS], PAYLOAD_MAX / 8, &n,
	    "optimizer state", "nparams", err)) != 0 ||
	    (rc = get_uint(fields[F_T], INT_MAX, &t, "optimizer state", "t",
	    err)) != 0)
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
		if ((bad = first_nonfinite_le(payload + 4 * n * i, n)) >= 0) {
			rc = kn_error(err, KN_ENUM, "optimizer state %s holds "
			    "a non-finite value at index %ld", i ? "v" : "m",
			    bad);
			goto out;
		}
	for (i = 0; i < n; i++)
		if (load_le_float(payload + 4 * (n + i)) < 0) {
			rc = kn_error(err, KN_ENUM, "optimizer state v holds a "
			    "negative value at index %zu", i);
			goto out;
		}

	if (m_out != NULL)
		load_le_floats(m_out, payload, n);
	if (v_out != NULL)
		load_le_floats(v_out, payload + 4 * n, n);
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
		kn_error(err, KN_EIO, "cannot create %s: %s", tmp,
		    errno_str(e, msg, sizeof(msg)));
		free(tmp);
		return KN_EIO;
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
		kn_error(err, KN_EIO, "cannot %s %s: %s", step,
		    strcmp(step, "rename") == 0 ? path : tmp,
		    errno_str(e, msg, sizeof(msg)));
		free(tmp);
		return KN_EIO;
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
