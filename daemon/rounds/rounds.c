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
 * identical; one that lacks a member's update fetches it from the
 * coordinator, once the member's own push, if it is up, has had the time
 * a push over that link takes.  A replica that was left out, or is
 * behind, adopts the coordinator's published checkpoint instead.  An
 * update for the round after the one a replica stands at (the
 * coordinator, done first, sends its next one before a follower has seen
 * the commit) is held until the replica gets there, not refused:
 * refused, the whole update would be uploaded again after a backoff.
 * With a lossy encoding, each replica adds to its update what the
 * encoding dropped from the last one it sent (error feedback), until it
 * adopts a checkpoint.
 * The protocol hands the members' updates to the trainer as they came:
 * the trainer checks each on the block's held-out cases, leaves out what
 * makes the share worse, and combines the rest robustly (daemon/blocktrain/verify.h,
 * kernels/robust.h); it checks a checkpoint before adopting it too.  So a
 * listed replica that lies (an "over" that is not, a commit that includes
 * a poisoned update) is caught by each member's own check.  A replica's
 * "over" is acted on only when it comes from the coordinator, or when we
 * coordinate; from another member it only means that member has our
 * update, and the coordinator's answer tells whether the round is over.
 * A quarantined replica (rounds_ops.quarantined) is neither a member nor
 * a source of checkpoints.
 * This file keeps the round's state and the requests a replica sends;
 * rounds_serve.c answers the other replicas' requests. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/rounds/internal.h"
#include "kernels/error.h"
#include "kernels/feedback.h"
#include "proto/checkpoint.h"
#include "proto/update.h"

#define POLL_MS 100
/* The longest wait before our update is offered again to a replica that
 * is behind: each offer uploads the whole update, and a replica that
 * restarted from an older checkpoint is behind for a round or more. */
#define BEHIND_RETRY_MAX_S 2.0
/* The shortest wait for a member's own push before its update is
 * fetched from the coordinator (see own_push_due). */
#define OWN_PUSH_WAIT_MIN_S 0.5

/* Empties a set of update slots, one per replica. */
static void
free_slots(char **bytes, float **delta, size_t *len)
{
	int i;

	for (i = 0; i < MAX_REPLICAS; i++) {
		free(bytes[i]);
		free(delta[i]);
		bytes[i] = NULL;
		delta[i] = NULL;
		len[i] = 0;
	}
}

static void
clear_push_clocks(rounds *r)
{
	memset(r->push_start, 0, sizeof(r->push_start));
	memset(r->push_secs, 0, sizeof(r->push_secs));
	memset(r->missing_since, 0, sizeof(r->missing_since));
}

static void
drop_round(rounds *r)
{
	int i;

	free_slots(r->bytes, r->delta, r->len);
	for (i = 0; i < MAX_REPLICAS; i++) {
		r->fetching[i] = 0;
		r->roster_differs[i] = 0;
		r->pushed[i] = 0;
		r->push_at[i] = 0;
		r->behind_wait[i] = 0;
	}
	clear_push_clocks(r);
	free(r->mine);
	r->mine = NULL;
	r->mine_len = 0;
	r->nparts = 1;
	memset(r->part_state, 0, sizeof(r->part_state));
	/* an update still in parts is of no use once its round is over */
	rp_clear(&r->asm_);
	r->active = 0;
	r->polling = 0;
}

void
rounds__drop_early(rounds *r)
{
	free_slots(r->early_bytes, r->early_delta, r->early_len);
	r->early_round = -1;
}

static double
now(const rounds *r)
{
	return r->cfg.ops.now(r->cfg.arg);
}

static void
journal(rounds *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
journal(rounds *r, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	r->cfg.ops.journal(r->cfg.arg, line);
}

static void
meter(rounds *r, int replica, int kind, const hc_result *res)
{
	if (r->rep_peer[replica] >= 0)
		r->cfg.ops.meter(r->cfg.arg, r->rep_peer[replica], kind,
		    res->bytes_in, res->bytes_out);
}

static const char *peer_addr(const rounds *r, int replica);

/* Neither updates nor a checkpoint: the trainer keeps its weights. */
static void
commit_none(rounds *r, int64_t round)
{
	rounds_outcome o = { 0 };

	o.round = round;
	o.ckpt_replica = o.ckpt_peer = -1;
	r->cfg.ops.commit(r->cfg.arg, &o);
}

int
rounds__quarantined(const rounds *r, int replica)
{
	return replica != r->cfg.replica && r->cfg.ops.quarantined != NULL &&
	    replica >= 0 && replica < r->cfg.replicas &&
	    r->cfg.ops.quarantined(r->cfg.arg, r->rep_peer[replica]);
}

void
rounds__refused(rounds *r, int replica, int kind, const char *fmt, ...)
{
	char why[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	log_warnx("round: replica %d (%s): %s", replica, replica >= 0 &&
	    replica < r->cfg.replicas ? peer_addr(r, replica) : "?", why);
	if (r->cfg.ops.refused != NULL && replica >= 0 &&
	    replica < r->cfg.replicas && replica != r->cfg.replica)
		r->cfg.ops.refused(r->cfg.arg, r->rep_peer[replica], kind, why);
}

/* A replica that left the list is down, seen long ago, never probed. */
static peers_entry *
replica_peer(const rounds *r, int replica)
{
	if (r->rep_peer[replica] < 0)
		return (peers_entry *)&r->gone;
	return &r->cfg.peers->v[r->rep_peer[replica]];
}

static int
replica_gone(const rounds *r, int replica)
{
	return r->rep_peer[replica] < 0;
}

static const char *
peer_addr(const rounds *r, int replica)
{
	return r->rep_addr[replica];
}

int
rounds__replica_of_peer(const rounds *r, int peer)
{
	int k;

	for (k = 0; k < r->cfg.replicas; k++)
		if (r->rep_peer[k] >= 0 && r->rep_peer[k] == peer)
			return k;
	return -1;
}

void
rounds_roster_of(const peers_list *pl, int block, char out[ROUNDS_ROSTER_LEN])
{
	char hex[65], err[KN_ERR_LEN], *text;
	size_t len = 0, cap = 1;
	int i;

	for (i = 0; i < pl->n; i++)
		cap += strlen(pl->v[i].addr) + strlen(pl->v[i].id_text) + 2;
	if ((text = malloc(cap)) == NULL) {
		snprintf(out, ROUNDS_ROSTER_LEN, "%s", "0");
		return;
	}
	for (i = 0; i < pl->n; i++)
		if (pl->v[i].block == block)
			len += (size_t)snprintf(text + len, cap - len, "%s %s\n",
			    pl->v[i].addr, pl->v[i].id_text);
	if (pr_ckpt_sha256_hex(text, len, hex, err) != 0)
		snprintf(hex, sizeof(hex), "%s", "0");
	free(text);
	snprintf(out, ROUNDS_ROSTER_LEN, "%.*s", ROUNDS_ROSTER_LEN - 1, hex);
}

const char *
rounds_roster(const rounds *r)
{
	return r->roster;
}

static void on_timer(uv_timer_t *t);
static void take_early(rounds *r);

int
rounds_new(rounds **out, const rounds_config *cfg, char *err)
{
	rounds *r;
	int i, k;

	*out = NULL;
	if (cfg->replicas > MAX_REPLICAS)
		return kn_error(err, KN_EINVAL, "block %d has %d replicas; at "
		    "most %d are supported", cfg->block, cfg->replicas,
		    MAX_REPLICAS);
	if (cfg->replica < 0 || cfg->replica >= cfg->replicas)
		return kn_error(err, KN_EINVAL, "replica %d of %d does not exist",
		    cfg->replica, cfg->replicas);
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	r->cfg = *cfg;
	for (i = 0, k = 0; i < cfg->peers->n && k < MAX_REPLICAS; i++)
		if (cfg->peers->v[i].block == cfg->block)
			snprintf(r->rep_addr[k++], sizeof(r->rep_addr[0]), "%s",
			    cfg->peers->v[i].addr);
	if (k != cfg->replicas) {
		free(r);
		return kn_error(err, KN_EINVAL, "the peer list names %d "
		    "replica(s) of block %d, not %d", k, cfg->block,
		    cfg->replicas);
	}
	rounds_roster_of(cfg->peers, cfg->block, r->roster);
	r->gone.state = PEERS_DOWN;
	r->gone.last_seen = 1;
	r->gone.port = 0;
	snprintf(r->gone.why, sizeof(r->gone.why), "%s",
	    "left the peer list");
	rounds_remap(r);
	r->round = -1;
	r->committed_round = -1;
	r->early_round = -1;
	r->diverged_from = -1;
	/* known before our first update, so early ones from others fit */
	r->count = cfg->count;
	r->nparts = 1;
	r->asm_.budget = cfg->max_assembly;
	if (r->asm_.budget == 0)
		r->asm_.budget = pr_update_max_bytes(cfg->count) > SIZE_MAX / 4 ?
		    SIZE_MAX : 4 * pr_update_max_bytes(cfg->count);
	uv_timer_init(cfg->loop, &r->timer);
	r->timer.data = r;
	r->timer_open = 1;
	uv_timer_start(&r->timer, on_timer, POLL_MS, POLL_MS);
	*out = r;
	return KN_OK;
}

static void
release(rounds *r)
{
	int i;

	if (!r->closing || r->timer_open || r->calls > 0)
		return;
	drop_round(r);
	rounds__drop_early(r);
	for (i = 0; i < MAX_REPLICAS; i++)
		free(r->kept[i]);
	free(r->residual);
	free(r);
}

static void
on_timer_closed(uv_handle_t *h)
{
	rounds *r = h->data;

	r->timer_open = 0;
	release(r);
}

void
rounds_free(rounds *r)
{
	if (r == NULL || r->closing)
		return;
	r->closing = 1;
	uv_timer_stop(&r->timer);
	uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

void
rounds_on_checkpoint(rounds *r, int64_t step, int64_t round,
    const char *sha256)
{
	r->ckpt_step = step;
	r->ckpt_round = round;
	snprintf(r->ckpt_sha256, sizeof(r->ckpt_sha256), "%s", sha256);
	take_early(r);
}

void
rounds_diverged(rounds *r, int peer, int64_t step, int64_t round,
    const char *their_sha256)
{
	int k = rounds__replica_of_peer(r, peer);

	/* only the same step after the same (real) round can be compared,
	 * and only the replica of higher index gives way.  Besides two
	 * coordinators, this heals the rare round where two members' checks
	 * of the updates (daemon/blocktrain/verify.c) decided differently: scores that
	 * differ in their last bits on different hardware, for an update at
	 * the threshold.  The checkpoint it then adopts is checked too. */
	if (r->cfg.peers->v[peer].block != r->cfg.block || k < 0 ||
	    k >= r->cfg.replica || r->diverged_from >= 0 ||
	    r->ckpt_sha256[0] == '\0' || r->ckpt_round <= 0 ||
	    round != r->ckpt_round || step != r->ckpt_step ||
	    strcmp(their_sha256, r->ckpt_sha256) == 0)
		return;
	log_warnx("round %" PRId64 ": replica %d (%s) holds checkpoint %.16s... "
	    "for the same step and round, ours is %.16s...: two coordinators "
	    "decided differently; this replica adopts replica %d's weights at "
	    "its next round", r->ckpt_round, k, r->cfg.peers->v[peer].addr,
	    their_sha256, r->ckpt_sha256, k);
	journal(r, "round %" PRId64 " diverged from replica %d (%.16s vs "
	    "%.16s): adopting its checkpoint", r->ckpt_round, k, their_sha256,
	    r->ckpt_sha256);
	r->diverged_from = k;
}

int
rounds_same_replicas(const rounds *r, const peers_list *fresh)
{
	int i, k = 0;

	for (i = 0; i < fresh->n; i++) {
		if (fresh->v[i].block != r->cfg.block)
			continue;
		if (k >= r->cfg.replicas || strcmp(fresh->v[i].addr,
		    peer_addr(r, k)) != 0)
			return 0;
		k++;
	}
	return k == r->cfg.replicas;
}

void
rounds_remap(rounds *r)
{
	const peers_list *pl = r->cfg.peers;
	int k, i;

	for (k = 0; k < r->cfg.replicas; k++) {
		i = peers_find(pl, r->rep_addr[k]);
		r->rep_peer[k] = i >= 0 && pl->v[i].block == r->cfg.block ? i :
		    -1;
	}
}

/* The coordinator: the lowest replica index that is up (we count), and
 * not quarantined: a replica that quarantined a hostile coordinator
 * follows the next one. */
static int
coordinator(const rounds *r)
{
	int k;

	for (k = 0; k < r->cfg.replicas; k++) {
		const peers_entry *p = replica_peer(r, k);

		if (k == r->cfg.replica || (p->state == PEERS_UP &&
		    !rounds__quarantined(r, k)))
			return k;
	}
	return r->cfg.replica;
}

static void
url_for(const rounds *r, int replica, char *url, size_t len,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void
url_for(const rounds *r, int replica, char *url, size_t len,
    const char *fmt, ...)
{
	char path[384];         /* a part's query included */
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	snprintf(url, len, "%s://%s%s%sroster=%s&from=%s",
	    hc_scheme(r->cfg.client), peer_addr(r, replica), path,
	    strchr(path, '?') ? "&" : "?", r->roster, r->cfg.advertise);
}

/* One request in flight; it holds r alive until its answer. */
struct call {
	rounds *r;
	int replica;
	int64_t round;
	int part;               /* of our update; -1: all of it */
	size_t sent;            /* body bytes: ours may be freed by then */
};

/* Ends a call: NULL when r is closing (and freed, if it was the last). */
static rounds *
call_end(void *ctx, struct call *copy)
{
	rounds *r;

	*copy = *(struct call *)ctx;
	free(ctx);
	r = copy->r;
	r->calls--;
	if (r->closing) {
		release(r);
		return NULL;
	}
	return r;
}

/* A request to replica to (its id pinned) about replica's update. */
static int
send_part(rounds *r, int to, int replica, int64_t round, const char *method,
    const char *url, const char *body, size_t len, size_t max_body,
    hc_done_fn done, int part)
{
	hc_request_opts o = { 0 };
	char err[KN_ERR_LEN];
	struct call *c = malloc(sizeof(*c));

	if (c == NULL)
		return -1;
	c->r = r;
	c->replica = replica;
	c->round = round;
	c->part = part;
	c->sent = len;
	o.method = method;
	o.url = url;
	o.content_type = body ? "application/x-msgpack" : NULL;
	o.body = body;
	o.body_len = len;
	o.timeout_ms = (long)(r->cfg.round_deadline * 1000.0) + 5000;
	o.connect_timeout_ms = r->cfg.peer_timeout_ms;
	o.max_body_bytes = max_body;
	o.want_header = ROUNDS_STATE_HEADER;
	o.pin = replica_peer(r, to)->has_id ? replica_peer(r, to)->id : NULL;
	if (hc_request(r->cfg.client, &o, done, c, err) != 0) {
		log_warnx("round: %s %s: %s", method, peer_addr(r, to), err);
		free(c);
		return -1;
	}
	r->calls++;
	return 0;
}

static int
send_request(rounds *r, int replica, int64_t round, const char *method,
    const char *url, const char *body, size_t len, size_t max_body,
    hc_done_fn done)
{
	return send_part(r, replica, replica, round, method, url, body, len,
	    max_body, done, -1);
}

/* The updates held for the round we now stand at become its own (none
 * that came the usual way meanwhile is replaced); those held for a
 * round we passed are dropped. */
static void
take_early(rounds *r)
{
	int64_t cur;
	int k;

	if (r->early_round < 0 ||
	    r->early_round > (cur = rounds__current_round(r)))
		return;
	if (r->early_round == cur && (r->round < 0 || r->round == cur)) {
		for (k = 0; k < r->cfg.replicas; k++) {
			if (r->early_delta[k] == NULL || r->delta[k] != NULL)
				continue;
			r->delta[k] = r->early_delta[k];
			r->bytes[k] = r->early_bytes[k];
			r->len[k] = r->early_len[k];
			r->early_delta[k] = NULL;
			r->early_bytes[k] = NULL;
			if (r->round < 0)
				r->round = cur;
			log_info("round %" PRId64 ": took the update of replica %d "
			    "held since it came early (%zu bytes)", cur, k,
			    r->len[k]);
		}
	}
	rounds__drop_early(r);
}

/* A replica that cannot be reached at all is down now, not at its next
 * probe: the round moves on to the next coordinator at once.  A replica
 * never seen yet stays worth waiting for (it may be starting). */
static void
mark_unreachable(rounds *r, int replica, const hc_result *res)
{
	peers_entry *p = replica_peer(r, replica);

	if (res->status != 0 || replica == r->cfg.replica ||
	    p->state == PEERS_DOWN)
		return;
	p->state = PEERS_DOWN;
	p->failures++;
	p->next_probe = now(r) + 1.0;
	snprintf(p->why, sizeof(p->why), "%s", res->error ? res->error :
	    "unreachable");
	log_warnx("round: replica %d (%s) is unreachable: %s", replica, p->addr,
	    p->why);
}

/* The round is over for us, one way or the other. */
static void
end_round(rounds *r)
{
	drop_round(r);
	r->round = -1;
	take_early(r);
}

/* Members' updates in replica order, as they came, to the trainer,
 * which checks and combines them. */
static void
apply(rounds *r, uint64_t members)
{
	rounds_outcome o = { 0 };
	int k, m = 0;

	o.round = r->round;
	o.outer_lr = (float)r->cfg.outer_lr;
	o.ckpt_replica = o.ckpt_peer = -1;
	for (k = 0; k < r->cfg.replicas; k++) {
		if (!(members & (1ULL << k)) || r->delta[k] == NULL)
			continue;
		if (rounds__quarantined(r, k)) {
			log_warnx("round %" PRId64 ": replica %d (%s) is "
			    "quarantined: its update is left out", r->round, k,
			    peer_addr(r, k));
			continue;
		}
		o.update[m] = r->delta[k];
		o.replica[m] = k;
		o.peer[m++] = r->rep_peer[k];
		r->delta[k] = NULL;
	}
	o.count = m;
	for (k = 0, m = 0; k < r->cfg.replicas; k++) {
		if ((members & (1ULL << k)) || k == r->cfg.replica ||
		    r->delta[k] == NULL || rounds__quarantined(r, k))
			continue;
		o.extra[m] = r->delta[k];
		o.extra_replica[m] = k;
		o.extra_peer[m++] = r->rep_peer[k];
		r->delta[k] = NULL;
	}
	o.extras = m;
	/* keep this round's updates for followers that lack one */
	for (k = 0; k < MAX_REPLICAS; k++) {
		free(r->kept[k]);
		r->kept[k] = r->bytes[k];
		r->kept_len[k] = r->len[k];
		r->bytes[k] = NULL;
	}
	r->committed_round = r->round;
	r->members = members;
	log_info("round %" PRId64 ": %d of %d replicas' updates to check and "
	    "average", r->round, m, r->cfg.replicas);
	journal(r, "round %" PRId64 " members 0x%llx coordinator %d",
	    r->round, (unsigned long long)members, coordinator(r));
	r->cfg.ops.commit(r->cfg.arg, &o);
	end_round(r);
}

/* The update the residual was kept for was not averaged: the weights we
 * go on from are not the ones it corrects. */
static void
clear_residual(rounds *r)
{
	free(r->residual);
	r->residual = NULL;
	r->residual_count = 0;
}

/* Our update plus the residual, to encode instead of delta: a new buffer
 * (NULL: send delta as it is: f32, or no memory for feedback). */
static float *
with_feedback(rounds *r, const float *delta, size_t count)
{
	float *sent = NULL;

	if (r->cfg.enc == PR_ENC_F32)
		return NULL;
	if (r->residual_count != count) {
		clear_residual(r);
		r->residual = calloc(count, sizeof(float));
		r->residual_count = r->residual != NULL ? count : 0;
	}
	if (r->residual == NULL ||
	    (sent = malloc(count * sizeof(float))) == NULL) {
		log_warnx("round %" PRId64 ": no memory for error feedback; "
		    "the update goes without it", r->round);
		clear_residual(r);
		return NULL;
	}
	kn_feedback_add(sent, delta, r->residual, count);
	return sent;
}

static void
on_checkpoint(void *ctx, hc_result *res)
{
	struct call c;
	rounds *r = call_end(ctx, &c);
	rounds_outcome o = { 0 };

	if (r == NULL)
		return;
	r->catching_up = 0;
	meter(r, c.replica, PEERS_KIND_CHECKPOINT, res);
	if (res->status != 200 || res->body == NULL) {
		log_warnx("round: catching up from %s failed: %s",
		    peer_addr(r, c.replica), res->error ? res->error :
		    "bad status");
		return;
	}
	if (r->round < 0 || !r->active)
		return;
	log_info("round %" PRId64 ": left out or behind; the checkpoint of %s "
	    "(%zu bytes) goes to the trainer to check and adopt", r->round,
	    peer_addr(r, c.replica), res->body_len);
	journal(r, "round %" PRId64 " left out: the checkpoint of %s to adopt",
	    r->round, peer_addr(r, c.replica));
	clear_residual(r);
	o.round = r->round;
	o.len = res->body_len;
	o.ckpt = hc_result_take_body(res);
	o.ckpt_replica = c.replica;
	o.ckpt_peer = r->rep_peer[c.replica];
	r->cfg.ops.commit(r->cfg.arg, &o);
	end_round(r);
}

/* Adopts the checkpoint of replica k (one that is ahead of us, or the
 * coordinator of a round that left us out). */
static void
catch_up(rounds *r, int k)
{
	char url[1024];

	if (r->catching_up || k == r->cfg.replica || replica_gone(r, k))
		return;
	if (rounds__quarantined(r, k)) {
		log_warnx("round %" PRId64 ": replica %d (%s) is quarantined: its "
		    "checkpoint is not fetched", r->round, k, peer_addr(r, k));
		return;
	}
	url_for(r, k, url, sizeof(url), "/v1/blocks/%d/checkpoint",
	    r->cfg.block);
	if (send_request(r, k, r->round, "GET", url, NULL, 0, (size_t)1 << 32,
	    on_checkpoint) == 0)
		r->catching_up = 1;
}

/* The 409 answer of a replica, for the log: one line. */
static void
log_ahead(const rounds *r, int replica, int64_t round, const hc_result *res)
{
	size_t len = res->body != NULL ? res->body_len : 0;

	while (len > 0 && (res->body[len - 1] == '\n' ||
	    res->body[len - 1] == '\r'))
		len--;
	log_info("round %" PRId64 ": %s is ahead: %.*s", round,
	    peer_addr(r, replica), (int)(len > 200 ? 200 : len),
	    len > 0 ? res->body : "");
}

/* A replica behind us will catch up: offer again, after 0.1, 0.2, 0.4 ...
 * up to BEHIND_RETRY_MAX_S seconds, saying so once per round. */
static void
offer_later(rounds *r, int replica, const hc_result *res)
{
	double wait = r->behind_wait[replica] * 2;
	int i;

	if (wait == 0) {
		log_ahead(r, replica, r->round, res);
		wait = POLL_MS / 1000.0;
	}
	if (wait > BEHIND_RETRY_MAX_S)
		wait = BEHIND_RETRY_MAX_S;
	r->behind_wait[replica] = wait;
	r->push_at[replica] = now(r) + wait;
	r->pushed[replica] = 0;
	r->push_start[replica] = 0;     /* the next offer times afresh */
	/* it holds none of our parts: all again, but those in flight */
	for (i = 0; i < RP_MAX_PARTS; i++)
		if (r->part_state[replica][i] != 1)
			r->part_state[replica][i] = 0;
}

static void
push_started(rounds *r, int k)
{
	if (r->push_start[k] == 0)
		r->push_start[k] = now(r);
}

/* Replica k has taken our update, all of it. */
static void
pushed_at(rounds *r, int k)
{
	r->pushed[k] = 2;
	r->push_secs[k] = r->push_start[k] > 0 ? now(r) - r->push_start[k] :
	    0;
}

/* The answer to a part of our update: 202, or "have" (its answer was
 * lost before), delivers it; any other failure sends that part again on
 * the next tick, and a 400 (the receiver dropped what it had put
 * together, its hash not matching) every part not in flight. */
static void
part_answered(rounds *r, const struct call *c, const hc_result *res)
{
	unsigned char *st = r->part_state[c->replica];
	int i, all = 1;

	if (res->status == 202 || res->status == 409)
		st[c->part] = 2;
	else {
		st[c->part] = 0;
		for (i = 0; res->status == 400 && i < r->nparts; i++)
			if (st[i] == 2)
				st[i] = 0;
		log_debug("round %" PRId64 ": part %d of our update to %s: %s",
		    c->round, c->part, peer_addr(r, c->replica), res->error ?
		    res->error : res->body ? res->body : "refused");
	}
	for (i = 0; i < r->nparts; i++)
		all &= st[i] == 2;
	if (all && r->pushed[c->replica] != 2) {
		pushed_at(r, c->replica);
		log_info("round %" PRId64 ": sent our update to %s (%zu bytes in "
		    "%d parts)", c->round, peer_addr(r, c->replica), r->mine_len,
		    r->nparts);
	}
}

static void
on_pushed(void *ctx, hc_result *res)
{
	struct call c;
	rounds *r = call_end(ctx, &c);

	if (r == NULL)
		return;
	meter(r, c.replica, PEERS_KIND_UPDATE, res);
	if (c.part >= 0 && r->round == c.round && r->mine != NULL &&
	    (res->status != 409 || (res->header != NULL &&
	    strcmp(res->header, ROUNDS_STATE_HAVE) == 0))) {
		part_answered(r, &c, res);
		return;
	}
	if (res->status == 409 && r->round == c.round) {
		/* over there: it has moved on, we adopt its weights; behind:
		 * it will catch up, so offer again */
		if (res->header != NULL &&
		    strcmp(res->header, ROUNDS_STATE_ROSTER) == 0) {
			if (!r->roster_differs[c.replica])
				log_info("round %" PRId64 ": %s counts this round "
				    "by another roster (a peer list change on its "
				    "way): not waited for", c.round,
				    peer_addr(r, c.replica));
			r->roster_differs[c.replica] = 1;
			r->pushed[c.replica] = 2;
		} else if (res->header != NULL &&
		    strcmp(res->header, ROUNDS_STATE_OVER) == 0) {
			if (r->pushed[c.replica] == 2)
				return;         /* another part said so */
			log_ahead(r, c.replica, c.round, res);
			r->pushed[c.replica] = 2;
			if (rounds__quarantined(r, c.replica))
				return;
			/* only the coordinator's word ends our round; when we
			 * coordinate, a member's, if its status agrees */
			if (c.replica == coordinator(r))
				catch_up(r, c.replica);
			else if (coordinator(r) == r->cfg.replica &&
			    replica_peer(r, c.replica)->round <= c.round)
				rounds__refused(r, c.replica, ROUNDS_REFUSED_CLAIM,
				    "round %" PRId64 ": says the round is over, but "
				    "its status gives round %" PRId64 ": not taken",
				    c.round, replica_peer(r, c.replica)->round);
			else if (coordinator(r) == r->cfg.replica)
				catch_up(r, c.replica);
		} else if (c.part >= 0 && now(r) < r->push_at[c.replica]) {
			/* another part was told so first: one backoff */
			r->part_state[c.replica][c.part] = 0;
		} else {
			if (c.part >= 0)
				r->part_state[c.replica][c.part] = 0;
			offer_later(r, c.replica, res);
		}
	} else if (res->status == 202 && c.part < 0 && r->round == c.round) {
		pushed_at(r, c.replica);
		log_info("round %" PRId64 ": sent our update to %s (%zu bytes)",
		    c.round, peer_addr(r, c.replica), c.sent);
	} else if (res->status != 409) {
		/* not there yet, or refused: try again on the next tick */
		if (r->round == c.round)
			r->pushed[c.replica] = 0;
		log_debug("round %" PRId64 ": update to %s: %s", c.round,
		    peer_addr(r, c.replica), res->error ? res->error :
		    res->body ? res->body : "refused");
	}
}

static void
on_fetched(void *ctx, hc_result *res)
{
	struct call c;
	rounds *r = call_end(ctx, &c);
	char err[KN_ERR_LEN];
	int rep;

	if (r == NULL)
		return;
	r->fetching[c.replica] = 0;
	meter(r, coordinator(r), PEERS_KIND_UPDATE, res);
	if (res->status == 200 && r->round == c.round &&
	    rounds__store_update(r, res->body, res->body_len, r->round,
	    c.replica, &rep, err) != 0)
		log_warnx("round %" PRId64 ": fetched update: %s", r->round, err);
}

/* Whether member k's own push of its update to us may still come, so
 * that fetching the update from the coordinator too would bring it
 * twice.  k sent it to us when it sent it to the coordinator, as we
 * sent ours to k: as many bytes over the same link.  So while ours to k
 * is on its way, k's to us likely is too; once ours was taken, k's is
 * given twice as long as ours took (at least OWN_PUSH_WAIT_MIN_S) from
 * when the commit named k.  Only while k is up in our view: one down
 * or cut off from us is fetched for at once, and a push that never
 * comes costs at most the round deadline. */
static int
own_push_due(rounds *r, int k)
{
	double t = now(r), waited, wait = 2 * r->push_secs[k];
	int i;

	if (replica_peer(r, k)->state != PEERS_UP)
		return 0;
	if (r->missing_since[k] == 0)
		r->missing_since[k] = t;
	if ((waited = t - r->missing_since[k]) >= r->cfg.round_deadline)
		return 0;
	for (i = 0; i < r->nparts; i++)
		if (r->part_state[k][i] == 1)
			return 1;
	return r->pushed[k] == 1 || waited < (wait > OWN_PUSH_WAIT_MIN_S ?
	    wait : OWN_PUSH_WAIT_MIN_S);
}

/* A follower's view of the commit. */
static void
on_commit(void *ctx, hc_result *res)
{
	struct call c;
	rounds *r = call_end(ctx, &c);
	uint64_t members;
	int k, missing = 0, other;

	if (r == NULL)
		return;
	r->polling = 0;
	meter(r, c.replica, PEERS_KIND_OTHER, res);
	mark_unreachable(r, c.replica, res);
	if (r->round != c.round || !r->active)
		return;
	if (res->status == 409 || res->status == 410) {
		catch_up(r, coordinator(r));
		return;
	}
	if (res->status != 200)
		return;		/* not decided yet: poll again */
	members = rounds__commit_members(r, res, &other);
	if (other) {
		/* the coordinator counts by another roster: its members'
		 * indices are not ours, its weights are the round's */
		log_info("round %" PRId64 ": the coordinator %s decided with "
		    "another roster; adopting its checkpoint", r->round,
		    peer_addr(r, c.replica));
		catch_up(r, coordinator(r));
		return;
	}
	if (!(members & (1ULL << r->cfg.replica))) {
		catch_up(r, coordinator(r));
		return;
	}
	for (k = 0; k < r->cfg.replicas; k++) {
		char url[1024];

		if (!(members & (1ULL << k)) || r->delta[k] != NULL)
			continue;
		missing = 1;
		if (r->fetching[k] || own_push_due(r, k))
			continue;
		url_for(r, coordinator(r), url, sizeof(url),
		    "/v1/blocks/%d/rounds/%" PRId64 "/updates/%d",
		    r->cfg.block, r->round, k);
		/* from the coordinator, whose id is the one to pin */
		if (send_part(r, coordinator(r), k, r->round, "GET", url, NULL,
		    0, pr_update_max_bytes(r->count), on_fetched, -1) == 0)
			r->fetching[k] = 1;
	}
	if (!missing)
		apply(r, members);
}

/* Sends the parts of our update that replica k has not taken yet, each
 * its own request: libcurl gives each a connection of its own. */
static void
push_parts(rounds *r, int k)
{
	char url[1024], q[256];
	size_t off, len;
	int i;

	for (i = 0; i < r->nparts; i++) {
		if (r->part_state[k][i] != 0)
			continue;
		rp_range(r->mine_len, r->nparts, i, &off, &len);
		rp_query(q, sizeof(q), r->cfg.replica, i, r->nparts, off,
		    r->mine_len, r->mine_sha256);
		url_for(r, k, url, sizeof(url), "/v1/blocks/%d/rounds/%" PRId64
		    "/updates?%s", r->cfg.block, r->round, q);
		if (send_part(r, k, k, r->round, "POST", url, r->mine + off, len,
		    1 << 16, on_pushed, i) == 0) {
			r->part_state[k][i] = 1;
			push_started(r, k);
		}
	}
}

/* Sends our update to every replica that has not taken it yet. */
static void
push(rounds *r)
{
	int k;

	for (k = 0; k < r->cfg.replicas; k++) {
		char url[1024];

		if (k == r->cfg.replica || r->pushed[k] == 2 || r->mine == NULL ||
		    now(r) < r->push_at[k] || replica_gone(r, k))
			continue;
		if (r->nparts > 1) {
			push_parts(r, k);
			continue;
		}
		if (r->pushed[k] != 0)
			continue;
		url_for(r, k, url, sizeof(url), "/v1/blocks/%d/rounds/%" PRId64
		    "/updates", r->cfg.block, r->round);
		if (send_request(r, k, r->round, "POST", url, r->mine,
		    r->mine_len, 1 << 16, on_pushed) == 0) {
			r->pushed[k] = 1;
			push_started(r, k);
		}
	}
}

/* A follower asks the coordinator whether the round is decided. */
static void
poll_commit(rounds *r, int k, double t)
{
	char url[1024];

	if (r->polling || t < r->next_poll)
		return;
	r->next_poll = t + POLL_MS / 1000.0;
	url_for(r, k, url, sizeof(url), "/v1/blocks/%d/rounds/%" PRId64
	    "/commit", r->cfg.block, r->round);
	if (send_request(r, k, r->round, "GET", url, NULL, 0, 1 << 16,
	    on_commit) == 0)
		r->polling = 1;
}

/* We coordinate: wait for every replica that is up, until the deadline;
 * then commit with whoever we have. */
static void
coordinate(rounds *r, double t)
{
	uint64_t members = 0;
	int i, waiting = 0;

	for (i = 0; i < r->cfg.replicas; i++) {
		const peers_entry *p = replica_peer(r, i);

		if (rounds__quarantined(r, i))
			continue;       /* neither a member nor waited for */
		if (r->delta[i] != NULL)
			members |= 1ULL << i;
		else if (!r->roster_differs[i] && (p->state == PEERS_UP ||
		    p->state == PEERS_UNKNOWN || p->last_seen == 0))
			/* up, or never seen yet (starting): worth waiting for;
			 * one that was seen and went down is not */
			waiting++;
	}
	if (waiting > 0 && t - r->ready_at < r->cfg.round_deadline)
		return;
	if (waiting > 0)
		log_warnx("round %" PRId64 ": deadline passed; %d replica(s) "
		    "left out", r->round, waiting);
	apply(r, members);
}

void
rounds__progress(rounds *r)
{
	double t = now(r);
	int k = coordinator(r);

	if (r->closing || r->round < 0 || !r->active || r->catching_up)
		return;
	push(r);
	if (k != r->cfg.replica)
		poll_commit(r, k, t);
	else
		coordinate(r, t);
}

static void
on_timer(uv_timer_t *t)
{
	rounds__progress(t->data);
}

void
rounds_cron(rounds *r)
{
	rounds__progress(r);
}

size_t
rounds_assembling(const rounds *r)
{
	return r->asm_.held;
}

/* A replica told to copy another's weights asks for them now; 1 if it
 * could. */
static int
adopt_diverged(rounds *r)
{
	int from = r->diverged_from;

	r->diverged_from = -1;
	r->active = 1;
	r->ready_at = now(r);
	catch_up(r, from);
	if (r->catching_up)
		return 1;
	r->active = 0;	/* could not ask: take part as usual */
	return 0;
}

void
rounds_on_update(rounds *r, int64_t round, int64_t step, const float *delta,
    size_t count)
{
	pr_update_meta meta = { 0 };
	char err[KN_ERR_LEN], *buf;
	float *sent;
	size_t len;
	int rep, rc;

	if (r->round != round)
		drop_round(r);	/* what came for another round is of no use */
	r->round = round;
	r->count = count;
	take_early(r);
	if (r->diverged_from >= 0 && adopt_diverged(r))
		return;
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", r->cfg.run_id);
	meta.block = r->cfg.block;
	meta.round = round;
	meta.replica = r->cfg.replica;
	meta.step = step;
	meta.enc = r->cfg.enc;
	meta.count = count;
	meta.comp = r->cfg.comp;
	sent = with_feedback(r, delta, count);
	if ((rc = pr_update_encode(&meta, sent ? sent : delta, &buf, &len,
	    err)) != 0)
		log_warnx("round %" PRId64 ": cannot encode our update: %s",
		    round, err);
	/* our own contribution as the others will see it */
	else if ((rc = rounds__store_update(r, buf, len, round,
	    r->cfg.replica, &rep, err)) != 0) {
		log_warnx("round %" PRId64 ": %s", round, err);
		free(buf);
	}
	if (rc != 0) {
		/* the weights stay our own: the residual corrects nothing */
		free(sent);
		clear_residual(r);
		commit_none(r, round);
		return;
	}
	if (sent != NULL) {
		kn_feedback_residual(r->residual, sent,
		    r->delta[r->cfg.replica], count);
		free(sent);
	}
	r->active = 1;
	r->ready_at = now(r);
	r->mine = buf;
	r->mine_len = len;
	r->nparts = rp_parts_for(len, r->cfg.streams, r->cfg.chunk ?
	    r->cfg.chunk : RP_DEFAULT_CHUNK);
	if (r->nparts > 1 && pr_ckpt_sha256_hex(buf, len, r->mine_sha256,
	    err) != 0) {
		log_warnx("round %" PRId64 ": %s; the update goes whole", round,
		    err);
		r->nparts = 1;
	}
	memset(r->part_state, 0, sizeof(r->part_state));
	memset(r->pushed, 0, sizeof(r->pushed));
	memset(r->push_at, 0, sizeof(r->push_at));
	memset(r->behind_wait, 0, sizeof(r->behind_wait));
	clear_push_clocks(r);
	push(r);
	log_debug("round %" PRId64 ": our update is out (%zu bytes, %s%s)",
	    round, len, pr_encoding_name(r->cfg.enc),
	    r->cfg.comp == PR_COMP_ZSTD ? ", zstd" : "");
	rounds__progress(r);
}

/* The round a replica stands at: the one it gathers, else the trainer's,
 * or the one after the last commit when that is later (with overlapped
 * rounds the published checkpoint is a round behind, and an early update
 * for the next round is not "behind") */
int64_t
rounds__current_round(const rounds *r)
{
	int64_t next = r->committed_round + 1;

	if (r->round >= 0)
		return r->round;
	return r->ckpt_round > next ? r->ckpt_round : next;
}
