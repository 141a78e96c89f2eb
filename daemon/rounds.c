/* Averaging rounds between the replicas of one block (DESIGN section 2).
 *
 * Each replica runs H local steps from the round's weights, encodes its
 * update theta_start - theta_local and POSTs it to every other replica.
 * The coordinator of the round, the replica of lowest index that answers
 * its probes, decides who is in: every replica that is up, or whoever it
 * has heard from when the round deadline passes.  It publishes the member
 * list at .../rounds/{r}/commit.  Every member then averages the members'
 * updates in replica order, the very bytes that were sent (its own update
 * decoded from its own encoding too), so that all replicas end bitwise
 * identical.  A replica that was left out, or is behind, adopts the
 * coordinator's published checkpoint instead. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/log.h"
#include "daemon/node.h"
#include "kernels/average.h"
#include "kernels/error.h"
#include "proto/update.h"

#define MAX_REPLICAS 64
#define POLL_MS 100

struct round_state {
	uv_timer_t timer;
	pr_encoding enc;
	int rep_peer[MAX_REPLICAS];     /* replica index -> peer index */
	int64_t round;                  /* the round we gather, -1: none */
	int active;                     /* our own update is in */
	double ready_at;
	size_t count;
	char *bytes[MAX_REPLICAS];      /* each replica's update, as sent */
	size_t len[MAX_REPLICAS];
	float *delta[MAX_REPLICAS];
	int fetching[MAX_REPLICAS];
	int pushed[MAX_REPLICAS];       /* 0 to do, 1 in flight, 2 accepted */
	char *mine;                     /* our update, for retries */
	size_t mine_len;
	/* the last commit, kept for late followers */
	int64_t committed_round;        /* -1: none yet */
	uint64_t members;
	char *kept[MAX_REPLICAS];       /* that round's updates */
	size_t kept_len[MAX_REPLICAS];
	int polling, catching_up;
	double next_poll;
	int diverged_from;              /* replica to copy next round, or -1 */
};

static int
self_replica(const node *n)
{
	return n->replica;
}

static void
drop_round(round_state *r)
{
	int i;

	for (i = 0; i < MAX_REPLICAS; i++) {
		free(r->bytes[i]);
		free(r->delta[i]);
		r->bytes[i] = NULL;
		r->delta[i] = NULL;
		r->len[i] = 0;
		r->fetching[i] = 0;
		r->pushed[i] = 0;
	}
	free(r->mine);
	r->mine = NULL;
	r->mine_len = 0;
	r->active = 0;
	r->polling = 0;
}

static void on_timer(uv_timer_t *t);

int
rounds_init(node *n, char *err)
{
	round_state *r;
	int i, k = 0;

	if (n->replicas <= 1)
		return KN_OK;
	if (n->replicas > MAX_REPLICAS)
		return kn_error(err, KN_EINVAL, "block %d has %d replicas; at "
		    "most %d are supported", n->cfg.block, n->replicas,
		    MAX_REPLICAS);
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if (pr_encoding_parse(n->cfg.update_encoding, &r->enc) != 0) {
		free(r);
		return kn_error(err, KN_EINVAL, "update_encoding: unknown '%s'",
		    n->cfg.update_encoding);
	}
	for (i = 0; i < n->peers.n; i++)
		if (n->peers.v[i].block == n->cfg.block)
			r->rep_peer[k++] = i;
	r->round = -1;
	r->committed_round = -1;
	r->diverged_from = -1;
	/* known before our first update, so early ones from others fit */
	r->count = kn_model_params_for(&(kn_model_shape){ n->spec.width,
	    n->spec.heads, n->spec.layers_per_block, n->spec.window, 0 });
	uv_timer_init(n->loop, &r->timer);
	r->timer.data = n;
	uv_timer_start(&r->timer, on_timer, POLL_MS, POLL_MS);
	n->rounds = r;
	return KN_OK;
}

static void
on_timer_closed(uv_handle_t *h)
{
	node *n = h->data;	/* h lives inside r: read it before r goes */
	round_state *r = n->rounds;
	int i;

	n->rounds = NULL;
	drop_round(r);
	for (i = 0; i < MAX_REPLICAS; i++)
		free(r->kept[i]);
	free(r);
}

/* Closes the round timer; the state is freed once libuv lets go of it. */
void
rounds_free(node *n)
{
	if (n->rounds == NULL)
		return;
	uv_timer_stop(&n->rounds->timer);
	uv_close((uv_handle_t *)&n->rounds->timer, on_timer_closed);
}

void
rounds_diverged(node *n, int peer, const char *their_sha256)
{
	round_state *r = n->rounds;
	int k = sm_peers_replica_index(&n->peers, peer);

	if (r == NULL || k >= n->replica || r->diverged_from >= 0)
		return;
	log_warnx("round %" PRId64 ": replica %d (%s) holds checkpoint %.16s... "
	    "for the same step and round, ours is %.16s...: two coordinators "
	    "decided differently; this replica adopts replica %d's weights at "
	    "its next round", n->ckpt_round, k, n->peers.v[peer].addr,
	    their_sha256, n->etag, k);
	node_journal(n, "round %" PRId64 " diverged from replica %d (%.16s vs "
	    "%.16s): adopting its checkpoint", n->ckpt_round, k, their_sha256,
	    n->etag);
	r->diverged_from = k;
}

int
rounds_same_replicas(const node *n, const sm_peer_list *fresh)
{
	const round_state *r = n->rounds;
	int i, k = 0;

	if (r == NULL)
		return sm_peers_replicas(fresh, n->cfg.block) == 1;
	for (i = 0; i < fresh->n; i++) {
		if (fresh->v[i].block != n->cfg.block)
			continue;
		if (k >= n->replicas || strcmp(fresh->v[i].addr,
		    n->peers.v[r->rep_peer[k]].addr) != 0)
			return 0;
		k++;
	}
	return k == n->replicas;
}

void
rounds_remap(node *n)
{
	round_state *r = n->rounds;
	int i, k = 0;

	if (r == NULL)
		return;
	for (i = 0; i < n->peers.n; i++)
		if (n->peers.v[i].block == n->cfg.block)
			r->rep_peer[k++] = i;
}

/* The coordinator: the lowest replica index that is up (we count). */
static int
coordinator(const node *n)
{
	const round_state *r = n->rounds;
	int k;

	for (k = 0; k < n->replicas; k++) {
		const sm_peer *p = &n->peers.v[r->rep_peer[k]];

		if (p->self || p->state == SM_PEER_UP)
			return k;
	}
	return self_replica(n);
}

static const char *
peer_addr(const node *n, int replica)
{
	return n->peers.v[n->rounds->rep_peer[replica]].addr;
}

static void
url_for(const node *n, int replica, char *url, size_t len, const char *fmt,
    ...) __attribute__((format(printf, 5, 6)));

static void
url_for(const node *n, int replica, char *url, size_t len, const char *fmt,
    ...)
{
	char path[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	snprintf(url, len, "http://%s%s%sfrom=%s", peer_addr(n, replica), path,
	    strchr(path, '?') ? "&" : "?", n->cfg.advertise);
}

struct call {
	node *n;
	int replica;
	int64_t round;
};

static struct call *
call_new(node *n, int replica, int64_t round)
{
	struct call *c = malloc(sizeof(*c));

	if (c != NULL) {
		c->n = n;
		c->replica = replica;
		c->round = round;
	}
	return c;
}

static int
send_request(node *n, int replica, const char *method, const char *url,
    const char *body, size_t len, size_t max_body, hc_done_fn done,
    struct call *c)
{
	hc_request_opts o = { 0 };
	char err[KN_ERR_LEN];

	o.method = method;
	o.url = url;
	o.content_type = body ? "application/x-msgpack" : NULL;
	o.body = body;
	o.body_len = len;
	o.timeout_ms = (long)(n->spec.round_deadline * 1000.0) + 5000;
	o.connect_timeout_ms = n->cfg.peer_timeout_ms;
	o.max_body_bytes = max_body;
	if (hc_request(n->client, &o, done, c, err) != 0) {
		log_warnx("round: %s %s: %s", method, peer_addr(n, replica), err);
		free(c);
		return -1;
	}
	return 0;
}

/* Decodes an update for the current round into slot replica. */
static int
store_update(node *n, const char *buf, size_t len, int64_t round,
    int *replica_out, char *err)
{
	round_state *r = n->rounds;
	pr_update_meta expect = { 0 }, got;
	float *delta;
	int rc;

	snprintf(expect.run_id, sizeof(expect.run_id), "%s", n->run_id);
	expect.block = n->cfg.block;
	expect.round = round;
	expect.count = r->count;
	if ((delta = malloc(r->count * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	rc = pr_update_decode(buf, len, &expect, delta, &got, err);
	if (rc == 0 && (got.replica < 0 || got.replica >= n->replicas))
		rc = kn_error(err, KN_EINVAL, "replica %d does not exist: block "
		    "%d has %d", got.replica, n->cfg.block, n->replicas);
	if (rc != 0) {
		free(delta);
		return rc;
	}
	free(r->delta[got.replica]);
	free(r->bytes[got.replica]);
	r->delta[got.replica] = delta;
	r->bytes[got.replica] = malloc(len);
	if (r->bytes[got.replica] != NULL)
		memcpy(r->bytes[got.replica], buf, len);
	r->len[got.replica] = len;
	*replica_out = got.replica;
	return KN_OK;
}

static void catch_up(node *n, int from);

/* A replica that cannot be reached at all is down now, not at its next
 * probe: the round moves on to the next coordinator at once.  A replica
 * never seen yet stays worth waiting for (it may be starting). */
static void
mark_unreachable(node *n, int replica, const hc_result *res)
{
	sm_peer *p = &n->peers.v[n->rounds->rep_peer[replica]];

	if (res->status != 0 || p->self || p->state == SM_PEER_DOWN)
		return;
	p->state = SM_PEER_DOWN;
	p->failures++;
	p->next_probe = kn_now() + 1.0;
	snprintf(p->why, sizeof(p->why), "%s", res->error ? res->error :
	    "unreachable");
	log_warnx("round: replica %d (%s) is unreachable: %s", replica, p->addr,
	    p->why);
}

/* Members' updates in replica order, averaged, to the trainer thread. */
static void
apply(node *n, uint64_t members)
{
	round_state *r = n->rounds;
	const float *list[MAX_REPLICAS];
	float *avg = malloc(r->count * sizeof(float));
	int k, m = 0;

	if (avg == NULL) {
		log_warnx("round %" PRId64 ": out of memory", r->round);
		return;
	}
	for (k = 0; k < n->replicas; k++)
		if (members & (1ULL << k))
			list[m++] = r->delta[k];
	kn_average(avg, list, m, r->count);
	/* keep this round's updates for followers that lack one */
	for (k = 0; k < MAX_REPLICAS; k++) {
		free(r->kept[k]);
		r->kept[k] = r->bytes[k];
		r->kept_len[k] = r->len[k];
		r->bytes[k] = NULL;
	}
	r->committed_round = r->round;
	r->members = members;
	log_info("round %" PRId64 ": averaged %d of %d replicas", r->round, m,
	    n->replicas);
	node_journal(n, "round %" PRId64 " members 0x%llx coordinator %d",
	    r->round, (unsigned long long)members, coordinator(n));
	wk_commit_round(n->worker, r->round, avg,
	    (float)n->spec.outer_lr, NULL, 0);
	drop_round(r);
	r->round = -1;
	n->state = "training";
}

static void
on_checkpoint(void *ctx, hc_result *res)
{
	struct call cc = *(struct call *)ctx, *c = &cc;
	node *n = c->n;
	round_state *r = n->rounds;
	char *body;

	free(ctx);
	if (r == NULL || n->stopping)
		return;
	r->catching_up = 0;
	node_meter(n, peer_addr(n, c->replica), SM_KIND_CHECKPOINT,
	    res->bytes_in, res->bytes_out);
	if (res->status != 200 || res->body == NULL) {
		log_warnx("round: catching up from %s failed: %s",
		    peer_addr(n, c->replica), res->error ? res->error :
		    "bad status");
		return;
	}
	if (r->round < 0 || !r->active)
		return;
	body = hc_result_take_body(res);
	log_info("round %" PRId64 ": left out or behind; adopting the "
	    "checkpoint of %s (%zu bytes)", r->round,
	    peer_addr(n, c->replica), res->body_len);
	node_journal(n, "round %" PRId64 " left out: adopted the checkpoint of "
	    "%s", r->round, peer_addr(n, c->replica));
	wk_commit_round(n->worker, r->round, NULL, 0.0f, body,
	    res->body_len);
	drop_round(r);
	r->round = -1;
	n->state = "training";
}

/* Adopts the checkpoint of replica k (one that is ahead of us, or the
 * coordinator of a round that left us out). */
static void
catch_up(node *n, int k)
{
	round_state *r = n->rounds;
	char url[1024];
	struct call *c;

	if (r->catching_up || k == self_replica(n))
		return;
	url_for(n, k, url, sizeof(url), "/v1/blocks/%d/checkpoint",
	    n->cfg.block);
	if ((c = call_new(n, k, r->round)) == NULL)
		return;
	if (send_request(n, k, "GET", url, NULL, 0, (size_t)1 << 32,
	    on_checkpoint, c) == 0)
		r->catching_up = 1;
}

static void
on_pushed(void *ctx, hc_result *res)
{
	struct call cc = *(struct call *)ctx, *c = &cc;
	node *n = c->n;

	if (n->rounds != NULL && !n->stopping) {
		node_meter(n, peer_addr(n, c->replica), SM_KIND_UPDATE,
		    res->bytes_in, res->bytes_out);
		if (res->status == 409 && n->rounds->round == c->round) {
			log_info("round %" PRId64 ": %s is ahead: %.*s", c->round,
			    peer_addr(n, c->replica), (int)(res->body_len > 200 ?
			    200 : res->body_len), res->body ? res->body : "");
			/* "is over": it has moved on, we adopt its weights;
			 * "behind": it will catch up, so offer again */
			if (strstr(res->body ? res->body : "", "is over") != NULL) {
				catch_up(n, c->replica);
				n->rounds->pushed[c->replica] = 2;
			} else {
				n->rounds->pushed[c->replica] = 0;
			}
		} else if (res->status == 202) {
			n->rounds->pushed[c->replica] = 2;
			log_info("round %" PRId64 ": sent our update to %s (%zu "
			    "bytes)", c->round, peer_addr(n, c->replica),
			    n->rounds->mine_len);
		} else if (res->status != 409) {
			/* not there yet, or refused: try again on the next tick */
			if (n->rounds->round == c->round)
				n->rounds->pushed[c->replica] = 0;
			log_debug("round %" PRId64 ": update to %s: %s", c->round,
			    peer_addr(n, c->replica), res->error ? res->error :
			    res->body ? res->body : "refused");
		}
	}
	free(ctx);
}

static void
on_fetched(void *ctx, hc_result *res)
{
	struct call cc = *(struct call *)ctx, *c = &cc;
	node *n = c->n;
	round_state *r = n->rounds;
	char err[KN_ERR_LEN];
	int rep;

	free(ctx);
	if (r == NULL || n->stopping)
		return;
	r->fetching[c->replica] = 0;
	node_meter(n, peer_addr(n, coordinator(n)), SM_KIND_UPDATE,
	    res->bytes_in, res->bytes_out);
	if (res->status == 200 && r->round == c->round &&
	    store_update(n, res->body, res->body_len, r->round, &rep,
	    err) != 0)
		log_warnx("round %" PRId64 ": fetched update: %s", r->round, err);
}

/* A follower's view of the commit. */
static void
on_commit(void *ctx, hc_result *res)
{
	struct call cc = *(struct call *)ctx, *c = &cc;
	node *n = c->n;
	round_state *r = n->rounds;
	json_t *root, *arr;
	json_error_t jerr;
	uint64_t members = 0;
	size_t i;
	int k, missing = 0;

	free(ctx);
	if (r == NULL || n->stopping)
		return;
	r->polling = 0;
	node_meter(n, peer_addr(n, c->replica), SM_KIND_OTHER,
	    res->bytes_in, res->bytes_out);
	mark_unreachable(n, c->replica, res);
	if (r->round != c->round || !r->active)
		return;
	if (res->status == 409 || res->status == 410) {
		catch_up(n, coordinator(n));
		return;
	}
	if (res->status != 200)
		return;		/* not decided yet: poll again */
	if ((root = json_loadb(res->body, res->body_len, 0, &jerr)) == NULL)
		return;
	arr = json_object_get(root, "members");
	for (i = 0; i < json_array_size(arr); i++) {
		json_int_t m = json_integer_value(json_array_get(arr, i));

		if (m >= 0 && m < n->replicas)
			members |= 1ULL << m;
	}
	json_decref(root);
	if (!(members & (1ULL << self_replica(n)))) {
		catch_up(n, coordinator(n));
		return;
	}
	for (k = 0; k < n->replicas; k++) {
		char url[1024];
		struct call *f;

		if (!(members & (1ULL << k)) || r->delta[k] != NULL)
			continue;
		missing = 1;
		if (r->fetching[k])
			continue;
		url_for(n, coordinator(n), url, sizeof(url),
		    "/v1/blocks/%d/rounds/%" PRId64 "/updates/%d",
		    n->cfg.block, r->round, k);
		if ((f = call_new(n, k, r->round)) != NULL &&
		    send_request(n, coordinator(n), "GET", url, NULL, 0,
		    pr_update_max_bytes(r->count), on_fetched, f) == 0)
			r->fetching[k] = 1;
	}
	if (!missing)
		apply(n, members);
}

static void on_pushed(void *ctx, hc_result *res);

/* Sends our update to every replica that has not taken it yet. */
static void
push(node *n)
{
	round_state *r = n->rounds;
	int k;

	for (k = 0; k < n->replicas; k++) {
		char url[1024];
		struct call *c;

		if (k == self_replica(n) || r->pushed[k] != 0 || r->mine == NULL)
			continue;
		url_for(n, k, url, sizeof(url), "/v1/blocks/%d/rounds/%" PRId64
		    "/updates", n->cfg.block, r->round);
		if ((c = call_new(n, k, r->round)) != NULL &&
		    send_request(n, k, "POST", url, r->mine, r->mine_len, 1 << 16,
		    on_pushed, c) == 0)
			r->pushed[k] = 1;
	}
}

static void
progress(node *n)
{
	round_state *r = n->rounds;
	double t = kn_now();
	int k = coordinator(n), i, have = 0, waiting = 0;
	uint64_t members = 0;

	if (r->round < 0 || !r->active || r->catching_up)
		return;
	push(n);
	if (k != self_replica(n)) {
		char url[1024];
		struct call *c;

		if (r->polling || t < r->next_poll)
			return;
		r->next_poll = t + POLL_MS / 1000.0;
		url_for(n, k, url, sizeof(url), "/v1/blocks/%d/rounds/%" PRId64
		    "/commit", n->cfg.block, r->round);
		if ((c = call_new(n, k, r->round)) != NULL &&
		    send_request(n, k, "GET", url, NULL, 0, 1 << 16, on_commit,
		    c) == 0)
			r->polling = 1;
		return;
	}
	/* we coordinate: wait for every replica that is up, until the
	 * deadline; then commit with whoever we have */
	for (i = 0; i < n->replicas; i++) {
		const sm_peer *p = &n->peers.v[r->rep_peer[i]];

		if (r->delta[i] != NULL) {
			members |= 1ULL << i;
			have++;
		} else if (p->state == SM_PEER_UP ||
		    p->state == SM_PEER_UNKNOWN || p->last_seen == 0) {
			/* up, or never seen yet (starting): worth waiting for;
			 * one that was seen and went down is not */
			waiting++;
		}
	}
	if (waiting > 0 && t - r->ready_at < n->spec.round_deadline)
		return;
	if (waiting > 0)
		log_warnx("round %" PRId64 ": deadline passed; %d replica(s) "
		    "left out", r->round, waiting);
	apply(n, members);
}

static void
on_timer(uv_timer_t *t)
{
	node *n = t->data;

	if (n->rounds != NULL && !n->stopping)
		progress(n);
}

void
rounds_cron(node *n)
{
	if (n->rounds != NULL)
		progress(n);
}

void
rounds_on_update(node *n, wk_event *ev)
{
	round_state *r = n->rounds;
	pr_update_meta meta = { 0 };
	char err[KN_ERR_LEN], *buf;
	size_t len;
	int self = self_replica(n), rep;

	if (r == NULL) {
		/* one replica: nothing to average, keep the local weights */
		wk_commit_round(n->worker, ev->round, NULL, 0, NULL, 0);
		return;
	}
	if (r->round != ev->round) {
		/* what came for another round is of no use now */
		drop_round(r);
	}
	r->round = ev->round;
	r->count = ev->count;
	if (r->diverged_from >= 0) {
		int from = r->diverged_from;

		r->diverged_from = -1;
		r->active = 1;
		r->ready_at = kn_now();
		catch_up(n, from);
		if (r->catching_up)
			return;
		r->active = 0;	/* could not ask: take part as usual */
	}
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", n->run_id);
	meta.block = n->cfg.block;
	meta.round = ev->round;
	meta.replica = self;
	meta.step = ev->step;
	meta.enc = r->enc;
	meta.count = ev->count;
	if (pr_update_encode(&meta, ev->delta, &buf, &len, err) != 0) {
		log_warnx("round %" PRId64 ": cannot encode our update: %s",
		    ev->round, err);
		wk_commit_round(n->worker, ev->round, NULL, 0, NULL, 0);
		return;
	}
	/* our own contribution as the others will see it */
	if (store_update(n, buf, len, ev->round, &rep, err) != 0) {
		log_warnx("round %" PRId64 ": %s", ev->round, err);
		free(buf);
		wk_commit_round(n->worker, ev->round, NULL, 0, NULL, 0);
		return;
	}
	r->active = 1;
	r->ready_at = kn_now();
	r->mine = buf;
	r->mine_len = len;
	memset(r->pushed, 0, sizeof(r->pushed));
	push(n);
	log_debug("round %" PRId64 ": our update is out (%zu bytes, %s)",
	    ev->round, len, pr_encoding_name(r->enc));
	progress(n);
}

int
rounds_handle(node *n, const hs_request *req, hs_response *res, int block,
    int64_t round, const char *rest)
{
	round_state *r = n->rounds;
	char err[KN_ERR_LEN];
	int rep;

	(void)block;
	if (r == NULL) {
		api_text(res, 404, "block %d has one replica: it exchanges no "
		    "updates", n->cfg.block);
		return 1;
	}
	if (strcmp(rest, "updates") == 0) {
		int64_t current = r->round >= 0 ? r->round : n->round;

		if (strcmp(req->method, "POST") != 0) {
			hs_response_header(res, "Allow", "POST");
			api_text(res, 405, "updates are POSTed");
			return 1;
		}
		if (round < current || round <= r->committed_round) {
			api_text(res, 409, "round %" PRId64 " is over; this replica is "
			    "at round %" PRId64 ": fetch the checkpoint", round,
			    current);
			return 1;
		}
		if (round > current) {
			api_text(res, 409, "this replica is behind, at round %" PRId64
			    "; it will catch up", current);
			return 1;
		}
		if (store_update(n, req->body, req->body_len, round, &rep,
		    err) != 0) {
			api_text(res, strstr(err, "retry") ? 503 : 400,
			    "update refused: %s", err);
			return 1;
		}
		if (r->round < 0)
			r->round = round;
		api_text(res, 202, "update of replica %d for round %" PRId64
		    " accepted", rep, round);
		log_info("round %" PRId64 ": received the update of replica %d "
		    "(%zu bytes)", round, rep, req->body_len);
		progress(n);
		return 1;
	}
	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0 &&
	    strcmp(rest, "updates") != 0) {
		hs_response_header(res, "Allow", "GET, HEAD");
		api_text(res, 405, "%s is not allowed on %s", req->method, req->path);
		return 1;
	}
	if (strcmp(rest, "commit") == 0) {
		json_t *o;
		char *text;
		int k;

		if (round == r->committed_round) {
			o = json_pack("{s:I,s:[]}", "round", (json_int_t)round,
			    "members");
			for (k = 0; k < n->replicas; k++)
				if (r->members & (1ULL << k))
					json_array_append_new(json_object_get(o,
					    "members"), json_integer(k));
			text = json_dumps(o, JSON_COMPACT);
			json_decref(o);
			hs_response_status(res, 200);
			hs_response_body_owned(res, "application/json", text,
			    text ? strlen(text) : 0);
			return 1;
		}
		if (round < r->committed_round || round < n->round) {
			api_text(res, 410, "round %" PRId64 " is over; fetch the "
			    "checkpoint", round);
			return 1;
		}
		api_text(res, 404, "round %" PRId64 " is not decided yet", round);
		return 1;
	}
	if (sscanf(rest, "updates/%d", &rep) == 1) {
		if (round != r->committed_round || rep < 0 ||
		    rep >= n->replicas || r->kept[rep] == NULL) {
			api_text(res, 404, "no update of replica %d for round %"
			    PRId64 " here", rep, round);
			return 1;
		}
		hs_response_status(res, 200);
		hs_response_body(res, "application/x-msgpack", r->kept[rep],
		    r->kept_len[rep]);
		return 1;
	}
	return 0;
}
