/* blocktraind on a SOMA run: two real daemons over mutual TLS train
 * experts 0 and 1 of three from a seed the test trains in this process;
 * their status, metrics, checkpoints and held-out scores, and the routed
 * mixture shardmeter status mixes from those scores checked against the
 * same mixture scored here from the downloaded checkpoints.  Also the
 * refusals: no seed, another run's seed, bad peer-list lines, an unlisted
 * client.  Text is made by the test. */
#include "config.h"

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/identity.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "proto/heldout.h"
#include "soma/mixture.h"
#include "soma/model_file.h"
#include "soma/router.h"
#include "soma/trainer.h"
#include "tests/testutil.h"

#define STEPS 60
#define EVAL_EVERY 20
#define WINDOWS 64      /* eval_windows: the held-out set */
#define WIN_T 16

static char dir[256], spec_path[300];
static pr_spec spec;
static char run_id[PR_RUN_ID_LEN];
static int base_port;
static pid_t pids[3];

/* Three kinds of text, so that the clusters and the routing differ:
 * words, numbers, and dashed tokens; the held-out file has runs of ten
 * lines of each. */
static void
line(FILE *f, int kind, kn_rng *r)
{
	static const char *const words[] = { "the", "river", "stone", "of",
	    "a", "green", "hill", "and", "light", "over" };
	static const char *const toks[] = { "ZAP", "QUUX", "Bor", "Mel",
	    "Tik", "Wun" };
	int i;

	for (i = 0; i < 10; i++) {
		if (kind == 0)
			fprintf(f, "%s ", words[kn_rng_below(r, 10)]);
		else if (kind == 1)
			fprintf(f, "%u,%u;", (unsigned)kn_rng_below(r, 1000),
			    (unsigned)kn_rng_below(r, 100));
		else
			fprintf(f, "%s-", toks[kn_rng_below(r, 6)]);
	}
	fputc('\n', f);
}

static void
make_text(const char *path, int kind, int lines, uint64_t seed)
{
	FILE *f = fopen(path, "w");
	kn_rng r;
	int i;

	ck_assert_ptr_nonnull(f);
	kn_rng_init(&r, seed, (uint64_t)kind);
	for (i = 0; i < lines; i++)
		line(f, kind < 0 ? (i / 10) % 3 : kind, &r);
	fclose(f);
}

/* "127.0.0.1:port expert=E PEER-ID" for the daemon of state, pinned for
 * tu_http like tu_peer_line's. */
static void
expert_line(char *text, size_t size, int port, int expert,
    const char *state)
{
	char tmp[256] = "", id[128];
	size_t used = strlen(text);

	tu_peer_line(tmp, sizeof(tmp), port, 1, state);
	ck_assert_int_eq(sscanf(tmp, "%*s %*d %127s", id), 1);
	snprintf(text + used, size - used, "127.0.0.1:%d expert=%d %s\n",
	    port, expert, id);
}

/* Trains the seed here, as `shardmeter train --seed` would. */
static void
train_seed(const char *out)
{
	char paths[3][300], err[KN_ERR_LEN];
	const char *train[3] = { paths[0], paths[1], paths[2] };
	sa_train_opts o = { 0 };
	sa_result res;
	int i;

	for (i = 0; i < 3; i++)
		snprintf(paths[i], sizeof(paths[i]), "%s/clusters/cluster-%d.txt",
		    dir, i);
	o.spec = &spec;
	o.run_id = run_id;
	o.kind = SA_SEED;
	o.steps = -1;
	o.train = train;
	o.ntrain = 3;
	o.out_path = out;
	o.valid_windows = 16;
	o.be = kn_cpu_backend();
	ck_assert_msg(sa_train(&o, &res, err) == 0, "%s", err);
}

static void
setup(void)
{
	char path[300], text[2048], out[8192], err[PR_ERR_LEN];
	int i;

	tu_temp_dir(dir, sizeof(dir), "check_soma_daemon");
	tu_trust_init(dir);
	base_port = tu_port_base(3);
	memset(pids, 0, sizeof(pids));
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/text-%d.txt", dir, i);
		make_text(path, i, 1500, 11);
	}
	snprintf(path, sizeof(path), "%s/valid.txt", dir);
	make_text(path, -1, 600, 12);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s cluster --experts 3 "
	    "--balance bytes --chunk 512 --dims 4 --out %s/clusters "
	    "%s/text-0.txt %s/text-1.txt %s/text-2.txt", tu_shardmeter(), dir,
	    dir, dir, dir) == 0, "%s", out);
	snprintf(text, sizeof(text), "seed = 5\nmethod = soma\n[data]\n"
	    "valid = %s/valid.txt\ntest = %s/valid.txt\n[soma]\nexperts = 3\n"
	    "width = 8\nmlp_mult = 2\nlayers = 1\nwindow = %d\nbatch = 4\n"
	    "perturbations = 4\nseed_steps = 6\nsteps = %d\neval_every = %d\n"
	    "top_k = 2\nroute_bytes = 64\nclusters = %s/clusters\n", dir, dir,
	    WIN_T, STEPS, EVAL_EVERY, dir);
	snprintf(spec_path, sizeof(spec_path), "%s", tu_write_file(dir,
	    "spec.conf", text));
	ck_assert_msg(pr_spec_load(&spec, spec_path, err) == 0, "%s", err);
	ck_assert(pr_spec_run_id(&spec, run_id, err) == 0);
	snprintf(text, sizeof(text), "eval_windows = %d\n"
	    "peer_timeout_ms = 2000\nmetrics_listen = 127.0.0.1:0\n", WINDOWS);
	tu_write_file(dir, "daemon.conf", text);
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < 3; i++)
		tu_stop(&pids[i], SIGKILL, 15);
	curl_global_cleanup();
	kn_pool_shutdown();
	tu_remove_dir(dir);
}

/* The peer list: experts 0, 1 and 2 on base_port + 0, 1, 2 (state0..2,
 * identities made), the test's operator, and extra lines after. */
static void
write_peers(const char *extra)
{
	char text[2048] = "", state[300];
	int i;

	for (i = 0; i < 3; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		expert_line(text, sizeof(text), base_port + i, i, state);
	}
	tu_client_line(text, sizeof(text));
	snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s",
	    extra);
	tu_write_file(dir, "peers", text);
}

/* blocktraind -n on daemon i: its exit status, its words in out. */
static int
check_config(int i, char *out, size_t len)
{
	return tu_run_cmd(out, len, "%s -n -c %s/daemon.conf -l 127.0.0.1:%d "
	    "-s %s/state%d -p %s/peers -r %s -D cpu -t 1", tu_blocktraind(),
	    dir, base_port + i, dir, i, dir, spec_path);
}

static void
start(int i)
{
	char listen[32], log[300], conf[300], state[300], peers[300];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
	snprintf(state, sizeof(state), "%s/state%d", dir, i);
	snprintf(peers, sizeof(peers), "%s/peers", dir);
	pids[i] = tu_daemon_start(log, base_port + i, "-f", "-v", "-c", conf,
	    "-l", listen, "-s", state, "-p", peers, "-r", spec_path, "-D",
	    "cpu", "-t", "1", (char *)NULL);
}

static int
log_has(int i, const char *what)
{
	char path[300], *text;
	size_t len;
	FILE *f;
	int found;

	snprintf(path, sizeof(path), "%s/log%d", dir, i);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	text = calloc(1, 1 << 20);
	len = fread(text, 1, (1 << 20) - 1, f);
	text[len] = '\0';
	fclose(f);
	found = strstr(text, what) != NULL;
	free(text);
	return found;
}

static void
read_all(const char *path, char **text, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	*text = malloc((size_t)n + 1);
	*len = fread(*text, 1, (size_t)n, f);
	ck_assert_uint_eq(*len, (size_t)n);
	fclose(f);
}

/* Expert e's checkpoint from its daemon, loaded into a new model. */
static kn_soma_model *
download_expert(int e)
{
	kn_soma_shape sh = sa_expert_shape(&spec);
	float *body = malloc(kn_soma_body_params(&sh) * sizeof(float));
	float *dec = malloc(kn_soma_decoder_params(&sh) * sizeof(float));
	pr_ckpt_meta want = { .block = e, .kind = "expert" }, got;
	char path[300], url[64], err[KN_ERR_LEN];
	kn_soma_model *m;
	tu_body b;
	FILE *f;

	snprintf(url, sizeof(url), "/v1/blocks/%d/checkpoint", e);
	ck_assert_int_eq(tu_http_get(base_port + e, url, &b), 200);
	snprintf(path, sizeof(path), "%s/got-%d.ckpt", dir, e);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(b.data, 1, b.len, f), b.len);
	fclose(f);
	free(b.data);
	snprintf(want.run_id, sizeof(want.run_id), "%s", run_id);
	ck_assert_msg(sa_model_load(path, &want, &sh, body, dec, &got,
	    err) == 0, "%s", err);
	ck_assert_int_eq(got.step, STEPS);
	ck_assert_int_eq(kn_soma_create(&m, &sh, kn_cpu_backend(), err), 0);
	ck_assert_int_eq(kn_soma_set_body(m, body, err), 0);
	ck_assert_int_eq(kn_soma_set_decoder(m, dec, err), 0);
	free(body);
	free(dec);
	return m;
}

/* The routed mixture of experts 0 and 1 on the held-out windows whose
 * top-2 are those two (expert 2 has no daemon), scored here; its window
 * count in *count.  Also checks each daemon's published scores against
 * its checkpoint's. */
static double
mixture_here(long *count)
{
	char path[300], err[KN_ERR_LEN], *text;
	int sel[WINDOWS * 2], e, j;
	size_t len;
	sa_windows w;
	sa_router r;
	long idx[WINDOWS], i;
	float *lp = malloc((size_t)WINDOWS * WIN_T * sizeof(float));
	double *mix = calloc((size_t)WINDOWS * WIN_T, sizeof(double)), s = 0;

	snprintf(path, sizeof(path), "%s/valid.txt", dir);
	read_all(path, &text, &len);
	sa_windows_init(&w, (const unsigned char *)text, len, WIN_T, WINDOWS);
	ck_assert_int_eq(w.n, WINDOWS);
	snprintf(path, sizeof(path), "%s/clusters/router.smr", dir);
	ck_assert_msg(sa_router_load(&r, path, err) == 0, "%s", err);
	ck_assert_int_eq(sa_route_windows(&r, &w, 64, 2, sel, err), 2);
	sa_router_free(&r);
	for (e = 0; e < 2; e++) {
		kn_soma_model *m = download_expert(e);
		pr_heldout_meta hm;
		uint32_t *hidx;
		float *hlp;
		tu_body b;
		long n = 0;

		/* the daemon's scores: the windows routed to it, its logp */
		for (i = 0; i < WINDOWS; i++)
			if (sel[2 * i] == e || sel[2 * i + 1] == e)
				idx[n++] = i;
		ck_assert_int_eq(tu_http_get(base_port + e, "/v1/soma/heldout",
		    &b), 200);
		ck_assert_msg(pr_heldout_decode(b.data, b.len, &hm, &hidx,
		    &hlp, err) == 0, "%s", err);
		ck_assert_str_eq(hm.run_id, run_id);
		ck_assert_int_eq(hm.expert, e);
		ck_assert_int_eq(hm.step, STEPS);
		ck_assert_int_eq(hm.count, n);
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(sa_score(m, &w, idx, n, lp, err), 0);
		for (i = 0; i < n; i++)
			ck_assert_int_eq(hidx[i], idx[i]);
		ck_assert_double_le(tu_max_rel_err(lp, hlp, (size_t)n * WIN_T,
		    1e-3), 1e-5);
		free(hidx);
		free(hlp);
		/* the same message with a byte more is refused */
		b.data = realloc(b.data, b.len + 1);
		ck_assert(pr_heldout_decode(b.data, b.len + 1, &hm, &hidx,
		    &hlp, err) != 0);
		ck_assert_ptr_null(hidx);
		free(b.data);
		/* the mixture here, over the windows of experts 0 and 1 */
		n = 0;
		for (i = 0; i < WINDOWS; i++)
			if (sel[2 * i] + sel[2 * i + 1] == 1)
				idx[n++] = i;
		ck_assert_int_eq(sa_score(m, &w, idx, n, lp, err), 0);
		for (i = 0; i < n; i++)
			for (j = 0; j < WIN_T; j++)
				mix[i * WIN_T + j] += exp(lp[i * WIN_T + j]) / 2;
		*count = n;
		kn_soma_free(m);
	}
	for (i = 0; i < *count * WIN_T; i++)
		s -= log(mix[i]);
	free(lp);
	free(mix);
	free(text);
	return s / ((double)*count * WIN_T);
}

/* promtool check metrics prints nothing on expert i's text, where
 * promtool (Debian package prometheus) is installed. */
static void
promtool_metrics(const char *text, int i)
{
	char name[32], out[4096];

	if (tu_run_cmd(NULL, 0, "command -v promtool >/dev/null") != 0) {
		fprintf(stderr, "check_soma_daemon: promtool is not installed "
		    "(Debian package prometheus): /metrics not checked\n");
		return;
	}
	snprintf(name, sizeof(name), "metrics%d.txt", i);
	tu_write_file(dir, name, text);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "promtool check metrics < "
	    "%s/%s 2>&1", dir, name) == 0 && out[0] == '\0', "promtool on "
	    "expert %d: %s", i, out);
}

START_TEST(test_two_experts)
{
	char seed[300], out[65536], path[300];
	json_t *st, *j, *mix;
	long long metrics_port;
	tu_body b;
	double here, v;
	char run[PR_RUN_ID_LEN];
	long count;
	int i;

	write_peers("");
	for (i = 0; i < 2; i++) {
		snprintf(seed, sizeof(seed), "%s/state%d/seed.ckpt", dir, i);
		train_seed(seed);
	}
	start(0);
	start(1);
	ck_assert_msg(tu_wait_state(base_port, 2, "done", 40),
	    "the experts are not done");
	for (i = 0; i < 2; i++) {
		/* the expert progressed through its validations */
		ck_assert(log_has(i, "step 20: validation"));
		ck_assert(log_has(i, "step 40: validation"));
		ck_assert_ptr_nonnull(st = tu_status(base_port + i));
		ck_assert_str_eq(json_string_value(json_object_get(st,
		    "method")), "soma");
		snprintf(run, sizeof(run), "%s", json_string_value(
		    json_object_get(st, "run_id")));
		ck_assert_int_eq(json_integer_value(json_object_get(st,
		    "expert")), i);
		ck_assert_int_eq(json_integer_value(json_object_get(st,
		    "step")), STEPS);
		ck_assert_int_eq(json_integer_value(json_object_get(st,
		    "steps")), STEPS);
		ck_assert_int_eq(json_integer_value(json_object_get(st,
		    "val_step")), STEPS);
		ck_assert_int_eq(json_integer_value(json_object_get(st,
		    "positions")), STEPS * (long long)sa_step_positions(&spec,
		    SA_EXPERT, 0));
		ck_assert(json_real_value(json_object_get(st, "val_loss")) > 0);
		ck_assert(json_real_value(json_object_get(st, "lr")) > 0);
		ck_assert(json_real_value(json_object_get(st,
		    "positions_per_s")) > 0);
		metrics_port = atoll(strchr(json_string_value(json_object_get(
		    st, "metrics")), ':') + 1);
		json_decref(st);
		ck_assert_int_eq(tu_http_get((int)metrics_port, "/metrics", &b),
		    200);
		ck_assert_ptr_nonnull(strstr(b.data, "blocktrain_val_loss_nats"));
		ck_assert(tu_sample(b.data, "blocktrain_heldout_step", &v) &&
		    v == 60);
		/* every sample carries the run and the expert */
		snprintf(path, sizeof(path), "blocktrain_steps_total{run=\"%s\","
		    "expert=\"%d\"}", run, i);
		ck_assert_msg(tu_sample(b.data, path, &v) && v == 60, "no %s 60",
		    path);
		ck_assert(tu_sample(b.data, "blocktrain_run_steps", &v) &&
		    v == 60);
		ck_assert(tu_sample(b.data, "blocktrain_run_info{method=\"soma\"}",
		    &v) && v == 1);
		ck_assert(tu_sample(b.data, "blocktrain_state{state=\"done\"}",
		    &v) && v == 1);
		promtool_metrics(b.data, i);
		free(b.data);
	}
	/* another expert's checkpoint is not here; no rounds */
	ck_assert_int_eq(tu_http_get(base_port, "/v1/blocks/1/checkpoint", &b),
	    404);
	free(b.data);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/blocks/0/rounds/0/"
	    "updates", &b), 404);
	free(b.data);

	here = mixture_here(&count);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s status --peers "
	    "%s/peers --json 2>/dev/null", tu_shardmeter(), dir), 0);
	ck_assert_ptr_nonnull(j = json_loads(strchr(out, '{'), 0, NULL));
	mix = json_object_get(j, "mixture");
	ck_assert_int_eq(json_integer_value(json_object_get(mix, "reported")),
	    2);
	ck_assert_int_eq(json_integer_value(json_object_get(mix,
	    "windows_mixed")), count);
	ck_assert_int_eq(json_integer_value(json_object_get(mix, "windows")),
	    WINDOWS);
	ck_assert(!json_is_true(json_object_get(mix, "complete")));
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(
	    json_object_get(mix, "missing"), 0), "expert")), 2);
	ck_assert_msg(fabs(json_real_value(json_object_get(mix,
	    "nats_per_byte")) - here) < 1e-4, "status %.6f, here %.6f",
	    json_real_value(json_object_get(mix, "nats_per_byte")), here);
	tu_report("mixture: status against scored here", fabs(
	    json_real_value(json_object_get(mix, "nats_per_byte")) - here));
	json_decref(j);
	/* the table names the missing expert */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s status --peers "
	    "%s/peers", tu_shardmeter(), dir), 0);
	ck_assert_ptr_nonnull(strstr(out, "missing expert 2"));
	ck_assert_ptr_nonnull(strstr(out, "experts reported: 2 of 3"));

	/* an identity the peer list does not name gets nothing */
	snprintf(path, sizeof(path), "%s/outsider", dir);
	{
		char err[KN_ERR_LEN];

		ck_assert_int_eq(id_create(path, 0, err), 0);
	}
	tu_act_as(path);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/soma/heldout", &b), 0);
	free(b.data);
	ck_assert_int_eq(tu_http_get(base_port, "/v1/blocks/0/checkpoint",
	    &b), 0);
	free(b.data);
	tu_act_as(NULL);

	ck_assert_int_eq(tu_stop(&pids[0], SIGTERM, 15), 0);
	ck_assert_int_eq(tu_stop(&pids[1], SIGTERM, 15), 0);
}
END_TEST

START_TEST(test_seed_refused)
{
	char out[8192], seed[300], err[KN_ERR_LEN];
	pr_spec other = spec;
	char other_id[PR_RUN_ID_LEN];

	write_peers("");
	ck_assert_int_ne(check_config(2, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "no seed") != NULL &&
	    strstr(out, "state2/seed.ckpt") != NULL &&
	    strstr(out, "shardmeter train") != NULL, "%s", out);
	/* the seed of another run */
	other.seed = 6;
	ck_assert(pr_spec_run_id(&other, other_id, err) == 0);
	{
		pr_spec keep = spec;
		char keep_id[PR_RUN_ID_LEN];

		memcpy(keep_id, run_id, sizeof(keep_id));
		spec = other;
		memcpy(run_id, other_id, sizeof(run_id));
		snprintf(seed, sizeof(seed), "%s/state2/seed.ckpt", dir);
		train_seed(seed);
		spec = keep;
		memcpy(run_id, keep_id, sizeof(run_id));
	}
	ck_assert_int_ne(check_config(2, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "is not the seed of this run") != NULL,
	    "%s", out);
	/* this run's seed: the configuration is good */
	train_seed(seed);
	ck_assert_msg(check_config(2, out, sizeof(out)) == 0, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "expert 2 of 3"));
}
END_TEST

START_TEST(test_peer_lines_refused)
{
	static const struct {
		const char *line;
		const char *want;
	} bad[] = {
		{ "127.0.0.1:%d expert=x", "'expert=x' is not expert=E" },
		{ "127.0.0.1:%d expert=-1", "is not expert=E" },
		{ "127.0.0.1:%d expert=01", "is not expert=E" },
		{ "127.0.0.1:%d 2", "a block line among expert lines" },
		{ "127.0.0.1:%d expert=1", "expert 1 is already trained" },
		{ "127.0.0.1:%d expert=7", "host:port expert=E peer-id" },
	};
	char out[8192], line[128], seed[300];
	size_t i;

	snprintf(seed, sizeof(seed), "%s/state0/seed.ckpt", dir);
	write_peers("");
	train_seed(seed);
	ck_assert_msg(check_config(0, out, sizeof(out)) == 0, "%s", out);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(line, sizeof(line), bad[i].line, base_port + 9);
		strcat(line, "\n");
		write_peers(line);
		ck_assert_int_ne(check_config(0, out, sizeof(out)), 0);
		/* three daemon lines and the client's come first */
		ck_assert_msg(strstr(out, "peers:5:") != NULL &&
		    strstr(out, bad[i].want) != NULL, "%s: %s", line, out);
	}
	/* an expert the spec does not have, on a line with its peer id */
	{
		char extra[256] = "", state[300];

		snprintf(state, sizeof(state), "%s/state9", dir);
		expert_line(extra, sizeof(extra), base_port + 9, 7, state);
		write_peers(extra);
		ck_assert_int_ne(check_config(0, out, sizeof(out)), 0);
		ck_assert_msg(strstr(out, "peers:5:") != NULL && strstr(out,
		    "expert 7 does not exist: the spec has 3") != NULL, "%s",
		    out);
	}
	/* a BlockTrain list for a SOMA spec: our own line is named */
	{
		char text[2048] = "", state[300];

		snprintf(state, sizeof(state), "%s/state0", dir);
		tu_peer_line(text, sizeof(text), base_port, 1, state);
		tu_write_file(dir, "peers", text);
		ck_assert_int_ne(check_config(0, out, sizeof(out)), 0);
		ck_assert_msg(strstr(out, "peers:1:") != NULL &&
		    strstr(out, "expert=E") != NULL, "%s", out);
	}
}
END_TEST

/* The held-out message round-trips, and a decoder refuses each kind of
 * damage with nothing returned. */
START_TEST(test_heldout_strict)
{
	pr_heldout_meta m = { .expert = 1, .experts = 3, .top_k = 2,
	    .step = 7, .T = 2, .windows = 5, .count = 3 }, got;
	uint32_t idx[3] = { 0, 2, 4 }, *gi;
	float lp[6] = { -1, -2, -0.5f, -3, -0.25f, 0 }, *gl;
	char *buf, err[KN_ERR_LEN];
	size_t len, at;

	memset(m.run_id, 'a', 64);
	ck_assert_msg(pr_heldout_encode(&m, idx, lp, &buf, &len, err) == 0,
	    "%s", err);
	ck_assert_msg(pr_heldout_decode(buf, len, &got, &gi, &gl, err) == 0,
	    "%s", err);
	ck_assert_int_eq(got.count, 3);
	ck_assert_int_eq(gi[2], 4);
	ck_assert(gl[3] == -3.0f);
	free(gi);
	free(gl);
	/* a window number out of order */
	at = tu_find(buf, len, "index") + 5 + 2;        /* bin8: c4 n */
	buf[at + 4] = 0;
	ck_assert(pr_heldout_decode(buf, len, &got, &gi, &gl, err) != 0);
	tu_assert_refused(err, "ascend");
	ck_assert_ptr_null(gi);
	buf[at + 4] = 2;
	/* a probability above 1, then a NaN */
	at = tu_find(buf, len, "logp") + 4 + 2;
	memcpy(buf + at, &(float){ 0.5f }, 4);
	ck_assert(pr_heldout_decode(buf, len, &got, &gi, &gl, err) != 0);
	tu_assert_refused(err, "finite and <= 0");
	memcpy(buf + at, &(float){ NAN }, 4);
	ck_assert(pr_heldout_decode(buf, len, &got, &gi, &gl, err) != 0);
	memcpy(buf + at, &(float){ -1 }, 4);
	ck_assert(pr_heldout_decode(buf, len, &got, &gi, &gl, err) == 0);
	free(gi);
	free(gl);
	/* cut short, and another magic */
	ck_assert(pr_heldout_decode(buf, len - 1, &got, &gi, &gl, err) != 0);
	buf[tu_find(buf, len, "SOMA")] = 'X';
	ck_assert(pr_heldout_decode(buf, len, &got, &gi, &gl, err) != 0);
	free(buf);
	/* the encoder refuses a routing that is not one */
	m.top_k = 4;
	ck_assert(pr_heldout_encode(&m, idx, lp, &buf, &len, err) != 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("soma_daemon");
	TCase *tc = tcase_create("soma_daemon");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_heldout_strict);
	tcase_add_test(tc, test_two_experts);
	tcase_add_test(tc, test_seed_refused);
	tcase_add_test(tc, test_peer_lines_refused);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
