/* Serving routes around a dead host: a ring of three blocks with two
 * blocktraind -S hosts for each (a logical shape with seeded weights, so
 * no training), real sockets over mutual TLS on loopback.  A request
 * whose next host is stopped while it holds the request, then killed,
 * goes on through the other host of that block with the output a
 * healthy ring gives, at the entry's hop and at an inner one, and by a
 * decoder other than random as by random; an ar
 * request that loses the KV caches of its path runs again from position
 * 0; a host that stops is left by the links' keep-alive; only the hosts
 * of the stage before send a host frames; both entries answer; a client
 * tries the next entry when the first is down; a host that restarts is
 * linked to again and takes requests. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/net/tls.h"
#include "daemon/pipeline/pipeline_client.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/spec.h"
#include "tests/testutil.h"

#define BLOCKS 3
#define PER_BLOCK 2
#define HOSTS (BLOCKS * PER_BLOCK)

static char dir[64];
static int base_port;
static pid_t host_pid[HOSTS];
static tls_ctx *operator_tls;

/* Host i (from 0) serves block BLOCKS - i / PER_BLOCK: hosts 0 and 1 are
 * the entries, 2 and 3 serve block 2, 4 and 5 block 1. */
static int
port_of(int i)
{
	return base_port + i;
}

static void
start_host(int i)
{
	char listen[32], hosts[128], log[128], state[128], conf[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port_of(i));
	snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(state, sizeof(state), "%s/host%d", dir, i);
	snprintf(conf, sizeof(conf), "%s/serve.conf", dir);
	host_pid[i] = tu_daemon_start(log, port_of(i), "-S", "-f", "-c", conf,
	    "-L", listen, "-P", hosts, "-s", state, "-D", "cpu", "-t", "1",
	    (char *)NULL);
}

static pc_request
request_for(const char *prompt, int length, uint64_t seed)
{
	pc_request r = { 0 };

	r.mode = PL_MODE_BT;
	r.prompt = prompt;
	r.prompt_len = strlen(prompt);
	r.length = length;
	r.steps = 12;
	r.temperature = 0.9;
	r.seed = seed;
	return r;
}

/* One request to host i as the test's operator, pinned to its id. */
static int
ask(int i, const pc_request *r, pc_result *res, int timeout_ms, char *err)
{
	char addr[32];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port_of(i));
	return pc_generate(addr, operator_tls, tu_port_pin(port_of(i)), r, res,
	    timeout_ms, err);
}

static int
open_entry(int i, pc_conn **c, char *err)
{
	char addr[32];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port_of(i));
	return pc_connect(c, addr, operator_tls, tu_port_pin(port_of(i)), 5000,
	    err);
}

/* Whether host i says its link to host j is up (NULL status: no). */
static int
link_is_up(int i, int j)
{
	json_t *st = tu_status(port_of(i)), *links, *l;
	char addr[32];
	size_t k;
	int up = 0;

	if (st == NULL)
		return 0;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port_of(j));
	links = json_object_get(st, "links");
	json_array_foreach(links, k, l)
		if (strcmp(json_string_value(json_object_get(l, "addr")),
		    addr) == 0)
			up = json_is_true(json_object_get(l, "up"));
	json_decref(st);
	return up;
}

/* Until every host of the stage before j's has its link to j up. */
static void
wait_linked_to(int j, double limit)
{
	int stage = j / PER_BLOCK, prev = (stage + BLOCKS - 1) % BLOCKS, i, ok;
	double t0 = kn_now();

	do {
		ok = 1;
		for (i = prev * PER_BLOCK; i < (prev + 1) * PER_BLOCK; i++)
			if (host_pid[i] > 0 && !link_is_up(i, j))
				ok = 0;
		if (!ok)
			usleep(100000);
	} while (!ok && kn_now() - t0 < limit);
	ck_assert_msg(ok, "the hosts before %d did not link to it in %.0f s",
	    j, limit);
}

/* Until host i's status counts more than jobs compute jobs. */
static void
wait_jobs(int i, long long jobs, double limit)
{
	double t0 = kn_now();

	while (tu_status_int(port_of(i), "jobs") <= jobs &&
	    kn_now() - t0 < limit)
		usleep(50000);
	ck_assert_msg(tu_status_int(port_of(i), "jobs") > jobs, "host %d ran "
	    "nothing in %.0f s", i, limit);
}

static long long
rerouted(int first, int n)
{
	long long sum = 0;
	int i;

	for (i = first; i < first + n; i++)
		sum += tu_status_int(port_of(i), "rerouted");
	return sum;
}

static void
setup(void)
{
	char text[4096] = "# three blocks, two hosts each\n"
	    "shape width=32 heads=2 layers=1 window=40 blocks=3 seed=7\n";
	char state[128], err[KN_ERR_LEN];
	int i;

	signal(SIGPIPE, SIG_IGN);
	memset(host_pid, 0, sizeof(host_pid));
	tu_temp_dir(dir, sizeof(dir), "check_serve_failover");
	tu_trust_init(dir);
	ck_assert_msg(tls_ctx_new(&operator_tls, tu_client_dir(), err) == 0,
	    "%s", err);
	base_port = tu_port_base(HOSTS);
	for (i = 0; i < HOSTS; i++) {
		snprintf(state, sizeof(state), "%s/host%d", dir, i);
		tu_peer_line(text, sizeof(text), port_of(i), BLOCKS - i /
		    PER_BLOCK, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "hosts", text);
	/* a stopped host holds a request for as long as the test needs */
	tu_write_file(dir, "serve.conf", "pipeline_timeout_ms = 60000\n");
	for (i = 0; i < HOSTS; i++)
		start_host(i);
	for (i = 0; i < HOSTS; i++)
		wait_linked_to(i, 30);
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < HOSTS; i++) {
		if (host_pid[i] > 0)
			kill(host_pid[i], SIGCONT);
		tu_stop(&host_pid[i], SIGTERM, 15);
	}
	tls_ctx_free(operator_tls);
	operator_tls = NULL;
	tu_remove_dir(dir);
}

/* The output of r from entry i, all hosts up: what any path gives. */
static void
expect_output(int i, const pc_request *r, unsigned char *out)
{
	pc_result res;
	char err[KN_ERR_LEN];

	ck_assert_msg(ask(i, r, &res, 30000, err) == 0, "%s", err);
	ck_assert_msg(res.ok, "%s", res.error);
	ck_assert_uint_eq(res.len, (size_t)r->length);
	memcpy(out, res.output, res.len);
	pc_result_clear(&res);
}

/* The request r, sent to entry 0 while host victim of block stage's pair
 * is stopped and its partner down, must be held by the victim (the
 * hosts before it ran their part); the partner comes back, the victim
 * is killed, and the request ends with the output of a healthy ring. */
static void
reroute_at(int victim, const pc_request *r, const unsigned char *expect)
{
	int partner = victim ^ 1, stage = victim / PER_BLOCK, prev = stage - 1;
	long long jobs[HOSTS], before;
	pc_result res;
	pc_conn *c;
	char err[KN_ERR_LEN];
	int i;

	before = rerouted(prev * PER_BLOCK, PER_BLOCK);
	tu_stop(&host_pid[partner], SIGTERM, 15);
	ck_assert_int_eq(kill(host_pid[victim], SIGSTOP), 0);
	for (i = 0; i < HOSTS; i++)
		jobs[i] = host_pid[i] > 0 && i != victim ?
		    tu_status_int(port_of(i), "jobs") : 0;
	ck_assert_int_eq(open_entry(0, &c, err), 0);
	ck_assert_int_eq(pc_send(c, r, NULL, err), 0);
	/* every stage before the victim's has run it: the frame is on its
	 * way to the victim, the only host of its block that is up */
	wait_jobs(0, jobs[0], 30);
	for (i = PER_BLOCK; i < prev * PER_BLOCK + PER_BLOCK; i += PER_BLOCK) {
		double t0 = kn_now();

		while (tu_status_int(port_of(i), "jobs") <= jobs[i] &&
		    tu_status_int(port_of(i + 1), "jobs") <= jobs[i + 1] &&
		    kn_now() - t0 < 30)
			usleep(50000);
	}
	start_host(partner);
	wait_linked_to(partner, 30);
	tu_stop(&host_pid[victim], SIGKILL, 15);
	ck_assert_int_eq(pc_recv(c, &res, 60000, err), 0);
	ck_assert_msg(res.ok, "the request failed with its host: %s",
	    res.error);
	ck_assert_uint_eq(res.len, (size_t)r->length);
	ck_assert_msg(memcmp(res.output, expect, res.len) == 0, "the request "
	    "re-routed to host %d answered another output", partner);
	pc_result_clear(&res);
	pc_close(c);
	/* a host before the victim's sent it on to the partner */
	ck_assert_int_gt(rerouted(prev * PER_BLOCK, PER_BLOCK), before);
	/* the victim comes back for the next test */
	start_host(victim);
	wait_linked_to(victim, 30);
}

START_TEST(test_reroute_mid_request)
{
	pc_request r = request_for("The ", 24, 11);
	unsigned char expect[64], other[64];

	expect_output(0, &r, expect);
	/* the second entry's answer comes back to it, the same */
	expect_output(1, &r, other);
	ck_assert(memcmp(expect, other, (size_t)r.length) == 0);
	/* ar: each stage's causal layers on either of its hosts */
	{
		pc_request a = request_for("The ", 8, 3);

		a.mode = PL_MODE_AR;
		expect_output(0, &a, other);
		expect_output(1, &a, other + 32);
		ck_assert(memcmp(other, other + 32, 8) == 0);
	}
	/* a completion streamed from the second entry: its own window,
	 * then block 2's host's, in stage order, then the end */
	{
		char body[256], *first, *second;
		tu_body out;

		snprintf(body, sizeof(body), "{\"prompt\":\"The \","
		    "\"max_tokens\":8,\"seed\":3,\"steps\":12,"
		    "\"stream\":true}");
		ck_assert_int_eq(tu_http("POST", port_of(1), "/v1/completions",
		    "Content-Type: application/json", body, strlen(body), &out),
		    200);
		ck_assert_ptr_nonnull(first = strstr(out.data, "\"host\":2,"));
		ck_assert_ptr_nonnull(second = strstr(out.data, "\"host\":3,"));
		ck_assert(first < second);
		ck_assert_ptr_nonnull(strstr(out.data, "data: [DONE]"));
		free(out.data);
	}
	/* the entry's own next host goes, then an inner host's */
	reroute_at(2, &r, expect);
	reroute_at(5, &r, expect);
	expect_output(1, &r, other);
	ck_assert(memcmp(expect, other, (size_t)r.length) == 0);
	/* a request by another decoder than random keeps it on the way
	 * round a dead host: its frames carry the decoder */
	{
		pc_request m = r;
		bt_decode d;

		ck_assert_int_eq(bt_decode_parse("margin", &d), 0);
		m.decode = 1 + (int)d;
		expect_output(0, &m, other);
		ck_assert_msg(memcmp(expect, other, (size_t)r.length) != 0,
		    "margin gives random's bytes");
		reroute_at(5, &m, other);
		expect_output(1, &m, expect);
		ck_assert(memcmp(expect, other, (size_t)r.length) == 0);
	}
}
END_TEST

/* A host that stops (SIGSTOP: its connections stay up) while it holds a
 * request is found by the links' keep-alive; the request goes on through
 * the other host of its block, and the stopped one, back, is used again. */
START_TEST(test_stopped_host_left)
{
	pc_request r = request_for("So ", 16, 8);
	unsigned char expect[64];
	long long jobs0;
	pc_result res;
	pc_conn *c;
	char err[KN_ERR_LEN];

	expect_output(0, &r, expect);
	jobs0 = tu_status_int(port_of(0), "jobs");
	ck_assert_int_eq(kill(host_pid[2], SIGSTOP), 0);
	ck_assert_int_eq(open_entry(0, &c, err), 0);
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	/* the entry ran it and sent it to host 2, the first of block 2 */
	wait_jobs(0, jobs0, 30);
	ck_assert_int_eq(pc_recv(c, &res, 60000, err), 0);
	ck_assert_msg(res.ok, "%s", res.error);
	ck_assert(memcmp(res.output, expect, res.len) == 0);
	pc_result_clear(&res);
	pc_close(c);
	ck_assert_int_gt(tu_status_int(port_of(0), "rerouted"), 0);
	ck_assert_int_eq(kill(host_pid[2], SIGCONT), 0);
	wait_linked_to(2, 30);
	expect_output(1, &r, expect + 32);
	ck_assert(memcmp(expect, expect + 32, (size_t)r.length) == 0);
}
END_TEST

/* ar: a traversal after the first needs the KV caches of its hosts.
 * The request's host of block 2 is stopped after its first traversal
 * (the exits held back until then) and its partner is down; the partner
 * comes back, the host is killed, and the entry runs the request again
 * from position 0 on the new path, with the output it would have had. */
START_TEST(test_ar_redo)
{
	pc_request r = request_for("Th", 20, 4);
	unsigned char expect[64];
	long long jobs0, jobs2;
	pc_result res;
	pc_conn *c;
	char err[KN_ERR_LEN];

	r.mode = PL_MODE_AR;
	expect_output(0, &r, expect);
	tu_stop(&host_pid[3], SIGTERM, 15);
	jobs0 = tu_status_int(port_of(0), "jobs");
	jobs2 = tu_status_int(port_of(2), "jobs");
	ck_assert_int_eq(kill(host_pid[4], SIGSTOP), 0);
	ck_assert_int_eq(kill(host_pid[5], SIGSTOP), 0);
	ck_assert_int_eq(open_entry(0, &c, err), 0);
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	/* the first traversal has passed host 2: host 2 holds its cache */
	wait_jobs(2, jobs2, 30);
	ck_assert_int_eq(kill(host_pid[2], SIGSTOP), 0);
	ck_assert_int_eq(kill(host_pid[4], SIGCONT), 0);
	ck_assert_int_eq(kill(host_pid[5], SIGCONT), 0);
	/* the first byte is back and the second traversal has gone to
	 * host 2, stopped */
	wait_jobs(0, jobs0 + 1, 30);
	start_host(3);
	wait_linked_to(3, 30);
	tu_stop(&host_pid[2], SIGKILL, 15);
	ck_assert_int_eq(pc_recv(c, &res, 60000, err), 0);
	ck_assert_msg(res.ok, "the ar request failed with its host: %s",
	    res.error);
	ck_assert_uint_eq(res.len, (size_t)r.length);
	ck_assert_msg(memcmp(res.output, expect, res.len) == 0, "the request "
	    "run again answered another output");
	pc_result_clear(&res);
	pc_close(c);
	ck_assert_int_gt(tu_status_int(port_of(0), "rerouted"), 0);
}
END_TEST

/* Who may send what, with several hosts a block: any host of the stage
 * before may ping a host (and is answered), a host of its own stage may
 * send it nothing, and a frame from it closes the connection. */
START_TEST(test_stage_trust)
{
	pl_frame f = { .type = PL_PING, .id = 41 }, g;
	char state[128], err[KN_ERR_LEN], *buf, got[256];
	size_t len;
	ssize_t n;
	tu_tls *t;

	ck_assert_int_eq(pl_frame_encode(&f, &buf, &len, err), 0);
	/* host 1, the second entry, is of the stage before host 2's */
	snprintf(state, sizeof(state), "%s/host1", dir);
	tu_act_as(state);
	ck_assert_ptr_nonnull(t = tu_tls_connect(port_of(2)));
	ck_assert_int_eq(tu_tls_write(t, buf, len), 0);
	n = tu_tls_read(t, got, sizeof(got), 10);
	ck_assert_int_gt(n, PL_HEADER);
	ck_assert_int_eq(pl_frame_decode(got + PL_HEADER, (size_t)n -
	    PL_HEADER, &g, err), 0);
	ck_assert_int_eq(g.type, PL_PONG);
	ck_assert(g.id == 41);
	tu_tls_close(t);
	/* host 3 serves block 2 beside host 2: it sends host 2 nothing */
	snprintf(state, sizeof(state), "%s/host3", dir);
	tu_act_as(state);
	ck_assert_ptr_nonnull(t = tu_tls_connect(port_of(2)));
	ck_assert_int_eq(tu_tls_write(t, buf, len), 0);
	ck_assert_int_eq(tu_tls_read(t, got, sizeof(got), 10), 0);
	tu_tls_close(t);
	tu_act_as(NULL);
	free(buf);
	/* the ring is as it was */
	{
		pc_request r = request_for("Tr ", 8, 2);
		unsigned char out[64];

		expect_output(0, &r, out);
	}
}
END_TEST

/* The client, shardmeter generate --peers among them, tries the next
 * entry when the first is down. */
START_TEST(test_entry_failover)
{
	pc_request r = request_for("It ", 16, 5);
	unsigned char expect[64];
	char err[KN_ERR_LEN], path[128], out[256];
	ph_list hosts;
	pc_result res;
	pc_conn *c;
	int which = -1;

	expect_output(0, &r, expect);
	snprintf(path, sizeof(path), "%s/hosts", dir);
	ck_assert_msg(ph_load(&hosts, path, err) == 0, "%s", err);
	ck_assert_int_eq(pc_connect_entry(&c, &hosts, 0, operator_tls, 5000,
	    &which, err), 0);
	ck_assert_int_eq(which, 0);
	pc_close(c);
	tu_stop(&host_pid[0], SIGKILL, 15);
	ck_assert_int_eq(pc_connect_entry(&c, &hosts, 0, operator_tls, 5000,
	    &which, err), 0);
	ck_assert_int_eq(which, 1);
	pc_close(c);
	ck_assert_msg(pc_generate_entries(&hosts, operator_tls, &r, &res,
	    30000, err) == 0, "%s", err);
	ck_assert_msg(res.ok, "%s", res.error);
	ck_assert(memcmp(res.output, expect, res.len) == 0);
	pc_result_clear(&res);
	/* the documented client: its output is the prompt and the answer */
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s generate --peers %s "
	    "--length 16 --steps 12 --temperature 0.9 --seed 5 'It ' "
	    "2>/dev/null", tu_shardmeter(), path) == 0, "%s", out);
	ck_assert_msg(strncmp(out, "It ", 3) == 0 && memcmp(out + 3, expect,
	    16) == 0, "generate --peers: %s", out);
	/* with no entry up, the error names both */
	tu_stop(&host_pid[1], SIGKILL, 15);
	ck_assert_int_ne(pc_generate_entries(&hosts, operator_tls, &r, &res,
	    5000, err), 0);
	ck_assert_msg(strstr(err, "every entry") != NULL, "%s", err);
	ph_free(&hosts);
}
END_TEST

/* A host killed and started again is linked to again by the hosts
 * before it and takes requests again: the first host of block 2, which
 * the hosts of block 3 prefer while it is up; while it is down, its
 * partner takes them and none fails. */
START_TEST(test_restart_rejoins)
{
	pc_request r = request_for("A ", 8, 1);
	pc_result res;
	char err[KN_ERR_LEN];
	long long jobs;
	int k;

	tu_stop(&host_pid[2], SIGKILL, 15);
	jobs = tu_status_int(port_of(3), "jobs");
	for (k = 0; k < 6; k++) {
		r.seed = 100 + (uint64_t)k;
		ck_assert_msg(ask(k % 2, &r, &res, 30000, err) == 0, "%s", err);
		ck_assert_msg(res.ok, "with host 2 down: %s", res.error);
		pc_result_clear(&res);
	}
	ck_assert_int_ge(tu_status_int(port_of(3), "jobs"), jobs + 6);
	start_host(2);
	wait_linked_to(2, 30);
	jobs = tu_status_int(port_of(2), "jobs");
	for (k = 0; k < 6; k++) {
		r.seed = 200 + (uint64_t)k;
		ck_assert_msg(ask(k % 2, &r, &res, 30000, err) == 0, "%s", err);
		ck_assert_msg(res.ok, "%s", res.error);
		pc_result_clear(&res);
	}
	ck_assert_int_ge(tu_status_int(port_of(2), "jobs"), jobs + 6);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("serve_failover");
	TCase *tc = tcase_create("loopback");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_reroute_mid_request);
	tcase_add_test(tc, test_ar_redo);
	tcase_add_test(tc, test_stopped_host_left);
	tcase_add_test(tc, test_stage_trust);
	tcase_add_test(tc, test_entry_failover);
	tcase_add_test(tc, test_restart_rejoins);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
