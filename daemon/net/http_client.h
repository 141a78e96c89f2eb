/* The HTTP client of blocktraind (DESIGN section 5): outgoing requests to
 * peers through one libcurl multi handle driven from the daemon's libuv
 * loop, so transfers never block the loop and connections to a peer are
 * reused between requests.  Callbacks run on the loop. */
#ifndef HC_HTTP_CLIENT_H
#define HC_HTTP_CLIENT_H

#include <stddef.h>

#include <stdint.h>

#include <uv.h>

#include "daemon/net/tls.h"
#include "kernels/error.h"

#define HC_ERR_LEN 256                  /* size of the err buffers below */

#define HC_DEFAULT_TIMEOUT_MS 60000L
#define HC_DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define HC_DEFAULT_MAX_BODY_BYTES ((size_t)64 * 1024 * 1024)
/* connections kept open between requests: one per peer of the largest
 * peer list, and the extra streams of a split transfer */
#define HC_MAX_CONNECTS 256L

typedef struct hc_client hc_client;

/* Its codes in the list of kernels/error.h: what a failed request came
 * to (hc_result.code), beside KN_ENOMEM and KN_EIO (anything else: a
 * reply that is not HTTP, a connection lost midway). */
#define HC_ECONNECT KN_E_HC_CONNECT     /* no connection: refused, no route,
                                         * a name that does not resolve */
#define HC_ETIMEDOUT KN_E_HC_TIMEDOUT   /* timeout_ms or connect_timeout_ms
                                         * passed, or TCP gave up */
#define HC_ETLS KN_E_HC_TLS             /* the handshake failed, or the
                                         * server is not the pinned one */
#define HC_ETOOLARGE KN_E_HC_TOOLARGE   /* the body is above max_body_bytes */
#define HC_ECANCELLED KN_E_HC_CANCELLED /* hc_client_close came first */

typedef struct {
	const char *method;     /* "GET" (also NULL), "POST", "PUT", "HEAD" */
	const char *url;        /* http(s)://host:port/path?query */
	/* https: the peer id the server must present (identity.h); the
	 * client's own certificate is the one of hc_client_set_tls */
	const uint8_t *pin;
	const char *content_type;       /* NULL: no Content-Type */
	const void *body;               /* POST and PUT only; copied */
	size_t body_len;
	/* POST and PUT, body NULL: send this many zeros, made as they are
	 * sent and never held whole (a link probe's upload) */
	size_t body_zeros;
	const char *if_none_match;      /* NULL: not sent */
	long timeout_ms;                /* whole request; 0: default */
	long connect_timeout_ms;        /* 0: default */
	size_t max_body_bytes;          /* response body; 0: default */
	/* a response header the caller reads (hc_result.header); NULL:
	 * none.  Must stay valid until done is called. */
	const char *want_header;
} hc_request_opts;

/* What a request came to, valid during the done callback only. */
typedef struct hc_result {
	/* the HTTP status; 0 whenever error is set, even when a status line
	 * had arrived before the failure */
	long status;
	/* NULL on success, else one line: curl's error text, "cancelled",
	 * or the body limit that was exceeded; for a person to read */
	const char *error;
	/* 0 on success, else one of the codes above: what a caller decides
	 * on, never the text of error */
	int code;
	/* the response body, NUL-terminated after body_len bytes, NULL when
	 * empty or on error.  Freed after the callback unless taken: set
	 * body to NULL after keeping the pointer, or call
	 * hc_result_take_body; free it with free() */
	char *body;
	size_t body_len;
	const char *etag;       /* the ETag header; NULL if none or on error */
	const char *header;     /* the want_header one, likewise */
	double total_s;                 /* whole transfer, seconds */
	/* from the start until the request began to go out (connection
	 * and TLS handshake, when a new one was needed), seconds */
	double pretransfer_s;
	/* as curl counts them: body + headers received; body + request
	 * head sent */
	size_t bytes_in, bytes_out;
} hc_result;

char *hc_result_take_body(hc_result *r);

typedef void (*hc_done_fn)(void *ctx, hc_result *r);

/* Creates a client on loop (libcurl is loaded and initialised once per
 * process, on the first call: curl_load.h; UV_EIO when it cannot be).  Returns 0, or a negative libuv error code with a
 * reason in err (HC_ERR_LEN bytes, NULL allowed). */
int hc_client_new(hc_client **out, uv_loop_t *loop, char *err);

/* Starts a request; done(ctx, result) is called exactly once, later, on
 * the loop (never from inside hc_request).  Returns 0, or UV_EINVAL
 * (bad options, or the client is closing), UV_ENOMEM, UV_EIO (curl
 * refused) with a reason in err; then done is never called. */
/* Requests to https URLs present the identity of tls (not owned; it must
 * outlive c) and pin the server to opts.pin; NULL: plain http only. */
void hc_client_set_tls(hc_client *c, const tls_ctx *tls);
/* "https" once a TLS context is set, else "http". */
const char *hc_scheme(const hc_client *c);

int hc_request(hc_client *c, const hc_request_opts *o, hc_done_fn done,
    void *ctx, char *err);

/* Completes every request in flight with the error "cancelled", closes
 * the connections, and once libuv has closed every handle frees the
 * client and calls closed(arg) (closed may be NULL).  Safe to call from a
 * done callback; c must not be used afterwards. */
void hc_client_close(hc_client *c, void (*closed)(void *arg), void *arg);

#endif
