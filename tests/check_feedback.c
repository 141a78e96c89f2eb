/* Error feedback (kernels/feedback) with the lossy encodings it is for:
 * the same small update, below one quantum of its encoding, sent for 100
 * rounds.  Without feedback every round drops it and the sum of what was
 * sent drifts away from the true sum; with feedback the two stay within
 * one quantum.  Also the int8 kernel's own edges (kernels/int8). */
#include "config.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/feedback.h"
#include "kernels/int8.h"
#include "tests/testutil.h"

#define N 256                   /* one int8 block */
#define ROUNDS 100

enum { ENC_INT8, ENC_BF16 };

/* decoded = decode(encode(sent)) in the encoding. */
static void
round_trip(int enc, const float *sent, float *decoded)
{
	int8_t q[N];
	uint16_t half[N];
	float scale;

	if (enc == ENC_INT8) {
		ck_assert_int_eq(kn_int8_quantize(q, &scale, sent, N, N), -1);
		kn_int8_dequantize(decoded, q, &scale, N, N);
	} else {
		kn_f32_to_bf16(half, sent, N);
		kn_bf16_to_f32(decoded, half, N);
	}
}

/* Sends delta for ROUNDS rounds; the largest distance between the true
 * running sum and the sum of the decoded updates, over every round and
 * value, in double. */
static double
drift(int enc, const float *delta, int feedback)
{
	float residual[N], sent[N], decoded[N];
	double truth[N], got[N], worst = 0;
	int r, i;

	memset(residual, 0, sizeof(residual));
	memset(truth, 0, sizeof(truth));
	memset(got, 0, sizeof(got));
	for (r = 0; r < ROUNDS; r++) {
		if (feedback)
			kn_feedback_add(sent, delta, residual, N);
		else
			memcpy(sent, delta, sizeof(sent));
		round_trip(enc, sent, decoded);
		if (feedback)
			kn_feedback_residual(residual, sent, decoded, N);
		for (i = 0; i < N; i++) {
			truth[i] += delta[i];
			got[i] += decoded[i];
			if (fabs(truth[i] - got[i]) > worst)
				worst = fabs(truth[i] - got[i]);
		}
	}
	return worst;
}

/* int8: one value of 1 sets the block's scale, 1/127, the quantum; the
 * others are 0.3 of it and round to 0 each on its own. */
START_TEST(test_int8_feedback)
{
	const double quantum = 1.0 / 127;
	float delta[N];
	double with, without;
	int i;

	for (i = 0; i < N; i++)
		delta[i] = (float)(0.3 * quantum);
	delta[0] = 1.0f;
	with = drift(ENC_INT8, delta, 1);
	without = drift(ENC_INT8, delta, 0);
	ck_assert_msg(with <= quantum, "with feedback: %g quanta",
	    with / quantum);
	/* 100 x 0.3 quanta lost, less the float error of the sums */
	ck_assert_msg(without >= 29 * quantum, "without: %g quanta",
	    without / quantum);
}
END_TEST

/* bf16: 1 + 2^-10 rounds to 1, a quantum (ulp) of 2^-7 at 1; and the
 * same values negated. */
START_TEST(test_bf16_feedback)
{
	const double quantum = 0x1p-7;
	float delta[N];
	double with, without;
	int i;

	for (i = 0; i < N; i++)
		delta[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + 0x1p-10f);
	with = drift(ENC_BF16, delta, 1);
	without = drift(ENC_BF16, delta, 0);
	ck_assert_msg(with <= quantum, "with feedback: %g quanta",
	    with / quantum);
	ck_assert_msg(without >= 0.99 * ROUNDS * 0x1p-10, "without: %g",
	    without);
	ck_assert(without >= 12 * quantum);
}
END_TEST

/* In place, as the daemon may call them. */
START_TEST(test_feedback_in_place)
{
	float a[3] = { 1, 2, 3 }, b[3] = { 0.5f, -1, 0.25f };

	kn_feedback_add(a, a, b, 3);
	ck_assert(a[0] == 1.5f && a[1] == 1 && a[2] == 3.25f);
	kn_feedback_residual(b, a, b, 3);
	ck_assert(b[0] == 1 && b[1] == 2 && b[2] == 3);
}
END_TEST

/* The kernel's edges: the overflow it reports, the scales a reader must
 * refuse, a block of zeros, and blocks over a whole buffer. */
START_TEST(test_int8_kernel_edges)
{
	float x[600], y[600], scales[3], bad[6] = { 1.0f, NAN, INFINITY,
	    -0.0f, -1e-30f, 1e37f };
	int8_t q[600];
	int i;

	for (i = 0; i < 600; i++)
		x[i] = (float)(i % 13) - 6.0f;
	x[300] = FLT_MAX;
	ck_assert_int_eq(kn_int8_quantize(q, scales, x, 600, 256), 300);
	x[300] = 1e38f;
	for (i = 0; i < 256; i++)
		x[i] = 0;
	ck_assert_int_eq(kn_int8_quantize(q, scales, x, 600, 256), -1);
	ck_assert(scales[0] == 0 && !signbit(scales[0]));
	kn_int8_dequantize(y, q, scales, 600, 256);
	for (i = 0; i < 600; i++) {
		ck_assert_int_ge(q[i], -127);
		ck_assert(fabs(y[i] - x[i]) <= scales[i / 256] * 0.5001);
	}
	ck_assert(y[300] == x[300] || fabs(y[300] - x[300]) <= 1e38 * 1e-6);
	ck_assert_int_eq(kn_int8_first_bad_scale(scales, 3), -1);
	ck_assert_int_eq(kn_int8_first_bad_scale(bad, 1), -1);
	for (i = 1; i < 6; i++) {
		float two[2] = { 0.5f, bad[i] };

		ck_assert_int_eq(kn_int8_first_bad_scale(two, 2), 1);
	}
	/* a scale a reader takes decodes +-127 to finite values; near
	 * FLT_MAX / 127 some are taken, twice that is not */
	for (i = -2, scales[1] = 0; i <= 2; i++) {
		float s = FLT_MAX / 127.0f;
		int k;

		for (k = 0; k < (i < 0 ? -i : i); k++)
			s = nextafterf(s, i < 0 ? 0.0f : INFINITY);
		if (kn_int8_first_bad_scale(&s, 1) >= 0)
			continue;
		q[0] = 127;
		q[1] = -127;
		kn_int8_dequantize(y, q, &s, 2, 256);
		ck_assert(isfinite(y[0]) && isfinite(y[1]));
		scales[1] = s;
	}
	ck_assert(scales[1] > 0);
	scales[0] = 2 * FLT_MAX / 127.0f;
	ck_assert_int_eq(kn_int8_first_bad_scale(scales, 1), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("feedback");
	TCase *tc = tcase_create("feedback");

	tcase_add_test(tc, test_int8_feedback);
	tcase_add_test(tc, test_bf16_feedback);
	tcase_add_test(tc, test_feedback_in_place);
	tcase_add_test(tc, test_int8_kernel_edges);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
