/* blocktraind's start-up where people look for it: detached, its log file
 * and pid file in the state directory and the shell waiting until it
 * listens; a second daemon on the same directory refused by pid; in the
 * foreground under a service manager; and a port another process holds
 * named with its reason, by a training daemon and a pipeline host.  Also
 * what shardmeter generate --peers says when given a training daemon.
 * Real daemons on loopback, insecure (plain TCP) to keep them quick. */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "tests/testutil.h"

static char dir[256];
static int port;

/* A one-block run of plain TCP: dir/run.conf, dir/daemon.conf (insecure)
 * and dir/peers, the daemon on port. */
static void
write_run(void)
{
	char peers[64];

	tu_write_run(dir, 1, 40, 20, 10);
	tu_write_file(dir, "daemon.conf", "insecure = yes\neval_every = 0\n"
	    "checkpoint_every = 20\nmetrics_listen = off\n");
	snprintf(peers, sizeof(peers), "127.0.0.1:%d 1\n", port);
	tu_write_file(dir, "peers", peers);
}

/* blocktraind without -f, as a shell would start it, on state and
 * port p; its exit status, its output in out. */
static int
start_detached(char *out, size_t len, const char *state, int p)
{
	return tu_run_cmd(out, len, "cd '%s' && unset INVOCATION_ID "
	    "NOTIFY_SOCKET JOURNAL_STREAM; '%s' -c daemon.conf -l "
	    "127.0.0.1:%d -b 1 -s %s -p peers -r run.conf -D cpu -t 1 "
	    "< /dev/null", dir, tu_blocktraind(), p, state);
}

/* The pid in path, 0 when it is not there. */
static pid_t
pid_in(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = 0;

	if (f == NULL)
		return 0;
	if (fscanf(f, "%ld", &v) != 1)
		v = 0;
	fclose(f);
	return (pid_t)v;
}

/* Whether path is gone within limit seconds. */
static int
gone(const char *path, double limit)
{
	double t0 = kn_now();

	while (access(path, F_OK) == 0) {
		if (kn_now() - t0 > limit)
			return 0;
		usleep(50000);
	}
	return 1;
}

/* A socket listening on 127.0.0.1:p, held by the test. */
static int
hold_port(int p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
	    .sin_port = htons((uint16_t)p) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

START_TEST(test_detached)
{
	char out[8192], pidf[320], logf[320];
	pid_t pid;

	write_run();
	snprintf(pidf, sizeof(pidf), "%s/state/blocktraind.pid", dir);
	snprintf(logf, sizeof(logf), "%s/state/blocktraind.log", dir);
	/* the shell gets its prompt back once the daemon listens */
	ck_assert_msg(start_detached(out, sizeof(out), "state", port) == 0,
	    "%s", out);
	ck_assert_msg(strstr(out, "the log is state/blocktraind.log") != NULL,
	    "%s", out);
	ck_assert_int_eq(tu_wait_port(port, 0, 0.5), 1);
	pid = pid_in(pidf);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(kill(pid, 0), 0);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "grep -q 'listening on "
	    "127.0.0.1:%d' '%s' && grep -q 'pid %ld in the background' '%s'",
	    port, logf, (long)pid, logf), 0);
	/* a second daemon on the same state directory: refused by pid,
	 * before it listens anywhere */
	ck_assert_int_eq(start_detached(out, sizeof(out), "state", port + 1),
	    1);
	snprintf(logf, sizeof(logf), "another blocktraind (pid %ld) runs on "
	    "the state directory state", (long)pid);
	ck_assert_msg(strstr(out, logf) != NULL, "%s", out);
	ck_assert_int_eq(tu_wait_port(port + 1, 0, 0.2), 0);
	/* the training peer list as a pipeline's: the daemon answers in
	 * HTTP, and generate says what it is */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "cd '%s' && '%s' "
	    "generate --peers peers ' The '", dir, tu_shardmeter()), 1);
	ck_assert_msg(strstr(out, "answered in HTTP") != NULL &&
	    strstr(out, "it is a training daemon (blocktraind without -S)") !=
	    NULL, "%s", out);
	/* a clean exit takes the pid file away */
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	ck_assert_msg(gone(pidf, 30), "%s stayed after SIGTERM", pidf);
}
END_TEST

START_TEST(test_detached_fails)
{
	char out[8192];
	int fd;

	write_run();
	fd = hold_port(port);
	/* what went wrong after detaching comes back to the shell */
	ck_assert_int_eq(start_detached(out, sizeof(out), "state", port), 1);
	close(fd);
	ck_assert_msg(strstr(out, "did not start; from state/blocktraind.log")
	    != NULL && strstr(out, "address already in use") != NULL, "%s",
	    out);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "grep -q 'address already in "
	    "use' '%s/state/blocktraind.log'", dir), 0);
}
END_TEST

START_TEST(test_supervised)
{
	char log[320], pidf[320], logf[320], listen[32], conf[300];
	char peers[300], spec[300], state[300];
	const char *argv[] = { "blocktraind", "-c", conf, "-l", listen, "-b",
	    "1", "-s", state, "-p", peers, "-r", spec, "-D", "cpu", "-t", "1",
	    NULL };
	pid_t pid;
	int fd;

	write_run();
	snprintf(log, sizeof(log), "%s/stderr", dir);
	snprintf(pidf, sizeof(pidf), "%s/state/blocktraind.pid", dir);
	snprintf(logf, sizeof(logf), "%s/state/blocktraind.log", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	/* as systemd starts a unit: INVOCATION_ID, stdin not a terminal,
	 * no -f */
	if ((pid = fork()) == 0) {
		setenv("INVOCATION_ID", "0123456789abcdef", 1);
		unsetenv("NOTIFY_SOCKET");
		unsetenv("JOURNAL_STREAM");
		if ((fd = open("/dev/null", O_RDONLY)) >= 0)
			dup2(fd, STDIN_FILENO);
		if ((fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644)) >= 0)
			dup2(fd, STDERR_FILENO);
		execv(tu_blocktraind(), (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	ck_assert_msg(tu_wait_port(port, pid, 30), "see %s", log);
	/* still our child: it stayed in the foreground */
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	ck_assert_int_eq(pid_in(pidf), pid);
	ck_assert_int_ne(access(logf, F_OK), 0);
	/* the port opens a little before the line is logged (the client,
	 * the probe and the rounds start in between) */
	{
		double t0 = kn_now();

		while (tu_run_cmd(NULL, 0, "grep -q 'listening on' '%s'",
		    log) != 0 && kn_now() - t0 < 30)
			usleep(100000);
	}
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "grep -q 'listening on' '%s'",
	    log), 0);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 30), 0);
	ck_assert_int_ne(access(pidf, F_OK), 0);
}
END_TEST

/* A SIGHUP that comes while the daemon starts, before its handler is
 * set (an operator who signals every daemon of a list just after adding
 * one), is held until then, not SIGHUP's default end of the process. */
START_TEST(test_early_hup)
{
	char log[320], listen[32], conf[300], peers[300], spec[300];
	char state[300];
	const char *argv[] = { "blocktraind", "-f", "-c", conf, "-l", listen,
	    "-b", "1", "-s", state, "-p", peers, "-r", spec, "-D", "cpu", "-t",
	    "1", NULL };
	pid_t pid;
	int fd, i;

	write_run();
	snprintf(log, sizeof(log), "%s/stderr-hup", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	if ((pid = fork()) == 0) {
		if ((fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644)) >= 0)
			dup2(fd, STDERR_FILENO);
		execv(tu_blocktraind(), (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_gt(pid, 0);
	/* its first line (the backend, before the node starts), then a few
	 * signals over the next milliseconds: before main nothing can hold
	 * them, so the test waits for main to be under way */
	for (i = 0; i < 3000 && tu_run_cmd(NULL, 0, "test -s '%s'", log) != 0;
	    i++)
		usleep(1000);
	for (i = 0; i < 5; i++) {
		kill(pid, SIGHUP);
		usleep(2000);
	}
	/* up, with its handlers set: the line after the listener's */
	{
		double t0 = kn_now();

		while (tu_run_cmd(NULL, 0, "grep -q 'listening on' '%s'",
		    log) != 0 && waitpid(pid, NULL, WNOHANG) == 0 &&
		    kn_now() - t0 < 30)
			usleep(20000);
	}
	ck_assert_msg(kill(pid, 0) == 0 && tu_run_cmd(NULL, 0,
	    "grep -q 'listening on' '%s'", log) == 0, "the daemon did not "
	    "survive an early SIGHUP: see %s", log);
	usleep(200000);
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 30), 0);
}
END_TEST

START_TEST(test_pipeline_port_held)
{
	char out[8192], want[128];
	int fd;

	tu_write_file(dir, "serve.conf", "insecure = yes\nmetrics_listen = "
	    "off\n");
	snprintf(out, sizeof(out), "shape width=32 heads=2 layers=1 window=32 "
	    "blocks=1 seed=1\n127.0.0.1:%d 1\n", port);
	tu_write_file(dir, "hosts", out);
	fd = hold_port(port);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "cd '%s' && '%s' -S -f "
	    "-c serve.conf -L 127.0.0.1:%d -P hosts -s serve -D cpu -t 1 "
	    "< /dev/null", dir, tu_blocktraind(), port), 1);
	close(fd);
	snprintf(want, sizeof(want), "cannot listen on 127.0.0.1:%d: address "
	    "already in use", port);
	ck_assert_msg(strstr(out, want) != NULL, "%s", out);
}
END_TEST

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_startup");
	port = tu_port_base(2);
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

int
main(void)
{
	Suite *s = suite_create("startup");
	TCase *tc = tcase_create("start-up");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_detached);
	tcase_add_test(tc, test_detached_fails);
	tcase_add_test(tc, test_supervised);
	tcase_add_test(tc, test_early_hup);
	tcase_add_test(tc, test_pipeline_port_held);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
