/* Updates in parts (update_streams): the sender's split and the
 * receiver's assembly.  A part carries in its query where its bytes go in
 * the whole (offset, total) and the whole body's SHA-256, so the receiver
 * needs no order and no state beyond one buffer per replica; an update is
 * handed on only when every byte is in and the hash matches. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/rounds/rounds_parts.h"
#include "proto/checkpoint.h"

int
rp_parts_for(size_t total, int streams, size_t chunk)
{
	size_t n;

	if (streams <= 1 || chunk == 0)
		return 1;
	n = total / chunk;
	if (n > (size_t)streams)
		n = (size_t)streams;
	return n < 1 ? 1 : (int)n;
}

void
rp_range(size_t total, int n, int i, size_t *offset, size_t *len)
{
	size_t base = total / (size_t)n, extra = total % (size_t)n;
	size_t k = (size_t)i;

	*offset = k * base + (k < extra ? k : extra);
	*len = base + (k < extra ? 1 : 0);
}

void
rp_query(char *buf, size_t len, int replica, int i, int n, size_t offset,
    size_t total, const char *sha256)
{
	snprintf(buf, len, "replica=%d&part=%d&parts=%d&offset=%zu&total=%zu"
	    "&sha256=%s", replica, i, n, offset, total, sha256);
}

/* The value of name in query ("a=1&b=2"), its length in *vlen; NULL when
 * absent; *twice when it is there more than once. */
static const char *
param(const char *query, const char *name, size_t *vlen, int *twice)
{
	size_t n = strlen(name);
	const char *s = query, *found = NULL;

	while (*s != '\0') {
		const char *amp = strchr(s, '&');
		size_t seg = amp ? (size_t)(amp - s) : strlen(s);

		if (seg > n && strncmp(s, name, n) == 0 && s[n] == '=') {
			if (found != NULL)
				*twice = 1;
			else {
				found = s + n + 1;
				*vlen = seg - n - 1;
			}
		}
		s += seg + (amp ? 1 : 0);
	}
	return found;
}

int
rp_query_value(const char *query, const char *name, char *out, size_t outlen)
{
	size_t vlen = 0;
	int twice = 0;
	const char *v = query != NULL ? param(query, name, &vlen, &twice) :
	    NULL;

	if (outlen == 0)
		return 0;
	out[0] = '\0';
	if (v == NULL)
		return 0;
	snprintf(out, outlen, "%.*s", (int)vlen, v);
	return 1;
}

/* A decimal parameter: digits only, no leading zero, at most max. */
static int
number(const char *query, const char *name, size_t max, size_t *out,
    char *err)
{
	size_t vlen = 0, i, v = 0;
	int twice = 0;
	const char *s = param(query, name, &vlen, &twice);

	if (s == NULL)
		return kn_error(err, KN_EINVAL, "part without %s=", name);
	if (twice)
		return kn_error(err, KN_EINVAL, "%s= given twice", name);
	if (vlen == 0 || (s[0] == '0' && vlen > 1))
		return kn_error(err, KN_EINVAL, "%s=%.*s is not a decimal number",
		    name, (int)(vlen > 32 ? 32 : vlen), s);
	for (i = 0; i < vlen; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (d > 9 || v > (max - d) / 10)
			return kn_error(err, KN_EINVAL, "%s=%.*s is not a number "
			    "from 0 to %zu", name, (int)(vlen > 32 ? 32 : vlen),
			    s, max);
		v = v * 10 + d;
	}
	*out = v;
	return KN_OK;
}

int
rp_parse(const hs_request *req, rp_part *p, char *err)
{
	size_t replica, part, parts, vlen = 0, i;
	int twice = 0, rc;
	const char *sha;

	if (param(req->query, "parts", &vlen, &twice) == NULL)
		return 0;
	memset(p, 0, sizeof(*p));
	if ((rc = number(req->query, "replica", RP_MAX_REPLICAS - 1, &replica,
	    err)) != 0 ||
	    (rc = number(req->query, "parts", RP_MAX_PARTS, &parts, err)) != 0 ||
	    (rc = number(req->query, "part", RP_MAX_PARTS - 1, &part,
	    err)) != 0 ||
	    (rc = number(req->query, "total", SIZE_MAX, &p->total, err)) != 0 ||
	    (rc = number(req->query, "offset", SIZE_MAX, &p->offset,
	    err)) != 0)
		return rc;
	if (parts < 2)
		return kn_error(err, KN_EINVAL, "parts=%zu: an update in parts "
		    "has 2 to %d; one goes without parts=", parts,
		    RP_MAX_PARTS);
	if (part >= parts)
		return kn_error(err, KN_EINVAL, "part=%zu of parts=%zu: parts are "
		    "numbered from 0", part, parts);
	sha = param(req->query, "sha256", &vlen, &twice);
	if (sha == NULL || twice || vlen != 64)
		return kn_error(err, KN_EINVAL, "a part needs sha256= once, 64 "
		    "hex digits: the whole update's");
	for (i = 0; i < 64; i++)
		if (strchr("0123456789abcdef", sha[i]) == NULL)
			return kn_error(err, KN_EINVAL, "sha256=: not lower-case "
			    "hex");
	memcpy(p->sha256, sha, 64);
	p->sha256[64] = '\0';
	if (p->total == 0 || p->offset >= p->total ||
	    req->body_len == 0 || req->body_len > p->total - p->offset)
		return kn_error(err, KN_EINVAL, "part of %zu bytes at offset %zu "
		    "does not fit in total=%zu", req->body_len, p->offset,
		    p->total);
	p->replica = (int)replica;
	p->part = (int)part;
	p->parts = (int)parts;
	return 1;
}

static void
drop(rp_set *s, int replica)
{
	rp_assembly *a = &s->a[replica];

	if (a->buf != NULL)
		s->held -= a->total;
	free(a->buf);
	memset(a, 0, sizeof(*a));
}

/* A part against the assembly under way: the same whole, a range of its
 * own.  0, RP_EHAVE, or KN_EINVAL. */
static int
fits(const rp_assembly *a, const rp_part *p, const char *body, size_t len,
    char *err)
{
	int i;

	if (p->total != a->total)
		return kn_error(err, KN_EINVAL, "total=%zu, but the parts before "
		    "said %zu", p->total, a->total);
	if (p->parts != a->parts)
		return kn_error(err, KN_EINVAL, "parts=%d, but the parts before "
		    "said %d", p->parts, a->parts);
	if (strcmp(p->sha256, a->sha256) != 0)
		return kn_error(err, KN_EINVAL, "sha256=%.16s..., but the parts "
		    "before said %.16s...", p->sha256, a->sha256);
	if (a->have & (1u << p->part)) {
		if (a->off[p->part] == p->offset && a->len[p->part] == len &&
		    memcmp(a->buf + p->offset, body, len) == 0)
			return kn_error(err, RP_EHAVE, "part %d of %d is already "
			    "here", p->part, p->parts);
		return kn_error(err, KN_EINVAL, "part %d of %d came before with "
		    "other bytes", p->part, p->parts);
	}
	for (i = 0; i < a->parts; i++)
		if ((a->have & (1u << i)) && p->offset < a->off[i] + a->len[i] &&
		    a->off[i] < p->offset + len)
			return kn_error(err, KN_EINVAL, "bytes %zu to %zu overlap "
			    "part %d (bytes %zu to %zu)", p->offset,
			    p->offset + len - 1, i, a->off[i],
			    a->off[i] + a->len[i] - 1);
	return KN_OK;
}

/* A new assembly for p, within cap and the budget. */
static int
start(rp_set *s, const rp_part *p, size_t cap, char *err)
{
	rp_assembly *a = &s->a[p->replica];

	if (p->total > cap)
		return kn_error(err, RP_ETOOLARGE, "an update of %zu bytes is "
		    "larger than the largest one here (%zu bytes)", p->total,
		    cap);
	if (p->total > s->budget - s->held)
		return kn_error(err, KN_ENOMEM, "updates being put together hold "
		    "%zu bytes; %zu more would pass the %zu of max_buffered",
		    s->held, p->total, s->budget);
	if ((a->buf = malloc(p->total)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory for an update of "
		    "%zu bytes", p->total);
	s->held += p->total;
	a->total = p->total;
	a->parts = p->parts;
	memcpy(a->sha256, p->sha256, sizeof(a->sha256));
	return KN_OK;
}

int
rp_add(rp_set *s, const rp_part *p, const char *body, size_t len,
    size_t cap, char **whole, size_t *whole_len, char *err)
{
	rp_assembly *a = &s->a[p->replica];
	char hex[65], why[KN_ERR_LEN];
	int rc;

	*whole = NULL;
	*whole_len = 0;
	if (a->buf == NULL && strcmp(s->done[p->replica], p->sha256) == 0)
		return kn_error(err, RP_EHAVE, "replica %d's update is already "
		    "here whole", p->replica);
	if (a->buf == NULL) {
		if ((rc = start(s, p, cap, err)) != 0)
			return rc;
	} else if ((rc = fits(a, p, body, len, err)) != 0)
		return rc;
	memcpy(a->buf + p->offset, body, len);
	a->have |= 1u << p->part;
	a->off[p->part] = p->offset;
	a->len[p->part] = len;
	a->got += len;
	if (a->got < a->total)
		return KN_OK;
	/* no overlaps and got == total: every byte is in */
	if (pr_ckpt_sha256_hex(a->buf, a->total, hex, why) != 0 ||
	    strcmp(hex, a->sha256) != 0) {
		drop(s, p->replica);
		return kn_error(err, KN_EINVAL, "the %zu bytes put together "
		    "hash to %.16s..., not the sha256=%.16s... the parts "
		    "announced", p->total, hex, p->sha256);
	}
	*whole = a->buf;
	*whole_len = a->total;
	s->held -= a->total;
	memset(a, 0, sizeof(*a));
	return KN_OK;
}

void
rp_done(rp_set *s, int replica, const char *sha256)
{
	snprintf(s->done[replica], sizeof(s->done[replica]), "%s", sha256);
}

void
rp_clear(rp_set *s)
{
	int k;

	for (k = 0; k < RP_MAX_REPLICAS; k++) {
		drop(s, k);
		s->done[k][0] = '\0';
	}
}
