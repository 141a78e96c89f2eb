/* The serving half of the averaging rounds (DESIGN section 2): the
 * answers to the other replicas of our block, their updates POSTed whole
 * or in parts, the commit polls and the GETs of a committed round's
 * updates; every update that comes in, decoded and put in its slot; and
 * the commit document, written and read.  rounds.c keeps the round's
 * state and the requests we send. */
#include "config.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/core/log.h"
#include "daemon/net/http_route.h"
#include "daemon/rounds/internal.h"
#include "kernels/error.h"
#include "proto/update.h"

/* Decodes an update for round into its replica's slot of bytes, delta
 * and lens (the current round's, or those held for the next), and says
 * whose it is; only replica sender's own (sender -1: any, over plain
 * TCP). */
static int
put_update(const rounds *r, const char *buf, size_t len, int64_t round,
    int sender, char **bytes, float **delta, size_t *lens,
    int *replica_out, char *err)
{
	pr_update_meta expect = { 0 }, got;
	float *d;
	char *copy;
	int rc;

	snprintf(expect.run_id, sizeof(expect.run_id), "%s", r->cfg.run_id);
	expect.block = r->cfg.block;
	expect.round = round;
	expect.count = r->count;
	if (r->count > SIZE_MAX / sizeof(float) ||
	    (d = malloc(r->count * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory for an update of "
		    "%zu floats", r->count);
	rc = pr_update_decode(buf, len, &expect, d, &got, err);
	if (rc == 0 && (got.replica < 0 || got.replica >= r->cfg.replicas))
		rc = kn_error(err, KN_EINVAL, "replica %d does not exist: block "
		    "%d has %d", got.replica, r->cfg.block, r->cfg.replicas);
	if (rc == 0 && sender >= 0 && got.replica != sender)
		rc = kn_error(err, KN_EINVAL, "the update says replica %d, but "
		    "its sender is replica %d", got.replica, sender);
	if (rc == 0 && (copy = malloc(len)) == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	if (rc != 0) {
		free(d);
		return rc;
	}
	memcpy(copy, buf, len);
	free(delta[got.replica]);
	free(bytes[got.replica]);
	delta[got.replica] = d;
	bytes[got.replica] = copy;
	lens[got.replica] = len;
	*replica_out = got.replica;
	return KN_OK;
}

int
rounds__store_update(rounds *r, const char *buf, size_t len, int64_t round,
    int sender, int *replica_out, char *err)
{
	return put_update(r, buf, len, round, sender, r->bytes, r->delta,
	    r->len, replica_out, err);
}

int
rounds__hold_update(rounds *r, const char *buf, size_t len, int64_t round,
    int sender, int *replica_out, char *err)
{
	if (r->early_round != round)
		rounds__drop_early(r);
	r->early_round = round;
	return put_update(r, buf, len, round, sender, r->early_bytes,
	    r->early_delta, r->early_len, replica_out, err);
}

/* The replica index of the peer whose id is id among our block's, or
 * -1 when it is a client or another block's daemon. */
static int
sender_replica(const rounds *r, const uint8_t *id)
{
	int i = peers_find_id(r->cfg.peers, id);

	if (i < 0 || r->cfg.peers->v[i].block != r->cfg.block)
		return -1;
	return rounds__replica_of_peer(r, i);
}

/* Whether a request comes from outside this engine's roster: a replica
 * our roster does not hold (joining, or one we are about to drop), or
 * one that sends with another roster.  Neither is a fault: a changed
 * peer list takes effect at each replica's next round boundary, so for
 * a round the two may disagree. */
static int
other_roster(const rounds *r, const hs_request *req, int sender)
{
	char theirs[ROUNDS_ROSTER_LEN + 8];

	if (req->peer_id != NULL && sender < 0)
		return 1;
	return rp_query_value(req->query, "roster", theirs, sizeof(theirs)) &&
	    strcmp(theirs, r->roster) != 0;
}

/* A part of replica p->replica's update for the current round: put
 * with the others, and once all are in, taken as a whole POST is. */
static void
handle_part(rounds *r, const hs_request *req, hs_response *res,
    int64_t round, int sender, const rp_part *p)
{
	char err[KN_ERR_LEN], *whole;
	size_t len;
	int rep, rc;

	if (p->replica >= r->cfg.replicas || p->replica == r->cfg.replica) {
		hs_response_text(res, 400, "part refused: replica=%d is not "
		    "another replica of block %d (it has %d)", p->replica,
		    r->cfg.block, r->cfg.replicas);
		return;
	}
	if (sender >= 0 && sender != p->replica) {
		hs_response_text(res, 400, "part refused: it names replica %d, "
		    "but its sender is replica %d", p->replica, sender);
		return;
	}
	rc = rp_add(&r->asm_, p, req->body, req->body_len,
	    pr_update_max_bytes(r->count), &whole, &len, err);
	if (rc == RP_EHAVE) {
		hs_response_text(res, hs_status_of_error(rc), "%s", err);
		hs_response_header(res, ROUNDS_STATE_HEADER, ROUNDS_STATE_HAVE);
		return;
	}
	if (rc != 0) {
		hs_response_text(res, hs_status_of_error(rc),
		    "part refused: %s", err);
		return;
	}
	if (r->round < 0)
		r->round = round;       /* dropped when the round changes */
	if (whole == NULL) {
		hs_response_text(res, 202, "part %d of %d of replica %d's update "
		    "for round %" PRId64 " received", p->part, p->parts,
		    p->replica, round);
		return;
	}
	rc = rounds__store_update(r, whole, len, round, p->replica, &rep, err);
	free(whole);
	if (rc != 0) {
		hs_response_text(res, hs_status_of_error(rc), "update refused: "
		    "%s", err);
		if (rc == KN_ENUM)
			rounds__refused(r, p->replica, ROUNDS_REFUSED_UPDATE,
			    "round %" PRId64 ": update refused: %s", round, err);
		return;
	}
	rp_done(&r->asm_, rep, p->sha256);
	hs_response_text(res, 202, "update of replica %d for round %" PRId64
	    " accepted", rep, round);
	log_info("round %" PRId64 ": received the update of replica %d "
	    "(%zu bytes in %d parts)", round, rep, len, p->parts);
	rounds__progress(r);
}

/* POST updates: the round is the number above (rounds_handle). */
static void
handle_post_update(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	rounds *r = ctx;
	int64_t round = m->num[0];
	int64_t current = rounds__current_round(r);
	char err[KN_ERR_LEN];
	int rep, rc, sender = -1, in_parts;
	rp_part part;

	/* the route's who column let in only our block's replicas */
	if (req->peer_id != NULL)
		sender = sender_replica(r, req->peer_id);
	if (rounds__quarantined(r, sender)) {
		hs_response_text(res, 403, "replica %d is quarantined here: its "
		    "updates are refused until the operator clears it", sender);
		return;
	}
	if (other_roster(r, req, sender)) {
		hs_response_text(res, 409, "this replica's roster for round %"
		    PRId64 " is %s, another than the sender's: a changed peer "
		    "list takes effect at the next round", current, r->roster);
		hs_response_header(res, ROUNDS_STATE_HEADER,
		    ROUNDS_STATE_ROSTER);
		return;
	}
	if ((in_parts = rp_parse(req, &part, err)) < 0) {
		hs_response_text(res, 400, "part refused: %s", err);
		return;
	}
	if (round < current || round <= r->committed_round) {
		hs_response_text(res, 409, "round %" PRId64 " is over; this "
		    "replica is at round %" PRId64 ": fetch the checkpoint",
		    round, current);
		hs_response_header(res, ROUNDS_STATE_HEADER, ROUNDS_STATE_OVER);
		return;
	}
	if (round == current + 1 && !in_parts) {
		if ((rc = rounds__hold_update(r, req->body, req->body_len,
		    round, sender, &rep, err)) != 0) {
			hs_response_text(res, hs_status_of_error(rc), "update "
			    "refused: %s", err);
			if (rc == KN_ENUM)
				rounds__refused(r, sender, ROUNDS_REFUSED_UPDATE,
				    "round %" PRId64 ": update refused: %s", round,
				    err);
		} else
			hs_response_text(res, 202, "update of replica %d for round "
			    "%" PRId64 " held: this replica is at round %" PRId64,
			    rep, round, current);
		return;
	}
	if (round > current) {
		hs_response_text(res, 409, "this replica is behind, at round %"
		    PRId64 "; it will catch up", current);
		hs_response_header(res, ROUNDS_STATE_HEADER,
		    ROUNDS_STATE_BEHIND);
		return;
	}
	if (in_parts) {
		handle_part(r, req, res, round, sender, &part);
		return;
	}
	if ((rc = rounds__store_update(r, req->body, req->body_len, round,
	    sender, &rep, err)) != 0) {
		hs_response_text(res, hs_status_of_error(rc), "update refused: "
		    "%s", err);
		if (rc == KN_ENUM)
			rounds__refused(r, sender, ROUNDS_REFUSED_UPDATE,
			    "round %" PRId64 ": update refused: %s", round, err);
		return;
	}
	if (r->round < 0)
		r->round = round;
	hs_response_text(res, 202, "update of replica %d for round %" PRId64
	    " accepted", rep, round);
	log_info("round %" PRId64 ": received the update of replica %d "
	    "(%zu bytes)", round, rep, req->body_len);
	rounds__progress(r);
}

/* The reader of handle_commit's answer, kept beside its writer. */
uint64_t
rounds__commit_members(const rounds *r, const hc_result *res,
    int *other)
{
	json_t *root, *arr;
	json_error_t jerr;
	uint64_t members = 0;
	const char *roster;
	size_t i;

	*other = 0;
	if ((root = json_loadb(res->body, res->body_len, 0, &jerr)) == NULL)
		return 0;
	roster = json_string_value(json_object_get(root, "roster"));
	if (roster != NULL && strcmp(roster, r->roster) != 0) {
		*other = 1;
		json_decref(root);
		return 0;
	}
	arr = json_object_get(root, "members");
	for (i = 0; i < json_array_size(arr); i++) {
		json_int_t m = json_integer_value(json_array_get(arr, i));

		if (m >= 0 && m < r->cfg.replicas)
			members |= 1ULL << m;
	}
	json_decref(root);
	return members;
}

static void
handle_commit(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	rounds *r = ctx;
	int64_t round = m->num[0];
	json_t *members;
	int k;

	(void)req;
	if (round == r->committed_round) {
		members = json_array();
		for (k = 0; k < r->cfg.replicas; k++)
			if (r->members & (1ULL << k))
				json_array_append_new(members, json_integer(k));
		hs_response_json(res, 200, json_pack("{s:I,s:o,s:s}", "round",
		    (json_int_t)round, "members", members, "roster",
		    r->roster));
		return;
	}
	if (round < r->committed_round || round < r->ckpt_round)
		hs_response_text(res, 410, "round %" PRId64 " is over; fetch the "
		    "checkpoint", round);
	else
		hs_response_text(res, 404, "round %" PRId64 " is not decided yet",
		    round);
}

/* GET updates/{k}: replica k's update of a committed round, kept for
 * the replicas that missed it. */
static void
handle_get_update(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	rounds *r = ctx;
	int64_t round = m->num[0], rep = m->num[1];

	(void)req;
	if (round != r->committed_round || rep >= r->cfg.replicas ||
	    r->kept[rep] == NULL) {
		hs_response_text(res, 404, "no update of replica %" PRId64
		    " for round %" PRId64 " here", rep, round);
		return;
	}
	hs_response_status(res, 200);
	hs_response_body(res, "application/x-msgpack", r->kept[rep],
	    r->kept_len[rep]);
}

#define WHO_REPLICA HR_ROLE(0)  /* a replica of our block */

/* Over TLS only the replicas of our block; over plain TCP nobody has an
 * id, and everyone passes (the update then says whose it is). */
static unsigned
who(void *ctx, const hs_request *req)
{
	if (req->peer_id == NULL)
		return HR_EVERYONE;
	return sender_replica(ctx, req->peer_id) >= 0 ? WHO_REPLICA : 0;
}

static const int64_t replica_max[] = { MAX_REPLICAS };

/* Below /v1/blocks/{b}/rounds/{round}/.  The metering is the table
 * above's (rounds_handle's caller): every row keeps it. */
static const hr_route routes[] = {
	{ "POST", "updates", WHO_REPLICA, HR_METER_KEEP, handle_post_update,
	    NULL },
	{ "GET", "commit", HR_ANYONE, HR_METER_KEEP, handle_commit, NULL },
	{ "GET", "updates/{n}", HR_ANYONE, HR_METER_KEEP, handle_get_update,
	    replica_max },
};

/* The refusals of the updates' row say what the exchange wants; the
 * others are the table's defaults. */
static void
refuse(void *ctx, const hs_request *req, hs_response *res, int status,
    const hr_route *row, const hr_match *m)
{
	rounds *r = ctx;

	(void)m;
	if (row->fn != handle_post_update)
		hr_refuse_text(req, res, status);
	else if (status == 405)
		hs_response_text(res, 405, "updates are POSTed");
	else
		hs_response_text(res, 403, "only the replicas of block %d send "
		    "it updates", r->cfg.block);
}

int
rounds_handle(rounds *r, const hs_request *req, hs_response *res,
    int64_t round, const char *rest)
{
	hr_table t = { routes, sizeof(routes) / sizeof(routes[0]), r, who,
	    NULL, refuse, NULL };
	hr_match above;

	memset(&above, 0, sizeof(above));
	above.num[0] = round;
	above.nnum = 1;
	above.rest = rest;
	return hr_dispatch(&t, req, res, &above);
}
