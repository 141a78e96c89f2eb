/* The one error list of kernels/error.h: every code a distinct number, a
 * name and a text, the numbers they had before the list gave them, and
 * the HTTP status the tables it replaced gave each (the table of
 * http_response.c, rounds_serve.c's 409 and 413, probe.c's 409). */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/identity.h"
#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/net/tls.h"
#include "daemon/pipeline/pipeline_client.h"
#include "daemon/rounds/rounds_parts.h"
#include "kernels/error.h"
#include "tests/testutil.h"

static const struct {
	int code;
	const char *name;
} listed[] = {
#define XX(name, status, text) { name, #name },
	KN_ERRNO_MAP(XX)
#undef XX
};
#define NLISTED (sizeof(listed) / sizeof(listed[0]))

START_TEST(test_distinct)
{
	size_t i, j;

	ck_assert_uint_ge(NLISTED, 19);
	for (i = 0; i < NLISTED; i++) {
		ck_assert_int_lt(listed[i].code, 0);
		ck_assert_int_ge(listed[i].code, KN_ELAST);
		for (j = 0; j < i; j++)
			ck_assert_msg(listed[i].code != listed[j].code,
			    "%s and %s are both %d", listed[i].name,
			    listed[j].name, listed[i].code);
	}
}
END_TEST

START_TEST(test_names)
{
	size_t i, j;

	for (i = 0; i < NLISTED; i++) {
		const char *name = kn_err_name(listed[i].code);
		const char *text = kn_strerror(listed[i].code);

		ck_assert_ptr_nonnull(name);
		ck_assert_str_eq(name, listed[i].name);
		ck_assert_ptr_nonnull(text);
		ck_assert_uint_gt(strlen(text), 0);
		for (j = 0; j < i; j++)
			ck_assert_str_ne(name, kn_err_name(listed[j].code));
	}
	ck_assert_str_eq(kn_err_name(KN_OK), "KN_OK");
	ck_assert_ptr_nonnull(kn_strerror(KN_OK));
	/* numbers the list does not hold: a positive one, the room left
	 * for the core's next codes, one past the end */
	ck_assert_ptr_null(kn_err_name(1));
	ck_assert_ptr_null(kn_err_name(-7));
	ck_assert_ptr_null(kn_err_name(-15));
	ck_assert_ptr_null(kn_err_name(KN_ELAST - 1));
	ck_assert_ptr_null(kn_strerror(KN_ELAST - 1));
}
END_TEST

/* The numbers each code had when it was written by hand (KN_E_MODULE
 * was -16): nothing that kept one sees it move. */
START_TEST(test_numbers_kept)
{
	ck_assert_int_eq(KN_OK, 0);
	ck_assert_int_eq(KN_EINVAL, -1);
	ck_assert_int_eq(KN_ENOMEM, -2);
	ck_assert_int_eq(KN_ENODEV, -3);
	ck_assert_int_eq(KN_EIO, -4);
	ck_assert_int_eq(KN_ENUM, -5);
	ck_assert_int_eq(KN_ENOSPC, -6);
	ck_assert_int_eq(PC_ETIMEDOUT, -16);
	ck_assert_int_eq(ID_ENONE, -17);
	ck_assert_int_eq(ID_EEXIST, -18);
	ck_assert_int_eq(TLS_EHANDSHAKE, -19);
	ck_assert_int_eq(TLS_ECLOSED, -20);
	ck_assert_int_eq(RP_EHAVE, -21);
	ck_assert_int_eq(RP_ETOOLARGE, -22);
}
END_TEST

/* The modules' names are the list's entries. */
START_TEST(test_aliases)
{
	ck_assert_str_eq(kn_err_name(PC_ETIMEDOUT), "KN_E_PC_TIMEDOUT");
	ck_assert_str_eq(kn_err_name(ID_ENONE), "KN_E_ID_NONE");
	ck_assert_str_eq(kn_err_name(ID_EEXIST), "KN_E_ID_EXIST");
	ck_assert_str_eq(kn_err_name(TLS_EHANDSHAKE), "KN_E_TLS_HANDSHAKE");
	ck_assert_str_eq(kn_err_name(TLS_ECLOSED), "KN_E_TLS_CLOSED");
	ck_assert_str_eq(kn_err_name(RP_EHAVE), "KN_E_RP_HAVE");
	ck_assert_str_eq(kn_err_name(RP_ETOOLARGE), "KN_E_RP_TOOLARGE");
	ck_assert_str_eq(kn_err_name(HC_ECONNECT), "KN_E_HC_CONNECT");
	ck_assert_str_eq(kn_err_name(HC_ETIMEDOUT), "KN_E_HC_TIMEDOUT");
	ck_assert_str_eq(kn_err_name(HC_ETLS), "KN_E_HC_TLS");
	ck_assert_str_eq(kn_err_name(HC_ETOOLARGE), "KN_E_HC_TOOLARGE");
	ck_assert_str_eq(kn_err_name(HC_ECANCELLED), "KN_E_HC_CANCELLED");
}
END_TEST

/* What the tables before the list answered, kept: http_response.c's
 * table for the core's codes (500 for any other), rounds_serve.c's 409
 * for a part already held and 413 for a total too large, and probe.c's
 * 409 when training did not pause. */
START_TEST(test_status_as_before)
{
	static const struct {
		int code, status;
	} before[] = {
		{ KN_EINVAL, 400 }, { KN_ENUM, 400 }, { KN_ENOMEM, 503 },
		{ KN_ENODEV, 503 }, { KN_EIO, 500 }, { KN_ENOSPC, 507 },
		{ PC_ETIMEDOUT, 500 }, { ID_ENONE, 500 }, { ID_EEXIST, 500 },
		{ TLS_EHANDSHAKE, 500 }, { TLS_ECLOSED, 500 },
		{ RP_EHAVE, 409 }, { RP_ETOOLARGE, 413 },
		{ KN_E_PB_BUSY, 409 },
		/* outside the list, as before */
		{ KN_OK, 500 }, { -7, 500 }, { KN_ELAST - 1, 500 },
	};
	size_t i;

	for (i = 0; i < sizeof(before) / sizeof(before[0]); i++)
		ck_assert_msg(hs_status_of_error(before[i].code) ==
		    before[i].status, "%d (%s): %d, was %d", before[i].code,
		    kn_err_name(before[i].code) ? kn_err_name(before[i].code) :
		    "not listed", hs_status_of_error(before[i].code),
		    before[i].status);
	/* every listed code answers with an error status */
	for (i = 0; i < NLISTED; i++) {
		int st = hs_status_of_error(listed[i].code);

		ck_assert_msg(st >= 400 && st <= 599, "%s: %d",
		    listed[i].name, st);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("error");
	TCase *tc = tcase_create("error");

	tcase_add_test(tc, test_distinct);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_numbers_kept);
	tcase_add_test(tc, test_aliases);
	tcase_add_test(tc, test_status_as_before);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
