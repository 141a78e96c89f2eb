/* Overlapped rounds (overlap_rounds = yes) end to end: two replicas of one
 * block as real daemons on loopback.  A replica trains a whole round while
 * its round is in flight and no sooner stops; both finish with the same
 * checkpoint, each round's published checkpoint is the same on both; a
 * stop leaves no round in flight.  Blocking rounds are the control. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "proto/checkpoint.h"
#include "tests/testutil.h"

#define H 20            /* local_steps */

static char dir[64];
static int base_port;
static pid_t pids[2];

static void
setup(void)
{
	char text[2048] = "# two replicas of block 1\n", state[128];
	int i;

	tu_temp_dir(dir, sizeof(dir), "check_overlap");
	tu_trust_init(dir);
	base_port = tu_port_base(2);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (i = 0; i < 2; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, 1, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
}

static void
teardown(void)
{
	tu_stop(&pids[0], SIGKILL, 15);
	tu_stop(&pids[1], SIGKILL, 15);
	tu_remove_dir(dir);
	curl_global_cleanup();
}

/* The spec and daemon.conf of tu_write_run, with overlap_rounds. */
static void
write_run(int steps, double deadline, const char *overlap)
{
	char path[128], line[64];
	FILE *f;

	tu_write_run(dir, 1, steps, H, deadline);
	snprintf(path, sizeof(path), "%s/daemon.conf", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "a"));
	snprintf(line, sizeof(line), "overlap_rounds = %s\n", overlap);
	fputs(line, f);
	fclose(f);
}

static void
start(int i)
{
	char listen[32], log[128], peers[128], spec[128], conf[128];
	char state[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(state, sizeof(state), "%s/state%d", dir, i);
	pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c", conf,
	    "-l", listen, "-b", "1", "-s", state, "-p", peers, "-r", spec,
	    "-D", "cpu", "-t", "1", (char *)NULL);
}

static long long
status_of(int i, const char *key)
{
	return tu_status_int(base_port + i, key);
}

/* Polls daemon i until its status field key reaches at least want, 20 s
 * at most; returns the last value read. */
static long long
wait_field(int i, const char *key, long long want)
{
	double t0 = kn_now();
	long long v;

	while ((v = status_of(i, key)) < want && kn_now() - t0 < 20)
		usleep(50000);
	return v;
}

/* Counts the lines of a file holding what; *last receives the number
 * after `after` on the last of them (-1 if none). */
static int
count_lines(const char *file, const char *what, const char *after,
    long long *last)
{
	char path[160], line[1024];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	*last = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p;

		if (strstr(line, what) == NULL)
			continue;
		n++;
		if (after != NULL && (p = strstr(line, after)) != NULL)
			*last = strtoll(p + strlen(after), NULL, 10);
	}
	fclose(f);
	return n;
}

/* "round R done: step S checkpoint X" lines of daemon i's journal (the
 * checkpoint of round R + 1 published), as round -> hash; returns the
 * highest round published. */
static int
round_hashes(int i, char hashes[][65], int max)
{
	char path[128], line[1024];
	int top = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/state%d/journal", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, " round ");
		long long step, done;
		char hash[65];

		if (p == NULL || sscanf(p, " round %lld done: step %lld "
		    "checkpoint %64s", &done, &step, hash) != 3)
			continue;
		/* the consensus of round R starts at step R * H */
		ck_assert_int_eq(step, (done + 1) * H);
		if (done + 1 >= 0 && done + 1 < max) {
			memcpy(hashes[done + 1], hash, 65);
			if (done + 1 > top)
				top = (int)done + 1;
		}
	}
	fclose(f);
	return top;
}

/* The checkpoint file daemon i left: its bytes and its step and round. */
static char *
final_checkpoint(int i, size_t *len, pr_ckpt_meta *meta)
{
	char path[160], err[PR_ERR_LEN], *buf;

	snprintf(path, sizeof(path), "%s/state%d/block-1.ckpt", dir, i);
	ck_assert_msg(pr_ckpt_read_file(path, 1 << 30, &buf, len, err) == 0,
	    "%s", err);
	ck_assert_msg(pr_ckpt_decode(buf, *len, NULL, NULL, 0, NULL, meta,
	    err) == 0, "%s: %s", path, err);
	return buf;
}

/* Replica 0 starts alone: its round 0 cannot commit before replica 1,
 * never seen yet, sends its update (the deadline is far), so it trains
 * exactly one round on, H steps, and waits there.  Then replica 1 comes,
 * and both train to the end with overlapped rounds. */
START_TEST(test_overlap_rounds)
{
	const int steps = 5 * H;
	char h0[16][65] = { { 0 } }, h1[16][65] = { { 0 } };
	char *c0, *c1;
	size_t l0, l1;
	pr_ckpt_meta m0, m1;
	long long last;
	int r;

	write_run(steps, 30, "yes");
	start(0);
	ck_assert_int_eq(wait_field(0, "steps_overlapped", H), H);
	ck_assert_int_eq(status_of(0, "step"), 2 * H);
	/* it waits: the status at that step a while later says the same */
	usleep(300000);
	ck_assert_int_eq(status_of(0, "steps_overlapped"), H);
	ck_assert_int_eq(status_of(0, "step"), 2 * H);
	{
		json_t *j = tu_status(base_port);

		ck_assert_ptr_nonnull(j);
		ck_assert(json_is_true(json_object_get(j, "overlap_rounds")));
		json_decref(j);
	}
	start(1);
	ck_assert_msg(tu_wait_state(base_port, 2, "done", 60),
	    "replicas not done after 60 s");
	fprintf(stderr, "# overlap: replica 0 trained %lld steps, replica 1 "
	    "%lld, with a round in flight\n", status_of(0, "steps_overlapped"),
	    status_of(1, "steps_overlapped"));
	/* the last round was waited for: the same weights on both */
	c0 = final_checkpoint(0, &l0, &m0);
	c1 = final_checkpoint(1, &l1, &m1);
	ck_assert_int_eq(m0.step, steps);
	ck_assert_int_eq(m0.round, steps / H);
	ck_assert_int_eq(m1.step, steps);
	ck_assert_int_eq(m1.round, steps / H);
	ck_assert_msg(l0 == l1 && memcmp(c0, c1, l0) == 0,
	    "the replicas' final checkpoints differ");
	free(c0);
	free(c1);
	/* and each round's published checkpoint was the consensus; the last
	 * boundary, which waits, publishes the final one instead of the one
	 * before */
	ck_assert_int_eq(round_hashes(0, h0, 16), steps / H);
	ck_assert_int_eq(round_hashes(1, h1, 16), steps / H);
	ck_assert(!h0[steps / H - 1][0] && !h1[steps / H - 1][0]);
	for (r = 1; r <= steps / H; r++) {
		if (r == steps / H - 1)
			continue;
		ck_assert_msg(h0[r][0] && h1[r][0], "round %d: a checkpoint is "
		    "missing", r);
		ck_assert_msg(strcmp(h0[r], h1[r]) == 0, "round %d: replicas "
		    "differ (%s, %s)", r, h0[r], h1[r]);
	}
	/* every round committed with both, the last one too */
	ck_assert_int_eq(count_lines("state0/journal", "members 0x3", "round ",
	    &last), steps / H);
	ck_assert_int_eq(last, steps / H - 1);
	ck_assert_int_eq(count_lines("state1/journal", "members 0x3", "round ",
	    &last), steps / H);
	ck_assert_int_eq(last, steps / H - 1);
	ck_assert_int_eq(status_of(0, "round"), steps / H);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	ck_assert_int_eq(tu_stop(&pids[1], SIGTERM, 15), 0);
}
END_TEST

/* The control: with blocking rounds the lone replica stops at its first
 * round and trains nothing while it is in flight. */
START_TEST(test_blocking_waits)
{
	write_run(5 * H, 30, "no");
	start(0);
	ck_assert_msg(tu_wait_state(base_port, 1, "round", 20),
	    "replica 0 never waited for its round");
	ck_assert_int_eq(status_of(0, "step"), H);
	usleep(300000);
	ck_assert_int_eq(status_of(0, "step"), H);
	ck_assert_int_eq(status_of(0, "steps_overlapped"), 0);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
}
END_TEST

/* A stop in the middle of the run: each replica waits for its round in
 * flight, then writes the consensus of the last round it took in, at the
 * step where that consensus starts. */
START_TEST(test_overlap_stop)
{
	long long last;
	pr_ckpt_meta m;
	size_t len;
	int i;

	write_run(100000, 3, "yes");
	start(0);
	start(1);
	ck_assert_int_ge(wait_field(0, "round", 3), 3);
	/* one SIGTERM each (a second would stop at once), then the wait */
	ck_assert_int_eq(kill(pids[0], SIGTERM), 0);
	ck_assert_int_eq(kill(pids[1], SIGTERM), 0);
	ck_assert_int_eq(tu_stop(&pids[0], 0, 15), 0);
	ck_assert_int_eq(tu_stop(&pids[1], 0, 15), 0);
	for (i = 0; i < 2; i++) {
		char log[16], journal[32];

		free(final_checkpoint(i, &len, &m));
		snprintf(log, sizeof(log), "log%d", i);
		snprintf(journal, sizeof(journal), "state%d/journal", i);
		ck_assert_int_eq(count_lines(log, "no answer for round", NULL,
		    &last), 0);
		ck_assert_int_gt(count_lines(journal, " members ", "round ",
		    &last), 0);
		fprintf(stderr, "# stop: replica %d wrote step %lld round %lld; "
		    "its last committed round was %lld\n", i, (long long)m.step,
		    (long long)m.round, last);
		ck_assert_int_eq(m.step, m.round * H);
		ck_assert_int_eq(m.round, last + 1);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("overlap");
	TCase *tc = tcase_create("overlap");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_overlap_rounds);
	tcase_add_test(tc, test_blocking_waits);
	tcase_add_test(tc, test_overlap_stop);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
