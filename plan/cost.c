/* The cost model of shardmeter plan.  A round (daemon/rounds/rounds.c): every
 * replica runs H steps, POSTs its encoded update to every other replica
 * (one way: half a round trip and the bytes over the link's rate), the
 * coordinator (replica 0) commits as the last update reaches it, and a
 * follower learns of the commit by the poll it sends every PN_POLL_S
 * (or every round trip, when that is longer): half a poll period and
 * half a round trip on average.  Overlapped rounds run the next H steps
 * while the exchange is in flight, so a round costs the larger of the
 * two and not their sum. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "plan/cost.h"
#include "proto/update.h"

/* The update message's bytes beside its payload (magic, run id, block,
 * round, replica, step, encoding, count, the bin header, SHA-256), as
 * proto/update.c writes them for one value of enc in a round and step of
 * a long run; 251 is its documented bound. */
static double
update_head_bytes(pr_encoding enc)
{
	pr_update_meta meta = { .block = 1, .round = 100000, .replica = 1,
	    .step = 10000000, .enc = enc, .count = 1 };
	char *buf;
	size_t len;
	float one = 0.0f;

	memset(meta.run_id, 'a', PR_RUN_ID_LEN - 1);
	if (pr_update_encode(&meta, &one, &buf, &len, NULL) != 0)
		return 251;
	free(buf);
	return (double)(len - pr_update_payload_bytes(enc, 1));
}

void
pn_model_defaults(pn_model *m)
{
	int e;

	memset(m, 0, sizeof(*m));
	for (e = 0; e < PN_ENCS; e++) {
		m->zstd_ratio[e] = 1.0;
		m->update_head[e] = update_head_bytes((pr_encoding)e);
	}
}

/* The bytes msgpack spends on the unsigned integer v, and on the header
 * of a bin of n bytes: the smallest forms of the msgpack spec, which
 * msgpack-c writes. */
static double
mp_uint_bytes(double v)
{
	return v < 128 ? 1 : v < 256 ? 2 : v < 65536 ? 3 :
	    v < 4294967296.0 ? 5 : 9;
}

static double
mp_bin_head_bytes(double n)
{
	return n < 256 ? 2 : n < 65536 ? 3 : 5;
}

size_t
pn_block_params(const pr_spec *s, int layers)
{
	kn_model_shape shape = pr_spec_block_shape(s, 0);

	shape.layers = layers;
	return kn_model_params_for(&shape);
}

double
pn_update_bytes(const pn_model *m, size_t count, pr_encoding enc, int zstd)
{
	double raw = (double)pr_update_payload_bytes(enc, count), payload;
	int comp = zstd && m->zstd_ratio[enc] < 1;
	/* "compression": "zstd", as two msgpack strings */
	double comp_field = 2 + strlen("compression") +
	    strlen(pr_compression_name(PR_COMP_ZSTD));

	payload = comp ? ceil(raw * m->zstd_ratio[enc]) : raw;
	/* update_head counted a count of 1 and the bin of one value */
	return m->update_head[enc] - mp_uint_bytes(1) +
	    mp_uint_bytes((double)count) -
	    mp_bin_head_bytes((double)pr_update_payload_bytes(enc, 1)) +
	    mp_bin_head_bytes(payload) + (comp ? comp_field : 0) + payload;
}

double
pn_link_rate(const topo_link *l, int streams)
{
	if (streams <= 1 || l->streams <= 1)
		return l->stream_bytes_per_s;
	if (streams >= l->streams)
		return l->multi_bytes_per_s;
	return l->stream_bytes_per_s + (l->multi_bytes_per_s - l->stream_bytes_per_s) *
	    (streams - 1) / (l->streams - 1);
}

/* FLOPs per position of a window of shape s with layers layers. */
static double
flops_per_position(kn_model_shape shape, int layers)
{
	shape.layers = layers;
	return kn_model_flops_per_window(&shape) / shape.window;
}

/* FLOPs per position at the shape the topology's rates were measured at */
static double
measured_flops(const topo_topology *t)
{
	return flops_per_position(topo_model_shape(&t->shape),
	    t->shape.layers);
}

static double
scaled_rate(const topo_topology *t, const pr_spec *s, double rate, int layers,
    int causal)
{
	kn_model_shape mine = pr_spec_block_shape(s, 0);

	mine.causal = causal;
	return rate * measured_flops(t) / flops_per_position(mine, layers);
}

/* Whether candidate c trains a block on host. */
static int
trains_on(const pn_candidate *c, int host)
{
	int b, r;

	for (b = 0; b < c->blocks; b++)
		for (r = 0; r < c->nrep[b]; r++)
			if (c->host[b][r] == host)
				return 1;
	return 0;
}

double
pn_shared_rate(const topo_topology *t, const pn_candidate *c, int host)
{
	const topo_host *h = &t->hosts[host];
	int j, m = 0, a = 0;

	if (c == NULL || h->machine[0] == '\0' || !(h->train_shared > 0))
		return h->train_positions_per_s;
	for (j = 0; j < t->nhosts; j++) {
		const topo_host *o = &t->hosts[j];

		if (o->train_shared > 0 && strcmp(o->machine, h->machine) == 0) {
			m++;
			a += j == host || trains_on(c, j);
		}
	}
	if (m < 2)
		return h->train_positions_per_s;
	return h->train_positions_per_s - (h->train_positions_per_s -
	    h->train_shared) * (a - 1) / (m - 1);
}

double
pn_train_rate(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, int host, int layers)
{
	return scaled_rate(t, s, pn_shared_rate(t, c, host), layers, 0);
}

double
pn_forward_rate(const topo_topology *t, const pr_spec *s, int host, int layers)
{
	return scaled_rate(t, s, t->hosts[host].forward_positions_per_s,
	    layers, 0);
}

double
pn_exchange_cpu_s(const topo_topology *t, int host, double update_bytes,
    double params, int replicas)
{
	const topo_host *h = &t->hosts[host];

	if (replicas < 2 || !(h->cpu_share > 0))
		return 0;
	return (h->exchange_cpu * update_bytes * (replicas - 1) +
	    params * (h->encode_cpu + replicas * h->merge_cpu)) / h->cpu_share;
}

/* A time with its bandwidth and latency parts. */
struct path {
	double bw, lat;
};

static double
path_total(struct path p)
{
	return p.bw + p.lat;
}

/* Bytes from host a reach host b, one way. */
static struct path
one_way(const topo_topology *t, int a, int b, double bytes, int streams)
{
	const topo_link *l = topo_link_at(t, a, b);
	struct path p = { bytes / pn_link_rate(l, streams), l->rtt_ms / 2000 };

	return p;
}

/* Block b's round: the exchange's critical path, from the round's start,
 * with the compute of the sender it starts from. */
static void
predict_round(const topo_topology *t, const pr_spec *s, const pn_candidate *c,
    int b, double U, pn_block_pred *bp, struct path *crit)
{
	const int *h = c->host[b];
	int R = c->nrep[b], H = c->local_steps, i, f;
	double step[PN_MAX_REPLICAS], smin = INFINITY, smax = 0, work;
	double commit = 0, end = 0, ready_c = 0, ready_end = 0, X, exposed;
	struct path commit_p = { 0, 0 }, end_p = { 0, 0 };

	for (i = 0; i < R; i++) {
		/* the loop's work on the exchange comes out of the same CPU
		 * as the steps, whenever in the round it falls */
		work = pn_exchange_cpu_s(t, h[i], U,
		    (double)pn_block_params(s, c->layers[b]), R);
		step[i] = (double)s->batch * s->window /
		    pn_train_rate(t, s, c, h[i], c->layers[b]) + work / H;
		smin = fmin(smin, step[i]);
		if (step[i] > smax) {
			smax = step[i];
			bp->round_cpu_s = work;
		}
	}
	/* the coordinator commits when the last update reaches it */
	for (i = 1; i < R; i++) {
		struct path p = one_way(t, h[i], h[0], U, c->streams);

		if (H * step[i] + path_total(p) > commit) {
			commit = H * step[i] + path_total(p);
			commit_p = p;
			ready_c = H * step[i];
		}
	}
	end = commit;
	end_p = commit_p;
	ready_end = ready_c;
	for (f = 1; f < R; f++) {
		const topo_link *back = topo_link_at(t, h[f], h[0]);
		double rtt = back->rtt_ms / 1000;
		double period = PN_POLL_S * fmax(1, ceil(rtt / PN_POLL_S - 1e-9));
		struct path wait = { commit_p.bw, commit_p.lat + period / 2 +
		    rtt / 2 };

		if (ready_c + path_total(wait) > end) {
			end = ready_c + path_total(wait);
			end_p = wait;
			ready_end = ready_c;
		}
		/* every other replica's own update reaches f directly */
		for (i = 0; i < R; i++) {
			struct path p;

			if (i == f)
				continue;
			p = one_way(t, h[i], h[f], U, c->streams);
			if (H * step[i] + path_total(p) > end) {
				end = H * step[i] + path_total(p);
				end_p = p;
				ready_end = H * step[i];
			}
		}
	}
	bp->step_s = smax;
	*crit = end_p;
	X = end - H * smax;
	bp->exchange_s = X > 0 ? X : 0;
	bp->round.compute = H * smin;
	if (!c->overlap) {
		bp->round.straggler = ready_end - H * smin;
		bp->round.transfer = end_p.bw;
		bp->round.latency = end_p.lat;
		bp->round_s = end;
		return;
	}
	/* the exchange runs under the next H steps; what sticks out past
	 * them is paid, split as the critical path is */
	bp->round.straggler = H * (smax - smin);
	exposed = bp->exchange_s - H * smax;
	if (exposed > 0 && path_total(end_p) > 0) {
		bp->round.transfer = exposed * end_p.bw / path_total(end_p);
		bp->round.latency = exposed * end_p.lat / path_total(end_p);
	}
	bp->round_s = H * smax + (exposed > 0 ? exposed : 0);
}

static void
scale_breakdown(pn_breakdown *out, const pn_breakdown *in, double k)
{
	out->compute = in->compute * k;
	out->straggler = in->straggler * k;
	out->transfer = in->transfer * k;
	out->latency = in->latency * k;
}

void
pn_predict_block(const topo_topology *t, const pr_spec *s, const pn_model *m,
    const pn_candidate *c, int b, pn_block_pred *bp)
{
	double positions = (double)s->batch * s->window, rounds, tail;
	struct path crit;
	int H = c->local_steps;

	memset(bp, 0, sizeof(*bp));
	bp->update_bytes = pn_update_bytes(m, pn_block_params(s,
	    c->layers[b]), c->enc, c->zstd);
	if (c->nrep[b] <= 1) {
		bp->step_s = positions / pn_train_rate(t, s, c,
		    c->host[b][0], c->layers[b]);
		bp->round_s = H * bp->step_s;
		bp->round.compute = bp->round_s;
		bp->positions_per_s = positions / bp->step_s;
		bp->train_s = c->steps * bp->step_s;
		bp->train.compute = bp->train_s;
		return;
	}
	predict_round(t, s, c, b, bp->update_bytes, bp, &crit);
	bp->positions_per_s = c->nrep[b] * positions * H / bp->round_s;
	rounds = (double)c->steps / H;
	scale_breakdown(&bp->train, &bp->round, rounds);
	bp->train_s = rounds * bp->round_s;
	if (c->overlap && path_total(crit) > 0) {
		/* the last exchange has no next steps to hide behind */
		tail = fmin(bp->exchange_s, H * bp->step_s);
		bp->train_s += tail;
		bp->train.transfer += tail * crit.bw / path_total(crit);
		bp->train.latency += tail * crit.lat / path_total(crit);
	}
}

/* The ring's other hosts: each in the topology, none twice in the ring
 * (a host serves one block: the pipeline's hosts list each once). */
static int
check_ring(const topo_topology *t, const pn_candidate *c, char *err)
{
	unsigned char in_ring[PN_MAX_HOSTS] = { 0 };
	int b, k;

	for (b = 0; b < c->blocks; b++)
		if (c->ring[b] >= 0 && c->ring[b] < t->nhosts)
			in_ring[c->ring[b]] = 1;
	for (b = 0; b < c->blocks; b++) {
		if (c->nalt[b] < 0 || c->nalt[b] > PN_MAX_SERVE - 1)
			return kn_error(err, KN_EINVAL, "block %d: %d other "
			    "serving hosts (at most %d)", b + 1, c->nalt[b],
			    PN_MAX_SERVE - 1);
		if (c->nalt[b] > 0 && c->ring[b] < 0)
			return kn_error(err, KN_EINVAL, "block %d: other serving "
			    "hosts but no ring host", b + 1);
		for (k = 0; k < c->nalt[b]; k++) {
			int h = c->alt[b][k];

			if (h < 0 || h >= t->nhosts)
				return kn_error(err, KN_EINVAL, "block %d: serving "
				    "host %d is not in the topology", b + 1, h);
			if (in_ring[h]++)
				return kn_error(err, KN_EINVAL, "host %s is twice "
				    "in the serving ring", t->hosts[h].name);
		}
	}
	return KN_OK;
}

static int
check_candidate(const topo_topology *t, const pr_spec *s, const pn_candidate *c,
    char *err)
{
	unsigned char used[PN_MAX_HOSTS] = { 0 };
	int b, r, replicated = 0, rc;

	if (c->blocks != s->blocks)
		return kn_error(err, KN_EINVAL, "the candidate has %d blocks, "
		    "the spec %d", c->blocks, s->blocks);
	if (c->steps < 1 || c->local_steps < 1 || c->streams < 1 ||
	    (unsigned)c->enc >= PN_ENCS)
		return kn_error(err, KN_EINVAL, "steps, local steps and streams "
		    "must be positive");
	for (b = 0; b < c->blocks; b++) {
		if (c->layers[b] < 1 || c->nrep[b] < 1 ||
		    c->nrep[b] > PN_MAX_REPLICAS)
			return kn_error(err, KN_EINVAL, "block %d: %d layers, %d "
			    "replicas", b + 1, c->layers[b], c->nrep[b]);
		replicated |= c->nrep[b] > 1;
		for (r = 0; r < c->nrep[b]; r++) {
			int h = c->host[b][r];

			if (h < 0 || h >= t->nhosts)
				return kn_error(err, KN_EINVAL, "block %d: host "
				    "%d is not in the topology", b + 1, h);
			if (used[h]++)
				return kn_error(err, KN_EINVAL, "host %s trains "
				    "two blocks or replicas",
				    t->hosts[h].name);
		}
	}
	if ((rc = check_ring(t, c, err)) != 0)
		return rc;
	if (replicated && c->steps % c->local_steps != 0)
		return kn_error(err, KN_EINVAL, "steps (%d) must be a multiple "
		    "of the local steps (%d) when a block has replicas",
		    c->steps, c->local_steps);
	return KN_OK;
}

/* One hop of the ring, sign times: frame bytes from a to b, nothing
 * when a is b. */
static void
hop_times(const topo_topology *t, int a, int b, double bytes,
    pn_breakdown *part, double sign)
{
	struct path p;

	if (a == b)
		return;
	p = one_way(t, a, b, bytes, 1);
	part->transfer += sign * p.bw;
	part->latency += sign * p.lat;
}

static void
hop(const topo_topology *t, int a, int b, double bytes, pn_breakdown *part)
{
	hop_times(t, a, b, bytes, part, 1);
}

double
pn_bt_passes(const pr_spec *s, int steps, int block, int outputs)
{
	int j, count = pr_spec_steps_of(s, steps, block);
	double sum = 0;

	/* a position is still masked at level t with probability t (all
	 * are at 1), and a step from t to next unmasks it with probability
	 * (t - next) / t: t - next in all, independently of the others */
	for (j = 0; j < count; j++)
		sum += 1 - pow(1 - (pr_spec_time_of(s, steps, block, j) -
		    pr_spec_time_of(s, steps, block, j + 1)), outputs);
	return sum;
}

/* The share of a full-window forward that one denoising pass costs, r
 * rows picked on average.  Where the CPU backend serves (its device line
 * starts "cpu:"), kn_model_predict_at runs the last layer's q,
 * projection, MLP and head on the picked rows only (its k and v on every
 * row; with one layer, that layer's q, k, v are layer 0's) and keeps
 * layer 0's q, k, v of the rows whose byte did not change; elsewhere a
 * pass is the whole forward. */
static double
served_pass_share(const topo_topology *t, int host, const pr_spec *s,
    int layers, double r)
{
	kn_model_shape sh = pr_spec_block_shape(s, 0);
	double d = sh.width, n = sh.window, row, full, part, qkv;

	if (strncmp(t->hosts[host].device, "cpu:", 4) != 0)
		return 1.0;
	r = fmin(fmax(r, 1.0), n);
	row = 12.0 * d * d + 2.0 * n * d;
	full = n * (layers * row + KN_VOCAB_OUT * d);
	qkv = layers > 1 ? 2.0 * d * d * n + d * d * r : 3.0 * d * d * n;
	part = n * (layers - 1) * row + qkv +
	    r * (9.0 * d * d + 2.0 * n * d + KN_VOCAB_OUT * d) -
	    3.0 * d * d * (n - r);
	return fmin(1.0, part / full);
}

/* Seconds of one denoising pass of a block of layers on host, r rows
 * picked on average.  Where the probe timed serving passes (one row and
 * every row of a window), between the two by r, scaled by the FLOPs of a
 * window from the probed shape to this one: the fixed costs of a pass
 * are in them.  Otherwise a window at the forward rate, in the share of
 * it that the pass computes. */
static double
served_pass_s(const topo_topology *t, const pr_spec *s, int host,
    int layers, double r)
{
	const topo_host *h = &t->hosts[host];
	kn_model_shape mine = pr_spec_block_shape(s, 0);
	double n = mine.window, f;

	if (!(h->serve_pass_one_s > 0 && h->serve_pass_window_s > 0))
		return n / pn_forward_rate(t, s, host, layers) *
		    served_pass_share(t, host, s, layers, r);
	r = fmin(fmax(r, 1.0), n);
	f = n > 1 ? (r - 1) / (n - 1) : 1.0;
	return (h->serve_pass_one_s + (h->serve_pass_window_s -
	    h->serve_pass_one_s) * f) * n * flops_per_position(mine, layers) /
	    (t->shape.window * measured_flops(t));
}

/* A pipeline frame's bytes: the window's symbols and mask, and the
 * frame's own. */
static double
frame_bytes(const pr_spec *s)
{
	return 2.0 * s->window + PN_FRAME_BYTES;
}

/* Seconds block b computes on host in one traversal: those of its share
 * of PN_SERVE_STEPS denoising steps that unmask a position, a forward
 * pass over the window each (bt_denoise_block skips the others). */
static double
block_serve_s(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, int output_bytes, int b, int host)
{
	double passes = pn_bt_passes(s, PN_SERVE_STEPS, b, output_bytes);
	/* the block unmasks its interval's share of the output */
	double picked = output_bytes * (s->cuts[b + 1] - s->cuts[b]);

	return passes * served_pass_s(t, s, host, c->layers[b],
	    passes > 0 ? picked / passes : 1.0);
}

/* The BlockTrain traversal: the host of block T first, down to block 1,
 * whose host sends the output back to the entry. */
static void
predict_serve_bt(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, pn_prediction *p)
{
	double busy[PN_MAX_HOSTS] = { 0 }, worst = 0;
	int b, T = c->blocks;

	memset(&p->bt, 0, sizeof(p->bt));
	for (b = T - 1; b >= 0; b--) {
		double pass = block_serve_s(t, s, c, p->output_bytes, b,
		    c->ring[b]);

		p->bt.part.compute += pass;
		busy[c->ring[b]] += pass;
		hop(t, c->ring[b], b > 0 ? c->ring[b - 1] : c->ring[T - 1],
		    frame_bytes(s), &p->bt.part);
	}
	for (b = 0; b < T; b++)
		worst = fmax(worst, busy[c->ring[b]]);
	p->bt.latency_s = p->bt.part.compute + p->bt.part.transfer +
	    p->bt.part.latency;
	p->bt.bytes_per_s = p->output_bytes / worst;
}

void
pn_serve_loss_of(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, const pn_prediction *p, int b, int k,
    pn_serve_loss *loss)
{
	int T = c->blocks, x = c->ring[b], y, entry, prev;
	double frame = frame_bytes(s);

	memset(loss, 0, sizeof(*loss));
	loss->block = b;
	loss->host = k == 0 ? x : c->alt[b][k - 1];
	if (k > 0) {
		/* not on a request's path while the ring host is up */
		loss->via = x;
		loss->latency_s = p->bt.latency_s;
		loss->part = p->bt.part;
		return;
	}
	if (c->nalt[b] == 0) {
		loss->fails = 1;
		loss->via = -1;
		return;
	}
	loss->via = y = c->alt[b][0];
	loss->part = p->bt.part;
	loss->part.compute += block_serve_s(t, s, c, p->output_bytes, b, y) -
	    block_serve_s(t, s, c, p->output_bytes, b, x);
	/* the lost host's way on, and the other host's */
	entry = b == T - 1 ? y : c->ring[T - 1];
	hop_times(t, x, b > 0 ? c->ring[b - 1] : c->ring[T - 1], frame,
	    &loss->part, -1);
	hop_times(t, y, b > 0 ? c->ring[b - 1] : entry, frame, &loss->part, 1);
	if (b < T - 1) {
		/* the re-send: the hop to the lost host was paid already */
		prev = c->ring[b + 1];
		hop_times(t, prev, y, frame, &loss->part, 1);
	} else if (T > 1) {
		/* the client re-sends to the next entry (its own link is not
		 * in the topology, as for every request), to which block 1's
		 * host returns the output */
		hop_times(t, c->ring[0], x, frame, &loss->part, -1);
		hop_times(t, c->ring[0], y, frame, &loss->part, 1);
	}
	loss->latency_s = loss->part.compute + loss->part.transfer +
	    loss->part.latency;
}

/* The ring host whose loss hurts most: a failed ring first (the first
 * in traversal order), else the slowest re-routed traversal. */
static void
predict_serve_loss(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, pn_prediction *p)
{
	pn_serve_loss l;
	int b, k, have = 0;

	for (b = c->blocks - 1; b >= 0; b--)
		for (k = 0; k <= c->nalt[b]; k++) {
			pn_serve_loss_of(t, s, c, p, b, k, &l);
			if (!have || (l.fails && !p->serve_lost.fails) ||
			    (!l.fails && !p->serve_lost.fails &&
			    l.latency_s > p->serve_lost.latency_s))
				p->serve_lost = l;
			have = 1;
		}
}

/* The causal LM split evenly by layers over the ring's hosts in order
 * (PROTOCOL.md): one traversal per output byte, one new position through
 * each host's layers, hidden states (d floats) between hosts. */
static void
predict_serve_ar(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, pn_prediction *p)
{
	int order[PR_MAX_BLOCKS], nh = 0, b, i, total = 0;
	double per_byte_cap = INFINITY, hidden = 4.0 * s->width +
	    PN_FRAME_BYTES;
	pn_breakdown one = { 0 };

	memset(&p->ar, 0, sizeof(p->ar));
	for (b = c->blocks - 1; b >= 0; b--) {
		total += c->layers[b];
		if (nh == 0 || order[nh - 1] != c->ring[b])
			order[nh++] = c->ring[b];
	}
	for (i = 0; i < nh; i++) {
		int lo = (int)((long)i * total / nh);
		int hi = (int)((long)(i + 1) * total / nh);
		kn_model_shape shape = pr_spec_block_shape(s, 0);
		double rate;

		shape.causal = 1;
		rate = t->hosts[order[i]].forward_positions_per_s *
		    measured_flops(t) / flops_per_position(shape, hi - lo);
		one.compute += 1 / rate;
		per_byte_cap = fmin(per_byte_cap, rate);
		if (nh > 1) {
			const topo_link *l = topo_link_at(t, order[i],
			    order[(i + 1) % nh]);
			double bytes = i + 1 < nh ? hidden : PN_FRAME_BYTES;

			hop(t, order[i], order[(i + 1) % nh], bytes, &one);
			per_byte_cap = fmin(per_byte_cap, l->stream_bytes_per_s / bytes);
		}
	}
	scale_breakdown(&p->ar.part, &one, p->output_bytes);
	p->ar.latency_s = p->ar.part.compute + p->ar.part.transfer +
	    p->ar.part.latency;
	p->ar.bytes_per_s = per_byte_cap;
}

int
pn_predict(const topo_topology *t, const pr_spec *s, const pn_model *m,
    const pn_candidate *c, pn_prediction *p, char *err)
{
	int b, rc;

	memset(p, 0, sizeof(*p));
	if ((rc = check_candidate(t, s, c, err)) != 0)
		return rc;
	for (b = 0; b < c->blocks; b++) {
		pn_block_pred *bp = &p->block[b];

		pn_predict_block(t, s, m, c, b, bp);
		p->positions_per_s += bp->positions_per_s;
		if (bp->train_s > p->train_s) {
			p->train_s = bp->train_s;
			p->slowest = b;
		}
		if (c->nrep[b] > 1)
			p->max_link_bytes_per_h = fmax(p->max_link_bytes_per_h,
			    bp->update_bytes * 3600 / bp->round_s);
	}
	p->output_bytes = s->window;
	p->train_lost.host = -1;
	p->serve_lost.host = p->serve_lost.via = -1;
	p->serve = 1;
	for (b = 0; b < c->blocks; b++)
		if (c->ring[b] < 0 || c->ring[b] >= t->nhosts)
			p->serve = 0;
	if (p->serve) {
		predict_serve_bt(t, s, c, p);
		predict_serve_ar(t, s, c, p);
		predict_serve_loss(t, s, c, p);
	}
	return KN_OK;
}

void
pn_predict_train_loss(const topo_topology *t, const pr_spec *s,
    const pn_model *m, const pn_candidate *c, pn_prediction *p)
{
	pn_train_loss *w = &p->train_lost;
	pn_candidate *d = malloc(sizeof(*d));
	pn_prediction *q = malloc(sizeof(*q));
	int b, r, i;

	memset(w, 0, sizeof(*w));
	w->host = -1;
	if (d == NULL || q == NULL)
		goto out;       /* nothing predicted: host stays -1 */
	for (b = 0; b < c->blocks; b++)
		for (r = 0; r < c->nrep[b]; r++) {
			pn_train_loss l = { c->host[b][r], b, 0, 0, 0, 0 };

			if (c->nrep[b] == 1) {
				l.halts = 1;
				l.positions_per_s = p->positions_per_s -
				    p->block[b].positions_per_s;
			} else {
				*d = *c;
				/* the others keep their order: the next one
				 * coordinates when replica 0 leaves */
				for (i = r; i + 1 < c->nrep[b]; i++)
					d->host[b][i] = c->host[b][i + 1];
				d->nrep[b]--;
				/* no serving */
				d->ring[0] = -1;
				memset(d->nalt, 0, sizeof(d->nalt));
				if (pn_predict(t, s, m, d, q, NULL) != 0)
					continue;
				l.round_s = q->block[b].round_s;
				l.positions_per_s = q->positions_per_s;
				l.train_s = q->train_s;
			}
			if (w->host < 0 || (l.halts && (!w->halts ||
			    l.positions_per_s < w->positions_per_s)) ||
			    (!l.halts && !w->halts && (l.train_s > w->train_s ||
			    (l.train_s == w->train_s &&
			    l.positions_per_s < w->positions_per_s))))
				*w = l;
		}
out:
	free(d);
	free(q);
}

void
pn_link_bytes(const topo_topology *t, const pn_candidate *c,
    const pn_prediction *p, double *bytes_per_h)
{
	int b, i, j;

	memset(bytes_per_h, 0, (size_t)t->nhosts * t->nhosts * sizeof(double));
	for (b = 0; b < c->blocks; b++) {
		const pn_block_pred *bp = &p->block[b];

		if (c->nrep[b] <= 1)
			continue;
		for (i = 0; i < c->nrep[b]; i++)
			for (j = 0; j < c->nrep[b]; j++)
				if (i != j)
					bytes_per_h[(size_t)c->host[b][i] * t->nhosts +
					    c->host[b][j]] = bp->update_bytes *
					    3600 / bp->round_s;
	}
}
