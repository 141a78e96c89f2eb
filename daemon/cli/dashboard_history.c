/* The dashboard's history (dashboard_history.h).  Each daemon's samples
 * are columns in one JSON object: "t" holds the poll times, every other
 * array the value of one figure at those times (null where the status
 * had none), so appending is one json_array_append per figure and the
 * page reads the columns as they are.  A column that appears late is
 * padded with nulls at its front, which keeps every column aligned on
 * "t" from its first element. */
#include "config.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/dashboard_history.h"
#include "daemon/core/conf.h"
#include "daemon/core/peers.h"
#include "kernels/error.h"
#include "proto/spec.h"

#define DASH_MAX_KEYS 64        /* numbers kept of a serving host */

struct dash_daemon {
	char addr[CF_HOST_LEN + 8];
	int kind, block, replica;
	json_t *latest;         /* the last status it answered, or NULL */
	json_t *series;         /* columns aligned on "t" */
	json_t *rounds;         /* "round", "t", "round_s": one per round seen */
	double last_try, last_ok;
	long http;
	char why[KN_ERR_LEN];   /* why the last poll failed; "" when it did not */
	/* what the last sample held, to add one only when something moved */
	int64_t step, round;
	double bytes;
	char state[32];
	int sampled;
	/* the poll time the round number last changed, and that number */
	double round_t;
	int64_t round_seen;
	int have_round;         /* round_seen holds a value */
	int round_changed;      /* and round_t is when it began */
};

struct dash_history {
	int n, max;
	unsigned long version;
	struct dash_daemon *d;
	/* each block's held-out share over steps: "B" -> {"step", "value"} */
	json_t *shares;
	int64_t share_step[PR_MAX_BLOCKS + 1];
	/* the daemon whose share is the block's last point: replicas may
	 * score a step apart, and `shardmeter status` takes the first
	 * listed, so this does too */
	int share_from[PR_MAX_BLOCKS + 1];
};

int
dash_history_new(dash_history **out, int n, int max_points, char *err)
{
	dash_history *h = calloc(1, sizeof(*h));
	int i;

	if (h == NULL || (h->d = calloc((size_t)n, sizeof(*h->d))) == NULL ||
	    (h->shares = json_object()) == NULL) {
		if (h != NULL)
			free(h->d);
		free(h);
		return kn_error(err, KN_ENOMEM, "out of memory for the history "
		    "of %d daemons", n);
	}
	h->n = n;
	h->max = max_points > 1 ? max_points : 2;
	for (i = 0; i <= PR_MAX_BLOCKS; i++)
		h->share_step[i] = -1;
	for (i = 0; i < n; i++) {
		h->d[i].series = json_object();
		h->d[i].rounds = json_object();
	}
	*out = h;
	return 0;
}

void
dash_history_free(dash_history *h)
{
	int i;

	if (h == NULL)
		return;
	for (i = 0; i < h->n; i++) {
		json_decref(h->d[i].latest);
		json_decref(h->d[i].series);
		json_decref(h->d[i].rounds);
	}
	json_decref(h->shares);
	free(h->d);
	free(h);
}

void
dash_history_describe(dash_history *h, int i, const char *addr, int kind,
    int block, int replica)
{
	struct dash_daemon *d = &h->d[i];

	snprintf(d->addr, sizeof(d->addr), "%s", addr);
	d->kind = kind;
	d->block = block;
	d->replica = replica;
}

/* Appends v (taking its reference; NULL stands for null) as element n of
 * column key of obj, the column made and padded with nulls as needed. */
static void
put(json_t *obj, const char *key, json_t *v, size_t n)
{
	json_t *col = json_object_get(obj, key);

	if (col == NULL) {
		col = json_array();
		json_object_set_new(obj, key, col);
	}
	while (json_array_size(col) < n)
		json_array_append_new(col, json_null());
	json_array_append_new(col, v != NULL ? v : json_null());
}

/* The same in the sub-object sub of obj (made if missing). */
static void
put_in(json_t *obj, const char *sub, const char *key, json_t *v, size_t n)
{
	json_t *o = json_object_get(obj, sub);

	if (o == NULL) {
		o = json_object();
		json_object_set_new(obj, sub, o);
	}
	put(o, key, v, n);
}

/* A copy of a number of o, or NULL (null) when it has none. */
static json_t *
number(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_deep_copy(v) : NULL;
}

/* Drops the elements at odd indices below lim from every column under
 * o: the same indices everywhere, so the columns stay aligned. */
static void
thin(json_t *o, size_t lim)
{
	const char *key;
	json_t *v;
	long j;

	json_object_foreach(o, key, v) {
		if (json_is_object(v))
			thin(v, lim);
		else if (json_is_array(v))
			/* from the top down, so the indices below hold */
			for (j = (long)lim - 1 - (long)(lim % 2); j >= 1; j -= 2)
				if ((size_t)j < json_array_size(v))
					json_array_remove(v, (size_t)j);
	}
}

/* Once column col of o holds more than max samples, every second one of
 * the older half goes: the whole run stays on the page, its older part
 * at a coarser step, in bounded memory. */
static void
keep_bounded(json_t *o, const char *col, int max)
{
	size_t n = json_array_size(json_object_get(o, col));

	if (n > (size_t)max)
		thin(o, n / 2 < 2 ? 2 : n / 2);
}

/* The bytes a status counts for checkpoints and updates: what moves
 * with the run ("other" moves with every status request, ours too). */
static double
bytes_moved(json_t *bytes)
{
	static const int kinds[] = { PEERS_KIND_CHECKPOINT, PEERS_KIND_UPDATE };
	double sum = 0;
	size_t k;

	for (k = 0; k < 2; k++)
		sum += json_number_value(json_object_get(json_object_get(bytes,
		    "in"), peers_kind_name(kinds[k]))) + json_number_value(
		    json_object_get(json_object_get(bytes, "out"),
		    peers_kind_name(kinds[k])));
	return sum;
}

/* The bytes of a status's {"in": {kind: n}, "out": {kind: n}} into
 * columns in_KIND and out_KIND of obj's sub-object sub; only the out_
 * ones with out_only (a link's, whose in is the other end's out). */
static void
put_bytes(json_t *obj, const char *sub, json_t *bytes, size_t n,
    int out_only)
{
	static const char *const dir[2] = { "in", "out" };
	char name[32];
	int k, w;

	for (w = out_only; w < 2; w++)
		for (k = 0; k < PEERS_KINDS; k++) {
			json_t *v = json_object_get(json_object_get(bytes,
			    dir[w]), peers_kind_name(k));

			snprintf(name, sizeof(name), "%s_%s", dir[w],
			    peers_kind_name(k));
			put_in(obj, sub, name, json_is_number(v) ?
			    json_deep_copy(v) : NULL, n);
		}
}

/* The plan's predicted and measured figures (predicted.c), when the
 * daemon runs from one. */
static void
put_predicted(json_t *s, json_t *pd, size_t n)
{
	static const char *const fig[] = { "round_s", "positions_per_s",
	    "train_s" };
	char name[48];
	size_t k;

	for (k = 0; k < sizeof(fig) / sizeof(fig[0]); k++) {
		json_t *pair = json_object_get(pd, fig[k]);

		snprintf(name, sizeof(name), "%s_predicted", fig[k]);
		put_in(s, "predicted", name, pd ? number(pair, "predicted") :
		    NULL, n);
		snprintf(name, sizeof(name), "%s_measured", fig[k]);
		put_in(s, "predicted", name, pd ? number(pair, "measured") :
		    NULL, n);
	}
}

/* A new round number: the time since the last change, per round. */
static void
note_round(dash_history *h, struct dash_daemon *d, double t, int64_t round)
{
	json_t *period = NULL;
	size_t n = json_array_size(json_object_get(d->rounds, "t"));

	if (d->have_round && round == d->round_seen)
		return;
	/* the first change ends a round the dashboard saw only part of */
	if (d->round_changed && round > d->round_seen)
		period = json_real((t - d->round_t) /
		    (double)(round - d->round_seen));
	put(d->rounds, "t", json_real(t), n);
	put(d->rounds, "round", json_integer(round), n);
	put(d->rounds, "round_s", period, n);
	keep_bounded(d->rounds, "t", h->max);
	d->round_changed = d->have_round;
	d->round_seen = round;
	d->round_t = t;
	d->have_round = 1;
}

/* The block's held-out share, when it is newer than any replica's (or
 * as new, from a replica listed earlier). */
static void
note_share(dash_history *h, int i, json_t *status)
{
	const struct dash_daemon *d = &h->d[i];
	json_t *share = json_object_get(status, "heldout_share");
	int64_t at = json_integer_value(json_object_get(status,
	    "heldout_share_step"));
	char key[16];
	json_t *b;
	size_t n;

	if (!json_is_number(share) || d->block < 1 ||
	    d->block > PR_MAX_BLOCKS || at < h->share_step[d->block] ||
	    (at == h->share_step[d->block] && i >= h->share_from[d->block]))
		return;
	snprintf(key, sizeof(key), "%d", d->block);
	if ((b = json_object_get(h->shares, key)) == NULL) {
		b = json_object();
		json_object_set_new(h->shares, key, b);
	}
	n = json_array_size(json_object_get(b, "step"));
	if (at == h->share_step[d->block]) {
		/* the same step from a replica listed earlier */
		json_array_set_new(json_object_get(b, "value"), n - 1,
		    json_deep_copy(share));
		h->share_from[d->block] = i;
		return;
	}
	h->share_step[d->block] = at;
	h->share_from[d->block] = i;
	put(b, "step", json_integer(at), n);
	put(b, "value", json_deep_copy(share), n);
	keep_bounded(b, "step", h->max);
}

/* Whether a sample was added. */
static int
record_train(dash_history *h, int i, double t, json_t *st)
{
	struct dash_daemon *d = &h->d[i];
	json_t *s = d->series, *p;
	int64_t step = json_integer_value(json_object_get(st, "step"));
	int64_t round = json_integer_value(json_object_get(st, "round"));
	const char *state = json_string_value(json_object_get(st, "state"));
	double bytes = 0;
	size_t n = json_array_size(json_object_get(s, "t")), j;

	note_round(h, d, t, round);
	note_share(h, i, st);
	bytes = bytes_moved(json_object_get(st, "bytes"));
	if (d->sampled && step == d->step && round == d->round &&
	    bytes == d->bytes && state != NULL && strcmp(state, d->state) == 0)
		return 0;
	d->sampled = 1;
	d->step = step;
	d->round = round;
	d->bytes = bytes;
	snprintf(d->state, sizeof(d->state), "%s", state ? state : "");
	put(s, "t", json_real(t), n);
	put(s, "step", json_integer(step), n);
	put(s, "round", json_integer(round), n);
	put(s, "loss", number(st, "loss"), n);
	put(s, "positions_per_s", number(st, "positions_per_s"), n);
	put(s, "steps_per_s", number(st, "steps_per_s"), n);
	put(s, "heldout_share", number(st, "heldout_share"), n);
	put_bytes(s, "bytes", json_object_get(st, "bytes"), n, 0);
	json_array_foreach(json_object_get(st, "peers"), j, p) {
		const char *addr = json_string_value(json_object_get(p,
		    "addr"));
		json_t *links = json_object_get(s, "links");

		if (addr == NULL || json_is_true(json_object_get(p, "self")))
			continue;
		if (links == NULL) {
			links = json_object();
			json_object_set_new(s, "links", links);
		}
		put_bytes(links, addr, json_object_get(p, "bytes"), n, 1);
	}
	put_predicted(s, json_object_get(st, "predicted"), n);
	keep_bounded(s, "t", h->max);
	return 1;
}

/* Every number under o, named by its path ("latency_ms.p99"), into the
 * columns of obj: what a serving host reports, whatever its shape. */
static void
put_numbers(json_t *obj, const char *prefix, json_t *o, size_t n, int depth)
{
	char path[128];
	const char *key;
	json_t *v;

	json_object_foreach(o, key, v) {
		snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." :
		    "", key);
		if (json_is_object(v) && depth < 4)
			put_numbers(obj, path, v, n, depth + 1);
		else if (json_is_number(v) && (json_object_get(obj, path) ||
		    json_object_size(obj) < DASH_MAX_KEYS))
			put(obj, path, json_deep_copy(v), n);
	}
}

static void
record_serve(dash_history *h, struct dash_daemon *d, double t, json_t *st)
{
	size_t n = json_array_size(json_object_get(d->series, "t"));
	json_t *k = json_object_get(d->series, "numbers");

	put(d->series, "t", json_real(t), n);
	if (k == NULL) {
		k = json_object();
		json_object_set_new(d->series, "numbers", k);
	}
	put_numbers(k, "", st, n, 0);
	keep_bounded(d->series, "t", h->max);
}

void
dash_history_record(dash_history *h, int i, double t, json_t *status,
    long http, const char *why)
{
	struct dash_daemon *d = &h->d[i];
	int was_up = d->latest != NULL && d->why[0] == '\0';

	d->last_try = t;
	d->http = http;
	if (status == NULL) {
		if (was_up)
			h->version++;
		snprintf(d->why, sizeof(d->why), "%s", why && why[0] ? why :
		    "no answer");
		return;
	}
	d->why[0] = '\0';
	d->last_ok = t;
	json_decref(d->latest);
	d->latest = json_incref(status);
	if (d->kind == DASH_SERVE) {
		record_serve(h, d, t, status);
		h->version++;
	} else if (record_train(h, i, t, status) || !was_up)
		h->version++;
}

unsigned long
dash_history_version(const dash_history *h)
{
	return h->version;
}

/* Daemon i's description and reachability, without its history. */
static json_t *
daemon_json(const struct dash_daemon *d, double now)
{
	json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:b,s:I}", "addr", d->addr,
	    "kind", d->kind == DASH_TRAIN ? "train" : "serve", "block",
	    d->block, "replica", d->replica, "up", d->why[0] == '\0' &&
	    d->latest != NULL, "http", (json_int_t)d->http);

	if (d->why[0])
		json_object_set_new(o, "error", json_string(d->why));
	if (d->last_try > 0)
		json_object_set_new(o, "polled_s_ago", json_real(now -
		    d->last_try));
	if (d->last_ok > 0)
		json_object_set_new(o, "answered_s_ago", json_real(now -
		    d->last_ok));
	return o;
}

/* The composed bound over steps: at each step where every block has a
 * share, their sum (the bound of DESIGN section 2). */
static json_t *
bound_json(const dash_history *h, int blocks)
{
	json_t *steps = json_array(), *values = json_array(), *first;
	size_t pos[PR_MAX_BLOCKS + 1] = { 0 }, i;
	char key[16];
	int b;

	first = json_object_get(h->shares, "1");
	for (i = 0; blocks > 0 && i < json_array_size(json_object_get(first,
	    "step")); i++) {
		int64_t s = json_integer_value(json_array_get(json_object_get(
		    first, "step"), i));
		double sum = 0;
		int all = 1;

		for (b = 1; b <= blocks && all; b++) {
			json_t *bs, *col;

			snprintf(key, sizeof(key), "%d", b);
			bs = json_object_get(h->shares, key);
			col = json_object_get(bs, "step");
			while (pos[b] < json_array_size(col) &&
			    json_integer_value(json_array_get(col, pos[b])) < s)
				pos[b]++;
			if (pos[b] >= json_array_size(col) ||
			    json_integer_value(json_array_get(col, pos[b])) != s)
				all = 0;
			else
				sum += json_number_value(json_array_get(
				    json_object_get(bs, "value"), pos[b]));
		}
		if (all) {
			json_array_append_new(steps, json_integer(s));
			json_array_append_new(values, json_real(sum));
		}
	}
	return json_pack("{s:o,s:o}", "step", steps, "value", values);
}

/* The sum of each block's latest share among the latest statuses, as
 * `shardmeter status` composes it; null until every block has one. */
static json_t *
bound_latest(const dash_history *h, int blocks)
{
	double share[PR_MAX_BLOCKS + 1] = { 0 }, sum = 0;
	int64_t at[PR_MAX_BLOCKS + 1];
	int i, b;

	for (b = 0; b <= PR_MAX_BLOCKS; b++)
		at[b] = -1;
	for (i = 0; i < h->n; i++) {
		const struct dash_daemon *d = &h->d[i];
		json_t *v = json_object_get(d->latest, "heldout_share");
		int64_t s = json_integer_value(json_object_get(d->latest,
		    "heldout_share_step"));

		if (d->kind != DASH_TRAIN || !json_is_number(v) ||
		    d->block < 1 || d->block > PR_MAX_BLOCKS || s <= at[d->block])
			continue;
		at[d->block] = s;
		share[d->block] = json_number_value(v);
	}
	for (b = 1; b <= blocks; b++) {
		if (at[b] < 0)
			return json_null();
		sum += share[b];
	}
	return blocks > 0 ? json_real(sum) : json_null();
}

static int
run_blocks(const dash_history *h)
{
	int i;

	for (i = 0; i < h->n; i++)
		if (h->d[i].kind == DASH_TRAIN && h->d[i].latest != NULL)
			return (int)json_integer_value(json_object_get(
			    h->d[i].latest, "blocks"));
	return 0;
}

json_t *
dash_history_json(const dash_history *h, double now)
{
	json_t *o = json_object(), *arr = json_array();
	int i, blocks = run_blocks(h);

	for (i = 0; i < h->n; i++) {
		const struct dash_daemon *d = &h->d[i];
		json_t *e = daemon_json(d, now);

		json_object_set(e, "status", d->latest ? d->latest :
		    json_null());
		json_object_set(e, "series", d->series);
		if (d->kind == DASH_TRAIN)
			json_object_set(e, "rounds", d->rounds);
		json_array_append_new(arr, e);
	}
	json_object_set_new(o, "now", json_real(now));
	json_object_set_new(o, "version", json_integer((json_int_t)h->version));
	json_object_set_new(o, "blocks", json_integer(blocks));
	json_object_set_new(o, "daemons", arr);
	json_object_set(o, "shares", h->shares);
	json_object_set_new(o, "bound", bound_json(h, blocks));
	json_object_set_new(o, "bound_latest", bound_latest(h, blocks));
	return o;
}

json_t *
dash_history_latest(const dash_history *h, double now)
{
	json_t *arr = json_array();
	int i;

	for (i = 0; i < h->n; i++) {
		json_t *e = daemon_json(&h->d[i], now);

		json_object_set(e, "status", h->d[i].latest ? h->d[i].latest :
		    json_null());
		json_array_append_new(arr, e);
	}
	return json_pack("{s:f,s:i,s:o,s:o}", "now", now, "blocks",
	    run_blocks(h), "bound_latest", bound_latest(h, run_blocks(h)),
	    "daemons", arr);
}
