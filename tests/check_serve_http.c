/* HTTP on the pipeline hosts: a ring of three blocktraind -S of a
 * logical shape on loopback over mutual TLS, the test a listed client.
 * POST /v1/completions through the curl binary against `shardmeter
 * generate --peers` on the same hosts (whole and streamed, both modes;
 * streamed BlockTrain with each host's window in host order), the bytes
 * of the ring's links against the frames the test encodes itself (a
 * streamed request's part frames, and none for one that does not
 * stream), JSON errors for bad input, an unlisted client refused and an
 * open entry, the counts of GET /v1/status and /metrics after requests
 * whose bytes the test adds up itself, and shardmeter status on the host
 * list; promtool checks both daemons' /metrics. */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/identity.h"
#include "daemon/pipeline/pipeline_client.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/pipeline.h"
#include "tests/testutil.h"

#define HOSTS 3
#define WINDOW 64

static char dir[64];
static int base_port;
static pid_t host_pid[HOSTS];
static tls_ctx *operator_tls;

static void
start_host(int i, const char *conf)
{
	char listen[32], hosts[128], log[128], state[128], cpath[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(state, sizeof(state), "%s/host%d", dir, i);
	snprintf(cpath, sizeof(cpath), "%s/%s", dir, conf);
	host_pid[i] = tu_daemon_start(log, base_port + i, "-S", "-f", "-c",
	    cpath, "-L", listen, "-P", hosts, "-s", state, "-D", "cpu", "-t",
	    "1", (char *)NULL);
}

static void
write_conf(const char *name, int i, const char *more)
{
	char text[256];

	snprintf(text, sizeof(text), "pipeline_timeout_ms = 5000\n"
	    "metrics_listen = 127.0.0.1:%d\n%s", base_port + 10 + i, more);
	tu_write_file(dir, name, text);
}

/* Until a request goes through the ring. */
static void
wait_ring(void)
{
	pc_request r = { .mode = PL_MODE_BT, .prompt = "a", .prompt_len = 1,
	    .length = 2, .steps = 2, .temperature = 1, .seed = 1 };
	pc_result res;
	char err[KN_ERR_LEN], addr[32];
	double t;
	int ok = 0;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", base_port);
	for (t = 0; !ok && t < 20; t += 0.1) {
		if (pc_generate(addr, operator_tls, tu_port_pin(base_port), &r,
		    &res, 2000, err) == 0 && res.ok)
			ok = 1;
		else
			usleep(100000);
		pc_result_clear(&res);
	}
	ck_assert_msg(ok, "the ring did not come up");
}

static void
setup_once(void)
{
	char text[1024] = "shape width=32 heads=2 layers=1 window=64 blocks=3 "
	    "seed=3\n", state[128], err[KN_ERR_LEN];
	int i;

	signal(SIGPIPE, SIG_IGN);
	tu_temp_dir(dir, sizeof(dir), "check_serve_http");
	tu_trust_init(dir);
	ck_assert_msg(tls_ctx_new(&operator_tls, tu_client_dir(), err) == 0,
	    "%s", err);
	base_port = tu_port_base(13);
	for (i = 0; i < HOSTS; i++) {
		snprintf(state, sizeof(state), "%s/host%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, HOSTS - i, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "hosts", text);
	for (i = 0; i < HOSTS; i++) {
		snprintf(state, sizeof(state), "serve%d.conf", i);
		write_conf(state, i, "");
		start_host(i, state);
	}
	wait_ring();
}

static void
teardown_once(void)
{
	int i;

	for (i = 0; i < HOSTS; i++)
		tu_stop(&host_pid[i], SIGTERM, 15);
	tls_ctx_free(operator_tls);
	tu_remove_dir(dir);
}

/* Files and bytes --------------------------------------------------------- */

static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b = malloc(1 << 20);

	ck_assert_ptr_nonnull(f);
	*len = fread(b, 1, (1 << 20) - 1, f);
	b[*len] = '\0';
	fclose(f);
	return b;
}

/* base64 (as the daemon writes it, padded) into out; the byte count. */
static size_t
unbase64(const char *s, unsigned char *out)
{
	size_t n = strlen(s);
	int k = EVP_DecodeBlock(out, (const unsigned char *)s, (int)n);

	ck_assert_int_ge(k, 0);
	while (n > 0 && s[n - 1] == '=') {
		n--;
		k--;
	}
	return (size_t)k;
}

/* What `shardmeter generate --peers` prints after the prompt, without
 * its newline: the output bytes. */
static size_t
generate(const char *mode, const char *prompt, int length, int seed,
    unsigned char *out)
{
	char out_path[128], raw[512];
	unsigned char *b;
	size_t len, plen = strlen(prompt);

	snprintf(out_path, sizeof(out_path), "%s/generated", dir);
	ck_assert_msg(tu_run_cmd(raw, sizeof(raw), "%s generate --peers "
	    "%s/hosts --mode %s --length %d --steps 8 --temperature 0.9 "
	    "--seed %d '%s' > %s", tu_shardmeter(), dir, mode, length, seed,
	    prompt, out_path) == 0, "generate: %s", raw);
	b = slurp(out_path, &len);
	ck_assert_uint_eq(len, plen + (size_t)length + 1);
	ck_assert(memcmp(b, prompt, plen) == 0 && b[len - 1] == '\n');
	memcpy(out, b + plen, (size_t)length);
	free(b);
	return (size_t)length;
}

/* POST body (a JSON text) to /v1/completions with the curl binary as the
 * test's operator (or the identity in as), the host pinned to its id;
 * the answer's body in *out (malloc'd), the status returned (0: none). */
static long
curl_post(int port, const char *as, const char *body, unsigned char **out,
    size_t *len)
{
	char pin[ID_PIN_LEN], res_path[128], raw[256];
	const char *who = as != NULL ? as : tu_client_dir();

	id_pin(tu_port_pin(port), pin);
	tu_write_file(dir, "body.json", body);
	snprintf(res_path, sizeof(res_path), "%s/answer", dir);
	unlink(res_path);
	raw[0] = '\0';
	tu_run_cmd(raw, sizeof(raw), "curl -sN --cert %s/cert.pem --key "
	    "%s/key.pem --insecure --pinnedpubkey '%s' --tlsv1.3 -o %s -w "
	    "'%%{http_code}' -H 'Content-Type: application/json' "
	    "--data-binary @%s/body.json https://127.0.0.1:%d/v1/completions",
	    who, who, pin, res_path, dir, port);
	*out = access(res_path, F_OK) == 0 ? slurp(res_path, len) : NULL;
	return atol(raw);
}

/* Completions --------------------------------------------------------------- */

/* The unstreamed answer: its choice's bytes in out. */
static size_t
completion_bytes(const unsigned char *answer, unsigned char *out, int plen)
{
	json_error_t jerr;
	json_t *o = json_loads((const char *)answer, JSON_ALLOW_NUL, &jerr);
	json_t *ch;
	size_t n;

	ck_assert_msg(o != NULL, "not JSON: %s", jerr.text);
	ck_assert_str_eq(json_string_value(json_object_get(o, "object")),
	    "text_completion");
	ch = json_array_get(json_object_get(o, "choices"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(ch,
	    "finish_reason")), "length");
	n = unbase64(json_string_value(json_object_get(ch, "bytes")), out);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o,
	    "usage"), "completion_tokens")), (json_int_t)n);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o,
	    "usage"), "prompt_tokens")), plen);
	json_decref(o);
	return n;
}

/* The event stream: the concatenated bytes of its events in out, their
 * count in *events; it must end with [DONE].  BlockTrain partials come
 * first, one for each host before the exit in host order, each with that
 * host's block, and must agree with want where they have decided, each
 * deciding at least what the one before it did. */
static size_t
stream_bytes(char *answer, unsigned char *out, int *events,
    const unsigned char *want)
{
	char *ev, *save = NULL;
	size_t n = 0, was_masked = WINDOW + 1;
	int done = 0, parts = 0;

	*events = 0;
	for (ev = strtok_r(answer, "\n", &save); ev != NULL;
	    ev = strtok_r(NULL, "\n", &save)) {
		json_t *o, *ch, *partial;

		ck_assert_msg(strncmp(ev, "data: ", 6) == 0 && !done, "event "
		    "'%.60s'", ev);
		if (strcmp(ev + 6, "[DONE]") == 0) {
			done = 1;
			continue;
		}
		ck_assert_ptr_nonnull(o = json_loads(ev + 6, JSON_ALLOW_NUL,
		    NULL));
		ch = json_array_get(json_object_get(o, "choices"), 0);
		n += unbase64(json_string_value(json_object_get(ch, "bytes")),
		    out + n);
		if ((partial = json_object_get(o, "partial")) != NULL) {
			unsigned char view[WINDOW];
			size_t k = unbase64(json_string_value(json_object_get(
			    partial, "bytes")), view), i, m = 0;
			json_t *masked = json_object_get(partial, "masked");
			/* host line h serves block HOSTS + 1 - h */
			int h = ++parts, b = HOSTS + 1 - h;
			char addr[32];

			snprintf(addr, sizeof(addr), "127.0.0.1:%d",
			    base_port + h - 1);
			ck_assert_int_eq(*events, h - 1);
			ck_assert_int_eq(json_integer_value(json_object_get(
			    partial, "host")), h);
			ck_assert_str_eq(json_string_value(json_object_get(
			    partial, "addr")), addr);
			ck_assert_int_eq(json_integer_value(json_array_get(
			    json_object_get(partial, "blocks"), 0)), b);
			ck_assert_int_eq(json_integer_value(json_array_get(
			    json_object_get(partial, "blocks"), 1)), b);
			ck_assert_int_eq(json_integer_value(json_object_get(
			    partial, "next_block")), b - 1);
			ck_assert_uint_le(json_array_size(masked), was_masked);
			was_masked = json_array_size(masked);

			for (i = 0; i < k; i++) {
				if (m < json_array_size(masked) && (size_t)
				    json_integer_value(json_array_get(masked, m)) == i)
					m++;
				else
					ck_assert_msg(view[i] == want[i], "partial "
					    "byte %zu decided otherwise", i);
			}
		}
		(*events)++;
		json_decref(o);
	}
	ck_assert_msg(done, "no [DONE] at the end");
	/* the windows, then one event with the end */
	if (parts > 0)
		ck_assert_int_eq(*events, parts + 1);
	return n;
}

static void
check_mode(const char *mode, const char *prompt, int length, int seed)
{
	unsigned char want[WINDOW], got[WINDOW], *answer;
	char body[256];
	size_t n, alen;
	int events;

	n = generate(mode, prompt, length, seed, want);
	snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":%d,"
	    "\"temperature\":0.9,\"seed\":%d,\"mode\":\"%s\",\"steps\":8}",
	    prompt, length, seed, mode);
	ck_assert_int_eq(curl_post(base_port, NULL, body, &answer, &alen), 200);
	ck_assert_uint_eq(completion_bytes(answer, got, (int)strlen(prompt)),
	    n);
	ck_assert_msg(memcmp(got, want, n) == 0, "%s seed %d: the completion "
	    "and shardmeter generate differ", mode, seed);
	free(answer);
	snprintf(body + strlen(body) - 1, sizeof(body) - strlen(body) + 1,
	    ",\"stream\":true}");
	ck_assert_int_eq(curl_post(base_port, NULL, body, &answer, &alen), 200);
	memset(got, 0, sizeof(got));
	ck_assert_uint_eq(stream_bytes((char *)answer, got, &events, want), n);
	ck_assert_msg(memcmp(got, want, n) == 0, "%s seed %d: the stream and "
	    "shardmeter generate differ", mode, seed);
	/* ar: a byte an event; blocktrain: the window of each host before
	 * the exit (the entry's, the middle one's), then the end */
	ck_assert_int_eq(events, strcmp(mode, "ar") == 0 ? length : HOSTS);
	free(answer);
}

START_TEST(test_same_as_generate)
{
	check_mode("blocktrain", "The ", 24, 3);
	check_mode("blocktrain", "x", 40, 11);
	check_mode("ar", "The ", 12, 3);
	check_mode("ar", "ab", 9, 5);
}
END_TEST

/* The ring's links ------------------------------------------------------- */

/* What the hosts' statuses say of the ring: bytes in and out, and the
 * compute of the jobs done, in microseconds. */
typedef struct {
	long long in[HOSTS], out[HOSTS], jobs[HOSTS];
	double compute_s[HOSTS];
} ring_meter;

static void
ring_read(ring_meter *m)
{
	int i;

	for (i = 0; i < HOSTS; i++) {
		json_t *st = tu_status(base_port + i), *b;

		ck_assert_ptr_nonnull(st);
		b = json_object_get(st, "bytes");
		m->in[i] = json_integer_value(json_object_get(json_object_get(b,
		    "in"), "ring"));
		m->out[i] = json_integer_value(json_object_get(json_object_get(b,
		    "out"), "ring"));
		m->jobs[i] = json_integer_value(json_object_get(st, "jobs"));
		m->compute_s[i] = json_real_value(json_object_get(st,
		    "job_compute_s"));
		json_decref(st);
	}
}

static size_t
frame_size(const pl_frame *f)
{
	char *buf, err[KN_ERR_LEN];
	size_t len;

	ck_assert_int_eq(pl_frame_encode(f, &buf, &len, err), 0);
	free(buf);
	return len;
}

/* The bytes each link of the ring carries for one BlockTrain request
 * (ring id id, prompt plen, output len, steps 8, temperature 0.9, seed)
 * whose hosts' jobs took compute_us[h]: host h's out is host h + 1's
 * in.  Its frames: bt from each host before the exit, with the compute
 * so far and the hops; out from the exit; with stream, the flag on each
 * bt and the part frame of the middle host, carried on by the exit. */
/* The decode of the ring's bt frames for a request that names none: the
 * spec default's, absent (0) for random. */
static int
default_decode(void)
{
	pr_spec d;
	int i;

	pr_spec_defaults(&d);
	for (i = 1; pr_decoders[i] != NULL; i++)
		if (strcmp(pr_decoders[i], d.decode) == 0)
			return 1 + i;
	return 0;
}

static void
ring_expect(uint64_t id, int plen, int len, uint64_t seed,
    const uint64_t compute_us[HOSTS], int stream, long long out[HOSTS])
{
	unsigned char win[WINDOW] = { 0 }, mask[WINDOW] = { 0 };
	pl_frame bt = { .type = PL_BT, .id = id, .steps = 8,
	    .temperature = 0.9, .seed = seed, .fixed = plen, .end = plen + len,
	    .data = win, .data_len = WINDOW, .mask = mask, .mask_len = WINDOW,
	    .stream = stream, .decode = default_decode() };
	pl_frame part = { .type = PL_PART, .id = id, .data = win,
	    .data_len = WINDOW, .mask = mask, .mask_len = WINDOW };
	pl_frame o = { .type = PL_OUT, .id = id, .data = win, .data_len =
	    (size_t)len, .hops = HOSTS, .traversals = 1 };
	long long parts = 0;        /* carried on by each next host */
	int h;

	for (h = 0; h < HOSTS; h++) {
		bt.compute_us += compute_us[h];
		bt.hops = h + 1;
		bt.block = HOSTS - 1 - h;
		if (stream && h > 0 && h < HOSTS - 1) {
			part.host = h + 1;
			part.block = bt.block;
			parts += (long long)frame_size(&part);
		}
		o.compute_us = bt.compute_us;
		out[h] = parts + (long long)frame_size(h < HOSTS - 1 ? &bt : &o);
	}
}

START_TEST(test_ring_bytes)
{
	static const char body[] = "{\"prompt\":\"ab\",\"max_tokens\":10,"
	    "\"temperature\":0.9,\"seed\":7,\"steps\":8%s}";
	unsigned char want[WINDOW], got[WINDOW], *answer;
	char text[256];
	size_t alen;
	int stream, events, h;

	generate("blocktrain", "ab", 10, 7, want);
	for (stream = 0; stream < 2; stream++) {
		ring_meter before, after;
		long long expect[HOSTS];
		uint64_t compute_us[HOSTS], id;
		const char *idp;

		ring_read(&before);
		snprintf(text, sizeof(text), body, stream ? ",\"stream\":true" :
		    "");
		ck_assert_int_eq(curl_post(base_port, NULL, text, &answer,
		    &alen), 200);
		if (stream)
			ck_assert_uint_eq(stream_bytes((char *)answer, got, &events,
			    want), 10);
		else
			ck_assert_uint_eq(completion_bytes(answer, got, 2), 10);
		ck_assert_mem_eq(got, want, 10);
		/* the ring's id of the request is the completion's */
		ck_assert_ptr_nonnull(idp = strstr((char *)answer,
		    "\"id\":\"cmpl-"));
		id = strtoull(idp + 11, NULL, 16);
		free(answer);
		ring_read(&after);
		for (h = 0; h < HOSTS; h++) {
			ck_assert_int_eq(after.jobs[h] - before.jobs[h], 1);
			compute_us[h] = (uint64_t)((after.compute_s[h] -
			    before.compute_s[h]) * 1e6 + 0.5);
		}
		ring_expect(id, 2, 10, 7, compute_us, stream, expect);
		for (h = 0; h < HOSTS; h++) {
			ck_assert_msg(after.out[h] - before.out[h] == expect[h],
			    "stream %d: host %d sent %lld ring bytes, not %lld",
			    stream, h + 1, after.out[h] - before.out[h],
			    expect[h]);
			ck_assert_int_eq(after.in[(h + 1) % HOSTS] -
			    before.in[(h + 1) % HOSTS], expect[h]);
		}
	}
}
END_TEST

/* A bad body's status and that its JSON error has a message. */
static void
bad(const char *body, long want, const char *says)
{
	unsigned char *answer;
	size_t len;
	json_t *o;
	const char *msg;

	ck_assert_int_eq(curl_post(base_port, NULL, body, &answer, &len), want);
	ck_assert_ptr_nonnull(o = json_loads((char *)answer, JSON_ALLOW_NUL,
	    NULL));
	msg = json_string_value(json_object_get(json_object_get(o, "error"),
	    "message"));
	ck_assert_msg(msg != NULL && strstr(msg, says) != NULL, "%s: '%s'",
	    body, msg ? msg : "(none)");
	json_decref(o);
	free(answer);
}

START_TEST(test_bad_input)
{
	/* each a 400 whose message says what was wrong */
	static const struct {
		const char *body, *says;
	} cases[] = {
		{ "{\"prompt\": \"a\", ", "invalid JSON" },
		{ "[1, 2]", "JSON object" },
		{ "{\"max_tokens\": 4}", "prompt" },
		{ "{\"prompt\": 7}", "prompt must be a string" },
		{ "{\"prompt\": \"a\", \"max_tokens\": \"4\"}",
		    "max_tokens must be an integer" },
		{ "{\"prompt\": \"a\", \"max_tokens\": 0}", "at least 1" },
		{ "{\"prompt\": \"abcd\", \"max_tokens\": 61}", "window of 64" },
		{ "{\"prompt\": \"" "0123456789abcdef0123456789abcdef"
		    "0123456789abcdef0123456789abcdef\"}", "no room" },
		{ "{\"prompt\": \"a\", \"mode\": \"gpt\"}", "blocktrain or ar" },
		{ "{\"prompt\": \"a\", \"stream\": 1}", "true or false" },
		{ "{\"prompt\": \"a\", \"temperature\": -1}", "temperature" },
		{ "{\"prompt\": \"\", \"mode\": \"ar\", \"max_tokens\": 3}",
		    "at least one byte" },
	};
	tu_body b;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		bad(cases[i].body, 400, cases[i].says);
	ck_assert_int_eq(tu_http("GET", base_port, "/v1/completions", NULL,
	    NULL, 0, &b), 405);
	ck_assert_ptr_nonnull(strstr(b.data, "\"message\""));
	free(b.data);
	ck_assert_int_eq(tu_http("GET", base_port, "/v1/nothing", NULL, NULL,
	    0, &b), 404);
	free(b.data);
	/* completions go to the entry */
	ck_assert_int_eq(tu_http("POST", base_port + 1, "/v1/completions",
	    NULL, "{\"prompt\":\"a\"}", 14, &b), 421);
	ck_assert_ptr_nonnull(strstr(b.data, "not the entry"));
	free(b.data);
}
END_TEST

/* Requests sent ahead on one connection are answered in their order: a
 * completion (answered later, from the ring), then the status; a 405
 * says what the path allows. */
START_TEST(test_pipelined_in_order)
{
	static const char body[] = "{\"prompt\":\"ab\",\"max_tokens\":5,"
	    "\"steps\":4}";
	char req[512], answer[16384];
	const char *done, *status;
	size_t len = 0;
	ssize_t n;
	tu_tls *t;
	tu_body b;

	snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s"
	    "GET /v1/status HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
	    strlen(body), body);
	ck_assert_ptr_nonnull(t = tu_tls_connect(base_port));
	ck_assert_int_eq(tu_tls_write(t, req, strlen(req)), 0);
	while (len < sizeof(answer) - 1 && (n = tu_tls_read(t, answer + len,
	    sizeof(answer) - 1 - len, 10)) > 0)
		len += (size_t)n;
	answer[len] = '\0';
	tu_tls_close(t);
	ck_assert_int_eq(strncmp(answer, "HTTP/1.1 200 OK\r\n", 17), 0);
	ck_assert_ptr_nonnull(done = strstr(answer, "\"text_completion\""));
	ck_assert_ptr_nonnull(status = strstr(answer, "\"pipeline-host\""));
	ck_assert(done < status);
	ck_assert_ptr_nonnull(strstr(done, "HTTP/1.1 200 OK\r\n"));
	ck_assert_ptr_nonnull(strstr(done, "Connection: close\r\n"));
	ck_assert_int_eq(tu_http("DELETE", base_port, "/v1/status", NULL, NULL,
	    0, &b), 405);
	ck_assert_ptr_nonnull(strstr(b.data, "DELETE is not allowed on "
	    "/v1/status (GET)"));
	free(b.data);
}
END_TEST

/* Integers from outside ---------------------------------------------------- */

/* A completion of the ring still answered whole: the entry and its
 * links survived what came before. */
static void
still_serves(void)
{
	unsigned char *answer, got[WINDOW];
	size_t len;
	int h;

	ck_assert_int_eq(curl_post(base_port, NULL, "{\"prompt\":\"ab\","
	    "\"max_tokens\":5,\"steps\":4}", &answer, &len), 200);
	ck_assert_uint_eq(completion_bytes(answer, got, 2), 5);
	free(answer);
	for (h = 0; h < HOSTS; h++)
		ck_assert_int_eq(tu_status_int(base_port + h, "in_flight"), 0);
}

/* max_tokens, steps and seed past every bound an int or the window
 * has, whole and streamed: each a 400 that names the field, and the
 * ring goes on serving.  max_tokens near 2^63 once wrapped the window
 * check to an output of -1 byte: a 502 and a dropped link whole, a heap
 * overflow streamed. */
START_TEST(test_hostile_integers)
{
	static const char *const tokens[] = { "9223372036854775807",
	    "9223372036854775806", "9223372036854775746",
	    "-9223372036854775808", "4294967297", "4294967296",
	    "2147483648", "2147483647", "-2147483648", "-1", "63" };
	static const struct {
		const char *body, *says;
	} others[] = {
		{ "{\"prompt\":\"ab\",\"steps\":9223372036854775807}", "steps" },
		{ "{\"prompt\":\"ab\",\"steps\":4294967297}", "steps" },
		{ "{\"prompt\":\"ab\",\"steps\":-9223372036854775808}",
		    "steps" },
		{ "{\"prompt\":\"ab\",\"seed\":-9223372036854775808}", "seed" },
		{ "{\"prompt\":\"ab\",\"max_tokens\":99999999999999999999}",
		    "invalid JSON" },
		{ "{\"prompt\":\"ab\",\"max_tokens\":1e300}",
		    "max_tokens must be an integer" },
	};
	char body[160];
	size_t i;
	int stream;

	for (stream = 0; stream < 2; stream++)
		for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
			snprintf(body, sizeof(body), "{\"prompt\":\"ab\","
			    "\"max_tokens\":%s%s}", tokens[i], stream ?
			    ",\"stream\":true" : "");
			bad(body, 400, "max_tokens");
		}
	for (i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		bad(others[i].body, 400, others[i].says);
	still_serves();
}
END_TEST

/* A completion's cost is capped: steps past PL_STEPS_MAX are refused,
 * over HTTP and in a client's gen frame, and the cap itself is served. */
START_TEST(test_expensive_refused)
{
	pc_request r = { .mode = PL_MODE_BT, .prompt = "ab", .prompt_len = 2,
	    .length = 4, .steps = 1048576, .temperature = 1, .seed = 1 };
	char body[128], addr[32], err[KN_ERR_LEN];
	unsigned char *answer;
	pc_result res;
	size_t len;

	bad("{\"prompt\":\"ab\",\"steps\":1048576}", 400, "steps");
	snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"steps\":%d,"
	    "\"stream\":true}", PL_STEPS_MAX + 1);
	bad(body, 400, "steps");
	snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":4,"
	    "\"steps\":%d}", PL_STEPS_MAX);
	ck_assert_int_eq(curl_post(base_port, NULL, body, &answer, &len), 200);
	free(answer);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", base_port);
	ck_assert_msg(pc_generate(addr, operator_tls, tu_port_pin(base_port),
	    &r, &res, 5000, err) == 0, "%s", err);
	ck_assert_msg(!res.ok && strstr(res.error, "steps") != NULL, "a gen "
	    "frame of 2^20 steps: ok %d, '%s'", res.ok, res.error);
	pc_result_clear(&res);
	still_serves();
}
END_TEST

/* Clients that send a costly completion and close at once: their work
 * is cancelled at the entry and round the ring (the entry counts it),
 * and a completion after them is answered. */
START_TEST(test_client_gone_cancels)
{
	char body[128], req[512];
	long long before, after = 0, dropped = 0;
	double t0, t;
	int i, h;

	before = tu_status_int(base_port, "cancelled");
	snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":60,"
	    "\"steps\":%d}", PL_STEPS_MAX);
	snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
	    strlen(body), body);
	for (i = 0; i < 4; i++) {
		tu_tls *c = tu_tls_connect(base_port);

		ck_assert_ptr_nonnull(c);
		ck_assert_int_eq(tu_tls_write(c, req, strlen(req)), 0);
		tu_tls_close(c);
	}
	/* bounded: the requests end, cancelled or (had they finished
	 * first) answered */
	for (t = 0; t < 30 && tu_status_int(base_port, "in_flight") > 0;
	    t += 0.05)
		usleep(50000);
	after = tu_status_int(base_port, "cancelled");
	for (h = 0; h < HOSTS; h++)
		dropped += tu_status_int(base_port + h, "jobs_cancelled");
	ck_assert_msg(after > before, "no request was cancelled when its "
	    "client closed");
	t0 = kn_now();
	still_serves();
	fprintf(stderr, "check_serve_http: %lld of 4 closed requests "
	    "cancelled, %lld jobs dropped on the hosts; the next completion "
	    "took %.3f s\n", after - before, dropped, kn_now() - t0);
}
END_TEST

/* A request that times out at the entry (the middle host stopped) is
 * cancelled round the ring: the middle host, once it runs again, drops
 * the work its end frame overtook instead of computing it for no one. */
START_TEST(test_timeout_cancels_ring)
{
	char body[128];
	unsigned char *answer;
	long long before, dropped;
	size_t len;
	long status;
	double t;

	before = tu_status_int(base_port, "cancelled");
	dropped = tu_status_int(base_port + 1, "jobs_cancelled");
	snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":60,"
	    "\"steps\":%d}", PL_STEPS_MAX);
	kill(host_pid[1], SIGSTOP);
	/* answered when pipeline_timeout_ms (5 s) has passed */
	status = curl_post(base_port, NULL, body, &answer, &len);
	kill(host_pid[1], SIGCONT);
	ck_assert_int_eq(status, 504);
	free(answer);
	ck_assert_int_gt(tu_status_int(base_port, "cancelled"), before);
	for (t = 0; t < 10 && tu_status_int(base_port + 1, "jobs_cancelled") ==
	    dropped; t += 0.05)
		usleep(50000);
	ck_assert_msg(tu_status_int(base_port + 1, "jobs_cancelled") > dropped,
	    "the middle host computed a request the entry had cancelled");
	still_serves();
}
END_TEST

/* Status and metrics -------------------------------------------------------- */

static long long
get(json_t *o, const char *a, const char *b, const char *c)
{
	json_t *v = json_object_get(o, a);

	if (b != NULL)
		v = json_object_get(v, b);
	if (c != NULL)
		v = json_object_get(v, c);
	ck_assert_msg(json_is_integer(v), "status %s.%s.%s", a, b ? b : "",
	    c ? c : "");
	return json_integer_value(v);
}

/* GET /v1/status sent as exact bytes; the JSON in *o, the answer's
 * length returned. */
static size_t
raw_status(json_t **o, size_t *sent)
{
	static const char req[] = "GET /v1/status HTTP/1.1\r\nHost: t\r\n"
	    "Connection: close\r\n\r\n";
	static char answer[65536];
	char *body;

	ck_assert_int_eq(tu_raw_request(base_port, req, answer,
	    sizeof(answer)), 200);
	ck_assert_ptr_nonnull(body = strstr(answer, "\r\n\r\n"));
	ck_assert_ptr_nonnull(*o = json_loads(body + 4, JSON_ALLOW_NUL,
	    NULL));
	*sent = strlen(req);
	return strlen(answer);
}

/* The value of the sample name ("name{labels}": those among the labels
 * the host adds to every sample). */
static double
metric(const char *text, const char *name)
{
	double v;

	ck_assert_msg(tu_sample(text, name, &v), "no metric %s", name);
	return v;
}

START_TEST(test_status_counts)
{
	enum { NHTTP = 5, NFRAMES = 3, NBAD = 2 };
	char req[512], answer[8192], addr[32], err[KN_ERR_LEN];
	json_t *before, *after, *lat;
	size_t in = 0, out = 0, sent, fin = 0, fout = 0, len;
	long long hops = -1;
	tu_body m;
	int i;

	/* the answer to this one is counted in the next */
	out = raw_status(&before, &sent);
	for (i = 0; i < NHTTP + NBAD; i++) {
		const char *body = i < NHTTP ? "{\"prompt\":\"ab\","
		    "\"max_tokens\":6,\"steps\":4,\"seed\":9}" : "{\"prompt\":";

		snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\n"
		    "Host: t\r\nConnection: close\r\nContent-Type: "
		    "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		    strlen(body), body);
		ck_assert_int_eq(tu_raw_request(base_port, req, answer,
		    sizeof(answer)), i < NHTTP ? 200 : 400);
		in += strlen(req);
		out += strlen(answer);
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", base_port);
	for (i = 0; i < NFRAMES; i++) {
		pc_request r = { .mode = PL_MODE_BT, .prompt = "xyz",
		    .prompt_len = 3, .length = 7, .steps = 4, .temperature = 1,
		    .seed = 2 };
		pl_frame f = { .type = PL_GEN, .mode = PL_MODE_BT, .length = 7,
		    .steps = 4, .temperature = 1, .seed = 2 };
		pc_result res;
		char *buf;

		ck_assert_msg(pc_generate(addr, operator_tls,
		    tu_port_pin(base_port), &r, &res, 5000, err) == 0 && res.ok,
		    "%s", err);
		f.id = res.id;
		f.data = (unsigned char *)"xyz";
		f.data_len = 3;
		ck_assert_int_eq(pl_frame_encode(&f, &buf, &len, err), 0);
		free(buf);
		fin += len;
		fout += res.frame_bytes;
		hops = res.hops;
		pc_result_clear(&res);
	}
	/* this status's own request is counted in it */
	raw_status(&after, &len);
	in += len;
	ck_assert_int_eq(get(after, "requests", "total", NULL) -
	    get(before, "requests", "total", NULL), NHTTP + NFRAMES);
	ck_assert_int_eq(get(after, "served", NULL, NULL) - get(before,
	    "served", NULL, NULL), NHTTP + NFRAMES);
	ck_assert_int_eq(get(after, "latency", "count", NULL) - get(before,
	    "latency", "count", NULL), NHTTP + NFRAMES);
	ck_assert_int_eq(get(after, "http_requests", NULL, NULL) - get(before,
	    "http_requests", NULL, NULL), NHTTP + NBAD + 1);
	ck_assert_int_eq(get(after, "errors", "invalid", NULL) - get(before,
	    "errors", "invalid", NULL), NBAD);
	ck_assert_int_eq(get(after, "in_flight", NULL, NULL), 0);
	ck_assert_int_eq(get(after, "bytes", "in", "http") - get(before,
	    "bytes", "in", "http"), (long long)in);
	ck_assert_int_eq(get(after, "bytes", "out", "http") - get(before,
	    "bytes", "out", "http"), (long long)(out));
	ck_assert_int_eq(get(after, "bytes", "in", "client") - get(before,
	    "bytes", "in", "client"), (long long)fin);
	ck_assert_int_eq(get(after, "bytes", "out", "client") - get(before,
	    "bytes", "out", "client"), (long long)fout);
	/* every request takes the same hops on this ring */
	ck_assert_int_eq(get(after, "hops", NULL, NULL) - get(before, "hops",
	    NULL, NULL), (NHTTP + NFRAMES) * hops);
	ck_assert_int_ge(get(after, "kv_cache", "bytes", NULL), 0);
	/* /metrics says the same as a later status */
	ck_assert_int_eq(tu_http_get(base_port + 10, "/metrics", &m), 200);
	ck_assert(metric(m.data, "blocktrain_serve_requests_total"
	    "{mode=\"blocktrain\"}") + metric(m.data,
	    "blocktrain_serve_requests_total{mode=\"ar\"}") == (double)get(after,
	    "requests", "total", NULL));
	ck_assert(metric(m.data, "blocktrain_serve_latency_seconds_count") ==
	    (double)get(after, "latency", "count", NULL));
	/* the slowest request is one of those the mean is over */
	lat = json_object_get(after, "latency");
	ck_assert(json_is_number(json_object_get(lat, "max_ms")) &&
	    json_is_number(json_object_get(lat, "max_compute_ms")));
	ck_assert(json_number_value(json_object_get(lat, "max_ms")) >=
	    json_number_value(json_object_get(lat, "mean_ms")) * (1 - 1e-9));
	ck_assert(json_number_value(json_object_get(lat, "max_compute_ms"))
	    >= 0);
	ck_assert(fabs(metric(m.data, "blocktrain_serve_latency_max_seconds") *
	    1e3 - json_number_value(json_object_get(lat, "max_ms"))) < 1e-2);
	ck_assert(metric(m.data, "blocktrain_serve_bytes_total{direction=\"in\","
	    "kind=\"client\"}") == (double)get(after, "bytes", "in", "client"));
	ck_assert(metric(m.data, "blocktrain_serve_errors_total{kind="
	    "\"invalid\"}") == (double)get(after, "errors", "invalid", NULL));
	free(m.data);
	json_decref(before);
	json_decref(after);
}
END_TEST

/* shardmeter status on the host list: a line per host, and the JSON
 * that is the hosts' own statuses. */
START_TEST(test_cli_status)
{
	char out[8192], want[64];
	json_t *o, *hosts, *mine;
	int i;

	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s status --peers %s/hosts",
	    tu_shardmeter(), dir) == 0, "%s", out);
	for (i = 0; i < HOSTS; i++) {
		snprintf(want, sizeof(want), "127.0.0.1:%d", base_port + i);
		ck_assert_msg(strstr(out, want) != NULL, "no line for %s: %s",
		    want, out);
	}
	ck_assert_ptr_nonnull(strstr(out, "entry"));
	ck_assert_ptr_nonnull(strstr(out, "inner"));
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s status --peers %s/hosts "
	    "--json", tu_shardmeter(), dir) == 0, "%s", out);
	ck_assert_ptr_nonnull(o = json_loads(out, JSON_ALLOW_NUL, NULL));
	hosts = json_object_get(o, "hosts");
	ck_assert_int_eq(json_array_size(hosts), HOSTS);
	mine = tu_status(base_port);
	ck_assert_ptr_nonnull(mine);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(
	    hosts, 0), "role")), "pipeline-host");
	/* the requests the command saw are those of the status after it */
	ck_assert_int_eq(get(json_array_get(hosts, 0), "requests", "total",
	    NULL), get(mine, "requests", "total", NULL));
	ck_assert_int_eq(get(json_array_get(hosts, 1), "host", NULL, NULL), 2);
	json_decref(mine);
	json_decref(o);
}
END_TEST

/* promtool check metrics on the text at port's /metrics. */
static void
promtool(int port, const char *name)
{
	char path[128], out[4096];
	tu_body m;

	if (tu_run_cmd(NULL, 0, "command -v promtool >/dev/null") != 0) {
		fprintf(stderr, "check_serve_http: promtool is not installed "
		    "(Debian package prometheus): %s /metrics not checked\n",
		    name);
		return;
	}
	ck_assert_int_eq(tu_http_get(port, "/metrics", &m), 200);
	tu_write_file(dir, name, m.data);
	free(m.data);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "promtool check metrics < "
	    "%s 2>&1", path) == 0, "promtool on %s: %s", name, out);
}

/* Every sample of a host's /metrics carries the run, the host's line in
 * the list and the blocks it serves, as its status gives them. */
static void
host_labels(int i)
{
	char want[256];
	json_t *st, *blocks;
	tu_body m;
	double v;

	ck_assert_ptr_nonnull(st = tu_status(base_port + i));
	blocks = json_object_get(st, "blocks");
	snprintf(want, sizeof(want), "blocktrain_serve_uptime_seconds{run="
	    "\"%s\",host=\"%d\",blocks=\"%lld-%lld\"}",
	    json_string_value(json_object_get(st, "run_id")), i + 1,
	    json_integer_value(json_array_get(blocks, 1)),
	    json_integer_value(json_array_get(blocks, 0)));
	json_decref(st);
	ck_assert_int_eq(tu_http_get(base_port + 10 + i, "/metrics", &m), 200);
	ck_assert_msg(tu_sample(m.data, want, &v) && v >= 0, "no %s", want);
	free(m.data);
}

START_TEST(test_promtool)
{
	char text[512], state[128], listen[32], log[128], spec[128];
	char peers[128], conf[128];
	pid_t pid;
	int port = base_port + 5;
	long long mport;
	json_t *st;

	host_labels(0);
	host_labels(1);
	promtool(base_port + 10, "serve.metrics");
	promtool(base_port + 11, "serve2.metrics");
	/* a training daemon of one block beside it */
	tu_write_run(dir, 1, 100000, 1, 30);
	snprintf(text, sizeof(text), "eval_every = 100\neval_windows = 8\n"
	    "metrics_listen = 127.0.0.1:%d\n", base_port + 6);
	tu_write_file(dir, "daemon.conf", text);
	snprintf(state, sizeof(state), "%s/train", dir);
	text[0] = '\0';
	tu_peer_line(text, sizeof(text), port, 1, state);
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(log, sizeof(log), "%s/train.log", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	pid = tu_daemon_start(log, port, "-f", "-c", conf, "-l", listen, "-b",
	    "1", "-s", state, "-p", peers, "-r", spec, "-D", "cpu", "-t", "1",
	    (char *)NULL);
	ck_assert_ptr_nonnull(st = tu_status(port));
	mport = atoll(strrchr(json_string_value(json_object_get(st,
	    "metrics")), ':') + 1);
	json_decref(st);
	promtool((int)mport, "train.metrics");
	tu_stop(&pid, SIGTERM, 15);
}
END_TEST

/* Who may ask -------------------------------------------------------------- */

START_TEST(test_unlisted_and_open_entry)
{
	char stranger[128], out[256];
	unsigned char *answer;
	size_t len;
	tu_body b;

	snprintf(stranger, sizeof(stranger), "%s/stranger", dir);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s init --dir %s",
	    tu_shardmeter(), stranger), 0);
	/* refused in the handshake: no HTTP answer at all */
	ck_assert_int_eq(curl_post(base_port, stranger, "{\"prompt\":\"a\"}",
	    &answer, &len), 0);
	free(answer);
	/* an open entry takes it, and keeps its status to the list */
	tu_stop(&host_pid[0], SIGTERM, 15);
	write_conf("open.conf", 0, "pipeline_open_entry = yes\n");
	start_host(0, "open.conf");
	wait_ring();
	ck_assert_int_eq(curl_post(base_port, stranger, "{\"prompt\":\"a\","
	    "\"max_tokens\":3}", &answer, &len), 200);
	ck_assert_ptr_nonnull(strstr((char *)answer, "text_completion"));
	free(answer);
	/* without max_tokens: what the window of 64 leaves after 4 bytes */
	ck_assert_int_eq(curl_post(base_port, stranger, "{\"prompt\":\"abcd\","
	    "\"steps\":2}", &answer, &len), 200);
	ck_assert_ptr_nonnull(strstr((char *)answer, "\"completion_tokens\":60"));
	free(answer);
	tu_act_as(stranger);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/status", &b), 403);
	free(b.data);
	tu_act_as(NULL);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/status", &b), 200);
	free(b.data);
	/* the test runs in a child of its own: the host it started ends
	 * with it */
	tu_stop(&host_pid[0], SIGTERM, 15);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("serve_http");
	TCase *tc = tcase_create("http");

	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, setup_once, teardown_once);
	tcase_add_test(tc, test_same_as_generate);
	tcase_add_test(tc, test_ring_bytes);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_pipelined_in_order);
	tcase_add_test(tc, test_hostile_integers);
	tcase_add_test(tc, test_expensive_refused);
	tcase_add_test(tc, test_client_gone_cancels);
	tcase_add_test(tc, test_timeout_cancels_ring);
	tcase_add_test(tc, test_status_counts);
	tcase_add_test(tc, test_cli_status);
	tcase_add_test(tc, test_promtool);
	/* last: it restarts the entry as an open one */
	tcase_add_test(tc, test_unlisted_and_open_entry);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
