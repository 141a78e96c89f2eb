/* Predicted beside measured (predicted.h): plan.json read strictly for the
 * parts a daemon compares, and the same figures measured over a sliding
 * window: round time as the median period of the last PD_ROUNDS rounds,
 * positions/s over the last PD_WINDOW_S seconds of steps, and bytes per
 * hour per link from the update bytes sent over the last PD_ROUNDS
 * rounds.  Loop thread only; no clock of its own (node.c gives times). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/node/predicted.h"
#include "kernels/error.h"
#include "proto/spec.h"
#include "proto/topology.h"

#define PD_MAX_LINKS 64
/* progress comes at most every 0.2 s: a minute is 300 samples */
#define PD_SAMPLES 1024

typedef struct {
	char to[TOPO_NAME_LEN];           /* the receiver's name in the plan */
	int block, replica;             /* its place, to find it in the list */
	double bytes_per_h;             /* predicted */
} pd_link;

struct pd_state {
	char path[PR_PATH_LEN];
	char host[TOPO_NAME_LEN];         /* ours in the plan */
	int rank;                       /* of the chosen candidate */
	int block, replica, replicas, steps, local_steps;
	double step_positions;
	/* predicted */
	double round_s, positions_per_s, block_positions_per_s, train_s;
	double run_train_s;
	int nlinks;
	pd_link link[PD_MAX_LINKS];
	/* measured: steps, oldest first from head */
	double st[PD_SAMPLES];
	int64_t ss[PD_SAMPLES];
	int shead, sn;
	/* rounds: when each update was ready and the bytes sent by then */
	double rt[PD_ROUNDS + 1];
	uint64_t rb[PD_ROUNDS + 1][PD_MAX_LINKS];
	unsigned char rfound[PD_ROUNDS + 1][PD_MAX_LINKS];
	int rhead, rn;
};

/* A positive finite number o[key], or an error naming where. */
static int
positive(json_t *o, const char *key, const char *where, const char *path,
    double *v, char *err)
{
	json_t *j = json_object_get(o, key);

	if (!json_is_number(j) || !isfinite(json_number_value(j)) ||
	    json_number_value(j) <= 0)
		return kn_error(err, KN_EINVAL, "%.200s: %s \"%s\" must be a "
		    "positive finite number", path, where, key);
	*v = json_number_value(j);
	return KN_OK;
}

static json_t *
typed(json_t *o, const char *key, json_type type)
{
	json_t *j = json_object_get(o, key);

	return j != NULL && json_typeof(j) == type ? j : NULL;
}

static json_t *
chosen_candidate(json_t *root, const char *path, int *rank, char *err)
{
	json_t *cands = typed(root, "candidates", JSON_ARRAY), *c;
	json_t *chosen = typed(root, "chosen", JSON_INTEGER);
	size_t i;

	if (cands == NULL || chosen == NULL) {
		kn_error(err, KN_EINVAL, "%.200s: no \"candidates\" array and "
		    "\"chosen\" rank (not a plan.json of shardmeter plan?)",
		    path);
		return NULL;
	}
	*rank = (int)json_integer_value(chosen);
	/* plan --pick K wrote row K's files (0: the default configuration) */
	if ((c = typed(root, "written", JSON_INTEGER)) != NULL) {
		*rank = (int)json_integer_value(c);
		if (*rank == 0 && (c = typed(root, "default",
		    JSON_OBJECT)) != NULL)
			return c;
	}
	json_array_foreach(cands, i, c)
		if (json_integer_value(typed(c, "rank", JSON_INTEGER)) == *rank)
			return c;
	kn_error(err, KN_EINVAL, "%.200s: no candidate of rank %d, the one "
	    "its files were written for", path, *rank);
	return NULL;
}

/* The place (block, replica) of host name in candidate c, or -1. */
static int
place_of(json_t *blocks, const char *name, int *block, int *replica)
{
	json_t *b, *h;
	size_t i, r;

	json_array_foreach(blocks, i, b)
		json_array_foreach(typed(b, "hosts", JSON_ARRAY), r, h)
			if (json_is_string(h) &&
			    strcmp(json_string_value(h), name) == 0) {
				*block = (int)json_integer_value(json_object_get(b,
				    "block"));
				*replica = (int)r;
				return 0;
			}
	return -1;
}

/* Our block's entry: its hosts, as many as our block's replicas, and its
 * predictions. */
static int
read_block(pd_state *p, json_t *blocks, const pd_self *self, char *err)
{
	json_t *b = NULL, *e, *hosts, *h;
	char where[32];
	size_t i;
	int rc;

	json_array_foreach(blocks, i, e)
		if (json_integer_value(typed(e, "block", JSON_INTEGER)) ==
		    self->block)
			b = e;
	if (b == NULL)
		return kn_error(err, KN_EINVAL, "%.200s: the plan has no block %d "
		    "(its chosen candidate has %zu blocks): a plan for another "
		    "placement", p->path, self->block, json_array_size(blocks));
	hosts = typed(b, "hosts", JSON_ARRAY);
	if (hosts == NULL || json_array_size(hosts) != (size_t)self->replicas)
		return kn_error(err, KN_EINVAL, "%.200s: the plan gives block %d "
		    "%zu replica(s), the peer list %d", p->path, self->block,
		    json_array_size(hosts), self->replicas);
	json_array_foreach(hosts, i, h)
		if (!json_is_string(h) || json_string_length(h) == 0 ||
		    json_string_length(h) >= TOPO_NAME_LEN)
			return kn_error(err, KN_EINVAL, "%.200s: block %d: "
			    "hosts[%zu] is not a host name", p->path,
			    self->block, i);
	snprintf(p->host, sizeof(p->host), "%s", json_string_value(
	    json_array_get(hosts, (size_t)self->replica)));
	snprintf(where, sizeof(where), "block %d:", self->block);
	if ((rc = positive(b, "round_s", where, p->path, &p->round_s,
	    err)) != 0 || (rc = positive(b, "positions_per_s", where, p->path,
	    &p->block_positions_per_s, err)) != 0 ||
	    (rc = positive(b, "train_s", where, p->path, &p->train_s,
	    err)) != 0)
		return rc;
	/* replicas step in lockstep: each does its share */
	p->positions_per_s = p->block_positions_per_s / self->replicas;
	return KN_OK;
}

/* The links our host sends on, each to a host that trains a block. */
static int
read_links(pd_state *p, json_t *cand, json_t *blocks, char *err)
{
	json_t *links = typed(cand, "links", JSON_ARRAY), *l;
	size_t i;

	if (links == NULL)
		return kn_error(err, KN_EINVAL, "%.200s: the chosen candidate "
		    "has no \"links\" array", p->path);
	json_array_foreach(links, i, l) {
		const char *from = json_string_value(typed(l, "from",
		    JSON_STRING));
		const char *to = json_string_value(typed(l, "to", JSON_STRING));
		json_t *bph = json_object_get(l, "bytes_per_hour");
		pd_link *k = &p->link[p->nlinks];

		if (from == NULL || to == NULL || !json_is_number(bph) ||
		    !isfinite(json_number_value(bph)) ||
		    json_number_value(bph) <= 0)
			return kn_error(err, KN_EINVAL, "%.200s: links[%zu] needs "
			    "\"from\", \"to\" and a positive finite "
			    "\"bytes_per_hour\"", p->path, i);
		if (strcmp(from, p->host) != 0)
			continue;
		if (p->nlinks == PD_MAX_LINKS)
			return kn_error(err, KN_EINVAL, "%.200s: more than %d "
			    "links from %s", p->path, PD_MAX_LINKS, p->host);
		if (strlen(to) >= sizeof(k->to) ||
		    place_of(blocks, to, &k->block, &k->replica) != 0)
			return kn_error(err, KN_EINVAL, "%.200s: links[%zu]: %.64s "
			    "trains no block of the chosen candidate", p->path,
			    i, to);
		snprintf(k->to, sizeof(k->to), "%s", to);
		k->bytes_per_h = json_number_value(bph);
		p->nlinks++;
	}
	return KN_OK;
}

static int
read_plan(pd_state *p, json_t *root, const pd_self *self, char *err)
{
	json_t *cand, *opts, *blocks;
	const char *run_id;
	int rc;

	if (!json_is_object(root) ||
	    json_integer_value(typed(root, "version", JSON_INTEGER)) != 1)
		return kn_error(err, KN_EINVAL, "%.200s: not a plan.json of "
		    "version 1", p->path);
	if ((run_id = json_string_value(typed(root, "run_id",
	    JSON_STRING))) == NULL)
		return kn_error(err, KN_EINVAL, "%.200s: no \"run_id\" (written "
		    "by an older shardmeter plan: plan again)", p->path);
	if (strcmp(run_id, self->run_id) != 0)
		return kn_error(err, KN_EINVAL, "%.200s: a plan for run "
		    "%.16s..., this daemon runs %.16s...: its spec is not the "
		    "plan's spec.conf", p->path, run_id, self->run_id);
	if ((cand = chosen_candidate(root, p->path, &p->rank, err)) == NULL)
		return KN_EINVAL;
	opts = typed(cand, "options", JSON_OBJECT);
	if (json_integer_value(typed(opts, "local_steps", JSON_INTEGER)) !=
	    self->local_steps)
		return kn_error(err, KN_EINVAL, "%.200s: the plan's local steps "
		    "are not the spec's %d", p->path, self->local_steps);
	if ((blocks = typed(cand, "blocks", JSON_ARRAY)) == NULL)
		return kn_error(err, KN_EINVAL, "%.200s: the chosen candidate "
		    "has no \"blocks\" array", p->path);
	if ((rc = read_block(p, blocks, self, err)) != 0 ||
	    (rc = positive(cand, "train_s", "the run's", p->path,
	    &p->run_train_s, err)) != 0)
		return rc;
	return read_links(p, cand, blocks, err);
}

int
pd_load(pd_state **out, const char *path, const pd_self *self, char *err)
{
	json_error_t jerr;
	json_t *root;
	pd_state *p;
	int rc;

	*out = NULL;
	if ((root = json_load_file(path, JSON_REJECT_DUPLICATES,
	    &jerr)) == NULL)
		return kn_error(err, KN_EINVAL, "plan %.200s:%d: %s", path,
		    jerr.line, jerr.text);
	if ((p = calloc(1, sizeof(*p))) == NULL) {
		json_decref(root);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	snprintf(p->path, sizeof(p->path), "%s", path);
	p->block = self->block;
	p->replica = self->replica;
	p->replicas = self->replicas;
	p->steps = self->steps;
	p->local_steps = self->local_steps;
	p->step_positions = self->step_positions;
	rc = read_plan(p, root, self, err);
	json_decref(root);
	if (rc != 0) {
		free(p);
		return rc;
	}
	*out = p;
	return KN_OK;
}

void
pd_free(pd_state *p)
{
	free(p);
}

void
pd_on_step(pd_state *p, double t, int64_t step)
{
	int last = (p->shead + p->sn - 1) % PD_SAMPLES;

	/* a checkpoint adopted from behind: the window starts again */
	if (p->sn > 0 && step < p->ss[last])
		p->sn = 0;
	if (p->sn == PD_SAMPLES) {
		p->shead = (p->shead + 1) % PD_SAMPLES;
		p->sn--;
	}
	last = (p->shead + p->sn) % PD_SAMPLES;
	p->st[last] = t;
	p->ss[last] = step;
	p->sn++;
}

/* Seconds per step over the last PD_WINDOW_S seconds of samples; 0 when
 * no step was made in them. */
static double
step_seconds(const pd_state *p)
{
	int last = (p->shead + p->sn - 1) % PD_SAMPLES, first, i;

	if (p->sn < 2)
		return 0;
	first = last;
	for (i = p->sn - 2; i >= 0; i--) {
		int k = (p->shead + i) % PD_SAMPLES;

		if (p->st[last] - p->st[k] > PD_WINDOW_S)
			break;
		first = k;
	}
	if (p->ss[last] <= p->ss[first] || p->st[last] <= p->st[first])
		return 0;
	return (p->st[last] - p->st[first]) /
	    (double)(p->ss[last] - p->ss[first]);
}

/* The peer index of block b's replica r in pl, or -1. */
static int
peer_at(const peers_list *pl, int b, int r)
{
	int i;

	for (i = 0; i < pl->n; i++)
		if (pl->v[i].block == b && peers_replica_index(pl, i) == r)
			return i;
	return -1;
}

void
pd_on_round(pd_state *p, double t, const peers_list *pl)
{
	int k, slot;

	if (p->rn == PD_ROUNDS + 1) {
		p->rhead = (p->rhead + 1) % (PD_ROUNDS + 1);
		p->rn--;
	}
	slot = (p->rhead + p->rn) % (PD_ROUNDS + 1);
	p->rt[slot] = t;
	for (k = 0; k < p->nlinks; k++) {
		int i = peer_at(pl, p->link[k].block, p->link[k].replica);

		p->rfound[slot][k] = i >= 0;
		p->rb[slot][k] = i >= 0 ?
		    pl->v[i].bytes_out[PEERS_KIND_UPDATE] : 0;
	}
	p->rn++;
}

static int
by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median period of the rounds noted; 0 before two. */
static double
round_seconds(const pd_state *p)
{
	double d[PD_ROUNDS];
	int i, n = p->rn - 1;

	if (n < 1)
		return 0;
	for (i = 0; i < n; i++)
		d[i] = p->rt[(p->rhead + i + 1) % (PD_ROUNDS + 1)] -
		    p->rt[(p->rhead + i) % (PD_ROUNDS + 1)];
	qsort(d, (size_t)n, sizeof(d[0]), by_value);
	return n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
}

/* Bytes per hour sent on link k over the rounds noted; -1 when unknown. */
static double
link_rate(const pd_state *p, int k)
{
	int a = p->rhead, z = (p->rhead + p->rn - 1) % (PD_ROUNDS + 1);

	if (p->rn < 2 || !p->rfound[a][k] || !p->rfound[z][k] ||
	    p->rt[z] <= p->rt[a] || p->rb[z][k] < p->rb[a][k])
		return -1;
	return (double)(p->rb[z][k] - p->rb[a][k]) * 3600 /
	    (p->rt[z] - p->rt[a]);
}

/* One figure: its name in the status JSON and in the metrics, and its
 * two values (measured < 0: not yet). */
typedef struct {
	const char *key;        /* status JSON */
	const char *metric;     /* blocktrain_predicted_<metric>, ... */
	const char *help;
	const char *measured_help;
	double predicted, measured;
} pd_figure;

enum { FIG_ROUND, FIG_POSITIONS, FIG_TRAIN, FIGS };

static void
figures(const pd_state *p, pd_figure f[FIGS])
{
	double per_step = step_seconds(p), round = p->replicas > 1 ?
	    round_seconds(p) : p->local_steps * per_step;
	/* a replicated block's steps pace with its rounds */
	double paced = p->replicas > 1 ? round / p->local_steps : per_step;
	f[FIG_ROUND] = (pd_figure){ "round_s", "round_seconds",
	    "One round's period: H local steps and the exchange not hidden.",
	    p->replicas > 1 ? "Median period of the last 5 rounds." :
	    "H steps at the rate of the last minute (one replica).",
	    p->round_s, round > 0 ? round : -1 };
	f[FIG_POSITIONS] = (pd_figure){ "positions_per_s",
	    "positions_per_second", "This replica's training positions per "
	    "second, rounds included.", "Over the last minute of steps.",
	    p->positions_per_s, per_step > 0 ? p->step_positions / per_step :
	    -1 };
	f[FIG_TRAIN] = (pd_figure){ "train_s", "train_seconds",
	    "Time to the block's steps.", "The block's steps at the "
	    "measured time per step (projected).", p->train_s,
	    paced > 0 ? p->steps * paced : -1 };
}

static json_t *
pair_json(double predicted, double measured)
{
	int have = measured >= 0;

	return json_pack("{s:f,s:o,s:o}", "predicted", predicted, "measured",
	    have ? json_real(measured) : json_null(), "error", have ?
	    json_real((measured - predicted) / predicted) : json_null());
}

json_t *
pd_status_json(const pd_state *p, const peers_list *pl)
{
	json_t *o, *links = json_array();
	pd_figure f[FIGS];
	int k;

	figures(p, f);
	o = json_pack("{s:s,s:s,s:i,s:{s:i,s:f},s:f,s:f}", "plan", p->path,
	    "host", p->host, "rank", p->rank, "window", "rounds", PD_ROUNDS,
	    "seconds", PD_WINDOW_S, "block_positions_per_s",
	    p->block_positions_per_s, "run_train_s", p->run_train_s);
	for (k = 0; k < FIGS; k++)
		json_object_set_new(o, f[k].key, pair_json(f[k].predicted,
		    f[k].measured));
	for (k = 0; k < p->nlinks; k++) {
		int i = peer_at(pl, p->link[k].block, p->link[k].replica);
		json_t *l = json_pack("{s:s,s:i,s:i,s:o}", "to", p->link[k].to,
		    "block", p->link[k].block, "replica", p->link[k].replica,
		    "bytes_per_hour", pair_json(p->link[k].bytes_per_h,
		    link_rate(p, k)));

		if (i >= 0)
			json_object_set_new(l, "peer", json_string(pl->v[i].addr));
		json_array_append_new(links, l);
	}
	json_object_set_new(o, "links", links);
	return o;
}

/* One gauge family over n series (labels[i], value[i]; a negative
 * value: none yet), its lines together as the text format wants. */
typedef struct {
	char labels[64 + CF_HOST_LEN + TOPO_NAME_LEN];
	double predicted, measured;
} pd_series;

enum { SERIES_PREDICTED, SERIES_MEASURED, SERIES_ERROR };

static void
family(FILE *f, int which, const char *name, const char *help,
    const char *measured_help, const pd_series *v, int n)
{
	static const char *const fmt[] = { "blocktrain_predicted_%s",
	    "blocktrain_measured_%s", "blocktrain_%s_error_ratio" };
	char metric[96];
	int i, header = 0;

	snprintf(metric, sizeof(metric), fmt[which], name);
	for (i = 0; i < n; i++) {
		double x = v[i].predicted;

		if (which != SERIES_PREDICTED && v[i].measured < 0)
			continue;
		if (which == SERIES_MEASURED)
			x = v[i].measured;
		else if (which == SERIES_ERROR)
			x = (v[i].measured - v[i].predicted) / v[i].predicted;
		if (!header++)
			fprintf(f, "# HELP %s %s%s\n# TYPE %s gauge\n", metric,
			    which == SERIES_PREDICTED ? "Predicted by the plan: " :
			    "", which == SERIES_PREDICTED ? help :
			    which == SERIES_MEASURED ? measured_help :
			    "(measured - predicted) / predicted.", metric);
		fprintf(f, "%s{%s} %.9g\n", metric, v[i].labels, x);
	}
}

static void
families(FILE *f, const char *name, const char *help,
    const char *measured_help, const pd_series *v, int n)
{
	int which;

	for (which = SERIES_PREDICTED; which <= SERIES_ERROR; which++)
		family(f, which, name, help, measured_help, v, n);
}

char *
pd_metrics_text(const pd_state *p, const peers_list *pl)
{
	pd_series one, links[PD_MAX_LINKS];
	char *text = NULL;
	size_t len = 0;
	pd_figure fig[FIGS];
	FILE *out = open_memstream(&text, &len);
	int k;

	if (out == NULL)
		return NULL;
	figures(p, fig);
	snprintf(one.labels, sizeof(one.labels), "block=\"%d\",replica=\"%d\"",
	    p->block, p->replica);
	for (k = 0; k < FIGS; k++) {
		one.predicted = fig[k].predicted;
		one.measured = fig[k].measured;
		families(out, fig[k].metric, fig[k].help, fig[k].measured_help,
		    &one, 1);
	}
	fprintf(out, "# HELP blocktrain_predicted_run_train_seconds Predicted "
	    "by the plan: time to every block's steps.\n# TYPE "
	    "blocktrain_predicted_run_train_seconds gauge\n"
	    "blocktrain_predicted_run_train_seconds %.9g\n", p->run_train_s);
	for (k = 0; k < p->nlinks; k++) {
		int i = peer_at(pl, p->link[k].block, p->link[k].replica);

		snprintf(links[k].labels, sizeof(links[k].labels),
		    "block=\"%d\",replica=\"%d\",peer=\"%s\"", p->block,
		    p->replica, i >= 0 ? pl->v[i].addr : p->link[k].to);
		links[k].predicted = p->link[k].bytes_per_h;
		links[k].measured = link_rate(p, k);
	}
	families(out, "link_bytes_per_hour", "update bytes per hour this "
	    "daemon sends on the link.", "Update bytes per hour sent on the "
	    "link over the last 5 rounds, from the daemon's own meters.",
	    links, p->nlinks);
	if (fclose(out) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
