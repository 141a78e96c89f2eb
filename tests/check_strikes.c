/* Strikes (daemon/strikes.h): refusals counted per peer and kind, the
 * quarantine past the threshold, and the operator's clear. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "daemon/strikes.h"
#include "tests/testutil.h"

#define PEER_A "AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAAAAA-AAAA"
#define PEER_B "BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBBBBB-BBBB"

static const char *hooked;
static int hooks;

static void
on_quarantine(void *arg, const char *peer_id)
{
	(void)arg;
	hooked = peer_id;
	hooks++;
}

START_TEST(test_threshold)
{
	char err[KN_ERR_LEN];
	strikes *s;
	const strikes_peer *p;

	ck_assert_int_eq(strikes_new(&s, 3, err), 0);
	hooks = 0;
	strikes_on_quarantine(s, on_quarantine, NULL);
	ck_assert_int_eq(strikes_count(s), 0);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "share +2"),
	    0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_CHECKPOINT, "zero"),
	    0);
	ck_assert_int_eq(strikes_note(s, PEER_B, STRIKES_CLAIM, "step 1e6"), 0);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 0);
	ck_assert_int_eq(hooks, 0);
	/* the third refusal of A, whatever its kind, quarantines A only */
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "share +3"),
	    1);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 1);
	ck_assert_int_eq(strikes_quarantined(s, PEER_B), 0);
	ck_assert_int_eq(hooks, 1);
	ck_assert_str_eq(hooked, PEER_A);
	ck_assert_int_eq(strikes_quarantined_count(s), 1);
	/* more refusals of a quarantined peer count but hook no more */
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "again"), 1);
	ck_assert_int_eq(hooks, 1);
	ck_assert_int_eq(strikes_count(s), 2);
	p = strikes_find(s, PEER_A);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->total[STRIKES_UPDATE], 3);
	ck_assert_uint_eq(p->total[STRIKES_CHECKPOINT], 1);
	ck_assert_uint_eq(p->total[STRIKES_CLAIM], 0);
	ck_assert_uint_eq(p->current, 4);
	ck_assert_str_eq(p->why, "again");
	ck_assert_ptr_eq(strikes_at(s, 0), p);
	ck_assert_str_eq(strikes_at(s, 1)->id, PEER_B);
	ck_assert_ptr_null(strikes_at(s, 2));
	ck_assert_uint_eq(strikes_refused(s, PEER_A), 1);
	ck_assert_uint_eq(strikes_refused(s, PEER_A), 2);
	ck_assert_uint_eq(strikes_refused(s, PEER_B), 0);
	strikes_free(s);
}
END_TEST

START_TEST(test_clear)
{
	char err[KN_ERR_LEN];
	strikes *s;
	const strikes_peer *p;
	int i;

	ck_assert_int_eq(strikes_new(&s, 2, err), 0);
	strikes_note(s, PEER_A, STRIKES_UPDATE, "x");
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "y"), 1);
	strikes_clear(s);
	ck_assert_int_eq(strikes_quarantined(s, PEER_A), 0);
	ck_assert_uint_eq(strikes_clears(s), 1);
	p = strikes_find(s, PEER_A);
	/* the totals are counters and stay; the count starts again */
	ck_assert_uint_eq(p->total[STRIKES_UPDATE], 2);
	ck_assert_uint_eq(p->current, 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "z"), 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_UPDATE, "z"), 1);
	strikes_free(s);
	/* threshold 0: counted, never quarantined */
	ck_assert_int_eq(strikes_new(&s, 0, err), 0);
	for (i = 0; i < 100; i++)
		ck_assert_int_eq(strikes_note(s, PEER_B, STRIKES_CLAIM, "c"), 0);
	ck_assert_uint_eq(strikes_find(s, PEER_B)->total[STRIKES_CLAIM], 100);
	strikes_free(s);
}
END_TEST

START_TEST(test_bad_arguments)
{
	char err[KN_ERR_LEN];
	strikes *s;

	ck_assert_int_eq(strikes_new(&s, -1, err), KN_EINVAL);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(strstr(err, "strikes_quarantine"));
	ck_assert_int_eq(strikes_new(&s, STRIKES_MAX_THRESHOLD + 1, err),
	    KN_EINVAL);
	/* no table, no id: nothing counted, nothing quarantined */
	ck_assert_int_eq(strikes_note(NULL, PEER_A, STRIKES_UPDATE, "x"), 0);
	ck_assert_int_eq(strikes_quarantined(NULL, PEER_A), 0);
	ck_assert_int_eq(strikes_new(&s, 1, err), 0);
	ck_assert_int_eq(strikes_note(s, NULL, STRIKES_UPDATE, "x"), 0);
	ck_assert_int_eq(strikes_note(s, PEER_A, STRIKES_KINDS, NULL), 1);
	ck_assert_uint_eq(strikes_find(s, PEER_A)->total[STRIKES_CLAIM], 1);
	ck_assert_str_eq(strikes_kind_name(STRIKES_UPDATE), "update");
	ck_assert_str_eq(strikes_kind_name(STRIKES_CHECKPOINT), "checkpoint");
	ck_assert_str_eq(strikes_kind_name(STRIKES_CLAIM), "claim");
	strikes_clear(NULL);
	strikes_free(s);
	strikes_free(NULL);
}
END_TEST

int
main(void)
{
	Suite *su = suite_create("strikes");
	TCase *tc = tcase_create("strikes");

	tcase_add_test(tc, test_threshold);
	tcase_add_test(tc, test_clear);
	tcase_add_test(tc, test_bad_arguments);
	suite_add_tcase(su, tc);
	return tu_run_suite(su);
}
