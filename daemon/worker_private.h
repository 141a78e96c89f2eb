/* Private to the trainer thread's files (worker.c, worker_soma.c): the
 * worker itself and the thread side's ways to post events to the loop. */
#ifndef SM_WORKER_PRIVATE_H
#define SM_WORKER_PRIVATE_H

#include <pthread.h>

#include "daemon/worker.h"

struct wk_worker {
	wk_opts o;
	lt_thread *lt;
	/* wk_hold's: asked, the trainer waits at a step boundary, its work
	 * has ended */
	pthread_mutex_t hold_lock;
	pthread_cond_t hold_moved;
	int hold, held, ended;
	wk_event_fn on_event;
	void *ctx;
	void (*closed)(void *);
	void *closed_arg;
};

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
/* The thread's work with o.soma (worker_soma.c). */
void wk__run_soma(lt_thread *lt, void *arg);

#endif
