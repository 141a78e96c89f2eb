/* The response side of the HTTP server: the hs_response_* setters, the
 * status line, headers and body written in slices with back-pressure, and
 * answers given later (hs_deferred_*), whole or as a chunked stream. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <jansson.h>
#include <uv.h>

#include "daemon/net/internal.h"
#include "kernels/error.h"

#define HS_SLICE_LEN (1024 * 1024)      /* body bytes per uv_write */

/* What every slice of a pattern body is made of (hs_response_body_pattern) */
static const char hs_pattern[HS_SLICE_LEN];

/* One response being written: the head and the body in slices, each its
 * own uv_write, so every slice taken by the peer restarts the timer. */
struct hs_out {
	hs_conn *c;
	char *head;
	size_t head_len;
	char *body;                     /* owned unless shared; NULL after HEAD */
	size_t body_len;
	hs_shared *shared;              /* holds body, one reference ours */
	int pattern;                    /* body_len zeros from hs_pattern */
	size_t bytes_in, bytes_extra;   /* request bytes; 100 Continue sent */
	hs_meter meter;
	int pending, failed;
	size_t nreqs, issued, off;      /* slices, those handed to libuv */
	struct hs_out *next;            /* in c->unsent */
	int unlisted;                   /* all handed over, or never will be */
	/* a deferred answer's place: nothing goes past it until it is
	 * whole; the outs that carry its bytes are its pieces, queued
	 * before it, each counted here until it is done */
	int waiting;
	struct hs_out *parent;          /* of a piece */
	int pieces;
	size_t piece_bytes;             /* written by its pieces */
	ts_write_t reqs[];
};

/* ---- shared bodies ---- */

struct hs_shared {
	char *buf;
	size_t len;
	unsigned refs;
};

hs_shared *
hs_shared_new(void *buf, size_t len)
{
	hs_shared *b = malloc(sizeof(*b));

	if (b == NULL) {
		free(buf);
		return NULL;
	}
	b->buf = buf;
	b->len = len;
	b->refs = 1;
	return b;
}

const char *
hs_shared_data(const hs_shared *b)
{
	return b->buf;
}

size_t
hs_shared_len(const hs_shared *b)
{
	return b->len;
}

void
hs_shared_unref(hs_shared *b)
{
	if (b == NULL || --b->refs > 0)
		return;
	free(b->buf);
	free(b);
}

void
hs__body_release(char *body, hs_shared *shared)
{
	if (shared != NULL)
		hs_shared_unref(shared);
	else
		free(body);
}

/* ---- writing responses ---- */

/* Whether every byte of o has been written, or never will be. */
static int
out_settled(const struct hs_out *o)
{
	return o->pending == 0 && o->unlisted && o->pieces == 0;
}

static void
out_done(struct hs_out *o)
{
	hs_conn *c = o->c;
	hs_server *s = c->srv;

	if (o->parent != NULL) {
		/* a piece of a deferred answer: the exchange ends with it */
		struct hs_out *p = o->parent;

		p->pieces--;
		if (o->failed)
			p->failed = 1;
		else
			p->piece_bytes += o->head_len + o->body_len;
		free(o->head);
		hs__body_release(o->body, o->shared);
		free(o);
		if (p->failed)
			hs__conn_close(c);
		if (out_settled(p))
			out_done(p);
		return;
	}
	c->outs--;
	if (s->cfg.on_exchange != NULL && !s->closing)
		s->cfg.on_exchange(s->ctx, c->peer, o->meter, o->bytes_in,
		    o->failed ? 0 : o->head_len + o->body_len + o->bytes_extra +
		    o->piece_bytes);
	if (o->failed)
		hs__conn_close(c);
	free(o->head);
	hs__body_release(o->body, o->shared);
	free(o);
	if (c->closing)
		return;
	if (c->finishing) {
		if (c->outs == 0)
			hs__conn_linger(c);
		return;
	}
	if (c->lops != NULL && c->held != NULL) {
		/* a link's writes end inside its owner's call (a deferred
		 * answer's finish): the next request waits for the loop, as
		 * a socket's does for its write callback */
		hs__conn_timer(c, HS_T_NEXT);
		return;
	}
	hs__conn_next(c);
}

void
hs__conn_next(hs_conn *c)
{
	if (c->held != NULL && c->outs < HS_MAX_PIPELINE &&
	    c->waiting == NULL) {
		char *held = c->held;
		size_t len = c->held_len;

		c->held = NULL;
		c->held_len = 0;
		hs__conn_feed(c, held, len);
		free(held);
		if (c->closing || c->finishing || c->held != NULL)
			return;
		hs__conn_resume(c);
		if (c->closing || c->finishing || c->held != NULL)
			return;
	}
	if (!c->in_message && c->timer_kind != HS_T_REQUEST)
		hs__conn_timer(c, HS_T_IDLE);
}

static void on_write(ts_write_t *req, int status);

/* 0 when handed to libuv (cb comes), 1 when written through a link's
 * owner already (no cb), -1 on failure (no cb). */
int
hs__conn_write(hs_conn *c, ts_write_t *w, uv_buf_t *bufs, unsigned nbufs,
    ts_write_cb cb)
{
	size_t len = 0, off = 0;
	unsigned i;
	char *buf;

	if (c->lops == NULL) {
		if (ts_write(w, (uv_stream_t *)&c->tcp, c->tls, bufs, nbufs,
		    cb) < 0)
			return -1;
		c->writing++;
		return 0;
	}
	if (c->detached)
		return -1;
	for (i = 0; i < nbufs; i++)
		len += bufs[i].len;
	if ((buf = malloc(len > 0 ? len : 1)) == NULL)
		return -1;
	for (i = 0; i < nbufs; i++) {
		memcpy(buf + off, bufs[i].base, bufs[i].len);
		off += bufs[i].len;
	}
	return c->lops->write(c->larg, buf, len) < 0 ? -1 : 1;
}

/* Hands the next slices to libuv: all at once over plain TCP; over TLS
 * two ahead of the socket, so that a slice is encrypted while the one
 * before it is on its way, and a large body is not all encrypted before
 * its first byte leaves. */
static void
out_issue(struct hs_out *o)
{
	hs_conn *c = o->c;

	while (o->issued < o->nreqs && !o->failed && !c->closing &&
	    (c->tls == NULL || o->pending < 2)) {
		uv_buf_t bufs[2];
		unsigned nb = 0;
		size_t n = o->body_len - o->off;
		int r;

		if (o->issued == 0)
			bufs[nb++] = uv_buf_init(o->head,
			    (unsigned)o->head_len);
		if (n > HS_SLICE_LEN)
			n = HS_SLICE_LEN;
		if (n > 0)
			/* libuv and TLS only read what a buffer points to */
			bufs[nb++] = uv_buf_init(o->pattern ? (char *)hs_pattern :
			    o->body + o->off, (unsigned)n);
		o->off += n;
		o->reqs[o->issued].data = o;
		r = hs__conn_write(c, &o->reqs[o->issued], bufs, nb, on_write);
		if (r < 0) {
			o->failed = 1;
			break;
		}
		o->issued++;
		if (r == 0)
			o->pending++;
	}
}

/* The responses of c in order, each once the one before it is all
 * handed over.  One that leaves the list with no write in flight is
 * done, unless it is self (the caller's, which the caller ends). */
static void
conn_issue(hs_conn *c, struct hs_out *self)
{
	struct hs_out *o;

	while ((o = c->unsent) != NULL) {
		if (o->waiting)
			return;         /* a deferred answer not yet whole */
		out_issue(o);
		if (o->issued < o->nreqs && !o->failed && !c->closing)
			return;
		if (o->issued < o->nreqs)
			o->failed = 1;  /* the rest will never go */
		if ((c->unsent = o->next) == NULL)
			c->unsent_tail = NULL;
		o->unlisted = 1;
		if (o != self && out_settled(o))
			out_done(o);
	}
}

void
hs__conn_drop_unsent(hs_conn *c)
{
	struct hs_out *o;

	while ((o = c->unsent) != NULL) {
		c->unsent = o->next;
		o->failed = 1;
		out_done(o);
	}
	c->unsent_tail = NULL;
}

static void
on_write(ts_write_t *req, int status)
{
	struct hs_out *o = req->data;
	hs_conn *c = o->c;

	c->writing--;
	if (status < 0)
		o->failed = 1;
	else if (!c->closing && c->timer_kind == HS_T_IDLE)
		hs__conn_timer(c, HS_T_IDLE);       /* the peer is taking it */
	o->pending--;
	conn_issue(c, o);
	if (out_settled(o))
		out_done(o);
}

static const char *
reason_phrase(int status)
{
	const char *r = http_status_str((enum http_status)status);

	return r[0] == '<' ? "Status" : r;
}

/* One response made ready to queue: its head and its body's slices;
 * takes body (malloc'd) in every case.  With head_only the length is
 * announced and the body not sent; with chunked the body is to come as
 * chunks (none here).  NULL when out of memory. */
static struct hs_out *
out_new(hs_conn *c, int status, const char *content_type,
    const char *headers, size_t headers_len, char *body, size_t body_len,
    hs_shared *shared, int pattern, int head_only, int close, int chunked)
{
	struct hs_out *o;
	size_t slices, nreqs;
	int no_body = status == 204 || status == 304;
	int len;
	char *head;

	if (chunked) {
		hs__body_release(body, shared);
		body = NULL;
		shared = NULL;
		pattern = 0;
		body_len = 0;
	}

	if (no_body || head_only) {
		hs__body_release(body, shared);
		body = NULL;
		shared = NULL;
		pattern = 0;
	}
	slices = body || pattern ? (body_len + HS_SLICE_LEN - 1) /
	    HS_SLICE_LEN : 0;
	nreqs = slices > 0 ? slices : 1;
	o = calloc(1, sizeof(*o) + nreqs * sizeof(ts_write_t));
	head = malloc(headers_len + 512 +
	    (content_type ? strlen(content_type) : 0));
	if (o == NULL || head == NULL) {
		free(o);
		free(head);
		hs__body_release(body, shared);
		return NULL;
	}
	len = sprintf(head, "HTTP/1.1 %d %s\r\n", status,
	    reason_phrase(status));
	if (content_type != NULL && !no_body)
		len += sprintf(head + len, "Content-Type: %s\r\n",
		    content_type);
	if (!no_body && !chunked)
		len += sprintf(head + len, "Content-Length: %zu\r\n",
		    body_len);
	memcpy(head + len, headers, headers_len);
	len += (int)headers_len;
	if (chunked)
		len += sprintf(head + len, "Transfer-Encoding: chunked\r\n");
	if (close)
		len += sprintf(head + len, "Connection: close\r\n");
	else if (c->http_major == 1 && c->http_minor == 0)
		len += sprintf(head + len, "Connection: keep-alive\r\n");
	len += sprintf(head + len, "\r\n");
	o->c = c;
	o->head = head;
	o->head_len = (size_t)len;
	o->body = body;
	o->shared = shared;
	o->body_len = body || pattern ? body_len : 0;
	o->pattern = pattern;
	o->nreqs = nreqs;
	return o;
}

/* Appends o to c's answers. */
static void
out_append(hs_conn *c, struct hs_out *o)
{
	if (c->unsent_tail != NULL)
		c->unsent_tail->next = o;
	else
		c->unsent = o;
	c->unsent_tail = o;
}

/* Queues o (NULL: out of memory, the connection closes) as the answer
 * to the request just read, and sends what may go. */
static void
out_queue(hs_conn *c, struct hs_out *o, hs_meter meter)
{
	if (o == NULL) {
		hs__conn_close(c);
		return;
	}
	o->bytes_in = c->req_in;
	o->bytes_extra = c->continue_bytes;
	o->meter = meter;
	c->outs++;
	out_append(c, o);
	conn_issue(c, o);
	if (out_settled(o))
		out_done(o);
	else if (o->failed)
		hs__conn_close(c);
}

/* Queues one response; takes body (malloc'd) in every case.  With
 * head_only the length is announced and the body not sent. */
void
hs__conn_send(hs_conn *c, int status, const char *content_type,
    const char *headers, size_t headers_len, char *body, size_t body_len,
    hs_shared *shared, int pattern, int head_only, int close,
    hs_meter meter)
{
	out_queue(c, out_new(c, status, content_type, headers, headers_len,
	    body, body_len, shared, pattern, head_only, close, 0), meter);
}

/* The out that answers with res, its body taken: a 500 when building
 * res ran out of memory or set no status (its meter then says so). */
static struct hs_out *
out_of_response(hs_conn *c, hs_response *res, int head_only, int close)
{
	struct hs_out *o;

	if (res->nomem || res->status == 0) {
		hs__body_release(res->body, res->shared);
		res->body = strdup(res->nomem ? "out of memory building the "
		    "response\n" : "the handler set no status\n");
		o = out_new(c, 500, "text/plain", "", 0, res->body,
		    res->body ? strlen(res->body) : 0, NULL, 0, head_only,
		    close, 0);
		res->meter = (hs_meter){ HS_METER_ERROR, -1 };
	} else
		o = out_new(c, res->status, res->content_type,
		    res->headers ? res->headers : "", res->headers_len,
		    res->body, res->body_len, res->shared, res->pattern,
		    head_only, close, 0);
	res->body = NULL;
	res->shared = NULL;
	return o;
}

void
hs__conn_answer(hs_conn *c, hs_response *res)
{
	struct hs_out *o = out_of_response(c, res, c->method == HTTP_HEAD,
	    !c->keep_alive);

	out_queue(c, o, res->meter);
}

/* ---- answers given later ---- */

struct hs_out *
hs__conn_defer(hs_conn *c)
{
	struct hs_out *o = calloc(1, sizeof(*o));

	if (o == NULL)
		return NULL;
	o->c = c;
	o->waiting = 1;
	o->bytes_in = c->req_in;
	o->bytes_extra = c->continue_bytes;
	c->outs++;
	out_append(c, o);
	return o;
}

hs_deferred *
hs_response_defer(hs_response *res, void (*gone)(void *arg), void *arg)
{
	hs_conn *c = res->conn;
	hs_deferred *d;

	if (c == NULL || res->deferred || c->closing ||
	    (d = calloc(1, sizeof(*d))) == NULL)
		return NULL;
	if ((d->place = hs__conn_defer(c)) == NULL) {
		free(d);
		return NULL;
	}
	d->c = c;
	d->gone = gone;
	d->arg = arg;
	d->head_only = c->method == HTTP_HEAD;
	d->close = !c->keep_alive;
	/* what the handler set so far is the answer's */
	d->res = *res;
	d->res.deferred = 0;
	memset(res, 0, sizeof(*res));
	res->deferred = 1;
	c->waiting = d;
	return d;
}

hs_response *
hs_deferred_response(hs_deferred *d)
{
	return &d->res;
}

/* Queues piece p of d's answer before its place, and sends what may go;
 * 0, or -1 when out of memory (the connection then closes). */
static int
deferred_piece(hs_deferred *d, struct hs_out *p)
{
	hs_conn *c = d->c;
	struct hs_out **at;

	if (p == NULL) {
		hs__conn_close(c);
		return -1;
	}
	p->parent = d->place;
	d->place->pieces++;
	for (at = &c->unsent; *at != d->place; at = &(*at)->next)
		;
	p->next = d->place;
	*at = p;
	conn_issue(c, NULL);
	return 0;
}

void
hs__deferred_free(hs_deferred *d)
{
	if (d == NULL)
		return;
	free(d->res.headers);
	free(d->res.content_type);
	hs__body_release(d->res.body, d->res.shared);
	free(d);
}

/* The place of d's answer is free to go: the exchange ends once its
 * pieces are written. */
static void
deferred_release(hs_deferred *d)
{
	hs_conn *c = d->c;

	if (c->waiting == d)
		c->waiting = NULL;
	d->place->waiting = 0;
	d->place->meter = d->res.meter;
	if (!c->closing)
		conn_issue(c, NULL);
	hs__deferred_free(d);
}

void
hs_deferred_finish(hs_deferred *d)
{
	hs_conn *c = d->c;

	c->waiting = NULL;      /* gone no longer applies */
	if (!c->closing)
		deferred_piece(d, out_of_response(c, &d->res, d->head_only,
		    d->close));
	deferred_release(d);
}

int
hs_deferred_stream_begin(hs_deferred *d)
{
	hs_conn *c = d->c;
	hs_response *res = &d->res;

	if (c->closing || d->streaming)
		return UV_EINVAL;
	if (res->nomem || res->status == 0) {
		hs__conn_close(c);
		return UV_ENOMEM;
	}
	d->streaming = 1;
	return deferred_piece(d, out_new(c, res->status, res->content_type,
	    res->headers ? res->headers : "", res->headers_len, NULL, 0, NULL,
	    0, 1, d->close, 1)) == 0 ? 0 : UV_ENOMEM;
}

/* One piece of raw bytes (a chunk and its framing), taken. */
static struct hs_out *
out_raw(hs_conn *c, char *bytes, size_t len)
{
	struct hs_out *o;

	if (bytes == NULL || (o = calloc(1, sizeof(*o) +
	    sizeof(ts_write_t))) == NULL) {
		free(bytes);
		return NULL;
	}
	o->c = c;
	o->head = bytes;
	o->head_len = len;
	o->nreqs = 1;
	return o;
}

int
hs_deferred_stream_chunk(hs_deferred *d, const void *data, size_t len)
{
	hs_conn *c = d->c;
	char *b;
	int hl;

	if (c->closing || !d->streaming)
		return UV_EINVAL;
	if (d->head_only || len == 0)
		return 0;       /* an empty chunk would end the body */
	if ((b = malloc(len + 24)) != NULL) {
		hl = sprintf(b, "%zx\r\n", len);
		memcpy(b + hl, data, len);
		memcpy(b + hl + len, "\r\n", 2);
		len += (size_t)hl + 2;
	}
	return deferred_piece(d, out_raw(c, b, len)) == 0 ? 0 : UV_ENOMEM;
}

void
hs_deferred_stream_end(hs_deferred *d)
{
	hs_conn *c = d->c;

	c->waiting = NULL;
	if (!c->closing && d->streaming && !d->head_only)
		deferred_piece(d, out_raw(c, strdup("0\r\n\r\n"), 5));
	deferred_release(d);
}

/* ---- building a response, in the handler ---- */

int
hs_response_status(hs_response *res, int code)
{
	if (code < 200 || code > 599)
		return UV_EINVAL;
	res->status = code;
	return 0;
}

static int
is_token(const char *s)
{
	static const char extra[] = "!#$%&'*+-.^_`|~";

	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		    (*s >= '0' && *s <= '9') || strchr(extra, *s) != NULL))
			return 0;
	return 1;
}

int
hs_response_header(hs_response *res, const char *name, const char *value)
{
	static const char *const own[] = { "Content-Length", "Content-Type",
	    "Transfer-Encoding", "Connection" };
	size_t i;

	if (!is_token(name) || strpbrk(value, "\r\n") != NULL)
		return UV_EINVAL;
	for (i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (strcasecmp(name, own[i]) == 0)
			return UV_EINVAL;
	if (hs__buf_add(&res->headers, &res->headers_len, &res->headers_cap,
	    name, strlen(name)) < 0 ||
	    hs__buf_add(&res->headers, &res->headers_len, &res->headers_cap,
	    ": ", 2) < 0 ||
	    hs__buf_add(&res->headers, &res->headers_len, &res->headers_cap,
	    value, strlen(value)) < 0 ||
	    hs__buf_add(&res->headers, &res->headers_len, &res->headers_cap,
	    "\r\n", 2) < 0) {
		res->nomem = 1;
		return UV_ENOMEM;
	}
	return 0;
}

int
hs_response_body_owned(hs_response *res, const char *content_type,
    void *body, size_t len)
{
	char *ct = NULL;

	if (content_type != NULL && strpbrk(content_type, "\r\n") != NULL) {
		free(body);
		return UV_EINVAL;
	}
	if (content_type != NULL && (ct = strdup(content_type)) == NULL) {
		free(body);
		res->nomem = 1;
		return UV_ENOMEM;
	}
	free(res->content_type);
	hs__body_release(res->body, res->shared);
	res->shared = NULL;
	res->content_type = ct;
	res->body = body;
	res->body_len = body ? len : 0;
	res->pattern = 0;
	return 0;
}

int
hs_response_body_pattern(hs_response *res, const char *content_type,
    size_t len)
{
	int rc = hs_response_body_owned(res, content_type, NULL, 0);

	if (rc == 0) {
		res->pattern = 1;
		res->body_len = len;
	}
	return rc;
}

int
hs_response_body_shared(hs_response *res, const char *content_type,
    hs_shared *b)
{
	int rc = hs_response_body_owned(res, content_type, NULL, 0);

	if (rc == 0) {
		b->refs++;
		res->shared = b;
		res->body = b->buf;
		res->body_len = b->len;
	}
	return rc;
}

int
hs_response_body(hs_response *res, const char *content_type,
    const void *body, size_t len)
{
	char *copy = malloc(len > 0 ? len : 1);

	if (copy == NULL) {
		res->nomem = 1;
		return UV_ENOMEM;
	}
	if (len > 0)
		memcpy(copy, body, len);
	return hs_response_body_owned(res, content_type, copy, len);
}

void
hs_response_meter(hs_response *res, int kind, int who)
{
	res->meter.kind = kind;
	res->meter.who = who;
}

/* Bytes a message may echo from a request (a path, a method) are not
 * known to be text: anything but printable ASCII is written \xNN, so the
 * body is what its charset says.  Returns the length written to out. */
static size_t
escape_text(const char *in, size_t len, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, o = 0;

	for (i = 0; i < len; i++) {
		unsigned char b = (unsigned char)in[i];

		if (b >= 0x20 && b < 0x7f && b != '\\') {
			if (o + 1 > cap)
				break;
			out[o++] = (char)b;
			continue;
		}
		if (o + 4 > cap)
			break;
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[b >> 4];
		out[o++] = hex[b & 15];
	}
	return o;
}

int
hs_response_text(hs_response *res, int code, const char *fmt, ...)
{
	char msg[512], text[4 * sizeof(msg)];
	va_list ap;
	int len, rc;

	va_start(ap, fmt);
	len = vsnprintf(msg, sizeof(msg) - 1, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	if (len > (int)sizeof(msg) - 2)
		len = (int)sizeof(msg) - 2;
	len = (int)escape_text(msg, (size_t)len, text, sizeof(text) - 1);
	text[len++] = '\n';
	if ((rc = hs_response_status(res, code)) != 0)
		return rc;
	return hs_response_body(res, "text/plain; charset=utf-8", text,
	    (size_t)len);
}

int
hs_response_json(hs_response *res, int code, json_t *o)
{
	char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	int rc;

	json_decref(o);
	if (text == NULL)
		return hs_response_text(res, 500, "out of memory writing JSON");
	if ((rc = hs_response_status(res, code)) != 0) {
		free(text);
		return rc;
	}
	return hs_response_body_owned(res, "application/json", text,
	    strlen(text));
}

/* The status column of kernels/error.h's list; 500 for a number the
 * list does not hold. */
int
hs_status_of_error(int code)
{
	switch (code) {
#define HS__XX(name, status, text) case name: return status;
	KN_ERRNO_MAP(HS__XX)
#undef HS__XX
	}
	return 500;
}
