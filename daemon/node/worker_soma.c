/* The trainer thread of a SOMA expert daemon: sa_train on the expert's
 * cluster from the seed, and at each validation its checkpoint and the
 * log-probabilities of its expert on the held-out windows the router
 * gives it (proto/heldout.h), posted to the loop.  No rounds: experts
 * are independent. */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/corpus.h"
#include "daemon/node/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/heldout.h"
#include "soma/mixture.h"
#include "soma/model_file.h"
#include "soma/trainer.h"

/* What the thread holds while its expert trains. */
struct soma_training {
	wk_worker *w;
	sa_train_opts so;
	char out[PR_PATH_LEN + 32];
	char cluster[PR_PATH_LEN + 32];
	const char *train[1];
	volatile sig_atomic_t stop;
	double last_progress;
	/* the held-out windows routed to this expert */
	corpus valid;
	int have_valid;
	sa_windows win;
	int k;
	long count;
	long *idx;
	uint32_t *idx32;
	float *logp;            /* (count, T) */
};

static void
soma_progress(void *user, const sa_progress *p)
{
	struct soma_training *st = user;
	wk_event *ev;

	if (lt_stopping(st->w->lt))
		st->stop = 1;
	if (kn_now() - st->last_progress <= 0.2 && p->step + 1 != p->steps)
		return;
	ev = wk__event(WK_PROGRESS);
	ev->step = p->step + 1;
	ev->loss = (float)p->loss;
	ev->val = p->val;
	ev->lr = p->lr;
	ev->eps = p->eps;
	ev->positions = p->positions;
	ev->positions_per_s = p->positions_per_s;
	wk__post(st->w, ev);
	st->last_progress = kn_now();
}

/* The expert's log-probabilities on its held-out windows, posted as
 * the message that /v1/soma/heldout serves. */
static int
post_heldout(struct soma_training *st, kn_soma_model *m, int64_t step,
    char *err)
{
	const wk_opts *o = &st->w->o;
	pr_heldout_meta hm = { .expert = o->expert,
	    .experts = o->train.spec->soma.experts, .top_k = st->k,
	    .step = step, .T = st->win.T, .windows = st->win.n,
	    .count = st->count };
	wk_event *ev;
	int rc;

	if (!st->have_valid)
		return 0;
	snprintf(hm.run_id, sizeof(hm.run_id), "%s", o->train.run_id);
	if ((rc = sa_score(m, &st->win, st->idx, st->count, st->logp,
	    err)) != 0)
		return rc;
	ev = wk__event(WK_HELDOUT);
	ev->step = step;
	if ((rc = pr_heldout_encode(&hm, st->idx32, st->logp, &ev->buf,
	    &ev->len, err)) != 0) {
		wk_event_free(ev);
		return rc;
	}
	wk__post(st->w, ev);
	return 0;
}

/* After each validation: the checkpoint (kept in the state directory
 * and served), then the held-out scores. */
static int
soma_validated(void *user, kn_soma_model *m, const sa_progress *p,
    char *err)
{
	struct soma_training *st = user;
	wk_event *ev = wk__event(WK_PROGRESS);
	int rc;

	ev->step = p->step + 1;
	ev->loss = (float)p->loss;
	ev->val = p->val;
	ev->val_step = p->step + 1;
	ev->lr = p->lr;
	ev->eps = p->eps;
	ev->positions = p->positions;
	ev->positions_per_s = p->positions_per_s;
	wk__post(st->w, ev);
	if ((rc = sa_train_checkpoint(&st->so, m, p->step + 1, st->out,
	    err)) != 0 || (rc = wk__post_file(st->w, WK_CHECKPOINT, st->out,
	    p->step + 1, 0, err)) != 0)
		return rc;
	return post_heldout(st, m, p->step + 1, err);
}

/* The held-out windows of [data] valid, routed; a warning only when the
 * split is missing (nothing is published then). */
static int
heldout_open(struct soma_training *st, char *err)
{
	const wk_opts *o = &st->w->o;
	const pr_spec *s = o->train.spec;
	char path[PR_PATH_LEN + 32];
	sa_router r;
	int *sel = NULL, rc, j;
	long i;

	if (o->valid_path == NULL || o->valid_path[0] == '\0')
		return 0;
	if (corpus_open(&st->valid, o->valid_path, o->valid_sha256,
	    (size_t)s->soma.window + 1, err) != 0) {
		wk__post_message(st->w, WK_WARNING, "held-out scores disabled",
		    err);
		return 0;
	}
	st->have_valid = 1;
	sa_windows_init(&st->win, st->valid.data, st->valid.len,
	    s->soma.window, o->eval_windows < PR_HELDOUT_MAX_WINDOWS ?
	    o->eval_windows : PR_HELDOUT_MAX_WINDOWS);
	snprintf(path, sizeof(path), "%s/router.smr", s->soma.clusters);
	if ((rc = sa_router_load(&r, path, err)) != 0)
		return rc;
	st->k = s->soma.top_k < s->soma.experts ? s->soma.top_k :
	    s->soma.experts;
	sel = malloc((size_t)(st->win.n ? st->win.n : 1) * st->k *
	    sizeof(int));
	st->idx = malloc((size_t)(st->win.n ? st->win.n : 1) * sizeof(long));
	st->idx32 = malloc((size_t)(st->win.n ? st->win.n : 1) *
	    sizeof(uint32_t));
	if (sel == NULL || st->idx == NULL || st->idx32 == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	else if ((rc = sa_route_windows(&r, &st->win,
	    (size_t)s->soma.route_bytes, st->k, sel, err)) >= 0) {
		rc = 0;
		for (i = 0; i < st->win.n; i++)
			for (j = 0; j < st->k; j++)
				if (sel[i * st->k + j] == o->expert) {
					st->idx32[st->count] = (uint32_t)i;
					st->idx[st->count++] = i;
				}
		st->logp = malloc((size_t)(st->count ? st->count : 1) *
		    st->win.T * sizeof(float));
		if (st->logp == NULL)
			rc = kn_error(err, KN_ENOMEM, "out of memory");
	}
	free(sel);
	sa_router_free(&r);
	return rc;
}

static void
soma_close(struct soma_training *st)
{
	if (st->have_valid)
		corpus_close(&st->valid);
	free(st->idx);
	free(st->idx32);
	free(st->logp);
}

/* An expert whose checkpoint in the state directory has every step is
 * served as it is: its checkpoint and held-out scores, then done.  1
 * when so, 0 when it must train, -1 once an error is posted. */
static int
soma_finished(struct soma_training *st)
{
	const wk_opts *o = &st->w->o;
	kn_soma_shape sh = sa_expert_shape(o->train.spec);
	pr_ckpt_meta want = { .block = o->expert, .kind = "expert" }, got;
	size_t nb = kn_soma_body_params(&sh), nd = kn_soma_decoder_params(&sh);
	float *body, *dec;
	kn_soma_model *m = NULL;
	char err[KN_ERR_LEN];
	wk_event *ev;
	int rc;

	snprintf(want.run_id, sizeof(want.run_id), "%s", o->train.run_id);
	if (sa_model_load(st->out, &want, &sh, NULL, NULL, &got, err) != 0 ||
	    got.step < o->train.steps)
		return 0;
	body = malloc(nb * sizeof(float));
	dec = malloc(nd * sizeof(float));
	rc = body == NULL || dec == NULL ? kn_error(err, KN_ENOMEM,
	    "out of memory") : sa_model_load(st->out, &want, &sh, body, dec,
	    NULL, err);
	if (rc == 0 && (rc = kn_soma_create(&m, &sh, o->train.be, err)) == 0 &&
	    (rc = kn_soma_set_body(m, body, err)) == 0)
		rc = kn_soma_set_decoder(m, dec, err);
	free(body);
	free(dec);
	if (rc == 0) {
		ev = wk__event(WK_STARTED);
		ev->step = got.step;
		wk__post(st->w, ev);
		rc = wk__post_file(st->w, WK_CHECKPOINT, st->out, got.step, 0,
		    err);
	}
	if (rc == 0)
		rc = post_heldout(st, m, got.step, err);
	kn_soma_free(m);
	if (rc != 0)
		return wk__post_error(st->w, "finished expert", err);
	ev = wk__event(WK_PROGRESS);
	ev->step = got.step;
	ev->val = NAN;
	wk__post(st->w, ev);
	wk__post(st->w, wk__event(WK_DONE));
	return 1;
}

void
wk__run_soma(lt_thread *lt, void *arg)
{
	wk_worker *w = arg;
	const wk_opts *o = &w->o;
	struct soma_training st;
	sa_result res;
	char err[KN_ERR_LEN];
	wk_event *ev;
	int rc;

	(void)lt;
	memset(&st, 0, sizeof(st));
	st.w = w;
	snprintf(st.out, sizeof(st.out), "%s/expert-%d.ckpt", o->train.dir,
	    o->expert);
	snprintf(st.cluster, sizeof(st.cluster), "%s/cluster-%d.txt",
	    o->train.spec->soma.clusters, o->expert);
	st.train[0] = st.cluster;
	if (heldout_open(&st, err) != 0) {
		wk__post_error(w, "held-out windows", err);
		goto out;
	}
	if (soma_finished(&st) != 0)
		goto out;
	ev = wk__event(WK_STARTED);
	ev->val = NAN;
	wk__post(w, ev);
	st.so.spec = o->train.spec;
	st.so.run_id = o->train.run_id;
	st.so.kind = SA_EXPERT;
	st.so.expert = o->expert;
	st.so.steps = o->train.steps;
	st.so.train = st.train;
	st.so.ntrain = 1;
	st.so.seed_path = o->seed_path;
	st.so.out_path = st.out;
	st.so.valid_windows = o->soma_valid_windows;
	st.so.be = o->train.be;
	st.so.progress = soma_progress;
	st.so.validated = soma_validated;
	st.so.user = &st;
	st.so.stop = &st.stop;
	if ((rc = sa_train(&st.so, &res, err)) != 0) {
		wk__post_error(w, "training", err);
		goto out;
	}
	/* sa_train has written the checkpoint of its last step */
	if (wk__post_file(w, WK_CHECKPOINT, st.out, res.steps, 0, err) != 0) {
		wk__post_error(w, "checkpoint", err);
		goto out;
	}
	wk__post(w, wk__event(st.stop ? WK_STOPPED : WK_DONE));
out:
	soma_close(&st);
}
