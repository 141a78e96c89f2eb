/* The OpenAI fields of POST /v1/completions and GET /v1/models on real
 * pipeline hosts over TLS on loopback: ring A, two hosts of a logical
 * shape whose entry takes the host list's clients only (the test's
 * operator is one), and ring B, one host that is an open entry with a
 * model_name of its own.  Requests go through the curl binary, as an
 * OpenAI client's would: n choices each the answer of its own seed,
 * stop strings (whole and streamed, both modes), echo, logprobs (the
 * chosen byte's against its alternatives), the model's name and a wrong
 * one, the fields that are refused by name, n against an open client's
 * quota, and a client without a certificate: told so by a 401 at the
 * open entry, refused in the handshake elsewhere. */
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
#include "kernels/error.h"
#include "proto/pipeline.h"
#include "tests/testutil.h"

#define A_HOSTS 2
#define WINDOW 64
#define A_MODEL "blocktrain-2b-2l-d32-w64"
#define B_MODEL "tiny-test"

static char dir[64];
static int base_port;
static pid_t pid_a[A_HOSTS], pid_b;
static tls_ctx *operator_tls;

/* Ports: ring A at base, base + 1; ring B at base + 2; /metrics at
 * + 20. */
static void
start_host(pid_t *pid, int port, const char *hosts, const char *more)
{
	char listen[32], hpath[128], log[128], state[128], conf[160], text[256];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(hpath, sizeof(hpath), "%s/%s", dir, hosts);
	snprintf(log, sizeof(log), "%s/log%d", dir, port - base_port);
	snprintf(state, sizeof(state), "%s/host%d", dir, port - base_port);
	snprintf(conf, sizeof(conf), "serve%d.conf", port - base_port);
	snprintf(text, sizeof(text), "pipeline_timeout_ms = 5000\n"
	    "metrics_listen = 127.0.0.1:%d\n%s", port + 20, more);
	tu_write_file(dir, conf, text);
	snprintf(conf, sizeof(conf), "%s/serve%d.conf", dir, port - base_port);
	*pid = tu_daemon_start(log, port, "-S", "-f", "-c", conf, "-L", listen,
	    "-P", hpath, "-s", state, "-D", "cpu", "-t", "1", (char *)NULL);
}

/* Until a request goes through the ring of the entry at port. */
static void
wait_ring(int port)
{
	pc_request r = { .mode = PL_MODE_BT, .prompt = "a", .prompt_len = 1,
	    .length = 2, .steps = 2, .temperature = 1, .seed = 1 };
	pc_result res;
	char err[KN_ERR_LEN], addr[32];
	double t;
	int ok = 0;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	for (t = 0; !ok && t < 20; t += 0.1) {
		if (pc_generate(addr, operator_tls, tu_port_pin(port), &r, &res,
		    2000, err) == 0 && res.ok)
			ok = 1;
		else
			usleep(100000);
		pc_result_clear(&res);
	}
	ck_assert_msg(ok, "the ring at %d did not come up", port);
}

static void
setup_once(void)
{
	char a[1024] = "shape width=32 heads=2 layers=1 window=64 blocks=2 "
	    "seed=3\n", b[1024] = "shape width=32 heads=2 layers=1 window=64 "
	    "blocks=1 seed=4\n", state[128], err[KN_ERR_LEN];
	int i;

	signal(SIGPIPE, SIG_IGN);
	tu_temp_dir(dir, sizeof(dir), "check_serve_openai");
	tu_trust_init(dir);
	ck_assert_msg(tls_ctx_new(&operator_tls, tu_client_dir(), err) == 0,
	    "%s", err);
	base_port = tu_port_base(30);
	for (i = 0; i < A_HOSTS; i++) {
		snprintf(state, sizeof(state), "%s/host%d", dir, i);
		tu_peer_line(a, sizeof(a), base_port + i, A_HOSTS - i, state);
	}
	tu_client_line(a, sizeof(a));
	tu_write_file(dir, "hosts_a", a);
	snprintf(state, sizeof(state), "%s/host2", dir);
	tu_peer_line(b, sizeof(b), base_port + 2, 1, state);
	tu_client_line(b, sizeof(b));
	tu_write_file(dir, "hosts_b", b);
	for (i = 0; i < A_HOSTS; i++)
		start_host(&pid_a[i], base_port + i, "hosts_a", "");
	start_host(&pid_b, base_port + 2, "hosts_b", "pipeline_open_entry = "
	    "yes\nmodel_name = " B_MODEL "\n");
	wait_ring(base_port);
	wait_ring(base_port + 2);
}

static void
teardown_once(void)
{
	int i;

	for (i = 0; i < A_HOSTS; i++)
		tu_stop(&pid_a[i], SIGTERM, 15);
	tu_stop(&pid_b, SIGTERM, 15);
	tls_ctx_free(operator_tls);
	tu_remove_dir(dir);
}

/* HTTP through curl ------------------------------------------------------- */

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *b = malloc(1 << 20);
	size_t n;

	ck_assert_ptr_nonnull(f);
	n = fread(b, 1, (1 << 20) - 1, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

/* A request to the pipeline port with the curl binary, the host pinned
 * to its id: as the identity in as (NULL: the test's operator; "": no
 * certificate at all).  body NULL: GET path.  The answer's body in *out
 * (malloc'd, NULL when none came), the status returned (0: none). */
static long
curl_req(int port, const char *as, const char *path, const char *body,
    char **out)
{
	char pin[ID_PIN_LEN], res_path[128], raw[256], cert[300] = "";
	const char *who = as != NULL ? as : tu_client_dir();

	id_pin(tu_port_pin(port), pin);
	if (who[0] != '\0')
		snprintf(cert, sizeof(cert), "--cert %s/cert.pem --key "
		    "%s/key.pem", who, who);
	snprintf(res_path, sizeof(res_path), "%s/answer", dir);
	unlink(res_path);
	raw[0] = '\0';
	if (body != NULL)
		tu_write_file(dir, "body.json", body);
	tu_run_cmd(raw, sizeof(raw), "curl -sN %s --insecure --pinnedpubkey "
	    "'%s' --tlsv1.3 -o %s -w '%%{http_code}' %s%s%s "
	    "https://127.0.0.1:%d%s", cert, pin, res_path, body != NULL ?
	    "-H 'Content-Type: application/json' --data-binary @" : "",
	    body != NULL ? dir : "", body != NULL ? "/body.json" : "", port,
	    body != NULL ? "/v1/completions" : path);
	*out = access(res_path, F_OK) == 0 ? slurp(res_path) : NULL;
	return atol(raw);
}

/* A whole answer's JSON, its status checked. */
static json_t *
post_json(int port, const char *as, const char *body, long want)
{
	json_error_t jerr;
	char *answer;
	long status = curl_req(port, as, NULL, body, &answer);
	json_t *o;

	ck_assert_msg(status == want, "%s: status %ld, not %ld: %s", body,
	    status, want, answer ? answer : "(nothing)");
	o = json_loads(answer, 0, &jerr);
	ck_assert_msg(o != NULL, "not JSON: %s", jerr.text);
	free(answer);
	return o;
}

/* base64 into out; the byte count. */
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

static json_t *
choice(json_t *o, size_t i)
{
	json_t *c = json_array_get(json_object_get(o, "choices"), i);

	ck_assert_ptr_nonnull(c);
	return c;
}

static size_t
choice_bytes(json_t *ch, unsigned char *out)
{
	return unbase64(json_string_value(json_object_get(ch, "bytes")), out);
}

static const char *
str(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));

	return v != NULL ? v : "";
}

/* The error of an answer: its type, param and code, and words of its
 * message. */
static void
error_is(json_t *o, const char *type, const char *param, const char *code,
    const char *says)
{
	json_t *e = json_object_get(o, "error");

	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(str(e, "type"), type);
	if (param != NULL)
		ck_assert_str_eq(str(e, "param"), param);
	else
		ck_assert(json_is_null(json_object_get(e, "param")));
	if (code != NULL)
		ck_assert_str_eq(str(e, "code"), code);
	ck_assert_msg(strstr(str(e, "message"), says) != NULL, "'%s' does not "
	    "say '%s'", str(e, "message"), says);
}

/* The output of one whole completion of ring A (seed, mode, 12 bytes
 * after "ab", 4 steps) in out. */
static size_t
plain_output(const char *mode, int seed, unsigned char *out)
{
	char body[256];
	json_t *o;
	size_t n;

	snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":12,"
	    "\"steps\":4,\"seed\":%d,\"mode\":\"%s\"}", seed, mode);
	o = post_json(base_port, NULL, body, 200);
	ck_assert_str_eq(str(choice(o, 0), "finish_reason"), "length");
	n = choice_bytes(choice(o, 0), out);
	ck_assert_uint_eq(n, 12);
	json_decref(o);
	return n;
}

/* The events of a stream: the bytes of each choice index concatenated
 * (out[i], len[i]), the last finish_reason of each, and [DONE] last. */
static void
stream_choices(char *answer, unsigned char out[][WINDOW], size_t *len,
    char finish[][16], int nch)
{
	char *ev, *save = NULL;
	int done = 0, i;

	for (i = 0; i < nch; i++) {
		len[i] = 0;
		finish[i][0] = '\0';
	}
	for (ev = strtok_r(answer, "\n", &save); ev != NULL;
	    ev = strtok_r(NULL, "\n", &save)) {
		json_t *o, *ch;
		size_t k;

		ck_assert_msg(strncmp(ev, "data: ", 6) == 0 && !done, "event "
		    "'%.60s'", ev);
		if (strcmp(ev + 6, "[DONE]") == 0) {
			done = 1;
			continue;
		}
		ck_assert_ptr_nonnull(o = json_loads(ev + 6, 0, NULL));
		ck_assert_ptr_null(json_object_get(o, "error"));
		for (k = 0; k < json_array_size(json_object_get(o, "choices"));
		    k++) {
			ch = choice(o, k);
			i = (int)json_integer_value(json_object_get(ch, "index"));
			ck_assert(i >= 0 && i < nch);
			len[i] += choice_bytes(ch, out[i] + len[i]);
			if (json_is_string(json_object_get(ch, "finish_reason")))
				snprintf(finish[i], 16, "%s", str(ch,
				    "finish_reason"));
		}
		json_decref(o);
	}
	ck_assert_msg(done, "no [DONE] at the end");
}

/* The model ---------------------------------------------------------------- */

START_TEST(test_models)
{
	static const struct {
		int port;
		const char *name;
	} rings[] = { { 0, A_MODEL }, { 2, B_MODEL } };
	json_t *o, *m;
	char *answer, body[128];
	size_t i;

	for (i = 0; i < 2; i++) {
		int port = base_port + rings[i].port;

		ck_assert_int_eq(curl_req(port, NULL, "/v1/models", NULL,
		    &answer), 200);
		ck_assert_ptr_nonnull(o = json_loads(answer, 0, NULL));
		free(answer);
		ck_assert_str_eq(str(o, "object"), "list");
		ck_assert_uint_eq(json_array_size(json_object_get(o, "data")), 1);
		m = json_array_get(json_object_get(o, "data"), 0);
		ck_assert_str_eq(str(m, "id"), rings[i].name);
		ck_assert_str_eq(str(m, "object"), "model");
		ck_assert_str_eq(str(m, "owned_by"), "shardmeter");
		ck_assert(json_integer_value(json_object_get(m, "created")) >
		    1600000000);
		json_decref(o);
		/* the answers name it; a request may name it */
		snprintf(body, sizeof(body), "{\"prompt\":\"a\",\"max_tokens\":2,"
		    "\"steps\":2,\"model\":\"%s\"}", rings[i].name);
		o = post_json(port, NULL, body, 200);
		ck_assert_str_eq(str(o, "model"), rings[i].name);
		json_decref(o);
		/* and another is not there */
		o = post_json(port, NULL, "{\"prompt\":\"a\",\"model\":"
		    "\"gpt-3.5-turbo-instruct\"}", 404);
		error_is(o, "invalid_request_error", "model", "model_not_found",
		    rings[i].name);
		json_decref(o);
	}
}
END_TEST

/* n ----------------------------------------------------------------------- */

/* n choices, each the answer of its own seed (the request's plus its
 * index), whole and streamed, in both modes. */
START_TEST(test_n)
{
	static const char *modes[] = { "blocktrain", "ar" };
	unsigned char want[3][WINDOW], got[3][WINDOW];
	char body[256], finish[3][16], *answer;
	size_t len[3];
	json_t *o;
	int m, i;

	for (m = 0; m < 2; m++) {
		for (i = 0; i < 3; i++)
			plain_output(modes[m], 40 + i, want[i]);
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":40,\"mode\":\"%s\",\"n\":3}",
		    modes[m]);
		o = post_json(base_port, NULL, body, 200);
		ck_assert_uint_eq(json_array_size(json_object_get(o,
		    "choices")), 3);
		for (i = 0; i < 3; i++) {
			json_t *ch = choice(o, (size_t)i);

			ck_assert_int_eq(json_integer_value(json_object_get(ch,
			    "index")), i);
			ck_assert_uint_eq(choice_bytes(ch, got[i]), 12);
			ck_assert_msg(memcmp(got[i], want[i], 12) == 0, "%s "
			    "choice %d is not the answer of seed %d", modes[m],
			    i, 40 + i);
		}
		ck_assert_int_eq(json_integer_value(json_object_get(
		    json_object_get(o, "usage"), "completion_tokens")), 36);
		json_decref(o);
		/* streamed, with the usage at the end */
		snprintf(body + strlen(body) - 1, sizeof(body) - strlen(body) + 1,
		    ",\"stream\":true,\"stream_options\":{\"include_usage\":"
		    "true}}");
		ck_assert_int_eq(curl_req(base_port, NULL, NULL, body, &answer),
		    200);
		ck_assert_ptr_nonnull(strstr(answer, "\"completion_tokens\":36"));
		stream_choices(answer, got, len, finish, 3);
		free(answer);
		for (i = 0; i < 3; i++) {
			ck_assert_uint_eq(len[i], 12);
			ck_assert(memcmp(got[i], want[i], 12) == 0);
			ck_assert_str_eq(finish[i], "length");
		}
	}
}
END_TEST

/* stop and echo ------------------------------------------------------------ */

/* A stop string of one byte of the output (an ASCII one, so the JSON can
 * carry it) cuts each choice before the first place it occurs; a stop
 * that never occurs leaves the output whole. */
START_TEST(test_stop)
{
	static const char *modes[] = { "blocktrain", "ar" };
	unsigned char want[WINDOW], got[1][WINDOW];
	char body[320], finish[1][16], *answer, stop[16], usage[64];
	size_t len[1], cut = 0, k;
	json_t *o;
	int m, seed, found;

	for (m = 0; m < 2; m++) {
		/* a seed whose output has an ASCII byte after its first */
		for (seed = 1, found = 0; !found && seed < 200; seed++) {
			plain_output(modes[m], seed, want);
			for (k = 1; k < 12 && !found; k++)
				if (want[k] >= 0x20 && want[k] < 0x7f &&
				    want[k] != '"' && want[k] != '\\') {
					found = 1;
					for (cut = 0; want[cut] != want[k]; cut++)
						;
				}
		}
		ck_assert_msg(found, "no output with an ASCII byte");
		seed--;
		snprintf(stop, sizeof(stop), "%c", want[cut]);
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":%d,\"mode\":\"%s\",\"stop\":[\"\\u"
		    "0001\\u0002never\",\"%s\"]}", seed, modes[m], stop);
		o = post_json(base_port, NULL, body, 200);
		ck_assert_uint_eq(choice_bytes(choice(o, 0), got[0]), cut);
		ck_assert(memcmp(got[0], want, cut) == 0);
		ck_assert_str_eq(str(choice(o, 0), "finish_reason"), "stop");
		ck_assert_int_eq(json_integer_value(json_object_get(
		    json_object_get(o, "usage"), "completion_tokens")),
		    (json_int_t)cut);
		json_decref(o);
		/* streamed: no byte of the stop string, nor after it, goes */
		snprintf(body + strlen(body) - 1, sizeof(body) - strlen(body) + 1,
		    ",\"stream\":true}");
		ck_assert_int_eq(curl_req(base_port, NULL, NULL, body, &answer),
		    200);
		/* the last event has the usage, of the bytes as cut */
		snprintf(usage, sizeof(usage), "\"completion_tokens\":%zu,",
		    cut);
		ck_assert_ptr_nonnull(strstr(answer, usage));
		stream_choices(answer, got, len, finish, 1);
		free(answer);
		ck_assert_uint_eq(len[0], cut);
		ck_assert(memcmp(got[0], want, cut) == 0);
		ck_assert_str_eq(finish[0], "stop");
		/* a stop string that does not occur */
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":%d,\"mode\":\"%s\",\"stop\":"
		    "\"\\u0001\\u0002never\"}", seed, modes[m]);
		o = post_json(base_port, NULL, body, 200);
		ck_assert_uint_eq(choice_bytes(choice(o, 0), got[0]), 12);
		ck_assert_str_eq(str(choice(o, 0), "finish_reason"), "length");
		json_decref(o);
	}
}
END_TEST

/* echo: the prompt before the text, in the text and in the bytes. */
START_TEST(test_echo)
{
	unsigned char want[WINDOW], got[WINDOW + 8], stream[1][WINDOW];
	char finish[1][16], *answer;
	const char *body = "{\"prompt\":\"ab\",\"max_tokens\":12,\"steps\":4,"
	    "\"seed\":7,\"echo\":true}";
	size_t len[1];
	json_t *o;

	plain_output("blocktrain", 7, want);
	o = post_json(base_port, NULL, body, 200);
	ck_assert_uint_eq(choice_bytes(choice(o, 0), got), 14);
	ck_assert(memcmp(got, "ab", 2) == 0 && memcmp(got + 2, want, 12) == 0);
	ck_assert(strncmp(str(choice(o, 0), "text"), "ab", 2) == 0);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o,
	    "usage"), "completion_tokens")), 12);
	json_decref(o);
	ck_assert_int_eq(curl_req(base_port, NULL, NULL, "{\"prompt\":\"ab\","
	    "\"max_tokens\":12,\"steps\":4,\"seed\":7,\"echo\":true,"
	    "\"stream\":true}", &answer), 200);
	stream_choices(answer, stream, len, finish, 1);
	free(answer);
	ck_assert_uint_eq(len[0], 14);
	ck_assert(memcmp(stream[0], "ab", 2) == 0 &&
	    memcmp(stream[0] + 2, want, 12) == 0);
}
END_TEST

/* Refusals ------------------------------------------------------------------- */

START_TEST(test_refused_fields)
{
	static const struct {
		const char *more, *param, *says;
	} cases[] = {
		{ "\"suffix\":\"x\"", "suffix", "suffix is not served" },
		{ "\"top_p\":0.5", "top_p", "top_p is not served" },
		{ "\"presence_penalty\":1", "presence_penalty", "not served" },
		{ "\"frequency_penalty\":-1", "frequency_penalty", "not served" },
		{ "\"logit_bias\":{\"50256\":-100}", "logit_bias", "not served" },
		{ "\"best_of\":2", "best_of", "best_of equal to n" },
		{ "\"n\":9", "n", "1 to 8" },
		{ "\"n\":0", "n", "1 to 8" },
		{ "\"logprobs\":6", "logprobs", "0 to 5" },
		{ "\"logprobs\":true", "logprobs", "an integer" },
		{ "\"stop\":\"\"", "stop", "1 to 64 bytes" },
		{ "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop", "at most 4" },
		{ "\"stop\":7", "stop", "a string or an array" },
		{ "\"echo\":1", "echo", "true or false" },
		{ "\"model\":7", "model", "a string" },
	};
	char body[256];
	json_t *o;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(body, sizeof(body), "{\"prompt\":\"a\",%s}",
		    cases[i].more);
		o = post_json(base_port, NULL, body, 400);
		error_is(o, "invalid_request_error", cases[i].param, NULL,
		    cases[i].says);
		json_decref(o);
	}
	/* what changes nothing is taken: the defaults, user */
	o = post_json(base_port, NULL, "{\"prompt\":\"a\",\"max_tokens\":2,"
	    "\"steps\":2,\"top_p\":1,\"presence_penalty\":0,\"best_of\":1,"
	    "\"user\":\"someone\",\"suffix\":null,\"logit_bias\":{}}", 200);
	json_decref(o);
}
END_TEST

/* Who may ask ------------------------------------------------------------- */

/* A client without a certificate: a 401 that says what to do at the
 * open entry, for every path; no answer where the entry is not open.
 * A stranger with one is served at the open entry, its n held to
 * pipeline_client_requests (4). */
START_TEST(test_no_certificate)
{
	char stranger[128], out[256], *answer;
	json_t *o;

	ck_assert_int_eq(curl_req(base_port + 2, "", NULL, "{\"prompt\":"
	    "\"a\"}", &answer), 401);
	ck_assert_ptr_nonnull(o = json_loads(answer, 0, NULL));
	free(answer);
	error_is(o, "authentication_error", NULL, "client_certificate_required",
	    "shardmeter init");
	json_decref(o);
	ck_assert_int_eq(curl_req(base_port + 2, "", "/v1/models", NULL,
	    &answer), 401);
	ck_assert_ptr_nonnull(strstr(answer, "client certificate"));
	free(answer);
	ck_assert_int_eq(curl_req(base_port + 2, "", "/v1/status", NULL,
	    &answer), 401);
	free(answer);
	/* refused in the handshake where the entry is not open */
	ck_assert_int_eq(curl_req(base_port, "", NULL, "{\"prompt\":\"a\"}",
	    &answer), 0);
	free(answer);
	/* the frames of the pipeline protocol: not from such a client */
	snprintf(stranger, sizeof(stranger), "%s/stranger", dir);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s init --dir %s",
	    tu_shardmeter(), stranger), 0);
	o = post_json(base_port + 2, stranger, "{\"prompt\":\"a\","
	    "\"max_tokens\":2,\"steps\":2,\"n\":4}", 200);
	ck_assert_uint_eq(json_array_size(json_object_get(o, "choices")), 4);
	json_decref(o);
	o = post_json(base_port + 2, stranger, "{\"prompt\":\"a\","
	    "\"max_tokens\":2,\"steps\":2,\"n\":5}", 429);
	error_is(o, "invalid_request_error", "n", NULL,
	    "pipeline_client_requests");
	json_decref(o);
	/* the listed client is held to no such quota */
	o = post_json(base_port + 2, NULL, "{\"prompt\":\"a\",\"max_tokens\":2,"
	    "\"steps\":2,\"n\":8}", 200);
	json_decref(o);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("serve_openai");
	TCase *tc = tcase_create("openai");

	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, setup_once, teardown_once);
	tcase_add_test(tc, test_models);
	tcase_add_test(tc, test_n);
	tcase_add_test(tc, test_stop);
	tcase_add_test(tc, test_echo);
	tcase_add_test(tc, test_refused_fields);
	tcase_add_test(tc, test_no_certificate);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
