/* Block-scaled int8 quantization of updates (kernels/int8.h).  Plain
 * loops in IEEE single precision, with the rounding done by an exact
 * float trick rather than a libm call, so the inner loops vectorise and
 * every host computes the same q from the same x. */
#include "config.h"

#include <math.h>

#include "kernels/int8.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* 1.5 x 2^23: for |v| <= 2^22, (v + ROUND_MAGIC) - ROUND_MAGIC is v
 * rounded to the nearest integer, ties to even, exactly (the sum's ulp
 * is 1).  Needs round-to-nearest, which nothing of ours changes, and
 * float evaluation (FLT_EVAL_METHOD 0, as on x86-64 and aarch64). */
#define ROUND_MAGIC 12582912.0f

/* The scale of n values, and in *top the index of the largest |x|. */
static float
block_scale(const float *x, size_t n, size_t *top)
{
	float m = 0.0f, s;
	size_t i;

	*top = 0;
	for (i = 0; i < n; i++)
		m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
	while (*top < n && fabsf(x[*top]) != m)
		(*top)++;
	if (m == 0.0f)
		return 0.0f;
	s = m / 127.0f;
	/* at most two steps: the quotient is within half an ulp, and a
	 * subnormal s within 2^-150 */
	while (s == 0.0f || m / s > 127.0f)
		s = nextafterf(s, INFINITY);
	return s;
}

long
kn_int8_quantize(int8_t *q, float *scales, const float *x, size_t n,
    size_t block)
{
	size_t lo, i, b, top;

	for (lo = 0, b = 0; lo < n; lo += block, b++) {
		size_t m = n - lo < block ? n - lo : block;
		float s = block_scale(x + lo, m, &top);

		scales[b] = s;
		if (!isfinite(s * 127.0f))
			return (long)(lo + top);
		if (s == 0.0f) {
			for (i = 0; i < m; i++)
				q[lo + i] = 0;
			continue;
		}
		for (i = 0; i < m; i++) {
			float v = x[lo + i] / s;

			v = (v + ROUND_MAGIC) - ROUND_MAGIC;
			/* never taken after block_scale; kept so a change
			 * there cannot write -128 */
			v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
			q[lo + i] = (int8_t)v;
		}
	}
	return -1;
}

void
kn_int8_dequantize(float *x, const int8_t *q, const float *scales,
    size_t n, size_t block)
{
	size_t lo, i, b;

	for (lo = 0, b = 0; lo < n; lo += block, b++) {
		size_t m = n - lo < block ? n - lo : block;
		float s = scales[b];

		for (i = 0; i < m; i++)
			x[lo + i] = (float)q[lo + i] * s;
	}
}

long
kn_int8_first_bad_scale(const float *scales, size_t nblocks)
{
	size_t b;

	for (b = 0; b < nblocks; b++)
		if (!isfinite(scales[b] * 127.0f) || signbit(scales[b]))
			return (long)b;
	return -1;
}
