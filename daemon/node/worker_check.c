/* The trainer thread's checks of what its peers send (DESIGN section 5):
 * a round's updates checked on the block's held-out cases and combined
 * robustly (verify.h), and a peer's checkpoint adopted only when the
 * step and round it claims are ones the rounds so far allow and its
 * share is not worse than ours.  Every refusal goes to the loop as
 * WK_REFUSED, naming the peer.  worker.c calls these at the end of each
 * round. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <math.h>

#include "daemon/node/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/checkpoint.h"

/* A checkpoint may be at most this many rounds ahead of ours when we
 * have been taking part in the rounds all along: a replica left out of
 * one round finds the coordinator one round on.  Beyond it, only as far
 * as peers ADOPT_SPEEDUP times our speed could have gone while we were
 * not in step (a restart from an older checkpoint, a slow round). */
#define ADOPT_SLACK 1
#define ADOPT_SPEEDUP 2.0
#define ADOPT_RESTART_ROUNDS 8

static void
post_refused(wk_worker *w, int64_t round, int peer, wk_refusal kind,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void
post_refused(wk_worker *w, int64_t round, int peer, wk_refusal kind,
    const char *fmt, ...)
{
	wk_event *ev = wk__event(WK_REFUSED);
	va_list ap;

	ev->round = round;
	ev->peer = peer;
	ev->refusal = kind;
	va_start(ap, fmt);
	if (vsnprintf(ev->msg, sizeof(ev->msg), fmt, ap) < 0)
		ev->msg[0] = '\0';
	va_end(ap);
	wk__post(w, ev);
}

int
wk__check_open(wk_worker *w, kn_model *m, const corpus *valid, double lo,
    double hi, const char *ckpt_path, char *err)
{
	struct wk_check *c = &w->check;
	const wk_opts *o = &w->o;
	struct stat st;
	struct timespec now;
	double age = 0;

	c->sc.m = m;
	c->sc.spec = o->train.spec;
	c->sc.valid = valid;
	c->sc.lo = lo;
	c->sc.hi = hi;
	c->sc.run_id = o->train.run_id;
	c->sc.block = o->train.block;
	c->sc.windows = vf_windows_for(o->local_steps, o->train.spec->batch,
	    o->replicas);
	c->round_began = kn_now();
	/* our weights ended a round when the checkpoint was written */
	if (stat(ckpt_path, &st) == 0 && clock_gettime(CLOCK_REALTIME, &now) == 0)
		age = (double)(now.tv_sec - st.st_mtim.tv_sec) +
		    (double)(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
	if (!(age > 0))
		age = 0;
	c->synced_at = c->started_at = c->round_began - age;
	c->rounds_since_start = 0;
	if ((c->keep = malloc(kn_model_num_params(m) * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return KN_OK;
}

void
wk__check_close(wk_worker *w)
{
	free(w->check.keep);
	w->check.keep = NULL;
}

void
wk__round_trained(wk_worker *w)
{
	w->check.round_s = kn_now() - w->check.round_began;
}

void
wk__round_synced(wk_worker *w, int members)
{
	w->check.round_began = kn_now();
	w->check.rounds_since_start++;
	/* a round of our own update alone (the others late, or gone) is
	 * no sign that we are in step with them: a replica just restarted
	 * from an older checkpoint averages its first round alone, and must
	 * still be allowed to catch up with the peers that went on */
	if (members >= 2 || w->o.replicas <= 1)
		w->check.synced_at = w->check.round_began;
}

int
wk__check_round(wk_worker *w, kn_model *m, const float *start,
    const wk_outcome *o, float *avg, char *err)
{
	char again[KN_ERR_LEN], left[128] = "";
	vf_verdict v;
	wk_event *ev;
	size_t at = 0;
	int i, rc, back;

	kn_model_get_params(m, w->check.keep);
	rc = vf_round(&w->check.sc, o->round, start,
	    (const float *const *)o->update, o->count, o->outer_lr, avg, &v,
	    err);
	/* the check scored its candidates with the model: ours again */
	if ((back = kn_model_set_params(m, w->check.keep, again)) != 0 &&
	    rc == 0) {
		memcpy(err, again, sizeof(again));
		rc = back;
	}
	if (rc != 0)
		return rc;
	for (i = 0; i < o->count; i++) {
		if (!(v.left_out & (1ULL << i)))
			continue;
		if (v.of[i].outlier > 0)
			post_refused(w, o->round, o->peer[i], WK_REFUSED_UPDATE,
			    "round %" PRId64 ": the update of replica %d is %.3g "
			    "times the norm of the round's lower median: left out",
			    o->round, o->replica[i], v.of[i].outlier);
		else
			post_refused(w, o->round, o->peer[i], WK_REFUSED_UPDATE,
			    "round %" PRId64 ": the update of replica %d raised "
			    "the block's share on the round's held-out cases by "
			    "%.4g nats/byte (%.4g to %.4g, standard error %.3g): "
			    "left out", o->round, o->replica[i], v.of[i].rise,
			    v.of[i].without, v.of[i].with, v.of[i].se);
		if (at < sizeof(left) - 8)
			at += (size_t)snprintf(left + at, sizeof(left) - at, "%s%d",
			    at ? "," : "", o->replica[i]);
	}
	for (i = 0; i < o->extras; i++) {
		double ratio = vf_norm_ratio((const float *const *)o->update,
		    o->count, o->extra[i], kn_model_num_params(m));

		if (ratio > VF_OUTLIER || !isfinite(ratio))
			post_refused(w, o->round, o->extra_peer[i],
			    WK_REFUSED_UPDATE, "round %" PRId64 ": the update of "
			    "replica %d, not a member, is %.3g times the norm of "
			    "the members': refused", o->round,
			    o->extra_replica[i], ratio);
	}
	ev = wk__event(WK_CHECKED);
	ev->round = o->round;
	ev->count = (size_t)o->count;
	snprintf(ev->msg, sizeof(ev->msg), "round %" PRId64 ": averaged %d of %d "
	    "updates%s%s (%s; %d clipped; check %.3f s, the round's steps "
	    "%.3f s)", o->round, o->count - __builtin_popcountll(v.left_out),
	    o->count, at ? ", left out replica " : "", left,
	    v.checked ? "checked" : w->check.sc.valid == NULL ?
	    "no held-out split, unchecked" : "one update, unchecked",
	    v.robust.clipped, v.seconds, w->check.round_s);
	wk__post(w, ev);
	return KN_OK;
}

/* Whether the step and round a checkpoint claims are ones the rounds so
 * far allow: within the run; its round not before the round before
 * ours, and not further ahead of ours than the time we were out of step
 * allows; its step no further ahead of ours than as many rounds again
 * of H steps.  A replica's step can run ahead of its rounds' H each (one
 * that refused a checkpoint trains on alone), so the step is held to
 * ours, not to its own round.  1: allowed; 0: refused, the reason in
 * why; -1: too far ahead for the one round we may be behind, but no
 * round of ours has been timed yet (just started, from an older
 * checkpoint), so the time we were out of step cannot be judged: not
 * taken, and no strike, until our first round is timed. */
static int
claim_allowed(const wk_worker *w, int64_t ours, int64_t our_step,
    const pr_ckpt_meta *got, char *why, size_t len)
{
	const struct wk_check *c = &w->check;
	int64_t H = w->o.local_steps, last = w->o.train.steps / H;
	/* Just restarted, our first rounds may pair with updates the others
	 * sent long ago (held as early, or behind): the time since the start's
	 * checkpoint still counts for ADOPT_RESTART_ROUNDS rounds, so that a
	 * replica back from an older checkpoint can catch up. */
	double since = c->rounds_since_start < ADOPT_RESTART_ROUNDS &&
	    c->started_at < c->synced_at ? c->started_at : c->synced_at;
	double gap = kn_now() - since - c->round_s, ahead = ADOPT_SLACK;

	if (gap > 0 && c->round_s > 0)
		ahead += ADOPT_SPEEDUP * gap / c->round_s;
	if (got->step < 0 || got->round < 0 || got->step > w->o.train.steps ||
	    got->round > last)
		snprintf(why, len, "step %" PRId64 " round %" PRId64 " is not in "
		    "the run (%d steps, %" PRId64 " rounds)", got->step,
		    got->round, w->o.train.steps, last);
	else if (got->round < ours - 1)
		snprintf(why, len, "round %" PRId64 " is behind ours (%" PRId64
		    ")", got->round, ours);
	else if ((double)(got->round - ours) > ahead && !(c->round_s > 0))
		goto not_yet;
	else if ((double)(got->round - ours) > ahead)
		snprintf(why, len, "round %" PRId64 " is %" PRId64 " rounds ahead "
		    "of ours (%" PRId64 "); the rounds since we were last in "
		    "step allow %.0f", got->round, got->round - ours, ours,
		    ahead);
	else if ((double)(got->step - our_step) > (ahead + 1) * (double)H &&
	    !(c->round_s > 0))
		goto not_yet;
	else if ((double)(got->step - our_step) > (ahead + 1) * (double)H)
		snprintf(why, len, "step %" PRId64 " is %" PRId64 " steps ahead "
		    "of ours (%" PRId64 "); the rounds since we were last in "
		    "step allow %.0f", got->step, got->step - our_step, our_step,
		    (ahead + 1) * (double)H);
	else
		return 1;
	return 0;
not_yet:
	snprintf(why, len, "step %" PRId64 " round %" PRId64 " is ahead of "
	    "ours (step %" PRId64 ", round %" PRId64 ") by more than a round, "
	    "and no round of ours is timed yet to judge how far peers may "
	    "have gone", got->step, got->round, our_step, ours);
	return -1;
}

int
wk__adopt(wk_worker *w, tr_trainer *t, const wk_outcome *o, char *err)
{
	kn_model *m = tr_trainer_model(t);
	size_t n = kn_model_num_params(m);
	float *params = malloc(n * sizeof(float));
	pr_ckpt_meta expect = { 0 }, got;
	const kn_tensor *tab;
	char why[KN_ERR_LEN + 64];
	vf_score s;
	int count, rc;

	if (params == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", w->o.train.run_id);
	expect.block = w->o.train.block;
	snprintf(expect.kind, sizeof(expect.kind), "block");
	tab = kn_model_tensors(m, &count);
	/* a peer's checkpoint that cannot be read is refused, not the end
	 * of training */
	if (pr_ckpt_decode(o->ckpt, o->len, &expect, tab, count, params, &got,
	    why) != 0) {
		post_refused(w, o->round, o->ckpt_peer, WK_REFUSED_CHECKPOINT,
		    "round %" PRId64 ": the checkpoint of replica %d is refused: "
		    "%s", o->round, o->ckpt_replica, why);
		free(params);
		return 1;
	}
	rc = claim_allowed(w, tr_trainer_round(t), tr_trainer_steps(t), &got,
	    why, sizeof(why));
	if (rc < 0) {
		char what[64];

		snprintf(what, sizeof(what), "round %" PRId64 ": the checkpoint "
		    "of replica %d is not taken yet", o->round, o->ckpt_replica);
		wk__post_message(w, WK_WARNING, what, why);
		free(params);
		return 1;
	}
	if (rc == 0) {
		post_refused(w, o->round, o->ckpt_peer, WK_REFUSED_CLAIM,
		    "round %" PRId64 ": the checkpoint of replica %d is refused: "
		    "%s", o->round, o->ckpt_replica, why);
		free(params);
		return 1;
	}
	kn_model_get_params(m, w->check.keep);
	rc = vf_checkpoint(&w->check.sc, got.round, w->check.keep, params, &s,
	    err);
	if (rc == 0 && s.refused) {
		post_refused(w, o->round, o->ckpt_peer, WK_REFUSED_CHECKPOINT,
		    "round %" PRId64 ": the checkpoint of replica %d (step %"
		    PRId64 ", round %" PRId64 ") scores %.4g nats/byte on the "
		    "held-out cases against our %.4g (standard error %.3g): "
		    "refused", o->round, o->ckpt_replica, got.step, got.round,
		    s.with, s.without, s.se);
		rc = kn_model_set_params(m, w->check.keep, err);
		free(params);
		return rc != 0 ? rc : 1;
	}
	if (rc == 0)
		rc = kn_model_set_params(m, params, err);
	else
		kn_model_set_params(m, w->check.keep, why);
	if (rc == 0) {
		tr_trainer_set_step(t, got.step);
		tr_trainer_set_round(t, got.round);
		/* a peer's checkpoint: in step with it */
		wk__round_synced(w, 2);
	}
	free(params);
	return rc;
}
