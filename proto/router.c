/* The router file: encoding and strict decoding (see router.h).  Every
 * count is bounded and the payload's size and hash are checked before
 * anything is allocated; the words and values are checked after, before
 * the caller sees them. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "kernels/error.h"
#include "proto/msgpack_strict.h"
#include "proto/router.h"

#define ROUTER_MAGIC "ShardMeter router"
/* A unit centroid's norm, up to float rounding. */
#define UNIT_TOL 1e-3

enum {
	F_MAGIC, F_VERSION, F_WORDS, F_DIMS, F_EXPERTS, F_PREFIX, F_SEED,
	F_WORDS_BYTES, F_PAYLOAD, F_SHA256, F_COUNT
};
static const char *const router_keys[F_COUNT] = {
	"magic", "version", "words", "dims", "experts", "prefix", "seed",
	"words_bytes", "payload", "sha256"
};

static const struct pr_mp_format router_format = {
	ROUTER_MAGIC, "router", "not a ShardMeter router file",
	"the file is damaged", PR_ROUTER_VERSION, 2,
	/* room for a few fields too many, so that they are named */
	2 * F_COUNT + 9
};
static const struct pr_mp_format ckpt_name = {
	"ShardMeter checkpoint", "checkpoint", NULL, NULL, 0, 0, 0
};
static const struct pr_mp_format *const router_others[] = {
	&ckpt_name, NULL
};

/* The floats of the payload: idf, basis, centroids. */
static uint64_t
nfloats(uint64_t nwords, uint64_t dims, uint64_t nexperts)
{
	return nwords + nwords * dims + nexperts * dims;
}

static int
check_counts(uint64_t nwords, uint64_t dims, uint64_t nexperts,
    uint64_t prefix, uint64_t words_len, char *err)
{
	if (nwords < 1 || nwords > PR_ROUTER_MAX_WORDS)
		return kn_error(err, KN_EINVAL, "router has %llu words; 1 to "
		    "%u are allowed", (unsigned long long)nwords,
		    PR_ROUTER_MAX_WORDS);
	if (dims < 1 || dims > PR_ROUTER_MAX_DIMS || dims > nwords)
		return kn_error(err, KN_EINVAL, "router has %llu dimensions; "
		    "1 to %u and at most its words are allowed",
		    (unsigned long long)dims, PR_ROUTER_MAX_DIMS);
	if (nexperts < 1 || nexperts > PR_ROUTER_MAX_EXPERTS)
		return kn_error(err, KN_EINVAL, "router has %llu experts; 1 to "
		    "%u are allowed", (unsigned long long)nexperts,
		    PR_ROUTER_MAX_EXPERTS);
	if (prefix < 1 || prefix > PR_ROUTER_MAX_PREFIX)
		return kn_error(err, KN_EINVAL, "router prefix of %llu bytes; "
		    "1 to %u are allowed", (unsigned long long)prefix,
		    PR_ROUTER_MAX_PREFIX);
	if (words_len < 2 * nwords ||
	    words_len > nwords * (PR_ROUTER_WORD_MAX + 1))
		return kn_error(err, KN_EINVAL, "router words take %llu bytes; "
		    "%llu words take %llu to %llu", (unsigned long long)
		    words_len, (unsigned long long)nwords,
		    (unsigned long long)(2 * nwords), (unsigned long long)
		    (nwords * (PR_ROUTER_WORD_MAX + 1)));
	if (4 * nfloats(nwords, dims, nexperts) + words_len > PR_MP_BIN_MAX)
		return kn_error(err, KN_EINVAL, "router payload exceeds the "
		    "4 GiB a msgpack bin holds");
	return 0;
}

int
pr_router_alloc(pr_router *r, uint32_t nwords, uint32_t dims,
    uint32_t nexperts, size_t words_len, char *err)
{
	uint64_t n;
	int rc;

	memset(r, 0, sizeof(*r));
	if ((rc = check_counts(nwords, dims, nexperts, 1, words_len, err)) !=
	    0)
		return rc;
	n = nfloats(nwords, dims, nexperts);
	r->words = malloc(words_len + 1);
	r->params = malloc((size_t)n * sizeof(float));
	if (r->words == NULL || r->params == NULL) {
		pr_router_free(r);
		return kn_error(err, KN_ENOMEM, "out of memory for a router of "
		    "%u words and %u dimensions", nwords, dims);
	}
	r->words[words_len] = '\0';
	r->nwords = nwords;
	r->dims = dims;
	r->nexperts = nexperts;
	r->prefix = 1;
	r->words_len = words_len;
	r->idf = r->params;
	r->basis = r->idf + nwords;
	r->centroids = r->basis + (size_t)nwords * dims;
	return 0;
}

void
pr_router_free(pr_router *r)
{
	free(r->words);
	free(r->params);
	memset(r, 0, sizeof(*r));
}

/* ---- what a router must hold ---- */

static int
is_word_byte(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c >= 0x80;
}

static int
cmp_word(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* V words, each of 1 to PR_ROUTER_WORD_MAX word bytes and a NUL, filling
 * words_len exactly, no word twice. */
static int
check_words(const pr_router *r, char *err)
{
	const char **sorted;
	char shown[PR_ROUTER_WORD_MAX + 1];
	size_t off = 0, i, n;
	uint32_t w;

	for (w = 0; w < r->nwords; w++) {
		for (n = 0; off + n < r->words_len && r->words[off + n] != '\0';
		    n++)
			if (!is_word_byte((unsigned char)r->words[off + n]))
				return kn_error(err, KN_EINVAL, "router word %u "
				    "holds byte 0x%02x; words are 0-9, a-z "
				    "and bytes >= 0x80", w,
				    (unsigned char)r->words[off + n]);
		if (off + n == r->words_len)
			return kn_error(err, KN_EINVAL, "router words end "
			    "after %u of %u words", w, r->nwords);
		if (n == 0 || n > PR_ROUTER_WORD_MAX)
			return kn_error(err, KN_EINVAL, "router word %u has %zu "
			    "bytes; 1 to %u are allowed", w, n,
			    PR_ROUTER_WORD_MAX);
		off += n + 1;
	}
	if (off != r->words_len)
		return kn_error(err, KN_EINVAL, "router words hold %zu bytes "
		    "past their %u words", r->words_len - off, r->nwords);
	if ((sorted = malloc(r->nwords * sizeof(*sorted))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory checking router "
		    "words");
	for (w = 0, off = 0; w < r->nwords; w++) {
		sorted[w] = r->words + off;
		off += strlen(sorted[w]) + 1;
	}
	qsort(sorted, r->nwords, sizeof(*sorted), cmp_word);
	for (i = 1; i < r->nwords; i++)
		if (strcmp(sorted[i - 1], sorted[i]) == 0) {
			pr_mp_printable(shown, sizeof(shown), sorted[i],
			    strlen(sorted[i]));
			free(sorted);
			return kn_error(err, KN_EINVAL, "router holds the word "
			    "'%s' twice", shown);
		}
	free(sorted);
	return 0;
}

static int
check_values(const pr_router *r, char *err)
{
	uint64_t n = nfloats(r->nwords, r->dims, r->nexperts), i;
	uint32_t e, c;

	for (i = 0; i < n; i++)
		if (!isfinite(r->params[i]))
			return kn_error(err, KN_ENUM, "router holds a non-finite "
			    "value at float %llu of its payload",
			    (unsigned long long)i);
	for (i = 0; i < r->nwords; i++)
		if (!(r->idf[i] > 0))
			return kn_error(err, KN_EINVAL, "router idf of word %llu "
			    "is %g; it must be positive",
			    (unsigned long long)i, (double)r->idf[i]);
	for (e = 0; e < r->nexperts; e++) {
		const float *x = r->centroids + (size_t)e * r->dims;
		double norm = 0;

		for (c = 0; c < r->dims; c++)
			norm += (double)x[c] * x[c];
		if (fabs(sqrt(norm) - 1.0) > UNIT_TOL)
			return kn_error(err, KN_EINVAL, "router centroid %u has "
			    "norm %g; centroids are unit vectors", e,
			    sqrt(norm));
	}
	return 0;
}

static int
check_router(const pr_router *r, char *err)
{
	int rc;

	if ((rc = check_counts(r->nwords, r->dims, r->nexperts, r->prefix,
	    r->words_len, err)) != 0 || (rc = check_words(r, err)) != 0)
		return rc;
	return check_values(r, err);
}

/* ---- encoding ---- */

int
pr_router_encode(const pr_router *r, char **buf, size_t *len, char *err)
{
	uint64_t n = nfloats(r->nwords, r->dims, r->nexperts);
	size_t payload = 4 * (size_t)n + r->words_len;
	unsigned char md[PR_SHA256_LEN];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int rc;

	*buf = NULL;
	*len = 0;
	if ((rc = check_router(r, err)) != 0)
		return rc;
	msgpack_sbuffer_init(&sb);
	if ((sb.data = malloc(payload + 512)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory encoding a "
		    "router");
	sb.alloc = payload + 512;
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	rc = msgpack_pack_map(&pk, F_COUNT);
	rc |= pr_mp_pack_key(&pk, "magic");
	rc |= pr_mp_pack_key(&pk, ROUTER_MAGIC);
	rc |= pr_mp_pack_key(&pk, "version");
	rc |= msgpack_pack_uint64(&pk, PR_ROUTER_VERSION);
	rc |= pr_mp_pack_key(&pk, "words");
	rc |= msgpack_pack_uint64(&pk, r->nwords);
	rc |= pr_mp_pack_key(&pk, "dims");
	rc |= msgpack_pack_uint64(&pk, r->dims);
	rc |= pr_mp_pack_key(&pk, "experts");
	rc |= msgpack_pack_uint64(&pk, r->nexperts);
	rc |= pr_mp_pack_key(&pk, "prefix");
	rc |= msgpack_pack_uint64(&pk, r->prefix);
	rc |= pr_mp_pack_key(&pk, "seed");
	rc |= msgpack_pack_uint64(&pk, r->seed);
	rc |= pr_mp_pack_key(&pk, "words_bytes");
	rc |= msgpack_pack_uint64(&pk, r->words_len);
	rc |= pr_mp_pack_key(&pk, "payload");
	rc |= msgpack_pack_bin(&pk, payload);
	if (rc == 0)
		rc = pr_mp_pack_le_floats(&pk, r->params, (size_t)n);
	if (rc == 0)
		rc = msgpack_pack_bin_body(&pk, r->words, r->words_len);
	if (rc == 0 && pr_mp_sha256(sb.data + sb.size - payload, payload,
	    md) != 0)
		rc = -1;
	if (rc == 0) {
		rc |= pr_mp_pack_key(&pk, "sha256");
		rc |= msgpack_pack_bin_with_body(&pk, md, PR_SHA256_LEN);
	}
	if (rc != 0) {
		msgpack_sbuffer_destroy(&sb);
		return kn_error(err, KN_ENOMEM, "out of memory encoding a "
		    "router");
	}
	*buf = sb.data;
	*len = sb.size;
	return 0;
}

/* ---- decoding ---- */

static int
get_counts(const msgpack_object **f, uint64_t *v, char *err)
{
	static const int which[] = { F_WORDS, F_DIMS, F_EXPERTS, F_PREFIX,
	    F_WORDS_BYTES, F_SEED };
	static const uint64_t max[] = { UINT32_MAX, UINT32_MAX, UINT32_MAX,
	    UINT32_MAX, PR_MP_BIN_MAX, UINT64_MAX };
	int i, rc;

	for (i = 0; i < 6; i++)
		if ((rc = pr_mp_get_uint(f[which[i]], max[i], &v[i], "router",
		    router_keys[which[i]], err)) != 0)
			return rc;
	return check_counts(v[0], v[1], v[2], v[3], v[4], err);
}

/* The payload bin of the size the counts give, matching its hash. */
static int
get_payload(const msgpack_object **f, uint64_t size,
    const unsigned char **p, char *err)
{
	const msgpack_object *po = f[F_PAYLOAD], *ho = f[F_SHA256];
	unsigned char md[PR_SHA256_LEN];

	if (po->type != MSGPACK_OBJECT_BIN)
		return kn_error(err, KN_EINVAL, "router field 'payload' must "
		    "be a msgpack bin");
	if (po->via.bin.size != size)
		return kn_error(err, KN_EINVAL, "router payload holds %u bytes; "
		    "its counts say %llu", po->via.bin.size,
		    (unsigned long long)size);
	if (ho->type != MSGPACK_OBJECT_BIN ||
	    ho->via.bin.size != PR_SHA256_LEN)
		return kn_error(err, KN_EINVAL, "router field 'sha256' must be "
		    "a bin of %d bytes", PR_SHA256_LEN);
	if (pr_mp_sha256(po->via.bin.ptr, po->via.bin.size, md) != 0)
		return kn_error(err, KN_ENOMEM, "SHA-256 failed in OpenSSL");
	if (memcmp(md, ho->via.bin.ptr, PR_SHA256_LEN) != 0)
		return kn_error(err, KN_EINVAL, "router payload hash mismatch: "
		    "the file is corrupt");
	*p = (const unsigned char *)po->via.bin.ptr;
	return 0;
}

int
pr_router_decode(const char *buf, size_t len, pr_router *out, char *err)
{
	const msgpack_object *root, *f[F_COUNT];
	const unsigned char *p = NULL;
	msgpack_unpacked up;
	uint64_t v[6], n;
	pr_router r;
	long bad;
	int rc;

	memset(out, 0, sizeof(*out));
	msgpack_unpacked_init(&up);
	if ((rc = pr_mp_open(buf, len, &router_format, router_others, &up,
	    &root, err)) != 0 ||
	    (rc = pr_mp_collect_fields(root, router_keys, F_COUNT, f,
	    "router", err)) != 0 ||
	    (rc = get_counts(f, v, err)) != 0)
		goto out;
	n = nfloats(v[0], v[1], v[2]);
	if ((rc = get_payload(f, 4 * n + v[4], &p, err)) != 0)
		goto out;
	if ((bad = pr_mp_first_nonfinite_le(p, (size_t)n)) >= 0) {
		rc = kn_error(err, KN_ENUM, "router holds a non-finite value "
		    "at float %ld of its payload", bad);
		goto out;
	}
	if ((rc = pr_router_alloc(&r, (uint32_t)v[0], (uint32_t)v[1],
	    (uint32_t)v[2], (size_t)v[4], err)) != 0)
		goto out;
	r.prefix = (uint32_t)v[3];
	r.seed = v[5];
	pr_mp_load_le_floats(r.params, p, (size_t)n);
	memcpy(r.words, p + 4 * n, (size_t)v[4]);
	if ((rc = check_router(&r, err)) != 0) {
		pr_router_free(&r);
		goto out;
	}
	*out = r;
out:
	msgpack_unpacked_destroy(&up);
	return rc;
}
