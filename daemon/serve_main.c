/* blocktraind -S: options, start-up and the loop of a pipeline host
 * (the loop's work is in serve.c). */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "daemon/log.h"
#include "daemon/serve.h"
#include "daemon/serve_private.h"
#include "daemon/startup.h"
#include "kernels/error.h"
#include "kernels/pool.h"

static void
on_signal(uv_signal_t *h, int sig)
{
	(void)sig;
	sv_shutdown(h->data);
}

/* The host list and the run it serves, and our place in it. */
static int
setup(sv *s, char *err)
{
	int rc, i;

	if ((rc = ph_load(&s->hosts, s->cfg.pipeline_hosts, err)) != 0)
		return rc;
	if (s->hosts.logical) {
		ph_logical_spec(&s->hosts, &s->spec);
		snprintf(s->run_id, sizeof(s->run_id), "logical");
	} else {
		if ((rc = pr_spec_load(&s->spec, s->cfg.spec, err)) != 0 ||
		    (rc = pr_spec_run_id(&s->spec, s->run_id, err)) != 0)
			return rc;
		if ((rc = ph_assign(&s->hosts, s->spec.blocks,
		    s->spec.layers_per_block, err)) != 0)
			return rc;
	}
	if (s->cfg.pipeline_listen[0] == '\0')
		return kn_error(err, KN_EINVAL, "no pipeline address: give -L "
		    "host:port or pipeline_listen, as %s lists this host",
		    s->cfg.pipeline_hosts);
	if ((s->self = ph_find(&s->hosts, s->cfg.pipeline_listen)) < 0)
		return kn_error(err, KN_EINVAL, "%s is not in the pipeline host "
		    "list %s", s->cfg.pipeline_listen, s->cfg.pipeline_hosts);
	s->entry = s->self == 0;
	s->exit_host = s->hosts.v[s->self].block_lo == 1;
	for (i = 0; i < s->hosts.n; i++)
		if (s->hosts.v[i].layer_hi <= s->hosts.v[i].layer_lo)
			return kn_error(err, KN_EINVAL, "host %s gets no causal "
			    "layers", s->hosts.v[i].addr);
	return KN_OK;
}

static void
print_check(const sv *s, const startup_flags *f)
{
	const ph_host *me = &s->hosts.v[s->self];

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
		.ar_last = s->self == s->hosts.n - 1,
		.max_batch = s->cfg.pipeline_batch,
		.cache_bytes = (size_t)s->cfg.pipeline_cache_mb << 20,
		.idle_s = s->cfg.pipeline_idle_s, .be = s->be,
	};
	int rc;

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
	uv_tcp_init(s->loop, &s->listener);
	s->listener.data = s;
	if (uv_tcp_bind(&s->listener, (const struct sockaddr *)sa, 0) != 0 ||
	    uv_listen((uv_stream_t *)&s->listener, 256, sv_on_connection) != 0)
		return kn_error(err, KN_EIO, "cannot listen on %s",
		    s->hosts.v[s->self].addr);
	uv_timer_init(s->loop, &s->cron);
	s->cron.data = s;
	uv_timer_start(&s->cron, sv_on_cron, SV_CRON_MS, SV_CRON_MS);
	uv_signal_init(s->loop, &s->sigterm);
	uv_signal_init(s->loop, &s->sigint);
	s->sigterm.data = s->sigint.data = s;
	uv_signal_start(&s->sigterm, on_signal, SIGTERM);
	uv_signal_start(&s->sigint, on_signal, SIGINT);
	signal(SIGPIPE, SIG_IGN);
	sv_link_connect(s);
	return KN_OK;
}

static void
log_started(const sv *s, const char *desc)
{
	const ph_host *me = &s->hosts.v[s->self];

	log_info("pipeline host %d of %d listening on %s: blocks %d-%d, "
	    "causal layers %d-%d of %d, %s; next %s; %s", s->self + 1,
	    s->hosts.n, me->addr, me->block_hi, me->block_lo, me->layer_lo,
	    me->layer_hi - 1, s->spec.blocks * s->spec.layers_per_block,
	    s->hosts.logical ? s->hosts.f16 ? "logical shape with random fp16 "
	    "weights" : "logical shape with random weights" : "trained",
	    s->hosts.n > 1 ? s->hosts.v[(s->self + 1) % s->hosts.n].addr :
	    "none", desc);
}

int
sv_main(const startup_flags *f)
{
	static sv s;
	char err[PR_ERR_LEN], desc[256];
	struct sockaddr_storage sa;
	const ph_host *me;

	startup_log(f);
	if (startup_config(&s.cfg, f, err) != 0 || setup(&s, err) != 0)
		fatalx("%s", err);
	if (f->check_only) {
		print_check(&s, f);
		return 0;
	}
	me = &s.hosts.v[s.self];
	if (uv_ip4_addr(me->host, me->port, (struct sockaddr_in *)&sa) != 0 &&
	    uv_ip6_addr(me->host, me->port, (struct sockaddr_in6 *)&sa) != 0)
		fatalx("pipeline address %s is not numeric", me->addr);
	startup_daemonize(f);
	if ((s.be = startup_backend(&s.cfg, desc, sizeof(desc), err)) == NULL)
		fatalx("%s", err);
	s.loop = uv_default_loop();
	s.next_id = ((uint64_t)getpid() << 32) ^ ((uint64_t)time(NULL) << 20);
	if (start_compute(&s, err) != 0 || start_loop(&s, &sa, err) != 0)
		fatalx("%s", err);
	log_started(&s, desc);
	uv_run(s.loop, UV_RUN_DEFAULT);
	uv_loop_close(s.loop);
	kn_pool_shutdown();
	return 0;
}
