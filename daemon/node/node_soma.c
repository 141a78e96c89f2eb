/* blocktraind with a SOMA run spec (DESIGN section 3): one expert per
 * daemon, named by the daemon's line of the peer list ("host:port
 * expert=E peer-id"), trained from the run's seed in state_dir/seed.ckpt.
 * No rounds: the experts only publish their checkpoints and held-out
 * scores.  The setup's checks and the events that differ from
 * BlockTrain's live here; what the expert reports is its node_soma part
 * (node_soma.h). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/node/node.h"
#include "daemon/node/node_soma.h"
#include "kernels/error.h"
#include "soma/model_file.h"
#include "soma/router.h"
#include "soma/trainer.h"

/* The run's seed must be there and be this run's. */
static int
check_seed(node_soma *s, const node *n, char *err)
{
	kn_soma_shape sh = sa_expert_shape(&n->spec);
	pr_ckpt_meta want = { .block = 0, .kind = "seed" };
	const char *path = s->seed_path;
	char why[KN_ERR_LEN];

	snprintf(s->seed_path, sizeof(s->seed_path), "%s/seed.ckpt",
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
check_clusters(const node_soma *x, const node *n, char *err)
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
	    x->expert);
	if (access(path, R_OK) != 0)
		return kn_error(err, KN_EINVAL, "expert %d's text %.300s: %s",
		    x->expert, path, strerror(errno));
	return KN_OK;
}

int
node_soma_setup(node_soma *s, const node *n,
    void (*journal)(void *arg, const char *line), void *journal_arg,
    char *err)
{
	const peers_entry *me = &n->peers.v[n->self];
	int i, rc;

	s->journal = journal;
	s->journal_arg = journal_arg;
	s->val = NAN;
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
	s->expert = me->expert;
	if ((rc = check_clusters(s, n, err)) != 0)
		return rc;
	return check_seed(s, n, err);
}

void
node_soma_worker_opts(const node_soma *s, const node *n, wk_opts *wo)
{
	memset(wo, 0, sizeof(*wo));
	wo->soma = 1;
	wo->expert = s->expert;
	wo->seed_path = s->seed_path;
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

/* A line of the journal of rounds, through the node's callback. */
static void
journal(const node_soma *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
journal(const node_soma *s, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	if (s->journal == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->journal(s->journal_arg, line);
}

int
node_soma_event(node_soma *s, const node *n, wk_event *ev)
{
	switch (ev->kind) {
	case WK_STARTED:
		if (ev->step > 0)
			log_info("expert %d of %d: its checkpoint has all %lld "
			    "steps", s->expert, n->spec.soma.experts,
			    (long long)ev->step);
		else
			log_info("expert %d of %d: training %d steps from the "
			    "seed", s->expert, n->spec.soma.experts,
			    n->spec.soma.steps);
		journal(s, "start expert %d step %lld", s->expert,
		    (long long)ev->step);
		return 1;
	case WK_PROGRESS:
		s->positions = ev->positions;
		s->lr = ev->lr;
		s->eps = ev->eps;
		if (ev->val_step > 0) {
			s->val = ev->val;
			s->val_step = ev->val_step;
			log_info("expert %d step %lld: validation %.4f "
			    "nats/byte on its cluster", s->expert,
			    (long long)ev->step, ev->val);
		}
		return 1;
	case WK_DONE:
		log_info("expert %d: all %d steps trained; serving its "
		    "checkpoint", s->expert, n->spec.soma.steps);
		return 1;
	case WK_HELDOUT:
		free(s->heldout);
		s->heldout = ev->buf;
		s->heldout_len = ev->len;
		s->heldout_step = ev->step;
		ev->buf = NULL;
		return 1;
	default:
		return 0;
	}
}

void
node_soma_free(node_soma *s)
{
	free(s->heldout);
	s->heldout = NULL;
}

const node_soma *
node_soma_of(const node *n)
{
	return &n->soma_expert;
}
