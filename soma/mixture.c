/* SOMA scoring: per-byte log-probabilities and window routing. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "soma/mixture.h"

#define SCORE_BATCH 64

void
sa_windows_init(sa_windows *w, const unsigned char *text, size_t len,
    int T, long max)
{
	w->text = text;
	w->len = len;
	w->T = T;
	w->n = len > (size_t)T ? (long)((len - 1) / (size_t)T) : 0;
	w->max = max;
	if (max > 0 && w->n > max)
		w->n = max;
}

int
sa_score(kn_soma_model *m, const sa_windows *w, const long *idx,
    long count, float *logp, char *err)
{
	int32_t *tok = malloc((size_t)SCORE_BATCH * (w->T + 1) *
	    sizeof(int32_t));
	long i;
	int rc = KN_OK;

	if (tok == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < count && rc == 0; i += SCORE_BATCH) {
		int b, n = count - i < SCORE_BATCH ? (int)(count - i) :
		    SCORE_BATCH;

		for (b = 0; b < n; b++) {
			long wi = idx != NULL ? idx[i + b] : i + b;
			const unsigned char *src = w->text + (size_t)wi * w->T;
			int j;

			for (j = 0; j <= w->T; j++)
				tok[(size_t)b * (w->T + 1) + j] = src[j];
		}
		rc = kn_soma_target_logprobs(m, tok, n, w->T,
		    logp + (size_t)i * w->T, err);
	}
	free(tok);
	return rc;
}

int
sa_route_windows(const sa_router *r, const sa_windows *w,
    size_t route_bytes, int k, int *sel, char *err)
{
	long i;
	int got = 0;

	for (i = 0; i < w->n; i++) {
		size_t end = (size_t)i * w->T, start;

		if (i == 0)
			end = route_bytes < w->len ? route_bytes : w->len;
		start = end > route_bytes ? end - route_bytes : 0;
		got = sa_route(r, (const char *)w->text + start, end - start,
		    route_bytes, k, sel + (size_t)i * k, NULL, err);
		if (got < 0)
			return got;
	}
	return got;
}
