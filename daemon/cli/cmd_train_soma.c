/* shardmeter train on a SOMA spec: the seed, one expert, or a control,
 * each in this process (soma/trainer.h), with a progress line and a CSV
 * log per model in the run directory. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/cli/cmd.h"
#include "daemon/cli/cmd_train_soma.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "soma/trainer.h"

static void
on_progress(void *user, const sa_progress *p)
{
	const char *name = user;

	if (p->step + 1 != p->steps && (p->step + 1) % 10 != 0)
		return;
	fprintf(stderr, "%s: step %ld/%ld loss %.4f val %.4f lr %.2g eps "
	    "%.2g  %.3g Mpos  %.0f pos/s\n", name, p->step + 1, p->steps,
	    p->loss, p->val, p->lr, p->eps, p->positions / 1e6,
	    p->positions_per_s);
}

/* The model's file name stem in the run directory: seed, expert-E,
 * spsa-pP, eggroll-pP, bptt. */
void
cli_soma_stem(sa_kind k, int expert, int P, char *buf, size_t len)
{
	if (k == SA_EXPERT)
		snprintf(buf, len, "expert-%d", expert);
	else if (k == SA_SPSA || k == SA_EGGROLL)
		snprintf(buf, len, "%s-p%d", sa_kind_name(k), P);
	else
		snprintf(buf, len, "%s", sa_kind_name(k));
}

int
cli_soma_parse_stem(const char *stem, sa_kind *k, int *P)
{
	static const sa_kind kinds[] = { SA_SEED, SA_SPSA, SA_EGGROLL,
	    SA_BPTT };
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		const char *name = sa_kind_name(kinds[i]);
		size_t n = strlen(name);

		if (strncmp(stem, name, n) != 0)
			continue;
		*k = kinds[i];
		*P = 0;
		if (kinds[i] == SA_SPSA || kinds[i] == SA_EGGROLL)
			return sscanf(stem + n, "-p%d", P) == 1 && *P > 0 ?
			    0 : -1;
		return stem[n] == '\0' || stem[n] == '-' ? 0 : -1;
	}
	return -1;
}

/* The text files of a model: expert e's cluster, or every cluster (the
 * seed and the controls), or [data] train without clusters.  Caller
 * frees *paths and its strings. */
int
cli_soma_text(const pr_spec *s, sa_kind k, int expert, char ***paths,
    int *n, char *err)
{
	int i, first = k == SA_EXPERT ? expert : 0;
	int count = k == SA_EXPERT ? 1 : s->soma.experts;

	if (s->soma.clusters[0] == '\0') {
		if (k == SA_EXPERT || s->train[0] == '\0')
			return kn_error(err, KN_EINVAL, "the spec names no "
			    "[soma] clusters folder (shardmeter cluster "
			    "writes one)");
		count = 1;
	}
	if ((*paths = calloc((size_t)count, sizeof(char *))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < count; i++) {
		char buf[PR_PATH_LEN + 32];

		if (s->soma.clusters[0] == '\0')
			snprintf(buf, sizeof(buf), "%s", s->train);
		else
			snprintf(buf, sizeof(buf), "%s/cluster-%d.txt",
			    s->soma.clusters, first + i);
		if (((*paths)[i] = strdup(buf)) == NULL) {
			*n = i;
			return kn_error(err, KN_ENOMEM, "out of memory");
		}
	}
	*n = count;
	return KN_OK;
}

void
cli_soma_text_free(char **paths, int n)
{
	int i;

	for (i = 0; paths != NULL && i < n; i++)
		free(paths[i]);
	free(paths);
}

int
cli_train_soma(const struct cli_soma_train *a)
{
	const pr_spec *s = &a->run->spec;
	sa_train_opts o = { 0 };
	sa_result res;
	char stem[64], out[PR_PATH_LEN + 80], log[PR_PATH_LEN + 80];
	char seed[PR_PATH_LEN + 80], err[KN_ERR_LEN], **paths = NULL;
	char snap[PR_PATH_LEN + 90];
	int n = 0, P = a->P > 0 ? a->P : s->soma.perturbations, rc;

	cli_soma_stem(a->kind, a->expert, P, stem, sizeof(stem));
	if (a->lr > 0 || a->eps > 0) {
		size_t used = strlen(stem);

		/* a tuned control keeps its settings in its name */
		if (a->lr > 0)
			used += (size_t)snprintf(stem + used, sizeof(stem) -
			    used, "-lr%g", a->lr);
		if (a->eps > 0 && used < sizeof(stem))
			snprintf(stem + used, sizeof(stem) - used, "-eps%g",
			    a->eps);
	}
	if (a->decoder_steps > 0 && strlen(stem) < sizeof(stem))
		snprintf(stem + strlen(stem), sizeof(stem) - strlen(stem),
		    "-dec%d", a->decoder_steps);
	snprintf(out, sizeof(out), "%s/%s.ckpt", a->run->dir, stem);
	snprintf(log, sizeof(log), "%s/%s.csv", a->run->dir, stem);
	snprintf(seed, sizeof(seed), "%s/seed.ckpt", a->run->dir);
	if (a->kind == SA_EXPERT && access(seed, F_OK) != 0) {
		fprintf(stderr, "shardmeter train: %s: no seed model; an expert "
		    "starts from it: run 'shardmeter train --spec FILE --dir "
		    "%s --seed' first\n", seed, a->run->dir);
		return 1;
	}
	if (cli_soma_text(s, a->kind, a->expert, &paths, &n, err) != 0) {
		cli_soma_text_free(paths, n);
		fprintf(stderr, "shardmeter train: %s\n", err);
		return 1;
	}
	o.spec = s;
	o.run_id = a->run->run_id;
	o.kind = a->kind;
	o.expert = a->expert;
	o.P = P;
	o.lr = a->lr;
	o.eps = a->eps;
	o.decoder_steps = a->decoder_steps;
	o.steps = a->steps;
	if (a->kind == SA_SPSA || a->kind == SA_EGGROLL || a->kind == SA_BPTT)
		o.budget = a->budget > 0 ? a->budget : sa_soma_positions(s);
	if ((a->kind == SA_SPSA || a->kind == SA_EGGROLL) && a->budget == 0 &&
	    a->steps < 0) {
		uint64_t eq = sa_control_equal_macs_positions(s);

		/* a control position costs more multiply-adds than SOMA's:
		 * the model at SOMA's multiply-adds too, on the way */
		if (eq < o.budget) {
			snprintf(snap, sizeof(snap), "%s/%s-eqmacs.ckpt",
			    a->run->dir, stem);
			o.snapshot_at = eq;
			o.snapshot_path = snap;
		}
	}
	o.train = (const char *const *)paths;
	o.ntrain = n;
	o.seed_path = seed;
	o.out_path = out;
	o.log_path = log;
	o.be = a->run->be;
	o.progress = a->quiet ? NULL : on_progress;
	o.user = stem;
	o.stop = a->stop;
	if (!a->quiet) {
		kn_soma_shape ex = sa_expert_shape(s);
		kn_soma_shape sh = a->kind == SA_SEED || a->kind == SA_EXPERT ?
		    ex : sa_control_shape(s);

		fprintf(stderr, "shardmeter train: %s, width %d (%zu body "
		    "parameters), %d file(s) of text, %s\n", stem, sh.width,
		    kn_soma_body_params(&sh), n, o.budget > 0 && a->steps < 0 ?
		    "steps from the compute budget" : "steps as asked");
		if (o.budget > 0 && a->budget > 0)
			fprintf(stderr, "shardmeter train: budget %.4g byte "
			    "positions (--budget)\n", (double)o.budget);
		else if (o.budget > 0)
			fprintf(stderr, "shardmeter train: budget %.4g byte "
			    "positions (SOMA's seed and %d experts)\n",
			    (double)o.budget, s->soma.experts);
		if (o.snapshot_at > 0)
			fprintf(stderr, "shardmeter train: and a snapshot at "
			    "%.4g positions, SOMA's %.4g forward multiply-adds "
			    "(%llu a position against SOMA's %llu): %s\n",
			    (double)o.snapshot_at, sa_soma_macs(s),
			    (unsigned long long)kn_soma_forward_macs(&sh),
			    (unsigned long long)kn_soma_forward_macs(&ex),
			    snap);
	}
	rc = sa_train(&o, &res, err);
	cli_soma_text_free(paths, n);
	if (rc != 0) {
		fprintf(stderr, "shardmeter train: %s: %s\n", stem, err);
		return 1;
	}
	/* the summary last, where scripts look for it */
	if (!a->quiet && res.snapshot_steps > 0)
		fprintf(stderr, "shardmeter train: %s at SOMA's multiply-adds: "
		    "%ld steps, %.4g positions; %s\n", stem, res.snapshot_steps,
		    (double)res.snapshot_positions, snap);
	if (!a->quiet)
		fprintf(stderr, "shardmeter train: %s done: %ld steps, %.4g "
		    "positions, validation %.4f nats/byte, %.1fs; %s\n", stem,
		    res.steps, (double)res.positions, res.val, res.seconds, out);
	kn_pool_shutdown();
	return a->stop != NULL && *a->stop ? 130 : 0;
}
