/* HTTP on the pipeline host's own port: GET /v1/status and, at the entry,
 * POST /v1/completions in the shape OpenAI-style clients send, answered
 * whole or as server-sent events.  A connection whose first byte is a
 * method's capital letter speaks HTTP (no frame length starts with one),
 * so TLS, peer kinds and an open entry's limits are serve_conn.c's; the
 * answer of a completion comes later from the ring, which the synchronous
 * handler of http_server.c cannot wait for.  The bytes of a request and a
 * completion's JSON are read, and bounded, by serve_request.c. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <http_parser.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "daemon/pipeline/serve_request.h"
#include "kernels/clock.h"

#define SH_MAX_HELD ((size_t)64 * 1024)     /* pipelined while busy */

struct sh_conn {
	sr_request req;         /* the request read, then answered */
	int busy;               /* its completion is in flight */
	char *held;             /* bytes after the request, while busy */
	size_t held_len;
	/* the completion in flight */
	int stream;
	int head_sent;          /* the event stream's status line is out */
	int head_only;
	size_t sent;            /* output bytes streamed so far */
	size_t text_sent;       /* of which their text carried */
	int plen;
	uint64_t id;
	long long created;
};

int
sh_is_http(unsigned char first)
{
	return first >= 'A' && first <= 'Z';
}

/* Text for JSON ---------------------------------------------------------- */

/* Length of the UTF-8 sequence at p (n bytes there): 1 to 4; 0 when p
 * does not start a valid one; -1 when it would, were it not cut off. */
static int
utf8_len(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;
	int len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		lo = c == 0xE0 ? 0xA0 : 0x80;
		hi = c == 0xED ? 0x9F : 0xBF;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		lo = c == 0xF0 ? 0x90 : 0x80;
		hi = c == 0xF4 ? 0x8F : 0xBF;
	} else
		return 0;
	for (i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return -1;
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF))
			return 0;
	}
	return len;
}

/* How many of the n bytes at p can go out as text now: all but an
 * unfinished UTF-8 sequence at the end, which waits for its rest. */
static size_t
utf8_whole(const unsigned char *p, size_t n)
{
	size_t i = 0;
	int k;

	while (i < n) {
		if ((k = utf8_len(p + i, n - i)) < 0)
			return i;
		i += k > 0 ? (size_t)k : 1;
	}
	return n;
}

/* The bytes as a JSON string: valid UTF-8 as it is, every other byte as
 * U+FFFD (what a client shows); the exact bytes go beside it in base64. */
static json_t *
text_json(const unsigned char *p, size_t n)
{
	char *u = malloc(3 * n + 1);
	size_t i = 0, o = 0;
	json_t *j;
	int k;

	if (u == NULL)
		return NULL;
	while (i < n) {
		if ((k = utf8_len(p + i, n - i)) > 0) {
			memcpy(u + o, p + i, (size_t)k);
			o += (size_t)k;
			i += (size_t)k;
		} else {
			memcpy(u + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	j = json_stringn_nocheck(u, o);
	free(u);
	return j;
}

static json_t *
base64_json(const unsigned char *p, size_t n)
{
	char *b = malloc(4 * ((n + 2) / 3) + 1);
	json_t *j;

	if (b == NULL)
		return NULL;
	EVP_EncodeBlock((unsigned char *)b, p, (int)n);
	j = json_string(b);
	free(b);
	return j;
}

/* Writing ---------------------------------------------------------------- */

static void
write_copy(conn *c, const char *data, size_t len)
{
	char *b = malloc(len ? len : 1);

	if (b == NULL) {
		sv_conn_close(c, "out of memory");
		return;
	}
	memcpy(b, data, len);
	sv_conn_write(c, b, len);
}

static void request_done(conn *c);
static int feed(conn *c, const char *p, size_t n);

/* A whole response: status and a JSON text (body, malloc'd, taken; NULL:
 * out of memory). */
static void
respond_body(conn *c, int status, const char *reason, char *body)
{
	char head[256];
	size_t blen;
	int hl;

	if (body == NULL) {
		sv_conn_close(c, "out of memory");
		return;
	}
	blen = strlen(body);
	hl = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: "
	    "application/json\r\nContent-Length: %zu\r\n%s\r\n", status, reason,
	    blen + 1, c->http->req.close_after ? "Connection: close\r\n" : "");
	write_copy(c, head, (size_t)hl);
	if (!c->http->head_only) {
		body[blen] = '\n';      /* one line for a person at a terminal */
		sv_conn_write(c, body, blen + 1);
	} else
		free(body);
	request_done(c);
}

/* The same with o (taken) as the body. */
static void
respond_json(conn *c, int status, const char *reason, json_t *o)
{
	char *body = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	respond_body(c, status, reason, body);
}

static const char *
reason_of(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Payload Too Large";
	case 421: return "Misdirected Request";
	case 429: return "Too Many Requests";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Error";
	}
}

/* An error the way OpenAI-style clients read it. */
static json_t *
error_json(int status, const char *msg)
{
	return json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", msg,
	    "type", status < 500 ? "invalid_request_error" : "server_error",
	    "param", "code");
}

static void
respond_error(conn *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
respond_error(conn *c, int status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	respond_json(c, status, reason_of(status), error_json(status, msg));
}

/* One server-sent event in its own chunk: "data: TEXT\n\n". */
static void
sse_event(conn *c, const char *text)
{
	size_t n = strlen(text) + 8;
	char *b = malloc(n + 32);
	int hl;

	if (b == NULL) {
		sv_conn_close(c, "out of memory");
		return;
	}
	hl = snprintf(b, 32, "%zx\r\n", n);
	memcpy(b + hl, "data: ", 6);
	memcpy(b + hl + 6, text, n - 8);
	memcpy(b + hl + n - 2, "\n\n\r\n", 4);
	sv_conn_write(c, b, (size_t)hl + n + 2);
}

static void
sse_json(conn *c, json_t *o)
{
	char *t = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	if (t == NULL) {
		sv_conn_close(c, "out of memory");
		return;
	}
	sse_event(c, t);
	free(t);
}

/* The last event, and the chunked body's end. */
static void
sse_end(conn *c)
{
	sse_event(c, "[DONE]");
	write_copy(c, "0\r\n\r\n", 5);
	request_done(c);
}

/* Completions ------------------------------------------------------------ */

/* A choice with the output bytes [from, to) of out: their text (up to
 * text_to, an unfinished UTF-8 sequence held back while streaming) and
 * the exact bytes in base64. */
static json_t *
choice_json(sh_conn *h, const unsigned char *out, size_t to, size_t text_to,
    const char *finish)
{
	json_t *ch = json_object();

	json_object_set_new(ch, "text", text_json(out + h->text_sent,
	    text_to - h->text_sent));
	json_object_set_new(ch, "bytes", base64_json(out + h->sent,
	    to - h->sent));
	json_object_set_new(ch, "index", json_integer(0));
	json_object_set_new(ch, "logprobs", json_null());
	json_object_set_new(ch, "finish_reason", finish ? json_string(finish) :
	    json_null());
	h->sent = to;
	h->text_sent = text_to;
	return ch;
}

static json_t *
completion_json(sv *s, sh_conn *h, json_t *choice)
{
	char id[40];

	snprintf(id, sizeof(id), "cmpl-%016" PRIx64, h->id);
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", id, "object",
	    "text_completion", "created", (json_int_t)h->created, "model",
	    s->run_id, "choices", choice);
}

static json_t *
usage_json(const sh_conn *h, size_t len)
{
	return json_pack("{s:i,s:I,s:I}", "prompt_tokens", h->plen,
	    "completion_tokens", (json_int_t)len, "total_tokens",
	    (json_int_t)(h->plen + len));
}

void
sh_answer(conn *c, request *r, const unsigned char *data, size_t len)
{
	sh_conn *h = c->http;
	json_t *o;

	(void)r;
	if (c->closing || h == NULL || !h->busy)
		return;
	o = completion_json(c->s, h, choice_json(h, data, len, len,
	    "length"));
	json_object_set_new(o, "usage", usage_json(h, len));
	if (!h->head_sent) {
		respond_json(c, 200, "OK", o);
		return;
	}
	sse_json(c, o);
	sse_end(c);
}

void
sh_fail(conn *c, request *r, sv_err kind, const char *msg)
{
	sh_conn *h = c->http;
	int status = kind == SV_ERR_TIMEOUT ? 504 :
	    kind == SV_ERR_SHUTDOWN ? 503 : 502;

	(void)r;
	if (c->closing || h == NULL || !h->busy)
		return;
	if (!h->head_sent) {
		respond_error(c, status, "%s", msg);
		return;
	}
	/* the status line has gone: the error is an event */
	sse_json(c, error_json(status, msg));
	sse_end(c);
}

int
sh_streams(const conn *c)
{
	return c->http != NULL && c->http->busy && c->http->stream;
}

void
sh_partial(conn *c, request *r, const unsigned char *data,
    const unsigned char *mask, int next_block, int host)
{
	sh_conn *h = c->http;
	const ph_host *by = &c->s->hosts.v[host - 1];
	size_t n = (size_t)(r->end - r->fixed), known = 0, i;
	unsigned char *out;
	json_t *o, *partial, *masked;

	if (c->closing || h == NULL || !h->busy || !h->head_sent ||
	    r->end < r->fixed || (out = malloc(n + 1)) == NULL)
		return;
	/* decided positions stay decided: the prefix decided so far is
	 * the output's, the rest of the window is shown as it stands */
	masked = json_array();
	for (i = 0; i < n; i++) {
		out[i] = mask[r->fixed + i] ? 0 : data[r->fixed + i];
		if (mask[r->fixed + i])
			json_array_append_new(masked, json_integer((json_int_t)i));
		else if (known == i)
			known = i + 1;
	}
	partial = json_pack("{s:i,s:s,s:[i,i],s:i,s:o,s:o}", "host", host,
	    "addr", by->addr, "blocks", by->block_hi, by->block_lo,
	    "next_block", next_block, "bytes", base64_json(out, n), "masked",
	    masked);
	o = completion_json(c->s, h, choice_json(h, out, known,
	    h->text_sent + utf8_whole(out + h->text_sent, known -
	    h->text_sent), NULL));
	json_object_set_new(o, "partial", partial);
	free(out);
	sse_json(c, o);
}

void
sh_partial_byte(conn *c, request *r, int pos)
{
	sh_conn *h = c->http;
	const unsigned char *out = r->seq + r->fixed;
	size_t k = (size_t)(pos - r->fixed) + 1;

	if (c->closing || h == NULL || !h->busy || !h->head_sent)
		return;
	sse_json(c, completion_json(c->s, h, choice_json(h, out, k,
	    h->text_sent + utf8_whole(out + h->text_sent, k - h->text_sent),
	    NULL)));
}

static int
status_of_kind(sv_err kind)
{
	switch (kind) {
	case SV_ERR_INVALID: return 400;
	case SV_ERR_LIMIT: return 429;
	case SV_ERR_MEMORY: return 503;
	default: return 503;
	}
}

static void
post_completions(conn *c)
{
	sv *s = c->s;
	sh_conn *h = c->http;
	pl_frame f = { .type = PL_GEN };
	char msg[PL_MSG_LEN];
	sv_err kind;
	int stream = 0, status;

	if (c->kind == SV_PEER_PREV || c->kind == SV_PEER_HOST) {
		sv_count_error(s, SV_ERR_REFUSED);
		respond_error(c, 403, "hosts of the ring send no completions; "
		    "a client's peer id must be on a client line");
		return;
	}
	if (s->soma != NULL) {
		sv_count_error(s, SV_ERR_REFUSED);
		respond_error(c, 404, "a SOMA host serves no completions: its "
		    "clients route themselves (shardmeter generate --mode soma "
		    "--peers)");
		return;
	}
	if (!s->entry || s->compute == NULL) {
		sv_count_error(s, SV_ERR_REFUSED);
		respond_error(c, 421, "this host is not the entry; send "
		    "completions to %s", s->hosts.v[0].addr);
		return;
	}
	if ((status = sr_completion(h->req.body, h->req.body_len, &s->spec,
	    &f, &stream, msg, sizeof(msg))) != 0) {
		sv_count_error(s, status == 400 ? SV_ERR_INVALID : SV_ERR_MEMORY);
		respond_error(c, status, "%s", msg);
		return;
	}
	h->stream = stream;
	h->sent = h->text_sent = 0;
	h->plen = (int)f.data_len;
	h->id = s->next_id;     /* the ring's id of the request to come */
	h->created = (long long)time(NULL);
	if (sv_start_request(s, c, &f, msg, sizeof(msg), &kind) != 0) {
		pl_frame_clear(&f);
		respond_error(c, status_of_kind(kind), "%s", msg);
		return;
	}
	pl_frame_clear(&f);
	if (h->busy && stream && !c->closing) {
		char head[160];
		int hl = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n"
		    "Content-Type: text/event-stream\r\nCache-Control: no-cache"
		    "\r\nTransfer-Encoding: chunked\r\n%s\r\n", h->req.close_after ?
		    "Connection: close\r\n" : "");

		write_copy(c, head, (size_t)hl);
		h->head_sent = 1;
	}
}

/* Requests ---------------------------------------------------------------- */

static void
get_status(conn *c)
{
	size_t len;

	respond_body(c, 200, "OK", sv_status_json(c->s, &len));
}

static void
handle(conn *c)
{
	sh_conn *h = c->http;
	int method = sr_method(&h->req);
	size_t plen = sr_path_len(&h->req);
	const char *url = h->req.url;

	c->s->st.http_requests++;
	h->head_only = method == HTTP_HEAD;
	if (plen == 10 && memcmp(url, "/v1/status", 10) == 0) {
		if (method != HTTP_GET && method != HTTP_HEAD) {
			sv_count_error(c->s, SV_ERR_INVALID);
			respond_error(c, 405, "%s is not allowed on /v1/status "
			    "(GET)", http_method_str(method));
		} else if (c->kind == SV_PEER_OPEN) {
			sv_count_error(c->s, SV_ERR_REFUSED);
			respond_error(c, 403, "the status is for the host list's "
			    "hosts and clients");
		} else
			get_status(c);
		return;
	}
	if (plen == 15 && memcmp(url, "/v1/completions", 15) == 0) {
		if (method != HTTP_POST) {
			sv_count_error(c->s, SV_ERR_INVALID);
			respond_error(c, 405, "%s is not allowed on "
			    "/v1/completions (POST)", http_method_str(method));
		} else
			post_completions(c);
		return;
	}
	sv_count_error(c->s, SV_ERR_INVALID);
	respond_error(c, 404, "no such resource: %s %.*s (a pipeline host "
	    "serves GET /v1/status and, at the entry, POST /v1/completions)",
	    http_method_str(method), (int)plen, url);
}

/* The request is answered: the connection closes or takes the next. */
static void
request_done(conn *c)
{
	sh_conn *h = c->http;
	char *held;
	size_t n;

	h->busy = 0;
	h->stream = h->head_sent = 0;
	if (h->req.close_after) {
		sr_free(&h->req);
		sv_conn_finish(c);
		return;
	}
	c->partial_since = 0;
	sr_next(&h->req);
	held = h->held;
	n = h->held_len;
	h->held = NULL;
	h->held_len = 0;
	if (n > 0)
		feed(c, held, n);
	free(held);
}

/* Parses n bytes at p (counted already), answering a whole request. */
static int
feed(conn *c, const char *p, size_t n)
{
	sh_conn *h = c->http;
	char msg[PL_MSG_LEN];
	size_t used;
	int status;

	if (h == NULL) {
		if ((h = calloc(1, sizeof(*h))) == NULL) {
			sv_conn_close(c, "out of memory");
			return -1;
		}
		c->http = h;
		sr_init(&h->req);
	}
	if (h->busy || h->req.complete) {
		char *grown;

		if (h->held_len + n > SH_MAX_HELD ||
		    (grown = realloc(h->held, h->held_len + n)) == NULL) {
			sv_conn_close(c, "too many HTTP requests sent ahead");
			return -1;
		}
		memcpy(grown + h->held_len, p, n);
		h->held = grown;
		h->held_len += n;
		return 0;
	}
	status = sr_execute(&h->req, p, n, &used, msg, sizeof(msg));
	/* a request under way since its first byte: serve_conn.c's stall
	 * check */
	if (h->req.begun && c->partial_since == 0)
		c->partial_since = kn_now();
	if (status != 0) {
		sv_count_error(c->s, SV_ERR_INVALID);
		h->req.close_after = 1;
		h->head_only = 0;
		h->req.complete = h->busy = 1;
		respond_error(c, status, "%s", msg);
		return -1;
	}
	if (!h->req.complete)
		return 0;
	/* the bytes after this request wait for its answer; they were
	 * counted already */
	if (used < n) {
		if ((h->held = malloc(n - used)) == NULL) {
			sv_conn_close(c, "out of memory");
			return -1;
		}
		memcpy(h->held, p + used, n - used);
		h->held_len = n - used;
	}
	c->partial_since = 0;
	h->busy = 1;
	handle(c);
	return c->closing ? -1 : 0;
}

int
sh_feed(conn *c, const char *p, size_t n)
{
	c->s->st.bytes_in[SV_BYTES_HTTP] += n;
	return feed(c, p, n);
}

void
sh_conn_free(conn *c)
{
	if (c->http == NULL)
		return;
	sr_free(&c->http->req);
	free(c->http->held);
	free(c->http);
	c->http = NULL;
}
