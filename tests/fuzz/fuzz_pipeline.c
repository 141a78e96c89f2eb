/* Fuzz target: one pipeline frame body (proto/pipeline.c), as a host or
 * the client decodes what came over TCP after the 4-byte length.  A
 * refused frame must be left cleared; a decoded one must encode again,
 * with a header that gives its length, to a frame that decodes the same. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/pipeline.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "pipeline";

static int
same_bytes(const unsigned char *a, size_t alen, const unsigned char *b,
    size_t blen)
{
	return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static int
same_frame(const pl_frame *a, const pl_frame *b)
{
	return a->type == b->type && a->id == b->id && a->mode == b->mode &&
	    a->length == b->length && a->steps == b->steps &&
	    a->temperature == b->temperature && a->seed == b->seed &&
	    a->fixed == b->fixed && a->end == b->end &&
	    a->block == b->block && a->stream == b->stream &&
	    a->host == b->host && a->pos == b->pos &&
	    a->count == b->count && a->width == b->width &&
	    a->byte == b->byte && a->expert == b->expert &&
	    same_bytes(a->data, a->data_len, b->data, b->data_len) &&
	    same_bytes(a->mask, a->mask_len, b->mask, b->mask_len) &&
	    a->compute_us == b->compute_us && a->hops == b->hops &&
	    a->traversals == b->traversals &&
	    strcmp(a->message, b->message) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const pl_frame cleared;
	pl_frame f, g;
	char err[KN_ERR_LEN], *out;
	size_t outlen;
	char *body = fz_copy(data, size);

	if (pl_frame_decode(body, size, &f, err) != 0) {
		if (memcmp(&f, &cleared, sizeof(f)) != 0)
			fz_fail("a refused frame is not left cleared");
		free(body);
		return 0;
	}
	free(body);
	if (pl_frame_encode(&f, &out, &outlen, err) != 0)
		fz_fail("a decoded %s frame does not encode: %s",
		    pl_type_name(f.type), err);
	if (outlen < PL_HEADER ||
	    pl_frame_length((unsigned char *)out) != outlen - PL_HEADER)
		fz_fail("an encoded frame's header does not give its length");
	if (pl_frame_decode(out + PL_HEADER, outlen - PL_HEADER, &g, err) != 0)
		fz_fail("a re-encoded %s frame does not decode: %s",
		    pl_type_name(f.type), err);
	if (!same_frame(&f, &g))
		fz_fail("a %s frame differs after encoding it again",
		    pl_type_name(f.type));
	free(out);
	pl_frame_clear(&f);
	pl_frame_clear(&g);
	return 0;
}
