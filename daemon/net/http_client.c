/* The HTTP client: libcurl's multi-socket interface on the daemon's libuv
 * loop.  curl tells us which sockets to watch (one uv_poll_t each) and
 * when to wake it (one uv_timer_t); we tell curl what happened and hand
 * finished transfers to their callbacks. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <uv.h>

#include "daemon/net/curl_load.h"
#include "daemon/net/http_client.h"
#include "kernels/error.h"

/* One socket curl wants watched. */
struct hc_sock {
	uv_poll_t poll;
	curl_socket_t fd;
	hc_client *c;
	struct hc_sock *prev, *next;
};

/* One request in flight. */
struct hc_xfer {
	hc_client *c;
	CURL *easy;
	struct curl_slist *headers;
	char *req_body;
	size_t zeros_left;              /* body_zeros still to send */
	char *body;
	size_t body_len, body_cap, max_body;
	int too_big, nomem;
	hc_done_fn done;
	void *ctx;
	const char *want_header;
	char pin[ID_PIN_LEN];
	char errbuf[CURL_ERROR_SIZE];
	struct hc_xfer *prev, *next;
};

struct hc_client {
	const cl_curl *curl;    /* libcurl, loaded by the first client */
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;
	struct hc_xfer *xfers;
	struct hc_sock *socks;
	int handles;            /* timer and polls not yet closed */
	int dispatching;        /* inside done callbacks */
	int closing, torn_down;
	const tls_ctx *tls;
	void (*closed)(void *);
	void *closed_arg;
};

static void
set_err(char *err, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(err, HC_ERR_LEN, fmt, ap);
	va_end(ap);
}

char *
hc_result_take_body(hc_result *r)
{
	char *b = r->body;

	r->body = NULL;
	return b;
}

/* ---- handles ---- */

static void
client_maybe_free(hc_client *c)
{
	void (*closed)(void *);
	void *arg;

	if (!c->torn_down || c->handles > 0)
		return;
	closed = c->closed;
	arg = c->closed_arg;
	free(c);
	if (closed != NULL)
		closed(arg);
}

static void
on_handle_closed(uv_handle_t *h)
{
	hc_client *c = h->data;

	c->handles--;
	client_maybe_free(c);
}

static void
on_poll_closed(uv_handle_t *h)
{
	struct hc_sock *k = h->data;
	hc_client *c = k->c;

	free(k);
	c->handles--;
	client_maybe_free(c);
}

static void
sock_close(struct hc_sock *k)
{
	hc_client *c = k->c;

	if (k->prev != NULL)
		k->prev->next = k->next;
	else
		c->socks = k->next;
	if (k->next != NULL)
		k->next->prev = k->prev;
	uv_close((uv_handle_t *)&k->poll, on_poll_closed);
}

/* ---- finishing transfers ---- */

static void
xfer_free(struct hc_xfer *x)
{
	x->c->curl->easy_cleanup(x->easy);
	x->c->curl->slist_free_all(x->headers);
	free(x->req_body);
	free(x->body);
	free(x);
}

static void
xfer_unlink(struct hc_xfer *x)
{
	hc_client *c = x->c;

	if (x->prev != NULL)
		x->prev->next = x->next;
	else
		c->xfers = x->next;
	if (x->next != NULL)
		x->next->prev = x->prev;
}

/* The code of hc_result for a transfer curl ended with code, from
 * curl's code and the socket's errno (never from curl's text). */
static int
code_of(const struct hc_xfer *x, CURLcode code)
{
	long os_errno = 0;

	switch (code) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
		return HC_ECONNECT;
	case CURLE_OPERATION_TIMEDOUT:
		return HC_ETIMEDOUT;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
		return HC_ETLS;
	case CURLE_OUT_OF_MEMORY:
		return KN_ENOMEM;
	default:
		break;
	}
	/* a send or a receive that TCP itself gave up on */
	if (x->c->curl->easy_getinfo(x->easy, CURLINFO_OS_ERRNO,
	    &os_errno) == CURLE_OK &&
	    os_errno == ETIMEDOUT)
		return HC_ETIMEDOUT;
	return KN_EIO;
}

/* Calls done with what curl knows of the transfer, then frees it;
 * cancelled is the error to report instead of curl's, or NULL. */
static void
xfer_finish(struct hc_xfer *x, CURLcode code, const char *cancelled)
{
	const cl_curl *curl = x->c->curl;
	hc_result r;
	char msg[CURL_ERROR_SIZE + 96];
	long status = 0, header_size = 0, request_size = 0;
	curl_off_t down = 0, up = 0, total_us = 0, pre_us = 0;
	struct curl_header *h;

	memset(&r, 0, sizeof(r));
	curl->easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	curl->easy_getinfo(x->easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
	curl->easy_getinfo(x->easy, CURLINFO_HEADER_SIZE, &header_size);
	curl->easy_getinfo(x->easy, CURLINFO_SIZE_UPLOAD_T, &up);
	curl->easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &request_size);
	curl->easy_getinfo(x->easy, CURLINFO_TOTAL_TIME_T, &total_us);
	curl->easy_getinfo(x->easy, CURLINFO_PRETRANSFER_TIME_T, &pre_us);
	r.bytes_in = (size_t)down + (size_t)header_size;
	r.bytes_out = (size_t)up + (size_t)request_size;
	r.total_s = (double)total_us / 1e6;
	r.pretransfer_s = (double)pre_us / 1e6;
	if (cancelled != NULL) {
		r.error = cancelled;
		r.code = HC_ECANCELLED;
	} else if (x->too_big || code == CURLE_FILESIZE_EXCEEDED) {
		snprintf(msg, sizeof(msg), "response body exceeds the limit "
		    "of %zu bytes (max_body_bytes)", x->max_body);
		r.error = msg;
		r.code = HC_ETOOLARGE;
	} else if (x->nomem) {
		r.error = "out of memory receiving the response body";
		r.code = KN_ENOMEM;
	} else if (code != CURLE_OK) {
		snprintf(msg, sizeof(msg), "%s", x->errbuf[0] ? x->errbuf :
		    curl->easy_strerror(code));
		r.error = msg;
		r.code = code_of(x, code);
	}
	if (r.error == NULL) {
		r.status = status;
		r.body = x->body;
		r.body_len = x->body_len;
		x->body = NULL;
		if (curl->easy_header(x->easy, "ETag", 0, CURLH_HEADER, -1,
		    &h) == CURLHE_OK)
			r.etag = h->value;
		if (x->want_header != NULL && curl->easy_header(x->easy,
		    x->want_header, 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
			r.header = h->value;
	}
	x->done(x->ctx, &r);
	free(r.body);
	xfer_free(x);
}

static void client_teardown(hc_client *c);

/* Hands every finished transfer to its callback. */
static void
drain_done(hc_client *c)
{
	CURLMsg *m;
	int left;

	c->dispatching++;
	while (!c->closing &&
	    (m = c->curl->multi_info_read(c->multi, &left)) != NULL) {
		CURL *easy = m->easy_handle;
		CURLcode code = m->data.result;
		struct hc_xfer *x = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		c->curl->easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
		c->curl->multi_remove_handle(c->multi, easy);
		xfer_unlink(x);
		xfer_finish(x, code, NULL);
	}
	if (--c->dispatching == 0 && c->closing && !c->torn_down)
		client_teardown(c);
}

/* ---- curl's callbacks and the loop's ---- */

static void
on_uv_timer(uv_timer_t *t)
{
	hc_client *c = t->data;
	int running;

	c->curl->multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0,
	    &running);
	drain_done(c);
}

static int
on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	hc_client *c = userp;

	(void)multi;
	if (timeout_ms < 0)
		uv_timer_stop(&c->timer);
	else
		/* 0 runs on the next loop iteration: curl must not be
		 * re-entered from its own callback */
		uv_timer_start(&c->timer, on_uv_timer, (uint64_t)timeout_ms,
		    0);
	return 0;
}

static void
on_poll(uv_poll_t *p, int status, int events)
{
	struct hc_sock *k = p->data;
	hc_client *c = k->c;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	c->curl->multi_socket_action(c->multi, k->fd, flags, &running);
	drain_done(c);
}

static int
on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
    void *socketp)
{
	hc_client *c = userp;
	struct hc_sock *k = socketp;
	int events = 0;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (k != NULL) {
			if (!c->torn_down)
				c->curl->multi_assign(c->multi, fd, NULL);
			sock_close(k);
		}
		return 0;
	}
	if (k == NULL) {
		k = calloc(1, sizeof(*k));
		if (k == NULL)
			return -1;
		if (uv_poll_init_socket(c->loop, &k->poll, fd) < 0) {
			free(k);
			return -1;
		}
		k->fd = fd;
		k->c = c;
		k->poll.data = k;
		k->next = c->socks;
		if (c->socks != NULL)
			c->socks->prev = k;
		c->socks = k;
		c->handles++;
		c->curl->multi_assign(c->multi, fd, k);
	}
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		events |= UV_READABLE;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		events |= UV_WRITABLE;
	return uv_poll_start(&k->poll, events, on_poll) < 0 ? -1 : 0;
}

static size_t
on_body(char *ptr, size_t size, size_t nmemb, void *userp)
{
	struct hc_xfer *x = userp;
	size_t n = size * nmemb;

	if (n > x->max_body - x->body_len) {
		x->too_big = 1;
		return 0;               /* aborts the transfer */
	}
	if (x->body_len + n + 1 > x->body_cap) {
		size_t need = x->body_len + n + 1;
		size_t ncap = x->body_cap ? 2 * x->body_cap : 64 * 1024;
		curl_off_t cl = -1;
		char *nb;

		/* the declared length, when there is one, sizes it once */
		if (x->body_cap == 0 && x->c->curl->easy_getinfo(x->easy,
		    CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
		    cl > 0 && (size_t)cl <= x->max_body)
			ncap = (size_t)cl + 1;
		if (ncap > x->max_body + 1)
			ncap = x->max_body + 1;
		if (ncap < need)
			ncap = need;
		nb = realloc(x->body, ncap);
		if (nb == NULL) {
			x->nomem = 1;
			return 0;
		}
		x->body = nb;
		x->body_cap = ncap;
	}
	memcpy(x->body + x->body_len, ptr, n);
	x->body_len += n;
	x->body[x->body_len] = '\0';
	return n;
}

/* The zeros of a body_zeros upload, as curl asks for them. */
static size_t
on_read_zeros(char *buf, size_t size, size_t nitems, void *userp)
{
	struct hc_xfer *x = userp;
	size_t n = size * nitems;

	if (n > x->zeros_left)
		n = x->zeros_left;
	memset(buf, 0, n);
	x->zeros_left -= n;
	return n;
}

/* ---- the client ---- */

int
hc_client_new(hc_client **out, uv_loop_t *loop, char *err)
{
	const cl_curl *curl;
	char why[KN_ERR_LEN];
	hc_client *c;

	*out = NULL;
	if ((curl = cl_load(why)) == NULL) {
		set_err(err, "%s", why);
		return UV_EIO;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		set_err(err, "out of memory");
		return UV_ENOMEM;
	}
	c->curl = curl;
	c->multi = curl->multi_init();
	if (c->multi == NULL) {
		set_err(err, "curl_multi_init failed");
		free(c);
		return UV_EIO;
	}
	c->loop = loop;
	uv_timer_init(loop, &c->timer);
	c->timer.data = c;
	c->handles = 1;
	curl->multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl->multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl->multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl->multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	/* curl's default cache holds 4 connections per transfer in flight,
	 * so between transfers it kept only a few and the status probe of
	 * every other peer paid a new TCP and TLS handshake each time */
	curl->multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, HC_MAX_CONNECTS);
	*out = c;
	return 0;
}

void
hc_client_set_tls(hc_client *c, const tls_ctx *tls)
{
	c->tls = tls;
}

const char *
hc_scheme(const hc_client *c)
{
	return c->tls != NULL ? "https" : "http";
}

static int
header_add(struct hc_xfer *x, const char *name, const char *value)
{
	char line[1024];
	struct curl_slist *l;

	if (value != NULL && (strpbrk(value, "\r\n") != NULL ||
	    strlen(name) + strlen(value) + 3 > sizeof(line)))
		return UV_EINVAL;
	/* "Name:" alone stops curl from sending its own */
	snprintf(line, sizeof(line), "%s:%s%s", name, value ? " " : "",
	    value ? value : "");
	if ((l = x->c->curl->slist_append(x->headers, line)) == NULL)
		return UV_ENOMEM;
	x->headers = l;
	return 0;
}

/* Rejects what the client cannot send before anything is allocated. */
static int
request_check(const hc_client *c, const hc_request_opts *o,
    hc_done_fn done, const char *method, int upload, char *err)
{
	if (c->closing) {
		set_err(err, "the client is closing");
		return UV_EINVAL;
	}
	if (o->url == NULL || done == NULL) {
		set_err(err, "a request needs a url and a callback");
		return UV_EINVAL;
	}
	if (!upload && strcmp(method, "GET") != 0 &&
	    strcmp(method, "HEAD") != 0) {
		set_err(err, "method %s not supported", method);
		return UV_EINVAL;
	}
	if (c->tls != NULL && o->pin == NULL) {
		set_err(err, "a request over TLS needs the peer id to pin");
		return UV_EINVAL;
	}
	if ((c->tls != NULL) != (strncmp(o->url, "https://", 8) == 0)) {
		set_err(err, c->tls != NULL ? "TLS is on: the url must be "
		    "https" : "no TLS identity for an https url");
		return UV_EINVAL;
	}
	if (!upload && (o->body_len > 0 || o->body_zeros > 0)) {
		set_err(err, "a %s request has no body", method);
		return UV_EINVAL;
	}
	if (o->body_zeros > 0 && o->body != NULL) {
		set_err(err, "a request has a body or zeros, not both");
		return UV_EINVAL;
	}
	return 0;
}

/* A transfer with its own copy of the request body and its headers. */
static int
xfer_new(struct hc_xfer **out, hc_client *c, const hc_request_opts *o,
    hc_done_fn done, void *ctx, int upload, char *err)
{
	struct hc_xfer *x;
	int r = 0;

	if ((x = calloc(1, sizeof(*x))) == NULL ||
	    (x->easy = c->curl->easy_init()) == NULL ||
	    (upload && o->body_zeros == 0 &&
	    (x->req_body = malloc(o->body_len + 1)) == NULL)) {
		if (x != NULL)
			c->curl->easy_cleanup(x->easy);
		free(x);
		set_err(err, "out of memory");
		return UV_ENOMEM;
	}
	x->c = c;
	x->done = done;
	x->ctx = ctx;
	x->want_header = o->want_header;
	x->max_body = o->max_body_bytes ? o->max_body_bytes :
	    HC_DEFAULT_MAX_BODY_BYTES;
	if (upload && o->body_zeros == 0 && o->body_len > 0)
		memcpy(x->req_body, o->body, o->body_len);
	x->zeros_left = o->body_zeros;
	if (upload)
		r = header_add(x, "Expect", NULL);
	if (r == 0)
		r = header_add(x, "Content-Type", o->content_type);
	if (r == 0 && o->if_none_match != NULL)
		r = header_add(x, "If-None-Match", o->if_none_match);
	if (r < 0) {
		set_err(err, r == UV_EINVAL ? "bad header value" :
		    "out of memory");
		xfer_free(x);
		return r;
	}
	*out = x;
	return 0;
}

#define SETOPT(opt, val) do { \
	if (rc == CURLE_OK) \
		rc = x->c->curl->easy_setopt(x->easy, opt, val); \
} while (0)

/* Mutual TLS 1.3 with no CA: our certificate and key, and the server's
 * key pinned, which curl checks even with peer verification off. */
static CURLcode
xfer_tls(struct hc_xfer *x, const hc_request_opts *o)
{
	const tls_ctx *tls = x->c->tls;
	CURLcode rc = CURLE_OK;

	if (tls == NULL)
		return CURLE_OK;
	id_pin(o->pin, x->pin);
	SETOPT(CURLOPT_SSLCERT, tls_ctx_cert_path(tls));
	SETOPT(CURLOPT_SSLKEY, tls_ctx_key_path(tls));
	SETOPT(CURLOPT_PINNEDPUBLICKEY, x->pin);
	SETOPT(CURLOPT_SSL_VERIFYPEER, 0L);
	SETOPT(CURLOPT_SSL_VERIFYHOST, 0L);
	SETOPT(CURLOPT_SSLVERSION, (long)(CURL_SSLVERSION_TLSv1_3 |
	    CURL_SSLVERSION_MAX_TLSv1_3));
	/* a resumed session would skip the server's certificate */
	SETOPT(CURLOPT_SSL_SESSIONID_CACHE, 0L);
	return rc;
}

/* The first option curl refuses stops the rest; its code comes back. */
static CURLcode
xfer_setopts(struct hc_xfer *x, const hc_request_opts *o,
    const char *method, int upload)
{
	CURLcode rc = xfer_tls(x, o);

	SETOPT(CURLOPT_URL, o->url);
	SETOPT(CURLOPT_PRIVATE, x);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_ERRORBUFFER, x->errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	SETOPT(CURLOPT_PROXY, "");      /* peers are reached directly */
	SETOPT(CURLOPT_WRITEFUNCTION, on_body);
	SETOPT(CURLOPT_WRITEDATA, x);
	SETOPT(CURLOPT_TIMEOUT_MS, o->timeout_ms > 0 ? o->timeout_ms :
	    HC_DEFAULT_TIMEOUT_MS);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms > 0 ?
	    o->connect_timeout_ms : HC_DEFAULT_CONNECT_TIMEOUT_MS);
	SETOPT(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->max_body);
	SETOPT(CURLOPT_HTTPHEADER, x->headers);
	if (strcmp(method, "HEAD") == 0)
		SETOPT(CURLOPT_NOBODY, 1L);
	else if (upload && o->body_zeros > 0) {
		SETOPT(CURLOPT_POST, 1L);
		SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_zeros);
		SETOPT(CURLOPT_READFUNCTION, on_read_zeros);
		SETOPT(CURLOPT_READDATA, x);
		if (strcmp(method, "PUT") == 0)
			SETOPT(CURLOPT_CUSTOMREQUEST, "PUT");
	} else if (upload) {
		SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
		SETOPT(CURLOPT_POSTFIELDS, x->req_body);
		if (strcmp(method, "PUT") == 0)
			SETOPT(CURLOPT_CUSTOMREQUEST, "PUT");
	} else
		SETOPT(CURLOPT_HTTPGET, 1L);
	return rc;
}

int
hc_request(hc_client *c, const hc_request_opts *o, hc_done_fn done,
    void *ctx, char *err)
{
	const char *method = o->method ? o->method : "GET";
	int upload = strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0;
	struct hc_xfer *x;
	CURLcode rc;
	CURLMcode mrc;
	int r;

	if ((r = request_check(c, o, done, method, upload, err)) < 0)
		return r;
	if ((r = xfer_new(&x, c, o, done, ctx, upload, err)) < 0)
		return r;
	if ((rc = xfer_setopts(x, o, method, upload)) != CURLE_OK) {
		set_err(err, "curl refused an option: %s",
		    c->curl->easy_strerror(rc));
		xfer_free(x);
		return UV_EIO;
	}
	if ((mrc = c->curl->multi_add_handle(c->multi, x->easy)) !=
	    CURLM_OK) {
		set_err(err, "curl_multi_add_handle: %s",
		    c->curl->multi_strerror(mrc));
		xfer_free(x);
		return UV_EIO;
	}
	x->next = c->xfers;
	if (c->xfers != NULL)
		c->xfers->prev = x;
	c->xfers = x;
	return 0;
}

/* Cancels what is in flight, then lets curl close its connections and
 * libuv its handles; the last close frees the client. */
static void
client_teardown(hc_client *c)
{
	struct hc_xfer *x;

	while ((x = c->xfers) != NULL) {
		xfer_unlink(x);
		c->curl->multi_remove_handle(c->multi, x->easy);
		xfer_finish(x, CURLE_OK, "cancelled");
	}
	c->torn_down = 1;
	c->curl->multi_cleanup(c->multi);
	c->multi = NULL;
	while (c->socks != NULL)
		sock_close(c->socks);
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

void
hc_client_close(hc_client *c, void (*closed)(void *arg), void *arg)
{
	if (c->closing)
		return;
	c->closing = 1;
	c->closed = closed;
	c->closed_arg = arg;
	if (c->dispatching == 0)
		client_teardown(c);
}
