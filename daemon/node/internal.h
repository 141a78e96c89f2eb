/* Private to the trainer thread's files (worker.c, worker_check.c,
 * worker_soma.c, worker_post.c): the worker itself and the thread side's
 * ways to post events to the loop.  The calls go one way: worker.c calls
 * worker_check.c and worker_soma.c, and all three post through
 * worker_post.c, which calls none of them. */
#ifndef SM_DAEMON_NODE_INTERNAL_H
#define SM_DAEMON_NODE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "daemon/blocktrain/verify.h"
#include "daemon/node/worker.h"

/* What the trainer holds to check a round's updates and a peer's
 * checkpoint (verify.h), and to judge the step and round a checkpoint
 * claims. */
struct wk_check {
	vf_scorer sc;           /* sc.valid NULL: no held-out split */
	float *keep;            /* the model's weights during a check */
	double round_began;     /* when this round's local steps began */
	double round_s;         /* the last round's local steps, seconds */
	double synced_at;       /* when our weights last ended a round */
	double started_at;      /* when our weights at start ended a round
				 * (the checkpoint's age before the start) */
	int rounds_since_start; /* rounds ended since */
};

struct wk_worker {
	wk_opts o;
	lt_thread *lt;
	/* wk_hold's: asked, the trainer waits at a step boundary, its work
	 * has ended */
	pthread_mutex_t hold_lock;
	pthread_cond_t hold_moved;
	int hold, held, ended;
	/* wk_stop_at_round's: stop at the next round boundary */
	atomic_int stop_at_round;
	wk_event_fn on_event;
	void *ctx;
	void (*closed)(void *);
	void *closed_arg;
	struct wk_check check;  /* the trainer thread's own */
};

/* worker_post.c: an event made, and posted to the loop. */
void wk__post(wk_worker *w, wk_event *ev);
wk_event *wk__event(wk_event_kind kind);
/* kind: WK_ERROR when the thread ends, WK_WARNING when it goes on. */
void wk__post_message(wk_worker *w, wk_event_kind kind, const char *what,
    const char *err);
/* The thread ends on it: -1, for the caller to return. */
int wk__post_error(wk_worker *w, const char *what, const char *err);
/* The checkpoint file at path, read back and posted as kind with its
 * step and round, for the loop to serve.  0 or KN_E*. */
int wk__post_file(wk_worker *w, wk_event_kind kind, const char *path,
    int64_t step, int64_t round, char *err);
/* worker_check.c: the scorer on the model and the held-out split
 * (valid NULL: none), and the time our weights last ended a round (the
 * checkpoint at ckpt_path was written then).  0 or KN_E*. */
int wk__check_open(wk_worker *w, kn_model *m, const corpus *valid,
    double lo, double hi, const char *ckpt_path, char *err);
void wk__check_close(wk_worker *w);
/* The round's local steps are done: their time is the round's. */
void wk__round_trained(wk_worker *w);
/* Our weights end a round now (an average of members' updates
 * applied, a checkpoint adopted: members 2, or more); the next round's
 * steps begin.  Only a round shared with another replica counts as
 * being in step with the others (claim_allowed's time out of step). */
void wk__round_synced(wk_worker *w, int members);
/* The members' updates of o checked and combined into avg (n floats)
 * from the round-start weights start; the model keeps its weights.
 * WK_REFUSED for each update left out, WK_CHECKED for the log.  0 or
 * KN_E*. */
int wk__check_round(wk_worker *w, kn_model *m, const float *start,
    const wk_outcome *o, float *avg, char *err);
/* The checkpoint of o adopted with its step and round: 0; refused
 * (WK_REFUSED posted, the model keeps its weights): 1; or KN_E*. */
int wk__adopt(wk_worker *w, tr_trainer *t, const wk_outcome *o, char *err);
/* The thread's work with o.soma (worker_soma.c). */
void wk__run_soma(lt_thread *lt, void *arg);

/* node.c, for roster.c: a new engine's parts, a stop as on SIGTERM,
 * and the end of the daemon on an error it cannot go on from. */
struct node;
int node__start_rounds(struct node *n, char *err);
int node__start_worker(struct node *n, char *err);
void node__stop(struct node *n);
void node__fail(struct node *n, const char *msg);

#endif
