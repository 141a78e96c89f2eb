/* Pipeline frames (proto/pipeline.c) and the pipeline host list
 * (daemon/pipeline/pipeline_hosts.c): round trips, the hosts' peer ids and the
 * client lines, and every kind of bad frame or list refused with its own
 * message. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/identity.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/error.h"
#include "proto/pipeline.h"
#include "proto/spec.h"
#include "tests/testutil.h"

/* Encodes f and decodes the body back into g. */
static int
round_trip(const pl_frame *f, pl_frame *g, char *err)
{
	char *buf;
	size_t len;
	int rc;

	ck_assert_int_eq(pl_frame_encode(f, &buf, &len, err), 0);
	ck_assert_uint_eq(pl_frame_length((unsigned char *)buf), len - 4);
	rc = pl_frame_decode(buf + 4, len - 4, g, err);
	free(buf);
	return rc;
}

START_TEST(test_round_trip)
{
	unsigned char seq[8] = "ab\0\0\0\0\0\0", mask[8] = { 0, 0, 1, 1, 1, 1,
	    1, 1 };
	float hidden[6] = { 1.5f, -2, 0, 3, 4, 5 };
	pl_frame f = { .type = PL_BT, .id = 77, .steps = 64,
	    .temperature = 0.8, .seed = 1ULL << 60, .fixed = 2, .end = 6,
	    .block = 3, .data = seq, .data_len = 8, .mask = mask, .mask_len = 8,
	    .compute_us = 1234, .hops = 2 }, g;
	char err[KN_ERR_LEN];

	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_int_eq(g.type, PL_BT);
	ck_assert_uint_eq(g.id, 77);
	ck_assert_int_eq(g.steps, 64);
	ck_assert(g.temperature == 0.8);
	ck_assert_uint_eq(g.seed, 1ULL << 60);
	ck_assert_int_eq(g.block, 3);
	ck_assert_int_eq(g.end, 6);
	ck_assert_mem_eq(g.data, seq, 8);
	ck_assert_mem_eq(g.mask, mask, 8);
	ck_assert_uint_eq(g.compute_us, 1234);
	pl_frame_clear(&g);

	f = (pl_frame){ .type = PL_AR, .id = 5, .temperature = 1, .seed = 9,
	    .fixed = 3, .end = 10, .pos = 3, .count = 2, .width = 3,
	    .data = (unsigned char *)hidden, .data_len = sizeof(hidden) };
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_int_eq(g.count, 2);
	ck_assert_mem_eq(g.data, hidden, sizeof(hidden));
	pl_frame_clear(&g);

	f = (pl_frame){ .type = PL_GEN, .id = 1, .mode = PL_MODE_AR,
	    .length = 16, .steps = 8, .temperature = 0, .seed = 3,
	    .data = (unsigned char *)"hi", .data_len = 2 };
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_int_eq(g.mode, PL_MODE_AR);
	ck_assert_uint_eq(g.data_len, 2);
	pl_frame_clear(&g);

	f = (pl_frame){ .type = PL_ERR, .id = 4 };
	snprintf(f.message, sizeof(f.message), "host \x01 down");
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_str_eq(g.message, "host ? down");
	f = (pl_frame){ .type = PL_END, .id = 4 };
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_int_eq(g.type, PL_END);
}
END_TEST

/* f encoded, its body (after the header) in *body; the body's length. */
static size_t
encode_body(const pl_frame *f, char **buf, char **body)
{
	char err[KN_ERR_LEN];
	size_t len;

	ck_assert_int_eq(pl_frame_encode(f, buf, &len, err), 0);
	*body = *buf + PL_HEADER;
	return len - PL_HEADER;
}

/* The body of f (a fixmap of under 15 keys) with "stream" and the
 * msgpack byte v added: whether it decodes, and err. */
static int
decode_with_stream(const pl_frame *f, unsigned char v, char *err)
{
	char *buf, *body, grown[256];
	size_t n = encode_body(f, &buf, &body);
	pl_frame g;
	int rc;

	ck_assert((unsigned char)body[0] >= 0x80 &&
	    (unsigned char)body[0] < 0x8f && n + 8 <= sizeof(grown));
	memcpy(grown, body, n);
	grown[0]++;
	memcpy(grown + n, "\xa6stream", 7);
	grown[n + 7] = (char)v;
	free(buf);
	rc = pl_frame_decode(grown, n + 8, &g, err);
	pl_frame_clear(&g);
	return rc;
}

/* The flag of a streamed bt frame and the part frame of a host: round
 * trips, the flag's bytes only where it is set, and their strictness. */
START_TEST(test_stream_and_part)
{
	unsigned char seq[6] = "ab\0cd", mask[6] = { 0, 0, 1, 0, 0, 1 };
	pl_frame f = { .type = PL_BT, .id = 9, .steps = 8, .temperature = 0.5,
	    .seed = 4, .fixed = 2, .end = 5, .block = 2, .data = seq,
	    .data_len = 6, .mask = mask, .mask_len = 6, .compute_us = 70,
	    .hops = 1 }, g;
	char err[KN_ERR_LEN], *plain, *streamed, *pb, *sb;
	size_t pn, sn;

	/* unset, not a byte of it; set, the key and true at the end */
	pn = encode_body(&f, &plain, &pb);
	ck_assert_ptr_null(memmem(pb, pn, "stream", 6));
	f.stream = 1;
	sn = encode_body(&f, &streamed, &sb);
	ck_assert_uint_eq(sn, pn + 8);
	ck_assert_mem_eq(sb + 1, pb + 1, pn - 1);
	ck_assert_mem_eq(sb + pn, "\xa6stream\xc3", 8);
	ck_assert_int_eq(pl_frame_decode(sb, sn, &g, err), 0);
	ck_assert_int_eq(g.stream, 1);
	ck_assert_int_eq(g.block, 2);
	pl_frame_clear(&g);
	ck_assert_int_eq(pl_frame_decode(pb, pn, &g, err), 0);
	ck_assert_int_eq(g.stream, 0);
	pl_frame_clear(&g);
	free(plain);
	free(streamed);
	/* false and 1 are not its encoding; no other type has it */
	f.stream = 0;
	ck_assert_int_ne(decode_with_stream(&f, 0xc2, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "'stream' must be true"));
	ck_assert_int_ne(decode_with_stream(&f, 0x01, err), 0);
	ck_assert_int_eq(decode_with_stream(&f, 0xc3, err), 0);
	f = (pl_frame){ .type = PL_PART, .id = 9, .host = 2, .block = 1,
	    .data = seq, .data_len = 6, .mask = mask, .mask_len = 6 };
	ck_assert_int_ne(decode_with_stream(&f, 0xc3, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "unknown field 'stream'"));
	f.stream = 1;   /* the encoder leaves it out of other types */
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_int_eq(g.type, PL_PART);
	ck_assert_int_eq(g.stream, 0);
	ck_assert_int_eq(g.host, 2);
	ck_assert_int_eq(g.block, 1);
	ck_assert_mem_eq(g.data, seq, 6);
	ck_assert_mem_eq(g.mask, mask, 6);
	pl_frame_clear(&g);
	/* a host line from 1, a block from 1, one flag a symbol, 0 or 1 */
	f.host = 0;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "host line"));
	f.host = 2;
	f.block = 0;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	f.block = 1;
	f.mask_len = 5;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	f.mask_len = 6;
	mask[1] = 2;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "mask flags"));
	f.data_len = f.mask_len = 0;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
}
END_TEST


/* Logprobs: the keys only where a request asks (a frame without them is
 * byte for byte the one before, its keys after the rest), round trips
 * on every type that carries them, and each figure and length checked. */
START_TEST(test_logprobs_keys)
{
	unsigned char seq[6] = "ab\0cd", mask[6] = { 0, 0, 1, 0, 0, 1 };
	/* room for the one byte too many that a case below sends */
	unsigned char lpb[8] = "xyzuvw";
	float lp[12] = { -0.5f, -0.25f, 0, 0, 0, 0, -1.0f, -0.5f, -2.0f, -0.125f,
	    0, 0 };
	pl_frame f = { .type = PL_BT, .id = 9, .steps = 8, .temperature = 0.5,
	    .seed = 4, .fixed = 2, .end = 5, .block = 2, .data = seq,
	    .data_len = 6, .mask = mask, .mask_len = 6, .compute_us = 70,
	    .hops = 1 }, g;
	static const pl_type carriers[] = { PL_BT, PL_PART, PL_OUT, PL_TOK };
	char err[KN_ERR_LEN], *plain, *with, *pb, *wb;
	size_t pn, wn, i;

	pn = encode_body(&f, &plain, &pb);
	ck_assert_ptr_null(memmem(pb, pn, "lpk", 3));
	ck_assert_ptr_null(memmem(pb, pn, "\xa2lp", 3));
	f.lpk = 2;
	f.lp = lp;
	f.lp_len = 12;
	f.lpb = lpb;
	f.lpb_len = 6;
	wn = encode_body(&f, &with, &wb);
	ck_assert_uint_gt(wn, pn);
	/* the same map, three keys more at its end (14 keys a fixmap, 17
	 * a map 16) */
	ck_assert_int_eq((unsigned char)pb[0], 0x80 + 14);
	ck_assert_mem_eq(wb, "\xde\x00\x11", 3);
	ck_assert_mem_eq(wb + 3, pb + 1, pn - 1);
	ck_assert_int_eq(pl_frame_decode(wb, wn, &g, err), 0);
	ck_assert_int_eq(g.lpk, 2);
	ck_assert_uint_eq(g.lp_len, 12);
	ck_assert_mem_eq(g.lp, lp, sizeof(lp));
	ck_assert_mem_eq(g.lpb, lpb, 6);
	pl_frame_clear(&g);
	ck_assert_int_eq(pl_frame_decode(pb, pn, &g, err), 0);
	ck_assert_int_eq(g.lpk, 0);
	ck_assert_ptr_null(g.lp);
	pl_frame_clear(&g);
	free(plain);
	free(with);
	for (i = 0; i < sizeof(carriers) / sizeof(carriers[0]); i++) {
		pl_frame h = f;

		h.type = carriers[i];
		h.host = 1;
		h.traversals = 1;
		if (h.type == PL_TOK) {
			h.pos = 3;
			h.byte = 'c';
			h.lp_len = 2;
			h.lpb_len = 1;
		}
		ck_assert_msg(round_trip(&h, &g, err) == 0, "%s", err);
		ck_assert_int_eq(g.lpk, 2);
		ck_assert_mem_eq(g.lp, lp, h.lp_len * sizeof(float));
		pl_frame_clear(&g);
		/* one figure short, one byte more */
		h.lp_len--;
		ck_assert_int_ne(round_trip(&h, &g, err), 0);
		ck_assert_ptr_nonnull(strstr(err, "figures"));
		h.lp_len++;
		h.lpb_len++;
		ck_assert_int_ne(round_trip(&h, &g, err), 0);
	}
	/* gen and ar: lpk alone, 0 to 5 alternatives */
	f = (pl_frame){ .type = PL_GEN, .id = 1, .mode = PL_MODE_AR,
	    .length = 4, .steps = 4, .temperature = 1, .seed = 2, .data = seq,
	    .data_len = 2, .lpk = 6 };
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	ck_assert_int_eq(g.lpk, 6);
	pl_frame_clear(&g);
	f.lpk = 7;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "lpk"));
	/* every figure finite and at most 0 */
	f = (pl_frame){ .type = PL_TOK, .id = 4, .pos = 3, .byte = 'x',
	    .lpk = 2, .lp = lp, .lp_len = 2, .lpb = lpb, .lpb_len = 1 };
	lp[1] = NAN;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "not finite"));
	lp[1] = INFINITY;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	lp[1] = 0.5f;
	ck_assert_int_ne(round_trip(&f, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "above 0"));
	lp[1] = -0.25f;
	ck_assert_int_eq(round_trip(&f, &g, err), 0);
	pl_frame_clear(&g);
}
END_TEST

/* The decoder of a request: on gen and bt frames each index round trips
 * as 1 + index, a frame without it is byte for byte the one before (the
 * key absent, decoding to 0), an index past the last decoder is refused
 * naming the field, and no other type of frame takes it. */
START_TEST(test_decode_key)
{
	unsigned char seq[6] = "ab\0cd", mask[6] = { 0, 0, 1, 0, 0, 1 };
	pl_frame bt = { .type = PL_BT, .id = 9, .steps = 8,
	    .temperature = 0.5, .seed = 4, .fixed = 2, .end = 5, .block = 2,
	    .data = seq, .data_len = 6, .mask = mask, .mask_len = 6,
	    .compute_us = 70, .hops = 1 };
	pl_frame gen = { .type = PL_GEN, .id = 1, .mode = PL_MODE_BT,
	    .length = 4, .steps = 4, .temperature = 1, .seed = 2, .data = seq,
	    .data_len = 2 }, g;
	pl_frame *frames[2] = { &gen, &bt };
	char err[KN_ERR_LEN], *plain, *with, *pb, *wb;
	size_t pn, wn, i;
	int d, n;

	for (n = 0; pr_decoders[n] != NULL; n++)
		;
	ck_assert_int_eq(n, PL_DECODE_MAX + 1);
	for (i = 0; i < 2; i++) {
		pl_frame f = *frames[i];

		/* absent: no byte of the key, and decoded as 0 */
		pn = encode_body(&f, &plain, &pb);
		ck_assert_ptr_null(memmem(pb, pn, "decode", 6));
		ck_assert_int_eq(pl_frame_decode(pb, pn, &g, err), 0);
		ck_assert_int_eq(g.decode, 0);
		ck_assert_int_eq(g.type, f.type);
		pl_frame_clear(&g);
		for (d = 1; d <= PL_DECODE_MAX + 1; d++) {
			f.decode = d;
			wn = encode_body(&f, &with, &wb);
			/* the same map, one key more at its end: "decode" and
			 * the index d - 1 as a positive fixint */
			ck_assert_uint_eq(wn, pn + 8);
			ck_assert_int_eq((unsigned char)wb[0],
			    (unsigned char)pb[0] + 1);
			ck_assert_mem_eq(wb + 1, pb + 1, pn - 1);
			ck_assert_mem_eq(wb + pn, "\xa6" "decode", 7);
			ck_assert_int_eq((unsigned char)wb[pn + 7], d - 1);
			ck_assert_msg(pl_frame_decode(wb, wn, &g, err) == 0, "%s",
			    err);
			ck_assert_int_eq(g.decode, d);
			ck_assert_int_eq(g.type, f.type);
			ck_assert_int_eq(g.seed, f.seed);
			ck_assert_int_eq(g.steps, f.steps);
			ck_assert_uint_eq(g.data_len, f.data_len);
			pl_frame_clear(&g);
			free(with);
		}
		/* one past the last decoder and far past it */
		for (d = PL_DECODE_MAX + 2; d <= PL_DECODE_MAX + 200;
		    d += 197) {
			f.decode = d;
			ck_assert_int_ne(round_trip(&f, &g, err), 0);
			ck_assert_msg(strstr(err, "'decode'") != NULL, "%s", err);
			pl_frame_clear(&g);
		}
		free(plain);
	}
	/* the key is gen's and bt's alone: an ar or part frame leaves it
	 * out, and one written with it is refused */
	{
		float hidden[2] = { 1.0f, 2.0f };
		pl_frame f = { .type = PL_AR, .id = 5, .temperature = 1,
		    .seed = 9, .fixed = 1, .end = 4, .pos = 1, .count = 1,
		    .width = 2, .data = (unsigned char *)hidden,
		    .data_len = sizeof(hidden), .decode = 2 };
		char grown[512];

		pn = encode_body(&f, &plain, &pb);
		ck_assert_ptr_null(memmem(pb, pn, "decode", 6));
		ck_assert_int_eq(pl_frame_decode(pb, pn, &g, err), 0);
		ck_assert_int_eq(g.decode, 0);
		pl_frame_clear(&g);
		ck_assert((unsigned char)pb[0] >= 0x80 &&
		    (unsigned char)pb[0] < 0x8f && pn + 8 <= sizeof(grown));
		memcpy(grown, pb, pn);
		grown[0]++;
		memcpy(grown + pn, "\xa6" "decode\x01", 8);
		ck_assert_int_ne(pl_frame_decode(grown, pn + 8, &g, err), 0);
		ck_assert_msg(strstr(err, "decode") != NULL, "%s", err);
		pl_frame_clear(&g);
		free(plain);
	}
	/* beside every other optional key of a bt frame */
	{
		float lp[12] = { -0.5f, -0.25f, 0, 0, 0, 0, -1.0f, -0.5f,
		    -2.0f, -0.125f, 0, 0 };
		unsigned char lpb[6] = "xyzuv";
		pl_frame f = bt;

		f.stream = 1;
		f.pos_block = 2;
		f.pblock = 1;
		f.lpk = 2;
		f.lp = lp;
		f.lp_len = 12;
		f.lpb = lpb;
		f.lpb_len = 6;
		f.decode = 3;
		ck_assert_msg(round_trip(&f, &g, err) == 0, "%s", err);
		ck_assert_int_eq(g.decode, 3);
		ck_assert_int_eq(g.stream, 1);
		ck_assert_int_eq(g.pos_block, 2);
		ck_assert_int_eq(g.pblock, 1);
		ck_assert_int_eq(g.lpk, 2);
		ck_assert_mem_eq(g.lp, lp, sizeof(lp));
		pl_frame_clear(&g);
	}
	/* a string is not an index */
	pn = encode_body(&bt, &plain, &pb);
	{
		char grown[512];

		ck_assert((unsigned char)pb[0] >= 0x80 &&
		    (unsigned char)pb[0] < 0x8f && pn + 14 <= sizeof(grown));
		memcpy(grown, pb, pn);
		grown[0]++;
		memcpy(grown + pn, "\xa6" "decode\xa6margin", 14);
		ck_assert_int_ne(pl_frame_decode(grown, pn + 14, &g, err), 0);
		ck_assert_msg(strstr(err, "'decode'") != NULL, "%s", err);
		pl_frame_clear(&g);
		/* and as the index 2, the same bytes decode */
		memcpy(grown + pn, "\xa6" "decode\x02", 8);
		ck_assert_msg(pl_frame_decode(grown, pn + 8, &g, err) == 0, "%s",
		    err);
		ck_assert_int_eq(g.decode, 3);
		pl_frame_clear(&g);
	}
	free(plain);
}
END_TEST

/* A map written by hand: n key/value pairs after magic and version. */
static size_t
pack(char *out, size_t cap, const char *magic, int nkv, const char **keys,
    const int64_t *vals, const char *trailer, size_t tlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t len;
	int i;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, (size_t)nkv + 2);
	msgpack_pack_str_with_body(&pk, "magic", 5);
	msgpack_pack_str_with_body(&pk, magic, strlen(magic));
	msgpack_pack_str_with_body(&pk, "version", 7);
	msgpack_pack_uint64(&pk, 1);
	for (i = 0; i < nkv; i++) {
		msgpack_pack_str_with_body(&pk, keys[i], strlen(keys[i]));
		if (strcmp(keys[i], "type") == 0)
			msgpack_pack_str_with_body(&pk, "end", 3);
		else
			msgpack_pack_int64(&pk, vals[i]);
	}
	if (trailer != NULL)
		msgpack_sbuffer_write(&sb, trailer, tlen);
	len = sb.size < cap ? sb.size : cap;
	memcpy(out, sb.data, len);
	msgpack_sbuffer_destroy(&sb);
	return len;
}

START_TEST(test_bad_frames)
{
	const char *keys[] = { "type", "id", "extra" };
	const int64_t vals[] = { 0, 5, 1 }, neg[] = { 0, -5 };
	char buf[512], err[KN_ERR_LEN];
	pl_frame g;
	size_t len;
	unsigned char seq[4] = { 'a', 0, 0, 0 }, mask[4] = { 0, 1, 2, 1 };
	pl_frame f = { .type = PL_BT, .id = 1, .steps = 4, .temperature = 1,
	    .fixed = 1, .end = 4, .block = 1, .data = seq, .data_len = 4,
	    .mask = mask, .mask_len = 4 };
	float nan_hidden[2] = { 1.0f, 0.0f };

	len = pack(buf, sizeof(buf), "ShardMeter pipeline", 2, keys, vals,
	    NULL, 0);
	ck_assert_int_eq(pl_frame_decode(buf, len, &g, err), 0);
	ck_assert_int_eq(g.type, PL_END);
	/* trailing bytes */
	len = pack(buf, sizeof(buf), "ShardMeter pipeline", 2, keys, vals,
	    "\x01", 1);
	ck_assert_int_ne(pl_frame_decode(buf, len, &g, err), 0);
	/* a field of no type of frame */
	len = pack(buf, sizeof(buf), "ShardMeter pipeline", 3, keys, vals,
	    NULL, 0);
	ck_assert_int_ne(pl_frame_decode(buf, len, &g, err), 0);
	/* a field missing */
	len = pack(buf, sizeof(buf), "ShardMeter pipeline", 1, keys, vals,
	    NULL, 0);
	ck_assert_int_ne(pl_frame_decode(buf, len, &g, err), 0);
	/* a negative id */
	len = pack(buf, sizeof(buf), "ShardMeter pipeline", 2, keys, neg,
	    NULL, 0);
	ck_assert_int_ne(pl_frame_decode(buf, len, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "'id'"));
	/* another format's magic */
	len = pack(buf, sizeof(buf), "ShardMeter update", 2, keys, vals,
	    NULL, 0);
	ck_assert_int_ne(pl_frame_decode(buf, len, &g, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "not a ShardMeter pipeline"));
	/* truncated, and not msgpack at all */
	len = pack(buf, sizeof(buf), "ShardMeter pipeline", 2, keys, vals,
	    NULL, 0);
	ck_assert_int_ne(pl_frame_decode(buf, len - 1, &g, err), 0);
	ck_assert_int_ne(pl_frame_decode("\xc1\xc1\xc1", 3, &g, err), 0);
	ck_assert_int_ne(pl_frame_decode("", 0, &g, err), 0);
	/* a mask flag that is not 0 or 1, and masks of the wrong count */
	len = 0;
	{
		char *b;
		size_t l;

		ck_assert_int_eq(pl_frame_encode(&f, &b, &l, err), 0);
		ck_assert_int_ne(pl_frame_decode(b + 4, l - 4, &g, err), 0);
		ck_assert_ptr_nonnull(strstr(err, "mask flags"));
		free(b);
		mask[2] = 1;
		f.mask_len = 3;
		ck_assert_int_eq(pl_frame_encode(&f, &b, &l, err), 0);
		ck_assert_int_ne(pl_frame_decode(b + 4, l - 4, &g, err), 0);
		free(b);
		/* hidden states: not finite, or not count x width */
		nan_hidden[1] = 0.0f / 0.0f;
		f = (pl_frame){ .type = PL_AR, .id = 2, .temperature = 1,
		    .fixed = 1, .end = 4, .pos = 0, .count = 1, .width = 2,
		    .data = (unsigned char *)nan_hidden, .data_len = 8 };
		ck_assert_int_eq(pl_frame_encode(&f, &b, &l, err), 0);
		ck_assert_int_ne(pl_frame_decode(b + 4, l - 4, &g, err), 0);
		ck_assert_ptr_nonnull(strstr(err, "not finite"));
		free(b);
		nan_hidden[1] = 2.0f;
		f.width = 3;
		ck_assert_int_eq(pl_frame_encode(&f, &b, &l, err), 0);
		ck_assert_int_ne(pl_frame_decode(b + 4, l - 4, &g, err), 0);
		free(b);
		/* a temperature out of range */
		f = (pl_frame){ .type = PL_GEN, .id = 1, .length = 4,
		    .steps = 4, .temperature = -1 };
		ck_assert_int_eq(pl_frame_encode(&f, &b, &l, err), 0);
		ck_assert_int_ne(pl_frame_decode(b + 4, l - 4, &g, err), 0);
		free(b);
	}
	(void)len;
}
END_TEST

static char tmpdir[64];

static const char *
write_list(const char *text)
{
	return tu_write_file(tmpdir, "hosts", text);
}

START_TEST(test_host_list)
{
	ph_list pl;
	pr_spec run;
	char err[PR_ERR_LEN];

	tu_temp_dir(tmpdir, sizeof(tmpdir), "check_pipeline");
	ck_assert_int_eq(ph_load(&pl, write_list("# ring\n127.0.0.1:1 4\n"
	    "127.0.0.1:2 3\n127.0.0.1:3 2-1\n"), err), 0);
	ck_assert_int_eq(pl.n, 3);
	ck_assert_int_eq(pl.v[2].block_hi, 2);
	ck_assert_int_eq(pl.v[2].block_lo, 1);
	pr_spec_defaults(&run);
	run.layers_per_block = 2;
	ck_assert_int_eq(ph_assign(&pl, &run, err), 0);
	/* 8 causal layers over 3 hosts: 2, 3, 3 */
	ck_assert_int_eq(pl.v[0].layer_lo, 0);
	ck_assert_int_eq(pl.v[0].layer_hi, 2);
	ck_assert_int_eq(pl.v[2].layer_hi, 8);
	/* blocks of 1, 4, 2 and 3 layers: the causal LM has their sum */
	run.layers_given = 1;
	memcpy(run.block_layers, (int[]){ 1, 4, 2, 3 }, 4 * sizeof(int));
	ck_assert_int_eq(ph_assign(&pl, &run, err), 0);
	ck_assert_int_eq(pl.v[0].layer_hi, 3);
	ck_assert_int_eq(pl.v[2].layer_hi, 10);
	run.blocks = 5;
	ck_assert_int_ne(ph_assign(&pl, &run, err), 0);
	ck_assert_int_eq(ph_find(&pl, "127.0.0.1:2"), 1);
	ck_assert_int_eq(ph_find(&pl, "127.0.0.1:9"), -1);
	/* out of traversal order, a gap, block 1 missing, a host twice */
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 1\n"
	    "127.0.0.1:2 2\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "traversal order"));
	/* a training daemon's peer list, blocks going up (or its replicas
	 * after the blocks), is named as one; there is no block 0 */
	ck_assert_ptr_nonnull(strstr(err, "as in a training daemon's peer "
	    "list"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:2 1\n127.0.0.1:3 2\n127.0.0.1:4 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, ":3: block 2 after block 1"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 2-1\n"
	    "127.0.0.1:2 1\n"), err), 0);
	ck_assert_ptr_null(strstr(err, "block 0"));
	ck_assert_ptr_nonnull(strstr(err, "ends at block 1"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 expert=0\n"),
	    err), 0);
	ck_assert_ptr_nonnull(strstr(err, "a training daemon's peer list"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 4\n"
	    "127.0.0.1:2 2-1\n"), err), 0);
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 3\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "block 1"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:1 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1 2\n"), err), 0);
	ck_assert_int_ne(ph_load(&pl, "/nonexistent/hosts", err), 0);
	ck_assert_ptr_nonnull(strstr(err, "cannot open"));
	/* a logical shape */
	ck_assert_int_eq(ph_load(&pl, write_list("shape width=64 heads=4 "
	    "layers=2 window=32 blocks=2 seed=9\n127.0.0.1:1 2\n"
	    "127.0.0.1:2 1\n"), err), 0);
	ck_assert(pl.logical);
	ck_assert_int_eq(pl.v[1].layer_lo, 2);
	ck_assert_int_eq(pl.v[1].layer_hi, 4);
	{
		pr_spec s;

		ph_logical_spec(&pl, &s);
		ck_assert_int_eq(s.width, 64);
		ck_assert_int_eq(s.blocks, 2);
		ck_assert(s.cuts[1] == 0.5);
	}
	ck_assert_int_ne(ph_load(&pl, write_list("shape width=64 heads=5 "
	    "layers=2 window=32 blocks=2\n127.0.0.1:1 2-1\n"), err), 0);
	ck_assert_int_ne(ph_load(&pl, write_list("shape width=64 heads=4 "
	    "layers=2 window=32 blocks=3\n127.0.0.1:1 2-1\n"), err), 0);
	ck_assert_int_eq(ph_load(&pl, write_list("shape width=64 heads=4 "
	    "layers=2 window=32 blocks=1 storage=f16\n127.0.0.1:1 1\n"), err),
	    0);
	ck_assert(pl.f16);
	ck_assert_int_ne(ph_load(&pl, write_list("shape width=64 heads=4 "
	    "layers=2 window=32 blocks=1 storage=f8\n127.0.0.1:1 1\n"), err),
	    0);
	ck_assert_int_ne(ph_load(&pl, write_list("shape width=64 colour=4\n"
	    "127.0.0.1:1 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "unknown shape key"));
	unlink(write_list(""));
	rmdir(tmpdir);
}
END_TEST

/* A printed peer id whose bytes are all b. */
static const char *
some_id(int b, char out[ID_LEN])
{
	uint8_t id[ID_BYTES];

	memset(id, b, sizeof(id));
	id_format(id, out);
	return out;
}

START_TEST(test_host_list_ids)
{
	ph_list pl;
	char err[PR_ERR_LEN], text[1024], a[ID_LEN], b[ID_LEN], c[ID_LEN];
	uint8_t id[ID_BYTES];

	tu_temp_dir(tmpdir, sizeof(tmpdir), "check_pipeline");
	snprintf(text, sizeof(text), "127.0.0.1:1 2 %s\n127.0.0.1:2 1 %s  # "
	    "inner\nclient %s alice\nclient %s\n", some_id(1, a),
	    some_id(2, b), some_id(3, c), "aaaa-aaaa-aaaa-aaaa-aaaa-aaaa-aaaa-"
	    "aaaa-aaaa-aaaa-aaaa-aaaa-aaaa");
	ck_assert_msg(ph_load(&pl, write_list(text), err) == 0, "%s", err);
	ck_assert_int_eq(pl.n, 2);
	ck_assert_int_eq(pl.missing_ids, 0);
	ck_assert(pl.v[0].has_id && pl.v[1].has_id);
	ck_assert_str_eq(pl.v[1].id_text, b);
	ck_assert_int_eq(pl.nclients, 2);
	ck_assert_str_eq(pl.clients[0].name, "alice");
	ck_assert_str_eq(pl.clients[1].name, "");
	memset(id, 2, sizeof(id));
	ck_assert_int_eq(ph_find_id(&pl, id), 1);
	ck_assert_int_eq(ph_client_find(&pl, id), -1);
	memset(id, 0, sizeof(id));
	ck_assert_int_eq(ph_client_find(&pl, id), 1);
	ph_free(&pl);
	/* ids may be left out (for hosts that run insecure), and counted */
	snprintf(text, sizeof(text), "127.0.0.1:1 2-1\n");
	ck_assert_int_eq(ph_load(&pl, write_list(text), err), 0);
	ck_assert_int_eq(pl.missing_ids, 1);
	ck_assert(!pl.v[0].has_id);
	ph_free(&pl);
	/* an id twice, on host or client lines */
	snprintf(text, sizeof(text), "127.0.0.1:1 2 %s\n127.0.0.1:2 1 %s\n",
	    a, a);
	ck_assert_int_ne(ph_load(&pl, write_list(text), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	snprintf(text, sizeof(text), "127.0.0.1:1 1 %s\nclient %s\n", a, a);
	ck_assert_int_ne(ph_load(&pl, write_list(text), err), 0);
	ck_assert_ptr_nonnull(strstr(err, ":2: peer id"));
	/* a malformed id, a client line without one or with too much, a
	 * host line with a fourth field */
	snprintf(text, sizeof(text), "127.0.0.1:1 1 %s\n", "ABCD-EFGH");
	ck_assert_int_ne(ph_load(&pl, write_list(text), err), 0);
	ck_assert_ptr_nonnull(strstr(err, ":1:"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 1\nclient\n"),
	    err), 0);
	ck_assert_ptr_nonnull(strstr(err, "client peer-id"));
	snprintf(text, sizeof(text), "127.0.0.1:1 1\nclient %s a b\n", c);
	ck_assert_int_ne(ph_load(&pl, write_list(text), err), 0);
	snprintf(text, sizeof(text), "127.0.0.1:1 1 %s extra\n", a);
	ck_assert_int_ne(ph_load(&pl, write_list(text), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "host:port BLOCKS peer-id"));
	/* a shape line still goes with ids */
	snprintf(text, sizeof(text), "shape width=64 heads=4 layers=2 "
	    "window=32 blocks=2\n127.0.0.1:1 2 %s\n127.0.0.1:2 1 %s\n"
	    "client %s\n", a, b, c);
	ck_assert_int_eq(ph_load(&pl, write_list(text), err), 0);
	ck_assert(pl.logical);
	ck_assert_int_eq(pl.nclients, 1);
	ph_free(&pl);
	unlink(write_list(""));
	rmdir(tmpdir);
}
END_TEST

/* Several hosts for the same blocks: lines one after another with the
 * same range make a stage; every block is still covered in traversal
 * order, the causal layers are split over the stages, and a list of one
 * host a block has as many stages as lines. */
START_TEST(test_host_list_stages)
{
	ph_list pl;
	pr_spec run;
	char err[PR_ERR_LEN], text[1024], a[ID_LEN], b[ID_LEN];
	int i;

	tu_temp_dir(tmpdir, sizeof(tmpdir), "check_pipeline");
	/* two entries for 4-3, one host for 2, three for 1 */
	ck_assert_msg(ph_load(&pl, write_list("127.0.0.1:1 4-3\n"
	    "127.0.0.1:2 4-3\n127.0.0.1:3 2\n127.0.0.1:4 1\n127.0.0.1:5 1\n"
	    "127.0.0.1:6 1\n"), err) == 0, "%s", err);
	ck_assert_int_eq(pl.n, 6);
	ck_assert_int_eq(pl.nstages, 3);
	ck_assert_int_eq(ph_stage_size(&pl, 0), 2);
	ck_assert_int_eq(ph_stage_size(&pl, 1), 1);
	ck_assert_int_eq(ph_stage_size(&pl, 2), 3);
	ck_assert_int_eq(ph_stage_size(&pl, 3), 0);
	ck_assert_int_eq(pl.stage_first[1], 2);
	ck_assert_int_eq(pl.stage_first[2], 3);
	ck_assert_int_eq(pl.v[1].stage, 0);
	ck_assert_int_eq(pl.v[5].stage, 2);
	/* 8 causal layers over 3 stages: 2, 3, 3, each host its stage's */
	pr_spec_defaults(&run);
	run.layers_per_block = 2;
	ck_assert_int_eq(ph_assign(&pl, &run, err), 0);
	ck_assert_int_eq(pl.v[0].layer_hi, 2);
	ck_assert_int_eq(pl.v[1].layer_lo, 0);
	ck_assert_int_eq(pl.v[1].layer_hi, 2);
	ck_assert_int_eq(pl.v[2].layer_lo, 2);
	ck_assert_int_eq(pl.v[2].layer_hi, 5);
	for (i = 3; i < 6; i++) {
		ck_assert_int_eq(pl.v[i].layer_lo, 5);
		ck_assert_int_eq(pl.v[i].layer_hi, 8);
	}
	/* one stage of two hosts: each serves the whole model */
	ck_assert_int_eq(ph_load(&pl, write_list("127.0.0.1:1 2-1\n"
	    "127.0.0.1:2 2-1\n"), err), 0);
	ck_assert_int_eq(pl.nstages, 1);
	run.blocks = 2;
	ck_assert_int_eq(ph_assign(&pl, &run, err), 0);
	ck_assert_int_eq(pl.v[1].layer_lo, 0);
	ck_assert_int_eq(pl.v[1].layer_hi, 4);
	/* one host a block: a stage a line, as before */
	ck_assert_int_eq(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:2 1\n"), err), 0);
	ck_assert_int_eq(pl.nstages, 2);
	ck_assert_int_eq(pl.v[1].stage, 1);
	/* a range that overlaps the one before without being it */
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 3-2\n"
	    "127.0.0.1:2 3\n127.0.0.1:3 2-1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "same range"));
	/* hosts of one stage apart from each other */
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:2 1\n127.0.0.1:3 2\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "traversal order"));
	/* the same address twice in one stage, a stage that skips a block,
	 * block 1 with no host */
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:1 2\n127.0.0.1:3 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 3\n"
	    "127.0.0.1:2 3\n127.0.0.1:3 1\n"), err), 0);
	ck_assert_int_ne(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:2 2\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "block 1"));
	/* two stages for two causal layers: one each, whatever the hosts */
	ck_assert_int_eq(ph_load(&pl, write_list("127.0.0.1:1 2\n"
	    "127.0.0.1:2 2\n127.0.0.1:3 1\n"), err), 0);
	run.layers_per_block = 1;
	ck_assert_int_eq(ph_assign(&pl, &run, err), 0);
	ck_assert_int_eq(pl.v[1].layer_hi, 1);
	ck_assert_int_eq(pl.v[2].layer_lo, 1);
	/* ids stay one a line; a logical shape with two hosts a block */
	snprintf(text, sizeof(text), "127.0.0.1:1 1 %s\n127.0.0.1:2 1 %s\n",
	    some_id(1, a), some_id(1, b));
	ck_assert_int_ne(ph_load(&pl, write_list(text), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	ck_assert_msg(ph_load(&pl, write_list("shape width=64 heads=4 "
	    "layers=2 window=32 blocks=2\n127.0.0.1:1 2\n127.0.0.1:2 2\n"
	    "127.0.0.1:3 1\n127.0.0.1:4 1\n"), err) == 0, "%s", err);
	ck_assert_int_eq(pl.nstages, 2);
	ck_assert_int_eq(pl.v[3].layer_lo, 2);
	ck_assert_int_eq(pl.v[3].layer_hi, 4);
	ph_free(&pl);
	unlink(write_list(""));
	rmdir(tmpdir);
}
END_TEST

/* The frames between hosts of a stage: the id and nothing else. */
START_TEST(test_link_frames)
{
	pl_type t[] = { PL_PING, PL_PONG, PL_ACK, PL_REDO };
	char err[KN_ERR_LEN], *buf;
	size_t len, i;
	pl_frame f, g;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		f = (pl_frame){ .type = t[i], .id = 0x0100000000000007ULL };
		ck_assert_int_eq(pl_frame_encode(&f, &buf, &len, err), 0);
		ck_assert_msg(pl_frame_decode(buf + PL_HEADER, len - PL_HEADER,
		    &g, err) == 0, "%s", err);
		ck_assert_int_eq(g.type, t[i]);
		ck_assert(g.id == f.id);
		free(buf);
	}
	ck_assert_str_eq(pl_type_name(PL_ACK), "ack");
	/* a key of another type is refused */
	f = (pl_frame){ .type = PL_ERR, .id = 3 };
	snprintf(f.message, sizeof(f.message), "x");
	ck_assert_int_eq(pl_frame_encode(&f, &buf, &len, err), 0);
	/* "err" becomes "ack", its message now a key too many */
	{
		size_t at = tu_find(buf, len, "err");

		memcpy(buf + at, "ack", 3);
		ck_assert_int_ne(pl_frame_decode(buf + PL_HEADER, len -
		    PL_HEADER, &g, err), 0);
	}
	free(buf);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("pipeline");
	TCase *tc = tcase_create("frames");

	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_bad_frames);
	tcase_add_test(tc, test_stream_and_part);
	tcase_add_test(tc, test_logprobs_keys);
	tcase_add_test(tc, test_decode_key);
	tcase_add_test(tc, test_host_list);
	tcase_add_test(tc, test_host_list_ids);
	tcase_add_test(tc, test_host_list_stages);
	tcase_add_test(tc, test_link_frames);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
