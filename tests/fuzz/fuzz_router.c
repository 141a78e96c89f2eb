/* Fuzz target: the SOMA router file (proto/router.c) and the router built
 * on it (soma/router.c), as inference loads a router.smr.  A decoded file
 * must encode again to the same values (not the same bytes: a decoder
 * takes any field order and integer width), and its router must index
 * its words and route a context to min(k, N) experts. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/router.h"
#include "soma/router.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "router";

static void
same_router(const pr_router *a, const pr_router *b)
{
	size_t n = a->nwords + (size_t)a->nwords * a->dims +
	    (size_t)a->nexperts * a->dims;

	if (a->nwords != b->nwords || a->dims != b->dims ||
	    a->nexperts != b->nexperts || a->prefix != b->prefix ||
	    a->seed != b->seed || a->words_len != b->words_len ||
	    memcmp(a->words, b->words, a->words_len) != 0 ||
	    memcmp(a->params, b->params, n * sizeof(float)) != 0)
		fz_fail("a router differs after encoding it again");
}

static void
decode(const char *buf, size_t len)
{
	static const char ctx[] = "the River engine poem 1990 caf\xc3\xa9";
	char err[KN_ERR_LEN], *out;
	size_t outlen;
	pr_router r, again;
	sa_router sr;
	int ids[4], n;

	if (pr_router_decode(buf, len, &r, err) != 0) {
		if (r.words != NULL || r.params != NULL)
			fz_fail("a refused router left something allocated");
		return;
	}
	if (pr_router_encode(&r, &out, &outlen, err) != 0)
		fz_fail("a decoded router does not encode: %s", err);
	if (pr_router_decode(out, outlen, &again, err) != 0)
		fz_fail("a re-encoded router does not decode: %s", err);
	same_router(&r, &again);
	pr_router_free(&again);
	free(out);
	if (sa_router_init(&sr, &r, err) != 0)
		fz_fail("a decoded router does not index: %s", err);
	n = sa_route(&sr, ctx, sizeof(ctx) - 1, sr.file.prefix, 4, ids, NULL,
	    err);
	if (n != (sr.file.nexperts < 4 ? (int)sr.file.nexperts : 4))
		fz_fail("routing gave %d experts of %u", n, sr.file.nexperts);
	while (n-- > 0)
		if (ids[n] < 0 || (uint32_t)ids[n] >= sr.file.nexperts)
			fz_fail("routing gave expert %d", ids[n]);
	sa_router_free(&sr);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_decode_rehashed(data, size, decode);
	return 0;
}
