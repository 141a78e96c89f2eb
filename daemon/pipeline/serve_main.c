/* blocktraind -S: options, start-up, trust (the identity of the state
 * directory, the host list's ids) and signals of a pipeline host; the
 * loop's work is in serve.c and serve_conn.c. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "daemon/core/log.h"
#include "daemon/pipeline/serve.h"
#include "daemon/pipeline/internal.h"
#include "daemon/core/startup.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"

static void
on_signal(uv_signal_t *h, int sig)
{
	(void)sig;
	sv_shutdown(h->data);
}

/* Whether a and b list the same ring: hosts, blocks, ids and shape. */
static int
hosts_same(const ph_list *a, const ph_list *b)
{
	int i;

	if (a->n != b->n || a->logical != b->logical || (a->logical &&
	    (a->width != b->width || a->heads != b->heads ||
	    a->layers_per_block != b->layers_per_block ||
	    a->window != b->window || a->blocks != b->blocks ||
	    a->seed != b->seed || a->f16 != b->f16)))
		return 0;
	for (i = 0; i < a->n; i++) {
		const ph_host *x = &a->v[i], *y = &b->v[i];

		if (strcmp(x->addr, y->addr) != 0 || x->block_hi != y->block_hi
		    || x->block_lo != y->block_lo || x->expert_lo !=
		    y->expert_lo || x->expert_hi != y->expert_hi ||
		    x->has_id != y->has_id ||
		    (x->has_id && !id_equal(x->id, y->id)))
			return 0;
	}
	return 1;
}

/* The host list again: its clients change at once, and connections of
 * ids it no longer names are cut off; a changed ring needs a restart. */
static void
on_hup(uv_signal_t *h, int sig)
{
	sv *s = h->data;
	ph_list fresh;
	char err[PR_ERR_LEN];
	int cut;

	(void)sig;
	if (ph_load(&fresh, s->cfg.pipeline_hosts, err) != 0) {
		log_warnx("SIGHUP: keeping the old pipeline host list: %s", err);
		return;
	}
	if (!hosts_same(&s->hosts, &fresh)) {
		log_warnx("SIGHUP: the hosts, blocks, peer ids or shape of %s "
		    "changed; that needs a restart of every host, keeping the "
		    "old list", s->cfg.pipeline_hosts);
		ph_free(&fresh);
		return;
	}
	ph_free(&s->hosts);
	s->hosts.clients = fresh.clients;
	s->hosts.nclients = fresh.nclients;
	log_info("SIGHUP: pipeline host list reloaded, %d hosts, %d clients",
	    s->hosts.n, s->hosts.nclients);
	if ((cut = sv_conns_recheck(s)) > 0)
		log_info("SIGHUP: cut off %d connection(s) of peer ids no longer "
		    "listed", cut);
}

/* TLS as the identity of the state directory, with every host's id in
 * the list and ours our own; or, with insecure = yes, plain TCP on
 * loopback only. */
static int
trust_setup(sv *s, char *err)
{
	const ph_host *me = &s->hosts.v[s->self];
	char why[KN_ERR_LEN];
	int rc, i;

	s->open_entry = strcmp(s->cfg.pipeline_open_entry, "yes") == 0;
	if (strcmp(s->cfg.insecure, "yes") == 0)
		return cf_is_loopback(me->host) ? KN_OK : kn_error(err, KN_EINVAL,
		    "insecure = yes is refused on %s: plain TCP is for "
		    "loopback only", me->host);
	for (i = 0; i < s->hosts.n; i++)
		if (!s->hosts.v[i].has_id)
			return kn_error(err, KN_EINVAL, "%s: %s has no peer id; "
			    "each host line is 'host:port BLOCKS peer-id' (the "
			    "id 'shardmeter id --dir STATE_DIR' prints for that "
			    "host)", s->cfg.pipeline_hosts, s->hosts.v[i].addr);
	if ((rc = tls_ctx_new(&s->tls, s->cfg.state_dir, why)) != 0)
		return kn_error(err, rc, "%s%s", why, rc == ID_ENONE ? ": make "
		    "one with 'shardmeter init --dir <state_dir>'" : "");
	if (strcmp(me->id_text, tls_ctx_id(s->tls)) != 0)
		return kn_error(err, KN_EINVAL, "%s: the line of %s names peer "
		    "id %s, but this host's identity (%s) is %s",
		    s->cfg.pipeline_hosts, me->addr, me->id_text,
		    s->cfg.state_dir, tls_ctx_id(s->tls));
	tls_ctx_set_allow(s->tls, sv_allows, s);
	return KN_OK;
}

/* The model's name to OpenAI-style clients: model_name, or one made
 * from the spec's method and shape (the run id names weights, not a
 * model a person would pick).  Letters, digits and ._:/- only, so that
 * it goes into JSON and URLs as it is. */
static int
model_name_setup(sv *s, char *err)
{
	const pr_spec *p = &s->spec;
	const char *c;
	int b, layers = 0;

	if (s->cfg.model_name[0] != '\0') {
		for (c = s->cfg.model_name; *c != '\0'; c++)
			if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' &&
			    *c <= 'Z') || (*c >= '0' && *c <= '9') ||
			    strchr("._:/-", *c) != NULL))
				return kn_error(err, KN_EINVAL, "model_name "
				    "'%s': only letters, digits and . _ : / - "
				    "may be in it", s->cfg.model_name);
		snprintf(s->model_name, sizeof(s->model_name), "%s",
		    s->cfg.model_name);
		return KN_OK;
	}
	if (pr_spec_method(p) == PR_METHOD_SOMA) {
		snprintf(s->model_name, sizeof(s->model_name), "soma-%dx%d-d%d",
		    p->soma.experts, p->soma.layers, p->soma.width);
		return KN_OK;
	}
	for (b = 0; b < p->blocks; b++)
		layers += pr_spec_layers(p, b);
	snprintf(s->model_name, sizeof(s->model_name), "blocktrain-%db-%dl-"
	    "d%d-w%d", p->blocks, layers, p->width, p->window);
	if (p->position_block > 0 && p->position_block < p->window)
		snprintf(s->model_name + strlen(s->model_name),
		    sizeof(s->model_name) - strlen(s->model_name), "-pb%d",
		    p->position_block);
	return KN_OK;
}

/* The host list and the run it serves, and our place in it. */
static int
setup(sv *s, char *err)
{
	char why[KN_ERR_LEN];
	int rc, i;

	if ((rc = ph_load(&s->hosts, s->cfg.pipeline_hosts, err)) != 0)
		return rc;
	if (s->hosts.logical) {
		ph_logical_spec(&s->hosts, &s->spec);
		snprintf(s->run_id, sizeof(s->run_id), "logical");
	} else if (s->hosts.soma) {
		/* SOMA: every host takes clients on its own experts */
		if ((rc = pr_spec_load(&s->spec, s->cfg.spec, err)) != 0 ||
		    (rc = pr_spec_run_id(&s->spec, s->run_id, err)) != 0)
			return rc;
		if (pr_spec_method(&s->spec) != PR_METHOD_SOMA)
			return kn_error(err, KN_EINVAL, "%s lists experts=, but "
			    "the spec %s is not method = soma",
			    s->cfg.pipeline_hosts, s->cfg.spec);
		if ((rc = ph_soma_check(&s->hosts, s->spec.soma.experts,
		    why)) != 0)
			return kn_error(err, rc, "%s: %.200s",
			    s->cfg.pipeline_hosts, why);
	} else {
		if ((rc = pr_spec_load(&s->spec, s->cfg.spec, err)) != 0 ||
		    (rc = pr_spec_run_id(&s->spec, s->run_id, err)) != 0)
			return rc;
		if ((rc = ph_assign(&s->hosts, &s->spec, err)) != 0)
			return rc;
	}
	if (s->cfg.pipeline_listen[0] == '\0')
		return kn_error(err, KN_EINVAL, "no pipeline address: give -L "
		    "host:port or pipeline_listen, as %s lists this host",
		    s->cfg.pipeline_hosts);
	if ((s->self = ph_find(&s->hosts, s->cfg.pipeline_listen)) < 0)
		return kn_error(err, KN_EINVAL, "%s is not in the pipeline host "
		    "list %s", s->cfg.pipeline_listen, s->cfg.pipeline_hosts);
	s->stage = s->hosts.v[s->self].stage;
	/* every host of the first blocks takes requests */
	s->entry = s->stage == 0 || s->hosts.soma;
	s->exit_host = s->hosts.v[s->self].block_lo == 1;
	for (i = 0; i < s->hosts.n && !s->hosts.soma; i++)
		if (s->hosts.v[i].layer_hi <= s->hosts.v[i].layer_lo)
			return kn_error(err, KN_EINVAL, "host %s gets no causal "
			    "layers", s->hosts.v[i].addr);
	if ((rc = model_name_setup(s, err)) != 0)
		return rc;
	return trust_setup(s, err);
}

static void
print_check(const sv *s, const startup_flags *f)
{
	const ph_host *me = &s->hosts.v[s->self];

	if (s->hosts.soma)
		printf("configuration OK: SOMA host %d of %d, experts %d-%d of "
		    "%d, %s\n", s->self + 1, s->hosts.n, me->expert_lo,
		    me->expert_hi, s->spec.soma.experts, s->run_id);
	else
		printf("configuration OK: pipeline host %d of %d (%s), blocks "
		    "%d-%d, causal layers %d-%d, %s\n", s->self + 1, s->hosts.n,
		    s->entry ? "entry" : "inner", me->block_hi, me->block_lo,
		    me->layer_lo, me->layer_hi - 1, s->hosts.logical ?
		    "logical shape, random weights" : s->run_id);
	startup_print_config(stdout, f, &s->cfg, s->hosts.logical ? NULL :
	    &s->spec);
}

/* The compute thread with this host's models. */
static int
start_compute(sv *s, char *err)
{
	const ph_host *me = &s->hosts.v[s->self];
	char note[2 * KN_ERR_LEN + 64];
	sc_opts so = {
		.spec = &s->spec, .run_id = s->run_id, .dir = s->cfg.state_dir,
		.logical = s->hosts.logical,
		.storage = s->hosts.f16 ? KN_STORE_F16 : KN_STORE_F32,
		.block_hi = me->block_hi,
		.block_lo = me->block_lo, .layer_lo = me->layer_lo,
		.layer_hi = me->layer_hi, .ar_first = s->entry,
		.ar_last = s->stage == s->hosts.nstages - 1,
		.max_batch = s->cfg.pipeline_batch,
		.cache_bytes = (size_t)s->cfg.pipeline_cache_mb << 20,
		.idle_s = s->cfg.pipeline_idle_s, .be = s->be,
	};
	int rc;

	if (s->hosts.soma)
		return ss_start(s, err);
	if ((rc = sc_start(&s->compute, s->loop, &so, sv_on_compute_done, s,
	    note, sizeof(note), err)) != 0)
		return rc;
	if (note[0])
		log_warnx("pipeline: %s", note);
	return KN_OK;
}

/* The listener, the housekeeping timer, the signals and the link. */
static int
start_loop(sv *s, const struct sockaddr_storage *sa, char *err)
{
	int rc;

	uv_tcp_init(s->loop, &s->listener);
	s->listener.data = s;
	/* libuv reports a bind's EADDRINUSE at listen */
	if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)sa,
	    0)) != 0 || (rc = uv_listen((uv_stream_t *)&s->listener, 256,
	    sv_on_connection)) != 0)
		return kn_error(err, KN_EIO, "cannot listen on %s: %s",
		    s->hosts.v[s->self].addr, uv_strerror(rc));
	if ((rc = sh_start(s, err)) != KN_OK)
		return rc;
	uv_timer_init(s->loop, &s->cron);
	s->cron.data = s;
	uv_timer_start(&s->cron, sv_on_cron, SV_CRON_MS, SV_CRON_MS);
	uv_signal_init(s->loop, &s->sigterm);
	uv_signal_init(s->loop, &s->sigint);
	uv_signal_init(s->loop, &s->sighup);
	s->sigterm.data = s->sigint.data = s->sighup.data = s;
	uv_signal_start(&s->sigterm, on_signal, SIGTERM);
	uv_signal_start(&s->sigint, on_signal, SIGINT);
	uv_signal_start(&s->sighup, on_hup, SIGHUP);
	startup_take_hup();
	signal(SIGPIPE, SIG_IGN);
	sv_links_init(s);
	sv_links_start(s);
	return KN_OK;
}

static void
log_started(const sv *s, const char *desc)
{
	const ph_host *me = &s->hosts.v[s->self];

	if (s->hosts.soma)
		log_info("SOMA host %d of %d listening on %s: experts %d-%d of "
		    "%d (width %d), %s", s->self + 1, s->hosts.n, me->addr,
		    me->expert_lo, me->expert_hi, s->spec.soma.experts,
		    s->spec.soma.width, desc);
	else
		log_info("pipeline host %d of %d listening on %s: blocks %d-%d, "
		    "causal layers %d-%d of %d, %s; next %s; %s", s->self + 1,
		    s->hosts.n, me->addr, me->block_hi, me->block_lo, me->layer_lo,
		    me->layer_hi - 1, pr_spec_total_layers(&s->spec),
		    s->hosts.logical ? s->hosts.f16 ? "logical shape with random fp16 "
		    "weights" : "logical shape with random weights" : "trained",
		    s->nlinks > 0 ? s->hosts.v[s->links[0].host].addr : "none",
		    desc);
	if (s->nlinks > 1 && s->cfg.pipeline_next[0])
		log_warnx("pipeline: pipeline_next (%s) stands for a single "
		    "next host; the list gives %d, reached at their own "
		    "addresses", s->cfg.pipeline_next, s->nlinks);
	if (s->nlinks > 1)
		log_info("pipeline: %d hosts serve the next blocks%s",
		    s->nlinks, s->spare ? "; a frame goes to another when "
		    "one fails" : " (the entries)");
	if (s->metrics != NULL)
		log_info("pipeline: /metrics on http://%s; GET /v1/status%s on "
		    "the pipeline port", s->metrics_addr, s->entry &&
		    !s->hosts.soma ? " and POST /v1/completions" : "");
	if (s->tls != NULL)
		log_info("pipeline: mutual TLS as peer id %s%s", tls_ctx_id(s->tls),
		    s->entry && s->open_entry ? "; the entry is open to any "
		    "client" : "");
	else
		log_warnx("pipeline: insecure = yes: plain TCP, no peer ids; "
		    "anyone who reaches %s may use the pipeline", me->addr);
}

int
sv_main(const startup_flags *f)
{
	static sv s;
	char err[PR_ERR_LEN], desc[256];
	struct sockaddr_storage sa;
	const ph_host *me;

	startup_log(f);
	if (startup_config(&s.cfg, f, err) != 0)
		fatalx("%s", err);
	if (!f->check_only)
		startup_claim(f, s.cfg.state_dir);
	if (setup(&s, err) != 0)
		fatalx("%s", err);
	if (f->check_only) {
		print_check(&s, f);
		return 0;
	}
	me = &s.hosts.v[s.self];
	if (uv_ip4_addr(me->host, me->port, (struct sockaddr_in *)&sa) != 0 &&
	    uv_ip6_addr(me->host, me->port, (struct sockaddr_in6 *)&sa) != 0)
		fatalx("pipeline address %s is not numeric", me->addr);
	startup_daemonize(f, s.cfg.state_dir);
	if ((s.be = startup_backend(&s.cfg, desc, sizeof(desc), err)) == NULL)
		fatalx("%s", err);
	s.loop = uv_default_loop();
	/* the top byte names the entry that owns the id, so that the exit
	 * answers it (serve_links.c) */
	s.next_id = (((uint64_t)getpid() << 32) ^ ((uint64_t)time(NULL) <<
	    20)) & (((uint64_t)1 << 56) - 1);
	if (s.entry && !s.hosts.soma)
		s.next_id |= (uint64_t)s.self << 56;
	s.started = kn_now();
	if (start_compute(&s, err) != 0 || start_loop(&s, &sa, err) != 0 ||
	    sv_metrics_start(&s, err) != 0)
		fatalx("%s", err);
	log_started(&s, desc);
	startup_ready();
	uv_run(s.loop, UV_RUN_DEFAULT);
	uv_loop_close(s.loop);
	tls_ctx_free(s.tls);
	ph_free(&s.hosts);
	kn_pool_shutdown();
	startup_release();
	return 0;
}
