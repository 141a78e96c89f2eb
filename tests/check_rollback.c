/* Last good, roll back (DESIGN section 5): a checkpoint is written only
 * after a health check, the previous good one is kept beside it, a daemon
 * whose newest checkpoint is unhealthy starts from the one before (or
 * from scratch) instead of exiting, and a poisoned average rolls back to
 * the last good checkpoint instead of ending the daemon. */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/blocktrain/train.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "proto/update.h"
#include "tests/testutil.h"

static char dir[64];
static pr_spec spec;
static char run_id[PR_RUN_ID_LEN];
static pid_t pid;

static void
setup(void)
{
	char path[128], err[PR_ERR_LEN];

	tu_temp_dir(dir, sizeof(dir), "check_rollback");
	tu_trust_init(dir);
	tu_write_run(dir, 1, 200, 50, 1);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	pid = 0;
}

static void
teardown(void)
{
	tu_stop(&pid, SIGKILL, 15);
	tu_remove_dir(dir);
}

static void
opts(tr_opts *o, const char *state)
{
	memset(o, 0, sizeof(*o));
	o->spec = &spec;
	o->run_id = run_id;
	o->dir = state;
	o->kind = BT_BLOCK;
	o->block = 1;
	o->steps = spec.steps;
	o->be = kn_cpu_backend();
}

/* The whole of a file, for comparing; the caller frees it. */
static char *
slurp(const char *path, size_t *len)
{
	char *buf, err[PR_ERR_LEN];

	ck_assert_msg(pr_ckpt_read_file(path, (size_t)1 << 30, &buf, len,
	    err) == 0, "%s", err);
	return buf;
}

static void
assert_same_file(const char *path, const char *buf, size_t len)
{
	size_t now_len;
	char *now = slurp(path, &now_len);

	ck_assert_msg(now_len == len && memcmp(now, buf, len) == 0,
	    "%s changed", path);
	free(now);
}

/* Trains n steps of t. */
static void
steps(tr_trainer *t, int n)
{
	char err[KN_ERR_LEN];
	float loss;

	while (n-- > 0)
		ck_assert_msg(tr_trainer_step(t, &loss, err) == 0, "%s", err);
}

/* Every weight of t scaled by f (finite, huge), as a poisoned average
 * leaves them. */
static void
poison(tr_trainer *t, float f)
{
	kn_model *m = tr_trainer_model(t);
	size_t i, n = kn_model_num_params(m);
	float *x = malloc(n * sizeof(float));
	char err[KN_ERR_LEN];

	ck_assert_ptr_nonnull(x);
	kn_model_get_params(m, x);
	for (i = 0; i < n; i++)
		x[i] = x[i] >= 0 ? f : -f;
	ck_assert_msg(kn_model_set_params(m, x, err) == 0, "%s", err);
	free(x);
}

/* A trainer in dir/k at step 5 with its checkpoint, and the one of step
 * 3 kept as the previous good one. */
static tr_trainer *
trained(char *state, size_t len)
{
	char err[KN_ERR_LEN];
	tr_trainer *t;
	tr_opts o;

	snprintf(state, len, "%s/k", dir);
	opts(&o, state);
	ck_assert_msg(tr_trainer_open(&t, &o, err) == 0, "%s", err);
	steps(t, 3);
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	steps(t, 2);
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	return t;
}

START_TEST(test_unhealthy_not_written)
{
	char state[128], path[192], ppath[192], opath[192], err[KN_ERR_LEN];
	char *ck, *pk, *op;
	size_t cl, pl, ol;
	pr_ckpt_meta meta;
	int64_t step, round;
	tr_trainer *t = trained(state, sizeof(state));

	snprintf(path, sizeof(path), "%s/block-1.ckpt", state);
	snprintf(ppath, sizeof(ppath), "%s/block-1.ckpt.prev", state);
	snprintf(opath, sizeof(opath), "%s/block-1.optim", state);
	ck = slurp(path, &cl);
	pk = slurp(ppath, &pl);
	op = slurp(opath, &ol);
	ck_assert_int_eq(pr_ckpt_peek(ck, cl, &meta, err), 0);
	ck_assert_int_eq(meta.step, 5);
	ck_assert_int_eq(pr_ckpt_peek(pk, pl, &meta, err), 0);
	ck_assert_int_eq(meta.step, 3);
	/* a save at the same step keeps the previous good one as it was */
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	assert_same_file(ppath, pk, pl);

	/* what the averaged 1e30 of the issue left: finite, and written to
	 * disk before; now refused, and nothing on disk changes */
	steps(t, 1);
	poison(t, 1e30f);
	ck_assert_int_eq(tr_trainer_health(t, err), KN_ENUM);
	ck_assert_int_eq(tr_trainer_save(t, err), KN_ENUM);
	ck_assert_msg(strstr(err, "unhealthy") != NULL, "%s", err);
	assert_same_file(path, ck, cl);
	assert_same_file(ppath, pk, pl);
	assert_same_file(opath, op, ol);

	/* what the check costs beside a step, for the note */
	{
		double t0 = kn_now(), t1, t2;

		ck_assert_int_eq(tr_trainer_restore(t, 0, &step, &round, err),
		    0);
		t1 = kn_now();
		ck_assert_int_eq(tr_trainer_health(t, err), 0);
		t2 = kn_now();
		steps(t, 5);
		fprintf(stderr, "# health check %.2f ms, a training step %.2f "
		    "ms (a restore with its check %.2f ms)\n",
		    (t2 - t1) * 1e3, (kn_now() - t2) / 5 * 1e3,
		    (t1 - t0) * 1e3);
		poison(t, 1e30f);
	}
	/* roll back: the newest, then the previous good one; the step goes
	 * on */
	ck_assert_msg(tr_trainer_restore(t, 0, &step, &round, err) == 0, "%s",
	    err);
	ck_assert_int_eq(step, 5);
	ck_assert_int_eq(tr_trainer_steps(t), 11);
	ck_assert_int_eq(tr_trainer_health(t, err), 0);
	steps(t, 1);
	ck_assert_msg(tr_trainer_restore(t, 1, &step, &round, err) == 0, "%s",
	    err);
	ck_assert_int_eq(step, 3);
	steps(t, 1);
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	/* the newest became the previous good one */
	assert_same_file(ppath, ck, cl);
	tr_trainer_close(t);
	free(ck);
	free(pk);
	free(op);
}
END_TEST

/* The newest checkpoint written with huge weights (as a poisoned round
 * left it): open resumes from the previous good one, and keeps the bad
 * one aside. */
static void
write_bad_newest(const char *state, float f, int nonfinite)
{
	char path[192], err[KN_ERR_LEN], *buf;
	kn_model_shape shape = tr_model_shape(&spec, BT_BLOCK, 1);
	pr_ckpt_meta meta = { 0 };
	const kn_tensor *tab;
	kn_model *m;
	size_t i, n, len;
	float *x;
	int count;

	ck_assert_int_eq(kn_model_create(&m, &shape, kn_cpu_backend(), 1, err),
	    0);
	n = kn_model_num_params(m);
	x = malloc(n * sizeof(float));
	ck_assert_ptr_nonnull(x);
	for (i = 0; i < n; i++)
		x[i] = i % 2 ? f : -f;
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = 1;
	snprintf(meta.kind, sizeof(meta.kind), "block");
	meta.step = 100;
	meta.round = 2;
	tab = kn_model_tensors(m, &count);
	ck_assert_msg(pr_ckpt_encode(&meta, tab, count, x, &buf, &len, err) ==
	    0, "%s", err);
	if (nonfinite) {
		/* a NaN in the payload, the hash made to match: what a bit
		 * flip on a disk that hashes nothing gives */
		size_t at = tu_find(buf, len, "payload") + strlen("payload");
		const unsigned char *p = (const unsigned char *)buf + at;
		uint32_t nan = 0x7fc00000u;
		unsigned int mdlen;
		size_t size;

		/* a model's payload is a bin32 */
		ck_assert_int_eq(p[0], 0xc6);
		size = (size_t)p[1] << 24 | (size_t)p[2] << 16 |
		    (size_t)p[3] << 8 | p[4];
		at += 5;
		memcpy(buf + at + 4 * 7, &nan, 4);
		ck_assert_int_eq(EVP_Digest(buf + at, size, (unsigned char *)buf +
		    len - 32, &mdlen, EVP_sha256(), NULL), 1);
	}
	snprintf(path, sizeof(path), "%s/block-1.ckpt", state);
	ck_assert_msg(pr_ckpt_write_file(path, buf, len, err) == 0, "%s", err);
	free(buf);
	free(x);
	kn_model_free(m);
}

START_TEST(test_open_falls_back)
{
	char state[128], path[192], err[KN_ERR_LEN];
	const char *what;
	tr_trainer *t = trained(state, sizeof(state));
	tr_opts o;

	tr_trainer_close(t);
	write_bad_newest(state, 1e30f, 0);
	opts(&o, state);
	ck_assert_msg(tr_trainer_open(&t, &o, err) == 0, "%s", err);
	/* the checkpoint of step 5 was replaced by the bad one: the
	 * previous good one is of step 3 */
	ck_assert_int_eq(tr_trainer_steps(t), 3);
	ck_assert_int_eq(tr_trainer_recovered(t, &what), 1);
	ck_assert_msg(strstr(what, "previous good") != NULL, "%s", what);
	snprintf(path, sizeof(path), "%s/block-1.ckpt.bad", state);
	ck_assert_int_eq(access(path, F_OK), 0);
	steps(t, 2);
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	tr_trainer_close(t);

	/* a NaN in the file, and no good one before it: from step 0 */
	snprintf(path, sizeof(path), "%s/block-1.ckpt.prev", state);
	ck_assert_int_eq(unlink(path), 0);
	write_bad_newest(state, 1.0f, 1);
	ck_assert_msg(tr_trainer_open(&t, &o, err) == 0, "%s", err);
	ck_assert_int_eq(tr_trainer_steps(t), 0);
	ck_assert_int_eq(tr_trainer_recovered(t, &what), 1);
	ck_assert_int_eq(tr_trainer_health(t, err), 0);
	steps(t, 1);
	tr_trainer_close(t);
}
END_TEST

/* A daemon on dir/state0 training block 1 with the peer list in
 * dir/peers. */
static void
start_daemon(int port)
{
	char listen[32], log[128], peers[128], sp[128], conf[128];
	char state[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(log, sizeof(log), "%s/log0", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(sp, sizeof(sp), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(state, sizeof(state), "%s/state0", dir);
	pid = tu_daemon_start(log, port, "-f", "-c", conf, "-l", listen, "-b",
	    "1", "-s", state, "-p", peers, "-r", sp, "-D", "cpu", "-t", "1",
	    (char *)NULL);
}

static void
write_peers(int port, int replicas)
{
	char text[2048] = "", state[128];
	int i;

	for (i = 0; i < replicas; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), port + i, 1, state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
}

static int
log_has(const char *text)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/log0", dir);
	return tu_run_cmd(NULL, 0, "grep -q -F -e '%s' '%s'", text, path) == 0;
}

/* Whether the daemon ended, and how: -1 while it runs. */
static int
exited(void)
{
	int st;

	if (pid <= 0)
		return -1;
	if (waitpid(pid, &st, WNOHANG) != pid)
		return -1;
	pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Waits up to limit seconds for the daemon's state to be done; fails at
 * once if it exits meanwhile. */
static void
wait_done(int port, double limit)
{
	double t0 = kn_now();
	int rc;

	while (kn_now() - t0 < limit) {
		ck_assert_msg((rc = exited()) < 0, "the daemon exited (%d); see "
		    "%s/log0", rc, dir);
		if (tu_status_is(port, "done"))
			return;
		usleep(100000);
	}
	ck_abort_msg("not done within %.0f s; see %s/log0", limit, dir);
}

/* A state directory holding a checkpoint with huge finite weights as its
 * newest (the issue: "exit 1, again at every restart"): the daemon starts
 * from the previous good one and trains to the end. */
START_TEST(test_daemon_refuses_unhealthy)
{
	char state[128], err[KN_ERR_LEN];
	int port = tu_port_base(1);
	tr_trainer *t;
	tr_opts o;
	json_t *j;

	snprintf(state, sizeof(state), "%s/state0", dir);
	write_peers(port, 1);
	opts(&o, state);
	ck_assert_msg(tr_trainer_open(&t, &o, err) == 0, "%s", err);
	steps(t, 3);
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	steps(t, 2);
	ck_assert_msg(tr_trainer_save(t, err) == 0, "%s", err);
	tr_trainer_close(t);
	write_bad_newest(state, 5e29f, 0);
	start_daemon(port);
	wait_done(port, 120);
	ck_assert(log_has("unhealthy checkpoint refused"));
	j = tu_status(port);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "step")),
	    spec.steps);
	json_decref(j);
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

/* The case: a listed replica's update of 1e30 everywhere is
 * averaged.  The daemon does not write it, does not exit: it rolls back
 * to its last good checkpoint and trains on to the end (or, once updates
 * are checked before averaging, refuses the update with a strike). */
START_TEST(test_poisoned_average_rolls_back)
{
	char state1[128], path[128], err[KN_ERR_LEN], *buf;
	int port = tu_port_base(2);
	kn_model_shape shape = pr_spec_block_shape(&spec, 0);
	pr_update_meta meta = { 0 };
	size_t i, count = kn_model_params_for(&shape), len;
	float *delta = malloc(count * sizeof(float));
	long long rollbacks, strikes = 0;
	double share;
	json_t *j, *e;
	tu_body b;
	long st;

	tu_write_run(dir, 1, 200, 50, 3);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_int_eq(pr_spec_load(&spec, path, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&spec, run_id, err), 0);
	write_peers(port, 2);
	start_daemon(port);
	ck_assert_ptr_nonnull(delta);
	for (i = 0; i < count; i++)
		delta[i] = 1e30f;
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = 1;
	meta.round = 0;
	meta.replica = 1;
	meta.step = 50;
	meta.enc = PR_ENC_F32;
	meta.count = count;
	ck_assert_int_eq(pr_update_encode(&meta, delta, &buf, &len, err), 0);
	free(delta);
	/* replica 1's identity, as a hostile replica of the list has it */
	snprintf(state1, sizeof(state1), "%s/state1", dir);
	tu_act_as(state1);
	st = tu_http("POST", port, "/v1/blocks/1/rounds/0/updates",
	    "Content-Type: application/x-msgpack", buf, len, &b);
	free(b.data);
	free(buf);
	tu_act_as(NULL);
	ck_assert_msg(st == 202, "the update got HTTP %ld", st);
	/* replica 1 sends nothing more: the rounds after the first go on
	 * without it once its deadline passes */
	wait_done(port, 240);
	j = tu_status(port);
	ck_assert_ptr_nonnull(j);
	rollbacks = json_integer_value(json_object_get(j, "rollbacks"));
	e = json_array_get(json_object_get(json_object_get(j, "strikes"),
	    "peers"), 0);
	if (e != NULL)
		strikes = json_integer_value(json_object_get(e, "update"));
	fprintf(stderr, "# poisoned average: %lld roll-back(s), %lld "
	    "update(s) refused\n", rollbacks, strikes);
	/* Since updates are checked and clipped before averaging, the
	 * update may also go in clipped to the norm of an honest one: then
	 * the block's share must stay where honest training takes it (a
	 * byte costs at most ln 256 = 5.55 nats unmodelled). */
	share = json_real_value(json_object_get(j, "heldout_share"));
	ck_assert_msg(rollbacks + strikes >= 1 || (log_has("round 0: "
	    "averaged 2 of 2 updates (checked; 1 clipped") && isfinite(share)
	    && share < 5.55), "neither rolled back, refused nor bounded "
	    "(share %g): see %s/log0", share, dir);
	json_decref(j);
	ck_assert(!log_has("loss is not finite") || rollbacks >= 1);
	if (rollbacks > 0) {
		char out[4096];

		snprintf(path, sizeof(path), "%s/peers", dir);
		tu_run_cmd(out, sizeof(out), "%s status --peers %s",
		    tu_shardmeter(), path);
		ck_assert_msg(strstr(out, "rolled back to its last good "
		    "checkpoint") != NULL, "%s", out);
	}
	ck_assert_int_eq(tu_stop(&pid, SIGTERM, 15), 0);
}
END_TEST

/* A run that diverges at once (a learning rate of 1e30): each
 * non-finite loss rolls back, first to the last checkpoint, then to the
 * one before; with no good one left the daemon stops with the reason,
 * having written no unhealthy checkpoint on the way. */
START_TEST(test_divergence_rolls_back)
{
	char path[128], err[KN_ERR_LEN], *buf;
	int port = tu_port_base(1), rc = -1;
	pr_ckpt_meta meta;
	double t0;
	size_t len;

	tu_write_file(dir, "run.conf", "seed = 3\n[model]\nblocks = 1\n"
	    "width = 32\nheads = 2\nlayers_per_block = 1\nwindow = 32\n"
	    "[data]\ntrain = /usr/share/common-licenses/GPL-3\n"
	    "valid = /usr/share/common-licenses/GPL-2\n"
	    "test = /usr/share/common-licenses/GPL-2\n"
	    "[optim]\nbatch = 16\nsteps = 200\nwarmup = 1\nlr = 1e30\n");
	write_peers(port, 1);
	start_daemon(port);
	for (t0 = kn_now(); (rc = exited()) < 0 && kn_now() - t0 < 60;)
		usleep(50000);
	ck_assert_int_eq(rc, 1);
	ck_assert(log_has("loss is not finite; rolled back to the last "
	    "checkpoint"));
	ck_assert(log_has("no good checkpoint left to roll back to"));
	snprintf(path, sizeof(path), "%s/state0/journal", dir);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "grep -q 'rolled back at step' "
	    "%s", path), 0);
	/* what is on disk is the first checkpoint, healthy */
	snprintf(path, sizeof(path), "%s/state0/block-1.ckpt", dir);
	buf = slurp(path, &len);
	ck_assert_int_eq(pr_ckpt_decode(buf, len, NULL, NULL, 0, NULL, &meta,
	    err), 0);
	ck_assert_int_eq(meta.step, 0);
	free(buf);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("rollback");
	TCase *tc = tcase_create("rollback");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_unhealthy_not_written);
	tcase_add_test(tc, test_open_falls_back);
	tcase_add_test(tc, test_daemon_refuses_unhealthy);
	tcase_add_test(tc, test_poisoned_average_rolls_back);
	tcase_add_test(tc, test_divergence_rolls_back);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
