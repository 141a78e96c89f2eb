/* Checked integers from outside (proto/intcheck.h): every comparison is
 * arranged so that no intermediate value can overflow, and text is read
 * digit by digit against the bound instead of through strtol, whose
 * leading spaces, signs and silent clamping have let bad values in. */
#include "config.h"

#include <limits.h>

#include "kernels/error.h"
#include "proto/intcheck.h"

int
pr_int_in(int64_t v, int64_t lo, int64_t hi)
{
	return v >= lo && v <= hi;
}

int64_t
pr_int_or(int64_t v, int64_t lo, int64_t hi, int64_t dflt)
{
	return pr_int_in(v, lo, hi) ? v : dflt;
}

int
pr_int_sum_le(int64_t a, int64_t b, int64_t limit)
{
	/* a + b <= limit  <=>  a <= limit - b, and limit - b is formed only
	 * where it cannot wrap */
	if (b >= 0)
		return limit >= INT64_MIN + b && a <= limit - b;
	/* b < 0: limit - b may pass INT64_MAX, in which case every a fits */
	if (limit > INT64_MAX + b)
		return 1;
	return a <= limit - b;
}

int
pr_int_product_le(uint64_t a, uint64_t b, uint64_t limit)
{
	if (a == 0 || b == 0)
		return 1;
	return a <= limit / b;
}

int
pr_int_to_int(int64_t v, int lo, int hi, int *out)
{
	if (lo > hi || !pr_int_in(v, lo, hi))
		return KN_EINVAL;
	*out = (int)v;
	return KN_OK;
}

int
pr_int_from_u64(uint64_t u, int64_t lo, int64_t hi, int64_t *out)
{
	if (lo < 0 || lo > hi || u < (uint64_t)lo || u > (uint64_t)hi)
		return KN_EINVAL;
	*out = (int64_t)u;
	return KN_OK;
}

int
pr_int_parse(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *out)
{
	size_t i = 0;
	int neg = 0;
	/* the magnitude, kept within what the bound allows */
	uint64_t mag = 0, cap;

	if (s == NULL || lo > hi || n == 0)
		return KN_EINVAL;
	if (s[0] == '-') {
		if (lo >= 0)
			return KN_EINVAL;
		neg = 1;
		i = 1;
	}
	if (i == n || n - i > 19 || (!neg && hi < 0))
		return KN_EINVAL;
	/* the largest magnitude the sign allows within [lo, hi] */
	cap = neg ? (uint64_t)(-(lo + 1)) + 1 : hi < 0 ? 0 : (uint64_t)hi;
	for (; i < n; i++) {
		unsigned d = (unsigned char)s[i] - (unsigned)'0';

		if (d > 9)
			return KN_EINVAL;
		if (d > cap || mag > (cap - d) / 10)
			return KN_EINVAL;
		mag = mag * 10 + d;
	}
	if (neg) {
		/* mag <= -lo: -(mag) is representable */
		int64_t v = mag == 0 ? 0 : -(int64_t)(mag - 1) - 1;

		if (v > hi)
			return KN_EINVAL;
		*out = v;
		return KN_OK;
	}
	if ((int64_t)mag < lo)
		return KN_EINVAL;
	*out = (int64_t)mag;
	return KN_OK;
}

int
pr_int_parse_str(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	size_t n = 0;

	if (s == NULL)
		return KN_EINVAL;
	while (s[n] != '\0' && n < 32)
		n++;
	if (s[n] != '\0')
		return KN_EINVAL;
	return pr_int_parse(s, n, lo, hi, out);
}
