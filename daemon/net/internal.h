/* Internals shared by http_server.c (connections, parsing, timeouts) and
 * http_response.c (the hs_response_* setters, formatting and writing). */
#ifndef SM_DAEMON_NET_INTERNAL_H
#define SM_DAEMON_NET_INTERNAL_H

#include <stddef.h>

#include <http_parser.h>
#include <uv.h>

#include "daemon/net/http_server.h"
#include "daemon/net/tls_stream.h"

#define HS_READ_LEN (64 * 1024)         /* one read from a socket */
#define HS_MAX_PIPELINE 8               /* responses in flight per conn */
#define HS_PEER_LEN 64
#define HS_MSG_LEN 192

enum { HS_T_NONE, HS_T_IDLE, HS_T_REQUEST, HS_T_LINGER, HS_T_HANDSHAKE,
    HS_T_NEXT };

typedef struct hs_conn hs_conn;

/* A listed identity with connections open (http_server_quota.c): what
 * its quotas count.  Freed with its last connection. */
typedef struct hs_ident {
	uint8_t id[ID_BYTES];
	int role;                       /* HS_ROLE_* */
	int conns;                      /* established, not closing */
	struct hs_ident *next;
} hs_ident;

/* Offsets into hs_conn.hbuf, which holds "url\0name\0value\0name\0...". */
struct hs_header {
	size_t name, value;
};

struct hs_response {
	int status;
	char *headers;                  /* "Name: value\r\n" lines */
	size_t headers_len, headers_cap;
	char *content_type;
	char *body;
	size_t body_len;
	hs_shared *shared;              /* body is its buffer, not owned */
	int pattern;                    /* body_len zeros, no body buffer */
	hs_meter meter;
	int nomem;
	hs_conn *conn;                  /* whose request this answers */
	int deferred;                   /* hs_response_defer was called */
};

/* A response answered later (hs_response_defer): its place in the
 * connection's answers is the out queued at defer (the exchange's
 * last, unsent until the answer is whole); what is sent goes in outs
 * queued before it. */
struct hs_deferred {
	hs_conn *c;
	struct hs_out *place;
	hs_response res;
	void (*gone)(void *arg);
	void *arg;
	int head_only, close, streaming;
};

struct hs_conn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_shutdown_t shutdown_req;
	hs_server *srv;
	hs_conn *prev, *next;
	tls_conn *tls;                  /* NULL: plain TCP */
	hs_ident *ident;                /* once its handshake named it */
	/* responses with slices not yet handed to libuv, oldest first: they
	 * go out in this order (http_response.c) */
	struct hs_out *unsent, *unsent_tail;
	char peer[HS_PEER_LEN];
	char addr[HS_PEER_LEN];         /* the peer without its port */
	http_parser parser;
	int handles;                    /* of tcp and timer, still open */
	int timer_kind;
	int outs;                       /* responses in flight */
	unsigned over_limit : 1;        /* accepted beyond max_connections */
	unsigned refused : 1;           /* answered 503 at once, closing */
	unsigned in_body : 1;           /* the headers are in */
	unsigned in_message : 1;        /* a request is partly read */
	unsigned finishing : 1;         /* close once written */
	unsigned lingering : 1;
	unsigned closing : 1;
	unsigned eof : 1;
	unsigned handshaking : 1;       /* TLS, before its first request */
	unsigned discarding : 1;        /* the body is counted, not kept */
	/* a connection the owner reads and writes (hs_link_new): no tcp
	 * handle of ours, only the timer */
	const hs_link_ops *lops;
	void *larg;
	unsigned detached : 1;          /* the owner is no longer told */
	unsigned link_full : 1;         /* the owner stopped reading */
	uint8_t link_id[ID_BYTES];
	int has_link_id;
	/* the answer being waited for: nothing after it is parsed; and one
	 * whose connection went, freed with the connection */
	hs_deferred *waiting, *orphan;
	int writing;                    /* writes handed to libuv, not done */
	char *held;             /* unparsed bytes while the pipeline is full */
	size_t held_len;
	/* the request being read */
	size_t req_in;                  /* bytes the parser consumed for it */
	size_t rate_mark;               /* req_in when the timer was armed */
	size_t header_bytes;
	char *hbuf;
	size_t hlen, hcap;
	struct hs_header *hdrs;
	size_t nhdrs, hdrs_cap;
	int last_cb;
	char *body;
	size_t body_len, body_cap;
	size_t discard_max;             /* the limit of a discarded body */
	size_t continue_bytes;
	int reject_status;
	char reject_msg[HS_MSG_LEN];
	int keep_alive, method, http_major, http_minor;
};

struct hs_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	hs_config cfg;
	hs_handler_fn handler;
	void *ctx;
	http_parser_settings settings;
	hs_conn *conns;
	int nconns, nover;              /* within and beyond the limit */
	hs_ident *idents;               /* those with connections open */
	unsigned long evicted, over_quota;
	size_t buffered;                /* request body bytes held, all conns */
	unsigned long accepted;
	int listening, closing, listener_open;
	void (*closed)(void *);
	void *closed_arg;
	char readbuf[HS_READ_LEN];
	int readbuf_busy;
};
/* http_server.c */

/* Appends n bytes to a growing buffer; -1 when out of memory. */
int hs__buf_add(char **b, size_t *len, size_t *cap, const void *d,
    size_t n);
/* Arms the connection's one timer for what it waits on (HS_T_*). */
void hs__conn_timer(hs_conn *c, int kind);
/* Closes both handles; the connection is freed once libuv is done. */
void hs__conn_close(hs_conn *c);
/* Everything is written: our FIN, then drop input until the peer's. */
void hs__conn_linger(hs_conn *c);
/* Parses what arrived, answering each complete request in turn. */
void hs__conn_feed(hs_conn *c, const char *data, size_t len);
/* The connection's request parser, its callbacks finding c (the one
 * http_parser_init of the tree). */
void hs__conn_parser_init(hs_conn *c);
/* The connection's read callbacks, for uv_read_start. */
void hs__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
void hs__on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);
/* Hands on the plaintext the TLS engine still holds (reading had
 * stopped), then reads again; closes the connection on failure. */
void hs__conn_resume(hs_conn *c);

/* The server answers by itself and closes (malformed or oversized
 * requests, timeouts, limits); parse_error is http-parser's description
 * of a request it refused, else NULL. */
void hs__conn_fail(hs_conn *c, int status, const char *msg);
void hs__conn_fail_parse(hs_conn *c, int status, const char *msg,
    const char *parse_error);
/* Stops reading c for now: its socket, or its owner's (a link). */
void hs__read_stop(hs_conn *c);
/* c is gone before its deferred answer: the owner is told. */
void hs__conn_orphan(hs_conn *c);

/* Open connections from c's address besides c, up to limit. */
int hs__conns_from(const hs_conn *c, int limit);

/* http_server_quota.c */

/* A link whose owner's TLS proved id: counted by its identity for the
 * quotas of requests and bodies (its connections are the owner's to
 * limit).  0, or -1 when out of memory. */
int hs__quota_link(hs_conn *c, const uint8_t *id);

/* Whether the new TLS connection c may stay (max_connections,
 * max_connections_per_addr), room made by closing one still in its
 * handshake if need be, or let in beyond max_connections to learn
 * whether it is a peer. */
int hs__room_tls(hs_server *s, hs_conn *c);

/* The handshake of c is over: counts it against its identity's quota,
 * making room for a peer beyond max_connections.  0 when it may stay;
 * else it was answered 503 and is closing. */
int hs__quota_admit(hs_conn *c);
/* c is closing: its identity counts it out. */
void hs__quota_detach(hs_conn *c);
/* A request of c begins: 0, or -1 when its identity has
 * max_requests_per_id in flight (the reason in msg, HS_MSG_LEN). */
int hs__quota_request(hs_conn *c, char *msg);
/* The body c reads is to grow by more bytes: 0, or -1 when a client's
 * identity would then hold more than max_body_bytes of request bodies
 * over all its connections (the reason in msg, HS_MSG_LEN), so that
 * max_buffered_bytes keeps room for the peers' updates. */
int hs__quota_body(hs_conn *c, size_t more, char *msg);
/* After the peer list changed: each identity's role asked again. */
void hs__quota_recheck(hs_server *s);

/* http_response.c */

/* The answers in flight are fewer: what the peer pipelined is read on,
 * or the idle timer armed. */
void hs__conn_next(hs_conn *c);
/* Ends the responses that never got to the socket (c is closed). */
void hs__conn_drop_unsent(hs_conn *c);
/* Queues one response; takes body (malloc'd) in every case, or with
 * shared its reference (body then points into it, not owned).  With
 * head_only the length is announced and the body not sent; with pattern
 * body is NULL and body_len zeros are sent from a static slice. */
void hs__conn_send(hs_conn *c, int status, const char *content_type,
    const char *headers, size_t headers_len, char *body, size_t body_len,
    hs_shared *shared, int pattern, int head_only, int close,
    hs_meter meter);
/* Queues the handler's response to the request just read (a 500 when it
 * set no status or ran out of memory); takes its body. */
void hs__conn_answer(hs_conn *c, hs_response *res);
/* Lets go of a response's body: its reference, or the buffer. */
void hs__body_release(char *body, hs_shared *shared);
/* Frees a deferred answer and what its response holds. */
void hs__deferred_free(hs_deferred *d);
/* The place of a deferred answer, queued after those before it; NULL
 * when out of memory. */
struct hs_out *hs__conn_defer(hs_conn *c);
/* Writes bytes to c now: through its socket (and TLS) or its owner;
 * for a socket, buf must live until cb. */
int hs__conn_write(hs_conn *c, ts_write_t *w, uv_buf_t *bufs,
    unsigned nbufs, ts_write_cb cb);

#endif
