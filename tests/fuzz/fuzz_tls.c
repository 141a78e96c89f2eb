/* Fuzz target: the TLS record path (daemon/net/tls.c), as a daemon's server
 * side meets the bytes of a stranger.  The first input byte picks where
 * the rest arrives: 1, after a real handshake between two
 * identities of this process (records that claim to be data, alerts,
 * key updates; a handshake per input is slow, so only this one value);
 * any other, at a fresh connection (the ClientHello and the records of a
 * handshake).  The rest is fed in pieces whose sizes the next bytes
 * give, so that record boundaries fall everywhere.  Nothing may crash,
 * a refusal must come with a reason, and no peer id may be accepted
 * that the allow function did not let in. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/identity.h"
#include "daemon/net/tls.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "tls";

static tls_ctx *server, *client;
static uint8_t client_id[ID_BYTES], server_id[ID_BYTES];

static int
allow_client(void *arg, const uint8_t id[ID_BYTES])
{
	(void)arg;
	return id_equal(id, client_id);
}

static void
identity(const char *dir, const char *name, tls_ctx **ctx,
    uint8_t id[ID_BYTES])
{
	char path[256], err[KN_ERR_LEN], text[ID_LEN];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (id_create(path, 0, err) != 0 || id_of_dir(path, text, err) != 0 ||
	    id_parse(text, id, err) != 0 || tls_ctx_new(ctx, path, err) != 0) {
		fprintf(stderr, "fuzz_tls: %s\n", err);
		abort();
	}
	tls_ctx_set_allow(*ctx, allow_client, NULL);
}

static char dir[] = "/tmp/fuzz_tls.XXXXXX";

/* The identities' files go at exit; the contexts hold what they need. */
static void
cleanup(void)
{
	static const char *const files[] = { "server/key.pem",
	    "server/cert.pem", "client/key.pem", "client/cert.pem", "server",
	    "client", "" };
	char path[256];
	size_t i;

	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		remove(path);
	}
}

/* Two identities, made once in a directory of their own. */
static void
setup(void)
{
	if (server != NULL)
		return;
	if (mkdtemp(dir) == NULL)
		abort();
	atexit(cleanup);
	identity(dir, "server", &server, server_id);
	identity(dir, "client", &client, client_id);
}

/* Carries what a has to send to b. */
static void
carry(tls_conn *a, tls_conn *b)
{
	size_t len;
	char *buf = tls_conn_take(a, &len);

	if (buf != NULL && tls_conn_feed(b, buf, len) != 0)
		abort();
	tls_buf_free(buf);
}

/* A connection the handshake has opened, seen from the server. */
static tls_conn *
established(void)
{
	char err[KN_ERR_LEN], buf[64];
	tls_conn *cl, *sv;
	int i;

	if (tls_conn_new(&cl, client, 0, server_id, err) != 0 ||
	    tls_conn_new(&sv, server, 1, NULL, err) != 0)
		abort();
	tls_conn_start(cl);
	for (i = 0; i < 8 && !(tls_conn_established(sv) &&
	    tls_conn_established(cl)); i++) {
		carry(cl, sv);
		tls_conn_read(sv, buf, sizeof(buf));
		carry(sv, cl);
		tls_conn_read(cl, buf, sizeof(buf));
	}
	if (!tls_conn_established(sv))
		fz_fail("no handshake between two good identities");
	tls_conn_free(cl);
	return sv;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[KN_ERR_LEN], plain[16384];
	const uint8_t *id;
	tls_conn *sv;
	size_t off, sent;
	ssize_t n = 0;

	if (size < 2)
		return 0;
	setup();
	if (data[0] == 1)
		sv = established();
	else if (tls_conn_new(&sv, server, 1, NULL, err) != 0)
		abort();
	/* pieces of 1 to 256 bytes, as the socket might hand them over */
	for (off = 2; off < size && n >= 0; ) {
		size_t piece = 1 + (size_t)data[1] % 256;

		if (piece > size - off)
			piece = size - off;
		if (tls_conn_feed(sv, data + off, piece) != 0)
			abort();
		off += piece;
		while ((n = tls_conn_read(sv, plain, sizeof(plain))) > 0)
			;
		tls_buf_free(tls_conn_take(sv, &sent));  /* our answers: dropped */
	}
	if (n < 0 && n != TLS_ECLOSED && tls_conn_error(sv)[0] == '\0')
		fz_fail("a refused connection without a reason");
	if ((id = tls_conn_peer_id(sv)) != NULL && !id_equal(id, client_id))
		fz_fail("a peer id accepted that the list does not allow");
	tls_conn_free(sv);
	return 0;
}
