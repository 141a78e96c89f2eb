/* insider: a hostile replica for scripts/chaos --insiders (issue 35).  It
 * takes the place of one listed replica (the daemon killed, its identity,
 * port and peer list kept), listens with mutual TLS as the daemon does,
 * and plays the round protocol of proto/PROTOCOL.md badly in one mode:
 * noise, flip and huge updates posted for the round the honest replicas
 * stand at; over and future checkpoints offered to whoever pushes it an
 * update or asks it for the commit; a flood of slow connections; a
 * completion with huge integers (insider_flood.c).  Between its attacks
 * it answers like a replica: status, the newest honest checkpoint, and
 * the commit of a round when the others take it as coordinator.  It stops
 * after --seconds and prints one line of what it did.  `insider get` and
 * `insider strikes` (insider_read.c) read the daemons for the script. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/core/log.h"
#include "daemon/rounds/rounds.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "proto/intcheck.h"
#include "proto/update.h"
#include "scripts/insider.h"

#define TICK_MS 100
#define STATUS_EVERY_S 0.4
#define BEHIND_RETRY_S 0.2
/* How long flip waits for an honest update of the round to turn round
 * before it falls back to two checkpoints' difference, or noise. */
#define FLIP_WAIT_ROUNDS 2.0

static const char *const mode_names[IN_MODES] = {
	"noise", "flip", "huge", "over", "future", "flood", "completion"
};

double
in_elapsed(const insider *in)
{
	return kn_now() - in->started;
}

int
in_usage(FILE *f)
{
	fprintf(f,
	    "usage: insider --peers FILE --spec FILE --state DIR --mode MODE\n"
	    "               [--seconds N] [--scale S] [--factor F] [--seed N]\n"
	    "               [--checkpoint zero|stale] [--future-step N]\n"
	    "               [--connections N] [--drip S] [--sources N]\n"
	    "               [--entry HOST:PORT --entry-id ID] [-v]\n"
	    "       insider get --peers FILE --identity DIR --addr HOST:PORT\n"
	    "               --path PATH [--field NAME[.NAME]]\n"
	    "       insider strikes HOST:PORT < status.json\n"
	    "Takes the place of the replica whose identity is in DIR (its line\n"
	    "in the peer list; the daemon must be stopped) for --seconds (30)\n"
	    "and, in each round of its block, behaves as MODE says:\n"
	    "  noise       a Gaussian update of sigma --scale (1)\n"
	    "  flip        -factor (4) x an honest update of the round (else\n"
	    "              two honest checkpoints' difference, else noise)\n"
	    "  huge        every value 1e30 (finite)\n"
	    "  over        409 X-Round-State: over to every pushed update and\n"
	    "              410 to every commit poll; serves an all-zero\n"
	    "              checkpoint (--checkpoint stale: the first honest\n"
	    "              one it fetched)\n"
	    "  future      as over, the checkpoint stamped --future-step\n"
	    "              (200000) with the newest honest weights\n"
	    "  flood       --connections (300) TLS connections to the other\n"
	    "              replicas, one header byte every --drip (5) s, from\n"
	    "              --sources (8) loopback addresses 127.0.1.x\n"
	    "  completion  POST /v1/completions with huge integers (max_tokens,\n"
	    "              steps, seed) to the pipeline entry --entry, pinned\n"
	    "              to --entry-id, then the most expensive request,\n"
	    "              given up after 2 s; then asks the entry's status\n"
	    "              (completion=0: it answered); without an entry,\n"
	    "              says so\n"
	    "It finds the round by asking the honest replicas' /v1/status.\n"
	    "Last line: 'insider: mode=M ...' with what was sent and answered.\n"
	    "get: prints the body of GET PATH at HOST:PORT (pinned to its id\n"
	    "in the peer list), asked as the identity of DIR; exits 1 on\n"
	    "anything but 200; --field: only that field of a JSON body.\n"
	    "strikes: from one daemon's /v1/status on stdin, the refusals it\n"
	    "counted of the peer at HOST:PORT and whether it quarantined it:\n"
	    "'rejected=N quarantined=0|1 fields=status|none'.\n");
	return 2;
}

/* ---- the honest replicas ---- */

static peers_entry *
replica_line(insider *in, int k)
{
	return &in->peers.v[in->rep_peer[k]];
}

static void
url_of(insider *in, int k, char *url, size_t len, const char *path)
{
	snprintf(url, len, "%s://%s%s%sfrom=%s", hc_scheme(in->client),
	    replica_line(in, k)->addr, path, strchr(path, '?') ? "&" : "?",
	    in->peers.v[in->self].addr);
}

/* One request in flight: to which replica, about which round. */
struct call {
	insider *in;
	int replica;
	int64_t round;
};

static int
request(insider *in, int k, int64_t round, const char *method,
    const char *path, const char *body, size_t len, size_t max_body,
    hc_done_fn done)
{
	hc_request_opts o = { 0 };
	char url[1024], err[HC_ERR_LEN];
	struct call *c = malloc(sizeof(*c));

	if (c == NULL)
		return -1;
	c->in = in;
	c->replica = k;
	c->round = round;
	url_of(in, k, url, sizeof(url), path);
	o.method = method;
	o.url = url;
	o.pin = replica_line(in, k)->has_id ? replica_line(in, k)->id : NULL;
	o.content_type = body != NULL ? "application/x-msgpack" : NULL;
	o.body = body;
	o.body_len = len;
	o.timeout_ms = 10000;
	o.connect_timeout_ms = 2000;
	o.max_body_bytes = max_body;
	o.want_header = ROUNDS_STATE_HEADER;
	if (hc_request(in->client, &o, done, c, err) != 0) {
		free(c);
		return -1;
	}
	return 0;
}

static struct call
call_end(void *ctx)
{
	struct call c = *(struct call *)ctx;

	free(ctx);
	return c;
}

/* Decodes a checkpoint into params (count floats): 0 or -1. */
static int
ckpt_params(insider *in, const char *buf, size_t len, float *params,
    pr_ckpt_meta *meta)
{
	pr_ckpt_meta expect = { 0 };
	char err[PR_ERR_LEN];

	snprintf(expect.run_id, sizeof(expect.run_id), "%s", in->run_id);
	expect.block = -1;
	return pr_ckpt_decode(buf, len, &expect, in->tensors, in->ntensors,
	    params, meta, err) == 0 ? 0 : -1;
}

/* What we serve, made again from the newest honest checkpoint: the same
 * bytes, or (over, future) weights and stamps of our own. */
static void
make_served(insider *in)
{
	pr_ckpt_meta meta;
	float *params;
	char err[PR_ERR_LEN], *buf;
	size_t len;

	if (in->honest == NULL)
		return;
	if (in->mode != IN_OVER && in->mode != IN_FUTURE) {
		buf = malloc(in->honest_len);
		if (buf == NULL)
			return;
		memcpy(buf, in->honest, in->honest_len);
		len = in->honest_len;
	} else if (in->mode == IN_OVER && in->stale) {
		if ((buf = malloc(in->first_len)) == NULL)
			return;
		memcpy(buf, in->first, in->first_len);
		len = in->first_len;
	} else {
		if ((params = calloc(in->count, sizeof(float))) == NULL)
			return;
		if (ckpt_params(in, in->honest, in->honest_len, params,
		    &meta) != 0) {
			free(params);
			return;
		}
		if (in->mode == IN_OVER)
			memset(params, 0, in->count * sizeof(float));
		else {
			meta.step = in->future_step;
			meta.round = in->future_step / in->spec.local_steps;
		}
		if (pr_ckpt_encode(&meta, in->tensors, in->ntensors, params,
		    &buf, &len, err) != 0) {
			fprintf(stderr, "insider: %s\n", err);
			free(params);
			return;
		}
		free(params);
	}
	free(in->served);
	in->served = buf;
	in->served_len = len;
	if (pr_ckpt_peek(buf, len, &meta, NULL) == 0) {
		in->served_step = meta.step;
		in->served_round = meta.round;
	}
	pr_ckpt_sha256_hex(buf, len, in->served_sha, NULL);
}

static void
on_checkpoint(void *ctx, hc_result *res)
{
	struct call c = call_end(ctx);
	insider *in = c.in;
	pr_ckpt_meta meta;
	float *p;

	in->ckpt_busy = 0;
	if (res->status != 200 || res->body == NULL)
		return;
	free(in->honest);
	in->honest_len = res->body_len;
	in->honest = hc_result_take_body(res);
	if (in->first == NULL && (in->first = malloc(in->honest_len)) != NULL) {
		memcpy(in->first, in->honest, in->honest_len);
		in->first_len = in->honest_len;
	}
	pr_ckpt_sha256_hex(in->honest, in->honest_len, in->honest_sha, NULL);
	/* the two newest of different rounds: their difference is what
	 * the rounds between them moved, a plausible update for flip */
	if ((p = malloc(in->count * sizeof(float))) != NULL &&
	    ckpt_params(in, in->honest, in->honest_len, p, &meta) == 0 &&
	    meta.round > in->cur_round) {
		free(in->prev_params);
		in->prev_params = in->cur_params;
		in->cur_params = p;
		in->prev_round = in->cur_round;
		in->cur_round = meta.round;
		p = NULL;
	}
	free(p);
	make_served(in);
}

static void
on_status(void *ctx, hc_result *res)
{
	struct call c = call_end(ctx);
	insider *in = c.in;
	json_t *root, *ck;
	json_error_t jerr;
	const char *sha;
	char path[64];
	int64_t round, step;

	in->status_busy[c.replica] = 0;
	if (res->status != 200 || (root = json_loadb(res->body, res->body_len,
	    0, &jerr)) == NULL)
		return;
	/* the rounds it posts for are (round + 1) H: a status far out of
	 * any run is read as none */
	round = pr_int_or(json_integer_value(json_object_get(root, "round")),
	    0, INT32_MAX, -1);
	step = pr_int_or(json_integer_value(json_object_get(root, "step")), 0,
	    INT32_MAX, -1);
	ck = json_object_get(root, "checkpoint");
	sha = json_string_value(json_object_get(ck, "sha256"));
	if (round > in->round) {
		in->round = round;
		in->round_seen = kn_now();
	}
	if (step > in->step)
		in->step = step;
	/* the newest checkpoint: the highest round an honest one holds */
	snprintf(path, sizeof(path), "/v1/blocks/%d/checkpoint", in->block);
	if (sha != NULL && sha[0] != '\0' && strcmp(sha, in->honest_sha) != 0 &&
	    json_integer_value(json_object_get(ck, "round")) >= in->cur_round &&
	    !in->ckpt_busy && request(in, c.replica, round, "GET", path, NULL, 0,
	    (size_t)1 << 30, on_checkpoint) == 0)
		in->ckpt_busy = 1;
	json_decref(root);
}

static void
poll_status(insider *in, double t)
{
	int k;

	for (k = 0; k < in->replicas; k++) {
		if (k == in->replica || in->status_busy[k] ||
		    t < in->status_next[k])
			continue;
		in->status_next[k] = t + STATUS_EVERY_S;
		if (request(in, k, -1, "GET", "/v1/status", NULL, 0, 1 << 20,
		    on_status) == 0)
			in->status_busy[k] = 1;
	}
}

/* ---- our update ---- */

/* xorshift64* and Box-Muller: seeded, so a run can be told again. */
static double
uniform01(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return ((*s * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}

static void
gaussian(float *v, size_t n, double sigma, uint64_t *s)
{
	size_t i;

	for (i = 0; i < n; i++) {
		double u = uniform01(s), w = uniform01(s);

		if (u < 1e-300)
			u = 1e-300;
		v[i] = (float)(sigma * sqrt(-2.0 * log(u)) * cos(2 * M_PI * w));
	}
}

/* The update of mode for round, in delta; what it was made from in
 * what.  0, or 1 when flip should wait for an honest update still. */
static int
make_update(insider *in, int64_t round, float *delta, const char **what)
{
	uint64_t s = in->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)round + 1;
	double waited = kn_now() - in->round_seen;
	size_t i;

	switch (in->mode) {
	case IN_HUGE:
		for (i = 0; i < in->count; i++)
			delta[i] = 1e30f;
		*what = "every value 1e30";
		return 0;
	case IN_FLIP:
		if (in->honest_update != NULL && in->honest_update_round == round) {
			for (i = 0; i < in->count; i++)
				delta[i] = (float)(-in->factor * in->honest_update[i]);
			*what = "-factor x an honest update of the round";
			return 0;
		}
		if (waited < FLIP_WAIT_ROUNDS * in->spec.round_deadline)
			return 1;
		if (in->prev_params != NULL && in->cur_params != NULL &&
		    in->cur_round > in->prev_round) {
			double per = (double)(in->cur_round - in->prev_round) *
			    in->spec.outer_lr;

			for (i = 0; i < in->count; i++)
				delta[i] = (float)(-in->factor * (in->prev_params[i] -
				    in->cur_params[i]) / per);
			*what = "-factor x two honest checkpoints' difference";
			return 0;
		}
		gaussian(delta, in->count, 0.01 * in->factor, &s);
		*what = "noise of sigma 0.01 x factor (no honest update)";
		return 0;
	default:
		gaussian(delta, in->count, in->scale, &s);
		*what = "Gaussian noise";
		return 0;
	}
}

static void
on_pushed(void *ctx, hc_result *res)
{
	struct call c = call_end(ctx);
	insider *in = c.in;
	int k = c.replica;

	if (c.round != in->posted_round)
		return;
	if (res->status == 202) {
		in->accepted++;
		in->push_state[k] = 2;
	} else if (res->status == 409 && res->header != NULL &&
	    strcmp(res->header, ROUNDS_STATE_BEHIND) == 0) {
		in->behind++;
		in->push_state[k] = 0;
		in->push_at[k] = kn_now() + BEHIND_RETRY_S;
	} else if (res->status == 409) {
		in->over++;
		in->push_state[k] = 2;
	} else if (res->status >= 400) {
		/* a refusal: the defence we are here to meet */
		in->refused++;
		in->push_state[k] = 2;
		if (in->first_refusal[0] == '\0')
			snprintf(in->first_refusal, sizeof(in->first_refusal),
			    "%ld %.*s", res->status, res->body != NULL ?
			    (int)strcspn(res->body, "\n") : 0,
			    res->body != NULL ? res->body : "");
	} else {
		/* unreachable or cut off: again, a little later */
		in->failed++;
		in->push_state[k] = 0;
		in->push_at[k] = kn_now() + 1.0;
	}
}

static void
take_own(insider *in, int64_t round)
{
	char *copy;

	if (in->gather_round != round || in->mine == NULL ||
	    (copy = malloc(in->mine_len)) == NULL)
		return;
	memcpy(copy, in->mine, in->mine_len);
	free(in->got[in->replica]);
	in->got[in->replica] = copy;
	in->got_len[in->replica] = in->mine_len;
}

static void
new_gather(insider *in, int64_t round)
{
	int k;

	if (round <= in->gather_round)
		return;
	for (k = 0; k < IN_MAX_REPLICAS; k++) {
		free(in->got[k]);
		in->got[k] = NULL;
		in->got_len[k] = 0;
	}
	in->gather_round = round;
	in->gather_since = kn_now();
}

/* Builds our update for the honest replicas' round, once, and pushes it
 * to each of them until it is taken, refused or the round is over. */
static void
post_update(insider *in, double t)
{
	pr_update_meta meta = { 0 };
	char path[256], err[PR_ERR_LEN];
	const char *what = "";
	float *delta;
	int k, rc;

	if (in->mode > IN_HUGE || in->round < 0)
		return;
	if (in->round > in->posted_round) {
		if ((delta = malloc(in->count * sizeof(float))) == NULL)
			return;
		if (make_update(in, in->round, delta, &what) != 0) {
			free(delta);
			return;
		}
		snprintf(meta.run_id, sizeof(meta.run_id), "%s", in->run_id);
		meta.block = in->block;
		meta.round = in->round;
		meta.replica = in->replica;
		meta.step = (in->round + 1) * in->spec.local_steps;
		meta.enc = PR_ENC_F32;
		meta.count = in->count;
		meta.comp = PR_COMP_NONE;
		free(in->mine);
		in->mine = NULL;
		rc = pr_update_encode(&meta, delta, &in->mine, &in->mine_len, err);
		free(delta);
		if (rc != 0) {
			fprintf(stderr, "insider: round %" PRId64 ": %s\n",
			    in->round, err);
			in->posted_round = in->round;
			return;
		}
		in->posted_round = in->round;
		in->rounds_posted++;
		memset(in->push_state, 0, sizeof(in->push_state));
		memset(in->push_at, 0, sizeof(in->push_at));
		new_gather(in, in->round);
		take_own(in, in->round);
		printf("insider [%.0fs]: round %" PRId64 ": posting %s (%zu "
		    "bytes)\n", in_elapsed(in), in->round, what, in->mine_len);
		fflush(stdout);
	}
	snprintf(path, sizeof(path), "/v1/blocks/%d/rounds/%" PRId64
	    "/updates", in->block, in->posted_round);
	for (k = 0; k < in->replicas; k++) {
		if (k == in->replica || in->push_state[k] != 0 ||
		    t < in->push_at[k])
			continue;
		if (request(in, k, in->posted_round, "POST", path, in->mine,
		    in->mine_len, 1 << 16, on_pushed) == 0)
			in->push_state[k] = 1;
	}
}

/* As coordinator (when the others take us for it): the round is decided
 * with every update we hold once we hold all, or at the deadline. */
static void
decide(insider *in, double t)
{
	uint64_t members = 0;
	int k, all = 1;

	if (in->mode == IN_OVER || in->mode == IN_FUTURE ||
	    in->gather_round <= in->decided_round)
		return;
	for (k = 0; k < in->replicas; k++) {
		if (in->got[k] != NULL)
			members |= 1ULL << k;
		else if (k != in->replica || in->mode <= IN_HUGE)
			all = 0;
	}
	if (members == 0 || (!all && t - in->gather_since <
	    in->spec.round_deadline))
		return;
	for (k = 0; k < IN_MAX_REPLICAS; k++) {
		free(in->kept[k]);
		in->kept[k] = in->got[k];
		in->kept_len[k] = in->got_len[k];
		in->got[k] = NULL;
	}
	in->members = members;
	in->decided_round = in->gather_round;
}

static void
on_tick(uv_timer_t *h)
{
	insider *in = h->data;
	double t = kn_now();

	if (in->done)
		return;
	if (t - in->started >= in->seconds) {
		in->done = 1;
		uv_stop(in->loop);
		return;
	}
	poll_status(in, t);
	post_update(in, t);
	decide(in, t);
}

/* ---- what we answer ---- */

static void
answer_status(insider *in, hs_response *res)
{
	json_t *o = json_object();

	json_object_set_new(o, "run_id", json_string(in->run_id));
	json_object_set_new(o, "block", json_integer(in->block));
	json_object_set_new(o, "blocks", json_integer(in->spec.blocks));
	json_object_set_new(o, "replica", json_integer(in->replica));
	json_object_set_new(o, "replicas", json_integer(in->replicas));
	json_object_set_new(o, "addr", json_string(in->peers.v[in->self].addr));
	json_object_set_new(o, "state", json_string("training"));
	json_object_set_new(o, "step", json_integer(in->mode == IN_FUTURE ?
	    in->future_step : in->step));
	json_object_set_new(o, "steps", json_integer(in->spec.steps));
	json_object_set_new(o, "round", json_integer(in->served != NULL ?
	    in->served_round : in->round < 0 ? 0 : in->round));
	json_object_set_new(o, "checkpoint", json_pack("{s:I,s:I,s:I,s:s}",
	    "step", (json_int_t)in->served_step, "round",
	    (json_int_t)in->served_round, "bytes", (json_int_t)in->served_len,
	    "sha256", in->served_sha));
	hs_response_json(res, 200, o);
}

/* An update pushed to us: kept for our round (and, for flip, decoded),
 * or, over and future, answered "over" so that the sender adopts our
 * checkpoint. */
static void
answer_update(insider *in, const hs_request *req, hs_response *res,
    int64_t round)
{
	pr_update_meta expect = { 0 }, got;
	char err[PR_ERR_LEN], *copy;
	float *d;

	if (in->mode == IN_OVER || in->mode == IN_FUTURE) {
		in->over_answers++;
		hs_response_header(res, ROUNDS_STATE_HEADER, ROUNDS_STATE_OVER);
		hs_response_text(res, 409, "round %" PRId64 " is over; this "
		    "replica is at round %" PRId64 ": fetch the checkpoint",
		    round, in->served_round);
		return;
	}
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", in->run_id);
	expect.block = in->block;
	expect.round = round;
	expect.count = in->count;
	if ((d = malloc(in->count * sizeof(float))) == NULL ||
	    pr_update_decode(req->body, req->body_len, &expect, d, &got,
	    err) != 0 || got.replica < 0 || got.replica >= in->replicas ||
	    (copy = malloc(req->body_len)) == NULL) {
		free(d);
		hs_response_text(res, 400, "update refused");
		return;
	}
	in->updates_received++;
	if (in->mode == IN_FLIP && got.replica != in->replica) {
		free(in->honest_update);
		in->honest_update = d;
		in->honest_update_round = round;
		d = NULL;
	}
	free(d);
	memcpy(copy, req->body, req->body_len);
	new_gather(in, round);
	if (round == in->gather_round) {
		free(in->got[got.replica]);
		in->got[got.replica] = copy;
		in->got_len[got.replica] = req->body_len;
	} else
		free(copy);
	hs_response_text(res, 202, "update of replica %d for round %" PRId64
	    " accepted", got.replica, round);
}

static void
answer_commit(insider *in, hs_response *res, int64_t round)
{
	json_t *m;
	int k;

	in->commits++;
	if (in->mode == IN_OVER || in->mode == IN_FUTURE ||
	    round < in->decided_round) {
		hs_response_text(res, 410, "round %" PRId64 " is over; fetch the "
		    "checkpoint", round);
		return;
	}
	if (round != in->decided_round) {
		hs_response_text(res, 404, "round %" PRId64 " is not decided "
		    "yet", round);
		return;
	}
	m = json_array();
	for (k = 0; k < in->replicas; k++)
		if (in->members & (1ULL << k))
			json_array_append_new(m, json_integer(k));
	hs_response_json(res, 200, json_pack("{s:I,s:o}", "round",
	    (json_int_t)round, "members", m));
}

static void
handle(void *ctx, const hs_request *req, hs_response *res)
{
	insider *in = ctx;
	char rest[64];
	int64_t round;
	int b, k, n = 0;

	if (strcmp(req->path, "/v1/status") == 0) {
		answer_status(in, res);
		return;
	}
	if (sscanf(req->path, "/v1/blocks/%d/checkpoint%n", &b, &n) == 1 &&
	    req->path[n] == '\0') {
		if (in->served == NULL) {
			hs_response_text(res, 503, "no checkpoint yet: the "
			    "block is starting");
			return;
		}
		in->checkpoints_served++;
		hs_response_status(res, 200);
		hs_response_body(res, "application/x-msgpack", in->served,
		    in->served_len);
		return;
	}
	if (sscanf(req->path, "/v1/blocks/%d/rounds/%" SCNd64 "/%63s", &b,
	    &round, rest) == 3 && b == in->block) {
		if (strcmp(rest, "updates") == 0) {
			answer_update(in, req, res, round);
			return;
		}
		if (strcmp(rest, "commit") == 0) {
			answer_commit(in, res, round);
			return;
		}
		if (sscanf(rest, "updates/%d", &k) == 1 && k >= 0 &&
		    k < in->replicas && round == in->decided_round &&
		    in->kept[k] != NULL) {
			hs_response_status(res, 200);
			hs_response_body(res, "application/x-msgpack",
			    in->kept[k], in->kept_len[k]);
			return;
		}
	}
	hs_response_text(res, 404, "no such resource");
}

/* ---- start-up ---- */

static int
allows(void *arg, const uint8_t id[ID_BYTES])
{
	const insider *in = arg;

	return peers_find_id(&in->peers, id) >= 0 ||
	    peers_client_find(&in->peers, id) >= 0;
}

static int
load_identity(insider *in, const char *peers, const char *state)
{
	char err[KN_ERR_LEN];
	int i, k = 0;

	if (tls_ctx_new(&in->tls, state, err) != 0 ||
	    peers_load(&in->peers, peers, err) != 0) {
		fprintf(stderr, "insider: %s\n", err);
		return -1;
	}
	tls_ctx_set_allow(in->tls, allows, in);
	in->self = -1;
	for (i = 0; i < in->peers.n; i++)
		if (strcmp(in->peers.v[i].id_text, tls_ctx_id(in->tls)) == 0)
			in->self = i;
	if (in->self < 0) {
		fprintf(stderr, "insider: the identity of %s (%s) has no line "
		    "in %s\n", state, tls_ctx_id(in->tls), peers);
		return -1;
	}
	in->block = in->peers.v[in->self].block;
	in->replica = peers_replica_index(&in->peers, in->self);
	for (i = 0; i < in->peers.n && k < IN_MAX_REPLICAS; i++)
		if (in->peers.v[i].block == in->block)
			in->rep_peer[k++] = i;
	in->replicas = k;
	return 0;
}

static int
load_spec(insider *in, const char *path)
{
	char err[PR_ERR_LEN];
	kn_model_shape shape;
	kn_model *m;

	if (pr_spec_load(&in->spec, path, err) != 0 ||
	    pr_spec_run_id(&in->spec, in->run_id, err) != 0) {
		fprintf(stderr, "insider: %s\n", err);
		return -1;
	}
	shape = pr_spec_block_shape(&in->spec, in->block - 1);
	/* the tensor table, to read and write checkpoints of the block */
	if (kn_model_create_inference(&m, &shape, kn_cpu_backend(), 1,
	    KN_STORE_F32, err) != 0) {
		fprintf(stderr, "insider: %s\n", err);
		return -1;
	}
	in->model = m;
	in->tensors = kn_model_tensors(m, &in->ntensors);
	in->count = kn_model_params_for(&shape);
	return 0;
}

static int
parse_mode(const char *s, in_mode *m)
{
	int i;

	for (i = 0; i < IN_MODES; i++)
		if (strcmp(s, mode_names[i]) == 0) {
			*m = (in_mode)i;
			return 0;
		}
	return -1;
}

static int
parse_args(insider *in, int argc, char **argv, const char **peers,
    const char **spec, const char **state)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "spec", required_argument, NULL, 'r' },
		{ "state", required_argument, NULL, 's' },
		{ "mode", required_argument, NULL, 'm' },
		{ "seconds", required_argument, NULL, 'T' },
		{ "scale", required_argument, NULL, 'S' },
		{ "factor", required_argument, NULL, 'F' },
		{ "seed", required_argument, NULL, 'x' },
		{ "checkpoint", required_argument, NULL, 'c' },
		{ "future-step", required_argument, NULL, 'f' },
		{ "connections", required_argument, NULL, 'n' },
		{ "drip", required_argument, NULL, 'd' },
		{ "sources", required_argument, NULL, 'a' },
		{ "entry", required_argument, NULL, 'e' },
		{ "entry-id", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, mode = 0;

	while ((ch = getopt_long(argc, argv, "vh", opts, NULL)) != -1)
		switch (ch) {
		case 'p': *peers = optarg; break;
		case 'r': *spec = optarg; break;
		case 's': *state = optarg; break;
		case 'm':
			if (parse_mode(optarg, &in->mode) != 0)
				return -1;
			mode = 1;
			break;
		case 'T': in->seconds = atof(optarg); break;
		case 'S': in->scale = atof(optarg); break;
		case 'F': in->factor = atof(optarg); break;
		case 'x': in->seed = strtoull(optarg, NULL, 10); break;
		case 'c':
			if (strcmp(optarg, "stale") != 0 &&
			    strcmp(optarg, "zero") != 0)
				return -1;
			in->stale = strcmp(optarg, "stale") == 0;
			break;
		case 'f': in->future_step = strtoll(optarg, NULL, 10); break;
		case 'n': in->connections = atoi(optarg); break;
		case 'd': in->drip = atof(optarg); break;
		case 'a': in->sources = atoi(optarg); break;
		case 'e': in->entry = optarg; break;
		case 'i': in->entry_id = optarg; break;
		case 'v': log_init(1, 1, "insider"); break;
		case 'h': in_usage(stdout); exit(0);
		default: return -1;
		}
	/* bounded: a tool that cannot run away */
	if (!mode || *peers == NULL || *spec == NULL || *state == NULL ||
	    optind != argc || !(in->seconds > 0 && in->seconds <= 3600) ||
	    !(in->scale >= 0) || !isfinite(in->scale) || !isfinite(in->factor) ||
	    in->connections < 0 || in->connections > 4096 || in->sources < 0 ||
	    in->sources > 250 || !(in->drip >= 0.1) || in->future_step < 1)
		return -1;
	return 0;
}

static void
summary(insider *in)
{
	char flood[160] = "";

	if (in->flood != NULL)
		in_flood_summary(in->flood, flood, sizeof(flood));
	printf("insider: mode=%s block=%d replica=%d seconds=%.0f "
	    "rounds_posted=%ld accepted=%ld refused=%ld over=%ld behind=%ld "
	    "unreachable=%ld updates_received=%ld commits_answered=%ld "
	    "over_answers=%ld checkpoints_served=%ld completion=%d %s\n",
	    mode_names[in->mode], in->block, in->replica, in_elapsed(in),
	    in->rounds_posted, in->accepted, in->refused, in->over, in->behind,
	    in->failed, in->updates_received, in->commits, in->over_answers,
	    in->checkpoints_served, in->completion_status, flood);
	if (in->first_refusal[0] != '\0')
		printf("insider: first refusal: %s\n", in->first_refusal);
	if (in->completion_error[0] != '\0')
		printf("insider: completion: %s\n", in->completion_error);
}

static int
run(int argc, char **argv)
{
	static insider in;
	const char *peers = NULL, *spec = NULL, *state = NULL;
	char err[HS_ERR_LEN];
	hs_config cfg;
	uv_timer_t tick;

	in.seconds = 30;
	in.scale = 1;
	in.factor = 4;
	in.seed = 1;
	in.future_step = 200000;
	in.connections = 300;
	in.drip = 5;
	in.sources = 8;
	in.round = -1;
	in.posted_round = -1;
	in.gather_round = -1;
	in.decided_round = -1;
	in.honest_update_round = -1;
	in.completion_status = -1;
	if (parse_args(&in, argc, argv, &peers, &spec, &state) != 0)
		return in_usage(stderr);
	if (load_identity(&in, peers, state) != 0 || load_spec(&in, spec) != 0)
		return 1;
	if (in.replicas < 2) {
		fprintf(stderr, "insider: block %d has one replica: no rounds\n",
		    in.block);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	in.started = kn_now();
	in.loop = uv_default_loop();
	hs_config_defaults(&cfg);
	cfg.max_body_bytes = pr_update_max_bytes(in.count) + (1 << 20);
	cfg.tls = in.tls;
	if (hs_server_new(&in.server, in.loop, &cfg, handle, &in, err) != 0 ||
	    hs_server_listen(in.server, in.peers.v[in.self].host,
	    in.peers.v[in.self].port, err) != 0 ||
	    hc_client_new(&in.client, in.loop, err) != 0) {
		fprintf(stderr, "insider: %s: %s\n", in.peers.v[in.self].addr,
		    err);
		return 1;
	}
	hc_client_set_tls(in.client, in.tls);
	printf("insider: replica %d of block %d at %s, mode %s, for %.0f s\n",
	    in.replica, in.block, in.peers.v[in.self].addr,
	    mode_names[in.mode], in.seconds);
	fflush(stdout);
	if (in.mode == IN_FLOOD && in_flood_start(&in) != 0)
		return 1;
	if (in.mode == IN_COMPLETION && in_completion_start(&in) != 0)
		printf("insider: completion skipped: %s\n", in.completion_error);
	uv_timer_init(in.loop, &tick);
	tick.data = &in;
	uv_timer_start(&tick, on_tick, TICK_MS, TICK_MS);
	uv_run(in.loop, UV_RUN_DEFAULT);
	summary(&in);
	fflush(stdout);
	/* the loop's handles and connections go with the process */
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "get") == 0)
		return in_get(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "strikes") == 0)
		return in_strikes(argc - 1, argv + 1);
	return run(argc, argv);
}
