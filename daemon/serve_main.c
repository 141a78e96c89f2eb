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
#include "kernels/error.h"
#include "kernels/pool.h"

static void
on_signal(uv_signal_t *h, int sig)
{
	(void)sig;
	sv_shutdown(h->data);
}

static void
usage(FILE *f)
{
	fprintf(f, "usage: blocktraind -S [-dfnv] [-c file] [-L host:port] "
	    "[-N host:port]\n"
	    "                  [-P hosts] [-s dir] [-r spec] [-D auto|cpu|cuda]\n"
	    "                  [-t threads]\n"
	    "Serves the inference pipeline: this host's blocks and its slice "
	    "of the causal\nLM, over direct TCP (proto/PROTOCOL.md).\n"
	    "  -S        serve the pipeline instead of training\n"
	    "  -c file   configuration (default /etc/blocktrain/"
	    "blocktrain.conf)\n"
	    "  -L addr   pipeline address of this host, as the host list "
	    "writes it\n"
	    "  -P hosts  pipeline host list (pipeline_hosts)\n"
	    "  -N addr   reach the next host at addr instead (pipeline_next: "
	    "a relay, NAT)\n"
	    "  -s dir    the checkpoints (block-B.ckpt, causal.ckpt; "
	    "state_dir)\n"
	    "  -r spec   the run spec (not needed with a logical shape)\n"
	    "  -d, -f    stay in the foreground, log to stderr\n"
	    "  -n        check the configuration and the host list, and exit\n"
	    "  -v        more detail in the log\n"
	    "See blocktraind(8) and blocktrain.conf(5).\n");
}

static int
setup(sv *s, const char *conf, char *const ov[7], char *err)
{
	int rc, i;

	sm_config_defaults(&s->cfg);
	if (conf != NULL && (rc = sm_config_load(&s->cfg, conf, err)) != 0)
		return rc;
	if (ov[0] != NULL)
		snprintf(s->cfg.pipeline_listen, sizeof(s->cfg.pipeline_listen),
		    "%s", ov[0]);
	if (ov[6] != NULL)
		snprintf(s->cfg.pipeline_next, sizeof(s->cfg.pipeline_next),
		    "%s", ov[6]);
	if (ov[1] != NULL)
		snprintf(s->cfg.pipeline_hosts, sizeof(s->cfg.pipeline_hosts),
		    "%s", ov[1]);
	if (ov[2] != NULL)
		snprintf(s->cfg.state_dir, sizeof(s->cfg.state_dir), "%s", ov[2]);
	if (ov[3] != NULL)
		snprintf(s->cfg.spec, sizeof(s->cfg.spec), "%s", ov[3]);
	if (ov[4] != NULL)
		snprintf(s->cfg.device, sizeof(s->cfg.device), "%s", ov[4]);
	if (ov[5] != NULL) {
		char *end;
		long t = strtol(ov[5], &end, 10);

		if (end == ov[5] || *end || t < 0 || t > 256)
			return kn_error(err, KN_EINVAL, "-t: threads is 0 (all "
			    "cores) to 256, not '%s'", ov[5]);
		s->cfg.threads = (int)t;
	}
	if ((rc = sm_config_validate(&s->cfg, err)) != 0 ||
	    (rc = ph_load(&s->hosts, s->cfg.pipeline_hosts, err)) != 0)
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

int
sv_main(int argc, char **argv)
{
	static sv s;
	char err[PR_ERR_LEN], note[2 * KN_ERR_LEN + 64], desc[256];
	char *ov[7] = { NULL };
	const char *conf = "/etc/blocktrain/blocktrain.conf";
	int foreground = 0, check_only = 0, verbose = 0, ch, conf_given = 0;
	kn_backend_kind kind;
	struct sockaddr_storage sa;
	const ph_host *me;
	sc_opts so;

	optind = 1;
	while ((ch = getopt(argc, argv, "Sc:dfnvL:N:P:s:r:D:t:h")) != -1) {
		switch (ch) {
		case 'S': break;
		case 'c': conf = optarg; conf_given = 1; break;
		case 'd': case 'f': foreground = 1; break;
		case 'n': check_only = 1; break;
		case 'v': verbose++; break;
		case 'L': ov[0] = optarg; break;
		case 'N': ov[6] = optarg; break;
		case 'P': ov[1] = optarg; break;
		case 's': ov[2] = optarg; break;
		case 'r': ov[3] = optarg; break;
		case 'D': ov[4] = optarg; break;
		case 't': ov[5] = optarg; break;
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
		conf = NULL;
	if (setup(&s, conf, ov, err) != 0)
		fatalx("%s", err);
	me = &s.hosts.v[s.self];
	if (check_only) {
		printf("configuration OK: pipeline host %d of %d (%s), blocks "
		    "%d-%d, causal layers %d-%d, %s\n", s.self + 1, s.hosts.n,
		    s.entry ? "entry" : "inner", me->block_hi, me->block_lo,
		    me->layer_lo, me->layer_hi - 1, s.hosts.logical ?
		    "logical shape, random weights" : s.run_id);
		return 0;
	}
	if (uv_ip4_addr(me->host, me->port, (struct sockaddr_in *)&sa) != 0 &&
	    uv_ip6_addr(me->host, me->port, (struct sockaddr_in6 *)&sa) != 0)
		fatalx("pipeline address %s is not numeric", me->addr);
	if (!foreground) {
		if (daemon(1, 0) != 0)
			fatal("daemon");
		log_init(0, verbose, "blocktraind");
	}
	kn_backend_parse(s.cfg.device, &kind);
	if (kn_pool_init(s.cfg.threads, err) != 0 ||
	    (s.be = kn_backend_get(kind, note, err)) == NULL)
		fatalx("%s", err);
	if (note[0])
		log_info("%s", note);
	kn_backend_describe(s.be, desc, sizeof(desc));
	s.loop = uv_default_loop();
	s.next_id = ((uint64_t)getpid() << 32) ^ ((uint64_t)time(NULL) << 20);
	so = (sc_opts){
		.spec = &s.spec, .run_id = s.run_id, .dir = s.cfg.state_dir,
		.logical = s.hosts.logical,
		.storage = s.hosts.f16 ? KN_STORE_F16 : KN_STORE_F32,
		.block_hi = me->block_hi,
		.block_lo = me->block_lo, .layer_lo = me->layer_lo,
		.layer_hi = me->layer_hi, .ar_first = s.entry,
		.ar_last = s.self == s.hosts.n - 1,
		.max_batch = s.cfg.pipeline_batch,
		.cache_bytes = (size_t)s.cfg.pipeline_cache_mb << 20,
		.idle_s = s.cfg.pipeline_idle_s, .be = s.be,
	};
	if (sc_start(&s.compute, s.loop, &so, sv_on_compute_done, &s, note,
	    sizeof(note), err) != 0)
		fatalx("%s", err);
	if (note[0])
		log_warnx("pipeline: %s", note);
	uv_tcp_init(s.loop, &s.listener);
	s.listener.data = &s;
	if (uv_tcp_bind(&s.listener, (struct sockaddr *)&sa, 0) != 0 ||
	    uv_listen((uv_stream_t *)&s.listener, 256, sv_on_connection) != 0)
		fatalx("cannot listen on %s", me->addr);
	uv_timer_init(s.loop, &s.cron);
	s.cron.data = &s;
	uv_timer_start(&s.cron, sv_on_cron, SV_CRON_MS, SV_CRON_MS);
	uv_signal_init(s.loop, &s.sigterm);
	uv_signal_init(s.loop, &s.sigint);
	s.sigterm.data = s.sigint.data = &s;
	uv_signal_start(&s.sigterm, on_signal, SIGTERM);
	uv_signal_start(&s.sigint, on_signal, SIGINT);
	signal(SIGPIPE, SIG_IGN);
	sv_link_connect(&s);
	log_info("pipeline host %d of %d listening on %s: blocks %d-%d, "
	    "causal layers %d-%d of %d, %s; next %s; %s", s.self + 1,
	    s.hosts.n, me->addr, me->block_hi, me->block_lo, me->layer_lo,
	    me->layer_hi - 1, s.spec.blocks * s.spec.layers_per_block,
	    s.hosts.logical ? s.hosts.f16 ? "logical shape with random fp16 "
	    "weights" : "logical shape with random weights" : "trained",
	    s.hosts.n > 1 ? s.hosts.v[(s.self + 1) % s.hosts.n].addr : "none",
	    desc);
	uv_run(s.loop, UV_RUN_DEFAULT);
	uv_loop_close(s.loop);
	kn_pool_shutdown();
	return 0;
}
