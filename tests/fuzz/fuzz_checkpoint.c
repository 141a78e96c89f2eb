/* Fuzz target: checkpoint and optimizer-state files (proto/checkpoint.c),
 * as the daemon reads a peer's checkpoint or its own files.  Each input is
 * decoded alone, against the corpus's model table, and as an optimizer
 * state; a decoded file must encode again to the same values, and a
 * refused one must leave the caller's buffers untouched. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "proto/checkpoint.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "checkpoint";

/* Optimizer states of more parameters are refused before the payload. */
#define MAX_NPARAMS 4096

static void
same_meta(const pr_ckpt_meta *a, const pr_ckpt_meta *b, const char *what)
{
	if (strcmp(a->run_id, b->run_id) != 0 || a->block != b->block ||
	    strcmp(a->kind, b->kind) != 0 || a->step != b->step ||
	    a->round != b->round)
		fz_fail("%s: metadata differs after encoding it again", what);
}

/* Against the model table: the parameters, then the same again through
 * the encoder. */
static void
decode_model(const char *buf, size_t len)
{
	float params[FZ_PARAMS], again[FZ_PARAMS];
	pr_ckpt_meta meta, meta2;
	char err[PR_ERR_LEN], *out;
	size_t outlen;

	memset(params, FZ_SENTINEL, sizeof(params));
	if (pr_ckpt_decode(buf, len, NULL, fz_tensors, FZ_NTENSORS, params,
	    &meta, err) != 0) {
		fz_untouched(params, sizeof(params), "checkpoint");
		return;
	}
	if (pr_ckpt_encode(&meta, fz_tensors, FZ_NTENSORS, params, &out,
	    &outlen, err) != 0)
		fz_fail("a decoded checkpoint does not encode: %s", err);
	if (pr_ckpt_decode(out, outlen, &meta, fz_tensors, FZ_NTENSORS, again,
	    &meta2, err) != 0)
		fz_fail("a re-encoded checkpoint does not decode: %s", err);
	same_meta(&meta, &meta2, "checkpoint");
	if (memcmp(params, again, sizeof(params)) != 0)
		fz_fail("checkpoint values differ after encoding them again");
	free(out);
}

static void
decode_optim(const char *buf, size_t len)
{
	long long n = fz_map_uint(buf, len, "nparams");
	float *mv, *again;
	pr_ckpt_meta meta, meta2;
	char err[PR_ERR_LEN], *out;
	size_t outlen, bytes;
	int t, t2;

	if (n < 0 || n > MAX_NPARAMS)
		n = 1;
	bytes = 2 * (size_t)n * sizeof(float);
	if ((mv = malloc(bytes + 1)) == NULL ||
	    (again = malloc(bytes + 1)) == NULL)
		abort();
	memset(mv, FZ_SENTINEL, bytes);
	if (pr_ckpt_decode_optim(buf, len, NULL, (size_t)n, mv, mv + n, &t,
	    &meta, err) != 0) {
		fz_untouched(mv, bytes, "optimizer state");
		goto out;
	}
	if (pr_ckpt_encode_optim(&meta, (size_t)n, mv, mv + n, t, &out,
	    &outlen, err) != 0)
		fz_fail("a decoded optimizer state does not encode: %s", err);
	if (pr_ckpt_decode_optim(out, outlen, &meta, (size_t)n, again,
	    again + n, &t2, &meta2, err) != 0)
		fz_fail("a re-encoded optimizer state does not decode: %s",
		    err);
	same_meta(&meta, &meta2, "optimizer state");
	if (t != t2 || memcmp(mv, again, bytes) != 0)
		fz_fail("optimizer state differs after encoding it again");
	free(out);
out:
	free(mv);
	free(again);
}

static void
decode_all(const char *buf, size_t len)
{
	pr_ckpt_meta meta;
	char err[PR_ERR_LEN];

	pr_ckpt_peek(buf, len, &meta, err);
	pr_ckpt_decode(buf, len, NULL, NULL, 0, NULL, &meta, err);
	decode_model(buf, len);
	decode_optim(buf, len);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_decode_rehashed(data, size, decode_all);
	return 0;
}
