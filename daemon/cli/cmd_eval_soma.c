/* shardmeter eval on a SOMA spec: each expert on its own cluster's
 * held-out tail, the routed mixture of the experts on the split, and the
 * seed and every control found in the run directory on the same
 * windows; a table, or JSON. */
#include "config.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/cli/cmd_eval_soma.h"
#include "daemon/cli/cmd_train_soma.h"
#include "proto/corpus.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "soma/mixture.h"
#include "soma/model_file.h"
#include "soma/text.h"

#define MAX_CONTROLS 16

struct soma_eval {
	const struct cli_run *run;
	const pr_spec *s;
	sa_windows w;
	int N, k;
	double expert_own[PR_MAX_BLOCKS];       /* on its cluster's tail */
	double mixture;
	long routed[PR_MAX_BLOCKS];             /* windows per expert */
	int ncontrols;
	char control_name[MAX_CONTROLS][256];
	double control_ce[MAX_CONTROLS];
	uint64_t control_pos[MAX_CONTROLS];
	double control_macs[MAX_CONTROLS];      /* forward multiply-adds */
	double route_s;                         /* routing's wall time */
};

/* Loads a model file of the run into m (whose shape it must have). */
static int
load_into(kn_soma_model *m, const char *path, const char *kind, int block,
    pr_ckpt_meta *got, char *err)
{
	const kn_soma_shape *sh = kn_soma_get_shape(m);
	float *body = malloc(kn_soma_body_params(sh) * sizeof(float));
	float *dec = malloc(kn_soma_decoder_params(sh) * sizeof(float));
	pr_ckpt_meta want = { .block = block };
	int rc;

	if (body == NULL || dec == NULL) {
		free(body);
		free(dec);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	snprintf(want.kind, sizeof(want.kind), "%s", kind);
	rc = sa_model_load(path, &want, sh, body, dec, got, err);
	if (rc == 0 && (rc = kn_soma_set_body(m, body, err)) == 0)
		rc = kn_soma_set_decoder(m, dec, err);
	free(body);
	free(dec);
	return rc;
}

/* Mean negative log-probability of every byte of every window. */
static int
score_all(kn_soma_model *m, const sa_windows *w, double *ce, char *err)
{
	float *lp = malloc((size_t)w->n * w->T * sizeof(float));
	double sum = 0;
	size_t i;
	int rc;

	if (lp == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if ((rc = sa_score(m, w, NULL, w->n, lp, err)) == 0) {
		for (i = 0; i < (size_t)w->n * w->T; i++)
			sum -= lp[i];
		*ce = sum / ((double)w->n * w->T);
	}
	free(lp);
	return rc;
}

/* The experts' held-out losses and the routed mixture on the split. */
static int
eval_experts(struct soma_eval *ev, kn_soma_model *m, char *err)
{
	const pr_spec *s = ev->s;
	char path[PR_PATH_LEN + 80];
	sa_router r;
	int *sel = NULL, e, rc;
	double *mix = NULL, t0, sum = 0;
	float *lp = NULL;
	long *idx = NULL, i, j;

	snprintf(path, sizeof(path), "%s/router.smr", s->soma.clusters);
	if ((rc = sa_router_load(&r, path, err)) != 0)
		return rc;
	if ((int)r.file.nexperts != ev->N) {
		sa_router_free(&r);
		return kn_error(err, KN_EINVAL, "%s routes to %d experts, the "
		    "spec has %d", path, (int)r.file.nexperts, ev->N);
	}
	sel = malloc((size_t)ev->w.n * ev->k * sizeof(int));
	mix = calloc((size_t)ev->w.n * ev->w.T, sizeof(double));
	idx = malloc((size_t)ev->w.n * sizeof(long));
	lp = malloc((size_t)ev->w.n * ev->w.T * sizeof(float));
	if (sel == NULL || mix == NULL || idx == NULL || lp == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	t0 = kn_now();
	if ((rc = sa_route_windows(&r, &ev->w, (size_t)s->soma.route_bytes,
	    ev->k, sel, err)) < 0)
		goto out;
	ev->route_s = kn_now() - t0;
	for (e = 0; e < ev->N; e++) {
		long count = 0;
		char **paths = NULL;
		int np = 0;
		sa_text t;

		snprintf(path, sizeof(path), "%s/expert-%d.ckpt",
		    ev->run->dir, e);
		if ((rc = load_into(m, path, "expert", e, NULL, err)) != 0)
			goto out;
		for (i = 0; i < ev->w.n; i++)
			for (j = 0; j < ev->k; j++)
				if (sel[i * ev->k + j] == e)
					idx[count++] = i;
		ev->routed[e] = count;
		if ((rc = sa_score(m, &ev->w, idx, count, lp, err)) != 0)
			goto out;
		for (i = 0; i < count; i++)
			for (j = 0; j < ev->w.T; j++)
				mix[(size_t)idx[i] * ev->w.T + j] +=
				    exp(lp[(size_t)i * ev->w.T + j]) / ev->k;
		/* the expert on the held-out tail of its own cluster */
		if ((rc = cli_soma_text(s, SA_EXPERT, e, &paths, &np,
		    err)) == 0 && (rc = sa_text_open(&t, (const char *const *)
		    paths, np, SA_TEXT_VALID_SHARE, ev->w.T, err)) == 0) {
			int nv = sa_text_valid_count(&t, ev->w.T, 256), v;
			int32_t *tok = malloc((size_t)nv * (ev->w.T + 1) *
			    sizeof(int32_t));

			if (tok == NULL)
				rc = kn_error(err, KN_ENOMEM, "out of memory");
			for (v = 0; tok != NULL && v < nv; v++)
				sa_text_valid_window(&t, v, nv, ev->w.T,
				    tok + (size_t)v * (ev->w.T + 1));
			if (tok != NULL)
				rc = kn_soma_loss(m, tok, nv, ev->w.T,
				    &ev->expert_own[e], err);
			free(tok);
			sa_text_close(&t);
		}
		cli_soma_text_free(paths, np);
		if (rc != 0)
			goto out;
	}
	for (i = 0; i < ev->w.n * ev->w.T; i++)
		sum -= log(mix[i]);
	ev->mixture = sum / ((double)ev->w.n * ev->w.T);
	rc = KN_OK;
out:
	free(sel);
	free(mix);
	free(idx);
	free(lp);
	sa_router_free(&r);
	return rc;
}

/* The seed and every control file in the run directory (any name that
 * cli_soma_parse_stem knows, tuned controls included), each on the whole
 * split, in name order. */
static int
eval_others(struct soma_eval *ev, const kn_backend *be, char *err)
{
	struct dirent **names = NULL;
	int n, i, rc = KN_OK;

	if ((n = scandir(ev->run->dir, &names, NULL, alphasort)) < 0)
		return kn_error(err, KN_EIO, "%s: cannot list it", ev->run->dir);
	for (i = 0; i < n && rc == 0; i++) {
		const char *name = names[i]->d_name;
		size_t len = strlen(name);
		char stem[256], path[PR_PATH_LEN + 300];
		kn_soma_shape sh;
		kn_soma_model *m;
		pr_ckpt_meta got;
		sa_kind k;
		int P, c = ev->ncontrols;

		if (len < 6 || len - 5 >= sizeof(stem) ||
		    strcmp(name + len - 5, ".ckpt") != 0)
			continue;
		memcpy(stem, name, len - 5);
		stem[len - 5] = '\0';
		if (cli_soma_parse_stem(stem, &k, &P) != 0 || c == MAX_CONTROLS)
			continue;
		sh = k == SA_SEED ? sa_expert_shape(ev->s) :
		    sa_control_shape(ev->s);
		snprintf(path, sizeof(path), "%s/%s", ev->run->dir, name);
		if ((rc = kn_soma_create(&m, &sh, be, err)) != 0)
			break;
		rc = load_into(m, path, sa_kind_name(k), 0, &got, err);
		if (rc == 0)
			rc = score_all(m, &ev->w, &ev->control_ce[c], err);
		kn_soma_free(m);
		if (rc != 0)
			break;
		snprintf(ev->control_name[c], sizeof(ev->control_name[c]), "%s",
		    stem);
		ev->control_pos[c] = k == SA_SEED ? 0 : (uint64_t)got.step *
		    sa_step_positions(ev->s, k, P);
		ev->control_macs[c] = (double)ev->control_pos[c] *
		    (double)kn_soma_forward_macs(&sh);
		ev->ncontrols++;
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

static void
print_table(const struct soma_eval *ev, const char *split, const char *path)
{
	int e, i, w = (int)strlen("routed mixture");

	/* one column of names, as wide as the longest (a tuned control's
	 * name carries its settings) */
	for (i = 0; i < ev->ncontrols; i++)
		if ((int)strlen(ev->control_name[i]) > w)
			w = (int)strlen(ev->control_name[i]);
	printf("SOMA, %d experts, top-%d, %s split %s: %ld windows of %d "
	    "bytes\n", ev->N, ev->k, split, path, ev->w.n, ev->w.T);
	for (e = 0; e < ev->N; e++)
		printf("expert %-3d own cluster %.4f nats/byte   routed %ld "
		    "windows\n", e, ev->expert_own[e], ev->routed[e]);
	printf("%-*s %.4f nats/byte  (%.4f bits/byte)  routing %.3fs; "
	    "compute %.4g positions, %.4g MACs\n", w, "routed mixture",
	    ev->mixture, ev->mixture / M_LN2, ev->route_s,
	    (double)sa_soma_positions(ev->s), sa_soma_macs(ev->s));
	for (i = 0; i < ev->ncontrols; i++)
		printf("%-*s %.4f nats/byte  (%.4f bits/byte)  compute %.4g "
		    "positions, %.4g MACs\n", w, ev->control_name[i],
		    ev->control_ce[i], ev->control_ce[i] / M_LN2,
		    (double)ev->control_pos[i], ev->control_macs[i]);
}

static void
print_json(const struct soma_eval *ev, const char *split)
{
	json_t *o = json_object(), *ex = json_array(), *c = json_object();
	int e, i;

	for (e = 0; e < ev->N; e++)
		json_array_append_new(ex, json_pack("{s:i,s:f,s:I}", "expert", e,
		    "own_cluster", ev->expert_own[e], "routed_windows",
		    (json_int_t)ev->routed[e]));
	for (i = 0; i < ev->ncontrols; i++)
		json_object_set_new(c, ev->control_name[i], json_pack(
		    "{s:f,s:I,s:f}", "nats_per_byte", ev->control_ce[i],
		    "positions", (json_int_t)ev->control_pos[i], "macs",
		    ev->control_macs[i]));
	json_object_set_new(o, "run_id", json_string(ev->run->run_id));
	json_object_set_new(o, "split", json_string(split));
	json_object_set_new(o, "windows", json_integer(ev->w.n));
	json_object_set_new(o, "experts", ex);
	json_object_set_new(o, "mixture", json_pack("{s:f,s:i,s:I,s:f,s:f}",
	    "nats_per_byte", ev->mixture, "top_k", ev->k, "positions",
	    (json_int_t)sa_soma_positions(ev->s), "macs", sa_soma_macs(ev->s),
	    "routing_s", ev->route_s));
	json_object_set_new(o, "controls", c);
	cli_print_json(o);
}

int
cli_eval_soma(const struct cli_run *run, const char *split,
    const char *text, int json, long max_windows)
{
	const pr_spec *s = &run->spec;
	struct soma_eval ev = { .run = run, .s = s, .N = s->soma.experts };
	int test = strcmp(split, "test") == 0;
	const char *path = text != NULL ? text : test ? s->test : s->valid;
	/* any text is scored as it is; the spec's own files are checked
	 * against their digests */
	const char *sha = text != NULL ? NULL : test ? s->test_sha256 :
	    s->valid_sha256;
	kn_soma_shape sh = sa_expert_shape(s);
	kn_soma_model *m = NULL;
	char err[KN_ERR_LEN];
	corpus c;
	int rc;

	ev.k = s->soma.top_k < ev.N ? s->soma.top_k : ev.N;
	if (s->soma.clusters[0] == '\0') {
		fprintf(stderr, "shardmeter eval: the spec names no [soma] "
		    "clusters folder\n");
		return 2;
	}
	if (corpus_open(&c, path, sha, (size_t)s->soma.window + 1,
	    err) != 0) {
		fprintf(stderr, "shardmeter eval: %s split: %s\n", split, err);
		return 1;
	}
	sa_windows_init(&ev.w, c.data, c.len, s->soma.window, max_windows);
	rc = kn_soma_create(&m, &sh, run->be, err);
	if (rc == 0)
		rc = eval_experts(&ev, m, err);
	kn_soma_free(m);
	if (rc == 0)
		rc = eval_others(&ev, run->be, err);
	if (rc != 0) {
		corpus_close(&c);
		fprintf(stderr, "shardmeter eval: %s\n", err);
		return 1;
	}
	if (json)
		print_json(&ev, split);
	else
		print_table(&ev, split, path);
	corpus_close(&c);
	return 0;
}
