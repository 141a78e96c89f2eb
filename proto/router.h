/* The SOMA router file (DESIGN section 3): the vocabulary with its idf,
 * the SVD basis and the experts' centroids, in msgpack with a magic, a
 * format version and a SHA-256 of the payload, in the checkpoint's
 * style.  `shardmeter cluster` writes it; whatever routes contexts to
 * experts reads it.
 *
 * Format: one msgpack map of exactly these keys: "magic" ("ShardMeter
 * router"), "version" (1), "words" (V), "dims" (D), "experts" (N),
 * "prefix" (R), "seed", "words_bytes", "payload" (a bin: idf (V), basis
 * (V, D) and centroids (N, D) as little-endian f32, then the words_bytes
 * bytes of the words) and "sha256" (of the payload). */
#ifndef PR_ROUTER_H
#define PR_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#define PR_ROUTER_VERSION 1
/* Bounds a decoder checks before it allocates anything. */
#define PR_ROUTER_MAX_WORDS (1u << 20)
#define PR_ROUTER_MAX_DIMS 4096u
#define PR_ROUTER_MAX_EXPERTS 4096u
#define PR_ROUTER_MAX_PREFIX (1u << 20)
/* The longest word, in bytes (SA_WORD_MAX of soma/tfidf.h). */
#define PR_ROUTER_WORD_MAX 64u

typedef struct {
	uint32_t nwords;        /* V */
	uint32_t dims;          /* D, at most V */
	uint32_t nexperts;      /* N */
	uint32_t prefix;        /* R: the bytes of a context routed on */
	uint64_t seed;          /* of the clustering that made it */
	size_t words_len;       /* bytes of words */
	char *words;            /* the V words in column order, each ended
	                         * by a NUL: bytes 0-9, a-z or >= 0x80 */
	float *params;          /* one allocation, carved into: */
	float *idf;             /* (V) > 0 */
	float *basis;           /* (V, D) */
	float *centroids;       /* (N, D) unit rows */
} pr_router;

/* All functions return 0 or a negative KN_E* code (KN_EINVAL for a bad
 * file or argument, KN_ENUM for a non-finite value, KN_ENOMEM) with a
 * one-line reason in err (PR_ERR_LEN bytes; NULL allowed). */

/* Sets the counts of r and allocates words (words_len bytes, plus a NUL
 * past them) and params for the caller to fill.  Counts outside the
 * bounds above are refused. */
int pr_router_alloc(pr_router *r, uint32_t nwords, uint32_t dims,
    uint32_t nexperts, size_t words_len, char *err);
void pr_router_free(pr_router *r);

/* Checks r as a decoder would (so a written file can always be read) and
 * encodes it into a new buffer *buf of *len bytes (caller frees). */
int pr_router_encode(const pr_router *r, char **buf, size_t *len,
    char *err);
/* Validates a whole router file and fills *out (pr_router_free it); on
 * failure *out holds nothing to free. */
int pr_router_decode(const char *buf, size_t len, pr_router *out,
    char *err);

#endif
