/* Predicted beside measured, end to end: a run started from the files
 * `shardmeter plan` writes (two replicas of one block on loopback) reports
 * the plan's predictions and its measured figures in its status, its
 * /metrics and `shardmeter status`, each error being (m - p) / p of the
 * two figures it reports; a plan for another run or placement, or a bad
 * plan file, is refused at start with its reason; a daemon without a
 * plan reports nothing new.  Values are checked for consistency, never
 * for size or time. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/error.h"
#include "proto/spec.h"
#include "tests/testutil.h"

#define MAXD 2
/* equal to rounding: the JSON's reals are doubles, /metrics prints 9
 * significant digits */
#define JSON_TOL 1e-9
#define METRIC_TOL 1e-6

static char dir[64];
static int base_port;
static pid_t pids[MAXD];

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_predicted");
	tu_trust_init(dir);
	base_port = tu_port_base(MAXD);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < MAXD; i++)
		tu_stop(&pids[i], SIGKILL, 15);
	tu_remove_dir(dir);
	curl_global_cleanup();
}

static int
close_to(double a, double b, double tol)
{
	return fabs(a - b) <= tol * fmax(1, fmax(fabs(a), fabs(b)));
}

/* The peer id of daemon i's identity (dir/state<i>), pinned for tu_http;
 * the peer list line in line. */
static void
peer_id(int i, int block, char *id, size_t idlen, char *line, size_t len)
{
	char state[128];

	line[0] = '\0';
	snprintf(state, sizeof(state), "%s/state%d", dir, i);
	tu_peer_line(line, len, base_port + i, block, state);
	ck_assert_int_eq(sscanf(line, "%*s %*d %s", id), 1);
	ck_assert_uint_lt(strlen(id), idlen);
}

/* Two equal hosts h0 and h1 on loopback, the spec's shape. */
static const char *
write_topology(void)
{
	char text[4096], id[2][128], line[256];
	int i;

	for (i = 0; i < 2; i++)
		peer_id(i, 1, id[i], sizeof(id[i]), line, sizeof(line));
	snprintf(text, sizeof(text), "{ \"version\": 1, \"measured_at\": "
	    "\"by hand\", \"shape\": { \"width\": 32, \"heads\": 2, "
	    "\"layers\": 1, \"window\": 32, \"batch\": 16 },\n\"hosts\": [\n"
	    "{ \"name\": \"h0\", \"address\": \"127.0.0.1:%d\", \"id\": \"%s\", "
	    "\"device\": \"cpu\", \"memory_bytes\": 1e10, "
	    "\"train_positions_per_s\": 20000, \"forward_positions_per_s\": "
	    "60000 },\n{ \"name\": \"h1\", \"address\": \"127.0.0.1:%d\", "
	    "\"id\": \"%s\", \"device\": \"cpu\", \"memory_bytes\": 1e10, "
	    "\"train_positions_per_s\": 20000, \"forward_positions_per_s\": "
	    "60000 } ],\n\"links\": [\n"
	    "{ \"from\": \"h0\", \"to\": \"h1\", \"rtt_ms\": 0.1, "
	    "\"rtt_spread_ms\": 0.01, \"samples\": 10, \"stream_bytes_per_s\": "
	    "1e9, \"streams\": 4, \"multi_bytes_per_s\": 2e9 },\n"
	    "{ \"from\": \"h1\", \"to\": \"h0\", \"rtt_ms\": 0.1, "
	    "\"rtt_spread_ms\": 0.01, \"samples\": 10, \"stream_bytes_per_s\": "
	    "1e9, \"streams\": 4, \"multi_bytes_per_s\": 2e9 } ] }\n",
	    base_port, id[0], base_port + 1, id[1]);
	return tu_write_file(dir, "topology.json", text);
}

/* The file at path, whole, NUL-terminated; the caller frees it. */
static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text;
	long n;

	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	text = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(fread(text, 1, (size_t)n, f), n);
	text[n] = '\0';
	fclose(f);
	return text;
}

/* dir/daemon.conf's lines, then conf/HOST.conf's, in dir/plan/conf: the
 * merge the plan's files ask for, so plan = ../plan.json holds. */
static void
merged_conf(const char *host, char *path, size_t len)
{
	char p[256], *base, *own, *text;

	snprintf(p, sizeof(p), "%s/daemon.conf", dir);
	base = slurp(p);
	snprintf(p, sizeof(p), "%s/plan/conf/%s.conf", dir, host);
	own = slurp(p);
	ck_assert_ptr_nonnull(strstr(own, "\nplan = ../plan.json\n"));
	text = malloc(strlen(base) + strlen(own) + 1);
	ck_assert_ptr_nonnull(text);
	strcpy(text, base);
	strcat(text, own);
	snprintf(p, sizeof(p), "%s/plan/conf", dir);
	{
		char name[64];

		snprintf(name, sizeof(name), "merged-%s.conf", host);
		snprintf(path, len, "%s", tu_write_file(p, name, text));
	}
	free(base);
	free(own);
	free(text);
}

static void
start_planned(int i, const char *conf)
{
	char listen[32], log[128], state[128], peers[128], spec[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(state, sizeof(state), "%s/state%d", dir, i);
	snprintf(peers, sizeof(peers), "%s/plan/peers", dir);
	snprintf(spec, sizeof(spec), "%s/plan/spec.conf", dir);
	pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c", conf,
	    "-l", listen, "-s", state, "-p", peers, "-r", spec, "-D", "cpu",
	    "-t", "1", (char *)NULL);
}

/* A {predicted, measured, error} object: predicted is want, and when
 * measured, error is (m - p) / p of the two.  Returns measured, or -1. */
static double
check_pair(json_t *pair, double want, const char *what)
{
	double p = json_number_value(json_object_get(pair, "predicted")), m, e;
	json_t *jm = json_object_get(pair, "measured");

	ck_assert_msg(close_to(p, want, JSON_TOL), "%s: predicted %.9g, the "
	    "plan says %.9g", what, p, want);
	if (json_is_null(jm)) {
		ck_assert(json_is_null(json_object_get(pair, "error")));
		return -1;
	}
	m = json_number_value(jm);
	e = json_number_value(json_object_get(pair, "error"));
	ck_assert_msg(m > 0, "%s: measured %g", what, m);
	ck_assert_msg(close_to(e, (m - p) / p, JSON_TOL), "%s: error %.9g, "
	    "(m - p) / p %.9g", what, e, (m - p) / p);
	return m;
}

/* The value of the sample "name{labels}" of a /metrics text; 0 when the
 * line is not there. */
static int
sample(const char *text, const char *name, const char *labels, double *v)
{
	char want[512];

	snprintf(want, sizeof(want), "%s{%s}", name, labels);
	return tu_sample(text, want, v);
}

/* The three samples of figure name in the metrics agree with the status
 * pair, and the error sample is (m - p) / p of the other two. */
static void
check_metric(const char *text, const char *name, const char *labels,
    json_t *pair)
{
	char metric[128];
	double p, m, e;

	snprintf(metric, sizeof(metric), "blocktrain_predicted_%s", name);
	ck_assert_msg(sample(text, metric, labels, &p), "no %s{%s}", metric,
	    labels);
	ck_assert(close_to(p, json_number_value(json_object_get(pair,
	    "predicted")), METRIC_TOL));
	snprintf(metric, sizeof(metric), "blocktrain_measured_%s", name);
	if (json_is_null(json_object_get(pair, "measured"))) {
		ck_assert(!sample(text, metric, labels, &m));
		return;
	}
	ck_assert_msg(sample(text, metric, labels, &m), "no %s{%s}", metric,
	    labels);
	ck_assert(close_to(m, json_number_value(json_object_get(pair,
	    "measured")), METRIC_TOL));
	snprintf(metric, sizeof(metric), "blocktrain_%s_error_ratio", name);
	ck_assert_msg(sample(text, metric, labels, &e), "no %s{%s}", metric,
	    labels);
	ck_assert_msg(fabs(e - (m - p) / p) <= METRIC_TOL * (1 + fabs(m / p)),
	    "%s: error %.9g, (m - p) / p %.9g", name, e, (m - p) / p);
}

static char *
metrics_of(json_t *status)
{
	const char *addr = json_string_value(json_object_get(status,
	    "metrics"));
	tu_body b;

	ck_assert_ptr_nonnull(addr);
	ck_assert_int_eq(tu_http_get(atoi(strrchr(addr, ':') + 1), "/metrics",
	    &b), 200);
	return b.data;
}

/* The row of `shardmeter status` whose figure starts with what: its
 * printed error is (m - p) / p of its printed figures.  0 when the row
 * has no measurement. */
static int
check_row(const char *out, const char *block, const char *what)
{
	char head[64];
	const char *at;
	double p, m, e;

	snprintf(head, sizeof(head), "%5s  %s", block, what);
	at = strstr(out, head);
	ck_assert_msg(at != NULL, "no row '%s' in:\n%s", head, out);
	at += strlen(head);
	if (sscanf(at, "%lf %lf %lf%%", &p, &m, &e) != 3)
		return 0;
	/* figures printed to 6 digits, the error to 0.01 % */
	ck_assert_msg(fabs(e - 100 * (m - p) / p) <= 0.006 + 1e-3 * m / p,
	    "row '%s': error %g%%, (m - p) / p %g%%", head, e,
	    100 * (m - p) / p);
	return 1;
}

static json_t *
chosen_block(json_t *plan, json_t **cand)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(plan, "candidates"), i, c)
		if (json_integer_value(json_object_get(c, "rank")) ==
		    json_integer_value(json_object_get(plan, "chosen"))) {
			*cand = c;
			return json_array_get(json_object_get(c, "blocks"), 0);
		}
	ck_abort_msg("no chosen candidate");
	return NULL;
}

static double
link_bytes(json_t *cand, const char *from, const char *to)
{
	json_t *l;
	size_t i;

	json_array_foreach(json_object_get(cand, "links"), i, l)
		if (strcmp(json_string_value(json_object_get(l, "from")),
		    from) == 0 && strcmp(json_string_value(json_object_get(l,
		    "to")), to) == 0)
			return json_number_value(json_object_get(l,
			    "bytes_per_hour"));
	ck_abort_msg("plan.json has no link %s -> %s", from, to);
	return 0;
}

/* shardmeter plan on a hand-written topology of the two loopback hosts,
 * one block of two replicas; the daemons run from its files. */
START_TEST(test_plan_run)
{
	char out[16384], conf[2][256], path[256], err[PR_ERR_LEN];
	char rid[PR_RUN_ID_LEN], host[8], other[8], labels[512], *peers;
	char *metrics, *topo;
	json_t *plan, *cand, *blk;
	json_error_t jerr;
	pr_spec spec;
	int i;

	tu_write_run(dir, 1, 200, 10, 5);
	topo = strdup(write_topology());
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s plan --topology %s "
	    "--spec %s/run.conf --replicas 2 --local-steps 10 --out %s/plan "
	    "2>&1", tu_shardmeter(), topo, dir, dir) == 0, "%s", out);
	free(topo);
	/* the plan names the run of the spec it wrote */
	snprintf(path, sizeof(path), "%s/plan/spec.conf", dir);
	ck_assert_msg(pr_spec_load(&spec, path, err) == 0, "%s", err);
	ck_assert_int_eq(pr_spec_run_id(&spec, rid, err), 0);
	snprintf(path, sizeof(path), "%s/plan/plan.json", dir);
	plan = json_load_file(path, 0, &jerr);
	ck_assert_ptr_nonnull(plan);
	ck_assert_str_eq(json_string_value(json_object_get(plan, "run_id")),
	    rid);
	blk = chosen_block(plan, &cand);
	ck_assert_int_eq(json_array_size(json_object_get(blk, "hosts")), 2);
	/* the test reads the daemons' status as a listed client */
	snprintf(path, sizeof(path), "%s/plan/peers", dir);
	peers = slurp(path);
	peers = realloc(peers, strlen(peers) + 256);
	tu_client_line(peers, strlen(peers) + 256);
	snprintf(path, sizeof(path), "%s/plan", dir);
	tu_write_file(path, "peers", peers);
	free(peers);
	for (i = 0; i < 2; i++) {
		snprintf(host, sizeof(host), "h%d", i);
		merged_conf(host, conf[i], sizeof(conf[i]));
	}
	for (i = 0; i < 2; i++)
		start_planned(i, conf[i]);
	ck_assert_msg(tu_wait_state(base_port, 2, "done", 120),
	    "daemons not done");
	for (i = 0; i < 2; i++) {
		json_t *st = tu_status(base_port + i), *pd, *links, *l;
		int replica;

		ck_assert_ptr_nonnull(st);
		pd = json_object_get(st, "predicted");
		ck_assert_ptr_nonnull(pd);
		replica = (int)json_integer_value(json_object_get(st,
		    "replica"));
		snprintf(host, sizeof(host), "h%d", i);
		snprintf(other, sizeof(other), "h%d", 1 - i);
		ck_assert_str_eq(json_string_value(json_object_get(pd, "host")),
		    host);
		ck_assert_str_eq(json_string_value(json_array_get(
		    json_object_get(blk, "hosts"), (size_t)replica)), host);
		ck_assert(check_pair(json_object_get(pd, "round_s"),
		    json_number_value(json_object_get(blk, "round_s")),
		    "round_s") > 0);
		ck_assert(check_pair(json_object_get(pd, "positions_per_s"),
		    json_number_value(json_object_get(blk, "positions_per_s")) /
		    2, "positions_per_s") > 0);
		ck_assert(check_pair(json_object_get(pd, "train_s"),
		    json_number_value(json_object_get(blk, "train_s")),
		    "train_s") > 0);
		ck_assert(close_to(json_number_value(json_object_get(pd,
		    "run_train_s")), json_number_value(json_object_get(cand,
		    "train_s")), JSON_TOL));
		links = json_object_get(pd, "links");
		ck_assert_int_eq(json_array_size(links), 1);
		l = json_array_get(links, 0);
		ck_assert_str_eq(json_string_value(json_object_get(l, "to")),
		    other);
		snprintf(path, sizeof(path), "127.0.0.1:%d", base_port + 1 - i);
		ck_assert_str_eq(json_string_value(json_object_get(l, "peer")),
		    path);
		ck_assert(check_pair(json_object_get(l, "bytes_per_hour"),
		    link_bytes(cand, host, other), "bytes_per_hour") > 0);

		metrics = metrics_of(st);
		snprintf(labels, sizeof(labels), "block=\"1\",replica=\"%d\"",
		    replica);
		check_metric(metrics, "round_seconds", labels,
		    json_object_get(pd, "round_s"));
		check_metric(metrics, "positions_per_second", labels,
		    json_object_get(pd, "positions_per_s"));
		check_metric(metrics, "train_seconds", labels,
		    json_object_get(pd, "train_s"));
		snprintf(labels, sizeof(labels), "block=\"1\",replica=\"%d\","
		    "peer=\"%s\"", replica, path);
		check_metric(metrics, "link_bytes_per_hour", labels,
		    json_object_get(l, "bytes_per_hour"));
		free(metrics);
		json_decref(st);
	}
	json_decref(plan);
	snprintf(path, sizeof(path), "%s/plan/peers", dir);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s status --peers %s",
	    tu_shardmeter(), path) == 0, "%s", out);
	ck_assert_msg(strstr(out, "predicted / measured / error") != NULL,
	    "%s", out);
	ck_assert(check_row(out, "1", "round s"));
	ck_assert(check_row(out, "1", "positions/s (all replicas)"));
	ck_assert(check_row(out, "1", "bytes/h h0 -> h1"));
	ck_assert(check_row(out, "1", "bytes/h h1 -> h0"));
	ck_assert(check_row(out, "1", "time to the steps s"));
	ck_assert(check_row(out, "run", "time to steps s (projected)"));
}
END_TEST

/* A hand-written plan for the two-block spec of dir/run.conf: block 1
 * on host a, block 2 on host b (blocks: the "blocks" entries; links:
 * the "links" entries), as dir/name. */
static void
write_plan(const char *name, const char *run_id, const char *blocks,
    const char *links)
{
	char text[4096];

	snprintf(text, sizeof(text), "{ \"version\": 1, \"run_id\": \"%s\", "
	    "\"chosen\": 1, \"candidates\": [ { \"rank\": 1, \"options\": { "
	    "\"local_steps\": 10, \"steps\": 200 }, \"train_s\": 100.0, "
	    "\"positions_per_s\": 2000.0,\n\"blocks\": [ %s ],\n"
	    "\"links\": [ %s ] } ] }\n", run_id, blocks, links);
	tu_write_file(dir, name, text);
}

#define BLOCK1 "{ \"block\": 1, \"hosts\": [ \"a\" ], \"step_s\": 0.25, " \
	"\"round_s\": 2.5, \"positions_per_s\": 2048, \"train_s\": 50 }"
#define BLOCK2 "{ \"block\": 2, \"hosts\": [ \"b\" ], \"step_s\": 0.25, " \
	"\"round_s\": 2.5, \"positions_per_s\": 2048, \"train_s\": 100 }"

/* The two-block run: its spec's run id in rid, dir/peers with daemon 0
 * on block 1 and daemon 1 on block 2, and the client line. */
static void
two_blocks(char rid[PR_RUN_ID_LEN])
{
	char text[2048] = "", state[128], path[128], err[PR_ERR_LEN];
	pr_spec spec;
	int i;

	tu_write_run(dir, 2, 200, 10, 5);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_msg(pr_spec_load(&spec, path, err) == 0, "%s", err);
	ck_assert_int_eq(pr_spec_run_id(&spec, rid, err), 0);
	for (i = 0; i < 2; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, i + 1, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
	snprintf(path, sizeof(path), "%s/sub", dir);
	mkdir(path, 0700);
}

/* dir/sub/NAME.conf: dir/daemon.conf's keys and plan = ../plan (relative
 * to the configuration's folder), or none when plan is NULL. */
static const char *
conf_with_plan(const char *name, const char *plan)
{
	char text[1024], path[128], file[64], *base;

	snprintf(path, sizeof(path), "%s/daemon.conf", dir);
	base = slurp(path);
	snprintf(text, sizeof(text), "%s%s%s%s", base, plan ? "plan = ../" :
	    "", plan ? plan : "", plan ? "\n" : "");
	free(base);
	snprintf(path, sizeof(path), "%s/sub", dir);
	snprintf(file, sizeof(file), "%s.conf", name);
	return tu_write_file(path, file, text);
}

/* blocktraind -n as daemon i (block i + 1) with conf: its exit status,
 * what it said in out. */
static int
check_only(int i, const char *conf, char *out, size_t len)
{
	return tu_run_cmd(out, len, "%s -n -c %s -l 127.0.0.1:%d -b %d "
	    "-s %s/state%d -p %s/peers -r %s/run.conf -D cpu 2>&1",
	    tu_blocktraind(), conf, base_port + i, i + 1, dir, i, dir, dir);
}

static void
refused(int i, const char *plan, const char *want)
{
	char out[4096], conf[256];

	snprintf(conf, sizeof(conf), "%s", conf_with_plan("refused", plan));
	ck_assert_msg(check_only(i, conf, out, sizeof(out)) != 0,
	    "plan %s was taken:\n%s", plan, out);
	ck_assert_msg(strstr(out, want) != NULL, "'%s' lacks '%s'", out,
	    want);
	ck_assert_msg(strstr(out, plan) != NULL, "'%s' does not name %s",
	    out, plan);
}

START_TEST(test_refused)
{
	char rid[PR_RUN_ID_LEN], other[PR_RUN_ID_LEN], out[4096], conf[256];

	two_blocks(rid);
	write_plan("good.json", rid, BLOCK1 ", " BLOCK2, "");
	snprintf(conf, sizeof(conf), "%s", conf_with_plan("good", "good.json"));
	ck_assert_msg(check_only(0, conf, out, sizeof(out)) == 0, "%s", out);
	ck_assert_msg(check_only(1, conf, out, sizeof(out)) == 0, "%s", out);

	snprintf(other, sizeof(other), "%s", rid);
	other[0] = other[0] == 'a' ? 'b' : 'a';
	write_plan("other-run.json", other, BLOCK1 ", " BLOCK2, "");
	refused(0, "other-run.json", "a plan for run");
	write_plan("no-run-id.json", "", BLOCK1, "");
	refused(0, "no-run-id.json", "a plan for run");
	write_plan("one-block.json", rid, BLOCK1, "");
	refused(1, "one-block.json", "the plan has no block 2");
	write_plan("two-replicas.json", rid, "{ \"block\": 1, \"hosts\": [ "
	    "\"a\", \"c\" ], \"round_s\": 2.5, \"positions_per_s\": 2048, "
	    "\"train_s\": 50 }", "");
	refused(0, "two-replicas.json", "gives block 1 2 replica(s), the peer "
	    "list 1");
	write_plan("no-round.json", rid, "{ \"block\": 1, \"hosts\": [ \"a\" "
	    "], \"positions_per_s\": 2048, \"train_s\": 50 }", "");
	refused(0, "no-round.json", "block 1: \"round_s\" must be a positive "
	    "finite number");
	write_plan("bad-link.json", rid, BLOCK1 ", " BLOCK2, "{ \"from\": "
	    "\"a\", \"to\": \"z\", \"bytes_per_hour\": 1e6 }");
	refused(0, "bad-link.json", "z trains no block");
	tu_write_file(dir, "not-json.json", "{ \"version\": 1,\n\"run_id\": ");
	refused(0, "not-json.json", "not-json.json:2:");
	refused(0, "missing.json", "missing.json");
}
END_TEST

/* Block 1 from a plan, block 2 without one: block 1 reports, with its
 * round time from its steps (one replica) and no links; block 2 reports
 * nothing new; status shows block 1 and no projected run time. */
START_TEST(test_one_replica_and_none)
{
	char rid[PR_RUN_ID_LEN], out[16384], listen[32], blk[8], log[128];
	char state[128], peers[128], spec[128], conf[2][256], *metrics;
	json_t *st, *pd;
	int i;

	two_blocks(rid);
	write_plan("good.json", rid, BLOCK1 ", " BLOCK2, "");
	snprintf(conf[0], sizeof(conf[0]), "%s", conf_with_plan("d0",
	    "good.json"));
	snprintf(conf[1], sizeof(conf[1]), "%s", conf_with_plan("d1", NULL));
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	for (i = 0; i < 2; i++) {
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
		snprintf(blk, sizeof(blk), "%d", i + 1);
		snprintf(log, sizeof(log), "%s/log%d", dir, i);
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c",
		    conf[i], "-l", listen, "-b", blk, "-s", state, "-p", peers,
		    "-r", spec, "-D", "cpu", "-t", "1", (char *)NULL);
	}
	ck_assert_msg(tu_wait_state(base_port, 2, "done", 120),
	    "daemons not done");
	st = tu_status(base_port);
	ck_assert_ptr_nonnull(st);
	pd = json_object_get(st, "predicted");
	ck_assert_ptr_nonnull(pd);
	ck_assert_str_eq(json_string_value(json_object_get(pd, "host")), "a");
	ck_assert(check_pair(json_object_get(pd, "round_s"), 2.5,
	    "round_s") > 0);
	ck_assert(check_pair(json_object_get(pd, "positions_per_s"), 2048,
	    "positions_per_s") > 0);
	ck_assert(check_pair(json_object_get(pd, "train_s"), 50,
	    "train_s") > 0);
	/* one replica: its round is H steps at its measured step time */
	ck_assert(close_to(json_number_value(json_object_get(json_object_get(
	    pd, "round_s"), "measured")), 10 * 16 * 32 / json_number_value(
	    json_object_get(json_object_get(pd, "positions_per_s"),
	    "measured")), JSON_TOL));
	ck_assert_int_eq(json_array_size(json_object_get(pd, "links")), 0);
	metrics = metrics_of(st);
	check_metric(metrics, "round_seconds", "block=\"1\",replica=\"0\"",
	    json_object_get(pd, "round_s"));
	ck_assert_ptr_null(strstr(metrics, "link_bytes_per_hour"));
	free(metrics);
	json_decref(st);

	st = tu_status(base_port + 1);
	ck_assert_ptr_nonnull(st);
	ck_assert_ptr_null(json_object_get(st, "predicted"));
	metrics = metrics_of(st);
	ck_assert_ptr_null(strstr(metrics, "blocktrain_predicted_"));
	ck_assert_ptr_null(strstr(metrics, "blocktrain_measured_"));
	free(metrics);
	json_decref(st);

	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s status --peers %s",
	    tu_shardmeter(), peers) == 0, "%s", out);
	ck_assert(check_row(out, "1", "round s"));
	ck_assert(check_row(out, "1", "positions/s (all replicas)"));
	ck_assert_ptr_null(strstr(out, "    2  round s"));
	ck_assert(!check_row(out, "run", "time to steps s (projected)"));
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("predicted");
	TCase *tc = tcase_create("daemons");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_one_replica_and_none);
	tcase_add_test(tc, test_plan_run);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
