/* SOMA's router (DESIGN section 3): a context's first R bytes (published:
 * 256) weighed by tf-idf as documents were, projected through the SVD
 * basis, and the k nearest expert centroids by cosine.  Built from a
 * router file (proto/router.h); `shardmeter cluster` writes that file and
 * inference reads it. */
#ifndef SA_ROUTER_H
#define SA_ROUTER_H

#include <stddef.h>

#include "proto/router.h"
#include "soma/tfidf.h"

#define SA_ROUTE_PREFIX 256
#define SA_ROUTE_TOP 4

typedef struct {
	pr_router file;         /* the arrays as stored */
	sa_vocab vocab;         /* the words of file, indexed */
} sa_router;

/* Takes file over (it is left empty) and indexes its words.  0 or
 * KN_EINVAL / KN_ENOMEM; on failure file is freed. */
int sa_router_init(sa_router *r, pr_router *file, char *err);
/* Reads and validates a router file from path.  0 or KN_E*. */
int sa_router_load(sa_router *r, const char *path, char *err);
void sa_router_free(sa_router *r);

/* The unit embedding (file.dims floats) of the first prefix bytes of
 * bytes (len), all zeros when none of its words is known.  0 or
 * KN_ENOMEM. */
int sa_router_embed(const sa_router *r, const char *bytes, size_t len,
    size_t prefix, float *out, char *err);
/* The min(k, N) experts nearest to the context, nearest first (ties to
 * the lower index), into ids, and their cosines into sims (NULL
 * allowed).  Returns the count, or a negative KN_E* code.  Safe to call
 * from several threads at once. */
int sa_route(const sa_router *r, const char *bytes, size_t len,
    size_t prefix, int k, int *ids, float *sims, char *err);

/* The m words of largest weight in expert e's centroid back-projected
 * through the basis (basis . centroid, one weight per word), largest
 * first, into ids; returns how many (min(m, V)). */
int sa_router_top_words(const sa_router *r, int e, int m, int *ids);

#endif
