/* shardmeter dashboard: one page in the operator's browser that follows a
 * run live.  A libuv loop polls every daemon's /v1/status over the
 * authenticated links (the operator's identity, each daemon pinned to its
 * listed id, through the daemon's own libcurl-multi client), keeps the
 * history in memory (dashboard_history.c), and serves the page and its
 * JSON over plain HTTP on loopback with the daemon's HTTP server. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <uv.h>

#include "daemon/cli/cmd.h"
#include "daemon/cli/dashboard_history.h"
#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/identity.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "daemon/net/tls.h"
#include "kernels/error.h"

#define DASH_DEFAULT_LISTEN "127.0.0.1:8390"
#define DASH_STATUS_MAX ((size_t)4 << 20)

/* The page (dashboard.html), made into a C string at build time, and
 * the chart library it draws with: Chart.js, from Debian's
 * libjs-chart.js (configure finds it), built in the same way so that the
 * page loads nothing from the network. */
extern const char dash_page_html[];
extern const unsigned char dash_chartjs[];
extern const size_t dash_chartjs_len;

/* One daemon polled. */
struct dash_target {
	struct dash *dash;
	int index;
	int kind;                       /* DASH_TRAIN or DASH_SERVE */
	char url[CF_HOST_LEN + 64];
	int has_id;
	uint8_t id[ID_BYTES];
	int in_flight;
};

struct dash {
	uv_loop_t *loop;
	hs_server *http;
	hc_client *client;
	tls_ctx *tls;
	uv_timer_t tick;
	uv_signal_t sigint, sigterm;
	dash_history *hist;
	struct dash_target *t;
	int n;
	double interval;                /* seconds between polls */
	int closing;
	int loopback_names;             /* answer Host: loopback names only */
};

struct dash_args {
	const char *peers, *hosts, *listen;
	double interval;
	int history, allow_remote;
};

static double
wall_now(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static void
on_status(void *ctx, hc_result *r)
{
	struct dash_target *t = ctx;
	char why[KN_ERR_LEN] = "";
	json_error_t jerr;
	json_t *st = NULL;

	t->in_flight = 0;
	if (t->dash->closing)
		return;
	if (r->error != NULL && t->kind == DASH_SERVE &&
	    r->code != HC_ECONNECT && r->code != HC_ETIMEDOUT)
		snprintf(why, sizeof(why), "no HTTP status (%s): this "
		    "blocktraind -S does not serve /v1/status", r->error);
	else if (r->error != NULL)
		snprintf(why, sizeof(why), "unreachable: %s", r->error);
	else if (r->status == 404 && t->kind == DASH_SERVE)
		snprintf(why, sizeof(why), "no /v1/status (HTTP 404): this "
		    "blocktraind -S does not report its status");
	else if (r->status != 200)
		snprintf(why, sizeof(why), "HTTP %ld from /v1/status",
		    r->status);
	else if ((st = json_loadb(r->body ? r->body : "", r->body_len, 0,
	    &jerr)) == NULL || !json_is_object(st))
		snprintf(why, sizeof(why), "bad status JSON: %s", st ?
		    "not an object" : jerr.text);
	dash_history_record(t->dash->hist, t->index, wall_now(),
	    why[0] ? NULL : st, r->status, why);
	json_decref(st);
}

/* Polls every daemon not still answering the last poll. */
static void
on_tick(uv_timer_t *h)
{
	struct dash *d = h->data;
	char err[HC_ERR_LEN];
	int i;

	for (i = 0; i < d->n; i++) {
		struct dash_target *t = &d->t[i];
		hc_request_opts o = { .method = "GET", .url = t->url,
		    .pin = t->has_id ? t->id : NULL,
		    .timeout_ms = 3000, .connect_timeout_ms = 2000,
		    .max_body_bytes = DASH_STATUS_MAX };

		if (t->in_flight)
			continue;
		if (hc_request(d->client, &o, on_status, t, err) == 0)
			t->in_flight = 1;
		else
			dash_history_record(d->hist, i, wall_now(), NULL, 0, err);
	}
}

/* Whether a Host header names this machine's loopback (any port, for an
 * ssh -L tunnel): a page of another site whose name was made to resolve
 * to 127.0.0.1 (DNS rebinding) sends its own name, and is refused. */
static int
host_is_loopback(const char *host)
{
	static const char *const names[] = { "127.0.0.1", "localhost",
	    "[::1]" };
	size_t i, n;

	if (host == NULL)
		return 0;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		n = strlen(names[i]);
		if (strncasecmp(host, names[i], n) == 0 &&
		    (host[n] == '\0' || host[n] == ':'))
			return 1;
	}
	return 0;
}

static void
on_http(void *ctx, const hs_request *req, hs_response *res)
{
	struct dash *d = ctx;

	if (d->loopback_names && !host_is_loopback(hs_request_header(req,
	    "Host"))) {
		hs_response_text(res, 403, "the dashboard answers requests for "
		    "127.0.0.1, localhost or [::1] only (Host: %s)",
		    hs_request_header(req, "Host") ? "another name" : "none");
		return;
	}
	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD")) {
		hs_response_header(res, "Allow", "GET, HEAD");
		hs_response_text(res, 405, "only GET here");
		return;
	}
	if (strcmp(req->path, "/chart.min.js") == 0) {
		/* the page asks for it with Chart.js's version in the query
		 * (?v=), so a browser may keep it: another shardmeter with
		 * another Chart.js is another URL */
		hs_response_header(res, "Cache-Control", "public, "
		    "max-age=31536000, immutable");
		hs_response_header(res, "X-Content-Type-Options", "nosniff");
		hs_response_status(res, 200);
		hs_response_body(res, "text/javascript; charset=utf-8",
		    dash_chartjs, dash_chartjs_len);
		return;
	}
	hs_response_header(res, "Cache-Control", "no-store");
	if (strcmp(req->path, "/") == 0) {
		hs_response_status(res, 200);
		hs_response_body(res, "text/html; charset=utf-8",
		    dash_page_html, strlen(dash_page_html));
	} else if (strcmp(req->path, "/v1/dashboard") == 0) {
		json_t *o;

		/* ?since=V: nothing new since version V is a 204, so the page
		 * can ask often and fetch the history only when it moved */
		if (strncmp(req->query, "since=", 6) == 0 && strtoul(req->query +
		    6, NULL, 10) == dash_history_version(d->hist) &&
		    req->query[6] != '\0') {
			hs_response_status(res, 204);
			return;
		}
		o = dash_history_json(d->hist, wall_now());
		json_object_set_new(o, "interval_s", json_real(d->interval));
		hs_response_json(res, 200, o);
	}
	else if (strcmp(req->path, "/v1/dashboard/latest") == 0)
		hs_response_json(res, 200, dash_history_latest(d->hist,
		    wall_now()));
	else
		hs_response_text(res, 404, "no such page: the dashboard is "
		    "/, its data /v1/dashboard and /v1/dashboard/latest, its "
		    "chart library /chart.min.js");
}

static void
on_stop(uv_signal_t *h, int sig)
{
	struct dash *d = h->data;

	(void)sig;
	if (d->closing)
		return;
	d->closing = 1;
	uv_timer_stop(&d->tick);
	uv_close((uv_handle_t *)&d->tick, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	hs_server_close(d->http, NULL, NULL);
	hc_client_close(d->client, NULL, NULL);
}

/* host and port of --listen ("HOST:PORT", "[V6]:PORT"), numeric, and
 * whether the host is a loopback address.  0 or -1 with err. */
static int
parse_listen(const char *text, char host[CF_HOST_LEN], int *port,
    int *loopback, char *err)
{
	const char *colon = strrchr(text, ':');
	struct sockaddr_in6 a6;
	struct sockaddr_in a4;
	size_t len;
	char *end;
	long p;

	if (colon == NULL)
		return kn_error(err, KN_EINVAL, "--listen %s: give HOST:PORT",
		    text), -1;
	len = (size_t)(colon - text);
	if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
		text++;
		len -= 2;
	}
	if (len == 0 || len >= CF_HOST_LEN)
		return kn_error(err, KN_EINVAL, "--listen %s: no host", text),
		    -1;
	memcpy(host, text, len);
	host[len] = '\0';
	if (strcmp(host, "localhost") == 0)
		snprintf(host, CF_HOST_LEN, "127.0.0.1");
	p = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || p < 0 || p > 65535)
		return kn_error(err, KN_EINVAL, "--listen %s: bad port", text),
		    -1;
	*port = (int)p;
	if (uv_ip4_addr(host, 0, &a4) == 0)
		*loopback = (ntohl(a4.sin_addr.s_addr) >> 24) == 127;
	else if (uv_ip6_addr(host, 0, &a6) == 0)
		*loopback = memcmp(&a6.sin6_addr, &in6addr_loopback,
		    sizeof(in6addr_loopback)) == 0;
	else
		return kn_error(err, KN_EINVAL, "--listen %s: the host must be "
		    "a numeric address (or localhost)", host), -1;
	return 0;
}

/* Target n: where its status is, and the id it is pinned to (NULL:
 * plain http, for daemons that run insecure). */
static void
target_set(struct dash *d, int n, int kind, const char *addr,
    const uint8_t *id, int block, int replica)
{
	struct dash_target *t = &d->t[n];

	t->kind = kind;
	t->has_id = id != NULL;
	if (id != NULL)
		memcpy(t->id, id, ID_BYTES);
	snprintf(t->url, sizeof(t->url), "%s://%s/v1/status", id ? "https" :
	    "http", addr);
	dash_history_describe(d->hist, n, addr, kind, block, replica);
}

/* The daemons of the peer list and of the host list, as targets. */
static int
load_targets(struct dash *d, const struct dash_args *a, peers_list *pl,
    ph_list *hl, char *err)
{
	int i, n = 0;

	d->n = pl->n + hl->n;
	if (d->n == 0)
		return kn_error(err, KN_EINVAL, "no daemon to watch: the lists "
		    "name none"), -1;
	if ((d->t = calloc((size_t)d->n, sizeof(*d->t))) == NULL ||
	    dash_history_new(&d->hist, d->n, a->history, err) != 0)
		return kn_error(err, KN_ENOMEM, "out of memory"), -1;
	for (i = 0; i < pl->n; i++, n++) {
		const peers_entry *p = &pl->v[i];

		target_set(d, n, DASH_TRAIN, p->addr, p->has_id ? p->id : NULL,
		    p->expert >= 0 ? 0 : p->block, p->expert >= 0 ? p->expert :
		    peers_replica_index(pl, i));
	}
	for (i = 0; i < hl->n; i++, n++)
		target_set(d, n, DASH_SERVE, hl->v[i].addr, hl->v[i].has_id ?
		    hl->v[i].id : NULL, hl->v[i].block_hi, 0);
	for (i = 0; i < d->n; i++) {
		d->t[i].dash = d;
		d->t[i].index = i;
	}
	return 0;
}

/* The operator's identity, when a listed daemon has an id to pin. */
static int
open_identity(struct dash *d, char *err)
{
	char dir[PR_PATH_LEN], why[KN_ERR_LEN];
	int i, need = 0;

	for (i = 0; i < d->n; i++)
		need |= d->t[i].has_id;
	if (!need)
		return 0;
	if (cli_client_dir(dir, err) != 0)
		return -1;
	if (tls_ctx_new(&d->tls, dir, why) != 0)
		return kn_error(err, KN_EINVAL, "%s: make an operator identity "
		    "with 'shardmeter init --client' and list it in the peer "
		    "list as 'client <its id>'", why), -1;
	return 0;
}

static int
dash_run(const struct dash_args *a, peers_list *pl, ph_list *hl)
{
	struct dash d = { .interval = a->interval };
	char host[CF_HOST_LEN], err[KN_ERR_LEN], why[HS_ERR_LEN];
	int port, loopback, rc = 1;
	uv_loop_t loop;

	if (parse_listen(a->listen, host, &port, &loopback, err) != 0) {
		fprintf(stderr, "shardmeter dashboard: %s\n", err);
		return 2;
	}
	if (!loopback && !a->allow_remote) {
		fprintf(stderr, "shardmeter dashboard: --listen %s is not a "
		    "loopback address: the page is plain HTTP with no login and "
		    "shows everything the operator's identity reads from the "
		    "daemons; give --allow-remote to serve it there anyway, or "
		    "reach it through an SSH tunnel (ssh -L)\n", a->listen);
		return 2;
	}
	d.loopback_names = loopback && !a->allow_remote;
	if (load_targets(&d, a, pl, hl, err) != 0 ||
	    open_identity(&d, err) != 0) {
		fprintf(stderr, "shardmeter dashboard: %s\n", err);
		goto out;
	}
	uv_loop_init(&loop);
	d.loop = &loop;
	if (hs_server_new(&d.http, &loop, NULL, on_http, &d, why) != 0 ||
	    hs_server_listen(d.http, host, port, why) != 0) {
		fprintf(stderr, "shardmeter dashboard: cannot listen on %s: "
		    "%s\n", a->listen, why);
		if (d.http != NULL)
			hs_server_close(d.http, NULL, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
		uv_loop_close(&loop);
		goto out;
	}
	if (hc_client_new(&d.client, &loop, why) != 0) {
		fprintf(stderr, "shardmeter dashboard: %s\n", why);
		hs_server_close(d.http, NULL, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
		uv_loop_close(&loop);
		goto out;
	}
	hc_client_set_tls(d.client, d.tls);
	uv_timer_init(&loop, &d.tick);
	d.tick.data = &d;
	uv_timer_start(&d.tick, on_tick, 0, (uint64_t)(d.interval * 1000));
	uv_signal_init(&loop, &d.sigint);
	uv_signal_init(&loop, &d.sigterm);
	d.sigint.data = d.sigterm.data = &d;
	uv_signal_start(&d.sigint, on_stop, SIGINT);
	uv_signal_start(&d.sigterm, on_stop, SIGTERM);
	printf("shardmeter dashboard: http://%s%s%s:%d/ watching %d "
	    "daemon(s), every %g s\n", strchr(host, ':') ? "[" : "", host,
	    strchr(host, ':') ? "]" : "", hs_server_port(d.http), d.n,
	    d.interval);
	fflush(stdout);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	rc = 0;
out:
	tls_ctx_free(d.tls);
	dash_history_free(d.hist);
	free(d.t);
	return rc;
}

/* The lists named: --peers (a peer list, or else a pipeline host list,
 * whose hosts are then watched as serving hosts) and --hosts.  0, or the
 * exit status with the reason on stderr. */
static int
load_lists(struct dash_args *a, peers_list *pl, ph_list *hl)
{
	char err[PR_ERR_LEN], why[PR_ERR_LEN];

	if (a->peers != NULL && peers_load(pl, a->peers, err) != 0) {
		if (a->hosts != NULL || ph_load(hl, a->peers, why) != 0) {
			fprintf(stderr, "shardmeter dashboard: %s\n", err);
			return 1;
		}
		a->hosts = a->peers;
		a->peers = NULL;
		return 0;
	}
	if (a->hosts != NULL && ph_load(hl, a->hosts, err) != 0) {
		fprintf(stderr, "shardmeter dashboard: %s\n", err);
		if (a->peers != NULL)
			peers_free(pl);
		return 1;
	}
	return 0;
}

static int
dashboard_exec(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "hosts", required_argument, NULL, 'H' },
		{ "listen", required_argument, NULL, 'l' },
		{ "interval", required_argument, NULL, 'i' },
		{ "history", required_argument, NULL, 'n' },
		{ "allow-remote", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct dash_args a = { .listen = DASH_DEFAULT_LISTEN, .interval = 1,
	    .history = 1000 };
	peers_list pl = { .n = 0 };
	ph_list hl = { .n = 0 };
	char *end;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': a.peers = optarg; break;
		case 'H': a.hosts = optarg; break;
		case 'l': a.listen = optarg; break;
		case 'i':
			a.interval = strtod(optarg, &end);
			if (*end != '\0' || !(a.interval >= 0.05 &&
			    a.interval <= 3600)) {
				fprintf(stderr, "shardmeter dashboard: "
				    "--interval takes seconds from 0.05 to "
				    "3600\n");
				return 2;
			}
			break;
		case 'n':
			if (cli_parse_int("dashboard", "history", optarg, 2,
			    1000000, &a.history) != 0)
				return 2;
			break;
		case 'R': a.allow_remote = 1; break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (a.peers == NULL && a.hosts == NULL) {
		fprintf(stderr, "shardmeter dashboard: --peers FILE (a training "
		    "run) or --hosts FILE (serving hosts) is required\n");
		return 2;
	}
	if ((rc = load_lists(&a, &pl, &hl)) != 0)
		return rc;
	rc = dash_run(&a, &pl, &hl);
	if (a.peers != NULL)
		peers_free(&pl);
	if (a.hosts != NULL)
		ph_free(&hl);
	return rc;
}

const struct cmd_entry cmd_dashboard_entry = {
	.name = "dashboard",
	.summary = "a live page in the browser that follows a run",
	.usage = "usage: shardmeter dashboard --peers FILE [--hosts FILE] "
	    "[--listen HOST:PORT]\n"
	    "                            [--interval SECONDS] [--history N] "
	    "[--allow-remote]\n"
	    "Polls every daemon's /v1/status over the authenticated links "
	    "(the operator's\nidentity, each daemon pinned to its listed "
	    "id) every --interval seconds\n(default 1) and serves one page "
	    "that follows the run: the composed held-out\nbound and each "
	    "block's share over steps, training loss per block and "
	    "replica,\npositions/s, round periods, bytes per link and kind, "
	    "peer health, the plan's\npredictions beside the measurements, "
	    "and for serving hosts (--hosts, a\npipeline host list) their "
	    "requests, latency and bytes/s.  A daemon that does\nnot answer "
	    "is named on the page with the reason.\n"
	    "  --listen HOST:PORT  where the page is served (default "
	    DASH_DEFAULT_LISTEN "); plain\n"
	    "                      HTTP, so only a loopback address unless "
	    "--allow-remote\n"
	    "  --history N         samples kept per daemon (default 1000); "
	    "beyond it every\n"
	    "                      second one of the older half goes\n"
	    "Data: GET /v1/dashboard (the whole history as JSON), "
	    "/v1/dashboard/latest\n(each daemon's latest status as it "
	    "answered).\n",
	.exec = dashboard_exec
};
