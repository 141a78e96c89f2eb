/* Labels added to every sample of a Prometheus text (prom.h).  The text
 * is the daemon's own, so a line that does not parse as a sample is
 * copied as it is rather than refused: promtool, in the tests, is the
 * judge of the format. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/prom.h"

int
prom_label_append(char *labels, size_t size, const char *name,
    const char *value)
{
	size_t at = strlen(labels), start = at;
	const char *v;

#define PUT(c) do {                                                     \
		if (at + 1 >= size)                                     \
			goto full;                                      \
		labels[at++] = (c);                                     \
	} while (0)
	if (start > 0)
		PUT(',');
	for (v = name; *v; v++)
		PUT(*v);
	PUT('=');
	PUT('"');
	for (v = value; *v; v++) {
		if (*v == '\\' || *v == '"')
			PUT('\\');
		if (*v == '\n') {
			PUT('\\');
			PUT('n');
			continue;
		}
		PUT(*v);
	}
	PUT('"');
#undef PUT
	labels[at] = '\0';
	return KN_OK;
full:
	labels[start] = '\0';
	return KN_EINVAL;
}

int
prom_label_int(char *labels, size_t size, const char *name, long long value)
{
	char v[24];

	snprintf(v, sizeof(v), "%lld", value);
	return prom_label_append(labels, size, name, v);
}

/* One label name="value" at p (before end): its name (*nlen bytes) and
 * the end of its value's closing quote; NULL when p holds none. */
static const char *
one_label(const char *p, const char *end, size_t *nlen)
{
	const char *q = p;

	while (q < end && *q != '=' && *q != '}' && *q != ',')
		q++;
	if (q == p || q + 1 >= end || *q != '=' || q[1] != '"')
		return NULL;
	*nlen = (size_t)(q - p);
	for (q += 2; q < end && *q != '"'; q++)
		if (*q == '\\')
			q++;
	return q < end ? q + 1 : NULL;
}

/* Whether the label list [p, end) ("a=\"x\",b=\"y\"") names name. */
static int
has_label(const char *p, const char *end, const char *name, size_t len)
{
	size_t nlen;
	const char *q;

	while (p < end && (q = one_label(p, end, &nlen)) != NULL) {
		if (nlen == len && memcmp(p, name, len) == 0)
			return 1;
		p = q < end && *q == ',' ? q + 1 : q;
	}
	return 0;
}

/* One sample line [p, end) with the labels the sample lacks. */
static void
sample_line(FILE *f, const char *p, const char *end, const char *labels)
{
	const char *name_end = p, *own = NULL, *own_end = NULL, *l, *q;
	const char *lend = labels + strlen(labels);
	size_t nlen;
	int put = 0;

	while (name_end < end && *name_end != '{' && *name_end != ' ')
		name_end++;
	if (name_end < end && *name_end == '{') {
		own = name_end + 1;
		/* the closing brace after the last label's value */
		for (own_end = own; own_end < end && *own_end != '}';) {
			q = one_label(own_end, end, &nlen);
			if (q == NULL)
				break;
			own_end = q < end && *q == ',' ? q + 1 : q;
		}
		if (own_end >= end || *own_end != '}') {
			fwrite(p, 1, (size_t)(end - p), f);     /* not ours */
			return;
		}
	}
	fwrite(p, 1, (size_t)(name_end - p), f);
	fputc('{', f);
	for (l = labels; l < lend && (q = one_label(l, lend, &nlen)) != NULL;
	    l = q < lend && *q == ',' ? q + 1 : q) {
		if (own != NULL && has_label(own, own_end, l, nlen))
			continue;
		fprintf(f, "%s%.*s", put++ ? "," : "", (int)(q - l), l);
	}
	if (own != NULL && own_end > own)
		fprintf(f, "%s%.*s", put ? "," : "", (int)(own_end - own), own);
	fputc('}', f);
	q = own != NULL ? own_end + 1 : name_end;
	fwrite(q, 1, (size_t)(end - q), f);
}

char *
prom_add_labels(const char *text, size_t len, const char *labels,
    size_t *outlen)
{
	const char *p = text, *end = text + len, *eol;
	char *out = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&out, &n);

	if (f == NULL)
		return NULL;
	for (; p < end; p = eol) {
		eol = memchr(p, '\n', (size_t)(end - p));
		eol = eol != NULL ? eol + 1 : end;
		if (*p == '#' || *p == '\n' || labels[0] == '\0')
			fwrite(p, 1, (size_t)(eol - p), f);
		else
			sample_line(f, p, eol, labels);
	}
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	*outlen = n;
	return out;
}
