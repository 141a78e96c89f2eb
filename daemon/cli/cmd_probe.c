/* shardmeter probe: asks every daemon of a peer list for its compute probe,
 * in passes over the list, and then its link probe (one daemon at a time,
 * so that no probe shares a core or a link with another), writes the
 * topology file
 * (proto/topology.h) and prints it as tables. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/peers.h"
#include "daemon/node/probe.h"
#include "daemon/node/probe_compute.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/topology.h"

#define POLL_US 100000          /* between GETs of a running probe */
/* A daemon that answers 429 to a compute probe (one per interval) is
 * asked again after the wait it names, this often at most, and waited
 * for this long at most each time. */
#define START_TRIES 5
#define MAX_WAIT_S 3600.0

struct probe_args {
	const char *peers, *out;
	int samples, streams;
	long long bytes;
	double seconds;
	int compute_seconds;    /* each half of a repetition */
	int compute_repeats;    /* of the compute probe, median reported */
};

/* One request to daemon p: its JSON answer in *out (the caller's) and the
 * status; 0 with err when it did not answer, or not in JSON. */
static long
ask(const peers_entry *p, const char *method, const char *path,
    json_t **out, char *err)
{
	struct cli_body b;
	json_error_t jerr;
	char why[KN_ERR_LEN];
	long st;

	*out = NULL;
	st = cli_peer_request(p, method, path, 1 << 20, 10000, &b, why);
	if (st == 0) {
		kn_error(err, KN_EIO, "cannot reach %s: %s", p->addr, why);
		return 0;
	}
	if ((*out = json_loadb(b.data ? b.data : "", b.len, 0, &jerr)) ==
	    NULL) {
		/* errors come as one line of text */
		kn_error(err, KN_EIO, "%s: HTTP %ld: %.*s", p->addr, st,
		    b.data ? (int)strcspn(b.data, "\n") : 0,
		    b.data ? b.data : "");
		st = 0;
	}
	free(b.data);
	return st;
}

static void
sleep_s(double s)
{
	if (s > 0)	/* usleep need not take a second or more */
		nanosleep(&(struct timespec){ (time_t)s,
		    (long)((s - (time_t)s) * 1e9) }, NULL);
}

/* Seconds until p takes another compute probe (it takes one every
 * probe_compute_interval_s): next_in_s of its last result, 1 when it
 * gives none. */
static double
next_compute_in(const peers_entry *p)
{
	char err[KN_ERR_LEN];
	json_t *o;
	double wait = 1;

	if (ask(p, "GET", "/v1/probe/compute", &o, err) != 0 &&
	    json_is_number(json_object_get(o, "next_in_s")))
		wait = json_number_value(json_object_get(o, "next_in_s"));
	json_decref(o);
	if (wait > MAX_WAIT_S)
		wait = MAX_WAIT_S;
	return wait + 0.2;
}

/* Starts the probe of what (compute or links) on p with query: 0, or
 * KN_EIO with the reason in err.  A daemon that had a compute probe
 * less than its interval ago answers 429: the probe waits and asks
 * again. */
static int
start_probe(const peers_entry *p, const char *what, const char *query,
    char *err)
{
	char path[256], why[KN_ERR_LEN];
	struct cli_body b;
	double wait;
	long st;
	int tries;

	snprintf(path, sizeof(path), "/v1/probe/%s%s%s", what,
	    query[0] ? "?" : "", query);
	for (tries = 0;; tries++) {
		st = cli_peer_request(p, "POST", path, 1 << 20, 10000, &b, why);
		if (st == 202) {
			free(b.data);
			return KN_OK;
		}
		if (st != 429 || tries >= START_TRIES)
			break;
		free(b.data);
		wait = next_compute_in(p);
		fprintf(stderr, "probe: %s takes one %s probe at a time and "
		    "one a while: waiting %.0f s\n", p->addr, what, wait);
		sleep_s(wait);
	}
	if (st == 0)
		kn_error(err, KN_EIO, "cannot reach %s: %s", p->addr, why);
	else    /* errors come as one line of text */
		kn_error(err, KN_EIO, "%s refused the %s probe: HTTP %ld: %.*s",
		    p->addr, what, st, b.data ? (int)strcspn(b.data, "\n") : 0,
		    b.data ? b.data : "");
	free(b.data);
	return KN_EIO;
}

/* Waits up to limit seconds for the result of a started probe: the JSON
 * (the caller's), or NULL with the reason in err. */
static json_t *
wait_probe(const peers_entry *p, const char *what, double limit, char *err)
{
	char path[256];
	json_t *o = NULL;
	double until = kn_now() + limit;
	long st;

	snprintf(path, sizeof(path), "/v1/probe/%s", what);
	for (;;) {
		json_decref(o);
		usleep(POLL_US);
		if ((st = ask(p, "GET", path, &o, err)) != 202)
			break;
		if (kn_now() > until) {
			kn_error(err, KN_EIO, "%s: the %s probe took more than "
			    "%.0f s", p->addr, what, limit);
			json_decref(o);
			return NULL;
		}
	}
	if (st == 200)
		return o;
	if (st != 0)
		kn_error(err, KN_EIO, "%s: the %s probe failed (HTTP %ld): %s",
		    p->addr, what, st, json_string_value(json_object_get(o,
		    "error")) ? json_string_value(json_object_get(o, "error")) :
		    "no reason given");
	json_decref(o);
	return NULL;
}

/* Starts the probe of what on p with query, and waits up to limit
 * seconds for its result: the JSON (the caller's), or NULL with the
 * reason in err.  The first poll waits quiet seconds: each poll is a TLS
 * handshake on the host, and with ten of them a second during the
 * compute probe, the plan bench's hosts (held to 10 to 25 % of a core)
 * probed slow, and 8 of 10 training times were then predicted long. */
static json_t *
run_probe(const peers_entry *p, const char *what, const char *query,
    double quiet, double limit, char *err)
{
	if (start_probe(p, what, query, err) != 0)
		return NULL;
	sleep_s(quiet);
	return wait_probe(p, what, limit, err);
}

static double
num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* A host's compute samples, one a pass of the compute probe; the
 * medians go into the topology. */
struct compute_samples {
	int n, nshared;
	double train[PCM_MAX_REPEATS], forward[PCM_MAX_REPEATS];
	double one[PCM_MAX_REPEATS], all[PCM_MAX_REPEATS];
	/* training with the other hosts of its machine at once */
	double shared[PCM_MAX_REPEATS];
	/* CPU seconds per second of its training (CPU hosts only) */
	int nshare;
	double share[PCM_MAX_REPEATS];
	/* CPU seconds per parameter to encode an update and to merge one */
	int ncodec;
	double encode[PCM_MAX_REPEATS], merge[PCM_MAX_REPEATS];
};

static void
low_high(const double *v, int n, double *lo, double *hi)
{
	int k;

	*lo = *hi = v[0];
	for (k = 1; k < n; k++) {
		*lo = v[k] < *lo ? v[k] : *lo;
		*hi = v[k] > *hi ? v[k] : *hi;
	}
}

/* The medians of a host's passes into h, and what the passes ranged
 * over into its notes (the file has no field for it; plan reads the
 * medians only) and on stderr: a host whose range is wide measures
 * unsteadily. */
static int
take_medians(topo_host *h, struct compute_samples *c, char *err)
{
	double tlo, thi, flo, fhi;
	char text[384];

	low_high(c->train, c->n, &tlo, &thi);
	low_high(c->forward, c->n, &flo, &fhi);
	h->train_positions_per_s = pcm_median(c->train, c->n);
	h->forward_positions_per_s = pcm_median(c->forward, c->n);
	h->serve_pass_one_s = pcm_median(c->one, c->n);
	h->serve_pass_window_s = pcm_median(c->all, c->n);
	h->train_shared = c->nshared > 0 ? pcm_median(c->shared, c->nshared) :
	    0;
	h->cpu_share = c->nshare > 0 ? pcm_median(c->share, c->nshare) : 0;
	h->encode_cpu = c->ncodec > 0 ? pcm_median(c->encode, c->ncodec) : 0;
	h->merge_cpu = c->ncodec > 0 ? pcm_median(c->merge, c->ncodec) : 0;
	if (c->n < 2)
		return KN_OK;
	snprintf(text, sizeof(text), "compute probe: medians of %d "
	    "repetitions, one a pass over the hosts; training ranged %.0f to "
	    "%.0f positions/s, forward %.0f to %.0f", c->n, tlo, thi, flo,
	    fhi);
	if (c->nshared > 0) {
		double slo, shi;
		size_t len = strlen(text);

		low_high(c->shared, c->nshared, &slo, &shi);
		snprintf(text + len, sizeof(text) - len, "; with the other "
		    "hosts of its machine, training %.0f to %.0f", slo, shi);
	}
	fprintf(stderr, "probe:   %s: %s\n", h->name, text);
	free(h->notes);
	if ((h->notes = strdup(text)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return KN_OK;
}

/* FLOPs per position of a topology shape, which blocks of their own
 * layers compare by. */
static double
shape_flops(const topo_shape *s)
{
	kn_model_shape m = topo_model_shape(s);

	return kn_model_flops_per_window(&m) / m.window;
}

/* The compute answer of host i into t (the shape of the first that
 * answered).  A host whose block has layers of its own ([model] layers)
 * has its rates given at t's shape, scaled by FLOPs per position as the
 * planner scales them (plan/cost.c). */
static int
take_compute(topo_topology *t, int i, json_t *o, char *err)
{
	topo_host *h = &t->hosts[i];
	json_t *sh = json_object_get(o, "shape");
	topo_shape s = { (int)json_integer_value(json_object_get(sh, "width")),
	    (int)json_integer_value(json_object_get(sh, "heads")),
	    (int)json_integer_value(json_object_get(sh, "layers")),
	    (int)json_integer_value(json_object_get(sh, "window")),
	    (int)json_integer_value(json_object_get(sh, "batch")) };
	const char *dev = json_string_value(json_object_get(o, "device"));
	const char *machine = json_string_value(json_object_get(o,
	    "machine"));
	double scale = 1;

	if (t->shape.width == 0)
		t->shape = s;   /* the first that answered */
	if (s.layers != t->shape.layers && s.layers > 0) {
		scale = shape_flops(&s) / shape_flops(&t->shape);
		s.layers = t->shape.layers;
	}
	if (memcmp(&s, &t->shape, sizeof(s)) != 0)
		return kn_error(err, KN_EINVAL, "%s trains another block shape "
		    "(width %d, %d layers, window %d, batch %d) than the daemons "
		    "before it: do they run one spec?", h->name, s.width,
		    s.layers, s.window, s.batch);
	snprintf(h->device, sizeof(h->device), "%s", dev ? dev : "?");
	/* a daemon of before it gives none: on a machine of its own */
	snprintf(h->machine, sizeof(h->machine), "%s", machine ? machine :
	    "");
	h->memory_bytes = num(o, "memory_bytes");
	h->train_positions_per_s = num(o, "train_positions_per_s") * scale;
	h->forward_positions_per_s = num(o, "forward_positions_per_s") * scale;
	/* times, so the other way; a daemon of before them gives none (0) */
	h->serve_pass_one_s = num(o, "serve_pass_one_s") / scale;
	h->serve_pass_window_s = num(o, "serve_pass_window_s") / scale;
	/* a GPU host's daemon gives none: its loop takes no time of the
	 * device's */
	h->cpu_share = num(o, "cpu_share");
	h->encode_cpu = num(o, "encode_cpu_s_per_param");
	h->merge_cpu = num(o, "merge_cpu_s_per_param");
	return KN_OK;
}

/* The link answer of host from into t's row from. */
static int
take_links(topo_topology *t, int from, json_t *o, double *send, double *take,
    char *err)
{
	json_t *arr = json_object_get(o, "links"), *l;
	size_t k;

	json_array_foreach(arr, k, l) {
		const char *to = json_string_value(json_object_get(l, "to"));
		const char *why = json_string_value(json_object_get(l, "error"));
		int j = to ? topo_find(t, to) : -1;
		topo_link *d = topo_link_at(t, from, j);

		if (why != NULL)
			return kn_error(err, KN_EIO, "link %s -> %s: %s",
			    t->hosts[from].name, to ? to : "?", why);
		if (d == NULL)
			return kn_error(err, KN_EINVAL, "%s measured a link to %s, "
			    "not in the peer list", t->hosts[from].name,
			    to ? to : "?");
		d->rtt_ms = num(l, "rtt_ms");
		d->rtt_spread_ms = num(l, "rtt_spread_ms");
		d->samples = (int)json_integer_value(json_object_get(l,
		    "samples"));
		d->stream_bytes_per_s = num(l, "stream_bytes_per_s");
		d->streams = (int)json_integer_value(json_object_get(l,
		    "streams"));
		d->multi_bytes_per_s = num(l, "multi_bytes_per_s");
		send[(size_t)from * t->nhosts + j] = num(l,
		    "send_cpu_s_per_byte");
		take[(size_t)from * t->nhosts + j] = num(l,
		    "take_cpu_s_per_byte");
		fprintf(stderr, "probe:   %s -> %s: rtt %.3f ms (iqr %.3f), "
		    "%.1f MB/s one stream, %.1f MB/s %d streams; the loops' "
		    "CPU %.1f ns a byte sent, %.1f taken\n",
		    t->hosts[from].name, to, d->rtt_ms, d->rtt_spread_ms,
		    d->stream_bytes_per_s / 1e6, d->multi_bytes_per_s / 1e6,
		    d->streams, 1e9 * send[(size_t)from * t->nhosts + j],
		    1e9 * take[(size_t)from * t->nhosts + j]);
	}
	return KN_OK;
}

/* Each host's exchange_cpu: the median CPU a byte its loop sent (row
 * from of send) plus the median a byte it took (column to of take), over
 * the links that gave both; 0 where one is missing (daemons of before
 * them). */
static void
take_exchange_cpu(topo_topology *t, const double *send, const double *take)
{
	double *v = malloc((size_t)t->nhosts * sizeof(*v));
	double out, in;
	int i, j, n;

	for (i = 0; i < t->nhosts && v != NULL; i++) {
		for (j = n = 0; j < t->nhosts; j++)
			if (send[(size_t)i * t->nhosts + j] > 0)
				v[n++] = send[(size_t)i * t->nhosts + j];
		out = n > 0 ? pcm_median(v, n) : 0;
		for (j = n = 0; j < t->nhosts; j++)
			if (take[(size_t)j * t->nhosts + i] > 0)
				v[n++] = take[(size_t)j * t->nhosts + i];
		in = n > 0 ? pcm_median(v, n) : 0;
		t->hosts[i].exchange_cpu = out > 0 && in > 0 ? out + in : 0;
	}
	free(v);
}

/* ---- the tables ---- */

static void
print_hosts(const topo_topology *t)
{
	int i;

	printf("%-3s %-22s %-40s %10s %12s %12s %12s %13s\n", "#", "host",
	    "device", "free GiB", "train pos/s", "shared", "fwd pos/s",
	    "pass ms 1/all");
	for (i = 0; i < t->nhosts; i++) {
		const topo_host *h = &t->hosts[i];
		char pass[32] = "-";    /* a daemon of before the pass times */
		char shared[32] = "-";  /* on a machine of its own */

		if (h->serve_pass_one_s > 0 && h->serve_pass_window_s > 0)
			snprintf(pass, sizeof(pass), "%.3f/%.3f",
			    1e3 * h->serve_pass_one_s,
			    1e3 * h->serve_pass_window_s);
		if (h->train_shared > 0)
			snprintf(shared, sizeof(shared), "%.0f",
			    h->train_shared);
		printf("%-3d %-22s %-40.40s %10.1f %12.0f %12s %12.0f %13s\n",
		    i, h->name, h->device, h->memory_bytes /
		    (1024.0 * 1024 * 1024), h->train_positions_per_s, shared,
		    h->forward_positions_per_s, pass);
	}
}

/* One matrix, rows from and columns to, each cell by cell(). */
static void
print_matrix(const topo_topology *t, const char *title,
    void (*cell)(const topo_link *l, char *buf, size_t len))
{
	char buf[64];
	int i, j;

	printf("\n%s\n%-8s", title, "from\\to");
	for (j = 0; j < t->nhosts; j++)
		printf(" %16d", j);
	putchar('\n');
	for (i = 0; i < t->nhosts; i++) {
		printf("%-8d", i);
		for (j = 0; j < t->nhosts; j++) {
			const topo_link *l = topo_link_at(t, i, j);

			if (l == NULL)
				snprintf(buf, sizeof(buf), "-");
			else
				cell(l, buf, sizeof(buf));
			printf(" %16s", buf);
		}
		putchar('\n');
	}
}

static void
rtt_cell(const topo_link *l, char *buf, size_t len)
{
	snprintf(buf, len, "%.3f+-%.3f", l->rtt_ms, l->rtt_spread_ms / 2);
}

static void
rate_cell(const topo_link *l, char *buf, size_t len)
{
	snprintf(buf, len, "%.0f/%.0f", l->stream_bytes_per_s / 1e6,
	    l->multi_bytes_per_s / 1e6);
}

static void
print_topology(const topo_topology *t)
{
	int streams = t->nhosts > 1 ? topo_link_at(t, 0, 1)->streams : 0;
	char title[128];

	printf("measured %s at width %d, %d heads, %d layers, window %d, "
	    "batch %d\n\n", t->measured_at, t->shape.width, t->shape.heads,
	    t->shape.layers, t->shape.window, t->shape.batch);
	print_hosts(t);
	if (t->nhosts < 2)
		return;
	print_matrix(t, "round trip, ms (median +- half the interquartile "
	    "range)", rtt_cell);
	snprintf(title, sizeof(title), "throughput, MB/s (one stream / %d "
	    "streams)", streams);
	print_matrix(t, title, rate_cell);
}

/* ---- the command ---- */

/* Pass k's compute probe of the hosts of each machine at once, where a
 * machine has more than one that answered every pass so far: what each
 * trains at while the others do, as in a run that trains them all
 * (daemons of one machine share its caches, memory bandwidth and, for
 * CPU hosts, cores).  The number that failed. */
static int
shared_pass(const struct probe_args *a, const peers_list *pl,
    topo_topology *t, struct compute_samples *c, const char *query, int k)
{
	char err[KN_ERR_LEN];
	int i, j, failed = 0, *started;
	json_t *o;

	if ((started = calloc((size_t)pl->n, sizeof(*started))) == NULL) {
		fprintf(stderr, "shardmeter probe: out of memory\n");
		return pl->n;
	}
	for (i = 0; i < pl->n; i++) {
		int members = 0, done_before = 0;

		if (c[i].n != k + 1 || t->hosts[i].machine[0] == '\0')
			continue;
		for (j = 0; j < pl->n; j++)
			if (c[j].n == k + 1 && strcmp(t->hosts[j].machine,
			    t->hosts[i].machine) == 0) {
				members++;
				done_before |= j < i;
			}
		if (members < 2 || done_before)
			continue;       /* alone, or its machine's pass is done */
		fprintf(stderr, "probe: compute of the %d hosts of machine %s "
		    "at once (%d of %d)...\n", members, t->hosts[i].machine,
		    k + 1, a->compute_repeats);
		for (j = i; j < pl->n; j++) {
			if (c[j].n != k + 1 || strcmp(t->hosts[j].machine,
			    t->hosts[i].machine) != 0)
				continue;
			if (start_probe(&pl->v[j], "compute", query, err) != 0) {
				fprintf(stderr, "shardmeter probe: %s\n", err);
				failed++;
				continue;
			}
			started[j] = 1;
		}
		sleep_s(3.0 * a->compute_seconds);
		for (j = i; j < pl->n; j++) {
			if (!started[j])
				continue;
			started[j] = 0;
			o = wait_probe(&pl->v[j], "compute", 2 * PB_HOLD_TIMEOUT +
			    3 * PB_MAX_COMPUTE_SECONDS, err);
			if (o == NULL || take_compute(t, j, o, err) != 0) {
				fprintf(stderr, "shardmeter probe: %s\n", err);
				failed++;
			} else
				c[j].shared[c[j].nshared++] =
				    t->hosts[j].train_positions_per_s;
			json_decref(o);
		}
	}
	free(started);
	return failed;
}

/* Both probes of every daemon into t; the number of daemons that
 * failed, each said on stderr. */
static int
probe_all(const struct probe_args *a, const peers_list *pl,
    topo_topology *t)
{
	char query[256], err[KN_ERR_LEN], shared[64];
	struct compute_samples *c;
	int i, k, failed = 0;
	double *send, *take;
	topo_host *h;
	json_t *o;

	if ((c = calloc((size_t)pl->n, sizeof(*c))) == NULL) {
		fprintf(stderr, "shardmeter probe: out of memory\n");
		return pl->n;
	}
	/* one repetition a host a pass, the passes in turn: a host's
	 * repetitions lie a pass apart, so a slow spell of the machine
	 * shorter than that moves one of them and the median drops it.
	 * Asked for all at once, the plan bench's quota hosts now and then
	 * probed 15-25 % slow throughout and every time of theirs was
	 * predicted long (worst errors 0.28 and 0.30). */
	snprintf(query, sizeof(query), "seconds=%d&repeats=1",
	    a->compute_seconds);
	for (k = 0; k < a->compute_repeats; k++) {
		for (i = 0; i < pl->n; i++) {
			if (c[i].n < k)
				continue;       /* failed in an earlier pass */
			fprintf(stderr, "probe: compute of %s (%d of %d)...\n",
			    pl->v[i].addr, k + 1, a->compute_repeats);
			/* train, forward and serving passes, each
			 * compute_seconds */
			o = run_probe(&pl->v[i], "compute", query, 3.0 *
			    a->compute_seconds, 2 * PB_HOLD_TIMEOUT + 3 *
			    PB_MAX_COMPUTE_SECONDS, err);
			if (o == NULL || take_compute(t, i, o, err) != 0) {
				fprintf(stderr, "shardmeter probe: %s\n", err);
				failed++;
				json_decref(o);
				continue;
			}
			h = &t->hosts[i];
			c[i].train[c[i].n] = h->train_positions_per_s;
			c[i].forward[c[i].n] = h->forward_positions_per_s;
			c[i].one[c[i].n] = h->serve_pass_one_s;
			c[i].all[c[i].n] = h->serve_pass_window_s;
			if (h->cpu_share > 0)
				c[i].share[c[i].nshare++] = h->cpu_share;
			if (h->encode_cpu > 0 && h->merge_cpu > 0) {
				c[i].encode[c[i].ncodec] = h->encode_cpu;
				c[i].merge[c[i].ncodec++] = h->merge_cpu;
			}
			c[i].n++;
			json_decref(o);
		}
		failed += shared_pass(a, pl, t, c, query, k);
	}
	for (i = 0; i < pl->n; i++) {
		if (c[i].n < a->compute_repeats)
			continue;
		h = &t->hosts[i];
		if (take_medians(h, &c[i], err) != 0) {
			fprintf(stderr, "shardmeter probe: %s\n", err);
			failed++;
			continue;
		}
		if (h->train_shared > 0)
			snprintf(shared, sizeof(shared), " (%.0f with its "
			    "machine's other hosts)", h->train_shared);
		else
			shared[0] = '\0';      /* alone on its machine */
		fprintf(stderr, "probe:   %s: %.0f positions/s training%s, %.0f "
		    "forward, a serving pass %.3f to %.3f ms, %.1f GiB free "
		    "(%s)\n", h->name, h->train_positions_per_s, shared,
		    h->forward_positions_per_s, 1e3 * h->serve_pass_one_s,
		    1e3 * h->serve_pass_window_s,
		    h->memory_bytes / (1024.0 * 1024 * 1024), h->device);
	}
	free(c);
	snprintf(query, sizeof(query), "samples=%d&bytes=%lld&streams=%d&"
	    "seconds=%g", a->samples, a->bytes, a->streams, a->seconds);
	send = calloc((size_t)pl->n * (size_t)pl->n, sizeof(*send));
	take = calloc((size_t)pl->n * (size_t)pl->n, sizeof(*take));
	if (send == NULL || take == NULL) {
		free(send);
		free(take);
		fprintf(stderr, "shardmeter probe: out of memory\n");
		return failed + pl->n;
	}
	for (i = 0; i < pl->n && pl->n > 1; i++) {
		fprintf(stderr, "probe: links from %s...\n", pl->v[i].addr);
		o = run_probe(&pl->v[i], "links", query, 0, a->seconds + 30,
		    err);
		if (o == NULL || take_links(t, i, o, send, take, err) != 0) {
			fprintf(stderr, "shardmeter probe: %s\n", err);
			failed++;
		}
		json_decref(o);
	}
	take_exchange_cpu(t, send, take);
	free(send);
	free(take);
	return failed;
}

static int
parse(const struct cmd_entry *self, struct probe_args *a, int argc,
    char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "out", required_argument, NULL, 'o' },
		{ "samples", required_argument, NULL, 's' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "streams", required_argument, NULL, 'k' },
		{ "seconds", required_argument, NULL, 'n' },
		{ "compute-seconds", required_argument, NULL, 'c' },
		{ "compute-repeats", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch, v;
	char *end;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': a->peers = optarg; break;
		case 'o': a->out = optarg; break;
		case 's':
			if (cli_parse_int("probe", "samples", optarg, 1,
			    PB_MAX_SAMPLES, &a->samples) != 0)
				return 2;
			break;
		case 'k':
			if (cli_parse_int("probe", "streams", optarg, 1,
			    PB_MAX_STREAMS, &a->streams) != 0)
				return 2;
			break;
		case 'b':
			a->bytes = strtoll(optarg, &end, 10);
			if (end == optarg || *end || a->bytes < 1 ||
			    a->bytes > (long long)PB_MAX_BYTES) {
				fprintf(stderr, "shardmeter probe: --bytes takes 1 to "
				    "%zu, not '%s'\n", PB_MAX_BYTES, optarg);
				return 2;
			}
			break;
		case 'n':
			if (cli_parse_int("probe", "seconds", optarg, 1,
			    (int)PB_MAX_SECONDS, &v) != 0)
				return 2;
			a->seconds = v;
			break;
		case 'c':
			if (cli_parse_int("probe", "compute-seconds", optarg, 1,
			    (int)PB_MAX_COMPUTE_SECONDS,
			    &a->compute_seconds) != 0)
				return 2;
			break;
		case 'r':
			if (cli_parse_int("probe", "compute-repeats", optarg, 1,
			    PCM_MAX_REPEATS, &a->compute_repeats) != 0)
				return 2;
			break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (a->peers == NULL || a->out == NULL) {
		fprintf(stderr, "shardmeter probe: --peers FILE and --out FILE "
		    "are required\n");
		return 2;
	}
	if (a->bytes < a->streams) {
		fprintf(stderr, "shardmeter probe: --bytes (%lld) is fewer than "
		    "--streams (%d)\n", a->bytes, a->streams);
		return 2;
	}
	return CLI_CONTINUE;
}

static int
probe_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct probe_args a = { NULL, NULL, PB_DEFAULT_SAMPLES,
		PB_DEFAULT_STREAMS, (long long)PB_DEFAULT_BYTES,
		PB_DEFAULT_SECONDS, (int)PB_DEFAULT_COMPUTE_SECONDS,
		PB_DEFAULT_COMPUTE_REPEATS };
	char err[PR_ERR_LEN];
	topo_topology t;
	peers_list pl;
	time_t now;
	int rc, i;

	if ((rc = parse(self, &a, argc, argv)) != CLI_CONTINUE)
		return rc;
	if (peers_load(&pl, a.peers, err) != 0) {
		fprintf(stderr, "shardmeter probe: %s\n", err);
		return 1;
	}
	if (pl.n == 0 || topo_init(&t, pl.n, err) != 0) {
		fprintf(stderr, "shardmeter probe: %s: %s\n", a.peers, pl.n ?
		    err : "no daemon lines");
		peers_free(&pl);
		return 1;
	}
	for (i = 0; i < pl.n; i++) {
		snprintf(t.hosts[i].name, sizeof(t.hosts[i].name), "%.127s",
		    pl.v[i].addr);
		snprintf(t.hosts[i].address, sizeof(t.hosts[i].address), "%.127s",
		    pl.v[i].addr);
		snprintf(t.hosts[i].id, sizeof(t.hosts[i].id), "%s",
		    pl.v[i].id_text);
	}
	rc = probe_all(&a, &pl, &t);
	now = time(NULL);
	strftime(t.measured_at, sizeof(t.measured_at), "%Y-%m-%dT%H:%M:%SZ",
	    gmtime(&now));
	if (rc > 0)
		fprintf(stderr, "shardmeter probe: %d probe(s) failed: %s not "
		    "written\n", rc, a.out);
	else if (topo_save(&t, a.out, err) != 0) {
		fprintf(stderr, "shardmeter probe: %s: %s\n", a.out, err);
		rc = 1;
	} else {
		fprintf(stderr, "probe: wrote %s\n", a.out);
		print_topology(&t);
	}
	topo_free(&t);
	peers_free(&pl);
	return rc > 0 ? 1 : 0;
}

const struct cmd_entry cmd_probe_entry = {
	.name = "probe",
	.summary = "measure the daemons' compute and links into a topology "
	    "file",
	.usage = "usage: shardmeter probe --peers FILE --out TOPOLOGY.json "
	    "[--samples S]\n       [--bytes B] [--streams K] [--seconds N] "
	    "[--compute-seconds C]\n       [--compute-repeats R]\n"
	    "Asks every daemon of the peer list, one at a time, to time "
	    "training steps,\n"
	    "forward passes of its block's shape and serving passes of "
	    "one window (C\n"
	    "seconds each, default 1, at most 10: longer evens out a "
	    "host whose CPU comes\n"
	    "in quota periods; training waits meanwhile; a daemon takes "
	    "at most its\n"
	    "probe_compute_max_s, default 2), in R passes "
	    "over the daemons\n"
	    "(default 3, at most 9; a host's timings lie a pass apart, "
	    "so a slow spell\n"
	    "moves one of them), the median kept and the range noted in "
	    "the host's notes.\n"
	    "Daemons that share a machine are also timed all at once, "
	    "once a pass: the\n"
	    "training rate each keeps while the others train, which "
	    "plan uses.  Then each\n"
	    "measures its links to every other daemon: the median and "
	    "interquartile range\n"
	    "of S round trips (default 20), one stream of B bytes "
	    "(default 16777216, at\n"
	    "most 67108864) and K streams of B/K bytes each (default 4, "
	    "at most 16),\n"
	    "within N seconds per daemon (default 60).  Each host also "
	    "gives the CPU its\n"
	    "training gets a second (CPU hosts), what encoding and "
	    "merging an update of\n"
	    "its block costs, and its loop's CPU a byte sent and taken "
	    "over those\n"
	    "transfers: a round's own work, which plan takes out of its "
	    "steps.  Writes the\n"
	    "topology file for 'shardmeter plan' (shardmeter(1) gives "
	    "its format) and\n"
	    "prints it as tables.\n"
	    "Probes are refused while a round is in progress.  A daemon "
	    "takes one compute\n"
	    "probe every probe_compute_interval_s (default 60) and "
	    "answers 429 sooner:\n"
	    "the probe then waits as long as the daemon says.\n",
	.exec = probe_exec
};
