/* Word-level tf-idf for SOMA's clusters and router (DESIGN section 3):
 * words are maximal runs of ASCII letters and digits and of bytes >= 0x80
 * (so UTF-8 words survive), ASCII lowercased; weights are (1 + ln tf) *
 * idf with idf = ln((1 + n) / (1 + df)) + 1, each row L2-normalised.
 * `shardmeter cluster` builds the vocabulary and the rows; the router
 * weighs a context with the same sa_tfidf_row. */
#ifndef SA_TFIDF_H
#define SA_TFIDF_H

#include <stddef.h>
#include <stdint.h>

#include "soma/docs.h"

/* Longer runs (URLs, hashes) are no words; the router file holds the
 * same limit (PR_ROUTER_WORD_MAX). */
#define SA_WORD_MAX 64
#define SA_VOCAB_DEFAULT 20000
/* A word in fewer documents tells no cluster apart. */
#define SA_MIN_DF 2

/* The next word of text[*pos .. len) into word (SA_WORD_MAX bytes, not
 * NUL-terminated), its length in *wlen, *pos past it; 0 at the end. */
int sa_next_word(const char *text, size_t len, size_t *pos, char *word,
    size_t *wlen);

/* The vocabulary: column j of a row is word j. */
typedef struct {
	size_t n;               /* V */
	char *words;            /* the words in column order, each NUL-ended */
	size_t words_len;       /* bytes of words */
	uint32_t *start;        /* (V) offset of word j in words */
	float *idf;             /* (V) */
	uint32_t *slots;        /* (nslots) word id + 1, 0 empty: the index */
	size_t nslots;          /* a power of two above 2 V */
} sa_vocab;

/* Sparse rows, one per document. */
typedef struct {
	size_t nrows, ncols;
	size_t *rowptr;         /* (nrows + 1) */
	uint32_t *col;          /* (nnz) ascending within a row */
	float *val;             /* (nnz) */
} sa_csr;

/* The max_words words in the most documents of docs (texts in text),
 * ties in byte order, leaving out words in fewer than SA_MIN_DF
 * documents; with their smooth idf.  0 or KN_EINVAL (no word qualifies) /
 * KN_ENOMEM. */
int sa_vocab_build(sa_vocab *v, const char *text, const sa_doc *docs,
    size_t ndocs, size_t max_words, char *err);
/* A vocabulary of n given words (words_len bytes, each NUL-ended, as in
 * sa_vocab.words) and their idf, copied; the router's.  KN_EINVAL for a
 * malformed list or a repeated word. */
int sa_vocab_from(sa_vocab *v, const char *words, size_t words_len,
    size_t n, const float *idf, char *err);
/* The id of word (wlen bytes), or -1. */
long sa_vocab_find(const sa_vocab *v, const char *word, size_t wlen);
void sa_vocab_free(sa_vocab *v);

/* How many entries sa_tfidf_row may need for len bytes of text. */
size_t sa_tfidf_row_cap(size_t len);
/* The tf-idf row of text: its distinct vocabulary words, ascending, in
 * col and their weights in val (each sa_tfidf_row_cap(len) entries);
 * returns the count (0 when no word is in the vocabulary). */
size_t sa_tfidf_row(const sa_vocab *v, const char *text, size_t len,
    uint32_t *col, float *val);
/* One row per document.  0 or KN_ENOMEM. */
int sa_tfidf_rows(sa_csr *m, const sa_vocab *v, const char *text,
    const sa_doc *docs, size_t ndocs, char *err);
void sa_csr_free(sa_csr *m);

#endif
