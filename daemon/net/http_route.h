/* The route table of an hs_server handler: each endpoint one row
 * (method, path pattern, who may call it, meter kind, handler), as a
 * module of nginx is its table plus its handlers, and one dispatch that
 * answers what no handler should write by hand: 404 when no path
 * matches, 405 with an Allow header when the path does but the method
 * does not, 403 when the caller is not among those the row lets in.
 *
 * Who the caller is and what an exchange is charged to are the table's
 * owner's to say (callbacks), so that this layer knows nothing of peers,
 * operators or traffic kinds beyond a few bits and numbers. */
#ifndef HR_HTTP_ROUTE_H
#define HR_HTTP_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/net/http_server.h"

/* Numbers a pattern and the tables above it may capture in all. */
#define HR_MAX_NUMBERS 8

/* Who may call a row: HR_ANYONE, or the roles of which the caller must
 * hold at least one (the bits the table's who callback returns). */
#define HR_ANYONE 0u
#define HR_PEER (1u << 0)               /* a daemon of the run */
#define HR_OPERATOR (1u << 1)           /* an operator's tool */
#define HR_ROLE(i) (1u << (8 + (i)))    /* the owner's own, i < 24 */
/* What a who callback returns when it cannot tell callers apart (plain
 * TCP, no certificate): every row lets the caller in. */
#define HR_EVERYONE (~0u)

/* A row's meter kind that leaves the exchange's meter as it was (a
 * sub-tree whose table above already set it). */
#define HR_METER_KEEP (-1)

/* What matched: the numbers of the {n} segments in the order they came
 * (those of the tables above first), and what a trailing {*} matched. */
typedef struct hr_match {
	int64_t num[HR_MAX_NUMBERS];
	int nnum;
	const char *rest;       /* "" when the pattern has no {*} */
} hr_match;

/* A row's handler; ctx is its table's. */
typedef void (*hr_handler_fn)(void *ctx, const hs_request *req,
    hs_response *res, const hr_match *m);

/* One endpoint.  A pattern is matched against the raw path, character
 * by character, but for two kinds of segment:
 *   {n}  a decimal number read with hs_path_number (no sign, no leading
 *        zero), at most its bound in max, so that one resource has one
 *        spelling and nothing wraps;
 *   {*}  at the end only: the rest of the path, slashes included, maybe
 *        empty (a sub-tree whose handler dispatches a table of its own).
 * method "GET" answers HEAD too; NULL answers every method (a sub-tree:
 * its own table says what each path allows). */
typedef struct hr_route {
	const char *method;
	const char *pattern;
	unsigned who;           /* HR_ANYONE or HR_* bits */
	int meter;              /* kind handed to the table's meter */
	hr_handler_fn fn;
	/* the bound of each {n} of the pattern, in order; NULL: INT64_MAX */
	const int64_t *max;
} hr_route;

typedef struct hr_table {
	const hr_route *rows;
	size_t nrows;
	void *ctx;              /* handed to every callback and handler */
	/* The caller's roles (HR_* bits); NULL: HR_EVERYONE. */
	unsigned (*who)(void *ctx, const hs_request *req);
	/* Charges the exchange to a row's meter kind, once its path matched
	 * and before any answer, refusals included; NULL: none. */
	void (*meter)(void *ctx, const hs_request *req, hs_response *res,
	    int kind);
	/* Writes a refusal the dispatch decided: 405 (row: the first row of
	 * the path; its Allow header is set already) or 403 (row: the one
	 * refused).  NULL: hr_refuse_text's. */
	void (*refuse)(void *ctx, const hs_request *req, hs_response *res,
	    int status, const hr_route *row, const hr_match *m);
	/* No row's path matches; m holds what the tables above matched.
	 * NULL: nothing is answered and hr_dispatch returns 0. */
	void (*not_found)(void *ctx, const hs_request *req, hs_response *res,
	    const hr_match *m);
} hr_table;

/* Answers req from t: the first row whose path and method match (GET
 * matching HEAD), once the caller's roles let it in.  above is the match
 * of a {*} row of the table above (its rest is what t matches, its
 * numbers come first), or NULL for the whole path.  Returns 1 when
 * something was answered, 0 when no path matched and t has no
 * not_found. */
int hr_dispatch(const hr_table *t, const hs_request *req, hs_response *res,
    const hr_match *above);

/* Whether path matches pattern (the syntax of hr_route, max as there),
 * the numbers appended to m and m->rest set; on a mismatch m is left as
 * it was.  1 or 0. */
int hr_match_path(const char *pattern, const int64_t *max, const char *path,
    hr_match *m);

/* The methods of t's rows whose path matches (GET adding HEAD), as an
 * Allow header value ("GET, HEAD, POST") into buf of len bytes. */
void hr_allow(const hr_table *t, const char *path, const hr_match *above,
    char *buf, size_t len);

/* The refusals' default texts: "DELETE is not allowed on /v1/x" (405)
 * and "POST on /v1/x is not open to this caller" (403). */
void hr_refuse_text(const hs_request *req, hs_response *res, int status);

#endif
