/* Bootstrap: the newest checkpoint of our block fetched from its other
 * hosts or its mirrors before the trainer starts.  See bootstrap.h.
 * The asking and fetching run on the loop; the check and the install on
 * libuv's pool (file work). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/node/bootstrap.h"
#include "daemon/node/mirror.h"
#include "daemon/node/node.h"
#include "kernels/clock.h"
#include "kernels/error.h"

/* A transfer's time: this, plus a second per BS_RATE bytes. */
#define BS_TIMEOUT_MS 30000L
#define BS_RATE ((uint64_t)256 * 1024)

struct bs_state {
	struct node *n;
	void (*then)(struct node *n);
	int64_t local_step;     /* -1: no checkpoint in the state dir */
	struct bs_claim *c;
	int nc, pending;
	int cap;                /* claims c and order have room for */
	/* the sources of the newest checkpoint, in the order asked */
	int *order;
	int norder, at, tries;
	int64_t want_step, want_round;
	char want_sha[65];
	char etag[65];          /* of the checkpoint fetched; "": none */
	char *ckpt;
	size_t ckpt_len;
	double began, fetch_began;
	/* the outcome, for the status */
	const char *outcome;    /* asking, fetching, installed, nobody,
				 * current, failed */
	char from[CF_HOST_LEN + 8];
	int64_t step, round;
	int refusals;
	double took;            /* seconds, once over */
	/* a host with no checkpoint asks again, BS_ASKS times in all,
	 * while some did not answer and none named a checkpoint: the
	 * others may be starting, or not have its new identity yet */
	uv_timer_t again;
	int asks;
};

int
bs_wanted(const node *n)
{
	int i;

	if (n->soma)
		return 0;
	for (i = 0; i < n->peers.n; i++)
		if (i != n->self && n->peers.v[i].block > 0)
			return 1;
	return 0;
}

/* Over: the trainer starts from what the state dir holds now. */
static void
finish(bs_state *b, const char *outcome)
{
	uv_close((uv_handle_t *)&b->again, NULL);
	b->outcome = outcome;
	b->took = kn_now() - b->began;
	free(b->ckpt);
	b->ckpt = NULL;
	if (!b->n->stopping)
		b->then(b->n);
}

static void
start_from_disk(bs_state *b, const char *outcome, const char *why)
{
	if (b->local_step >= 0)
		log_info("bootstrap: %s; training goes on from the state "
		    "directory's checkpoint of step %" PRId64, why,
		    b->local_step);
	else
		log_info("bootstrap: %s; training starts from step 0", why);
	finish(b, outcome);
}

/* The step of the checkpoint the state dir holds, or -1. */
static int64_t
local_step(const node *n)
{
	char path[PR_PATH_LEN + 32], *buf = NULL;
	pr_ckpt_meta meta;
	size_t len;
	int64_t step = -1;

	if (tr_model_path(path, sizeof(path), n->cfg.state_dir, BT_BLOCK,
	    n->cfg.block, "ckpt") != 0 || access(path, F_OK) != 0)
		return -1;
	if (pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &buf, &len, NULL) ==
	    0 && pr_ckpt_peek(buf, len, &meta, NULL) == 0)
		step = meta.step;
	else
		/* unreadable: the trainer says why, and falls back */
		step = 0;
	free(buf);
	return step;
}

static int
request(bs_state *b, const struct bs_claim *c, const char *path,
    long timeout_ms, size_t max_body, hc_done_fn done, void *ctx, char *err)
{
	node *n = b->n;
	int i = peers_find(&n->peers, c->addr);
	hc_request_opts o = { 0 };
	char url[2 * CF_HOST_LEN + 128];

	if (i < 0)
		return kn_error(err, KN_EINVAL, "%s is no longer listed",
		    c->addr);
	snprintf(url, sizeof(url), "%s://%s%s%sfrom=%s", hc_scheme(n->client),
	    c->addr, path, strchr(path, '?') ? "&" : "?", n->cfg.advertise);
	o.method = "GET";
	o.url = url;
	o.pin = n->peers.v[i].has_id ? n->peers.v[i].id : NULL;
	o.connect_timeout_ms = n->cfg.peer_timeout_ms;
	o.timeout_ms = timeout_ms;
	o.max_body_bytes = max_body;
	return hc_request(n->client, &o, done, ctx, err) != 0 ? KN_EIO : KN_OK;
}

static void
meter(bs_state *b, const char *addr, int kind, const hc_result *r)
{
	node_meter(b->n, peers_find(&b->n->peers, addr), kind, r->bytes_in,
	    r->bytes_out);
}

/* ---- fetching ---- */

static void fetch(bs_state *b);

static void
next_source(bs_state *b)
{
	b->at++;
	b->tries = 0;
	free(b->ckpt);
	b->ckpt = NULL;
	fetch(b);
}

/* The pair checked and installed on the pool. */
struct bs_job {
	uv_work_t work;
	bs_state *b;
	char *optim;
	size_t optim_len;
	mr_verdict v;
	int rc, refused;
	char err[PR_ERR_LEN];
};

static void
job_run(uv_work_t *w)
{
	struct bs_job *j = w->data;
	bs_state *b = j->b;
	const node *n = b->n;
	mr_pair p = { b->ckpt, b->ckpt_len, j->optim, j->optim_len };
	mr_claim claim = { b->want_step, b->want_round, "", "" };
	char path[PR_PATH_LEN + 32];

	memcpy(claim.sha, b->want_sha, sizeof(claim.sha));
	memcpy(claim.etag, b->etag, sizeof(claim.etag));
	if ((j->rc = mr_check_pair(&n->spec, n->run_id, n->cfg.block,
	    &claim, &p, &j->v, j->err)) != 0) {
		j->refused = 1;
		return;
	}
	if (mkdir(n->cfg.state_dir, 0755) != 0 && errno != EEXIST) {
		j->rc = kn_error(j->err, KN_EIO, "cannot create %s: %s",
		    n->cfg.state_dir, strerror(errno));
		return;
	}
	/* the state first, as the trainer writes them: a crash between
	 * leaves a state newer than the checkpoint, whose moments then
	 * start afresh; a state of another step is no longer ours */
	tr_model_path(path, sizeof(path), n->cfg.state_dir, BT_BLOCK,
	    n->cfg.block, "optim");
	if (j->v.optim_ok)
		j->rc = pr_ckpt_write_file(path, j->optim, j->optim_len, j->err);
	else
		unlink(path);
	if (j->rc != 0)
		return;
	tr_model_path(path, sizeof(path), n->cfg.state_dir, BT_BLOCK,
	    n->cfg.block, "ckpt");
	j->rc = pr_ckpt_write_file(path, b->ckpt, b->ckpt_len, j->err);
}

static void
job_done(uv_work_t *w, int status)
{
	struct bs_job *j = w->data;
	bs_state *b = j->b;
	node *n = b->n;
	const struct bs_claim *c = &b->c[b->order[b->at]];

	(void)status;
	free(j->optim);
	if (n->stopping) {
		free(j);
		finish(b, "failed");
		return;
	}
	if (j->refused) {
		char why[PR_ERR_LEN + 96];

		snprintf(why, sizeof(why), "the checkpoint of block %d step %"
		    PRId64 " it served is refused: %.200s", n->cfg.block,
		    b->want_step, j->err);
		log_warnx("bootstrap: %s: %s", c->addr, why);
		mr_refused(n, c->addr, why);
		b->refusals++;
		free(j);
		next_source(b);
		return;
	}
	if (j->rc != 0) {
		log_warnx("bootstrap: cannot install the checkpoint of step %"
		    PRId64 " from %s: %s", b->want_step, c->addr, j->err);
		free(j);
		start_from_disk(b, "failed", "nothing installed");
		return;
	}
	snprintf(b->from, sizeof(b->from), "%s", c->addr);
	b->step = j->v.got.step;
	b->round = j->v.got.round;
	log_info("bootstrap: installed the checkpoint of block %d step %"
	    PRId64 " round %" PRId64 " from %s%s (%zu bytes in %.1fs, sha256 "
	    "%.16s...)%s%s", n->cfg.block, b->step, b->round, c->addr,
	    c->mirror ? "'s mirror" : "", b->ckpt_len, kn_now() -
	    b->fetch_began, j->v.sha, j->v.optim_ok ? " with its optimizer "
	    "state" : "; without its optimizer state (the moments start "
	    "afresh): ", j->v.optim_ok ? "" : j->v.optim_why[0] ?
	    j->v.optim_why : "none served");
	node_journal(n, "bootstrap: installed step %" PRId64 " round %" PRId64
	    " from %s%s, sha256 %s", b->step, b->round, c->addr, c->mirror ?
	    " (mirror)" : "", j->v.sha);
	free(j);
	finish(b, "installed");
}

static void
on_optim(void *ctx, hc_result *r)
{
	bs_state *b = ctx;
	const struct bs_claim *c = &b->c[b->order[b->at]];
	struct bs_job *j;

	uv_timer_stop(&b->again);
	if (b->n->stopping) {
		finish(b, "failed");
		return;
	}
	meter(b, c->addr, PEERS_KIND_CHECKPOINT, r);
	if ((j = calloc(1, sizeof(*j))) == NULL) {
		start_from_disk(b, "failed", "out of memory");
		return;
	}
	j->b = b;
	j->work.data = j;
	if (r->error == NULL && r->status == 200) {
		j->optim_len = r->body_len;
		j->optim = hc_result_take_body(r);
	}
	if (uv_queue_work(b->n->loop, &j->work, job_run, job_done) != 0) {
		free(j->optim);
		free(j);
		start_from_disk(b, "failed", "cannot queue the check");
	}
}

static void
on_ckpt(void *ctx, hc_result *r)
{
	bs_state *b = ctx;
	node *n = b->n;
	const struct bs_claim *c = &b->c[b->order[b->at]];
	char path[96], err[KN_ERR_LEN];

	if (n->stopping) {
		finish(b, "failed");
		return;
	}
	meter(b, c->addr, PEERS_KIND_CHECKPOINT, r);
	if (r->error != NULL || r->status != 200) {
		uv_timer_stop(&b->again);
		log_warnx("bootstrap: the checkpoint from %s (try %d of %d): %s",
		    c->addr, b->tries, BS_TRIES, r->error ? r->error :
		    "its answer was not 200");
		if (b->tries < BS_TRIES)
			fetch(b);
		else
			next_source(b);
		return;
	}
	b->ckpt_len = r->body_len;
	b->ckpt = hc_result_take_body(r);
	/* a host may have trained on since it named its checkpoint */
	mr_etag(r->etag, b->etag);
	log_info("bootstrap: %zu bytes of checkpoint from %s in %.1fs; now its "
	    "optimizer state", b->ckpt_len, c->addr, kn_now() -
	    b->fetch_began);
	if (c->mirror)
		snprintf(path, sizeof(path), "/v1/mirrors/%d/optimizer",
		    n->cfg.block);
	else
		snprintf(path, sizeof(path), "/v1/blocks/%d/optimizer",
		    n->cfg.block);
	if (request(b, c, path, BS_TIMEOUT_MS + (long)(mr_copy_bytes(&n->spec,
	    n->cfg.block) / BS_RATE) * 1000, (size_t)mr_copy_bytes(&n->spec,
	    n->cfg.block), on_optim, b, err) != 0) {
		log_warnx("bootstrap: %s: %s", c->addr, err);
		next_source(b);
	}
}

/* While a transfer is under way (the timer idle between asks serves). */
static void
on_progress(uv_timer_t *t)
{
	bs_state *b = t->data;

	if (b->at < b->norder)
		log_info("bootstrap: still fetching the checkpoint of step %"
		    PRId64 " from %s: %.0fs so far (at most %" PRIu64 " bytes "
		    "and its optimizer state)", b->want_step,
		    b->c[b->order[b->at]].addr, kn_now() - b->fetch_began,
		    b->c[b->order[b->at]].bytes);
}

/* The next try at the source in hand, or the next source. */
static void
fetch(bs_state *b)
{
	node *n = b->n;
	const struct bs_claim *c;
	char path[96], err[KN_ERR_LEN];
	uint64_t most = mr_copy_bytes(&n->spec, n->cfg.block);

	for (;;) {
		if (b->at >= b->norder) {
			char why[160];

			snprintf(why, sizeof(why), "no source served a checkpoint "
			    "of step %" PRId64 " that checks out (%d refused)",
			    b->want_step, b->refusals);
			start_from_disk(b, "failed", why);
			return;
		}
		c = &b->c[b->order[b->at]];
		b->tries++;
		if (b->tries == 1)
			log_info("bootstrap: fetching the checkpoint of block %d "
			    "step %" PRId64 " round %" PRId64 " (%" PRIu64
			    " bytes) from %s%s", n->cfg.block, b->want_step,
			    b->want_round, c->bytes, c->addr, c->mirror ?
			    "'s mirror" : "");
		if (c->mirror)
			snprintf(path, sizeof(path), "/v1/mirrors/%d/checkpoint",
			    n->cfg.block);
		else
			snprintf(path, sizeof(path), "/v1/blocks/%d/checkpoint",
			    n->cfg.block);
		b->fetch_began = kn_now();
		b->outcome = "fetching";
		b->etag[0] = '\0';
		if (request(b, c, path, BS_TIMEOUT_MS + (long)(most / BS_RATE) *
		    1000, (size_t)most, on_ckpt, b, err) == 0) {
			/* a large pair over a slow link: a line now and then */
			uv_timer_start(&b->again, on_progress,
			    BS_PROGRESS_S * 1000, BS_PROGRESS_S * 1000);
			return;
		}
		log_warnx("bootstrap: %s: %s", c->addr, err);
		b->at++;
		b->tries = 0;
	}
}

/* ---- asking ---- */

static void on_again(uv_timer_t *t);

int
bs_choose(const struct bs_claim *c, int n, int64_t floor, int64_t steps,
    int *order)
{
	int i, k, best = -1, votes, top = 0, count = 0;

	for (i = 0; i < n; i++) {
		if (!c[i].valid || c[i].step <= floor || c[i].step > steps)
			continue;
		if (best < 0 || c[i].step > c[best].step || (c[i].step ==
		    c[best].step && c[i].round > c[best].round))
			best = i;
	}
	if (best < 0)
		return 0;
	/* the hash most sources of that step name; a tie goes to the one a
	 * host of the block names, then to the first in the list */
	for (i = 0, k = best; i < n; i++) {
		int j;

		if (!c[i].valid || c[i].step != c[k].step || c[i].round !=
		    c[k].round)
			continue;
		for (j = 0, votes = 0; j < n; j++)
			votes += c[j].valid && c[j].step == c[i].step &&
			    c[j].round == c[i].round &&
			    strcmp(c[j].sha, c[i].sha) == 0;
		if (votes > top || (votes == top && !c[i].mirror &&
		    c[best].mirror)) {
			top = votes;
			best = i;
		}
	}
	for (k = 0; k < 2; k++)
		for (i = 0; i < n; i++)
			if (c[i].valid && c[i].mirror == k && c[i].step ==
			    c[best].step && c[i].round == c[best].round &&
			    strcmp(c[i].sha, c[best].sha) == 0)
				order[count++] = i;
	return count;
}

/* The newest checkpoint named, and its sources (bs_choose); or the
 * trainer starts from the state directory, or nobody answered a host
 * with nothing and it asks again. */
static void
decide(bs_state *b)
{
	node *n = b->n;
	int i, answered = 0, waiting;
	int64_t floor = b->local_step > 0 ? b->local_step : 0;
	const struct bs_claim *w;

	for (i = 0; i < b->nc; i++)
		answered += b->c[i].answered;
	b->norder = answered > 0 ? bs_choose(b->c, b->nc, floor,
	    n->spec.steps, b->order) : 0;
	for (i = 0, waiting = 0; i < b->nc; i++)
		waiting += b->c[i].not_counted;
	/* a host of ours that has not taken us into its rounds yet will
	 * start them from the checkpoint of its next round boundary: that
	 * one, not the one it holds now, is where our rounds begin */
	if (waiting > 0 && b->asks < BS_ASKS) {
		log_info("bootstrap: %d host(s) of block %d do not count this "
		    "host among the block's replicas yet (ask %d of %d); "
		    "asking again in %d s", waiting, n->cfg.block, b->asks,
		    BS_ASKS, b->asks);
		uv_timer_start(&b->again, on_again, (uint64_t)b->asks * 1000, 0);
		return;
	}
	/* a host with nothing asks again while some did not answer and
	 * nobody named a checkpoint: a new host is started with the new
	 * list, and the others let its identity in only once they have
	 * taken the list too (SIGHUP) */
	if (b->norder == 0 && answered < b->nc && b->local_step < 0 &&
	    b->asks < BS_ASKS) {
		log_info("bootstrap: %d of the %d other hosts answered, none "
		    "with a checkpoint of block %d (ask %d of %d); asking "
		    "again in %d s", answered, b->nc, n->cfg.block, b->asks,
		    BS_ASKS, b->asks);
		uv_timer_start(&b->again, on_again, (uint64_t)b->asks * 1000, 0);
		return;
	}
	if (answered == 0) {
		char why[128];

		snprintf(why, sizeof(why), "none of the %d other hosts "
		    "answered", b->nc);
		start_from_disk(b, "nobody", why);
		return;
	}
	if (b->norder == 0) {
		char why[160];

		snprintf(why, sizeof(why), "%d of %d other hosts answered, none "
		    "with a checkpoint of block %d newer than step %" PRId64,
		    answered, b->nc, n->cfg.block, floor);
		start_from_disk(b, "current", why);
		return;
	}
	w = &b->c[b->order[0]];
	b->want_step = w->step;
	b->want_round = w->round;
	memcpy(b->want_sha, w->sha, sizeof(b->want_sha));
	for (i = 0; i < b->nc; i++)
		if (b->c[i].valid && b->c[i].step == b->want_step &&
		    b->c[i].round == b->want_round &&
		    strcmp(b->c[i].sha, b->want_sha) != 0)
			log_warnx("bootstrap: %s names another checkpoint of "
			    "step %" PRId64 " (sha256 %.16s...) than the %d "
			    "that name %.16s...: not asked", b->c[i].addr,
			    b->want_step, b->c[i].sha, b->norder, b->want_sha);
	fetch(b);
}

/* Whether a host of our block, by its status root, counts us among the
 * block's replicas in the rounds it runs.  A status with no roster (a
 * run without rounds) counts everyone. */
static int
counts_us(const node *n, json_t *root)
{
	json_t *v = json_object_get(json_object_get(root, "roster"),
	    "replicas"), *e;
	size_t k;

	if (!json_is_array(v) || json_array_size(v) == 0)
		return 1;
	json_array_foreach(v, k, e)
		if (json_is_string(e) && strcmp(json_string_value(e),
		    n->peers.v[n->self].addr) == 0)
			return 1;
	return 0;
}

static void
on_claim(void *ctx, hc_result *r)
{
	void **pair = ctx;
	bs_state *b = pair[0];
	struct bs_claim *c = pair[1];
	json_t *root = NULL, *ck;
	const char *sha;

	free(pair);
	b->pending--;
	if (b->n->stopping) {
		if (b->pending == 0)
			finish(b, "failed");
		return;
	}
	meter(b, c->addr, PEERS_KIND_OTHER, r);
	if (r->error == NULL && r->status != 0)
		c->answered = 1;
	if (r->error == NULL && r->status == 200)
		root = json_loadb(r->body, r->body_len, 0, NULL);
	if (root != NULL) {
		if (!c->mirror && strcmp(json_string_value(json_object_get(root,
		    "run_id")) ? json_string_value(json_object_get(root,
		    "run_id")) : "", b->n->run_id) != 0)
			ck = NULL;      /* another run's: nothing of ours */
		else
			ck = c->mirror ? root : json_object_get(root,
			    "checkpoint");
		sha = json_string_value(json_object_get(ck, "sha256"));
		json_t *bytes = json_object_get(ck, "bytes");

		/* a step or round no run of ours has is no claim; the size
		 * is for the log, beyond a copy's it is not believed */
		if (ck != NULL && mr_sha_ok(sha) && mr_claim_in_run(&b->n->spec,
		    json_object_get(ck, "step"), json_object_get(ck, "round"),
		    &c->step, &c->round)) {
			c->valid = 1;
			c->bytes = json_is_integer(bytes) &&
			    json_integer_value(bytes) >= 0 &&
			    (uint64_t)json_integer_value(bytes) <=
			    mr_copy_bytes(&b->n->spec, b->n->cfg.block) ?
			    (uint64_t)json_integer_value(bytes) : 0;
			memcpy(c->sha, sha, 65);
			log_info("bootstrap: %s%s holds step %" PRId64 " round %"
			    PRId64 " (sha256 %.16s...)", c->addr, c->mirror ?
			    "'s mirror" : "", c->step, c->round, c->sha);
			if (!c->mirror && !counts_us(b->n, root) &&
			    b->asks < BS_ASKS) {
				c->valid = 0;
				c->not_counted = 1;
				log_info("bootstrap: %s does not count this host "
				    "among block %d's replicas yet: it takes the "
				    "new list at its next round boundary", c->addr,
				    b->n->cfg.block);
			}
		}
		json_decref(root);
	}
	if (b->pending == 0)
		decide(b);
}

/* One round of asking every other daemon line. */
static void
ask(bs_state *b)
{
	node *n = b->n;
	char path[96], err[KN_ERR_LEN];
	int i;

	/* a SIGHUP while we wait to ask again may have lengthened the peer
	 * list; no claim is in flight here (ask runs with none pending) */
	if (n->peers.n + 1 > b->cap) {
		struct bs_claim *c = realloc(b->c, ((size_t)n->peers.n + 1) *
		    sizeof(*c));
		int *order = c == NULL ? NULL : realloc(b->order,
		    ((size_t)n->peers.n + 1) * sizeof(int));

		if (c != NULL)
			b->c = c;
		if (order == NULL) {
			log_warnx("bootstrap: out of memory");
			finish(b, "failed");
			return;
		}
		b->order = order;
		b->cap = n->peers.n + 1;
	}
	b->asks++;
	b->nc = 0;
	memset(b->c, 0, (size_t)b->cap * sizeof(*b->c));
	for (i = 0; i < n->peers.n; i++) {
		const peers_entry *p = &n->peers.v[i];
		struct bs_claim *c = &b->c[b->nc];
		void **pair;

		if (i == n->self || p->block <= 0)
			continue;
		snprintf(c->addr, sizeof(c->addr), "%s", p->addr);
		c->mirror = p->block != n->cfg.block;
		if (c->mirror)
			snprintf(path, sizeof(path), "/v1/mirrors/%d",
			    n->cfg.block);
		else
			snprintf(path, sizeof(path), "/v1/status");
		b->nc++;
		if ((pair = malloc(2 * sizeof(void *))) == NULL)
			continue;
		pair[0] = b;
		pair[1] = c;
		if (request(b, c, path, n->cfg.peer_timeout_ms, 1 << 20,
		    on_claim, pair, err) != 0) {
			free(pair);
			continue;
		}
		b->pending++;
	}
	if (b->asks == 1)
		log_info("bootstrap: asking %d other host(s) for the newest "
		    "checkpoint of block %d (the state directory holds %s)",
		    b->pending, n->cfg.block, b->local_step >= 0 ? "one" :
		    "none");
	if (b->pending == 0)
		decide(b);
}

static void
on_again(uv_timer_t *t)
{
	bs_state *b = t->data;

	if (b->n->stopping)
		finish(b, "failed");
	else
		ask(b);
}

int
bs_start(node *n, void (*then)(node *n), char *err)
{
	bs_state *b;

	if ((b = calloc(1, sizeof(*b))) == NULL ||
	    (b->c = calloc((size_t)n->peers.n + 1, sizeof(*b->c))) == NULL ||
	    (b->order = calloc((size_t)n->peers.n + 1, sizeof(int))) ==
	    NULL) {
		if (b != NULL)
			free(b->c);
		free(b);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	n->bootstrap = b;
	b->cap = n->peers.n + 1;
	b->n = n;
	b->then = then;
	b->began = kn_now();
	b->outcome = "asking";
	b->local_step = local_step(n);
	uv_timer_init(n->loop, &b->again);
	b->again.data = b;
	n->report.state = "bootstrapping";
	if (b->local_step >= n->spec.steps) {
		finish(b, "current");
		return KN_OK;
	}
	ask(b);
	return KN_OK;
}

void
bs_free(bs_state *b)
{
	if (b == NULL)
		return;
	free(b->ckpt);
	free(b->c);
	free(b->order);
	free(b);
}

json_t *
bs_status_json(const bs_state *b)
{
	json_t *o;

	if (b == NULL)
		return NULL;
	o = json_pack("{s:s,s:I,s:i}", "outcome", b->outcome, "local_step",
	    (json_int_t)b->local_step, "refused", b->refusals);
	if (o != NULL && strcmp(b->outcome, "installed") == 0) {
		json_object_set_new(o, "from", json_string(b->from));
		json_object_set_new(o, "step", json_integer(b->step));
		json_object_set_new(o, "round", json_integer(b->round));
	}
	if (o != NULL && b->took > 0)
		json_object_set_new(o, "seconds", json_real(b->took));
	return o;
}
