/* Scoring text with SOMA models: the log-probability of every byte of a
 * set of windows under one model, and the routed mixture of DESIGN
 * section 3 (each window's top-k experts, chosen from the bytes before
 * it, their next-byte probabilities averaged uniformly). */
#ifndef SA_MIXTURE_H
#define SA_MIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/soma_model.h"
#include "soma/router.h"

/* The windows of a text: window i is bytes [i T, i T + T] (T + 1 bytes,
 * T predicted), as many as fit. */
typedef struct {
	const unsigned char *text;
	size_t len;
	int T;
	long n;                 /* windows */
	long max;               /* cap on n from the caller (0: none) */
} sa_windows;

void sa_windows_init(sa_windows *w, const unsigned char *text, size_t len,
    int T, long max);

/* logp (count, T) for windows idx[0..count) (NULL: 0..count-1) under the
 * model as it is, in batches.  0 or KN_E*. */
int sa_score(kn_soma_model *m, const sa_windows *w, const long *idx,
    long count, float *logp, char *err);

/* The experts of each window (k per window, into sel (n, k)), routed on
 * the route_bytes before the window (the first window, which has none
 * before it, on its own first bytes).  Returns k = min(k, N), or a
 * negative code. */
int sa_route_windows(const sa_router *r, const sa_windows *w,
    size_t route_bytes, int k, int *sel, char *err);

#endif
