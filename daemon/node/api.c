/* The HTTP API v1 of blocktraind (proto/PROTOCOL.md): status, metrics,
 * spec, peers, the block's checkpoint, and the round exchange (rounds.c).
 * Every 4xx and 5xx carries a body that says what was wrong. */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/node/api.h"
#include "daemon/core/log.h"
#include "daemon/net/http_route.h"
#include "daemon/node/node.h"
#include "daemon/node/predicted.h"
#include "daemon/node/probe.h"
#include "kernels/clock.h"
#include "soma/trainer.h"

static const char *
peer_state_name(peers_state s)
{
	switch (s) {
	case PEERS_UP: return "up";
	case PEERS_DOWN: return "down";
	case PEERS_REFUSED: return "refused";
	default: return "unknown";
	}
}

static json_t *
bytes_json(const uint64_t in[PEERS_KINDS], const uint64_t out[PEERS_KINDS])
{
	json_t *o = json_object(), *ji = json_object(), *jo = json_object();
	int k;

	for (k = 0; k < PEERS_KINDS; k++) {
		json_object_set_new(ji, peers_kind_name(k), json_integer(
		    (json_int_t)in[k]));
		json_object_set_new(jo, peers_kind_name(k), json_integer(
		    (json_int_t)out[k]));
	}
	json_object_set_new(o, "in", ji);
	json_object_set_new(o, "out", jo);
	return o;
}

/* A peer's refusals by kind, and whether it is quarantined, into o. */
static void
peer_strikes_json(node *n, json_t *o, const char *id)
{
	const strikes_peer *sp = strikes_find(node_trust_strikes(n), id);
	json_t *k = json_object();
	int i;

	for (i = 0; i < STRIKES_KINDS; i++)
		json_object_set_new(k, strikes_kind_name(i), json_integer(
		    sp != NULL ? (json_int_t)sp->total[i] : 0));
	json_object_set_new(o, "strikes", k);
	json_object_set_new(o, "quarantined", json_boolean(sp != NULL &&
	    sp->quarantined));
}

const char *
api_strikes_key(const peers_entry *p)
{
	return p->has_id ? p->id_text : p->addr;
}

const char *
api_strikes_addr(const node *n, const char *id)
{
	int i;

	for (i = 0; i < n->peers.n; i++)
		if (strcmp(api_strikes_key(&n->peers.v[i]), id) == 0)
			return n->peers.v[i].addr;
	return NULL;
}

/* Every peer with a refusal: counts, quarantine, the latest reason. */
static json_t *
strikes_json(node *n)
{
	json_t *o = json_object(), *arr = json_array(), *q = json_array();
	int i, k;

	for (i = 0; i < strikes_count(node_trust_strikes(n)); i++) {
		const strikes_peer *sp = strikes_at(node_trust_strikes(n), i);
		const char *addr = api_strikes_addr(n, sp->id);
		json_t *e = json_object();

		json_object_set_new(e, "id", json_string(sp->id));
		if (addr != NULL)
			json_object_set_new(e, "addr", json_string(addr));
		for (k = 0; k < STRIKES_KINDS; k++)
			json_object_set_new(e, strikes_kind_name(k),
			    json_integer((json_int_t)sp->total[k]));
		json_object_set_new(e, "current", json_integer(
		    (json_int_t)sp->current));
		json_object_set_new(e, "quarantined",
		    json_boolean(sp->quarantined));
		json_object_set_new(e, "refused_connections", json_integer(
		    (json_int_t)sp->refused));
		json_object_set_new(e, "why", json_string(sp->why));
		json_array_append_new(arr, e);
		if (sp->quarantined)
			json_array_append_new(q, json_string(sp->id));
	}
	json_object_set_new(o, "threshold", json_integer(
	    strikes_threshold(node_trust_strikes(n))));
	json_object_set_new(o, "clears", json_integer((json_int_t)
	    strikes_clears(node_trust_strikes(n))));
	json_object_set_new(o, "quarantined", q);
	json_object_set_new(o, "peers", arr);
	return o;
}

static json_t *
peers_json(node *n)
{
	json_t *arr = json_array();
	double t = kn_now();
	int i;

	for (i = 0; i < n->peers.n; i++) {
		peers_entry *p = &n->peers.v[i];
		json_t *o = json_object();

		json_object_set_new(o, "addr", json_string(p->addr));
		if (p->expert >= 0)
			json_object_set_new(o, "expert", json_integer(p->expert));
		else {
			json_object_set_new(o, "block", json_integer(p->block));
			json_object_set_new(o, "replica", json_integer(
			    peers_replica_index(&n->peers, i)));
		}
		json_object_set_new(o, "self", json_boolean(p->self));
		if (p->has_id)
			json_object_set_new(o, "id", json_string(p->id_text));
		if (!p->self) {
			json_object_set_new(o, "state", json_string(
			    peer_state_name(p->state)));
			if (p->last_seen > 0)
				json_object_set_new(o, "last_seen_s_ago",
				    json_real(t - p->last_seen));
			json_object_set_new(o, "rtt_ms", json_real(p->rtt_ms));
			json_object_set_new(o, "failures",
			    json_integer(p->failures));
			if (p->why[0])
				json_object_set_new(o, "why", json_string(p->why));
			json_object_set_new(o, "step", json_integer(p->step));
		}
		if (!p->self)
			peer_strikes_json(n, o, api_strikes_key(p));
		json_object_set_new(o, "bytes", bytes_json(p->bytes_in,
		    p->bytes_out));
		json_array_append_new(arr, o);
	}
	return arr;
}

double
api_step_positions(const node *n)
{
	if (n->soma)
		return (double)sa_step_positions(&n->spec, SA_EXPERT, 0);
	return (double)n->spec.batch * n->spec.window;
}

/* What a SOMA expert daemon says beside the common fields. */
static void
soma_status(node *n, json_t *o)
{
	const node_soma *x = node_soma_of(n);

	json_object_set_new(o, "method", json_string("soma"));
	json_object_set_new(o, "expert", json_integer(x->expert));
	json_object_set_new(o, "experts", json_integer(n->spec.soma.experts));
	if (x->val_step > 0) {
		json_object_set_new(o, "val_loss", json_real(x->val));
		json_object_set_new(o, "val_step", json_integer(x->val_step));
	}
	json_object_set_new(o, "lr", json_real(x->lr));
	json_object_set_new(o, "eps", json_real(x->eps));
	json_object_set_new(o, "positions", json_integer(
	    (json_int_t)x->positions));
	if (x->heldout != NULL)
		json_object_set_new(o, "heldout", json_pack("{s:I,s:I}",
		    "step", (json_int_t)x->heldout_step, "bytes",
		    (json_int_t)x->heldout_len));
}

/* The latest round times, oldest first, and the round of the first. */
/* Our block's replicas now, whether a change waits for the round
 * boundary, and the latest joins and leaves as they took effect here. */
static json_t *
roster_json(const node *n)
{
	const node_report *r = &n->report;
	json_t *o = json_object(), *now = json_array(), *changes = json_array();
	int64_t i, first;

	for (i = 0; i < n->training.roster_n; i++)
		json_array_append_new(now, json_string(n->training.roster[i]));
	first = r->roster_changes_n > NODE_ROSTER_CHANGES ?
	    r->roster_changes_n - NODE_ROSTER_CHANGES : 0;
	for (i = first; i < r->roster_changes_n; i++) {
		const struct node_roster_change *c =
		    &r->roster_changes[i % NODE_ROSTER_CHANGES];

		json_array_append_new(changes, json_pack("{s:s,s:s,s:f,s:I,s:I}",
		    "addr", c->addr, "what", c->joined ? "joined" : "left",
		    "at", c->at, "step", (json_int_t)c->step, "round",
		    (json_int_t)c->round));
	}
	json_object_set_new(o, "replicas", now);
	json_object_set_new(o, "pending", json_string(n->training.leaving ?
	    "leaving" : n->training.reshape ? "change" : "none"));
	json_object_set_new(o, "changes", changes);
	return o;
}

static json_t *
round_times_json(const node *n)
{
	const node_report *r = node_report_of(n);
	int64_t k, first = r->round_times_n > NODE_ROUND_TIMES ?
	    r->round_times_n - NODE_ROUND_TIMES : 0;
	json_t *a = json_array();

	for (k = first; a != NULL && k < r->round_times_n; k++)
		json_array_append_new(a, json_real(
		    r->round_times[k % NODE_ROUND_TIMES]));
	return json_pack("{s:I,s:o*}", "first", (json_int_t)first, "s", a);
}

char *
api_status_json(node *n, size_t *len)
{
	const node_report *r = node_report_of(n);
	const node_ckpt *ck = node_ckpt_of(n);
	json_t *o = json_object();
	uint64_t in[PEERS_KINDS] = { 0 }, out[PEERS_KINDS] = { 0 };
	char *text;
	int i, k;

	json_object_set_new(o, "run_id", json_string(n->run_id));
	if (n->soma)
		soma_status(n, o);
	else {
		json_object_set_new(o, "block", json_integer(n->cfg.block));
		json_object_set_new(o, "blocks", json_integer(n->spec.blocks));
		json_object_set_new(o, "interval", json_pack("[f,f]",
		    n->spec.cuts[n->cfg.block - 1],
		    n->spec.cuts[n->cfg.block]));
	}
	json_object_set_new(o, "replica", json_integer(n->replica));
	json_object_set_new(o, "replicas", json_integer(n->replicas));
	json_object_set_new(o, "addr", json_string(n->cfg.advertise));
	if (node_trust_tls(n) != NULL)
		json_object_set_new(o, "id", json_string(tls_ctx_id(
		    node_trust_tls(n))));
	if (n->metrics != NULL)
		json_object_set_new(o, "metrics", json_string(n->metrics_addr));
	json_object_set_new(o, "state", json_string(r->state));
	if (r->error[0])
		json_object_set_new(o, "error", json_string(r->error));
	json_object_set_new(o, "step", json_integer(r->step));
	json_object_set_new(o, "steps", json_integer(n->soma ?
	    n->spec.soma.steps : n->spec.steps));
	json_object_set_new(o, "round", json_integer(r->round));
	json_object_set_new(o, "overlap_rounds", json_boolean(n->overlap));
	json_object_set_new(o, "steps_overlapped", json_integer(r->overlapped));
	json_object_set_new(o, "loss", json_real(r->loss));
	json_object_set_new(o, "positions_per_s",
	    json_real(r->positions_per_s));
	json_object_set_new(o, "steps_per_s", json_real(r->positions_per_s /
	    api_step_positions(n)));
	if (r->have_share) {
		json_object_set_new(o, "heldout_share", json_real(r->share));
		json_object_set_new(o, "heldout_share_step",
		    json_integer(r->share_step));
	}
	json_object_set_new(o, "checkpoint", json_pack("{s:I,s:I,s:I,s:s}",
	    "step", (json_int_t)ck->step, "round",
	    (json_int_t)ck->round, "bytes", (json_int_t)ck->len,
	    "sha256", ck->etag));
	json_object_set_new(o, "uptime_s", json_real(kn_now() - r->started));
	json_object_set_new(o, "training_s", r->train_began > 0 ?
	    json_real((r->train_ended > 0 ? r->train_ended : kn_now()) -
	    r->train_began) : json_null());
	json_object_set_new(o, "round_times", round_times_json(n));
	json_object_set_new(o, "backend", json_string(n->backend_desc));
	for (i = 0; i < n->peers.n; i++)
		for (k = 0; k < PEERS_KINDS; k++) {
			in[k] += n->peers.v[i].bytes_in[k];
			out[k] += n->peers.v[i].bytes_out[k];
		}
	for (k = 0; k < PEERS_KINDS; k++) {
		in[k] += r->client_in[k];
		out[k] += r->client_out[k];
	}
	json_object_set_new(o, "bytes", bytes_json(in, out));
	json_object_set_new(o, "client_bytes", bytes_json(r->client_in,
	    r->client_out));
	json_object_set_new(o, "peers", peers_json(n));
	json_object_set_new(o, "strikes", strikes_json(n));
	if (!n->soma)
		json_object_set_new(o, "roster", roster_json(n));
	json_object_set_new(o, "rollbacks", json_integer(r->rollbacks));
	if (r->rollbacks > 0)
		json_object_set_new(o, "rolled_back", json_pack("{s:I,s:I}",
		    "step", (json_int_t)r->rolled_back_step, "round",
		    (json_int_t)r->rolled_back_round));
	if (n->predicted != NULL)
		json_object_set_new(o, "predicted", pd_status_json(n->predicted,
		    &n->peers));
	if (n->mirror != NULL)
		json_object_set_new(o, "mirrors", mr_status_json(n->mirror));
	if (n->bootstrap != NULL)
		json_object_set_new(o, "bootstrap", bs_status_json(n->bootstrap));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	*len = text ? strlen(text) : 0;
	return text;
}

/* Over TLS an exchange is charged to the peer whose id the handshake
 * proved (any other is a client).  Over plain TCP daemons add
 * ?from=host:port (their advertised address) to what they ask of each
 * other, and that is all there is to go by. */
static void
meter(void *ctx, const hs_request *req, hs_response *res, int kind)
{
	node *n = ctx;
	const char *from = strstr(req->query, "from=");
	char addr[CF_HOST_LEN + 8];
	int len = 0, who = NODE_CLIENT;

	if (req->peer_id != NULL) {
		who = peers_find_id(&n->peers, req->peer_id);
		hs_response_meter(res, kind, who >= 0 ? who : NODE_CLIENT);
		return;
	}

	if (from != NULL && (from == req->query || from[-1] == '&')) {
		from += 5;
		len = (int)strcspn(from, "&");
	}
	if (len > 0 && len < (int)sizeof(addr)) {
		memcpy(addr, from, (size_t)len);
		addr[len] = '\0';
		who = peers_find(&n->peers, addr);
	}
	hs_response_meter(res, kind, who);
}

void
api_on_exchange(void *ctx, const char *peer, hs_meter m, size_t in,
    size_t out)
{
	(void)peer;
	node_meter(ctx, m.who, m.kind, in, out);
}

static void
serve_checkpoint(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	const node_ckpt *ck = node_ckpt_of(n);
	const char *inm = hs_request_header(req, "If-None-Match");
	char etag[80];

	(void)m;
	if (ck->data == NULL) {
		hs_response_text(res, 503, n->soma ? "no checkpoint yet: the "
		    "expert publishes one at its first validation" :
		    "no checkpoint yet: the block is starting");
		return;
	}
	snprintf(etag, sizeof(etag), "\"%s\"", ck->etag);
	hs_response_header(res, "ETag", etag);
	if (inm != NULL && (strcmp(inm, etag) == 0 ||
	    strcmp(inm, ck->etag) == 0)) {
		hs_response_status(res, 304);
		return;
	}
	hs_response_status(res, 200);
	hs_response_body_shared(res, "application/x-msgpack", ck->body);
	log_info("sent the checkpoint of step %" PRId64 " (%zu bytes) to %s",
	    ck->step, ck->len, req->peer);
}

/* The expert's held-out scores (proto/heldout.h), served as they are. */
static void
get_heldout(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	const node_soma *x = node_soma_of(n);

	(void)m;
	(void)req;
	if (!n->soma) {
		hs_response_text(res, 404, "this daemon trains block %d of a "
		    "BlockTrain run: no SOMA held-out scores", n->cfg.block);
		return;
	}
	if (x->heldout == NULL) {
		hs_response_text(res, 503, "no held-out scores yet: expert %d "
		    "publishes them at its first validation", x->expert);
		return;
	}
	hs_response_status(res, 200);
	hs_response_body(res, "application/x-msgpack", x->heldout,
	    x->heldout_len);
}

static void
get_status(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	size_t len;
	char *body = api_status_json(n, &len);

	(void)m;
	(void)req;
	hs_response_status(res, 200);
	hs_response_body_owned(res, "application/json", body, len);
}

static void
get_metrics(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	size_t len;
	char *body = api_metrics_text(n, &len);

	(void)m;
	(void)req;
	if (body == NULL) {
		hs_response_text(res, 503, "out of memory");
		return;
	}
	hs_response_status(res, 200);
	hs_response_body_owned(res, "text/plain; version=0.0.4", body, len);
}

static void
get_spec(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;

	(void)m;
	(void)req;
	hs_response_status(res, 200);
	hs_response_header(res, "X-Run-Id", n->run_id);
	hs_response_body(res, "application/x-msgpack", n->spec_body,
	    n->spec_len);
}

static void
get_peers(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;

	(void)m;
	(void)req;
	hs_response_json(res, 200, peers_json(n));
}

/* POST /v1/strikes/clear: the operator's clear of every quarantine and
 * count.  Operators only (its row's who): a listed daemon, a quarantined
 * one's accomplice included, must not lift it. */
static void
post_strikes_clear(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	int lifted;

	(void)req;
	(void)m;
	lifted = strikes_quarantined_count(node_trust_strikes(n));
	strikes_clear(node_trust_strikes(n));
	hs_response_json(res, 200, json_pack("{s:i,s:I}", "lifted", lifted,
	    "clears", (json_int_t)strikes_clears(node_trust_strikes(n))));
}

/* Anything the tables do not name: a client's error. */
static void
not_found(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;

	(void)m;
	meter(n, req, res, PEERS_KIND_OTHER);
	n->api.client_errors++;
	hs_response_text(res, 404, "no such resource: %s %s (see "
	    "proto/PROTOCOL.md)", req->method, req->path);
}

/* The refusals of api.c's own rows are a client's errors; those of the
 * strikes' clear say what it does and who may. */
static void
refuse(void *ctx, const hs_request *req, hs_response *res, int status,
    const hr_route *row, const hr_match *m)
{
	node *n = ctx;

	(void)m;
	n->api.client_errors++;
	if (row->fn != post_strikes_clear)
		hr_refuse_text(req, res, status);
	else if (status == 405)
		hs_response_text(res, 405, "%s is not allowed on %s: POST "
		    "clears the strikes", req->method, req->path);
	else
		hs_response_text(res, 403, "only an operator (a client line of "
		    "the peer list) may clear strikes");
}

/* Below /v1/blocks/{b}/rounds/{round}/: rounds_serve.c's table, once
 * this daemon has replicas to exchange updates with. */
static void
block_rounds(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;

	if (node_rounds_of(n) == NULL) {
		if (n->soma)
			hs_response_text(res, 404, "expert %d exchanges no "
			    "updates", node_soma_of(n)->expert);
		else if (n->training.reshape) {
			/* the new engine starts in a moment: the sender tries
			 * again, and a coordinator keeps waiting for us */
			hs_response_header(res, "Retry-After", "1");
			hs_response_text(res, 503, "block %d: this replica starts "
			    "its new roster at this round boundary; try again",
			    n->cfg.block);
		} else {
			/* one replica here: a replica that counts us in its
			 * roster has taken a list we have not (rounds.h) */
			hs_response_text(res, 409, "block %d has one replica here: "
			    "it exchanges no updates", n->cfg.block);
			hs_response_header(res, ROUNDS_STATE_HEADER,
			    ROUNDS_STATE_ROSTER);
		}
		return;
	}
	if (!rounds_handle(node_rounds_of(n), req, res, m->num[1], m->rest))
		not_found(n, req, res, m);
}

/* Below /v1/blocks/{b}/, for the block (or expert) this daemon trains;
 * the block is m->num[0]. */
static const hr_route block_routes[] = {
	{ "GET", "checkpoint", HR_ANYONE, PEERS_KIND_CHECKPOINT,
	    serve_checkpoint, NULL },
	{ "GET", "optimizer", HR_PEER, PEERS_KIND_CHECKPOINT,
	    mr_api_optimizer, NULL },
	{ NULL, "rounds/{n}/{*}", HR_ANYONE, PEERS_KIND_UPDATE, block_rounds,
	    NULL },
};

static void
tree_block(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	hr_table t = { block_routes, sizeof(block_routes) /
	    sizeof(block_routes[0]), n, node_trust_who, meter, refuse, NULL };
	int64_t block = m->num[0];

	if (n->soma && block != node_soma_of(n)->expert) {
		hs_response_text(res, 404, "this daemon trains expert %d, not "
		    "expert %" PRId64, node_soma_of(n)->expert, block);
		return;
	}
	if (!n->soma && block != n->cfg.block) {
		hs_response_text(res, 404, "this daemon serves block %d, not "
		    "block %" PRId64, n->cfg.block, block);
		return;
	}
	if (!hr_dispatch(&t, req, res, m))
		not_found(n, req, res, m);
}

static const int64_t block_max[] = { INT_MAX };

/* Below /v1/probe/: probe.c's table, on the probe's own state. */
static void
tree_probe(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;

	pb_handle(n->probe, req, res, m);
}

/* The node port: every endpoint one row, with the traffic kind it is
 * metered as; the sub-trees' rows are in the tables their handlers
 * dispatch (block_routes above, probe.c's, rounds_serve.c's). */
static const hr_route routes[] = {
	{ "GET", "/v1/status", HR_ANYONE, PEERS_KIND_OTHER, get_status, NULL },
	{ "GET", "/metrics", HR_ANYONE, PEERS_KIND_OTHER, get_metrics, NULL },
	{ "GET", "/v1/spec", HR_ANYONE, PEERS_KIND_OTHER, get_spec, NULL },
	{ "GET", "/v1/peers", HR_ANYONE, PEERS_KIND_OTHER, get_peers, NULL },
	{ "GET", "/v1/soma/heldout", HR_ANYONE, PEERS_KIND_OTHER, get_heldout,
	    NULL },
	{ "POST", "/v1/strikes/clear", HR_OPERATOR, PEERS_KIND_OTHER,
	    post_strikes_clear, NULL },
	{ NULL, "/v1/probe/{*}", HR_ANYONE, PEERS_KIND_OTHER, tree_probe,
	    NULL },
	{ NULL, "/v1/blocks/{n}/{*}", HR_ANYONE, PEERS_KIND_OTHER, tree_block,
	    block_max },
	{ "GET", "/v1/mirrors/{n}", HR_PEER, PEERS_KIND_OTHER, mr_api_mirror,
	    block_max },
	{ "GET", "/v1/mirrors/{n}/checkpoint", HR_PEER, PEERS_KIND_CHECKPOINT,
	    mr_api_mirror_checkpoint, block_max },
	{ "GET", "/v1/mirrors/{n}/optimizer", HR_PEER, PEERS_KIND_CHECKPOINT,
	    mr_api_mirror_optimizer, block_max },
};

/* The metrics listener's one row: not metered (its exchanges are no
 * peer's traffic). */
static const hr_route metrics_routes[] = {
	{ "GET", "/metrics", HR_ANYONE, HR_METER_KEEP, get_metrics, NULL },
};

static void
metrics_not_found(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)ctx;
	(void)req;
	(void)m;
	hs_response_text(res, 404, "this listener serves /metrics only");
}

void
api_metrics_handle(void *ctx, const hs_request *req, hs_response *res)
{
	hr_table t = { metrics_routes, sizeof(metrics_routes) /
	    sizeof(metrics_routes[0]), ctx, NULL, NULL, refuse,
	    metrics_not_found };

	hr_dispatch(&t, req, res, NULL);
}

void
api_handle(void *ctx, const hs_request *req, hs_response *res)
{
	node *n = ctx;
	hr_table t = { routes, sizeof(routes) / sizeof(routes[0]), n,
	    node_trust_who, meter, refuse, not_found };

	n->api.requests++;
	hr_dispatch(&t, req, res, NULL);
}
