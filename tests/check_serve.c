/* The inference pipeline end to end: three blocktraind -S on loopback
 * (with WAN relays between them where a test needs time to act), real
 * sockets over mutual TLS (each host its own identity, the test a listed
 * client), a model trained for the test.  Output against one process in
 * both modes, a host killed in the middle of a request, bad frames, 64
 * clients at once with memory back to idle afterwards, and the pipeline's
 * half of the handshake matrix: who may send which frames where, an open
 * entry's limits, SIGHUP, and the insecure ring. */
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

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/pipeline/pipeline_client.h"
#include "daemon/net/tls.h"
#include "daemon/blocktrain/train.h"
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
static tls_ctx *operator_tls;   /* the test's own identity, a client line */
/* the spec the hosts read, in dir: run.conf, or a copy with another
 * [generate] decode (the same run id) */
static const char *host_spec = "run.conf";

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
	/* each host its own state directory: its identity beside the run's
	 * checkpoints */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "for i in 0 1 2; do mkdir -p "
	    "%s/host$i && ln -sf %s/run/*.ckpt %s/host$i/ || exit 1; done", dir,
	    dir, dir), 0);
	tu_trust_init(dir);
	{
		char err[KN_ERR_LEN];

		ck_assert_msg(tls_ctx_new(&operator_tls, tu_client_dir(), err) ==
		    0, "%s", err);
	}
	base_port = tu_port_base(100 + HOSTS + 1);   /* relays at + 100 */
	snprintf(entry, sizeof(entry), "127.0.0.1:%d", base_port);
}

static void
cleanup_once(void)
{
	tls_ctx_free(operator_tls);
	tu_remove_dir(dir);
}

/* A host's address, in buf. */
static const char *
host_addr(char *buf, size_t len, int port)
{
	snprintf(buf, len, "127.0.0.1:%d", port);
	return buf;
}

/* One request to the host on port as the test's operator, over TLS
 * pinned to that host's id when the ring has ids. */
static int
ask(int port, const pc_request *r, pc_result *res, int timeout_ms, char *err)
{
	char addr[32];
	const uint8_t *pin = tu_port_pin(port);

	return pc_generate(host_addr(addr, sizeof(addr), port), pin ?
	    operator_tls : NULL, pin, r, res, timeout_ms, err);
}

/* A connection to the entry as the test's operator. */
static int
open_entry(pc_conn **c, char *err)
{
	const uint8_t *pin = tu_port_pin(base_port);

	return pc_connect(c, entry, pin ? operator_tls : NULL, pin, 2000, err);
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
	snprintf(ckpt, sizeof(ckpt), "%s/host%d", dir, i);
	snprintf(spec, sizeof(spec), "%s/%s", dir, host_spec);
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
		if (ask(base_port, &r, &res, 2000, err) == 0 && res.ok)
			ok = 1;
		else
			usleep(100000);
		pc_result_clear(&res);
	}
	ck_assert_msg(ok, "the pipeline did not come up in %.0f s", limit);
}

/* What write_hosts leaves out. */
enum { WITHOUT_CLIENT = 1, WITHOUT_IDS = 2 };

/* The host list: the hosts with their ids (each pinned for ask), and
 * the test's operator as a client, less what flags say. */
static void
write_hosts(int flags)
{
	char text[1024] = "# traversal order\n", state[128];
	size_t used;
	int i;

	for (i = 0; i < HOSTS; i++) {
		snprintf(state, sizeof(state), "%s/host%d", dir, i);
		used = strlen(text);
		if (flags & WITHOUT_IDS)
			snprintf(text + used, sizeof(text) - used, "127.0.0.1:%d "
			    "%d\n", base_port + i, HOSTS - i);
		else
			tu_peer_line(text, sizeof(text), base_port + i, HOSTS - i,
			    state);
	}
	if (!(flags & (WITHOUT_CLIENT | WITHOUT_IDS)))
		tu_client_line(text, sizeof(text));
	tu_write_file(dir, "hosts", text);
}

/* The ring, its host list as write_hosts(flags) makes it, with more
 * configuration lines after the usual ones. */
static void
start_ring_conf(int relayed, double delay_ms, int flags, const char *more)
{
	char conf[512];
	int i;

	write_hosts(flags);
	/* the 64 clients of one test all come from 127.0.0.1, all the
	 * test's operator */
	snprintf(conf, sizeof(conf), "pipeline_timeout_ms = 3000\n"
	    "pipeline_idle_s = 5\npipeline_batch = 8\n"
	    "max_connections_per_addr = 128\n%s%s", more, strstr(more,
	    "max_connections_per_client") ? "" :
	    "max_connections_per_client = 128\n");
	tu_write_file(dir, "serve.conf", conf);
	for (i = 0; i < HOSTS; i++) {
		if (relayed)
			start_relay(i, delay_ms);
		start_host(i, relayed);
	}
	wait_ring(20);
}

static void
start_ring(int relayed, double delay_ms)
{
	start_ring_conf(relayed, delay_ms, 0, "");
}

static void
setup(void)
{
	memset(host_pid, 0, sizeof(host_pid));
	memset(relay_pid, 0, sizeof(relay_pid));
	signal(SIGPIPE, SIG_IGN);
	host_spec = "run.conf";
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

/* What one process gives for the same request (shardmeter generate)
 * with the spec file spec in dir and decoder dec (1 + its index in
 * pr_decoders, --decode; 0 none named): the output bytes, read as hex
 * (a byte may be NUL), then a NUL; their count. */
static size_t
single_process_by(const char *spec, int dec, pl_mode mode,
    const char *prompt, int length, uint64_t seed, char *out, size_t outlen)
{
	char raw[16384], decode[48] = "";
	size_t n, plen = strlen(prompt);

	if (dec > 0)
		snprintf(decode, sizeof(decode), "--decode %s",
		    pr_decoders[dec - 1]);
	ck_assert_int_eq(tu_run_cmd(raw, sizeof(raw), "%s generate --spec "
	    "%s/%s --dir %s/run --mode %s --length %d --steps 24 "
	    "--temperature 0.9 --seed %llu %s '%s' 2>/dev/null | od -An -v "
	    "-tx1", tool, dir, spec, dir, pl_mode_name(mode), length,
	    (unsigned long long)seed, decode, prompt), 0);
	/* the prompt, the output, a newline */
	n = tu_od_bytes(raw, plen, (unsigned char *)out, outlen);
	ck_assert_uint_gt(n, plen);
	ck_assert_uint_lt(n - plen - 1, outlen);
	out[n - plen - 1] = '\0';
	return n - plen - 1;
}

static void
single_process(pl_mode mode, const char *prompt, int length, uint64_t seed,
    char *out, size_t outlen)
{
	single_process_by("run.conf", 0, mode, prompt, length, seed, out,
	    outlen);
}

/* The ring's answer to a request by decoder dec (0: none named) against
 * the one-process output of the spec file spec with decoder pdec; the
 * output into out (may be NULL; length + 1 bytes). */
static void
check_same_as(int dec, const char *spec, int pdec, pl_mode mode,
    const char *prompt, int length, uint64_t seed, char *out)
{
	pc_request r = request_for(mode, prompt, length, seed);
	pc_result res;
	char err[KN_ERR_LEN], expect[256];

	r.decode = dec;
	ck_assert_uint_eq(single_process_by(spec, pdec, mode, prompt, length,
	    seed, expect, sizeof(expect)), (size_t)length);
	ck_assert_msg(ask(base_port, &r, &res, 10000, err) == 0, "%s", err);
	ck_assert_msg(res.ok, "%s: %s", pl_mode_name(mode), res.error);
	ck_assert_uint_eq(res.len, (size_t)length);
	ck_assert_msg(memcmp(res.output, expect, (size_t)length) == 0,
	    "%s seed %llu decoder %d: pipeline and one process differ",
	    pl_mode_name(mode), (unsigned long long)seed, dec);
	ck_assert_int_eq(res.traversals, mode == PL_MODE_AR ? length : 1);
	if (out != NULL)
		memcpy(out, expect, (size_t)length + 1);
	pc_result_clear(&res);
}

static void
check_same(pl_mode mode, const char *prompt, int length, uint64_t seed)
{
	check_same_as(0, "run.conf", 0, mode, prompt, length, seed, NULL);
}

/* The number of decoders. */
static int
decoders(void)
{
	int n;

	for (n = 0; pr_decoders[n] != NULL; n++)
		;
	ck_assert_int_le(n, 8);
	return n;
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

/* Every decoder named in the request gives, through the three hosts,
 * what shardmeter generate --decode gives in one process, in one
 * traversal; the decoders are not all one. */
START_TEST(test_decoders_same_as_one_process)
{
	char out[8][WINDOW + 1];
	int d, n = decoders(), differ = 0;
	uint64_t seed;

	start_ring(0, 0);
	for (seed = 1; seed <= 3; seed++) {
		for (d = 0; d < n; d++)
			check_same_as(d + 1, "run.conf", d + 1, PL_MODE_BT, "The ",
			    20, seed, out[d]);
		for (d = 1; d < n; d++)
			differ += memcmp(out[d], out[0], 20) != 0;
	}
	ck_assert_msg(differ > 0, "every decoder gives random's bytes");
	for (d = 0; d < n; d++)
		check_same_as(d + 1, "run.conf", d + 1, PL_MODE_BT, "", WINDOW,
		    7, NULL);
}
END_TEST

/* A run whose spec says [generate] decode = confidence: a request that
 * names no decoder is decoded by confidence, as one process decodes it
 * with --decode confidence or with that spec and no --decode; one that
 * names random is decoded at random all the same. */
START_TEST(test_spec_default_decoder)
{
	char conf[2][WINDOW + 1], rnd[WINDOW + 1];
	int differ = 0;
	bt_decode c;
	uint64_t seed;

	ck_assert_int_eq(bt_decode_parse("confidence", &c), 0);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "cp %s/run.conf %s/conf.conf && "
	    "printf '[generate]\\ndecode = confidence\\n' >> %s/conf.conf",
	    dir, dir, dir), 0);
	host_spec = "conf.conf";
	start_ring(0, 0);
	for (seed = 1; seed <= 3; seed++) {
		check_same_as(0, "run.conf", 1 + (int)c, PL_MODE_BT, "The ", 20,
		    seed, conf[0]);
		check_same_as(0, "conf.conf", 0, PL_MODE_BT, "The ", 20, seed,
		    conf[1]);
		ck_assert_mem_eq(conf[0], conf[1], 20);
		check_same_as(1, "run.conf", 1, PL_MODE_BT, "The ", 20, seed,
		    rnd);
		differ += memcmp(rnd, conf[0], 20) != 0;
	}
	ck_assert_msg(differ > 0, "confidence gives random's bytes");
	/* the causal LM is no decoder's */
	check_same_as(0, "conf.conf", 0, PL_MODE_AR, "The ", 20, 1, NULL);
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
	ck_assert_int_eq(open_entry(&c, err), 0);
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
	ck_assert_int_eq(ask(base_port, &r, &res, 10000, err), 0);
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
	ck_assert_int_eq(open_entry(&c, err), 0);
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

/* A connection to the host on port for raw bytes: TLS as whoever
 * tu_act_as says, or plain when the ring has no ids. */
typedef struct {
	int fd;
	tu_tls *tls;
} raw_conn;

static raw_conn
raw_open(int port)
{
	raw_conn r = { -1, NULL };

	if (tu_port_pin(port) != NULL)
		ck_assert_ptr_nonnull(r.tls = tu_tls_connect(port));
	else
		ck_assert_int_ge(r.fd = tu_connect(port), 0);
	return r;
}

static void
raw_write(raw_conn *r, const void *data, size_t len)
{
	if (r->tls != NULL)
		ck_assert_int_eq(tu_tls_write(r->tls, data, len), 0);
	else
		ck_assert_int_eq(write(r->fd, data, len), (ssize_t)len);
}

/* The host closes the connection: a read sees its end within 5 s,
 * without a byte before it. */
static int
raw_closed_by_peer(raw_conn *r)
{
	struct timeval tv = { 5, 0 };
	char b[64];

	if (r->tls != NULL)
		return tu_tls_read(r->tls, b, sizeof(b), 5) == 0;
	setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return read(r->fd, b, sizeof(b)) == 0;
}

static void
raw_close(raw_conn *r)
{
	tu_tls_close(r->tls);
	if (r->fd >= 0)
		close(r->fd);
}

/* Bytes that must make the host on port close the connection. */
static void
raw_refused(int port, const void *data, size_t len)
{
	raw_conn r = raw_open(port);

	raw_write(&r, data, len);
	ck_assert(raw_closed_by_peer(&r));
	raw_close(&r);
}

START_TEST(test_bad_frames)
{
	pc_request r = request_for(PL_MODE_BT, "ok ", 8, 4);
	pc_result res;
	pc_conn *good;
	char err[KN_ERR_LEN], expect[64];

	pc_request inflight = request_for(PL_MODE_AR, "go ", 30, 9);
	char expect_ar[64];

	start_ring(0, 0);
	single_process(PL_MODE_BT, "ok ", 8, 4, expect, sizeof(expect));
	single_process(PL_MODE_AR, "go ", 30, 9, expect_ar, sizeof(expect_ar));
	ck_assert_int_eq(open_entry(&good, err), 0);
	/* a request in flight while the bad frames arrive, from a listed
	 * client over TLS: the frame reader's own checks */
	ck_assert_int_eq(pc_send(good, &inflight, NULL, err), 0);
	/* oversized: closed on the header alone */
	raw_refused(base_port, "\x7f\xff\xff\xff", 4);
	/* malformed body */
	raw_refused(base_port, "\0\0\0\x05hello", 9);
	/* a zero-length frame */
	raw_refused(base_port, "\0\0\0\0", 4);
	/* truncated: the client goes in the middle of a frame */
	{
		raw_conn rc = raw_open(base_port);

		raw_write(&rc, "\0\0\0\x64" "abc", 7);
		raw_close(&rc);
	}
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
		r = request_for(PL_MODE_BT, "ok ", 8, 4);
		ck_assert_int_eq(ask(base_port + 1, &r, &res, 5000, err), 0);
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

/* The handshake matrix ------------------------------------------------- */

/* Whether the log of host i says text within 2 s. */
static int
log_has(int i, const char *text)
{
	char path[128], out[65536];
	double t0 = kn_now();

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	do {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;

		if (f != NULL)
			fclose(f);
		out[n] = '\0';
		if (strstr(out, text) != NULL)
			return 1;
		usleep(100000);
	} while (kn_now() - t0 < 2);
	return 0;
}

/* A well-formed frame of type t (a request, or a traversal for block
 * 2), encoded with its length; the caller frees it. */
static char *
frame_bytes(pl_type t, size_t *len)
{
	static unsigned char data[WINDOW], mask[WINDOW];
	pl_frame f = { .type = t, .id = 77, .steps = 24, .temperature = 0.9,
	    .seed = 1 };
	char err[KN_ERR_LEN], *buf;

	memset(mask, 1, sizeof(mask));
	if (t == PL_BT) {
		f.end = WINDOW;
		f.block = 2;
		f.data = data;
		f.data_len = f.mask_len = WINDOW;
		f.mask = mask;
	} else {
		f.mode = PL_MODE_BT;
		f.length = 4;
		f.data = (unsigned char *)"a";
		f.data_len = 1;
	}
	ck_assert_int_eq(pl_frame_encode(&f, &buf, len, err), 0);
	return buf;
}

/* A key of no line of the host list, made once. */
static tls_ctx *
stranger(void)
{
	char path[128], err[KN_ERR_LEN];
	tls_ctx *ctx;
	int rc;

	snprintf(path, sizeof(path), "%s/stranger", dir);
	rc = id_create(path, 0, err);
	ck_assert_msg(rc == 0 || rc == ID_EEXIST, "%s", err);
	ck_assert_msg(tls_ctx_new(&ctx, path, err) == 0, "%s", err);
	return ctx;
}

/* Who may send what where: a listed client is answered; an unlisted
 * key, plain TCP, a listed host that is not the previous one sending a
 * traversal to an inner host, the previous host sending a request and a
 * client sending a traversal are all refused; and none of them changes
 * what the listed client gets. */
START_TEST(test_handshake_matrix)
{
	pc_request r = request_for(PL_MODE_BT, "Hs ", 8, 5);
	pc_result res;
	tls_ctx *other = stranger();
	char err[KN_ERR_LEN], host2[128], *bt, *gen;
	size_t bt_len, gen_len;

	start_ring(0, 0);
	check_same(PL_MODE_BT, "Hs ", 8, 5);
	/* a key the list does not name: refused at the handshake */
	ck_assert_int_ne(pc_generate(entry, other, tu_port_pin(base_port), &r,
	    &res, 5000, err), 0);
	pc_result_clear(&res);
	ck_assert_msg(log_has(0, "is not in the peer list"), "the entry did "
	    "not log the unlisted key");
	/* plain TCP: not a TLS hello */
	ck_assert_int_ne(pc_generate(entry, NULL, NULL, &r, &res, 5000, err),
	    0);
	pc_result_clear(&res);
	/* host 3 is listed, but host 2's previous host is the entry: its
	 * traversal is refused; and as the entry's previous host it may
	 * bring the ring's frames there, but not a request */
	bt = frame_bytes(PL_BT, &bt_len);
	gen = frame_bytes(PL_GEN, &gen_len);
	snprintf(host2, sizeof(host2), "%s/host2", dir);
	tu_act_as(host2);
	raw_refused(base_port + 1, bt, bt_len);
	raw_refused(base_port, gen, gen_len);
	/* a listed client sends requests, never a traversal */
	tu_act_as(NULL);
	raw_refused(base_port + 1, bt, bt_len);
	free(bt);
	free(gen);
	ck_assert(log_has(1, "refused a bt frame from a host that is not the "
	    "previous one"));
	ck_assert(log_has(1, "refused a bt frame from a listed client"));
	ck_assert(log_has(0, "refused a gen frame from the previous host"));
	/* nothing changed */
	check_same(PL_MODE_BT, "Hs ", 8, 5);
	check_same(PL_MODE_AR, "Hs ", 8, 5);
	ck_assert_int_eq(kill(host_pid[1], 0), 0);
	tls_ctx_free(other);
}
END_TEST

/* pipeline_open_entry: any key may ask the entry, within its limits
 * (one request in flight, 1 KiB/s here); listed clients have none, and
 * the inner hosts stay closed to it. */
START_TEST(test_open_entry)
{
	pc_request r = request_for(PL_MODE_AR, "Op ", 20, 6);
	pc_result res;
	pc_conn *c;
	tls_ctx *other = stranger();
	char err[KN_ERR_LEN], addr[32];
	int i, ok = 0, busy = 0;
	double t0;

	start_ring_conf(0, 0, 0, "pipeline_open_entry = yes\n"
	    "pipeline_client_requests = 1\npipeline_client_rate = 1024\n");
	ck_assert_msg(pc_connect(&c, entry, other, tu_port_pin(base_port),
	    2000, err) == 0, "%s", err);
	/* 40 requests of about 90 bytes: over 2 s at 1 KiB/s after the
	 * first second's worth */
	t0 = kn_now();
	for (i = 0; i < 40; i++)
		ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	for (i = 0; i < 40; i++) {
		ck_assert_msg(pc_recv(c, &res, 20000, err) == 0, "%s", err);
		ok += res.ok;
		busy += !res.ok && strstr(res.error, "too many requests") != NULL;
		pc_result_clear(&res);
	}
	ck_assert_int_ge(ok, 1);
	ck_assert_int_eq(ok + busy, 40);
	ck_assert_msg(kn_now() - t0 > 1.5, "read at %.0f bytes/s", 40 * 90 /
	    (kn_now() - t0));
	pc_close(c);
	/* a listed client: both in flight at once */
	ck_assert_int_eq(open_entry(&c, err), 0);
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(pc_recv(c, &res, 10000, err), 0);
		ck_assert_msg(res.ok, "%s", res.error);
		pc_result_clear(&res);
	}
	pc_close(c);
	/* an inner host is not the entry, so not open */
	ck_assert_int_ne(pc_generate(host_addr(addr, sizeof(addr),
	    base_port + 1), other, tu_port_pin(base_port + 1), &r, &res, 5000,
	    err), 0);
	pc_result_clear(&res);
	check_same(PL_MODE_AR, "Op ", 20, 6);
	tls_ctx_free(other);
}
END_TEST

/* SIGHUP: the entry reads the host list again; the client line gone,
 * its connection is cut off and a new one refused; back, it is let in
 * again, and the ring never noticed. */
START_TEST(test_sighup)
{
	pc_request r = request_for(PL_MODE_BT, "Hu ", 8, 7);
	pc_result res;
	pc_conn *c;
	char err[KN_ERR_LEN];

	start_ring(0, 0);
	ck_assert_int_eq(open_entry(&c, err), 0);
	ck_assert_int_eq(pc_send(c, &r, NULL, err), 0);
	ck_assert_int_eq(pc_recv(c, &res, 10000, err), 0);
	ck_assert(res.ok);
	pc_result_clear(&res);
	write_hosts(WITHOUT_CLIENT);
	ck_assert_int_eq(kill(host_pid[0], SIGHUP), 0);
	ck_assert(log_has(0, "cut off 1 connection"));
	ck_assert_int_ne(pc_recv(c, &res, 5000, err), 0);
	pc_close(c);
	ck_assert_int_ne(ask(base_port, &r, &res, 5000, err), 0);
	pc_result_clear(&res);
	write_hosts(0);
	ck_assert_int_eq(kill(host_pid[0], SIGHUP), 0);
	wait_ring(10);
	check_same(PL_MODE_BT, "Hu ", 8, 7);
}
END_TEST

/* insecure = yes on loopback: plain TCP, a list without ids, the same
 * outputs. */
START_TEST(test_insecure_ring)
{
	start_ring_conf(0, 0, WITHOUT_IDS, "insecure = yes\n");
	check_same(PL_MODE_BT, "In ", 10, 8);
	check_same(PL_MODE_AR, "In ", 10, 8);
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
	int decode;             /* bt: 1 + the decoder's index, 0 none */
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

	r.decode = cl->decode;

	if (ask(base_port, &r, &res, 60000, err) != 0)
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
	bt_decode dec;
	int i, b, k;

	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	/* for the clients that name no decoder: the run's default */
	ck_assert_int_eq(bt_decode_parse(spec.decode, &dec), 0);
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
				    24, b, seq, 3, 0.9f, cl[i].seed, cl[i].decode > 0 ?
				    (bt_decode)(cl[i].decode - 1) : dec, err), 0);
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
		/* the decoders mixed in the hosts' batches, and none named
		 * (the run's default) */
		cl[i].decode = cl[i].mode == PL_MODE_BT ? i / 2 % (decoders() +
		    1) : 0;
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

#define FLOOD 40

/* The pipeline port's defences (issue 35): connections from other
 * addresses that never finish a TLS handshake, idle or sending its first
 * bytes slowly, fill every place; a listed client is served all the
 * same, in the place of the oldest of them.  And a listed client's own
 * connections are held to its identity's quota. */
START_TEST(test_flood_entry)
{
	pc_request r = request_for(PL_MODE_BT, "a", 4, 1);
	pc_result res;
	char err[KN_ERR_LEN], buf[64];
	tu_tls *own[12];
	int fd[FLOOD], i, held = 0;

	start_ring_conf(0, 0, 0, "max_connections = 16\n"
	    "max_connections_per_client = 4\n");
	for (i = 0; i < FLOOD; i++) {
		fd[i] = tu_connect_from(base_port, 2 + i % 8);
		/* every fourth: a record header, never the rest */
		if (fd[i] >= 0 && i % 4 == 0)
			(void)send(fd[i], "\x16\x03\x01", 3, MSG_NOSIGNAL);
	}
	ck_assert_msg(ask(base_port, &r, &res, 3000, err) == 0, "%s", err);
	ck_assert_msg(res.ok, "%s", res.error);
	pc_result_clear(&res);

	for (i = 0; i < 12; i++) {
		own[i] = tu_tls_connect(base_port);
		/* nothing within the wait: held, not closed */
		if (own[i] != NULL && tu_tls_read(own[i], buf, sizeof(buf),
		    0.3) < 0)
			held++;
	}
	fprintf(stderr, "# the operator holds %d of 12 connections (quota "
	    "4)\n", held);
	ck_assert_int_le(held, 4);
	for (i = 0; i < 12; i++)
		tu_tls_close(own[i]);
	for (i = 0; i < FLOOD; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	wait_ring(10);
}
END_TEST

/* A reconnect flood: 64 connections from 8 addresses, each closed and
 * made again in turn, until stop or 3000 of them. */
struct flood {
	int port;
	volatile int stop;
	int made;
};

static void *
flood_run(void *arg)
{
	struct flood *f = arg;
	int fd[64], i;

	for (i = 0; i < 64; i++)
		fd[i] = -1;
	for (i = 0; !f->stop && f->made < 3000; i = (i + 1) % 64) {
		if (fd[i] >= 0)
			close(fd[i]);
		if ((fd[i] = tu_connect_from(f->port, 2 + i % 8)) >= 0)
			f->made++;
		else
			usleep(1000);
	}
	for (i = 0; i < 64; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	return NULL;
}

/* While strangers from 8 addresses reconnect as fast as they can, a
 * listed client's requests are served: each new stranger closes the
 * oldest handshake of the address holding the most, never the client's
 * one. */
START_TEST(test_reconnect_flood)
{
	pc_request r = request_for(PL_MODE_BT, "a", 4, 1);
	struct flood f = { base_port, 0, 0 };
	pc_result res;
	char err[KN_ERR_LEN];
	pthread_t th;
	int i, served = 0;

	start_ring_conf(0, 0, 0, "max_connections = 16\n");
	f.port = base_port;
	ck_assert_int_eq(pthread_create(&th, NULL, flood_run, &f), 0);
	for (i = 0; f.made < 64 && i < 500; i++)
		usleep(10000);
	for (i = 0; i < 10; i++) {
		if (ask(base_port, &r, &res, 3000, err) == 0 && res.ok)
			served++;
		pc_result_clear(&res);
	}
	f.stop = 1;
	pthread_join(th, NULL);
	fprintf(stderr, "# %d of 10 requests served during a flood of %d "
	    "connections\n", served, f.made);
	ck_assert_int_ge(served, 8);
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
	tcase_add_test(tc, test_decoders_same_as_one_process);
	tcase_add_test(tc, test_spec_default_decoder);
	tcase_add_test(tc, test_kill_middle_host);
	tcase_add_test(tc, test_bad_frames);
	tcase_add_test(tc, test_stalled_host_times_out);
	tcase_add_test(tc, test_many_on_one_connection);
	tcase_add_test(tc, test_64_clients);
	tcase_add_test(tc, test_handshake_matrix);
	tcase_add_test(tc, test_open_entry);
	tcase_add_test(tc, test_sighup);
	tcase_add_test(tc, test_insecure_ring);
	suite_add_tcase(s, tc);
	tc = tcase_create("limits");
	tcase_add_unchecked_fixture(tc, train_once, cleanup_once);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_flood_entry);
	tcase_add_test(tc, test_reconnect_flood);
	suite_add_tcase(s, tc);
	rc = tu_run_suite(s);
	kn_pool_shutdown();
	return rc;
}
