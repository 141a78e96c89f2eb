/* The update message: encoding a replica's update in f32, f16 or bf16 and
 * strictly decoding a peer's (format in proto/PROTOCOL.md).  The daemon
 * calls these around its HTTP exchange; conversions are kernels/convert's
 * and the averaging itself is kernels/average's, never done here. */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "kernels/convert.h"
#include "kernels/error.h"
#include "kernels/tensor.h"
#include "proto/msgpack_strict.h"
#include "proto/update.h"

#define UPDATE_MAGIC "ShardMeter update"
/* The message is one flat map of 11 scalars (23 objects); the slack
 * lets a checkpoint sent by mistake be named as one. */
#define UPDATE_MAX_DEPTH PR_MP_MAX_DEPTH
#define UPDATE_MAX_OBJECTS 4096
/* Everything but the payload's bytes: 251 at most (each integer in 9
 * bytes, the bin header in 5), rounded up. */
#define UPDATE_HEAD_MAX 512
/* Values converted per pass through a stack buffer. */
#define CONVERT_CHUNK 2048

enum {
	F_MAGIC, F_VERSION, F_RUN_ID, F_BLOCK, F_ROUND, F_REPLICA, F_STEP,
	F_ENCODING, F_COUNT, F_PAYLOAD, F_SHA256, F_COUNT_FIELDS
};

/* In the order they are written. */
static const char *const update_keys[F_COUNT_FIELDS] = {
	"magic", "version", "run_id", "block", "round", "replica", "step",
	"encoding", "count", "payload", "sha256"
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

/* Indexed by pr_encoding. */
static const char *const encoding_names[] = { "f32", "f16", "bf16" };
#define NENCODINGS 3

int
pr_encoding_parse(const char *s, pr_encoding *e)
{
	int i;

	for (i = 0; i < NENCODINGS; i++)
		if (strcmp(s, encoding_names[i]) == 0) {
			*e = (pr_encoding)i;
			return 0;
		}
	return KN_EINVAL;
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
	if (!encoding_valid(e))
		return 0;
	return e == PR_ENC_F32 ? 4 : 2;
}

size_t
pr_update_max_bytes(size_t count)
{
	if (count > (SIZE_MAX - UPDATE_HEAD_MAX) / 4)
		return SIZE_MAX;
	return UPDATE_HEAD_MAX + 4 * count;
}

/* ---- 16-bit payloads ---- */

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

/* Converts and packs the payload of a 16-bit encoding; on overflow to
 * Inf, returns KN_ENUM with a message and *packed 0. */
static int
pack_16bit(msgpack_packer *pk, pr_encoding enc, const float *delta,
    size_t count, int *packed, char *err)
{
	uint16_t half[CONVERT_CHUNK];
	unsigned char bytes[2 * CONVERT_CHUNK];
	size_t done, k;
	long bad;
	int rc = 0;

	*packed = 1;
	for (done = 0; done < count && rc == 0; done += k) {
		k = count - done < CONVERT_CHUNK ? count - done :
		    CONVERT_CHUNK;
		if (enc == PR_ENC_F16) {
			kn_f32_to_f16(half, delta + done, k);
			bad = kn_f16_first_nonfinite(half, k);
		} else {
			kn_f32_to_bf16(half, delta + done, k);
			bad = kn_bf16_first_nonfinite(half, k);
		}
		if (bad >= 0) {
			*packed = 0;
			return kn_error(err, KN_ENUM, "update value %g at "
			    "index %zu overflows %s (largest finite %s); send "
			    "it in %s", (double)delta[done + (size_t)bad],
			    done + (size_t)bad, pr_encoding_name(enc),
			    enc == PR_ENC_F16 ? "65504" : "3.39e38",
			    enc == PR_ENC_F16 ? "bf16 or f32" : "f32");
		}
		store_le_u16s(bytes, half, k);
		rc = msgpack_pack_bin_body(pk, bytes, 2 * k);
	}
	return rc;
}

/* Index of the first Inf or NaN among count encoded values, or -1. */
static long
first_nonfinite_payload(const unsigned char *p, pr_encoding enc,
    size_t count)
{
	uint16_t half[CONVERT_CHUNK];
	size_t done, k;
	long bad;

	if (enc == PR_ENC_F32)
		return pr_mp_first_nonfinite_le(p, count);
	for (done = 0; done < count; done += k) {
		k = count - done < CONVERT_CHUNK ? count - done :
		    CONVERT_CHUNK;
		load_le_u16s(half, p + 2 * done, k);
		bad = enc == PR_ENC_F16 ? kn_f16_first_nonfinite(half, k) :
		    kn_bf16_first_nonfinite(half, k);
		if (bad >= 0)
			return (long)(done + (size_t)bad);
	}
	return -1;
}

static void
unpack_payload(float *dst, const unsigned char *p, pr_encoding enc,
    size_t count)
{
	uint16_t half[CONVERT_CHUNK];
	size_t done, k;

	if (enc == PR_ENC_F32) {
		pr_mp_load_le_floats(dst, p, count);
		return;
	}
	for (done = 0; done < count; done += k) {
		k = count - done < CONVERT_CHUNK ? count - done :
		    CONVERT_CHUNK;
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
	size_t width;

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
	width = pr_encoding_width(m->enc);
	if (m->count < 1 || m->count > PR_MP_BIN_MAX / width)
		return kn_error(err, KN_EINVAL, "an update holds 1 to %llu "
		    "%s values, not %zu",
		    (unsigned long long)(PR_MP_BIN_MAX / width),
		    pr_encoding_name(m->enc), m->count);
	return 0;
}

int
pr_update_encode(const pr_update_meta *m, const float *delta,
    char **buf, size_t *len, char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	unsigned char md[PR_SHA256_LEN];
	size_t payload, total;
	long bad;
	int rc, packed = 1;

	*buf = NULL;
	*len = 0;
	if ((rc = check_meta(m, err)) != 0)
		return rc;
	if ((bad = kn_first_nonfinite(delta, m->count)) >= 0)
		return kn_error(err, KN_ENUM, "update holds a non-finite "
		    "value at index %ld", bad);

	payload = m->count * pr_encoding_width(m->enc);
	total = UPDATE_HEAD_MAX + payload;
	msgpack_sbuffer_init(&sb);
	if ((sb.data = malloc(total)) == NULL)
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB for "
		    "an update", (double)total / 1048576.0);
	sb.alloc = total;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

	rc = msgpack_pack_map(&pk, F_COUNT_FIELDS);
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
	rc |= pr_mp_pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, payload);
	if (rc == 0) {
		if (m->enc == PR_ENC_F32)
			rc = pr_mp_pack_le_floats(&pk, delta, m->count);
		else
			rc = pack_16bit(&pk, m->enc, delta, m->count, &packed,
			    err);
	}
	if (!packed) {
		msgpack_sbuffer_destroy(&sb);
		return rc;
	}
	if (rc == 0 && pr_mp_sha256(sb.data + sb.size - payload, payload,
	    md) != 0)
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

/* ---- decoding ---- */

static int
get_encoding(const msgpack_object *o, pr_encoding *e, char *err)
{
	char shown[16];
	int i;

	if (o->type != MSGPACK_OBJECT_STR)
		return kn_error(err, KN_EINVAL, "update field 'encoding' must "
		    "be a string: f32, f16 or bf16");
	for (i = 0; i < NENCODINGS; i++)
		if (pr_mp_str_is(o, encoding_names[i])) {
			*e = (pr_encoding)i;
			return 0;
		}
	pr_mp_printable(shown, sizeof(shown), o->via.str.ptr,
	    o->via.str.size);
	return kn_error(err, KN_EINVAL, "update has unknown encoding '%s'%s; "
	    "this build reads f32, f16 and bf16", shown,
	    o->via.str.size >= sizeof(shown) ? "..." : "");
}

/* The fields of the map, each checked for type and range. */
static int
parse_meta(const msgpack_object **fields, pr_update_meta *m, char *err)
{
	const msgpack_object *o = fields[F_RUN_ID];
	uint64_t u = 0;
	size_t width;
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
	width = pr_encoding_width(m->enc);
	o = fields[F_COUNT];
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 < 1 ||
	    o->via.u64 > PR_MP_BIN_MAX / width)
		return kn_error(err, KN_EINVAL, "update field 'count' must be "
		    "an integer in [1, %llu] for %s values",
		    (unsigned long long)(PR_MP_BIN_MAX / width),
		    pr_encoding_name(m->enc));
	m->count = (size_t)o->via.u64;
	return 0;
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

int
pr_update_decode(const char *buf, size_t len,
    const pr_update_meta *expect, float *delta_out, pr_update_meta *got,
    char *err)
{
	const msgpack_object *fields[F_COUNT_FIELDS], *root, *po, *ho;
	const unsigned char *payload;
	unsigned char md[PR_SHA256_LEN];
	msgpack_unpacked up;
	pr_update_meta m;
	size_t want;
	long bad;
	int rc;

	if (delta_out != NULL && (expect == NULL || expect->count == 0))
		return kn_error(err, KN_EINVAL, "decoding an update needs the "
		    "expected parameter count");
	msgpack_unpacked_init(&up);
	if ((rc = pr_mp_open(buf, len, &update_format, update_others, &up,
	    &root, err)) != 0)
		goto out;
	if ((rc = pr_mp_collect_fields(root, update_keys, F_COUNT_FIELDS,
	    fields, "update", err)) != 0)
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
	want = m.count * pr_encoding_width(m.enc);
	if (po->via.bin.size != want) {
		rc = kn_error(err, KN_EINVAL, "update payload holds %lu "
		    "bytes, but %zu %s values take %zu",
		    (unsigned long)po->via.bin.size, m.count,
		    pr_encoding_name(m.enc), want);
		goto out;
	}
	if (pr_mp_sha256(po->via.bin.ptr, want, md) != 0) {
		rc = kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
		goto out;
	}
	if (memcmp(md, ho->via.bin.ptr, PR_SHA256_LEN) != 0) {
		rc = kn_error(err, KN_EINVAL, "payload hash mismatch: the "
		    "update is corrupt");
		goto out;
	}
	payload = (const unsigned char *)po->via.bin.ptr;
	bad = first_nonfinite_payload(payload, m.enc, m.count);
	if (bad >= 0) {
		rc = kn_error(err, KN_ENUM, "update holds a non-finite value "
		    "at index %ld", bad);
		goto out;
	}

	/* valid: only now touch the caller's memory */
	if (delta_out != NULL)
		unpack_payload(delta_out, payload, m.enc, m.count);
	if (got != NULL)
		*got = m;
	rc = 0;
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}
