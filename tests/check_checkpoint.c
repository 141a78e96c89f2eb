/* Checkpoint and optimizer-state files: round trips, and every kind of
 * damaged or foreign file rejected with its own message and without
 * touching the caller's buffers; atomic file replacement. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "tests/testutil.h"

#define RUN_A "0123456789abcdef0123456789abcdef" \
	"0123456789abcdef0123456789abcdef"
#define RUN_B "fedcba9876543210fedcba9876543210" \
	"fedcba9876543210fedcba9876543210"

/* A small table with a gap between tensors, so offsets are honoured. */
static kn_tensor table[3];
static const int ntable = 3;
static size_t nbuf;             /* floats in the parameter buffer */
static float *params;
static pr_ckpt_meta meta;
static char *ckpt;
static size_t ckpt_len;
static char tmpdir[128];

static void
set_tensor(kn_tensor *t, const char *name, int ndim, const int64_t *shape,
    size_t offset)
{
	int d;

	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = ndim;
	for (d = 0; d < ndim; d++)
		t->shape[d] = shape[d];
	t->offset = offset;
}

static void
setup(void)
{
	static const int64_t s0[3] = { 2, 3, 4 }, s1[1] = { 5 },
	    s2[2] = { 3, 2 };
	char err[PR_ERR_LEN];
	size_t i;

	set_tensor(&table[0], "qkv_w", 3, s0, 0);
	set_tensor(&table[1], "ln1_b", 1, s1, 24);
	set_tensor(&table[2], "head_w", 2, s2, 32);      /* gap of 3 */
	nbuf = 38;
	params = malloc(nbuf * sizeof(float));
	ck_assert_ptr_nonnull(params);
	for (i = 0; i < nbuf; i++)
		params[i] = (float)i * 0.37f - 3.0f + (float)i / 7.0f;
	params[5] = -0.0f;
	params[6] = 1e-40f;     /* subnormal */
	params[7] = 3.0e38f;
	memset(&meta, 0, sizeof(meta));
	strcpy(meta.run_id, RUN_A);
	meta.block = 2;
	strcpy(meta.kind, "block");
	meta.step = 1000;
	meta.round = 12;
	ck_assert_int_eq(pr_ckpt_encode(&meta, table, ntable, params, &ckpt,
	    &ckpt_len, err), 0);
	snprintf(tmpdir, sizeof(tmpdir), "%s/check_ckpt.XXXXXX",
	    getenv("TMPDIR") != NULL && strlen(getenv("TMPDIR")) < 100 ?
	    getenv("TMPDIR") : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void
teardown(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char path[512];

	while (d != NULL && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
		if (remove(path) != 0)
			rmdir(path);
	}
	if (d != NULL)
		closedir(d);
	rmdir(tmpdir);
	free(params);
	free(ckpt);
}

static pr_ckpt_meta
expect_all(void)
{
	pr_ckpt_meta e = meta;

	return e;
}

/* Decodes and requires failure with want in the message, with neither
 * the output parameters nor the output metadata touched. */
static void
reject(const char *buf, size_t len, const pr_ckpt_meta *expect,
    const kn_tensor *tensors, int ntensors, const char *want)
{
	char err[PR_ERR_LEN] = "";
	float *out = malloc(nbuf * sizeof(float));
	pr_ckpt_meta got;

	memset(out, TU_SENTINEL, nbuf * sizeof(float));
	memset(&got, TU_SENTINEL, sizeof(got));
	ck_assert_int_lt(pr_ckpt_decode(buf, len, expect, tensors, ntensors,
	    out, &got, err), 0);
	tu_assert_refused(err, want);
	tu_assert_untouched(out, nbuf * sizeof(float));
	tu_assert_untouched(&got, sizeof(got));
	free(out);
}

START_TEST(test_round_trip)
{
	char err[PR_ERR_LEN], path[256], *file;
	float *out = calloc(nbuf, sizeof(float));
	size_t file_len, i;
	pr_ckpt_meta got, expect = expect_all(), peeked;

	snprintf(path, sizeof(path), "%s/block2.ckpt", tmpdir);
	ck_assert_int_eq(pr_ckpt_write_file(path, ckpt, ckpt_len, err), 0);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 20, &file, &file_len,
	    err), 0);
	ck_assert_uint_eq(file_len, ckpt_len);
	ck_assert_mem_eq(file, ckpt, ckpt_len);
	ck_assert_int_eq(pr_ckpt_decode(file, file_len, &expect, table,
	    ntable, out, &got, err), 0);
	for (i = 0; i < (size_t)ntable; i++)
		ck_assert_mem_eq(out + table[i].offset,
		    params + table[i].offset,
		    kn_tensor_numel(&table[i]) * sizeof(float));
	ck_assert_float_eq(out[29], 0.0f);      /* the gap is left alone */
	ck_assert_str_eq(got.run_id, RUN_A);
	ck_assert_int_eq(got.block, 2);
	ck_assert_str_eq(got.kind, "block");
	ck_assert_int_eq(got.step, 1000);
	ck_assert_int_eq(got.round, 12);
	ck_assert_int_eq(pr_ckpt_peek(file, file_len, &peeked, err), 0);
	ck_assert_mem_eq(&peeked, &got, sizeof(got));
	free(file);
	free(out);
}
END_TEST

START_TEST(test_wildcards)
{
	char err[PR_ERR_LEN];
	pr_ckpt_meta any, got;

	memset(&any, 0, sizeof(any));
	any.block = -1;
	ck_assert_int_eq(pr_ckpt_decode(ckpt, ckpt_len, &any, NULL, 0, NULL,
	    &got, err), 0);
	ck_assert_int_eq(got.block, 2);
	ck_assert_int_eq(pr_ckpt_decode(ckpt, ckpt_len, NULL, NULL, 0, NULL,
	    NULL, err), 0);
	/* parameters cannot be placed without a table */
	ck_assert_int_eq(pr_ckpt_decode(ckpt, ckpt_len, NULL, NULL, 0, params,
	    NULL, err), KN_EINVAL);
}
END_TEST

START_TEST(test_deterministic)
{
	char err[PR_ERR_LEN], h1[65], h2[65], *again;
	size_t len;

	ck_assert_int_eq(pr_ckpt_sha256_hex("abc", 3, h1, err), 0);
	ck_assert_str_eq(h1, "ba7816bf8f01cfea414140de5dae2223"
	    "b00361a396177a9cb410ff61f20015ad");
	ck_assert_int_eq(pr_ckpt_encode(&meta, table, ntable, params, &again,
	    &len, err), 0);
	ck_assert_int_eq(pr_ckpt_sha256_hex(ckpt, ckpt_len, h1, err), 0);
	ck_assert_int_eq(pr_ckpt_sha256_hex(again, len, h2, err), 0);
	ck_assert_str_eq(h1, h2);
	free(again);
	params[0] += 1.0f;
	ck_assert_int_eq(pr_ckpt_encode(&meta, table, ntable, params, &again,
	    &len, err), 0);
	ck_assert_int_eq(pr_ckpt_sha256_hex(again, len, h2, err), 0);
	ck_assert_str_ne(h1, h2);
	free(again);
}
END_TEST

START_TEST(test_model_round_trip)
{
	/* big enough (about 100 KiB) for the payload to take a bin32 */
	kn_model_shape s = { 32, 2, 1, 8, 0, 0 };
	kn_model *a = NULL, *b = NULL;
	const kn_tensor *t;
	char err[PR_ERR_LEN], *buf;
	float *pa, *pb;
	size_t np, len;
	int count;

	ck_assert_int_eq(kn_model_create(&a, &s, kn_cpu_backend(), 1, err), 0);
	ck_assert_int_eq(kn_model_create(&b, &s, kn_cpu_backend(), 1, err), 0);
	kn_model_init(a, 3);
	kn_model_init(b, 4);
	np = kn_model_num_params(a);
	pa = malloc(np * sizeof(float));
	pb = malloc(np * sizeof(float));
	kn_model_get_params(a, pa);
	t = kn_model_tensors(a, &count);
	ck_assert_int_eq(pr_ckpt_encode(&meta, t, count, pa, &buf, &len, err),
	    0);
	kn_model_get_params(b, pb);
	ck_assert_int_eq((unsigned char)buf[tu_find(buf, len, "payload") + 7],
	    0xc6);
	ck_assert_int_eq(pr_ckpt_decode(buf, len, &meta, kn_model_tensors(b,
	    &count), count, pb, NULL, err), 0);
	ck_assert_int_eq(kn_model_set_params(b, pb, err), 0);
	memset(pb, 0, np * sizeof(float));
	kn_model_get_params(b, pb);
	ck_assert_mem_eq(pa, pb, np * sizeof(float));
	free(buf);
	free(pa);
	free(pb);
	kn_model_free(a);
	kn_model_free(b);
}
END_TEST

START_TEST(test_bad_magic)
{
	char *b = tu_dup_buf(ckpt, ckpt_len, 0);
	pr_ckpt_meta e = expect_all();

	b[tu_find(b, ckpt_len, "ShardMeter checkpoint") + 3] = 'X';
	reject(b, ckpt_len, &e, table, ntable, "not a ShardMeter checkpoint");
	free(b);
}
END_TEST

START_TEST(test_wrong_version)
{
	char *b = tu_dup_buf(ckpt, ckpt_len, 0);
	size_t at = tu_find(b, ckpt_len, "version") + strlen("version");
	pr_ckpt_meta e = expect_all();

	ck_assert_int_eq(b[at], 1);     /* positive fixint */
	b[at] = 2;
	reject(b, ckpt_len, &e, table, ntable, "checkpoint format version 2; "
	    "this build reads version 1: a newer ShardMeter");
	b[at] = 0;
	reject(b, ckpt_len, &e, table, ntable, "checkpoint format version 0; "
	    "this build reads version 1");
	b[at] = (char)0xff;              /* -1 */
	reject(b, ckpt_len, &e, table, ntable, "checkpoint format version -1");
	/* a newer version is reported even if other fields changed */
	b[at] = 2;
	b[tu_find(b, ckpt_len, "round")] = 'R';
	reject(b, ckpt_len, &e, table, ntable, "format version 2");
	free(b);
}
END_TEST

START_TEST(test_wrong_run_block_kind)
{
	pr_ckpt_meta e = expect_all();

	strcpy(e.run_id, RUN_B);
	reject(ckpt, ckpt_len, &e, table, ntable,
	    "checkpoint belongs to run " RUN_A ", not " RUN_B);
	e = expect_all();
	e.block = 3;
	reject(ckpt, ckpt_len, &e, table, ntable,
	    "checkpoint is for block 2, not block 3");
	e = expect_all();
	strcpy(e.kind, "e2e");
	reject(ckpt, ckpt_len, &e, table, ntable,
	    "checkpoint is of kind 'block', not 'e2e'");
}
END_TEST

START_TEST(test_wrong_table)
{
	kn_tensor other[3];
	pr_ckpt_meta e = expect_all();

	memcpy(other, table, sizeof(other));
	other[0].shape[1] = 7;
	reject(ckpt, ckpt_len, &e, other, ntable,
	    "tensor qkv_w has shape (2, 3, 4), expected (2, 7, 4)");
	memcpy(other, table, sizeof(other));
	other[2].ndim = 3;
	other[2].shape[2] = 1;
	reject(ckpt, ckpt_len, &e, other, ntable,
	    "tensor head_w has shape (3, 2), expected (3, 2, 1)");
	memcpy(other, table, sizeof(other));
	strcpy(other[1].name, "ln2_b");
	reject(ckpt, ckpt_len, &e, other, ntable,
	    "tensor 1 is named ln1_b, expected ln2_b");
	reject(ckpt, ckpt_len, &e, table, 2, "checkpoint has 3 tensors, "
	    "expected 2");
}
END_TEST

START_TEST(test_truncated)
{
	pr_ckpt_meta e = expect_all(), got;
	char err[PR_ERR_LEN];
	size_t n;

	for (n = 0; n < ckpt_len; n++) {
		/* a fresh allocation of exactly n bytes, so the sanitizer
		 * sees any read past the end */
		char *b = malloc(n ? n : 1);

		memcpy(b, ckpt, n);
		reject(b, n, &e, table, ntable, "checkpoint is truncated");
		ck_assert_int_lt(pr_ckpt_peek(b, n, &got, err), 0);
		ck_assert_ptr_nonnull(strstr(err, "checkpoint is truncated"));
		free(b);
	}
}
END_TEST

START_TEST(test_flipped_payload)
{
	char *b = tu_dup_buf(ckpt, ckpt_len, 0);
	size_t size, at = tu_payload_at(b, ckpt_len, &size), i;
	pr_ckpt_meta e = expect_all();

	ck_assert_uint_eq(size, 4 * (24 + 5 + 6));
	for (i = 0; i < size; i += 13) {
		b[at + i] ^= 0x10;
		reject(b, ckpt_len, &e, table, ntable,
		    "payload hash mismatch: the file is corrupt");
		b[at + i] ^= 0x10;
	}
	/* peek reads the metadata only, and does not hash */
	ck_assert_int_eq(pr_ckpt_peek(b, ckpt_len, NULL, NULL), 0);
	/* and a flipped hash byte */
	b[ckpt_len - 1] ^= 1;
	reject(b, ckpt_len, &e, table, ntable, "payload hash mismatch");
	free(b);
}
END_TEST

START_TEST(test_trailing)
{
	char *b = tu_dup_buf(ckpt, ckpt_len, 3);
	pr_ckpt_meta e = expect_all(), got;
	char err[PR_ERR_LEN];

	memcpy(b + ckpt_len, "\xc0\x00\x01", 3);
	reject(b, ckpt_len + 1, &e, table, ntable,
	    "checkpoint has 1 trailing bytes after its end");
	reject(b, ckpt_len + 3, &e, table, ntable, "3 trailing bytes");
	ck_assert_int_lt(pr_ckpt_peek(b, ckpt_len + 3, &got, err), 0);
	/* a second whole checkpoint is trailing bytes too */
	free(b);
	b = tu_dup_buf(ckpt, ckpt_len, ckpt_len);
	memcpy(b + ckpt_len, ckpt, ckpt_len);
	reject(b, 2 * ckpt_len, &e, table, ntable, "trailing bytes");
	free(b);
}
END_TEST

START_TEST(test_nonfinite)
{
	static const float bad[3] = { NAN, INFINITY, -INFINITY };
	char *b = tu_dup_buf(ckpt, ckpt_len, 0);
	size_t size, at = tu_payload_at(b, ckpt_len, &size);
	pr_ckpt_meta e = expect_all();
	char err[PR_ERR_LEN], *out;
	size_t len;
	int k;

	for (k = 0; k < 3; k++) {
		memcpy(b, ckpt, ckpt_len);
		/* element 2 of ln1_b, which follows qkv_w's 24 floats */
		memcpy(b + at + 4 * (24 + 2), &bad[k], 4);
		tu_rehash(b, ckpt_len);
		reject(b, ckpt_len, &e, table, ntable,
		    "tensor ln1_b holds a non-finite value at index 2");
	}
	/* nor will one be written */
	params[table[2].offset + 4] = NAN;
	ck_assert_int_eq(pr_ckpt_encode(&meta, table, ntable, params, &out,
	    &len, err), KN_ENUM);
	ck_assert_ptr_null(out);
	ck_assert_str_eq(err, "tensor head_w holds a non-finite value at "
	    "index 4");
	(void)size;
	free(b);
}
END_TEST

START_TEST(test_garbage)
{
	pr_ckpt_meta e = expect_all();
	unsigned char g[512];
	uint64_t x = 88172645463325252ull;
	size_t n, i;
	int seed;

	reject("hello, world", 12, &e, table, ntable,
	    "not a ShardMeter checkpoint");
	reject("\x00", 1, &e, table, ntable, "not a ShardMeter checkpoint");
	/* an empty map, and a map whose magic is an integer */
	reject("\x80", 1, &e, table, ntable, "not a ShardMeter checkpoint");
	reject("\x81\xa5magic\x01", 8, &e, table, ntable,
	    "not a ShardMeter checkpoint");
	/* a reserved byte */
	reject("\x81\xa5magic\xc1", 8, &e, table, ntable, "malformed msgpack");
	/* counts that ask for far more than the file holds */
	reject("\x81\xa1" "a" "\xdd\xff\xff\xff\xff", 8, &e, table, ntable,
	    "truncated");
	reject("\xdf\xff\xff\xff\xff", 5, &e, table, ntable, "truncated");
	reject("\x81\xa1" "a" "\xc6\xff\xff\xff\xf0", 8, &e, table, ntable,
	    "truncated");
	/* random bytes, some of them opened as a map */
	for (seed = 0; seed < 2000; seed++) {
		n = 1 + (size_t)seed % sizeof(g);
		for (i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			g[i] = (unsigned char)x;
		}
		if (seed % 2)
			g[0] = (unsigned char)(0x80 | (seed & 15));
		reject((const char *)g, n, &e, table, ntable, NULL);
	}
}
END_TEST

/* Every byte replaced by values that change msgpack's reading of it:
 * the decoder must never crash, and whatever it rejects must leave the
 * output alone. */
START_TEST(test_mutations)
{
	static const unsigned char with[] = { 0x00, 0xff, 0xc1, 0x80, 0xdd,
	    0xc6 };
	char *b = tu_dup_buf(ckpt, ckpt_len, 0), err[PR_ERR_LEN];
	float *out = malloc(nbuf * sizeof(float));
	pr_ckpt_meta e = expect_all();
	size_t i, k;

	for (i = 0; i < ckpt_len; i++)
		for (k = 0; k < sizeof(with) + 2; k++) {
			memcpy(b, ckpt, ckpt_len);
			b[i] = k < sizeof(with) ? (char)with[k] :
			    (char)(b[i] + (k == sizeof(with) ? 1 : -1));
			if (memcmp(b, ckpt, ckpt_len) == 0)
				continue;
			if (pr_ckpt_decode(b, ckpt_len, &e, table, ntable, out,
			    NULL, err) == 0)
				continue;       /* e.g. another step count */
			reject(b, ckpt_len, &e, table, ntable, NULL);
		}
	free(out);
	free(b);
}
END_TEST

START_TEST(test_too_many_objects)
{
	pr_ckpt_meta e = expect_all();
	size_t n = 40000, i;
	unsigned char *b = malloc(n + 16);

	/* { "a": [nil x 40000] } */
	memcpy(b, "\x81\xa1" "a" "\xdc\x9c\x40", 6);
	for (i = 0; i < n; i++)
		b[6 + i] = 0xc0;
	reject((const char *)b, 6 + n, &e, table, ntable,
	    "more than");
	/* twelve nested arrays */
	memcpy(b, "\x81\xa1" "a", 3);
	for (i = 0; i < 12; i++)
		b[3 + i] = 0x91;
	b[15] = 0xc0;
	reject((const char *)b, 16, &e, table, ntable, "levels");
	free(b);
}
END_TEST

START_TEST(test_unknown_field)
{
	char *b = tu_dup_buf(ckpt, ckpt_len, 0);
	pr_ckpt_meta e = expect_all();

	b[tu_find(b, ckpt_len, "round") + 4] = 'X';
	reject(b, ckpt_len, &e, table, ntable,
	    "checkpoint has an unknown field 'rounX'");
	memcpy(b, ckpt, ckpt_len);
	memcpy(b + tu_find(b, ckpt_len, "round"), "block", 5);
	reject(b, ckpt_len, &e, table, ntable,
	    "checkpoint has field 'block' twice");
	memcpy(b, ckpt, ckpt_len);
	memcpy(b + tu_find(b, ckpt_len, "dtype"), "dtypx", 5);
	reject(b, ckpt_len, &e, table, ntable,
	    "tensor 0 of the table has an unknown field 'dtypx'");
	memcpy(b, ckpt, ckpt_len);
	memcpy(b + tu_find(b, ckpt_len, "f32"), "f16", 3);
	reject(b, ckpt_len, &e, table, ntable,
	    "tensor qkv_w has dtype 'f16'; this build reads only f32");
	free(b);
}
END_TEST

START_TEST(test_bad_meta_refused)
{
	char err[PR_ERR_LEN], *out;
	pr_ckpt_meta m = meta;
	size_t len;

	m.run_id[3] = 'G';
	ck_assert_int_eq(pr_ckpt_encode(&m, table, ntable, params, &out, &len,
	    err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "64 lowercase hex"));
	m = meta;
	strcpy(m.kind, "experts");
	ck_assert_int_eq(pr_ckpt_encode(&m, table, ntable, params, &out, &len,
	    err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "kind must be"));
	/* SOMA's kinds are known: an expert's file round-trips */
	m = meta;
	strcpy(m.kind, "expert");
	m.block = 7;
	ck_assert_int_eq(pr_ckpt_encode(&m, table, ntable, params, &out, &len,
	    err), 0);
	{
		pr_ckpt_meta got;

		ck_assert_int_eq(pr_ckpt_decode(out, len, &m, NULL, 0, NULL,
		    &got, err), 0);
		ck_assert_str_eq(got.kind, "expert");
		ck_assert_int_eq(got.block, 7);
	}
	free(out);
	m = meta;
	m.step = -1;
	ck_assert_int_eq(pr_ckpt_encode(&m, table, ntable, params, &out, &len,
	    err), KN_EINVAL);
	ck_assert_int_eq(pr_ckpt_encode(&meta, table, 0, params, &out, &len,
	    err), KN_EINVAL);
}
END_TEST

START_TEST(test_optim)
{
	size_t n = 100, i, len;
	float *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
	float *m2 = malloc(n * sizeof(float)), *v2 = malloc(n * sizeof(float));
	char err[PR_ERR_LEN], *buf, *b, path[256], *file;
	pr_ckpt_meta got, e = expect_all();
	float neg = -1.0f;
	int t = -1;

	for (i = 0; i < n; i++) {
		m[i] = sinf((float)i) * 1e-3f;
		v[i] = (float)i * 1e-7f;
	}
	ck_assert_int_eq(pr_ckpt_encode_optim(&meta, n, m, v, 777, &buf, &len,
	    err), 0);
	snprintf(path, sizeof(path), "%s/block2.optim", tmpdir);
	ck_assert_int_eq(pr_ckpt_write_file(path, buf, len, err), 0);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 20, &file, &len, err),
	    0);
	ck_assert_int_eq(pr_ckpt_decode_optim(file, len, &e, n, m2, v2, &t,
	    &got, err), 0);
	ck_assert_mem_eq(m, m2, n * sizeof(float));
	ck_assert_mem_eq(v, v2, n * sizeof(float));
	ck_assert_int_eq(t, 777);
	ck_assert_int_eq(got.step, 1000);

	ck_assert_int_eq(pr_ckpt_decode_optim(file, len, &e, n + 1, m2, v2,
	    &t, &got, err), KN_EINVAL);
	ck_assert_str_eq(err, "optimizer state holds 100 parameters, "
	    "expected 101");
	e.block = 1;
	ck_assert_int_eq(pr_ckpt_decode_optim(file, len, &e, n, m2, v2, &t,
	    &got, err), KN_EINVAL);
	ck_assert_str_eq(err, "optimizer state is for block 2, not block 1");
	e = expect_all();
	/* either file refuses the other, naming what it is */
	ck_assert_int_eq(pr_ckpt_decode_optim(ckpt, ckpt_len, &e, n, m2, v2,
	    &t, &got, err), KN_EINVAL);
	ck_assert_str_eq(err, "not a ShardMeter optimizer-state file: this is "
	    "a ShardMeter checkpoint file");
	reject(file, len, &e, table, ntable, "not a ShardMeter checkpoint: "
	    "this is a ShardMeter optimizer state file");
	for (i = 0; i < len; i++) {
		b = malloc(i ? i : 1);
		memcpy(b, file, i);
		ck_assert_int_eq(pr_ckpt_decode_optim(b, i, &e, n, m2, v2, &t,
		    &got, err), KN_EINVAL);
		ck_assert_ptr_nonnull(strstr(err,
		    "optimizer state is truncated"));
		free(b);
	}
	b = tu_dup_buf(file, len, 0);
	b[len / 2] ^= 4;
	ck_assert_int_eq(pr_ckpt_decode_optim(b, len, &e, n, m2, v2, &t, &got,
	    err), KN_EINVAL);
	ck_assert_str_eq(err, "payload hash mismatch: the file is corrupt");
	/* a negative second moment with a correct hash */
	memcpy(b, file, len);
	memcpy(b + tu_payload_at(b, len, &i) + 4 * (n + 9), &neg, 4);
	tu_rehash(b, len);
	ck_assert_int_eq(pr_ckpt_decode_optim(b, len, &e, n, m2, v2, &t, &got,
	    err), KN_ENUM);
	ck_assert_str_eq(err, "optimizer state v holds a negative value at "
	    "index 9");
	free(b);
	free(buf);
	v[3] = -1e-9f;
	ck_assert_int_eq(pr_ckpt_encode_optim(&meta, n, m, v, 7, &buf, &len,
	    err), KN_ENUM);
	free(file);
	free(m);
	free(v);
	free(m2);
	free(v2);
}
END_TEST

static int
count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

START_TEST(test_atomic_write)
{
	char err[PR_ERR_LEN], path[256], tmp[400], sub[300], *file;
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/ckpt", tmpdir);
	ck_assert_int_eq(pr_ckpt_write_file(path, "first", 5, err), 0);
	ck_assert_int_eq(count_entries(tmpdir), 1);
	/* a temporary file a crash left under our pid does not block */
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	f = fopen(tmp, "w");
	fputs("stale stale stale", f);
	fclose(f);
	ck_assert_int_eq(pr_ckpt_write_file(path, "second", 6, err), 0);
	ck_assert_int_eq(count_entries(tmpdir), 1);
	ck_assert_int_eq(pr_ckpt_read_file(path, 100, &file, &len, err), 0);
	ck_assert_uint_eq(len, 6);
	ck_assert_mem_eq(file, "second", 6);
	free(file);
	ck_assert_int_eq(pr_ckpt_write_file(path, "", 0, err), 0);
	ck_assert_int_eq(pr_ckpt_read_file(path, 100, &file, &len, err), 0);
	ck_assert_uint_eq(len, 0);
	free(file);

	/* a name without a folder is in the current one */
	{
		char cwd[512];

		ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
		ck_assert_int_eq(chdir(tmpdir), 0);
		ck_assert_int_eq(pr_ckpt_write_file("rel", "r", 1, err), 0);
		ck_assert_int_eq(chdir(cwd), 0);
		snprintf(tmp, sizeof(tmp), "%s/rel", tmpdir);
		ck_assert_int_eq(unlink(tmp), 0);
	}

	/* a rename that fails leaves the target as it was, and no litter */
	snprintf(sub, sizeof(sub), "%s/dir", tmpdir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	snprintf(tmp, sizeof(tmp), "%s/x", sub);
	f = fopen(tmp, "w");
	fclose(f);
	ck_assert_int_eq(pr_ckpt_write_file(sub, "third", 5, err), KN_EIO);
	ck_assert_ptr_nonnull(strstr(err, "cannot rename"));
	ck_assert_int_eq(count_entries(tmpdir), 2);
	ck_assert_int_eq(count_entries(sub), 1);
	ck_assert_int_eq(unlink(tmp), 0);
	ck_assert_int_eq(rmdir(sub), 0);
	/* nor can a file go where there is no folder */
	snprintf(tmp, sizeof(tmp), "%s/none/ckpt", tmpdir);
	ck_assert_int_eq(pr_ckpt_write_file(tmp, "x", 1, err), KN_EIO);
	ck_assert_ptr_nonnull(strstr(err, "cannot create"));
}
END_TEST

START_TEST(test_bounded_read)
{
	char err[PR_ERR_LEN], path[256], *file = (char *)1;
	size_t len = 1;

	snprintf(path, sizeof(path), "%s/big", tmpdir);
	ck_assert_int_eq(pr_ckpt_write_file(path, ckpt, ckpt_len, err), 0);
	ck_assert_int_eq(pr_ckpt_read_file(path, ckpt_len - 1, &file, &len,
	    err), KN_EINVAL);
	ck_assert_ptr_null(file);
	ck_assert_uint_eq(len, 0);
	ck_assert_ptr_nonnull(strstr(err, "more than the"));
	ck_assert_int_eq(pr_ckpt_read_file(path, ckpt_len, &file, &len, err),
	    0);
	free(file);
	ck_assert_int_eq(pr_ckpt_read_file(tmpdir, 1 << 20, &file, &len, err),
	    KN_EIO);
	ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
	snprintf(path, sizeof(path), "%s/missing", tmpdir);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 20, &file, &len, err),
	    KN_EIO);
	ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("checkpoint");
	TCase *tc = tcase_create("checkpoint");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_wildcards);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_model_round_trip);
	tcase_add_test(tc, test_bad_magic);
	tcase_add_test(tc, test_wrong_version);
	tcase_add_test(tc, test_wrong_run_block_kind);
	tcase_add_test(tc, test_wrong_table);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_flipped_payload);
	tcase_add_test(tc, test_trailing);
	tcase_add_test(tc, test_nonfinite);
	tcase_add_test(tc, test_garbage);
	tcase_add_test(tc, test_mutations);
	tcase_add_test(tc, test_too_many_objects);
	tcase_add_test(tc, test_unknown_field);
	tcase_add_test(tc, test_bad_meta_refused);
	tcase_add_test(tc, test_optim);
	tcase_add_test(tc, test_atomic_write);
	tcase_add_test(tc, test_bounded_read);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
