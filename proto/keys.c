/* The machinery of the key tables (proto/keys.h): lookup, typed setters
 * whose messages name the key and its range, range checks, defaults and
 * printing.  The tables themselves live with their structs. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/intcheck.h"
#include "proto/keys.h"

#define MIB_SHIFT 20
#define GIB_SHIFT 30
/* the longest value a row prints: a path, or the 63 cuts of a spec */
#define VALUE_LEN 2048

static void *
field(const pr_key *k, void *obj)
{
	return (char *)obj + k->offset;
}

static const void *
cfield(const pr_key *k, const void *obj)
{
	return (const char *)obj + k->offset;
}

const pr_key *
pr_key_find(const pr_key *t, size_t n, const char *section, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(t[i].section, section) == 0 &&
		    strcmp(t[i].name, name) == 0)
			return &t[i];
	return NULL;
}

int
pr_key_section_known(const pr_key *t, size_t n, const char *section)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(t[i].section, section) == 0)
			return 1;
	return 0;
}

void
pr_key_label(const pr_key *k, char *buf, size_t len)
{
	if (k->section[0] != '\0')
		snprintf(buf, len, "[%s] %s", k->section, k->name);
	else
		snprintf(buf, len, "%s", k->name);
}

void
pr_key_real(double x, char *buf, size_t len)
{
	int prec;

	/* whole numbers in full: 20000, never 2e+04 */
	if (x == floor(x) && fabs(x) < 1e15) {
		snprintf(buf, len, "%.0f", x);
		return;
	}
	for (prec = 1; prec < 17; prec++) {
		snprintf(buf, len, "%.*g", prec, x);
		if (strtod(buf, NULL) == x)
			return;
	}
	snprintf(buf, len, "%.17g", x);
}

static int bad(const pr_key *k, char *msg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "label: reason", the form every message about one key takes */
static int
bad(const pr_key *k, char *msg, const char *fmt, ...)
{
	char label[96], reason[KN_ERR_LEN];
	va_list ap;

	pr_key_label(k, label, sizeof(label));
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	return kn_error(msg, KN_EINVAL, "%s: %.200s", label, reason);
}

/* The values a numeric key takes, as "1 <= block <= 64" or "lr > 0". */
static void
range_text(const pr_key *k, char *buf, size_t len)
{
	char lo[32], hi[32];
	const char *lo_op = k->flags & PR_KEY_MIN_OPEN ? "<" : "<=";
	const char *hi_op = k->flags & PR_KEY_MAX_OPEN ? "<" : "<=";

	pr_key_real(k->min, lo, sizeof(lo));
	if (isinf(k->max)) {
		snprintf(buf, len, "%s %s %s", k->name,
		    k->flags & PR_KEY_MIN_OPEN ? ">" : ">=", lo);
		return;
	}
	pr_key_real(k->max, hi, sizeof(hi));
	snprintf(buf, len, "%s %s %s %s %s", lo, lo_op, k->name, hi_op, hi);
}

/* NaN is in no range */
static int
in_range(const pr_key *k, double x)
{
	if (k->flags & PR_KEY_MIN_OPEN ? !(x > k->min) : !(x >= k->min))
		return 0;
	return k->flags & PR_KEY_MAX_OPEN ? x < k->max : x <= k->max;
}

static int
out_of_range(const pr_key *k, double x, char *msg)
{
	char need[96], value[32];

	range_text(k, need, sizeof(need));
	pr_key_real(x, value, sizeof(value));
	return bad(k, msg, "%s is out of range (need %s)", value, need);
}

static int
is_choice(const pr_key *k, const char *v)
{
	size_t i;

	for (i = 0; k->choices[i] != NULL; i++)
		if (strcmp(k->choices[i], v) == 0)
			return 1;
	return 0;
}

/* "'tpu' is not auto, cpu or cuda" */
static int
not_a_choice(const pr_key *k, const char *v, char *msg)
{
	char list[128] = "";
	size_t i, used = 0;

	for (i = 0; k->choices[i] != NULL && used < sizeof(list); i++)
		used += (size_t)snprintf(list + used, sizeof(list) - used,
		    "%s%s", i == 0 ? "" : k->choices[i + 1] != NULL ? ", " :
		    " or ", k->choices[i]);
	return bad(k, msg, "'%.64s' is not %s", v, list);
}

static int
set_int(const pr_key *k, void *obj, const char *v, char *msg)
{
	char need[96];
	int64_t n;

	range_text(k, need, sizeof(need));
	if (pr_int_parse_str(v, -INT_MAX, INT_MAX, &n) != 0)
		return bad(k, msg, "'%.64s' is not an integer (need %s)", v,
		    need);
	if (!in_range(k, (double)n))
		return out_of_range(k, (double)n, msg);
	if (k->type == PR_KEY_MIB && (n < 0 || !pr_int_product_le(
	    (uint64_t)n, (uint64_t)1 << MIB_SHIFT, SIZE_MAX)))
		return out_of_range(k, (double)n, msg);
	if (k->type == PR_KEY_MIB)
		*(size_t *)field(k, obj) = (size_t)n << MIB_SHIFT;
	else
		*(int *)field(k, obj) = (int)n;
	return KN_OK;
}

static int
set_u64(const pr_key *k, void *obj, const char *v, char *msg)
{
	unsigned long long n;
	char *end;

	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' ||
	    !isdigit((unsigned char)v[0]))
		return bad(k, msg, "'%.64s' is not a non-negative integer", v);
	*(uint64_t *)field(k, obj) = n;
	return KN_OK;
}

static int
set_real(const pr_key *k, void *obj, const char *v, char *msg)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0' || !isfinite(x))
		return bad(k, msg, "'%.64s' is not a finite number", v);
	if (!in_range(k, x))
		return out_of_range(k, x, msg);
	*(double *)field(k, obj) = x;
	return KN_OK;
}

static int
set_sha256(const pr_key *k, void *obj, const char *v, char *msg)
{
	char *out = field(k, obj);
	size_t i;

	if (strlen(v) != 64)
		return bad(k, msg, "a sha256 is 64 hex digits");
	for (i = 0; i < 64; i++) {
		char ch = v[i];

		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
		    (ch >= 'A' && ch <= 'F')))
			return bad(k, msg, "'%c' is not a hex digit", ch);
	}
	for (i = 0; i < 64; i++)
		out[i] = (char)(v[i] >= 'A' && v[i] <= 'F' ? v[i] + 32 : v[i]);
	out[64] = '\0';
	return KN_OK;
}

/* bytes, or MiB or GiB with a suffix M or G */
static int
set_size(const pr_key *k, void *obj, const char *v, char *msg)
{
	size_t digits = strspn(v, "0123456789");
	const char *end = v + digits;
	int shift = *end == 'M' ? MIB_SHIFT : *end == 'G' ? GIB_SHIFT : 0;
	int64_t n;

	if (pr_int_parse(v, digits, 0, INT64_MAX, &n) != 0 ||
	    (*end && strcmp(end, "M") && strcmp(end, "G")))
		return bad(k, msg, "'%.64s' is not a size (bytes, or with M or "
		    "G)", v);
	/* the shift checked before it is made: 2^60 G once wrapped */
	if (!pr_int_product_le((uint64_t)n, (uint64_t)1 << shift, SIZE_MAX))
		return bad(k, msg, "'%.64s' is larger than this host can hold",
		    v);
	*(size_t *)field(k, obj) = (size_t)n << shift;
	return KN_OK;
}

static int
has_inline_comment(const char *v)
{
	for (; *v != '\0'; v++)
		if (isspace((unsigned char)v[0]) && v[1] == ';')
			return 1;
	return 0;
}

int
pr_key_set(const pr_key *k, void *obj, void *ctx, const char *v, char *msg)
{
	/* inih keeps a ';' right after '=', but printed after "= " it starts
	 * a comment and the value would read back empty */
	if (v[0] == ';')
		return bad(k, msg, "a value may not start with ';'");
	/* nor hold a blank and then ';': printed, that starts an inline
	 * comment (a value inih took whole from a line cut at its length
	 * limit can hold one) */
	if (has_inline_comment(v))
		return bad(k, msg, "a value may not hold a blank followed by ';'");
	switch (k->type) {
	case PR_KEY_INT:
	case PR_KEY_MIB:
		return set_int(k, obj, v, msg);
	case PR_KEY_U64:
		return set_u64(k, obj, v, msg);
	case PR_KEY_REAL:
		return set_real(k, obj, v, msg);
	case PR_KEY_CHOICE:
		if (!is_choice(k, v))
			return not_a_choice(k, v, msg);
		/* FALLTHROUGH */
	case PR_KEY_STR:
		if (strlen(v) >= k->size)
			return bad(k, msg, "value too long (at most %zu bytes)",
			    k->size - 1);
		memcpy(field(k, obj), v, strlen(v) + 1);
		return KN_OK;
	case PR_KEY_SHA256:
		return set_sha256(k, obj, v, msg);
	case PR_KEY_SIZE:
		return set_size(k, obj, v, msg);
	case PR_KEY_CUSTOM:
		return k->ops->set(k, obj, ctx, v, msg);
	}
	return kn_error(msg, KN_EINVAL, "%s: no such key type", k->name);
}

int
pr_key_check(const pr_key *k, const void *obj, char *msg)
{
	double x;

	switch (k->type) {
	case PR_KEY_INT:
		x = *(const int *)cfield(k, obj);
		break;
	case PR_KEY_MIB:
		x = (double)*(const size_t *)cfield(k, obj) / (1 << MIB_SHIFT);
		break;
	case PR_KEY_REAL:
		x = *(const double *)cfield(k, obj);
		break;
	case PR_KEY_CHOICE:
		if (!is_choice(k, cfield(k, obj)))
			return not_a_choice(k, cfield(k, obj), msg);
		return KN_OK;
	default:
		return KN_OK;
	}
	return in_range(k, x) ? KN_OK : out_of_range(k, x, msg);
}

int
pr_key_check_all(const pr_key *t, size_t n, const void *obj, char *msg)
{
	size_t i;
	int rc;

	for (i = 0; i < n; i++)
		if ((rc = pr_key_check(&t[i], obj, msg)) != 0)
			return rc;
	return KN_OK;
}

void
pr_key_defaults(const pr_key *t, size_t n, void *obj)
{
	char msg[KN_ERR_LEN];
	size_t i;

	for (i = 0; i < n; i++) {
		const pr_key *k = &t[i];

		switch (k->type) {
		case PR_KEY_INT:
			*(int *)field(k, obj) = (int)k->def;
			break;
		case PR_KEY_U64:
			*(uint64_t *)field(k, obj) = (uint64_t)k->def;
			break;
		case PR_KEY_REAL:
			*(double *)field(k, obj) = k->def;
			break;
		case PR_KEY_MIB:
			*(size_t *)field(k, obj) = (size_t)k->def << MIB_SHIFT;
			break;
		case PR_KEY_SIZE:
			*(size_t *)field(k, obj) = (size_t)k->def;
			break;
		case PR_KEY_STR:
		case PR_KEY_CHOICE:
			snprintf(field(k, obj), k->size, "%s",
			    k->def_str != NULL ? k->def_str : "");
			break;
		case PR_KEY_SHA256:
			*(char *)field(k, obj) = '\0';
			break;
		case PR_KEY_CUSTOM:
			/* a default that does not parse is caught by the
			 * tests of each table */
			if (k->def_str != NULL)
				(void)k->ops->set(k, obj, NULL, k->def_str,
				    msg);
			break;
		}
	}
}

/* bytes in the largest unit that keeps them whole */
static void
format_size(size_t z, char *buf, size_t len)
{
	if (z != 0 && z % ((size_t)1 << GIB_SHIFT) == 0)
		snprintf(buf, len, "%zuG", z >> GIB_SHIFT);
	else if (z != 0 && z % ((size_t)1 << MIB_SHIFT) == 0)
		snprintf(buf, len, "%zuM", z >> MIB_SHIFT);
	else
		snprintf(buf, len, "%zu", z);
}

int
pr_key_format(const pr_key *k, const void *obj, char *buf, size_t len)
{
	const void *p = cfield(k, obj);

	buf[0] = '\0';
	switch (k->type) {
	case PR_KEY_INT:
		snprintf(buf, len, "%d", *(const int *)p);
		return 0;
	case PR_KEY_U64:
		snprintf(buf, len, "%" PRIu64, *(const uint64_t *)p);
		return 0;
	case PR_KEY_REAL:
		pr_key_real(*(const double *)p, buf, len);
		return 0;
	case PR_KEY_STR:
	case PR_KEY_CHOICE:
		snprintf(buf, len, "%s", (const char *)p);
		return 0;
	case PR_KEY_SHA256:
		snprintf(buf, len, "%s", (const char *)p);
		return buf[0] == '\0';
	case PR_KEY_SIZE:
		format_size(*(const size_t *)p, buf, len);
		return 0;
	case PR_KEY_MIB:
		snprintf(buf, len, "%zu", *(const size_t *)p >> MIB_SHIFT);
		return 0;
	case PR_KEY_CUSTOM:
		return k->ops->format != NULL ? k->ops->format(k, obj, buf,
		    len) : 1;
	}
	return 1;
}

int
pr_key_print(const pr_key *t, size_t n, const void *obj, FILE *f)
{
	const char *section = "";
	char value[VALUE_LEN];
	size_t i;
	int unset;

	for (i = 0; i < n; i++) {
		const pr_key *k = &t[i];

		if (k->flags & PR_KEY_ALIAS)
			continue;
		/* "[]" returns to the keys before any section */
		if (strcmp(k->section, section) != 0) {
			fprintf(f, "%s[%s]\n", i > 0 ? "\n" : "", k->section);
			section = k->section;
		}
		unset = pr_key_format(k, obj, value, sizeof(value));
		fprintf(f, "%s%s =%s%s\n", unset ? "# " : "", k->name,
		    value[0] != '\0' ? " " : "", value);
	}
	if (ferror(f))
		return KN_EIO;
	return KN_OK;
}
