/* shardmeter plan: loads a topology and a run spec, searches placements,
 * schedules and network options with the cost model of plan/, prints the
 * ranked candidates beside the default configuration, and writes the
 * first choice as files blocktraind runs (plan/output.h). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/conf.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "plan/output.h"
#include "plan/search.h"
#include "proto/topology.h"

struct plan_args {
	const char *topology, *spec, *out;
	int top, all_options, pick;     /* pick -1: the first choice */
	pn_options o;
	pn_model m;
};

/* "3h12m", "14.2 s", "310 ms" */
static const char *
duration(double s, char *buf, size_t len)
{
	if (s >= 3600)
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600),
		    (int)(s / 60) % 60);
	else if (s >= 100)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else if (s >= 1)
		snprintf(buf, len, "%.2f s", s);
	else
		snprintf(buf, len, "%.1f ms", s * 1000);
	return buf;
}

static int
parse_goal(const char *v, pn_goal *g)
{
	if (strcmp(v, "train") == 0)
		*g = PN_GOAL_TRAIN;
	else if (strcmp(v, "serve") == 0)
		*g = PN_GOAL_SERVE;
	else if (strcmp(v, "both") == 0)
		*g = PN_GOAL_BOTH;
	else
		return -1;
	return 0;
}

/* "10,50,200" */
static int
parse_h_list(const char *v, pn_options *o)
{
	const char *p = v;
	char *end;

	o->nh = 0;
	while (*p) {
		long h = strtol(p, &end, 10);

		if (end == p || h < 1 || h > 1000000 || o->nh == PN_MAX_H ||
		    (*end != ',' && *end != '\0'))
			return -1;
		o->h[o->nh++] = (int)h;
		p = *end ? end + 1 : end;
	}
	return o->nh > 0 ? 0 : -1;
}

/* "int8=0.6" */
static int
parse_zstd_ratio(const char *v, pn_model *m)
{
	const char *eq = strchr(v, '=');
	char name[8], *end;
	pr_encoding e;
	double r;

	if (eq == NULL || (size_t)(eq - v) >= sizeof(name))
		return -1;
	memcpy(name, v, (size_t)(eq - v));
	name[eq - v] = '\0';
	r = strtod(eq + 1, &end);
	if (end == eq + 1 || *end != '\0' || !(r > 0) || r > 1 ||
	    pr_encoding_parse(name, &e) != 0)
		return -1;
	m->zstd_ratio[e] = r;
	return 0;
}

/* A host the topology gives no address (one written by hand) stands in
 * the written peer list as NAME:port: say so, or a daemon started from
 * it would look for a host of that name. */
static void
warn_unaddressed(const topo_topology *t, const pn_candidate *c,
    const char *dir)
{
	int b, r, n = 0;

	for (b = 0; b < c->blocks; b++)
		for (r = 0; r < c->nrep[b]; r++)
			n += t->hosts[c->host[b][r]].address[0] == '\0';
	if (n > 0)
		fprintf(stderr, "shardmeter plan: %d line(s) of %s/peers name a "
		    "host without an address (NAME:port, as the topology gives "
		    "none): put each host's address there before starting its "
		    "daemon\n", n, dir);
}

static int
plan_parse(const struct cmd_entry *self, struct plan_args *a, int argc,
    char **argv)
{
	static const struct option opts[] = {
		{ "topology", required_argument, NULL, 't' },
		{ "spec", required_argument, NULL, 's' },
		{ "goal", required_argument, NULL, 'g' },
		{ "top", required_argument, NULL, 'n' },
		{ "out", required_argument, NULL, 'o' },
		{ "replicas", required_argument, NULL, 'r' },
		{ "max-replicas", required_argument, NULL, 'R' },
		{ "local-steps", required_argument, NULL, 'H' },
		{ "zstd-ratio", required_argument, NULL, 'z' },
		{ "max-streams", required_argument, NULL, 'k' },
		{ "all-options", no_argument, NULL, 'A' },
		{ "pick", required_argument, NULL, 'p' },
		{ "same-steps", no_argument, NULL, 'S' },
		{ "share-steps", no_argument, NULL, 'X' },
		{ "equal-blocks", no_argument, NULL, 'E' },
		{ "serve-replicas", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 't':
			a->topology = optarg;
			break;
		case 's':
			a->spec = optarg;
			break;
		case 'o':
			a->out = optarg;
			break;
		case 'g':
			if (parse_goal(optarg, &a->o.goal) != 0) {
				fprintf(stderr, "shardmeter plan: --goal is train, "
				    "serve or both, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'n':
			if (cli_parse_int("plan", "top", optarg, 1, 1000,
			    &a->top) != 0)
				return 2;
			break;
		case 'r':
			if (cli_parse_int("plan", "replicas", optarg, 1,
			    PN_MAX_REPLICAS, &a->o.replicas) != 0)
				return 2;
			break;
		case 'R':
			if (cli_parse_int("plan", "max-replicas", optarg, 1,
			    PN_MAX_REPLICAS, &a->o.max_replicas) != 0)
				return 2;
			break;
		case 'N':
			if (cli_parse_int("plan", "serve-replicas", optarg, 1,
			    PN_MAX_SERVE, &a->o.serve_replicas) != 0)
				return 2;
			break;
		case 'k':
			if (cli_parse_int("plan", "max-streams", optarg, 1, 64,
			    &a->o.max_streams) != 0)
				return 2;
			break;
		case 'H':
			if (parse_h_list(optarg, &a->o) != 0) {
				fprintf(stderr, "shardmeter plan: --local-steps "
				    "takes up to %d positive integers, as in "
				    "'25,50,100', not '%s'\n", PN_MAX_H, optarg);
				return 2;
			}
			break;
		case 'z':
			if (parse_zstd_ratio(optarg, &a->m) != 0) {
				fprintf(stderr, "shardmeter plan: --zstd-ratio "
				    "takes ENCODING=RATIO (f32, f16, bf16 or "
				    "int8; a ratio in (0, 1]), not '%s'\n",
				    optarg);
				return 2;
			}
			break;
		case 'X':
			a->o.same_steps = 0;
			break;
		case 'E':
			a->o.split = 0;
			break;
		case 'S':
			a->o.same_steps = 1;
			break;
		case 'A':
			a->all_options = 1;
			break;
		case 'p':
			if (cli_parse_int("plan", "pick", optarg, 0, 1000,
			    &a->pick) != 0)
				return 2;
			break;
		case 'h':
			return cli_help(self);
		default:
			fprintf(stderr, "%s", self->usage);
			return 2;
		}
	}
	if (a->o.serve_replicas > 1 && a->o.goal == PN_GOAL_TRAIN) {
		fprintf(stderr, "shardmeter plan: --serve-replicas needs --goal "
		    "serve or both\n");
		return 2;
	}
	if (a->pick >= 0 && a->out == NULL) {
		fprintf(stderr, "shardmeter plan: --pick needs --out DIR\n");
		return 2;
	}
	if (optind < argc || a->topology == NULL || a->spec == NULL) {
		fprintf(stderr, "shardmeter plan: %s\n%s", optind < argc ?
		    "unexpected arguments" : "--topology and --spec are needed",
		    self->usage);
		return 2;
	}
	return CLI_CONTINUE;
}

/* The network options the search may choose: this build's daemon's,
 * or with --all-options the whole set. */
static void
plan_options(struct plan_args *a, const topo_topology *t)
{
	pn_support sup;
	int i, streams = 1;

	pn_support_detect(&sup, cf_keys, cf_nkeys);
	for (i = 0; i < t->nhosts * t->nhosts; i++)
		if (t->links[i].streams > streams)
			streams = t->links[i].streams;
	a->o.int8 = sup.int8 || a->all_options;
	a->o.zstd = sup.zstd || a->all_options;
	a->o.overlap = sup.overlap || a->all_options;
	if (!sup.streams && !a->all_options)
		a->o.max_streams = 1;
	else if (a->o.max_streams == 0)
		a->o.max_streams = streams;
}

/* "3+1+2+2": the layers of each block, block 1 first */
static const char *
split_str(const pn_candidate *c, char *buf, size_t len)
{
	size_t used = 0;
	int b, n;

	buf[0] = '\0';
	for (b = 0; b < c->blocks && used < len; b++) {
		n = snprintf(buf + used, len - used, "%s%d", b ? "+" : "",
		    c->layers[b]);
		used += n > 0 ? (size_t)n : 0;
	}
	return buf;
}

/* "412.0 ms if h3 (block 2) is lost, re-sent to h7" */
static void
print_serve_loss(const topo_topology *t, const pn_prediction *p)
{
	const pn_serve_loss *l = &p->serve_lost;
	char d1[32], d2[32];

	if (l->host < 0)
		return;
	if (l->fails) {
		printf("      one host down: the ring fails: %s is the only host "
		    "of block %d\n", t->hosts[l->host].name, l->block + 1);
		return;
	}
	/* the other host may serve faster than the ring's, found by swaps */
	printf("      one host down: %s (%s%s), worst %s (block %d), its frame "
	    "re-sent to %s\n", duration(l->latency_s, d1, sizeof(d1)),
	    l->latency_s >= p->bt.latency_s ? "+" : "-",
	    duration(fabs(l->latency_s - p->bt.latency_s), d2, sizeof(d2)),
	    t->hosts[l->host].name, l->block + 1, t->hosts[l->via].name);
}

/* the ring, block T first; a block of several hosts in brackets, the
 * one a request takes first */
static void
print_ring(const topo_topology *t, const pn_candidate *c)
{
	int b, k;

	printf("      ring:");
	for (b = c->blocks - 1; b >= 0; b--) {
		printf(" %s%s", c->nalt[b] > 0 ? "[" : "",
		    t->hosts[c->ring[b]].name);
		for (k = 0; k < c->nalt[b]; k++)
			printf(" %s", t->hosts[c->alt[b][k]].name);
		printf("%s", c->nalt[b] > 0 ? "]" : "");
	}
	printf("\n");
}

static void
print_row(const topo_topology *t, const pn_result *r, const pn_result *def,
    const char *rank, pn_goal goal)
{
	const pn_candidate *c = &r->c;
	const pn_prediction *p = &r->p;
	const pn_block_pred *bp = &p->block[p->slowest];
	char d1[32], d2[32], d3[32], d4[32], split[PR_MAX_BLOCKS * 6];

	if (goal == PN_GOAL_SERVE) {
		printf("%-5s %9s %7.2fx (compute %s, network %s) %10.4g B/s"
		    " | ar %s per %d B, %.4g B/s\n", rank,
		    duration(p->bt.latency_s, d1, sizeof(d1)),
		    def->score / r->score,
		    duration(p->bt.part.compute, d2, sizeof(d2)),
		    duration(p->bt.part.transfer + p->bt.part.latency, d3,
		    sizeof(d3)), p->bt.bytes_per_s,
		    duration(p->ar.latency_s, d4, sizeof(d4)), p->output_bytes,
		    p->ar.bytes_per_s);
		print_ring(t, c);
		print_serve_loss(t, p);
		return;
	}
	printf("%-5s %2d %5d %-4s %-4s %2d %-3s %9s %7.2fx %11.4g %9s "
	    "%10.3g %s\n", rank, c->nrep[0], c->local_steps,
	    pr_encoding_name(c->enc), c->zstd ? "zstd" : "-", c->streams,
	    c->overlap ? "ovl" : "blk", duration(p->train_s, d1, sizeof(d1)),
	    def->score / r->score, p->positions_per_s,
	    duration(bp->round_s, d2, sizeof(d2)), p->max_link_bytes_per_h,
	    split_str(c, split, sizeof(split)));
	printf("      block %d decides: %d steps of %s; per round compute "
	    "%.3g s, stragglers %.3g s, transfer %.3g s, latency %.3g s; "
	    "update %.4g B", p->slowest + 1, c->steps,
	    duration(bp->step_s, d3, sizeof(d3)), bp->round.compute,
	    bp->round.straggler, bp->round.transfer, bp->round.latency,
	    bp->update_bytes);
	/* in the steps above: the slowest replica's own CPU for the round */
	if (bp->round_cpu_s > 0)
		printf("; round work %.3g s", bp->round_cpu_s);
	printf("\n");
	if (p->serve && goal == PN_GOAL_BOTH) {
		printf("      serve: one traversal %s (compute %.3g s, network "
		    "%.3g s), %.4g B/s batched; ar %s per %d B, %.4g B/s\n",
		    duration(p->bt.latency_s, d1, sizeof(d1)),
		    p->bt.part.compute, p->bt.part.transfer +
		    p->bt.part.latency, p->bt.bytes_per_s,
		    duration(p->ar.latency_s, d2, sizeof(d2)), p->output_bytes,
		    p->ar.bytes_per_s);
		print_serve_loss(t, p);
	}
}

static void
print_placement(const topo_topology *t, const pn_candidate *c)
{
	int b, r;

	for (b = 0; b < c->blocks; b++) {
		printf("  block %d (%d layers):", b + 1, c->layers[b]);
		for (r = 0; r < c->nrep[b]; r++)
			printf(" %s", t->hosts[c->host[b][r]].name);
		if (c->ring[b] >= 0)
			printf("; serves from %s", t->hosts[c->ring[b]].name);
		for (r = 0; r < c->nalt[b]; r++)
			printf(", then %s", t->hosts[c->alt[b][r]].name);
		printf("\n");
	}
}

/* What losing one host does to the first choice: training, then the
 * ring. */
static void
print_losses(const topo_topology *t, const pn_result *r, pn_goal goal)
{
	const pn_train_loss *l = &r->p.train_lost;
	const pn_serve_loss *sl = &r->p.serve_lost;
	char d1[32], d2[32], d3[32], d4[32];

	printf("one host down, the worst to lose:\n");
	/* the serving goal ranks no training */
	if (goal != PN_GOAL_SERVE && l->host >= 0 && l->halts)
		printf("  training: %s, the only replica of block %d: that block "
		    "stops until a host takes it over; %.4g positions/s go on "
		    "in the others\n", t->hosts[l->host].name, l->block + 1,
		    l->positions_per_s);
	else if (goal != PN_GOAL_SERVE && l->host >= 0)
		printf("  training: %s (block %d): its block's round %s (was "
		    "%s), %s to the steps (was %s), %.4g positions/s\n",
		    t->hosts[l->host].name, l->block + 1,
		    duration(l->round_s, d1, sizeof(d1)),
		    duration(r->p.block[l->block].round_s, d2, sizeof(d2)),
		    duration(l->train_s, d3, sizeof(d3)),
		    duration(r->p.train_s, d4, sizeof(d4)), l->positions_per_s);
	if (sl->host < 0)
		return;
	if (sl->fails)
		printf("  serving: %s, the only host of block %d: the ring "
		    "fails\n", t->hosts[sl->host].name, sl->block + 1);
	else
		printf("  serving: %s (block %d): one traversal %s re-sent to "
		    "%s (was %s)\n", t->hosts[sl->host].name, sl->block + 1,
		    duration(sl->latency_s, d1, sizeof(d1)),
		    t->hosts[sl->via].name, duration(r->p.bt.latency_s, d2,
		    sizeof(d2)));
}

static void
print_missing(const struct plan_args *a)
{
	pn_support sup;

	pn_support_detect(&sup, cf_keys, cf_nkeys);
	printf("\nNot planned (the spec or this build cannot express it):\n"
	    "  %s\n"
	    "  replica counts that differ by block: [optim] steps is one "
	    "count for every\n    replica, so the block with fewest "
	    "replicas would decide; every block gets R\n"
	    "  microbatches: the spec has no gradient-accumulation key; "
	    "[optim] batch is kept\n"
	    "  pipeline_batch: one measured rate per host cannot tell batch "
	    "sizes apart\n", a->o.split && a->o.goal != PN_GOAL_SERVE ?
	    "block sizes for serving: the ring keeps the training split" :
	    "unequal block sizes: each block keeps the spec's layers "
	    "(--equal-blocks or --goal serve)");
	if (!sup.int8 || !sup.zstd || !sup.streams || !sup.overlap)
		printf("  %s in this build:%s%s%s%s\n", a->all_options ?
		    "searched (--all-options) but not" : "not searched, not",
		    sup.int8 ? "" : " " PN_KEY_ENCODING " = int8,",
		    sup.zstd ? "" : " " PN_KEY_COMPRESSION " = zstd,",
		    sup.streams ? "" : " " PN_KEY_STREAMS ",",
		    sup.overlap ? "" : " " PN_KEY_OVERLAP);
}

static void
print_plan(const topo_topology *t, const pr_spec *s, const struct plan_args *a,
    const pn_plan *plan, double secs)
{
	char rank[16], split[PR_MAX_BLOCKS * 6];
	int i;

	printf("plan: %d hosts, %d blocks of %s layers (%d in all, %zu "
	    "parameters a layer), %d steps x %d replica(s) x batch %d x "
	    "window %d per block\n", t->nhosts, s->blocks,
	    split_str(&plan->def.c, split, sizeof(split)),
	    pr_spec_total_layers(s), pn_block_params(s, 2) -
	    pn_block_params(s, 1), s->steps, s->replicas, s->batch, s->window);
	if (a->o.split && a->o.goal != PN_GOAL_SERVE)
		printf("split: the %d layers shared among the blocks as each "
		    "placement's hosts train fastest (--equal-blocks keeps the "
		    "spec's)\n", pr_spec_total_layers(s));
	printf("search: %s, %.3g placements per option set, %.3g predictions, "
	    "%.2f s\n\n", plan->exhaustive ? "exhaustive" :
	    "greedy start and pairwise swaps (a local optimum)",
	    plan->placements, plan->evaluated, secs);
	if (a->o.goal == PN_GOAL_SERVE)
		printf("rank  traversal speedup (breakdown)                   "
		    "blocktrain output | ar\n");
	else
		printf("rank   R     H enc  zstd st ovl      time speedup "
		    "positions/s     round  link B/h layers\n");
	print_row(t, &plan->def, &plan->def, "dflt", a->o.goal);
	for (i = 0; i < plan->n; i++) {
		snprintf(rank, sizeof(rank), "%s%d", i == plan->chosen ? "*" :
		    "", i + 1);
		print_row(t, &plan->v[i], &plan->def, rank, a->o.goal);
	}
	if (plan->chosen >= plan->n) {
		snprintf(rank, sizeof(rank), "*%d", plan->chosen + 1);
		print_row(t, &plan->v[plan->chosen], &plan->def, rank,
		    a->o.goal);
	}
	printf("\nfirst choice (*: the simplest within %.0f%% of the fastest):"
	    "\n", a->o.tie * 100);
	print_placement(t, &plan->v[plan->chosen].c);
	print_losses(t, &plan->v[plan->chosen], a->o.goal);
	print_missing(a);
}

static int
cmd_plan_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct plan_args a = { .top = 5, .pick = -1 };
	char err[KN_ERR_LEN];
	topo_topology t;
	pn_plan plan;
	pr_spec s;
	double t0;
	int rc;

	pn_options_defaults(&a.o);
	a.o.daemon_keys = cf_keys;
	a.o.daemon_nkeys = cf_nkeys;
	a.o.max_streams = 0;
	pn_model_defaults(&a.m);
	if ((rc = plan_parse(self, &a, argc, argv)) != CLI_CONTINUE)
		return rc;
	if (pr_spec_load(&s, a.spec, err) != 0) {
		fprintf(stderr, "shardmeter plan: %s\n", err);
		return 1;
	}
	if (topo_load(&t, a.topology, err) != 0) {
		fprintf(stderr, "shardmeter plan: %s\n", err);
		return 1;
	}
	plan_options(&a, &t);
	t0 = kn_now();
	if (pn_search(&t, &s, &a.m, &a.o, a.top, &plan, err) != 0) {
		fprintf(stderr, "shardmeter plan: %s: %s\n", a.topology, err);
		topo_free(&t);
		return 1;
	}
	print_plan(&t, &s, &a, &plan, kn_now() - t0);
	rc = 0;
	if (a.out != NULL) {
		int pick = a.pick >= 0 ? a.pick : plan.chosen + 1;
		const pn_candidate *c = pick == 0 ? &plan.def.c :
		    pick <= plan.nall ? &plan.v[pick - 1].c : NULL;

		if (pn_write_pick(a.out, &t, &s, &a.o, &plan, pick, err) != 0) {
			fprintf(stderr, "shardmeter plan: --pick %d: %s\n", pick,
			    err);
			rc = 1;
		} else {
			printf("\nwrote %s/spec.conf, peers, %sconf/ and "
			    "plan.json (%s, row %d)\n", a.out, c->ring[0] >= 0 ?
			    "pipeline, " : "", pick == 0 ? "the default "
			    "configuration" : pick == plan.chosen + 1 ?
			    "the first choice" : "--pick", pick);
			warn_unaddressed(&t, c, a.out);
		}
	}
	pn_plan_free(&plan);
	topo_free(&t);
	return rc;
}

const struct cmd_entry cmd_plan_entry = {
	.name = "plan",
	.summary = "predict and rank placements, schedules and network options",
	.usage = "usage: shardmeter plan --topology FILE --spec FILE\n"
	    "    [--goal train|serve|both] [--top N] [--out DIR]\n"
	    "    [--replicas R | --max-replicas R] [--local-steps H,H,...]\n"
	    "    [--zstd-ratio ENC=RATIO] [--max-streams K] [--all-options]\n"
	    "    [--pick K] [--share-steps] [--equal-blocks] "
	    "[--serve-replicas N]\n"
	    "Predicts, for the hosts and links of the topology file (from "
	    "'shardmeter probe'\nor written by hand), how the run spec would "
	    "train and serve under each\ncandidate: which hosts train which "
	    "block, R replicas per block, H local\nsteps, the update encoding, "
	    "zstd, parallel streams, overlapped rounds\nand how many of the "
	    "spec's layers each block gets.\nPrints the N "
	    "fastest (default 5) beside the default configuration (hosts in\n"
	    "list order, one replica each, the spec's H, f32, blocking), each "
	    "with its\nbreakdown, and with --out writes the first choice: "
	    "spec.conf, peers,\npipeline, conf/HOST.conf and plan.json.\n"
	    "  --goal       train: time to the spec's positions (default); "
	    "serve: the\n               latency of one pipeline traversal; both: "
	    "train, with the ring\n"
	    "  --replicas   plan exactly R replicas per block\n"
	    "  --serve-replicas  N hosts per block in the serving ring (1 to "
	    "8, default 1):\n               the first on a request's path, "
	    "the others taking its\n               frame, re-sent, when it "
	    "is down; with --goal both, N of\n               the block's "
	    "replicas.  Each serving row gives one traversal\n"
	    "               with the worst host of the ring lost\n"
	    "  --local-steps  the H to try (default: the spec's H/2, H, 2H, "
	    "4H)\n"
	    "  --zstd-ratio compressed/raw size of an encoding under zstd "
	    "(default 1)\n"
	    "  --all-options  also try the options this build's daemon has no "
	    "key for\n"
	    "  --pick K     with --out, write row K of the table instead of the "
	    "first\n               choice (0: the default configuration)\n"
	    "  --share-steps the spec's positions per block shared out among "
	    "its replicas\n               (faster, but what a replica learns "
	    "from its share is not\n               predicted); default: every "
	    "replica trains the spec's steps\n               (--same-steps), "
	    "so replicas add data, never speed\n"
	    "  --equal-blocks  every block keeps the spec's layers; default: "
	    "the spec's\n               total shared so that a faster host "
	    "trains a larger block\n",
	.exec = cmd_plan_exec
};
