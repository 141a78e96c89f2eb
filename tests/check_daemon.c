/* blocktraind end to end: real daemons on loopback, real sockets.  Three
 * blocks of one replica, three blocks of two replicas, a replica killed
 * with SIGKILL in the middle of a round, and bad input on every endpoint. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"
#include "proto/update.h"
#include "tests/testutil.h"

#define MAXD 6

static const char *daemon_bin, *tool;
static char dir[64];
static int base_port;
static pid_t pids[MAXD + 1];

static void
write_spec(int blocks, int steps, int local_steps, double deadline)
{
	tu_write_run(dir, blocks, steps, local_steps, deadline);
}

/* peers: n lines, daemon i on base_port + i serving block blocks_of[i]
 * with its identity in dir/state<i>, and the test as a client */
static void
write_peers(int n, const int *block_of)
{
	char text[2048] = "# test run\n", state[128];
	int i;

	for (i = 0; i < n; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, block_of[i],
		    state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
}

/* Daemon i, with its state in the folder state. */
static void
start_in(int i, int block, const char *state)
{
	char listen[32], blk[8], log[128], peers[128], spec[128];
	char conf[128], ident[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(blk, sizeof(blk), "%d", block);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(ident, sizeof(ident), "%s/state%d", dir, i);
	if (strcmp(state, ident) != 0 && access(ident, F_OK) == 0)
		tu_copy_identity(ident, state);
	pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c", conf,
	    "-l", listen, "-b", blk, "-s", state, "-p", peers, "-r", spec, "-D",
	    "cpu", "-t", "1", (char *)NULL);
}

static void
start(int i, int block)
{
	char state[128];

	snprintf(state, sizeof(state), "%s/state%d", dir, i);
	start_in(i, block, state);
}

/* SIGTERM, and the exit status within the time limit. */
static int
stop(int i)
{
	return tu_stop(&pids[i], SIGTERM, 15);
}

static long long
round_of(int i)
{
	return tu_status_int(base_port + i, "round");
}

static void
wait_done(int n, double limit)
{
	ck_assert_msg(tu_wait_state(base_port, n, "done", limit),
	    "daemons not done after %.0fs", limit);
}

static double
json_num_after(const char *text, const char *key)
{
	json_t *j = json_loads(strchr(text, '{'), 0, NULL);
	double v;

	ck_assert_msg(j != NULL, "no JSON in: %s", text);
	v = json_number_value(json_object_get(j, key));
	json_decref(j);
	return v;
}

static void
setup(void)
{
	daemon_bin = tu_blocktraind();
	tool = tu_shardmeter();
	tu_temp_dir(dir, sizeof(dir), "check_daemon");
	tu_trust_init(dir);
	base_port = tu_port_base(MAXD + 1);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void
teardown(void)
{
	int i;

	for (i = 0; i <= MAXD; i++)
		tu_stop(&pids[i], SIGKILL, 15);
	tu_remove_dir(dir);
	curl_global_cleanup();
}

/* The daemon's round times (status round_times): one a round, from round
 * 0, rising, within training_s. */
static void
check_round_times(int i, int rounds)
{
	json_t *j = tu_status(base_port + i), *rt, *s, *v;
	double last = 0;
	size_t k;

	ck_assert_ptr_nonnull(j);
	rt = json_object_get(j, "round_times");
	s = json_object_get(rt, "s");
	ck_assert_int_eq(json_integer_value(json_object_get(rt, "first")), 0);
	ck_assert_msg(json_array_size(s) == (size_t)rounds, "daemon %d: %zu "
	    "round times, not %d", i, json_array_size(s), rounds);
	json_array_foreach(s, k, v) {
		ck_assert(json_number_value(v) > last);
		last = json_number_value(v);
	}
	ck_assert(last <= json_number_value(json_object_get(j,
	    "training_s")));
	json_decref(j);
}

/* Sums "<prefix> ... (N bytes)" lines of a daemon's log. */
static unsigned long long
logged_bytes(int i, const char *prefix)
{
	char path[128], line[1024];
	unsigned long long sum = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, prefix), *q;

		if (p != NULL && (q = strrchr(p, '(')) != NULL)
			sum += strtoull(q + 1, NULL, 10);
	}
	fclose(f);
	return sum;
}

START_TEST(test_three_blocks)
{
	int block_of[3] = { 1, 2, 3 }, i;
	char out[8192];
	double initial, composed = 0, assembled;
	json_t *j;

	write_spec(3, 400, 50, 5);
	write_peers(3, block_of);
	/* the bound of the untrained blocks, scored like the final one */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s train --spec %s/run.conf "
	    "--dir %s/init --all --steps 0", tool, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s eval --spec %s/run.conf "
	    "--dir %s/init --windows 64 --json", tool, dir, dir), 0);
	initial = json_num_after(out, "blocktrain_nats_per_byte");
	for (i = 0; i < 3; i++)
		start(i, i + 1);
	wait_done(3, 120);
	for (i = 0; i < 3; i++)
		check_round_times(i, 400 / 50);    /* one replica: no waiting */
	for (i = 0; i < 3; i++) {
		double took;

		j = tu_status(base_port + i);
		ck_assert_ptr_nonnull(j);
		/* the time to the steps by the daemon's clock: after its
		 * start-up, and no longer counting once done */
		took = json_number_value(json_object_get(j, "training_s"));
		ck_assert(took > 0 && took < json_number_value(
		    json_object_get(j, "uptime_s")));
		json_decref(j);
		usleep(200000);
		j = tu_status(base_port + i);
		ck_assert_ptr_nonnull(j);
		ck_assert(json_number_value(json_object_get(j, "training_s")) ==
		    took);
		ck_assert_int_eq(json_integer_value(json_object_get(j,
		    "heldout_share_step")), 400);
		composed += json_number_value(json_object_get(j, "heldout_share"));
		json_decref(j);
	}
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s status --peers %s/peers",
	    tool, dir), 0);
	ck_assert_ptr_nonnull(strstr(out, "composed held-out bound"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s assemble --peers "
	    "%s/peers --out %s/asm --spec %s/run.conf", tool, dir, dir, dir), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s eval --spec %s/run.conf "
	    "--dir %s/asm --windows 64 --json", tool, dir, dir), 0);
	assembled = json_num_after(out, "blocktrain_nats_per_byte");
	fprintf(stderr, "# three blocks: bound %.4f at start, %.4f from "
	    "status, %.4f from the assembled checkpoints\n", initial, composed,
	    assembled);
	ck_assert_double_eq_tol(composed, assembled, 1e-4);
	ck_assert_msg(composed < 0.8 * initial, "bound %g -> %g", initial,
	    composed);
	/* what each daemon reports having sent matches what it logged */
	for (i = 0; i < 3; i++) {
		unsigned long long logged = logged_bytes(i, "sent the checkpoint");
		long long metered;

		j = tu_status(base_port + i);
		metered = json_integer_value(json_object_get(json_object_get(
		    json_object_get(j, "bytes"), "out"), "checkpoint"));
		json_decref(j);
		fprintf(stderr, "# daemon %d: checkpoint bytes out %lld metered, "
		    "%llu logged\n", i, metered, logged);
		ck_assert_uint_gt(logged, 0);
		ck_assert_msg(fabs((double)metered - (double)logged) <=
		    0.01 * (double)logged, "metered %lld, logged %llu", metered,
		    logged);
	}
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(stop(i), 0);
}
END_TEST

/* "checkpoint at step S, round R, N bytes, sha256 X..." of a daemon's log,
 * as round -> hash prefix. */
static int
round_hashes(int i, char hashes[][17], int max)
{
	char path[128], line[1024];
	int top = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, "checkpoint at step");
		long long step, round;
		char hash[17];

		if (p == NULL || sscanf(p, "checkpoint at step %lld, round %lld, "
		    "%*d bytes, sha256 %16s", &step, &round, hash) != 3)
			continue;
		if (round >= 0 && round < max) {
			memcpy(hashes[round], hash, 17);
			if (round > top)
				top = (int)round;
		}
	}
	fclose(f);
	return top;
}

START_TEST(test_replicas_identical)
{
	int block_of[6] = { 1, 2, 3, 1, 2, 3 }, i, b, r;

	write_spec(3, 200, 25, 5);
	write_peers(6, block_of);
	for (i = 0; i < 6; i++)
		start(i, block_of[i]);
	wait_done(6, 180);
	for (i = 0; i < 6; i++)
		check_round_times(i, 200 / 25);    /* blocking rounds */
	for (b = 0; b < 3; b++) {
		char h0[64][17] = { { 0 } }, h1[64][17] = { { 0 } };
		int t0 = round_hashes(b, h0, 64), t1 = round_hashes(b + 3, h1, 64);

		ck_assert_int_eq(t0, 8);
		ck_assert_int_eq(t1, 8);
		for (r = 1; r <= 8; r++) {
			ck_assert_msg(h0[r][0] && h1[r][0], "block %d round %d: "
			    "a checkpoint is missing", b + 1, r);
			ck_assert_msg(strcmp(h0[r], h1[r]) == 0, "block %d round "
			    "%d: replicas differ (%s, %s)", b + 1, r, h0[r], h1[r]);
		}
		fprintf(stderr, "# block %d: both replicas hold the same "
		    "checkpoint after each of 8 rounds\n", b + 1);
	}
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(stop(i), 0);
}
END_TEST

/* Lines of a daemon's log that hold both a and b. */
static int
log_lines(int i, const char *a, const char *b)
{
	char path[128], line[1024];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, a) != NULL && strstr(line, b) != NULL;
	fclose(f);
	return n;
}

/* update_streams = 4: each update goes to the other replica as four
 * parts (an update of this block is about 100 KB, chunks 4 KiB), and
 * the replicas still hold the same checkpoint after every round. */
START_TEST(test_replicas_streams)
{
	int block_of[2] = { 1, 1 }, i, r;
	char h0[8][17] = { { 0 } }, h1[8][17] = { { 0 } };

	write_spec(1, 100, 25, 5);
	tu_write_file(dir, "daemon.conf", "eval_every = 100\n"
	    "eval_windows = 64\ncheckpoint_every = 100\n"
	    "peer_timeout_ms = 2000\nmetrics_listen = 127.0.0.1:0\n"
	    "update_streams = 4\nupdate_chunk = 4096\n");
	write_peers(2, block_of);
	for (i = 0; i < 2; i++)
		start(i, 1);
	wait_done(2, 120);
	ck_assert_int_eq(round_hashes(0, h0, 8), 4);
	ck_assert_int_eq(round_hashes(1, h1, 8), 4);
	for (r = 1; r <= 4; r++)
		ck_assert_msg(h0[r][0] && strcmp(h0[r], h1[r]) == 0, "round %d: "
		    "replicas differ (%s, %s)", r, h0[r], h1[r]);
	/* the coordinator cannot close a round (before its deadline)
	 * without replica 1's update, which comes only in parts; replica 1
	 * may fetch replica 0's from the commit before its parts are in */
	ck_assert_int_eq(log_lines(0, "received the update of replica 1",
	    "in 4 parts)"), 4);
	ck_assert_int_eq(log_lines(0, "deadline passed", ""), 0);
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(stop(i), 0);
}
END_TEST

static void
check_state_dir(int i)
{
	char path[256], *buf, err[PR_ERR_LEN];
	struct dirent *e;
	size_t len;
	DIR *d;
	int seen = 0;

	snprintf(path, sizeof(path), "%s/state%d", dir, i);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		char file[512];

		if (strstr(e->d_name, ".ckpt") == NULL)
			continue;
		ck_assert_msg(strstr(e->d_name, ".tmp") == NULL,
		    "temporary file left: %s", e->d_name);
		snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
		ck_assert_int_eq(pr_ckpt_read_file(file, 1 << 30, &buf, &len,
		    err), 0);
		ck_assert_msg(pr_ckpt_decode(buf, len, NULL, NULL, 0, NULL, NULL,
		    err) == 0, "%s: %s", file, err);
		free(buf);
		seen++;
	}
	closedir(d);
	ck_assert_int_gt(seen, 0);
}

START_TEST(test_kill_replica)
{
	int block_of[2] = { 1, 1 };
	long long r0, r1;
	double t0;
	char path[128], line[512];
	FILE *f;
	int resumed = 0;

	write_spec(1, 30000, 100, 3);
	write_peers(2, block_of);
	start(0, 1);
	start(1, 1);
	t0 = kn_now();
	while (round_of(0) < 3 && kn_now() - t0 < 60)
		usleep(50000);
	ck_assert_int_ge(round_of(0), 3);
	/* the coordinator dies in the middle of a round: the survivor must
	 * close that round within the round deadline (3 s) */
	tu_stop(&pids[0], SIGKILL, 15);
	r1 = round_of(1);
	t0 = kn_now();
	while (round_of(1) < r1 + 1 && kn_now() - t0 < 10)
		usleep(20000);
	{
		double took = kn_now() - t0;

		fprintf(stderr, "# kill: the survivor closed round %lld %.2fs "
		    "after the coordinator died (deadline 3s)\n", r1, took);
		ck_assert_int_ge(round_of(1), r1 + 1);
		ck_assert_msg(took < 3.0, "round took %.2fs", took);
	}
	r1 = round_of(1);
	t0 = kn_now();
	while (round_of(1) < r1 + 1 && kn_now() - t0 < 10)
		usleep(20000);
	ck_assert_int_ge(round_of(1), r1 + 1);
	/* back from its checkpoint, it rejoins */
	start(0, 1);
	t0 = kn_now();
	do {
		usleep(100000);
		r0 = round_of(0);
		r1 = round_of(1);
	} while ((r0 < 0 || r0 + 1 < r1 || r0 <= 4) && kn_now() - t0 < 30);
	snprintf(path, sizeof(path), "%s/log0", dir);
	f = fopen(path, "r");
	while (fgets(line, sizeof(line), f) != NULL) {
		long long step;
		char *p = strstr(line, "training from step");

		if (p && sscanf(p, "training from step %lld", &step) == 1 &&
		    step > 0)
			resumed = 1;
	}
	fclose(f);
	ck_assert_msg(resumed, "the restarted replica did not resume");
	ck_assert_msg(r0 >= 0 && r0 + 1 >= r1, "restarted replica at round "
	    "%lld, the other at %lld", r0, r1);
	/* and takes part again: a later round averages both */
	t0 = kn_now();
	r1 = round_of(1);
	while (round_of(1) < r1 + 2 && kn_now() - t0 < 20)
		usleep(50000);
	ck_assert_int_eq(stop(0), 0);
	ck_assert_int_eq(stop(1), 0);
	snprintf(path, sizeof(path), "%s/log1", dir);
	f = fopen(path, "r");
	resumed = 0;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, "averaged 2 of 2"))
			resumed++;
	fclose(f);
	ck_assert_int_gt(resumed, 0);
	check_state_dir(0);
	check_state_dir(1);
}
END_TEST

/* An update message built field by field, so that tests can put in it
 * what the encoder refuses (NaN). */
static char *
craft_update(const char *run_id, int block, long long round, size_t count,
    float fill, size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	unsigned char md[32];
	unsigned int mdlen;
	float *payload = malloc(count * 4);
	size_t i;

#define KEY(s) do { msgpack_pack_str(&pk, strlen(s)); \
	msgpack_pack_str_body(&pk, s, strlen(s)); } while (0)
	for (i = 0; i < count; i++)
		payload[i] = fill;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 11);
	KEY("magic"); KEY("ShardMeter update");
	KEY("version"); msgpack_pack_uint64(&pk, 1);
	KEY("run_id"); KEY(run_id);
	KEY("block"); msgpack_pack_uint64(&pk, (uint64_t)block);
	KEY("round"); msgpack_pack_uint64(&pk, (uint64_t)round);
	KEY("replica"); msgpack_pack_uint64(&pk, 1);
	KEY("step"); msgpack_pack_uint64(&pk, 50);
	KEY("encoding"); KEY("f32");
	KEY("count"); msgpack_pack_uint64(&pk, count);
	KEY("payload"); msgpack_pack_bin(&pk, count * 4);
	msgpack_pack_bin_body(&pk, payload, count * 4);
	EVP_Digest(payload, count * 4, md, &mdlen, EVP_sha256(), NULL);
	KEY("sha256"); msgpack_pack_bin(&pk, 32);
	msgpack_pack_bin_body(&pk, md, 32);
#undef KEY
	free(payload);
	*len = sb.size;
	return sb.data;
}

/* Sends raw bytes and returns the status code of the answer. */
static int
raw_request(const char *text, char *answer, size_t alen)
{
	return tu_raw_request(base_port, text, answer, alen);
}

static void
expect_code(const char *method, const char *path, const void *body,
    size_t len, long code, const char *fragment)
{
	tu_body b;
	long got = tu_http(method, base_port, path, NULL, body, len, &b);

	ck_assert_msg(got == code, "%s %s: %ld, expected %ld (%s)", method, path,
	    got, code, b.data ? b.data : "");
	ck_assert_msg(b.len > 0 || method[0] == 'H', "%s %s: empty body",
	    method, path);
	if (fragment != NULL)
		ck_assert_msg(b.data && strstr(b.data, fragment), "%s %s: '%s' "
		    "lacks '%s'", method, path, b.data ? b.data : "", fragment);
	free(b.data);
}

/* A 405 whose Allow header lists the methods of the path's rows. */
static void
expect_allow(const char *method, const char *path, const char *allow)
{
	char req[512], answer[4096], line[128];

	snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 1\r\nConnection: close\r\n\r\nx", method, path);
	snprintf(line, sizeof(line), "\r\nAllow: %s\r\n", allow);
	ck_assert_int_eq(raw_request(req, answer, sizeof(answer)), 405);
	ck_assert_msg(strstr(answer, line) != NULL, "%s %s: no '%s' in %s",
	    method, path, allow, answer);
}

/* While a replica waits for its round, its status gives the step it
 * waits at (a multiple of local_steps), not the last progress report. */
static void
assert_round_step(int local_steps)
{
	double end = kn_now() + 60;
	json_t *j;
	int seen = 0;

	while (!seen && kn_now() < end) {
		if ((j = tu_status(base_port)) != NULL) {
			const char *state = json_string_value(json_object_get(j,
			    "state"));

			if (state != NULL && strcmp(state, "round") == 0) {
				seen = 1;
				ck_assert_int_eq(json_integer_value(json_object_get(
				    j, "step")) % local_steps, 0);
			}
			json_decref(j);
		}
		usleep(20000);
	}
	ck_assert_msg(seen, "never saw the daemon wait for a round");
}

START_TEST(test_bad_input)
{
	int block_of[2] = { 1, 1 };
	char path[128], answer[2048], hash[65], run_id[PR_RUN_ID_LEN];
	char err[PR_ERR_LEN], *msg, *bad, state[128];
	tu_body b0;
	json_t *j;
	long long round;
	size_t count, len;
	pr_spec spec;
	kn_model_shape shape;

	/* replica 1 never runs: replica 0 trains alone, waiting out the
	 * deadline of each round */
	write_spec(1, 100, 50, 1);
	write_peers(2, block_of);
	start(0, 1);
	assert_round_step(50);
	wait_done(1, 60);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	shape = pr_spec_block_shape(&spec, 0);
	count = kn_model_params_for(&shape);
	j = tu_status(base_port + 0);
	snprintf(hash, sizeof(hash), "%s", json_string_value(json_object_get(
	    json_object_get(j, "checkpoint"), "sha256")));
	round = json_integer_value(json_object_get(j, "round"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/%lld/updates", round);

	/* a body over the cap is refused before it is read */
	{
		char req[512];

		snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\nHost: x\r\n"
		    "Content-Length: 4000000000\r\n\r\n", path);
		ck_assert_int_eq(raw_request(req, answer, sizeof(answer)), 413);
	}
	/* only a replica of the block may post its updates: the test is
	 * an operator (a client), then acts as the replicas */
	expect_code("POST", path, "garbage", 7, 403, "only the replicas");
	snprintf(state, sizeof(state), "%s/state0", dir);
	tu_act_as(state);
	msg = craft_update(run_id, 1, round, count, 0.5f, &len);
	expect_code("POST", path, msg, len, 400, "its sender is replica 0");
	free(msg);
	snprintf(state, sizeof(state), "%s/state1", dir);
	tu_act_as(state);
	expect_code("POST", path, "garbage", 7, 400, "update refused");
	msg = craft_update(run_id, 1, round, count, 0.5f, &len);
	bad = malloc(len + 1);
	memcpy(bad, msg, len);
	bad[len] = 0;
	expect_code("POST", path, bad, len + 1, 400, "trailing");
	free(bad);
	free(msg);
	msg = craft_update("0000000000000000000000000000000000000000000000000"
	    "000000000000000", 1, round, count, 0.5f, &len);
	expect_code("POST", path, msg, len, 400, "run");
	free(msg);
	msg = craft_update(run_id, 2, round, count, 0.5f, &len);
	expect_code("POST", path, msg, len, 400, "block");
	free(msg);
	msg = craft_update(run_id, 1, round, count - 1, 0.5f, &len);
	expect_code("POST", path, msg, len, 400, "parameters");
	free(msg);
	msg = craft_update(run_id, 1, round, count, NAN, &len);
	expect_code("POST", path, msg, len, 400, "finite");
	free(msg);
	msg = craft_update(run_id, 1, round, count, INFINITY, &len);
	expect_code("POST", path, msg, len, 400, "finite");
	free(msg);
	expect_code("POST", "/v1/blocks/7/rounds/0/updates", "x", 1, 404,
	    "block 7");
	expect_code("GET", "/v1/nothing", NULL, 0, 404, "no such resource");
	expect_code("DELETE", "/v1/status", NULL, 0, 405, "not allowed");
	expect_code("POST", "/v1/blocks/1/checkpoint", "x", 1, 405,
	    "not allowed");
	expect_code("GET", "/v1/blocks/1/rounds/0/updates", NULL, 0, 405,
	    "POST");
	/* each 405 says what the path allows, from the route tables */
	expect_allow("PUT", "/v1/status", "GET, HEAD");
	expect_allow("PUT", "/v1/blocks/1/checkpoint", "GET, HEAD");
	expect_allow("PUT", "/v1/blocks/1/rounds/0/updates", "POST");
	expect_allow("PUT", "/v1/blocks/1/rounds/0/commit", "GET, HEAD");
	expect_allow("PUT", "/v1/strikes/clear", "POST");
	expect_allow("PUT", "/v1/probe/echo", "GET, HEAD");
	expect_allow("PUT", "/v1/probe/sink", "POST");
	expect_allow("PUT", "/v1/probe/compute", "GET, HEAD, POST");
	expect_allow("PUT", "/v1/probe/links", "GET, HEAD, POST");
	/* a path that names nothing is a 404 whatever the method */
	expect_code("POST", "/v1/blocks/1/rounds/0/nothing", "x", 1, 404,
	    "no such resource");
	ck_assert_int_eq(raw_request("BREW / HTCPCP/1.0\r\n\r\n", answer,
	    sizeof(answer)), 400);
	/* numbers in paths have one spelling and never wrap */
	expect_code("GET", "/v1/blocks/4294967297/checkpoint", NULL, 0, 404,
	    NULL);
	expect_code("GET", "/v1/blocks/01/checkpoint", NULL, 0, 404, NULL);
	expect_code("GET", "/v1/blocks/+1/checkpoint", NULL, 0, 404, NULL);
	expect_code("GET", "/v1/blocks/-1/checkpoint", NULL, 0, 404, NULL);
	expect_code("GET", "/v1/blocks/1/rounds/-1/commit", NULL, 0, 404,
	    "no such resource");
	expect_code("GET", "/v1/blocks/1/rounds/18446744073709551617/commit",
	    NULL, 0, 404, "no such resource");
	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/%lld/updates/0",
	    round - 1);
	ck_assert_int_eq(tu_http_get(base_port, path, &b0), 200);
	free(b0.data);
	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/%lld/updates/"
	    "4294967296", round - 1);
	expect_code("GET", path, NULL, 0, 404, NULL);
	snprintf(path, sizeof(path), "/v1/blocks/1/rounds/%lld/updates/00",
	    round - 1);
	expect_code("GET", path, NULL, 0, 404, NULL);
	/* HTTP/1.0 and 1.1 only */
	ck_assert_int_eq(raw_request("GET /v1/status HTTP/9.9\r\nHost: x\r\n"
	    "\r\n", answer, sizeof(answer)), 505);
	ck_assert_int_ne(raw_request("GET /v1/status\r\n\r\n", answer,
	    sizeof(answer)), 200);
	/* bytes of the request that are not text are not echoed raw */
	ck_assert_int_eq(raw_request("GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n"
	    "Connection: close\r\n\r\n", answer, sizeof(answer)), 404);
	ck_assert_ptr_nonnull(strstr(answer, "/v1/\\xff\\xfe"));
	for (len = 0; answer[len] != '\0'; len++)
		ck_assert_int_lt((unsigned char)answer[len], 0x80);
	/* nothing changed, and the daemon still answers */
	j = tu_status(base_port + 0);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j,
	    "checkpoint"), "sha256")), hash);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "round")), round);
	json_decref(j);
	/* a checkpoint that has not changed is not sent again */
	{
		char inm[128];
		tu_body b;

		snprintf(inm, sizeof(inm), "If-None-Match: \"%s\"", hash);
		ck_assert_int_eq(tu_http("GET", base_port, "/v1/blocks/1/"
		    "checkpoint", inm, NULL, 0, &b), 304);
		free(b.data);
	}
	ck_assert_int_eq(stop(0), 0);
}
END_TEST

START_TEST(test_config_errors)
{
	char out[4096];
	int block_of[1] = { 1 };

	write_spec(1, 10, 5, 1);
	write_peers(1, block_of);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out),
	    "%s -n -l 127.0.0.1:%d -b 1 -s %s/state0 "
	    "-p %s/peers -r %s/run.conf", daemon_bin, base_port, dir, dir, dir),
	    0);
	ck_assert_ptr_nonnull(strstr(out, "configuration OK"));
	ck_assert_int_ne(tu_run_cmd(out, sizeof(out),
	    "%s -n -l 127.0.0.1:%d -b 1 -s %s/state0 "
	    "-p %s/peers -r %s/run.conf", daemon_bin, base_port + 1, dir, dir,
	    dir), 0);
	ck_assert_ptr_nonnull(strstr(out, "is not in the peer list"));
	ck_assert_int_ne(tu_run_cmd(out, sizeof(out),
	    "%s -n -l 127.0.0.1:%d -b 2 -s %s/state0 "
	    "-p %s/peers -r %s/run.conf", daemon_bin, base_port, dir, dir, dir),
	    0);
	ck_assert_ptr_nonnull(strstr(out, "does not exist"));
	tu_write_file(dir, "bad.conf", "eval_evry = 3\n");
	ck_assert_int_ne(tu_run_cmd(out, sizeof(out), "%s -n -c %s/bad.conf",
	    daemon_bin, dir), 0);
	ck_assert_ptr_nonnull(strstr(out, "unknown key 'eval_evry'"));
}
END_TEST

/* Bytes are charged to the peer that asked, whatever the length of its
 * name: a daemon adds ?from=<its address> to what it asks of a peer.  The
 * address here is numeric IPv6 loopback written out in full (46 bytes)
 * so that nothing is resolved; the old meter label kept 31 bytes and
 * charged such a peer's bytes to the clients. */
START_TEST(test_long_peer_name)
{
	static const char longname[] =
	    "[0000:0000:0000:0000:0000:0000:0000:0001]:7070";
	char text[512], path[256];
	json_t *j, *peer, *clients;
	tu_body body = { 0 };
	long long in, out, client_in;
	int i;

	/* plain TCP: over TLS the meter goes by peer id, not by ?from= */
	write_spec(2, 1000000, 50, 1);
	tu_write_file(dir, "daemon.conf", "eval_every = 100\n"
	    "eval_windows = 64\ncheckpoint_every = 100\n"
	    "peer_timeout_ms = 2000\nmetrics_listen = off\ninsecure = yes\n");
	snprintf(text, sizeof(text), "127.0.0.1:%d 1\n%s 2\n", base_port,
	    longname);
	tu_write_file(dir, "peers", text);
	start(0, 1);
	snprintf(path, sizeof(path), "/v1/status?from=%s", longname);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(tu_http_get(base_port, path, &body), 200);
		free(body.data);
		body.data = NULL;
	}
	j = tu_status(base_port);
	ck_assert_ptr_nonnull(j);
	peer = json_array_get(json_object_get(j, "peers"), 1);
	ck_assert_str_eq(json_string_value(json_object_get(peer, "addr")),
	    longname);
	in = json_integer_value(json_object_get(json_object_get(json_object_get(
	    peer, "bytes"), "in"), "other"));
	out = json_integer_value(json_object_get(json_object_get(
	    json_object_get(peer, "bytes"), "out"), "other"));
	clients = json_object_get(json_object_get(j, "client_bytes"), "in");
	client_in = json_integer_value(json_object_get(clients, "other"));
	/* three requests of at least their request line each, and their
	 * answers; the clients have only this status request's own bytes so
	 * far (it is charged once answered) */
	ck_assert_int_ge(in, 3 * (long long)strlen(path));
	ck_assert_int_ge(out, 3 * 100);
	ck_assert_int_lt(client_in, (long long)strlen(path));
	json_decref(j);
	ck_assert_int_eq(stop(0), 0);
}
END_TEST

/* The checkpoint in state decodes, and is the one the daemon serves:
 * the sha256 and step its status gives, the bytes of its endpoint.
 * While it trains, a checkpoint can land between the three reads: then
 * they are taken again, until they agree (5 s at most).  Returns its
 * step. */
static long long
check_served(const char *state)
{
	char path[192], hex[65], got[65], body[65], err[PR_ERR_LEN], *buf;
	const char *sha;
	pr_ckpt_meta meta;
	long long served_step;
	json_t *j, *ck;
	tu_body b;
	size_t len;
	int tries;

	snprintf(path, sizeof(path), "%s/block-1.ckpt", state);
	for (tries = 0;; tries++) {
		ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 30, &buf, &len,
		    err), 0);
		ck_assert_msg(pr_ckpt_decode(buf, len, NULL, NULL, 0, NULL,
		    &meta, err) == 0, "%s: %s", path, err);
		pr_ckpt_sha256_hex(buf, len, hex, err);
		free(buf);
		j = tu_status(base_port);
		ck_assert_ptr_nonnull(j);
		ck = json_object_get(j, "checkpoint");
		sha = json_string_value(json_object_get(ck, "sha256"));
		snprintf(got, sizeof(got), "%s", sha ? sha : "");
		served_step = json_integer_value(json_object_get(ck, "step"));
		json_decref(j);
		ck_assert_int_eq(tu_http_get(base_port,
		    "/v1/blocks/1/checkpoint", &b), 200);
		pr_ckpt_sha256_hex(b.data, b.len, body, err);
		free(b.data);
		if (strcmp(got, hex) == 0 && served_step == meta.step &&
		    strcmp(body, hex) == 0)
			return meta.step;
		ck_assert_msg(tries < 100, "the checkpoint on disk (step %lld, "
		    "%s) is not the one served (status: step %lld, %s; "
		    "endpoint: %s)", (long long)meta.step, hex, served_step,
		    got, body);
		usleep(50000);
	}
}

/* A kill in the middle of a write leaves its temporary file: a restart
 * removes those of its block and says so, and the checkpoint stays. */
START_TEST(test_leftovers_removed)
{
	static const char *const gone[] = { "block-1.ckpt.tmp.999999",
	    "block-1.optim.tmp.2", "block-1.csv.tmp.3" };
	int block_of[1] = { 1 };
	char state[128], path[192], h1[65], err[PR_ERR_LEN], *buf;
	const char *why;
	size_t i, len;
	json_t *j;

	write_spec(1, 100, 50, 5);
	write_peers(1, block_of);
	start(0, 1);
	wait_done(1, 60);
	ck_assert_int_eq(stop(0), 0);
	snprintf(state, sizeof(state), "%s/state0", dir);
	snprintf(path, sizeof(path), "%s/block-1.ckpt", state);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 30, &buf, &len, err), 0);
	pr_ckpt_sha256_hex(buf, len, h1, err);
	free(buf);
	for (i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
		tu_write_file(state, gone[i], "cut short");
	tu_write_file(state, "block-2.ckpt.tmp.4", "another block's");
	start(0, 1);
	wait_done(1, 60);
	for (i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", state, gone[i]);
		ck_assert_msg(access(path, F_OK) != 0, "%s is left", path);
	}
	snprintf(path, sizeof(path), "%s/block-2.ckpt.tmp.4", state);
	ck_assert_int_eq(access(path, F_OK), 0);
	/* the same checkpoint, served */
	check_served(state);
	j = tu_status(base_port);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j,
	    "checkpoint"), "sha256")), h1);
	why = json_string_value(json_object_get(j, "error"));
	ck_assert_msg(why != NULL && strstr(why, gone[0]) != NULL, "status "
	    "error: %s", why ? why : "none");
	json_decref(j);
	ck_assert_int_eq(stop(0), 0);
}
END_TEST

/* The full-disk test's small file system, mounted by the parent process
 * (an unchecked fixture): a test runs in a child that ends at its first
 * failed check, so only the parent can be sure to unmount it. */
static char disk_root[64], disk[80], disk_why[512];
static int disk_mounted;

static void
disk_setup(void)
{
	tu_temp_dir(disk_root, sizeof(disk_root), "check_daemon_disk");
	snprintf(disk, sizeof(disk), "%s/fs", disk_root);
	disk_mounted = mkdir(disk, 0755) == 0 && tu_run_cmd(disk_why,
	    sizeof(disk_why), "mount -t tmpfs -o size=2m tmpfs %s", disk) == 0;
	disk_why[strcspn(disk_why, "\n")] = '\0';
}

static void
disk_teardown(void)
{
	char path[128], line[32];
	FILE *f;
	int i;

	/* a daemon that a failed test left behind holds files there */
	snprintf(path, sizeof(path), "%s/pid", disk_root);
	if ((f = fopen(path, "r")) != NULL) {
		if (fgets(line, sizeof(line), f) != NULL && atoi(line) > 0)
			kill(atoi(line), SIGKILL);
		fclose(f);
	}
	for (i = 0; disk_mounted && i < 50; i++) {
		if (tu_run_cmd(NULL, 0, "umount %s", disk) == 0)
			disk_mounted = 0;
		else
			usleep(100000);
	}
	if (disk_mounted && tu_run_cmd(NULL, 0, "umount -l %s", disk) != 0)
		fprintf(stderr, "# could not unmount %s\n", disk);
	tu_remove_dir(disk_root);
}

/* Appends to path until its file system is full, to the last byte. */
static void
fill_disk(const char *path)
{
	static char chunk[1 << 16];
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	size_t n;

	ck_assert_int_ge(fd, 0);
	for (n = sizeof(chunk); n > 0; n /= 2)
		while (write(fd, chunk, n) > 0)
			;
	close(fd);
}

/* Fills the disk until the daemon says it paused, topping it up: a
 * checkpoint that replaces another frees the older one's space. */
static int
fill_until_paused(const char *filler, double limit)
{
	double t0 = kn_now();

	do {
		fill_disk(filler);
		if (tu_status_is(base_port, "paused"))
			return 1;
		usleep(20000);
	} while (kn_now() - t0 < limit);
	return 0;
}

static void
note_pid(void)
{
	char text[32];

	snprintf(text, sizeof(text), "%ld\n", (long)pids[0]);
	tu_write_file(disk_root, "pid", text);
}

/* A disk full at a checkpoint pauses training: the last checkpoint stays
 * on disk and served, and training resumes once there is space again; a
 * stop ends the pause at once. */
START_TEST(test_disk_full)
{
	int block_of[1] = { 1 };
	char state[128], filler[128], path[192], err[PR_ERR_LEN], *buf;
	long long step, ckpt_step;
	const char *why;
	pr_ckpt_meta meta;
	double t0, took;
	size_t len;
	json_t *j;
	int rc, attempt, steps = 6000;

	if (!disk_mounted) {
		fprintf(stderr, "# test_disk_full skipped: cannot mount a small "
		    "tmpfs: %s\n", disk_why);
		return;
	}
	snprintf(filler, sizeof(filler), "%s/filler", disk);
	/* The pause must come in the middle of training.  The trainer
	 * (a tiny model) can run all its steps before the filler makes a
	 * checkpoint write fail, and pause only at its last checkpoint:
	 * then again, with four times the steps and a fresh state
	 * folder. */
	for (attempt = 0;; attempt++) {
		write_spec(1, steps, 50, 5);
		write_peers(1, block_of);
		snprintf(state, sizeof(state), "%s/state%d", disk, attempt);
		start_in(0, 1, state);
		note_pid();
		ck_assert(tu_wait_state(base_port, 1, "training", 30));
		ck_assert_msg(fill_until_paused(filler, 30), "not paused on a "
		    "full disk");
		step = tu_status_int(base_port, "step");
		if (step < steps || attempt == 3)
			break;
		fprintf(stderr, "# disk full: paused only at the last step "
		    "%lld: again with %d steps\n", step, steps * 4);
		tu_stop(&pids[0], SIGKILL, 15);
		ck_assert_int_eq(unlink(filler), 0);
		tu_remove_dir(state);
		steps *= 4;
	}
	ck_assert_int_lt(step, steps);
	j = tu_status(base_port);
	why = json_string_value(json_object_get(j, "error"));
	ck_assert_msg(why != NULL && strstr(why, "No space left on device") &&
	    strstr(why, "retrying in"), "status error: %s", why ? why : "none");
	json_decref(j);
	ckpt_step = check_served(state);
	step = tu_status_int(base_port, "step");
	usleep(1500000);
	ck_assert(tu_status_is(base_port, "paused"));
	ck_assert_int_eq(tu_status_int(base_port, "step"), step);
	fprintf(stderr, "# disk full: paused at step %lld, checkpoint of step "
	    "%lld served\n", step, ckpt_step);
	/* space again: the next retry writes it and training goes on */
	ck_assert_int_eq(unlink(filler), 0);
	ck_assert(tu_wait_state(base_port, 1, "training", 10));
	ck_assert_int_gt(check_served(state), ckpt_step);
	t0 = kn_now();
	while (tu_status_int(base_port, "step") <= step && kn_now() - t0 < 10)
		usleep(20000);
	ck_assert_int_gt(tu_status_int(base_port, "step"), step);

	/* full again: a stop in the middle of a 4 s wait ends it at once */
	ck_assert(fill_until_paused(filler, 30));
	usleep(3500000);
	ckpt_step = check_served(state);
	t0 = kn_now();
	rc = tu_stop(&pids[0], SIGTERM, 15);
	took = kn_now() - t0;
	fprintf(stderr, "# disk full: stopped %.2fs after SIGTERM, status "
	    "%d\n", took, rc);
	ck_assert_msg(took < 2.0, "stop took %.2fs", took);
	/* 1: its last steps could not be saved */
	ck_assert_int_eq(rc, 1);
	snprintf(path, sizeof(path), "%s/block-1.ckpt", state);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 30, &buf, &len, err), 0);
	ck_assert_int_eq(pr_ckpt_decode(buf, len, NULL, NULL, 0, NULL, &meta,
	    err), 0);
	free(buf);
	ck_assert_int_eq(meta.step, ckpt_step);

	/* restarted with space, it trains on from its checkpoint, writes
	 * the next one, and stops with all its steps saved (its run may be
	 * 96000 steps: to the end would take minutes) */
	ck_assert_int_eq(unlink(filler), 0);
	start_in(0, 1, state);
	note_pid();
	t0 = kn_now();
	while (!tu_status_is(base_port, "training") &&
	    !tu_status_is(base_port, "done") && kn_now() - t0 < 30)
		usleep(50000);
	while (check_served(state) <= ckpt_step &&
	    !tu_status_is(base_port, "done") && kn_now() - t0 < 60)
		usleep(50000);
	step = check_served(state);
	ck_assert_msg(step > ckpt_step || step == steps, "checkpoint of step "
	    "%lld served after the restart, %lld before", step, ckpt_step);
	ck_assert_int_eq(stop(0), 0);
	snprintf(path, sizeof(path), "%s/pid", disk_root);
	unlink(path);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("daemon");
	TCase *tc = tcase_create("loopback");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_config_errors);
	tcase_add_test(tc, test_three_blocks);
	tcase_add_test(tc, test_replicas_identical);
	tcase_add_test(tc, test_replicas_streams);
	tcase_add_test(tc, test_kill_replica);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_long_peer_name);
	tcase_add_test(tc, test_leftovers_removed);
	suite_add_tcase(s, tc);
	tc = tcase_create("disk");
	tcase_add_unchecked_fixture(tc, disk_setup, disk_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_disk_full);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
