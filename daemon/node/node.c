/* The training daemon's runtime: its state, the trainer thread's
 * events, the signals, the housekeeping timer and the journal of rounds.
 * blocktraind.c starts it; api.c answers HTTP from it; rounds.c averages
 * with the other replicas, peer_watch.c follows the peers' health and
 * probe.c answers the probes, each through the small context given
 * here. */
#include "config.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/node/api.h"
#include "daemon/core/log.h"
#include "daemon/node/node.h"
#include "daemon/node/roster.h"
#include "daemon/node/predicted.h"
#include "daemon/node/probe.h"
#include "kernels/clock.h"
#include "kernels/error.h"

#define CRON_MS 1000

void
node_meter(node *n, int peer, int kind, uint64_t in, uint64_t out)
{
	if (kind < 0 || kind >= PEERS_KINDS)
		kind = PEERS_KIND_OTHER;
	if (peer >= 0 && peer < n->peers.n) {
		n->peers.v[peer].bytes_in[kind] += in;
		n->peers.v[peer].bytes_out[kind] += out;
	} else {
		n->report.client_in[kind] += in;
		n->report.client_out[kind] += out;
	}
}

void
node_journal(node *n, const char *fmt, ...)
{
	char path[PR_PATH_LEN + 16], when[32];
	time_t t = time(NULL);
	struct tm tm;
	va_list ap;
	FILE *f;

	snprintf(path, sizeof(path), "%s/journal", n->cfg.state_dir);
	if ((f = fopen(path, "a")) == NULL) {
		log_warn("journal %s", path);
		return;
	}
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(f, "%s ", when);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

/* node_journal for the modules handed a callback (rounds, node_soma). */
static void
node_journal_line(void *arg, const char *line)
{
	node_journal(arg, "%s", line);
}

/* Housekeeping, one home for periodic work (redis serverCron): peers,
 * then rounds. */
static void
on_cron(uv_timer_t *t)
{
	node *n = t->data;

	if (n->stopping)
		return;
	node_trust_cut_quarantined(n);
	pw_poll(&n->watch);
	if (n->training.rounds != NULL)
		rounds_cron(n->training.rounds);
}

static void
install_checkpoint(node *n, wk_event *ev)
{
	hs_shared *b = hs_shared_new(ev->buf, ev->len);

	ev->buf = NULL;
	if (b == NULL) {
		log_warnx("out of memory keeping the checkpoint of step %" PRId64
		    ": still serving the one before", ev->step);
		return;
	}
	hs_shared_unref(n->ckpt.body);
	n->ckpt.body = b;
	n->ckpt.data = hs_shared_data(b);
	n->ckpt.len = ev->len;
	memcpy(n->ckpt.etag, ev->etag, sizeof(n->ckpt.etag));
	n->ckpt.step = ev->step;
	n->ckpt.round = ev->round;
	n->report.round = ev->round;
	if (n->training.rounds != NULL)
		rounds_on_checkpoint(n->training.rounds, n->ckpt.step,
		    n->ckpt.round, n->ckpt.etag);
}

static void shutdown_node(node *n);

/* The trainer thread has ended with an error: the daemon goes down. */
static void
on_worker_error(node *n, const char *msg)
{
	snprintf(n->report.error, sizeof(n->report.error), "%s", msg);
	log_warnx("%s", msg);
	n->report.state = "error";
	n->training.worker_done = 1;
	n->exit_code = 1;
	shutdown_node(n);
}

/* This replica goes on past the last step of its round now. */
static void
note_round_time(node *n)
{
	if (n->report.train_began <= 0)
		return;
	n->report.round_times[n->report.round_times_n % NODE_ROUND_TIMES] =
	    kn_now() - n->report.train_began;
	n->report.round_times_n++;
}

static void
on_round_ready(node *n, wk_event *ev)
{
	/* progress is sent at most every 0.2 s: the step the round waits
	 * at is this one */
	n->report.step = ev->step;
	n->training.in_round = n->training.rounds != NULL;
	/* overlapped, the trainer goes on while the round is out */
	if (!n->overlap)
		n->report.state = "round";
	if (n->training.rounds == NULL || n->overlap)
		note_round_time(n);
	if (n->training.rounds == NULL) {
		/* one replica: nothing to average, keep the local weights */
		wk_commit_none(n->training.worker, ev->round);
		n->report.state = "training";
		return;
	}
	if (n->predicted != NULL)
		pd_on_round(n->predicted, kn_now(), &n->peers);
	rounds_on_update(n->training.rounds, ev->round, ev->step, ev->delta,
	    ev->count);
}

/* The trainer rolled back to the last good checkpoint instead of going
 * down: counted and named (status, log, journal).  ev->round is the last
 * round whose outcome the weights held, the suspect: the rounds code
 * leaves out of its next averages what it can tie to that round. */
static void
on_rolled_back(node *n, const wk_event *ev)
{
	n->report.rollbacks++;
	n->report.rolled_back_step = ev->step;
	n->report.rolled_back_round = ev->round;
	snprintf(n->report.error, sizeof(n->report.error), "step %lld: %.200s",
	    (long long)ev->step, ev->msg);
	log_warnx("step %lld: %s (step %lld, round %lld); training goes on",
	    (long long)ev->step, ev->msg, (long long)ev->ckpt_step,
	    (long long)ev->ckpt_round);
	node_journal(n, "rolled back at step %lld after round %lld to the "
	    "checkpoint of step %lld round %lld: %s", (long long)ev->step,
	    (long long)ev->round, (long long)ev->ckpt_step,
	    (long long)ev->ckpt_round, ev->msg);
	if (n->training.on_rollback != NULL)
		n->training.on_rollback(n, ev->round, ev->step);
}

static void node_refused(node *n, int peer, int kind, const char *why);

/* A trainer event of a SOMA expert that differs from BlockTrain's: the
 * report is ours, the expert's part and what it says node_soma.c's.  1
 * when handled; a WK_DONE while stopping goes on to the common path. */
static int
on_soma_event(node *n, wk_event *ev)
{
	switch (ev->kind) {
	case WK_STARTED:
		n->report.step = ev->step;
		n->report.state = "training";
		break;
	case WK_PROGRESS:
		n->report.step = ev->step;
		n->report.loss = ev->loss;
		n->report.positions_per_s = ev->positions_per_s;
		break;
	case WK_DONE:
		n->report.state = "done";
		n->training.worker_done = 1;
		break;
	default:
		break;
	}
	if (!node_soma_event(&n->soma_expert, n, ev))
		return 0;
	return ev->kind != WK_DONE || !n->stopping;
}

static void
on_event(void *ctx, wk_event *ev)
{
	node *n = ctx;

	if (ev->kind == WK_STARTED && n->report.train_began == 0)
		n->report.train_began = kn_now();
	else if (ev->kind == WK_DONE && n->report.train_ended == 0)
		n->report.train_ended = kn_now();
	if (n->soma && on_soma_event(n, ev)) {
		wk_event_free(ev);
		return;
	}
	switch (ev->kind) {
	case WK_STARTED:
		install_checkpoint(n, ev);
		n->report.step = ev->step;
		if (n->predicted != NULL)
			pd_on_step(n->predicted, kn_now(), ev->step);
		n->report.state = n->report.step >= n->spec.steps ? "done" :
		    "training";
		log_info("block %d replica %d/%d: training from step %lld "
		    "(round %lld) of %d", n->cfg.block, n->replica, n->replicas,
		    (long long)ev->step, (long long)ev->round, n->spec.steps);
		node_journal(n, "start step %lld round %lld checkpoint %s",
		    (long long)ev->step, (long long)ev->round, n->ckpt.etag);
		break;
	case WK_PROGRESS:
		n->report.step = ev->step;
		n->report.loss = ev->loss;
		n->report.positions_per_s = ev->positions_per_s;
		n->report.overlapped = ev->overlapped;
		if (n->predicted != NULL)
			pd_on_step(n->predicted, kn_now(), ev->step);
		/* a replica alone: the worker reports every H steps (a
		 * replicated block's rounds are timed as they commit) */
		if (n->replicas <= 1 && n->spec.local_steps > 0 &&
		    ev->step > 0 && ev->step % n->spec.local_steps == 0)
			note_round_time(n);
		break;
	case WK_SHARE:
		n->report.share = ev->share;
		n->report.share_step = ev->step;
		n->report.have_share = 1;
		log_info("step %lld: held-out share %.4f nats/byte",
		    (long long)ev->step, ev->share);
		break;
	case WK_CHECKPOINT:
		if (n->training.rounds != NULL && ev->round != n->ckpt.round)
			node_journal(n, "round %lld done: step %lld checkpoint %s",
			    (long long)ev->round - 1, (long long)ev->step, ev->etag);
		install_checkpoint(n, ev);
		log_debug("checkpoint at step %lld, round %lld, %zu bytes, "
		    "sha256 %.16s...", (long long)ev->step, (long long)ev->round,
		    n->ckpt.len, n->ckpt.etag);
		break;
	case WK_ROUND_READY:
		on_round_ready(n, ev);
		break;
	case WK_CHECKED:
		log_info("%s", ev->msg);
		break;
	case WK_REFUSED:
		node_refused(n, ev->peer, (int)ev->refusal, ev->msg);
		break;
	case WK_DONE:
		n->report.state = "done";
		n->training.worker_done = 1;
		if (n->stopping)
			shutdown_node(n);
		log_info("all %d steps trained; serving the checkpoint",
		    n->spec.steps);
		break;
	case WK_STOPPED:
		if (node_roster_stopped(n)) {
			log_info("stopped at step %lld, the round boundary, for "
			    "the new roster", (long long)n->ckpt.step);
			break;
		}
		log_info("stopped at step %lld with a checkpoint",
		    (long long)n->ckpt.step);
		if (n->training.leaving)
			log_info("left the run: this host is no longer in the "
			    "peer list");
		shutdown_node(n);
		break;
	case WK_PAUSED:
		/* the checkpoint served stays; the WK_WARNING says why */
		if (!n->stopping)
			n->report.state = "paused";
		n->report.step = ev->step;
		break;
	case WK_RESUMED:
		if (!n->stopping)
			n->report.state = "training";
		n->report.error[0] = '\0';
		log_info("%s", ev->msg);
		break;
	case WK_WARNING:
		/* the thread goes on: reported, not fatal */
		snprintf(n->report.error, sizeof(n->report.error), "%s",
		    ev->msg);
		log_warnx("%s", ev->msg);
		break;
	case WK_ERROR:
		on_worker_error(n, ev->msg);
		break;
	case WK_ROLLED_BACK:
		on_rolled_back(n, ev);
		break;
	case WK_HELDOUT:
		/* a SOMA expert's, node_soma.c's */
		break;
	}
	wk_event_free(ev);
}

static void
on_closed_handle(uv_handle_t *h)
{
	(void)h;
}

/* Closes every handle; uv_run returns once they are gone. */
static void
shutdown_node(node *n)
{
	if (n->stopping == 2)
		return;
	n->stopping = 2;
	uv_timer_stop(&n->cron);
	uv_close((uv_handle_t *)&n->cron, on_closed_handle);
	uv_close((uv_handle_t *)&n->sigterm, on_closed_handle);
	uv_close((uv_handle_t *)&n->sigint, on_closed_handle);
	uv_close((uv_handle_t *)&n->sighup, on_closed_handle);
	/* first: a compute probe holds the trainer until it is done */
	pb_close(n->probe);
	if (n->training.worker != NULL) {
		wk_close(n->training.worker, NULL, NULL);
		n->training.worker = NULL;
	}
	rounds_free(n->training.rounds);
	n->training.rounds = NULL;
	hs_server_close(n->http, NULL, NULL);
	if (n->metrics != NULL)
		hs_server_close(n->metrics, NULL, NULL);
	hc_client_close(n->client, NULL, NULL);
}

void
node__fail(node *n, const char *msg)
{
	on_worker_error(n, msg);
}

void
node__stop(node *n)
{
	n->stopping = 1;
	n->report.state = "stopping";
	shutdown_node(n);
}

static void
on_stop_signal(uv_signal_t *h, int sig)
{
	node *n = h->data;

	if (n->stopping) {
		log_warnx("second signal: stopping now");
		shutdown_node(n);
		return;
	}
	log_info("%s: stopping at the next step boundary",
	    sig == SIGTERM ? "SIGTERM" : "SIGINT");
	n->stopping = 1;
	n->report.state = "stopping";
	if (n->training.worker != NULL && !n->training.worker_done)
		wk_stop(n->training.worker);
	else
		shutdown_node(n);
}

/* Whether a freshly read peer list can replace ours: our own line and
 * block must stay (a daemon cannot change block); the replicas of our
 * block may change (roster.c).  i is our line in it. */
static int
peers_acceptable(node *n, const peers_list *fresh, int *i)
{
	*i = peers_find(fresh, n->peers.v[n->self].addr);
	if (n->soma) {
		if (*i >= 0 && fresh->v[*i].expert == node_soma_of(n)->expert)
			return 1;
		log_warnx("SIGHUP: the new peer list lacks %s training expert "
		    "%d; keeping the old one", n->peers.v[n->self].addr,
		    node_soma_of(n)->expert);
		return 0;
	}
	return node_roster_hup(n, fresh, *i) == NODE_ROSTER_TAKE;
}

/* Whether a list names the same daemons and operators as ours: a SIGHUP
 * that leaves the list as it was is the operator's clear of strikes. */
static int
same_identities(const peers_list *a, const peers_list *b)
{
	int i;

	if (a->n != b->n || a->nclients != b->nclients)
		return 0;
	for (i = 0; i < a->n; i++)
		if (peers_find(b, a->v[i].addr) < 0 ||
		    strcmp(a->v[i].id_text, b->v[peers_find(b,
		    a->v[i].addr)].id_text) != 0)
			return 0;
	for (i = 0; i < a->nclients; i++)
		if (peers_client_find(b, a->clients[i].id) < 0)
			return 0;
	return 1;
}

static void
on_hup(uv_signal_t *h, int sig)
{
	node *n = h->data;
	peers_list fresh;
	char err[PR_ERR_LEN];
	int i, j;

	(void)sig;
	if (peers_load(&fresh, n->cfg.peers, err) != 0) {
		log_warnx("SIGHUP: keeping the old peer list: %s", err);
		return;
	}
	if (same_identities(&n->peers, &fresh)) {
		log_info("SIGHUP with the peer list's identities unchanged: "
		    "the operator's clear of strikes");
		strikes_clear(node_trust_strikes(n));
	}
	if (!peers_acceptable(n, &fresh, &i)) {
		peers_free(&fresh);
		return;
	}
	if (node_trust_check(n, &fresh, i, err) != 0) {
		log_warnx("SIGHUP: keeping the old peer list: %s", err);
		peers_free(&fresh);
		return;
	}
	/* keep what we know of peers that stay */
	for (j = 0; j < fresh.n; j++) {
		int old = peers_find(&n->peers, fresh.v[j].addr);

		if (old >= 0) {
			/* health, metering and a probe in flight (found again
			 * by address when it completes) carry over */
			peers_entry keep = n->peers.v[old];

			keep.block = fresh.v[j].block;
			keep.has_id = fresh.v[j].has_id;
			memcpy(keep.id, fresh.v[j].id, sizeof(keep.id));
			memcpy(keep.id_text, fresh.v[j].id_text,
			    sizeof(keep.id_text));
			fresh.v[j] = keep;
		}
		fresh.v[j].self = j == i;
	}
	peers_free(&n->peers);
	n->peers = fresh;
	n->self = i;
	if (n->training.rounds != NULL)
		rounds_remap(n->training.rounds);
	log_info("SIGHUP: peer list reloaded, %d peers, %d clients",
	    n->peers.n, n->peers.nclients);
	node_trust_reloaded(n);
	node_roster_changed(n);
}

/* plan = FILE: the predictions for our block, refused at start when
 * they are for another run or placement. */
static int
setup_plan(node *n, char *err)
{
	pd_self self = {
		.run_id = n->run_id,
		.block = n->cfg.block,
		.replica = n->replica,
		.replicas = n->replicas,
		.steps = n->spec.steps,
		.local_steps = n->spec.local_steps,
		.step_positions = (double)n->spec.batch * n->spec.window,
	};

	if (n->cfg.plan[0] == '\0')
		return KN_OK;
	if (n->soma)
		return kn_error(err, KN_EINVAL, "plan = %.200s: plans are for "
		    "BlockTrain runs, this spec is method = soma", n->cfg.plan);
	return pd_load(&n->predicted, n->cfg.plan, &self, err);
}

int
node_setup(node *n, char *err)
{
	char *buf;
	size_t len;
	int rc, port;

	if ((rc = pr_spec_load(&n->spec, n->cfg.spec, err)) != 0 ||
	    (rc = pr_spec_run_id(&n->spec, n->run_id, err)) != 0 ||
	    (rc = pr_spec_encode(&n->spec, &buf, &len, err)) != 0)
		return rc;
	n->spec_body = buf;
	n->spec_len = len;
	n->soma = pr_spec_method(&n->spec) == PR_METHOD_SOMA;
	if (!n->soma && n->cfg.block > n->spec.blocks)
		return kn_error(err, KN_EINVAL, "block %d does not exist: the "
		    "spec has %d blocks", n->cfg.block, n->spec.blocks);
	if ((rc = peers_load(&n->peers, n->cfg.peers, err)) != 0)
		return rc;
	if (n->cfg.advertise[0] == '\0')
		snprintf(n->cfg.advertise, sizeof(n->cfg.advertise), "%s:%d",
		    n->cfg.listen_host, n->cfg.listen_port);
	n->self = peers_find(&n->peers, n->cfg.advertise);
	if (n->self < 0)
		return kn_error(err, KN_EINVAL, "%s is not in the peer list %s "
		    "(set 'advertise' to the address peers know this host by)",
		    n->cfg.advertise, n->cfg.peers);
	if (!n->soma && n->peers.experts)
		return kn_error(err, KN_EINVAL, "%.150s:%d: an expert line, but "
		    "the spec is method = blocktrain: a line names its block",
		    n->cfg.peers, n->peers.v[n->self].line);
	if (!n->soma && n->peers.v[n->self].block != n->cfg.block)
		return kn_error(err, KN_EINVAL, "the peer list says %s serves "
		    "block %d, the configuration says block %d",
		    n->cfg.advertise, n->peers.v[n->self].block, n->cfg.block);
	if ((rc = node_trust_setup(n, err)) != 0)
		return rc;
	n->peers.v[n->self].self = 1;
	if (n->soma) {
		if ((rc = node_soma_setup(&n->soma_expert, n,
		    node_journal_line, n, err)) != 0)
			return rc;
		n->replica = 0;
		n->replicas = 1;
	} else {
		n->replica = peers_replica_index(&n->peers, n->self);
		n->replicas = peers_replicas(&n->peers, n->cfg.block);
	}
	if (n->replicas > 1 && n->spec.steps % n->spec.local_steps != 0)
		return kn_error(err, KN_EINVAL, "[optim] steps (%d) must be a "
		    "multiple of [sync] local_steps (%d) when a block has "
		    "replicas, or the last steps would not be averaged",
		    n->spec.steps, n->spec.local_steps);
	n->overlap = n->replicas > 1 &&
	    strcmp(n->cfg.overlap_rounds, "yes") == 0;
	if (cf_parse_hostport(n->cfg.advertise, (char[CF_HOST_LEN]){ 0 },
	    CF_HOST_LEN, &port) != 0)
		return kn_error(err, KN_EINVAL, "advertise: not host:port");
	return setup_plan(n, err);
}

/* A peer's update, checkpoint or claim was refused (by the rounds, or
 * by the trainer's check): named in the log and the journal of rounds,
 * and counted against it (strikes.h), which past the threshold
 * quarantines it. */
_Static_assert(ROUNDS_REFUSED_UPDATE == (int)STRIKES_UPDATE &&
    ROUNDS_REFUSED_CHECKPOINT == (int)STRIKES_CHECKPOINT &&
    ROUNDS_REFUSED_CLAIM == (int)STRIKES_CLAIM &&
    WK_REFUSED_UPDATE == (int)STRIKES_UPDATE &&
    WK_REFUSED_CHECKPOINT == (int)STRIKES_CHECKPOINT &&
    WK_REFUSED_CLAIM == (int)STRIKES_CLAIM,
    "refusal kinds follow the strikes' kinds");

static void
node_refused(node *n, int peer, int kind, const char *why)
{
	const peers_entry *p;

	if (peer == n->self) {
		/* our own update, left out by our own check as by the others' */
		log_warnx("%s (our own update)", why);
		return;
	}
	if (peer < 0 || peer >= n->peers.n || kind < 0 ||
	    kind >= STRIKES_KINDS) {
		log_warnx("refused: %s", why);
		return;
	}
	p = &n->peers.v[peer];
	node_journal(n, "refused %s kind %d: %s", p->addr, kind, why);
	if (!p->has_id) {
		/* insecure = yes: no identity to count against */
		log_warnx("refused from peer %s: %s", p->addr, why);
		return;
	}
	/* strikes logs it, with the count and a quarantine */
	strikes_note(node_trust_strikes(n), p->id_text, (strikes_kind)kind,
	    why);
}

/* The rounds' view of the node. */
static double
node_rounds_now(void *arg)
{
	(void)arg;
	return kn_now();
}

static void
node_rounds_meter(void *arg, int peer, int kind, uint64_t in, uint64_t out)
{
	node_meter(arg, peer, kind, in, out);
}

static void
node_rounds_refused(void *arg, int peer, int kind, const char *why)
{
	node_refused(arg, peer, kind, why);
}

static int
node_rounds_quarantined(void *arg, int peer)
{
	node *n = arg;

	return peer >= 0 && peer < n->peers.n && n->peers.v[peer].has_id &&
	    strikes_quarantined(node_trust_strikes(n),
	    n->peers.v[peer].id_text);
}

static void
node_rounds_commit(void *arg, rounds_outcome *ro)
{
	node *n = arg;
	wk_outcome o = { 0 };
	int i;

	o.round = ro->round;
	o.count = ro->count;
	for (i = 0; i < ro->count && i < WK_MAX_MEMBERS; i++) {
		o.update[i] = ro->update[i];
		o.replica[i] = ro->replica[i];
		o.peer[i] = ro->peer[i];
	}
	o.outer_lr = ro->outer_lr;
	o.ckpt = ro->ckpt;
	o.len = ro->len;
	o.ckpt_replica = ro->ckpt_replica;
	o.ckpt_peer = ro->ckpt_peer;
	for (i = 0; i < ro->extras && i < WK_MAX_MEMBERS; i++) {
		o.extra[i] = ro->extra[i];
		o.extra_replica[i] = ro->extra_replica[i];
		o.extra_peer[i] = ro->extra_peer[i];
	}
	o.extras = i;
	if (n->training.worker != NULL)
		wk_commit_round(n->training.worker, &o);
	else {
		for (i = 0; i < o.count; i++)
			free(o.update[i]);
		for (i = 0; i < o.extras; i++)
			free(o.extra[i]);
		free(o.ckpt);
	}
	if (!n->overlap)
		note_round_time(n);
	n->report.state = "training";
	n->training.in_round = 0;
}

int
node__start_rounds(node *n, char *err)
{
	rounds_config rc = {
		.loop = n->loop,
		.client = n->client,
		.peers = &n->peers,
		.block = n->cfg.block,
		.replica = n->replica,
		.replicas = n->replicas,
		.run_id = n->run_id,
		.advertise = n->cfg.advertise,
		.round_deadline = n->spec.round_deadline,
		.outer_lr = n->spec.outer_lr,
		.peer_timeout_ms = n->cfg.peer_timeout_ms,
		.streams = n->cfg.update_streams,
		.chunk = n->cfg.update_chunk,
		.max_assembly = n->cfg.max_buffered,
		.ops = { node_rounds_now, node_rounds_meter, node_journal_line,
		    node_rounds_commit, node_rounds_refused, node_rounds_quarantined },
		.arg = n,
	};

	if (n->replicas <= 1)
		return KN_OK;
	if (pr_encoding_parse(n->cfg.update_encoding, &rc.enc) != 0)
		return kn_error(err, KN_EINVAL, "update_encoding: unknown '%s'",
		    n->cfg.update_encoding);
	if (pr_compression_parse(n->cfg.update_compression, &rc.comp) != 0)
		return kn_error(err, KN_EINVAL, "update_compression: unknown "
		    "'%s'", n->cfg.update_compression);
	rc.count = kn_model_params_for(&(kn_model_shape){ n->spec.width,
	    n->spec.heads, pr_spec_layers(&n->spec, n->cfg.block - 1),
	    n->spec.window, 0, 0 });
	return rounds_new(&n->training.rounds, &rc, err);
}

int
node__start_worker(node *n, char *err)
{
	wk_opts wo;

	if (n->soma) {
		node_soma_worker_opts(&n->soma_expert, n, &wo);
		return wk_start(&n->training.worker, n->loop, &wo, on_event,
		    n, err);
	}
	memset(&wo, 0, sizeof(wo));
	wo.train.spec = &n->spec;
	wo.train.run_id = n->run_id;
	wo.train.dir = n->cfg.state_dir;
	wo.train.kind = BT_BLOCK;
	wo.train.block = n->cfg.block;
	wo.train.replica = n->replica;
	wo.train.steps = n->spec.steps;
	wo.train.be = n->be;
	wo.valid_path = n->spec.valid;
	wo.valid_sha256 = n->spec.valid_sha256;
	wo.eval_every = n->cfg.eval_every;
	wo.eval_windows = n->cfg.eval_windows;
	wo.checkpoint_every = n->cfg.checkpoint_every;
	wo.replicas = n->replicas;
	wo.local_steps = n->spec.local_steps;
	wo.overlap = n->overlap;
	wo.threads = n->cfg.threads;
	return wk_start(&n->training.worker, n->loop, &wo, on_event, n, err);
}

/* The bootstrap is over (bootstrap.h): the trainer starts from what the
 * state directory holds now. */
static void
on_bootstrapped(node *n)
{
	char err[PR_ERR_LEN];

	if (node__start_worker(n, err) != 0)
		on_worker_error(n, err);
}

static void
start_signals(node *n)
{
	uv_signal_init(n->loop, &n->sigterm);
	uv_signal_init(n->loop, &n->sigint);
	uv_signal_init(n->loop, &n->sighup);
	n->sigterm.data = n->sigint.data = n->sighup.data = n;
	uv_signal_start(&n->sigterm, on_stop_signal, SIGTERM);
	uv_signal_start(&n->sigint, on_stop_signal, SIGINT);
	uv_signal_start(&n->sighup, on_hup, SIGHUP);
}

/* Prometheus scrapes plain HTTP: a listener of its own that serves
 * /metrics and nothing else, read-only, on loopback unless told. */
static int
start_metrics(node *n, char *err)
{
	hs_config mcfg;
	char host[CF_HOST_LEN], why[HS_ERR_LEN];
	int port;

	if (strcmp(n->cfg.metrics_listen, "off") == 0)
		return 0;
	if (n->cfg.metrics_listen[0] == '\0') {
		snprintf(host, sizeof(host), "127.0.0.1");
		port = n->cfg.listen_port > 0 && n->cfg.listen_port <= 63535 ?
		    n->cfg.listen_port + 2000 : 0;
	} else if (cf_parse_hostport(n->cfg.metrics_listen, host,
	    sizeof(host), &port) != 0)
		return kn_error(err, KN_EINVAL, "metrics_listen: '%s' is not "
		    "host:port (or off)", n->cfg.metrics_listen);
	hs_config_defaults(&mcfg);
	mcfg.max_body_bytes = 1;        /* nothing to upload */
	mcfg.max_connections = 16;
	mcfg.max_connections_per_addr = 8;
	if (hs_server_new(&n->metrics, n->loop, &mcfg, api_metrics_handle, n,
	    why) != 0 || hs_server_listen(n->metrics, host, port, why) != 0)
		return kn_error(err, KN_EIO, "metrics_listen: %s (set "
		    "metrics_listen to another host:port, or off)", why);
	snprintf(n->metrics_addr, sizeof(n->metrics_addr), strchr(host, ':') ?
	    "[%s]:%d" : "%s:%d", host, hs_server_port(n->metrics));
	if (!cf_is_loopback(host))
		log_warnx("metrics on %s, not loopback: anyone who reaches it "
		    "reads the run's metrics", n->metrics_addr);
	return 0;
}

/* The probe's view of the node. */
static int
node_probe_in_round(void *arg, int64_t *round)
{
	const node *n = arg;

	*round = n->report.round;
	return n->training.in_round;
}

static int
node_is_stopping(void *arg)
{
	return ((const node *)arg)->stopping;
}

static const peers_list *
node_probe_peers_now(void *arg, int *self)
{
	const node *n = arg;

	if (self != NULL)
		*self = n->self;
	return &n->peers;
}

static wk_worker *
node_probe_trainer(void *arg)
{
	const node *n = arg;

	return n->training.worker_done ? NULL : n->training.worker;
}

/* The peer watch's view of the node. */
static peers_list *
node_watch_peers(void *arg, int *self)
{
	node *n = arg;

	if (self != NULL)
		*self = n->self;
	return &n->peers;
}

static void
node_watch_checkpoint(void *arg, int peer, int64_t step, int64_t round,
    const char *sha256)
{
	node *n = arg;

	if (n->training.rounds != NULL)
		rounds_diverged(n->training.rounds, peer, step, round, sha256);
	mr_on_checkpoint(n->mirror, peer, step, round, sha256);
}

/* The hosts whose block we mirror are probed four times as often: a
 * mirror pulls a new checkpoint when a probe names it, and the copy's
 * lag is what a block loses with its only host. */
static double
node_watch_interval(void *arg, int peer)
{
	const node *n = arg;

	if (peer >= 0 && peer < n->peers.n && !n->soma &&
	    mr_mirrors_block(&n->peers, n->self, n->peers.v[peer].block,
	    n->cfg.mirrors))
		return PW_INTERVAL_S / 4;
	return PW_INTERVAL_S;
}

static void
start_watch(node *n)
{
	pw_config wc = {
		.client = n->client,
		.advertise = n->cfg.advertise,
		.run_id = n->run_id,
		.timeout_ms = n->cfg.peer_timeout_ms,
		.steps = n->soma ? n->spec.soma.steps : n->spec.steps,
		.ops = { node_watch_peers, node_rounds_meter,
		    node_watch_checkpoint, node_is_stopping,
		    node_watch_interval },
		.arg = n,
	};

	pw_init(&n->watch, &wc);
}

static int
start_probe(node *n, char *err)
{
	pb_config pc = {
		.loop = n->loop,
		.client = n->client,
		.advertise = n->cfg.advertise,
		.device = n->backend_desc,
		.be = n->be,
		.spec = &n->spec,
		.block = n->cfg.block,
		.expert = n->soma ? node_soma_of(n)->expert : -1,
		.compute_max_s = n->cfg.probe_compute_max_s,
		.compute_interval_s = n->cfg.probe_compute_interval_s,
		.ops = { node_probe_in_round, node_is_stopping,
		    node_probe_peers_now, node_rounds_meter,
		    node_trust_who, node_probe_trainer },
		.arg = n,
	};

	return pb_start(&n->probe, &pc, err);
}

static void
on_refused(void *ctx, const char *peer, const char *why)
{
	(void)ctx;
	log_warnx("refused a connection from %s: %s", peer, why);
}

int
node_start(node *n, uv_loop_t *loop, const kn_backend *be, char *err)
{
	hs_config hcfg;
	char why[HS_ERR_LEN];
	int rc;

	n->loop = loop;
	n->be = be;
	n->report.started = kn_now();
	n->report.state = "starting";
	hs_config_defaults(&hcfg);
	hcfg.max_body_bytes = n->cfg.max_body ? n->cfg.max_body :
	    kn_model_params_for(&(kn_model_shape){ n->spec.width,
	    n->spec.heads, pr_spec_layers(&n->spec, n->cfg.block - 1),
	    n->spec.window, 0, 0 }) * 4 +
	    (1 << 20);
	hcfg.max_connections = n->cfg.max_connections;
	hcfg.max_connections_per_addr = n->cfg.max_connections_per_addr;
	hcfg.max_buffered_bytes = n->cfg.max_buffered;
	hcfg.request_timeout_ms = (unsigned)n->cfg.request_timeout_ms;
	hcfg.min_body_rate = (unsigned)n->cfg.min_body_rate;
	hcfg.on_exchange = api_on_exchange;
	hcfg.tls = node_trust_tls(n);
	hcfg.handshake_timeout_ms = (unsigned)n->cfg.handshake_timeout_ms;
	hcfg.header_timeout_ms = (unsigned)n->cfg.header_timeout_ms;
	hcfg.id_role = node_trust_role;
	hcfg.max_connections_per_peer = n->cfg.max_connections_per_peer;
	hcfg.max_connections_per_client = n->cfg.max_connections_per_client;
	hcfg.max_requests_per_id = n->cfg.max_requests_per_id;
	hcfg.on_refused = on_refused;
	hcfg.discard = pb_discard;
	if (node_trust_tls(n) == NULL)
		log_warnx("insecure = yes: plain TCP, no peer ids; anyone who "
		    "reaches %s:%d may use the API", n->cfg.listen_host,
		    n->cfg.listen_port);
	if (hs_server_new(&n->http, loop, &hcfg, api_handle, n, why) != 0 ||
	    hs_server_listen(n->http, n->cfg.listen_host, n->cfg.listen_port,
	    why) != 0)
		return kn_error(err, KN_EIO, "cannot listen on %s:%d: %s",
		    n->cfg.listen_host, n->cfg.listen_port, why);
	if ((rc = start_metrics(n, err)) != 0)
		return rc;
	if (hc_client_new(&n->client, loop, why) != 0)
		return kn_error(err, KN_EIO, "%s", why);
	hc_client_set_tls(n->client, node_trust_tls(n));
	start_watch(n);
	if ((rc = start_probe(n, err)) != 0)
		return rc;
	if ((rc = node_roster_init(n, err)) != 0 ||
	    (rc = node__start_rounds(n, err)) != 0)
		return rc;
	if (n->soma)
		log_info("run %s, expert %d of %d, listening on %s:%d",
		    n->run_id, node_soma_of(n)->expert, n->spec.soma.experts,
		    n->cfg.listen_host, hs_server_port(n->http));
	else if (n->spec.replicas != n->replicas)
		log_warnx("the spec says %d replica(s) per block, the peer list "
		    "gives block %d %d: the peer list is followed",
		    n->spec.replicas, n->cfg.block, n->replicas);
	if (!n->soma)
		log_info("run %s, block %d (replica %d of %d), listening on "
		    "%s:%d", n->run_id, n->cfg.block, n->replica, n->replicas,
		    n->cfg.listen_host, hs_server_port(n->http));
	uv_timer_init(loop, &n->cron);
	n->cron.data = n;
	uv_timer_start(&n->cron, on_cron, 200, CRON_MS);
	start_signals(n);
	if ((rc = mr_start(n, err)) != 0)
		return rc;
	return bs_wanted(n) ? bs_start(n, on_bootstrapped, err) :
	    node__start_worker(n, err);
}

void
node_free(node *n)
{
	pb_free(n->probe);
	n->probe = NULL;
	pd_free(n->predicted);
	n->predicted = NULL;
	mr_free(n->mirror);
	bs_free(n->bootstrap);
	n->mirror = NULL;
	n->bootstrap = NULL;
	hs_shared_unref(n->ckpt.body);
	n->ckpt.body = NULL;
	node_soma_free(&n->soma_expert);
	node_roster_free(n);
	free(n->spec_body);
	peers_free(&n->peers);
	node_trust_free(n);
	n->ckpt.data = NULL;
	n->spec_body = NULL;
}

const node_report *
node_report_of(const node *n)
{
	return &n->report;
}

const node_ckpt *
node_ckpt_of(const node *n)
{
	return &n->ckpt;
}

rounds *
node_rounds_of(const node *n)
{
	return n->training.rounds;
}
