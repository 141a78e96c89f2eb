/* The held-out message of a SOMA expert: encoding it on the daemon and
 * decoding it strictly on the client (format in proto/PROTOCOL.md). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "kernels/error.h"
#include "proto/heldout.h"
#include "proto/msgpack_strict.h"

#define HELDOUT_MAGIC "ShardMeter SOMA held-out"
/* One flat map of 11 fields: 23 objects; the slack names another
 * format that arrives instead. */
#define HELDOUT_MAX_OBJECTS 4096

enum {
	F_MAGIC, F_VERSION, F_RUN_ID, F_EXPERT, F_EXPERTS, F_TOP_K, F_STEP,
	F_WINDOW, F_WINDOWS, F_INDEX, F_LOGP, F_NFIELDS
};

static const char *const heldout_keys[F_NFIELDS] = {
	"magic", "version", "run_id", "expert", "experts", "top_k", "step",
	"window", "windows", "index", "logp"
};

static const struct pr_mp_format heldout_format = {
	HELDOUT_MAGIC, "held-out message", "not a ShardMeter held-out message",
	"the message is damaged", PR_HELDOUT_VERSION, PR_MP_MAX_DEPTH,
	HELDOUT_MAX_OBJECTS
};
static const struct pr_mp_format ckpt_name = {
	"ShardMeter checkpoint", "checkpoint", NULL, NULL, 0, 0, 0
};
static const struct pr_mp_format *const heldout_others[] = {
	&ckpt_name, NULL
};

static int
check_meta(const pr_heldout_meta *m, char *err)
{
	if (!pr_mp_is_run_id(m->run_id, strnlen(m->run_id, PR_RUN_ID_LEN)))
		return kn_error(err, KN_EINVAL, "held-out: run id must be 64 "
		    "lowercase hex digits");
	if (m->experts < 1 || m->experts > PR_MAX_BLOCKS || m->expert < 0 ||
	    m->expert >= m->experts || m->top_k < 1 || m->top_k > m->experts)
		return kn_error(err, KN_EINVAL, "held-out: expert %d, top-%d "
		    "of %d experts is not a routing", m->expert, m->top_k,
		    m->experts);
	if (m->T < 1 || m->T > PR_HELDOUT_MAX_T || m->windows < 0 ||
	    m->windows > PR_HELDOUT_MAX_WINDOWS || m->count < 0 ||
	    m->count > m->windows || m->step < 0)
		return kn_error(err, KN_EINVAL, "held-out: %ld of %ld windows "
		    "of %d bytes at step %lld are out of range", m->count,
		    m->windows, m->T, (long long)m->step);
	return 0;
}

int
pr_heldout_encode(const pr_heldout_meta *m, const uint32_t *index,
    const float *logp, char **buf, size_t *len, char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t nlp = (size_t)m->count * (size_t)m->T;
	long i;
	int rc;

	*buf = NULL;
	*len = 0;
	if ((rc = check_meta(m, err)) != 0)
		return rc;
	for (i = 0; i < m->count; i++)
		if (index[i] >= (uint32_t)m->windows ||
		    (i > 0 && index[i] <= index[i - 1]))
			return kn_error(err, KN_EINVAL, "held-out: window "
			    "numbers must ascend below %ld", m->windows);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	rc = msgpack_pack_map(&pk, F_NFIELDS);
	rc |= pr_mp_pack_key(&pk, "magic");
	rc |= pr_mp_pack_key(&pk, HELDOUT_MAGIC);
	rc |= pr_mp_pack_key(&pk, "version");
	rc |= msgpack_pack_uint64(&pk, PR_HELDOUT_VERSION);
	rc |= pr_mp_pack_key(&pk, "run_id");
	rc |= pr_mp_pack_key(&pk, m->run_id);
	rc |= pr_mp_pack_key(&pk, "expert");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->expert);
	rc |= pr_mp_pack_key(&pk, "experts");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->experts);
	rc |= pr_mp_pack_key(&pk, "top_k");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->top_k);
	rc |= pr_mp_pack_key(&pk, "step");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->step);
	rc |= pr_mp_pack_key(&pk, "window");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->T);
	rc |= pr_mp_pack_key(&pk, "windows");
	rc |= msgpack_pack_uint64(&pk, (uint64_t)m->windows);
	rc |= pr_mp_pack_key(&pk, "index");
	rc |= msgpack_pack_bin(&pk, (size_t)m->count * 4);
	for (i = 0; rc == 0 && i < m->count; i++) {
		unsigned char le[4] = { (unsigned char)index[i],
		    (unsigned char)(index[i] >> 8),
		    (unsigned char)(index[i] >> 16),
		    (unsigned char)(index[i] >> 24) };

		rc = msgpack_pack_bin_body(&pk, le, 4);
	}
	rc |= pr_mp_pack_key(&pk, "logp");
	rc |= msgpack_pack_bin(&pk, nlp * 4);
	if (rc == 0)
		rc = pr_mp_pack_le_floats(&pk, logp, nlp);
	if (rc != 0) {
		msgpack_sbuffer_destroy(&sb);
		return kn_error(err, KN_ENOMEM, "out of memory while encoding "
		    "a held-out message");
	}
	*buf = sb.data;
	*len = sb.size;
	return 0;
}

static int
get_int(const msgpack_object *o, uint64_t max, const char *field,
    int64_t *v, char *err)
{
	uint64_t u;
	int rc = pr_mp_get_uint(o, max, &u, "held-out message", field, err);

	*v = (int64_t)u;
	return rc;
}

/* The scalar fields into m, each checked for type and range. */
static int
parse_meta(const msgpack_object **f, pr_heldout_meta *m, char *err)
{
	const msgpack_object *o = f[F_RUN_ID];
	int64_t v[6];
	int rc;

	memset(m, 0, sizeof(*m));
	if (o->type != MSGPACK_OBJECT_STR ||
	    !pr_mp_is_run_id(o->via.str.ptr, o->via.str.size))
		return kn_error(err, KN_EINVAL, "held-out message field "
		    "'run_id' must be 64 lowercase hex digits");
	memcpy(m->run_id, o->via.str.ptr, o->via.str.size);
	if ((rc = get_int(f[F_EXPERT], PR_MAX_BLOCKS, "expert", &v[0],
	    err)) != 0 || (rc = get_int(f[F_EXPERTS], PR_MAX_BLOCKS,
	    "experts", &v[1], err)) != 0 || (rc = get_int(f[F_TOP_K],
	    PR_MAX_BLOCKS, "top_k", &v[2], err)) != 0 || (rc = get_int(
	    f[F_STEP], INT64_MAX, "step", &v[3], err)) != 0 || (rc = get_int(
	    f[F_WINDOW], PR_HELDOUT_MAX_T, "window", &v[4], err)) != 0 ||
	    (rc = get_int(f[F_WINDOWS], PR_HELDOUT_MAX_WINDOWS, "windows",
	    &v[5], err)) != 0)
		return rc;
	m->expert = (int)v[0];
	m->experts = (int)v[1];
	m->top_k = (int)v[2];
	m->step = v[3];
	m->T = (int)v[4];
	m->windows = (long)v[5];
	if (f[F_INDEX]->type != MSGPACK_OBJECT_BIN ||
	    f[F_INDEX]->via.bin.size % 4 != 0)
		return kn_error(err, KN_EINVAL, "held-out message field "
		    "'index' must be a bin of 4-byte window numbers");
	m->count = (long)(f[F_INDEX]->via.bin.size / 4);
	return check_meta(m, err);
}

int
pr_heldout_decode(const char *buf, size_t len, pr_heldout_meta *out,
    uint32_t **index, float **logp, char *err)
{
	const msgpack_object *f[F_NFIELDS], *root;
	const unsigned char *ib, *lb;
	msgpack_unpacked up;
	pr_heldout_meta m;
	uint32_t *ix = NULL;
	float *lp = NULL;
	size_t nlp, i;
	int rc;

	*index = NULL;
	*logp = NULL;
	msgpack_unpacked_init(&up);
	if ((rc = pr_mp_open(buf, len, &heldout_format, heldout_others, &up,
	    &root, err)) != 0 || (rc = pr_mp_collect_fields(root,
	    heldout_keys, F_NFIELDS, f, "held-out message", err)) != 0 ||
	    (rc = parse_meta(f, &m, err)) != 0)
		goto out;
	nlp = (size_t)m.count * (size_t)m.T;
	if (f[F_LOGP]->type != MSGPACK_OBJECT_BIN ||
	    f[F_LOGP]->via.bin.size != nlp * 4) {
		rc = kn_error(err, KN_EINVAL, "held-out message field 'logp' "
		    "must be a bin of %ld windows x %d float32", m.count, m.T);
		goto out;
	}
	ix = malloc((size_t)(m.count ? m.count : 1) * sizeof(*ix));
	lp = malloc((nlp ? nlp : 1) * sizeof(*lp));
	if (ix == NULL || lp == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	ib = (const unsigned char *)f[F_INDEX]->via.bin.ptr;
	lb = (const unsigned char *)f[F_LOGP]->via.bin.ptr;
	for (i = 0; i < (size_t)m.count; i++) {
		ix[i] = (uint32_t)ib[4 * i] | (uint32_t)ib[4 * i + 1] << 8 |
		    (uint32_t)ib[4 * i + 2] << 16 | (uint32_t)ib[4 * i + 3] << 24;
		if (ix[i] >= (uint32_t)m.windows || (i > 0 &&
		    ix[i] <= ix[i - 1])) {
			rc = kn_error(err, KN_EINVAL, "held-out message: window "
			    "numbers must ascend below %ld (entry %zu)",
			    m.windows, i);
			goto out;
		}
	}
	pr_mp_load_le_floats(lp, lb, nlp);
	for (i = 0; i < nlp; i++)
		if (!isfinite(lp[i]) || lp[i] > 0) {
			rc = kn_error(err, KN_EINVAL, "held-out message: "
			    "log-probability %zu is %g, not finite and <= 0",
			    i, lp[i]);
			goto out;
		}
	*out = m;
	*index = ix;
	*logp = lp;
	ix = NULL;
	lp = NULL;
	rc = 0;
out:
	free(ix);
	free(lp);
	msgpack_unpacked_destroy(&up);
	return rc;
}
