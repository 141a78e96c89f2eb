/* Pipeline frames: one flat msgpack map per frame, with the keys of its
 * type only, decoded strictly (format in proto/PROTOCOL.md). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "kernels/error.h"
#include "proto/msgpack_strict.h"
#include "proto/pipeline.h"

#define PL_MAGIC "ShardMeter pipeline"
#define PL_MAX_OBJECTS 64
#define PL_MAX_WINDOW 65536
#define PL_MAX_EXPERT 4095
#define PL_MAX_BLOCK 4096

static const struct pr_mp_format frame_format = {
	PL_MAGIC, "pipeline frame", "not a ShardMeter pipeline frame",
	"the frame is damaged", PR_PIPELINE_VERSION, 2, PL_MAX_OBJECTS
};

static const char *const type_names[PL_NTYPES] = {
	"gen", "bt", "ar", "tok", "out", "err", "end", "score", "logp",
	"step", "dist", "part", "ping", "pong", "ack", "redo"
};

enum {
	K_MAGIC, K_VERSION, K_TYPE, K_ID, K_MODE, K_LENGTH, K_STEPS, K_TEMP,
	K_SEED, K_FIXED, K_END, K_BLOCK, K_POS, K_COUNT, K_WIDTH, K_BYTE,
	K_DATA, K_MASK, K_COMPUTE, K_HOPS, K_TRAV, K_MESSAGE, K_EXPERT,
	K_STREAM, K_HOST, K_POS_BLOCK, K_PBLOCK, K_LPK, K_LP, K_LPB, K_DECODE,
	K_NKEYS
};

static const char *const key_names[K_NKEYS] = {
	"magic", "version", "type", "id", "mode", "length", "steps",
	"temperature", "seed", "fixed", "end", "block", "pos", "count",
	"width", "byte", "data", "mask", "compute_us", "hops", "traversals",
	"message", "expert", "stream", "host", "pos_block", "pblock", "lpk",
	"lp", "lpb", "decode"
};

/* The keys of each type after magic, version, type and id, in the order
 * they are written; -1 ends a list.  A bt frame of a streamed request
 * has "stream" (true) after them; it is absent otherwise, so that the
 * frames of a request that does not stream are as they always were. */
static const int type_keys[PL_NTYPES][14] = {
	[PL_GEN] = { K_MODE, K_LENGTH, K_STEPS, K_TEMP, K_SEED, K_DATA, -1 },
	[PL_BT] = { K_STEPS, K_TEMP, K_SEED, K_FIXED, K_END, K_BLOCK, K_DATA,
	    K_MASK, K_COMPUTE, K_HOPS, -1 },
	[PL_AR] = { K_TEMP, K_SEED, K_FIXED, K_END, K_POS, K_COUNT, K_WIDTH,
	    K_DATA, K_COMPUTE, K_HOPS, -1 },
	[PL_TOK] = { K_POS, K_BYTE, K_COMPUTE, K_HOPS, -1 },
	[PL_OUT] = { K_DATA, K_COMPUTE, K_HOPS, K_TRAV, -1 },
	[PL_ERR] = { K_MESSAGE, -1 },
	[PL_END] = { -1 },
	[PL_SCORE] = { K_EXPERT, K_COUNT, K_WIDTH, K_DATA, -1 },
	[PL_LOGP] = { K_EXPERT, K_COUNT, K_WIDTH, K_DATA, K_COMPUTE, -1 },
	[PL_STEP] = { K_EXPERT, K_POS, K_DATA, -1 },
	[PL_DIST] = { K_EXPERT, K_POS, K_DATA, K_COMPUTE, -1 },
	[PL_PART] = { K_HOST, K_BLOCK, K_DATA, K_MASK, -1 },
	[PL_PING] = { -1 },
	[PL_PONG] = { -1 },
	[PL_ACK] = { -1 },
	[PL_REDO] = { -1 },
};

const char *
pl_type_name(pl_type t)
{
	return t < PL_NTYPES ? type_names[t] : "?";
}

const char *
pl_mode_name(pl_mode m)
{
	return m == PL_MODE_AR ? "ar" : "blocktrain";
}

int
pl_mode_parse(const char *s, pl_mode *m)
{
	if (strcmp(s, "blocktrain") == 0)
		*m = PL_MODE_BT;
	else if (strcmp(s, "ar") == 0)
		*m = PL_MODE_AR;
	else
		return KN_EINVAL;
	return KN_OK;
}

void
pl_frame_clear(pl_frame *f)
{
	free(f->data);
	free(f->mask);
	free(f->lp);
	free(f->lpb);
	memset(f, 0, sizeof(*f));
}

uint32_t
pl_frame_length(const unsigned char h[PL_HEADER])
{
	return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 |
	    (uint32_t)h[2] << 8 | h[3];
}

static uint64_t
uint_field(const pl_frame *f, int k)
{
	switch (k) {
	case K_MODE: return (uint64_t)f->mode;
	case K_LENGTH: return (uint64_t)f->length;
	case K_STEPS: return (uint64_t)f->steps;
	case K_SEED: return f->seed;
	case K_FIXED: return (uint64_t)f->fixed;
	case K_END: return (uint64_t)f->end;
	case K_BLOCK: return (uint64_t)f->block;
	case K_POS: return (uint64_t)f->pos;
	case K_COUNT: return (uint64_t)f->count;
	case K_WIDTH: return (uint64_t)f->width;
	case K_BYTE: return (uint64_t)f->byte;
	case K_COMPUTE: return f->compute_us;
	case K_HOPS: return (uint64_t)f->hops;
	case K_TRAV: return (uint64_t)f->traversals;
	case K_EXPERT: return (uint64_t)f->expert;
	case K_HOST: return (uint64_t)f->host;
	case K_POS_BLOCK: return (uint64_t)f->pos_block;
	case K_PBLOCK: return (uint64_t)f->pblock;
	case K_LPK: return (uint64_t)(f->lpk - 1);
	case K_DECODE: return (uint64_t)(f->decode - 1);
	default: return 0;
	}
}

/* Whether a frame of type t may carry logprobs: lpk alone (gen, ar),
 * or lpk, lp and lpb. */
static int
lp_keys_of(pl_type t)
{
	switch (t) {
	case PL_GEN: case PL_AR: return 1;
	case PL_BT: case PL_PART: case PL_TOK: case PL_OUT: return 3;
	default: return 0;
	}
}

/* The optional keys a frame has, after "stream" (into opt, their
 * count): gen's pos_block, bt's pos_block and pblock, each only when
 * pos_block is set, then the logprobs keys only when lpk is set, then
 * gen's and bt's decode only when set, so the frames of a run without
 * position blocks, or of a request without logprobs or a decoder, are as
 * they always were. */
static int
optional_keys(const pl_frame *f, int opt[6])
{
	int n = 0, lp = f->lpk > 0 ? lp_keys_of(f->type) : 0;

	if (f->pos_block > 0 && (f->type == PL_GEN || f->type == PL_BT)) {
		opt[n++] = K_POS_BLOCK;
		if (f->type == PL_BT)
			opt[n++] = K_PBLOCK;
	}
	if (lp >= 1)
		opt[n++] = K_LPK;
	if (lp == 3) {
		opt[n++] = K_LP;
		opt[n++] = K_LPB;
	}
	if (f->decode > 0 && (f->type == PL_GEN || f->type == PL_BT))
		opt[n++] = K_DECODE;
	return n;
}

/* n floats, little-endian float32, as one bin. */
static int
pack_floats(msgpack_packer *pk, const float *v, size_t n)
{
	unsigned char *b = malloc(n * 4 + 1);
	size_t i;
	int rc;

	if (b == NULL)
		return -1;
	for (i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &v[i], sizeof(u));
		b[4 * i] = (unsigned char)u;
		b[4 * i + 1] = (unsigned char)(u >> 8);
		b[4 * i + 2] = (unsigned char)(u >> 16);
		b[4 * i + 3] = (unsigned char)(u >> 24);
	}
	rc = msgpack_pack_bin_with_body(pk, b, n * 4);
	free(b);
	return rc;
}

int
pl_frame_encode(const pl_frame *f, char **buf, size_t *len, char *err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const int *keys;
	int n = 0, i, rc = 0, stream, opt[6], nopt;
	size_t body;

	*buf = NULL;
	if (f->type >= PL_NTYPES)
		return kn_error(err, KN_EINVAL, "no such frame type %d",
		    (int)f->type);
	keys = type_keys[f->type];
	while (keys[n] >= 0)
		n++;
	stream = f->type == PL_BT && f->stream;
	nopt = optional_keys(f, opt);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* room for the length, filled in at the end */
	rc |= msgpack_sbuffer_write(&sb, "\0\0\0\0", PL_HEADER);
	rc |= msgpack_pack_map(&pk, (size_t)n + 4 + (size_t)stream +
	    (size_t)nopt);
	rc |= pr_mp_pack_key(&pk, "magic");
	rc |= msgpack_pack_str_with_body(&pk, PL_MAGIC, strlen(PL_MAGIC));
	rc |= pr_mp_pack_key(&pk, "version");
	rc |= msgpack_pack_uint64(&pk, PR_PIPELINE_VERSION);
	rc |= pr_mp_pack_key(&pk, "type");
	rc |= msgpack_pack_str_with_body(&pk, type_names[f->type],
	    strlen(type_names[f->type]));
	rc |= pr_mp_pack_key(&pk, "id");
	rc |= msgpack_pack_uint64(&pk, f->id);
	for (i = 0; i < n; i++) {
		int k = keys[i];

		rc |= pr_mp_pack_key(&pk, key_names[k]);
		if (k == K_TEMP)
			rc |= msgpack_pack_double(&pk, f->temperature);
		else if (k == K_DATA)
			rc |= msgpack_pack_bin_with_body(&pk, f->data,
			    f->data_len);
		else if (k == K_MASK)
			rc |= msgpack_pack_bin_with_body(&pk, f->mask,
			    f->mask_len);
		else if (k == K_MESSAGE)
			rc |= msgpack_pack_str_with_body(&pk, f->message,
			    strlen(f->message));
		else
			rc |= msgpack_pack_uint64(&pk, uint_field(f, k));
	}
	if (stream) {
		rc |= pr_mp_pack_key(&pk, "stream");
		rc |= msgpack_pack_true(&pk);
	}
	for (i = 0; i < nopt; i++) {
		rc |= pr_mp_pack_key(&pk, key_names[opt[i]]);
		if (opt[i] == K_LP)
			rc |= pack_floats(&pk, f->lp, f->lp_len);
		else if (opt[i] == K_LPB)
			rc |= msgpack_pack_bin_with_body(&pk, f->lpb,
			    f->lpb_len);
		else
			rc |= msgpack_pack_uint64(&pk, uint_field(f, opt[i]));
	}
	body = sb.size - PL_HEADER;
	if (rc != 0 || body > PL_FRAME_MAX) {
		msgpack_sbuffer_destroy(&sb);
		return kn_error(err, rc ? KN_ENOMEM : KN_EINVAL, rc ? "out of "
		    "memory" : "frame of %zu bytes is over the limit", body);
	}
	sb.data[0] = (char)(body >> 24);
	sb.data[1] = (char)(body >> 16);
	sb.data[2] = (char)(body >> 8);
	sb.data[3] = (char)body;
	*buf = sb.data;
	*len = sb.size;
	return KN_OK;
}

static int
get_int(const msgpack_object *o, uint64_t max, int *v, const char *field,
    char *err)
{
	uint64_t u;
	int rc = pr_mp_get_uint(o, max, &u, "pipeline frame", field, err);

	if (rc == 0)
		*v = (int)u;
	return rc;
}

static int
get_bin(const msgpack_object *o, unsigned char **out, size_t *len,
    const char *field, char *err)
{
	if (o->type != MSGPACK_OBJECT_BIN)
		return kn_error(err, KN_EINVAL, "pipeline frame field '%s' must "
		    "be bytes (msgpack bin)", field);
	*len = o->via.bin.size;
	if ((*out = malloc(*len ? *len : 1)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	memcpy(*out, o->via.bin.ptr, *len);
	return KN_OK;
}

static int check_logp(const unsigned char *p, size_t n, char *err);

/* lp: little-endian float32 log-probabilities, each finite and at most
 * 0, into host floats. */
static int
get_lp(const msgpack_object *o, pl_frame *f, char *err)
{
	const unsigned char *p;
	size_t n, i;

	if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size % 4 != 0)
		return kn_error(err, KN_EINVAL, "pipeline frame field 'lp' must "
		    "be bytes (msgpack bin) of float32");
	p = (const unsigned char *)o->via.bin.ptr;
	n = o->via.bin.size / 4;
	if (check_logp(p, n, err) != 0)
		return KN_EINVAL;
	if ((f->lp = malloc(n ? n * sizeof(float) : 1)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
		    (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;

		memcpy(&f->lp[i], &u, sizeof(u));
	}
	f->lp_len = n;
	return KN_OK;
}

static int
decode_field(pl_frame *f, int k, const msgpack_object *o, char *err)
{
	const char *name = key_names[k];
	int mode;

	switch (k) {
	case K_MODE:
		if (get_int(o, 1, &mode, name, err) != 0)
			return KN_EINVAL;
		f->mode = (pl_mode)mode;
		return KN_OK;
	case K_LENGTH: return get_int(o, PL_MAX_WINDOW, &f->length, name, err);
	case K_STEPS: return get_int(o, 1 << 20, &f->steps, name, err);
	case K_SEED: return pr_mp_get_uint(o, UINT64_MAX, &f->seed,
	    "pipeline frame", name, err);
	case K_FIXED: return get_int(o, PL_MAX_WINDOW, &f->fixed, name, err);
	case K_END: return get_int(o, PL_MAX_WINDOW, &f->end, name, err);
	case K_BLOCK: return get_int(o, PL_MAX_BLOCK, &f->block, name, err);
	case K_HOST: return get_int(o, PL_MAX_BLOCK, &f->host, name, err);
	case K_POS_BLOCK:
		if (get_int(o, PL_MAX_WINDOW, &f->pos_block, name, err) != 0)
			return KN_EINVAL;
		return f->pos_block >= 1 ? KN_OK : kn_error(err, KN_EINVAL,
		    "pipeline frame field 'pos_block' must be at least 1 "
		    "(absent without position blocks)");
	case K_PBLOCK: return get_int(o, PL_MAX_WINDOW, &f->pblock, name, err);
	case K_DECODE:
		if (get_int(o, PL_DECODE_MAX, &f->decode, name, err) != 0)
			return KN_EINVAL;
		f->decode++;
		return KN_OK;
	case K_LPK:
		if (get_int(o, PL_LOGPROBS_MAX, &f->lpk, name, err) != 0)
			return KN_EINVAL;
		f->lpk++;
		return KN_OK;
	case K_LP: return get_lp(o, f, err);
	case K_LPB: return get_bin(o, &f->lpb, &f->lpb_len, name, err);
	case K_STREAM:
		/* only true: a frame has one encoding */
		if (o->type != MSGPACK_OBJECT_BOOLEAN || !o->via.boolean)
			return kn_error(err, KN_EINVAL, "pipeline frame field "
			    "'stream' must be true (absent when the request does "
			    "not stream)");
		f->stream = 1;
		return KN_OK;
	case K_POS: return get_int(o, PL_MAX_WINDOW, &f->pos, name, err);
	case K_COUNT: return get_int(o, PL_MAX_WINDOW, &f->count, name, err);
	case K_WIDTH: return get_int(o, 1 << 16, &f->width, name, err);
	case K_BYTE: return get_int(o, 255, &f->byte, name, err);
	case K_COMPUTE: return pr_mp_get_uint(o, UINT64_MAX, &f->compute_us,
	    "pipeline frame", name, err);
	case K_HOPS: return get_int(o, 1 << 30, &f->hops, name, err);
	case K_TRAV: return get_int(o, 1 << 30, &f->traversals, name, err);
	case K_EXPERT: return get_int(o, PL_MAX_EXPERT, &f->expert, name, err);
	case K_TEMP:
		if (o->type != MSGPACK_OBJECT_FLOAT64 &&
		    o->type != MSGPACK_OBJECT_FLOAT32)
			return kn_error(err, KN_EINVAL, "pipeline frame field "
			    "'temperature' must be a float");
		f->temperature = o->via.f64;
		if (!(f->temperature >= 0.0 && f->temperature <= 100.0))
			return kn_error(err, KN_EINVAL, "temperature must be "
			    "from 0 to 100");
		return KN_OK;
	case K_DATA: return get_bin(o, &f->data, &f->data_len, name, err);
	case K_MASK: return get_bin(o, &f->mask, &f->mask_len, name, err);
	case K_MESSAGE:
		if (o->type != MSGPACK_OBJECT_STR)
			return kn_error(err, KN_EINVAL, "pipeline frame field "
			    "'message' must be a string");
		pr_mp_printable(f->message, sizeof(f->message), o->via.str.ptr,
		    o->via.str.size);
		return KN_OK;
	}
	return kn_error(err, KN_EINVAL, "pipeline frame: no field %d", k);
}

/* n little-endian float32 log-probabilities: finite and at most 0 (a
 * rounding's worth above is let through). */
static int
check_logp(const unsigned char *p, size_t n, char *err)
{
	size_t i;

	if (pr_mp_first_nonfinite_le(p, n) >= 0)
		return kn_error(err, KN_EINVAL, "log-probabilities are not "
		    "finite");
	for (i = 0; i < n; i++) {
		uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
		    (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
		float v;

		memcpy(&v, &u, sizeof(v));
		if (v > 1e-3f)
			return kn_error(err, KN_EINVAL, "a log-probability is "
			    "above 0");
	}
	return KN_OK;
}

/* A window and its mask flags, as bt and part frames carry them. */
static int
check_window(const pl_frame *f, char *err)
{
	size_t i;

	if (f->data_len != f->mask_len || f->data_len == 0 || f->block < 1)
		return kn_error(err, KN_EINVAL, "a %s frame needs as many mask "
		    "flags as symbols and block >= 1", pl_type_name(f->type));
	for (i = 0; i < f->mask_len; i++)
		if (f->mask[i] > 1)
			return kn_error(err, KN_EINVAL, "mask flags are 0 or 1");
	return KN_OK;
}

/* A bt frame of position blocks: L divides the window and is below it,
 * pblock is one of the request's position blocks (those from the one
 * the prompt ends in to the one the output ends in), and every position
 * before it is decided. */
static int
check_pos_block(const pl_frame *f, char *err)
{
	size_t n = f->data_len, L = (size_t)f->pos_block, i;
	size_t from = (size_t)f->pblock * L;

	if (L >= n || n % L != 0)
		return kn_error(err, KN_EINVAL, "position block %d must divide "
		    "the window of %zu and be below it", f->pos_block, n);
	if (f->pblock < f->fixed / f->pos_block ||
	    from >= (size_t)f->end)
		return kn_error(err, KN_EINVAL, "position block %d is not one "
		    "of the request's (positions %d to %d)", f->pblock, f->fixed,
		    f->end - 1);
	for (i = 0; i < from; i++)
		if (f->mask[i])
			return kn_error(err, KN_EINVAL, "position %zu before "
			    "position block %d is masked", i, f->pblock);
	return KN_OK;
}

/* A frame's logprobs: lpk figures and lpk - 1 bytes per position of its
 * data (tok: of its byte).  lpk is at most PL_LOGPROBS_MAX + 1 and the
 * positions are bounded by the frame's length, so the products fit. */
static int
check_lp(const pl_frame *f, char *err)
{
	size_t pos = f->type == PL_TOK ? 1 : f->data_len;

	if (f->lpk == 0 || lp_keys_of(f->type) != 3)
		return KN_OK;
	if (f->lp_len != pos * (size_t)f->lpk ||
	    f->lpb_len != pos * (size_t)(f->lpk - 1))
		return kn_error(err, KN_EINVAL, "a %s frame's logprobs need %d "
		    "figures and %d bytes per position", pl_type_name(f->type),
		    f->lpk, f->lpk - 1);
	return KN_OK;
}

/* What a well-formed frame of each type must also satisfy. */
static int
check_frame(const pl_frame *f, char *err)
{
	if (check_lp(f, err) != 0)
		return KN_EINVAL;
	switch (f->type) {
	case PL_GEN:
		/* length 0: the entry's default (PL_LENGTH_DEFAULT) */
		if (f->length < 0 || f->steps < 1)
			return kn_error(err, KN_EINVAL, "a request needs a length "
			    "of at least 0 and steps of at least 1");
		break;
	case PL_BT:
		if (check_window(f, err) != 0)
			return KN_EINVAL;
		if (f->fixed > f->end || (size_t)f->end > f->data_len ||
		    f->steps < 1 || f->steps > PL_STEPS_MAX)
			return kn_error(err, KN_EINVAL, "a BlockTrain frame needs "
			    "fixed <= end <= window and steps 1 to %d",
			    PL_STEPS_MAX);
		if (f->pos_block > 0)
			return check_pos_block(f, err);
		break;
	case PL_PART:
		if (check_window(f, err) != 0)
			return KN_EINVAL;
		if (f->host < 1)
			return kn_error(err, KN_EINVAL, "a part frame needs a "
			    "host line from 1");
		break;
	case PL_AR:
		if (f->count < 1 || f->width < 1 || f->data_len !=
		    (size_t)f->count * f->width * 4 || f->pos + f->count >
		    f->end || f->fixed < 1 || f->fixed > f->end)
			return kn_error(err, KN_EINVAL, "an autoregressive frame "
			    "needs count x width x 4 bytes of hidden states and "
			    "pos + count <= end");
		if (pr_mp_first_nonfinite_le(f->data, f->data_len / 4) >= 0)
			return kn_error(err, KN_EINVAL, "hidden states are not "
			    "finite");
		break;
	case PL_SCORE:
	case PL_LOGP:
		if (f->count < 1 || f->width < 1 || f->data_len !=
		    (size_t)f->count * (f->type == PL_SCORE ? (size_t)f->width +
		    1 : (size_t)f->width * 4))
			return kn_error(err, KN_EINVAL, "a %s frame needs count "
			    "windows of %s", pl_type_name(f->type), f->type ==
			    PL_SCORE ? "width + 1 bytes" : "width float32 "
			    "log-probabilities");
		if (f->type == PL_LOGP && check_logp(f->data, f->data_len / 4,
		    err) != 0)
			return KN_EINVAL;
		break;
	case PL_STEP:
		if (f->data_len < 1 || f->data_len > PL_MAX_WINDOW ||
		    (size_t)f->pos + f->data_len > PL_MAX_WINDOW)
			return kn_error(err, KN_EINVAL, "a step frame needs 1 to "
			    "%d bytes and pos + bytes <= %d", PL_MAX_WINDOW,
			    PL_MAX_WINDOW);
		break;
	case PL_DIST:
		if (f->data_len != 256 * 4 || f->pos < 1)
			return kn_error(err, KN_EINVAL, "a dist frame needs 256 "
			    "float32 log-probabilities after pos >= 1 bytes");
		if (check_logp(f->data, 256, err) != 0)
			return KN_EINVAL;
		break;
	default:
		break;
	}
	return KN_OK;
}

int
pl_frame_decode(const char *body, size_t len, pl_frame *f, char *err)
{
	msgpack_unpacked up;
	const msgpack_object *root, *vals[24], *t;
	const char *keys[24];
	int rc, n = 0, i, k, stream, opt[6], nopt;

	memset(f, 0, sizeof(*f));
	msgpack_unpacked_init(&up);
	rc = pr_mp_open(body, len, &frame_format, NULL, &up, &root, err);
	if (rc != 0)
		goto out;
	t = pr_mp_map_get(root, "type");
	for (k = 0; k < PL_NTYPES && t != NULL; k++)
		if (pr_mp_str_is(t, type_names[k]))
			break;
	if (t == NULL || k == PL_NTYPES) {
		rc = kn_error(err, KN_EINVAL, "pipeline frame has no known "
		    "'type'");
		goto out;
	}
	f->type = (pl_type)k;
	keys[n++] = "magic";
	keys[n++] = "version";
	keys[n++] = "type";
	keys[n++] = "id";
	for (i = 0; type_keys[f->type][i] >= 0; i++)
		keys[n++] = key_names[type_keys[f->type][i]];
	stream = f->type == PL_BT && pr_mp_map_get(root, "stream") != NULL;
	if (stream)
		keys[n++] = key_names[K_STREAM];
	/* pos_block says whether the position-block keys are there */
	f->pos_block = (f->type == PL_GEN || f->type == PL_BT) &&
	    pr_mp_map_get(root, "pos_block") != NULL;
	/* lpk says whether the logprobs keys are there */
	f->lpk = lp_keys_of(f->type) && pr_mp_map_get(root, "lpk") != NULL;
	f->decode = pr_mp_map_get(root, "decode") != NULL;
	nopt = optional_keys(f, opt);
	f->pos_block = 0;
	f->lpk = 0;
	f->decode = 0;
	for (i = 0; i < nopt; i++)
		keys[n++] = key_names[opt[i]];
	if ((rc = pr_mp_collect_fields(root, keys, n, vals, "pipeline frame",
	    err)) != 0)
		goto out;
	if ((rc = pr_mp_get_uint(vals[3], UINT64_MAX, &f->id,
	    "pipeline frame", "id", err)) != 0)
		goto out;
	for (i = 0; type_keys[f->type][i] >= 0 && rc == 0; i++)
		rc = decode_field(f, type_keys[f->type][i], vals[4 + i], err);
	if (rc == 0 && stream)
		rc = decode_field(f, K_STREAM, vals[n - 1 - nopt], err);
	for (i = 0; i < nopt && rc == 0; i++)
		rc = decode_field(f, opt[i], vals[n - nopt + i], err);
	if (rc == 0)
		rc = check_frame(f, err);
out:
	msgpack_unpacked_destroy(&up);
	if (rc != 0)
		pl_frame_clear(f);
	return rc;
}
