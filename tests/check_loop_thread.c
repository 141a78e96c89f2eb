/* The loop thread: items cross both ways in order, coalesced sends are all
 * drained, a stop wakes a waiting thread, close frees what is left in the
 * queues, and the thread bears its name.  Each test runs its own libuv
 * loop. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "daemon/core/loop_thread.h"
#include "kernels/error.h"

#define MANY 20000

struct msg {
	int seq;
	lt_item link;
};

/* What a test's thread and loop share; the thread's fields are atomic
 * because the loop reads them. */
struct bench {
	uv_loop_t loop;
	lt_thread *t;
	atomic_int allocated, freed;
	atomic_int received;            /* by the thread, in order */
	atomic_int out_of_order;
	atomic_int waiting;             /* the thread is about to wait */
	atomic_int saw_stop;
	atomic_int run_returned;
	int delivered;                  /* on the loop */
	int closed;
};

static struct bench b;

static void
setup(void)
{
	memset(&b, 0, sizeof(b));
	ck_assert_int_eq(uv_loop_init(&b.loop), 0);
}

static void
teardown(void)
{
	ck_assert_int_eq(uv_loop_close(&b.loop), 0);
	/* every item made was freed exactly once */
	ck_assert_int_eq(atomic_load(&b.allocated), atomic_load(&b.freed));
}

static struct msg *
msg_new(int seq)
{
	struct msg *m = calloc(1, sizeof(*m));

	ck_assert_ptr_nonnull(m);
	m->seq = seq;
	atomic_fetch_add(&b.allocated, 1);
	return m;
}

static void
msg_free(lt_item *item)
{
	free(LT_CONTAINER(item, struct msg, link));
	atomic_fetch_add(&b.freed, 1);
}

static void
on_closed(void *arg)
{
	ck_assert_ptr_eq(arg, &b);
	b.closed++;
}

static int
start(void (*run)(lt_thread *, void *),
    void (*deliver)(void *, lt_item *))
{
	lt_opts o = { "test", run, deliver, msg_free, msg_free, &b };
	char err[KN_ERR_LEN];

	return lt_start(&b.t, &b.loop, &o, err);
}

/* Both ways, in order ------------------------------------------------- */

/* Sends every item back, with its own numbers after each. */
static void
run_echo(lt_thread *t, void *arg)
{
	lt_item *items, *next;
	int expect = 0;

	(void)arg;
	while (!lt_wait(t, -1, &items))
		for (; items != NULL; items = next) {
			struct msg *m = LT_CONTAINER(items, struct msg, link);

			next = items->next;
			if (m->seq != expect++)
				atomic_fetch_add(&b.out_of_order, 1);
			atomic_fetch_add(&b.received, 1);
			lt_post(t, items);
		}
	/* the items taken with the stop are the thread's */
	for (; items != NULL; items = next) {
		next = items->next;
		msg_free(items);
	}
}

/* Every deliver: the items come in the order they were posted. */
static void
take_in_order(void *arg, lt_item *item)
{
	ck_assert_ptr_eq(arg, &b);
	ck_assert_int_eq(LT_CONTAINER(item, struct msg, link)->seq,
	    b.delivered);
	b.delivered++;
	msg_free(item);
}

static void
deliver_in_order(void *arg, lt_item *item)
{
	take_in_order(arg, item);
	/* closing from deliver, as the daemon does on an error */
	if (b.delivered == MANY)
		lt_close(b.t, on_closed, &b);
}

START_TEST(test_both_ways_in_order)
{
	int i;

	ck_assert_int_eq(start(run_echo, deliver_in_order), 0);
	for (i = 0; i < MANY; i++)
		lt_submit(b.t, &msg_new(i)->link);
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.delivered, MANY);
	ck_assert_int_eq(atomic_load(&b.received), MANY);
	ck_assert_int_eq(atomic_load(&b.out_of_order), 0);
	ck_assert_int_eq(b.closed, 1);
}
END_TEST

/* Submitting from deliver: a ping-pong of one item at a time. */
static void
deliver_ping(void *arg, lt_item *item)
{
	take_in_order(arg, item);
	if (b.delivered < 1000)
		lt_submit(b.t, &msg_new(b.delivered)->link);
	else
		lt_close(b.t, on_closed, &b);
}

START_TEST(test_submit_from_deliver)
{
	ck_assert_int_eq(start(run_echo, deliver_ping), 0);
	lt_submit(b.t, &msg_new(0)->link);
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.delivered, 1000);
	ck_assert_int_eq(atomic_load(&b.out_of_order), 0);
	ck_assert_int_eq(b.closed, 1);
}
END_TEST

/* Coalesced sends ----------------------------------------------------- */

/* Posts MANY items before the loop looks, then waits for the stop. */
static void
run_burst(lt_thread *t, void *arg)
{
	lt_item *items;
	int i;

	(void)arg;
	for (i = 0; i < MANY; i++)
		lt_post(t, &msg_new(i)->link);
	atomic_store(&b.waiting, 1);
	while (!lt_wait(t, -1, &items))
		;
	atomic_store(&b.run_returned, 1);
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

START_TEST(test_coalesced_sends_drained)
{
	ck_assert_int_eq(start(run_burst, take_in_order), 0);
	while (!atomic_load(&b.waiting))
		sleep_ms(1);
	/* MANY sends, and one turn of the loop takes them all */
	uv_run(&b.loop, UV_RUN_NOWAIT);
	ck_assert_int_eq(b.delivered, MANY);
	lt_close(b.t, on_closed, &b);
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.closed, 1);
	ck_assert_int_eq(atomic_load(&b.run_returned), 1);
}
END_TEST

/* Stop ---------------------------------------------------------------- */

static void
run_wait_for_stop(lt_thread *t, void *arg)
{
	lt_item *items;

	(void)arg;
	atomic_store(&b.waiting, 1);
	if (lt_wait(t, -1, &items) && items == NULL && lt_stopping(t))
		atomic_store(&b.saw_stop, 1);
	atomic_store(&b.run_returned, 1);
}

START_TEST(test_stop_wakes_waiting_thread)
{
	ck_assert_int_eq(start(run_wait_for_stop, take_in_order), 0);
	while (!atomic_load(&b.waiting))
		sleep_ms(1);
	sleep_ms(20);   /* well inside pthread_cond_wait by now */
	ck_assert_int_eq(atomic_load(&b.run_returned), 0);
	lt_stop(b.t);
	while (!atomic_load(&b.run_returned))
		sleep_ms(1);
	ck_assert_int_eq(atomic_load(&b.saw_stop), 1);
	lt_close(b.t, on_closed, &b);
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.closed, 1);
}
END_TEST

/* A timed wait returns empty at its time; one of 0 does not wait; and
 * the stop reaches a thread that polls. */
static void
run_timed(lt_thread *t, void *arg)
{
	lt_item *items = (lt_item *)&items;
	struct timespec t0, t1;
	double s;

	(void)arg;
	if (lt_wait(t, 0, &items) != 0 || items != NULL)
		atomic_fetch_add(&b.out_of_order, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (lt_wait(t, 0.05, &items) != 0 || items != NULL)
		atomic_fetch_add(&b.out_of_order, 1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (s < 0.045 || s > 5)
		atomic_fetch_add(&b.out_of_order, 1);
	atomic_store(&b.waiting, 1);
	while (!lt_stopping(t))
		sleep_ms(1);
	atomic_store(&b.saw_stop, 1);
}

START_TEST(test_timed_wait_and_poll)
{
	ck_assert_int_eq(start(run_timed, take_in_order), 0);
	while (!atomic_load(&b.waiting))
		sleep_ms(1);
	lt_close(b.t, on_closed, &b);
	ck_assert_int_eq(atomic_load(&b.saw_stop), 1);
	ck_assert_int_eq(atomic_load(&b.out_of_order), 0);
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.closed, 1);
}
END_TEST

/* The thread's name ---------------------------------------------------- */

static char thread_name[32];

static void
run_read_name(lt_thread *t, void *arg)
{
	(void)arg;
	if (pthread_getname_np(pthread_self(), thread_name,
	    sizeof(thread_name)) != 0)
		thread_name[0] = '\0';
	atomic_store(&b.waiting, 1);
	while (!lt_stopping(t))
		sleep_ms(1);
}

/* top -H and /proc show "bt-" and the name the options give */
START_TEST(test_thread_named)
{
	ck_assert_int_eq(start(run_read_name, take_in_order), 0);
	while (!atomic_load(&b.waiting))
		sleep_ms(1);
	ck_assert_str_eq(thread_name, "bt-test");
	lt_close(b.t, on_closed, &b);
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.closed, 1);
}
END_TEST

/* Close --------------------------------------------------------------- */

/* Posts a few items, never reads its inbox, returns at once on a stop. */
static void
run_ignore_inbox(lt_thread *t, void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < 100; i++)
		lt_post(t, &msg_new(i)->link);
	atomic_store(&b.waiting, 1);
	while (!lt_stopping(t))
		sleep_ms(1);
}

START_TEST(test_close_frees_queues)
{
	int i;

	ck_assert_int_eq(start(run_ignore_inbox, take_in_order), 0);
	for (i = 0; i < 100; i++)
		lt_submit(b.t, &msg_new(i)->link);
	while (!atomic_load(&b.waiting))
		sleep_ms(1);
	/* the loop never ran: 100 items in each queue */
	lt_close(b.t, on_closed, &b);
	ck_assert_int_eq(b.closed, 0);  /* libuv closes on the next turn */
	ck_assert_int_eq(uv_run(&b.loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(b.closed, 1);
	ck_assert_int_eq(b.delivered, 0);
	ck_assert_int_eq(atomic_load(&b.allocated), 200);
	ck_assert_int_eq(atomic_load(&b.freed), 200);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("loop_thread");
	TCase *tc = tcase_create("loop_thread");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_both_ways_in_order);
	tcase_add_test(tc, test_submit_from_deliver);
	tcase_add_test(tc, test_coalesced_sends_drained);
	tcase_add_test(tc, test_stop_wakes_waiting_thread);
	tcase_add_test(tc, test_timed_wait_and_poll);
	tcase_add_test(tc, test_close_frees_queues);
	tcase_add_test(tc, test_thread_named);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
