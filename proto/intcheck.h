/* Integers from outside (JSON bodies, URL queries, header values, msgpack
 * fields) are checked here before any arithmetic touches them: range
 * checks, decimal text to a bounded int64, and comparisons of sums and
 * products that cannot overflow.  Every layer may include it; nothing
 * here allocates, prints or reads a float. */
#ifndef PR_INTCHECK_H
#define PR_INTCHECK_H

#include <stddef.h>
#include <stdint.h>

/* 1 when lo <= v <= hi. */
int pr_int_in(int64_t v, int64_t lo, int64_t hi);

/* v when lo <= v <= hi, else dflt: for a value that only informs (a
 * peer's count in a report), where a bad one is ignored, not refused. */
int64_t pr_int_or(int64_t v, int64_t lo, int64_t hi, int64_t dflt);

/* 1 when a + b <= limit, computed exactly for every int64 a, b, limit
 * (no sum is ever formed that could wrap). */
int pr_int_sum_le(int64_t a, int64_t b, int64_t limit);

/* 1 when a * b <= limit, exactly, for unsigned a, b and limit. */
int pr_int_product_le(uint64_t a, uint64_t b, uint64_t limit);

/* v (an int64 such as jansson's json_int_t) into an int in [lo, hi]:
 * 0 and *out set, or KN_EINVAL and *out untouched. */
int pr_int_to_int(int64_t v, int lo, int hi, int *out);

/* An unsigned value (a msgpack positive integer, a Content-Length) into
 * [lo, hi] with lo >= 0: 0, or KN_EINVAL with *out untouched. */
int pr_int_from_u64(uint64_t u, int64_t lo, int64_t hi, int64_t *out);

/* The n bytes at s (no NUL needed) as a decimal integer in [lo, hi]: an
 * optional '-' when lo < 0, then 1 to 19 digits, nothing else (no
 * spaces, '+', hex or trailing bytes, unlike strtol).  0 and *out set, or
 * KN_EINVAL with *out untouched, also on any value out of range however
 * many digits it has. */
int pr_int_parse(const char *s, size_t n, int64_t lo, int64_t hi,
    int64_t *out);

/* The same for a NUL-terminated string (NULL is not a number). */
int pr_int_parse_str(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
