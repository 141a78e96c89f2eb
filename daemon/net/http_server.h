/* The HTTP/1.1 server of blocktraind (DESIGN section 5): one listener on
 * the daemon's libuv loop, requests parsed with http-parser, bounded before
 * they are buffered, and handed to one handler, which answers at once or
 * later (hs_response_defer).  Over mutual TLS (tls.h) when given a
 * context, plain TCP otherwise; or over a connection another module
 * accepted and reads itself (hs_link_new: the pipeline port, which tells
 * HTTP from its frames by the first byte).  The daemon's API module
 * registers the handler and meters the bytes. */
#ifndef HS_HTTP_SERVER_H
#define HS_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/net/tls.h"

#define HS_ERR_LEN 256          /* size of the err buffers below */

#define HS_DEFAULT_MAX_HEADER_BYTES ((size_t)16 * 1024)
#define HS_DEFAULT_MAX_BODY_BYTES ((size_t)64 * 1024 * 1024)
#define HS_DEFAULT_IDLE_TIMEOUT_MS 30000u
#define HS_DEFAULT_REQUEST_TIMEOUT_MS 30000u
#define HS_DEFAULT_MAX_CONNECTIONS 256
#define HS_DEFAULT_MAX_CONNECTIONS_PER_ADDR 32
#define HS_DEFAULT_MIN_BODY_RATE 1024u  /* bytes per second */
#define HS_DEFAULT_HANDSHAKE_TIMEOUT_MS 5000u
#define HS_DEFAULT_HEADER_TIMEOUT_MS 10000u
/* Over TLS, per listed identity (its peer id) once its handshake named
 * it: a peer daemon of the run sends an update in up to 16 parts beside
 * its checkpoint and status requests; an operator's tools need a few. */
#define HS_DEFAULT_MAX_CONNECTIONS_PER_PEER 64
#define HS_DEFAULT_MAX_CONNECTIONS_PER_CLIENT 16
#define HS_DEFAULT_MAX_REQUESTS_PER_ID 64

/* What an identity is to the server (hs_config.id_role): the run's own
 * peers get room made for them by closing clients' connections. */
enum { HS_ROLE_CLIENT, HS_ROLE_PEER };

typedef struct hs_server hs_server;
typedef struct hs_response hs_response;

/* One request, valid only during the handler call (a deferred answer
 * copies what it needs).  Every string is NUL-terminated and never
 * NULL. */
typedef struct hs_request {
	const char *method;     /* "GET", "POST", ... */
	const char *path;       /* raw target before '?', not decoded */
	const char *query;      /* raw text after '?', "" when none */
	const char *body;       /* body_len bytes and a NUL; "" when none */
	size_t body_len;
	const char *peer;       /* "127.0.0.1:50312" or "[::1]:50312" */
	/* the peer id its certificate proved (TLS), NULL over plain TCP */
	const uint8_t *peer_id;
	/* body bytes read and dropped unbuffered, as hs_config.discard
	 * asked (body is then ""), else 0 */
	size_t discarded;
	int http_major, http_minor;
	/* the owner's argument of a connection it attached (hs_link_new),
	 * NULL for one the server accepted */
	void *link_arg;
	void *priv;             /* the server's; do not touch */
} hs_request;

/* A decimal number at the start of a path segment s: digits only, no
 * sign, no leading zero (but "0" itself), at most max, so one resource
 * has one spelling and nothing wraps.  Returns the characters read, 0
 * when s does not start with such a number. */
size_t hs_path_number(const char *s, int64_t max, int64_t *out);
/* First header of that name (case-insensitive), or NULL. */
const char *hs_request_header(const hs_request *req, const char *name);
/* Moves the body out of the request to spare a copy of a large upload:
 * the caller frees it with free().  Returns NULL (and *len 0) when there
 * is no body.  req->body must not be used afterwards. */
char *hs_request_take_body(const hs_request *req, size_t *len);

/* The handler runs on the loop and must not block.  It sets a status (500
 * is sent if it sets none), headers and a body, or keeps the response to
 * answer later (hs_response_defer).  ctx is the one given to
 * hs_server_new. */
typedef void (*hs_handler_fn)(void *ctx, const hs_request *req,
    hs_response *res);

/* What an exchange is charged to: two numbers of the handler's own (a
 * traffic kind and a peer index, say), never read by the server, so a
 * long peer name cannot be cut short on its way to the meter. */
typedef struct {
	int kind;
	int who;
} hs_meter;

#define HS_METER_NONE (-1)      /* kind when the handler set none */
#define HS_METER_ERROR (-2)     /* kind of answers the server made itself */

/* Called once per request/response exchange when its response has been
 * written, or has failed (then bytes_out is 0).  bytes_in is what was
 * read for the request (request line, headers, body, chunk framing; for a
 * request the server rejected, everything read up to the rejection);
 * bytes_out what was written for the response (head and body, and a 100
 * Continue when one was sent).  m is what hs_response_meter set: kind
 * HS_METER_NONE (who -1) when nothing was, HS_METER_ERROR for answers
 * the server made itself.  Not called once hs_server_close has begun. */
typedef void (*hs_exchange_fn)(void *ctx, const char *peer_addr,
    hs_meter m, size_t bytes_in, size_t bytes_out);
/* A TLS handshake refused or failed (why names the id presented when
 * there was one), or not finished in time: for the log. */
typedef void (*hs_refused_fn)(void *ctx, const char *peer_addr,
    const char *why);

/* An answer the server makes itself (a malformed or oversized request, a
 * timeout, a limit): its status, the reason for a person, and for a
 * request http-parser refused, the parser's own description of why
 * (NULL otherwise). */
typedef struct {
	int status;
	const char *msg;
	const char *parse_error;
} hs_error;

/* Zero in any field means its default. */
typedef struct {
	/* request target plus header names and values, plus 4 per header
	 * line; beyond it 431 and close */
	size_t max_header_bytes;
	/* larger declared bodies get 413 before a byte of them is read;
	 * chunked bodies are cut off with 413 when they reach it */
	size_t max_body_bytes;
	/* a connection with no request under way is closed after this long;
	 * while responses are being written it is the longest wait for a
	 * slice (1 MiB) of them to be taken by the peer */
	unsigned idle_timeout_ms;
	/* from the first byte of a request to the end of its headers:
	 * beyond it 408 and close.  A body may take longer, as long as each
	 * such period brings at least min_body_rate bytes per second: a
	 * large body over a slow link completes, a stalled one does not */
	unsigned request_timeout_ms;
	unsigned min_body_rate;
	/* beyond it new connections get 503 and are closed; beyond twice
	 * it they are closed without an answer */
	int max_connections;
	/* from one address (the port aside): beyond it 503 and close, so
	 * one host cannot take every connection */
	int max_connections_per_addr;
	/* request bodies held at once by all connections together; a body
	 * that would go beyond it gets 503 (try again); 0: 4 x
	 * max_body_bytes */
	size_t max_buffered_bytes;
	hs_exchange_fn on_exchange;     /* NULL: no metering */
	/* mutual TLS with this context (not owned), whose allow function
	 * says who may connect; NULL: plain TCP */
	tls_ctx *tls;
	/* from accepting a connection to the end of its TLS handshake */
	unsigned handshake_timeout_ms;
	/* from the first byte of a request to the end of its headers, when
	 * shorter than request_timeout_ms: headers are a few hundred bytes
	 * that any client sends at once, so one that trickles them in holds
	 * a connection for nothing */
	unsigned header_timeout_ms;
	/* Over TLS, the role of a listed identity (HS_ROLE_*), asked when
	 * its handshake ends; NULL: every identity is a client. */
	int (*id_role)(void *ctx, const uint8_t *id);
	/* Over TLS, connections held at once by one identity of each role:
	 * beyond it 503 and close.  When every connection is taken, a peer
	 * whose handshake ends gets the place of a client's connection (of
	 * the client holding the most, an idle one first); a client gets
	 * 503. */
	int max_connections_per_peer;
	int max_connections_per_client;
	/* requests of one identity in flight at once, over all its
	 * connections (being read, or their answers being written): beyond
	 * it 503 and close */
	int max_requests_per_id;
	hs_refused_fn on_refused;       /* NULL: not told */
	/* Whether the body of a request is read and dropped instead of
	 * buffered (a link probe's sink), so that it takes nothing of
	 * max_buffered_bytes: 1 with its limit in *max (which replaces
	 * max_body_bytes), or 0.  target is the raw request target, query
	 * included.  NULL: every body is buffered. */
	int (*discard)(void *ctx, const char *method, const char *target,
	    size_t *max);
	/* Builds the answers the server makes itself, for a port whose
	 * clients read errors in a shape of their own: it sets a status and
	 * a body on res as a handler does (res takes no defer); a response
	 * left without a status gets the server's text/plain one.  The
	 * connection closes after it either way.  NULL: text/plain. */
	void (*error_answer)(void *ctx, const hs_error *e, hs_response *res);
} hs_config;

void hs_config_defaults(hs_config *cfg);

/* Creates a server on loop; cfg may be NULL (all defaults).  Returns 0, or
 * a negative libuv error code with a reason in err (HS_ERR_LEN bytes, NULL
 * allowed). */
int hs_server_new(hs_server **out, uv_loop_t *loop, const hs_config *cfg,
    hs_handler_fn handler, void *ctx, char *err);
/* Binds host (numeric IPv4 or IPv6; NULL means 127.0.0.1) and port (0:
 * any free port) and starts accepting. */
int hs_server_listen(hs_server *s, const char *host, int port, char *err);
/* The port listened on, or a negative libuv error code. */
int hs_server_port(const hs_server *s);
/* Closes at once every connection whose peer id the TLS context no
 * longer allows (after the peer list changed); returns how many. */
int hs_server_recheck(hs_server *s);
/* Connections closed to make room for a peer, and refused by the
 * quotas of an identity (connections or requests in flight). */
unsigned long hs_server_evicted(const hs_server *s);
unsigned long hs_server_over_quota(const hs_server *s);
/* Connections accepted since creation, and open now. */
unsigned long hs_server_accepted(const hs_server *s);
int hs_server_connections(const hs_server *s);
/* A connection that another module accepted and reads (its TLS, its
 * limits, its byte counts stay the owner's), served as if the server had
 * accepted it: the same parsing, bounds, timers, quotas of the identity
 * and handler.  The server writes through write (takes buf, malloc'd;
 * -1 when the connection is gone or going), and says when it is done
 * with the connection: finish (close once what was written has gone) or
 * close (at once); after either it never touches arg again and the link
 * is no longer the owner's to use.  pause (1) asks the owner to stop
 * reading for now, resume to feed what it kept and read again. */
typedef struct hs_link hs_link;
typedef struct {
	int (*write)(void *arg, char *buf, size_t len);
	void (*finish)(void *arg);
	void (*close)(void *arg);
	void (*resume)(void *arg);
} hs_link_ops;
/* peer is "host:port" for the log and the request, addr the host alone
 * (the per-address count), peer_id what its TLS handshake proved (NULL:
 * plain TCP), counted against its identity's requests in flight.  NULL
 * when out of memory. */
hs_link *hs_link_new(hs_server *s, const hs_link_ops *ops, void *arg,
    const char *peer, const char *addr, const uint8_t *peer_id);
/* Plaintext the owner read; nonzero once the link takes no more for now
 * (the owner then stops reading until resume, keeping what it has). */
int hs_link_feed(hs_link *l, const char *data, size_t len);
/* The owner's connection is gone: l's deferred answer (if any) is told
 * (its gone callback), and l is freed. */
void hs_link_close(hs_link *l);

/* Stops listening, drops every connection (responses not yet written are
 * lost) and, once libuv has closed every handle, frees the server and
 * calls closed(arg) (closed may be NULL).  Safe to call from the handler;
 * s must not be used afterwards. */
void hs_server_close(hs_server *s, void (*closed)(void *arg), void *arg);

/* ---- answering later ----
 * A handler that cannot answer at once (its answer comes from other
 * hosts) calls hs_response_defer and returns.  The request stays in
 * flight: it holds its place in the order of the connection's answers,
 * counts against max_requests_per_id, and what the peer pipelined after
 * it is not read until it is answered (nginx's NGX_DONE, then
 * ngx_http_finalize_request).  Later, on the loop, its owner fills
 * hs_deferred_response(d) as a handler fills res and sends it whole with
 * hs_deferred_finish; or streams it: hs_deferred_stream_begin sends the
 * status and headers with Transfer-Encoding: chunked, each
 * hs_deferred_stream_chunk one chunk, hs_deferred_stream_end the last.
 * If the connection goes first (the peer closed, a write failed, a
 * timeout, hs_server_close), gone(arg) is called once, on the loop: the
 * owner cancels its work and must not use d again.  After finish or
 * end, d is freed and gone never comes. */
typedef struct hs_deferred hs_deferred;
/* In the handler: NULL when out of memory (answer res at once then).
 * What res was given before is kept; res is not to be used after. */
hs_deferred *hs_response_defer(hs_response *res, void (*gone)(void *arg),
    void *arg);
hs_response *hs_deferred_response(hs_deferred *d);
void hs_deferred_finish(hs_deferred *d);
/* The response's status and headers (its Content-Type included, its
 * body ignored); 0, or UV_ENOMEM (the connection then closes: gone is
 * called). */
int hs_deferred_stream_begin(hs_deferred *d);
int hs_deferred_stream_chunk(hs_deferred *d, const void *data, size_t len);
void hs_deferred_stream_end(hs_deferred *d);

/* Response building, inside the handler only.  These return 0, or
 * UV_EINVAL (a status out of 200..599, a header name that is not a token
 * or is one the server writes itself: Content-Length, Content-Type,
 * Transfer-Encoding, Connection; CR or LF in a value) or UV_ENOMEM; after
 * UV_ENOMEM the response becomes a 500. */
int hs_response_status(hs_response *res, int code);
int hs_response_header(hs_response *res, const char *name,
    const char *value);
/* Copies body; a second call replaces the first.  content_type may be
 * NULL (no Content-Type).  For HEAD only the length is sent; for 204 and
 * 304 the body is dropped. */
int hs_response_body(hs_response *res, const char *content_type,
    const void *body, size_t len);
/* The same without the copy: the server frees body with free() once it
 * is written, or at once if this fails. */
int hs_response_body_owned(hs_response *res, const char *content_type,
    void *body, size_t len);
/* A body that several responses may write at once without a copy each
 * (a checkpoint of tens of megabytes asked for by every peer): its owner
 * holds one reference and each response in flight another, and the
 * buffer goes with the last.  Used on the server's loop thread only. */
typedef struct hs_shared hs_shared;
/* Takes buf (malloc'd), also on failure (NULL: out of memory). */
hs_shared *hs_shared_new(void *buf, size_t len);
const char *hs_shared_data(const hs_shared *b);
size_t hs_shared_len(const hs_shared *b);
void hs_shared_unref(hs_shared *b);
/* The body is b's buffer, sent without a copy; the response holds its
 * own reference until it is written. */
int hs_response_body_shared(hs_response *res, const char *content_type,
    hs_shared *b);
/* A body of len bytes (zeros) written from one static slice, never
 * allocated: a link probe's source. */
int hs_response_body_pattern(hs_response *res, const char *content_type,
    size_t len);
/* What on_exchange will be told this exchange was. */
void hs_response_meter(hs_response *res, int kind, int who);
/* A status with a JSON body (compact), taking o's reference; 500 when o
 * is NULL or cannot be written. */
struct json_t;
int hs_response_json(hs_response *res, int code, struct json_t *o);
/* The HTTP status that answers a failure with a code of kernels/error.h:
 * the status column of its one list, for every handler (KN_ENOMEM, a
 * passing shortage, is 503 so that the sender tries again); 500 for a
 * number outside the list. */
int hs_status_of_error(int code);
/* A status with a one-line text/plain body, for a person: every error
 * answer and the short acknowledgements.  A program reads the status and
 * any header set beside it, never this text. */
int hs_response_text(hs_response *res, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
