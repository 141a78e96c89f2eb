/* Trust end to end (DESIGN section 5): real blocktraind processes on
 * loopback, reached over real sockets by the clients a careful daemon
 * must refuse, and a peer list changed under a running daemon. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/identity.h"
#include "kernels/clock.h"
#include "tests/testutil.h"

static char dir[64];
static int base_port;
static pid_t pid;

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_trust");
	tu_trust_init(dir);
	base_port = tu_port_base(2);
	pid = 0;
}

static void
teardown(void)
{
	tu_stop(&pid, SIGKILL, 15);
	tu_remove_dir(dir);
}

/* Two replicas of one block, listed with the test as a client (or not);
 * replica 1 (its identity in dir/state1) never runs. */
static void
write_peers(int with_client)
{
	char text[2048] = "", state[128];
	int i;

	for (i = 0; i < 2; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, 1, state);
	}
	if (with_client)
		tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
}

static void
start(void)
{
	char listen[32], log[128], peers[128], spec[128], conf[128];
	char state[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port);
	snprintf(log, sizeof(log), "%s/log0", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(state, sizeof(state), "%s/state0", dir);
	pid = tu_daemon_start(log, base_port, "-f", "-v", "-c", conf, "-l",
	    listen, "-b", "1", "-s", state, "-p", peers, "-r", spec, "-D",
	    "cpu", "-t", "1", (char *)NULL);
}

/* What must not change: the served checkpoint's hash and the round. */
static void
state_of(char hash[65], long long *round)
{
	json_t *j = tu_status(base_port);

	ck_assert_ptr_nonnull(j);
	snprintf(hash, 65, "%s", json_string_value(json_object_get(
	    json_object_get(j, "checkpoint"), "sha256")));
	*round = json_integer_value(json_object_get(j, "round"));
	json_decref(j);
}

static int
log_has(const char *text)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/log0", dir);
	return tu_run_cmd(NULL, 0, "grep -q -F -e '%s' '%s'", text, path) == 0;
}

/* Every way in, as the client the test acts as now: a status read and
 * an update post, through libcurl and as raw bytes.  Returns the number
 * of answers that came. */
static int
try_all_ways(void)
{
	char path[128], answer[1024];
	tu_body b;
	int answered = 0;

	answered += tu_http_get(base_port, "/v1/status", &b) != 0;
	free(b.data);
	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/1/updates");
	answered += tu_http("POST", base_port, path, NULL, "x", 1, &b) != 0;
	free(b.data);
	answered += tu_raw_request(base_port, "GET /v1/status HTTP/1.1\r\n"
	    "Host: x\r\n\r\n", answer, sizeof(answer)) != 0;
	return answered;
}

START_TEST(test_handshake_matrix)
{
	char hash[65], hash2[65], other[128], idtext[ID_LEN], err[KN_ERR_LEN];
	char answer[1024], state1[128];
	long long round, round2;
	tu_conn *c;

	tu_write_run(dir, 1, 100, 50, 1);
	write_peers(1);
	start();
	ck_assert(tu_wait_state(base_port, 1, "done", 60));
	state_of(hash, &round);

	/* a key the list does not name */
	snprintf(other, sizeof(other), "%s/outsider", dir);
	ck_assert_int_eq(id_create(other, 0, err), 0);
	ck_assert_int_eq(id_of_dir(other, idtext, err), 0);
	tu_act_as(other);
	ck_assert_int_eq(try_all_ways(), 0);
	ck_assert_msg(log_has(idtext), "the log does not name %s", idtext);
	ck_assert(log_has("is not in the peer list"));

	/* a certificate out of its dates */
	snprintf(other, sizeof(other), "%s/expired", dir);
	tu_bad_identity(other, TU_ID_EXPIRED);
	tu_act_as(other);
	ck_assert_int_eq(try_all_ways(), 0);
	ck_assert(log_has("out of its dates"));

	/* a certificate its key did not sign */
	snprintf(other, sizeof(other), "%s/unsigned", dir);
	tu_bad_identity(other, TU_ID_NOT_SELF_SIGNED);
	tu_act_as(other);
	ck_assert_int_eq(try_all_ways(), 0);
	ck_assert(log_has("not signed by its own key"));

	/* replica 1's certificate, copied, without its key */
	tu_act_as(NULL);
	snprintf(state1, sizeof(state1), "%s/state1", dir);
	tu_act_forged(state1);
	ck_assert_int_eq(tu_raw_request(base_port, "POST /v1/blocks/1/rounds/"
	    "1/updates HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
	    answer, sizeof(answer)), 0);
	tu_act_forged(NULL);

	/* plain TCP to a TLS port */
	c = tu_conn_open(base_port, 1);
	ck_assert_int_eq(tu_conn_request(c, "GET /v1/status HTTP/1.1\r\n"
	    "Host: x\r\n\r\n", answer, sizeof(answer)), 0);
	ck_assert_ptr_null(strstr(answer, "HTTP/1.1"));
	tu_conn_close(c);

	/* the listed operator still gets in, and nothing has changed */
	state_of(hash2, &round2);
	ck_assert_str_eq(hash, hash2);
	ck_assert_int_eq(round, round2);
	ck_assert_int_eq(tu_status_is(base_port, "done"), 1);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

START_TEST(test_sighup_cutoff)
{
	char answer[2048];
	tu_conn *c;
	double t;

	tu_write_run(dir, 1, 1000000, 50, 1);
	write_peers(1);
	start();
	c = tu_conn_open(base_port, 0);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(tu_conn_request(c, "GET /v1/status HTTP/1.1\r\n"
	    "Host: x\r\n\r\n", answer, sizeof(answer)), 200);
	ck_assert(tu_conn_closed_within(c, 0.6) < 0);   /* it stays open */
	/* the operator leaves the list: its open connection ends at once */
	write_peers(0);
	kill(pid, SIGHUP);
	t = tu_conn_closed_within(c, 3);
	tu_conn_close(c);
	fprintf(stderr, "# SIGHUP: the removed client's connection closed "
	    "after %.3fs\n", t);
	ck_assert_msg(t >= 0 && t < 1.0, "closed after %.3fs", t);
	ck_assert_int_eq(tu_raw_request(base_port, "GET /v1/status HTTP/1.1"
	    "\r\nHost: x\r\n\r\n", answer, sizeof(answer)), 0);
	ck_assert(log_has("cut off 1 connection"));
	/* and back in */
	write_peers(1);
	kill(pid, SIGHUP);
	usleep(300000);
	ck_assert_int_eq(tu_raw_request(base_port, "GET /v1/status HTTP/1.1"
	    "\r\nHost: x\r\nConnection: close\r\n\r\n", answer,
	    sizeof(answer)), 200);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

/* Over TLS the byte meters go by the id the handshake proved: ?from= a
 * listed peer's address does not charge that peer. */
START_TEST(test_meter_by_id)
{
	char path[128];
	json_t *j, *peer;
	tu_body b;
	long long in;
	int i;

	tu_write_run(dir, 1, 1000000, 50, 1);
	write_peers(1);
	start();
	snprintf(path, sizeof(path), "/v1/status?from=127.0.0.1:%d",
	    base_port + 1);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(tu_http_get(base_port, path, &b), 200);
		free(b.data);
	}
	j = tu_status(base_port);
	ck_assert_ptr_nonnull(j);
	peer = json_array_get(json_object_get(j, "peers"), 1);
	in = json_integer_value(json_object_get(json_object_get(json_object_get(
	    peer, "bytes"), "in"), "other"));
	ck_assert_int_eq(in, 0);
	ck_assert_int_ge(json_integer_value(json_object_get(json_object_get(
	    json_object_get(j, "client_bytes"), "in"), "other")),
	    3 * (long long)strlen(path));
	json_decref(j);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

/* Prometheus's listener: plain HTTP beside the TLS API, /metrics and
 * nothing else. */
START_TEST(test_metrics_listener)
{
	/* the whole /metrics, every sample with its run, block and replica,
	 * so that the next answer is read from its start */
	static char answer[65536];
	char host[64];
	const char *addr;
	json_t *j;
	tu_conn *c;
	int port = 0;

	tu_write_run(dir, 1, 1000000, 50, 1);
	write_peers(1);
	start();
	j = tu_status(base_port);
	ck_assert_ptr_nonnull(j);
	addr = json_string_value(json_object_get(j, "metrics"));
	ck_assert_ptr_nonnull(addr);
	ck_assert_int_eq(sscanf(addr, "%63[^:]:%d", host, &port), 2);
	ck_assert_str_eq(host, "127.0.0.1");
	json_decref(j);
	c = tu_conn_open(port, 1);
	ck_assert_int_eq(tu_conn_request(c, "GET /metrics HTTP/1.1\r\n"
	    "Host: x\r\n\r\n", answer, sizeof(answer)), 200);
	ck_assert_ptr_nonnull(strstr(answer, "blocktrain_step"));
	ck_assert_int_eq(tu_conn_request(c, "GET /v1/status HTTP/1.1\r\n"
	    "Host: x\r\n\r\n", answer, sizeof(answer)), 404);
	ck_assert_int_eq(tu_conn_request(c, "GET /v1/blocks/1/checkpoint "
	    "HTTP/1.1\r\nHost: x\r\n\r\n", answer, sizeof(answer)), 404);
	ck_assert_int_eq(tu_conn_request(c, "POST /metrics HTTP/1.1\r\n"
	    "Host: x\r\nContent-Length: 0\r\n\r\n", answer,
	    sizeof(answer)), 405);
	tu_conn_close(c);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

/* Strangers holding connections open in their handshake (silent, or a
 * byte at a time) from five addresses, far beyond the limits: the listed
 * operator is still let in and answered every time. */
START_TEST(test_flood)
{
	int fds[250], n = 0, i, host;
	double t0, worst = 0;
	tu_body b;

	tu_write_run(dir, 1, 1000000, 50, 1);
	tu_write_file(dir, "daemon.conf", "eval_every = 0\n"
	    "metrics_listen = off\nmax_connections = 64\n"
	    "max_connections_per_addr = 16\nhandshake_timeout_ms = 20000\n");
	write_peers(1);
	start();
	for (host = 1; host <= 5; host++)
		for (i = 0; i < 50; i++)
			if ((fds[n] = tu_connect_from(base_port, host)) >= 0) {
				/* half of them start a TLS record and stop */
				if (i % 2 == 0 && write(fds[n], "\x16\x03\x01", 3)
				    != 3)
					ck_abort_msg("write");
				n++;
			}
	ck_assert_int_gt(n, 200);
	usleep(200000);
	for (i = 0; i < 10; i++) {
		t0 = kn_now();
		ck_assert_int_eq(tu_http_get(base_port, "/v1/status", &b), 200);
		free(b.data);
		if (kn_now() - t0 > worst)
			worst = kn_now() - t0;
	}
	fprintf(stderr, "# flood: %d strangers held open, the operator "
	    "answered 10 times, slowest in %.1f ms\n", n, 1000 * worst);
	for (i = 0; i < n; i++)
		close(fds[i]);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("trust");
	TCase *tc = tcase_create("loopback");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_handshake_matrix);
	tcase_add_test(tc, test_sighup_cutoff);
	tcase_add_test(tc, test_meter_by_id);
	tcase_add_test(tc, test_metrics_listener);
	tcase_add_test(tc, test_flood);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
