/* SOMA's training text: files, held-out tails, keyed minibatches. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/rng.h"
#include "soma/text.h"

int
sa_text_open(sa_text *t, const char *const *paths, int n,
    double valid_share, int window, char *err)
{
	int i, rc;

	memset(t, 0, sizeof(*t));
	if (n < 1)
		return kn_error(err, KN_EINVAL, "no text to read");
	t->files = calloc((size_t)n, sizeof(*t->files));
	t->train_len = calloc((size_t)n, sizeof(*t->train_len));
	if (t->files == NULL || t->train_len == NULL) {
		sa_text_close(t);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	for (i = 0; i < n; i++) {
		size_t len, held;

		if ((rc = corpus_open(&t->files[i], paths[i], "",
		    (size_t)window + 1, err)) != 0) {
			sa_text_close(t);
			return rc;
		}
		t->nfiles = i + 1;
		len = t->files[i].len;
		held = (size_t)((double)len * valid_share);
		if (held > SA_TEXT_VALID_MAX)
			held = SA_TEXT_VALID_MAX;
		if (valid_share > 0 && held < (size_t)window + 1)
			held = (size_t)window + 1;
		if (len < held + (size_t)window + 1) {
			sa_text_close(t);
			return kn_error(err, KN_EINVAL, "%s: %zu bytes are too "
			    "few for windows of %d bytes and a held-out part",
			    paths[i], len, window);
		}
		t->train_len[i] = len - held;
		t->train_total += len - held;
		t->valid_total += held;
	}
	return KN_OK;
}

void
sa_text_close(sa_text *t)
{
	int i;

	for (i = 0; i < t->nfiles; i++)
		corpus_close(&t->files[i]);
	free(t->files);
	free(t->train_len);
	memset(t, 0, sizeof(*t));
}

static void
copy_window(const unsigned char *src, int T, int32_t *out)
{
	int j;

	for (j = 0; j <= T; j++)
		out[j] = src[j];
}

void
sa_text_batch(const sa_text *t, uint64_t seed, uint64_t stream,
    uint64_t step, int B, int T, int32_t *tokens)
{
	kn_rng r;
	int b;

	/* one generator per (stream, step): the batch does not depend on
	 * how many batches were drawn before it */
	kn_rng_init(&r, seed, kn_rng_stream(stream, step, 0x7478u, 0));
	for (b = 0; b < B; b++) {
		/* a byte position over all training parts, then its file */
		uint64_t pos = kn_rng_below(&r, t->train_total);
		int f = 0;

		while (pos >= t->train_len[f]) {
			pos -= t->train_len[f];
			f++;
		}
		if (pos > t->train_len[f] - (size_t)T - 1)
			pos = t->train_len[f] - (size_t)T - 1;
		copy_window(t->files[f].data + pos, T,
		    tokens + (size_t)b * (T + 1));
	}
}

int
sa_text_valid_count(const sa_text *t, int T, int max)
{
	size_t n = 0;
	int f;

	for (f = 0; f < t->nfiles; f++)
		n += (t->files[f].len - t->train_len[f]) / ((size_t)T + 1);
	return n < (size_t)max ? (int)n : max;
}

void
sa_text_valid_window(const sa_text *t, int i, int count, int T,
    int32_t *tokens)
{
	/* count windows spread evenly over the held-out bytes, taken as
	 * one string of all files' tails */
	size_t span = t->valid_total - (size_t)T - 1;
	size_t pos = count > 1 ? span / (size_t)(count - 1) * (size_t)i : 0;
	int f;

	for (f = 0; f < t->nfiles; f++) {
		size_t held = t->files[f].len - t->train_len[f];

		if (pos < held) {
			if (pos > held - (size_t)T - 1)
				pos = held - (size_t)T - 1;
			copy_window(t->files[f].data + t->train_len[f] + pos,
			    T, tokens);
			return;
		}
		pos -= held;
	}
	/* not reached: pos < valid_total */
	copy_window(t->files[t->nfiles - 1].data + t->train_len[t->nfiles - 1],
	    T, tokens);
}
