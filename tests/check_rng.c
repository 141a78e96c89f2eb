/* Philox against the Random123 known-answer vectors, and the properties
 * the trainer relies on: draws keyed by (seed, stream, index) alone. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"
#include "tests/testutil.h"

START_TEST(test_philox_kat)
{
	static const uint32_t k0[2] = { 0, 0 }, c0[4] = { 0, 0, 0, 0 };
	static const uint32_t e0[4] = { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c,
	    0x9b00dbd8 };
	static const uint32_t k1[2] = { 0xffffffff, 0xffffffff };
	static const uint32_t c1[4] = { 0xffffffff, 0xffffffff, 0xffffffff,
	    0xffffffff };
	static const uint32_t e1[4] = { 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
	    0x6d5451fd };
	static const uint32_t k2[2] = { 0xa4093822, 0x299f31d0 };
	static const uint32_t c2[4] = { 0x243f6a88, 0x85a308d3, 0x13198a2e,
	    0x03707344 };
	static const uint32_t e2[4] = { 0xd16cfe09, 0x94fdcceb, 0x5001e420,
	    0x24126ea1 };
	uint32_t out[4];

	kn_philox4x32(k0, c0, out);
	ck_assert_mem_eq(out, e0, sizeof(out));
	kn_philox4x32(k1, c1, out);
	ck_assert_mem_eq(out, e1, sizeof(out));
	kn_philox4x32(k2, c2, out);
	ck_assert_mem_eq(out, e2, sizeof(out));
}
END_TEST

START_TEST(test_fill_is_keyed)
{
	float a[1001], b[1001], part[500];

	kn_rng_fill_normal(a, 1001, 0, 1, 9, 3);
	kn_rng_fill_normal(b, 1001, 0, 1, 9, 3);
	ck_assert_mem_eq(a, b, sizeof(a));
	/* a prefix is the same draws: element i depends on i only */
	kn_rng_fill_normal(part, 500, 0, 1, 9, 3);
	ck_assert_mem_eq(part, a, sizeof(part));
	kn_rng_fill_normal(b, 1001, 0, 1, 9, 4);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	kn_rng_fill_normal(b, 1001, 0, 1, 10, 3);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
}
END_TEST

/* A tensor filled a piece at a time gets the values of one fill. */
START_TEST(test_fill_in_pieces)
{
	float whole[1001], piece[1001];
	size_t first, len;

	kn_rng_fill_normal(whole, 1001, 0.5f, 2.0f, 9, 4);
	for (first = 0; first < 1001; first += len) {
		len = first % 2 ? 37 : 64;
		if (first + len > 1001)
			len = 1001 - first;
		kn_rng_fill_normal_from(piece + first, len, 0.5f, 2.0f, 9, 4,
		    first);
	}
	ck_assert_mem_eq(whole, piece, sizeof(whole));
}
END_TEST

START_TEST(test_moments)
{
	size_t n = 200000, i;
	float *x = malloc(n * sizeof(float));
	double s = 0, s2 = 0;
	kn_rng r;

	kn_rng_fill_normal(x, n, 1.0f, 2.0f, 1, 1);
	for (i = 0; i < n; i++) {
		s += x[i];
		s2 += (double)x[i] * x[i];
	}
	ck_assert_double_eq_tol(s / n, 1.0, 0.02);
	ck_assert_double_eq_tol(sqrt(s2 / n - (s / n) * (s / n)), 2.0, 0.02);
	kn_rng_fill_uniform(x, n, 1, 2);
	s = 0;
	for (i = 0; i < n; i++) {
		ck_assert(x[i] >= 0.0f && x[i] < 1.0f);
		s += x[i];
	}
	ck_assert_double_eq_tol(s / n, 0.5, 0.005);
	kn_rng_init(&r, 5, 6);
	for (i = 0; i < 10000; i++)
		ck_assert_uint_lt(kn_rng_below(&r, 7), 7);
	ck_assert(kn_rng_stream(1, 2, 3, 4) != kn_rng_stream(1, 2, 4, 3));
	free(x);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("rng");
	TCase *tc = tcase_create("philox");

	tcase_add_test(tc, test_philox_kat);
	tcase_add_test(tc, test_fill_is_keyed);
	tcase_add_test(tc, test_moments);
	tcase_add_test(tc, test_fill_in_pieces);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
