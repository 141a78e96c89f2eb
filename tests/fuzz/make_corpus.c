/* Writes the fuzz targets' seed inputs: a few small valid inputs per
 * target made with the project's own encoders and printers, and a few
 * invalid ones.  Built on request; the output is committed in
 * tests/fuzz/corpus/ (crashers found later are added there by hand).
 *   tests/fuzz/make_corpus DIR        writes DIR/<target>/<name> */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/core/conf.h"
#include "daemon/core/identity.h"
#include "daemon/net/tls.h"
#include "proto/checkpoint.h"
#include "proto/pipeline.h"
#include "proto/spec.h"
#include "proto/update.h"
#include "tests/fuzz/fuzz.h"

/* The replay driver's name is not needed here. */
const char fz_target[] = "make_corpus";

static const char *outdir;
/* The f32 update, also POSTed by an HTTP seed. */
static char *http_update;
static size_t http_update_len;

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "make_corpus: %s: %s\n", what, why);
	exit(1);
}

static void
put(const char *target, const char *name, const void *buf, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", outdir, target);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		die(path, strerror(errno));
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
	if ((f = fopen(path, "wb")) == NULL ||
	    fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		die(path, strerror(errno));
}

static void
put_text(const char *target, const char *name, const char *text)
{
	put(target, name, text, strlen(text));
}

static void
params_fill(float *p, size_t n, float scale)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = scale * ((float)i - (float)n / 2);
}

static void
checkpoints(void)
{
	pr_ckpt_meta meta = { .block = 1, .kind = "block", .step = 7,
	    .round = 2 };
	float params[FZ_PARAMS], m[FZ_PARAMS], v[FZ_PARAMS];
	char err[PR_ERR_LEN], *buf;
	size_t len;

	snprintf(meta.run_id, sizeof(meta.run_id), "%s", fz_run_id);
	params_fill(params, FZ_PARAMS, 0.125f);
	if (pr_ckpt_encode(&meta, fz_tensors, FZ_NTENSORS, params, &buf, &len,
	    err) != 0)
		die("checkpoint", err);
	put("checkpoint", "block", buf, len);
	put("checkpoint", "truncated", buf, len / 2);
	free(buf);
	meta.block = 0;
	snprintf(meta.kind, sizeof(meta.kind), "causal");
	if (pr_ckpt_encode(&meta, fz_tensors, 1, params, &buf, &len, err) != 0)
		die("checkpoint", err);
	put("checkpoint", "causal-one-tensor", buf, len);
	free(buf);
	params_fill(m, FZ_PARAMS, 0.01f);
	params_fill(v, FZ_PARAMS, 0.0f);
	if (pr_ckpt_encode_optim(&meta, FZ_PARAMS, m, v, 12, &buf, &len,
	    err) != 0)
		die("optimizer state", err);
	put("checkpoint", "optim", buf, len);
	free(buf);
	put("checkpoint", "empty-map", "\x80", 1);
}

/* Compressed seeds: values that repeat, so that zstd shrinks them. */
static void
updates_zstd(const pr_update_meta *like)
{
	static float delta[512];
	pr_update_meta m = *like;
	char err[PR_ERR_LEN], *buf, name[32];
	size_t len, i;

	for (i = 0; i < 512; i++)
		delta[i] = 0.25f * (float)(i % 9) - 1.0f;
	m.count = 512;
	m.comp = PR_COMP_ZSTD;
	for (m.enc = PR_ENC_F32; m.enc <= PR_ENC_INT8; m.enc++) {
		if (pr_update_encode(&m, delta, &buf, &len, err) != 0)
			die("update", err);
		snprintf(name, sizeof(name), "%s-zstd",
		    pr_encoding_name(m.enc));
		put("update", name, buf, len);
		free(buf);
	}
}

static void
updates(void)
{
	pr_update_meta m = { .block = 1, .round = 2, .replica = 1, .step = 9,
	    .count = FZ_PARAMS };
	float delta[FZ_PARAMS];
	char err[PR_ERR_LEN], *buf, name[32];
	pr_encoding e;
	pr_spec s;
	size_t len;

	/* the run of the HTTP target's daemon, so that it accepts them */
	if (pr_spec_parse(&s, fz_http_spec, strlen(fz_http_spec), err) != 0 ||
	    pr_spec_run_id(&s, m.run_id, err) != 0)
		die("spec", err);
	params_fill(delta, FZ_PARAMS, 0.5f);
	updates_zstd(&m);
	for (e = PR_ENC_F32; e <= PR_ENC_INT8; e++) {
		m.enc = e;
		if (pr_update_encode(&m, delta, &buf, &len, err) != 0)
			die("update", err);
		snprintf(name, sizeof(name), "%s", pr_encoding_name(e));
		put("update", name, buf, len);
		if (e != PR_ENC_F32) {
			free(buf);
			continue;
		}
		http_update = buf;
		http_update_len = len;
		if ((buf = malloc(len + 1)) == NULL)
			die("update", "out of memory");
		memcpy(buf, http_update, len);
		buf[len] = '\0';
		put("update", "trailing-byte", buf, len + 1);
		free(buf);
	}
}

static void
frame(const pl_frame *f, const char *name)
{
	char err[PR_ERR_LEN], *buf;
	size_t len;

	if (pl_frame_encode(f, &buf, &len, err) != 0)
		die("frame", err);
	put("pipeline", name, buf + PL_HEADER, len - PL_HEADER);
	free(buf);
}

static void
frames(void)
{
	unsigned char data[8] = "abcdefg", mask[8] = { 0, 0, 0, 1, 1, 1, 1 };
	float hidden[4] = { 0.5f, -1.0f, 2.0f, 0.0f };
	pl_frame f;

	f = (pl_frame){ .type = PL_GEN, .id = 1, .mode = PL_MODE_BT,
	    .length = 16, .steps = 4, .temperature = 0.8, .seed = 5,
	    .data = data, .data_len = 3 };
	frame(&f, "gen");
	f.decode = 3;
	frame(&f, "gen-decode");
	f = (pl_frame){ .type = PL_BT, .id = 2, .steps = 4, .temperature = 1,
	    .seed = 6, .fixed = 3, .end = 7, .block = 2, .data = data,
	    .data_len = 7, .mask = mask, .mask_len = 7, .compute_us = 100,
	    .hops = 1 };
	frame(&f, "bt");
	/* a streamed request's bt frame, and a host's window for the entry */
	f.stream = 1;
	frame(&f, "bt-stream");
	/* a request's decoder other than random: its index, 1 + it here */
	f.stream = 0;
	f.decode = 2;
	frame(&f, "bt-decode");
	f = (pl_frame){ .type = PL_PART, .id = 2, .host = 2, .block = 1,
	    .data = data, .data_len = 7, .mask = mask, .mask_len = 7 };
	frame(&f, "part");
	/* between the hosts of a stage of several: keep-alive and acks */
	f = (pl_frame){ .type = PL_ACK, .id = 0x0100000000000002ULL };
	frame(&f, "ack");
	f = (pl_frame){ .type = PL_PING, .id = 9 };
	frame(&f, "ping");
	f = (pl_frame){ .type = PL_REDO, .id = 3 };
	frame(&f, "redo");
	f = (pl_frame){ .type = PL_AR, .id = 3, .temperature = 0, .seed = 7,
	    .fixed = 1, .end = 4, .pos = 1, .count = 2, .width = 2,
	    .data = (unsigned char *)hidden, .data_len = sizeof(hidden) };
	frame(&f, "ar");
	f = (pl_frame){ .type = PL_TOK, .id = 4, .pos = 3, .byte = 'x' };
	frame(&f, "tok");
	f = (pl_frame){ .type = PL_OUT, .id = 5, .data = data, .data_len = 7,
	    .traversals = 1 };
	frame(&f, "out");
	{
		/* a request's logprobs: k = 1, two figures and a byte a
		 * position */
		float lpf[2 * 7] = { -0.5f, -0.25f, -1.0f, -0.5f, 0.0f, 0.0f,
		    -2.0f, -0.125f, -0.75f, -0.75f, -3.0f, -1.0f, -0.5f, -0.5f };
		unsigned char lpb[7] = "abcdefg";

		f = (pl_frame){ .type = PL_GEN, .id = 1, .mode = PL_MODE_AR,
		    .length = 4, .steps = 4, .temperature = 0.8, .seed = 5,
		    .data = data, .data_len = 3, .lpk = 2 };
		frame(&f, "gen-logprobs");
		f = (pl_frame){ .type = PL_BT, .id = 2, .steps = 4,
		    .temperature = 1, .seed = 6, .fixed = 3, .end = 7,
		    .block = 2, .data = data, .data_len = 7, .mask = mask,
		    .mask_len = 7, .lpk = 2, .lp = lpf, .lp_len = 14,
		    .lpb = lpb, .lpb_len = 7 };
		frame(&f, "bt-logprobs");
		f = (pl_frame){ .type = PL_TOK, .id = 4, .pos = 3, .byte = 'x',
		    .lpk = 2, .lp = lpf, .lp_len = 2, .lpb = lpb,
		    .lpb_len = 1 };
		frame(&f, "tok-logprobs");
		f = (pl_frame){ .type = PL_OUT, .id = 5, .data = data,
		    .data_len = 4, .traversals = 1, .lpk = 2, .lp = lpf,
		    .lp_len = 8, .lpb = lpb, .lpb_len = 4 };
		frame(&f, "out-logprobs");
	}
	{
		unsigned char win[2 * 4] = "abcdefgh";
		float lp[2 * 3] = { -1.5f, -0.25f, -3.0f, -0.5f, -2.0f, 0.0f };
		float dist[256];
		int c;

		for (c = 0; c < 256; c++)
			dist[c] = -5.545177f;	/* log(1/256) */
		f = (pl_frame){ .type = PL_SCORE, .id = 8, .expert = 3,
		    .count = 2, .width = 3, .data = win, .data_len = 8 };
		frame(&f, "score");
		f = (pl_frame){ .type = PL_LOGP, .id = 8, .expert = 3,
		    .count = 2, .width = 3, .data = (unsigned char *)lp,
		    .data_len = sizeof(lp), .compute_us = 40 };
		frame(&f, "logp");
		f = (pl_frame){ .type = PL_STEP, .id = 9, .expert = 1,
		    .pos = 4, .data = data, .data_len = 1 };
		frame(&f, "step");
		f = (pl_frame){ .type = PL_DIST, .id = 9, .expert = 1,
		    .pos = 5, .data = (unsigned char *)dist,
		    .data_len = sizeof(dist), .compute_us = 3 };
		frame(&f, "dist");
	}
	f = (pl_frame){ .type = PL_ERR, .id = 6 };
	snprintf(f.message, sizeof(f.message), "no such block");
	frame(&f, "err");
	f = (pl_frame){ .type = PL_END, .id = 7 };
	frame(&f, "end");
}

static void
printed(const char *target, const char *name, int (*print)(FILE *,
    const void *), const void *obj)
{
	size_t len;
	char *text = fz_print(print, obj, &len);

	put(target, name, text, len);
	free(text);
}

static int
print_spec(FILE *f, const void *s)
{
	return pr_spec_print(f, s);
}

static int
print_conf(FILE *f, const void *c)
{
	return cf_print(f, c);
}

static void
texts(void)
{
	char err[PR_ERR_LEN];
	pr_spec s;
	cf_config c;

	if (pr_spec_parse(&s, "", 0, err) != 0)
		die("spec", err);
	printed("spec", "defaults", print_spec, &s);
	put_text("spec", "small", "seed = 1\n[model]\nblocks = 3\n"
	    "width = 64\nheads = 4\nlayers_per_block = 2\nwindow = 64\n"
	    "cuts = 0.2, 0.6\n[data]\ntrain = train.txt\n"
	    "train_sha256 = " "0123456789ABCDEF0123456789abcdef"
	    "0123456789abcdef0123456789abcdef\n[optim]\nbetas = 0.9, 0.95\n"
	    "[sync]\nreplicas = 2\n");
	put_text("spec", "unknown-key", "[model]\nblock = 3\n");
	put_text("spec", "generate", "[generate]\ndecode = margin\n");
	cf_defaults(&c);
	printed("conf", "defaults", print_conf, &c);
	put_text("conf", "small", "listen = [::1]:7001\nblock = 2\n"
	    "peers = peers\nmax_body = 64M\npipeline_max_frame = 2\n"
	    "update_encoding = bf16\n");
	put_text("conf", "bad-section", "[daemon]\nblock = 1\n");
	put_text("peers", "ids", "# three daemons and an operator\n"
	    "127.0.0.1:7001 1 AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
	    "AAAA-AAAA-AAAA-AAAA\n"
	    "[::1]:7002 1 bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbba\n"
	    "host.example:7003 2 CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-"
	    "CCCC-CCCC-CCCC-CCCC-CCCA\n"
	    "client DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-"
	    "DDDD-DDDQ alice\n");
	put_text("peers", "no-ids", "127.0.0.1:7001 1\n127.0.0.1:7002 2\n");
	put_text("peers", "twice", "127.0.0.1:7001 1\n127.0.0.1:7001 2\n");
	put_text("hosts", "three", "127.0.0.1:7101 3\n127.0.0.1:7102 2\n"
	    "127.0.0.1:7103 1\n");
	put_text("hosts", "shape", "shape width=64 heads=4 layers=2 window=64 "
	    "blocks=4 seed=3 storage=f16\n[::1]:7101 4-3\n[::1]:7102 2-1\n");
	put_text("hosts", "gap", "127.0.0.1:7101 3\n127.0.0.1:7102 1\n");
	put_text("hosts", "soma", "127.0.0.1:7101 experts=0-1\n"
	    "127.0.0.1:7102 experts=2\n");
}

static void
requests(void)
{
	static const char *const text[][2] = {
		{ "status", "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n" },
		{ "metrics", "GET /metrics HTTP/1.0\r\n\r\n" },
		{ "spec-head", "HEAD /v1/spec HTTP/1.1\r\nConnection: close"
		    "\r\n\r\n" },
		{ "peers-from", "GET /v1/peers?from=127.0.0.1:41002&x=1 "
		    "HTTP/1.1\r\n\r\n" },
		{ "checkpoint-etag", "GET /v1/blocks/1/checkpoint HTTP/1.1\r\n"
		    "If-None-Match: \"abc\"\r\n\r\n" },
		{ "other-block", "GET /v1/blocks/2/checkpoint HTTP/1.1\r\n\r\n" },
		{ "commit", "GET /v1/blocks/1/rounds/2/commit HTTP/1.1\r\n\r\n" },
		{ "kept-update", "GET /v1/blocks/1/rounds/1/updates/1 HTTP/1.1"
		    "\r\n\r\n" },
		{ "post-status", "POST /v1/status HTTP/1.1\r\n"
		    "Content-Length: 3\r\n\r\nabc" },
		{ "pipelined", "GET /v1/status HTTP/1.1\r\n\r\nGET /metrics "
		    "HTTP/1.1\r\n\r\nGET /nowhere HTTP/1.1\r\n\r\n" },
		{ "chunked", "POST /v1/blocks/1/rounds/2/updates HTTP/1.1\r\n"
		    "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
		    "3\r\nabc\r\n0\r\n\r\n" },
		{ "http2", "GET / HTTP/2.0\r\n\r\n" },
		{ "garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" },
	};
	char head[256], *req;
	size_t i, hlen;

	for (i = 0; i < sizeof(text) / sizeof(text[0]); i++)
		put_text("http", text[i][0], text[i][1]);
	/* an update POSTed as a replica does: head, then the encoded body */
	hlen = (size_t)snprintf(head, sizeof(head), "POST /v1/blocks/1/rounds/"
	    "2/updates?from=127.0.0.1:41002 HTTP/1.1\r\nContent-Type: "
	    "application/x-msgpack\r\nContent-Length: %zu\r\n\r\n",
	    http_update_len);
	if ((req = malloc(hlen + http_update_len)) == NULL)
		die("http", "out of memory");
	memcpy(req, head, hlen);
	memcpy(req + hlen, http_update, http_update_len);
	put("http", "post-update", req, hlen + http_update_len);
	free(req);
	free(http_update);
}

/* The pipeline port's inputs: HTTP requests as clients send them to the
 * entry (completions whole, streamed, kept alive, chunked; a status; one
 * too large), and completion bodies by themselves, among them the
 * integers that once wrapped the window check. */
static void
completions(void)
{
	static const char *const body[][2] = {
		{ "json-full", "{\"prompt\":\"The \",\"max_tokens\":24,"
		    "\"temperature\":0.9,\"seed\":3,\"mode\":\"blocktrain\","
		    "\"steps\":8,\"stream\":false,\"model\":\"x\"}" },
		{ "json-ar", "{\"prompt\":\"ab\\u0000\\u00e9\",\"mode\":\"ar\","
		    "\"max_tokens\":9,\"temperature\":0,\"stream\":true}" },
		{ "json-huge", "{\"prompt\":\"ab\",\"max_tokens\":"
		    "9223372036854775807,\"stream\":true}" },
		{ "json-negative", "{\"prompt\":\"ab\",\"max_tokens\":"
		    "-9223372036854775808,\"seed\":-1}" },
		{ "json-steps", "{\"prompt\":\"ab\",\"steps\":1048576,"
		    "\"max_tokens\":4294967297}" },
		{ "json-types", "{\"prompt\":7,\"max_tokens\":1e300,"
		    "\"temperature\":\"hot\",\"stream\":null}" },
		{ "json-bad", "{\"prompt\": \"a\", " },
		{ "json-decode", "{\"prompt\":\"ab\",\"max_tokens\":9,"
		    "\"decode\":\"confidence\",\"stream\":true}" },
		{ "json-decode-bad", "{\"prompt\":\"ab\",\"decode\":3}" },
	};
	static const char *const http[][2] = {
		{ "post", "POST /v1/completions HTTP/1.1\r\nHost: e\r\n"
		    "Content-Type: application/json\r\nContent-Length: 43\r\n"
		    "\r\n{\"prompt\":\"The \",\"max_tokens\":24,\"steps\":8}" },
		{ "post-stream-close", "POST /v1/completions?x=1 HTTP/1.1\r\n"
		    "Connection: close\r\nContent-Length: 47\r\n\r\n"
		    "{\"prompt\":\"ab\",\"max_tokens\":9,\"stream\":true}   " },
		{ "kept-alive", "POST /v1/completions HTTP/1.1\r\n"
		    "Content-Length: 14\r\n\r\n{\"prompt\":\"a\"}"
		    "GET /v1/status HTTP/1.1\r\n\r\n"
		    "POST /v1/completions HTTP/1.0\r\nContent-Length: 2\r\n\r\n"
		    "[]" },
		{ "chunked", "POST /v1/completions HTTP/1.1\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n7\r\n{\"promp\r\n"
		    "8\r\nt\":\"ab\"}\r\n0\r\n\r\n" },
		{ "status", "HEAD /v1/status HTTP/1.1\r\nHost: e\r\n\r\n" },
		{ "too-large", "POST /v1/completions HTTP/1.1\r\n"
		    "Content-Length: 2000000\r\n\r\n{" },
	};
	size_t i;

	for (i = 0; i < sizeof(body) / sizeof(body[0]); i++)
		put_text("completions", body[i][0], body[i][1]);
	for (i = 0; i < sizeof(http) / sizeof(http[0]); i++)
		put_text("completions", http[i][0], http[i][1]);
}

/* The TLS target's inputs: a mode byte, a piece size, then records.  A
 * real ClientHello of a fresh identity (mode 0), the same with the
 * pieces one byte long, plain HTTP at a TLS port, and records that claim
 * to be data and an alert after a handshake (mode 1). */
static void
records(void)
{
	static const uint8_t data_rec[] = { 1, 7, 0x17, 0x03, 0x03, 0x00, 0x20,
	    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
	    20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };
	static const uint8_t alert[] = { 1, 255, 0x15, 0x03, 0x03, 0x00, 0x02,
	    0x02, 0x28 };
	char dir[] = "/tmp/make_corpus.XXXXXX", path[64], err[KN_ERR_LEN];
	uint8_t *in;
	tls_ctx *ctx;
	tls_conn *cl;
	char *hello;
	size_t len;

	if (mkdtemp(dir) == NULL)
		die("tls", strerror(errno));
	snprintf(path, sizeof(path), "%s/id", dir);
	if (id_create(path, 0, err) != 0 || tls_ctx_new(&ctx, path, err) != 0 ||
	    tls_conn_new(&cl, ctx, 0, NULL, err) != 0 ||
	    tls_conn_start(cl) != 0 ||
	    (hello = tls_conn_take(cl, &len)) == NULL ||
	    (in = malloc(len + 2)) == NULL)
		die("tls", err);
	in[0] = 0;
	in[1] = 255;
	memcpy(in + 2, hello, len);
	put("tls", "client-hello", in, len + 2);
	in[1] = 0;
	put("tls", "client-hello-bytewise", in, len + 2);
	put("tls", "plain-http", "\0\x20GET /v1/status HTTP/1.1\r\n\r\n", 33);
	put("tls", "data-record", data_rec, sizeof(data_rec));
	put("tls", "alert", alert, sizeof(alert));
	free(in);
	tls_buf_free(hello);
	tls_conn_free(cl);
	tls_ctx_free(ctx);
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: make_corpus DIR\n");
		return 2;
	}
	outdir = argv[1];
	if (mkdir(outdir, 0755) != 0 && errno != EEXIST)
		die(outdir, strerror(errno));
	checkpoints();
	updates();
	frames();
	texts();
	requests();
	completions();
	records();
	return 0;
}
