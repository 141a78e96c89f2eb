/* Mutual TLS 1.3 pinned to peer ids (DESIGN section 5), as an engine of
 * memory buffers: ciphertext from the socket goes in, plaintext comes out,
 * and the other way round, so that the same code serves the HTTP server,
 * the pipeline's libuv links and its blocking client.  There is no CA: a
 * peer's self-signed certificate is accepted when it is in date, signed
 * by its own key, and the SHA-256 of its key (its peer id) is pinned or
 * allowed by the caller's list.  The socket work is tls_stream.c's. */
#ifndef SM_TLS_H
#define SM_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/core/identity.h"

typedef struct tls_ctx tls_ctx;
typedef struct tls_conn tls_conn;

/* Whether the holder of peer id may connect: 1 yes, 0 no.  Called during
 * every handshake that is not pinned, on the thread of that connection. */
typedef int (*tls_allow_fn)(void *arg, const uint8_t id[ID_BYTES]);

/* Its codes in the list of kernels/error.h: the handshake failed (a refused or malformed
 * certificate, a peer that does not speak TLS 1.3, a bad record). */
#define TLS_EHANDSHAKE KN_E_TLS_HANDSHAKE
/* The peer closed the TLS session (close_notify). */
#define TLS_ECLOSED KN_E_TLS_CLOSED

/* A context holding the identity of dir (identity.h) for both roles.
 * 0 or a negative code with the reason in err (KN_ERR_LEN). */
int tls_ctx_new(tls_ctx **out, const char *dir, char *err);
void tls_ctx_free(tls_ctx *ctx);
/* Connections that are not pinned ask allow; without it they are all
 * refused. */
void tls_ctx_set_allow(tls_ctx *ctx, tls_allow_fn allow, void *arg);
/* Whether allow (as set now) takes id: for cutting off connections whose
 * peer left the list. */
int tls_ctx_allows(const tls_ctx *ctx, const uint8_t id[ID_BYTES]);
/* Our own peer id, printed, and the identity's files. */
const char *tls_ctx_id(const tls_ctx *ctx);
const char *tls_ctx_cert_path(const tls_ctx *ctx);
const char *tls_ctx_key_path(const tls_ctx *ctx);

/* A connection in the server role, or the client role pinned to the
 * server's id (pin NULL: asks allow instead). */
int tls_conn_new(tls_conn **out, tls_ctx *ctx, int server,
    const uint8_t *pin, char *err);
void tls_conn_free(tls_conn *c);
/* Server role, before the handshake: a client that shows no certificate
 * completes it (tls_conn_peer_id then stays NULL), so that the caller
 * can answer it; one that shows a certificate is checked as always.  For
 * an open entry's HTTP only. */
void tls_conn_cert_optional(tls_conn *c);

/* Drives the handshake as far as the bytes fed allow (a client's first
 * call makes its hello): 0, or TLS_EHANDSHAKE with tls_conn_error. */
int tls_conn_start(tls_conn *c);
/* Ciphertext read from the socket. */
int tls_conn_feed(tls_conn *c, const void *data, size_t len);
/* Drives the handshake and decrypts into buf (cap bytes): the bytes
 * read, 0 when more ciphertext is needed, or a negative code:
 * TLS_EHANDSHAKE / KN_EIO (with tls_conn_error) or TLS_ECLOSED. */
ssize_t tls_conn_read(tls_conn *c, void *buf, size_t cap);
/* Plaintext to send; before the handshake is over it is held and sent
 * once it is.  0 or KN_ENOMEM / KN_EIO. */
int tls_conn_write(tls_conn *c, const void *data, size_t len);
/* Queues a close_notify. */
void tls_conn_shutdown(tls_conn *c);
/* Ciphertext waiting to go to the socket, and taking it (NULL when there
 * is none). */
size_t tls_conn_pending(const tls_conn *c);
/* The buffer tls_conn_take returns goes back with tls_buf_free (never
 * free()): a few are kept for the next large write. */
char *tls_conn_take(tls_conn *c, size_t *len);
void tls_buf_free(char *buf);

int tls_conn_established(const tls_conn *c);
/* The peer's id once its certificate was accepted, else NULL. */
const uint8_t *tls_conn_peer_id(const tls_conn *c);
/* Why the handshake failed, naming the id presented when there was one;
 * "" otherwise. */
const char *tls_conn_error(const tls_conn *c);

#endif
