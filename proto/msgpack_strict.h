/* Private to proto/: the strict msgpack reading and the little-endian
 * payload helpers that the checkpoint files and the update message share.
 * A reader opens a buffer with pr_mp_open(), which bounds it before
 * msgpack-c allocates anything, then checks each field with the rest. */
#ifndef PR_MSGPACK_STRICT_H
#define PR_MSGPACK_STRICT_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define PR_SHA256_LEN 32
/* A msgpack bin holds at most 2^32 - 1 bytes. */
#define PR_MP_BIN_MAX ((uint64_t)UINT32_MAX)
/* The deepest nesting any format may allow. */
#define PR_MP_MAX_DEPTH 8

/* One message or file format: how to recognise it and how errors name
 * it. */
struct pr_mp_format {
	const char *magic;      /* the value of the top-level "magic" */
	const char *what;       /* "checkpoint": "checkpoint is truncated" */
	const char *notme;      /* "not a ShardMeter checkpoint" */
	const char *damaged;    /* said of a version older than ours */
	uint64_t version;       /* the one version this build reads */
	int max_depth;          /* 1 .. PR_MP_MAX_DEPTH levels of nesting */
	size_t max_objects;     /* msgpack objects in all, containers too */
};

/* Checks, in this order, that buf is one msgpack map within f's bounds
 * (pre-scanned: every count bounded by the bytes left, 0xc1 refused),
 * that its "magic" is f's (a magic of one of others, a NULL-terminated
 * list, is named in the message), that its "version" is f's, and that no
 * bytes follow it.  up must be initialised; the caller destroys it, and
 * *root points into it.  Returns 0 or KN_EINVAL / KN_ENOMEM with a
 * message. */
int pr_mp_open(const char *buf, size_t len, const struct pr_mp_format *f,
    const struct pr_mp_format *const *others, msgpack_unpacked *up,
    const msgpack_object **root, char *err);

int pr_mp_str_is(const msgpack_object *o, const char *s);
/* Copies slen bytes of src into dst (dlen bytes, NUL-terminated), each
 * byte outside printable ASCII as '?': a hostile string cannot put
 * control characters into a log line. */
void pr_mp_printable(char *dst, size_t dlen, const char *src, size_t slen);
/* s holds exactly 64 lowercase hex digits. */
int pr_mp_is_run_id(const char *s, size_t n);
const msgpack_object *pr_mp_map_get(const msgpack_object *map,
    const char *key);
/* Fills out[k] with the value of keys[k]; the map must hold exactly these
 * keys, each once.  ctx names the map in messages. */
int pr_mp_collect_fields(const msgpack_object *map, const char *const *keys,
    int nkeys, const msgpack_object **out, const char *ctx, char *err);
/* A positive integer of at most max: "<what> field '<field>' must be an
 * integer in [0, max]". */
int pr_mp_get_uint(const msgpack_object *o, uint64_t max, uint64_t *v,
    const char *what, const char *field, char *err);

int pr_mp_pack_key(msgpack_packer *pk, const char *key);
/* 0, or -1 if OpenSSL failed. */
int pr_mp_sha256(const void *p, size_t n, unsigned char md[PR_SHA256_LEN]);

/* Payload values are little-endian whatever the host; the bytes sit
 * inside a msgpack buffer and need not be aligned. */
int pr_mp_little_endian(void);
float pr_mp_load_le_float(const unsigned char *p);
void pr_mp_load_le_floats(float *dst, const unsigned char *src, size_t n);
/* Index of the first non-finite of n little-endian floats, or -1. */
long pr_mp_first_nonfinite_le(const unsigned char *p, size_t n);
int pr_mp_pack_le_floats(msgpack_packer *pk, const float *src, size_t n);

#endif
