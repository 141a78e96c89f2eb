/* Tests of proto/intcheck.c: the checks every integer from outside goes
 * through, at the edges of int64 where the sums and conversions they
 * replace used to wrap. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/intcheck.h"
#include "tests/testutil.h"

START_TEST(test_sum_le)
{
	/* the window check of a completion: max_tokens + prompt <= window */
	ck_assert(pr_int_sum_le(10, 5, 15));
	ck_assert(!pr_int_sum_le(11, 5, 15));
	ck_assert(!pr_int_sum_le(INT64_MAX, 5, 256));
	ck_assert(!pr_int_sum_le(INT64_MAX, INT64_MAX, INT64_MAX));
	ck_assert(pr_int_sum_le(INT64_MAX, 0, INT64_MAX));
	ck_assert(!pr_int_sum_le(INT64_MAX, 1, INT64_MAX));
	ck_assert(pr_int_sum_le(INT64_MIN, -1 + 1, INT64_MIN));
	ck_assert(!pr_int_sum_le(INT64_MIN, 1, INT64_MIN));
	ck_assert(pr_int_sum_le(INT64_MIN, INT64_MIN, 0));
	ck_assert(pr_int_sum_le(INT64_MIN, -1, INT64_MIN));
	ck_assert(pr_int_sum_le(INT64_MAX, -1, INT64_MAX));
	ck_assert(pr_int_sum_le(INT64_MAX, INT64_MIN, -1));
	ck_assert(!pr_int_sum_le(INT64_MAX, INT64_MIN, -2));
	ck_assert(pr_int_sum_le(-5, -5, -10));
	ck_assert(!pr_int_sum_le(-5, -4, -10));
	ck_assert(!pr_int_sum_le(5, 0, INT64_MIN));
	ck_assert(pr_int_sum_le(5, INT64_MIN, INT64_MIN + 5));
	ck_assert(!pr_int_sum_le(6, INT64_MIN, INT64_MIN + 5));
}
END_TEST

START_TEST(test_product_le)
{
	ck_assert(pr_int_product_le(0, UINT64_MAX, 0));
	ck_assert(pr_int_product_le(UINT64_MAX, 1, UINT64_MAX));
	ck_assert(!pr_int_product_le(UINT64_MAX, 2, UINT64_MAX));
	ck_assert(!pr_int_product_le((uint64_t)1 << 32, (uint64_t)1 << 32,
	    UINT64_MAX));
	ck_assert(pr_int_product_le(4096, 4096, 16777216));
	ck_assert(!pr_int_product_le(4097, 4096, 16777216));
}
END_TEST

START_TEST(test_conversions)
{
	int v = 42;
	int64_t w = 42;

	ck_assert_int_eq(pr_int_to_int(INT64_MAX, 1, 256, &v), KN_EINVAL);
	ck_assert_int_eq(v, 42);
	ck_assert_int_eq(pr_int_to_int(-1, 1, 256, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_to_int(INT64_MIN, INT32_MIN, INT32_MAX, &v),
	    KN_EINVAL);
	/* 2^32 + 1 would be 1 as an int */
	ck_assert_int_eq(pr_int_to_int(((int64_t)1 << 32) + 1, 1, 256, &v),
	    KN_EINVAL);
	ck_assert_int_eq(pr_int_to_int(256, 1, 256, &v), 0);
	ck_assert_int_eq(v, 256);
	ck_assert_int_eq(pr_int_to_int(5, 6, 5, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_from_u64(UINT64_MAX, 0, INT64_MAX, &w),
	    KN_EINVAL);
	ck_assert_int_eq(w, 42);
	ck_assert_int_eq(pr_int_from_u64((uint64_t)INT64_MAX, 0, INT64_MAX,
	    &w), 0);
	ck_assert(w == INT64_MAX);
	ck_assert_int_eq(pr_int_from_u64(0, 1, 10, &w), KN_EINVAL);
	ck_assert_int_eq(pr_int_from_u64(3, -1, 10, &w), KN_EINVAL);
	ck_assert(pr_int_or(-1, 0, 100, 0) == 0);
	ck_assert(pr_int_or(INT64_MAX, 0, 100, 7) == 7);
	ck_assert(pr_int_or(100, 0, 100, 7) == 100);
}
END_TEST

START_TEST(test_parse)
{
	static const char *bad[] = { "", "-", "+5", " 5", "5 ", "0x10", "5a",
	    "1e3", "--1", "9223372036854775808", "99999999999999999999",
	    "18446744073709551617", "-9223372036854775809" };
	int64_t v = 7;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(pr_int_parse_str(bad[i], INT64_MIN, INT64_MAX,
		    &v) == KN_EINVAL, "'%s' was taken", bad[i]);
		ck_assert(v == 7);
	}
	ck_assert_int_eq(pr_int_parse_str("9223372036854775807", INT64_MIN,
	    INT64_MAX, &v), 0);
	ck_assert(v == INT64_MAX);
	ck_assert_int_eq(pr_int_parse_str("-9223372036854775808", INT64_MIN,
	    INT64_MAX, &v), 0);
	ck_assert(v == INT64_MIN);
	ck_assert_int_eq(pr_int_parse_str("-0", -5, 5, &v), 0);
	ck_assert(v == 0);
	/* bounds: a sign where none may be, values past either end */
	ck_assert_int_eq(pr_int_parse_str("-1", 0, 10, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str("11", 0, 10, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str("10", 0, 10, &v), 0);
	ck_assert(v == 10);
	ck_assert_int_eq(pr_int_parse_str("0", 1, 10, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str("0", -10, -1, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str("-11", -10, -1, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str("-1", -10, -2, &v), KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str("-10", -10, -1, &v), 0);
	ck_assert(v == -10);
	ck_assert_int_eq(pr_int_parse_str("0000000000000000010", 0, 10, &v),
	    0);
	ck_assert(v == 10);
	/* a URL query's value: only its n bytes count */
	ck_assert_int_eq(pr_int_parse("12&x=99", 2, 0, 100, &v), 0);
	ck_assert(v == 12);
	ck_assert_int_eq(pr_int_parse("12\0" "3", 4, 0, 10000, &v),
	    KN_EINVAL);
	ck_assert_int_eq(pr_int_parse_str(NULL, 0, 1, &v), KN_EINVAL);
}
END_TEST

/* Every value from -1000 to 1000 against every small range: the checks
 * agree with plain arithmetic where that cannot overflow. */
START_TEST(test_agrees_with_arithmetic)
{
	int64_t a, b, lim, v;
	char text[32];

	for (a = -40; a <= 40; a += 3)
		for (b = -40; b <= 40; b += 7)
			for (lim = -50; lim <= 50; lim += 5)
				ck_assert_int_eq(pr_int_sum_le(a, b, lim),
				    a + b <= lim);
	for (a = -1000; a <= 1000; a += 13) {
		snprintf(text, sizeof(text), "%lld", (long long)a);
		for (lim = -100; lim <= 100; lim += 50)
			ck_assert_int_eq(pr_int_parse_str(text, lim, lim + 500,
			    &v) == 0, a >= lim && a <= lim + 500);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("intcheck");
	TCase *tc = tcase_create("intcheck");

	tcase_add_test(tc, test_sum_le);
	tcase_add_test(tc, test_product_le);
	tcase_add_test(tc, test_conversions);
	tcase_add_test(tc, test_parse);
	tcase_add_test(tc, test_agrees_with_arithmetic);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
