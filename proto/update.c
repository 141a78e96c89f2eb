/* The update message: encoding a replica's update in f32, f16, bf16 or
 * int8, optionally zstd-compressed, and strictly decoding a peer's
 * (format in proto/PROTOCOL.md).  The daemon calls these around its HTTP
 * exchange; conversions are kernels/convert's and kernels/int8's, and
 * the averaging itself is kernels/average's, never done here. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <zstd.h>

#include "kernels/convert.h"
#include "kernels/error.h"
#include "kernels/int8.h"
#include "kernels/tensor.h"
#include "proto/msgpack_strict.h"
#include "proto/update.h"

#define UPDATE_MAGIC "ShardMeter update"
/* The message is one flat map of 11 or 12 scalars (25 objects at most);
 * the slack lets a checkpoint sent by mistake be named as one. */
#define UPDATE_MAX_DEPTH PR_MP_MAX_DEPTH
#define UPDATE_MAX_OBJECTS 4096
/* Everything but the payload's bytes: 268 at most (each integer in 9
 * bytes, the bin header in 5, "compression": "zstd" in 17), and the
 * payload of one int8 value is 5 bytes, not 4: rounded up. */
#define UPDATE_HEAD_MAX 512
/* Values converted per pass through a stack buffer: a whole number of
 * int8 blocks. */
#define CONVERT_CHUNK 2048
/* Decompressed bytes checked per pass when there is no output to fill. */
#define ZSTD_PIECE 65536

enum {
	F_MAGIC, F_VERSION, F_RUN_ID, F_BLOCK, F_ROUND, F_REPLICA, F_STEP,
	F_ENCODING, F_COUNT, F_PAYLOAD, F_SHA256, F_COMPRESSION,
	F_COUNT_FIELDS
};
/* "compression" is present only when the payload is compressed, so an
 * uncompressed update is byte for byte what earlier builds wrote. */
#define F_REQUIRED F_COMPRESSION

/* Indexed by the enum; written in the order magic .. count,
 * compression, payload, sha256. */
static const char *const update_keys[F_COUNT_FIELDS] = {
	"magic", "version", "run_id", "block", "round", "replica", "step",
	"encoding", "count", "payload", "sha256", "compression"
};

static const struct pr_mp_format update_format = {
	UPDATE_MAGIC, "update", "not a ShardMeter update",
	"the message is damaged", PR_UPDATE_VERSION, UPDATE_MAX_DEPTH,
	UPDATE_MAX_OBJECTS
};
/* The other ShardMeter formats, to name one that arrives instead. */
static const struct pr_mp_format ckpt_name = {
	"ShardMeter checkpoint", "checkpoint", NULL, NULL, 0, 0, 0
};
static const struct pr_mp_format optim_name = {
	"ShardMeter optimizer state", "optimizer state", NULL, NULL, 0, 0, 0
};
static const struct pr_mp_format *const update_others[] = {
	&ckpt_name, &optim_name, NULL
};

/* Indexed by pr_encoding and pr_compression. */
static const char *const encoding_names[] = { "f32", "f16", "bf16",
	"int8" };
#define NENCODINGS 4
static const char *const compression_names[] = { "none", "zstd" };
#define NCOMPRESSIONS 2

/* The index of s among n names, or -1. */
static int
name_index(const char *s, const char *const *names, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

int
pr_encoding_parse(const char *s, pr_encoding *e)
{
	int i = name_index(s, encoding_names, NENCODINGS);

	if (i < 0)
		return KN_EINVAL;
	*e = (pr_encoding)i;
	return 0;
}

static int
encoding_valid(pr_encoding e)
{
	return (int)e >= 0 && (int)e < NENCODINGS;
}

const char *
pr_encoding_name(pr_encoding e)
{
	return encoding_valid(e) ? encoding_names[e] : "?";
}

size_t
pr_encoding_width(pr_encoding e)
{
	static const size_t width[NENCODINGS] = { 4, 2, 2, 1 };

	return encoding_valid(e) ? width[e] : 0;
}

static size_t
int8_blocks(size_t count)
{
	return count / PR_INT8_BLOCK + (count % PR_INT8_BLOCK != 0);
}

/* The most values a payload bin of e can hold. */
static uint64_t
max_count(pr_encoding e)
{
	uint64_t whole = PR_MP_BIN_MAX / (4 + PR_INT8_BLOCK);
	uint64_t rest = PR_MP_BIN_MAX % (4 + PR_INT8_BLOCK);

	if (e != PR_ENC_INT8)
		return PR_MP_BIN_MAX / pr_encoding_width(e);
	return whole * PR_INT8_BLOCK + (rest > 4 ? rest - 4 : 0);
}

size_t
pr_update_payload_bytes(pr_encoding e, size_t count)
{
	if (!encoding_valid(e) || count > max_count(e))
		return 0;
	if (e == PR_ENC_INT8)
		return count + 4 * int8_blocks(count);
	return count * pr_encoding_width(e);
}

int
pr_compression_parse(const char *s, pr_compression *c)
{
	int i = name_index(s, compression_names, NCOMPRESSIONS);

	if (i < 0)
		return KN_EINVAL;
	*c = (pr_compression)i;
	return 0;
}

const char *
pr_compression_name(pr_compression c)
{
	return (int)c >= 0 && (int)c < NCOMPRESSIONS ?
	    compression_names[c] : "?";
}

/* A compressed payload is never larger than the raw one (the encoder
 * falls back), and the raw one at most 4 bytes a value but for the int8
 * scale of a lone value, which the head's slack covers. */
size_t
pr_update_max_bytes(size_t count)
{
	if (count > (SIZE_MAX - UPDATE_HEAD_MAX) / 4)
		return SIZE_MAX;
	return UPDATE_HEAD_MAX + 4 * count;
}

/* ---- payload bytes ---- */

static void
store_le_u16s(unsigned char *dst, const uint16_t *src, size_t n)
{
	size_t i;

	if (pr_mp_little_endian()) {
		memcpy(dst, src, 2 * n);
		return;
	}
	for (i = 0; i < n; i++) {
		dst[2 * i] = (unsigned char)src[i];
		dst[2 * i + 1] = (unsigned char)(src[i] >> 8);
	}
}

/* The bytes sit inside a msgpack buffer and need not be aligned. */
static void
load_le_u16s(uint16_t *dst, const unsigned char *src, size_t n)
{
	size_t i;

	if (pr_mp_little_endian()) {
		memcpy(dst, src, 2 * n);
		return;
	}
	for (i = 0; i < n; i++)
		dst[i] = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
}

static void
store_le_floats(unsigned char *dst, const float *src, size_t n)
{
	size_t i;
	uint32_t u;

	if (pr_mp_little_endian()) {
		memcpy(dst, src, 4 * n);
		return;
	}
	for (i = 0; i < n; i++) {
		memcpy(&u, &src[i], sizeof(u));
		dst[4 * i] = (unsigned char)u;
		dst[4 * i + 1] = (unsigned char)(u >> 8);
		dst[4 * i + 2] = (unsigned char)(u >> 16);
		dst[4 * i + 3] = (unsigned char)(u >> 24);
	}
}

/* Writes the raw payload of delta (count values in enc) to dst,
 * pr_update_payload_bytes(enc, count) bytes: for int8 the scales of
 * every block first, then the values.  On a value that the encoding
 * cannot hold, KN_ENUM with a message. */
static int
fill_payload(unsigned char *dst, pr_encoding enc, const float *delta,
    size_t count, char *err)
{
	uint16_t half[CONVERT_CHUNK];
	float scales[CONVERT_CHUNK / PR_INT8_BLOCK];
	size_t done, k, nb = int8_blocks(count);
	long bad = -1;

	if (enc == PR_ENC_F32) {
		store_le_floats(dst, delta, count);
		return 0;
	}
	for (done = 0; done < count; done += k) {
		k = count - done < CONVERT_CHUNK ? count - done :
		    CONVERT_CHUNK;
		if (enc == PR_ENC_INT8) {
			bad = kn_int8_quantize((int8_t *)(dst + 4 * nb + done),
			    scales, delta + done, k, PR_INT8_BLOCK);
			if (bad >= 0)
				break;
			store_le_floats(dst + 4 * (done / PR_INT8_BLOCK),
			    scales, int8_blocks(k));
			continue;
		}
		if (enc == PR_ENC_F16) {
			kn_f32_to_f16(half, delta + done, k);
			bad = kn_f16_first_nonfinite(half, k);
		} else {
			kn_f32_to_bf16(half, delta + done, k);
			bad = kn_bf16_first_nonfinite(half, k);
		}
		if (bad >= 0)
			break;
		store_le_u16s(dst + 2 * done, half, k);
	}
	if (bad < 0)
		return 0;
	if (enc == PR_ENC_INT8)
		return kn_error(err, KN_ENUM, "update value %g at index %zu "
		    "is too large for an int8 scale (largest finite scale "
		    "x 127 is 3.4e38); send it in f32",
		    (double)delta[done + (size_t)bad], done + (size_t)bad);
	return kn_error(err, KN_ENUM, "update value %g at index %zu "
	    "overflows %s (largest finite %s); send it in %s",
	    (double)delta[done + (size_t)bad], done + (size_t)bad,
	    pr_encoding_name(enc), enc == PR_ENC_F16 ? "65504" : "3.39e38",
	    enc == PR_ENC_F16 ? "bf16 or f32" : "f32");
}

/* Checks n raw payload bytes that start at byte off of the payload (off
 * and n on value boundaries, see whole_values): every value finite, and
 * for int8 every scale one kernels/int8 accepts and no q of -128. */
static int
check_payload(const unsigned char *p, size_t off, size_t n, pr_encoding enc,
    size_t count, char *err)
{
	uint16_t half[CONVERT_CHUNK];
	float scales[CONVERT_CHUNK];
	size_t width = pr_encoding_width(enc), sbytes, done, k, at;
	const unsigned char *minus;
	long bad = -1;

	if (enc != PR_ENC_INT8) {
		for (done = 0; done < n / width; done += k) {
			k = n / width - done < CONVERT_CHUNK ?
			    n / width - done : CONVERT_CHUNK;
			if (enc == PR_ENC_F32) {
				bad = pr_mp_first_nonfinite_le(p + 4 * done, k);
			} else {
				load_le_u16s(half, p + 2 * done, k);
				bad = enc == PR_ENC_F16 ?
				    kn_f16_first_nonfinite(half, k) :
				    kn_bf16_first_nonfinite(half, k);
			}
			if (bad >= 0)
				return kn_error(err, KN_ENUM, "update holds a "
				    "non-finite value at index %zu",
				    off / width + done + (size_t)bad);
		}
		return 0;
	}
	sbytes = 4 * int8_blocks(count);
	for (done = off; done < sbytes && done < off + n; done += 4 * k) {
		k = (sbytes < off + n ? sbytes : off + n) - done;
		k = k / 4 < CONVERT_CHUNK ? k / 4 : CONVERT_CHUNK;
		pr_mp_load_le_floats(scales, p + (done - off), k);
		if ((bad = kn_int8_first_bad_scale(scales, k)) < 0)
			continue;
		at = done / 4 + (size_t)bad;
		return kn_error(err, isfinite(scales[bad]) ? KN_EINVAL :
		    KN_ENUM, "update holds int8 scale %g for values %zu to "
		    "%zu; a scale is finite, not negative, and at most "
		    "3.4e38 / 127", (double)scales[bad], at * PR_INT8_BLOCK,
		    (at + 1) * PR_INT8_BLOCK < count ?
		    (at + 1) * PR_INT8_BLOCK - 1 : count - 1);
	}
	at = off > sbytes ? off : sbytes;
	if (at < off + n && (minus = memchr(p + (at - off), 0x80,
	    off + n - at)) != NULL)
		return kn_error(err, KN_EINVAL, "update holds int8 value -128 "
		    "at index %zu; int8 values lie in [-127, 127]",
		    (size_t)(minus - p) + off - sbytes);
	return 0;
}

/* How many of n raw bytes, from byte off of the payload, make whole
 * values (or scales): a piece of a decompressed stream may end inside
 * one. */
static size_t
whole_values(pr_encoding enc, size_t count, size_t off, size_t n)
{
	size_t sbytes;

	if (enc != PR_ENC_INT8)
		return n - n % pr_encoding_width(enc);
	sbytes = 4 * int8_blocks(count);
	if (off + n <= sbytes)
		return n - n % 4;
	return n;       /* the scales end on a whole one; values are bytes */
}

/* Converts a raw payload that check_payload() accepted to count floats. */
static void
unpack_payload(float *dst, const unsigned char *p, pr_encoding enc,
    size_t count)
{
	uint16_t half[CONVERT_CHUNK];
	float scales[CONVERT_CHUNK / PR_INT8_BLOCK];
	size_t done, k, nb = int8_blocks(count);

	if (enc == PR_ENC_F32) {
		pr_mp_load_le_floats(dst, p, count);
		return;
	}
	for (done = 0; done < count; done += k) {
		k = count - done < CONVERT_CHUNK ? count - done :
		    CONVERT_CHUNK;
		if (enc == PR_ENC_INT8) {
			pr_mp_load_le_floats(scales,
			    p + 4 * (done / PR_INT8_BLOCK), int8_blocks(k));
			kn_int8_dequantize(dst + done,
			    (const int8_t *)(p + 4 * nb + done), scales, k,
			    PR_INT8_BLOCK);
			continue;
		}
		load_le_u16s(half, p + 2 * done, k);
		if (enc == PR_ENC_F16)
			kn_f16_to_f32(dst + done, half, k);
		else
			kn_bf16_to_f32(dst + done, half, k);
	}
}

/* ---- encoding ---- */

static int
check_meta(const pr_update_meta *m, char *err)
{
	if (!pr_mp_is_run_id(m->run_id, strnlen(m->run_id, PR_RUN_ID_LEN)))
		return kn_error(err, KN_EINVAL, "run id must be 64 lowercase "
		    "hex digits");
	if (m->block < 0 || m->block > PR_MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "block index %d is outside "
		    "[0, %d]", m->block, PR_MAX_BLOCKS);
	if (m->round < 0 || m->step < 0 || m->replica < 0)
		return kn_error(err, KN_EINVAL, "round, step and replica must "
		    "be non-negative (got %lld, %lld and %d)",
		    (long long)m->round, (long long)m->step, m->replica);
	if (!encoding_valid(m->enc))
		return kn_error(err, KN_EINVAL, "unknown update encoding %d",
		    (int)m->enc);
	if ((int)m->comp < 0 || (int)m->comp >= NCOMPRESSIONS)
		return kn_error(err, KN_EINVAL, "unknown update compression %d",
		    (int)m->comp);
	if (m->count < 1 || m->count > max_count(m->enc))
		return kn_error(err, KN_EINVAL, "an update holds 1 to %llu "
		    "%s values, not %zu",
		    (unsigned long long)max_count(m->enc),
		    pr_encoding_name(m->enc), m->count);
	return 0;
}

/* The message around a payload of plen bytes: body, or when body is NULL
 * the raw payload of delta, written in place. */
static int
pack_message(const pr_update_meta *m, pr_compression comp,
    const unsigned char *body, size_t plen, const float *delta, char **buf,
    size_t *len, char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	unsigned char md[PR_SHA256_LEN];
	size_t total = UPDATE_HEAD_MAX + plen;
	int rc;

	msgpack_sbuffer_init(&sb);
	if ((sb.data = malloc(total)) == NULL)
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB for "
		    "an update", (double)total / 1048576.0);
	sb.alloc = total;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

	rc = msgpack_pack_map(&pk, comp == PR_COMP_NONE ? F_REQUIRED :
	    F_COUNT_FIELDS);
	rc |= pr_mp_pack_key(&pk, "magic");
	rc |= pr_mp_pack_key(&pk, UPDATE_MAGIC);
	rc |= pr_mp_pack_key(&pk, "version");
	rc |= msgpack_pack_uint64(&pk, PR_UPDATE_VERSION);
	rc |= pr_mp_pack_key(&pk, "run_id");
	rc |= pr_mp_pack_key(&pk, m->run_id);
	rc |= pr_mp_pack_key(&pk, "block");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->block);
	rc |= pr_mp_pack_key(&pk, "round");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->round);
	rc |= pr_mp_pack_key(&pk, "replica");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->replica);
	rc |= pr_mp_pack_key(&pk, "step");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->step);
	rc |= pr_mp_pack_key(&pk, "encoding");
	rc |= pr_mp_pack_key(&pk, pr_encoding_name(m->enc));
	rc |= pr_mp_pack_key(&pk, "count");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->count);
	if (comp != PR_COMP_NONE) {
		rc |= pr_mp_pack_key(&pk, "compression");
		rc |= pr_mp_pack_key(&pk, pr_compression_name(comp));
	}
	rc |= pr_mp_pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, plen);
	if (rc == 0 && body != NULL)
		rc = msgpack_pack_bin_body(&pk, body, plen);
	if (rc == 0 && body == NULL) {
		/* the head fit in the slack, so the payload fits after it */
		if ((rc = fill_payload((unsigned char *)sb.data + sb.size,
		    m->enc, delta, m->count, err)) != 0) {
			msgpack_sbuffer_destroy(&sb);
			return rc;
		}
		sb.size += plen;
	}
	if (rc == 0 && pr_mp_sha256(sb.data + sb.size - plen, plen, md) != 0)
		rc = -1;
	if (rc == 0) {
		rc = pr_mp_pack_key(&pk, "sha256");
		rc |= msgpack_pack_bin_with_body(&pk, md, PR_SHA256_LEN);
	}
	if (rc != 0) {
		msgpack_sbuffer_destroy(&sb);
		return kn_error(err, KN_ENOMEM, "out of memory while encoding "
		    "an update");
	}
	*buf = sb.data;
	*len = sb.size;
	return 0;
}

/* The raw payload, compressed into one zstd frame that records its size
 * and a checksum of its content (so a damaged frame that still decodes
 * is caught); sent only when smaller than the raw bytes. */
static int
encode_zstd(const pr_update_meta *m, const float *delta, size_t raw,
    char **buf, size_t *len, char *err)
{
	unsigned char *plain = NULL, *z = NULL;
	size_t bound = ZSTD_compressBound(raw), zlen = 0;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	int rc;

	if (cctx == NULL || (plain = malloc(raw)) == NULL ||
	    (z = malloc(bound)) == NULL) {
		free(plain);
		ZSTD_freeCCtx(cctx);
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB to "
		    "compress an update", (double)(raw + bound) / 1048576.0);
	}
	if ((rc = fill_payload(plain, m->enc, delta, m->count, err)) == 0) {
		zlen = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel,
		    PR_ZSTD_LEVEL);
		if (!ZSTD_isError(zlen))
			zlen = ZSTD_CCtx_setParameter(cctx,
			    ZSTD_c_checksumFlag, 1);
		if (!ZSTD_isError(zlen))
			zlen = ZSTD_compress2(cctx, z, bound, plain, raw);
		if (ZSTD_isError(zlen))
			rc = kn_error(err, KN_ENOMEM, "zstd could not compress "
			    "an update: %s", ZSTD_getErrorName(zlen));
	}
	if (rc == 0 && zlen < raw)
		rc = pack_message(m, PR_COMP_ZSTD, z, zlen, NULL, buf, len,
		    err);
	else if (rc == 0)
		rc = pack_message(m, PR_COMP_NONE, plain, raw, NULL, buf, len,
		    err);
	ZSTD_freeCCtx(cctx);
	free(plain);
	free(z);
	return rc;
}

int
pr_update_encode(const pr_update_meta *m, const float *delta,
    char **buf, size_t *len, char *err)
{
	long bad;
	int rc;

	*buf = NULL;
	*len = 0;
	if ((rc = check_meta(m, err)) != 0)
		return rc;
	if ((bad = kn_first_nonfinite(delta, m->count)) >= 0)
		return kn_error(err, KN_ENUM, "update holds a non-finite "
		    "value at index %ld", bad);
	if (m->comp == PR_COMP_ZSTD)
		return encode_zstd(m, delta, pr_update_payload_bytes(m->enc,
		    m->count), buf, len, err);
	return pack_message(m, PR_COMP_NONE, NULL,
	    pr_update_payload_bytes(m->enc, m->count), delta, buf, len, err);
}

/* ---- decoding ---- */

static int
get_encoding(const msgpack_object *o, pr_encoding *e, char *err)
{
	char shown[16];
	int i;

	if (o->type != MSGPACK_OBJECT_STR)
		return kn_error(err, KN_EINVAL, "update field 'encoding' must "
		    "be a string: f32, f16, bf16 or int8");
	for (i = 0; i < NENCODINGS; i++)
		if (pr_mp_str_is(o, encoding_names[i])) {
			*e = (pr_encoding)i;
			return 0;
		}
	pr_mp_printable(shown, sizeof(shown), o->via.str.ptr,
	    o->via.str.size);
	return kn_error(err, KN_EINVAL, "update has unknown encoding '%s'%s; "
	    "this build reads f32, f16, bf16 and int8", shown,
	    o->via.str.size >= sizeof(shown) ? "..." : "");
}

/* Present only on a compressed update, and then "zstd". */
static int
get_compression(const msgpack_object *o, pr_compression *c, char *err)
{
	char shown[16];

	*c = PR_COMP_NONE;
	if (o == NULL)
		return 0;
	if (o->type == MSGPACK_OBJECT_STR && pr_mp_str_is(o, "zstd")) {
		*c = PR_COMP_ZSTD;
		return 0;
	}
	if (o->type != MSGPACK_OBJECT_STR)
		return kn_error(err, KN_EINVAL, "update field 'compression' "
		    "must be a string: zstd");
	pr_mp_printable(shown, sizeof(shown), o->via.str.ptr,
	    o->via.str.size);
	return kn_error(err, KN_EINVAL, "update has unknown compression "
	    "'%s'%s; this build reads zstd, and an uncompressed update has "
	    "no 'compression' field", shown,
	    o->via.str.size >= sizeof(shown) ? "..." : "");
}

/* The fields of the map, each checked for type and range. */
static int
parse_meta(const msgpack_object **fields, pr_update_meta *m, char *err)
{
	const msgpack_object *o = fields[F_RUN_ID];
	uint64_t u = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	if (o->type != MSGPACK_OBJECT_STR ||
	    !pr_mp_is_run_id(o->via.str.ptr, o->via.str.size))
		return kn_error(err, KN_EINVAL, "update field 'run_id' must "
		    "be 64 lowercase hex digits");
	memcpy(m->run_id, o->via.str.ptr, o->via.str.size);
	if ((rc = pr_mp_get_uint(fields[F_BLOCK], PR_MAX_BLOCKS, &u,
	    "update", "block", err)) != 0)
		return rc;
	m->block = (int)u;
	if ((rc = pr_mp_get_uint(fields[F_ROUND], INT64_MAX, &u, "update",
	    "round", err)) != 0)
		return rc;
	m->round = (int64_t)u;
	if ((rc = pr_mp_get_uint(fields[F_REPLICA], INT_MAX, &u, "update",
	    "replica", err)) != 0)
		return rc;
	m->replica = (int)u;
	if ((rc = pr_mp_get_uint(fields[F_STEP], INT64_MAX, &u, "update",
	    "step", err)) != 0)
		return rc;
	m->step = (int64_t)u;
	if ((rc = get_encoding(fields[F_ENCODING], &m->enc, err)) != 0)
		return rc;
	o = fields[F_COUNT];
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 < 1 ||
	    o->via.u64 > max_count(m->enc))
		return kn_error(err, KN_EINVAL, "update field 'count' must be "
		    "an integer in [1, %llu] for %s values",
		    (unsigned long long)max_count(m->enc),
		    pr_encoding_name(m->enc));
	m->count = (size_t)o->via.u64;
	return get_compression(fields[F_COMPRESSION], &m->comp, err);
}

static int
check_expect(const pr_update_meta *got, const pr_update_meta *expect,
    char *err)
{
	char want[PR_RUN_ID_LEN];

	if (expect == NULL)
		return 0;
	if (expect->run_id[0] != '\0' &&
	    strncmp(got->run_id, expect->run_id, PR_RUN_ID_LEN) != 0) {
		pr_mp_printable(want, sizeof(want), expect->run_id,
		    strnlen(expect->run_id, PR_RUN_ID_LEN - 1));
		return kn_error(err, KN_EINVAL, "update belongs to run %s, "
		    "not %s", got->run_id, want);
	}
	if (expect->block >= 0 && got->block != expect->block)
		return kn_error(err, KN_EINVAL, "update is for block %d, not "
		    "block %d", got->block, expect->block);
	if (expect->round >= 0 && got->round != expect->round)
		return kn_error(err, KN_EINVAL, "update is for round %lld, "
		    "not round %lld", (long long)got->round,
		    (long long)expect->round);
	if (expect->count != 0 && got->count != expect->count)
		return kn_error(err, KN_EINVAL, "update holds %zu parameters, "
		    "expected %zu", got->count, expect->count);
	return 0;
}

/* The frame must be one zstd frame, the whole bin, that declares exactly
 * raw decompressed bytes: checked on its header, before anything is
 * allocated or decompressed. */
static int
check_frame(const void *z, size_t zlen, size_t raw, char *err)
{
	unsigned long long declared = ZSTD_getFrameContentSize(z, zlen);
	size_t frame;

	if (declared == ZSTD_CONTENTSIZE_ERROR)
		return kn_error(err, KN_EINVAL, "update payload is not a zstd "
		    "frame");
	if (declared == ZSTD_CONTENTSIZE_UNKNOWN)
		return kn_error(err, KN_EINVAL, "update's zstd frame does not "
		    "say its size; it must be %zu bytes", raw);
	if (declared != raw)
		return kn_error(err, KN_EINVAL, "update's zstd frame holds "
		    "%llu bytes, but the payload takes %zu", declared, raw);
	/* the frame header descriptor follows the 4-byte magic (RFC 8878,
	 * 3.1.1.1.1); its bit 2 is the content checksum flag */
	if (!(((const unsigned char *)z)[4] & 0x04))
		return kn_error(err, KN_EINVAL, "update's zstd frame has no "
		    "content checksum");
	frame = ZSTD_findFrameCompressedSize(z, zlen);
	if (ZSTD_isError(frame))
		return kn_error(err, KN_EINVAL, "update's zstd frame is "
		    "damaged: %s", ZSTD_getErrorName(frame));
	if (frame != zlen)
		return kn_error(err, KN_EINVAL, "update's payload has %zu "
		    "bytes after its zstd frame", zlen - frame);
	return 0;
}

/* Checks a compressed payload in ZSTD_PIECE pieces, none kept: for a
 * decode without output, where count was not bounded by the caller. */
static int
check_zstd_pieces(const void *z, size_t zlen, size_t raw, pr_encoding enc,
    size_t count, char *err)
{
	ZSTD_inBuffer in = { z, zlen, 0 };
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	unsigned char *piece = malloc(ZSTD_PIECE);
	size_t off = 0, kept = 0, left = 1, whole;
	int rc = 0;

	if (dctx == NULL || piece == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory to decompress an "
		    "update");
		goto out;
	}
	while (left != 0) {
		ZSTD_outBuffer o = { piece, ZSTD_PIECE, kept };
		size_t before = in.pos;

		left = ZSTD_decompressStream(dctx, &o, &in);
		if (ZSTD_isError(left)) {
			rc = kn_error(err, KN_EINVAL, "update's zstd frame is "
			    "damaged: %s", ZSTD_getErrorName(left));
			break;
		}
		if (off + o.pos > raw) {
			rc = kn_error(err, KN_EINVAL, "update's zstd frame "
			    "holds more than the %zu bytes it declares", raw);
			break;
		}
		if (left != 0 && in.pos == before && o.pos == kept) {
			rc = kn_error(err, KN_EINVAL, "update's zstd frame is "
			    "truncated");
			break;
		}
		whole = whole_values(enc, count, off, o.pos);
		if ((rc = check_payload(piece, off, whole, enc, count,
		    err)) != 0)
			break;
		off += whole;
		kept = o.pos - whole;
		memmove(piece, piece + whole, kept);
	}
	if (rc == 0 && off + kept != raw)
		rc = kn_error(err, KN_EINVAL, "update's zstd frame holds %zu "
		    "bytes, but the payload takes %zu", off + kept, raw);
out:
	free(piece);
	ZSTD_freeDCtx(dctx);
	return rc;
}

/* Decompresses the payload into a new buffer of exactly raw bytes. */
static int
unzstd(const void *z, size_t zlen, size_t raw, unsigned char **plain,
    char *err)
{
	size_t got;

	if ((*plain = malloc(raw)) == NULL)
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB to "
		    "decompress an update", (double)raw / 1048576.0);
	got = ZSTD_decompress(*plain, raw, z, zlen);
	if (!ZSTD_isError(got) && got == raw)
		return 0;
	free(*plain);
	*plain = NULL;
	if (ZSTD_isError(got))
		return kn_error(err, KN_EINVAL, "update's zstd frame is "
		    "damaged: %s", ZSTD_getErrorName(got));
	return kn_error(err, KN_EINVAL, "update's zstd frame holds %zu "
	    "bytes, but the payload takes %zu", got, raw);
}

int
pr_update_decode(const char *buf, size_t len,
    const pr_update_meta *expect, float *delta_out, pr_update_meta *got,
    char *err)
{
	const msgpack_object *fields[F_COUNT_FIELDS], *root, *po, *ho;
	const unsigned char *payload;
	unsigned char md[PR_SHA256_LEN], *plain = NULL;
	msgpack_unpacked up;
	pr_update_meta m;
	size_t raw;
	int rc;

	if (delta_out != NULL && (expect == NULL || expect->count == 0))
		return kn_error(err, KN_EINVAL, "decoding an update needs the "
		    "expected parameter count");
	msgpack_unpacked_init(&up);
	if ((rc = pr_mp_open(buf, len, &update_format, update_others, &up,
	    &root, err)) != 0)
		goto out;
	fields[F_COMPRESSION] = NULL;
	if ((rc = pr_mp_collect_fields(root, update_keys,
	    pr_mp_map_get(root, "compression") != NULL ? F_COUNT_FIELDS :
	    F_REQUIRED, fields, "update", err)) != 0)
		goto out;
	if ((rc = parse_meta(fields, &m, err)) != 0)
		goto out;
	if ((rc = check_expect(&m, expect, err)) != 0)
		goto out;

	po = fields[F_PAYLOAD];
	ho = fields[F_SHA256];
	if (po->type != MSGPACK_OBJECT_BIN) {
		rc = kn_error(err, KN_EINVAL, "update field 'payload' must be "
		    "a msgpack bin");
		goto out;
	}
	if (ho->type != MSGPACK_OBJECT_BIN ||
	    ho->via.bin.size != PR_SHA256_LEN) {
		rc = kn_error(err, KN_EINVAL, "update field 'sha256' must be "
		    "a bin of %d bytes", PR_SHA256_LEN);
		goto out;
	}
	raw = pr_update_payload_bytes(m.enc, m.count);
	if (m.comp == PR_COMP_NONE && po->via.bin.size != raw) {
		rc = kn_error(err, KN_EINVAL, "update payload holds %lu "
		    "bytes, but %zu %s values take %zu",
		    (unsigned long)po->via.bin.size, m.count,
		    pr_encoding_name(m.enc), raw);
		goto out;
	}
	if (pr_mp_sha256(po->via.bin.ptr, po->via.bin.size, md) != 0) {
		rc = kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
		goto out;
	}
	if (memcmp(md, ho->via.bin.ptr, PR_SHA256_LEN) != 0) {
		rc = kn_error(err, KN_EINVAL, "payload hash mismatch: the "
		    "update is corrupt");
		goto out;
	}
	payload = (const unsigned char *)po->via.bin.ptr;
	if (m.comp == PR_COMP_ZSTD) {
		if ((rc = check_frame(payload, po->via.bin.size, raw,
		    err)) != 0)
			goto out;
		/* without an output the count is the message's own word:
		 * check in pieces rather than allocate what it claims */
		if (delta_out == NULL) {
			rc = check_zstd_pieces(payload, po->via.bin.size, raw,
			    m.enc, m.count, err);
			goto done;
		}
		if ((rc = unzstd(payload, po->via.bin.size, raw, &plain,
		    err)) != 0)
			goto out;
		payload = plain;
	}
	if ((rc = check_payload(payload, 0, raw, m.enc, m.count, err)) != 0)
		goto out;

	/* valid: only now touch the caller's memory */
	if (delta_out != NULL)
		unpack_payload(delta_out, payload, m.enc, m.count);
done:
	if (rc == 0 && got != NULL)
		*got = m;
out:
	free(plain);
	msgpack_unpacked_destroy(&up);
	return rc;
}
