/* Blocks of their own sizes ([model] layers): a run of blocks of 1 and 3
 * layers through the real shardmeter binary (spec figures, training,
 * checkpoints of each block's shape, eval, generation, export and
 * import), one served by a two-host pipeline in both modes against one
 * process, and a run that shardmeter plan split over a host three times
 * faster than the other, started on real daemons from the plan's files.
 * Sizes are checked against kernels' own parameter count. */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blocktrain/train.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"
#include "proto/topology.h"
#include "tests/testutil.h"

static char dir[64];
static const char *tool;
static int base_port;
static pid_t pids[2];

#define SPEC_HEAD "seed = 5\n[model]\nblocks = 2\nwidth = 32\nheads = 2\n" \
	"window = 24\n[data]\ntrain = /usr/share/common-licenses/GPL-3\n" \
	"valid = /usr/share/common-licenses/GPL-2\n" \
	"test = /usr/share/common-licenses/GPL-2\n" \
	"[optim]\nbatch = 16\nsteps = 60\nwarmup = 10\nlr = 3e-3\n[model]\n"

static void
setup(void)
{
	tool = tu_shardmeter();
	tu_temp_dir(dir, sizeof(dir), "check_layers");
	memset(pids, 0, sizeof(pids));
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < 2; i++)
		tu_stop(&pids[i], SIGKILL, 15);
	if (getenv("KEEP") == NULL) tu_remove_dir(dir);
}

/* Parameters of a block of the test spec's shape with layers layers, as
 * the kernels count them. */
static size_t
params_of(int layers, int window)
{
	kn_model_shape s = { 32, 2, layers, window, 0, 0 };

	return kn_model_params_for(&s);
}

static void
load_spec(const char *path, pr_spec *s, char id[PR_RUN_ID_LEN])
{
	char err[PR_ERR_LEN];

	ck_assert_msg(pr_spec_load(s, path, err) == 0, "%s", err);
	ck_assert_msg(pr_spec_run_id(s, id, err) == 0, "%s", err);
}

/* The checkpoint of (kind, block) in d, loaded for s: its parameters. */
static size_t
ckpt_params(const pr_spec *s, const char *id, const char *d, bt_kind kind,
    int block)
{
	char err[PR_ERR_LEN];
	kn_model *m;
	size_t n;

	ck_assert_msg(tr_load_model(&m, s, id, d, kind, block, kn_cpu_backend(),
	    1, err) == 0, "%s", err);
	n = kn_model_num_params(m);
	kn_model_free(m);
	return n;
}

static double
json_share_sum(const char *out, double *total)
{
	json_error_t jerr;
	json_t *j = json_loads(strchr(out, '{'), 0, &jerr), *sh;
	double sum = 0;
	size_t i;

	ck_assert_msg(j != NULL, "%s", out);
	*total = json_number_value(json_object_get(j,
	    "blocktrain_nats_per_byte"));
	json_array_foreach(json_object_get(j, "shares"), i, sh)
		sum += json_number_value(json_object_get(sh, "share"));
	json_decref(j);
	return sum;
}

START_TEST(test_tool)
{
	char out[16384], path[256], err[PR_ERR_LEN], id[PR_RUN_ID_LEN];
	char h1[65], h2[65], *buf;
	const char *p, *spec;
	double before, after, sum;
	kn_model_shape one = { 32, 2, 1, 24, 0, 0 };
	pr_ckpt_meta expect = { 0 }, got;
	kn_model *m;
	size_t len;
	pr_spec s;
	long v[3];
	int b, count;

	spec = tu_write_file(dir, "run.conf", SPEC_HEAD "layers = 1, 3\n");
	load_spec(spec, &s, id);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s spec %s", tool,
	    spec), 0);
	ck_assert_msg(strstr(out, "2 blocks of 1, 3 layers (4 in all)") !=
	    NULL, "%s", out);
	/* each block's line: its layers and parameters */
	for (b = 1; b <= 2; b++) {
		char head[32];

		snprintf(head, sizeof(head), "  block %d ", b);
		ck_assert_ptr_nonnull(p = strstr(out, head));
		ck_assert_int_eq(sscanf(p, "  block %ld %ld %ld", &v[0], &v[1],
		    &v[2]), 3);
		ck_assert_int_eq(v[1], b == 1 ? 1 : 3);
		ck_assert_uint_eq((size_t)v[2], params_of((int)v[1], 24));
	}

	snprintf(path, sizeof(path), "%s/a", dir);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s train --spec %s "
	    "--dir %s --all --steps 0", tool, spec, path), 0);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec %s "
	    "--dir %s --json --windows 64", tool, spec, path), 0);
	json_share_sum(out, &before);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec %s --dir "
	    "%s --all --every 30 && %s train --spec %s --dir %s --reference "
	    "e2e --steps 5 && %s train --spec %s --dir %s --reference causal "
	    "--steps 5", tool, spec, path, tool, spec, path, tool, spec,
	    path) == 0, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s eval --spec %s "
	    "--dir %s --json --windows 64", tool, spec, path), 0);
	sum = json_share_sum(out, &after);
	ck_assert_double_eq_tol(after, sum, 1e-5);
	ck_assert_msg(after < 0.8 * before, "bound %g -> %g", before, after);

	/* every checkpoint has its own shape; the references the sum */
	ck_assert_uint_eq(ckpt_params(&s, id, path, BT_BLOCK, 1),
	    params_of(1, 24));
	ck_assert_uint_eq(ckpt_params(&s, id, path, BT_BLOCK, 2),
	    params_of(3, 24));
	ck_assert_uint_eq(ckpt_params(&s, id, path, BT_E2E, 0),
	    params_of(4, 24));
	/* block 2's checkpoint against a block of one layer: refused */
	snprintf(path, sizeof(path), "%s/a/block-2.ckpt", dir);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 30, &buf, &len, err), 0);
	ck_assert_int_eq(kn_model_create_inference(&m, &one, kn_cpu_backend(),
	    1, KN_STORE_F32, err), 0);
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", id);
	expect.block = 2;
	snprintf(expect.kind, sizeof(expect.kind), "block");
	ck_assert_int_ne(pr_ckpt_decode(buf, len, &expect, kn_model_tensors(m,
	    &count), count, NULL, &got, err), 0);
	ck_assert_msg(strstr(err, "shape") != NULL || strstr(err, "tensors")
	    != NULL, "%s", err);
	kn_model_free(m);
	free(buf);

	/* generation through both blocks keeps the prompt, leaves no mask */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --spec %s "
	    "--dir %s/a --steps 8 --seed 3 'the ' 2>/dev/null", tool, spec,
	    dir), 0);
	ck_assert_msg((p = strstr(out, "the ")) != NULL, "%s", out);
	ck_assert_uint_eq(strlen(p), 24 + 1);
	ck_assert_ptr_null(strchr(p, '_'));

	/* export and import give back the same bytes; another split of
	 * the same layers is another run */
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s export --spec %s --dir "
	    "%s/a --out %s/m.safetensors && %s import --in %s/m.safetensors "
	    "--dir %s/b --spec %s", tool, spec, dir, dir, tool, dir, dir,
	    spec) == 0, "%s", out);
	for (b = 0; b < 2; b++) {
		snprintf(path, sizeof(path), "%s/%c/block-2.ckpt", dir,
		    b ? 'b' : 'a');
		ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 30, &buf, &len,
		    err), 0);
		pr_ckpt_sha256_hex(buf, len, b ? h2 : h1, err);
		free(buf);
	}
	ck_assert_str_eq(h1, h2);
	spec = tu_write_file(dir, "other.conf", SPEC_HEAD "layers = 3, 1\n");
	ck_assert_int_ne(tu_run_cmd(out, sizeof(out), "%s import --in "
	    "%s/m.safetensors --dir %s/c --spec %s 2>&1", tool, dir, dir,
	    spec), 0);
}
END_TEST

/* Two hosts on loopback, h1 three times faster than h0, by hand. */
static const char *
write_topology(void)
{
	json_t *top, *hosts = json_array(), *links = json_array();
	char line[256], state[128], id[128], addr[32], *text;
	const char *path;
	int i;

	for (i = 0; i < 2; i++) {
		line[0] = '\0';
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(line, sizeof(line), base_port + i, 1, state);
		ck_assert_int_eq(sscanf(line, "%31s %*d %127s", addr, id), 2);
		json_array_append_new(hosts, json_pack("{s:s#,s:s,s:s,s:s,"
		    "s:f,s:f,s:f}", "name", i ? "h1" : "h0", 2, "address", addr,
		    "id", id, "device", "cpu", "memory_bytes", 1e10,
		    "train_positions_per_s", 20000.0 * (i ? 3 : 1),
		    "forward_positions_per_s", 60000.0 * (i ? 3 : 1)));
		json_array_append_new(links, json_pack("{s:s,s:s,s:f,s:f,s:i,"
		    "s:f,s:i,s:f}", "from", i ? "h1" : "h0", "to", i ? "h0" :
		    "h1", "rtt_ms", 0.1, "rtt_spread_ms", 0.01, "samples", 10,
		    "stream_bytes_per_s", 1e9, "streams", 1, "multi_bytes_per_s",
		    1e9));
	}
	top = json_pack("{s:i,s:s,s:{s:i,s:i,s:i,s:i,s:i},s:o,s:o}", "version",
	    1, "measured_at", "by hand", "shape", "width", 32, "heads", 2,
	    "layers", 2, "window", 32, "batch", 16, "hosts", hosts, "links",
	    links);
	ck_assert_ptr_nonnull(top);
	text = json_dumps(top, JSON_INDENT(1));
	path = tu_write_file(dir, "topology.json", text);
	free(text);
	json_decref(top);
	return path;
}

/* shardmeter plan gives the fast host 3 of the 4 layers and writes the
 * split into its spec; the daemons run that spec and each checkpoints a
 * block of its planned shape. */
START_TEST(test_plan_run)
{
	char out[16384], path[256], line[512], state[128], log[128];
	char listen[32], id[PR_RUN_ID_LEN], *topo;
	topo_topology t;
	pr_spec s;
	int i;

	tu_trust_init(dir);
	base_port = tu_port_base(2);
	tu_write_run(dir, 2, 40, 20, 5);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "sed -i 's/^layers_per_block = "
	    "1$/layers_per_block = 2/' %s/run.conf", dir), 0);
	topo = strdup(write_topology());
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s plan --topology %s "
	    "--spec %s/run.conf --out %s/plan 2>&1", tool, topo, dir, dir) == 0,
	    "%s", out);
	free(topo);
	ck_assert_msg(strstr(out, "split: the 4 layers shared") != NULL, "%s",
	    out);
	snprintf(path, sizeof(path), "%s/plan/spec.conf", dir);
	load_spec(path, &s, id);
	ck_assert(s.layers_given);
	ck_assert_int_eq(pr_spec_total_layers(&s), 4);
	/* the test reads the daemons' status as a listed client */
	line[0] = '\0';
	tu_client_line(line, sizeof(line));
	snprintf(path, sizeof(path), "%s/plan", dir);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "printf '%%s' '%s' >> %s/peers",
	    line, path), 0);
	/* shardmeter probe below asks each daemon twice (alone, then with
	 * its machine's other): not a minute apart */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "printf 'probe_compute_interval_"
	    "s = 1\\n' >> %s/daemon.conf", dir), 0);
	for (i = 0; i < 2; i++) {
		char block[16];

		/* the block the plan gives host hI, as its conf/hI.conf says */
		ck_assert_int_eq(tu_run_cmd(block, sizeof(block), "sed -n "
		    "'s/^block = //p' %s/plan/conf/h%d.conf | tr -d '\\n'", dir,
		    i), 0);
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
		snprintf(log, sizeof(log), "%s/log%d", dir, i);
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		snprintf(line, sizeof(line), "%s/daemon.conf", dir);
		snprintf(out, sizeof(out), "%s/plan/peers", dir);
		snprintf(path, sizeof(path), "%s/plan/spec.conf", dir);
		pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c",
		    line, "-l", listen, "-b", block, "-s", state, "-p", out,
		    "-r", path, "-D", "cpu", "-t", "1", (char *)NULL);
	}
	ck_assert_msg(tu_wait_state(base_port, 2, "done", 120),
	    "daemons not done");
	for (i = 0; i < 2; i++) {
		json_t *st = tu_status(base_port + i);
		int block;

		ck_assert_ptr_nonnull(st);
		ck_assert_str_eq(json_string_value(json_object_get(st,
		    "run_id")), id);
		block = (int)json_integer_value(json_object_get(st, "block"));
		json_decref(st);
		/* h1, three times faster, trains three of the four layers */
		ck_assert_int_eq(pr_spec_layers(&s, block - 1), i ? 3 : 1);
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		ck_assert_uint_eq(ckpt_params(&s, id, state, BT_BLOCK, block),
		    params_of(i ? 3 : 1, 32));
	}
	/* the daemons time blocks of different shapes; the probe gives
	 * both hosts' rates at one of them */
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s probe --peers "
	    "%s/plan/peers --out %s/measured.json --samples 3 --bytes 300000 "
	    "--streams 1 --compute-seconds 1 --compute-repeats 1 2>&1", tool,
	    dir, dir) == 0, "%s", out);
	snprintf(path, sizeof(path), "%s/measured.json", dir);
	ck_assert_msg(topo_load(&t, path, line) == 0, "%s", line);
	ck_assert(t.shape.layers == 1 || t.shape.layers == 3);
	for (i = 0; i < 2; i++)
		ck_assert(t.hosts[i].train_positions_per_s > 0 &&
		    t.hosts[i].forward_positions_per_s > 0);
	topo_free(&t);
}
END_TEST

/* What `shardmeter generate` prints for 'the ' in mode, in one process
 * (where NULL) or through the pipeline of the hosts file; a few tries
 * while the ring connects. */
static void
generate(const char *where, const char *spec, const char *mode, char *out,
    size_t len)
{
	int tries, rc = -1;

	for (tries = 0; tries < 50 && rc != 0; tries++) {
		if (where == NULL)
			rc = tu_run_cmd(out, len, "%s generate --spec %s --dir "
			    "%s/run --mode %s --length 16 --steps 12 --seed 4 "
			    "'the ' 2>/dev/null", tool, spec, dir, mode);
		else
			rc = tu_run_cmd(out, len, "%s generate --peers %s "
			    "--mode %s --length 16 --steps 12 --seed 4 'the ' "
			    "2>/dev/null", tool, where, mode);
		if (rc != 0)
			usleep(100000);
	}
	ck_assert_msg(rc == 0, "generate %s: %s", mode, out);
}

/* Blocks of 1 and 4 layers served by two pipeline hosts: block 2 and
 * the causal LM's first layers on one, block 1 and the rest on the
 * other, the LM's 5 layers split by their sum; both modes give what one
 * process gives. */
START_TEST(test_serve)
{
	char out[4096], one[4096], text[1024], hosts[128], state[2][128];
	char listen[32], next[32], log[128];
	const char *spec, *conf;
	int i;

	spec = tu_write_file(dir, "run.conf", SPEC_HEAD "layers = 1, 4\n");
	spec = strdup(spec);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec %s --dir "
	    "%s/run --all --quiet --steps 20 && %s train --spec %s --dir %s/run "
	    "--reference causal --quiet --steps 20", tool, spec, dir, tool,
	    spec, dir) == 0, "%s", out);
	tu_trust_init(dir);
	base_port = tu_port_base(2);
	text[0] = '\0';
	for (i = 0; i < 2; i++) {
		snprintf(state[i], sizeof(state[i]), "%s/host%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, 2 - i, state[i]);
		ck_assert_int_eq(tu_run_cmd(NULL, 0, "ln -sf %s/run/*.ckpt %s/",
		    dir, state[i]), 0);
	}
	tu_client_line(text, sizeof(text));
	snprintf(hosts, sizeof(hosts), "%s", tu_write_file(dir, "hosts",
	    text));
	conf = tu_write_file(dir, "serve.conf", "pipeline_timeout_ms = 10000\n");
	for (i = 0; i < 2; i++) {
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
		snprintf(next, sizeof(next), "127.0.0.1:%d",
		    base_port + 1 - i);
		snprintf(log, sizeof(log), "%s/log%d", dir, i);
		pids[i] = tu_daemon_start(log, base_port + i, "-S", "-f", "-c",
		    conf, "-L", listen, "-N", next, "-P", hosts, "-s", state[i],
		    "-r", spec, "-D", "cpu", "-t", "1", (char *)NULL);
	}
	generate(NULL, spec, "blocktrain", one, sizeof(one));
	generate(hosts, spec, "blocktrain", out, sizeof(out));
	ck_assert_str_eq(out, one);
	generate(NULL, spec, "ar", one, sizeof(one));
	generate(hosts, spec, "ar", out, sizeof(out));
	ck_assert_str_eq(out, one);
	free((char *)spec);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("layers");
	TCase *tc = tcase_create("layers");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_tool);
	tcase_add_test(tc, test_plan_run);
	tcase_add_test(tc, test_serve);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
