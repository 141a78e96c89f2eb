/* shardmeter status: one line per daemon of a peer list, the run's
 * progress with an ETA, and the composed held-out bound (the sum of every
 * block's latest share), once or refreshed with --watch. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/peers.h"
#include "kernels/error.h"
#include "proto/spec.h"

/* What one screen gathers from the peers that answer. */
struct status_sum {
	char run_id[PR_RUN_ID_LEN];     /* the first peer's; others flagged */
	int up;                         /* peers that answered */
	int blocks;
	int64_t done, total;            /* steps over all peers */
	double slowest_eta;             /* seconds */
	/* the latest held-out share of each block (1-based) and its step:
	 * the sum of its replicas' shares of that step and how many */
	double shares[PR_MAX_BLOCKS + 1];
	int64_t share_step[PR_MAX_BLOCKS + 1];
	int share_n[PR_MAX_BLOCKS + 1];
	int have[PR_MAX_BLOCKS + 1];
};

static double
num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static int64_t
integer(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static void
bar(double frac, int width)
{
	int i, fill = (int)(frac * width + 0.5);

	putchar('[');
	for (i = 0; i < width; i++)
		putchar(i < fill ? '#' : '.');
	putchar(']');
}

/* The held-out share column, kept if it is the block's latest.  The
 * replicas of a block measured at the same step are averaged: each
 * measures its own weights, which agree only at a round's end, and the
 * recording rule of scripts/prometheus averages them too. */
static void
status_share(const peers_entry *p, json_t *s, struct status_sum *sum)
{
	int64_t at;
	int b = p->block;

	if (json_object_get(s, "heldout_share") == NULL) {
		printf("%10s", "-");
		return;
	}
	at = integer(s, "heldout_share_step");
	printf("%10.4f", num(s, "heldout_share"));
	if (b > PR_MAX_BLOCKS || at < sum->share_step[b])
		return;
	if (at > sum->share_step[b]) {
		sum->shares[b] = 0;
		sum->share_n[b] = 0;
	}
	sum->shares[b] += num(s, "heldout_share");
	sum->share_n[b]++;
	sum->share_step[b] = at;
	sum->have[b] = 1;
}

/* The line of peer i of pl, or "down" with the reason; its status (the
 * caller's), or NULL. */
static json_t *
status_peer(const peers_list *pl, int i, struct status_sum *sum)
{
	const peers_entry *p = &pl->v[i];
	char err[KN_ERR_LEN] = "";
	json_t *s = cli_status_fetch(p, err);
	int64_t step, steps;
	const char *rid;
	double rate;

	if (s == NULL) {
		printf("%-22s %5d %4d %-9s %s\n", p->addr, p->block,
		    peers_replica_index(pl, i), "down", err);
		return NULL;
	}
	sum->up++;
	rid = json_string_value(json_object_get(s, "run_id"));
	if (sum->run_id[0] == '\0' && rid != NULL)
		snprintf(sum->run_id, sizeof(sum->run_id), "%s", rid);
	step = integer(s, "step");
	steps = integer(s, "steps");
	sum->blocks = (int)integer(s, "blocks");
	printf("%-22s %5d %4d %-9s %6lld/%-6lld %8.4f ", p->addr, p->block,
	    peers_replica_index(pl, i),
	    json_string_value(json_object_get(s, "state")), (long long)step,
	    (long long)steps, num(s, "loss"));
	status_share(p, s, sum);
	printf(" %6lld %9.0f%s\n", (long long)integer(s, "round"),
	    num(s, "positions_per_s"), rid && sum->run_id[0] &&
	    strcmp(rid, sum->run_id) ? "  OTHER RUN" : "");
	sum->done += step;
	sum->total += steps;
	rate = num(s, "steps_per_s");
	if (rate > 0 && (steps - step) / rate > sum->slowest_eta)
		sum->slowest_eta = (steps - step) / rate;
	return s;
}

/* The progress bar and the composed bound under the peers' lines. */
static void
status_print_run(const struct status_sum *sum)
{
	double bound = 0;
	int b, complete = 1;

	if (sum->total > 0) {
		printf("\nrun %.16s...  ", sum->run_id);
		bar((double)sum->done / sum->total, 30);
		printf(" %5.1f%%  ETA %dm%02ds\n", 100.0 * sum->done /
		    sum->total, (int)sum->slowest_eta / 60,
		    (int)sum->slowest_eta % 60);
	}
	if (sum->blocks <= 0)
		return;
	for (b = 1; b <= sum->blocks; b++) {
		if (!sum->have[b])
			complete = 0;
		else
			bound += sum->shares[b] / sum->share_n[b];
	}
	if (complete)
		printf("composed held-out bound: %.4f nats/byte (sum of the %d "
		    "blocks' latest shares, each its replicas' mean)\n", bound,
		    sum->blocks);
	else
		printf("composed held-out bound: not yet (a block has no "
		    "held-out share yet)\n");
}

/* Each daemon's roll-backs to its last good checkpoint, and its refusals
 * of its peers (daemon/core/strikes.h), when any: one line per peer it holds
 * a record of, and QUARANTINED past its threshold; nothing when no daemon
 * rolled back or refused anything. */
static void
status_strikes(const peers_list *pl, json_t *const *status)
{
	int i, header = 0;

	for (i = 0; i < pl->n; i++) {
		json_t *rb = json_object_get(status[i], "rolled_back");

		if (integer(status[i], "rollbacks") > 0)
			printf("%s rolled back to its last good checkpoint %lld "
			    "time(s), the latest at step %lld after round "
			    "%lld\n", pl->v[i].addr,
			    (long long)integer(status[i], "rollbacks"),
			    (long long)integer(rb, "step"),
			    (long long)integer(rb, "round"));
	}
	for (i = 0; i < pl->n; i++) {
		json_t *st = json_object_get(status[i], "strikes"), *e;
		size_t k;

		json_array_foreach(json_object_get(st, "peers"), k, e) {
			const char *addr = json_string_value(json_object_get(e,
			    "addr"));

			if (!header++)
				printf("\nstrikes (what a daemon refused of a "
				    "peer)\n  %-22s    %-22s %4s %4s %4s\n",
				    "daemon", "peer", "upd", "ckpt", "claim");
			printf("  %-22s of %-22s %4lld %4lld %4lld%s\n",
			    pl->v[i].addr, addr != NULL ? addr :
			    json_string_value(json_object_get(e, "id")),
			    (long long)integer(e, "update"),
			    (long long)integer(e, "checkpoint"),
			    (long long)integer(e, "claim"),
			    json_is_true(json_object_get(e, "quarantined")) ?
			    "  QUARANTINED" : "");
		}
	}
}

/* The replicas that joined or left a block, as the daemons that stayed
 * saw the change take effect (status "roster"): one line a change,
 * however many replicas of the block report it. */
static void
status_roster(const peers_list *pl, json_t *const *status)
{
	char seen[64][96];
	int i, nseen = 0, header = 0;

	for (i = 0; i < pl->n; i++) {
		json_t *c = json_object_get(json_object_get(status[i], "roster"),
		    "changes"), *e;
		size_t k;

		json_array_foreach(c, k, e) {
			const char *addr = json_string_value(json_object_get(e,
			    "addr")), *what = json_string_value(
			    json_object_get(e, "what"));
			char key[96], when[32];
			time_t at = (time_t)json_number_value(json_object_get(e,
			    "at"));
			struct tm tm;
			int j, dup = 0;

			if (addr == NULL || what == NULL)
				continue;
			snprintf(key, sizeof(key), "%d %s %s %lld",
			    pl->v[i].block, addr, what,
			    (long long)integer(e, "round"));
			for (j = 0; j < nseen; j++)
				dup |= strcmp(seen[j], key) == 0;
			if (dup)
				continue;
			if (nseen < 64)
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", key);
			gmtime_r(&at, &tm);
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%SZ", &tm);
			if (!header++)
				printf("\nreplicas that joined or left\n");
			printf("  block %d: %s %s at step %lld (round %lld), %s\n",
			    pl->v[i].block, addr, what,
			    (long long)integer(e, "step"),
			    (long long)integer(e, "round"), when);
		}
		if (json_is_string(json_object_get(json_object_get(status[i],
		    "roster"), "pending")) && strcmp(json_string_value(
		    json_object_get(json_object_get(status[i], "roster"),
		    "pending")), "none") != 0)
			printf("  %s: a change of block %d's replicas takes effect "
			    "at its next round boundary\n", pl->v[i].addr,
			    pl->v[i].block);
	}
}

/* The copies of other blocks each daemon keeps as their mirror, and
 * what a daemon's bootstrap installed: one line each, nothing when no
 * daemon mirrors anything. */
static void
status_mirrors(const peers_list *pl, json_t *const *status)
{
	int i, header = 0;

	for (i = 0; i < pl->n; i++) {
		json_t *m = json_object_get(status[i], "mirrors"), *e;
		json_t *bs = json_object_get(status[i], "bootstrap");
		size_t k;

		json_array_foreach(json_object_get(m, "held"), k, e) {
			if (!header++)
				printf("\nmirrors (copies of other blocks' "
				    "newest checkpoints)\n");
			printf("  %-22s holds block %lld step %lld round %lld "
			    "(%.1f MiB of %.1f) from %s\n", pl->v[i].addr,
			    (long long)integer(e, "block"),
			    (long long)integer(e, "step"),
			    (long long)integer(e, "round"),
			    (integer(e, "bytes") + integer(e,
			    "optimizer_bytes")) / 1048576.0,
			    integer(m, "budget") / 1048576.0,
			    json_string_value(json_object_get(e, "from")));
		}
		if (strcmp(json_string_value(json_object_get(bs, "outcome")) ?
		    json_string_value(json_object_get(bs, "outcome")) : "",
		    "installed") == 0)
			printf("%s bootstrapped from %s at step %lld round "
			    "%lld\n", pl->v[i].addr, json_string_value(
			    json_object_get(bs, "from")),
			    (long long)integer(bs, "step"),
			    (long long)integer(bs, "round"));
	}
}

/* One screen of status; returns the number of peers that answered. */
static int
status_once(const peers_list *pl)
{
	struct status_sum sum = { .up = 0 };
	json_t **status = calloc((size_t)pl->n + 1, sizeof(json_t *));
	int i, b;

	if (status == NULL)
		return 0;
	for (b = 0; b <= PR_MAX_BLOCKS; b++)
		sum.share_step[b] = -1;
	printf("%-22s %5s %4s %-9s %13s %8s %10s %6s %9s\n", "peer", "block",
	    "rep", "state", "step", "loss", "share", "round", "pos/s");
	for (i = 0; i < pl->n; i++)
		status[i] = status_peer(pl, i, &sum);
	status_print_run(&sum);
	status_strikes(pl, status);
	status_roster(pl, status);
	status_mirrors(pl, status);
	cli_status_predicted(pl, status);
	for (i = 0; i < pl->n; i++)
		json_decref(status[i]);
	free(status);
	return sum.up;
}

static int
status_exec(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "watch", optional_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *peers = NULL;
	double every = 0;
	peers_list pl;
	ph_list hosts;
	char err[PR_ERR_LEN], herr[PR_ERR_LEN];
	int ch, up, json = 0, pipeline, loaded;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': peers = optarg; break;
		case 'w': every = optarg ? atof(optarg) : 2.0; break;
		case 'j': json = 1; break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (peers == NULL) {
		fprintf(stderr, "shardmeter status: --peers FILE is required\n");
		return 2;
	}
	/* a pipeline host list, or a peer list (a ring of one block a
	 * line, one host or several for each, reads as either: the hosts'
	 * answers tell) */
	pipeline = loaded = ph_load(&hosts, peers, herr) == 0;
	if (peers_load(&pl, peers, err) != 0) {
		if (!pipeline) {
			fprintf(stderr, "shardmeter status: %s\n(as a pipeline "
			    "host list: %s)\n", err, herr);
			return 1;
		}
		memset(&pl, 0, sizeof(pl));
	} else if (pipeline)
		pipeline = cli_is_pipeline_host(&hosts);
	if (json && !pl.experts && !pipeline) {
		fprintf(stderr, "shardmeter status: --json is for a SOMA run "
		    "(a peer list of expert=E lines) or a pipeline host list\n");
		peers_free(&pl);
		if (loaded)
			ph_free(&hosts);
		return 2;
	}
	for (;;) {
		if (every > 0 && !json)
			printf("\033[H\033[2J");
		up = pipeline ? cli_status_pipeline(&hosts, json) : pl.experts ?
		    cli_status_soma(&pl, json) : status_once(&pl);
		fflush(stdout);
		if (every <= 0)
			break;
		usleep((useconds_t)(every * 1e6));
	}
	if (loaded)
		ph_free(&hosts);
	peers_free(&pl);
	return up > 0 ? 0 : 1;
}

const struct cmd_entry cmd_status_entry = {
	.name = "status",
	.summary = "progress and composed bound of running daemons (SOMA: "
	    "live mixture)",
	.usage = "usage: shardmeter status --peers FILE "
	    "[--watch[=SECONDS]] [--json]\nOne line per daemon of the "
	    "peer list, the run's progress with an ETA, and the\n"
	    "composed held-out bound: the sum of every block's "
	    "latest share\n(its replicas' mean).\nThen what each daemon refused of each peer "
	    "(updates, checkpoints, claims)\nand who is quarantined, when "
	    "any (shardmeter strikes has the details).\nWhen the daemons run from a plan (their plan "
	    "key): each block's predicted and\nmeasured round time, "
	    "positions/s and bytes per hour per link, with the\nerror "
	    "(measured - predicted) / predicted.\nOn a SOMA run (expert=E lines): each expert's "
	    "step, losses and speed, and\nthe routed mixture's held-out "
	    "loss mixed from the experts' published scores\n(--json: as "
	    "JSON).\nOn a pipeline host list (blocktraind -S, "
	    "pipeline_hosts): each host's role,\nblocks, requests, in "
	    "flight, answered, errors, latency p50/p90, time per\nhop, KV "
	    "cache and client bytes (--json: the hosts' statuses).\n",
	.exec = status_exec
};
