/* Routing a context to experts (see router.h).  A context goes through
 * the very functions a document went through at clustering time
 * (sa_tfidf_row, sa_embed_row), so a context and a document of the same
 * bytes land on the same point. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "soma/router.h"
#include "soma/svd.h"

_Static_assert(SA_WORD_MAX == PR_ROUTER_WORD_MAX,
    "the router file holds the words the tokenizer makes");

/* A router file is a few tens of MiB at the published sizes. */
#define ROUTER_MAX_FILE ((size_t)1 << 32)

int
sa_router_init(sa_router *r, pr_router *file, char *err)
{
	int rc;

	memset(r, 0, sizeof(*r));
	r->file = *file;
	memset(file, 0, sizeof(*file));
	if ((rc = sa_vocab_from(&r->vocab, r->file.words, r->file.words_len,
	    r->file.nwords, r->file.idf, err)) != 0)
		pr_router_free(&r->file);
	return rc;
}

int
sa_router_load(sa_router *r, const char *path, char *err)
{
	pr_router file;
	size_t len;
	char *buf;
	int rc;

	memset(r, 0, sizeof(*r));
	if ((rc = pr_ckpt_read_file(path, ROUTER_MAX_FILE, &buf, &len,
	    err)) != 0)
		return rc;
	rc = pr_router_decode(buf, len, &file, err);
	free(buf);
	if (rc != 0)
		return rc;
	return sa_router_init(r, &file, err);
}

void
sa_router_free(sa_router *r)
{
	pr_router_free(&r->file);
	sa_vocab_free(&r->vocab);
}

int
sa_router_embed(const sa_router *r, const char *bytes, size_t len,
    size_t prefix, float *out, char *err)
{
	size_t cap, nnz;
	uint32_t *col;
	float *val;

	if (len > prefix)
		len = prefix;
	cap = sa_tfidf_row_cap(len);
	col = malloc(cap * sizeof(*col));
	val = malloc(cap * sizeof(*val));
	if (col == NULL || val == NULL) {
		free(col);
		free(val);
		return kn_error(err, KN_ENOMEM, "out of memory routing %zu "
		    "bytes", len);
	}
	nnz = sa_tfidf_row(&r->vocab, bytes, len, col, val);
	sa_embed_row(col, val, nnz, r->file.basis, (int)r->file.dims, out);
	free(col);
	free(val);
	return 0;
}

/* Index order of n scores, largest first, ties to the lower index: the
 * first m of them into ids (insertion into a short sorted list). */
static int
top_m(const float *score, int n, int m, int *ids)
{
	int i, j, got = 0;

	if (m > n)
		m = n;
	for (i = 0; i < n; i++) {
		if (got == m && score[i] <= score[ids[m - 1]])
			continue;
		j = got < m ? got++ : m - 1;
		for (; j > 0 && score[i] > score[ids[j - 1]]; j--)
			ids[j] = ids[j - 1];
		ids[j] = i;
	}
	return m;
}

int
sa_route(const sa_router *r, const char *bytes, size_t len, size_t prefix,
    int k, int *ids, float *sims, char *err)
{
	int n = (int)r->file.nexperts, d = (int)r->file.dims, e, c, rc, m;
	float *emb, *cos;

	if (k < 1)
		return kn_error(err, KN_EINVAL, "routing picks at least one "
		    "expert, not %d", k);
	emb = malloc((size_t)d * sizeof(*emb));
	cos = malloc((size_t)n * sizeof(*cos));
	if (emb == NULL || cos == NULL) {
		free(emb);
		free(cos);
		return kn_error(err, KN_ENOMEM, "out of memory routing");
	}
	if ((rc = sa_router_embed(r, bytes, len, prefix, emb, err)) != 0)
		goto out;
	for (e = 0; e < n; e++) {
		const float *x = r->file.centroids + (size_t)e * d;
		double s = 0;

		for (c = 0; c < d; c++)
			s += (double)emb[c] * x[c];
		cos[e] = (float)s;
	}
	m = top_m(cos, n, k, ids);
	for (e = 0; sims != NULL && e < m; e++)
		sims[e] = cos[ids[e]];
	rc = m;
out:
	free(emb);
	free(cos);
	return rc;
}

int
sa_router_top_words(const sa_router *r, int e, int m, int *ids)
{
	size_t v = r->file.nwords, d = r->file.dims, i, c;
	const float *x = r->file.centroids + (size_t)e * d;
	float *w;

	if ((w = malloc(v * sizeof(*w))) == NULL)
		return 0;
	for (i = 0; i < v; i++) {
		double s = 0;

		for (c = 0; c < d; c++)
			s += (double)r->file.basis[i * d + c] * x[c];
		w[i] = (float)s;
	}
	m = top_m(w, (int)v, m, ids);
	free(w);
	return m;
}
