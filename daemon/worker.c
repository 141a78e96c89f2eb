/* The trainer thread and its queue to the loop. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/worker.h"
#include "kernels/average.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "proto/checkpoint.h"

struct worker {
	wk_opts o;
	uv_async_t async;
	pthread_t thread;
	int joined;
	wk_event_fn on_event;
	void *ctx;
	pthread_mutex_t lock;
	pthread_cond_t wake;    /* a command for the thread */
	wk_event *head, *tail;  /* to the loop */
	int stop;
	int64_t commit_round;   /* -1: none pending */
	float *commit_avg;
	float commit_lr;
	char *commit_ckpt;
	size_t commit_len;
	int committed;
	void (*closed)(void *);
	void *closed_arg;
};

void
worker_event_free(wk_event *ev)
{
	if (ev == NULL)
		return;
	free(ev->buf);
	free(ev->delta);
	free(ev);
}

static void
post(worker *w, wk_event *ev)
{
	pthread_mutex_lock(&w->lock);
	ev->next = NULL;
	if (w->tail != NULL)
		w->tail->next = ev;
	else
		w->head = ev;
	w->tail = ev;
	pthread_mutex_unlock(&w->lock);
	uv_async_send(&w->async);
}

static wk_event *
event(wk_event_kind kind)
{
	wk_event *ev = calloc(1, sizeof(*ev));

	if (ev == NULL)
		abort();	/* a few hundred bytes: nothing to recover */
	ev->kind = kind;
	return ev;
}

static void
post_message(worker *w, wk_event_kind kind, const char *what,
    const char *err)
{
	wk_event *ev = event(kind);

	snprintf(ev->msg, sizeof(ev->msg), "%s: %s", what, err);
	post(w, ev);
}

/* The checkpoint just written, read back for the loop to serve. */
static int
post_checkpoint(worker *w, sm_trainer *t, wk_event_kind kind, char *err)
{
	char path[PR_PATH_LEN + 32];
	wk_event *ev = event(kind);
	int rc;

	ev->step = sm_trainer_steps(t);
	ev->round = sm_trainer_round(t);
	sm_model_path(path, sizeof(path), w->o.train.dir, w->o.train.kind,
	    w->o.train.block, "ckpt");
	rc = pr_ckpt_read_file(path, SM_CKPT_MAX_BYTES, &ev->buf, &ev->len,
	    err);
	if (rc == 0)
		rc = pr_ckpt_sha256_hex(ev->buf, ev->len, ev->etag, err);
	if (rc != 0) {
		worker_event_free(ev);
		return rc;
	}
	post(w, ev);
	return KN_OK;
}

static int
stop_requested(worker *w)
{
	int s;

	pthread_mutex_lock(&w->lock);
	s = w->stop;
	pthread_mutex_unlock(&w->lock);
	return s;
}

/* Adopts a published checkpoint: its weights, step and round. */
static int
adopt_checkpoint(worker *w, sm_trainer *t, const char *buf, size_t len,
    char *err)
{
	kn_model *m = sm_trainer_model(t);
	size_t n = kn_model_num_params(m);
	float *params = malloc(n * sizeof(float));
	pr_ckpt_meta expect = { 0 }, got;
	const kn_tensor *tab;
	int count, rc;

	if (params == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", w->o.train.run_id);
	expect.block = w->o.train.block;
	snprintf(expect.kind, sizeof(expect.kind), "block");
	tab = kn_model_tensors(m, &count);
	rc = pr_ckpt_decode(buf, len, &expect, tab, count, params, &got, err);
	if (rc == 0)
		rc = kn_model_set_params(m, params, err);
	if (rc == 0) {
		sm_trainer_set_step(t, got.step);
		sm_trainer_set_round(t, got.round);
	}
	free(params);
	return rc;
}

/* Hands our update to the loop and waits for the round's outcome. */
static int
run_round(worker *w, sm_trainer *t, float *start, char *err)
{
	kn_model *m = sm_trainer_model(t);
	size_t n = kn_model_num_params(m);
	wk_event *ev = event(WK_ROUND_READY);
	int64_t round = sm_trainer_round(t);
	float *avg, lr, *local;
	char *ckpt;
	size_t len;
	int rc = KN_OK;

	ev->round = round;
	ev->step = sm_trainer_steps(t);
	ev->count = n;
	if ((ev->delta = malloc(n * sizeof(float))) == NULL ||
	    (local = malloc(n * sizeof(float))) == NULL) {
		worker_event_free(ev);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	kn_model_get_params(m, local);
	kn_update_delta(ev->delta, start, local, n);
	free(local);
	post(w, ev);
	pthread_mutex_lock(&w->lock);
	while (!w->stop && !(w->committed && w->commit_round == round))
		pthread_cond_wait(&w->wake, &w->lock);
	avg = w->commit_avg;
	lr = w->commit_lr;
	ckpt = w->commit_ckpt;
	len = w->commit_len;
	if (!(w->committed && w->commit_round == round))
		avg = NULL, ckpt = NULL;
	else
		w->commit_avg = NULL, w->commit_ckpt = NULL;
	w->committed = 0;
	pthread_mutex_unlock(&w->lock);
	if (avg != NULL) {
		kn_outer_step(start, avg, lr, n);
		rc = kn_model_set_params(m, start, err);
		if (rc == 0)
			sm_trainer_set_round(t, round + 1);
	} else if (ckpt != NULL) {
		rc = adopt_checkpoint(w, t, ckpt, len, err);
	}
	free(avg);
	free(ckpt);
	kn_model_get_params(m, start);
	return rc;
}

static void *
worker_main(void *arg)
{
	worker *w = arg;
	const wk_opts *o = &w->o;
	char err[KN_ERR_LEN];
	sm_trainer *t = NULL;
	corpus valid = { 0 };
	bt_eval_set set = { o->eval_windows, BT_EVAL_STRATA };
	float loss = 0, *start = NULL;
	double last_progress = 0, lo, hi;
	int have_valid = 0;

	if (sm_trainer_open(&t, &o->train, err) != 0) {
		post_message(w, WK_ERROR, "cannot start training", err);
		return NULL;
	}
	if (sm_trainer_steps(t) == 0 && sm_trainer_save(t, err) != 0) {
		post_message(w, WK_ERROR, "cannot write the first checkpoint", err);
		goto out;
	}
	if (post_checkpoint(w, t, WK_STARTED, err) != 0) {
		post_message(w, WK_ERROR, "cannot read the checkpoint", err);
		goto out;
	}
	if (o->valid_path != NULL && o->valid_path[0] != '\0') {
		if (corpus_open(&valid, o->valid_path, o->valid_sha256,
		    (size_t)o->train.spec->window + 2, err) != 0)
			post_message(w, WK_WARNING, "held-out shares disabled", err);
		else
			have_valid = 1;
	}
	bt_interval(o->train.spec, o->train.kind, o->train.block - 1, &lo, &hi);
	if (o->replicas > 1) {
		size_t n = kn_model_num_params(sm_trainer_model(t));

		if ((start = malloc(n * sizeof(float))) == NULL) {
			post_message(w, WK_ERROR, "training", "out of memory");
			goto out;
		}
		kn_model_get_params(sm_trainer_model(t), start);
	}
	while (sm_trainer_steps(t) < o->train.steps) {
		int64_t step;

		if (stop_requested(w))
			break;
		if (sm_trainer_step(t, &loss, err) != 0) {
			post_message(w, WK_ERROR, "training step", err);
			goto out;
		}
		step = sm_trainer_steps(t);
		if (kn_now() - last_progress > 0.2 || step == o->train.steps) {
			wk_event *ev = event(WK_PROGRESS);

			ev->step = step;
			ev->round = sm_trainer_round(t);
			ev->loss = loss;
			ev->positions_per_s = sm_trainer_positions_per_s(t);
			post(w, ev);
			last_progress = kn_now();
		}
		if (have_valid && o->eval_every > 0 &&
		    step % o->eval_every == 0) {
			wk_event *ev = event(WK_SHARE);

			ev->step = step;
			if (bt_eval_share(sm_trainer_model(t), o->train.spec,
			    &valid, &set, lo, hi, &ev->share, err) != 0) {
				worker_event_free(ev);
				post_message(w, WK_ERROR, "held-out share", err);
				goto out;
			}
			post(w, ev);
		}
		if (o->replicas > 1 && step % o->local_steps == 0) {
			if (run_round(w, t, start, err) != 0) {
				post_message(w, WK_ERROR, "round", err);
				goto out;
			}
			if (stop_requested(w))
				break;
		}
		if ((o->replicas > 1 && step % o->local_steps == 0) ||
		    (o->replicas <= 1 && step % o->checkpoint_every == 0)) {
			if (sm_trainer_save(t, err) != 0 ||
			    post_checkpoint(w, t, WK_CHECKPOINT, err) != 0) {
				post_message(w, WK_ERROR, "checkpoint", err);
				goto out;
			}
		}
	}
	if (sm_trainer_save(t, err) != 0 ||
	    post_checkpoint(w, t, WK_CHECKPOINT, err) != 0) {
		post_message(w, WK_ERROR, "checkpoint", err);
		goto out;
	}
	post(w, event(stop_requested(w) ? WK_STOPPED : WK_DONE));
out:
	free(start);
	corpus_close(&valid);
	sm_trainer_close(t);
	return NULL;
}

static void
on_async(uv_async_t *h)
{
	worker *w = h->data;
	wk_event *ev, *next;

	pthread_mutex_lock(&w->lock);
	ev = w->head;
	w->head = w->tail = NULL;
	pthread_mutex_unlock(&w->lock);
	for (; ev != NULL; ev = next) {
		next = ev->next;
		w->on_event(w->ctx, ev);
	}
}

int
worker_start(worker **out, uv_loop_t *loop, const wk_opts *o,
    wk_event_fn on_event, void *ctx, char *err)
{
	worker *w = calloc(1, sizeof(*w));
	int rc;

	*out = NULL;
	if (w == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	w->o = *o;
	w->on_event = on_event;
	w->ctx = ctx;
	w->commit_round = -1;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	if ((rc = uv_async_init(loop, &w->async, on_async)) != 0) {
		free(w);
		return kn_error(err, KN_EIO, "uv_async_init: %s",
		    uv_strerror(rc));
	}
	w->async.data = w;
	if ((rc = pthread_create(&w->thread, NULL, worker_main, w)) != 0) {
		uv_close((uv_handle_t *)&w->async, NULL);
		return kn_error(err, KN_EIO, "cannot start the trainer thread");
	}
	*out = w;
	return KN_OK;
}

void
worker_stop(worker *w)
{
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void
worker_commit_round(worker *w, int64_t round, float *avg, float outer_lr,
    char *ckpt, size_t len)
{
	pthread_mutex_lock(&w->lock);
	free(w->commit_avg);
	free(w->commit_ckpt);
	w->commit_avg = avg;
	w->commit_lr = outer_lr;
	w->commit_ckpt = ckpt;
	w->commit_len = len;
	w->commit_round = round;
	w->committed = 1;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

static void
on_closed(uv_handle_t *h)
{
	worker *w = h->data;
	wk_event *ev, *next;

	for (ev = w->head; ev != NULL; ev = next) {
		next = ev->next;
		worker_event_free(ev);
	}
	free(w->commit_avg);
	free(w->commit_ckpt);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->wake);
	if (w->closed != NULL)
		w->closed(w->closed_arg);
	free(w);
}

void
worker_close(worker *w, void (*done)(void *arg), void *arg)
{
	worker_stop(w);
	pthread_join(w->thread, NULL);
	w->closed = done;
	w->closed_arg = arg;
	uv_close((uv_handle_t *)&w->async, on_closed);
}
