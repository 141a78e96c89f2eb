/* One thread beside the event loop and the two queues that join them.
 *
 * DESIGN
 * ------
 * Work that would stall the loop (a training step, a forward pass) runs on
 * a thread of its own, never on libuv's shared pool, which DNS and file
 * work need (as redis bio.c keeps its slow jobs off the main thread).  The
 * loop and the thread share nothing but this struct:
 *
 *   loop --lt_submit--> inbox  --lt_wait-->  thread
 *   loop <--deliver---- outbox <--lt_post--- thread
 *
 * Both queues are singly linked FIFOs of items that the callers embed in
 * their own structs (lt_item), so queueing never allocates and cannot
 * fail.  One mutex guards both queues and the stop flag; the thread sleeps
 * on one condition variable, signalled by lt_submit and lt_stop.  The loop
 * never waits on the thread except in lt_close, which joins it.
 *
 * The way back is a uv_async_t, as in libuv threadpool.c: lt_post queues
 * the item, then calls uv_async_send.  Sends coalesce (one callback may
 * stand for several sends, and a send that comes while the callback runs
 * may find its item already taken), so the callback takes the whole outbox
 * under the lock and delivers it after unlocking, oldest first; an empty
 * outbox is fine.  Delivering outside the lock lets deliver call
 * lt_submit.
 *
 * A stop is a flag, not an item: the thread polls it between steps
 * (lt_stopping) or is woken by it while it waits (lt_wait).  lt_close asks
 * for the stop, joins the thread, then closes the async handle; libuv
 * closes handles asynchronously, so the memory and the items left in
 * either queue are freed in the close callback, which then calls the
 * caller's closed callback. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/core/loop_thread.h"
#include "kernels/error.h"

struct lt_thread {
	lt_opts o;
	uv_async_t async;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;            /* the inbox or the stop flag moved */
	lt_item *in_head, *in_tail;     /* loop -> thread */
	lt_item *out_head, *out_tail;   /* thread -> loop */
	int stop;
	void (*closed)(void *);
	void *closed_arg;
};

/* Appends the chain first .. last (linked by next, last's next NULL) to
 * one of t's queues at once; wake: the inbox, whose thread may wait. */
static void
push(lt_thread *t, lt_item **head, lt_item **tail, lt_item *first,
    lt_item *last, int wake)
{
	pthread_mutex_lock(&t->lock);
	if (*tail != NULL)
		(*tail)->next = first;
	else
		*head = first;
	*tail = last;
	if (wake)
		pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
}

static void
free_items(lt_item *item, void (*free_item)(lt_item *))
{
	lt_item *next;

	for (; item != NULL; item = next) {
		next = item->next;
		free_item(item);
	}
}

static void *
thread_main(void *arg)
{
	lt_thread *t = arg;
	char name[16];

	/* named for top -H and /proc/PID/task/TID/comm, where an operator
	 * (and scripts/bench/plan) tells the trainer's CPU from the loop's;
	 * the kernel keeps 15 bytes */
	snprintf(name, sizeof(name), "bt-%s", t->o.name);
	(void)pthread_setname_np(pthread_self(), name);
	t->o.run(t, t->o.arg);
	return NULL;
}

static void
on_async(uv_async_t *h)
{
	lt_thread *t = h->data;
	lt_item *item, *next;

	pthread_mutex_lock(&t->lock);
	item = t->out_head;
	t->out_head = t->out_tail = NULL;
	pthread_mutex_unlock(&t->lock);
	for (; item != NULL; item = next) {
		next = item->next;
		item->next = NULL;
		t->o.deliver(t->o.arg, item);
	}
}

static void
free_thread(uv_handle_t *h)
{
	lt_thread *t = h->data;

	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->wake);
	free(t);
}

int
lt_start(lt_thread **out, uv_loop_t *loop, const lt_opts *o, char *err)
{
	lt_thread *t = calloc(1, sizeof(*t));
	pthread_condattr_t attr;
	int rc;

	*out = NULL;
	if (t == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	t->o = *o;
	/* timed waits on the monotonic clock: a clock step must not stretch
	 * or cut them */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->wake, &attr);
	pthread_condattr_destroy(&attr);
	if ((rc = uv_async_init(loop, &t->async, on_async)) != 0) {
		pthread_mutex_destroy(&t->lock);
		pthread_cond_destroy(&t->wake);
		free(t);
		return kn_error(err, KN_EIO, "uv_async_init: %s",
		    uv_strerror(rc));
	}
	t->async.data = t;
	*out = t;
	if ((rc = pthread_create(&t->thread, NULL, thread_main, t)) != 0) {
		*out = NULL;
		uv_close((uv_handle_t *)&t->async, free_thread);
		return kn_error(err, KN_EIO, "cannot start the %s thread",
		    o->name);
	}
	return KN_OK;
}

void
lt_submit(lt_thread *t, lt_item *item)
{
	item->next = NULL;
	push(t, &t->in_head, &t->in_tail, item, item, 1);
}

void
lt_submit_all(lt_thread *t, lt_item *first)
{
	lt_item *last = first;

	if (first == NULL)
		return;
	while (last->next != NULL)
		last = last->next;
	push(t, &t->in_head, &t->in_tail, first, last, 1);
}

void
lt_stop(lt_thread *t)
{
	pthread_mutex_lock(&t->lock);
	t->stop = 1;
	pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
}

static void
on_closed(uv_handle_t *h)
{
	lt_thread *t = h->data;
	void (*closed)(void *) = t->closed;
	void *arg = t->closed_arg;

	free_items(t->in_head, t->o.free_in);
	free_items(t->out_head, t->o.free_out);
	free_thread(h);
	if (closed != NULL)
		closed(arg);
}

void
lt_close(lt_thread *t, void (*closed)(void *arg), void *arg)
{
	lt_stop(t);
	pthread_join(t->thread, NULL);
	t->closed = closed;
	t->closed_arg = arg;
	uv_close((uv_handle_t *)&t->async, on_closed);
}

void
lt_post(lt_thread *t, lt_item *item)
{
	item->next = NULL;
	push(t, &t->out_head, &t->out_tail, item, item, 0);
	uv_async_send(&t->async);
}

int
lt_wait(lt_thread *t, double timeout_s, lt_item **items)
{
	struct timespec until;
	int stop;

	if (timeout_s > 0) {
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += (time_t)timeout_s;
		until.tv_nsec += (long)((timeout_s - (time_t)timeout_s) * 1e9);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&t->lock);
	while (!t->stop && t->in_head == NULL && timeout_s != 0) {
		if (timeout_s < 0)
			pthread_cond_wait(&t->wake, &t->lock);
		else if (pthread_cond_timedwait(&t->wake, &t->lock,
		    &until) != 0)
			break;  /* timed out */
	}
	*items = t->in_head;
	t->in_head = t->in_tail = NULL;
	stop = t->stop;
	pthread_mutex_unlock(&t->lock);
	return stop;
}

int
lt_stopping(lt_thread *t)
{
	int stop;

	pthread_mutex_lock(&t->lock);
	stop = t->stop;
	pthread_mutex_unlock(&t->lock);
	return stop;
}
