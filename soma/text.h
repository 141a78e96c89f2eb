/* The text a SOMA model trains and validates on: one or more files
 * (an expert's cluster, or all of them), the tail of each held out for
 * validation, and minibatches of windows drawn from the rest by a
 * counter-based generator, so a step's batch is a function of its key. */
#ifndef SA_TEXT_H
#define SA_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/corpus.h"

/* The share of each file held out for validation, and its cap: enough
 * windows for a steady plateau signal without starving small clusters. */
#define SA_TEXT_VALID_SHARE 0.02
#define SA_TEXT_VALID_MAX (1 << 20)

typedef struct {
	corpus *files;
	int nfiles;
	size_t *train_len;      /* bytes of file i used for training */
	size_t train_total;
	size_t valid_total;     /* bytes held out, over all files */
} sa_text;

/* Maps paths[0..n); every file needs at least window + 1 bytes for
 * training and as many held out.  valid_share 0 holds nothing out (a
 * test file read whole).  0 or KN_E* with the file named. */
int sa_text_open(sa_text *t, const char *const *paths, int n,
    double valid_share, int window, char *err);
void sa_text_close(sa_text *t);

/* B windows of T + 1 bytes (tokens (B, T+1) as int32) from the training
 * parts, each file weighed by its length, offsets drawn from (seed,
 * stream, step). */
void sa_text_batch(const sa_text *t, uint64_t seed, uint64_t stream,
    uint64_t step, int B, int T, int32_t *tokens);

/* The fixed validation windows: count how many of T + 1 bytes fit in the
 * held-out parts (at most max), and window i of them. */
int sa_text_valid_count(const sa_text *t, int T, int max);
void sa_text_valid_window(const sa_text *t, int i, int count, int T,
    int32_t *tokens);

#endif
