/* Byte corpora, memory-mapped read-only, checked against the run spec's
 * sha256 when it gives one. */
#ifndef SM_CORPUS_H
#define SM_CORPUS_H

#include <stddef.h>

typedef struct {
	const unsigned char *data;
	size_t len;
	void *map;
	size_t map_len;
} corpus;

/* Maps path; min_len is the fewest bytes the caller can use (a window
 * and one more).  expect_sha256 is 64 hex digits or "" for no check. */
int corpus_open(corpus *c, const char *path, const char *expect_sha256,
    size_t min_len, char *err);
void corpus_close(corpus *c);

#endif
