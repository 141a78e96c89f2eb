/* float32 <-> fp16 and bfloat16: every fp16 and bf16 pattern through a
 * round trip, f32 -> 16-bit rounding checked against a reference computed
 * in double with rint() (and against the compiler's _Float16 where it has
 * one), constructed ties, and the edges: subnormals, overflow, NaN. */
#include "config.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/convert.h"
#include "tests/testutil.h"

static uint32_t
bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float
from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t
to_f16(float f)
{
	uint16_t h;

	kn_f32_to_f16(&h, &f, 1);
	return h;
}

static float
from_f16(uint16_t h)
{
	float f;

	kn_f16_to_f32(&f, &h, 1);
	return f;
}

static uint16_t
to_bf16(float f)
{
	uint16_t h;

	kn_f32_to_bf16(&h, &f, 1);
	return h;
}

static float
from_bf16(uint16_t h)
{
	float f;

	kn_bf16_to_f32(&f, &h, 1);
	return f;
}

/* The value of a finite 16-bit pattern with mbits mantissa bits and the
 * given exponent bias, from its definition. */
static double
value_16(uint16_t h, int mbits, int bias)
{
	int e = (h & 0x7fff) >> mbits, m = h & ((1 << mbits) - 1);
	double v = e == 0 ? ldexp(m, 1 - bias - mbits) :
	    ldexp((1 << mbits) + m, e - bias - mbits);

	return h & 0x8000 ? -v : v;
}

/* Rounds finite or infinite x to the nearest 16-bit pattern, ties to
 * even, by scaling in double (exact) and rint() (round to nearest even
 * in the default mode): an implementation independent of ours.  emax is
 * the largest biased exponent of a finite value. */
static uint16_t
round_16(float x, int mbits, int bias, int emax)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	uint16_t inf = (uint16_t)(sign | (emax + 1) << mbits);
	double a = fabs((double)x), q;
	int e;

	if (isinf(x))
		return inf;
	frexp(a, &e);                   /* a in [2^(e-1), 2^e) */
	e -= 1;                         /* unbiased exponent of a */
	if (a == 0 || e < 1 - bias)     /* subnormal range: fixed units */
		e = 1 - bias;
	q = rint(ldexp(a, mbits - e)); /* in units of the result's ulp */
	if (q >= (double)(2 << mbits)) {        /* rounded up a binade */
		q /= 2;
		e++;
	}
	if (e + bias > emax)
		return inf;
	if (q < (double)(1 << mbits))   /* subnormal (or zero) */
		return (uint16_t)(sign | (uint16_t)q);
	return (uint16_t)(sign | (e + bias) << mbits |
	    ((uint32_t)q - (1u << mbits)));
}

static uint16_t
ref_f16(float x)
{
	return round_16(x, 10, 15, 30);
}

static uint16_t
ref_bf16(float x)
{
	return round_16(x, 7, 127, 254);
}

START_TEST(test_f16_every_pattern)
{
	uint32_t p;

	for (p = 0; p < 65536; p++) {
		uint16_t h = (uint16_t)p;
		float f = from_f16(h);
		int e = (h & 0x7fff) >> 10, m = h & 0x3ff;

		if (e == 31 && m != 0) {
			/* a NaN keeps its sign and payload, and is quiet */
			ck_assert(isnan(f));
			ck_assert_int_eq(!!signbit(f), h >> 15);
			ck_assert_uint_eq(bits(f) & 0x7fffff,
			    (uint32_t)m << 13);
			ck_assert_uint_eq(to_f16(f), h | 0x200);
			continue;
		}
		if (e == 31)
			ck_assert(isinf(f) && !!signbit(f) == h >> 15);
		else
			ck_assert(f == value_16(h, 10, 15) &&
			    !!signbit(f) == h >> 15);
		ck_assert_uint_eq(to_f16(f), h);
	}
}
END_TEST

START_TEST(test_bf16_every_pattern)
{
	uint32_t p;

	for (p = 0; p < 65536; p++) {
		uint16_t h = (uint16_t)p;
		float f = from_bf16(h);
		int e = (h & 0x7fff) >> 7, m = h & 0x7f;

		/* exact widening: the bits move up */
		ck_assert_uint_eq(bits(f), p << 16);
		if (e == 255 && m != 0) {
			ck_assert(isnan(f));
			ck_assert_uint_eq(to_bf16(f), h | 0x40);
			continue;
		}
		if (e != 255)
			ck_assert(f == value_16(h, 7, 127));
		ck_assert_uint_eq(to_bf16(f), h);
	}
}
END_TEST

/* Low halves that put an f32 on, next to and between the rounding
 * boundaries of both 16-bit formats, and a few arbitrary ones. */
static const uint32_t low_bits[] = {
	0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001,
	0x3000, 0x7fff, 0x8000, 0x8001, 0x9000, 0xefff, 0xf000, 0xffff,
	0x5a5a, 0x1234, 0xc3d1
};

/* Every f32 whose top 16 bits are anything and whose low 16 bits are in
 * low_bits: all signs, exponents and leading mantissa bits. */
START_TEST(test_f32_to_16_against_reference)
{
	uint32_t hi, k;

	for (hi = 0; hi < 65536; hi++)
		for (k = 0; k < sizeof(low_bits) / sizeof(low_bits[0]); k++) {
			uint32_t u = hi << 16 | low_bits[k];
			float x = from_bits(u);

			if (isnan(x)) {
				ck_assert_uint_eq(to_f16(x),
				    (u >> 16 & 0x8000) | 0x7e00 |
				    (u >> 13 & 0x3ff));
				ck_assert_uint_eq(to_bf16(x), u >> 16 | 0x40);
				continue;
			}
			if (to_f16(x) != ref_f16(x))
				ck_abort_msg("f16 of %a (0x%08x): 0x%04x, "
				    "expected 0x%04x", (double)x, u, to_f16(x),
				    ref_f16(x));
			if (to_bf16(x) != ref_bf16(x))
				ck_abort_msg("bf16 of %a (0x%08x): 0x%04x, "
				    "expected 0x%04x", (double)x, u,
				    to_bf16(x), ref_bf16(x));
		}
}
END_TEST

/* For every pair of neighbouring fp16 values: the midpoint goes to the
 * even one, and one f32 ulp either side goes to the nearer one. */
START_TEST(test_f16_ties_to_even)
{
	uint16_t h;

	for (h = 0; h < 0x7c00; h++) {
		double lo = value_16(h, 10, 15);
		double hi = h + 1 == 0x7c00 ? 65536.0 :
		    value_16((uint16_t)(h + 1), 10, 15);
		float mid = (float)((lo + hi) / 2);     /* exact */
		uint16_t even = h & 1 ? (uint16_t)(h + 1) : h;
		int s;

		ck_assert(mid == (lo + hi) / 2);
		for (s = 0; s < 2; s++) {
			float m = s ? -mid : mid;
			uint16_t sg = s ? 0x8000 : 0;

			ck_assert_uint_eq(to_f16(m), sg | even);
			ck_assert_uint_eq(to_f16(nextafterf(m, 0)), sg | h);
			ck_assert_uint_eq(to_f16(nextafterf(m, s ? -INFINITY :
			    INFINITY)), sg | (h + 1));
		}
	}
}
END_TEST

START_TEST(test_f16_edges)
{
	/* ties to even, by hand */
	ck_assert_uint_eq(to_f16(1.0f + 0x1p-11f), 0x3c00);
	ck_assert_uint_eq(to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
	ck_assert_uint_eq(to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
	ck_assert_uint_eq(to_f16(2049.0f), 0x6800);     /* 2048 */
	ck_assert_uint_eq(to_f16(2051.0f), 0x6802);     /* 2052 */
	/* overflow: 65504 is the largest finite, 65520 the tie to Inf */
	ck_assert_uint_eq(to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(to_f16(nextafterf(65520.0f, 0)), 0x7bff);
	ck_assert_uint_eq(to_f16(65520.0f), 0x7c00);
	ck_assert_uint_eq(to_f16(-65520.0f), 0xfc00);
	ck_assert_uint_eq(to_f16(1e10f), 0x7c00);
	ck_assert_uint_eq(to_f16(FLT_MAX), 0x7c00);
	ck_assert_uint_eq(to_f16(-FLT_MAX), 0xfc00);
	ck_assert_uint_eq(to_f16(INFINITY), 0x7c00);
	ck_assert_uint_eq(to_f16(-INFINITY), 0xfc00);
	/* subnormals: units of 2^-24 */
	ck_assert_uint_eq(to_f16(0x1p-24f), 0x0001);
	ck_assert_uint_eq(to_f16(0x1p-25f), 0x0000);    /* tie to 0 */
	ck_assert_uint_eq(to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
	ck_assert_uint_eq(to_f16(3 * 0x1p-25f), 0x0002);        /* tie up */
	ck_assert_uint_eq(to_f16(5 * 0x1p-25f), 0x0002);        /* tie down */
	ck_assert_uint_eq(to_f16(-0x1p-24f), 0x8001);
	ck_assert_uint_eq(to_f16(1023 * 0x1p-24f), 0x03ff);
	ck_assert_uint_eq(to_f16(1023.5f * 0x1p-24f), 0x0400); /* to normal */
	ck_assert_uint_eq(to_f16(0x1p-14f), 0x0400);
	ck_assert_uint_eq(to_f16(1e-30f), 0x0000);
	ck_assert_uint_eq(to_f16(-1e-30f), 0x8000);
	ck_assert_uint_eq(to_f16(0x1p-149f), 0x0000);   /* f32 subnormal */
	ck_assert_uint_eq(to_f16(-0x1p-149f), 0x8000);
	ck_assert_uint_eq(to_f16(0.0f), 0x0000);
	ck_assert_uint_eq(to_f16(-0.0f), 0x8000);
	ck_assert(from_f16(0x0001) == 0x1p-24f);
	ck_assert(from_f16(0x03ff) == 1023 * 0x1p-24f);
	ck_assert(from_f16(0x7bff) == 65504.0f);
	ck_assert(from_f16(0xc000) == -2.0f);
	/* NaN never turns into Inf, whatever its payload */
	ck_assert_uint_eq(to_f16(from_bits(0x7f800001)), 0x7e00);
	ck_assert_uint_eq(to_f16(from_bits(0xffc00000)), 0xfe00);
	ck_assert_uint_eq(to_f16(from_bits(0x7fa02000)), 0x7f01);
	ck_assert(isnan(from_f16(0x7c01)) && isnan(from_f16(0xfe00)));
}
END_TEST

START_TEST(test_bf16_edges)
{
	ck_assert_uint_eq(to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie down */
	ck_assert_uint_eq(to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie up */
	ck_assert_uint_eq(to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
	ck_assert_uint_eq(to_bf16(-1.0f - 0x1p-8f), 0xbf80);
	/* overflow: the largest bf16 is 0x1.fep127, the tie 0x1.ffp127 */
	ck_assert_uint_eq(to_bf16(from_bits(0x7f7f7fff)), 0x7f7f);
	ck_assert_uint_eq(to_bf16(from_bits(0x7f7f8000)), 0x7f80);
	ck_assert_uint_eq(to_bf16(FLT_MAX), 0x7f80);
	ck_assert_uint_eq(to_bf16(-FLT_MAX), 0xff80);
	ck_assert_uint_eq(to_bf16(INFINITY), 0x7f80);
	ck_assert_uint_eq(to_bf16(-INFINITY), 0xff80);
	/* subnormals round on the same grid */
	ck_assert_uint_eq(to_bf16(from_bits(0x00008000)), 0x0000);
	ck_assert_uint_eq(to_bf16(from_bits(0x00008001)), 0x0001);
	ck_assert_uint_eq(to_bf16(from_bits(0x00018000)), 0x0002);
	ck_assert_uint_eq(to_bf16(from_bits(0x007fffff)), 0x0080); /* normal */
	ck_assert_uint_eq(to_bf16(from_bits(0x80008000)), 0x8000);
	ck_assert_uint_eq(to_bf16(-0.0f), 0x8000);
	/* a NaN with payload only in the dropped bits stays a NaN */
	ck_assert_uint_eq(to_bf16(from_bits(0x7f800001)), 0x7fc0);
	ck_assert_uint_eq(to_bf16(from_bits(0xff80ffff)), 0xffc0);
	ck_assert_uint_eq(to_bf16(NAN) & 0x7fc0, 0x7fc0);
}
END_TEST

START_TEST(test_first_nonfinite)
{
	uint16_t h[40];

	memset(h, 0, sizeof(h));
	ck_assert_int_eq(kn_f16_first_nonfinite(h, 40), -1);
	ck_assert_int_eq(kn_bf16_first_nonfinite(h, 40), -1);
	h[33] = 0x7bff;                 /* largest finite f16 */
	h[34] = 0xfc00;                 /* f16 -Inf, a finite bf16 */
	h[35] = 0x7f80;                 /* bf16 Inf, an f16 NaN */
	ck_assert_int_eq(kn_f16_first_nonfinite(h, 40), 34);
	ck_assert_int_eq(kn_bf16_first_nonfinite(h, 40), 35);
	ck_assert_int_eq(kn_f16_first_nonfinite(h, 34), -1);
	ck_assert_int_eq(kn_bf16_first_nonfinite(h, 35), -1);
	h[35] = 0xffc1;
	ck_assert_int_eq(kn_bf16_first_nonfinite(h, 40), 35);
	ck_assert_int_eq(kn_f16_first_nonfinite(h, 0), -1);
}
END_TEST

/* The array functions match the one-element results at every length and
 * misalignment, so vector bodies and their remainders agree. */
START_TEST(test_lengths_and_offsets)
{
	enum { N = 131 };
	float src[N + 3], back[N + 3];
	uint16_t h[N + 3];
	size_t n, off, i;

	for (i = 0; i < N + 3; i++)
		src[i] = from_bits(0x9e3779b9u * (uint32_t)(i + 1)) *
		    (i % 3 ? 1.0f : 0x1p-100f);
	for (n = 0; n <= N; n++)
		for (off = 0; off < 3; off++) {
			const float *s = src + off;

			memset(h, 0xee, sizeof(h));
			kn_f32_to_f16(h + off, s, n);
			for (i = 0; i < n; i++)
				ck_assert_uint_eq(h[off + i], to_f16(s[i]));
			ck_assert_uint_eq(h[off + n], 0xeeee);
			kn_f16_to_f32(back + off, h + off, n);
			for (i = 0; i < n; i++)
				ck_assert_uint_eq(bits(back[off + i]),
				    bits(from_f16(h[off + i])));
			memset(h, 0xee, sizeof(h));
			kn_f32_to_bf16(h + off, s, n);
			for (i = 0; i < n; i++)
				ck_assert_uint_eq(h[off + i], to_bf16(s[i]));
			ck_assert_uint_eq(h[off + n], 0xeeee);
			kn_bf16_to_f32(back + off, h + off, n);
			for (i = 0; i < n; i++)
				ck_assert_uint_eq(bits(back[off + i]),
				    (uint32_t)h[off + i] << 16);
		}
}
END_TEST

#ifdef __FLT16_MAX__
/* The compiler's own conversion, where it has _Float16: a third opinion
 * on f32 -> f16 over a pseudo-random sample of all bit patterns. */
START_TEST(test_f16_against_compiler)
{
	uint32_t u = 12345, i;

	for (i = 0; i < 4000000; i++) {
		_Float16 c;
		float x;
		uint16_t want;

		u = u * 1664525u + 1013904223u;
		x = from_bits(u);
		if (isnan(x))
			continue;
		c = (_Float16)x;
		memcpy(&want, &c, sizeof(want));
		if (to_f16(x) != want)
			ck_abort_msg("f16 of %a: 0x%04x, the compiler says "
			    "0x%04x", (double)x, to_f16(x), want);
	}
}
END_TEST
#endif

int
main(void)
{
	Suite *s = suite_create("convert");
	TCase *tc = tcase_create("convert");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_f16_every_pattern);
	tcase_add_test(tc, test_bf16_every_pattern);
	tcase_add_test(tc, test_f32_to_16_against_reference);
	tcase_add_test(tc, test_f16_ties_to_even);
	tcase_add_test(tc, test_f16_edges);
	tcase_add_test(tc, test_bf16_edges);
	tcase_add_test(tc, test_first_nonfinite);
	tcase_add_test(tc, test_lengths_and_offsets);
#ifdef __FLT16_MAX__
	tcase_add_test(tc, test_f16_against_compiler);
#endif
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
