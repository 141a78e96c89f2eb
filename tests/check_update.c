/* The update message: round trips in f32, f16, bf16 and int8 within
 * each encoding's rounding, and every kind of damaged, foreign or
 * mismatched message rejected with its own reason and without touching
 * the caller's buffers.  Compression: tests/check_update_zstd.c. */
#include "config.h"

#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "proto/update.h"
#include "tests/testutil.h"

#define RUN_A "0123456789abcdef0123456789abcdef" \
	"0123456789abcdef0123456789abcdef"
#define RUN_B "fedcba9876543210fedcba9876543210" \
	"fedcba9876543210fedcba9876543210"
#define NDELTA 1000

static float *delta;
static pr_update_meta meta;     /* f32, NDELTA values */
static char *msg;               /* meta and delta, encoded */
static size_t msg_len;

/* Values over the normal f16 range (2^-14 to 2^15), a few f16
 * subnormals, zeros. */
static void
setup(void)
{
	char err[PR_ERR_LEN];
	size_t i;

	delta = malloc(NDELTA * sizeof(float));
	ck_assert_ptr_nonnull(delta);
	for (i = 0; i < NDELTA; i++) {
		float mant = 1.0f + (float)((i * 2654435761u) % 1000003) /
		    1000003.0f;

		delta[i] = ldexpf(mant, (int)(i % 29) - 14) *
		    (i % 2 ? -1.0f : 1.0f);
	}
	delta[3] = 0.0f;
	delta[4] = -0.0f;
	delta[5] = 3e-7f;       /* f16 subnormal */
	delta[6] = -6e-8f;
	delta[7] = 65504.0f;
	memset(&meta, 0, sizeof(meta));
	strcpy(meta.run_id, RUN_A);
	meta.block = 2;
	meta.round = 7;
	meta.replica = 1;
	meta.step = 350;
	meta.enc = PR_ENC_F32;
	meta.count = NDELTA;
	ck_assert_int_eq(pr_update_encode(&meta, delta, &msg, &msg_len, err),
	    0);
}

static void
teardown(void)
{
	free(delta);
	free(msg);
}

static pr_update_meta
expect_all(void)
{
	return meta;
}

/* Decodes and requires failure with want in the message (NULL: any), with
 * neither the output values nor the output metadata touched. */
static void
reject_n(const char *buf, size_t len, const pr_update_meta *expect,
    const char *want)
{
	size_t n = expect != NULL && expect->count > 0 ? expect->count : 1;
	char err[PR_ERR_LEN] = "";
	float *out = malloc(n * sizeof(float));
	pr_update_meta got;

	memset(out, TU_SENTINEL, n * sizeof(float));
	memset(&got, TU_SENTINEL, sizeof(got));
	ck_assert_int_lt(pr_update_decode(buf, len, expect,
	    expect != NULL && expect->count > 0 ? out : NULL, &got, err), 0);
	tu_assert_refused(err, want);
	tu_assert_untouched(out, n * sizeof(float));
	tu_assert_untouched(&got, sizeof(got));
	free(out);
}

static void
reject(const char *buf, size_t len, const char *want)
{
	pr_update_meta e = expect_all();

	reject_n(buf, len, &e, want);
}

static char *
encode(const pr_update_meta *m, const float *x, size_t *len)
{
	char err[PR_ERR_LEN] = "", *buf = NULL;

	if (pr_update_encode(m, x, &buf, len, err) != 0)
		ck_abort_msg("encode failed: %s", err);
	ck_assert_uint_le(*len, pr_update_max_bytes(m->count));
	return buf;
}

START_TEST(test_encoding_names)
{
	pr_encoding e = PR_ENC_F32;

	ck_assert_int_eq(pr_encoding_parse("f16", &e), 0);
	ck_assert_int_eq(e, PR_ENC_F16);
	ck_assert_int_eq(pr_encoding_parse("bf16", &e), 0);
	ck_assert_int_eq(e, PR_ENC_BF16);
	ck_assert_int_eq(pr_encoding_parse("f32", &e), 0);
	ck_assert_int_eq(e, PR_ENC_F32);
	ck_assert_int_eq(pr_encoding_parse("F32", &e), KN_EINVAL);
	ck_assert_int_eq(pr_encoding_parse("f8", &e), KN_EINVAL);
	ck_assert_int_eq(pr_encoding_parse("", &e), KN_EINVAL);
	ck_assert_int_eq(e, PR_ENC_F32);
	ck_assert_str_eq(pr_encoding_name(PR_ENC_F32), "f32");
	ck_assert_str_eq(pr_encoding_name(PR_ENC_F16), "f16");
	ck_assert_str_eq(pr_encoding_name(PR_ENC_BF16), "bf16");
	ck_assert_str_eq(pr_encoding_name((pr_encoding)7), "?");
	ck_assert_uint_eq(pr_encoding_width(PR_ENC_F32), 4);
	ck_assert_uint_eq(pr_encoding_width(PR_ENC_F16), 2);
	ck_assert_uint_eq(pr_encoding_width(PR_ENC_BF16), 2);
	ck_assert_int_eq(pr_encoding_parse("int8", &e), 0);
	ck_assert_int_eq(e, PR_ENC_INT8);
	ck_assert_str_eq(pr_encoding_name(PR_ENC_INT8), "int8");
	ck_assert_uint_eq(pr_encoding_width(PR_ENC_INT8), 1);
	ck_assert_int_eq(pr_encoding_parse("i8", &e), KN_EINVAL);
	/* 256 values and 4 bytes of scale per started block */
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_INT8, 1), 5);
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_INT8, 256), 260);
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_INT8, 257), 265);
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_F16, 10), 20);
	ck_assert_uint_eq(pr_update_payload_bytes((pr_encoding)4, 10), 0);
	/* the largest int8 count whose payload fits a bin, and one more */
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_INT8, 4228890875u),
	    4294967295u);
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_INT8, 4228890876u),
	    0);
}
END_TEST

/* Within half an ulp: f32 exact, bf16 within 2^-8 relative, f16 within
 * 2^-11 relative from 2^-14 up and 2^-25 absolute below; every 16-bit
 * payload is kernels/convert's. */
START_TEST(test_round_trip)
{
	static const pr_encoding encs[3] = { PR_ENC_F32, PR_ENC_F16,
	    PR_ENC_BF16 };
	float *out = malloc(NDELTA * sizeof(float));
	uint16_t *half = malloc(NDELTA * sizeof(uint16_t));
	char err[PR_ERR_LEN];
	int k;

	for (k = 0; k < 3; k++) {
		pr_update_meta m = meta, e = meta, got;
		double worst = 0;
		size_t len, size, at, i;
		char *buf;

		m.enc = encs[k];
		e.enc = PR_ENC_F32;     /* not checked */
		e.replica = 9;          /* nor this */
		e.step = 0;             /* nor this */
		buf = encode(&m, delta, &len);
		at = tu_payload_at(buf, len, &size);
		ck_assert_uint_eq(size, NDELTA * pr_encoding_width(m.enc));
		memset(&got, 0, sizeof(got));
		ck_assert_int_eq(pr_update_decode(buf, len, &e, out, &got,
		    err), 0);
		ck_assert_str_eq(got.run_id, RUN_A);
		ck_assert_int_eq(got.block, 2);
		ck_assert_int_eq(got.round, 7);
		ck_assert_int_eq(got.replica, 1);
		ck_assert_int_eq(got.step, 350);
		ck_assert_int_eq(got.enc, encs[k]);
		ck_assert_uint_eq(got.count, NDELTA);
		if (m.enc == PR_ENC_F32) {
			ck_assert_int_eq(memcmp(out, delta,
			    NDELTA * sizeof(float)), 0);
			if (*(const unsigned char *)&(uint16_t){ 1 } == 1)
				ck_assert_int_eq(memcmp(buf + at, delta,
				    NDELTA * sizeof(float)), 0);
		} else {
			if (m.enc == PR_ENC_F16)
				kn_f32_to_f16(half, delta, NDELTA);
			else
				kn_f32_to_bf16(half, delta, NDELTA);
			if (*(const unsigned char *)&(uint16_t){ 1 } == 1)
				ck_assert_int_eq(memcmp(buf + at, half,
				    NDELTA * 2), 0);
		}
		for (i = 0; i < NDELTA; i++) {
			double x = delta[i], err_abs = fabs(out[i] - x);

			ck_assert(!!signbit(out[i]) == !!signbit(delta[i]));
			if (m.enc == PR_ENC_F16 && fabs(x) < 0x1p-14) {
				ck_assert(err_abs <= 0x1p-25);
				continue;
			}
			if (x == 0) {
				ck_assert(out[i] == 0);
				continue;
			}
			if (err_abs / fabs(x) > worst)
				worst = err_abs / fabs(x);
		}
		if (m.enc == PR_ENC_F32)
			ck_assert(worst == 0);
		else if (m.enc == PR_ENC_F16)
			ck_assert(worst <= 0x1p-11);
		else
			ck_assert(worst <= 0x1p-8);
		free(buf);
	}
	free(half);
	free(out);
}
END_TEST

START_TEST(test_wildcards_and_bounds)
{
	pr_update_meta e = expect_all(), got, m = meta;
	float *out = malloc(NDELTA * sizeof(float));
	char err[PR_ERR_LEN], *buf, *again;
	size_t len, len2, n;

	e.run_id[0] = '\0';
	e.block = -1;
	e.round = -1;
	ck_assert_int_eq(pr_update_decode(msg, msg_len, &e, out, &got, err),
	    0);
	ck_assert_str_eq(got.run_id, RUN_A);
	/* without an output, the count may be open and expect may be
	 * NULL; with one, the count must be known */
	e.count = 0;
	ck_assert_int_eq(pr_update_decode(msg, msg_len, &e, NULL, &got, err),
	    0);
	ck_assert_uint_eq(got.count, NDELTA);
	ck_assert_int_eq(pr_update_decode(msg, msg_len, NULL, NULL, NULL,
	    err), 0);
	memset(out, TU_SENTINEL, sizeof(float));
	ck_assert_int_eq(pr_update_decode(msg, msg_len, NULL, out, NULL,
	    err), KN_EINVAL);
	ck_assert_str_eq(err, "decoding an update needs the expected "
	    "parameter count");
	/* the same input gives the same bytes */
	buf = encode(&meta, delta, &len);
	ck_assert_uint_eq(len, msg_len);
	ck_assert_int_eq(memcmp(buf, msg, len), 0);
	free(buf);
	/* the size bound holds at the largest field values */
	strcpy(m.run_id, RUN_B);
	m.block = PR_MAX_BLOCKS;
	m.round = INT64_MAX;
	m.step = INT64_MAX;
	m.replica = INT_MAX;
	for (n = 1; n <= NDELTA; n += 333) {
		m.count = n;
		m.enc = PR_ENC_F32;
		buf = encode(&m, delta, &len);
		ck_assert_int_eq(pr_update_decode(buf, len, &m, out, &got,
		    err), 0);
		ck_assert_int_eq(got.round, INT64_MAX);
		ck_assert_int_eq(got.replica, INT_MAX);
		m.enc = PR_ENC_BF16;
		again = encode(&m, delta, &len2);
		ck_assert_uint_eq(len - len2, 2 * n - 1);   /* "f32"/"bf16" */
		free(again);
		free(buf);
	}
	ck_assert_uint_eq(pr_update_max_bytes(SIZE_MAX / 2), SIZE_MAX);
	ck_assert_uint_ge(pr_update_max_bytes(0), 256);
	free(out);
}
END_TEST

START_TEST(test_bad_magic)
{
	char *b = tu_dup_buf(msg, msg_len, 0), *ck, err[PR_ERR_LEN];
	pr_ckpt_meta cm;
	kn_tensor t;
	size_t ck_len;

	b[tu_find(b, msg_len, "ShardMeter update") + 3] = 'X';
	reject(b, msg_len, "not a ShardMeter update (wrong magic)");
	free(b);
	/* a checkpoint is named as such */
	memset(&cm, 0, sizeof(cm));
	strcpy(cm.run_id, RUN_A);
	strcpy(cm.kind, "block");
	memset(&t, 0, sizeof(t));
	strcpy(t.name, "w");
	t.ndim = 1;
	t.shape[0] = 4;
	ck_assert_int_eq(pr_ckpt_encode(&cm, &t, 1, delta, &ck, &ck_len, err),
	    0);
	reject(ck, ck_len, "not a ShardMeter update: this is a ShardMeter "
	    "checkpoint file");
	/* and an update is named by the checkpoint reader */
	ck_assert_int_lt(pr_ckpt_decode(msg, msg_len, NULL, NULL, 0, NULL,
	    NULL, err), 0);
	ck_assert_str_eq(err, "not a ShardMeter checkpoint: this is a "
	    "ShardMeter update file");
	free(ck);
}
END_TEST

START_TEST(test_wrong_version)
{
	char *b = tu_dup_buf(msg, msg_len, 0);
	size_t at = tu_find(b, msg_len, "version") + strlen("version");

	ck_assert_int_eq(b[at], 1);     /* positive fixint */
	b[at] = 2;
	reject(b, msg_len, "update format version 2; this build reads "
	    "version 1: a newer ShardMeter wrote it, upgrade this host");
	b[at] = 0;
	reject(b, msg_len, "update format version 0; this build reads "
	    "version 1: the message is damaged");
	b[at] = (char)0xff;              /* -1 */
	reject(b, msg_len, "update format version -1");
	b[at] = (char)0xc0;              /* nil */
	reject(b, msg_len, "update has no format version");
	free(b);
}
END_TEST

START_TEST(test_wrong_run_block_round_count)
{
	pr_update_meta e = expect_all();
	char want[200];

	strcpy(e.run_id, RUN_B);
	snprintf(want, sizeof(want), "update belongs to run %s, not %s",
	    RUN_A, RUN_B);
	reject_n(msg, msg_len, &e, want);
	e = expect_all();
	e.block = 3;
	reject_n(msg, msg_len, &e, "update is for block 2, not block 3");
	e = expect_all();
	e.round = 8;
	reject_n(msg, msg_len, &e, "update is for round 7, not round 8");
	e = expect_all();
	e.count = NDELTA - 1;
	reject_n(msg, msg_len, &e, "update holds 1000 parameters, expected "
	    "999");
	e.count = NDELTA + 1;
	reject_n(msg, msg_len, &e, "update holds 1000 parameters, expected "
	    "1001");
}
END_TEST

/* A count that disagrees with the payload, with the right hash. */
START_TEST(test_count_payload_mismatch)
{
	pr_update_meta m = meta, e;
	float x[5] = { 1, 2, 3, 4, 5 };
	char *buf, *b;
	size_t len, at;

	m.count = 5;
	buf = encode(&m, x, &len);
	b = tu_dup_buf(buf, len, 0);
	at = tu_find(b, len, "count") + strlen("count");
	ck_assert_int_eq(b[at], 5);
	b[at] = 6;
	e = m;
	reject_n(b, len, &e, "update holds 6 parameters, expected 5");
	e.count = 6;
	reject_n(b, len, &e, "update payload holds 20 bytes, but 6 f32 "
	    "values take 24");
	b[at] = 0;
	reject_n(b, len, &e, "update field 'count' must be an integer in "
	    "[1, 1073741823] for f32 values");
	free(b);
	free(buf);
}
END_TEST

START_TEST(test_unknown_encoding)
{
	char *b = tu_dup_buf(msg, msg_len, 0);
	size_t at = tu_find(b, msg_len, "f32");

	memcpy(b + at, "f64", 3);
	reject(b, msg_len, "update has unknown encoding 'f64'; this build "
	    "reads f32, f16, bf16 and int8");
	memcpy(b + at, "F32", 3);
	reject(b, msg_len, "unknown encoding 'F32'");
	memcpy(b + at - 1, "\xd5\x01\x00\x00", 4);  /* "f32" -> fixext 2 */
	reject(b, msg_len, "update field 'encoding' must be a string");
	free(b);
}
END_TEST

/* Truncation at every length of a small update in each encoding. */
START_TEST(test_truncated)
{
	static const pr_encoding encs[4] = { PR_ENC_F32, PR_ENC_F16,
	    PR_ENC_BF16, PR_ENC_INT8 };
	pr_update_meta m = meta;
	char *buf;
	size_t len, n;
	int k;

	m.count = 3;
	for (k = 0; k < 4; k++) {
		m.enc = encs[k];
		buf = encode(&m, delta, &len);
		for (n = 0; n < len; n++) {
			/* exactly n bytes, so the sanitizer sees any read
			 * past the end */
			char *b = malloc(n ? n : 1);

			memcpy(b, buf, n);
			reject_n(b, n, &m, "update is truncated");
			free(b);
		}
		free(buf);
	}
}
END_TEST

START_TEST(test_trailing)
{
	char *b = tu_dup_buf(msg, msg_len, msg_len);

	memcpy(b + msg_len, "\xc0\x00\x01", 3);
	reject(b, msg_len + 1, "update has 1 trailing bytes after its end");
	reject(b, msg_len + 3, "update has 3 trailing bytes after its end");
	memcpy(b + msg_len, msg, msg_len);
	reject(b, 2 * msg_len, "trailing bytes");
	free(b);
}
END_TEST

START_TEST(test_hash_mismatch)
{
	char *b = tu_dup_buf(msg, msg_len, 0);
	size_t size, at = tu_payload_at(b, msg_len, &size);

	b[at + 17] ^= 0x01;
	reject(b, msg_len, "payload hash mismatch: the update is corrupt");
	b[at + 17] ^= 0x01;
	b[msg_len - 1] ^= 0x80;         /* the hash itself */
	reject(b, msg_len, "payload hash mismatch");
	free(b);
}
END_TEST

/* NaN and Inf with a correct hash, in each encoding; and none is
 * written. */
START_TEST(test_nonfinite)
{
	static const uint32_t bad32[3] = { 0x7fc00000, 0x7f800000,
	    0xff800001 };
	static const uint16_t bad16[3] = { 0x7e00, 0xfc00, 0x7c01 };
	static const uint16_t badbf[3] = { 0x7fc0, 0xff80, 0x7f81 };
	pr_update_meta m = meta;
	char err[PR_ERR_LEN], *buf, *out;
	size_t len, size, at;
	float x[8];
	int k, enc;

	for (enc = 0; enc < 3; enc++) {
		m.enc = (pr_encoding)enc;
		for (k = 0; k < 3; k++) {
			buf = encode(&m, delta, &len);
			at = tu_payload_at(buf, len, &size);
			if (m.enc == PR_ENC_F32)
				memcpy(buf + at + 4 * 123, &bad32[k], 4);
			else
				memcpy(buf + at + 2 * 123, m.enc == PR_ENC_F16 ?
				    &bad16[k] : &badbf[k], 2);
			tu_rehash(buf, len);
			reject_n(buf, len, &m, "update holds a non-finite "
			    "value at index 123");
			free(buf);
		}
	}
	/* nor will one be written */
	memcpy(x, delta, sizeof(x));
	m = meta;
	m.count = 8;
	for (k = 0; k < 3; k++) {
		x[6] = k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
		for (enc = 0; enc < 4; enc++) {
			m.enc = (pr_encoding)enc;
			ck_assert_int_eq(pr_update_encode(&m, x, &out, &len,
			    err), KN_ENUM);
			ck_assert_ptr_null(out);
			ck_assert_uint_eq(len, 0);
			ck_assert_str_eq(err, "update holds a non-finite value "
			    "at index 6");
		}
	}
}
END_TEST

/* A finite value that a 16-bit encoding would turn into Inf is refused
 * by the writer, so a reader never sees one. */
START_TEST(test_overflow_refused)
{
	pr_update_meta m = meta;
	float x[4] = { 1.0f, -65519.0f, 2.0f, 3.0f };
	char err[PR_ERR_LEN], *out;
	size_t len;

	m.count = 4;
	m.enc = PR_ENC_F16;
	out = encode(&m, x, &len);      /* rounds to -65504 */
	free(out);
	x[2] = -65520.0f;
	ck_assert_int_eq(pr_update_encode(&m, x, &out, &len, err), KN_ENUM);
	ck_assert_ptr_null(out);
	ck_assert_str_eq(err, "update value -65520 at index 2 overflows f16 "
	    "(largest finite 65504); send it in bf16 or f32");
	m.enc = PR_ENC_BF16;
	out = encode(&m, x, &len);
	free(out);
	x[3] = 3.4e38f;
	ck_assert_int_eq(pr_update_encode(&m, x, &out, &len, err), KN_ENUM);
	ck_assert_ptr_null(out);
	ck_assert_ptr_nonnull(strstr(err, "at index 3 overflows bf16"));
	m.enc = PR_ENC_F32;
	out = encode(&m, x, &len);
	free(out);
}
END_TEST

START_TEST(test_bad_meta_refused)
{
	pr_update_meta m = meta;
	char err[PR_ERR_LEN], *out;
	size_t len;

	strcpy(m.run_id, "0123");
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "64 lowercase hex"));
	m = meta;
	m.block = PR_MAX_BLOCKS + 1;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	m = meta;
	m.round = -1;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	m = meta;
	m.replica = -1;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	m = meta;
	m.enc = (pr_encoding)4;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	m = meta;
	m.comp = (pr_compression)2;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	ck_assert_str_eq(err, "unknown update compression 2");
	m = meta;
	m.count = 0;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	ck_assert_str_eq(err, "an update holds 1 to 1073741823 f32 values, "
	    "not 0");
	m.count = (size_t)1 << 31;
	m.enc = PR_ENC_F16;
	ck_assert_int_eq(pr_update_encode(&m, delta, &out, &len, err),
	    KN_EINVAL);
	ck_assert_ptr_null(out);
}
END_TEST

START_TEST(test_fields)
{
	char *b = tu_dup_buf(msg, msg_len, 0);

	b[tu_find(b, msg_len, "round") + 4] = 'X';
	reject(b, msg_len, "update has an unknown field 'rounX'");
	memcpy(b, msg, msg_len);
	memcpy(b + tu_find(b, msg_len, "round"), "block", 5);
	reject(b, msg_len, "update has field 'block' twice");
	memcpy(b, msg, msg_len);
	/* key, str8 header of 2 bytes, then "0123456789a...": 'a' -> 'A' */
	ck_assert_int_eq(b[tu_find(b, msg_len, "run_id") + 18], 'a');
	b[tu_find(b, msg_len, "run_id") + 18] = 'A';
	reject(b, msg_len, "update field 'run_id' must be 64 lowercase hex "
	    "digits");
	memcpy(b, msg, msg_len);
	b[tu_find(b, msg_len, "block") + 5] = 65;
	reject(b, msg_len, "update field 'block' must be an integer in "
	    "[0, 64]");
	free(b);
}
END_TEST

START_TEST(test_garbage)
{
	reject("", 0, "update is truncated (empty)");
	reject("hello, world", 12, "not a ShardMeter update");
	reject("\x00", 1, "not a ShardMeter update");
	reject("\x80", 1, "not a ShardMeter update");
	reject("\x81\xa5magic\x01", 8, "not a ShardMeter update");
	reject("\x81\xa5magic\xc1", 8, "malformed msgpack");
	/* counts far beyond the bytes left are caught before allocation */
	reject("\x81\xa1" "a" "\xdd\xff\xff\xff\xff", 8, "truncated");
	reject("\xdf\xff\xff\xff\xff", 5, "truncated");
	reject("\x81\xa1" "a" "\xc6\xff\xff\xff\xf0", 8, "truncated");
	/* nested containers: the pre-scan stops them */
	reject("\x81\xa1" "a" "\x91\x91\x91\x91\x91\x91\x91\x91\xc0", 12,
	    "levels");
}
END_TEST

START_TEST(test_too_many_objects)
{
	size_t n = 40000, i;
	char *b = malloc(n + 6);

	/* { "a": [nil x 40000] } */
	memcpy(b, "\x81\xa1" "a" "\xdc\x9c\x40", 6);
	for (i = 0; i < n; i++)
		b[6 + i] = (char)0xc0;
	reject(b, n + 6, "more than 4096 msgpack objects");
	free(b);
}
END_TEST

/* Every byte replaced by a few values: rejected with a message and
 * nothing written, or accepted (another step count, say). */
START_TEST(test_mutations)
{
	static const unsigned char with[] = { 0x00, 0xff, 0xc1, 0x80, 0xdd,
	    0xc6 };
	static const pr_encoding encs[3] = { PR_ENC_F16, PR_ENC_BF16,
	    PR_ENC_INT8 };
	pr_update_meta m = meta;
	char err[PR_ERR_LEN], *buf, *b;
	float out[40];
	size_t len, i, k;
	int enc;

	m.count = 40;
	for (enc = 0; enc < 3; enc++) {
		m.enc = encs[enc];
		buf = encode(&m, delta, &len);
		b = tu_dup_buf(buf, len, 0);
		for (i = 0; i < len; i++)
			for (k = 0; k < sizeof(with) + 2; k++) {
				memcpy(b, buf, len);
				b[i] = k < sizeof(with) ? (char)with[k] :
				    (char)(b[i] + (k == sizeof(with) ? 1 : -1));
				if (memcmp(b, buf, len) == 0)
					continue;
				if (pr_update_decode(b, len, &m, out, NULL,
				    err) == 0)
					continue;
				reject_n(b, len, &m, NULL);
			}
		free(b);
		free(buf);
	}
}
END_TEST

/* ---- int8 ---- */

#define NINT8 (6 * PR_INT8_BLOCK + 77)  /* a short last block */

static float
le_float_at(const char *p)
{
	uint32_t u = (uint32_t)(unsigned char)p[0] |
	    (uint32_t)(unsigned char)p[1] << 8 |
	    (uint32_t)(unsigned char)p[2] << 16 |
	    (uint32_t)(unsigned char)p[3] << 24;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Blocks of different magnitudes: mixed (with zeros), all zeros, huge,
 * tiny normal, subnormal, one large value among small ones, and the
 * short last block of mixed signs. */
static void
int8_data(float *x)
{
	static const float mag[7] = { 1e-2f, 0, 1e37f, 1e-30f, 1e-42f, 1e-6f,
	    3.0f };
	uint32_t h = 12345;
	size_t i;

	for (i = 0; i < NINT8; i++) {
		size_t b = i / PR_INT8_BLOCK;

		h = h * 1664525u + 1013904223u;
		x[i] = mag[b] * ((float)(h >> 8) / 16777216.0f * 2 - 1);
		if (i % 17 == 0)
			x[i] = 0;
	}
	x[5 * PR_INT8_BLOCK + 3] = 250.0f;
	x[NINT8 - 1] = -3.0f;       /* the largest is negative */
}

/* Each value within half its block's scale (plus the rounding of a
 * division and a product), each scale max |x| / 127 up to an ulp or
 * two, the scales first in the payload and q = x / scale rounded, all
 * checked in double. */
START_TEST(test_int8_round_trip)
{
	pr_update_meta m = meta, got;
	float *x = malloc(NINT8 * sizeof(float));
	float *out = malloc(NINT8 * sizeof(float));
	char err[PR_ERR_LEN], *buf;
	size_t len, size, at, nb = (NINT8 + PR_INT8_BLOCK - 1) / PR_INT8_BLOCK;
	size_t b, i;

	int8_data(x);
	m.enc = PR_ENC_INT8;
	m.count = NINT8;
	buf = encode(&m, x, &len);
	at = tu_payload_at(buf, len, &size);
	ck_assert_uint_eq(size, NINT8 + 4 * nb);
	ck_assert_uint_eq(pr_update_payload_bytes(PR_ENC_INT8, NINT8), size);
	ck_assert_int_eq(pr_update_decode(buf, len, &m, out, &got, err), 0);
	ck_assert_int_eq(got.enc, PR_ENC_INT8);
	ck_assert_int_eq(got.comp, PR_COMP_NONE);
	for (b = 0; b < nb; b++) {
		size_t lo = b * PR_INT8_BLOCK, hi = lo + PR_INT8_BLOCK;
		double top = 0, s = le_float_at(buf + at + 4 * b);

		hi = hi > NINT8 ? NINT8 : hi;
		for (i = lo; i < hi; i++)
			top = fabs(x[i]) > top ? fabs(x[i]) : top;
		if (top == 0) {
			ck_assert(s == 0 && !signbit(s));
		} else {
			/* m / s <= 127 in float: s may sit half an ulp
			 * below the exact quotient */
			ck_assert_msg(s >= top / 127 * (1 - 0x1p-23) &&
			    s <= top / 127 * (1 + 0x1p-21) + 0x1p-148,
			    "block %zu: scale %g, "
			    "max %g", b, s, top);
		}
		for (i = lo; i < hi; i++) {
			int q = (signed char)buf[at + 4 * nb + i];
			double tol = s * (0.5 + 0x1p-16) + 0x1p-149;

			ck_assert_int_ne(q, -128);
			ck_assert_msg(fabs(out[i] - (double)x[i]) <= tol,
			    "value %zu: %g decoded as %g, scale %g", i,
			    (double)x[i], (double)out[i], s);
			ck_assert((double)out[i] == (double)(float)(q * s) ||
			    s == 0);
			if (s > 0)
				ck_assert(fabs(q - x[i] / s) <= 0.5 + 0x1p-16);
			if (x[i] == 0)
				ck_assert(out[i] == 0);
		}
	}
	/* the largest value of a block is exact up to the product */
	ck_assert(fabs(out[5 * PR_INT8_BLOCK + 3] - 250.0) <= 250.0 * 0x1p-20);
	ck_assert(fabs(out[NINT8 - 1] + 3.0) <= 3.0 * 0x1p-20);
	free(buf);
	free(out);
	free(x);
}
END_TEST

/* A value whose scale x 127 would overflow is refused by the writer;
 * one just below is written. */
START_TEST(test_int8_overflow_refused)
{
	pr_update_meta m = meta;
	float x[300] = { 0 };
	char err[PR_ERR_LEN], *out;
	size_t len;

	m.enc = PR_ENC_INT8;
	m.count = 300;
	x[280] = 3.0e38f;
	out = encode(&m, x, &len);
	free(out);
	x[290] = -FLT_MAX;
	ck_assert_int_eq(pr_update_encode(&m, x, &out, &len, err), KN_ENUM);
	ck_assert_ptr_null(out);
	ck_assert_ptr_nonnull(strstr(err, "at index 290 is too large for an "
	    "int8 scale"));
}
END_TEST

/* Each damage in a valid int8 message of 600 values (3 blocks), with
 * the hash made right again: refused, nothing written. */
START_TEST(test_int8_malformed)
{
	static const float bad_scale[6] = { NAN, INFINITY, -INFINITY, -1.0f,
	    -0.0f, 1e37f };
	pr_update_meta m = meta, e;
	float x[600];
	char *buf, *b;
	size_t len, size, at, i, cat;
	int k;

	for (i = 0; i < 600; i++)
		x[i] = (float)((int)(i % 41) - 20) * 0.01f;
	m.enc = PR_ENC_INT8;
	m.count = 600;
	buf = encode(&m, x, &len);
	at = tu_payload_at(buf, len, &size);
	ck_assert_uint_eq(size, 600 + 12);
	for (k = 0; k < 6; k++) {
		b = tu_dup_buf(buf, len, 0);
		memcpy(b + at + 4, &bad_scale[k], 4);  /* little-endian host */
		tu_rehash(b, len);
		reject_n(b, len, &m, "update holds int8 scale");
		reject_n(b, len, &m, "for values 256 to 511; a scale is "
		    "finite, not negative, and at most 3.4e38 / 127");
		reject_n(b, len, NULL, "update holds int8 scale");
		free(b);
	}
	/* the last, short block names its own end */
	b = tu_dup_buf(buf, len, 0);
	memcpy(b + at + 8, &bad_scale[3], 4);
	tu_rehash(b, len);
	reject_n(b, len, &m, "for values 512 to 599");
	/* q = -128, with a fine scale */
	memcpy(b, buf, len);
	b[at + 12 + 300] = (char)0x80;
	tu_rehash(b, len);
	reject_n(b, len, &m, "update holds int8 value -128 at index 300; "
	    "int8 values lie in [-127, 127]");
	reject_n(b, len, NULL, "int8 value -128 at index 300");
	/* 127 and -127 are fine */
	b[at + 12 + 300] = (char)0x81;
	b[at + 12 + 301] = (char)0x7f;
	tu_rehash(b, len);
	ck_assert_int_eq(pr_update_decode(b, len, &m, x, NULL, NULL), 0);
	/* a count that disagrees with the payload, and with the caller */
	memcpy(b, buf, len);
	cat = tu_find(b, len, "count") + strlen("count");
	ck_assert_int_eq((unsigned char)b[cat], 0xcd);  /* uint16 600 */
	b[cat + 2] = (char)(600 + 1 - 512);
	e = m;
	e.count = 601;
	reject_n(b, len, &e, "update payload holds 612 bytes, but 601 int8 "
	    "values take 613");
	b[cat + 2] = (char)(600 - 1 - 512);
	e.count = 599;
	reject_n(b, len, &e, "update payload holds 612 bytes, but 599 int8 "
	    "values take 611");
	reject_n(b, len, &m, "update holds 599 parameters, expected 600");
	free(b);
	/* a short payload: the whole message cut inside it */
	for (i = at + 1; i < len; i += 97) {
		b = tu_dup_buf(buf, i, 0);
		reject_n(b, i, &m, "update is truncated");
		free(b);
	}
	free(buf);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("update");
	TCase *tc = tcase_create("update");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_encoding_names);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_wildcards_and_bounds);
	tcase_add_test(tc, test_bad_magic);
	tcase_add_test(tc, test_wrong_version);
	tcase_add_test(tc, test_wrong_run_block_round_count);
	tcase_add_test(tc, test_count_payload_mismatch);
	tcase_add_test(tc, test_unknown_encoding);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_trailing);
	tcase_add_test(tc, test_hash_mismatch);
	tcase_add_test(tc, test_nonfinite);
	tcase_add_test(tc, test_overflow_refused);
	tcase_add_test(tc, test_bad_meta_refused);
	tcase_add_test(tc, test_fields);
	tcase_add_test(tc, test_garbage);
	tcase_add_test(tc, test_too_many_objects);
	tcase_add_test(tc, test_mutations);
	tcase_add_test(tc, test_int8_round_trip);
	tcase_add_test(tc, test_int8_overflow_refused);
	tcase_add_test(tc, test_int8_malformed);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
