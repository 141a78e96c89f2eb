/* blocktraind: owns one block of a BlockTrain run on this host.  It trains
 * the block on its trainer thread, serves its checkpoint, status and
 * metrics over HTTP, watches its peers, and averages updates with the
 * other replicas of its block in rounds.  See blocktraind(8). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon/log.h"
#include "daemon/node.h"
#include "daemon/serve.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"

#define CRON_MS 1000

int
node_peer_of(const node *n, const char *addr)
{
	return addr != NULL ? sm_peers_find(&n->peers, addr) : -1;
}

void
node_meter(node *n, const char *addr, int kind, uint64_t in, uint64_t out)
{
	int i = node_peer_of(n, addr);

	if (kind < 0 || kind >= SM_KINDS)
		kind = SM_KIND_OTHER;
	if (i >= 0) {
		n->peers.v[i].bytes_in[kind] += in;
		n->peers.v[i].bytes_out[kind] += out;
	} else {
		n->client_in[kind] += in;
		n->client_out[kind] += out;
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

/* Health of the peers: one status request each, with backoff on failure;
 * a peer that runs another spec is refused and reported. */
static void
probe_done(void *ctx, hc_result *r)
{
	void **pair = ctx;
	node *n = pair[0];
	/* by address: a SIGHUP may have renumbered the list meanwhile */
	int i = sm_peers_find(&n->peers, pair[1]);
	sm_peer *p;
	json_t *root = NULL;
	json_error_t jerr;
	double t = kn_now();

	free(pair[1]);
	free(pair);
	if (n->stopping || i < 0)
		return;
	p = &n->peers.v[i];
	p->probing = 0;
	node_meter(n, p->addr, SM_KIND_OTHER, r->bytes_in, r->bytes_out);
	if (r->status == 200)
		root = json_loadb(r->body, r->body_len, 0, &jerr);
	if (root == NULL) {
		p->failures++;
		p->state = SM_PEER_DOWN;
		snprintf(p->why, sizeof(p->why), "%s", r->error ? r->error :
		    r->status ? "bad status answer" : "no answer");
		p->next_probe = t + (p->failures < 5 ? 1 << p->failures : 30);
		if (p->failures == 1 || p->failures % 10 == 0)
			log_warnx("peer %s: %s", p->addr, p->why);
		return;
	}
	snprintf(p->run_id, sizeof(p->run_id), "%s",
	    json_string_value(json_object_get(root, "run_id")) ?
	    json_string_value(json_object_get(root, "run_id")) : "");
	p->step = json_integer_value(json_object_get(root, "step"));
	p->steps = json_integer_value(json_object_get(root, "steps"));
	p->round = json_integer_value(json_object_get(root, "round"));
	{
		json_t *ck = json_object_get(root, "checkpoint");
		const char *sha = json_string_value(json_object_get(ck, "sha256"));

		/* replicas of our block must hold the same weights after the
		 * same round: a difference means the round split */
		if (p->block == n->cfg.block && sha != NULL && n->etag[0] &&
		    strcmp(p->run_id, n->run_id) == 0 &&
		    json_integer_value(json_object_get(ck, "round")) ==
		    n->ckpt_round && n->ckpt_round > 0 &&
		    json_integer_value(json_object_get(ck, "step")) ==
		    n->ckpt_step && strcmp(sha, n->etag) != 0)
			rounds_diverged(n, i, sha);
	}
	if (json_is_number(json_object_get(root, "heldout_share"))) {
		p->share = json_number_value(json_object_get(root,
		    "heldout_share"));
		p->share_step = json_integer_value(json_object_get(root,
		    "heldout_share_step"));
	}
	json_decref(root);
	p->last_seen = t;
	p->rtt_ms = r->total_s * 1000.0;
	p->failures = 0;
	p->next_probe = t + 2.0;
	if (strcmp(p->run_id, n->run_id) != 0) {
		if (p->state != SM_PEER_REFUSED)
			log_warnx("peer %s runs run %.16s..., not ours (%.16s...): "
			    "refused", p->addr, p->run_id, n->run_id);
		p->state = SM_PEER_REFUSED;
		snprintf(p->why, sizeof(p->why), "runs another run spec (run "
		    "id %.16s...)", p->run_id);
		return;
	}
	if (p->state != SM_PEER_UP)
		log_info("peer %s (block %d) is up", p->addr, p->block);
	p->state = SM_PEER_UP;
	p->why[0] = '\0';
}

static void
probe_peers(node *n)
{
	double t = kn_now();
	int i;

	for (i = 0; i < n->peers.n; i++) {
		sm_peer *p = &n->peers.v[i];
		hc_request_opts o = { 0 };
		char url[2 * SM_HOST_LEN + 64], err[KN_ERR_LEN];
		void **pair;

		if (i == n->self || p->probing || t < p->next_probe)
			continue;
		snprintf(url, sizeof(url), "http://%s/v1/status?from=%s", p->addr,
		    n->cfg.advertise);
		o.method = "GET";
		o.url = url;
		o.timeout_ms = n->cfg.peer_timeout_ms;
		o.connect_timeout_ms = n->cfg.peer_timeout_ms;
		o.max_body_bytes = 1 << 20;
		if ((pair = malloc(2 * sizeof(void *))) == NULL)
			return;
		pair[0] = n;
		if ((pair[1] = strdup(p->addr)) == NULL) {
			free(pair);
			return;
		}
		if (hc_request(n->client, &o, probe_done, pair, err) != 0) {
			free(pair[1]);
			free(pair);
			log_warnx("peer %s: %s", p->addr, err);
			p->next_probe = t + 5;
			continue;
		}
		p->probing = 1;
	}
}

/* Housekeeping, one home for periodic work (redis serverCron): peers,
 * then rounds. */
static void
on_cron(uv_timer_t *t)
{
	node *n = t->data;

	if (n->stopping)
		return;
	probe_peers(n);
	rounds_cron(n);
}

static void
install_checkpoint(node *n, wk_event *ev)
{
	free(n->ckpt);
	n->ckpt = ev->buf;
	n->ckpt_len = ev->len;
	ev->buf = NULL;
	memcpy(n->etag, ev->etag, sizeof(n->etag));
	n->ckpt_step = ev->step;
	n->ckpt_round = ev->round;
	n->round = ev->round;
}

static void shutdown_node(node *n);

static void
on_event(void *ctx, wk_event *ev)
{
	node *n = ctx;

	switch (ev->kind) {
	case WK_STARTED:
		install_checkpoint(n, ev);
		n->step = ev->step;
		n->state = n->step >= n->spec.steps ? "done" : "training";
		log_info("block %d replica %d/%d: training from step %lld "
		    "(round %lld) of %d", n->cfg.block, n->replica, n->replicas,
		    (long long)ev->step, (long long)ev->round, n->spec.steps);
		node_journal(n, "start step %lld round %lld checkpoint %s",
		    (long long)ev->step, (long long)ev->round, n->etag);
		break;
	case WK_PROGRESS:
		n->step = ev->step;
		n->loss = ev->loss;
		n->positions_per_s = ev->positions_per_s;
		break;
	case WK_SHARE:
		n->share = ev->share;
		n->share_step = ev->step;
		n->have_share = 1;
		log_info("step %lld: held-out share %.4f nats/byte",
		    (long long)ev->step, ev->share);
		break;
	case WK_CHECKPOINT:
		if (n->rounds != NULL && ev->round != n->ckpt_round)
			node_journal(n, "round %lld done: step %lld checkpoint %s",
			    (long long)ev->round - 1, (long long)ev->step, ev->etag);
		install_checkpoint(n, ev);
		log_debug("checkpoint at step %lld, round %lld, %zu bytes, "
		    "sha256 %.16s...", (long long)ev->step, (long long)ev->round,
		    n->ckpt_len, n->etag);
		break;
	case WK_ROUND_READY:
		n->state = "round";
		rounds_on_update(n, ev);
		break;
	case WK_DONE:
		n->state = "done";
		n->worker_done = 1;
		if (n->stopping)
			shutdown_node(n);
		log_info("all %d steps trained; serving the checkpoint",
		    n->spec.steps);
		break;
	case WK_STOPPED:
		log_info("stopped at step %lld with a checkpoint",
		    (long long)n->ckpt_step);
		shutdown_node(n);
		break;
	case WK_ERROR:
		snprintf(n->error, sizeof(n->error), "%s", ev->msg);
		log_warnx("%s", ev->msg);
		if (strncmp(ev->msg, "held-out shares disabled", 24) != 0) {
			n->state = "error";
			n->worker_done = 1;
			n->exit_code = 1;
			shutdown_node(n);
		}
		break;
	}
	wk_event_free(ev);
}

static void
on_closed_handle(uv_handle_t *h)
{
	(void)h;
}

static void
on_http_closed(void *arg)
{
	(void)arg;
}

static void
on_worker_closed(void *arg)
{
	(void)arg;
}

static void
on_client_closed(void *arg)
{
	(void)arg;
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
	if (n->worker != NULL) {
		wk_close(n->worker, on_worker_closed, NULL);
		n->worker = NULL;
	}
	rounds_free(n);
	hs_server_close(n->http, on_http_closed, NULL);
	hc_client_close(n->client, on_client_closed, NULL);
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
	n->state = "stopping";
	if (n->worker != NULL && !n->worker_done)
		wk_stop(n->worker);
	else
		shutdown_node(n);
}

static void
on_hup(uv_signal_t *h, int sig)
{
	node *n = h->data;
	sm_peer_list fresh;
	char err[PR_ERR_LEN];
	int i, j;

	(void)sig;
	if (sm_peers_load(&fresh, n->cfg.peers, err) != 0) {
		log_warnx("SIGHUP: keeping the old peer list: %s", err);
		return;
	}
	/* our own line and block must stay: a daemon cannot change block */
	i = sm_peers_find(&fresh, n->peers.v[n->self].addr);
	if (i < 0 || fresh.v[i].block != n->cfg.block) {
		log_warnx("SIGHUP: the new peer list lacks %s serving block %d; "
		    "keeping the old one", n->peers.v[n->self].addr,
		    n->cfg.block);
		sm_peers_free(&fresh);
		return;
	}
	if (!rounds_same_replicas(n, &fresh)) {
		log_warnx("SIGHUP: the replicas of block %d changed; that needs "
		    "a restart of them all, keeping the old list", n->cfg.block);
		sm_peers_free(&fresh);
		return;
	}
	/* keep what we know of peers that stay */
	for (j = 0; j < fresh.n; j++) {
		int old = sm_peers_find(&n->peers, fresh.v[j].addr);

		if (old >= 0) {
			/* health, metering and a probe in flight (found again
			 * by address when it completes) carry over */
			sm_peer keep = n->peers.v[old];

			keep.block = fresh.v[j].block;
			memcpy(keep.id, fresh.v[j].id, sizeof(keep.id));
			fresh.v[j] = keep;
		}
		fresh.v[j].self = j == i;
	}
	sm_peers_free(&n->peers);
	n->peers = fresh;
	n->self = i;
	rounds_remap(n);
	log_info("SIGHUP: peer list reloaded, %d peers", n->peers.n);
}

static void
usage(FILE *f)
{
	fprintf(f, "usage: blocktraind [-dfnv] [-c file] [-l host:port] "
	    "[-b block] [-s dir]\n"
	    "                  [-p peers] [-r spec] [-D auto|cpu|cuda] "
	    "[-t threads]\n"
	    "  -c file   configuration (default /etc/blocktrain/"
	    "blocktrain.conf)\n"
	    "  -d, -f    stay in the foreground, log to stderr\n"
	    "  -n        check the configuration, spec and peer list, "
	    "and exit\n"
	    "  -v        more detail in the log\n"
	    "  -S        serve the inference pipeline instead "
	    "(blocktraind -S -h)\n"
	    "  -l, -b, -s, -p, -r, -D, -t   override listen, block, "
	    "state_dir, peers, spec,\n"
	    "            device, threads\n"
	    "See blocktraind(8) and blocktrain.conf(5).\n");
}

/* Loads the configuration, the spec and the peer list, and finds our
 * place in it. */
static int
setup(node *n, const char *conf, char *overrides[7], char *err)
{
	char *buf;
	size_t len;
	int rc, port;

	sm_config_defaults(&n->cfg);
	if (conf != NULL && (rc = sm_config_load(&n->cfg, conf, err)) != 0)
		return rc;
	if (overrides[0] != NULL && sm_parse_hostport(overrides[0],
	    n->cfg.listen_host, sizeof(n->cfg.listen_host),
	    &n->cfg.listen_port) != 0)
		return kn_error(err, KN_EINVAL, "-l: '%s' is not host:port",
		    overrides[0]);
	if (overrides[1] != NULL) {
		n->cfg.block = atoi(overrides[1]);
		if (n->cfg.block < 1)
			return kn_error(err, KN_EINVAL, "-b: block counts from 1");
	}
	if (overrides[2] != NULL)
		snprintf(n->cfg.state_dir, sizeof(n->cfg.state_dir), "%s",
		    overrides[2]);
	if (overrides[3] != NULL)
		snprintf(n->cfg.peers, sizeof(n->cfg.peers), "%s", overrides[3]);
	if (overrides[4] != NULL)
		snprintf(n->cfg.spec, sizeof(n->cfg.spec), "%s", overrides[4]);
	if (overrides[5] != NULL)
		snprintf(n->cfg.device, sizeof(n->cfg.device), "%s",
		    overrides[5]);
	if (overrides[6] != NULL) {
		char *end;
		long t = strtol(overrides[6], &end, 10);

		if (end == overrides[6] || *end || t < 0 || t > 256)
			return kn_error(err, KN_EINVAL, "-t: threads is 0 (all "
			    "cores) to 256, not '%s'", overrides[6]);
		n->cfg.threads = (int)t;
	}
	if ((rc = sm_config_validate(&n->cfg, err)) != 0)
		return rc;
	if ((rc = pr_spec_load(&n->spec, n->cfg.spec, err)) != 0 ||
	    (rc = pr_spec_run_id(&n->spec, n->run_id, err)) != 0 ||
	    (rc = pr_spec_encode(&n->spec, &buf, &len, err)) != 0)
		return rc;
	n->spec_body = buf;
	n->spec_len = len;
	if (n->cfg.block > n->spec.blocks)
		return kn_error(err, KN_EINVAL, "block %d does not exist: the "
		    "spec has %d blocks", n->cfg.block, n->spec.blocks);
	if ((rc = sm_peers_load(&n->peers, n->cfg.peers, err)) != 0)
		return rc;
	if (n->cfg.advertise[0] == '\0')
		snprintf(n->cfg.advertise, sizeof(n->cfg.advertise), "%s:%d",
		    n->cfg.listen_host, n->cfg.listen_port);
	n->self = sm_peers_find(&n->peers, n->cfg.advertise);
	if (n->self < 0)
		return kn_error(err, KN_EINVAL, "%s is not in the peer list %s "
		    "(set 'advertise' to the address peers know this host by)",
		    n->cfg.advertise, n->cfg.peers);
	if (n->peers.v[n->self].block != n->cfg.block)
		return kn_error(err, KN_EINVAL, "the peer list says %s serves "
		    "block %d, the configuration says block %d",
		    n->cfg.advertise, n->peers.v[n->self].block, n->cfg.block);
	n->peers.v[n->self].self = 1;
	n->replica = sm_peers_replica_index(&n->peers, n->self);
	n->replicas = sm_peers_replicas(&n->peers, n->cfg.block);
	if (n->replicas > 1 && n->spec.steps % n->spec.local_steps != 0)
		return kn_error(err, KN_EINVAL, "[optim] steps (%d) must be a "
		    "multiple of [sync] local_steps (%d) when a block has "
		    "replicas, or the last steps would not be averaged",
		    n->spec.steps, n->spec.local_steps);
	if (sm_parse_hostport(n->cfg.advertise, (char[SM_HOST_LEN]){ 0 },
	    SM_HOST_LEN, &port) != 0)
		return kn_error(err, KN_EINVAL, "advertise: not host:port");
	return KN_OK;
}

int
main(int argc, char **argv)
{
	static node n;
	char err[PR_ERR_LEN], note[KN_ERR_LEN], ckdir[PR_PATH_LEN + 16];
	char *overrides[7] = { NULL };
	const char *conf = "/etc/blocktrain/blocktrain.conf";
	int foreground = 0, check_only = 0, verbose = 0, ch, conf_given = 0;
	kn_backend_kind kind;
	hs_config hcfg;
	wk_opts wo;

	for (ch = 1; ch < argc; ch++)
		if (strcmp(argv[ch], "-S") == 0)
			return sv_main(argc, argv);
	while ((ch = getopt(argc, argv, "c:dfnvl:b:s:p:r:D:t:h")) != -1) {
		switch (ch) {
		case 'c': conf = optarg; conf_given = 1; break;
		case 'd': case 'f': foreground = 1; break;
		case 'n': check_only = 1; break;
		case 'v': verbose++; break;
		case 'l': overrides[0] = optarg; break;
		case 'b': overrides[1] = optarg; break;
		case 's': overrides[2] = optarg; break;
		case 'p': overrides[3] = optarg; break;
		case 'r': overrides[4] = optarg; break;
		case 'D': overrides[5] = optarg; break;
		case 't': overrides[6] = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	log_init(1, verbose, "blocktraind");
	if (!conf_given && access(conf, F_OK) != 0)
		conf = NULL;	/* the defaults and the flags may be enough */
	if (setup(&n, conf, overrides, err) != 0)
		fatalx("%s", err);
	if (check_only) {
		printf("configuration OK: block %d, replica %d of %d, run %s, "
		    "%d peers, listen %s:%d\n", n.cfg.block, n.replica,
		    n.replicas, n.run_id, n.peers.n, n.cfg.listen_host,
		    n.cfg.listen_port);
		return 0;
	}
	if (!foreground) {
		/* keep the working directory: the spec, the peer list (read
		 * again on SIGHUP) and the state directory may be relative */
		if (daemon(1, 0) != 0)
			fatal("daemon");
		log_init(0, verbose, "blocktraind");
	}
	signal(SIGPIPE, SIG_IGN);
	kn_backend_parse(n.cfg.device, &kind);
	if (kn_pool_init(n.cfg.threads, err) != 0 ||
	    (n.be = kn_backend_get(kind, note, err)) == NULL)
		fatalx("%s", err);
	if (note[0])
		log_info("%s", note);
	kn_backend_describe(n.be, n.backend_desc, sizeof(n.backend_desc));
	log_info("%s", n.backend_desc);
	n.loop = uv_default_loop();
	n.started = kn_now();
	n.state = "starting";
	hs_config_defaults(&hcfg);
	hcfg.max_body_bytes = n.cfg.max_body ? n.cfg.max_body :
	    kn_model_params_for(&(kn_model_shape){ n.spec.width, n.spec.heads,
	    n.spec.layers_per_block, n.spec.window, 0 }) * 4 + (1 << 20);
	hcfg.on_exchange = api_on_exchange;
	if (hs_server_new(&n.http, n.loop, &hcfg, api_handle, &n, err) != 0 ||
	    hs_server_listen(n.http, n.cfg.listen_host, n.cfg.listen_port,
	    err) != 0)
		fatalx("cannot listen on %s:%d: %s", n.cfg.listen_host,
		    n.cfg.listen_port, err);
	if (hc_client_new(&n.client, n.loop, err) != 0)
		fatalx("%s", err);
	if (rounds_init(&n, err) != 0)
		fatalx("%s", err);
	if (n.spec.replicas != n.replicas)
		log_warnx("the spec says %d replica(s) per block, the peer list "
		    "gives block %d %d: the peer list is followed", n.spec.replicas,
		    n.cfg.block, n.replicas);
	log_info("run %s, block %d (replica %d of %d), listening on %s:%d",
	    n.run_id, n.cfg.block, n.replica, n.replicas, n.cfg.listen_host,
	    hs_server_port(n.http));
	uv_timer_init(n.loop, &n.cron);
	n.cron.data = &n;
	uv_timer_start(&n.cron, on_cron, 200, CRON_MS);
	uv_signal_init(n.loop, &n.sigterm);
	uv_signal_init(n.loop, &n.sigint);
	uv_signal_init(n.loop, &n.sighup);
	n.sigterm.data = n.sigint.data = n.sighup.data = &n;
	uv_signal_start(&n.sigterm, on_stop_signal, SIGTERM);
	uv_signal_start(&n.sigint, on_stop_signal, SIGINT);
	uv_signal_start(&n.sighup, on_hup, SIGHUP);

	snprintf(ckdir, sizeof(ckdir), "%s", n.cfg.state_dir);
	memset(&wo, 0, sizeof(wo));
	wo.train.spec = &n.spec;
	wo.train.run_id = n.run_id;
	wo.train.dir = ckdir;
	wo.train.kind = BT_BLOCK;
	wo.train.block = n.cfg.block;
	wo.train.replica = n.replica;
	wo.train.steps = n.spec.steps;
	wo.train.be = n.be;
	wo.valid_path = n.spec.valid;
	wo.valid_sha256 = n.spec.valid_sha256;
	wo.eval_every = n.cfg.eval_every;
	wo.eval_windows = n.cfg.eval_windows;
	wo.checkpoint_every = n.cfg.checkpoint_every;
	wo.replicas = n.replicas;
	wo.local_steps = n.spec.local_steps;
	wo.threads = n.cfg.threads;
	if (wk_start(&n.worker, n.loop, &wo, on_event, &n, err) != 0)
		fatalx("%s", err);
	uv_run(n.loop, UV_RUN_DEFAULT);
	uv_loop_close(n.loop);
	free(n.ckpt);
	free(n.spec_body);
	sm_peers_free(&n.peers);
	kn_pool_shutdown();
	log_info("exit");
	return n.exit_code;
}
