/* Splitting a text into documents: WikiExtractor's <doc> entries when the
 * text has them, else chunks of whole lines, so that clustering works on
 * any text. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "soma/docs.h"

static int
docs_add(sa_docs *d, size_t off, size_t len, char *err)
{
	if (len == 0)
		return 0;
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 1024;
		sa_doc *v = realloc(d->v, cap * sizeof(*v));

		if (v == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory for "
			    "%zu documents", cap);
		d->v = v;
		d->cap = cap;
	}
	d->v[d->n].off = off;
	d->v[d->n].len = len;
	d->n++;
	return 0;
}

/* The end of the line that starts at p: one past its '\n', or end. */
static const char *
line_end(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));

	return nl ? nl + 1 : end;
}

static int
is_doc_open(const char *p, const char *end)
{
	return end - p >= 5 && memcmp(p, "<doc", 4) == 0 &&
	    (p[4] == ' ' || p[4] == '>');
}

static int
is_doc_close(const char *p, const char *end)
{
	return end - p >= 6 && memcmp(p, "</doc>", 6) == 0;
}

static int
has_doc_lines(const char *text, size_t len)
{
	const char *p = text, *end = text + len;

	for (; p < end; p = line_end(p, end))
		if (is_doc_open(p, end))
			return 1;
	return 0;
}

static int
split_entries(sa_docs *d, const char *text, size_t len, size_t base,
    char *err)
{
	const char *p = text, *end = text + len, *start = NULL;
	int rc;

	for (; p < end; p = line_end(p, end)) {
		if (is_doc_open(p, end)) {
			/* an entry left open ends where the next begins */
			if (start != NULL && (rc = docs_add(d, base +
			    (size_t)(start - text), (size_t)(p - start),
			    err)) != 0)
				return rc;
			start = line_end(p, end);
		} else if (start != NULL && is_doc_close(p, end)) {
			if ((rc = docs_add(d, base + (size_t)(start - text),
			    (size_t)(p - start), err)) != 0)
				return rc;
			start = NULL;
		}
	}
	if (start != NULL)
		return docs_add(d, base + (size_t)(start - text),
		    (size_t)(end - start), err);
	return 0;
}

static int
split_chunks(sa_docs *d, const char *text, size_t len, size_t base,
    size_t chunk, char *err)
{
	size_t off = 0, n;
	int rc;

	while (off < len) {
		n = len - off < chunk ? len - off : chunk;
		if (off + n < len) {
			size_t i = n;

			while (i > 0 && text[off + i - 1] != '\n')
				i--;
			if (i > 0)
				n = i;
		}
		if ((rc = docs_add(d, base + off, n, err)) != 0)
			return rc;
		off += n;
	}
	return 0;
}

int
sa_docs_split(sa_docs *d, const char *text, size_t len, size_t base,
    size_t chunk, char *err)
{
	if (chunk == 0)
		return kn_error(err, KN_EINVAL, "the chunk size must be at "
		    "least 1 byte");
	if (has_doc_lines(text, len))
		return split_entries(d, text, len, base, err);
	return split_chunks(d, text, len, base, chunk, err);
}

void
sa_docs_free(sa_docs *d)
{
	free(d->v);
	memset(d, 0, sizeof(*d));
}
