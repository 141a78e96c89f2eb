/* Strict msgpack reading shared by proto/'s formats: a pre-scan that
 * bounds a buffer before msgpack-c allocates for it, the checks of magic,
 * version and trailing bytes every format starts with, field helpers, and
 * little-endian payload packing.  Called by checkpoint.c and update.c. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <openssl/evp.h>

#include "kernels/error.h"
#include "proto/msgpack_strict.h"
#include "proto/spec.h"

int
pr_mp_str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	    memcmp(o->via.str.ptr, s, n) == 0;
}

void
pr_mp_printable(char *dst, size_t dlen, const char *src, size_t slen)
{
	size_t i, n = slen < dlen - 1 ? slen : dlen - 1;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	dst[n] = '\0';
}

int
pr_mp_is_run_id(const char *s, size_t n)
{
	size_t i;

	if (n != PR_RUN_ID_LEN - 1)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

int
pr_mp_little_endian(void)
{
	const uint32_t one = 1;

	return *(const unsigned char *)&one == 1;
}

float
pr_mp_load_le_float(const unsigned char *p)
{
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
	    (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

void
pr_mp_load_le_floats(float *dst, const unsigned char *src, size_t n)
{
	size_t i;

	if (pr_mp_little_endian()) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	for (i = 0; i < n; i++)
		dst[i] = pr_mp_load_le_float(src + 4 * i);
}

long
pr_mp_first_nonfinite_le(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isfinite(pr_mp_load_le_float(p + 4 * i)))
			return (long)i;
	return -1;
}

int
pr_mp_pack_le_floats(msgpack_packer *pk, const float *src, size_t n)
{
	unsigned char chunk[4096];
	size_t i, done;
	int rc = 0;

	if (pr_mp_little_endian())
		return msgpack_pack_bin_body(pk, src, n * sizeof(float));
	for (done = 0; done < n && rc == 0; ) {
		size_t k = n - done < sizeof(chunk) / 4 ?
		    n - done : sizeof(chunk) / 4;

		for (i = 0; i < k; i++) {
			uint32_t u;

			memcpy(&u, &src[done + i], sizeof(u));
			chunk[4 * i] = (unsigned char)u;
			chunk[4 * i + 1] = (unsigned char)(u >> 8);
			chunk[4 * i + 2] = (unsigned char)(u >> 16);
			chunk[4 * i + 3] = (unsigned char)(u >> 24);
		}
		rc = msgpack_pack_bin_body(pk, chunk, 4 * k);
		done += k;
	}
	return rc;
}

int
pr_mp_sha256(const void *p, size_t n, unsigned char md[PR_SHA256_LEN])
{
	unsigned int mdlen = 0;

	if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != PR_SHA256_LEN)
		return -1;
	return 0;
}

int
pr_mp_pack_key(msgpack_packer *pk, const char *key)
{
	return msgpack_pack_str_with_body(pk, key, strlen(key));
}

enum { SCAN_OK, SCAN_TRUNCATED, SCAN_MALFORMED, SCAN_TOO_BIG };

/* What a msgpack type byte says follows it: skip bytes of data, or a
 * big-endian length of count_bytes that counts either more data bytes
 * (container 0) or items of 1 (array) or 2 (map pair) objects each;
 * fix maps and arrays give their children directly. */
struct mp_shape {
	uint64_t skip, children;
	int count_bytes, container;
};

/* Flat dispatch over the type byte; -1 for the one unused byte, 0xc1. */
static int
type_shape(unsigned char b, struct mp_shape *sh)
{
	memset(sh, 0, sizeof(*sh));
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		;       /* fixint, nil, bool: the byte is the object */
	else if (b <= 0x8f)
		sh->children = 2 * (uint64_t)(b & 0x0f);
	else if (b <= 0x9f)
		sh->children = b & 0x0f;
	else if (b <= 0xbf)
		sh->skip = b & 0x1f;
	else {
		switch (b) {
		case 0xc4: case 0xd9: sh->count_bytes = 1; break;
		case 0xc5: case 0xda: sh->count_bytes = 2; break;
		case 0xc6: case 0xdb: sh->count_bytes = 4; break;
		/* ext: length, then a type byte, then the data */
		case 0xc7: sh->count_bytes = 1; sh->skip = 1; break;
		case 0xc8: sh->count_bytes = 2; sh->skip = 1; break;
		case 0xc9: sh->count_bytes = 4; sh->skip = 1; break;
		case 0xca: sh->skip = 4; break;
		case 0xcb: sh->skip = 8; break;
		case 0xcc: case 0xd0: sh->skip = 1; break;
		case 0xcd: case 0xd1: sh->skip = 2; break;
		case 0xce: case 0xd2: sh->skip = 4; break;
		case 0xcf: case 0xd3: sh->skip = 8; break;
		case 0xd4: sh->skip = 2; break;
		case 0xd5: sh->skip = 3; break;
		case 0xd6: sh->skip = 5; break;
		case 0xd7: sh->skip = 9; break;
		case 0xd8: sh->skip = 17; break;
		case 0xdc: sh->count_bytes = 2; sh->container = 1; break;
		case 0xdd: sh->count_bytes = 4; sh->container = 1; break;
		case 0xde: sh->count_bytes = 2; sh->container = 2; break;
		case 0xdf: sh->count_bytes = 4; sh->container = 2; break;
		default:
			return -1;
		}
	}
	return 0;
}

/* Steps *pos over one object's own bytes (type byte, length, data) and
 * leaves the number of its child objects, read next, in *children. */
static int
scan_one(const unsigned char *p, size_t len, size_t *pos,
    uint64_t *children)
{
	struct mp_shape sh;
	uint64_t count = 0;
	int i;

	if (type_shape(p[(*pos)++], &sh) != 0)
		return SCAN_MALFORMED;  /* 0xc1 */
	if ((size_t)sh.count_bytes > len - *pos)
		return SCAN_TRUNCATED;
	for (i = 0; i < sh.count_bytes; i++)
		count = count << 8 | p[(*pos)++];
	if (sh.container)
		sh.children = count * (uint64_t)sh.container;
	else
		sh.skip += count;
	if (sh.skip > len - *pos)
		return SCAN_TRUNCATED;
	*pos += (size_t)sh.skip;
	*children = sh.children;
	return SCAN_OK;
}

/* Walks one msgpack object without building it.  msgpack-c allocates a
 * container's elements as soon as it reads the count, so a five-byte
 * array header could ask for gigabytes: this bounds the counts by the
 * bytes left and the total by what the format can hold before msgpack-c
 * sees the buffer.  *end receives the object's length. */
static int
scan_msgpack(const unsigned char *p, size_t len, int max_depth,
    size_t max_objects, size_t *end)
{
	uint64_t left[PR_MP_MAX_DEPTH]; /* items still to read per level */
	uint64_t pending = 1;           /* sum of left[] */
	size_t pos = 0, objects = 0;
	int depth = 1, rc;

	if (max_depth > PR_MP_MAX_DEPTH)
		max_depth = PR_MP_MAX_DEPTH;
	left[0] = 1;
	while (pending > 0) {
		uint64_t children = 0;

		while (left[depth - 1] == 0)
			depth--;
		left[depth - 1]--;
		pending--;
		if (pos >= len)
			return SCAN_TRUNCATED;
		if (++objects > max_objects)
			return SCAN_TOO_BIG;
		if ((rc = scan_one(p, len, &pos, &children)) != SCAN_OK)
			return rc;
		if (children > 0) {
			if (depth == max_depth)
				return SCAN_TOO_BIG;
			left[depth++] = children;
			pending += children;
			/* every pending object takes at least one byte */
			if (pending > len - pos)
				return SCAN_TRUNCATED;
		}
	}
	*end = pos;
	return SCAN_OK;
}

const msgpack_object *
pr_mp_map_get(const msgpack_object *map, const char *key)
{
	uint32_t i;

	for (i = 0; i < map->via.map.size; i++)
		if (pr_mp_str_is(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

int
pr_mp_collect_fields(const msgpack_object *map, const char *const *keys,
    int nkeys, const msgpack_object **out, const char *ctx, char *err)
{
	char name[40];
	uint32_t i;
	int k;

	for (k = 0; k < nkeys; k++)
		out[k] = NULL;
	for (i = 0; i < map->via.map.size; i++) {
		const msgpack_object *key = &map->via.map.ptr[i].key;

		if (key->type != MSGPACK_OBJECT_STR)
			return kn_error(err, KN_EINVAL, "%s has a field name "
			    "that is not a string", ctx);
		for (k = 0; k < nkeys && !pr_mp_str_is(key, keys[k]); k++)
			;
		if (k == nkeys) {
			pr_mp_printable(name, sizeof(name), key->via.str.ptr,
			    key->via.str.size);
			return kn_error(err, KN_EINVAL, "%s has an unknown "
			    "field '%s'", ctx, name);
		}
		if (out[k] != NULL)
			return kn_error(err, KN_EINVAL, "%s has field '%s' "
			    "twice", ctx, keys[k]);
		out[k] = &map->via.map.ptr[i].val;
	}
	for (k = 0; k < nkeys; k++)
		if (out[k] == NULL)
			return kn_error(err, KN_EINVAL, "%s lacks field '%s'",
			    ctx, keys[k]);
	return 0;
}

int
pr_mp_get_uint(const msgpack_object *o, uint64_t max, uint64_t *v,
    const char *what, const char *field, char *err)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
		return kn_error(err, KN_EINVAL, "%s field '%s' must be an "
		    "integer in [0, %llu]", what, field,
		    (unsigned long long)max);
	*v = o->via.u64;
	return 0;
}

/* In the order that gives the most useful message: is it msgpack, is it
 * ours, which version, is it whole. */
int
pr_mp_open(const char *buf, size_t len, const struct pr_mp_format *f,
    const struct pr_mp_format *const *others, msgpack_unpacked *up,
    const msgpack_object **root, char *err)
{
	const msgpack_object *o;
	unsigned char first;
	size_t end = 0, off = 0;

	*root = NULL;
	if (len == 0)
		return kn_error(err, KN_EINVAL, "%s is truncated (empty)",
		    f->what);
	first = (unsigned char)buf[0];
	if (!((first >= 0x80 && first <= 0x8f) || first == 0xde ||
	    first == 0xdf))
		return kn_error(err, KN_EINVAL, "%s (it does not start with "
		    "a msgpack map)", f->notme);
	switch (scan_msgpack((const unsigned char *)buf, len, f->max_depth,
	    f->max_objects, &end)) {
	case SCAN_TRUNCATED:
		return kn_error(err, KN_EINVAL, "%s is truncated (%zu bytes "
		    "end inside its msgpack object)", f->what, len);
	case SCAN_MALFORMED:
		return kn_error(err, KN_EINVAL, "%s (malformed msgpack)",
		    f->notme);
	case SCAN_TOO_BIG:
		return kn_error(err, KN_EINVAL, "%s (more than %zu msgpack "
		    "objects or %d levels)", f->notme, f->max_objects,
		    f->max_depth);
	}
	switch (msgpack_unpack_next(up, buf, end, &off)) {
	case MSGPACK_UNPACK_SUCCESS:
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		return kn_error(err, KN_ENOMEM, "out of memory while reading "
		    "a %s", f->what);
	default:
		return kn_error(err, KN_EINVAL, "%s (malformed msgpack)",
		    f->notme);
	}
	if (off != end || up->data.type != MSGPACK_OBJECT_MAP)
		return kn_error(err, KN_EINVAL, "%s (malformed msgpack)",
		    f->notme);

	o = pr_mp_map_get(&up->data, "magic");
	if (o == NULL || !pr_mp_str_is(o, f->magic)) {
		for (; o != NULL && others != NULL && *others != NULL;
		    others++)
			if (pr_mp_str_is(o, (*others)->magic))
				return kn_error(err, KN_EINVAL, "%s: this is a "
				    "ShardMeter %s file", f->notme,
				    (*others)->what);
		return kn_error(err, KN_EINVAL, "%s (wrong magic)", f->notme);
	}
	o = pr_mp_map_get(&up->data, "version");
	if (o == NULL || (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
	    o->type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
		return kn_error(err, KN_EINVAL, "%s has no format version",
		    f->what);
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return kn_error(err, KN_EINVAL, "%s format version %lld; "
		    "this build reads version %llu: %s", f->what,
		    (long long)o->via.i64, (unsigned long long)f->version,
		    f->damaged);
	if (o->via.u64 != f->version)
		return kn_error(err, KN_EINVAL, "%s format version %llu; this "
		    "build reads version %llu: %s", f->what,
		    (unsigned long long)o->via.u64,
		    (unsigned long long)f->version, o->via.u64 > f->version ?
		    "a newer ShardMeter wrote it, upgrade this host" :
		    f->damaged);
	if (end != len)
		return kn_error(err, KN_EINVAL, "%s has %zu trailing bytes "
		    "after its end", f->what, len - end);
	*root = &up->data;
	return 0;
}
