/* Words, the vocabulary and tf-idf rows (see tfidf.h).  Words are looked
 * up in open-addressing tables over one pool of NUL-ended words: a
 * growing one while document frequencies are counted, a fixed one for the
 * chosen vocabulary. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "soma/tfidf.h"

static int
is_word_byte(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	    (c >= 'A' && c <= 'Z') || c >= 0x80;
}

int
sa_next_word(const char *text, size_t len, size_t *pos, char *word,
    size_t *wlen)
{
	size_t i = *pos, n;

	for (;;) {
		while (i < len && !is_word_byte((unsigned char)text[i]))
			i++;
		if (i == len) {
			*pos = i;
			return 0;
		}
		for (n = 0; i < len && is_word_byte((unsigned char)text[i]);
		    i++, n++) {
			unsigned char c = (unsigned char)text[i];

			if (n < SA_WORD_MAX)
				word[n] = (char)(c >= 'A' && c <= 'Z' ?
				    c - 'A' + 'a' : c);
		}
		if (n <= SA_WORD_MAX) {
			*pos = i;
			*wlen = n;
			return 1;
		}
	}
}

/* ---- word tables ---- */

static uint64_t
word_hash(const char *w, size_t n)
{
	uint64_t h = 1469598103934665603ull;   /* FNV-1a */
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)w[i]) * 1099511628211ull;
	return h;
}

/* The slot holding word w, or the empty slot where it would go. */
static size_t
probe(const uint32_t *slots, size_t nslots, const char *pool,
    const uint32_t *start, const char *w, size_t n)
{
	size_t i = (size_t)word_hash(w, n) & (nslots - 1);

	while (slots[i] != 0) {
		const char *s = pool + start[slots[i] - 1];

		/* strncmp, not memcmp: s may be shorter than n and the
		 * last word of its pool (w holds no NUL) */
		if (strncmp(s, w, n) == 0 && s[n] == '\0')
			return i;
		i = (i + 1) & (nslots - 1);
	}
	return i;
}

static uint32_t *
index_words(const char *pool, const uint32_t *start, size_t n,
    size_t *nslots)
{
	uint32_t *slots;
	size_t i, ns = 16;

	while (ns < 2 * n + 2)
		ns *= 2;
	if ((slots = calloc(ns, sizeof(*slots))) == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		const char *w = pool + start[i];

		slots[probe(slots, ns, pool, start, w, strlen(w))] =
		    (uint32_t)i + 1;
	}
	*nslots = ns;
	return slots;
}

/* The table in which document frequencies are counted. */
struct counts {
	char *pool;
	size_t pool_len, pool_cap;
	uint32_t *start, *df, *last;    /* (cap) per word */
	size_t n, cap;
	uint32_t *slots;
	size_t nslots;
};

static void
counts_free(struct counts *c)
{
	free(c->pool);
	free(c->start);
	free(c->df);
	free(c->last);
	free(c->slots);
	memset(c, 0, sizeof(*c));
}

static int
grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 4096;
	void *q;

	while (c < need)
		c *= 2;
	if (c == *cap)
		return 0;
	if ((q = realloc(*p, c * size)) == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* The id of w, added with df 0 when new; -1 when out of memory. */
static long
counts_id(struct counts *c, const char *w, size_t n)
{
	size_t s, cap;

	if (2 * (c->n + 1) >= c->nslots) {
		size_t ns = c->nslots ? 2 * c->nslots : 4096;
		uint32_t *slots = calloc(ns, sizeof(*slots));

		if (slots == NULL)
			return -1;
		for (s = 0; s < c->n; s++) {
			const char *x = c->pool + c->start[s];

			slots[probe(slots, ns, c->pool, c->start, x,
			    strlen(x))] = (uint32_t)s + 1;
		}
		free(c->slots);
		c->slots = slots;
		c->nslots = ns;
	}
	s = probe(c->slots, c->nslots, c->pool, c->start, w, n);
	if (c->slots[s] != 0)
		return (long)c->slots[s] - 1;
	if (c->pool_len + n + 1 > UINT32_MAX)
		return -1;
	if (grow((void **)&c->pool, &c->pool_cap, c->pool_len + n + 1, 1))
		return -1;
	cap = c->cap;
	if (grow((void **)&c->start, &cap, c->n + 1, sizeof(uint32_t)))
		return -1;
	cap = c->cap;
	if (grow((void **)&c->df, &cap, c->n + 1, sizeof(uint32_t)))
		return -1;
	if (grow((void **)&c->last, &c->cap, c->n + 1, sizeof(uint32_t)))
		return -1;
	memcpy(c->pool + c->pool_len, w, n);
	c->pool[c->pool_len + n] = '\0';
	c->start[c->n] = (uint32_t)c->pool_len;
	c->df[c->n] = 0;
	c->last[c->n] = 0;
	c->pool_len += n + 1;
	c->slots[s] = (uint32_t)c->n + 1;
	return (long)c->n++;
}

/* ---- the vocabulary ---- */

struct by_df {
	const struct counts *c;
	uint32_t id;
};

static int
cmp_df(const void *pa, const void *pb)
{
	const struct by_df *a = pa, *b = pb;
	uint32_t da = a->c->df[a->id], db = b->c->df[b->id];

	if (da != db)
		return da > db ? -1 : 1;
	return strcmp(a->c->pool + a->c->start[a->id],
	    b->c->pool + b->c->start[b->id]);
}

/* v->words, v->start and v->n set: the index. */
static int
vocab_index(sa_vocab *v, char *err)
{
	v->slots = index_words(v->words, v->start, v->n, &v->nslots);
	if (v->slots == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory for the "
		    "vocabulary's index");
	return 0;
}

static int
vocab_alloc(sa_vocab *v, size_t n, size_t words_len, char *err)
{
	memset(v, 0, sizeof(*v));
	v->n = n;
	v->words_len = words_len;
	v->words = malloc(words_len + 1);
	v->start = malloc(n * sizeof(*v->start));
	v->idf = malloc(n * sizeof(*v->idf));
	if (v->words == NULL || v->start == NULL || v->idf == NULL) {
		sa_vocab_free(v);
		return kn_error(err, KN_ENOMEM, "out of memory for a "
		    "vocabulary of %zu words", n);
	}
	return 0;
}

int
sa_vocab_build(sa_vocab *v, const char *text, const sa_doc *docs,
    size_t ndocs, size_t max_words, char *err)
{
	struct counts c = { 0 };
	struct by_df *cand = NULL;
	char w[SA_WORD_MAX];
	size_t d, i, pos, n, ncand = 0, len = 0;
	long id;
	int rc;

	memset(v, 0, sizeof(*v));
	if (max_words < 1)
		return kn_error(err, KN_EINVAL, "the vocabulary needs at "
		    "least one word");
	for (d = 0; d < ndocs; d++) {
		const char *t = text + docs[d].off;

		for (pos = 0; sa_next_word(t, docs[d].len, &pos, w, &n);) {
			if ((id = counts_id(&c, w, n)) < 0) {
				counts_free(&c);
				return kn_error(err, KN_ENOMEM, "out of memory "
				    "counting words");
			}
			if (c.last[id] != d + 1) {
				c.last[id] = (uint32_t)(d + 1);
				c.df[id]++;
			}
		}
	}
	if (c.n > 0 && (cand = malloc(c.n * sizeof(*cand))) == NULL) {
		counts_free(&c);
		return kn_error(err, KN_ENOMEM, "out of memory sorting words");
	}
	for (i = 0; i < c.n; i++)
		if (c.df[i] >= SA_MIN_DF) {
			cand[ncand].c = &c;
			cand[ncand++].id = (uint32_t)i;
		}
	if (ncand == 0) {
		free(cand);
		counts_free(&c);
		return kn_error(err, KN_EINVAL, "no word is in %d or more of "
		    "the %zu documents", SA_MIN_DF, ndocs);
	}
	qsort(cand, ncand, sizeof(*cand), cmp_df);
	if (ncand > max_words)
		ncand = max_words;
	for (i = 0; i < ncand; i++)
		len += strlen(c.pool + c.start[cand[i].id]) + 1;
	if ((rc = vocab_alloc(v, ncand, len, err)) == 0) {
		for (i = 0, len = 0; i < ncand; i++) {
			const char *s = c.pool + c.start[cand[i].id];

			n = strlen(s) + 1;
			memcpy(v->words + len, s, n);
			v->start[i] = (uint32_t)len;
			len += n;
			v->idf[i] = (float)(log((1.0 + (double)ndocs) /
			    (1.0 + c.df[cand[i].id])) + 1.0);
		}
		if ((rc = vocab_index(v, err)) != 0)
			sa_vocab_free(v);
	}
	free(cand);
	counts_free(&c);
	return rc;
}

int
sa_vocab_from(sa_vocab *v, const char *words, size_t words_len, size_t n,
    const float *idf, char *err)
{
	size_t i, off = 0, wl;
	int rc;

	if ((rc = vocab_alloc(v, n, words_len, err)) != 0)
		return rc;
	memcpy(v->words, words, words_len);
	v->words[words_len] = '\0';
	memcpy(v->idf, idf, n * sizeof(*idf));
	for (i = 0; i < n; i++) {
		wl = strnlen(words + off, words_len - off);
		if (off + wl >= words_len || wl == 0 || wl > SA_WORD_MAX) {
			sa_vocab_free(v);
			return kn_error(err, KN_EINVAL, "word %zu of the "
			    "vocabulary is empty, too long or unterminated",
			    i);
		}
		v->start[i] = (uint32_t)off;
		off += wl + 1;
	}
	if (off != words_len) {
		sa_vocab_free(v);
		return kn_error(err, KN_EINVAL, "the vocabulary holds more "
		    "than its %zu words", n);
	}
	if ((rc = vocab_index(v, err)) != 0)
		return rc;
	for (i = 0; i < n; i++) {
		const char *w = v->words + v->start[i];

		if (sa_vocab_find(v, w, strlen(w)) != (long)i) {
			rc = kn_error(err, KN_EINVAL, "the vocabulary holds "
			    "the word '%.*s' twice", SA_WORD_MAX, w);
			sa_vocab_free(v);
			return rc;
		}
	}
	return 0;
}

long
sa_vocab_find(const sa_vocab *v, const char *word, size_t wlen)
{
	size_t s = probe(v->slots, v->nslots, v->words, v->start, word,
	    wlen);

	return (long)v->slots[s] - 1;
}

void
sa_vocab_free(sa_vocab *v)
{
	free(v->words);
	free(v->start);
	free(v->idf);
	free(v->slots);
	memset(v, 0, sizeof(*v));
}

/* ---- rows ---- */

size_t
sa_tfidf_row_cap(size_t len)
{
	return len / 2 + 1;
}

static int
cmp_u32(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return (a > b) - (a < b);
}

size_t
sa_tfidf_row(const sa_vocab *v, const char *text, size_t len,
    uint32_t *col, float *val)
{
	char w[SA_WORD_MAX];
	size_t pos = 0, n, m = 0, i, j;
	double norm = 0;
	long id;

	while (sa_next_word(text, len, &pos, w, &n))
		if ((id = sa_vocab_find(v, w, n)) >= 0)
			col[m++] = (uint32_t)id;
	qsort(col, m, sizeof(*col), cmp_u32);
	for (i = 0, j = 0; i < m; j++) {
		size_t tf = 1;

		while (i + tf < m && col[i + tf] == col[i])
			tf++;
		col[j] = col[i];
		val[j] = (float)((1.0 + log((double)tf)) * v->idf[col[i]]);
		norm += (double)val[j] * val[j];
		i += tf;
	}
	for (i = 0; i < j; i++)
		val[i] = (float)(val[i] / sqrt(norm));
	return j;
}

int
sa_tfidf_rows(sa_csr *m, const sa_vocab *v, const char *text,
    const sa_doc *docs, size_t ndocs, char *err)
{
	size_t d, cap = 0, nnz = 0, longest = 0, rowcap;
	uint32_t *col = NULL;
	float *val = NULL;

	memset(m, 0, sizeof(*m));
	m->nrows = ndocs;
	m->ncols = v->n;
	for (d = 0; d < ndocs; d++)
		if (docs[d].len > longest)
			longest = docs[d].len;
	rowcap = sa_tfidf_row_cap(longest);
	if ((m->rowptr = malloc((ndocs + 1) * sizeof(*m->rowptr))) == NULL)
		goto nomem;
	m->rowptr[0] = 0;
	for (d = 0; d < ndocs; d++) {
		size_t c = cap;

		/* a row may need rowcap entries before it is compressed */
		if (grow((void **)&col, &c, nnz + rowcap, sizeof(*col)) ||
		    grow((void **)&val, &cap, nnz + rowcap, sizeof(*val)))
			goto nomem;
		nnz += sa_tfidf_row(v, text + docs[d].off, docs[d].len,
		    col + nnz, val + nnz);
		m->rowptr[d + 1] = nnz;
	}
	m->col = col;
	m->val = val;
	return 0;
nomem:
	free(col);
	free(val);
	sa_csr_free(m);
	return kn_error(err, KN_ENOMEM, "out of memory for the tf-idf rows "
	    "of %zu documents", ndocs);
}

void
sa_csr_free(sa_csr *m)
{
	free(m->rowptr);
	free(m->col);
	free(m->val);
	memset(m, 0, sizeof(*m));
}
