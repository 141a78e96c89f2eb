/* The health of the peers: one status request each, with a backoff on
 * failure; a peer that runs another spec is refused and reported.  See
 * peer_watch.h. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/core/log.h"
#include "daemon/node/peer_watch.h"
#include "kernels/clock.h"
#include "kernels/error.h"

static void
pw_failed(peers_entry *p, const hc_result *r, double t)
{
	p->failures++;
	p->state = PEERS_DOWN;
	snprintf(p->why, sizeof(p->why), "%s", r->error ? r->error :
	    r->status ? "bad status answer" : "no answer");
	p->next_probe = t + (p->failures < 5 ? 1 << p->failures : 30);
	if (p->failures == 1 || p->failures % 10 == 0)
		log_warnx("peer %s: %s", p->addr, p->why);
}

/* A step or round of a peer's checkpoint, before it goes on to the
 * mirrors and the rounds: -1 unless an integer of the run (0 to its
 * steps). */
static int64_t
in_run(const pw_watch *w, json_t *v)
{
	json_int_t x;

	if (!json_is_integer(v))
		return -1;
	x = json_integer_value(v);
	return x >= 0 && x <= w->c.steps ? (int64_t)x : -1;
}

/* What a peer's status says of it, kept beside its line (i). */
static void
pw_read(pw_watch *w, peers_entry *p, int i, json_t *root)
{
	const char *run_id = json_string_value(json_object_get(root, "run_id"));
	json_t *ck = json_object_get(root, "checkpoint");
	const char *sha = json_string_value(json_object_get(ck, "sha256"));
	int64_t step, round;

	snprintf(p->run_id, sizeof(p->run_id), "%s", run_id ? run_id : "");
	/* kept as sent: only compared (a round beyond the run's is what
	 * tells the rounds that a replica's "over" is a lie) and shown */
	p->step = json_integer_value(json_object_get(root, "step"));
	p->steps = json_integer_value(json_object_get(root, "steps"));
	p->round = json_integer_value(json_object_get(root, "round"));
	/* replicas of our block must hold the same weights after the same
	 * round: a difference means the round split */
	step = in_run(w, json_object_get(ck, "step"));
	round = in_run(w, json_object_get(ck, "round"));
	if (sha != NULL && strcmp(p->run_id, w->c.run_id) == 0 && step >= 0 &&
	    round >= 0)
		w->c.ops.checkpoint(w->c.arg, i, step, round, sha);
	if (json_is_number(json_object_get(root, "heldout_share"))) {
		p->share = json_number_value(json_object_get(root,
		    "heldout_share"));
		p->share_step = json_integer_value(json_object_get(root,
		    "heldout_share_step"));
	}
}

/* A peer that answered: up, or refused when it runs another run. */
static void
pw_answered(const pw_watch *w, peers_entry *p, int i, const hc_result *r,
    double t)
{
	p->last_seen = t;
	p->rtt_ms = r->total_s * 1000.0;
	p->failures = 0;
	p->next_probe = t + (w->c.ops.interval != NULL ?
	    w->c.ops.interval(w->c.arg, i) : PW_INTERVAL_S);
	if (strcmp(p->run_id, w->c.run_id) != 0) {
		if (p->state != PEERS_REFUSED)
			log_warnx("peer %s runs run %.16s..., not ours (%.16s...): "
			    "refused", p->addr, p->run_id, w->c.run_id);
		p->state = PEERS_REFUSED;
		snprintf(p->why, sizeof(p->why), "runs another run spec (run "
		    "id %.16s...)", p->run_id);
		return;
	}
	if (p->state != PEERS_UP)
		log_info("peer %s (%s %d) is up", p->addr, p->expert >= 0 ?
		    "expert" : "block", p->expert >= 0 ? p->expert : p->block);
	p->state = PEERS_UP;
	p->why[0] = '\0';
}

static void
pw_done(void *ctx, hc_result *r)
{
	void **pair = ctx;
	pw_watch *w = pair[0];
	peers_list *pl = w->c.ops.peers(w->c.arg, NULL);
	/* by address: a SIGHUP may have renumbered the list meanwhile */
	int i = peers_find(pl, pair[1]);
	json_t *root = NULL;
	json_error_t jerr;
	double t = kn_now();

	free(pair[1]);
	free(pair);
	if (w->c.ops.stopping(w->c.arg) || i < 0)
		return;
	pl->v[i].probing = 0;
	w->c.ops.meter(w->c.arg, i, PEERS_KIND_OTHER, r->bytes_in,
	    r->bytes_out);
	if (r->status == 200)
		root = json_loadb(r->body, r->body_len, 0, &jerr);
	if (root == NULL) {
		pw_failed(&pl->v[i], r, t);
		return;
	}
	pw_read(w, &pl->v[i], i, root);
	json_decref(root);
	pw_answered(w, &pl->v[i], i, r, t);
}

void
pw_init(pw_watch *w, const pw_config *c)
{
	w->c = *c;
}

void
pw_poll(pw_watch *w)
{
	double t = kn_now();
	int i, self;
	peers_list *pl = w->c.ops.peers(w->c.arg, &self);

	for (i = 0; i < pl->n; i++) {
		peers_entry *p = &pl->v[i];
		hc_request_opts o = { 0 };
		char url[2 * CF_HOST_LEN + 64], err[KN_ERR_LEN];
		void **pair;

		if (i == self || p->probing || t < p->next_probe)
			continue;
		snprintf(url, sizeof(url), "%s://%s/v1/status?from=%s",
		    hc_scheme(w->c.client), p->addr, w->c.advertise);
		o.method = "GET";
		o.url = url;
		o.pin = p->has_id ? p->id : NULL;
		o.timeout_ms = w->c.timeout_ms;
		o.connect_timeout_ms = w->c.timeout_ms;
		o.max_body_bytes = 1 << 20;
		if ((pair = malloc(2 * sizeof(void *))) == NULL)
			return;
		pair[0] = w;
		if ((pair[1] = strdup(p->addr)) == NULL) {
			free(pair);
			return;
		}
		if (hc_request(w->c.client, &o, pw_done, pair, err) != 0) {
			free(pair[1]);
			free(pair);
			log_warnx("peer %s: %s", p->addr, err);
			p->next_probe = t + 5;
			continue;
		}
		p->probing = 1;
	}
}
