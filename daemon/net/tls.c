/* The TLS engine (tls.h): one SSL_CTX per identity, TLS 1.3 only, a
 * certificate check of our own in place of a CA chain, and connections
 * whose socket side is a pair of memory BIOs. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "daemon/net/tls.h"
#include "kernels/error.h"

#define TLS_PATH_LEN 1024
#define TLS_WHY_LEN 256

struct tls_ctx {
	SSL_CTX *ssl;
	tls_allow_fn allow;
	void *allow_arg;
	char id[ID_LEN];
	char cert_path[TLS_PATH_LEN], key_path[TLS_PATH_LEN];
};

struct tls_conn {
	tls_ctx *ctx;
	SSL *ssl;
	BIO *in, *out;          /* ciphertext from and to the socket */
	/* what out holds: records appended here and handed over whole by
	 * tls_conn_take, so a large body is not copied again on its way */
	char *sent;
	size_t sent_len, sent_cap;
	int pinned;
	uint8_t pin[ID_BYTES];
	int has_peer;
	uint8_t peer[ID_BYTES];
	int cert_optional;      /* server: a client may show none */
	int established;
	char *held;             /* plaintext written before the handshake */
	size_t held_len;
	char why[TLS_WHY_LEN];
};

/* OpenSSL's reason for the last failure, or what, into err. */
static int
ossl_fail(char *err, int code, const char *what)
{
	unsigned long e = ERR_peek_last_error();
	char buf[160];

	if (e != 0) {
		ERR_error_string_n(e, buf, sizeof(buf));
		kn_error(err, code, "%s: %s", what, buf);
	} else
		kn_error(err, code, "%s", what);
	ERR_clear_error();
	return code;
}

/* The whole check of a peer's certificate, for both roles: in date, a
 * key of a kind identities have, signed by that key (a certificate that
 * was altered or is not self-signed fails), and its id pinned or allowed.
 * The TLS handshake itself proves the peer holds the key. */
static int
check_cert(tls_conn *c, X509 *cert)
{
	EVP_PKEY *pub = X509_get0_pubkey(cert);
	char why[KN_ERR_LEN], id[ID_LEN];
	int type;

	if (pub == NULL) {
		snprintf(c->why, sizeof(c->why), "a certificate without a "
		    "public key");
		return 0;
	}
	type = EVP_PKEY_get_base_id(pub);
	if (type != EVP_PKEY_ED25519 && type != EVP_PKEY_EC) {
		snprintf(c->why, sizeof(c->why), "a certificate with a key of "
		    "another kind (%s)", OBJ_nid2sn(type));
		return 0;
	}
	if (X509_verify(cert, pub) != 1) {
		ERR_clear_error();
		snprintf(c->why, sizeof(c->why), "a certificate not signed by "
		    "its own key");
		return 0;
	}
	if (id_digest(cert, c->peer, why) != 0) {
		snprintf(c->why, sizeof(c->why), "%s", why);
		return 0;
	}
	id_format(c->peer, id);
	if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0 ||
	    X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
		snprintf(c->why, sizeof(c->why), "peer %s presented a "
		    "certificate out of its dates", id);
		return 0;
	}
	if (c->pinned ? !id_equal(c->pin, c->peer) :
	    !tls_ctx_allows(c->ctx, c->peer)) {
		if (c->pinned) {
			char want[ID_LEN];

			id_format(c->pin, want);
			snprintf(c->why, sizeof(c->why), "peer presented id %s, "
			    "expected %s", id, want);
		} else
			snprintf(c->why, sizeof(c->why), "peer id %s is not in "
			    "the peer list, or is quarantined", id);
		return 0;
	}
	c->has_peer = 1;
	return 1;
}

static int
on_verify(X509_STORE_CTX *store, void *arg)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(store,
	    SSL_get_ex_data_X509_STORE_CTX_idx());
	tls_conn *c = ssl != NULL ? SSL_get_app_data(ssl) : NULL;
	X509 *cert = X509_STORE_CTX_get0_cert(store);

	(void)arg;
	if (c == NULL || cert == NULL || !check_cert(c, cert)) {
		X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
		return 0;
	}
	return 1;
}

int
tls_ctx_new(tls_ctx **out, const char *dir, char *err)
{
	tls_ctx *ctx;
	EVP_PKEY *key = NULL;
	X509 *cert = NULL;
	int rc;

	*out = NULL;
	if ((ctx = calloc(1, sizeof(*ctx))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if (snprintf(ctx->cert_path, sizeof(ctx->cert_path), "%s/%s", dir,
	    ID_CERT_FILE) >= (int)sizeof(ctx->cert_path) ||
	    snprintf(ctx->key_path, sizeof(ctx->key_path), "%s/%s", dir,
	    ID_KEY_FILE) >= (int)sizeof(ctx->key_path)) {
		free(ctx);
		return kn_error(err, KN_EINVAL, "%.64s...: path too long", dir);
	}
	if ((rc = id_load(dir, &key, &cert, err)) != 0 ||
	    (rc = id_of_cert(cert, ctx->id, err)) != 0)
		goto fail;
	ERR_clear_error();
	if ((ctx->ssl = SSL_CTX_new(TLS_method())) == NULL) {
		rc = ossl_fail(err, KN_ENOMEM, "making a TLS context");
		goto fail;
	}
	if (SSL_CTX_set_min_proto_version(ctx->ssl, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx->ssl, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_use_certificate(ctx->ssl, cert) != 1 ||
	    SSL_CTX_use_PrivateKey(ctx->ssl, key) != 1 ||
	    SSL_CTX_check_private_key(ctx->ssl) != 1) {
		rc = ossl_fail(err, KN_EINVAL, "setting up TLS");
		goto fail;
	}
	/* Every connection is verified in full: a resumed session would skip
	 * the peer's certificate, so there are no tickets and no cache. */
	SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(ctx->ssl, 0);
	SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_TICKET |
	    SSL_OP_CIPHER_SERVER_PREFERENCE);
	/* AES-128-GCM first: as safe here, and faster than AES-256 where
	 * gigabytes of checkpoints go through it */
	SSL_CTX_set_ciphersuites(ctx->ssl, "TLS_AES_128_GCM_SHA256:"
	    "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384");
	SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER |
	    SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	SSL_CTX_set_cert_verify_callback(ctx->ssl, on_verify, NULL);
	SSL_CTX_set_mode(ctx->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
	EVP_PKEY_free(key);
	X509_free(cert);
	*out = ctx;
	return 0;
fail:
	EVP_PKEY_free(key);
	X509_free(cert);
	SSL_CTX_free(ctx->ssl);
	free(ctx);
	return rc;
}

void
tls_ctx_free(tls_ctx *ctx)
{
	if (ctx == NULL)
		return;
	SSL_CTX_free(ctx->ssl);
	free(ctx);
}

void
tls_ctx_set_allow(tls_ctx *ctx, tls_allow_fn allow, void *arg)
{
	ctx->allow = allow;
	ctx->allow_arg = arg;
}

int
tls_ctx_allows(const tls_ctx *ctx, const uint8_t id[ID_BYTES])
{
	return ctx->allow != NULL && ctx->allow(ctx->allow_arg, id);
}

const char *
tls_ctx_id(const tls_ctx *ctx)
{
	return ctx->id;
}

const char *
tls_ctx_cert_path(const tls_ctx *ctx)
{
	return ctx->cert_path;
}

const char *
tls_ctx_key_path(const tls_ctx *ctx)
{
	return ctx->key_path;
}

/* ---- ciphertext buffers ----
 * A large body leaves as slices of about 1 MiB, each encrypted into a
 * buffer that lives until its write completes.  Fresh buffers of that
 * size come from mmap and cost a page fault per page; a few freed ones
 * are kept for the next slice.  Each buffer carries its capacity in a
 * header before the bytes the caller sees. */

#define TLS_POOL_MAX 8
#define TLS_POOL_LARGEST ((size_t)4 << 20)
#define TLS_HDR 16              /* keeps the bytes 16-byte aligned */

static struct {
	char *base;
	size_t cap;
} pool[TLS_POOL_MAX];
static int npool;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t
buf_cap(const char *buf)
{
	size_t cap;

	memcpy(&cap, buf - TLS_HDR, sizeof(cap));
	return cap;
}

/* buf (NULL: a new one) with room for cap bytes, or NULL. */
static char *
buf_grow(char *buf, size_t cap)
{
	char *base = NULL;
	int i;

	if (buf == NULL) {
		pthread_mutex_lock(&pool_lock);
		for (i = 0; i < npool; i++)
			if (pool[i].cap >= cap) {
				base = pool[i].base;
				cap = pool[i].cap;
				pool[i] = pool[--npool];
				break;
			}
		pthread_mutex_unlock(&pool_lock);
		if (base != NULL)
			return base + TLS_HDR;
	}
	if ((base = realloc(buf ? buf - TLS_HDR : NULL, cap + TLS_HDR)) == NULL)
		return NULL;
	memcpy(base, &cap, sizeof(cap));
	return base + TLS_HDR;
}

void
tls_buf_free(char *buf)
{
	size_t cap;

	if (buf == NULL)
		return;
	cap = buf_cap(buf);
	pthread_mutex_lock(&pool_lock);
	if (npool < TLS_POOL_MAX && cap >= 65536 && cap <= TLS_POOL_LARGEST) {
		pool[npool].base = buf - TLS_HDR;
		pool[npool++].cap = cap;
		buf = NULL;
	}
	pthread_mutex_unlock(&pool_lock);
	if (buf != NULL)
		free(buf - TLS_HDR);
}

/* Room in c->sent for want bytes in all. */
static int
sent_reserve(tls_conn *c, size_t want)
{
	size_t cap = c->sent_cap ? c->sent_cap : 16384;
	char *nb;

	if (want <= c->sent_cap)
		return 1;
	while (cap < want)
		cap *= 2;
	if ((nb = buf_grow(c->sent, cap)) == NULL)
		return 0;
	c->sent = nb;
	c->sent_cap = buf_cap(nb);
	return 1;
}

/* ---- the output BIO: a buffer of ours ---- */

static BIO_METHOD *out_method;
static CRYPTO_ONCE out_once = CRYPTO_ONCE_STATIC_INIT;

static int
out_write(BIO *b, const char *data, size_t len, size_t *written)
{
	tls_conn *c = BIO_get_data(b);

	if (!sent_reserve(c, c->sent_len + len))
		return 0;
	memcpy(c->sent + c->sent_len, data, len);
	c->sent_len += len;
	*written = len;
	return 1;
}

static long
out_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	tls_conn *c = BIO_get_data(b);

	(void)num;
	(void)ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_CTRL_PENDING:
	case BIO_CTRL_WPENDING:
		return c != NULL ? (long)c->sent_len : 0;
	default:
		return 0;
	}
}

static int
out_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

static void
out_method_make(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
	    "shardmeter tls out");

	if (m != NULL && (BIO_meth_set_write_ex(m, out_write) != 1 ||
	    BIO_meth_set_ctrl(m, out_ctrl) != 1 ||
	    BIO_meth_set_create(m, out_create) != 1)) {
		BIO_meth_free(m);
		m = NULL;
	}
	out_method = m;
}

/* ---- connections ---- */

int
tls_conn_new(tls_conn **out, tls_ctx *ctx, int server, const uint8_t *pin,
    char *err)
{
	tls_conn *c;

	*out = NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	c->ctx = ctx;
	if (pin != NULL) {
		c->pinned = 1;
		memcpy(c->pin, pin, ID_BYTES);
	}
	ERR_clear_error();
	CRYPTO_THREAD_run_once(&out_once, out_method_make);
	if (out_method == NULL || (c->ssl = SSL_new(ctx->ssl)) == NULL ||
	    (c->in = BIO_new(BIO_s_mem())) == NULL ||
	    (c->out = BIO_new(out_method)) == NULL) {
		BIO_free(c->in);
		SSL_free(c->ssl);
		free(c);
		return ossl_fail(err, KN_ENOMEM, "making a TLS connection");
	}
	/* an empty memory BIO means "more to come", not end of file */
	BIO_set_mem_eof_return(c->in, -1);
	BIO_set_data(c->out, c);
	SSL_set_bio(c->ssl, c->in, c->out);
	SSL_set_app_data(c->ssl, c);
	if (server)
		SSL_set_accept_state(c->ssl);
	else
		SSL_set_connect_state(c->ssl);
	*out = c;
	return 0;
}

void
tls_conn_cert_optional(tls_conn *c)
{
	c->cert_optional = 1;
	/* a certificate shown is still checked in full (on_verify) */
	SSL_set_verify(c->ssl, SSL_VERIFY_PEER, NULL);
}

void
tls_conn_free(tls_conn *c)
{
	if (c == NULL)
		return;
	SSL_free(c->ssl);       /* and both BIOs */
	free(c->held);
	tls_buf_free(c->sent);
	free(c);
}

int
tls_conn_feed(tls_conn *c, const void *data, size_t len)
{
	size_t done = 0;

	while (done < len) {
		size_t n = len - done > (size_t)INT32_MAX ? (size_t)INT32_MAX :
		    len - done;
		int w = BIO_write(c->in, (const char *)data + done, (int)n);

		if (w <= 0)
			return KN_ENOMEM;
		done += (size_t)w;
	}
	return 0;
}

/* A failed SSL call as a code, its reason kept. */
static int
conn_fail(tls_conn *c, int r)
{
	int e = SSL_get_error(c->ssl, r);
	unsigned long q;

	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return 0;
	if (e == SSL_ERROR_ZERO_RETURN)
		return TLS_ECLOSED;
	q = ERR_peek_last_error();
	if (c->why[0] == '\0') {
		char buf[160];

		if (q != 0) {
			ERR_error_string_n(q, buf, sizeof(buf));
			snprintf(c->why, sizeof(c->why), "TLS %s: %s",
			    c->established ? "error" : "handshake failed", buf);
		} else
			snprintf(c->why, sizeof(c->why), "TLS %s",
			    c->established ? "error" : "handshake failed");
	}
	ERR_clear_error();
	return c->established ? KN_EIO : TLS_EHANDSHAKE;
}

/* Sends what was written before the handshake ended. */
static int
flush_held(tls_conn *c)
{
	size_t off = 0;
	int rc = 0;

	while (off < c->held_len) {
		size_t w;
		int r = SSL_write_ex(c->ssl, c->held + off, c->held_len - off,
		    &w);

		if (r != 1) {
			conn_fail(c, r);
			rc = KN_EIO;
			break;
		}
		off += w;
	}
	free(c->held);
	c->held = NULL;
	c->held_len = 0;
	return rc;
}

static int
handshake(tls_conn *c)
{
	int r;

	if (c->established)
		return 0;
	ERR_clear_error();
	if ((r = SSL_do_handshake(c->ssl)) != 1)
		return conn_fail(c, r);
	/* no peer without a certificate we checked, unless asked for */
	if (!c->has_peer && !c->cert_optional) {
		snprintf(c->why, sizeof(c->why), "the peer showed no "
		    "certificate");
		return TLS_EHANDSHAKE;
	}
	c->established = 1;
	return c->held != NULL ? flush_held(c) : 0;
}

int
tls_conn_start(tls_conn *c)
{
	return handshake(c);
}

ssize_t
tls_conn_read(tls_conn *c, void *buf, size_t cap)
{
	size_t n = 0;
	int r;

	if ((r = handshake(c)) != 0)
		return r;
	if (!c->established)
		return 0;
	ERR_clear_error();
	if ((r = SSL_read_ex(c->ssl, buf, cap, &n)) == 1)
		return (ssize_t)n;
	return conn_fail(c, r);
}

int
tls_conn_write(tls_conn *c, const void *data, size_t len)
{
	size_t off = 0;

	if (!c->established) {
		char *h = realloc(c->held, c->held_len + len);

		if (h == NULL)
			return KN_ENOMEM;
		memcpy(h + c->held_len, data, len);
		c->held = h;
		c->held_len += len;
		return handshake(c) < 0 ? KN_EIO : 0;
	}
	/* room for the records at once: 16 KiB each, 22 bytes over */
	if (len > 16384)
		sent_reserve(c, c->sent_len + len + (len / 16384 + 1) * 32);
	ERR_clear_error();
	while (off < len) {
		size_t w;
		int r = SSL_write_ex(c->ssl, (const char *)data + off, len - off,
		    &w);

		if (r != 1) {
			conn_fail(c, r);
			return KN_EIO;
		}
		off += w;
	}
	return 0;
}

void
tls_conn_shutdown(tls_conn *c)
{
	ERR_clear_error();
	if (c->established)
		SSL_shutdown(c->ssl);
	ERR_clear_error();
}

size_t
tls_conn_pending(const tls_conn *c)
{
	return c->sent_len;
}

char *
tls_conn_take(tls_conn *c, size_t *len)
{
	char *buf = c->sent;

	*len = c->sent_len;
	if (c->sent_len == 0)
		return NULL;
	c->sent = NULL;
	c->sent_len = c->sent_cap = 0;
	return buf;
}

int
tls_conn_established(const tls_conn *c)
{
	return c->established;
}

const uint8_t *
tls_conn_peer_id(const tls_conn *c)
{
	return c->has_peer ? c->peer : NULL;
}

const char *
tls_conn_error(const tls_conn *c)
{
	return c->why;
}
