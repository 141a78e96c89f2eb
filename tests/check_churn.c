/* Replicas that join and leave a running block (DESIGN section 5), real
 * daemons on loopback: a replica joins a block that trained alone, a
 * replica leaves, the coordinator leaves.  Each takes effect at a round
 * boundary after SIGHUP, without a restart of the daemons that stay, and
 * the replicas of every round after the change hold bitwise the same
 * checkpoint. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "tests/testutil.h"

#define MAXD 4
#define MAXR 4096

static char dir[64];
static int base_port;
static pid_t pids[MAXD];

/* The peer list: daemon i (of those with listed[i]) on base_port + i,
 * block 1, its identity in dir/state<i>; the test as a client. */
static void
write_peers(const int *listed)
{
	char text[2048] = "# churn\n", state[128];
	int i;

	for (i = 0; i < MAXD; i++) {
		if (!listed[i])
			continue;
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, 1, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
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
round_of(int i)
{
	return tu_status_int(base_port + i, "round");
}

/* Waits until daemon i stands at round r or later. */
static void
wait_round(int i, long long r, double limit)
{
	double t0 = kn_now();

	while (round_of(i) < r && kn_now() - t0 < limit)
		usleep(50000);
	ck_assert_msg(round_of(i) >= r, "daemon %d at round %lld, not %lld "
	    "after %.0fs", i, round_of(i), r, limit);
}

static void
hup(const int *listed)
{
	int i;

	write_peers(listed);
	for (i = 0; i < MAXD; i++)
		if (pids[i] > 0)
			ck_assert_int_eq(kill(pids[i], SIGHUP), 0);
}

/* Whether daemon i's status names a change of what ("joined", "left")
 * for the daemon on port. */
static int
saw_change(int i, const char *what, int port)
{
	json_t *j = tu_status(base_port + i), *c, *v;
	char addr[32];
	size_t k;
	int found = 0;

	if (j == NULL)
		return 0;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	c = json_object_get(json_object_get(j, "roster"), "changes");
	json_array_foreach(c, k, v)
		if (strcmp(json_string_value(json_object_get(v, "what")),
		    what) == 0 && strcmp(json_string_value(json_object_get(v,
		    "addr")), addr) == 0)
			found = 1;
	json_decref(j);
	return found;
}

static void
wait_change(int i, const char *what, int port, double limit)
{
	double t0 = kn_now();

	while (!saw_change(i, what, port) && kn_now() - t0 < limit)
		usleep(100000);
	ck_assert_msg(saw_change(i, what, port), "daemon %d does not show "
	    "127.0.0.1:%d %s after %.0fs", i, port, what, limit);
}

/* "checkpoint at step S, round R, N bytes, sha256 X..." of daemon i's
 * log, as round -> hash prefix; the latest of a round wins. */
static void
round_hashes(int i, char (*hashes)[17])
{
	char path[128], line[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, "checkpoint at step");
		long long step, round;
		char hash[17];

		if (p == NULL || sscanf(p, "checkpoint at step %lld, round %lld, "
		    "%*d bytes, sha256 %16s", &step, &round, hash) != 3)
			continue;
		if (round >= 0 && round < MAXR)
			memcpy(hashes[round], hash, 17);
	}
	fclose(f);
}

/* The daemons a and b hold bitwise the same checkpoint at every round
 * from first on that both wrote, and there are at least want of them. */
static void
same_rounds(int a, int b, long long first, int want)
{
	static char ha[MAXR][17], hb[MAXR][17];
	int r, common = 0;

	memset(ha, 0, sizeof(ha));
	memset(hb, 0, sizeof(hb));
	round_hashes(a, ha);
	round_hashes(b, hb);
	for (r = (int)first; r < MAXR; r++) {
		if (!ha[r][0] || !hb[r][0])
			continue;
		ck_assert_msg(strcmp(ha[r], hb[r]) == 0, "round %d: daemons %d "
		    "and %d differ (%s, %s)", r, a, b, ha[r], hb[r]);
		common++;
	}
	fprintf(stderr, "# daemons %d and %d: the same checkpoint at each of "
	    "%d rounds from round %lld\n", a, b, common, first);
	ck_assert_msg(common >= want, "daemons %d and %d: %d common rounds "
	    "from %lld, want %d", a, b, common, first, want);
}

/* Lines of daemon i's log holding text. */
static int
log_has(int i, const char *text)
{
	char path[128], line[1024];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_churn");
	tu_trust_init(dir);
	base_port = tu_port_base(MAXD);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
	/* long enough never to end during a test; rounds of 25 steps */
	tu_write_run(dir, 1, 100000, 25, 3);
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

/* A block trained by one daemon gains a second replica: the first takes
 * the new list at its next round boundary without a restart (the same
 * pid goes on), the newcomer starts from the block's newest checkpoint,
 * and from then on both hold the same checkpoint after every round. */
START_TEST(test_join)
{
	int one[MAXD] = { 1, 0, 0, 0 }, two[MAXD] = { 1, 1, 0, 0 };
	long long r;
	pid_t first;

	write_peers(one);
	start(0);
	first = pids[0];
	/* alone, it has no rounds to count: 3 rounds' worth of steps */
	{
		double t0 = kn_now();

		while (tu_status_int(base_port, "step") < 75 &&
		    kn_now() - t0 < 60)
			usleep(50000);
		ck_assert_int_ge(tu_status_int(base_port, "step"), 75);
	}
	write_peers(two);
	start(1);
	hup(two);
	wait_change(0, "joined", base_port + 1, 60);
	ck_assert_int_eq(pids[0], first);
	ck_assert_int_eq(kill(first, 0), 0);
	r = round_of(0);
	wait_round(1, r + 3, 90);
	wait_round(0, r + 3, 90);
	ck_assert_int_gt(log_has(0, "the roster's change in effect"), 0);
	same_rounds(0, 1, r + 1, 2);
	ck_assert_int_eq(tu_stop(&pids[1], SIGTERM, 20), 0);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 20), 0);
}
END_TEST

/* Three replicas; one leaves (dropped from the list, SIGHUP to all): it
 * finishes its round and exits 0, the two others go on as two and stay
 * identical.  which = 0 drops the coordinator (the first line), whose
 * role moves to the next replica. */
static void
leave(int which)
{
	int three[MAXD] = { 1, 1, 1, 0 }, left[MAXD] = { 1, 1, 1, 0 };
	int a = which == 0 ? 1 : 0, b = which == 2 ? 1 : 2, i;
	long long r;

	write_peers(three);
	for (i = 0; i < 3; i++)
		start(i);
	for (i = 0; i < 3; i++)
		wait_round(i, 3, 90);
	left[which] = 0;
	hup(left);
	/* the one that left ends by itself, cleanly */
	{
		double t0 = kn_now();
		int status = -1;

		while (kn_now() - t0 < 60) {
			if (waitpid(pids[which], &status, WNOHANG) == pids[which])
				break;
			usleep(100000);
		}
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		    "the replica that left did not exit 0 (status %d)", status);
		pids[which] = 0;
	}
	ck_assert_int_gt(log_has(which, "left the run"), 0);
	wait_change(a, "left", base_port + which, 60);
	wait_change(b, "left", base_port + which, 60);
	r = round_of(a);
	wait_round(a, r + 3, 90);
	wait_round(b, r + 3, 90);
	same_rounds(a, b, r + 1, 2);
	ck_assert_int_eq(tu_stop(&pids[a], SIGTERM, 20), 0);
	ck_assert_int_eq(tu_stop(&pids[b], SIGTERM, 20), 0);
}

START_TEST(test_leave)
{
	leave(2);
}
END_TEST

/* The same with overlapped rounds: the round in flight at the boundary
 * is awaited and applied before the new engine starts. */
START_TEST(test_leave_overlapped)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/daemon.conf", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "a"));
	fputs("overlap_rounds = yes\n", f);
	fclose(f);
	leave(1);
}
END_TEST

START_TEST(test_coordinator_leaves)
{
	char path[128], line[512];
	int after = 0, coordinated = 0;
	FILE *f;

	leave(0);
	/* daemon 1, replica 0 of the new roster, coordinated the rounds
	 * after the change (the journal names each round's coordinator) */
	snprintf(path, sizeof(path), "%s/state1/journal", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strstr(line, "roster: ") && strstr(line, " left at "))
			after = 1;
		else if (after && strstr(line, "coordinator 0"))
			coordinated++;
	}
	fclose(f);
	fprintf(stderr, "# the new coordinator decided %d rounds\n",
	    coordinated);
	ck_assert_int_ge(coordinated, 2);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("churn");
	TCase *tc = tcase_create("churn");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_join);
	tcase_add_test(tc, test_leave);
	tcase_add_test(tc, test_leave_overlapped);
	tcase_add_test(tc, test_coordinator_leaves);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
