/* shardmeter train: trains one block of a run, or one of its references,
 * in this process; --all trains every block as concurrent processes of
 * this same binary. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/cli/cmd.h"
#include "daemon/cli/cmd_train_soma.h"
#include "daemon/blocktrain/train.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"

struct train_args {
	struct cli_run run;
	bt_kind kind;
	int block;              /* 1-based; 0 when not --block */
	int all;
	int steps;              /* -1: the spec's */
	int every;
	int replica;
	int quiet;
	/* SOMA: --seed, --expert E, --control K, --perturbations, --budget */
	int soma_seed, expert, perturbations;
	const char *control;
	long long budget;
	double lr, eps;
	int decoder_steps;      /* 0: a control learns its decoder throughout */
};

static volatile sig_atomic_t stop_requested;

static void
on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* One option of train's own; CLI_CONTINUE, or the exit status. */
static int
train_option(void *args, int ch)
{
	struct train_args *t = args;

	switch (ch) {
	case 'b':
		return cli_parse_int("train", "block", optarg, 1,
		    PR_MAX_BLOCKS, &t->block) ? 2 : CLI_CONTINUE;
	case 'r':
		if (strcmp(optarg, "e2e") == 0)
			t->kind = BT_E2E;
		else if (strcmp(optarg, "causal") == 0)
			t->kind = BT_CAUSAL;
		else {
			fprintf(stderr, "shardmeter train: --reference "
			    "takes e2e or causal\n");
			return 2;
		}
		return CLI_CONTINUE;
	case 'a': t->all = 1; return CLI_CONTINUE;
	case 's':
		return cli_parse_int("train", "steps", optarg, 0, 1 << 30,
		    &t->steps) ? 2 : CLI_CONTINUE;
	case 'e':
		return cli_parse_int("train", "every", optarg, 1, 1 << 30,
		    &t->every) ? 2 : CLI_CONTINUE;
	case 'p':
		return cli_parse_int("train", "replica", optarg, 0, 1 << 20,
		    &t->replica) ? 2 : CLI_CONTINUE;
	case 'q': t->quiet = 1; return CLI_CONTINUE;
	case 'z': t->soma_seed = 1; return CLI_CONTINUE;
	case 'x':
		return cli_parse_int("train", "expert", optarg, 0,
		    PR_MAX_BLOCKS - 1, &t->expert) ? 2 : CLI_CONTINUE;
	case 'c': t->control = optarg; return CLI_CONTINUE;
	case 'P':
		return cli_parse_int("train", "perturbations", optarg, 1,
		    1 << 20, &t->perturbations) ? 2 : CLI_CONTINUE;
	case 'L':
	case 'E': {
		char *end;
		double v = strtod(optarg, &end);

		if (*end != '\0' || !(v > 0) || v > 1) {
			fprintf(stderr, "shardmeter train: --%s takes a number "
			    "in (0, 1]\n", ch == 'L' ? "lr" : "eps");
			return 2;
		}
		*(ch == 'L' ? &t->lr : &t->eps) = v;
		return CLI_CONTINUE;
	}
	case 'g': {
		char *end;

		t->budget = strtoll(optarg, &end, 10);
		if (*end != '\0' || t->budget < 1) {
			fprintf(stderr, "shardmeter train: --budget takes a "
			    "positive count of byte positions\n");
			return 2;
		}
		return CLI_CONTINUE;
	}
	case 'k':
		return cli_parse_int("train", "decoder-steps", optarg, 1,
		    INT_MAX, &t->decoder_steps) ? 2 : CLI_CONTINUE;
	default: return 2;
	}
}

static int
train_parse(const struct cmd_entry *self, struct train_args *t, int argc,
    char **argv)
{
	static const struct option opts[] = {
		CLI_RUN_OPTIONS,
		{ "block", required_argument, NULL, 'b' },
		{ "reference", required_argument, NULL, 'r' },
		{ "all", no_argument, NULL, 'a' },
		{ "steps", required_argument, NULL, 's' },
		{ "every", required_argument, NULL, 'e' },
		{ "replica", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "seed", no_argument, NULL, 'z' },
		{ "expert", required_argument, NULL, 'x' },
		{ "control", required_argument, NULL, 'c' },
		{ "perturbations", required_argument, NULL, 'P' },
		{ "budget", required_argument, NULL, 'g' },
		{ "lr", required_argument, NULL, 'L' },
		{ "eps", required_argument, NULL, 'E' },
		{ "decoder-steps", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 }
	};
	int rc;

	if ((rc = cli_run_parse(self, &t->run, argc, argv, opts, train_option,
	    t)) != CLI_CONTINUE)
		return rc;
	if (optind < argc) {
		fprintf(stderr, "shardmeter train: unexpected '%s'\n",
		    argv[optind]);
		return 2;
	}
	return CLI_CONTINUE;
}

/* Starts 'shardmeter train --block B' as a child; its pid, or -1. */
static pid_t
train_spawn(const struct train_args *t, int block, const char *threads)
{
	pid_t pid = fork();
	char blk[16], st[16], ev[16];

	if (pid != 0)
		return pid;
	snprintf(blk, sizeof(blk), "%d", block);
	snprintf(st, sizeof(st), "%d", t->steps);
	snprintf(ev, sizeof(ev), "%d", t->every);
	execl("/proc/self/exe", "shardmeter", "train", "--spec",
	    t->run.spec_path, "--dir", t->run.dir, "--block", blk, "--steps",
	    st, "--every", ev, "--threads", threads, "--quiet", (char *)NULL);
	_exit(127);
}

/* --all: the T blocks as child processes, as many at a time as there are
 * cores, the cores shared out among them. */
static int
train_all(const struct train_args *t)
{
	int T = t->run.spec.blocks, cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
	int jobs = T < cores ? T : cores, running = 0, next = 1, failed = 0;
	char threads[16];

	if (jobs < 1)
		jobs = 1;
	snprintf(threads, sizeof(threads), "%d", cores / jobs > 0 ?
	    cores / jobs : 1);
	fprintf(stderr, "shardmeter train: %d blocks, %d at a time, %s "
	    "thread(s) each; logs in %s/block-*.csv\n", T, jobs, threads,
	    t->run.dir);
	while (next <= T || running > 0) {
		int status;

		for (; running < jobs && next <= T; running++, next++) {
			if (train_spawn(t, next, threads) < 0) {
				perror("shardmeter train: fork");
				return 1;
			}
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

/* One model in this process; SIGINT or SIGTERM checkpoints and exits 130. */
static int
train_one(const struct train_args *t)
{
	tr_opts o = { 0 };
	char err[KN_ERR_LEN];
	double t0;

	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	o.spec = &t->run.spec;
	o.run_id = t->run.run_id;
	o.dir = t->run.dir;
	o.kind = t->kind;
	o.block = t->kind == BT_BLOCK ? t->block : 0;
	o.replica = t->replica;
	o.steps = t->steps;
	o.every = t->every;
	o.be = t->run.be;
	o.progress = !t->quiet;
	o.stop = &stop_requested;
	t0 = kn_now();
	if (tr_train(&o, err) != 0) {
		fprintf(stderr, "shardmeter train: %s\n", err);
		return 1;
	}
	if (!t->quiet) {
		if (t->kind == BT_BLOCK)
			fprintf(stderr, "shardmeter train: block %d done in "
			    "%.1fs\n", t->block, kn_now() - t0);
		else
			fprintf(stderr, "shardmeter train: %s reference done in "
			    "%.1fs\n", bt_kind_name(t->kind), kn_now() - t0);
	}
	kn_pool_shutdown();
	return stop_requested ? 130 : 0;
}

/* A SOMA spec: exactly one of --seed, --expert E, --control K. */
static int
train_soma(struct train_args *t)
{
	struct cli_soma_train a = { .run = &t->run, .expert = t->expert,
	    .P = t->perturbations, .steps = t->steps,
	    .budget = (uint64_t)t->budget, .lr = t->lr, .eps = t->eps,
	    .decoder_steps = t->decoder_steps, .quiet = t->quiet,
	    .stop = &stop_requested };

	if (t->soma_seed + (t->expert >= 0) + (t->control != NULL) != 1 ||
	    t->block > 0 || t->all || t->kind != BT_BLOCK) {
		fprintf(stderr, "shardmeter train: on a SOMA spec give exactly "
		    "one of --seed, --expert E and --control "
		    "spsa|eggroll|bptt\n");
		return 2;
	}
	if (t->expert >= t->run.spec.soma.experts) {
		fprintf(stderr, "shardmeter train: expert %d does not exist: "
		    "the spec has %d (0 to %d)\n", t->expert,
		    t->run.spec.soma.experts, t->run.spec.soma.experts - 1);
		return 2;
	}
	a.kind = t->soma_seed ? SA_SEED : t->expert >= 0 ? SA_EXPERT : SA_SPSA;
	if ((t->lr > 0 || t->eps > 0) && t->control == NULL) {
		fprintf(stderr, "shardmeter train: --lr and --eps tune a "
		    "control; the seed and the experts take the spec's\n");
		return 2;
	}
	if (t->decoder_steps > 0 && (t->control == NULL ||
	    strcmp(t->control, "bptt") == 0)) {
		fprintf(stderr, "shardmeter train: --decoder-steps is for the "
		    "spsa and eggroll controls (the seed learns its decoder "
		    "throughout, an expert as the spec's expert_decoder "
		    "says, BPTT by its gradient)\n");
		return 2;
	}
	if (t->control != NULL) {
		if (strcmp(t->control, "spsa") == 0)
			a.kind = SA_SPSA;
		else if (strcmp(t->control, "eggroll") == 0)
			a.kind = SA_EGGROLL;
		else if (strcmp(t->control, "bptt") == 0)
			a.kind = SA_BPTT;
		else {
			fprintf(stderr, "shardmeter train: --control takes "
			    "spsa, eggroll or bptt\n");
			return 2;
		}
	}
	/* a new run's directory, as BlockTrain's trainer makes it; its
	 * parent must exist, so a mistyped path still fails loudly */
	if (mkdir(t->run.dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "shardmeter train: cannot create %s: %s\n",
		    t->run.dir, strerror(errno));
		return 1;
	}
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	return cli_train_soma(&a);
}

static int
train_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct train_args t = { .kind = BT_BLOCK, .steps = -1, .every = 250,
	    .expert = -1 };
	char err[KN_ERR_LEN];
	int rc;

	if ((rc = train_parse(self, &t, argc, argv)) != CLI_CONTINUE)
		return rc;
	t.run.defer_report = 1;         /* named once, with its GEMM choice */
	if ((rc = cli_run_open(&t.run, "train", 1)) != 0)
		return rc;
	if (pr_spec_method(&t.run.spec) == PR_METHOD_SOMA) {
		cli_backend_report(t.run.be, t.run.backend_note);
		return train_soma(&t);
	}
	if (t.soma_seed || t.expert >= 0 || t.control != NULL) {
		fprintf(stderr, "shardmeter train: --seed, --expert and "
		    "--control are for a spec of method = soma\n");
		return 2;
	}
	if ((t.block > 0) + (t.kind != BT_BLOCK) + t.all != 1) {
		fprintf(stderr, "shardmeter train: give exactly one of --block "
		    "B, --reference e2e|causal and --all\n");
		return 2;
	}
	if (t.steps < 0)
		t.steps = t.run.spec.steps;
	if (t.block > t.run.spec.blocks) {
		fprintf(stderr, "shardmeter train: block %d does not exist: the "
		    "spec has %d blocks\n", t.block, t.run.spec.blocks);
		return 2;
	}
	/* the GEMM choice for the spec's shape (SM_GEMM or auto), named
	 * before the first step */
	if (kn_backend_plan(t.run.be, t.run.spec.width, t.run.spec.heads,
	    t.run.spec.window, t.run.spec.batch, NULL, err) != 0) {
		fprintf(stderr, "shardmeter train: %s\n", err);
		return 1;
	}
	cli_backend_report(t.run.be, t.run.backend_note);
	return t.all ? train_all(&t) : train_one(&t);
}

const struct cmd_entry cmd_train_entry = {
	.name = "train",
	.summary = "train a block or a reference; SOMA: the seed, an expert "
	    "or a control",
	.usage = "usage: shardmeter train --spec FILE --dir DIR "
	    "(--block B | --reference e2e|causal | --all)\n"
	    "         [--steps N] [--every K] [--backend "
	    "auto|cpu|cuda] [--threads T] [--quiet]\n"
	    "Trains block B (1..T) on its interval's share of "
	    "the bound, or a reference,\nwriting DIR/block-B.ckpt "
	    "every K steps (default 250) and at the end;\nresumes "
	    "from the checkpoint it finds.  --all trains the T "
	    "blocks as\nconcurrent processes.\n"
	    "\n"
	    "On a spec of method = soma:\n"
	    "usage: shardmeter train --spec FILE --dir DIR (--seed | --expert E |\n"
	    "         --control spsa|eggroll|bptt) [--perturbations P] "
	    "[--budget POSITIONS]\n"
	    "         [--lr RATE] [--eps E] [--decoder-steps N] [--steps N]\n"
	    "         [--backend auto|cpu|cuda] [--threads T] [--quiet]\n"
	    "--seed trains the N = 1 seed (DIR/seed.ckpt) on every cluster; "
	    "--expert E\nstarts from the seed and trains expert E on its "
	    "cluster (DIR/expert-E.ckpt);\n--control trains one model of N "
	    "experts' body parameters on every cluster\nwith SPSA at P "
	    "directions, EGGROLL, or backpropagation through time, for\nas "
	    "many byte positions as SOMA's seed and experts together "
	    "(--budget to\nchange it).  --lr and --eps tune a control "
	    "(for EGGROLL --eps is its sigma,\nby default 10 eps) and go "
	    "into its file's name.  A zero-order control learns its decoder "
	    "by the delta\nrule every step; --decoder-steps N stops that "
	    "after N steps, as SOMA's\nexperts start from a decoder learned "
	    "over the seed's steps (in the name too).\nEach writes "
	    "DIR/NAME.csv: step, loss, validation loss, lr, eps, positions.\n"
	    "A control position costs more multiply-adds than a SOMA "
	    "position (a wider\nmodel), so an SPSA or EGGROLL control on "
	    "the default budget also writes\nDIR/NAME-eqmacs.ckpt when its "
	    "forward multiply-adds first reach SOMA's.\n",
	.exec = train_exec
};
