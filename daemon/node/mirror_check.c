/* The check of a checkpoint and optimizer state fetched from a peer
 * for a mirror or a bootstrap (mirror.h): pure functions, run on
 * libuv's pool by mirror.c and bootstrap.c. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "daemon/node/mirror.h"
#include "kernels/error.h"
#include "kernels/model.h"

int
mr_claim_in_run(const pr_spec *s, json_t *step, json_t *round,
    int64_t *step_out, int64_t *round_out)
{
	json_int_t st, rd;

	if (!json_is_integer(step) || !json_is_integer(round))
		return 0;
	st = json_integer_value(step);
	rd = json_integer_value(round);
	if (st < 0 || st > s->steps || rd < 0 || rd > s->steps)
		return 0;
	*step_out = st;
	*round_out = rd;
	return 1;
}

int
mr_sha_ok(const char *s)
{
	int i;

	if (s == NULL)
		return 0;
	for (i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' &&
		    s[i] <= 'f')))
			return 0;
	return s[64] == '\0';
}

void
mr_etag(const char *header, char out[65])
{
	size_t n = header != NULL ? strlen(header) : 0;

	out[0] = '\0';
	if (n == 66 && header[0] == '"' && header[65] == '"') {
		header++;
		n -= 2;
	}
	if (n == 64) {
		memcpy(out, header, 64);
		out[64] = '\0';
		if (!mr_sha_ok(out))
			out[0] = '\0';
	}
}

int
mr_check_pair(const pr_spec *s, const char *run_id, int block,
    const mr_claim *c, const mr_pair *p, mr_verdict *v, char *err)
{
	kn_model_shape shape = pr_spec_block_shape(s, block - 1);
	kn_tensor tab[KN_MODEL_TENSORS];
	pr_ckpt_meta expect = { 0 }, gopt;
	const char *named = c->etag[0] != '\0' ? c->etag : c->sha;
	char why[PR_ERR_LEN];
	int count, topt, rc;

	memset(v, 0, sizeof(*v));
	if ((rc = pr_ckpt_sha256_hex(p->ckpt, p->ckpt_len, v->sha, err)) != 0)
		return rc;
	if (strcmp(v->sha, named) != 0) {
		v->hash_bad = 1;
		return kn_error(err, KN_EINVAL, "its %zu bytes hash to %.16s..., "
		    "not to the %.16s... it named", p->ckpt_len, v->sha, named);
	}
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
	expect.block = block;
	snprintf(expect.kind, sizeof(expect.kind), "block");
	count = kn_model_table(&shape, tab, KN_MODEL_TENSORS);
	if (count < 0)
		return kn_error(err, KN_EINVAL, "no tensor table for block %d",
		    block);
	if ((rc = pr_ckpt_decode(p->ckpt, p->ckpt_len, &expect, tab, count,
	    NULL, &v->got, why)) != 0)
		return kn_error(err, rc, "the checkpoint does not decode: %.200s",
		    why);
	if (v->got.step < c->step || (v->got.step == c->step &&
	    v->got.round < c->round))
		return kn_error(err, KN_EINVAL, "it serves step %" PRId64
		    " round %" PRId64 ", older than the step %" PRId64 " round %"
		    PRId64 " it named", v->got.step, v->got.round, c->step,
		    c->round);
	if (strcmp(v->sha, c->sha) != 0 && v->got.step == c->step &&
	    v->got.round == c->round) {
		v->hash_bad = 1;
		return kn_error(err, KN_EINVAL, "it serves step %" PRId64
		    " round %" PRId64 " as %.16s..., having named %.16s... for "
		    "it", c->step, c->round, v->sha, c->sha);
	}
	if (p->optim == NULL)
		return KN_OK;
	if (pr_ckpt_decode_optim(p->optim, p->optim_len, &expect,
	    kn_model_params_for(&shape), NULL, NULL, &topt, &gopt, why) != 0)
		snprintf(v->optim_why, sizeof(v->optim_why), "%.150s", why);
	else if (gopt.step != v->got.step || gopt.round != v->got.round)
		snprintf(v->optim_why, sizeof(v->optim_why), "of step %" PRId64
		    " round %" PRId64 ", not the checkpoint's", gopt.step,
		    gopt.round);
	else if (pr_ckpt_sha256_hex(p->optim, p->optim_len, v->optim_sha,
	    why) == 0)
		v->optim_ok = 1;
	return KN_OK;
}
