/* The inference pipeline end to end: three blocktraind -S on loopback
 * (with WAN relays between them where a test needs time to act), real
 * sockets, a model trained for the test.  Output against one process in
 * both modes, a host killed in the middle of a request, bad frames, and
 * 64 clients at once with memory back to idle afterwards. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/blocktrain.h"
#include "daemon/pipeline_client.h"
#include "daemon/train.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "proto/spec.h"
#include "tests/testutil.h"

#define HOSTS 3
#define WINDOW 40

static const char *tool;
static char dir[64];
static int base_port;
static pid_t host_pid[HOSTS], relay_pid[HOSTS];
static char entry[32];

/* The run, trained once for the whole suite: three blocks of one layer
 * and the causal LM, a few dozen steps on system text. */
static void
train_once(void)
{
	char out[4096];

	tool = tu_shardmeter();
	tu_temp_dir(dir, sizeof(dir), "check_serve");
	tu_write_file(dir, "run.conf", "seed = 5\n[model]\nblocks = 3\n"
	    "width = 32\nheads = 2\nlayers_per_block = 1\nwindow = 40\n"
	    "p_prefix = 0.2\n"
	    "[data]\ntrain = /usr/share/common-licenses/GPL-3\n"
	    "valid = /usr/share/common-licenses/GPL-2\n"
	    "test = /usr/share/common-licenses/GPL-2\n"
	    "[optim]\nbatch = 8\nsteps = 40\nwarmup = 5\nlr = 3e-3\n");
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/run.conf --dir %s/run --all --quiet --threads 2 && %s train "
	    "--spec %s/run.conf --dir %s/run --reference causal --quiet "
	    "--threads 2", tool, dir, dir, tool, dir, dir) == 0, "training: %s",
	    out);
	base_port = 21000 + (int)(getpid() % 15000);
	snprintf(entry, sizeof(entry), "127.0.0.1:%d", base_port);
}

static void
cleanup_once(void)
{
	tu_remove_dir(dir);
}

static void
start_host(int i, int relayed)
{
	char listen[32], next[32], hosts[128], log[128], ckpt[128];
	char spec[128], conf[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(next, sizeof(next), "127.0.0.1:%d", relayed ? base_port + 100
	    + i : base_port + (i + 1) % HOSTS);
	snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(ckpt, sizeof(ckpt), "%s/run", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/serve.conf", dir);
	host_pid[i] = tu_daemon_start(log, base_port + i, "-S", "-f", "-c",
	    conf, "-L", listen, "-N", next, "-P", hosts, "-s", ckpt, "-r", spec,
	    "-D", "cpu", "-t", "1", (char *)NULL);
}

/* A relay in front of host (i + 1) % HOSTS, delay ms each way. */
static void
start_relay(int i, double delay_ms)
{
	char listen[32], target[32], d[16];
	const char *argv[] = { "wan-relay", "-q", "-d", d, listen, target,
	    NULL };

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + 100 + i);
	snprintf(target, sizeof(target), "127.0.0.1:%d",
	    base_port + (i + 1) % HOSTS);
	snprintf(d, sizeof(d), "%g", delay_ms);
	relay_pid[i] = tu_spawn(NULL, tu_wan_relay(), argv);
}

static pc_request
request_for(pl_mode mode, const char *prompt, int length, uint64_t seed)
{
	pc_request r = { 0 };

	r.mode = mode;
	r.prompt = prompt;
	r.prompt_len = strlen(prompt);
	r.length = length;
	r.steps = 24;
	r.temperature = 0.9;
	r.seed = seed;
	return r;
}

/* Until a request goes through the whole ring, or the limit. */
static void
wait_ring(double limit)
{
	double t0 = kn_now();
	pc_request r = request_for(PL_MODE_BT, "a", 4, 1);
	pc_result res;
	char err[KN_ERR_LEN];
	int ok = 0;

	while (!ok && kn_now() - t0 < limit) {
		if (pc_generate(entry, &r, &res, 2000, err) == 0 && res.ok)
			ok = 1;
		else
			usleep(100000);
		pc_result_clear(&res);
	}
	ck_assert_msg(ok, "the pipeline did not come up in %.0f s", limit);
}

static void
start_ring(int relayed, double delay_ms)
{
	char text[512];
	int i;

	snprintf(text, sizeof(text), "# traversal order\n127.0.0.1:%d 3\n"
	    "127.0.0.1:%d 2\n127.0.0.1:%d 1\n", base_port, base_port + 1,
	    base_port + 2);
	tu_write_file(dir, "hosts", text);
	tu_write_file(dir, "serve.conf", "pipeline_timeout_ms = 3000\n"
	    "pipeline_idle_s = 5\npipeline_batch = 8\n");
	for (i = 0; i < HOSTS; i++) {
		if (relayed)
			start_relay(i, delay_ms);
		start_host(i, relayed);
	}
	wait_ring(20);
}

static void
setup(void)
{
	memset(host_pid, 0, sizeof(host_pid));
	memset(relay_pid, 0, sizeof(relay_pid));
	signal(SIGPIPE, SIG_IGN);
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < HOSTS; i++) {
		tu_stop(&host_pid[i], SIGTERM, 15);
		tu_stop(&relay_pid[i], SIGTERM, 15);
	}
}

/* What one process gives for the same request (shardmeter generate). */
static void
single_process(pl_mode mode, const char *prompt, int length, uint64_t seed,
    char *out, size_t outlen)
{
	char raw[4096];
	size_t n;

	ck_assert_int_eq(tu_run_cmd(raw, sizeof(raw), "%s generate --spec "
	    "%s/run.conf --dir %s/run --mode %s --length %d --steps 24 "
	    "--temperature 0.9 --seed %llu '%s' 2>/dev/null", tool, dir, dir,
	    pl_mode_name(mode), length, (unsigned long long)seed, prompt), 0);
	n = strlen(raw);
	ck_assert_uint_gt(n, strlen(prompt));
	ck_assert_uint_lt(n, outlen);
	/* the prompt, the output, a newline */
	memcpy(out, raw + strlen(prompt), n - strlen(prompt) - 1);
	out[n - strlen(prompt) - 1] = '\0';
}

static void
check_same(pl_mode mode, const char *prompt, int length, uint64_t seed)
{
	pc_request r = request_for(mode, prompt, length, seed);
	pc_result res;
	char err[KN_ERR_LEN], expect[256];

	single_process(mode, prompt, length, seed, expect, sizeof(expect));
	ck_assert_int_eq(pc_generate(entry, &r, &res, 10000, err), 0);
	ck_assert_msg(res.ok, "%s: %s", pl_mode_name(mode), res.error);
	ck_assert_uint_eq(res.len, (size_t)length);
	/* the one-process output is text, so bytes that are NUL would
	 * shorten it: compare what it printed */
	ck_assert_msg(memcmp(res.output, expect, strlen(expect)) == 0 &&
	    strlen(expect) == (size_t)length, "%s seed %llu: pipeline and one "
	    "process differ", pl_mode_name(mode), (unsigned long long)seed);
	ck_assert_int_eq(res.traversals, mode == PL_MODE_AR ? length : 1);
	pc_result_clear(&res);
}

START_TEST(test_same_as_one_process)
{
	uint64_t seed;

	start_ring(0, 0);
	for (seed = 1; seed <= 3; seed++) {
		check_same(PL_MODE_BT, "The ", 20, seed);
		check_same(PL_MODE_AR, "The ", 20, seed);
	}
	check_same(PL_MODE_BT, "", WINDOW, 7);
	check_same(PL_MODE_AR, "G", WINDOW - 1, 7);
}
END_TEST

/* Killing the middle host fails the request in flight within the
 * timeout; the next request after its restart succeeds. */
START_TEST(test_kill_middle_host)
{
	pc_request r = request_for(PL_MODE_AR, "Th", 36, 2);
	pc_result res;
	pc_conn *c;
	char err[KN_ERR_LEN];
	double t0;
	int rc;

	/* 20 ms each way on every link: 36 traversals take over 2 s */
	start_ring(1, 20);
	ck_assert_int_eq(pc_connect(&c, entry, 2000, err), 0);
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	usleep(400000);
	t0 = kn_now();
	tu_stop(&host_pid[1], SIGKILL, 15);
	rc = pc_recv(c, &res, 10000, err);
	ck_assert_int_eq(rc, 0);
	ck_assert_msg(!res.ok, "the request survived its host");
	/* within the 3 s timeout (the entry fails it when its link drops);
	 * the slack is for a loaded machine, not for the design */
	ck_assert_msg(kn_now() - t0 < 5.0, "error after %.2f s", kn_now() - t0);
	ck_assert_ptr_nonnull(strstr(res.error, "127.0.0.1"));
	pc_result_clear(&res);
	/* the entry is still up and says at once that the ring is broken */
	r.length = 4;
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	ck_assert_int_eq(pc_recv(c, &res, 5000, err), 0);
	ck_assert(!res.ok);
	pc_result_clear(&res);
	pc_close(c);
	start_host(1, 1);
	wait_ring(20);
	check_same(PL_MODE_AR, "Th", 10, 2);
	check_same(PL_MODE_BT, "Th", 10, 2);
}
END_TEST

/* A host that stops answering (SIGSTOP: its connections stay up) makes
 * the request time out within pipeline_timeout_ms; SIGCONT, and the next
 * request succeeds. */
START_TEST(test_stalled_host_times_out)
{
	pc_request r = request_for(PL_MODE_BT, "St", 10, 3);
	pc_result res;
	char err[KN_ERR_LEN];
	double t0;

	start_ring(0, 0);
	kill(host_pid[2], SIGSTOP);
	t0 = kn_now();
	ck_assert_int_eq(pc_generate(entry, &r, &res, 10000, err), 0);
	ck_assert(!res.ok);
	ck_assert_ptr_nonnull(strstr(res.error, "timed out"));
	/* not before the 3 s timeout, and soon after it (checked every
	 * 0.1 s; the slack is for a loaded machine) */
	ck_assert_msg(kn_now() - t0 >= 2.9 && kn_now() - t0 < 5.0, "error after "
	    "%.2f s", kn_now() - t0);
	pc_result_clear(&res);
	kill(host_pid[2], SIGCONT);
	wait_ring(10);
	check_same(PL_MODE_BT, "St", 10, 3);
	check_same(PL_MODE_AR, "St", 10, 3);
}
END_TEST

/* Many requests in flight on one connection, answered by id. */
START_TEST(test_many_on_one_connection)
{
	pc_conn *c;
	pc_request r[6];
	pc_result res;
	uint64_t id[6];
	char err[KN_ERR_LEN], expect[6][64];
	int i, k, seen = 0;

	start_ring(0, 0);
	ck_assert_int_eq(pc_connect(&c, entry, 2000, err), 0);
	for (i = 0; i < 6; i++) {
		pl_mode mode = i % 2 ? PL_MODE_AR : PL_MODE_BT;

		r[i] = request_for(mode, "Id ", 6 + i, 40 + (uint64_t)i);
		single_process(mode, "Id ", 6 + i, 40 + (uint64_t)i, expect[i],
		    sizeof(expect[i]));
	}
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(pc_send(c, &r[i], &id[i], err), 0);
	for (k = 0; k < 6; k++) {
		ck_assert_int_eq(pc_recv(c, &res, 10000, err), 0);
		ck_assert_msg(res.ok, "%s", res.error);
		for (i = 0; i < 6 && id[i] != res.id; i++)
			;
		ck_assert_int_lt(i, 6);
		ck_assert(!(seen & 1 << i));
		seen |= 1 << i;
		ck_assert_uint_eq(res.len, strlen(expect[i]));
		ck_assert_mem_eq(res.output, expect[i], res.len);
		pc_result_clear(&res);
	}
	pc_close(c);
}
END_TEST

static int
raw_connect(void)
{
	int fd = tu_connect(base_port);

	ck_assert_int_ge(fd, 0);
	return fd;
}

/* The daemon closes the connection: a read sees EOF within 5 s. */
static int
closed_by_peer(int fd)
{
	struct timeval tv = { 5, 0 };
	char b[64];

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return read(fd, b, sizeof(b)) == 0;
}

START_TEST(test_bad_frames)
{
	pc_request r = request_for(PL_MODE_BT, "ok ", 8, 4);
	pc_result res;
	pc_conn *good;
	char err[KN_ERR_LEN], expect[64];
	int fd;

	pc_request inflight = request_for(PL_MODE_AR, "go ", 30, 9);
	char expect_ar[64];

	start_ring(0, 0);
	single_process(PL_MODE_BT, "ok ", 8, 4, expect, sizeof(expect));
	single_process(PL_MODE_AR, "go ", 30, 9, expect_ar, sizeof(expect_ar));
	ck_assert_int_eq(pc_connect(&good, entry, 2000, err), 0);
	/* a request in flight while the bad frames arrive */
	ck_assert_int_eq(pc_send(good, &inflight, NULL, err), 0);
	/* oversized: closed on the header alone */
	fd = raw_connect();
	ck_assert_int_eq(write(fd, "\x7f\xff\xff\xff", 4), 4);
	ck_assert(closed_by_peer(fd));
	close(fd);
	/* malformed body */
	fd = raw_connect();
	ck_assert_int_eq(write(fd, "\0\0\0\x05hello", 9), 9);
	ck_assert(closed_by_peer(fd));
	close(fd);
	/* a zero-length frame */
	fd = raw_connect();
	ck_assert_int_eq(write(fd, "\0\0\0\0", 4), 4);
	ck_assert(closed_by_peer(fd));
	close(fd);
	/* truncated: the client goes in the middle of a frame */
	fd = raw_connect();
	ck_assert_int_eq(write(fd, "\0\0\0\x64" "abc", 7), 7);
	close(fd);
	ck_assert_int_eq(pc_recv(good, &res, 5000, err), 0);
	ck_assert_msg(res.ok, "%s", res.error);
	ck_assert_uint_eq(res.len, 30);
	ck_assert_mem_eq(res.output, expect_ar, 30);
	pc_result_clear(&res);
	/* a request with the prompt and output over the window is answered
	 * with an error, and the connection stays */
	r.length = 60;
	ck_assert_int_eq(pc_send(good, &r, NULL, err), 0);
	ck_assert_int_eq(pc_recv(good, &res, 5000, err), 0);
	ck_assert(!res.ok);
	ck_assert_ptr_nonnull(strstr(res.error, "window"));
	pc_result_clear(&res);
	/* ar mode needs a prompt */
	r = request_for(PL_MODE_AR, "", 8, 4);
	ck_assert_int_eq(pc_send(good, &r, NULL, err), 0);
	ck_assert_int_eq(pc_recv(good, &res, 5000, err), 0);
	ck_assert(!res.ok);
	pc_result_clear(&res);
	/* a request sent to a host that is not the entry */
	{
		char addr[32];

		snprintf(addr, sizeof(addr), "127.0.0.1:%d", base_port + 1);
		r = request_for(PL_MODE_BT, "ok ", 8, 4);
		ck_assert_int_eq(pc_generate(addr, &r, &res, 5000, err), 0);
		ck_assert(!res.ok);
		ck_assert_ptr_nonnull(strstr(res.error, "not the entry"));
		pc_result_clear(&res);
	}
	/* the connection opened before the bad ones still works, and the
	 * daemons still run */
	r = request_for(PL_MODE_BT, "ok ", 8, 4);
	ck_assert_int_eq(pc_send(good, &r, NULL, err), 0);
	ck_assert_int_eq(pc_recv(good, &res, 5000, err), 0);
	ck_assert_msg(res.ok, "%s", res.error);
	ck_assert_mem_eq(res.output, expect, 8);
	pc_result_clear(&res);
	pc_close(good);
	ck_assert_int_eq(kill(host_pid[0], 0), 0);
	ck_assert_int_eq(kill(host_pid[1], 0), 0);
}
END_TEST

/* Resident memory of a process, in KiB. */
static long
rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

#define CLIENTS 64

struct client {
	pl_mode mode;
	uint64_t seed;
	unsigned char expect[WINDOW];
	int length;
	int ok;
	char why[PL_MSG_LEN];
};

static void *
client_run(void *arg)
{
	struct client *cl = arg;
	pc_request r = request_for(cl->mode, "It ", cl->length, cl->seed);
	pc_result res;
	char err[KN_ERR_LEN];

	if (pc_generate(entry, &r, &res, 60000, err) != 0)
		snprintf(cl->why, sizeof(cl->why), "%s", err);
	else if (!res.ok)
		snprintf(cl->why, sizeof(cl->why), "%s", res.error);
	else if (res.len != (size_t)cl->length ||
	    memcmp(res.output, cl->expect, res.len) != 0)
		snprintf(cl->why, sizeof(cl->why), "wrong output");
	else
		cl->ok = 1;
	pc_result_clear(&res);
	return NULL;
}

/* The expected outputs, computed here with the library (as one process
 * does), so 64 of them take no process launches. */
static void
expected(struct client *cl, int n)
{
	pr_spec spec;
	char err[PR_ERR_LEN], path[128], run_id[PR_RUN_ID_LEN];
	const kn_backend *be;
	kn_model *m[4] = { NULL }, *causal;
	int i, b, k;

	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	be = kn_backend_get(KN_BACKEND_CPU, NULL, err);
	snprintf(path, sizeof(path), "%s/run", dir);
	for (b = 1; b <= 3; b++)
		ck_assert_int_eq(tr_load_model(&m[b], &spec, run_id, path,
		    BT_BLOCK, b, be, 1, err), 0);
	ck_assert_int_eq(tr_load_model(&causal, &spec, run_id, path, BT_CAUSAL,
	    0, be, 1, err), 0);
	for (i = 0; i < n; i++) {
		int32_t seq[WINDOW];

		for (k = 0; k < WINDOW; k++)
			seq[k] = k < 3 ? "It "[k] : KN_MASK;
		if (cl[i].mode == PL_MODE_BT)
			for (b = 2; b >= 0; b--)
				ck_assert_int_eq(bt_denoise_block(m[b + 1], &spec,
				    24, b, seq, 3, 0.9f, cl[i].seed, err), 0);
		else
			ck_assert_int_eq(bt_generate_ar(causal, seq, 3,
			    3 + cl[i].length, 0.9f, cl[i].seed, err), 0);
		for (k = 0; k < cl[i].length; k++)
			cl[i].expect[k] = (unsigned char)seq[3 + k];
	}
	for (b = 1; b <= 3; b++)
		kn_model_free(m[b]);
	kn_model_free(causal);
}

START_TEST(test_64_clients)
{
	static struct client cl[CLIENTS];
	pthread_t th[CLIENTS];
	long idle[HOSTS], after[HOSTS];
	int i, ok = 0;
	double t0;

	start_ring(0, 0);
	memset(cl, 0, sizeof(cl));
	for (i = 0; i < CLIENTS; i++) {
		cl[i].mode = i % 2 ? PL_MODE_AR : PL_MODE_BT;
		cl[i].seed = 100 + (uint64_t)i;
		cl[i].length = 12 + i % 20;
	}
	expected(cl, CLIENTS);
	/* idle, after a first round of work has set up every buffer */
	for (i = 0; i < 8; i++)
		client_run(&cl[i]);
	sleep(1);
	for (i = 0; i < HOSTS; i++)
		idle[i] = rss_kib(host_pid[i]);
	for (i = 0; i < CLIENTS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, client_run,
		    &cl[i]), 0);
	for (i = 0; i < CLIENTS; i++) {
		pthread_join(th[i], NULL);
		if (!cl[i].ok)
			fprintf(stderr, "# client %d: %s\n", i, cl[i].why);
		ok += cl[i].ok;
	}
	ck_assert_int_eq(ok, CLIENTS);
	/* back to the idle footprint within a few seconds: every KV cache
	 * freed, buffers given back */
	t0 = kn_now();
	for (;;) {
		int back = 1;

		for (i = 0; i < HOSTS; i++) {
			after[i] = rss_kib(host_pid[i]);
			back &= after[i] <= idle[i] + idle[i] / 20 + 1024;
		}
		if (back || kn_now() - t0 > 10)
			break;
		usleep(200000);
	}
	for (i = 0; i < HOSTS; i++) {
		fprintf(stderr, "# host %d: %ld KiB idle, %ld KiB after %d "
		    "clients\n", i + 1, idle[i], after[i], CLIENTS);
#if defined(__SANITIZE_ADDRESS__)
		/* AddressSanitizer keeps freed memory in quarantine, so the
		 * resident size says nothing here; its leak check at the
		 * hosts' exit covers what they failed to free */
		continue;
#endif
		ck_assert_msg(after[i] <= idle[i] + idle[i] / 20 + 1024,
		    "host %d holds %ld KiB after the clients, %ld idle", i + 1,
		    after[i], idle[i]);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("serve");
	TCase *tc = tcase_create("loopback");
	int rc;

	tcase_add_unchecked_fixture(tc, train_once, cleanup_once);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_same_as_one_process);
	tcase_add_test(tc, test_kill_middle_host);
	tcase_add_test(tc, test_bad_frames);
	tcase_add_test(tc, test_stalled_host_times_out);
	tcase_add_test(tc, test_many_on_one_connection);
	tcase_add_test(tc, test_64_clients);
	suite_add_tcase(s, tc);
	rc = tu_run_suite(s);
	kn_pool_shutdown();
	return rc;
}
