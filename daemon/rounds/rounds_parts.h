/* An update sent as parts on parallel streams (update_streams): how the
 * sender splits a body into contiguous byte ranges, and how the receiver
 * puts the parts of each replica's update back together before the
 * round protocol sees it.  Bytes and offsets only; nothing here knows
 * what an update holds. */
#ifndef SM_ROUNDS_PARTS_H
#define SM_ROUNDS_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/net/http_server.h"
#include "kernels/error.h"

#define RP_MAX_PARTS 16                 /* update_streams at most */
#define RP_DEFAULT_CHUNK ((size_t)1 << 20)
#define RP_MAX_REPLICAS 64              /* ROUNDS_MAX_REPLICAS */

/* The part is one the receiver already holds (its answer was lost):
 * the sender counts it as delivered.  409, X-Round-State: have. */
#define RP_EHAVE KN_E_RP_HAVE
/* The announced total is above the largest update: 413. */
#define RP_ETOOLARGE KN_E_RP_TOOLARGE

/* The parts a body of total bytes goes in: streams, but no part smaller
 * than chunk, and always at least one.  One part is a plain POST. */
int rp_parts_for(size_t total, int streams, size_t chunk);
/* Part i of n of a body of total bytes: the first total % n parts are a
 * byte longer than the others. */
void rp_range(size_t total, int n, int i, size_t *offset, size_t *len);
/* The query that names part i of n (no '?'), for the URL. */
void rp_query(char *buf, size_t len, int replica, int i, int n,
    size_t offset, size_t total, const char *sha256);

/* What a part says of itself, from its query. */
typedef struct {
	int replica, part, parts;
	size_t offset, total;
	char sha256[65];                /* of the whole body, lower-case hex */
} rp_part;

/* 1 and *p when req's query names a part (it has parts=), 0 when the
 * request is a whole update, KN_EINVAL with the reason when it names a
 * part badly (a parameter missing, repeated or out of range). */
int rp_parse(const hs_request *req, rp_part *p, char *err);
/* The value of name in a query ("a=1&b=2") into out (truncated to
 * outlen - 1): 1, or 0 when absent ("" in out). */
int rp_query_value(const char *query, const char *name, char *out,
    size_t outlen);

/* One replica's update being put together, for the round in progress. */
typedef struct {
	char *buf;                      /* total bytes; NULL: none under way */
	size_t total, got;
	int parts;
	char sha256[65];
	uint32_t have;                  /* bit i: part i is in */
	size_t off[RP_MAX_PARTS], len[RP_MAX_PARTS];
} rp_assembly;

typedef struct {
	rp_assembly a[RP_MAX_REPLICAS];
	/* the hash of each replica's update this round already took whole,
	 * so a part resent after a lost answer is known: "" for none */
	char done[RP_MAX_REPLICAS][65];
	size_t held;                    /* bytes of every buf together */
	size_t budget;                  /* held at most */
} rp_set;

/* Adds a part (body of len bytes) to replica p->replica's assembly; the
 * update may be at most cap bytes.  0: taken; when it was the last,
 * *whole (ownership passes) and *whole_len hold the update, its hash
 * checked.  Otherwise nothing changed, save that a whole body whose hash
 * does not match is dropped: RP_EHAVE, RP_ETOOLARGE, KN_ENOMEM (the
 * budget, or malloc: try again), KN_EINVAL (a duplicate of another
 * range, an overlap, a total, count or hash that differs from the first
 * part's, a hash that does not match), with the reason in err. */
int rp_add(rp_set *s, const rp_part *p, const char *body, size_t len,
    size_t cap, char **whole, size_t *whole_len, char *err);
/* The update of replica was taken whole, with that hash. */
void rp_done(rp_set *s, int replica, const char *sha256);
/* Drops every assembly and hash: the round is over. */
void rp_clear(rp_set *s);

#endif
