/* blocktraind: owns one block of a BlockTrain run on this host.  This is
 * its start-up (flags, configuration, the run and the peer list, the
 * backend); node.c is the daemon that then runs, serve_main.c the other
 * mode (-S, the inference pipeline).  See blocktraind(8). */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/node/node.h"
#include "daemon/pipeline/serve.h"
#include "daemon/core/startup.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/pool.h"

static void
print_check(const node *n)
{
	if (n->soma)
		printf("configuration OK: expert %d of %d, run %s, %d peers, "
		    "listen %s:%d\n", node_soma_of(n)->expert,
		    n->spec.soma.experts, n->run_id, n->peers.n,
		    n->cfg.listen_host, n->cfg.listen_port);
	else
		printf("configuration OK: block %d, replica %d of %d, run %s, "
		    "%d peers, listen %s:%d\n", n->cfg.block, n->replica,
		    n->replicas, n->run_id, n->peers.n, n->cfg.listen_host,
		    n->cfg.listen_port);
}

int
main(int argc, char **argv)
{
	static node n;
	startup_flags f;
	char err[PR_ERR_LEN];
	const kn_backend *be;

	if (startup_parse(&f, argc, argv, err) != 0) {
		fprintf(stderr, "blocktraind: %s\n", err);
		startup_usage(stderr, f.serve);
		return 2;
	}
	if (f.help) {
		startup_usage(stdout, f.serve);
		return 0;
	}
	startup_hold_hup();
	if (f.serve)
		return sv_main(&f);
	startup_log(&f);
	if (startup_config(&n.cfg, &f, err) != 0)
		fatalx("%s", err);
	if (!f.check_only)
		startup_claim(&f, n.cfg.state_dir);
	if (node_setup(&n, err) != 0)
		fatalx("%s", err);
	if (f.check_only) {
		print_check(&n);
		startup_print_config(stdout, &f, &n.cfg, &n.spec);
		return 0;
	}
	startup_daemonize(&f, n.cfg.state_dir);
	signal(SIGPIPE, SIG_IGN);
	if ((be = startup_backend(&n.cfg, n.backend_desc,
	    sizeof(n.backend_desc), err)) == NULL)
		fatalx("%s", err);
	/* the GEMM choice is made for the spec's shape before any model
	 * exists, and then named in the log line and /v1/status */
	if (kn_backend_plan(be, n.spec.width, n.spec.heads, n.spec.window,
	    n.spec.batch, n.cfg.gemm, err) != 0)
		fatalx("%s", err);
	kn_backend_describe(be, n.backend_desc, sizeof(n.backend_desc));
	log_info("%s", n.backend_desc);
	if (node_start(&n, uv_default_loop(), be, err) != 0)
		fatalx("%s", err);
	startup_take_hup();
	startup_ready();
	uv_run(n.loop, UV_RUN_DEFAULT);
	uv_loop_close(n.loop);
	node_free(&n);
	kn_pool_shutdown();
	startup_release();
	log_info("exit");
	return n.exit_code;
}
