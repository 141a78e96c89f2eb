/* The trainer thread: trains the block, evaluates, checkpoints and, with
 * replicas, stops for each round; its events go to the loop and the
 * rounds' answers come back through a loop thread (loop_thread.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/worker.h"
#include "daemon/worker_private.h"
#include "kernels/average.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "proto/checkpoint.h"


/* The loop's answer to WK_ROUND_READY, queued to the thread. */
struct commit {
	int64_t round;
	float *avg;             /* owned */
	float lr;
	char *ckpt;             /* owned */
	size_t len;
	lt_item link;
};

void
wk_event_free(wk_event *ev)
{
	if (ev == NULL)
		return;
	free(ev->buf);
	free(ev->delta);
	free(ev);
}

static void
commit_free(struct commit *cm)
{
	free(cm->avg);
	free(cm->ckpt);
	free(cm);
}

void
wk__post(wk_worker *w, wk_event *ev)
{
	lt_post(w->lt, &ev->link);
}

wk_event *
wk__event(wk_event_kind kind)
{
	wk_event *ev = calloc(1, sizeof(*ev));

	if (ev == NULL)
		abort();	/* a few hundred bytes: nothing to recover */
	ev->kind = kind;
	return ev;
}

void
wk__post_message(wk_worker *w, wk_event_kind kind, const char *what,
    const char *err)
{
	wk_event *ev = wk__event(kind);

	/* a longer one is cut: it is for the log */
	if (snprintf(ev->msg, sizeof(ev->msg), "%s: %s", what, err) < 0)
		ev->msg[0] = '\0';
	wk__post(w, ev);
}

int
wk__post_error(wk_worker *w, const char *what, const char *err)
{
	wk__post_message(w, WK_ERROR, what, err);
	return -1;
}

int
wk__post_file(wk_worker *w, wk_event_kind kind, const char *path,
    int64_t step, int64_t round, char *err)
{
	wk_event *ev = wk__event(kind);
	int rc;

	ev->step = step;
	ev->round = round;
	rc = pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &ev->buf, &ev->len,
	    err);
	if (rc == 0)
		rc = pr_ckpt_sha256_hex(ev->buf, ev->len, ev->etag, err);
	if (rc != 0) {
		wk_event_free(ev);
		return rc;
	}
	wk__post(w, ev);
	return KN_OK;
}

/* The checkpoint just written, read back for the loop to serve. */
static int
post_checkpoint(wk_worker *w, tr_trainer *t, wk_event_kind kind, char *err)
{
	char path[PR_PATH_LEN + 32];

	tr_model_path(path, sizeof(path), w->o.train.dir, w->o.train.kind,
	    w->o.train.block, "ckpt");
	return wk__post_file(w, kind, path, tr_trainer_steps(t),
	    tr_trainer_round(t), err);
}

/* Adopts a published checkpoint: its weights, step and round. */
static int
adopt_checkpoint(wk_worker *w, tr_trainer *t, const char *buf, size_t len,
    char *err)
{
	kn_model *m = tr_trainer_model(t);
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
		tr_trainer_set_step(t, got.step);
		tr_trainer_set_round(t, got.round);
	}
	free(params);
	return rc;
}

/* The loop's answer for round: the last one queued, or NULL when a stop
 * comes first.  Answers for other rounds are stale and dropped. */
static struct commit *
wait_commit(wk_worker *w, int64_t round)
{
	struct commit *found = NULL, *cm;
	lt_item *item, *next;
	int stop;

	do {
		stop = lt_wait(w->lt, -1, &item);
		for (; item != NULL; item = next) {
			next = item->next;
			cm = LT_CONTAINER(item, struct commit, link);
			if (cm->round != round)
				commit_free(cm);
			else {
				if (found != NULL)
					commit_free(found);
				found = cm;
			}
		}
	} while (found == NULL && !stop);
	return found;
}

/* Hands our update to the loop and waits for the round's outcome. */
static int
run_round(wk_worker *w, tr_trainer *t, float *start, char *err)
{
	kn_model *m = tr_trainer_model(t);
	size_t n = kn_model_num_params(m);
	wk_event *ev = wk__event(WK_ROUND_READY);
	int64_t round = tr_trainer_round(t);
	struct commit *cm;
	float *local;
	int rc = KN_OK;

	ev->round = round;
	ev->step = tr_trainer_steps(t);
	ev->count = n;
	if ((ev->delta = malloc(n * sizeof(float))) == NULL ||
	    (local = malloc(n * sizeof(float))) == NULL) {
		wk_event_free(ev);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	kn_model_get_params(m, local);
	kn_update_delta(ev->delta, start, local, n);
	free(local);
	wk__post(w, ev);
	if ((cm = wait_commit(w, round)) != NULL && cm->avg != NULL) {
		kn_outer_step(start, cm->avg, cm->lr, n);
		rc = kn_model_set_params(m, start, err);
		if (rc == 0)
			tr_trainer_set_round(t, round + 1);
	} else if (cm != NULL && cm->ckpt != NULL) {
		rc = adopt_checkpoint(w, t, cm->ckpt, cm->len, err);
	}
	if (cm != NULL)
		commit_free(cm);
	kn_model_get_params(m, start);
	return rc;
}

static void free_commit(lt_item *item);

/* Waits s seconds, or less when a stop is asked (then 1).  Answers of
 * rounds that come meanwhile are stale: a pause follows its round. */
static int
pause_for(wk_worker *w, double s)
{
	double until = kn_now() + s, left;
	lt_item *item, *next;
	int stop = 0;

	/* left > 0: a negative timeout would wait without limit */
	while (!stop && (left = until - kn_now()) > 0) {
		stop = lt_wait(w->lt, left, &item);
		for (; item != NULL; item = next) {
			next = item->next;
			free_commit(item);
		}
	}
	return stop;
}

/* Saves; while the disk is full, training pauses (the last checkpoint
 * stays on disk and served) and the save is tried again after 1, 2, 4
 * ... 30 s, until it succeeds or a stop is asked.  Returns save's code. */
static int
save_or_pause(wk_worker *w, tr_trainer *t, char *err)
{
	char why[KN_ERR_LEN + 64];
	int rc, tries = 0, delay = 1;

	while ((rc = tr_trainer_save(t, err)) == KN_ENOSPC &&
	    !lt_stopping(w->lt)) {
		snprintf(why, sizeof(why), "%s; training paused, retrying in "
		    "%d s", err, delay);
		wk__post_message(w, WK_WARNING, "checkpoint", why);
		if (tries++ == 0) {
			wk_event *ev = wk__event(WK_PAUSED);

			ev->step = tr_trainer_steps(t);
			wk__post(w, ev);
		}
		pause_for(w, delay);
		delay = delay < 16 ? 2 * delay : 30;
	}
	if (rc == 0 && tries > 0) {
		wk_event *ev = wk__event(WK_RESUMED);

		ev->step = tr_trainer_steps(t);
		snprintf(ev->msg, sizeof(ev->msg), "checkpoint written at step "
		    "%lld after %d tries; training resumed",
		    (long long)ev->step, tries + 1);
		wk__post(w, ev);
	}
	return rc;
}

/* What the trainer thread holds while it trains. */
struct training {
	tr_trainer *t;
	corpus valid;
	int have_valid;
	bt_eval_set set;
	double lo, hi;          /* the block's interval of noise levels */
	float *start;           /* the round's starting weights (replicas) */
	double last_progress;
};

/* The model, its first checkpoint, the held-out split (a warning only
 * when it is missing) and the round's starting weights.  -1 once the
 * error is posted. */
static int
training_open(wk_worker *w, struct training *tg)
{
	const wk_opts *o = &w->o;
	char err[KN_ERR_LEN];
	const char *removed;

	tg->set = (bt_eval_set){ o->eval_windows, BT_EVAL_STRATA };
	if (tr_trainer_open(&tg->t, &o->train, err) != 0)
		return wk__post_error(w, "cannot start training", err);
	if (tr_trainer_removed(tg->t, &removed) > 0)
		wk__post_message(w, WK_WARNING, "removed the leftovers of an "
		    "interrupted write", removed);
	if (tr_trainer_steps(tg->t) == 0 && save_or_pause(w, tg->t, err) != 0)
		return wk__post_error(w, "cannot write the first checkpoint", err);
	if (post_checkpoint(w, tg->t, WK_STARTED, err) != 0)
		return wk__post_error(w, "cannot read the checkpoint", err);
	if (o->valid_path != NULL && o->valid_path[0] != '\0') {
		if (corpus_open(&tg->valid, o->valid_path, o->valid_sha256,
		    (size_t)o->train.spec->window + 2, err) != 0)
			wk__post_message(w, WK_WARNING, "held-out shares disabled",
			    err);
		else
			tg->have_valid = 1;
	}
	bt_interval(o->train.spec, o->train.kind, o->train.block - 1, &tg->lo,
	    &tg->hi);
	if (o->replicas > 1) {
		size_t n = kn_model_num_params(tr_trainer_model(tg->t));

		if ((tg->start = malloc(n * sizeof(float))) == NULL)
			return wk__post_error(w, "training", "out of memory");
		kn_model_get_params(tr_trainer_model(tg->t), tg->start);
	}
	return 0;
}

static void
training_close(struct training *tg)
{
	free(tg->start);
	corpus_close(&tg->valid);
	tr_trainer_close(tg->t);
}

/* Progress at most every 0.2 s, and the held-out share when due. */
static int
training_report(wk_worker *w, struct training *tg, int64_t step, float loss)
{
	const wk_opts *o = &w->o;
	char err[KN_ERR_LEN];
	wk_event *ev;

	if (kn_now() - tg->last_progress > 0.2 || step == o->train.steps) {
		ev = wk__event(WK_PROGRESS);
		ev->step = step;
		ev->round = tr_trainer_round(tg->t);
		ev->loss = loss;
		ev->positions_per_s = tr_trainer_positions_per_s(tg->t);
		wk__post(w, ev);
		tg->last_progress = kn_now();
	}
	if (!tg->have_valid || o->eval_every <= 0 || step % o->eval_every != 0)
		return 0;
	ev = wk__event(WK_SHARE);
	ev->step = step;
	if (bt_eval_share(tr_trainer_model(tg->t), o->train.spec, &tg->valid,
	    &tg->set, tg->lo, tg->hi, &ev->share, err) != 0) {
		wk_event_free(ev);
		return wk__post_error(w, "held-out share", err);
	}
	wk__post(w, ev);
	return 0;
}

static int
training_checkpoint(wk_worker *w, struct training *tg)
{
	char err[KN_ERR_LEN];

	if (save_or_pause(w, tg->t, err) != 0 ||
	    post_checkpoint(w, tg->t, WK_CHECKPOINT, err) != 0)
		return wk__post_error(w, "checkpoint", err);
	return 0;
}

/* One optimizer step and what follows it: reports, the round every
 * local_steps with replicas, a checkpoint.  -1 on an error (posted), 1
 * when a stop was asked during the round, else 0. */
static int
training_step(wk_worker *w, struct training *tg)
{
	const wk_opts *o = &w->o;
	char err[KN_ERR_LEN];
	float loss = 0;
	int64_t step;
	int round_due;

	if (tr_trainer_step(tg->t, &loss, err) != 0)
		return wk__post_error(w, "training step", err);
	step = tr_trainer_steps(tg->t);
	if (training_report(w, tg, step, loss) != 0)
		return -1;
	round_due = o->replicas > 1 && step % o->local_steps == 0;
	if (round_due) {
		if (run_round(w, tg->t, tg->start, err) != 0)
			return wk__post_error(w, "round", err);
		if (lt_stopping(w->lt))
			return 1;
	}
	if (round_due || (o->replicas <= 1 && step % o->checkpoint_every == 0))
		return training_checkpoint(w, tg);
	return 0;
}

/* An absolute CLOCK_MONOTONIC time s seconds from now. */
static struct timespec
after(double s)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += (time_t)s;
	t.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* Between steps: waits while a compute probe holds training.  A stop
 * waits too: the probe uses the thread pool meanwhile, and releases
 * within its bounded time (probe.c). */
static void
hold_point(wk_worker *w)
{
	pthread_mutex_lock(&w->hold_lock);
	while (w->hold) {
		if (!w->held) {
			w->held = 1;
			pthread_cond_broadcast(&w->hold_moved);
		}
		pthread_cond_wait(&w->hold_moved, &w->hold_lock);
	}
	w->held = 0;
	pthread_mutex_unlock(&w->hold_lock);
}

void
wk_hold(wk_worker *w)
{
	pthread_mutex_lock(&w->hold_lock);
	w->hold = 1;
	pthread_mutex_unlock(&w->hold_lock);
}

int
wk_wait_held(wk_worker *w, double timeout_s)
{
	struct timespec t = after(timeout_s);
	int rc = 0;

	pthread_mutex_lock(&w->hold_lock);
	while (!w->held && !w->ended && rc == 0)
		if (pthread_cond_timedwait(&w->hold_moved, &w->hold_lock,
		    &t) != 0)
			rc = -1;
	if (w->held || w->ended)
		rc = 0;
	pthread_mutex_unlock(&w->hold_lock);
	return rc;
}

void
wk_release(wk_worker *w)
{
	pthread_mutex_lock(&w->hold_lock);
	w->hold = 0;
	pthread_cond_broadcast(&w->hold_moved);
	pthread_mutex_unlock(&w->hold_lock);
}

static void
run(lt_thread *lt, void *arg)
{
	wk_worker *w = arg;
	struct training tg = { 0 };
	int rc = 0;

	(void)lt;       /* w->lt, set before the thread started */
	if (training_open(w, &tg) != 0) {
		training_close(&tg);
		return;
	}
	while (rc == 0 && tr_trainer_steps(tg.t) < w->o.train.steps &&
	    !lt_stopping(w->lt)) {
		hold_point(w);
		rc = training_step(w, &tg);
	}
	if (rc >= 0 && training_checkpoint(w, &tg) == 0)
		wk__post(w, wk__event(lt_stopping(w->lt) ? WK_STOPPED : WK_DONE));
	training_close(&tg);
}

/* The thread's work, then the mark a probe's wk_wait_held looks for. */
static void
run_then_end(lt_thread *lt, void *arg)
{
	wk_worker *w = arg;

	if (w->o.soma)
		wk__run_soma(lt, arg);
	else
		run(lt, arg);
	pthread_mutex_lock(&w->hold_lock);
	w->ended = 1;
	pthread_cond_broadcast(&w->hold_moved);
	pthread_mutex_unlock(&w->hold_lock);
}

static void
deliver(void *arg, lt_item *item)
{
	wk_worker *w = arg;

	w->on_event(w->ctx, LT_CONTAINER(item, wk_event, link));
}

static void
free_event(lt_item *item)
{
	wk_event_free(LT_CONTAINER(item, wk_event, link));
}

static void
free_commit(lt_item *item)
{
	commit_free(LT_CONTAINER(item, struct commit, link));
}

int
wk_start(wk_worker **out, uv_loop_t *loop, const wk_opts *o,
    wk_event_fn on_event, void *ctx, char *err)
{
	wk_worker *w = calloc(1, sizeof(*w));
	lt_opts lo = { "trainer", run_then_end, deliver, free_commit,
	    free_event, w };
	pthread_condattr_t attr;
	int rc;

	*out = NULL;
	if (w == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	w->o = *o;
	w->on_event = on_event;
	w->ctx = ctx;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_mutex_init(&w->hold_lock, NULL);
	pthread_cond_init(&w->hold_moved, &attr);
	pthread_condattr_destroy(&attr);
	if ((rc = lt_start(&w->lt, loop, &lo, err)) != 0) {
		pthread_mutex_destroy(&w->hold_lock);
		pthread_cond_destroy(&w->hold_moved);
		free(w);
		return rc;
	}
	*out = w;
	return KN_OK;
}

void
wk_stop(wk_worker *w)
{
	lt_stop(w->lt);
}

void
wk_commit_round(wk_worker *w, int64_t round, float *avg, float outer_lr,
    char *ckpt, size_t len)
{
	struct commit *cm = calloc(1, sizeof(*cm));

	if (cm == NULL)
		abort();	/* a few dozen bytes: nothing to recover */
	cm->round = round;
	cm->avg = avg;
	cm->lr = outer_lr;
	cm->ckpt = ckpt;
	cm->len = len;
	lt_submit(w->lt, &cm->link);
}

static void
on_closed(void *arg)
{
	wk_worker *w = arg;

	if (w->closed != NULL)
		w->closed(w->closed_arg);
	pthread_mutex_destroy(&w->hold_lock);
	pthread_cond_destroy(&w->hold_moved);
	free(w);
}

void
wk_close(wk_worker *w, void (*done)(void *arg), void *arg)
{
	w->closed = done;
	w->closed_arg = arg;
	lt_close(w->lt, on_closed, w);
}
