/* Fuzz target: the update message (proto/update.c), as a replica decodes
 * the body a peer POSTed.  An update that decodes must decode the same
 * with its count expected, encode again to the same values (an int8 one
 * in f32: quantizing q x scale again need not give q and scale back),
 * and a refused one must leave the caller's buffer untouched. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "proto/update.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "update";

static int
same_meta(const pr_update_meta *a, const pr_update_meta *b)
{
	return strcmp(a->run_id, b->run_id) == 0 && a->block == b->block &&
	    a->round == b->round && a->replica == b->replica &&
	    a->step == b->step && a->enc == b->enc && a->count == b->count;
}

/* The values of a valid update, through the encoder and back. */
static void
round_trip(const pr_update_meta *m, const float *delta)
{
	pr_update_meta got, exact = *m;
	char err[PR_ERR_LEN], *out;
	size_t outlen;
	float *again = malloc(m->count * sizeof(float));

	if (again == NULL)
		abort();
	if (pr_update_encode(m, delta, &out, &outlen, err) != 0)
		fz_fail("a decoded update does not encode: %s", err);
	if (pr_update_decode(out, outlen, m, again, &got, err) != 0)
		fz_fail("a re-encoded update does not decode: %s", err);
	if (!same_meta(m, &got))
		fz_fail("update metadata differs after encoding it again");
	free(out);
	if (m->enc == PR_ENC_INT8) {
		exact.enc = PR_ENC_F32;
		if (pr_update_encode(&exact, delta, &out, &outlen, err) != 0 ||
		    pr_update_decode(out, outlen, &exact, again, &got,
		    err) != 0)
			fz_fail("an int8 update does not pass in f32: %s", err);
		free(out);
	}
	if (memcmp(delta, again, m->count * sizeof(float)) != 0)
		fz_fail("update values differ after encoding them again");
	free(again);
}

static void
decode(const char *buf, size_t len)
{
	pr_update_meta got, expect, got2;
	char err[PR_ERR_LEN];
	float *delta;
	size_t bytes;

	if (pr_update_decode(buf, len, NULL, NULL, &got, err) != 0)
		return;
	/* an uncompressed payload is in the input, so count is bounded by
	 * its size; a zstd frame of runs is not: a receiver bounds it by
	 * the count it expects, and so does this target */
	if (got.comp == PR_COMP_ZSTD && got.count > ((size_t)1 << 22))
		return;
	bytes = (got.count + 1) * sizeof(float);
	if ((delta = malloc(bytes)) == NULL)
		abort();
	memset(&expect, 0, sizeof(expect));
	expect.block = -1;
	expect.round = -1;
	expect.count = got.count + 1;
	memset(delta, FZ_SENTINEL, bytes);
	if (pr_update_decode(buf, len, &expect, delta, &got2, err) == 0)
		fz_fail("an update of %zu values decoded as %zu", got.count,
		    expect.count);
	fz_untouched(delta, bytes, "update");
	expect.count = got.count;
	if (pr_update_decode(buf, len, &expect, delta, &got2, err) != 0)
		fz_fail("an update that decodes alone is refused with its "
		    "count expected: %s", err);
	if (!same_meta(&got, &got2))
		fz_fail("update metadata differs between two decodes");
	round_trip(&got, delta);
	free(delta);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_decode_rehashed(data, size, decode);
	return 0;
}
