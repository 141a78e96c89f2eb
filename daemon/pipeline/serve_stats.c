/* What a pipeline host counts and how it shows it: the JSON status of GET
 * /v1/status (serve_http.c serves it on the pipeline port) and the
 * Prometheus text of /metrics, on a plain listener of its own on loopback
 * as a training daemon's (metrics_listen), each sample labelled with the
 * run and the host's place. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/net/http_server.h"
#include "daemon/core/log.h"
#include "daemon/core/prom.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"

/* The latency histogram's bucket bounds, seconds. */
static const double lat_le[SV_LAT_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
	10, 30
};

static const char *const err_names[SV_ERR_KINDS] = {
	"invalid", "refused", "limit", "timeout", "link", "pipeline",
	"client_gone", "shutdown", "memory"
};

static const char *const bytes_names[SV_BYTES_KINDS] = {
	"client", "http", "ring"
};

void
sv_stats_answered(sv *s, const request *r)
{
	double lat = kn_now() - r->arrived, compute = r->compute_us / 1e6;
	int b;

	for (b = 0; b < SV_LAT_BUCKETS && lat > lat_le[b]; b++)
		;
	s->st.lat_count[b]++;
	s->st.lat_sum += lat;
	if (lat > s->st.lat_max) {
		s->st.lat_max = lat;
		s->st.lat_max_compute = compute;
	}
	/* with the client's request and its answer */
	s->st.hops += (uint64_t)r->hops + 2;
	s->st.compute_s += compute;
	s->st.hop_s += lat > compute ? lat - compute : 0;
}

static uint64_t
answered(const sv *s)
{
	uint64_t n = 0;
	int b;

	for (b = 0; b <= SV_LAT_BUCKETS; b++)
		n += s->st.lat_count[b];
	return n;
}

/* The bound of the bucket that holds quantile q, in ms (the histogram's
 * resolution); -1 with no answers, +Inf's as the largest bound. */
static double
quantile_ms(const sv *s, double q)
{
	uint64_t n = answered(s), seen = 0;
	int b;

	if (n == 0)
		return -1;
	for (b = 0; b < SV_LAT_BUCKETS; b++) {
		seen += s->st.lat_count[b];
		if ((double)seen >= q * (double)n)
			return lat_le[b] * 1e3;
	}
	return lat_le[SV_LAT_BUCKETS - 1] * 1e3;
}

static void
kv_usage(sv *s, int *count, size_t *bytes)
{
	*count = 0;
	*bytes = 0;
	if (s->compute != NULL)
		sc_cache_usage(s->compute, count, bytes);
}

static json_t *
by_kind_json(const uint64_t *v, const char *const *names, int n)
{
	json_t *o = json_object();
	int k;

	for (k = 0; k < n; k++)
		json_object_set_new(o, names[k], json_integer((json_int_t)v[k]));
	return o;
}

static json_t *
latency_json(const sv *s)
{
	json_t *o = json_object(), *bk = json_array();
	uint64_t cum = 0, n = answered(s);
	int b;

	for (b = 0; b < SV_LAT_BUCKETS; b++) {
		cum += s->st.lat_count[b];
		json_array_append_new(bk, json_pack("{s:f,s:I}", "le_s",
		    lat_le[b], "count", (json_int_t)cum));
	}
	json_object_set_new(o, "count", json_integer((json_int_t)n));
	json_object_set_new(o, "sum_s", json_real(s->st.lat_sum));
	json_object_set_new(o, "buckets", bk);
	if (n > 0) {
		json_object_set_new(o, "mean_ms", json_real(s->st.lat_sum /
		    (double)n * 1e3));
		json_object_set_new(o, "p50_ms", json_real(quantile_ms(s, 0.5)));
		json_object_set_new(o, "p90_ms", json_real(quantile_ms(s, 0.9)));
		json_object_set_new(o, "p99_ms", json_real(quantile_ms(s, 0.99)));
		json_object_set_new(o, "max_ms", json_real(s->st.lat_max * 1e3));
		json_object_set_new(o, "max_compute_ms",
		    json_real(s->st.lat_max_compute * 1e3));
	}
	return o;
}

/* The host's place in the list: blocks, layers or experts. */
static void
place_json(const sv *s, json_t *o)
{
	const ph_host *me = &s->hosts.v[s->self];

	if (s->hosts.soma) {
		json_object_set_new(o, "experts", json_pack("[i,i]",
		    me->expert_lo, me->expert_hi));
		return;
	}
	json_object_set_new(o, "blocks", json_pack("[i,i]", me->block_hi,
	    me->block_lo));
	json_object_set_new(o, "layers", json_pack("[i,i]", me->layer_lo,
	    me->layer_hi));
	if (s->nlinks > 0)
		json_object_set_new(o, "next", json_string(s->hosts.v[
		    s->links[0].host].addr));
	json_object_set_new(o, "link_up", json_boolean(s->nlinks == 0 ||
	    sv_links_any_up(s)));
	if (s->nlinks > 1) {
		json_t *links = json_array();
		int i;

		for (i = 0; i < s->nlinks; i++)
			json_array_append_new(links, json_pack("{s:s,s:b}",
			    "addr", s->hosts.v[s->links[i].host].addr, "up",
			    s->links[i].c != NULL && s->links[i].c->up));
		json_object_set_new(o, "links", links);
	}
	json_object_set_new(o, "rerouted", json_integer((json_int_t)
	    s->st.rerouted));
}

char *
sv_status_json(sv *s, size_t *len)
{
	json_t *o = json_object(), *bytes;
	const conn *c;
	char *text;
	size_t kvb;
	int kvn, conns = 0;

	for (c = s->conns; c != NULL; c = c->next)
		conns += !c->outbound && !c->closing;
	kv_usage(s, &kvn, &kvb);
	json_object_set_new(o, "role", json_string(s->hosts.soma ?
	    "soma-host" : "pipeline-host"));
	json_object_set_new(o, "run_id", json_string(s->run_id));
	json_object_set_new(o, "addr", json_string(s->hosts.v[s->self].addr));
	if (s->tls != NULL)
		json_object_set_new(o, "id", json_string(tls_ctx_id(s->tls)));
	json_object_set_new(o, "host", json_integer(s->self + 1));
	json_object_set_new(o, "hosts", json_integer(s->hosts.n));
	json_object_set_new(o, "entry", json_boolean(s->entry));
	place_json(s, o);
	if (s->metrics != NULL)
		json_object_set_new(o, "metrics", json_string(s->metrics_addr));
	json_object_set_new(o, "uptime_s", json_real(kn_now() - s->started));
	json_object_set_new(o, "requests", json_pack("{s:I,s:I,s:I}",
	    "blocktrain", (json_int_t)s->st.requests[0], "ar",
	    (json_int_t)s->st.requests[1], "total",
	    (json_int_t)(s->st.requests[0] + s->st.requests[1])));
	json_object_set_new(o, "http_requests", json_integer(
	    (json_int_t)s->st.http_requests));
	json_object_set_new(o, "served", json_integer((json_int_t)s->served));
	json_object_set_new(o, "failed", json_integer((json_int_t)s->failed));
	json_object_set_new(o, "in_flight", json_integer(s->inflight));
	json_object_set_new(o, "connections", json_integer(conns));
	json_object_set_new(o, "errors", by_kind_json(s->st.errors, err_names,
	    SV_ERR_KINDS));
	json_object_set_new(o, "latency", latency_json(s));
	bytes = json_object();
	json_object_set_new(bytes, "in", by_kind_json(s->st.bytes_in,
	    bytes_names, SV_BYTES_KINDS));
	json_object_set_new(bytes, "out", by_kind_json(s->st.bytes_out,
	    bytes_names, SV_BYTES_KINDS));
	json_object_set_new(o, "bytes", bytes);
	json_object_set_new(o, "kv_cache", json_pack("{s:i,s:I}", "count",
	    kvn, "bytes", (json_int_t)kvb));
	json_object_set_new(o, "hops", json_integer((json_int_t)s->st.hops));
	if (s->st.hops > 0)
		json_object_set_new(o, "per_hop_ms", json_real(s->st.hop_s /
		    (double)s->st.hops * 1e3));
	json_object_set_new(o, "request_compute_s", json_real(s->st.compute_s));
	json_object_set_new(o, "jobs", json_integer((json_int_t)s->st.jobs));
	json_object_set_new(o, "job_compute_s", json_real(s->st.job_compute_s));
	json_object_set_new(o, "cancelled", json_integer(
	    (json_int_t)s->st.cancelled));
	json_object_set_new(o, "jobs_cancelled", json_integer(s->compute !=
	    NULL ? (json_int_t)sc_jobs_cancelled(s->compute) : 0));
	text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
	json_decref(o);
	*len = text != NULL ? strlen(text) : 0;
	return text;
}

/* One metric's HELP and TYPE lines. */
static void
head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP blocktrain_serve_%s %s\n# TYPE blocktrain_serve_%s "
	    "%s\n", name, help, name, type);
}

static void
metrics_latency(FILE *f, const sv *s)
{
	uint64_t cum = 0;
	int b;

	head(f, "latency_seconds", "histogram", "Requests answered at the "
	    "entry, from arrival to answer.");
	for (b = 0; b < SV_LAT_BUCKETS; b++) {
		cum += s->st.lat_count[b];
		fprintf(f, "blocktrain_serve_latency_seconds_bucket{le=\"%g\"} %"
		    PRIu64 "\n", lat_le[b], cum);
	}
	cum += s->st.lat_count[SV_LAT_BUCKETS];
	fprintf(f, "blocktrain_serve_latency_seconds_bucket{le=\"+Inf\"} %"
	    PRIu64 "\nblocktrain_serve_latency_seconds_sum %.6f\n"
	    "blocktrain_serve_latency_seconds_count %" PRIu64 "\n", cum,
	    s->st.lat_sum, cum);
	head(f, "latency_max_seconds", "gauge", "The slowest request answered "
	    "at the entry since the host started.");
	fprintf(f, "blocktrain_serve_latency_max_seconds %.6f\n",
	    s->st.lat_max);
}

static void
metrics_traffic(FILE *f, const sv *s)
{
	int k;

	head(f, "bytes_total", "counter", "Bytes read and written: clients' "
	    "frames, HTTP, and the ring's frames.");
	for (k = 0; k < SV_BYTES_KINDS; k++)
		fprintf(f, "blocktrain_serve_bytes_total{direction=\"in\","
		    "kind=\"%s\"} %" PRIu64 "\nblocktrain_serve_bytes_total{"
		    "direction=\"out\",kind=\"%s\"} %" PRIu64 "\n",
		    bytes_names[k], s->st.bytes_in[k], bytes_names[k],
		    s->st.bytes_out[k]);
	head(f, "errors_total", "counter", "Requests and client frames not "
	    "answered with an output, by kind.");
	for (k = 0; k < SV_ERR_KINDS; k++)
		fprintf(f, "blocktrain_serve_errors_total{kind=\"%s\"} %" PRIu64
		    "\n", err_names[k], s->st.errors[k]);
}

/* The run id and the host's place on every sample (prom.h): its line
 * in the host list and the blocks (experts) it serves, first-last. */
static void
host_labels(const sv *s, char *labels, size_t size)
{
	const ph_host *me = &s->hosts.v[s->self];
	char range[32];

	labels[0] = '\0';
	prom_label_append(labels, size, "run", s->run_id);
	prom_label_int(labels, size, "host", s->self + 1);
	if (s->hosts.soma) {
		snprintf(range, sizeof(range), "%d-%d", me->expert_lo,
		    me->expert_hi);
		prom_label_append(labels, size, "experts", range);
	} else {
		snprintf(range, sizeof(range), "%d-%d", me->block_lo,
		    me->block_hi);
		prom_label_append(labels, size, "blocks", range);
	}
}

char *
sv_metrics_text(sv *s, size_t *len)
{
	char *buf = NULL, *labelled, labels[PROM_LABELS_LEN];
	size_t kvb, n = 0;
	int kvn;
	FILE *f = open_memstream(&buf, &n);

	if (f == NULL)
		return NULL;
	kv_usage(s, &kvn, &kvb);
	head(f, "requests_total", "counter", "Generation requests that "
	    "arrived at this host, by mode.");
	fprintf(f, "blocktrain_serve_requests_total{mode=\"blocktrain\"} %"
	    PRIu64 "\nblocktrain_serve_requests_total{mode=\"ar\"} %" PRIu64
	    "\n", s->st.requests[0], s->st.requests[1]);
	head(f, "http_requests_total", "counter", "HTTP requests, any path.");
	fprintf(f, "blocktrain_serve_http_requests_total %" PRIu64 "\n",
	    s->st.http_requests);
	head(f, "answered_total", "counter", "Requests answered with their "
	    "output.");
	fprintf(f, "blocktrain_serve_answered_total %" PRIu64 "\n", s->served);
	head(f, "in_flight", "gauge", "Requests in flight at the entry.");
	fprintf(f, "blocktrain_serve_in_flight %d\n", s->inflight);
	metrics_latency(f, s);
	metrics_traffic(f, s);
	head(f, "kv_cache_bytes", "gauge", "Bytes of the KV caches held.");
	fprintf(f, "blocktrain_serve_kv_cache_bytes %zu\n", kvb);
	head(f, "kv_caches", "gauge", "KV caches held (ar requests).");
	fprintf(f, "blocktrain_serve_kv_caches %d\n", kvn);
	head(f, "hops_total", "counter", "Frames between client and hosts of "
	    "the requests answered at the entry.");
	fprintf(f, "blocktrain_serve_hops_total %" PRIu64 "\n", s->st.hops);
	head(f, "hop_seconds_total", "counter", "Latency less compute of "
	    "those requests: the time their hops took.");
	fprintf(f, "blocktrain_serve_hop_seconds_total %.6f\n", s->st.hop_s);
	head(f, "request_compute_seconds_total", "counter", "Compute on all "
	    "hosts of the requests answered at the entry.");
	fprintf(f, "blocktrain_serve_request_compute_seconds_total %.6f\n",
	    s->st.compute_s);
	head(f, "compute_seconds_total", "counter", "Compute of the jobs "
	    "this host ran.");
	fprintf(f, "blocktrain_serve_compute_seconds_total %.6f\n",
	    s->st.job_compute_s);
	head(f, "cancelled_total", "counter", "Requests at the entry whose "
	    "work was stopped before their answer: the client went or the "
	    "request timed out.");
	fprintf(f, "blocktrain_serve_cancelled_total %" PRIu64 "\n",
	    s->st.cancelled);
	head(f, "jobs_cancelled_total", "counter", "Compute jobs this host "
	    "dropped unfinished because their request ended.");
	fprintf(f, "blocktrain_serve_jobs_cancelled_total %" PRIu64 "\n",
	    s->compute != NULL ? sc_jobs_cancelled(s->compute) : 0);
	head(f, "rerouted_total", "counter", "Frames sent on to another host "
	    "of the next blocks after the one they went to failed.");
	fprintf(f, "blocktrain_serve_rerouted_total %" PRIu64 "\n",
	    s->st.rerouted);
	head(f, "uptime_seconds", "gauge", "Seconds since the host started.");
	fprintf(f, "blocktrain_serve_uptime_seconds %.3f\n", kn_now() -
	    s->started);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	host_labels(s, labels, sizeof(labels));
	labelled = prom_add_labels(buf, n, labels, len);
	free(buf);
	return labelled;
}

static void
on_metrics(void *ctx, const hs_request *req, hs_response *res)
{
	size_t len;
	char *body;

	if (strcmp(req->path, "/metrics") != 0) {
		hs_response_text(res, 404, "this listener serves /metrics only");
		return;
	}
	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
		hs_response_header(res, "Allow", "GET, HEAD");
		hs_response_text(res, 405, "%s is not allowed on /metrics",
		    req->method);
		return;
	}
	if ((body = sv_metrics_text(ctx, &len)) == NULL) {
		hs_response_text(res, 503, "out of memory");
		return;
	}
	hs_response_status(res, 200);
	hs_response_body_owned(res, "text/plain; version=0.0.4", body, len);
}

static int
listen_metrics(sv *s, const hs_config *mc, const char *host, int port,
    char *why)
{
	if (hs_server_new(&s->metrics, s->loop, mc, on_metrics, s, why) != 0)
		return -1;
	if (hs_server_listen(s->metrics, host, port, why) == 0)
		return 0;
	hs_server_close(s->metrics, NULL, NULL);
	s->metrics = NULL;
	return -1;
}

/* The default port taken: any free one, which the status names. */
int
sv_metrics_start(sv *s, char *err)
{
	const char *want = s->cfg.metrics_listen;
	char host[CF_HOST_LEN], why[HS_ERR_LEN];
	hs_config mc;
	int port = s->hosts.v[s->self].port;

	if (strcmp(want, "off") == 0)
		return KN_OK;
	if (want[0] == '\0')
		snprintf(host, sizeof(host), "127.0.0.1");
	else if (cf_parse_hostport(want, host, sizeof(host), &port) != 0)
		return kn_error(err, KN_EINVAL, "metrics_listen: '%s' is not "
		    "host:port (or off)", want);
	/* the default: the pipeline port + 2000, 0 (any) beyond the range */
	if (want[0] == '\0')
		port = port > 0 && port <= 63535 ? port + 2000 : 0;
	hs_config_defaults(&mc);
	mc.max_body_bytes = 1;          /* nothing to upload */
	mc.max_connections = 16;
	mc.max_connections_per_addr = 8;
	if (listen_metrics(s, &mc, host, port, why) != 0 && (want[0] != '\0' ||
	    port == 0 || listen_metrics(s, &mc, host, 0, why) != 0))
		return kn_error(err, KN_EIO, "metrics_listen: %s (set "
		    "metrics_listen to another host:port, or off)", why);
	snprintf(s->metrics_addr, sizeof(s->metrics_addr), strchr(host, ':') ?
	    "[%s]:%d" : "%s:%d", host, hs_server_port(s->metrics));
	if (!cf_is_loopback(host))
		log_warnx("pipeline: metrics on %s, not loopback: anyone who "
		    "reaches it reads the host's metrics", s->metrics_addr);
	return KN_OK;
}

void
sv_metrics_stop(sv *s)
{
	if (s->metrics != NULL)
		hs_server_close(s->metrics, NULL, NULL);
	s->metrics = NULL;
}
