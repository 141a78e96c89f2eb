/* Quotas per listed identity on the training API, end to end (DESIGN
 * section 5): a real blocktraind on loopback, its peer list naming the
 * test's operator and a second operator (made with `shardmeter init
 * --client`) as clients, and a daemon line whose identity the test can
 * present.  An operator that holds many slow connections (the insider
 * slowloris) keeps nobody out. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/identity.h"
#include "kernels/error.h"
#include "tests/testutil.h"

#define SLOW 20                 /* the operator's slow connections */
#define MAX_CONNS 12
#define PER_CLIENT 8

static char dir[64], other[160], peer_state[128];
static int base_port;
static pid_t pid;

static void
setup(void)
{
	char text[2048] = "", state[128], idtext[ID_LEN], err[KN_ERR_LEN];
	char listen[32], log[128], peers[128], spec[128], conf[128];
	char xdg[128];

	signal(SIGPIPE, SIG_IGN);      /* a connection the daemon closed */
	tu_temp_dir(dir, sizeof(dir), "check_quota");
	tu_trust_init(dir);
	base_port = tu_port_base(2);
	pid = 0;
	tu_write_run(dir, 1, 100, 50, 1);
	/* small limits, so that a few dozen connections reach them; the
	 * slow connections' headers may take longer than the test */
	tu_write_file(dir, "daemon.conf", "eval_every = 100\n"
	    "eval_windows = 64\ncheckpoint_every = 100\n"
	    "peer_timeout_ms = 2000\nmetrics_listen = 127.0.0.1:0\n"
	    "max_connections = 12\nmax_connections_per_addr = 64\n"
	    "max_connections_per_client = 8\nheader_timeout_ms = 30000\n");
	/* replica 1 never runs: the test presents its identity, a daemon
	 * line of the list */
	snprintf(state, sizeof(state), "%s/state0", dir);
	tu_peer_line(text, sizeof(text), base_port, 1, state);
	snprintf(peer_state, sizeof(peer_state), "%s/state1", dir);
	tu_peer_line(text, sizeof(text), base_port + 1, 1, peer_state);
	tu_client_line(text, sizeof(text));
	/* a second operator, made as an operator makes one */
	snprintf(xdg, sizeof(xdg), "%s/o2", dir);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "XDG_CONFIG_HOME=%s %s init "
	    "--client >/dev/null 2>&1", xdg, tu_shardmeter()), 0);
	snprintf(other, sizeof(other), "%s/shardmeter", xdg);
	ck_assert_msg(id_of_dir(other, idtext, err) == 0, "%s", err);
	snprintf(text + strlen(text), sizeof(text) - strlen(text),
	    "client %s second\n", idtext);
	tu_write_file(dir, "peers", text);

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port);
	snprintf(log, sizeof(log), "%s/log0", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	pid = tu_daemon_start(log, base_port, "-f", "-v", "-c", conf, "-l",
	    listen, "-b", "1", "-s", state, "-p", peers, "-r", spec, "-D",
	    "cpu", "-t", "1", (char *)NULL);
	ck_assert(tu_wait_state(base_port, 1, "done", 60));
}

static void
teardown(void)
{
	tu_stop(&pid, SIGKILL, 15);
	tu_remove_dir(dir);
}

/* Opens n TLS connections as the identity acting now, each sending the
 * first byte of a request and no more (the slowloris), into t[]; returns
 * how many the daemon still holds open without an answer. */
static int
open_slow(tu_tls **t, int n)
{
	char buf[512];
	int i, held = 0;

	for (i = 0; i < n; i++) {
		t[i] = tu_tls_connect(base_port);
		if (t[i] == NULL || tu_tls_write(t[i], "G", 1) != 0)
			continue;
		/* nothing within the wait: held, not answered */
		if (tu_tls_read(t[i], buf, sizeof(buf), 0.3) < 0)
			held++;
	}
	return held;
}

/* Of t[], those still held open without an answer. */
static int
still_held(tu_tls **t, int n)
{
	char buf[512];
	int i, held = 0;

	for (i = 0; i < n; i++)
		if (t[i] != NULL && tu_tls_read(t[i], buf, sizeof(buf), 0.05) < 0)
			held++;
	return held;
}

/* The value of a metric in Prometheus text (whatever the labels the
 * daemon adds to every sample), -1 if absent. */
static double
metric_of(const char *text, const char *name)
{
	double v;

	return tu_sample(text, name, &v) ? v : -1;
}

static long
status_as(const char *identity)
{
	tu_body b;
	long st;

	tu_act_as(identity);
	st = tu_http_get(base_port, "/v1/status", &b);
	free(b.data);
	tu_act_as(NULL);
	return st;
}

/* An operator's many slow connections: at most its quota is held, a
 * second operator and a peer are served; once both operators fill every
 * place, a peer still is, in the place of a client's connection. */
START_TEST(test_insider_slowloris)
{
	tu_tls *slow[SLOW] = { NULL }, *second[MAX_CONNS] = { NULL };
	tu_body b;
	int held, i;

	held = open_slow(slow, SLOW);
	fprintf(stderr, "# %d of %d slow connections of one operator held "
	    "(max_connections %d, per client %d)\n", held, SLOW, MAX_CONNS,
	    PER_CLIENT);
	ck_assert_int_le(held, PER_CLIENT);
	ck_assert_int_eq(status_as(other), 200);
	ck_assert_int_eq(status_as(peer_state), 200);

	/* the second operator takes what is left, and more */
	tu_act_as(other);
	held = open_slow(second, MAX_CONNS - PER_CLIENT);
	tu_act_as(NULL);
	fprintf(stderr, "# the second operator holds %d more\n", held);
	held = still_held(slow, SLOW) + still_held(second, MAX_CONNS -
	    PER_CLIENT);
	fprintf(stderr, "# %d held in all\n", held);
	ck_assert_int_eq(held, MAX_CONNS);
	/* every place taken by clients: a peer is served all the same */
	ck_assert_int_eq(status_as(peer_state), 200);
	ck_assert_int_lt(still_held(slow, SLOW) + still_held(second,
	    MAX_CONNS - PER_CLIENT), MAX_CONNS);
	/* counted where an operator looks (as a peer: the operators have
	 * no place left) */
	tu_act_as(peer_state);
	ck_assert_int_eq(tu_http_get(base_port, "/metrics", &b), 200);
	tu_act_as(NULL);
	ck_assert_msg(metric_of(b.data, "blocktrain_http_evicted_total") >= 1,
	    "%s", b.data);
	ck_assert(metric_of(b.data, "blocktrain_http_over_quota_total") >=
	    SLOW - PER_CLIENT);
	free(b.data);
	for (i = 0; i < SLOW; i++)
		tu_tls_close(slow[i]);
	for (i = 0; i < MAX_CONNS; i++)
		tu_tls_close(second[i]);
	/* and the operators again, once they let go */
	ck_assert_int_eq(status_as(NULL), 200);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("quota");
	TCase *tc = tcase_create("quota");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_insider_slowloris);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
