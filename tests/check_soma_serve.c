/* SOMA serving end to end: two blocktraind -S hosts on loopback serving
 * two experts each over mutual TLS (the test a listed client), a router
 * clustered from generated text, experts with seeded random weights.
 * The host-side LSTM step against the batched model, the served mixture
 * against the one in this process and shardmeter eval, generation byte
 * for byte, who may connect, bad frames, and a host that is down. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/pipeline/pipeline_client.h"
#include "daemon/pipeline/soma_client.h"
#include "daemon/net/tls.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "proto/spec.h"
#include "soma/model_file.h"
#include "soma/step.h"
#include "soma/trainer.h"
#include "tests/testutil.h"

#define N 4
#define HOSTS 2

static char dir[64], spec_path[128], hosts_path[128], test_path[128];
static int base_port;
static pid_t host_pid[HOSTS];
static pr_spec spec;
static char run_id[PR_RUN_ID_LEN];
static tls_ctx *operator_tls;
static ph_list hosts;
static sa_router router;

static const char *const kinds[N][6] = {
	{ "the", "river", "stone", "green", "hill", "light" },
	{ "engine", "piston", "valve", "torque", "gear", "shaft" },
	{ "violin", "sonata", "chord", "tempo", "melody", "choir" },
	{ "wheat", "barley", "harvest", "field", "plough", "grain" },
};

/* Lines of one kind of words (kind < N), or of all kinds mixed. */
static void
make_text(const char *path, int kind, size_t len, uint64_t seed)
{
	FILE *f = fopen(path, "w");
	kn_rng r;
	size_t n = 0;

	ck_assert_ptr_nonnull(f);
	kn_rng_init(&r, seed, (uint64_t)kind);
	while (n < len) {
		int k = kind < N ? kind : (int)kn_rng_below(&r, N);

		n += (size_t)fprintf(f, "%s%s", kinds[k][kn_rng_below(&r, 6)],
		    kn_rng_below(&r, 8) == 0 ? ".\n" : " ");
	}
	fclose(f);
}

/* Expert e with seeded random weights, as shardmeter train would write
 * it. */
static void
make_expert(int e)
{
	kn_soma_shape sh = sa_expert_shape(&spec);
	float *body = malloc(kn_soma_body_params(&sh) * sizeof(float));
	float *dec = malloc(kn_soma_decoder_params(&sh) * sizeof(float));
	pr_ckpt_meta meta = { .block = e, .kind = "expert" };
	char err[KN_ERR_LEN], path[160];
	kn_soma_model *m;

	ck_assert(kn_soma_create(&m, &sh, kn_cpu_backend(), err) == 0);
	ck_assert(kn_soma_init(m, 100 + (uint64_t)e, err) == 0);
	kn_soma_get_body(m, body);
	kn_soma_get_decoder(m, dec);
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", run_id);
	snprintf(path, sizeof(path), "%s/run/expert-%d.ckpt", dir, e);
	ck_assert_msg(sa_model_save(path, &meta, &sh, body, dec, err) == 0,
	    "%s", err);
	kn_soma_free(m);
	free(body);
	free(dec);
}

static void
start_host(int i)
{
	char listen[32], log[128], state[128], conf[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(state, sizeof(state), "%s/host%d", dir, i);
	snprintf(conf, sizeof(conf), "%s/serve.conf", dir);
	host_pid[i] = tu_daemon_start(log, base_port + i, "-S", "-f", "-c",
	    conf, "-L", listen, "-P", hosts_path, "-s", state, "-r", spec_path,
	    "-D", "cpu", "-t", "1", (char *)NULL);
}

static void
setup_once(void)
{
	char text[4096], files[512] = "", out[4096], err[PR_ERR_LEN];
	char path[160];
	int i, e;

	tu_temp_dir(dir, sizeof(dir), "check_soma_serve");
	tu_trust_init(dir);
	for (i = 0; i < N; i++) {
		snprintf(path, sizeof(path), "%s/kind%d.txt", dir, i);
		make_text(path, i, 12000, 3);
		snprintf(files + strlen(files), sizeof(files) - strlen(files),
		    " %s", path);
	}
	snprintf(test_path, sizeof(test_path), "%s/test.txt", dir);
	make_text(test_path, N, 6000, 9);
	/* the kinds share no word, so there is no leading direction of
	 * shared words to leave out: each of the 4 is a kind's */
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s cluster --experts %d "
	    "--out %s/clusters --dims 4 --skip-dims 0 --chunk 200 --seed 2%s",
	    tu_shardmeter(), N, dir, files) == 0, "cluster: %s", out);
	snprintf(text, sizeof(text), "seed = 5\nmethod = soma\n[data]\n"
	    "valid = %s\ntest = %s\n[soma]\nexperts = %d\nwidth = 8\n"
	    "mlp_mult = 2\nlayers = 2\nwindow = 16\nbatch = 4\n"
	    "perturbations = 4\nseed_steps = 2\nsteps = 2\neval_every = 1\n"
	    "top_k = 2\nroute_bytes = 48\nclusters = %s/clusters\n", test_path,
	    test_path, N, dir);
	tu_write_file(dir, "spec.conf", text);
	snprintf(spec_path, sizeof(spec_path), "%s/spec.conf", dir);
	ck_assert_msg(pr_spec_load(&spec, spec_path, err) == 0, "%s", err);
	ck_assert(pr_spec_run_id(&spec, run_id, err) == 0);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "mkdir -p %s/run", dir), 0);
	for (e = 0; e < N; e++)
		make_expert(e);
	snprintf(path, sizeof(path), "%s/clusters/router.smr", dir);
	ck_assert_msg(sa_router_load(&router, path, err) == 0, "%s", err);
	/* host i serves experts 2i and 2i + 1: its line as tu_peer_line
	 * writes it (the identity made, the port pinned), then experts= */
	base_port = tu_port_base(HOSTS);
	text[0] = '\0';
	for (i = 0; i < HOSTS; i++) {
		char state[128], line[512], *sp;

		snprintf(state, sizeof(state), "%s/host%d", dir, i);
		ck_assert_int_eq(tu_run_cmd(NULL, 0, "mkdir -p %s && ln -sf "
		    "%s/run/expert-%d.ckpt %s/run/expert-%d.ckpt %s/", state, dir,
		    2 * i, dir, 2 * i + 1, state), 0);
		line[0] = '\0';
		tu_peer_line(line, sizeof(line), base_port + i, 1, state);
		sp = strchr(line, ' ');
		snprintf(text + strlen(text), sizeof(text) - strlen(text),
		    "%.*s experts=%d-%d%s", (int)(sp - line), line, 2 * i,
		    2 * i + 1, strchr(sp + 1, ' '));
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "hosts", text);
	snprintf(hosts_path, sizeof(hosts_path), "%s/hosts", dir);
	tu_write_file(dir, "serve.conf", "");
	ck_assert_msg(ph_load(&hosts, hosts_path, err) == 0, "%s", err);
	ck_assert_msg(tls_ctx_new(&operator_tls, tu_client_dir(), err) == 0,
	    "%s", err);
	for (i = 0; i < HOSTS; i++)
		start_host(i);
}

static void
cleanup_once(void)
{
	int i;

	for (i = 0; i < HOSTS; i++)
		tu_stop(&host_pid[i], SIGTERM, 10);
	tls_ctx_free(operator_tls);
	ph_free(&hosts);
	sa_router_free(&router);
	tu_remove_dir(dir);
}

static sq_experts *
open_local(void)
{
	char err[KN_ERR_LEN], run[128];
	sq_experts *x;

	snprintf(run, sizeof(run), "%s/run", dir);
	ck_assert_msg(sq_open_local(&x, &spec, run_id, run, kn_cpu_backend(),
	    err) == 0, "%s", err);
	return x;
}

static sq_experts *
open_served(void)
{
	char err[KN_ERR_LEN];
	sq_experts *x;

	ck_assert_msg(sq_open_served(&x, &spec, &hosts, operator_tls, 10000,
	    err) == 0, "%s", err);
	return x;
}

/* The step the hosts run, against the batched model's last logits. */
START_TEST(test_step_matches_model)
{
	static const char ctx[] = "engine valve torque and the river";
	kn_soma_shape sh = sa_expert_shape(&spec);
	size_t nb = kn_soma_body_params(&sh), nd = kn_soma_decoder_params(&sh);
	float *body = malloc(nb * sizeof(float)), *dec = malloc(nd *
	    sizeof(float)), *state, logp[256], logits[256];
	int32_t tok[sizeof(ctx)];
	char err[KN_ERR_LEN], path[160];
	kn_soma_model *m;
	sa_stepper st;
	double mx = -1e30, sum = 0, worst = 0;
	int T = (int)strlen(ctx), t, c;

	snprintf(path, sizeof(path), "%s/run/expert-1.ckpt", dir);
	ck_assert(sa_model_load(path, NULL, &sh, body, dec, NULL, err) == 0);
	ck_assert(kn_soma_create(&m, &sh, kn_cpu_backend(), err) == 0);
	ck_assert(kn_soma_set_body(m, body, err) == 0);
	ck_assert(kn_soma_set_decoder(m, dec, err) == 0);
	ck_assert(sa_stepper_init(&st, &sh, body, dec, err) == 0);
	state = calloc(sa_step_state_len(&sh), sizeof(float));
	for (t = 0; t < T; t++) {
		tok[t] = (unsigned char)ctx[t];
		sa_step(&st, state, tok[t], t + 1 == T ? logp : NULL);
	}
	ck_assert(kn_soma_last_logits(m, tok, 1, T, logits, err) == 0);
	for (c = 0; c < 256; c++)
		mx = logits[c] > mx ? logits[c] : mx;
	for (c = 0; c < 256; c++)
		sum += exp(logits[c] - mx);
	for (c = 0; c < 256; c++) {
		double want = logits[c] - mx - log(sum);

		worst = fmax(worst, fabs(want - logp[c]));
	}
	tu_report("step against last_logits, max |d logp|", worst);
	ck_assert_msg(worst < 1e-4, "max |d logp| %g", worst);
	free(state);
	sa_stepper_free(&st);
	kn_soma_free(m);
	free(body);
	free(dec);
}
END_TEST

/* Scoring through the hosts equals the mixture in this process and
 * shardmeter eval's routed mixture on the same windows. */
START_TEST(test_score_equals_eval)
{
	char err[KN_ERR_LEN], out[8192], *p;
	sq_experts *local = open_local(), *served = open_served();
	unsigned char *text;
	sa_windows w;
	sq_stats st;
	double a, b, ev;
	size_t len;
	FILE *f = fopen(test_path, "rb");

	ck_assert_ptr_nonnull(f);
	text = malloc(8192);
	len = fread(text, 1, 8192, f);
	fclose(f);
	sa_windows_init(&w, text, len, spec.soma.window, 100);
	ck_assert_msg(sq_score(local, &router, &w, &a, &st, err) == 0, "%s",
	    err);
	ck_assert_msg(sq_score(served, &router, &w, &b, &st, err) == 0, "%s",
	    err);
	ck_assert_int_eq(st.rounds, 1);
	ck_assert_int_le(st.frames, N);
	ck_assert_msg(fabs(a - b) < 1e-4, "in process %.6f, served %.6f", a, b);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s eval --spec %s --dir "
	    "%s/run --split test --windows 100 --json 2>/dev/null",
	    tu_shardmeter(), spec_path, dir) == 0, "eval: %s", out);
	p = strstr(out, "\"mixture\"");
	ck_assert_ptr_nonnull(p);
	p = strstr(p, "\"nats_per_byte\":");
	ck_assert_ptr_nonnull(p);
	ev = strtod(p + strlen("\"nats_per_byte\":"), NULL);
	tu_report("served score against eval, |d nats/byte|", fabs(ev - b));
	ck_assert_msg(fabs(ev - b) < 1e-4, "eval %.6f, served %.6f", ev, b);
	sq_close(local);
	sq_close(served);
	free(text);
}
END_TEST

/* shardmeter train makes a new run directory (not its parents: a
 * mistyped path fails with the reason) and trains the seed into it. */
START_TEST(test_train_new_dir)
{
	char out[8192], path[160];

	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec %s --dir "
	    "%s/fresh --seed --quiet --threads 1", tu_shardmeter(), spec_path,
	    dir) == 0, "train: %s", out);
	snprintf(path, sizeof(path), "%s/fresh/seed.ckpt", dir);
	ck_assert_int_eq(access(path, R_OK), 0);
	ck_assert_int_ne(tu_run_cmd(out, sizeof(out), "%s train --spec %s "
	    "--dir %s/no/such --seed --quiet", tu_shardmeter(), spec_path,
	    dir), 0);
	ck_assert_msg(strstr(out, "cannot create") != NULL &&
	    strstr(out, "No such file") != NULL, "%s", out);
}
END_TEST

/* A number that follows "key": inside the object of eval's --json
 * output that follows "name":, or -1 where there is none. */
static double
json_field(const char *out, const char *name, const char *key)
{
	char want[96];
	const char *p, *end;

	snprintf(want, sizeof(want), "\"%s\":", name);
	if ((p = strstr(out, want)) == NULL || (end = strchr(p, '}')) == NULL)
		return -1;
	snprintf(want, sizeof(want), "\"%s\":", key);
	if ((p = strstr(p, want)) == NULL || p > end)
		return -1;
	return strtod(p + strlen(want), NULL);
}

/* shardmeter train --control spsa on the default budget also writes the
 * control at SOMA's forward multiply-adds, on fewer positions (a
 * control position costs more), and eval scores it with both counts. */
START_TEST(test_control_equal_macs)
{
	char out[16384];
	double pos, macs, soma_pos, soma_macs, full_pos, step_macs;
	kn_soma_shape c = sa_control_shape(&spec);

	ck_assert_msg(tu_run_cmd(out, sizeof(out), "mkdir -p %s/ctl && ln -sf "
	    "%s/run/expert-*.ckpt %s/ctl/ && %s train --spec %s --dir %s/ctl "
	    "--control spsa --threads 1 2>&1", dir, dir, dir, tu_shardmeter(),
	    spec_path, dir) == 0, "train: %s", out);
	ck_assert_msg(strstr(out, "at SOMA's multiply-adds") != NULL, "%s",
	    out);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s eval --spec %s --dir "
	    "%s/ctl --split test --windows 20 --json 2>/dev/null",
	    tu_shardmeter(), spec_path, dir) == 0, "eval: %s", out);
	soma_pos = json_field(out, "mixture", "positions");
	soma_macs = json_field(out, "mixture", "macs");
	full_pos = json_field(out, "spsa-p4", "positions");
	pos = json_field(out, "spsa-p4-eqmacs", "positions");
	macs = json_field(out, "spsa-p4-eqmacs", "macs");
	step_macs = (double)sa_step_positions(&spec, SA_SPSA, 4) *
	    (double)kn_soma_forward_macs(&c);
	ck_assert_msg(soma_pos > 0 && pos > 0 && full_pos >= soma_pos, "%s",
	    out);
	ck_assert(pos < soma_pos);
	ck_assert(json_field(out, "spsa-p4-eqmacs", "nats_per_byte") > 0);
	/* the first step at or past SOMA's multiply-adds */
	ck_assert_msg(macs >= soma_macs && macs < soma_macs + step_macs,
	    "%g MACs against SOMA's %g", macs, soma_macs);
	ck_assert(fabs(json_field(out, "spsa-p4", "macs") - full_pos *
	    (double)kn_soma_forward_macs(&c)) < 1);
}
END_TEST

/* The same bytes for a seed, in this process and through the hosts, one
 * round trip per byte, routed as the router says. */
START_TEST(test_generate_same)
{
	static const char *const prompts[] = { "the river and the stone ",
	    "violin sonata chord ", "wheat barley field engine " };
	static const double temps[] = { 1.0, 0.7, 0.0 };
	sq_experts *local = open_local(), *served = open_served();
	unsigned char a[48], b[48];
	char err[KN_ERR_LEN];
	sq_stats sa, sb;
	int i, sel[N], k;

	for (i = 0; i < 3; i++) {
		const char *p = prompts[i];

		ck_assert_msg(sq_generate(local, &router, p, strlen(p), 48,
		    temps[i], 11 + i, a, &sa, err) == 0, "%s", err);
		ck_assert_msg(sq_generate(served, &router, p, strlen(p), 48,
		    temps[i], 11 + i, b, &sb, err) == 0, "%s", err);
		ck_assert_msg(memcmp(a, b, sizeof(a)) == 0, "prompt %d: the "
		    "served bytes differ", i);
		ck_assert_int_eq(sb.rounds, 48);
		ck_assert_int_eq(sb.frames, 48 * 2);
		k = sa_route(&router, p, strlen(p), 48, 2, sel, NULL, err);
		ck_assert_int_eq(k, 2);
		ck_assert_int_eq(sb.k, 2);
		ck_assert_int_eq(sb.experts[0], sel[0]);
		ck_assert_int_eq(sb.experts[1], sel[1]);
	}
	/* another seed, another text */
	ck_assert(sq_generate(served, &router, prompts[0], 10, 48, 1.0, 99, b,
	    &sb, err) == 0);
	ck_assert(sq_generate(served, &router, prompts[0], 10, 48, 1.0, 11, a,
	    &sb, err) == 0);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	sq_close(local);
	sq_close(served);
}
END_TEST

/* A connection as the operator to host i. */
static pc_conn *
connect_host(int i)
{
	char err[KN_ERR_LEN];
	pc_conn *c;

	ck_assert_msg(pc_connect(&c, hosts.v[i].addr, operator_tls,
	    hosts.v[i].id, 5000, err) == 0, "%s", err);
	return c;
}

static void
step(pc_conn *c, uint64_t id, int expert, int pos, const char *bytes,
    pl_frame *ans)
{
	pl_frame f = { .type = PL_STEP, .id = id, .expert = expert,
	    .pos = pos, .data = (unsigned char *)bytes,
	    .data_len = strlen(bytes) };
	char err[KN_ERR_LEN];

	ck_assert_msg(pc_send_frame(c, &f, err) == 0, "%s", err);
	ck_assert_msg(pc_recv_frame(c, ans, 5000, err) == 0, "%s", err);
}

/* Refused requests and a malformed frame leave a session as it was. */
START_TEST(test_bad_frames)
{
	pc_conn *c = connect_host(0), *bad;
	pl_frame ans, f = { .type = PL_SCORE, .id = 9, .expert = 0,
	    .count = 3, .width = 16 };
	unsigned char junk[10] = { 0 };
	char err[KN_ERR_LEN];
	kn_soma_shape sh = sa_expert_shape(&spec);
	size_t nb = kn_soma_body_params(&sh), nd = kn_soma_decoder_params(&sh);
	float *body = malloc(nb * sizeof(float)), *dec = malloc(nd *
	    sizeof(float)), *state, logp[256];
	char path[160];
	sa_stepper st;
	const char *all = "gear shaft";
	size_t i;

	step(c, 7, 1, 0, "gear ", &ans);
	ck_assert_int_eq(ans.type, PL_DIST);
	ck_assert_int_eq(ans.pos, 5);
	pl_frame_clear(&ans);
	/* out of step, twice opened, an expert of the other host */
	step(c, 7, 1, 4, "x", &ans);
	ck_assert_int_eq(ans.type, PL_ERR);
	ck_assert_ptr_nonnull(strstr(ans.message, "seen 5 bytes"));
	pl_frame_clear(&ans);
	step(c, 7, 1, 0, "x", &ans);
	ck_assert_int_eq(ans.type, PL_ERR);
	pl_frame_clear(&ans);
	step(c, 7, 2, 0, "x", &ans);
	ck_assert_int_eq(ans.type, PL_ERR);
	ck_assert_ptr_nonnull(strstr(ans.message, "not served here"));
	pl_frame_clear(&ans);
	/* a score frame whose data does not match its count and width, on
	 * a connection of its own: the host closes that one */
	bad = connect_host(0);
	f.data = junk;
	f.data_len = sizeof(junk);
	ck_assert(pc_send_frame(bad, &f, err) == 0);
	ck_assert_int_ne(pc_recv_frame(bad, &ans, 5000, err), 0);
	pc_close(bad);
	/* the session goes on from where it was */
	step(c, 7, 1, 5, "shaft", &ans);
	ck_assert_int_eq(ans.type, PL_DIST);
	ck_assert_int_eq(ans.pos, 10);
	snprintf(path, sizeof(path), "%s/run/expert-1.ckpt", dir);
	ck_assert(sa_model_load(path, NULL, &sh, body, dec, NULL, err) == 0);
	ck_assert(sa_stepper_init(&st, &sh, body, dec, err) == 0);
	state = calloc(sa_step_state_len(&sh), sizeof(float));
	for (i = 0; i < strlen(all); i++)
		sa_step(&st, state, (unsigned char)all[i], i + 1 == strlen(all) ?
		    logp : NULL);
	ck_assert(memcmp(ans.data, logp, sizeof(logp)) == 0);
	pl_frame_clear(&ans);
	pc_close(c);
	free(state);
	sa_stepper_free(&st);
	free(body);
	free(dec);
}
END_TEST

/* An identity the host list does not name is refused. */
START_TEST(test_unlisted_client)
{
	char err[KN_ERR_LEN], stranger[128];
	tls_ctx *t;
	pc_conn *c;
	pl_frame ans, f = { .type = PL_STEP, .id = 1, .expert = 0,
	    .data = (unsigned char *)"a", .data_len = 1 };
	int rc;

	snprintf(stranger, sizeof(stranger), "%s/stranger", dir);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "%s init --dir %s >/dev/null "
	    "2>&1", tu_shardmeter(), stranger), 0);
	ck_assert_msg(tls_ctx_new(&t, stranger, err) == 0, "%s", err);
	rc = pc_connect(&c, hosts.v[0].addr, t, hosts.v[0].id, 5000, err);
	if (rc == 0) {
		/* TLS 1.3: the refusal comes as the first thing read */
		if ((rc = pc_send_frame(c, &f, err)) == 0)
			rc = pc_recv_frame(c, &ans, 5000, err);
		pc_close(c);
	}
	ck_assert_int_ne(rc, 0);
	ck_assert_int_ne(rc, PC_ETIMEDOUT);
	tls_ctx_free(t);
}
END_TEST

/* Requests go to the hosts of the nearest experts: with host 1 down, a
 * prompt routed to experts 0 and 1 only is answered, one routed to 2 or
 * 3 gets an error naming host 1. */
START_TEST(test_routing_and_host_down)
{
	char err[KN_ERR_LEN], prompt[80];
	unsigned char out[8];
	sq_experts *x;
	sq_stats st;
	int i, j, sel[2], ok = 0, down = 0;
	kn_rng r;

	tu_stop(&host_pid[1], SIGTERM, 10);
	x = open_served();
	kn_rng_init(&r, 4, 0);
	for (i = 0; i < 24; i++) {
		int a = (int)kn_rng_below(&r, N), b = (int)kn_rng_below(&r, N);
		int on1;

		snprintf(prompt, sizeof(prompt), "%s %s %s %s ", kinds[a][0],
		    kinds[a][1], kinds[b][2], kinds[a][3]);
		ck_assert_int_eq(sa_route(&router, prompt, strlen(prompt), 48, 2,
		    sel, NULL, err), 2);
		on1 = sel[0] >= 2 || sel[1] >= 2;
		j = sq_generate(x, &router, prompt, strlen(prompt), 8, 1.0, 1,
		    out, &st, err);
		if (on1) {
			ck_assert_int_ne(j, 0);
			ck_assert_msg(strstr(err, hosts.v[1].addr) != NULL &&
			    strstr(err, "down") != NULL, "%s", err);
			down++;
		} else {
			ck_assert_msg(j == 0, "%s", err);
			ok++;
		}
	}
	ck_assert_int_gt(ok, 0);
	ck_assert_int_gt(down, 0);
	sq_close(x);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("soma_serve");
	TCase *tc = tcase_create("loopback");
	int rc;

	tcase_add_unchecked_fixture(tc, setup_once, cleanup_once);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_step_matches_model);
	tcase_add_test(tc, test_score_equals_eval);
	tcase_add_test(tc, test_train_new_dir);
	tcase_add_test(tc, test_control_equal_macs);
	tcase_add_test(tc, test_generate_same);
	tcase_add_test(tc, test_bad_frames);
	tcase_add_test(tc, test_unlisted_client);
	tcase_add_test(tc, test_routing_and_host_down);
	suite_add_tcase(s, tc);
	rc = tu_run_suite(s);
	kn_pool_shutdown();
	return rc;
}
