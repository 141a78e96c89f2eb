/* blocktraind with a SOMA run spec (DESIGN section 3): one expert per
 * daemon, named by the daemon's line of the peer list ("host:port
 * expert=E peer-id"), trained from the run's seed in state_dir/seed.ckpt.
 * No rounds: the experts only publish their checkpoints and held-out
 * scores.  The setup's checks and the events that differ from
 * BlockTrain's live here. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/node/node.h"
#include "kernels/error.h"
#include "soma/model_file.h"
#include "soma/router.h"
#include "soma/trainer.h"

/* The run's seed must be there and be this run's. */
static int
check_seed(node *n, char *err)
{
	kn_soma_shape sh = sa_expert_shape(&n->spec);
	pr_ckpt_meta want = { .block = 0, .kind = "seed" };
	const char *path = n->seed_path;
	char why[KN_ERR_LEN];

	snprintf(n->seed_path, sizeof(n->seed_path), "%s/seed.ckpt",
	    n->cfg.state_dir);
	if (access(path, R_OK) != 0)
		return kn_error(err, KN_EINVAL, "no seed: %.300s: %s; train it "
		    "with 'shardmeter train --spec SPEC --dir DIR --seed' and "
		    "copy DIR/seed.ckpt there", path, strerror(errno));
	snprintf(want.run_id, sizeof(want.run_id), "%s", n->run_id);
	if (sa_model_load(path, &want, &sh, NULL, NULL, NULL, why) != 0)
		return kn_error(err, KN_EINVAL, "%.300s is not the seed of this "
		    "run (run id %.16s...): %.400s", path, n->run_id, why);
	return KN_OK;
}

/* The router of the spec's clusters folder, for as many experts. */
static int
check_clusters(node *n, char *err)
{
	const pr_soma *s = &n->spec.soma;
	char path[PR_PATH_LEN + 32], why[KN_ERR_LEN];
	sa_router r;
	int N;

	if (s->clusters[0] == '\0')
		return kn_error(err, KN_EINVAL, "the spec names no [soma] "
		    "clusters folder (shardmeter cluster writes one)");
	snprintf(path, sizeof(path), "%s/router.smr", s->clusters);
	if (sa_router_load(&r, path, why) != 0)
		return kn_error(err, KN_EINVAL, "%.500s", why);
	N = (int)r.file.nexperts;
	sa_router_free(&r);
	if (N != s->experts)
		return kn_error(err, KN_EINVAL, "%.300s routes to %d experts, "
		    "the spec has %d", path, N, s->experts);
	snprintf(path, sizeof(path), "%s/cluster-%d.txt", s->clusters,
	    n->expert);
	if (access(path, R_OK) != 0)
		return kn_error(err, KN_EINVAL, "expert %d's text %.300s: %s",
		    n->expert, path, strerror(errno));
	return KN_OK;
}

int
node_soma_setup(node *n, char *err)
{
	const peers_entry *me = &n->peers.v[n->self];
	int i, rc;

	n->soma = 1;
	n->val = NAN;
	if (!n->peers.experts)
		return kn_error(err, KN_EINVAL, "%.150s:%d: the spec is method = "
		    "soma: a daemon's line names its expert, 'host:port "
		    "expert=E peer-id' (E from 0)", n->cfg.peers, me->line);
	for (i = 0; i < n->peers.n; i++)
		if (n->peers.v[i].expert >= n->spec.soma.experts)
			return kn_error(err, KN_EINVAL, "%.150s:%d: expert %d "
			    "does not exist: the spec has %d experts (0 to %d)",
			    n->cfg.peers, n->peers.v[i].line,
			    n->peers.v[i].expert, n->spec.soma.experts,
			    n->spec.soma.experts - 1);
	n->expert = me->expert;
	n->replica = 0;
	n->replicas = 1;
	if ((rc = check_clusters(n, err)) != 0)
		return rc;
	return check_seed(n, err);
}

void
node_soma_worker_opts(node *n, wk_opts *wo)
{
	memset(wo, 0, sizeof(*wo));
	wo->soma = 1;
	wo->expert = n->expert;
	wo->seed_path = n->seed_path;
	wo->train.spec = &n->spec;
	wo->train.run_id = n->run_id;
	wo->train.dir = n->cfg.state_dir;
	wo->train.steps = n->spec.soma.steps;
	wo->train.be = n->be;
	wo->valid_path = n->spec.valid;
	wo->valid_sha256 = n->spec.valid_sha256;
	wo->eval_windows = n->cfg.eval_windows;
	wo->soma_valid_windows = n->cfg.eval_windows;
	wo->threads = n->cfg.threads;
}

int
node_soma_event(node *n, const wk_event *ev)
{
	switch (ev->kind) {
	case WK_STARTED:
		n->step = ev->step;
		n->state = "training";
		if (ev->step > 0)
			log_info("expert %d of %d: its checkpoint has all %lld "
			    "steps", n->expert, n->spec.soma.experts,
			    (long long)ev->step);
		else
			log_info("expert %d of %d: training %d steps from the "
			    "seed", n->expert, n->spec.soma.experts,
			    n->spec.soma.steps);
		node_journal(n, "start expert %d step %lld", n->expert,
		    (long long)ev->step);
		return 1;
	case WK_PROGRESS:
		n->step = ev->step;
		n->loss = ev->loss;
		n->positions_per_s = ev->positions_per_s;
		n->positions = ev->positions;
		n->lr = ev->lr;
		n->eps = ev->eps;
		if (ev->val_step > 0) {
			n->val = ev->val;
			n->val_step = ev->val_step;
			log_info("expert %d step %lld: validation %.4f "
			    "nats/byte on its cluster", n->expert,
			    (long long)ev->step, ev->val);
		}
		return 1;
	case WK_DONE:
		n->state = "done";
		n->worker_done = 1;
		log_info("expert %d: all %d steps trained; serving its "
		    "checkpoint", n->expert, n->spec.soma.steps);
		return n->stopping ? 0 : 1;
	default:
		return 0;
	}
}
