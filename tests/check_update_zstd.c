/* zstd-compressed updates: a round trip in every encoding that decodes to
 * the very values of the uncompressed message, the fallback to no
 * compression, and every kind of bad frame (truncated, damaged, of
 * another size than the payload takes, lying about its size, without
 * its size or checksum, followed by bytes) refused with a message and
 * nothing written, both when decoding into a buffer and when only
 * checking.  Bad frames are wrapped here in messages with a right hash,
 * written with msgpack-c and OpenSSL, not by proto/update.c. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <openssl/evp.h>
#include <zstd.h>

#include "kernels/error.h"
#include "proto/update.h"
#include "tests/testutil.h"

#define RUN_A "0123456789abcdef0123456789abcdef" \
	"0123456789abcdef0123456789abcdef"
/* 160 KB of f32: more than two of the 64 KiB pieces a check without
 * output decompresses at a time */
#define NBIG 40000

static pr_update_meta meta;
static float *x;                /* NBIG values with repeats */

static void
setup(void)
{
	size_t i;

	memset(&meta, 0, sizeof(meta));
	strcpy(meta.run_id, RUN_A);
	meta.block = 1;
	meta.round = 3;
	meta.replica = 0;
	meta.step = 50;
	meta.enc = PR_ENC_F32;
	meta.count = NBIG;
	meta.comp = PR_COMP_ZSTD;
	x = malloc(NBIG * sizeof(float));
	ck_assert_ptr_nonnull(x);
	for (i = 0; i < NBIG; i++)
		x[i] = i % 5 == 0 ? 0.0f : 0.001f * (float)((int)(i % 23) - 11);
}

static void
teardown(void)
{
	free(x);
}

static char *
encode(const pr_update_meta *m, const float *v, size_t *len)
{
	char err[PR_ERR_LEN] = "", *buf = NULL;

	if (pr_update_encode(m, v, &buf, len, err) != 0)
		ck_abort_msg("encode failed: %s", err);
	ck_assert_uint_le(*len, pr_update_max_bytes(m->count));
	return buf;
}

/* The message m would be with payload p (plen bytes) and, unless comp is
 * NULL, a "compression" field of comp; the hash is right. */
static char *
wrap(const pr_update_meta *m, const char *comp, const void *p, size_t plen,
    size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	unsigned char md[32];
	unsigned int mdlen;
	char *out;

#define KEY(s) msgpack_pack_str_with_body(&pk, s, strlen(s))
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, comp ? 12 : 11);
	KEY("magic");
	KEY("ShardMeter update");
	KEY("version");
	msgpack_pack_uint64(&pk, 1);
	KEY("run_id");
	KEY(m->run_id);
	KEY("block");
	msgpack_pack_uint64(&pk, (uint64_t)m->block);
	KEY("round");
	msgpack_pack_uint64(&pk, (uint64_t)m->round);
	KEY("replica");
	msgpack_pack_uint64(&pk, (uint64_t)m->replica);
	KEY("step");
	msgpack_pack_uint64(&pk, (uint64_t)m->step);
	KEY("encoding");
	KEY(pr_encoding_name(m->enc));
	KEY("count");
	msgpack_pack_uint64(&pk, m->count);
	if (comp != NULL) {
		KEY("compression");
		KEY(comp);
	}
	KEY("payload");
	msgpack_pack_bin_with_body(&pk, p, plen);
	ck_assert_int_eq(EVP_Digest(p, plen, md, &mdlen, EVP_sha256(), NULL),
	    1);
	KEY("sha256");
	msgpack_pack_bin_with_body(&pk, md, 32);
#undef KEY
	*len = sb.size;
	out = malloc(sb.size);
	memcpy(out, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	return out;
}

/* One zstd frame of p, with or without its size and checksum. */
static unsigned char *
compress(const void *p, size_t n, int with_size, int with_checksum,
    size_t *zlen)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t bound = ZSTD_compressBound(n);
	unsigned char *z = malloc(bound);

	ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c,
	    ZSTD_c_contentSizeFlag, with_size)));
	ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c,
	    ZSTD_c_checksumFlag, with_checksum)));
	if (with_size) {
		*zlen = ZSTD_compress2(c, z, bound, p, n);
	} else {
		ZSTD_inBuffer in = { p, n, 0 };
		ZSTD_outBuffer out = { z, bound, 0 };

		ck_assert_uint_eq(ZSTD_compressStream2(c, &out, &in,
		    ZSTD_e_end), 0);
		*zlen = out.pos;
	}
	ck_assert(!ZSTD_isError(*zlen));
	ZSTD_freeCCtx(c);
	return z;
}

/* The raw payload of m and v, as the uncompressed message holds it. */
static unsigned char *
raw_payload(const pr_update_meta *m, const float *v, size_t *n)
{
	pr_update_meta plain = *m;
	unsigned char *p;
	size_t len, at;
	char *buf;

	plain.comp = PR_COMP_NONE;
	buf = encode(&plain, v, &len);
	*n = pr_update_payload_bytes(m->enc, m->count);
	/* payload and hash end the message: bin header, body, key, bin */
	at = len - (32 + 2 + 7) - *n;
	p = malloc(*n);
	memcpy(p, buf + at, *n);
	free(buf);
	return p;
}

/* Refused with want in the message, nothing written: decoding into a
 * buffer, and checking alone with everything open. */
static void
reject_both(const char *buf, size_t len, const pr_update_meta *m,
    const char *want)
{
	char err[PR_ERR_LEN] = "";
	float *out = malloc(m->count * sizeof(float));
	pr_update_meta got;
	int pass;

	for (pass = 0; pass < 2; pass++) {
		memset(out, TU_SENTINEL, m->count * sizeof(float));
		memset(&got, TU_SENTINEL, sizeof(got));
		err[0] = '\0';
		ck_assert_int_lt(pr_update_decode(buf, len, pass ? NULL : m,
		    pass ? NULL : out, &got, err), 0);
		tu_assert_refused(err, want);
		tu_assert_untouched(out, m->count * sizeof(float));
		tu_assert_untouched(&got, sizeof(got));
	}
	free(out);
}

/* Wraps frame z as m's compressed payload and requires refusal. */
static void
reject_frame(const pr_update_meta *m, const void *z, size_t zlen,
    const char *want)
{
	size_t len;
	char *buf = wrap(m, "zstd", z, zlen, &len);

	reject_both(buf, len, m, want);
	free(buf);
}

/* Every encoding: the compressed message is smaller, says zstd, and
 * decodes to the bits the uncompressed one does; checking it alone
 * passes too. */
START_TEST(test_round_trip)
{
	float *a = malloc(NBIG * sizeof(float)), *b = malloc(NBIG *
	    sizeof(float));
	char err[PR_ERR_LEN];
	int enc;

	for (enc = 0; enc < 4; enc++) {
		pr_update_meta m = meta, plain = meta, got;
		size_t len, plen;
		char *buf, *pbuf;

		m.enc = plain.enc = (pr_encoding)enc;
		plain.comp = PR_COMP_NONE;
		buf = encode(&m, x, &len);
		pbuf = encode(&plain, x, &plen);
		ck_assert_msg(len < plen / 2, "%s: %zu bytes compressed, %zu "
		    "not", pr_encoding_name(m.enc), len, plen);
		ck_assert_uint_gt(tu_find(buf, len, "compression"), 0);
		memset(&got, 0, sizeof(got));
		ck_assert_int_eq(pr_update_decode(buf, len, &m, a, &got, err),
		    0);
		ck_assert_int_eq(got.comp, PR_COMP_ZSTD);
		ck_assert_int_eq(got.enc, m.enc);
		ck_assert_int_eq(pr_update_decode(pbuf, plen, &plain, b, &got,
		    err), 0);
		ck_assert_int_eq(got.comp, PR_COMP_NONE);
		ck_assert_int_eq(memcmp(a, b, NBIG * sizeof(float)), 0);
		ck_assert_int_eq(pr_update_decode(buf, len, NULL, NULL, &got,
		    err), 0);
		ck_assert_uint_eq(got.count, NBIG);
		free(buf);
		free(pbuf);
	}
	free(a);
	free(b);
}
END_TEST

/* Values that do not compress go uncompressed, byte for byte the
 * message without compression; so does a tiny update. */
START_TEST(test_fallback)
{
	pr_update_meta m = meta, plain = meta, got;
	char err[PR_ERR_LEN], *buf, *pbuf;
	uint32_t h = 7;
	size_t i, len, plen;

	plain.comp = PR_COMP_NONE;
	/* random bits, made finite */
	for (i = 0; i < NBIG; i++) {
		uint32_t bits;

		h = h * 1664525u + 1013904223u;
		bits = h ^ (h >> 15) * 2246822519u;
		if ((bits & 0x7f800000u) == 0x7f800000u)
			bits &= ~0x00800000u;
		memcpy(&x[i], &bits, 4);
	}
	buf = encode(&m, x, &len);
	pbuf = encode(&plain, x, &plen);
	ck_assert_uint_eq(len, plen);
	ck_assert_int_eq(memcmp(buf, pbuf, len), 0);
	ck_assert_int_eq(pr_update_decode(buf, len, &m, NULL, &got, err), 0);
	ck_assert_int_eq(got.comp, PR_COMP_NONE);
	free(buf);
	free(pbuf);
	m.count = plain.count = 1;
	buf = encode(&m, x, &len);
	pbuf = encode(&plain, x, &plen);
	ck_assert_uint_eq(len, plen);
	free(buf);
	free(pbuf);
}
END_TEST

START_TEST(test_names)
{
	pr_compression c = PR_COMP_ZSTD;

	ck_assert_int_eq(pr_compression_parse("none", &c), 0);
	ck_assert_int_eq(c, PR_COMP_NONE);
	ck_assert_int_eq(pr_compression_parse("zstd", &c), 0);
	ck_assert_int_eq(c, PR_COMP_ZSTD);
	ck_assert_int_eq(pr_compression_parse("ZSTD", &c), KN_EINVAL);
	ck_assert_int_eq(pr_compression_parse("lz4", &c), KN_EINVAL);
	ck_assert_int_eq(c, PR_COMP_ZSTD);
	ck_assert_str_eq(pr_compression_name(PR_COMP_NONE), "none");
	ck_assert_str_eq(pr_compression_name(PR_COMP_ZSTD), "zstd");
	ck_assert_str_eq(pr_compression_name((pr_compression)2), "?");
}
END_TEST

/* Where the frame content size sits in a zstd frame header and how many
 * bytes it takes (RFC 8878, 3.1.1.1). */
static size_t
fcs_field(const unsigned char *z, size_t *size)
{
	static const size_t did[4] = { 0, 1, 2, 4 };
	static const size_t fcs[4] = { 0, 2, 4, 8 };
	unsigned fhd = z[4];
	int single = (fhd >> 5) & 1;

	*size = fcs[fhd >> 6] ? fcs[fhd >> 6] : (size_t)single;
	return 5 + (single ? 0 : 1) + did[fhd & 3];
}

static void
set_fcs(unsigned char *z, uint64_t v)
{
	size_t size, at = fcs_field(z, &size), i;

	ck_assert_uint_ge(size, 2);
	if (size == 2)
		v -= 256;
	for (i = 0; i < size; i++)
		z[at + i] = (unsigned char)(v >> (8 * i));
}

START_TEST(test_bad_frames)
{
	pr_update_meta m = meta;
	unsigned char *raw, *z, *big, *bz;
	size_t n, zlen, bzlen, k, len;
	char *buf;

	m.count = 3000;
	raw = raw_payload(&m, x, &n);
	z = compress(raw, n, 1, 1, &zlen);
	/* the frame itself is good */
	buf = wrap(&m, "zstd", z, zlen, &len);
	ck_assert_int_eq(pr_update_decode(buf, len, &m, NULL, NULL, NULL), 0);
	free(buf);
	/* truncated anywhere */
	for (k = 1; k < zlen; k += k < 8 ? 1 : zlen / 7)
		reject_frame(&m, z, zlen - k, "zstd frame");
	/* damaged inside: the decoder or the checksum catches it, or,
	 * checked in pieces, a value it makes of the damage */
	for (k = 12; k < zlen; k += zlen / 5) {
		z[k] ^= 0x5a;
		reject_frame(&m, z, zlen, NULL);
		z[k] ^= 0x5a;
	}
	/* followed by bytes, or by a second frame */
	big = malloc(2 * zlen + 3);
	memcpy(big, z, zlen);
	memcpy(big + zlen, "abc", 3);
	reject_frame(&m, big, zlen + 3, "update's payload has 3 bytes after "
	    "its zstd frame");
	memcpy(big + zlen, z, zlen);
	reject_frame(&m, big, 2 * zlen, "bytes after its zstd frame");
	free(big);
	/* another size than the payload takes, either way */
	big = malloc(n + 400);
	memcpy(big, raw, n);
	memcpy(big + n, raw, 400);
	bz = compress(big, n + 400, 1, 1, &bzlen);
	reject_frame(&m, bz, bzlen, "update's zstd frame holds 12400 bytes, "
	    "but the payload takes 12000");
	/* a bomb: the header says the right size, the frame holds more */
	set_fcs(bz, n);
	reject_frame(&m, bz, bzlen, "zstd frame");
	free(bz);
	bz = compress(raw, n - 4, 1, 1, &bzlen);
	reject_frame(&m, bz, bzlen, "holds 11996 bytes, but the payload "
	    "takes 12000");
	/* a short frame: says the right size, holds less */
	set_fcs(bz, n);
	reject_frame(&m, bz, bzlen, "zstd frame");
	free(bz);
	free(big);
	/* without its size, or without its checksum */
	bz = compress(raw, n, 0, 1, &bzlen);
	reject_frame(&m, bz, bzlen, "update's zstd frame does not say its "
	    "size; it must be 12000 bytes");
	free(bz);
	bz = compress(raw, n, 1, 0, &bzlen);
	reject_frame(&m, bz, bzlen, "update's zstd frame has no content "
	    "checksum");
	free(bz);
	/* not a frame at all: the raw payload said to be compressed */
	reject_frame(&m, raw, n, "update payload is not a zstd frame");
	reject_frame(&m, raw, 0, "update payload is not a zstd frame");
	/* a skippable frame of the right length holds nothing */
	memcpy(raw, "\x50\x2a\x4d\x18\x04\x00\x00\x00" "abcd", 12);
	reject_frame(&m, raw, 12, "update's zstd frame holds 0 bytes");
	free(raw);
	free(z);
}
END_TEST

/* A message that claims a count of 4 x 10^9 int8 values with a frame of
 * a few bytes that says so: checked without output, it is refused when
 * the frame runs out, without a buffer of its claimed size; and the
 * claim itself is refused by a caller that expects its own count. */
START_TEST(test_small_message_large_claim)
{
	pr_update_meta m = meta;
	unsigned char *zeros = calloc(1, 70000), *z;
	char err[PR_ERR_LEN], *buf;
	size_t zlen, len;

	m.enc = PR_ENC_INT8;
	m.count = 4000000000u;
	z = compress(zeros, 70000, 1, 1, &zlen);
	set_fcs(z, pr_update_payload_bytes(PR_ENC_INT8, m.count));
	buf = wrap(&m, "zstd", z, zlen, &len);
	ck_assert_uint_lt(len, 400);
	ck_assert_int_lt(pr_update_decode(buf, len, NULL, NULL, NULL, err), 0);
	tu_assert_refused(err, "zstd frame");
	m = meta;
	ck_assert_int_lt(pr_update_decode(buf, len, &m, x, NULL, err), 0);
	ck_assert_str_eq(err, "update holds 4000000000 parameters, expected "
	    "40000");
	free(buf);
	free(z);
	free(zeros);
}
END_TEST

/* A good frame of a bad payload: decompressed, then checked as an
 * uncompressed one is, in pieces too (the NaN sits in the third 64 KiB
 * piece). */
START_TEST(test_bad_content)
{
	static const uint32_t nan_bits = 0x7fc00000;
	static const float neg = -1.0f;
	pr_update_meta m = meta;
	unsigned char *raw, *z;
	size_t n, zlen;

	raw = raw_payload(&m, x, &n);
	memcpy(raw + 4 * 35000, &nan_bits, 4);
	z = compress(raw, n, 1, 1, &zlen);
	reject_frame(&m, z, zlen, "update holds a non-finite value at index "
	    "35000");
	free(z);
	free(raw);
	m.enc = PR_ENC_INT8;
	raw = raw_payload(&m, x, &n);
	memcpy(raw + 4 * 100, &neg, 4);   /* little-endian host */
	z = compress(raw, n, 1, 1, &zlen);
	reject_frame(&m, z, zlen, "update holds int8 scale -1 for values "
	    "25600 to 25855");
	free(z);
	memcpy(raw + 4 * 100, raw, 4);
	raw[n - 7] = 0x80;
	z = compress(raw, n, 1, 1, &zlen);
	reject_frame(&m, z, zlen, "update holds int8 value -128 at index "
	    "39993");
	free(z);
	free(raw);
}
END_TEST

/* The compression field: only "zstd", and only on a compressed update. */
START_TEST(test_compression_field)
{
	pr_update_meta m = meta;
	unsigned char *raw;
	size_t n, len;
	char *buf;

	m.count = 10;
	raw = raw_payload(&m, x, &n);
	buf = wrap(&m, "lz4", raw, n, &len);
	reject_both(buf, len, &m, "update has unknown compression 'lz4'; "
	    "this build reads zstd, and an uncompressed update has no "
	    "'compression' field");
	free(buf);
	buf = wrap(&m, "none", raw, n, &len);
	reject_both(buf, len, &m, "unknown compression 'none'");
	/* the str header and "none" -> the uint32 1 */
	memcpy(buf + tu_find(buf, len, "none") - 1, "\xce\x00\x00\x00\x01",
	    5);
	reject_both(buf, len, &m, "update field 'compression' must be a "
	    "string: zstd");
	free(buf);
	/* and the uncompressed message is read as before */
	buf = wrap(&m, NULL, raw, n, &len);
	ck_assert_int_eq(pr_update_decode(buf, len, &m, NULL, NULL, NULL), 0);
	free(buf);
	free(raw);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("update_zstd");
	TCase *tc = tcase_create("update_zstd");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_fallback);
	tcase_add_test(tc, test_bad_frames);
	tcase_add_test(tc, test_small_message_large_claim);
	tcase_add_test(tc, test_bad_content);
	tcase_add_test(tc, test_compression_field);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
