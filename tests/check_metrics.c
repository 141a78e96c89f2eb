/* Metrics that sum: the labels every sample of a daemon's /metrics
 * carries (daemon/core/prom.c), and a run of two blocks of two replicas
 * on loopback whose scrapes promtool checks, whose run, state and step
 * series say what the status says, and over which the recording rules
 * of scripts/prometheus give the composed bound `shardmeter status`
 * prints.  The promtool parts are skipped, saying so, where promtool
 * (Debian package prometheus) is not installed. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/prom.h"
#include "tests/testutil.h"

#define NDAEMONS 4
#define BLOCKS 2
#define STEPS 40
#define LOCAL_STEPS 10

static const char *rules = TOP_SRCDIR "/scripts/prometheus/blocktrain.rules.yml";
static const char *rules_test = TOP_SRCDIR
    "/scripts/prometheus/blocktrain.rules.test.yml";

static char dir[64];
static int base_port;
static pid_t pids[NDAEMONS];

static int
have_promtool(const char *what)
{
	if (tu_run_cmd(NULL, 0, "command -v promtool >/dev/null") == 0)
		return 1;
	fprintf(stderr, "check_metrics: promtool is not installed (Debian "
	    "package prometheus, which scripts/install-deps installs): %s not "
	    "checked\n", what);
	return 0;
}

/* The labels ------------------------------------------------------------- */

START_TEST(test_add_labels)
{
	static const char in[] =
	    "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
	    "b{kind=\"x\"} 2.5\n"
	    "c{block=\"7\",note=\"a,}b\\\"c\"} 3\n"
	    "d_bucket{le=\"+Inf\"} 4\n"
	    "e{} 5\n\n";
	static const char want[] =
	    "# HELP a_total A.\n# TYPE a_total counter\n"
	    "a_total{run=\"r\",block=\"1\"} 1\n"
	    "b{run=\"r\",block=\"1\",kind=\"x\"} 2.5\n"
	    "c{run=\"r\",block=\"7\",note=\"a,}b\\\"c\"} 3\n"
	    "d_bucket{run=\"r\",block=\"1\",le=\"+Inf\"} 4\n"
	    "e{run=\"r\",block=\"1\"} 5\n\n";
	char labels[PROM_LABELS_LEN] = "", *out;
	size_t len;
	double v;

	ck_assert_int_eq(prom_label_append(labels, sizeof(labels), "run", "r"),
	    0);
	ck_assert_int_eq(prom_label_int(labels, sizeof(labels), "block", 1), 0);
	ck_assert_str_eq(labels, "run=\"r\",block=\"1\"");
	out = prom_add_labels(in, strlen(in), labels, &len);
	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, want);
	ck_assert_uint_eq(len, strlen(want));
	/* the sample a test asks for by some of its labels */
	ck_assert(tu_sample(out, "b{kind=\"x\"}", &v) && v == 2.5);
	ck_assert(tu_sample(out, "c{note=\"a,}b\\\"c\",run=\"r\"}", &v) &&
	    v == 3);
	ck_assert(tu_sample(out, "a_total", &v) && v == 1);
	ck_assert(!tu_sample(out, "b{kind=\"y\"}", &v));
	ck_assert(!tu_sample(out, "a", &v));
	free(out);
	/* no labels: the text as it was */
	out = prom_add_labels(in, strlen(in), "", &len);
	ck_assert_str_eq(out, in);
	free(out);
}
END_TEST

START_TEST(test_label_escapes)
{
	char labels[32] = "", small[12] = "x=\"1\"";

	ck_assert_int_eq(prom_label_append(labels, sizeof(labels), "v",
	    "a\"b\\c\nd"), 0);
	ck_assert_str_eq(labels, "v=\"a\\\"b\\\\c\\nd\"");
	/* what does not fit is left out whole */
	ck_assert_int_eq(prom_label_append(small, sizeof(small), "name",
	    "long"), KN_EINVAL);
	ck_assert_str_eq(small, "x=\"1\"");
}
END_TEST

/* A run on loopback ------------------------------------------------------ */

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_metrics");
	tu_trust_init(dir);
	base_port = tu_port_base(NDAEMONS);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < NDAEMONS; i++)
		tu_stop(&pids[i], SIGKILL, 15);
	tu_remove_dir(dir);
	curl_global_cleanup();
}

/* Daemon i serves block i % BLOCKS + 1: two replicas of each block. */
static void
start_run(void)
{
	char text[4096] = "", state[128], listen[32], blk[8], log[128];
	char peers[128], spec[128], conf[128];
	int i;

	tu_write_run(dir, BLOCKS, STEPS, LOCAL_STEPS, 10);
	/* held-out shares at steps 20 and 40 */
	tu_write_file(dir, "daemon.conf", "eval_every = 20\n"
	    "eval_windows = 16\ncheckpoint_every = 100\n"
	    "peer_timeout_ms = 2000\nmetrics_listen = 127.0.0.1:0\n");
	for (i = 0; i < NDAEMONS; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, i % BLOCKS + 1,
		    state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	for (i = 0; i < NDAEMONS; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
		snprintf(blk, sizeof(blk), "%d", i % BLOCKS + 1);
		snprintf(log, sizeof(log), "%s/log%d", dir, i);
		pids[i] = tu_daemon_start(log, base_port + i, "-f", "-c", conf,
		    "-l", listen, "-b", blk, "-s", state, "-p", peers, "-r", spec,
		    "-D", "cpu", "-t", "1", (char *)NULL);
	}
	ck_assert_msg(tu_wait_state(base_port, NDAEMONS, "done", 120),
	    "the daemons are not done after 120 s");
}

/* Daemon i's /metrics (the caller frees it) and its status. */
static char *
scrape(int i, json_t **status)
{
	const char *addr;
	tu_body m;

	ck_assert_ptr_nonnull(*status = tu_status(base_port + i));
	addr = json_string_value(json_object_get(*status, "metrics"));
	ck_assert_ptr_nonnull(addr);
	ck_assert_int_eq(tu_http_get(atoi(strrchr(addr, ':') + 1), "/metrics",
	    &m), 200);
	return m.data;
}

/* Every sample carries the daemon's run, block and replica; every
 * counter's name ends in _total; the step gauge is gone. */
static void
check_every_sample(const char *text, const char *labels)
{
	const char *line, *eol;
	int samples = 0;

	for (line = text; *line; line = eol + 1) {
		ck_assert_ptr_nonnull(eol = strchr(line, '\n'));
		if (strncmp(line, "# TYPE ", 7) == 0 &&
		    strstr(line, " counter\n") == strchr(line + 7, ' ')) {
			const char *sp = strchr(line + 7, ' ');

			ck_assert_msg(sp - line - 7 > 6 &&
			    strncmp(sp - 6, "_total", 6) == 0, "a counter not "
			    "named _total: %.*s", (int)(eol - line), line);
		}
		if (*line == '#' || *line == '\n')
			continue;
		samples++;
		ck_assert_msg(memchr(line, '{', (size_t)(eol - line)) != NULL &&
		    strstr(line, labels) != NULL && strstr(line, labels) < eol,
		    "a sample without %s: %.*s", labels, (int)(eol - line),
		    line);
		ck_assert_msg(strncmp(line, "blocktrain_step{", 16) != 0 &&
		    strncmp(line, "blocktrain_step ", 16) != 0,
		    "the step gauge is still there");
	}
	ck_assert_int_gt(samples, 20);
}

/* The run, state and step series of daemon i against its status. */
static void
check_run_series(const char *text, json_t *st)
{
	char want[512];
	const char *states[] = { "starting", "bootstrapping", "training",
	    "round", "paused", "stopping", "done", "error" };
	double v, ones = 0;
	size_t k;

	snprintf(want, sizeof(want), "blocktrain_run_info{method=\"blocktrain\","
	    "blocks=\"%d\",width=\"32\",heads=\"2\",layers=\"1,1\","
	    "window=\"32\",position_block=\"32\",batch=\"16\",steps=\"%d\","
	    "local_steps=\"%d\"}", BLOCKS, STEPS, LOCAL_STEPS);
	ck_assert_msg(tu_sample(text, want, &v) && v == 1, "no %s", want);
	ck_assert(tu_sample(text, "blocktrain_run_blocks", &v) && v == BLOCKS);
	ck_assert(tu_sample(text, "blocktrain_run_steps", &v) && v == STEPS);
	ck_assert(tu_sample(text, "blocktrain_steps_total", &v));
	ck_assert(v == (double)json_integer_value(json_object_get(st, "step")));
	ck_assert(v == STEPS);
	ck_assert(strstr(text, "# TYPE blocktrain_steps_total counter\n"));
	ck_assert(tu_sample(text, "blocktrain_rounds_total", &v) &&
	    v == (double)json_integer_value(json_object_get(st, "round")));
	ck_assert(tu_sample(text, "blocktrain_http_requests_total", &v) &&
	    v >= 1);
	for (k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
		snprintf(want, sizeof(want), "blocktrain_state{state=\"%s\"}",
		    states[k]);
		ck_assert_msg(tu_sample(text, want, &v), "no %s", want);
		ck_assert(v == (strcmp(states[k], "done") == 0));
		ones += v;
	}
	ck_assert(ones == 1);
}

static void
promtool_metrics(const char *text, int i)
{
	char name[32], path[128], out[4096];
	int rc;

	snprintf(name, sizeof(name), "metrics%d.txt", i);
	tu_write_file(dir, name, text);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	rc = tu_run_cmd(out, sizeof(out), "promtool check metrics < %s 2>&1",
	    path);
	ck_assert_msg(rc == 0 && out[0] == '\0', "promtool check metrics on "
	    "daemon %d: %s", i, out);
}

/* Appends to f every sample of text named one of the rules' inputs as
 * an input series of promtool test rules: its value at every point. */
static void
input_series(FILE *f, const char *text)
{
	static const char *const inputs[] = { "blocktrain_heldout_share_nats{",
	    "blocktrain_run_blocks{", "blocktrain_steps_total{",
	    "blocktrain_run_steps{", "blocktrain_state{" };
	const char *line, *eol, *sp;
	size_t k;

	for (line = text; *line; line = eol + 1) {
		eol = strchr(line, '\n');
		for (k = 0; k < sizeof(inputs) / sizeof(inputs[0]); k++)
			if (strncmp(line, inputs[k], strlen(inputs[k])) == 0)
				break;
		if (k == sizeof(inputs) / sizeof(inputs[0]))
			continue;
		for (sp = eol; sp > line && sp[-1] != '}'; sp--)
			;
		fprintf(f, "      - series: '%.*s'\n        values: '%.*s "
		    "%.*s %.*s %.*s %.*s'\n", (int)(sp - line), line,
		    (int)(eol - sp - 1), sp + 1, (int)(eol - sp - 1), sp + 1,
		    (int)(eol - sp - 1), sp + 1, (int)(eol - sp - 1), sp + 1,
		    (int)(eol - sp - 1), sp + 1);
	}
}

/* The composed bound computed from the scrapes as the rule does: each
 * block's shares averaged over its replicas, summed over the blocks. */
static double
bound_of_scrapes(char *const text[NDAEMONS])
{
	double sum[BLOCKS + 1] = { 0 }, bound = 0, v;
	int n[BLOCKS + 1] = { 0 }, i, b;

	for (i = 0; i < NDAEMONS; i++) {
		ck_assert_msg(tu_sample(text[i], "blocktrain_heldout_share_nats",
		    &v), "daemon %d has no held-out share", i);
		b = i % BLOCKS + 1;
		sum[b] += v;
		n[b]++;
	}
	for (b = 1; b <= BLOCKS; b++)
		bound += sum[b] / n[b];
	return bound;
}

/* What `shardmeter status` prints as the composed bound. */
static double
bound_of_status(void)
{
	char out[8192];
	const char *at;

	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s status --peers "
	    "%s/peers", tu_shardmeter(), dir), 0);
	at = strstr(out, "composed held-out bound: ");
	ck_assert_msg(at != NULL, "no bound in: %s", out);
	return atof(at + strlen("composed held-out bound: "));
}

/* The recording rules over the scraped series: the bound is the one the
 * status printed, and all four daemons are done. */
static void
promtool_rules_on_scrapes(char *const text[NDAEMONS], const char *run,
    double status_bound)
{
	char path[128], out[8192];
	FILE *f;
	int i, rc;

	snprintf(path, sizeof(path), "%s/scraped.test.yml", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fprintf(f, "rule_files:\n  - %s\nevaluation_interval: 15s\ntests:\n"
	    "  - interval: 15s\n    input_series:\n", rules);
	for (i = 0; i < NDAEMONS; i++)
		input_series(f, text[i]);
	fprintf(f, "    promql_expr_test:\n"
	    "      - expr: abs(run:blocktrain_heldout_bound_nats:sum - %.6f) "
	    "< bool 0.0002\n        eval_time: 1m\n        exp_samples:\n"
	    "          - labels: '{run=\"%s\"}'\n            value: 1\n"
	    "      - expr: run_state:blocktrain_daemons:sum{state=\"done\"}\n"
	    "        eval_time: 1m\n        exp_samples:\n"
	    "          - labels: 'run_state:blocktrain_daemons:sum{run=\"%s\","
	    "state=\"done\"}'\n            value: %d\n"
	    "      - expr: run:blocktrain_progress:min\n"
	    "        eval_time: 1m\n        exp_samples:\n"
	    "          - labels: 'run:blocktrain_progress:min{run=\"%s\"}'\n"
	    "            value: 1\n", status_bound, run, run, NDAEMONS, run);
	ck_assert_int_eq(fclose(f), 0);
	rc = tu_run_cmd(out, sizeof(out), "promtool test rules %s 2>&1", path);
	ck_assert_msg(rc == 0, "promtool test rules on the scrapes: %s", out);
}

START_TEST(test_two_blocks_two_replicas)
{
	char *text[NDAEMONS], labels[160], out[4096];
	const char *run = NULL;
	json_t *st[NDAEMONS];
	double scraped, status, plain = 0, v;
	int i, promtool = have_promtool("the scrapes and the rules");

	start_run();
	for (i = 0; i < NDAEMONS; i++) {
		text[i] = scrape(i, &st[i]);
		run = json_string_value(json_object_get(st[0], "run_id"));
		ck_assert_str_eq(json_string_value(json_object_get(st[i],
		    "run_id")), run);
		snprintf(labels, sizeof(labels), "{run=\"%s\",block=\"%d\","
		    "replica=\"%d\"", run, i % BLOCKS + 1, i / BLOCKS);
		ck_assert_int_eq(json_integer_value(json_object_get(st[i],
		    "replica")), i / BLOCKS);
		check_every_sample(text[i], labels + 1);
		check_run_series(text[i], st[i]);
		/* the share is the status's, to the text's 6 decimals */
		ck_assert(tu_sample(text[i], "blocktrain_heldout_share_nats",
		    &v));
		ck_assert(fabs(v - json_real_value(json_object_get(st[i],
		    "heldout_share"))) < 1e-6);
		plain += v;
		if (promtool)
			promtool_metrics(text[i], i);
	}
	scraped = bound_of_scrapes(text);
	status = bound_of_status();
	fprintf(stderr, "check_metrics: composed bound %.6f from the scrapes "
	    "(the rule), %.4f from shardmeter status; a plain sum over the "
	    "daemons gives %.6f\n", scraped, status, plain);
	ck_assert_msg(fabs(scraped - status) < 1e-4, "bound %.6f from the "
	    "scrapes, %.6f from the status", scraped, status);
	ck_assert(plain > 1.5 * scraped);
	if (promtool) {
		ck_assert_msg(tu_run_cmd(out, sizeof(out), "promtool check rules "
		    "%s 2>&1", rules) == 0, "promtool check rules: %s", out);
		ck_assert_msg(tu_run_cmd(out, sizeof(out), "cd %s/scripts/"
		    "prometheus && promtool test rules %s 2>&1", TOP_SRCDIR,
		    rules_test) == 0, "promtool test rules: %s", out);
		promtool_rules_on_scrapes(text, run, status);
	}
	for (i = 0; i < NDAEMONS; i++) {
		free(text[i]);
		json_decref(st[i]);
	}
	for (i = 0; i < NDAEMONS; i++)
		ck_assert_int_eq(tu_stop(&pids[i], SIGTERM, 15), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("labels");

	tcase_add_test(tc, test_add_labels);
	tcase_add_test(tc, test_label_escapes);
	suite_add_tcase(s, tc);
	tc = tcase_create("loopback");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_two_blocks_two_replicas);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
