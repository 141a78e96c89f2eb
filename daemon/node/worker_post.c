/* The trainer thread's way to the loop: its events, made and posted
 * (worker.c, worker_check.c and worker_soma.c all post through these and
 * call nothing else of each other's back), and their release. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "daemon/node/internal.h"
#include "daemon/node/worker.h"
#include "kernels/error.h"
#include "proto/checkpoint.h"

void
wk_event_free(wk_event *ev)
{
	if (ev == NULL)
		return;
	free(ev->buf);
	free(ev->delta);
	free(ev);
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
