/* Strikes (daemon/core/strikes.h): refusals counted per peer and kind, the
 * quarantine past the threshold, and the operator's clear; a node's
 * status, metrics and TLS check with strikes noted; and a real daemon's
 * clear (POST /v1/strikes/clear, shardmeter strikes --clear, SIGHUP). */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/node/api.h"
#include "daemon/node/node.h"
#include "daemon/core/strikes.h"
#include "kernels/clock.h"
#include "tests/testutil.h"

#define PEER_A "AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAA"
#define PEER_B "BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBB"

static const char *hooked;
static int hooks;

static void
on_quarantine(void *arg, const char *peer_id)
{
	(void)arg;
	hooked = peer_id;
	hooks++;
}

START_TEST(test_threshold)
{
	char err[KN_ERR_LEN];
	strikes *s;
	const strikes_peer *p;

	ck_assert_int_eq(strikes_new(&s, 3, err), 0);
	hooks = 0;
	strikes_on_quarantine(s, on_quarantine, NULL);
	ck_assert_int_eq(strikes_count(s), 0);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "share +2"),
	    0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_CHECKPOINT, "zero"),
	    0);
	ck_assert_int_eq(strikes_note(s, PEER_B, STRIKES_CLAIM, "step 1e6"), 0);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 0);
	ck_assert_int_eq(hooks, 0);
	/* the third refusal of A, whatever its kind, quarantines A only */
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "share +3"),
	    1);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 1);
	ck_assert_int_eq(strikes_quarantined(s, PEER_B), 0);
	ck_assert_int_eq(hooks, 1);
	ck_assert_str_eq(hooked, PEER_A);
	ck_assert_int_eq(strikes_quarantined_count(s), 1);
	/* more refusals of a quarantined peer count but hook no more */
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "again"), 1);
	ck_assert_int_eq(hooks, 1);
	ck_assert_int_eq(strikes_count(s), 2);
	p = strikes_find(s, PEER_A);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->total[STRIKES_UPDATE], 3);
	ck_assert_uint_eq(p->total[STRIKES_CHECKPOINT], 1);
	ck_assert_uint_eq(p->total[STRIKES_CLAIM], 0);
	ck_assert_uint_eq(p->current, 4);
	ck_assert_str_eq(p->why, "again");
	ck_assert_ptr_eq(strikes_at(s, 0), p);
	ck_assert_str_eq(strikes_at(s, 1)->id, PEER_B);
	ck_assert_ptr_null(strikes_at(s, 2));
	ck_assert_uint_eq(strikes_refused(s, PEER_A), 1);
	ck_assert_uint_eq(strikes_refused(s, PEER_A), 2);
	ck_assert_uint_eq(strikes_refused(s, PEER_B), 0);
	strikes_free(s);
}
END_TEST

START_TEST(test_clear)
{
	char err[KN_ERR_LEN];
	strikes *s;
	const strikes_peer *p;
	int i;

	ck_assert_int_eq(strikes_new(&s, 2, err), 0);
	strikes_note(s, PEER_A, STRIKES_UPDATE, "x");
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "y"), 1);
	strikes_clear(s);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 0);
	ck_assert_uint_eq(strikes_clears(s), 1);
	p = strikes_find(s, PEER_A);
	/* the totals are counters and stay; the count starts again */
	ck_assert_uint_eq(p->total[STRIKES_UPDATE], 2);
	ck_assert_uint_eq(p->current, 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "z"), 0);
	/* the same refusal again at once is no new strike */
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "z"), 0);
	ck_assert_uint_eq(p->current, 1);
	ck_assert_uint_eq(p->repeats, 1);
	ck_assert_uint_eq(p->total[STRIKES_UPDATE], 4);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "z2"), 1);
	strikes_free(s);
	/* threshold 0: counted, never quarantined */
	ck_assert_int_eq(strikes_new(&s, 0, err), 0);
	for (i = 0; i < 100; i++)
		ck_assert_int_eq(strikes_note(s, PEER_B, STRIKES_CLAIM, "c"), 0);
	ck_assert_uint_eq(strikes_find(s, PEER_B)->total[STRIKES_CLAIM], 100);
	strikes_free(s);
}
END_TEST

START_TEST(test_bad_arguments)
{
	char err[KN_ERR_LEN];
	strikes *s;

	ck_assert_int_eq(strikes_new(&s, -1, err), KN_EINVAL);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(strstr(err, "strikes_quarantine"));
	ck_assert_int_eq(strikes_new(&s, STRIKES_MAX_THRESHOLD + 1, err),
	    KN_EINVAL);
	/* no table, no id: nothing counted, nothing quarantined */
	ck_assert_int_eq(strikes_note(NULL, PEER_A, STRIKES_UPDATE, "x"), 0);
	ck_assert_int_eq(strikes_quarantined(NULL, PEER_A), 0);
	ck_assert_int_eq(strikes_new(&s, 1, err), 0);
	ck_assert_int_eq(strikes_note(s, NULL, STRIKES_UPDATE, "x"), 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_KINDS, NULL), 1);
	ck_assert_uint_eq(strikes_find(s, PEER_A)->total[STRIKES_CLAIM], 1);
	ck_assert_str_eq(strikes_kind_name(STRIKES_UPDATE), "update");
	ck_assert_str_eq(strikes_kind_name(STRIKES_CHECKPOINT), "checkpoint");
	ck_assert_str_eq(strikes_kind_name(STRIKES_CLAIM), "claim");
	strikes_clear(NULL);
	strikes_free(s);
	strikes_free(NULL);
}
END_TEST

/* A node as node_setup leaves it, enough for status, metrics and the
 * TLS check: dir/peers with replicas 0 (us) and 1 of block 1 and the
 * test's operator, and a strikes table of threshold 2. */
static char dir[64];
static node nd;

static void
node_setup_fixture(void)
{
	char text[2048] = "", state[128], err[PR_ERR_LEN];
	int i;

	tu_temp_dir(dir, sizeof(dir), "check_strikes");
	tu_trust_init(dir);
	for (i = 0; i < 2; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), 7100 + i, 1, state);
	}
	tu_client_line(text, sizeof(text));
	memset(&nd, 0, sizeof(nd));
	ck_assert_int_eq(peers_load(&nd.peers, tu_write_file(dir, "peers",
	    text), err), 0);
	nd.peers.v[0].self = 1;
	nd.cfg.block = 1;
	nd.spec.blocks = 1;
	nd.spec.cuts[1] = 1.0;
	nd.spec.batch = nd.spec.window = 1;
	nd.report.state = "training";
	ck_assert_int_eq(strikes_new(&nd.trust.strikes, 2, err), 0);
	strikes_on_quarantine(nd.trust.strikes, node_trust_quarantined, &nd);
}

static void
node_teardown_fixture(void)
{
	strikes_free(nd.trust.strikes);
	peers_free(&nd.peers);
	tu_remove_dir(dir);
}

/* A quarantined identity is refused in the handshake (what node_allows
 * answers the TLS layer), and only it, until the operator's clear. */
START_TEST(test_trust_refuses_quarantined)
{
	const uint8_t *peer = nd.peers.v[1].id, *op = nd.peers.clients[0].id;
	uint8_t outsider[ID_BYTES];

	memset(outsider, 0x5a, sizeof(outsider));
	ck_assert_int_eq(node_trust_allows(&nd, peer), 1);
	ck_assert_int_eq(node_trust_allows(&nd, op), 1);
	ck_assert_int_eq(node_trust_allows(&nd, outsider), 0);
	ck_assert_int_eq(strikes_note(nd.trust.strikes, nd.peers.v[1].id_text,
	    STRIKES_CHECKPOINT, "zero checkpoint"), 0);
	ck_assert_int_eq(node_trust_allows(&nd, peer), 1);
	ck_assert_int_eq(strikes_note(nd.trust.strikes, nd.peers.v[1].id_text,
	    STRIKES_CLAIM, "step 200000 of 1000"), 1);
	ck_assert_int_eq(node_trust_allows(&nd, peer), 0);
	ck_assert_int_eq(node_trust_allows(&nd, peer), 0);
	ck_assert_uint_eq(strikes_find(nd.trust.strikes,
	    nd.peers.v[1].id_text)->refused, 2);
	/* the others still get in */
	ck_assert_int_eq(node_trust_allows(&nd, nd.peers.v[0].id), 1);
	ck_assert_int_eq(node_trust_allows(&nd, op), 1);
	strikes_clear(nd.trust.strikes);
	ck_assert_int_eq(node_trust_allows(&nd, peer), 1);
}
END_TEST

/* The status and the metrics count a peer's refusals by kind and name
 * the quarantine. */
START_TEST(test_status_metrics_count)
{
	const char *id = nd.peers.v[1].id_text;
	char *text, line[512];
	json_t *o, *st, *e, *pe;
	json_error_t jerr;
	size_t len;
	double v;

	strikes_note(nd.trust.strikes, id, STRIKES_UPDATE,
	    "share +1.6 nats/byte");
	strikes_note(nd.trust.strikes, id, STRIKES_UPDATE,
	    "share +2.1 nats/byte");
	text = api_status_json(&nd, &len);
	ck_assert_ptr_nonnull(text);
	o = json_loads(text, 0, &jerr);
	free(text);
	ck_assert_ptr_nonnull(o);
	st = json_object_get(o, "strikes");
	ck_assert_int_eq(json_integer_value(json_object_get(st, "threshold")),
	    2);
	ck_assert_int_eq(json_array_size(json_object_get(st, "quarantined")),
	    1);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(st,
	    "quarantined"), 0)), id);
	e = json_array_get(json_object_get(st, "peers"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(e, "id")), id);
	ck_assert_str_eq(json_string_value(json_object_get(e, "addr")),
	    nd.peers.v[1].addr);
	ck_assert_int_eq(json_integer_value(json_object_get(e, "update")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(e, "checkpoint")),
	    0);
	ck_assert(json_is_true(json_object_get(e, "quarantined")));
	ck_assert_str_eq(json_string_value(json_object_get(e, "why")),
	    "share +2.1 nats/byte");
	pe = json_array_get(json_object_get(o, "peers"), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(pe,
	    "strikes"), "update")), 2);
	ck_assert(json_is_true(json_object_get(pe, "quarantined")));
	json_decref(o);

	text = api_metrics_text(&nd, &len);
	ck_assert_ptr_nonnull(text);
	snprintf(line, sizeof(line), "blocktrain_peer_strikes_total{peer=\"%s\","
	    "id=\"%s\",kind=\"update\"}", nd.peers.v[1].addr, id);
	ck_assert_msg(tu_sample(text, line, &v) && v == 2, "no '%s' 2 in\n%s",
	    line, text);
	snprintf(line, sizeof(line), "blocktrain_peer_strikes_total{peer=\"%s\","
	    "id=\"%s\",kind=\"claim\"}", nd.peers.v[1].addr, id);
	ck_assert_msg(tu_sample(text, line, &v) && v == 0, "no '%s' 0", line);
	snprintf(line, sizeof(line), "blocktrain_peer_quarantined{peer=\"%s\","
	    "id=\"%s\"}", nd.peers.v[1].addr, id);
	ck_assert_msg(tu_sample(text, line, &v) && v == 1, "no '%s' 1", line);
	ck_assert(strstr(text, "# TYPE blocktrain_peer_strikes_total counter"));
	free(text);
}
END_TEST

/* A real daemon: the strikes in its status and metrics from the start,
 * and the operator's clear by POST, by shardmeter strikes and by a
 * SIGHUP that leaves the list as it was; a listed daemon may not clear. */
static long long
clears_of(int port)
{
	json_t *j = tu_status(port);
	long long v;

	ck_assert_ptr_nonnull(j);
	v = json_integer_value(json_object_get(json_object_get(j, "strikes"),
	    "clears"));
	json_decref(j);
	return v;
}

/* The strikes file: written at each change, taken back by a start of
 * the same run, refused for another run or when it is not one. */
START_TEST(test_file)
{
	const char *id = nd.peers.v[1].id_text;
	char path[128], err[KN_ERR_LEN];
	const strikes_peer *p;
	strikes *s;

	snprintf(path, sizeof(path), "%s/strikes", dir);
	strikes_set_file(nd.trust.strikes, path, "run-a");
	strikes_note(nd.trust.strikes, id, STRIKES_CLAIM, "step 200000");
	strikes_note(nd.trust.strikes, id, STRIKES_CHECKPOINT, "zero");
	ck_assert_int_eq(strikes_quarantined(nd.trust.strikes, id), 1);
	ck_assert_int_eq(strikes_new(&s, 2, err), 0);
	ck_assert_msg(strikes_load(s, path, "run-a", err) == 0, "%s", err);
	ck_assert_int_eq(strikes_quarantined(s, id), 1);
	p = strikes_find(s, id);
	ck_assert_uint_eq(p->total[STRIKES_CLAIM], 1);
	ck_assert_uint_eq(p->total[STRIKES_CHECKPOINT], 1);
	ck_assert_uint_eq(p->current, 2);
	ck_assert_str_eq(p->why, "zero");
	strikes_free(s);
	/* a clear is written too */
	strikes_clear(nd.trust.strikes);
	ck_assert_int_eq(strikes_new(&s, 2, err), 0);
	ck_assert_int_eq(strikes_load(s, path, "run-a", err), 0);
	ck_assert_int_eq(strikes_quarantined(s, id), 0);
	ck_assert_uint_eq(strikes_clears(s), 1);
	strikes_free(s);
	/* another run's, or no strikes file: nothing taken */
	ck_assert_int_eq(strikes_new(&s, 2, err), 0);
	ck_assert_int_eq(strikes_load(s, path, "run-b", err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "another run"));
	ck_assert_int_eq(strikes_count(s), 0);
	tu_write_file(dir, "strikes", "{\"run_id\":\"run-a\",\"clears\":0,"
	    "\"peers\":[{\"id\":\"x\",\"update\":-1}]}");
	ck_assert_int_eq(strikes_load(s, path, "run-a", err), KN_EINVAL);
	ck_assert_int_eq(strikes_count(s), 0);
	tu_write_file(dir, "strikes", "not json");
	ck_assert_int_eq(strikes_load(s, path, "run-a", err), KN_EINVAL);
	snprintf(path, sizeof(path), "%s/none", dir);
	ck_assert_int_eq(strikes_load(s, path, "run-a", err), 0);
	strikes_free(s);
}
END_TEST

START_TEST(test_daemon_clear)
{
	char listen[32], log[128], peers[128], spec[128], conf[128];
	char state[128], out[4096], id1[ID_LEN], line[512];
	int port = tu_port_base(2);
	json_t *j, *pe;
	tu_body b;
	pid_t pid;
	double t, v;
	int i;

	tu_write_run(dir, 1, 1000000, 50, 1);
	tu_write_file(dir, "daemon.conf", "eval_every = 0\n"
	    "metrics_listen = off\nstrikes_quarantine = 3\n");
	{
		char text[2048] = "";

		for (i = 0; i < 2; i++) {
			snprintf(state, sizeof(state), "%s/state%d", dir, i);
			tu_peer_line(text, sizeof(text), port + i, 1, state);
		}
		tu_client_line(text, sizeof(text));
		tu_write_file(dir, "peers", text);
	}
	/* replica 1 quarantined by an earlier start of this run */
	{
		char text[1024], rid[PR_RUN_ID_LEN], err[PR_ERR_LEN];
		peers_list pl;
		pr_spec sp;

		snprintf(spec, sizeof(spec), "%s/run.conf", dir);
		ck_assert_int_eq(pr_spec_load(&sp, spec, err), 0);
		ck_assert_int_eq(pr_spec_run_id(&sp, rid, err), 0);
		snprintf(peers, sizeof(peers), "%s/peers", dir);
		ck_assert_int_eq(peers_load(&pl, peers, err), 0);
		snprintf(id1, sizeof(id1), "%s", pl.v[1].id_text);
		peers_free(&pl);
		snprintf(text, sizeof(text), "{\"run_id\":\"%s\",\"clears\":0,"
		    "\"peers\":[{\"id\":\"%s\",\"update\":3,\"checkpoint\":0,"
		    "\"claim\":0,\"current\":3,\"quarantined\":true,\"why\":"
		    "\"share +2.1\"}]}", rid, id1);
		snprintf(state, sizeof(state), "%s/state0", dir);
		tu_write_file(state, "strikes", text);
	}
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(log, sizeof(log), "%s/log0", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(state, sizeof(state), "%s/state0", dir);
	pid = tu_daemon_start(log, port, "-f", "-c", conf, "-l", listen, "-b",
	    "1", "-s", state, "-p", peers, "-r", spec, "-D", "cpu", "-t", "1",
	    (char *)NULL);

	j = tu_status(port);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j,
	    "strikes"), "threshold")), 3);
	pe = json_array_get(json_object_get(j, "peers"), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(pe,
	    "strikes"), "update")), 3);
	ck_assert(json_is_true(json_object_get(pe, "quarantined")));
	json_decref(j);
	ck_assert_int_eq(tu_http_get(port, "/metrics", &b), 200);
	snprintf(line, sizeof(line), "blocktrain_peer_quarantined{peer="
	    "\"127.0.0.1:%d\",id=\"%s\"}", port + 1, id1);
	ck_assert_msg(tu_sample(b.data, line, &v) && v == 1, "no %s 1", line);
	free(b.data);
	/* the quarantined identity is refused in the handshake, by the
	 * log's word too; the operator still gets in */
	snprintf(state, sizeof(state), "%s/state1", dir);
	tu_act_as(state);
	ck_assert_int_eq(tu_http_get(port, "/v1/status", &b), 0);
	free(b.data);
	tu_act_as(NULL);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "grep -q 'refused a connection of "
	    "quarantined peer %s' %s", id1, log), 0);
	/* replica 1 is down: the status still answers for the other */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s status --peers %s",
	    tu_shardmeter(), peers), 0);
	ck_assert_msg(strstr(out, "QUARANTINED") != NULL, "%s", out);

	ck_assert_int_eq(tu_http("GET", port, "/v1/strikes/clear", NULL, NULL,
	    0, &b), 405);
	free(b.data);
	ck_assert_int_eq(tu_http("POST", port, "/v1/strikes/clear", NULL, "",
	    0, &b), 200);
	ck_assert_ptr_nonnull(strstr(b.data, "\"lifted\":1"));
	free(b.data);
	ck_assert_int_eq(clears_of(port), 1);
	/* replica 1 is let in again, but may not clear: it is no
	 * operator */
	tu_act_as(state);
	ck_assert_int_eq(tu_http_get(port, "/v1/status", &b), 200);
	free(b.data);
	ck_assert_int_eq(tu_http("POST", port, "/v1/strikes/clear", NULL, "",
	    0, &b), 403);
	free(b.data);
	tu_act_as(NULL);
	ck_assert_int_eq(clears_of(port), 1);

	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s strikes --peers %s "
	    "--peer %s --clear", tu_shardmeter(), peers, listen), 0);
	ck_assert_msg(strstr(out, "cleared") != NULL, "%s", out);
	ck_assert_int_eq(clears_of(port), 2);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s strikes --peers %s "
	    "--peer %s", tu_shardmeter(), peers, listen), 0);
	ck_assert_msg(strstr(out, "quarantine after 3") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "update 3") != NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s strikes --peers %s "
	    "--peer %s --json", tu_shardmeter(), peers, listen), 0);
	ck_assert_msg(strstr(out, "\"threshold\": 3") != NULL, "%s", out);
	/* a daemon that does not answer (replica 1 never runs) */
	snprintf(line, sizeof(line), "127.0.0.1:%d", port + 1);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s strikes --peers %s "
	    "--peer %s --clear", tu_shardmeter(), peers, line), 1);
	ck_assert_msg(strstr(out, "cannot reach") != NULL, "%s", out);

	/* SIGHUP with the list unchanged */
	kill(pid, SIGHUP);
	for (t = kn_now(); clears_of(port) < 3 && kn_now() - t < 10;)
		usleep(50000);
	ck_assert_int_eq(clears_of(port), 3);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

int
main(void)
{
	Suite *su = suite_create("strikes");
	TCase *tc = tcase_create("strikes");
	TCase *tn = tcase_create("node");
	TCase *td = tcase_create("daemon");

	tcase_add_test(tc, test_threshold);
	tcase_add_test(tc, test_clear);
	tcase_add_test(tc, test_bad_arguments);
	suite_add_tcase(su, tc);
	tcase_add_checked_fixture(tn, node_setup_fixture,
	    node_teardown_fixture);
	tcase_add_test(tn, test_trust_refuses_quarantined);
	tcase_add_test(tn, test_status_metrics_count);
	tcase_add_test(tn, test_file);
	suite_add_tcase(su, tn);
	tcase_add_checked_fixture(td, node_setup_fixture,
	    node_teardown_fixture);
	tcase_set_timeout(td, 120);
	tcase_add_test(td, test_daemon_clear);
	suite_add_tcase(su, td);
	return tu_run_suite(su);
}
