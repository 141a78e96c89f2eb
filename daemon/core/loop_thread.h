/* A thread of our own beside the libuv loop, with a queue each way: the
 * inbox (loop -> thread) and the outbox (thread -> loop, drained whole on
 * the loop through one uv_async_t).  The trainer thread (worker.c) and the
 * pipeline's compute thread (serve_compute.c) are built on it. */
#ifndef SM_LOOP_THREAD_H
#define SM_LOOP_THREAD_H

#include <stddef.h>
#include <uv.h>

/* The link an item carries in its own struct (intrusive: queueing never
 * allocates); LT_CONTAINER gets the struct back. */
typedef struct lt_item {
	struct lt_item *next;
} lt_item;

#define LT_CONTAINER(item, type, member) \
	((type *)(void *)((char *)(item) - offsetof(type, member)))

typedef struct lt_thread lt_thread;

typedef struct {
	const char *name;       /* "trainer": for messages */
	/* On the thread: all its work.  It returns once lt_wait or
	 * lt_stopping says a stop was asked (or when its work is done). */
	void (*run)(lt_thread *t, void *arg);
	/* On the loop: each item of the outbox, oldest first; takes it. */
	void (*deliver)(void *arg, lt_item *item);
	/* At close: each item still in the inbox, and in the outbox (never
	 * delivered). */
	void (*free_in)(lt_item *item);
	void (*free_out)(lt_item *item);
	void *arg;
} lt_opts;

/* Starts the thread with o->run(t, o->arg).  *out is set before the
 * thread starts, so run may read it where the caller keeps it.  err:
 * KN_ERR_LEN bytes. */
int lt_start(lt_thread **out, uv_loop_t *loop, const lt_opts *o, char *err);

/* Loop side ----------------------------------------------------------- */

/* Queues item for the thread and wakes it if it waits. */
void lt_submit(lt_thread *t, lt_item *item);
/* Queues the chain first (linked by next, NULL-ended) at once, so the
 * thread's next lt_wait takes all of it or none of it. */
void lt_submit_all(lt_thread *t, lt_item *first);
/* Asks the thread to stop and wakes it; it sees the request at its next
 * lt_wait or lt_stopping. */
void lt_stop(lt_thread *t);
/* Stops and joins the thread, then closes the async handle; once libuv has
 * closed it, the items left in the queues go to free_in and free_out, t is
 * freed and closed(arg) runs (closed may be NULL). */
void lt_close(lt_thread *t, void (*closed)(void *arg), void *arg);

/* Thread side --------------------------------------------------------- */

/* Queues item for the loop, where deliver will get it. */
void lt_post(lt_thread *t, lt_item *item);
/* Waits until the inbox holds an item, a stop is asked or timeout_s
 * seconds pass (< 0: no limit, 0: no wait), then takes the whole inbox,
 * oldest first, into *items (NULL when empty).  Returns 1 once a stop has
 * been asked, else 0; the items taken are the caller's either way. */
int lt_wait(lt_thread *t, double timeout_s, lt_item **items);
/* 1 once a stop has been asked. */
int lt_stopping(lt_thread *t);

#endif
