/* A libuv stream with or without the TLS engine (tls.h) between the
 * socket and its user: the HTTP server and the pipeline's links write and
 * read through these three calls and stay the same code in both modes.
 * With tls NULL every call is the plain libuv one. */
#ifndef SM_TLS_STREAM_H
#define SM_TLS_STREAM_H

#include <stddef.h>

#include <uv.h>

#include "daemon/net/tls.h"

typedef struct ts_write_s ts_write_t;
typedef void (*ts_write_cb)(ts_write_t *req, int status);

/* A write request: the caller owns it until cb, and may use data. */
struct ts_write_s {
	uv_write_t w;
	char *cipher;           /* the encrypted bytes in flight (TLS) */
	ts_write_cb cb;
	void *data;
};

/* Writes bufs (n of them) on st, encrypted when tls is set; cb runs once
 * they are written or have failed, as uv_write's does.  0 or a negative
 * libuv code (cb then does not run). */
int ts_write(ts_write_t *req, uv_stream_t *st, tls_conn *tls,
    const uv_buf_t *bufs, unsigned n, ts_write_cb cb);
/* Sends the ciphertext tls has queued by itself (handshake messages,
 * alerts, a close_notify); 0 or a negative libuv code. */
int ts_flush(uv_stream_t *st, tls_conn *tls);

/* Takes plaintext; returns nonzero when it can take no more for now (the
 * rest stays in the engine until ts_feed is called again, with len 0). */
typedef int (*ts_deliver_fn)(void *arg, const char *data, size_t len);

/* Bytes read from st: through the engine when tls is set (its handshake
 * answered on st), then to deliver.  0, or a negative code: TLS_EHANDSHAKE
 * (why in tls_conn_error), TLS_ECLOSED (the peer's close_notify),
 * KN_EIO, KN_ENOMEM, or a libuv code from writing the handshake. */
int ts_feed(uv_stream_t *st, tls_conn *tls, const char *data, size_t len,
    ts_deliver_fn deliver, void *arg);

#endif
