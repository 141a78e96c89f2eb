/* The Prometheus text of a training daemon's /metrics (proto/PROTOCOL.md
 * lists every family): what the run is and where the daemon stands in
 * it, then its counters and gauges.  Every sample carries the run id and
 * the daemon's place (block and replica; a SOMA expert: expert), added
 * in one place (prom_add_labels), so that sums and averages across the
 * daemons of a run need no join.  api.c serves it on the metrics
 * listener; the recording rules of scripts/prometheus read it. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/prom.h"
#include "daemon/node/api.h"
#include "daemon/node/node.h"
#include "daemon/node/predicted.h"
#include "soma/trainer.h"

/* Every state node.c, roster.c and bootstrap.c set in the report, for
 * the one-hot blocktrain_state: each is a series at 0 or 1, so a state
 * that ends reads 0 instead of going stale. */
static const char *const node_states[] = {
	"starting", "bootstrapping", "training", "round", "paused",
	"stopping", "done", "error"
};
#define NODE_STATES (int)(sizeof(node_states) / sizeof(node_states[0]))

static void
metric(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Appends one line to a growing buffer of Prometheus text. */
static void
metric(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0,
		    fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (*buf != NULL && *len + (size_t)n < *cap) {
			*len += (size_t)n;
			return;
		}
		{
			size_t ncap = (*cap ? *cap * 2 : 4096) + (size_t)n;
			char *nb = realloc(*buf, ncap);

			if (nb == NULL)
				return;
			*buf = nb;
			*cap = ncap;
		}
	}
}

/* The gauges of a SOMA expert daemon. */
static void
soma_metrics(node *n, char **b, size_t *len, size_t *cap)
{
	const node_soma *x = node_soma_of(n);

	metric(b, len, cap, "# HELP blocktrain_soma_expert The expert this "
	    "daemon trains.\n# TYPE blocktrain_soma_expert gauge\n"
	    "blocktrain_soma_expert %d\n", x->expert);
	metric(b, len, cap, "# HELP blocktrain_lr Learning rate now.\n"
	    "# TYPE blocktrain_lr gauge\nblocktrain_lr %g\n# HELP "
	    "blocktrain_eps Perturbation size now.\n# TYPE blocktrain_eps "
	    "gauge\nblocktrain_eps %g\n", x->lr, x->eps);
	metric(b, len, cap, "# HELP blocktrain_positions_total Byte positions "
	    "evaluated.\n# TYPE blocktrain_positions_total counter\n"
	    "blocktrain_positions_total %" PRIu64 "\n", x->positions);
	if (x->val_step > 0)
		metric(b, len, cap, "# HELP blocktrain_val_loss_nats Validation "
		    "loss on the expert's own cluster, nats per byte.\n"
		    "# TYPE blocktrain_val_loss_nats gauge\n"
		    "blocktrain_val_loss_nats %.6f\n# HELP blocktrain_val_step "
		    "Step of that validation.\n# TYPE blocktrain_val_step "
		    "gauge\nblocktrain_val_step %" PRId64 "\n", x->val,
		    x->val_step);
	if (x->heldout != NULL)
		metric(b, len, cap, "# HELP blocktrain_heldout_step Step of the "
		    "held-out scores served at /v1/soma/heldout.\n# TYPE "
		    "blocktrain_heldout_step gauge\nblocktrain_heldout_step %"
		    PRId64 "\n", x->heldout_step);
}

/* Refusals per peer and kind, as counters from 0 for every listed peer
 * (rate() needs the zero), then any other identity with a record; and
 * whether each is quarantined. */
static void
strikes_metrics(node *n, char **b, size_t *len, size_t *cap)
{
	int i, k, pass;

	metric(b, len, cap, "# HELP blocktrain_peer_strikes_total What a "
	    "peer sent that was refused, by kind (update left out, "
	    "checkpoint refused, claim of a step or round the run does not "
	    "allow).\n# TYPE blocktrain_peer_strikes_total counter\n");
	for (pass = 0; pass < 2; pass++) {
		if (pass == 1)
			metric(b, len, cap, "# HELP blocktrain_peer_quarantined "
			    "Whether a peer is quarantined (its connections "
			    "refused) until the operator clears it.\n# TYPE "
			    "blocktrain_peer_quarantined gauge\n");
		for (i = 0; i < n->peers.n; i++) {
			const peers_entry *p = &n->peers.v[i];
			const strikes_peer *sp;

			if (p->self)
				continue;
			sp = strikes_find(node_trust_strikes(n),
			    api_strikes_key(p));
			if (pass == 1) {
				metric(b, len, cap, "blocktrain_peer_quarantined{"
				    "peer=\"%s\",id=\"%s\"} %d\n", p->addr,
				    api_strikes_key(p), sp != NULL &&
				    sp->quarantined);
				continue;
			}
			for (k = 0; k < STRIKES_KINDS; k++)
				metric(b, len, cap, "blocktrain_peer_strikes_total{"
				    "peer=\"%s\",id=\"%s\",kind=\"%s\"} %" PRIu64
				    "\n", p->addr, api_strikes_key(p),
				    strikes_kind_name(k), sp != NULL ?
				    sp->total[k] : 0);
		}
		for (i = 0; i < strikes_count(node_trust_strikes(n)); i++) {
			const strikes_peer *sp = strikes_at(
			    node_trust_strikes(n), i);

			if (api_strikes_addr(n, sp->id) != NULL)
				continue;
			if (pass == 1) {
				metric(b, len, cap, "blocktrain_peer_quarantined{"
				    "peer=\"\",id=\"%s\"} %d\n", sp->id,
				    sp->quarantined);
				continue;
			}
			for (k = 0; k < STRIKES_KINDS; k++)
				metric(b, len, cap, "blocktrain_peer_strikes_total{"
				    "peer=\"\",id=\"%s\",kind=\"%s\"} %" PRIu64
				    "\n", sp->id, strikes_kind_name(k),
				    sp->total[k]);
		}
	}
}

/* What the run is: its spec's figures as the labels of one series at 1
 * (the info pattern), the blocks the bound sums over and the steps a
 * block trains, so that progress and the composed bound are one query
 * each. */
static void
run_metrics(node *n, char **b, size_t *len, size_t *cap)
{
	const pr_spec *s = &n->spec;
	/* up to 64 blocks of up to 1024 layers, comma-separated */
	char layers[PR_MAX_BLOCKS * 6] = "";
	char info[PROM_LABELS_LEN + sizeof(layers)] = "";
	int i, known;

	if (n->soma) {
		const pr_soma *x = &s->soma;

		prom_label_append(info, sizeof(info), "method", "soma");
		prom_label_int(info, sizeof(info), "experts", x->experts);
		prom_label_int(info, sizeof(info), "width", x->width);
		prom_label_int(info, sizeof(info), "layers", x->layers);
		prom_label_int(info, sizeof(info), "window", x->window);
		prom_label_int(info, sizeof(info), "batch", x->batch);
		prom_label_int(info, sizeof(info), "steps", x->steps);
		prom_label_int(info, sizeof(info), "perturbations",
		    x->perturbations);
		prom_label_append(info, sizeof(info), "mode", x->mode);
		prom_label_int(info, sizeof(info), "top_k", x->top_k);
	} else {
		for (i = 0; i < s->blocks && i < PR_MAX_BLOCKS; i++)
			snprintf(layers + strlen(layers), sizeof(layers) -
			    strlen(layers), "%s%d", i ? "," : "",
			    pr_spec_layers(s, i));
		prom_label_append(info, sizeof(info), "method", "blocktrain");
		prom_label_int(info, sizeof(info), "blocks", s->blocks);
		prom_label_int(info, sizeof(info), "width", s->width);
		prom_label_int(info, sizeof(info), "heads", s->heads);
		prom_label_append(info, sizeof(info), "layers", layers);
		prom_label_int(info, sizeof(info), "window", s->window);
		prom_label_int(info, sizeof(info), "position_block",
		    s->position_block > 0 ? s->position_block : s->window);
		prom_label_int(info, sizeof(info), "batch", s->batch);
		prom_label_int(info, sizeof(info), "steps", s->steps);
		prom_label_int(info, sizeof(info), "local_steps",
		    s->local_steps);
	}
	metric(b, len, cap, "# HELP blocktrain_run_info The run this daemon "
	    "trains: its spec's figures as labels, value 1.\n# TYPE "
	    "blocktrain_run_info gauge\nblocktrain_run_info{%s} 1\n", info);
	if (!n->soma)
		metric(b, len, cap, "# HELP blocktrain_run_blocks Blocks of the "
		    "run (the spec's T): the composed bound sums over as many "
		    "blocks.\n# TYPE blocktrain_run_blocks gauge\n"
		    "blocktrain_run_blocks %d\n# HELP blocktrain_block_replicas "
		    "Replicas of this daemon's block in the peer list now.\n"
		    "# TYPE blocktrain_block_replicas gauge\n"
		    "blocktrain_block_replicas %d\n", s->blocks, n->replicas);
	metric(b, len, cap, "# HELP blocktrain_run_steps Steps this block "
	    "(expert) trains in all, from the spec.\n# TYPE "
	    "blocktrain_run_steps gauge\nblocktrain_run_steps %d\n", n->soma ?
	    s->soma.steps : s->steps);
	metric(b, len, cap, "# HELP blocktrain_state The daemon's state, one "
	    "series per state, 1 for the state it is in.\n# TYPE "
	    "blocktrain_state gauge\n");
	for (i = 0, known = 0; i < NODE_STATES; i++) {
		int now = n->report.state != NULL &&
		    strcmp(n->report.state, node_states[i]) == 0;

		known |= now;
		metric(b, len, cap, "blocktrain_state{state=\"%s\"} %d\n",
		    node_states[i], now);
	}
	/* a state added to node.c but not to the list still shows */
	if (!known && n->report.state != NULL)
		metric(b, len, cap, "blocktrain_state{state=\"%s\"} 1\n",
		    n->report.state);
}

/* The run id and this daemon's place in it, on every sample. */
static void
daemon_labels(node *n, char *labels, size_t size)
{
	labels[0] = '\0';
	prom_label_append(labels, size, "run", n->run_id);
	if (n->soma) {
		prom_label_int(labels, size, "expert", node_soma_of(n)->expert);
		return;
	}
	prom_label_int(labels, size, "block", n->cfg.block);
	prom_label_int(labels, size, "replica", n->replica);
}

char *
api_metrics_text(node *n, size_t *outlen)
{
	const node_report *r = node_report_of(n);
	char *b = NULL, *labelled, labels[PROM_LABELS_LEN];
	size_t len = 0, cap = 0;
	int i, k;

	*outlen = 0;
	run_metrics(n, &b, &len, &cap);
	metric(&b, &len, &cap, "# HELP blocktrain_steps_total Optimizer "
	    "steps done (lowered only by a roll-back to a checkpoint, which "
	    "Prometheus reads as a counter reset).\n# TYPE "
	    "blocktrain_steps_total counter\nblocktrain_steps_total %" PRId64
	    "\n", r->step);
	metric(&b, &len, &cap, "# HELP blocktrain_rounds_total Averaging "
	    "rounds completed.\n# TYPE blocktrain_rounds_total counter\n"
	    "blocktrain_rounds_total %" PRId64 "\n", r->round);
	metric(&b, &len, &cap, "# HELP blocktrain_steps_overlapped_total "
	    "Training steps taken while a round of this replica was in "
	    "flight (overlap_rounds).\n# TYPE blocktrain_steps_overlapped_total "
	    "counter\nblocktrain_steps_overlapped_total %" PRId64 "\n",
	    r->overlapped);
	metric(&b, &len, &cap, "# HELP blocktrain_loss Training loss of the "
	    "last step.\n# TYPE blocktrain_loss gauge\nblocktrain_loss %.6f\n",
	    r->loss);
	metric(&b, &len, &cap, "# HELP blocktrain_positions_per_second "
	    "Training throughput.\n# TYPE blocktrain_positions_per_second "
	    "gauge\nblocktrain_positions_per_second %.1f\n",
	    r->positions_per_s);
	metric(&b, &len, &cap, "# HELP blocktrain_steps_per_second Training "
	    "steps per second.\n# TYPE blocktrain_steps_per_second gauge\n"
	    "blocktrain_steps_per_second %.3f\n", r->positions_per_s /
	    api_step_positions(n));
	if (n->soma)
		soma_metrics(n, &b, &len, &cap);
	if (r->have_share)
		metric(&b, &len, &cap, "# HELP blocktrain_heldout_share_nats "
		    "This block's share of the held-out bound, nats per byte.\n"
		    "# TYPE blocktrain_heldout_share_nats gauge\n"
		    "blocktrain_heldout_share_nats %.6f\n"
		    "# HELP blocktrain_heldout_share_step Step at which the share "
		    "was measured.\n# TYPE blocktrain_heldout_share_step gauge\n"
		    "blocktrain_heldout_share_step %" PRId64 "\n", r->share,
		    r->share_step);
	metric(&b, &len, &cap, "# HELP blocktrain_bytes_total Bytes exchanged, "
	    "by peer, direction and kind.\n# TYPE blocktrain_bytes_total "
	    "counter\n");
	for (i = 0; i <= n->peers.n; i++) {
		const uint64_t *in = i < n->peers.n ? n->peers.v[i].bytes_in :
		    r->client_in;
		const uint64_t *out = i < n->peers.n ? n->peers.v[i].bytes_out :
		    r->client_out;
		const char *who = i < n->peers.n ? n->peers.v[i].addr : "clients";

		if (i < n->peers.n && n->peers.v[i].self)
			continue;
		for (k = 0; k < PEERS_KINDS; k++) {
			metric(&b, &len, &cap, "blocktrain_bytes_total{peer=\"%s\","
			    "direction=\"in\",kind=\"%s\"} %" PRIu64 "\n", who,
			    peers_kind_name(k), in[k]);
			metric(&b, &len, &cap, "blocktrain_bytes_total{peer=\"%s\","
			    "direction=\"out\",kind=\"%s\"} %" PRIu64 "\n", who,
			    peers_kind_name(k), out[k]);
		}
	}
	metric(&b, &len, &cap, "# HELP blocktrain_peer_up Whether a peer "
	    "answered its last probe with our run id.\n# TYPE "
	    "blocktrain_peer_up gauge\n");
	for (i = 0; i < n->peers.n; i++)
		if (!n->peers.v[i].self)
			metric(&b, &len, &cap, "blocktrain_peer_up{peer=\"%s\"} "
			    "%d\n", n->peers.v[i].addr,
			    n->peers.v[i].state == PEERS_UP);
	if (n->http != NULL)
		metric(&b, &len, &cap, "# HELP blocktrain_http_evicted_total "
		    "Clients' connections closed to make room for a peer.\n"
		    "# TYPE blocktrain_http_evicted_total counter\n"
		    "blocktrain_http_evicted_total %lu\n"
		    "# HELP blocktrain_http_over_quota_total Connections and "
		    "requests refused by the quotas of an identity.\n"
		    "# TYPE blocktrain_http_over_quota_total counter\n"
		    "blocktrain_http_over_quota_total %lu\n",
		    hs_server_evicted(n->http), hs_server_over_quota(n->http));
	strikes_metrics(n, &b, &len, &cap);
	metric(&b, &len, &cap, "# HELP blocktrain_rollbacks_total Times the "
	    "trainer went back to its last good checkpoint (a non-finite "
	    "loss, unhealthy weights) instead of stopping.\n# TYPE "
	    "blocktrain_rollbacks_total counter\nblocktrain_rollbacks_total %"
	    PRId64 "\n", r->rollbacks);
	if (n->predicted != NULL) {
		char *pd = pd_metrics_text(n->predicted, &n->peers);

		if (pd != NULL)
			metric(&b, &len, &cap, "%s", pd);
		free(pd);
	}
	metric(&b, &len, &cap, "# HELP blocktrain_http_requests_total "
	    "Requests to the API port, any path.\n# TYPE "
	    "blocktrain_http_requests_total counter\n"
	    "blocktrain_http_requests_total %" PRIu64 "\n# HELP "
	    "blocktrain_http_client_errors_total Requests refused as a "
	    "client's error (no such resource, method or caller not "
	    "allowed).\n# TYPE blocktrain_http_client_errors_total counter\n"
	    "blocktrain_http_client_errors_total %" PRIu64 "\n",
	    n->api.requests, n->api.client_errors);
	if (b == NULL)
		return NULL;
	daemon_labels(n, labels, sizeof(labels));
	labelled = prom_add_labels(b, len, labels, outlen);
	free(b);
	return labelled;
}

