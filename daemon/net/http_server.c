/* The HTTP/1.1 server: connections on the caller's libuv loop (or read by
 * another module and fed here: links), parsed by http-parser, answered by
 * one handler through asynchronous writes, at once or later.  Each
 * connection parses until a request is complete, pauses the parser
 * there, answers, and goes on with what the peer pipelined (after a
 * deferred answer, once it is sent), so the bytes of each exchange are
 * known exactly for metering.  The one place in the tree that runs
 * http-parser on requests. */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <uv.h>

#include "kernels/error.h"

#include "daemon/net/internal.h"

#define HS_LINGER_MS 2000               /* reading after our FIN */

enum { HS_CB_NONE, HS_CB_URL, HS_CB_FIELD, HS_CB_VALUE };

static const char hs_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";


static void
set_err(char *err, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(err, HS_ERR_LEN, fmt, ap);
	va_end(ap);
}

/* Appends n bytes to a growing buffer; -1 when out of memory. */
int
hs__buf_add(char **b, size_t *len, size_t *cap, const void *d, size_t n)
{
	if (*len + n > *cap) {
		size_t ncap = *cap ? *cap : 256;
		char *nb;

		while (ncap < *len + n)
			ncap *= 2;
		nb = realloc(*b, ncap);
		if (nb == NULL)
			return -1;
		*b = nb;
		*cap = ncap;
	}
	memcpy(*b + *len, d, n);
	*len += n;
	return 0;
}

/* Gives the fields left at zero their defaults. */
static void
config_fill(hs_config *cfg)
{
	if (cfg->max_header_bytes == 0)
		cfg->max_header_bytes = HS_DEFAULT_MAX_HEADER_BYTES;
	if (cfg->max_body_bytes == 0)
		cfg->max_body_bytes = HS_DEFAULT_MAX_BODY_BYTES;
	if (cfg->idle_timeout_ms == 0)
		cfg->idle_timeout_ms = HS_DEFAULT_IDLE_TIMEOUT_MS;
	if (cfg->request_timeout_ms == 0)
		cfg->request_timeout_ms = HS_DEFAULT_REQUEST_TIMEOUT_MS;
	if (cfg->min_body_rate == 0)
		cfg->min_body_rate = HS_DEFAULT_MIN_BODY_RATE;
	if (cfg->max_connections <= 0)
		cfg->max_connections = HS_DEFAULT_MAX_CONNECTIONS;
	if (cfg->max_connections_per_addr <= 0)
		cfg->max_connections_per_addr =
		    HS_DEFAULT_MAX_CONNECTIONS_PER_ADDR;
	if (cfg->handshake_timeout_ms == 0)
		cfg->handshake_timeout_ms = HS_DEFAULT_HANDSHAKE_TIMEOUT_MS;
	if (cfg->header_timeout_ms == 0)
		cfg->header_timeout_ms = HS_DEFAULT_HEADER_TIMEOUT_MS;
	if (cfg->max_connections_per_peer <= 0)
		cfg->max_connections_per_peer =
		    HS_DEFAULT_MAX_CONNECTIONS_PER_PEER;
	if (cfg->max_connections_per_client <= 0)
		cfg->max_connections_per_client =
		    HS_DEFAULT_MAX_CONNECTIONS_PER_CLIENT;
	if (cfg->max_requests_per_id <= 0)
		cfg->max_requests_per_id = HS_DEFAULT_MAX_REQUESTS_PER_ID;
	if (cfg->max_buffered_bytes == 0)
		cfg->max_buffered_bytes = cfg->max_body_bytes >
		    SIZE_MAX / 4 ? SIZE_MAX : 4 * cfg->max_body_bytes;
}

void
hs_config_defaults(hs_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	config_fill(cfg);
}

/* ---- the server's own state ---- */

static void
server_maybe_free(hs_server *s)
{
	void (*closed)(void *);
	void *arg;

	if (!s->closing || s->listener_open || s->conns != NULL)
		return;
	closed = s->closed;
	arg = s->closed_arg;
	free(s);
	if (closed != NULL)
		closed(arg);
}

static void
on_listener_closed(uv_handle_t *h)
{
	hs_server *s = h->data;

	s->listener_open = 0;
	server_maybe_free(s);
}

/* ---- timers ---- */

/* The time a request's headers have. */
static unsigned
header_ms(const hs_config *cfg)
{
	return cfg->header_timeout_ms < cfg->request_timeout_ms ?
	    cfg->header_timeout_ms : cfg->request_timeout_ms;
}

static void
on_conn_timer(uv_timer_t *t)
{
	hs_conn *c = t->data;
	int kind = c->timer_kind;

	c->timer_kind = HS_T_NONE;
	if (kind == HS_T_NEXT) {
		hs__conn_next(c);
		return;
	}
	if (kind == HS_T_REQUEST) {
		const hs_config *cfg = &c->srv->cfg;
		char msg[HS_MSG_LEN];
		double floor = (double)cfg->min_body_rate *
		    cfg->request_timeout_ms / 1000.0;

		/* a body that still flows fast enough gets another period */
		if (c->in_body && (double)(c->req_in - c->rate_mark) >= floor) {
			hs__conn_timer(c, HS_T_REQUEST);
			return;
		}
		if (c->in_body)
			snprintf(msg, sizeof(msg), "request body arriving slower "
			    "than %u bytes/s", cfg->min_body_rate);
		else
			snprintf(msg, sizeof(msg), "request headers not received "
			    "within %u ms", header_ms(cfg));
		hs__conn_fail(c, 408, msg);
	} else {
		const hs_server *s = c->srv;

		/* a deferred answer is its owner's to time; the idle bound
		 * holds again once it is written, or while a slice of it waits
		 * for the peer to take it */
		if (kind == HS_T_IDLE && c->waiting != NULL && c->writing == 0) {
			hs__conn_timer(c, HS_T_IDLE);
			return;
		}
		if (kind == HS_T_HANDSHAKE && s->cfg.on_refused != NULL) {
			char msg[HS_MSG_LEN];

			snprintf(msg, sizeof(msg), "TLS handshake not finished "
			    "within %u ms", s->cfg.handshake_timeout_ms);
			s->cfg.on_refused(s->ctx, c->peer, msg);
		}
		hs__conn_close(c);
	}
}

/* One timer per connection, armed for what the connection waits on:
 * a request's headers have header_ms, then its body request_timeout_ms
 * a period. */
void
hs__conn_timer(hs_conn *c, int kind)
{
	const hs_config *cfg = &c->srv->cfg;

	if (c->closing)
		return;
	c->timer_kind = kind;
	c->rate_mark = c->req_in;
	uv_timer_start(&c->timer, on_conn_timer, kind == HS_T_REQUEST ?
	    (c->in_body ? cfg->request_timeout_ms : header_ms(cfg)) :
	    kind == HS_T_NEXT ? 0 : kind == HS_T_IDLE ?
	    cfg->idle_timeout_ms : kind == HS_T_HANDSHAKE ?
	    cfg->handshake_timeout_ms : HS_LINGER_MS, 0);
}

/* ---- closing a connection ---- */

static void
request_reset(hs_conn *c)
{
	c->req_in = 0;
	c->header_bytes = 0;
	c->hlen = 0;
	c->nhdrs = 0;
	c->last_cb = HS_CB_NONE;
	free(c->body);
	c->srv->buffered -= c->body_cap;
	c->body = NULL;
	c->body_len = c->body_cap = 0;
	c->continue_bytes = 0;
	c->discarding = 0;
	c->discard_max = 0;
	c->reject_status = 0;
	c->reject_msg[0] = '\0';
	c->in_body = 0;
}

static void
on_conn_closed(uv_handle_t *h)
{
	hs_conn *c = h->data;
	hs_server *s = c->srv;

	if (--c->handles > 0)
		return;
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	hs__conn_drop_unsent(c);
	request_reset(c);
	hs__deferred_free(c->orphan);
	free(c->hbuf);
	free(c->hdrs);
	free(c->held);
	tls_conn_free(c->tls);
	free(c);
	server_maybe_free(s);
}

/* The connection can no longer carry its deferred answer: its owner
 * learns it once; the answer's memory goes with the connection, so that
 * a call of the owner's that led here may still return through it. */
void
hs__conn_orphan(hs_conn *c)
{
	hs_deferred *d = c->waiting;

	if (d == NULL)
		return;
	c->waiting = NULL;
	c->orphan = d;
	if (d->gone != NULL)
		d->gone(d->arg);
}

void
hs__read_stop(hs_conn *c)
{
	if (c->lops != NULL)
		c->link_full = 1;
	else
		uv_read_stop((uv_stream_t *)&c->tcp);
}

/* Pending writes and the shutdown request are cancelled by libuv before
 * the close callbacks run, so the connection is freed last. */
void
hs__conn_close(hs_conn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	hs__conn_orphan(c);
	/* counted out at once, so that the limits see it gone */
	hs__quota_detach(c);
	if (c->over_limit)
		c->srv->nover--;
	else
		c->srv->nconns--;
	uv_timer_stop(&c->timer);
	if (c->lops != NULL) {
		/* the owner's socket: it closes it, and forgets the link */
		if (!c->detached) {
			c->detached = 1;
			c->lops->close(c->larg);
		}
	} else
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
	uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
	hs_conn *c = req->data;

	if (status < 0 && !c->closing)
		hs__conn_close(c);
}


/* Everything is written: send our FIN, then read and drop what the peer
 * still sends until its FIN or the linger time, so that a close never
 * resets a response the peer has not read yet. */
void
hs__conn_linger(hs_conn *c)
{
	if (c->closing || c->lingering)
		return;
	hs__conn_orphan(c);
	if (c->lops != NULL) {
		/* the owner lingers as it does for its own closes */
		if (!c->detached) {
			c->detached = 1;
			c->lops->finish(c->larg);
		}
		hs__conn_close(c);
		return;
	}
	if (c->eof) {
		hs__conn_close(c);
		return;
	}
	c->lingering = 1;
	c->shutdown_req.data = c;
	uv_read_stop((uv_stream_t *)&c->tcp);
	if (c->tls != NULL) {
		/* a TLS peer tells a cut-off answer from a whole one by this */
		tls_conn_shutdown(c->tls);
		if (ts_flush((uv_stream_t *)&c->tcp, c->tls) < 0) {
			hs__conn_close(c);
			return;
		}
	}
	if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp,
	    on_shutdown) < 0 ||
	    uv_read_start((uv_stream_t *)&c->tcp, hs__on_alloc,
	    hs__on_read) < 0) {
		hs__conn_close(c);
		return;
	}
	hs__conn_timer(c, HS_T_LINGER);
}

/* The server answers by itself and closes: malformed or oversized
 * requests, timeouts, too many connections. */
void
hs__conn_fail_parse(hs_conn *c, int status, const char *msg,
    const char *parse_error)
{
	const hs_config *cfg = &c->srv->cfg;
	size_t n = strlen(msg);
	char *body;
	hs_response res;

	c->finishing = 1;
	c->in_message = 0;
	hs__read_stop(c);
	hs__conn_timer(c, HS_T_IDLE);
	memset(&res, 0, sizeof(res));
	if (cfg->error_answer != NULL) {
		hs_error e = { status, msg, parse_error };

		cfg->error_answer(c->srv->ctx, &e, &res);
	}
	if (res.status != 0 && !res.nomem) {
		hs__conn_send(c, res.status, res.content_type,
		    res.headers ? res.headers : "", res.headers_len, res.body,
		    res.body_len, res.shared, res.pattern, 0, 1,
		    (hs_meter){ HS_METER_ERROR, -1 });
		free(res.headers);
		free(res.content_type);
		request_reset(c);
		return;
	}
	hs__body_release(res.body, res.shared);
	free(res.headers);
	free(res.content_type);
	if ((body = malloc(n + 1)) != NULL) {
		memcpy(body, msg, n);
		body[n] = '\n';
	}
	hs__conn_send(c, status, "text/plain", "", 0, body, body ? n + 1 : 0,
	    NULL, 0, 0, 1, (hs_meter){ HS_METER_ERROR, -1 });
	request_reset(c);
}

void
hs__conn_fail(hs_conn *c, int status, const char *msg)
{
	hs__conn_fail_parse(c, status, msg, NULL);
}

/* ---- the request, for the handler ---- */

const char *
hs_request_header(const hs_request *req, const char *name)
{
	const hs_conn *c = req->priv;
	size_t i;

	for (i = 0; i < c->nhdrs; i++)
		if (strcasecmp(c->hbuf + c->hdrs[i].name, name) == 0)
			return c->hbuf + c->hdrs[i].value;
	return NULL;
}

char *
hs_request_take_body(const hs_request *req, size_t *len)
{
	hs_conn *c = req->priv;
	char *body = c->body;

	*len = c->body_len;
	c->srv->buffered -= c->body_cap;	/* the caller's now */
	c->body = NULL;
	c->body_len = c->body_cap = 0;
	return body;
}
/* A request is complete and the parser paused after it: run the handler
 * and queue its answer. */
static void
conn_dispatch(hs_conn *c)
{
	hs_server *s = c->srv;
	hs_request req;
	hs_response res;
	char *url = c->hbuf, *q, *query;
	static const char empty[] = "";

	memset(&res, 0, sizeof(res));
	res.meter = (hs_meter){ HS_METER_NONE, -1 };
	res.conn = c;
	req.method = http_method_str((enum http_method)c->method);
	q = url + strcspn(url, "?#");
	req.query = empty;
	if (*q == '?') {
		query = q + 1;
		query[strcspn(query, "#")] = '\0';
		req.query = query;
	}
	*q = '\0';
	req.path = url;
	req.body = c->body ? c->body : empty;
	req.body_len = c->discarding ? 0 : c->body_len;
	req.discarded = c->discarding ? c->body_len : 0;
	req.peer = c->peer;
	req.peer_id = c->tls != NULL ? tls_conn_peer_id(c->tls) :
	    c->has_link_id ? c->link_id : NULL;
	req.http_major = c->http_major;
	req.http_minor = c->http_minor;
	req.link_arg = c->lops != NULL ? c->larg : NULL;
	req.priv = c;
	if (s->handler != NULL)
		s->handler(s->ctx, &req, &res);
	if (res.deferred) {
		/* queued at its place already, perhaps answered already */
	} else if (c->closing) {
		/* the handler closed the server */
		hs__body_release(res.body, res.shared);
	} else
		hs__conn_answer(c, &res);
	free(res.headers);
	free(res.content_type);
	request_reset(c);
	if (c->closing)
		return;
	if (!c->keep_alive)
		c->finishing = 1;
	if (c->finishing) {
		hs__read_stop(c);
		if (c->timer_kind == HS_T_REQUEST)
			hs__conn_timer(c, HS_T_IDLE);
	} else if (!c->in_message)
		hs__conn_timer(c, HS_T_IDLE);
}

/* Parses what arrived, answering each complete request in turn. */
void
hs__conn_feed(hs_conn *c, const char *data, size_t len)
{
	hs_server *s = c->srv;

	while (len > 0 && !c->closing && !c->finishing) {
		size_t n;
		enum http_errno e;

		if (c->outs >= HS_MAX_PIPELINE || c->waiting != NULL ||
		    c->held != NULL) {
			/* bounded: reading stops until responses drain, or a
			 * deferred answer is sent, so answers keep their order */
			char *grown = realloc(c->held, c->held_len + len);

			if (grown == NULL) {
				hs__conn_close(c);
				return;
			}
			memcpy(grown + c->held_len, data, len);
			c->held = grown;
			c->held_len += len;
			hs__read_stop(c);
			return;
		}
		n = http_parser_execute(&c->parser, &s->settings, data, len);
		c->req_in += n;
		data += n;
		len -= n;
		e = HTTP_PARSER_ERRNO(&c->parser);
		if (e == HPE_PAUSED) {
			http_parser_pause(&c->parser, 0);
			conn_dispatch(c);
		} else if (e != HPE_OK) {
			char msg[HS_MSG_LEN];

			c->req_in += len;       /* read, and now dropped */
			if (c->reject_status != 0) {
				hs__conn_fail(c, c->reject_status, c->reject_msg);
				return;
			}
			snprintf(msg, sizeof(msg), "malformed request: %s (%s)",
			    http_errno_description(e), http_errno_name(e));
			hs__conn_fail_parse(c, 400, msg,
			    http_errno_description(e));
			return;
		}
	}
}

size_t
hs_path_number(const char *s, int64_t max, int64_t *out)
{
	int64_t v = 0;
	size_t n = 0;

	if (s[0] == '0' && s[1] >= '0' && s[1] <= '9')
		return 0;
	for (; s[n] >= '0' && s[n] <= '9'; n++) {
		if (v > (max - (s[n] - '0')) / 10)
			return 0;
		v = v * 10 + (s[n] - '0');
	}
	if (n > 0)
		*out = v;
	return n;
}

/* ---- parser callbacks ---- */

static int
reject(hs_conn *c, int status, const char *fmt, ...)
{
	va_list ap;

	c->reject_status = status;
	va_start(ap, fmt);
	vsnprintf(c->reject_msg, sizeof(c->reject_msg), fmt, ap);
	va_end(ap);
	return -1;
}

static int
nomem(hs_conn *c)
{
	return reject(c, 500, "out of memory reading the request");
}

/* Counts header bytes against the limit before storing them. */
static int
header_add(hs_conn *c, const char *at, size_t len, size_t overhead)
{
	size_t max = c->srv->cfg.max_header_bytes;

	c->header_bytes += overhead;
	if (len > max || c->header_bytes > max - len)
		return reject(c, 431, "request headers exceed the limit of "
		    "%zu bytes", max);
	c->header_bytes += len;
	if (hs__buf_add(&c->hbuf, &c->hlen, &c->hcap, at, len) < 0)
		return nomem(c);
	return 0;
}

/* Ends whatever the last callback was storing with a NUL. */
static int
header_end(hs_conn *c)
{
	int r = 0;

	if (c->last_cb == HS_CB_VALUE)  /* trailing whitespace is not part */
		while (c->hlen > c->hdrs[c->nhdrs - 1].value &&
		    (c->hbuf[c->hlen - 1] == ' ' ||
		    c->hbuf[c->hlen - 1] == '\t'))
			c->hlen--;
	if (c->last_cb != HS_CB_NONE || c->hlen == 0)
		r = hs__buf_add(&c->hbuf, &c->hlen, &c->hcap, "", 1);
	if (r == 0 && c->last_cb == HS_CB_FIELD) {
		c->hdrs[c->nhdrs - 1].value = c->hlen;  /* empty value */
		r = hs__buf_add(&c->hbuf, &c->hlen, &c->hcap, "", 1);
	}
	c->last_cb = HS_CB_NONE;
	return r < 0 ? nomem(c) : 0;
}

static int
on_message_begin(http_parser *p)
{
	hs_conn *c = p->data;
	size_t consumed_before = c->req_in;

	request_reset(c);
	c->req_in = consumed_before;
	if (hs__quota_request(c, c->reject_msg) != 0) {
		c->reject_status = 503;
		return -1;
	}
	c->in_message = 1;
	hs__conn_timer(c, HS_T_REQUEST);
	return 0;
}

static int
on_url(http_parser *p, const char *at, size_t len)
{
	hs_conn *c = p->data;

	c->last_cb = HS_CB_URL;
	return header_add(c, at, len, 0);
}

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	hs_conn *c = p->data;

	if (c->last_cb != HS_CB_FIELD) {
		if (c->last_cb != HS_CB_NONE || c->nhdrs == 0)
			if (header_end(c) < 0)
				return -1;
		if (c->nhdrs == c->hdrs_cap) {
			size_t ncap = c->hdrs_cap ? 2 * c->hdrs_cap : 16;
			struct hs_header *nh = realloc(c->hdrs,
			    ncap * sizeof(*nh));

			if (nh == NULL)
				return nomem(c);
			c->hdrs = nh;
			c->hdrs_cap = ncap;
		}
		c->hdrs[c->nhdrs].name = c->hlen;
		c->hdrs[c->nhdrs].value = 0;
		c->nhdrs++;
		c->last_cb = HS_CB_FIELD;
		return header_add(c, at, len, 4);       /* ": " and CRLF */
	}
	return header_add(c, at, len, 0);
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	hs_conn *c = p->data;

	if (c->last_cb != HS_CB_VALUE) {
		if (hs__buf_add(&c->hbuf, &c->hlen, &c->hcap, "", 1) < 0)
			return nomem(c);
		c->hdrs[c->nhdrs - 1].value = c->hlen;
		c->last_cb = HS_CB_VALUE;
	}
	return header_add(c, at, len, 0);
}

static void
on_continue_written(ts_write_t *req, int status)
{
	hs_conn *c = req->data;

	(void)status;
	c->writing--;
	free(req);
}

/* The most body bytes the request being read may bring. */
static size_t
body_max(const hs_conn *c)
{
	return c->discarding ? c->discard_max : c->srv->cfg.max_body_bytes;
}

static int
on_headers_complete(http_parser *p)
{
	hs_conn *c = p->data;
	const hs_config *cfg = &c->srv->cfg;
	size_t max;
	const char *expect;
	hs_request req;

	if (header_end(c) < 0)
		return -1;
	c->in_body = 1;
	/* the body's periods begin */
	if (c->timer_kind == HS_T_REQUEST)
		hs__conn_timer(c, HS_T_REQUEST);
	/* the target is the first string of hbuf */
	if (cfg->discard != NULL && cfg->discard(c->srv->ctx,
	    http_method_str((enum http_method)p->method), c->hbuf,
	    &c->discard_max))
		c->discarding = 1;
	max = body_max(c);
	if (p->http_major != 1 || p->http_minor > 1)
		return reject(c, 505, "HTTP/%u.%u is not supported: HTTP/1.0 "
		    "and HTTP/1.1 only", p->http_major, p->http_minor);
	if (!(p->flags & F_CHUNKED) && p->content_length != ULLONG_MAX &&
	    p->content_length > max)
		return reject(c, 413, "request body of %llu bytes exceeds the "
		    "limit of %zu bytes", (unsigned long long)p->content_length,
		    max);
	req.priv = c;
	expect = hs_request_header(&req, "Expect");
	if (expect != NULL && strcasecmp(expect, "100-continue") == 0 &&
	    p->http_major == 1 && p->http_minor >= 1 &&
	    ((p->flags & F_CHUNKED) || (p->content_length != ULLONG_MAX &&
	    p->content_length > 0))) {
		ts_write_t *w = malloc(sizeof(*w));
		uv_buf_t b = uv_buf_init((char *)hs_continue,
		    sizeof(hs_continue) - 1);

		int r;

		if (w == NULL)
			return nomem(c);
		w->data = c;
		r = hs__conn_write(c, w, &b, 1, on_continue_written);
		if (r != 0)
			free(w);
		if (r >= 0)
			c->continue_bytes += b.len;
	}
	return 0;
}

static int
on_chunk_header(http_parser *p)
{
	hs_conn *c = p->data;
	size_t max = body_max(c);

	if (p->content_length > max - c->body_len)
		return reject(c, 413, "chunked request body exceeds the limit "
		    "of %zu bytes", max);
	return 0;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
	hs_conn *c = p->data;
	size_t max = body_max(c);

	if (len > max - c->body_len)
		return reject(c, 413, "request body exceeds the limit of %zu "
		    "bytes", max);
	if (c->discarding) {
		c->body_len += len;     /* counted, never held */
		return 0;
	}
	if (c->body_len + len + 1 > c->body_cap) {
		/* grows as bytes arrive, never to more than was declared */
		size_t need = c->body_len + len + 1;
		size_t ncap = c->body_cap ? 2 * c->body_cap : 64 * 1024;
		char *nb;

		if (!(p->flags & F_CHUNKED) &&
		    p->content_length != ULLONG_MAX &&
		    ncap > c->body_len + len + p->content_length + 1)
			ncap = c->body_len + len + p->content_length + 1;
		if (ncap > max + 1)
			ncap = max + 1;         /* a body is never longer */
		if (ncap < need)
			ncap = need;
		if (ncap - c->body_cap > c->srv->cfg.max_buffered_bytes -
		    c->srv->buffered)
			return reject(c, 503, "the server holds too many request "
			    "bodies now (limit %zu bytes in all): try again",
			    c->srv->cfg.max_buffered_bytes);
		if (hs__quota_body(c, ncap - c->body_cap, c->reject_msg) != 0) {
			c->reject_status = 503;
			return -1;
		}
		nb = realloc(c->body, ncap);
		if (nb == NULL)
			return reject(c, 500, "out of memory reading the "
			    "request body");
		c->srv->buffered += ncap - c->body_cap;
		c->body = nb;
		c->body_cap = ncap;
	}
	memcpy(c->body + c->body_len, at, len);
	c->body_len += len;
	c->body[c->body_len] = '\0';
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	hs_conn *c = p->data;

	c->in_message = 0;
	c->keep_alive = http_should_keep_alive(p) && !p->upgrade;
	c->method = p->method;
	c->http_major = p->http_major;
	c->http_minor = p->http_minor;
	http_parser_pause(p, 1);
	return 0;
}

/* ---- reading ---- */

void
hs__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	hs_conn *c = h->data;
	hs_server *s = c->srv;

	(void)suggested;
	if (!s->readbuf_busy) {
		s->readbuf_busy = 1;
		*buf = uv_buf_init(s->readbuf, sizeof(s->readbuf));
		return;
	}
	buf->base = malloc(HS_READ_LEN);
	buf->len = buf->base ? HS_READ_LEN : 0;
}

/* The TLS handshake of c is over: counted against its identity's
 * quota.  Whether it stays. */
static int
conn_established(hs_conn *c)
{
	c->handshaking = 0;
	if (hs__quota_admit(c) != 0)
		return 0;
	if (c->timer_kind == HS_T_HANDSHAKE)
		hs__conn_timer(c, HS_T_IDLE);
	return 1;
}

/* Plaintext for the parser; nonzero once the connection takes no more
 * for now (the TLS engine keeps the rest). */
static int
conn_deliver(void *arg, const char *data, size_t len)
{
	hs_conn *c = arg;

	/* the handshake may end and a request follow in one read */
	if (c->handshaking && !conn_established(c))
		return 1;
	hs__conn_feed(c, data, len);
	return c->held != NULL || c->closing || c->finishing || c->lingering;
}

/* A TLS connection that could not be set up or went wrong: the alert
 * (already queued) goes out, then the connection closes. */
static void
conn_tls_failed(hs_conn *c, int rc)
{
	const hs_server *s = c->srv;

	if (rc == TLS_EHANDSHAKE && s->cfg.on_refused != NULL)
		s->cfg.on_refused(s->ctx, c->peer, tls_conn_error(c->tls));
	c->finishing = 1;
	if (rc == TLS_ECLOSED || c->outs == 0)
		hs__conn_linger(c);
}

/* Bytes from the socket, through TLS when it is on. */
static void
conn_read(hs_conn *c, const char *data, size_t len)
{
	int rc = ts_feed((uv_stream_t *)&c->tcp, c->tls, data, len,
	    conn_deliver, c);

	if (rc < 0 && !c->closing) {
		conn_tls_failed(c, rc);
		return;
	}
	if (c->handshaking && tls_conn_established(c->tls) && !c->closing &&
	    !c->finishing)
		conn_established(c);
}

void
hs__conn_resume(hs_conn *c)
{
	if (c->lops != NULL) {
		c->link_full = 0;
		if (!c->detached)
			c->lops->resume(c->larg);
		return;
	}
	if (c->tls != NULL)
		conn_read(c, NULL, 0);
	if (c->closing || c->finishing || c->held != NULL)
		return;
	if (uv_read_start((uv_stream_t *)&c->tcp, hs__on_alloc,
	    hs__on_read) < 0)
		hs__conn_close(c);
}

void
hs__on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	hs_conn *c = st->data;
	hs_server *s = c->srv;

	if (n > 0 && !c->lingering && !c->finishing && !c->closing)
		conn_read(c, buf->base, (size_t)n);
	if (buf->base == s->readbuf)
		s->readbuf_busy = 0;
	else
		free(buf->base);
	if (n >= 0 || c->closing)
		return;
	/* the peer's FIN or an error */
	uv_read_stop(st);
	c->eof = 1;
	/* a peer that goes before its deferred answer has given up on it
	 * (nginx's "client prematurely closed"): its owner cancels */
	if (n != UV_EOF || c->lingering || c->in_message || c->outs == 0 ||
	    c->waiting != NULL)
		hs__conn_close(c);
	else
		c->finishing = 1;       /* answer what came, then close */
}

static int
sockaddr_port(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET6 ?
	    ((const struct sockaddr_in6 *)ss)->sin6_port :
	    ((const struct sockaddr_in *)ss)->sin_port);
}

static void
conn_peer(hs_conn *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];

	strcpy(c->peer, "?");
	strcpy(c->addr, "?");
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) < 0 ||
	    uv_ip_name((struct sockaddr *)&ss, ip, sizeof(ip)) < 0)
		return;
	snprintf(c->addr, sizeof(c->addr), "%s", ip);
	snprintf(c->peer, sizeof(c->peer), ss.ss_family == AF_INET6 ?
	    "[%s]:%d" : "%s:%d", ip, sockaddr_port(&ss));
}

/* Open connections from c's address besides c, up to limit. */
int
hs__conns_from(const hs_conn *c, int limit)
{
	const hs_conn *o;
	int n = 0;

	for (o = c->srv->conns; o != NULL && n < limit; o = o->next)
		if (o != c && !o->closing && !o->over_limit && !o->refused &&
		    strcmp(o->addr, c->addr) == 0)
			n++;
	return n;
}

void
hs__conn_parser_init(hs_conn *c)
{
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
}

static void
on_connection(uv_stream_t *listener, int status)
{
	hs_server *s = listener->data;
	hs_conn *c;

	if (status < 0 || s->closing)
		return;
	/* Out of memory here leaves the connection unaccepted, and libuv
	 * then stops accepting until uv_accept is called: the daemon is in
	 * worse trouble than this. */
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return;
	c->srv = s;
	if (uv_tcp_init(s->loop, &c->tcp) < 0) {
		free(c);
		return;
	}
	uv_timer_init(s->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->handles = 2;
	c->next = s->conns;
	if (s->conns != NULL)
		s->conns->prev = c;
	s->conns = c;
	c->over_limit = s->nconns >= s->cfg.max_connections;
	if (c->over_limit)
		s->nover++;
	else
		s->nconns++;
	if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
		hs__conn_close(c);
		return;
	}
	s->accepted++;
	conn_peer(c);
	uv_tcp_nodelay(&c->tcp, 1);
	hs__conn_parser_init(c);
	if (s->cfg.tls != NULL && !hs__room_tls(s, c)) {
		/* over TLS an answer would first cost a handshake; and a
		 * flood is not logged line by line */
		hs__conn_close(c);
		return;
	}
	if (c->over_limit && s->cfg.tls == NULL) {
		char msg[HS_MSG_LEN];

		if (s->nover > s->cfg.max_connections) {
			hs__conn_close(c);  /* a flood: not even an answer */
			return;
		}
		snprintf(msg, sizeof(msg), "too many connections (limit %d)",
		    s->cfg.max_connections);
		hs__conn_fail(c, 503, msg);
		return;
	}
	if (hs__conns_from(c, s->cfg.max_connections_per_addr) >=
	    s->cfg.max_connections_per_addr) {
		char msg[HS_MSG_LEN];

		snprintf(msg, sizeof(msg), "too many connections from %s "
		    "(limit %d)", c->addr, s->cfg.max_connections_per_addr);
		c->refused = 1;
		hs__conn_fail(c, 503, msg);
		return;
	}
	if (s->cfg.tls != NULL) {
		char err[KN_ERR_LEN];

		if (tls_conn_new(&c->tls, s->cfg.tls, 1, NULL, err) != 0) {
			hs__conn_close(c);
			return;
		}
		c->handshaking = 1;
	}
	if (uv_read_start((uv_stream_t *)&c->tcp, hs__on_alloc,
	    hs__on_read) < 0) {
		hs__conn_close(c);
		return;
	}
	hs__conn_timer(c, c->handshaking ? HS_T_HANDSHAKE : HS_T_IDLE);
}

/* ---- the server ---- */

int
hs_server_new(hs_server **out, uv_loop_t *loop, const hs_config *cfg,
    hs_handler_fn handler, void *ctx, char *err)
{
	hs_server *s;
	int r;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		set_err(err, "out of memory");
		return UV_ENOMEM;
	}
	if (cfg != NULL)
		s->cfg = *cfg;
	config_fill(&s->cfg);
	if ((r = uv_tcp_init(loop, &s->listener)) < 0) {
		set_err(err, "cannot make the listening socket: %s",
		    uv_strerror(r));
		free(s);
		return r;
	}
	s->listener.data = s;
	s->listener_open = 1;
	s->loop = loop;
	s->handler = handler;
	s->ctx = ctx;
	http_parser_settings_init(&s->settings);
	s->settings.on_message_begin = on_message_begin;
	s->settings.on_url = on_url;
	s->settings.on_header_field = on_header_field;
	s->settings.on_header_value = on_header_value;
	s->settings.on_headers_complete = on_headers_complete;
	s->settings.on_chunk_header = on_chunk_header;
	s->settings.on_body = on_body;
	s->settings.on_message_complete = on_message_complete;
	*out = s;
	return 0;
}

int
hs_server_listen(hs_server *s, const char *host, int port, char *err)
{
	struct sockaddr_storage ss;
	int r;

	if (host == NULL)
		host = "127.0.0.1";
	if (s->listening || s->closing) {
		set_err(err, "the server is already listening");
		return UV_EINVAL;
	}
	if (port < 0 || port > 65535) {
		set_err(err, "port %d out of range", port);
		return UV_EINVAL;
	}
	if (strchr(host, ':') != NULL)
		r = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
	else
		r = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
	if (r < 0) {
		set_err(err, "%s is not a numeric IP address", host);
		return r;
	}
	if ((r = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0)) < 0 ||
	    (r = uv_listen((uv_stream_t *)&s->listener, 128,
	    on_connection)) < 0) {
		set_err(err, "cannot listen on %s port %d: %s", host, port,
		    uv_strerror(r));
		return r;
	}
	s->listening = 1;
	return 0;
}

int
hs_server_port(const hs_server *s)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	int r = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss,
	    &len);

	return r < 0 ? r : sockaddr_port(&ss);
}

int
hs_server_recheck(hs_server *s)
{
	hs_conn *c;
	const uint8_t *id;
	int n = 0;

	if (s->cfg.tls == NULL)
		return 0;
	for (c = s->conns; c != NULL; c = c->next)
		if (!c->closing && c->tls != NULL &&
		    (id = tls_conn_peer_id(c->tls)) != NULL &&
		    !tls_ctx_allows(s->cfg.tls, id)) {
			hs__conn_close(c);
			n++;
		}
	hs__quota_recheck(s);
	return n;
}

unsigned long
hs_server_evicted(const hs_server *s)
{
	return s->evicted;
}

unsigned long
hs_server_over_quota(const hs_server *s)
{
	return s->over_quota;
}

unsigned long
hs_server_accepted(const hs_server *s)
{
	return s->accepted;
}

int
hs_server_connections(const hs_server *s)
{
	return s->nconns + s->nover;
}

void
hs_server_close(hs_server *s, void (*closed)(void *arg), void *arg)
{
	hs_conn *c;

	if (s->closing)
		return;
	s->closing = 1;
	s->closed = closed;
	s->closed_arg = arg;
	for (c = s->conns; c != NULL; c = c->next)
		hs__conn_close(c);
	uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
