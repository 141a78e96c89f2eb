/* shardmeter: the command-line tool.  Each subcommand is one function; the
 * table below dispatches them and feeds --help. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "daemon/blocktrain.h"
#include "daemon/cluster.h"
#include "daemon/pipeline_client.h"
#include "daemon/pipeline_hosts.h"
#include "daemon/train.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"

static int
read_file(const char *path, char **data, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long size;

	if (f == NULL) {
		fprintf(stderr, "shardmeter: cannot open %s: %s\n", path,
		    strerror(errno));
		return -1;
	}
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	*data = malloc((size_t)size + 1);
	if (*data == NULL || fread(*data, 1, (size_t)size, f) != (size_t)size) {
		fprintf(stderr, "shardmeter: cannot read %s\n", path);
		fclose(f);
		free(*data);
		return -1;
	}
	fclose(f);
	*len = (size_t)size;
	return 0;
}

/* demo: one block trained on a text file for a few hundred steps, to show
 * the compute core working end to end on this machine. */
static int
cmd_demo(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "steps", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *path = "/usr/share/common-licenses/GPL-3";
	kn_model_shape shape = { 64, 4, 2, 64, 0 };
	kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	kn_backend_kind kind = KN_BACKEND_AUTO;
	int steps = 300, threads = 0, B = 16, ch, step, b, i;
	char err[KN_ERR_LEN], note[KN_ERR_LEN], desc[512], *text;
	const kn_backend *be;
	kn_model *m;
	size_t len, N = (size_t)B * 64;
	int32_t *input, *target;
	float *weight, loss = 0, first = 0;
	double t0;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 's': steps = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'b':
			if (kn_backend_parse(optarg, &kind) != 0) {
				fprintf(stderr, "shardmeter demo: --backend takes "
				    "auto, cpu or cuda\n");
				return 2;
			}
			break;
		case 'h':
			printf("usage: shardmeter demo [--steps N] [--backend "
			    "auto|cpu|cuda] [--threads T] [FILE]\n"
			    "Trains one small masked-diffusion block on FILE "
			    "(default %s).\n", path);
			return 0;
		default: return 2;
		}
	}
	if (optind < argc)
		path = argv[optind];
	if (steps <= 0) {
		fprintf(stderr, "shardmeter demo: --steps must be positive\n");
		return 2;
	}
	if (read_file(path, &text, &len) != 0)
		return 1;
	if (len < 1000) {
		fprintf(stderr, "shardmeter demo: %s is too short (%zu bytes)\n",
		    path, len);
		free(text);
		return 1;
	}
	if (kn_pool_init(threads, err) != 0 ||
	    (be = kn_backend_get(kind, note, err)) == NULL ||
	    kn_model_create(&m, &shape, be, B, err) != 0) {
		fprintf(stderr, "shardmeter demo: %s\n", err);
		free(text);
		return 1;
	}
	if (note[0])
		fprintf(stderr, "shardmeter: %s\n", note);
	kn_backend_describe(be, desc, sizeof(desc));
	fprintf(stderr, "shardmeter: %s\n", desc);
	printf("demo: one block, width %d, %d layers, window %d, %zu "
	    "parameters, on %s (%zu bytes)\n", shape.width, shape.layers,
	    shape.window, kn_model_num_params(m), path, len);
	kn_model_init(m, 1);
	input = malloc(N * 4);
	target = malloc(N * 4);
	weight = malloc(N * 4);
	t0 = kn_now();
	for (step = 0; step < steps; step++) {
		kn_batch batch = { input, target, weight, B };
		kn_rng r;

		kn_rng_init(&r, 1, (uint64_t)step);
		for (b = 0; b < B; b++) {
			size_t start = kn_rng_below(&r, len - 64);
			/* stratified t over the batch, never below 1e-3 */
			float t = fmaxf((b + kn_rng_uniform(&r)) / B, 1e-3f);

			for (i = 0; i < 64; i++) {
				size_t p = (size_t)b * 64 + i;
				int masked = kn_rng_uniform(&r) < t;

				target[p] = (unsigned char)text[start + i];
				input[p] = masked ? KN_MASK : target[p];
				weight[p] = masked ? 1.0f / (t * 64) : 0.0f;
			}
		}
		if (kn_model_step(m, &batch, &opt, 2e-3f, &loss, err) != 0) {
			fprintf(stderr, "\nshardmeter demo: %s\n", err);
			break;
		}
		if (step == 0)
			first = loss;
		if (step % 10 == 0 || step == steps - 1) {
			double el = kn_now() - t0;

			printf("\rstep %d/%d  loss %.3f nats/byte  %.0f "
			    "positions/s  ETA %.0fs   ", step + 1, steps, loss,
			    (double)N * (step + 1) / el,
			    el / (step + 1) * (steps - step - 1));
			fflush(stdout);
		}
	}
	printf("\ndemo: loss %.3f -> %.3f nats/byte in %.1fs\n", first, loss,
	    kn_now() - t0);
	free(input); free(target); free(weight); free(text);
	kn_model_free(m);
	kn_pool_shutdown();
	return 0;
}

/* Options every run command shares. */
struct run_args {
	const char *spec_path;
	const char *dir;
	kn_backend_kind backend;
	int threads;
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	const kn_backend *be;
};

static int
open_run(struct run_args *a, const char *cmd, int need_dir)
{
	char err[PR_ERR_LEN], note[KN_ERR_LEN], desc[512];

	if (a->spec_path == NULL) {
		fprintf(stderr, "shardmeter %s: --spec FILE is required\n", cmd);
		return 2;
	}
	if (need_dir && a->dir == NULL) {
		fprintf(stderr, "shardmeter %s: --dir DIR is required\n", cmd);
		return 2;
	}
	if (pr_spec_load(&a->spec, a->spec_path, err) != 0 ||
	    pr_spec_run_id(&a->spec, a->run_id, err) != 0) {
		fprintf(stderr, "shardmeter %s: %s\n", cmd, err);
		return 1;
	}
	if (kn_pool_init(a->threads, err) != 0 ||
	    (a->be = kn_backend_get(a->backend, note, err)) == NULL) {
		fprintf(stderr, "shardmeter %s: %s\n", cmd, err);
		return 1;
	}
	if (note[0])
		fprintf(stderr, "shardmeter: %s\n", note);
	kn_backend_describe(a->be, desc, sizeof(desc));
	fprintf(stderr, "shardmeter: %s\n", desc);
	return 0;
}

/* Handles the shared options; returns 1 if it took ch, -1 on a bad value. */
static int
run_option(struct run_args *a, int ch, const char *cmd)
{
	switch (ch) {
	case 'S': a->spec_path = optarg; return 1;
	case 'D': a->dir = optarg; return 1;
	case 'T': a->threads = atoi(optarg); return 1;
	case 'B':
		if (kn_backend_parse(optarg, &a->backend) != 0) {
			fprintf(stderr, "shardmeter %s: --backend takes auto, "
			    "cpu or cuda\n", cmd);
			return -1;
		}
		return 1;
	}
	return 0;
}

#define RUN_OPTIONS \
	{ "spec", required_argument, NULL, 'S' }, \
	{ "dir", required_argument, NULL, 'D' }, \
	{ "threads", required_argument, NULL, 'T' }, \
	{ "backend", required_argument, NULL, 'B' }, \
	{ "help", no_argument, NULL, 'h' }

static int
parse_int_arg(const char *cmd, const char *name, const char *v, int lo,
    int hi, int *out)
{
	char *end;
	long x = strtol(v, &end, 10);

	if (end == v || *end != '\0' || x < lo || x > hi) {
		fprintf(stderr, "shardmeter %s: --%s takes an integer from %d "
		    "to %d, not '%s'\n", cmd, name, lo, hi, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

/* spec: validate a run spec and print its id and derived figures. */
static int
cmd_spec(int argc, char **argv)
{
	pr_spec s;
	char err[PR_ERR_LEN], id[PR_RUN_ID_LEN];
	kn_model_shape bs, es;
	double fl, np_block, np_e2e, act;
	int b;

	if (argc != 2 || strcmp(argv[1], "--help") == 0) {
		printf("usage: shardmeter spec FILE\nValidates a run spec and "
		    "prints its run id and derived figures.\n");
		return argc == 2 ? 0 : 2;
	}
	if (pr_spec_load(&s, argv[1], err) != 0 ||
	    pr_spec_run_id(&s, id, err) != 0) {
		fprintf(stderr, "shardmeter spec: %s\n", err);
		return 1;
	}
	bs = pr_spec_block_shape(&s);
	es = pr_spec_reference_shape(&s, 0);
	np_block = (double)kn_model_params_for(&bs);
	np_e2e = (double)kn_model_params_for(&es);
	fl = 3.0 * kn_model_flops_per_window(&bs) * s.batch;
	/* activations kept for backward, per window: about (18 d + h n)
	 * floats per position and layer, plus logits */
	act = 4.0 * s.batch * s.window * (s.layers_per_block *
	    (18.0 * s.width + (double)s.heads * s.window * 2) + 2 * 256);
	printf("run id      %s\n", id);
	printf("blocks      %d x %d layers, width %d, %d heads, window %d\n",
	    s.blocks, s.layers_per_block, s.width, s.heads, s.window);
	printf("intervals  ");
	for (b = 0; b < s.blocks; b++)
		printf(" (%.4g, %.4g]", s.cuts[b], s.cuts[b + 1]);
	printf("%s\n", s.equal_cuts ? " (equal)" : "");
	printf("parameters  %.0f per block (%.2f MB fp32), %.0f in the e2e "
	    "reference\n", np_block, np_block * 4 / 1e6, np_e2e);
	printf("compute     %.3f GFLOP per train step per block (batch %d), "
	    "%.1f TFLOP for %d steps\n", fl / 1e9, s.batch,
	    fl * s.steps / 1e12, s.steps);
	printf("memory      about %.0f MB per host (parameters, gradients, "
	    "AdamW moments, activations)\n", (np_block * 16 + act) / 1e6);
	printf("optimizer   AdamW lr %g (warmup %d, cosine to %g), wd %g, "
	    "betas (%g, %g), clip %g, batch %d, %d steps\n", s.lr, s.warmup,
	    s.lr_min, s.weight_decay, s.beta1, s.beta2, s.clip, s.batch,
	    s.steps);
	printf("sync        %d replicas per block, %d local steps per round, "
	    "outer lr %g, deadline %gs\n", s.replicas, s.local_steps,
	    s.outer_lr, s.round_deadline);
	return 0;
}

static volatile sig_atomic_t stop_requested;

static void
on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static int
train_all(struct run_args *a, int steps, int every)
{
	int T = a->spec.blocks, cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = T < cores ? T : cores, running = 0, next = 1, failed = 0;
	char threads[16];

	if (jobs < 1)
		jobs = 1;
	snprintf(threads, sizeof(threads), "%d", cores / jobs > 0 ?
	    cores / jobs : 1);
	fprintf(stderr, "shardmeter train: %d blocks, %d at a time, %s "
	    "thread(s) each; logs in %s/block-*.csv\n", T, jobs, threads,
	    a->dir);
	while (next <= T || running > 0) {
		int status;

		while (running < jobs && next <= T) {
			pid_t pid = fork();
			char blk[16], st[16], ev[16];

			if (pid < 0) {
				perror("shardmeter train: fork");
				return 1;
			}
			if (pid == 0) {
				snprintf(blk, sizeof(blk), "%d", next);
				snprintf(st, sizeof(st), "%d", steps);
				snprintf(ev, sizeof(ev), "%d", every);
				execl("/proc/self/exe", "shardmeter", "train",
				    "--spec", a->spec_path, "--dir", a->dir,
				    "--block", blk, "--steps", st, "--every", ev,
				    "--threads", threads, "--quiet", (char *)NULL);
				_exit(127);
			}
			running++;
			next++;
		}
		if (wait(&status) > 0) {
			running--;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				failed++;
		}
	}
	if (failed) {
		fprintf(stderr, "shardmeter train: %d block(s) failed\n",
		    failed);
		return 1;
	}
	fprintf(stderr, "shardmeter train: all %d blocks trained\n", T);
	return 0;
}

static int
cmd_train(int argc, char **argv)
{
	static const struct option opts[] = {
		RUN_OPTIONS,
		{ "block", required_argument, NULL, 'b' },
		{ "reference", required_argument, NULL, 'r' },
		{ "all", no_argument, NULL, 'a' },
		{ "steps", required_argument, NULL, 's' },
		{ "every", required_argument, NULL, 'e' },
		{ "replica", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ NULL, 0, NULL, 0 }
	};
	struct run_args a = { 0 };
	sm_train_opts o = { 0 };
	int block = 0, all = 0, steps = -1, every = 250, replica = 0;
	int quiet = 0, ch, rc;
	bt_kind kind = BT_BLOCK;
	char err[KN_ERR_LEN];
	double t0;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if ((rc = run_option(&a, ch, "train")) == 1)
			continue;
		if (rc < 0)
			return 2;
		switch (ch) {
		case 'b':
			if (parse_int_arg("train", "block", optarg, 1,
			    PR_MAX_BLOCKS, &block))
				return 2;
			break;
		case 'r':
			if (strcmp(optarg, "e2e") == 0)
				kind = BT_E2E;
			else if (strcmp(optarg, "causal") == 0)
				kind = BT_CAUSAL;
			else {
				fprintf(stderr, "shardmeter train: --reference "
				    "takes e2e or causal\n");
				return 2;
			}
			break;
		case 'a': all = 1; break;
		case 's':
			if (parse_int_arg("train", "steps", optarg, 0,
			    1 << 30, &steps))
				return 2;
			break;
		case 'e':
			if (parse_int_arg("train", "every", optarg, 1,
			    1 << 30, &every))
				return 2;
			break;
		case 'p':
			if (parse_int_arg("train", "replica", optarg, 0,
			    1 << 20, &replica))
				return 2;
			break;
		case 'q': quiet = 1; break;
		case 'h':
			printf("usage: shardmeter train --spec FILE --dir DIR "
			    "(--block B | --reference e2e|causal | --all)\n"
			    "         [--steps N] [--every K] [--backend "
			    "auto|cpu|cuda] [--threads T] [--quiet]\n"
			    "Trains block B (1..T) on its interval's share of "
			    "the bound, or a reference,\nwriting DIR/block-B.ckpt "
			    "every K steps (default 250) and at the end;\nresumes "
			    "from the checkpoint it finds.  --all trains the T "
			    "blocks as\nconcurrent processes.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "shardmeter train: unexpected '%s'\n",
		    argv[optind]);
		return 2;
	}
	if ((block > 0) + (kind != BT_BLOCK) + all != 1) {
		fprintf(stderr, "shardmeter train: give exactly one of --block "
		    "B, --reference e2e|causal and --all\n");
		return 2;
	}
	if ((rc = open_run(&a, "train", 1)) != 0)
		return rc;
	if (steps < 0)
		steps = a.spec.steps;
	if (block > a.spec.blocks) {
		fprintf(stderr, "shardmeter train: block %d does not exist: the "
		    "spec has %d blocks\n", block, a.spec.blocks);
		return 2;
	}
	if (all)
		return train_all(&a, steps, every);
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	o.spec = &a.spec;
	o.run_id = a.run_id;
	o.dir = a.dir;
	o.kind = kind;
	o.block = kind == BT_BLOCK ? block : 0;
	o.replica = replica;
	o.steps = steps;
	o.every = every;
	o.be = a.be;
	o.progress = !quiet;
	o.stop = &stop_requested;
	t0 = kn_now();
	if (sm_train(&o, err) != 0) {
		fprintf(stderr, "shardmeter train: %s\n", err);
		return 1;
	}
	if (!quiet) {
		if (kind == BT_BLOCK)
			fprintf(stderr, "shardmeter train: block %d done in "
			    "%.1fs\n", block, kn_now() - t0);
		else
			fprintf(stderr, "shardmeter train: %s reference done in "
			    "%.1fs\n", bt_kind_name(kind), kn_now() - t0);
	}
	kn_pool_shutdown();
	return stop_requested ? 130 : 0;
}

/* eval: the composed held-out bound and its shares, beside the
 * references evaluated on the same windows and noise draws. */
static int
cmd_eval(int argc, char **argv)
{
	static const struct option opts[] = {
		RUN_OPTIONS,
		{ "split", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "windows", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 }
	};
	struct run_args a = { 0 };
	const char *split = "valid", *path;
	bt_eval_set set = { BT_EVAL_WINDOWS, BT_EVAL_STRATA };
	double shares[PR_MAX_BLOCKS], eshares[PR_MAX_BLOCKS], total = 0;
	double etotal = 0, causal = 0, lo, hi;
	int json = 0, ch, rc, b, have_e2e, have_causal;
	char err[PR_ERR_LEN], cpath[PR_PATH_LEN + 32];
	kn_model *m;
	corpus c;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if ((rc = run_option(&a, ch, "eval")) == 1)
			continue;
		if (rc < 0)
			return 2;
		switch (ch) {
		case 's': split = optarg; break;
		case 'j': json = 1; break;
		case 'w':
			if (parse_int_arg("eval", "windows", optarg, 1,
			    1 << 20, &set.windows))
				return 2;
			break;
		case 'h':
			printf("usage: shardmeter eval --spec FILE --dir DIR "
			    "[--split valid|test] [--json] [--windows N]\n"
			    "Reports the composed held-out bound (nats and bits "
			    "per byte), each block's\nshare on its interval, the "
			    "e2e reference on the same intervals and the causal\n"
			    "LM's cross-entropy, when their checkpoints are in "
			    "DIR.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (strcmp(split, "valid") != 0 && strcmp(split, "test") != 0) {
		fprintf(stderr, "shardmeter eval: --split takes valid or test\n");
		return 2;
	}
	if ((rc = open_run(&a, "eval", 1)) != 0)
		return rc;
	path = strcmp(split, "test") == 0 ? a.spec.test : a.spec.valid;
	if (corpus_open(&c, path, strcmp(split, "test") == 0 ?
	    a.spec.test_sha256 : a.spec.valid_sha256,
	    (size_t)a.spec.window + 2, err) != 0) {
		fprintf(stderr, "shardmeter eval: %s split: %s\n", split, err);
		return 1;
	}
	for (b = 0; b < a.spec.blocks; b++) {
		if (sm_load_model(&m, &a.spec, a.run_id, a.dir, BT_BLOCK, b + 1,
		    a.be, 32, err) != 0) {
			fprintf(stderr, "shardmeter eval: %s\n", err);
			corpus_close(&c);
			return 1;
		}
		bt_interval(&a.spec, BT_BLOCK, b, &lo, &hi);
		rc = bt_eval_share(m, &a.spec, &c, &set, lo, hi, &shares[b], err);
		kn_model_free(m);
		if (rc != 0) {
			fprintf(stderr, "shardmeter eval: %s\n", err);
			corpus_close(&c);
			return 1;
		}
		total += shares[b];
	}
	sm_model_path(cpath, sizeof(cpath), a.dir, BT_E2E, 0, "ckpt");
	have_e2e = access(cpath, F_OK) == 0;
	if (have_e2e) {
		if (sm_load_model(&m, &a.spec, a.run_id, a.dir, BT_E2E, 0, a.be,
		    32, err) != 0) {
			fprintf(stderr, "shardmeter eval: %s\n", err);
			corpus_close(&c);
			return 1;
		}
		for (b = 0; b < a.spec.blocks && rc == 0; b++) {
			bt_interval(&a.spec, BT_BLOCK, b, &lo, &hi);
			rc = bt_eval_share(m, &a.spec, &c, &set, lo, hi,
			    &eshares[b], err);
			etotal += eshares[b];
		}
		kn_model_free(m);
	}
	sm_model_path(cpath, sizeof(cpath), a.dir, BT_CAUSAL, 0, "ckpt");
	have_causal = access(cpath, F_OK) == 0;
	if (have_causal && rc == 0) {
		if (sm_load_model(&m, &a.spec, a.run_id, a.dir, BT_CAUSAL, 0,
		    a.be, 32, err) != 0) {
			fprintf(stderr, "shardmeter eval: %s\n", err);
			corpus_close(&c);
			return 1;
		}
		rc = bt_eval_causal(m, &a.spec, &c, &set, &causal, err);
		kn_model_free(m);
	}
	corpus_close(&c);
	if (rc != 0) {
		fprintf(stderr, "shardmeter eval: %s\n", err);
		return 1;
	}
	if (json) {
		json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:f,s:f}", "run_id",
		    a.run_id, "split", split, "windows", set.windows, "strata",
		    set.strata, "blocktrain_nats_per_byte", total,
		    "blocktrain_bits_per_byte", total / M_LN2);
		json_t *arr = json_array(), *e2e = json_array();
		char *text;

		for (b = 0; b < a.spec.blocks; b++) {
			json_array_append_new(arr, json_pack("{s:i,s:f,s:f,s:f}",
			    "block", b + 1, "lo", a.spec.cuts[b], "hi",
			    a.spec.cuts[b + 1], "share", shares[b]));
			json_array_append_new(e2e, json_real(eshares[b]));
		}
		json_object_set_new(o, "shares", arr);
		if (have_e2e) {
			json_object_set_new(o, "e2e_nats_per_byte",
			    json_real(etotal));
			json_object_set_new(o, "e2e_shares", e2e);
		} else {
			json_decref(e2e);
		}
		if (have_causal)
			json_object_set_new(o, "causal_nats_per_byte",
			    json_real(causal));
		text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
		json_decref(o);
		if (text == NULL)
			return 1;
		printf("%s\n", text);
		free(text);
		return 0;
	}
	printf("held-out bound on %s (%s), %d windows x %d noise levels per "
	    "interval\n", split, path, set.windows, set.strata);
	printf("  %-8s %-18s %12s%s\n", "block", "interval", "share",
	    have_e2e ? "   e2e share" : "");
	for (b = 0; b < a.spec.blocks; b++) {
		char iv[40];

		snprintf(iv, sizeof(iv), "(%.4g, %.4g]", a.spec.cuts[b],
		    a.spec.cuts[b + 1]);
		printf("  %-8d %-18s %12.4f", b + 1, iv, shares[b]);
		if (have_e2e)
			printf("  %10.4f", eshares[b]);
		printf("\n");
	}
	printf("blocktrain bound  %.4f nats/byte  (%.4f bits/byte)\n", total,
	    total / M_LN2);
	if (have_e2e)
		printf("e2e reference     %.4f nats/byte  (%.4f bits/byte)  "
		    "gap %+.4f\n", etotal, etotal / M_LN2, total - etotal);
	if (have_causal)
		printf("causal LM         %.4f nats/byte  (%.4f bits/byte)\n",
		    causal, causal / M_LN2);
	return 0;
}

static void
print_sequence(const int32_t *seq, int n)
{
	int i;

	for (i = 0; i < n; i++)
		putchar(seq[i] == KN_MASK ? '_' : seq[i]);
	putchar('\n');
}

/* generate --peers: one request to the pipeline's entry host. */
static int
generate_remote(const char *peers, const char *prompt, int length, int steps,
    float temp, unsigned long long seed, int ar, int timeout_ms, int verbose)
{
	char err[PR_ERR_LEN];
	ph_list hosts;
	pc_request req = { 0 };
	pc_result res;
	double t0;
	size_t i;

	if (ph_load(&hosts, peers, err) != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		return 2;
	}
	req.mode = ar ? PL_MODE_AR : PL_MODE_BT;
	req.prompt = prompt;
	req.prompt_len = strlen(prompt);
	req.length = length;
	req.steps = steps;
	req.temperature = temp;
	req.seed = seed;
	t0 = kn_now();
	if (pc_generate(hosts.v[0].addr, &req, &res, timeout_ms, err) != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		return 1;
	}
	if (!res.ok) {
		fprintf(stderr, "shardmeter generate: the pipeline says: %s\n",
		    res.error);
		pc_result_clear(&res);
		return 1;
	}
	fwrite(prompt, 1, strlen(prompt), stdout);
	for (i = 0; i < res.len; i++)
		putchar(res.output[i]);
	putchar('\n');
	fflush(stdout);
	if (verbose)
		fprintf(stderr, "shardmeter generate: %zu bytes in %.1f ms, %d "
		    "traversal%s of %d hosts, %.1f ms of compute on them\n",
		    res.len, (kn_now() - t0) * 1e3, res.traversals,
		    res.traversals == 1 ? "" : "s", hosts.n,
		    res.compute_us / 1e3);
	pc_result_clear(&res);
	return 0;
}

/* generate: the BlockTrain traversal in one process (or causal AR). */
static int
cmd_generate(int argc, char **argv)
{
	static const struct option opts[] = {
		RUN_OPTIONS,
		{ "length", required_argument, NULL, 'm' },
		{ "steps", required_argument, NULL, 'k' },
		{ "temperature", required_argument, NULL, 't' },
		{ "seed", required_argument, NULL, 'x' },
		{ "mode", required_argument, NULL, 'o' },
		{ "peers", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 }
	};
	struct run_args a = { 0 };
	int length = -1, steps = 64, ch, rc, b, n, plen, ar = 0;
	int timeout_ms = 30000, verbose = 0;
	const char *peers = NULL;
	float temp = 1.0f;
	unsigned long long seed = 1;
	const char *prompt;
	char err[PR_ERR_LEN], *end;
	int32_t *seq;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if ((rc = run_option(&a, ch, "generate")) == 1)
			continue;
		if (rc < 0)
			return 2;
		switch (ch) {
		case 'm':
			if (parse_int_arg("generate", "length", optarg, 1,
			    1 << 20, &length))
				return 2;
			break;
		case 'k':
			if (parse_int_arg("generate", "steps", optarg, 1,
			    1 << 20, &steps))
				return 2;
			break;
		case 't':
			temp = strtof(optarg, &end);
			if (end == optarg || *end || !(temp >= 0)) {
				fprintf(stderr, "shardmeter generate: "
				    "--temperature takes a number >= 0\n");
				return 2;
			}
			break;
		case 'x':
			seed = strtoull(optarg, &end, 10);
			if (end == optarg || *end) {
				fprintf(stderr, "shardmeter generate: --seed "
				    "takes an integer\n");
				return 2;
			}
			break;
		case 'o':
			if (strcmp(optarg, "ar") == 0)
				ar = 1;
			else if (strcmp(optarg, "blocktrain") != 0) {
				fprintf(stderr, "shardmeter generate: --mode "
				    "takes blocktrain or ar\n");
				return 2;
			}
			break;
		case 'P': peers = optarg; break;
		case 'v': verbose = 1; break;
		case 'w':
			if (parse_int_arg("generate", "timeout", optarg, 1,
			    86400000, &timeout_ms))
				return 2;
			break;
		case 'h':
			printf("usage: shardmeter generate --spec FILE --dir DIR "
			    "[--length M] [--steps K]\n"
			    "         [--temperature T] [--seed X] [--mode "
			    "blocktrain|ar] \"PROMPT\"\n"
			    "       shardmeter generate --peers HOSTS [--length M] "
			    "[--steps K] [--timeout MS]\n"
			    "         [--temperature T] [--seed X] [--mode "
			    "blocktrain|ar] [--verbose] \"PROMPT\"\n"
			    "With --peers, asks the pipeline of running daemons "
			    "(blocktraind -S) whose\nhost list is HOSTS: the "
			    "request goes to its first host, the entry; M\n"
			    "defaults to 64 there, and an answer that does not "
			    "come in MS ms (default\n30000) is an error.  "
			    "--verbose adds the latency and the hosts' compute\n"
			    "time on stderr.\n"
			    "Continues PROMPT by M bytes (default: to the end of "
			    "the window).  blocktrain\nruns the K denoising "
			    "steps (default 64) through blocks T..1 in one\n"
			    "process; ar samples the causal LM one byte at a "
			    "time.  The same seed gives\nthe same output, in one "
			    "process or through the pipeline.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "shardmeter generate: give one PROMPT argument "
		    "(it may be \"\")\n");
		return 2;
	}
	prompt = argv[optind];
	if (peers != NULL)
		return generate_remote(peers, prompt, length < 0 ? 64 : length,
		    steps, temp, seed, ar, timeout_ms, verbose);
	if ((rc = open_run(&a, "generate", 1)) != 0)
		return rc;
	n = a.spec.window;
	plen = (int)strlen(prompt);
	if (length < 0)
		length = n - plen;
	if (plen + length > n || length < 1) {
		fprintf(stderr, "shardmeter generate: the prompt (%d bytes) and "
		    "the output (%d) must fit the window of %d bytes\n", plen,
		    length, n);
		return 2;
	}
	seq = malloc((size_t)n * sizeof(int32_t));
	for (b = 0; b < n; b++)
		seq[b] = b < plen ? (unsigned char)prompt[b] : KN_MASK;
	if (ar) {
		kn_model *m;

		if (plen == 0) {
			fprintf(stderr, "shardmeter generate: --mode ar needs a "
			    "prompt of at least one byte\n");
			free(seq);
			return 2;
		}
		rc = sm_load_model(&m, &a.spec, a.run_id, a.dir, BT_CAUSAL, 0,
		    a.be, 1, err);
		if (rc == 0)
			rc = bt_generate_ar(m, seq, plen, plen + length, temp,
			    seed, err);
		kn_model_free(m);
	} else {
		/* block T first: it starts from all masks at t = 1 */
		for (b = a.spec.blocks - 1; b >= 0 && rc == 0; b--) {
			kn_model *m;

			rc = sm_load_model(&m, &a.spec, a.run_id, a.dir, BT_BLOCK,
			    b + 1, a.be, 1, err);
			if (rc == 0)
				rc = bt_denoise_block(m, &a.spec, steps, b, seq,
				    plen, temp, seed, err);
			kn_model_free(m);
		}
	}
	if (rc != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		free(seq);
		return 1;
	}
	print_sequence(seq, plen + length);
	free(seq);
	kn_pool_shutdown();
	return 0;
}

struct command {
	const char *name;
	int (*run)(int, char **);
	const char *help;
};

static const struct command commands[] = {
	{ "spec", cmd_spec, "validate a run spec, print its run id and figures" },
	{ "train", cmd_train, "train a block or a reference of a run" },
	{ "eval", cmd_eval, "held-out bound of the blocks and the references" },
	{ "generate", cmd_generate, "continue a prompt with the trained model" },
	{ "status", cmd_status, "progress and composed bound of running daemons" },
	{ "assemble", cmd_assemble, "fetch and verify every block's checkpoint" },
	{ "demo", cmd_demo, "train one small block on a text file" },
};

static void
usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: shardmeter COMMAND [options]\n\ncommands:\n");
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\n'shardmeter COMMAND --help' describes each command; "
	    "see shardmeter(1).\n");
}

int
main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("shardmeter %s\n", PACKAGE_VERSION);
		return 0;
	}
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "shardmeter: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
