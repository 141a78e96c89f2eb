/* A listed replica that is hostile, against real daemons on loopback
 * (issue 35, "Found"): the test holds replica 1's identity files, made
 * by the daemons' own `shardmeter init` path (tu_peer_line), and speaks
 * as replica 1.  Poisoned updates (noise of sigma 100, every value 1e30,
 * a real update's sign flipped and times 10) are left out and named, the
 * run ends with a finite share and restarts; a replica that answers
 * every update "over" and serves an all-zero checkpoint stamped far in
 * the future takes nothing over, and the honest daemon trains all its
 * steps.  A clean run of three replicas leaves nothing out and reports
 * the check's time against the round's. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/net/http_server.h"
#include "daemon/core/identity.h"
#include "daemon/net/tls.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/rng.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"
#include "proto/update.h"
#include "tests/testutil.h"

#define MAXD 3
#define STEPS 400
#define H 100
/* Untrained, the block's share is about 5.5 nats/byte (uniform over
 * bytes); STEPS steps take it to about 3.1 whether alone or in a clean
 * run of three (test_clean_run_nothing_left_out prints its own). */
#define GOOD_SHARE 3.4

static char dir[64];
static int base_port;
static pid_t pids[MAXD];
static pr_spec spec;
static char run_id[PR_RUN_ID_LEN];
static size_t count;

static void
write_peers(int n)
{
	char text[2048] = "# insiders\n", state[128];
	int i;

	for (i = 0; i < n; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, 1, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
}

static void
start(int i)
{
	char listen[32], log[128], peers[128], run[128], conf[128], state[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(run, sizeof(run), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(state, sizeof(state), "%s/state%d", dir, i);
	pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c", conf,
	    "-l", listen, "-b", "1", "-s", state, "-p", peers, "-r", run, "-D",
	    "cpu", "-t", "1", (char *)NULL);
}

/* The run: one block of replicas, steps steps, rounds of h. */
static void
write_run_of(int replicas, int steps, int h)
{
	char path[128], err[PR_ERR_LEN];
	kn_model_shape shape;

	tu_write_run(dir, 1, steps, h, 2);
	write_peers(replicas);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	shape = pr_spec_block_shape(&spec, 0);
	count = kn_model_params_for(&shape);
}

static void
write_run(int replicas)
{
	write_run_of(replicas, STEPS, H);
}

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_insiders");
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

/* Lines of daemon i's log that hold both a and b (b may be NULL). */
static int
log_lines(int i, const char *a, const char *b)
{
	char path[128], line[2048];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, a) != NULL && (b == NULL ||
		    strstr(line, b) != NULL);
	fclose(f);
	return n;
}

/* Daemon i's lines that hold a, to the test's output. */
static void
show_lines(int i, const char *a)
{
	char path[128], line[2048];
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, a) != NULL)
			fprintf(stderr, "#   %s", line);
	fclose(f);
}

/* The check's seconds and the round's steps' seconds, summed over the
 * "round R: averaged ..." lines of daemon i's log; the rounds counted. */
static int
check_times(int i, double *check_s, double *round_s)
{
	char path[128], line[2048];
	double c, r;
	int n = 0;
	FILE *f;

	*check_s = *round_s = 0;
	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, "; check ");

		if (strstr(line, ": averaged ") == NULL || p == NULL ||
		    sscanf(p, "; check %lf s, the round's steps %lf s", &c,
		    &r) != 2)
			continue;
		*check_s += c;
		*round_s += r;
		n++;
	}
	fclose(f);
	return n;
}

static double
share_of(int i)
{
	json_t *j = tu_status(base_port + i);
	double s;

	ck_assert_ptr_nonnull(j);
	s = json_number_value(json_object_get(j, "heldout_share"));
	json_decref(j);
	return s;
}

/* Replica 1's update for round, as replica 1 sends it. */
static char *
encode(int64_t round, const float *delta, size_t *len)
{
	pr_update_meta meta = { 0 };
	char err[KN_ERR_LEN], *buf;

	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = 1;
	meta.round = round;
	meta.replica = 1;
	meta.step = (round + 1) * H;
	meta.enc = PR_ENC_F32;
	meta.count = count;
	meta.comp = PR_COMP_NONE;
	ck_assert_msg(pr_update_encode(&meta, delta, &buf, len, err) == 0,
	    "%s", err);
	return buf;
}

/* Replica 0's update of round, as it kept it for followers; 0 if it
 * has none. */
static int
real_update(int64_t round, float *delta)
{
	pr_update_meta expect = { 0 }, got;
	char path[128], err[KN_ERR_LEN];
	tu_body b;
	int ok;

	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/%lld/updates/0",
	    (long long)round);
	expect.block = 1;
	expect.round = round;
	expect.count = count;
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
	ok = tu_http("GET", base_port, path, NULL, NULL, 0, &b) == 200 &&
	    pr_update_decode(b.data, b.len, &expect, delta, &got, err) == 0;
	free(b.data);
	return ok;
}

enum { SIGMA100, HUGE, FLIPPED, POISONS };

/* A poisoned update of kind for round. */
static void
poison(int kind, int64_t round, float *delta)
{
	size_t i;

	if (kind == FLIPPED && round > 0 && real_update(round - 1, delta)) {
		for (i = 0; i < count; i++)
			delta[i] *= -10.0f;
		return;
	}
	if (kind == HUGE) {
		for (i = 0; i < count; i++)
			delta[i] = 1e30f;
		return;
	}
	kn_rng_fill_normal(delta, count, 0.0f, 100.0f, 5, (uint64_t)round);
}

/* Posts replica 1's poisoned update for round to daemon 0. */
static long
post_poison(int64_t round, float *delta)
{
	char path[128], *buf;
	size_t len;
	tu_body b;
	long code;

	poison((int)(round % POISONS), round, delta);
	buf = encode(round, delta, &len);
	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/%lld/updates",
	    (long long)round);
	code = tu_http("POST", base_port, path, NULL, buf, len, &b);
	free(buf);
	free(b.data);
	return code;
}

/* Replica 1 sends a poisoned update for each round of daemon 0's, the
 * next one's too (held until daemon 0 gets there), until it is done. */
START_TEST(test_poisoned_updates_left_out)
{
	float *delta;
	char state[128];
	long long round, sent = -1;
	double t0;
	int left;

	write_run(2);
	ck_assert_ptr_nonnull(delta = malloc(count * sizeof(float)));
	start(0);
	snprintf(state, sizeof(state), "%s/state1", dir);
	t0 = kn_now();
	while (!tu_status_is(base_port, "done") && kn_now() - t0 < 120) {
		tu_act_as(NULL);
		round = tu_status_int(base_port, "round");
		tu_act_as(state);
		if (round >= 0 && round > sent - 1) {
			post_poison(round, delta);
			post_poison(round + 1, delta);
			sent = round + 1;
		}
		usleep(20000);
	}
	tu_act_as(NULL);
	ck_assert_msg(tu_status_is(base_port, "done"), "not done in 120 s");
	left = log_lines(0, "the update of replica 1", "left out");
	fprintf(stderr, "# poisoned: %d of %d rounds left replica 1's update "
	    "out; share %.4f\n", left, STEPS / H, share_of(0));
	show_lines(0, ": averaged ");
	ck_assert_int_ge(left, 2);
	ck_assert_int_eq(log_lines(0, "not finite", NULL), 0);
	ck_assert(isfinite(share_of(0)) && share_of(0) < GOOD_SHARE);
	/* counted against replica 1 */
	ck_assert_int_ge(log_lines(0, "update refused (strike", NULL), 1);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	/* and the run on disk is whole: it restarts */
	start(0);
	ck_assert(tu_wait_state(base_port, 1, "done", 30));
	ck_assert_int_eq(log_lines(0, "not finite", NULL), 0);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	free(delta);
}
END_TEST

/* The fake replica 1: a TLS server with replica 1's identity on its
 * port, answering every update "over", claiming round 4000 in its
 * status, and serving an all-zero checkpoint stamped step 200000 (odd
 * requests) or one round past the round it was last offered (even). */
static struct {
	uv_loop_t loop;
	hs_server *http;
	tls_ctx *tls;
	uv_async_t stop;
	pthread_t thread;
	int64_t offered;
	int served;
	float *zero;
	kn_model *m;
} fake;

static int
allow_any(void *arg, const uint8_t id[ID_BYTES])
{
	(void)arg;
	(void)id;
	return 1;
}

static void
fake_checkpoint(hs_response *res)
{
	pr_ckpt_meta meta = { 0 };
	const kn_tensor *tab;
	char err[KN_ERR_LEN], *buf;
	size_t len;
	int n;

	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = 1;
	snprintf(meta.kind, sizeof(meta.kind), "block");
	if (fake.served++ % 2 == 0) {
		meta.step = 200000;
		meta.round = 2000;
	} else {
		meta.round = fake.offered + 1;
		meta.step = meta.round * H;
	}
	tab = kn_model_tensors(fake.m, &n);
	if (pr_ckpt_encode(&meta, tab, n, fake.zero, &buf, &len, err) != 0) {
		hs_response_text(res, 500, "%s", err);
		return;
	}
	hs_response_status(res, 200);
	hs_response_body_owned(res, "application/x-msgpack", buf, len);
}

static void
fake_handler(void *ctx, const hs_request *req, hs_response *res)
{
	long long round;

	(void)ctx;
	if (strcmp(req->path, "/v1/status") == 0) {
		hs_response_json(res, 200, json_pack("{s:s,s:s,s:I,s:I,s:I}",
		    "run_id", run_id, "state", "training", "step",
		    (json_int_t)200000, "steps", (json_int_t)STEPS, "round",
		    (json_int_t)4000));
		return;
	}
	if (strcmp(req->method, "POST") == 0 && sscanf(req->path,
	    "/v1/blocks/1/rounds/%lld/updates", &round) == 1) {
		fake.offered = round;
		hs_response_text(res, 409, "round %lld is over; fetch the "
		    "checkpoint", round);
		hs_response_header(res, "X-Round-State", "over");
		return;
	}
	if (strcmp(req->path, "/v1/blocks/1/checkpoint") == 0) {
		fake_checkpoint(res);
		return;
	}
	hs_response_text(res, 404, "no such resource");
}

static void
on_fake_stop(uv_async_t *a)
{
	hs_server_close(fake.http, NULL, NULL);
	uv_close((uv_handle_t *)a, NULL);
}

static void *
fake_run(void *arg)
{
	(void)arg;
	uv_run(&fake.loop, UV_RUN_DEFAULT);
	return NULL;
}

static void
fake_start(void)
{
	char state[128], err[KN_ERR_LEN];
	kn_model_shape shape = pr_spec_block_shape(&spec, 0);
	hs_config hcfg;

	memset(&fake, 0, sizeof(fake));
	ck_assert_int_eq(kn_model_create(&fake.m, &shape, kn_cpu_backend(), 1,
	    err), 0);
	ck_assert_ptr_nonnull(fake.zero = calloc(count, sizeof(float)));
	snprintf(state, sizeof(state), "%s/state1", dir);
	ck_assert_int_eq(uv_loop_init(&fake.loop), 0);
	ck_assert_msg(tls_ctx_new(&fake.tls, state, err) == 0, "%s", err);
	tls_ctx_set_allow(fake.tls, allow_any, NULL);
	hs_config_defaults(&hcfg);
	hcfg.tls = fake.tls;
	ck_assert_int_eq(hs_server_new(&fake.http, &fake.loop, &hcfg,
	    fake_handler, NULL, err), 0);
	ck_assert_msg(hs_server_listen(fake.http, "127.0.0.1", base_port + 1,
	    err) == 0, "%s", err);
	uv_async_init(&fake.loop, &fake.stop, on_fake_stop);
	ck_assert_int_eq(pthread_create(&fake.thread, NULL, fake_run, NULL),
	    0);
}

static void
fake_end(void)
{
	uv_async_send(&fake.stop);
	pthread_join(fake.thread, NULL);
	uv_loop_close(&fake.loop);
	tls_ctx_free(fake.tls);
	kn_model_free(fake.m);
	free(fake.zero);
}

START_TEST(test_checkpoint_takeover_refused)
{
	double t0;
	json_t *j;

	write_run(2);
	fake_start();
	start(0);
	t0 = kn_now();
	while (!tu_status_is(base_port, "done") && kn_now() - t0 < 120)
		usleep(50000);
	j = tu_status(base_port);
	ck_assert_ptr_nonnull(j);
	fprintf(stderr, "# takeover: %d checkpoints served, %d claims and %d "
	    "checkpoints refused; step %lld, share %.4f\n",
	    fake.served, log_lines(0, "claim refused", NULL),
	    log_lines(0, "checkpoint refused", NULL),
	    (long long)json_integer_value(json_object_get(j, "step")),
	    share_of(0));
	ck_assert_msg(tu_status_is(base_port, "done"), "not done in 120 s");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), STEPS);
	json_decref(j);
	ck_assert_int_eq(log_lines(0, "all 200000 steps", NULL), 0);
	ck_assert_int_eq(log_lines(0, "training from step 200000", NULL), 0);
	ck_assert_int_gt(fake.served, 0);
	ck_assert_int_ge(log_lines(0, "refused (strike", NULL), 1);
	ck_assert(share_of(0) < GOOD_SHARE);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	fake_end();
}
END_TEST

/* Three honest replicas: nothing left out, the same checkpoint, and the
 * check's time against the round's.  INSIDERS_STEPS and INSIDERS_H make
 * the run longer, for a measurement. */
START_TEST(test_clean_run_nothing_left_out)
{
	const char *e = getenv("INSIDERS_STEPS"), *eh = getenv("INSIDERS_H");
	int steps = e != NULL ? atoi(e) : STEPS, h = eh != NULL ? atoi(eh) : H;
	double check_s, round_s;
	int i, rounds;

	ck_assert(steps > 0 && h > 0 && steps % h == 0);
	write_run_of(3, steps, h);
	for (i = 0; i < 3; i++)
		start(i);
	ck_assert(tu_wait_state(base_port, 3, "done", 180 + steps / 10.0));
	for (i = 0; i < 3; i++) {
		json_t *j = tu_status(base_port + i);
		double training_s = json_number_value(json_object_get(j,
		    "training_s"));

		json_decref(j);
		rounds = check_times(i, &check_s, &round_s);
		fprintf(stderr, "# clean: replica %d checked %d rounds, left out "
		    "%d updates; the check took %.3f s against %.3f s of the "
		    "rounds' steps (%.1f %%) and %.3f s of training, rounds "
		    "included (%.1f %%); share %.4f\n", i, rounds,
		    log_lines(i, "left out", NULL), check_s, round_s,
		    round_s > 0 ? 100 * check_s / round_s : 0, training_s,
		    training_s > 0 ? 100 * check_s / training_s : 0,
		    share_of(i));
		ck_assert_int_eq(rounds, steps / h);
		ck_assert_int_eq(log_lines(i, "left out", NULL), 0);
		ck_assert_int_eq(log_lines(i, "refused", NULL), 0);
	}
	for (i = 1; i < 3; i++) {
		json_t *a = tu_status(base_port), *b = tu_status(base_port + i);

		ck_assert_str_eq(json_string_value(json_object_get(
		    json_object_get(a, "checkpoint"), "sha256")),
		    json_string_value(json_object_get(json_object_get(b,
		    "checkpoint"), "sha256")));
		json_decref(a);
		json_decref(b);
	}
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(tu_stop(&pids[i], SIGTERM, 15), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("insiders");
	TCase *tc = tcase_create("insiders");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_poisoned_updates_left_out);
	tcase_add_test(tc, test_checkpoint_takeover_refused);
	tcase_add_test(tc, test_clean_run_nothing_left_out);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
