/* shardmeter status, the "predicted / measured / error" section: when the
 * daemons carry a plan (blocktrain.conf's plan key), each block's round
 * time, positions/s and bytes per hour on each link beside what the plan
 * predicted, and the run's predicted time to its steps beside the one
 * projected from the measured rates.  Reads the "predicted" object of
 * each daemon's status; cmd_status.c calls it. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/cli/cmd.h"

/* One block's figures over its replicas that answered. */
struct block_sum {
	int replicas, with_plan;
	double round_p, round_m, pos_p, pos_m, train_p, train_m;
	int round_n, pos_n, train_n;
};

static double
num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* A prediction and its measurement (measured < 0 when there is none). */
static void
row(const char *block, const char *what, double p, double m)
{
	printf("%5s  %-36s %12.6g ", block, what, p);
	if (m >= 0)
		printf("%12.6g %+9.2f%%\n", m, 100 * (m - p) / p);
	else
		printf("%12s %10s\n", "-", "-");
}

/* measured of pair o (a {predicted, measured, error} object), or -1. */
static double
measured(json_t *pair)
{
	json_t *m = json_object_get(pair, "measured");

	return json_is_number(m) ? json_number_value(m) : -1;
}

static void
add_daemon(struct block_sum *b, json_t *pd)
{
	double m;

	b->with_plan++;
	b->round_p = num(json_object_get(pd, "round_s"), "predicted");
	b->pos_p = num(pd, "block_positions_per_s");
	b->train_p = num(json_object_get(pd, "train_s"), "predicted");
	if ((m = measured(json_object_get(pd, "round_s"))) >= 0) {
		b->round_m += m;
		b->round_n++;
	}
	if ((m = measured(json_object_get(pd, "positions_per_s"))) >= 0) {
		b->pos_m += m;
		b->pos_n++;
	}
	if ((m = measured(json_object_get(pd, "train_s"))) >= 0) {
		b->train_m = fmax(b->train_m, m);
		b->train_n++;
	}
}

static void
print_links(json_t *pd, int block)
{
	char label[128], num_block[16];
	json_t *l;
	size_t i;

	snprintf(num_block, sizeof(num_block), "%d", block);
	json_array_foreach(json_object_get(pd, "links"), i, l) {
		json_t *pair = json_object_get(l, "bytes_per_hour");

		snprintf(label, sizeof(label), "bytes/h %.48s -> %.48s",
		    json_string_value(json_object_get(pd, "host")),
		    json_string_value(json_object_get(l, "to")));
		row(num_block, label, num(pair, "predicted"), measured(pair));
	}
}

void
cli_status_predicted(const peers_list *pl, json_t *const *status)
{
	struct block_sum b[PR_MAX_BLOCKS + 1];
	json_t *first = NULL;
	double run_m = 0;
	int i, k, blocks = 0, projected = 1;
	char label[16];

	memset(b, 0, sizeof(b));
	for (i = 0; i < pl->n; i++) {
		json_t *pd = json_object_get(status[i], "predicted");
		int blk = pl->v[i].block;

		if (blk < 1 || blk > PR_MAX_BLOCKS)
			continue;
		blocks = blk > blocks ? blk : blocks;
		b[blk].replicas++;
		if (pd == NULL)
			continue;
		if (first == NULL)
			first = pd;
		add_daemon(&b[blk], pd);
	}
	if (first == NULL)
		return;
	printf("\npredicted / measured / error (plan %s, candidate of rank "
	    "%d)\n%5s  %-36s %12s %12s %10s\n", json_string_value(
	    json_object_get(first, "plan")), (int)num(first, "rank"), "block",
	    "figure", "predicted", "measured", "error");
	for (k = 1; k <= blocks; k++) {
		if (b[k].with_plan == 0) {
			projected = 0;
			continue;
		}
		snprintf(label, sizeof(label), "%d", k);
		/* replicas step in lockstep: their periods are one figure */
		row(label, "round s", b[k].round_p, b[k].round_n ?
		    b[k].round_m / b[k].round_n : -1);
		row(label, "positions/s (all replicas)", b[k].pos_p,
		    b[k].pos_n == b[k].replicas ? b[k].pos_m : -1);
		for (i = 0; i < pl->n; i++)
			if (pl->v[i].block == k && json_object_get(status[i],
			    "predicted") != NULL)
				print_links(json_object_get(status[i],
				    "predicted"), k);
		row(label, "time to the steps s", b[k].train_p, b[k].train_n ?
		    b[k].train_m : -1);
		if (b[k].train_n == 0)
			projected = 0;
		run_m = fmax(run_m, b[k].train_m);
	}
	row("run", "time to steps s (projected)", num(first,
	    "run_train_s"), projected ? run_m : -1);
}
