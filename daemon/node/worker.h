/* The daemon's trainer thread: training steps leave the event loop and run
 * here (never on libuv's shared pool, which DNS and file work need), and
 * what they produce comes back to the loop as events, in order, through a
 * loop thread (loop_thread.h).  The daemon calls it; events carry kinds,
 * and their text is for the log. */
#ifndef SM_WORKER_H
#define SM_WORKER_H

#include <stdint.h>
#include <uv.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/core/loop_thread.h"
#include "daemon/blocktrain/train.h"

typedef enum {
	WK_STARTED,             /* model ready: step, round; checkpoint bytes */
	WK_PROGRESS,            /* step, loss, positions_per_s,
	                         * overlapped */
	WK_SHARE,               /* step, share (held-out, nats per byte) */
	WK_CHECKPOINT,          /* step, round, buf/len/etag: the file */
	WK_ROUND_READY,         /* round, delta (count floats): our update */
	WK_DONE,                /* all steps trained */
	WK_STOPPED,             /* stopped on request, checkpoint written */
	WK_WARNING,             /* msg, for the log; the thread goes on */
	WK_PAUSED,              /* step: the disk is full, training waits;
	                         * the last checkpoint stays (a WK_WARNING
	                         * says why) */
	WK_RESUMED,             /* step, msg: the checkpoint was written */
	WK_ERROR,               /* msg; the thread has ended */
	WK_HELDOUT,             /* SOMA: step, buf/len: the held-out
	                         * message (proto/heldout.h) */
	WK_ROLLED_BACK,         /* a non-finite loss, or weights that failed
	                         * the health check of a checkpoint: the
	                         * weights went back to the last good
	                         * checkpoint and training goes on.  step:
	                         * where; round: the last round whose outcome
	                         * (an average, an adopted checkpoint) the
	                         * weights held, -1 with one replica;
	                         * ckpt_step, ckpt_round: the checkpoint
	                         * taken; msg: why */
	WK_CHECKED,             /* round, count, msg: what the check of a
	                         * round's updates found, for the log */
	WK_REFUSED              /* round, peer, refusal, msg: the check of
	                         * a round left out a peer's update, or a
	                         * peer's checkpoint was refused */
} wk_event_kind;

/* What WK_REFUSED refused, in the order of the strikes' kinds
 * (daemon/core/strikes.h) and of rounds_ops.refused. */
typedef enum {
	WK_REFUSED_UPDATE,      /* its update made the share worse */
	WK_REFUSED_CHECKPOINT,  /* its checkpoint was worse than ours */
	WK_REFUSED_CLAIM        /* its checkpoint's step or round is not
	                         * one the rounds so far allow */
} wk_refusal;

#define WK_MAX_MEMBERS 64

typedef struct wk_event {
	wk_event_kind kind;
	int64_t step, round;
	float loss;
	double positions_per_s, share;
	double val, lr, eps;    /* SOMA progress: NAN val before one */
	int64_t val_step;
	uint64_t positions;
	int64_t overlapped;     /* steps trained with a round in flight */
	int64_t ckpt_step, ckpt_round;  /* WK_ROLLED_BACK: the one taken */
	char *buf;              /* owned by the event */
	size_t len;
	char etag[65];
	float *delta;           /* owned by the event */
	size_t count;
	char msg[256];
	int peer;               /* WK_REFUSED: the peer's line in the list */
	wk_refusal refusal;
	lt_item link;           /* in the queue to the loop */
} wk_event;

/* A round's outcome for the trainer: the members' updates, to check
 * (daemon/blocktrain/verify.h), combine robustly and apply with outer_lr; or ckpt,
 * a checkpoint published by a peer, to check and adopt; or neither,
 * keep the local weights. */
typedef struct wk_outcome {
	int64_t round;
	int count;                              /* members' updates */
	float *update[WK_MAX_MEMBERS];          /* owned; replica order */
	int replica[WK_MAX_MEMBERS];
	int peer[WK_MAX_MEMBERS];               /* lines in the peer list */
	float outer_lr;
	char *ckpt;                             /* owned */
	size_t len;
	int ckpt_replica, ckpt_peer;            /* who served it */
	int extras;                             /* rounds_outcome's */
	float *extra[WK_MAX_MEMBERS];           /* owned */
	int extra_replica[WK_MAX_MEMBERS];
	int extra_peer[WK_MAX_MEMBERS];
} wk_outcome;

typedef struct {
	tr_opts train;    /* spec, run id, dir, block, replica, steps */
	const char *valid_path; /* held-out split ("" to skip the shares) */
	const char *valid_sha256;
	int eval_every, eval_windows;
	int checkpoint_every;   /* with one replica */
	int replicas;           /* > 1: stop every local_steps for a round */
	int local_steps;
	/* with replicas: train on while a round is in flight and apply its
	 * average at the end of the next round (streaming DiLoCo) */
	int overlap;
	int threads;
	/* method = soma: train expert `expert` from seed_path with
	 * sa_train (worker_soma.c); train.spec, run_id, dir, be and
	 * steps, valid_path and valid_sha256 (the held-out windows) are
	 * used, the rest not */
	int soma, expert;
	const char *seed_path;
	int soma_valid_windows;         /* own-cluster validation */
} wk_opts;

typedef struct wk_worker wk_worker;

/* on_event runs on the loop thread and takes ownership of ev (free it with
 * wk_event_free). */
typedef void (*wk_event_fn)(void *ctx, wk_event *ev);

int wk_start(wk_worker **out, uv_loop_t *loop, const wk_opts *o,
    wk_event_fn on_event, void *ctx, char *err);
/* Asks the thread to stop at the next step boundary; it writes the
 * checkpoint and sends WK_STOPPED. */
void wk_stop(wk_worker *w);
/* Asks the thread to stop at the next round boundary instead (every
 * local_steps steps), once that round's outcome is in the weights: the
 * checkpoint it writes is the start of the next round on every replica,
 * so a new engine (a changed roster) can go on from it.  WK_STOPPED
 * follows as after wk_stop. */
void wk_stop_at_round(wk_worker *w);
/* After WK_ROUND_READY: the round's outcome (o is copied, its buffers
 * taken over by the thread).  The members' updates are checked on the
 * block's held-out cases and those kept combined robustly, applied as
 * theta = theta_start - outer_lr * combination; a checkpoint (for a
 * replica left out of the round or behind) is adopted with its step
 * and round only if they are ones the rounds so far allow and its share
 * is not worse than ours.  Each refusal comes back as WK_REFUSED. */
void wk_commit_round(wk_worker *w, wk_outcome *o);
/* The same with neither updates nor checkpoint: keep the local
 * weights. */
void wk_commit_none(wk_worker *w, int64_t round);
/* A compute probe (probe.h) measures the device alone, so training
 * waits meanwhile.  On the probe's thread, never the loop's: wk_hold asks
 * the trainer to wait at its next step boundary, wk_wait_held blocks
 * until it waits there or its work has ended (0), or timeout_s passes
 * (-1), and wk_release, which must follow every wk_hold, lets it go on.
 * A stop waits for the release too. */
void wk_hold(wk_worker *w);
int wk_wait_held(wk_worker *w, double timeout_s);
void wk_release(wk_worker *w);
/* Joins the thread and closes the async handle; done runs when the handle
 * is closed and w is freed.  A thread that waits for a round in flight
 * after a stop gives up at once. */
void wk_close(wk_worker *w, void (*done)(void *arg), void *arg);
void wk_event_free(wk_event *ev);

#endif
