/* The documents SOMA clusters (DESIGN section 3): the <doc ...> ... </doc>
 * entries of WikiExtractor output, or, in a text without them, chunks of
 * whole lines.  `shardmeter cluster` splits its input files with this. */
#ifndef SA_DOCS_H
#define SA_DOCS_H

#include <stddef.h>

/* A chunk ends at the last line end within this many bytes by default. */
#define SA_DOCS_CHUNK 4096

/* One document: bytes [off, off + len) of the text it was split from.
 * For a <doc> entry these are the lines between its <doc ...> line and
 * its </doc> line, the article's title line included. */
typedef struct {
	size_t off;
	size_t len;
} sa_doc;

/* A growing list of documents; zero-initialise, then sa_docs_free. */
typedef struct {
	sa_doc *v;
	size_t n, cap;
} sa_docs;

/* Appends the documents of text (len bytes, which start at byte base of
 * whatever buffer the offsets are to point into) to d.  When a line of
 * text begins with "<doc " or "<doc>", its entries are the documents and
 * bytes outside them are skipped (an entry missing its </doc> runs to the
 * end); otherwise the text is cut into chunks of at most chunk bytes that
 * end at a line end (a line longer than chunk is cut at chunk bytes).
 * Empty documents are left out.  0 or KN_EINVAL / KN_ENOMEM. */
int sa_docs_split(sa_docs *d, const char *text, size_t len, size_t base,
    size_t chunk, char *err);
void sa_docs_free(sa_docs *d);

#endif
