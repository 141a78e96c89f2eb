/* The OpenAI fields of POST /v1/completions and GET /v1/models on real
 * pipeline hosts over TLS on loopback: ring A, two hosts of a logical
 * shape whose entry takes the host list's clients only (the test's
 * operator is one), ring B, one host that is an open entry with a
 * model_name of its own, and ring C, one host of position blocks.  Requests go through the curl binary, as an
 * OpenAI client's would: n choices each the answer of its own seed,
 * stop strings (whole and streamed, both modes), echo, logprobs (their
 * shape, the chosen byte's against its alternatives, whole and streamed
 * in both modes and with position blocks, with echo, stop and n, and
 * their values against the same decoding in this process), decode (each
 * decoder against this process, whole and streamed, position blocks
 * too), the model's name and a wrong
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

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "daemon/core/identity.h"
#include "daemon/pipeline/pipeline_client.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/pipeline.h"
#include "tests/testutil.h"

#define A_HOSTS 2
#define WINDOW 64
#define A_MODEL "blocktrain-2b-2l-d32-w64"
#define B_MODEL "tiny-test"

static char dir[64];
static int base_port;
static pid_t pid_a[A_HOSTS], pid_b, pid_c;
static tls_ctx *operator_tls;

/* Ports: ring A at base, base + 1; ring B at base + 2; ring C at base
 * + 3; /metrics at + 20. */
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
	    "blocks=1 seed=4\n", c[1024] = "shape width=32 heads=2 layers=1 "
	    "window=64 blocks=1 seed=5 position_block=16\n", state[128],
	    err[KN_ERR_LEN];
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
	snprintf(state, sizeof(state), "%s/host3", dir);
	tu_peer_line(c, sizeof(c), base_port + 3, 1, state);
	tu_client_line(c, sizeof(c));
	tu_write_file(dir, "hosts_c", c);
	start_host(&pid_c, base_port + 3, "hosts_c", "");
	for (i = 0; i < A_HOSTS; i++)
		start_host(&pid_a[i], base_port + i, "hosts_a", "");
	start_host(&pid_b, base_port + 2, "hosts_b", "pipeline_open_entry = "
	    "yes\nmodel_name = " B_MODEL "\n");
	wait_ring(base_port);
	wait_ring(base_port + 2);
	wait_ring(base_port + 3);
}

static void
teardown_once(void)
{
	int i;

	for (i = 0; i < A_HOSTS; i++)
		tu_stop(&pid_a[i], SIGTERM, 15);
	tu_stop(&pid_b, SIGTERM, 15);
	tu_stop(&pid_c, SIGTERM, 15);
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
	o = json_loads(answer, JSON_ALLOW_NUL, &jerr);
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


/* Logprobs ---------------------------------------------------------------- */

/* A byte as the entry writes it as a token (blocktraind(8)). */
static void
token_of(unsigned char b, char *buf)
{
	if ((b >= 0x20 && b <= 0x7e) || b == '\t' || b == '\n' || b == '\r')
		snprintf(buf, 12, "%c", b);
	else
		snprintf(buf, 12, "bytes:\\x%02x", b);
}

/* One choice's logprobs, gathered (over a stream's events too). */
typedef struct {
	size_t n;
	char tok[2 * WINDOW][12];
	int null[2 * WINDOW];           /* an echoed prompt byte */
	double lp[2 * WINDOW];
	int ntop[2 * WINDOW];
	char top_tok[2 * WINDOW][6][12];
	double top[2 * WINDOW][6];
	long off[2 * WINDOW];
} lp_got;

static void
lp_add(lp_got *g, json_t *lps)
{
	json_t *tokens = json_object_get(lps, "tokens"),
	    *tlp = json_object_get(lps, "token_logprobs"),
	    *top = json_object_get(lps, "top_logprobs"),
	    *off = json_object_get(lps, "text_offset");
	size_t i, m = json_array_size(tokens);

	ck_assert_msg(json_is_object(lps), "no logprobs object");
	ck_assert_uint_eq(json_array_size(tlp), m);
	ck_assert_uint_eq(json_array_size(top), m);
	ck_assert_uint_eq(json_array_size(off), m);
	for (i = 0; i < m; i++) {
		size_t at = g->n++;
		json_t *t = json_array_get(top, i), *v;
		const char *key;
		int j = 0;

		ck_assert_uint_lt(at, 2 * WINDOW);
		snprintf(g->tok[at], 12, "%s", json_string_value(
		    json_array_get(tokens, i)));
		g->off[at] = (long)json_integer_value(json_array_get(off, i));
		g->null[at] = json_is_null(json_array_get(tlp, i));
		if (g->null[at]) {
			ck_assert(json_is_null(t));
			continue;
		}
		g->lp[at] = json_number_value(json_array_get(tlp, i));
		ck_assert(json_is_object(t));
		json_object_foreach(t, key, v) {
			ck_assert_int_lt(j, 6);
			snprintf(g->top_tok[at][j], 12, "%s", key);
			g->top[at][j++] = json_number_value(v);
		}
		g->ntop[at] = j;
	}
}

/* What every logprobs answer must hold: one token per byte of bytes
 * (after pre echoed ones, which have null figures), written as
 * documented; log-probabilities finite and <= 0; k alternatives, most
 * likely first, within one in all; the chosen byte's figure equal to
 * its own among them. */
static void
lp_check(const lp_got *g, const unsigned char *bytes, size_t nbytes,
    size_t pre, int k)
{
	char want[12];
	size_t i;
	int j;

	ck_assert_uint_eq(g->n, nbytes);
	for (i = 0; i < g->n; i++) {
		double mass = 0;

		token_of(bytes[i], want);
		ck_assert_str_eq(g->tok[i], want);
		ck_assert_int_eq(g->off[i], (long)i);
		ck_assert_int_eq(g->null[i], i < pre);
		if (i < pre)
			continue;
		ck_assert_msg(isfinite(g->lp[i]) && g->lp[i] <= 0, "lp %g",
		    g->lp[i]);
		ck_assert_int_eq(g->ntop[i], k);
		for (j = 0; j < g->ntop[i]; j++) {
			ck_assert(isfinite(g->top[i][j]) && g->top[i][j] <= 0);
			if (j > 0)
				ck_assert(g->top[i][j] <= g->top[i][j - 1]);
			if (strcmp(g->top_tok[i][j], want) == 0)
				ck_assert(g->top[i][j] == g->lp[i]);
			mass += exp(g->top[i][j]);
		}
		ck_assert_msg(mass <= 1 + 1e-5, "alternatives sum to %g", mass);
		/* the chosen byte, when likelier than the last alternative,
		 * is among them */
		if (k > 0 && g->lp[i] > g->top[i][k - 1] + 1e-6) {
			for (j = 0; j < k && strcmp(g->top_tok[i][j], want);
			    j++)
				;
			ck_assert_msg(j < k, "chosen byte missing from top");
		}
	}
}

/* The whole answer of body at port: choice 0's bytes and logprobs. */
static size_t
lp_whole(int port, const char *body, unsigned char *out, lp_got *g)
{
	json_t *o = post_json(port, NULL, body, 200), *ch = choice(o, 0);
	size_t n = choice_bytes(ch, out);

	memset(g, 0, sizeof(*g));
	lp_add(g, json_object_get(ch, "logprobs"));
	json_decref(o);
	return n;
}

/* The same streamed: the events' bytes and logprobs concatenated. */
static size_t
lp_stream(int port, const char *body, unsigned char *out, lp_got *g)
{
	char *answer, *ev, *save = NULL;
	size_t n = 0;

	memset(g, 0, sizeof(*g));
	ck_assert_int_eq(curl_req(port, NULL, NULL, body, &answer), 200);
	for (ev = strtok_r(answer, "\n", &save); ev != NULL;
	    ev = strtok_r(NULL, "\n", &save)) {
		json_t *o, *ch;

		if (strcmp(ev, "data: [DONE]") == 0)
			continue;
		ck_assert_ptr_nonnull(o = json_loads(ev + 6, JSON_ALLOW_NUL,
		    NULL));
		if (json_array_size(json_object_get(o, "choices")) > 0) {
			ch = choice(o, 0);
			n += choice_bytes(ch, out + n);
			lp_add(g, json_object_get(ch, "logprobs"));
		}
		json_decref(o);
	}
	free(answer);
	return n;
}

/* logprobs 0, 3 and 5, whole and streamed, in both modes on ring A and
 * with position blocks on ring C: the answer's bytes are those without
 * logprobs, a stream's bytes and figures those of the whole answer. */
START_TEST(test_logprobs_shape)
{
	static const char *modes[] = { "blocktrain", "ar" };
	static const int ks[] = { 0, 3, 5 };
	unsigned char want[WINDOW], got[WINDOW], st[WINDOW];
	static lp_got g, gs;
	char body[256];
	size_t n, i;
	int m, ki, ring;

	for (ring = 0; ring < 2; ring++)
	for (m = 0; m < 2; m++)
		for (ki = 0; ki < 3; ki++) {
			int port = ring ? base_port + 3 : base_port;

			if (ring && m == 1 && ki > 0)
				continue;
			if (!ring)
				plain_output(modes[m], 50 + ki, want);
			snprintf(body, sizeof(body), "{\"prompt\":\"ab\","
			    "\"max_tokens\":12,\"steps\":4,\"seed\":%d,\"mode\":"
			    "\"%s\",\"temperature\":0.8,\"logprobs\":%d",
			    50 + ki, modes[m], ks[ki]);
			n = lp_whole(port, strcat(body, "}"), got, &g);
			ck_assert_uint_eq(n, 12);
			lp_check(&g, got, n, 0, ks[ki]);
			body[strlen(body) - 1] = '\0';
			ck_assert_uint_eq(lp_stream(port, strcat(body,
			    ",\"stream\":true}"), st, &gs), 12);
			ck_assert(memcmp(st, got, 12) == 0);
			ck_assert_uint_eq(gs.n, g.n);
			for (i = 0; i < g.n; i++)
				ck_assert_msg(gs.lp[i] == g.lp[i] &&
				    strcmp(gs.tok[i], g.tok[i]) == 0 &&
				    gs.ntop[i] == g.ntop[i], "%s: streamed "
				    "byte %zu differs", modes[m], i);
		}
	/* the bytes do not change with logprobs (at temperature 1, as
	 * plain_output) */
	for (m = 0; m < 2; m++) {
		plain_output(modes[m], 60, want);
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":60,\"mode\":\"%s\",\"logprobs\":2}",
		    modes[m]);
		lp_whole(base_port, body, got, &g);
		ck_assert(memcmp(got, want, 12) == 0);
	}
}
END_TEST

/* echo: the prompt's bytes first, with null figures; stop: the figures
 * cut with the text; n: each choice its own seed's. */
START_TEST(test_logprobs_echo_stop_n)
{
	unsigned char got[WINDOW + 8], one[WINDOW];
	static lp_got g, g1;
	char body[320], stop[8];
	json_t *o, *ch;
	size_t n, i, cut;
	int c, seed;

	n = lp_whole(base_port, "{\"prompt\":\"ab\",\"max_tokens\":12,"
	    "\"steps\":4,\"seed\":7,\"echo\":true,\"logprobs\":2}", got, &g);
	ck_assert_uint_eq(n, 14);
	lp_check(&g, got, n, 2, 2);
	/* stop at a printable byte of some seed's output, after its first */
	for (seed = 8, cut = 0; seed < 200 && !cut; seed++) {
		size_t at = 0, j;

		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":%d,\"logprobs\":1}", seed);
		lp_whole(base_port, body, one, &g1);
		for (j = 1; j < 12 && !at; j++)
			if (one[j] > 0x20 && one[j] < 0x7f && one[j] != '"' &&
			    one[j] != '\\')
				at = j;
		if (at == 0)
			continue;
		while (one[cut] != one[at])
			cut++;
		snprintf(stop, sizeof(stop), "%c", one[at]);
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":%d,\"logprobs\":1,\"stop\":\"%s\"}",
		    seed, stop);
		n = lp_whole(base_port, body, got, &g);
		ck_assert_uint_eq(n, cut);
		lp_check(&g, got, n, 0, 1);
		for (i = 0; i < n; i++)
			ck_assert(g.lp[i] == g1.lp[i]);
		cut = 1;
	}
	ck_assert_msg(cut, "no output with a printable byte to stop at");
	/* n = 3: choice c is seed 30 + c's */
	o = post_json(base_port, NULL, "{\"prompt\":\"ab\",\"max_tokens\":12,"
	    "\"steps\":4,\"seed\":30,\"n\":3,\"logprobs\":1,\"mode\":\"ar\"}",
	    200);
	for (c = 0; c < 3; c++) {
		ch = choice(o, (size_t)c);
		memset(&g, 0, sizeof(g));
		lp_add(&g, json_object_get(ch, "logprobs"));
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":%d,\"logprobs\":1,\"mode\":\"ar\"}",
		    30 + c);
		lp_whole(base_port, body, one, &g1);
		ck_assert_uint_eq(g.n, g1.n);
		for (i = 0; i < g.n; i++)
			ck_assert(g.lp[i] == g1.lp[i]);
	}
	json_decref(o);
}
END_TEST

/* The figures are right: the same decoding in this process, on the
 * models the hosts make of their logical shape (blocks seeded spec seed
 * x 1000003 + b, the causal LM + 7777), gives the same bytes and the
 * same log-probabilities to 1e-5: BlockTrain over ring A's two hosts
 * (the figures of block 2's passes carried over the wire) and ring B's
 * one, the causal LM on ring B. */
static void
ref_spec(const char *hosts, pr_spec *spec)
{
	char path[128], err[KN_ERR_LEN];
	ph_list pl;

	snprintf(path, sizeof(path), "%s/%s", dir, hosts);
	ck_assert_msg(ph_load(&pl, path, err) == 0, "%s", err);
	ph_logical_spec(&pl, spec);
	ph_free(&pl);
}

/* BlockTrain by decoder dec as a host runs it on the whole window (block
 * T first), with the figure of the pass that decided each position:
 * every candidate of a step predicted, the decoder's pick of them
 * decided. */
static void
ref_decode_lp(const pr_spec *s, const char *prompt, int end, int steps,
    float temp, uint64_t seed, bt_decode dec, unsigned char *out,
    float *lp)
{
	int n = s->window, plen = (int)strlen(prompt), b, j, r, npos, keep;
	int32_t seq[WINDOW], pos[WINDOW], picked[WINDOW];
	float u[2 * WINDOW], uu[WINDOW], L[WINDOW * 6], S[WINDOW * 3];
	float at[WINDOW];
	unsigned char top[WINDOW * 5];
	double p, next;
	char err[KN_ERR_LEN];

	for (j = 0; j < n; j++)
		seq[j] = j < plen ? (unsigned char)prompt[j] : KN_MASK;
	for (b = s->blocks; b >= 1; b--) {
		kn_model_shape bs = pr_spec_block_shape(s, b - 1);
		kn_model *m;

		ck_assert_int_eq(kn_model_create_inference(&m, &bs,
		    kn_cpu_backend(), 2, KN_STORE_F32, err), 0);
		kn_model_init(m, s->seed * 1000003u + (uint64_t)b);
		for (j = 0; bt_step_draw(s, steps, b - 1, j, seed, u, &p,
		    &next); j++) {
			npos = bt_step_candidates(dec, seq, n, plen, u, p, next,
			    pos, &keep);
			if (npos == 0)
				continue;
			for (r = 0; r < npos; r++)
				uu[r] = u[n + pos[r]];
			ck_assert_msg(kn_model_predict_at(m, seq, 1, pos, npos,
			    uu, temp, picked, err) == 0, "%s", err);
			ck_assert_msg(kn_model_head_logprobs(m, npos, temp,
			    picked, 5, L, top, err) == 0, "%s", err);
			for (r = 0; r < npos; r++)
				at[pos[r]] = L[r * 6];
			ck_assert_msg(bt_step_scores(dec, m, npos, picked, S,
			    err) == 0, "%s", err);
			keep = bt_step_keep(dec, pos, picked, S, u, 0, temp, npos,
			    keep);
			ck_assert_int_ge(keep, 0);
			ck_assert_int_le(keep, npos);
			for (r = 0; r < keep; r++) {
				seq[pos[r]] = picked[r];
				lp[pos[r]] = at[pos[r]];
			}
		}
		kn_model_free(m);
	}
	for (j = plen; j < end; j++) {
		ck_assert_int_ne(seq[j], KN_MASK);
		out[j - plen] = (unsigned char)seq[j];
	}
}

/* The causal LM one byte at a time, as bt_generate_ar. */
static void
ref_ar(const pr_spec *s, const char *prompt, int end, float temp,
    uint64_t seed, unsigned char *out, float *lp)
{
	kn_model_shape cs = pr_spec_reference_shape(s, 1);
	int n = s->window, plen = (int)strlen(prompt), p;
	int32_t seq[WINDOW], picked;
	float scratch[WINDOW], u, L[6];
	unsigned char top[5];
	char err[KN_ERR_LEN];
	kn_decode_seq q;
	kn_model *m;
	kn_kv *kv;

	ck_assert_int_eq(kn_model_create_inference(&m, &cs, kn_cpu_backend(),
	    2, KN_STORE_F32, err), 0);
	kn_model_init(m, s->seed * 1000003u + 7777u);
	ck_assert_int_eq(kn_kv_create(&kv, m, err), 0);
	for (p = 0; p < plen; p++)
		seq[p] = (unsigned char)prompt[p];
	q.kv = kv;
	q.pos0 = 0;
	q.count = plen;
	for (p = plen; p < end; p++) {
		u = bt_ar_uniform(seed, n, p, scratch);
		ck_assert_msg(kn_model_decode(m, &q, 1, seq + q.pos0, NULL, &u,
		    temp, &picked, err) == 0, "%s", err);
		ck_assert_int_eq(kn_model_head_logprobs(m, 1, temp, &picked, 5,
		    L, top, err), 0);
		seq[p] = picked;
		out[p - plen] = (unsigned char)picked;
		lp[p] = L[0];
		q.pos0 = p;
		q.count = 1;
	}
	kn_kv_free(kv);
	kn_model_free(m);
}

START_TEST(test_logprobs_values)
{
	static const struct {
		int port;
		const char *hosts, *mode;
	} cases[] = {
		{ 0, "hosts_a", "blocktrain" },
		{ 2, "hosts_b", "blocktrain" },
		{ 2, "hosts_b", "ar" },
	};
	unsigned char got[WINDOW], want[WINDOW];
	float lp[WINDOW];
	static lp_got g;
	char body[256];
	pr_spec spec;
	size_t c, i;

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		ref_spec(cases[c].hosts, &spec);
		if (strcmp(cases[c].mode, "ar") == 0)
			ref_ar(&spec, "ab", 2 + 12, 0.8f, 77, want, lp);
		else
			ref_decode_lp(&spec, "ab", 2 + 12, 4, 0.8f, 77,
			    BT_DECODE_RANDOM, want, lp);
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":77,\"mode\":\"%s\",\"temperature\":"
		    "0.8,\"logprobs\":5,\"decode\":\"random\"}",
		    cases[c].mode);
		ck_assert_uint_eq(lp_whole(base_port + cases[c].port, body, got,
		    &g), 12);
		ck_assert_msg(memcmp(got, want, 12) == 0, "%s on %s: the bytes "
		    "are not this process's", cases[c].mode, cases[c].hosts);
		for (i = 0; i < 12; i++)
			ck_assert_msg(fabs(g.lp[i] - lp[2 + i]) < 1e-5, "%s on "
			    "%s: byte %zu's log-probability %.8g, here %.8g",
			    cases[c].mode, cases[c].hosts, i, g.lp[i], lp[2 + i]);
	}
}
END_TEST

/* Decoders ------------------------------------------------------------------ */

/* BlockTrain with decoder dec as the hosts of the logical shape s run
 * it (blocks seeded spec seed x 1000003 + b, block T first): whole
 * window by bt_denoise_block, position blocks by bg_generate. */
static void
ref_decode(const pr_spec *s, const char *prompt, int end, int steps,
    float temp, uint64_t seed, bt_decode dec, unsigned char *out)
{
	int n = s->window, plen = (int)strlen(prompt), b, j, trav;
	int32_t seq[WINDOW];
	kn_model *m[PR_MAX_BLOCKS];
	char err[KN_ERR_LEN];

	for (j = 0; j < n; j++)
		seq[j] = j < plen ? (unsigned char)prompt[j] : KN_MASK;
	for (b = 1; b <= s->blocks; b++) {
		kn_model_shape bs = pr_spec_block_shape(s, b - 1);

		ck_assert_int_eq(kn_model_create_inference(&m[b - 1], &bs,
		    kn_cpu_backend(), 2, KN_STORE_F32, err), 0);
		kn_model_init(m[b - 1], s->seed * 1000003u + (uint64_t)b);
	}
	if (s->position_block > 0 && s->position_block < n) {
		ck_assert_msg(bg_generate(m, s, steps, seq, plen, end, temp, seed,
		    dec, 1, &trav, err) == 0, "%s", err);
		ck_assert_int_eq(trav, bg_traversals(s, plen, end));
	} else
		for (b = s->blocks; b >= 1; b--)
			ck_assert_msg(bt_denoise_block(m[b - 1], s, steps, b - 1,
			    seq, plen, temp, seed, dec, err) == 0, "%s", err);
	for (b = 0; b < s->blocks; b++)
		kn_model_free(m[b]);
	for (j = plen; j < end; j++)
		out[j - plen] = (unsigned char)seq[j];
}

/* The bytes of one completion of 12 after "ab" (4 steps, temperature
 * 0.8) on the ring at port, decoder name (NULL: none named), streamed
 * or whole. */
static void
decode_output(int port, int seed, const char *name, int stream,
    unsigned char *out)
{
	char body[256], dec[64] = "", *answer, finish[1][16];
	unsigned char got[1][WINDOW];
	size_t len[1];
	json_t *o;

	if (name != NULL)
		snprintf(dec, sizeof(dec), ",\"decode\":\"%s\"", name);
	snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":12,"
	    "\"steps\":4,\"seed\":%d,\"temperature\":0.8%s%s}", seed, dec,
	    stream ? ",\"stream\":true" : "");
	if (stream) {
		ck_assert_int_eq(curl_req(port, NULL, NULL, body, &answer), 200);
		ck_assert_ptr_nonnull(answer);
		stream_choices(answer, got, len, finish, 1);
		free(answer);
		ck_assert_uint_eq(len[0], 12);
		ck_assert_str_eq(finish[0], "length");
		memcpy(out, got[0], 12);
		return;
	}
	o = post_json(port, NULL, body, 200);
	ck_assert_str_eq(str(choice(o, 0), "finish_reason"), "length");
	ck_assert_uint_eq(choice_bytes(choice(o, 0), out), 12);
	json_decref(o);
}

/* "decode" names the decoder: each gives this process's bytes for the
 * same seed (two hosts, one, position blocks of 16), whole and
 * streamed; none named is the run's [generate] decode; the decoders are
 * not all one. */
START_TEST(test_decode_field)
{
	static const struct {
		int port;
		const char *hosts;
	} rings[] = {
		{ 0, "hosts_a" }, { 2, "hosts_b" }, { 3, "hosts_c" },
	};
	unsigned char got[WINDOW], want[8][WINDOW];
	pr_spec spec;
	bt_decode def;
	size_t c;
	int d, n, seed, differ;

	for (n = 0; pr_decoders[n] != NULL; n++)
		;
	ck_assert_int_le(n, 8);
	for (c = 0; c < sizeof(rings) / sizeof(rings[0]); c++) {
		int port = base_port + rings[c].port;

		ref_spec(rings[c].hosts, &spec);
		ck_assert_int_eq(bt_decode_parse(spec.decode, &def), 0);
		differ = 0;
		for (seed = 77; seed <= 78; seed++) {
			for (d = 0; d < n; d++) {
				ref_decode(&spec, "ab", 2 + 12, 4, 0.8f,
				    (uint64_t)seed, (bt_decode)d, want[d]);
				decode_output(port, seed, pr_decoders[d], 0, got);
				ck_assert_msg(memcmp(got, want[d], 12) == 0, "%s on "
				    "%s, seed %d: the bytes are not this process's",
				    pr_decoders[d], rings[c].hosts, seed);
				differ += d > 0 && memcmp(want[d], want[0], 12) != 0;
			}
			decode_output(port, seed, NULL, 0, got);
			ck_assert_msg(memcmp(got, want[def], 12) == 0, "none named "
			    "on %s is not %s", rings[c].hosts, spec.decode);
			decode_output(port, seed, "margin", 1, got);
			ck_assert_msg(memcmp(got, want[BT_DECODE_MARGIN], 12) == 0,
			    "margin streamed on %s differs", rings[c].hosts);
		}
		ck_assert_msg(differ > 0, "on %s every decoder gives random's "
		    "bytes", rings[c].hosts);
	}
	/* at temperature 0 (argmax) too */
	ref_spec("hosts_a", &spec);
	for (d = 0; d < n; d++) {
		char body[256];
		json_t *o;

		ref_decode(&spec, "ab", 2 + 12, 4, 0.0f, 5, (bt_decode)d, want[d]);
		snprintf(body, sizeof(body), "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":5,\"temperature\":0,\"decode\":"
		    "\"%s\"}", pr_decoders[d]);
		o = post_json(base_port, NULL, body, 200);
		ck_assert_uint_eq(choice_bytes(choice(o, 0), got), 12);
		ck_assert_msg(memcmp(got, want[d], 12) == 0, "%s at temperature "
		    "0: the bytes are not this process's", pr_decoders[d]);
		json_decref(o);
	}
	/* n choices: each its own seed's, by the request's decoder */
	{
		json_t *o;
		int k;

		ref_spec("hosts_a", &spec);
		o = post_json(base_port, NULL, "{\"prompt\":\"ab\",\"max_tokens\":"
		    "12,\"steps\":4,\"seed\":77,\"temperature\":0.8,\"n\":3,"
		    "\"decode\":\"margin\"}", 200);
		for (k = 0; k < 3; k++) {
			ref_decode(&spec, "ab", 2 + 12, 4, 0.8f, 77 + (uint64_t)k,
			    BT_DECODE_MARGIN, want[0]);
			ck_assert_uint_eq(choice_bytes(choice(o, (size_t)k), got),
			    12);
			ck_assert_msg(memcmp(got, want[0], 12) == 0, "choice %d is "
			    "not margin's for seed %d", k, 77 + k);
		}
		json_decref(o);
	}
}
END_TEST


/* Logprobs with each decoder, whole and streamed, on two hosts and on
 * one: the bytes those of bt_denoise_block, each byte's figure that of
 * the pass that decided it (not of a pass that predicted it and left it
 * masked), the streamed figures the whole answer's. */
START_TEST(test_decode_logprobs)
{
	static const struct {
		int port;
		const char *hosts;
	} rings[] = { { 0, "hosts_a" }, { 2, "hosts_b" } };
	unsigned char got[WINDOW], want[WINDOW], plain[WINDOW], st[WINDOW];
	static lp_got g, gs;
	float lp[WINDOW];
	char body[256];
	pr_spec spec;
	size_t c, i;
	int d;

	for (c = 0; c < sizeof(rings) / sizeof(rings[0]); c++) {
		ref_spec(rings[c].hosts, &spec);
		for (d = 0; pr_decoders[d] != NULL; d++) {
			ref_decode_lp(&spec, "ab", 2 + 12, 4, 0.8f, 91,
			    (bt_decode)d, want, lp);
			ref_decode(&spec, "ab", 2 + 12, 4, 0.8f, 91, (bt_decode)d,
			    plain);
			ck_assert_msg(memcmp(want, plain, 12) == 0, "%s: the "
			    "step-by-step reference is not bt_denoise_block",
			    pr_decoders[d]);
			snprintf(body, sizeof(body), "{\"prompt\":\"ab\","
			    "\"max_tokens\":12,\"steps\":4,\"seed\":91,"
			    "\"temperature\":0.8,\"logprobs\":3,\"decode\":\"%s\"",
			    pr_decoders[d]);
			ck_assert_uint_eq(lp_whole(base_port + rings[c].port,
			    strcat(body, "}"), got, &g), 12);
			lp_check(&g, got, 12, 0, 3);
			ck_assert_msg(memcmp(got, want, 12) == 0, "%s on %s: the "
			    "bytes are not this process's", pr_decoders[d],
			    rings[c].hosts);
			for (i = 0; i < 12; i++)
				ck_assert_msg(fabs(g.lp[i] - lp[2 + i]) < 1e-5, "%s on "
				    "%s: byte %zu's log-probability %.8g, here %.8g",
				    pr_decoders[d], rings[c].hosts, i, g.lp[i],
				    lp[2 + i]);
			body[strlen(body) - 1] = '\0';
			ck_assert_uint_eq(lp_stream(base_port + rings[c].port,
			    strcat(body, ",\"stream\":true}"), st, &gs), 12);
			ck_assert(memcmp(st, got, 12) == 0);
			ck_assert_uint_eq(gs.n, g.n);
			for (i = 0; i < g.n; i++)
				ck_assert_msg(gs.lp[i] == g.lp[i], "%s on %s: streamed "
				    "byte %zu's figure differs", pr_decoders[d],
				    rings[c].hosts, i);
		}
	}
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
	/* decode: a decoder's name, and a wrong one is told the names */
	o = post_json(base_port, NULL, "{\"prompt\":\"a\",\"decode\":\"foo\"}",
	    400);
	error_is(o, "invalid_request_error", NULL, NULL, "'foo'");
	for (i = 0; pr_decoders[i] != NULL; i++)
		error_is(o, "invalid_request_error", NULL, NULL, pr_decoders[i]);
	json_decref(o);
	o = post_json(base_port, NULL, "{\"prompt\":\"a\",\"decode\":3}", 400);
	error_is(o, "invalid_request_error", NULL, NULL,
	    "decode must be a string");
	json_decref(o);
	o = post_json(base_port, NULL, "{\"prompt\":\"a\",\"decode\":"
	    "[\"margin\"]}", 400);
	error_is(o, "invalid_request_error", NULL, NULL, "decode");
	json_decref(o);
	o = post_json(base_port, NULL, "{\"prompt\":\"a\",\"decode\":\"\"}",
	    400);
	error_is(o, "invalid_request_error", NULL, NULL, "decode");
	json_decref(o);
	o = post_json(base_port, NULL, "{\"prompt\":\"a\",\"decode\":"
	    "\"MARGIN\"}", 400);
	json_decref(o);
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
	tcase_add_test(tc, test_logprobs_shape);
	tcase_add_test(tc, test_logprobs_echo_stop_n);
	tcase_add_test(tc, test_logprobs_values);
	tcase_add_test(tc, test_decode_field);
	tcase_add_test(tc, test_decode_logprobs);
	tcase_add_test(tc, test_refused_fields);
	tcase_add_test(tc, test_no_certificate);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
