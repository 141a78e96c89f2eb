/* Mirrors and bootstrap (issue 37, "a block survives the loss of its
 * only host"): which hosts mirror which block, the disk budget and the
 * check of a fetched pair as units; then real daemons on loopback: a
 * mirror holds a verified copy of another block's newest checkpoint
 * within its budget, a budget too small is refused at start, the only
 * host of a block is replaced by a new host with a new identity that
 * resumes from the mirrored step, and a mirror whose bytes do not match
 * its hash is refused and counted against it. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/peers.h"
#include "daemon/node/bootstrap.h"
#include "daemon/node/mirror.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"
#include "tests/testutil.h"

#define MAXD 4

static char dir[64];
static int base_port;
static pid_t pids[MAXD];

/* ---- units ---- */

static void
load_list(peers_list *pl, const char *text)
{
	char err[PR_ERR_LEN];

	ck_assert_msg(peers_load(pl, tu_write_file(dir, "list", text),
	    err) == 0, "%s", err);
}

static void
assert_mirrors(const peers_list *pl, int block, int mirrors, int n,
    const int *want)
{
	int out[8], got, i;

	got = mr_assign(pl, block, mirrors, out, 8);
	ck_assert_msg(got == n, "block %d: %d mirrors, not %d", block, got, n);
	for (i = 0; i < n; i++) {
		ck_assert_msg(out[i] == want[i], "block %d mirror %d: line %d, "
		    "not %d", block, i, out[i], want[i]);
		ck_assert(mr_mirrors_block(pl, out[i], block, mirrors));
		ck_assert_int_ne(pl->v[out[i]].block, block);
	}
}

START_TEST(test_assign)
{
	peers_list pl;

	/* one host a block: each block's copy on the next host */
	load_list(&pl, "h:1 1\nh:2 2\nh:3 3\n");
	assert_mirrors(&pl, 1, 1, 1, (int[]){ 1 });
	assert_mirrors(&pl, 2, 1, 1, (int[]){ 2 });
	assert_mirrors(&pl, 3, 1, 1, (int[]){ 0 });
	/* more mirrors than other hosts: every other host */
	assert_mirrors(&pl, 1, 5, 2, (int[]){ 1, 2 });
	ck_assert(!mr_mirrors_block(&pl, 0, 1, 1));
	peers_free(&pl);
	/* two replicas a block: a block's own replicas are no mirrors, and
	 * every host holds as many copies as the others */
	load_list(&pl, "h:1 1\nh:2 1\nh:3 2\nh:4 2\nh:5 3\nh:6 3\n");
	assert_mirrors(&pl, 1, 1, 1, (int[]){ 2 });
	assert_mirrors(&pl, 2, 1, 1, (int[]){ 4 });
	assert_mirrors(&pl, 3, 1, 1, (int[]){ 0 });
	assert_mirrors(&pl, 1, 2, 2, (int[]){ 2, 3 });
	assert_mirrors(&pl, 2, 2, 2, (int[]){ 4, 5 });
	assert_mirrors(&pl, 3, 2, 2, (int[]){ 0, 1 });
	peers_free(&pl);
	/* lines in any order: the same answer from the same list */
	load_list(&pl, "h:1 2\nh:2 1\nh:3 2\n");
	assert_mirrors(&pl, 1, 1, 1, (int[]){ 2 });
	assert_mirrors(&pl, 2, 1, 1, (int[]){ 1 });
	peers_free(&pl);
	/* one block: nobody to mirror it; mirrors = 0: none */
	load_list(&pl, "h:1 1\nh:2 1\n");
	assert_mirrors(&pl, 1, 1, 0, NULL);
	peers_free(&pl);
	load_list(&pl, "h:1 1\nh:2 2\n");
	assert_mirrors(&pl, 1, 0, 0, NULL);
	peers_free(&pl);
}
END_TEST

static void
load_spec(pr_spec *s, int blocks)
{
	char err[PR_ERR_LEN], path[128];

	tu_write_run(dir, blocks, 100, 50, 5);
	snprintf(path, sizeof(path), "%s/run.conf", dir);
	ck_assert_msg(pr_spec_load(s, path, err) == 0, "%s", err);
}

START_TEST(test_budget)
{
	pr_spec s;
	peers_list pl;
	kn_model_shape shape;
	uint64_t one, need;
	char err[PR_ERR_LEN];

	load_spec(&s, 3);
	shape = pr_spec_block_shape(&s, 0);
	one = mr_copy_bytes(&s, 1);
	/* the checkpoint's floats and the state's two moments, at least */
	ck_assert_uint_ge(one, 12 * kn_model_params_for(&shape));
	load_list(&pl, "h:1 1\nh:2 2\nh:3 3\n");
	/* line 0 mirrors block 3 only */
	ck_assert_int_eq(mr_budget_check(&s, &pl, 0, 1, one, &need, err), 0);
	ck_assert_uint_eq(need, one);
	ck_assert_int_eq(mr_budget_check(&s, &pl, 0, 1, one - 1, &need, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "mirror_budget"));
	ck_assert_ptr_nonnull(strstr(err, "1 block(s)"));
	/* with two mirrors a block, it mirrors two */
	ck_assert_int_eq(mr_budget_check(&s, &pl, 0, 2, 2 * one - 1, &need,
	    err), KN_EINVAL);
	ck_assert_uint_eq(need, 2 * one);
	ck_assert_int_eq(mr_budget_check(&s, &pl, 0, 2, 2 * one, NULL, err),
	    0);
	/* nothing to mirror: any budget */
	ck_assert_int_eq(mr_budget_check(&s, &pl, 0, 0, 0, &need, err), 0);
	ck_assert_uint_eq(need, 0);
	peers_free(&pl);
}
END_TEST

/* A checkpoint and an optimizer state of block 1 of s at step, round. */
static void
make_pair(const pr_spec *s, const char *run_id, int64_t step,
    int64_t optim_step, char **ckpt, size_t *clen, char **optim,
    size_t *olen)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);
	kn_tensor tab[KN_MODEL_TENSORS];
	size_t np = kn_model_params_for(&shape);
	float *params = tu_alloc_fill(np, -0.1f, 0.1f, 7);
	float *v = tu_alloc_fill(np, 0.0f, 0.1f, 8);
	pr_ckpt_meta meta = { 0 };
	char err[PR_ERR_LEN];
	int count = kn_model_table(&shape, tab, KN_MODEL_TENSORS);

	ck_assert_int_gt(count, 0);
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	meta.block = 1;
	snprintf(meta.kind, sizeof(meta.kind), "block");
	meta.step = step;
	meta.round = 0;
	ck_assert_int_eq(pr_ckpt_encode(&meta, tab, count, params, ckpt, clen,
	    err), 0);
	meta.step = optim_step;
	ck_assert_int_eq(pr_ckpt_encode_optim(&meta, np, params, v, 3, optim,
	    olen, err), 0);
	free(params);
	free(v);
}

START_TEST(test_check_pair)
{
	pr_spec s;
	char run_id[PR_RUN_ID_LEN], sha[65], err[PR_ERR_LEN];
	char *ckpt, *optim;
	size_t clen, olen;
	mr_verdict v;
	mr_claim c;
	mr_pair p;

	load_spec(&s, 2);
	ck_assert_int_eq(pr_spec_run_id(&s, run_id, err), 0);
	make_pair(&s, run_id, 300, 300, &ckpt, &clen, &optim, &olen);
	ck_assert_int_eq(pr_ckpt_sha256_hex(ckpt, clen, sha, err), 0);
	p = (mr_pair){ ckpt, clen, optim, olen };
	c = (mr_claim){ .step = 300 };
	memcpy(c.sha, sha, 65);
	ck_assert_msg(mr_check_pair(&s, run_id, 1, &c, &p, &v, err) == 0,
	    "%s", err);
	ck_assert_int_eq(v.got.step, 300);
	ck_assert_str_eq(v.sha, sha);
	ck_assert(v.optim_ok);
	/* another block's shape, another run: refused, not for the hash */
	ck_assert_int_ne(mr_check_pair(&s, run_id, 2, &c, &p, &v, err), 0);
	ck_assert(!v.hash_bad);
	ck_assert_int_ne(mr_check_pair(&s, "0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef", 1, &c, &p, &v, err), 0);
	/* a byte changed: not the bytes named */
	ckpt[clen / 2] ^= 0x40;
	ck_assert_int_ne(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	ck_assert(v.hash_bad);
	ck_assert_ptr_nonnull(strstr(err, "hash"));
	/* nor when an ETag came with them that they do not match either */
	mr_etag("\"0123456789abcdef0123456789abcdef0123456789abcdef"
	    "0123456789abcdef\"", c.etag);
	ck_assert_int_eq(strlen(c.etag), 64);
	ck_assert_int_ne(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	ck_assert(v.hash_bad);
	ckpt[clen / 2] ^= 0x40;
	/* the host trained on since it named step 200: the newer step,
	 * under the hash that came with it, is taken */
	c = (mr_claim){ .step = 200 };
	memset(c.sha, 'e', 64);
	memcpy(c.etag, sha, 65);
	ck_assert_int_eq(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	/* but not the step it named under another hash, nor an older one */
	c.step = 300;
	ck_assert_int_ne(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	ck_assert(v.hash_bad);
	c.step = 400;
	memcpy(c.sha, sha, 65);
	ck_assert_int_ne(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "older"));
	free(optim);
	free(ckpt);
	/* a state of another step is not the checkpoint's */
	make_pair(&s, run_id, 300, 400, &ckpt, &clen, &optim, &olen);
	ck_assert_int_eq(pr_ckpt_sha256_hex(ckpt, clen, sha, err), 0);
	p = (mr_pair){ ckpt, clen, optim, olen };
	c = (mr_claim){ .step = 300 };
	memcpy(c.sha, sha, 65);
	ck_assert_int_eq(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	ck_assert(!v.optim_ok);
	ck_assert_ptr_nonnull(strstr(v.optim_why, "step 400"));
	/* and none at all */
	p.optim = NULL;
	ck_assert_int_eq(mr_check_pair(&s, run_id, 1, &c, &p, &v, err), 0);
	ck_assert(!v.optim_ok);
	free(optim);
	free(ckpt);
	/* ETags as they come */
	mr_etag(NULL, c.etag);
	ck_assert_str_eq(c.etag, "");
	mr_etag("\"abc\"", c.etag);
	ck_assert_str_eq(c.etag, "");
}
END_TEST

static struct bs_claim
claim(int mirror, int64_t step, int64_t round, char hash)
{
	struct bs_claim c = { .mirror = mirror, .answered = 1, .valid = 1,
	    .step = step, .round = round };

	memset(c.sha, hash, 64);
	c.sha[64] = '\0';
	return c;
}

/* The newest step named wins; at it the majority's hash, a tie going to
 * the block's own host; hosts are asked before mirrors. */
START_TEST(test_choose)
{
	struct bs_claim c[6];
	int order[6], n;

	/* a host of the block and two mirrors at step 600: two say b */
	c[0] = claim(0, 600, 0, 'a');
	c[1] = claim(1, 600, 0, 'b');
	c[2] = claim(1, 600, 0, 'b');
	c[3] = claim(1, 500, 0, 'c');
	n = bs_choose(c, 4, 0, 1000, order);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(order[0], 1);
	ck_assert_int_eq(order[1], 2);
	/* one against one: the host's, asked first */
	c[2] = claim(1, 600, 0, 'c');
	n = bs_choose(c, 3, 0, 1000, order);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(order[0], 0);
	/* the same hash from a mirror and a host: the host first */
	c[1] = claim(1, 600, 0, 'a');
	n = bs_choose(c, 2, 0, 1000, order);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(order[0], 0);
	ck_assert_int_eq(order[1], 1);
	/* a later round of the same step is newer; a step beyond the run
	 * is no claim to take */
	c[2] = claim(1, 600, 1, 'd');
	c[3] = claim(0, 5000, 0, 'e');
	n = bs_choose(c, 4, 0, 1000, order);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(order[0], 2);
	/* only steps above what the state directory holds, never step 0 */
	ck_assert_int_eq(bs_choose(c, 3, 599, 1000, order), 1);
	ck_assert_int_eq(bs_choose(c, 3, 600, 1000, order), 0);
	c[4] = claim(0, 0, 0, 'f');
	ck_assert_int_eq(bs_choose(c + 4, 1, 0, 1000, order), 0);
	c[5] = claim(0, 700, 0, 'g');
	c[5].valid = 0;
	ck_assert_int_eq(bs_choose(c + 5, 1, 0, 1000, order), 0);
}
END_TEST

/* ---- daemons ---- */

static void
state_of(int i, char *buf, size_t len)
{
	snprintf(buf, len, "%s/state%d", dir, i);
}

/* The run: blocks of one host each, daemon i on base_port + i; extra
 * lines of daemon.conf after the usual ones. */
static void
write_run(int steps, const char *conf)
{
	char text[1024];

	tu_write_run(dir, 2, steps, 50, 5);
	snprintf(text, sizeof(text), "eval_every = 100\neval_windows = 64\n"
	    "checkpoint_every = 100\npeer_timeout_ms = 2000\n"
	    "metrics_listen = 127.0.0.1:0\n%s", conf);
	tu_write_file(dir, "daemon.conf", text);
}

/* Lines for daemons first..: daemon d serves block block_of[d]. */
static void
write_peers(int n, const int *daemon, const int *block)
{
	char text[2048] = "", state[128];
	int i;

	for (i = 0; i < n; i++) {
		state_of(daemon[i], state, sizeof(state));
		tu_peer_line(text, sizeof(text), base_port + daemon[i], block[i],
		    state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
}

static void
start(int i, int block)
{
	char listen[32], blk[8], log[128], peers[128], spec[128];
	char conf[128], state[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(blk, sizeof(blk), "%d", block);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	state_of(i, state, sizeof(state));
	pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c", conf,
	    "-l", listen, "-b", blk, "-s", state, "-p", peers, "-r", spec, "-D",
	    "cpu", "-t", "1", (char *)NULL);
}

/* The copy of block that daemon i holds (its status), with step at
 * least min, within limit seconds: its step, or -1. */
static long long
wait_copy_round(int i, int block, long long min, double limit, char *sha,
    long long *round)
{
	double t0 = kn_now();

	do {
		json_t *j = tu_status(base_port + i), *e;
		size_t k;
		long long step = -1;

		json_array_foreach(json_object_get(json_object_get(j,
		    "mirrors"), "held"), k, e)
			if (json_integer_value(json_object_get(e, "block")) ==
			    block && json_integer_value(json_object_get(e,
			    "step")) >= min) {
				step = json_integer_value(json_object_get(e,
				    "step"));
				if (sha != NULL)
					snprintf(sha, 65, "%s", json_string_value(
					    json_object_get(e, "sha256")));
				if (round != NULL)
					*round = json_integer_value(
					    json_object_get(e, "round"));
			}
		json_decref(j);
		if (step >= 0)
			return step;
		usleep(100000);
	} while (kn_now() - t0 < limit);
	return -1;
}

static long long
wait_copy(int i, int block, long long min, double limit, char *sha)
{
	return wait_copy_round(i, block, min, limit, sha, NULL);
}

/* Bytes of the files in state dir i's mirror folder. */
static long long
mirror_bytes(int i)
{
	char path[256], file[512];
	struct dirent *e;
	struct stat st;
	long long sum = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/state%d/mirror", dir, i);
	ck_assert_ptr_nonnull(d = opendir(path));
	while ((e = readdir(d)) != NULL) {
		snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
		if (e->d_name[0] != '.' && stat(file, &st) == 0)
			sum += st.st_size;
	}
	closedir(d);
	return sum;
}

static int
log_has(int i, const char *what)
{
	char path[128], line[2048];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* The step of daemon i's first "training from step N". */
static long long
trained_from(int i)
{
	char path[128], line[2048];
	long long step = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	while (step < 0 && fgets(line, sizeof(line), f) != NULL) {
		char *p = strstr(line, "training from step ");

		if (p != NULL)
			step = atoll(p + strlen("training from step "));
	}
	fclose(f);
	return step;
}

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_mirror");
	tu_trust_init(dir);
	base_port = tu_port_base(MAXD);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void
teardown(void)
{
	int i;

	tu_act_as(NULL);
	for (i = 0; i < MAXD; i++)
		tu_stop(&pids[i], SIGKILL, 15);
	tu_remove_dir(dir);
	curl_global_cleanup();
}

/* (a) a mirror holds a verified copy of another block's newest
 * checkpoint, and its optimizer state, within its budget, and serves it
 * to peers only. */
START_TEST(test_mirror_holds_copy)
{
	int daemons[2] = { 0, 1 }, blocks[2] = { 1, 2 };
	char sha[65], got[65], err[PR_ERR_LEN], state[128], run_id[65];
	long long step, budget = 2 * 1024 * 1024;
	pr_ckpt_meta meta;
	tu_body b = { 0 };
	json_t *j;

	write_run(100000, "mirror_budget = 2M\n");
	write_peers(2, daemons, blocks);
	start(0, 1);
	start(1, 2);
	step = wait_copy(0, 2, 100, 40, sha);
	ck_assert_msg(step >= 100, "no copy of block 2 on daemon 0");
	/* within the budget, on disk and as the status says */
	j = tu_status(base_port);
	ck_assert_ptr_nonnull(j);
	snprintf(run_id, sizeof(run_id), "%s", json_string_value(
	    json_object_get(j, "run_id")));
	ck_assert_int_le(json_integer_value(json_object_get(json_object_get(
	    j, "mirrors"), "used")), budget);
	json_decref(j);
	ck_assert_int_le(mirror_bytes(0), budget);
	ck_assert_int_gt(mirror_bytes(0), 0);
	/* peers only: the operator is refused */
	ck_assert_int_eq(tu_http_get(base_port, "/v1/mirrors/2", &b), 403);
	free(b.data);
	state_of(1, state, sizeof(state));
	tu_act_as(state);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/mirrors/1", &b), 404);
	free(b.data);
	/* what it says it holds, and the bytes it serves, agree; with its
	 * optimizer state (a copy pulled while its host was writing a newer
	 * one has none until the next pull, seconds later) */
	{
		double t0 = kn_now();

		for (;;) {
			ck_assert_int_eq(tu_http_get(base_port, "/v1/mirrors/2",
			    &b), 200);
			j = json_loads(b.data, 0, NULL);
			free(b.data);
			ck_assert_ptr_nonnull(j);
			if (json_object_get(j, "optimizer") != NULL ||
			    kn_now() - t0 > 30)
				break;
			json_decref(j);
			usleep(200000);
		}
	}
	snprintf(sha, sizeof(sha), "%s", json_string_value(json_object_get(j,
	    "sha256")));
	step = json_integer_value(json_object_get(j, "step"));
	ck_assert_ptr_nonnull(json_object_get(j, "optimizer"));
	json_decref(j);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/mirrors/2/checkpoint",
	    &b), 200);
	ck_assert_int_eq(pr_ckpt_sha256_hex(b.data, b.len, got, err), 0);
	ck_assert_str_eq(got, sha);
	ck_assert_int_eq(pr_ckpt_decode(b.data, b.len, NULL, NULL, 0, NULL,
	    &meta, err), 0);
	ck_assert_int_eq(meta.block, 2);
	ck_assert_int_eq(meta.step, step);
	ck_assert_str_eq(meta.run_id, run_id);
	free(b.data);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/mirrors/2/optimizer",
	    &b), 200);
	{
		pr_spec s;
		kn_model_shape shape;
		int t;

		snprintf(state, sizeof(state), "%s/run.conf", dir);
		ck_assert_int_eq(pr_spec_load(&s, state, err), 0);
		shape = pr_spec_block_shape(&s, 1);
		ck_assert_msg(pr_ckpt_decode_optim(b.data, b.len, NULL,
		    kn_model_params_for(&shape), NULL, NULL, &t, &meta, err) ==
		    0, "%s", err);
		ck_assert_int_eq(meta.step, step);
		ck_assert_int_eq(meta.block, 2);
	}
	free(b.data);
	/* the mirror of block 1 is daemon 1's */
	ck_assert_int_ge(wait_copy(1, 1, 100, 20, NULL), 100);
	tu_act_as(NULL);
	/* hosts that trained on between their status and a pull are not
	 * counted against: nobody refused anything */
	for (step = 0; step < 2; step++) {
		j = tu_status(base_port + (int)step);
		ck_assert_int_eq(json_array_size(json_object_get(json_object_get(
		    j, "strikes"), "peers")), 0);
		json_decref(j);
	}
	{
		char out[8192], want[64];

		ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s status "
		    "--peers %s/peers", tu_shardmeter(), dir), 0);
		snprintf(want, sizeof(want), "127.0.0.1:%d ", base_port);
		ck_assert_msg(strstr(out, "holds block 2 step") != NULL &&
		    strstr(strstr(out, "mirrors ("), want) != NULL, "%s", out);
	}
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	ck_assert_int_eq(tu_stop(&pids[1], SIGTERM, 15), 0);
}
END_TEST

/* A budget that cannot hold one copy is refused at start, saying so. */
START_TEST(test_budget_refused)
{
	int daemons[2] = { 0, 1 }, blocks[2] = { 1, 2 }, status;
	char listen[32], log[128], peers[128], spec[128], conf[128];
	char state[128];
	const char *argv[20];
	double t0;
	pid_t pid;

	write_run(100, "mirror_budget = 1000\n");
	write_peers(2, daemons, blocks);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port);
	snprintf(log, sizeof(log), "%s/log0", dir);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	snprintf(spec, sizeof(spec), "%s/run.conf", dir);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	state_of(0, state, sizeof(state));
	memcpy(argv, (const char *[]){ "blocktraind", "-f", "-c", conf, "-l",
	    listen, "-b", "1", "-s", state, "-p", peers, "-r", spec, "-D",
	    "cpu", "-t", "1", NULL }, 19 * sizeof(char *));
	pid = tu_spawn(log, tu_blocktraind(), argv);
	t0 = kn_now();
	while (waitpid(pid, &status, WNOHANG) == 0 && kn_now() - t0 < 30)
		usleep(50000);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0,
	    "blocktraind did not refuse the budget");
	ck_assert(log_has(0, "mirror_budget: 1000 bytes cannot hold one copy"));
}
END_TEST

/* Steps of test_host_replaced's run: the host of block 2 is killed
 * well before them (a few seconds in), and the new host trains the
 * rest in seconds. */
#define STEPS_B 6000

/* (b) the only host of block 2 is lost with its state directory; a new
 * host with a new identity, on a new line of the list, takes block 2
 * over from the mirror's step, and the run finishes. */
START_TEST(test_host_replaced)
{
	int daemons[2] = { 0, 1 }, blocks[2] = { 1, 2 };
	int now[2] = { 0, 2 };
	char state[128], cmd[300], sha[65];
	long long step, from;
	tu_body b = { 0 };
	double t0;
	json_t *j;

	write_run(STEPS_B, "");
	write_peers(2, daemons, blocks);
	start(0, 1);
	start(1, 2);
	step = wait_copy(0, 2, 100, 40, sha);
	ck_assert_msg(step >= 100, "no copy of block 2 on daemon 0");
	/* the host and its disk are gone */
	tu_stop(&pids[1], SIGKILL, 15);
	state_of(1, state, sizeof(state));
	snprintf(cmd, sizeof(cmd), "rm -rf %s", state);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "%s", cmd), 0);
	step = wait_copy(0, 2, 0, 1, sha);
	/* a new host (daemon 2, a new id) replaces its line */
	write_peers(2, now, blocks);
	kill(pids[0], SIGHUP);
	t0 = kn_now();
	do {
		usleep(100000);
		ck_assert_int_eq(tu_http_get(base_port, "/v1/peers", &b), 200);
		{
			char addr[32];

			snprintf(addr, sizeof(addr), "127.0.0.1:%d",
			    base_port + 2);
			from = strstr(b.data, addr) != NULL;
		}
		free(b.data);
	} while (!from && kn_now() - t0 < 10);
	ck_assert_msg(from, "daemon 0 did not take the new list");
	start(2, 2);
	ck_assert_msg(tu_wait_state(base_port + 2, 1, "training", 30) ||
	    tu_wait_state(base_port + 2, 1, "done", 1), "new host idle");
	from = trained_from(2);
	fprintf(stderr, "# replaced: the mirror held step %lld, the new host "
	    "trained from step %lld to %d\n", step, from, STEPS_B);
	ck_assert_int_ge(from, step);
	ck_assert_int_gt(from, 0);
	ck_assert(log_has(2, "bootstrap: installed the checkpoint of block 2"));
	j = tu_status(base_port + 2);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j,
	    "bootstrap"), "outcome")), "installed");
	json_decref(j);
	/* 6000 steps on each host: seconds alone, but under the sanitizers
	 * with another test beside it on two cores it passed 50 s */
	ck_assert_msg(tu_wait_state(base_port, 1, "done", 150) &&
	    tu_wait_state(base_port + 2, 1, "done", 60), "run not done");
	ck_assert_int_eq(tu_status_int(base_port + 2, "step"), STEPS_B);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	ck_assert_int_eq(tu_stop(&pids[2], SIGTERM, 15), 0);
}
END_TEST

/* (c) a mirror whose copy no longer matches the hash it names (a byte
 * rotted on its disk) is refused by the host it bootstraps, and counted
 * against it; the host then starts from step 0. */
START_TEST(test_bad_mirror_refused)
{
	int daemons[2] = { 0, 1 }, blocks[2] = { 1, 2 };
	char state[128], path[512], cmd[700], sha[65], id[128];
	long long step, round = 0, strikes = -1;
	json_t *j, *e;
	size_t k;
	FILE *f;

	write_run(100000, "");
	write_peers(2, daemons, blocks);
	start(0, 1);
	start(1, 2);
	step = wait_copy(0, 2, 100, 40, sha);
	ck_assert_msg(step >= 100, "no copy of block 2 on daemon 0");
	tu_stop(&pids[1], SIGKILL, 15);
	j = tu_status(base_port);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j,
	    "id")));
	json_decref(j);
	/* a byte of the copy's checkpoint flipped in place (once a pull
	 * under way at the kill has ended) */
	{
		double t0 = kn_now();

		usleep(800000);
		do {
			usleep(200000);
			step = wait_copy_round(0, 2, 0, 1, sha, &round);
			snprintf(path, sizeof(path), "%s/state0/mirror/"
			    "block-2-%lld-%lld.ckpt", dir, step, round);
		} while ((f = fopen(path, "r+b")) == NULL &&
		    kn_now() - t0 < 10);
	}
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	fseek(f, ftell(f) / 2, SEEK_SET);
	{
		int c = fgetc(f);

		fseek(f, -1, SEEK_CUR);
		fputc(c ^ 0x10, f);
	}
	fclose(f);
	/* daemon 1 back with its identity but an empty state directory */
	state_of(1, state, sizeof(state));
	snprintf(cmd, sizeof(cmd), "cd %s && rm -f block-* journal strikes",
	    state);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "%s", cmd), 0);
	start(1, 2);
	ck_assert(tu_wait_state(base_port + 1, 1, "training", 30) ||
	    tu_wait_state(base_port + 1, 1, "done", 1));
	j = tu_status(base_port + 1);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j,
	    "bootstrap"), "outcome")), "failed");
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j,
	    "bootstrap"), "refused")), 1);
	json_array_foreach(json_object_get(json_object_get(j, "strikes"),
	    "peers"), k, e)
		if (strcmp(json_string_value(json_object_get(e, "id")), id) == 0)
			strikes = json_integer_value(json_object_get(e,
			    "checkpoint"));
	json_decref(j);
	ck_assert_int_eq(strikes, 1);
	ck_assert(log_has(1, "hash to"));
	ck_assert_int_eq(trained_from(1), 0);
	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	ck_assert_int_eq(tu_stop(&pids[1], SIGTERM, 15), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("mirror");
	TCase *tc = tcase_create("units");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_assign);
	tcase_add_test(tc, test_budget);
	tcase_add_test(tc, test_check_pair);
	tcase_add_test(tc, test_choose);
	suite_add_tcase(s, tc);
	tc = tcase_create("loopback");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_mirror_holds_copy);
	tcase_add_test(tc, test_budget_refused);
	tcase_add_test(tc, test_host_replaced);
	tcase_add_test(tc, test_bad_mirror_refused);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
