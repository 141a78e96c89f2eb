/* The trainer thread: trains the block, evaluates, checkpoints and, with
 * replicas, stops for each round; its events go to the loop and the
 * rounds' answers come back through a loop thread (loop_thread.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/node/worker.h"
#include "daemon/node/internal.h"
#include "kernels/average.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "proto/checkpoint.h"


/* The loop's answer to WK_ROUND_READY, queued to the thread. */
struct commit {
	wk_outcome o;           /* its buffers owned */
	lt_item link;
};

static void
commit_free(struct commit *cm)
{
	int i;

	for (i = 0; i < cm->o.count; i++)
		free(cm->o.update[i]);
	for (i = 0; i < cm->o.extras; i++)
		free(cm->o.extra[i]);
	free(cm->o.ckpt);
	free(cm);
}

/* The checkpoint just written, read back for the loop to serve, as the
 * one of step and round. */
static int
post_checkpoint(wk_worker *w, wk_event_kind kind, int64_t step,
    int64_t round, char *err)
{
	char path[PR_PATH_LEN + 32];

	tr_model_path(path, sizeof(path), w->o.train.dir, w->o.train.kind,
	    w->o.train.block, "ckpt");
	return wk__post_file(w, kind, path, step, round, err);
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
			if (cm->o.round != round)
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

/* A commit of this round comes from wk_close: the loop goes away, and no
 * answer of a round will follow. */
#define CLOSING_ROUND INT64_MIN
/* How long after a stop a replica waits for its round in flight beyond
 * the round deadline: by then the coordinator has decided, and a
 * checkpoint to adopt has had time to arrive. */
#define STOP_GRACE_S 10.0

/* Overlapped rounds: the round in flight, what we sent with it, and its
 * answer once the loop has given it. */
struct overlap {
	int64_t round;          /* in flight, -1: none */
	int64_t sent_step;      /* the step it was sent at */
	float *sent;            /* the local weights sent then (S) */
	float *local;           /* room for the local weights */
	struct commit *held;    /* its answer, once here */
	int closing;            /* the loop closes: no answer will come */
	int64_t steps;          /* steps trained with an answer outstanding */
};

/* What the trainer thread holds while it trains. */
struct training {
	tr_trainer *t;
	corpus valid;
	int have_valid;
	bt_eval_set set;
	double lo, hi;          /* the block's interval of noise levels */
	/* the round's starting weights (replicas), and the step and round
	 * they belong to: with overlapped rounds, the consensus, which lags
	 * the local weights by a round */
	float *start;
	int64_t start_step, start_round;
	struct overlap ov;
	float loss;             /* of the last step */
	double last_progress;
	/* roll-backs since the last checkpoint written: the first takes
	 * the newest checkpoint, the second the previous good one, a third
	 * gives up */
	int rollbacks;
};

static void post_progress(wk_worker *w, struct training *tg);

static int
overlapping(const wk_opts *o)
{
	return o->overlap && o->replicas > 1;
}

/* Answers taken from the thread's inbox: the latest for the round in
 * flight is kept, any other is stale. */
static void
take_commits(struct overlap *ov, lt_item *item)
{
	struct commit *cm;
	lt_item *next;

	for (; item != NULL; item = next) {
		next = item->next;
		cm = LT_CONTAINER(item, struct commit, link);
		if (cm->o.round == CLOSING_ROUND)
			ov->closing = 1;
		if (ov->round < 0 || cm->o.round != ov->round) {
			commit_free(cm);
			continue;
		}
		if (ov->held != NULL)
			commit_free(ov->held);
		ov->held = cm;
	}
}

/* Waits s seconds, or less when a stop is asked (then 1).  Answers of
 * rounds that come meanwhile are stale (a pause follows its round), but
 * for an overlapped round in flight. */
static int
pause_for(wk_worker *w, struct overlap *ov, double s)
{
	double until = kn_now() + s, left;
	lt_item *item;
	int stop = 0;

	/* left > 0: a negative timeout would wait without limit */
	while (!stop && (left = until - kn_now()) > 0) {
		stop = lt_wait(w->lt, left, &item);
		take_commits(ov, item);
	}
	return stop;
}

/* Saves; while the disk is full, training pauses (the last checkpoint
 * stays on disk and served) and the save is tried again after 1, 2, 4
 * ... 30 s, until it succeeds or a stop is asked.  Returns save's code. */
static int
save_or_pause(wk_worker *w, struct training *tg, char *err)
{
	char why[KN_ERR_LEN + 64];
	int rc, tries = 0, delay = 1;

	while ((rc = tr_trainer_save(tg->t, err)) == KN_ENOSPC &&
	    !lt_stopping(w->lt)) {
		snprintf(why, sizeof(why), "%s; training paused, retrying in "
		    "%d s", err, delay);
		wk__post_message(w, WK_WARNING, "checkpoint", why);
		if (tries++ == 0) {
			wk_event *ev = wk__event(WK_PAUSED);

			ev->step = tr_trainer_steps(tg->t);
			wk__post(w, ev);
		}
		pause_for(w, &tg->ov, delay);
		delay = delay < 16 ? 2 * delay : 30;
	}
	if (rc == 0 && tries > 0) {
		wk_event *ev = wk__event(WK_RESUMED);

		ev->step = tr_trainer_steps(tg->t);
		snprintf(ev->msg, sizeof(ev->msg), "checkpoint written at step "
		    "%lld after %d tries; training resumed",
		    (long long)ev->step, tries + 1);
		wk__post(w, ev);
	}
	return rc;
}

/* The answer for the overlapped round in flight.  A stop does not end the
 * wait, since the weights a replica stops with must hold every average
 * it took part in, but bounds it; the loop's close ends it.  NULL when
 * none came. */
static struct commit *
await_round(wk_worker *w, struct overlap *ov)
{
	double until = -1;
	struct commit *cm;
	lt_item *item;
	char why[128];

	while (ov->held == NULL && !ov->closing) {
		int stop = lt_wait(w->lt, -1, &item);

		if (item != NULL) {
			take_commits(ov, item);
			continue;
		}
		if (!stop)
			continue;
		/* lt_wait no longer sleeps once a stop is asked */
		if (until < 0)
			until = kn_now() + w->o.train.spec->round_deadline +
			    STOP_GRACE_S;
		if (kn_now() >= until)
			break;
		nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
	if ((cm = ov->held) == NULL) {
		snprintf(why, sizeof(why), "no answer for round %lld after the "
		    "stop; the checkpoint keeps the weights before it",
		    (long long)ov->round);
		wk__post_message(w, WK_WARNING, "round", why);
	}
	ov->held = NULL;
	return cm;
}

/* Applies the answer for the overlapped round in flight.  An average
 * moves the consensus on, G = G - outer_lr * avg, and the local weights
 * by as far as the consensus moved from the point we sent, X = X + (G -
 * S), which keeps the progress made since; with no step since sending
 * (the last round) they become G itself, the same bits on every replica.
 * A checkpoint to adopt replaces both, with its step and round.  Neither
 * (our update could not go out) is a blocking round's: the local weights
 * become the consensus, and the next boundary offers the same round
 * again.  No answer (a stop) keeps the consensus as it was.  Returns 0
 * after an average, 1 when this boundary must send nothing, or a negative
 * KN_E* code. */
static int
overlap_apply(wk_worker *w, struct training *tg, struct commit *cm,
    char *err)
{
	kn_model *m = tr_trainer_model(tg->t);
	size_t n = kn_model_num_params(m);
	struct overlap *ov = &tg->ov;
	int64_t round = ov->round;
	float *avg = NULL;
	int rc = 1;

	ov->round = -1;
	if (cm != NULL && cm->o.count > 0 &&
	    (avg = malloc(n * sizeof(float))) == NULL) {
		commit_free(cm);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	if (avg != NULL &&
	    (rc = wk__check_round(w, m, tg->start, &cm->o, avg, err)) != 0) {
		free(avg);
		commit_free(cm);
		return rc;
	}
	if (avg != NULL) {
		kn_outer_step(tg->start, avg, cm->o.outer_lr, n);
		free(avg);
		wk__round_synced(w, cm->o.count);
		tg->start_step = ov->sent_step;
		tg->start_round = round + 1;
		if (tr_trainer_steps(tg->t) == ov->sent_step)
			rc = kn_model_set_params(m, tg->start, err);
		else {
			kn_model_get_params(m, ov->local);
			kn_outer_rebase(ov->local, tg->start, ov->sent, n);
			rc = kn_model_set_params(m, ov->local, err);
		}
	} else if (cm != NULL && cm->o.ckpt != NULL) {
		/* adopted or refused, this boundary sends nothing */
		if ((rc = wk__adopt(w, tg->t, &cm->o, err)) == 0)
			rc = 1;
		else if (rc == 1)
			tr_trainer_set_round(tg->t, round);
	} else if (cm != NULL) {
		tr_trainer_set_round(tg->t, round);
	}
	if (cm != NULL && cm->o.count == 0 && rc == 1) {
		kn_model_get_params(m, tg->start);
		tg->start_step = tr_trainer_steps(tg->t);
		tg->start_round = tr_trainer_round(tg->t);
	}
	if (cm != NULL)
		commit_free(cm);
	return rc;
}

/* Our update for the trainer's round, start - local, for the loop; NULL
 * when out of memory. */
static wk_event *
round_update(tr_trainer *t, const float *start, const float *local,
    size_t n)
{
	wk_event *ev = wk__event(WK_ROUND_READY);

	ev->round = tr_trainer_round(t);
	ev->step = tr_trainer_steps(t);
	ev->count = n;
	if ((ev->delta = malloc(n * sizeof(float))) == NULL) {
		wk_event_free(ev);
		return NULL;
	}
	kn_update_delta(ev->delta, start, local, n);
	return ev;
}

/* Hands our update to the loop and waits for the round's outcome: the
 * members' updates, checked and combined (worker_check.c), or a
 * checkpoint to adopt.  A checkpoint refused leaves the local weights
 * and the round as they were, as a round without outcome does: the next
 * boundary offers the same round again, and a replica that really is
 * behind then hears so from the others. */
static int
run_round(wk_worker *w, tr_trainer *t, float *start, char *err)
{
	kn_model *m = tr_trainer_model(t);
	size_t n = kn_model_num_params(m);
	int64_t round = tr_trainer_round(t);
	struct commit *cm;
	float *local;
	wk_event *ev;
	int rc = KN_OK;

	if ((local = malloc(n * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	kn_model_get_params(m, local);
	ev = round_update(t, start, local, n);
	wk__round_trained(w);
	if (ev == NULL) {
		free(local);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	wk__post(w, ev);
	if ((cm = wait_commit(w, round)) != NULL && cm->o.count > 0) {
		/* local is the combination's room now */
		rc = wk__check_round(w, m, start, &cm->o, local, err);
		if (rc == 0) {
			kn_outer_step(start, local, cm->o.outer_lr, n);
			rc = kn_model_set_params(m, start, err);
		}
		if (rc == 0) {
			tr_trainer_set_round(t, round + 1);
			wk__round_synced(w, cm->o.count);
		}
	} else if (cm != NULL && cm->o.ckpt != NULL) {
		if ((rc = wk__adopt(w, t, &cm->o, err)) == 1)
			rc = KN_OK;
	}
	free(local);
	if (cm != NULL)
		commit_free(cm);
	kn_model_get_params(m, start);
	return rc;
}

/* The end of a round with overlapped rounds: the round before, if still
 * in flight, is waited for and applied; then this one is sent, with the
 * local weights kept as its stale point, and training goes on without
 * waiting, but after the last step, where the answer is waited for so
 * that the final weights hold every average.  After a stop nothing is
 * sent. */
static int
overlap_round(wk_worker *w, struct training *tg, char *err)
{
	struct overlap *ov = &tg->ov;
	wk_event *ev;
	int rc;

	/* the status gives the step the trainer waits at, as with a
	 * blocking round */
	if (ov->round >= 0 && ov->held == NULL)
		post_progress(w, tg);
	wk__round_trained(w);
	if (ov->round >= 0 &&
	    (rc = overlap_apply(w, tg, await_round(w, ov), err)) != 0)
		return rc < 0 ? rc : KN_OK;
	if (lt_stopping(w->lt))
		return KN_OK;
	kn_model_get_params(tr_trainer_model(tg->t), ov->sent);
	if ((ev = round_update(tg->t, tg->start, ov->sent,
	    kn_model_num_params(tr_trainer_model(tg->t)))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	ov->round = ev->round;
	ov->sent_step = ev->step;
	tr_trainer_set_round(tg->t, ev->round + 1);
	wk__post(w, ev);
	if (tr_trainer_steps(tg->t) < w->o.train.steps)
		return KN_OK;
	rc = overlap_apply(w, tg, await_round(w, ov), err);
	return rc < 0 ? rc : KN_OK;
}

/* A step trained while the answer for the round in flight has not come:
 * what overlapping gains, counted for the status. */
static void
count_overlapped(wk_worker *w, struct overlap *ov)
{
	lt_item *item;

	if (ov->held == NULL) {
		lt_wait(w->lt, 0, &item);
		take_commits(ov, item);
	}
	if (ov->held == NULL)
		ov->steps++;
}

/* The model, its first checkpoint, the held-out split (a warning only
 * when it is missing) and the round's starting weights.  -1 once the
 * error is posted. */
static int
training_open(wk_worker *w, struct training *tg)
{
	const wk_opts *o = &w->o;
	char err[KN_ERR_LEN], path[PR_PATH_LEN + 32];
	const char *removed;
	size_t n;

	tg->ov.round = -1;
	tg->set = (bt_eval_set){ o->eval_windows, BT_EVAL_STRATA };
	if (tr_trainer_open(&tg->t, &o->train, err) != 0)
		return wk__post_error(w, "cannot start training", err);
	if (tr_trainer_removed(tg->t, &removed) > 0)
		wk__post_message(w, WK_WARNING, "removed the leftovers of an "
		    "interrupted write", removed);
	if (tr_trainer_recovered(tg->t, &removed))
		wk__post_message(w, WK_WARNING, "unhealthy checkpoint refused",
		    removed);
	if (tr_trainer_steps(tg->t) == 0 && save_or_pause(w, tg, err) != 0)
		return wk__post_error(w, "cannot write the first checkpoint", err);
	if (post_checkpoint(w, WK_STARTED, tr_trainer_steps(tg->t),
	    tr_trainer_round(tg->t), err) != 0)
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
	if (o->replicas <= 1)
		return 0;
	n = kn_model_num_params(tr_trainer_model(tg->t));
	if ((tg->start = malloc(n * sizeof(float))) == NULL ||
	    (overlapping(o) && ((tg->ov.sent = malloc(n * sizeof(float))) ==
	    NULL || (tg->ov.local = malloc(n * sizeof(float))) == NULL)))
		return wk__post_error(w, "training", "out of memory");
	kn_model_get_params(tr_trainer_model(tg->t), tg->start);
	tg->start_step = tr_trainer_steps(tg->t);
	tg->start_round = tr_trainer_round(tg->t);
	/* the peers' updates and checkpoints are checked on the held-out
	 * split; without it, only combined robustly */
	tr_model_path(path, sizeof(path), o->train.dir, o->train.kind,
	    o->train.block, "ckpt");
	if (wk__check_open(w, tr_trainer_model(tg->t), tg->have_valid ?
	    &tg->valid : NULL, tg->lo, tg->hi, path, err) != 0)
		return wk__post_error(w, "training", err);
	return 0;
}

static void
training_close(struct training *tg)
{
	free(tg->start);
	free(tg->ov.sent);
	free(tg->ov.local);
	if (tg->ov.held != NULL)
		commit_free(tg->ov.held);
	corpus_close(&tg->valid);
	tr_trainer_close(tg->t);
}

static void
post_progress(wk_worker *w, struct training *tg)
{
	wk_event *ev = wk__event(WK_PROGRESS);

	ev->step = tr_trainer_steps(tg->t);
	ev->round = tr_trainer_round(tg->t);
	ev->loss = tg->loss;
	ev->positions_per_s = tr_trainer_positions_per_s(tg->t);
	ev->overlapped = tg->ov.steps;
	wk__post(w, ev);
	tg->last_progress = kn_now();
}

/* Progress at most every 0.2 s, and the held-out share when due. */
static int
training_report(wk_worker *w, struct training *tg, int64_t step, float loss)
{
	const wk_opts *o = &w->o;
	char err[KN_ERR_LEN];
	wk_event *ev;

	tg->loss = loss;
	/* and at each H steps, where a replica alone has no round to say
	 * when its "round" ended (node.c round_times) */
	if (kn_now() - tg->last_progress > 0.2 || step == o->train.steps ||
	    (o->replicas <= 1 && o->local_steps > 0 &&
	    step % o->local_steps == 0))
		post_progress(w, tg);
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

/* With overlapped rounds a checkpoint publishes the consensus, identical
 * on every replica, not the local weights: the model holds it, with its
 * step and round, while the file is written, then the local weights
 * again.  The optimizer state written beside it is the replica's own. */
static int
save_consensus(wk_worker *w, struct training *tg, char *err)
{
	kn_model *m = tr_trainer_model(tg->t);
	int64_t step = tr_trainer_steps(tg->t), round = tr_trainer_round(tg->t);
	char again[KN_ERR_LEN];
	int rc, back;

	kn_model_get_params(m, tg->ov.local);
	rc = kn_model_set_params(m, tg->start, err);
	tr_trainer_set_step(tg->t, tg->start_step);
	tr_trainer_set_round(tg->t, tg->start_round);
	if (rc == 0)
		rc = save_or_pause(w, tg, err);
	tr_trainer_set_step(tg->t, step);
	tr_trainer_set_round(tg->t, round);
	if ((back = kn_model_set_params(m, tg->ov.local, again)) != 0 &&
	    rc == 0) {
		memcpy(err, again, sizeof(again));
		rc = back;
	}
	if (rc == 0)
		rc = post_checkpoint(w, WK_CHECKPOINT, tg->start_step,
		    tg->start_round, err);
	return rc;
}

/* The last round whose outcome the weights hold: the round before the
 * trainer's (blocking) or the consensus's (overlapped); -1 alone. */
static int64_t
last_round(const wk_worker *w, const struct training *tg)
{
	if (w->o.replicas <= 1)
		return -1;
	return (overlapping(&w->o) ? tg->start_round :
	    tr_trainer_round(tg->t)) - 1;
}

/* Roll back (DESIGN section 5): a non-finite loss, or weights that failed
 * the health check of a checkpoint (why), and the weights and optimizer
 * state go back to the newest checkpoint on disk, or after a second
 * failure without a checkpoint written between, to the previous good
 * one; step and round go on.  With replicas the round's starting point
 * becomes those weights, so that the next update is measured from them,
 * and the loop learns which round's outcome was undone (WK_ROLLED_BACK).
 * 0 when rolled back, -1 once the error is posted (nothing good left). */
static int
roll_back(wk_worker *w, struct training *tg, const char *why)
{
	kn_model *m = tr_trainer_model(tg->t);
	char err[KN_ERR_LEN] = "the last and the previous good checkpoints "
	    "were both tried since the last one written";
	char msg[2 * KN_ERR_LEN + 64];
	int64_t step, round;
	wk_event *ev;
	int prev, rc = KN_EIO;

	for (prev = tg->rollbacks; prev < 2 && rc != 0; prev++)
		rc = tr_trainer_restore(tg->t, prev, &step, &round, err);
	if (rc != 0) {
		snprintf(msg, sizeof(msg), "%s; no good checkpoint left to roll "
		    "back to (%s)", why, err);
		return wk__post_error(w, "training", msg);
	}
	tg->rollbacks = prev;
	if (tg->start != NULL) {
		kn_model_get_params(m, tg->start);
		if (overlapping(&w->o) && tg->ov.round >= 0)
			memcpy(tg->ov.sent, tg->start,
			    kn_model_num_params(m) * sizeof(float));
	}
	ev = wk__event(WK_ROLLED_BACK);
	ev->step = tr_trainer_steps(tg->t);
	ev->round = last_round(w, tg);
	ev->ckpt_step = step;
	ev->ckpt_round = round;
	snprintf(ev->msg, sizeof(ev->msg), "%.200s; rolled back to the %s "
	    "checkpoint", why, prev > 1 ? "previous good" : "last");
	wk__post(w, ev);
	return 0;
}

/* Saves and publishes the checkpoint; weights that fail its health check
 * roll back instead, and the checkpoint is then the weights rolled back
 * to, with the step and round of now.  -1 once an error is posted. */
static int
training_checkpoint(wk_worker *w, struct training *tg)
{
	char err[KN_ERR_LEN];
	int rc, tries;

	for (tries = 0; tries < 3; tries++) {
		if (overlapping(&w->o))
			rc = save_consensus(w, tg, err);
		else if ((rc = save_or_pause(w, tg, err)) == 0)
			rc = post_checkpoint(w, WK_CHECKPOINT,
			    tr_trainer_steps(tg->t), tr_trainer_round(tg->t),
			    err);
		if (rc != KN_ENUM)
			break;
		if (roll_back(w, tg, err) != 0)
			return -1;
	}
	if (rc == 0)
		tg->rollbacks = 0;
	return rc != 0 ? wk__post_error(w, "checkpoint", err) : 0;
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
	int round_due, boundary, rc;

	/* a non-finite loss rolls back, and the same batch is tried again
	 * from the weights rolled back to */
	if ((rc = tr_trainer_step(tg->t, &loss, err)) == KN_ENUM)
		return roll_back(w, tg, err);
	if (rc != 0)
		return wk__post_error(w, "training step", err);
	step = tr_trainer_steps(tg->t);
	if (tg->ov.round >= 0)
		count_overlapped(w, &tg->ov);
	if (training_report(w, tg, step, loss) != 0)
		return -1;
	round_due = o->replicas > 1 && step % o->local_steps == 0;
	/* a replica alone ends its "rounds" too: the round is the same
	 * count of local_steps on every replica of a block, so that one
	 * that joins it later (roster.c) starts from the same round as the
	 * weights it joins with */
	if (o->replicas <= 1 && o->local_steps > 0 &&
	    step % o->local_steps == 0)
		tr_trainer_set_round(tg->t, tr_trainer_round(tg->t) + 1);
	if (round_due) {
		rc = overlapping(o) ? overlap_round(w, tg, err) :
		    run_round(w, tg->t, tg->start, err);
		/* an outcome that does not give finite weights: the round is
		 * over for the others, so ours goes on past it, from the last
		 * good checkpoint */
		if (rc == KN_ENUM && !overlapping(o))
			tr_trainer_set_round(tg->t, tr_trainer_round(tg->t) + 1);
		if (rc == KN_ENUM && roll_back(w, tg, err) != 0)
			return -1;
		if (rc != 0 && rc != KN_ENUM)
			return wk__post_error(w, "round", err);
		if (lt_stopping(w->lt))
			return 1;
	}
	boundary = o->local_steps > 0 && step % o->local_steps == 0 &&
	    atomic_load(&w->stop_at_round);
	if ((round_due || boundary ||
	    (o->replicas <= 1 && step % o->checkpoint_every == 0)) &&
	    training_checkpoint(w, tg) != 0)
		return -1;
	if (boundary) {
		lt_stop(w->lt);
		return 1;
	}
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
	char err[KN_ERR_LEN];
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
	/* a stop leaves no round in flight: its average goes in first */
	if (rc >= 0 && tg.ov.round >= 0 &&
	    overlap_apply(w, &tg, await_round(w, &tg.ov), err) < 0)
		rc = wk__post_error(w, "round", err);
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
	wk__check_close(w);
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
wk_stop_at_round(wk_worker *w)
{
	atomic_store(&w->stop_at_round, 1);
}

void
wk_commit_round(wk_worker *w, wk_outcome *o)
{
	struct commit *cm = calloc(1, sizeof(*cm));

	if (cm == NULL)
		abort();	/* a kilobyte: nothing to recover */
	cm->o = *o;
	if (cm->o.count < 0 || cm->o.count > WK_MAX_MEMBERS)
		cm->o.count = 0;
	if (cm->o.extras < 0 || cm->o.extras > WK_MAX_MEMBERS)
		cm->o.extras = 0;
	lt_submit(w->lt, &cm->link);
}

void
wk_commit_none(wk_worker *w, int64_t round)
{
	wk_outcome o = { 0 };

	o.round = round;
	wk_commit_round(w, &o);
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
	/* for a thread that waits for its round in flight after a stop */
	wk_commit_none(w, CLOSING_ROUND);
	lt_close(w->lt, on_closed, w);
}
