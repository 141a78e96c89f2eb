/* libuv streams through the TLS engine (tls_stream.h).  Every ciphertext
 * write goes through uv_write, so handshake records, data and alerts
 * leave in the order the engine made them. */
#include "config.h"

#include <stdlib.h>

#include "daemon/net/tls_stream.h"
#include "kernels/error.h"

#define TS_PLAIN_LEN (64 * 1024)        /* plaintext handed on at once */

static void
on_written(uv_write_t *w, int status)
{
	ts_write_t *req = w->data;

	tls_buf_free(req->cipher);
	req->cipher = NULL;
	req->cb(req, status);
}

int
ts_write(ts_write_t *req, uv_stream_t *st, tls_conn *tls,
    const uv_buf_t *bufs, unsigned n, ts_write_cb cb)
{
	uv_buf_t b;
	size_t len;
	unsigned i;
	int r;

	req->cb = cb;
	req->cipher = NULL;
	req->w.data = req;
	if (tls == NULL)
		return uv_write(&req->w, st, bufs, n, on_written);
	for (i = 0; i < n; i++)
		if (bufs[i].len > 0 &&
		    tls_conn_write(tls, bufs[i].base, bufs[i].len) != 0)
			return UV_EIO;
	req->cipher = tls_conn_take(tls, &len);
	if (req->cipher == NULL && tls_conn_pending(tls) > 0)
		return UV_ENOMEM;
	/* nothing yet (held until the handshake ends): an empty write keeps
	 * the callback's order with the others */
	b = uv_buf_init(req->cipher ? req->cipher : "", (unsigned)len);
	if ((r = uv_write(&req->w, st, &b, 1, on_written)) < 0) {
		tls_buf_free(req->cipher);
		req->cipher = NULL;
	}
	return r;
}

static void
on_flushed(ts_write_t *req, int status)
{
	(void)status;
	free(req);
}

int
ts_flush(uv_stream_t *st, tls_conn *tls)
{
	ts_write_t *req;
	uv_buf_t b;
	size_t len;
	int r;

	if (tls == NULL || tls_conn_pending(tls) == 0)
		return 0;
	if ((req = calloc(1, sizeof(*req))) == NULL)
		return UV_ENOMEM;
	if ((req->cipher = tls_conn_take(tls, &len)) == NULL) {
		free(req);
		return UV_ENOMEM;
	}
	req->cb = on_flushed;
	req->w.data = req;
	b = uv_buf_init(req->cipher, (unsigned)len);
	if ((r = uv_write(&req->w, st, &b, 1, on_written)) < 0) {
		tls_buf_free(req->cipher);
		free(req);
	}
	return r;
}

int
ts_feed(uv_stream_t *st, tls_conn *tls, const char *data, size_t len,
    ts_deliver_fn deliver, void *arg)
{
	char plain[TS_PLAIN_LEN];
	ssize_t n;
	int r;

	if (tls == NULL)
		return len > 0 ? (deliver(arg, data, len), 0) : 0;
	if (len > 0 && (r = tls_conn_feed(tls, data, len)) != 0)
		return r;
	for (;;) {
		n = tls_conn_read(tls, plain, sizeof(plain));
		/* handshake answers and alerts go out before anything else */
		if ((r = ts_flush(st, tls)) < 0)
			return r;
		if (n <= 0)
			return (int)n;
		if (deliver(arg, plain, (size_t)n) != 0)
			return 0;
	}
}
